"""Ports of PyTorch's engine-level tests (test/test_autograd.py, TestAutograd): reentrant
backward, queue_callback, anomaly mode, version counters, views + in-place, and the
checkpoint tests that live in test_autograd.py.

Each test names its original in its docstring; assertions are PyTorch's, translated to
threadgrad's API. A test threadgrad fails today is a strict xfail saying what it does instead.
"""
from __future__ import annotations

import gc
import warnings
import weakref

import numpy as np
import pytest
from parity_util import arr, assert_equal, ones, rand, randn, t, zeros

from threadgrad import engine, ops


# --- reentrant backward and callbacks ---------------------------------------------------------

@pytest.mark.timeout(60)
def test_deep_reentrant():
    """Port of test_autograd.py TestAutograd.test_deep_reentrant."""
    class DeepReentrant(engine.Function):
        @staticmethod
        def forward(ctx, x):
            with engine.enable_grad():
                ctx.x = x.detach().requires_grad_(True)
                ctx.x = ctx.x - 1
            return ctx.x.detach()

        @staticmethod
        def backward(ctx, x):
            if ctx.x.item() < 0:
                return x
            with engine.enable_grad():
                DeepReentrant.apply(ctx.x).sum().backward()
            return x

    v = t(2000.0, requires_grad=True)
    DeepReentrant.apply(v).sum().backward()  # past the recursion limit: pool threads take over
    v2 = t(200.0, requires_grad=True)
    DeepReentrant.apply(v2).sum().backward()  # the pool threads are reused


def test_reentrant_priority():
    """Port of test_autograd.py TestAutograd.test_reentrant_priority."""
    order = []

    class MyFunction(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, x):
            order.append("MyFunction")
            return x

    class Reentrant(engine.Function):
        @staticmethod
        def forward(ctx, x):
            with engine.enable_grad():
                ctx.x = x.detach().requires_grad_(True)
                ctx.x = ctx.x - 1
            return ctx.x.detach()

        @staticmethod
        def backward(ctx, x):
            order.append("Reentrant")
            if ctx.x.item() < 0:
                return x
            with engine.enable_grad():
                Reentrant.apply(ctx.x).backward()
            return x

    a = MyFunction.apply(t(6.0, requires_grad=True))
    b = Reentrant.apply(t(9.0, requires_grad=True))
    v = a * b
    v.backward()
    assert len(order) == 11
    assert order.count("Reentrant") == 10
    assert order[-1] == "MyFunction"


def test_callback_adds_callback():
    """Port of test_autograd.py TestAutograd.test_callback_adds_callback."""
    called = [0]

    def callback_final():
        called[0] += 1

    def callback_adds_callback():
        called[0] += 1
        engine.queue_callback(callback_final)

    class MyFunc(engine.Function):
        @staticmethod
        def forward(ctx, inp):
            return inp

        @staticmethod
        @engine.once_differentiable
        def backward(ctx, grad):
            engine.queue_callback(callback_adds_callback)
            return grad

    a = rand(3, 3, requires_grad=True)
    MyFunc.apply(a).sum().backward()
    assert called[0] == 2


def _reentrant_with_callbacks(install_callbacks_in_depths):
    counter = {"inner": 0, "outer": 0}

    def inc_inner_counter():
        counter["inner"] += 1

    def inc_outer_counter():
        counter["outer"] += 1

    class MyFunc(engine.Function):
        @staticmethod
        def forward(ctx, inp):
            return inp

        @staticmethod
        @engine.once_differentiable
        def backward(ctx, inp):
            if 1 in install_callbacks_in_depths:
                engine.queue_callback(inc_inner_counter)
            return inp

    class MyReentrantFunc(engine.Function):
        @staticmethod
        def forward(ctx, inp):
            return inp

        @staticmethod
        @engine.once_differentiable
        def backward(ctx, inp):
            if 0 in install_callbacks_in_depths:
                engine.queue_callback(inc_outer_counter)
            tmp_inp = inp.detach().requires_grad_()
            with engine.enable_grad():
                tmp_out = MyFunc.apply(tmp_inp).sum()
            tmp_out.backward()
            return inp

    t1 = rand(3, 3, requires_grad=True)
    t3 = MyReentrantFunc.apply(t1).sum()
    engine.backward([t3])
    return counter


@pytest.mark.parametrize("depths,expected", [([0], {"outer": 1, "inner": 0}),
                                             ([1], {"outer": 0, "inner": 1}),
                                             ([0, 1], {"outer": 1, "inner": 1})],
                         ids=["depth_0", "depth_1", "both_depths"])
def test_reentrant_with_callbacks(depths, expected):
    """Port of test_autograd.py TestAutograd.test_reentrant_with_callbacks_depth_0 / _depth_1 /
    _both_depths."""
    assert _reentrant_with_callbacks(depths) == expected


def test_reentrant_with_leaf_variable_hook():
    """Port of test_autograd.py TestAutograd.test_reentrant_with_leaf_variable_hook."""
    handle = None
    param = rand(10, requires_grad=True)

    def add_gradient_penalty_to_grad(grad):
        handle.remove()
        old_param_grad = grad
        param.grad = None
        with engine.enable_grad():
            g = grad.detach().requires_grad_()
            new_param = param.detach().requires_grad_()
            out = ((g * 2) + new_param).sum()
            out.backward()
        res = g.grad + grad
        param.grad = old_param_grad
        return res

    handle = param.register_hook(add_gradient_penalty_to_grad)
    loss = (param * param).sum()
    loss.backward()
    # The hook put the incoming gradient (2p) back as .grad, then AccumulateGrad adds the
    # hook's result (2p + 2) to it, as torch does: 4p + 2.
    assert_equal(param.grad, 4 * arr(param) + 2)


def test_reentrant_with_non_leaf_variable_hook():
    """Port of test_autograd.py TestAutograd.test_reentrant_with_non_leaf_variable_hook."""
    handle = None
    param = rand(10, requires_grad=True)

    def manual_increase_gradient(grad):
        handle.remove()
        with engine.enable_grad():
            g = grad.detach().requires_grad_()
            out = ((g * 2) + 5).sum()
            out.backward()
        return g.grad + grad

    tmp = param * param
    handle = tmp.register_hook(manual_increase_gradient)
    tmp.sum().backward()
    assert_equal(param.grad, 6 * arr(param))


# --- anomaly mode ---------------------------------------------------------------------------

def test_anomaly_detect_nan():
    """Port of test_autograd.py TestAutograd.test_anomaly_detect_nan."""
    size = 10

    class MyFunc(engine.Function):
        @staticmethod
        def forward(ctx, inp1, inp2, fail_0th):
            ctx.fail_0th = fail_0th
            return inp1.sum(0, keepdim=True)

        @staticmethod
        def backward(ctx, gO):
            gI = gO.clone().expand(size).clone()
            gI[0] = 0
            with np.errstate(invalid="ignore"):
                gI[0] /= 0  # a nan
            if ctx.fail_0th:
                return gI, None, None
            return None, gI, None

    inp = rand(size, requires_grad=True)
    MyFunc.apply(inp, inp, True).backward()  # no anomaly mode: no error

    inp = rand(size, requires_grad=True)
    out = MyFunc.apply(inp, inp, True)
    with pytest.raises(RuntimeError, match="Function 'MyFuncBackward' returned nan values in its 0th output."):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with engine.detect_anomaly():
                out.backward()
    # (torch 2.13 warns "Anomaly Detection has been enabled" first: checked against the wheel)
    assert any("No forward pass information" in str(x.message) for x in w)

    inp = rand(size, requires_grad=True)
    with pytest.raises(RuntimeError, match="Function 'MyFuncBackward' returned nan values in its 1th output."):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with engine.detect_anomaly():
                out = MyFunc.apply(inp, inp, False)
                out.backward()
    assert any("MyFunc.apply" in str(x.message) for x in w)


def test_anomaly_detect_nan_message_only():
    """Port of test_autograd.py TestAutograd.test_anomaly_detect_nan (the error messages alone,
    without the warnings torch emits alongside)."""
    size = 10

    class MyFunc(engine.Function):
        @staticmethod
        def forward(ctx, inp1, inp2, fail_0th):
            ctx.fail_0th = fail_0th
            return inp1.sum(0, keepdim=True)

        @staticmethod
        def backward(ctx, gO):
            gI = gO.clone().expand(size).clone()
            gI[0] = 0
            with np.errstate(invalid="ignore"):
                gI[0] /= 0
            return (gI, None, None) if ctx.fail_0th else (None, gI, None)

    for fail_0th, nth in ((True, "0th"), (False, "1th")):
        inp = rand(size, requires_grad=True)
        with pytest.raises(RuntimeError, match=f"Function 'MyFuncBackward' returned nan values in its {nth} output."):
            with engine.detect_anomaly():
                MyFunc.apply(inp, inp, fail_0th).backward()


def test_nested_anomaly_detect_nan():
    """Port of test_autograd.py TestAutograd.test_nested_anomaly_detect_nan (the error messages)."""
    size = 10

    class MyFunc(engine.Function):
        @staticmethod
        def forward(ctx, inp1, fail_0th):
            ctx.fail_0th = fail_0th
            ctx.save_for_backward(inp1)
            return inp1.sum(0, keepdim=True)

        @staticmethod
        def backward(ctx, gO):
            (inp,) = ctx.saved_tensors
            g = gO.clone().expand(size)
            return MyFunc2.apply(g * inp, g + inp, ctx.fail_0th), None

    class MyFunc2(engine.Function):
        @staticmethod
        def forward(ctx, inp1, inp2, fail_0th):
            ctx.fail_0th = fail_0th
            return inp1 * 2.0 + inp2

        @staticmethod
        def backward(ctx, gO):
            g1 = gO.clone()
            g2 = gO.clone()
            g1[0] = 0
            g2[0] = 0
            with np.errstate(invalid="ignore"):
                if ctx.fail_0th:
                    g1[0] /= 0
                else:
                    g2[0] /= 0
            return g1, g2, None

    inp = rand(size, requires_grad=True)
    (ginp,) = engine.grad(MyFunc.apply(inp, True), (inp,), create_graph=True)
    ginp.sum().backward()  # no anomaly mode: no error

    inp = rand(size, requires_grad=True)
    (ginp,) = engine.grad(MyFunc.apply(inp, True), (inp,), create_graph=True)
    gsum = ginp.sum()
    with pytest.raises(RuntimeError, match="Function 'MyFunc2Backward' returned nan values in its 0th output."):
        with engine.detect_anomaly():
            gsum.backward()

    inp = rand(size, requires_grad=True)
    with pytest.raises(RuntimeError, match="Function 'MyFunc2Backward' returned nan values in its 1th output."):
        with engine.detect_anomaly():
            out = MyFunc.apply(inp, False)
            (ginp,) = engine.grad(out, (inp,), create_graph=True)
            ginp.sum().backward()


def test_anomaly_grad_warnings():
    """Port of test_autograd.py TestAutograd.test_anomaly_grad_warnings (the first half)."""
    with pytest.raises(RuntimeError, match="one of the variables needed for gradient computation has been "
                                           "modified by an inplace operation"):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with engine.detect_anomaly():
                a = randn(5, requires_grad=True)
                d1 = a + 1
                d2 = d1 ** 2
                d1 += 1
                engine.grad(d2.sum(), a)
    assert len(w) == 2
    assert "Anomaly Detection has been enabled" in str(w[0].message)
    assert "Error detected in PowBackward0" in str(w[1].message)


def test_anomaly_assign_parent_cleanup():
    """Port of test_autograd.py TestAutograd.test_anomaly_assign_parent_cleanup."""
    def get_ref():
        x = randn(2, 2, requires_grad=True)
        out = x.exp()
        with engine.detect_anomaly():
            engine.grad(out, x, engine.ones_like(out), create_graph=True)

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


def test_anomaly_mode_no_check_nan():
    """Port of test_autograd.py TestAutograd.test_anomaly_mode_no_check_nan."""
    class MyFunc(engine.Function):
        @staticmethod
        def forward(ctx, inp):
            return inp.clone()

        @staticmethod
        def backward(ctx, gO):
            return t(float("nan")).expand(10, 10)

    with engine.detect_anomaly(check_nan=False):
        inp = rand(10, 10, requires_grad=True)
        out = MyFunc.apply(inp).sum()
        out.backward(retain_graph=True)
        with engine.detect_anomaly(check_nan=True):
            with pytest.raises(RuntimeError, match="Function 'MyFuncBackward' returned nan values in its 0th output."):
                out.backward(retain_graph=True)
        out.backward()


# --- version counters, views and in-place ---------------------------------------------------

def test_version_counter():
    """Port of test_autograd.py TestAutograd.test_version_counter."""
    x = randn(1, 2)
    x_saved_version = x.version
    x.add_(1).add_(1)
    assert x.version > x_saved_version
    xz = x[:]
    assert x.version == xz.version
    xz.add_(1)
    assert x.version == xz.version
    # `x.data = y` preserves the version counter of `x` (Note [Tensor.data])
    x_saved_version = x.version
    x.data = randn(2, 3)
    assert x.version == x_saved_version
    x.add_(1)
    assert x.version > x_saved_version
    assert x.version == xz.version  # still the counter it shares with xz
    xz.add_(1)
    assert x.version == xz.version


def test_inplace_on_view_leaf_errors():
    """Port of test_autograd.py TestAutograd.test_inplace_on_view_leaf_errors."""
    x = zeros(1, requires_grad=True)
    y = x.view(1)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad is being used in "
                                           "an in-place operation."):
        y.add_(1)


def test_inplace_on_view_weak_grad_fn():
    """Port of test_autograd.py TestAutograd.test_inplace_on_view_weak_grad_fn (narrow -> slice,
    relu_ -> a relu written back with copy_)."""
    a = engine.arange(10.0).to(engine.float64).requires_grad_()
    b = a[0:2].clone().view(-1)
    b.copy_(ops.relu(b))
    c = b.clone()
    del b
    gc.collect()
    s = c.sum()
    s.backward()
    assert s.item() == 1.0


def test_inplace_on_view_saved_output():
    """Port of test_autograd.py TestAutograd.test_inplace_on_view_saved_output (relu(inplace) ->
    copy_ of a relu)."""
    dealloc = [0]

    class IncrementOnDelete:
        def __call__(self, *args):
            return None

        def __del__(self):
            dealloc[0] += 1

    def scope():
        root = randn(3, 3, requires_grad=True)
        copy = root.clone()
        copy.grad_fn.register_hook(IncrementOnDelete())
        view = copy.view(9)
        view.copy_(ops.relu(view))

    scope()
    gc.collect()
    assert dealloc[0] == 1


# --- checkpoint tests of test_autograd.py ---------------------------------------------------

def test_checkpoint_valid_reset_on_error():
    """Port of test_autograd.py TestAutograd.test_checkpoint_valid_reset_on_error."""
    a = randn(2, 2, requires_grad=True)
    with pytest.raises(Exception, match="torch.utils.checkpoint is incompatible"):
        b = engine.checkpoint(ops.exp, a, use_reentrant=True).sum()
        engine.grad(b, (a,))
    c = engine.checkpoint(ops.exp, a, use_reentrant=True).sum()
    c.backward()
    assert_equal(a.grad, np.exp(arr(a)))


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpointing_without_reentrant_detached_tensor(use_reentrant):
    """Port of test_autograd.py TestAutograd.test_checkpointing_without_reentrant_detached_tensor
    (the module -> two no_grad matmuls)."""
    w1, w2 = randn(2, 2, requires_grad=True), randn(2, 2, requires_grad=True)

    def module(x):
        with engine.no_grad():
            return (x @ w1) @ w2

    a = randn(2, 2, requires_grad=True)
    for _ in range(3):
        if use_reentrant:
            with pytest.raises(RuntimeError, match="none of output has requires_grad=True"):
                out = engine.checkpoint(module, a, use_reentrant=True)
                out += a
                out.sum().backward()
        else:
            out = engine.checkpoint(module, a, use_reentrant=False)
            out += a
            out.sum().backward()


def test_checkpointing_without_reentrant_saved_object_identity():
    """Port of test_autograd.py TestAutograd.test_checkpointing_without_reentrant_saved_object_identity."""
    x_backward = None

    class Test(engine.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(y)
            return x

        @staticmethod
        def backward(ctx, x):
            nonlocal x_backward
            (x_backward,) = ctx.saved_tensors
            return x, None

    a = t(1.0, requires_grad=True)
    b = t(1.0, requires_grad=False)
    Test.apply(a, b).backward()
    assert b is x_backward
    x_backward = None
    engine.checkpoint(Test.apply, a, b, use_reentrant=False).backward()
    assert b is x_backward


def test_checkpointing_without_reentrant_correct_grad():
    """Port of test_autograd.py TestAutograd.test_checkpointing_without_reentrant_correct_grad."""
    a = randn(2, 2, requires_grad=True)
    b = ops.exp(a).sum()
    b.backward()
    b_grad = a.grad
    a.grad = None
    c = engine.checkpoint(ops.exp, a, use_reentrant=False).sum()
    c.backward()
    c_grad = a.grad
    a.grad = None
    d = engine.checkpoint(ops.exp, a, use_reentrant=False).sum()
    (d_grad,) = engine.grad(d, (a,))
    assert_equal(b_grad, c_grad)
    assert_equal(b_grad, d_grad)


def test_checkpointing_without_reentrant_parameter_used_in_an_out():
    """Port of test_autograd.py TestAutograd.test_checkpointing_without_reentrant_parameter_used_in_an_out."""
    w = randn(10, 10, requires_grad=True)
    count = 0

    def hook(grad):
        nonlocal count
        count += 1

    w.register_hook(hook)
    x = rand(10, 10, requires_grad=True)
    h = w * x
    out = engine.checkpoint(lambda x: w * x, h, use_reentrant=False)
    out.sum().backward()
    assert count == 1


def test_checkpointing_without_reentrant_arbitrary_input_output():
    """Port of test_autograd.py TestAutograd.test_checkpointing_without_reentrant_arbitrary_input_output
    (the module -> a matmul with a shared weight)."""
    w = randn(5, 5, requires_grad=True)

    def model(dict_input):
        return {"result": dict_input["tensor"] @ w}

    inp = {"tensor": randn(5, 5)}
    out_no_checkpoint = model(inp)["result"].sum()
    out_checkpoint = engine.checkpoint(model, inp, use_reentrant=False)["result"].sum()
    assert_equal(out_checkpoint, out_no_checkpoint)
    (g_ref,) = engine.grad(out_no_checkpoint, w)
    (g_ckpt,) = engine.grad(out_checkpoint, w)
    assert_equal(g_ckpt, g_ref)


def test_checkpointing_without_reentrant_custom_function_works():
    """Port of test_autograd.py TestAutograd.test_checkpointing_without_reentrant_custom_function_works."""
    msg = "Unpack is being triggered for a tensor that was already unpacked once"

    class MyFunc(engine.Function):
        @staticmethod
        def forward(ctx, x, y, z):
            w = x * y * z
            out = w + w
            ctx.save_for_backward(x, y, z, w, out)
            return out

        @staticmethod
        def backward(ctx, grad_out):
            x, y, z, w, out = ctx.saved_tensors
            with pytest.raises(RuntimeError, match=msg):
                ctx.saved_tensors  # noqa: B018 - a second unpack of recomputed tensors
            return x, y, z

    x = t(1.0, requires_grad=True)
    y = t(2.0, requires_grad=True)
    z = t(3.0, requires_grad=True)

    def foo(x, y, z):
        return MyFunc.apply(x * y * z, y * y * z, z * z)

    out = engine.checkpoint(foo, x, y, z, use_reentrant=False)
    out.sum().backward()


def test_checkpoint_warns_if_use_reentrant_not_passed_explcitly():
    """Port of test_autograd.py TestAutograd.test_checkpoint_warns_if_use_reentrant_not_passed_explcitly."""
    a = randn(1, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine.checkpoint(lambda x: x * 1, a, use_reentrant=False)
    with pytest.warns(UserWarning, match=".*the use_reentrant parameter should be passed explicitly.*"):
        engine.checkpoint(lambda x: x * 1, a)


def test_checkpoint_sequential_warns_if_use_reentrant_not_passed_explcitly():
    """Port of test_autograd.py TestAutograd.test_checkpoint_sequential_warns_if_use_reentrant_not_passed_explcitly
    (Linear modules -> matmuls)."""
    a = randn(3, requires_grad=True)
    ws = [randn(3, 3, requires_grad=True) for _ in range(3)]
    layers = [(lambda w: (lambda h: ops.linear(h, w)))(w) for w in ws]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine.checkpoint_sequential(layers, 3, a, use_reentrant=False)
    with pytest.warns(UserWarning, match=".*the use_reentrant parameter should be passed explicitly.*"):
        engine.checkpoint_sequential(layers, 3, a)


def test_checkpoint_detects_non_determinism():
    """Port of test_autograd.py TestAutograd.test_checkpoint_detects_non_determinism (the first
    case: the recomputation saves fewer tensors)."""
    def save_3_tensors(x):
        return x.sin().exp().sin()

    def save_2_tensors(x):
        return x.sin().exp()

    counter = [0]

    def fn(x):
        if counter[0] == 0:
            counter[0] += 1
            return save_3_tensors(x)
        return save_2_tensors(x)

    a = randn(1, requires_grad=True)
    with pytest.raises(RuntimeError, match="A different number of tensors was saved"):
        out = engine.checkpoint(fn, a, use_reentrant=False)
        out.backward()
