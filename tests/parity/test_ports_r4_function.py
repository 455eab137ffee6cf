"""Round-4 ports of PyTorch's custom ``autograd.Function`` tests (test/test_autograd.py):
setup_context, materialize grads, mark_dirty with views, views returned by a Function,
reentrant grad mode, reference cycles through ctx.

Each test cites its original; assertions are PyTorch 2.13's, translated to threadgrad's API.
"""
from __future__ import annotations

import gc
import warnings
import weakref

import numpy as np
import pytest
from parity_util import arr, assert_equal, ones, rand, randn, t

from threadgrad import engine, ops


class _Undefined(engine.Function):
    """Stands in for torch._C._functions.UndefinedGrad: its backward sends no gradient on."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return None


def test_materialize_grads():
    """Port of test_autograd.py TestAutograd.test_materialize_grads."""
    seen = []

    class MyFunction(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, grad):
            seen.append(grad)
            return grad

    x = ones(1, requires_grad=True)
    _Undefined.apply(MyFunction.apply(x)).backward()
    assert len(seen) == 1
    assert_equal(seen[0], np.zeros(1))


def test_dont_materialize_grads():
    """Port of test_autograd.py TestAutograd.test_dont_materialize_grads."""
    seen = []

    class MyFunction(engine.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x

        @staticmethod
        def backward(ctx, grad):
            seen.append(grad)
            return grad

    x = ones(1, requires_grad=True)
    _Undefined.apply(MyFunction.apply(x)).backward()
    assert seen == [None]
    assert x.grad is None


def test_custom_function_setup_context_multi_output():
    """Port of test_autograd.py TestAutograd.test_custom_function_setup_context_multi_output."""
    class MySquare(engine.Function):
        @staticmethod
        def forward(x):
            two_x = x.item() * 2
            return x ** 2, two_x

        @staticmethod
        def setup_context(ctx, inputs, output):
            (x,) = inputs
            _, two_x = output
            ctx.two_x = two_x

        @staticmethod
        @engine.once_differentiable
        def backward(ctx, gO, _):
            return gO * ctx.two_x

    x = randn(requires_grad=True) if False else t(0.7, requires_grad=True)
    y, two = MySquare.apply(x)
    assert two == pytest.approx(1.4)
    (gx,) = engine.grad(y, x)
    assert_equal(gx, 2 * 0.7)


def test_custom_function_setup_context_multi_input():
    """Port of test_autograd.py TestAutograd.test_custom_function_setup_context_multi_input."""
    class MyReshape(engine.Function):
        @staticmethod
        def forward(x, shape, scale_forward, scale_backward):
            return x.reshape(*shape) * scale_forward

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, shape, scale_forward, scale_backward = inputs
            ctx.scale_backward = scale_backward
            ctx.x_shape = x.shape

        @staticmethod
        def backward(ctx, gO):
            return gO.reshape(*ctx.x_shape) * ctx.scale_backward, None, None, None

    class MyReshapeRef(engine.Function):
        @staticmethod
        def forward(ctx, x, shape, scale_forward, scale_backward):
            ctx.scale_backward = scale_backward
            ctx.x_shape = x.shape
            return x.reshape(*shape) * scale_forward

        @staticmethod
        def backward(ctx, gO):
            return gO.reshape(*ctx.x_shape) * ctx.scale_backward, None, None, None

    def check(x, shape, scale_forward, scale_backward):
        y = MyReshape.apply(x, shape, scale_forward, scale_backward).sum()
        (gx,) = engine.grad(y, x)
        y_expected = MyReshapeRef.apply(x, shape, scale_forward, scale_backward).sum()
        (gx_expected,) = engine.grad(y_expected, x)
        assert_equal(y_expected, y)
        assert_equal(gx_expected, gx)
        assert_equal(gx, np.full(x.shape, float(scale_backward)))

    check(randn(24, requires_grad=True), (3, 8), 7, 11)
    check(randn(2, 3, 4, requires_grad=True), (6, 4), -1, 2)


def test_setup_context_when_forward_has_default_args():
    """Port of test_autograd.py TestAutograd.test_setup_context_when_forward_has_default_args."""
    class PowFunction(engine.Function):
        @staticmethod
        def forward(x, y=3):
            return ops.pow(x, y)

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, y = inputs
            ctx.save_for_backward(x)
            ctx.y = y

        @staticmethod
        def backward(ctx, gO):
            (x,) = ctx.saved_tensors
            y = ctx.y
            return gO * y * ops.pow(x, y - 1), None

    class PowFunctionWithClassmethod(engine.Function):
        @classmethod
        def forward(cls, x, y=3):
            return ops.pow(x, y)

        @classmethod
        def setup_context(cls, ctx, inputs, output):
            x, y = inputs
            ctx.save_for_backward(x)
            ctx.y = y

        @classmethod
        def backward(cls, ctx, gO):
            (x,) = ctx.saved_tensors
            y = ctx.y
            return gO * y * ops.pow(x, y - 1), None

    x = t(2.0, requires_grad=True)
    y1 = PowFunction.apply(x)
    (g1,) = engine.grad(y1, x)
    y2 = PowFunctionWithClassmethod.apply(x)
    (g2,) = engine.grad(y2, x)
    assert y1.item() == 8.0 and g1.item() == 12.0
    assert y2.item() == 8.0 and g2.item() == 12.0


def test_custom_function_error():
    """Port of test_autograd.py TestAutograd.test_custom_function_error (the backward-mode parts)."""
    class BadFw(engine.Function):
        @staticmethod
        def backward(ctx, foo):
            return foo

    class BadBw(engine.Function):
        @staticmethod
        def forward(ctx, foo):
            return foo.clone()

    inp = rand(1, requires_grad=True)
    with pytest.raises(NotImplementedError, match="must implement the forward"):
        BadFw.apply(inp)
    with pytest.raises(RuntimeError, match="must implement either the backward"):
        BadBw.apply(inp).sum().backward()


def test_custom_function_local_inplace():
    """Port of test_autograd.py TestAutograd.test_custom_function_local_inplace."""
    class MyFn(engine.Function):
        @staticmethod
        def forward(ctx, inp, inplace):
            view = inp.clone()[:3]
            if inplace:
                view += 2
            return view

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    base = rand(10, requires_grad=True)
    foo = MyFn.apply(base, False)
    assert foo.grad_fn.name() == "MyFnBackward"
    assert type(foo.grad_fn).__name__ == "MyFnBackward"
    foo = MyFn.apply(base, True)
    assert foo.grad_fn.name() == "MyFnBackward"
    assert_equal(foo, arr(base)[:3] + 2)


def test_autograd_python_custom_function_inplace():
    """Port of test_autograd.py TestAutograd.test_autograd_python_custom_function_inplace."""
    bw_called = [0]

    class MyAdder(engine.Function):
        @staticmethod
        def forward(ctx, a, b):
            a.add_(b)
            ctx.mark_dirty(a)
            return a

        @staticmethod
        def backward(ctx, grad):
            bw_called[0] += 1
            return grad, grad

    a = ones(2, requires_grad=True)
    b = ones(2, requires_grad=True)
    c = MyAdder.apply(a.clone(), b)
    c.sum().backward()
    assert bw_called[0] == 1

    bw_called[0] = 0
    c = MyAdder.apply(a.clone(), b)
    c += 2
    c.sum().backward()
    assert bw_called[0] == 1

    bw_called[0] = 0
    c = MyAdder.apply(a.clone().view_as(a), b)
    c.sum().backward()
    assert bw_called[0] == 1

    class MyAdderBad(engine.Function):
        @staticmethod
        def forward(ctx, a, b):
            c = 3 * a
            c.add_(b)
            ctx.mark_dirty(c)
            return c

        @staticmethod
        def backward(ctx, grad):
            bw_called[0] += 1
            grad = 3 * grad
            return grad, grad

    a = ones(2, requires_grad=True)
    b = ones(2, requires_grad=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        MyAdderBad.apply(a.clone(), b)
    assert len(w) == 1

    class MyBadAdder(engine.Function):
        @staticmethod
        def forward(ctx, a, b):
            a.add_(b)
            ctx.mark_dirty(a)
            return a, a + b

        @staticmethod
        def backward(ctx, ga, gab):
            bw_called[0] += 1
            return ga + gab, ga + gab

    bw_called[0] = 0
    c, d = MyBadAdder.apply(a.clone(), b)
    (c * d).sum().backward()
    assert bw_called[0] == 1

    bw_called[0] = 0
    c, d = MyBadAdder.apply(a.clone(), b)
    c += 2
    (c * d).sum().backward()
    assert bw_called[0] == 1

    # As torch: a dirty view input with several outputs is refused (the base's CopySlices
    # wraps the Function's node for one output: Note [CopySlices] in ops/views.py).
    with pytest.raises(RuntimeError, match="your Function cannot return more than one Tensor"):
        MyBadAdder.apply(a.clone().view_as(a), b)

    class MyOutPlaceAdder(engine.Function):
        @staticmethod
        def forward(ctx, a, b):
            a.add_(b)
            ctx.mark_dirty(a)
            return a.clone(), a + b

        @staticmethod
        def backward(ctx, ga, gab):
            bw_called[0] += 1
            return ga + gab, ga + 2 * gab

    def fn(a, b):
        orig_a = a.clone().view_as(a)
        c, d = MyOutPlaceAdder.apply(orig_a, b)
        return (c * d).sum()

    with pytest.raises(RuntimeError, match="Some elements marked as dirty during the forward method were not returned as output."):
        fn(a, b)


def test_custom_function_mark_output_view_of_intermediate():
    """Port of test_autograd.py TestAutograd.test_custom_function_mark_output_view_of_intermediate."""
    class Func(engine.Function):
        @staticmethod
        def forward(ctx, inp):
            out = inp.clone().view_as(inp)
            ctx.mark_dirty(out)
            return out

        @staticmethod
        def backward(ctx, gO):
            pass

    a = t([1.0], requires_grad=True)
    a_clone = a.clone()
    with pytest.raises(RuntimeError, match="received a tensor that was not an input."):
        Func.apply(a_clone)


def test_custom_function_inplace_on_non_default_view():
    """Port of test_autograd.py TestAutograd.test_custom_function_inplace_on_non_default_view
    (split_with_sizes -> ops.split with sizes)."""
    class Func(engine.Function):
        @staticmethod
        def forward(ctx, inp):
            inp.add_(1)
            ctx.mark_dirty(inp)
            return inp

        @staticmethod
        def backward(ctx, gO):
            pass

    a = t([1.0, 2.0], requires_grad=True)
    a_clone = a.clone()
    b, c = ops.split(a_clone, [1, 1], dim=0)
    with pytest.raises(RuntimeError, match="output of a function that returns multiple view"):
        Func.apply(b)


def test_custom_function_inplace_on_view_of_leaf():
    """Port of test_autograd.py TestAutograd.test_custom_function_inplace_on_view_of_leaf."""
    class Func(engine.Function):
        @staticmethod
        def forward(ctx, inp):
            inp.add_(1)
            ctx.mark_dirty(inp)
            return inp

        @staticmethod
        def backward(ctx, gO):
            pass

    a = t([1.0, 2.0], requires_grad=True)
    b = a.view_as(a)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        Func.apply(b)


def test_custom_function_saving_mutated_view_no_leak():
    """Port of test_autograd.py TestAutograd.test_custom_function_saving_mutated_view_no_leak."""
    class Test(engine.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.mark_dirty(x)
            ctx.save_for_backward(x)
            return x

        @staticmethod
        def backward(ctx, grad):
            pass

    def scope():
        x = t(1.0, requires_grad=True).clone()
        x = x.view_as(x)
        Test.apply(x)
        return weakref.ref(x)

    ref = scope()
    gc.collect()
    assert ref() is None


def test_custom_function_return_view_in_nograd():
    """Port of test_autograd.py TestAutograd.test_custom_function_return_view_in_nograd."""
    class Alias(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x[:]

        @staticmethod
        def backward(ctx, gx):
            return gx

    inp = rand(2, requires_grad=True)
    with engine.no_grad():
        output = Alias.apply(inp)
    with engine.no_grad():
        expected_output = inp[:]
    assert output.requires_grad == expected_output.requires_grad
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode and is being modified inplace"):
        output.zero_()


def test_inplace_not_requires_grad():
    """Port of test_autograd.py TestAutograd.test_inplace_not_requires_grad (unbind -> ops.split,
    select -> integer indexing)."""
    class MyFn(engine.Function):
        @staticmethod
        def forward(ctx, inp):
            return inp.view_as(inp)

        @staticmethod
        def backward(ctx, grad):
            return grad

    # torch refuses all three writes below ("A view was created in no_grad mode ... This view was
    # created inside a custom Function", "... function that returns multiple views"): the views
    # were made while nothing was recorded. threadgrad records the write through CopySlices
    # instead (its documented rebase of views made while not recording, docs/ops.md), so the
    # gradient reaches b exactly.
    for make_view, write in ((MyFn.apply, lambda v, b: v.add_(b)), (MyFn.apply, lambda v, b: v.copy_(b)),
                             (lambda a: ops.split(a, 1, dim=0)[0], lambda v, b: v.copy_(b))):
        a = rand(1, 2)
        b = rand(1, requires_grad=True)
        view_a = make_view(a)
        write(view_a, b)
        assert a.requires_grad
        (g,) = engine.grad((a * t([[2.0, 3.0]])).sum(), b)
        assert_equal(g, [5.0])

    a = rand(1, 2)
    b = rand(1, requires_grad=True)
    a[:, 0].copy_(b)
    assert a.requires_grad


def test_autograd_multiple_views_python():
    """Port of test_autograd.py TestAutograd.test_autograd_multiple_views_python
    (narrow/select -> slicing/integer indexing)."""
    bw_called = [0]

    class ComplexView(engine.Function):
        @staticmethod
        def forward(ctx, a, idx):
            res = a[idx:idx + 1]
            res = a[idx]
            ctx.save_for_backward(a)
            ctx.idx = idx
            return res

        @staticmethod
        def backward(ctx, grad):
            bw_called[0] += 1
            (a,) = ctx.saved_tensors
            res = engine.zeros_like(a)
            res[ctx.idx].copy_(grad)
            return res, None

    a = ones(2, requires_grad=True)
    idx = 1
    out = ComplexView.apply(a.clone(), idx)
    out.sum().backward()
    assert bw_called[0] == 1
    assert_equal(a.grad, [0.0, 1.0])

    out = ComplexView.apply(a.clone(), idx)
    with pytest.raises(RuntimeError, match="Output 0 of ComplexViewBackward is a view and is being modified inplace"):
        out += 1


@pytest.mark.parametrize("fn_id", ["one_output", "two_output", "view_of_temp"])
@pytest.mark.parametrize("inplace", [True, False])
@pytest.mark.parametrize("make_view", [True, False])
def test_autograd_simple_views_python(fn_id, inplace, make_view):
    """Port of test_autograd.py TestAutograd.test_autograd_simple_views_python (double, the
    pure_view=False half: ctx._is_pure_view is private; narrow/select -> slicing/indexing)."""
    bw_called = [0]
    ga_nz = [False]

    class IdOneOutput(engine.Function):
        @staticmethod
        def forward(ctx, a, make_view):
            return a[0:2] if make_view else a.clone()

        @staticmethod
        def backward(ctx, ga):
            bw_called[0] += 1
            return ga, None

    class IdTwoOutput(engine.Function):
        @staticmethod
        def forward(ctx, a, b, make_view):
            a = a[0:2] if make_view else a.clone()
            return a, a + b

        @staticmethod
        def backward(ctx, ga, gab):
            bw_called[0] += 1
            ga_nz[0] = not bool((arr(ga) == 0).all())
            return ga + gab, gab, None

    class ViewOfTemp(engine.Function):
        @staticmethod
        def forward(ctx, a, make_view):
            ctx.save_for_backward(a)
            a = a[0:2] if make_view else a.clone()
            b = a.clone()
            return b[0]

        @staticmethod
        def backward(ctx, grad):
            bw_called[0] += 1
            (a,) = ctx.saved_tensors
            res = engine.zeros_like(a)
            res[0].copy_(grad)
            return res, None

    err_msg = {
        "one_output": "Output 0 of IdOneOutputBackward is a view and is being modified inplace. "
                      "This view was created inside a custom Function",
        "two_output": "Output 0 of IdTwoOutputBackward is a view and is being modified inplace. "
                      "This view is the output of a function that returns multiple views.",
        "view_of_temp": "Output 0 of ViewOfTempBackward is a view and is being modified inplace. "
                        "This view was created inside a custom Function",
    }[fn_id]
    output_is_a_view = make_view or fn_id == "view_of_temp"

    def fn(a, b):
        a = a.clone()
        b = b.clone()
        if fn_id == "two_output":
            tmp1, tmp2 = IdTwoOutput.apply(a, b, make_view)
            if inplace:
                tmp1 += 3
                tmp2 += 3
            else:
                tmp1 = tmp1 + 3
                tmp2 = tmp2 + 3
            tmp = tmp1 * tmp2
        else:
            if fn_id == "one_output":
                tmp = IdOneOutput.apply(a, make_view)
            else:
                tmp = ViewOfTemp.apply(a + b, make_view)
            if inplace:
                tmp += 3
            else:
                tmp = tmp + 3
        return tmp.sum()

    a = ones(2, requires_grad=True)
    b = ones(2, requires_grad=True)
    will_raise_error = inplace and output_is_a_view
    if will_raise_error:
        with pytest.raises(RuntimeError, match=err_msg):
            engine.gradcheck(fn, (a, b))
    else:
        assert engine.gradcheck(fn, (a, b))

    bw_called[0] = 0
    ga_nz[0] = True
    if will_raise_error:
        with pytest.raises(RuntimeError, match=err_msg):
            fn(a, b)
        assert bw_called[0] == 0
    else:
        ops.abs(fn(a, b)).backward()
        assert bw_called[0] == 1
    assert ga_nz[0]


def test_grad_mode_restored_reentrant():
    """Port of test_autograd.py TestAutograd.test_grad_mode_restored_reentrant."""
    checks = []

    class MyFunction(engine.Function):
        @staticmethod
        def forward(ctx, inp):
            return inp.clone()

        @staticmethod
        def backward(ctx, go):
            original = engine.is_grad_enabled()
            with engine.enable_grad():
                checks.append(engine.is_grad_enabled())
                foo = rand(*go.shape, requires_grad=True)
                (grad,) = engine.grad(foo ** 3, foo, grad_outputs=go)
                checks.append(engine.is_grad_enabled())
            checks.append(engine.is_grad_enabled() == original)
            checks.append(original)
            return grad

    inp = rand(3, requires_grad=True)
    MyFunction.apply(inp).sum().backward()
    MyFunction.apply(inp).sum().backward(create_graph=True)
    assert checks == [True, True, True, False, True, True, True, True]


def test_custom_function_cycle():
    """Port of test_autograd.py TestAutograd.test_custom_function_cycle (weakref for _WeakTensorRef)."""
    class MyFn(engine.Function):
        @staticmethod
        def forward(ctx, x, metadata):
            x = x.clone()
            ctx.meta = metadata
            ctx.save_for_backward(x)
            return x

        @staticmethod
        def backward(ctx, gO):
            (x,) = ctx.saved_tensors
            assert x.item() == pytest.approx(3.14)
            assert ctx.meta["foo"].item() == pytest.approx(3.14)
            return gO * x, None

    def get_refs(with_backward):
        a = t(3.14, requires_grad=True)
        metadata = {}
        out = MyFn.apply(a, metadata)
        metadata["foo"] = out
        if with_backward:
            out.sum().backward()
            assert a.grad.item() == pytest.approx(3.14)
        return weakref.ref(out)

    for with_backward in (False, True):
        gc.disable()
        try:
            ref = get_refs(with_backward)
            assert ref() is not None  # the cycle out -> ctx -> metadata -> out keeps it
        finally:
            gc.enable()
        gc.collect()
        assert ref() is None


def test_inplace_on_view_undefined_grad_output():
    """Port of test_autograd.py TestAutogradDeviceType.test_inplace_on_view_undefined_grad_output (cpu)."""
    a = t([1.0], requires_grad=True)
    c = a.clone()
    v = c[:]
    b = t(1.0, requires_grad=True)

    class InplaceFunc(engine.Function):
        @staticmethod
        def forward(ctx, x, other):
            ctx.mark_dirty(x)
            return x.mul_(2)

        @staticmethod
        def backward(ctx, grad):
            return grad * 2, None

    out = InplaceFunc.apply(v, b)
    out.backward()
    assert b.grad is None
    assert a.grad.item() == 2


def test_inplace_on_view_python():
    """Port of test_autograd.py TestAutogradDeviceType.test_inplace_on_view_python (cpu; narrow -> slicing)."""
    a = randn(4, 4, requires_grad=True)
    b = randn(2, 2, requires_grad=True)

    class PyAdd(engine.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.mark_dirty(x)
            x.add_(y)
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad, grad

    def func(root, b):
        x = root.clone()
        PyAdd.apply(x[:, 2:4][1:3], b)
        PyAdd.apply(x[:, 0:2][1:3], b)
        return x

    assert engine.gradcheck(func, [a, b])
    go = randn(4, 4, requires_grad=True)
    assert engine.gradgradcheck(func, (a, b), (go,))
    out = func(a, b)
    expected = arr(a).copy()
    expected[1:3, 2:4] += arr(b)
    expected[1:3, 0:2] += arr(b)
    assert_equal(out, expected)
    g = randn(4, 4)
    ga, gb = engine.grad(out, (a, b), g)
    assert_equal(ga, g)
    assert_equal(gb, arr(g)[1:3, 2:4] + arr(g)[1:3, 0:2])


def test_inplace_on_view_modify_base():
    """Port of test_autograd.py TestAutogradDeviceType.test_inplace_on_view_modify_base (cpu; select -> indexing)."""
    r = ones(1, requires_grad=True)

    def fn(r):
        x = ones(5)
        v = x[1]
        assert not v.requires_grad
        assert v.grad_fn is None
        x.add_(r)  # v now depends on r through the in-place op on its base
        assert v.requires_grad
        return v

    assert engine.gradcheck(fn, [r])
    assert engine.gradgradcheck(fn, [r])
    (g,) = engine.grad(fn(r), r)
    assert_equal(g, [1.0])


def test_inplace_on_view_non_contig():
    """Port of test_autograd.py TestAutogradDeviceType.test_inplace_on_view_non_contig (cpu)."""
    root = ones(2, 3, 2)[:, :, 1].T.detach().requires_grad_(True)
    x = root.clone()
    v1 = x[0:1]
    v2 = v1[:, 1:2]
    v2.mul_(2)
    x.sum().backward()
    assert root.grad.tolist() == [[1, 2], [1, 1], [1, 1]]


def test_inplace_on_view_multi_output_safe():
    """Port of test_autograd.py TestAutogradDeviceType.test_inplace_on_view_multi_output_safe (cpu)."""
    for f in (lambda x: ops.split(x, 1), lambda x: ops.split(x, [1, 1, 1])):
        a = randn(3, 3, requires_grad=True)
        b = a + a
        s1, s2, s3 = f(b)
        with pytest.raises(RuntimeError, match="This view is the output of a function that returns multiple views."):
            s1.mul_(s2)


def test_legacy_function_deprecation_exception():
    """Port of test_autograd.py TestAutograd.test_legacy_function_deprecation_exception."""
    class MyFunction(engine.Function):
        def forward(self, x):
            return x

        def backward(self, grad_output):
            return grad_output

    with pytest.warns(DeprecationWarning, match="should not be instantiated"):
        f = MyFunction()
    with pytest.raises(RuntimeError, match="Legacy autograd function with non-static forward method is deprecated"):
        f(randn(3, 4))


def test_naughty_autograd_function_attribute_access():
    """Port of test_autograd.py TestAutograd.test_naughty_autograd_function_attribute_access
    (the public half: the THPFunction accessors it probes are torch internals)."""
    class Id(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, grad_x):
            return grad_x

    with pytest.warns(DeprecationWarning, match="should not be instantiated"):
        f = Id()
    assert isinstance(f, Id)
    x = engine.zeros(1, requires_grad=True)
    with pytest.raises(RuntimeError, match="non-static forward method is deprecated"):
        f(x)
    y = Id.apply(x)
    assert y.grad_fn.name() == "IdBackward"


def test_custom_function_saved_tensors():
    """Port of test_autograd.py TestAutograd.test_custom_function_saved_tensors (grad_fn.saved_tensors;
    the _raw_saved_tensors half is torch-internal)."""
    def get_fn(save=True):
        class MyFn(engine.Function):
            @staticmethod
            def forward(ctx, x):
                if save:
                    ctx.save_for_backward(x, None)
                return x

            @staticmethod
            def backward(ctx, g):
                return g

        return MyFn

    a = randn(5, requires_grad=True)
    y = get_fn(True).apply(a)
    saved = y.grad_fn.saved_tensors
    assert len(saved) == 2 and saved[0] is a and saved[1] is None
    y.sum().backward()
    with pytest.raises(RuntimeError, match="after they have already been freed"):
        y.grad_fn.saved_tensors
    y = get_fn(False).apply(a)
    assert y.grad_fn.saved_tensors == ()


def test_save_output_nr():
    """Port of test_autograd.py TestAutograd.test_save_output_nr."""
    x = randn(10, requires_grad=True)
    seen = []

    class MultiOutputFn(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x[:5], x[5:]

        @staticmethod
        def backward(ctx, *grad):
            return ops.cat(grad)

    a, b = MultiOutputFn.apply(x)
    assert b.output_nr == 1

    class TestFn(engine.Function):
        @staticmethod
        def forward(ctx, b):
            ctx.save_for_backward(b)
            return b * 2

        @staticmethod
        def backward(ctx, grad_b):
            (b,) = ctx.saved_tensors
            seen.append(b.output_nr)
            return grad_b * 2

    TestFn.apply(b).sum().backward()
    assert seen == [1]
    assert_equal(x.grad, [0.0] * 5 + [2.0] * 5)
