"""Shape ops: reshape/view, transpose, permute, expand, squeeze, unsqueeze, cat, stack, split.

Their outputs are numpy views where numpy gives one, sharing the input's version counter
(an in-place op on the view bumps the base's version too, as in torch).
See Note [Op definitions] in _core.py.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy

from ..engine.tensor import Tensor, _wrap

from ..engine.versions import make_view, mark_view_node
from ._core import (ARRAYS, OPS, Node, broadcast_array, cast, check_tensor, device_error, dim_alias, fit, normalize_dim,
                    normalize_dims, record, record_unary, register,
                    result_dtype, sum_to, tls)
from .index import getitem


def _view_out(data: Any, x: Tensor) -> Tensor:
    out = _wrap(data, x.device)
    base, xd = data.base, x._data
    # A view of x's memory (numpy names the owning array as the base; a reshape that had to
    # copy has a base of its own, and is no view)
    if base is not None and (base is xd or base is xd.base):
        make_view(out, x)  # See Note [Versions and views] in engine/versions.py
    return out


def _shape_arg(shape: tuple) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(int(s) for s in shape)


class ViewBackward0(Node):
    __slots__ = ("in_shape",)

    def backward(self, g: Tensor) -> tuple:
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py (arrays: 1.28 -> 0.62 us)
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        return (F.wrap(F.reshape(g, self.in_shape), dev),)


# squeeze and unsqueeze are reshapes whose nodes carry torch's names.
class SqueezeBackward0(ViewBackward0):  # squeeze()
    __slots__ = ()


class SqueezeBackward1(ViewBackward0):  # squeeze(dim)
    __slots__ = ()


class SqueezeBackward2(ViewBackward0):  # squeeze(dims)
    __slots__ = ()


class UnsqueezeBackward0(ViewBackward0):
    __slots__ = ()


class UnsafeViewBackward0(ViewBackward0):
    """A reshape that had to copy: torch's ``_unsafe_view`` of a clone, whose outer node has
    this name (torch records a CloneBackward0 behind it; this one node does both)."""

    __slots__ = ()


@register
def reshape(x: Tensor, shape: Any) -> Tensor:
    """The same elements in a new shape (one dim may be -1)."""
    check_tensor(x, "reshape")
    return _reshape(x, _shape_arg((shape,) if isinstance(shape, int) else (tuple(shape),)), ViewBackward0)


def _reshape(x: Tensor, shape: tuple, node_cls: type) -> Tensor:
    try:
        data = x._data.reshape(shape)
    except ValueError:
        raise RuntimeError(f"reshape: shape {list(shape)} is invalid for input of size {x._data.size} (shape {list(x.shape)})") from None
    out = _view_out(data, x)
    if tls.grad_enabled and x._rg:
        if node_cls is ViewBackward0 and out._base is None and data.size:  # copied: no view of x
            node_cls = UnsafeViewBackward0
        node = node_cls()
        mark_view_node(node, x)
        node.in_shape = x.shape
        record_unary(node, x, out)
    return out


class TransposeBackward0(Node):
    __slots__ = ("dims",)

    def backward(self, g: Tensor) -> tuple:
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py (arrays, (8, 16): 1.88 -> 0.97 us)
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        return (F.wrap(F.transpose(g, *self.dims), dev),)


@register
def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    """Swap two dims."""
    check_tensor(x, "transpose")
    d0, d1 = normalize_dim(dim0, x.ndim, "transpose"), normalize_dim(dim1, x.ndim, "transpose")
    out = _view_out(x.device.xp.swapaxes(x._data, d0, d1) if x.ndim > 1 else x._data, x)
    if tls.grad_enabled and x._rg:
        node = TransposeBackward0()
        mark_view_node(node, x)
        node.dims = (d0, d1)
        record_unary(node, x, out)
    return out


class PermuteBackward0(Node):
    __slots__ = ("inverse",)

    def backward(self, g: Tensor) -> tuple:
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py (arrays, (8, 16): 2.43 -> 0.87 us)
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        return (F.wrap(F.permute(g, self.inverse), dev),)


@register
def permute(x: Tensor, dims: Any) -> Tensor:
    """Reorder dims: output dim i is input dim ``dims[i]``."""
    check_tensor(x, "permute")
    dims = tuple(normalize_dim(d, x.ndim, "permute") for d in dims)
    if sorted(dims) != list(range(x.ndim)):
        raise RuntimeError(f"permute: dims {list(dims)} are not a permutation of the {x.ndim} dims of a tensor of shape {list(x.shape)}")
    out = _view_out(x.device.xp.transpose(x._data, dims), x)
    if tls.grad_enabled and x._rg:
        node = PermuteBackward0()
        mark_view_node(node, x)
        node.inverse = tuple(int(i) for i in numpy.argsort(dims))
        record_unary(node, x, out)
    return out


class ExpandBackward0(Node):
    __slots__ = ("in_shape",)

    def backward(self, g: Tensor) -> tuple:
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py (arrays, (1, 16) -> (8, 16): 7.97 -> 2.44 us)
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        return (F.wrap(F.sum_to(g, self.in_shape), dev),)


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
        return x if not (tls.grad_enabled and x._rg) else _expand_record(x, x._data, shape)
    try:
        data = broadcast_array(x._data, shape, x.device.xp)
    except ValueError:
        raise RuntimeError(f"expand: the shape {list(x.shape)} cannot be expanded to {list(shape)}") from None
    return _expand_record(x, data, shape)


def _expand_record(x: Tensor, data: Any, shape: tuple) -> Tensor:
    out = _wrap(data, x.device)
    make_view(out, x)
    if tls.grad_enabled and x._rg:
        node = ExpandBackward0()
        mark_view_node(node, x)
        node.in_shape = x.shape
        record_unary(node, x, out)
    return out


@register
def squeeze(x: Tensor, dim: Any = None, *, axis: Any = None) -> Tensor:
    """Drop size-1 dims: all of them, or only those of ``dim`` (an int or a tuple of ints, as
    in torch 2); a dim that is not of size 1 is kept."""
    check_tensor(x, "squeeze")
    if axis is not None:
        dim = dim_alias(dim, axis, "squeeze")
    if dim is None:
        drop, node_cls = range(x.ndim), SqueezeBackward0
    elif isinstance(dim, (tuple, list)):
        drop, node_cls = normalize_dims(dim, x.ndim, "squeeze") if dim else (), SqueezeBackward2
    else:
        drop, node_cls = (normalize_dim(dim, x.ndim, "squeeze"),), SqueezeBackward1
    shape = tuple(s for i, s in enumerate(x.shape) if not (s == 1 and i in drop))
    return _reshape(x, shape, node_cls)


@register
def unsqueeze(x: Tensor, dim: Any = None, *, axis: Any = None) -> Tensor:
    """Insert a size-1 dim at ``dim`` (negative counts from the end of the result)."""
    check_tensor(x, "unsqueeze")
    if axis is not None or dim is None:
        dim = dim_alias(dim, axis, "unsqueeze")
        if dim is None:
            raise TypeError("unsqueeze() missing 1 required argument: 'dim'")
    d = normalize_dim(dim, x.ndim + 1, "unsqueeze")
    return _reshape(x, x.shape[:d] + (1,) + x.shape[d:], UnsqueezeBackward0)


# --- joining and splitting ------------------------------------------------------------------

def _check_seq(tensors: Any, name: str) -> list:
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{name}: expected a sequence of tensors, got {type(tensors).__name__}")
    if not tensors:
        raise RuntimeError(f"{name}: expected a non-empty sequence of tensors")
    ts = [check_tensor(t, name, f"tensors[{i}]") for i, t in enumerate(tensors)]
    for t in ts[1:]:
        if t.device is not ts[0].device:
            raise device_error(name, ts[0], t)
    return ts


def _common_dtype(ts: list) -> Any:
    """The dtype every input is cast to: torch's promotion folded over the sequence."""
    probe = SimpleNamespace(dtype=ts[0].dtype, ndim=ts[0].ndim)
    for t in ts[1:]:
        probe.dtype = result_dtype(probe, t)  # type: ignore[arg-type]
    return probe.dtype


class CatBackward0(Node):
    __slots__ = ("dim", "sizes", "dtypes")

    def backward(self, g: Tensor) -> tuple:
        grads = []
        start = 0
        lead = (slice(None),) * self.dim
        for (nxt, _), n, dt, shp in zip(self.next_edges, self.sizes, self.dtypes, self._shapes(g)):
            grads.append(fit(getitem(g, lead + (slice(start, start + n),)), shp, dt) if nxt is not None else None)
            start += n
        return tuple(grads)

    def _shapes(self, g: Tensor) -> list:
        return [g.shape[:self.dim] + (n,) + g.shape[self.dim + 1:] for n in self.sizes]


@register
def cat(tensors: Any, dim: int = 0, *, axis: Any = None) -> Tensor:
    """Join tensors along an existing dim (all other dims must match; dtypes promote)."""
    ts = _check_seq(tensors, "cat")
    if axis is not None:
        dim = dim_alias(None if dim == 0 else dim, axis, "cat")
    if any(t.ndim == 0 for t in ts):
        raise RuntimeError("cat: zero-dimensional tensor cannot be concatenated; use stack or unsqueeze first")
    d = normalize_dim(dim, ts[0].ndim, "cat")
    dt = _common_dtype(ts)
    try:
        data = ts[0].device.xp.concatenate([cast(t._data, dt) for t in ts], axis=d)
    except ValueError:
        raise RuntimeError(f"cat: sizes of tensors must match except in dimension {d}; got shapes "
                           f"{[list(t.shape) for t in ts]}") from None
    out = _wrap(data, ts[0].device)
    if tls.grad_enabled and any(t._rg for t in ts):
        node = CatBackward0()
        node.dim, node.sizes, node.dtypes = d, tuple(t.shape[d] for t in ts), tuple(t.dtype for t in ts)
        record(node, ts, out)
    return out


class StackBackward0(Node):
    __slots__ = ("dim", "dtypes")

    def backward(self, g: Tensor) -> tuple:
        lead = (slice(None),) * self.dim
        return tuple(fit(getitem(g, lead + (i,)), g.shape[:self.dim] + g.shape[self.dim + 1:], dt)
                     if nxt is not None else None
                     for i, ((nxt, _), dt) in enumerate(zip(self.next_edges, self.dtypes)))


@register
def stack(tensors: Any, dim: int = 0, *, axis: Any = None) -> Tensor:
    """Join same-shaped tensors along a new dim ``dim``."""
    ts = _check_seq(tensors, "stack")
    if axis is not None:
        dim = dim_alias(None if dim == 0 else dim, axis, "stack")
    d = normalize_dim(dim, ts[0].ndim + 1, "stack")
    for t in ts[1:]:
        if t.shape != ts[0].shape:
            raise RuntimeError(f"stack: expects each tensor to be equal size, but got {list(ts[0].shape)} and {list(t.shape)}")
    dt = _common_dtype(ts)
    out = _wrap(ts[0].device.xp.stack([cast(t._data, dt) for t in ts], axis=d), ts[0].device)
    if tls.grad_enabled and any(t._rg for t in ts):
        node = StackBackward0()
        node.dim, node.dtypes = d, tuple(t.dtype for t in ts)
        record(node, ts, out)
    return out


class SplitBackward0(Node):
    """One node for all the pieces: unused pieces send None, filled with zeros here."""

    __slots__ = ("dim", "sizes")
    returns_multiple_views = True

    def backward(self, *grads: Tensor) -> tuple:
        like = next(g for g in grads if g is not None)
        xp = like.device.xp
        parts = []
        for g, n in zip(grads, self.sizes):
            if g is None:
                shape = like.shape[:self.dim] + (n,) + like.shape[self.dim + 1:]
                g = _wrap(xp.zeros(shape, dtype=like.dtype), like.device)
            parts.append(g)
        return (cat(parts, self.dim),)


@register
def split(x: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple:
    """Views of ``x`` cut along ``dim``: pieces of size ``split_size_or_sections`` (the last
    may be smaller) or of the listed sizes (which must add up to ``x.shape[dim]``)."""
    check_tensor(x, "split")
    d = normalize_dim(dim, x.ndim, "split")
    if x.ndim == 0:
        raise RuntimeError("split: a 0-d tensor cannot be split")
    n = x.shape[d]
    if isinstance(split_size_or_sections, (int, numpy.integer)):
        step = int(split_size_or_sections)
        if step <= 0 and not (step == 0 and n == 0):
            raise RuntimeError(f"split: split_size must be positive, got {step}")
        sizes = [min(step, n - s) for s in range(0, n, step)] if n else [0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise RuntimeError(f"split: split_with_sizes expects split_sizes to sum exactly to {n} "
                               f"(input tensor's size at dimension {d}), but got split_sizes={sizes}")
    outs = []
    start = 0
    lead = (slice(None),) * d
    for s in sizes:
        outs.append(_view_out(x._data[lead + (slice(start, start + s),)], x))
        start += s
    if tls.grad_enabled and x._rg:
        node = SplitBackward0()
        mark_view_node(node, x)
        node.dim, node.sizes = d, tuple(sizes)
        record(node, (x,), outs)
    return tuple(outs)


# The formula namespaces' names for these ops: See Note [First-order formulas] in _core.py.
OPS.reshape, OPS.transpose, OPS.permute, OPS.expand, OPS.sum_to = reshape, transpose, permute, expand, sum_to


def _matrix_t(x: Tensor) -> Tensor:
    return transpose(x, 0, 1)


OPS.t = _matrix_t  # a matrix's transpose
