"""CPU instructions per backward node, per forward op and per ``node.apply`` call, counted by
valgrind's callgrind: a noise-free measure for A/B comparisons of small engine changes.

Usage::

    python benchmarks/instructions.py                      # working tree, every row (~1 min on 2 cores)
    python benchmarks/instructions.py --against a9960a2    # also a git revision: before/after/ratio (~2 min)
    python benchmarks/instructions.py --only chain_bwd     # one row (names: see --help); commas for several
    python benchmarks/instructions.py --quick              # the two backward rows only (~30 s)
    python benchmarks/instructions.py --jobs 1             # callgrind runs one at a time (default: one per CPU)

Wall-clock times on a shared VM move by up to 2x between processes; instruction counts do not.
Each figure is the difference of two callgrind runs of a child Python process, one that does
everything except the measured phase and one that also runs it (the same imports and warm-up
in both), divided by the number of nodes, ops or calls in that phase. The child runs with
``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 PYTHONHASHSEED=0`` (OpenBLAS's spinning thread adds
millions of random instructions otherwise) and the cyclic GC off. It leaves by ``os._exit``
right after the phase, so interpreter teardown is never counted; in both runs of a backward row
it first drops the graph, so a backward figure is what ``backward()`` adds to a program that
frees its graph anyway (the saved tensors that backward releases would be freed without it).
Letting teardown free the graph instead (as hand measurements did) gives figures about 2% lower:
finalization frees a whole graph at a higher cost than ``del``.

Rows (the graphs are those of engine_overhead.py, built by backends.py; (16,) float64 arrays):

* ``chain_fwd`` / ``chain_bwd``: a chain of 2,000 ops alternating ``tanh(x)`` and ``x * c``,
  then ``sum``: forward recording per op (the graph kept: its freeing is not counted),
  ``backward()`` per node (N + 2 nodes).
* ``wide_bwd``: 500 branches ``tanh(x * c1) * c2`` summed by a tree of adds: backward per node.
* ``call``: one whole ``y.backward(retain_graph=True)`` call on ``y = (x * c).sum()``, a graph of
  three nodes (SumBackward0, MulBackward0, AccumulateGrad): what a call costs beyond its nodes,
  plus those three.
* ``tanh`` / ``mul`` / ``addmm``: ``node.apply([g])`` under ``no_grad`` (as the executor calls
  it) of a kept TanhBackward0, MulBackward0 (``x * c``, only ``x`` requires grad) and
  AddmmBackward0 (``linear`` of x (4, 8), W (6, 8), b (6,) float32, all requiring grad). The
  loop runs in a function: a module-level loop adds ~450 instructions a call (global lookups).

With ``--against REV`` the revision is checked out in a temporary ``git worktree`` (removed
afterwards) and measured the same way: the child loads the measured tree's threadgrad
(``THREADGRAD_TREE``, read by _common.py) and reports ``engine.__file__``, which is checked. The result is printed and written
to ``results/instructions.md``. Without valgrind the script says so and exits 0.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

from _common import ROOT, machine_summary, markdown_table, write_result  # _common loads this checkout's threadgrad

CHAIN_N = 2_000
BRANCHES = 500
CALLS = 2_000  # node.apply calls per apply row
CHILD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
APPLY_NODES = {"tanh": "TanhBackward0", "mul": "MulBackward0", "addmm": "AddmmBackward0"}

Run = tuple[str, int]  # (scenario, number of its stages run): one child process


@dataclass(frozen=True)
class Spec:
    """One row: the run that includes the measured phase, the run without it, and the divisor."""

    label: str
    per: str
    run: Run
    base: Run
    count: Callable[[dict], int]  # from the probe's answer: nodes, ops or calls in the phase


ROWS: dict[str, Spec] = {
    "chain_bwd": Spec(f"chain {CHAIN_N:,}: backward", "node", ("chain", 2), ("chain", 1),
                      lambda p: p["chain_nodes"]),
    "chain_fwd": Spec(f"chain {CHAIN_N:,}: forward, recording", "op", ("chain_kept", 1), ("base", 0),
                      lambda p: CHAIN_N + 1),
    "wide_bwd": Spec(f"wide {BRANCHES:,} branches: backward", "node", ("wide", 2), ("wide", 1),
                     lambda p: p["wide_nodes"]),
    "tanh": Spec("`TanhBackward0.apply([g])`, (16,) float64", "call", ("tanh", 1), ("base", 0),
                 lambda p: CALLS),
    "mul": Spec("`MulBackward0.apply([g])`, (16,) float64", "call", ("mul", 1), ("base", 0),
                lambda p: CALLS),
    "addmm": Spec("`AddmmBackward0.apply([g])`, (4,8)x(6,8) float32", "call", ("addmm", 1), ("base", 0),
                  lambda p: CALLS),
    "call": Spec("`y.backward(retain_graph=True)`, y = `(x * c).sum()` (3 nodes)", "call", ("call", 1), ("call", 0),
                 lambda p: CALLS),
}
QUICK_ROWS = ["chain_bwd", "wide_bwd"]


# --- the child: runs inside the measured tree ---------------------------------------------

def child(tree: str, scenario: str, stages: int) -> None:
    """Import the tree's engine, warm up, run ``stages`` stages of ``scenario``, then ``os._exit``.

    ``probe`` (run natively, not under callgrind) prints the node counts and ``engine.__file__``
    as JSON; it also writes the tree's ``.pyc`` files, so no callgrind run compiles modules.
    """
    import gc  # noqa: PLC0415
    gc.disable()
    import numpy  # noqa: PLC0415
    from threadgrad import engine, ops  # noqa: PLC0415 - the tree's: _env() names it in THREADGRAD_TREE
    from backends import Ours, build_chain, build_wide, make_inputs  # noqa: PLC0415

    b = Ours()
    xa, ca, c1a, c2a = make_inputs()
    c, c1, c2 = b.const(ca), b.const(c1a), b.const(c2a)
    x = b.leaf(xa)
    rng = numpy.random.default_rng(1)
    mx = engine.tensor(rng.standard_normal((4, 8)).astype(numpy.float32), requires_grad=True)
    mw = engine.tensor(rng.standard_normal((6, 8)).astype(numpy.float32), requires_grad=True)
    mb = engine.tensor(rng.standard_normal(6).astype(numpy.float32), requires_grad=True)
    outs = {"tanh": ops.tanh(x), "mul": ops.mul(x, c), "addmm": ops.linear(mx, mw, mb)}  # kept: saved tensors live
    g16 = engine.tensor(numpy.ones(16), dtype=numpy.float64)
    grads = {"tanh": g16, "mul": g16, "addmm": engine.tensor(numpy.ones((4, 6), numpy.float32))}

    # Warm-up, identical in every run: every code path the phases take, once or twice.
    for _ in range(2):
        w = b.leaf(xa)
        b.sum(build_chain(b, w, c, 20)).backward()
        build_wide(b, w, c1, c2, 8).backward()
        (w * c).sum().backward(retain_graph=True)
    with engine.no_grad():
        for k, out in outs.items():
            for _ in range(5):
                out.grad_fn.apply([grads[k]])

    if scenario == "probe":
        from _common import count_nodes  # noqa: PLC0415
        y, z = b.sum(build_chain(b, x, c, CHAIN_N)), build_wide(b, x, c1, c2, BRANCHES)
        print(json.dumps({"engine": engine.__file__, "chain_nodes": count_nodes(y.grad_fn),
                          "wide_nodes": count_nodes(z.grad_fn),
                          "apply_nodes": {k: type(o.grad_fn).__name__ for k, o in outs.items()}}))
    elif scenario in ("chain", "chain_kept", "wide"):
        if stages >= 1:
            y = build_wide(b, x, c1, c2, BRANCHES) if scenario == "wide" else b.sum(build_chain(b, x, c, CHAIN_N))
        if stages >= 2:
            y.backward()
        if stages >= 1 and scenario != "chain_kept":
            del y  # the graph is freed in both runs of a backward row: see the module docstring
    elif scenario == "call":
        y = (x * c).sum()  # in both runs of the row: only the calls differ
        if stages >= 1:
            for _ in range(CALLS):
                y.backward(retain_graph=True)
    elif scenario in APPLY_NODES:
        if stages >= 1:
            apply, g = outs[scenario].grad_fn.apply, grads[scenario]
            with engine.no_grad():
                for _ in range(CALLS):
                    apply([g])
    elif scenario != "base":
        raise SystemExit(f"unknown scenario {scenario!r}")
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: what is alive at exit differs between the two runs


# --- the parent ------------------------------------------------------------------------------

def _child_cmd(tree: str, scenario: str, stages: int) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "--child", tree, scenario, str(stages)]


def _env(tree: str) -> dict[str, str]:
    return {**os.environ, **CHILD_ENV, "THREADGRAD_TREE": tree}  # _common.py loads that tree's threadgrad


def probe(tree: str) -> dict[str, Any]:
    """Run the child natively once: node counts, and a check that it imports the tree's engine."""
    p = subprocess.run(_child_cmd(tree, "probe", 0), env=_env(tree), capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"probe of {tree} failed:\n{p.stderr[-3000:]}")
    info = json.loads(p.stdout.strip().splitlines()[-1])
    if not os.path.realpath(info["engine"]).startswith(os.path.realpath(tree) + os.sep):
        raise RuntimeError(f"the child imported {info['engine']}, not the engine of {tree}")
    for key, name in APPLY_NODES.items():
        if info["apply_nodes"][key] != name:
            raise RuntimeError(f"{tree}: the {key} row's node is {info['apply_nodes'][key]}, not {name}")
    return info


def callgrind(tree: str, run: Run) -> int:
    """Instructions executed by one child process under callgrind ("Collected : N")."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *_child_cmd(tree, *run)]
    p = subprocess.run(cmd, env=_env(tree), capture_output=True, text=True)
    m = re.search(r"Collected\s*:\s*(\d+)", p.stderr)
    if p.returncode != 0 or m is None:
        raise RuntimeError(f"callgrind run {run} of {tree} failed (rc {p.returncode}):\n{p.stderr[-3000:]}")
    return int(m.group(1))


def measure(trees: list[str], keys: list[str], jobs: int) -> dict[str, dict[Run, int]]:
    """Instruction totals of every run the rows need, per tree; runs go ``jobs`` at a time."""
    todo = sorted({(t, r) for t in trees for k in keys for r in (ROWS[k].run, ROWS[k].base)},
                  key=lambda tr: -tr[1][1])  # the longer runs first
    out: dict[str, dict[Run, int]] = {t: {} for t in trees}
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(callgrind, t, r): (t, r) for t, r in todo}
        for i, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            t, r = futures[fut]
            out[t][r] = fut.result()
            print(f"  [{i}/{len(todo)}] {r[0]} {r[1]} stage(s) in {os.path.basename(t) or t}: "
                  f"{out[t][r]:,} instructions ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return out


def per_unit(totals: dict[Run, int], info: dict, key: str) -> float:
    spec = ROWS[key]
    return (totals[spec.run] - totals[spec.base]) / spec.count(info)


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", ROOT, *args], check=True, capture_output=True, text=True).stdout.strip()


def tree_label() -> str:
    """``working tree (HEAD's short hash[, with uncommitted changes])``."""
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"working tree ({git('rev-parse', '--short', 'HEAD')}{' + changes' if dirty else ''})"


@contextlib.contextmanager
def worktree(rev: str) -> Any:
    """A temporary detached ``git worktree`` of ``rev``, removed on exit."""
    path = tempfile.mkdtemp(prefix="instructions-")
    os.rmdir(path)
    git("worktree", "add", "--detach", path, rev)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", path], capture_output=True)
        shutil.rmtree(path, ignore_errors=True)
        subprocess.run(["git", "-C", ROOT, "worktree", "prune"], capture_output=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1], argv[2], int(argv[3]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--against", metavar="REV", help="also measure this git revision (before/after/ratio)")
    p.add_argument("--only", metavar="NAMES", help=f"comma-separated rows among {', '.join(ROWS)}")
    p.add_argument("--quick", action="store_true", help=f"only {' and '.join(QUICK_ROWS)}")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="callgrind runs at a time")
    args = p.parse_args(argv)

    if shutil.which("valgrind") is None:
        print("instructions.py: valgrind is not installed (apt-get install valgrind); nothing measured.")
        return 0
    keys = args.only.split(",") if args.only else QUICK_ROWS if args.quick else list(ROWS)
    unknown = [k for k in keys if k not in ROWS]
    if unknown:
        p.error(f"unknown row(s) {', '.join(unknown)}; choose among {', '.join(ROWS)}")

    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        trees = [ROOT]
        if args.against:
            rev = git("rev-parse", "--short", args.against + "^{commit}")
            trees.insert(0, stack.enter_context(worktree(rev)))
        infos = {t: probe(t) for t in trees}
        totals = measure(trees, keys, max(1, args.jobs))
    elapsed = time.perf_counter() - started

    now = tree_label()
    if args.against:
        before, after = trees
        header = ["measurement", "per", f"{rev} (before)", f"{now} (after)", "after/before"]
        rows = []
        for k in keys:
            b, a = per_unit(totals[before], infos[before], k), per_unit(totals[after], infos[after], k)
            rows.append([ROWS[k].label, ROWS[k].per, f"{b:,.0f}", f"{a:,.0f}", f"{a / b:.3f}"])
    else:
        header = ["measurement", "per", f"instructions, {now}"]
        rows = [[ROWS[k].label, ROWS[k].per, f"{per_unit(totals[ROOT], infos[ROOT], k):,.0f}"] for k in keys]
    valgrind = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()
    text = "\n".join([
        "# Instructions per node (callgrind)",
        "",
        markdown_table(header, rows),
        "",
        f"- Machine: {machine_summary()}; {valgrind}.",
        "- Each figure: (instructions of a child run with the phase) minus (the same run without it), "
        "divided by the nodes, ops or calls of the phase; `"
        + " ".join(f"{k}={v}" for k, v in CHILD_ENV.items()) + "`, cyclic GC off.",
        "- Chain: `tanh(x)` and `x * c` alternating, then `sum`; wide: branches `tanh(x * c1) * c2` "
        f"summed by a tree of adds; (16,) float64. `apply` rows: {CALLS:,} calls under `no_grad`.",
        f"- Wall time: {elapsed:.0f} s ({len({r for t in totals.values() for r in t}) * len(trees)} "
        f"callgrind runs, {max(1, args.jobs)} at a time).",
        "",
    ])
    print(text)
    print(f"(written to {write_result('instructions.md', text)})")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
