"""engine.Tensor: creation functions, dtype rules, attributes and conversions."""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import devices, engine, ops


def arr(t: engine.Tensor) -> np.ndarray:
    return np.asarray(t.detach().numpy())


# --- engine.tensor dtype rules ------------------------------------------------------------

@pytest.mark.parametrize(
    "data, dtype",
    [
        (1.5, np.float32),
        ([1.0, 2.0], np.float32),
        ([[1.0], [2.5]], np.float32),
        ([1, 2.5], np.float32),  # mixed python ints and floats: a float tensor
        (3, np.int64),
        ([1, 2, 3], np.int64),
        (True, np.bool_),
        ([True, False], np.bool_),
        (np.array([1.0, 2.0], dtype=np.float64), np.float64),
        (np.array([1.0], dtype=np.float16), np.float16),
        (np.array([1, 2], dtype=np.int32), np.int32),
        (np.array([1, 2], dtype=np.uint8), np.uint8),
        (np.float64(2.0), np.float64),  # numpy scalars keep their dtype too
    ],
)
def test_tensor_default_dtype(data, dtype):
    t = engine.tensor(data)
    assert t.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(arr(t), np.asarray(data, dtype=dtype))


def test_tensor_explicit_dtype_wins():
    assert engine.tensor([1, 2], dtype=np.float64).dtype == np.float64
    assert engine.tensor([1.5], dtype="float16").dtype == np.float16
    assert engine.tensor(np.ones(2, dtype=np.float64), dtype=engine.float32).dtype == np.float32
    assert engine.tensor([1.9, -2.9], dtype=engine.int64).tolist() == [1, -2]


def test_tensor_copies_its_input():
    a = np.array([1.0, 2.0], dtype=np.float32)
    t = engine.tensor(a)
    a[0] = 100.0
    assert t.tolist() == [1.0, 2.0]
    u = engine.tensor(t)
    t._data[1] = 50.0
    assert u.tolist() == [1.0, 2.0]
    assert u.dtype == np.float32


def test_tensor_from_string_is_type_error():
    with pytest.raises(TypeError, match="cannot make a numeric tensor"):
        engine.tensor("abc")


def test_tensor_bad_dtype_is_type_error():
    with pytest.raises(TypeError, match="not a dtype"):
        engine.tensor([1.0], dtype=object())


def test_tensor_scalar_shape_and_ndim():
    t = engine.tensor(2.0)
    assert t.shape == ()
    assert t.ndim == 0
    assert t.item() == 2.0


# --- other creation functions -------------------------------------------------------------

@pytest.mark.parametrize("fn, fill", [(engine.zeros, 0.0), (engine.ones, 1.0)])
def test_zeros_ones(fn, fill):
    for t in (fn(2, 3), fn((2, 3)), fn([2, 3])):
        assert t.shape == (2, 3)
        assert t.dtype == np.float32
        assert t.device is devices.cpu
        assert t.is_leaf and not t.requires_grad
        np.testing.assert_array_equal(arr(t), np.full((2, 3), fill, dtype=np.float32))
    assert fn(4, dtype=np.int64).dtype == np.int64
    assert fn().shape == ()
    assert fn(0, 5).shape == (0, 5)


def test_empty_shape_dtype_and_requires_grad():
    t = engine.empty(3, 1, dtype=np.float64, requires_grad=True)
    assert t.shape == (3, 1)
    assert t.dtype == np.float64
    assert t.requires_grad and t.is_leaf and t.grad is None


def test_negative_shape_is_value_error():
    with pytest.raises(ValueError, match="non-negative"):
        engine.zeros(2, -1)


def test_full_dtypes():
    t = engine.full((2, 2), 1.5)
    assert t.dtype == np.float32
    assert t.tolist() == [[1.5, 1.5], [1.5, 1.5]]
    assert engine.full((3,), 7).dtype == np.int64
    assert engine.full((3,), 7).tolist() == [7, 7, 7]
    assert engine.full(2, True).dtype == np.bool_
    assert engine.full((2,), 7, dtype=np.float64).tolist() == [7.0, 7.0]
    assert engine.full((2,), 7, dtype=np.float64).dtype == np.float64


def test_like_functions_keep_shape_dtype_device(virtual1):
    src = engine.tensor(np.arange(6, dtype=np.float64).reshape(2, 3), device=virtual1)
    z = engine.zeros_like(src)
    o = engine.ones_like(src)
    for t, fill in ((z, 0.0), (o, 1.0)):
        assert t.shape == (2, 3)
        assert t.dtype == np.float64
        assert t.device is virtual1
        assert not t.requires_grad
        np.testing.assert_array_equal(arr(t), np.full((2, 3), fill))
    assert engine.zeros_like(src, dtype=np.float32).dtype == np.float32
    assert engine.ones_like(src, device="cpu").device is devices.cpu
    r = engine.zeros_like(engine.tensor([1.0, 2.0]), requires_grad=True)
    assert r.requires_grad and r.is_leaf


def test_creation_takes_device_specs_and_devices(virtual1):
    assert engine.zeros(2, device="virtual:1").device is virtual1
    assert engine.ones(2, device=virtual1).device is virtual1
    assert engine.tensor([1.0], device="virtual:1").device is virtual1
    assert engine.full((1,), 2.0, device="virtual:1").device is virtual1
    assert engine.arange(3, device="virtual:1").device is virtual1
    assert engine.rand(2, device="virtual:1").device is virtual1
    assert engine.randn(2, device=virtual1).device is virtual1


def test_arange():
    t = engine.arange(5)
    assert t.dtype == np.int64
    assert t.tolist() == [0, 1, 2, 3, 4]
    t = engine.arange(2, 8, 2)
    assert t.dtype == np.int64
    assert t.tolist() == [2, 4, 6]
    t = engine.arange(0, 1, 0.25)
    assert t.dtype == np.float32
    assert t.tolist() == [0.0, 0.25, 0.5, 0.75]
    t = engine.arange(3.0)
    assert t.dtype == np.float32
    assert t.tolist() == [0.0, 1.0, 2.0]
    assert engine.arange(3, dtype=np.float64).dtype == np.float64


def test_rand_randn_shapes_ranges_dtypes():
    u = engine.rand(1000)
    assert u.shape == (1000,) and u.dtype == np.float32
    a = arr(u)
    assert a.min() >= 0.0 and a.max() < 1.0
    n = engine.randn(4, 5, dtype=np.float64)
    assert n.shape == (4, 5) and n.dtype == np.float64
    r = engine.randn(3, requires_grad=True)
    assert r.requires_grad and r.is_leaf


def test_manual_seed_reproducible():
    engine.manual_seed(1234)
    a1, b1 = arr(engine.rand(8)), arr(engine.randn(2, 3))
    c1 = arr(engine.rand(4))
    engine.manual_seed(1234)
    a2, b2 = arr(engine.rand(8)), arr(engine.randn(2, 3))
    c2 = arr(engine.rand(4))
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(b1, b2)
    np.testing.assert_array_equal(c1, c2)
    assert not np.array_equal(a1[:4], c1)  # the stream advances between draws
    engine.manual_seed(1235)
    assert not np.array_equal(arr(engine.rand(8)), a1)


def test_manual_seed_same_numbers_on_every_device(virtual1):
    engine.manual_seed(7)
    a = arr(engine.randn(5))
    engine.manual_seed(7)
    b = arr(engine.randn(5, device=virtual1))
    np.testing.assert_array_equal(a, b)


# --- attributes ---------------------------------------------------------------------------

def test_leaf_attributes():
    t = engine.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    assert isinstance(t, engine.Tensor)
    assert isinstance(t._data, np.ndarray)
    assert t.shape == (1, 3)
    assert t.ndim == 2
    assert t.dtype == np.dtype(np.float32)
    assert t.device is devices.cpu
    assert t.requires_grad is True
    assert t.grad is None
    assert t.grad_fn is None
    assert t.is_leaf is True
    assert t.retains_grad is False
    assert t.version == 0


def test_non_leaf_attributes():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    assert y.requires_grad is True
    assert y.is_leaf is False
    assert y.grad_fn is not None and y.grad_fn.name() == "MulBackward0"
    assert y.grad is None
    assert y.retains_grad is False
    assert y.version == 0


def test_result_of_ops_without_grad_is_leaf():
    a = engine.tensor([1.0, 2.0])
    b = a * 3 + 1
    assert b.is_leaf and b.grad_fn is None and not b.requires_grad
    assert b.tolist() == [4.0, 7.0]


def test_requires_grad_only_for_floating_dtypes():
    with pytest.raises(RuntimeError, match="floating point"):
        engine.tensor([1, 2], requires_grad=True)
    t = engine.tensor([1, 2])
    with pytest.raises(RuntimeError, match="floating point"):
        t.requires_grad = True
    with pytest.raises(RuntimeError, match="floating point"):
        t.requires_grad_()
    assert t.requires_grad is False
    with pytest.raises(RuntimeError, match="floating point"):
        engine.zeros(2, dtype=np.int32, requires_grad=True)
    for dt in (np.float16, np.float32, np.float64):
        assert engine.zeros(1, dtype=dt, requires_grad=True).requires_grad


def test_requires_grad_setter_and_method_on_leaf():
    t = engine.tensor([1.0])
    assert t.requires_grad_() is t
    assert t.requires_grad
    t.requires_grad = False
    assert not t.requires_grad
    t.requires_grad_(True)
    assert t.requires_grad
    assert t.requires_grad_(False) is t
    assert not t.requires_grad


def test_requires_grad_false_on_non_leaf_raises():
    x = engine.tensor([1.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="you can only change requires_grad flags of leaf variables"):
        y.requires_grad = False
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf variables"):
        y.requires_grad_(False)
    assert y.requires_grad
    y.requires_grad = True  # allowed: it already requires grad
    assert y.requires_grad


def test_grad_setter_checks():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    g = engine.tensor([3.0, 4.0])
    x.grad = g
    assert x.grad is g
    x.grad = None
    assert x.grad is None
    with pytest.raises(RuntimeError, match="shape"):
        x.grad = engine.tensor([1.0, 2.0, 3.0])
    with pytest.raises(TypeError):
        x.grad = [1.0, 2.0]
    with pytest.raises(RuntimeError, match="virtual:1"):
        x.grad = engine.tensor([1.0, 2.0], device="virtual:1")


# --- conversions --------------------------------------------------------------------------

def test_numpy_refused_when_requires_grad():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"Use tensor\.detach\(\)\.numpy\(\)"):
        x.numpy()
    y = x * 2
    with pytest.raises(RuntimeError, match=r"Use tensor\.detach\(\)\.numpy\(\)"):
        y.numpy()
    a = x.detach().numpy()
    assert isinstance(a, np.ndarray)
    np.testing.assert_array_equal(a, np.array([1.0, 2.0], dtype=np.float32))
    assert a.dtype == np.float32


def test_numpy_without_grad():
    t = engine.tensor([[1, 2], [3, 4]])
    a = t.numpy()
    assert isinstance(a, np.ndarray)
    np.testing.assert_array_equal(a, [[1, 2], [3, 4]])
    assert a.dtype == np.int64


def test_numpy_asarray_of_a_tensor_is_its_host_array_as_in_torch():
    t = engine.tensor([[1.0, 2.0], [3.0, 4.0]])
    a = np.asarray(t)
    assert type(a) is np.ndarray and a.dtype == np.float32 and a.shape == (2, 2)
    assert a is t._data  # shared, like torch's numpy(): no copy
    c = np.array(t)  # numpy.array copies by default
    assert c is not t._data and c.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    d = np.asarray(t, dtype=np.float64)
    assert d.dtype == np.float64 and d.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    if int(np.__version__.split(".")[0]) >= 2:  # numpy 1.x's asarray has no copy=
        assert np.asarray(t, copy=False) is t._data
        with pytest.raises(ValueError, match="float32 to float64 needs a copy"):
            np.asarray(t, dtype=np.float64, copy=False)
    # a list of tensors stacks into numbers, not into an array of objects
    s = np.array([engine.tensor(1.0), engine.tensor(2.0)])
    assert s.dtype == np.float32 and s.tolist() == [1.0, 2.0]
    v = engine.tensor([5.0], device="virtual:1")  # virtual devices hold host arrays
    if int(np.__version__.split(".")[0]) >= 2:  # numpy 1.x's asarray has no copy=
        assert np.asarray(v, copy=False) is v._data


def test_tensor_and_full_take_tensors_as_torch_does():
    w = engine.tensor(2.0, requires_grad=True)
    for data in ([w, 1.0], [1.0, w], [[1, w]]):  # wherever the tensor sits, its value is taken
        t = engine.tensor(data)
        assert t.dtype == np.float32 and sorted(t.numpy().ravel().tolist()) == [1.0, 2.0]
        assert not t.requires_grad and t.grad_fn is None
    assert engine.full((2,), engine.tensor(3)).tolist() == [3, 3]  # a 0-d tensor is its number
    assert engine.full((2,), engine.tensor(3)).dtype == np.int64
    assert engine.full_like(engine.zeros(2), engine.tensor(2.5)).tolist() == [2.5, 2.5]
    with pytest.raises(TypeError, match="full\\(\\): argument 'fill_value' must be Number, not Tensor \\(this one requires grad"):
        engine.full((2,), w)
    with pytest.raises(TypeError, match="full_like\\(\\): argument 'fill_value' must be Number, not Tensor \\(this one has shape \\(1,\\)"):
        engine.full_like(engine.zeros(2), engine.tensor([2.0]))


def test_numpy_asarray_refused_when_requires_grad():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    for convert in (np.asarray, np.array, np.exp):
        with pytest.raises(RuntimeError, match=r"Can't call numpy\(\) on Tensor that requires grad"):
            convert(x)
    with pytest.raises(RuntimeError, match=r"Use tensor\.detach\(\)\.numpy\(\)"):
        np.asarray(x * 2)


def test_numpy_ufunc_on_a_tensor_returns_a_cpu_tensor_outside_the_graph():
    t = engine.tensor([0.0, 1.0], device="virtual:1")
    e = np.exp(t)
    assert isinstance(e, engine.Tensor) and e.device == devices.cpu
    assert e.grad_fn is None and not e.requires_grad
    np.testing.assert_allclose(e.numpy(), np.exp(np.array([0.0, 1.0], dtype=np.float32)))
    z = np.exp(engine.tensor(0.0))  # a 0-d result stays a tensor, as in torch
    assert isinstance(z, engine.Tensor) and z.shape == () and z.item() == 1.0
    g = np.greater(engine.tensor([1.0, 3.0]), 2.0)
    assert g.dtype == np.bool_ and g.tolist() == [False, True]


def test_item():
    assert engine.tensor(2.5).item() == 2.5
    assert isinstance(engine.tensor(2.5).item(), float)
    assert engine.tensor([7]).item() == 7
    assert isinstance(engine.tensor([7]).item(), int)
    x = engine.tensor([[3.0]], requires_grad=True)
    assert x.item() == 3.0  # item works while requires_grad, like torch
    with pytest.raises(RuntimeError, match="2 elements cannot be converted to Scalar"):
        engine.tensor([1.0, 2.0]).item()


def test_tolist():
    assert engine.tensor([[1.0, 2.0], [3.0, 4.0]]).tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert engine.tensor(5).tolist() == 5
    x = engine.tensor([1.5, 2.5], requires_grad=True)
    assert x.tolist() == [1.5, 2.5]
    assert engine.tensor([1.0], device="virtual:3").tolist() == [1.0]


def test_detach_shares_data_and_version_but_leaves_graph():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    d = y.detach()
    assert d.is_leaf and d.grad_fn is None and not d.requires_grad
    assert d._data is y._data or np.shares_memory(d._data, y._data)
    assert d.device is y.device and d.dtype == y.dtype
    y._vc[0] += 1  # (stands in for an in-place op: the counter is shared)
    assert d.version == 1
    xd = x.detach()
    assert np.shares_memory(xd._data, x._data)
    assert not xd.requires_grad
    assert x.requires_grad  # detach does not change the original


def test_clone_copies_and_is_differentiable():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    c = x.clone()
    assert not np.shares_memory(c._data, x._data)
    assert c.grad_fn.name() == "CloneBackward0"
    assert c.tolist() == [1.0, 2.0]
    (c * engine.tensor([3.0, 5.0])).sum().backward()
    assert x.grad.tolist() == [3.0, 5.0]
    plain = engine.tensor([4.0]).clone()
    assert plain.is_leaf and not plain.requires_grad and plain.tolist() == [4.0]


def test_to_dtype_and_back_gradient_dtype():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = x.to(engine.float64)
    assert y.dtype == np.float64
    assert y.grad_fn.name() == "ToCopyBackward0"
    (y * y).sum().backward()
    assert x.grad.dtype == np.float32
    assert x.grad.tolist() == [2.0, 4.0]
    assert x.to(np.float32) is x  # nothing to change: the same tensor


def test_to_device_and_cpu(virtual1):
    x = engine.tensor([1.0, 2.0])
    v = x.to("virtual:1")
    assert v.device is virtual1
    assert v.tolist() == [1.0, 2.0]
    assert not np.shares_memory(v._data, x._data)
    back = v.cpu()
    assert back.device is devices.cpu
    assert back.tolist() == [1.0, 2.0]
    assert x.cpu() is x
    assert x.to("cpu") is x
    assert x.to(devices.cpu) is x
    w = x.to(virtual1, np.float64)
    assert w.device is virtual1 and w.dtype == np.float64


def test_version_starts_at_zero_and_is_shared_by_views():
    x = engine.tensor([[1.0, 2.0], [3.0, 4.0]])
    v = x.reshape(4)
    t = x.transpose(0, 1)
    assert x.version == v.version == t.version == 0
    x._vc[0] += 1  # no in-place ops yet: bump the counter directly
    assert (x.version, v.version, t.version) == (1, 1, 1)
    y = x * 1  # an out-of-place op gets its own counter
    assert y.version == 0


def test_ops_module_functions_match_methods():
    x = engine.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert ops.add(x, 1).tolist() == (x + 1).tolist() == [[2.0, 3.0], [4.0, 5.0]]
    assert ops.matmul(x, x).tolist() == (x @ x).tolist() == [[7.0, 10.0], [15.0, 22.0]]
    assert ops.sum(x).item() == x.sum().item() == 10.0
