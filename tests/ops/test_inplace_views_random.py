"""Random programs of views and in-place ops (Note [In-place ops on views]), checked against
finite differences: whatever the rebase and the stale-view refresh record must be the exact
derivative of what the program computes, including through stale views and double backward."""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import engine, ops
from threadgrad.engine.gradcheck import gradcheck, gradgradcheck

VIEWS = ("slice", "int", "transpose", "reshape", "strided", "none", "whole")
WRITES = ("mul_", "add_", "div_", "copy_", "setitem")


def _view(t: engine.Tensor, kind: str, pick: int) -> engine.Tensor:
    """A view of ``t`` of the given kind (a whole-tensor view where the shape does not allow it)."""
    if t.ndim == 0:
        return t[...]
    if kind == "slice" and t.shape[0] > 1:
        return t[1:]
    if kind == "int":
        return t[pick % t.shape[0]]
    if kind == "transpose" and t.ndim >= 2:
        return t.transpose(0, 1)
    if kind == "reshape" and t.ndim >= 2 and t._data.flags.c_contiguous:
        return t.reshape(-1)
    if kind == "strided":
        return t[::2]
    if kind == "none":
        return t[None]
    return t[...]


def _program(seed: int):
    """fn(x, w): y from x, four writes through views of y (or of earlier views) using w, then
    a weighted sum of y and of every view, including those the later writes made stale."""
    rng = np.random.default_rng(seed)
    steps = [(str(rng.choice(VIEWS)), str(rng.choice(WRITES)), bool(rng.integers(2)), int(rng.integers(100)))
             for _ in range(4)]
    weights = rng.standard_normal((6, 12))

    def fn(x: engine.Tensor, w: engine.Tensor) -> engine.Tensor:
        y = x * 1.5 + 0.25
        views = [y]
        for kind, write, from_view, pick in steps:
            v = _view(views[pick % len(views)] if from_view else y, kind, pick)
            views.append(v)
            n = int(np.prod(v.shape))
            scale = ops.reshape(w[:n], v.shape)
            if write == "mul_":
                v.mul_(scale)
            elif write == "add_":
                v.add_(scale * scale)
            elif write == "div_":
                v.div_(scale * scale + 1.0)
            elif write == "copy_":
                v.copy_(ops.tanh(scale))
            else:
                v[...] = scale * 2.0
        fn.y_history = y.grad_fn.name()  # for the test below
        total = []
        for i, t in enumerate(views):
            n = int(np.prod(t.shape))
            wt = engine.tensor(weights[i % 6][:n].reshape(t.shape), dtype=engine.float64)
            total.append(ops.sum(t * wt))
        return ops.sum(ops.stack(total))

    return fn


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", range(32))
def test_random_view_and_in_place_programs_match_finite_differences(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    x = engine.tensor(rng.uniform(0.5, 1.5, (4, 3)), dtype=engine.float64, requires_grad=True)
    w = engine.tensor(rng.uniform(0.5, 1.5, (12,)), dtype=engine.float64, requires_grad=True)
    fn = _program(seed)
    assert gradcheck(fn, (x, w))
    if seed % 4 == 0:
        assert gradgradcheck(fn, (x, w))


def test_the_random_programs_rebase_views() -> None:
    """The programs above do exercise the rebase: y ends with a CopySlices history in most."""
    names = []
    for seed in range(32):
        fn = _program(seed)
        x = engine.tensor(np.ones((4, 3)), dtype=engine.float64, requires_grad=True)
        fn(x, engine.tensor(np.ones(12), dtype=engine.float64, requires_grad=True))
        names.append(fn.y_history)
    assert names.count("CopySlices") >= 16, names
