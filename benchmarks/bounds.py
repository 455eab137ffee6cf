"""Lower bounds for the chain and wide targets of issue 6, measured next to torch and threadgrad.

The issue asks, for a target that turns out to be impossible in CPython, for "the measurement
that proves it and how close you got". This workload provides it: stripped-down Python code
that does only what any engine of this design must do, run on the same graphs in the same
process, interleaved with threadgrad and torch repeat by repeat, and reported as ratios to
torch (median of per-repeat ratios). A bound above the target proves the target out of reach
for that design; threadgrad's distance from the bound is how close it got.

Rows (float64 arrays of shape (16,), the graphs of workloads 1 and 2):

* chain and wide backward: threadgrad ``y.backward()``; torch ``y.backward()``; the *least
  correct executor* (:func:`least_correct_backward`) on the same threadgrad graph; for the
  chain also the *walk floor* (:func:`walk_floor`) and the *raw numpy floor*
  (:func:`numpy_floor_chain`).
* chain forward: threadgrad's ops recording; torch; *minimal recording*
  (:func:`minimal_recording_chain`); raw numpy.

Every lower-bound row checks its gradient (or, for minimal recording, the graph it built)
against threadgrad's, so it cannot silently measure less work than it claims.
"""
from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any, Callable

import numpy

from _common import Row, Table, count_nodes, gc_paused, median  # noqa: E402 - _common loads this checkout's threadgrad

from threadgrad import devices  # noqa: E402
from threadgrad import ops  # noqa: E402
from backends import Backend, build_chain, build_wide, make_inputs  # noqa: E402
from threadgrad.engine.autograd import _compute_dependencies  # noqa: E402
from threadgrad.engine.executor import GraphTask  # noqa: E402
from threadgrad.engine.graph import NO_EDGE, AccumulateGrad, Node, SavedOutput, _next_seq  # noqa: E402
from threadgrad.engine.tensor import Tensor, _wrap, grad_accumulator  # noqa: E402
from threadgrad.ops.elementwise import AddBackward0, MulBackward0, TanhBackward0  # noqa: E402
from threadgrad.ops.reduce import SumBackward0  # noqa: E402
from workloads import CHAIN_N, WIDE_BRANCHES, log, numpy_floor_chain  # noqa: E402

CHAIN_TARGET_BWD = 0.5  # x torch, issue 6
WIDE_TARGET_BWD = 0.5
CHAIN_TARGET_FWD = 1.0

_NUMPY = SimpleNamespace(tanh=numpy.tanh, mul=numpy.multiply)  # build_chain's vocabulary on raw arrays


# --- the least correct executor ------------------------------------------------------------

Formula = Callable[[Node, Any, dict], tuple]


def _tanh_bwd(node: Node, g: numpy.ndarray, leaf_grads: dict) -> tuple:
    (y,) = node.saved_arrays()
    return (g - g * y * y,)


def _mul_bwd(node: Node, g: numpy.ndarray, leaf_grads: dict) -> tuple:
    a, b = node.saved_arrays()  # saved as (a if b needs grad, b if a needs grad)
    ea, eb = node.next_edges
    return (g * b if ea[0] is not None else None, g * a if eb[0] is not None else None)


def _add_bwd(node: Node, g: numpy.ndarray, leaf_grads: dict) -> tuple:
    return (g, g)


def _sum_bwd(node: Node, g: numpy.ndarray, leaf_grads: dict) -> tuple:
    return (numpy.broadcast_to(g, node.in_shape),)


def _accumulate(node: Node, g: numpy.ndarray, leaf_grads: dict) -> tuple:
    leaf = node.variable
    old = leaf_grads.get(leaf)
    leaf_grads[leaf] = g if old is None else old + g
    return ()


# The node types of the chain and wide graphs, all taking one gradient (``num_inputs == 1``).
FORMULAS: dict[type, Formula] = {
    TanhBackward0: _tanh_bwd,
    MulBackward0: _mul_bwd,
    AddBackward0: _add_bwd,
    SumBackward0: _sum_bwd,
    AccumulateGrad: _accumulate,
}


def least_correct_backward(root: Node, root_grad: numpy.ndarray) -> dict[Tensor, numpy.ndarray]:
    """The least work a correct backward of this design does on a general DAG, as raw arrays.

    Counts dependencies anew (a GraphTask and ``_compute_dependencies``, as every backward
    call must), then runs each node once all its incoming gradients arrived, summing
    gradients that meet in a node's input buffer. Node formulas are :data:`FORMULAS`, on
    arrays, with saved values read through ``saved_arrays()`` (version-checked); a node that
    takes one gradient gets it as an array, one that takes several gets its buffer (a list
    with a slot per input). No Tensor in flight, no queue, lock, hooks, threads, streams or
    error handling; the graph is not freed. Returns the leaves' gradients, keyed by leaf.
    """
    gt = GraphTask(False, False, 0, None)  # type: ignore[arg-type]
    _compute_dependencies(gt, root)
    deps = gt.dependencies
    buffers: dict[Node, Any] = {}  # node -> the gradient so far, or a list (several inputs)
    leaf_grads: dict[Tensor, numpy.ndarray] = {}
    ready: list[tuple[Node, Any]] = [(root, root_grad)]
    pop, push = ready.pop, ready.append
    while ready:
        node, gin = pop()
        outs = FORMULAS[type(node)](node, gin, leaf_grads)
        for (nxt, nr), g in zip(node.next_edges, outs):
            if nxt is None or g is None:
                continue
            left = deps[nxt] - 1
            if nxt.num_inputs == 1:
                if left:
                    deps[nxt] = left
                    old = buffers.get(nxt)
                    buffers[nxt] = g if old is None else old + g
                    continue
                del deps[nxt]
                old = buffers.pop(nxt, None)
                push((nxt, g if old is None else old + g))
                continue
            buf = buffers.get(nxt)
            if buf is None:
                buf = buffers[nxt] = [None] * nxt.num_inputs
            buf[nr] = g if buf[nr] is None else buf[nr] + g
            if left:
                deps[nxt] = left
            else:
                del deps[nxt]
                push((nxt, buffers.pop(nxt)))
    return leaf_grads


# --- chain-only floors ----------------------------------------------------------------------

def walk_floor(y: Tensor) -> numpy.ndarray:
    """The chain's backward math on its saved arrays, walking ``next_edges[0]`` from the node
    below the sum down to the leaf's AccumulateGrad: nothing but the walk and the math (no
    dependency count, no version check, no buffers). Returns the leaf's gradient."""
    node = y.grad_fn.next_edges[0][0]
    g = numpy.broadcast_to(numpy.asarray(1.0), y.grad_fn.in_shape)  # SumBackward0
    tanh_node = TanhBackward0
    while node.next_edges:  # AccumulateGrad has none
        if type(node) is tanh_node:
            yv = node._saved[0]._data
            g = g - g * yv * yv
        else:
            g = g * node._saved[1]._data
        node = node.next_edges[0][0]
    return g


# --- minimal recording ----------------------------------------------------------------------

def minimal_recording_chain(x: Tensor, c: Tensor, n: int) -> Tensor:
    """The chain's forward with the least recording a graph of this design needs: the numpy
    op, a Tensor for its result, and the node (sequence number, edges, saved values and their
    versions, and for mul the operands' shapes and dtypes), the output linked to it. No
    checks: no type, dtype, device or grad-mode tests, no hooks; the constant's edge is
    known to be ``(None, 0)``. The graph is a valid threadgrad graph (``y.backward()`` works)."""
    cpu, tanh, wrap, seq = devices.cpu, numpy.tanh, _wrap, _next_seq
    cd = c._data
    c_edge, c_ver, c_shape, c_dtype = NO_EDGE, c._vc[0], cd.shape, cd.dtype
    # op 0: tanh of the leaf, whose edge is its AccumulateGrad
    out = wrap(tanh(x._data), cpu)
    node = TanhBackward0()
    node.sequence_nr = seq()
    node.next_edges = ((grad_accumulator(x), 0),)
    node._saved = (SavedOutput(out),)
    node._saved_ver = (out._vc[0],)
    out._grad_fn = node
    out._rg = True
    h = out
    for i in range(1, n):
        if i % 2 == 0:
            out = wrap(tanh(h._data), cpu)
            node = TanhBackward0()
            node.sequence_nr = seq()
            node.next_edges = ((h._grad_fn, h._output_nr),)
            node._saved = (SavedOutput(out),)
            node._saved_ver = (out._vc[0],)
        else:
            ad = h._data
            out = wrap(ad * cd, cpu)
            node = MulBackward0()
            node.a_shape, node.a_dtype, node.b_shape, node.b_dtype = ad.shape, ad.dtype, c_shape, c_dtype
            node.sequence_nr = seq()
            node.next_edges = ((h._grad_fn, h._output_nr), c_edge)
            node._saved = (None, c)
            node._saved_ver = (None, c_ver)
        out._grad_fn = node
        out._rg = True
        h = out
    return h


# --- measurement ----------------------------------------------------------------------------

def _timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """``fn(*args)`` once with the cyclic GC collected before and off during it: (seconds, result)."""
    with gc_paused():
        t0 = time.perf_counter()
        out = fn(*args)
        t1 = time.perf_counter()
    return t1 - t0, out


def _fwd_bwd(b: Backend, xa: numpy.ndarray, c: Any, n: int, warm: bool = True) -> tuple[float, float, numpy.ndarray]:
    """One fresh chain on backend ``b``: (chain ops s, ``y.backward()`` s, leaf gradient).
    The final sum is built between the two timed regions; the graph is freed after them.
    With ``warm``, one untimed chain runs first (Note [Warm samples] in backends.py)."""
    if warm:
        _fwd_bwd(b, xa, c, n, warm=False)
    x = b.leaf(xa)
    with gc_paused():
        t0 = time.perf_counter()
        h = build_chain(b, x, c, n)
        t1 = time.perf_counter()
        y = b.sum(h)
        del h
        t2 = time.perf_counter()
        y.backward()
        t3 = time.perf_counter()
    g = b.grad_numpy(x)
    del x, y
    return t1 - t0, t3 - t2, g


def _check(name: str, got: numpy.ndarray, ref: numpy.ndarray) -> None:
    """Fail the run when a bound computed another gradient than threadgrad (also under -O)."""
    if not numpy.allclose(got, ref, rtol=1e-10, atol=1e-12):
        raise AssertionError(f"{name}: gradient differs from threadgrad's")


def _ratios(samples: dict[str, list[float]], ref: str) -> dict[str, float | None]:
    """Per row, the median over repeats of its sample / ``ref``'s sample of the same repeat."""
    if ref not in samples:
        return {k: None for k in samples}
    return {k: median(a / b for a, b in zip(v, samples[ref])) for k, v in samples.items()}


def _table(key: str, title: str, unit: str, divisor: int, labels: dict[str, str],
           samples: dict[str, list[float]], target: float, torch_name: str | None) -> Table:
    """A table of one µs column (median sample / divisor) and the per-repeat ratio to torch;
    every row but torch's is judged against ``target``."""
    ratios = _ratios(samples, torch_name) if torch_name else {k: None for k in samples}
    t = Table(key, title, [unit], ratio_header="/ torch")
    for k, label in labels.items():
        if k not in samples:
            continue
        row = Row(label, {unit: median(samples[k]) / divisor * 1e6}, ratio=ratios[k])
        if k != torch_name and ratios[k] is not None:
            row.target = f"≤ {target:.1f}x torch"
            row.met = ratios[k] <= target
        t.rows.append(row)
    return t


_EXECUTOR_WORK = "a dependency count per call, then a Python loop over these graph objects"


def _verdict(samples: dict[str, list[float]], divisor: int, bound: str, bound_name: str, target: float,
             work: str = _EXECUTOR_WORK, extra: str = "", per_what: str = "node") -> str:
    """The note that reads a bound against the target (``work``: what the bound does that
    every engine of the design must do), and threadgrad against the bound."""
    ours_vs_bound = median(a / b for a, b in zip(samples["threadgrad"], samples[bound]))
    tail = f"{ours_vs_bound:.2f}x the {bound_name} (per-repeat median): the distance left to the bound."
    if "torch" not in samples:
        return "Verdict: no torch in this run, so no ratio to judge. threadgrad takes " + tail
    per = [a / b for a, b in zip(samples[bound], samples["torch"])]
    r = median(per)
    spread = f"per-repeat range {min(per):.2f}-{max(per):.2f}x"
    # What the target leaves above the bound, per node, for all the bound leaves out.
    room = median((target * t - b) / divisor * 1e6 for b, t in zip(samples[bound], samples["torch"]))
    bound_us = median(samples[bound]) / divisor * 1e6
    if room >= 0:
        room_txt = (f"the target leaves {room:.2f} µs per {per_what}, {room / bound_us:.0%} of the bound, for "
                    "everything the bound leaves out")
    else:
        room_txt = f"at the median the bound alone is {-room:.2f} µs per {per_what} over the target"
    if min(per) > target:
        head = (f"Verdict: the {bound_name} alone takes {r:.2f}x torch ({spread}), above the {target:.1f}x target in "
                f"every repeat of this run, so no engine that does what it does ({work}) can meet the target in "
                f"CPython on this machine{extra}.")
        if r < 1.1 * target:
            head += (" The margin is thin (within 10%): another run on a noisy machine may land just under the "
                     "target, which would still leave next to nothing for everything the bound leaves out.")
    elif max(per) > target:
        head = (f"Verdict: borderline. The {bound_name} alone takes {r:.2f}x torch at the median, and its repeats fall "
                f"on both sides of the {target:.1f}x target ({spread}): an engine that does what it does ({work}) "
                f"could meet the target only with next to nothing on top of it ({room_txt}){extra}.")
    else:
        head = (f"Verdict: the {bound_name} takes {r:.2f}x torch ({spread}), within the {target:.1f}x target in every "
                f"repeat: this bound does not rule the target out ({room_txt}).")
    ours = median(a / b for a, b in zip(samples["threadgrad"], samples["torch"]))
    return head + f" threadgrad is at {ours:.2f}x torch, " + tail


def bounds(backends: list[Backend], quick: bool) -> list[Table]:
    """Chain backward, wide backward and chain forward, each with its lower-bound rows, as
    ratios to torch measured in the same repeat. Without torch the ratio column stays empty."""
    n, branches = CHAIN_N, WIDE_BRANCHES
    repeats = 5 if quick else 9
    by_name = {b.name: b for b in backends}
    ours = by_name["threadgrad"]
    torch_b = by_name.get("torch")
    if torch_b is None:
        log("bounds: torch not available; the tables have no ratio to torch")
    libs = [b for b in (ours, torch_b) if b is not None]
    tname = "torch" if torch_b is not None else None
    xa, ca, c1a, c2a = make_inputs()
    consts = {b.name: (b.const(ca), b.const(c1a), b.const(c2a)) for b in libs}
    c_ours = consts["threadgrad"][0]
    numpy_bwd = numpy_floor_chain(xa, ca, n)
    root_grad = numpy.asarray(1.0)

    def rows(*bounds_: str) -> dict[str, list[float]]:
        return {k: [] for k in (*[b.name for b in libs], *bounds_)}  # row -> seconds, repeat by repeat

    fwd, bwd, wbwd = rows("minimal", "numpy"), rows("least", "walk", "numpy"), rows("least")
    wide_nodes = 0
    log(f"bounds: chain {n:,} and wide {branches:,} x{repeats}")
    for r in range(repeats + 1):  # repeat 0 is a warm-up
        keep = r > 0
        # chain: threadgrad and torch, forward (chain ops) and backward
        ref = None
        for b in libs:
            f, bw, g = _fwd_bwd(b, xa, consts[b.name][0], n)
            if b.name == "threadgrad":
                ref = g
            if keep:
                fwd[b.name].append(f)
                bwd[b.name].append(bw)
        # chain: minimal recording (after an untimed one: Note [Warm samples] in backends.py), then raw numpy forward
        x = ours.leaf(xa)
        ops.sum(minimal_recording_chain(x, c_ours, n)).backward()
        x = ours.leaf(xa)
        t, h = _timed(minimal_recording_chain, x, c_ours, n)
        if r == 0:  # the graph it built is a working one, with threadgrad's gradient
            ops.sum(h).backward()
            _check("minimal recording", x.grad._data, ref)
        del x, h
        t_np, _ = _timed(build_chain, _NUMPY, xa, ca, n)
        # chain: least correct executor and walk floor, on one fresh threadgrad graph
        x = ours.leaf(xa)
        y = ops.sum(build_chain(ops, x, c_ours, n))
        t_least, got = _timed(least_correct_backward, y.grad_fn, root_grad)
        _check("least correct executor (chain)", got[x], ref)
        t_walk, got_w = _timed(walk_floor, y)
        _check("walk floor", got_w, ref)
        del x, y, got
        t_floor, got_f = _timed(numpy_bwd)
        _check("raw numpy floor", got_f, ref)
        if keep:
            fwd["minimal"].append(t)
            fwd["numpy"].append(t_np)
            bwd["least"].append(t_least)
            bwd["walk"].append(t_walk)
            bwd["numpy"].append(t_floor)

        # wide: threadgrad and torch backward, then the least correct executor
        wref = None
        for b in libs:
            _, c1, c2 = consts[b.name]
            _, bw, g = b.sample(lambda bb, xx, c1=c1, c2=c2: build_wide(bb, xx, c1, c2, branches), xa, warm=True)
            if b.name == "threadgrad":
                wref = g
            if keep:
                wbwd[b.name].append(bw)
        x = ours.leaf(xa)
        _, c1, c2 = consts["threadgrad"]
        y = build_wide(ops, x, c1, c2, branches)
        if r == 0:
            wide_nodes = count_nodes(y.grad_fn)
        t_least, got = _timed(least_correct_backward, y.grad_fn, root_grad)
        _check("least correct executor (wide)", got[x], wref)
        del x, y, got
        if keep:
            wbwd["least"].append(t_least)

    chain_nodes = n + 2
    no_torch = [] if tname else ["torch was not importable (or skipped): no torch row and no ratio column; "
                                 "the rows are still measured."]
    tb = _table("bounds_chain_bwd", f"Lower bounds: chain backward ({n:,} ops, {chain_nodes:,} nodes)", "µs/node",
                chain_nodes, {
                    "threadgrad": "threadgrad `y.backward()`",
                    "torch": "torch `y.backward()`",
                    "least": "least correct executor (same graph type, arrays only)",
                    "walk": "walk floor (follow `next_edges[0]`, math on `_saved`)",
                    "numpy": "raw numpy floor (one Python call per node, no graph)",
                }, bwd, CHAIN_TARGET_BWD, tname)
    rb = _ratios(bwd, tname) if tname else {}
    walk_note = ""
    if rb.get("walk") is not None and rb["walk"] > CHAIN_TARGET_BWD:
        walk_note = (f"; even the walk floor, which only follows the edges and does the math, takes "
                     f"{rb['walk']:.2f}x torch, so no Python engine over this graph object model can")
    tb.notes = [
        f"One chain as workload 1 (`tanh`, `x * c` alternating, then `sum`), fresh per repeat and per row (the walk "
        f"floor reuses the least correct executor's, which that row leaves intact); only the backward part is "
        f"timed. Every row is divided by the graph's {chain_nodes:,} nodes, so `/ torch` is the ratio of totals: "
        f"the median over {repeats} repeats (after a warm-up) of the row's time over torch's backward in the same "
        "repeat.",
        "**least correct executor** includes: a GraphTask and `_compute_dependencies` per call, a ready stack, "
        "per-edge decrement of the dependency dict, input buffers where gradients meet, a formula per node type "
        "on raw arrays with saved values through `saved_arrays()` (version checks). Excludes: Tensor objects for "
        "gradients, the ready queue and its priorities, locks, hooks, anomaly mode, threads and devices, streams, "
        "`retain_graph` (nothing freed), error handling. Its gradient is asserted equal to threadgrad's each repeat.",
        "**walk floor** includes only the walk down `next_edges[0][0]` and the math on `node._saved[i]._data`; "
        "it excludes even the dependency count, version checks, buffers and dispatch tables, so it holds only "
        "for a chain. **raw numpy floor**: the same ufunc calls as closures in a list, one Python call per node, "
        "no graph object at all (the breakdown's floor row).",
        _verdict(bwd, chain_nodes, "least", "least correct executor", CHAIN_TARGET_BWD, extra=walk_note),
        *no_torch,
    ]

    tw = _table("bounds_wide_bwd", f"Lower bounds: wide backward ({branches:,} branches, {wide_nodes:,} nodes)",
                "µs/node", wide_nodes, {
                    "threadgrad": "threadgrad `y.backward()`",
                    "torch": "torch `y.backward()`",
                    "least": "least correct executor (same graph type, arrays only)",
                }, wbwd, WIDE_TARGET_BWD, tname)
    tw.notes = [
        f"The graph of workload 2 (`tanh(x * c1) * c2` per branch, a balanced tree of adds, `sum`), fresh per repeat "
        f"and per row; backward only, divided by threadgrad's {wide_nodes:,} nodes; median of {repeats} repeats.",
        "The least correct executor is the chain table's (the same code: here its input buffers sum the tree's and "
        f"the leaf's {branches:,} incoming gradients); its gradient is asserted equal to threadgrad's each repeat.",
        _verdict(wbwd, wide_nodes, "least", "least correct executor", WIDE_TARGET_BWD),
        *no_torch,
    ]

    tf = _table("bounds_chain_fwd", f"Lower bounds: chain forward, recording ({n:,} ops)", "µs/op", n, {
        "threadgrad": "threadgrad `ops.tanh` / `ops.mul`, recording",
        "torch": "torch `torch.tanh` / `torch.mul`, recording",
        "minimal": "minimal recording (numpy op + `_wrap` + node, no checks)",
        "numpy": "raw numpy (the ops alone, no Tensor, no node)",
    }, fwd, CHAIN_TARGET_FWD, tname)
    tf.notes = [
        f"The chain's {n:,} ops only (the final `sum` is left out of every row), from a leaf; median of {repeats} "
        "repeats, `/ torch` the median of per-repeat ratios to torch's forward.",
        "**minimal recording** includes: the numpy ufunc, a Tensor (`engine.tensor._wrap`), the node object with "
        "its sequence number, edges (the input's `grad_fn` and `_output_nr`), saved values and their versions "
        "(`SavedOutput` of the output for tanh, the constant for mul), mul's operand shapes and dtypes, and the "
        "output linked to the node. Excludes: argument type, dtype and device checks, the grad-mode and "
        "requires-grad tests, the constant's edge lookup (known to be `(None, 0)`), saved-tensor hooks, anomaly "
        "mode, dispatch (`record`, `pack_saved`). The first repeat runs `backward()` on the graph it built and "
        "asserts threadgrad's gradient.",
        _verdict(fwd, n, "minimal", "minimal recording", CHAIN_TARGET_FWD,
                 work="a Tensor and a node object per op, filled from Python", per_what="op"),
        *no_torch,
    ]
    return [tb, tw, tf]
