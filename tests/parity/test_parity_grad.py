"""Ports of PyTorch's backward / grad tests (test/test_autograd.py, TestAutograd): gradients,
retain_graph, ``inputs=``, ``allow_unused``, ``materialize_grads``, grad mode, in-place
version checks.

Each test names its original in its docstring; assertions are PyTorch's, translated to
threadgrad's API. A test threadgrad fails today is a strict xfail saying what it does instead.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from parity_util import arr, assert_equal, ones, rand, randn, t, zeros

from threadgrad import engine, ops


def test_accumulate_grad():
    """Port of test_autograd.py TestAutograd.test_accumulate_grad."""
    grad_output = ones(5, 5)

    def compute_grad(create_graph):
        x = randn(5, 5, requires_grad=True)
        y = x + 2
        y.backward(grad_output, retain_graph=True)
        x_grad = x.grad
        x_grad_clone = x.grad.clone()
        y.backward(grad_output, create_graph=create_graph)
        return x_grad, x_grad_clone

    x_grad, x_grad_clone = compute_grad(create_graph=False)  # accumulates in place
    assert_equal(x_grad, x_grad_clone * 2)
    x_grad, x_grad_clone = compute_grad(create_graph=True)  # out of place
    assert_equal(x_grad, x_grad_clone)


@pytest.mark.parametrize("create_graph", [False, True])
def test_accumulate_grad_tensor_reference(create_graph):
    """Port of test_autograd.py TestAutograd.test_accumulate_grad_tensor_reference (the dense
    case; sparse gradients have no counterpart)."""
    params = t([1.5, 1.5]).requires_grad_()
    params.grad = t([1.5, 1.5])
    grad_saved = params.grad
    params.backward(t([1.5, 1.5]), create_graph=create_graph)
    assert (grad_saved is params.grad) == (not create_graph)


def test_accumulate_grad_with_zero_numel_grad():
    """Port of test_autograd.py TestAutograd.test_accumulate_grad_with_zero_numel_grad."""
    a = rand(4, 0, requires_grad=True)
    b = rand(4, 1, requires_grad=True)
    c = a + b
    assert c.shape == (4, 0)
    c.sum().backward()
    assert_equal(b.grad, np.zeros((4, 1)))
    assert_equal(a.grad, np.zeros((4, 0)))


def test_hessian_vector():
    """Port of test_autograd.py TestAutograd.test_hessian_vector."""
    x = randn(2, 2, requires_grad=True)
    y = randn(2, 2, requires_grad=True)
    z = x ** 2 + y * x + y ** 2
    z.backward(ones(2, 2), create_graph=True)
    with engine.no_grad():
        x_grad = 2 * x + y
        y_grad = x + 2 * y
    assert_equal(x.grad, x_grad)
    assert_equal(y.grad, y_grad)

    grad_sum = 2 * x.grad + y.grad
    grad_sum.backward(ones(2, 2))
    assert_equal(x.grad, x_grad + 5)
    assert_equal(y.grad, y_grad + 4)


def test_grad():
    """Port of test_autograd.py TestAutograd.test_grad."""
    x = randn(2, 2, requires_grad=True)
    y = randn(2, 2, requires_grad=True)
    z = x ** 2 + y * x + y ** 2
    z.backward(ones(2, 2), create_graph=True)
    x_grad = 2 * x + y
    y_grad = x + 2 * y
    assert_equal(x.grad, x_grad)
    assert_equal(y.grad, y_grad)

    grad_sum = 2 * x.grad + y.grad
    x_hv = engine.grad(outputs=[grad_sum], grad_outputs=[ones(2, 2)], inputs=[x], create_graph=True)
    assert_equal(x_hv[0], np.ones((2, 2)) * 5)
    assert_equal(x.grad, x_grad)
    assert_equal(y.grad, y_grad)

    grad_out = ones(2)
    with pytest.raises(RuntimeError) as info:
        engine.grad(outputs=[grad_sum], grad_outputs=[grad_out], inputs=[x], create_graph=True)
    assert str(info.value) == ("Mismatch in shape: grad_output[0] has a shape of " + str(grad_out.shape)
                               + " and output[0] has a shape of " + str(grad_sum.shape) + ".")


def test_grad_nonleaf():
    """Port of test_autograd.py TestAutograd.test_grad_nonleaf."""
    x_init = randn(2, 2, requires_grad=True)
    x = x_init
    y = randn(2, 2, requires_grad=True)
    grad_output = ones(2, 2)

    def fn(x):
        return x ** 2 + y * x + y ** 2

    for _ in range(5):
        (grad_x,) = engine.grad(fn(x), x, grad_outputs=grad_output, create_graph=True)
        assert y.grad is None
        assert x.grad is None
        assert_equal(grad_x, 2 * x + y)
        x = x + 0.05 * grad_x

    assert fn(x).sum().item() > fn(x_init).sum().item()
    x.backward(grad_output)
    assert y.grad is not None
    assert x_init.grad is not None


def test_grad_nonleaf_many_outputs():
    """Port of test_autograd.py TestAutograd.test_grad_nonleaf_many_outputs (chunk -> split)."""
    x = randn(4, 2, requires_grad=True)
    a, b = ops.split(x, 2)
    hook_called = [False]

    def hook(*grads):
        hook_called[0] = True

    x.register_hook(hook)
    go = randn(2, 2)
    grad_a, grad_b = engine.grad((a + 2 * b), [a, b], grad_outputs=go, create_graph=True)
    assert_equal(grad_a, go)
    assert_equal(grad_b, go * 2)
    assert not hook_called[0]
    assert x.grad is None


def test_grad_materialize_grads():
    """Port of test_autograd.py TestAutograd.test_grad_materialize_grads."""
    x = t(0.5, requires_grad=True)
    a = t(1.0, requires_grad=True)
    y = x * a
    dydx = engine.grad(y, x, create_graph=True)
    d2ydx2_none = engine.grad(dydx, x, create_graph=True, allow_unused=True)
    d2ydx2 = engine.grad(dydx, x, create_graph=True, allow_unused=True, materialize_grads=True)
    d3ydx3 = engine.grad(d2ydx2, x, materialize_grads=True)  # allow_unused implied
    assert d2ydx2_none[0] is None
    assert d2ydx2[0].item() == 0
    assert d3ydx3[0].item() == 0
    with pytest.raises(ValueError, match="Expected allow_unused to be True or not passed when"):
        engine.grad(y, x, allow_unused=False, materialize_grads=True)


def test_unused_grad_requires_grad_with_materialize():
    """Port of test_autograd.py TestAutograd.test_unused_grad_requires_grad_with_materialize."""
    x = ones(10, requires_grad=True)
    y = ones(10, requires_grad=True)
    z = (x ** 2).sum()
    g = engine.grad(z, (x, y), allow_unused=True, materialize_grads=True, create_graph=False)
    assert not g[0].requires_grad
    assert not g[1].requires_grad


def test_sharded_grad():
    """Port of test_autograd.py TestAutograd.test_sharded_grad."""
    leaves = [zeros(5, 5, requires_grad=True) for _ in range(10)]
    intermediates = [leaf * i + leaf * leaf for i, leaf in enumerate(leaves)]
    loss = sum(v * i for i, v in enumerate(intermediates)).sum()

    def group(items, size):
        return (items[i:i + size] for i in range(0, len(items), size))

    d_intermediates = [d for batch in group(intermediates, 2) for d in engine.grad(loss, batch)]
    engine.backward(intermediates, d_intermediates)
    for i, leaf in enumerate(leaves):
        assert_equal(leaf.grad, i * i * (1 + arr(leaf)))


def test_backward_badcalls():
    """Port of test_autograd.py TestAutograd.test_backward_badcalls."""
    x = ones(1)
    with pytest.raises(RuntimeError, match="does not require grad"):
        x.backward()


def test_grad_badcalls():
    """Port of test_autograd.py TestAutograd.test_grad_badcalls."""
    x = ones(1)
    y = x ** 2
    with pytest.raises(RuntimeError, match="does not require grad"):
        engine.grad(x, y)
    with pytest.raises(RuntimeError, match="does not require grad"):
        engine.grad(y, x)
    x = ones(1, requires_grad=True)
    y = x ** 2
    engine.grad(y, x)


def test_grad_empty_inputs():
    """Port of test_autograd.py TestAutograd.test_grad_empty_inputs. The stored copy of that
    test expects ValueError("grad requires non-empty inputs."); torch 2.13 itself raises
    RuntimeError("`inputs` argument to `grad()` cannot be empty.") here (checked against the
    2.13 wheel), and 2.13 is the contract."""
    x = t([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="`inputs` argument to `grad\\(\\)` cannot be empty."):
        engine.grad(2 * x, [], grad_outputs=t([1.0]))


def test_grad_unreachable():
    """Port of test_autograd.py TestAutograd.test_grad_unreachable."""
    x = ones(1, requires_grad=True)
    y = ones(1, requires_grad=True)
    z = x * 2  # noqa: F841 - gives x and y their AccumulateGrad nodes
    w = y * 2  # noqa: F841
    grad_x, grad_y = engine.grad(x * 2, [x, y], allow_unused=True)
    assert_equal(grad_x, x * 2)
    assert grad_y is None

    z = ones(1, requires_grad=True)
    grad_x, grad_z = engine.grad(x * 2, [x, z], allow_unused=True)
    assert_equal(grad_x, x * 2)
    assert grad_z is None

    with pytest.raises(RuntimeError, match="Set allow_unused=True"):
        engine.grad(x * 2, [x, y], allow_unused=False)


def test_grad_unreachable_discovery():
    """Port of test_autograd.py TestAutograd.test_grad_unreachable_discovery."""
    class MyFunc(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, x):
            pytest.fail("This node should not be executed!")

    x = MyFunc.apply(randn(1, requires_grad=True) * 2)
    y = randn(1, requires_grad=True)
    (gY,) = engine.grad(x, (y,), allow_unused=True)
    assert gY is None

    x = MyFunc.apply(randn(1, requires_grad=True) * 2)
    y = randn(1, requires_grad=True)
    z = randn(1, requires_grad=True)
    (gY, gZ) = engine.grad(x + z, (y, z), allow_unused=True)
    assert gY is None
    assert gZ is not None

    x = MyFunc.apply(randn(1, requires_grad=True) * 2)
    y = randn(1, requires_grad=True)
    engine.backward(x, inputs=(y,))  # allow_unused is implied
    assert y.grad is None


def test_backward():
    """Port of test_autograd.py TestAutograd.test_backward."""
    v = randn(5, 5, requires_grad=True)
    x = randn(5, 5, requires_grad=True)
    y = (rand(5, 5) + 0.1).requires_grad_(True)
    z = randn(5, 5, requires_grad=True)
    grad_output = randn(5, 5)

    v.backward(grad_output)
    assert_equal(v.grad, grad_output)

    a = x + (y * z) + 4 * z ** 2 * x / y
    a.backward(grad_output)
    X, Y, Z, G = arr(x), arr(y), arr(z), arr(grad_output)
    assert_equal(x.grad, (4 * Z ** 2 / Y + 1) * G)
    assert_equal(y.grad, (Z - 4 * X * Z ** 2 / Y ** 2) * G)
    assert_equal(z.grad, (8 * X * Z / Y + Y) * G)


def test_multi_backward():
    """Port of test_autograd.py TestAutograd.test_multi_backward."""
    x = randn(5, 5, requires_grad=True)
    y = randn(5, 5, requires_grad=True)
    q = randn(5, 5, requires_grad=True)
    a = randn(5, 5, requires_grad=True)
    b = randn(5, 5, requires_grad=True)
    q2 = q * 2
    z = x + y + q2
    c = a * b + q2
    grad_z = randn(5, 5)
    grad_c = randn(5, 5)
    engine.backward([z, c], [grad_z, grad_c])
    assert_equal(x.grad, grad_z)
    assert_equal(y.grad, grad_z)
    assert_equal(a.grad, arr(grad_c) * arr(b))
    assert_equal(b.grad, arr(grad_c) * arr(a))
    assert_equal(q.grad, (arr(grad_c) + arr(grad_z)) * 2)


def test_multi_backward_no_grad():
    """Port of test_autograd.py TestAutograd.test_multi_backward_no_grad."""
    x = randn(5, 5, requires_grad=True)
    y = randn(5, 5, requires_grad=False)
    z = x + y
    q = y * 2
    with pytest.raises(RuntimeError):
        engine.backward([z, q], [ones(5, 5), ones(5, 5)])


def test_backward_with_inputs():
    """Port of test_autograd.py TestAutograd.test_backward_with_inputs."""
    x = randn(2, 2, requires_grad=True)
    y = randn(2, 2, requires_grad=True)

    def fn():
        return x ** 2 + y * x + y ** 2

    gradient = ones(2, 2)
    x_grad_expected = 2 * arr(x) + arr(y)
    y_grad_expected = arr(x) + 2 * arr(y)

    @engine.no_grad()
    def reset_grad():
        x.grad.zero_()
        y.grad.zero_()

    engine.backward(fn(), gradient, inputs=[x, y])
    assert_equal(x.grad, x_grad_expected)
    assert_equal(y.grad, y_grad_expected)

    reset_grad()
    engine.backward(fn(), gradient, inputs=[x])
    assert_equal(x.grad, x_grad_expected)
    assert_equal(y.grad, np.zeros((2, 2)))

    reset_grad()
    engine.backward(fn(), gradient, inputs=[y])
    assert_equal(y.grad, y_grad_expected)
    assert_equal(x.grad, np.zeros((2, 2)))

    reset_grad()
    engine.backward(fn(), gradient, inputs=y)
    assert_equal(y.grad, y_grad_expected)
    assert_equal(x.grad, np.zeros((2, 2)))

    reset_grad()
    with pytest.raises(RuntimeError, match="cannot be empty"):
        engine.backward(fn(), gradient, inputs=[])


def test_backward_with_scalar_input():
    """Port of test_autograd.py TestAutograd.test_backward_with_scalar_input."""
    x = engine.randn(size=(), dtype=engine.float64, requires_grad=True)
    out = x ** 2
    out.backward(inputs=x)
    assert_equal(x.grad, 2 * x)


def test_backward_with_nonleaf_inputs():
    """Port of test_autograd.py TestAutograd.test_backward_with_nonleaf_inputs."""
    x = randn(2, 2, requires_grad=True)
    x_nonleaf = x * 1
    y = randn(2, 2, requires_grad=True)
    z = randn(2, 2, requires_grad=True)
    out = x_nonleaf ** 2 + y * x_nonleaf + y ** 2
    out.backward(ones(2, 2), create_graph=True, inputs=[x, y, x_nonleaf])
    assert_equal(y.grad, arr(x) + 2 * arr(y))
    assert_equal(x.grad, 2 * arr(x) + arr(y))
    assert_equal(x_nonleaf.grad, 2 * arr(x_nonleaf) + arr(y))

    out.backward(ones(2, 2), create_graph=True, inputs=[z])
    assert z.grad is None


def test_dependent_backward():
    """Port of test_autograd.py TestAutograd.test_dependent_backward."""
    x = randn(10, requires_grad=True)
    y = x ** 2
    z = y ** 3
    go_y = randn(10)
    go_z = randn(10)
    engine.backward([y, z], [go_y, go_z])
    xd = arr(x)
    assert_equal(x.grad, 2 * xd * arr(go_y) + 6 * xd ** 5 * arr(go_z))


def test_free_deep_graph():
    """Port of test_autograd.py TestAutograd.test_free_deep_graph (depth 150000)."""
    def scope():
        x = randn(1, requires_grad=True)
        y = x.clone()
        for _ in range(150000):
            y = y + y * 0.000001

    scope()  # freeing the chain must not overflow the stack


def test_free_deep_graph_pyfunction():
    """Port of test_autograd.py TestAutograd.test_free_deep_graph_pyfunction (depth 150000)."""
    class MyOp(engine.Function):
        @staticmethod
        def forward(ctx, tensor1, tensor2):
            return tensor1 + tensor2

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output, grad_output

    def scope():
        x = randn(1, requires_grad=True)
        y = x.clone()
        with np.errstate(over="ignore"):  # y doubles each step, as in torch: inf soon
            for _ in range(150000):
                y = MyOp.apply(y, y)

    scope()


def test_no_unnecessary_save():
    """Port of test_autograd.py TestAutograd.test_no_unnecessary_save (detach_ -> a fresh
    detached alias each round)."""
    mu = ones(1, requires_grad=True)
    x = engine.empty(1, dtype=engine.float64)
    loss = 0
    for i in range(3):
        x = x.detach()
        x.copy_(mu + i)
        ft = t([float(i)])
        multiplied = x * ft
        s = multiplied.sum()
        loss += s
    loss.backward()
    assert_equal(mu.grad, t([3.0]))


def test_no_grad():
    """Port of test_autograd.py TestAutograd.test_no_grad."""
    x = ones(5, 5, requires_grad=True)
    y = ones(5, 5) * 4
    with engine.no_grad():
        w = x + y

    def adder(x, y):
        return x + y

    adders = [engine.no_grad()(adder), engine.no_grad(adder)]
    for add in adders:
        z = add(x, y)
        assert not w.requires_grad
        with pytest.raises(RuntimeError):
            w.backward(ones(5, 5))
        assert w.grad_fn is None
        assert not z.requires_grad
        with pytest.raises(RuntimeError):
            z.backward(ones(5, 5))
        assert z.grad_fn is None

    with engine.no_grad():
        assert not engine.is_grad_enabled()
        w = adders[0](x, y)
        assert not engine.is_grad_enabled()


def test_enable_grad_decorator_no_paren():
    """Port of test_autograd.py TestAutograd.test_enable_grad_decorator_no_paren."""
    x = ones(1, requires_grad=True)

    @engine.enable_grad
    def doubler(x):
        return x * 2

    with engine.no_grad():
        z = doubler(x)
    assert z.requires_grad


def test_set_grad_generator_functions():
    """Port of test_autograd.py TestAutograd.test_set_grad_generator_functions."""
    @engine.no_grad()
    def gen_no_grad():
        for i in range(10):
            assert engine.is_grad_enabled() is False
            yield i

    with engine.enable_grad():
        for _ in gen_no_grad():
            assert engine.is_grad_enabled() is True

    @engine.enable_grad()
    def gen_enable_grad():
        for i in range(10):
            assert engine.is_grad_enabled() is True
            yield i

    with engine.no_grad():
        for _ in gen_enable_grad():
            assert engine.is_grad_enabled() is False


def test_set_grad_generator_functions_recursive():
    """Port of test_autograd.py TestAutograd.test_set_grad_generator_functions_recursive."""
    @engine.enable_grad()
    def enable_rec(depth):
        assert engine.is_grad_enabled()
        if depth > 0:
            no_grad_rec(depth - 1)
            assert engine.is_grad_enabled()

    @engine.no_grad()
    def no_grad_rec(depth):
        assert not engine.is_grad_enabled()
        if depth > 0:
            enable_rec(depth - 1)
            assert not engine.is_grad_enabled()

    def enable_cm(depth):
        with engine.enable_grad():
            assert engine.is_grad_enabled()
            if depth > 0:
                no_grad_cm(depth - 1)
                assert engine.is_grad_enabled()

    def no_grad_cm(depth):
        with engine.no_grad():
            assert not engine.is_grad_enabled()
            if depth > 0:
                enable_cm(depth - 1)
                assert not engine.is_grad_enabled()

    for outer, expected in ((engine.enable_grad, True), (engine.no_grad, False)):
        with outer():
            assert engine.is_grad_enabled() is expected
            enable_rec(10)
            assert engine.is_grad_enabled() is expected
            enable_cm(10)
            assert engine.is_grad_enabled() is expected


def test_set_grad_coroutines():
    """Port of test_autograd.py TestAutograd.test_set_grad_coroutines."""
    @engine.no_grad()
    def coro_no_grad(n=10):
        assert not engine.is_grad_enabled()
        for i in range(n):
            assert not engine.is_grad_enabled()
            r = yield i
            assert not engine.is_grad_enabled()
            assert i == r
        assert not engine.is_grad_enabled()

    @engine.enable_grad()
    def coro_enable_grad(n=10):
        assert engine.is_grad_enabled()
        for i in range(n):
            assert engine.is_grad_enabled()
            r = yield i
            assert engine.is_grad_enabled()
            assert i == r
        assert engine.is_grad_enabled()

    for outer, coro_fn, expected in ((engine.enable_grad, coro_no_grad, True),
                                     (engine.no_grad, coro_enable_grad, False)):
        with outer():
            coro, r = coro_fn(), None
            try:
                while True:
                    assert engine.is_grad_enabled() is expected
                    r = coro.send(r)
                    assert engine.is_grad_enabled() is expected
            except StopIteration:
                pass


def test_set_grad_coroutines_exit():
    """Port of test_autograd.py TestAutograd.test_set_grad_coroutines_exit."""
    def make(mode, expected):
        @mode()
        def coro(state):
            for i in range(10):
                try:
                    assert engine.is_grad_enabled() is expected
                    yield i
                except GeneratorExit:
                    assert engine.is_grad_enabled() is expected
                    state.add("GeneratorExit")
                    raise
        return coro

    for outer, mode, expected in ((engine.enable_grad, engine.no_grad, False),
                                  (engine.no_grad, engine.enable_grad, True)):
        state = set()
        with outer():
            coro = make(mode, expected)(state)
            for _ in range(5):
                next(coro)
            coro.close()
        assert "GeneratorExit" in state


def test_no_grad_python_function():
    """Port of test_autograd.py TestAutograd.test_no_grad_python_function."""
    x = ones(5, 5, requires_grad=True)

    class MyOp(engine.Function):
        @staticmethod
        def forward(self, x):
            return x + 1

        @staticmethod
        def backward(self, dy):
            return dy

    with engine.no_grad():
        y = MyOp.apply(x)
    assert not y.requires_grad


def test_indexing_duplicates():
    """Port of test_autograd.py TestAutograd.test_indexing_duplicates."""
    def fresh():
        return engine.arange(1.0, 17).to(engine.float64).reshape(4, 4).detach().requires_grad_()

    y = fresh()
    idx = [1, 1, 3, 2, 1, 2]
    y[engine.tensor(idx)].sum().backward()
    expected = np.zeros((4, 4))
    for i in idx:
        expected[i] += 1
    assert_equal(y.grad, expected)

    y = fresh()
    y[([1, 1, 3, 2, 1, 2], [0])].sum().backward()
    expected = np.zeros((4, 4))
    for i in [1, 1, 3, 2, 1, 2]:
        expected[i][0] += 1
    assert_equal(y.grad, expected)

    y = fresh()
    y[([[1, 2], [0, 0]], [[0, 1], [1, 1]])].sum().backward()
    assert_equal(y.grad, [[0.0, 2.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])

    y = engine.arange(1.0, 65).to(engine.float64).reshape(4, 4, 4).detach().requires_grad_()
    y[([1, 1, 1], slice(None), slice(None))].sum().backward()
    expected = np.zeros((4, 4, 4))
    expected[1] = 3
    assert_equal(y.grad, expected)


def test_index_backward_does_not_save_tensor():
    """Port of test_autograd.py TestAutograd.test_index_backward_does_not_save_tensor."""
    a = t([1.0, 0, 0])
    b = zeros(3, requires_grad=True)
    tensor = b + 0
    tensor[a != 0] = tensor[a != 0]
    tensor.backward(engine.zeros_like(tensor))


def test_requires_grad():
    """Port of test_autograd.py TestAutograd.test_requires_grad (without the private
    _backward_hooks)."""
    x = randn(5, 5)
    y = randn(5, 5)
    z = randn(5, 5, requires_grad=True)
    a = x + y
    assert not a.requires_grad
    b = a + z
    assert b.requires_grad
    b.backward(ones(5, 5))


def test_requires_grad_():
    """Port of test_autograd.py TestAutograd.test_requires_grad_."""
    x = randn(5, 5)
    y = randn(5, 5, requires_grad=True)
    assert x is x.requires_grad_() and x.requires_grad
    assert y is y.requires_grad_() and y.requires_grad
    assert x is x.requires_grad_(True) and x.requires_grad
    assert y is y.requires_grad_(True) and y.requires_grad
    z = x * y
    with pytest.raises(RuntimeError):
        z.requires_grad_(False)
    assert z is z.requires_grad_() and z.requires_grad
    assert z is z.requires_grad_(True) and z.requires_grad
    assert x is x.requires_grad_(False) and not x.requires_grad
    assert y is y.requires_grad_(False) and not y.requires_grad


def test_requires_grad_inplace():
    """Port of test_autograd.py TestAutograd.test_requires_grad_inplace."""
    a = randn(5, 5)
    b = randn(5, 5, requires_grad=True)
    a += b
    assert a.requires_grad

    a = randn(5, 5) + 0
    b = randn(5, 5, requires_grad=True)
    a += b
    assert a.requires_grad


def test_no_requires_grad_inplace():
    """Port of test_autograd.py TestAutograd.test_no_requires_grad_inplace."""
    a = randn(2, 3)
    a.add_(5)
    a.requires_grad = True
    a.sum().backward()
    assert_equal(a.grad, np.ones((2, 3)))

    a = randn(2, 3)
    b = a[:]
    b.add_(5)
    a.requires_grad = True
    a.sum().backward()
    assert_equal(a.grad, np.ones((2, 3)))

    a = randn(2, 3)
    b = a[:]
    a.requires_grad = True
    with pytest.raises(RuntimeError):
        a.add_(5)
    with pytest.raises(RuntimeError):
        b.add_(5)


def test_duplicate_backward_root():
    """Port of test_autograd.py TestAutograd.test_duplicate_backward_root."""
    a = randn(5, 5, requires_grad=True)
    b = randn(5, 5, requires_grad=True)
    x = a * b
    grad_output = randn(5, 5)
    engine.backward([x, x], [grad_output, grad_output])
    assert_equal(a.grad, arr(b) * arr(grad_output) * 2)
    assert_equal(b.grad, arr(a) * arr(grad_output) * 2)


def test_backward_no_grad():
    """Port of test_autograd.py TestAutograd.test_backward_no_grad."""
    a = randn(5, 5, requires_grad=True)
    b = a + 2
    with pytest.raises(RuntimeError):
        engine.backward([b], [None])


def test_backward_twice_with_saved_values():
    """Port of test_autograd.py TestAutograd.test_backward_twice_with_saved_values."""
    b = randn(3, requires_grad=True)
    c = zeros(3)
    c[[1, 2]] = b[[1, 1]]
    c.backward(t([1, 1, 1]))
    with pytest.raises(RuntimeError, match="Specify retain_graph=True"):
        c.backward(t([1, 1, 1]))


def test_backward_twice_retained_graph_with_saved_values():
    """Port of test_autograd.py TestAutograd.test_backward_twice_retained_graph_with_saved_values."""
    b = randn(3, requires_grad=True)
    c = zeros(3)
    c[[1, 2]] = b[[1, 1]]
    c.backward(t([1, 1, 1]), retain_graph=True)
    c.backward(t([1, 1, 1]))
    assert_equal(b.grad, [0.0, 4.0, 0.0])


def test_backward_twice_without_saved_values():
    """Port of test_autograd.py TestAutograd.test_backward_twice_without_saved_values."""
    b = randn(3, requires_grad=True)
    c = b + 1
    c.backward(t([1, 1, 1]))
    c.backward(t([1, 1, 1]))
    assert_equal(b.grad, [2.0, 2.0, 2.0])


def test_next_functions():
    """Port of test_autograd.py TestAutograd.test_next_functions."""
    x = randn(5, 5, requires_grad=True)
    y = randn(5, 5, requires_grad=True)
    a = x + y
    assert a.grad_fn is not None
    next_functions = a.grad_fn.next_functions
    assert len(next_functions) == 2
    assert isinstance(next_functions[0][0], engine.AccumulateGrad)
    assert next_functions[0][1] == 0
    assert isinstance(next_functions[1][0], engine.AccumulateGrad)
    assert next_functions[1][1] == 0

    b = a + 5
    next_functions = b.grad_fn.next_functions
    assert len(next_functions) == 2
    assert next_functions[0][0] is a.grad_fn
    assert next_functions[1][0] is None


def test_inplace():
    """Port of test_autograd.py TestAutograd.test_inplace (exp_ -> an exp written back with copy_)."""
    x = ones(5, 5, requires_grad=True)
    y = (ones(5, 5) * 4).requires_grad_(True)

    z = x * y
    q = z + y
    w = z * y
    z.add_(2)
    q.backward(ones(5, 5), retain_graph=True)  # add saves nothing
    with pytest.raises(RuntimeError):
        w.backward(ones(5, 5))  # mul saved z

    z = x * y
    q = z * y
    r = z + y
    w = z.add_(y)
    w.backward(ones(5, 5), retain_graph=True)
    r.backward(ones(5, 5), retain_graph=True)
    with pytest.raises(RuntimeError):
        q.backward(ones(5, 5))

    leaf = ones(5, 5, requires_grad=True)
    x = leaf.clone()
    x.add_(10)
    assert_equal(x, np.ones((5, 5)) * 11)
    y = x + 2
    y.backward(ones(5, 5))
    assert_equal(leaf.grad, np.ones((5, 5)))
    z = x * y
    x.add_(2)
    with pytest.raises(RuntimeError):
        z.backward(ones(5, 5))


def test_mark_non_differentiable():
    """Port of test_autograd.py TestAutograd.test_mark_non_differentiable (masked_fill -> where)."""
    class MyFunction(engine.Function):
        @staticmethod
        def forward(ctx, inp):
            output = inp > 0
            ctx.mark_non_differentiable(output)
            return output

        @staticmethod
        def backward(ctx, grad_output):
            return (grad_output * 0).to(engine.float64)

    x = randn(5, 5, requires_grad=True)
    mask = MyFunction.apply(x)
    assert not mask.requires_grad
    y = ops.where(mask, 0.0, x)
    y.sum().backward()
    assert_equal(x.grad, np.where(arr(x) > 0, 0.0, 1.0))


def test_mark_non_differentiable_mixed():
    """Port of test_autograd.py TestAutograd.test_mark_non_differentiable_mixed."""
    class MyFunction(engine.Function):
        @staticmethod
        def forward(ctx, inp):
            a = inp + 1
            b = inp + 2
            ctx.mark_non_differentiable(a)
            return a, b

        @staticmethod
        def backward(ctx, grad_a, grad_b):
            assert (arr(grad_a) == 0).all()
            assert (arr(grad_b) == 1).all()
            return grad_b

    x = randn(5, 5, requires_grad=True)
    a, b = MyFunction.apply(x)
    assert not a.requires_grad
    assert b.requires_grad
    b.sum().backward()
    assert_equal(x.grad, np.ones((5, 5)))


def test_mark_non_differentiable_none():
    """Port of test_autograd.py TestAutograd.test_mark_non_differentiable_none."""
    class MyFunction(engine.Function):
        @staticmethod
        def forward(ctx, inp):
            output = inp.clone()
            ctx.mark_non_differentiable(output)
            return output

        @staticmethod
        def backward(ctx, grad_output):
            return None

    x = randn(5, 5, requires_grad=True)
    r = MyFunction.apply(x * x)
    (r * x).sum().backward()
    assert_equal(x.grad, arr(x) * arr(x))


@pytest.mark.parametrize("size,index", [
    ((5, 5), 1), ((5,), 1), ((1,), 0), ((10,), [0, 4, 2]), ((5, 5), ([0, 4], [2, 2])),
    ((5, 5, 5), (slice(None), slice(None), [1, 3])), ((5, 5, 5), (slice(None), [1, 3], slice(None))),
    ((5, 5, 5), ([1, 3], slice(None), slice(None))), ((5, 5, 5), (slice(None), [2, 4], [1, 3])),
    ((5, 5, 5), ([1, 3], [2, 4], slice(None))),
])
def test_setitem(size, index):
    """Port of test_autograd.py TestAutograd.test_setitem (the _test_setitem cases)."""
    x = ones(*size, requires_grad=True)
    y = x + 2
    y_version = y.version
    y[index] = 2
    assert y.version != y_version
    y.backward(ones(*size))
    expected = np.ones(size)
    expected[index] = 0
    assert_equal(x.grad, expected)


@pytest.mark.parametrize("size,index", [
    ((5, 5), 3), ((5, 5), ([0, 1], [1, 0])), ((5,), 3), ((5,), [[0, 1, 2, 3]]),
    ((5, 5, 5), (slice(None), slice(None), [1, 3])), ((5, 5, 5), (slice(None), [1, 3], slice(None))),
    ((5, 5, 5), ([1, 3], slice(None), slice(None))), ((5, 5, 5), (slice(None), [2, 4], [1, 3])),
    ((5, 5, 5), ([1, 3], [2, 4], slice(None))),
])
def test_setitem_tensor(size, index):
    """Port of test_autograd.py TestAutograd.test_setitem (the _test_setitem_tensor cases)."""
    x = ones(*size, requires_grad=True)
    y = x + 2
    y_version = y.version
    value = engine.full(x[index].shape, 7.0, dtype=engine.float64)
    value.requires_grad = True
    y[index] = value
    assert y.version != y_version
    y.backward(ones(*size))
    expected = np.ones(size)
    expected[index] = 0
    assert_equal(x.grad, expected)
    assert_equal(value.grad, np.ones(value.shape))

    x = randn(4, requires_grad=True)
    y = zeros(2, 3, 4)
    y[1] = x
    y.backward(randn(2, 3, 4))
    assert x.grad.shape == x.shape


def test_setitem_mask():
    """Port of test_autograd.py TestAutograd.test_setitem_mask."""
    mask = engine.tensor(np.random.default_rng(0).random((5, 5)) < 0.5)
    x = ones(5, 5, requires_grad=True)
    y = x + 2
    y[mask] = 2
    y.backward(ones(5, 5))
    assert_equal(x.grad, np.where(arr(mask), 0.0, 1.0))


def test_select_sum():
    """Port of test_autograd.py TestAutograd.test_select_sum."""
    x = randn(10, requires_grad=True)

    def func(x):
        return x[1].sum()

    assert engine.gradcheck(func, (x,))
    assert engine.gradgradcheck(func, (x,))


def test_select_expanded_v():
    """Port of test_autograd.py TestAutograd.test_select_expanded_v."""
    v_expanded = rand(10).expand(10, 10)
    a = rand(10, 10, 10, requires_grad=True)
    (result,) = engine.grad(a[0], a, v_expanded)
    expected = np.zeros((10, 10, 10))
    expected[0] = arr(v_expanded)
    assert_equal(result, expected)


def test_slice_expanded_v():
    """Port of test_autograd.py TestAutograd.test_slice_expanded_v."""
    v_expanded = rand(10, 1).expand(2, 10, 10)
    a = rand(10, 10, 10, requires_grad=True)
    (result,) = engine.grad(a[3:5], a, v_expanded)
    expected = np.zeros((10, 10, 10))
    expected[3:5] = arr(v_expanded)
    assert_equal(result, expected)


def test_unused_output():
    """Port of test_autograd.py TestAutograd.test_unused_output (chunk -> split)."""
    x = randn(10, 10, requires_grad=True)
    outputs = ops.split(x, 2)
    o = outputs[2] * 4 + 2
    o.sum().backward()
    expected = np.zeros((10, 10))
    expected[4:6] = 4
    assert_equal(x.grad, expected)

    with engine.no_grad():
        x.grad.zero_()
    grad_output = randn(2, 10)
    outputs = ops.split(x, 2)
    outputs[0].backward(grad_output)
    expected = np.zeros((10, 10))
    expected[:2] = arr(grad_output)
    assert_equal(x.grad, expected)


def test_saved_variable_saved_original_inplace_detach():
    """Port of test_autograd.py TestAutograd.test_saved_variable_saved_original_inplace_detach."""
    # Detaching a tensor that is saved input raises
    a = engine.tensor(1.0, requires_grad=True).clone()
    b = ops.sin(a)
    a.detach_()
    with pytest.raises(RuntimeError, match="Trying to use a saved tensor that has been detached"):
        b.backward()

    # Detaching a tensor that is saved as output is OK
    a = engine.tensor(1.0, requires_grad=True).clone()
    b = ops.exp(a)
    a.detach_()
    b.backward()
