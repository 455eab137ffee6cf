"""In-place writes through views of op results whose arrays are dense but neither C- nor
F-contiguous (numpy keeps a permuted operand's layout: ``a.permute(1, 2, 0) * 2``), against
torch 2.13 (issue 33, item 6; skipped without torch): recorded, as torch records them, where
threadgrad used to refuse them."""
from __future__ import annotations

import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")


def _a(lib):
    return lib.arange(24, dtype=lib.float64).reshape(2, 3, 4).requires_grad_()


def _weights(lib, shape):
    n = 1
    for s in shape:
        n *= s
    return lib.arange(n, dtype=lib.float64).reshape(*shape) + 1


def issue_reproducer(lib):
    a = _a(lib)
    z = a.permute(1, 2, 0) * 2.0
    z[:, 1:2].mul_(3.0)
    (z * _weights(lib, (3, 4, 2))).sum().backward()
    return a.grad.reshape(-1).tolist()


def stale_sibling_view(lib):
    a = _a(lib)
    y = a.permute(2, 0, 1) * 1.0
    v, w = y[1:3, 0], y[:, 1]
    v.mul_(lib.arange(2, dtype=lib.float64).reshape(2, 1) + 2)
    (w * 3).sum().backward()
    return a.grad.reshape(-1).tolist()


def setitem_and_dirty_function(lib):
    class Double(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(2.0)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 2

    a = _a(lib)
    y = a.permute(0, 2, 1) * 1.0
    y[1, 2:, :] = 7.0
    v = Double.apply(y[0, :, 1])
    v.register_hook(lambda g: g * 10)
    (y * _weights(lib, (2, 4, 3))).sum().backward()
    return a.grad.reshape(-1).tolist()


CASES = [issue_reproducer, stale_sibling_view, setitem_and_dirty_function]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_write_through_a_view_of_a_permuted_dense_result_matches_torch(case):
    assert case(tg) == case(torch)
