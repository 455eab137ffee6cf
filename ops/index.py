"""Indexing: getitem, index_put (behind ``__setitem__``), gather.

An index may hold ints, slices, None, Ellipsis, boolean masks and integer arrays, lists or
tensors, as in torch. Basic indexes (ints, slices, None, Ellipsis) give views sharing the
input's version counter; advanced ones give copies. Backward scatters with ``add.at``, so
repeated integer indices accumulate their gradients. See Note [Op definitions] in _core.py.
"""
from __future__ import annotations

from typing import Any

import numpy

from .. import devices
from ..engine.tensor import Tensor, _wrap

from ..engine.graph import NO_EDGE
from ..engine.versions import make_view, mark_view_node
from ._core import (Node, as_operand, cast, check_tensor, const, device_error, fit, normalize_dim,
                    record, record_unary, register, tls)

_cpu = devices.cpu


def convert_index(idx: Any, x: Tensor, name: str, same_device: bool = False) -> Any:
    """An index whose tensors, lists and foreign arrays are arrays on ``x``'s device.

    An index tensor must be on ``x``'s device or, as torch allows for indexing (not for
    ``same_device`` ops such as gather), on the cpu; otherwise RuntimeError names both devices."""
    if isinstance(idx, tuple):
        return tuple(convert_index(i, x, name, same_device) for i in idx)
    dev = x.device
    if isinstance(idx, Tensor):
        if idx.device is dev:
            return idx._data
        if same_device or idx.device is not _cpu:
            raise device_error(name, x, idx)
        return dev.asarray(idx._data)
    if isinstance(idx, list):
        return dev.asarray(numpy.asarray(idx))
    if isinstance(idx, numpy.ndarray) and dev.xp is not numpy:
        return dev.asarray(idx)
    return idx


def select_ints(index: Any) -> Any:
    """``index`` with each 0-d integer Tensor in it replaced by its value: as in torch, ``x[t]``
    for such a ``t`` selects (a view, written through by ``x[t] = v``), as ``x[int(t)]`` does;
    a 0-d bool or uint8 tensor stays a mask. Only indexing does this, not index_put or gather."""
    if isinstance(index, tuple):
        return tuple(select_ints(i) for i in index) if any(isinstance(i, Tensor) for i in index) else index
    if isinstance(index, Tensor) and index._data.ndim == 0 and index._data.dtype.kind in "iu" \
            and index._data.dtype != numpy.uint8:
        return int(index.item())
    return index


def is_basic(idx: Any) -> bool:
    items = idx if isinstance(idx, tuple) else (idx,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, numpy.integer, slice)) for i in items)


# Note [Saved indices]
# ~~~~~~~~~~~~~~~~~~~~
# torch saves the index tensors of an advanced index (IndexBackward0, IndexPutBackward0,
# GatherBackward0) as saved variables, and that is observable twice: an in-place change of
# an index tensor after the op makes backward raise "modified by an inplace operation" (else
# the gradient would silently go to the new positions), and a second backward without
# retain_graph raises "Specify retain_graph=True" (the graph's indices were freed). So these
# nodes keep their index arrays nowhere but in the saved values (``record(..., saved=)``):
# the index a node stores has a :class:`_Saved` in place of each array, and backward puts
# the arrays back from ``saved_arrays()``, which checks versions and raises once freed. An
# index part that was a Tensor on the op's device is saved as that Tensor (its version is
# the user's); lists, foreign arrays and internal index arrays are saved as fresh tensors.
# A node that saves no array but must still refuse a second run (torch's CopySlices, which
# drops its wrapped node when its graph is freed) saves one None: see :func:`run_once`.


class _Saved:
    """Stands in a node's stored index for its ``k``-th saved array (Note [Saved indices])."""

    __slots__ = ("k",)

    def __init__(self, k: int) -> None:
        self.k = k


def save_index(given: Any, idx: Any, x: Tensor) -> tuple[Any, list]:
    """``idx`` (``given`` converted by :func:`convert_index` for ``x``) with each array replaced
    by a :class:`_Saved`, and the tensors to save for them, in order (Note [Saved indices])."""
    tensors: list = []
    xp_array = x.device.xp.ndarray

    def part(g: Any, i: Any) -> Any:
        if not isinstance(i, xp_array):
            return i
        tensors.append(g if isinstance(g, Tensor) and g._data is i else _wrap(i, x.device))
        return _Saved(len(tensors) - 1)

    if isinstance(idx, tuple):
        given = given if isinstance(given, tuple) and len(given) == len(idx) else (None,) * len(idx)
        return tuple(part(g, i) for g, i in zip(given, idx)), tensors
    return part(given, idx), tensors


def saved_index(node: Node, index: Any) -> Any:
    """``index`` with its arrays put back from ``node``'s saved values; raises as
    ``saved_tensors`` does once the graph was freed or an index tensor was changed in place."""
    arrays = node.saved_arrays()
    if isinstance(index, tuple):
        return tuple(arrays[i.k] if type(i) is _Saved else i for i in index)
    return arrays[index.k] if type(index) is _Saved else index


def run_once() -> list:
    """The saved values of a node that saves nothing but, like torch's CopySlices, must raise
    "Specify retain_graph=True" when run again after its graph was freed: one None, which the
    executor drops with the rest (Note [Saved indices]); its backward calls ``saved_arrays()``."""
    return [None]


class IndexBackward0(Node):
    __slots__ = ("in_shape", "index", "basic")

    def backward(self, g: Tensor) -> tuple:
        index = self.index if self.basic else saved_index(self, self.index)
        return (index_put_zeros(g, self.in_shape, index, self.basic),)


def _index_data(x: Tensor, idx: Any, index: Any, name: str) -> Any:
    try:
        data = x._data[idx]
        if not isinstance(data, x.device.xp.ndarray) and is_basic(idx):
            # An int per dim gives numpy a scalar, a copy; with a trailing Ellipsis it gives a
            # 0-d view, so x[0] of a 1-D x is a view as in torch (x[0].add_(1) changes x).
            parts = idx if isinstance(idx, tuple) else (idx,)
            if not any(p is Ellipsis for p in parts):
                data = x._data[parts + (Ellipsis,)]
    except IndexError as e:
        raise IndexError(f"{name}: index {index!r:.80} is invalid for a tensor of shape {list(x.shape)} ({e})") from None
    return data if isinstance(data, x.device.xp.ndarray) else x.device.xp.asarray(data)


# A basic index is one node here where torch chains one per indexed dim; the node takes
# the name torch gives the last of them (its grad_fn): see _basic_node_cls.
class SelectBackward0(IndexBackward0):  # an int
    __slots__ = ()


class SliceBackward0(IndexBackward0):  # a slice that is not all of its dim
    __slots__ = ()


class UnsqueezeBackward0(IndexBackward0):  # None (shape.py's unsqueeze has a node of this name too)
    __slots__ = ()


class AliasBackward0(IndexBackward0):  # only full slices and Ellipsis: x[:], x[...]
    __slots__ = ()


def narrows(idx: Any, shape: tuple) -> bool:
    """A basic index that is not all of the tensor: an int, None, or a slice short of its dim
    (torch writes ``x[idx] = v`` through such an index into a view, so records CopySlices)."""
    parts = idx if isinstance(idx, tuple) else (idx,)
    return any(p is not Ellipsis and not (isinstance(p, slice) and p.indices(n) == (0, n, 1))
               for p, n in zip(parts, _part_dims(parts, shape)))


def _part_dims(parts: tuple, shape: tuple) -> list:
    """The size of the dim each part of a basic index indexes (0 for None and Ellipsis)."""
    named = sum(1 for p in parts if p is not None and p is not Ellipsis)
    sizes, d = [], 0
    for p in parts:
        sizes.append(shape[d] if p is not None and p is not Ellipsis and d < len(shape) else 0)
        if p is Ellipsis:
            d += len(shape) - named
        elif p is not None:
            d += 1
    return sizes


def _basic_node_cls(idx: Any, shape: tuple) -> type:
    """torch applies a basic index's parts left to right and skips Ellipsis and the slices that
    cover their whole dim, so its result's grad_fn comes from the last other part (a lone
    slice is always sliced)."""
    if isinstance(idx, slice):
        return SliceBackward0
    parts = idx if isinstance(idx, tuple) else (idx,)
    # the dim each part indexes: None takes none; Ellipsis stands for the dims no part names
    named = sum(1 for p in parts if p is not None and p is not Ellipsis)
    dims, d = [], 0
    for p in parts:
        dims.append(d)
        if p is Ellipsis:
            d += len(shape) - named
        elif p is not None:
            d += 1
    for p, d in zip(reversed(parts), reversed(dims)):
        if p is None:
            return UnsqueezeBackward0
        if isinstance(p, slice):
            if p.indices(shape[d]) != (0, shape[d], 1):
                return SliceBackward0
        elif p is not Ellipsis:
            return SelectBackward0
    return AliasBackward0


def _basic_steps(idx: Any, shape: tuple) -> list | None:
    """torch's nodes for a basic index of several parts that do something, left to right: one
    ``(node class, index of one part over the dims before it)`` per part, skipping Ellipsis and
    the slices that cover their whole dim (torch's applySlicing). None when at most one part
    does something: then one node takes the whole index (:func:`_basic_node_cls`)."""
    if not isinstance(idx, tuple) or len(idx) < 2:
        return None
    named = sum(1 for p in idx if p is not None and p is not Ellipsis)
    steps, d, cur = [], 0, list(shape)  # d: the dim of the current result the next part applies to
    for p in idx:
        lead = (slice(None),) * d
        if p is Ellipsis:
            d += len(shape) - named
        elif p is None:
            steps.append((UnsqueezeBackward0, lead + (None,)))
            cur.insert(d, 1)
            d += 1
        elif isinstance(p, slice):
            if p.indices(cur[d]) != (0, cur[d], 1):
                steps.append((SliceBackward0, lead + (p,)))
                cur[d] = len(range(*p.indices(cur[d])))
            d += 1
        else:
            steps.append((SelectBackward0, lead + (p,)))
            del cur[d]
    return steps if len(steps) > 1 else None


def _basic_chain(x: Tensor, steps: list) -> tuple:
    """Record ``steps`` (of :func:`_basic_steps`) from ``x`` on, each over the one before;
    return the last result (it stands for the intermediate tensor in the graph) and its shape."""
    cur = x
    for node_cls, step in steps:
        part = _wrap(cur._data[step + (Ellipsis,)], x.device)  # (Ellipsis: a 0-d view, not a scalar)
        node = node_cls()
        node.in_shape, node.index, node.basic = cur.shape, step, True
        record_unary(node, cur, part)
        cur = part
    return cur, cur.shape


@register
def getitem(x: Tensor, index: Any) -> Tensor:
    """``x[index]``: ints, slices, None, Ellipsis, boolean masks, integer arrays/tensors.

    Repeated integer indices accumulate their gradients:

    >>> from threadgrad import engine, ops
    >>> x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> ops.getitem(x, [0, 0, 2]).sum().backward()
    >>> x.grad.tolist()
    [2.0, 0.0, 1.0]
    """
    check_tensor(x, "getitem")
    index = select_ints(index)
    idx = convert_index(index, x, "getitem")
    data = _index_data(x, idx, index, "getitem")
    basic = is_basic(idx)
    out = _wrap(data, x.device)
    view = basic and data.base is not None
    if view:
        make_view(out, x)  # See Note [Versions and views] in engine/versions.py
    if tls.grad_enabled and x._rg:
        if basic:
            src, in_shape, steps = x, x.shape, _basic_steps(idx, x.shape)
            if steps is None:
                node_cls, step = _basic_node_cls(idx, x.shape), idx
            else:
                # torch's chain (x[1, 0:1]: SelectBackward0, then SliceBackward0 on its result):
                # one node per part but the last, each over the one before; the last is out's
                src, in_shape = _basic_chain(x, steps[:-1])
                node_cls, step = steps[-1]
            node = node_cls()
            if view:
                mark_view_node(node, x)
            node.in_shape, node.index, node.basic = in_shape, step, basic
            record_unary(node, src, out)
        else:
            node = IndexBackward0()
            node.in_shape, node.basic = x.shape, basic
            node.index, saved = save_index(index, idx, x)  # See Note [Saved indices]
            record(node, (x,), out, saved)
    return out


class IndexSelectBackward0(IndexBackward0):  # torch.index_select (rearrange.py's repeat_interleave has one too)
    __slots__ = ()


def index_select_along(x: Tensor, d: int, index: Tensor) -> Tensor:
    """``x``'s entries along dim ``d`` (normalized) at the integer ``index`` of at most one dim
    (a 0-d index counts as one entry, the dim kept), as ``torch.index_select``: getitem's
    advanced indexing recorded as torch's IndexSelectBackward0, which saves the index (Note
    [Saved indices]). The caller checks the index's dtype and rank."""
    if index._data.ndim == 0:
        index = index.reshape(1)  # a view: the saved index still sees in-place changes of the user's
    given = (slice(None),) * d + (index,)
    idx = convert_index(given, x, "index_select")
    out = _wrap(_index_data(x, idx, given, "index_select"), x.device)
    if tls.grad_enabled and x._rg:
        node = IndexSelectBackward0()
        node.in_shape, node.basic = x.shape, False
        node.index, saved = save_index(given, idx, x)
        record(node, (x,), out, saved)
    return out


class AsStridedBackward0(IndexBackward0):
    """A view's history taken anew from its root's (torch gives such a view this grad_fn)."""

    __slots__ = ()


def take_view(base: Tensor, positions: Any) -> Tensor:
    """The elements of ``base`` at ``positions`` (C-order positions, an array of the view's
    shape) for a view's regenerated history (``regenerate`` in views.py), as one node on the
    base, as torch's: the positions become one index array per dim. They are internal, so kept
    on the node as they are, not saved (torch's AsStridedBackward0 saves nothing: Note [Saved
    indices])."""
    index = numpy.unravel_index(positions, base.shape) if base._data.ndim > 1 else positions
    out = _wrap(base._data[index], base.device)
    if tls.grad_enabled and base._rg:
        node = AsStridedBackward0()
        node.in_shape, node.index, node.basic = base.shape, index, False
        record_unary(node, base, out)
    return out


class IndexBackwardBackward0(Node):
    """Backward of ``index_put_zeros`` (getitem's backward): getitem again."""

    __slots__ = ("index", "basic")

    def backward(self, g: Tensor) -> tuple:
        return (getitem(g, self.index if self.basic else saved_index(self, self.index)),)


def index_put_zeros(g: Tensor, shape: tuple, index: Any, basic: bool, unique: bool = False) -> Tensor:
    """Zeros of ``shape`` with ``g`` added at ``index`` (getitem's backward; differentiable).
    ``unique``: the caller knows an advanced ``index`` names no element twice (max/min along a
    dim), so an assignment does what ``add.at`` would (10x faster on the MNIST CNN's pooling:
    benchmarks/models.py)."""
    xp = g.device.xp
    data = xp.zeros(shape, dtype=g.dtype)
    if basic or unique:
        data[index] = g._data
    else:
        xp.add.at(data, index, g._data)
    out = _wrap(data, g.device)
    if tls.grad_enabled and g._rg:
        node = IndexBackwardBackward0()
        node.basic = basic
        if basic:
            node.index = index
            record_unary(node, g, out)
        else:
            node.index, saved = save_index(None, index, g)  # See Note [Saved indices]
            record(node, (g,), out, saved)
    return out


class IndexPutBackward0(Node):
    __slots__ = ("index", "accumulate", "v_shape", "v_dtype")
    whole = False  # a write to every element (fill_, zero_, copy_): see the classes below
    has_value_edge = True  # False: a number written (fill_(2.0), zero_()), so one edge only, as torch's

    def backward(self, g: Tensor) -> tuple:
        if not self.has_value_edge:
            ex, ev = self.next_edges[0], NO_EDGE
        else:
            ex, ev = self.next_edges
        index = saved_index(self, self.index)  # raises once freed: See Note [Saved indices]
        gx = gv = None
        if ex[0] is not None:
            if self.accumulate:
                gx = g
            elif self.whole:
                # torch's fill_/zero_/copy_: zeros_like(grad), made fresh, outside the graph
                gx = const(g.device.xp.zeros(g.shape, dtype=g.dtype), g)
            else:
                # The overwritten places get fresh zeros, as torch's grad.index_put(indices,
                # zeros) writes them: a mask multiplied in would turn an inf or NaN there into
                # NaN (issue 33, item 3). Under create_graph it is recorded as index_put of g,
                # so the rest of the gradient stays differentiable.
                zero = const(g.device.xp.zeros((), dtype=g.dtype), g)
                gx = put(g, index, zero, copy_slices=type(self) is CopySlices)
        if ev[0] is not None:
            gv = fit(getitem(g, index), self.v_shape, self.v_dtype)
        return (gx, gv) if self.has_value_edge else (gx,)


@register
def index_put(x: Tensor, indices: Any, values: Any, accumulate: bool = False) -> Tensor:
    """A copy of ``x`` with ``values`` (broadcast) written at ``indices`` (any getitem index),
    or added there when ``accumulate`` (repeated indices then add up). ``x[i] = v`` records this.

    >>> from threadgrad import engine, ops
    >>> ops.index_put(engine.zeros(3), [0, 0], engine.tensor(1.0), accumulate=True).tolist()
    [2.0, 0.0, 0.0]
    """
    return put(x, indices, values, accumulate)


class CopySlices(IndexPutBackward0):
    """``x[idx] = v`` through a basic index that narrows: torch records it as CopySlices (the
    base of the view ``x[idx]`` takes the copy), and so does this name (Note [Saved indices]:
    it saves nothing and refuses a second run once its graph is freed)."""

    __slots__ = ()


# Whole-tensor writes carry torch's node names (the gradient is index_put's either way).
class FillBackward2(IndexPutBackward0):  # fill_(number)
    __slots__ = ()
    whole = True
    has_value_edge = False


class FillBackward3(IndexPutBackward0):  # fill_(0-d tensor), x[...] = number
    __slots__ = ()
    whole = True


class ZeroBackward0(IndexPutBackward0):  # zero_()
    __slots__ = ()
    whole = True
    has_value_edge = False


class CopyBackwards(IndexPutBackward0):  # copy_(src), x[:] = tensor
    __slots__ = ()
    whole = True


def put(x: Tensor, indices: Any, values: Any, accumulate: bool = False, copy_slices: bool = False,
        node_cls: type | None = None) -> Tensor:
    """:func:`index_put`. With ``copy_slices`` (in-place writes that torch records as CopySlices:
    through a basic index that narrows, or into a view's base), the node saves nothing, as
    CopySlices, keeps its index arrays (internal ones) as they are, and refuses to run again
    once its graph was freed (Note [Saved indices]). ``node_cls``: the node's class, for a
    whole-tensor write that torch names otherwise (FillBackward2 ...)."""
    check_tensor(x, "index_put")
    v = check_tensor(as_operand(values, x, "index_put"), "index_put", "values")
    if v.device is not x.device:
        raise device_error("index_put", x, v)
    idx = convert_index(indices, x, "index_put")
    data = x._data.copy()
    try:
        if accumulate:
            x.device.xp.add.at(data, idx, cast(v._data, x.dtype))
        else:
            data[idx] = cast(v._data, x.dtype)
    except (IndexError, ValueError) as e:
        raise type(e)(f"index_put: cannot put values of shape {list(v.shape)} at index {indices!r:.80} "
                      f"of a tensor of shape {list(x.shape)} ({e})") from None
    out = _wrap(data, x.device)
    if tls.grad_enabled and (x._rg or v._rg):
        node = (node_cls or (CopySlices if copy_slices else IndexPutBackward0))()
        node.accumulate, node.v_shape, node.v_dtype = bool(accumulate), v.shape, v.dtype
        if copy_slices:
            node.index, saved = idx, run_once()
        else:
            node.index, saved = save_index(indices, idx, x)  # See Note [Saved indices]
        record(node, (x, v) if node.has_value_edge else (x,), out, saved)
    return out


class GatherBackward0(Node):
    """Saves ``x`` and the index tensor, as torch's does (Note [Saved indices])."""

    __slots__ = ("in_shape", "dim")

    def backward(self, g: Tensor) -> tuple:
        _, idx = self.saved_arrays()  # raises once freed, or when x or the index changed in place
        tup = along_dim_index(idx, self.dim, g.device.xp) if idx.ndim else ()
        return (index_put_zeros(g, self.in_shape, tup, False),)


def along_dim_index(index: Any, dim: int, xp: Any) -> tuple:
    """The advanced index picking ``index[..., i, ...]`` along ``dim`` (torch's gather/scatter)."""
    tup = []
    for d, n in enumerate(index.shape):
        if d == dim:
            tup.append(index)
        else:
            shape = [1] * index.ndim
            shape[d] = n
            tup.append(xp.arange(n).reshape(shape))
    return tuple(tup)


@register
def gather(x: Tensor, dim: int, index: Any) -> Tensor:
    """``out[i][j] = x[index[i][j]][j]`` for ``dim=0`` (and so on), like torch.gather.

    ``index`` is an integer tensor with ``x``'s number of dims; repeated entries accumulate
    their gradients.

    >>> from threadgrad import engine, ops
    >>> x = engine.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> ops.gather(x, 1, engine.tensor([[1], [0]])).tolist()
    [[2.0], [3.0]]
    """
    check_tensor(x, "gather")
    idx = convert_index(index, x, "gather", same_device=True)
    if not hasattr(idx, "dtype") or idx.dtype.kind not in "iu":
        raise TypeError(f"gather: index must be an integer tensor, got {type(index).__name__}")
    if idx.ndim != x.ndim:
        raise RuntimeError(f"gather: index has {idx.ndim} dims but input has {x.ndim}; they must match")
    d = normalize_dim(dim, x.ndim, "gather")
    for k in range(x.ndim):
        if k != d and idx.shape[k] > x.shape[k]:
            raise RuntimeError(f"gather: index shape {list(idx.shape)} exceeds input shape {list(x.shape)} at dim {k}")
    tup = along_dim_index(idx, d, x.device.xp) if x.ndim else ()
    data = _index_data(x, tup, index, "gather")
    out = _wrap(data, x.device)
    if tls.grad_enabled and x._rg:
        node = GatherBackward0()
        node.in_shape, node.dim = x.shape, d
        saved_idx = index if isinstance(index, Tensor) and index._data is idx else _wrap(idx, x.device)
        record(node, (x,), out, (x, saved_idx))
    return out


# --- positions of nonzero elements (no gradient: they return indices) -----------------------

def nonzero(x: Tensor, *, as_tuple: bool = False) -> Any:
    """The positions of ``x``'s nonzero elements, in C order, as ``torch.nonzero``: an int64
    tensor of shape ``(n, x.ndim)``, or with ``as_tuple`` one 1-D int64 tensor per dim (a 0-d
    ``x`` is taken as 1-D there, as torch's). Not differentiable.

    >>> from threadgrad import engine, ops
    >>> ops.nonzero(engine.tensor([[0.0, 1.0], [2.0, 0.0]])).tolist()
    [[0, 1], [1, 0]]
    """
    check_tensor(x, "nonzero")
    xp = x.device.xp
    data = x._data
    if as_tuple:
        found = xp.nonzero(data.reshape(1) if data.ndim == 0 else data)
        return tuple(_wrap(xp.asarray(p, dtype=numpy.int64), x.device) for p in found)
    if data.ndim == 0:  # torch's shape (1, 0) or (0, 0)
        return _wrap(xp.zeros((int(bool(data)), 0), dtype=numpy.int64), x.device)
    return _wrap(xp.stack(xp.nonzero(data), axis=1).astype(numpy.int64, copy=False), x.device)


def argwhere(x: Tensor) -> Tensor:
    """``nonzero(x)``, as ``torch.argwhere``: an int64 tensor of shape ``(n, x.ndim)``."""
    return nonzero(x)
