"""The rest of torch's pointwise math: logarithms and exponentials (log1p, expm1, log2, log10,
exp2), reciprocals (rsqrt, reciprocal, square), hyperbolic and inverse trigonometric
functions, the step functions (floor, ceil, trunc, round, sign, frac) and the predicates
isnan / isinf / isfinite. See Note [Op definitions] in _core.py.

A smooth op here is one ``_make`` call: its forward on the array module and its backward
written once with ops (Note [First-order formulas]: none of them is on a hot path, so none
carries an array form), on its input ``x`` or its output ``y``; each gets a node class named
as torch's. The step functions' gradient is zero everywhere, as torch's (a NaN upstream stays
out of it: zeros, not ``g * 0``).
"""
from __future__ import annotations

import math
from typing import Any, Callable

from ..engine.tensor import Tensor, _wrap

import builtins
from collections import namedtuple

from ._core import (OUTPUT, Node, as_operand, binary_operands, binary_result, check_tensor, fit, normalize_dim,
                    normalize_dims, record, register, tls, unary_result)
from .device import to
from .index import along_dim_index, getitem, index_put_zeros
from .shape import reshape
from .elementwise import _Binary, _float_input, add, clamp, div, mul, neg, sqrt, sub, where
from .elementwise import pow as _pow

_LN2, _LN10 = math.log(2.0), math.log(10.0)


def _make(name: str, node_name: str, forward: Callable[[Any, Any], Any], grad: Callable[[Tensor, Tensor], Tensor],
          saves_output: bool, doc: str) -> Callable[[Tensor], Tensor]:
    """The op ``name`` and its node class ``node_name`` (torch's name) from one table row."""

    def backward(self: Node, g: Tensor) -> tuple:
        (saved,) = self.saved_tensors()
        return (grad(g, saved),)

    node_cls = type(node_name, (Node,), {"__slots__": (), "backward": backward, "__module__": __name__,
                                          "__doc__": f"{name}'s backward."})

    def op(x: Tensor) -> Tensor:
        data = _float_input(x, name)
        return unary_result(x, forward(x.device.xp, data), node_cls, OUTPUT if saves_output else x)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    globals()[node_name] = node_cls
    return register(op)


# Each: the op's name, torch's node, the forward on (xp, array), the backward on (g, saved)
# with ops, whether the output (not the input) is saved, the docstring.
log1p = _make("log1p", "Log1PBackward0", lambda xp, a: xp.log1p(a), lambda g, x: div(g, add(x, 1.0)), False,
              "``log(1 + x)``, accurate for small ``x``.")
expm1 = _make("expm1", "Expm1Backward0", lambda xp, a: xp.expm1(a), lambda g, y: mul(g, add(y, 1.0)), True,
              "``exp(x) - 1``, accurate for small ``x``.")
log2 = _make("log2", "Log2Backward0", lambda xp, a: xp.log2(a), lambda g, x: div(g, mul(x, _LN2)), False,
             "Base-2 logarithm.")
log10 = _make("log10", "Log10Backward0", lambda xp, a: xp.log10(a), lambda g, x: div(g, mul(x, _LN10)), False,
              "Base-10 logarithm.")
exp2 = _make("exp2", "Exp2Backward0", lambda xp, a: xp.exp2(a), lambda g, y: mul(g, mul(y, _LN2)), True,
             "``2 ** x``.")
rsqrt = _make("rsqrt", "RsqrtBackward0", lambda xp, a: 1.0 / xp.sqrt(a),
              lambda g, y: mul(g, mul(_pow(y, 3.0), -0.5)), True, "``1 / sqrt(x)``.")
reciprocal = _make("reciprocal", "ReciprocalBackward0", lambda xp, a: 1.0 / a, lambda g, y: neg(mul(g, mul(y, y))),
                   True, "``1 / x``.")
sinh = _make("sinh", "SinhBackward0", lambda xp, a: xp.sinh(a), lambda g, x: mul(g, cosh(x)), False,
             "Hyperbolic sine.")
cosh = _make("cosh", "CoshBackward0", lambda xp, a: xp.cosh(a), lambda g, x: mul(g, sinh(x)), False,
             "Hyperbolic cosine.")
asin = _make("asin", "AsinBackward0", lambda xp, a: xp.arcsin(a), lambda g, x: div(g, sqrt(sub(1.0, mul(x, x)))),
             False, "Inverse sine.")
acos = _make("acos", "AcosBackward0", lambda xp, a: xp.arccos(a),
             lambda g, x: neg(div(g, sqrt(sub(1.0, mul(x, x))))), False, "Inverse cosine.")
atan = _make("atan", "AtanBackward0", lambda xp, a: xp.arctan(a), lambda g, x: div(g, add(mul(x, x), 1.0)), False,
             "Inverse tangent.")
asinh = _make("asinh", "AsinhBackward0", lambda xp, a: xp.arcsinh(a),
              lambda g, x: div(g, sqrt(add(mul(x, x), 1.0))), False, "Inverse hyperbolic sine.")
acosh = _make("acosh", "AcoshBackward0", lambda xp, a: xp.arccosh(a),
              lambda g, x: div(g, sqrt(sub(mul(x, x), 1.0))), False, "Inverse hyperbolic cosine.")
atanh = _make("atanh", "AtanhBackward0", lambda xp, a: xp.arctanh(a), lambda g, x: div(g, sub(1.0, mul(x, x))),
              False, "Inverse hyperbolic tangent.")


@register
def square(x: Tensor) -> Tensor:
    """``x * x``: torch's ``pow(x, 2)`` (its node is PowBackward0)."""
    return _pow(x, 2.0)


# --- step functions: zero gradient ---------------------------------------------------------

def _step(name: str, node_name: str, forward: Callable[[Any, Any], Any], doc: str) -> Callable[..., Tensor]:
    def backward(self: Node, g: Tensor) -> tuple:
        return (_wrap(g.device.xp.zeros_like(g._data), g.device),)

    node_cls = type(node_name, (Node,), {"__slots__": (), "backward": backward, "__module__": __name__,
                                          "__doc__": f"{name}'s backward: zeros, as torch's."})

    def op(x: Tensor) -> Tensor:
        check_tensor(x, name)
        data = x._data
        out = data.copy() if data.dtype.kind in "iub" and name != "sign" else forward(x.device.xp, data)
        return unary_result(x, out, node_cls)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    globals()[node_name] = node_cls
    return register(op)


floor = _step("floor", "FloorBackward0", lambda xp, a: xp.floor(a), "The largest integer not above ``x``.")
ceil = _step("ceil", "CeilBackward0", lambda xp, a: xp.ceil(a), "The smallest integer not below ``x``.")
trunc = _step("trunc", "TruncBackward0", lambda xp, a: xp.trunc(a), "``x`` rounded toward zero.")
sign = _step("sign", "SignBackward0", lambda xp, a: xp.where(xp.isnan(a), 0, xp.sign(a)).astype(a.dtype, copy=False),
             "-1, 0 or 1 by the sign of ``x`` (0 for NaN, as torch's).")
_round0 = _step("round", "RoundBackward0", lambda xp, a: xp.round(a), "")


class RoundBackward1(Node):
    """round with ``decimals``: zeros, as torch's."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        return (_wrap(g.device.xp.zeros_like(g._data), g.device),)


@register
def round(x: Tensor, *, decimals: int = 0) -> Tensor:  # noqa: A001 - torch's name
    """``x`` rounded to ``decimals`` places, halves to even, as ``torch.round``."""
    if decimals == 0:
        return _round0(x)
    check_tensor(x, "round")
    data = x._data
    out = data.copy() if data.dtype.kind in "iub" else x.device.xp.round(data, decimals)
    return unary_result(x, out, RoundBackward1)


class FracBackward0(Node):
    """frac's backward: the gradient passes unchanged (``x - trunc(x)`` has slope 1)."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        return (g,)


@register
def frac(x: Tensor) -> Tensor:
    """``x - trunc(x)``: the fractional part, with ``x``'s sign."""
    data = _float_input(x, "frac")
    xp = x.device.xp
    return unary_result(x, data - xp.trunc(data), FracBackward0)


# --- predicates: boolean, no gradient --------------------------------------------------------

def _predicate(name: str, test: Callable[[Any, Any], Any], doc: str) -> Callable[[Tensor], Tensor]:
    def op(x: Tensor) -> Tensor:
        check_tensor(x, name)
        return _wrap(x.device.xp.asarray(test(x.device.xp, x._data)), x.device)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


isnan = _predicate("isnan", lambda xp, a: xp.isnan(a), "Where ``x`` is NaN (a bool tensor).")
isinf = _predicate("isinf", lambda xp, a: xp.isinf(a), "Where ``x`` is +-inf (a bool tensor).")
isfinite = _predicate("isfinite", lambda xp, a: xp.isfinite(a), "Where ``x`` is neither NaN nor +-inf (a bool tensor).")


# --- logical and bitwise: boolean or integer results, no gradient ---------------------------

def _logical(name: str, ufunc: str, doc: str) -> Callable[[Any, Any], Tensor]:
    def op(a: Any, b: Any) -> Tensor:
        a, b = binary_operands(a, b, name)
        xp = a.device.xp
        return _wrap(xp.asarray(getattr(xp, ufunc)(a._data, b._data)), a.device)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


logical_and = _logical("logical_and", "logical_and", "Where both are non-zero (a bool tensor).")
logical_or = _logical("logical_or", "logical_or", "Where either is non-zero (a bool tensor).")
logical_xor = _logical("logical_xor", "logical_xor", "Where exactly one is non-zero (a bool tensor).")


def logical_not(x: Tensor) -> Tensor:
    """Where ``x`` is zero (a bool tensor)."""
    check_tensor(x, "logical_not")
    return _wrap(x.device.xp.asarray(x.device.xp.logical_not(x._data)), x.device)


def _bitwise(name: str, ufunc: str, doc: str) -> Callable[[Any, Any], Tensor]:
    def op(a: Any, b: Any) -> Tensor:
        a, b = binary_operands(a, b, name)
        for t in (a, b):
            if t._data.dtype.kind not in "iub":
                raise NotImplementedError(f'"{name}_cpu" not implemented for '
                                          f"'{_TORCH_TYPE.get(t._data.dtype.name, t._data.dtype.name)}'")
        ad, bd = a._data, b._data
        data = getattr(a.device.xp, ufunc)(ad, bd)
        return _wrap(a.device.xp.asarray(data), a.device)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


_TORCH_TYPE = {"float16": "Half", "float32": "Float", "float64": "Double"}
bitwise_and = _bitwise("bitwise_and", "bitwise_and", "``a & b`` of integer or bool tensors (or numbers).")
bitwise_or = _bitwise("bitwise_or", "bitwise_or", "``a | b`` of integer or bool tensors (or numbers).")
bitwise_xor = _bitwise("bitwise_xor", "bitwise_xor", "``a ^ b`` of integer or bool tensors (or numbers).")
bitwise_left_shift = _bitwise("bitwise_left_shift", "left_shift", "``a << b`` of integer tensors.")
bitwise_right_shift = _bitwise("bitwise_right_shift", "right_shift", "``a >> b`` of integer tensors.")


def bitwise_not(x: Tensor) -> Tensor:
    """``~x``: logical not of a bool tensor, bitwise not of an integer one."""
    check_tensor(x, "bitwise_not")
    if x._data.dtype.kind not in "iub":
        raise NotImplementedError(f"\"bitwise_not_cpu\" not implemented for "
                                  f"'{_TORCH_TYPE.get(x._data.dtype.name, x._data.dtype.name)}'")
    return _wrap(x.device.xp.asarray(x.device.xp.invert(x._data)), x.device)


# --- integer division and remainder ----------------------------------------------------------

class RemainderBackward0(_Binary):
    """``a % b`` (floored, the divisor's sign, as Python's): ``a`` gets the gradient, ``b``
    ``-g * floor(a / b)``, as torch's."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        a, b = self.saved_tensors()
        ea, eb = self.next_edges
        ga = fit(g, self.a_shape, self.a_dtype) if ea[0] is not None else None
        gb = None
        if eb[0] is not None:
            # floor division as torch's (via fmod: inf and nan quotients are nan, where floor(a / b) is inf)
            quotient = _wrap(g.device.xp.floor_divide(a._data, b._data), g.device)
            gb = fit(neg(mul(g, quotient)), self.b_shape, self.b_dtype)
        return (ga, gb)


class RemainderBackward1(RemainderBackward0):
    """remainder of two tensors: torch's name for it."""

    __slots__ = ()


@register
def remainder(a: Any, b: Any) -> Tensor:
    """``a % b`` with the divisor's sign (Python's and torch's rule), elementwise."""
    both = isinstance(a, Tensor) and isinstance(b, Tensor)
    a, b = binary_operands(a, b, "remainder")
    data = a.device.xp.remainder(a._data, b._data)
    return binary_result(a, b, data, RemainderBackward1 if both else RemainderBackward0, a, b)


class NotImplemented_(Node):
    """floor_divide's node: its derivative is not implemented, as in torch, so a backward
    through it raises instead of passing a silently wrong (zero) gradient."""

    __slots__ = ()

    def name(self) -> str:
        return "torch::autograd::NotImplemented"

    def backward(self, g: Tensor) -> tuple:
        raise RuntimeError("the derivative for 'floor_divide' is not implemented.")


@register
def floor_divide(a: Any, b: Any) -> Tensor:
    """``a // b`` rounded toward minus infinity, elementwise (no derivative, as torch's)."""
    a, b = binary_operands(a, b, "floor_divide")
    return binary_result(a, b, a.device.xp.floor_divide(a._data, b._data), NotImplemented_)


# --- scans and boolean reductions ------------------------------------------------------------

class CumsumBackward0(Node):
    """cumsum's backward: the reversed cumulative sum of the gradient along the dim."""

    __slots__ = ("dim", "in_dtype")

    def backward(self, g: Tensor) -> tuple:
        flip = (slice(None),) * self.dim + (slice(None, None, -1),)
        out = getitem(cumsum(getitem(g, flip), self.dim), flip)
        return (out if out.dtype == self.in_dtype else to(out, dtype=self.in_dtype),)


@register
def cumsum(x: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """The cumulative sum along ``dim``, as ``torch.cumsum``: integer and bool inputs sum in
    int64; ``dtype`` casts first."""
    check_tensor(x, "cumsum")
    d = normalize_dim(dim, x.ndim, "cumsum")
    src = x if dtype is None else to(x, dtype=dtype)
    data = src._data
    if data.dtype.kind in "iub":
        data = data.astype("int64")
    out = unary_result(src, x.device.xp.asarray(data.cumsum(axis=d) if data.ndim else data.copy()), CumsumBackward0)
    if out.grad_fn is not None:
        out.grad_fn.dim, out.grad_fn.in_dtype = d, src.dtype
    return out


def _bool_reduce(name: str, reducer: str, doc: str) -> Callable[..., Tensor]:
    def op(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
        check_tensor(x, name)
        axis = None if dim is None else normalize_dims(dim, x.ndim, name)
        data = getattr(x.device.xp, reducer)(x._data, axis=axis, keepdims=keepdim)
        return _wrap(x.device.xp.asarray(data), x.device)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


any = _bool_reduce("any", "any", "Whether any element (over ``dim``) is non-zero: a bool tensor.")  # noqa: A001
all = _bool_reduce("all", "all", "Whether every element (over ``dim``) is non-zero: a bool tensor.")  # noqa: A001


def count_nonzero(x: Tensor, dim: Any = None) -> Tensor:
    """The number of non-zero elements (over ``dim``), an int64 tensor, as ``torch.count_nonzero``."""
    check_tensor(x, "count_nonzero")
    axis = None if dim is None else normalize_dims(dim, x.ndim, "count_nonzero")
    xp = x.device.xp
    return _wrap(xp.asarray(xp.count_nonzero(x._data, axis=axis)).astype("int64"), x.device)


def isclose(a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> Tensor:
    """Where ``|a - b| <= atol + rtol * |b|`` (a bool tensor), as ``torch.isclose``."""
    a, b = binary_operands(a, b, "isclose")
    xp = a.device.xp
    return _wrap(xp.asarray(xp.isclose(a._data, b._data, rtol=rtol, atol=atol, equal_nan=equal_nan)), a.device)


def allclose(a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
    """Whether every element of ``a`` and ``b`` is close (``isclose``), as ``torch.allclose``."""
    return bool(isclose(a, b, rtol, atol, equal_nan)._data.all())


def equal(a: Tensor, b: Tensor) -> bool:
    """Whether ``a`` and ``b`` have the same shape and elements, as ``torch.equal``."""
    check_tensor(a, "equal")
    check_tensor(b, "equal")
    return tuple(a.shape) == tuple(b.shape) and bool((a._data == b._data).all())


# --- binary and ternary pointwise ops with gradients ------------------------------------------

class Atan2Backward0(_Binary):
    """atan2's backward: ``a`` gets ``g * b / (a^2 + b^2)``, ``b`` gets ``-g * a / (a^2 + b^2)``;
    zero at the origin, as torch's (where the quotient would be 0/0)."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        a, b = self.saved_tensors()
        ea, eb = self.next_edges
        square = add(mul(a, a), mul(b, b))
        inv = where(square == 0, 0.0, div(1.0, square))
        return (fit(mul(g, mul(b, inv)), self.a_shape, self.a_dtype) if ea[0] is not None else None,
                fit(neg(mul(g, mul(a, inv))), self.b_shape, self.b_dtype) if eb[0] is not None else None)


@register
def atan2(a: Any, b: Any) -> Tensor:
    """The angle of the point ``(b, a)``, elementwise, as ``torch.atan2``."""
    a, b = binary_operands(a, b, "atan2")
    xp = a.device.xp
    ad, bd = a._data, b._data
    if ad.dtype.kind not in "fc" and bd.dtype.kind not in "fc":
        ad, bd = ad.astype("float32"), bd.astype("float32")
    return binary_result(a, b, xp.arctan2(ad, bd), Atan2Backward0, a, b)


class HypotBackward0(_Binary):
    """hypot's backward from its inputs and output ``r``: ``g * a / r`` and ``g * b / r``."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        a, b = self.saved_tensors()
        ea, eb = self.next_edges
        r = hypot(a, b)
        return (fit(div(mul(g, a), r), self.a_shape, self.a_dtype) if ea[0] is not None else None,
                fit(div(mul(g, b), r), self.b_shape, self.b_dtype) if eb[0] is not None else None)


@register
def hypot(a: Any, b: Any) -> Tensor:
    """``sqrt(a^2 + b^2)`` without overflow, elementwise, as ``torch.hypot``."""
    a, b = binary_operands(a, b, "hypot")
    return binary_result(a, b, a.device.xp.hypot(a._data, b._data), HypotBackward0, a, b)


class FmodBackward0(_Binary):
    """fmod by a number: the gradient passes to ``a``."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        a, b = self.saved_tensors()
        ea, eb = self.next_edges
        ga = fit(g, self.a_shape, self.a_dtype) if ea[0] is not None else None
        gb = None
        if eb[0] is not None:  # ``-g * trunc(a / b)``, as torch's
            gb = fit(neg(mul(g, trunc(div(a, b)))), self.b_shape, self.b_dtype)
        return (ga, gb)


class FmodBackward1(FmodBackward0):
    """fmod of two tensors: torch's name for it."""

    __slots__ = ()


@register
def fmod(a: Any, b: Any) -> Tensor:
    """``a - trunc(a / b) * b``: the remainder with ``a``'s sign (C's fmod), as ``torch.fmod``."""
    both = isinstance(a, Tensor) and isinstance(b, Tensor)
    a, b = binary_operands(a, b, "fmod")
    return binary_result(a, b, a.device.xp.fmod(a._data, b._data), FmodBackward1 if both else FmodBackward0, a, b)


class ClampMinBackward0(Node):
    """clamp_min by a number: the gradient where ``x >= min`` (zero where clamped, or NaN)."""

    __slots__ = ("bound",)

    def backward(self, g: Tensor) -> tuple:
        (x,) = self.saved_tensors()
        keep = x._data >= self.bound if type(self) is ClampMinBackward0 else x._data <= self.bound
        return (mul(g, _wrap(x.device.xp.asarray(keep).astype(g.dtype), x.device)),)


class ClampMaxBackward0(ClampMinBackward0):
    """clamp_max by a number: the gradient where ``x <= max``."""

    __slots__ = ()


def _clamp_bound(name: str, x: Tensor, bound: Any, node_cls: type, upper: bool) -> Tensor:
    if isinstance(bound, Tensor):  # a tensor bound: clamp's node (ClampBackward1, not torch's ClampMin/MaxBackward1)
        return clamp(x, max=bound) if upper else clamp(x, min=bound)
    data = _float_input(x, name) if x._data.dtype.kind in "fc" else x._data
    xp = x.device.xp
    out = unary_result(x, (xp.minimum if upper else xp.maximum)(data, bound), node_cls, x)
    if out.grad_fn is not None:
        out.grad_fn.bound = bound
    return out


@register
def clamp_min(x: Tensor, min: Any) -> Tensor:  # noqa: A002 - torch's name
    """``max(x, min)`` elementwise (NaN stays NaN), as ``torch.clamp_min``: ClampMinBackward0."""
    check_tensor(x, "clamp_min")
    return _clamp_bound("clamp_min", x, min, ClampMinBackward0, False)


@register
def clamp_max(x: Tensor, max: Any) -> Tensor:  # noqa: A002 - torch's name
    """``min(x, max)`` elementwise (NaN stays NaN), as ``torch.clamp_max``: ClampMaxBackward0."""
    check_tensor(x, "clamp_max")
    return _clamp_bound("clamp_max", x, max, ClampMaxBackward0, True)


class _Ternary(Node):
    """A node of three broadcast inputs: their shapes and dtypes for ``fit``."""

    __slots__ = ("shapes", "dtypes")

    def _fit(self, k: int, g: Any) -> Any:
        return None if g is None or self.next_edges[k][0] is None else fit(g, self.shapes[k], self.dtypes[k])


def _ternary(node: _Ternary, ts: tuple, out_data: Any, saved: tuple) -> Tensor:
    first = ts[0]
    out = _wrap(first.device.xp.asarray(out_data), first.device)
    if tls.grad_enabled and builtins.any(t._rg for t in ts):
        node.shapes = tuple(t.shape for t in ts)
        node.dtypes = tuple(t.dtype for t in ts)
        record(node, ts, out, saved)
    return out


def _operands3(name: str, a: Any, b: Any, c: Any) -> tuple:
    like = next(t for t in (a, b, c) if isinstance(t, Tensor))
    ts = [t if isinstance(t, Tensor) else as_operand(t, like, name) for t in (a, b, c)]
    for t in ts[1:]:
        binary_operands(ts[0], t, name)  # devices, broadcasting
    binary_operands(ts[1], ts[2], name)
    return tuple(ts)


class AddcmulBackward0(_Ternary):
    """addcmul's backward: ``input`` gets ``g``, the factors ``g * value * the other``."""

    __slots__ = ("value",)

    def backward(self, g: Tensor) -> tuple:
        _, t1, t2 = self.saved_tensors()
        return (self._fit(0, g), self._fit(1, mul(g, mul(t2, self.value))), self._fit(2, mul(g, mul(t1, self.value))))


@register
def addcmul(input: Any, tensor1: Any, tensor2: Any, *, value: float = 1.0) -> Tensor:  # noqa: A002
    """``input + value * tensor1 * tensor2``, as ``torch.addcmul``."""
    x, t1, t2 = _operands3("addcmul", input, tensor1, tensor2)
    node = AddcmulBackward0()
    node.value = value
    return _ternary(node, (x, t1, t2), x._data + value * (t1._data * t2._data), (None, t1, t2))


class AddcdivBackward0(_Ternary):
    """addcdiv's backward: ``input`` gets ``g``, ``tensor1`` ``g * value / tensor2``, ``tensor2``
    ``-g * value * tensor1 / tensor2^2``."""

    __slots__ = ("value",)

    def backward(self, g: Tensor) -> tuple:
        _, t1, t2 = self.saved_tensors()
        return (self._fit(0, g), self._fit(1, div(mul(g, self.value), t2)),
                self._fit(2, neg(div(mul(mul(g, self.value), t1), mul(t2, t2)))))


@register
def addcdiv(input: Any, tensor1: Any, tensor2: Any, *, value: float = 1.0) -> Tensor:  # noqa: A002
    """``input + value * tensor1 / tensor2``, as ``torch.addcdiv``."""
    x, t1, t2 = _operands3("addcdiv", input, tensor1, tensor2)
    node = AddcdivBackward0()
    node.value = value
    return _ternary(node, (x, t1, t2), x._data + value * (t1._data / t2._data), (None, t1, t2))


class LerpBackward0(_Ternary):
    """lerp by a number: ``start`` gets ``g * (1 - weight)``, ``end`` ``g * weight``."""

    __slots__ = ("weight",)

    def backward(self, g: Tensor) -> tuple:
        return (self._fit(0, mul(g, 1.0 - self.weight)), self._fit(1, mul(g, self.weight)), None)


class LerpBackward1(_Ternary):
    """lerp by a tensor: ``weight`` also gets ``g * (end - start)``."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        start, end, w = self.saved_tensors()
        return (self._fit(0, mul(g, sub(1.0, w))), self._fit(1, mul(g, w)), self._fit(2, mul(g, sub(end, start))))


@register
def lerp(input: Any, end: Any, weight: Any) -> Tensor:  # noqa: A002
    """``input + weight * (end - input)``, as ``torch.lerp`` (``weight`` a number or a tensor)."""
    if isinstance(weight, Tensor):
        s, e, w = _operands3("lerp", input, end, weight)
        return _ternary(LerpBackward1(), (s, e, w), s._data + w._data * (e._data - s._data), (s, e, w))
    s, e = binary_operands(input, end, "lerp")
    node = LerpBackward0()
    node.weight = float(weight)
    out = _wrap(s.device.xp.asarray(s._data + node.weight * (e._data - s._data)), s.device)
    if tls.grad_enabled and (s._rg or e._rg):
        node.shapes, node.dtypes = (s.shape, e.shape, None), (s.dtype, e.dtype, None)
        record(node, (s, e, None), out, ())
    return out


# --- amax / amin ----------------------------------------------------------------------------

class AmaxBackward0(Node):
    """amax's backward: the gradient shared evenly among the elements equal to the maximum
    (``mask / count``, constants), as torch's."""

    __slots__ = ("dims", "keepdim")

    def backward(self, g: Tensor) -> tuple:
        x, out = self.saved_tensors()
        kept_shape = tuple(1 if i in self.dims else n for i, n in enumerate(x.shape))
        mask = (x._data == out._data.reshape(kept_shape)).astype(g.dtype)
        share = mask / mask.sum(axis=self.dims, keepdims=True)
        return (mul(reshape(g, kept_shape), _wrap(share, x.device)),)


class AminBackward0(AmaxBackward0):
    __slots__ = ()


def _amax_amin(name: str, node_cls: type) -> Callable[..., Tensor]:
    def op(x: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
        check_tensor(x, name)
        dims = normalize_dims(None if dim == () or dim == [] else dim, x.ndim, name)
        if x.numel() == 0:
            raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
        xp = x.device.xp
        out = _wrap(xp.asarray(getattr(xp, name)(x._data, axis=dims, keepdims=keepdim)), x.device)
        if tls.grad_enabled and x._rg:
            node = node_cls()
            node.dims, node.keepdim = dims, keepdim
            record(node, (x,), out, (x, out))
        return out

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (f"The {'largest' if name == 'amax' else 'smallest'} value over ``dim`` (all dims by default), "
                  f"as ``torch.{name}``: the gradient shared evenly among ties.")
    return register(op)


amax = _amax_amin("amax", AmaxBackward0)
amin = _amax_amin("amin", AminBackward0)


# --- sort -----------------------------------------------------------------------------------

class SortBackward0(Node):
    """sort's backward: each gradient back to the position its value came from."""

    __slots__ = ("in_shape", "index")

    def backward(self, g: Tensor) -> tuple:
        return (index_put_zeros(g, self.in_shape, self.index, False, unique=True),)


class SortBackward1(SortBackward0):
    """sort called with ``stable=``: torch's name for that overload's node."""

    __slots__ = ()


def _stable_order(xp: Any, data: Any, dim: int, descending: bool) -> Any:
    """torch's stable order along ``dim``: ties keep their order, NaN counts as the largest.
    Descending is two stable passes (by the negated values, then NaN first): a lexsort."""
    if not descending:
        return xp.argsort(data, axis=dim, kind="stable")
    first = xp.argsort(-data, axis=dim, kind="stable")
    nan_last = ~xp.isnan(xp.take_along_axis(data, first, axis=dim)) if data.dtype.kind == "f" else None
    if nan_last is None:
        return first
    second = xp.argsort(nan_last, axis=dim, kind="stable")
    return xp.take_along_axis(first, second, axis=dim)


SortResult = namedtuple("SortResult", ["values", "indices"])


@register
def sort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool | None = None) -> Any:
    """``(values, indices)`` of ``x`` sorted along ``dim``, as ``torch.sort``: stable whatever
    ``stable`` says (as torch's cpu sort), NaN the largest; the gradient goes back through the
    indices (SortBackward0; SortBackward1 when ``stable`` is given, as torch's overloads)."""
    check_tensor(x, "sort")
    xp = x.device.xp
    if x.ndim == 0:
        return SortResult(unary_result(x, x._data.copy(), _NoOrder),
                          _wrap(xp.zeros((), dtype="int64"), x.device))
    d = normalize_dim(dim, x.ndim, "sort")
    order = _stable_order(xp, x._data, d, descending)
    index = along_dim_index(order, d, xp)
    values = _wrap(xp.asarray(x._data[index]), x.device)
    if tls.grad_enabled and x._rg:
        node = SortBackward0() if stable is None else SortBackward1()
        node.in_shape, node.index = x.shape, index
        record(node, (x,), values)
    return SortResult(values, _wrap(order.astype("int64", copy=False), x.device))


class _NoOrder(Node):
    """sort of a 0-d tensor: the value itself."""

    __slots__ = ()

    def name(self) -> str:
        return "SortBackward0"

    def backward(self, g: Tensor) -> tuple:
        return (g,)


def argsort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    """The indices that sort ``x`` along ``dim``, as ``torch.argsort`` (stable, NaN the largest)."""
    check_tensor(x, "argsort")
    if x.ndim == 0:
        return _wrap(x.device.xp.zeros((), dtype="int64"), x.device)
    d = normalize_dim(dim, x.ndim, "argsort")
    return _wrap(_stable_order(x.device.xp, x._data, d, descending).astype("int64", copy=False), x.device)
