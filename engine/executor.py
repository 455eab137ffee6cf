"""The executor: GraphTask, ReadyQueue, device workers, the reentrant pool (PyTorch's engine.cpp).

Read docs/architecture.md first (the threading picture, the GraphTask life cycle); the Notes
below are the reasoning the code depends on, and this is their only copy: docs and other
modules cite them as ``Note [X] in engine/executor.py``.

Note [Errors]
~~~~~~~~~~~~~
The first exception raised by a node, a hook, a callback or a saved-tensor unpack fails the
GraphTask (``_fail``): it is stored in ``error`` under the task's lock, the node's name is
appended to its message (once, even when a nested backward re-raises it; in anomaly mode the
forward traceback of the node is added as a note), the task is marked done and the owner is
woken as on completion. Tasks of a failed GraphTask still queued anywhere are dropped when
popped (only ``outstanding`` is decremented), and the owner purges its own queue of them;
a node of it running on another thread finishes, but routes nothing (it tests ``error``
under the lock that ``_fail`` claims it under). The caller re-raises the original exception
object, so its type is unchanged; once it has, the task drops its reference to it
(``autograd._result``), so the failed graph is freed without the cycle collector.

An error while routing a node's outputs is stored in ``error`` under the task's lock
*before* that node's ``outstanding`` decrement: once the count can reach zero on another
thread, that thread's ``_complete`` must see it (else a worker's routing error was lost when
the caller's thread finished the last node first, and the backward returned normally with
gradients missing).

Worker threads catch everything, so they survive and keep serving other GraphTasks, and the
error path itself cannot fail: naming the node is best effort (an exception whose ``args``
is read-only, or that refuses attributes, keeps its message; ``_add_node_to_message`` never
raises), and ``_fail`` marks the task done and wakes the owner in a ``finally``. Should a
device worker's own loop fail anyway (an engine bug; nothing a node does gets there), the
worker unlists itself, closes its queue and fails the task in hand and every task still
queued with a RuntimeError naming the thread (the cause chained), so no caller waits on a
queue nobody serves; the next push starts a new worker (``_worker_died``). A worker that
cannot start on its device (a GPU that is gone) serves its queue by failing every task sent
to it (``_fail_all``).

Note [Interrupts]
~~~~~~~~~~~~~~~~~
Ctrl-C raises KeyboardInterrupt in the main thread, between any two bytecodes it runs, or
in a wait it is blocked in (a lock or condition wait returns early for a signal). A signal
that arrives just before a blocking wait starts interrupts nothing, and CPython would run its
handler only once the wait ends (for a long backward, when it is over): so the main thread
waits in slices of ``SIGNAL_SLICE`` (50 ms) and takes such an interrupt at the end of the
slice. Where it lands decides what it costs; the engine guarantees the outcome at the points
where a caller spends its time:
  * inside a node (its backward, a hook, a callback): the node's error (Note [Errors]);
  * while the thread waits in its queue (for a device worker, or for work a pool thread
    sends back), or between two nodes (after a node's routing, before the next node runs):
    the exception escapes ``_thread_main``'s loop, whose handler (``_abandon``) fails the
    task in hand (the one whose node or continuation it cut off) and the task the loop
    drives, then purges the queue and returns; the caller raises the interrupt from
    ``error``, as any failure. Queued work of the task is dropped everywhere, a node of it
    still running on a worker routes nothing, and nothing of it runs in a later backward;
  * while the caller waits for a pool thread to leave its queue (a reentrant child past
    ``max_recursion_depth``): the child fails with the interrupt and the pool thread is
    woken (it may sleep in ``pop``); the caller then waits again, until the pool thread has
    left, and only then raises. The pool thread leaves as soon as the node it runs returns.
    Further KeyboardInterrupts in that second wait are absorbed (one is already the task's
    error): returning while the pool thread still serves the queue would give it two
    consumers (Note [Reentrant backward], Note [Continuation]).
The guarantee does not cover an interrupt inside the engine's own bookkeeping (between
taking a lock and entering its ``try``, inside a push, inside the handler itself): guarding
every bytecode would cost every node. Reentrant children already running on other threads
are GraphTasks of their own and finish normally; their parent drops what they return. Any
other exception that escapes the loop of a thread driving a task (an engine bug) takes the
same path; on a device worker, see Note [Errors]. tests/stress/test_interrupts.py delivers
the interrupt at each of these points.

Note [Reentrant backward]
~~~~~~~~~~~~~~~~~~~~~~~~~
A backward started while this thread runs a node (``tls.current_task`` is set: from a
custom Function's backward, a hook, a reentrant checkpoint) is reentrant. Its GraphTask
gets ``owner_queue`` = the queue this thread serves, and priority depth one more than the
enclosing one, so its tasks pop first. Then:
  * below ``max_recursion_depth`` nested levels on this thread's stack, the thread drives
    the child inline (``_thread_main`` one frame deeper). While it waits for the child it
    keeps popping its queue, which may hold the parent's tasks too: running them is
    harmless and is what prevents the deadlock where the child waits for work that only
    this thread could do (the parent's cpu nodes and the child's share one queue);
  * at the limit, the child goes to a pool thread, which serves the same queue while this
    thread blocks until the pool thread has *left* the queue (an Event set when its
    ``_thread_main`` returns), not merely until the child is done: a queue has one consumer
    at a time. Waiting for the child's completion (a Future, then) let this thread pop again
    while the pool thread still ran a parent task it had popped; when that task then
    completed the parent, no wake-up was pushed (the completing thread served the owner
    queue itself) and the caller slept forever. The single consumer is also what lets Note
    [Continuation] read the queue's top without the lock. An interrupt in this wait: Note
    [Interrupts].
The pool thread starts with an empty Python stack, so a chain 5,000 levels deep never nears
the interpreter's recursion limit: each level costs 9 frames (measured), so 40 levels use
about 370 of the default 1,000. The pool grows when all its threads are busy (a deep chain
needs one per ``max_recursion_depth`` levels), idle threads retire after
``pool_idle_timeout``, and ``shutdown()`` joins them all. Depth is counted twice:
``tls.depth`` (levels on this thread's stack, reset on a pool thread) decides when to hop;
``GraphTask.depth`` (levels overall, inherited across a pool hop) orders the queues.

Note [Continuation]
~~~~~~~~~~~~~~~~~~~
When a node's routing makes successors ready that are bound for the queue this thread serves
(cpu work of a task whose owner queue it serves; a device worker's own device's work), the
highest-priority one is not pushed: ``_route`` returns it (counted in ``outstanding``) and the
others are queued. Before running it, ``_thread_main`` compares its key with the queue's top: if
a queued task comes first, the successor is pushed after all; else it runs at once. Among equal
keys (every AccumulateGrad has the same one) tasks pop in the order they became ready, as
torch's heap (libstdc++'s) gives for up to three equal keys: a successor kept back takes its
place in that order (``tie``) once a later one is queued, so it still precedes what became ready
after it (a hook that raises on the first leaf stops the backward before the second leaf is
reached, as in torch). That is exactly the order a push and a pop would give (the thread pops
the highest-priority task, and only this thread pops its queue, so the top cannot be taken away
meanwhile; other threads only push, and a push that lands just after the look at the top is one
that could have landed just after a pop), minus a heap push, a pop and a lock round trip per
node. On a chain every node continues this way; on the wide graph of benchmarks/ the nodes of
each branch do (they outrank the other branches' queued nodes, being recorded later): row
``wide_bwd`` of benchmarks/instructions.py measures it (the numbers: docs/performance.md's
executor table). A device worker does the same for its own device's nodes (a GPU chain's
backward: benchmarks/gpu.py's chain row).
``test_run_order_is_the_priority_schedule_on_random_graphs`` checks the order against a
simulated priority schedule. A failed GraphTask drops the successor like any queued task (Note
[Errors]). A parallel task's threads keep their successor without the comparison (Note [Parallel
cpu workers]).

Note [Parallel cpu workers]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
``set_cpu_workers(n)`` with n > 0 keeps n helper threads (``_CpuHelpers``, named
``threadgrad-cpu-K``), and a backward called meanwhile is *parallel*:
  * its cpu nodes go to a queue of its own (``_SharedQueue``), not to the caller's queue. The
    caller drives the task as usual, popping that queue; each helper takes the top task of
    the parallel queues in flight, one queue after the other (a queue is listed when a push
    finds it unlisted, and unlisted by the helper that finds it empty), so concurrent
    backward calls share the helpers in turn. While only one queue is listed, a helper goes
    on taking its tasks without the helpers' lock, its thread state installed once (a steal
    through the helpers' list costs a lock round trip and a state install more: the cpu time
    of a 2-thread backward of the wide graph, benchmarks/parallel.py, free-threaded; the
    numbers: docs/performance.md's executor table). Every push to a listed queue wakes one sleeping
    helper. Device nodes still go to their device worker;
  * the queue has several consumers, so it holds no wake-up entries (a helper would swallow
    one): a wake-up push wakes every waiter, and the driver waits in ``pop(until=task)``, which
    returns once its task is done. ``GraphTask.wake_owner`` always wakes a parallel queue: the
    thread that completes the task may be a helper serving that very queue;
  * the task is shared from the start (Note [Shared tasks] in engine/graph_task.py): every
    routing that touches a dependency count, an input buffer, the queue or ``outstanding`` is
    under ``task.lock``. One kind needs none: a node whose outputs all go to nodes that only this
    edge reaches becomes private work of this thread (Note [Private work]);
  * every thread that runs a node keeps the successor it made ready (Note [Continuation]
    without the comparison: no exact order binds here, and it keeps a branch on one thread);
  * a reentrant backward started by a cpu node of a parallel task is parallel too, with a queue
    of its own driven by the thread that started it (inline, or past ``max_recursion_depth``
    on a pool thread: Note [Reentrant backward]); helpers may take its nodes. The driver pops
    only the child's queue, which cannot deadlock: the child needs none of the parent's
    nodes. One started on a device worker keeps that worker's queue, as in the serial mode.
What still holds: each node runs once, after all its inputs arrived; a node's hooks run in
order on one thread; a leaf's accumulations are serialized (its AccumulateGrad's stripe of LOCKS.leaf); final
callbacks run after every node; a reentrant child finishes before the node that started it
returns; the first error fails the task (Note [Errors]: nodes running elsewhere finish and
route nothing), and the driver raises it only once no helper runs a node of the task (a helper
counts as inside from the steal that takes a task to the end of ``_help``:
``_SharedQueue.wait_helpers``), so, as with n = 0, no node of a failed backward runs (no
``.grad`` written, no hook called) after its caller sees the error (else a ``zero_grad`` in
the caller's ``except`` could be undone, or an optimizer in a post-accumulate-grad hook step,
behind its back). A hook that waits for another branch of a failed backward keeps the caller
waiting with it: with n = 0 that hook could not run at all. What does not: the order of
independent nodes and the thread a node runs on.
With n = 0 none of this code runs but a test of ``helpers.n`` per backward call and of
``q.multi`` per driven task (and per continuation with a non-empty queue).

Note [Private work]
~~~~~~~~~~~~~~~~~~~
In a parallel task, a node whose outputs all go to cpu nodes that only this edge reaches (their
dependency count was 1 when the task started: ``task.single``, counted once in ``_share``) or
to leaves (AccumulateGrad) routes them without the lock (``_private_step``):
  * a node only this edge reaches is ready at once, and no other thread can ever reach it, so
    no count, buffer or queue is touched. The first runs next on this thread; the others go on
    the thread's *private* stack (``private``, a ``_Private`` local to the loop that drives or
    helps: ``_thread_main``, ``_help``);
  * a leaf that other edges reach too (a parameter shared by many branches) has a shared count,
    so the thread sums the gradients it sends there (``private.sums``: the sum and the number of
    edges) and hands each sum over once, under the lock, when its stack runs out
    (``_flush_sums``): the count drops by the edges summed, and the leaf is ready if that was
    all of them. One locked routing per thread instead of one per edge; the sum's order
    changes, which sums of three or more gradients may do in this mode anyway.
``outstanding`` does not change: the count of the node that ran passes to the work it made, and
a thread holds one count for its node in hand, its stack and its sums together. When a node
leaves no successor to run, the thread takes the top of its stack (still under that count);
once the stack is empty it hands its sums over and gives the count back, so ``outstanding``
reaches 0 only when no thread holds private work or sums. A count read without the lock would
not do instead of ``single``: a node whose count another thread has just lowered to 1 may not
have that thread's gradient in its buffer yet. Sharing the work back:
  * after each node, if a thread of this task waits for work (a sleeping helper: ``idle``; the
    driver in ``pop``: ``_waiters``; unlocked reads, a stale one only delays), the thread
    queues its oldest private tasks, one per waiting thread, each counted in ``outstanding``
    under the lock (``_publish``). The oldest are the largest subtrees left, in depth-first
    order, so one hand-off splits a tree in halves;
  * before a node that runs the user's code (hooks; a custom Function's backward, reentrant
    checkpoint's included; a leaf's post-accumulate-grad hooks: ``Node.runs_user_code``),
    the thread queues all of its private
    work and hands its sums over (``_publish_all``): that code may wait for another branch of
    this backward (a barrier, a reentrant backward whose nodes meet) or for a leaf's
    accumulation, and work held by a thread that waits would never run.
    Built-in formulas never wait for other nodes, so holding work across them cannot
    deadlock. (Saved-tensor unpack hooks run inside built-in formulas and are not covered:
    one that waits for another branch hangs in torch and with n = 0 as well.);
  * a failed task drops the stack and the sums with its count (Note [Errors]).
Why: with every ready node pushed to the shared queue under ``task.lock``, each routing moved the
lock, the queue's lock, the task's counters and the helpers' state between cores. On the wide
graph of benchmarks/ 2 workers were no faster than 1 (benchmarks/parallel.py, workload a,
free-threaded; the numbers before and after private work in docs/performance.md, 'Private work').

Note [Streams]
~~~~~~~~~~~~~~
On devices with streams (cuda), kernels are queued asynchronously on a stream, and cupy's
current stream is thread-local. The executor keeps PyTorch's contract:
  * a node's backward runs on the stream its forward ran on: ``record`` stores
    ``node.stream = (device, stream)``, and ``_call_function`` makes it current around
    ``apply`` (hooks included) on whichever thread runs the node;
  * when a gradient produced on stream P goes into the input buffer of a node that runs on
    stream C != P, C first waits on an event recorded on P (``_sync_streams``), and the sum
    of gradients meeting in one buffer is computed on C, so the consumer never reads a
    gradient before its producer has written it (PyTorch's InputBuffer::add);
  * before backward returns, the caller's current stream on each device waits on the
    streams the leaf accumulations ran on, so the caller may use ``.grad`` at once.
All of this is skipped unless a device with streams exists in the process
(``devices.streams_in_use``, read once per GraphTask): cpu and virtual graphs pay one
boolean test per node. The logic is tested against a numpy-backed stand-in for cupy's
stream and event API (tests/devices/fake_cupy.py; docs/gpu.md).

Note [Profiler hooks]
~~~~~~~~~~~~~~~~~~~~~
``threadgrad.profiler`` sees the executor through one public door: ``set_profiler(hooks)``
installs an object with the four methods of ``RecordHooks`` (None: none), which the
executor calls from its hook sites on whichever thread runs or queues the work. The sites are:
running a node (``run_node``, from the thread loops: the hooks get the task, the node, the
device of its inputs, and a call that runs the node and routes its outputs, to be called once),
queueing one (``queued``, from ``_push`` and the continuation that goes back to the queue: the
queue wait, and a hand-off arrow when another thread runs it), handing a call to the pool
(``handed_to_pool``, from ``run_async``), and one backward call (``run_call``, from
``autograd._run_backward``: the call's span). The hooks see the GraphTask's public fields
(``done``, ``error``, ``depth``) and the node, never the executor's own functions.
Every site tests one module global, ``_profiler``, and nothing else, so with no profile a node
pays at most two tests (around the node in the loop, in ``_push`` when it is queued): a
global load and a compare each. A node already running when the block ends may still report;
the recorder drops what comes after its end. A backward call that succeeded returns only once
every one of its nodes has reported (the node that completed it may have run on another
thread), so a block around one call holds all of its nodes. The cost, off and on, is in
docs/profiler.md (rows ``chain_bwd`` and ``wide_bwd`` of benchmarks/instructions.py).

Note [Worker stream]
~~~~~~~~~~~~~~~~~~~~
Most GPU nodes were recorded on the GPU's default stream, which is what is current on that GPU's
device worker between nodes (``tls.worker_stream``: the worker's device and that stream, read
once when the worker starts; the null stream is one object for every GPU in cupy, so the device
is compared too). For them the worker does not enter ``stream_context`` (a device guard and a
stream guard: a tenth of a small GPU node; the measurement: docs/performance.md's executor
table); after the node, ``Device.keep_current`` makes the GPU and the stream current again if
the node's code (a hook, a custom Function) changed them, which is what leaving the context
would have restored. A stream object is compared by identity: cupy hands out one object per
stream, and where it would not, the node merely takes the context path.
"""
from __future__ import annotations

import functools
import os
import threading
import traceback
import warnings
from typing import Any, Callable, Protocol

from .. import devices
from . import _blas
from ._state import tls, used
from .graph import AccumulateGrad, GraphRoot, Node
from .graph_task import GraphTask, _current_streams  # noqa: F401 - re-exported (autograd.py, tests)
from .threads import _CpuHelpers, _Pool
from .ready_queue import (  # noqa: F401 - re-exported: tests and threadgrad.profiler import them from here
    _NOTHING, _SEQ_BITS, _SHUTDOWN, _SHUTDOWN_PRIO, _WAKE_PRIO, SIGNAL_SLICE, ReadyQueue, _next_tie,
    _SharedQueue, _signal_slice, _WorkerQueue,
)
from .tensor import disown, engine_sum

_cpu = devices.cpu

# The active profile's recorder, or None: the one flag the hot path tests. Set only by
# set_profiler (threadgrad.profiler's profile block). See Note [Profiler hooks].
_profiler: Any = None


class RecordHooks(Protocol):
    """What ``set_profiler`` installs: the executor's public record hooks, called on whichever
    thread runs or queues the work. See Note [Profiler hooks]."""

    def run_node(self, call: Callable[[], Any], task: GraphTask, node: Node, device: devices.Device) -> Any:
        """Around one node: ``call()`` runs it and routes its outputs; call it once and return
        what it returns."""

    def queued(self, task: GraphTask, node: Node) -> None:
        """``node`` of ``task`` was put on a queue (it runs later, maybe on another thread)."""

    def run_call(self, execute: Callable[[GraphTask, Node], None], task: GraphTask, root: Node) -> None:
        """Around one backward call: ``execute(task, root)`` runs it; call it once."""

    def handed_to_pool(self, job: Callable[[], None]) -> Callable[[], None]:
        """A whole call (``backward_async``) goes to a pool thread: return the job to run there."""


def set_profiler(recorder: RecordHooks | None) -> None:
    """Install ``recorder`` (None: none) as the executor's record hooks. See Note [Profiler hooks]."""
    global _profiler
    _profiler = recorder


def _record_node(run: Callable, task: GraphTask, node: Node, inputs: list, served: Any, private: Any) -> Any:
    """``run(task, node, inputs, served, private)`` through the active profile's ``run_node``
    (Note [Profiler hooks]); the loops call this only while ``_profiler`` is set."""
    rec = _profiler
    if rec is None:  # the profile ended since the loop looked
        return run(task, node, inputs, served, private)
    device = _buffer_device(inputs) if inputs else _cpu
    return rec.run_node(functools.partial(run, task, node, inputs, served, private), task, node, device)

def _install(task: GraphTask) -> None:
    """Make this thread behave as the backward caller did. See Note [Thread-local state] (_state.py).

    While no thread ever used anomaly mode or saved-tensor hooks, every thread and every task
    has their defaults: nothing to write (Note [Used flags]; row ``call`` of
    benchmarks/instructions.py, with GraphTask's reads and the loop's save and restore)."""
    tls.grad_enabled = task.create_graph
    if used.anomaly:
        tls.anomaly = task.anomaly
        tls.anomaly_check_nan = task.check_nan
    if used.saved_hooks:
        tls.saved_hooks = task.saved_hooks
        tls.saved_hooks_disabled = task.saved_hooks_off
    tls.current_task = task


def _pop_for(q: ReadyQueue, wait_for: GraphTask | None) -> Callable[[], tuple]:
    """How a loop driving ``wait_for`` (None: a device worker's own loop) pops ``q``."""
    if q.multi:
        # A parallel task's queue has other consumers: its driver waits in pop(until) (Note
        # [Parallel cpu workers]).
        return lambda: q.pop(wait_for)
    if wait_for is not None and q.worker:
        # a backward inside a worker's node: Note [Shutdown] in engine/ready_queue.py
        return lambda: q.pop(None, True)
    return q.pop


def _save_state() -> tuple:
    """This thread's state that ``_install`` changes, for ``_restore_state`` (the defaults while
    a feature was never used: _install's docstring)."""
    return (tls.grad_enabled, tls.anomaly if used.anomaly else False,
            tls.anomaly_check_nan if used.anomaly else True,
            tls.saved_hooks if used.saved_hooks else (), tls.current_task,
            tls.saved_hooks_disabled if used.saved_hooks else None)


def _restore_state(saved: tuple) -> None:
    tls.grad_enabled, tls.current_task = saved[0], saved[4]
    if used.anomaly:  # (a node may have used it since the save: then write the defaults back)
        tls.anomaly, tls.anomaly_check_nan = saved[1], saved[2]
    if used.saved_hooks:
        tls.saved_hooks, tls.saved_hooks_disabled = saved[3], saved[5]


def _forget_task() -> None:
    """An idle device worker keeps no task: the last one may be finished, and its graph,
    gradients and hooks must die with the caller's references. It turns grad mode back on too
    (the task's install may have turned it off: Note [Grad mode fast path]); _install sets it
    again for the next task. (The loop's ``current`` is already None when this worker ran the
    task's last node.)"""
    tls.current_task = None
    tls.saved_hooks, tls.saved_hooks_disabled = (), None
    tls.grad_enabled = True


def _drop_failed(q: ReadyQueue, task: GraphTask) -> None:
    """The loop driving failed ``task`` leaves: drop its tasks still queued, and for a parallel
    task wait until no helper runs one of its nodes (Note [Parallel cpu workers]: no node runs
    after its caller sees the error)."""
    q.purge(task)
    if q.multi:
        q.wait_helpers()


def _add_note(e: BaseException, note: str) -> None:
    """``e.add_note(note)``; on Python 3.10 (no notes) the same ``__notes__`` list by hand."""
    if hasattr(e, "add_note"):
        e.add_note(note)
        return
    try:
        e.__notes__ = [*getattr(e, "__notes__", ()), note]  # type: ignore[attr-defined]
    except AttributeError:  # exceptions with __slots__ and no dict
        pass


def _add_node_to_message(e: BaseException, node: Node | None, anomaly: bool = False) -> None:
    """Name the failing node in the exception's message, once (nested backward re-raises);
    in anomaly mode also warn, as torch does, naming the node with its forward traceback.

    Best effort: an exception whose ``args`` cannot be set, or that refuses attributes or
    notes, keeps its message as raised. Nothing here may raise (Note [Errors])."""
    if node is None:
        return
    try:
        if getattr(e, "_threadgrad_node", None) is not None:
            return
        name = node.name()
        e._threadgrad_node = name  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - __slots__ and no dict, a __setattr__ that refuses, ...
        return  # unmarked, a nested re-raise could name it twice: leave the message alone
    suffix = f" [raised in {name} during backward]"
    try:
        args = e.args
        if args and isinstance(args[0], str):
            e.args = (args[0] + suffix,) + tuple(args[1:])
        elif not args:
            e.args = (suffix.strip(" []"),)
        else:
            _add_note(e, suffix.strip(" []"))
    except Exception:  # noqa: BLE001 - a read-only ``args`` property, say
        try:
            _add_note(e, suffix.strip(" []"))
        except Exception:  # noqa: BLE001
            pass
    try:
        trace = node.__dict__.get("_metadata", {}).get("traceback_")
        if trace is not None:
            _add_note(e, f"Traceback of forward call that caused the error (anomaly mode, node {name}):\n" + "".join(trace))
        if anomaly:  # torch's warning, before the error reaches the caller
            warnings.warn(
                f"Error detected in {name}. Traceback of forward call that caused the error:\n" + "".join(trace)
                if trace is not None else
                f"Error detected in {name}. No forward pass information available. Enable detect anomaly "
                "during forward pass for more information.", UserWarning, stacklevel=2)
    except Exception:  # noqa: BLE001
        pass


def _describe(e: BaseException) -> str:
    """``repr(e)``, or its type's name when its repr raises."""
    try:
        return repr(e)
    except Exception:  # noqa: BLE001
        return f"<{type(e).__name__} (its repr raised)>"


def _worker_lost(cause: BaseException) -> RuntimeError:
    """The error of a GraphTask whose device worker died: names the thread, chains the cause."""
    err = RuntimeError(
        f"backward could not finish: engine thread {threading.current_thread().name} stopped on an "
        f"internal error ({_describe(cause)}); the next backward starts a new one"
    )
    err.__cause__ = cause
    return err


def _all_none(grads: list) -> bool:
    for g in grads:
        if g is not None:
            return False
    return True


def _check_nan(node: Node, outputs: Any) -> None:
    for i, g in enumerate(outputs):
        if g is not None and g._data.dtype.kind in "fc" and bool(g.device.xp.isnan(g._data).any()):
            raise RuntimeError(f"Function '{node.name()}' returned nan values in its {i}th output.")


class Engine:
    """The process-wide executor (``engine.get_engine()``).

    ``max_recursion_depth``: reentrant backward calls nest at most this many levels on one
    thread's stack before the next level moves to a pool thread (Note [Reentrant backward]).

    ``pool_idle_timeout``: seconds a pool thread (reentrant overflow, ``backward_async``)
    waits for work before it retires; setting it applies to threads already waiting.
    """

    def __init__(self) -> None:
        # Each level of inline reentrance costs 9 Python frames (measured); 40 levels use ~370,
        # leaving most of the default recursion limit (1000) to user code inside the nodes.
        self.max_recursion_depth = 40
        self._lock = threading.Lock()
        self._workers: dict[devices.Device, tuple[ReadyQueue, threading.Thread]] = {}
        self._pool_idle_timeout = 30.0
        self._pool = self._new_pool()
        self._helpers = _CpuHelpers(self)

    @property
    def pool_idle_timeout(self) -> float:
        return self._pool_idle_timeout

    @pool_idle_timeout.setter
    def pool_idle_timeout(self, seconds: float) -> None:
        if not seconds >= 0:
            raise ValueError(f"pool_idle_timeout must be a number of seconds >= 0, got {seconds!r}")
        self._pool_idle_timeout = float(seconds)
        self._pool.wake_idle()

    def _new_pool(self) -> _Pool:
        return _Pool(lambda: self._pool_idle_timeout)

    @property
    def cpu_workers(self) -> int:
        """Helper threads that run ready cpu nodes of a backward beside its caller (0: none,
        PyTorch's schedule). Set with ``set_cpu_workers``. See Note [Parallel cpu workers]."""
        return self._helpers.n

    def set_cpu_workers(self, n: int) -> int:
        """Set ``cpu_workers``; return the previous value. Backward calls already running keep
        the mode they started in; threads beyond ``n`` retire after their current node. Called
        outside any backward, it returns once they have ended (so ``worker_threads()`` no
        longer lists them), after the node a helper may still be running for another thread's
        backward; inside a backward (a hook), only once no helper runs a node."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"set_cpu_workers: n must be an int >= 0, got {n!r}")
        with self._lock:
            helpers = self._helpers
            prev = helpers.n
            retired = helpers.resize(n)
            _blas.limit_for_workers(n)  # See Note [BLAS threads and cpu workers] in _blas.py
        if tls.current_task is None:  # (inside a backward, a helper's node may wait for this thread)
            retired += helpers.wait_retired()
        for t in retired:
            t.join()  # (it has left the list and returns at once)
        return prev

    # -- threads ----------------------------------------------------------------------
    def _device_queue(self, device: devices.Device) -> ReadyQueue:
        w = self._workers.get(device)
        if w is not None:
            return w[0]
        with self._lock:
            w = self._workers.get(device)
            if w is None:
                q = _WorkerQueue()
                t = threading.Thread(target=self._device_worker, args=(device, q),
                                     name=f"threadgrad-{device}", daemon=True)
                w = self._workers[device] = (q, t)
                t.start()
        return w[0]

    def _device_worker(self, device: devices.Device, q: ReadyQueue) -> None:
        tls.is_worker = True
        tls.local_queue = q
        tls.own_queue = q
        try:
            if device.has_streams:
                device.activate()  # the GPU is current on this thread from now on
                tls.worker_stream = (device, device.current_stream())  # See Note [Worker stream]
        except BaseException as e:  # noqa: BLE001 - never leave tasks in a queue nobody serves
            self._fail_all(q, device, e)
            return
        try:
            self._thread_main(None)
        except BaseException as e:  # noqa: BLE001 - see Note [Errors]
            self._worker_died(device, q, e)

    def _worker_died(self, device: devices.Device, q: ReadyQueue, cause: BaseException) -> None:
        """This device worker's own loop failed (an engine bug: its nodes' errors never get
        here). Unlist it, so the next push starts a new worker, then fail every task it was
        given, so no backward waits on a queue nobody serves. See Note [Errors]."""
        with self._lock:
            w = self._workers.get(device)
            if w is not None and w[0] is q:
                del self._workers[device]
        for _, _, task, _, _ in q.close():
            if task is not None:
                self._fail(task, _worker_lost(cause), None)

    def _fail_all(self, q: ReadyQueue, device: devices.Device, cause: BaseException) -> None:
        """Serve ``q`` by failing every GraphTask that sends work to it (the worker could not
        start on its device), so no backward waits forever. See Note [Errors]."""
        while True:
            _, _, task, node, _ = q.pop()
            if task is None:
                if node is _SHUTDOWN:
                    return
                continue
            err = RuntimeError(f"the worker thread of {device} could not start: {_describe(cause)}")
            self._fail(task, err, node)
            with task.lock:
                task.outstanding -= 1

    def _push(self, task: GraphTask, device: devices.Device, node: Node, inputs: list, tie: int | None = None) -> None:
        """Queue ``node`` on the thread that serves ``device`` (caller holds task.lock, or task is
        not shared yet). See Note [Threads and queues] in engine/threads.py, Note [Completion]
        and Note [Shared tasks] in engine/graph_task.py."""
        task.outstanding += 1
        prio = -(task.prio_base | node.sequence_nr)
        if _profiler is not None:  # See Note [Profiler hooks]
            _profiler.queued(task, node)
        if not device.needs_worker:
            task.owner_queue.push(prio, task, node, inputs, tie)
            return
        if not task.shared:
            # The first hand-off to another thread: from here on task is routed under its lock.
            # This thread takes it now, before the worker can see the task; _run_task releases it.
            task.lock.acquire()
            task.shared = True
        while not self._device_queue(device).push(prio, task, node, inputs):
            pass  # that worker was shut down after we looked it up; the next lookup starts a new one

    def worker_threads(self) -> list[threading.Thread]:
        """The live threads this engine started: device workers and pool threads."""
        threads = [t for _, t in list(self._workers.values())] + list(self._pool.threads) + list(self._helpers.threads)
        return [t for t in threads if t.is_alive()]

    def shutdown(self) -> None:
        """Stop and join every engine thread (idempotent); the next backward restarts them.

        Workers drain their queues before stopping, so backward calls in flight finish.
        """
        if tls.current_task is not None:
            raise RuntimeError("get_engine().shutdown() cannot be called from inside a backward pass")
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
            pool, self._pool = self._pool, self._new_pool()
            helpers, self._helpers = self._helpers, _CpuHelpers(self)
            self._helpers.n = helpers.n  # the setting stays; the next parallel backward starts threads
        for q, _ in workers:
            q.push(_SHUTDOWN_PRIO, None, _SHUTDOWN, None)
        threads = [t for _, t in workers] + pool.stop() + helpers.stop()
        me = threading.current_thread()
        for t in threads:
            if t is not me:
                t.join()

    def _after_fork_in_child(self) -> None:
        # Threads do not survive fork; locks held by them at that moment would stay held.
        self._lock = threading.Lock()
        self._workers = {}
        self._pool = self._new_pool()
        n, self._helpers = self._helpers.n, _CpuHelpers(self)
        self._helpers.n = n
        tls.own_queue = None
        tls.local_queue = None
        tls.current_task = None
        tls.depth = 0
        tls.total_depth = 0

    # -- running a GraphTask ----------------------------------------------------------
    def execute(self, task: GraphTask, root: GraphRoot) -> None:
        """Run ``task`` from ``root`` on this thread (or, past the depth limit, on a pool thread)
        and return when it is done; the outcome is in ``task.error`` and ``task.captured``."""
        parent = tls.current_task
        if parent is None:
            helpers = self._helpers
            if helpers.n:
                # A parallel backward: its cpu nodes go to a queue of its own that the helpers
                # take from too, so every routing is under task.lock. Note [Parallel cpu workers].
                q = _SharedQueue(helpers)
                _share(task)
                if len(helpers.threads) < helpers.n:
                    helpers.ensure()
            else:
                # A fresh backward: this thread owns it and serves its own cpu queue.
                q = tls.own_queue
                if q is None:
                    q = tls.own_queue = ReadyQueue()
            task.owner_queue = q
            # The root task runs first, without a trip through the queue: nothing else of
            # this thread's can be waiting there (a push and a pop saved: row ``call``).
            # (task is not shared yet, or holds no node yet: Note [Shared tasks] in engine/graph_task.py)
            task.outstanding += 1
            prev_queue = tls.local_queue
            tls.local_queue = q
            try:
                self._thread_main(task, root)
            finally:
                tls.local_queue = prev_queue
            return
        # Reentrant: see Note [Reentrant backward].
        prev_queue = tls.local_queue
        if prev_queue.multi:
            # Started by a cpu node of a parallel backward: a parallel child, with its own queue,
            # which this thread (or the pool thread) drives. See Note [Parallel cpu workers].
            task.owner_queue = _SharedQueue(prev_queue._helpers)
            _share(task)
        else:
            task.owner_queue = prev_queue
        with task.lock:
            self._push(task, _cpu, root, [])
        if tls.depth >= self.max_recursion_depth:
            self._drive_on_pool(task)
            return
        prev_total = tls.total_depth
        tls.depth += 1
        tls.total_depth = task.depth
        tls.local_queue = task.owner_queue  # (prev_queue itself, but for a parallel child)
        try:
            self._thread_main(task)
        finally:
            tls.depth -= 1
            tls.total_depth = prev_total
            tls.local_queue = prev_queue

    def _drive_on_pool(self, task: GraphTask) -> None:
        """A reentrant ``task`` past ``max_recursion_depth``: a pool thread drives it on this
        thread's queue; return once that thread has *left* the queue, not only once task is
        done: a queue has one consumer at a time (Note [Reentrant backward]). Waiting on the
        future let this thread pop again while the pool thread was still running a task it
        had popped, and a completion it then made woke no one: a hang."""
        left = threading.Event()
        self._pool.submit(lambda: self._run_on_pool(task, left))
        try:
            timeout = _signal_slice()
            while not left.wait(timeout):
                pass
        except BaseException as e:  # noqa: BLE001 - see Note [Interrupts]
            self._fail(task, e, None)
            task.owner_queue.push(_WAKE_PRIO, None, None, None)  # the pool thread may sleep in pop
            while True:  # it leaves once its current node returns; only then is q ours
                try:
                    left.wait()
                    break
                except KeyboardInterrupt:
                    pass  # one interrupt is enough: it is already this task's error

    def _run_on_pool(self, task: GraphTask, left: threading.Event) -> None:
        tls.local_queue = task.owner_queue
        tls.total_depth = task.depth
        tls.depth = 0
        try:
            self._thread_main(task)
        finally:
            tls.local_queue = None
            tls.total_depth = 0
            left.set()

    def _help(self, q: _SharedQueue, entry: tuple, helpers: _CpuHelpers) -> bool:
        """A cpu helper runs a task taken from a parallel GraphTask's queue, then the successors
        it keeps back (Note [Continuation]), as the task's driver would; then more of ``q``'s
        tasks while no other parallel queue is listed (no trip through the helpers' lock, and
        this thread's state stays installed). Leaves this thread's state at its defaults.
        Returns True if a steal unlisted ``q``. See Note [Parallel cpu workers]."""
        _, _, task, node, inputs = entry
        entry = None
        tls.local_queue = q
        tls.total_depth = task.depth
        _install(task)
        run = self._run_task
        queues = helpers._queues
        unlisted = False
        private = _Private()  # this thread's private work (Note [Private work]); empty when run returns None
        try:
            while True:
                if _profiler is None:
                    successor = run(task, node, inputs, q, private)
                else:  # See Note [Profiler hooks]
                    successor = _record_node(run, task, node, inputs, q, private)
                if successor is not None:
                    node, inputs, _ = successor
                    successor = None
                    continue
                if len(queues) > 1 or len(helpers.threads) > helpers.n or helpers.stopping:
                    break  # another backward waits for a helper, or this one is to retire
                entry = q.steal()
                if type(entry) is not tuple:
                    unlisted = entry is False
                    break
                node, inputs = entry[3], entry[4]  # (a parallel queue holds one task's nodes)
                entry = None
        except BaseException as e:  # noqa: BLE001 - an engine bug: fail the task, keep the helper
            err = RuntimeError(f"backward could not finish: engine thread {threading.current_thread().name} "
                               f"failed on an internal error ({_describe(e)})")
            err.__cause__ = e
            self._fail(task, err, None)
        finally:
            tls.local_queue = None
            tls.total_depth = 0
            tls.current_task = None
            tls.grad_enabled = True
            if used.anomaly:
                tls.anomaly, tls.anomaly_check_nan = False, True
            if used.saved_hooks:
                tls.saved_hooks, tls.saved_hooks_disabled = (), None
        return unlisted

    def run_async(self, job: Callable[[], None]) -> None:
        """Run ``job`` (a whole backward call) on a pool thread."""
        if _profiler is not None:  # See Note [Profiler hooks]
            job = _profiler.handed_to_pool(job)
        self._pool.submit(job)

    def _thread_main(self, wait_for: GraphTask | None, root: Node | None = None) -> None:
        """Pop and run tasks from this thread's queue until ``wait_for`` is done (forever
        for device workers, until a shutdown task); ``root``, if given, is ``wait_for``'s
        root task, already counted as outstanding, run before the first pop. Restores the
        thread's state on exit."""
        q = tls.local_queue
        serial = not q.multi  # (a local: a class attribute read through an instance is not specialized)
        pop = _pop_for(q, wait_for)
        saved = _save_state()
        run = self._run_task
        private = None if serial else _Private()  # this thread's private work (Note [Private work])
        # ``current`` mirrors tls.current_task, which only this loop changes here: a node's
        # reentrant backward restores it before returning (a thread-local read per node saved).
        current = tls.current_task
        task = None  # the task in hand, from its pop to the end of its node and continuations
        try:
            while wait_for is None or not wait_for.done:
                if wait_for is None and not q._heap and (current is not None or not tls.grad_enabled):
                    current = _forget_task()  # an idle device worker keeps no task
                if root is not None:
                    task, node, inputs, root = wait_for, root, [], None
                else:
                    _, _, task, node, inputs = pop()
                if task is None:
                    if node is _SHUTDOWN:
                        return
                    continue  # a wake-up: re-check wait_for.done
                while True:
                    if current is not task:
                        _install(task)
                        current = task
                    if _profiler is None:
                        successor = run(task, node, inputs, q, private)
                    else:  # See Note [Profiler hooks]
                        successor = _record_node(run, task, node, inputs, q, private)
                    if task.done:
                        tls.current_task = current = None  # drop the reference; the next task re-installs
                    if successor is None:
                        break
                    # See Note [Continuation]: run the successor now, unless a queued task
                    # comes first (only this thread pops q, so its top cannot move away).
                    node, inputs, tie = successor
                    heap = q._heap
                    if heap and serial:  # (a parallel task's thread keeps its successor)
                        prio = -(task.prio_base | node.sequence_nr)
                        top = heap[0]
                        if top[0] < prio or (top[0] == prio and (tie is None or top[1] < tie)):
                            if _profiler is not None:  # See Note [Profiler hooks]
                                _profiler.queued(task, node)
                            q.push(prio, task, node, inputs, tie)
                            break
                task = node = inputs = successor = None  # as PyTorch destroys its NodeTask: hold nothing while waiting
            if wait_for.error is not None:
                _drop_failed(q, wait_for)
        except BaseException as e:  # noqa: BLE001 - see Note [Interrupts]
            self._abandon(wait_for, task, e)
            if wait_for is None:
                raise  # a device worker's own loop failed: _device_worker takes over
            _drop_failed(q, wait_for)
        finally:
            _restore_state(saved)

    def _run_task(self, task: GraphTask, fn: Node, inputs: list, served: ReadyQueue | None,
                  private: _Private | None = None) -> tuple | None:
        """Run one node and route its outputs (PyTorch's evaluate_function). Returns the one
        ready successor bound for ``served``, the queue this thread serves, that it kept back
        to run next on this thread (Note [Continuation]); ``served`` None keeps none back.
        ``private``: the private work of this thread in a parallel task (Note [Private work])."""
        outputs = None
        if private is not None and (fn._hooks is not None or fn.runs_user_code) and (private or private.sums):
            self._publish_all(task, private)  # the user's code may wait for it: Note [Private work]
        if task.error is None:
            try:
                if fn._hooks is None and not task.uses_streams and (task.exec_info is None or fn not in task.captures):
                    # (With exec_info, a node that runs and captures nothing is a needed node:
                    # _route queues only runnable nodes, or runnable is None because every
                    # node reached is needed or captured: Note [Needed nodes] in autograd.py.)
                    # The common case of _call_function, inlined (row ``chain_bwd``).
                    if inputs and inputs[0] is None and _all_none(inputs):
                        # Nothing arrived: outputs undefined too, but for the nodes torch
                        # still runs (Node.runs_without_gradients).
                        outputs = fn.apply(inputs) if fn.runs_without_gradients else [None] * len(fn.next_edges)
                    elif fn.apply_is_backward:
                        # Node.apply's body, one frame less (row ``chain_bwd``)
                        outputs = fn.backward(*inputs)
                    else:
                        outputs = fn.apply(inputs)
                    if not task.keep_graph and fn._saved:
                        fn._saved = None  # release_variables()
                    if task.anomaly and task.check_nan:
                        _check_nan(fn, outputs)
                elif task.exec_info is None:
                    outputs = self._call_function(task, fn, inputs, True)
                else:
                    outputs = self._capture_and_call(task, fn, inputs)
            except BaseException as e:  # noqa: BLE001 - see Note [Errors]
                self._fail(task, e, fn)
        err = None
        successor = None
        # See Note [Completion] and Note [Shared tasks] in engine/graph_task.py: the lock only
        # once another thread may route into task (row ``chain_bwd``).
        if task.shared:
            if private is not None and outputs and task.single is not None:
                successor = _private_step(task, fn, outputs, private)  # See Note [Private work]
                if successor is _ABSORBED:
                    outputs = successor = None  # routed, and nothing left to run: settle under the lock
                elif successor is not None:
                    if private:
                        self._share_if_idle(task, private)
                    return successor
            task.lock.acquire()
        try:
            if outputs and task.error is None:
                try:
                    successor = self._route(task, fn, outputs, served)
                except BaseException as e:  # noqa: BLE001
                    # Claim the failure before the decrement, under the lock: once outstanding
                    # can reach 0 on another thread, that thread's _complete must see the error
                    # (else the backward returns normally with gradients missing).
                    if task.error is None:
                        task.error = err = e
            if private is None:
                task.outstanding -= 1
                last = task.outstanding == 0
            else:
                successor, last = self._settle(task, private, successor)
        finally:
            if task.shared:  # held since the top, or taken by _push if this routing shared task
                task.lock.release()
        if err is not None:
            self._fail(task, err, fn, claimed=True)
            err = None  # this frame may end up in err's traceback: no cycle through it
        if last:
            self._complete(task)
        elif private and successor is not None:
            self._share_if_idle(task, private)
        return successor

    def _settle(self, task: GraphTask, private: _Private, successor: tuple | None) -> tuple:
        """The end of a parallel thread's node, under task.lock: the next task and whether the
        task is done. This thread's count in ``outstanding`` covers its private work, so it
        passes to the next private task; once the stack is empty the sums are handed over and
        the count is given back. A failed task drops both. See Note [Private work]."""
        if task.error is not None:
            private.clear()
            private.sums = None
        elif successor is None:
            if private:
                return private.pop(), False
            if private.sums is not None:
                successor = self._flush_sums(task, private, True)
        task.outstanding -= 1
        return successor, task.outstanding == 0

    def _share_if_idle(self, task: GraphTask, private: _Private) -> None:
        """Queue some of this thread's private work if a thread waits for work of this task
        (a sleeping helper, or the driver waiting in pop): one task per waiting thread."""
        q = task.owner_queue
        idle = q._helpers.idle + q._waiters  # (unlocked reads: a stale one only delays a share)
        if idle:
            self._publish(task, private, idle)

    def _publish(self, task: GraphTask, private: _Private, k: int) -> None:
        """Queue this thread's ``k`` oldest private tasks (the largest subtrees left, in the
        depth-first order they were found), each counted in ``outstanding`` from now on."""
        tasks = private[:k]
        del private[:k]
        with task.lock:
            for node, buf, _ in tasks:
                self._push(task, _cpu, node, buf)

    def _publish_all(self, task: GraphTask, private: _Private) -> None:
        """Queue all of this thread's private work, and hand its leaf sums over."""
        with task.lock:
            for node, buf, _ in private:
                self._push(task, _cpu, node, buf)
            private.clear()
            if private.sums is not None:
                self._flush_sums(task, private, False)

    def _flush_sums(self, task: GraphTask, private: _Private, keep_one: bool) -> tuple | None:
        """Hand this thread's leaf sums over to the task (caller holds task.lock): each leaf's
        count drops by the edges summed, the sum goes into its buffer, and a leaf whose last
        edge this was is ready: queued, or with ``keep_one`` the first returned to run next
        (counted in ``outstanding``, as _route's continuation). See Note [Private work]."""
        sums, private.sums = private.sums, None
        deps, not_ready = task.dependencies, task.not_ready
        kept = None
        for leaf, (g, k) in sums.items():  # type: ignore[union-attr]
            count = deps[leaf] - k
            if count:
                deps[leaf] = count
                buf = not_ready.get(leaf)
                if buf is None:
                    buf = not_ready[leaf] = [None]
            else:
                del deps[leaf]
                buf = not_ready.pop(leaf, None) or [None]
            if g is not None:
                _buffer_add(buf, 0, g, leaf, False)
            if count:
                continue
            if keep_one and kept is None:
                task.outstanding += 1
                kept = (leaf, buf, None)
            else:
                self._push(task, _cpu, leaf, buf)
        return kept

    def _call_function(self, task: GraphTask, fn: Node, inputs: list, tensor_hooks: bool) -> Any:
        if fn._hooks is not None and type(fn) is AccumulateGrad:
            inputs = disown(inputs)  # its hooks see them: See Note [Gradient ownership] (tensor.py)
        if task.uses_streams and fn.stream is not None:  # See Note [Streams]
            dev, stream = fn.stream
            ws = tls.worker_stream
            if ws is not None and stream is ws[1] and dev is ws[0]:  # See Note [Worker stream]
                try:
                    outputs = self._call_hooks_and_apply(task, fn, inputs, tensor_hooks)
                finally:
                    dev.keep_current(stream)
            else:
                with dev.stream_context(stream):  # hooks run on the node's stream too, as in PyTorch
                    outputs = self._call_hooks_and_apply(task, fn, inputs, tensor_hooks)
            if not fn.next_edges:
                task.leaf_streams.append(fn.stream)
        else:
            outputs = self._call_hooks_and_apply(task, fn, inputs, tensor_hooks)
        if not task.keep_graph:
            fn.release_variables()
        if task.anomaly and task.check_nan:
            _check_nan(fn, outputs)
        return outputs

    @staticmethod
    def _call_hooks_and_apply(task: GraphTask, fn: Node, inputs: list, tensor_hooks: bool) -> Any:
        hooks = fn._hooks
        if hooks is not None:
            if tensor_hooks:
                inputs = hooks.run_tensor_pre(fn, inputs)
            inputs = hooks.run_pre(fn, inputs)
        if inputs and inputs[0] is None and _all_none(inputs) and not fn.runs_without_gradients:
            # Nothing arrived (all gradients undefined): the node's outputs are undefined too
            # (but for the nodes torch still runs: Node.runs_without_gradients).
            outputs = [None] * len(fn.next_edges)
        else:
            outputs = fn.apply(inputs)  # (GraphRoot takes no inputs)
        if hooks is not None and hooks.post:
            if task.runnable is not None and fn.computes_only_needed:
                outputs = _mask_unneeded(task, fn, outputs)
            # the hooks may keep what they see: Note [Gradient ownership] (tensor.py)
            outputs = hooks.run_post(fn, disown(list(outputs)), inputs)
        return outputs

    def _capture_and_call(self, task: GraphTask, fn: Node, inputs: list) -> Any:
        """grad()/backward(inputs=): run ``fn`` if it is needed, and record the requested
        gradients arriving at it, as torch's evaluate_function does: a needed node's inputs
        are captured before its tensor hooks (which then run with the node); a node that is
        not needed (captured, or the single root: Note [Needed nodes] in autograd.py) runs
        only its tensor hooks and retains_grad, and the capture takes their result."""
        needed = fn in task.exec_info  # type: ignore[operator]
        caps = task.captures.get(fn)  # type: ignore[union-attr]
        if caps is None and needed:
            return self._call_function(task, fn, inputs, True)
        if type(fn) is AccumulateGrad:
            inputs = disown(inputs)  # hooks and grad()'s caller see them: Note [Gradient ownership]
        if caps and task.uses_streams and fn.stream is not None:  # See Note [Streams]
            task.leaf_streams.append(fn.stream)  # the caller reads the captured gradient: sync it
        if needed:
            for slot, idx in caps:  # type: ignore[union-attr]
                task.captured[idx] = inputs[slot]
            return self._call_function(task, fn, inputs, True)
        hooks = fn._hooks
        if hooks is not None:
            if task.uses_streams and fn.stream is not None:  # See Note [Streams]
                dev, stream = fn.stream
                with dev.stream_context(stream):
                    inputs = hooks.run_tensor_pre(fn, inputs)
            else:
                inputs = hooks.run_tensor_pre(fn, inputs)
        for slot, idx in caps or ():
            task.captured[idx] = inputs[slot]
        return None

    def _route(self, task: GraphTask, fn: Node, outputs: Any, served: ReadyQueue | None) -> tuple | None:
        """Send each output gradient to its successor's input buffer; queue the successors
        that became ready (caller holds task.lock, or task is not shared). One dict operation per edge.

        ``served``: the queue this thread serves. The highest-priority successor that becomes
        ready bound for it (cpu work of a task this thread drives, or work of this device
        worker's device) is not queued but returned, counted as outstanding, for the caller
        to run next. See Note [Continuation]."""
        edges = fn.next_edges
        if len(outputs) != len(edges):
            raise RuntimeError(
                f"{fn.name()} returned {len(outputs)} gradients, but its forward had {len(edges)} inputs"
            )
        deps = task.dependencies
        not_ready = task.not_ready
        runnable = task.runnable
        cut = task.cut
        streams = task.uses_streams
        deferred = None  # (node, buffer, its place among equal keys once another is queued, or None)
        for (next_node, nr), g in zip(edges, outputs):
            if next_node is None:
                continue
            if runnable is not None and (next_node not in runnable or (cut and (next_node, nr) in cut)):
                # grad()/backward(inputs=) does not need next_node, or no_grad_vars cut the edge (a
                # task with cut edges always has runnable: Note [Needed nodes] in autograd.py)
                continue
            if streams and g is not None:
                _sync_streams(fn, next_node, g)
            count = deps[next_node]
            if count != 1:
                deps[next_node] = count - 1
                buf = not_ready.get(next_node)
                if buf is None:
                    buf = not_ready[next_node] = [None] * next_node.num_inputs
                if g is not None:
                    _buffer_add(buf, nr, g, next_node, streams)
                continue
            # next_node is ready.
            del deps[next_node]
            buf = not_ready.pop(next_node, None) if not_ready else None  # (a chain never has buffers)
            if buf is None and next_node.num_inputs == 1:
                # A single-input node made ready by its only edge needs no buffer.
                buf = [g]
                device = _cpu if g is None else g.device
            else:
                if buf is None:
                    buf = [None] * next_node.num_inputs
                if g is not None:
                    _buffer_add(buf, nr, g, next_node, streams)
                device = _buffer_device(buf)
            if served is not None and (self._device_queue(device) if device.needs_worker else task.owner_queue) is served:
                if deferred is None:
                    task.outstanding += 1
                    deferred = (next_node, buf, None)
                    continue
                if next_node.sequence_nr > deferred[0].sequence_nr:
                    # Keep the higher-priority one back (Note [Continuation]); queue the other,
                    # at its place among equal keys.
                    self._push(task, device, deferred[0], deferred[1], deferred[2])
                    deferred = (next_node, buf, None)
                    continue
            if deferred is not None and deferred[2] is None:
                # the kept-back successor precedes what is queued after it: its place, taken now
                deferred = (deferred[0], deferred[1], _next_tie())
            self._push(task, device, next_node, buf)
        return deferred

    def _fail(self, task: GraphTask, e: BaseException, fn: Node | None, claimed: bool = False) -> None:
        """See Note [Errors]. ``claimed``: the caller already stored ``e`` in ``task.error``
        under the lock (a routing error, claimed before the task's outstanding count drops)."""
        if not claimed and not task.claim_error(e):
            return
        try:
            _add_node_to_message(e, fn, task.anomaly)
        finally:  # the error is claimed: whatever happens, the owner must learn of it
            task.mark_done()

    def _abandon(self, wait_for: GraphTask | None, in_hand: GraphTask | None, e: BaseException) -> None:
        """An exception escaped ``_thread_main``'s loop (outside any node: an interrupt at a
        wait or between two nodes, or an engine bug). Fail the task whose node or continuation
        it cut off, and the task the loop drives, so no thread waits for either and their
        queued work is dropped. See Note [Interrupts]."""
        if in_hand is not None and in_hand is not wait_for and not in_hand.done:
            self._fail(in_hand, e if wait_for is not None else _worker_lost(e), None)
        if wait_for is not None:
            self._fail(wait_for, e, None)

    def _complete(self, task: GraphTask) -> None:
        """See Note [Completion] in engine/graph_task.py."""
        if task.error is not None:
            return
        try:
            cbs = task.final_callbacks
            while cbs:  # a callback may queue more callbacks
                cbs.pop(0)()
        except BaseException as e:  # noqa: BLE001
            self._fail(task, e, None)
            return
        if task.leaf_streams:
            _sync_caller_streams(task)
        task.mark_done()




def _share(task: GraphTask) -> None:
    """Make ``task`` a parallel task: routed under its lock, but for private steps (Note [Private work])."""
    task.shared = True
    if not task.uses_streams:
        task.single = {n for n, c in task.dependencies.items() if c == 1}


class _Private(list):
    """One thread's private work in one parallel task: the ready tasks it holds (the list, a
    stack) and the gradients it summed for leaves other edges reach too (``sums``:
    AccumulateGrad -> [sum or None, edges summed]). See Note [Private work]."""

    __slots__ = ("sums",)

    def __init__(self) -> None:
        super().__init__()
        self.sums: dict | None = None


_ABSORBED = (None, None, None)  # _private_step routed every output, and this thread holds nothing to run


def _private_step(task: GraphTask, fn: Node, outputs: Any, private: _Private) -> tuple | None:
    """Route ``fn``'s outputs without the task's lock when each goes to a cpu node that only
    this edge reaches (its dependency count was 1 when the task started), or to a leaf's
    AccumulateGrad: the first kind is ready now and no other thread can ever reach it; a
    leaf's gradients are summed here and handed over later (``_flush_sums``). Of the ready
    ones the first is returned to run next on this thread and the others go on ``private``.
    No count, buffer, queue or ``outstanding`` changes. When nothing became ready, returns
    the top of ``private``, or ``_ABSORBED`` if it is empty; None when an output cannot be
    routed so (the locked path routes them all). See Note [Private work]."""
    edges = fn.next_edges
    if task.error is not None or len(outputs) != len(edges):
        return None
    runnable, cut, single = task.runnable, task.cut, task.single
    ready = []
    leaves = None
    for edge, g in zip(edges, outputs):  # decide for every output before changing anything
        next_node = edge[0]
        if next_node is None:
            continue
        if runnable is not None and (next_node not in runnable or (cut and edge in cut)):
            continue
        if g is not None and g.device.needs_worker:
            return None
        if next_node in single:  # type: ignore[operator]
            if next_node.num_inputs == 1:
                ready.append((next_node, [g], None))
            else:
                buf = [None] * next_node.num_inputs
                buf[edge[1]] = g
                ready.append((next_node, buf, None))
        elif type(next_node) is AccumulateGrad:
            if leaves is None:
                leaves = []
            leaves.append((next_node, g))
        else:
            return None
    if leaves is not None:
        # A leaf other edges reach too: its count is shared, so sum here (every edge counts, a
        # None gradient too) and hand the sum over once (_flush_sums).
        sums = private.sums
        if sums is None:
            sums = private.sums = {}
        for leaf, g in leaves:
            acc = sums.get(leaf)
            if acc is None:
                sums[leaf] = [g, 1]
            else:
                acc[1] += 1
                if g is not None:
                    _buffer_add(acc, 0, g, leaf, False)
    if not ready:
        return private.pop() if private else _ABSORBED
    if len(ready) > 1:
        # This thread runs them as the serial schedule would: the highest priority first,
        # equal keys in edge order (a stable sort), the rest from the top of its stack.
        ready.sort(key=_task_priority, reverse=True)
        private.extend(ready[:0:-1])
    return ready[0]


def _task_priority(task: tuple) -> int:
    return task[0].sequence_nr


def _mask_unneeded(task: GraphTask, fn: Node, outputs: Any) -> list:
    """Under grad()/backward(inputs=), torch's built-in formulas compute no gradient for an edge
    the call does not need (should_compute_output), so a node's post-hooks see None there:
    the same outputs, None where the edge leads to a node that will not run (or is cut)."""
    runnable, cut = task.runnable, task.cut
    return [None if g is not None and (edge[0] is not None and (edge[0] not in runnable or (cut and edge in cut)))
            else g for g, edge in zip(outputs, fn.next_edges)]


def _sync_streams(producer: Node, consumer: Node, g: Any) -> None:
    """Make the consumer's stream wait for what the producer queued. See Note [Streams]."""
    c = consumer.stream
    if c is None:
        return
    p = producer.stream
    if p is None:
        # A producer without a stream (GraphRoot, a cpu node such as ToCopyBackward0) queued
        # ``g`` on this thread's current stream of g's device: this thread just ran it.
        dev = g.device
        if not dev.has_streams:
            return
        p = (dev, dev.current_stream())
    if p[0] is c[0] and (p[1] is c[1] or p[1] == c[1]):
        return  # one stream of one device (cupy's Stream.null is shared by every GPU)
    c[0].wait_event(c[1], p[0].record_event(p[1]))


def _buffer_add(buf: list, i: int, g: Any, consumer: Node, streams: bool) -> None:
    """Add gradient ``g`` into slot ``i`` of ``consumer``'s input buffer: take it if the slot
    is empty, else sum. An AccumulateGrad's slot holds a sum the engine owns, summed into in
    place (Note [Gradient ownership] in tensor.py); other sums are out of place (recorded under
    create_graph). With streams the sum runs on the consumer's stream."""
    old = buf[i]
    if old is None:
        buf[i] = g
    elif streams and consumer.stream is not None:  # See Note [Streams]
        dev, stream = consumer.stream
        with dev.stream_context(stream):
            buf[i] = old + g
    elif type(consumer) is AccumulateGrad and not tls.grad_enabled:
        buf[i] = engine_sum(old, g, consumer)
    else:
        buf[i] = old + g


def _sync_caller_streams(task: GraphTask) -> None:
    """Before backward returns, the caller's streams wait for the leaf accumulations."""
    for dev, stream in set((d, s) for d, s in task.leaf_streams):
        caller = task.caller_streams.get(dev)  # type: ignore[union-attr]
        if caller is not None and caller is not stream and caller != stream:
            dev.wait_event(caller, dev.record_event(stream))


def _buffer_device(buf: list) -> devices.Device:
    for g in buf:
        if g is not None:
            return g.device
    return _cpu


_engine = Engine()
os.register_at_fork(after_in_child=lambda: _engine._after_fork_in_child())


def get_engine() -> Engine:
    """The process-wide executor.

    >>> from threadgrad import engine
    >>> engine.get_engine().max_recursion_depth > 0
    True
    """
    return _engine


def format_stack_for_anomaly() -> list[str]:
    return traceback.format_stack()[:-2]
