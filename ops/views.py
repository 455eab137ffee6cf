"""Views and the history of what they share: view replay, CopySlices, the ``mark_dirty`` rebase.

Who owns what (the version counter, a view's base, the base's graph generation) is in
Note [Versions and views] in engine/versions.py; this module builds and rebuilds the
history those facts call for.

Note [Stale views]
~~~~~~~~~~~~~~~~~~
A view's grad_fn describes its values as "these elements of its base's history". A
recorded in-place op on the base (on it or through another view) gives the base a new
history, and a view made before then still points at the old one: it is *stale*
(``versions.is_stale``). torch regenerates a stale view's grad_fn whenever it is read.
Here the engine reads the plain slot ``_grad_fn`` (the hot paths read it), so every place that
reads a view's autograd state refreshes it first through :func:`refresh` (bound as
``engine._state.refresh_view``): ops using it (``check_tensor``, ``binary_operands``), its
``grad_fn``, ``requires_grad`` and ``is_leaf`` properties, ``register_hook``,
``retain_grad()``, ``backward()`` from it and its gradient edge in ``backward``/``grad``
(engine/tensor.py), and a custom Function's apply.

As in torch, the regenerated history is AsStridedBackward0 over the base's current graph,
read at the view's positions (:func:`view_index`): "its elements of the base as the base is
now". A retain_grad() moves to it, while a hook registered on the view before stays on its
old grad_fn and no longer fires (torch's test_tensor_hooks_inplace_over_view). A recorded
in-place op on a view regenerates that view too, right after rebasing its base: its gradient
is the gradient of its own new value (torch's test_retain_grad_inplace_over_view). Where the
history cannot be taken anew (the base's array has gaps) the op raises: never a wrong
gradient. While grad mode is off nothing is recorded, so nothing is refreshed then.

A view made under no_grad has no grad_fn (Note [No-grad views] in engine/versions.py).
Where torch refuses to go on once its base changes in place under grad mode, threadgrad
takes its history anew from the base like any stale view: the documented rebase of a view
made under no_grad (docs/ops.md).

Note [In-place ops on views]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
``v = y[1:]; v.mul_(3)`` changes ``y`` too, so ``y``'s history must change: as in PyTorch's
CopySlices, ``y`` becomes "old ``y`` with ``v``'s elements replaced by ``3 * v``". The view's
positions in its base are read from the two arrays' memory layout (:func:`view_index`), and
the base takes one :class:`CopySlices` node over the op's own node (Note [CopySlices]), written
with differentiable ops, so gradients reach the old base outside the view and the op's
inputs inside it, and double backward works. The
view itself then takes its history anew from the rebased base (Note [Stale views]). A view
made under no_grad of a base in the graph first takes its history from the base, so the
change reaches the base's graph. A view of a ``detach()`` alias has the alias as its base:
the alias joins the graph, the tensor it was detached from does not (torch's rule). A view
of a leaf that requires grad raises, as in torch; a base whose array has gaps (not dense:
:func:`_dense` accepts any order of dims, as numpy keeps a permuted operand's layout in an op's
result) makes the op raise. A custom Function's
``mark_dirty`` on a view rebases its base the same way (:func:`dirty_base`,
:func:`rebase_dirty`), and the view then takes its history anew from the rebased base, as
torch's ``rebase_history``: the Function's node is not the view's grad_fn, and its edge for the
view is the view's elements of the base as it was before (hooks on the view's old grad_fn do
not fire; a retain_grad() moves along).
"""
from __future__ import annotations

from typing import Any

import numpy

from ..engine import _state
from ..engine.graph import Node, set_retains_grad
from ..engine.tensor import Tensor, _wrap, gradient_edge
from ..engine.versions import is_stale
from . import index, shape
from ._core import const, record, tls
from .index import getitem, run_once


def _address(a: Any) -> int:
    return a.data.ptr if hasattr(a.data, "ptr") else a.__array_interface__["data"][0]  # cupy / numpy


def _dense(r: Any) -> bool:
    """``r``'s elements fill its memory with no gap, in some order of its dims, with positive
    strides: C- or F-contiguous, or a permutation of either, as numpy keeps a permuted
    operand's layout in an elementwise result (``a.permute(1, 2, 0) * 2``; issue 33, item 6)."""
    if r.flags.c_contiguous or r.flags.f_contiguous:
        return True
    expected = r.itemsize
    for st, n in sorted((st, n) for st, n in zip(r.strides, r.shape) if n != 1):
        if st != expected:
            return False
        expected *= n
    return True


def view_offset(view: Tensor, base: Tensor) -> int | None:
    """``view``'s first element's offset in ``base``'s memory, in elements; None when the
    layout cannot be read (the base's array has gaps, or the view is not aligned on its
    elements). Cheap: no array is built."""
    r, v = base._data, view._data
    if not _dense(r):
        return None
    size = r.itemsize
    offset = _address(v) - _address(r)
    if offset % size or any(st % size for st in v.strides) or not 0 <= offset < max(r.nbytes, 1):
        return None
    return offset // size


def view_index(view: Tensor, base: Tensor) -> Any:
    """For each element of ``view``, its position in ``base`` flattened in C order (an int64
    host array of the view's shape), read from the two arrays' memory layout; None where
    :func:`view_offset` is."""
    start = view_offset(view, base)
    if start is None:
        return None
    r, v = base._data, view._data
    size = r.itemsize
    # Each element's C-order position, in the order the base's elements lie in memory: the
    # dims from the largest stride to the smallest (a dense base: see _dense). The view's
    # offset and strides then pick its elements' positions.
    logical = numpy.arange(r.size, dtype=numpy.int64).reshape(r.shape)
    order = sorted(range(r.ndim), key=lambda d: -r.strides[d])
    in_memory = logical.transpose(order).ravel()
    return numpy.lib.stride_tricks.as_strided(in_memory[start:], v.shape,
                                              tuple(st // size * in_memory.itemsize for st in v.strides)).copy()


def regenerate(t: Tensor) -> bool:
    """Give the view ``t`` the history "its elements of its base as the base is now": the base's
    current graph read at the view's positions (torch's view replay). False when the base's
    layout cannot be read. A retain_grad() moves to the new grad_fn; hooks stay behind
    (Note [Stale views])."""
    base = t._base
    gen = base._ext.generation if base._ext is not None else 0
    if base._grad_fn is None:
        return True  # the base has no graph (never a leaf that requires grad: those refuse recorded in-place ops)
    idx = view_index(t, base)
    if idx is None:
        return False
    prev = tls.grad_enabled
    tls.grad_enabled = True  # the history is recorded whatever the mode it is asked for in
    try:
        proxy = _wrap(base._data, base.device)  # stands for the base in the graph (shares no counter)
        proxy._grad_fn, proxy._output_nr, proxy._rg = base._grad_fn, base._output_nr, base._rg
        regen = index.take_view(proxy if proxy._data.ndim else shape.reshape(proxy, (-1,)), idx)
    finally:
        tls.grad_enabled = prev
    old_fn, old_nr = t._grad_fn, t._output_nr
    t._grad_fn, t._output_nr, t._rg = regen._grad_fn, 0, regen._rg
    if t._ext is not None:
        t._ext.no_grad_view = False
    move_retain(t, old_fn, old_nr)
    if t._grad_fn is not None:
        t._grad_fn._view_gen = gen
    return True


def move_retain(t: Tensor, old_fn: Node | None, old_nr: int) -> None:
    """``t`` has a new grad_fn: its retain_grad() hook (kept on ``old_fn``'s slot ``old_nr``)
    moves along, as torch's update_tensor_hooks_on_new_gradfn; its tensor hooks stay behind."""
    if t.retains_grad and old_fn is not None and old_fn._hooks is not None and t._grad_fn is not None:
        retain = set_retains_grad(old_fn._hooks, old_nr, None)
        if retain is not None:
            set_retains_grad(t._grad_fn._hooks_obj(), t._output_nr, retain)


def check_fresh(t: Tensor, name: str) -> None:
    """Bring a stale view up to date before an op records it (Note [Stale views]); nothing to do
    while no graph is recorded."""
    if tls.grad_enabled:
        refresh(t, name)


def refresh(t: Tensor, name: str) -> None:
    """:func:`check_fresh` in any grad mode: for what reads a view's autograd state (its
    ``requires_grad``, ``is_leaf``, hooks, ``retain_grad()``, a backward from it), as torch's
    grad_fn getter regenerates a stale view's (Note [Stale views])."""
    if is_stale(t) and not regenerate(t):
        raise RuntimeError(
            f"{name}: this tensor is a view of a tensor that an in-place op changed afterwards while "
            "recording gradients, so its graph is out of date, and it cannot be taken anew (its base's "
            "array has gaps). Take the view again after the in-place op (or use the out-of-place op)."
        )


_state.register_view_refresher(refresh)  # the engine core refreshes stale views through it (it imports no ops)


class CopySlices(Node):
    """A base's node after an in-place op on one of its views (PyTorch's CopySlices): the
    gradient of the base is the incoming one with the view's elements replaced by what the
    op's node ``fn`` gives for the view, and the op's other inputs get what ``fn`` gives them.
    Its edges are the base's old history, then ``fn``'s edges but the view's (slot
    ``self_slot``), so a post-hook sees torch's gradients: the base's, then the op's other
    inputs'. See Note [CopySlices].

    Without ``fn`` (an in-place op whose result is not one node over the view: a cast to the
    view's dtype after it), the second edge is the written value's history and it gets the
    view's elements of the gradient. It saves nothing, but refuses to run again once its graph
    was freed, as torch's (which drops ``fn`` then): Note [Saved indices] in index.py."""

    __slots__ = ("fn", "self_slot", "output_nr", "index", "view_shape")

    def backward(self, g: Tensor) -> tuple:
        self.saved_arrays()  # raises once freed (run_once)
        region = getitem(g, self.index) if self.index is not None else shape.reshape(g, self.view_shape)
        fn = self.fn
        if fn is None:
            grads = [region]
            g_view = None
        else:
            given: list = [None] * fn.num_inputs
            given[self.output_nr] = region
            grads = list(fn.apply(given))
            g_view = grads.pop(self.self_slot)
        gx = None
        if self.next_edges[0][0] is not None:
            if g_view is None:
                # torch copies the op's gradient for the view in; where the op gives none (a
                # custom Function's None), the view's elements get fresh zeros, never a product
                # with a mask (issue 33, item 3). torch drops the whole base's gradient then:
                # docs/parity.md.
                g_view = const(g.device.xp.zeros(region.shape, dtype=g.dtype), g)
            if self.index is None:
                gx = shape.reshape(g_view, g.shape)
            else:
                gx = index.put(g, self.index, g_view, copy_slices=True)
        return (gx, *grads)


# Note [CopySlices]
# ~~~~~~~~~~~~~~~~~
# torch records an in-place op on a view twice over: the op's own node ``fn`` (its first input
# the view), and on the base a CopySlices node that wraps ``fn``. The base's history becomes
# CopySlices, whose edges are the base's old history and ``fn``'s other inputs; in backward
# it takes the view's elements of the base's gradient, runs ``fn`` on them, writes what ``fn``
# gives for the view back over those elements, and passes the rest on. ``fn`` is not in the
# graph itself (its edge to the view is never followed, and its hooks do not run), so a
# node post-hook on the base's ``grad_fn`` sees one gradient per edge, of the base's and the
# inputs' shapes, as torch's. The view's elements are read from the two arrays' memory layout
# (:func:`view_index`), kept as one index array per dim of the base. A custom Function's
# ``mark_dirty`` on a view is recorded the same way, with the Function's node as ``fn``; the
# dirty view may be any of its tensor arguments (``self_slot``; torch assumes the first).


def rebase(base: Tensor, old_base: Tensor, positions: Any, result: Tensor, view: Tensor | None = None) -> None:
    """``base`` takes the history "``old_base`` with the elements at ``positions`` (a view's,
    :func:`view_index`) replaced by ``result``", as one :class:`CopySlices` node (Note
    [CopySlices]). When ``view`` (the view written, its history not yet changed) is given and
    ``result``'s node takes it as its first input, that node is wrapped (torch's structure);
    otherwise ``result`` itself is the node's second input. ``old_base`` may be ``base``
    itself: only its history (read first) is used."""
    fn = result._grad_fn
    if (view is not None and fn is not None and fn.num_inputs == 1
            and fn.next_edges[0] == (view._grad_fn, view._output_nr)):
        _copy_slices(base, old_base, positions, fn, 0, result._output_nr, fn.next_edges[1:])
    else:
        edge = (fn, result._output_nr) if fn is not None else gradient_edge(result)
        _copy_slices(base, old_base, positions, None, 0, 0, (edge,))


def _copy_slices(base: Tensor, old_base: Tensor, positions: Any, fn: Node | None, self_slot: int,
                 output_nr: int, other_edges: tuple) -> None:
    """Make ``base``'s history a new :class:`CopySlices`: edges ``old_base``'s history, then
    ``other_edges``; a retain_grad() on ``base`` moves to it."""
    node = CopySlices()
    node.fn, node.self_slot, node.output_nr = fn, self_slot, output_nr
    node.view_shape = positions.shape
    node.index = numpy.unravel_index(positions, base.shape) if base._data.ndim else None
    out = _wrap(base._data, base.device)  # stands for the new base: record links the node to it
    record(node, (old_base,), out, run_once())  # (old_base's edge is read here, before base changes)
    node.next_edges = node.next_edges + tuple(other_edges)
    out._rg = any(e[0] is not None for e in node.next_edges)
    take_history(base, out)


def take_history(t: Tensor, result: Tensor) -> None:
    """``t`` takes ``result``'s grad_fn; a retain_grad() moves with it, as in torch."""
    old_fn, old_nr = t._grad_fn, t._output_nr
    t._grad_fn, t._output_nr, t._rg = result._grad_fn, result._output_nr, result._rg or t._rg
    move_retain(t, old_fn, old_nr)


def view_inplace_error(t: Tensor, name: str) -> RuntimeError | None:
    """torch's refusal of an in-place op on a view whose grad_fn may not be rewritten: an
    output of a custom Function that is a view, or one of several views a function returned,
    or a view of either (torch's creation meta passes on to views of views)."""
    fn = t._grad_fn
    if fn is None:
        return None
    e = t._ext
    meta = e.view_meta if e is not None else None
    if meta == "custom" or t._output_nr in fn.custom_view_outputs:
        return RuntimeError(
            f"{name}: Output {t._output_nr} of {fn.name()} is a view and is being modified inplace. This view "
            "was created inside a custom Function (or because an input was returned as-is) and the autograd "
            "logic to handle view+inplace would override the custom backward associated with the custom "
            "Function, leading to incorrect gradients. This behavior is forbidden. You can fix this by cloning "
            "the output of the custom Function."
        )
    if meta == "multi" or fn.returns_multiple_views or t._output_nr in fn.multi_view_outputs:
        return RuntimeError(
            f"{name}: Output {t._output_nr} of {fn.name()} is a view and is being modified inplace. This view "
            "is the output of a function that returns multiple views. Such functions do not allow the output "
            "views to be modified inplace. You should replace the inplace operation by an out-of-place one."
        )
    return None


# --- custom Functions' mark_dirty (engine/function.py) -----------------------------------

def dirty_base(fn_name: str, o: Tensor, differentiable: bool) -> tuple | None:
    """For an input a custom Function marked dirty that is a view, ``(base, positions)`` to
    rebase the base with; None for one that is not. Raises where torch refuses, or where the
    change cannot be recorded (Note [In-place ops on views])."""
    base = o._base
    err = view_inplace_error(o, fn_name) if differentiable else None
    if err is not None:
        raise err  # torch's check_inplace on a dirty input
    if base is None:
        if o._grad_fn is None and o._rg:
            raise RuntimeError(
                f"{fn_name}: a leaf Variable that requires grad has been used in an in-place operation.")
        return None
    if base._grad_fn is None and base._rg:
        raise RuntimeError(
            f"{fn_name}: a view of a leaf Variable that requires grad is being used in an in-place operation. "
            "Pass a clone() of the view instead, or call the Function under engine.no_grad()."
        )
    idx = None if o._grad_fn is None and base._grad_fn is not None else view_index(o, base)
    if idx is None and differentiable:
        raise RuntimeError(
            f"{fn_name}: the input marked dirty is a view of another tensor whose change cannot be recorded for "
            "autograd (the view was taken under no_grad of a tensor in the graph, or its base's array has "
            "gaps): the base's graph would miss the change. Pass a clone() of the view instead."
        )
    return base, idx


def rebase_dirty(node: Node, output_nr: int, view: Tensor, base: Tensor, idx: Any, self_slot: int = 0) -> None:
    """The base of a dirty view takes a :class:`CopySlices` over the Function's ``node``
    (output ``output_nr``, the view being its tensor argument ``self_slot``), as an in-place
    op on a view does (Note [CopySlices]); the caller then takes the view's history anew
    (:func:`regenerate`)."""
    others = node.next_edges[:self_slot] + node.next_edges[self_slot + 1:]
    _copy_slices(base, base, idx, node, self_slot, output_nr, others)
