"""Every piece of mutable per-thread state the engine keeps, in one place.

Note [Thread-local state]
~~~~~~~~~~~~~~~~~~~~~~~~~
Grad mode, anomaly mode and the saved-tensor hooks stack are *thread-local*, as in
PyTorch: a ``no_grad()`` block on one thread never changes what another thread records.
When a backward call starts, the caller's values are captured into its GraphTask
(``GraphTask.create_graph``, ``.anomaly``, ``.saved_hooks``); whichever thread then runs a
node of that GraphTask installs those values first (the executor's ``_install``), so a
node behaves the same on the caller thread, a ``virtual:N`` worker or a pool thread.
The executor installs state when the thread switches GraphTask, not per node: the
values are constant within one GraphTask, so re-installing them per node would only cost.
"""
from __future__ import annotations

import threading


class _ThreadState(threading.local):
    """Per-thread values. Class attributes are each new thread's defaults."""

    # Set by no_grad / enable_grad / set_grad_enabled on this thread, and by the executor
    # (to the GraphTask's create_graph) while it runs a node.
    grad_enabled: bool = True
    # Set by detect_anomaly / set_detect_anomaly (issue 3) and by the executor per GraphTask.
    anomaly: bool = False
    anomaly_check_nan: bool = True
    # Stack of (pack, unpack) pairs pushed by saved_tensors_hooks; the innermost is last.
    saved_hooks: tuple = ()
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


tls = _ThreadState()
