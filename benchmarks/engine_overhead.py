"""Per-node overhead of the autograd engine on graphs of tiny elementwise ops.

Usage::

    python benchmarks/engine_overhead.py            # full run (~7 repeats, well under 2 min)
    python benchmarks/engine_overhead.py --quick    # smaller graphs, 3 repeats (< 20 s)
    python benchmarks/engine_overhead.py --no-torch # skip the torch column even if installed
    python benchmarks/engine_overhead.py --profile  # also cProfile one chain (forward, backward)

On (16,) float64 arrays every numpy call costs well under a microsecond, so what is
measured is the engine's own Python overhead per node: graph recording in forward, and
scheduling + running each node's backward in backward. See benchmarks/README.md.

Graphs (the same ops in threadgrad and, when importable, torch):

* chain: ``x`` a leaf; ``N`` ops alternating ``x = tanh(x)`` and ``x = x * c`` (``c`` a
  constant tensor that does not require grad); then ``y = x.sum()``. N + 2 nodes
  (the ops, SumBackward0, AccumulateGrad).
* wide: ``x`` a leaf; ``B`` branches ``tanh(x * c1) * c2``, added up pairwise (a balanced
  tree of ``B - 1`` adds), then ``.sum()``. About ``4 B`` nodes; the leaf's AccumulateGrad
  receives ``B`` gradients, summed in its input buffer.

Each repeat builds a fresh graph (timed as "forward"), then runs ``y.backward()`` (timed as
"backward", graph construction excluded). The cyclic GC is off while timing; the median of
the repeats is reported.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import sys
import time
from typing import Any, Callable

import numpy

from _common import (  # noqa: E402 - _common loads this checkout's threadgrad
    profile_top,
    count_nodes,
    fmt,
    gc_paused,
    machine_summary,
    markdown_table,
    median,
    per_call_us,
    try_import_torch,
    write_result,
)

from threadgrad import engine  # noqa: E402
from threadgrad import ops  # noqa: E402
from backends import (  # noqa: E402 - the graphs and backends are shared with run_all.py
    SHAPE,
    Ours,
    Torch,
    build_chain,
    build_wide,
    make_inputs,
    wide_op_count,
)


# --- measurements -------------------------------------------------------------------------

class Case:
    """One backend's inputs for every graph, made once and reused by every repeat."""

    def __init__(self, b: Any) -> None:
        self.b = b
        self.xa, ca, c1a, c2a = make_inputs()
        self.c, self.c1, self.c2 = b.const(ca), b.const(c1a), b.const(c2a)
        self.nodes: dict[str, int] = {}
        self.grads: dict[str, numpy.ndarray] = {}

    def sample_graph(self, kind: str, size: int) -> tuple[float, float]:
        """One repeat: build a fresh graph (forward, timed), then backward (timed separately)."""
        b = self.b
        x = b.leaf(self.xa)
        with gc_paused():
            t0 = time.perf_counter()
            if kind == "chain":
                y = b.sum(build_chain(b, x, self.c, size))
            else:
                y = build_wide(b, x, self.c1, self.c2, size)
            t1 = time.perf_counter()
            if kind not in self.nodes:
                self.nodes[kind] = count_nodes(y.grad_fn)  # outside the timed regions
            t2 = time.perf_counter()
            b.backward(y)
            t3 = time.perf_counter()
        self.grads[kind] = b.grad_numpy(x)
        del x, y  # the graph is freed here, outside the timed regions
        return t1 - t0, t3 - t2

    def sample_no_grad(self, size: int) -> float:
        """One repeat of the chain's ops with grad mode off (op cost without recording)."""
        b = self.b
        x = b.leaf(self.xa)
        with gc_paused(), b.no_grad():
            t0 = time.perf_counter()
            build_chain(b, x, self.c, size)
            t1 = time.perf_counter()
        return t1 - t0


def measure(backends: list, chain_n: int, branches: int, repeats: int) -> dict[str, dict]:
    """Medians per backend. Repeats are interleaved across backends (and repeat 0 is a
    warm-up), so slow phases of a noisy machine hit both libraries alike."""
    cases = [Case(b) for b in backends]
    samples = {b.name: {"chain_fwd": [], "chain_bwd": [], "wide_fwd": [], "wide_bwd": [], "nograd": []}
               for b in backends}
    for r in range(repeats + 1):
        for case in cases:
            s = samples[case.b.name]
            cf, cb = case.sample_graph("chain", chain_n)
            wf, wb = case.sample_graph("wide", branches)
            ng = case.sample_no_grad(chain_n)
            if r == 0:
                continue
            s["chain_fwd"].append(cf)
            s["chain_bwd"].append(cb)
            s["wide_fwd"].append(wf)
            s["wide_bwd"].append(wb)
            s["nograd"].append(ng)
    out = {}
    for case in cases:
        s = samples[case.b.name]
        out[case.b.name] = {
            "chain": {"fwd_s": median(s["chain_fwd"]), "bwd_s": median(s["chain_bwd"]),
                      "ops": chain_n + 1, "nodes": case.nodes["chain"], "grad": case.grads["chain"]},
            "wide": {"fwd_s": median(s["wide_fwd"]), "bwd_s": median(s["wide_bwd"]),
                     "ops": wide_op_count(branches), "nodes": case.nodes["wide"], "grad": case.grads["wide"]},
            "chain_nograd_s": median(s["nograd"]),
        }
    return out


def floors(torch: Any, repeats: int) -> list[list[str]]:
    """Per-call cost of one op on a (16,) float64 array: raw numpy, our op, torch's op."""
    a, c, _, _ = make_inputs()
    ta, tc = engine.tensor(a, dtype=numpy.float64), engine.tensor(c, dtype=numpy.float64)
    fns = {
        "np_tanh": lambda: numpy.tanh(a), "np_mul": lambda: numpy.multiply(a, c),
        "tg_tanh": lambda: ops.tanh(ta), "tg_mul": lambda: ops.mul(ta, tc),
    }
    if torch is not None:
        pa, pc = torch.tensor(a), torch.tensor(c)
        fns.update({"pt_tanh": lambda: torch.tanh(pa), "pt_mul": lambda: torch.mul(pa, pc)})
    us = per_call_us(fns, repeats)
    labels = [("np", "numpy ufunc call (floor)"), ("tg", "threadgrad op, no grad needed"),
              ("pt", "torch op, no grad needed")]
    rows = []
    for key, label in labels:
        if f"{key}_tanh" in us:
            t, m = us[f"{key}_tanh"], us[f"{key}_mul"]
            rows.append([label, fmt(t), fmt(m), fmt((t + m) / 2)])
    return rows


def _profile_table(prof: cProfile.Profile, title: str, count: int, top: int) -> str:
    """The ``top`` functions by own time, with per-call costs in µs (cProfile-inflated)."""
    st = pstats.Stats(prof)
    total = st.total_tt  # type: ignore[attr-defined]
    lines = [f"### {title}: {total * 1e3:.1f} ms under cProfile = {total / count * 1e6:.2f} µs per node "
             "(cProfile inflates Python-heavy code about 3x; use the shares, not the absolute numbers)", "",
             "| function | calls | own µs/call | cumulative µs/call | own % |", "|---|---|---|---|---|"]
    for where, ncalls, tottime, cumtime in profile_top(st, top):
        lines.append(f"| `{where}` | {ncalls} | {tottime / ncalls * 1e6:.2f} | "
                     f"{cumtime / ncalls * 1e6:.2f} | {tottime / total * 100:.1f} |")
    return "\n".join(lines) + "\n"


def profile_chain(size: int, top: int = 20) -> str:
    """cProfile one threadgrad chain: forward (recording) and backward, separately."""
    b = Ours()
    xa, ca, _, _ = make_inputs()
    c = b.const(ca)
    x = b.leaf(xa)
    fwd, bwd = cProfile.Profile(), cProfile.Profile()
    with gc_paused():
        fwd.enable()
        y = b.sum(build_chain(b, x, c, size))
        fwd.disable()
        nodes = count_nodes(y.grad_fn)
        bwd.enable()
        y.backward()
        bwd.disable()
    return "\n".join([
        _profile_table(fwd, f"chain {size:,}: forward (recording)", size + 1, top),
        _profile_table(bwd, f"chain {size:,}: backward", nodes, top),
    ])


# --- main ---------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller graphs and 3 repeats (< 20 s)")
    p.add_argument("--no-torch", action="store_true", help="omit the torch column")
    p.add_argument("--profile", action="store_true", help="also print a cProfile of one chain forward and backward")
    p.add_argument("--repeats", type=int, default=None, help="override the number of repeats")
    args = p.parse_args(argv)

    chain_n, branches, repeats = (2_000, 250, 3) if args.quick else (10_000, 1_000, 7)
    if args.repeats:
        repeats = args.repeats
    torch = None if args.no_torch else try_import_torch()
    backends: list[Any] = [Ours()] + ([Torch(torch)] if torch is not None else [])

    started = time.perf_counter()
    res = measure(backends, chain_n, branches, repeats)

    ours = res["threadgrad"]
    theirs = res.get("torch")
    if theirs is not None:  # the two graphs must compute the same thing
        for kind in ("chain", "wide"):
            diff = float(numpy.max(numpy.abs(ours[kind]["grad"] - theirs[kind]["grad"])))
            scale = float(numpy.max(numpy.abs(theirs[kind]["grad"]))) or 1.0
            if diff > 1e-9 * max(scale, 1.0):
                print(f"WARNING: {kind} gradients differ from torch by {diff:.3g}", file=sys.stderr)

    def row(label: str, what: Callable[[dict], tuple[float, int]]) -> list[str]:
        s_o, n_o = what(ours)
        us_o = s_o / n_o * 1e6
        cells = [label, str(n_o), fmt(us_o), fmt(s_o * 1e3)]
        if theirs is not None:
            s_t, n_t = what(theirs)
            us_t = s_t / n_t * 1e6
            cells += [fmt(us_t), fmt(s_t * 1e3), f"{us_o / us_t:.1f}x"]
        return cells

    header = ["graph / phase", "nodes or ops", "threadgrad µs/node", "threadgrad total ms"]
    if theirs is not None:
        header += ["torch µs/node", "torch total ms", "ours/torch"]
    rows = [
        row(f"chain {chain_n:,}: forward, grad off (ops only)", lambda r: (r["chain_nograd_s"], chain_n)),
        row(f"chain {chain_n:,}: forward, recording", lambda r: (r["chain"]["fwd_s"], r["chain"]["ops"])),
        row(f"chain {chain_n:,}: backward", lambda r: (r["chain"]["bwd_s"], r["chain"]["nodes"])),
        row(f"wide {branches:,} branches: forward, recording", lambda r: (r["wide"]["fwd_s"], r["wide"]["ops"])),
        row(f"wide {branches:,} branches: backward", lambda r: (r["wide"]["bwd_s"], r["wide"]["nodes"])),
    ]
    floor_rows = floors(torch, repeats)
    elapsed = time.perf_counter() - started

    rec_us = (ours["chain"]["fwd_s"] - ours["chain_nograd_s"]) / chain_n * 1e6
    notes = [
        f"- Machine: {machine_summary()}.",
        f"- Arrays: shape {SHAPE} float64. Median of {repeats} repeats (after 1 warm-up; repeats interleaved across libraries), cyclic GC off while timing; "
        "graph construction is excluded from backward times.",
        "- Chain ops alternate `tanh(x)` and `x * c`; wide branches are `tanh(x * c1) * c2`, summed by a balanced tree of adds. "
        "Backward µs/node divides by every node reachable from the output (op nodes, SumBackward0, AccumulateGrad); "
        "forward µs/node divides by the number of ops run.",
        f"- threadgrad recording overhead (chain, forward recording minus grad off): {rec_us:.2f} µs per op.",
    ]
    if torch is not None:
        notes.append(
            f"- torch {torch.__version__}, default settings: get_num_threads() = {torch.get_num_threads()} "
            "(intra-op threads; irrelevant at 16 elements). torch's CPU autograd runs on the calling thread, as ours does."
        )
    else:
        notes.append("- torch not importable: torch columns omitted.")

    text = "\n".join([
        f"# Engine overhead{' (--quick)' if args.quick else ''}",
        "",
        markdown_table(header, rows),
        "",
        "Per-call floor: one op on a (16,) float64 array, µs per call",
        "",
        markdown_table(["what", "tanh", "mul", "mean of the two"], floor_rows),
        "",
        *notes,
        f"- Benchmark wall time: {elapsed:.1f} s.",
        "",
    ])
    print(text)
    path = write_result("engine_overhead.md", text)
    print(f"(written to {path})")

    if args.profile:
        print("\n## cProfile of the threadgrad chain (sorted by own time)\n")
        print(profile_chain(chain_n))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
