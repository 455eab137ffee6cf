"""Round-4 ports of PyTorch's hook, callback and graph-lifetime tests (test/test_autograd.py):
relative order of every kind of hook, multi-grad hooks, queue_callback in reentrant
backward, hook/ctx reference cycles, input-buffer accumulation, CopySlices and `inputs=`.

Each test cites its original; assertions are PyTorch 2.13's, translated to threadgrad's API.
"""
from __future__ import annotations

import gc
import threading
import warnings
import weakref
from functools import partial

import numpy as np
import pytest
from parity_util import arr, assert_equal, ones, rand, randn, t

from threadgrad import engine, ops


def test_reentrant_callback_runs_before_inner_backward_returns():
    """From test_autograd.py TestAutograd._test_reentrant_with_callbacks: the inner callback
    belongs to the reentrant call, so it has run when that call's backward() returns."""
    events = []

    class Inner(engine.Function):
        @staticmethod
        def forward(ctx, inp):
            return inp

        @staticmethod
        def backward(ctx, g):
            engine.queue_callback(lambda: events.append("inner callback"))
            return g

    class Outer(engine.Function):
        @staticmethod
        def forward(ctx, inp):
            return inp

        @staticmethod
        def backward(ctx, g):
            engine.queue_callback(lambda: events.append("outer callback"))
            tmp = g.detach().requires_grad_()
            with engine.enable_grad():
                out = Inner.apply(tmp).sum()
            out.backward()
            events.append("inner backward returned")
            return g

    x = rand(3, requires_grad=True)
    Outer.apply(x).sum().backward()
    assert events == ["inner callback", "inner backward returned", "outer callback"]


def test_backward_hook_relative_ordering():
    """Port of test_autograd.py TestAutograd.test_backward_hook_relative_ordering, without the
    nn.Module: ops.linear over leaves, a pre and a post hook on every node, a tensor pre-hook
    and a post-accumulate-grad hook on each leaf. torch's expected order, per leaf: tensor
    pre-hook, AccumulateGrad pre-hook, post-accumulate-grad hook, AccumulateGrad post-hook,
    back to back; and each node's pre-hook right before its post-hook."""
    order = []
    x = randn(10, 10, requires_grad=True)
    w = randn(10, 10, requires_grad=True)
    b = randn(10, requires_grad=True)
    loss = ops.linear(x, w, b).sum()

    count = 0
    seen = set()

    def register(nodes):
        nonlocal count
        for node, _ in nodes:
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            count += 1
            key = f"{node.name()}_{count}"
            if isinstance(node, engine.AccumulateGrad):
                key = "acc_" + {id(x): "x", id(w): "weight", id(b): "bias"}[id(node.variable)]
            node.register_prehook(lambda _g, key=key: order.append(f"pre_hook_{key}"))
            node.register_hook(lambda _i, _o, key=key: order.append(f"post_hook_{key}"))
            register(node.next_functions)

    register(((loss.grad_fn, None),))
    for name, leaf in (("x", x), ("weight", w), ("bias", b)):
        leaf.register_hook(lambda _g, name=name: order.append(f"tensor_pre_hook_{name}"))
        leaf.register_post_accumulate_grad_hook(lambda _t, name=name: order.append(f"post_acc_grad_hook_{name}"))
    loss.backward()

    assert order[0].startswith("pre_hook_SumBackward0") and order[1].startswith("post_hook_SumBackward0")
    for name in ("x", "weight", "bias"):
        i = order.index(f"tensor_pre_hook_{name}")
        assert order[i:i + 4] == [f"tensor_pre_hook_{name}", f"pre_hook_acc_{name}",
                                  f"post_acc_grad_hook_{name}", f"post_hook_acc_{name}"], order
    rest = [e for e in order if "acc" not in e and not e.startswith("tensor_pre_hook")]
    assert len(rest) == 2 * (count - 3)
    for i in range(0, len(rest), 2):
        assert rest[i].startswith("pre_hook_") and rest[i + 1] == "post" + rest[i][3:], rest


@pytest.mark.parametrize("use_custom_function", [True, False])
@pytest.mark.parametrize("use_tensor_hook", [True, False])
def test_hook_closure_cycle(use_custom_function, use_tensor_hook):
    """Port of test_autograd.py TestAutograd.test_hook_closure_cycle."""
    class Function(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad

    class Test:
        pass

    count = [0]

    def scope():
        a = t(1.0, requires_grad=True)
        b = Function.apply(a) if use_custom_function else a.clone()
        grad_fn_b = b.grad_fn
        obj = Test()

        def hook(*args):
            grad_fn_b  # noqa: B018 - the closure holds the node: a cycle hook -> node -> hook
            obj  # noqa: B018
            count[0] += 1

        if use_tensor_hook:
            b.register_hook(hook)
        else:
            b.grad_fn.register_hook(hook)
        c = b.clone()
        return c, weakref.ref(obj)

    gc.disable()
    try:
        out, ref = scope()
        out.backward(retain_graph=True)
        gc.collect()
        out.backward(retain_graph=True)
        assert count[0] == 2
        assert ref() is not None
        del out
        gc.collect()
        assert ref() is None
    finally:
        gc.enable()


def test_multi_grad_any_hooks():
    """Port of test_autograd.py TestAutograd.test_multi_grad_any_hooks (the two modules as
    functions over ops.linear)."""
    hook_id = 0
    any_hook_handles = []
    hook_order = []

    def hook(hook_id, *unused):
        hook_order.append(hook_id)

    def multi_output_module(x, weight, bias):
        nonlocal hook_id
        z = ops.linear(x, weight, bias)
        out = ops.sin(z), ops.cos(z)
        z.register_hook(partial(hook, hook_id))
        hook_id += 1
        any_hook_handles.append(engine.register_multi_grad_hook(out, partial(hook, hook_id), mode="any"))
        hook_id += 1
        return out

    params = [(randn(3, 3, requires_grad=True), randn(3, requires_grad=True)) for _ in range(2)]

    def model(x):
        y = multi_output_module(x, *params[0])
        z = y[0] + y[1]
        return multi_output_module(z, *params[1])

    inp = randn(2, 3)
    out = model(inp)
    (out[0] + out[1]).sum().backward()
    assert len(any_hook_handles) == 2
    assert hook_order == [3, 2, 1, 0]

    hook_id = 0
    hook_order.clear()
    any_hook_handles.clear()
    out = model(inp)
    for handle in any_hook_handles:
        handle.remove()
    (out[0] + out[1]).sum().backward()
    assert hook_order == [2, 0]


def test_multi_grad_hooks_invalid_mode():
    """Port of test_autograd.py TestAutograd.test_multi_grad_hooks_invalid_mode."""
    t1 = rand(2, requires_grad=True)
    t2 = rand(2, requires_grad=True)
    with pytest.raises(ValueError, match=r"Expects mode to be one of \('all', 'any'\) but got foo"):
        engine.register_multi_grad_hook((t1, t2), lambda _: None, mode="foo")


def test_input_buffer_accum():
    """Port of test_autograd.py TestAutograd.test_input_buffer_accum (dense: the sparse gather
    becomes integer-array indexing, whose gradient is another summand for the leaf)."""
    leaf = rand(2, 2, requires_grad=True)
    out2 = leaf[[0, 0]]
    out1 = leaf.clone()
    grad_out1_original = rand(2, 2)
    grad_out1 = grad_out1_original.clone()
    grad_out2 = rand(2, 2)
    engine.backward((out1, out2), (grad_out1, grad_out2))
    # Given gradients are not modified in place
    assert_equal(grad_out1, grad_out1_original)
    expected = arr(grad_out1_original).copy()
    expected[0] += arr(grad_out2).sum(0)
    assert_equal(leaf.grad, expected)


def test_input_buffer_accum_given_gradient_used_twice():
    """From test_autograd.py TestAutograd.test_input_buffer_accum: the same given gradient
    reaching one buffer twice (and the user's tensor) is not modified in place either."""
    leaf = rand(3, requires_grad=True)
    g = rand(3)
    g_orig = g.clone()
    out1 = leaf.clone()
    out2 = leaf * 1.0
    engine.backward((out1, out2), (g, g))
    assert_equal(g, g_orig)
    assert_equal(leaf.grad, 2 * arr(g_orig))
    leaf.grad = None
    engine.backward((leaf.clone(),), (g,))
    engine.backward((leaf.clone(),), (g,))  # accumulates into .grad: must not write into g
    assert_equal(g, g_orig)
    assert_equal(leaf.grad, 2 * arr(g_orig))


def test_tensor_grad_warnings():
    """Port of test_autograd.py TestAutograd.test_tensor_grad_warnings."""
    dummy = engine.empty(1)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        dummy.requires_grad_()
        dummy.grad  # noqa: B018 - a leaf: no warning
        assert len(w) == 0
        dummy = dummy.clone()
        dummy.grad  # noqa: B018 - a non-leaf: warns
        assert len(w) == 1
        assert "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed" in str(w[0].message)
        assert w[0].filename == __file__  # points at the access
        dummy.retain_grad()
        dummy.grad  # noqa: B018 - retains its grad: no warning
        assert len(w) == 1


def test_nested_anomaly_printstack_cleanup():
    """Port of test_autograd.py TestAutograd.test_nested_anomaly_printstack_cleanup."""
    def get_ref():
        class MyFunc(engine.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x

            @staticmethod
            def backward(ctx, gO):
                (x,) = ctx.saved_tensors
                return MyFunc2.apply(x)

        class MyFunc2(engine.Function):
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def backward(ctx, gO):
                return gO + float("NaN")

        inp = rand(1, requires_grad=True)
        out = MyFunc.apply(inp)
        (ginp,) = engine.grad(out, (inp,), create_graph=True)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            with pytest.raises(RuntimeError, match="Function 'MyFunc2Backward' returned nan values in its 0th output."):
                with engine.detect_anomaly():
                    ginp.backward()

        class Foo:
            pass

        my_obj = Foo()
        out.grad_fn.metadata[0] = my_obj
        return out, weakref.ref(my_obj)

    out, ref = get_ref()
    assert ref() is not None
    del out
    gc.collect()
    assert ref() is None


class _DelayedError(engine.Function):
    """Stands in for torch._C._functions.DelayedError("Boom!", 1): differentiating through it raises."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        raise RuntimeError("Boom!")


def test_copy_slices_graph_task_updates():
    """Port of test_autograd.py TestAutograd.test_copy_slices_graph_task_updates."""
    def f1(x, y):
        out = x.clone().view(-1)
        out += y
        return out

    def f2(x, y):
        out = x.clone().view(-1)
        b = out * 2
        out += y
        return out + b

    x = rand(2, requires_grad=True)
    y = rand(2, requires_grad=True)
    y_safe = _DelayedError.apply(y)

    for f in (f1, f2):
        out = f(x, y_safe)
        with pytest.raises(RuntimeError, match="Boom!"):
            out.sum().backward()
        out = f(x, y_safe)
        with pytest.raises(RuntimeError, match="Boom!"):
            engine.grad(out.sum(), y)
        out = f(x, y_safe)
        (gx,) = engine.grad(out.sum(), x)  # the error node is not on the way to x
        assert_equal(gx, np.full(2, 1.0 if f is f1 else 3.0))
        out = f(x, y_safe)
        (gy,) = engine.grad(out.sum(), y_safe)
        assert_equal(gy, np.ones(2))
        out = f(x, y_safe)
        gx, gy = engine.grad(out.sum(), (x, y_safe))
        assert_equal(gy, np.ones(2))

    def f3(x, y):
        out = x.clone().view(-1)

        def hook(*args):
            raise AssertionError("this hook must never be called")

        out.register_hook(hook)
        b = out + y
        out += y
        return out + b, b

    out, b = f3(x, y_safe)
    gb, gy = engine.grad(out.sum(), (b, y_safe))
    assert_equal(gb, np.ones(2))
    assert_equal(gy, np.full(2, 2.0))  # through out's in-place add and through b, as torch


@pytest.mark.timeout(60)
def test_grad_thread_safety():
    """Port of test_autograd.py TestAutograd.test_grad_thread_safety."""
    from concurrent.futures import ThreadPoolExecutor

    def access_grad(tensor, barrier):
        barrier.wait()
        return weakref.ref(tensor.grad)

    for _ in range(10):
        tensor = t([1.0, 2.0, 3.0], requires_grad=True)
        (tensor ** 2).sum().backward()
        barrier = threading.Barrier(4)
        with ThreadPoolExecutor(max_workers=4) as executor:
            futures = [executor.submit(access_grad, tensor, barrier) for _ in range(4)]
            for future in futures:
                assert future.result()() is tensor.grad
        assert_equal(tensor.grad, [2.0, 4.0, 6.0])


@pytest.mark.timeout(60)
def test_pynode_destruction_deadlock():
    """Port of test_autograd.py TestAutograd.test_pynode_destruction_deadlock (in process: the
    error must surface, the graph with a custom node be freed, and nothing hang)."""
    class Foo(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, gO):
            return gO.clone()

    def get_out():
        inp = rand(2, requires_grad=True)
        right = Foo.apply(inp)
        left1 = inp.clone()
        left2 = left1 ** 2
        left1 += 1
        return left2 + right

    for _ in range(3):
        with pytest.raises(RuntimeError, match="one of the variables needed for gradient computation"):
            get_out().sum().backward()
        gc.collect()
    x = rand(2, requires_grad=True)
    Foo.apply(x).sum().backward()
    assert_equal(x.grad, np.ones(2))
