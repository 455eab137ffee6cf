"""Activation checkpointing: ``checkpoint`` and ``checkpoint_sequential``.

Forward runs ``fn`` without keeping its intermediate activations; backward runs ``fn``
again to rebuild them. Two variants, as in PyTorch:

* ``use_reentrant=True``: a custom Function whose backward re-runs ``fn`` under grad mode
  and calls ``engine.backward`` on the result, *inside* the running backward (a reentrant
  backward; see Note [Reentrant backward] in executor.py). It cannot serve ``engine.grad()``
  or ``backward(inputs=...)``.
* ``use_reentrant=False``: ``fn`` runs under saved-tensor hooks that keep only a slot
  number per saved tensor; the first unpack in backward re-runs ``fn`` and fills the slots.
  It supports ``engine.grad``, ``inputs=`` and keyword arguments.

With ``preserve_rng_state`` the re-run replays exactly the random numbers the forward drew
(dropout's mask), even while other threads draw from the generator; see Note [Checkpointed
random draws] in creation.py. See Note [Checkpoint re-run contract] for what the
non-reentrant re-run checks and how it links to the inputs.

>>> from threadgrad import engine, ops
>>> x = engine.randn(4, 8, requires_grad=True)
>>> w = engine.randn(8, 8, requires_grad=True)
>>> y = engine.checkpoint(lambda a: ops.tanh(a @ w), x, use_reentrant=False)
>>> y.sum().backward(); x.grad.shape, w.grad.shape
((4, 8), (8, 8))
"""
from __future__ import annotations

import threading
import warnings
import weakref
from typing import Any, Callable, Sequence

from ._locks import remade_at_fork
from ._state import tls, used
from .autograd import backward
from .creation import DrawRecord, record_draws, replay_draws
from .function import Function
from .grad_mode import enable_grad
from .graph import SavedHooked, _modified_error
from .saved_hooks import saved_tensors_hooks
from .tensor import Tensor

# torch's words, name included: threadgrad's checkpoint is torch.utils.checkpoint's API, and a
# program that matches the message (torch's own test does) finds it
_REENTRANT_GRAD_MESSAGE = (
    "When use_reentrant=True, torch.utils.checkpoint is incompatible with .grad() or passing an `inputs` "
    "parameter to .backward(). To resolve this error, you can either set use_reentrant=False, or call "
    ".backward() without passing the `inputs` argument."
)


class CheckpointError(RuntimeError):
    """The re-run of a checkpointed function did not match its forward (PyTorch's
    ``torch.utils.checkpoint.CheckpointError``)."""


def _fn_name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


class _InputSlot:
    """Names a checkpoint input in ``_modified_error`` (which only asks for ``name()``)."""

    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label

    def name(self) -> str:
        return self.label


def _detach_like(args: Sequence[Any]) -> list:
    """The arguments, each tensor that requires grad as a detached alias that still requires
    grad; tensors that do not are passed as they are (so a re-run saves the very object,
    as torch's does)."""
    out = []
    for a in args:
        if isinstance(a, Tensor) and a._rg:
            d = a.detach()
            d._rg = a._rg
            out.append(d)
        else:
            out.append(a)
    return out


class _CheckpointFunction(Function):
    """The reentrant variant: see the module docstring."""

    @staticmethod
    def forward(ctx: Any, run_function: Callable, preserve_rng_state: bool, *args: Any) -> Any:
        ctx.run_function = run_function
        ctx.tensor_idx = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.others = [None if isinstance(a, Tensor) else a for a in args]
        ctx.save_for_backward(*[a for a in args if isinstance(a, Tensor)])
        ctx.draws = None
        if not preserve_rng_state:
            return run_function(*args)  # grad mode is off inside forward: nothing is kept
        with record_draws() as recorder:
            out = run_function(*args)
        ctx.draws = recorder.record()
        return out

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple:
        gt = tls.current_task
        if gt is not None and gt.exec_info is not None:
            raise RuntimeError(_REENTRANT_GRAD_MESSAGE)
        args = list(ctx.others)
        for i, t in zip(ctx.tensor_idx, _detach_like(ctx.saved_tensors)):
            args[i] = t
        outputs = _rerun(ctx.run_function, args, {}, ctx.draws)
        if isinstance(outputs, Tensor):
            outputs = (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grads) if isinstance(o, Tensor) and o._rg and g is not None]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is not necessary")
        backward([o for o, _ in pairs], [g for _, g in pairs])  # See Note [Reentrant backward]
        return (None, None) + tuple(args[i].grad if isinstance(args[i], Tensor) else None for i in range(len(args)))


def _rerun(fn: Callable, args: list, kwargs: dict, draws: DrawRecord | None) -> Any:
    """Run ``fn`` again under grad mode, replaying the forward's random draws if recorded."""
    if draws is None:
        with enable_grad():
            return fn(*args, **kwargs)
    with replay_draws(draws), enable_grad():  # See Note [Checkpointed random draws] in creation.py
        return fn(*args, **kwargs)


# Note [Checkpoint re-run contract]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The non-reentrant checkpoint keeps no activations, only ``fn`` and its inputs, and trusts
# the re-run in backward to rebuild exactly what forward saved. Three things guard that:
#
# * Inputs unchanged. The tensor inputs' versions are recorded when forward returns and
#   checked before every re-run: re-running from inputs modified in place would silently
#   give the gradient of other values. The error is the saved-tensor one
#   (graph._modified_error), as PyTorch raises for an input its saved variables hold.
# * Same saves, early stop. Slot i of forward is slot i of the re-run. As torch's early stop,
#   the re-run stops (a private exception out of the pack observer) as soon as it has saved
#   as many tensors as forward did: what ``fn`` does after its last save is not re-run, so an
#   in-place op there cannot change a rebuilt activation. A re-run that saves fewer tensors,
#   or a tensor of another shape, dtype or device in some slot, means ``fn`` is not
#   deterministic: CheckpointError in torch's words instead of handing a wrong tensor (or
#   none) to a node. Python numbers an op wraps (WrappedNumber) are never counted, as torch
#   never packs them.
# * Linked under create_graph. When backward records a graph (grad mode is on while it
#   unpacks: the executor sets it to create_graph), ``fn`` re-runs on the real inputs, so
#   the recomputed activations handed to the nodes depend on those inputs and a second
#   derivative reaches them. A first-order backward re-runs on detached copies: nothing
#   will differentiate that graph, so it need not reach into the caller's.
# The reentrant variant gets the first check from save_for_backward; it supports first-order
# gradients only.


def _is_checkpoint_hook(pack: Any) -> bool:
    """A pack hook of an enclosing non-reentrant checkpoint (its forward's slot numbering, or
    its re-run's observer): a nested checkpoint keeps its inputs as they are under those."""
    return getattr(pack, "identity_pack", False) or isinstance(getattr(pack, "__self__", None), _Recompute)


class _InputRecord:
    """What the version check of a checkpoint input keeps: its counter and what
    _modified_error names (no reference to the tensor's data)."""

    __slots__ = ("_vc", "dtype", "shape", "_grad_fn", "_output_nr")

    def __init__(self, t: Tensor) -> None:
        self._vc, self.dtype, self.shape = t._vc, t.dtype, t.shape
        self._grad_fn, self._output_nr = t._grad_fn, t._output_nr


class _StopRecompute(BaseException):
    """Ends a re-run once it has rebuilt every saved tensor (Note [Checkpoint re-run contract]).
    A BaseException, so that an ``except Exception`` inside the checkpointed function cannot
    swallow it and let the re-run go on."""


def _metadata(t: Tensor) -> tuple:
    return (tuple(t.shape), t.dtype, t.device)


def _describe(meta: tuple) -> str:
    shape, dtype, device = meta
    return f"{{'shape': {shape}, 'dtype': {dtype}, 'device': {device}}}"


class _Recompute:
    """State of one non-reentrant checkpoint: a re-run fills a storage slot by slot.
    See Note [Checkpoint re-run contract]."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.draws: DrawRecord | None = None  # set by checkpoint() after forward
        # GraphTask -> the re-run's tensors not yet handed out. As torch's (keyed by graph task
        # id): a backward call recomputes once, and what it leaves unused dies with it, so
        # another call re-runs fn instead of getting activations computed for an earlier one.
        self.stores: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.count = 0
        self.meta: list = []  # (shape, dtype, device) of each slot, as forward saved it
        self.versions: list = []
        self.unpacked: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # GraphTask -> slots handed out
        self.lock = threading.Lock()
        remade_at_fork(self)  # See Note [Locks across fork] in _locks.py

    def _remake_locks(self) -> None:
        self.lock = threading.Lock()

    def record_versions(self) -> None:
        """Remember each tensor input's version as forward leaves it (its counter and what the
        error names, not the tensor: outer saved-tensor hooks may have it packed away)."""
        named = [(f"input {i}", a) for i, a in enumerate(self.args)]
        named += [(f"keyword argument {k!r}", a) for k, a in self.kwargs.items()]
        self.versions = [(label, _InputRecord(t), t._vc[0]) for label, t in named if isinstance(t, Tensor)]

    def _check_versions(self) -> None:
        for label, rec, v in self.versions:
            if rec._vc[0] != v:
                raise _modified_error(_InputSlot(f"checkpoint of {_fn_name(self.fn)} as its {label}"), rec, v)

    def pack_inputs(self, hooks: tuple) -> None:
        """Keep the tensor inputs through the saved-tensor hooks active around the checkpoint, as
        torch saves its checkpoint's inputs (save_on_cpu around it offloads them): each becomes a
        SavedHooked, unpacked for each re-run, standing for the input in the graph."""
        pack, unpack = hooks
        self.args = tuple(SavedHooked(pack(a), unpack, a, None) if isinstance(a, Tensor) else a for a in self.args)
        self.kwargs = {k: SavedHooked(pack(a), unpack, a, None) if isinstance(a, Tensor) else a
                       for k, a in self.kwargs.items()}

    def _inputs(self) -> tuple:
        """The inputs for a re-run, unpacked where outer hooks packed them."""
        slot = _InputSlot(f"checkpoint of {_fn_name(self.fn)}")
        args = [a.unpack(slot) if type(a) is SavedHooked else a for a in self.args]
        kwargs = {k: a.unpack(slot) if type(a) is SavedHooked else a for k, a in self.kwargs.items()}
        return args, kwargs

    def pack(self, t: Tensor) -> int:
        idx = self.count
        self.count += 1
        self.meta.append(_metadata(t))
        return idx

    def unpack(self, idx: int) -> Tensor:
        # Each recomputed tensor is handed out once and dropped, so a segment's activations
        # die as its backward consumes them. A second unpack in another backward call
        # (retain_graph) recomputes again; in the same call it is refused, as torch does.
        with self.lock:
            gt = tls.current_task
            if gt is not None:
                done = self.unpacked.get(gt)
                if done is None:
                    done = self.unpacked[gt] = set()
                if idx in done:
                    raise CheckpointError(
                        "threadgrad checkpoint: Unpack is being triggered for a tensor that was already unpacked "
                        "once. If you are calling ctx.saved_tensors in backward, make sure to do so only once. "
                        "Otherwise please open an issue with details on your use case."
                    )
                done.add(idx)
            store = self.stores.get(gt) if gt is not None else None
            if store is None or idx not in store:
                store = self._recompute()  # outside a backward call: each access re-runs, as torch
                if gt is not None:
                    self.stores[gt] = store
            t = store.pop(idx)
            if gt is not None and not store:
                del self.stores[gt]
            return t

    def _recompute(self) -> dict:
        self._check_versions()
        storage: dict[int, Tensor] = {}
        counter = iter(range(1 << 62))

        def pack(t: Tensor) -> Tensor:
            storage[next(counter)] = t
            if len(storage) == self.count:
                raise _StopRecompute  # early stop: every saved tensor is rebuilt
            return t

        # The re-run's own nodes save normally (needed for double backward); see pack_saved.
        pack.identity_pack = True  # type: ignore[attr-defined]

        args, kwargs = self._inputs()
        if not tls.grad_enabled:
            args = _detach_like(args)
        # The re-run's own saves are captured (not hooked by outer hooks) into storage.
        prev = tls.saved_hooks
        tls.saved_hooks = ()
        try:
            with saved_tensors_hooks(pack, lambda t: t):
                _rerun(self.fn, args, kwargs, self.draws)
        except _StopRecompute:
            pass
        finally:
            tls.saved_hooks = prev
        if len(storage) != self.count:
            raise CheckpointError(
                "threadgrad checkpoint: A different number of tensors was saved during the original forward and "
                f"recomputation.\nNumber of tensors saved during forward: {self.count}\nNumber of tensors saved "
                f"during recomputation: {len(storage)}.\n(checkpoint of {_fn_name(self.fn)}: the checkpointed "
                "function must be deterministic, running the same ops with the same inputs requiring grad every "
                "time it is called.)"
            )
        wrong = [i for i in range(self.count) if _metadata(storage[i]) != self.meta[i]]
        if wrong:
            raise CheckpointError(
                "threadgrad checkpoint: Recomputed values for the following tensors have different metadata than "
                "during the forward pass.\n" + "".join(
                    f"tensor at position {i}:\nsaved metadata: {_describe(self.meta[i])}\n"
                    f"recomputed metadata: {_describe(_metadata(storage[i]))}\n" for i in wrong)
                + f"(checkpoint of {_fn_name(self.fn)})"
            )
        return storage


_USE_REENTRANT_WARNING = (
    "{}: the use_reentrant parameter should be passed explicitly. use_reentrant=False is recommended, but "
    "if you need to preserve the current default behavior, you can pass use_reentrant=True. Refer to "
    "docs/checkpointing.md for the differences between the two variants."
)


def checkpoint(function: Callable, *args: Any, use_reentrant: bool | None = None, preserve_rng_state: bool = True,
               **kwargs: Any) -> Any:
    """Run ``function(*args, **kwargs)`` without storing its activations; recompute them in backward.

    Gradients equal those of running ``function`` directly, including through dropout
    (``preserve_rng_state``). See the module docstring for the two variants. Without
    ``use_reentrant``, warns (UserWarning, as torch 2.13) and uses the reentrant variant.
    Backward raises RuntimeError if a tensor argument was modified in place after forward, and
    (non-reentrant) CheckpointError if the re-run saves a different number of tensors; see
    Note [Checkpoint re-run contract].
    """
    if use_reentrant is None:
        warnings.warn(_USE_REENTRANT_WARNING.format("threadgrad checkpoint"), UserWarning, stacklevel=2)
        use_reentrant = True
    if use_reentrant:
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        if tls.grad_enabled and not any(isinstance(a, Tensor) and a._rg for a in args):
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2)
        return _CheckpointFunction.apply(function, preserve_rng_state, *args)
    state = _Recompute(function, args, kwargs)
    outer = tls.saved_hooks if used.saved_hooks else ()  # the user's hooks around this checkpoint
    with saved_tensors_hooks(state.pack, state.unpack):
        if preserve_rng_state:
            with record_draws() as recorder:
                out = function(*args, **kwargs)
            state.draws = recorder.record()
        else:
            out = function(*args, **kwargs)
    state.record_versions()
    if outer and not _is_checkpoint_hook(outer[-1][0]):  # the user's hooks, not an enclosing checkpoint's
        state.pack_inputs(outer[-1])
    return out


def checkpoint_sequential(functions: Any, segments: int, input: Any, use_reentrant: bool | None = None,
                          **kwargs: Any) -> Any:
    """Run a sequence of functions (or a list of modules) in ``segments`` checkpointed chunks;
    the last chunk runs normally, as in PyTorch. Without ``use_reentrant``, warns as
    :func:`checkpoint` does and uses the reentrant variant."""
    if use_reentrant is None:
        warnings.warn(_USE_REENTRANT_WARNING.format("threadgrad checkpoint_sequential"), UserWarning, stacklevel=2)
        use_reentrant = True
    functions = list(functions)
    if segments < 1:
        raise ValueError(f"checkpoint_sequential: segments must be >= 1, got {segments}")
    n = len(functions)
    size = max(n // segments, 1)

    def run(start: int, end: int) -> Callable:
        def forward(x: Any) -> Any:
            for f in functions[start:end]:
                x = f(x)
            return x

        return forward

    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end + 1), input, use_reentrant=use_reentrant, **kwargs)
    return run(end + 1, n)(input)
