"""CopySlices, the base's node after an in-place op on a view, as torch 2.13 builds it (issue 33,
item 4; skipped without torch).

torch's CopySlices is one node whose edges are the base's old history and the in-place op's
other inputs; in backward it runs the op's own node on the view's elements of the base's
gradient. So a node post-hook (or pre-hook) on the base's ``grad_fn`` sees the base's gradient
and each other input's, at their shapes, and a hook that changes them changes what reaches
each input. Each case is one program written once over a library (``tg`` or ``torch``); it
returns what a user can observe, and torch is the oracle.
"""
from __future__ import annotations

import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")


def _t(lib, values, rg=False):
    return lib.tensor(values, dtype=lib.float64, requires_grad=rg)


def _obs(t):
    if t is None:
        return None
    if isinstance(t, (list, tuple)):
        return [_obs(u) for u in t]
    # 12 significant digits: the two libraries may sum in another order (last bits only)
    return [list(t.shape), [float(f"{v:.12g}") for v in t.detach().reshape(-1).tolist()]]


def _name(node):
    return None if node is None else node.name().replace("torch::autograd::", "")


def _dirty_mul(lib):
    class DirtyMul(lib.autograd.Function):
        """x <- x * w in place for a tensor w (its first argument the view)."""

        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x.clone(), w)
            x.mul_(w)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            x0, w = ctx.saved_tensors
            return g * w, g * x0

    return DirtyMul


# Each writes through a view of y = x * 1 (x of shape (2, 2)) with a tensor w of shape (2,).
WRITES = {
    "row_mul_tensor": lambda lib, y, w: y[1].mul_(w),
    "row_mul_number": lambda lib, y, w: y[1].mul_(3.0),
    "column_div": lambda lib, y, w: y[:, 1].div_(w + 3.0),
    "row_sub": lambda lib, y, w: y[0].sub_(w * w),
    "transposed_row_mul": lambda lib, y, w: y.t()[0].mul_(w),
    "view_of_view": lambda lib, y, w: y[1][0:1].mul_(w[1:]),
    "row_fill": lambda lib, y, w: y[1].fill_(7.0),
    "row_zero": lambda lib, y, w: y[0].zero_(),
    "row_copy": lambda lib, y, w: y[1].copy_(w * 2),
    "setitem_in_a_view": lambda lib, y, w: y[1].__setitem__(slice(0, 1), w[:1] * 5),
    "row_times_other_row": lambda lib, y, w: y[0].mul_(y[1]),  # torch and threadgrad raise in backward
    "dirty_function": lambda lib, y, w: _dirty_mul(lib).apply(y[1], w),
}


def _program(lib, write, hook):
    """Write, then backward through the base with a post-hook on its grad_fn that records
    what it sees and, for ``hook == "change"``, replaces each gradient by a function of it
    that is not a scaling (squares plus one)."""
    x = _t(lib, [[1.0, 2.0], [3.0, 4.0]], rg=True)
    w = _t(lib, [0.5, -2.0], rg=True)
    y = x * 1
    WRITES[write](lib, y, w)
    fn = y.grad_fn
    seen = {"node": _name(fn), "next": [(_name(n), k) for n, k in fn.next_functions]}

    def post(grad_inputs, grad_outputs):
        seen["post"] = [_obs(grad_inputs), _obs(grad_outputs)]
        if hook == "change":
            return tuple(None if g is None else g * g + 1.0 for g in grad_inputs)
        return None

    def pre(grad_outputs):
        seen["pre"] = _obs(grad_outputs)
        return (grad_outputs[0] * _t(lib, [[1.0, -1.0], [2.0, 0.5]]),) if hook == "change" else None

    fn.register_hook(post)
    fn.register_prehook(pre)
    try:
        (y * _t(lib, [[1.0, 10.0], [100.0, 1000.0]])).sum().backward()
    except RuntimeError as e:  # y[0].mul_(y[1]): the saved y[1] was changed by the write
        return "raised", "modified by an inplace operation" in str(e)
    seen["grads"] = [_obs(x.grad), _obs(w.grad)]
    return seen


CASES = [(w, h) for w in WRITES for h in ("observe", "change")]


@pytest.mark.parametrize("write, hook", CASES, ids=[f"{w}-{h}" for w, h in CASES])
def test_copy_slices_nodes_hooks_and_gradients_match_torch(write, hook):
    assert _program(tg, write, hook) == _program(torch, write, hook)


def test_issue_reproducer_post_hook_shapes():
    """The issue's case: after ``y[1].mul_(w)`` the post-hook on y's grad_fn gets gradients of
    shapes (2, 2) and (2,), and the written value's slot is there."""
    def shapes(lib):
        x = _t(lib, [[1.0, 2.0], [3.0, 4.0]], rg=True)
        w = _t(lib, [5.0, 6.0], rg=True)
        y = x * 1
        y[1].mul_(w)
        seen = []
        y.grad_fn.register_hook(lambda gi, go: seen.append([tuple(g.shape) for g in gi]))
        y.sum().backward()
        return seen
    assert shapes(tg) == shapes(torch) == [[(2, 2), (2,)]]


def _double_backward(lib, write):
    x = _t(lib, [[1.0, 2.0], [3.0, 4.0]], rg=True)
    w = _t(lib, [0.5, -2.0], rg=True)
    y = x * x
    WRITES[write](lib, y, w)
    gx, gw = lib.autograd.grad((y * y).sum(), [x, w], create_graph=True, allow_unused=True)
    outs = [g for g in (gx, gw) if g is not None and g.requires_grad]
    second = lib.autograd.grad(sum(g.sum() for g in outs), [x, w], allow_unused=True) if outs else None
    return [_obs(gx), _obs(gw), _obs(second)]


@pytest.mark.parametrize("write", ["row_mul_tensor", "column_div", "row_copy", "view_of_view", "dirty_function"])
def test_double_backward_through_copy_slices_matches_torch(write):
    assert _double_backward(tg, write) == _double_backward(torch, write)


def test_base_outside_the_graph():
    """A buffer outside the graph joins it through CopySlices with no edge for its old self."""
    def run(lib):
        w = _t(lib, [5.0, 6.0], rg=True)
        z = lib.zeros(2, 2, dtype=lib.float64)
        z[1].mul_(w)
        z[1].add_(w)
        seen = []
        z.grad_fn.register_hook(lambda gi, go: seen.append(_obs(gi)))
        nxt = [(_name(n), k) for n, k in z.grad_fn.next_functions]
        (z * z).sum().backward()
        return nxt, seen, _obs(w.grad)
    assert run(tg) == run(torch)


def test_second_backward_through_a_freed_copy_slices_raises():
    def run(lib):
        x = _t(lib, [[1.0, 2.0], [3.0, 4.0]], rg=True)
        w = _t(lib, [5.0, 6.0], rg=True)
        y = x * 1
        y[1].mul_(w)
        y.sum().backward()
        try:
            y.sum().backward()
        except RuntimeError as e:
            return "retain_graph=True" in str(e)
        return False
    assert run(tg) is run(torch) is True


@pytest.mark.parametrize("through_view", [True, False], ids=["view", "whole"])
@pytest.mark.parametrize("op", ["mul_", "div_", "add_"])
def test_mixed_dtype_in_place_op_keeps_the_ops_node(op, through_view):
    """A float32 tensor written with a float64 operand: torch computes in float64 and writes
    float32, with no node for the cast, so CopySlices wraps the op's node (and the op's node
    is the tensor's grad_fn without a view); each input's gradient keeps its dtype."""
    def run(lib):
        x = lib.ones(2, 2, requires_grad=True)
        w = lib.tensor([2.0, 3.0], dtype=lib.float64, requires_grad=True)
        y = x * 1
        getattr(y[1] if through_view else y, op)(w)
        seen = []
        y.grad_fn.register_hook(lambda gi, go: seen.append([(list(g.shape), str(g.dtype).replace("torch.", ""))
                                                            for g in gi if g is not None]))
        nxt = [_name(n) for n, _ in y.grad_fn.next_functions]
        (y * y).sum().backward()
        return _name(y.grad_fn), nxt, seen, _obs(x.grad), _obs(w.grad), str(w.grad.dtype).replace("torch.", "")
    assert run(tg) == run(torch)
