"""Statistics and norms: var, std, norm. See Note [Op definitions] in _core.py.

They are compositions of differentiable ops (mean, sub, mul, sum, div), so their backward is
their parts' and double backward comes for free. The one op of their own is the square root
that ``std`` and the 2-norm end with: its backward is 0 where the result is 0, as torch's
``std_backward`` and ``norm_backward`` mask it (a plain sqrt would give ``0 * inf = nan`` for a
constant input or a zero vector).

>>> from threadgrad import engine, ops
>>> x = engine.tensor([1.0, 2.0, 3.0, 4.0])
>>> round(ops.var(x).item(), 4), round(ops.std(x, correction=0).item(), 4), ops.norm(engine.tensor([3.0, 4.0])).item()
(1.6667, 1.118, 5.0)
"""
from __future__ import annotations

import math
import warnings
from typing import Any

from ..engine.tensor import Tensor

from ._core import OUTPUT, Node, check_tensor, const, dim_alias, normalize_dims, register, unary_result
from .elementwise import abs as _abs, div, mul, pow as _pow, sub, where
from .reduce import max as _max, mean, min as _min, sum as _sum


class SqrtBackward0(Node):
    """sqrt whose gradient is 0 where its result is 0 (the kink of std and the 2-norm)."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        (out,) = self.saved_tensors()
        xp = out.device.xp
        zero = out._data == 0
        # The denominator is 1 where the result is 0, so no inf appears even in double backward.
        denom = const(xp.where(zero, 2.0, 0.0).astype(out.dtype), out)
        return (where(const(zero, out), const(xp.zeros((), dtype=g.dtype), g), div(g, mul(out, 2) + denom)),)


def _masked_sqrt(x: Tensor) -> Tensor:
    return unary_result(x, x.device.xp.sqrt(x._data), SqrtBackward0, OUTPUT)


def _reduction_args(name: str, dim: Any, keepdim: bool, axis: Any, keepdims: Any) -> tuple:
    if axis is not None:
        dim = dim_alias(dim, axis, name)
    return dim, keepdim if keepdims is None else keepdims


def _correction(name: str, unbiased: Any, correction: Any) -> float:
    if unbiased is not None and correction is not None:
        raise TypeError(f"{name}(): pass either unbiased= or correction=, not both")
    if correction is not None:
        return float(correction)
    return 0.0 if unbiased is False else 1.0


@register
def var(x: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None,
        axis: Any = None, keepdims: Any = None) -> Tensor:
    """Variance over ``dim`` (None: all dims) with Bessel's ``correction`` (default 1;
    ``unbiased=False`` is ``correction=0``), as ``torch.var``.

    >>> from threadgrad import engine, ops
    >>> ops.var(engine.tensor([[1.0, 3.0], [2.0, 6.0]]), dim=1).tolist()
    [2.0, 8.0]
    """
    check_tensor(x, "var")
    if isinstance(dim, bool):  # torch's var(x, unbiased) overload
        dim, unbiased = None, dim
    dim, keepdim = _reduction_args("var", dim, keepdim, axis, keepdims)
    c = _correction("var", unbiased, correction)
    if x.dtype.kind not in "fc":
        raise RuntimeError(f"var(): could not infer output dtype. Input dtype must be either a floating point or "
                           f"complex dtype. Got: {x.dtype}")
    dims = normalize_dims(dim, x.ndim, "var")
    n = math.prod(x.shape[d] for d in dims)
    dof = n - c
    if dof <= 0:
        warnings.warn("var(): degrees of freedom is <= 0. Correction should be strictly less than the reduction "
                      "factor (input numel divided by output numel).", UserWarning, stacklevel=2)
    d = sub(x, mean(x, dims or None, keepdim=True))
    return div(_sum(mul(d, d), dims or None, keepdim=keepdim), max(dof, 0.0))


@register
def std(x: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None,
        axis: Any = None, keepdims: Any = None) -> Tensor:
    """Standard deviation: the square root of :func:`var` (same arguments); its gradient is 0
    where it is 0, as torch's."""
    check_tensor(x, "std")
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return _masked_sqrt(var(x, dim, unbiased, keepdim, correction=correction, axis=axis, keepdims=keepdims))


@register
def norm(x: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False, dtype: Any = None, *,
         axis: Any = None, keepdims: Any = None) -> Tensor:
    """The vector ``p``-norm over ``dim`` (None: all elements), as ``torch.norm``: ``p`` is
    ``"fro"`` or 2 (its gradient is 0 at a zero vector, as torch's), 1, ``inf``, ``-inf``, 0
    (the count of non-zeros) or any other number. ``"nuc"`` is not supported."""
    check_tensor(x, "norm")
    dim, keepdim = _reduction_args("norm", dim, keepdim, axis, keepdims)
    if dtype is not None:
        from .device import to

        x = to(x, None, dtype)
    if x.dtype.kind not in "fc":
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got {x.dtype}")
    if p == "nuc":
        raise NotImplementedError("norm(p='nuc'): the nuclear norm is not supported by threadgrad")
    if p == "fro":
        p = 2
    if not isinstance(p, (int, float)):
        raise ValueError(f"norm: p must be 'fro', 'nuc' or a number, got {p!r}")
    dims = normalize_dims(dim, x.ndim, "norm")
    red = dims or None
    if p == 2:
        return _masked_sqrt(_sum(mul(x, x), red, keepdim=keepdim))
    a = _abs(x)
    if p == 1:
        return _sum(a, red, keepdim=keepdim)
    if p in (math.inf, -math.inf):
        pick = _max if p > 0 else _min
        if red is None and not keepdim:
            return pick(a)
        for d in reversed(dims):  # one dim at a time: max with a dim takes an int
            a = pick(a, d, keepdim=True).values
        return a if keepdim else _squeeze_dims(a, dims)
    if p == 0:
        return _sum(const((x._data != 0).astype(x.dtype), x), red, keepdim=keepdim)
    return _pow(_sum(_pow(a, p), red, keepdim=keepdim), 1.0 / p)


def _squeeze_dims(a: Tensor, dims: tuple) -> Tensor:
    from .shape import squeeze

    return squeeze(a, dims)
