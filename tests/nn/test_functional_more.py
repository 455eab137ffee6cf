"""The functional forms and modules of conv1d, max/avg pool 1-d, adaptive_avg_pool2d,
group_norm, dropout2d, normalize, cosine_similarity, pairwise_distance and pad against torch
2.13's (float64 values and gradients; reprs and state_dict keys of Conv1d, MaxPool1d,
AvgPool1d, AdaptiveAvgPool2d, GroupNorm, Dropout2d). Skipped without torch."""
from __future__ import annotations

import numpy as np
import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")


def F(lib):
    return lib.nn.functional


CASES = {
    "conv1d stride padding bias": (lambda l, x, w, b: F(l).conv1d(x, w, b, stride=2, padding=1),
                                   [(2, 3, 9), (4, 3, 3), (4,)]),
    "conv1d same": (lambda l, x, w: F(l).conv1d(x, w, padding="same"), [(2, 3, 9), (4, 3, 3)]),
    "max_pool1d": (lambda l, x: F(l).max_pool1d(x, 3, 2, 1), [(2, 3, 9)]),
    "avg_pool1d count_include_pad False": (lambda l, x: F(l).avg_pool1d(x, 3, 2, 1, count_include_pad=False),
                                           [(2, 3, 9)]),
    "avg_pool1d unbatched": (lambda l, x: F(l).avg_pool1d(x, 2), [(3, 9)]),
    "adaptive_avg_pool2d 1": (lambda l, x: F(l).adaptive_avg_pool2d(x, 1), [(2, 3, 7, 5)]),
    "adaptive_avg_pool2d (3, 2)": (lambda l, x: F(l).adaptive_avg_pool2d(x, (3, 2)), [(2, 3, 7, 5)]),
    "adaptive_avg_pool2d larger": (lambda l, x: F(l).adaptive_avg_pool2d(x, (5, 7)), [(2, 3, 7, 5)]),
    "adaptive_avg_pool2d None": (lambda l, x: F(l).adaptive_avg_pool2d(x, (None, 3)), [(3, 7, 5)]),
    "group_norm affine": (lambda l, x, w, b: F(l).group_norm(x, 2, w, b), [(2, 4, 3, 3), (4,), (4,)]),
    "group_norm": (lambda l, x: F(l).group_norm(x, 4), [(2, 4, 5)]),
    "normalize": (lambda l, x: F(l).normalize(x), [(3, 4)]),
    "normalize p=1 dim=0": (lambda l, x: F(l).normalize(x, p=1, dim=0), [(3, 4)]),
    "cosine_similarity": (lambda l, x, y: F(l).cosine_similarity(x, y), [(3, 4), (3, 4)]),
    "cosine_similarity broadcast": (lambda l, x, y: F(l).cosine_similarity(x, y, dim=-1), [(3, 4), (4,)]),
    "pairwise_distance": (lambda l, x, y: F(l).pairwise_distance(x, y), [(3, 4), (3, 4)]),
    "pairwise_distance p=1 keepdim": (lambda l, x, y: F(l).pairwise_distance(x, y, p=1, keepdim=True),
                                      [(3, 4), (3, 4)]),
    "pad constant value": (lambda l, x: F(l).pad(x, (1, 2), value=3.5), [(2, 3, 4)]),
    "pad negative (crop)": (lambda l, x: F(l).pad(x, (-1, 2, 0, -2)), [(2, 3, 4, 5)]),
}
for _mode in ("constant", "reflect", "replicate", "circular"):
    CASES[f"pad {_mode}"] = (lambda l, x, m=_mode: F(l).pad(x, (2, 1, 1, 2), mode=m), [(2, 3, 4, 5)])


@pytest.mark.parametrize("name", sorted(CASES))
def test_functional_matches_torch(name):
    fn, shapes = CASES[name]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in shapes]
    got = []
    for lib in (torch, tg):
        ts = [lib.tensor(a, requires_grad=True) for a in arrays]
        y = fn(lib, *ts)
        (y * lib.tensor(np.arange(y.numel()).reshape(tuple(y.shape)) / 7.0 + 1)).sum().backward()
        got.append([y.detach().numpy()] + [t.grad.numpy() for t in ts])
    for want, mine in zip(*got):
        np.testing.assert_allclose(mine, want, rtol=1e-10, atol=1e-10)


def test_zero_vectors_get_torchs_gradients():
    for fn in (lambda lib, x: F(lib).cosine_similarity(x, lib.ones(2, 3, dtype=lib.float64)),
               lambda lib, x: F(lib).normalize(x)):
        grads = []
        for lib in (torch, tg):
            x = lib.zeros(2, 3, dtype=lib.float64, requires_grad=True)
            fn(lib, x).sum().backward()
            grads.append(x.grad.numpy())
        np.testing.assert_allclose(grads[1], grads[0], rtol=1e-10)


MODULES = [lambda l: l.nn.Conv1d(3, 4, 3), lambda l: l.nn.Conv1d(3, 4, 5, stride=2, padding=1, bias=False),
           lambda l: l.nn.MaxPool1d(3, 2, 1), lambda l: l.nn.AvgPool1d(3, 2), lambda l: l.nn.AdaptiveAvgPool2d((1, 1)),
           lambda l: l.nn.AdaptiveAvgPool2d(1), lambda l: l.nn.GroupNorm(2, 4), lambda l: l.nn.GroupNorm(2, 4, affine=False),
           lambda l: l.nn.GroupNorm(2, 4, bias=False), lambda l: l.nn.Dropout2d(0.3)]


@pytest.mark.parametrize("k", range(len(MODULES)))
def test_module_repr_and_state_dict_as_torch(k):
    ours, theirs = MODULES[k](tg), MODULES[k](torch)
    assert repr(ours) == repr(theirs) and list(ours.state_dict()) == list(theirs.state_dict())


def test_dropout2d_zeroes_whole_channels():
    tg.manual_seed(0)
    y = tg.nn.Dropout2d(0.5)(tg.ones(8, 16, 3, 3)).numpy()
    per_channel = y.reshape(8, 16, 9)
    assert set(np.unique(per_channel)) == {0.0, 2.0}
    assert (per_channel.min(axis=2) == per_channel.max(axis=2)).all()
    assert tg.nn.Dropout2d(0.5).eval()(tg.ones(2, 3, 2, 2)).tolist() == tg.ones(2, 3, 2, 2).tolist()


INTERPOLATE = [((2, 3, 4, 5), {"scale_factor": 2}), ((2, 3, 4, 5), {"size": (7, 3)}),
               ((2, 3, 4, 5), {"scale_factor": 1.7}), ((2, 3, 4, 5), {"scale_factor": (2, 0.5), "mode": "nearest-exact"}),
               ((2, 3, 4, 5), {"size": (7, 9), "mode": "nearest-exact"}), ((2, 3, 4, 5), {"scale_factor": 2, "mode": "bilinear"}),
               ((2, 3, 4, 5), {"scale_factor": 2, "mode": "bilinear", "align_corners": True}),
               ((2, 3, 4, 5), {"size": (3, 8), "mode": "bilinear"}),
               ((2, 3, 4, 5), {"size": (1, 8), "mode": "bilinear", "align_corners": True}),
               ((2, 3, 4, 5), {"scale_factor": 1.5, "mode": "bilinear", "recompute_scale_factor": True}),
               ((2, 3, 6), {"scale_factor": 2.5, "mode": "linear"}), ((2, 3, 6), {"size": 4, "mode": "linear", "align_corners": True}),
               ((2, 3, 6), {"size": 10})]


@pytest.mark.parametrize("shape,kw", INTERPOLATE, ids=[str(k) for _, k in INTERPOLATE])
def test_interpolate_matches_torch(shape, kw):
    x0 = np.random.default_rng(0).standard_normal(shape)
    got = []
    for lib in (torch, tg):
        x = lib.tensor(x0, requires_grad=True)
        y = lib.nn.functional.interpolate(x, **kw)
        (y * lib.tensor(np.arange(y.numel()).reshape(tuple(y.shape)) / 3.0 + 1)).sum().backward()
        got.append((y.detach().numpy(), x.grad.numpy()))
    for want, mine in zip(*got):
        np.testing.assert_allclose(mine, want, rtol=1e-10, atol=1e-12)


def test_upsample_module_as_torch():
    for kw in ({"scale_factor": 2}, {"size": (3, 4), "mode": "bilinear"},
               {"scale_factor": 2, "mode": "bilinear", "align_corners": True}):
        assert repr(tg.nn.Upsample(**kw)) == repr(torch.nn.Upsample(**kw))
    x0 = np.random.default_rng(1).standard_normal((1, 2, 3, 3))
    np.testing.assert_allclose(tg.nn.Upsample(scale_factor=2, mode="bilinear")(tg.tensor(x0)).numpy(),
                               torch.nn.Upsample(scale_factor=2, mode="bilinear")(torch.tensor(x0)).numpy(), rtol=1e-12)
    with pytest.raises(NotImplementedError, match="mode='bicubic'"):
        tg.nn.functional.interpolate(tg.tensor(x0), scale_factor=2, mode="bicubic")


@pytest.mark.parametrize("kw", [{"kernel_size": 2}, {"kernel_size": (3, 2), "stride": 2, "padding": 1}])
def test_unfold_and_fold_match_torch(kw):
    x0 = np.random.default_rng(2).standard_normal((2, 3, 6, 5))
    got = []
    for lib in (torch, tg):
        x = lib.tensor(x0, requires_grad=True)
        cols = lib.nn.functional.unfold(x, **kw)
        back = lib.nn.functional.fold(cols * 2.0, (6, 5), **kw)
        (back * lib.tensor(np.arange(back.numel()).reshape(tuple(back.shape)) + 1.0)).sum().backward()
        got.append((cols.detach().numpy(), back.detach().numpy(), x.grad.numpy()))
    for want, mine in zip(*got):
        np.testing.assert_allclose(mine, want, rtol=1e-12, atol=1e-12)
