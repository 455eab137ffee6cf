"""Elementwise ops: arithmetic, unary math, maximum/minimum, where, clamp.

Binary ops broadcast like numpy and promote like torch (:func:`_core.result_dtype`); their
gradients are summed back to each operand's shape and cast to its dtype by ``fit``.
See Note [Op definitions] in _core.py.
"""
from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy

from ..engine.tensor import Tensor, _wrap
from ..engine.creation import tensor

from ._core import (ARRAYS, BOOL, OPS, OUTPUT, Node, as_operand, binary_operands, binary_result, cast, check_tensor,
                    const, device_error, fit, promoted, record, record_binary, record_unary, register,
                    result_dtype, sign_array, tls, unary_result)
from .index import nonzero  # where(condition) alone


class _Binary(Node):
    """Base for binary nodes: remembers the operands' shapes and dtypes for ``fit``."""

    __slots__ = ("a_shape", "a_dtype", "b_shape", "b_dtype")

    def _meta(self, a: Tensor, b: Tensor) -> "_Binary":
        ad, bd = a._data, b._data  # the arrays directly: Tensor.shape/.dtype are Python properties
        self.a_shape, self.a_dtype, self.b_shape, self.b_dtype = ad.shape, ad.dtype, bd.shape, bd.dtype
        return self


def _binary_out(a: Tensor, b: Tensor, data: Any) -> Tensor:
    """Wrap (not record) a binary op's result, in torch's dtype when the operands' dtypes differ (numpy
    scalars from 0-d operands become arrays in ``_wrap``)."""
    ad, bd = a._data.dtype, b._data.dtype
    if ad is not bd and ad != bd:  # identity first: numpy's builtin dtypes are shared instances
        data = promoted(data, a, b)
    return _wrap(data, a.device)


class AddBackward0(_Binary):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        ea, eb = self.next_edges
        return (fit(g, self.a_shape, self.a_dtype) if ea[0] is not None else None,
                fit(g, self.b_shape, self.b_dtype) if eb[0] is not None else None)


@register
def add(a: Any, b: Any) -> Tensor:
    """``a + b`` with numpy broadcasting; either operand may be a number."""
    a, b = binary_operands(a, b, "add")
    return binary_result(a, b, a._data + b._data, AddBackward0)


class SubBackward0(_Binary):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        ea, eb = self.next_edges
        return (fit(g, self.a_shape, self.a_dtype) if ea[0] is not None else None,
                fit(neg(g), self.b_shape, self.b_dtype) if eb[0] is not None else None)


class RsubBackward1(SubBackward0):
    """``number - tensor`` (torch's name)."""

    __slots__ = ()


@register
def sub(a: Any, b: Any) -> Tensor:
    """``a - b`` with numpy broadcasting. A bool operand (a bool tensor, or ``True``/``False``)
    is refused with a RuntimeError, as in torch."""
    node_cls = SubBackward0 if isinstance(a, Tensor) else RsubBackward1
    ta, tb = binary_operands(a, b, "sub")
    ad, bd = ta._data, tb._data
    # torch refuses a bool operand: two identity tests and two type tests on the usual path
    # (a numpy bool or an array of bools became a bool tensor; only a Python bool took the other's dtype)
    if ad.dtype is BOOL or bd.dtype is BOOL or type(a) is bool or type(b) is bool:
        check_sub_operands(a, b, ta, tb, "sub")
    return binary_result(ta, tb, ad - bd, node_cls)


_BOOLS = (bool, numpy.bool_)  # the types of bool numbers (bool cannot be subclassed)


def check_sub_operands(a: Any, b: Any, ta: Tensor, tb: Tensor, name: str) -> None:
    """Raise torch's RuntimeError when an operand of a subtraction is bool (``sub``, ``sub_``):
    a bool tensor, or a bool number. ``a``/``b`` as the user gave them, ``ta``/``tb`` as tensors."""
    bool_a = ta._data.dtype.kind == "b" or type(a) in _BOOLS
    bool_b = tb._data.dtype.kind == "b" or type(b) in _BOOLS
    if not (bool_a or bool_b):
        return
    what = [f"{t.dtype}" if t._data.dtype.kind == "b" or type(x) not in _BOOLS else f"bool ({x!r})"
            for x, t in ((a, ta), (b, tb))]
    got = f"got operands of dtype {what[0]} and {what[1]}"
    if bool_a and bool_b:
        raise RuntimeError(f"{name}: Subtraction, the `-` operator, with two bool tensors is not supported ({got}). "
                           "Use the `^` or `logical_xor()` operator instead.")
    raise RuntimeError(f"{name}: Subtraction, the `-` operator, with a bool tensor is not supported ({got}). "
                       "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.")


class MulBackward0(_Binary):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        ea, eb = self.next_edges
        # See Note [First-order formulas] (arrays: 2.60 -> 1.82 us); arrays only where no dtype
        # promotion is to be mirrored (mul casts numpy's product to torch's dtype before fit sums)
        dev = g.device
        if tls.grad_enabled or not g._data.dtype == self.a_dtype == self.b_dtype:
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        a, b = F.saved(self)
        return (F.fit(F.mul(g, b), self.a_shape, self.a_dtype, dev) if ea[0] is not None else None,
                F.fit(F.mul(g, a), self.b_shape, self.b_dtype, dev) if eb[0] is not None else None)


@register
def mul(a: Any, b: Any) -> Tensor:
    """``a * b`` with numpy broadcasting."""
    a, b = binary_operands(a, b, "mul")
    # Save only what a needed gradient uses: b for a's gradient, a for b's.
    return binary_result(a, b, a._data * b._data, MulBackward0, a if b._rg else None, b if a._rg else None)


class DivBackward0(_Binary):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        ea, eb = self.next_edges
        # See Note [First-order formulas] (arrays: 5.78 -> 2.52 us); arrays only where no dtype
        # promotion is to be mirrored (div and mul cast their results to torch's dtype)
        dev = g.device
        if tls.grad_enabled or not g._data.dtype == self.a_dtype == self.b_dtype:
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        a, b = F.saved(self)
        return (F.fit(F.div(g, b), self.a_shape, self.a_dtype, dev) if ea[0] is not None else None,
                F.fit(F.div_grad_b(g, a, b), self.b_shape, self.b_dtype, dev) if eb[0] is not None else None)


def div_grad_b(g: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``-(g * a / b**2)``: div's gradient for its divisor, with ops (the formula tables'
    ``div_grad_b``, a kernel on a GPU)."""
    return neg(div(mul(g, a), mul(b, b)))


@register
def div(a: Any, b: Any) -> Tensor:
    """``a / b`` (true division: integer operands give float32, like torch)."""
    a, b = binary_operands(a, b, "div")
    rdt = result_dtype(a, b)
    if rdt.kind not in "fc":
        rdt = a.device.xp.dtype("float32")
    out = _wrap(cast(a.device.xp.asarray(a._data / b._data), rdt), a.device)
    if tls.grad_enabled and (a._rg or b._rg):
        record_binary(DivBackward0(), a, b, out, a if b._rg else None, b)
    return out


class NegBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        return (neg(g),)


@register
def neg(x: Tensor) -> Tensor:
    """``-x``. Bool tensors are refused (RuntimeError), as in torch: use ``~x`` to invert a mask."""
    check_tensor(x, "neg")
    try:
        data = -x._data
    except TypeError:  # numpy refuses -bool (TypeError): torch raises RuntimeError. No test on the usual path
        if x._data.dtype.kind == "b":
            raise RuntimeError("neg: Negation, the `-` operator, on a bool tensor is not supported (got dtype "
                               "bool). If you are trying to invert a mask, use the `~` or `logical_not()` operator "
                               "instead.") from None
        raise
    return unary_result(x, data, NegBackward0)


class PowBackward0(Node):
    """Tensor base, number exponent."""

    __slots__ = ("exponent",)

    def backward(self, g: Tensor) -> tuple:
        e = self.exponent
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py (arrays, x ** 2: 4.63 -> 2.04 us)
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        (a,) = F.saved(self)
        if e == 0:
            return (F.wrap(F.mul(g, F.number(0.0, g)), dev),)
        return (F.wrap(F.mul(F.mul(g, F.number(e, g)), F.pow(a, e - 1)), dev),)


class PowBackward1(_Binary):
    """Tensor base, tensor exponent."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        a, b, out = self.saved_tensors()
        ea, eb = self.next_edges
        ga = gb = None
        if ea[0] is not None:
            # d(a**b)/da = b * a**(b-1), taken as 0 where b == 0 (torch's masked_fill: 0 * 0**-1
            # would be nan at a == 0)
            ga = mul(mul(g, b), pow(a, sub(b, 1)))
            ga = fit(where(const(b._data == 0, b), const(ga.device.xp.zeros((), ga.dtype), ga), ga),
                     self.a_shape, self.a_dtype)
        if eb[0] is not None:
            # d(a**b)/db = a**b * log(a), taken as 0 where a == 0 and b >= 0 (torch's rule, the
            # limit there); log is computed at 1 instead of 0 at those places, so no 0 * -inf
            # appears. Where a == 0 and b < 0 it is a**b * log(0) = -inf, as in torch.
            at0 = (a._data == 0) & (b._data >= 0)
            la = log(add(a, const(at0.astype(a.dtype), a)))
            gb = fit(mul(mul(g, out), la), self.b_shape, self.b_dtype)
        return (ga, gb)


class PowBackward2(PowBackward1):
    """Number base, tensor exponent (torch's name; the number became a constant tensor)."""

    __slots__ = ()


@register
def pow(a: Any, b: Any) -> Tensor:  # noqa: A001 - torch's name
    """``a ** b``; either may be a number."""
    if (isinstance(a, Tensor) and isinstance(b, (int, float, numpy.integer, numpy.floating))
            and not isinstance(b, (bool, numpy.bool_))):
        # A number exponent keeps the base's dtype, as in torch (an integer base with a float
        # exponent gives the default float32, a bool base with an int one int64): a numpy
        # scalar would promote under numpy's rules, so it is used as the Python number it is.
        b = float(b) if isinstance(b, (float, numpy.floating)) else int(b)
        check_tensor(a, "pow")  # (a stale view is brought up to date here)
        ad = a._data
        if isinstance(b, float) and ad.dtype.kind not in "fc":
            ad = ad.astype("float32")
        elif ad.dtype.kind == "b":
            ad = ad.astype("int64")
        out = _wrap(a.device.xp.asarray(ad ** b), a.device)
        if tls.grad_enabled and a._rg:
            node = PowBackward0()
            node.exponent = b
            record_unary(node, a, out, a)
        return out
    node_cls = PowBackward1 if isinstance(a, Tensor) else PowBackward2
    a, b = binary_operands(a, b, "pow")
    out = _binary_out(a, b, a._data ** b._data)
    if tls.grad_enabled and (a._rg or b._rg):
        record(node_cls()._meta(a, b), (a, b), out, (a, b, out if b._rg else None))
    return out


# --- unary math ----------------------------------------------------------------------

def _float_input(x: Tensor, name: str) -> Any:
    """``x._data``, promoted to float32 when it is an integer array (torch's rule for exp, log ...).

    The ops inline its common case, a floating Tensor that is no view to check, as
    ``x._data if type(x) is Tensor and x._base is None and x._data.dtype.kind == "f" else
    _float_input(x, name)`` (one call less per op: chain forward 15,269 -> 15,067 instructions per op)."""
    if type(x) is not Tensor or x._base is not None:  # not a Tensor, or a view to check (Note [Stale views] in views.py)
        check_tensor(x, name)
    d = x._data
    return d if d.dtype.kind in "fc" else d.astype("float32")


class ExpBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py (arrays: 1.50 -> 0.97 us)
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        (y,) = F.saved(self)
        return (F.wrap(F.mul(g, y), dev),)


@register
def exp(x: Tensor) -> Tensor:
    """``e ** x``."""
    data = x._data if type(x) is Tensor and x._base is None and x._data.dtype.kind == "f" else _float_input(x, "exp")
    return unary_result(x, x.device.xp.exp(data), ExpBackward0, OUTPUT)


class LogBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py (arrays: 1.46 -> 0.96 us)
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        (x,) = F.saved(self)
        return (F.wrap(F.div(g, x), dev),)


@register
def log(x: Tensor) -> Tensor:
    """Natural logarithm (``-inf`` at 0, ``nan`` below, like torch)."""
    data = x._data if type(x) is Tensor and x._base is None and x._data.dtype.kind == "f" else _float_input(x, "log")
    return unary_result(x, x.device.xp.log(data), LogBackward0, x)


class SqrtBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        (out,) = self.saved_tensors()
        return (div(g, mul(out, 2)),)


@register
def sqrt(x: Tensor) -> Tensor:
    """Square root."""
    data = x._data if type(x) is Tensor and x._base is None and x._data.dtype.kind == "f" else _float_input(x, "sqrt")
    return unary_result(x, x.device.xp.sqrt(data), SqrtBackward0, OUTPUT)


class AbsBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py (arrays: 2.33 -> 1.19 us)
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        (x,) = F.saved(self)
        # g * sgn(x) (0 at 0), as torch: on OPS sgn's node links the gradient to x (See Note
        # [Gradients linked to the output] in activation.py).
        return (F.wrap(F.mul(g, F.sgn(x)), dev),)


class SgnBackward0(Node):
    """sign(x) is a step function: its derivative is zero (torch's for a real x)."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        return (_wrap(g.device.xp.zeros(g._data.shape, g._data.dtype), g.device),)


def _sgn(x: Tensor) -> Tensor:
    """``sgn(x)`` (-1, 0 or 1 in x's dtype, 0 at NaN) with torch's node, for abs's backward."""
    return unary_result(x, sign_array(x._data, x.device.xp), SgnBackward0)


@register
def abs(x: Tensor) -> Tensor:  # noqa: A001 - torch's name
    """``|x|``; the gradient at 0 is 0, as in torch. Bool tensors are refused (NotImplementedError), as in torch."""
    check_tensor(x, "abs")
    if x._data.dtype is BOOL:
        raise NotImplementedError("abs: not implemented for dtype bool (torch: \"abs_cpu\" not implemented for "
                                  "'Bool'); a bool tensor is its own absolute value, or convert it first, e.g. "
                                  "x.to(engine.int64)")
    return unary_result(x, x.device.xp.abs(x._data), AbsBackward0, x)


class SinBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        (x,) = self.saved_tensors()
        return (mul(g, cos(x)),)


@register
def sin(x: Tensor) -> Tensor:
    """Sine."""
    data = x._data if type(x) is Tensor and x._base is None and x._data.dtype.kind == "f" else _float_input(x, "sin")
    return unary_result(x, x.device.xp.sin(data), SinBackward0, x)


class CosBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        (x,) = self.saved_tensors()
        return (neg(mul(g, sin(x))),)


@register
def cos(x: Tensor) -> Tensor:
    """Cosine."""
    data = x._data if type(x) is Tensor and x._base is None and x._data.dtype.kind == "f" else _float_input(x, "cos")
    return unary_result(x, x.device.xp.cos(data), CosBackward0, x)


class TanhBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        dev = g.device
        if tls.grad_enabled:
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        (y,) = F.saved(self)
        return (F.wrap(F.tanh_grad(g, y), dev),)  # tanh_backward on OPS; Note [Fused kernels] in devices/_fused.py


class TanhBackwardBackward0(Node):
    """Backward of the fused ``g * (1 - y**2)``: d/dg = 1 - y**2, d/dy = -2 * y * g."""

    __slots__ = ()

    def backward(self, gg: Tensor) -> tuple:
        g, y = self.saved_tensors()
        eg, ey = self.next_edges
        return (mul(gg, sub(1, mul(y, y))) if eg[0] is not None else None,
                mul(mul(gg, g), mul(y, -2.0)) if ey[0] is not None else None)


def tanh_backward(g: Tensor, y: Tensor) -> Tensor:
    """``g * (1 - y**2)`` in one expression: tanh's backward, fused like torch's
    ``tanh_backward`` (one node instead of three; measured -2 us per tanh node) and itself
    differentiable for double backward."""
    dev = g.device
    out = _wrap(dev.kernels.tanh_grad(g._data, y._data), dev)
    if tls.grad_enabled and (g._rg or y._rg):
        record(TanhBackwardBackward0(), (g, y), out, (g, y))
    return out


@register
def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent."""
    data = x._data if type(x) is Tensor and x._base is None and x._data.dtype.kind == "f" else _float_input(x, "tanh")
    return unary_result(x, x.device.xp.tanh(data), TanhBackward0, OUTPUT)


# --- maximum, minimum, where, clamp -------------------------------------------------------

class MaximumBackward0(_Binary):
    """Also minimum's node (``MinimumBackward0`` below). Ties split the gradient equally."""

    __slots__ = ()
    _loses = ("less", "greater")  # a loses where a < b, b where a > b (minimum: the other way)

    def backward(self, g: Tensor) -> tuple:
        a, b = self.saved_tensors()
        xp = a.device.xp
        # torch's formula: g, halved on ties, zeroed where the operand loses (a constant share).
        # Where either is NaN neither loses: both get all of g, as in torch.
        half = 0.5 * (a._data == b._data).astype(g.dtype)
        lose_a, lose_b = (getattr(xp, f)(a._data, b._data).astype(g.dtype) for f in self._loses)
        ea, eb = self.next_edges
        return (fit(mul(g, const(1 - lose_a - half, g)), self.a_shape, self.a_dtype) if ea[0] is not None else None,
                fit(mul(g, const(1 - lose_b - half, g)), self.b_shape, self.b_dtype) if eb[0] is not None else None)


class MinimumBackward0(MaximumBackward0):
    __slots__ = ()
    _loses = ("greater", "less")


def _extremum(a: Any, b: Any, name: str, node_cls: type) -> Tensor:
    a, b = binary_operands(a, b, name)
    return binary_result(a, b, getattr(a.device.xp, name)(a._data, b._data), node_cls, a, b)


@register
def maximum(a: Any, b: Any) -> Tensor:
    """Elementwise maximum (NaN propagates); on ties each operand gets half the gradient."""
    return _extremum(a, b, "maximum", MaximumBackward0)


@register
def minimum(a: Any, b: Any) -> Tensor:
    """Elementwise minimum (NaN propagates); on ties each operand gets half the gradient."""
    return _extremum(a, b, "minimum", MinimumBackward0)


class WhereBackward0(_Binary):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        (cond,) = self.saved_tensors()
        _, ea, eb = self.next_edges
        zero = const(g.device.xp.zeros((), dtype=g.dtype), g)
        return (None,
                fit(where(cond, g, zero), self.a_shape, self.a_dtype) if ea[0] is not None else None,
                fit(where(cond, zero, g), self.b_shape, self.b_dtype) if eb[0] is not None else None)


_ONE_ARG = object()  # where(condition) alone: torch's nonzero(condition, as_tuple=True)


@register
def where(condition: Any, input: Any = _ONE_ARG, other: Any = _ONE_ARG) -> Any:  # noqa: A002 - torch's names
    """``input`` where ``condition`` is true, else ``other`` (all three broadcast). With the
    condition alone, ``nonzero(condition, as_tuple=True)``, as ``torch.where(condition)``."""
    if input is _ONE_ARG or other is _ONE_ARG:
        if input is not other:
            raise TypeError("where() takes the condition alone, or the condition, input and other")
        return nonzero(check_tensor(condition, "where", "condition"), as_tuple=True)
    if not isinstance(condition, Tensor):
        like = input if isinstance(input, Tensor) else other
        condition = as_operand(condition, check_tensor(like, "where", "input"), "where")
    elif not isinstance(input, Tensor) and not isinstance(other, Tensor):
        # where(cond, 1.0, 0.0): the first number becomes a tensor by torch's default dtypes
        if isinstance(input, numpy.generic):  # a number, as a Python one (pow's rule)
            input = input.item()
        input = tensor(input, device=condition.device)
    a, b = binary_operands(input, other, "where")
    if condition.device is not a.device:
        raise device_error("where", condition, a)
    if condition.dtype.kind != "b":
        raise RuntimeError(f"where: condition must be a bool tensor, got dtype {condition.dtype}; compare first (e.g. x > 0)")
    out = _binary_out(a, b, a.device.xp.where(condition._data, a._data, b._data))
    if tls.grad_enabled and (a._rg or b._rg):
        record(WhereBackward0()._meta(a, b), (None, a, b), out, (condition,))
    return out


class ClampBackward1(Node):
    """``clamp`` = ``minimum(maximum(x, lo), hi)``, but x keeps the gradient at the bounds (torch)."""

    __slots__ = ("shapes", "dtypes")

    def backward(self, g: Tensor) -> tuple:
        x, lo, hi = self.saved_tensors()
        xp = x.device.xp
        inside = xp.ones(g.shape, dtype=bool)
        grads = [None, None, None]
        above_lo = None
        if lo is not None:
            inside &= x._data >= lo._data
            above_lo = xp.maximum(x._data, lo._data)
        if hi is not None:
            inside &= (x._data if above_lo is None else above_lo) <= hi._data
        edges = self.next_edges
        if edges[0][0] is not None:
            grads[0] = fit(mul(g, const(inside.astype(g.dtype), g)), self.shapes[0], self.dtypes[0])
        if lo is not None and edges[1][0] is not None:
            lo_wins = (x._data < lo._data) & ((lo._data <= hi._data) if hi is not None else True)
            grads[1] = fit(mul(g, const(xp.asarray(lo_wins).astype(g.dtype), g)), self.shapes[1], self.dtypes[1])
        if hi is not None and edges[2][0] is not None:
            hi_wins = (x._data if above_lo is None else above_lo) > hi._data
            grads[2] = fit(mul(g, const(hi_wins.astype(g.dtype), g)), self.shapes[2], self.dtypes[2])
        return tuple(grads)


@register
def clamp(x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002 - torch's names
    """Limit ``x`` to ``[min, max]`` (numbers or tensors; either may be None).

    Where ``min > max`` the result is ``max``, as in torch. The gradient goes to ``x`` where
    ``min <= x <= max`` and otherwise to the bound that was taken.
    """
    check_tensor(x, "clamp")
    if min is None and max is None:
        raise RuntimeError("clamp: at least one of 'min' or 'max' must not be None")
    lo = None if min is None else binary_operands(x, min, "clamp")[1]
    hi = None if max is None else binary_operands(x, max, "clamp")[1]
    xp = x.device.xp
    data, dt = x._data, x.dtype
    for bound, fn in ((lo, xp.maximum), (hi, xp.minimum)):
        if bound is not None:
            dt = result_dtype(SimpleNamespace(dtype=dt, ndim=x.ndim), bound)
            data = fn(data, bound._data)
    out = _wrap(cast(xp.asarray(data), dt), x.device)
    if tls.grad_enabled and (x._rg or (lo is not None and lo._rg) or (hi is not None and hi._rg)):
        node = ClampBackward1()
        ts = (x, lo, hi)
        node.shapes = tuple(t.shape if t is not None else None for t in ts)
        node.dtypes = tuple(t.dtype if t is not None else None for t in ts)
        record(node, ts, out, ts)
    return out


class ErfBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        (x,) = self.saved_tensors()
        return (mul(g, mul(exp(neg(mul(x, x))), 2.0 / math.sqrt(math.pi))),)


@register
def erf(x: Tensor) -> Tensor:
    """The error function ``2/sqrt(pi) * integral_0^x exp(-t**2) dt`` (used by exact gelu)."""
    data = x._data if type(x) is Tensor and x._base is None and x._data.dtype.kind == "f" else _float_input(x, "erf")
    return unary_result(x, x.device.kernels.erf(data), ErfBackward0, x)


# The formula namespaces' names for these ops: See Note [First-order formulas] in _core.py.
OPS.add, OPS.sub, OPS.mul, OPS.div, OPS.neg, OPS.pow, OPS.exp = add, sub, mul, div, neg, pow, exp
OPS.tanh_grad, OPS.div_grad_b, OPS.sgn = tanh_backward, div_grad_b, _sgn

