"""Recording the graph in forward: the one function every op calls to link its node.

>>> from threadgrad import engine, ops
>>> x = engine.ones(2, requires_grad=True)
>>> ops.exp(x).grad_fn.next_functions[0][0].name()
'AccumulateGrad'
"""
from __future__ import annotations

import traceback
from typing import Any, Sequence

from ._state import grad_off_threads, tls, used
from .dtypes import promoted
from .graph import NO_EDGE, Node, SavedOutput, _next_seq, pack_saved
from .tensor import Tensor, _new_tensor, grad_accumulator


def needs_grad(*tensors: Tensor) -> bool:
    """True when grad mode is on and some tensor requires grad: the op must record a node."""
    if not tls.grad_enabled:
        return False
    for t in tensors:
        if t is not None and t._rg:
            return True
    return False


def _edge(t: "Tensor | None") -> tuple:
    """The edge a gradient for input ``t`` travels: to its grad_fn, its leaf accumulator, or nowhere."""
    if t is None:
        return NO_EDGE
    fn = t._grad_fn
    if fn is not None:
        return (fn, t._output_nr)
    if t._rg:
        return (grad_accumulator(t), 0)
    return NO_EDGE


def record(node: Node, inputs: Sequence["Tensor | None"], outputs: "Tensor | Sequence[Tensor]",
           saved: Sequence["Tensor | None"] = ()) -> None:
    """Make ``node`` the grad_fn of ``outputs``, with one edge per input; save ``saved``.

    Call it after computing the outputs and only when :func:`needs_grad` said so.
    ``saved`` may contain the outputs themselves (they are then saved without a
    reference cycle) and None for values the backward will not need.
    """
    node.sequence_nr = _next_seq()
    n = len(inputs)
    if n == 1:
        node.next_edges = (_edge(inputs[0]),)  # unary ops: no list (measured -0.15 us per op)
    elif n == 2:
        # Binary ops: no list, and the usual edge (to the input's grad_fn) without a call
        # (measured: record() of a binary op 1.61 -> 1.32 us, in a slow phase of the machine).
        a, b = inputs
        fa = None if a is None else a._grad_fn
        fb = None if b is None else b._grad_fn
        node.next_edges = ((fa, a._output_nr) if fa is not None else _edge(a),
                           (fb, b._output_nr) if fb is not None else _edge(b))
    else:
        node.next_edges = tuple([_edge(t) for t in inputs])
    if type(outputs) is Tensor:
        outputs._grad_fn = node
        outputs._rg = True
        dev = outputs.device
    else:
        dev = outputs[0].device
        for i, out in enumerate(outputs):
            out._grad_fn = node
            out._rg = True
            out._output_nr = i
        node.num_inputs = len(outputs)
    if dev.has_streams:
        node.stream = (dev, dev.current_stream())  # See Note [Streams] in executor.py
    if saved:
        pack_saved(node, saved)
    else:
        node._saved = ()
        node._saved_ver = ()
    if used.anomaly and tls.anomaly:  # See Note [Used flags] in _state.py
        _keep_trace(node)


def _keep_trace(node: Node) -> None:
    """Anomaly mode: keep the forward traceback of the op that made ``node`` (not this frame
    nor the recorder's)."""
    node.metadata["traceback_"] = traceback.format_stack()[:-2]


# Note [Fast recorders]
# ~~~~~~~~~~~~~~~~~~~~~
# The hottest ops have one output and one or two inputs, and save at most one tensor per
# input. For them, ``record_unary`` and ``record_binary`` do what ``record`` does without its
# general path: no ``inputs`` / ``saved`` tuples built by the op and unpacked here, no length
# tests, no ``pack_saved`` call unless saved-tensor hooks are active, and (binary) the
# operands' shapes and dtypes for ``fit`` stored here rather than by a ``_meta`` call.
# Measured (callgrind, one op on (16,) float64): tanh 18,737 -> 16,055 instructions, mul
# 21,996 -> 18,876. ``record`` stays the definition: the two must store exactly what it
# stores (tests/engine/test_record.py compares edges, saved values and versions, stream,
# operand metadata, the output's grad_fn, and the anomaly trace, plainly, under
# saved-tensor hooks and in anomaly mode).

def record_unary(node: Node, x: Tensor, out: Tensor, saved: "Tensor | None" = None) -> None:
    """``record(node, (x,), out, (saved,) if saved is not None else ())``: see Note [Fast recorders]."""
    node.sequence_nr = _next_seq()
    fn = x._grad_fn
    node.next_edges = ((fn, x._output_nr),) if fn is not None else (_edge(x),)
    out._grad_fn = node
    out._rg = True
    dev = out.device
    if dev.has_streams:
        node.stream = (dev, dev.current_stream())  # See Note [Streams] in executor.py
    if saved is None:
        node._saved = node._saved_ver = ()
    elif used.saved_hooks and tls.saved_hooks:  # See Note [Used flags] in _state.py
        pack_saved(node, (saved,))
    else:
        node._saved = (SavedOutput(saved),) if saved._grad_fn is node else (saved,)
        node._saved_ver = (saved._vc[0],)
    if used.anomaly and tls.anomaly:
        _keep_trace(node)


def record_binary(node: Node, a: Tensor, b: Tensor, out: Tensor,
                  saved_a: "Tensor | None" = None, saved_b: "Tensor | None" = None) -> None:
    """``record(node._meta(a, b), (a, b), out, (saved_a, saved_b))`` (``()`` when both are
    None): see Note [Fast recorders]. ``node`` must be an ``ops.elementwise._Binary``: it
    stores the operand shapes and dtypes in that class's slots (a Node has a ``__dict__``,
    so another node would take them silently)."""
    node.sequence_nr = _next_seq()
    fa = a._grad_fn
    fb = b._grad_fn
    node.next_edges = ((fa, a._output_nr) if fa is not None else _edge(a),
                       (fb, b._output_nr) if fb is not None else _edge(b))
    ad, bd = a._data, b._data  # the arrays: Tensor.shape/.dtype are Python properties
    node.a_shape, node.a_dtype, node.b_shape, node.b_dtype = ad.shape, ad.dtype, bd.shape, bd.dtype  # type: ignore[attr-defined]
    out._grad_fn = node
    out._rg = True
    dev = out.device
    if dev.has_streams:
        node.stream = (dev, dev.current_stream())  # See Note [Streams] in executor.py
    if saved_a is None and saved_b is None:
        node._saved = node._saved_ver = ()
    elif used.saved_hooks and tls.saved_hooks:  # See Note [Used flags] in _state.py
        pack_saved(node, (saved_a, saved_b))
    else:
        # An operand is never the op's own output, so no SavedOutput here.
        node._saved = (saved_a, saved_b)
        node._saved_ver = (None if saved_a is None else saved_a._vc[0], None if saved_b is None else saved_b._vc[0])
    if used.anomaly and tls.anomaly:
        _keep_trace(node)


# Note [Result makers]
# ~~~~~~~~~~~~~~~~~~~~
# The elementwise ops (the ones a chain of small ops is made of) go one step further than
# the fast recorders: ``unary_result`` / ``binary_result`` take the op's result *array*, make
# the output Tensor and, when grad mode is on and an input requires grad, create the node
# and record it, all in one call. ``_wrap`` + ``record_unary`` were two calls that each set
# the output's slots (``grad_fn`` and ``_rg`` twice) and read them back (``device``, the saved
# output's ``_vc``); the binary op also read each operand's dtype twice (once to promote,
# once for ``fit``) through a third call, ``_binary_out``. The saved output's SavedOutput is
# filled here without its ``__init__`` frame. Measured (callgrind, a chain alternating tanh
# and ``x * c`` on (16,) float64): 17,025 -> 15,844 instructions per op. The Tensor slot assignments
# repeat ``_wrap``'s on purpose (a call costs more than they do); the recording repeats
# ``record_unary`` / ``record_binary``, and tests/engine/test_record.py holds all of them to
# what ``record`` stores.

class _Output:
    """The type of :data:`OUTPUT`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "OUTPUT"


OUTPUT = _Output()  # ``unary_result(..., saved=OUTPUT)``: save the op's own output (by data, no cycle)


def unary_result(x: Tensor, data: Any, node_cls: type, saved: Any = None) -> Tensor:
    """The output of a one-input op: a Tensor of ``x``'s device holding ``data`` (an array,
    or the numpy scalar a ufunc returns for a 0-d result). When grad mode is on and ``x``
    requires grad, its grad_fn is a new ``node_cls()`` recorded as
    ``record(node, (x,), out, saved)`` would, ``saved`` being None, ``x`` or :data:`OUTPUT`.
    See Note [Result makers]."""
    dev = x.device
    t = _new_tensor(Tensor)
    if not data.ndim:  # a numpy scalar: a Tensor always holds an array (see _wrap)
        data = dev.xp.asarray(data)
    t._data = data
    t.device = dev
    t._grad = None
    t._vc = vc = [0]
    t._base = None
    t._output_nr = 0
    t._acc = None
    t._ext = None
    if not (x._rg and (not grad_off_threads or tls.grad_enabled)):  # See Note [Grad mode fast path]
        t._grad_fn = None
        t._rg = False
        return t
    t._grad_fn = node = node_cls()
    t._rg = True
    node.sequence_nr = _next_seq()
    fn = x._grad_fn
    node.next_edges = ((fn, x._output_nr),) if fn is not None else (_edge(x),)
    if dev.has_streams:
        node.stream = (dev, dev.current_stream())  # See Note [Streams] in executor.py
    if saved is None:
        node._saved = node._saved_ver = ()
    elif used.saved_hooks and tls.saved_hooks:  # See Note [Used flags] in _state.py
        pack_saved(node, (t if saved is OUTPUT else saved,))
    elif saved is OUTPUT:
        s = _new_tensor(SavedOutput)  # SavedOutput(t), without its __init__ frame
        s._data, s._vc, s.output_nr, s.device = data, vc, 0, dev
        node._saved = (s,)
        node._saved_ver = (0,)  # a new output's version (a constant: no tuple is built)
    else:
        node._saved = (saved,)
        node._saved_ver = (saved._vc[0],)
    if used.anomaly and tls.anomaly:
        _keep_trace(node)
    return t


def binary_result(a: Tensor, b: Tensor, data: Any, node_cls: type,
                  saved_a: "Tensor | None" = None, saved_b: "Tensor | None" = None) -> Tensor:
    """The output of a two-input elementwise op: ``data`` (computed from ``a._data`` and
    ``b._data``, same device) in torch's result dtype, as a Tensor. When grad mode is on and
    an input requires grad, its grad_fn is a new ``node_cls()`` (an ``ops.elementwise._Binary``)
    recorded as ``record_binary(node, a, b, out, saved_a, saved_b)`` would. See Note [Result makers]."""
    ad, bd = a._data, b._data
    adt, bdt = ad.dtype, bd.dtype
    if adt is not bdt and adt != bdt:  # identity first: numpy's builtin dtypes are shared instances
        data = promoted(data, a, b)
    dev = a.device
    t = _new_tensor(Tensor)
    if not data.ndim:  # a numpy scalar: a Tensor always holds an array (see _wrap)
        data = dev.xp.asarray(data)
    t._data = data
    t.device = dev
    t._grad = None
    t._vc = [0]
    t._base = None
    t._output_nr = 0
    t._acc = None
    t._ext = None
    if not ((a._rg or b._rg) and (not grad_off_threads or tls.grad_enabled)):  # See Note [Grad mode fast path]
        t._grad_fn = None
        t._rg = False
        return t
    t._grad_fn = node = node_cls()
    t._rg = True
    node.sequence_nr = _next_seq()
    fa = a._grad_fn
    fb = b._grad_fn
    node.next_edges = ((fa, a._output_nr) if fa is not None else _edge(a),
                       (fb, b._output_nr) if fb is not None else _edge(b))
    node.a_shape, node.a_dtype, node.b_shape, node.b_dtype = ad.shape, adt, bd.shape, bdt
    if dev.has_streams:
        node.stream = (dev, dev.current_stream())  # See Note [Streams] in executor.py
    if saved_a is None and saved_b is None:
        node._saved = node._saved_ver = ()
    elif used.saved_hooks and tls.saved_hooks:  # See Note [Used flags] in _state.py
        pack_saved(node, (saved_a, saved_b))
    else:
        node._saved = (saved_a, saved_b)
        node._saved_ver = (None if saved_a is None else saved_a._vc[0], None if saved_b is None else saved_b._vc[0])
    if used.anomaly and tls.anomaly:
        _keep_trace(node)
    return t
