"""Elementwise ops: arithmetic and unary math. See Note [Op definitions] in _core.py."""
from __future__ import annotations

from typing import Any

from engine.tensor import Tensor, _wrap

from ._core import Node, binary_operands, check_tensor, fit, record, register, tls


class _Binary(Node):
    """Base for binary nodes: remembers the operands' shapes and dtypes for ``fit``."""

    __slots__ = ("a_shape", "a_dtype", "b_shape", "b_dtype")

    def _meta(self, a: Tensor, b: Tensor) -> "_Binary":
        self.a_shape, self.a_dtype, self.b_shape, self.b_dtype = a.shape, a.dtype, b.shape, b.dtype
        return self


class AddBackward0(_Binary):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        ea, eb = self.next_edges
        return (fit(g, self.a_shape, self.a_dtype) if ea[0] is not None else None,
                fit(g, self.b_shape, self.b_dtype) if eb[0] is not None else None)


@register
def add(a: Any, b: Any) -> Tensor:
    """``a + b`` with numpy broadcasting."""
    a, b = binary_operands(a, b, "add")
    out = _wrap(a.data + b.data, a.device)
    if tls.grad_enabled and (a._rg or b._rg):
        record(AddBackward0()._meta(a, b), (a, b), out)
    return out


class SubBackward0(_Binary):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        ea, eb = self.next_edges
        return (fit(g, self.a_shape, self.a_dtype) if ea[0] is not None else None,
                fit(neg(g), self.b_shape, self.b_dtype) if eb[0] is not None else None)


@register
def sub(a: Any, b: Any) -> Tensor:
    """``a - b`` with numpy broadcasting."""
    a, b = binary_operands(a, b, "sub")
    out = _wrap(a.data - b.data, a.device)
    if tls.grad_enabled and (a._rg or b._rg):
        record(SubBackward0()._meta(a, b), (a, b), out)
    return out


class MulBackward0(_Binary):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        a, b = self.saved_tensors()
        ea, eb = self.next_edges
        return (fit(mul(g, b), self.a_shape, self.a_dtype) if ea[0] is not None else None,
                fit(mul(g, a), self.b_shape, self.b_dtype) if eb[0] is not None else None)


@register
def mul(a: Any, b: Any) -> Tensor:
    """``a * b`` with numpy broadcasting."""
    a, b = binary_operands(a, b, "mul")
    out = _wrap(a.data * b.data, a.device)
    if tls.grad_enabled and (a._rg or b._rg):
        # Save only what a needed gradient uses: b for a's gradient, a for b's.
        record(MulBackward0()._meta(a, b), (a, b), out, (a if b._rg else None, b if a._rg else None))
    return out


class DivBackward0(_Binary):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        a, b = self.saved_tensors()
        ea, eb = self.next_edges
        return (fit(div(g, b), self.a_shape, self.a_dtype) if ea[0] is not None else None,
                fit(neg(div(mul(g, a), mul(b, b))), self.b_shape, self.b_dtype) if eb[0] is not None else None)


@register
def div(a: Any, b: Any) -> Tensor:
    """``a / b`` (true division) with numpy broadcasting."""
    a, b = binary_operands(a, b, "div")
    out = _wrap(a.data / b.data, a.device)
    if tls.grad_enabled and (a._rg or b._rg):
        record(DivBackward0()._meta(a, b), (a, b), out, (a if b._rg else None, b))
    return out


class NegBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        return (neg(g),)


@register
def neg(x: Tensor) -> Tensor:
    """``-x``."""
    check_tensor(x, "neg")
    out = _wrap(-x.data, x.device)
    if tls.grad_enabled and x._rg:
        record(NegBackward0(), (x,), out)
    return out


class PowBackward0(Node):
    """Tensor base, number exponent."""

    __slots__ = ("exponent",)

    def backward(self, g: Tensor) -> tuple:
        (a,) = self.saved_tensors()
        e = self.exponent
        if e == 0:
            return (mul(g, 0.0),)
        return (mul(mul(g, e), pow(a, e - 1)),)


class PowBackward1(_Binary):
    """Tensor base, tensor exponent."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        a, b, out = self.saved_tensors()
        ea, eb = self.next_edges
        ga = gb = None
        if ea[0] is not None:
            ga = fit(mul(mul(g, b), pow(a, sub(b, 1))), self.a_shape, self.a_dtype)
        if eb[0] is not None:
            # d(a**b)/db = a**b * log(a); where a == 0 torch takes 0 (the limit for b > 0).
            safe = _wrap((a.data != 0).astype(a.dtype), a.device)
            la = log(add(a, sub(1, safe)))
            gb = fit(mul(mul(g, out), la), self.b_shape, self.b_dtype)
        return (ga, gb)


@register
def pow(a: Any, b: Any) -> Tensor:  # noqa: A001 - torch's name
    """``a ** b``; either may be a number."""
    if isinstance(a, Tensor) and not isinstance(b, Tensor) and isinstance(b, (int, float)):
        out = _wrap(a.data ** b, a.device)
        if tls.grad_enabled and a._rg:
            node = PowBackward0()
            node.exponent = b
            record(node, (a,), out, (a,))
        return out
    a, b = binary_operands(a, b, "pow")
    out = _wrap(a.data ** b.data, a.device)
    if tls.grad_enabled and (a._rg or b._rg):
        record(PowBackward1()._meta(a, b), (a, b), out, (a, b, out if b._rg else None))
    return out


class ExpBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        (out,) = self.saved_tensors()
        return (mul(g, out),)


@register
def exp(x: Tensor) -> Tensor:
    """``e ** x``."""
    check_tensor(x, "exp")
    out = _wrap(x.device.xp.exp(x.data), x.device)
    if tls.grad_enabled and x._rg:
        record(ExpBackward0(), (x,), out, (out,))
    return out


class LogBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        (x,) = self.saved_tensors()
        return (div(g, x),)


@register
def log(x: Tensor) -> Tensor:
    """Natural logarithm."""
    check_tensor(x, "log")
    out = _wrap(x.device.xp.log(x.data), x.device)
    if tls.grad_enabled and x._rg:
        record(LogBackward0(), (x,), out, (x,))
    return out


class TanhBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        (out,) = self.saved_tensors()
        return (mul(g, sub(1, mul(out, out))),)


@register
def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent."""
    check_tensor(x, "tanh")
    out = _wrap(x.device.xp.tanh(x.data), x.device)
    if tls.grad_enabled and x._rg:
        record(TanhBackward0(), (x,), out, (out,))
    return out


class ReluBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        (out,) = self.saved_tensors()
        # The mask is a constant: relu's second derivative is zero almost everywhere.
        return (mul(g, _wrap((out.data > 0).astype(out.dtype), out.device)),)


@register
def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``; the gradient at 0 is 0, as in torch."""
    check_tensor(x, "relu")
    out = _wrap(x.device.xp.maximum(x.data, 0).astype(x.dtype, copy=False), x.device)
    if tls.grad_enabled and x._rg:
        record(ReluBackward0(), (x,), out, (out,))
    return out
