"""Nothing recursive: deep graphs build, run backward / grad, and free without recursion."""
from __future__ import annotations

import gc
import sys
import weakref

import numpy as np
import pytest

from threadgrad import engine, ops

N = 100_000


def _frame_depth() -> int:
    f, n = sys._getframe(), 0
    while f is not None:
        f, n = f.f_back, n + 1
    return n


@pytest.mark.timeout(60)
def test_backward_and_grad_through_100k_chain_then_free():
    x = engine.tensor(1.0, dtype=np.float64, requires_grad=True)
    y = x * 1.0001
    first = weakref.ref(y.grad_fn)
    for _ in range(N - 1):
        y = y * 1.0001
    expected = 1.0001 ** N

    (g,) = engine.grad(y, x, retain_graph=True)  # exercises the exec_info walk too
    assert g.item() == pytest.approx(expected, rel=1e-9)
    y.backward()
    assert x.grad.item() == pytest.approx(expected, rel=1e-9)
    assert y.item() == pytest.approx(expected, rel=1e-9)

    assert first() is not None
    del y, g
    gc.collect()
    assert first() is None


@pytest.mark.timeout(60)
def test_100k_chain_of_nodes_without_saved_tensors_exact():
    x = engine.tensor([1.0, -2.0], requires_grad=True)
    y = x
    for _ in range(N):
        y = -y  # an even number of negations
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]
    assert y.tolist() == [1.0, -2.0]


@pytest.mark.timeout(60)
def test_freeing_unexecuted_100k_chain_does_not_recurse():
    x = engine.tensor([1.0], requires_grad=True)
    y = x * 1.0
    first = weakref.ref(y.grad_fn)
    acc = weakref.ref(y.grad_fn.next_functions[0][0])
    for _ in range(N - 1):
        y = y * 1.0
    del y  # freed by reference counting alone: no cycles in the graph
    assert first() is None
    assert acc() is None
    gc.collect()
    assert x.grad is None and x.requires_grad


@pytest.mark.timeout(60)
def test_backward_does_not_grow_the_python_stack_with_depth():
    depth = 20_000
    x = engine.tensor([2.0], requires_grad=True)
    y = x
    for _ in range(depth):
        y = y * 1.0
    limit = sys.getrecursionlimit()
    # Far fewer frames than nodes: a recursive walk would hit this limit at once.
    sys.setrecursionlimit(_frame_depth() + 200)
    try:
        y.sum().backward()
    finally:
        sys.setrecursionlimit(limit)
    assert x.grad.tolist() == [1.0]


@pytest.mark.timeout(60)
def test_deep_chain_crossing_devices_many_times(virtual1):
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = x
    for _ in range(500):
        y = ops.to(ops.to(y, virtual1) * 2.0, "cpu") * 0.5
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]
    assert y.tolist() == [1.0, 2.0]


@pytest.mark.timeout(60)
def test_wide_graph_many_leaves():
    leaves = [engine.tensor([float(i)], requires_grad=True) for i in range(2000)]
    total = leaves[0] * leaves[0]
    for t in leaves[1:]:
        total = total + t * t
    total.sum().backward()
    assert [t.grad.item() for t in leaves] == [2.0 * i for i in range(2000)]
