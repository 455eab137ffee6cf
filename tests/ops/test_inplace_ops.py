"""In-place methods: version counters, the leaf rule, recorded in-place ops and their
gradients, the saved-tensor check, views."""
from __future__ import annotations

import numpy as np
import pytest

import engine
import ops

LEAF = "a leaf Variable that requires grad is being used in an in-place operation."


@pytest.mark.parametrize("call", [
    lambda t: t.add_(1.0), lambda t: t.sub_(engine.ones(3)), lambda t: t.mul_(2.0), lambda t: t.div_(2.0),
    lambda t: t.zero_(), lambda t: t.fill_(3.0), lambda t: t.copy_(engine.zeros(3)),
    lambda t: t.__setitem__(0, 5.0), lambda t: t.__iadd__(1.0), lambda t: t.__isub__(1.0),
    lambda t: t.__imul__(2.0), lambda t: t.__itruediv__(2.0),
], ids=["add_", "sub_", "mul_", "div_", "zero_", "fill_", "copy_", "setitem", "iadd", "isub", "imul", "itruediv"])
def test_each_in_place_op_bumps_version_by_one(call) -> None:
    t = engine.tensor([1.0, 2.0, 3.0])
    view = t[1:]
    out = call(t)
    assert t.version == 1 and view.version == 1
    if out is not None:
        assert out is t


def test_values() -> None:
    t = engine.tensor([1.0, 2.0, 4.0])
    t.add_(engine.tensor([1.0, 1.0, 1.0]), alpha=2.0)
    assert t.tolist() == [3.0, 4.0, 6.0]
    t.sub_(1.0).mul_(2.0).div_(4.0)
    assert t.tolist() == [1.0, 1.5, 2.5]
    t[1:] = engine.tensor([9.0, 8.0])
    assert t.tolist() == [1.0, 9.0, 8.0]
    t.copy_(engine.tensor([7.0], device="virtual:1"))
    assert t.tolist() == [7.0, 7.0, 7.0] and t.device is engine.tensor(0.0).device
    t += 1
    t *= 2
    assert t.tolist() == [16.0] * 3 and t.version == 8
    t.zero_()
    assert t.tolist() == [0.0] * 3


def test_leaf_requiring_grad_refuses_in_place_under_grad_mode() -> None:
    w = engine.ones(3, requires_grad=True)
    for call in (lambda: w.add_(1.0), lambda: w.zero_(), lambda: w.__setitem__(0, 2.0), lambda: w.copy_(w)):
        with pytest.raises(RuntimeError, match=LEAF):
            call()
    assert w.version == 0
    with engine.no_grad():  # what optimizers do
        w.sub_(0.5)
        w[0] = 3.0
    assert w.tolist() == [3.0, 0.5, 0.5] and w.version == 2 and w.requires_grad and w.is_leaf


def test_errors_for_shape_and_dtype() -> None:
    t = engine.zeros(3)
    with pytest.raises(RuntimeError, match=r"\[3\].*\[2, 3\]|\[2, 3\].*\[3\]"):
        t.add_(engine.ones(2, 3))
    i = engine.tensor([1, 2])
    with pytest.raises(RuntimeError, match="can't be cast"):
        i.div_(2)
    with pytest.raises(RuntimeError, match="can't be cast"):
        i.add_(0.5)
    r = engine.zeros(3)
    x = engine.ones(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"\[3\]"):
        r.add_(x)  # recorded path: the result's shape is checked too


def test_recorded_in_place_ops_give_correct_gradients() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y.add_(x)           # 3x
    y.mul_(y)           # 9x^2  (other is self: the snapshot stands for both)
    y.sub_(x, alpha=2)  # 9x^2 - 2x
    y.div_(3.0)
    assert y.grad_fn.name() == "DivBackward0" and y.version == 4
    y.sum().backward()
    assert np.allclose(x.grad.numpy(), (18 * x.detach().numpy() - 2) / 3)


def test_in_place_with_grad_operand_makes_plain_tensor_require_grad() -> None:
    w = engine.tensor([2.0, 3.0], requires_grad=True)
    buf = engine.zeros(2)
    buf.add_(w)
    buf.mul_(w)
    assert buf.requires_grad and not buf.is_leaf
    buf.sum().backward()
    assert w.grad.tolist() == [4.0, 6.0]


def test_setitem_with_grad_records_index_put() -> None:
    x = engine.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    v = engine.tensor([10.0, 20.0], requires_grad=True)
    y = x * 1
    y[1:3] = v * 2
    assert y.grad_fn.name() == "IndexPutBackward0"
    (y * engine.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    assert x.grad.tolist() == [1.0, 0.0, 0.0, 4.0]
    assert v.grad.tolist() == [4.0, 6.0]


def test_fill_copy_zero_with_grad() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    s = engine.tensor(5.0, requires_grad=True)
    y = x * 3
    y.fill_(s)
    (y * engine.tensor([1.0, 2.0])).sum().backward()
    assert s.grad.item() == 3.0 and x.grad.tolist() == [0.0, 0.0]
    src = engine.tensor([1.0, 2.0], requires_grad=True)
    z = x * 1
    z.copy_(src * 2)
    z.sum().backward()
    assert src.grad.tolist() == [2.0, 2.0]
    q = x * 1
    q.zero_()
    assert q.requires_grad and q.tolist() == [0.0, 0.0]


def test_modified_saved_tensor_makes_backward_raise() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()          # ExpBackward0 saves its output y
    y.add_(1.0)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation.*version 1; expected version 0"):
        y.sum().backward()
    a = x * 1
    b = a * a            # MulBackward0 saves a
    a.mul_(2.0)
    with pytest.raises(RuntimeError, match="MulBackward0"):
        b.sum().backward()


def test_in_place_under_no_grad_keeps_graph_but_bumps_version() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    with engine.no_grad():
        y.add_(1.0)
    assert y.grad_fn.name() == "MulBackward0" and y.version == 1
    y.sum().backward()  # MulBackward0 saved x (unchanged), not y
    assert x.grad.tolist() == [2.0, 2.0]


def test_recorded_in_place_on_a_view_raises_clearly() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    base = x * 1
    view = base[:2]
    with pytest.raises(RuntimeError, match="view"):
        view.mul_(2.0)
    with pytest.raises(RuntimeError, match="view"):
        base.reshape(3, 1).add_(x.reshape(3, 1))
    with engine.no_grad():
        view.mul_(2.0)  # not recorded: allowed
    assert base.tolist() == [2.0, 4.0, 3.0]


def test_stale_view_raises_instead_of_wrong_gradient() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    base = x * 1
    view = base[:2]
    base.mul_(x)          # recorded: base's graph changes, view's graph does not
    with pytest.raises(RuntimeError, match="out of date"):
        view * 2
    fresh = base[:2]      # a view taken afterwards is fine
    fresh.sum().backward()
    assert x.grad.tolist() == [2.0, 4.0, 0.0]


def test_views_used_before_the_in_place_op_keep_their_gradient() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    base = x * 1
    early = base[:2] * 5  # used before: its graph is the old one, which is right for it
    base.add_(1.0)
    (early.sum() + base.sum()).backward()
    assert x.grad.tolist() == [6.0, 6.0, 1.0]


def test_expanded_tensor_refuses_writes() -> None:
    e = engine.ones(1, 3).expand(2, 3)
    with pytest.raises(RuntimeError, match="clone"):
        e.add_(1.0)
    with pytest.raises(RuntimeError, match="clone"):
        e[0] = 2.0
