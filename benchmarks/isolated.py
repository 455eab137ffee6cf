"""The chain of workload 1 with each library alone in its own process: the cross-check of
Note [Warm samples] (backends.py).

Side by side in one process, libraries leave each other's heap and caches behind. Here no
sample ever follows another library's: every round starts one fresh process per library
(threadgrad, then torch), each runs the 10,000-op chain a few times and reports its medians,
and the ratio of a round compares two processes started back to back. Run it with
``python benchmarks/run_all.py --only isolated``; this module is also the child's entry point
(``python benchmarks/isolated.py --child NAME``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from _common import Row, Table, median  # noqa: E402 - _common loads this checkout's threadgrad

CHAIN_N = 10_000
CHILD_SAMPLES = 7  # timed samples per process, after one untimed


def child(name: str) -> None:
    """Run the chain on backend ``name`` alone in this process; print its medians as JSON."""
    from backends import available_backends, build_chain, make_inputs  # noqa: PLC0415

    skip = tuple(n for n in ("torch", "autograd", "mygrad") if n != name)
    b = {x.name: x for x in available_backends(skip)}[name]
    if name == "torch":
        b.torch.set_num_threads(1)
    xa, ca, _, _ = make_inputs()
    c = b.const(ca)

    def build(bb: Any, x: Any) -> Any:
        return bb.sum(build_chain(bb, x, c, CHAIN_N))

    b.sample(build, xa)  # untimed: the timed samples follow one of the same library
    fwd, bwd = [], []
    for _ in range(CHILD_SAMPLES):
        f, bw, _ = b.sample(build, xa)
        fwd.append(f / (CHAIN_N + 1) * 1e6)
        bwd.append(bw / (CHAIN_N + 2) * 1e6)
    print(json.dumps({"fwd_us": median(fwd), "bwd_us": median(bwd)}))


def _run_child(name: str) -> dict[str, float]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name], env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"isolated child {name} failed (rc {out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def isolated(backends: list[Any], quick: bool) -> Table:
    """Chain forward and backward, threadgrad and torch each in its own process per round."""
    names = [b.name for b in backends if b.name in ("threadgrad", "torch")]
    rounds = 3 if quick else 7
    per: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for _ in range(rounds):
        for n in names:
            per[n].append(_run_child(n))
    t = Table("isolated", f"Chain of {CHAIN_N:,} nodes, each library alone in its own process", names)
    for key, label in (("bwd_us", f"backward, µs/node ({CHAIN_N + 2:,} nodes)"),
                       ("fwd_us", f"forward (recording), µs/op ({CHAIN_N + 1:,} ops)")):
        row = Row(label, {n: median(r[key] for r in per[n]) for n in names})
        if "torch" in per:
            row.ratio = median(a[key] / b[key] for a, b in zip(per["threadgrad"], per["torch"]))
        t.rows.append(row)
    t.notes = [
        f"{rounds} rounds; each round starts a process for threadgrad, then one for torch. A process runs "
        f"the chain of workload 1 once untimed, then {CHILD_SAMPLES} times, and reports its medians; the "
        "table gives the median over rounds, and `ours/torch` the median of the rounds' ratios. No sample "
        "follows another library's (see Note [Warm samples] in benchmarks/backends.py): this is the check "
        "that workload 1's side-by-side figures are not an artifact of sharing a process."
    ]
    return t


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        sys.exit("usage: python benchmarks/isolated.py --child NAME  (run the workload with run_all.py --only isolated)")
