"""Checkpointed random draws: the re-run replays exactly what forward drew, whatever other
threads draw meanwhile, and a one-thread checkpointed forward draws what an unchecked one
does. See Note [Checkpointed random draws] in engine/creation.py."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from threadgrad import engine, ops

SHAPE = (8, 8)  # 64 mask entries per draw


def _state_key() -> tuple:
    s = engine.creation.get_rng_state()
    return (s["state"]["state"], s["state"]["inc"], s["has_uint32"], s["uinteger"])


def _two_dropouts(x: engine.Tensor, between=None) -> engine.Tensor:
    h = ops.dropout(x, 0.5)
    if between is not None:
        between()
    return ops.dropout(ops.tanh(h), 0.5)


def _nested(x: engine.Tensor, use_reentrant: bool) -> engine.Tensor:
    h = ops.dropout(x, 0.3)
    h = engine.checkpoint(_two_dropouts, h, use_reentrant=use_reentrant)
    return ops.dropout(h * 2.0, 0.4) + engine.randn(*SHAPE, dtype=np.float64)


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.timeout(30)
def test_one_thread_checkpoint_draws_what_the_unchecked_run_draws(use_reentrant, nested):
    """The global generator after a checkpointed forward is where an unchecked forward leaves
    it, the values are the same, the gradients are the same, and backward's re-run draws
    nothing from the global generator."""
    fn = (lambda t: _nested(t, use_reentrant)) if nested else _two_dropouts
    runs = []
    for checkpointed in (False, True):
        engine.manual_seed(21)
        x = engine.randn(*SHAPE, dtype=np.float64, requires_grad=True)
        y = engine.checkpoint(fn, x, use_reentrant=use_reentrant) if checkpointed else fn(x)
        after_forward = _state_key()
        y.sum().backward()
        assert _state_key() == after_forward  # the re-run left the global generator alone
        runs.append((y.detach().numpy().copy(), after_forward, engine.rand(5).numpy(), x.grad.numpy().copy()))
    (y0, s0, r0, g0), (y1, s1, r1, g1) = runs
    assert s1 == s0
    np.testing.assert_array_equal(r1, r0)
    np.testing.assert_array_equal(y1, y0)
    np.testing.assert_array_equal(g1, g0)


def _reference_masks(seed: int, between: int = 0) -> tuple:
    """_two_dropouts' two scaled masks drawn sequentially after ``seed`` (with ``between``
    numbers drawn between them, returned last when asked for)."""
    engine.manual_seed(seed)
    first = engine.rand(*SHAPE, dtype=np.float64).numpy()
    other = engine.rand(between, dtype=np.float64).numpy()
    second = engine.rand(*SHAPE, dtype=np.float64).numpy()
    masks = ((first >= 0.5) * 2.0, (second >= 0.5) * 2.0)
    return masks + (other,) if between else masks


class _Interleaved:
    """A function with two dropouts whose chosen call (0: forward, 1: the re-run) lets another
    thread draw 4096 numbers from the global generator between its two draws."""

    def __init__(self, call_to_interrupt: int) -> None:
        self.call_to_interrupt = call_to_interrupt
        self.calls = 0
        self.outputs: list = []
        self.go, self.drawn = threading.Event(), threading.Event()
        self.other_draw = None
        self.thread = threading.Thread(target=self._other, daemon=True)
        self.thread.start()

    def _other(self) -> None:
        self.go.wait(10)
        self.other_draw = engine.rand(4096, dtype=np.float64).numpy()
        self.drawn.set()

    def _between(self) -> None:
        self.go.set()
        assert self.drawn.wait(10)

    def __call__(self, x: engine.Tensor) -> engine.Tensor:
        call, self.calls = self.calls, self.calls + 1
        y = _two_dropouts(x, self._between if call == self.call_to_interrupt else None)
        self.outputs.append(y.detach().numpy().copy())
        return y


def _check_rerun_output(fn: "_Interleaved", expected: np.ndarray, use_reentrant: bool) -> None:
    """The reentrant re-run returns forward's output; the non-reentrant one stops early, right
    after its last save (the second mask: Note [Checkpoint re-run contract]), so it returns
    nothing, and the gradient, which both masks enter, is the check."""
    if use_reentrant:
        np.testing.assert_array_equal(fn.outputs[1], expected)
    else:
        assert len(fn.outputs) == 1


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("device", ["cpu", "virtual:1"])
@pytest.mark.timeout(30)
def test_another_thread_drawing_during_the_rerun_does_not_change_the_mask(use_reentrant, device):
    """The re-run (on the caller or on virtual:1's worker) gets forward's numbers although
    another thread draws from the global generator between its two draws; the gradients
    equal the unchecked run's with the same seed."""
    engine.manual_seed(5)
    x = engine.ones(*SHAPE, dtype=np.float64, device=device, requires_grad=True)
    _two_dropouts(x).sum().backward()
    plain = x.grad.numpy().copy()

    x.grad = None
    fn = _Interleaved(call_to_interrupt=1)
    engine.manual_seed(5)
    engine.checkpoint(fn, x, use_reentrant=use_reentrant).sum().backward()
    fn.thread.join(10)
    assert fn.calls == 2 and fn.other_draw is not None
    _check_rerun_output(fn, fn.outputs[0], use_reentrant)
    np.testing.assert_array_equal(x.grad.numpy(), plain)  # both masks enter the gradient


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.timeout(30)
def test_another_thread_drawing_between_forward_draws_does_not_change_the_rerun(use_reentrant):
    """Forward's draws and the other thread's come from the global generator in the order
    they were made (none repeats another's numbers), and the re-run replays forward's."""
    m1, m2, other = _reference_masks(9, between=4096)
    expected = np.tanh(m1) * m2

    x = engine.ones(*SHAPE, dtype=np.float64, requires_grad=True)
    fn = _Interleaved(call_to_interrupt=0)
    engine.manual_seed(9)
    y = engine.checkpoint(fn, x, use_reentrant=use_reentrant)
    fn.thread.join(10)
    np.testing.assert_array_equal(fn.other_draw, other)
    np.testing.assert_array_equal(y.detach().numpy(), expected)
    y.sum().backward()
    assert fn.calls == 2
    _check_rerun_output(fn, expected, use_reentrant)
    # d/dx sum(tanh(x * m1) * m2) at x = 1
    np.testing.assert_allclose(x.grad.numpy(), m1 * (1 - np.tanh(m1) ** 2) * m2, rtol=1e-15)


@pytest.mark.timeout(30)
def test_two_reruns_of_one_retained_graph_at_once_each_replay_forward():
    """Two threads backward through one retained reentrant checkpoint; their re-runs are inside
    the function at the same moment (a barrier between the two draws) and both replay forward."""
    m1, m2 = _reference_masks(13)
    x = engine.ones(*SHAPE, dtype=np.float64, requires_grad=True)
    engine.manual_seed(13)
    barrier = threading.Barrier(2, timeout=10)
    outputs: list = []
    calls = [0]

    def fn(t: engine.Tensor) -> engine.Tensor:
        call, calls[0] = calls[0], calls[0] + 1
        y = _two_dropouts(t, barrier.wait if call > 0 else None)
        outputs.append(y.detach().numpy().copy())
        return y

    y = engine.checkpoint(fn, x, use_reentrant=True).sum()
    errors: list = []

    def run() -> None:
        try:
            y.backward(retain_graph=True)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors, errors
    assert len(outputs) == 3
    np.testing.assert_array_equal(outputs[1], outputs[0])
    np.testing.assert_array_equal(outputs[2], outputs[0])
    np.testing.assert_array_equal(outputs[0], np.tanh(m1) * m2)
    np.testing.assert_allclose(x.grad.numpy(), 2 * m1 * (1 - np.tanh(m1) ** 2) * m2, rtol=1e-15)


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.timeout(30)
def test_without_preserve_rng_state_the_rerun_draws_from_the_global_generator(use_reentrant):
    """preserve_rng_state=False keeps torch's behaviour: the re-run's draws advance the global
    generator like any other draw."""
    engine.manual_seed(17)
    x = engine.ones(*SHAPE, dtype=np.float64, requires_grad=True)
    y = engine.checkpoint(_two_dropouts, x, use_reentrant=use_reentrant, preserve_rng_state=False)
    before = engine.creation.get_rng_state()
    y.sum().backward()
    after = _state_key()
    engine.creation.set_rng_state(before)
    engine.rand(2 * SHAPE[0] * SHAPE[1], dtype=np.float64)  # the re-run's two draws
    assert after == _state_key()


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.timeout(30)
def test_manual_seed_inside_the_function_is_replayed_and_stays_inside_the_rerun(use_reentrant):
    """A seed set inside the checkpointed function seeds the global generator in forward (as
    unchecked), and the re-run's seeding does not reach the global generator."""
    def fn(t: engine.Tensor) -> engine.Tensor:
        engine.manual_seed(7)
        return ops.dropout(t, 0.5)

    x = engine.ones(*SHAPE, dtype=np.float64, requires_grad=True)
    y = engine.checkpoint(fn, x, use_reentrant=use_reentrant)
    engine.manual_seed(7)
    expected = (engine.rand(*SHAPE, dtype=np.float64).numpy() >= 0.5) * 2.0
    after_forward = _state_key()
    np.testing.assert_array_equal(y.detach().numpy(), expected)
    engine.manual_seed(100)
    seeded = _state_key()
    y.sum().backward()
    assert _state_key() == seeded != after_forward
    np.testing.assert_array_equal(x.grad.numpy(), expected)
