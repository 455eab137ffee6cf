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


# -- views made stale by an in-place op on their base or a sibling --------------------------
def test_retain_grad_follows_view_and_stale_sibling() -> None:
    """torch: test_autograd.py TestAutograd.test_retain_grad_inplace_over_view, with distinct
    weights so each view's .grad is its own use's gradient (torch 2.13's values)."""
    w = _w()
    y = w * 1.0
    a, b = y[0:2], y[1:]
    a.retain_grad()
    b.retain_grad()
    a.mul_(3.0)
    (a * engine.tensor([1.0, 10.0]) + b * engine.tensor([100.0, 1000.0])).sum().backward()
    assert a.grad.tolist() == [1.0, 10.0]  # not the sum over every use of 3 * a (was 301)
    assert b.grad.tolist() == [100.0, 1000.0]  # was None: the retain hook stayed on the old node
    assert w.grad.tolist() == [3.0, 330.0, 1000.0]


def test_stale_view_requires_grad_and_grad_see_the_base() -> None:
    """The issue's repro: a view of a tensor outside the graph, which an in-place op then puts
    in the graph."""
    r = engine.ones(1, requires_grad=True)
    x = engine.ones(5)
    v = x[1]
    x.add_(r)
    assert v.requires_grad is True and v.is_leaf is False
    assert [g.tolist() for g in engine.grad(v, r)] == [[1.0]]


def test_stale_view_attributes_refresh_under_no_grad() -> None:
    r = engine.ones(1, requires_grad=True)
    x = engine.ones(5)
    v = x[1]
    x.add_(r)
    with engine.no_grad():
        assert v.requires_grad is True and v.is_leaf is False
    assert v.grad_fn.name() == "AsStridedBackward0"  # torch's name for a regenerated view
    assert [g.tolist() for g in engine.grad(v, r)] == [[1.0]]


@pytest.mark.parametrize("run", ["backward", "grad"])
def test_backward_from_a_stale_view_uses_the_base_history(run) -> None:
    """Was silently [0, 1, 0]: the view's old graph, from before y.mul_(2)."""
    w = _w()
    y = w * 1.0
    v = y[1]
    y.mul_(2.0)
    if run == "backward":
        v.backward()
        assert w.grad.tolist() == [0.0, 2.0, 0.0]
    else:
        assert [g.tolist() for g in engine.grad(v, w)] == [[0.0, 2.0, 0.0]]


def test_hooks_on_a_stale_sibling_registered_after_fire_before_do_not() -> None:
    """torch: test_autograd.py TestAutograd.test_tensor_hooks_inplace_over_view, without
    reading grad_fn first: registering the hook brings the view up to date."""
    w = _w()
    y = w * 1.0
    a, b = y[0:2], y[1:]
    before, after = [], []
    b.register_hook(lambda g: before.append(g.tolist()))
    a.mul_(3.0)
    b.register_hook(lambda g: after.append(g.tolist()))
    b.retain_grad()
    (b * engine.tensor([1.0, 10.0])).sum().backward()
    assert before == [] and after == [[1.0, 10.0]]
    assert b.grad.tolist() == [1.0, 10.0] and w.grad.tolist() == [0.0, 3.0, 10.0]


def test_hook_on_a_view_before_its_own_in_place_op_does_not_fire() -> None:
    """As torch 2.13: the op's gradient for the view's old value goes to the base's history
    directly (CopySlices), not through the view's old grad_fn, so its hook does not run."""
    w = _w()
    y = w * 1.0
    a = y[0:2]
    fired = []
    a.register_hook(lambda g: fired.append(g.tolist()))
    a.retain_grad()
    a.mul_(3.0)
    (a * engine.tensor([1.0, 10.0])).sum().backward()
    assert fired == []
    assert a.grad.tolist() == [1.0, 10.0] and w.grad.tolist() == [3.0, 30.0, 0.0]
    assert a.grad_fn.name() == "AsStridedBackward0"


def test_in_place_on_a_view_then_backward_from_it_twice_raises() -> None:
    """The view's history passes through its base's CopySlices, as in torch."""
    w = _w()
    y = w.clone()  # the base stays alive (a view does not keep it)
    v = y[0:2]
    v.fill_(3.0)
    v.sum().backward()
    with pytest.raises(RuntimeError, match=TWICE):
        v.sum().backward()


def test_grad_from_a_never_read_stale_view_of_a_tensor_outside_the_graph():
    """Issue 16 A's repro, torch's value: grad(v, r) == (1.,), the view not read before."""
    r = engine.ones(1, requires_grad=True)
    x = engine.ones(5)
    v = x[1]
    x.add_(r)
    (g,) = engine.grad(v, r)
    assert g.tolist() == [1.0]


def test_writing_into_a_view_of_a_tensor_outside_the_graph_is_recorded():
    """Issue 16 B, torch's values: the preallocated buffer joins the graph through CopySlices."""
    import numpy as np

    w = engine.tensor([1.0, 2.0, 3.0], dtype=np.float64, requires_grad=True)
    out = engine.zeros(3, 4, dtype=np.float64)
    out[0][1] = w[0] * 3
    out[2, 1:3] = w[1:3] * w[1:3]
    assert out.requires_grad
    (g,) = engine.grad((out * out).sum(), w)
    assert g.tolist() == [18.0, 32.0, 108.0]
    a = engine.tensor([2.0, 5.0], dtype=np.float64)
    b = engine.tensor([3.0], dtype=np.float64, requires_grad=True)
    a[1:2].mul_(b)
    assert a.tolist() == [2.0, 15.0] and a.requires_grad
    assert engine.grad(a.sum(), b)[0].tolist() == [5.0]


def test_in_place_on_a_split_piece_is_refused_at_the_op():
    """Issue 16 C, torch's words: an in-place op on one view of a multi-view function (split)
    under grad mode raises at the op (it used to run, then fail in backward)."""
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1.0
    s1, s2, s3 = ops.split(y, 1)
    with pytest.raises(RuntimeError, match="Output 0 of SplitBackward0 is a view and is being modified inplace. "
                                           "This view is the output of a function that returns multiple views."):
        s1.mul_(s2)
    assert y.tolist() == [1.0, 2.0, 3.0] and s1.version == 0
    with engine.no_grad():
        s1.mul_(2.0)  # not recorded: allowed, as in torch
    assert y.tolist() == [2.0, 2.0, 3.0]


class _ViewOut(engine.Function):
    @staticmethod
    def forward(ctx, a):
        return a[0:2]

    @staticmethod
    def backward(ctx, g):
        r = engine.zeros(3, dtype=g.dtype)
        r[0:2] = g
        return r


class _Same(engine.Function):
    @staticmethod
    def forward(ctx, a):
        return a

    @staticmethod
    def backward(ctx, g):
        return g * 10.0  # a custom gradient the view+in-place logic would silently replace


@pytest.mark.parametrize("fn", [_ViewOut, _Same], ids=["view-of-input", "input-as-is"])
def test_in_place_on_a_custom_functions_view_output_is_refused_at_the_op(fn):
    """Issue 16 C (second half), torch's words: the view+in-place logic would override the
    custom backward, so torch refuses it; it used to be accepted and regenerated past it."""
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    o = fn.apply(x * 1.0)
    with pytest.raises(RuntimeError, match="is a view and is being modified inplace. This view was created inside a "
                                           "custom Function \\(or because an input was returned as-is\\)"):
        o.mul_(2.0)
    o.sum().backward()  # the graph is intact: the custom backward runs
    expected = [1.0, 1.0, 0.0] if fn is _ViewOut else [10.0, 10.0, 10.0]
    assert x.grad.tolist() == expected


# -- E: views made under no_grad (Note [No-grad views] in engine/versions.py) ----------------
NO_GRAD_VIEW_INPLACE = "A view was created in no_grad mode and is being modified inplace with grad mode enabled."


def test_a_no_grad_view_of_a_leaf_requires_grad_and_its_gradient_goes_nowhere():
    """torch 2.13: ``with no_grad(): v = x[0:1]`` has requires_grad True, no grad_fn, is a leaf;
    ops on it are recorded; its gradient reaches neither x nor v.grad."""
    x = engine.ones(3, requires_grad=True)
    with engine.no_grad():
        v = x[0:1]
        vv = v[0:1]  # a view of such a view: the same
    assert (v.requires_grad, v.grad_fn, v.is_leaf, vv.requires_grad) == (True, None, True, True)
    y = v * 2
    assert y.requires_grad and y.grad_fn is not None
    y.sum().backward()
    assert x.grad is None and v.grad is None
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        engine.grad((v * 2).sum(), v)


def test_a_no_grad_view_of_a_non_leaf_requires_grad_without_a_grad_fn():
    y = engine.ones(3, requires_grad=True) * 1.0
    with engine.no_grad():
        u = y.reshape(3)
        plain = engine.ones(3)[0:2]
    assert (u.requires_grad, u.grad_fn, plain.requires_grad) == (True, None, False)


def test_in_place_on_a_no_grad_view_of_a_leaf_in_grad_mode_raises_torchs_error():
    x = engine.ones(3, requires_grad=True)
    with engine.no_grad():
        v = x[0:1]
    with pytest.raises(RuntimeError, match=NO_GRAD_VIEW_INPLACE):
        v.mul_(2)
    with engine.no_grad():
        v.mul_(2)  # both under no_grad: allowed, nothing recorded
    assert x.tolist() == [2.0, 1.0, 1.0]


def test_requires_grad_on_a_no_grad_view_makes_it_a_leaf_of_its_own():
    x = engine.ones(3, requires_grad=True)
    with engine.no_grad():
        v = x[0:2]
    v.requires_grad_(True)
    (v * 3).sum().backward()
    assert v.grad.tolist() == [3.0, 3.0] and x.grad is None


# -- F: a write through a view of a detach() alias ------------------------------------------

def test_writing_through_a_view_of_a_detached_alias_is_recorded():
    """torch 2.13: ``d = c.detach(); d[1].add_(w)`` puts d in the graph (CopySlices); c stays out
    of it, sharing the version counter. threadgrad dropped the write silently before."""
    c = engine.zeros(3)
    w = engine.tensor([2.0], requires_grad=True)
    d = c.detach()
    d[1].add_(w[0] * 3.0)
    assert d.requires_grad and d.grad_fn.name() == "CopySlices"
    assert (c.requires_grad, c.version, d.version) == (False, 1, 1)
    assert c.tolist() == [0.0, 6.0, 0.0]
    d.sum().backward()
    assert w.grad.tolist() == [3.0]


def test_writing_through_an_alias_of_a_non_leaf_leaves_the_original_history():
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    c = x * 2.0
    w = engine.tensor([5.0], requires_grad=True)
    d = c.detach()
    d[1].mul_(w[0])
    assert c.grad_fn.name() == "MulBackward0" and d.grad_fn.name() == "CopySlices"
    (d * engine.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert w.grad.tolist() == [40.0] and x.grad is None  # 10 * old d[1] (= 4); nothing reaches x
    # The alias shares the version counter: a node that saved the original before the write raises.
    y = x * 2.0
    z = y * y  # saves y at version 0
    y.detach()[0].add_(w[0])
    with pytest.raises(RuntimeError, match=MODIFIED):
        z.sum().backward()


# -- G(2) and E: custom Functions and mark_dirty --------------------------------------------

class _DirtyNotInput(engine.Function):
    @staticmethod
    def forward(ctx, a):
        t = engine.ones(2)
        ctx.mark_dirty(t)
        return a * 2, t

    @staticmethod
    def backward(ctx, g, g2):
        return g * 2


def test_mark_dirty_on_a_tensor_that_is_not_an_input_warns_as_torch():
    with pytest.warns(UserWarning, match=r"ctx.mark_dirty\(\) received a tensor that was not an input"):
        out, t = _DirtyNotInput.apply(engine.ones(2, requires_grad=True))
    assert out.tolist() == [2.0, 2.0] and t.tolist() == [1.0, 1.0]


class _AddOneInPlace(engine.Function):
    @staticmethod
    def forward(ctx, a):
        ctx.mark_dirty(a)
        a.add_(1.0)
        return a

    @staticmethod
    def backward(ctx, g):
        return g


@pytest.mark.parametrize("rg, grad_mode, same", [(False, True, True), (False, False, True), (True, True, True),
                                                 (True, False, False)])
def test_mark_dirty_function_returns_the_input_object_as_torch(rg, grad_mode, same):
    """torch 2.13: only a dirty input that requires grad, under no_grad, comes back as a new object
    (outside the graph, sharing memory and version)."""
    a = engine.ones(2, requires_grad=rg) * 1.0 if rg else engine.ones(2)
    with engine.set_grad_enabled(grad_mode):
        r = _AddOneInPlace.apply(a)
    assert (r is a) == same
    assert r.requires_grad == (rg and grad_mode)
    assert r.tolist() == [2.0, 2.0] and r.version == a.version


# -- views keep their base alive, as torch's _base -----------------------------------------

def test_a_view_keeps_its_base_alive_so_its_history_can_be_taken_anew():
    import gc
    import weakref
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    base = x * 1.0
    v1, v2 = base[1:], base[:2]
    ref = weakref.ref(base)
    del base
    gc.collect()
    assert ref() is not None and v1._base is ref()
    v1.mul_(3.0)  # v2 is stale now; its base is alive, so it takes its history anew
    (v2 * engine.tensor([1.0, 10.0])).sum().backward()
    assert x.grad.tolist() == [1.0, 30.0, 0.0]


# -- x[t] for a 0-d integer tensor t selects, as torch's indexing -------------------------

def test_indexing_with_a_0d_integer_tensor_is_a_view_as_an_int():
    """torch 2.13: ``t[torch.tensor(1)]`` is ``t[1]`` (a view that writes through; SelectBackward
    history); a 0-d bool tensor stays a mask; index_put keeps tensors as advanced indices."""
    t = engine.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    s = t[engine.tensor(1)]
    assert s._base is t
    s.add_(100.0)
    assert t.tolist()[1] == [103.0, 104.0, 105.0]
    t[engine.tensor(0), engine.tensor(2)] = -1.0
    assert t.tolist()[0] == [0.0, 1.0, -1.0]
    assert t[engine.tensor(True)].shape == (1, 2, 3)
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1.0
    y[engine.tensor(1)] = 7.0
    assert y.grad_fn.name() == "CopySlices"
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 0.0, 1.0]


@pytest.mark.parametrize("write, name", [
    (lambda y, s: y.fill_(s), "FillBackward3"),
    (lambda y, s: y.fill_(2.0), "FillBackward2"),
    (lambda y, s: y.zero_(), "ZeroBackward0"),
    (lambda y, s: y.copy_(y * 2), "CopyBackwards"),
    (lambda y, s: y.__setitem__(Ellipsis, 3.0), "FillBackward3"),
    (lambda y, s: y.__setitem__(slice(None), y * 2), "CopyBackwards"),
    (lambda y, s: y.__setitem__([0, 1], 3.0), "IndexPutBackward0"),
    (lambda y, s: y.__setitem__(1, s), "CopySlices"),
], ids=["fill_tensor", "fill_number", "zero", "copy", "setitem_ellipsis", "setitem_all", "setitem_list",
        "setitem_int"])
def test_in_place_writes_carry_torchs_node_names(write, name):
    """torch 2.13's grad_fn for each whole-tensor or sliced write (names only: the gradients are
    index_put's and are tested above)."""
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    s = engine.tensor(5.0, requires_grad=True)
    y = x * 1.0
    write(y, s)
    assert y.grad_fn.name() == name
