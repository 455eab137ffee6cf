"""The non-differentiable elementwise and boolean functions against torch 2.13: logical_*,
bitwise_* and Python's & | ^ ~ << >> (and reflected), any / all / count_nonzero with dims,
isclose / allclose / equal, isnan / isinf / isfinite; torch's refusal of floats in bitwise
ops. Skipped without torch."""
from __future__ import annotations

import numpy as np
import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")

A = np.array([[0, 1, 2], [3, 0, -5]])
B = np.array([[1, 1, 0], [2, 7, 3]])
CASES = {
    "logical_and": lambda lib, a, b: lib.logical_and(a, b),
    "logical_or": lambda lib, a, b: lib.logical_or(a, b),
    "logical_xor": lambda lib, a, b: lib.logical_xor(a, b.double()),
    "logical_not": lambda lib, a, b: lib.logical_not(a),
    "&": lambda lib, a, b: a & b, "|": lambda lib, a, b: a | b, "^": lambda lib, a, b: a ^ b,
    "~ int": lambda lib, a, b: ~a, "~ bool": lambda lib, a, b: ~(a > 0),
    "<<": lambda lib, a, b: a.abs() << 2, ">>": lambda lib, a, b: b >> 1,
    "number & tensor": lambda lib, a, b: 6 & a, "tensor | number": lambda lib, a, b: a | 8,
    "any": lambda lib, a, b: lib.any(a), "any dim keepdim": lambda lib, a, b: lib.any(a, dim=1, keepdim=True),
    "all": lambda lib, a, b: b.all(), "all dim": lambda lib, a, b: lib.all(a, dim=0),
    "count_nonzero": lambda lib, a, b: lib.count_nonzero(a), "count_nonzero dim": lambda lib, a, b: lib.count_nonzero(a, dim=0),
    "isclose": lambda lib, a, b: lib.isclose(a.double(), a.double() + 1e-6 * b, rtol=0, atol=5e-6),
    "isnan isinf isfinite": lambda lib, a, b: lib.stack([lib.isnan(a / b.double()), lib.isinf(a / b.double()),
                                                        lib.isfinite(a / b.double())]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch(name):
    ours = CASES[name](tg, tg.tensor(A), tg.tensor(B))
    theirs = CASES[name](torch, torch.tensor(A), torch.tensor(B))
    assert ours.numpy().dtype == theirs.numpy().dtype
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_python_bools_and_refusals():
    for lib in (torch, tg):
        a = lib.tensor([1.0, 2.0])
        assert lib.allclose(a, a + 1e-9) and not lib.allclose(a, a + 1.0)
        assert lib.equal(a, a * 1.0) and not lib.equal(a, lib.tensor([1.0]))
        with pytest.raises(NotImplementedError, match="bitwise_and_cpu\" not implemented for 'Float'"):
            a & a
