"""Custom Functions that mark an input dirty, against torch 2.13 (issue 33, items 1 and 2;
skipped without torch). Each case is one program written once over a library (``tg`` or
``torch``) that returns what a user can observe: gradients, ``.grad`` of retained tensors,
hook calls, node names. torch is the oracle.

What torch does (``_wrap_outputs`` -> ``rebase_history`` in torch/csrc/autograd): a dirty
input that is a view gives its *base* a CopySlices node over the Function's node, and the
view's own history is taken anew on top of the base's (AsStridedBackward0), as after a
built-in in-place op on a view; a dirty input that is not a view takes the Function's node
as its grad_fn, and its ``retain_grad()`` moves there (``update_tensor_hooks_on_new_gradfn``)
while the tensor hooks registered before stay on the old node.
"""
from __future__ import annotations

import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")


def _functions(lib):
    class SI(lib.autograd.Function):
        """x <- 2x in place, marked dirty; backward g * 2 (the issue's reproducer)."""

        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 2

    class Scale(lib.autograd.Function):
        """x <- x * s in place for a tensor s; gradients to both."""

        @staticmethod
        def forward(ctx, x, s):
            ctx.save_for_backward(x.clone(), s)
            x.mul_(s)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            x0, s = ctx.saved_tensors
            return g * s, (g * x0).sum()

    return SI, Scale


def _t(lib, values, rg=False):
    return lib.tensor(values, dtype=lib.float64, requires_grad=rg)


def _obs(t):
    """A tensor, None, or a nested list/tuple of them as plain data."""
    if t is None:
        return None
    if isinstance(t, (list, tuple)):
        return [_obs(u) for u in t]
    if hasattr(t, "tolist"):
        return t.detach().tolist()
    return t


def _name(fn):
    return None if fn is None else fn.name().replace("torch::autograd::", "")


# -- item 1: a dirty view rebases its base and is regenerated on top of it -----------------

def hook_on_the_dirty_view(lib):
    """The issue's first reproducer: the view's hook is on its regenerated node, which a
    backward from the base does not pass through."""
    SI, _ = _functions(lib)
    x = _t(lib, [1.0, 2.0], rg=True)
    y = x * 1
    v = SI.apply(y[:1])
    v.register_hook(lambda g: g * 10)
    y.sum().backward()
    return [_obs(x.grad), _name(v.grad_fn), _name(y.grad_fn)]


def grad_captured_at_the_dirty_view(lib):
    """The issue's second reproducer: grad(..., [v]) reads the gradient of v's own node."""
    SI, _ = _functions(lib)
    x = _t(lib, [1.0, 2.0], rg=True)
    y = x * 1
    v = SI.apply(y[:1])
    return _obs(lib.autograd.grad(y.sum() + 3 * v.sum(), [v]))


def grad_captured_at_the_base(lib):
    SI, _ = _functions(lib)
    x = _t(lib, [1.0, 2.0, 3.0], rg=True)
    y = x * 1
    v = SI.apply(y[1:])
    return _obs(lib.autograd.grad(5 * v.sum() + (y * _t(lib, [1.0, 2.0, 3.0])).sum(), [y, v, x]))


def retain_grad_on_the_view_before(lib):
    """A retain_grad() on the view moves to its regenerated node (torch's grad_fn getter)."""
    SI, _ = _functions(lib)
    x = _t(lib, [1.0, 2.0, 3.0], rg=True)
    y = x * 1
    v = y[1:]
    v.retain_grad()
    SI.apply(v)
    (y.sum() + 3 * v.sum()).backward()
    return [_obs(v.grad), _obs(x.grad)]


def retain_grad_on_the_base_before(lib):
    SI, _ = _functions(lib)
    x = _t(lib, [1.0, 2.0, 3.0], rg=True)
    y = x * 1
    y.retain_grad()
    v = SI.apply(y[:2])
    (y * _t(lib, [1.0, 10.0, 100.0])).sum().backward()
    return [_obs(y.grad), _obs(x.grad), v.retains_grad]


def hook_on_the_view_before(lib):
    """A hook registered on the view before the Function stays on the view's old node: it
    fires only when a gradient reaches that node (here: the base's history below it)."""
    SI, _ = _functions(lib)
    x = _t(lib, [1.0, 2.0, 3.0], rg=True)
    y = x * 1
    v = y[1:]
    calls = []
    v.register_hook(lambda g: calls.append(_obs(g)))
    SI.apply(v)
    (y.sum() + 3 * v.sum()).backward()
    return [_obs(x.grad), calls]


def hook_that_adds_on_the_dirty_view(lib):
    """A hook that does more than scale: it sees only the gradient of v's own uses."""
    SI, _ = _functions(lib)
    x = _t(lib, [1.0, 2.0, 3.0, 4.0], rg=True)
    y = x * 1
    v = SI.apply(y[1:3])
    seen = []
    v.register_hook(lambda g: (seen.append(_obs(g)), g + 1)[1])
    ((v * _t(lib, [7.0, 8.0])).sum() + (y * y).sum()).backward()
    return [_obs(x.grad), seen]


def dirty_column_of_a_matrix_with_a_second_input(lib):
    _, Scale = _functions(lib)
    x = _t(lib, [[1.0, 2.0], [3.0, 4.0]], rg=True)
    s = _t(lib, 3.0, rg=True)
    y = x * 1
    v = Scale.apply(y[:, 1], s)
    v.register_hook(lambda g: g * 100)
    (y * _t(lib, [[1.0, 10.0], [100.0, 1000.0]])).sum().backward()
    return [_obs(x.grad), _obs(s.grad), _name(v.grad_fn)]


def dirty_view_then_backward_from_the_view(lib):
    SI, _ = _functions(lib)
    x = _t(lib, [1.0, 2.0, 3.0], rg=True)
    y = x * 1
    v = SI.apply(y[1:])
    v.register_hook(lambda g: g * 10)
    (v * _t(lib, [1.0, 2.0])).sum().backward()
    return _obs(x.grad)


def node_post_hook_on_the_regenerated_view_node(lib):
    """The view's new node is AsStridedBackward0 over the base's CopySlices: a post-hook on it
    sees the base-shaped gradient it sends on, zero outside the view."""
    SI, _ = _functions(lib)
    x = _t(lib, [[1.0, 2.0], [3.0, 4.0]], rg=True)
    y = x * 1
    v = SI.apply(y[1])
    fn = v.grad_fn
    seen = []
    fn.register_hook(lambda gi, go: seen.append([_name(fn), _obs(gi), _obs(go)]))
    ((v * _t(lib, [5.0, 6.0])).sum() + (y * y).sum()).backward()
    return [_obs(x.grad), seen, _name(fn.next_functions[0][0])]


# -- item 2: retain_grad() then a dirty Function on the same tensor (not a view) -----------

def retain_grad_then_dirty_function(lib):
    """The issue's reproducer: the retain hook moves to the Function's node."""
    SI, _ = _functions(lib)
    x = _t(lib, [1.0, 2.0], rg=True)
    y = x * 1
    y.retain_grad()
    SI.apply(y)
    y.sum().backward()
    return [_obs(y.grad), _obs(x.grad), y.retains_grad]


def retain_grad_and_hook_then_dirty_function(lib):
    """The tensor hook registered before stays on the old node (it sees the gradient that
    the Function's backward sends on), the retain hook moves (it sees the new node's)."""
    SI, _ = _functions(lib)
    x = _t(lib, [1.0, 2.0], rg=True)
    y = x * 1
    y.retain_grad()
    seen = []
    y.register_hook(lambda g: (seen.append(_obs(g)), g + 1)[1])
    out = SI.apply(y)
    (out * _t(lib, [3.0, 4.0])).sum().backward()
    return [_obs(y.grad), _obs(x.grad), seen]


def retain_grad_then_two_dirty_functions(lib):
    SI, Scale = _functions(lib)
    x = _t(lib, [1.0, 2.0], rg=True)
    s = _t(lib, 5.0, rg=True)
    y = x * 1
    y.retain_grad()
    SI.apply(y)
    Scale.apply(y, s)
    (y * _t(lib, [1.0, 10.0])).sum().backward()
    return [_obs(y.grad), _obs(x.grad), _obs(s.grad)]


# -- found on the way: a view a Function returns, of a base changed in place before ----------

def view_output_of_a_base_changed_before(lib):
    class View(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.view(-1)

        @staticmethod
        def backward(ctx, g):
            return g * 100

    x = _t(lib, [1.0, 2.0, 3.0], rg=True)
    y = x * 1
    y[0:1].mul_(2)
    out = View.apply(y)
    name = _name(out.grad_fn)
    out.sum().backward()
    return [name, _obs(x.grad)]


CASES = [hook_on_the_dirty_view, grad_captured_at_the_dirty_view, grad_captured_at_the_base,
         retain_grad_on_the_view_before, retain_grad_on_the_base_before, hook_on_the_view_before,
         hook_that_adds_on_the_dirty_view, dirty_column_of_a_matrix_with_a_second_input,
         dirty_view_then_backward_from_the_view, node_post_hook_on_the_regenerated_view_node,
         retain_grad_then_dirty_function, retain_grad_and_hook_then_dirty_function,
         retain_grad_then_two_dirty_functions, view_output_of_a_base_changed_before]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_dirty_function_matches_torch(case):
    assert case(tg) == case(torch)


def _several_outputs(lib, second, non_diff_view=False, grad_mode=True):
    """A Function marking a view dirty and returning it with ``second`` ("tensor", "number")."""
    class F(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(2.0)
            ctx.mark_dirty(x)
            if non_diff_view:
                ctx.mark_non_differentiable(x)
            return x, (x * 3 if second == "tensor" else 5)

        @staticmethod
        def backward(ctx, g, h):
            return h * 6 if non_diff_view else g * 2

    x = _t(lib, [1.0, 2.0, 3.0, 4.0], rg=True)
    a = x * 1
    try:
        with lib.set_grad_enabled(grad_mode):
            F.apply(a[1:3])
    except RuntimeError as e:
        return "refused", "cannot return more than one Tensor" in str(e)
    return "ran", _obs(a)


@pytest.mark.parametrize("second, non_diff_view, grad_mode", [
    ("tensor", False, True), ("number", False, True), ("tensor", True, True), ("tensor", False, False)],
    ids=["tensor", "number", "non_differentiable_view", "no_grad"])
def test_dirty_view_with_several_outputs_refused_as_torch(second, non_diff_view, grad_mode):
    """torch refuses a recorded dirty view when the Function returns more than one output (its
    CopySlices wraps the node for one), as threadgrad does since issue 33, item 4."""
    theirs = _several_outputs(torch, second, non_diff_view, grad_mode)
    assert _several_outputs(tg, second, non_diff_view, grad_mode) == theirs
