"""Many threads calling backward()/grad() at once, combined with the other features.

An attack on concurrency *between* backward calls (tests/engine/test_cpu_workers_attack.py
attacks the parallel cpu workers inside one call): hooks of every kind, retain_grad,
multi-grad hooks and final callbacks on one shared retained graph; ``set_cpu_workers`` toggled
and ``shutdown()`` called while calls run; async futures mixed with synchronous calls;
checkpoints of both variants over a shared parameter; thread-local saved-tensor hooks, grad
mode and anomaly mode; in-place changes to a saved tensor while other threads run backward;
concurrent ``retain_graph=False`` calls through a shared trunk; reentrant custom Functions
whose inner call fails in some calls only. Two bugs found here are fixed, each with its test:
a backward_async future completed while its pool thread still carried the caller's state
(test_future_done_callbacks_do_not_run_under_the_submitting_threads_state), and a backward
nested in a device worker's node took the shutdown task (test_shutdown_while_a_device_worker_
waits_inside_a_reentrant_backward).

PyTorch 2.13 semantics: concurrent calls on a graph retained by every call accumulate every
gradient into a shared leaf (none lost or doubled), each hook runs once per call per tensor,
an error stays in the call that raised it, and a call through freed buffers raises
"Trying to backward through the graph a second time". Values are small integers in float64,
so every sum is exact whatever the order and is compared with ``==``. Each scenario runs
several times per test and with ``set_cpu_workers`` 0, 1 and 2; the whole file was also run
many times on free-threaded CPython (no GIL), where these races are real.
"""
from __future__ import annotations

import collections
import os
import threading

import numpy as np
import pytest

from threadgrad import engine, ops
from fork_util import RAISED, run_in_fork
from stress_helpers import assert_engine_usable, f64, run_threads

MODIFIED = "one of the variables needed for gradient computation has been modified by an inplace operation"
FREED = "Trying to backward through the graph a second time"
WORKERS = (0, 1, 2)


@pytest.fixture
def workers(request):
    prev = engine.set_cpu_workers(request.param)
    yield request.param
    engine.set_cpu_workers(prev)


class _Counter:
    """A thread-safe tally of hook calls."""

    def __init__(self) -> None:
        self.c: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def __call__(self, key: str) -> None:
        with self._lock:
            self.c[key] += 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", WORKERS, indirect=True)
def test_every_hook_kind_counts_once_per_call_and_grads_sum_exactly(workers):
    """8 threads x 4 calls on one retained graph, half backward() and half grad(): tensor hooks
    on an interior tensor and a leaf, retain_grad, node pre/post hooks, a post-accumulate-grad
    hook, a multi-grad hook and a final callback queued from a hook. (After TestMultithreadAutograd
    test_simple_backward_same_input, with hooks added.)"""
    threads, calls = 8, 4
    for _ in range(5):
        w = f64([1.0, 2.0])
        tally = _Counter()
        h = ops.mul(w, 2.0)
        h.retain_grad()
        h.register_hook(lambda g: tally("h") or engine.queue_callback(lambda: tally("callback")))
        w.register_hook(lambda g: tally("w"))
        w.register_post_accumulate_grad_hook(lambda t: tally("post_acc"))
        y = ops.sum(ops.mul(h, h))  # dy/dw = 8w, dy/dh = 2h = 4w
        y.grad_fn.register_prehook(lambda go: tally("pre"))
        y.grad_fn.register_hook(lambda gi, go: tally("post"))
        engine.register_multi_grad_hook([h, w], lambda gs: tally("multi" if all(g is not None for g in gs) else "multi_none"))

        def call(i):
            for _ in range(calls):
                if i % 2:
                    y.backward(retain_graph=True)
                else:
                    (g,) = engine.grad(y, [w], retain_graph=True)
                    assert g.tolist() == [8.0, 16.0]

        run_threads(threads, call)
        total, nb = threads * calls, threads // 2 * calls
        assert w.grad.tolist() == [8.0 * nb, 16.0 * nb]
        assert h.grad.tolist() == [4.0 * total, 8.0 * total]  # grad() fills retained grads too, as torch
        assert tally.c == {"h": total, "w": total, "pre": total, "post": total, "multi": total,
                           "callback": total, "post_acc": nb}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", WORKERS, indirect=True)
def test_multi_grad_hook_any_and_all_once_per_call(workers):
    a, b = f64([1.0]), f64([2.0])
    ha, hb = ops.mul(a, 2.0), ops.mul(b, 2.0)
    y = ops.sum(ops.mul(ha, hb))
    tally = _Counter()
    engine.register_multi_grad_hook([ha, hb], lambda g: tally("any"), mode="any")
    engine.register_multi_grad_hook([ha, hb], lambda gs: tally(f"all:{[g is None for g in gs]}"))

    def call(i):
        for _ in range(10):
            if i % 3 == 0:  # needs ha only: hb's gradient is not computed, so the "all" hook sees None
                (g,) = engine.grad(y, [a], retain_graph=True)
                assert g.tolist() == [8.0]
            else:
                y.backward(retain_graph=True)

    run_threads(8, call)
    n_grad, n_backward = 3 * 10, 5 * 10
    assert tally.c == {"any": 80, "all:[False, False]": n_backward, "all:[False, True]": n_grad}
    assert a.grad.tolist() == [8.0 * n_backward] and b.grad.tolist() == [4.0 * n_backward]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("depth", [0, 40])
@pytest.mark.parametrize("stopper", ["shutdown", "toggle", "both"])
def test_shutdown_and_set_cpu_workers_from_another_thread_while_checkpoints_run(depth, stopper):
    """6 threads run checkpoints (both variants) over a shared parameter on virtual devices,
    half of them through backward_async, while another thread keeps calling shutdown() and/or
    set_cpu_workers(0..2); max_recursion_depth 0 sends every reentrant level to a pool thread.
    No call may fail or hang, and the shared parameter gets every call's gradient."""
    eng = engine.get_engine()
    old_depth, old_workers = eng.max_recursion_depth, engine.set_cpu_workers(0)
    eng.max_recursion_depth = depth
    P = f64([1.0, -2.0])
    stop = threading.Event()

    def disturb():
        n = 0
        while not stop.is_set():
            if stopper != "toggle":
                eng.shutdown()
            if stopper != "shutdown":
                engine.set_cpu_workers(n % 3)
            n += 1

    def call(i):
        for k in range(8):
            a = f64([float(i + 1), float(k + 1)])
            dev = f"virtual:{(i + k) % 2 + 1}"

            def fn(x):
                xv = ops.to(x, dev)
                pv = ops.to(P, dev)
                return ops.to(ops.mul(ops.mul(xv, pv), pv), "cpu")

            reentrant = k % 2 == 0
            out = engine.checkpoint(fn, a, use_reentrant=reentrant)
            loss = ops.sum(engine.checkpoint(lambda z: ops.mul(z, P), out, use_reentrant=reentrant))
            if k % 3 == 0:
                assert engine.backward_async(loss).result(timeout=60) is None
            else:
                loss.backward()
            assert a.grad.tolist() == [1.0, -8.0], (i, k, reentrant)  # P^3

    t = threading.Thread(target=disturb, daemon=True)
    t.start()
    try:
        run_threads(6, call, timeout=120)
    finally:
        stop.set()
        t.join(60)
        eng.max_recursion_depth = old_depth
        engine.set_cpu_workers(old_workers)
    assert not t.is_alive()
    expect = sum(3 * np.array([i + 1, k + 1.0]) for i in range(6) for k in range(8)) * np.array([1.0, 4.0])
    assert P.grad.tolist() == expect.tolist()  # d(a P^3)/dP = 3 a P^2
    assert_engine_usable()


@pytest.mark.timeout(120)
def test_shutdown_while_calls_on_a_shared_graph_run_loses_no_accumulation():
    w = f64([1.0, 2.0])
    part = ops.to(ops.mul(ops.to(w, "virtual:1"), 3.0), "cpu")
    y = ops.sum(ops.add(ops.mul(w, w), part))  # dy/dw = 2w + 3
    stop = threading.Event()
    t = threading.Thread(target=lambda: [engine.get_engine().shutdown() for _ in iter(stop.is_set, True)],
                         daemon=True)
    t.start()

    def call(i):
        for k in range(20):
            if k % 2:
                y.backward(retain_graph=True)
            else:
                engine.backward_async(y, retain_graph=True).result(timeout=60)

    try:
        run_threads(6, call)
    finally:
        stop.set()
        t.join(60)
    assert not t.is_alive()
    assert w.grad.tolist() == [5.0 * 120, 7.0 * 120]
    assert_engine_usable()


@pytest.mark.timeout(120)
def test_async_futures_mixed_with_sync_calls_on_a_shared_graph():
    w = f64([1.0, 2.0])
    y = ops.sum(ops.mul(ops.to(ops.mul(ops.to(w, "virtual:2"), 2.0), "cpu"), w))  # 2w^2: grad 4w
    done = []

    def call(i):
        futures = [engine.backward_async(y, retain_graph=True) for _ in range(6)]
        futures += [engine.grad_async(y, w, retain_graph=True) for _ in range(3)]
        y.backward(retain_graph=True)
        for f in futures[:6]:
            assert f.result(timeout=60) is None
        for f in futures[6:]:
            assert [g.tolist() for g in f.result(timeout=60)] == [[4.0, 8.0]]
        done.append(i)

    run_threads(8, call)
    assert sorted(done) == list(range(8))
    assert w.grad.tolist() == [4.0 * 56, 8.0 * 56]  # 8 threads x (6 async + 1 sync)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", WORKERS, indirect=True)
def test_saved_tensors_hooks_apply_only_to_their_own_threads_recording(workers):
    """Half the threads record checkpoints (both variants) and a create_graph backward under
    their own saved_tensors_hooks: their pack and unpack see only their own tensors, the other
    threads' never run, even though nodes of every thread run on the same device workers.
    (TestMultithreadAutograd test_multithread_saved_tensors_hooks, extended.)"""
    P = f64([1.0, -2.0])

    def call(i):
        seen = [0, 0]

        def pack(t):
            seen[0] += 1
            return (i, t)

        def unpack(p):
            assert p[0] == i, f"thread {i} unpacked thread {p[0]}'s tensor"
            seen[1] += 1
            return p[1]

        for k in range(6):
            a = f64([float(i + 1), float(k + 1)])
            fn = lambda t: ops.mul(ops.mul(t, P), P)  # noqa: E731
            x = f64([float(k + 1), 2.0])
            xv = ops.to(x, f"virtual:{i % 2 + 1}")
            q = ops.sum(ops.mul(ops.mul(xv, xv), ops.to(P, xv.device)))  # grad x: 2 P x
            if i % 2:
                with engine.saved_tensors_hooks(pack, unpack):
                    z = ops.mul(engine.checkpoint(fn, a, use_reentrant=k % 2 == 0), P)
                    (gx,) = engine.grad(q, x, create_graph=True)
            else:
                z = ops.mul(engine.checkpoint(fn, a, use_reentrant=k % 2 == 0), P)
                (gx,) = engine.grad(q, x, create_graph=True)
            ops.sum(z).backward()
            assert a.grad.tolist() == [1.0, -8.0]
            assert gx.tolist() == [2.0 * (k + 1), -8.0]
            ops.sum(gx).backward()  # d/dx = 2P, d/dP = 2x
            assert x.grad.tolist() == [2.0, -4.0]
        return seen

    seen = run_threads(8, call)
    for i, (packed, unpacked) in enumerate(seen):
        if i % 2:
            assert packed > 0 and unpacked > 0, (i, packed, unpacked)
        else:
            assert (packed, unpacked) == (0, 0), i
    expect = np.zeros(2)
    for i in range(8):
        for k in range(6):
            expect += 3 * np.array([i + 1, k + 1.0]) * np.array([1.0, 4.0]) + 2 * np.array([k + 1.0, 2.0])
    assert P.grad.tolist() == expect.tolist()


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_grad_mode_and_anomaly_mode_are_per_thread():
    W = f64([1.0, 2.0])

    def call(i):
        out = collections.Counter()
        for k in range(20):
            x = f64([float(k), 1.0])
            z = ops.sum(ops.mul(ops.sqrt(ops.mul(x, 0.0)), 0.0))  # 0 * 1/(2 sqrt 0): NaN in backward
            if i % 4 == 0:
                with engine.no_grad():
                    assert not ops.mul(x, W).requires_grad
                z.backward()  # no anomaly on this thread: NaN gradients, no error
                out["nan"] += bool(np.isnan(x.grad.numpy()).all())
            elif i % 4 == 1:
                with engine.detect_anomaly():
                    ops.sum(ops.mul(x, W)).backward()
                    with pytest.raises(RuntimeError, match="returned nan values in its 0th output"):
                        ops.sum(ops.mul(ops.sqrt(ops.mul(x, 0.0)), 0.0)).backward()
                out["raised"] += 1
            elif i % 4 == 2:
                with engine.set_grad_enabled(False):
                    with engine.enable_grad():
                        ops.sum(ops.mul(x, W)).backward()
                    assert not ops.mul(x, W).requires_grad
                out["ok"] += 1
            else:
                y = ops.sum(ops.mul(x, W))
                assert y.requires_grad and engine.is_grad_enabled()
                y.backward()
                out["ok"] += 1
        return out

    res = run_threads(8, call)
    for i, out in enumerate(res):
        assert sum(out.values()) == 20, (i, out)
    expect = sum(np.array([k, 1.0]) for i in range(8) if i % 4 for k in range(20))
    assert W.grad.tolist() == expect.tolist()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", WORKERS, indirect=True)
def test_in_place_change_of_a_saved_tensor_during_backward_raises_or_is_exact(workers):
    """One thread keeps bumping the version of a tensor the shared graph saved (same values),
    three run backward on it: each call either gives the exact gradient or raises torch's
    message; never another error, never a wrong sum."""
    outcomes: collections.Counter = collections.Counter()
    for _ in range(5):
        w = f64([1.0, 2.0])
        h = ops.to(ops.mul(ops.to(w, "virtual:1"), 3.0), "cpu")
        y = ops.sum(ops.mul(h, h))  # dy/dw = 18w

        def call(i):
            out = collections.Counter()
            for _ in range(30):
                if i == 0:
                    with engine.no_grad():
                        h.mul_(1.0)
                    continue
                try:
                    y.backward(retain_graph=True)
                    out["ok"] += 1
                except RuntimeError as e:
                    assert MODIFIED in str(e), str(e)
                    out["modified"] += 1
            return out

        res = sum(run_threads(4, call), collections.Counter())
        outcomes += res
        ok = res["ok"]
        assert (w.grad.tolist() if w.grad is not None else [0.0, 0.0]) == [18.0 * ok, 36.0 * ok]
    assert outcomes["modified"] > 0
    assert_engine_usable()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", WORKERS, indirect=True)
@pytest.mark.parametrize("device", ["cpu", "virtual:1"])
def test_concurrent_calls_without_retain_graph_through_a_shared_trunk(workers, device):
    """TestMultithreadAutograd test_python_thread_in_middle: a Y-shaped graph whose trunk is
    shared; calls that do not retain it either succeed exactly or raise torch's error, and
    (in the serial schedule) at least one succeeds; with retain_graph=True all succeed."""
    for _ in range(10):
        x = f64([1.0, 2.0])
        trunk = ops.to(ops.mul(ops.to(x, device), ops.to(x, device)), "cpu")  # x^2: saves x

        def call(i):
            branch = ops.sum(ops.mul(trunk, trunk))  # x^4: grad 4x^3
            try:
                branch.backward(retain_graph=i % 2 == 0)
                return "ok"
            except RuntimeError as e:
                assert FREED in str(e) and "Specify retain_graph=True" in str(e), str(e)
                return "freed"

        res = collections.Counter(run_threads(8, call))
        assert set(res) <= {"ok", "freed"}
        if workers == 0:
            assert res["ok"] >= 1
        ok = res["ok"]
        assert (x.grad.tolist() if x.grad is not None else [0.0, 0.0]) == [4.0 * ok, 32.0 * ok]

    x = f64([1.0, 2.0])
    trunk = ops.to(ops.mul(ops.to(x, device), ops.to(x, device)), "cpu")
    run_threads(5, lambda i: ops.sum(ops.mul(trunk, trunk)).backward(retain_graph=True))
    assert x.grad.tolist() == [20.0, 160.0]


class _Reentrant(engine.Function):
    """Backward runs an inner grad() (reentrant) whose hook queues a final callback and fails
    when the outer gradient is negative."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ops.mul(x, 1.0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        fail = float(g.detach().numpy().sum()) < 0
        with engine.enable_grad():
            xd = x.detach().requires_grad_(True)
            inner = ops.mul(ops.sum(ops.mul(ops.mul(xd, xd), g)), 1.0)
            ran = []

            def hook(_):
                engine.queue_callback(lambda: ran.append(1))
                if fail:
                    raise KeyError("inner hook")

            inner.register_hook(hook)
            (r,) = engine.grad(inner, xd)
            assert ran == [1]  # the innermost call's callback, run before it returned
        return r


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", WORKERS, indirect=True)
@pytest.mark.parametrize("depth", [0, 40])
def test_reentrant_errors_and_callbacks_stay_with_their_call(workers, depth):
    eng = engine.get_engine()
    old, eng.max_recursion_depth = eng.max_recursion_depth, depth
    try:
        w = f64([1.0, 2.0])
        y = ops.sum(_Reentrant.apply(ops.mul(w, 2.0)))  # grad w: 8w
        tally = _Counter()
        y.register_hook(lambda g: engine.queue_callback(lambda: tally("outer")))

        def call(i):
            out = collections.Counter()
            for k in range(12):
                fail = i % 3 == 1 and k % 2 == 0
                seed = engine.tensor(np.float64(-1.0 if fail else 1.0))
                try:
                    if i % 2:
                        y.backward(seed, retain_graph=True)
                        out["backward"] += 1
                    else:
                        (g,) = engine.grad(y, w, seed, retain_graph=True)
                        assert g.tolist() == [8.0, 16.0]
                    assert not fail
                except KeyError:
                    assert fail
                    out["failed"] += 1
            return out

        res = sum(run_threads(8, call), collections.Counter())
        assert res["failed"] == 3 * 6 and res["backward"] == 4 * 12 - 2 * 6
        assert w.grad.tolist() == [8.0 * res["backward"], 16.0 * res["backward"]]
        assert tally.c["outer"] == 8 * 12 - res["failed"]
    finally:
        eng.max_recursion_depth = old


class _Gated(engine.Function):
    """Identity whose backward waits for ``gate``: the test adds a done-callback to the
    future while its call is still running, so the callback runs on the engine's pool thread."""

    gate = threading.Event()

    @staticmethod
    def forward(ctx, x):
        return ops.mul(x, 1.0)

    @staticmethod
    def backward(ctx, g):
        assert _Gated.gate.wait(30)
        return g


@pytest.mark.timeout(60)
@pytest.mark.parametrize("state", ["no_grad", "saved_tensors_hooks"])
def test_future_done_callbacks_do_not_run_under_the_submitting_threads_state(state):
    x = f64([1.0])
    packed = []
    _Gated.gate.clear()
    loss = ops.sum(_Gated.apply(x))
    seen = {}
    if state == "no_grad":
        with engine.no_grad():
            fut = engine.backward_async(loss)
    else:
        with engine.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
            fut = engine.backward_async(loss)

    def callback(f):  # user code outside the backward call: this (pool) thread's own state
        y = ops.mul(x, x)
        seen.update(grad_enabled=engine.is_grad_enabled(), recorded=y.requires_grad, packed=len(packed))

    fut.add_done_callback(callback)
    _Gated.gate.set()
    assert fut.result(timeout=30) is None
    engine.get_engine().shutdown()  # joins the pool thread: the callback has run
    assert x.grad.tolist() == [1.0]
    assert seen == {"grad_enabled": True, "recorded": True, "packed": 0}


class _Hold(engine.Function):
    """Identity whose backward signals ``entered`` and waits for ``release``."""

    entered = threading.Event()
    release = threading.Event()

    @staticmethod
    def forward(ctx, x):
        return ops.mul(x, 1.0)

    @staticmethod
    def backward(ctx, g):
        _Hold.entered.set()
        assert _Hold.release.wait(30)
        return g


def _shutdown_during_reentrant_backward_on_a_worker(depth: int | None = None) -> int:
    """The scenario of the test below; returns 0 if right, else a code naming what went wrong.
    ``depth``: the engine's max_recursion_depth (0: the reentrant backward runs on a pool thread,
    which drives it on the worker's queue while the worker waits)."""
    eng = engine.get_engine()
    if depth is not None:
        eng.max_recursion_depth = depth
    _Hold.entered.clear()
    _Hold.release.clear()
    a = f64([1.0, 2.0])

    def fn(x):  # x on virtual:1; the re-run's inner graph waits on virtual:2 (in _Hold)
        y = ops.to(_Hold.apply(ops.mul(ops.to(x, "virtual:2"), 3.0)), "virtual:1")
        return ops.mul(y, x)  # 3 x^2: d/da = 6a

    loss = ops.sum(ops.to(engine.checkpoint(fn, ops.to(a, "virtual:1"), use_reentrant=True), "cpu"))
    outcome = {}

    def call():
        try:
            loss.backward()
            outcome["grad"] = None if a.grad is None else a.grad.tolist()
        except RuntimeError as e:  # a clear error would be acceptable too
            outcome["error"] = str(e)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    if not _Hold.entered.wait(30):  # virtual:1's worker now waits inside the reentrant backward
        return 9
    stopper = threading.Thread(target=eng.shutdown, daemon=True)
    try:
        stopper.start()
        caller.join(3)  # (the bug: the call returns here already, before _Hold is released)
    finally:
        _Hold.release.set()
    caller.join(20)
    if caller.is_alive():
        return 2  # backward hangs
    if not (outcome.get("grad") == [6.0, 12.0] or "error" in outcome):
        return 3  # the bug: backward returned normally with a.grad None
    stopper.join(20)
    if stopper.is_alive():
        return 4  # the bug: shutdown() hangs, its worker waiting on a closed queue
    assert_engine_usable()
    return 0


@pytest.mark.timeout(90)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("depth", [None, 0], ids=["inline", "pool thread"])
def test_shutdown_while_a_device_worker_waits_inside_a_reentrant_backward(depth):
    # In a child process: the bug leaves a worker stuck for good, which must not leak into other tests.
    code = run_in_fork(lambda: _shutdown_during_reentrant_backward_on_a_worker(depth), timeout=80)
    assert code == 0, {2: "backward hangs", 3: "backward returned a wrong/missing gradient",
                       4: "shutdown() hangs", RAISED: "the scenario raised"}.get(code, code)
