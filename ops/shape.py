"""Shape and indexing ops: reshape/view, transpose, permute, expand, squeeze, unsqueeze, getitem.

Their outputs are numpy views where numpy gives one, sharing the input's version counter
(an in-place op on the view bumps the base's version too, as in torch).
See Note [Op definitions] in _core.py.
"""
from __future__ import annotations

from typing import Any

import numpy

from engine.tensor import Tensor, _wrap

from ._core import Node, check_tensor, normalize_dim, record, register, tls


def _view_out(data: Any, x: Tensor) -> Tensor:
    out = _wrap(data, x.device)
    if data.base is not None:
        out._vc = x._vc
    return out


def _shape_arg(shape: tuple) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(int(s) for s in shape)


class ViewBackward0(Node):
    __slots__ = ("in_shape",)

    def backward(self, g: Tensor) -> tuple:
        return (reshape(g, self.in_shape),)


@register
def reshape(x: Tensor, shape: Any) -> Tensor:
    """The same elements in a new shape (one dim may be -1)."""
    check_tensor(x, "reshape")
    shape = _shape_arg((shape,) if isinstance(shape, int) else (tuple(shape),))
    try:
        data = x.data.reshape(shape)
    except ValueError:
        raise RuntimeError(f"reshape: shape {list(shape)} is invalid for input of size {x.data.size} (shape {list(x.shape)})") from None
    out = _view_out(data, x)
    if tls.grad_enabled and x._rg:
        node = ViewBackward0()
        node.in_shape = x.shape
        record(node, (x,), out)
    return out


class TransposeBackward0(Node):
    __slots__ = ("dims",)

    def backward(self, g: Tensor) -> tuple:
        return (transpose(g, *self.dims),)


@register
def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    """Swap two dims."""
    check_tensor(x, "transpose")
    d0, d1 = normalize_dim(dim0, x.ndim, "transpose"), normalize_dim(dim1, x.ndim, "transpose")
    out = _view_out(x.device.xp.swapaxes(x.data, d0, d1) if x.ndim > 1 else x.data, x)
    if tls.grad_enabled and x._rg:
        node = TransposeBackward0()
        node.dims = (d0, d1)
        record(node, (x,), out)
    return out


class PermuteBackward0(Node):
    __slots__ = ("inverse",)

    def backward(self, g: Tensor) -> tuple:
        return (permute(g, self.inverse),)


@register
def permute(x: Tensor, dims: Any) -> Tensor:
    """Reorder dims: output dim i is input dim ``dims[i]``."""
    check_tensor(x, "permute")
    dims = tuple(normalize_dim(d, x.ndim, "permute") for d in dims)
    if sorted(dims) != list(range(x.ndim)):
        raise RuntimeError(f"permute: dims {list(dims)} are not a permutation of the {x.ndim} dims of a tensor of shape {list(x.shape)}")
    out = _view_out(x.device.xp.transpose(x.data, dims), x)
    if tls.grad_enabled and x._rg:
        node = PermuteBackward0()
        node.inverse = tuple(int(i) for i in numpy.argsort(dims))
        record(node, (x,), out)
    return out


class ExpandBackward0(Node):
    __slots__ = ("in_shape",)

    def backward(self, g: Tensor) -> tuple:
        from ._core import sum_to

        return (sum_to(g, self.in_shape),)


@register
def expand(x: Tensor, shape: Any) -> Tensor:
    """Broadcast to ``shape`` without copying (-1 keeps a dim); the result is read-only."""
    check_tensor(x, "expand")
    shape = _shape_arg((tuple(shape),) if not isinstance(shape, int) else (shape,))
    lead = len(shape) - x.ndim
    if lead < 0:
        raise RuntimeError(f"expand: the number of sizes provided ({len(shape)}) must be >= the number of dims ({x.ndim})")
    shape = tuple(x.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(shape))
    if shape == x.shape:
        return x if not (tls.grad_enabled and x._rg) else _expand_record(x, x.data, shape)
    try:
        data = x.device.xp.broadcast_to(x.data, shape)
    except ValueError:
        raise RuntimeError(f"expand: the shape {list(x.shape)} cannot be expanded to {list(shape)}") from None
    return _expand_record(x, data, shape)


def _expand_record(x: Tensor, data: Any, shape: tuple) -> Tensor:
    out = _wrap(data, x.device)
    out._vc = x._vc
    if tls.grad_enabled and x._rg:
        node = ExpandBackward0()
        node.in_shape = x.shape
        record(node, (x,), out)
    return out


@register
def squeeze(x: Tensor, dim: Any = None) -> Tensor:
    """Drop size-1 dims (only ``dim`` when given; a no-op if that dim is not 1)."""
    check_tensor(x, "squeeze")
    if dim is None:
        shape = tuple(s for s in x.shape if s != 1)
    else:
        d = normalize_dim(dim, x.ndim, "squeeze")
        shape = x.shape if x.ndim == 0 or x.shape[d] != 1 else x.shape[:d] + x.shape[d + 1:]
    return reshape(x, shape)


@register
def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """Insert a size-1 dim at ``dim`` (negative counts from the end of the result)."""
    check_tensor(x, "unsqueeze")
    d = normalize_dim(dim, x.ndim + 1, "unsqueeze")
    return reshape(x, x.shape[:d] + (1,) + x.shape[d:])


# --- indexing --------------------------------------------------------------------------

def _convert_index(idx: Any) -> Any:
    """Tensors inside an index become arrays; lists of ints become integer arrays."""
    if isinstance(idx, tuple):
        return tuple(_convert_index(i) for i in idx)
    if isinstance(idx, Tensor):
        return idx.data
    if isinstance(idx, list):
        return numpy.asarray(idx)
    return idx


def _is_basic(idx: Any) -> bool:
    items = idx if isinstance(idx, tuple) else (idx,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, numpy.integer, slice)) for i in items)


class IndexBackward0(Node):
    __slots__ = ("in_shape", "index", "basic")

    def backward(self, g: Tensor) -> tuple:
        return (index_put_zeros(g, self.in_shape, self.index, self.basic),)


@register
def getitem(x: Tensor, index: Any) -> Tensor:
    """``x[index]``: ints, slices, None, Ellipsis, boolean masks, integer arrays/tensors.
    Repeated integer indices accumulate their gradients."""
    check_tensor(x, "getitem")
    idx = _convert_index(index)
    try:
        data = x.data[idx]
    except IndexError as e:
        raise IndexError(f"getitem: index {index!r:.80} is out of range for a tensor of shape {list(x.shape)} ({e})") from None
    basic = _is_basic(idx)
    out = _view_out(data, x) if basic else _wrap(data, x.device)
    if out.data.base is None and not isinstance(out.data, x.device.xp.ndarray):
        out.data = x.device.xp.asarray(out.data)
    if tls.grad_enabled and x._rg:
        node = IndexBackward0()
        node.in_shape, node.index, node.basic = x.shape, idx, basic
        record(node, (x,), out)
    return out


class IndexPutBackward0(Node):
    __slots__ = ("index",)

    def backward(self, g: Tensor) -> tuple:
        return (getitem(g, self.index),)


def index_put_zeros(g: Tensor, shape: tuple, index: Any, basic: bool) -> Tensor:
    """Zeros of ``shape`` with ``g`` added at ``index`` (getitem's backward; differentiable)."""
    xp = g.device.xp
    data = xp.zeros(shape, dtype=g.dtype)
    if basic:
        data[index] = g.data
    else:
        xp.add.at(data, index, g.data)
    out = _wrap(data, g.device)
    if tls.grad_enabled and g._rg:
        node = IndexPutBackward0()
        node.index = index
        record(node, (g,), out)
    return out
