"""getitem, index_put, gather: repeated indices, masks, views."""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import engine, ops


def test_repeated_integer_indices_accumulate() -> None:
    x = engine.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    x[[0, 2, 2, 2, 0]].sum().backward()
    assert x.grad.tolist() == [2.0, 0.0, 3.0, 0.0]


def test_repeated_index_tensor_2d_accumulates() -> None:
    x = engine.ones(3, 2, requires_grad=True)
    idx = engine.tensor([1, 1, 0])
    (x[idx] * engine.tensor([[1.0, 2.0]])).sum().backward()
    assert x.grad.tolist() == [[1.0, 2.0], [2.0, 4.0], [0.0, 0.0]]


def test_boolean_mask_and_mixed_index() -> None:
    x = engine.tensor([[1.0, -2.0], [-3.0, 4.0]], requires_grad=True)
    y = x[x > 0]
    assert y.tolist() == [1.0, 4.0]
    y.sum().backward()
    assert x.grad.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    z = engine.arange(24, dtype=engine.float32).reshape(2, 3, 4)
    assert z[:, [0, 2], 1:3].tolist() == z.numpy()[:, [0, 2], 1:3].tolist()
    assert z[None, ..., -1].shape == (1, 2, 3)


def test_basic_index_is_a_view_sharing_the_version() -> None:
    x = engine.zeros(3, 4)
    row = x[1]
    assert np.shares_memory(row._data, x._data)
    row.add_(1.0)
    assert x.version == row.version == 1
    assert x.sum().item() == 4.0
    fancy = x[[0, 1]]
    assert not np.shares_memory(fancy._data, x._data)


def test_out_of_range_index_names_the_shape() -> None:
    with pytest.raises(IndexError, match=r"\[2, 3\]"):
        engine.zeros(2, 3)[5]


def test_index_put_gradients() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    v = engine.tensor([10.0, 20.0], requires_grad=True)
    out = ops.index_put(x, [0, 2], v)
    assert out.tolist() == [10.0, 2.0, 20.0]
    (out * engine.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert x.grad.tolist() == [0.0, 2.0, 0.0]
    assert v.grad.tolist() == [1.0, 3.0]
    assert out.grad_fn.name() == "IndexPutBackward0"


def test_gather_matches_take_along_axis_and_accumulates() -> None:
    x = engine.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    idx = engine.tensor([[2, 2], [0, 1]])
    out = ops.gather(x, 1, idx)
    assert out.tolist() == [[3.0, 3.0], [4.0, 5.0]]
    out.sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0, 2.0], [1.0, 1.0, 0.0]]
    assert out.grad_fn.name() == "GatherBackward0"


@pytest.mark.parametrize("call", ["getitem", "setitem", "index_put", "gather"])
def test_an_index_tensor_on_another_device_is_refused_naming_both(call: str) -> None:
    """As torch: an index must be on the tensor's device (or, to index, on the cpu)."""
    x = engine.tensor([[1.0, 2.0], [3.0, 4.0]])
    idx = engine.tensor([[1], [0]], device="virtual:1")
    run = {
        "getitem": lambda: x[idx],
        "setitem": lambda: x.__setitem__(idx, 0.0),
        "index_put": lambda: ops.index_put(x, idx, engine.tensor(0.0)),
        "gather": lambda: ops.gather(x, 1, idx),
    }[call]
    with pytest.raises(RuntimeError, match="found at least two devices, cpu and virtual:1"):
        run()
    assert x.tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_a_cpu_index_may_index_a_tensor_on_another_device_but_not_gather_it() -> None:
    x = engine.tensor([[1.0, 2.0], [3.0, 4.0]], device="virtual:1", requires_grad=True)
    idx = engine.tensor([1, 0])
    y = x[idx]
    assert y.device == x.device and y.tolist() == [[3.0, 4.0], [1.0, 2.0]]
    y[0].sum().backward()
    assert x.grad.device == x.device and x.grad.tolist() == [[0.0, 0.0], [1.0, 1.0]]
    with pytest.raises(RuntimeError, match="gather: expected all tensors to be on the same device"):
        ops.gather(x, 1, engine.tensor([[1], [0]]))


def test_an_int_per_dim_gives_a_0d_view_as_torch() -> None:
    x = engine.zeros(2)
    v = x[0]
    v.add_(1.0)
    assert x.tolist() == [1.0, 0.0] and x.version == v.version == 1
    y = engine.zeros(2, 2)
    y[0, 1].add_(5.0)
    assert y.tolist() == [[0.0, 5.0], [0.0, 0.0]]
    z = engine.tensor(3.0)
    z[()].mul_(2.0)
    assert z.item() == 6.0


def test_a_0d_view_saved_for_backward_is_version_checked() -> None:
    w = engine.tensor([1.0, 2.0], requires_grad=True)
    with engine.no_grad():
        base = engine.zeros(2)
    s = base[1]
    y = (w * s).sum()  # s is saved by mul
    s.add_(1.0)        # through the 0-d view: base and s share a version counter
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
