"""Round-4 ports of TestAutogradDeviceType tests (test/test_autograd.py) on threadgrad's
virtual devices, which have their own worker threads as GPUs do: errors across devices and
reentrant backward, gradient devices, grad assignment, requires_grad rules, where.

Each test cites its original; assertions are PyTorch 2.13's, translated to threadgrad's API.
"""
from __future__ import annotations

import numpy as np
import pytest
from parity_util import arr, assert_equal, randn

from threadgrad import engine, ops


@pytest.mark.parametrize("broadcast", [False, True])
def test_where_functional(broadcast):
    """Port of test_autograd.py TestAutogradDeviceType.test_where_functional (cpu)."""
    cond = engine.tensor(np.random.rand(5, 5) > 0.5)
    if broadcast:
        x, y = randn(5, 1, 5, requires_grad=True), randn(5, 5, 1, requires_grad=True)
        go = randn(5, 5, 5)
    else:
        x, y = randn(5, 5, requires_grad=True), randn(5, 5, requires_grad=True)
        go = randn(5, 5)

    def where(cond, x, y):
        return ops.where(cond, x, y)

    assert engine.gradcheck(where, [cond, x, y])
    assert engine.gradgradcheck(where, [cond, x, y], [go])


def test_where_scalar():
    """Port of test_autograd.py TestAutogradDeviceType.test_where_scalar (cpu)."""
    x = randn(5, 5, requires_grad=True)
    cond = engine.tensor(np.random.rand(5, 5) > 0.5)
    assert engine.gradcheck(lambda c, x: ops.where(c, 4.0, x), (cond, x))
    assert engine.gradgradcheck(lambda c, x: ops.where(c, 4.0, x), (cond, x))
    assert engine.gradcheck(lambda c, x: ops.where(c, x, 4.0), (cond, x))
    assert engine.gradgradcheck(lambda c, x: ops.where(c, x, 4.0), (cond, x))


@pytest.mark.parametrize("device", ["cpu", "virtual:1"])
def test_grad_assignment(device):
    """Port of test_autograd.py TestAutogradDeviceType.test_grad_assignment."""
    x = engine.randn(5, 5, device=device)
    with pytest.raises(TypeError, match="expected to be a Tensor or None"):
        x.grad = 0
    with pytest.raises(RuntimeError):
        x.grad = engine.randn(2, 2, device=device)
    with pytest.raises(RuntimeError):
        x.grad = engine.zeros(5, 5, dtype=engine.int64, device=device)
    with pytest.raises(RuntimeError):
        x.grad = x
    if device != "cpu":
        with pytest.raises(RuntimeError):
            t_cpu = engine.rand(5, 5)
            t_cpu.grad = engine.randn(5, 5, device=device)
        with pytest.raises(RuntimeError):
            x.grad = engine.randn(5, 5, device="virtual:2")


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_set_requires_grad_only_for_floats(dtype):
    """Port of test_autograd.py TestAutogradDeviceType.test_set_requires_grad_only_for_floats (cpu)."""
    dt = getattr(engine, dtype)

    def f1():
        engine.ones(1, dtype=dt).requires_grad_()

    def f2():
        a = engine.ones(1, dtype=dt)
        a.requires_grad = True

    def f3():
        engine.ones(1, dtype=dt, requires_grad=True)

    a = engine.ones(1, dtype=dt)
    a.requires_grad = False
    a.requires_grad_(False)
    for f in (f1, f2, f3):
        if dtype.startswith("float"):
            f()
        else:
            with pytest.raises(RuntimeError, match="floating point"):
                f()


@pytest.mark.timeout(60)
def test_backward_device():
    """Port of test_autograd.py TestAutogradDeviceType.test_backward_device (devices[1] -> virtual:2)."""
    device = [None]

    class Identity(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad_output):
            device[0] = grad_output.device
            return grad_output.clone()

    v = engine.randn(1, device="virtual:2", requires_grad=True)
    Identity.apply(v).backward()
    assert str(device[0]) == "virtual:2"
    assert str(v.grad.device) == "virtual:2"


@pytest.mark.timeout(60)
def test_inputbuffer_add_multidevice():
    """Port of test_autograd.py TestAutogradDeviceType.test_inputbuffer_add_multidevice."""
    inp = engine.randn(1, device="virtual:1", requires_grad=True)
    output = inp.to("virtual:2") + inp.to("virtual:2")
    output.backward()
    assert str(inp.grad.device) == "virtual:1"
    assert inp.grad.tolist() == [2.0]


def test_copy_():
    """Port of test_autograd.py TestAutogradDeviceType.test_copy_ (cpu; float16/32/64)."""
    x = engine.randn(10, requires_grad=True)
    for dt in (engine.float16, engine.float32, engine.float64):
        y = engine.empty(10, dtype=dt)
        y.copy_(x)
        assert y.requires_grad
        y.sum().backward()
    assert x.grad.tolist() == [3.0] * 10
