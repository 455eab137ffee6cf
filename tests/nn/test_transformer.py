"""nn.Transformer and its layers against torch 2.13's from the same weights (float64, dropout
0): outputs and every gradient, post-norm and norm_first, relu and gelu, masks and key padding
masks, batch_first; torch's parameter names, repr, initialization warning for nested tensors,
generate_square_subsequent_mask, the zeros torch's nested-tensor path gives at padded positions
in inference, and its errors. Skipped without torch."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")

D, H, FF = 8, 2, 16


def _pair(make):
    """The same module in both libraries, threadgrad's holding torch's weights."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = make(torch).double()
        ours = make(tg).double()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    ours.load_state_dict({k: tg.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def _compare(ours, theirs, arrays, call):
    got = []
    for lib, module in ((torch, theirs), (tg, ours)):
        inputs = [lib.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
        out = call(lib, module, inputs)
        (out * lib.tensor(np.arange(out.numel()).reshape(tuple(out.shape)) / 9.0)).sum().backward()
        got.append([out.detach().numpy()] + [t.grad.numpy() for t in inputs if t.requires_grad]
                   + [p.grad.numpy() for p in module.parameters()])
    for want, ours_value in zip(*got):
        np.testing.assert_allclose(ours_value, want, rtol=1e-9, atol=1e-11)


_rng = np.random.default_rng(1)
_PAD = np.zeros((3, 6), dtype=bool)
_PAD[1, 4:] = True


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_torch(norm_first, activation):
    ours, theirs = _pair(lambda lib: lib.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation=activation,
                                                                    norm_first=norm_first))
    _compare(ours, theirs, [_rng.standard_normal((6, 3, D)), _PAD],
             lambda lib, m, t: m(t[0], src_key_padding_mask=t[1]))


def test_encoder_with_a_causal_mask_and_final_norm_matches_torch():
    def make(lib):
        layer = lib.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True)
        return lib.nn.TransformerEncoder(layer, 2, norm=lib.nn.LayerNorm(D))

    ours, theirs = _pair(make)
    assert tg.nn.Transformer.generate_square_subsequent_mask(6).tolist() == \
        torch.nn.Transformer.generate_square_subsequent_mask(6).tolist()
    _compare(ours, theirs, [_rng.standard_normal((3, 6, D))],
             lambda lib, m, t: m(t[0], mask=lib.nn.Transformer.generate_square_subsequent_mask(6, dtype=lib.float64)))


def test_decoder_layer_matches_torch():
    ours, theirs = _pair(lambda lib: lib.nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, activation="gelu"))
    causal = np.triu(np.ones((4, 4), dtype=bool), 1)
    _compare(ours, theirs, [_rng.standard_normal((4, 3, D)), _rng.standard_normal((6, 3, D)), causal, _PAD],
             lambda lib, m, t: m(t[0], t[1], tgt_mask=t[2], memory_key_padding_mask=t[3]))


@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_matches_torch(batch_first):
    ours, theirs = _pair(lambda lib: lib.nn.Transformer(D, H, 2, 2, FF, dropout=0.0, batch_first=batch_first))
    src = _rng.standard_normal((3, 6, D) if batch_first else (6, 3, D))
    tgt = _rng.standard_normal((3, 4, D) if batch_first else (4, 3, D))
    _compare(ours, theirs, [src, tgt],
             lambda lib, m, t: m(t[0], t[1], tgt_mask=lib.nn.Transformer.generate_square_subsequent_mask(
                 4, dtype=lib.float64)))


def test_the_nested_tensor_warning_is_torchs():
    for lib in (torch, tg):
        with pytest.warns(UserWarning, match=r"enable_nested_tensor is True, but self.use_nested_tensor is False "
                                             r"because encoder_layer.self_attn.batch_first was not True"):
            lib.nn.TransformerEncoder(lib.nn.TransformerEncoderLayer(D, H, FF), 1)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_inference_with_padding_gives_torchs_zeros_at_padded_positions():
    def make(lib):
        layer = lib.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True)
        return lib.nn.TransformerEncoder(layer, 2, norm=lib.nn.LayerNorm(D))

    ours, theirs = _pair(make)
    ours.eval()
    theirs.eval()
    src = _rng.standard_normal((3, 6, D))
    with torch.no_grad():
        want = theirs(torch.tensor(src), src_key_padding_mask=torch.tensor(_PAD)).numpy()
    with tg.no_grad():
        got = ours(tg.tensor(src), src_key_padding_mask=tg.tensor(_PAD)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


def test_transformer_errors_in_torchs_words():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = tg.nn.Transformer(D, H, 1, 1, FF)
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        m(tg.randn(5, 3, D), tg.randn(4, 2, D))
    with pytest.raises(RuntimeError, match="the feature number of src and tgt must be equal to d_model"):
        m(tg.randn(5, 3, D), tg.randn(4, 3, D + 1))
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        tg.nn.TransformerEncoderLayer(D, H, activation="tanh")
