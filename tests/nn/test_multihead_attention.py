"""nn.MultiheadAttention against torch 2.13's from the same weights (float64): outputs, the
attention weights (averaged over heads or not), and the gradients of the inputs and of every
parameter; torch's parameter names, repr and initialization rules; masks (boolean True is
masked out here, key_padding_mask, float masks, the is_causal hint), batch_first, unbatched
inputs, kdim/vdim, add_bias_kv, add_zero_attn, need_weights=False; and torch's errors.
Skipped without torch."""
from __future__ import annotations

import numpy as np
import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")

E = 8
_CAUSAL = np.triu(np.ones((5, 5), dtype=bool), 1)
_PADDING = np.zeros((3, 6), dtype=bool)
_PADDING[0, 4:] = True
_FLOAT = np.random.default_rng(3).standard_normal((5, 6))

CASES = {
    "self-attention": ({"embed_dim": E, "num_heads": 2}, [(5, 3, E)] * 3, {}, {}),
    "batch_first": ({"embed_dim": E, "num_heads": 2, "batch_first": True}, [(3, 5, E), (3, 6, E), (3, 6, E)], {}, {}),
    "kdim and vdim": ({"embed_dim": E, "num_heads": 4, "kdim": 5, "vdim": 3}, [(5, 3, E), (6, 3, 5), (6, 3, 3)], {}, {}),
    "causal mask with the hint": ({"embed_dim": E, "num_heads": 2}, [(5, 3, E)] * 3, {"is_causal": True},
                                  {"attn_mask": _CAUSAL}),
    "key padding, weights per head": ({"embed_dim": E, "num_heads": 2}, [(5, 3, E), (6, 3, E), (6, 3, E)],
                                      {"average_attn_weights": False}, {"key_padding_mask": _PADDING}),
    "no weights, both masks": ({"embed_dim": E, "num_heads": 2}, [(5, 3, E), (6, 3, E), (6, 3, E)],
                               {"need_weights": False}, {"key_padding_mask": _PADDING, "attn_mask": _FLOAT}),
    "bias_kv, zero_attn, no bias": ({"embed_dim": E, "num_heads": 2, "add_bias_kv": True, "add_zero_attn": True,
                                     "bias": False}, [(5, 3, E)] * 3, {}, {}),
    "unbatched": ({"embed_dim": E, "num_heads": 2}, [(5, E)] * 3, {}, {}),
}


def _pair(**kw):
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(**kw).double()
    ours = tg.nn.MultiheadAttention(**kw).double()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    assert [tuple(p.shape) for p in ours.parameters()] == [tuple(p.shape) for p in theirs.parameters()]
    ours.load_state_dict({k: tg.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")
@pytest.mark.parametrize("name", sorted(CASES))
def test_multihead_attention_matches_torch(name):
    kw, shapes, forward_kw, masks = CASES[name]
    ours, theirs = _pair(**kw)
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s) for s in shapes]
    got = []
    for lib, module in ((torch, theirs), (tg, ours)):
        inputs = [lib.tensor(a, requires_grad=True) for a in arrays]
        call_kw = dict(forward_kw, **{k: lib.tensor(v) for k, v in masks.items()})
        out, weights = module(*inputs, **call_kw)
        loss = (out * lib.tensor(np.arange(out.numel()).reshape(tuple(out.shape)) / 7.0)).sum()
        if weights is not None:
            loss = loss + (weights * weights).sum()
        loss.backward()
        got.append([out.detach().numpy(), None if weights is None else weights.detach().numpy()]
                   + [t.grad.numpy() for t in inputs] + [p.grad.numpy() for p in module.parameters()])
    for want, ours_value in zip(*got):
        assert (want is None) == (ours_value is None)
        if want is not None:
            np.testing.assert_allclose(ours_value, want, rtol=1e-9, atol=1e-11)


def test_initialization_follows_torchs_rules():
    m = tg.nn.MultiheadAttention(16, 4)
    bound = np.sqrt(6.0 / (16 + 48))  # xavier_uniform_ over the packed (48, 16) weight
    w = m.in_proj_weight.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert not m.in_proj_bias.detach().numpy().any() and not m.out_proj.bias.detach().numpy().any()


def test_errors_in_torchs_words():
    m = tg.nn.MultiheadAttention(E, 2)
    x = tg.randn(5, 3, E)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        m(x, x, x, is_causal=True)
    with pytest.raises(RuntimeError, match=r"The shape of the 2D attn_mask is torch.Size\(\[4, 5\]\), but should be "
                                           r"\(5, 5\)\."):
        m(x, x, x, attn_mask=tg.zeros(4, 5))
    with pytest.raises(RuntimeError, match=r"The shape of the 3D attn_mask is torch.Size\(\[2, 5, 5\]\), but should "
                                           r"be \(6, 5, 5\)\."):
        m(x, x, x, attn_mask=tg.zeros(2, 5, 5))
    with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
        tg.nn.MultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="embed_dim and num_heads must be greater than 0"):
        tg.nn.MultiheadAttention(0, 2)


def test_dropout_applies_in_training_only():
    m = tg.nn.MultiheadAttention(E, 2, dropout=0.5)
    x = tg.randn(5, 3, E)
    m.eval()
    a, _ = m(x, x, x)
    b, _ = m(x, x, x)
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    m.train()
    tg.manual_seed(1)
    c, w = m(x, x, x, average_attn_weights=False)
    assert (w.detach().numpy() == 0).any() and np.isfinite(c.detach().numpy()).all()
