"""The threads that run nodes besides the caller: the reentrant pool and the cpu helpers.

(Device workers are started and served by the Engine: ``Engine._device_queue``,
``_device_worker`` in engine/executor.py.) Every one of them runs the executor's loop on a
queue (``Engine._thread_main``, or ``Engine._help`` for a cpu helper).

Note [Threads and queues]
~~~~~~~~~~~~~~~~~~~~~~~~~
Every thread that runs nodes pops one ReadyQueue at a time (``tls.local_queue``):
  * a caller thread driving a serial task pops its own cpu queue (``tls.own_queue``, made on
    its first backward); driving a parallel task, that task's ``_SharedQueue`` (Note [Parallel
    cpu workers] in engine/executor.py);
  * each non-cpu device (``virtual:N``, ``cuda:N``) has one long-lived worker thread,
    started lazily, serving that device's queue;
  * pool threads run reentrant GraphTasks that went past ``max_recursion_depth`` (serving the
    queue of the thread that handed them over, which waits meanwhile: the queue keeps one
    consumer) and ``backward_async`` calls (serving their own queue). A pool thread idle for
    ``Engine.pool_idle_timeout`` seconds retires (see ``_Pool``: hand-off and retirement are
    decided under one lock);
  * cpu helpers (``set_cpu_workers(n)``) take from the parallel queues in flight, one queue
    after the other, so between two tasks a helper may move to another queue.
A node runs on a thread that serves the queue of the device where its input gradients live:
cpu work goes to the GraphTask's ``owner_queue`` (the queue of the thread that called
backward, or of a parallel task its own), other devices' work to their worker. In the serial
schedule the executor hops threads only when the device changes or a reentrant backward
passes ``max_recursion_depth`` (its child moves to a pool thread); in the parallel schedule
a cpu node runs on whichever of the task's threads takes it.
"""
from __future__ import annotations

import collections
import itertools
import threading
from typing import TYPE_CHECKING, Callable

from ._state import tls

if TYPE_CHECKING:
    from .executor import Engine
    from .ready_queue import _SharedQueue


class _CpuHelpers:
    """The ``set_cpu_workers(n)`` threads: each takes tasks from the queues of the parallel
    GraphTasks in flight, in turn, so concurrent backward calls share them. A thread beyond
    ``n`` retires after its current node. See Note [Parallel cpu workers] in engine/executor.py."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._cv = threading.Condition(threading.Lock())
        self._queues: collections.deque[_SharedQueue] = collections.deque()
        self.idle = 0  # helpers waiting for a listed queue (written under _cv)
        self.stopping = False  # set by stop(), under _cv
        self.n = 0
        self.threads: list[threading.Thread] = []
        self.busy: set[threading.Thread] = set()  # helpers between taking a queue and their next wait (under _cv)

    def resize(self, n: int) -> list[threading.Thread]:
        """Set ``n``; threads beyond it retire after their current node. While no helper runs
        a node, wait until the extra ones have left the list (nothing can hold them: they are
        waiting, or on their way back to the lock) and return them, for the caller to join, so
        that ``worker_threads()`` no longer lists them; a helper inside a node is not waited
        for (its node may wait for the caller)."""
        with self._cv:
            self.n = n
            if len(self.threads) <= n:
                return []
            self._cv.notify_all()  # the extra threads retire
            before = list(self.threads)
            while len(self.threads) > n and not self.busy:
                self._cv.wait()
            return [t for t in before if t not in self.threads]

    def wait_retired(self) -> list[threading.Thread]:
        """Wait until no more than ``n`` helpers are listed, busy ones included, and return
        those that left meanwhile. Only for a thread that drives no backward (so no helper's
        node can be waiting for it) and holds none of the engine's locks (a busy helper may
        need them before it gets back here): Engine.set_cpu_workers calls it that way, after
        resize. A helper finishing its last node of a backward that has just returned is
        still busy for a moment (the free-threaded build showed it)."""
        with self._cv:
            before = list(self.threads)
            while len(self.threads) > self.n and not self.stopping:
                self._cv.wait()
            return [t for t in before if t not in self.threads]

    def ensure(self) -> None:
        """Start threads up to ``n`` (a parallel backward is starting)."""
        with self._cv:
            while len(self.threads) < self.n and not self.stopping:
                t = threading.Thread(target=self._loop, name=f"threadgrad-cpu-{next(_helper_names)}", daemon=True)
                t.start()  # listed after it starts, under the lock: stop() never joins an unstarted thread
                self.threads.append(t)

    def offer(self, q: _SharedQueue) -> None:
        with self._cv:
            self._queues.append(q)
            if self.idle:
                self._cv.notify()

    def wake_one(self) -> None:
        with self._cv:
            if self.idle:
                self._cv.notify()

    def _loop(self) -> None:
        tls.is_worker = True
        me = threading.current_thread()
        queues = self._queues
        while True:
            with self._cv:
                self.busy.discard(me)
                while True:
                    if self.stopping or len(self.threads) > self.n:
                        self.threads.remove(me)
                        self._cv.notify_all()  # resize() may wait for the list to shrink
                        return
                    if queues:
                        break
                    self.idle += 1
                    try:
                        self._cv.wait()
                    finally:
                        self.idle -= 1
                q = queues.popleft()
                queues.append(q)  # in turn: every parallel backward in flight gets its share
                self.busy.add(me)  # (resize() does not wait for it until it is back here)
            entry = q.steal(True)
            unlisted = entry is False
            if type(entry) is tuple:
                try:
                    unlisted = self._engine._help(q, entry, self)
                finally:
                    q.leave()  # a failed task's driver may be waiting for it (wait_helpers)
            # unlisted: this steal unlisted q, or _help's last steal did (it took q's last task
            # and found q empty after it). Either way this thread removes q from the list.
            if unlisted:
                with self._cv:
                    try:
                        queues.remove(q)
                    except ValueError:
                        pass
            q = entry = None  # hold nothing of a finished task while waiting

    def stop(self) -> list[threading.Thread]:
        with self._cv:
            self.stopping = True
            self._cv.notify_all()
            return list(self.threads)


_helper_names = itertools.count()


class _Pool:
    """Reusable threads for reentrant overflow and backward_async. Grows when all are busy
    (a reentrant chain needs one per hop); a thread idle for ``idle_timeout()`` seconds
    retires, and ``stop`` ends them all.

    Hand-off and retirement are decided under one lock: ``submit`` counts on an idle thread
    only while it is counted in ``_idle``, and a thread leaves that count only with the lock
    held, after it has looked at ``_jobs`` once more. So a thread whose wait timed out while
    a job was being handed to it takes the job instead of retiring: no job is ever left
    behind with no thread to run it."""

    def __init__(self, idle_timeout: Callable[[], float]) -> None:
        self._cv = threading.Condition(threading.Lock())
        self._jobs: list[Callable[[], None]] = []
        self._idle = 0
        self._stopping = False
        self._idle_timeout = idle_timeout
        self.threads: list[threading.Thread] = []

    def submit(self, job: Callable[[], None]) -> None:
        with self._cv:
            self._jobs.append(job)
            if self._idle >= len(self._jobs):
                self._cv.notify()
                return
            t = threading.Thread(target=self._loop, name=f"threadgrad-pool-{next(_pool_names)}", daemon=True)
            t.start()  # before it is listed, under the lock: stop() must never join an unstarted thread
            self.threads.append(t)

    def _loop(self) -> None:
        tls.is_worker = True
        while True:
            with self._cv:
                while not self._jobs and not self._stopping:
                    self._idle += 1
                    try:
                        woken = self._cv.wait(self._idle_timeout())
                    finally:
                        self._idle -= 1
                    if not woken and not self._jobs and not self._stopping:
                        # Idle too long, and (under the lock) nothing was handed over meanwhile.
                        self.threads.remove(threading.current_thread())
                        return
                if not self._jobs:
                    return
                job = self._jobs.pop(0)
            job()
            job = None  # the finished job's closure holds its graph: drop it before waiting

    def wake_idle(self) -> None:
        """Make idle threads start their wait again (with a new ``idle_timeout()``)."""
        with self._cv:
            self._cv.notify_all()

    def stop(self) -> list[threading.Thread]:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
            return list(self.threads)


_pool_names = itertools.count()
