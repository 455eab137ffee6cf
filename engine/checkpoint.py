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

With ``preserve_rng_state`` the generator state of the forward is restored for the
re-run, so dropout draws the same mask. See Note [Checkpoint re-run contract] for what the
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
from typing import Any, Callable, Sequence

from ._locks import LOCKS
from ._state import tls
from .creation import get_rng_state, set_rng_state
from .function import Function
from .grad_mode import enable_grad
from .graph import _modified_error
from .saved_hooks import saved_tensors_hooks
from .tensor import Tensor

_REENTRANT_GRAD_MESSAGE = (
    "Checkpointing is not compatible with .grad() or when an `inputs` parameter is passed to .backward(). "
    "Please use .backward() and do not pass its `inputs` argument, or use checkpoint(..., use_reentrant=False)."
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
    out = []
    for a in args:
        if isinstance(a, Tensor):
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
        ctx.rng_state = get_rng_state() if preserve_rng_state else None
        ctx.tensor_idx = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.others = [None if isinstance(a, Tensor) else a for a in args]
        ctx.save_for_backward(*[a for a in args if isinstance(a, Tensor)])
        return run_function(*args)  # grad mode is off inside forward: nothing is kept

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple:
        gt = tls.current_task
        if gt is not None and gt.exec_info is not None:
            raise RuntimeError(_REENTRANT_GRAD_MESSAGE)
        args = list(ctx.others)
        for i, t in zip(ctx.tensor_idx, _detach_like(ctx.saved_tensors)):
            args[i] = t
        outputs = _rerun(ctx.run_function, args, {}, ctx.rng_state)
        if isinstance(outputs, Tensor):
            outputs = (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grads) if isinstance(o, Tensor) and o._rg and g is not None]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is not necessary")
        from .autograd import backward

        backward([o for o, _ in pairs], [g for _, g in pairs])  # See Note [Reentrant backward]
        return (None, None) + tuple(args[i].grad if isinstance(args[i], Tensor) else None for i in range(len(args)))


def _rerun(fn: Callable, args: list, kwargs: dict, rng_state: Any) -> Any:
    """Run ``fn`` again under grad mode, with the forward's generator state if given."""
    if rng_state is None:
        with enable_grad():
            return fn(*args, **kwargs)
    with LOCKS.rng_fork:  # forking the generator must not interleave between threads
        current = get_rng_state()
        set_rng_state(rng_state)
        try:
            with enable_grad():
                return fn(*args, **kwargs)
        finally:
            set_rng_state(current)



# Note [Checkpoint re-run contract]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The non-reentrant checkpoint keeps no activations, only ``fn`` and its inputs, and trusts
# the re-run in backward to rebuild exactly what forward saved. Three things guard that:
#
# * Inputs unchanged. The tensor inputs' versions are recorded when forward returns and
#   checked before every re-run: re-running from inputs modified in place would silently
#   give the gradient of other values. The error is the saved-tensor one
#   (graph._modified_error), as PyTorch raises for an input its saved variables hold.
# * Same saves. The re-run must save as many tensors as forward did (slot i of forward is
#   slot i of the re-run); a different count means ``fn`` is not deterministic, and raises
#   CheckpointError instead of handing a wrong tensor (or none) to a node.
# * Linked under create_graph. When backward records a graph (grad mode is on while it
#   unpacks: the executor sets it to create_graph), ``fn`` re-runs on the real inputs, so
#   the recomputed activations handed to the nodes depend on those inputs and a second
#   derivative reaches them. A first-order backward re-runs on detached copies: nothing
#   will differentiate that graph, so it need not reach into the caller's.
# The reentrant variant gets the first check from save_for_backward; it supports first-order
# gradients only.


class _Recompute:
    """State of one non-reentrant checkpoint: the re-run fills ``storage`` slot by slot.
    See Note [Checkpoint re-run contract]."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict, rng_state: Any) -> None:
        self.fn, self.args, self.kwargs, self.rng_state = fn, args, kwargs, rng_state
        self.storage: dict[int, Tensor] | None = None
        self.count = 0
        self.versions: list = []
        self.lock = threading.Lock()

    def record_versions(self) -> None:
        """Remember each tensor input's version as forward leaves it."""
        named = [(f"input {i}", a) for i, a in enumerate(self.args)]
        named += [(f"keyword argument {k!r}", a) for k, a in self.kwargs.items()]
        self.versions = [(label, t, t._vc[0]) for label, t in named if isinstance(t, Tensor)]

    def _check_versions(self) -> None:
        for label, t, v in self.versions:
            if t._vc[0] != v:
                raise _modified_error(_InputSlot(f"checkpoint of {_fn_name(self.fn)} as its {label}"), t, v)

    def pack(self, t: Tensor) -> int:
        idx = self.count
        self.count += 1
        return idx

    def unpack(self, idx: int) -> Tensor:
        # Each recomputed tensor is handed out once and dropped, so a segment's activations
        # die as its backward consumes them. A second unpack (retain_graph) recomputes again.
        with self.lock:
            if self.storage is None or idx not in self.storage:
                self._recompute()
            t = self.storage.pop(idx)  # type: ignore[union-attr]
            if not self.storage:
                self.storage = None
            return t

    def _recompute(self) -> None:
        self._check_versions()
        storage: dict[int, Tensor] = {}
        counter = iter(range(1 << 62))

        def pack(t: Tensor) -> Tensor:
            storage[next(counter)] = t
            return t

        # The re-run's own nodes save normally (needed for double backward); see pack_saved.
        pack.identity_pack = True  # type: ignore[attr-defined]

        args = list(self.args) if tls.grad_enabled else _detach_like(self.args)
        # The re-run's own saves are captured (not hooked by outer hooks) into storage.
        prev = tls.saved_hooks
        tls.saved_hooks = ()
        try:
            with saved_tensors_hooks(pack, lambda t: t):
                _rerun(self.fn, args, self.kwargs, self.rng_state)
        finally:
            tls.saved_hooks = prev
        if len(storage) != self.count:
            raise CheckpointError(
                f"checkpoint: the recomputation of {_fn_name(self.fn)} in backward saved {len(storage)} tensors "
                f"for backward where the forward saved {self.count}; the checkpointed function must be "
                "deterministic (run the same ops, with the same inputs requiring grad, every time it is called). "
                "Make it so, or call it without checkpoint."
            )
        self.storage = storage


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
    state = _Recompute(function, args, kwargs, get_rng_state() if preserve_rng_state else None)
    with saved_tensors_hooks(state.pack, state.unpack):
        out = function(*args, **kwargs)
    state.record_versions()
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
