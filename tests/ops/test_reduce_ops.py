"""Reductions: max/min ties and indices, logsumexp stability, softmax family."""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import engine, ops


def test_max_without_dim_shares_ties_equally() -> None:
    x = engine.tensor([1.0, 3.0, 3.0, 2.0, 3.0], requires_grad=True)
    m = x.max()
    assert m.shape == () and m.item() == 3.0 and m.grad_fn.name() == "MaxBackward1"
    m.backward()
    assert np.allclose(x.grad.numpy(), [0, 1 / 3, 1 / 3, 0, 1 / 3])


def test_min_without_dim_ties() -> None:
    x = engine.tensor([[0.0, 5.0], [0.0, 1.0]], requires_grad=True)
    ops.min(x).backward()
    assert x.grad.tolist() == [[0.5, 0.0], [0.5, 0.0]]


def test_max_with_dim_sends_gradient_to_returned_index() -> None:
    x = engine.tensor([[2.0, 2.0, 1.0], [0.0, 4.0, 4.0]], requires_grad=True)
    values, indices = x.max(dim=1)
    assert values.tolist() == [2.0, 4.0]
    assert indices.tolist() == [0, 1] and indices.dtype == np.int64 and not indices.requires_grad
    assert values.grad_fn.name() == "MaxBackward0"
    values.sum().backward()
    assert x.grad.tolist() == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    r = ops.max(x, dim=-1, keepdim=True)
    assert r.values.shape == (2, 1) and r.indices.shape == (2, 1)


def test_logsumexp_is_stable() -> None:
    x = engine.tensor([[1000.0, 1000.0], [-1000.0, -1000.0]], requires_grad=True)
    y = ops.logsumexp(x, dim=1)
    assert np.allclose(y.tolist(), [1000 + np.log(2), -1000 + np.log(2)])
    y.sum().backward()
    assert np.allclose(x.grad.numpy(), 0.5, atol=1e-4)  # float32 rounding of the result near 1000
    inf = engine.tensor([float("-inf"), float("-inf")])
    assert ops.logsumexp(inf, 0).item() == float("-inf")


def test_softmax_and_log_softmax_are_stable() -> None:
    x = engine.tensor([[1e4, 0.0, -1e4]])
    assert np.allclose(ops.softmax(x, 1).tolist(), [[1.0, 0.0, 0.0]])
    ls = ops.log_softmax(x, dim=-1)
    assert np.isfinite(ls.numpy()).all() and np.allclose(ls.tolist(), [[0.0, -1e4, -2e4]])
    assert x.softmax(1).shape == x.log_softmax(1).shape == (1, 3)


def test_sum_mean_methods_with_dims() -> None:
    x = engine.arange(24, dtype=engine.float32).reshape(2, 3, 4)
    assert x.sum(dim=(0, 2)).tolist() == x.numpy().sum(axis=(0, 2)).tolist()
    assert x.mean(-1, keepdim=True).shape == (2, 3, 1)
    assert x.sum().dtype == np.float32 and x.mean().shape == ()


def test_max_and_min_of_a_tensor_with_nans_send_the_gradient_to_the_nans() -> None:
    """As torch's evenly_distribute_backward: a NaN result came from the NaNs, which share it."""
    nan = float("nan")
    for op in (ops.max, ops.min):
        x = engine.tensor([1.0, nan, 3.0, nan], requires_grad=True)
        op(x).backward()
        assert x.grad.tolist() == [0.0, 0.5, 0.0, 0.5]


@pytest.mark.parametrize("op", [ops.sum, ops.mean, ops.logsumexp])
@pytest.mark.parametrize("dim", [(), []])
def test_an_empty_dim_list_reduces_every_dim(op, dim) -> None:
    x = engine.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    y = op(x, dim=dim)
    assert y.shape == ()
    assert y.item() == pytest.approx(op(x, dim=(0, 1)).item())
    y.backward()
    assert x.grad.shape == (2, 3)


@pytest.mark.parametrize("op", [ops.sum, ops.mean, ops.logsumexp])
def test_a_dim_given_twice_raises(op) -> None:
    x = engine.zeros(2, 3)
    with pytest.raises(RuntimeError, match="dim 0 appears multiple times in the list of dims"):
        op(x, dim=(0, -2))
