"""Products, scans and the reductions that come with them, as torch's: prod, cumprod,
cummax / cummin, logcumsumexp, aminmax, nansum / nanmean, var_mean / std_mean. See Note
[Op definitions] in _core.py; the order statistics (median, topk, kthvalue, mode) and the
counting functions are in order.py.

Each forward is a few whole-array calls of the array module (a product, an ``accumulate``);
each backward is written with ops, so double backward works. An op that returns a pair
returns a named tuple named as torch's ``torch.return_types`` (``cummax(values=...,
indices=...)``, ``aminmax(min=..., max=...)``), as ``max(x, dim)`` does.
"""
from __future__ import annotations

import math
from collections import namedtuple
from typing import Any

import numpy

from ..engine.tensor import Tensor, _wrap

from ._core import Node, check_tensor, const, dim_alias, normalize_dim, normalize_dims, record, register, tls
from .elementwise import abs as _abs, add, div, exp, log, mul, sub, where
from .index import along_dim_index, getitem, index_put_zeros
from .math import cumsum
from .reduce import keepdim_shape, mean, sum as _sum
from .shape import cat, expand, reshape
from .stats import StdBackward0, VarBackward0, _correction, _reduction_args, std, var
from .device import to

# torch.return_types.<name>: a named pair that also reads as a tuple
_CummaxResult = namedtuple("cummax", ["values", "indices"])
_CumminResult = namedtuple("cummin", ["values", "indices"])
_AminmaxResult = namedtuple("aminmax", ["min", "max"])

# torch's names for dtypes, in the messages of kernels that refuse one
_TORCH_DTYPE_NAMES = {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
                      "bool": "Bool", "float16": "Half", "float32": "Float", "float64": "Double"}


def _torch_name(dtype: Any) -> str:
    return _TORCH_DTYPE_NAMES.get(numpy.dtype(dtype).name, str(dtype))


def _flip(x: Tensor, dim: int) -> Tensor:
    return getitem(x, (slice(None),) * dim + (slice(None, None, -1),))


def _reversed_cumsum(x: Tensor, dim: int) -> Tensor:
    return _flip(cumsum(_flip(x, dim), dim), dim)


def _positions(xp: Any, n: int, dim: int, ndim: int) -> Any:
    """0..n-1 laid along ``dim`` of an ``ndim``-d array (broadcasts against it)."""
    shape = [1] * ndim
    shape[dim] = n
    return xp.arange(n).reshape(shape)


def _cast_input(x: Tensor, dtype: Any) -> Tensor:
    """``dtype=`` casts first, as torch's reductions do; integers and bools then work in int64."""
    if dtype is not None:
        x = to(x, dtype=dtype)
    if x.dtype.kind in "iub":
        x = _wrap(x._data.astype("int64"), x.device)
    return x


# --- prod -------------------------------------------------------------------------------------

class ProdBackward0(Node):
    """prod over every element: ``g * prod / x`` without zeros; with zeros, torch's
    ``prod_safe_zeros_backward`` (each element's gradient is the product of all the others:
    exclusive cumulative products from both ends), and zeros for two or more zeros outside
    ``create_graph`` (as torch's shortcut: the same values, and no ``0 * inf`` to make NaN)."""

    __slots__ = ("dim", "keepdim")

    def backward(self, g: Tensor) -> tuple:
        x, out = self.saved_tensors()
        if x.ndim == 0:
            return (g,)
        if self.dim is None:  # one slice: the flattened input
            flat = reshape(x, (x._data.size,))
            grad = self._slices(reshape(g, (1,)), flat, reshape(out, (1,)), 0, full=True)
            return (reshape(grad, x.shape),)
        if not self.keepdim:
            shape = keepdim_shape(x.shape, (self.dim,))
            g, out = reshape(g, shape), reshape(out, shape)
        return (self._slices(g, x, out, self.dim, full=False),)

    @staticmethod
    def _slices(g: Tensor, x: Tensor, out: Tensor, dim: int, full: bool) -> Tensor:
        xp = x.device.xp
        zeros = int(xp.count_nonzero(x._data == 0))
        if zeros == 0:
            return mul(g, div(out, x))
        if full and zeros > 1 and not tls.grad_enabled:
            return _wrap(xp.zeros(x.shape, dtype=g.dtype), g.device)
        n = x.shape[dim]
        if n == 0:
            return expand(g, x.shape)
        ones = const(xp.ones(keepdim_shape(x.shape, (dim,)), dtype=x.dtype), x)
        lead = (slice(None),) * dim
        before = cumprod(cat([ones, getitem(x, lead + (slice(0, n - 1),))], dim), dim)
        after = _flip(cumprod(cat([ones, _flip(getitem(x, lead + (slice(1, n),)), dim)], dim), dim), dim)
        return mul(g, mul(before, after))


class ProdBackward1(ProdBackward0):  # prod along a dim, torch's name
    __slots__ = ()


@register
def prod(x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None, axis: Any = None,
         keepdims: Any = None) -> Tensor:
    """The product of all elements, or along ``dim`` (one int), as ``torch.prod``: integer and
    bool inputs multiply in int64, ``dtype`` casts first. The gradient is torch's with zeros
    in the input: with exactly one zero in a slice, that element gets the product of the
    others and the rest 0; with two or more, all 0.

    >>> from threadgrad import engine, ops
    >>> x = engine.tensor([[2.0, 0.0, 3.0], [1.0, 4.0, 5.0]], requires_grad=True)
    >>> ops.prod(x, 1).tolist()
    [0.0, 20.0]
    >>> ops.prod(x, 1).sum().backward(); x.grad.tolist()
    [[0.0, 6.0, 0.0], [20.0, 5.0, 4.0]]
    """
    check_tensor(x, "prod")
    if axis is not None or keepdims is not None:
        dim, keepdim = dim_alias(dim, axis, "prod"), keepdim if keepdims is None else keepdims
    src = _cast_input(x, dtype)
    xp = x.device.xp
    if dim is None:
        d = None
        data = xp.prod(src._data)
    else:
        if not isinstance(dim, (int, numpy.integer)):
            raise TypeError(f"prod(): argument 'dim' must be int, not {type(dim).__name__}")
        d = normalize_dim(dim, src.ndim, "prod")
        data = xp.prod(src._data, axis=d, keepdims=keepdim) if src.ndim else src._data.copy()
    out = _wrap(xp.asarray(data, dtype=src.dtype), x.device)
    if tls.grad_enabled and src._rg:
        node = ProdBackward0() if d is None else ProdBackward1()
        node.dim, node.keepdim = d, keepdim
        record(node, (src,), out, (src, out))
    return out


# --- cumulative ops ---------------------------------------------------------------------------

class CumprodBackward0(Node):
    """cumprod's backward: ``grad_k = sum_{j >= k} g_j * prod_{i <= j, i != k} x_i``. See
    :func:`_cumprod_grad`."""

    __slots__ = ("dim",)

    def backward(self, g: Tensor) -> tuple:
        x, out = self.saved_tensors()
        if x.ndim == 0 or x.shape[self.dim] <= 1:
            return (g,)
        return (_cumprod_grad(g, x, out, self.dim),)


def _cumprod_grad(g: Tensor, x: Tensor, out: Tensor, d: int) -> Tensor:
    """cumprod's gradient in whole-array ops, exact with zeros in ``x`` and with a correct
    derivative of its own there (double backward).

    Without zeros it is torch's ``reversed_cumsum(g * out) / x``. With them, each slice splits
    at its first zero ``z``, and ``y`` is ``x`` with that zero replaced by 1:
    before ``z`` the same sum, over ``g * Q`` with ``Q = cumprod(y) * (x_z past z)``, which
    equals ``out`` but keeps ``x_z`` as a factor (the terms past ``z`` are 0 yet have a
    derivative in ``x_z``); at ``z``, ``reversed_cumsum(g * cumprod(y))``; after ``z``,
    ``x_z`` times cumprod's gradient over ``y`` (one zero fewer: the recursion ends). That
    last part is 0 in value, so it is only built under ``create_graph``, where its derivative
    counts: the first-order gradient stays O(n) whatever the number of zeros."""
    zero = x._data == 0
    if not zero.any():
        return div(_reversed_cumsum(mul(out, g), d), x)
    xp = x.device.xp
    n = x.shape[d]
    pos = _positions(xp, n, d, x.ndim)
    first = xp.where(zero.any(axis=d, keepdims=True), xp.argmax(zero, axis=d, keepdims=True), n)
    before, at = const(pos < first, x), const(pos == first, x)
    y = where(at, 1.0, x)
    prods = cumprod(y, d)
    x_first = _sum(where(at, x, 0.0), d, keepdim=True)  # x at the first zero (0), as a factor
    head = div(_reversed_cumsum(mul(g, where(before, prods, mul(prods, x_first))), d), where(before, x, 1.0))
    at_zero = _reversed_cumsum(mul(g, prods), d)
    after = mul(x_first, _cumprod_grad(g, y, prods, d)) if tls.grad_enabled else 0.0
    return where(before, head, where(at, at_zero, after))


@register
def cumprod(x: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """The cumulative product along ``dim``, as ``torch.cumprod``: integer and bool inputs
    multiply in int64, ``dtype`` casts first; the gradient is exact with zeros in the input.

    >>> from threadgrad import engine, ops
    >>> ops.cumprod(engine.tensor([2.0, 3.0, 0.0, 5.0]), 0).tolist()
    [2.0, 6.0, 0.0, 0.0]
    """
    check_tensor(x, "cumprod")
    d = normalize_dim(dim, x.ndim, "cumprod")
    src = _cast_input(x, dtype)
    data = src._data.cumprod(axis=d) if src.ndim else src._data.copy()
    out = _wrap(x.device.xp.asarray(data, dtype=src.dtype), x.device)
    if tls.grad_enabled and src._rg:
        node = CumprodBackward0()
        node.dim = d
        record(node, (src,), out, (src, out))
    return out


class CummaxBackward0(Node):
    """cummax's backward: each gradient added at the index its value came from (indices
    repeat along the scan, so they accumulate)."""

    __slots__ = ("in_shape", "index")

    def backward(self, g: Tensor) -> tuple:
        if not self.in_shape:
            return (g,)
        return (index_put_zeros(g, self.in_shape, self.index, False),)


class CumminBackward0(CummaxBackward0):
    __slots__ = ()


def _cumulative_extreme(x: Tensor, dim: int, name: str) -> tuple:
    check_tensor(x, name)
    d = normalize_dim(dim, x.ndim, name)
    xp = x.device.xp
    data = x._data
    if data.ndim == 0:
        values, idx = data.copy(), xp.zeros((), dtype="int64")
    else:
        values = (xp.maximum if name == "cummax" else xp.minimum).accumulate(data, axis=d)
        # the latest element that reached the running extreme (torch compares with >= / <=),
        # and once a NaN came, the latest NaN: See Note [Index choice among ties] in order.py
        reached = data == values
        if data.dtype.kind in "fc":
            reached |= xp.isnan(data)
        pos = _positions(xp, data.shape[d], d, data.ndim)
        idx = xp.maximum.accumulate(xp.where(reached, pos, 0), axis=d).astype("int64")
    out = _wrap(xp.asarray(values), x.device)
    if tls.grad_enabled and x._rg:
        node = CummaxBackward0() if name == "cummax" else CumminBackward0()
        node.in_shape, node.index = x.shape, along_dim_index(idx, d, xp) if data.ndim else ()
        record(node, (x,), out)
    return (_CummaxResult if name == "cummax" else _CumminResult)(out, _wrap(idx, x.device))


@register
def cummax(x: Tensor, dim: int) -> Any:
    """``(values, indices)``: the running maximum along ``dim`` and where it was reached, as
    ``torch.cummax`` (ties: the latest index; NaN propagates). The gradient goes to the indices.

    >>> from threadgrad import engine, ops
    >>> r = ops.cummax(engine.tensor([1.0, 3.0, 2.0, 3.0]), 0)
    >>> r.values.tolist(), r.indices.tolist()
    ([1.0, 3.0, 3.0, 3.0], [0, 1, 1, 3])
    """
    return _cumulative_extreme(x, dim, "cummax")


@register
def cummin(x: Tensor, dim: int) -> Any:
    """``(values, indices)``: the running minimum along ``dim``; see :func:`cummax`."""
    return _cumulative_extreme(x, dim, "cummin")


class LogcumsumexpBackward0(Node):
    """torch's ``logcumsumexp_backward``: ``sum_{j >= k} g_j * exp(x_k - out_j)``, with the
    positive and negative parts of ``g`` taken through reversed logcumsumexps in log space
    (the lowest finite number stands for log 0, so no ``-inf - -inf`` appears)."""

    __slots__ = ("dim",)

    def backward(self, g: Tensor) -> tuple:
        x, out = self.saved_tensors()
        if g.ndim == 0 or g._data.size == 0:
            return (g,)
        d = self.dim
        lowest = float(numpy.finfo(g.dtype).min)
        log_abs = log(_abs(g))
        parts = []
        for mask in (g._data > 0, g._data < 0):
            log_part = where(const(mask, g), log_abs, lowest)
            parts.append(exp(add(_flip(logcumsumexp(_flip(sub(log_part, out), d), d), d), x)))
        return (sub(parts[0], parts[1]),)


@register
def logcumsumexp(x: Tensor, dim: int) -> Tensor:
    """``log(cumsum(exp(x), dim))`` without overflow (``logaddexp`` accumulated), as
    ``torch.logcumsumexp``; floating point inputs only, as torch's.

    >>> from threadgrad import engine, ops
    >>> [round(v, 4) for v in ops.logcumsumexp(engine.tensor([0.0, 0.0, 1000.0]), 0).tolist()]
    [0.0, 0.6931, 1000.0]
    """
    check_tensor(x, "logcumsumexp")
    d = normalize_dim(dim, x.ndim, "logcumsumexp")
    if x.dtype.kind not in "f":
        raise NotImplementedError(f"\"logcumsumexp_out_cpu\" not implemented for '{_torch_name(x.dtype)}'")
    xp = x.device.xp
    data = xp.logaddexp.accumulate(x._data, axis=d) if x.ndim else x._data.copy()
    out = _wrap(xp.asarray(data, dtype=x.dtype), x.device)
    if tls.grad_enabled and x._rg:
        node = LogcumsumexpBackward0()
        node.dim = d
        record(node, (x,), out, (x, out))
    return out


# --- aminmax ----------------------------------------------------------------------------------

class AminmaxBackward0(Node):
    """aminmax's backward: each output's gradient shared evenly among the elements equal to it
    (``g * mask / count``, constants), as amin's and amax's."""

    __slots__ = ("dims", "keepdim")

    def backward(self, g_min: Tensor | None, g_max: Tensor | None) -> tuple:
        x, lo, hi = self.saved_tensors()
        kept = keepdim_shape(x.shape, self.dims)
        grad = None
        for g, out in ((g_min, lo), (g_max, hi)):
            if g is None:
                continue
            mask = (x._data == out._data.reshape(kept)).astype(g.dtype)
            share = mask / mask.sum(axis=self.dims, keepdims=True)
            part = mul(reshape(g, kept), const(share, x))
            grad = part if grad is None else add(grad, part)
        return (grad,)


@register
def aminmax(x: Tensor, *, dim: Any = None, keepdim: bool = False) -> Any:
    """``(min, max)`` over every element or along ``dim``, as ``torch.aminmax``; each
    gradient shared evenly among ties, as amin's and amax's.

    >>> from threadgrad import engine, ops
    >>> r = ops.aminmax(engine.tensor([[1.0, 5.0], [7.0, 2.0]]), dim=1)
    >>> r.min.tolist(), r.max.tolist()
    ([1.0, 2.0], [5.0, 7.0])
    """
    check_tensor(x, "aminmax")
    xp = x.device.xp
    if dim is None:
        if x._data.size == 0:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
                               "identity.")
        dims = tuple(range(x.ndim))
    else:
        d = normalize_dim(dim, x.ndim, "aminmax")
        if x.ndim and x.shape[d] == 0:
            raise IndexError(f"aminmax: Expected reduction dim {d} to have non-zero size.")
        dims = (d,) if x.ndim else ()
    keep = keepdim and (dim is not None or x.ndim > 0)
    lo = _wrap(xp.asarray(xp.amin(x._data, axis=dims, keepdims=keep)), x.device)
    hi = _wrap(xp.asarray(xp.amax(x._data, axis=dims, keepdims=keep)), x.device)
    if tls.grad_enabled and x._rg:
        node = AminmaxBackward0()
        node.dims, node.keepdim = dims, keep
        record(node, (x,), (lo, hi), (x, lo, hi))
    return _AminmaxResult(lo, hi)


# --- nansum, nanmean --------------------------------------------------------------------------

class NansumBackward0(Node):
    """nansum's backward: the gradient, broadcast back, times 0 where the input is NaN."""

    __slots__ = ("dims", "keepdim")

    def backward(self, g: Tensor) -> tuple:
        (x,) = self.saved_tensors()
        if not self.keepdim:
            g = reshape(g, keepdim_shape(x.shape, self.dims))
        # (a product with the mask, as torch's: an infinite g makes NaN at the NaNs, not 0)
        kept = const((~x.device.xp.isnan(x._data)).astype(g.dtype), g)
        return (mul(expand(g, x.shape), kept),)


@register
def nansum(x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """Sum over ``dim`` (None or an empty tuple: every dim) counting NaN as 0, as
    ``torch.nansum``; integer and bool inputs sum in int64; the gradient is 0 at NaN.

    >>> from threadgrad import engine, ops
    >>> ops.nansum(engine.tensor([1.0, float("nan"), 2.0])).item()
    3.0
    """
    check_tensor(x, "nansum")
    src = _cast_input(x, dtype)
    dims = normalize_dims(dim, src.ndim, "nansum")
    xp = x.device.xp
    data = src._data
    if data.dtype.kind in "fc":
        data = xp.where(xp.isnan(data), 0, data)
    out = _wrap(xp.asarray(data.sum(axis=dims, keepdims=keepdim), dtype=src.dtype), x.device)
    if tls.grad_enabled and src._rg:
        node = NansumBackward0()
        node.dims, node.keepdim = dims, keepdim
        record(node, (src,), out, (src,))
    return out


@register
def nanmean(x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """The mean of the numbers that are not NaN, over ``dim``, as ``torch.nanmean``:
    ``nansum / count`` (torch's composition, so its node is DivBackward0); an all-NaN slice
    gives NaN; floating point inputs only.

    >>> from threadgrad import engine, ops
    >>> ops.nanmean(engine.tensor([1.0, float("nan"), 2.0])).item()
    1.5
    """
    check_tensor(x, "nanmean")
    src = x if dtype is None else to(x, dtype=dtype)
    if src.dtype.kind not in "fc":
        raise RuntimeError(f"nanmean(): expected input to have floating point or complex dtype but got "
                           f"{_torch_name(src.dtype)}")
    dims = normalize_dims(dim, src.ndim, "nanmean")
    xp = x.device.xp
    count = (~xp.isnan(src._data)).sum(axis=dims, keepdims=keepdim)
    return div(nansum(src, dims or None, keepdim), const(xp.asarray(count, dtype=src.dtype), src))


# --- var_mean, std_mean -----------------------------------------------------------------------

class VarMeanBackward0(VarBackward0):
    """var_mean's backward: var's (torch's ``var_backward``) plus mean's."""

    __slots__ = ()

    def backward(self, g_var: Tensor | None, g_mean: Tensor | None) -> tuple:
        grad = None if g_var is None else VarBackward0.backward(self, g_var)[0]
        return (_plus_mean_grad(self, grad, g_mean),)


class StdMeanBackward0(StdBackward0):
    """std_mean's backward: std's (torch's ``std_backward``, 0 where the std is 0) plus mean's."""

    __slots__ = ()

    def backward(self, g_std: Tensor | None, g_mean: Tensor | None) -> tuple:
        grad = None if g_std is None else StdBackward0.backward(self, g_std)[0]
        return (_plus_mean_grad(self, grad, g_mean),)


def _plus_mean_grad(node: VarBackward0, grad: Tensor | None, g_mean: Tensor | None) -> Tensor | None:
    if g_mean is None:
        return grad
    x, _ = node.saved_tensors()
    if not node.keepdim:
        g_mean = reshape(g_mean, keepdim_shape(x.shape, node.dims))
    n = math.prod(x.shape[d] for d in node.dims)
    part = div(expand(g_mean, x.shape), float(n) if n else math.nan)
    return part if grad is None else add(grad, part)


def _welford_nan(xp: Any, inf: Any, dims: tuple) -> Any:
    """Where torch's var_mean / std_mean give a NaN mean for slices holding an infinity
    (``inf``: the input's isinf; the result has the reduced dims kept): its Welford update
    turns the mean NaN at the first element after an infinity, so only a slice whose one
    infinity comes last (in the order of the reduced dims) keeps it."""
    lead = inf.ndim - len(dims)
    moved = xp.moveaxis(inf, dims, tuple(range(lead, inf.ndim)))
    flat = moved.reshape(moved.shape[:lead] + (-1,))
    count = flat.sum(axis=-1)
    return ((count > 0) & ~((count == 1) & flat[..., -1])).reshape(keepdim_shape(inf.shape, dims))


def _moment_mean(x: Tensor, dim: Any, unbiased: Any, keepdim: bool, correction: Any, name: str) -> tuple:
    check_tensor(x, name)
    if isinstance(dim, bool):  # torch's var_mean(x, unbiased) overload
        dim, unbiased = None, dim
    c = _correction(name, unbiased, correction)
    if x.dtype.kind != "f":  # complex (and the errors for integers): var's and mean's own
        return (var if name == "var_mean" else std)(x, dim, keepdim=keepdim, correction=c), mean(x, dim, keepdim)
    dims = normalize_dims(dim, x.ndim, name)
    axis = dims or None
    n = math.prod(x.shape[d] for d in dims)
    xp = x.device.xp
    centre = xp.mean(x._data, axis=axis, keepdims=True)
    dev = x._data - centre
    with numpy.errstate(invalid="ignore", divide="ignore"):
        moment = xp.sum(dev * dev, axis=axis, keepdims=keepdim) / max(n - c, 0.0)
    if name == "std_mean":
        moment = xp.sqrt(moment)
    inf = xp.isinf(x._data)
    if inf.any():  # torch's Welford mean: NaN past an infinity, unless it is the slice's one, and last
        centre = xp.where(_welford_nan(xp, inf, dims), math.nan, centre)
    spread = _wrap(xp.asarray(moment, dtype=x.dtype), x.device)
    centre = _wrap(xp.asarray(centre if keepdim else centre.reshape(spread.shape), dtype=x.dtype), x.device)
    if tls.grad_enabled and x._rg:
        node = VarMeanBackward0() if name == "var_mean" else StdMeanBackward0()
        node.dims, node.keepdim, node.dof = dims or tuple(range(x.ndim)), keepdim, float(n - c)
        record(node, (x,), (spread, centre), (x, spread))
    return spread, centre


@register
def var_mean(x: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None,
             axis: Any = None, keepdims: Any = None) -> tuple:
    """``(var, mean)`` over ``dim`` in one pass, as ``torch.var_mean`` (a plain tuple):
    ``correction`` 1 by default, ``unbiased=False`` is 0; one node, VarMeanBackward0.

    >>> from threadgrad import engine, ops
    >>> v, m = ops.var_mean(engine.tensor([1.0, 2.0, 6.0]))
    >>> v.item(), m.item()
    (7.0, 3.0)
    """
    dim, keepdim = _reduction_args("var_mean", dim, keepdim, axis, keepdims)
    return _moment_mean(x, dim, unbiased, keepdim, correction, "var_mean")


@register
def std_mean(x: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None,
             axis: Any = None, keepdims: Any = None) -> tuple:
    """``(std, mean)`` over ``dim``, as ``torch.std_mean``; see :func:`var_mean` (the std's
    gradient is 0 where it is 0, as torch's)."""
    dim, keepdim = _reduction_args("std_mean", dim, keepdim, axis, keepdims)
    return _moment_mean(x, dim, unbiased, keepdim, correction, "std_mean")
