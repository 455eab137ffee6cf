"""Products, scans and order statistics, as torch's: prod, cumprod, cummax / cummin,
logcumsumexp, aminmax, median / nanmedian, nansum / nanmean, topk, kthvalue, mode,
var_mean / std_mean; and the counting functions unique, histc and bincount (no gradient, so
not in REGISTRY). See Note [Op definitions] in _core.py.

Each forward is a few whole-array calls of the array module (a sort, an ``accumulate``);
each backward is written with ops, so double backward works. An op that returns
``(values, indices)`` returns a named tuple named as torch's ``torch.return_types``
(``median(values=..., indices=...)``), as ``max(x, dim)`` does.

Note [Index choice among ties]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Where several elements hold the selected value, the index returned says which one gets the
gradient, so it follows torch's cpu kernels, case by case:

* ``median(x, dim)``, ``nanmedian(x, dim)``: torch's order is a stable sort, NaN last; the
  median is its ``(n - 1) // 2``-th element, and a slice holding NaN gives its first NaN
  (nanmedian: the ``(c - 1) // 2``-th of its ``c`` numbers).
* ``cummax`` / ``cummin``: the latest element that reached the running extreme (torch
  compares with ``>=`` / ``<=``); once a NaN came, the latest NaN.
* ``kthvalue``: torch runs a quickselect (median-of-three pivot, Hoare partition) on each
  slice, and the index among ties falls where its swaps leave it. Where the k-th value is
  unique in its slice (the usual case) the index is the stable sort's; only the slices with
  ties run :func:`_quickselect_index`, which repeats those swaps.
* ``mode``: the smallest of the most frequent values, and the last position holding it
  (torch's insertion sort on slices of up to 16 elements; on longer slices its introsort
  may pick another of the tied positions).
* ``topk``: the stable order (largest: NaN first). torch's own order among equal values
  comes from libstdc++'s nth_element / partial_sort and is not reproduced: docs/ops.md says so.
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
from .math import _stable_order, cumsum
from .reduce import MaxBackward0, MaxBackward1, keepdim_shape, mean, sum as _sum
from .shape import cat, expand, reshape
from .stats import StdBackward0, VarBackward0, _correction, _reduction_args, std, var
from .device import to

# torch.return_types.<name>: a named pair that also reads as a tuple
_CummaxResult = namedtuple("cummax", ["values", "indices"])
_CumminResult = namedtuple("cummin", ["values", "indices"])
_AminmaxResult = namedtuple("aminmax", ["min", "max"])
_MedianResult = namedtuple("median", ["values", "indices"])
_NanmedianResult = namedtuple("nanmedian", ["values", "indices"])
_TopkResult = namedtuple("topk", ["values", "indices"])
_KthvalueResult = namedtuple("kthvalue", ["values", "indices"])
_ModeResult = namedtuple("mode", ["values", "indices"])

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


def _index_result(x: Tensor, values: Any, idx: Any, dim: int, keepdim: bool, node: Node | None) -> tuple:
    """(values, indices) Tensors of a value-selecting reduction along ``dim``; ``idx`` holds
    the selected positions with ``dim`` kept (size 1). The node (a MaxBackward0 kind) sends
    the gradient back to those positions."""
    xp = x.device.xp
    if not keepdim:
        values, idx = values.squeeze(dim), idx.squeeze(dim)
    out = _wrap(xp.asarray(values), x.device)
    if node is not None and tls.grad_enabled and x._rg:
        node.in_shape, node.dim, node.keepdim = x.shape, dim, keepdim
        node.index = along_dim_index(idx if keepdim else xp.expand_dims(idx, dim), dim, xp)
        record(node, (x,), out)
    return out, _wrap(xp.asarray(idx).astype("int64", copy=False), x.device)


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
        # and once a NaN came, the latest NaN: See Note [Index choice among ties]
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


# --- median, nanmedian ------------------------------------------------------------------------

class MedianBackward0(MaxBackward1):
    """median over every element: the gradient shared evenly by the elements equal to it (a
    NaN median: by the NaNs), torch's ``evenly_distribute_backward``."""

    __slots__ = ()


class NanmedianBackward0(MaxBackward1):
    __slots__ = ()


class MedianBackward1(MaxBackward0):
    """median along a dim: the gradient goes to the returned index."""

    __slots__ = ()


class NanmedianBackward1(MaxBackward0):
    __slots__ = ()


def _median_position(xp: Any, data: Any, dim: int, ignore_nan: bool) -> Any:
    """The position in the stable order (NaN last) of each slice's lower median, with ``dim``
    kept: See Note [Index choice among ties]."""
    n = data.shape[dim]
    if data.dtype.kind not in "fc":
        return xp.full(keepdim_shape(data.shape, (dim,)), (n - 1) // 2)
    nans = xp.isnan(data).sum(axis=dim, keepdims=True)
    if ignore_nan:
        return (xp.maximum(n - nans, 1) - 1) // 2
    return xp.where(nans > 0, n - nans, (n - 1) // 2)


def _median(x: Tensor, dim: Any, keepdim: bool, name: str) -> Any:
    check_tensor(x, name)
    xp = x.device.xp
    nan_name = name == "nanmedian"
    if dim is None:
        flat = x._data.reshape(-1)
        if flat.size == 0:
            value = xp.asarray(float("nan"), dtype=x.dtype if x.dtype.kind == "f" else "float32")
        else:
            order = _stable_order(xp, flat, 0, False)
            value = flat[order[_median_position(xp, flat, 0, nan_name)]][0]
        out = _wrap(xp.asarray(value), x.device)
        if tls.grad_enabled and x._rg:
            record((NanmedianBackward0 if nan_name else MedianBackward0)(), (x,), out, (x, out))
        return out
    d = normalize_dim(dim, x.ndim, name)
    result = _NanmedianResult if nan_name else _MedianResult
    if x.ndim == 0:
        return result(*_median(reshape(x, (1,)), 0, False, name))
    if x.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    order = _stable_order(xp, x._data, d, False)
    idx = xp.take_along_axis(order, _median_position(xp, x._data, d, nan_name), axis=d)
    values = xp.take_along_axis(x._data, idx, axis=d)
    node = (NanmedianBackward1 if nan_name else MedianBackward1)()
    return result(*_index_result(x, values, idx, d, keepdim, node))


@register
def median(x: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """The lower median (of two middle values, the smaller), as ``torch.median``: of every
    element without ``dim`` (a 0-d tensor; NaN if any is NaN), else ``(values, indices)``
    along ``dim``, with torch's index among ties (See Note [Index choice among ties]).

    >>> from threadgrad import engine, ops
    >>> ops.median(engine.tensor([4.0, 1.0, 3.0, 2.0])).item()
    2.0
    >>> ops.median(engine.tensor([[0.0, 5.0, 0.0, 1.0]]), dim=1).indices.tolist()
    [2]
    """
    return _median(x, dim, keepdim, "median")


@register
def nanmedian(x: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """:func:`median` of the numbers that are not NaN (NaN only for an all-NaN slice), as
    ``torch.nanmedian``."""
    return _median(x, dim, keepdim, "nanmedian")


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


# --- topk, kthvalue, mode ---------------------------------------------------------------------

class TopkBackward0(MaxBackward0):
    """topk's backward: each gradient back to the index its value came from."""

    __slots__ = ()


@register
def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:  # noqa: A002
    """``(values, indices)`` of the ``k`` largest (``largest=False``: smallest) elements along
    ``dim``, as ``torch.topk``: NaN counts as the largest; always in sorted order (torch's
    ``sorted=False`` leaves the order unspecified); among equal values, the lower index first
    (See Note [Index choice among ties]). The gradient goes back through the indices.

    >>> from threadgrad import engine, ops
    >>> r = ops.topk(engine.tensor([1.0, 3.0, 2.0]), 2)
    >>> r.values.tolist(), r.indices.tolist()
    ([3.0, 2.0], [1, 2])
    """
    check_tensor(x, "topk")
    d = normalize_dim(dim, x.ndim, "topk")
    size = x.shape[d] if x.ndim else 1
    if not isinstance(k, (int, numpy.integer)) or not 0 <= k <= size:
        raise RuntimeError("selected index k out of range")
    xp = x.device.xp
    if x.ndim == 0:  # k is 0 or 1: a 0-d result for 1, as torch's
        flat = reshape(x, (1,))
        return _TopkResult(*_index_result(flat, flat._data[:k], xp.zeros(k, dtype="int64"), 0, k != 1,
                                          TopkBackward0()))
    idx = _top_indices(xp, x._data, d, k, largest)
    values = xp.take_along_axis(x._data, idx, axis=d)
    return _TopkResult(*_index_result(x, values, idx, d, True, TopkBackward0()))


def _top_indices(xp: Any, data: Any, dim: int, k: int, largest: bool) -> Any:
    """The first ``k`` of the stable order along ``dim`` (largest: descending, NaN first).

    For a small ``k`` (a quarter of the dim or less) without sorting the whole dim: a partition
    finds each slice's k-th value; the elements beyond it, and the lowest-indexed of those equal
    to it, are exactly the ``k`` the full order starts with; only they are sorted
    (benchmarks/ops.py, 1e5 float64, k = 1e4, forward on a loaded machine: 36.7 -> 10.5 ms,
    torch 4.0 ms)."""
    n = data.shape[dim]
    if k == 0 or 4 * k > n:
        return _stable_order(xp, data, dim, largest)[(slice(None),) * dim + (slice(0, k),)]
    moved = xp.moveaxis(data, dim, -1)
    at = n - k if largest else k - 1  # (an ascending partition puts NaN last: the largest)
    kth = xp.partition(moved, at, axis=-1)[..., at:at + 1]
    if largest:
        beyond = moved > kth
    else:
        beyond = moved < kth
    equal = moved == kth
    if data.dtype.kind in "fc":
        nan, kth_nan = xp.isnan(moved), xp.isnan(kth)
        beyond |= (nan & ~kth_nan) if largest else (~nan & kth_nan)
        equal |= nan & kth_nan
    need = k - beyond.sum(axis=-1, keepdims=True)
    take = beyond | (equal & (xp.cumsum(equal, axis=-1) <= need))
    candidates = xp.nonzero(take)[-1].reshape(moved.shape[:-1] + (k,))  # k a slice, in index order
    order = _stable_order(xp, xp.take_along_axis(moved, candidates, axis=-1), moved.ndim - 1, largest)
    return xp.moveaxis(xp.take_along_axis(candidates, order, axis=-1), -1, dim)


class KthvalueBackward0(MaxBackward0):
    """kthvalue's backward: the gradient goes to the returned index."""

    __slots__ = ()


def _greater_or_nan(a: Any, b: Any) -> bool:
    """torch's quickselect order: NaN above every number."""
    return (a != a and b == b) or a > b


def _quickselect_index(values: list, k: int) -> int:
    """The original position that torch's cpu kthvalue reports for the ``k``-th (0-based)
    smallest of ``values``: the same median-of-three quickselect, swap for swap (See Note
    [Index choice among ties])."""
    vals = list(values)
    pos = list(range(len(vals)))

    def swap(i: int, j: int) -> None:
        vals[i], vals[j] = vals[j], vals[i]
        pos[i], pos[j] = pos[j], pos[i]

    lo, hi = 0, len(vals) - 1
    while hi > lo:
        if hi == lo + 1:
            if _greater_or_nan(vals[lo], vals[hi]):
                swap(lo, hi)
            break
        swap(lo + (hi - lo) // 2, lo + 1)  # the median of three becomes the pivot, at lo
        if _greater_or_nan(vals[lo + 1], vals[hi]):
            swap(lo + 1, hi)
        if _greater_or_nan(vals[lo], vals[hi]):
            swap(lo, hi)
        if _greater_or_nan(vals[lo + 1], vals[lo]):
            swap(lo + 1, lo)
        i, j, pivot = lo + 1, hi, vals[lo]
        while True:
            i += 1
            while _greater_or_nan(pivot, vals[i]):
                i += 1
            j -= 1
            while _greater_or_nan(vals[j], pivot):
                j -= 1
            if j < i:
                break
            swap(i, j)
        swap(lo, j)
        if j <= k:
            lo = i
        if j >= k:
            hi = j - 1
    return pos[k]


@register
def kthvalue(x: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> Any:
    """``(values, indices)`` of the ``k``-th smallest element (1-based) along ``dim``, as
    ``torch.kthvalue``: NaN counts as the largest; torch's index among ties (See Note [Index
    choice among ties]). The gradient goes to the returned index.

    >>> from threadgrad import engine, ops
    >>> r = ops.kthvalue(engine.tensor([[3.0, 1.0, 2.0]]), 2, dim=1)
    >>> r.values.tolist(), r.indices.tolist()
    ([2.0], [2])
    """
    check_tensor(x, "kthvalue")
    d = normalize_dim(dim, x.ndim, "kthvalue")
    if x.ndim == 0:
        if k != 1:
            raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
        return _KthvalueResult(*kthvalue(reshape(x, (1,)), 1, 0, False))
    n = x.shape[d]
    if n == 0:
        raise IndexError(f"kthvalue(): Expected reduction dim {d} to have non-zero size.")
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    xp = x.device.xp
    data = x._data
    order = _stable_order(xp, data, d, False)
    kept = (slice(None),) * d + (slice(k - 1, k),)
    idx = order[kept]
    values = xp.take_along_axis(data, idx, axis=d)
    same = data == values
    if data.dtype.kind == "f":
        same |= xp.isnan(data) & xp.isnan(values)
    tied = same.sum(axis=d, keepdims=True) > 1
    if tied.any():  # only these slices need torch's swaps
        host = x.device.to_host
        moved = numpy.moveaxis(host(data), d, -1)
        host_idx = numpy.moveaxis(host(idx).copy(), d, -1)
        for slice_ in zip(*numpy.nonzero(numpy.moveaxis(host(tied), d, -1)[..., 0])):
            host_idx[slice_ + (0,)] = _quickselect_index(moved[slice_].tolist(), k - 1)
        idx = x.device.asarray(numpy.moveaxis(host_idx, -1, d))
    return _KthvalueResult(*_index_result(x, values, idx, d, keepdim, KthvalueBackward0()))


class ModeBackward0(MaxBackward0):
    """mode's backward: the gradient goes to the returned index."""

    __slots__ = ()


@register
def mode(x: Tensor, dim: int = -1, keepdim: bool = False) -> Any:
    """``(values, indices)`` of the most frequent value along ``dim`` (the smallest among
    equally frequent ones) and the last position holding it, as ``torch.mode`` (See Note
    [Index choice among ties]; each NaN counts as a value of its own). The gradient goes to
    the returned index.

    >>> from threadgrad import engine, ops
    >>> r = ops.mode(engine.tensor([[2.0, 1.0, 2.0, 1.0, 3.0]]))
    >>> r.values.tolist(), r.indices.tolist()
    ([1.0], [3])
    """
    check_tensor(x, "mode")
    d = normalize_dim(dim, x.ndim, "mode")
    if x.ndim == 0:
        return _ModeResult(*mode(reshape(x, (1,)), 0, False))
    n = x.shape[d]
    if n == 0:
        raise IndexError(f"mode(): Expected reduction dim {d} to have non-zero size.")
    xp = x.device.xp
    order = _stable_order(xp, x._data, d, False)
    ordered = xp.take_along_axis(x._data, order, axis=d)
    lead = (slice(None),) * d
    # runs of equal values in the stable order: a run ends where the next value differs
    differs = ordered[lead + (slice(1, None),)] != ordered[lead + (slice(None, -1),)]
    last_row = xp.ones(keepdim_shape(x.shape, (d,)), dtype=bool)
    ends = xp.concatenate([differs, last_row], axis=d)
    starts = xp.concatenate([last_row, differs], axis=d)
    pos = _positions(xp, n, d, x.ndim)
    run_start = xp.maximum.accumulate(xp.where(starts, pos, 0), axis=d)
    lengths = xp.where(ends, pos - run_start + 1, 0)
    best = xp.expand_dims(xp.argmax(lengths, axis=d), d)  # the first longest run: the smallest value
    idx = xp.take_along_axis(order, best, axis=d)
    values = xp.take_along_axis(x._data, idx, axis=d)
    return _ModeResult(*_index_result(x, values, idx, d, keepdim, ModeBackward0()))


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


# --- counting: unique, histc, bincount (no gradient) ------------------------------------------

class _NoDerivative(Node):
    """unique's node: torch records one whose backward raises, so a gradient through unique
    fails loudly instead of coming back as zeros."""

    __slots__ = ("torch_name", "op")

    def name(self) -> str:
        return self.torch_name

    def backward(self, g: Tensor) -> tuple:
        raise NotImplementedError(f"the derivative for '{self.op}' is not implemented.")


def unique(x: Tensor, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,  # noqa: A002
           dim: Any = None) -> Any:
    """The distinct values of ``x`` (``dim=None``: of its elements; else its distinct slices
    along ``dim``), sorted, as ``torch.unique``; with ``return_inverse`` the index of each
    element (slice) in them, with ``return_counts`` how often each occurs. Each NaN is distinct,
    as in torch. ``sorted=False`` also sorts (torch leaves that order unspecified). No
    derivative (a backward through the values raises, as torch's).

    >>> from threadgrad import engine, ops
    >>> values, inverse, counts = ops.unique(engine.tensor([3, 1, 3, 2]), return_inverse=True, return_counts=True)
    >>> values.tolist(), inverse.tolist(), counts.tolist()
    ([1, 2, 3], [2, 0, 2, 1], [1, 1, 2])
    """
    check_tensor(x, "unique")
    xp = x.device.xp
    if dim is None:
        values, inverse, counts = xp.unique(x._data.reshape(-1), return_inverse=True, return_counts=True,
                                            equal_nan=False)
        inverse = inverse.reshape(x.shape)
    else:
        d = normalize_dim(dim, x.ndim, "unique")
        values, inverse, counts = xp.unique(x._data, return_inverse=True, return_counts=True, axis=d,
                                            equal_nan=False)
        inverse = inverse.reshape(-1)
    out = _wrap(xp.asarray(values), x.device)
    if tls.grad_enabled and x._rg:
        node = _NoDerivative()
        node.torch_name, node.op = ("Unique2Backward0", "_unique2") if dim is None else ("UniqueDimBackward0",
                                                                                           "unique_dim")
        record(node, (x,), out)
    results = [out]
    if return_inverse:
        results.append(_wrap(inverse.astype("int64"), x.device))
    if return_counts:
        results.append(_wrap(counts.astype("int64"), x.device))
    return out if len(results) == 1 else tuple(results)


def histc(x: Tensor, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:  # noqa: A002
    """A histogram of ``x``'s elements in ``bins`` equal bins over ``[min, max]``, as
    ``torch.histc``: ``min == max`` takes the data's range (widened by 1 each way if it is one
    value); elements outside it, and NaN, are not counted; the last bin holds ``max``.
    Floating point inputs only; the counts have ``x``'s dtype. No gradient.

    >>> from threadgrad import engine, ops
    >>> ops.histc(engine.tensor([1.0, 2.0, 1.0]), bins=4, min=0, max=3).tolist()
    [0.0, 2.0, 1.0, 0.0]
    """
    check_tensor(x, "histc")
    if x.dtype.kind != "f":
        raise NotImplementedError(f"\"histogram_cpu\" not implemented for '{_torch_name(x.dtype)}'")
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    xp = x.device.xp
    data = x._data.reshape(-1)
    lo, hi = float(min), float(max)
    if lo == hi and data.size:
        lo, hi = float(data.min()), float(data.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"torch.histc: range of [{lo:g}, {hi:g}] is not finite")
    if lo > hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    inside = data[(data >= lo) & (data <= hi)]
    # torch's linear interpolation, in the input's dtype; the right edge goes to the last bin
    lo_, hi_ = x.dtype.type(lo), x.dtype.type(hi)
    pos = ((inside - lo_) * bins / (hi_ - lo_)).astype("int64")
    pos = xp.minimum(pos, bins - 1)
    counts = xp.bincount(pos, minlength=bins)
    return _wrap(counts.astype(x.dtype), x.device)


def bincount(input: Tensor, weights: Tensor | None = None, minlength: int = 0) -> Tensor:  # noqa: A002
    """How often each value ``0..max(input)`` occurs in the 1-d non-negative integer tensor
    ``input`` (at least ``minlength`` counts), as ``torch.bincount``; with ``weights``, their
    sums instead (float32 weights give float32, others float64). No gradient.

    >>> from threadgrad import engine, ops
    >>> ops.bincount(engine.tensor([1, 3, 1]), minlength=5).tolist()
    [0, 2, 0, 1, 0]
    """
    check_tensor(input, "bincount")
    if input.dtype.kind not in "iu":
        raise NotImplementedError(f"\"bincount_cpu\" not implemented for '{_torch_name(input.dtype)}'")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    xp = input.device.xp
    data = input._data
    if data.ndim != 1 or (data.size and int(data.min()) < 0):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is None:
        return _wrap(xp.bincount(data.astype("int64"), minlength=minlength).astype("int64"), input.device)
    check_tensor(weights, "bincount", "weights")
    if weights._data.ndim != 1 or weights.shape[0] != data.shape[0]:
        raise RuntimeError("weights should be 1-d and have the same length as input")
    out_dtype = "float32" if weights.dtype == numpy.float32 else "float64"
    counts = xp.bincount(data.astype("int64"), weights=weights._data.astype("float64"), minlength=minlength)
    return _wrap(counts.astype(out_dtype), input.device)
