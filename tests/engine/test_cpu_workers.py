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

import threadgrad as tg
from threadgrad import engine, ops

BARRIER_TIMEOUT = 10.0  # a barrier that times out raises BrokenBarrierError: a failure, not a hang
HELPER = re.compile(r"threadgrad-cpu-\d+$")


# --- helpers ------------------------------------------------------------------------------

def helpers() -> list[threading.Thread]:
    return [t for t in engine.get_engine().worker_threads() if t.name.startswith("threadgrad-cpu-")]


def f64(values, requires_grad: bool = True, device=None) -> engine.Tensor:
    return engine.tensor(np.asarray(values, dtype=np.float64), dtype=np.float64, device=device,
                         requires_grad=requires_grad)


class Log:
    """A list appended to by many threads: (item, thread) pairs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list = []

    def add(self, item) -> None:
        with self.lock:
            self.items.append((item, threading.current_thread()))

    def tags(self) -> list:
        with self.lock:
            return [i for i, _ in self.items]

    def threads(self) -> set:
        with self.lock:
            return {t for _, t in self.items}


class Probe(engine.Function):
    """The identity; its backward records what the thread running it sees: (tag, gradient,
    grad mode, anomaly mode), after meeting the other probes at ``barrier`` if one is given."""

    @staticmethod
    def forward(ctx, x, log, tag, barrier=None):
        ctx.log, ctx.tag, ctx.barrier = log, tag, barrier
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if ctx.barrier is not None:
            ctx.barrier.wait(BARRIER_TIMEOUT)
        ctx.log.add((ctx.tag, g.tolist(), engine.is_grad_enabled(), engine.is_anomaly_enabled()))
        return g, None, None, None


class Boom(engine.Function):
    """The identity whose backward raises ``exc`` (when ``armed[0]``)."""

    @staticmethod
    def forward(ctx, x, exc, armed=(True,)):
        ctx.exc, ctx.armed = exc, armed
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if ctx.armed[0]:
            raise ctx.exc
        return g, None, None


class Nest(engine.Function):
    """The identity whose backward runs a nested backward ``n`` levels deep (via Nest)."""

    @staticmethod
    def forward(ctx, x, n):
        ctx.n = n
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if ctx.n > 0:
            leaf = f64([1.0])
            with engine.enable_grad():
                out = (Nest.apply(leaf, ctx.n - 1) * 3.0).sum()
            out.backward()
            assert leaf.grad.tolist() == [3.0]
        return g, None


def wide(x: engine.Tensor, n: int, ws: list | None = None, mid=None) -> engine.Tensor:
    """sum_i c_i * (x * w_i) over n branches split by one StackBackward (all ready at once);
    ``mid(i, t)`` may wrap each branch's tensor. c_i = i % 5 + 1."""
    parts = []
    for i in range(n):
        t = x * (ws[i] if ws is not None else float(i % 3 + 1))
        if mid is not None:
            t = mid(i, t)
        parts.append(t * float(i % 5 + 1))
    return ops.sum(ops.stack(parts))


def wide_expected(x_val: np.ndarray, n: int, w_vals: list | None = None) -> tuple:
    c = [float(i % 5 + 1) for i in range(n)]
    if w_vals is None:
        gx = sum(c[i] * (i % 3 + 1) for i in range(n)) * np.ones_like(x_val)
        return gx, None
    gx = sum(c[i] * w_vals[i] for i in range(n)) * np.ones_like(x_val)
    gws = [c[i] * x_val for i in range(n)]
    return gx, gws


def _retire_helpers(timeout: float = 10.0) -> None:
    engine.set_cpu_workers(0)
    for t in helpers():
        t.join(timeout)
    if helpers():  # test_lowering_n_to_zero_retires_the_helpers says why this is a failure
        engine.get_engine().shutdown()


@pytest.fixture
def workers():
    """``workers(n)`` sets set_cpu_workers(n) for this test; afterwards n is 0 again and the
    helpers have retired, so no other test sees them."""
    _retire_helpers()
    yield engine.set_cpu_workers
    _retire_helpers()


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
    np.testing.assert_array_equal(x.grad.data, wide_expected(x.data, 50)[0])


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
    np.testing.assert_array_equal(x.grad.data, gx)
    for w, g in zip(ws, gws):
        np.testing.assert_array_equal(w.grad.data, g)


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
        return [x.grad.data, w0.grad.data] + [w.grad.data for t in ws for w in t]

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
            np.testing.assert_array_equal(leaf.grad.data, wide_expected(leaf.data, 30)[0])
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
    assert ("acc", wide_expected(x.data, 300)[0].tolist()) in tags[:first_cb]


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
        return x.grad.data.copy(), w.grad.data.copy()

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
    want = wide_expected(h.data, 60)[0]
    loss.backward(inputs=[h], retain_graph=True)
    np.testing.assert_array_equal(h.grad.data, want)
    assert x.grad is None
    h.grad = None
    loss.backward(inputs=[x, h], retain_graph=True)
    np.testing.assert_array_equal(h.grad.data, want)
    np.testing.assert_array_equal(x.grad.data, 2.0 * want)
    gh, gx = engine.grad(loss, [h, x])
    np.testing.assert_array_equal(gh.data, want)
    np.testing.assert_array_equal(gx.data, 2.0 * want)
    np.testing.assert_array_equal(h.grad.data, 2.0 * want)  # as torch: grad() runs retain_grad's hook


@pytest.mark.timeout(60)
def test_grad_with_create_graph_then_double_backward(n):
    """sum_i c_i x**3 over 50 branches: first grad 3x**2 C, second 6x C; nodes of the first
    backward must run with grad mode on, on every thread."""
    log = Log()
    x = f64([1.0, -2.0, 3.0])
    loss = wide(x, 50, mid=lambda i, t: Probe.apply(t * x * x, log, i))
    (g,) = engine.grad(loss, x, create_graph=True)
    c = sum(float(i % 5 + 1) * (i % 3 + 1) for i in range(50))
    np.testing.assert_array_equal(g.data, 3.0 * c * x.data ** 2)
    assert g.requires_grad and g.grad_fn is not None
    assert all(t[2] is True for t in log.tags())  # grad mode = create_graph on whichever thread
    g.sum().backward()
    np.testing.assert_array_equal(x.grad.data, 6.0 * c * x.data)


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
    np.testing.assert_array_equal(x.grad.data, 2.0 * wide_expected(x.data, 40)[0])


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
    np.testing.assert_array_equal(x.grad.data, wide_expected(x.data, 90)[0])
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
        return fwd, during, g.data.copy(), gg.data.copy()

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

    class NaNOut(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return g * float("nan")

    for _ in range(5):
        x = f64([1.0, 2.0])
        with engine.detect_anomaly():
            loss = wide(x, 30, mid=lambda i, t: NaNOut.apply(t) if i == 17 else t)
            with pytest.warns(UserWarning, match="Error detected in NaNOutBackward"):
                with pytest.raises(RuntimeError, match="Function 'NaNOutBackward' returned nan values in its 0th output"):
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
    np.testing.assert_array_equal(x.grad.data, 2.0 * x.data * sum(c))
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
    np.testing.assert_array_equal(x.grad.data, wide_expected(x.data, 200)[0])
    y = f64([3.0])
    wide(y, 50).backward()
    np.testing.assert_array_equal(y.grad.data, wide_expected(y.data, 50)[0])
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
    np.testing.assert_array_equal(c.grad.data, wide_expected(c.data, 20)[0])


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
    np.testing.assert_array_equal(y.grad.data, wide_expected(y.data, 60)[0])


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
    np.testing.assert_array_equal(x.grad.data, wide_expected(x.data, 80)[0])  # every node ran
    y = f64([2.0])
    wide(y, 30).backward()
    np.testing.assert_array_equal(y.grad.data, wide_expected(y.data, 30)[0])


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
    np.testing.assert_array_equal(y.grad.data, wide_expected(y.data, 20)[0])


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
    np.testing.assert_array_equal(x.grad.data, 24 * gx)
    for i, w in enumerate(ws):
        np.testing.assert_array_equal(w.grad.data, 24 * c[i] * 2 * wv[i] * xv ** 2)


@pytest.mark.timeout(60)
def test_backward_async_futures(n):
    xs = [f64([float(i)]) for i in range(16)]
    futs = [engine.backward_async(wide(x, 40)) for x in xs]
    assert [f.result(timeout=30) for f in futs] == [None] * 16
    for x in xs:
        np.testing.assert_array_equal(x.grad.data, wide_expected(x.data, 40)[0])
    x = f64([1.0])
    bad = engine.backward_async(wide(x, 40, mid=lambda i, t: Boom.apply(t, TypeError("async 9")) if i == 9 else t))
    with pytest.raises(TypeError, match=re.escape("async 9 [raised in BoomBackward during backward]")):
        bad.result(timeout=30)
    (g,) = engine.grad_async(wide(x, 40), x).result(timeout=30)
    np.testing.assert_array_equal(g.data, wide_expected(x.data, 40)[0])


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
    np.testing.assert_array_equal(x.grad.data, wide_expected(x.data, 100)[0])
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
    np.testing.assert_array_equal(x.grad.data, wide_expected(x.data, 60)[0] + 2.0)


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


def wide_grad_sq(n: int) -> float:
    """d/dx of wide(x, n, mid=t*t) is 2x times this."""
    return float(sum((i % 5 + 1) * (i % 3 + 1) ** 2 for i in range(n)))


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
    np.testing.assert_array_equal(x.grad.data, wide_expected(x.data, 40)[0])
