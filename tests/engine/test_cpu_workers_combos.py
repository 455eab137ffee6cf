"""Parallel cpu workers (``set_cpu_workers(n)``) where they meet other features: checkpoints,
retain_grad and ``inputs=``, double backward, hooks and callbacks that run a backward, deep
reentrant chains, devices, saved-tensor hooks, anomaly mode, grad mode inside a node, errors
(a node, a hook, a callback, KeyboardInterrupt on a helper), n changed from inside a backward,
and several callers at once. test_cpu_workers.py has the API, the equality with n = 0, the
observable parallelism and the orderings; cpu_workers_util.py the helpers.
"""
from __future__ import annotations

import re
import threading

import numpy as np
import pytest
from threads_util import cpu_helpers as helpers
from cpu_workers_util import (BARRIER_TIMEOUT, HELPER, Boom, Log, NaNGrad, Nest, Probe, f64, wide,
                              wide_expected, wide_grad_sq)

from threadgrad import engine, ops


@pytest.fixture(params=[0, 1, 2], ids=lambda n: f"n{n}")
def n(request, workers) -> int:
    workers(request.param)
    return request.param


# --- 5. combinations ----------------------------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_with_a_shared_parameter(workers, use_reentrant):
    """W used inside 8 checkpointed branches and outside them: same grads as n = 0 (integers)."""
    xv = np.arange(6.0).reshape(2, 3) - 2.0
    wv = np.array([[1.0, -1.0, 2.0], [0.0, 1.0, -2.0], [3.0, 1.0, 1.0]])

    def run_once():
        x, w = f64(xv), f64(wv)

        def body(h):
            return ops.matmul(ops.matmul(h, w), w) * 2.0

        outs = [engine.checkpoint(body, x * float(i + 1), use_reentrant=use_reentrant) + ops.matmul(x, w)
                for i in range(8)]
        ops.sum(ops.stack(outs)).backward()
        return x.grad._data.copy(), w.grad._data.copy()

    workers(0)
    want = run_once()
    for k in (1, 2):
        workers(k)
        for _ in range(3):
            got = run_once()
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.timeout(60)
def test_retain_grad_and_inputs(n):
    x = f64([1.0, 2.0])
    h = x * 2.0
    h.retain_grad()
    loss = wide(h, 60)
    want = wide_expected(h._data, 60)[0]
    loss.backward(inputs=[h], retain_graph=True)
    np.testing.assert_array_equal(h.grad._data, want)
    assert x.grad is None
    h.grad = None
    loss.backward(inputs=[x, h], retain_graph=True)
    np.testing.assert_array_equal(h.grad._data, want)
    np.testing.assert_array_equal(x.grad._data, 2.0 * want)
    gh, gx = engine.grad(loss, [h, x])
    np.testing.assert_array_equal(gh._data, want)
    np.testing.assert_array_equal(gx._data, 2.0 * want)
    np.testing.assert_array_equal(h.grad._data, 2.0 * want)  # as torch: grad() runs retain_grad's hook


@pytest.mark.timeout(60)
def test_grad_with_create_graph_then_double_backward(n):
    """sum_i c_i x**3 over 50 branches: first grad 3x**2 C, second 6x C; nodes of the first
    backward must run with grad mode on, on every thread."""
    log = Log()
    x = f64([1.0, -2.0, 3.0])
    loss = wide(x, 50, mid=lambda i, t: Probe.apply(t * x * x, log, i))
    (g,) = engine.grad(loss, x, create_graph=True)
    c = sum(float(i % 5 + 1) * (i % 3 + 1) for i in range(50))
    np.testing.assert_array_equal(g._data, 3.0 * c * x._data ** 2)
    assert g.requires_grad and g.grad_fn is not None
    assert all(t[2] is True for t in log.tags())  # grad mode = create_graph on whichever thread
    g.sum().backward()
    np.testing.assert_array_equal(x.grad._data, 6.0 * c * x._data)


@pytest.mark.timeout(60)
def test_hooks_that_run_a_backward_of_their_own(n):
    results = []
    lock = threading.Lock()

    def hook(i):
        def fn(g):
            leaf = f64([float(i)])
            with engine.enable_grad():
                out = wide(leaf, 10)
            out.backward()  # reentrant: from a hook, on whatever thread runs the node
            with lock:
                results.append((i, leaf.grad.tolist()))
            return g * 2.0
        return fn

    x = f64([1.0])
    loss = wide(x, 40, mid=lambda i, t: (t.register_hook(hook(i)), t)[1])
    loss.backward()
    inner = wide_expected(np.ones(1), 10)[0].tolist()
    assert sorted(results) == [(i, inner) for i in range(40)]
    np.testing.assert_array_equal(x.grad._data, 2.0 * wide_expected(x._data, 40)[0])


@pytest.mark.timeout(60)
def test_reentrant_chain_deeper_than_max_recursion_depth(n):
    eng = engine.get_engine()
    old = eng.max_recursion_depth
    eng.max_recursion_depth = 2
    try:
        x = f64([1.0])
        ops.sum(ops.stack([Nest.apply(x * float(i + 1), 7) for i in range(4)])).backward()
        assert x.grad.tolist() == [10.0]
    finally:
        eng.max_recursion_depth = old


@pytest.mark.timeout(60)
def test_virtual_device_nodes_run_on_their_worker_beside_parallel_cpu_nodes(n, virtual1, virtual2):
    log = Log()
    x = f64([1.0, 2.0])
    devs = ["cpu", virtual1, virtual2]

    def mid(i, t):
        d = devs[i % 3]
        v = ops.to(t, d) if d != "cpu" else t
        p = Probe.apply(v * 1.0, log, (i, str(d)))
        return ops.to(p, "cpu") if d != "cpu" else p

    wide(x, 90, mid=mid).backward()
    np.testing.assert_array_equal(x.grad._data, wide_expected(x._data, 90)[0])
    with log.lock:
        items = list(log.items)
    assert len(items) == 90
    for (tag, *_), th in items:
        (i, dev) = tag
        if dev == "cpu":
            assert th is threading.current_thread() or HELPER.match(th.name), th.name
        else:
            assert th.name == f"threadgrad-{dev}", (dev, th.name)


@pytest.mark.timeout(60)
def test_saved_tensors_hooks_of_the_forward_and_of_the_caller(workers):
    """Hooks active in the forward pack/unpack the same tensors as with n = 0; hooks active
    around a create_graph backward are installed on the threads running its nodes (the ops a
    node records are packed by them)."""
    def run_once():
        counts = {"pack": 0, "unpack": 0}
        lock = threading.Lock()

        def pack(t):
            with lock:
                counts["pack"] += 1
            return t.detach().clone()

        def unpack(t):
            with lock:
                counts["unpack"] += 1
            return t

        x = f64([1.0, 2.0, -1.0])
        with engine.saved_tensors_hooks(pack, unpack):
            loss = wide(x, 40, mid=lambda i, t: t * t)
        fwd = dict(counts)
        with engine.saved_tensors_hooks(pack, unpack):
            (g,) = engine.grad(loss, x, create_graph=True)
        during = {k: counts[k] - fwd[k] for k in counts}
        (gg,) = engine.grad(g.sum(), x)
        return fwd, during, g._data.copy(), gg._data.copy()

    workers(0)
    want = run_once()
    assert want[1]["pack"] > 0  # the case is live: backward's recorded ops do save tensors
    for k in (1, 2):
        workers(k)
        got = run_once()
        assert got[:2] == want[:2]
        np.testing.assert_array_equal(got[2], want[2])
        np.testing.assert_array_equal(got[3], want[3])


@pytest.mark.timeout(60)
def test_anomaly_mode_is_installed_on_helper_threads(workers):
    """Two probes meet at a barrier, so one runs on a helper: both see anomaly mode on, and a
    NaN from a node run anywhere is reported naming it."""
    workers(1)
    log = Log()
    barrier = threading.Barrier(2)
    x = f64([1.0, 2.0])
    with engine.detect_anomaly():
        loss = Probe.apply(x, log, 0, barrier).sum() + Probe.apply(x * 2.0, log, 1, barrier).sum()
        loss.backward()
    assert x.grad.tolist() == [3.0, 3.0]
    assert len(log.threads()) == 2
    assert [t[3] for t in log.tags()] == [True, True]

    for _ in range(5):
        x = f64([1.0, 2.0])
        with engine.detect_anomaly():
            loss = wide(x, 30, mid=lambda i, t: NaNGrad.apply(t) if i == 17 else t)
            with pytest.warns(UserWarning, match="Error detected in NaNGradBackward"):
                with pytest.raises(RuntimeError, match="Function 'NaNGradBackward' returned nan values in its 0th output"):
                    loss.backward()


@pytest.mark.timeout(60)
def test_no_grad_and_enable_grad_inside_a_custom_backward(n):
    log = Log()

    class Inner(engine.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            with engine.no_grad():
                doubled = g * 2.0
            assert doubled.grad_fn is None
            with engine.enable_grad():
                xd = x.detach().requires_grad_()
                y = (xd * xd).sum()
                assert y.grad_fn is not None
            (gx,) = engine.grad(y, xd)
            log.add(engine.is_grad_enabled())  # back to the backward's mode (no create_graph)
            return doubled * gx * 0.5  # = g * 2x

    x = f64([1.0, -3.0])
    wide(x, 30, mid=lambda i, t: Inner.apply(t)).backward()
    c = [float(i % 5 + 1) * (i % 3 + 1) ** 2 for i in range(30)]
    np.testing.assert_array_equal(x.grad._data, 2.0 * x._data * sum(c))
    assert log.tags() == [False] * 30
    assert engine.is_grad_enabled()


# --- 6. errors ----------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_a_node_raising_fails_the_backward_with_its_type_and_name(n):
    armed = [True]
    x = f64([1.0, 2.0])
    loss = wide(x, 200, mid=lambda i, t: Boom.apply(t, ValueError("boom 117"), armed) if i == 117 else t)
    before = helpers()
    with pytest.raises(ValueError, match=re.escape("boom 117 [raised in BoomBackward during backward]")):
        loss.backward(retain_graph=True)
    assert all(t.is_alive() for t in before)
    # the engine is usable, the retained graph too (other branches may have accumulated: reset)
    armed[0] = False
    x.grad = None
    loss.backward()
    np.testing.assert_array_equal(x.grad._data, wide_expected(x._data, 200)[0])
    y = f64([3.0])
    wide(y, 50).backward()
    np.testing.assert_array_equal(y.grad._data, wide_expected(y._data, 50)[0])
    assert all(t.is_alive() for t in before)


@pytest.mark.timeout(60)
def test_a_node_running_when_another_fails_routes_nothing(workers):
    """Branch A's node runs on one thread while branch B's node fails on another: A finishes,
    but its gradient reaches nothing (its leaf keeps no grad, its successor never runs)."""
    workers(1)
    started, finished = threading.Event(), threading.Event()
    log = Log()

    class SlowA(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            started.set()
            b_failed.wait(BARRIER_TIMEOUT)
            finished.set()
            return g

    b_failed = threading.Event()

    class FailB(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            assert started.wait(BARRIER_TIMEOUT), "A never started: the nodes did not run at once"
            b_failed.set()
            raise KeyError("b failed")

    a, b = f64([1.0]), f64([2.0])
    loss = SlowA.apply(a * 1.0).sum() + FailB.apply(b * 1.0).sum()
    with pytest.raises(KeyError, match="b failed"):
        loss.backward()
    assert finished.wait(BARRIER_TIMEOUT)
    # The one helper finishes SlowA's node (routing included) before it can take a node of
    # the next backward, which needs it (a barrier of two): after that, nothing can arrive.
    barrier = threading.Barrier(2)
    y = f64([1.0])
    (Probe.apply(y, log, 0, barrier).sum() + Probe.apply(y, log, 1, barrier).sum()).backward()
    assert y.grad.tolist() == [2.0]
    assert a.grad is None and b.grad is None
    c = f64([1.0])
    wide(c, 20).backward()
    np.testing.assert_array_equal(c.grad._data, wide_expected(c._data, 20)[0])


@pytest.mark.timeout(60)
def test_a_hook_raising_fails_the_backward(n):
    x = f64([1.0])

    def mid(i, t):
        if i == 33:
            def bad(g):
                raise OverflowError("hook 33 failed")
            t.register_hook(bad)
        return t

    loss = wide(x, 60, mid=mid)
    with pytest.raises(OverflowError, match="hook 33 failed"):
        loss.backward()
    y = f64([2.0])
    wide(y, 60).backward()
    np.testing.assert_array_equal(y.grad._data, wide_expected(y._data, 60)[0])


@pytest.mark.timeout(60)
def test_a_final_callback_raising_fails_the_backward_after_every_node(n):
    class CallbackError(Exception):
        pass

    log = Log()

    def bad():
        log.add("cb")
        raise CallbackError("callback failed")

    x = f64([1.0])

    def mid(i, t):
        p = Probe.apply(t, log, i)
        if i == 5:
            p.register_hook(lambda g: engine.queue_callback(bad))
        return p

    loss = wide(x, 80, mid=mid)
    with pytest.raises(CallbackError, match="callback failed"):
        loss.backward()
    tags = log.tags()
    assert tags[-1] == "cb" and tags.count("cb") == 1 and len(tags) == 81
    np.testing.assert_array_equal(x.grad._data, wide_expected(x._data, 80)[0])  # every node ran
    y = f64([2.0])
    wide(y, 30).backward()
    np.testing.assert_array_equal(y.grad._data, wide_expected(y._data, 30)[0])


@pytest.mark.timeout(60)
def test_an_error_in_a_reentrant_child_reaches_the_caller(n):
    class Parent(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            leaf = f64([1.0])
            with engine.enable_grad():
                out = wide(leaf, 20, mid=lambda i, t: Boom.apply(t, LookupError("child 4"))
                           if i == 4 else t)
            out.backward()
            return g

    x = f64([1.0])
    loss = ops.sum(ops.stack([Parent.apply(x) if i == 3 else x * 1.0 for i in range(10)]))
    with pytest.raises(LookupError, match=re.escape("child 4 [raised in BoomBackward during backward]")) as info:
        loss.backward()
    assert str(info.value).count("[raised in") == 1
    y = f64([1.0])
    wide(y, 20).backward()
    np.testing.assert_array_equal(y.grad._data, wide_expected(y._data, 20)[0])


# --- 7. several callers -------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_eight_callers_on_their_own_graphs(n, run_in_threads):
    def body(i):
        xv = np.arange(4.0) + i
        x = f64(xv)
        for _ in range(5):
            wide(x, 60).backward()
        return x.grad.tolist() == (5 * wide_expected(xv, 60)[0]).tolist()

    assert run_in_threads(8, body) == [True] * 8


@pytest.mark.timeout(60)
def test_eight_callers_on_one_shared_retained_graph(n, run_in_threads):
    rng = np.random.default_rng(3)
    xv = rng.integers(-3, 4, 3).astype(np.float64)
    wv = [rng.integers(-3, 4, 3).astype(np.float64) for _ in range(100)]
    x, ws = f64(xv), [f64(w) for w in wv]
    loss = wide(x, 100, ws, mid=lambda i, t: t * t)  # saved tensors: the graph is read by all
    run_in_threads(8, lambda i: [loss.backward(retain_graph=True) for _ in range(3)])
    c = [float(i % 5 + 1) for i in range(100)]
    gx = sum(c[i] * 2 * wv[i] ** 2 for i in range(100)) * xv
    np.testing.assert_array_equal(x.grad._data, 24 * gx)
    for i, w in enumerate(ws):
        np.testing.assert_array_equal(w.grad._data, 24 * c[i] * 2 * wv[i] * xv ** 2)


@pytest.mark.timeout(60)
def test_backward_async_futures(n):
    xs = [f64([float(i)]) for i in range(16)]
    futs = [engine.backward_async(wide(x, 40)) for x in xs]
    assert [f.result(timeout=30) for f in futs] == [None] * 16
    for x in xs:
        np.testing.assert_array_equal(x.grad._data, wide_expected(x._data, 40)[0])
    x = f64([1.0])
    bad = engine.backward_async(wide(x, 40, mid=lambda i, t: Boom.apply(t, TypeError("async 9")) if i == 9 else t))
    with pytest.raises(TypeError, match=re.escape("async 9 [raised in BoomBackward during backward]")):
        bad.result(timeout=30)
    (g,) = engine.grad_async(wide(x, 40), x).result(timeout=30)
    np.testing.assert_array_equal(g._data, wide_expected(x._data, 40)[0])


# --- more meeting points ------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_set_cpu_workers_from_inside_a_running_backward(workers):
    """A node that changes n: the running backward keeps its mode and finishes exactly; the
    helpers beyond the new n retire after their node; the next backward has the new mode."""
    log = Log()

    class Resize(engine.Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.k = k
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            log.add(engine.set_cpu_workers(ctx.k))
            return g, None

    workers(2)
    x = f64([1.0, 2.0])
    wide(x, 100, mid=lambda i, t: Resize.apply(t, 0) if i == 50 else t).backward()
    np.testing.assert_array_equal(x.grad._data, wide_expected(x._data, 100)[0])
    assert workers(0) == 0
    for t in helpers():
        t.join(10)
    assert helpers() == []
    # serial backward raising n midway: it stays serial (all on the caller), the next is parallel
    x = f64([1.0])
    probes = Log()
    wide(x, 60, mid=lambda i, t: Probe.apply(Resize.apply(t, 1) if i == 0 else t, probes, i)).backward()
    assert probes.threads() == {threading.current_thread()}
    assert workers(1) == 1
    barrier = threading.Barrier(2)
    (Probe.apply(x, probes, "a", barrier).sum() + Probe.apply(x, probes, "b", barrier).sum()).backward()
    np.testing.assert_array_equal(x.grad._data, wide_expected(x._data, 60)[0] + 2.0)


@pytest.mark.timeout(60)
def test_grad_captures_many_non_leaf_inputs(n):
    x = f64([1.0, 2.0])
    hs = [x * float(i + 1) for i in range(100)]
    loss = ops.sum(ops.stack([h * float(i % 7 + 1) for i, h in enumerate(hs)]))
    unused = f64([5.0])
    grads = engine.grad(loss, hs + [unused, x], allow_unused=True)
    for i, g in enumerate(grads[:100]):
        assert g.tolist() == [float(i % 7 + 1)] * 2, i
    assert grads[100] is None
    assert grads[101].tolist() == [float(sum((i + 1) * (i % 7 + 1) for i in range(100)))] * 2
    assert x.grad is None and all(h.grad is None for h in hs)


@pytest.mark.timeout(60)
def test_post_accumulate_grad_hooks_run_once_per_accumulation_under_eight_callers(n, run_in_threads):
    """A leaf's accumulations are serialized: 40 calls by 8 callers give exactly 40 calls'
    worth and 40 hook runs. (Like torch's AccumulateGrad, the hook runs after the lock is
    released, so two hooks may see the same .grad; each element is still a whole number of
    calls' worth, between 1 and 40.)"""
    x = f64([1.0, 2.0])
    seen = []
    lock = threading.Lock()

    def hook(t):
        with lock:
            seen.append(t.grad.tolist())

    x.register_post_accumulate_grad_hook(hook)
    loss = wide(x, 50, mid=lambda i, t: t * t)
    per_call = [2.0 * wide_grad_sq(50) * v for v in (1.0, 2.0)]
    run_in_threads(8, lambda i: [loss.backward(retain_graph=True) for _ in range(5)])
    assert x.grad.tolist() == [40 * v for v in per_call]
    assert len(seen) == 40
    for s in seen:
        for v, unit in zip(s, per_call):
            assert v / unit in [float(k) for k in range(1, 41)], (s, per_call)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["all", "any"])
def test_multi_grad_hook(n, mode):
    """register_multi_grad_hook over tensors whose gradients are computed on different
    threads: "all" fires once with every gradient, "any" once."""
    fired = []
    xs = [f64([float(i)]) for i in range(30)]
    hs = [x * 2.0 for x in xs]
    engine.register_multi_grad_hook(hs, lambda g: fired.append(g), mode=mode)
    ops.sum(ops.stack([h * float(i + 1) for i, h in enumerate(hs)])).backward()
    assert len(fired) == 1
    if mode == "all":
        assert [g.tolist() for g in fired[0]] == [[float(i + 1)] for i in range(30)]
    else:
        assert fired[0].tolist()[0] in [float(i + 1) for i in range(30)]
    assert [x.grad.tolist() for x in xs] == [[2.0 * (i + 1)] for i in range(30)]


@pytest.mark.timeout(60)
def test_keyboard_interrupt_raised_by_a_node_on_a_helper(workers):
    """A node that raises KeyboardInterrupt on a helper thread (it met the caller's node at a
    barrier, so it runs beside it): the caller gets KeyboardInterrupt naming the node; the
    helper survives and serves the next backward."""
    workers(1)
    main = threading.current_thread()

    class InterruptOnHelper(engine.Function):
        @staticmethod
        def forward(ctx, x, barrier):
            ctx.barrier = barrier
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            ctx.barrier.wait(BARRIER_TIMEOUT)
            if threading.current_thread() is not main:
                raise KeyboardInterrupt("stop on the helper")
            return g, None

    barrier = threading.Barrier(2)
    x = f64([1.0])
    loss = InterruptOnHelper.apply(x, barrier).sum() + InterruptOnHelper.apply(x * 2.0, barrier).sum()
    with pytest.raises(KeyboardInterrupt, match=re.escape("stop on the helper [raised in InterruptOnHelperBackward")):
        loss.backward()
    before = helpers()
    assert len(before) == 1
    log = Log()
    barrier = threading.Barrier(2)
    y = f64([1.0])
    (Probe.apply(y, log, 0, barrier).sum() + Probe.apply(y, log, 1, barrier).sum()).backward()
    assert y.grad.tolist() == [2.0] and len(log.threads()) == 2
    assert helpers() == before and before[0] in log.threads()  # the same helper: it survived


@pytest.mark.timeout(60)
def test_a_final_callback_that_runs_a_backward(n):
    """A final callback (run by whichever thread finishes the call) may run a backward of its
    own: it finishes, exactly, before the outer call returns."""
    inner = []

    def callback():
        leaf = f64([2.0])
        with engine.enable_grad():
            out = wide(leaf, 30)
        out.backward()
        inner.append(leaf.grad.tolist())

    x = f64([1.0])
    loss = wide(x, 40, mid=lambda i, t: (t.register_hook(lambda g: engine.queue_callback(callback)), t)[1]
                if i == 7 else t)
    loss.backward()
    assert inner == [wide_expected(np.ones(1), 30)[0].tolist()]
    np.testing.assert_array_equal(x.grad._data, wide_expected(x._data, 40)[0])
