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
    assert x.grad._data is made[0]._data and type(x.grad) is engine.Tensor  # adopted, not copied
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
    assert not np.shares_memory(x.grad._data, kept[0]._data)
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
    assert not np.shares_memory(x1.grad._data, x2.grad._data)
    x1.grad.mul_(10.0)
    assert x2.grad.tolist() == [1.0, 1.0]


def test_user_gradient_is_never_adopted():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    g = engine.tensor([5.0, 6.0])
    (x + 0.0).backward(g)
    assert not np.shares_memory(x.grad._data, g._data)
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


# --- fresh first-order gradients a node owns (linear's) -------------------------------------

def _spy_accumulate(monkeypatch):
    """Record the ``owned`` flag of every accumulation into a .grad."""
    import sys

    graph = sys.modules["threadgrad.engine.graph"]
    calls = []
    real = graph.accumulate_into

    def spy(var, g, owned=False):
        calls.append(owned)
        return real(var, g, owned)

    monkeypatch.setattr(graph, "accumulate_into", spy)
    return calls


def test_linear_weight_and_bias_gradients_are_adopted_without_a_copy(monkeypatch):
    """Note [Gradient ownership]: AddmmBackward0's first-order gradients are fresh arrays the
    node keeps nowhere else, so the leaves take them as .grad, with torch's values."""
    calls = _spy_accumulate(monkeypatch)
    rng = np.random.default_rng(0)
    xa, wa, ba = rng.standard_normal((4, 3)), rng.standard_normal((5, 3)), rng.standard_normal(5)
    w = engine.tensor(wa, requires_grad=True)
    b = engine.tensor(ba, requires_grad=True)
    ops.linear(engine.tensor(xa), w, b).tanh().sum().backward()
    assert calls == [True, True]
    g = 1 - np.tanh(xa @ wa.T + ba) ** 2
    np.testing.assert_allclose(w.grad.numpy(), g.T @ xa, rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), g.sum(0), rtol=1e-12)
    # ... and a second backward adds into the adopted arrays in place, as into any .grad
    kept = w.grad
    ops.linear(engine.tensor(xa), w, b).tanh().sum().backward()
    assert w.grad is kept
    np.testing.assert_allclose(w.grad.numpy(), 2 * (g.T @ xa), rtol=1e-12)


def test_a_post_hook_that_keeps_linears_gradients_gets_its_own_copy(monkeypatch):
    """A node's post-hooks are user code: what they keep must not become .grad (the next
    backward would add into it in place), so the executor disowns the outputs first, and the
    leaf copies, as torch's AccumulateGrad does for a gradient something else still holds."""
    calls = _spy_accumulate(monkeypatch)
    w = engine.tensor(np.ones((2, 3)), requires_grad=True)
    b = engine.tensor(np.zeros(2), requires_grad=True)
    y = ops.linear(engine.tensor(np.full((4, 3), 2.0)), w, b)
    kept = []
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: kept.extend(grad_inputs))
    y.sum().backward()
    assert calls == [False, False] and all(type(t) is engine.Tensor for t in kept if t is not None)
    assert not np.shares_memory(w.grad._data, kept[1]._data)
    ops.linear(engine.tensor(np.full((4, 3), 2.0)), w, b).sum().backward()
    assert kept[1].tolist() == [[8.0] * 3] * 2 and w.grad.tolist() == [[16.0] * 3] * 2
    assert kept[2].tolist() == [4.0, 4.0] and b.grad.tolist() == [8.0, 8.0]


def test_a_leaf_used_as_both_operands_of_linear_sums_its_owned_gradients_exactly(monkeypatch):
    """Both of AddmmBackward0's gradients go to one AccumulateGrad: the first is owned, the
    second is added into it in place, and .grad is the sum (checked against torch's formula:
    d/dw sum(w @ w.T) = 2 * ones @ w)."""
    calls = _spy_accumulate(monkeypatch)
    wa = np.random.default_rng(1).standard_normal((3, 3))
    w = engine.tensor(wa, requires_grad=True)
    ops.linear(w, w).sum().backward()
    assert calls == [True]
    np.testing.assert_allclose(w.grad.numpy(), 2 * np.ones((3, 3)) @ wa, rtol=1e-12)


def test_owned_linear_gradients_with_leaf_hooks_and_grad_capture():
    """Combinations: a leaf tensor hook that keeps its gradient, and grad() capturing one,
    each see a plain tensor that .grad never aliases."""
    w = engine.tensor(np.ones((2, 3)), requires_grad=True)
    seen = []
    w.register_hook(lambda g: seen.append(g))
    x = engine.tensor(np.full((4, 3), 2.0))
    loss = ops.linear(x, w).sum()
    (captured,) = engine.grad(loss, w, retain_graph=True)
    loss.backward()
    assert type(captured) is engine.Tensor and all(type(g) is engine.Tensor for g in seen)
    w.grad.mul_(0.0)
    assert captured.tolist() == [[8.0] * 3] * 2 and [g.tolist() for g in seen] == [[[8.0] * 3] * 2] * 2


def test_owned_linear_gradients_match_torch_over_steps_with_set_to_none():
    """An SGD loop that sets .grad to None every step, as torch's zero_grad() does, so every
    step adopts fresh arrays: the trajectory is torch's."""
    import pytest

    torch = pytest.importorskip("torch")
    import threadgrad as tg

    rng = np.random.default_rng(2)
    xa, ta = rng.standard_normal((8, 4)), rng.integers(0, 3, 8)
    w0, b0 = rng.standard_normal((3, 4)), rng.standard_normal(3)
    w, b = tg.tensor(w0, requires_grad=True), tg.tensor(b0, requires_grad=True)
    tw, tb = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    opt, topt = tg.optim.SGD([w, b], lr=0.1, momentum=0.9), torch.optim.SGD([tw, tb], lr=0.1, momentum=0.9)
    for _ in range(4):
        tg.nn.functional.cross_entropy(tg.nn.functional.linear(tg.tensor(xa), w, b), tg.tensor(ta)).backward()
        torch.nn.functional.cross_entropy(torch.nn.functional.linear(torch.tensor(xa), tw, tb), torch.tensor(ta)).backward()
        opt.step()
        topt.step()
        opt.zero_grad()
        topt.zero_grad()
    np.testing.assert_allclose(w.detach().numpy(), tw.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(b.detach().numpy(), tb.detach().numpy(), rtol=1e-12)
