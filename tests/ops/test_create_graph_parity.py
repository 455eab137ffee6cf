"""PyTorch parity of first-order gradients taken with ``create_graph=True`` (relu, abs: Note
[Gradients linked to the output] in ops/activation.py). Expected values are closed forms;
expected names are torch 2.x's (checked against torch, which the tests do not import)."""
from __future__ import annotations

import numpy as np

import engine
import ops
from engine.gradcheck import gradgradcheck


def _x() -> engine.Tensor:
    return engine.tensor([1.5, -2.0, 0.0, 0.25], dtype=engine.float64, requires_grad=True)


# --- relu: ThresholdBackwardBackward0 ---------------------------------------------------------

def test_relu_gradient_of_a_sum_requires_grad_and_backwards_to_zeros() -> None:
    """torch: grad(relu(x).sum(), x, create_graph=True) is threshold_backward(ones, result):
    it requires grad through relu's output, so a second backward runs and gives zeros."""
    x = _x()
    y = ops.relu(x)
    (g,) = engine.grad(ops.sum(y), x, create_graph=True)
    assert g.tolist() == [1.0, 0.0, 0.0, 1.0]
    assert g.requires_grad
    assert g.grad_fn.name() == "ThresholdBackwardBackward0"
    (ng, _), (ny, _) = g.grad_fn.next_functions
    assert ng is None and ny is y.grad_fn  # edges to the grad (none needed) and to relu's output
    (gg,) = engine.grad(ops.sum(g), x, allow_unused=True, retain_graph=True)
    assert gg is not None and gg.tolist() == [0.0, 0.0, 0.0, 0.0]  # zeros, not None, as torch
    ops.sum(g).backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_relu_double_and_triple_backward_follow_torchs_formulas() -> None:
    """d/dg of threshold_backward(g, y) is the mask again (its own node), d/dy is zero."""
    x = _x()
    go = engine.tensor([2.0, 3.0, 5.0, -7.0], dtype=engine.float64, requires_grad=True)
    (g,) = engine.grad(ops.relu(x), x, go, create_graph=True)
    assert g.grad_fn.name() == "ThresholdBackwardBackward0"
    assert g.tolist() == [2.0, 0.0, 0.0, -7.0]
    w = engine.tensor([0.5, 0.25, 4.0, 2.0], dtype=engine.float64, requires_grad=True)
    dx, dgo = engine.grad(g, (x, go), w, create_graph=True)
    assert dx.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert dgo.tolist() == [0.5, 0.0, 0.0, 2.0]  # w * (relu(x) > 0)
    assert dgo.grad_fn.name() == "ThresholdBackwardBackward0"  # third order: the same node again
    (dw,) = engine.grad(ops.sum(dgo), w)
    assert dw.tolist() == [1.0, 0.0, 0.0, 1.0]
    assert gradgradcheck(lambda a: ops.mul(ops.relu(a), a), (_x_away_from_kinks(),))


def _x_away_from_kinks() -> engine.Tensor:
    return engine.tensor([1.5, -2.0, 0.75, -0.25], dtype=engine.float64, requires_grad=True)


def test_relu_float32_gradient_under_create_graph_stays_float32() -> None:
    x = engine.tensor([1.0, -1.0], requires_grad=True)
    (g,) = engine.grad(ops.sum(ops.relu(x)), x, create_graph=True)
    assert g.dtype == np.float32 and g.grad_fn.name() == "ThresholdBackwardBackward0"
    (gg,) = engine.grad(ops.sum(g), x)
    assert gg.dtype == np.float32 and gg.tolist() == [0.0, 0.0]


# --- abs: MulBackward0 of SgnBackward0 --------------------------------------------------------

def test_abs_gradient_of_a_sum_requires_grad_through_sgn_and_backwards_to_zeros() -> None:
    """torch: abs's gradient is g * x.sgn(); sgn's node (derivative zero) links it to x."""
    x = _x()
    (g,) = engine.grad(ops.sum(ops.abs(x)), x, create_graph=True)
    assert g.tolist() == [1.0, -1.0, 0.0, 1.0]
    assert g.requires_grad
    assert g.grad_fn.name() == "MulBackward0"
    (ng, _), (nsgn, _) = g.grad_fn.next_functions
    assert ng is None and nsgn.name() == "SgnBackward0"
    assert nsgn.next_functions[0][0].variable is x
    (gg,) = engine.grad(ops.sum(g), x, allow_unused=True, retain_graph=True)
    assert gg is not None and gg.tolist() == [0.0, 0.0, 0.0, 0.0]
    ops.sum(g).backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_abs_double_backward_gives_zeros_for_x_and_the_sign_for_the_grad() -> None:
    x = _x()
    go = engine.tensor([2.0, 3.0, 5.0, -7.0], dtype=engine.float64, requires_grad=True)
    (g,) = engine.grad(ops.abs(x), x, go, create_graph=True)
    assert g.tolist() == [2.0, -3.0, 0.0, -7.0]
    dx, dgo = engine.grad(ops.sum(g), (x, go))
    assert dx is not None and dx.tolist() == [0.0, 0.0, 0.0, 0.0]  # torch: zeros (None before)
    assert dgo.tolist() == [1.0, -1.0, 0.0, 1.0]
    assert gradgradcheck(lambda a: ops.mul(ops.abs(a), a), (_x_away_from_kinks(),))
