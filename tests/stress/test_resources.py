"""Resources: threads, memory, reference cycles, shutdown, fork.

* ``get_engine().shutdown()`` brings the thread count back to what it was before the engine
  started any thread; it is idempotent; the next backward restarts the workers; it may race
  with backward calls on other threads without losing or hanging any of them.
* 1,000 training steps of a small MLP (cpu and a virtual device) leave traced memory
  (tracemalloc) flat and create no reference cycles (``gc.collect()`` finds nothing);
  with the collector disabled, weak references to every node of a finished graph die at
  once (hooks, saved-tensor hooks, checkpoints, devices, futures included).
* A process forked after the engine started can run backward (the child recreates its workers).
"""
from __future__ import annotations

import gc
import os
import sys
import threading
import time
import tracemalloc
import weakref

import numpy as np
import pytest

from threadgrad import engine, ops
from fork_util import run_in_fork
from stress_helpers import DEVICES, assert_engine_usable, f64, run_threads

REPORT: dict = {}


def os_thread_count() -> int:
    """Threads of this process as the OS sees them (Linux), else Python's count."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def stable_os_thread_count(wait: float = 2.0) -> int:
    """The OS thread count once it stops changing (threads that earlier tests joined may
    still be leaving the kernel's list: join() returns just before the OS thread exits)."""
    deadline = time.monotonic() + wait
    n = os_thread_count()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        m = os_thread_count()
        if m == n:
            break
        n = m
    return n


def settled_os_thread_count(at_most: int, wait: float = 2.0) -> int:
    """The OS thread count, after giving just-joined threads a moment to exit."""
    deadline = time.monotonic() + wait
    n = os_thread_count()
    while n > at_most and time.monotonic() < deadline:
        time.sleep(0.01)
        n = os_thread_count()
    return n


def start_every_kind_of_engine_thread() -> None:
    """Device workers (virtual:1, virtual:2), pool threads (async and reentrant overflow)."""
    assert_engine_usable()
    x = f64([1.0, 2.0])
    engine.backward_async(ops.sum(ops.mul(x, x))).result(timeout=30)
    eng = engine.get_engine()
    old = eng.max_recursion_depth
    eng.max_recursion_depth = 0  # the reentrant child below goes to a pool thread
    try:
        y = f64([1.0, 2.0])
        out = engine.checkpoint(lambda t: ops.mul(t, t), y, use_reentrant=True)
        ops.sum(out).backward()
        assert y.grad.tolist() == [2.0, 4.0]
    finally:
        eng.max_recursion_depth = old


# --- threads and shutdown --------------------------------------------------------------

@pytest.mark.timeout(60)
def test_shutdown_returns_thread_count_to_before_the_engine_started_and_is_idempotent():
    eng = engine.get_engine()
    eng.shutdown()
    assert eng.worker_threads() == []
    before_py, before_os = threading.active_count(), stable_os_thread_count()
    start_every_kind_of_engine_thread()
    names = sorted(t.name for t in eng.worker_threads())
    assert "threadgrad-virtual:1" in names and "threadgrad-virtual:2" in names
    assert any(n.startswith("threadgrad-pool") for n in names)
    during_py, during_os = threading.active_count(), os_thread_count()
    assert during_py == before_py + len(names)
    eng.shutdown()
    after_py, after_os = threading.active_count(), settled_os_thread_count(before_os)
    assert eng.worker_threads() == []
    assert after_py == before_py
    assert after_os <= before_os  # (== unless a thread of an earlier test exited meanwhile)
    eng.shutdown()  # idempotent: nothing left to stop, no error, nothing started
    eng.shutdown()
    assert threading.active_count() == before_py and settled_os_thread_count(before_os) <= before_os
    assert not any(t.name.startswith("threadgrad-") for t in threading.enumerate())
    REPORT["threads"] = (before_os, during_os, after_os, names)
    print(f"\n[resources] OS threads: {before_os} before the engine started, {during_os} with "
          f"{len(names)} engine threads ({', '.join(names)}), {after_os} after shutdown()")
    # The next backward restarts the workers it needs, on every device.
    assert_engine_usable()
    names = {t.name for t in eng.worker_threads()}
    assert {"threadgrad-virtual:1", "threadgrad-virtual:2"} <= names


@pytest.mark.timeout(60)
def test_shutdown_inside_backward_is_refused():
    class ShutsDown(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            engine.get_engine().shutdown()
            return g  # pragma: no cover

    x = f64([1.0])
    with pytest.raises(RuntimeError, match="cannot be called from inside a backward pass"):
        ops.sum(ShutsDown.apply(x)).backward()
    assert_engine_usable()


@pytest.mark.timeout(120)
def test_shutdown_racing_with_backward_calls_on_other_threads_loses_nothing():
    """8 threads run backward on virtual devices (sync and async) while this thread calls
    shutdown() over and over: every call finishes, with an exact gradient; no hang."""
    eng = engine.get_engine()
    stop = threading.Event()
    shutdowns = [0]

    def body(i: int) -> list:
        bad = []
        if i == 0:
            while not stop.is_set():
                eng.shutdown()
                shutdowns[0] += 1
                time.sleep(0.0005)
            return bad
        for j in range(150):
            x = f64([float(i), float(j)])
            dev = DEVICES[1 + (i + j) % 2]
            loss = ops.sum(ops.mul(ops.to(ops.mul(ops.to(x, dev), 3.0), DEVICES[1 + (i + j + 1) % 2]), 2.0))
            if j % 3 == 0:
                engine.backward_async(loss).result(timeout=30)
            else:
                loss.backward()
            if x.grad.tolist() != [6.0, 6.0]:
                bad.append((i, j, x.grad.tolist()))
        if i == 1:
            stop.set()
        return bad

    try:
        results = run_threads(9, body, timeout=100)
    finally:
        stop.set()
    assert results == [[]] * 9
    assert shutdowns[0] > 10
    assert_engine_usable()


# --- memory ------------------------------------------------------------------------------

class MLP:
    """4 -> 8 -> 1 with relu, float64, plain SGD."""

    def __init__(self, seed: int = 0) -> None:
        rs = np.random.RandomState(seed)
        self.X = engine.tensor(rs.randn(16, 4), dtype=np.float64)
        self.Y = engine.tensor(rs.randn(16, 1), dtype=np.float64)
        self.params = [
            engine.tensor(rs.randn(4, 8) * 0.3, dtype=np.float64, requires_grad=True),
            engine.tensor(np.zeros(8), dtype=np.float64, requires_grad=True),
            engine.tensor(rs.randn(8, 1) * 0.3, dtype=np.float64, requires_grad=True),
        ]

    def loss(self, dev: str) -> engine.Tensor:
        w1, b1, w2 = (ops.to(p, dev) for p in self.params)
        h = ops.relu(ops.add(ops.matmul(ops.to(self.X, dev), w1), b1))
        d = ops.sub(ops.matmul(h, w2), ops.to(self.Y, dev))
        return ops.mean(ops.mul(d, d))

    def step(self, dev: str) -> float:
        loss = self.loss(dev)
        loss.backward()
        with engine.no_grad():
            for p in self.params:
                p.sub_(ops.mul(p.grad, 0.05))
                p.grad = None
        return loss.item()


@pytest.fixture
def gc_disabled():
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    yield
    if was:
        gc.enable()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("device", ["cpu", "virtual:1"])
def test_1000_training_steps_leave_no_memory_growth_and_no_cycles(device, gc_disabled):
    mlp = MLP()
    first = mlp.step(device)
    for _ in range(50):  # warm caches (first-use allocations) before measuring
        mlp.step(device)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(1000):
            last = mlp.step(device)
        cycles = len(_cyclic_garbage())  # (gc.collect()'s count, on the GIL build)
        gc.garbage.clear()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert last < first  # it trained
    growth = after - before
    REPORT.setdefault("memory", {})[device] = (before, after, growth, cycles)
    print(f"\n[resources] 1000 MLP steps on {device}: traced memory {before} -> {after} bytes "
          f"(growth {growth}), objects found by gc.collect(): {cycles}")
    assert cycles == 0, "training steps created reference cycles"
    assert growth < 32 * 1024, f"traced memory grew by {growth} bytes over 1000 steps"


def _graph_nodes(*tensors: engine.Tensor) -> list:
    """Weak references to every node reachable from ``tensors``."""
    seen, stack, refs = set(), [t.grad_fn for t in tensors if t.grad_fn is not None], []
    while stack:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        refs.append(weakref.ref(n))
        stack.extend(nxt for nxt, _ in n.next_functions)
    return refs


FREE_THREADED = not getattr(sys, "_is_gil_enabled", lambda: True)()


def _cyclic_garbage() -> set:
    """Run the collector and return the ids of the garbage that a reference cycle kept alive:
    the objects on a cycle, and everything reachable from one.

    Why not ``gc.collect()``'s count: on the free-threaded build, an object one thread made
    and another dropped (a queue entry or gradient a device worker made, dropped by the
    caller) is freed only when its maker runs again, or by the collector; a worker idle on its
    queue does not run, so the collector finds such objects unreachable and counts them with
    cyclic garbage. They are not cycles (reference counting frees them once the maker runs). So
    the collector runs with ``DEBUG_SAVEALL``, and the cycles are found among what it saved.
    On the GIL build every unreachable object is cyclic or hangs off a cycle, so this is the
    collector's count there."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
    finally:
        gc.set_debug(0)
    garbage = {id(o): o for o in gc.garbage}
    edges = {k: [id(r) for r in gc.get_referents(o) if id(r) in garbage] for k, o in garbage.items()}
    # Tarjan's strongly connected components, iteratively: a component of 2+ objects, or one
    # object referring to itself, is a cycle.
    index, low, on_stack, stack, cyclic, counter = {}, {}, set(), [], set(), [0]
    for root in garbage:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter[0]
                counter[0] += 1
                stack.append(v)
                on_stack.add(v)
            recurse = False
            for k in range(i, len(edges[v])):
                w = edges[v][k]
                if w not in index:
                    work.append((v, k + 1))
                    work.append((w, 0))
                    recurse = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in edges[v]:
                    cyclic.update(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    reached, todo = set(cyclic), list(cyclic)
    while todo:
        for w in edges[todo.pop()]:
            if w not in reached:
                reached.add(w)
                todo.append(w)
    return reached


def _alive(refs: list, wait: float = 0.5) -> list:
    """Names of the nodes still alive, after giving engine threads that finished the task
    up to ``wait`` seconds to go back to waiting (the collector stays disabled). On the
    free-threaded build the collector runs each round (See :func:`_cyclic_garbage`): a node
    it finds is alive only if a cycle held it."""
    deadline = time.monotonic() + wait
    try:
        while True:
            if FREE_THREADED:
                # (the collector clears weak references to what it finds unreachable, even
                # what DEBUG_SAVEALL keeps: name the nodes by id first)
                names = {id(n): n.name() for n in (r() for r in refs) if n is not None}
                held = _cyclic_garbage()
                cyclic = [v for k, v in names.items() if k in held]
                if cyclic:
                    return cyclic  # a cycle does not go away by waiting
                gc.garbage.clear()
                alive = [r().name() for r in refs if r() is not None]
            else:
                alive = [r().name() for r in refs if r() is not None]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.005)
    finally:
        gc.garbage.clear()


def _scenario(kind: str, device: str):
    """Build a graph exercising ``kind``; return (run, leaf, expected leaf grad, node refs).
    ``run(loss)`` runs the backward and returns nothing that references the graph."""
    x = f64([1.0, 2.0, 3.0])
    h = ops.to(x, device)
    extras = []
    if kind == "saved_hooks":
        with engine.saved_tensors_hooks(lambda t: t, lambda t: t):
            y = ops.mul(ops.tanh(h), h)
    elif kind == "checkpoint_reentrant":
        y = engine.checkpoint(lambda t: ops.mul(ops.tanh(t), t), h, use_reentrant=True)
    elif kind == "checkpoint_hooks":
        y = engine.checkpoint(lambda t: ops.mul(ops.tanh(t), t), h, use_reentrant=False)
    else:
        a = ops.tanh(h)
        y = ops.mul(a, h)
        if kind == "hooks":
            a.register_hook(lambda g: g * 1.0)
            a.retain_grad()
            y.grad_fn.register_prehook(lambda gs: None)
            y.grad_fn.register_hook(lambda gi, go: None)
            x.register_hook(lambda g: None)
            x.register_post_accumulate_grad_hook(lambda t: None)
            extras.append(a)
    loss = ops.sum(ops.mul(y, 2.0))
    th = np.tanh(np.array([1.0, 2.0, 3.0]))
    expected = 2.0 * (th + (1.0 - th * th) * np.array([1.0, 2.0, 3.0]))
    return loss, x, expected, extras


@pytest.mark.timeout(60)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["plain", "hooks", "saved_hooks", "checkpoint_reentrant", "checkpoint_hooks",
                                  "grad", "async"])
def test_graph_is_freed_without_the_cycle_collector(kind, device, gc_disabled):
    """After backward returns (and the caller drops its tensors), every node of the graph
    is gone at once, by reference counting alone: no cycles through saved tensors or
    hooks, and no engine thread keeps a finished task, node or gradient alive."""
    loss, x, expected, extras = _scenario(kind, device)
    refs = _graph_nodes(loss, *extras)
    assert len(refs) >= 4
    if kind == "grad":
        (g,) = engine.grad(loss, x)
        got = g.tolist()
        del g
    elif kind == "async":
        engine.backward_async(loss).result(timeout=30)
        got = x.grad.tolist()
    else:
        loss.backward()
        got = x.grad.tolist()
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    del loss, extras
    assert _alive(refs) == [], f"nodes still alive after backward ({kind} on {device})"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("device", DEVICES)
def test_the_check_sees_a_graph_kept_by_a_cycle(device, gc_disabled):
    """The check above fails where it must, on both builds: a hook whose closure holds the
    output makes the cycle output -> grad_fn -> hook -> output, and _alive reports its nodes."""
    x = f64([1.0, 2.0, 3.0])
    y = ops.mul(ops.tanh(ops.to(x, device)), 2.0)
    y.grad_fn.register_hook(lambda gi, go, _keep=y: None)
    refs = _graph_nodes(y)
    ops.sum(y).backward()
    del y
    assert "MulBackward0" in _alive(refs, wait=0.1)
    gc.collect()


# --- fork ----------------------------------------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_runs_backward_with_fresh_workers():
    start_every_kind_of_engine_thread()  # the parent's engine has live threads at fork time
    parent_workers = {t.ident for t in engine.get_engine().worker_threads()}
    assert parent_workers

    def child() -> int:
        eng = engine.get_engine()
        if eng.worker_threads():
            return 2  # threads do not survive fork: the child must start with none
        for dev in ("cpu", "virtual:1"):
            x = f64([1.0, 2.0])
            ops.sum(ops.mul(ops.mul(ops.to(x, dev), ops.to(x, dev)), 3.0)).backward()
            if x.grad.tolist() != [6.0, 12.0]:
                return 3
            (g,) = engine.grad(ops.sum(ops.to(x, dev)), x)
            if g.tolist() != [1.0, 1.0]:
                return 4
        f = engine.backward_async(ops.sum(ops.mul(x, x)))
        f.result(timeout=10)
        names = {t.name for t in eng.worker_threads()}
        return 0 if "threadgrad-virtual:1" in names else 5

    code = run_in_fork(child)
    assert code == 0, f"child failed with code {code}"
    # The parent's engine is untouched by the fork.
    assert parent_workers <= {t.ident for t in engine.get_engine().worker_threads()}
    assert_engine_usable()


@pytest.mark.timeout(60)
def test_a_queue_refuses_work_once_its_worker_has_taken_the_shutdown_task(monkeypatch):
    """White-box check of the hand-over that makes shutdown() safe under concurrent
    backward calls: ``Engine._push`` may hold a device queue it looked up just before
    shutdown() replaced the workers; its push must then either land before the worker's
    shutdown task (and be drained) or be refused (and retried on a new worker). A push
    accepted after the worker popped its shutdown task is never served: the backward
    that made it would wait forever. Here the worker is paused right after popping it."""
    from threadgrad.engine import executor

    eng = engine.get_engine()
    dev = "virtual:7"  # a device no other test uses
    popped, resume = threading.Event(), threading.Event()
    orig_pop = executor.ReadyQueue.pop
    target = None

    def pop(self, *args, **kwargs):  # (until, hold): a parallel task's driver passes them
        item = orig_pop(self, *args, **kwargs)
        if self is target and item[3] is executor._SHUTDOWN:
            popped.set()
            resume.wait(10)
        return item

    monkeypatch.setattr(executor.ReadyQueue, "pop", pop)
    eng.shutdown()
    assert_engine_usable((dev,))  # a new worker for dev, popping through the wrapper
    target = eng._workers[devices_get(dev)][0]
    stopper = threading.Thread(target=eng.shutdown, daemon=True)
    stopper.start()
    try:
        assert popped.wait(10), "the worker never took its shutdown task"
        accepted = target.push(0, None, None, None)  # what a stale _push would do now
    finally:
        resume.set()
        stopper.join(10)
    assert not stopper.is_alive()
    monkeypatch.undo()
    assert accepted is False, "a task pushed after the worker took its shutdown task is accepted and lost"
    assert_engine_usable((dev,))


def devices_get(spec: str):
    from threadgrad import devices

    return devices.get(spec)


class _Boom(Exception):
    pass


class _FailingNode(engine.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2.0

    @staticmethod
    def backward(ctx, g):
        raise _Boom("failing on purpose")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["backward", "grad", "async"])
def test_graph_of_a_failed_backward_is_freed_without_the_cycle_collector(mode, device, gc_disabled):
    """A backward that fails must not leave its graph (and saved activations) in cyclic
    garbage: once the caller drops the exception and its tensors, every node is gone by
    reference counting alone, as after a failed backward in PyTorch. A cycle typically
    runs exception -> traceback -> an engine frame whose local is the GraphTask ->
    GraphTask.error -> exception (autograd._result breaks it)."""
    x = f64([1.0, 2.0])
    loss = ops.sum(ops.mul(_FailingNode.apply(ops.mul(ops.to(x, device), 3.0)), 5.0))
    refs = _graph_nodes(loss)
    with pytest.raises(_Boom) as info:
        if mode == "backward":
            loss.backward()
        elif mode == "grad":
            engine.grad(loss, x)
        else:
            engine.backward_async(loss).result(timeout=30)
    assert "failing on purpose" in str(info.value)
    del info, loss
    assert _alive(refs) == [], f"nodes of a failed backward ({mode} on {device}) are kept alive"
