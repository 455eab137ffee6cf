"""engine.gradcheck: gradcheck / gradgradcheck themselves (torch's semantics)."""
from __future__ import annotations

import warnings

import pytest

from threadgrad import engine, ops
from threadgrad.engine.gradcheck import gradcheck, gradgradcheck
from threadgrad.ops import activation


def f64(*vals: float) -> engine.Tensor:
    return engine.tensor(list(vals), dtype=engine.float64, requires_grad=True)


def test_passes_and_returns_true() -> None:
    x, y = f64(0.5, -1.0, 2.0), f64(1.5, 0.3, -0.2)
    assert gradcheck(lambda a, b: ops.mul(ops.sin(a), b), (x, y)) is True
    assert gradgradcheck(lambda a, b: ops.mul(ops.sin(a), b), (x, y)) is True


def test_single_tensor_input_and_non_tensor_args() -> None:
    x = f64(0.5, -1.0)
    assert gradcheck(ops.exp, x)
    assert gradcheck(lambda a, k: ops.pow(a, k), (x, 3))


def test_wrong_first_derivative_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = activation.SigmoidBackward0.backward
    monkeypatch.setattr(activation.SigmoidBackward0, "backward", lambda self, g: (ops.mul(real(self, g)[0], 2.0),))
    x = f64(0.1, 0.2)
    with pytest.raises(RuntimeError, match=r"Jacobian mismatch for output 0 with respect to input 0") as info:
        gradcheck(ops.sigmoid, (x,))
    assert "numerical" in str(info.value) and "analytical" in str(info.value)
    assert gradcheck(ops.sigmoid, (x,), raise_exception=False) is False


def test_wrong_second_derivative_is_caught() -> None:
    # A backward with the right values that is not itself differentiable: first derivatives
    # pass, second derivatives (through the detached 3x^2) come out zero and fail.
    class Cube(engine.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * (x * x * 3).detach()  # correct once, constant for the second derivative

    x = f64(0.5, -1.5)
    assert gradcheck(Cube.apply, (x,))
    assert gradgradcheck(Cube.apply, (x,), raise_exception=False) is False


def test_second_input_and_second_output_are_named() -> None:
    x, y = f64(1.0, 2.0), f64(3.0)
    fn = lambda a, b: (ops.mul(a, 2.0), ops.mul(a, b.detach()))  # noqa: E731 - b's gradient is lost
    with pytest.raises(RuntimeError, match="output 1 with respect to input 1"):
        gradcheck(fn, (x, y))


def test_integer_outputs_are_skipped() -> None:
    x = engine.tensor([[3.0, 1.0], [0.5, 2.0]], dtype=engine.float64, requires_grad=True)
    assert gradcheck(lambda a: ops.max(a, dim=1), (x,))  # (values, indices)


def test_float32_inputs_warn() -> None:
    x = engine.tensor([0.5, 1.0], requires_grad=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        gradcheck(ops.exp, (x,), eps=1e-3, atol=1e-2, rtol=1e-2)
    assert any("double precision" in str(m.message) for m in w)


def test_needs_an_input_that_requires_grad() -> None:
    with pytest.raises(ValueError):
        gradcheck(ops.exp, (engine.tensor([1.0], dtype=engine.float64),))


def test_gradgradcheck_with_given_grad_outputs() -> None:
    x = f64(0.3, -0.4)
    go = engine.tensor([1.0, -2.0], dtype=engine.float64, requires_grad=True)
    assert gradgradcheck(lambda a: ops.mul(ops.exp(a), a), (x,), grad_outputs=(go,))


def test_inputs_are_left_unchanged() -> None:
    x = f64(0.3, -0.4)
    before = x.detach().numpy().copy()
    gradgradcheck(ops.tanh, (x,))
    assert (x.detach().numpy() == before).all()
    assert x.grad is None
