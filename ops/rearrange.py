"""Shape ops that move, repeat or pick elements: flip, fliplr, flipud, roll, rot90;
movedim/moveaxis, swapaxes/swapdims; diag, diagonal (a view), diag_embed, trace;
repeat_interleave, tile; tensor_split, hsplit, vsplit, dsplit; broadcast_to,
broadcast_tensors, meshgrid, cartesian_prod, block_diag.

Views stay views where torch's are: diagonal, movedim, swapaxes, broadcast_to and the
pieces of tensor_split share the input's memory and version counter, so an in-place op
through them is recorded as on any view (Note [In-place ops on views] in views.py). The
others copy. Nodes carry torch's names; their backward formulas are written with ops (double
backward). See Note [Op definitions] in _core.py.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy

from ..engine.tensor import Tensor, _wrap
from ..engine.versions import make_view, mark_view_node
from ._core import (Node, broadcast_check, cast, check_tensor, device_error, fit, normalize_dim, record,
                    record_unary, register, tls)
from .index import SliceBackward0, getitem, index_put_zeros
from .reduce import sum as _sum
from .shape import _common_dtype, expand, permute, reshape, stack, transpose


def _dims_arg(dims: Any) -> tuple:
    return (int(dims),) if isinstance(dims, (int, numpy.integer)) else tuple(int(d) for d in dims)


def _c_copy(data: Any, xp: Any) -> Any:
    """A C-ordered copy: numpy's flip and rot90 give strided views, torch's results are
    contiguous copies."""
    return xp.array(data, order="C", copy=True)


# --- flip, roll, rot90 -------------------------------------------------------------------------

class FlipBackward0(Node):
    __slots__ = ("dims",)

    def backward(self, g: Tensor) -> tuple:
        return (flip(g, self.dims),)


@register
def flip(input: Tensor, dims: Any) -> Tensor:  # noqa: A002 - torch's names
    """``input`` reversed along each of ``dims`` (a copy, as ``torch.flip``).

    >>> import threadgrad as tg
    >>> tg.flip(tg.tensor([[1.0, 2.0], [3.0, 4.0]]), [1]).tolist()
    [[2.0, 1.0], [4.0, 3.0]]
    """
    x = check_tensor(input, "flip")
    given = _dims_arg(dims)
    ds = tuple(normalize_dim(d, x.ndim, "flip") for d in given)
    if len(set(ds)) != len(ds):
        raise RuntimeError(f"dim {next(d for d in ds if ds.count(d) > 1)} appears multiple times in the list of dims")
    xp = x.device.xp
    data = _c_copy(xp.flip(x._data, ds) if ds and x.ndim else x._data, xp)
    out = _wrap(data, x.device)
    if tls.grad_enabled and x._rg:
        node = FlipBackward0()
        node.dims = ds
        record_unary(node, x, out)
    return out


@register
def fliplr(input: Tensor) -> Tensor:  # noqa: A002
    """``flip(input, [1])``: a matrix's columns reversed (at least 2-D), as ``torch.fliplr``."""
    x = check_tensor(input, "fliplr")
    if x.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return flip(x, (1,))


@register
def flipud(input: Tensor) -> Tensor:  # noqa: A002
    """``flip(input, [0])``: the rows reversed (at least 1-D), as ``torch.flipud``."""
    x = check_tensor(input, "flipud")
    if x.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return flip(x, (0,))


class RollBackward0(Node):
    __slots__ = ("shifts", "dims")

    def backward(self, g: Tensor) -> tuple:
        return (roll(g, tuple(-s for s in self.shifts), self.dims),)


@register
def roll(input: Tensor, shifts: Any, dims: Any = None) -> Tensor:  # noqa: A002
    """``input``'s elements shifted by ``shifts`` along ``dims`` (wrapping around); without
    ``dims``, along the flattened tensor, shape kept, as ``torch.roll``.

    >>> import threadgrad as tg
    >>> tg.roll(tg.tensor([1.0, 2.0, 3.0]), 1).tolist()
    [3.0, 1.0, 2.0]
    """
    x = check_tensor(input, "roll")
    sh = _dims_arg(shifts)
    ds = () if dims is None else _dims_arg(dims)
    if (dims is None and len(sh) != 1) or (dims is not None and len(sh) != len(ds)):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(sh)}, dims:{len(ds)}")
    ds = tuple(normalize_dim(d, x.ndim, "roll") for d in ds)
    xp = x.device.xp
    data = xp.roll(x._data, sh if ds else sh[0], axis=ds if ds else None)
    out = _wrap(_c_copy(data, xp) if data is x._data else data, x.device)
    if tls.grad_enabled and x._rg:
        node = RollBackward0()
        node.shifts, node.dims = sh, (ds if ds else None)
        record_unary(node, x, out)
    return out


class Rot90Backward0(Node):
    __slots__ = ("k", "dims")

    def backward(self, g: Tensor) -> tuple:
        return (rot90(g, -self.k, self.dims),)


@register
def rot90(input: Tensor, k: int = 1, dims: Any = (0, 1)) -> Tensor:  # noqa: A002
    """``input`` turned by 90 degrees ``k`` times in the plane of ``dims``, from the first dim
    towards the second (a copy), as ``torch.rot90``.

    >>> import threadgrad as tg
    >>> tg.rot90(tg.tensor([[1.0, 2.0], [3.0, 4.0]])).tolist()
    [[2.0, 4.0], [1.0, 3.0]]
    """
    x = check_tensor(input, "rot90")
    ds = _dims_arg(dims)
    if len(ds) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(ds)}")
    if x.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {x.ndim}")
    d0, d1 = (normalize_dim(d, x.ndim, "rot90") for d in ds)
    if d0 == d1:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d0} and dim1 = {d1}")
    xp = x.device.xp
    out = _wrap(_c_copy(xp.rot90(x._data, int(k), axes=(d0, d1)), xp), x.device)
    if tls.grad_enabled and x._rg:
        node = Rot90Backward0()
        node.k, node.dims = int(k), (d0, d1)
        record_unary(node, x, out)
    return out


# --- moving dims (views) ------------------------------------------------------------------------

@register
def movedim(input: Tensor, source: Any, destination: Any) -> Tensor:  # noqa: A002
    """``input`` with its dims ``source`` moved to the places ``destination`` (the others keep
    their order): a view, ``permute``, as ``torch.movedim``.

    >>> import threadgrad as tg
    >>> tg.movedim(tg.zeros(2, 3, 4), 0, -1).shape
    (3, 4, 2)
    """
    x = check_tensor(input, "movedim")
    src, dst = _dims_arg(source), _dims_arg(destination)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(src)} dims) should contain "
                           f"the same number of dims as destination ({list(dst)} dims)")
    src = tuple(normalize_dim(d, x.ndim, "movedim") for d in src)
    dst = tuple(normalize_dim(d, x.ndim, "movedim") for d in dst)
    for name, ds, given in (("source", src, source), ("destination", dst, destination)):
        if len(set(ds)) != len(ds):
            raise RuntimeError(f"movedim: repeated dim in `{name}` ({list(_dims_arg(given))})")
    order = [-1] * x.ndim
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(x.ndim) if d not in src)
    order = [o if o != -1 else next(rest) for o in order]
    return permute(x, tuple(order))


@register
def moveaxis(input: Tensor, source: Any, destination: Any) -> Tensor:  # noqa: A002
    """``movedim`` under numpy's name, as ``torch.moveaxis``."""
    return movedim(input, source, destination)


@register
def swapaxes(input: Tensor, axis0: int, axis1: int) -> Tensor:  # noqa: A002
    """``transpose(input, axis0, axis1)``: a view, as ``torch.swapaxes``."""
    return transpose(check_tensor(input, "swapaxes"), axis0, axis1)


@register
def swapdims(input: Tensor, dim0: int, dim1: int) -> Tensor:  # noqa: A002
    """``transpose(input, dim0, dim1)``: a view, as ``torch.swapdims``."""
    return transpose(check_tensor(input, "swapdims"), dim0, dim1)


# --- diagonals ------------------------------------------------------------------------------------

def _diag_dims(ndim: int, dim1: int, dim2: int, name: str) -> tuple:
    d1, d2 = normalize_dim(dim1, ndim, name), normalize_dim(dim2, ndim, name)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return d1, d2


class DiagonalBackwardBackward0(Node):
    """Backward of :func:`_diagonal_scatter` (diagonal's backward): diagonal again."""

    __slots__ = ("offset", "dims")

    def backward(self, g: Tensor) -> tuple:
        return (_diagonal_copy(g, self.offset, *self.dims),)


def _diagonal_scatter(g: Tensor, shape: tuple, offset: int, d1: int, d2: int) -> Tensor:
    """Zeros of ``shape`` with ``g`` on the ``offset``-th diagonal of dims ``d1``, ``d2``
    (the diagonal as ``g``'s last dim); differentiable."""
    xp = g.device.xp
    data = xp.zeros(shape, dtype=g.dtype)
    diag = data.diagonal(offset, d1, d2)
    if xp is numpy:
        diag.setflags(write=True)  # numpy's diagonal views are read-only; this one is ours to fill
    diag[...] = g._data
    out = _wrap(data, g.device)
    if tls.grad_enabled and g._rg:
        node = DiagonalBackwardBackward0()
        node.offset, node.dims = offset, (d1, d2)
        record_unary(node, g, out)
    return out


def _diagonal_copy(g: Tensor, offset: int, d1: int, d2: int) -> Tensor:
    """A copy of ``g``'s diagonal (a gradient: no view of ``g``); differentiable."""
    if tls.grad_enabled:
        return diagonal(g, offset, d1, d2)
    return _wrap(g._data.diagonal(offset, d1, d2).copy(), g.device)


class DiagonalBackward0(Node):
    __slots__ = ("in_shape", "offset", "dims")

    def backward(self, g: Tensor) -> tuple:
        return (_diagonal_scatter(g, self.in_shape, self.offset, *self.dims),)


class DiagonalBackward0_copy(DiagonalBackward0):  # noqa: N801 - torch's name (diag of a matrix copies)
    __slots__ = ()


@register
def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:  # noqa: A002
    """The ``offset``-th diagonal of the planes of ``dim1`` and ``dim2``, as the last dim of a
    view (writes through it reach ``input``), as ``torch.diagonal``.

    >>> import threadgrad as tg
    >>> tg.diagonal(tg.tensor([[1.0, 2.0], [3.0, 4.0]])).tolist()
    [1.0, 4.0]
    """
    x = check_tensor(input, "diagonal")
    d1, d2 = _diag_dims(x.ndim, dim1, dim2, "diagonal")
    data = x._data.diagonal(int(offset), d1, d2)
    if x.device.xp is numpy and x._data.flags.writeable:
        data.setflags(write=True)  # a view as torch's: writes through it reach x
    out = _wrap(data, x.device)
    make_view(out, x)  # See Note [Versions and views] in engine/versions.py
    if tls.grad_enabled and x._rg:
        node = DiagonalBackward0()
        mark_view_node(node, x)
        node.in_shape, node.offset, node.dims = x.shape, int(offset), (d1, d2)
        record_unary(node, x, out)
    return out


class DiagEmbedBackward0(Node):
    __slots__ = ("offset", "dims")

    def backward(self, g: Tensor) -> tuple:
        return (_diagonal_copy(g, self.offset, *self.dims),)


@register
def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # noqa: A002
    """Matrices (in the planes of ``dim1``, ``dim2`` of the result) with ``input``'s last dim on
    their ``offset``-th diagonal and zeros elsewhere, as ``torch.diag_embed``.

    >>> import threadgrad as tg
    >>> tg.diag_embed(tg.tensor([1.0, 2.0])).tolist()
    [[1.0, 0.0], [0.0, 2.0]]
    """
    x = check_tensor(input, "diag_embed")
    return _embed(x, int(offset), dim1, dim2, "diag_embed")


def _embed(x: Tensor, offset: int, dim1: int, dim2: int, name: str) -> Tensor:
    nd = x.ndim + 1
    d1, d2 = _diag_dims(nd, dim1, dim2, name)
    m = (x.shape[-1] if x.ndim else 1) + abs(offset)
    rest = iter(x.shape[:-1])
    shape = tuple(m if d in (d1, d2) else next(rest) for d in range(nd))
    xp = x.device.xp
    data = xp.zeros(shape, dtype=x.dtype)
    diag = data.diagonal(offset, d1, d2)
    if xp is numpy:
        diag.setflags(write=True)
    diag[...] = x._data
    out = _wrap(data, x.device)
    if tls.grad_enabled and x._rg:
        node = DiagEmbedBackward0()
        node.offset, node.dims = offset, (d1, d2)
        record_unary(node, x, out)
    return out


@register
def diag(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """A 1-D ``input`` as the ``diagonal``-th diagonal of a square matrix (zeros elsewhere), or
    a copy of a matrix's ``diagonal``-th diagonal, as ``torch.diag``.

    >>> import threadgrad as tg
    >>> tg.diag(tg.tensor([[1.0, 2.0], [3.0, 4.0]]), 1).tolist()
    [2.0]
    """
    x = check_tensor(input, "diag")
    if x.ndim == 1:
        return _embed(x, int(diagonal), 0, 1, "diag")
    if x.ndim != 2:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {x.ndim}D")
    out = _wrap(x._data.diagonal(int(diagonal)).copy(), x.device)
    if tls.grad_enabled and x._rg:
        node = DiagonalBackward0_copy()
        node.in_shape, node.offset, node.dims = x.shape, int(diagonal), (0, 1)
        record_unary(node, x, out)
    return out


class TraceBackward0(Node):
    __slots__ = ("in_shape",)

    def backward(self, g: Tensor) -> tuple:
        n = min(self.in_shape)
        return (_diagonal_scatter(expand(g, (n,)), self.in_shape, 0, 0, 1),)


@register
def trace(input: Tensor) -> Tensor:  # noqa: A002
    """The sum of a matrix's diagonal (integers sum in int64), as ``torch.trace``.

    >>> import threadgrad as tg
    >>> tg.trace(tg.tensor([[1.0, 2.0], [3.0, 4.0]])).item()
    5.0
    """
    x = check_tensor(input, "trace")
    if x.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {x.ndim}")
    xp = x.device.xp
    dt = x.dtype if x.dtype.kind in "fc" else numpy.dtype(numpy.int64)
    out = _wrap(xp.asarray(xp.trace(x._data, dtype=dt)), x.device)
    if tls.grad_enabled and x._rg:
        node = TraceBackward0()
        node.in_shape = x.shape
        record_unary(node, x, out)
    return out


# --- repeating ------------------------------------------------------------------------------------

class ViewBackward0(Node):
    """``repeat_interleave`` by a number: torch expands, copies and views, so its node on top
    is this name; the gradient sums each element's copies."""

    __slots__ = ("in_shape", "split_shape", "axis")

    def backward(self, g: Tensor) -> tuple:
        return (reshape(_sum(reshape(g, self.split_shape), self.axis), self.in_shape),)


class IndexSelectBackward0(Node):
    """``repeat_interleave`` by a tensor of counts: an index_select of the repeated positions
    (internal indices, kept on the node: Note [Saved indices] in index.py)."""

    __slots__ = ("in_shape", "index")

    def backward(self, g: Tensor) -> tuple:
        return (index_put_zeros(g, self.in_shape, self.index, False),)


@register
def repeat_interleave(input: Tensor, repeats: Any = None, dim: int | None = None, *,  # noqa: A002
                      output_size: int | None = None) -> Tensor:
    """Each element of ``input`` repeated ``repeats`` times (a number, or one count per element
    along ``dim``) in place; without ``dim`` on the flattened input, as
    ``torch.repeat_interleave``. ``repeat_interleave(counts)`` alone gives the indices
    ``counts`` repeats (no gradient).

    >>> import threadgrad as tg
    >>> tg.repeat_interleave(tg.tensor([1.0, 2.0]), 2).tolist()
    [1.0, 1.0, 2.0, 2.0]
    """
    x = check_tensor(input, "repeat_interleave")
    xp = x.device.xp
    if repeats is None:  # repeat_interleave(counts)
        counts = _counts(x, "repeat_interleave")
        return _wrap(xp.repeat(xp.arange(counts.size, dtype=numpy.int64), counts), x.device)
    src = reshape(x, (-1,)) if dim is None else x
    d = 0 if dim is None else normalize_dim(dim, x.ndim, "repeat_interleave")
    n = src.shape[d] if src.ndim else 1
    if isinstance(repeats, Tensor):
        if repeats.device is not x.device:
            raise device_error("repeat_interleave", x, repeats)
        counts = _counts(repeats, "repeat_interleave")
        if counts.size == 1:  # one count for every element, as torch's
            counts = xp.full((n,), int(counts[0]), dtype=counts.dtype)
        if counts.size != n:
            raise RuntimeError(f"repeats must have the same size as input along dim, but got repeats.size(0) = "
                               f"{counts.size} and input.size({d}) = {n}")
        where_ = (slice(None),) * d + (xp.repeat(xp.arange(n), counts),)
        out = _wrap(src._data[where_], x.device)
        if output_size is not None and out.shape[d] != output_size:
            raise RuntimeError(f"repeat_interleave: allocated size does not match required size ({output_size} "
                               f"and {out.shape[d]})")
        if tls.grad_enabled and src._rg:
            node = IndexSelectBackward0()
            node.in_shape, node.index = src.shape, where_
            record_unary(node, src, out)
        return out
    r = int(repeats)
    if r < 0:
        raise RuntimeError("Repeats must be non-negative")
    data = xp.repeat(src._data, r, axis=d)
    out = _wrap(data, x.device)
    if tls.grad_enabled and src._rg:
        node = ViewBackward0()
        node.in_shape, node.axis = src.shape, d + 1
        node.split_shape = src.shape[:d] + (n, r) + src.shape[d + 1:]
        record_unary(node, src, out)
    return out


def _counts(t: Tensor, name: str) -> Any:
    c = t._data
    if c.ndim > 1 or c.dtype.kind not in "iu":
        raise RuntimeError(f"{name}: repeats must be 0-dim or 1-dim tensor of integers")
    if c.size and int(c.min()) < 0:
        raise RuntimeError("repeats can not be negative")
    return c.reshape(-1)


class RepeatBackward0(Node):
    """``tile`` (``Tensor.repeat``): each copy's gradient summed back."""

    __slots__ = ("in_shape", "split_shape")

    def backward(self, g: Tensor) -> tuple:
        parts = reshape(g, self.split_shape)
        summed = _sum(parts, tuple(range(0, len(self.split_shape), 2)))
        return (reshape(summed, self.in_shape),)


@register
def tile(input: Tensor, dims: Any) -> Tensor:  # noqa: A002
    """``input`` repeated ``dims[i]`` times along each dim (ones fill in the shorter of the
    two), as ``torch.tile``.

    >>> import threadgrad as tg
    >>> tg.tile(tg.tensor([1.0, 2.0]), (2,)).tolist()
    [1.0, 2.0, 1.0, 2.0]
    """
    x = check_tensor(input, "tile")
    reps = _dims_arg(dims)
    if any(r < 0 for r in reps):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(reps)}: {list(reps)}")
    nd = max(len(reps), x.ndim)
    reps = (1,) * (nd - len(reps)) + reps
    shape = (1,) * (nd - x.ndim) + x.shape
    out = _wrap(x.device.xp.tile(x._data.reshape(shape), reps), x.device)
    if tls.grad_enabled and x._rg:
        node = RepeatBackward0()
        node.in_shape = x.shape
        node.split_shape = tuple(v for r, n in zip(reps, shape) for v in (r, n))
        record_unary(node, x, out)
    return out


# --- splitting into views --------------------------------------------------------------------------

def _slice(x: Tensor, d: int, start: int, stop: int) -> Tensor:
    """``x``'s elements ``start:stop`` along ``d``: a view with torch's SliceBackward0 (even
    when it is all of the dim, as torch's slice)."""
    idx = (slice(None),) * d + (slice(start, stop),)
    out = _wrap(x._data[idx], x.device)
    make_view(out, x)
    if tls.grad_enabled and x._rg:
        node = SliceBackward0()
        mark_view_node(node, x)
        node.in_shape, node.index, node.basic = x.shape, idx, True
        record_unary(node, x, out)
    return out


@register
def tensor_split(input: Tensor, indices_or_sections: Any, dim: int = 0) -> tuple:  # noqa: A002
    """Views of ``input`` cut along ``dim``: into ``n`` pieces as equal as can be (the first
    ``size % n`` one longer) for a number ``n``, or before each of the listed indices, as
    ``torch.tensor_split``. Each piece is a view of its own (in-place ops on it are recorded).

    >>> import threadgrad as tg
    >>> [p.tolist() for p in tg.tensor_split(tg.arange(5.0), 2)]
    [[0.0, 1.0, 2.0], [3.0, 4.0]]
    """
    x = check_tensor(input, "tensor_split")
    if x.ndim == 0:
        raise RuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims")
    d = normalize_dim(dim, x.ndim, "tensor_split")
    size = x.shape[d]
    spec = indices_or_sections
    if isinstance(spec, Tensor):
        if spec.dtype.kind not in "iu" or spec.ndim > 1:
            raise RuntimeError("tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
                               f"one-dimensional tensor, but got a tensor with {spec.ndim} dims")
        spec = int(spec.item()) if spec.ndim == 0 else [int(v) for v in spec.tolist()]
    if isinstance(spec, (int, numpy.integer)):
        n = int(spec)
        if n <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {n}")
        small, extra = divmod(size, n)
        bounds, start = [], 0
        for i in range(n):
            stop = start + small + (1 if i < extra else 0)
            bounds.append((start, stop))
            start = stop
    else:
        cuts = [int(v) for v in spec]
        edges = [0] + [min(max(c + size if c < 0 else c, 0), size) for c in cuts] + [size]
        bounds = [(edges[i], max(edges[i], edges[i + 1])) for i in range(len(edges) - 1)]
    return tuple(_slice(x, d, a, b) for a, b in bounds)


def _split_by(x: Any, spec: Any, d: int, name: str, min_dims: int) -> tuple:
    x = check_tensor(x, name)
    if x.ndim < min_dims:
        raise RuntimeError(f"torch.{name} requires a tensor with at least {min_dims} dimension"
                           f"{'s' if min_dims > 1 else ''}, but got a tensor with {x.ndim} dimensions!")
    if isinstance(spec, (int, numpy.integer)):
        if spec == 0 or x.shape[d] % int(spec):
            raise RuntimeError(f"torch.{name} attempted to split along dimension {d}, but the size of the dimension "
                               f"{x.shape[d]} is not divisible by the split_size {spec}!")
    return tensor_split(x, spec, d)


@register
def hsplit(input: Tensor, indices_or_sections: Any) -> tuple:  # noqa: A002
    """``tensor_split`` along dim 1 (dim 0 of a 1-D input); a number of sections must divide
    the dim, as ``torch.hsplit``."""
    x = check_tensor(input, "hsplit")
    return _split_by(x, indices_or_sections, 1 if x.ndim > 1 else 0, "hsplit", 1)


@register
def vsplit(input: Tensor, indices_or_sections: Any) -> tuple:  # noqa: A002
    """``tensor_split`` along dim 0 of an input of at least 2 dims, as ``torch.vsplit``."""
    return _split_by(input, indices_or_sections, 0, "vsplit", 2)


@register
def dsplit(input: Tensor, indices_or_sections: Any) -> tuple:  # noqa: A002
    """``tensor_split`` along dim 2 of an input of at least 3 dims, as ``torch.dsplit``."""
    return _split_by(input, indices_or_sections, 2, "dsplit", 3)


# --- broadcasting and grids --------------------------------------------------------------------------

@register
def broadcast_to(input: Tensor, size: Any) -> Tensor:  # noqa: A002
    """``expand(input, size)``: a read-only view, as ``torch.broadcast_to``."""
    return expand(check_tensor(input, "broadcast_to"), size)


def _tensors(tensors: tuple, name: str) -> list:
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    ts = [check_tensor(t, name, f"tensors[{i}]") for i, t in enumerate(tensors)]
    for t in ts[1:]:
        if t.device is not ts[0].device:
            raise device_error(name, ts[0], t)
    return ts


@register
def broadcast_tensors(*tensors: Tensor) -> tuple:
    """The tensors expanded to their common broadcast shape (views; one that has it already is
    returned as it is), as ``torch.broadcast_tensors``."""
    ts = _tensors(tensors, "broadcast_tensors")
    shape: tuple = ()
    for t in ts:
        broadcast_check(shape, t.shape, "broadcast_tensors")
        shape = tuple(numpy.broadcast_shapes(shape, t.shape))
    return tuple(t if t.shape == shape else expand(t, shape) for t in ts)


@register
def meshgrid(*tensors: Tensor, indexing: str | None = None) -> tuple:
    """Grids from 1-D (or 0-d) tensors: output ``i`` holds tensor ``i`` along dim ``i``
    (``indexing="ij"``) or with the first two dims swapped (``"xy"``), as ``torch.meshgrid``
    (expanded views). Without ``indexing``, "ij" with torch's warning."""
    ts = _tensors(tensors, "meshgrid")
    if indexing is None:
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass the indexing argument.",
                      UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}')
    for t in ts:
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {t.ndim}D")
        if t.dtype != ts[0].dtype:
            raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    sizes = [t._data.size for t in ts]
    place = list(range(len(ts)))
    if indexing == "xy" and len(ts) >= 2:
        place[0], place[1] = 1, 0
    shape = [0] * len(ts)
    for i, p in enumerate(place):
        shape[p] = sizes[i]
    outs = []
    for t, p in zip(ts, place):
        lined = [1] * len(ts)
        lined[p] = t._data.size
        outs.append(expand(reshape(t, tuple(lined)), tuple(shape)))
    return tuple(outs)


@register
def cartesian_prod(*tensors: Tensor) -> Tensor:
    """Every combination of the 1-D tensors' elements, one per row (the first tensor's varying
    slowest), as ``torch.cartesian_prod``; one tensor is returned as it is."""
    ts = _tensors(tensors, "cartesian_prod")
    for t in ts:
        if t.ndim != 1:
            raise RuntimeError(f"Expect a 1D vector, but got shape {list(t.shape)}")
    if len(ts) == 1:
        return ts[0]
    grids = meshgrid(*ts, indexing="ij")
    return stack([reshape(g, (-1,)) for g in grids], 1)


class BlockDiagBackward0(Node):
    __slots__ = ("shapes", "dtypes", "corners")

    def backward(self, g: Tensor) -> tuple:
        grads = []
        for (nxt, _), shp, dt, (r, c, h, w) in zip(self.next_edges, self.shapes, self.dtypes, self.corners):
            if nxt is None:
                grads.append(None)
                continue
            part = getitem(g, (slice(r, r + h), slice(c, c + w)))
            grads.append(fit(reshape(part, shp), shp, dt))
        return tuple(grads)


@register
def block_diag(*tensors: Tensor) -> Tensor:
    """The tensors (each at most 2-D; a 0-d one is 1x1, a 1-D one a row) on the diagonal of a
    block matrix, zeros elsewhere; dtypes promote, as ``torch.block_diag``.

    >>> import threadgrad as tg
    >>> tg.block_diag(tg.tensor([[1.0]]), tg.tensor([2.0, 3.0])).tolist()
    [[1.0, 0.0, 0.0], [0.0, 2.0, 3.0]]
    """
    ts = _tensors(tensors, "block_diag")
    for i, t in enumerate(ts):
        if t.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {i} has "
                               f"{t.ndim} dimensions")
    if not ts:
        from ..engine.creation import zeros  # (no tensor to take a device from)
        return zeros(0, 0)
    mats = [t._data.reshape(1, 1) if t.ndim == 0 else t._data.reshape(1, -1) if t.ndim == 1 else t._data
            for t in ts]
    dt = _common_dtype(ts)
    xp = ts[0].device.xp
    data = xp.zeros((sum(m.shape[0] for m in mats), sum(m.shape[1] for m in mats)), dtype=dt)
    corners, r, c = [], 0, 0
    for m in mats:
        h, w = m.shape
        data[r:r + h, c:c + w] = cast(m, dt)
        corners.append((r, c, h, w))
        r, c = r + h, c + w
    out = _wrap(data, ts[0].device)
    if tls.grad_enabled and any(t._rg for t in ts):
        node = BlockDiagBackward0()
        node.shapes, node.dtypes, node.corners = tuple(t.shape for t in ts), tuple(t.dtype for t in ts), tuple(corners)
        record(node, ts, out)
    return out


# The Tensor methods of this module (bound in _methods.py).
METHODS = {fn.__name__: fn for fn in (
    flip, fliplr, flipud, roll, rot90, movedim, moveaxis, swapaxes, swapdims, diagonal, diag_embed, diag, trace,
    repeat_interleave, tile, tensor_split, hsplit, vsplit, dsplit)}


def _varargs(fn: Any) -> Any:
    """A method taking sizes or dims as ``x.tile(2, 1)`` or ``x.tile((2, 1))``, as torch's."""
    def method(self: Tensor, *dims: Any) -> Any:
        return fn(self, dims[0] if len(dims) == 1 and not isinstance(dims[0], (int, numpy.integer)) else dims)

    method.__name__, method.__doc__ = fn.__name__, fn.__doc__
    return method


METHODS.update(tile=_varargs(tile), flip=_varargs(flip), broadcast_to=_varargs(broadcast_to))
