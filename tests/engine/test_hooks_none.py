"""Hooks where no gradient arrives, as torch 2.13 calls them (issue 17 A(1), H): a tensor hook
on an output that gets no gradient, and a leaf's hooks when its incoming gradient is None, are
called with None; a leaf's post-accumulate-grad hooks run then too (with .grad unchanged)."""
from __future__ import annotations

import pytest

from threadgrad import engine, ops


def test_tensor_hook_on_an_output_without_gradient_is_called_with_none():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    p0, p1 = ops.split(x, 1)
    log = []
    p0.register_hook(lambda g: log.append(g))
    p1.sum().backward()
    assert log == [None]
    assert x.grad.tolist() == [0.0, 1.0]


class _FirstOnly(engine.Function):
    @staticmethod
    def forward(ctx, a, b):
        return a * 1.0 + b * 1.0

    @staticmethod
    def backward(ctx, g):
        return g, None


def test_leaf_hooks_run_with_none_and_grad_stays_none():
    a = engine.tensor([1.0], requires_grad=True)
    b = engine.tensor([1.0], requires_grad=True)
    log = []
    b.register_hook(lambda g: log.append(("hook", g)))
    b.register_post_accumulate_grad_hook(lambda t: log.append(("post", t.grad)))
    _FirstOnly.apply(a, b).sum().backward()
    assert log == [("hook", None), ("post", None)]
    assert b.grad is None and a.grad.tolist() == [1.0]


def test_post_accumulate_hook_with_none_on_a_device_leaf():
    a = engine.tensor([1.0], device="virtual:1", requires_grad=True)
    b = engine.tensor([1.0], device="virtual:1", requires_grad=True)
    log = []
    b.register_post_accumulate_grad_hook(lambda t: log.append(t.grad))
    _FirstOnly.apply(a, b).sum().backward()
    assert log == [None] and a.grad.tolist() == [1.0]


def test_a_hook_may_not_replace_a_none_gradient():
    """torch: "can't replace a None gradient with a non-None value"."""
    c = engine.tensor([1.0, 2.0], requires_grad=True)
    q0, q1 = ops.split(c, 1)
    q0.register_hook(lambda g: engine.ones(1))
    with pytest.raises(RuntimeError, match="can't replace a None gradient with a non-None value"):
        q1.sum().backward()


def test_retain_grad_with_no_gradient_keeps_none():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    p0, p1 = ops.split(x, 1)
    p0.retain_grad()
    p1.sum().backward()
    assert p0.grad is None


def test_node_hooks_see_none_slots():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    p0, p1 = ops.split(x, 1)
    log = []
    p0.grad_fn.register_prehook(lambda go: log.append(("pre", [None if g is None else g.tolist() for g in go])))
    p0.grad_fn.register_hook(lambda gi, go: log.append(("post", [g.tolist() for g in gi])))
    p1.sum().backward()
    assert log == [("pre", [None, [1.0]]), ("post", [[0.0, 1.0]])]


class _TwoOut(engine.Function):
    log: list = []

    @staticmethod
    def forward(ctx, a):
        return a * 2, a * 3

    @staticmethod
    def backward(ctx, g1, g2):
        _TwoOut.log.append((g1.tolist(), g2.tolist()))
        return g1 * 2 + g2 * 3


class _Drop(engine.Function):
    @staticmethod
    def forward(ctx, a, b):
        return b * 1.0

    @staticmethod
    def backward(ctx, g):
        return None, g


def test_custom_backward_runs_with_zeros_when_no_gradient_arrives():
    """torch runs a custom Function's backward even when none of its outputs got a gradient
    (materialized as zeros), so its inputs get zero gradients, not None."""
    _TwoOut.log = []
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = engine.tensor([1.0], requires_grad=True)
    u, v = _TwoOut.apply(x)
    _Drop.apply(u, y).sum().backward()
    assert _TwoOut.log == [([0.0, 0.0], [0.0, 0.0])]
    assert x.grad.tolist() == [0.0, 0.0] and y.grad.tolist() == [1.0]


def test_custom_backward_gets_none_without_materialize():
    seen = []

    class G(engine.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.set_materialize_grads(False)
            return a * 2

        @staticmethod
        def backward(ctx, g):
            seen.append(g)
            return None if g is None else g * 2

    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = engine.tensor([1.0], requires_grad=True)
    _Drop.apply(G.apply(x), y).sum().backward()
    assert seen == [None] and x.grad is None


def test_post_accumulate_hook_returning_a_value_raises_torchs_errors():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x.register_post_accumulate_grad_hook(lambda t: t.grad)
    with pytest.raises(RuntimeError, match="Tensor post accumulate grad hooks should return None."):
        x.sum().backward()
    h.remove()
    x.register_post_accumulate_grad_hook(lambda t: 1)
    with pytest.raises(TypeError, match="expected Variable, but hook returned 'int'"):
        x.sum().backward()


def test_post_hooks_see_none_for_edges_the_call_does_not_need():
    """Issue 17 H, torch's values: under grad(y, [a]) MulBackward0's post-hook sees None for
    b's slot (torch's formulas compute only needed outputs); a plain backward sees both."""
    a = engine.tensor([1.0], requires_grad=True)
    b = engine.tensor([2.0], requires_grad=True)
    y = a * b
    log = []
    y.grad_fn.register_hook(lambda gi, go: log.append([None if g is None else g.item() for g in gi]))
    engine.grad(y, [a], retain_graph=True)
    engine.grad(y, [b], retain_graph=True)
    y.backward(inputs=[a], retain_graph=True)
    y.backward(retain_graph=True)
    assert log == [[2.0, None], [None, 1.0], [2.0, None], [2.0, 1.0]]


def test_custom_function_post_hooks_see_what_backward_returned():
    """A custom Function returns what its backward returns, as torch's (no masking)."""
    class M(engine.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b, g * a

    a = engine.tensor([1.0], requires_grad=True)
    b = engine.tensor([2.0], requires_grad=True)
    y = M.apply(a, b)
    log = []
    y.grad_fn.register_hook(lambda gi, go: log.append([None if g is None else g.item() for g in gi]))
    engine.grad(y, [a])
    assert log == [[2.0, 1.0]]


class _FirstUnused(engine.Function):
    @staticmethod
    def forward(ctx, a, b, c):
        return a * b * c

    @staticmethod
    def backward(ctx, g):
        return None, g, g


def test_leaves_made_ready_by_one_node_run_in_edge_order():
    """Equal keys pop in the order they became ready (Note [Continuation]): torch 2.13 runs the
    AccumulateGrad of a, b, c in edge order, the one given no gradient first. The continuation
    used to keep ``a`` back and queue it again after ``b`` and ``c``."""
    log = []
    a, b, c = (engine.ones(2, requires_grad=True) for _ in range(3))
    for n, t in zip("abc", (a, b, c)):
        t.register_hook(lambda g, n=n: log.append((n, g is None)))
    _FirstUnused.apply(a, b, c).sum().backward()
    assert log == [("a", True), ("b", False), ("c", False)]


def test_a_hook_that_raises_stops_the_backward_before_later_leaves_as_torch():
    """What torch 2.13 has accumulated when a leaf's hook raises: the leaves before it in
    edge order only (the differential check's seeds 647, 772, 1585, 1869, 2142, 2776, 2836
    differed from torch here)."""
    a, b, c = (engine.ones(2, requires_grad=True) for _ in range(3))
    a.register_hook(lambda g: g * 2.0)  # g is None: raises TypeError, as the user's hook would
    with pytest.raises(TypeError):
        _FirstUnused.apply(a, b, c).sum().backward()
    assert b.grad is None and c.grad is None
    b.register_hook(lambda g: None)
    c.register_hook(lambda g: 1 / 0)
    a2 = engine.ones(2, requires_grad=True)
    with pytest.raises(ZeroDivisionError):
        _FirstUnused.apply(a2, b, c).sum().backward()
    assert b.grad.tolist() == [1.0, 1.0] and c.grad is None
