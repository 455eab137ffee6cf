"""Parallel cpu workers (``set_cpu_workers(n)``, n > 0) under stress: many seeds of the
combination programs, many caller threads, n changed and the engine shut down while parallel
backward calls run, error storms, deep reentrant chains. tests/engine/test_cpu_workers.py has
the single cases; here they meet each other and threads switch every 10 us (conftest.py).

All data is integer-valued float64 unless a test says otherwise, so every sum is exact in any
order and gradients are compared with ``==``.
"""
from __future__ import annotations

import json
import os
import random
import threading

import numpy as np
import pytest
from threads_util import cpu_helpers as helpers
from programs import ThreadgradBackend, compare, dumps, generate, outcome_from_json, reference, run
from stress_helpers import assert_engine_usable, f64, run_threads

from threadgrad import engine, ops

N_SEEDS = int(os.environ.get("THREADGRAD_PAR_COMBO_N", "100"))
N_INPLACE = int(os.environ.get("THREADGRAD_PAR_INPLACE_N", "40"))
BARRIER_TIMEOUT = 20.0
RECORDED = os.path.join(os.path.dirname(__file__), "torch_inplace_outcomes.json")


def _schedule_dependent(program: dict, expected, diffs: list) -> list:
    """``diffs`` without what the parallel schedule may change. A call that fails in a hook
    of the program (a ``raise`` hook, or one given None), not in a faulting node of its own
    root (``fault``: the first node, before anything else is ready), fails in a node that
    independent nodes may run before or beside in the parallel mode; the spec allows them to
    accumulate and run their hooks, so .grad values and hook counts are then not compared
    (call outcomes still are)."""
    faulty = {c["id"] for calls in program["threads"] for c in calls if c["fault"]}
    if any(v[0] == "raised" and cid not in faulty for cid, v in expected.calls.items()):
        return [d for d in diffs if not (d.startswith("hook ") or ".grad: expected" in d)]
    return diffs


class Meet(engine.Function):
    """The identity whose backward waits at ``barrier`` and records its thread."""

    @staticmethod
    def forward(ctx, x, barrier, seen):
        ctx.barrier, ctx.seen = barrier, seen
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        ctx.barrier.wait(BARRIER_TIMEOUT)
        ctx.seen.append(threading.current_thread())
        return g, None, None


class Boom(engine.Function):
    @staticmethod
    def forward(ctx, x, msg):
        ctx.msg = msg
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        raise ValueError(ctx.msg)


class Nest(engine.Function):
    """The identity whose backward runs a nested backward ``n`` levels deep, over two branches."""

    @staticmethod
    def forward(ctx, x, n):
        ctx.n = n
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if ctx.n > 0:
            leaf = f64([1.0])
            with engine.enable_grad():
                out = (Nest.apply(leaf, ctx.n - 1) * 3.0).sum() + (leaf * 2.0).sum()
            out.backward()
            assert leaf.grad.tolist() == [5.0], leaf.grad.tolist()
        return g, None


def wide(x, n: int, mid=None):
    """sum_i (i % 5 + 1) * mid(x * (i % 3 + 1)) over n branches."""
    parts = []
    for i in range(n):
        t = x * float(i % 3 + 1)
        if mid is not None:
            t = mid(i, t)
        parts.append(t * float(i % 5 + 1))
    return ops.sum(ops.stack(parts))


def wide_grad(n: int) -> float:
    return float(sum((i % 5 + 1) * (i % 3 + 1) for i in range(n)))


# --- the combination programs in the parallel mode ------------------------------------------

@pytest.mark.timeout(120)
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("seed", range(N_SEEDS))
def test_random_mix_in_parallel_mode_matches_the_sequential_reference(workers, seed, k):
    program = generate(seed)
    be = ThreadgradBackend()
    workers(0)
    expected = reference(program, be)
    workers(k)
    diffs = _schedule_dependent(program, expected, compare(expected, run(program, be, concurrent=True)))
    assert_engine_usable()
    assert not diffs, (f"seed {seed}, {k} cpu workers: {diffs}\n"
                       f"replay: THREADGRAD_TEST_CPU_WORKERS={k} python -m programs --seed {seed}\n"
                       f"program: {dumps(program)}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", range(N_INPLACE))
def test_inplace_mix_in_parallel_mode_matches_torchs_recorded_outcome(workers, seed):
    with open(RECORDED) as f:
        expected = outcome_from_json(json.load(f)["outcomes"][str(seed)])
    workers(2)
    program = generate(seed, True)
    diffs = _schedule_dependent(program, expected, compare(expected, run(program, ThreadgradBackend(), concurrent=True)))
    assert not diffs, f"seed {seed} (inplace), 2 cpu workers: {diffs}"


# --- parallelism, again and again ------------------------------------------------------------

@pytest.mark.timeout(120)
def test_two_branches_meet_at_a_barrier_every_time(workers):
    """With one helper, the two nodes of each of 30 backward calls run at once, on the caller
    and the helper; the engine never loses the helper between calls."""
    workers(1)
    me = threading.current_thread()
    for k in range(30):
        barrier, seen = threading.Barrier(2), []
        x = f64([float(k)])
        (Meet.apply(x, barrier, seen).sum() + Meet.apply(x * 2.0, barrier, seen).sum()).backward()
        assert x.grad.tolist() == [3.0]
        assert len(set(seen)) == 2 and me in seen, seen


# --- many callers ----------------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_eight_callers_on_one_shared_graph_with_diamonds_hooks_and_reentrant_nodes(workers):
    """Per call every node runs once: the hook counts are exactly 8 x 4 x what one call gives."""
    workers(2)
    x = f64([1.0, -2.0, 3.0])
    w = f64([2.0, 1.0, -1.0])
    counts = {"tensor": 0, "pre": 0}
    lock = threading.Lock()

    def count(key):
        def fn(*args):
            with lock:
                counts[key] += 1
        return fn

    def mid(i, t):
        h = t * w
        d = h * 2.0 + h * 3.0  # a diamond
        if i % 10 == 0:
            d = Nest.apply(d, 2)
        d.register_hook(count("tensor"))
        d.grad_fn.register_prehook(count("pre"))
        return d

    loss = wide(x, 60, mid=mid)
    run_threads(8, lambda i: [loss.backward(retain_graph=True) for _ in range(4)], timeout=100)
    c = wide_grad(60)
    assert x.grad.tolist() == (32 * 5 * c * w._data).tolist()
    assert w.grad.tolist() == (32 * 5 * c * x._data).tolist()
    assert counts == {"tensor": 32 * 60, "pre": 32 * 60}


@pytest.mark.timeout(120)
def test_n_changes_while_callers_run_parallel_backward(workers):
    """One thread sets n to 0, 1, 2, 3 in turn while four callers run backward calls (each
    call keeps the mode it started in); results stay exact, nothing hangs, and lowering n to
    0 at the end retires every helper."""
    stop = threading.Event()
    workers(2)

    def toggler():
        k = 0
        while not stop.is_set():
            engine.set_cpu_workers([0, 1, 2, 3][k % 4])
            k += 1
            threading.Event().wait(0.001)  # a pace for the toggling, not a race fix

    tog = threading.Thread(target=toggler, daemon=True)
    tog.start()
    try:
        def body(i):
            bad = []
            for r in range(25):
                x = f64([float(i), float(r)])
                wide(x, 40, mid=(lambda j, t: Nest.apply(t, 1)) if r % 5 == 0 else None).backward()
                if x.grad.tolist() != [wide_grad(40)] * 2:
                    bad.append((r, x.grad.tolist()))
            return bad

        assert run_threads(4, body, timeout=100) == [[]] * 4
    finally:
        stop.set()
        tog.join(10)
    assert not tog.is_alive()
    hs = helpers()
    engine.set_cpu_workers(0)
    for t in hs:
        t.join(10)
    assert not [t.name for t in hs if t.is_alive()]


@pytest.mark.timeout(120)
def test_shutdown_while_parallel_backward_calls_run(workers):
    workers(2)
    stop = threading.Event()
    results = []

    def user(i):
        ok, n = True, 0
        while not stop.is_set() or n < 10:
            x = f64([float(n)])
            dev = "virtual:1" if i == 2 else "cpu"
            wide(ops.to(x, dev) if dev != "cpu" else x, 30).backward()
            ok = ok and x.grad.tolist() == [wide_grad(30)]
            n += 1
        results.append(ok)

    threads = [threading.Thread(target=user, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(100):
            engine.get_engine().shutdown()
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert results == [True] * 3
    x = f64([1.0])
    wide(x, 30).backward()  # restarts the helpers
    assert x.grad.tolist() == [wide_grad(30)]
    assert helpers()


# --- errors under threads ----------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_error_storm(workers):
    """Four callers, 30 calls each, a third of them failing in a random branch: every failure
    has its own message and node; every success is exact; the helpers survive."""
    workers(2)
    wide(f64([1.0]), 20).backward()
    before = helpers()

    def body(i):
        rng = random.Random(i)
        bad = []
        for r in range(30):
            x = f64([1.0, 2.0])
            fail = rng.randrange(3) == 0
            where = rng.randrange(50)
            msg = f"caller {i} call {r}"
            loss = wide(x, 50, mid=(lambda j, t: Boom.apply(t, msg) if j == where else t) if fail else None)
            try:
                loss.backward()
            except ValueError as e:
                if not fail or str(e) != f"{msg} [raised in BoomBackward during backward]":
                    bad.append((r, repr(e)))
                continue
            if fail or x.grad.tolist() != [wide_grad(50)] * 2:
                bad.append((r, "no error" if fail else x.grad.tolist()))
        return bad

    assert run_threads(4, body, timeout=100) == [[]] * 4
    assert all(t.is_alive() for t in before)
    assert_engine_usable()


@pytest.mark.timeout(120)
def test_deep_reentrant_chains_from_several_callers(workers):
    eng = engine.get_engine()
    old = eng.max_recursion_depth
    workers(2)
    eng.max_recursion_depth = 3
    try:
        def body(i):
            x = f64([1.0])
            ops.sum(ops.stack([Nest.apply(x * float(j + 1), 9) for j in range(3)])).backward()
            return x.grad.tolist()

        assert run_threads(4, body, timeout=100) == [[6.0]] * 4
    finally:
        eng.max_recursion_depth = old


@pytest.mark.timeout(120)
def test_backward_async_storm_across_devices(workers):
    workers(2)
    xs = [f64([float(i)]) for i in range(40)]
    futs = []
    for i, x in enumerate(xs):
        src = ops.to(x, f"virtual:{i % 3}") if i % 2 else x
        futs.append(engine.backward_async(wide(src, 25, mid=(lambda j, t: ops.to(t, "cpu")) if i % 2 else None)))
    assert [f.result(timeout=60) for f in futs] == [None] * 40
    assert [x.grad.tolist() for x in xs] == [[wide_grad(25)]] * 40


# --- Ctrl-C -----------------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_interrupt_while_the_caller_waits_for_a_helper(workers):
    """The caller waits for its backward's last node, which a helper runs; a real SIGINT lands
    in that wait. The caller raises KeyboardInterrupt at once (the helper's node still runs);
    that node then finishes but routes nothing, and the engine stays exact."""
    import signal
    main = threading.main_thread()
    assert threading.current_thread() is main
    taken, caller_returned, caller_past_barrier = threading.Event(), threading.Event(), threading.Event()

    def handler(signum, frame):
        taken.set()
        raise KeyboardInterrupt

    class Split(engine.Function):
        """Meets the other branch's node, so one of the two runs on the helper; that one
        interrupts the caller and holds on until the caller has returned."""

        @staticmethod
        def forward(ctx, x, barrier):
            ctx.barrier = barrier
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            ctx.barrier.wait(BARRIER_TIMEOUT)
            if threading.current_thread() is main:
                caller_past_barrier.set()
            else:
                # Not before the caller has left the barrier: an interrupt there lands in
                # threading.Condition's re-acquire (lock acquires are interruptible), which
                # breaks the barrier's own lock, a failure of this test's scaffolding only.
                assert caller_past_barrier.wait(BARRIER_TIMEOUT)
                signal.pthread_kill(main.ident, signal.SIGINT)
                assert caller_returned.wait(BARRIER_TIMEOUT)
            return g, None

    workers(1)
    a, b = f64([1.0]), f64([2.0])
    barrier = threading.Barrier(2)
    loss = (Split.apply(a * 1.0, barrier) * 3.0).sum() + (Split.apply(b * 1.0, barrier) * 5.0).sum()
    old = signal.signal(signal.SIGINT, handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            loss.backward()
        caller_returned.set()
        assert taken.is_set()
        # the single helper takes a node of the next backward only after the held node's
        # routing: once this barrier of two is passed, nothing of the old call can arrive
        seen: list = []
        b2 = threading.Barrier(2)
        y = f64([1.0])
        (Meet.apply(y, b2, seen).sum() + Meet.apply(y, b2, seen).sum()).backward()
        assert y.grad.tolist() == [2.0]
    finally:
        caller_returned.set()
        signal.signal(signal.SIGINT, old)
    # whichever branch the helper held got nothing; the caller's branch may have accumulated
    assert a.grad is None or b.grad is None, (a.grad, b.grad)
    for leaf, c in ((a, 3.0), (b, 5.0)):
        assert leaf.grad is None or leaf.grad.tolist() == [c]
    assert_engine_usable()


# --- private work (Note [Private work] in engine/executor.py) ------------------------------------

def _tree(vals: list):
    """Pairwise sums: each AddBackward forks two nodes only it reaches (private work)."""
    while len(vals) > 1:
        nxt = [vals[i] + vals[i + 1] for i in range(0, len(vals) - 1, 2)]
        if len(vals) % 2:
            nxt.append(vals[-1])
        vals = nxt
    return vals[0]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("k", [1, 2])
def test_eight_callers_with_private_trees_and_one_shared_parameter(workers, k):
    """Would catch: private work of one caller's task run under another's count, a stack not
    dropped when a call fails, or a leaf accumulation lost between tasks. 8 callers x 12 calls,
    each a fresh balanced tree over 96 branches (w_j * p * c_j, p shared by the calls that
    succeed); every third call of odd callers fails in a deep branch with its own error (and
    uses its own copy of p, so p.grad stays exact). Per call each w_j.grad is exact; at the end
    p.grad is exactly the sum over the successful calls."""
    workers(k)
    p = f64([1.0, -1.0, 2.0])
    pv = p._data.copy()
    lock = threading.Lock()
    total = np.zeros(3)

    def caller(i: int) -> int:
        failures = 0
        for call in range(12):
            fail = i % 2 == 1 and call % 3 == 0
            wv = [np.array([float((i + j) % 5 - 2), 1.0, float(j % 3)]) for j in range(96)]
            ws = [f64(w) for w in wv]
            q = f64(pv) if fail else p  # failing calls use their own copy of p: p stays exact
            vals = []
            for j, w in enumerate(ws):
                t = w * q * float(j % 4 + 1)
                if fail and j == 70:
                    t = Boom.apply(t, f"caller {i} call {call}")
                vals.append(t.sum())
            loss = _tree(vals)
            if fail:
                with pytest.raises(ValueError, match=f"caller {i} call {call}"):
                    loss.backward()
                failures += 1
                continue
            loss.backward()
            for j, w in enumerate(ws):
                assert w.grad.tolist() == (pv * float(j % 4 + 1)).tolist(), (i, call, j)
            with lock:
                total[:] += sum(w * float(j % 4 + 1) for j, w in enumerate(wv))
        return failures

    failures = run_threads(8, caller, timeout=160)
    assert sum(failures) == 4 * 4
    assert p.grad.tolist() == total.tolist()
    assert_engine_usable(("cpu",))
