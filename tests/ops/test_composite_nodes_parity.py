"""Ops that torch records as several nodes, against torch 2.13 (issue 33, item 5; skipped
without torch).

A basic index of several parts that each do something (``t[1, 0:1]``) is torch's chain of
one view op per part, left to right (SelectBackward0, then SliceBackward0 on its result;
Ellipsis and slices covering their whole dim add none), and threadgrad records the same chain:
a node post-hook on the result's ``grad_fn`` sees the gradient of the intermediate result,
and a hook that changes it by more than a scaling changes the gradient as in torch.
``matmul`` of a vector and a matrix is torch's unsqueeze, mm and in-place squeeze_ (three
nodes, the last SqueezeBackward4), so a post-hook on its ``grad_fn`` sees the (1, n) gradient.
"""
from __future__ import annotations

import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")

INDEXES = {
    "select_slice": (1, slice(0, 1)),
    "none_select": (None, 1),
    "full_select_slice": (slice(None), 1, slice(1, 3)),
    "ellipsis_select": (Ellipsis, 2),
    "select_ellipsis_slice": (1, Ellipsis, slice(0, 2)),
    "three_selects": (0, 1, 2),
    "slice_none_slice_select": (slice(0, 2), None, slice(1, 2), 0),
    "select_full": (1, slice(None)),
    "none_ellipsis_none": (None, Ellipsis, None),
    "negative_step_free": (-1, slice(-3, None)),
}


def _chain(t):
    """The node names from t's grad_fn down to the MulBackward0 it indexes."""
    names, node = [], t.grad_fn
    while node is not None and node.name() != "MulBackward0":
        names.append(node.name())
        node = node.next_functions[0][0]
    return names


def _program(lib, idx, change):
    x = lib.arange(60, dtype=lib.float64).reshape(3, 4, 5).requires_grad_()
    r = (x * 0.5)[idx]
    seen = []

    def post(grad_inputs, grad_outputs):
        seen.append([list(grad_inputs[0].shape), list(grad_outputs[0].shape)])
        return (grad_inputs[0] * grad_inputs[0] + 1.0,) if change else None

    r.grad_fn.register_hook(post)
    weights = lib.arange(r.numel(), dtype=lib.float64).reshape(r.shape) + 1.0
    (r * weights).sum().backward()
    return _chain(r), list(r.shape), seen, x.grad.reshape(-1).tolist()


@pytest.mark.parametrize("change", [False, True], ids=["observe", "change"])
@pytest.mark.parametrize("name", INDEXES)
def test_basic_index_chain_matches_torch(name, change):
    idx = INDEXES[name]
    assert _program(tg, idx, change) == _program(torch, idx, change)


def test_issue_example_select_then_slice():
    def names(lib):
        t = lib.ones(3, 2, requires_grad=True) * 1
        s = t[1, 0:1]
        return s.grad_fn.name(), s.grad_fn.next_functions[0][0].name()
    assert names(tg) == names(torch) == ("SliceBackward0", "SelectBackward0")


def test_in_place_write_through_a_chained_view_matches_torch():
    def run(lib):
        x = lib.arange(12, dtype=lib.float64).reshape(3, 4).requires_grad_()
        w = lib.tensor([2.0, 3.0], dtype=lib.float64, requires_grad=True)
        y = x * 1
        y[1, 1:3].mul_(w)
        (y * y).sum().backward()
        return x.grad.tolist(), w.grad.tolist(), y.grad_fn.name().replace("torch::autograd::", "")
    assert run(tg) == run(torch)


def _vector_matrix(lib, change):
    a = lib.tensor([1.0, -2.0, 3.0], dtype=lib.float64, requires_grad=True)
    m = lib.arange(12, dtype=lib.float64).reshape(3, 4).requires_grad_()
    r = a @ m
    names, node = [], r.grad_fn
    while node is not None and "AccumulateGrad" not in node.name():
        names.append((node.name(), len(node.next_functions)))
        node = node.next_functions[0][0]
    seen = []

    def post(grad_inputs, grad_outputs):
        seen.append([list(g.shape) for g in grad_inputs])
        return (grad_inputs[0] * grad_inputs[0] + 1.0,) if change else None

    r.grad_fn.register_hook(post)
    (r * lib.tensor([1.0, 2.0, 3.0, 4.0], dtype=lib.float64)).sum().backward()
    r.mul_(2.0)  # the result is no view (torch squeezes in place): its own history changes
    return names, seen, a.grad.tolist(), m.grad.tolist(), r.grad_fn.name()


@pytest.mark.parametrize("change", [False, True], ids=["observe", "change"])
def test_vector_times_matrix_is_torchs_three_nodes(change):
    assert _vector_matrix(tg, change) == _vector_matrix(torch, change)
