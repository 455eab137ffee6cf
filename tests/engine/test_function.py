"""Custom Functions: the ctx API, validation of what backward returns, once_differentiable."""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import engine, ops


class Square(engine.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 * x  # written with ops: differentiable again


def test_forward_backward_and_node_name():
    x = engine.tensor([1.0, -3.0], dtype=np.float64, requires_grad=True)
    y = Square.apply(x)
    assert y.grad_fn.name() == "SquareBackward"
    assert y.grad_fn.next_functions[0][0].variable is x
    y.sum().backward()
    assert x.grad.tolist() == [2.0, -6.0]


def test_backward_written_with_ops_supports_double_backward_and_gradcheck():
    x = engine.tensor([0.5, 2.0], dtype=np.float64, requires_grad=True)
    (g,) = engine.grad(Square.apply(x).sum(), x, create_graph=True)
    (gg,) = engine.grad(g.sum(), x)
    assert gg.tolist() == [2.0, 2.0]
    assert engine.gradcheck(Square.apply, (x,))
    assert engine.gradgradcheck(Square.apply, (x,))


def test_needs_input_grad_and_non_tensor_arguments():
    seen = {}

    class Scale(engine.Function):
        @staticmethod
        def forward(ctx, x, factor, y):
            seen["needs"] = ctx.needs_input_grad
            ctx.factor = factor
            return x * factor + y

        @staticmethod
        def backward(ctx, g):
            return g * ctx.factor, None, (g if ctx.needs_input_grad[2] else None)

    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = engine.tensor([1.0, 1.0])
    Scale.apply(x, 3.0, y).sum().backward()
    assert seen["needs"] == (True, False, False)
    assert x.grad.tolist() == [3.0, 3.0]


def test_wrong_number_of_gradients_names_the_function():
    class Bad(engine.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x + y

        @staticmethod
        def backward(ctx, g):
            return g

    x = engine.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"function BadBackward returned an incorrect number of gradients \(expected 2, got 1\)"):
        Bad.apply(x, x).sum().backward()
    (x * 2).sum().backward()  # the engine stays usable
    assert x.grad.tolist() == [2.0, 2.0]


def test_wrong_gradient_shape_names_the_function_and_index():
    class BadShape(engine.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            return g, engine.ones(5)

    x = engine.ones(3, requires_grad=True)
    y = engine.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"Function BadShapeBackward returned an invalid gradient at index 1 - got \[5\] but expected shape compatible with \[3\]"):
        BadShape.apply(x, y).sum().backward()


def test_gradient_for_a_non_tensor_argument_is_an_error():
    class BadNone(engine.Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g, g

    x = engine.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="returned a gradient different than None at position 1"):
        BadNone.apply(x, 2.0).sum().backward()


def test_mark_non_differentiable_and_materialized_zero_gradients():
    got = []

    class SortWithIndex(engine.Function):
        @staticmethod
        def forward(ctx, x):
            idx = np.argsort(x._data)
            ctx.idx = idx
            values = engine.tensor(x._data[idx], dtype=x.dtype)
            indices = engine.tensor(idx)
            ctx.mark_non_differentiable(indices)
            return values, indices

        @staticmethod
        def backward(ctx, g_values, g_indices):
            got.append(g_indices)
            out = np.zeros_like(g_values._data)
            out[ctx.idx] = g_values._data
            return engine.tensor(out, dtype=g_values.dtype)

    x = engine.tensor([3.0, 1.0, 2.0], requires_grad=True)
    values, indices = SortWithIndex.apply(x)
    assert values.requires_grad and not indices.requires_grad
    (values * engine.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert x.grad.tolist() == [100.0, 1.0, 10.0]
    assert got[0].tolist() == [0, 0, 0]  # materialized: zeros, not None


def test_set_materialize_grads_false_passes_none():
    got = []

    class Two(engine.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 1.0, x * 2.0

        @staticmethod
        def backward(ctx, g1, g2):
            got.append((g1 is None, g2 is None))
            return g1 if g1 is not None else g2 * 2

    x = engine.ones(2, requires_grad=True)
    _, b = Two.apply(x)
    b.sum().backward()
    assert got == [(True, False)]
    assert x.grad.tolist() == [2.0, 2.0]


def test_mark_dirty_rebases_the_input_onto_the_function():
    class AddOneInPlace(engine.Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1.0)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    a = engine.tensor([1.0, 2.0], requires_grad=True)
    h = a * 3.0
    v = h.version
    out = AddOneInPlace.apply(h)
    assert out is h and h.grad_fn.name() == "AddOneInPlaceBackward"
    assert h.version == v + 1 and h.tolist() == [4.0, 7.0]
    h.sum().backward()
    assert a.grad.tolist() == [3.0, 3.0]


def test_mark_dirty_on_a_leaf_that_requires_grad_raises():
    class Dirty(engine.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    x = engine.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad has been used in an in-place operation"):
        Dirty.apply(x)


def test_input_returned_as_is_becomes_a_new_tensor_with_the_function_as_grad_fn():
    class Identity(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 5

    x = engine.ones(2, requires_grad=True)
    y = Identity.apply(x)
    assert y is not x and y.grad_fn.name() == "IdentityBackward"
    y.sum().backward()
    assert x.grad.tolist() == [5.0, 5.0]


def test_saved_tensor_modified_in_place_raises_naming_the_function():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    y = Square.apply(h)
    h.add_(1.0)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation.*is at version 1; expected version 0 instead \(saved by SquareBackward\)"):
        y.sum().backward()


def test_once_differentiable_runs_once_and_refuses_double_backward():
    class Cube(engine.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        @engine.once_differentiable
        def backward(ctx, g):
            assert not engine.is_grad_enabled()
            (x,) = ctx.saved_tensors
            return g * 3 * x * x

    x = engine.tensor([2.0], requires_grad=True)
    Cube.apply(x).sum().backward()
    assert x.grad.tolist() == [12.0]
    # As in torch, the result is wrapped only when an incoming gradient requires grad.
    (g,) = engine.grad(Cube.apply(x).sum(), x, create_graph=True)
    assert g.tolist() == [12.0] and not g.requires_grad
    v = engine.tensor([1.0], requires_grad=True)
    (g,) = engine.grad(Cube.apply(x), x, grad_outputs=v, create_graph=True)
    assert g.tolist() == [12.0] and g.requires_grad
    with pytest.raises(RuntimeError, match="trying to differentiate twice a function that was marked with @once_differentiable"):
        g.sum().backward()


def test_function_whose_backward_calls_other_ops_on_a_virtual_device():
    class Softplus(engine.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return ops.log(1 + ops.exp(x))

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * ops.sigmoid(x)

    x = engine.tensor([0.0, 1.0], dtype=np.float64, requires_grad=True)
    xv = ops.to(x, "virtual:2")
    Softplus.apply(xv).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 1 / (1 + np.exp(-np.array([0.0, 1.0]))), rtol=1e-12)


def test_save_for_backward_rejects_non_tensors():
    class Bad(engine.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x, 3)
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(TypeError, match="save_for_backward can only save Tensors or None, but argument 1 is int"):
        Bad.apply(engine.ones(1, requires_grad=True))


def test_a_backward_gradient_of_a_broadcast_shape_is_summed_down_as_in_torch():
    class Spread(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            return engine.ones(2, 3) * 2.0  # (2, 3) for a (3,) input: expandable, so summed over dim 0

    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    Spread.apply(x).sum().backward()
    assert x.grad.tolist() == [4.0, 4.0, 4.0]

    class Wrong(Spread):
        @staticmethod
        def backward(ctx, g):
            return engine.ones(2, 2)

    y = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"returned an invalid gradient at index 0 - got \[2, 2\] but expected "
                                           r"shape compatible with \[3\]"):
        Wrong.apply(y).sum().backward()
