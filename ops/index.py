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

from ._core import (Node, as_operand, cast, check_tensor, const, device_error, fit, mark_view_node, normalize_dim,
                    record, record_unary, register, share_version, tls)

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
            return idx.data
        if same_device or idx.device is not _cpu:
            raise device_error(name, x, idx)
        return dev.asarray(idx.data)
    if isinstance(idx, list):
        return dev.asarray(numpy.asarray(idx))
    if isinstance(idx, numpy.ndarray) and dev.xp is not numpy:
        return dev.asarray(idx)
    return idx


def is_basic(idx: Any) -> bool:
    items = idx if isinstance(idx, tuple) else (idx,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, numpy.integer, slice)) for i in items)


class IndexBackward0(Node):
    __slots__ = ("in_shape", "index", "basic")

    def backward(self, g: Tensor) -> tuple:
        return (index_put_zeros(g, self.in_shape, self.index, self.basic),)


def _index_data(x: Tensor, idx: Any, index: Any, name: str) -> Any:
    try:
        data = x.data[idx]
        if not isinstance(data, x.device.xp.ndarray) and is_basic(idx):
            # An int per dim gives numpy a scalar, a copy; with a trailing Ellipsis it gives a
            # 0-d view, so x[0] of a 1-D x is a view as in torch (x[0].add_(1) changes x).
            parts = idx if isinstance(idx, tuple) else (idx,)
            if not any(p is Ellipsis for p in parts):
                data = x.data[parts + (Ellipsis,)]
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
    idx = convert_index(index, x, "getitem")
    data = _index_data(x, idx, index, "getitem")
    basic = is_basic(idx)
    out = _wrap(data, x.device)
    view = basic and data.base is not None
    if view:
        share_version(out, x)  # See Note [Views and in-place] in _core.py
    if tls.grad_enabled and x._rg:
        node = _basic_node_cls(idx, x.shape)() if basic else IndexBackward0()
        if view:
            mark_view_node(node, x)
        node.in_shape, node.index, node.basic = x.shape, idx, basic
        record_unary(node, x, out)
    return out


class IndexBackwardBackward0(Node):
    """Backward of ``index_put_zeros`` (getitem's backward): getitem again."""

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
        node = IndexBackwardBackward0()
        node.index = index
        record_unary(node, g, out)
    return out


class IndexPutBackward0(Node):
    __slots__ = ("index", "accumulate", "v_shape", "v_dtype")

    def backward(self, g: Tensor) -> tuple:
        ex, ev = self.next_edges
        gx = gv = None
        if ex[0] is not None:
            if self.accumulate:
                gx = g
            else:  # the overwritten places get nothing
                mask = g.device.xp.ones(g.shape, dtype=g.dtype)
                mask[self.index] = 0
                from .elementwise import mul

                gx = mul(g, const(mask, g))
        if ev[0] is not None:
            gv = fit(getitem(g, self.index), self.v_shape, self.v_dtype)
        return (gx, gv)


@register
def index_put(x: Tensor, indices: Any, values: Any, accumulate: bool = False) -> Tensor:
    """A copy of ``x`` with ``values`` (broadcast) written at ``indices`` (any getitem index),
    or added there when ``accumulate`` (repeated indices then add up). ``x[i] = v`` records this.

    >>> from threadgrad import engine, ops
    >>> ops.index_put(engine.zeros(3), [0, 0], engine.tensor(1.0), accumulate=True).tolist()
    [2.0, 0.0, 0.0]
    """
    check_tensor(x, "index_put")
    v = check_tensor(as_operand(values, x, "index_put"), "index_put", "values")
    if v.device is not x.device:
        raise device_error("index_put", x, v)
    idx = convert_index(indices, x, "index_put")
    data = x.data.copy()
    try:
        if accumulate:
            x.device.xp.add.at(data, idx, cast(v.data, x.dtype))
        else:
            data[idx] = cast(v.data, x.dtype)
    except (IndexError, ValueError) as e:
        raise type(e)(f"index_put: cannot put values of shape {list(v.shape)} at index {indices!r:.80} "
                      f"of a tensor of shape {list(x.shape)} ({e})") from None
    out = _wrap(data, x.device)
    if tls.grad_enabled and (x._rg or v._rg):
        node = IndexPutBackward0()
        node.index, node.accumulate, node.v_shape, node.v_dtype = idx, bool(accumulate), v.shape, v.dtype
        record(node, (x, v), out)
    return out


class GatherBackward0(IndexBackward0):
    __slots__ = ()


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
        node.in_shape, node.index, node.basic = x.shape, tup, False
        record_unary(node, x, out)
    return out
