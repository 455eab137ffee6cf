"""In-place methods: version counters, the leaf rule, recorded in-place ops and their
gradients, the saved-tensor check, views."""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import engine, ops

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


def test_setitem_with_grad_records_copy_slices_as_torch() -> None:
    x = engine.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    v = engine.tensor([10.0, 20.0], requires_grad=True)
    y = x * 1
    y[1:3] = v * 2
    assert y.grad_fn.name() == "CopySlices"
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


def test_recorded_in_place_on_a_view_rebases_its_root_as_torch() -> None:
    """Note [In-place ops on views]: values and gradients are torch 2.13's."""
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = engine.tensor([5.0], requires_grad=True)
    y = x * 2
    v = y[1:]
    v.mul_(w)
    assert y.tolist() == [2.0, 20.0, 30.0] and y.grad_fn.name() == "CopySlices"
    assert y.version == v.version == 1
    (y * engine.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert x.grad.tolist() == [2.0, 100.0, 1000.0] and w.grad.tolist() == [640.0]


def test_setitem_on_a_view_and_a_view_of_a_view() -> None:
    x = engine.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = x * 2
    y[0][1] = 5.0
    (y * engine.tensor([[1.0, 10.0], [100.0, 1000.0]])).sum().backward()
    assert y.tolist() == [[2.0, 5.0], [6.0, 8.0]] and x.grad.tolist() == [[2.0, 0.0], [200.0, 2000.0]]
    x = engine.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    w = engine.tensor([2.0], requires_grad=True)
    y = x * 1
    y.reshape(2, 2)[1:].add_(w * 3)
    (y ** 2).sum().backward()
    assert y.tolist() == [1.0, 2.0, 9.0, 10.0]
    assert x.grad.tolist() == [2.0, 4.0, 18.0, 20.0] and w.grad.tolist() == [114.0]


def test_in_place_on_transposed_and_strided_views() -> None:
    x = engine.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = x * 1
    y.transpose(0, 1)[0].mul_(10)
    (y * engine.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    assert y.tolist() == [[10.0, 2.0], [30.0, 4.0]] and x.grad.tolist() == [[10.0, 2.0], [30.0, 4.0]]
    x = engine.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], requires_grad=True)
    y = x * 1
    y[::2].mul_(10)
    (y * engine.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])).sum().backward()
    assert x.grad.tolist() == [10.0, 2.0, 30.0, 4.0, 50.0, 6.0]


def test_a_root_laid_out_in_fortran_order_is_rebased_too() -> None:
    x = engine.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=engine.float64, requires_grad=True)
    y = ops.mul(x.transpose(0, 1), 1.0)  # numpy keeps the transposed (Fortran) layout
    assert y._data.flags.f_contiguous and not y._data.flags.c_contiguous
    y[1:, 1].mul_(10)
    (y * engine.tensor(np.arange(6.0).reshape(3, 2))).sum().backward()
    assert y.tolist() == [[1.0, 4.0], [2.0, 50.0], [3.0, 60.0]]
    assert x.grad.tolist() == [[0.0, 2.0, 4.0], [1.0, 30.0, 50.0]]


def test_in_place_twice_on_a_view_then_using_it_and_double_backward() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], dtype=engine.float64, requires_grad=True)
    y = x * 2
    v = y[:2]
    v.add_(1)
    v.mul_(x[:2].detach() + 1)
    (y * y).sum().backward()
    assert y.tolist() == [6.0, 15.0, 6.0] and x.grad.tolist() == [48.0, 180.0, 24.0]
    x = engine.tensor([1.0, 2.0, 3.0], dtype=engine.float64, requires_grad=True)
    y = x * 2
    v = y[1:]
    v.mul_(3)
    (v.sum() * 7 + y.sum()).backward()
    assert v.tolist() == [12.0, 18.0] and x.grad.tolist() == [2.0, 48.0, 48.0]
    x = engine.tensor([1.0, 2.0, 3.0], dtype=engine.float64, requires_grad=True)
    y = x * x
    y[1:].mul_(x[1:])
    (g,) = engine.grad((y * y).sum(), x, create_graph=True)
    (gg,) = engine.grad(g.sum(), x)
    assert g.tolist() == [4.0, 192.0, 1458.0] and gg.tolist() == [12.0, 480.0, 2430.0]


def test_in_place_on_a_view_of_a_leaf_that_requires_grad_raises_as_torch() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad is being used in an in-place"):
        x[1:].mul_(2.0)
    with engine.no_grad():
        x[1:].mul_(2.0)  # not recorded: allowed
    assert x.tolist() == [1.0, 4.0, 6.0]


def test_a_view_made_stale_by_an_in_place_op_takes_its_history_anew() -> None:
    """As torch regenerates a view's grad_fn: the view reads the root as it is now."""
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    base = x * 1
    view = base[:2]
    base.mul_(x)          # recorded: base's graph changes
    (view * 2).sum().backward()
    assert x.grad.tolist() == [4.0, 8.0, 0.0]
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    a, b = y[:2], y[1:]
    b.mul_(3)             # through another view
    a.sum().backward()
    assert x.grad.tolist() == [2.0, 6.0, 0.0]


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


def test_a_detach_alias_is_never_a_view_for_autograd() -> None:
    """Its first view must not make it the root, a rebase must not reach it, and using it
    after in-place ops on its source must not raise (torch 2.13's values)."""
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    d = y.detach()
    d.reshape(3, 1)                    # the first view of the shared counter, taken of the alias
    y[1:].mul_(engine.tensor([2.0, 2.0]))
    (y * engine.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert x.grad.tolist() == [2.0, 40.0, 400.0] and not d.requires_grad and d.grad_fn is None
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    d = y.detach()
    y.mul_(x)
    assert (d * 1).tolist() == [2.0, 8.0, 18.0] and d.grad_fn is None


def test_a_view_of_a_detach_alias_is_outside_the_graph_too() -> None:
    """Writing through it with a value that requires grad records on the view alone: the
    source's graph never sees it (torch 2.13's values)."""
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = engine.tensor([5.0, 5.0], requires_grad=True)
    y = x * 2
    dv = y.detach()[1:]
    dv.mul_(w)
    (y * engine.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert y.tolist() == [2.0, 20.0, 30.0] and x.grad.tolist() == [2.0, 20.0, 200.0] and w.grad is None


def test_views_outside_the_graph_still_work_after_a_rebase() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y[1:].mul_(3)
    assert (y.detach() * 2).tolist() == [4.0, 24.0, 36.0]
    with engine.no_grad():
        assert (y[1:] * 2).tolist() == [24.0, 36.0]
    (y @ engine.ones(3, 2, requires_grad=True)).sum().backward()  # matmul's backward views y under no_grad
    assert x.grad.tolist() == [4.0, 12.0, 12.0]


def test_a_view_whose_root_is_gone_stays_usable_after_its_own_in_place_op() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    v = (x * 2)[1:]                    # the root is collected at once
    v.mul_(3)
    (v * engine.tensor([1.0, 10.0])).sum().backward()
    assert v.tolist() == [12.0, 18.0] and x.grad.tolist() == [0.0, 6.0, 60.0]


@pytest.mark.parametrize("use", ["index_put values", "pow by a number", "linear bias", "custom Function"])
def test_every_argument_of_an_op_brings_a_stale_view_up_to_date(use: str) -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1
    s = y[:2]
    y.mul_(3)                          # s is stale: its graph is y's old one
    if use == "index_put values":
        z = engine.zeros(4)
        z[2:] = s
        (z * engine.tensor([1.0, 1.0, 100.0, 1000.0])).sum().backward()
        assert x.grad.tolist() == [300.0, 3000.0, 0.0]
    elif use == "pow by a number":
        (s ** 2).sum().backward()
        assert x.grad.tolist() == [18.0, 36.0, 0.0]
    elif use == "linear bias":
        ops.linear(engine.ones(1, 3), engine.ones(2, 3), s).sum().backward()
        assert x.grad.tolist() == [3.0, 3.0, 0.0]
    else:
        class Square(engine.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.save_for_backward(a)
                return a * a

            @staticmethod
            def backward(ctx, g):
                (a,) = ctx.saved_tensors
                return 2 * a * g

        Square.apply(s).sum().backward()
        assert x.grad.tolist() == [18.0, 36.0, 0.0]


def test_a_view_made_under_no_grad_and_written_in_grad_mode_reaches_the_root() -> None:
    """torch refuses this; the rebase gives the exact gradient instead of a silently stale one."""
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    with engine.no_grad():
        v = y[1:]
    v.mul_(3)
    (y * engine.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert y.tolist() == [2.0, 12.0, 18.0] and x.grad.tolist() == [2.0, 60.0, 600.0]


def test_a_reshape_that_copies_is_no_view() -> None:
    x = engine.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], requires_grad=True)
    y = x * 2
    r = y.transpose(0, 1).reshape(-1)  # not expressible as a view: a copy
    r.mul_(3)
    assert y.tolist() == [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]]
    (r * engine.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])).sum().backward()
    assert x.grad.tolist() == [[6.0, 18.0, 30.0], [12.0, 24.0, 36.0]]


@pytest.mark.parametrize("where", ["through a view", "on the tensor"])
def test_retain_grad_follows_the_tensor_through_in_place_ops(where: str) -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    if where == "through a view":
        y[1:].mul_(3)
    else:
        y.mul_(3)
    (y * engine.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert y.grad.tolist() == [1.0, 10.0, 100.0]
