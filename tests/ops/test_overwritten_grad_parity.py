"""The gradient of overwritten elements (``x[i] = v``, ``fill_``, ``zero_``, ``copy_``, an
in-place op through a view) against torch 2.13 (issue 33, item 3; skipped without torch).

torch writes the overwritten region's gradient as fresh zeros (IndexPutBackward0:
``grad.index_put(indices, zeros_like(values))``; CopySlices: the op's gradient copied into a
clone; fill_/zero_/copy_: ``zeros_like(grad)``), so an inf or NaN arriving there does not
become NaN, and after a write to every element the base's gradient is outside the graph
(``requires_grad`` False under ``create_graph``). Each case is one program over a library
(``tg`` or ``torch``) returning what a user observes."""
from __future__ import annotations

import itertools
import math

import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _t(lib, values, rg=False):
    return lib.tensor(values, dtype=lib.float64, requires_grad=rg)


def _obs(t):
    if t is None:
        return None
    if isinstance(t, (list, tuple)):
        return [_obs(u) for u in t]
    return [v if not math.isnan(v) else "nan" for v in t.detach().reshape(-1).tolist()]


def issue_reproducer(lib):
    x = _t(lib, [1.0, 2.0], rg=True)
    y = x * 1
    y[0:1] = 5.0
    (y / _t(lib, [0.0, 1.0])).sum().backward()
    return _obs(x.grad)


INDEXES = {"slice": slice(0, 1), "int": 0, "list": [0, 2], "mask": [True, False, True], "all": slice(None)}
VALUES = ["number", "leaf0d", "product"]
LOSSES = ["square", "weights", "slice", "div_by_zero"]


def _program(lib, index, value, loss):
    """Write at ``index`` of y = x * 1, take ``loss``, then the gradients with create_graph
    and, from each of them that requires grad, the gradients again with allow_unused."""
    x = _t(lib, [1.0, 2.0, 3.0], rg=True)
    w = _t(lib, [2.0, 3.0, 4.0], rg=True)
    v = _t(lib, 7.0, rg=True)
    y = x * 1
    idx = INDEXES[index]
    if index == "mask":
        idx = lib.tensor(idx)
    n = {"slice": 1, "int": None, "list": 2, "mask": 2, "all": 3}[index]
    if value == "number":
        y[idx] = 5.0
    elif value == "leaf0d":
        y[idx] = v
    else:
        y[idx] = v * w[0] if n is None else v * w[:n]
    if loss == "square":
        out = (y * y).sum()
    elif loss == "weights":
        out = (y * w).sum()
    elif loss == "slice":
        out = (y[0:1] * w[0:1]).sum()
    else:
        out = (y / _t(lib, [0.0, 1.0, -0.0])).sum()
    inputs = [x, w, v]
    grads = lib.autograd.grad(out, inputs, create_graph=True, allow_unused=True)
    seen = [None if g is None else [_obs(g), g.requires_grad] for g in grads]
    for g in grads:
        if g is not None and g.requires_grad:
            seen.append(_obs(lib.autograd.grad(g.sum(), inputs, allow_unused=True, retain_graph=True)))
    return seen


PROGRAMS = list(itertools.product(INDEXES, VALUES, LOSSES))


@pytest.mark.parametrize("index, value, loss", PROGRAMS, ids=["-".join(p) for p in PROGRAMS])
def test_overwritten_gradient_matches_torch(index, value, loss):
    assert _program(tg, index, value, loss) == _program(torch, index, value, loss)


def test_issue_reproducer_gives_zero_not_nan():
    assert issue_reproducer(tg) == issue_reproducer(torch) == [0.0, 1.0]


def _through_view(lib, op):
    x = _t(lib, [1.0, 2.0, 3.0], rg=True)
    y = x * 1
    getattr(y[0:2], op)(2.0)
    (y / _t(lib, [0.0, 1.0, 1.0])).sum().backward()
    return _obs(x.grad)


@pytest.mark.parametrize("op", ["mul_", "add_", "fill_"])
def test_inplace_op_through_a_view_with_an_infinite_gradient(op):
    assert _through_view(tg, op) == _through_view(torch, op)


def test_whole_write_leaves_the_base_gradient_outside_the_graph():
    """The issue's allow_unused case: after fill_, the base's gradient is torch's zeros_like."""
    def run(lib):
        x = _t(lib, [1.0, 2.0], rg=True)
        w = _t(lib, [3.0, 4.0], rg=True)
        y = x * 1
        y.fill_(5.0)
        gx, gw = lib.autograd.grad((y * w).sum(), [x, w], create_graph=True)
        return _obs(lib.autograd.grad(gx.sum() + gw.sum(), [x, w], allow_unused=True))
    assert run(tg) == run(torch)
