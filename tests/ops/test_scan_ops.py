"""ops/scan.py and ops/order.py against torch: the indices among ties and NaN (Note [Index
choice among ties] in ops/order.py), prod's and cumprod's gradients with zeros (first and
second order), the counting functions, dtypes, return types and errors. Skipped without torch."""
from __future__ import annotations

import math

import numpy as np
import pytest

import threadgrad as tg
from threadgrad import engine, ops

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

NAN, INF = math.nan, math.inf


def _pair(a, grad=True):
    a = np.asarray(a, dtype=np.float64)
    return tg.tensor(a, requires_grad=grad), torch.tensor(a, requires_grad=grad)


def _same(ours, theirs, **kw):
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), equal_nan=True, **kw)


def _tied_rows(rng, rows, n, nan=False):
    """Rows of few distinct values (many ties), with NaN sprinkled in when ``nan``."""
    x = rng.integers(0, 4, size=(rows, n)).astype(np.float64)
    if nan:
        x[rng.random((rows, n)) < 0.2] = NAN
    return x


# --- indices among ties and NaN --------------------------------------------------------------

@pytest.mark.parametrize("nan", [False, True])
@pytest.mark.parametrize("name", ["median", "nanmedian"])
def test_median_indices_among_ties_and_nan_are_torchs(name, nan):
    rng = np.random.default_rng(1)
    for n in (1, 2, 5, 8, 33):
        x = _tied_rows(rng, 60, n, nan)
        ours, theirs = getattr(tg.tensor(x), name)(dim=1), getattr(torch.tensor(x), name)(dim=1)
        _same(ours.values, theirs.values)
        np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy(), err_msg=f"{name} n={n}")
        _same(getattr(tg.tensor(x), name)(), getattr(torch.tensor(x), name)())


def test_all_nan_slices_of_nanmedian():
    x = np.array([[NAN, NAN, NAN], [NAN, 3.0, NAN]])
    ours, theirs = tg.tensor(x).nanmedian(1), torch.tensor(x).nanmedian(1)
    _same(ours.values, theirs.values)
    assert ours.indices.tolist() == theirs.indices.tolist()


@pytest.mark.parametrize("nan", [False, True])
def test_kthvalue_indices_among_ties_are_torchs_quickselect(nan):
    rng = np.random.default_rng(2)
    for n in (1, 2, 3, 7, 16, 40):
        x = _tied_rows(rng, 40, n, nan)
        for k in {1, (n + 1) // 2, n}:
            ours, theirs = tg.tensor(x).kthvalue(k, 1), torch.tensor(x).kthvalue(k, 1)
            _same(ours.values, theirs.values)
            np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy(), err_msg=f"n={n} k={k}")
            row_ours, row_theirs = tg.tensor(x[0]).kthvalue(k), torch.tensor(x[0]).kthvalue(k)  # 1-d
            assert row_ours.indices.item() == row_theirs.indices.item(), f"1-d n={n} k={k}"


def test_kthvalue_along_dim_0_with_keepdim():
    x = _tied_rows(np.random.default_rng(3), 9, 4)
    ours, theirs = tg.tensor(x).kthvalue(4, 0, keepdim=True), torch.tensor(x).kthvalue(4, 0, keepdim=True)
    assert ours.indices.shape == tuple(theirs.indices.shape)
    np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy())


@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("nan", [False, True])
def test_cummax_cummin_indices_with_ties_and_nan_are_torchs(name, nan):
    x = _tied_rows(np.random.default_rng(4), 30, 9, nan)
    for dim in (0, 1):
        a, b = _pair(x)
        ours, theirs = getattr(a, name)(dim), getattr(b, name)(dim)
        _same(ours.values, theirs.values)
        np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy())
        w = np.arange(x.size, dtype=np.float64).reshape(x.shape)
        (ours.values * tg.tensor(w)).sum().backward()
        (theirs.values * torch.tensor(w)).sum().backward()
        _same(a.grad, b.grad)


def test_mode_with_ties_on_short_slices_is_torchs():
    rng = np.random.default_rng(5)
    for n in (1, 2, 5, 16):
        x = _tied_rows(rng, 50, n)
        ours, theirs = tg.tensor(x).mode(1), torch.tensor(x).mode(1)
        _same(ours.values, theirs.values)
        np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy(), err_msg=f"n={n}")


@pytest.mark.parametrize("nan", [False, True])
def test_mode_on_long_slices_and_with_nan_is_torchs(nan):
    """Past 16 elements torch's std::sort is an introsort, and its < leaves NaN unordered: the
    index (and with NaN the value) is its own, replayed."""
    rng = np.random.default_rng(6)
    for n in (5, 17, 50, 200):
        x = _tied_rows(rng, 20, n, nan)
        for dim in (1, 0):
            ours, theirs = tg.tensor(x).mode(dim), torch.tensor(x).mode(dim)
            _same(ours.values, theirs.values)
            np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy(), err_msg=f"n={n} dim={dim}")


@pytest.mark.parametrize("largest", [True, False])
def test_topk_with_nan_and_distinct_values_is_torchs(largest):
    x = np.array([[1.0, NAN, 3.0, -2.0, 0.5], [NAN, NAN, 0.0, 7.0, -1.0]])
    for k in (1, 2, 3, 5):
        a, b = _pair(x)
        ours, theirs = a.topk(k, largest=largest), b.topk(k, largest=largest)
        _same(ours.values, theirs.values)
        np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy())
        w = np.arange(1.0, 2 * k + 1).reshape(2, k)
        (ours.values * tg.tensor(w)).sum().backward()
        (theirs.values * torch.tensor(w)).sum().backward()
        _same(a.grad, b.grad)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_indices_among_ties_are_torchs(largest):
    """Ties replay torch's libstdc++ order: std::partial_sort where k * 64 <= n, else
    std::nth_element and std::sort (NaN ties included; 0.0 and -0.0 tie, their values move)."""
    rng = np.random.default_rng(12)
    for n, ks in ((1, (1,)), (5, (1, 2, 5)), (17, (1, 8, 16, 17)), (40, (3, 39)), (200, (1, 3, 4, 50, 199))):
        x = _tied_rows(rng, 6, n, nan=True)
        x[x == 0.0] = -0.0
        x[::2][x[::2] == 1.0] = 0.0
        for k in ks:
            for dim in (1, 0) if n <= 40 else (1,):
                if k > x.shape[dim]:
                    continue
                a, b = _pair(x)
                ours, theirs = a.topk(k, dim, largest=largest), b.topk(k, dim, largest=largest)
                np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy(), err_msg=f"n={n} k={k}")
                np.testing.assert_array_equal(np.signbit(ours.values.detach().numpy()),
                                              np.signbit(theirs.values.detach().numpy()))
                w = np.arange(1.0, ours.values.numel() + 1).reshape(ours.values.shape)
                (ours.values * tg.tensor(w)).sum().backward()
                (theirs.values * torch.tensor(w)).sum().backward()
                _same(a.grad, b.grad)


def test_topk_matches_torch_on_a_0d_tensor_and_k_0():
    a, b = _pair(2.5)
    ours, theirs = a.topk(1), b.topk(1)
    assert ours.values.shape == () and ours.values.grad_fn.name() == theirs.values.grad_fn.name()
    assert tg.ones(2, 3).topk(0).values.shape == (2, 0)
    for k in (0, 1):  # (torch: the element itself for either k)
        ours, theirs = tg.tensor(2.5).topk(k), torch.tensor(2.5).topk(k)
        assert ours.values.shape == tuple(theirs.values.shape) and ours.values.item() == theirs.values.item()
        assert ours.indices.shape == tuple(theirs.indices.shape)


# --- prod and cumprod with zeros ---------------------------------------------------------------

PROD_CASES = {
    "no zero": [[1.5, -2.0, 0.5], [3.0, 0.25, -1.0]],
    "one zero": [[1.5, 0.0, 0.5], [3.0, 0.25, -1.0]],
    "two zeros in a slice": [[0.0, 0.0, 0.5], [3.0, 0.25, -1.0]],
    "zeros in both slices": [[0.0, 2.0, 0.5], [3.0, 0.0, 0.0]],
}


def _grads_first_and_second(fn_ours, fn_theirs, x):
    """First gradients, and the gradient of a weighted sum of them (double backward)."""
    a, b = _pair(x)
    out_a, out_b = fn_ours(a), fn_theirs(b)
    w = np.linspace(1.0, 2.0, out_b.numel()).reshape(tuple(out_b.shape))
    (ga,) = engine.grad((out_a * tg.tensor(w)).sum(), [a], create_graph=True)
    (gb,) = torch.autograd.grad((out_b * torch.tensor(w)).sum(), [b], create_graph=True)
    _same(ga, gb, rtol=1e-12, atol=1e-15)
    v = np.linspace(-1.0, 1.0, ga.numel()).reshape(ga.shape)
    (gga,) = engine.grad((ga * tg.tensor(v)).sum(), [a], allow_unused=True)
    (ggb,) = torch.autograd.grad((gb * torch.tensor(v)).sum(), [b], allow_unused=True)
    _same(gga if gga is not None else tg.zeros(*a.shape, dtype=tg.float64),
          ggb if ggb is not None else torch.zeros(b.shape, dtype=torch.float64), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("case", sorted(PROD_CASES))
@pytest.mark.parametrize("how", ["all", "dim 1", "dim 0 keepdim"])
def test_prod_gradients_with_zeros_are_torchs_to_second_order(case, how):
    call = {"all": lambda t: t.prod(), "dim 1": lambda t: t.prod(1),
            "dim 0 keepdim": lambda t: t.prod(0, keepdim=True)}[how]
    _grads_first_and_second(call, call, PROD_CASES[case])


def test_prod_gradient_with_one_zero_is_the_product_of_the_others():
    x = tg.tensor([2.0, 0.0, 3.0, 4.0], requires_grad=True)
    x.prod().backward()
    assert x.grad.tolist() == [0.0, 24.0, 0.0, 0.0]
    y = tg.tensor([2.0, 0.0, 3.0, 0.0], requires_grad=True)
    y.prod().backward()
    assert y.grad.tolist() == [0.0, 0.0, 0.0, 0.0]


CUMPROD_CASES = {
    "no zero": [[1.5, -2.0, 0.5, 1.25], [3.0, 0.25, -1.0, 2.0]],
    "one zero": [[1.5, 0.0, 0.5, 1.25], [3.0, 0.25, -1.0, 0.0]],
    "two zeros": [[0.0, 2.0, 0.0, 1.25], [3.0, 0.0, 0.0, 2.0]],
    "three zeros": [[0.0, 0.0, 0.0, 1.25], [0.5, 2.0, 3.0, -2.0]],
}


@pytest.mark.parametrize("case", sorted(CUMPROD_CASES))
@pytest.mark.parametrize("dim", [0, 1])
def test_cumprod_gradients_with_zeros_are_torchs_to_second_order(case, dim):
    _grads_first_and_second(lambda t: t.cumprod(dim), lambda t: t.cumprod(dim), CUMPROD_CASES[case])


def test_prod_and_cumprod_dtypes_are_torchs():
    for data in ([1, 2, 3], [True, False]):
        assert tg.tensor(data).prod().dtype == tg.int64
        assert tg.tensor(data).cumprod(0).dtype == tg.int64
    assert tg.tensor([1.0, 2.0], dtype=tg.float64).prod(dtype=tg.float32).dtype == tg.float32
    assert tg.tensor([2, 3]).prod(0).item() == 6
    assert tg.zeros(2, 0).prod(1).tolist() == [1.0, 1.0]


# --- logcumsumexp, aminmax, nansum / nanmean, var_mean / std_mean ------------------------------

def test_logcumsumexp_matches_torch_with_large_and_infinite_values():
    x = [[1000.0, 1000.0, -INF, 3.0], [-INF, -INF, 0.0, INF], [0.5, -2.0, 1.0, 700.0]]
    _grads_first_and_second(lambda t: t.logcumsumexp(1), lambda t: t.logcumsumexp(1), x[:1] + x[2:])
    a, b = _pair(x)
    _same(a.logcumsumexp(1), b.logcumsumexp(1), rtol=1e-12)
    _same(a.logcumsumexp(0), b.logcumsumexp(0), rtol=1e-12)


def test_aminmax_keepdim_and_ties_are_torchs():
    x = [[1.0, 1.0, 2.0, 2.0], [0.0, 3.0, 3.0, -1.0]]
    for kw in ({}, {"dim": 1}, {"dim": 0, "keepdim": True}):
        a, b = _pair(x)
        ours, theirs = a.aminmax(**kw), b.aminmax(**kw)
        assert ours.min.shape == tuple(theirs.min.shape)
        (ours.min * 3.0 + ours.max * 5.0).sum().backward()
        (theirs.min * 3.0 + theirs.max * 5.0).sum().backward()
        _same(a.grad, b.grad)


@pytest.mark.parametrize("kw", [{}, {"dim": 1}, {"dim": (0, 1), "keepdim": True}])
def test_nansum_and_nanmean_are_torchs(kw):
    x = [[1.0, NAN, 2.0], [NAN, NAN, NAN], [0.5, -1.0, 4.0]]
    for name in ("nansum", "nanmean"):
        a, b = _pair(x)
        ours, theirs = getattr(a, name)(**kw), getattr(b, name)(**kw)
        _same(ours, theirs)
        assert ours.grad_fn.name() == theirs.grad_fn.name()
        ours.sum().backward()
        theirs.sum().backward()
        _same(a.grad, b.grad)
    assert tg.tensor([1, 2, 3]).nansum().dtype == tg.int64


@pytest.mark.parametrize("kw", [{}, {"dim": 1}, {"dim": 0, "correction": 0}, {"dim": 1, "unbiased": False},
                                {"dim": (0, 1), "keepdim": True, "correction": 2}])
@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
def test_var_mean_and_std_mean_are_torchs(name, kw):
    x = np.random.default_rng(8).standard_normal((3, 4))
    a, b = _pair(x)
    ours, theirs = getattr(tg, name)(a, **kw), getattr(torch, name)(b, **kw)
    assert isinstance(ours, tuple) and len(ours) == 2
    for o, t in zip(ours, theirs):
        _same(o, t, rtol=1e-12)
    (ours[0] * 2.0 + ours[1] * 3.0).sum().backward()
    (theirs[0] * 2.0 + theirs[1] * 3.0).sum().backward()
    _same(a.grad, b.grad, rtol=1e-12)
    v, m = getattr(tg, name)(tg.tensor(x), True)  # torch's (input, unbiased) overload
    _same(v, getattr(torch, name)(torch.tensor(x), True)[0])


# --- unique, histc, bincount --------------------------------------------------------------------

@pytest.mark.parametrize("kw", [{}, {"return_inverse": True}, {"return_counts": True},
                                {"return_inverse": True, "return_counts": True}])
def test_unique_is_torchs(kw):
    for x in ([[3, 1, 3], [2, 1, 0]], [2.0, NAN, 1.0, NAN, 2.0]):
        ours, theirs = tg.unique(tg.tensor(x), **kw), torch.unique(torch.tensor(x), **kw)
        ours, theirs = (ours, theirs) if isinstance(ours, tuple) else ((ours,), (theirs,))
        assert len(ours) == len(theirs)
        for o, t in zip(ours, theirs):
            assert o.shape == tuple(t.shape)
            _same(o, t)


def test_unique_along_a_dim_and_its_missing_derivative_are_torchs():
    x = [[1, 2], [1, 2], [0, 5]]
    ours = tg.tensor(x).unique(dim=0, return_inverse=True, return_counts=True)
    theirs = torch.unique(torch.tensor(x), dim=0, return_inverse=True, return_counts=True)
    for o, t in zip(ours, theirs):
        np.testing.assert_array_equal(o.numpy(), t.numpy())
    a = tg.tensor([3.0, 1.0, 3.0], requires_grad=True)
    u = tg.unique(a)
    assert u.grad_fn.name() == torch.unique(torch.tensor([3.0], requires_grad=True)).grad_fn.name()
    with pytest.raises(NotImplementedError, match="the derivative for '_unique2' is not implemented"):
        u.sum().backward()


@pytest.mark.parametrize("kw", [{}, {"bins": 4}, {"bins": 3, "min": 1, "max": 3}, {"bins": 7, "min": -1.3, "max": 2.9}])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_histc_is_torchs(kw, dtype):
    rng = np.random.default_rng(9)
    x = np.concatenate([rng.uniform(-2, 4, 500), [0.0, 1.0, 2.0, 2.5, 3.0, 4.0, -1.3, 2.9, NAN]]).astype(dtype)
    if not kw.get("max"):
        x = x[~np.isnan(x)]
    ours, theirs = tg.histc(tg.tensor(x), **kw), torch.histc(torch.tensor(x), **kw)
    assert ours.dtype == x.dtype
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(tg.tensor([2.0, 2.0]).histc(bins=4).numpy(), torch.tensor([2.0, 2.0]).histc(bins=4))


def test_bincount_is_torchs():
    x = [1, 3, 1, 0, 7]
    for kw in ({}, {"minlength": 10}, {"minlength": 2}):
        np.testing.assert_array_equal(tg.bincount(tg.tensor(x), **kw).numpy(), torch.bincount(torch.tensor(x), **kw))
    for w, dtype in (([0.5, 1.0, 2.0, 1.5, -1.0], tg.float32), ([1, 2, 3, 4, 5], tg.int64)):
        ours = tg.tensor(x).bincount(tg.tensor(w, dtype=dtype))
        theirs = torch.tensor(x).bincount(torch.tensor(w))
        assert str(ours.dtype) == str(theirs.dtype).replace("torch.", "")
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert tg.bincount(tg.tensor([], dtype=tg.int64)).tolist() == []
    empty = tg.bincount(tg.tensor([], dtype=tg.int64), tg.tensor([], dtype=tg.float32), minlength=3)
    assert empty.dtype == tg.int64 and empty.tolist() == [0, 0, 0]  # (torch: int64 zeros, weights or not)
    rng = np.random.default_rng(13)  # float32 weights sum in float32, in order, to torch's last bit
    x, w = rng.integers(0, 5, 20_000), rng.standard_normal(20_000).astype(np.float32)
    np.testing.assert_array_equal(tg.bincount(tg.tensor(x), tg.tensor(w)).numpy(),
                                  torch.bincount(torch.tensor(x), torch.tensor(w)).numpy())


# --- errors ------------------------------------------------------------------------------------

ERRORS = [
    ("kthvalue k too large", lambda lib: lib.tensor([1.0, 2.0]).kthvalue(3)),
    ("kthvalue k 0", lambda lib: lib.tensor([1.0, 2.0]).kthvalue(0)),
    ("kthvalue empty dim", lambda lib: lib.zeros(2, 0).kthvalue(1, 1)),
    ("topk k too large", lambda lib: lib.tensor([1.0, 2.0]).topk(3)),
    ("median empty dim", lambda lib: lib.zeros(2, 0).median(1)),
    ("mode empty dim", lambda lib: lib.zeros(3, 0).mode(1)),
    ("aminmax empty", lambda lib: lib.aminmax(lib.zeros(0))),
    ("aminmax empty dim", lambda lib: lib.aminmax(lib.zeros(2, 0), dim=1)),
    ("logcumsumexp int", lambda lib: lib.tensor([1, 2]).logcumsumexp(0)),
    ("nanmean int", lambda lib: lib.tensor([1, 2]).nanmean()),
    ("histc int", lambda lib: lib.histc(lib.tensor([1, 2]))),
    ("histc bins 0", lambda lib: lib.histc(lib.tensor([1.0, 2.0]), bins=0)),
    ("histc min > max", lambda lib: lib.histc(lib.tensor([1.0, 2.0]), bins=3, min=3, max=1)),
    ("histc infinite range", lambda lib: lib.histc(lib.tensor([1.0, 2.0, math.inf]), bins=3)),
    ("bincount negative", lambda lib: lib.bincount(lib.tensor([-1, 2]))),
    ("bincount 2-d", lambda lib: lib.bincount(lib.tensor([[1]]))),
    ("bincount float", lambda lib: lib.bincount(lib.tensor([1.0]))),
    ("bincount bool", lambda lib: lib.bincount(lib.tensor([True]))),
    ("bincount weights", lambda lib: lib.bincount(lib.tensor([1, 2]), weights=lib.tensor([1.0]))),
    ("bincount minlength", lambda lib: lib.bincount(lib.tensor([1, 2]), minlength=-1)),
]


@pytest.mark.parametrize("case", [c[0] for c in ERRORS])
def test_errors_are_torchs(case):
    fn = dict(ERRORS)[case]
    with pytest.raises(Exception) as theirs:
        fn(torch)
    with pytest.raises(type(theirs.value)) as ours:
        fn(tg)
    assert str(theirs.value).split("(")[0].strip()[:40] in str(ours.value), (str(ours.value), str(theirs.value))


# --- the Tensor methods and return types --------------------------------------------------------

def test_methods_and_return_types_are_torchs():
    x = np.array([[1.0, 3.0, 2.0], [0.0, 5.0, 0.0]])
    ours, theirs = tg.tensor(x), torch.tensor(x)
    for name, call in [("median", lambda t: t.median(dim=0)), ("nanmedian", lambda t: t.nanmedian(1)),
                       ("kthvalue", lambda t: t.kthvalue(1)), ("mode", lambda t: t.mode()),
                       ("topk", lambda t: t.topk(2)), ("cummax", lambda t: t.cummax(1)),
                       ("cummin", lambda t: t.cummin(0)), ("aminmax", lambda t: t.aminmax(dim=1))]:
        o, t = call(ours), call(theirs)
        assert type(o).__name__ == type(t).__name__ == name
        for field in o._fields:
            np.testing.assert_array_equal(getattr(o, field).numpy(), getattr(t, field).numpy())
        for a, b in zip(o, t):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(ours.prod(1, keepdim=True).numpy(), theirs.prod(1, keepdim=True).numpy())
    for name in ("cumprod", "logcumsumexp"):
        np.testing.assert_allclose(getattr(ours, name)(1).numpy(), getattr(theirs, name)(1).numpy())
    for name in ("nansum", "nanmean", "median", "nanmedian", "prod"):
        assert getattr(ours, name)().item() == getattr(theirs, name)().item()
    assert ops.REGISTRY["topk"] is ops.topk is tg.topk


@pytest.mark.parametrize("largest", [True, False])
def test_topks_partition_path_is_the_stable_orders_start(largest):
    """topk's partition path (k up to a quarter of the dim) picks what the whole stable order
    starts with: beyond the k-th value, then its ties by lowest index; NaN the largest. (Where
    ties remain, topk then replays torch's order on those slices.)"""
    from threadgrad.ops.order import _top_indices

    rng = np.random.default_rng(10)
    x = rng.integers(0, 6, size=(7, 200)).astype(np.float64)
    x[rng.random(x.shape) < 0.05] = NAN
    x[3, :190] = NAN  # more NaN than k
    for dim, k in ((1, 1), (1, 13), (1, 50), (0, 1)):
        data = x if dim == 1 else x[:, :4].T.copy()
        moved = np.moveaxis(data, dim, -1)
        key = np.where(np.isnan(moved), np.inf, moved)
        order = np.lexsort((np.broadcast_to(np.arange(moved.shape[-1]), moved.shape),
                            -key if largest else key, ~np.isnan(moved) if largest else np.isnan(moved)), axis=-1)
        want = np.moveaxis(order[..., :k], -1, dim)
        np.testing.assert_array_equal(_top_indices(np, data, dim, k, largest), want, err_msg=f"dim={dim} k={k}")


def test_kthvalue_ties_and_the_order_statistics_on_a_virtual_device():
    x = _tied_rows(np.random.default_rng(11), 12, 9, nan=True)
    cpu, virt = tg.tensor(x), tg.tensor(x).to("virtual:1")
    for call in (lambda t: t.kthvalue(4, 1), lambda t: t.median(1), lambda t: t.topk(2, 1), lambda t: t.mode(0),
                 lambda t: t.cummax(1)):
        ours, there = call(cpu), call(virt)
        assert there.values.device == virt.device and there.indices.device == virt.device
        np.testing.assert_array_equal(there.indices.numpy(), ours.indices.numpy())
    assert tg.histc(virt, bins=5, min=0, max=4).device == virt.device
