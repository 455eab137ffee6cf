"""torch's own tests of the order statistics and moments, ported (test/test_reductions.py's
TestReductions and test/test_sort_and_select.py's TestSortAndSelect; the name of each original
is in the docstring of its port). numpy is the
reference, so these run without torch; sizes are smaller than torch's (2 cores)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import threadgrad as tg

NAN = math.nan


def _sizes(rng: np.random.Generator) -> list:
    """Random 0-3 d shapes of distinct sizes in 1..31, two of each rank (as torch's tests draw them)."""
    return [tuple(rng.choice(np.arange(1, 32), size=r, replace=False)) for r in range(4) for _ in range(2)]


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_median_real_values(dtype):
    """Port of test_median_real_values: the lower median of the whole tensor and along every
    dim, against a sort, against gather by the returned indices, and against numpy's median
    where the count is odd; median and nanmedian agree without NaN."""
    rng = np.random.default_rng(0)
    for size in _sizes(rng):
        a = (rng.standard_normal(size) * (10 if dtype in (np.int32, np.int64) else 1)).astype(dtype)
        t = tg.tensor(a)
        res = t.median()
        assert res.item() == t.nanmedian().item()
        assert res.item() == np.sort(a, axis=None)[(a.size - 1) // 2]
        if a.size % 2:
            assert res.item() == np.median(a)
        for dim in range(t.ndim):
            values, indices = t.median(dim, True)
            other = t.nanmedian(dim, True)
            np.testing.assert_array_equal(values.numpy(), other.values.numpy())
            np.testing.assert_array_equal(indices.numpy(), other.indices.numpy())
            k = (a.shape[dim] - 1) // 2
            np.testing.assert_array_equal(values.numpy(), np.take(np.sort(a, dim), [k], axis=dim))
            np.testing.assert_array_equal(values.numpy(), np.take_along_axis(a, indices.numpy(), dim))
            if a.shape[dim] % 2:
                np.testing.assert_array_equal(values.numpy(), np.median(a, dim, keepdims=True).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_median_nan_values(dtype):
    """Port of test_median_nan_values: median is NaN for any NaN (the last of the sort),
    nanmedian the lower median of the numbers; values are the sort's and the gather's."""
    rng = np.random.default_rng(1)
    for size in _sizes(rng):
        a = rng.random(size).astype(dtype)
        a[a < 0.1] = NAN
        t = tg.tensor(a)
        for name, np_op in (("median", np.median), ("nanmedian", np.nanmedian)):
            res = getattr(t, name)()
            nans = int(np.isnan(a).sum())
            k = a.size - 1 if name == "median" and nans else (a.size - nans - 1) // 2
            np.testing.assert_array_equal(res.numpy(), np.sort(a, axis=None)[k])
            if (a.size - nans) % 2 and (name == "nanmedian" or not nans):
                np.testing.assert_array_equal(res.numpy(), np_op(a))
            for dim in range(t.ndim):
                values, indices = getattr(t, name)(dim, True)
                n = a.shape[dim]
                nan_count = np.isnan(a).sum(dim, keepdims=True)
                k = np.where(nan_count > 0, n - 1, (n - 1) // 2) if name == "median" else (n - nan_count - 1) // 2
                k = np.maximum(k, 0)  # an all-NaN slice of nanmedian: its first element (NaN)
                np.testing.assert_array_equal(values.numpy(), np.take_along_axis(np.sort(a, dim), k, dim))
                np.testing.assert_array_equal(values.numpy(), np.take_along_axis(a, indices.numpy(), dim))


def test_median_corner_cases():
    """Port of test_median_corner_cases (the values; NaN slices, 0-d inputs, strided views)."""
    def check(name, data, args, want):
        res = getattr(tg, name)(tg.tensor(data), *args)
        got = res if not args else res[0]
        np.testing.assert_array_equal(got.numpy(), np.asarray(want, dtype=got.numpy().dtype))

    for name in ("median", "nanmedian"):
        check(name, NAN, [], NAN)
        check(name, NAN, [0], NAN)
        check(name, [NAN], [0, True], [NAN])
        values, indices = getattr(tg, name)(tg.tensor([NAN]), 0, True)
        assert indices.tolist() == [0]
    check("median", [[NAN, NAN], [1, 2]], [0], [NAN, NAN])
    check("nanmedian", [[NAN, NAN], [1, 2]], [0], [1, 2.0])
    check("median", [[NAN, NAN], [1, 2]], [1], [NAN, 1])
    check("nanmedian", [[NAN, NAN], [1, 2]], [1], [NAN, 1.0])
    a = tg.arange(12)
    for name in ("median", "nanmedian"):
        assert getattr(a[::2], name)().item() == 4
        m = a.reshape(3, 4)
        assert getattr(m.T, name)().item() == 5
        assert getattr(m[::2, ::2], name)(-1)[0].tolist() == [0, 8]
        c = a.reshape(2, 3, 2)
        assert getattr(c.permute(2, 1, 0), name)().item() == 5
        assert getattr(c[:, ::2, :], name)(-1)[0].tolist() == [[0, 4], [6, 10]]


@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
def test_var_mean_and_std_mean(name):
    """Ports of test_var_mean, test_std_mean, test_var_mean_all_dims, test_std_mean_all_dims
    and test_std_mean_some_dims: each pair is ``(var or std, mean)`` of the same call."""
    spread = "var" if name == "var_mean" else "std"
    x = tg.tensor(np.random.default_rng(2).random((4, 6, 7, 5, 3)))
    dims = [None] + list(range(x.ndim)) + list(itertools.combinations(range(x.ndim), 2)) + [(0, 2, 4)]
    for dim, unbiased, keepdim in itertools.product(dims, (False, True), (False, True)):
        if dim is None:
            first, second = getattr(tg, name)(x, unbiased=unbiased)
            want = getattr(x, spread)(unbiased=unbiased), x.mean()
        else:
            first, second = getattr(tg, name)(x, dim=dim, unbiased=unbiased, keepdim=keepdim)
            want = getattr(x, spread)(dim=dim, unbiased=unbiased, keepdim=keepdim), x.mean(dim=dim, keepdim=keepdim)
        np.testing.assert_allclose(first.numpy(), want[0].numpy(), rtol=1e-12)
        np.testing.assert_allclose(second.numpy(), want[1].numpy(), rtol=1e-12)


def test_kthvalue():
    """Port of test_kthvalue (TestSortAndSelect, float64; 20 a side where torch has 50): values
    and indices are the sort's k-th along the last dim and along dim 0, on a strided view as on
    its copy, the input unchanged; repeated values; one NaN a row (the largest)."""
    size = 20
    rng = np.random.default_rng(3)
    a = rng.random((size, size, size))
    x = tg.tensor(a)
    for k in (1, int(rng.integers(1, size + 1)), size):
        values, indices = tg.kthvalue(x, k, keepdim=False)
        sorted_values, sorted_indices = tg.sort(x)
        np.testing.assert_array_equal(values.numpy(), sorted_values.numpy()[:, :, k - 1])
        np.testing.assert_array_equal(indices.numpy(), sorted_indices.numpy()[:, :, k - 1])
        values, indices = tg.kthvalue(x, k, 0, keepdim=False)
        sorted_values, sorted_indices = tg.sort(x, 0)
        np.testing.assert_array_equal(values.numpy(), sorted_values.numpy()[k - 1])
        np.testing.assert_array_equal(indices.numpy(), sorted_indices.numpy()[k - 1])
    y = x[:, 0:1]  # a strided view, against its copy
    for got, want in zip(tg.kthvalue(y, 7), tg.kthvalue(y.clone(), 7)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    strided = tg.tensor([0.0, -1.0, 1.0, -2.0, 2.0])[::2]
    assert [t.item() for t in strided.kthvalue(2)] == [1.0, 1]
    np.testing.assert_array_equal(x.numpy(), a)
    rep = tg.tensor([3.0, 5, 4, 1, 1, 5])
    assert tg.kthvalue(rep, 3)[0].item() == 3 and tg.kthvalue(rep, 2)[0].item() == 1
    a[np.arange(size), :, rng.integers(0, size, size)] = NAN
    x = tg.tensor(a)
    sorted_values, sorted_indices = tg.sort(x)
    for k in (int(rng.integers(1, size + 1)), 1, size, size - 1):
        values, indices = tg.kthvalue(x, k, keepdim=False)
        np.testing.assert_array_equal(values.numpy(), sorted_values.numpy()[:, :, k - 1])
        np.testing.assert_array_equal(indices.numpy(), sorted_indices.numpy()[:, :, k - 1])


def test_kthvalue_scalar():
    """Port of test_kthvalue_scalar: a 0-d tensor and its 1-element 1-d form agree."""
    res = tg.tensor(2.0).kthvalue(1)
    ref = tg.tensor([2.0]).kthvalue(1)
    assert res[0].shape == () and res[0].item() == ref[0].item() and res[1].item() == ref[1].item()
