"""Activation checkpointing: both variants give the gradients of the unchecked run."""
from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

from threadgrad import engine, ops


def _random_mask_layer(w: engine.Tensor):
    """tanh(x @ w) times a random mask drawn from the seeded generator (dropout-like)."""

    def layer(x: engine.Tensor) -> engine.Tensor:
        h = ops.tanh(x @ w)
        mask = engine.rand(*h.shape, dtype=h.dtype, device=h.device) > 0.5
        return h * engine.tensor(mask.numpy().astype(np.float64), dtype=h.dtype, device=h.device) * 2.0

    return layer


def _grads(run, params):
    for p in params:
        p.grad = None
    engine.manual_seed(1234)
    run().sum().backward()
    return [p.grad.numpy().copy() for p in params]


def _make(device="cpu", seed=0):
    engine.manual_seed(seed)
    x = engine.randn(4, 6, dtype=np.float64, device=device, requires_grad=True)
    w1 = engine.randn(6, 6, dtype=np.float64, device=device, requires_grad=True)
    w2 = engine.randn(6, 6, dtype=np.float64, device=device, requires_grad=True)
    return x, w1, w2


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("device", ["cpu", "virtual:1"])
@pytest.mark.timeout(30)
def test_checkpoint_matches_unchecked_gradients_through_random_masks(use_reentrant, device):
    x, w1, w2 = _make(device)
    f1, f2 = _random_mask_layer(w1), _random_mask_layer(w2)
    params = [x, w1, w2]
    plain = _grads(lambda: f2(f1(x)), params)
    ckpt = _grads(lambda: f2(engine.checkpoint(f1, x, use_reentrant=use_reentrant)), params)
    for a, b in zip(plain, ckpt):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.timeout(30)
def test_without_preserve_rng_state_the_recomputed_mask_differs(use_reentrant):
    x, w1, w2 = _make()
    f1 = _random_mask_layer(w1)
    plain = _grads(lambda: f1(x), [w1])
    ckpt = _grads(lambda: engine.checkpoint(f1, x, use_reentrant=use_reentrant, preserve_rng_state=False), [w1])
    assert not np.allclose(plain[0], ckpt[0])


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.timeout(30)
def test_checkpoint_with_create_graph_gives_same_first_order_gradients(use_reentrant):
    x, w1, _ = _make()
    f = lambda a: ops.tanh(a @ w1) ** 2  # noqa: E731
    for p in (x, w1):
        p.grad = None
    f(x).sum().backward(create_graph=True)
    ref = [x.grad.detach().numpy().copy(), w1.grad.detach().numpy().copy()]
    for p in (x, w1):
        p.grad = None
    engine.checkpoint(f, x, use_reentrant=use_reentrant).sum().backward(create_graph=True)
    np.testing.assert_allclose(x.grad.detach().numpy(), ref[0], rtol=1e-12)
    np.testing.assert_allclose(w1.grad.detach().numpy(), ref[1], rtol=1e-12)


@pytest.mark.timeout(30)
def test_non_reentrant_supports_second_order_through_parameters():
    engine.manual_seed(3)
    x = engine.randn(3, 4, dtype=np.float64)
    w = engine.randn(4, 4, dtype=np.float64, requires_grad=True)
    f = lambda a: ops.tanh(a @ w)  # noqa: E731
    (g_ref,) = engine.grad(f(x).sum(), w, create_graph=True)
    (gg_ref,) = engine.grad(g_ref.sum(), w)
    (g,) = engine.grad(engine.checkpoint(f, x, use_reentrant=False).sum(), w, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), g_ref.detach().numpy(), rtol=1e-12)
    assert g.requires_grad
    (gg,) = engine.grad(g.sum(), w)
    np.testing.assert_allclose(gg.numpy(), gg_ref.numpy(), rtol=1e-10)


@pytest.mark.timeout(30)
def test_reentrant_refuses_grad_and_inputs_with_pytorch_message():
    x, w1, _ = _make()
    y = engine.checkpoint(lambda a: ops.tanh(a @ w1), x, use_reentrant=True).sum()
    with pytest.raises(RuntimeError, match=r"checkpoint is incompatible with .grad\(\) or passing an `inputs` parameter"):
        engine.grad(y, x, retain_graph=True)
    with pytest.raises(RuntimeError, match="To resolve this error, you can either set use_reentrant=False, or call .backward"):
        y.backward(inputs=[x])


@pytest.mark.timeout(30)
def test_non_reentrant_supports_grad_and_inputs():
    x, w1, _ = _make()
    f = lambda a: ops.tanh(a @ w1)  # noqa: E731
    ref_x, ref_w = engine.grad(f(x).sum(), (x, w1))
    gx, gw = engine.grad(engine.checkpoint(f, x, use_reentrant=False).sum(), (x, w1))
    np.testing.assert_allclose(gx.numpy(), ref_x.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gw.numpy(), ref_w.numpy(), rtol=1e-12)
    engine.checkpoint(f, x, use_reentrant=False).sum().backward(inputs=[w1])
    assert x.grad is None
    np.testing.assert_allclose(w1.grad.numpy(), ref_w.numpy(), rtol=1e-12)


@pytest.mark.timeout(30)
def test_keyword_arguments():
    x, w1, _ = _make()
    f = lambda a, scale=1.0: ops.tanh(a @ w1) * scale  # noqa: E731
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        engine.checkpoint(f, x, use_reentrant=True, scale=2.0)
    y = engine.checkpoint(f, x, use_reentrant=False, scale=2.0)
    np.testing.assert_allclose(y.detach().numpy(), f(x, scale=2.0).detach().numpy())


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.timeout(30)
def test_checkpoint_sequential_matches_plain_run(use_reentrant):
    engine.manual_seed(5)
    ws = [engine.randn(5, 5, dtype=np.float64, requires_grad=True) for _ in range(6)]
    layers = [(lambda w: (lambda a: ops.tanh(a @ w)))(w) for w in ws]
    x = engine.randn(3, 5, dtype=np.float64, requires_grad=True)

    def plain():
        h = x
        for f in layers:
            h = f(h)
        return h

    ref = _grads(plain, ws + [x])
    got = _grads(lambda: engine.checkpoint_sequential(layers, 3, x, use_reentrant=use_reentrant), ws + [x])
    for a, b in zip(ref, got):
        np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.timeout(120)
def test_checkpoint_from_several_threads_at_once():
    engine.manual_seed(11)
    w = engine.randn(6, 6, dtype=np.float64, requires_grad=True)
    # (the reentrant variant needs an input that requires grad, as in PyTorch)
    xs = [engine.randn(2, 6, dtype=np.float64, requires_grad=True) for _ in range(4)]
    f = lambda a: ops.tanh(a @ w) @ w  # noqa: E731
    expected = sum(engine.grad(f(x).sum(), w)[0].numpy() for x in xs) * 10
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            barrier.wait()
            for i in range(10):
                engine.checkpoint(f, xs[k], use_reentrant=bool((k + i) % 2)).sum().backward()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-10)


def test_use_reentrant_not_passed_warns_and_runs_reentrant():
    """torch 2.13's checkpoint: without use_reentrant it warns (UserWarning) that the argument
    should be passed explicitly and uses the reentrant variant, which refuses grad()."""
    x, w1, _ = _make()
    with pytest.warns(UserWarning, match="the use_reentrant parameter should be passed explicitly. "
                                         "use_reentrant=False is recommended"):
        y = engine.checkpoint(lambda a: ops.tanh(a @ w1), x).sum()
    assert y.grad_fn.next_functions[0][0].name() == "_CheckpointFunctionBackward"
    with pytest.raises(RuntimeError, match=r"checkpoint is incompatible with .grad\(\) or passing an `inputs` parameter"):
        engine.grad(y, x)
    with pytest.warns(UserWarning, match="checkpoint_sequential: the use_reentrant parameter should be passed"):
        z = engine.checkpoint_sequential([ops.tanh, ops.exp], 2, x)
    with pytest.raises(RuntimeError, match=r"checkpoint is incompatible with .grad\(\) or passing an `inputs` parameter"):
        engine.grad(z.sum(), x)


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_use_reentrant_passed_does_not_warn(use_reentrant):
    x, w1, _ = _make()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine.checkpoint(lambda a: ops.tanh(a @ w1), x, use_reentrant=use_reentrant).sum().backward()
        engine.checkpoint_sequential([ops.tanh, ops.exp], 2, x, use_reentrant=use_reentrant).sum().backward()
