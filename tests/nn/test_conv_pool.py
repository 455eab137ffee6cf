"""nn.Conv2d, F.max_pool2d / F.avg_pool2d and nn.MaxPool2d / nn.AvgPool2d against torch 2.13's
(float64): values and gradients (padding, strides, ceil_mode, count_include_pad,
divisor_override, return_indices, ties and NaN), reprs, state_dict keys, initialization
bounds, and torch's errors. Skipped without torch."""
from __future__ import annotations

import math

import numpy as np
import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")

POOLS = [
    ("max_pool2d", (2, 3, 6, 7), {"kernel_size": 2}),
    ("max_pool2d", (2, 3, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ("max_pool2d", (2, 3, 7, 8), {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0), "ceil_mode": True}),
    ("max_pool2d", (3, 9, 9), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    ("max_pool2d", (1, 1, 5, 5), {"kernel_size": 2, "stride": 2, "padding": 1, "ceil_mode": True}),
    ("max_pool2d", (2, 3, 7, 8), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
                                  "return_indices": True}),
    ("avg_pool2d", (2, 3, 6, 7), {"kernel_size": 2}),
    ("avg_pool2d", (2, 3, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ("avg_pool2d", (2, 3, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}),
    ("avg_pool2d", (2, 3, 7, 8), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
                                  "count_include_pad": False}),
    ("avg_pool2d", (2, 3, 7, 8), {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0), "ceil_mode": True}),
    ("avg_pool2d", (2, 3, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "divisor_override": 4}),
    ("avg_pool2d", (3, 9, 9), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
]


@pytest.mark.parametrize("fn,shape,kw", POOLS, ids=[f"{f} {s} {k}" for f, s, k in POOLS])
def test_pooling_matches_torch(fn, shape, kw):
    x0 = np.random.default_rng(0).standard_normal(shape)
    got = []
    for lib in (torch, tg):
        x = lib.tensor(x0, requires_grad=True)
        y = getattr(lib.nn.functional, fn)(x, **kw)
        y, indices = y if isinstance(y, tuple) else (y, None)
        (y * lib.tensor(np.arange(y.numel()).reshape(tuple(y.shape)) / 3.0)).sum().backward()
        got.append([y.detach().numpy(), x.grad.numpy()] + ([] if indices is None else [indices.numpy()]))
    for want, ours in zip(*got):
        assert ours.dtype == want.dtype
        np.testing.assert_allclose(ours, want, rtol=1e-12, atol=1e-12)


def test_max_pool_ties_and_nan_as_torch():
    x0 = np.zeros((1, 1, 4, 4))
    x0[0, 0, 1, 1] = np.nan  # a NaN is its window's maximum; the other windows tie at 0
    got = []
    for lib in (torch, tg):
        x = lib.tensor(x0, requires_grad=True)
        y = lib.nn.functional.max_pool2d(x, 2)
        y.sum().backward()
        got.append((y.detach().numpy(), x.grad.numpy()))
    np.testing.assert_array_equal(got[1][0], got[0][0])
    np.testing.assert_array_equal(got[1][1], got[0][1])


@pytest.mark.parametrize("kw", [{}, {"stride": 2, "padding": 1, "bias": False}, {"padding": "same"},
                                {"kernel_size": (3, 5), "padding": (1, 2)}])
def test_conv2d_module_matches_torch(kw):
    kw = dict(kw)
    k = kw.pop("kernel_size", 3)
    torch.manual_seed(0)
    theirs = torch.nn.Conv2d(3, 4, k, **kw).double()
    ours = tg.nn.Conv2d(3, 4, k, **kw).double()
    assert repr(ours) == repr(theirs) and list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({n: tg.tensor(v.detach().numpy()) for n, v in theirs.state_dict().items()})
    x0 = np.random.default_rng(1).standard_normal((2, 3, 7, 8))
    got = []
    for lib, m in ((torch, theirs), (tg, ours)):
        x = lib.tensor(x0, requires_grad=True)
        y = m(x)
        (y * y).sum().backward()
        got.append([y.detach().numpy(), x.grad.numpy()] + [p.grad.numpy() for p in m.parameters()])
    for want, mine in zip(*got):
        np.testing.assert_allclose(mine, want, rtol=1e-10, atol=1e-11)


def test_conv2d_initialization_bounds_are_torchs():
    m = tg.nn.Conv2d(16, 8, 3)
    bound = 1 / math.sqrt(16 * 9)  # kaiming_uniform_(a=sqrt(5)) and the bias: both 1/sqrt(fan_in)
    for p in (m.weight, m.bias):
        a = np.abs(p.detach().numpy())
        assert a.max() <= bound and a.max() > 0.7 * bound


def test_pooling_modules_and_errors_in_torchs_words():
    for make in (lambda lib: lib.nn.MaxPool2d(2), lambda lib: lib.nn.MaxPool2d(3, 2, 1, ceil_mode=True),
                 lambda lib: lib.nn.AvgPool2d(2), lambda lib: lib.nn.AvgPool2d((2, 3), stride=1, padding=1)):
        assert repr(make(tg)) == repr(make(torch))
    x = tg.randn(1, 1, 4, 4)
    with pytest.raises(RuntimeError, match="pad should be at most half of effective kernel size, but got pad=2, "
                                           "kernel_size=2 and dilation=1"):
        tg.nn.functional.max_pool2d(x, 2, padding=2)
    assert tg.nn.Conv2d(4, 4, 3, groups=2, dilation=2)(tg.randn(1, 4, 5, 5)).shape == (1, 4, 1, 1)
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        tg.nn.Conv2d(3, 4, 3, groups=2)


TRANSPOSED = [((2, 3, 5, 4), (3, 4, 3, 3), {}), ((2, 3, 5, 4), (3, 4, 4, 4), {"stride": 2, "padding": 1}),
              ((1, 3, 3, 3), (3, 2, 3, 2), {"stride": (2, 3), "padding": (1, 0), "output_padding": (1, 2)}),
              ((3, 5, 5), (3, 2, 3, 3), {"stride": 2})]


@pytest.mark.parametrize("xs,ws,kw", TRANSPOSED, ids=[str(k) for _, _, k in TRANSPOSED])
def test_conv_transpose2d_matches_torch(xs, ws, kw):
    rng = np.random.default_rng(0)
    x0, w0, b0 = rng.standard_normal(xs), rng.standard_normal(ws), rng.standard_normal(ws[1])
    got = []
    for lib in (torch, tg):
        x, w, b = (lib.tensor(a, requires_grad=True) for a in (x0, w0, b0))
        y = lib.nn.functional.conv_transpose2d(x, w, b, **kw)
        (y * y).sum().backward()
        got.append([y.detach().numpy(), x.grad.numpy(), w.grad.numpy(), b.grad.numpy()])
    for want, mine in zip(*got):
        np.testing.assert_allclose(mine, want, rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("args,kw", [((100, 32, 4, 1, 0), {"bias": False}), ((8, 4, 4, 2, 1), {}),
                                     ((8, 4, 3), {"stride": 2, "output_padding": 1})])
def test_conv_transpose2d_module_matches_torch(args, kw):
    torch.manual_seed(0)
    theirs, ours = torch.nn.ConvTranspose2d(*args, **kw).double(), tg.nn.ConvTranspose2d(*args, **kw).double()
    assert repr(ours) == repr(theirs) and list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: tg.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    x0 = np.random.default_rng(0).standard_normal((2, args[0], 3, 3))
    np.testing.assert_allclose(ours(tg.tensor(x0)).detach().numpy(), theirs(torch.tensor(x0)).detach().numpy(),
                               rtol=1e-10)
    fan_in = ours.weight.shape[1] * ours.weight.shape[2] * ours.weight.shape[3]
    assert np.abs(tg.nn.ConvTranspose2d(*args, **kw).weight.detach().numpy()).max() <= 1 / math.sqrt(fan_in)


def test_conv_transpose2d_output_size_and_errors():
    m = tg.nn.ConvTranspose2d(8, 4, 3, stride=2)
    assert m(tg.randn(1, 8, 5, 5), output_size=(12, 12)).shape == (1, 4, 12, 12)
    with pytest.raises(ValueError, match="requested an output size of"):
        m(tg.randn(1, 8, 5, 5), output_size=(14, 14))
    with pytest.raises(RuntimeError, match="output padding must be smaller than either stride or dilation"):
        tg.nn.functional.conv_transpose2d(tg.randn(1, 2, 3, 3), tg.randn(2, 2, 3, 3), output_padding=1)


@pytest.mark.parametrize("kw", [{"groups": 2}, {"groups": 4, "padding": 1}, {"dilation": 2},
                                {"dilation": (2, 3), "stride": 2, "padding": (2, 1)},
                                {"dilation": 2, "groups": 2, "padding": "same"}])
def test_conv2d_dilation_and_groups_match_torch(kw):
    groups = kw.get("groups", 1)
    torch.manual_seed(0)
    theirs = torch.nn.Conv2d(4, 8, 3, **kw).double()
    ours = tg.nn.Conv2d(4, 8, 3, **kw).double()
    assert repr(ours) == repr(theirs) and ours.weight.shape == (8, 4 // groups, 3, 3)
    ours.load_state_dict({k: tg.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    x0 = np.random.default_rng(1).standard_normal((2, 4, 9, 9))
    got = []
    for lib, m in ((torch, theirs), (tg, ours)):
        x = lib.tensor(x0, requires_grad=True)
        y = m(x)
        (y * y).sum().backward()
        got.append([y.detach().numpy(), x.grad.numpy()] + [p.grad.numpy() for p in m.parameters()])
    for want, mine in zip(*got):
        np.testing.assert_allclose(mine, want, rtol=1e-10, atol=1e-10)
