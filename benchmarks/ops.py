"""Single ops on large arrays, threadgrad beside torch's cpu (one intra-op thread) and, where a
row has it, the same math in numpy by hand: where the time is numpy's (or torch's) kernels, not
the engine's per-node Python. One row per op case in ``CASES`` (issue 31: sort, topk, cumsum,
einsum, masked_fill, the scatter family), forward and backward of
``loss = (op(*leaves) * w).sum()``; the weights ``w`` make every output element's gradient
distinct, so a backward cannot shortcut.

Usage::

    python benchmarks/ops.py                          # every row, n = 100,000
    python benchmarks/ops.py --only sort,topk --n 1000000 --repeats 9
    python benchmarks/run_all.py --only ops           # the same table as the suite's ``ops`` workload

Timing is ``per_call_samples_us`` of _common.py: per library, one function runs the forward (op
and loss, the graph dropped) and one the forward and backward; they are interleaved with the
other libraries' within each repeat. Forward is the median of the first, backward the median of
the per-repeat differences, ``ours/torch`` the median of the per-repeat ratios of forward +
backward. Issue 31's target: threadgrad's forward + backward within 1.5x of torch's. Every
library's gradients are checked equal before timing. Standalone, the table is printed and
written to ``results/ops.md``; without torch, threadgrad's column alone.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

if __name__ == "__main__":  # one BLAS thread, as run_all.py sets it; must precede numpy's import
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import numpy

from _common import (Row, Table, load_average, machine_summary, median, per_call_samples_us,  # noqa: E402
                     try_import_torch, write_result)

import threadgrad as tg  # noqa: E402

N = 100_000
TARGET = 1.5  # issue 31: forward + backward within 1.5x of torch's cpu
COLS = 100  # the index rows' leaf is (n / COLS, COLS): their ops write along dim 0

Arrays = dict[str, numpy.ndarray]


@dataclass
class Case:
    """One row. ``inputs(n)`` gives the leaves (which require grad) and the constants as numpy
    arrays; ``op(lib, leaves, consts)`` is the op in a spelling torch and threadgrad share;
    ``by_hand(leaves, consts, w)``, where given, returns numpy's forward (the loss) and forward +
    backward (the leaves' gradients, in ``leaves``' order)."""

    what: str
    inputs: Callable[[int], tuple[Arrays, Arrays]]
    op: Callable[[Any, dict, dict], Any]
    by_hand: Callable[[Arrays, Arrays, numpy.ndarray], tuple[Callable[[], Any], Callable[[], Any]]] | None = None


def _vector(n: int) -> tuple[Arrays, Arrays]:
    return {"x": numpy.random.default_rng(0).standard_normal(n)}, {}


def _masked(n: int) -> tuple[Arrays, Arrays]:
    """A (n / COLS, COLS) leaf and a mask of about half its elements."""
    rng = numpy.random.default_rng(1)
    rows = max(n // COLS, 1)
    return {"x": rng.standard_normal((rows, COLS))}, {"mask": rng.random((rows, COLS)) < 0.5}


def _scattered(n: int) -> tuple[Arrays, Arrays]:
    """A (n / COLS, COLS) leaf, a source leaf of its shape, and an index along dim 0 with repeats
    (every row written about once)."""
    rng = numpy.random.default_rng(1)
    rows = max(n // COLS, 1)
    return ({"x": rng.standard_normal((rows, COLS)), "src": rng.standard_normal((rows, COLS))},
            {"index": rng.integers(0, rows, size=(rows, COLS))})


def _operands(*shapes: tuple[int, ...]) -> Callable[[int], tuple[Arrays, Arrays]]:
    """einsum's operands: fixed shapes of about 1e5 elements each (``--n`` leaves them alone)."""
    def make(n: int) -> tuple[Arrays, Arrays]:
        rng = numpy.random.default_rng(0)
        return {name: rng.standard_normal(s) for name, s in zip("abc", shapes)}, {}
    return make


def _sort_by_hand(leaves: Arrays, consts: Arrays, w: numpy.ndarray) -> tuple[Callable[[], Any], Callable[[], Any]]:
    x = leaves["x"]

    def forward() -> Any:
        order = numpy.argsort(x, kind="stable")
        return (x[order] * w).sum(), order

    def step() -> list:
        _, order = forward()
        g = numpy.empty_like(x)
        g[order] = w
        return [g]
    return forward, step


def _cumsum_by_hand(leaves: Arrays, consts: Arrays, w: numpy.ndarray) -> tuple[Callable[[], Any], Callable[[], Any]]:
    x = leaves["x"]

    def forward() -> Any:
        return (numpy.cumsum(x) * w).sum()

    def step() -> list:
        forward()
        return [numpy.cumsum(w[::-1])[::-1]]
    return forward, step


def _masked_fill_by_hand(leaves: Arrays, consts: Arrays,
                         w: numpy.ndarray) -> tuple[Callable[[], Any], Callable[[], Any]]:
    x, mask = leaves["x"], consts["mask"]

    def forward() -> Any:
        return (numpy.where(mask, 0.0, x) * w).sum()

    def step() -> list:
        forward()
        return [numpy.where(mask, 0.0, w)]
    return forward, step


def _einsum_by_hand(eq: str, grad_eqs: list[str]) -> Callable:
    """numpy's forward einsum, then each operand's gradient as an einsum of the output's gradient
    and the other operands (what threadgrad's one EinsumBackward0 node runs), ``optimize=True``."""
    def by_hand(leaves: Arrays, consts: Arrays, w: numpy.ndarray) -> tuple[Callable[[], Any], Callable[[], Any]]:
        arrays = list(leaves.values())

        def forward() -> Any:
            return (numpy.einsum(eq, *arrays, optimize=True) * w).sum()

        def step() -> list:
            forward()
            grads = []
            for i, geq in enumerate(grad_eqs):  # operand i's gradient: w in its place
                grads.append(numpy.einsum(geq, *arrays[:i], w, *arrays[i + 1:], optimize=True))
            return grads
        return forward, step
    return by_hand


CASES: dict[str, Case] = {
    "sort": Case("`x.sort().values`", _vector, lambda lib, v, c: v["x"].sort().values, _sort_by_hand),
    "topk": Case("`x.topk(n // 10).values`", _vector, lambda lib, v, c: v["x"].topk(v["x"].shape[0] // 10).values),
    "cumsum": Case("`x.cumsum(0)`", _vector, lambda lib, v, c: v["x"].cumsum(0), _cumsum_by_hand),
    "einsum bmm": Case("`einsum('bij,bjk->bik')`, (32, 48, 64) and (32, 64, 48)", _operands((32, 48, 64), (32, 64, 48)),
                       lambda lib, v, c: lib.einsum("bij,bjk->bik", v["a"], v["b"]),
                       _einsum_by_hand("bij,bjk->bik", ["bik,bjk->bij", "bij,bik->bjk"])),
    "einsum chain": Case("`einsum('ij,jk,kl->il')`, three (300, 300)", _operands((300, 300), (300, 300), (300, 300)),
                         lambda lib, v, c: lib.einsum("ij,jk,kl->il", v["a"], v["b"], v["c"]),
                         _einsum_by_hand("ij,jk,kl->il", ["il,jk,kl->ij", "ij,il,kl->jk", "ij,jk,il->kl"])),
    "masked_fill": Case("`x.masked_fill(mask, 0.0)`, half the elements", _masked,
                        lambda lib, v, c: v["x"].masked_fill(c["mask"], 0.0), _masked_fill_by_hand),
    "scatter": Case("`x.scatter(0, index, src)`", _scattered, lambda lib, v, c: v["x"].scatter(0, c["index"], v["src"])),
    "scatter_add": Case("`x.scatter_add(0, index, src)`", _scattered,
                        lambda lib, v, c: v["x"].scatter_add(0, c["index"], v["src"])),
    "scatter_reduce amax": Case("`x.scatter_reduce(0, index, src, 'amax')`", _scattered,
                                lambda lib, v, c: v["x"].scatter_reduce(0, c["index"], v["src"], "amax")),
}


def _lib_fns(lib: Any, case: Case, leaves_np: Arrays, consts_np: Arrays,
             w_np: numpy.ndarray) -> tuple[Callable[[], Any], Callable[[], list]]:
    """``lib``'s forward (the loss, its graph dropped on return) and forward + backward (the
    leaves' gradients as numpy arrays), over leaves and constants made once."""
    leaves = {k: lib.tensor(a, requires_grad=True) for k, a in leaves_np.items()}
    consts = {k: lib.tensor(a) for k, a in consts_np.items()}
    w = lib.tensor(w_np)

    def forward() -> Any:
        return (case.op(lib, leaves, consts) * w).sum()

    def step() -> list:
        for x in leaves.values():
            x.grad = None
        forward().backward()
        return [x.grad for x in leaves.values()]
    return forward, step


def _as_numpy(g: Any) -> numpy.ndarray:
    return g if isinstance(g, numpy.ndarray) else numpy.asarray(g.detach().numpy())


def _weights(case: Case, leaves_np: Arrays, consts_np: Arrays) -> numpy.ndarray:
    """Distinct weights of the op's output shape (threadgrad tells the shape, untimed)."""
    t_leaves = {k: tg.tensor(a) for k, a in leaves_np.items()}
    t_consts = {k: tg.tensor(a) for k, a in consts_np.items()}
    shape = tuple(case.op(tg, t_leaves, t_consts).shape)
    return numpy.linspace(0.5, 1.5, math.prod(shape)).reshape(shape)


def measure(names: list[str], n: int, repeats: int, torch: Any, target_s: float = 0.2) -> Table:
    """The table of ``names`` (keys of CASES): forward, backward and forward + backward in ms."""
    libs: dict[str, Any] = {"threadgrad": tg}
    if torch is not None:
        torch.set_num_threads(1)
        libs["torch"] = torch
    rows = []
    has_numpy = False
    for name in names:
        case = CASES[name]
        leaves_np, consts_np = case.inputs(n)
        w_np = _weights(case, leaves_np, consts_np)
        fns: dict[str, Callable[[], Any]] = {}
        for k, lib in libs.items():
            fns[f"fwd {k}"], fns[k] = _lib_fns(lib, case, leaves_np, consts_np, w_np)
        if case.by_hand is not None:
            fns["fwd numpy"], fns["numpy"] = case.by_hand(leaves_np, consts_np, w_np)
            has_numpy = True
        want = [_as_numpy(g) for g in fns["threadgrad"]()]  # same gradients, or the timing means nothing
        for k in [k for k in fns if not k.startswith("fwd ")][1:]:
            for g, ref in zip(fns[k](), want):
                assert numpy.allclose(_as_numpy(g), ref, rtol=1e-9, atol=1e-9), f"{k}'s gradient differs: {name}"
        us = per_call_samples_us(fns, repeats, target_s)
        values: dict[str, float | None] = {}
        for k in [k for k in fns if not k.startswith("fwd ")]:
            values[f"fwd {k}"] = median(us[f"fwd {k}"]) / 1e3
            values[f"bwd {k}"] = median(b - f for b, f in zip(us[k], us[f"fwd {k}"])) / 1e3
            values[k] = median(us[k]) / 1e3
        row = Row(f"`{name}`: {case.what}", values)
        if torch is not None:
            row.ratio = median(a / b for a, b in zip(us["threadgrad"], us["torch"]))
            row.target, row.met = f"≤ {TARGET}x torch", row.ratio <= TARGET
        rows.append(row)
    columns = [f"{phase}{k}" for phase in ("fwd ", "bwd ", "") for k in [*libs, *(["numpy"] if has_numpy else [])]]
    headers = {k: f"{k} fwd+bwd" for k in [*libs, "numpy"]}
    notes = [
        f"ms per call, float64; {n:,} elements per leaf (the 1-d rows; masked_fill and the scatter rows "
        f"a ({max(n // COLS, 1)}, {COLS}) leaf, the scatter rows also a source leaf of that shape written along dim 0 "
        "by an index with repeats), einsum's operands as stated. `loss = (op(...) * w).sum()` with distinct weights; fwd: op and loss, the graph "
        "dropped; bwd: `loss.backward()` (the median of per-repeat differences); `ours/torch`: the median "
        f"of per-repeat ratios of fwd+bwd, judged against issue 31's target ({TARGET}x).",
        "torch: the same spelling, one intra-op thread. numpy (sort, cumsum, einsum, masked_fill): the same "
        "math by hand (sort: a stable argsort, its gradient a scatter of the weights; cumsum: a reversed "
        "cumsum of the weights; einsum: each operand's gradient an einsum with `optimize=True`, what "
        "EinsumBackward0 runs). Every library's gradients are checked equal before timing.",
        f"Median of {repeats} repeats of ~{target_s} s per function, the libraries interleaved within each repeat.",
    ]
    return Table("ops", f"Ops: forward and backward of single ops on {n:,} elements (issue 31)", columns, rows,
                 notes, headers=headers)


def op_rows(backends: list, quick: bool) -> Table:
    """The ``ops`` workload of run_all.py: every case at n = 1e5 (3 repeats of ~0.1 s with ``--quick``)."""
    torch = next((b.torch for b in backends if b.name == "torch"), None)
    return measure(list(CASES), N, 3 if quick else 7, torch, 0.1 if quick else 0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(CASES), help=f"rows, comma separated: {', '.join(CASES)}")
    parser.add_argument("--n", type=int, default=N,
                        help="elements of each leaf (default 100,000; einsum's operands keep their shapes)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    names = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in names if s not in CASES]
    if unknown:
        parser.error(f"unknown rows {unknown}; known: {', '.join(CASES)}")
    table = measure(names, args.n, args.repeats, try_import_torch())
    text = table.markdown() + f"\n{machine_summary()}; load average {load_average()} at the end.\n"
    print(text)
    print(f"written to {write_result('ops.md', text)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
