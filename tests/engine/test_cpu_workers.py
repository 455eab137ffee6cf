"""Parallel cpu workers inside one backward: ``set_cpu_workers(n)`` (issue 21, part 2).

With n > 0 the ready cpu nodes of one backward run on n helper threads beside its caller.
What must hold (docs/autograd.md): the gradients of n = 0; each node runs once, after all its
input gradients arrived; one tensor's hooks in registration order on one thread; final
callbacks after every node; a reentrant child finishes before its parent continues; errors
keep their type and name the node; the caller's thread-local state (grad mode, anomaly,
saved-tensor hooks) is installed on whichever thread runs a node. The tests run most cases
with n = 0, 1 and 2 and compare against n = 0, closed forms (integer-valued float64 data, so
sums are exact in any order) or torch. Tests that need two nodes to run *at the same time*
(a ``threading.Barrier`` met inside two backward functions) run only with n > 0: with n = 0
they would deadlock by design. tests/stress/test_cpu_workers_stress.py repeats the risky ones
under threads and many seeds.
"""
from __future__ import annotations

import re
import threading

import numpy as np
import pytest
from threads_util import cpu_helpers as helpers
from cpu_workers_util import HELPER, Log, Probe, f64, wide, wide_expected

import threadgrad as tg
from threadgrad import engine, ops


@pytest.fixture(params=[0, 1, 2], ids=lambda n: f"n{n}")
def n(request, workers) -> int:
    workers(request.param)
    return request.param


# --- 1. the API ---------------------------------------------------------------------------

def test_set_cpu_workers_is_one_function_and_returns_the_previous_value(workers):
    assert tg.autograd.set_cpu_workers is engine.set_cpu_workers
    assert workers(0) == 0
    assert workers(2) == 0
    assert workers(1) == 2
    assert workers(1) == 1
    assert workers(0) == 1
    assert workers(0) == 0


@pytest.mark.parametrize("bad", [True, False, 1.0, 2.5, -1, "2", None, np.float64(1.0)])
def test_set_cpu_workers_refuses_what_is_not_an_int_at_least_zero(workers, bad):
    workers(2)
    with pytest.raises(ValueError, match=re.escape(f"set_cpu_workers: n must be an int >= 0, got {bad!r}")):
        workers(bad)
    assert workers(0) == 2  # the refused call changed nothing


@pytest.mark.timeout(60)
def test_helpers_are_started_by_a_parallel_backward_and_listed(workers):
    workers(2)
    x = f64([1.0, 2.0])
    wide(x, 50).backward()
    hs = helpers()
    assert 1 <= len(hs) <= 2 and all(HELPER.match(t.name) for t in hs), [t.name for t in hs]
    assert len({t.name for t in hs}) == len(hs)
    assert all(t.daemon for t in hs)
    np.testing.assert_array_equal(x.grad._data, wide_expected(x._data, 50)[0])


@pytest.mark.timeout(60)
def test_shutdown_stops_the_helpers_and_the_next_parallel_backward_restarts_them(workers):
    eng = engine.get_engine()
    workers(2)
    x = f64([1.0, 2.0])
    wide(x, 50).backward()
    before = helpers()
    assert before
    eng.shutdown()
    assert not any(t.is_alive() for t in before)
    assert helpers() == []
    assert workers(2) == 2  # the setting survives shutdown
    x.grad = None
    log = Log()
    barrier = threading.Barrier(2)
    a, b = Probe.apply(x, log, "a", barrier), Probe.apply(x, log, "b", barrier)
    (a.sum() + b.sum()).backward()  # needs a helper: a new one was started
    after = helpers()
    assert after and not set(after) & set(before)
    assert x.grad.tolist() == [2.0, 2.0]


@pytest.mark.timeout(60)
def test_lowering_n_to_zero_retires_the_helpers(workers):
    workers(2)
    wide(f64([1.0]), 50).backward()
    hs = helpers()
    assert hs
    workers(0)
    for t in hs:
        t.join(10)
    assert not [t.name for t in hs if t.is_alive()], "helpers did not retire after set_cpu_workers(0)"
    assert helpers() == []
    # n = 0 again: every cpu node runs on the caller's thread, and no helper starts
    log = Log()
    x = f64([1.0, 2.0])
    wide(x, 20, mid=lambda i, t: Probe.apply(t, log, i)).backward()
    assert log.threads() == {threading.current_thread()}
    assert helpers() == []


@pytest.mark.timeout(60)
def test_lowering_n_from_two_to_one_retires_one_helper(workers):
    workers(2)
    x = f64([1.0])
    log = Log()
    barrier = threading.Barrier(3)  # needs caller + 2 helpers at once: both are started
    parts = [Probe.apply(x, log, k, barrier) for k in range(3)]
    ops.sum(ops.stack(parts)).backward()
    hs = helpers()
    assert len(hs) == 2
    workers(1)
    # exactly one of the two leaves; wait for that one (join with a timeout, in turn)
    for _ in range(200):
        if sum(t.is_alive() for t in hs) <= 1:
            break
        for t in hs:
            t.join(0.05)
    assert sum(t.is_alive() for t in hs) == 1
    assert len(helpers()) == 1


@pytest.mark.timeout(30)
def test_n_zero_runs_every_cpu_node_on_the_callers_thread(n):
    log = Log()
    x = f64([1.0, 2.0])
    wide(x, 40, mid=lambda i, t: Probe.apply(t, log, i)).backward()
    assert sorted(log.tags(), key=lambda it: it[0]) == [(i, [float(i % 5 + 1)] * 2, False, False) for i in range(40)]
    if n == 0:
        assert log.threads() == {threading.current_thread()}
        assert helpers() == []
    else:
        assert all(t is threading.current_thread() or HELPER.match(t.name) for t in log.threads())


# --- 2. the same gradients as n = 0 --------------------------------------------------------

@pytest.mark.timeout(60)
def test_wide_graph_of_1000_branches_with_a_leaf_each(n):
    rng = np.random.default_rng(0)
    xv = rng.integers(-4, 5, size=3).astype(np.float64)
    wv = [rng.integers(-3, 4, size=3).astype(np.float64) for _ in range(1000)]
    x, ws = f64(xv), [f64(w) for w in wv]
    wide(x, 1000, ws).backward()
    gx, gws = wide_expected(xv, 1000, wv)
    np.testing.assert_array_equal(x.grad._data, gx)
    for w, g in zip(ws, gws):
        np.testing.assert_array_equal(w.grad._data, g)


@pytest.mark.timeout(60)
def test_chain_of_diamonds(n):
    """y <- 2y + 3y, 20 times: every node but the first two has two consumers; d/dx = 5**20."""
    x = f64([1.0, -1.0])
    y = x
    for _ in range(20):
        y = y * 2.0 + y * 3.0
    y.sum().backward()
    assert x.grad.tolist() == [5.0 ** 20] * 2


@pytest.mark.timeout(60)
def test_a_node_runs_once_after_all_its_gradients_arrived(n):
    """A probe whose output feeds 300 branches sees the whole sum of their gradients, once."""
    log = Log()
    x = f64([1.0, 2.0])
    p = Probe.apply(x, log, "p")
    inner = Log()
    loss = ops.sum(ops.stack([Probe.apply(p * float(i), inner, i) for i in range(300)]))
    loss.backward()
    assert log.tags() == [("p", [float(sum(range(300)))] * 2, False, False)]
    assert sorted(t[0] for t in inner.tags()) == list(range(300))
    assert x.grad.tolist() == [float(sum(range(300)))] * 2


@pytest.mark.timeout(60)
def test_shared_parameter_in_many_matmul_branches_matches_n_zero_and_torch(workers):
    """8 towers of 3 matmul layers sharing the first weight; float data: allclose with n = 0
    (several gradients meet in W0.grad, in any order) and with torch."""
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((4, 16))
    w0v = rng.standard_normal((16, 16)) * 0.3
    tower = [[rng.standard_normal((16, 16)) * 0.3 for _ in range(2)] for _ in range(8)]

    def run_tg():
        x, w0 = f64(xv), f64(w0v)
        ws = [[f64(w) for w in t] for t in tower]
        outs = []
        for t in ws:
            h = ops.tanh(ops.matmul(x, w0))
            for w in t:
                h = ops.tanh(ops.matmul(h, w))
            outs.append(ops.sum(h * h))
        ops.sum(ops.stack(outs)).backward()
        return [x.grad._data, w0.grad._data] + [w.grad._data for t in ws for w in t]

    workers(0)
    serial = run_tg()
    for k in (1, 2):
        workers(k)
        for got, want in zip(run_tg(), serial):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    torch = pytest.importorskip("torch")
    x, w0 = torch.tensor(xv, requires_grad=True), torch.tensor(w0v, requires_grad=True)
    ws = [[torch.tensor(w, requires_grad=True) for w in t] for t in tower]
    outs = []
    for t in ws:
        h = torch.tanh(x @ w0)
        for w in t:
            h = torch.tanh(h @ w)
        outs.append((h * h).sum())
    torch.stack(outs).sum().backward()
    want = [x.grad.numpy(), w0.grad.numpy()] + [w.grad.numpy() for t in ws for w in t]
    for got, w in zip(serial, want):
        np.testing.assert_allclose(got, w, rtol=1e-10, atol=1e-12)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", range(6))
def test_random_programs_match_the_sequential_reference(workers, seed):
    """A few seeds of the combination programs (tests/programs) in the parallel mode; the
    stress file runs many more."""
    from programs import ThreadgradBackend, compare, dumps, generate, reference, run
    program = generate(seed)
    be = ThreadgradBackend()
    workers(0)
    expected = reference(program, be)
    workers(2)
    diffs = compare(expected, run(program, be, concurrent=True))
    faulty = {c["id"] for calls in program["threads"] for c in calls if c["fault"]}
    if any(v[0] == "raised" and cid not in faulty for cid, v in expected.calls.items()):
        # a call failed in a program hook: independent nodes may have run first (spec); the
        # stress file's _schedule_dependent says more
        diffs = [d for d in diffs if not (d.startswith("hook ") or ".grad: expected" in d)]
    assert not diffs, f"seed {seed}: {diffs}\nprogram: {dumps(program)}"


# --- 3. nodes really run at the same time ---------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("k", [1, 2])
def test_independent_branches_run_at_the_same_time(workers, k):
    """k + 1 branches whose backward functions all wait at one barrier of k + 1: only k + 1
    threads running nodes at once get past it (n = 0 would deadlock: not run)."""
    workers(k)
    log = Log()
    barrier = threading.Barrier(k + 1)
    x = f64([1.0, 2.0])
    parts = [Probe.apply(x * float(i + 1), log, i, barrier) for i in range(k + 1)]
    ops.sum(ops.stack(parts)).backward()
    assert x.grad.tolist() == [float(sum(range(1, k + 2)))] * 2
    threads = log.threads()
    assert len(threads) == k + 1
    # the caller drives its backward, so it is one of them; the others are helpers
    assert threading.current_thread() in threads
    assert all(HELPER.match(t.name) for t in threads - {threading.current_thread()})


@pytest.mark.timeout(60)
def test_a_reentrant_backward_from_a_parallel_node_is_parallel(workers):
    """The nested backward of a node of a parallel backward gets helpers too: two of its
    nodes meet at a barrier. With 2 helpers one is always free, whichever thread drives."""
    workers(2)
    inner_log = Log()

    class Outer(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            barrier = threading.Barrier(2)
            leaf = f64([1.0])
            with engine.enable_grad():
                out = Probe.apply(leaf, inner_log, "i0", barrier).sum() + Probe.apply(leaf * 2.0, inner_log, "i1",
                                                                                      barrier).sum()
            out.backward()
            assert leaf.grad.tolist() == [3.0]
            return g

    x = f64([1.0, 2.0])
    (Outer.apply(x) * 3.0).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
    assert len(inner_log.threads()) == 2


@pytest.mark.timeout(60)
def test_a_reentrant_backward_started_on_a_device_worker_stays_serial(workers, virtual1):
    """Started by a node on virtual:1's worker, the nested backward's cpu nodes all run on that
    worker (the serial rule), even with helpers."""
    workers(2)
    log = Log()

    class OnDevice(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            leaf = f64([1.0])
            with engine.enable_grad():
                out = wide(leaf, 30, mid=lambda i, t: Probe.apply(t, log, i))
            out.backward()
            np.testing.assert_array_equal(leaf.grad._data, wide_expected(leaf._data, 30)[0])
            return g

    x = f64([1.0, 2.0])
    v = ops.to(x, virtual1)
    (OnDevice.apply(v) * 2.0).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
    assert {t.name for t in log.threads()} == {"threadgrad-virtual:1"}
    assert len(log.tags()) == 30


@pytest.mark.timeout(60)
def test_concurrent_parallel_calls_each_get_a_helper(workers, run_in_threads):
    """Two callers, two helpers: each call has two nodes that must run at once."""
    workers(2)

    def call(i):
        log = Log()
        barrier = threading.Barrier(2)
        x = f64([float(i + 1)])
        (Probe.apply(x, log, 0, barrier).sum() + Probe.apply(x * 2.0, log, 1, barrier).sum()).backward()
        return x.grad.tolist(), len(log.threads())

    assert run_in_threads(2, call) == [([3.0], 2), ([3.0], 2)]


# --- 4. orderings that hold ---------------------------------------------------------------

@pytest.mark.timeout(60)
def test_one_tensors_hooks_run_in_registration_order_on_one_thread(n):
    log = Log()
    x = f64([1.0])
    tensors = []

    def mid(i, t):
        for k in range(5):
            t.register_hook(lambda g, i=i, k=k: log.add((i, k)))
        t.grad_fn.register_prehook(lambda gs, i=i: log.add((i, "pre")))
        t.grad_fn.register_hook(lambda gi, go, i=i: log.add((i, "post")))
        tensors.append(t)
        return t

    wide(x, 100, mid=mid).backward()
    with log.lock:
        items = list(log.items)
    for i in range(100):
        mine = [(k, th) for (j, k), th in items if j == i]
        assert [k for k, _ in mine] == [0, 1, 2, 3, 4, "pre", "post"], (i, mine)
        assert len({th for _, th in mine}) == 1


@pytest.mark.timeout(60)
def test_final_callbacks_run_once_after_every_node_before_backward_returns(n):
    log = Log()
    ran = []
    x = f64([1.0, 2.0])

    def mid(i, t):
        p = Probe.apply(t, log, i)
        if i % 50 == 0:  # callbacks queued from several nodes, on whatever thread runs them
            p.register_hook(lambda g, i=i: engine.queue_callback(lambda: (ran.append(i), log.add(("cb", i)))))
        return p

    x.register_post_accumulate_grad_hook(lambda t: log.add(("acc", t.grad.tolist())))
    wide(x, 300, mid=mid).backward()
    tags = log.tags()
    assert sorted(ran) == [0, 50, 100, 150, 200, 250]  # each once, all before backward returned
    first_cb = min(k for k, t in enumerate(tags) if t[0] == "cb")
    assert first_cb == len(tags) - 6  # after every node and the leaf's accumulation
    assert ("acc", wide_expected(x._data, 300)[0].tolist()) in tags[:first_cb]


@pytest.mark.timeout(60)
def test_a_reentrant_child_finishes_before_its_parent_continues(n):
    log = Log()

    class Parent(engine.Function):
        @staticmethod
        def forward(ctx, x, tag):
            ctx.tag = tag
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            log.add((ctx.tag, "start"))
            leaf = f64([1.0])
            with engine.enable_grad():
                out = wide(leaf, 20, mid=lambda i, t: Probe.apply(t, log, (ctx.tag, "child")))
            out.backward()
            log.add((ctx.tag, "end", leaf.grad.tolist()))
            return g, None

    x = f64([1.0])
    ops.sum(ops.stack([Parent.apply(x * float(j + 1), j) for j in range(6)])).backward()
    assert x.grad.tolist() == [21.0]
    tags = log.tags()
    want = wide_expected(np.ones(1), 20)[0].tolist()
    for j in range(6):
        start = tags.index((j, "start"))
        end = tags.index((j, "end", want))
        children = [k for k, t in enumerate(tags) if t[0] == (j, "child")]
        assert len(children) == 20 and start < min(children) and max(children) < end, j


@pytest.mark.timeout(60)
def test_each_node_runs_once_on_a_graph_with_shared_subexpressions(n):
    counts: dict = {}
    lock = threading.Lock()

    def count(node):
        def hook(gi, go):
            with lock:
                counts[node] = counts.get(node, 0) + 1
        node.register_hook(hook)

    x = f64([1.0, 2.0])
    hs = [x * float(i + 1) for i in range(10)]
    ys = [hs[i] * hs[(i + 1) % 10] for i in range(10)]
    zs = [ys[i] + ys[(i + 3) % 10] for i in range(10)]
    loss = ops.sum(ops.stack(zs))
    nodes = {t.grad_fn for t in hs + ys + zs} | {loss.grad_fn}
    for node in nodes:
        count(node)
    loss.backward(retain_graph=True)
    assert counts == {node: 1 for node in nodes}
    g1 = x.grad.tolist()
    x.grad = None
    loss.backward()
    assert counts == {node: 2 for node in nodes}
    assert x.grad.tolist() == g1


@pytest.mark.timeout(60)
def test_the_profiler_sees_nodes_run_by_helpers(workers):
    """A profile of a parallel backward lists every node once, on the thread that ran it: two
    rows here, the caller's and a helper's (the two probes meet at a barrier)."""
    workers(1)
    log = Log()
    barrier = threading.Barrier(2)
    x = f64([1.0])
    loss = Probe.apply(x, log, 0, barrier).sum() + Probe.apply(x * 2.0, log, 1, barrier).sum()
    with tg.profiler.profile() as prof:
        loss.backward()
    nodes = [e for e in prof.events() if e.kind == "node"]
    names = sorted(e.name for e in nodes)
    assert names == sorted(["GraphRoot", "AddBackward0", "SumBackward0", "SumBackward0", "ProbeBackward",
                            "ProbeBackward", "MulBackward0", "AccumulateGrad"])
    probe_rows = {e.thread for e in nodes if e.name == "ProbeBackward"}
    assert len(probe_rows) == 2 and len(prof.threads()) == 2
    assert {e.task for e in nodes} == {1}
    assert x.grad.tolist() == [3.0]
    # the helper's row says what it is, and the work it took from the caller is a thread
    # hand-off, not a device one
    roles = sorted(prof.threads())
    assert roles[0].startswith("caller (") and HELPER.match(roles[1].replace("cpu helper ", "threadgrad-cpu-"))
    assert {h.kind for h in prof.handoffs()} == {"thread hand-off"}


@pytest.mark.timeout(60)
def test_set_cpu_workers_zero_after_a_backward_leaves_no_helper_listed(workers):
    """Issue 34, item 8: right after set_cpu_workers(0) a helper still showed in
    worker_threads() (it retired on its own time). With no backward running, lowering n now
    waits for the extra helpers to leave, so they are gone when it returns."""
    for _ in range(20):
        workers(2)
        wide(f64([1.0]), 50).backward()
        hs = helpers()
        assert hs
        workers(0)
        assert helpers() == [] and not [t.name for t in hs if t.is_alive()]


@pytest.mark.timeout(60)
def test_blas_threads_are_limited_while_helpers_are_on_and_restored_after(workers):
    """Issue 34, item 8: helpers and BLAS's own threads oversubscribed the cores (a BLAS-heavy
    backward 1.4-2x slower with set_cpu_workers(2) on 2 cores). While helpers are on, BLAS
    gets cores // (n + 1) threads; set_cpu_workers(0) restores what it had."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import os

    def blas():
        return sorted({i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"})

    if not blas():
        pytest.skip("no BLAS that threadpoolctl can see")
    workers(0)
    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):  # a user's own setting
        assert blas() == [3]
        for n in (1, 2, 1):
            workers(n)
            assert blas() == [max(1, (os.cpu_count() or 1) // (n + 1))], n
            wide(f64([1.0]), 20).backward()  # (the helpers run with it)
        workers(0)
        assert blas() == [3]  # the user's setting is back


@pytest.mark.timeout(60)
def test_helpers_never_give_blas_more_threads_than_the_program_chose(workers):
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas():
        return sorted({i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"})

    if not blas():
        pytest.skip("no BLAS that threadpoolctl can see")
    workers(0)
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):  # OPENBLAS_NUM_THREADS=1, say
        workers(1)
        assert blas() == [1]
        workers(0)
        assert blas() == [1]
