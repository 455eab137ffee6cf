"""tg.nn.init (torch's gains, fans, bounds and errors; the moments of each distribution) and
tg.nn.utils (clip_grad_norm_ / clip_grad_value_ / parameters_to_vector against torch)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import threadgrad as tg
from threadgrad import nn
from threadgrad.nn import init


def _torch():
    return pytest.importorskip("torch")


def test_calculate_gain_and_fans_match_torch():
    torch = _torch()
    for name, param in [("linear", None), ("conv2d", None), ("sigmoid", None), ("tanh", None), ("relu", None),
                        ("leaky_relu", None), ("leaky_relu", 0.2), ("selu", None)]:
        assert init.calculate_gain(name, param) == torch.nn.init.calculate_gain(name, param)
    for shape in [(3, 4), (8, 3, 5, 5), (2, 7, 3)]:
        assert init._calculate_fan_in_and_fan_out(tg.empty(*shape)) == \
            torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(*shape))
    for lib in (tg, torch):
        with pytest.raises(ValueError, match="Unsupported nonlinearity foo"):
            lib.nn.init.calculate_gain("foo")
        with pytest.raises(ValueError, match="Fan in and fan out can not be computed"):
            lib.nn.init.xavier_uniform_(lib.empty(3))
        with pytest.raises(ValueError, match="Mode fan_x not supported"):
            lib.nn.init.kaiming_uniform_(lib.empty(3, 3), mode="fan_x")
        with pytest.raises(ValueError, match="Only tensors with 2 dimensions are supported"):
            lib.nn.init.eye_(lib.empty(3))


@pytest.mark.parametrize("fn,kw,std,bound", [
    ("uniform_", dict(a=-2.0, b=1.0), math.sqrt(9 / 12), 2.0),
    ("normal_", dict(mean=0.0, std=0.5), 0.5, None),
    ("xavier_uniform_", dict(gain=2.0), 2.0 * math.sqrt(2.0 / (200 + 100)), 2.0 * math.sqrt(6.0 / 300)),
    ("xavier_normal_", dict(), math.sqrt(2.0 / 300), None),
    ("kaiming_uniform_", dict(a=math.sqrt(5)), 1 / math.sqrt(100) / math.sqrt(3), 1 / math.sqrt(100)),
    ("kaiming_normal_", dict(mode="fan_out", nonlinearity="relu"), math.sqrt(2.0) / math.sqrt(200), None),
    ("trunc_normal_", dict(std=0.02, a=-0.04, b=0.04), None, 0.04),
])
def test_initializer_moments(fn, kw, std, bound):
    tg.manual_seed(0)
    w = tg.empty(200, 100, requires_grad=True)
    out = getattr(init, fn)(w, **kw)
    assert out is w and w.requires_grad and w.is_leaf
    a = w.detach().numpy()
    if std is not None:
        assert abs(a.std() - std) < 0.03 * std
    if bound is not None:
        assert np.abs(a).max() <= bound + 1e-7
    if fn == "trunc_normal_":  # N(0, 0.02) cut at 2 std: the truncated normal's std
        torch = pytest.importorskip("torch")
        ref = torch.nn.init.trunc_normal_(torch.empty(200, 100), std=0.02, a=-0.04, b=0.04).numpy()
        assert abs(a.std() - ref.std()) < 0.03 * ref.std() and abs(a.mean()) < 1e-3


def test_constant_eye_dirac_orthogonal_and_generator():
    w = tg.empty(3, 4)
    assert init.constant_(w, 0.5).tolist()[0] == [0.5] * 4
    assert init.ones_(w).tolist()[1] == [1.0] * 4 and init.zeros_(w).tolist()[2] == [0.0] * 4
    assert init.eye_(tg.empty(2, 3)).tolist() == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    d = init.dirac_(tg.empty(2, 2, 3)).numpy()
    assert d[0, 0, 1] == 1 and d[1, 1, 1] == 1 and d.sum() == 2
    for shape in [(4, 6), (6, 4), (3, 2, 2)]:
        q = init.orthogonal_(tg.empty(*shape), gain=2.0).numpy().reshape(shape[0], -1)
        small = min(q.shape)
        gram = q @ q.T if q.shape[0] == small else q.T @ q
        np.testing.assert_allclose(gram, 4.0 * np.eye(small), atol=1e-5)
    g1, g2 = tg.Generator().manual_seed(5), tg.Generator().manual_seed(5)
    assert init.normal_(tg.empty(3), generator=g1).tolist() == init.normal_(tg.empty(3), generator=g2).tolist()
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        init.kaiming_uniform_(tg.empty(0, 3))


def _grads(lib, dtype):
    rng = np.random.default_rng(0)
    ps = [lib.zeros(*s, dtype=dtype, requires_grad=True) for s in [(3, 4), (5,), (2, 2)]]
    for p in ps:
        p.grad = lib.tensor(rng.standard_normal(p.shape) * 3, dtype=dtype)
    return ps


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.5, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    torch = _torch()
    ours, theirs = _grads(tg, tg.float64), _grads(torch, torch.float64)
    to = nn.utils.clip_grad_norm_(ours, max_norm, norm_type=norm_type, foreach=True)
    tt = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type=norm_type)
    assert to.item() == pytest.approx(tt.item(), rel=1e-12)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12)


def test_clip_grad_norm_nonfinite_and_single_tensor():
    torch = _torch()
    for lib in (tg, torch):
        p = lib.zeros(2, requires_grad=True)
        p.grad = lib.tensor([float("nan"), 1.0])
        with pytest.raises(RuntimeError, match="The total norm of order 2.0 for gradients from `parameters` is "
                                               "non-finite"):
            lib.nn.utils.clip_grad_norm_(p, 1.0, error_if_nonfinite=True)
        assert math.isnan(lib.nn.utils.clip_grad_norm_(p, 1.0).item())
        q = lib.tensor([3.0, 4.0], requires_grad=True)
        q.grad = lib.tensor([3.0, 4.0])
        assert lib.nn.utils.clip_grad_norm_(q, 1.0).item() == 5.0
        assert [round(v, 5) for v in q.grad.tolist()] == [0.6, 0.8]


def test_clip_grad_value_and_vectors_match_torch():
    torch = _torch()
    ours, theirs = _grads(tg, tg.float32), _grads(torch, torch.float32)
    nn.utils.clip_grad_value_(ours, 1.5)
    torch.nn.utils.clip_grad_value_(theirs, 1.5)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())
    m_o, m_t = nn.Linear(3, 2), torch.nn.Linear(3, 2)
    v_t = torch.nn.utils.parameters_to_vector(m_t.parameters())
    nn.utils.vector_to_parameters(tg.tensor(v_t.detach().numpy()), m_o.parameters())
    np.testing.assert_array_equal(nn.utils.parameters_to_vector(m_o.parameters()).detach().numpy(),
                                  v_t.detach().numpy())
    v = nn.utils.parameters_to_vector(m_o.parameters())
    (v * v).sum().backward()  # differentiable, as torch's
    np.testing.assert_allclose(m_o.weight.grad.numpy(), 2 * m_o.weight.detach().numpy())
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
        nn.utils.vector_to_parameters([1.0], m_o.parameters())


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_sequence_matches_torch(batch_first, side):
    torch = _torch()
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal((n, 2)) for n in (3, 1, 4)]
    ours = [tg.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    po = nn.utils.rnn.pad_sequence(ours, batch_first=batch_first, padding_value=-1.0, padding_side=side)
    pt = torch.nn.utils.rnn.pad_sequence(theirs, batch_first=batch_first, padding_value=-1.0, padding_side=side)
    np.testing.assert_array_equal(po.detach().numpy(), pt.detach().numpy())
    g = rng.standard_normal(tuple(pt.shape))
    po.backward(tg.tensor(g))
    pt.backward(torch.tensor(g))
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())
    for lib in (tg, torch):
        with pytest.raises(RuntimeError, match="Expected padding_side to be one of left or right"):
            lib.nn.utils.rnn.pad_sequence([lib.ones(1)], padding_side="middle")
