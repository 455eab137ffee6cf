"""Version counters and view bases: the state tensors that share memory have in common.

Note [Versions and views]
~~~~~~~~~~~~~~~~~~~~~~~~~
Three facts, kept apart as PyTorch keeps them (its VariableVersion, and the ViewInfo of a
differentiable view):

* **The version counter** ``t._vc``: one shared cell ``[n]`` for every tensor over the same
  memory: a tensor, its views, its ``detach()`` aliases and their views. Every in-place op
  bumps it by exactly one (:func:`bump`); a node that saved a tensor records the number and
  backward compares (Note [In-place ops] in ops/inplace.py). The cell holds the number and
  nothing else. It is a one-element list rather than a slotted object because one is made
  for every op output: a list is made in about 35 ns, an object with one slot in about
  70 ns, and reading ``vc[0]`` costs what reading a slot does (benchmarks/instructions.py,
  the chain forward row; docs/performance.md, round 7).
* **The view base** ``t._base``: for a view, the tensor it views; never itself a view (a
  view of a view has the first one's base, as torch's ``_base``). None for every other
  tensor, ``detach()`` aliases included: an alias is a new tensor for autograd that shares
  memory and version, so a view *of an alias* has the alias as its base, and an in-place op
  through it changes the alias's history, not the original's. A strong reference, as in
  torch: a view keeps its base alive, so its history can always be taken anew from it.
* **The base's graph generation** ``base._ext.generation`` (0 while the base has no
  ``_ext``): bumped by :func:`next_generation` each time a *recorded* in-place op changes the
  base, on itself or through one of its views. A view node stamps the generation it was
  made at (``_view_gen``; for a view with no grad_fn, its ``_ext.view_gen``); a view made
  at an older generation than its base's holds a history that no longer describes its
  values, and takes it anew from the base when next read (Note [Stale views] in
  ops/views.py, which holds everything that builds or rebuilds view history).

So "is this a view" is one slot read, ``t._base is not None``, the check every op makes on
its operands (it replaces testing a length of the counter, which was state). The engine
core reads these facts and never rebuilds history itself: it calls ops/views.py through
``engine._state.refresh_view``.

>>> from threadgrad import engine
>>> x = engine.tensor([1.0, 2.0, 3.0])
>>> v = x[1:]
>>> v._base is x, x._base is None, v._vc is x._vc
(True, True, True)
>>> _ = v.add_(1.0)
>>> x.version, x.tolist()
(1, [1.0, 3.0, 4.0])
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ._locks import LOCKS
from ._state import tls

if TYPE_CHECKING:
    from .tensor import Tensor


def version(t: "Tensor") -> int:
    """``t``'s version: the number of in-place ops on its memory since it was made. (The save
    and unpack paths of engine/graph.py and engine/_record.py read ``t._vc[0]`` directly: a
    call per saved tensor there is measurable, benchmarks/instructions.py's forward rows.)"""
    return t._vc[0]


def bump(t: "Tensor") -> None:
    """One more in-place op on ``t``'s memory (every tensor sharing it sees the new version):
    the only writer of a version (ops/inplace.py's in-place ops, the in-place ``.grad``
    accumulation of engine/tensor.py)."""
    t._vc[0] += 1


def base_of(t: "Tensor") -> "Tensor":
    """The tensor whose history ``t``'s history is part of: its base for a view, else itself."""
    b = t._base
    return t if b is None else b


def generation(base: "Tensor") -> int:
    """How many recorded in-place ops have changed ``base`` (Note [Versions and views])."""
    e = base._ext
    return 0 if e is None else e.generation


def next_generation(t: "Tensor") -> int:
    """A recorded in-place op changed ``t`` (and so its base, if it is a view): the base's views
    made before now hold an out-of-date history. Returns the new generation."""
    ext = base_of(t)._ext_obj()
    with LOCKS.view:  # two threads' in-place ops on one base must each count
        ext.generation += 1
        return ext.generation


def made_at(t: "Tensor") -> int:
    """The base generation ``t``'s history describes: its grad_fn's stamp, or for a view with
    no grad_fn (made under no_grad), the stamp it was made with."""
    fn = t._grad_fn
    if fn is not None:
        return getattr(fn, "_view_gen", 0)
    e = t._ext
    return 0 if e is None else e.view_gen


def is_stale(t: "Tensor") -> bool:
    """``t`` is a view whose base a recorded in-place op changed after ``t`` took its history."""
    b = t._base
    return b is not None and made_at(t) < generation(b)


def make_view(out: "Tensor", x: "Tensor") -> None:
    """Make the new tensor ``out`` a view of ``x``'s memory: it shares ``x``'s version counter
    and has ``x``'s base (``x`` itself when ``x`` is no view). A view made while nothing is
    recorded of a tensor that requires grad requires grad too, as torch's: it has no grad_fn and
    its gradient goes nowhere (Note [No-grad views]); ``out`` is new, so nothing else reads it yet."""
    out._vc = x._vc
    b = x._base
    if b is None:
        b = x
    out._base = b
    e = b._ext
    if e is not None and e.generation:
        out._ext_obj().view_gen = e.generation  # the history it describes: for a view with no grad_fn
    if x._rg and not tls.grad_enabled:
        out._rg = True
        out._ext_obj().no_grad_view = True
    meta = _view_meta(x)
    if meta is not None:
        out._ext_obj().view_meta = meta


def _view_meta(x: "Tensor") -> str | None:
    """Why a view of ``x`` may not be written in place (see _TensorExt.view_meta), or None."""
    e = x._ext
    if e is not None and e.view_meta is not None:
        return e.view_meta
    fn = x._grad_fn
    if fn is None:
        return None
    if fn.returns_multiple_views or x._output_nr in fn.multi_view_outputs:
        return "multi"
    if x._output_nr in fn.custom_view_outputs:
        return "custom"
    return None


def mark_view_node(node: object, x: "Tensor") -> None:
    """Stamp the grad_fn of a view of ``x`` with the generation of ``x``'s base."""
    b = x._base
    e = (x if b is None else b)._ext
    if e is not None and e.generation:
        node._view_gen = e.generation  # type: ignore[attr-defined]


# Note [No-grad views]
# ~~~~~~~~~~~~~~~~~~~~
# ``with no_grad(): v = x[0:1]`` of an ``x`` that requires grad gives, as in torch, a view
# that requires grad but has no grad_fn: ops on it are recorded, and the gradient that
# reaches it goes nowhere (not to ``x``, not to ``v.grad``: it has no AccumulateGrad), so
# ``grad(f(v), v)`` says it was not used in the graph. ``make_view`` marks it
# (``_ext.no_grad_view``) and ``gradient_edge`` gives it no edge. ``requires_grad_()`` on it
# makes it a plain leaf, as torch's flag does.
