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

from ..engine.tensor import Tensor, _wrap

from ._core import OUTPUT, Node, check_tensor, const, dim_alias, normalize_dims, record, register, tls, unary_result
from .elementwise import _sgn, abs as _abs, add, div, mul, pow as _pow, sub, where
from .reduce import max as _max, mean, min as _min, sum as _sum
from .device import to
from .shape import squeeze, unsqueeze


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
    if x.dtype.kind == "f":
        return _moment(x, VarBackward0, dims, keepdim, dof)
    d = sub(x, mean(x, dims or None, keepdim=True))  # complex: the composition
    return div(_sum(mul(d, d), dims or None, keepdim=keepdim), max(dof, 0.0))


class VarBackward0(Node):
    """torch's ``var_backward``: ``2 / (n - correction) * g * (x - mean(x))``, one node (the
    composition's gradient went NaN on a whole slice holding an infinity, torch's only where
    ``inf - inf``), written with differentiable ops."""

    __slots__ = ("dims", "keepdim", "dof")

    def backward(self, g: Tensor) -> tuple:
        x, out = self.saved_tensors()
        return (self._var_backward(g, x),)

    def _var_backward(self, g: Tensor, x: Tensor) -> Tensor:
        if not self.keepdim:
            for d in sorted(self.dims):
                g = unsqueeze(g, d)
        scale = 2.0 / self.dof if self.dof else math.inf  # (torch's 2.0 / (n - correction), in double)
        return mul(mul(g, scale), sub(x, mean(x, self.dims, keepdim=True)))


class StdBackward0(VarBackward0):
    """torch's ``std_backward``: var's with ``g / (2 * std)``, 0 where the std is 0."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        x, out = self.saved_tensors()
        zero = out._data == 0
        half = div(g, mul(add(out, const(zero.astype(out.dtype), out)), 2))  # (1 in the denominator at 0)
        grad = self._var_backward(half, x)
        if not zero.any():
            return (grad,)
        if not self.keepdim:
            zero = out.device.xp.expand_dims(zero, tuple(sorted(self.dims)))
        return (where(const(zero, out), const(out.device.xp.zeros((), dtype=x.dtype), x), grad),)


def _moment(x: Tensor, node_cls: type, dims: tuple, keepdim: bool, dof: float) -> Tensor:
    """A real tensor's variance (or, for StdBackward0, its square root) as one node."""
    xp = x.device.xp
    axis = dims or None
    d = x._data - xp.mean(x._data, axis=axis, keepdims=True)
    data = xp.sum(d * d, axis=axis, keepdims=keepdim) / max(dof, 0.0)
    if node_cls is StdBackward0:
        data = xp.sqrt(data)
    out = _wrap(xp.asarray(data, dtype=x.dtype), x.device)
    if tls.grad_enabled and x._rg:
        node = node_cls()
        node.dims, node.keepdim, node.dof = dims or tuple(range(x.ndim)), keepdim, float(dof)
        record(node, (x,), out, (x, out))
    return out


@register
def std(x: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None,
        axis: Any = None, keepdims: Any = None) -> Tensor:
    """Standard deviation: the square root of :func:`var` (same arguments); its gradient is 0
    where it is 0, as torch's."""
    check_tensor(x, "std")
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    if x.dtype.kind == "f":
        dim, keepdim = _reduction_args("std", dim, keepdim, axis, keepdims)
        dims = normalize_dims(dim, x.ndim, "std")
        c = _correction("std", unbiased, correction)
        dof = math.prod(x.shape[d] for d in dims) - c
        if dof <= 0:
            warnings.warn("std(): degrees of freedom is <= 0. Correction should be strictly less than the "
                          "reduction factor (input numel divided by output numel).", UserWarning, stacklevel=2)
        return _moment(x, StdBackward0, dims, keepdim, dof)
    return _masked_sqrt(var(x, dim, unbiased, keepdim, correction=correction, axis=axis, keepdims=keepdims))


class LinalgVectorNormBackward0(Node):
    """The gradient of a real tensor's vector norm: torch's ``norm_backward``
    (FunctionsManual.cpp) case by case, written with differentiable ops (double backward).
    Where torch masks a 0/0 (``masked_fill_``), this takes a ``where`` over a denominator made
    1 there, so no inf or NaN reaches even the second derivative:

    * p = 0: zeros. p = 1: ``g * sgn(x)`` (sgn(NaN) = 0, as torch's).
    * p = 2: ``g * x / norm``, 0 where the norm is 0.
    * p = +-inf: ``sgn(x) * g / count * mask``, the mask being the elements whose ``|x|`` is
      the norm (or NaN): tied extremes share the gradient evenly, as ``max()``'s.
    * p < 1: ``sgn(x) * |x|**(p-1) * g * norm**(1-p)``, 0 where x is 0.
    * otherwise: ``sgn(x) * |x|**(p-1) * g / norm**(p-1)`` (``x * |x|**(p-2)`` for p >= 2),
      0 where the norm is 0.
    """

    __slots__ = ("p", "dims", "keepdim")

    def backward(self, g: Tensor) -> tuple:
        x, out = self.saved_tensors()
        xp = x.device.xp
        p = self.p
        if p == 0:
            return (const(xp.zeros(x.shape, dtype=x.dtype), x),)
        if not self.keepdim:  # back to x's rank, reduced dims of size 1
            for d in sorted(self.dims):
                g, out = unsqueeze(g, d), unsqueeze(out, d)
        if p == 1:
            return (mul(_sgn(x), g),)
        zero = const(xp.zeros((), dtype=x.dtype), x)
        norm_zero = out._data == 0
        if p == 2:  # (where the norm is 0, x is 0 too: x / 1 = 0)
            return (mul(g, div(x, add(out, const(norm_zero.astype(x.dtype), out)))),)
        if math.isinf(p):
            ax = xp.abs(x._data)
            mask = (ax == out._data) | xp.isnan(ax)
            count = mask.sum(axis=self.dims or None, keepdims=True).astype(x.dtype)
            return (mul(_sgn(x), mul(div(g, const(count, g)), const(mask.astype(x.dtype), g))),)
        a = _abs(x)
        if p < 1:
            x_zero = x._data == 0
            scaled = where(const(x_zero, x), zero, _pow(add(a, const(x_zero.astype(x.dtype), x)), p - 1))
            return (mul(mul(mul(_sgn(x), scaled), g), _pow(out, 1 - p)),)
        safe = add(out, const(norm_zero.astype(x.dtype), out))
        scale = where(const(norm_zero, out), zero, div(g, _pow(safe, p - 1)))
        scaled = mul(_sgn(x), _pow(a, p - 1)) if p < 2 else mul(x, _pow(a, p - 2))
        return (mul(scaled, scale),)


def _vector_norm(x: Tensor, p: float, dims: tuple, keepdim: bool) -> Tensor:
    """A real tensor's norm as one node, as torch's ``linalg_vector_norm``."""
    xp = x.device.xp
    d, axis = x._data, dims or None
    if math.isinf(p) and d.size == 0:
        if not dims:
            raise RuntimeError(f"linalg.vector_norm cannot compute the {p} norm on an empty tensor because the "
                               "operation does not have an identity")
        empty = [i for i in dims if x.shape[i] == 0]
        if empty:  # (torch's words, its missing space included)
            raise RuntimeError(f"linalg.vector_norm cannot compute the {p} norm on the dimension {empty[0]}because "
                               "this dimension is empty and the operation does not have an identity")
    if p == 2:
        data = xp.sqrt(xp.sum(d * d, axis=axis, keepdims=keepdim))
    elif p == 1:
        data = xp.sum(xp.abs(d), axis=axis, keepdims=keepdim)
    elif p == 0:
        data = xp.sum(d != 0, axis=axis, keepdims=keepdim).astype(x.dtype)
    elif math.isinf(p):
        data = (xp.max if p > 0 else xp.min)(xp.abs(d), axis=axis, keepdims=keepdim)
    else:
        data = xp.sum(xp.abs(d) ** p, axis=axis, keepdims=keepdim) ** (1.0 / p)
    out = _wrap(xp.asarray(data, dtype=x.dtype), x.device)
    if tls.grad_enabled and x._rg:
        node = LinalgVectorNormBackward0()
        node.p, node.dims, node.keepdim = p, dims or tuple(range(x.ndim)), keepdim
        record(node, (x,), out, (x, out))
    return out


@register
def norm(x: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False, dtype: Any = None, *,
         axis: Any = None, keepdims: Any = None) -> Tensor:
    """The vector ``p``-norm over ``dim`` (None: all elements), as ``torch.norm``: ``p`` is
    ``"fro"`` or 2, 1, ``inf``, ``-inf``, 0 (the count of non-zeros) or any other number.
    ``"nuc"`` is not supported. The gradient is torch's (LinalgVectorNormBackward0): 0 where
    the norm is 0, tied extremes of the inf-norms sharing it evenly."""
    check_tensor(x, "norm")
    dim, keepdim = _reduction_args("norm", dim, keepdim, axis, keepdims)
    if dtype is not None:
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
    if x.dtype.kind == "f":
        return _vector_norm(x, float(p), dims if dim is not None else (), keepdim)
    # complex: the composition below (its gradients at ties and zeros are not torch's yet)
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
    return squeeze(a, dims)
