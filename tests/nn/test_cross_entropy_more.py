"""F.cross_entropy / nn.CrossEntropyLoss beyond plain class indices, against torch 2.13
(float64 values and gradients): class weights, ignore_index, label_smoothing (torch's
normalization of the smoothing term, weighted or not), class-probability targets (with weights
and smoothing), (N, C, d) inputs and an unbatched (C,) input, for every reduction. Skipped
without torch."""
from __future__ import annotations

import numpy as np
import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")

_rng = np.random.default_rng(0)
T = np.array([0, 2, 1, 2, 4])
T_IGNORE = np.array([0, -100, 1, 2, 4])
W = _rng.random(5) + 0.5
P = _rng.random((5, 5))
P /= P.sum(1, keepdims=True)
CASES = {
    "weight": ((5, 5), T, {"w": W}),
    "weight, ignore_index": ((5, 5), T_IGNORE, {"w": W}),
    "label_smoothing": ((5, 5), T, {"label_smoothing": 0.1}),
    "label_smoothing, ignore_index": ((5, 5), T_IGNORE, {"label_smoothing": 0.2}),
    "label_smoothing, weight, ignore_index": ((5, 5), T_IGNORE, {"label_smoothing": 0.2, "w": W}),
    "probabilities": ((5, 5), P, {}),
    "probabilities, weight, label_smoothing": ((5, 5), P, {"w": W, "label_smoothing": 0.3}),
    "(N, C, d), weight, label_smoothing": ((2, 5, 3), _rng.integers(0, 5, (2, 3)), {"w": W, "label_smoothing": 0.1}),
}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_cross_entropy_matches_torch(name, reduction):
    shape, target, kw = CASES[name]
    kw = dict(kw)
    w = kw.pop("w", None)
    x0 = np.random.default_rng(1).standard_normal(shape)
    got = []
    for lib in (torch, tg):
        x = lib.tensor(x0, requires_grad=True)
        extra = dict(kw, reduction=reduction, **({} if w is None else {"weight": lib.tensor(w)}))
        y = lib.nn.functional.cross_entropy(x, lib.tensor(target), **extra)
        (y * lib.tensor(np.arange(y.numel()).reshape(tuple(y.shape)) + 1.0)).sum().backward()
        got.append((y.detach().numpy(), x.grad.numpy()))
    for want, mine in zip(*got):
        np.testing.assert_allclose(mine, want, rtol=1e-10, atol=1e-12)


def test_unbatched_input_and_the_module():
    x0 = np.random.default_rng(2).standard_normal(5)
    got = []
    for lib in (torch, tg):
        x = lib.tensor(x0, requires_grad=True)
        loss = lib.nn.CrossEntropyLoss(weight=lib.tensor(W), label_smoothing=0.1)(x, lib.tensor(3))
        loss.backward()
        got.append((loss.item(), x.grad.numpy()))
    np.testing.assert_allclose(got[1][0], got[0][0], rtol=1e-12)
    np.testing.assert_allclose(got[1][1], got[0][1], rtol=1e-10)


def test_errors_in_torchs_words():
    x = tg.randn(3, 4)
    with pytest.raises(RuntimeError, match="weight tensor should be defined either for all 4 classes or no classes"):
        tg.nn.functional.cross_entropy(x, tg.tensor([0, 1, 2]), weight=tg.ones(3))
    with pytest.raises(RuntimeError, match="label_smoothing must be between 0.0 and 1.0"):
        tg.nn.functional.cross_entropy(x, tg.tensor([0, 1, 2]), label_smoothing=1.5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("kw", [{}, {"margin": 0.3}])
def test_cosine_embedding_loss_matches_torch(kw, reduction):
    rng = np.random.default_rng(3)
    a0, b0, t0 = rng.standard_normal((6, 4)), rng.standard_normal((6, 4)), np.array([1, -1, 1, -1, -1, 1])
    got = []
    for lib in (torch, tg):
        a, b = lib.tensor(a0, requires_grad=True), lib.tensor(b0, requires_grad=True)
        y = lib.nn.CosineEmbeddingLoss(reduction=reduction, **kw)(a, b, lib.tensor(t0))
        (y * lib.tensor(np.arange(y.numel()).reshape(tuple(y.shape)) + 1.0)).sum().backward()
        got.append((y.detach().numpy(), a.grad.numpy(), b.grad.numpy()))
    for want, mine in zip(*got):
        np.testing.assert_allclose(mine, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("kw", [{}, {"margin": 2.0, "p": 1.0, "swap": True}])
def test_triplet_margin_loss_matches_torch(kw, reduction):
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal((6, 4)) for _ in range(3)]
    got = []
    for lib in (torch, tg):
        ts = [lib.tensor(a, requires_grad=True) for a in arrays]
        y = lib.nn.TripletMarginLoss(reduction=reduction, **kw)(*ts)
        (y * lib.tensor(np.arange(y.numel()).reshape(tuple(y.shape)) + 1.0)).sum().backward()
        got.append([y.detach().numpy()] + [t.grad.numpy() for t in ts])
    for want, mine in zip(*got):
        np.testing.assert_allclose(mine, want, rtol=1e-10, atol=1e-12)
    assert repr(tg.nn.TripletMarginLoss()) == repr(torch.nn.TripletMarginLoss())
    assert repr(tg.nn.CosineEmbeddingLoss()) == repr(torch.nn.CosineEmbeddingLoss())
