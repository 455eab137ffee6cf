"""Misuse of the autograd API fails with the right exception type and message."""
from __future__ import annotations

import pytest

from threadgrad import engine


def test_backward_on_tensor_not_requiring_grad():
    t = engine.tensor([1.0, 2.0]).sum()
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad and does not have a grad_fn"):
        t.backward()
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        engine.backward(t)


def test_backward_on_second_root_not_requiring_grad():
    x = engine.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="element 1 of tensors does not require grad"):
        engine.backward([x.sum(), engine.tensor(1.0)])


def test_backward_on_non_scalar_without_gradient():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        (x * 2).backward()
    assert x.grad is None


def test_backward_on_one_element_non_scalar_is_allowed():
    x = engine.tensor([[3.0]], requires_grad=True)
    (x * 2).backward()
    assert x.grad.tolist() == [[2.0]]


def test_backward_on_scalar_leaf():
    x = engine.tensor(3.0, requires_grad=True)
    x.backward()
    assert x.grad.item() == 1.0


def test_gradient_of_wrong_shape():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"Mismatch in shape: grad_output\[0\] has a shape of \(3,\)"):
        (x * 2).backward(engine.ones(3))
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2).backward(engine.ones(2, 1))
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2).sum().backward(engine.ones(1))  # (1,) is not the scalar shape ()
    assert x.grad is None


def test_gradient_on_wrong_device():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="virtual:1") as info:
        (x * 2).backward(engine.ones(2, device="virtual:1"))
    assert "cpu" in str(info.value)
    assert x.grad is None


def test_wrong_number_of_grad_tensors():
    x = engine.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="got 1 tensors and 2 gradients"):
        engine.backward(x * 2, [engine.ones(1), engine.ones(1)])


def test_non_tensor_arguments_are_type_errors():
    x = engine.tensor([1.0], requires_grad=True)
    with pytest.raises(TypeError, match="must be a Tensor"):
        engine.backward(3.0)
    with pytest.raises(TypeError, match=r"tensors\[1\] must be a Tensor"):
        engine.backward([x.sum(), "y"])
    with pytest.raises(TypeError, match="must be a Tensor"):
        engine.grad(x.sum(), 5)


def test_grad_input_not_in_graph():
    x = engine.tensor([1.0], requires_grad=True)
    other = engine.tensor([1.0], requires_grad=True)
    y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph") as info:
        engine.grad(y, other, retain_graph=True)
    assert "allow_unused=True" in str(info.value)
    (g,) = engine.grad(y, other, allow_unused=True)
    assert g is None


def test_grad_with_no_inputs():
    x = engine.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"`inputs` argument to `grad\(\)` cannot be empty."):
        engine.grad((x * 2).sum(), [])


def test_backward_inputs_not_requiring_grad():
    x = engine.tensor([1.0], requires_grad=True)
    c = engine.tensor([1.0])
    with pytest.raises(RuntimeError, match="can't retain_grad on Tensor that has requires_grad=False"):
        (x * c).sum().backward(inputs=[c])  # torch's words: its run_backward calls retain_grad() first


def test_queue_callback_outside_backward():
    with pytest.raises(RuntimeError, match="Final callbacks can only be installed during backward pass."):
        engine.queue_callback(lambda: None)


def test_queue_callback_needs_callable():
    x = engine.tensor([1.0], requires_grad=True)
    h = x * 2
    h.register_hook(lambda g: engine.queue_callback(42))
    with pytest.raises(TypeError, match="callable"):
        h.sum().backward()


def test_errors_leave_the_engine_usable():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    for bad in (lambda: (x * 2).backward(),
                lambda: (x * 2).backward(engine.ones(3)),
                lambda: engine.queue_callback(print)):
        with pytest.raises(RuntimeError):
            bad()
    (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]
