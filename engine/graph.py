"""The backward graph: Node, its edges and hooks, saved tensors, AccumulateGrad, GraphRoot.

A Node is the backward of one forward op. It takes one gradient per forward *output*
(``num_inputs`` of them, PyTorch's naming) and returns one gradient per forward *input*,
which the executor sends along ``next_edges``: a tuple of ``(node, input_nr)`` pairs,
``(None, 0)`` where that input needs no gradient.

>>> from threadgrad import engine
>>> x = engine.ones(3, requires_grad=True)
>>> y = (x * 2).sum()
>>> y.grad_fn.name(), y.grad_fn.next_functions[0][0].name()
('SumBackward0', 'MulBackward0')
"""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ._locks import LEAF_STRIPES, LOCKS, next_leaf_stripe
from ._state import tls, used

if TYPE_CHECKING:
    from .tensor import Tensor

# Global, thread-safe sequence numbers: next() on itertools.count is atomic under the GIL.
# Later forward ops get higher numbers and run earlier in backward (see ReadyQueue).
_next_seq = itertools.count().__next__

# AccumulateGrad and GraphRoot run before anything else that is ready (PyTorch gives them
# UINT64_MAX): accumulating a leaf early frees its buffer and lets post-accumulate hooks fire.
MAX_SEQ = (1 << 40) - 1

NO_EDGE = (None, 0)

# The tensor layer's names this module calls: tensor.py imports this module, so it cannot be
# imported here; tensor.py hands them over once, through bind_tensor_layer, at the end of its
# own import. (A function-level import on the unpack path cost 0.85 us per call, measured.)
_wrap: Any = None
accumulate_into: Any = None
_grad_accumulator: Any = None
_WrappedNumber: Any = None
EngineSum: Any = None
_Tensor: Any = None


def bind_tensor_layer(*, wrap: Any, accumulate: Any, engine_sum: Any, grad_accumulator: Any,
                      wrapped_number: Any, tensor: Any) -> None:
    """Bind the tensor layer's names this module calls (engine/tensor.py calls it once, at
    import): ``_wrap`` and ``_Tensor`` for unpacking saved tensors, ``accumulate_into``,
    ``EngineSum`` and ``_grad_accumulator`` for AccumulateGrad, ``_WrappedNumber`` for saving."""
    global _wrap, accumulate_into, EngineSum, _grad_accumulator, _WrappedNumber, _Tensor
    _wrap, accumulate_into, EngineSum = wrap, accumulate, engine_sum
    _grad_accumulator, _WrappedNumber, _Tensor = grad_accumulator, wrapped_number, tensor


# Note [Hook tables]
# ~~~~~~~~~~~~~~~~~~
# Hooks may be registered and removed on any thread while backward calls on other threads run
# the same node's hooks. Every hook table (a dict) is therefore copy-on-write: it is never
# changed once published; registering or removing builds a new dict and stores it in the
# attribute that holds the table, under LOCKS.hooks, so that two registrations at once both
# land (each reads the table the other wrote). A backward reads the attribute once and
# iterates that dict: no lock, no copy, and a hook added meanwhile (even by a hook of the same
# node) runs from the next backward on. The holders that a table lives in are made once and
# never replaced (Node._hooks, Tensor._ext, a slot's HookTable), created under the same lock
# when two threads may race to make them. The tables:
#   NodeHooks.tensor_pre  {slot: HookTable}; HookTable.fns {key: fn(grad)}
#   NodeHooks.retains_grad {slot: fn(grad)}
#   NodeHooks.pre, .post  {key: fn}
#   _TensorExt.post_acc   {key: fn(tensor)} (tensor.py)
# A leaf's tensor hooks live in its own NodeHooks (its ``tensor_pre`` is {0: HookTable},
# made once with its one slot), which its AccumulateGrad shares: share_tensor_hooks.

_hook_keys = itertools.count().__next__  # atomic under the GIL, as _next_seq


class HookTable:
    """The tensor hooks of one input slot of a node: ``fns`` is a copy-on-write dict
    ``{key: fn(grad)}`` (See Note [Hook tables]); the object itself is never replaced, so a
    leaf and its AccumulateGrad can share it."""

    __slots__ = ("fns",)

    def __init__(self) -> None:
        self.fns: dict = {}


class RemovableHandle:
    """Returned by every ``register_*hook``; ``remove()`` unregisters the hook (idempotent)."""

    __slots__ = ("_holder", "_attr", "_key")

    def __init__(self, holder: Any, attr: str, key: int) -> None:
        self._holder = holder  # the object whose attribute ``attr`` is the hook's table
        self._attr = attr
        self._key = key

    def remove(self) -> None:
        with LOCKS.hooks:  # See Note [Hook tables]
            table = getattr(self._holder, self._attr)
            if self._key in table:
                table = dict(table)
                del table[self._key]
                setattr(self._holder, self._attr, table)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def _set_entry(holder: Any, attr: str, key: Any, value: Any) -> None:
    """``getattr(holder, attr)[key] = value``, copy-on-write; the caller holds LOCKS.hooks."""
    table = dict(getattr(holder, attr))
    table[key] = value
    setattr(holder, attr, table)


def _add_hook(holder: Any, attr: str, fn: Callable) -> RemovableHandle:
    """Add ``fn`` to the table ``getattr(holder, attr)``, atomically (See Note [Hook tables])."""
    if not callable(fn):
        raise TypeError(f"hook must be callable, got {type(fn).__name__}")
    key = _hook_keys()
    with LOCKS.hooks:
        _set_entry(holder, attr, key, fn)
    return RemovableHandle(holder, attr, key)


def share_tensor_hooks(acc: "Node", leaf_hooks: "NodeHooks") -> None:
    """Make a leaf's tensor hooks (kept by the leaf, ``leaf_hooks``) run on its AccumulateGrad
    ``acc``: the node's own NodeHooks shares the leaf's ``tensor_pre`` table, which the leaf
    never replaces (See Note [Hook tables]). The node keeps its own pre- and post-hooks (a
    tensor hook registered later must not drop them), and they die with the node, as in
    torch, while the tensor hooks outlive it. The caller holds LOCKS.acc (Note [Leaf hooks])."""
    hooks = acc._hooks_obj()
    with LOCKS.hooks:
        hooks.tensor_pre = leaf_hooks.tensor_pre


def tensor_hook_table(hooks: "NodeHooks", slot: int) -> HookTable:
    """The HookTable of ``slot`` in ``hooks.tensor_pre``, made (once) if it has none."""
    table = hooks.tensor_pre.get(slot)
    if table is None:
        with LOCKS.hooks:
            table = hooks.tensor_pre.get(slot)
            if table is None:
                table = HookTable()
                _set_entry(hooks, "tensor_pre", slot, table)
    return table


def set_retains_grad(hooks: "NodeHooks", slot: int, fn: Callable | None) -> Callable | None:
    """Install ``fn`` as the retain_grad hook of ``slot`` (None: remove it); return the one
    it replaces. Copy-on-write under LOCKS.hooks (See Note [Hook tables])."""
    with LOCKS.hooks:
        old = hooks.retains_grad.get(slot)
        if fn is not None:
            _set_entry(hooks, "retains_grad", slot, fn)
        elif old is not None:
            table = dict(hooks.retains_grad)
            del table[slot]
            hooks.retains_grad = table
    return old


class NodeHooks:
    """All hooks of one node. A node without hooks has ``_hooks = None``, so the executor
    pays one attribute test per node when no hook exists anywhere. Every table is
    copy-on-write: See Note [Hook tables]."""

    __slots__ = ("tensor_pre", "retains_grad", "pre", "post")

    def __init__(self) -> None:
        self.tensor_pre: dict[int, HookTable] = {}  # input slot -> its tensor hooks
        self.retains_grad: dict[int, Callable] = {}  # input slot -> fn(grad), runs after tensor_pre
        self.pre: dict = {}  # {key: fn(grad_outputs) -> grad_outputs|None}
        self.post: dict = {}  # {key: fn(grad_inputs, grad_outputs) -> grad_inputs|None}

    def run_tensor_pre(self, node: "Node", grads: list) -> list:
        """Tensor hooks, then retains_grad hooks (PyTorch's order; node pre-hooks come after).
        Each table is read once and never changes (See Note [Hook tables]): no copy."""
        tensor_pre = self.tensor_pre
        if tensor_pre:
            grads = list(grads)
            for slot, table in tensor_pre.items():
                for fn in table.fns.values():
                    g = grads[slot]
                    new = fn(g)  # with None too, where no gradient arrived, as torch calls them
                    if new is not None:
                        if g is None:
                            raise RuntimeError(f"hook '{_hook_name(fn)}' on {node.name()}: can't replace a None "
                                               f"gradient with a non-None value (got {type(new).__name__})")
                        grads[slot] = _check_hook_result(fn, new, g, node)
        for slot, fn in self.retains_grad.items():
            if grads[slot] is not None:
                fn(grads[slot])
        return grads

    def run_pre(self, node: "Node", grads: list) -> list:
        """Node pre-hooks: ``fn(grad_outputs)``, a non-None return replaces them."""
        for fn in self.pre.values():  # (a table never changes: See Note [Hook tables])
            new = fn(tuple(grads))
            if new is not None:
                grads = _check_hook_results(fn, new, grads, node)
        return grads

    def run_post(self, node: "Node", grad_inputs: Sequence, grad_outputs: Sequence) -> Sequence:
        for fn in self.post.values():  # (a table never changes: See Note [Hook tables])
            new = fn(tuple(grad_inputs), tuple(grad_outputs))
            if new is not None:
                grad_inputs = _check_hook_results(fn, new, grad_inputs, node)
        return grad_inputs


def _hook_name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _check_hook_result(fn: Callable, new: Any, old: "Tensor", node: "Node") -> "Tensor":
    from .tensor import Tensor

    if not isinstance(new, Tensor):
        raise TypeError(f"hook '{_hook_name(fn)}' on {node.name()} returned {type(new).__name__}; expected a Tensor or None")
    if new.shape != old.shape:
        raise RuntimeError(
            f"hook '{_hook_name(fn)}' on {node.name()} returned a gradient of shape {tuple(new.shape)}, "
            f"but the gradient it was given has shape {tuple(old.shape)}"
        )
    if new.dtype != old.dtype or new.device is not old.device:
        raise RuntimeError(
            f"hook '{_hook_name(fn)}' on {node.name()} has changed the type of value: it was given a gradient "
            f"of dtype {old.dtype} on {old.device} and returned one of dtype {new.dtype} on {new.device} (torch "
            "refuses this too; convert inside the computation instead)"
        )
    return new


def _check_hook_results(fn: Callable, new: Any, old: Sequence, node: "Node") -> list:
    if not isinstance(new, (tuple, list)) or len(new) != len(old):
        raise RuntimeError(
            f"hook '{_hook_name(fn)}' on {node.name()} must return None or a sequence of {len(old)} gradients, got {new!r:.80}"
        )
    for n, o in zip(new, old):
        if o is None and n is not None:
            raise RuntimeError(f"hook '{_hook_name(fn)}' on {node.name()}: can't replace a None gradient with a "
                               f"non-None value (got {type(n).__name__})")
    return [n if n is None else _check_hook_result(fn, n, o, node) for n, o in zip(new, old)]


# --- saved tensors ---------------------------------------------------------------------

class SavedOutput:
    """A node's own output, saved by data only: holding the output Tensor would make the
    cycle output -> grad_fn -> saved output. Unpacking rebuilds a Tensor whose grad_fn is
    the node (alive, since it is the node doing the unpacking)."""

    __slots__ = ("_data", "_vc", "output_nr", "device")
    _ext = None  # read by the unpack fast paths as a saved Tensor's is: Note [Detached saved tensors]

    def __init__(self, t: "Tensor") -> None:
        self._data = t._data
        self._vc = t._vc
        self.output_nr = t._output_nr
        self.device = t.device

    def unpack(self, node: "Node") -> "Tensor":
        t = _wrap(self._data, self.device)
        t._grad_fn = node
        t._rg = True
        t._vc = self._vc
        t._output_nr = self.output_nr
        return t


class SavedHooked:
    """A tensor saved while ``saved_tensors_hooks`` were active: only what ``pack`` returned is
    kept, plus the original tensor's place in the graph. The unpacked tensor stands for the
    original there (torch's SavedVariable): it takes the unpack hook's data but the original's
    grad_fn, output number and requires_grad (a leaf's AccumulateGrad), so a second derivative
    flows to the original's history, not through the hooks' own arithmetic."""

    __slots__ = ("packed", "unpack_fn", "_grad_fn", "output_nr", "requires_grad", "acc", "is_output")

    def __init__(self, packed: Any, unpack_fn: Callable, t: "Tensor", node: "Node | None") -> None:
        self.packed = packed
        self.unpack_fn = unpack_fn
        # The node's own output: keep no reference to the node (no cycle); unpack gets it.
        # (node None: a tensor kept for something else than a node, a checkpoint's input.)
        self.is_output = node is not None and t._grad_fn is node
        self._grad_fn = None if self.is_output else t._grad_fn
        self.output_nr = t._output_nr
        self.requires_grad = t._rg
        # A leaf that requires grad: its AccumulateGrad, weakly, as the leaf itself holds it.
        self.acc = None
        if t._rg and t._grad_fn is None:
            _grad_accumulator(t)  # made now if need be: t._acc is then its weak reference
            self.acc = t._acc

    def unpack(self, node: "Node") -> "Tensor":
        u = self.unpack_fn(self.packed)
        if not isinstance(u, _Tensor):
            raise TypeError(f"saved-tensor unpack hook returned {type(u).__name__} in {node.name()}; expected a Tensor")
        if not self.requires_grad:
            return u  # no place in the graph to take: the unpacked tensor as it is (torch's identity)
        t = _wrap(u._data, u.device)
        t._grad_fn = node if self.is_output else self._grad_fn
        t._output_nr = self.output_nr
        t._rg = self.requires_grad
        t._acc = self.acc
        return t


PACK_MODIFIED_MESSAGE = (
    "A saved tensor pack hook is modifying its input in place. Tensors provided as input to pack hook cannot "
    "be modified by in-place operations as this can lead to unexpected side-effects. Please open an issue if "
    "you need to perform in-place operations on the input to a pack hook."
)


FREED_MESSAGE = (
    "Trying to backward through the graph a second time (or directly access saved tensors after they "
    "have already been freed). Saved intermediate values of the graph are freed when you call .backward() "
    "or autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time "
    "or if you need to access saved tensors after calling backward."
)


# Note [Detached saved tensors]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A node saves an input as the tensor itself (torch's saved original), so a later in-place
# ``detach_()`` takes away the grad_fn the unpacked tensor would carry into a double backward.
# torch refuses to unpack such a tensor ("Trying to use a saved tensor that has been detached
# in-place", SavedVariable::unpack), whether or not the backward differentiates again, and so
# does threadgrad: ``detach_()`` of a tensor with a grad_fn stamps it with the next sequence
# number (``_ext.detached_at``), and a node made before that stamp that unpacks it raises. A
# node's own output is saved as data (SavedOutput) and unpacks with the node as its grad_fn,
# so it is unaffected, as in torch; a node made after the detach_() saved a leaf, and is too.
# The unpack fast paths test only ``_ext is None`` (a SavedOutput's is a class attribute);
# anything else takes the general path, which checks the stamp.
DETACHED_MESSAGE = (
    "Trying to use a saved tensor that has been detached in-place, i.e. with .detach_().This is not supported, "
    "please use out-of-place `.detach()` instead"
)


def _modified_error(node: "Node", t: "Tensor", expected: int) -> RuntimeError:
    origin = "a leaf tensor" if t._grad_fn is None else f"output {t._output_nr} of {t._grad_fn.name()}"
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace operation: "
        f"[{t.dtype} tensor of shape {list(t.shape)}], which is {origin}, is at version {t._vc[0]}; "
        f"expected version {expected} instead (saved by {node.name()}). Hint: find the in-place op that "
        "changed it after it was saved, or replace it with its out-of-place form."
    )


def pack_saved(node: "Node", tensors: Sequence["Tensor | None"]) -> None:
    """The one choke point every saved tensor passes through (backward sees only what forward saved).

    Records each tensor's version so a later in-place change is caught at unpack; runs the
    innermost ``saved_tensors_hooks`` pack function when one is active on this thread.
    """
    hooks = tls.saved_hooks if used.saved_hooks else ()  # See Note [Used flags] in _state.py
    if not hooks:
        # Fast path: no hooks active (the usual case; -0.3 us per op, measured).
        if len(tensors) == 1:
            t = tensors[0]
            if t is None:
                node._saved, node._saved_ver = (None,), (None,)
            else:
                node._saved = (SavedOutput(t),) if t._grad_fn is node else (t,)
                node._saved_ver = (t._vc[0],)
            return
        if len(tensors) == 2:  # the binary ops (no comprehension: it is a function call in 3.11)
            a, b = tensors
            node._saved = (a if a is None or a._grad_fn is not node else SavedOutput(a),
                           b if b is None or b._grad_fn is not node else SavedOutput(b))
            node._saved_ver = (None if a is None else a._vc[0], None if b is None else b._vc[0])
            return
        node._saved = tuple([None if t is None else SavedOutput(t) if t._grad_fn is node else t for t in tensors])
        node._saved_ver = tuple([None if t is None else t._vc[0] for t in tensors])
        return
    saved = []
    versions = []
    for t in tensors:
        if t is None:
            saved.append(None)
            versions.append(None)
        elif type(t) is _WrappedNumber:  # never packed, as torch's wrapped numbers
            saved.append(t)
            versions.append(t._vc[0])
        elif hooks and not getattr(hooks[-1][0], "identity_pack", False):
            pack, unpack = hooks[-1]
            before = t._vc[0]
            packed = pack(t)
            if t._vc[0] != before:
                raise RuntimeError(PACK_MODIFIED_MESSAGE)
            saved.append(SavedHooked(packed, unpack, t, node))
            versions.append(None)
        else:
            if hooks:
                # An observer that keeps the tensor as it is (checkpoint's re-run): saving
                # normally keeps the cycle-free SavedOutput path for a node's own output.
                hooks[-1][0](t)
            if t._grad_fn is node:
                saved.append(SavedOutput(t))
            else:
                saved.append(t)
            versions.append(t._vc[0])
    node._saved = tuple(saved)
    node._saved_ver = tuple(versions)


class Node:
    """The backward of one forward op (PyTorch's ``torch.autograd.graph.Node``).

    Subclasses implement ``backward(self, *grad_outputs) -> tuple`` (one entry per
    ``next_edges``), written with differentiable ops so that ``create_graph=True`` works.
    Built-in op nodes are created by ``record`` (engine.function), which fills the slots.
    """

    # Hot attributes are slots; rare ones (metadata, hooks, anomaly trace) live in the
    # instance __dict__, created only when first written, with the class defaults below.
    __slots__ = ("next_edges", "sequence_nr", "_saved", "_saved_ver", "__dict__", "__weakref__")

    num_inputs = 1  # gradients this node takes = outputs of its forward op
    # When no gradient arrives at all, the executor skips a node's backward (its outputs are
    # undefined too, as torch's built-in formulas give) unless this is True: a leaf's
    # AccumulateGrad (its hooks run) and custom Functions (torch calls their backward, with
    # zeros, or with None after set_materialize_grads(False)).
    runs_without_gradients = False
    # Built-in formulas give no gradient for an edge a grad()/backward(inputs=) call does not
    # need, as torch's should_compute_output does (the executor masks them for post-hooks);
    # a custom Function returns what its backward returns (False there).
    computes_only_needed = True
    # True for a node whose outputs are several views of one input (split): an in-place op on
    # one of them is refused under grad mode, as torch refuses it (ops/inplace.py).
    returns_multiple_views = False
    # Outputs of a custom Function that are views of its inputs (set per node by
    # engine/function.py): refused in place under grad mode, as torch (ops/inplace.py).
    custom_view_outputs: tuple = ()
    # The same for a custom Function with several differentiable outputs: refused with the
    # multiple-views message, as torch's MULTI_OUTPUT_NODE views.
    multi_view_outputs: tuple = ()
    apply_is_backward = True  # apply() is Node.apply, so the executor may call backward() itself
    # It runs the user's code (a custom Function's backward; AccumulateGrad: post-accumulate-grad
    # hooks; hooks in _hooks are tested apart), which may wait for other threads:
    # a parallel task's thread first shares the work it holds (Note [Private work] in executor.py).
    runs_user_code = False
    _hooks: NodeHooks | None = None
    stream: tuple | None = None  # (device, stream) its forward ran on; see Note [Streams]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.apply_is_backward = cls.apply is Node.apply

    def name(self) -> str:
        """PyTorch-style name, e.g. ``"MulBackward0"``."""
        return type(self).__name__

    # -- graph introspection ----------------------------------------------------------
    @property
    def next_functions(self) -> tuple:
        """Tuple of ``(node, input_nr)``, ``(None, 0)`` for inputs that need no gradient."""
        return tuple(self.next_edges)

    @property
    def metadata(self) -> dict:
        """A free-form dict for users and tools (anomaly mode keeps the forward trace here)."""
        d = self.__dict__.get("_metadata")
        if d is None:
            d = self.__dict__["_metadata"] = {}
        return d

    @property
    def needs_input_grad(self) -> tuple:
        """One bool per forward input: does a gradient for it go anywhere?"""
        return tuple(e[0] is not None for e in self.next_edges)

    # -- hooks ------------------------------------------------------------------------
    def _hooks_obj(self) -> NodeHooks:
        """This node's NodeHooks, made once (two threads registering at once get the same one)."""
        h = self._hooks
        if h is None:
            with LOCKS.hooks:  # See Note [Hook tables]
                h = self._hooks
                if h is None:
                    h = self._hooks = NodeHooks()
        return h

    def register_hook(self, fn: Callable) -> RemovableHandle:
        """``fn(grad_inputs, grad_outputs)`` runs after the node; a non-None return replaces grad_inputs."""
        return _add_hook(self._hooks_obj(), "post", fn)

    def register_prehook(self, fn: Callable) -> RemovableHandle:
        """``fn(grad_outputs)`` runs before the node; a non-None return replaces grad_outputs."""
        return _add_hook(self._hooks_obj(), "pre", fn)

    # -- saved tensors ----------------------------------------------------------------
    def saved_tensors(self) -> tuple:
        """Unpack what forward saved, checking versions. Raises once the graph was freed."""
        saved = self._saved
        if saved is None:
            raise RuntimeError(FREED_MESSAGE + f" (node: {self.name()})")
        if len(saved) == 1:
            # Fast paths for the most common cases, one plain saved tensor or the node's own
            # output, unchanged since it was saved (-0.15 us, measured).
            e = saved[0]
            te = type(e)
            if te is _Tensor or te is _WrappedNumber:
                if e._vc[0] == self._saved_ver[0] and e._ext is None:
                    return (e,)
            elif te is SavedOutput and e._vc[0] == self._saved_ver[0]:
                t = _wrap(e._data, e.device)
                t._grad_fn = self
                t._rg = True
                t._vc = e._vc
                t._output_nr = e.output_nr
                return (t,)
        out = []
        for e, v in zip(saved, self._saved_ver):
            if e is None:
                out.append(None)
                continue
            if type(e) is SavedOutput:
                if e._vc[0] != v:
                    raise _modified_error(self, e.unpack(self), v)
                out.append(e.unpack(self))
                continue
            if type(e) is SavedHooked:
                out.append(e.unpack(self))
                continue
            if e._vc[0] != v:
                raise _modified_error(self, e, v)
            ext = e._ext
            if ext is not None and ext.detached_at > self.sequence_nr:
                raise RuntimeError(DETACHED_MESSAGE)  # See Note [Detached saved tensors]
            out.append(e)
        return tuple(out)

    def saved_arrays(self) -> tuple:
        """What forward saved, as raw arrays (None stays None), with the same version checks
        as :meth:`saved_tensors`: for first-order backward formulas, which compute on arrays
        and build no Tensor for a saved value (see Note [First-order formulas] in ops/_core.py).

        A saved Tensor and a SavedOutput both keep ``_data`` and ``_vc``, so one test serves both."""
        saved = self._saved
        if saved is not None:  # the fast paths, no loop (measured 0.40 -> 0.20 us for one)
            vers = self._saved_ver
            n = len(saved)
            if n == 1:
                e = saved[0]
                if e is not None and type(e) is not SavedHooked and e._vc[0] == vers[0] and e._ext is None:
                    return (e._data,)
            elif n == 2:
                a, b = saved
                if ((a is None or (type(a) is not SavedHooked and a._vc[0] == vers[0] and a._ext is None))
                        and (b is None or (type(b) is not SavedHooked and b._vc[0] == vers[1] and b._ext is None))):
                    return (None if a is None else a._data, None if b is None else b._data)
            else:
                for e, v in zip(saved, vers):
                    if e is not None and (type(e) is SavedHooked or e._vc[0] != v or e._ext is not None):
                        break
                else:
                    return tuple([None if e is None else e._data for e in saved])
        # Freed, modified or hooked: the general path raises or unpacks through the hooks.
        return tuple([None if t is None else t._data for t in self.saved_tensors()])

    def saved_summary(self) -> tuple | None:
        """What forward saved, described without unpacking it (no hook runs, no version
        check): one ``(shape, dtype, device)`` per saved tensor, ``"packed by a hook"`` for a
        value saved under ``saved_tensors_hooks``, None for an empty slot; None in place of the
        tuple once backward freed them. For graph drawings (``threadgrad.viz.make_dot``).

        >>> from threadgrad import engine
        >>> x = engine.ones(2, 3, requires_grad=True)
        >>> (x * 2).grad_fn.saved_summary()
        (None, ((), dtype('float32'), device(type='cpu')))
        """
        saved = self._saved
        if saved is None:
            return None
        return tuple([None if e is None else "packed by a hook" if type(e) is SavedHooked
                      else (e._data.shape, e._data.dtype, e.device) for e in saved])

    def release_variables(self) -> None:
        """Drop saved tensors (after a backward without retain_graph)."""
        if self._saved:
            self._saved = None

    # -- execution --------------------------------------------------------------------
    def apply(self, grads: list) -> Sequence:
        """Run the backward on one gradient per forward output; return one per input edge."""
        return self.backward(*grads)

    def backward(self, *grads: Any) -> Sequence:  # pragma: no cover - abstract
        raise NotImplementedError(f"{self.name()} does not implement backward")

    def __repr__(self) -> str:
        return f"<{self.name()} object at {id(self):#x}>"


class AccumulateGrad(Node):
    """Sink for a leaf that requires grad: adds the incoming gradient into ``variable.grad``.

    Kept weakly by the leaf and strongly by the edges of the nodes that use it (as in
    PyTorch), so it lives exactly as long as some graph can reach it. Its lock (a stripe of
    LOCKS.leaf: Note [Locks across fork]) makes concurrent backward calls that reach one
    leaf safe.
    """

    __slots__ = ("variable", "_stripe")
    runs_without_gradients = True

    def __init__(self, variable: "Tensor") -> None:
        self.variable = variable
        self.next_edges = ()
        self.sequence_nr = MAX_SEQ
        self._saved = ()
        self._saved_ver = ()
        self._stripe = next_leaf_stripe() & (LEAF_STRIPES - 1)  # its lock: See Note [Locks across fork]
        ext = variable._ext
        if ext is not None and ext.hooks is not None:
            share_tensor_hooks(self, ext.hooks)

    def apply(self, grads: list) -> tuple:
        """Accumulate into the leaf's .grad, then run its post-accumulate-grad hooks (also when
        no gradient arrived, as torch does; the executor calls this node with None then)."""
        g = grads[0]
        var = self.variable
        if g is not None:
            owned = type(g) is EngineSum and g.owner is self  # See Note [Gradient ownership] (tensor.py)
            if owned:
                g.owner = None
            with LOCKS.leaf[self._stripe]:
                first = self._hooks is not None and var._grad is None  # (only hooks need to know)
                accumulate_into(var, g, owned)
                if first and not tls.grad_enabled:
                    # torch steals this first gradient as .grad, so its node post-hooks see .grad
                    # itself as grad_outputs[0]: give them the same (the executor passes this list).
                    grads[0] = var._grad
        ext = var._ext
        if ext is not None:
            for fn in ext.post_acc.values():  # (never changes: See Note [Hook tables])
                out = fn(var)
                if out is not None:  # torch's words and types
                    if not isinstance(out, _Tensor):
                        raise TypeError(f"expected Variable, but hook returned '{type(out).__name__}'")
                    raise RuntimeError("Tensor post accumulate grad hooks should return None.")
        return ()

    def release_variables(self) -> None:
        pass

    @property
    def runs_user_code(self) -> bool:  # type: ignore[override]
        """Its post-accumulate-grad hooks are the user's code (see Node.runs_user_code)."""
        ext = self.variable._ext
        return ext is not None and bool(ext.post_acc)


class GraphRoot(Node):
    """The node a backward call starts from: it emits the root gradients along its edges."""

    __slots__ = ("grads",)

    def __init__(self, edges: tuple, grads: list) -> None:
        self.next_edges = edges
        self.grads = grads
        self.sequence_nr = MAX_SEQ
        self._saved = ()
        self._saved_ver = ()

    def apply(self, grads: list) -> list:
        return self.grads
