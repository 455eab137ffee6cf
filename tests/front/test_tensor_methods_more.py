"""Tensor methods torch programs call that are existing ops under torch's names: chunk, unbind,
narrow, index_select, repeat, unflatten (values and gradients against torch), new_zeros /
new_ones / new_empty / new_full / new_tensor, type_as, nelement, element_size, is_contiguous,
and the in-place random fills uniform_ / normal_ (torch's refusal on a leaf that requires
grad). Skipped without torch."""
from __future__ import annotations

import numpy as np
import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")

X0 = np.arange(24.0).reshape(2, 3, 4)
CASES = {
    "chunk even": lambda lib, x: x.chunk(2, 2),
    "chunk uneven": lambda lib, x: x.chunk(3, -1),
    "chunk fewer pieces": lambda lib, x: x.chunk(3, 1),
    "unbind": lambda lib, x: x.unbind(1),
    "torch.unbind": lambda lib, x: lib.unbind(x, 0),
    "narrow": lambda lib, x: x.narrow(2, 1, 2),
    "torch.narrow, negative start": lambda lib, x: lib.narrow(x, -1, -3, 2),
    "index_select": lambda lib, x: x.index_select(1, lib.tensor([2, 0, 2])),
    "repeat": lambda lib, x: x.repeat(2, 1, 3),
    "repeat, a new dim": lambda lib, x: x.repeat(2, 2, 1, 1),
    "repeat, a tuple": lambda lib, x: x.repeat((1, 2, 1)),
    "unflatten": lambda lib, x: x.unflatten(2, (2, 2)),
    "unflatten with -1": lambda lib, x: x.unflatten(-1, (2, -1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_method_matches_torch(name):
    got = []
    for lib in (torch, tg):
        x = lib.tensor(X0, requires_grad=True)
        out = CASES[name](lib, x)
        outs = out if isinstance(out, tuple) else (out,)
        sum((o * lib.tensor(np.arange(o.numel()).reshape(tuple(o.shape)) + 1.0)).sum() for o in outs).backward()
        got.append(([o.detach().numpy() for o in outs], x.grad.numpy()))
    assert len(got[0][0]) == len(got[1][0])
    for want, mine in zip(got[0][0], got[1][0]):
        np.testing.assert_array_equal(mine, want)
    np.testing.assert_array_equal(got[1][1], got[0][1])


def test_new_tensors_and_facts_as_torch():
    for lib in (torch, tg):
        x = lib.tensor(X0)
        assert x.new_zeros(2, 3).shape == (2, 3) and x.new_zeros(2, 3).numpy().dtype == np.float64
        assert x.new_ones((2,)).tolist() == [1.0, 1.0] and x.new_full((2,), 7.0).tolist() == [7.0, 7.0]
        assert x.new_empty(4).shape == (4,) and x.new_tensor([1, 2]).numpy().dtype == np.float64
        assert x.new_zeros(2, requires_grad=True).requires_grad
        assert x.type_as(lib.tensor([1], dtype=lib.float32)).numpy().dtype == np.float32
        assert (x.nelement(), x.element_size(), x.is_contiguous(), x.transpose(0, 1).is_contiguous()) == \
            (24, 8, True, False)


def test_random_fills_as_torch():
    for lib in (torch, tg):
        w = lib.zeros(3, requires_grad=True)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place "
                                               "operation"):
            w.uniform_()
        with lib.no_grad():
            w.uniform_(2, 3)
        assert 2 <= float(w.detach().min()) and float(w.detach().max()) < 3
        v = lib.empty(4000).normal_(5, 0.1)
        assert abs(v.mean().item() - 5) < 0.01 and abs(v.std().item() - 0.1) < 0.01
        # a non-leaf overwritten in place gets no gradient through what it held
        a = lib.ones(3, requires_grad=True)
        b = a * 2
        b.uniform_()
        b.sum().backward()
        assert a.grad.tolist() == [0.0, 0.0, 0.0]
