"""Shape ops: split's multi-output node, cat/stack, views and version counters."""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import engine, ops


def test_split_unused_outputs_get_zero_gradients() -> None:
    x = engine.arange(10, dtype=engine.float32).requires_grad_()
    a, b, c, d = ops.split(x, 3)
    assert [p.shape for p in (a, b, c, d)] == [(3,), (3,), (3,), (1,)]
    assert a.grad_fn is b.grad_fn and a.grad_fn.name() == "SplitBackward0"
    (b * 2).sum().backward()  # a, c, d unused: their gradients arrive as None
    assert x.grad.tolist() == [0.0] * 3 + [2.0] * 3 + [0.0] * 4


def test_split_sections_dim_and_double_backward() -> None:
    x = engine.randn(2, 6, dtype=engine.float64, requires_grad=True)
    parts = ops.split(x, [1, 2, 3], dim=1)
    assert [p.shape for p in parts] == [(2, 1), (2, 2), (2, 3)]
    y = (parts[2] ** 2).sum()
    (g,) = engine.grad(y, x, create_graph=True)
    (gg,) = engine.grad(g.sum(), x)
    assert gg.tolist() == [[0.0, 0.0, 0.0, 2.0, 2.0, 2.0]] * 2
    with pytest.raises(RuntimeError, match="sum exactly"):
        ops.split(x, [1, 2], dim=1)


def test_split_pieces_are_views() -> None:
    x = engine.zeros(4)
    a, b = ops.split(x, 2)
    b.fill_(1.0)
    assert x.tolist() == [0.0, 0.0, 1.0, 1.0] and x.version == 1


def test_cat_and_stack_route_gradients_and_names() -> None:
    a = engine.ones(2, 2, requires_grad=True)
    b = engine.ones(1, 2, requires_grad=True)
    y = ops.cat([a, b * 3])
    assert y.grad_fn.name() == "CatBackward0"
    (y * engine.arange(6, dtype=engine.float32).reshape(3, 2)).sum().backward()
    assert a.grad.tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert b.grad.tolist() == [[12.0, 15.0]]
    s = ops.stack([a, a], dim=2)
    assert s.shape == (2, 2, 2) and s.grad_fn.name() == "StackBackward0"


def test_cat_promotes_and_checks() -> None:
    y = ops.cat([engine.ones(1, dtype=engine.int64), engine.ones(1)])
    assert y.dtype == np.float32
    with pytest.raises(RuntimeError, match="sizes of tensors must match"):
        ops.cat([engine.ones(2, 2), engine.ones(2, 3)])
    with pytest.raises(RuntimeError, match="virtual:1"):
        ops.cat([engine.ones(2), engine.ones(2, device="virtual:1")])


def test_view_methods() -> None:
    x = engine.arange(6, dtype=engine.float32).requires_grad_()
    y = x.view(2, 3).transpose(0, 1).permute(1, 0).reshape((3, 2)).T
    assert y.shape == (2, 3)
    assert x.view(2, 3).unsqueeze(0).squeeze(0).expand(2, 2, 3).shape == (2, 2, 3)
    (x.view(1, 6).expand(4, 6)).sum().backward()
    assert x.grad.tolist() == [4.0] * 6
