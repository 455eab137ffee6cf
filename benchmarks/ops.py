"""Single ops on large arrays, threadgrad beside torch's cpu: where the time is numpy's (or
torch's) kernels, not the engine's per-node Python. One row per op in ``ROWS``: forward and
backward of ``loss = (op(x) * w).sum()`` over a float64 leaf of ``N`` elements (the weights
make every output element's gradient distinct, so a backward cannot shortcut).

Usage::

    python benchmarks/ops.py                 # every row, N = 100,000
    python benchmarks/ops.py --only sort,topk --n 1000000 --repeats 9

Each figure is the median over ``--repeats`` samples of one call (forward: the op and the
loss; backward: ``loss.backward()``), the libraries interleaved sample by sample, so a slow
phase of the machine hits both; ``ours/torch`` is the median of the per-sample ratios.
torch runs with ``torch.set_num_threads(1)`` (numpy's sorts and scans are single-threaded
too). The result is printed and written to ``results/ops.md``; without torch, threadgrad's
column alone.
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import numpy

from _common import (fmt, gc_paused, load_average, machine_summary, markdown_table, median, try_import_torch,
                     write_result)

import threadgrad as tg

# name -> (what it computes, the op on a 1-d leaf: the same spelling serves both libraries)
ROWS: dict[str, tuple[str, Callable[[Any, Any], Any]]] = {
    "sort": ("`x.sort().values`", lambda lib, x: x.sort().values),
    "topk": ("`x.topk(k).values`, k = n / 10", lambda lib, x: x.topk(x.shape[0] // 10).values),
    "cumsum": ("`x.cumsum(0)`", lambda lib, x: x.cumsum(0)),
}


def _sample(lib: Any, op: Callable[[Any, Any], Any], data: numpy.ndarray, weights: dict) -> tuple[float, float]:
    """One forward and one backward time (s) of ``(op(x) * w).sum()``."""
    x = lib.tensor(data, requires_grad=True)
    with gc_paused():
        t0 = time.perf_counter()
        out = op(lib, x)
        w = weights.setdefault((id(lib), out.shape[0]), lib.tensor(numpy.linspace(0.5, 1.5, out.shape[0])))
        loss = (out * w).sum()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def run(names: list[str], n: int, repeats: int) -> str:
    torch = try_import_torch()
    libs: dict[str, Any] = {"threadgrad": tg}
    if torch is not None:
        torch.set_num_threads(1)
        libs["torch"] = torch
    data = numpy.random.default_rng(0).standard_normal(n)
    header = ["op", "what", "phase"] + [f"{k}, ms" for k in libs] + (["ours/torch"] if torch is not None else [])
    rows = []
    for name in names:
        what, op = ROWS[name]
        weights: dict = {}
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in libs}
        for k, lib in libs.items():  # one untimed warm-up each
            _sample(lib, op, data, weights)
        for _ in range(repeats):
            for k, lib in libs.items():
                times[k].append(_sample(lib, op, data, weights))
        for phase, i in (("forward", 0), ("backward", 1)):
            cells = [f"`{name}`", what, phase] + [fmt(median(t[i] for t in times[k]) * 1e3) for k in libs]
            if torch is not None:
                ratios = [a[i] / b[i] for a, b in zip(times["threadgrad"], times["torch"])]
                cells.append(fmt(median(ratios)))
            rows.append(cells)
    notes = (f"{n:,} float64 elements, median of {repeats} samples; torch with 1 intra-op thread. "
             f"{machine_summary()}; load average {load_average()} at the end.")
    return "## Single ops on large arrays\n\n" + markdown_table(header, rows) + "\n\n" + notes + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(ROWS), help=f"rows, comma separated: {', '.join(ROWS)}")
    parser.add_argument("--n", type=int, default=100_000, help="elements of the leaf (default 100,000)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    names = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in names if s not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; known: {', '.join(ROWS)}")
    text = run(names, args.n, args.repeats)
    print(text)
    print(f"written to {write_result('ops.md', text)}")


if __name__ == "__main__":
    main()
