"""Every piece of mutable per-thread state the engine keeps, in one place.

Note [Thread-local state]
~~~~~~~~~~~~~~~~~~~~~~~~~
Grad mode, anomaly mode and the saved-tensor hooks stack are *thread-local*, as in
PyTorch: a ``no_grad()`` block on one thread never changes what another thread records.
When a backward call starts, the caller's values are captured into its GraphTask
(``GraphTask.create_graph``, ``.anomaly``, ``.saved_hooks`` and ``.saved_hooks_off``, the
message of an enclosing ``disable_saved_tensors_hooks``); whichever thread then runs a
node of that GraphTask installs those values first (the executor's ``_install``), so a
node behaves the same on the caller thread, a ``virtual:N`` worker or a pool thread.
The executor installs state when the thread switches GraphTask, not per node: the
values are constant within one GraphTask, so re-installing them per node would only cost.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

# Note [Grad mode fast path]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# Every op asks "is grad mode on in this thread?", and reading ``tls.grad_enabled`` costs
# about 480 instructions of a 15,000-instruction op (threading.local finds this thread's dict
# first, then takes the generic attribute path). So the process also keeps
# ``grad_off_threads``: the idents of the threads whose grad mode is off right now. While it
# is empty, grad mode is on in every thread, this one included, and the op need not read the
# thread-local; the hottest recorders test ``not grad_off_threads or tls.grad_enabled``.
# The set is kept by the only way to write the flag: ``tls.grad_enabled = v`` goes through
# the data descriptor ``_GradEnabled`` (it has ``__set__`` and no ``__get__``, so reads still
# find the value in the thread's dict, at the old cost). A thread adds or removes only its own
# ident, and its own reads follow its own writes, so a thread whose mode is off always finds
# the set non-empty; another thread's entry only sends it to the thread-local, which is right
# too. set.add / set.discard are single calls, atomic under the GIL. A thread that ends with
# grad mode off (``set_grad_enabled(False)`` as its last word) would leave its ident behind and
# send every op of every other thread to the thread-local for the rest of the process, so each
# thread's state holds a ``_ThreadExit`` whose ``__del__`` discards the ident: CPython drops a
# threading.local's dict for a thread when that thread ends, before ``join()`` returns. Idle
# device workers switch the mode back on (executor's _thread_main), and a thread's own
# backward restores its mode when it ends.
# Measured: chain forward 15,067 -> 14,618 instructions per op.
grad_off_threads: set = set()
_get_ident = threading.get_ident


class _GradEnabled:
    """The data descriptor behind ``tls.grad_enabled``: see Note [Grad mode fast path]."""

    def __set__(self, inst: Any, value: bool) -> None:
        # The set must never be empty while this thread's flag is off, even for a moment: a
        # signal handler (or a KeyboardInterrupt) can run ops on this thread between the two
        # steps. So the ident goes in before the flag goes off, and out after it goes on.
        # (``inst.__dict__`` of a threading.local is this thread's dict.)
        if value:
            inst.__dict__["grad_enabled"] = value
            grad_off_threads.discard(_get_ident())
        else:
            grad_off_threads.add(_get_ident())
            inst.__dict__["grad_enabled"] = value


class _ThreadExit:
    """Lives in one thread's ``tls`` dict; dropped when that thread ends, it takes the
    thread's ident out of ``grad_off_threads`` (Note [Grad mode fast path])."""

    __slots__ = ("ident",)

    def __init__(self, ident: int) -> None:
        self.ident = ident

    def __del__(self, _off: set = grad_off_threads) -> None:  # (bound now: at exit module globals may be None)
        _off.discard(self.ident)


class _ThreadState(threading.local):
    """Per-thread values. Class attributes are each new thread's defaults (grad_enabled's is
    set by ``__init__``: its class attribute is the descriptor)."""

    def __init__(self) -> None:  # runs once per thread, on its first use of tls
        self.grad_enabled = True  # (in the thread's dict: _GradEnabled has no default to read)
        self._exit = _ThreadExit(_get_ident())

    # Set by no_grad / enable_grad / set_grad_enabled on this thread, and by the executor
    # (to the GraphTask's create_graph) while it runs a node. See Note [Grad mode fast path].
    grad_enabled = _GradEnabled()
    # Set by detect_anomaly / set_detect_anomaly (issue 3) and by the executor per GraphTask.
    anomaly: bool = False
    anomaly_check_nan: bool = True
    # Stack of (pack, unpack) pairs pushed by saved_tensors_hooks; the innermost is last.
    saved_hooks: tuple = ()
    # The error message of the innermost disable_saved_tensors_hooks on this thread (None: not
    # disabled). Set and restored by that context manager; captured by backward with the stack.
    saved_hooks_disabled: str | None = None
    # The GraphTask whose node this thread is running now (None outside backward). Set and
    # restored by the executor; read by queue_callback and by reentrant backward detection.
    current_task: object = None
    # Reentrant nesting on this thread's stack (see Note [Reentrant backward] in executor.py).
    depth: int = 0
    # Priority depth of the GraphTask being driven (stack depth + depth inherited from a pool hop).
    total_depth: int = 0
    # The ReadyQueue this thread serves: a device worker's device queue, a pool thread's
    # borrowed queue, or a caller thread's own CPU queue (created on its first backward).
    local_queue: object = None
    # This thread's own cpu ReadyQueue, used when it drives a (non-reentrant) backward.
    own_queue: object = None
    # True on engine-owned threads (device workers and pool threads).
    is_worker: bool = False
    # On a GPU's device worker: (device, the stream current there between nodes), so a node recorded
    # on it runs without entering a stream context (Note [Worker stream] in executor.py).
    worker_stream: object = None
    # Where this thread's random draws go instead of the global generator: a DrawRecorder or
    # DrawReplay, set and restored by engine/creation.py's record_draws / replay_draws around
    # a checkpointed function, on the thread that runs it. Never captured or installed by the
    # executor. See Note [Checkpointed random draws] in creation.py.
    rng_source: object = None


tls = _ThreadState()


class _Used:
    """Process-wide, sticky: has any thread ever turned this feature on? See Note [Used flags]."""

    __slots__ = ("anomaly", "saved_hooks")

    def __init__(self) -> None:
        # Slots, not class attributes: Python 3.11 specializes reading a slot (LOAD_ATTR_SLOT)
        # but not reading a class attribute through an instance, which takes the generic path
        # (measured: chain forward 15,844 -> 15,269 instructions per op).
        self.anomaly = False
        self.saved_hooks = False


# Note [Used flags]
# ~~~~~~~~~~~~~~~~~
# Reading a thread-local attribute costs several times a plain attribute (threading.local
# finds this thread's dict first); recording an op used to read two that are almost always off: anomaly mode
# (record) and the saved-tensor hooks stack (pack_saved). ``used`` says whether any thread
# ever switched the feature on: the only ways to switch them on (detect_anomaly /
# set_detect_anomaly, saved_tensors_hooks) set it first, and nothing resets it, so while it
# is False every thread's value is off and the thread-local need not be read. Other
# threads get the values only from a thread that set them (the executor's ``_install``,
# ``_async``), after the flag. Measured: chain forward 20,948 -> 20,469 instructions per op.
# ``used.anomaly`` covers ``anomaly_check_nan`` too (set_detect_anomaly(False, check_nan=False)
# sets it), and ``used.saved_hooks`` covers ``saved_hooks_disabled`` (disable_saved_tensors_hooks
# sets it). The executor uses the flags the same way per backward call: a GraphTask captures,
# ``_install`` writes, and ``_thread_main`` saves and restores these values only once the
# feature was used; before, each is at its default in every thread.
used = _Used()

def _no_stale_views(t: Any, what: str) -> None:
    """Until ops is imported nothing makes views, so none can be stale."""


# ops/views.py's refresh, registered when ops is imported (the engine core imports no ops):
# brings a view made stale by an in-place op on its base up to date before the engine core
# reads its autograd facts (Note [Stale views] in ops/views.py).
refresh_view: Callable[[Any, str], None] = _no_stale_views


def register_view_refresher(refresh: Callable[[Any, str], None]) -> None:
    """Set the function the engine core calls to refresh a maybe-stale view (ops/views.py
    calls it once, at import)."""
    global refresh_view
    refresh_view = refresh
