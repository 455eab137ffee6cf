"""Order statistics and counting, as torch's: median / nanmedian, topk, kthvalue, mode; and
the counting functions unique, histc and bincount (no gradient, so not in REGISTRY). See
Note [Op definitions] in _core.py.

Each value-selecting op sorts (or partitions) with the array module, returns ``(values,
indices)`` as a named tuple named as torch's ``torch.return_types`` (``median(values=...,
indices=...)``, as ``max(x, dim)`` does), and sends the gradient back to the indices.

Note [Index choice among ties]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Where several elements hold the selected value, the index returned says which one gets the
gradient, so it follows torch's cpu kernels, case by case:

* ``median(x, dim)``, ``nanmedian(x, dim)``: torch's order is a stable sort, NaN last; the
  median is its ``(n - 1) // 2``-th element, and a slice holding NaN gives its first NaN
  (nanmedian: the ``(c - 1) // 2``-th of its ``c`` numbers).
* ``cummax`` / ``cummin`` (scan.py): the latest element that reached the running extreme
  (torch compares with ``>=`` / ``<=``); once a NaN came, the latest NaN.
* ``kthvalue``: torch runs a quickselect (median-of-three pivot, Hoare partition) on each
  slice, and the index among ties falls where its swaps leave it. Where the k-th value is
  unique in its slice (the usual case) the index is the stable sort's; only the slices with
  ties run ``_selection.quickselect_index``, which repeats those swaps.
* ``mode``: torch sorts pairs (value, index) by value with ``std::sort`` and ``<``, then takes
  the first longest run and the index at its end. Up to 16 elements that sort is an insertion
  sort, stable: the smallest of the most frequent values and its last position, as a
  whole-array stable sort gives; longer slices with a repeated mode, and slices holding NaN
  (which ``<`` leaves unordered, each NaN a run of its own), run ``_selection.mode_position``.
* ``topk`` (``sorted=True``): torch sorts pairs (value, index) with libstdc++'s
  ``std::partial_sort`` (``k * 64 <= n``) or ``std::nth_element`` and ``std::sort``, whose
  order among equal values is the algorithms' own. Where the top ``k`` of a slice hold no tie
  (no two equal, none equal to one left out) any order agrees with the stable sort's; only the
  slices with a tie run ``_selection.topk_order``, which replays those algorithms.
"""
from __future__ import annotations

import math
from collections import namedtuple
from typing import Any

import numpy

from ..engine.tensor import Tensor, _wrap

from ._core import Node, check_tensor, normalize_dim, record, register, tls
from ._selection import mode_position, quickselect_index, topk_order
from .index import along_dim_index
from .math import _stable_order
from .reduce import MaxBackward0, MaxBackward1, keepdim_shape
from .scan import _positions, _torch_name
from .shape import reshape

# torch.return_types.<name>: a named pair that also reads as a tuple
_MedianResult = namedtuple("median", ["values", "indices"])
_NanmedianResult = namedtuple("nanmedian", ["values", "indices"])
_TopkResult = namedtuple("topk", ["values", "indices"])
_KthvalueResult = namedtuple("kthvalue", ["values", "indices"])
_ModeResult = namedtuple("mode", ["values", "indices"])


def _index_result(x: Tensor, values: Any, idx: Any, dim: int, keepdim: bool, node: Node | None) -> tuple:
    """(values, indices) Tensors of a value-selecting reduction along ``dim``; ``idx`` holds
    the selected positions along ``dim`` (size 1, or k for topk). The node (a MaxBackward0 kind) sends
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


# --- topk, kthvalue, mode ---------------------------------------------------------------------

class TopkBackward0(MaxBackward0):
    """topk's backward: each gradient back to the index its value came from."""

    __slots__ = ()


@register
def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:  # noqa: A002
    """``(values, indices)`` of the ``k`` largest (``largest=False``: smallest) elements along
    ``dim``, as ``torch.topk``: NaN counts as the largest; always in sorted order (torch's
    ``sorted=False`` leaves the order unspecified); among equal values, torch's indices (See
    Note [Index choice among ties]). The gradient goes back through the indices.

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
    if x.ndim == 0:  # k is 0 or 1, and either gives the element itself, 0-d, as torch's
        flat = reshape(x, (1,))
        return _TopkResult(*_index_result(flat, flat._data, xp.zeros(1, dtype="int64"), 0, False, TopkBackward0()))
    data = x._data
    idx = _top_indices(xp, data, d, k, largest)
    values = xp.take_along_axis(data, idx, axis=d)
    tied = _tied_in_top(xp, data, values, d) if k else None
    if tied is not None and tied.any():  # only these slices need torch's own order
        idx = _replay(x, idx, tied, d, lambda values: topk_order(values, k, largest))
        values = xp.take_along_axis(data, idx, axis=d)  # (0.0 and -0.0 tie: the values move too)
    return _TopkResult(*_index_result(x, values, idx, d, True, TopkBackward0()))


def _same(xp: Any, a: Any, b: Any) -> Any:
    """Equal, NaN equal to NaN: a tie in torch's selection order."""
    same = a == b
    if a.dtype.kind in "fc":
        same |= xp.isnan(a) & xp.isnan(b)
    return same


def _tied_in_top(xp: Any, data: Any, top: Any, dim: int) -> Any:
    """Per slice (``dim`` kept), whether a tie makes torch's topk order differ from the stable
    one: two equal values among the ``top`` ones (sorted along ``dim``), or an element left out
    equal to the last one taken."""
    lead = (slice(None),) * dim
    inside = _same(xp, top[lead + (slice(1, None),)], top[lead + (slice(None, -1),)]).any(axis=dim, keepdims=True)
    last = top[lead + (slice(-1, None),)]
    left_out = _same(xp, data, last).sum(axis=dim, keepdims=True) > _same(xp, top, last).sum(axis=dim, keepdims=True)
    return inside | left_out


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
        idx = _replay(x, idx, tied, d, lambda values: quickselect_index(values, k - 1))
    return _KthvalueResult(*_index_result(x, values, idx, d, keepdim, KthvalueBackward0()))


class ModeBackward0(MaxBackward0):
    """mode's backward: the gradient goes to the returned index."""

    __slots__ = ()


@register
def mode(x: Tensor, dim: int = -1, keepdim: bool = False) -> Any:
    """``(values, indices)`` of the most frequent value along ``dim`` (the smallest among
    equally frequent ones) and torch's position of it (the last one on up to 16 elements; See
    Note [Index choice among ties]), NaN as torch's unordered sort leaves it. The gradient goes
    to the returned index.

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
    # torch's std::sort is stable only up to 16 elements, and its < leaves NaN unordered: the
    # slices where either matters replay it (a repeated mode past 16 elements, or a NaN)
    replay = xp.take_along_axis(lengths, best, axis=d) > 1 if n > 16 else xp.zeros(best.shape, dtype=bool)
    if x._data.dtype.kind in "fc":
        replay = replay | xp.isnan(x._data).any(axis=d, keepdims=True)
    if replay.any():
        idx = _replay(x, idx, replay, d, mode_position)
    values = xp.take_along_axis(x._data, idx, axis=d)
    return _ModeResult(*_index_result(x, values, idx, d, keepdim, ModeBackward0()))


def _replay(x: Tensor, idx: Any, slices: Any, dim: int, pick: Any) -> Any:
    """``idx`` with each slice marked in ``slices`` (``dim`` kept) replaced by ``pick`` of the
    slice's values as a list: torch's algorithm replayed on the host (ops/_selection.py)."""
    host = x.device.to_host
    moved = numpy.moveaxis(host(x._data), dim, -1)
    host_idx = numpy.moveaxis(host(idx).copy(), dim, -1)
    for slice_ in map(tuple, numpy.argwhere(numpy.moveaxis(host(slices), dim, -1)[..., 0])):  # (a 1-d x: 0-d)
        host_idx[slice_] = pick(moved[slice_].tolist())
    return x.device.asarray(numpy.moveaxis(host_idx, -1, dim))


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
    if data.ndim == 1 and data.size == 0:  # torch's early return: int64 zeros, weights or not
        return _wrap(xp.zeros(minlength, dtype="int64"), input.device)
    if data.ndim != 1 or int(data.min()) < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is None:
        return _wrap(xp.bincount(data.astype("int64"), minlength=minlength).astype("int64"), input.device)
    check_tensor(weights, "bincount", "weights")
    if weights._data.ndim != 1 or weights.shape[0] != data.shape[0]:
        raise RuntimeError("weights should be 1-d and have the same length as input")
    if weights.dtype != numpy.float32:
        counts = xp.bincount(data.astype("int64"), weights=weights._data.astype("float64"), minlength=minlength)
        return _wrap(counts, input.device)
    # float32 weights sum in float32, in input order, as torch's loop does (numpy's bincount
    # would sum in float64 and round once: another last bit)
    counts = xp.zeros(max(int(data.max()) + 1, minlength), dtype="float32")
    xp.add.at(counts, data, weights._data)
    return _wrap(counts, input.device)
