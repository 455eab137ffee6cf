"""A leaf's .grad never shares memory with a gradient still in flight, and backward(inputs=)
counts a retained non-leaf's gradient once (issue 15, bugs 1 and 2; Note [Gradient ownership]
in engine/tensor.py). Expected values are torch 2.13's."""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import engine
from threadgrad.engine.tensor import EngineSum
from threads_util import run_threads


def test_parameter_inside_and_outside_a_reentrant_checkpoint():
    """No threads, no hooks: the checkpoint's inner backward accumulates into x.grad while the
    outer add's gradient (the same Tensor, handed to both operands) is still queued for h."""
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = engine.tensor([1.0, 1.0], requires_grad=True)
    y = engine.checkpoint(lambda t: t + x, h, use_reentrant=True)
    ((y + x) * 3).sum().backward()
    assert h.grad.tolist() == [3.0, 3.0]
    assert x.grad.tolist() == [6.0, 6.0]


@pytest.mark.parametrize("non_reentrant", [False, True])
def test_checkpoint_and_shared_parameter_twice(non_reentrant):
    x = engine.tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)
    h = engine.tensor([1.0, 1.0], dtype=np.float64, requires_grad=True)
    y = engine.checkpoint(lambda t: t * x + x, h, use_reentrant=not non_reentrant)
    loss = ((y + x) * 3).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    assert h.grad.tolist() == [6.0, 12.0]
    assert x.grad.tolist() == [18.0, 18.0]  # 2 x 3 (h + 2)


def test_post_accumulate_hook_scaling_grad_in_place_leaves_the_other_leaf_alone():
    """AddBackward0 hands one gradient Tensor to a and c; a hook that scales a leaf's .grad in
    place must not change what the other leaf receives, whichever runs first."""
    a = engine.tensor([1.0, 2.0], requires_grad=True)
    c = engine.tensor([3.0, 4.0], requires_grad=True)
    seen = {}

    def zero_after_reading(name):
        def hook(t):
            seen[name] = t.grad.tolist()
            t.grad.mul_(0.0)
        return hook

    a.register_post_accumulate_grad_hook(zero_after_reading("a"))
    c.register_post_accumulate_grad_hook(zero_after_reading("c"))
    ((a + c) * 6).sum().backward()
    assert seen == {"a": [6.0, 6.0], "c": [6.0, 6.0]}
    assert a.grad.tolist() == [0.0, 0.0] and c.grad.tolist() == [0.0, 0.0]


def test_two_leaves_fed_one_gradient_then_accumulating_again():
    a = engine.tensor([1.0, 2.0], requires_grad=True)
    c = engine.tensor([3.0, 4.0], requires_grad=True)
    y = ((a + c) * 6).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert a.grad.tolist() == [12.0, 12.0] and c.grad.tolist() == [12.0, 12.0]
    assert not np.shares_memory(a.grad._data, c.grad._data)


@pytest.mark.timeout(120)
def test_concurrent_retained_backward_on_a_shared_graph_is_exact():
    """4 threads x 3 backward(retain_graph=True) on one graph whose add hands one gradient to
    two leaves: each leaf gets exactly 12 x 6."""
    for trial in range(20):
        a = engine.tensor([1.0, 2.0], requires_grad=True)
        c = engine.tensor([3.0, 4.0], requires_grad=True)
        y = ((a + c) * 6).sum()

        def work(_):
            for _ in range(3):
                y.backward(retain_graph=True)

        run_threads(4, work)
        assert a.grad.tolist() == [72.0, 72.0], trial
        assert c.grad.tolist() == [72.0, 72.0], trial


@pytest.mark.timeout(60)
def test_another_threads_backward_between_two_leaves_of_one_call():
    """The interleaving behind the concurrent failures, forced: thread 1's backward has given
    one leaf its gradient and not yet the other (which is handed the same Tensor); thread 2
    runs a whole backward meanwhile, adding into the first leaf's .grad in place."""
    import threading

    a = engine.tensor([1.0, 2.0], requires_grad=True)
    c = engine.tensor([3.0, 4.0], requires_grad=True)
    y = ((a + c) * 6).sum()
    first = threading.Event()
    other_done = threading.Event()

    def hold_first_call(t):
        if not first.is_set():
            first.set()
            assert other_done.wait(30)

    a.register_post_accumulate_grad_hook(hold_first_call)
    c.register_post_accumulate_grad_hook(hold_first_call)

    def other():
        assert first.wait(30)
        y.backward(retain_graph=True)
        other_done.set()

    th = threading.Thread(target=other)
    th.start()
    y.backward(retain_graph=True)
    th.join(30)
    assert a.grad.tolist() == [12.0, 12.0] and c.grad.tolist() == [12.0, 12.0]


@pytest.mark.timeout(60)
def test_fan_in_on_a_device_leaf_then_a_second_call():
    """The engine's own sum for a leaf on virtual:1 is adopted on the worker; a second call
    adds into it in place; nothing else aliases it."""
    x = engine.tensor([1.0, 2.0], dtype=np.float64, device="virtual:1", requires_grad=True)
    y = (x * 2.0 + x * 3.0).sum()
    y.backward(retain_graph=True)
    first = x.grad
    y.backward()
    assert x.grad is first and x.grad.tolist() == [10.0, 10.0]
    assert type(x.grad) is engine.Tensor and not isinstance(x.grad, EngineSum)


def test_retain_grad_and_backward_inputs_count_once():
    """Bug 2: h.retain_grad() plus backward(inputs=[h]) gave h.grad 6 where torch gives 3."""
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    h.retain_grad()
    (h * 3).sum().backward(inputs=[h])
    assert h.grad.tolist() == [3.0, 3.0]
    assert x.grad is None


def test_backward_inputs_on_a_non_leaf_retains_its_grad_as_torch_does():
    """torch's run_backward calls retain_grad() on every input: the non-leaf keeps
    retains_grad afterwards, so a later plain backward accumulates into it too."""
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    y = (h * 3).sum()
    y.backward(inputs=[h], retain_graph=True)
    assert h.retains_grad and h.grad.tolist() == [3.0, 3.0]
    y.backward()
    assert h.grad.tolist() == [6.0, 6.0] and x.grad.tolist() == [3.0, 3.0]


def test_backward_inputs_with_create_graph_on_a_retained_non_leaf():
    x = engine.tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)
    h = x * x
    h.retain_grad()
    (h * h).sum().backward(inputs=[h], create_graph=True)
    assert h.grad.tolist() == [2.0, 8.0]  # 2h
    assert h.grad.requires_grad
    h.grad.sum().backward(inputs=[x])
    assert x.grad.tolist() == [4.0, 8.0]  # d(2 x^2)/dx
