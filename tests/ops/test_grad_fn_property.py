"""``Tensor.grad_fn`` is read-only and regenerates a stale view's history on read, as torch's
getter does (Note [Stale views] in ops/views.py); the engine itself reads the slot."""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import engine, ops


def _stale_view():
    x = engine.ones(4, requires_grad=True)
    b = ops.mul(x, 1.0)
    v = b[0:2]
    b.mul_(2.0)  # a recorded in-place op on the base: v's recorded history is out of date
    return x, b, v


def test_reading_grad_fn_of_a_stale_view_regenerates_it():
    x, b, v = _stale_view()
    # The first thing read is grad_fn itself (before, only requires_grad/is_leaf refreshed).
    assert v.grad_fn.name() == "AsStridedBackward0"
    assert v.grad_fn.next_functions == ((b.grad_fn, 0),)  # one node on the base, as torch's
    ops.sum(ops.mul(v, 3.0)).backward()
    np.testing.assert_array_equal(x.grad._data, [6.0, 6.0, 0.0, 0.0])


def test_stale_view_grad_fn_matches_torch():
    torch = pytest.importorskip("torch")
    names = []
    for lib, mod in ((torch, torch), (engine, ops)):
        x = lib.ones(4, requires_grad=True)
        b = x * 1.0 if lib is torch else mod.mul(x, 1.0)
        v = b[0:2]
        w = b[1:3]
        b.mul_(2.0)
        fn_v, fn_w = v.grad_fn, w.grad_fn  # read before anything else touches the views
        name = (lambda f: type(f).__name__) if lib is torch else (lambda f: f.name())
        names.append((name(fn_v), name(fn_w), name(fn_v.next_functions[0][0]), fn_w.next_functions[0][0] is b.grad_fn))
    assert names[0] == names[1] == ("AsStridedBackward0", "AsStridedBackward0", "MulBackward0", True)


@pytest.mark.parametrize("shape, view", [((), lambda b: b[...]), ((5,), lambda b: b[1:4:2]),
                                         ((3, 4), lambda b: b[1:, ::2]), ((2, 3, 4), lambda b: b.transpose(0, 2)[1])])
def test_a_regenerated_view_backprops_its_elements_of_the_new_base(shape, view):
    a = np.arange(1.0, 1.0 + int(np.prod(shape))).reshape(shape)
    x = engine.tensor(a, dtype=np.float64, requires_grad=True)
    b = ops.mul(x, 1.0)
    v = view(b)
    b.mul_(ops.mul(x, 1.0))  # b = x * x now
    assert v.grad_fn.name() == "AsStridedBackward0"
    w = engine.tensor(np.random.default_rng(0).standard_normal(v.shape))
    ops.sum(ops.mul(v, w)).backward()
    scattered = engine.zeros(*shape, dtype=np.float64)
    view(scattered)._data[...] = w._data  # w at the view's positions of the base, zeros elsewhere
    np.testing.assert_allclose(x.grad._data, 2.0 * a * scattered._data, rtol=1e-12)


def test_a_fresh_view_and_a_leaf_read_as_before():
    x = engine.ones(3, requires_grad=True)
    assert x.grad_fn is None
    y = ops.mul(x, 2.0)
    v = y[1:]
    assert v.grad_fn.name() == "SliceBackward0" and y.grad_fn.name() == "MulBackward0"


@pytest.mark.parametrize("value", [None, "node"])
def test_grad_fn_is_not_writable(value):
    x = engine.ones(3, requires_grad=True)
    y = ops.mul(x, 2.0)
    fn = y.grad_fn
    with pytest.raises(AttributeError, match="attribute 'grad_fn' of 'Tensor' objects is not writable"):
        y.grad_fn = fn if value == "node" else None
    assert y.grad_fn is fn
    ops.sum(y).backward()  # the graph is intact
    np.testing.assert_array_equal(x.grad._data, [2.0, 2.0, 2.0])
