"""Ports of PyTorch's saved-tensor-hook tests (test/test_autograd.py, TestAutograd):
``torch.autograd.graph.saved_tensors_hooks`` -> ``engine.saved_tensors_hooks``, ``save_on_cpu``.

The originals also read ``grad_fn._saved_self`` / ``_raw_saved_*``, private torch attributes
with no counterpart here; those lines are dropped and the gradient checks kept. A test
threadgrad fails today is a strict xfail saying what it does instead.
"""
from __future__ import annotations

import os
import tempfile
import uuid
import warnings

import numpy as np
import pytest
from parity_util import arr, assert_equal, ones, randn, t

from threadgrad import engine, ops


def test_saved_variable_packing_unpacking_saved_original_with_default_hooks():
    """Port of test_autograd.py TestAutograd.test_saved_variable_packing_unpacking_saved_original_with_default_hooks."""
    def pack(x):
        warnings.warn("pack")
        return x

    with engine.saved_tensors_hooks(pack, lambda x: x):
        a = ones(5, requires_grad=True)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            y = a * a
            assert len(w) == 2  # a is saved twice

    with engine.saved_tensors_hooks(lambda x: x, lambda x: x):
        a = randn(5, requires_grad=True)
        y = a * a
        y.sum().backward()
        assert_equal(a.grad, 2 * arr(a))

    with engine.saved_tensors_hooks(lambda x: 2 * x, lambda x: x / 2):
        a = randn(5, requires_grad=True)
        y = a * a
        y.sum().backward()
        assert_equal(a.grad, 2 * arr(a))

    with engine.saved_tensors_hooks(lambda x: 2 * x, lambda x: x):
        a = randn(5, requires_grad=True)
        y = a * a
        y.sum().backward()
        assert_equal(a.grad, 4 * arr(a))

    a = randn(5, requires_grad=True)
    y = a * a
    y.sum().backward()
    assert_equal(a.grad, 2 * arr(a))


def test_saved_variable_packing_unpacking_did_not_save_original_with_default_hooks():
    """Port of test_autograd.py TestAutograd.test_saved_variable_packing_unpacking_did_not_save_original_with_default_hooks."""
    with engine.saved_tensors_hooks(lambda x: x, lambda x: x):
        a = randn(5, requires_grad=True)
        y = ops.exp(a)
        y.sum().backward()
        assert_equal(a.grad, y)


def test_setting_default_saved_variable_hooks_twice_should_not_fail():
    """Port of test_autograd.py TestAutograd.test_setting_default_saved_variable_hooks_twice_should_not_fail."""
    with engine.saved_tensors_hooks(lambda x: x, lambda x: x):
        with engine.saved_tensors_hooks(lambda x: x, lambda x: x):
            pass


def test_setting_default_saved_variable_hooks_twice_should_use_inner():
    """Port of test_autograd.py TestAutograd.test_setting_default_saved_variable_hooks_twice_should_use_inner."""
    with engine.saved_tensors_hooks(lambda x: 3 * x, lambda x: 3 * x):
        b = randn(5, requires_grad=True)
        with engine.saved_tensors_hooks(lambda x: 5 * x, lambda x: 5 * x):
            a = randn(5, requires_grad=True)
            y = a * a
        z = b * b
    y.sum().backward()
    z.sum().backward()
    assert_equal(a.grad, 2 * 5 * 5 * arr(a))
    assert_equal(b.grad, 2 * 3 * 3 * arr(b))


def test_saved_tensor_hooks_custom_error_propagation():
    """Port of test_autograd.py TestAutograd.test_saved_tensor_hooks_custom_error_propagation."""
    class CustomError(Exception):
        pass

    class error_on_pack_hook(engine.saved_tensors_hooks):
        def __init__(self) -> None:
            def pack_hook(x):
                raise CustomError("pack")
            super().__init__(pack_hook, lambda x: x)

    class error_on_unpack_hook(engine.saved_tensors_hooks):
        def __init__(self) -> None:
            def unpack_hook(x):
                raise CustomError("unpack")
            super().__init__(lambda x: x, unpack_hook)

    a = t(1.0, requires_grad=True)
    with error_on_pack_hook():
        with pytest.raises(CustomError, match="pack"):
            ops.sin(a)
    with error_on_unpack_hook():
        out = ops.sin(a)
        with pytest.raises(CustomError, match="unpack"):
            out.backward()


def test_saved_tensor_hooks_custom_function_intermediates():
    """Port of test_autograd.py TestAutograd.test_saved_tensor_hooks_custom_function_intermediates."""
    class Func(engine.Function):
        @staticmethod
        def forward(ctx, x):
            intermediate = x.exp()
            ctx.save_for_backward(intermediate.clone().detach().requires_grad_(True))
            return x.exp()

        @staticmethod
        def backward(ctx, grad_out):
            (intermediate,) = ctx.saved_tensors
            return grad_out * intermediate

    a = t(1.0, requires_grad=True)
    with engine.saved_tensors_hooks(lambda x: x, lambda x: x):
        out = Func.apply(a)
    out.backward()
    assert_equal(a.grad, np.e)


def test_unpack_hooks_exec_count():
    """Port of test_autograd.py TestAutograd.test_unpack_hooks_exec_count."""
    pack_count = 0
    unpack_count = 0

    def pack_hook(x):
        nonlocal pack_count
        pack_count += 1
        return x

    def unpack_hook(x):
        nonlocal unpack_count
        unpack_count += 1
        return x

    x = ones(4, requires_grad=True)
    y = ones(4, requires_grad=False)
    with engine.saved_tensors_hooks(pack_hook, unpack_hook):
        out_test = x * y
        assert pack_count == 1
        assert unpack_count == 0
        out_test.sum().backward()
        assert pack_count == 1
        assert unpack_count == 1


def test_saved_tensors_hook_version_counter_not_shared():
    """Port of test_autograd.py TestAutograd.test_saved_tensors_hook_version_counter_not_shared."""
    class Test(engine.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            before = a.version
            x.add_(1)
            assert a.version == before
            return grad_output

    a = t(1.0, requires_grad=True)
    a_replacement = a.clone()
    with engine.saved_tensors_hooks(lambda x: a_replacement, lambda x: x):
        b = Test.apply(a)
    b.backward()


def test_save_on_cpu_and_checkpoint():
    """Port of test_autograd.py TestAutograd.test_save_on_cpu_and_checkpoint."""
    a = randn(2, 2, requires_grad=True)
    b = a.pow(2).pow(2).pow(2).pow(2)
    b.sum().backward()
    b_grad = a.grad.clone()
    with engine.no_grad():
        a.grad.zero_()

    with engine.save_on_cpu():
        h = a.pow(2)
        h = engine.checkpoint(lambda x: x.pow(2).pow(2), h, use_reentrant=False)
        c = h.pow(2)
    c.sum().backward()
    c_grad = a.grad.clone()
    with engine.no_grad():
        a.grad.zero_()

    def f(a):
        h = a.pow(2)
        with engine.save_on_cpu():
            h = h.pow(2).pow(2)
        return h.pow(2)

    d = engine.checkpoint(f, a, use_reentrant=False)
    d.sum().backward()
    d_grad = a.grad.clone()
    assert_equal(c_grad, b_grad)
    assert_equal(d_grad, b_grad)


def test_pack_hook_with_inplace_modification_should_fail():
    """Port of test_autograd.py TestAutograd.test_pack_hook_with_inplace_modification_should_fail
    (the saved_tensors_hooks half)."""
    a = randn(5, requires_grad=True)

    def inc(x):
        x += 1
        return x

    with engine.saved_tensors_hooks(inc, lambda x: x):
        with pytest.raises(RuntimeError, match="A saved tensor pack hook is modifying its input in place."):
            ops.exp(a)


def test_saving_variable_to_disk():
    """Port of test_autograd.py TestAutograd.test_saving_variable_to_disk (torch.save/load ->
    numpy.save/load of the array)."""
    with tempfile.TemporaryDirectory() as tmp_dir:
        def pack(x):
            name = os.path.join(tmp_dir, str(uuid.uuid4()) + ".npy")
            np.save(name, x.detach().numpy())
            return name

        def unpack(name):
            return engine.tensor(np.load(name))

        with engine.saved_tensors_hooks(pack, unpack):
            a = ones(5, requires_grad=True)
            y = a * a
            y.sum().backward()
            assert_equal(a.grad, 2 * arr(a))


def test_default_saved_tensors_hooks_double_backward():
    """Port of test_autograd.py TestAutograd.test_default_saved_tensors_hooks_double_backward."""
    with engine.saved_tensors_hooks(lambda x: x, lambda x: x):
        a = randn(5, requires_grad=True)
        s = (a ** 3).sum()
        (g,) = engine.grad(s, (a,), create_graph=True)
        g.sum().backward()
        assert_equal(a.grad, 6 * arr(a))

    with engine.saved_tensors_hooks(lambda x: 2 * x, lambda x: x):
        a = randn(5, requires_grad=True)
        s = (a ** 3).sum()
    (g,) = engine.grad(s, (a,), create_graph=True)
    g.sum().backward()
    assert_equal(a.grad, 6 * 2 * arr(a))  # a is saved once

    a = randn(5, requires_grad=True)
    s = (a ** 3).sum()
    with engine.saved_tensors_hooks(lambda x: 2 * x, lambda x: x):
        (g,) = engine.grad(s, (a,), create_graph=True)
        g.sum().backward()
        assert_equal(a.grad, 6 * 4 * arr(a))  # pow's backward saves grad and a

    with engine.saved_tensors_hooks(lambda x: 2 * x, lambda x: x):
        a = randn(5, requires_grad=True)
        s = (a ** 3).sum()
        (g,) = engine.grad(s, (a,), create_graph=True)
        g.sum().backward()
        assert_equal(a.grad, 6 * 8 * arr(a))


def test_wrapped_number_saved_tensors_hooks():
    """Port of test_autograd.py TestAutograd.test_wrapped_number_saved_tensors_hooks."""
    def err_hook(x):
        raise RuntimeError("this hook should not be called")

    with engine.saved_tensors_hooks(err_hook, err_hook):
        a = randn(5, requires_grad=True)
        out = (a * 3).sum()
        engine.grad(out, (a,))


@pytest.mark.parametrize("dtype", [engine.float32, engine.float64])
@pytest.mark.parametrize("pin_memory", [True, False])
def test_graph_save_on_cpu(dtype, pin_memory):
    """Port of test_autograd.py TestAutograd.test_graph_save_on_cpu (dense, cpu cases)."""
    with engine.save_on_cpu(pin_memory):
        a = engine.randn(5, dtype=dtype, requires_grad=True)
        y = a * a
        y.sum().backward()
        assert a.grad.dtype == a.dtype
        np.testing.assert_allclose(arr(a.grad), 2 * arr(a), rtol=1e-6)
