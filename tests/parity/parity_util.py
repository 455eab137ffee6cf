"""Helpers for the ports of PyTorch's autograd tests (tests/parity/).

The ports keep PyTorch's structure so each test reads next to its original; these helpers
stand in for the few ``TestCase`` methods and ``torch`` spellings they lean on. pytest puts
this folder on ``sys.path`` (rootdir-relative "prepend" import mode, as for tests/threads_util.py),
so test modules import it as ``parity_util``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from threadgrad import engine

f64 = engine.float64


def t(data: Any, requires_grad: bool = False, dtype: Any = f64) -> engine.Tensor:
    """A float64 leaf holding ``data`` (PyTorch's tests run with double as the default)."""
    return engine.tensor(data, dtype=dtype, requires_grad=requires_grad)


def randn(*shape: int, requires_grad: bool = False) -> engine.Tensor:
    """A float64 standard-normal leaf of ``shape``."""
    return engine.randn(*shape, dtype=f64, requires_grad=requires_grad)


def rand(*shape: int, requires_grad: bool = False) -> engine.Tensor:
    """A float64 uniform [0, 1) leaf of ``shape``."""
    return engine.rand(*shape, dtype=f64, requires_grad=requires_grad)


def ones(*shape: int, requires_grad: bool = False) -> engine.Tensor:
    """A float64 leaf of ones."""
    return engine.ones(*shape, dtype=f64, requires_grad=requires_grad)


def zeros(*shape: int, requires_grad: bool = False) -> engine.Tensor:
    """A float64 leaf of zeros."""
    return engine.zeros(*shape, dtype=f64, requires_grad=requires_grad)


def arr(x: Any) -> np.ndarray:
    """The host array behind a Tensor (detached), or ``numpy.asarray`` of anything else."""
    if isinstance(x, engine.Tensor):
        return np.asarray(x.detach().numpy())
    return np.asarray(x)


def assert_equal(actual: Any, expected: Any, rtol: float = 1e-7, atol: float = 1e-7) -> None:
    """``TestCase.assertEqual`` for tensors: same shape, values within float64 tolerance."""
    assert actual is not None and expected is not None, f"expected two tensors, got {actual!r} and {expected!r}"
    a, e = arr(actual), arr(expected)
    if e.ndim == 0 and not isinstance(expected, engine.Tensor):
        e = np.broadcast_to(e, a.shape)  # a Python number stands for a tensor full of it
    assert a.shape == e.shape, f"shape {a.shape} != expected {e.shape}"
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)
