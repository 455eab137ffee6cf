"""Randomized graphs and schedules, checked against an independent reference backward.

Hypothesis draws a DAG: leaves (some on ``virtual:N`` devices, some constants), then up to
14 ops, each reading earlier values (fan-out and shared subgraphs come from reuse, fan-in
from binary ops), each placed on a random device (inputs moved there with ``ops.to``), some
of them *reentrant*: a custom Function whose backward computes its gradient with a nested
``engine.grad``. Several values are roots, with random root gradients.

The test runs the engine on it (``backward`` or ``grad``, optionally twice on a retained
graph, optionally from two threads at once) and compares every leaf gradient, to 1e-10,
with a reference written here: a single-threaded reverse-topological sweep over the test's
own record of the DAG, computing each vector-Jacobian product with numpy directly. The
reference never calls the engine.

Examples are derandomized (the same 200 graphs every run) so a failure reproduces; set
``THREADGRAD_RANDOM_DAGS=random`` to draw new graphs.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadgrad import engine, ops

SHAPE = (3, 3)
DEVICE_CHOICES = ("cpu", "virtual:1", "virtual:2", "virtual:3")
PERM = [2, 0, 1]
FLAT_W = np.linspace(-1.0, 1.0, 9)  # constant used by the "flatscale" op
BOUND = 5.0  # values beyond this get a tanh appended, so nothing overflows

UNARY = ("neg", "tanh", "exp", "logsq1", "relu", "square", "transpose", "rowperm", "flatscale", "clone",
         "r_tanh")
BINARY = ("add", "sub", "mul", "divsq", "matmul", "bsum", "meanmul", "r_mul")

CHECKED = {"graphs": 0, "nodes": 0, "reentrant": 0, "threaded": 0, "pool": 0}


# --- reentrant ops: gradients through a nested engine.grad --------------------------------

class NestedTanh(engine.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ops.tanh(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        with engine.enable_grad():
            xd = x.detach().requires_grad_()
            y = ops.tanh(xd)
        (gx,) = engine.grad(y, xd, grad_outputs=g)  # reentrant: runs inside this backward
        return gx


class NestedMul(engine.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return ops.mul(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        with engine.enable_grad():
            ad = a.detach().requires_grad_()
            bd = b.detach().requires_grad_()
            y = ops.mul(ad, bd)
        return engine.grad(y, (ad, bd), grad_outputs=g)


# --- the engine side -------------------------------------------------------------------------

def engine_op(name: str, a, b=None):
    if name == "neg":
        return ops.neg(a)
    if name == "tanh":
        return ops.tanh(a)
    if name == "exp":
        return ops.exp(a)
    if name == "logsq1":
        return ops.log(ops.add(ops.mul(a, a), 1.0))
    if name == "relu":
        return ops.relu(a)
    if name == "square":
        return ops.pow(a, 2.0)
    if name == "transpose":
        return ops.transpose(a, 0, 1)
    if name == "rowperm":
        return ops.getitem(a, PERM)
    if name == "flatscale":
        w = engine.tensor(FLAT_W, dtype=np.float64, device=a.device)
        return ops.reshape(ops.mul(ops.reshape(a, (9,)), w), SHAPE)
    if name == "clone":
        return ops.clone(a)
    if name == "r_tanh":
        return NestedTanh.apply(a)
    if name == "add":
        return ops.add(a, b)
    if name == "sub":
        return ops.sub(a, b)
    if name == "mul":
        return ops.mul(a, b)
    if name == "divsq":
        return ops.div(a, ops.add(ops.mul(b, b), 1.0))
    if name == "matmul":
        return ops.matmul(a, b)
    if name == "bsum":
        return ops.add(a, ops.sum(b, dim=0, keepdim=True))
    if name == "meanmul":
        return ops.mul(a, ops.mean(b))
    if name == "r_mul":
        return NestedMul.apply(a, b)
    raise AssertionError(name)


# --- the reference: numpy forward and vector-Jacobian products ----------------------------

def ref_forward(name: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    if name == "neg":
        return -a
    if name in ("tanh", "r_tanh"):
        return np.tanh(a)
    if name == "exp":
        return np.exp(a)
    if name == "logsq1":
        return np.log(a * a + 1.0)
    if name == "relu":
        return np.maximum(a, 0.0)
    if name == "square":
        return a * a
    if name == "transpose":
        return a.T.copy()
    if name == "rowperm":
        return a[PERM]
    if name == "flatscale":
        return (a.reshape(9) * FLAT_W).reshape(SHAPE)
    if name == "clone":
        return a.copy()
    if name == "add":
        return a + b
    if name == "sub":
        return a - b
    if name in ("mul", "r_mul"):
        return a * b
    if name == "divsq":
        return a / (b * b + 1.0)
    if name == "matmul":
        return a @ b
    if name == "bsum":
        return a + b.sum(axis=0, keepdims=True)
    if name == "meanmul":
        return a * b.mean()
    raise AssertionError(name)


def ref_vjp(name: str, g: np.ndarray, a: np.ndarray, b: np.ndarray | None, y: np.ndarray) -> tuple:
    """Gradients w.r.t. (a, b) given the output gradient g (b's entry None for unary ops)."""
    if name == "neg":
        return (-g,)
    if name in ("tanh", "r_tanh"):
        return (g * (1.0 - y * y),)
    if name == "exp":
        return (g * y,)
    if name == "logsq1":
        return (g * 2.0 * a / (a * a + 1.0),)
    if name == "relu":
        return (g * (a > 0),)
    if name == "square":
        return (2.0 * a * g,)
    if name == "transpose":
        return (g.T,)
    if name == "rowperm":
        out = np.zeros_like(g)
        np.add.at(out, PERM, g)
        return (out,)
    if name == "flatscale":
        return ((g.reshape(9) * FLAT_W).reshape(SHAPE),)
    if name == "clone":
        return (g,)
    if name == "add":
        return (g, g)
    if name == "sub":
        return (g, -g)
    if name in ("mul", "r_mul"):
        return (g * b, g * a)
    if name == "divsq":
        d = b * b + 1.0
        return (g / d, -g * a * 2.0 * b / (d * d))
    if name == "matmul":
        return (g @ b.T, a.T @ g)
    if name == "bsum":
        return (g, np.broadcast_to(g.sum(axis=0, keepdims=True), b.shape))
    if name == "meanmul":
        return (g * b.mean(), np.full(b.shape, (g * a).sum() / b.size))
    raise AssertionError(name)


@dataclass
class Rec:
    """The test's own record of one value of the DAG."""

    op: str | None           # None for leaves and constants
    inputs: tuple             # indices of earlier values
    value: np.ndarray
    requires_grad: bool
    device: str


@dataclass
class Plan:
    seed: int
    leaves: list              # (device, requires_grad) per leaf; at least one requires grad
    steps: list               # (op, input indices, device)
    roots: list               # indices of values used as roots (distinct)
    mode: str                 # "backward" or "grad"
    twice: bool               # run it twice on a retained graph
    threaded: bool            # run it from two threads at once (retained graph)
    pool: bool                # max_recursion_depth = 0: every reentrant child runs on a pool thread
    records: list = field(default_factory=list)


@st.composite
def plans(draw) -> Plan:
    n_leaves = draw(st.integers(1, 4))
    leaves = [(draw(st.sampled_from(DEVICE_CHOICES)), draw(st.booleans()) or i == 0) for i in range(n_leaves)]
    steps = []
    n_ops = draw(st.integers(1, 14))
    for k in range(n_ops):
        n_avail = n_leaves + k  # indices of values so far (tanh guards are appended later and skipped here)
        # Prefer recent values (chains) but allow any earlier one (fan-out, shared subgraphs).
        pick = st.one_of(st.integers(max(0, n_avail - 3), n_avail - 1), st.integers(0, n_avail - 1))
        if draw(st.booleans()):
            op = draw(st.sampled_from(BINARY))
            ins = (draw(pick), draw(pick))
        else:
            op = draw(st.sampled_from(UNARY))
            ins = (draw(pick),)
        steps.append((op, ins, draw(st.sampled_from(DEVICE_CHOICES))))
    total = n_leaves + n_ops
    extra = draw(st.lists(st.integers(0, total - 1), max_size=2))
    roots = sorted(set([total - 1] + extra))
    return Plan(
        seed=draw(st.integers(0, 2**31 - 1)),
        leaves=leaves,
        steps=steps,
        roots=roots,
        mode=draw(st.sampled_from(("backward", "grad"))),
        twice=draw(st.booleans()),
        threaded=draw(st.integers(0, 4)) == 0,
        pool=draw(st.booleans()),
    )


def build(plan: Plan):
    """Build the engine graph and the reference record together. Returns
    (tensors by value index, records by value index, leaf tensors, root indices)."""
    rs = np.random.RandomState(plan.seed)
    tensors, recs, leaf_ts = [], [], []
    index_of_step = []  # logical value index -> physical index (after tanh guards)
    for dev, rg in plan.leaves:
        v = rs.uniform(-2.0, 2.0, SHAPE)
        t = engine.tensor(v, dtype=np.float64, device=dev, requires_grad=rg)
        tensors.append(t)
        recs.append(Rec(None, (), v, rg, dev))
        leaf_ts.append(t)
        index_of_step.append(len(recs) - 1)
    for op, ins, dev in plan.steps:
        phys = tuple(index_of_step[i] for i in ins)
        args = [ops.to(tensors[i], dev) for i in phys]
        out = engine_op(op, *args)
        vals = [recs[i].value for i in phys]
        ref = ref_forward(op, vals[0], vals[1] if len(vals) > 1 else None)
        rg = any(recs[i].requires_grad for i in phys)
        tensors.append(out)
        recs.append(Rec(op, phys, ref, rg, dev))
        if np.abs(ref).max() > BOUND:  # keep values bounded: append tanh (recorded too)
            tensors.append(ops.tanh(out))
            recs.append(Rec("tanh", (len(recs) - 1,), np.tanh(ref), rg, dev))
        index_of_step.append(len(recs) - 1)
    roots = sorted(set(index_of_step[r] for r in plan.roots))
    return tensors, recs, leaf_ts, roots


def reference_grads(recs: list, roots: list, root_grads: dict) -> dict:
    """Single-threaded reverse-topological backward over the record (indices are a
    topological order: every op reads only earlier values)."""
    grads: dict[int, np.ndarray] = {}
    for r in roots:
        grads[r] = grads.get(r, 0.0) + root_grads[r]
    for i in range(len(recs) - 1, -1, -1):
        rec = recs[i]
        if rec.op is None or i not in grads or not rec.requires_grad:
            continue
        a = recs[rec.inputs[0]].value
        b = recs[rec.inputs[1]].value if len(rec.inputs) > 1 else None
        for j, gj in zip(rec.inputs, ref_vjp(rec.op, grads[i], a, b, rec.value)):
            if recs[j].requires_grad:
                grads[j] = grads.get(j, 0.0) + gj
    return grads


def _close(got, want, what: str) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10, err_msg=what)


SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,
    derandomize=os.environ.get("THREADGRAD_RANDOM_DAGS") != "random",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print(f"\n[random DAGs] {CHECKED['graphs']} graphs checked against the reference "
          f"({CHECKED['nodes']} values, {CHECKED['reentrant']} reentrant nodes, "
          f"{CHECKED['threaded']} run from two threads at once, {CHECKED['pool']} with every "
          f"reentrant child on a pool thread)")


@pytest.mark.timeout(240)
@SETTINGS
@given(plans())
def test_random_dag_gradients_match_independent_reference(plan: Plan):
    eng = engine.get_engine()
    old = eng.max_recursion_depth
    if plan.pool:
        eng.max_recursion_depth = 0
    try:
        check_plan(plan)
    finally:
        eng.max_recursion_depth = old


def check_plan(plan: Plan) -> None:
    tensors, recs, leaf_ts, roots = build(plan)
    roots = [r for r in roots if recs[r].requires_grad]
    if not roots:  # every root is built from constants only: use the last value that needs grad
        roots = [max(i for i, rec in enumerate(recs) if rec.requires_grad)]
    rs = np.random.RandomState(plan.seed ^ 0x5EED)
    root_grads = {r: rs.uniform(-1.0, 1.0, SHAPE) for r in roots}
    outs = [tensors[r] for r in roots]
    gouts = [engine.tensor(root_grads[r], dtype=np.float64, device=tensors[r].device) for r in roots]
    want = reference_grads(recs, roots, root_grads)
    leaf_idx = [i for i, rec in enumerate(recs) if rec.op is None]
    grad_leaves = [(i, t) for i, t in zip(leaf_idx, leaf_ts) if t.requires_grad]
    repeats = 2 if plan.twice else 1

    def run_once(last: bool):
        keep = not last or plan.threaded
        if plan.mode == "backward":
            engine.backward(outs, gouts, retain_graph=keep)
            return None
        return engine.grad(outs, [t for _, t in grad_leaves], grad_outputs=gouts, retain_graph=keep,
                           allow_unused=True)

    if plan.threaded:
        # Two threads run the same retained graph at once (plus this thread afterwards).
        results: list = [None, None]
        errors: list = []

        def worker(k: int) -> None:
            try:
                results[k] = run_once(False)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads), "a threaded backward hung"
        if errors:
            raise errors[0]
        runs = results + [run_once(True) for _ in range(repeats)]
        CHECKED["threaded"] += 1
    else:
        runs = [run_once(k == repeats - 1) for k in range(repeats)]

    for pos, (i, t) in enumerate(grad_leaves):
        expected = want.get(i)
        if plan.mode == "backward":
            if expected is None:
                assert t.grad is None, f"leaf {i} is not reached but got a .grad"
            else:
                assert t.grad.device == t.device
                _close(t.grad.numpy(), len(runs) * expected, f"leaf {i} .grad after {len(runs)} backward calls")
        else:
            for res in runs:
                g = res[pos]
                if expected is None:
                    assert g is None, f"leaf {i} is not reached but grad() returned a gradient"
                else:
                    assert g.device == t.device
                    _close(g.numpy(), expected, f"grad() for leaf {i}")
    CHECKED["graphs"] += 1
    CHECKED["pool"] += plan.pool
    CHECKED["nodes"] += len(recs)
    CHECKED["reentrant"] += sum(1 for r in recs if r.op in ("r_tanh", "r_mul"))
