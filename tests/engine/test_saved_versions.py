"""Saved tensors and the version counter: an in-place change to a tensor saved for backward
makes backward fail, naming the node and both versions.

The in-place methods (add_, mul_, ...) do not exist yet; ``bump`` uses ``add_(0)`` under
no_grad once they do and until then increments the shared counter ``_vc`` directly, which
is exactly what an in-place op does to the counter.
"""
from __future__ import annotations

import re

import pytest

from threadgrad import engine, ops


def bump(t: engine.Tensor, times: int = 1) -> None:
    """Make ``times`` in-place modifications of ``t`` (values unchanged)."""
    for _ in range(times):
        if hasattr(engine.Tensor, "add_"):
            with engine.no_grad():
                t.add_(0)
        else:
            t._vc[0] += 1


def modified_message(node: str, now: int, expected: int) -> str:
    return (r"(?s)modified by an inplace operation.*is at version " + str(now)
            + r".*expected version " + str(expected) + r".*" + re.escape(node))


def test_bump_increments_version_by_exactly_one():
    t = engine.tensor([1.0, 2.0])
    bump(t)
    assert t.version == 1
    bump(t, 2)
    assert t.version == 3
    assert t.tolist() == [1.0, 2.0]


def test_modified_saved_leaf_raises_with_node_and_versions():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    w = engine.tensor([3.0, 4.0], requires_grad=True)
    y = (x * w).sum()
    bump(w)
    with pytest.raises(RuntimeError, match=modified_message("MulBackward0", 1, 0)) as info:
        y.backward()
    assert "a leaf tensor" in str(info.value)
    assert "[float32 tensor of shape [2]]" in str(info.value)


def test_versions_in_message_are_exact():
    x = engine.tensor([1.0], requires_grad=True)
    w = engine.tensor([3.0], requires_grad=True)
    bump(w, 2)
    y = (x * w).sum()  # saved at version 2
    bump(w, 3)
    with pytest.raises(RuntimeError, match=modified_message("MulBackward0", 5, 2)):
        y.backward()


def test_modified_saved_output_raises():
    x = engine.tensor([0.5, 1.5], requires_grad=True)
    z = x.exp()  # exp saves its output
    s = z.sum()
    bump(z)
    with pytest.raises(RuntimeError, match=modified_message("ExpBackward0", 1, 0)) as info:
        s.backward()
    assert "output 0 of ExpBackward0" in str(info.value)


def test_modified_through_a_view_raises():
    x = engine.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    b = x * 1.0
    y = ops.log(b).sum()  # log saves its input b
    v = b.reshape(4)  # a view: shares b's version counter
    bump(v)
    assert b.version == 1
    with pytest.raises(RuntimeError, match=modified_message("LogBackward0", 1, 0)) as info:
        y.backward()
    assert "output 0 of MulBackward0" in str(info.value)


def test_modified_through_detach_raises():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    w = engine.tensor([3.0, 4.0], requires_grad=True)
    y = (x * w).sum()
    bump(w.detach())  # detach shares the version counter
    with pytest.raises(RuntimeError, match=modified_message("MulBackward0", 1, 0)):
        y.backward()


def test_modifying_an_unsaved_tensor_is_fine():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    w = engine.tensor([3.0, 4.0], requires_grad=True)
    y = (x + w).sum()  # add saves nothing
    bump(x)
    bump(w)
    y.backward()
    assert x.grad.tolist() == [1.0, 1.0]
    assert w.grad.tolist() == [1.0, 1.0]


def test_mul_saves_only_what_a_needed_gradient_uses():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    c = engine.tensor([3.0, 4.0])
    y = (x * c).sum()  # x's gradient needs c, not x: x is not saved
    bump(x)
    y.backward()
    assert x.grad.tolist() == [3.0, 4.0]
    y2 = (x * c).sum()
    bump(c)
    with pytest.raises(RuntimeError, match=modified_message("MulBackward0", 1, 0)):
        y2.backward()


def test_version_error_through_grad_and_then_engine_still_works():
    x = engine.tensor([2.0], requires_grad=True)
    w = engine.tensor([5.0], requires_grad=True)
    y = (x * w).sum()
    bump(x)
    with pytest.raises(RuntimeError, match=modified_message("MulBackward0", 1, 0)):
        engine.grad(y, w)
    (g,) = engine.grad((x * w).sum(), w)
    assert g.tolist() == [2.0]


def test_out_of_place_ops_do_not_bump_versions():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    _ = y + 1, y.exp(), y.sum(), y.reshape(2, 1)
    assert x.version == 0 and y.version == 0
