"""``Tensor.data``: reading gives the array itself; assigning keeps it an array of the tensor's
device (Note [Tensor.data] in engine/tensor.py). torch's ``p.data = t`` and its old idiom
``p.data -= lr * p.grad`` work as in torch; anything that is not an array of the device is
refused at the assignment, where it used to leave ``p`` holding a Tensor or a list."""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import engine, ops


def test_reading_data_gives_the_array_itself():
    a = np.array([1.0, 2.0])
    t = engine.tensor(a, dtype=np.float64)
    assert type(t.data) is np.ndarray
    assert t.data is t.data  # no copy, no new object per read
    t.data[0] = 5.0  # writes reach the tensor (and, as in torch, bypass the version counter)
    assert t.tolist() == [5.0, 2.0] and t.version == 0


def test_the_sgd_idiom_on_data_updates_the_array_in_place_of_breaking_it():
    # torch's pre-optimizer idiom. numpy cannot subtract a Tensor in place, so Python computes
    # p.data - lr * p.grad (a Tensor) and assigns it: the setter takes its array.
    p = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    ops.sum(ops.mul(p, p)).backward()
    v0 = p.version
    p.data -= 0.1 * p.grad
    assert type(p.data) is np.ndarray and p.data.dtype == np.float32
    np.testing.assert_allclose(p.data, [0.8, 1.6, 2.4], rtol=1e-6)
    assert p.version == v0 and p.is_leaf and p.requires_grad  # no history, no version bump
    p.grad = None
    ops.sum(ops.mul(p, p)).backward()  # p still works as a leaf
    np.testing.assert_allclose(p.grad.data, [1.6, 3.2, 4.8], rtol=1e-6)


def test_assigning_a_tensor_shares_its_array():
    p = engine.tensor([1.0, 2.0], requires_grad=True)
    t = engine.tensor([[3.0, 4.0, 5.0]], dtype=np.float64)
    p.data = t
    assert p.data is t.data  # shares the storage, as torch's set_data does
    assert p.shape == (1, 3) and p.dtype == np.float64  # shape and dtype follow, as in torch
    assert p.requires_grad and p.grad_fn is None


def test_assigning_a_numpy_scalar_keeps_an_array():
    p = engine.tensor([1.0, 2.0], dtype=np.float64)
    p.data = p.data.sum()  # numpy returns numpy.float64 for a full reduction
    assert type(p.data) is np.ndarray and p.shape == () and p.item() == 3.0


@pytest.mark.parametrize("bad, name", [([1.0, 2.0], "list"), (3.0, "float"), (None, "NoneType")])
def test_assigning_a_non_array_is_refused_and_the_tensor_is_unchanged(bad, name):
    p = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match=f"Tensor data has to be a tensor or a numpy.ndarray on cpu, but got {name}"):
        p.data = bad
    assert type(p.data) is np.ndarray and p.tolist() == [1.0, 2.0]
    ops.sum(p).backward()
    assert p.grad.tolist() == [1.0, 1.0]


def test_assigning_a_tensor_of_another_device_is_refused():
    p = engine.tensor([1.0, 2.0], requires_grad=True)
    q = engine.tensor([1.0, 2.0], device="virtual:1")
    with pytest.raises(RuntimeError, match="data set to a tensor on virtual:1, but this tensor is on cpu"):
        p.data = q
    with pytest.raises(RuntimeError, match="data set to a tensor on cpu, but this tensor is on virtual:1"):
        q.data = p
    assert p.device.type == "cpu" and q.device.index == 1


def test_data_assignment_matches_torch_in_a_training_loop_and_under_a_saved_graph():
    """torch as the oracle: the idiom gives torch's parameters, and since a ``.data``
    assignment bumps no version, a graph that saved ``p`` backprops through the new values
    without an error, in both."""
    torch = pytest.importorskip("torch")
    a0 = np.array([0.5, -1.0, 2.0])
    p = engine.tensor(a0, dtype=np.float64, requires_grad=True)
    tp = torch.tensor(a0, requires_grad=True)
    for _ in range(3):
        ops.sum(ops.mul(ops.tanh(p), p)).backward()
        (torch.tanh(tp) * tp).sum().backward()
        p.data -= 0.3 * p.grad
        tp.data -= 0.3 * tp.grad
        p.grad = None
        tp.grad = None
    np.testing.assert_allclose(p.data, tp.detach().numpy(), rtol=1e-12)
    # A graph saved p; p.data changes; backward uses the new values, in both.
    y = ops.sum(ops.mul(p, p))
    ty = (tp * tp).sum()
    p.data = p.data * 2.0
    tp.data = tp.data * 2.0
    y.backward()
    ty.backward()
    np.testing.assert_allclose(p.grad.data, tp.grad.numpy(), rtol=1e-12)
