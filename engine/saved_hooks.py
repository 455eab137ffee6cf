"""Saved-tensor hooks: ``saved_tensors_hooks(pack, unpack)`` and ``save_on_cpu()``.

Every tensor an op or Function saves for backward passes through one choke point
(``graph.pack_saved``); while these hooks are active on the thread, it keeps only
``pack(tensor)`` and calls ``unpack(packed)`` when backward needs the tensor.

>>> from threadgrad import engine
>>> packed = []
>>> with engine.saved_tensors_hooks(lambda t: packed.append(t) or len(packed) - 1, lambda i: packed[i]):
...     x = engine.tensor([3.0], requires_grad=True)
...     y = (x * x).sum()
>>> y.backward(); x.grad.tolist(), len(packed)
([6.0], 2)
"""
from __future__ import annotations

from typing import Any, Callable

from ._state import tls, used
from .tensor import Tensor, _wrap


class saved_tensors_hooks:
    """Context manager: tensors saved inside it are stored as ``pack(t)`` and restored by ``unpack``."""

    def __init__(self, pack_hook: Callable[[Tensor], Any], unpack_hook: Callable[[Any], Tensor]) -> None:
        if not callable(pack_hook) or not callable(unpack_hook):
            raise TypeError("saved_tensors_hooks needs two callables: pack_hook(tensor) and unpack_hook(packed)")
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self) -> "saved_tensors_hooks":
        if tls.saved_hooks_disabled is not None:
            raise RuntimeError(tls.saved_hooks_disabled)
        used.saved_hooks = True  # before the thread-local: see Note [Used flags] in _state.py
        tls.saved_hooks = tls.saved_hooks + ((self.pack_hook, self.unpack_hook),)
        return self

    def __exit__(self, *exc: Any) -> None:
        # Pops the innermost hooks, as torch's stack does: an unbalanced __exit__ (say, from an
        # unpack hook during backward, where the caller's hooks are installed for the node and
        # restored after it) cannot re-install hooks that an outer context already removed.
        tls.saved_hooks = tls.saved_hooks[:-1]


class disable_saved_tensors_hooks:
    """Context manager: while it is active on this thread, entering ``saved_tensors_hooks``
    raises RuntimeError(error_message), as torch's ``disable_saved_tensors_hooks``; entering it
    while saved-tensor hooks are active raises the same. Nests. Like the hooks themselves, the
    state is this thread's, and a backward called inside it carries it to every thread that
    runs one of its nodes (a cpu worker, a device worker, a pool thread), as torch's engine
    carries its thread-local state: See Note [Thread-local state] in _state.py."""

    def __init__(self, error_message: str) -> None:
        self.error_message = error_message

    def __enter__(self) -> "disable_saved_tensors_hooks":
        if tls.saved_hooks:
            raise RuntimeError(self.error_message)
        self._prev = tls.saved_hooks_disabled
        used.saved_hooks = True  # before the thread-local: see Note [Used flags] in _state.py
        tls.saved_hooks_disabled = self.error_message
        return self

    def __exit__(self, *exc: Any) -> None:
        tls.saved_hooks_disabled = self._prev


class save_on_cpu(saved_tensors_hooks):
    """Saved tensors are kept as host (cpu) copies and moved back to their device on unpack,
    trading transfer time for device memory."""

    def __init__(self, pin_memory: bool = False) -> None:
        def pack(t: Tensor) -> Any:
            if t.device.type == "cpu":
                return (None, t)  # already on the host: nothing to move
            return (t.device, t.device.to_host(t._data).copy())

        def unpack(packed: Any) -> Tensor:
            device, payload = packed
            return payload if device is None else _wrap(device.asarray(payload), device)

        super().__init__(pack, unpack)
