"""PyTorch parity of first-order gradients taken with ``create_graph=True`` (relu, abs: Note
[Gradients linked to the output] in ops/activation.py), and torch's errors for bool operands
of sub, neg, abs and relu. Expected values are closed forms; expected names and errors are
torch 2.x's (checked against torch, which the tests do not import)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

from threadgrad import engine, ops
from threadgrad.engine.gradcheck import gradgradcheck


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


# --- bool operands: torch's errors ----------------------------------------------------------

def _bools() -> engine.Tensor:
    return engine.tensor([True, False])


TWO_BOOLS = "Subtraction, the `-` operator, with two bool tensors is not supported"
ONE_BOOL = "Subtraction, the `-` operator, with a bool tensor is not supported"

SUB_CASES: list[tuple[str, Callable[[], Any], str]] = [
    ("sub(bool, bool)", lambda: ops.sub(_bools(), _bools()), TWO_BOOLS),
    ("bool - bool", lambda: _bools() - _bools(), TWO_BOOLS),
    ("bool - True", lambda: _bools() - True, TWO_BOOLS),
    ("True - bool", lambda: True - _bools(), TWO_BOOLS),
    ("ops.sub(True, bool)", lambda: ops.sub(True, _bools()), TWO_BOOLS),
    ("bool - 1", lambda: _bools() - 1, ONE_BOOL),
    ("bool - 1.5", lambda: _bools() - 1.5, ONE_BOOL),
    ("1 - bool", lambda: 1 - _bools(), ONE_BOOL),
    ("float - bool", lambda: engine.tensor([1.0, 2.0]) - _bools(), ONE_BOOL),
    ("bool - int64", lambda: _bools() - engine.tensor([1, 2]), ONE_BOOL),
    ("float - True", lambda: engine.tensor([1.0, 2.0]) - True, ONE_BOOL),
    ("bool.sub_(bool)", lambda: _bools().sub_(_bools()), TWO_BOOLS),
    ("bool -= 1", lambda: _bools().__isub__(1), ONE_BOOL),
    ("float.sub_(bool)", lambda: engine.tensor([1.0, 2.0]).sub_(_bools()), ONE_BOOL),
    ("float.sub_(True)", lambda: engine.tensor([1.0, 2.0]).sub_(True), ONE_BOOL),
]


@pytest.mark.parametrize("desc,fn,fragment", SUB_CASES, ids=[c[0] for c in SUB_CASES])
def test_subtraction_with_a_bool_operand_raises_runtime_error_as_torch(desc: str, fn: Callable, fragment: str) -> None:
    with pytest.raises(RuntimeError) as info:
        fn()
    msg = str(info.value)
    assert fragment in msg
    assert msg.startswith("sub_: " if "sub_" in desc or "-=" in desc else "sub: ")  # the op
    assert "bool" in msg.split("(got operands of dtype ")[1].split(")")[0]  # the dtypes
    assert ("logical_xor" if fragment == TWO_BOOLS else "logical_not") in msg  # the fix


@pytest.mark.parametrize("fn", [lambda: ops.neg(_bools()), lambda: -_bools(), lambda: _bools().neg()],
                         ids=["ops.neg", "unary minus", "method"])
def test_neg_of_bool_raises_runtime_error_as_torch(fn: Callable) -> None:
    with pytest.raises(RuntimeError, match=r"^neg: Negation, the `-` operator, on a bool tensor is not supported "
                                           r"\(got dtype bool\).*logical_not"):
        fn()


@pytest.mark.parametrize("fn", [lambda: ops.abs(_bools()), lambda: abs(_bools()), lambda: _bools().abs()],
                         ids=["ops.abs", "builtin abs", "method"])
def test_abs_of_bool_raises_not_implemented_error_as_torch(fn: Callable) -> None:
    with pytest.raises(NotImplementedError, match=r"^abs: not implemented for dtype bool"):
        fn()


@pytest.mark.parametrize("fn", [lambda: ops.relu(_bools()), lambda: _bools().relu()], ids=["ops.relu", "method"])
def test_relu_of_bool_raises_runtime_error_as_torch(fn: Callable) -> None:
    with pytest.raises(RuntimeError,
                       match=r"^relu: Boolean inputs not supported for relu \(got a tensor of dtype bool\)"):
        fn()
