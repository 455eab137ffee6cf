"""The ready queues: a priority heap of NodeTasks per consuming thread (PyTorch's ReadyQueue).

Who pops which queue, and where a node goes: Note [Threads and queues] in engine/threads.py.
The order they give: docs/architecture.md, section 4.

Note [Shutdown]
~~~~~~~~~~~~~~~
``shutdown()`` pushes one shutdown task to each device worker's queue (a ``_WorkerQueue``), at
the lowest priority, so the worker drains its queue first; the worker's own loop pops it, closes
the queue (under its lock: no push slips in after the last pop) and stops. A backward nested in
a node that worker runs (a reentrant backward, or a pool thread driving one on the borrowed
queue) may find that queue holding nothing but the shutdown task while its own task still waits
for a node from another device. It must not take it: it would return with its task unfinished,
so the node that started it went on with gradients missing, and the worker's own loop would
find nothing to stop on (shutdown's join hung). Such a loop pops with ``hold``: it waits past a
shutdown task, which stays queued until the worker's own loop reaches it. A push that a closed
queue refuses goes to a new worker for the device (``_push``).
"""
from __future__ import annotations

import heapq
import itertools
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .threads import _CpuHelpers

_next_tie = itertools.count().__next__  # orders tasks of equal keys: the order they were queued

# How long the main thread blocks at a time where it waits for other threads. CPython runs a
# Python signal handler between bytecodes; a signal that arrives just before a blocking wait
# (after the last check, before the wait starts) interrupts nothing and waits with it. Short
# slices bound that delay for Ctrl-C; other threads take no signals and block for good.
# See Note [Interrupts] in engine/executor.py.
SIGNAL_SLICE = 0.05


def _signal_slice() -> float | None:
    return SIGNAL_SLICE if threading.get_ident() == threading.main_thread().ident else None

# Heap keys: smaller pops first. Wake-up (empty) tasks beat node tasks; node tasks pop
# by higher reentrant depth, then by higher sequence_nr (the later forward op first).
_WAKE_PRIO = -(1 << 61)
_SHUTDOWN_PRIO = 1 << 62  # last: a worker drains its queue before it stops
_SEQ_BITS = 40


_NOTHING = (0, 0, None, None, None)  # what pop(until) returns once that GraphTask is done


_SHUTDOWN = object()  # the node slot of a shutdown task


class ReadyQueue:
    """A priority queue of NodeTasks, shared by every GraphTask that uses its thread.

    Entries are flat tuples ``(prio, tie, graph_task, node, inputs)``; ``tie`` is a global
    counter, so tuple comparison never reaches the objects behind it. The heap is guarded
    by a plain Lock (its ``with`` is C code) and the Condition is used only to sleep:
    ``push`` notifies only when a thread waits (the gain: docs/performance.md's executor table).
    """

    __slots__ = ("_heap", "_lock", "_cv", "_waiters", "closed")
    # several threads pop it: a _SharedQueue (Note [Parallel cpu workers] in engine/executor.py)
    multi = False
    worker = False  # a device worker's queue, which shutdown() stops: a _WorkerQueue

    def __init__(self) -> None:
        self._heap: list = []
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._waiters = 0
        self.closed = False  # set once the serving worker has stopped; push then refuses

    def push(self, prio: int, task: Any, node: Any, inputs: Any, tie: int | None = None) -> bool:
        """Queue a task; ``tie`` orders it among equal keys (default: after every one queued so far)."""
        with self._lock:
            if self.closed:
                return False
            heapq.heappush(self._heap, (prio, _next_tie() if tie is None else tie, task, node, inputs))
            if self._waiters:
                self._cv.notify()
        return True

    def pop(self, until: Any = None, hold: bool = False) -> tuple:
        """The next task; waits for one. ``until``: a GraphTask whose driver waits here (a
        parallel task's queue, which holds no wake-ups): ``_NOTHING`` once it is done.
        ``hold``: leave a shutdown task queued and wait for another (Note [Shutdown])."""
        with self._lock:
            heap = self._heap
            if not heap or (hold and heap[0][3] is _SHUTDOWN):
                self._waiters += 1
                try:
                    timeout = _signal_slice()
                    while not heap or (hold and heap[0][3] is _SHUTDOWN):
                        if until is not None and until.done:
                            return _NOTHING
                        self._cv.wait(timeout)
                finally:
                    self._waiters -= 1
            entry = heapq.heappop(heap)
            if entry[3] is _SHUTDOWN:
                self.closed = True  # under the lock: no push can slip in after the last pop
            return entry

    def close(self) -> list:
        """Refuse every later push and return the tasks still queued (a worker that died
        hands them back to be failed: Note [Errors] in engine/executor.py)."""
        with self._lock:
            self.closed = True
            entries = self._heap[:]
            self._heap.clear()
            return entries

    def purge(self, task: Any) -> int:
        """Drop every task of ``task``; return how many were dropped."""
        with self._lock:
            heap = self._heap
            keep = [e for e in heap if e[2] is not task]
            dropped = len(heap) - len(keep)
            if dropped:
                heap[:] = keep  # in place: a waiting pop holds a reference to this list
                heapq.heapify(heap)
            return dropped

    def __len__(self) -> int:
        return len(self._heap)


class _WorkerQueue(ReadyQueue):
    """A device worker's queue: the one kind that receives shutdown tasks (Note [Shutdown])."""

    __slots__ = ()
    worker = True


class _SharedQueue(ReadyQueue):
    """The cpu queue of one parallel GraphTask: its driver pops it, the cpu helpers steal from
    it. It never holds wake-up entries (a helper would take them): a wake-up push wakes every
    waiter instead, and the driver waits in ``pop(until=its task)``, which returns once it is done.
    See Note [Parallel cpu workers] in engine/executor.py."""

    __slots__ = ("_helpers", "_offered", "_inside")
    multi = True

    def __init__(self, helpers: _CpuHelpers) -> None:
        super().__init__()
        self._helpers = helpers
        self._offered = False  # listed (or about to be) in helpers' queues; guarded by _lock
        self._inside = 0  # helpers between a steal(enter=True) and their leave(); guarded by _lock

    def push(self, prio: int, task: Any, node: Any, inputs: Any, tie: int | None = None) -> bool:
        with self._lock:
            if task is None:  # a wake-up: the driver tests its task's done flag
                self._cv.notify_all()
                return True
            heapq.heappush(self._heap, (prio, _next_tie() if tie is None else tie, task, node, inputs))
            if self._waiters:
                self._cv.notify()
            if not self._offered:
                # Listed under this lock, so a steal that unlists the queue (under it too) comes
                # before or after the listing, never between: a helper's removal can then
                # never precede the append it undoes (which left an unlisted queue in the list,
                # for the helpers to spin on). Lock order: this lock, then the helpers'.
                self._offered = True
                self._helpers.offer(self)
                return True
        helpers = self._helpers
        if helpers.idle:
            # Listed already, but a helper may sleep: each queued task wakes one (an unlocked
            # read: a helper that goes to sleep later finds this queue listed and does not).
            helpers.wake_one()
        return True

    def steal(self, enter: bool = False) -> tuple | bool:
        """A helper's pop: the top task; else False if this call unlisted the queue (the
        helper removes it from its list), True if it was unlisted already. With ``enter``, a
        task taken counts this helper as inside the task until its ``leave()``."""
        with self._lock:
            if self._heap:
                if enter:
                    self._inside += 1
                return heapq.heappop(self._heap)
            was, self._offered = self._offered, False
            return not was

    def leave(self) -> None:
        """A helper that entered with a steal is done with this queue's task."""
        with self._lock:
            self._inside -= 1
            if not self._inside:
                self._cv.notify_all()  # a failed task's driver may wait in wait_helpers()

    def wait_helpers(self) -> None:
        """Wait until no helper runs a node of this queue's task: a failed parallel backward
        returns only then, as one run by its caller alone does (Note [Parallel cpu workers] in
        engine/executor.py)."""
        with self._lock:
            timeout = _signal_slice()
            while self._inside:
                self._cv.wait(timeout)
