"""Single ops, forward and backward, on arrays big enough that the array work dominates: one
row per op, threadgrad beside torch and plain numpy (the same math written by hand). Run it
with ``python benchmarks/run_all.py --only ops``.

Rows so far: einsum (issue 31), a batched product and a three-operand chain, each about 1e5
elements per operand. An op's row is added to ``CASES``: its name, the operands' shapes, how
each library runs forward + backward once.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy

from _common import Row, Table, per_call_us  # noqa: E402 - _common loads this checkout's threadgrad

import threadgrad as tg

# einsum cases: (label, equation, operand shapes, the gradient of each operand as numpy einsums)
EINSUM_CASES = [
    ("einsum `bij,bjk->bik`, (32, 48, 64) @ (32, 64, 48)", "bij,bjk->bik", [(32, 48, 64), (32, 64, 48)],
     ["bik,bjk->bij", "bij,bik->bjk"]),
    ("einsum `ij,jk,kl->il`, three (300, 300)", "ij,jk,kl->il", [(300, 300)] * 3,
     None),  # (three operands: numpy's gradients are written below)
]


def _numpy_einsum_step(eq: str, arrays: list, grad_eqs: list | None) -> Callable[[], Any]:
    """numpy by hand: the forward einsum, then each operand's gradient as an einsum of the
    output's gradient and the other operands (what EinsumBackward0 computes)."""
    if grad_eqs is None:  # ij,jk,kl->il
        a, b, c = arrays

        def step3() -> Any:
            y = numpy.einsum(eq, a, b, c, optimize=True)
            g = numpy.ones_like(y)
            return (numpy.einsum("il,jk,kl->ij", g, b, c, optimize=True),
                    numpy.einsum("ij,il,kl->jk", a, g, c, optimize=True),
                    numpy.einsum("ij,jk,il->kl", a, b, g, optimize=True))
        return step3
    a, b = arrays

    def step2() -> Any:
        y = numpy.einsum(eq, a, b, optimize=True)
        g = numpy.ones_like(y)
        return (numpy.einsum(grad_eqs[0], g, b, optimize=True), numpy.einsum(grad_eqs[1], a, g, optimize=True))
    return step2


def _lib_step(lib: Any, eq: str, arrays: list, make: Callable[[numpy.ndarray], Any]) -> Callable[[], Any]:
    leaves = [make(a) for a in arrays]

    def step() -> Any:
        for x in leaves:
            x.grad = None
        y = lib.einsum(eq, *leaves)
        y.backward(lib.ones_like(y))
        return [x.grad for x in leaves]
    return step


def op_rows(backends: list, quick: bool) -> Table:
    """One row per op case: forward + backward, ms per call, threadgrad / torch / numpy."""
    repeats = 3 if quick else 7
    torch = next((b.torch for b in backends if b.name == "torch"), None)
    rng = numpy.random.default_rng(0)
    rows = []
    for label, eq, shapes, grad_eqs in EINSUM_CASES:
        arrays = [rng.standard_normal(s) for s in shapes]
        fns: dict[str, Callable[[], Any]] = {
            "threadgrad": _lib_step(tg, eq, arrays, lambda a: tg.tensor(a, requires_grad=True)),
            "numpy": _numpy_einsum_step(eq, arrays, grad_eqs)}
        if torch is not None:
            fns["torch"] = _lib_step(torch, eq, arrays, lambda a: torch.tensor(a, requires_grad=True))
        got = {k: fn() for k, fn in fns.items()}  # same gradients, or the timing means nothing
        for k, grads in got.items():
            for g, want in zip(grads, got["numpy"]):
                arr = g if isinstance(g, numpy.ndarray) else g.detach().numpy()
                assert numpy.allclose(arr, want, rtol=1e-9, atol=1e-9), f"{k}: {label}"
        us = per_call_us(fns, repeats, target_s=0.2)
        rows.append(Row(label + ", forward + backward, ms", {k: v / 1e3 for k, v in us.items()}))
    notes = [
        "float64; backward from a gradient of ones. numpy: the forward einsum and each operand's "
        "gradient as an einsum of the output's gradient and the other operands, all with "
        "`optimize=True` (what threadgrad's one EinsumBackward0 node runs); torch: `torch.einsum` "
        "(permutes, reshapes, bmm) and its autograd. No target: it shows what the engine adds to "
        "numpy's einsum and where numpy's contraction order stands against torch's bmm lowering.",
        "Median per-call time over repeats of ~0.2 s each, the libraries interleaved within each repeat.",
    ]
    return Table("ops", "Ops: forward + backward of single ops on ~1e5-element operands",
                 [c for c in ("threadgrad", "torch", "numpy") if c in fns], rows, notes)
