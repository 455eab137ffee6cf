"""Views and in-place ops against torch 2.13's observable behaviour (issue 16): a second
backward through a freed graph that in-place writes recorded, saved index tensors, and views
made stale by an in-place op on their base or a sibling view."""
from __future__ import annotations

import pytest

from threadgrad import engine, ops

TWICE = "Specify retain_graph=True"
MODIFIED = "modified by an inplace operation"


def _w() -> engine.Tensor:
    return engine.tensor([1.0, 2.0, 3.0], requires_grad=True)


def _setitem(y: engine.Tensor, idx, value) -> engine.Tensor:
    y[idx] = value
    return y


# -- a second backward through a freed graph ------------------------------------------------
# Each graph is built from nodes that save nothing but the ones under test (clone, slicing,
# sum), so only the node under test can refuse the second run. torch 2.13 raises for each.
TWICE_RAISES = {
    "setitem_int": lambda w: _setitem(w.clone(), 1, 5.0),                     # CopySlices
    "setitem_slice": lambda w: _setitem(engine.zeros(3), slice(0, 2), w[:2]),  # CopySlices
    "setitem_none": lambda w: _setitem(engine.zeros(3), None, w),               # CopySlices
    "inplace_on_view": lambda w: (lambda y: (y[1:].add_(1.0), y)[1])(w.clone()),  # CopySlices
    "getitem_list": lambda w: w[[0, 2]],                                        # IndexBackward0
    "getitem_mask": lambda w: w[engine.tensor([True, False, True])],            # IndexBackward0
    "setitem_list": lambda w: _setitem(w.clone(), [0], 7.0),                    # IndexPutBackward0
    "index_put": lambda w: ops.index_put(engine.zeros(3), (engine.tensor([0, 1]),), w[:2]),
    "gather": lambda w: ops.gather(w, 0, engine.tensor([0, 0])),                # GatherBackward0
}


@pytest.mark.parametrize("make", TWICE_RAISES.values(), ids=TWICE_RAISES.keys())
def test_second_backward_through_freed_index_or_copyslices_graph_raises(make) -> None:
    """torch: test_autograd.py TestAutograd.test_backward_twice_with_saved_values, widened to
    every node torch frees here (CopySlices drops its wrapped node; the index nodes their
    saved indices)."""
    w = _w()
    out = make(w)
    out.sum().backward()
    first = w.grad.tolist()
    with pytest.raises(RuntimeError, match=TWICE):
        out.sum().backward()
    assert w.grad.tolist() == first  # nothing accumulated by the refused run


def test_brief_repro_index_put_of_index() -> None:
    """The issue's repro: c[[1, 2]] = b[[1, 1]] on a constant c, backward twice."""
    b = engine.randn(3, requires_grad=True)
    c = engine.zeros(3)
    c[[1, 2]] = b[[1, 1]]
    c.backward(engine.ones(3))
    with pytest.raises(RuntimeError, match=TWICE):
        c.backward(engine.ones(3))
    assert b.grad.tolist() == [0.0, 2.0, 0.0]


# Writes through an index that covers the whole tensor are plain fill_/copy_ in torch
# (FillBackward, CopyBackwards): they save nothing and run again (torch 2.13's results).
TWICE_RUNS = {
    "setitem_ellipsis": (lambda w: _setitem(w.clone(), Ellipsis, 5.0), [0.0, 0.0, 0.0]),
    "setitem_full_slice": (lambda w: _setitem(w.clone(), slice(None), 5.0), [0.0, 0.0, 0.0]),
    "fill_": (lambda w: w.clone().fill_(5.0), [0.0, 0.0, 0.0]),
    "zero_": (lambda w: w.clone().zero_(), [0.0, 0.0, 0.0]),
    "copy_": (lambda w: engine.zeros(3).copy_(w), [2.0, 2.0, 2.0]),
    "setitem_ellipsis_value": (lambda w: _setitem(engine.zeros(3), Ellipsis, w), [2.0, 2.0, 2.0]),
    "basic_getitem": (lambda w: w[1:], [0.0, 2.0, 2.0]),
}


@pytest.mark.parametrize("make, grad", TWICE_RUNS.values(), ids=TWICE_RUNS.keys())
def test_second_backward_through_whole_tensor_writes_runs(make, grad) -> None:
    w = _w()
    out = make(w)
    out.sum().backward()
    out.sum().backward()
    assert w.grad.tolist() == grad


@pytest.mark.parametrize("make", TWICE_RAISES.values(), ids=TWICE_RAISES.keys())
def test_retain_graph_runs_twice_with_the_same_gradient(make) -> None:
    w = _w()
    out = make(w)
    out.sum().backward(retain_graph=True)
    first = w.grad.tolist()
    out.sum().backward()
    assert w.grad.tolist() == [2 * g for g in first]


# -- saved index tensors ---------------------------------------------------------------------
def _modify_index_after(op):
    x = engine.randn(3, requires_grad=True)
    i = engine.tensor([0, 1])
    out = op(x, i)
    i.add_(1)  # the gradient would go to [1, 2] if the index were not saved
    return out


@pytest.mark.parametrize("op", [
    lambda x, i: x[i],
    lambda x, i: ops.gather(x, 0, i),
    lambda x, i: _setitem(engine.zeros(3), i, x[:2]),
], ids=["getitem", "gather", "setitem"])
def test_index_tensor_changed_in_place_after_the_op_raises(op) -> None:
    """torch saves the index tensors, so backward raises where it would otherwise send the
    gradient to the index's new positions (silently wrong before)."""
    out = _modify_index_after(op)
    with pytest.raises(RuntimeError, match=MODIFIED):
        out.sum().backward()


def test_gather_input_changed_in_place_raises() -> None:
    """torch's GatherBackward0 saves its input too."""
    x = engine.randn(3, requires_grad=True).clone()
    out = ops.gather(x, 0, engine.tensor([0, 1]))
    x.mul_(2)
    with pytest.raises(RuntimeError, match=MODIFIED):
        out.sum().backward()


@pytest.mark.parametrize("op, packed", [
    (lambda x, i: x[i], 1),
    (lambda x, i: ops.gather(x, 0, i), 2),
    (lambda x, i: _setitem(x.clone(), i, 5.0), 1),
    (lambda x, i: _setitem(x.clone(), slice(1, 3), 5.0), 0),
    (lambda x, i: x.clone()[1:].add_(1.0), 0),
], ids=["getitem", "gather", "setitem_list", "setitem_slice", "inplace_on_view"])
def test_pack_hooks_see_what_torch_saves(op, packed) -> None:
    """The counts torch 2.13 gives under saved_tensors_hooks."""
    n = []
    x = _w()
    with engine.saved_tensors_hooks(lambda t: n.append(t) or t, lambda t: t):
        op(x, engine.tensor([0, 2]))
    assert len(n) == packed


def test_double_backward_through_advanced_index() -> None:
    """The index saved by getitem's backward-of-backward: d/dx of sum(g[i] * x[i]) style."""
    x = _w()
    y = x[[0, 0, 2]]
    (g,) = engine.grad((y * y).sum(), x, create_graph=True)
    assert g.tolist() == [4.0, 0.0, 6.0]
    (gg,) = engine.grad(g.sum(), x)
    assert gg.tolist() == [4.0, 0.0, 2.0]
