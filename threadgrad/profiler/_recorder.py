"""What a profile records while it is active: the executor's hooks and the forward op tracer.

The executor calls the ``_Recorder`` methods below from its hook sites (Note [Profiler
hooks] in engine/executor.py); they run on whichever thread runs or queues the node, so
everything they touch is either per thread (the thread's row) or a single ``list.append`` /
``dict`` store, each atomic in CPython. Raw events are flat tuples, turned into ``Event``
records only when read (``profile.events()``): per node the recorder pays two clock reads,
a name, one tuple and one append.
"""
from __future__ import annotations

import itertools
import sys
import threading
import time
from typing import Any, Callable

from ..engine._locks import remade_at_fork
from ..engine._state import tls

_now = time.perf_counter_ns

# Raw event kinds (first field of each tuple in _Recorder.events).
NODE = 0  # (NODE, row, name, t0, t1, task, depth, device, queued_at, sequence_nr)
CALL = 1  # (CALL, row, name, t0, t1, task, depth, None, None, None)
OP = 2    # (OP, row, name, t0, t1, None, None, device, None, sequence_nr of its output's node)
# Hand-offs (Recorder.flows): (kind, src_row, t_src, dst_row, t_dst, at_span_start): at_span_start
# is True when t_dst is the start of the span that received the work (a node run).
DEVICE_HANDOFF = "device hand-off"
POOL_HANDOFF = "pool hand-off"
THREAD_HANDOFF = "thread hand-off"  # cpu work queued by one thread, run by another (e.g. a caller)


class ThreadRow:
    """One thread seen by a profile: its lane in the trace and the plot."""

    __slots__ = ("index", "thread_name", "role", "kind", "ident")

    def __init__(self, index: int, thread: threading.Thread) -> None:
        self.index = index
        self.thread_name = thread.name
        self.ident = thread.ident
        name = thread.name
        # Engine threads are named by executor.py: threadgrad-<device>, threadgrad-pool-<n> and
        # threadgrad-cpu-<n> (the set_cpu_workers helpers).
        if name.startswith("threadgrad-pool-"):
            self.kind, self.role = "pool", "pool " + name[len("threadgrad-pool-"):]
        elif name.startswith("threadgrad-cpu-"):
            self.kind, self.role = "helper", "cpu helper " + name[len("threadgrad-cpu-"):]
        elif name.startswith("threadgrad-"):
            self.kind, self.role = "device", name[len("threadgrad-"):] + " worker"
        else:
            self.kind, self.role = "caller", f"caller ({name})"

    def sort_key(self) -> tuple:
        return ({"caller": 0, "helper": 1, "device": 2, "pool": 3}[self.kind], self.index)


class _Recorder:
    """The object installed as ``executor._profiler`` while a profile is active."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.flows: list[tuple] = []
        self.rows: list[ThreadRow] = []
        self._rows_lock = threading.Lock()
        self._local = threading.local()
        self._queued: dict[tuple, tuple] = {}  # (id(gt), id(node)) -> (row, time queued)
        self._task_ids: dict[int, int] = {}    # id(gt) -> the profile's number for that call
        self._next_task = itertools.count(1).__next__
        self.start = _now()
        self.stop: int | None = None
        # Nodes running now, per task (id(gt) -> count): a backward call waits for its own
        # before it returns (run_call), so the node that completed it on another thread is
        # recorded before the caller can leave the profile.
        self._running: dict[int, int] = {}
        self._running_cv = threading.Condition(threading.Lock())
        remade_at_fork(self)  # See Note [Locks across fork] in engine/_locks.py

    def _remake_locks(self) -> None:
        self._rows_lock = threading.Lock()
        self._running_cv = threading.Condition(threading.Lock())

    # -- rows ---------------------------------------------------------------------------
    def row(self) -> ThreadRow:
        """This thread's row, made on its first event (a threading.local: a later thread that
        reuses a finished thread's ident gets a row of its own)."""
        try:
            return self._local.row
        except AttributeError:
            with self._rows_lock:
                r = ThreadRow(len(self.rows), threading.current_thread())
                self.rows.append(r)
            self._local.row = r
            return r

    def task_id(self, gt: Any) -> int:
        """The profile's number for GraphTask ``gt``: given when its call starts (run_call);
        a task that started before the profile gets one when first seen."""
        n = self._task_ids.get(id(gt))
        if n is None:
            n = self._task_ids[id(gt)] = self._next_task()
        return n

    # -- executor hooks (See Note [Profiler hooks] in engine/executor.py) ----------------
    def run_node(self, call: Callable[[], Any], gt: Any, node: Any, device: Any) -> Any:
        if gt.error is not None:  # a failed task's node is dropped, not run: nothing to show
            return call()
        row = self.row()
        name = node.name()
        queued = self._queued.pop((id(gt), id(node)), None)
        key = id(gt)
        with self._running_cv:
            self._running[key] = self._running.get(key, 0) + 1
        t0 = _now()
        try:
            return call()
        finally:
            t1 = _now()
            try:
                if self.stop is None:
                    self.events.append((NODE, row, name, t0, t1, self.task_id(gt), gt.depth, device, queued,
                                        node.sequence_nr))
                    if queued is not None and queued[0] is not row:
                        self.flows.append((_handoff_kind(queued[0], row), queued[0], queued[1], row, t0, True))
            finally:
                with self._running_cv:
                    left = self._running[key] - 1
                    if left:
                        self._running[key] = left
                    else:
                        del self._running[key]
                        self._running_cv.notify_all()

    def queued(self, gt: Any, node: Any) -> None:
        self._queued[(id(gt), id(node))] = (self.row(), _now())

    def run_call(self, execute: Callable, gt: Any, root: Any) -> None:
        task = self._task_ids[id(gt)] = self._next_task()  # a new call: a new number, even for a reused id
        row = self.row()
        t0 = _now()
        try:
            execute(gt, root)
        finally:
            t1 = _now()
            if gt.done and gt.error is None:
                # Every node of a finished task has routed; one may still be between its end and
                # its event (the node that completed the task, on another thread): a few
                # instructions away. (A failed task's nodes may run on: not waited for.)
                key = id(gt)
                with self._running_cv:
                    while self._running.get(key):
                        self._running_cv.wait()
            if self.stop is None:
                name = "backward" if gt.depth == 0 else "reentrant backward"
                self.events.append((CALL, row, name, t0, t1, task, gt.depth, None, None, None))

    def handed_to_pool(self, job: Callable[[], None]) -> Callable[[], None]:
        """``backward_async`` / ``grad_async``: the call leaves this thread for a pool thread."""
        src, t_src = self.row(), _now()
        # A flow arrow starts inside a slice of its thread: this one marks the hand-off.
        self.events.append((CALL, src, "backward_async (hand-off)", t_src, t_src + 1000, None, None, None, None, None))

        def job_on_pool() -> None:
            if self.stop is None:
                self.flows.append((POOL_HANDOFF, src, t_src, self.row(), _now(), False))
            job()

        return job_on_pool


def _handoff_kind(src: ThreadRow, dst: ThreadRow) -> str:
    if src.kind == "device" or dst.kind == "device":
        return DEVICE_HANDOFF
    if src.kind == "pool" or dst.kind == "pool":
        return POOL_HANDOFF
    return THREAD_HANDOFF


_NOT_AN_OP = object()


class _ForwardTracer:
    """Times each op call outside backward (``profile(record_forward=True)``) with a Python
    profile function, so the op code itself has no hook at all: ``sys.setprofile`` on the
    thread that starts the profile and ``threading.setprofile`` for threads started during it
    (on Python 3.12+ ``threading.setprofile_all_threads`` reaches every thread). The function
    runs on every Python call of those threads, so forward runs a few times slower while it is
    on; ops are REGISTRY's functions (with Tensor's operators, which are bound to them) and
    custom ``Function.apply``. Ops run by backward nodes are not recorded (the node is)."""

    def __init__(self, recorder: _Recorder) -> None:
        from ..engine.function import Function
        from ..ops._core import REGISTRY

        self._rec = recorder
        self._codes: dict[int, str | None] = {}
        for name, fn in REGISTRY.items():
            code = getattr(fn, "__code__", None)
            if code is not None:
                self._codes[id(code)] = name
        self._apply_code = Function.apply.__func__.__code__  # type: ignore[attr-defined]
        self._codes[id(self._apply_code)] = None  # named after the Function subclass
        self._local = threading.local()
        self._prev: Any = None
        self._prev_threading: Any = None

    def start(self) -> None:
        self._prev = sys.getprofile()
        self._prev_threading = threading.getprofile() if hasattr(threading, "getprofile") else None
        if hasattr(threading, "setprofile_all_threads"):
            threading.setprofile_all_threads(self._trace)
        else:
            threading.setprofile(self._trace)
            sys.setprofile(self._trace)

    def stop(self) -> None:
        if hasattr(threading, "setprofile_all_threads"):
            threading.setprofile_all_threads(self._prev)
        else:
            threading.setprofile(self._prev_threading)
            sys.setprofile(self._prev)

    def _trace(self, frame: Any, event: str, arg: Any) -> None:
        if self._rec.stop is not None:
            # A thread started during the profile keeps its profile function on Python < 3.12
            # (threading.setprofile reaches no running thread): it takes itself off here.
            sys.setprofile(None)
            return
        if event == "call":
            name = self._codes.get(id(frame.f_code), _NOT_AN_OP)
            if name is _NOT_AN_OP:
                return
            stack = self._stack()
            if tls.current_task is not None:  # inside a backward node: the node is recorded
                stack.append((frame, None, 0))
                return
            if name is None:
                cls = frame.f_locals.get("cls")
                name = f"{getattr(cls, '__name__', 'Function')}.apply"
            stack.append((frame, name, _now()))
        elif event == "return":
            if id(frame.f_code) not in self._codes:
                return
            stack = self._stack()
            if not stack or stack[-1][0] is not frame:
                return  # an op that was already running when the profile started
            _, name, t0 = stack.pop()
            if name is None or self._rec.stop is not None:
                return
            t1 = _now()
            out = arg[0] if isinstance(arg, tuple) and arg else arg
            fn = getattr(out, "grad_fn", None)
            self._rec.events.append((OP, self._rec.row(), name, t0, t1, None, None,
                                     getattr(out, "device", None), None,
                                     getattr(fn, "sequence_nr", None)))

    def _stack(self) -> list:
        try:
            return self._local.stack
        except AttributeError:
            s = self._local.stack = []
            return s
