"""Hooks: tensor hooks (leaf and non-leaf), node pre/post hooks, retain_grad,
post-accumulate-grad hooks, and RemovableHandle."""
from __future__ import annotations

import pytest

from threadgrad import engine


# --- tensor hooks -------------------------------------------------------------------------

def test_leaf_hook_sees_grad_and_return_value_replaces_it():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    seen = []

    def hook(g):
        seen.append(g.tolist())
        return g * 10

    x.register_hook(hook)
    (x * x).sum().backward()
    assert seen == [[2.0, 4.0]]
    assert x.grad.tolist() == [20.0, 40.0]


def test_leaf_hook_registered_after_graph_was_built():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 3).sum()  # the AccumulateGrad node exists already
    x.register_hook(lambda g: g + 1)
    y.backward()
    assert x.grad.tolist() == [4.0, 4.0]


def test_leaf_hook_persists_across_graphs():
    x = engine.tensor([1.0], requires_grad=True)
    handle = x.register_hook(lambda g: g * 10)
    (x * 2).sum().backward()  # this graph and its AccumulateGrad die after the call
    (x * 3).sum().backward()  # a new AccumulateGrad: the hook still applies
    assert x.grad.tolist() == [50.0]
    handle.remove()
    (x * 1).sum().backward()
    assert x.grad.tolist() == [51.0]


def test_gradient_kept_by_a_hook_is_not_changed_by_later_accumulation():
    """.grad may adopt an incoming gradient without copying only if nothing else holds it
    (PyTorch's rule); a hook that stored the gradient Tensor must never see it change."""
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    stored = []
    x.register_hook(lambda g: stored.append(g))
    y = (x * 2).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.tolist() == [4.0, 4.0]
    assert [g.tolist() for g in stored] == [[2.0, 2.0], [2.0, 2.0]]


def test_gradient_seen_by_a_node_hook_is_not_changed_by_buffer_sums():
    """Two gradients meeting in one input buffer may be summed in place only if nothing
    else holds the first; a post-hook that kept it must still see its own value."""
    x = engine.tensor([1.0], requires_grad=True)
    h = x * 1.0
    a = h * 2.0
    b = h * 3.0
    kept = []
    a.grad_fn.register_hook(lambda gi, go: kept.append(gi[0]))
    b.grad_fn.register_hook(lambda gi, go: kept.append(gi[0]))
    arrived = []
    h.grad_fn.register_prehook(lambda go: arrived.append(go[0].tolist()))
    (a + b).sum().backward()
    assert sorted(g.tolist() for g in kept) == [[2.0], [3.0]]
    assert arrived == [[5.0]]
    assert x.grad.tolist() == [5.0]


def test_user_gradient_is_not_aliased_by_dot_grad():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    g = engine.tensor([1.0, 1.0])
    x.clone().backward(g)  # CloneBackward0 passes the gradient through unchanged
    x.clone().backward(g)
    assert x.grad.tolist() == [2.0, 2.0]
    assert g.tolist() == [1.0, 1.0]


def test_hook_returning_none_keeps_grad():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g.tolist()))
    (x * 3).sum().backward()
    assert seen == [[3.0, 3.0]]
    assert x.grad.tolist() == [3.0, 3.0]


def test_non_leaf_hook_changes_downstream_gradient():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    seen = []

    def hook(g):
        seen.append(g.tolist())
        return g * 2

    h.register_hook(hook)
    (h * h).sum().backward()
    assert seen == [[6.0, 12.0]]  # 2h
    assert x.grad.tolist() == [36.0, 72.0]  # 2 * 2h * 3


def test_hooks_chain_in_registration_order():
    x = engine.tensor([1.0], requires_grad=True)
    h = x * 1.0
    h.register_hook(lambda g: g + 1)
    h.register_hook(lambda g: g * 10)
    h.sum().backward()
    assert x.grad.tolist() == [20.0]  # (1 + 1) * 10, not 1 * 10 + 1


def test_handle_remove():
    x = engine.tensor([1.0], requires_grad=True)
    h = x * 2
    calls = []
    handle = h.register_hook(lambda g: calls.append("h") or g * 100)
    leaf_handle = x.register_hook(lambda g: calls.append("x") or g * 1000)
    handle.remove()
    leaf_handle.remove()
    handle.remove()  # idempotent
    h.sum().backward()
    assert calls == []
    assert x.grad.tolist() == [2.0]


def test_handle_removes_only_its_hook():
    x = engine.tensor([1.0], requires_grad=True)
    h = x * 2
    a = h.register_hook(lambda g: g * 3)
    h.register_hook(lambda g: g * 5)
    a.remove()
    h.sum().backward()
    assert x.grad.tolist() == [10.0]


def test_handle_as_context_manager():
    x = engine.tensor([1.0], requires_grad=True)
    h = x * 2
    with h.register_hook(lambda g: g * 7):
        h.sum().backward(retain_graph=True)
    assert x.grad.tolist() == [14.0]
    h.sum().backward()
    assert x.grad.tolist() == [16.0]


def test_hook_on_tensor_not_requiring_grad_raises():
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        engine.tensor([1.0]).register_hook(lambda g: g)


def test_hook_must_be_callable():
    x = engine.tensor([1.0], requires_grad=True)
    with pytest.raises(TypeError, match="callable"):
        x.register_hook(3)


def test_hook_returning_wrong_shape_raises():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    h.register_hook(lambda g: engine.ones(3))
    with pytest.raises(RuntimeError, match="shape"):
        h.sum().backward()


def test_hook_returning_non_tensor_raises_type_error():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    h.register_hook(lambda g: 5)
    with pytest.raises(TypeError, match="expected a Tensor or None"):
        h.sum().backward()


def test_tensor_hook_affects_grad_result_for_leaf_input():
    x = engine.tensor([1.0], requires_grad=True)
    x.register_hook(lambda g: g * 4)
    (g,) = engine.grad((x * 2).sum(), x)
    assert g.tolist() == [8.0]


def test_tensor_hook_affects_grad_result_for_non_leaf_input():
    x = engine.tensor([1.0], requires_grad=True)
    h = x * 2
    h.register_hook(lambda g: g * 4)
    (g,) = engine.grad((h * 3).sum(), h)
    assert g.tolist() == [12.0]


# --- node hooks ---------------------------------------------------------------------------

def test_node_prehook_sees_grad_outputs_and_can_replace_them():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    seen = []

    def pre(grad_outputs):
        seen.append((type(grad_outputs).__name__, [g.tolist() for g in grad_outputs]))
        return (grad_outputs[0] * 2,)

    y.grad_fn.register_prehook(pre)
    y.backward(engine.tensor([1.0, 10.0]))
    assert seen == [("tuple", [[1.0, 10.0]])]
    assert x.grad.tolist() == [6.0, 60.0]


def test_node_posthook_sees_grad_inputs_and_grad_outputs():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3  # the scalar 3 needs no gradient
    seen = []

    def post(grad_inputs, grad_outputs):
        seen.append(([None if g is None else g.tolist() for g in grad_inputs],
                     [g.tolist() for g in grad_outputs]))

    y.grad_fn.register_hook(post)
    y.sum().backward()
    assert seen == [([[3.0, 3.0], None], [[1.0, 1.0]])]
    assert x.grad.tolist() == [3.0, 3.0]


def test_node_posthook_can_replace_grad_inputs():
    x = engine.tensor([1.0], requires_grad=True)
    w = engine.tensor([2.0], requires_grad=True)
    y = x * w
    y.grad_fn.register_hook(lambda gi, go: (gi[0] * 0, gi[1] * 5))
    y.sum().backward()
    assert x.grad.tolist() == [0.0]
    assert w.grad.tolist() == [5.0]


def test_node_hook_wrong_arity_raises():
    x = engine.tensor([1.0], requires_grad=True)
    y = x * 2
    y.grad_fn.register_prehook(lambda go: (go[0], go[0]))
    with pytest.raises(RuntimeError, match="must return None or a sequence of 1 gradients"):
        y.sum().backward()


def test_tensor_hook_runs_before_node_prehook():
    x = engine.tensor([1.0], requires_grad=True)
    h = x * 2
    order = []
    h.grad_fn.register_prehook(lambda go: order.append(("pre", go[0].tolist())))
    h.register_hook(lambda g: order.append("tensor") or g * 3)
    h.sum().backward()
    assert order == ["tensor", ("pre", [3.0])]


def test_node_hook_handles_remove():
    x = engine.tensor([1.0], requires_grad=True)
    y = x * 2
    calls = []
    a = y.grad_fn.register_prehook(lambda go: calls.append("pre"))
    b = y.grad_fn.register_hook(lambda gi, go: calls.append("post"))
    a.remove()
    b.remove()
    y.sum().backward()
    assert calls == []


def test_accumulate_grad_node_hooks():
    x = engine.tensor([1.0], requires_grad=True)
    y = x * 2
    acc = y.grad_fn.next_functions[0][0]
    calls = []
    acc.register_prehook(lambda go: calls.append(("pre", go[0].tolist(), x.grad)))
    acc.register_hook(lambda gi, go: calls.append(("post", gi, x.grad.tolist())))
    y.sum().backward()
    assert calls == [("pre", [2.0], None), ("post", (), [2.0])]


# --- retain_grad --------------------------------------------------------------------------

def test_retain_grad_on_non_leaf():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    h.retain_grad()
    assert h.retains_grad is True
    (h * h).sum().backward(retain_graph=True)
    assert h.grad.tolist() == [6.0, 12.0]
    assert x.grad.tolist() == [18.0, 36.0]
    (h * h).sum().backward()
    assert h.grad.tolist() == [12.0, 24.0]  # accumulates like a leaf's


def test_retain_grad_is_noop_on_leaf():
    x = engine.tensor([1.0], requires_grad=True)
    x.retain_grad()
    assert x.retains_grad is False
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0]


def test_retain_grad_needs_requires_grad():
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        engine.tensor([1.0]).retain_grad()


def test_retained_grad_sees_tensor_hook_results():
    x = engine.tensor([1.0], requires_grad=True)
    h = x * 3
    h.retain_grad()
    h.register_hook(lambda g: g * 2)  # registered after retain_grad: still applied first
    (h * 5).sum().backward()
    assert h.grad.tolist() == [10.0]
    assert x.grad.tolist() == [30.0]


def test_retained_grad_is_not_aliased_with_graph_values():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    h.retain_grad()
    g = engine.tensor([1.0, 1.0])
    h.backward(g)
    h.grad.data[0] = 99.0
    assert g.tolist() == [1.0, 1.0]
    assert x.grad.tolist() == [1.0, 1.0]


# --- post-accumulate-grad hooks -----------------------------------------------------------

def test_post_accumulate_grad_hook_sees_updated_grad():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    x.register_post_accumulate_grad_hook(lambda t: seen.append((t is x, t.grad.tolist())))
    (x * 3).sum().backward()
    (x * 3).sum().backward()
    assert seen == [(True, [3.0, 3.0]), (True, [6.0, 6.0])]


def test_post_accumulate_grad_hook_runs_after_tensor_hooks():
    x = engine.tensor([1.0], requires_grad=True)
    order = []
    x.register_post_accumulate_grad_hook(lambda t: order.append(("post", t.grad.tolist())))
    x.register_hook(lambda g: order.append("tensor") or g * 2)
    (x * 3).sum().backward()
    assert order == ["tensor", ("post", [6.0])]


def test_post_accumulate_grad_hook_remove():
    x = engine.tensor([1.0], requires_grad=True)
    calls = []
    handle = x.register_post_accumulate_grad_hook(lambda t: calls.append(1))
    handle.remove()
    (x * 3).sum().backward()
    assert calls == []


def test_post_accumulate_grad_hook_on_non_leaf_raises():
    x = engine.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="cannot be registered on non-leaf tensors"):
        (x * 2).register_post_accumulate_grad_hook(lambda t: None)


def test_post_accumulate_grad_hook_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        engine.tensor([1.0]).register_post_accumulate_grad_hook(lambda t: None)
