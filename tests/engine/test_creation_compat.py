"""Creation functions accept what a PyTorch user writes, and keep the contract's own forms.

Expected values are written out literally from torch's documented behaviour (torch.arange,
torch.full, torch.zeros/ones/empty/rand/randn with ``size=``); torch itself is not imported.
"""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import devices, engine


def arr(t: engine.Tensor) -> np.ndarray:
    return np.asarray(t.detach().numpy())


def check(t: engine.Tensor, shape: tuple, dtype, values=None) -> None:
    assert isinstance(t, engine.Tensor)
    assert t.shape == shape
    assert t.dtype == np.dtype(dtype)
    if values is not None:
        assert t.tolist() == values


# --- arange --------------------------------------------------------------------------------

@pytest.mark.parametrize("call, dtype, values", [
    # torch.arange(start=0, end, step=1): one positional is `end`
    (lambda: engine.arange(end=3), np.int64, [0, 1, 2]),
    (lambda: engine.arange(start=1, end=5, step=2), np.int64, [1, 3]),
    (lambda: engine.arange(start=1, end=5), np.int64, [1, 2, 3, 4]),
    (lambda: engine.arange(1, end=5), np.int64, [1, 2, 3, 4]),
    (lambda: engine.arange(1, 5, step=2), np.int64, [1, 3]),
    (lambda: engine.arange(1, end=6, step=2), np.int64, [1, 3, 5]),
    (lambda: engine.arange(end=3.0), np.float32, [0.0, 1.0, 2.0]),
    (lambda: engine.arange(start=0, end=1, step=0.25), np.float32, [0.0, 0.25, 0.5, 0.75]),
    (lambda: engine.arange(start=1.5, end=4), np.float32, [1.5, 2.5, 3.5]),
    (lambda: engine.arange(start=5, end=0, step=-1), np.int64, [5, 4, 3, 2, 1]),
    (lambda: engine.arange(end=3, dtype=np.float64), np.float64, [0.0, 1.0, 2.0]),
    (lambda: engine.arange(start=1, end=5, step=2, dtype=engine.float32), np.float32, [1.0, 3.0]),
    (lambda: engine.arange(end=engine.tensor(3)), np.int64, [0, 1, 2]),     # 0-d tensors, as torch
    (lambda: engine.arange(engine.tensor(2.0)), np.float32, [0.0, 1.0]),
])
def test_arange_torch_keywords(call, dtype, values):
    check(call(), (len(values),), dtype, values)


@pytest.mark.parametrize("call, dtype, values", [
    # the forms engine.arange accepted before keywords were added
    (lambda: engine.arange(5), np.int64, [0, 1, 2, 3, 4]),
    (lambda: engine.arange(2, 8, 2), np.int64, [2, 4, 6]),
    (lambda: engine.arange(0, 1, 0.25), np.float32, [0.0, 0.25, 0.5, 0.75]),
    (lambda: engine.arange(3.0), np.float32, [0.0, 1.0, 2.0]),
    (lambda: engine.arange(3, dtype=np.float64), np.float64, [0.0, 1.0, 2.0]),
    (lambda: engine.arange(5, 0, -1), np.int64, [5, 4, 3, 2, 1]),
    (lambda: engine.arange(3, step=2), np.int64, [0, 2]),               # end, then step=
    (lambda: engine.arange(end=3, step=2), np.int64, [0, 2]),
    (lambda: engine.arange(5, None), np.int64, [0, 1, 2, 3, 4]),        # end=None meant "no end"
    (lambda: engine.arange(5, None, 2), np.int64, [0, 2, 4]),
    (lambda: engine.arange(1, 5, 2, np.float32), np.float32, [1.0, 3.0]),  # dtype positionally
    (lambda: engine.arange(np.int32(3)), np.int64, [0, 1, 2]),
    (lambda: engine.arange(0), np.int64, []),
])
def test_arange_existing_forms_still_work(call, dtype, values):
    check(call(), (len(values),), dtype, values)


def test_arange_device_and_requires_grad(virtual1):
    t = engine.arange(end=3, device="virtual:1")
    assert t.device is virtual1 and t.tolist() == [0, 1, 2]
    assert engine.arange(0, 3, 1, None, "virtual:1").device is virtual1      # device positionally
    r = engine.arange(start=0.0, end=2.0, requires_grad=True)
    assert r.requires_grad and r.is_leaf and r.dtype == np.float32
    assert engine.arange(0.0, 2.0, 1.0, None, None, True).requires_grad


@pytest.mark.parametrize("call, exc, message", [
    (lambda: engine.arange(), TypeError, "missing required argument 'end'"),
    (lambda: engine.arange(start=5), TypeError, "missing required argument 'end'"),
    (lambda: engine.arange(step=2), TypeError, "missing required argument 'end'"),
    (lambda: engine.arange(start=1, step=2), TypeError, "missing required argument 'end'"),
    (lambda: engine.arange(end=None), TypeError, "missing required argument 'end'"),
    (lambda: engine.arange(5, start=1), TypeError, "single positional argument (5), which arange reads as 'end'"),
    (lambda: engine.arange(1, 5, end=3), TypeError, "got multiple values for argument 'end'"),
    (lambda: engine.arange(1, 5, start=0), TypeError, "got multiple values for argument 'start'"),
    (lambda: engine.arange(1, 5, 2, step=1), TypeError, "got multiple values for argument 'step'"),
    (lambda: engine.arange(1, 5, 1, np.float32, dtype=np.float64), TypeError,
     "got multiple values for argument 'dtype'"),
    (lambda: engine.arange(1, 5, 1, None, None, False, 7), TypeError, "7 arguments were given"),
    (lambda: engine.arange("a"), TypeError, "argument 'end' must be a number, not str"),
    (lambda: engine.arange(start=[0], end=3), TypeError, "argument 'start' must be a number, not list"),
    (lambda: engine.arange(engine.ones(2)), TypeError, "argument 'end' must be a number or a 0-d tensor"),
    (lambda: engine.arange(0, 5, 0), RuntimeError, "step must be nonzero"),
])
def test_arange_bad_combinations(call, exc, message):
    with pytest.raises(exc) as info:
        call()
    assert type(info.value) is exc
    assert message in str(info.value)


# --- zeros / ones / empty / rand / randn ----------------------------------------------------

FILLED = [("zeros", 0.0), ("ones", 1.0), ("empty", None)]
RANDOM = ["rand", "randn"]
SHAPED = [name for name, _ in FILLED] + RANDOM


@pytest.mark.parametrize("name", SHAPED)
@pytest.mark.parametrize("kwargs, shape", [
    ({"size": (2, 3)}, (2, 3)),        # torch.zeros(size=(2, 3))
    ({"size": [2, 3]}, (2, 3)),
    ({"size": (4,)}, (4,)),
    ({"size": ()}, ()),                # torch.zeros(size=()) is 0-d
    ({"size": (0, 2)}, (0, 2)),
    ({"size": 3}, (3,)),               # an int, like the positional form (torch wants a tuple)
])
def test_size_keyword(name, kwargs, shape):
    t = getattr(engine, name)(**kwargs)
    check(t, shape, np.float32)
    fill = dict(FILLED).get(name)
    if fill is not None:
        np.testing.assert_array_equal(arr(t), np.full(shape, fill, dtype=np.float32))


@pytest.mark.parametrize("name", SHAPED)
@pytest.mark.parametrize("args, shape", [
    ((2, 3), (2, 3)),
    (((2, 3),), (2, 3)),
    (([2, 3],), (2, 3)),
    ((), ()),                          # zeros() is 0-d (torch needs a size; kept from the contract)
    ((np.int64(2),), (2,)),
])
def test_positional_shapes_still_work(name, args, shape):
    check(getattr(engine, name)(*args), shape, np.float32)


@pytest.mark.parametrize("name", SHAPED)
def test_size_keyword_with_dtype_device_requires_grad(name, virtual1):
    t = getattr(engine, name)(size=(2, 2), dtype=np.float64, device="virtual:1", requires_grad=True)
    check(t, (2, 2), np.float64)
    assert t.device is virtual1 and t.requires_grad and t.is_leaf and t.grad is None


def test_size_keyword_integer_dtype():
    check(engine.zeros(size=(2,), dtype=np.int64), (2,), np.int64, [0, 0])
    check(engine.ones(size=(2,), dtype=engine.bool_), (2,), np.bool_, [True, True])


@pytest.mark.parametrize("name", RANDOM)
def test_random_size_keyword_draws_the_same_numbers(name):
    fn = getattr(engine, name)
    engine.manual_seed(11)
    a = arr(fn(2, 3))
    engine.manual_seed(11)
    b = arr(fn(size=(2, 3)))
    np.testing.assert_array_equal(a, b)


def test_rand_range_with_size_keyword():
    u = arr(engine.rand(size=(1000,)))
    assert u.min() >= 0.0 and u.max() < 1.0


@pytest.mark.parametrize("name", SHAPED)
@pytest.mark.parametrize("args, kwargs, message", [
    ((2,), {"size": (2,)}, "got multiple values for argument 'size'"),
    (((2, 3),), {"size": (2,)}, "got multiple values for argument 'size'"),
    ((), {"size": True}, "argument 'size' must be a tuple of ints, not bool"),
    ((), {"size": "ab"}, "argument 'size' must be a tuple of ints, not str"),
    ((), {"size": 2.0}, "argument 'size' must be a tuple of ints, not float"),
])
def test_shape_and_size_conflicts(name, args, kwargs, message):
    with pytest.raises(TypeError) as info:
        getattr(engine, name)(*args, **kwargs)
    assert str(info.value).startswith(f"{name}()")
    assert message in str(info.value)


@pytest.mark.parametrize("name", SHAPED)
def test_negative_size_is_value_error(name):
    with pytest.raises(ValueError, match="non-negative"):
        getattr(engine, name)(size=(2, -1))


# --- full ------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, shape, dtype, values", [
    # torch.full(size, fill_value): dtype from the fill value (bool, int64, float32)
    (lambda: engine.full(size=(2, 3), fill_value=1.5), (2, 3), np.float32, [[1.5] * 3] * 2),
    (lambda: engine.full((2,), fill_value=7), (2,), np.int64, [7, 7]),
    (lambda: engine.full(size=(2,), fill_value=True), (2,), np.bool_, [True, True]),
    (lambda: engine.full([2, 2], 1), (2, 2), np.int64, [[1, 1], [1, 1]]),
    (lambda: engine.full(size=(), fill_value=3.0), (), np.float32, 3.0),
    (lambda: engine.full(size=(2,), fill_value=7, dtype=np.float64), (2,), np.float64, [7.0, 7.0]),
    # the contract's full(shape, value, ...) and its keyword names
    (lambda: engine.full((2, 2), 1.5), (2, 2), np.float32, [[1.5, 1.5], [1.5, 1.5]]),
    (lambda: engine.full(shape=(3,), value=7), (3,), np.int64, [7, 7, 7]),
    (lambda: engine.full((3,), value=2.5), (3,), np.float32, [2.5, 2.5, 2.5]),
    (lambda: engine.full(2, True), (2,), np.bool_, [True, True]),
    (lambda: engine.full((2,), 7, np.float64), (2,), np.float64, [7.0, 7.0]),   # dtype positionally
    # the two spellings mixed
    (lambda: engine.full(size=(2,), value=0.5), (2,), np.float32, [0.5, 0.5]),
    (lambda: engine.full(shape=(2,), fill_value=0.5), (2,), np.float32, [0.5, 0.5]),
])
def test_full(call, shape, dtype, values):
    check(call(), shape, dtype, values)


def test_full_size_keyword_device_and_requires_grad(virtual1):
    t = engine.full(size=(2,), fill_value=2.0, device=virtual1, requires_grad=True)
    assert t.device is virtual1 and t.requires_grad and t.tolist() == [2.0, 2.0]


@pytest.mark.parametrize("call, message", [
    (lambda: engine.full(), "full() missing 2 required arguments: 'size' and 'fill_value'"),
    (lambda: engine.full((2,)), "full() missing 1 required argument: 'fill_value'"),
    (lambda: engine.full(fill_value=1), "full() missing 1 required argument: 'size'"),
    (lambda: engine.full(size=(2,)), "full() missing 1 required argument: 'fill_value'"),
    (lambda: engine.full((2,), 1, size=(3,)), "full() got multiple values for argument 'size'"),
    (lambda: engine.full(shape=(2,), size=(3,), fill_value=1), "full() got multiple values for argument 'size'"),
    (lambda: engine.full((2,), 1, fill_value=2), "full() got multiple values for argument 'fill_value'"),
    (lambda: engine.full(size=(2,), value=1, fill_value=2), "full() got multiple values for argument 'fill_value'"),
])
def test_full_bad_combinations(call, message):
    with pytest.raises(TypeError) as info:
        call()
    assert message in str(info.value)


def test_full_like_fill_value_keyword():
    src = engine.ones(2, 2, dtype=np.float64)
    check(engine.full_like(src, fill_value=3), (2, 2), np.float64, [[3.0, 3.0], [3.0, 3.0]])  # t's dtype, as torch
    check(engine.full_like(src, 3), (2, 2), np.float64, [[3.0, 3.0], [3.0, 3.0]])
    with pytest.raises(TypeError, match="multiple values for argument 'fill_value'"):
        engine.full_like(src, 3, fill_value=4)
    with pytest.raises(TypeError, match="missing 1 required argument: 'fill_value'"):
        engine.full_like(src)


def test_like_functions_unchanged():
    src = engine.tensor([[1, 2, 3]])
    check(engine.zeros_like(src), (1, 3), np.int64, [[0, 0, 0]])
    check(engine.ones_like(src, dtype=np.float32), (1, 3), np.float32, [[1.0, 1.0, 1.0]])
    assert engine.empty_like(src).device is devices.cpu


@pytest.mark.parametrize("data, dtype, values", [
    ([np.float64(1.5)], np.float64, [1.5]),                       # numpy scalars keep their dtype
    ([[np.float32(1.0), np.float32(2.0)]], np.float32, [[1.0, 2.0]]),
    ([np.int32(3)], np.int32, [3]),
    ([1.5, 2.0], np.float32, [1.5, 2.0]),                           # Python floats: float32
    ([engine.tensor(1.0), engine.tensor(2.0)], np.float32, [1.0, 2.0]),  # 0-d tensors, their dtype
    ([engine.tensor(1.0, dtype=np.float64)], np.float64, [1.0]),
])
def test_tensor_from_a_sequence_infers_the_dtype_as_torch(data, dtype, values):
    t = engine.tensor(data)
    assert t.dtype == dtype and t.tolist() == values
