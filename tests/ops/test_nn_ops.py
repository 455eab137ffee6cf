"""nn ops: cross_entropy stability, conv2d against a naive loop, a small convnet that
trains, linear, dropout, mse_loss."""
from __future__ import annotations

import time

import numpy as np
import pytest

from threadgrad import engine, ops
from samples import _np_conv2d


def test_cross_entropy_is_stable_for_huge_logits() -> None:
    logits = engine.tensor([[1e30, 0.0, -1e30], [0.0, 1e4, 0.0], [5.0, 5.0, 5.0]], requires_grad=True)
    target = engine.tensor([0, 0, 2])
    loss = ops.cross_entropy(logits, target)
    expected = (0.0 + 1e4 + np.log(3.0)) / 3
    assert np.isfinite(loss.item()) and np.isclose(loss.item(), expected, rtol=1e-6)
    loss.backward()
    g = logits.grad.numpy()
    assert np.isfinite(g).all()
    assert np.allclose(g, [[0, 0, 0], [-1 / 3, 1 / 3, 0], [1 / 9, 1 / 9, -2 / 9]], atol=1e-6)


def test_cross_entropy_checks_targets() -> None:
    with pytest.raises(IndexError):
        ops.cross_entropy(engine.zeros(2, 3), engine.tensor([0, 3]))
    with pytest.raises(TypeError):
        ops.cross_entropy(engine.zeros(2, 3), engine.tensor([0.0, 1.0]))


@pytest.mark.parametrize("stride,padding", [(1, 0), (1, 2), (2, 1), (3, 0)])
def test_conv2d_matches_naive_loop(stride: int, padding: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 9, 8))
    w = rng.standard_normal((4, 3, 3, 2))
    b = rng.standard_normal(4)
    got = ops.conv2d(engine.tensor(x), engine.tensor(w), engine.tensor(b), stride=stride, padding=padding)
    np.testing.assert_allclose(got.numpy(), _np_conv2d(x, w, b, stride, padding), rtol=1e-10, atol=1e-10)


def test_conv2d_backward_matches_naive_loop_gradients() -> None:
    rng = np.random.default_rng(1)
    x = engine.tensor(rng.standard_normal((1, 2, 5, 5)), requires_grad=True)
    w = engine.tensor(rng.standard_normal((3, 2, 3, 3)), requires_grad=True)
    out = ops.conv2d(x, w, stride=2, padding=1)
    gout = rng.standard_normal(out.shape)
    out.backward(engine.tensor(gout))
    # d(sum(gout * conv(x, w)))/dw[o, c, i, j] = sum over positions of gout * patch value
    eps = 1e-6
    wn = w.detach().numpy().copy()
    num = np.zeros_like(wn)
    for idx in np.ndindex(wn.shape):
        wp, wm = wn.copy(), wn.copy()
        wp[idx] += eps
        wm[idx] -= eps
        xn = x.detach().numpy()
        num[idx] = ((_np_conv2d(xn, wp, None, 2, 1) - _np_conv2d(xn, wm, None, 2, 1)) * gout).sum() / (2 * eps)
    np.testing.assert_allclose(w.grad.numpy(), num, rtol=1e-5, atol=1e-6)


def test_small_convnet_trains_fast_on_8x8_images() -> None:
    engine.manual_seed(0)
    rng = np.random.default_rng(0)
    n = 64
    labels = rng.integers(0, 2, n)
    imgs = rng.standard_normal((n, 1, 8, 8)).astype(np.float32) * 0.3
    imgs[labels == 1, :, 2:6, 2:6] += 1.0  # class 1: a bright square in the middle
    x, y = engine.tensor(imgs), engine.tensor(labels)
    w1 = (engine.randn(4, 1, 3, 3) * 0.3).requires_grad_()
    b1 = engine.zeros(4, requires_grad=True)
    w2 = (engine.randn(2, 4 * 4 * 4) * 0.1).requires_grad_()
    b2 = engine.zeros(2, requires_grad=True)
    params = [w1, b1, w2, b2]
    start = time.perf_counter()
    losses = []
    for _ in range(30):
        h = ops.relu(ops.conv2d(x, w1, b1, stride=2, padding=1))          # (n, 4, 4, 4)
        logits = ops.linear(h.reshape(n, -1), w2, b2)
        loss = ops.cross_entropy(logits, y)
        for p in params:
            p.grad = None
        loss.backward()
        with engine.no_grad():
            for p in params:
                p.sub_(p.grad * 0.5)
        losses.append(loss.item())
    elapsed = time.perf_counter() - start
    assert losses[-1] < 0.5 * losses[0], losses
    assert w1.dtype == np.float32 and w1.grad.dtype == np.float32
    assert elapsed < 5.0, f"30 steps took {elapsed:.2f}s"


def test_linear_shapes_and_errors() -> None:
    x, w, b = engine.ones(5, 3), engine.ones(2, 3), engine.ones(2)
    assert ops.linear(x, w, b).shape == (5, 2)
    with pytest.raises(RuntimeError, match=r"weight"):
        ops.linear(x, engine.ones(3, 2))


def test_dropout_is_seeded_scaled_and_off_in_eval() -> None:
    x = engine.ones(1000, requires_grad=True)
    engine.manual_seed(3)
    a = ops.dropout(x, 0.25)
    engine.manual_seed(3)
    b = ops.dropout(x, 0.25)
    assert a.tolist() == b.tolist()
    vals = a.detach().numpy()
    assert np.all((vals == 0) | np.isclose(vals, 1 / 0.75))
    assert 0.15 < float((a.detach().numpy() == 0).mean()) < 0.35
    a.sum().backward()
    assert np.allclose(x.grad.numpy(), a.detach().numpy())
    assert ops.dropout(x, 0.5, training=False) is x
    assert ops.dropout(x, 1.0).sum().item() == 0.0
    with pytest.raises(ValueError):
        ops.dropout(x, 1.5)


def test_mse_loss_reductions() -> None:
    a, b = engine.tensor([1.0, 2.0]), engine.tensor([0.0, 4.0])
    assert ops.mse_loss(a, b).item() == 2.5
    assert ops.mse_loss(a, b, reduction="sum").item() == 5.0
    assert ops.mse_loss(a, b, reduction="none").tolist() == [1.0, 4.0]


def test_mse_loss_on_two_devices_names_itself_and_both_devices() -> None:
    x = engine.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="^mse_loss: expected all tensors to be on the same device.*cpu and virtual:1"):
        ops.mse_loss(x, engine.ones(3, device="virtual:1"))
