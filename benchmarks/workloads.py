"""The workloads of the performance suite (issue 6), each returning Markdown-ready tables.

Run them all with ``python benchmarks/run_all.py``; this module is also the entry point of
the subprocess that measures threads (``python benchmarks/workloads.py --threads-worker``),
which must start with the BLAS libraries limited to one thread.

Conventions (see benchmarks/README.md): float64 arrays of shape (16,) unless stated; every
repeat builds a fresh graph, timed as forward, and backward is timed on its own; the cyclic GC
is collected before and off during every timed region; libraries alternate within each
repeat, so a slow phase of a shared machine hits them alike, and where they are compared graph
for graph each timed sample follows an untimed one of its own library (Note [Warm samples] in
backends.py); medians are reported.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import numpy

from _common import (  # noqa: E402 - _common loads this checkout's threadgrad
    ROOT,
    profile_top,
    Row,
    Table,
    count_nodes,
    gc_paused,
    median,
    per_call_us,
)

from threadgrad import engine  # noqa: E402
from threadgrad import ops  # noqa: E402
from backends import Backend, build_chain, build_wide, make_inputs, wide_op_count  # noqa: E402

SWEEP_SIZES = (1_000, 10_000, 100_000, 1_000_000)
CHAIN_N = 10_000
WIDE_BRANCHES = 1_000
FEATURE_TOLERANCE = 1.05  # "costs nothing measurable": within 5% of the reference (the noise floor)


_T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[bench {time.perf_counter() - _T0:5.0f} s] {msg}", file=sys.stderr, flush=True)


def _names(backends: list[Backend]) -> list[str]:
    return [b.name for b in backends]


def _close(a: numpy.ndarray, b: numpy.ndarray, rtol: float = 1e-9) -> bool:
    scale = max(float(numpy.max(numpy.abs(b))), 1.0)
    return float(numpy.max(numpy.abs(a - b))) <= rtol * scale


# --- 1 and 3: chains of tiny elementwise ops, 1,000 to 1,000,000 nodes ----------------------

def chain_sweep(backends: list[Backend], quick: bool) -> dict[str, Any]:
    """Chain forward and backward per node at every size in SWEEP_SIZES, for every backend.

    threadgrad and torch run every size. A peer runs a size only while its estimated time
    (per-node cost at the previous size times the size) fits the per-size budget; its
    repeats shrink to fit, and sizes beyond it are skipped (reported as not measured).
    """
    repeats = ({1_000: 5, 10_000: 3, 100_000: 1, 1_000_000: 1} if quick
               else {1_000: 15, 10_000: 11, 100_000: 3, 1_000_000: 3})
    budget = 6.0 if quick else 25.0  # seconds per peer per size
    xa, ca, _, _ = make_inputs()
    consts = {b.name: b.const(ca) for b in backends}

    def build_for(n: int) -> Callable[[Any, Any], Any]:
        return lambda b, x: b.sum(build_chain(b, x, consts[b.name], n))

    # Warm-up, and check that every library's graph has the N + 2 nodes we divide by.
    nodes_seen: dict[str, int] = {}
    for b in backends:
        def probe(y: Any, b: Backend = b) -> None:
            if hasattr(y, "grad_fn") and y.grad_fn is not None and hasattr(y.grad_fn, "next_functions"):
                nodes_seen[b.name] = count_nodes(y.grad_fn)
        b.sample(build_for(1_000), xa, probe)
    for name, k in nodes_seen.items():
        if k != 1_000 + 2:
            log(f"WARNING: {name}'s 1,000-op chain has {k} nodes, expected 1,002")

    out: dict[str, Any] = {"sizes": SWEEP_SIZES, "per": {b.name: {} for b in backends}, "skipped": {}}
    est: dict[str, float] = {}  # seconds per op (forward + backward + freeing), last size
    for n in SWEEP_SIZES:
        active: list[tuple[Backend, int]] = []
        for b in backends:
            reps = repeats[n]
            if b.name not in ("threadgrad", "torch") and b.name in est:
                per_sample = est[b.name] * n
                reps = min(reps, int(budget // per_sample))
                if reps < 1:
                    out["skipped"].setdefault(b.name, []).append((n, per_sample))
                    continue
            active.append((b, reps))
        log(f"chain {n:,}: " + ", ".join(f"{b.name} x{r}" for b, r in active))
        fwd: dict[str, list] = {b.name: [] for b, _ in active}
        bwd: dict[str, list] = {b.name: [] for b, _ in active}
        wall: dict[str, list] = {b.name: [] for b, _ in active}
        bracket: dict[str, list] = {b.name: [] for b, _ in active}
        ref = None
        for r in range(max(r for _, r in active)):
            for b, reps in active:
                if r >= reps:
                    continue
                big = n == SWEEP_SIZES[-1]
                if big:  # bracket each largest-size sample with CHAIN_N samples, for the scaling ratio
                    before = b.sample(build_for(CHAIN_N), xa)[1]
                t0 = time.perf_counter()
                # (the largest size follows its bracket sample instead: Note [Warm samples] in backends.py)
                f, bw, g = b.sample(build_for(n), xa, warm=not big)
                wall[b.name].append(time.perf_counter() - t0)
                fwd[b.name].append(f)
                bwd[b.name].append(bw)
                if big:
                    after = b.sample(build_for(CHAIN_N), xa)[1]
                    small_us = (before + after) / 2 / (CHAIN_N + 2) * 1e6
                    bracket[b.name].append(bw / (n + 2) * 1e6 / small_us)
                if r == 0:
                    if b.name == "threadgrad":
                        ref = g
                    elif ref is not None and not _close(g, ref):
                        log(f"WARNING: {b.name}'s chain-{n} gradient differs from threadgrad's")
        for b, reps in active:
            out["per"][b.name][n] = {
                "fwd_us": median(fwd[b.name]) / (n + 1) * 1e6,  # n chain ops + the final sum
                "bwd_us": median(bwd[b.name]) / (n + 2) * 1e6,  # + SumBackward0 and AccumulateGrad
                "repeats": reps,
                "fwd_s": fwd[b.name],  # the raw samples, repeat by repeat (for paired ratios)
                "bwd_s": bwd[b.name],
            }
            if bracket[b.name]:
                out["per"][b.name][n]["scaling"] = median(bracket[b.name])
            est[b.name] = median(wall[b.name]) / n
    return out


def paired_ratio(a: list[float], b: list[float]) -> float | None:
    """Median over repeats of a[r] / b[r]: samples of one repeat ran back to back, so a slow
    phase of the machine moves both. None when the two were not measured repeat by repeat."""
    if not a or len(a) != len(b):
        return None
    return median(x / y for x, y in zip(a, b))


def chain_tables(sweep: dict[str, Any], backends: list[Backend]) -> tuple[Table, Table]:
    names = _names(backends)
    per = sweep["per"]

    def at(name: str, n: int, what: str) -> float | None:
        return per.get(name, {}).get(n, {}).get(what)

    n = CHAIN_N
    reps = per["threadgrad"][n]["repeats"]
    t1 = Table("chain", f"1. Chain of {n:,} elementwise nodes", names)
    bwd = Row(f"backward, µs/node ({n + 2:,} nodes)", {k: at(k, n, "bwd_us") for k in names},
              target="≤ 0.5x torch")
    fwd = Row(f"forward (recording), µs/op ({n + 1:,} ops)", {k: at(k, n, "fwd_us") for k in names},
              target="≤ 1.0x torch")
    for row, lim, what in ((bwd, 0.5, "bwd_s"), (fwd, 1.0, "fwd_s")):
        if "torch" in per and n in per["torch"]:
            row.ratio = paired_ratio(per["threadgrad"][n][what], per["torch"][n][what])
        r = row.ratio_to_torch()
        row.met = None if r is None else r <= lim
    t1.rows = [bwd, fwd]
    t1.notes = [
        f"`x` a (16,) float64 leaf; {n:,} ops alternating `tanh(x)` and `x * c` (`c` a constant), then `sum`. "
        f"Median of {reps} repeats; forward divides by ops run, backward by nodes reachable from the output. "
        "`ours/torch` is the median of per-repeat ratios (samples back to back), which can differ from the ratio "
        "of the two medians when the machine's speed drifted during the run.",
        "autograd's forward is `make_vjp` tracing the function; its backward is the returned vjp.",
    ]

    big, small = SWEEP_SIZES[-1], CHAIN_N
    t3 = Table("scaling", f"3. Chain scaling: {SWEEP_SIZES[0]:,} to {big:,} nodes", names)
    for size in SWEEP_SIZES:
        t3.rows.append(Row(f"chain {size:,}: backward, µs/node", {k: at(k, size, "bwd_us") for k in names}))
    for size in SWEEP_SIZES:
        t3.rows.append(Row(f"chain {size:,}: forward, µs/op", {k: at(k, size, "fwd_us") for k in names}))
    ratios = {}
    fratios = {}
    for k in names:
        ratios[k] = at(k, big, "scaling")
        b1, b0 = at(k, big, "bwd_us"), at(k, small, "bwd_us")
        if ratios[k] is None and b1 is not None and b0 is not None:
            ratios[k] = b1 / b0
        f1, f0 = at(k, big, "fwd_us"), at(k, small, "fwd_us")
        fratios[k] = None if f1 is None or f0 is None else f1 / f0
    rb = Row(f"backward µs/node at {big:,} / at {small:,}", ratios, target="≤ 1.2 (threadgrad)",
             show_ratio=False)
    rb.met = None if ratios.get("threadgrad") is None else ratios["threadgrad"] <= 1.2
    rf = Row(f"forward µs/op at {big:,} / at {small:,}", fratios, show_ratio=False)
    t3.rows += [rb, rf]
    reps_txt = ", ".join(f"{s:,}: {per['threadgrad'][s]['repeats']}" for s in SWEEP_SIZES)
    t3.notes = [f"The same chain as workload 1. Repeats per size (threadgrad and torch): {reps_txt}.",
                f"The `at {big:,} / at {small:,}` backward row pairs samples in time: every {big:,}-node sample runs "
                f"between two {small:,}-node samples of the same library, and the row is the median over repeats of "
                "the big sample's µs/node divided by the mean of its two neighbours (the table's other rows are "
                "plain medians, measured minutes apart)."]
    for name, lst in sweep["skipped"].items():
        t3.notes.append(f"{name} skipped " + ", ".join(f"{s:,} (estimated {t:.0f} s per sample)" for s, t in lst)
                        + ": over this run's per-size time budget.")
    t3.notes.append("Plot of these numbers: docs/img/us_per_node.png (full run), benchmarks/results/us_per_node.png.")
    return t1, t3


def plot_sweep(sweep: dict[str, Any], paths: list[str], title_note: str) -> list[str]:
    """µs per node against graph size (log x) for forward and backward; returns files written."""
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except Exception:
        log("matplotlib not importable: no plot")
        return []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"threadgrad": ("o-", "C0"), "torch": ("s-", "C1"), "autograd": ("^-", "C2"), "mygrad": ("v-", "C3")}
    for ax, what, title in ((axes[0], "bwd_us", "backward (µs per node)"), (axes[1], "fwd_us", "forward, recording (µs per op)")):
        for name, per in sweep["per"].items():
            xs = sorted(per)
            if not xs:
                continue
            st, col = styles.get(name, (".-", None))
            ax.plot(xs, [per[s][what] for s in xs], st, color=col, label=name)
        ax.set_xscale("log")
        ax.set_xlabel("chain length (nodes)")
        ax.set_ylabel("µs")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"Chain of tanh / mul on (16,) float64: cost per node vs graph size ({title_note})", fontsize=10)
    fig.tight_layout()
    written = []
    for p in paths:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        fig.savefig(p, dpi=110)
        written.append(p)
    plt.close(fig)
    return written


# --- 2: wide graph ---------------------------------------------------------------------------

def wide(backends: list[Backend], quick: bool) -> Table:
    branches = WIDE_BRANCHES
    repeats = 3 if quick else 11
    xa, _, c1a, c2a = make_inputs()
    consts = {b.name: (b.const(c1a), b.const(c2a)) for b in backends}
    nodes: dict[str, int] = {}

    def build(b: Any, x: Any) -> Any:
        c1, c2 = consts[b.name]
        return build_wide(b, x, c1, c2, branches)

    def probe(y: Any) -> None:
        if "n" not in nodes:
            nodes["n"] = count_nodes(y.grad_fn)

    log(f"wide {branches:,} branches x{repeats}")
    fwd: dict[str, list] = {b.name: [] for b in backends}
    bwd: dict[str, list] = {b.name: [] for b in backends}
    ref = None
    for r in range(repeats + 1):  # repeat 0 is a warm-up
        for b in backends:
            f, bw, g = b.sample(build, xa, probe if b.name == "threadgrad" else None, warm=True)  # Note [Warm samples]
            if r == 0:
                if b.name == "threadgrad":
                    ref = g
                elif not _close(g, ref):
                    log(f"WARNING: {b.name}'s wide gradient differs from threadgrad's")
                continue
            fwd[b.name].append(f)
            bwd[b.name].append(bw)
    n_nodes, n_ops = nodes["n"], wide_op_count(branches)
    names = _names(backends)
    t = Table("wide", f"2. Wide graph: {branches:,} branches, {n_nodes:,} nodes", names)
    rb = Row("backward, µs/node", {k: median(bwd[k]) / n_nodes * 1e6 for k in names}, target="≤ 0.5x torch")
    if "torch" in bwd:
        rb.ratio = paired_ratio(bwd["threadgrad"], bwd["torch"])
    r = rb.ratio_to_torch()
    rb.met = None if r is None else r <= 0.5
    rf = Row("forward (recording), µs/op", {k: median(fwd[k]) / n_ops * 1e6 for k in names})
    if "torch" in fwd:
        rf.ratio = paired_ratio(fwd["threadgrad"], fwd["torch"])
    t.rows = [rb, rf]
    t.notes = [f"{branches:,} branches `tanh(x * c1) * c2` from one leaf, summed by a balanced tree of adds, then `sum`; "
               f"the leaf's AccumulateGrad receives {branches:,} gradients. Median of {repeats} repeats after a warm-up. "
               f"All libraries are divided by threadgrad's node count ({n_nodes:,})."]
    return t


# --- 4: MLP 784-512-512-10 -----------------------------------------------------------------

MLP_SIZES = (784, 512, 512, 10)
MLP_BATCH = 64


def _mlp_data() -> tuple[numpy.ndarray, numpy.ndarray, list[numpy.ndarray]]:
    rng = numpy.random.default_rng(0)
    f32 = numpy.float32
    x = rng.standard_normal((MLP_BATCH, MLP_SIZES[0])).astype(f32)
    t = rng.integers(0, MLP_SIZES[-1], MLP_BATCH)
    params = []
    for fan_in, fan_out in zip(MLP_SIZES[:-1], MLP_SIZES[1:]):
        params.append((rng.standard_normal((fan_out, fan_in)) / math.sqrt(fan_in)).astype(f32))
        params.append((0.01 * rng.standard_normal(fan_out)).astype(f32))
    return x, t, params


class NumpyMLP:
    """The MLP's backward written directly in numpy: the same array operations, in the same
    order, as threadgrad's nodes run them (see each line's comment), minus the engine.

    The constructor runs the forward (keeping what the nodes save); only ``backward`` is
    timed, on a fresh instance each repeat. Copies that threadgrad makes when it stores a non-contiguous gradient into a
    leaf's ``.grad`` are *not* here: they are engine cost, and a numpy user would not make them.
    """

    def __init__(self, x: numpy.ndarray, t: numpy.ndarray, params: list[numpy.ndarray]) -> None:
        self.x, self.t = x, t
        self.W1, self.b1, self.W2, self.b2, self.W3, self.b3 = params
        self.h1 = numpy.maximum(x @ self.W1.T + self.b1, 0)
        self.h2 = numpy.maximum(self.h1 @ self.W2.T + self.b2, 0)
        o = self.h2 @ self.W3.T + self.b3
        s = o - o.max(axis=1, keepdims=True)
        self.logsm = s - numpy.log(numpy.exp(s).sum(axis=1, keepdims=True))
        n = x.shape[0]
        self.index = (numpy.arange(n).reshape(n, 1), t.reshape(n, 1))  # gather's index along dim 1
        self.loss = -self.logsm[numpy.arange(n), t].mean()

    def backward(self) -> list[numpy.ndarray]:
        f32 = numpy.float32
        n, c = self.logsm.shape
        g = numpy.ones((), dtype=f32)                         # the root gradient (ones_like(loss))
        g = g / numpy.asarray(float(n), dtype=f32)            # DivBackward0 (mean = sum / n)
        g = numpy.broadcast_to(g.reshape((1,)), (n,))         # SumBackward0: reshape + expand
        g = -g                                                # NegBackward0
        g = g.reshape((n, 1))                                 # ViewBackward0 (squeeze)
        gl = numpy.zeros((n, c), dtype=f32)                   # GatherBackward0: zeros + add.at
        numpy.add.at(gl, self.index, g)
        gz3 = gl - numpy.exp(self.logsm) * gl.sum(axis=1, keepdims=True)  # LogSoftmaxBackward0
        grads = []
        gz = gz3
        for W, h, in_h in ((self.W3, self.h2, True), (self.W2, self.h1, True), (self.W1, self.x, False)):
            gb = gz.sum(axis=0)                               # AddmmBackward0: bias, sum(g, 0)
            gW = gz.T @ h                                     # AddmmBackward0: weight, g.T @ x
            grads += [gW, gb]
            if in_h:
                gh = gz @ W                                   # AddmmBackward0: input, g @ W
                gz = gh * (h > 0).astype(f32)                 # ReluBackward0: g * mask(out > 0)
        return grads  # W3, b3, W2, b2, W1, b1

    @staticmethod
    def grad_copies(grads: list[numpy.ndarray]) -> list[numpy.ndarray]:
        """The copies threadgrad's AccumulateGrad makes when it stores a gradient into an
        empty ``.grad``: a C-order copy of every gradient that is a view (here the transposed
        weight gradients and the reshaped bias sums). Diagnostic only."""
        return [g.copy() if g.base is not None else g for g in grads]


def _mlp_ours(x: numpy.ndarray, t: numpy.ndarray, params: list[numpy.ndarray]) -> tuple[Callable, Callable, Callable]:
    X, T = engine.tensor(x), engine.tensor(t)
    P = [engine.tensor(p, requires_grad=True) for p in params]

    def forward() -> Any:
        for p in P:
            p.grad = None
        h = ops.relu(ops.linear(X, P[0], P[1]))
        h = ops.relu(ops.linear(h, P[2], P[3]))
        return ops.cross_entropy(ops.linear(h, P[4], P[5]), T)

    return forward, lambda loss: loss.backward(), lambda _: [numpy.array(p.grad._data) for p in P]


def _mlp_torch(torch: Any, x: numpy.ndarray, t: numpy.ndarray, params: list[numpy.ndarray]) -> tuple[Callable, Callable, Callable]:
    F = torch.nn.functional
    X, T = torch.from_numpy(x), torch.from_numpy(t)
    P = [torch.tensor(p, requires_grad=True) for p in params]

    def forward() -> Any:
        for p in P:
            p.grad = None
        h = F.relu(F.linear(X, P[0], P[1]))
        h = F.relu(F.linear(h, P[2], P[3]))
        return F.cross_entropy(F.linear(h, P[4], P[5]), T)

    return forward, lambda loss: loss.backward(), lambda _: [p.grad.numpy().copy() for p in P]


def _mlp_autograd(b: Any, x: numpy.ndarray, t: numpy.ndarray, params: list[numpy.ndarray]) -> tuple[Callable, Callable, Callable]:
    anp = b.anp
    n = x.shape[0]
    rows = numpy.arange(n)

    def loss_fn(P: list) -> Any:
        h = anp.maximum(anp.dot(x, P[0].T) + P[1], 0)
        h = anp.maximum(anp.dot(h, P[2].T) + P[3], 0)
        o = anp.dot(h, P[4].T) + P[5]
        s = o - anp.max(o, axis=1, keepdims=True)
        logsm = s - anp.log(anp.sum(anp.exp(s), axis=1, keepdims=True))
        return -anp.mean(logsm[rows, t])

    def forward() -> Any:
        return b.make_vjp(loss_fn, list(params))

    def backward(state: Any) -> list:
        vjp, ans = state
        return vjp(numpy.ones_like(ans))

    return forward, backward, lambda grads: [numpy.array(g) for g in grads]


def _mlp_mygrad(b: Any, x: numpy.ndarray, t: numpy.ndarray, params: list[numpy.ndarray]) -> tuple[Callable, Callable, Callable]:
    mg = b.mg
    from mygrad.nnet import relu, softmax_crossentropy  # noqa: PLC0415

    P = [mg.tensor(p) for p in params]

    def forward() -> Any:
        h = relu(mg.matmul(x, P[0].T) + P[1])
        h = relu(mg.matmul(h, P[2].T) + P[3])
        return softmax_crossentropy(mg.matmul(h, P[4].T) + P[5], t)

    return forward, lambda loss: loss.backward(), lambda _: [numpy.array(p.grad) for p in P]


def mlp(backends: list[Backend], quick: bool) -> Table:
    repeats = 7 if quick else 30
    x, t, params = _mlp_data()
    ref = NumpyMLP(x, t, params)
    libs: dict[str, tuple[Callable, Callable, Callable]] = {}
    for b in backends:
        if b.name == "threadgrad":
            libs[b.name] = _mlp_ours(x, t, params)
        elif b.name == "torch":
            libs[b.name] = _mlp_torch(b.torch, x, t, params)
        elif b.name == "autograd":
            libs[b.name] = _mlp_autograd(b, x, t, params)
        elif b.name == "mygrad":
            libs[b.name] = _mlp_mygrad(b, x, t, params)
    log(f"mlp x{repeats}")
    fwd: dict[str, list] = {k: [] for k in libs}
    bwd: dict[str, list] = {k: [] for k in [*libs, "numpy", "numpy_copies"]}
    faults: dict[str, list] = {}
    np_grads = ref.backward()
    order = [4, 5, 2, 3, 0, 1]  # NumpyMLP returns W3, b3, W2, b2, W1, b1; params are W1, b1, ...
    expected = [None] * 6
    for i, j in enumerate(order):
        expected[j] = np_grads[i]
    for r in range(repeats + 1):  # repeat 0 is a warm-up
        for name, (forward, backward, fetch) in libs.items():
            backward(forward())  # untimed: Note [Warm samples] in backends.py
            with gc_paused():
                t0 = time.perf_counter()
                state = forward()
                f0 = _minor_faults()
                t1 = time.perf_counter()
                out = backward(state)
                t2 = time.perf_counter()
                f1 = _minor_faults()
            if r == 0:
                for g, e in zip(fetch(out), expected):
                    if not numpy.allclose(g, e, rtol=1e-3, atol=1e-5):
                        log(f"WARNING: {name}'s MLP gradients differ from the numpy reference")
                        break
            del state, out
            if r:
                fwd[name].append(t1 - t0)
                bwd[name].append(t2 - t1)
                faults.setdefault(name, []).append(f1 - f0)
        # A fresh numpy forward (not timed) before each backward, as every library gets: the
        # backward then reads freshly written activations, as it would in a training step.
        NumpyMLP(x, t, params).backward()  # untimed: Note [Warm samples] in backends.py
        with gc_paused():
            ref = NumpyMLP(x, t, params)
            f0 = _minor_faults()
            t0 = time.perf_counter()
            ref.backward()
            t1 = time.perf_counter()
            f1 = _minor_faults()
            grads = ref.backward()
            NumpyMLP.grad_copies(grads)  # once untimed: the timed copies then reuse freed memory
            t1b = time.perf_counter()
            NumpyMLP.grad_copies(grads)
            t2 = time.perf_counter()
            del grads
        t1, t2 = t1, t1 + (t2 - t1b)
        if r:
            bwd["numpy"].append(t1 - t0)
            bwd["numpy_copies"].append(t2 - t1)
            faults.setdefault("numpy", []).append(f1 - f0)
    cols = [*libs, "numpy"]
    t_ = Table("mlp", f"4. MLP {'-'.join(map(str, MLP_SIZES))}, batch {MLP_BATCH}, float32", cols)
    bms = {k: median(bwd[k]) * 1e3 for k in cols}
    row_b = Row("backward, ms", bms, target="≤ 1.0x torch")
    if "torch" in bwd:
        row_b.ratio = paired_ratio(bwd["threadgrad"], bwd["torch"])
    r = row_b.ratio_to_torch()
    row_b.met = None if r is None else r <= 1.0
    vs_np = {k: paired_ratio(bwd[k], bwd["numpy"]) for k in cols}
    row_n = Row("backward / numpy reference (same math)", vs_np, target="≤ 1.1 (threadgrad)", show_ratio=False)
    row_n.met = vs_np["threadgrad"] <= 1.1
    row_f = Row("forward, ms (for reference)", {k: median(fwd[k]) * 1e3 for k in libs})
    nc = median(bwd["numpy_copies"]) * 1e3  # the copies alone
    row_c = Row("diagnostic: the `.grad` copies threadgrad makes, done in numpy, ms", {"numpy": nc})
    rows = [row_b, row_n, row_c]
    if _minor_faults() >= 0:
        rows.append(Row("diagnostic: minor page faults during one backward", {k: median(v) for k, v in faults.items()},
                        show_ratio=False, digits=0))
    t_.rows = rows + [row_f]
    blas = _blas_summary()
    t_.notes = [
        "Loss: `cross_entropy(linear(relu(linear(relu(linear(x, W1, b1)), W2, b2)), W3, b3), target)`; "
        "every library's backward computes the gradients of all six parameters (x needs none). "
        f"Median of {repeats} backward calls, each on a fresh forward (not timed with it).",
        "numpy: `NumpyMLP.backward` in benchmarks/workloads.py, the same array operations as threadgrad's nodes "
        "(mean, sum/expand, neg, view, gather's zeros + add.at, log_softmax, bias sum, two matmuls per layer, relu mask), "
        "without the engine.",
        "Diagnostics: the copies threadgrad's AccumulateGrad makes when the gradient reaching an empty `.grad` "
        "is a view (the weight gradients arrive transposed, `(a.T @ g).T`, and the bias sums reshaped), timed "
        f"alone in numpy: {nc:.2f} ms of threadgrad's {bms['threadgrad'] - bms['numpy']:.2f} ms gap to numpy. Minor "
        "page faults (getrusage) count fresh memory the backward touched: on this VM each costs microseconds, and "
        "how many there are depends on the allocator's state, so the ms columns move between runs with them.",
        f"BLAS and torch intra-op threads: {os.environ.get('OPENBLAS_NUM_THREADS', 'default')} ({blas}).",
    ]
    return t_


def _minor_faults() -> int:
    """Minor page faults of this process so far (-1 where getrusage is missing)."""
    try:
        import resource  # noqa: PLC0415

        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    except Exception:
        return -1


def _blas_summary() -> str:
    try:
        cfg = numpy.show_config(mode="dicts")  # type: ignore[call-arg]
        blas = cfg.get("Build Dependencies", {}).get("blas", {}).get("name", "?")
    except Exception:
        blas = "?"
    return f"numpy BLAS: {blas}, {os.cpu_count()} CPUs"


# --- 5: threads (a subprocess with single-threaded BLAS) -----------------------------------

_BLAS_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
             "VECLIB_MAXIMUM_THREADS": "1", "NUMEXPR_NUM_THREADS": "1"}
MM_SIZE, MM_DEPTH = 512, 20
TINY_CHAIN = 2_000


def _run_threads(fns: list[Callable[[], None]]) -> float:
    """Start one thread per fn, release them together, return the wall time until all end."""
    barrier = threading.Barrier(len(fns) + 1)
    errors: list[BaseException] = []

    def body(fn: Callable[[], None]) -> None:
        barrier.wait()
        try:
            fn()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=body, args=(fn,)) for fn in fns]
    for th in threads:
        th.start()
    barrier.wait()
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    dt = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return dt


class _MatmulLib:
    """Build a chain of MM_DEPTH matmuls (leaves: x and every W), for threadgrad or torch."""

    def __init__(self, name: str, torch: Any = None) -> None:
        self.name = name
        self.torch = torch
        rng = numpy.random.default_rng(1)
        self.xa = rng.standard_normal((MM_SIZE, MM_SIZE))
        self.Wa = [rng.standard_normal((MM_SIZE, MM_SIZE)) / math.sqrt(MM_SIZE) for _ in range(MM_DEPTH)]
        ca = make_inputs()[1]
        self.tiny_x, self.tiny_c = make_inputs()[0], ca

    def leaf(self, a: numpy.ndarray) -> Any:
        if self.torch is not None:
            return self.torch.tensor(a, requires_grad=True)
        return engine.tensor(a, dtype=a.dtype, requires_grad=True)

    def matmul_graph(self) -> Any:
        mm = self.torch.matmul if self.torch is not None else ops.matmul
        sm = self.torch.sum if self.torch is not None else ops.sum
        h = self.leaf(self.xa)
        for w in self.Wa:
            h = mm(h, self.leaf(w))
        return sm(h)

    def tiny_graph(self) -> Any:
        if self.torch is not None:
            tanh, mul, sm, c = self.torch.tanh, self.torch.mul, self.torch.sum, self.torch.tensor(self.tiny_c)
        else:
            tanh, mul, sm, c = ops.tanh, ops.mul, ops.sum, engine.tensor(self.tiny_c)
        x = self.leaf(self.tiny_x)
        for i in range(TINY_CHAIN):
            x = tanh(x) if i % 2 == 0 else mul(x, c)
        return sm(x)


def numpy_floor_chain(xa: numpy.ndarray, ca: numpy.ndarray, n: int) -> Callable[[], numpy.ndarray]:
    """A function running the chain's backward math as raw numpy, one Python call per node, no
    graph: the per-node closures are built here (untimed); the returned call is the floor."""
    ys, h = [], xa
    for i in range(n):
        if i % 2 == 0:
            h = numpy.tanh(h)
            ys.append(h)
        else:
            h = h * ca
            ys.append(None)
    fns = [(lambda g, yv=yv: g - g * yv * yv) if yv is not None else (lambda g: g * ca) for yv in reversed(ys)]

    def run() -> numpy.ndarray:
        g = numpy.ones_like(xa)
        for f in fns:
            g = f(g)
        return g

    return run


def _tiny_chain_floor(passes: int = 5) -> Callable[[], None]:
    """The tiny chain's backward math as raw numpy calls (:func:`numpy_floor_chain`), no
    engine, ``passes`` times per call: 5 make a call last about as long as one threadgrad
    backward of the chain, so the GIL's 5 ms switch interval cuts both the same way."""
    xa, ca, _, _ = make_inputs()
    run = numpy_floor_chain(xa, ca, TINY_CHAIN)

    def floor() -> None:
        for _ in range(passes):
            run()

    return floor


def threads_worker(quick: bool) -> dict[str, Any]:
    """Runs in a subprocess whose BLAS is single-threaded. Returns the raw timings."""
    from _common import try_import_torch  # noqa: PLC0415

    torch = try_import_torch()
    libs = [_MatmulLib("threadgrad")]
    if torch is not None:
        torch.set_num_threads(1)
        libs.append(_MatmulLib("torch", torch))
    per_thread = 1  # graphs each thread runs backward on, in (a)
    repeats = 1 if quick else 5
    tiny_per_repeat = 5 if quick else 4
    res: dict[str, Any] = {lib.name: {"a_1": [], "a_2": [], "b_seq": [], "b_par": [], "t_seq": [], "t_par": []}
                           for lib in libs}
    for r in range(repeats + 1):  # repeat 0 is a warm-up (thread start-up, BLAS buffers)
        for lib in libs:
            s = res[lib.name]
            # (a) separate graphs: 1 thread x k graphs, then 2 threads x k graphs each.
            with gc_paused():
                ys = [lib.matmul_graph() for _ in range(per_thread)]
                t1 = _run_threads([lambda ys=ys: [y.backward() for y in ys]])
                ys = [[lib.matmul_graph() for _ in range(per_thread)] for _ in range(2)]
                t2 = _run_threads([lambda ys=ys_: [y.backward() for y in ys] for ys_ in ys])
                del ys
            # (b) one shared retained graph: 4 backward calls one after another vs 4 threads at once.
            with gc_paused():
                y = lib.matmul_graph()
                y.backward(retain_graph=True)  # warm: first call allocates .grad
                bs = _run_threads([lambda: [y.backward(retain_graph=True) for _ in range(4)]])
                bp = _run_threads([lambda: y.backward(retain_graph=True) for _ in range(4)])
                del y
                y = lib.tiny_graph()
                y.backward(retain_graph=True)
                for _ in range(tiny_per_repeat):  # short runs: more of them, against noise
                    ts = _run_threads([lambda: [y.backward(retain_graph=True) for _ in range(4)]])
                    tp = _run_threads([lambda: y.backward(retain_graph=True) for _ in range(4)])
                    if r:
                        s["t_seq"].append(ts)
                        s["t_par"].append(tp)
                del y
            if r:
                s["a_1"].append(t1)
                s["a_2"].append(t2)
                s["b_seq"].append(bs)
                s["b_par"].append(bp)
        # Control: the backward's matmuls alone in raw numpy, 1 thread vs 2: what the machine
        # allows at this moment (another process on a 2-CPU machine takes it below 2.0).
        a = numpy.random.default_rng(2).standard_normal((MM_SIZE, MM_SIZE))

        def mms() -> None:
            for _ in range(2 * MM_DEPTH):
                a @ a

        c1 = _run_threads([mms])
        c2 = _run_threads([mms, mms])
        if r:
            res.setdefault("numpy", {"a_1": [], "a_2": [], "t_seq": [], "t_par": []})
            res["numpy"]["a_1"].append(c1)
            res["numpy"]["a_2"].append(c2)
        # Control for (b)'s tiny chain: its backward math as raw numpy calls in a Python loop
        # (GIL-bound, no engine), 4 calls in a row vs 4 threads at once: what the GIL allows.
        floor = _tiny_chain_floor()
        for _ in range(tiny_per_repeat):
            ts = _run_threads([lambda: [floor() for _ in range(4)]])
            tp = _run_threads([floor for _ in range(4)])
            if r:
                res["numpy"]["t_seq"].append(ts)
                res["numpy"]["t_par"].append(tp)
    blas = _blas_summary()
    return {"res": res, "per_thread": per_thread, "repeats": repeats, "tiny_repeats": repeats * tiny_per_repeat,
            "blas": blas,
            "torch_threads": torch.get_num_threads() if torch is not None else None}


def threads(backends: list[Backend], quick: bool) -> Table:
    names = [n for n in _names(backends) if n in ("threadgrad", "torch")]
    log("threads (subprocess, BLAS single-threaded)")
    env = dict(os.environ, **_BLAS_ENV)
    cmd = [sys.executable, os.path.abspath(__file__), "--threads-worker"] + (["--quick"] if quick else [])
    if "torch" not in names:
        cmd.append("--no-torch")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"threads worker failed:\n{proc.stderr[-3000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    res = data["res"]
    k = data["per_thread"]
    t = Table("threads", "5. Threads", names + ["numpy (control)"])

    def val(fn: Callable[[dict], float]) -> dict[str, float | None]:
        return {n: fn(res[n]) if n in res else None for n in names}

    a_ratio = val(lambda s: median(2 * a1 / a2 for a1, a2 in zip(s["a_1"], s["a_2"])))
    ctl = res["numpy"]
    a_ratio["numpy (control)"] = median(2 * a1 / a2 for a1, a2 in zip(ctl["a_1"], ctl["a_2"]))
    ra = Row(f"(a) 2 threads vs 1, separate graphs: backward throughput ratio", a_ratio,
             target="≥ 1.9 (threadgrad)", show_ratio=False)
    ra.met = a_ratio["threadgrad"] >= 1.9
    rel = {n: (a_ratio[n] / a_ratio["numpy (control)"]) if a_ratio.get(n) is not None else None for n in names}
    ra_rel = Row("(a) the same ratio / the control's (1.0: as much scaling as the machine allowed)", rel,
                 show_ratio=False)
    ra1 = Row("(a) one backward of the matmul chain, 1 thread, ms", val(lambda s: median(s["a_1"]) / k * 1e3))
    ra1.values["numpy (control)"] = median(ctl["a_1"]) * 1e3
    b_ratio = val(lambda s: median(p / q for p, q in zip(s["b_par"], s["b_seq"])))
    rb = Row("(b) 4 threads on one retained matmul graph / 4 calls in a row: total time", b_ratio,
             target="≤ 1.0 (threadgrad)", show_ratio=False)
    rb.met = b_ratio["threadgrad"] <= 1.0
    tb_ratio = val(lambda s: median(p / q for p, q in zip(s["t_par"], s["t_seq"])))
    tb_ratio["numpy (control)"] = median(p / q for p, q in zip(ctl["t_par"], ctl["t_seq"]))
    rt = Row(f"(b) same, tiny-op chain of {TINY_CHAIN:,} nodes (GIL-bound)", tb_ratio,
             target="≤ 1.0 (threadgrad)", show_ratio=False)
    rt.met = tb_ratio["threadgrad"] <= 1.0
    rbs = Row("(b) 4 calls in a row on the matmul graph, ms", val(lambda s: median(s["b_seq"]) * 1e3))
    rts = Row(f"(b) 4 calls in a row on the tiny chain, ms", val(lambda s: median(s["t_seq"]) * 1e3))
    rts.values["numpy (control)"] = median(ctl["t_seq"]) * 1e3
    t.rows = [ra, ra_rel, ra1, rb, rbs, rt, rts]
    t.notes = [
        f"Matmul graph: a float64 {MM_SIZE}x{MM_SIZE} leaf times {MM_DEPTH} {MM_SIZE}x{MM_SIZE} leaf weights in a chain, "
        "then `sum`; backward runs two matmuls per node (numpy releases the GIL inside them).",
        f"(a): each thread runs backward on {k} graph{'s' if k > 1 else ''} of its own (built before timing); ratio = "
        "(2 threads' graphs per second) / (1 thread's). (b): `backward(retain_graph=True)` on one graph, "
        "4 concurrent calls vs the same 4 calls one after another; gradients accumulate into the same leaves.",
        f"numpy (control): the backward's {2 * MM_DEPTH} matmuls alone, as raw numpy calls, 1 thread vs 2, measured in "
        "the same repeats: the scaling the machine itself allowed during this run. The engine cannot beat it. "
        "For the tiny chain, the control is the chain's backward math as raw numpy calls in a Python loop (no "
        "engine, five passes per call so that a call lasts about as long as one threadgrad backward), 4 threads vs "
        "4 calls in a row: what 4 GIL-bound threads cost on this machine.",
        f"Measured in a subprocess started with {', '.join(f'{a}=1' for a in list(_BLAS_ENV)[:3])} "
        f"(and torch.set_num_threads(1)); {data['blas']}. Median of {data['repeats']} repeats after a warm-up "
        f"({data['tiny_repeats']} for the tiny chain). "
        "On a 2-core machine 2.0 is the ceiling of (a), and any other process running costs directly.",
    ]
    return t


# --- 6: cross-device hand-off --------------------------------------------------------------

def cross_device(backends: list[Backend], quick: bool, chain_us: float | None) -> Table:
    n = 500 if quick else 2_000
    repeats = 3 if quick else 7
    v = "virtual:1"
    xa = make_inputs()[0]

    def build() -> tuple[Any, Any]:
        x = engine.tensor(xa, dtype=xa.dtype, requires_grad=True)
        h = x
        for i in range(n):
            h = ops.to(h, v if i % 2 == 0 else "cpu")
        return x, ops.sum(h)

    log(f"cross-device {n:,} hops x{repeats}")
    fwd, bwd = [], []
    for r in range(repeats + 1):
        with gc_paused():
            t0 = time.perf_counter()
            x, y = build()
            t1 = time.perf_counter()
            y.backward()
            t2 = time.perf_counter()
        if not numpy.allclose(x.grad._data, 1.0):
            log("WARNING: cross-device chain gradient is wrong")
        del x, y
        if r:
            fwd.append((t1 - t0) / n * 1e6)
            bwd.append((t2 - t1) / n * 1e6)
    t = Table("devices", "6. Cross-device hand-off (cpu <-> virtual:1 every node)", ["threadgrad"])
    rb = Row("backward, µs per device change (all-in)", {"threadgrad": median(bwd)}, target="≤ 50 µs",
             show_ratio=False)
    rb.met = median(bwd) <= 50
    rows = [rb]
    if chain_us is not None:
        rows.append(Row("same-device chain backward, µs/node (workload 1, for comparison)", {"threadgrad": chain_us},
                        show_ratio=False))
        rows.append(Row("extra cost of a device change over a same-device node, µs",
                        {"threadgrad": median(bwd) - chain_us}, show_ratio=False))
    rows.append(Row("forward, µs per `ops.to` call", {"threadgrad": median(fwd)}, show_ratio=False))
    t.rows = rows
    t.notes = [
        f"A chain of {n:,} `ops.to` nodes alternating `virtual:1` and `cpu`, then `sum`: every backward node runs "
        "on the other device's thread (the caller's thread for cpu, virtual:1's worker), so each node is one thread "
        f"hand-off through a ReadyQueue. Median of {repeats} repeats after a warm-up; per change = backward time / {n:,}.",
        "torch has no second CPU device, so it has no column here.",
    ]
    return t


# --- 7: feature costs on the per-node path -------------------------------------------------

def features(backends: list[Backend], quick: bool) -> Table:
    n = 2_000 if quick else CHAIN_N
    repeats = 7 if quick else 9
    xa, ca, _, _ = make_inputs()
    libs = [b for b in backends if b.name in ("threadgrad", "torch")]

    def variants(b: Backend) -> dict[str, Callable[[], tuple[float, float]]]:
        torch = getattr(b, "torch", None)
        c = b.const(ca)
        other = b.leaf(xa)  # an unrelated tensor with a hook, and an unrelated graph with a node hook
        other_out = b.tanh(other)
        keep = [other, other_out]
        if torch is None:
            set_anomaly, anomaly_ctx = engine.set_detect_anomaly, engine.detect_anomaly
            grad_fn = engine.grad
            from threadgrad import profiler  # noqa: PLC0415
            profile_ctx = profiler.profile
        else:
            set_anomaly, anomaly_ctx = torch.autograd.set_detect_anomaly, torch.autograd.detect_anomaly
            grad_fn = torch.autograd.grad

            def profile_ctx() -> Any:
                return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])

        def run(call: Callable[[Any, Any], Any], ctx: Callable[[], Any] | None = None) -> tuple[float, float]:
            x = b.leaf(xa)
            with gc_paused():
                if ctx is None:
                    t0 = time.perf_counter()
                    y = b.sum(build_chain(b, x, c, n))
                    t1 = time.perf_counter()
                    call(y, x)
                    t2 = time.perf_counter()
                else:
                    with ctx():
                        t0 = time.perf_counter()
                        y = b.sum(build_chain(b, x, c, n))
                        t1 = time.perf_counter()
                        call(y, x)
                        t2 = time.perf_counter()
            del x, y
            return t1 - t0, t2 - t1

        def plain(y: Any, x: Any) -> None:
            y.backward()

        def with_unrelated_hooks() -> tuple[float, float]:
            h1 = other.register_hook(lambda g: g)
            h2 = other_out.grad_fn.register_hook(lambda gi, go: None)
            try:
                return run(plain)
            finally:
                h1.remove()
                h2.remove()

        def after_anomaly() -> tuple[float, float]:
            set_anomaly(True)
            set_anomaly(False)
            return run(plain)

        def after_profile() -> tuple[float, float]:
            with profile_ctx():
                pass
            return run(plain)

        import warnings  # noqa: PLC0415

        def anomaly_on() -> Any:
            class _Ctx:
                def __enter__(self) -> None:
                    self._w = warnings.catch_warnings()
                    self._w.__enter__()
                    warnings.simplefilter("ignore")
                    self._a = anomaly_ctx()
                    self._a.__enter__()

                def __exit__(self, *e: Any) -> None:
                    self._a.__exit__(*e)
                    self._w.__exit__(*e)
            return _Ctx()

        return {
            "ref": lambda: run(plain),
            "hooks": with_unrelated_hooks,
            "after_anomaly": after_anomaly,
            "inputs": lambda: run(lambda y, x: y.backward(inputs=[x])),
            "grad": lambda: run(lambda y, x: grad_fn(y, x)),
            "anomaly_on": lambda: run(plain, anomaly_on),
            "after_profile": after_profile,
            "profile_on": lambda: run(plain, profile_ctx),
            "_keep": lambda: keep,  # type: ignore[dict-item]
        }

    runs = {b.name: variants(b) for b in libs}
    keys = ["ref", "after_anomaly", "hooks", "inputs", "grad", "after_profile", "anomaly_on", "profile_on"]
    samples: dict[str, dict[str, list]] = {b.name: {k: [] for k in keys} for b in libs}
    ratios: dict[str, dict[str, list]] = {b.name: {k: [] for k in keys} for b in libs}
    log(f"feature costs x{repeats}")
    for r in range(repeats + 1):
        for k in keys[1:]:
            if k in ("anomaly_on", "profile_on") and r > min(repeats, 3):
                continue  # expensive (a stack trace per op; an event per node) and only informational
            for b in libs:
                # Each variant sits between two reference runs and is divided by their mean:
                # a slow phase of the machine then moves both sides of the ratio.
                _, before = runs[b.name]["ref"]()
                _, bw = runs[b.name][k]()
                _, after = runs[b.name]["ref"]()
                if r:
                    samples[b.name]["ref"] += [before / (n + 2) * 1e6, after / (n + 2) * 1e6]
                    samples[b.name][k].append(bw / (n + 2) * 1e6)
                    ratios[b.name][k].append(bw / ((before + after) / 2))
    med = {b.name: {k: median(v) for k, v in samples[b.name].items()} for b in libs}
    rmed = {b.name: {k: (median(v) if v else 1.0) for k, v in ratios[b.name].items()} for b in libs}
    cols = [b.name for b in libs] + [f"{b.name} / ref" for b in libs]
    t = Table("features", f"7. Feature costs on the per-node path (chain of {n:,}, backward µs/node)", cols)
    labels = {
        "ref": "reference: `y.backward()`, nothing registered, anomaly mode off",
        "after_anomaly": "anomaly mode switched on then off again before the graph was built",
        "hooks": "a tensor hook on an unrelated leaf + a node hook in an unrelated graph",
        "inputs": "`y.backward(inputs=[x])` (x is the leaf)",
        "grad": "`grad(y, x)` instead of `y.backward()`",
        "anomaly_on": "anomaly mode ON (`detect_anomaly()`, in use: informational)",
        "after_profile": "a profiler block ran and ended before the graph was built",
        "profile_on": "profiler ON (`profiler.profile()` around forward and backward: informational)",
    }
    for k in keys:
        vals: dict[str, float | None] = {b.name: med[b.name][k] for b in libs}
        for b in libs:
            vals[f"{b.name} / ref"] = rmed[b.name][k]
        row = Row(labels[k], vals)
        if k not in ("ref", "anomaly_on", "profile_on"):
            row.target = f"≤ {FEATURE_TOLERANCE:.2f}x ref (threadgrad)"
            row.met = vals["threadgrad / ref"] <= FEATURE_TOLERANCE
        t.rows.append(row)
    t.notes = [
        f"The chain of workload 1 ({n:,} ops); only backward is timed. Each variant runs between two runs of the same "
        "library's reference, and `/ ref` is the median, over "
        f"{repeats} repeats (anomaly and profiler ON: {min(repeats, 3)}), of the variant divided by the mean of its two "
        "references; the torch column's profiler is `torch.profiler.profile(activities=[CPU])`; "
        "µs/node columns are medians. \"Nothing measurable\" is taken as within 5% of the reference, about the "
        "run-to-run noise of this machine.",
    ]
    return t


# --- per-node breakdown of the chain backward ----------------------------------------------

class _IdentityBackward(engine.Node):
    """A node whose backward passes the gradient through: the executor's cost alone."""

    __slots__ = ()

    def backward(self, g: Any) -> tuple:
        return (g,)


def _identity(x: Any) -> Any:
    from threadgrad.engine._record import record  # noqa: PLC0415
    from threadgrad.engine.tensor import _wrap  # noqa: PLC0415

    out = _wrap(x._data, x.device)
    record(_IdentityBackward(), (x,), out)
    return out


_EXECUTOR_BUCKETS = (
    ("dependency count before running (`_compute_dependencies`)", ("_compute_dependencies",)),
    ("running a node: `_run_task` (checks, release of saved tensors, the lock once shared)", ("_run_task",)),
    ("routing gradients to successors: `_route` (dependency dict, buffers)", ("_route", "_buffer_add", "_buffer_device")),
    ("thread loop, queue push/pop (`_thread_main`, ReadyQueue)", ("_thread_main", "push", "pop", "heappush", "heappop")),
    ("calling the node: `Node.apply` + the trivial backward", ("apply", "backward")),
)


def _executor_split(n: int, executor_us: float) -> list[tuple[str, float]]:
    """Split the identity chain's executor time by cProfile own-time shares (an estimate:
    cProfile's per-call overhead inflates small functions more than big ones)."""
    import cProfile  # noqa: PLC0415
    import pstats  # noqa: PLC0415

    x = engine.tensor(make_inputs()[0], requires_grad=True)
    h = x
    for _ in range(n):
        h = _identity(h)
    y = ops.sum(h)
    prof = cProfile.Profile()
    with gc_paused():
        prof.enable()
        y.backward()
        prof.disable()
    st = pstats.Stats(prof)
    total = st.total_tt  # type: ignore[attr-defined]
    own: dict[str, float] = {}
    for (_, _, name), v in st.stats.items():  # type: ignore[attr-defined]
        own[name] = own.get(name, 0.0) + v[2]
    out, used = [], set()
    for label, names in _EXECUTOR_BUCKETS:
        share = sum(own.get(k, 0.0) for k in names) / total
        used.update(names)
        out.append((label, share * executor_us))
    rest = sum(v for k, v in own.items() if k not in used) / total
    out.append(("the rest (backward() entry, GraphTask, root gradient, leaf accumulation)", rest * executor_us))
    return out


def calls(backends: list[Backend], quick: bool) -> Table:
    """The fixed cost of one backward call: a 3-node graph, so the call's own work (checks,
    root gradient, GraphTask, dependency count, completion) is most of what is timed."""
    repeats = 5 if quick else 9
    xa, ca, _, _ = make_inputs()
    libs = [b for b in backends if b.name in ("threadgrad", "torch")]
    back: dict[str, Callable[[], Any]] = {}
    grads: dict[str, Callable[[], Any]] = {}
    for b in libs:
        x, c = b.leaf(xa), b.const(ca)
        y = (x * c).sum()  # MulBackward0, SumBackward0, the leaf's AccumulateGrad
        grad_fn = engine.grad if b.name == "threadgrad" else b.torch.autograd.grad

        def bw(y: Any = y) -> None:
            y.backward(retain_graph=True)

        def gr(y: Any = y, x: Any = x, grad_fn: Callable = grad_fn) -> None:
            grad_fn(y, x, retain_graph=True)

        back[b.name], grads[b.name] = bw, gr
    log(f"calls x{repeats}")
    us_b = per_call_us(back, repeats)
    us_g = per_call_us(grads, repeats)
    rows = [
        Row("`y.backward(retain_graph=True)`, µs per call", us_b),
        Row("`grad(y, x, retain_graph=True)`, µs per call", us_g),
    ]
    notes = [
        "`y = (x * c).sum()` on float64 `(16,)` arrays, built once; each call runs its three nodes "
        "(SumBackward0, MulBackward0, the leaf's AccumulateGrad or the captured gradient) and "
        "everything a call does once: argument checks, the root gradient, the GraphTask, the "
        "dependency count, the thread-local state around the nodes, completion. No target: it "
        "tracks what a training step on a tiny model pays per `backward()` beyond its nodes.",
        "Median per-call time over repeats of ~30 ms each, the libraries interleaved within each repeat.",
    ]
    return Table("calls", "8. Per-call cost of backward() and grad() (3-node graph)", _names(libs), rows, notes)


def breakdown(quick: bool) -> tuple[Table, str]:
    """Where the microseconds of one chain-backward node go: executor vs op formulas vs numpy
    vs Tensor allocation. Returns the table and a cProfile listing of one chain backward."""
    import cProfile  # noqa: PLC0415
    import pstats  # noqa: PLC0415

    from threadgrad.engine.tensor import _wrap  # noqa: PLC0415

    n = CHAIN_N
    repeats = 3 if quick else 7
    xa, ca, _, _ = make_inputs()
    c = engine.tensor(ca)
    log(f"per-node breakdown x{repeats}")

    def chain_bwd(identity: bool) -> float:
        x = engine.tensor(xa, dtype=xa.dtype, requires_grad=True)
        with gc_paused():
            if identity:
                h = x
                for _ in range(n):
                    h = _identity(h)
                y = ops.sum(h)
            else:
                y = ops.sum(build_chain(ops, x, c, n))
            t0 = time.perf_counter()
            y.backward()
            t1 = time.perf_counter()
        del x, y
        return (t1 - t0) / (n + 2) * 1e6

    def floor_bwd() -> float:
        """The chain's backward math as raw numpy calls, one Python call per node, no engine."""
        run = numpy_floor_chain(xa, ca, n)
        with gc_paused():
            t0 = time.perf_counter()
            run()
            t1 = time.perf_counter()
        return (t1 - t0) / n * 1e6

    tot, ident, floor = [], [], []
    for r in range(repeats + 1):
        a, b_, f_ = chain_bwd(False), chain_bwd(True), floor_bwd()
        if r:
            tot.append(a)
            ident.append(b_)
            floor.append(f_)
    total, executor = median(tot), median(ident)

    # The two node types' backward formulas alone: node.apply on a retained graph.
    x = engine.tensor(xa, dtype=xa.dtype, requires_grad=True)
    th = ops.tanh(x)
    mu = ops.mul(th, c)
    g = engine.tensor(numpy.ones(16))
    gd, outd = g._data, th._data
    tn, mn = th.grad_fn, mu.grad_fn
    idn = _identity(x).grad_fn
    dev = g.device
    with engine.no_grad():  # as the executor runs them without create_graph: the first-order formulas
        us = per_call_us({
            "tanh_apply": lambda: tn.apply([g]),
            "mul_apply": lambda: mn.apply([g]),
            "tanh_numpy": lambda: gd - gd * outd * outd,  # the form TanhBackward0 computes
            "mul_numpy": lambda: gd * ca,
            "wrap": lambda: _wrap(gd, dev),
            "ident_apply": lambda: idn.apply([g]),
            "tanh_saved": tn.saved_arrays,
            "mul_saved": mn.saved_arrays,
        }, repeats=5 if quick else 9)
    formulas = (us["tanh_apply"] + us["mul_apply"]) / 2
    numpy_floor = (us["tanh_numpy"] + us["mul_numpy"]) / 2
    saved = (us["tanh_saved"] + us["mul_saved"]) / 2

    # Count Tensor allocations per node in one chain backward (cProfile counts calls exactly).
    xx = engine.tensor(xa, dtype=xa.dtype, requires_grad=True)
    y = ops.sum(build_chain(ops, xx, c, n))
    prof = cProfile.Profile()
    with gc_paused():
        prof.enable()
        y.backward()
        prof.disable()
    st = pstats.Stats(prof)
    wraps = sum(v[1] for (path, _, name), v in st.stats.items()  # type: ignore[attr-defined]
                if name == "_wrap" and path.endswith("tensor.py")) / (n + 2)
    alloc = wraps * us["wrap"]
    listing = _profile_listing(st, n + 2)

    t = Table("breakdown", f"Per-node cost of the chain backward (threadgrad, chain of {n:,})", ["µs/node", "share"],
              plain=True)
    rows = [
        ("chain backward, measured", total),
        ("executor: identity-node chain (queue, routing, locks, `apply` call, GraphTask)", executor),
        *[(f"  {label}", v) for label, v in _executor_split(n, executor)],
        ("op backward formulas: `node.apply` alone, mean of TanhBackward0 and MulBackward0", formulas),
        ("  of which numpy ufunc calls (the same math on raw arrays, fastest form)", numpy_floor),
        (f"  of which Tensor allocation: {wraps:.1f} `_wrap` per node x {us['wrap']:.2f} µs", alloc),
        ("  of which `saved_arrays()`: the saved arrays, with version checks", saved),
        ("  of which the rest (the call, the grad-mode test, `grad_of`'s shape and dtype check)",
         formulas - numpy_floor - alloc - saved),
        ("executor + formulas (vs measured)", executor + formulas),
        ("for scale: the same math as raw numpy calls, one Python call per node, no engine", median(floor)),
    ]
    for label, v in rows:
        t.rows.append(Row(label, {"µs/node": v, "share": v / total}, show_ratio=False))
    t.notes = [
        f"Per-call times of the formulas, under no_grad as the executor runs them (the first-order forms, "
        f"Note [First-order formulas] in ops/_core.py): TanhBackward0 {us['tanh_apply']:.2f} µs (numpy part "
        f"{us['tanh_numpy']:.2f}, `g - g * y * y`), MulBackward0 {us['mul_apply']:.2f} µs (numpy part "
        f"{us['mul_numpy']:.2f}); an identity node's `apply` is {us['ident_apply']:.2f} µs of the executor row.",
        "The chain alternates the two node types, so the formula row is their mean. The `share` column divides by "
        "the measured chain backward; the last row checks that the parts add up.",
        "The executor's sub-rows split its measured time by cProfile own-time shares on the identity chain: "
        "estimates (the profiler's per-call overhead inflates small functions).",
    ]
    return t, listing


def _profile_listing(st: Any, nodes: int, top: int = 12) -> str:
    total = st.total_tt
    lines = [f"cProfile of one chain backward ({nodes:,} nodes): {total / nodes * 1e6:.2f} µs/node under the profiler "
             "(it inflates Python-heavy code about 2-3x: read the shares).", "",
             "| function | calls per node | own µs/node | own % |", "|---|---|---|---|"]
    for where, ncalls, tottime, _ in profile_top(st, top):
        lines.append(f"| `{where}` | {ncalls / nodes:.2f} | {tottime / nodes * 1e6:.3f} | "
                     f"{tottime / total * 100:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if "--threads-worker" in sys.argv:
        if "--no-torch" in sys.argv:
            import _common  # noqa: PLC0415

            _common.try_import_torch = lambda: None  # type: ignore[assignment]
        print(json.dumps(threads_worker("--quick" in sys.argv)))
    else:
        print("run benchmarks/run_all.py", file=sys.stderr)
        sys.exit(2)
