"""Ports of PyTorch's tensor-hook, node-hook and retain_grad tests (test/test_autograd.py, TestAutograd).

Each test names its original in its docstring; assertions are PyTorch's, translated to
threadgrad's API (``torch.X`` -> ``engine.X`` / ``ops.X``). A test that threadgrad fails today
is kept as a strict xfail whose reason says what threadgrad does instead (docs/parity.md).
"""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from parity_util import assert_equal, ones, rand, randn, t

from threadgrad import engine


class Mul2(engine.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class DoubleMul(engine.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, g1, g2):
        return g1 * 2 + g2 * 3


MUL2 = {"custom_function": Mul2.apply, "builtin": lambda x: x * 2}


def test_hooks():
    """Port of test_autograd.py TestAutograd.test_hooks."""
    x = ones(5, 5, requires_grad=True)
    y = ones(5, 5) * 4
    y.requires_grad_(True)
    counter = [0]

    def bw_hook(inc, grad):
        assert isinstance(grad, engine.Tensor)
        counter[0] += inc

    z = x ** 2 + x * 2 + x * y + y
    x.register_hook(lambda *args: bw_hook(0, *args))
    test = z.register_hook(lambda *args: bw_hook(1, *args))
    z.backward(ones(5, 5), retain_graph=True)
    assert counter[0] == 1

    test2 = z.register_hook(lambda *args: bw_hook(2, *args))
    z.backward(ones(5, 5), retain_graph=True)
    assert counter[0] == 4

    test2.remove()
    z.backward(ones(5, 5), retain_graph=True)
    assert counter[0] == 5

    def bw_hook_modify(grad):
        return grad.mul(2)

    test.remove()
    z.register_hook(bw_hook_modify)
    with engine.no_grad():
        y.grad.zero_()
    z.backward(ones(5, 5), retain_graph=True)
    assert_equal(y.grad, (x + 1) * 2)

    y.register_hook(bw_hook_modify)
    with engine.no_grad():
        y.grad.zero_()
    z.backward(ones(5, 5))
    assert_equal(y.grad, (x + 1) * 4)


def test_hook_with_no_name():
    """Port of test_autograd.py TestAutograd.test_hook_with_no_name."""
    class MyHookClass:
        def __call__(self, grad):
            return grad.clone()

    x = randn(5, requires_grad=True).clone()
    x.register_hook(MyHookClass())
    x.sum().backward()


def test_prehook_ordering():
    """Port of test_autograd.py TestAutograd.test_prehook_ordering."""
    log = []

    def hook1(g):
        log.append(1)
        return g * 3

    def hook2(gs):
        log.append(2)
        return tuple(g * 2 for g in gs)

    a = t(1.0, requires_grad=True)
    b = a.clone()
    b.grad_fn.register_prehook(hook2)
    b.register_hook(hook1)
    b.grad_fn.register_prehook(hook2)
    acc = b.grad_fn.next_functions[0][0]
    a.register_hook(hook1)
    acc.register_prehook(hook2)
    a.register_hook(hook1)

    b.sum().backward(retain_graph=True)
    assert log == [1, 2, 2, 1, 1, 2]

    log.clear()
    engine.grad(b.sum(), inputs=(a,), retain_graph=True)
    assert log == [1, 2, 2, 1, 1]

    log.clear()
    b.sum().backward(inputs=(b,))
    assert log == [1, 2, 2]
    assert b.grad.item() == 3


def test_retains_grad_can_always_observe_tensor_prehook():
    """Port of test_autograd.py TestAutograd.test_retains_grad_can_always_observe_tensor_prehook."""
    def tensor_prehook(g):
        return g * 2

    a = t(1.0, requires_grad=True)
    b = a.clone()
    b.register_hook(tensor_prehook)
    b.retain_grad()
    b.register_hook(tensor_prehook)
    b.clone().backward()
    assert b.grad.item() == 4

    a = t(1.0, requires_grad=True)
    b = a.clone()
    b.retain_grad()
    b.register_hook(tensor_prehook)
    b.clone().backward()
    assert b.grad.item() == 2


def test_accumulate_grad_posthooks_can_observe_tensor_prehook():
    """Port of test_autograd.py TestAutograd.test_accumulate_grad_posthooks_can_observe_tensor_prehook."""
    a = t(1.0, requires_grad=True)
    calls = []

    def tensor_prehook(g):
        return g * 2

    def posthook(gO, gI):
        assert_equal(gI[0], a * 2)
        assert len(gO) == 0
        calls.append("post")

    def prehook(gI):
        assert_equal(gI[0], a * 2)
        assert len(gI) == 1
        calls.append("pre")

    b = a.clone()
    acc = b.grad_fn.next_functions[0][0]
    acc.register_hook(posthook)
    acc.register_prehook(prehook)
    a.register_hook(tensor_prehook)
    b.backward()
    assert calls == ["pre", "post"]


def test_accumulate_grad_posthooks_should_not_execute():
    """Port of test_autograd.py TestAutograd.test_accumulate_grad_posthooks_should_not_execute."""
    def tensor_prehook(g):
        raise RuntimeError

    def posthook(gO, gI):
        raise RuntimeError

    a = t(1.0, requires_grad=True)
    a.register_hook(tensor_prehook)
    b = t(1.0, requires_grad=True)
    c = a.clone()
    acc = c.grad_fn.next_functions[0][0]
    acc.register_hook(posthook)
    out = a + b + c
    out.sum().backward(inputs=[b])
    assert b.grad.item() == 1.0 and a.grad is None


def test_hook_edge_case_when_called_with_grad():
    """Port of test_autograd.py TestAutograd.test_hook_edge_case_when_called_with_grad."""
    a = t(1.0, requires_grad=True)
    b = a * 2
    c = b * 2
    counts = {"tensor": 0, "pre": 0, "post": 0}

    def tensor_prehook(g):
        counts["tensor"] += 1

    def prehook(g):
        counts["pre"] += 1

    def posthook(gI, gO):
        counts["post"] += 1

    a.register_hook(tensor_prehook)
    b.register_hook(tensor_prehook)
    acc = b.grad_fn.next_functions[0][0]
    acc.register_hook(posthook)
    acc.register_prehook(prehook)
    b.grad_fn.register_hook(posthook)
    b.grad_fn.register_prehook(prehook)

    def run(expected, fn):
        for k in counts:
            counts[k] = 0
        fn()
        assert (counts["tensor"], counts["post"], counts["pre"]) == expected

    run((1, 0, 0), lambda: engine.grad(c, inputs=(b,), retain_graph=True))
    run((2, 1, 1), lambda: engine.grad(c, inputs=(a, b), retain_graph=True))
    run((2, 2, 2), lambda: c.backward(retain_graph=True))
    run((2, 2, 2), lambda: c.backward(inputs=(a, b), retain_graph=True))


@pytest.mark.parametrize("kind", sorted(MUL2))
def test_grad_fn_prehooks(kind):
    """Port of test_autograd.py TestAutograd.test_grad_fn_prehooks."""
    mul2 = MUL2[kind]
    a = t([1.0], requires_grad=True)
    b = mul2(a)
    post_counter = [0]
    pre_counter = [0]

    def posthook(grad_input, grad_output):
        assert pre_counter[0] == 3
        assert_equal(grad_output[0], np.ones(1) * 8)
        assert_equal(grad_input[0], np.ones(1) * 16)
        post_counter[0] += 1
        return grad_input

    def prehook(grad_output):
        pre_counter[0] += 1
        return (grad_output[0] * 2,)

    b.grad_fn.register_hook(posthook)
    b.grad_fn.register_hook(posthook)
    b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(lambda x: None)
    b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(lambda x: x)
    b.grad_fn.register_prehook(lambda x: None)
    b.sum().backward()
    assert post_counter[0] == 2
    assert pre_counter[0] == 3

    a = rand(3, 3, requires_grad=True)
    b = mul2(a)

    def prehook_none(grad_output):
        pre_counter[0] += 1
        return None

    b.grad_fn.register_prehook(prehook_none)
    b.sum().backward()
    assert pre_counter[0] == 4
    assert_equal(a.grad, np.ones((3, 3)) * 2)


def test_grad_fn_prehooks_multiple_outputs():
    """Port of test_autograd.py TestAutograd.test_grad_fn_prehooks_multiple_outputs (the custom
    Function half; torch.var_mean has no counterpart)."""
    class DoubleMul2(engine.Function):
        @staticmethod
        def forward(ctx, x, a, y):
            ctx.a = a
            return a * x * 2, a, a * y * 2

        @staticmethod
        def backward(ctx, g1, _a, g2):
            return ctx.a * g1 * 2, None, ctx.a * g2 * 2

    counter = [0]

    def prehook(grad_output):
        g1, ga, g2 = grad_output
        assert ga is None
        counter[0] += 1
        return (g1 * 2, None, g2 * 2)

    a = randn(3, 3, requires_grad=True)
    b = randn(3, 3, requires_grad=True)
    k = 3
    c, _, d = DoubleMul2.apply(a, k, b)
    c.grad_fn.register_prehook(prehook)
    (c + d).sum().backward()
    assert counter[0] == 1
    assert_equal(a.grad, np.ones((3, 3)) * 4 * k)
    assert_equal(b.grad, np.ones((3, 3)) * 4 * k)


@pytest.mark.parametrize("kind", sorted(MUL2))
def test_grad_fn_prehooks_remove_hooks(kind):
    """Port of test_autograd.py TestAutograd.test_grad_fn_prehooks_remove_hooks."""
    mul2 = MUL2[kind]
    a = rand(3, 3, requires_grad=True)
    b = mul2(a)
    counter = [0]

    def prehook(grad_output):
        counter[0] += 1
        return None

    handle = b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(prehook)
    handle.remove()
    b.sum().backward()
    assert_equal(a.grad, np.ones((3, 3)) * 2)
    assert counter[0] == 1

    a = rand(3, 3, requires_grad=True)
    b = mul2(a)
    counter = [0]

    def prehook1(grad_output):
        handle2.remove()
        handle3.remove()  # removing a removed hook is fine
        return None

    def prehook2(grad_output):
        counter[0] += 1
        return None

    b.grad_fn.register_prehook(prehook1)
    handle2 = b.grad_fn.register_prehook(prehook2)
    handle3 = b.grad_fn.register_prehook(prehook2)
    handle3.remove()
    b.sum().backward()
    assert_equal(a.grad, np.ones((3, 3)) * 2)
    assert counter[0] == 1


def test_hook_none():
    """Port of test_autograd.py TestAutograd.test_hook_none."""
    class NoneGradientFunction(engine.Function):
        @staticmethod
        def forward(ctx, x, y):
            assert ctx.needs_input_grad[0]
            assert not ctx.needs_input_grad[1]
            return x, y

        @staticmethod
        def backward(ctx, grad_x, grad_y):
            return grad_x, None

    was_called = [False]

    def hook(grad):
        assert grad is not None
        was_called[0] = True

    x = randn(5, 5, requires_grad=True)
    y = randn(5, 5)
    rx, ry = NoneGradientFunction.apply(x, y)
    rx.register_hook(hook)
    ry.register_hook(hook)
    sum(rx, ry).sum().backward()
    assert was_called[0]


def test_retain_grad():
    """Port of test_autograd.py TestAutograd.test_retain_grad."""
    inp = rand(1, 3, requires_grad=True)
    h1 = inp * 3
    out = (h1 * h1).sum()
    h1.retain_grad()
    h1.retain_grad()
    out.backward(retain_graph=True)
    assert_equal(h1.grad, h1 * 2)
    out.backward(retain_graph=True)
    assert_equal(h1.grad, h1 * 4)

    with engine.no_grad():
        inp.grad.zero_()
    inp.retain_grad()
    inp.retain_grad()
    out.backward()
    assert_equal(inp.grad, inp * 18)


def test_retain_grad_inplace():
    """Port of test_autograd.py TestAutograd.test_retain_grad_inplace."""
    a = t([1.0], requires_grad=True).clone()
    a.retain_grad()
    a.mul_(2)
    a.sum().backward()
    assert_equal(a.grad, t([1.0]))

    a = t([1.0], requires_grad=True).clone()
    a.retain_grad()
    a.mul_(2)
    a.mul_(2)
    a.sum().backward()
    assert_equal(a.grad, t([1.0]))

    x = t([1.0], requires_grad=True).clone()
    x.retain_grad()
    x_view = x[:]
    x_view *= 2
    x *= 2
    x.sum().backward()
    assert_equal(x.grad, t([1.0]))

    x = engine.zeros(4, dtype=engine.float64)
    y = x.view(2, 2)
    y.add_(randn(2, 2, requires_grad=True))


def test_retains_grad_inplace_multiple_outputs():
    """Port of test_autograd.py TestAutograd.test_retains_grad_inplace_multiple_outputs (the
    custom Function case; torch.var_mean has no counterpart)."""
    b = rand(3, 3, requires_grad=True)
    var, mean = DoubleMul.apply(b)
    var.retain_grad()
    mean.retain_grad()
    var.mul_(2)
    (var + mean).sum().backward()
    gvar, gmean = var.grad, mean.grad

    a = b.detach().requires_grad_(True)
    var, mean = DoubleMul.apply(a)
    var.mul_(2)
    out = (var + mean).sum()
    gvar_expected, gmean_expected = engine.grad(out, inputs=(var, mean))
    assert_equal(gvar, gvar_expected)
    assert_equal(gmean, gmean_expected)


def test_retain_grad_inplace_over_view():
    """Port of test_autograd.py TestAutograd.test_retain_grad_inplace_over_view."""
    base = t([1.0], requires_grad=True).clone()
    view = base[:]
    view2 = base[:]
    view.retain_grad()
    view2.retain_grad()
    view.mul_(2)
    (view + view2).sum().backward()
    assert_equal(view.grad, view2.grad)
    assert_equal(view.grad, t([1.0]))


def test_tensor_hooks_inplace():
    """Port of test_autograd.py TestAutograd.test_tensor_hooks_inplace."""
    count1 = [0]
    count2 = [0]

    def fn1(grad):
        count1[0] += 1
        assert_equal(grad, t([4.0]))  # x2 from mul_, x2 from fn2
        return grad * 2

    def fn2(grad):
        count2[0] += 1
        assert_equal(grad, t([1.0]))
        return grad * 2

    a = t([1.0], requires_grad=True)
    b = a.clone()
    b.register_hook(fn1)
    b.mul_(2)
    b.register_hook(fn2)
    b.sum().backward()
    assert count1[0] == 1
    assert count2[0] == 1
    assert_equal(a.grad, t([8.0]))

    count3 = [0]

    def fn3(grad):
        count3[0] += 1
        assert_equal(grad, t([4.0]))
        return grad * 2

    a = t([1.0], requires_grad=True)
    b = a.clone()
    b.register_hook(fn3)
    b.mul_(2)
    b.mul_(2)
    b.sum().backward()
    assert count3[0] == 1
    assert_equal(a.grad, t([8.0]))


def test_tensor_hooks_inplace_multiple_outputs():
    """Port of test_autograd.py TestAutograd.test_tensor_hooks_inplace_multiple_outputs (the
    custom Function case)."""
    counts = [0, 0, 0]
    b = rand(3, 3, requires_grad=True)
    out1, out2 = DoubleMul.apply(b)

    def fn0(grad):
        counts[0] += 1
        assert_equal(grad, np.ones((3, 3)) * 2)

    def fn1(grad):
        counts[1] += 1
        assert_equal(grad, np.ones((3, 3)) * 3)

    def fn2(grad):
        counts[2] += 1
        assert_equal(grad, np.ones((3, 3)))

    out1.register_hook(fn0)
    out2.register_hook(fn1)
    out1.mul_(2)
    out1.register_hook(fn2)
    (out1 + out2 * 3).sum().backward()
    assert counts == [1, 1, 1]


def test_tensor_hooks_inplace_over_view():
    """Port of test_autograd.py TestAutograd.test_tensor_hooks_inplace_over_view."""
    count = [0]

    def fn0(grad):
        pytest.fail("hook on the view's old grad_fn ran")

    def fn1(grad):
        pytest.fail("hook on the other view's old grad_fn ran")

    def fn2(grad):
        count[0] += 1
        assert_equal(grad, t([1.0]))

    base = t([1.0], requires_grad=True).clone()
    view = base[:]
    view2 = base[:]
    view.register_hook(fn0)
    view2.register_hook(fn1)
    view.mul_(2)
    view2.grad_fn  # noqa: B018 - reading grad_fn regenerates the stale view's history
    view2.register_hook(fn2)
    (view + view2).sum().backward()
    assert count[0] == 1


def test_retain_grad_cycle():
    """Port of test_autograd.py TestAutograd.test_retain_grad_cycle."""
    x = ones(5, 5, requires_grad=True)

    def run_test():
        y = x * 2
        y.retain_grad()
        return y / 2, weakref.ref(y)

    z, ref = run_test()
    gc.collect()
    assert ref() is None
    z.sum().backward()


def test_post_accumulate_grad_hook_on_non_leaf():
    """Port of test_autograd.py TestAutograd.test_post_accumulate_grad_hook_on_non_leaf."""
    leaf = rand(3, requires_grad=True)
    non_leaf = 2.0 * leaf
    with pytest.raises(RuntimeError, match="post accumulate grad hooks cannot be registered on non-leaf tensors"):
        non_leaf.register_post_accumulate_grad_hook(lambda tensor: tensor.sub_(1.0))


def test_post_accumulate_grad_hook_multiple_hooks():
    """Port of test_autograd.py TestAutograd.test_post_accumulate_grad_hook_multiple_hooks."""
    def hook1(tensor):
        tensor.sub_(tensor.grad)

    def hook2(tensor):
        tensor.mul_(4.0)

    tensor = rand(3, requires_grad=True)
    tensor_ref = tensor.detach().clone()
    tensor.register_post_accumulate_grad_hook(hook1)
    tensor.register_post_accumulate_grad_hook(hook2)
    tensor.sum().backward()
    assert_equal(tensor, 4.0 * (tensor_ref - 1.0))


def test_post_accumulate_grad_hook_multiple_tensors():
    """Port of test_autograd.py TestAutograd.test_post_accumulate_grad_hook_multiple_tensors."""
    def hook(tensor):
        tensor.sub_(tensor.grad)

    tensor1 = rand(3, requires_grad=True)
    tensor1_ref = tensor1.detach().clone()
    tensor2 = rand(5, requires_grad=True)
    tensor2_ref = tensor2.detach().clone()
    tensor1.register_post_accumulate_grad_hook(hook)
    tensor2.register_post_accumulate_grad_hook(hook)
    tensor1.sum().backward()
    tensor2.sum().backward()
    assert_equal(tensor1, tensor1_ref - 1.0)
    assert_equal(tensor2, tensor2_ref - 1.0)


def test_post_accumulate_grad_hook_returns_not_None():
    """Port of test_autograd.py TestAutograd.test_post_accumulate_grad_hook_returns_not_None."""
    tensor = rand(2, 3, requires_grad=True)
    tensor.register_post_accumulate_grad_hook(lambda tensor: tensor.grad)
    with pytest.raises(RuntimeError, match="hooks should return None."):
        tensor.sum().backward()


def test_post_accumulate_grad_hook_gets_cleaned_up():
    """Port of test_autograd.py TestAutograd.test_post_accumulate_grad_hook_gets_cleaned_up."""
    def fun_stuff_with_hook():
        thing_to_put_in_hook = rand(3)

        def hook(tensor):
            tensor.sub_(tensor.grad)
            tensor.add_(thing_to_put_in_hook)

        tensor = rand(3, requires_grad=True)
        tensor.register_post_accumulate_grad_hook(hook)
        tensor.sum().backward()
        ref = weakref.ref(thing_to_put_in_hook)
        gc.collect()
        return tensor, ref

    tensor, ref = fun_stuff_with_hook()
    assert ref() is not None  # the tensor keeps its hook alive
    del tensor
    gc.collect()
    assert ref() is None


def test_post_accumulate_grad_hook_ordering():
    """Port of test_autograd.py TestAutograd.test_post_accumulate_grad_hook_ordering."""
    tensor = rand(3, requires_grad=True)

    def pre_hook(grad):
        return grad.sub(2.0)

    def acc_grad_node_pre_hook(grad_out):
        return (grad_out[0].div(5.0),)

    def post_acc_grad_hook(tensor):
        tensor.grad.add_(0.5)

    def acc_grad_node_post_hook(grad_in, grad_out):
        tensor.grad = grad_out[0].mul(10)

    acc_grad = tensor.view(3).grad_fn.next_functions[0][0]
    tensor.register_hook(pre_hook)
    acc_grad.register_prehook(acc_grad_node_pre_hook)
    tensor.register_post_accumulate_grad_hook(post_acc_grad_hook)
    acc_grad.register_hook(acc_grad_node_post_hook)
    tensor.sum().backward()
    # tensor hook, node pre-hook, post-accumulate hook, node post-hook: ((1 - 2) / 5 + 0.5) * 10
    assert_equal(tensor.grad, t([3.0, 3.0, 3.0]))


def test_grad_nonleaf_register_hook():
    """Port of test_autograd.py TestAutograd.test_grad_nonleaf_register_hook (unbind -> one
    select per element)."""
    x = randn(5, requires_grad=True)
    x_list = [x[i] for i in range(5)]
    x0 = x_list[0]
    hook_results = [None]

    def hook(grad):
        hook_results[0] = grad

    x0.register_hook(hook)
    x_list[0].backward()
    assert_equal(hook_results[0], t(1.0))
    expected_grad = np.array([1.0, 0, 0, 0, 0])
    assert_equal(x.grad, expected_grad)
    assert x_list[0].grad is None

    for i in range(1, 5):
        hook_results[0] = None
        x_list[i].backward()
        assert hook_results[0] is None
        expected_grad[i] = 1.0
        assert_equal(x.grad, expected_grad)
        assert x_list[i].grad is None
