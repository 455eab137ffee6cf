"""Private work of parallel backward threads (Note [Private work] in engine/executor.py).

With ``set_cpu_workers(n)``, n > 0, a node whose outputs all go to cpu nodes that only that edge
reaches routes them without the task's lock: the first runs next on the same thread, the others
go on that thread's private stack, invisible to every other thread and to ``outstanding``. These
tests attack what that must not break:

* work held privately is handed out before the thread runs user code (hooks of every kind,
  custom Functions), which may wait for another branch: k + 1 branches meeting at a barrier of
  k + 1 must finish with n = k. To make sure the other branches *are* private when the first
  meeting point is reached, ``helpers_held`` keeps every helper busy in another backward until
  the first meeting point releases them: until then the caller alone runs the graph and holds
  every other branch on its stack (no idle helper, no waiting driver: nothing is shared early);
* completion is never premature: the count of a thread covers its node and its whole stack,
  so backward returns only once every leaf has its gradient (many graph shapes, n in {1, 2},
  repeated; integer-valued float64 data, so every sum is exact in any order);
* an error drops the stack: the exact error is raised, nothing hangs, every helper is free
  afterwards (a barrier of n + 1 meets) and the next backward is exact;
* the features it meets: retain_grad and inputs=, grad() with cut edges, double backward,
  both checkpoints, anomaly mode, the profiler.

tests/stress/test_cpu_workers_stress.py runs concurrent callers over the same shapes.
"""
from __future__ import annotations

import collections
import contextlib
import threading

import numpy as np
import pytest
from cpu_workers_util import BARRIER_TIMEOUT, HELPER, Boom, Log, NaNGrad, f64

import threadgrad as tg
from threadgrad import engine, ops

REPS = 30


# --- helpers ------------------------------------------------------------------------------

def tree(vals: list) -> engine.Tensor:
    """Pairwise sums up to one: every AddBackward fans out to two nodes only it reaches (when
    each value is used once), so a parallel backward walks it as private work."""
    while len(vals) > 1:
        nxt = [vals[i] + vals[i + 1] for i in range(0, len(vals) - 1, 2)]
        if len(vals) % 2:
            nxt.append(vals[-1])
        vals = nxt
    return vals[0]


def coef(i: int) -> float:
    return float(i % 5 + 1)


class Meeting:
    """A barrier of ``parties`` that user code (a hook, a custom backward) calls; the first
    arrival also sets ``release`` (letting ``helpers_held``'s helpers go). Records the threads."""

    def __init__(self, parties: int, release: threading.Event | None = None,
                 timeout: float = BARRIER_TIMEOUT) -> None:
        self.barrier = threading.Barrier(parties)
        self.release = release
        self.timeout = timeout
        self.log = Log()

    def __call__(self, tag) -> None:
        if self.release is not None:
            self.release.set()
        self.barrier.wait(self.timeout)
        self.log.add(tag)


class Meet(engine.Function):
    """The identity whose backward calls ``meeting(tag)``."""

    @staticmethod
    def forward(ctx, x, meeting, tag):
        ctx.meeting, ctx.tag = meeting, tag
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        ctx.meeting(ctx.tag)
        return g, None, None


@contextlib.contextmanager
def helpers_held(k: int):
    """Keep all ``k`` helpers busy: another thread runs a backward whose k + 1 nodes meet at a
    barrier (its caller and the k helpers) and then wait for the yielded Event. While the block
    runs no helper is idle, so a parallel backward started in it is run by its caller alone,
    which keeps every branch it forks privately; once the Event is set the helpers come back."""
    release = threading.Event()
    arrived = threading.Event()
    barrier = threading.Barrier(k + 1, action=arrived.set)

    class Hold(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            barrier.wait(BARRIER_TIMEOUT)
            assert release.wait(BARRIER_TIMEOUT)
            return g

    z = f64([1.0])
    loss = ops.sum(ops.stack([Hold.apply(z * float(i + 1)).sum() for i in range(k + 1)]))
    errors: list = []

    def run() -> None:
        try:
            loss.backward()
        except BaseException as e:  # noqa: BLE001 - checked below
            errors.append(e)

    t = threading.Thread(target=run, name="helpers-held", daemon=True)
    t.start()
    assert arrived.wait(BARRIER_TIMEOUT), "the helpers never all entered the holding backward"
    try:
        yield release
    finally:
        release.set()
        t.join(BARRIER_TIMEOUT * 2)
        assert not t.is_alive(), "the holding backward hung"
        assert not errors, errors
        assert z.grad.tolist() == [float(sum(range(1, k + 2)))]


def all_helpers_free(k: int) -> None:
    """A backward whose k + 1 branches meet at one barrier: it finishes only if the caller and
    all k helpers can run a node at once (a helper left busy or stuck breaks the barrier)."""
    meeting = Meeting(k + 1)
    x = f64([1.0, 2.0])
    ops.sum(ops.stack([Meet.apply(x * float(i + 1), meeting, i).sum() for i in range(k + 1)])).backward()
    assert x.grad.tolist() == [float(sum(range(1, k + 2)))] * 2
    assert len(meeting.log.threads()) == k + 1


def grads(ts) -> list:
    return [None if t.grad is None else t.grad._data.copy() for t in ts]


def assert_same(got: list, want: list, what: str = "") -> None:
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        if w is None:
            assert g is None, f"{what}[{i}]: expected None, got {g}"
        else:
            assert g is not None, f"{what}[{i}]: gradient missing (backward returned early?)"
            np.testing.assert_array_equal(g, w, err_msg=f"{what}[{i}]")


@pytest.fixture(params=[1, 2], ids=lambda n: f"n{n}")
def n(request, workers) -> int:
    workers(request.param)
    return request.param


# --- 1. private work is published before user code ----------------------------------------

HOOK_KINDS = ["tensor_hook", "node_post_hook", "node_pre_hook", "leaf_hook", "custom_function"]


def _branches_meeting_in(kind: str, k: int, meeting: Meeting, depth: int = 3):
    """k + 1 branches, each w_i -> t_i = w_i * (i + 1) -> ``depth`` more steps, summed by one
    StackBackward (which forks them all privately); the user code of ``kind`` in each branch
    calls ``meeting``. Returns (leaves, loss, expected gradients)."""
    ws = [f64([1.0, -2.0]) for _ in range(k + 1)]
    outs = []
    for i, w in enumerate(ws):
        t = w * float(i + 1)
        if kind == "tensor_hook":
            t.register_hook(lambda g, i=i: meeting(i))
        elif kind == "node_post_hook":
            t.grad_fn.register_hook(lambda gi, go, i=i: meeting(i))
        elif kind == "node_pre_hook":
            t.grad_fn.register_prehook(lambda go, i=i: meeting(i))
        elif kind == "leaf_hook":
            w.register_hook(lambda g, i=i: meeting(i))
        elif kind == "post_accumulate_grad_hook":
            w.register_post_accumulate_grad_hook(lambda tensor, i=i: meeting(i))
        elif kind == "custom_function":
            t = Meet.apply(t, meeting, i)
        for _ in range(depth):
            t = t * 2.0
        outs.append(t.sum())
    want = [np.full(2, (i + 1) * 2.0 ** depth) for i in range(k + 1)]
    return ws, ops.sum(ops.stack(outs)), want


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", HOOK_KINDS)
@pytest.mark.parametrize("k", [1, 2])
def test_branches_meet_in_user_code_while_the_caller_holds_the_others(workers, kind, k):
    """Would catch: a thread that keeps private work across user code of this kind. The caller
    alone runs the graph (the helpers are held) and forks the k + 1 branches privately; the first
    hook it reaches waits for the others, which only the released helpers can run, so they must
    have been queued before the hook ran (else BrokenBarrierError after the barrier timeout)."""
    workers(k)
    with helpers_held(k) as release:
        meeting = Meeting(k + 1, release)
        ws, loss, want = _branches_meeting_in(kind, k, meeting)
        loss.backward()
    assert_same(grads(ws), want, kind)
    assert sorted(meeting.log.tags()) == list(range(k + 1))
    threads = meeting.log.threads()
    assert len(threads) == k + 1 and threading.current_thread() in threads
    assert all(HELPER.match(t.name) for t in threads - {threading.current_thread()})


@pytest.mark.timeout(60)
@pytest.mark.parametrize("k", [1, 2])
def test_post_accumulate_grad_hooks_meet_while_the_caller_holds_the_other_branches(workers, k):
    """Would catch (and caught, before AccumulateGrad.runs_user_code looked at them): a
    post-accumulate-grad hook (fn(tensor) on a leaf) run while its thread holds the other
    branches privately. As the hook kinds above: the caller forks the k + 1 branches alone, its
    first leaf's hook waits at the barrier, and the others stay on its stack, so the barrier
    breaks. Failed every run (deterministic: the helpers are held until the first hook runs)."""
    workers(k)
    with helpers_held(k) as release:
        meeting = Meeting(k + 1, release, timeout=3.0)
        ws, loss, want = _branches_meeting_in("post_accumulate_grad_hook", k, meeting)
        loss.backward()
    assert_same(grads(ws), want)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", HOOK_KINDS)
def test_branches_meet_in_user_code_with_idle_helpers(n, kind):
    """Would catch: as above, without holding the helpers (they may take branches as soon as
    the caller forks, or later when it shares on seeing them idle), hooks deep in the branch."""
    for _ in range(5):
        meeting = Meeting(n + 1)
        ws, loss, want = _branches_meeting_in(kind, n, meeting, depth=6)
        loss.backward()
        assert_same(grads(ws), want, kind)
        assert len(meeting.log.threads()) == n + 1


@pytest.mark.timeout(60)
def test_a_hook_deep_in_the_callers_own_branch_publishes_its_whole_stack(workers):
    """Would catch: publishing only some of the stack before user code (e.g. one task per idle
    thread). n = 2, helpers held: the caller forks 3 branches at the top and more below inside
    its own first branch; the barrier of 3 is met by hooks in the 2 *other top branches*, the
    oldest entries of the caller's stack, and by one deep in the caller's branch."""
    workers(2)
    with helpers_held(2) as release:
        meeting = Meeting(3, release)
        ws = [f64([float(i + 1)]) for i in range(3)]
        outs = []
        for i, w in enumerate(ws):
            t = w * 1.0
            # branch 0 forks into a small tree of 16 before its hook; 1 and 2 are chains
            parts = [t * float(j + 1) for j in range(16)] if i == 0 else [t * 2.0]
            parts[-1].register_hook(lambda g, i=i: meeting(i))
            outs.append(tree([p.sum() for p in parts]))
        ops.sum(ops.stack(outs)).backward()
    assert [w.grad.tolist() for w in ws] == [[float(sum(range(1, 17)))], [2.0], [2.0]]
    assert len(meeting.log.threads()) == 3


# --- 2. a deep tree is shared ---------------------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("held", [False, True], ids=["idle", "held"])
@pytest.mark.parametrize("where", [(5, 300), (3, 200), (100, 500)])
def test_a_deep_tree_with_two_meeting_nodes_in_different_subtrees(workers, held, where):
    """Would catch: a subtree never handed to the other thread. n = 1; a balanced tree over 512
    leaves of tiny ops; two custom Function nodes at leaves ``where`` (in different subtrees)
    meet at a barrier of 2, so the two threads must each run one: the subtree holding the
    second must leave the thread that waits in the first."""
    workers(1)
    ctx = helpers_held(1) if held else contextlib.nullcontext(None)
    with ctx as release:
        meeting = Meeting(2, release)
        ws = [f64([float(i % 7 - 3), 1.0]) for i in range(512)]
        vals = []
        for i, w in enumerate(ws):
            t = w * coef(i)
            if i in where:
                t = Meet.apply(t, meeting, i)
            vals.append((t * 1.0).sum())
        tree(vals).backward()
    assert_same(grads(ws), [np.full(2, coef(i)) for i in range(512)])
    assert sorted(meeting.log.tags()) == sorted(where)
    assert len(meeting.log.threads()) == 2


@pytest.mark.timeout(60)
def test_an_idle_helper_gets_a_share_of_a_tree_without_user_code(workers):
    """Would catch: private work never shared with a sleeping helper or a waiting driver (the
    caller would run the whole tree alone: no user code forces a hand-off here), or private work
    that is not private (every node queued: a hand-off per node). n = 1, a tree over 2048 leaves
    (10,240 nodes): both threads run nodes, and the hand-offs stay a few percent of the nodes
    (measured: 48 to 259 of 10,240 on 3.11; the bound leaves a margin of 5)."""
    workers(1)
    for _ in range(3):
        ws = [f64([1.0, 2.0]) for _ in range(2048)]
        loss = tree([(w * coef(i) * 1.0).sum() for i, w in enumerate(ws)])
        with tg.profiler.profile() as prof:
            loss.backward()
            all_helpers_free(1)  # (kept from before the profiler waited for a call's last node)
        nodes = [e for e in prof.events() if e.kind == "node" and e.task == 1]
        assert len(nodes) == 10240
        rows = collections.Counter(e.thread for e in nodes)
        assert len(rows) == 2, rows
        assert len(prof.handoffs()) < len(nodes) // 8
        assert_same(grads(ws), [np.full(2, coef(i)) for i in range(2048)])


# --- 3. completion is never premature -----------------------------------------------------

rng = np.random.default_rng(21)
XV = rng.integers(-3, 4, size=3).astype(np.float64)
X8 = rng.integers(-3, 4, size=8).astype(np.float64)
WV = [rng.integers(-3, 4, size=3).astype(np.float64) for _ in range(64)]
W8 = [rng.integers(-3, 4, size=8).astype(np.float64) for _ in range(64)]
C = np.array([coef(i) for i in range(64)])


def shape_tree_per_leaf():
    ws = [f64(w) for w in WV]
    tree([(w * coef(i)).sum() for i, w in enumerate(ws)]).backward()
    return grads(ws), [np.full(3, coef(i)) for i in range(64)]


def shape_tree_of_one_shared_leaf():
    x = f64(XV)
    tree([(x * coef(i) * 1.0).sum() for i in range(64)]).backward()
    return grads([x]), [np.full(3, C.sum())]


def shape_diamonds_in_a_tree():
    x, ws = f64(XV), [f64(w) for w in WV]
    vals = []
    for i, w in enumerate(ws):
        h = x * w
        vals.append((h * 2.0 + h * h).sum() * coef(i))  # h: a diamond (three edges in)
    tree(vals).backward()
    dh = [coef(i) * (2.0 + 2.0 * XV * w) for i, w in enumerate(WV)]
    return grads([x] + ws), [sum(d * w for d, w in zip(dh, WV))] + [d * XV for d in dh]


def shape_one_output_of_a_split():
    """SplitBackward (4 inputs) reached by one edge only: private with its gradient in slot i % 4."""
    x, ws = f64(X8), [f64(w) for w in W8]
    vals = []
    for i, w in enumerate(ws):
        parts = ops.split(x * w, 2)
        vals.append((parts[i % 4] * coef(i)).sum())
    tree(vals).backward()
    masks = [np.repeat(np.arange(4) == i % 4, 2).astype(np.float64) for i in range(64)]
    gx = sum(coef(i) * masks[i] * W8[i] for i in range(64))
    return grads([x] + ws), [gx] + [coef(i) * masks[i] * X8 for i in range(64)]


def _product_tree():
    x, ws = f64(XV), [f64(w) for w in WV]
    hs = [w * x for w in ws]
    return x, ws, hs, tree([(h * coef(i)).sum() for i, h in enumerate(hs)])


def shape_grad_of_some_leaves():
    """grad() of the odd leaves: the edges to x and the even leaves are not runnable."""
    x, ws, _, loss = _product_tree()
    got = list(engine.grad(loss, [ws[i] for i in range(1, 64, 2)]))
    got = [g._data.copy() for g in got] + grads([x] + ws)
    return got, [coef(i) * XV for i in range(1, 64, 2)] + [None] * 65


def shape_grad_of_some_leaves_each_reached_once():
    """grad() of the odd leaves of a tree of w_i * c_i: each even leaf's AccumulateGrad is reached
    by one edge (count 1) but is not runnable, and its producer's other output is None: the
    private step itself must skip it (else the even leaves would accumulate a .grad)."""
    ws = [f64(w) for w in WV]
    loss = tree([(w * coef(i)).sum() for i, w in enumerate(ws)])
    got = [g._data.copy() for g in engine.grad(loss, [ws[i] for i in range(1, 64, 2)])]
    return got + grads(ws), [np.full(3, coef(i)) for i in range(1, 64, 2)] + [None] * 64


def shape_grad_with_one_output_of_a_split_cut():
    """no_grad_vars cuts the edge into output 0 of each split but not into output 1: SplitBackward
    then has count 1 (from output 1), and the cut edge must not reach it privately (it would run
    twice, or with the cut gradient)."""
    x, ws = f64(X8), [f64(w) for w in W8]
    cut, vals = [], []
    for i, w in enumerate(ws):
        p0, p1 = ops.split(x * w, 4)
        cut.append(p0)
        vals += [(p0 * coef(i)).sum(), (p1 * (coef(i) + 1.0)).sum()]
    (gx,) = engine.grad(tree(vals), [x], no_grad_vars=cut)
    mask1 = (np.arange(8) >= 4).astype(np.float64)
    return [gx._data.copy()], [sum((coef(i) + 1.0) * mask1 * W8[i] for i in range(64))]


class DropEveryOther(engine.Function):
    """The identity whose backward returns None (no gradient) for odd tags."""

    @staticmethod
    def forward(ctx, x, tag):
        ctx.tag = tag
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return (None if ctx.tag % 2 else g), None


def shape_none_gradients_down_private_chains():
    """A custom backward gives odd branches no gradient: None flows down their private chains
    (each node still runs, as torch's) and their leaves get no .grad."""
    ws = [f64(w) for w in WV]
    tree([(DropEveryOther.apply(w * 1.0, i) * 2.0 * coef(i)).sum() for i, w in enumerate(ws)]).backward()
    return grads(ws), [None if i % 2 else np.full(3, 2.0 * coef(i)) for i in range(64)]


def shape_branches_through_a_virtual_device():
    """Every fourth branch runs on virtual:1's worker (no private step into or on it), the others
    privately on cpu; all meet in one tree and one shared leaf."""
    x, ws = f64(XV), [f64(w) for w in WV]
    vals = []
    for i, w in enumerate(ws):
        h = w * x
        if i % 4 == 0:
            h = ops.to(ops.to(h, "virtual:1") * 1.0, "cpu")
        vals.append((h * coef(i)).sum())
    tree(vals).backward()
    return grads([x] + ws), [sum(coef(i) * WV[i] for i in range(64))] + [coef(i) * XV for i in range(64)]


def shape_backward_inputs_some_leaves():
    x, ws, _, loss = _product_tree()
    loss.backward(inputs=[ws[i] for i in range(0, 64, 3)])
    return grads([x] + ws), [None] + [coef(i) * XV if i % 3 == 0 else None for i in range(64)]


def shape_grad_with_no_grad_vars():
    """no_grad_vars cuts the edges into every third product: those branches give x nothing."""
    x, ws, hs, loss = _product_tree()
    (gx,) = engine.grad(loss, [x], no_grad_vars=[hs[i] for i in range(0, 64, 3)])
    return [gx._data.copy()], [sum(coef(i) * WV[i] for i in range(64) if i % 3)]


def shape_retain_graph_twice():
    x, ws, _, loss = _product_tree()
    loss.backward(retain_graph=True)
    first = grads([x] + ws)
    loss.backward()
    want = [sum(coef(i) * WV[i] for i in range(64))] + [coef(i) * XV for i in range(64)]
    return first + grads([x] + ws), want + [2 * g for g in want]


def shape_several_roots():
    """backward([...]) on 8 subtree roots: GraphRoot itself forks them privately."""
    ws = [f64(w) for w in WV]
    roots = [tree([(ws[j] * coef(j)).sum() for j in range(i * 8, i * 8 + 8)]) for i in range(8)]
    engine.backward(roots)
    return grads(ws), [np.full(3, coef(i)) for i in range(64)]


SHAPES = {f.__name__[len("shape_"):]: f for f in [
    shape_tree_per_leaf, shape_tree_of_one_shared_leaf, shape_diamonds_in_a_tree,
    shape_one_output_of_a_split, shape_grad_of_some_leaves, shape_grad_of_some_leaves_each_reached_once,
    shape_grad_with_one_output_of_a_split_cut, shape_none_gradients_down_private_chains,
    shape_branches_through_a_virtual_device, shape_backward_inputs_some_leaves,
    shape_grad_with_no_grad_vars, shape_retain_graph_twice, shape_several_roots]}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_gradient_is_there_when_backward_returns(workers, shape):
    """Would catch: a count given back while the thread still holds private work, a private task
    lost, routed twice or given a wrong buffer slot, an edge the serial path skips (not runnable,
    cut) taken privately: a gradient missing, doubled or wrong. Against the closed form and
    n = 0, ``REPS`` times for n = 1 and 2."""
    fn = SHAPES[shape]
    workers(0)
    ref, want = fn()
    assert_same(ref, want, f"{shape} n=0")
    for k in (1, 2):
        workers(k)
        for rep in range(REPS):
            got, _ = fn()
            assert_same(got, ref, f"{shape} n={k} rep {rep}")


# --- 4. errors while private work is held --------------------------------------------------

def _tree_with_a_failing_branch(fail_at: int, how: str):
    ws = [f64([float(i % 7 - 3), 2.0]) for i in range(256)]
    exc = ValueError(f"boom at {fail_at}")
    vals = []
    for i, w in enumerate(ws):
        t = w * coef(i)
        if i == fail_at:
            if how == "function":
                t = Boom.apply(t, exc)
            else:  # a built-in node whose saved tensor was modified in place
                t = t * 1.0
                u = t * t
                t.add_(1.0)
                t = u
        vals.append((t * 1.0).sum())
    return ws, tree(vals), exc


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["function", "builtin"])
@pytest.mark.parametrize("fail_at", [3, 130, 255])
def test_an_error_in_one_branch_drops_the_private_work(n, how, fail_at):
    """Would catch: a failed task whose private stacks keep running (hooks of the failed call
    run after it raised, the stack kept into the next task), a count lost with the dropped
    stack (a hang), or a helper left busy. The exact error is raised, every helper is free for
    a barrier of n + 1 afterwards, and a second backward is exact."""
    for _ in range(10):
        ws, loss, exc = _tree_with_a_failing_branch(fail_at, how)
        if how == "function":
            with pytest.raises(ValueError) as info:
                loss.backward()
            assert info.value is exc
        else:
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                loss.backward()
        all_helpers_free(n)
        ws2 = [f64([float(i % 7 - 3), 2.0]) for i in range(256)]
        tree([(w * coef(i) * 1.0).sum() for i, w in enumerate(ws2)]).backward()
        assert_same(grads(ws2), [np.full(2, coef(i)) for i in range(256)])


@pytest.mark.timeout(60)
def test_an_error_in_the_callers_branch_while_it_holds_every_other(workers):
    """Would catch: the failing thread keeping its stack (the backward would then wait for
    work nobody runs, or run it after raising). Helpers held: the caller holds every branch;
    a hook releases the helpers and the custom Function below it raises."""
    workers(2)
    ran = Log()
    with helpers_held(2) as release:
        ws = [f64([1.0]) for _ in range(8)]
        exc = KeyError("first")
        outs = []
        for i, w in enumerate(ws):
            t = w * 2.0
            if i == 0:
                t = Boom.apply(t, exc)
                t.register_hook(lambda g: release.set())
            else:
                t.register_hook(lambda g, i=i: ran.add(i))
            outs.append(t.sum())
        with pytest.raises(KeyError) as info:
            ops.sum(ops.stack(outs)).backward()
        assert info.value is exc
    all_helpers_free(2)
    # the other branches were published before the hook ran; they may have run or been
    # dropped, but none of them accumulated after backward raised
    done = sorted(ran.tags())
    assert all(w.grad is None or w.grad.tolist() == [2.0] for w in ws[1:])
    assert sum(w.grad is not None for w in ws[1:]) <= len(done)


# --- 5. private work meets the other features -----------------------------------------------

@pytest.mark.timeout(60)
def test_retain_grad_with_backward_inputs_matches_n_zero_and_torch(workers):
    """Would catch: a retains_grad hook of a node reached privately not run, or run for a node
    inputs= does not need. Products h_i = w_i * x retain their grad; backward(inputs=) names
    every third leaf and h_1 (a non-leaf input)."""
    def run_tg():
        x, ws = f64(XV), [f64(w) for w in WV[:32]]
        hs = [w * x for w in ws]
        for h in hs:
            h.retain_grad()
        loss = tree([(h * coef(i)).sum() for i, h in enumerate(hs)])
        loss.backward(inputs=[ws[i] for i in range(0, 32, 3)] + [hs[1]])
        return grads([x] + ws + hs)

    workers(0)
    ref = run_tg()
    for k in (1, 2):
        workers(k)
        for rep in range(REPS // 3):
            assert_same(run_tg(), ref, f"n={k} rep {rep}")
    torch = pytest.importorskip("torch")
    x = torch.tensor(XV, requires_grad=True)
    ws = [torch.tensor(w, requires_grad=True) for w in WV[:32]]
    hs = [w * x for w in ws]
    for h in hs:
        h.retain_grad()
    loss = tree([(h * coef(i)).sum() for i, h in enumerate(hs)])
    loss.backward(inputs=[ws[i] for i in range(0, 32, 3)] + [hs[1]])
    assert_same(ref, [None if t.grad is None else t.grad.numpy() for t in [x] + ws + hs])


@pytest.mark.timeout(60)
def test_double_backward_matches_n_zero_and_the_closed_form(workers):
    """Would catch: a graph recorded by create_graph=True on a helper's private path that misses
    an edge. loss = sum_i c_i * sum(w_i^2 * x); grad w.r.t. all leaves with create_graph, then
    backward of sum of squared gradients."""
    def run_tg():
        x, ws = f64(XV), [f64(w) for w in WV[:32]]
        loss = tree([(w * w * x).sum() * coef(i) for i, w in enumerate(ws)])
        gs = engine.grad(loss, [x] + ws, create_graph=True)
        tree([(g * g).sum() for g in gs]).backward()
        return [g.detach()._data.copy() for g in gs] + grads([x] + ws)

    workers(0)
    ref = run_tg()
    c, W, X = C[:32], WV[:32], XV
    gx = sum(c[i] * W[i] ** 2 for i in range(32))
    gw = [2 * c[i] * W[i] * X for i in range(32)]
    # d/dx of sum(gx^2) + sum_i sum(gw_i^2) and d/dw_i of the same
    ggx = sum(2 * gw[i] * 2 * c[i] * W[i] for i in range(32))
    ggw = [2 * gx * 2 * c[i] * W[i] + 2 * gw[i] * 2 * c[i] * X for i in range(32)]
    assert_same(ref, [gx] + gw + [ggx] + ggw)
    for k in (1, 2):
        workers(k)
        for rep in range(10):
            assert_same(run_tg(), ref, f"n={k} rep {rep}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_checkpoint_around_a_tree_with_a_shared_parameter(workers, reentrant):
    """Would catch: the recomputed tree inside the checkpoint (a nested parallel backward for
    the reentrant variant; unpack hooks inside built-in nodes for the other) losing or doubling
    a gradient. f(x) = tree_i c_i * sum(x * p * v_i) checkpointed, plus an unchecked tree with
    the same shared parameter p."""
    V = [np.array([float(i % 3 + 1)] * 3) for i in range(32)]

    def f(x, p):
        return tree([(x * p * engine.tensor(V[i], dtype=np.float64) * coef(i)).sum() for i in range(32)])

    def run_tg():
        x, p = f64(XV), f64([2.0, -1.0, 3.0])
        inside = tg.utils.checkpoint.checkpoint(f, x, p, use_reentrant=reentrant)
        outside = tree([(p * coef(i) * 1.0).sum() for i in range(32)])
        (inside + outside).backward()
        return grads([x, p])

    s = sum(coef(i) * V[i] for i in range(32))
    want = [s * np.array([2.0, -1.0, 3.0]), s * XV + C[:32].sum()]
    for k in (0, 1, 2):
        workers(k)
        for rep in range(10):
            assert_same(run_tg(), want, f"n={k} rep {rep}")


@pytest.mark.timeout(60)
def test_anomaly_mode_exact_gradients_and_a_nan_named(n):
    """Would catch: anomaly state not installed on the thread running private work (a NaN
    passing unnoticed, or the wrong node named), or gradients changed by anomaly mode."""
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        with engine.detect_anomaly():
            for _ in range(5):
                assert_same(*shape_tree_per_leaf())
                ws = [f64([1.0]) for _ in range(64)]
                vals = [((NaNGrad.apply(w * 1.0) if i == 41 else w * 1.0) * coef(i)).sum() for i, w in enumerate(ws)]
                with pytest.raises(RuntimeError, match="Function 'NaNGradBackward' returned nan values in its 0th output"), \
                        pytest.warns(UserWarning, match="Error detected in NaNGradBackward"):
                    tree(vals).backward()


def _graph_node_names(root) -> collections.Counter:
    seen, stack = {root}, [root]
    while stack:
        for nxt, _ in stack.pop().next_functions:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return collections.Counter(node.name() for node in seen)


@pytest.mark.timeout(60)
def test_the_profiler_records_every_node_exactly_once(n):
    """Would catch: a private node run without the profiler's hook, or recorded twice (a node
    published and also kept). The events of a tree backward's task are exactly the graph's
    nodes (and GraphRoot), whichever thread ran them. (Before the profile ends, a barrier of
    n + 1 inside it makes every helper finish what it was recording: kept from before the
    profiler waited for a call's last node, test_the_node_that_completes_the_task_...)"""
    for _ in range(5):
        ws = [f64(w) for w in WV]
        loss = tree([(w * coef(i) * 1.0).sum() for i, w in enumerate(ws)])
        want = _graph_node_names(loss.grad_fn) + collections.Counter(["GraphRoot"])
        with tg.profiler.profile() as prof:
            loss.backward()
            all_helpers_free(n)
        nodes = [e for e in prof.events() if e.kind == "node" and e.task == 1]
        assert collections.Counter(e.name for e in nodes) == want
        assert_same(grads(ws), [np.full(3, coef(i)) for i in range(64)])


HOLD = 0.5  # seconds the helper is held after completing a task (see the test below)


@pytest.mark.timeout(120)
def test_the_node_that_completes_the_task_on_a_helper_is_in_the_profile(workers):
    """Would catch (and caught, before run_call waited for its task's running nodes): the last
    node of a parallel backward dropped from the profile when a helper ran it (seen unforced in
    4 of 300 calls on 3.11 and 45 of 200 free-threaded, n = 1, a tree over 64 leaves). Forced
    here: a trace function on the helper (threading.settrace, set before the helper starts)
    holds it right after it completed the task (Engine._complete returned) for HOLD seconds or
    until the caller has left the profile: without the fix the caller leaves at once and the
    node is missing; with it the caller waits out the hold. Two branches meet
    at a barrier so each thread runs one; the helper's then waits until the caller's leaf has
    accumulated, so the helper usually runs the last node; a call where the caller completed
    instead is repeated (at most 50 calls)."""
    from threadgrad.engine import executor
    complete_code = executor.Engine._complete.__code__
    resume = threading.Event()
    helper_completed = threading.Event()

    def local(frame, event, arg):
        if event == "return":
            helper_completed.set()
            resume.wait(HOLD)  # widens the window; the outcome does not depend on its length
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code is complete_code else None

    threading.settrace(tracer)
    try:
        workers(1)
        for call in range(50):
            resume.clear()
            helper_completed.clear()
            caller_done = threading.Event()
            main = threading.current_thread()

            def mark(tensor):
                if threading.current_thread() is main:
                    caller_done.set()

            class Meet2(engine.Function):
                barrier = threading.Barrier(2)

                @staticmethod
                def forward(ctx, x):
                    return x.clone()

                @staticmethod
                def backward(ctx, g):
                    Meet2.barrier.wait(BARRIER_TIMEOUT)
                    if threading.current_thread() is not main:
                        assert caller_done.wait(BARRIER_TIMEOUT)
                    return g

            a, b = f64([1.0]), f64([2.0])
            a.register_post_accumulate_grad_hook(mark)
            b.register_post_accumulate_grad_hook(mark)
            loss = Meet2.apply(a * 1.0).sum() + Meet2.apply(b * 2.0).sum()
            want = _graph_node_names(loss.grad_fn) + collections.Counter(["GraphRoot"])
            with tg.profiler.profile() as prof:
                loss.backward()
            resume.set()
            all_helpers_free(1)  # the helper has left the node it was in
            assert a.grad.tolist() == [1.0] and b.grad.tolist() == [2.0]
            if not helper_completed.is_set():
                continue  # the caller completed this one: nothing forced
            got = collections.Counter(e.name for e in prof.events() if e.kind == "node")
            assert got == want, f"call {call}: missing {want - got}"
            return
        pytest.fail("the helper never completed the task in 50 calls")
    finally:
        threading.settrace(None)
        resume.set()
