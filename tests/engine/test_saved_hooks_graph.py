"""Saved-tensor hooks as torch runs them (issue 17 C): the unpacked tensor stands for the
original in the graph, and a pack hook may not modify its input in place. Values are torch
2.13's."""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import engine, ops


def test_second_derivative_flows_through_the_original_not_the_pack_hook():
    """torch: a.grad == [12, 24]; the pack hook's 2 * t must not enter the graph."""
    a = engine.tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)
    with engine.saved_tensors_hooks(lambda t: 2 * t, lambda t: t):
        y = a ** 3
    (g,) = engine.grad(y.sum(), a, create_graph=True)
    assert g.tolist() == [12.0, 48.0]  # uses the packed (doubled) value, as torch does
    g.sum().backward()
    assert a.grad.tolist() == [12.0, 24.0]


def test_unpacked_tensor_takes_the_originals_place():
    """An unpacked saved leaf requires grad and has no grad_fn; an unpacked saved output has
    its node as grad_fn (torch's SavedVariable::unpack), whatever the hooks return."""
    seen = {}

    class Probe(engine.Function):
        @staticmethod
        def forward(ctx, x, h):
            ctx.save_for_backward(x, h)
            return x * h

        @staticmethod
        def backward(ctx, g):
            x, h = ctx.saved_tensors
            seen["x"] = (x.requires_grad, x.grad_fn, x.is_leaf)
            seen["h"] = (h.requires_grad, h.grad_fn.name() if h.grad_fn is not None else None, h.output_nr)
            return g * h, g * x

    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    with engine.saved_tensors_hooks(lambda t: t.detach(), lambda t: t):
        y = Probe.apply(x, h)
        z = ops.exp(h)
    y.sum().backward(retain_graph=True)
    assert seen == {"x": (True, None, True), "h": (True, "MulBackward0", 0)}
    assert x.grad.tolist() == [4.0, 8.0]  # d(2 x^2)/dx, through both saved tensors
    (gz,) = engine.grad(z.sum(), h, create_graph=True)
    assert gz.grad_fn is not None  # exp's saved output is linked to ExpBackward0


def test_a_leaf_saved_under_hooks_gets_its_own_second_derivative():
    x = engine.tensor([1.0, 3.0], dtype=np.float64, requires_grad=True)
    with engine.saved_tensors_hooks(lambda t: t.detach().clone(), lambda t: t):
        y = (x * x * x).sum()
    (g,) = engine.grad(y, x, create_graph=True)
    assert g.tolist() == [3.0, 27.0]
    (gg,) = engine.grad(g.sum(), x)
    assert gg.tolist() == [6.0, 18.0]


def test_pack_hook_modifying_its_input_in_place_raises():
    def bad(t):
        t.mul_(2)
        return t

    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    with pytest.raises(RuntimeError, match="A saved tensor pack hook is modifying its input in place."):
        with engine.saved_tensors_hooks(bad, lambda t: t):
            ops.exp(h)


def test_hooks_around_a_non_reentrant_checkpoint_keep_its_inputs():
    """Issue 17 G (torch's counts): saved-tensor hooks active around a non-reentrant checkpoint
    pack its tensor inputs once, in forward, and unpack them for the re-run."""
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    log = []

    def pack(t):
        log.append(("pack", tuple(t.shape)))
        return t

    def unpack(t):
        log.append("unpack")
        return t

    with engine.saved_tensors_hooks(pack, unpack):
        y = engine.checkpoint(lambda a: ops.exp(a * a), x, use_reentrant=False)
    assert log == [("pack", (2,))]
    log.clear()
    y.sum().backward()
    assert log == ["unpack"]
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([1.0, 2.0]) * np.exp([1.0, 4.0]), rtol=1e-6)


def test_save_on_cpu_around_a_checkpoint_on_a_device_double_backward():
    w = engine.tensor([0.5, 1.5], dtype=np.float64, device="virtual:1", requires_grad=True)
    f = lambda a: ops.tanh(a) * a  # noqa: E731
    with engine.save_on_cpu():
        z = engine.checkpoint(f, w * 2.0, use_reentrant=False)
    (g,) = engine.grad(z.sum(), w, create_graph=True)
    (gg,) = engine.grad(g.sum(), w)
    (g_ref,) = engine.grad(f(w * 2.0).sum(), w, create_graph=True)
    (gg_ref,) = engine.grad(g_ref.sum(), w)
    np.testing.assert_allclose(g.detach().numpy(), g_ref.detach().numpy(), rtol=1e-15)
    np.testing.assert_allclose(gg.numpy(), gg_ref.numpy(), rtol=1e-15)


def test_input_modified_after_a_hooked_checkpoint_still_raises():
    """The version check keeps the input's counter, not the tensor (which hooks may offload)."""
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    with engine.saved_tensors_hooks(lambda t: t, lambda t: t):
        y = engine.checkpoint(lambda a: ops.exp(a), h, use_reentrant=False)
    with engine.no_grad():
        h.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
