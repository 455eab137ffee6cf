"""Writing ops on large arrays, threadgrad beside torch's cpu: masked_fill and the scatter
family (issue 31, item 4), where the time is numpy's (or torch's) kernels, not the engine's
per-node Python. One row per op in ``ROWS``: forward and backward of
``loss = (op(x) * w).sum()`` over a float64 leaf ``x`` of ``N`` elements (shape ``(N/100,
100)``; the weights make every output element's gradient distinct).

Usage::

    python benchmarks/ops_index.py                      # every row, N = 100,000
    python benchmarks/ops_index.py --only scatter_add --n 1000000 --repeats 9

Each figure is the median over ``--repeats`` samples of one call (forward: the op and the
loss; backward: ``loss.backward()``), the libraries interleaved sample by sample, so a slow
phase of the machine hits both; ``ours/torch`` is the median of the per-sample ratios. torch
runs with ``torch.set_num_threads(1)``. The masks, indices and sources are made once, outside
the timed calls. Printed and written to ``results/ops_index.md``; without torch, threadgrad's
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

COLS = 100


def _inputs(lib: Any, rows: int) -> dict[str, Any]:
    """The constant operands, in ``lib``'s tensors: a mask of about half the elements, an index
    along dim 0 with repeats (every row written about once), a source of the input's shape."""
    rng = numpy.random.default_rng(1)
    return {"mask": lib.tensor(rng.random((rows, COLS)) < 0.5),
            "index": lib.tensor(rng.integers(0, rows, size=(rows, COLS))),
            "src": lib.tensor(rng.standard_normal((rows, COLS)), requires_grad=True)}


# name -> (what it computes, the op: the same spelling serves both libraries)
ROWS: dict[str, tuple[str, Callable[[Any, dict], Any]]] = {
    "masked_fill": ("`x.masked_fill(mask, 0.0)`, half the elements", lambda x, c: x.masked_fill(c["mask"], 0.0)),
    "scatter": ("`x.scatter(0, index, src)`", lambda x, c: x.scatter(0, c["index"], c["src"])),
    "scatter_add": ("`x.scatter_add(0, index, src)`", lambda x, c: x.scatter_add(0, c["index"], c["src"])),
    "scatter_reduce amax": ("`x.scatter_reduce(0, index, src, 'amax')`",
                            lambda x, c: x.scatter_reduce(0, c["index"], c["src"], "amax")),
}


def _sample(lib: Any, op: Callable[[Any, dict], Any], data: numpy.ndarray, consts: dict,
            w: Any) -> tuple[float, float]:
    """One forward and one backward time (s) of ``(op(x) * w).sum()``."""
    x = lib.tensor(data, requires_grad=True)
    consts["src"].grad = None
    with gc_paused():
        t0 = time.perf_counter()
        loss = (op(x, consts) * w).sum()
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
    rows_n = max(n // COLS, 1)
    data = numpy.random.default_rng(0).standard_normal((rows_n, COLS))
    consts = {k: _inputs(lib, rows_n) for k, lib in libs.items()}
    weights = {k: lib.tensor(numpy.linspace(0.5, 1.5, rows_n * COLS).reshape(rows_n, COLS)) for k, lib in libs.items()}
    header = ["op", "what", "phase"] + [f"{k}, ms" for k in libs] + (["ours/torch"] if torch is not None else [])
    rows = []
    for name in names:
        what, op = ROWS[name]
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in libs}
        for k, lib in libs.items():  # one untimed warm-up each
            _sample(lib, op, data, consts[k], weights[k])
        for _ in range(repeats):
            for k, lib in libs.items():
                times[k].append(_sample(lib, op, data, consts[k], weights[k]))
        for phase, i in (("forward", 0), ("backward", 1)):
            cells = [f"`{name}`", what, phase] + [fmt(median(t[i] for t in times[k]) * 1e3) for k in libs]
            if torch is not None:
                ratios = [a[i] / b[i] for a, b in zip(times["threadgrad"], times["torch"])]
                cells.append(fmt(median(ratios)))
            rows.append(cells)
    notes = (f"{rows_n * COLS:,} float64 elements ({rows_n} x {COLS}), median of {repeats} samples; torch with 1 "
             f"intra-op thread. {machine_summary()}; load average {load_average()} at the end.")
    return "## Writing ops on large arrays\n\n" + markdown_table(header, rows) + "\n\n" + notes + "\n"


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
    print(f"written to {write_result('ops_index.md', text)}")


if __name__ == "__main__":
    main()
