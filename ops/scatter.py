"""Writing at indices and masks: masked_fill, masked_select, masked_scatter; index_add,
index_copy, index_fill; scatter (tensor and number forms, ``reduce=``), scatter_add,
scatter_reduce; take, take_along_dim; and the in-place twins of the writing ones
(``index_add_`` ... ``scatter_reduce_``).

Each out-of-place op copies its input and writes into the copy on arrays; its node carries
torch's name and computes its gradients with ops (so double backward works), keeping its
index tensors only as saved values (Note [Saved indices] in index.py). Repeated indices
accumulate where the op adds (index_add, scatter_add, scatter_reduce, take), and where it
overwrites, the last write wins as on torch's cpu (torch leaves that order unspecified).

The in-place twins run the out-of-place op through the in-place machinery of inplace.py
(Note [In-place ops]): a recorded one computes on a snapshot and ``self`` adopts the result
(a view rebases its base: Note [In-place ops on views] in views.py); an unrecorded one
writes the result's values into ``self``. See Note [Op definitions] in _core.py.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy

from .. import devices
from ..engine.tensor import Tensor, _wrap
from ._core import (BOOL, Node, as_operand, broadcast_array, broadcast_check, cast, check_tensor, const,
                    device_error, fit, normalize_dim, record, register, tls)
from .device import to
from .elementwise import div, mul, where
from .index import along_dim_index, gather, getitem, index_put_zeros
from .inplace import _adopt, _bump, _check_write, _must_record, _snapshot
from .reduce import sum as _sum
from .shape import expand, reshape


# --- operand checks ---------------------------------------------------------------------------

def _index(index: Any, x: Tensor, name: str, long_only: str | None = None) -> Any:
    """``index`` as an array on ``x``'s device (a Tensor there, as torch wants), of an integer
    dtype: int32 or int64, or with ``long_only`` int64 alone (that message, as torch's)."""
    if not isinstance(index, Tensor):
        raise TypeError(f"{name}(): argument 'index' must be Tensor, not {type(index).__name__}")
    if index.device is not x.device:
        raise device_error(name, x, index)
    data = index._data
    if long_only is not None and data.dtype != numpy.int64:
        raise RuntimeError(long_only)
    if data.dtype.kind not in "iu" or data.dtype.itemsize < 4:
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index")
    return data


def _vector(idx: Any, error: Exception) -> Any:
    """An index of index_add and its kin: 0-d or 1-D."""
    if idx.ndim > 1:
        raise error
    return idx


def _bounds(idx: Any, size: int, d: int, name: str, error: type = RuntimeError) -> None:
    """Every index within ``[-size, size)`` (torch's words; RuntimeError or, where torch says so,
    IndexError)."""
    if idx.size and (int(idx.max()) >= size or int(idx.min()) < -size):
        bad = int(idx.max()) if int(idx.max()) >= size else int(idx.min())
        raise error(f"{name}index {bad} is out of bounds for dimension {d} with size {size}")


def _same_dtype(x: Tensor, src: Tensor, name: str) -> None:
    if src.dtype != x.dtype:
        raise RuntimeError(f"scatter(): Expected self.dtype to be equal to src.dtype (got {x.dtype} and {src.dtype})")


def _value(value: Any, x: Tensor, name: str) -> Tensor:
    """A fill value: a number, or a 0-d tensor on ``x``'s device or on the cpu (torch takes a
    cpu scalar for a tensor on any device; it moves there, its gradient comes back)."""
    v = as_operand(value, x, name)
    if v.ndim != 0:
        raise RuntimeError(f"{name} only supports a 0-dimensional value tensor, but got tensor with {v.ndim} "
                           f"dimension(s).")
    if v.device is not x.device:
        if v.device is not devices.cpu:
            raise device_error(name, x, v)
        v = to(v, x.device)
    return v


def _saved_index(index: Tensor, idx: Any, x: Tensor) -> Tensor:
    """The tensor to save for an index (Note [Saved indices] in index.py): the user's."""
    return index if index._data is idx else _wrap(idx, x.device)


def _index_select(g: Tensor, d: int, index: Tensor) -> Tensor:
    """``g``'s entries at the 1-D ``index`` along ``d`` (differentiable: getitem)."""
    return getitem(g, (slice(None),) * d + (index._data if index._data.ndim else index._data.reshape(1),))


def _zero_like(g: Tensor) -> Tensor:
    return const(g.device.xp.zeros((), dtype=g.dtype), g)


# --- masks ------------------------------------------------------------------------------------

def _mask(mask: Any, x: Tensor, name: str) -> Tensor:
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name}(): argument 'mask' must be Tensor, not {type(mask).__name__}")
    if mask.dtype is not BOOL and mask._data.dtype is not BOOL:
        raise RuntimeError(f"{name} only supports boolean masks, but got mask with dtype {mask.dtype}")
    if mask.device is not x.device:
        raise device_error(name, x, mask)
    return mask


def _broadcast_shape(a: tuple, b: tuple, name: str) -> tuple:
    """The shape of the input ``a`` and the mask ``b`` broadcast (torch's RuntimeError where
    they do not; torch names the mask first)."""
    broadcast_check(b, a, name)
    return tuple(numpy.broadcast_shapes(a, b))


class MaskedFillBackward0(Node):
    """``masked_fill`` with a number; also the input's gradient for MaskedFillBackward1."""

    __slots__ = ("in_shape", "in_dtype")

    def backward(self, g: Tensor) -> tuple:
        (mask,) = self.saved_tensors()
        gx = fit(where(mask, _zero_like(g), g), self.in_shape, self.in_dtype) if self.next_edges[0][0] is not None \
            else None
        return (gx,)


class MaskedFillBackward1(MaskedFillBackward0):
    """``masked_fill`` with a 0-d tensor value: that value takes the masked places' sum."""

    __slots__ = ("v_dtype",)

    def backward(self, g: Tensor) -> tuple:
        (mask,) = self.saved_tensors()
        ex, ev = self.next_edges
        zero = _zero_like(g)
        gx = fit(where(mask, zero, g), self.in_shape, self.in_dtype) if ex[0] is not None else None
        gv = fit(_sum(where(mask, g, zero)), (), self.v_dtype) if ev[0] is not None else None
        return (gx, gv)


@register
def masked_fill(input: Tensor, mask: Tensor, value: Any) -> Tensor:  # noqa: A002 - torch's names
    """``input`` with ``value`` (a number or a 0-d tensor) where the bool ``mask`` is true; the
    two broadcast, as ``torch.masked_fill``. The gradient is 0 at the filled places; a tensor
    ``value`` takes the sum of theirs.

    >>> import threadgrad as tg
    >>> tg.masked_fill(tg.zeros(3), tg.tensor([True, False, True]), -1.0).tolist()
    [-1.0, 0.0, -1.0]
    """
    x = check_tensor(input, "masked_fill")
    mask = _mask(mask, x, "masked_fill_")
    v = _value(value, x, "masked_fill_")
    shape = _broadcast_shape(x.shape, mask.shape, "masked_fill")
    xp = x.device.xp
    out = _wrap(xp.where(mask._data, cast(v._data, x.dtype), broadcast_array(x._data, shape, xp)), x.device)
    tensor_value = isinstance(value, Tensor)
    if tls.grad_enabled and (x._rg or (tensor_value and v._rg)):
        node = MaskedFillBackward1() if tensor_value else MaskedFillBackward0()
        node.in_shape, node.in_dtype = x.shape, x.dtype
        if tensor_value:
            node.v_dtype = v.dtype
            record(node, (x, v), out, (mask,))
        else:
            record(node, (x,), out, (mask,))
    return out


class MaskedSelectBackward0(Node):
    __slots__ = ("in_shape", "in_dtype", "shape")

    def backward(self, g: Tensor) -> tuple:
        (mask,) = self.saved_arrays()
        m = broadcast_array(mask, self.shape, g.device.xp)
        return (fit(index_put_zeros(g, self.shape, m, False), self.in_shape, self.in_dtype),)


@register
def masked_select(input: Tensor, mask: Tensor) -> Tensor:  # noqa: A002
    """The elements of ``input`` where the bool ``mask`` is true, as a 1-D tensor in C order
    (the two broadcast), as ``torch.masked_select``.

    >>> import threadgrad as tg
    >>> tg.masked_select(tg.tensor([[1.0, 2.0], [3.0, 4.0]]), tg.tensor([True, False])).tolist()
    [1.0, 3.0]
    """
    x = check_tensor(input, "masked_select")
    if isinstance(mask, Tensor) and mask.dtype is not BOOL and mask._data.dtype is not BOOL:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    mask = _mask(mask, x, "masked_select")
    shape = _broadcast_shape(x.shape, mask.shape, "masked_select")
    xp = x.device.xp
    m = broadcast_array(mask._data, shape, xp)
    out = _wrap(broadcast_array(x._data, shape, xp)[m], x.device)
    if tls.grad_enabled and x._rg:
        node = MaskedSelectBackward0()
        node.in_shape, node.in_dtype, node.shape = x.shape, x.dtype, shape
        record(node, (x,), out, (mask,))
    return out


class MaskedScatterBackward0(Node):
    __slots__ = ("in_shape", "in_dtype", "src_shape", "shape")

    def backward(self, g: Tensor) -> tuple:
        (mask,) = self.saved_tensors()
        ex, es = self.next_edges
        gx = gs = None
        if ex[0] is not None:
            gx = fit(where(mask, _zero_like(g), g), self.in_shape, self.in_dtype)
        if es[0] is not None:
            picked = getitem(g, broadcast_array(mask._data, self.shape, g.device.xp))
            n = int(numpy.prod(self.src_shape))
            gs = reshape(index_put_zeros(picked, (n,), slice(0, picked.shape[0]), True), self.src_shape)
        return (gx, gs)


@register
def masked_scatter(input: Tensor, mask: Tensor, source: Tensor) -> Tensor:  # noqa: A002
    """``input`` with the bool ``mask``'s true places (in C order) taking ``source``'s first
    elements, as ``torch.masked_scatter`` (``input`` and ``mask`` broadcast; ``source`` has
    ``input``'s dtype and at least as many elements as the mask has true places).

    >>> import threadgrad as tg
    >>> tg.masked_scatter(tg.zeros(3), tg.tensor([True, False, True]), tg.tensor([5.0, 6.0])).tolist()
    [5.0, 0.0, 6.0]
    """
    x = check_tensor(input, "masked_scatter")
    mask = _mask(mask, x, "masked_scatter_")
    src = check_tensor(source, "masked_scatter", "source")
    if src.device is not x.device:
        raise device_error("masked_scatter", x, src)
    if src.dtype != x.dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but got {x.dtype} and "
                           f"{src.dtype}")
    shape = _broadcast_shape(x.shape, mask.shape, "masked_scatter")
    xp = x.device.xp
    m = broadcast_array(mask._data, shape, xp)
    n = int(m.sum())
    if n > src._data.size:
        raise RuntimeError("Number of elements of source < number of ones in mask")
    data = xp.array(broadcast_array(x._data, shape, xp))
    data[m] = src._data.reshape(-1)[:n]
    out = _wrap(data, x.device)
    if tls.grad_enabled and (x._rg or src._rg):
        node = MaskedScatterBackward0()
        node.in_shape, node.in_dtype, node.src_shape, node.shape = x.shape, x.dtype, src.shape, shape
        record(node, (x, src), out, (mask,))
    return out


# --- index_add, index_copy, index_fill ---------------------------------------------------------

def _index_source(x: Tensor, d: int, idx: Any, source: Any, name: str) -> Tensor:
    """The source of index_add/index_copy: ``x``'s dtype and device, and ``x``'s shape but
    ``len(index)`` along ``d``."""
    src = check_tensor(source, name, "source")
    if src.device is not x.device:
        raise device_error(name, x, src)
    if src.dtype != x.dtype:
        raise RuntimeError(f"index_add_(): self ({x.dtype}) and source ({src.dtype}) must have the same scalar type"
                           if name == "index_add" else f"index_copy_(): self and source expected to have the same "
                           f"dtype, but got (self) {x.dtype} and (source) {src.dtype}")
    n = idx.size
    if x.ndim == 0 or src.ndim == 0:
        if src._data.size != 1 or n != 1 or x.ndim > 1:
            raise RuntimeError(f"{name}_(): source tensor shape must match self tensor shape, excluding the "
                               f"specified dimension. Got self.shape = {list(x.shape)} source.shape = "
                               f"{list(src.shape)}")
        return src
    along = src.shape[d] if src.ndim > d else 1
    if src.ndim <= d or along != n:
        raise (RuntimeError if name == "index_add" else IndexError)(
            f"{name}_(): Number of indices ({n}) should be equal to source.size(dim)"
            + (f": ({along}), for dim: {d}" if name == "index_add" else f" ({along})"))
    if src.shape[:d] + src.shape[d + 1:] != x.shape[:d] + x.shape[d + 1:]:
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the specified dimension. "
                           f"Got self.shape = {list(x.shape)} source.shape = {list(src.shape)}")
    return src


def _along(x: Tensor, d: int, idx: Any) -> tuple:
    """The places ``index`` names along ``d`` (all of a 0-d ``x``)."""
    return (slice(None),) * d + (idx.reshape(-1),) if x.ndim else ()


class IndexAddBackward0(Node):
    __slots__ = ("dim", "alpha", "src_shape")

    def backward(self, g: Tensor) -> tuple:
        (index,) = self.saved_tensors()
        ex, es = self.next_edges
        gs = None
        if es[0] is not None:
            gs = _index_select(g, self.dim, index) if g.ndim else g
            gs = reshape(mul(gs, self.alpha) if self.alpha != 1 else gs, self.src_shape)
        return (g if ex[0] is not None else None, gs)


@register
def index_add(input: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:  # noqa: A002
    """``input`` with ``alpha * source[..., i, ...]`` added at ``input[..., index[i], ...]``
    along ``dim`` (repeated indices add up), as ``torch.index_add``.

    >>> import threadgrad as tg
    >>> tg.index_add(tg.zeros(3), 0, tg.tensor([0, 0, 2]), tg.tensor([1.0, 2.0, 3.0])).tolist()
    [3.0, 0.0, 3.0]
    """
    x = check_tensor(input, "index_add")
    idx = _vector(_index(index, x, "index_add"), IndexError("index_add_(): Index is supposed to be a vector"))
    d = normalize_dim(dim, x.ndim, "index_add")
    src = _index_source(x, d, idx, source, "index_add")
    _bounds(idx, x.shape[d] if x.ndim else 1, d, "")
    data = x._data.copy()
    add = src._data if alpha == 1 else src._data * alpha
    x.device.xp.add.at(data, _along(x, d, idx), cast(add, x.dtype).reshape(data[_along(x, d, idx)].shape))
    out = _wrap(data, x.device)
    if tls.grad_enabled and (x._rg or src._rg):
        node = IndexAddBackward0()
        node.dim, node.alpha, node.src_shape = d, alpha, src.shape
        record(node, (x, src), out, (_saved_index(index, idx, x),))
    return out


class IndexCopyBackward0(Node):
    __slots__ = ("dim", "src_shape")

    def backward(self, g: Tensor) -> tuple:
        (index,) = self.saved_tensors()
        ex, es = self.next_edges
        gx = index_fill(g, self.dim, index, 0.0) if ex[0] is not None else None
        gs = reshape(_index_select(g, self.dim, index) if g.ndim else g, self.src_shape) if es[0] is not None \
            else None
        return (gx, gs)


@register
def index_copy(input: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:  # noqa: A002
    """``input`` with ``input[..., index[i], ...] = source[..., i, ...]`` along ``dim``, as
    ``torch.index_copy``.

    >>> import threadgrad as tg
    >>> tg.index_copy(tg.zeros(3), 0, tg.tensor([2, 0]), tg.tensor([1.0, 2.0])).tolist()
    [2.0, 0.0, 1.0]
    """
    x = check_tensor(input, "index_copy")
    idx = _index(index, x, "index_copy", f"index_copy_(): Expected a long tensor for index, but got {index.dtype}")
    idx = _vector(idx, IndexError("index_copy_(): Index should have dimension 1 or 0"))
    d = normalize_dim(dim, x.ndim, "index_copy")
    src = _index_source(x, d, idx, source, "index_copy")
    _bounds(idx, x.shape[d] if x.ndim else 1, d, "index_copy_(): ", IndexError)
    data = x._data.copy()
    where_ = _along(x, d, idx)
    data[where_] = src._data.reshape(data[where_].shape)
    out = _wrap(data, x.device)
    if tls.grad_enabled and (x._rg or src._rg):
        node = IndexCopyBackward0()
        node.dim, node.src_shape = d, src.shape
        record(node, (x, src), out, (_saved_index(index, idx, x),))
    return out


class IndexFillBackward0(Node):
    """``index_fill`` with a number."""

    __slots__ = ("dim",)

    def backward(self, g: Tensor) -> tuple:
        (index,) = self.saved_tensors()
        return (index_fill(g, self.dim, index, 0.0),)


class IndexFillBackward1(Node):
    """``index_fill`` with a 0-d tensor value: it takes the sum of the filled places' gradient,
    each place once however often the index names it (torch's ``_unique(index)``)."""

    __slots__ = ("dim", "v_dtype")

    def backward(self, g: Tensor) -> tuple:
        (index,) = self.saved_tensors()
        ex, ev = self.next_edges
        gx = index_fill(g, self.dim, index, 0.0) if ex[0] is not None else None
        gv = None
        if ev[0] is not None:
            unique = _wrap(g.device.xp.unique(index._data), g.device)
            gv = fit(_sum(_index_select(g, self.dim, unique) if g.ndim else g), (), self.v_dtype)
        return (gx, gv)


@register
def index_fill(input: Tensor, dim: int, index: Tensor, value: Any) -> Tensor:  # noqa: A002
    """``input`` with ``value`` (a number or a 0-d tensor) at ``input[..., index[i], ...]``
    along ``dim``, as ``torch.index_fill``.

    >>> import threadgrad as tg
    >>> tg.index_fill(tg.zeros(2, 2), 1, tg.tensor([1]), 5.0).tolist()
    [[0.0, 5.0], [0.0, 5.0]]
    """
    x = check_tensor(input, "index_fill")
    if isinstance(index, Tensor) and index.dtype != numpy.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    idx = _vector(_index(index, x, "index_fill"), RuntimeError("Index has to be a vector/scalar"))
    d = normalize_dim(dim, x.ndim, "index_fill")
    v = _value(value, x, "index_fill_")
    _bounds(idx, x.shape[d] if x.ndim else 1, d, "", IndexError)
    data = x._data.copy()
    data[_along(x, d, idx)] = cast(v._data, x.dtype)
    out = _wrap(data, x.device)
    tensor_value = isinstance(value, Tensor)
    if tls.grad_enabled and (x._rg or (tensor_value and v._rg)):
        node = IndexFillBackward1() if tensor_value else IndexFillBackward0()
        node.dim = d
        if tensor_value:
            node.v_dtype = v.dtype
            record(node, (x, v), out, (_saved_index(index, idx, x),))
        else:
            record(node, (x,), out, (_saved_index(index, idx, x),))
    return out


# --- scatter, scatter_add, scatter_reduce --------------------------------------------------------

def _scatter_operands(x: Tensor, dim: int, index: Any, src: Tensor | None, name: str) -> tuple:
    """``(d, idx, positions, block)`` for an ``x`` of at least one dim: the dim, the index array,
    the advanced index of the places written (one per index entry; None for an empty index) and
    the index entries' block of ``src`` (torch's shape rules: the same number of dims; ``index``
    no larger than ``src`` anywhere, nor than ``x`` off ``dim``)."""
    idx = _index(index, x, name)
    d = normalize_dim(dim, x.ndim, name)
    if src is not None:
        if src.device is not x.device:
            raise device_error(name, x, src)
        _same_dtype(x, src, name)
    if not idx.size:
        return d, idx, None, None
    if x.ndim == 0:  # as torch's: a 0-d input, index and src act as 1-element 1-D ones
        if idx.size != 1 or (src is not None and src._data.size < 1):
            raise RuntimeError(f"{name}(): Index tensor must have the same number of dimensions as self tensor")
        _bounds(idx.reshape(-1), 1, 0, "")
        return d, idx, (idx.reshape(-1),), (src._data.reshape(-1)[:1] if src is not None else None)
    if idx.ndim != x.ndim:
        raise RuntimeError(f"{name}(): Index tensor must have the same number of dimensions as self tensor")
    if src is not None and src.ndim != idx.ndim:
        raise RuntimeError(f"{name}(): Index tensor must have the same number of dimensions as src tensor")
    for k in range(idx.ndim):
        if (k != d and idx.shape[k] > x.shape[k]) or (src is not None and idx.shape[k] > src.shape[k]):
            raise RuntimeError(f"Expected index {list(idx.shape)} to be no larger than self {list(x.shape)} apart "
                               f"from dimension {d}" + (f" and to be no larger size than src {list(src.shape)}"
                                                        if src is not None else ""))
    _bounds(idx, x.shape[d], d, "")
    positions = along_dim_index(idx, d, x.device.xp)
    block = src._data[tuple(slice(0, n) for n in idx.shape)] if src is not None else None
    return d, idx, positions, block


def _writable(data: Any) -> Any:
    """The array a scatter writes into: a 0-d input's copy as a 1-element 1-D view of it."""
    return data.reshape(1) if data.ndim == 0 else data


def _gather_into(g: Tensor, d: int, index: Tensor, src_shape: tuple) -> Tensor:
    """The gradient of the ``src`` of a scatter: ``g`` gathered at ``index``, placed in the
    corner of ``src_shape`` the index covers (zeros elsewhere)."""
    picked = gather(g, d, index) if g.ndim else reshape(g, index.shape)
    if picked.shape == src_shape:
        return picked
    return index_put_zeros(picked, src_shape, tuple(slice(0, n) for n in picked.shape), True)


class ScatterBackward0(Node):
    """``scatter`` with a tensor ``src``."""

    __slots__ = ("dim", "src_shape")

    def backward(self, g: Tensor) -> tuple:
        (index,) = self.saved_tensors()
        ex, es = self.next_edges
        gx = scatter(g, self.dim, index, 0.0) if ex[0] is not None else None
        gs = _gather_into(g, self.dim, index, self.src_shape) if es[0] is not None else None
        return (gx, gs)


class ScatterBackward1(Node):
    """``scatter`` with a number."""

    __slots__ = ("dim",)

    def backward(self, g: Tensor) -> tuple:
        (index,) = self.saved_tensors()
        return (scatter(g, self.dim, index, 0.0),)


class ScatterReduceNotImplemented(Node):
    """``scatter(..., reduce=)``: torch has no derivative for it and records this node, which
    raises when backward reaches it."""

    __slots__ = ()

    def name(self) -> str:
        return "torch::autograd::NotImplemented"

    def backward(self, *grads: Tensor) -> tuple:
        raise RuntimeError("the derivative for 'scatter' with reduce= is not implemented (as in torch); use "
                           "scatter_reduce, which has one")


_UFUNCS = {"add": "add", "sum": "add", "mean": "add", "multiply": "multiply", "prod": "multiply",
           "amax": "maximum", "amin": "minimum"}


def _write(data: Any, positions: Any, values: Any, how: str, xp: Any) -> None:
    """``data[positions] = values``, or combined by ``how`` with a ufunc's ``at`` (repeated
    places combine in order). An array module whose ufunc lacks ``at`` (cupy has it for add,
    maximum and minimum, not multiply) combines on the host: slower, the same values."""
    if how == "set":
        data[positions] = values
        return
    ufunc = getattr(xp, _UFUNCS[how])
    try:
        ufunc.at(data, positions, values)
    except (AttributeError, NotImplementedError, TypeError):
        if xp is numpy:
            raise
        host = xp.asnumpy(data)
        getattr(numpy, _UFUNCS[how]).at(host, tuple(xp.asnumpy(p) if hasattr(p, "shape") else p for p in positions),
                                        xp.asnumpy(values))
        data[...] = xp.asarray(host)


@register
def scatter(input: Tensor, dim: int, index: Tensor, src: Any = None, *, value: Any = None,  # noqa: A002
            reduce: str | None = None) -> Tensor:
    """``input`` with ``out[index[i][j]][j] = src[i][j]`` for ``dim=0`` (and so on), as
    ``torch.scatter``; ``src`` may be a number (or pass ``value=``). ``reduce='add'`` or
    ``'multiply'`` combines instead of writing; as in torch that form has no derivative (its
    backward raises). Where the index repeats a place, the last write wins.

    >>> import threadgrad as tg
    >>> tg.scatter(tg.zeros(2, 3), 1, tg.tensor([[2], [0]]), tg.tensor([[1.0], [2.0]])).tolist()
    [[0.0, 0.0, 1.0], [2.0, 0.0, 0.0]]
    """
    x = check_tensor(input, "scatter")
    if (src is None) == (value is None):
        raise TypeError("scatter() takes a src tensor or a value, one of them")
    if reduce is not None and reduce not in ("add", "multiply"):
        raise RuntimeError("reduce argument must be either add or multiply.")
    tensor_src = isinstance(src, Tensor)
    if reduce is not None and tensor_src:
        warnings.warn("The reduce argument of torch.scatter with Tensor src is deprecated and will be removed in a "
                      "future PyTorch release. Use torch.scatter_reduce instead for more reduction options.",
                      UserWarning, stacklevel=2)
    s = check_tensor(src, "scatter", "src") if tensor_src else _value(src if src is not None else value, x,
                                                                           "scatter")
    d, idx, positions, block = _scatter_operands(x, dim, index, s if tensor_src else None, "scatter")
    data = x._data.copy()
    if positions is not None:
        vals = block if tensor_src else cast(s._data, x.dtype)
        _write(_writable(data), positions, vals, reduce or "set", x.device.xp)
    out = _wrap(data, x.device)
    if tls.grad_enabled and (x._rg or (tensor_src and s._rg)):
        saved = (_saved_index(index, idx, x),)
        if reduce is not None:
            record(ScatterReduceNotImplemented(), (x, s if tensor_src else None), out)
        elif tensor_src:
            node = ScatterBackward0()
            node.dim, node.src_shape = d, s.shape
            record(node, (x, s), out, saved)
        else:
            node1 = ScatterBackward1()
            node1.dim = d
            record(node1, (x,), out, saved)
    return out


class ScatterAddBackward0(Node):
    __slots__ = ("dim", "src_shape")

    def backward(self, g: Tensor) -> tuple:
        (index,) = self.saved_tensors()
        ex, es = self.next_edges
        gs = _gather_into(g, self.dim, index, self.src_shape) if es[0] is not None else None
        return (g if ex[0] is not None else None, gs)


@register
def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:  # noqa: A002
    """``input`` with ``out[index[i][j]][j] += src[i][j]`` for ``dim=0`` (and so on); repeated
    places add up, as ``torch.scatter_add``.

    >>> import threadgrad as tg
    >>> tg.scatter_add(tg.zeros(3), 0, tg.tensor([0, 0, 2]), tg.tensor([1.0, 2.0, 3.0])).tolist()
    [3.0, 0.0, 3.0]
    """
    x = check_tensor(input, "scatter_add")
    s = check_tensor(src, "scatter_add", "src")
    d, idx, positions, block = _scatter_operands(x, dim, index, s, "scatter_add")
    data = x._data.copy()
    if positions is not None:
        _write(_writable(data), positions, block, "add", x.device.xp)
    out = _wrap(data, x.device)
    if tls.grad_enabled and (x._rg or s._rg):
        node = ScatterAddBackward0()
        node.dim, node.src_shape = d, s.shape
        record(node, (x, s), out, (_saved_index(index, index._data, x),))
    return out


_IDENTITY = {"sum": 0, "mean": 0, "prod": 1}


def _identity(reduce: str, dtype: Any) -> Any:
    if reduce in _IDENTITY:
        return _IDENTITY[reduce]
    if dtype.kind == "f":
        return -numpy.inf if reduce == "amax" else numpy.inf
    info = numpy.iinfo(dtype) if dtype.kind in "iu" else None
    if info is None:  # bool
        return reduce == "amin"
    return info.min if reduce == "amax" else info.max


def _scatter_reduce_data(x: Tensor, positions: Any, block: Any, reduce: str, include_self: bool) -> Any:
    xp = x.device.xp
    whole = x._data.copy()
    if positions is None:
        return whole
    data = _writable(whole)
    if not include_self:
        data[positions] = _identity(reduce, x.dtype)
    _write(data, positions, block, reduce, xp)
    if reduce == "mean":
        count = xp.full(data.shape, 1 if include_self else 0, dtype=data.dtype)
        xp.add.at(count, positions, 1)
        count[count == 0] = 1
        data = data / count if data.dtype.kind == "f" else xp.floor_divide(data, count)
    return data.reshape(whole.shape)


class ScatterReduceBackward0(Node):
    """torch's formulas for each reduction (``scatter_reduce_backward``), written with ops."""

    __slots__ = ("dim", "reduce", "include_self")

    def backward(self, g: Tensor) -> tuple:
        x, src, index, result = self.saved_tensors()
        ex, es = self.next_edges
        d, reduce = self.dim, self.reduce
        xp = g.device.xp
        if reduce == "sum":
            gx, gs = g, gather(g, d, index)
        elif reduce == "prod":
            one = const(xp.ones((), dtype=x.dtype), x)
            masked_self = where(const(x._data == 0, x), one, x)
            gx = div(mul(g, scatter_reduce(masked_self, d, index, src, "prod", include_self=self.include_self)),
                     masked_self)
            src_zero = src._data == 0
            zeros_here = xp.zeros(x.shape, dtype=x.dtype)
            xp.add.at(zeros_here, along_dim_index(index._data, d, xp), src_zero.astype(x.dtype))
            num_zeros = zeros_here[along_dim_index(index._data, d, xp)]
            if tls.grad_enabled and (num_zeros > 1).any():
                raise RuntimeError("scatter_reduce(): Double backward is unsupported for src when >1 zeros in src "
                                   "are scattered to the same position. Please file an issue with PyTorch")
            single_zero = const(src_zero & (num_zeros == 1), src)
            masked_src = where(single_zero, one, src)
            masked_src_result = scatter_reduce(x, d, index, masked_src, "prod", include_self=self.include_self)
            gs = where(single_zero, gather(mul(g, masked_src_result), d, index),
                       div(gather(mul(g, result), d, index), where(const(src_zero, src), one, src)))
        elif reduce == "mean":
            n = xp.full(x.shape, 1 if self.include_self else 0, dtype=x.dtype)
            xp.add.at(n, along_dim_index(index._data, d, xp), 1)
            n[n == 0] = 1
            gx = div(g, const(n, g))
            gs = gather(gx, d, index)
        else:  # amax, amin: the gradient shared evenly among the elements equal to the result
            value = gather(result, d, index)._data
            self_is = xp.asarray(x._data == result._data).astype(x.dtype)  # (0-d inputs: arrays, not scalars)
            src_is = xp.asarray(src._data == value).astype(x.dtype)
            n = self_is.copy()
            xp.add.at(n, along_dim_index(index._data, d, xp), src_is)
            shared = div(g, const(n, g))
            gx = mul(shared, const(self_is, g))
            gs = mul(gather(shared, d, index), const(src_is, g))
        if not self.include_self and ex[0] is not None:
            gx = scatter(gx, d, index, 0.0)
        return (gx if ex[0] is not None else None, gs if es[0] is not None else None)


@register
def scatter_reduce(input: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,  # noqa: A002
                   include_self: bool = True) -> Tensor:
    """``input`` with ``src``'s entries reduced into the places ``index`` names along ``dim``
    (``"sum"``, ``"prod"``, ``"mean"``, ``"amax"``, ``"amin"``), as ``torch.scatter_reduce``;
    ``include_self=False`` leaves ``input``'s own values at those places out. Integer means
    round down, as torch's. amax/amin share a place's gradient evenly among its ties.

    >>> import threadgrad as tg
    >>> x = tg.tensor([1.0, 1.0])
    >>> tg.scatter_reduce(x, 0, tg.tensor([0, 0, 1]), tg.tensor([3.0, 5.0, 0.5]), "amax").tolist()
    [5.0, 1.0]
    """
    x = check_tensor(input, "scatter_reduce")
    s = check_tensor(src, "scatter_reduce", "src")
    reduce = {"max": "amax", "min": "amin"}.get(reduce, reduce)  # torch's older names, still taken
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    d, idx, positions, block = _scatter_operands(x, dim, index, s, "scatter_reduce")
    if positions is not None and s.shape != index.shape:
        # the formulas gather at the index: a src larger than it enters through the corner it covers
        s = getitem(s, tuple(slice(0, n) for n in index.shape))
    return _scatter_reduce_result(x, d, index, s, positions, block, reduce, include_self)


def _scatter_reduce_result(x: Tensor, d: int, index: Tensor, s: Tensor, positions: Any, block: Any, reduce: str,
                           include_self: bool) -> Tensor:
    out = _wrap(_scatter_reduce_data(x, positions, block, reduce, include_self), x.device)
    if tls.grad_enabled and (x._rg or s._rg):
        node = ScatterReduceBackward0()
        node.dim, node.reduce, node.include_self = d, reduce, bool(include_self)
        record(node, (x, s), out, (x, s, _saved_index(index, index._data, x), out))
    return out


# --- take, take_along_dim --------------------------------------------------------------------------

class TakeBackward0(Node):
    __slots__ = ("in_shape",)

    def backward(self, g: Tensor) -> tuple:
        (index,) = self.saved_arrays()
        n = int(numpy.prod(self.in_shape))
        flat = index_put_zeros(reshape(g, (-1,)), (n,), (index.reshape(-1) % max(n, 1),), False)
        return (reshape(flat, self.in_shape),)


@register
def take(input: Tensor, index: Tensor) -> Tensor:  # noqa: A002
    """``input``'s elements at ``index`` (int64, any shape; negative counts from the end), as if
    ``input`` were 1-D, in ``index``'s shape, as ``torch.take``; repeated indices accumulate.

    >>> import threadgrad as tg
    >>> tg.take(tg.tensor([[1.0, 2.0], [3.0, 4.0]]), tg.tensor([3, 0])).tolist()
    [4.0, 1.0]
    """
    x = check_tensor(input, "take")
    idx = _index(index, x, "take", f"take(): Expected a long tensor for index, but got {getattr(index, 'dtype', '')}")
    n = x._data.size
    if idx.size and (int(idx.max()) >= n or int(idx.min()) < -n):
        bad = int(idx.max()) if int(idx.max()) >= n else int(idx.min())
        raise IndexError(f"out of range: tried to access index {bad} on a tensor of {n} elements.")
    out = _wrap(x._data.reshape(-1)[idx], x.device)
    if tls.grad_enabled and x._rg:
        node = TakeBackward0()
        node.in_shape = x.shape
        record(node, (x,), out, (_saved_index(index, idx, x),))
    return out


@register
def take_along_dim(input: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:  # noqa: A002
    """``gather`` after broadcasting ``input`` and ``indices`` everywhere but ``dim``, as
    ``torch.take_along_dim``; without ``dim``, both are taken as 1-D.

    >>> import threadgrad as tg
    >>> x = tg.tensor([[3.0, 1.0], [2.0, 4.0]])
    >>> tg.take_along_dim(x, tg.tensor([[1], [0]]), 1).tolist()
    [[1.0], [2.0]]
    """
    x = check_tensor(input, "take_along_dim")
    if not isinstance(indices, Tensor) or indices.dtype != numpy.int64:
        got = indices.dtype if isinstance(indices, Tensor) else type(indices).__name__
        raise RuntimeError(f"torch.take_along_dim(): dtype of indices should be Long but got {got}")
    if dim is None:
        return gather(reshape(x, (-1,)), 0, reshape(indices, (-1,)))
    if x.ndim != indices.ndim:
        raise RuntimeError(f"torch.take_along_dim(): input and indices should have the same number of dimensions, "
                           f"but got {x.ndim} dimensions for input, and {indices.ndim} dimensions for indices")
    d = normalize_dim(dim, x.ndim, "take_along_dim")
    xs, js = list(x.shape), list(indices.shape)
    xs[d] = js[d] = 1
    try:
        common = list(numpy.broadcast_shapes(tuple(xs), tuple(js)))
    except ValueError:
        raise RuntimeError(f"take_along_dim(): shape mismatch: input of shape {list(x.shape)} and indices of shape "
                           f"{list(indices.shape)} do not broadcast apart from dim {d}") from None
    xb = tuple(common[:d] + [x.shape[d]] + common[d + 1:])
    jb = tuple(common[:d] + [indices.shape[d]] + common[d + 1:])
    return gather(expand(x, xb) if xb != x.shape else x, d, expand(indices, jb) if jb != indices.shape else indices)


# --- the in-place twins ------------------------------------------------------------------------------

def _inplace(op: Any, name: str) -> Any:
    """``op``'s in-place form on ``self`` (Note [In-place ops] in inplace.py): recorded, it runs
    on a snapshot and ``self`` (and a view's base) adopts the result; else the values are
    written straight into ``self``'s array. The result must keep ``self``'s shape."""
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        others = tuple(a for a in (*args, *kwargs.values()) if isinstance(a, Tensor))
        if _must_record(self, others, name):
            return _adopt(self, op(_snapshot(self), *args, **kwargs), name)
        prev = tls.grad_enabled
        tls.grad_enabled = False  # nothing to record: values only
        try:
            result = op(self, *args, **kwargs)
        finally:
            tls.grad_enabled = prev
        _check_write(self, result.dtype, result.shape, name)
        self._data[...] = result._data
        _bump(self)
        return self

    method.__name__ = name
    method.__doc__ = f"In place ``{op.__name__}``: ``self`` becomes its result; returns self. See Note [In-place ops]."
    return method


index_add_ = _inplace(index_add, "index_add_")
index_copy_ = _inplace(index_copy, "index_copy_")
index_fill_ = _inplace(index_fill, "index_fill_")
masked_fill_ = _inplace(masked_fill, "masked_fill_")
masked_scatter_ = _inplace(masked_scatter, "masked_scatter_")
scatter_ = _inplace(scatter, "scatter_")
scatter_add_ = _inplace(scatter_add, "scatter_add_")
scatter_reduce_ = _inplace(scatter_reduce, "scatter_reduce_")


# The Tensor methods of this module (bound in _methods.py).
METHODS = {
    **{fn.__name__: fn for fn in (masked_fill, masked_select, masked_scatter, index_add, index_copy, index_fill,
                                  scatter, scatter_add, scatter_reduce, take)},
    "take_along_dim": take_along_dim,
    **{fn.__name__: fn for fn in (index_add_, index_copy_, index_fill_, masked_fill_, masked_scatter_, scatter_,
                                  scatter_add_, scatter_reduce_)},
}
