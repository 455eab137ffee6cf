"""F.scaled_dot_product_attention against torch 2.13's: values and gradients (float64), causal
masks top-left aligned, boolean and float masks (and either with is_causal), rows with
nowhere to attend, grouped-query heads, dropout. Skipped without torch."""
from __future__ import annotations

import numpy as np
import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")

_rng = np.random.default_rng(0)
_BOOL = _rng.random((4, 6)) > 0.4
_BOOL[2] = False  # a row with nowhere to attend: zeros, as torch's
_FLOAT = _rng.standard_normal((3, 4, 6))
_FLOAT[1, 1] = -np.inf

CASES = {
    "plain": ((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 7), {}),
    "causal, L < S": ((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 7), {"is_causal": True}),
    "causal, L > S": ((2, 3, 6, 5), (2, 3, 4, 5), (2, 3, 4, 7), {"is_causal": True}),
    "bool mask with an empty row": ((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 7), {"mask": _BOOL}),
    "float mask with a -inf row, scale": ((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 7), {"mask": _FLOAT, "scale": 0.3}),
    "2-d, causal": ((4, 5), (6, 5), (6, 7), {"is_causal": True}),
    "grouped-query heads": ((2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 7), {"enable_gqa": True}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_scaled_dot_product_attention_matches_torch(name):
    qs, ks, vs, kw = CASES[name]
    kw = dict(kw)
    mask = kw.pop("mask", None)
    rng = np.random.default_rng(1)
    q0, k0, v0 = (rng.standard_normal(s) for s in (qs, ks, vs))
    got = []
    for lib in (torch, tg):
        q, k, v = (lib.tensor(a, requires_grad=True) for a in (q0, k0, v0))
        y = lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else lib.tensor(mask), **kw)
        w = lib.tensor(np.arange(y.numel(), dtype=np.float64).reshape(tuple(y.shape)) / 10)
        (y * w).sum().backward()
        got.append([y.detach().numpy(), q.grad.numpy(), k.grad.numpy(), v.grad.numpy()])
    for want, ours in zip(*got):
        assert np.isfinite(ours).all()
        np.testing.assert_allclose(ours, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_a_mask_with_is_causal_combines_them_as_torchs_fused_kernels(kind):
    # torch's fused cpu kernel combines the two (its math path, taken in some cases with
    # gradients, refuses them instead): threadgrad always combines; compared here with torch
    # given the combined mask itself
    rng = np.random.default_rng(2)
    q0, k0 = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 3, 6, 5))
    band = np.tril(np.ones((4, 6), dtype=bool))
    if kind == "bool":
        mask = rng.random((4, 6)) > 0.4
        mask[3] = False
        combined = mask & band
    else:
        mask = rng.standard_normal((4, 6))
        combined = np.where(band, mask, -np.inf)
    ours = tg.nn.functional.scaled_dot_product_attention(tg.tensor(q0), tg.tensor(k0), tg.tensor(k0),
                                                         attn_mask=tg.tensor(mask), is_causal=True)
    t = torch.tensor
    want = torch.nn.functional.scaled_dot_product_attention(t(q0), t(k0), t(k0), attn_mask=t(combined))
    also = torch.nn.functional.scaled_dot_product_attention(t(q0), t(k0), t(k0), attn_mask=t(mask), is_causal=True)
    np.testing.assert_allclose(ours.numpy(), want.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(also.numpy(), want.numpy(), rtol=1e-12, atol=1e-14)


def test_dropout_on_the_weights_is_the_dropout_op_with_the_same_seed():
    q, k, v = (tg.randn(2, 3, 4) for _ in range(3))
    tg.manual_seed(7)
    y = tg.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    tg.manual_seed(7)
    weights = tg.softmax(q @ k.transpose(-2, -1) / 2.0, -1)
    want = tg.nn.functional.dropout(weights, 0.5, True) @ v
    np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=1e-6)
    assert not np.allclose(y.numpy(), (weights @ v).numpy())  # something was dropped
