"""threadgrad's differentiable operators, in functional form with torch's signatures.

Every op broadcasts like numpy, keeps dtype, refuses operands on different devices, and is
differentiable twice. ``REGISTRY`` maps each public op name to its function.

>>> import engine, ops
>>> x = engine.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
>>> ops.sum(ops.mul(x, x), dim=1).tolist()
[5.0, 25.0]
"""
from __future__ import annotations

import engine as _engine  # noqa: F401 - ops sit on top of engine (ops -> engine -> devices)

from ._core import REGISTRY, register
from .device import clone, to
from .elementwise import add, div, exp, log, mul, neg, pow, relu, sub, tanh
from .linalg import matmul
from .reduce import mean, sum
from .shape import expand, getitem, permute, reshape, squeeze, transpose, unsqueeze
from . import _methods  # noqa: F401 - binds Tensor's operators and methods

__all__ = sorted(REGISTRY) + ["REGISTRY", "register"]
