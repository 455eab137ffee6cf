"""nn.RNN, LSTM, GRU and their cells against torch 2.13's from the same weights (float64):
outputs, final states, and the gradients of the input, of the initial states and of every
parameter; torch's parameter names and order, reprs, and errors. Cases: tanh and relu,
several layers, bidirectional, batch_first, LSTM's proj_size, no bias, unbatched inputs,
given and default initial states. Skipped without torch."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")

I, H = 5, 4
CASES = {
    "rnn": (lambda lib: lib.nn.RNN(I, H), (6, 3, I), None),
    "rnn relu, 2 layers, bidirectional, h0": (
        lambda lib: lib.nn.RNN(I, H, 2, nonlinearity="relu", bidirectional=True), (6, 3, I), [(4, 3, H)]),
    "lstm": (lambda lib: lib.nn.LSTM(I, H), (6, 3, I), None),
    "lstm 2 layers, batch_first, bidirectional, (h0, c0)": (
        lambda lib: lib.nn.LSTM(I, H, num_layers=2, batch_first=True, bidirectional=True), (3, 6, I),
        [(4, 3, H), (4, 3, H)]),
    "lstm proj_size": (lambda lib: lib.nn.LSTM(I, H, proj_size=2, num_layers=2), (6, 3, I), [(2, 3, 2), (2, 3, H)]),
    "gru 2 layers, no bias": (lambda lib: lib.nn.GRU(I, H, num_layers=2, bias=False), (6, 3, I), None),
    "gru bidirectional, unbatched": (lambda lib: lib.nn.GRU(I, H, bidirectional=True), (6, I), None),
    "lstm unbatched, (h0, c0)": (lambda lib: lib.nn.LSTM(I, H), (6, I), [(1, H), (1, H)]),
    "rnn cell": (lambda lib: lib.nn.RNNCell(I, H), (3, I), [(3, H)]),
    "rnn cell relu, no bias, unbatched": (lambda lib: lib.nn.RNNCell(I, H, nonlinearity="relu", bias=False), (I,),
                                          None),
    "lstm cell": (lambda lib: lib.nn.LSTMCell(I, H), (3, I), [(3, H), (3, H)]),
    "gru cell": (lambda lib: lib.nn.GRUCell(I, H), (3, I), [(3, H)]),
}


def _flat(out):
    if isinstance(out, tuple):
        return [t for o in out for t in _flat(o)]
    return [] if out is None else [out]


@pytest.mark.parametrize("name", sorted(CASES))
def test_recurrent_layers_match_torch(name):
    make, in_shape, hx_shapes = CASES[name]
    torch.manual_seed(0)
    theirs, ours = make(torch).double(), make(tg).double()
    assert repr(ours) == repr(theirs) and list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: tg.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(in_shape)] + [rng.standard_normal(s) for s in (hx_shapes or [])]
    lstm = "lstm" in name
    got = []
    for lib, m in ((torch, theirs), (tg, ours)):
        ts = [lib.tensor(a, requires_grad=True) for a in arrays]
        out = m(ts[0]) if hx_shapes is None else m(ts[0], tuple(ts[1:]) if lstm else ts[1])
        flat = _flat(out)
        sum((o * lib.tensor(np.arange(o.numel()).reshape(tuple(o.shape)) / 11.0)).sum() for o in flat).backward()
        got.append([o.detach().numpy() for o in flat] + [t.grad.numpy() for t in ts]
                   + [p.grad.numpy() for p in m.parameters()])
    assert len(got[0]) == len(got[1])
    for want, mine in zip(*got):
        np.testing.assert_allclose(mine, want, rtol=1e-9, atol=1e-11)


def test_initialization_bound_is_torchs():
    m = tg.nn.LSTM(10, 16, num_layers=2)
    stdv = 1 / np.sqrt(16)
    for p in m.parameters():
        a = np.abs(p.detach().numpy())
        assert a.max() <= stdv and a.max() > 0.8 * stdv


def test_errors_and_warnings_in_torchs_words():
    m = tg.nn.LSTM(5, 4)
    x = tg.randn(6, 3, 5)
    with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size \(1, 3, 4\), got \[1, 2, 4\]"):
        m(x, (tg.zeros(1, 2, 4), tg.zeros(1, 3, 4)))
    with pytest.raises(RuntimeError, match=r"Expected hidden\[1\] size \(1, 3, 4\), got \[1, 2, 4\]"):
        m(x, (tg.zeros(1, 3, 4), tg.zeros(1, 2, 4)))
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. Expected 5, got 4"):
        m(tg.randn(6, 3, 4))
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 3, 4\), got \[2, 3, 4\]"):
        tg.nn.GRU(5, 4)(x, tg.zeros(2, 3, 4))
    with pytest.raises(RuntimeError, match="input has inconsistent input_size: got 4 expected 5"):
        tg.nn.LSTMCell(5, 4)(tg.randn(3, 4))
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1, but got dropout=0.5 "
                                         "and num_layers=1"):
        tg.nn.LSTM(5, 4, dropout=0.5)
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        tg.nn.LSTM(5, 4, proj_size=4)


def test_dropout_between_layers_only_in_training():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = tg.nn.GRU(5, 4, num_layers=2, dropout=0.5)
    x = tg.randn(6, 3, 5)
    m.eval()
    a, _ = m(x)
    b, _ = m(x)
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    m.train()
    tg.manual_seed(0)
    c, _ = m(x)
    assert not np.allclose(c.detach().numpy(), a.detach().numpy())
