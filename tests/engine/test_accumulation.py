"""Gradient accumulation: the no-copy shortcuts fire, and never make two tensors share memory."""
from __future__ import annotations

import numpy as np

from threadgrad import engine, ops
from threadgrad.engine import executor as executor_mod
from threadgrad.engine.tensor import EngineSum


def test_an_engine_sum_is_adopted_and_summed_into_in_place(monkeypatch):
    """Note [Gradient ownership]: the sum the executor makes for a leaf's slot is adopted as
    .grad without a copy, and later gradients for the slot go into it in place."""
    made = []

    def spy(old, g, owner):
        out = executor_mod.engine_sum.__wrapped__(old, g, owner)
        made.append(out)
        return out

    spy.__wrapped__ = executor_mod.engine_sum
    monkeypatch.setattr(executor_mod, "engine_sum", spy)
    x = engine.tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)
    (x * 2.0 + x * 3.0 + x * 4.0).sum().backward()
    assert x.grad.tolist() == [9.0, 9.0]
    assert len(made) == 2 and made[0] is made[1] and type(made[0]) is EngineSum  # one sum, then in place
    assert x.grad.data is made[0].data and type(x.grad) is engine.Tensor  # adopted, not copied
    assert made[0].owner is None  # the mark is cleared once taken


def test_a_single_gradient_is_copied_never_adopted():
    """A leaf's only gradient comes straight from a node's output, which the node may still
    hold (or hand to another edge): it is copied."""
    x = engine.tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)
    kept = []

    class Keep(engine.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1.0

        @staticmethod
        def backward(ctx, g):
            out = g * 1.0
            kept.append(out)
            return out

    Keep.apply(x).sum().backward()
    assert not np.shares_memory(x.grad.data, kept[0].data)
    x.grad.mul_(0.0)
    assert kept[0].tolist() == [1.0, 1.0]


def test_no_engine_sum_reaches_user_code():
    """Hooks of a leaf and grad()'s caller get plain Tensors, never the engine's marked sums."""
    x = engine.tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)
    types = []
    x.register_hook(lambda g: types.append(type(g)))
    y = (x * 2.0 + x * 3.0).sum()
    (g,) = engine.grad(y, x, retain_graph=True)
    assert type(g) is engine.Tensor and g.tolist() == [5.0, 5.0]
    y.backward()
    assert types == [engine.Tensor, engine.Tensor] and x.grad.tolist() == [5.0, 5.0]
    assert type(x.grad) is engine.Tensor
    assert EngineSum.__mro__[1] is engine.Tensor


def test_two_leaves_fed_the_same_gradient_do_not_share_memory():
    x1 = engine.tensor([1.0, 2.0], requires_grad=True)
    x2 = engine.tensor([3.0, 4.0], requires_grad=True)
    (x1 + x2).sum().backward()  # AddBackward0 hands the same gradient to both leaves
    assert not np.shares_memory(x1.grad.data, x2.grad.data)
    x1.grad.mul_(10.0)
    assert x2.grad.tolist() == [1.0, 1.0]


def test_user_gradient_is_never_adopted():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    g = engine.tensor([5.0, 6.0])
    (x + 0.0).backward(g)
    assert not np.shares_memory(x.grad.data, g.data)
    x.grad.zero_()
    assert g.tolist() == [5.0, 6.0]


def test_fan_in_sums_exactly_and_later_backward_accumulates_in_place():
    x = engine.tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)
    y = sum((x * float(k) for k in range(1, 11)), engine.zeros(2, dtype=np.float64))
    y.sum().backward(retain_graph=True)
    first = x.grad
    assert first.tolist() == [55.0, 55.0]
    v = x.grad.version
    y.sum().backward()
    assert x.grad is first and x.grad.tolist() == [110.0, 110.0]
    assert x.grad.version == v + 1


def test_create_graph_grad_does_not_alias_the_root_gradient() -> None:
    """Under create_graph the leaf's first gradient is a (recorded) copy, as torch clones:
    adopting it made .grad share the caller's array, which the next backward changed."""
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    root = engine.tensor([1.0, 1.0, 1.0])
    (x + 0.0).backward(root, create_graph=True)
    (x * 1.0).sum().backward()
    assert root.tolist() == [1.0, 1.0, 1.0]
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def test_create_graph_grad_of_a_sum_is_writable_for_the_next_backward() -> None:
    """A full sum's gradient is a read-only zero-stride view; stored as .grad under
    create_graph it made the next backward's in-place accumulation raise."""
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x.sum().backward(create_graph=True)
    x.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def test_create_graph_grad_stays_differentiable() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    (x ** 3).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    (gg,) = engine.grad(x.grad.sum(), x)
    assert gg.tolist() == [6.0, 12.0]  # d/dx of 3x^2
