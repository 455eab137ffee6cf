"""Reductions: sum, mean, max, min, logsumexp. See Note [Op definitions] in _core.py."""
from __future__ import annotations

import builtins as _builtins
from collections import namedtuple
from typing import Any

import numpy

from ..engine.tensor import Tensor, _wrap

from ._core import ARRAYS, OPS, Node, check_tensor, const, dim_alias, normalize_dim, normalize_dims, record, record_unary, register, tls
from .elementwise import exp, maximum, minimum, mul, sub
from .index import along_dim_index, index_put_zeros
from .shape import expand, reshape, unsqueeze


def keepdim_shape(shape: tuple, dims: tuple) -> tuple:
    return tuple(1 if i in dims else s for i, s in enumerate(shape))


class SumBackward0(Node):
    __slots__ = ("in_shape", "dims", "keepdim")

    def _expanded(self, F: Any, g: Any) -> Any:
        """g reshaped to keepdim's shape, broadcast to the input's."""
        if not self.keepdim:
            g = F.reshape(g, keepdim_shape(self.in_shape, self.dims))
        return F.expand(g, self.in_shape)

    def backward(self, g: Tensor) -> tuple:
        # Measured on a full sum of (16,); dim 1 of (8, 16), arrays against ops: 6.27 -> 3.20 us
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        return (F.wrap(self._expanded(F, g), dev),)


class SumBackward1(SumBackward0):  # sum with a dim, torch's name
    __slots__ = ()


@register
def sum(x: Tensor, dim: Any = None, keepdim: bool = False, *, axis: Any = None,  # noqa: A001 - torch's name
        keepdims: Any = None) -> Tensor:
    """Sum over ``dim`` (an int, a tuple, or None for all dims; ``axis``/``keepdims`` are aliases)."""
    check_tensor(x, "sum")
    if axis is not None or keepdims is not None:
        dim, keepdim = dim_alias(dim, axis, "sum"), keepdim if keepdims is None else keepdims
    dims = normalize_dims(dim, x.ndim, "sum")
    data = x._data.sum(axis=dims, keepdims=keepdim)
    out = _wrap(x.device.xp.asarray(data, dtype=x.dtype) if x.dtype.kind in "fc" else x.device.xp.asarray(data), x.device)
    if tls.grad_enabled and x._rg:
        node = SumBackward0() if dim is None else SumBackward1()
        node.in_shape, node.dims, node.keepdim = x.shape, dims, keepdim
        record_unary(node, x, out)
    return out


class MeanBackward0(SumBackward0):
    __slots__ = ("count",)

    def backward(self, g: Tensor) -> tuple:
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py (arrays: 9.27 -> 3.66 us)
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        d = self._expanded(F, g)
        return (F.wrap(F.div(d, F.number(self.count, d)), dev),)


class MeanBackward1(MeanBackward0):  # mean with a dim, torch's name
    __slots__ = ()


@register
def mean(x: Tensor, dim: Any = None, keepdim: bool = False, *, axis: Any = None, keepdims: Any = None) -> Tensor:
    """Mean over ``dim``; floating point tensors only, like torch (empty slices give nan)."""
    check_tensor(x, "mean")
    if axis is not None or keepdims is not None:
        dim, keepdim = dim_alias(dim, axis, "mean"), keepdim if keepdims is None else keepdims
    if x.dtype.kind not in "fc":
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be floating point, but got {x.dtype}")
    dims = normalize_dims(dim, x.ndim, "mean")
    n = 1
    for d in dims:
        n *= x.shape[d]
    with numpy.errstate(invalid="ignore", divide="ignore"):  # host-side flags: empty slices -> nan
        data = x._data.sum(axis=dims, keepdims=keepdim) / (n if n else float("nan"))
    out = _wrap(x.device.xp.asarray(data, dtype=x.dtype), x.device)
    if tls.grad_enabled and x._rg:
        node = MeanBackward0() if dim is None else MeanBackward1()
        node.in_shape, node.dims, node.keepdim, node.count = x.shape, dims, keepdim, float(n) if n else float("nan")
        record_unary(node, x, out)
    return out


# torch.return_types.max / min: a named (values, indices) pair that also reads as a tuple
_MaxResult = namedtuple("max", ["values", "indices"])
_MinResult = namedtuple("min", ["values", "indices"])


class MaxBackward1(Node):
    """Full reduction (no dim): ties share the gradient equally, as in torch."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        x, out = self.saved_tensors()
        xp = g.device.xp
        # A NaN maximum came from the NaNs: they share the gradient (torch's evenly_distribute_backward)
        hit = (xp.isnan(x._data) if bool(xp.isnan(out._data)) else x._data == out._data).astype(g.dtype)
        share = hit / _builtins.max(float(hit.sum()), 1.0)
        return (mul(expand(g, x.shape), const(share, g)),)


class MinBackward1(MaxBackward1):
    __slots__ = ()


class MaxBackward0(Node):
    """Reduction along ``dim``: the gradient goes to the index that was returned."""

    __slots__ = ("in_shape", "dim", "keepdim", "index")

    def backward(self, g: Tensor) -> tuple:
        if not self.keepdim:
            g = unsqueeze(g, self.dim)
        return (index_put_zeros(g, self.in_shape, self.index, False, unique=True),)  # one index per slice


class MinBackward0(MaxBackward0):
    __slots__ = ()


def _extreme(x: Tensor, dim: Any, keepdim: bool, name: str) -> Any:
    check_tensor(x, name)
    xp = x.device.xp
    if dim is None:
        if x._data.size == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        out = _wrap(xp.asarray(getattr(xp, name)(x._data)), x.device)
        if tls.grad_enabled and x._rg:
            record((MaxBackward1 if name == "max" else MinBackward1)(), (x,), out, (x, out))
        return out
    d = normalize_dim(dim, x.ndim, name)
    if x.ndim == 0:  # torch allows dim 0 / -1 on a 0-d tensor: reduce it as shape (1,)
        return _extreme(reshape(x, (1,)), 0, False, name)
    if x.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size (input shape {list(x.shape)})")
    idx = xp.expand_dims(getattr(xp, "arg" + name)(x._data, axis=d), d)
    tup = along_dim_index(idx, d, xp)
    values = x._data[tup]
    if not keepdim:
        values, idx = values.squeeze(d), idx.squeeze(d)
    out = _wrap(xp.asarray(values), x.device)
    indices = _wrap(xp.asarray(idx).astype("int64", copy=False), x.device)
    if tls.grad_enabled and x._rg:
        node = (MaxBackward0 if name == "max" else MinBackward0)()
        node.in_shape, node.dim, node.keepdim, node.index = x.shape, d, keepdim, tup
        record_unary(node, x, out)
    return (_MaxResult if name == "max" else _MinResult)(out, indices)


@register
def max(x: Tensor, dim: Any = None, keepdim: bool = False, *, axis: Any = None,  # noqa: A001
        keepdims: Any = None) -> Any:
    """The largest element (a 0-d tensor; ties share the gradient), or with ``dim`` a
    ``(values, indices)`` pair whose gradient goes to the returned index.

    >>> from threadgrad import engine, ops
    >>> values, indices = ops.max(engine.tensor([[1.0, 5.0], [7.0, 2.0]]), dim=1)
    >>> values.tolist(), indices.tolist()
    ([5.0, 7.0], [1, 0])

    With a tensor in place of ``dim``, it is :func:`ops.maximum` of the two, as torch.max(a, b).
    """
    if axis is not None or keepdims is not None:
        dim, keepdim = dim_alias(dim, axis, "max"), keepdim if keepdims is None else keepdims
    if isinstance(dim, Tensor):
        return maximum(x, dim)
    return _extreme(x, dim, keepdim, "max")


@register
def min(x: Tensor, dim: Any = None, keepdim: bool = False, *, axis: Any = None,  # noqa: A001
        keepdims: Any = None) -> Any:
    """The smallest element, or with ``dim`` a ``(values, indices)`` pair; see :func:`max`."""
    if axis is not None or keepdims is not None:
        dim, keepdim = dim_alias(dim, axis, "min"), keepdim if keepdims is None else keepdims
    if isinstance(dim, Tensor):  # torch.min(a, b)
        return minimum(x, dim)
    return _extreme(x, dim, keepdim, "min")


class LogsumexpBackward0(Node):
    __slots__ = ("dims", "keepdim")

    def backward(self, g: Tensor) -> tuple:
        x, out = self.saved_tensors()
        if not self.keepdim:
            kshape = keepdim_shape(x.shape, self.dims)
            g, out = reshape(g, kshape), reshape(out, kshape)
        return (mul(g, exp(sub(x, out))),)


@register
def logsumexp(x: Tensor, dim: Any = None, keepdim: bool = False, *, axis: Any = None, keepdims: Any = None) -> Tensor:
    """``log(sum(exp(x), dim))`` without overflow: the max is taken out first.

    >>> from threadgrad import engine, ops
    >>> round(ops.logsumexp(engine.tensor([1000.0, 1000.0]), 0).item(), 3)
    1000.693
    """
    check_tensor(x, "logsumexp")
    if axis is not None or keepdims is not None:
        dim, keepdim = dim_alias(dim, axis, "logsumexp"), keepdim if keepdims is None else keepdims
    if dim is None:
        raise TypeError("logsumexp() missing 1 required positional argument: 'dim'")
    if x.dtype.kind not in "fc":
        x = _wrap(x._data.astype("float32"), x.device)  # torch promotes integers (which never require grad)
    dims = normalize_dims(dim, x.ndim, "logsumexp")
    xp = x.device.xp
    if x._data.size:
        m = xp.max(x._data, axis=dims, keepdims=True)
        m = xp.where(xp.isfinite(m), m, 0)  # all -inf (or inf) slices: shift by 0
    else:
        m = xp.zeros(keepdim_shape(x.shape, dims), dtype=x.dtype)
    with numpy.errstate(divide="ignore"):  # all -inf slices: log(0) = -inf, as in torch (host-side flag only)
        res = xp.log(xp.exp(x._data - m).sum(axis=dims, keepdims=True)) + m
    if not keepdim:
        res = res.reshape(tuple(s for i, s in enumerate(x.shape) if i not in dims))
    out = _wrap(res.astype(x.dtype, copy=False), x.device)
    if tls.grad_enabled and x._rg:
        node = LogsumexpBackward0()
        node.dims, node.keepdim = dims, keepdim
        record(node, (x,), out, (x, out))
    return out


def _arg_extreme(x: Tensor, dim: Any, keepdim: bool, axis: Any, keepdims: Any, name: str) -> Tensor:
    check_tensor(x, name)
    if axis is not None:
        dim = dim_alias(dim, axis, name)
    if keepdims is not None:
        keepdim = keepdims
    xp = x.device.xp
    fn = getattr(xp, name)
    if dim is None:
        if x._data.size == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
        idx = xp.asarray(fn(x._data.reshape(-1)))
        if keepdim:
            idx = idx.reshape((1,) * x.ndim)
    else:
        d = normalize_dim(dim, x.ndim, name)
        if x.ndim == 0:
            idx = xp.zeros((), dtype="int64")
        else:
            if x.shape[d] == 0:
                raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
            idx = fn(x._data, axis=d, keepdims=keepdim)
    return _wrap(xp.asarray(idx).astype("int64", copy=False), x.device)


def argmax(x: Tensor, dim: Any = None, keepdim: bool = False, *, axis: Any = None, keepdims: Any = None) -> Tensor:
    """Index (int64) of the largest element: of the flattened tensor without ``dim``, else along
    ``dim``; the first one among ties, as torch on cpu. Not differentiable (an index).

    >>> from threadgrad import engine, ops
    >>> ops.argmax(engine.tensor([[1.0, 5.0], [7.0, 2.0]]), dim=1).tolist()
    [1, 0]
    """
    return _arg_extreme(x, dim, keepdim, axis, keepdims, "argmax")


def argmin(x: Tensor, dim: Any = None, keepdim: bool = False, *, axis: Any = None, keepdims: Any = None) -> Tensor:
    """Index (int64) of the smallest element; see :func:`argmax`."""
    return _arg_extreme(x, dim, keepdim, axis, keepdims, "argmin")


# The formula namespaces' names for these ops: See Note [First-order formulas] in _core.py.
OPS.sum, OPS.mean = sum, mean
