"""Attacks on the parallel cpu-worker mode (``set_cpu_workers(n)``, n > 0) where it meets other
features, after private work (Note [Private work] in engine/executor.py) was added.

Each test compares n = 1 and n = 2 with n = 0 (and with torch where it has the feature), over
repeated runs, on graphs whose branches a parallel backward forks into private work: the same
gradients (up to the order of float sums where three or more gradients meet: rtol 1e-12; exact
where the values make every order exact), the same exception type and message, and an engine
still usable afterwards. test_private_work.py, test_cpu_workers.py and test_cpu_workers_combos.py
cover the features one at a time; these combine them.

Two bugs found here are fixed, each with its test: a failed parallel backward raised while a
node of it still ran on a helper (test_no_node_of_a_failed_backward_runs_after_it_raised), and
disable_saved_tensors_hooks did not reach helper threads (test_torch_api_extras.py's
test_disable_saved_tensors_hooks_follows_the_backward_to_its_threads).
"""
from __future__ import annotations

import threading

import numpy as np
import pytest
from cpu_workers_util import BARRIER_TIMEOUT, NaNGrad, f64

from threadgrad import engine, ops
from threadgrad.engine.saved_hooks import saved_tensors_hooks
from threadgrad.utils.checkpoint import checkpoint

REPS = 20


@pytest.fixture(params=[1, 2], ids=lambda n: f"n{n}")
def n(request, workers) -> int:
    workers(request.param)
    return request.param


def same(a, b) -> bool:
    """Structural equality; arrays equal up to the summation order of three or more gradients
    meeting in one buffer (rtol 1e-12: a few ulps), NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and a.dtype == b.dtype and np.allclose(a, b, rtol=1e-12, atol=0, equal_nan=True)
    return a == b


def arr(t):
    return None if t is None else t._data.copy()


def against_n_zero(workers, run, reps: int = REPS) -> object:
    """``run()`` with n = 0, then ``reps`` times with n = 1 and n = 2: every result the same."""
    workers(0)
    want = run()
    for k in (1, 2):
        workers(k)
        for rep in range(reps):
            got = run()
            assert same(got, want), f"n={k} rep {rep}:\n got {got!r}\nwant {want!r}"
    return want


def outcome(fn) -> tuple:
    """('ok', result) or ('error', type name, message)."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - compared below
        return ("error", type(e).__name__, str(e))


# --- bugs ----------------------------------------------------------------------------------

class _RaiseAfter(engine.Function):
    """The identity whose backward waits until ``started`` is set, then raises ValueError."""

    @staticmethod
    def forward(ctx, x, started):
        ctx.started = started
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        assert ctx.started.wait(BARRIER_TIMEOUT), "the leaf hook never started"
        raise ValueError("boom")


@pytest.mark.timeout(60)
def test_no_node_of_a_failed_backward_runs_after_it_raised(workers):
    """A leaf hook (a slow one: it waits up to ``HOLD`` seconds for the caller) runs on one
    thread while a custom Function on the other raises. With n = 0 every node of a backward has
    finished when it raises, so the caller may reset ``.grad`` and retry; with n = 1 backward
    must likewise wait for the node still running on the helper before it raises (here: until
    the hook gives up waiting), and then ``.grad`` no longer changes behind the caller's back."""
    HOLD = 2.0
    workers(1)
    started, release, done = threading.Event(), threading.Event(), threading.Event()

    def slow_leaf_hook(g):
        started.set()
        release.wait(HOLD)  # the caller sets it only after backward returned
        done.set()

    w, v = f64([1.0, 2.0]), f64([3.0])
    w.register_hook(slow_leaf_hook)
    loss = (w * 2.0).sum() + _RaiseAfter.apply(v * 1.0, started).sum()
    with pytest.raises(ValueError, match="boom"):
        loss.backward()
    hook_finished_before_raise = done.is_set()
    grad_at_raise = None if w.grad is None else w.grad.tolist()
    release.set()
    assert done.wait(BARRIER_TIMEOUT)
    assert hook_finished_before_raise, "backward raised while a node of it still ran on a helper"
    assert (None if w.grad is None else w.grad.tolist()) == grad_at_raise, ".grad written after backward raised"


# --- errors --------------------------------------------------------------------------------

class _Raise(engine.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        raise ValueError("boom")


def _branches(fail_at: int | None, how: str):
    """Six branches of tanh steps over one leaf each and a shared leaf; branch ``fail_at``
    fails: a custom Function raising, or a built-in node whose saved result was changed in place."""
    ws = [f64([1.0, 2.0]) for _ in range(6)]
    shared = f64([0.5, -0.5])
    outs = []
    for i, w in enumerate(ws):
        t = w * shared * float(i + 1)
        if i == fail_at and how == "function":
            t = _Raise.apply(t)
        if i == fail_at and how == "inplace":
            e = ops.exp(t)
            u = e * 2.0
            e.mul_(2.0)  # ExpBackward0 saved its result
            t = u
        for _ in range(3):
            t = ops.tanh(t) * 2.0
        outs.append(t.sum())
    return ws + [shared], ops.sum(ops.stack(outs))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["function", "inplace"])
@pytest.mark.parametrize("fail_at", [0, 3, 5])
def test_a_failing_branch_raises_as_with_n_zero_and_leaves_no_partial_grad(workers, how, fail_at):
    """Would catch: another message or type with n > 0 (the node's name appended on a helper
    differently, a routing error on the private path), a leaf that accumulated part of its
    gradient (a shared leaf's per-thread sum handed over although the task had failed), a hang,
    or an engine left unusable. Which leaves got their gradient before the error depends on the
    schedule (docs/autograd.md: the order of independent nodes is not kept), so each leaf's
    ``.grad`` must be None or its whole gradient; the shared leaf, reached by the failing
    branch, must stay None."""
    ws, loss = _branches(None, how)
    loss.backward()
    full = [arr(w.grad) for w in ws]

    def run():
        ws, loss = _branches(fail_at, how)
        try:
            loss.backward()
        except (ValueError, RuntimeError) as e:
            return type(e).__name__, str(e), [w.grad for w in ws]
        raise AssertionError("no error")

    workers(0)
    want = run()[:2]
    if how == "function":
        assert want == ("ValueError", "boom [raised in _RaiseBackward during backward]")
    else:
        assert want[0] == "RuntimeError" and "modified by an inplace operation" in want[1]
        assert want[1].endswith("[raised in ExpBackward0 during backward]")
    for k in (1, 2):
        workers(k)
        for rep in range(REPS):
            kind, msg, got = run()
            assert (kind, msg) == want, f"n={k} rep {rep}"
            assert got[-1] is None, "the shared leaf accumulated though a branch failed"
            for i, g in enumerate(got[:-1]):
                assert g is None or same(g._data, full[i]), f"n={k} rep {rep} leaf {i}"
        ws, loss = _branches(None, how)  # usable afterwards, and exact
        loss.backward()
        assert same([arr(w.grad) for w in ws], full)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fail_at", [0, 5])
def test_anomaly_nan_in_a_private_branch_same_error_and_warnings_as_n_zero(workers, fail_at):
    """check_nan on a branch another thread holds: the same message, the same warnings (torch's
    "Error detected in ..." names the node) whichever thread ran it, and no leaf on the NaN's
    path accumulated."""
    import warnings

    def run():
        ws = [f64([1.0, 2.0]) for _ in range(6)]
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            with engine.detect_anomaly(check_nan=True):
                outs = []
                for i, w in enumerate(ws):
                    t = w * float(i + 1)
                    if i == fail_at:
                        t = NaNGrad.apply(t)
                    outs.append((ops.tanh(t) * 2.0).sum())
                with pytest.raises(RuntimeError) as info:
                    ops.sum(ops.stack(outs)).backward()
        warned = sorted(str(r.message).split("\n")[0] for r in rec)
        notes = [note.split("\n")[0] for note in getattr(info.value, "__notes__", [])]
        return str(info.value), warned, notes, ws[fail_at].grad is None

    want = against_n_zero(workers, run)
    assert want == ("Function 'NaNGradBackward' returned nan values in its 0th output. "
                    "[raised in NaNGradBackward during backward]",
                    ["Anomaly Detection has been enabled. This mode will increase the runtime and should "
                     "only be enabled for debugging.",
                     "Error detected in NaNGradBackward. Traceback of forward call that caused the error:"],
                    ["Traceback of forward call that caused the error (anomaly mode, node NaNGradBackward):"],
                    True)


# --- hooks, retain_grad, inputs ------------------------------------------------------------

def _hooked_graph(lib):
    """Five branches over two shared leaves, with retain_grad on interior tensors, tensor hooks
    that change the gradient, a leaf hook, node pre- and post-hooks that change it, and a
    post-accumulate-grad hook counting. Same code for torch and threadgrad."""
    w = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
    x = lib.tensor([3.0, -1.0], dtype=lib.float64, requires_grad=True)
    kept, outs, count = [], [], [0]
    for i in range(5):
        t = x * w * float(i + 1)
        t.retain_grad()
        t.register_hook(lambda g, i=i: g * float(i + 2))
        u = lib.exp(t * 0.1)
        u.retain_grad()
        u.grad_fn.register_prehook(lambda go: (go[0] * 2.0,))
        u.grad_fn.register_hook(lambda gi, go: tuple(None if a is None else a + 1.0 for a in gi))
        v = u + w
        v.retain_grad()
        kept += [t, u, v]
        outs.append((v * v).sum())
    w.register_post_accumulate_grad_hook(lambda p: count.__setitem__(0, count[0] + 1))
    x.register_hook(lambda g: g * 3.0)
    loss = outs[0]
    for o in outs[1:]:
        loss = loss + o
    return w, x, kept, loss, count


@pytest.mark.timeout(120)
def test_hooks_retain_grad_and_node_hooks_on_branches_match_n_zero_and_torch(workers):
    """torch's test_hooks / test_retain_grad_inplace-style hooks, all on branches that run in
    parallel: every .grad (leaves and retained interior tensors) as n = 0 and torch, and the
    post-accumulate-grad hook once per backward."""
    torch = pytest.importorskip("torch")

    import threadgrad as tg

    def run(lib=tg):
        w, x, kept, loss, count = _hooked_graph(lib)
        loss.backward()
        return [np.asarray(t.grad.tolist()) for t in [w, x, *kept]], count[0]

    want = against_n_zero(workers, run)
    ref = run(torch)
    assert want[1] == ref[1] == 1
    for g, r in zip(want[0], ref[0]):
        np.testing.assert_allclose(g, r, rtol=1e-12)


@pytest.mark.timeout(120)
def test_inputs_grad_subsets_and_no_grad_vars_match_n_zero(workers):
    """backward(inputs=) with a leaf and an interior tensor, grad() of a leaf subset and of
    interior tensors, and grad() with no_grad_vars cutting two branches, on one retained graph
    whose branches hold private work: each as n = 0."""
    def run():
        w, x, b = f64([1.0, 2.0]), f64([3.0, -1.0]), f64([0.5, 0.5])
        outs = [ops.tanh(x * w * float(i + 1) + b) for i in range(6)]
        loss = ops.sum(ops.stack([o.sum() for o in outs]))
        loss.backward(inputs=[w, outs[2]], retain_graph=True)
        got = [arr(w.grad), x.grad, b.grad, arr(outs[2].grad)]
        got += [arr(t) for t in engine.grad(loss, [x, outs[4], b], retain_graph=True)]
        got += [arr(t) for t in engine.grad(loss, [w, b], no_grad_vars=[outs[1], outs[3]])]
        return got

    want = against_n_zero(workers, run)
    assert want[1] is None and want[2] is None


# --- double backward, checkpoints, saved-tensor hooks, devices -----------------------------

@pytest.mark.timeout(120)
def test_third_derivative_through_parallel_branches_matches_n_zero_and_torch(workers):
    """grad of grad of grad (create_graph twice) over five branches of one leaf: the sums a
    thread makes for the leaf are recorded under create_graph and differentiate as n = 0's.
    d^3/dx^3 of sum_k sin(k x) is -sum_k k^3 cos(k x)."""
    torch = pytest.importorskip("torch")

    def run(lib=engine):
        x = lib.tensor([0.5, -1.0, 2.0], dtype=lib.float64, requires_grad=True)
        terms = [lib.sin(x * float(k + 1)).sum() for k in range(5)]
        y = terms[0]
        for t in terms[1:]:
            y = y + t
        (g1,) = lib.autograd.grad(y, x, create_graph=True)
        (g2,) = lib.autograd.grad(g1.sum(), x, create_graph=True)
        (g3,) = lib.autograd.grad(g2.sum(), x)
        return [np.asarray(t.tolist()) for t in (g1, g2, g3)]

    import threadgrad as tg
    got = against_n_zero(workers, lambda: run(tg))
    xv = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(got[2], -sum(k ** 3 * np.cos(k * xv) for k in range(1, 6)), rtol=1e-12)
    for g, r in zip(got, run(torch)):
        np.testing.assert_allclose(g, r, rtol=1e-12)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_with_saved_tensor_hooks_and_a_failing_branch(workers, use_reentrant):
    """Checkpointed branches sharing a parameter used outside them too, under saved-tensor hooks
    that count packs and unpacks: gradients and counts as n = 0; then a branch whose checkpointed
    body raises fails the call with n = 0's message."""
    def build(fail: bool):
        lock = threading.Lock()
        counts = [0, 0]

        def pack(t):
            with lock:
                counts[0] += 1
            return t

        def unpack(t):
            with lock:
                counts[1] += 1
            return t

        w, x = f64([1.0, 2.0, -0.5]), f64([3.0, -1.0, 0.25])
        outs = []
        with saved_tensors_hooks(pack, unpack):
            for i in range(4):
                def body(a, b, i=i):
                    t = a * b
                    if fail and i == 2:
                        t = _Raise.apply(t)
                    return ops.tanh(t * float(i + 1)) * b
                t = checkpoint(body, x * 1.0 + float(i), w, use_reentrant=use_reentrant)
                outs.append((t * w).sum())
            loss = ops.sum(ops.stack(outs))
        return w, x, loss, counts

    def ok():
        w, x, loss, counts = build(False)
        loss.backward()
        return [arr(w.grad), arr(x.grad)], list(counts)

    def failing():
        w, x, loss, _ = build(True)
        return outcome(loss.backward)

    against_n_zero(workers, ok, reps=10)
    want = against_n_zero(workers, failing, reps=10)
    assert want == ("error", "ValueError", "boom [raised in _RaiseBackward during backward]")


@pytest.mark.timeout(120)
def test_branches_on_the_virtual_device_beside_private_cpu_branches(workers, virtual1):
    """A cpu leaf shared by cpu branches (summed per thread) and virtual:1 branches (routed by
    the device worker under the task's lock), and a virtual leaf: gradients as n = 0; a custom
    Function raising on the device fails the call with n = 0's message."""
    def run():
        w, x = f64([1.0, 2.0]), f64([3.0, -1.0])
        v = f64([0.5, 1.5], device=virtual1)
        outs = []
        for i in range(6):
            t = x * w * float(i + 1)
            if i % 2:
                t = (ops.tanh(t.to(virtual1) * v) * 2.0).to("cpu") * w
            else:
                t = ops.sin(t) * w
            outs.append(t.sum())
        ops.sum(ops.stack(outs)).backward()
        return [arr(w.grad), arr(x.grad), arr(v.grad)]

    def failing():
        w = f64([1.0, 2.0])
        outs = [ops.tanh(_Raise.apply((w * 2.0).to(virtual1)).to("cpu") if i == 3 else w * float(i)).sum()
                for i in range(6)]
        return outcome(ops.sum(ops.stack(outs)).backward)

    against_n_zero(workers, run)
    want = ("error", "ValueError", "boom [raised in _RaiseBackward during backward]")
    assert against_n_zero(workers, failing) == want


# --- several callers -----------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_six_callers_on_one_retained_graph_with_backward_and_grad(n, run_in_threads):
    """Six threads each call backward(retain_graph=True) three times and grad() once on one
    graph whose branches fork privately: .grad is 18 times one backward's gradient (integer
    data: exact in any order) and every grad() is one backward's."""
    w, x = f64([1.0, 2.0]), f64([3.0, -1.0])
    loss = ops.sum(ops.stack([(x * w * float(i + 1)).sum() for i in range(8)]))
    one_w, one_x = 36.0 * np.array([3.0, -1.0]), 36.0 * np.array([1.0, 2.0])

    def caller(_):
        for _ in range(3):
            loss.backward(retain_graph=True)
        return [arr(t) for t in engine.grad(loss, [w, x], retain_graph=True)]

    for got in run_in_threads(6, caller):
        assert same(got, [one_w, one_x])
    np.testing.assert_array_equal(w.grad._data, 18 * one_w)
    np.testing.assert_array_equal(x.grad._data, 18 * one_x)



@pytest.mark.timeout(120)
@pytest.mark.parametrize("opt", ["SGD", "Adam"])
def test_optimizer_steps_in_post_accumulate_grad_hooks(n, opt):
    """Port of torch's test_post_accumulate_grad_hook_e2e (test_autograd.py) onto branches that run
    in parallel: each parameter has its own optimizer, stepped and zeroed by its post-accumulate-
    grad hook, which now runs on whichever thread accumulates it while other branches still run.
    Each parameter feeds two branches, so its hook runs only after both nodes that saved it ran:
    five steps end exactly where stepping after each backward ends, as torch's test asserts (two
    gradients per parameter: their sum does not depend on the order)."""
    import threadgrad as tg

    def make():
        return [f64(np.linspace(-1.0, 1.0, 4) * (i + 1)) for i in range(5)]

    def loss_of(ws):
        x = f64(np.linspace(0.5, 2.0, 4), requires_grad=False)
        parts = [(ops.tanh(w * x) * ws[(i + 1) % 5]).sum() for i, w in enumerate(ws)]
        return ops.sum(ops.stack(parts))

    kw = {"lr": 0.125, "momentum": 0.5} if opt == "SGD" else {"lr": 0.01}
    in_bwd = make()
    optims = {id(w): getattr(tg.optim, opt)([w], **kw) for w in in_bwd}

    def step_hook(p):
        optims[id(p)].step()
        optims[id(p)].zero_grad()

    for w in in_bwd:
        w.register_post_accumulate_grad_hook(step_hook)
    ref = make()
    ref_opt = getattr(tg.optim, opt)(ref, **kw)
    for _ in range(5):
        loss_of(in_bwd).backward()
        loss_of(ref).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for w, r in zip(in_bwd, ref):
        assert w.grad is None
        np.testing.assert_array_equal(w._data, r._data)
