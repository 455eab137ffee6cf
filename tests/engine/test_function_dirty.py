"""Custom Functions that modify inputs in place (``ctx.mark_dirty``), dirty views, and
``ctx.mark_non_differentiable`` on an input returned as-is. Expected values are closed-form."""
from __future__ import annotations

import pytest

from threadgrad import engine


class Double(engine.Function):
    """x <- 2x in place; d(out)/dx = 2."""

    @staticmethod
    def forward(ctx, x):
        x.mul_(2.0)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


class MulBy(engine.Function):
    """x <- x * s in place (s a 0-d tensor); the gradient to x is g * s, written with ops."""

    @staticmethod
    def forward(ctx, x, s):
        x.mul_(s)
        ctx.save_for_backward(s)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        (s,) = ctx.saved_tensors
        return g * s, None


# -- dirty views: the base is rebased onto the Function --------------------------------------

def test_mark_dirty_on_a_view_rebases_the_base_and_uses_the_custom_backward():
    x = engine.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    a = x * 1
    v = a[1:3]
    version = a.version
    out = Double.apply(v)
    # torch's rebase_history: the view's history is taken anew on top of its base's CopySlices
    assert out is v and v.grad_fn.name() == "AsStridedBackward0"
    assert a.grad_fn.name() == "CopySlices"
    assert a.tolist() == [1.0, 4.0, 6.0, 4.0] and a.version == version + 1
    (through_view,) = engine.grad((out * engine.tensor([10.0, 100.0])).sum(), x, retain_graph=True)
    assert through_view.tolist() == [0.0, 20.0, 200.0, 0.0]
    a.sum().backward()
    assert x.grad.tolist() == [1.0, 2.0, 2.0, 1.0]


def test_other_views_of_the_base_see_the_change():
    x = engine.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    a = x * 1
    w = a[2:4]  # taken before: its graph is out of date and is taken anew from the base
    Double.apply(a[1:3])
    w.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 2.0, 1.0]


def test_views_of_a_dirty_base_see_the_change():
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = x * 3
    v = h[0:2]
    Double.apply(h)
    v.sum().backward()
    assert x.grad.tolist() == [6.0, 6.0, 0.0]


def test_two_dirty_views_of_one_base_compose():
    x = engine.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    a = x * 1
    Double.apply(a[0:2])
    Double.apply(a[1:3])
    assert a.tolist() == [2.0, 8.0, 6.0, 4.0]
    a.sum().backward()
    assert x.grad.tolist() == [2.0, 4.0, 2.0, 1.0]


def test_dirty_column_view_of_a_2d_base():
    x = engine.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    a = x * 1
    Double.apply(a[:, 1])
    assert a.tolist() == [[1.0, 4.0], [3.0, 8.0]]
    (a * engine.tensor([[1.0, 10.0], [100.0, 1000.0]])).sum().backward()
    assert x.grad.tolist() == [[1.0, 20.0], [100.0, 2000.0]]


def test_dirty_view_with_several_outputs_is_refused_as_in_torch():
    # torch refuses it (its CopySlices wraps the Function's node for one output), and so does
    # threadgrad since its CopySlices is built the same way (issue 33, item 4); under no_grad
    # nothing is recorded and it runs.
    class TwoOut(engine.Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(2.0)
            ctx.mark_dirty(x)
            return x, x * 3

        @staticmethod
        def backward(ctx, g, h):
            return g * 2 + h * 6

    x = engine.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    a = x * 1
    with pytest.raises(RuntimeError, match="cannot return more than one Tensor"):
        TwoOut.apply(a[1:3])
    a = x * 1
    with engine.no_grad():
        _, tripled = TwoOut.apply(a[1:3])
    assert tripled.tolist() == [12.0, 18.0]


def test_dirty_view_of_a_tensor_outside_the_graph_records_the_other_input():
    class Put(engine.Function):
        @staticmethod
        def forward(ctx, b, w):
            b.copy_(w)
            ctx.mark_dirty(b)
            return b

        @staticmethod
        def backward(ctx, g):
            return None, g * 7

    w = engine.tensor([5.0, 6.0], requires_grad=True)
    buf = engine.zeros(4)
    Put.apply(buf[1:3], w)
    assert buf.requires_grad and buf.tolist() == [0.0, 5.0, 6.0, 0.0]
    (buf * engine.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    assert w.grad.tolist() == [14.0, 21.0]


def test_double_backward_through_a_rebased_base():
    x = engine.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    s = engine.tensor(3.0, requires_grad=True)
    a = x * 1
    MulBy.apply(a[1:3], s)
    (gx,) = engine.grad(a.sum(), x, create_graph=True)
    assert gx.tolist() == [1.0, 3.0, 3.0, 1.0]
    gx.sum().backward()
    assert s.grad.item() == 2.0


def test_dirty_view_of_a_leaf_that_requires_grad_raises():
    x = engine.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="Double: a view of a leaf Variable that requires grad is being used in an "
                                           "in-place operation"):
        Double.apply(x[1:3])
    x = engine.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    with engine.no_grad():  # allowed, as for in-place ops (optimizers do this)
        out = Double.apply(x[1:3])
    assert x.tolist() == [1.0, 4.0, 6.0, 4.0] and not out.requires_grad and x.is_leaf


def test_dirty_view_taken_under_no_grad_of_a_graph_tensor_raises():
    x = engine.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    h = x * 1
    with engine.no_grad():
        v = h[1:3]
    with pytest.raises(RuntimeError, match="MulBy: the input marked dirty is a view of another tensor whose change "
                                           "cannot be recorded for autograd"):
        MulBy.apply(v, engine.tensor(2.0, requires_grad=True))


# -- inputs marked dirty must be returned -----------------------------------------------------

class DirtyNotReturned(engine.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(3.0)
        ctx.mark_dirty(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 6


NOT_RETURNED = ("DirtyNotReturned: Some elements marked as dirty during the forward method were not returned as "
                "output. The inputs that are modified inplace must all be outputs of the Function.")


def test_dirty_input_not_returned_raises():
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=NOT_RETURNED):
        DirtyNotReturned.apply(x * 1)


def test_dirty_input_not_returned_raises_when_not_recording():
    with pytest.raises(RuntimeError, match=NOT_RETURNED):
        DirtyNotReturned.apply(engine.tensor([1.0, 2.0]))
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with engine.no_grad(), pytest.raises(RuntimeError, match=NOT_RETURNED):
        DirtyNotReturned.apply(x * 1)


# -- mark_non_differentiable on an input returned as-is ---------------------------------------

def test_non_differentiable_input_returned_as_is_gets_no_gradient():
    class PassThrough(engine.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.mark_non_differentiable(x)
            return x, y * 2

        @staticmethod
        def backward(ctx, g_x, g_y):
            return None, g_y * 2

    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = x * 2
    same, doubled = PassThrough.apply(h, x)
    assert same is not h and same.tolist() == [2.0, 4.0, 6.0]
    assert not same.requires_grad and same.grad_fn is None
    assert doubled.grad_fn.name() == "PassThroughBackward"
    (same.sum() + doubled.sum()).backward()  # same contributes nothing
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def test_dirty_view_whose_base_is_gone_is_up_to_date():
    """Issue 16 G(1), torch's values: MyAdder.apply(a.clone().view(2), b) gives [2, 2] and
    gradients [1, 1] for both, though nothing keeps the view's base alive."""
    class MyAdder(engine.Function):
        @staticmethod
        def forward(ctx, a, b):
            a.add_(b)
            ctx.mark_dirty(a)
            return a

        @staticmethod
        def backward(ctx, g):
            return g, g

    a = engine.ones(2, requires_grad=True)
    b = engine.ones(2, requires_grad=True)
    out = MyAdder.apply(a.clone().view(2), b)
    assert out.tolist() == [2.0, 2.0]
    out.sum().backward()
    assert a.grad.tolist() == [1.0, 1.0] and b.grad.tolist() == [1.0, 1.0]
