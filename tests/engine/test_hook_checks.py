"""Hooks as torch checks them: a leaf's tensor hooks sit next to its AccumulateGrad's own node
hooks, and a hook may not change a gradient's dtype or device or fill a None slot."""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import engine, ops


def test_a_tensor_hook_on_a_leaf_keeps_the_node_hooks_of_its_accumulate_grad():
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    acc = y.grad_fn.next_functions[0][0]
    seen = []
    acc.register_prehook(lambda go: seen.append("pre"))
    acc.register_hook(lambda gi, go: seen.append("post"))
    x.register_hook(lambda g: seen.append("tensor") or g * 10)  # registered after the node's hooks
    y.sum().backward()
    assert seen == ["tensor", "pre", "post"]  # torch's order: tensor hooks, node pre-hooks, post-hooks
    assert x.grad.tolist() == [20.0, 20.0, 20.0]


def test_tensor_hooks_outlive_the_accumulate_grad_while_its_node_hooks_die_with_it():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    y = x * 3
    acc = y.grad_fn.next_functions[0][0]
    acc.register_prehook(lambda go: seen.append("node pre"))
    x.register_hook(lambda g: seen.append("tensor") or None)
    y.sum().backward()
    assert seen == ["tensor", "node pre"]
    del y, acc  # the graph and its AccumulateGrad go
    seen.clear()
    (x * 3).sum().backward()  # a new AccumulateGrad: the tensor hook is the leaf's, the node hook was the node's
    assert seen == ["tensor"]
    assert x.grad.tolist() == [6.0, 6.0]


@pytest.mark.parametrize("where", ["leaf", "non-leaf"])
def test_a_hook_that_changes_the_dtype_raises(where):
    x = engine.tensor([1.0, 2.0, 3.0], dtype=np.float64, requires_grad=True)
    t = x if where == "leaf" else x * 1
    t.register_hook(lambda g: g.to(np.float32))
    with pytest.raises(RuntimeError, match=r"hook '[^']*<lambda>' on \w+ has changed the type of value: it was given "
                                           r"a gradient of dtype float64 on cpu and returned one of dtype float32 on cpu"):
        (t * t).sum().backward()
    z = engine.tensor([1.0], dtype=np.float64, requires_grad=True)
    (z * 4).sum().backward()
    assert z.grad.tolist() == [4.0]


@pytest.mark.timeout(60)
def test_a_hook_that_moves_the_gradient_to_another_device_raises():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    x.register_hook(lambda g: ops.to(g, "virtual:1"))
    with pytest.raises(RuntimeError, match=r"has changed the type of value: .* on cpu and returned one of dtype float32 on virtual:1"):
        (x * x).sum().backward()
    assert x.grad is None


def test_a_node_post_hook_cannot_fill_a_none_gradient():
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * engine.tensor([1.0, 2.0, 3.0])  # the constant's slot gets None
    y.grad_fn.register_hook(lambda gi, go: (gi[0], engine.ones(3)))
    with pytest.raises(RuntimeError, match=r"on MulBackward0: can't replace a None gradient with a non-None value \(got Tensor\)"):
        y.sum().backward()
    y2 = x * engine.tensor([1.0, 2.0, 3.0])
    y2.grad_fn.register_hook(lambda gi, go: (gi[0] * 2, None))  # replacing the defined one is fine
    y2.sum().backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]


def test_assigning_a_grad_of_another_dtype_raises():
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)  # float32
    with pytest.raises(RuntimeError, match="assigned grad has dtype float64, but the tensor has dtype float32"):
        x.grad = engine.ones(3, dtype=np.float64)
    assert x.grad is None
    x.grad = engine.ones(3)
    assert x.grad.tolist() == [1.0, 1.0, 1.0]
