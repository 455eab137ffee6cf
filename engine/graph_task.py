"""GraphTask: the state of one backward()/grad() call (PyTorch's graph_task.h).

Its fields are listed in docs/architecture.md, section 3; the executor (engine/executor.py)
builds one per call, runs its nodes and routes into it.

Note [Completion]
~~~~~~~~~~~~~~~~~
``outstanding`` counts NodeTasks pushed but not yet finished. It is incremented when a
task is pushed and decremented after the task's outputs have been routed, both under the
GraphTask's lock once the task is shared (before that one thread alone touches it: Note
[Shared tasks]), so it reaches zero exactly once: when every node that will run has run.
The thread that brings it to zero runs the final callbacks (``queue_callback``), then marks
the task done. If that thread does not serve ``owner_queue``, it pushes an empty wake-up
task there, so the thread driving the GraphTask (blocked in ``pop``) sees ``done`` and
returns. A stray wake-up left in a queue is harmless: it is popped and ignored.

Note [No future in the GraphTask]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
PyTorch's GraphTask carries a future (``future_result_``); this one has none, on purpose. The
only thread that ever waits for a GraphTask is the one driving its loop (the caller, or for a
reentrant child past the depth limit the parent, which waits for the pool thread to *leave* the
queue: Note [Reentrant backward] in engine/executor.py), and that thread already tests ``done``
after every task. The outcome is read from ``error`` and ``captured`` when the loop ends
(``autograd._result``). A Future there was written once and read once per call, and making one
makes a Condition and an RLock: a cost on every call (the per-call workload of
benchmarks/run_all.py; the numbers: docs/performance.md's executor table). The Futures users see
are ``backward_async``'s and ``grad_async``'s, made around the whole call.

Note [Shared tasks]
~~~~~~~~~~~~~~~~~~~
Most GraphTasks never leave the thread that drives them: their nodes all run on the owner queue,
whose consumer is one thread at a time (the caller, or a pool thread while the caller waits for
it to leave: Note [Reentrant backward] in engine/executor.py). Such a task needs no lock around
routing and ``outstanding``. ``task.shared`` turns True, for good, the first time ``Engine._push``
hands one of its nodes to a device worker; ``_push`` takes ``task.lock`` before that push, so the
worker cannot route into the task before this thread's routing ends (``_run_task`` releases the
lock), and from then on every routing takes the lock. Nothing else lets another thread into a
task's routing: reentrant children are GraphTasks of their own, and ``queue_callback``,
``_fail`` and ``_abandon`` run on threads that run or drive the task's nodes (``_fail`` takes
the lock anyway). Skipping the lock pays on every node of a task that stays on one thread (row
``chain_bwd`` of benchmarks/instructions.py; the numbers: docs/performance.md's executor table);
``test_a_task_is_shared_only_once_a_device_worker_gets_one_of_its_nodes`` checks when the switch
happens. A parallel task is shared from its start (Note [Parallel cpu workers] in
engine/executor.py).
"""
from __future__ import annotations

import threading
from typing import Callable

from .. import devices

from ._state import tls, used
from .graph import Node
from .ready_queue import _SEQ_BITS, _WAKE_PRIO, ReadyQueue


class GraphTask:
    """The state of one backward call (PyTorch's GraphTask): its fields are listed in
    docs/architecture.md, section 3. The executor fills it while it builds and routes; the
    methods below end it (``claim_error``, ``mark_done``) and wake the thread driving it."""

    __slots__ = (
        "dependencies", "not_ready", "outstanding", "exec_info", "captures", "captured", "cut", "runnable",
        "keep_graph", "create_graph", "anomaly", "check_nan", "saved_hooks", "saved_hooks_off", "depth", "prio_base",
        "owner_queue", "error", "done", "final_callbacks", "lock",
        "uses_streams", "caller_streams", "leaf_streams", "shared", "single", "__weakref__",
    )

    def __init__(self, keep_graph: bool, create_graph: bool, depth: int, owner_queue: ReadyQueue) -> None:
        self.dependencies: dict[Node, int] = {}   # node -> incoming edges still expected
        self.not_ready: dict[Node, list] = {}     # node -> input buffer (one slot per input)
        self.outstanding = 0                      # see Note [Completion]
        self.exec_info: set[Node] | None = None  # the nodes that run; None: everything reachable
        self.captures: dict[Node, list] | None = None   # node -> [(input slot, result index)]
        self.captured: list = []
        self.cut: frozenset = frozenset()  # (node, input_nr) edges cut by no_grad_vars
        self.runnable: set | None = None  # None: every node reached runs or captures (Note [Needed nodes], autograd.py)
        self.keep_graph = keep_graph
        self.create_graph = create_graph
        # Thread-local state captured from the caller; see Note [Thread-local state]. (The
        # defaults while no thread ever used the feature: Note [Used flags], _install.)
        if used.anomaly:
            self.anomaly = tls.anomaly
            self.check_nan = tls.anomaly_check_nan
        else:
            self.anomaly, self.check_nan = False, True
        if used.saved_hooks:
            self.saved_hooks, self.saved_hooks_off = tls.saved_hooks, tls.saved_hooks_disabled
        else:
            self.saved_hooks, self.saved_hooks_off = (), None
        self.depth = depth
        self.prio_base = depth << _SEQ_BITS
        self.owner_queue = owner_queue
        self.error: BaseException | None = None
        self.done = False
        self.final_callbacks: list[Callable[[], None]] = []
        self.lock = threading.Lock()
        self.shared = False  # another thread may route into this task: see Note [Shared tasks]
        # parallel tasks: the nodes one edge reaches (Note [Private work] in engine/executor.py)
        self.single: set | None = None
        # The caller's current stream per device, captured on its thread: Note [Streams] in
        # engine/executor.py.
        self.uses_streams = devices.streams_in_use
        self.caller_streams = _current_streams() if self.uses_streams else None
        self.leaf_streams: list = []

    def claim_error(self, e: BaseException) -> bool:
        """Store ``e`` as this task's error unless one is stored already; True if it was
        stored. Under the lock: of two failing threads exactly one wins (Note [Errors] in
        engine/executor.py)."""
        with self.lock:
            if self.error is not None:
                return False
            self.error = e
            return True

    def mark_done(self) -> None:
        """The task is over (completed, or failed with ``error`` set): say so, and wake the
        thread driving it. See Note [Completion]."""
        self.done = True
        self.wake_owner()

    def wake_owner(self) -> None:
        """Wake the thread driving this task (it may wait in ``pop``) to see ``done``: an empty
        task in its queue, unless this thread serves that queue and no other thread pops it
        (a helper of a parallel task may be the one finishing it). See Note [Completion]."""
        q = self.owner_queue
        if tls.local_queue is not q or q.multi:
            q.push(_WAKE_PRIO, None, None, None)


def _current_streams() -> dict:
    # list() first: it copies the values in C, so a device registered meanwhile by another
    # thread cannot break the iteration (set() would call Device.__hash__, Python code).
    return {d: d.current_stream() for d in list(devices._registry.values()) if d.has_streams}
