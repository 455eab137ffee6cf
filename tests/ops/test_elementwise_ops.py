"""Elementwise ops and the rules every op follows: broadcasting, dtypes, devices, node names,
Tensor operators and methods."""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import engine, ops


def test_broadcast_gradients_are_summed_back() -> None:
    a = engine.ones(2, 1, 3, requires_grad=True)
    b = engine.ones(4, 1, requires_grad=True)
    (a * b).sum().backward()
    assert a.grad.shape == (2, 1, 3) and a.grad.tolist() == [[[4.0] * 3]] * 2
    assert b.grad.shape == (4, 1) and b.grad.tolist() == [[6.0]] * 4


@pytest.mark.parametrize("op", [ops.add, ops.sub, ops.mul, ops.div, ops.pow, ops.maximum, ops.minimum])
def test_float32_with_python_numbers_stays_float32(op) -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    assert op(x, 2.5).dtype == np.float32
    assert op(2.5, x).dtype == np.float32
    assert op(x, 2).dtype == np.float32


@pytest.mark.parametrize("op", [ops.add, ops.sub, ops.mul, ops.div, ops.pow, ops.maximum, ops.minimum])
@pytest.mark.parametrize("scalar", [np.float64(2.5), np.float32(2.5), np.int64(2)], ids=["f64", "f32", "i64"])
def test_float32_with_numpy_scalars_stays_float32_and_so_does_its_gradient(op, scalar) -> None:
    """A numpy scalar is a number, as in torch: it does not promote under numpy's rules."""
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = op(x, scalar)
    assert y.dtype == np.float32
    y.sum().backward()
    assert x.grad.dtype == np.float32


def test_integer_base_with_a_float_exponent_gives_float32() -> None:
    i64 = engine.tensor([4, 9])
    assert (i64 ** 0.5).dtype == np.float32 and (i64 ** 0.5).tolist() == [2.0, 3.0]
    assert (i64 ** np.float64(0.5)).dtype == np.float32
    assert (i64 ** 2).dtype == np.int64 and (i64 ** 2).tolist() == [16, 81]


def test_torch_promotion_rules() -> None:
    f32 = engine.ones(2)
    f64_0d = engine.tensor(2.0, dtype=engine.float64)
    i64 = engine.tensor([1, 2])
    assert (f32 + f64_0d).dtype == np.float32            # dimensioned wins within a category
    assert (f32 + engine.ones(2, dtype=engine.float64)).dtype == np.float64
    assert (i64 + f32).dtype == np.float32               # numpy would give float64
    assert (i64 * 2).dtype == np.int64
    assert (i64 / 2).dtype == np.float32 and (i64 + 0.5).dtype == np.float32
    assert ops.exp(i64).dtype == np.float32


def test_gradient_dtype_follows_each_input() -> None:
    a = engine.ones(2, requires_grad=True)
    b = engine.ones(2, dtype=engine.float64, requires_grad=True)
    (a * b).sum().backward()
    assert a.grad.dtype == np.float32 and b.grad.dtype == np.float64


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "matmul"])
def test_different_devices_raise_naming_both(name: str) -> None:
    a = engine.ones(2, 2)
    b = engine.ones(2, 2, device="virtual:1")
    with pytest.raises(RuntimeError, match=r"cpu.*virtual:1|virtual:1.*cpu"):
        ops.REGISTRY[name](a, b)


def test_comparisons_are_bool_without_grad() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for r in (x < 2, x <= 2, x > 2, x >= 2, x == 2, x != 2):
        assert r.dtype == np.bool_ and not r.requires_grad and r.grad_fn is None
    assert (x > 1.5).tolist() == [False, True, True]


def test_node_names_are_pytorch_style() -> None:
    x = engine.ones(2, 2, requires_grad=True)
    names = {
        "AddBackward0": x + 1, "MulBackward0": x * 2, "DivBackward0": x / 2, "NegBackward0": -x,
        "SigmoidBackward0": x.sigmoid(), "MaximumBackward0": ops.maximum(x, 0.5),
        "MinimumBackward0": ops.minimum(x, 0.5), "CatBackward0": ops.cat([x, x]),
        "SqrtBackward0": x.sqrt(), "AbsBackward0": abs(x), "ClampBackward1": x.clamp(0, 1),
        "WhereBackward0": ops.where(x > 0, x, 0.0), "GeluBackward0": ops.gelu(x),
        "SoftmaxBackward0": x.softmax(1), "LogSoftmaxBackward0": x.log_softmax(1),
        "LogsumexpBackward0": ops.logsumexp(x, 1), "MmBackward0": x @ x, "PowBackward0": x ** 2,
        "PowBackward1": x ** x, "ExpBackward0": x.exp(), "TanhBackward0": x.tanh(),
    }
    for name, t in names.items():
        assert t.grad_fn.name() == name


def test_tensor_methods_from_the_api() -> None:
    x = engine.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    for m in ["exp", "sigmoid", "relu", "tanh", "sin", "cos", "abs"]:
        assert np.allclose(getattr(x, m)().tolist(), getattr(ops, m)(x).tolist())
    assert x.abs().log().shape == (2, 2) and x.abs().sqrt().shape == (2, 2)
    assert x.pow(2).tolist() == (x ** 2).tolist()
    assert x.clamp(min=0).tolist() == [[0.5, 0.0], [2.0, 0.25]]
    assert x.clamp(max=0.5).tolist() == [[0.5, -1.0], [0.5, 0.25]]
    assert x.matmul(x).shape == (2, 2) and (2 * x @ x).shape == (2, 2)
    assert abs(x).tolist() == [[0.5, 1.0], [2.0, 0.25]]
    assert x.max().item() == 2.0 and x.min(dim=0).values.tolist() == [0.5, -1.0]
    assert (1 - x).tolist() == [[0.5, 2.0], [-1.0, 0.75]] and (1 / x).shape == (2, 2) and (2 ** x).shape == (2, 2)


def test_maximum_ties_split_the_gradient() -> None:
    a = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = engine.tensor([1.0, 5.0, 0.0], requires_grad=True)
    ops.maximum(a, b).sum().backward()
    assert a.grad.tolist() == [0.5, 0.0, 1.0] and b.grad.tolist() == [0.5, 1.0, 0.0]


def test_clamp_gradient_at_bounds_goes_to_input() -> None:
    x = engine.tensor([-1.0, 0.0, 0.5, 1.0, 2.0], requires_grad=True)
    x.clamp(0.0, 1.0).sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]


def test_relu_and_abs_at_zero_have_zero_gradient() -> None:
    x = engine.tensor([0.0, 1.0], requires_grad=True)
    (ops.relu(x) + ops.abs(x)).sum().backward()
    assert x.grad.tolist() == [0.0, 2.0]


def test_sigmoid_and_softplus_are_stable() -> None:
    x = engine.tensor([-1000.0, 0.0, 1000.0])
    assert ops.sigmoid(x).tolist() == [0.0, 0.5, 1.0]
    assert np.allclose(ops.softplus(x).tolist(), [0.0, np.log(2.0), 1000.0])


def test_gelu_exact_and_tanh() -> None:
    x = engine.tensor([-2.0, 0.0, 1.0], dtype=engine.float64)
    exact = ops.gelu(x).numpy()
    approx = ops.gelu(x, approximate="tanh").numpy()
    assert np.allclose(exact, [-0.04550026389635842, 0.0, 0.8413447460685429], atol=1e-12)
    assert np.allclose(approx, exact, atol=1e-3)
    with pytest.raises(RuntimeError, match="approximate argument must be either 'none' or 'tanh', got 'fast'"):
        ops.gelu(x, approximate="fast")  # torch's exception type


def test_where_requires_bool_condition() -> None:
    with pytest.raises(RuntimeError, match="condition must be a bool tensor"):  # torch's exception type
        ops.where(engine.ones(2), engine.ones(2), engine.zeros(2))


@pytest.mark.parametrize("needs", ["matrix", "vector"])
def test_matmul_with_a_1d_operand_when_only_one_side_requires_grad(needs: str) -> None:
    """The operand that needs no gradient is not saved: the backward must not read it."""
    m = engine.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], requires_grad=needs == "matrix")
    v = engine.tensor([1.0, -1.0], requires_grad=needs == "vector")
    ops.matmul(m, v).sum().backward()
    if needs == "vector":
        assert v.grad.tolist() == [9.0, 12.0] and m.grad is None
    else:
        assert m.grad.tolist() == [[1.0, -1.0]] * 3 and v.grad is None


def test_sigmoid_and_logsumexp_promote_integers_to_float32_as_torch() -> None:
    i64 = engine.tensor([0, 2])
    s = ops.sigmoid(i64)
    assert s.dtype == np.float32 and s.tolist() == pytest.approx([0.5, 1 / (1 + np.exp(-2.0))])
    lse = ops.logsumexp(i64, 0)
    assert lse.dtype == np.float32 and lse.item() == pytest.approx(np.log(1 + np.exp(2.0)))


def test_pow_gradients_at_zero_follow_torch() -> None:
    """d/da is 0 where the exponent is 0 (0 * 0**-1 would be nan); d/db is 0 where a == 0 and
    b >= 0, and a**b * log(0) = -inf where b < 0 (torch 2.13's values)."""
    a = engine.tensor([0.0, 0.0, 0.0, 2.0], dtype=engine.float64, requires_grad=True)
    b = engine.tensor([0.0, -1.0, 2.0, 0.0], dtype=engine.float64, requires_grad=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        (a ** b).sum().backward()
    assert a.grad.tolist() == [0.0, -np.inf, 0.0, 0.0]
    assert b.grad.tolist() == [0.0, -np.inf, 0.0, pytest.approx(np.log(2.0))]


def test_where_with_two_numbers_takes_torch_default_dtypes() -> None:
    c = engine.tensor([True, False])
    assert ops.where(c, 1.0, 0.0).dtype == np.float32 and ops.where(c, 1.0, 0.0).tolist() == [1.0, 0.0]
    assert ops.where(c, 1, 0).dtype == np.int64
    assert ops.where(c, 1, 0.5).tolist() == [1.0, 0.5]


@pytest.mark.parametrize("name,expected,grad_a", [("max", [3.0, 5.0], [0.0, 1.0]), ("min", [1.0, 2.0], [1.0, 0.0])])
def test_max_and_min_of_two_tensors_are_maximum_and_minimum(name, expected, grad_a) -> None:
    a = engine.tensor([1.0, 5.0], requires_grad=True)
    b = engine.tensor([3.0, 2.0])
    y = getattr(ops, name)(a, b)
    assert y.tolist() == expected and getattr(a, name)(b).tolist() == expected
    y.sum().backward()
    assert a.grad.tolist() == grad_a


def test_a_bool_tensor_with_numbers_promotes_as_torch() -> None:
    c = engine.tensor([True, False])
    assert (c + 2).dtype == np.int64 and (c + 2).tolist() == [3, 2]
    assert (c * 1.5).dtype == np.float32 and (c * 1.5).tolist() == [1.5, 0.0]
    assert (c + True).dtype == np.bool_
    assert ops.where(c, True, 2).dtype == np.int64 and ops.where(c, True, 2).tolist() == [1, 2]
    assert (c ** 2).dtype == np.int64


@pytest.mark.parametrize("exponent", [np.float32(2.0), np.int64(2), np.float64(2.0), 2, 2.0])
def test_a_numpy_scalar_exponent_is_a_number_exponent(exponent) -> None:
    x = engine.tensor([1.0, 3.0], requires_grad=True)
    y = x ** exponent
    assert y.grad_fn.name() == "PowBackward0" and y.dtype == np.float32
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 6.0]


def test_where_with_numpy_scalars_takes_them_as_numbers() -> None:
    c = engine.tensor([True, False])
    assert ops.where(c, np.float64(1.0), 0.0).dtype == np.float32
    assert ops.where(c, np.int32(1), 0).dtype == np.int64
