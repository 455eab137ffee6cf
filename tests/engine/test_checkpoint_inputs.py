"""Checkpoint and its inputs: in-place changes after forward, second derivatives with
respect to the inputs, and a re-run that saves differently. See Note [Checkpoint re-run
contract] in engine/checkpoint.py. Expected values are closed forms (no torch in CI)."""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import engine, ops
from threadgrad.engine.checkpoint import CheckpointError

MODIFIED = "one of the variables needed for gradient computation has been modified by an inplace operation"
X = np.array([0.5, 1.0, 1.5])


def _leaf(device: str = "cpu") -> engine.Tensor:
    return engine.tensor(X, dtype=np.float64, device=device, requires_grad=True)


# --- inputs modified in place after forward ------------------------------------------------

@pytest.mark.parametrize("device", ["cpu", "virtual:1"])
@pytest.mark.timeout(60)
def test_non_reentrant_input_modified_after_forward_raises(device):
    x = _leaf(device)
    h = x * 1.0
    y = engine.checkpoint(ops.sin, h, use_reentrant=False)
    h.mul_(2.0)
    with pytest.raises(RuntimeError, match=MODIFIED) as info:
        y.sum().backward()
    assert "checkpoint of sin as its input 0" in str(info.value)
    assert "is at version 1; expected version 0 instead" in str(info.value)
    assert x.grad is None  # no gradient of sin(2x) slipped through


@pytest.mark.timeout(60)
def test_reentrant_input_modified_after_forward_raises():
    # (already raised through save_for_backward: a guard that both variants agree)
    x = _leaf()
    h = x * 1.0
    y = engine.checkpoint(ops.sin, h, use_reentrant=True)
    h.mul_(2.0)
    with pytest.raises(RuntimeError, match=MODIFIED):
        y.sum().backward()


@pytest.mark.timeout(60)
def test_non_reentrant_constant_and_keyword_inputs_are_checked_too():
    # A constant changes the re-run as surely as an input that requires grad (PyTorch raises too).
    x = _leaf()
    c = engine.tensor([1.0, 1.0, 1.0], dtype=np.float64)
    y = engine.checkpoint(lambda a, m: ops.sin(a * m), x, c, use_reentrant=False)
    c.mul_(2.0)
    with pytest.raises(RuntimeError, match=MODIFIED) as info:
        y.sum().backward()
    assert "as its input 1" in str(info.value)

    k = engine.tensor([1.0, 1.0, 1.0], dtype=np.float64)
    y = engine.checkpoint(lambda a, m=None: ops.sin(a * m), x, use_reentrant=False, m=k)
    k.add_(1.0)
    with pytest.raises(RuntimeError, match=MODIFIED) as info:
        y.sum().backward()
    assert "as its keyword argument 'm'" in str(info.value)


@pytest.mark.timeout(60)
def test_non_reentrant_checks_before_every_re_run():
    x = _leaf()
    h = x * 1.0
    y = engine.checkpoint(ops.sin, h, use_reentrant=False).sum()
    y.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), np.cos(X), rtol=1e-12)
    h.mul_(2.0)
    with pytest.raises(RuntimeError, match=MODIFIED):
        y.backward()
    np.testing.assert_allclose(x.grad.numpy(), np.cos(X), rtol=1e-12)


@pytest.mark.timeout(60)
def test_non_reentrant_in_place_change_inside_the_function_is_not_an_error():
    # Versions are taken as forward returns: the function's own in-place work on an input
    # that is not saved (a running statistic) is part of forward.
    x = _leaf()
    stat = engine.tensor([0.0], dtype=np.float64)

    def f(a, s):
        s.add_(1.0)
        return ops.sin(a)

    engine.checkpoint(f, x, stat, use_reentrant=False).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.cos(X), rtol=1e-12)


# --- second derivatives with respect to the inputs -----------------------------------------

def _tanh_sq_second(x: np.ndarray) -> np.ndarray:
    """d/dx of sum(d/dx tanh(x^2)) = 2(1 - T^2)(1 - 4 x^2 T), T = tanh(x^2)."""
    t = np.tanh(x * x)
    return 2.0 * (1.0 - t * t) * (1.0 - 4.0 * x * x * t)


@pytest.mark.parametrize("device", ["cpu", "virtual:1"])
@pytest.mark.timeout(60)
def test_non_reentrant_double_backward_reaches_the_inputs(device):
    x0 = _leaf(device)
    y = engine.checkpoint(lambda t: ops.tanh(t * t), x0 * 1.0, use_reentrant=False)
    (g,) = engine.grad(y.sum(), x0, create_graph=True)
    t = np.tanh(X * X)
    np.testing.assert_allclose(g.detach().numpy(), 2.0 * X * (1.0 - t * t), rtol=1e-12)
    assert g.requires_grad
    g.sum().backward()
    assert x0.grad is not None
    np.testing.assert_allclose(x0.grad.numpy(), _tanh_sq_second(X), rtol=1e-10)


@pytest.mark.timeout(60)
def test_non_reentrant_double_backward_to_a_leaf_input_and_a_parameter():
    # y = tanh(x * w) with x the checkpoint's leaf input and w used inside the function.
    x = _leaf()
    w = engine.tensor([0.7, -0.3, 1.1], dtype=np.float64, requires_grad=True)
    wv = w.detach().numpy().copy()
    y = engine.checkpoint(lambda a: ops.tanh(a * w), x, use_reentrant=False)
    gx, gw = engine.grad(y.sum(), (x, w), create_graph=True)
    s = 1.0 - np.tanh(X * wv) ** 2
    np.testing.assert_allclose(gx.detach().numpy(), wv * s, rtol=1e-12)
    (ggx, ggw) = engine.grad(gx.sum(), (x, w))
    t = np.tanh(X * wv)
    # d/dx (w s) = -2 w^2 t s ; d/dw (w s) = s - 2 w x t s
    np.testing.assert_allclose(ggx.numpy(), -2.0 * wv * wv * t * s, rtol=1e-10)
    np.testing.assert_allclose(ggw.numpy(), s - 2.0 * wv * X * t * s, rtol=1e-10)


@pytest.mark.timeout(60)
def test_non_reentrant_double_backward_through_checkpoint_sequential():
    x0 = _leaf()
    layers = [lambda a: a * a, ops.tanh, lambda a: a * 1.0]
    y = engine.checkpoint_sequential(layers, 2, x0 * 1.0, use_reentrant=False)
    y.sum().backward(create_graph=True)
    g = x0.grad
    x0.grad = None
    g.sum().backward()
    np.testing.assert_allclose(x0.grad.numpy(), _tanh_sq_second(X), rtol=1e-10)


# --- a re-run that saves a different number of tensors -------------------------------------

def _count_saves(fn, x: engine.Tensor) -> int:
    n = [0]

    def pack(t):
        n[0] += 1
        return t

    with engine.saved_tensors_hooks(pack, lambda t: t):
        fn(x)
    return n[0]


@pytest.mark.timeout(60)
def test_a_rerun_saving_fewer_tensors_raises_checkpoint_error():
    """torch's determinism check: fewer saves in the re-run raise CheckpointError."""
    big = lambda t: ops.exp(ops.sin(t) * t)  # noqa: E731
    small = lambda t: ops.exp(ops.sin(t))  # noqa: E731
    n_fwd, n_rerun = _count_saves(big, _leaf()), _count_saves(small, _leaf())
    assert n_fwd > n_rerun
    calls = [0]

    def fn(t):
        calls[0] += 1
        return (big if calls[0] == 1 else small)(t)

    x = _leaf()
    y = engine.checkpoint(fn, x, use_reentrant=False)
    with pytest.raises(CheckpointError) as info:
        y.sum().backward()
    assert isinstance(info.value, RuntimeError)
    msg = str(info.value)
    assert "A different number of tensors was saved during the original forward and recomputation." in msg
    assert f"Number of tensors saved during forward: {n_fwd}\nNumber of tensors saved during recomputation: {n_rerun}" in msg
    assert fn.__qualname__ in msg and "must be deterministic" in msg
    assert x.grad is None


@pytest.mark.timeout(60)
def test_a_rerun_saving_more_tensors_stops_early_and_succeeds():
    """torch's early stop: the re-run ends once it has rebuilt as many tensors as forward
    saved, so extra work after them is never run."""
    calls = [0]

    def fn(t):
        calls[0] += 1
        s = ops.sin(t)  # SinBackward0 saves t
        if calls[0] > 1:
            raise AssertionError("the re-run went past its last save")
        return s

    x = _leaf()
    engine.checkpoint(fn, x, use_reentrant=False).sum().backward()
    assert calls[0] == 2
    np.testing.assert_allclose(x.grad.numpy(), np.cos(X), rtol=1e-15)


@pytest.mark.timeout(60)
def test_a_rerun_saving_other_metadata_raises_checkpoint_error():
    calls = [0]

    def fn(t):
        calls[0] += 1
        return ops.exp(t) if calls[0] == 1 else ops.exp(ops.sum(t))

    x = _leaf()
    y = engine.checkpoint(fn, x, use_reentrant=False)
    with pytest.raises(CheckpointError, match="Recomputed values for the following tensors have different metadata "
                                              "than during the forward pass.\ntensor at position 0:\nsaved metadata: "
                                              "\\{'shape': \\(3,\\), 'dtype': float64, 'device': cpu\\}\nrecomputed metadata: "
                                              "\\{'shape': \\(\\), 'dtype': float64"):
        ops.sum(y).backward()


def test_in_place_after_the_last_save_is_not_rerun():
    """Issue 17 E, torch 0.18172: t.mul_ after tanh's save must not change the rebuilt tanh
    output (the unchecked function raises the in-place error instead)."""
    def f(p):
        t = ops.tanh(p)
        t.mul_(-0.5)
        return t

    x = engine.tensor([0.5], dtype=np.float64, requires_grad=True)
    (engine.checkpoint(f, x, use_reentrant=False) ** 2).sum().backward()
    t = np.tanh(0.5)
    np.testing.assert_allclose(x.grad.numpy(), [0.5 * t * (1 - t * t)], rtol=1e-14)
    assert round(float(x.grad.item()), 5) == 0.18172


def test_python_numbers_are_not_packed():
    """Issue 17 G: a wrapped Python number is saved as it is, never through the hooks (torch:
    [2, 2] under a doubling pack hook)."""
    y = engine.tensor([1.0, 2.0], requires_grad=True)
    packed = []
    with engine.saved_tensors_hooks(lambda t: packed.append(t.shape) or 2 * t, lambda t: t):
        z = y * 1.0
        z.div_(0.5)
    z.sum().backward()
    assert y.grad.tolist() == [2.0, 2.0]
    assert packed == []
