"""Activations: sigmoid, relu, gelu, softplus, softmax, log_softmax.

Forwards are the numerically stable forms; backwards are written with ops (so a second
derivative exists) on the saved input or output. See Note [Op definitions] in _core.py.
"""
from __future__ import annotations

import math
from typing import Any

from ..engine.tensor import Tensor, _wrap

from ._core import (ARRAYS, BOOL as _BOOL, OPS, OUTPUT, Node, check_tensor, const, dim_alias, normalize_dim, record, record_unary, register,
                    tls, unary_result)
from .elementwise import add, erf, exp, mul, sub, tanh, where
from .reduce import sum as _sum


def _float_data(x: Tensor, name: str) -> Any:
    check_tensor(x, name)
    if x.dtype.kind not in "fc":
        raise TypeError(f"{name}: expected a floating point tensor, got dtype {x.dtype}; convert with x.to(engine.float32)")
    return x._data


class SigmoidBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py (arrays: 1.77 -> 1.62 us)
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        (y,) = F.saved(self)
        return (F.wrap(F.sigmoid_grad(g, y), dev),)  # sigmoid_backward on OPS; Note [Fused kernels] in devices/_fused.py


class SigmoidBackwardBackward0(Node):
    """Backward of the fused ``g * y * (1 - y)``: d/dg = y(1-y), d/dy = g(1 - 2y)."""

    __slots__ = ()

    def backward(self, gg: Tensor) -> tuple:
        g, y = self.saved_tensors()
        eg, ey = self.next_edges
        return (mul(gg, mul(y, sub(1, y))) if eg[0] is not None else None,
                mul(mul(gg, g), sub(1, mul(y, 2.0))) if ey[0] is not None else None)


def sigmoid_backward(g: Tensor, y: Tensor) -> Tensor:
    """``g * y * (1 - y)`` fused into one node (like torch's ``sigmoid_backward``)."""
    dev = g.device
    out = _wrap(dev.kernels.sigmoid_grad(g._data, y._data), dev)
    if tls.grad_enabled and (g._rg or y._rg):
        record(SigmoidBackwardBackward0(), (g, y), out, (g, y))
    return out


def _sigmoid_array(data: Any, xp: Any) -> Any:
    # exp(-|x|) never overflows: 1/(1+e^-x) for x >= 0, e^x/(1+e^x) for x < 0.
    e = xp.exp(-xp.abs(data))
    return xp.where(data >= 0, 1 / (1 + e), e / (1 + e)).astype(data.dtype, copy=False)


@register
def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))``, computed without overflow for large ``|x|``."""
    check_tensor(x, "sigmoid")
    data = x._data if x.dtype.kind in "fc" else x._data.astype("float32")  # torch promotes integers
    return unary_result(x, _sigmoid_array(data, x.device.xp), SigmoidBackward0, OUTPUT)


class ReluBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py (arrays: 2.68 -> 1.72 us)
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        (y,) = F.saved(self)
        return (F.wrap(F.relu_grad(g, y), dev),)  # g * (y > 0): threshold_backward on OPS


class ThresholdBackwardBackward0(Node):
    """Backward of :func:`threshold_backward` ``g * (y > 0)``, torch's formulas: d/dg is the
    same mask (``threshold_backward(gg, y)``), d/dy is zero (the mask is a step function)."""

    __slots__ = ()

    def backward(self, gg: Tensor) -> tuple:
        (y,) = self.saved_tensors()
        eg, ey = self.next_edges
        return (threshold_backward(gg, y) if eg[0] is not None else None,
                _wrap(y.device.xp.zeros(y._data.shape, y._data.dtype), y.device) if ey[0] is not None else None)


def threshold_backward(g: Tensor, y: Tensor) -> Tensor:
    """``g`` where relu's output ``y`` is positive, else 0 (torch's ``threshold_backward(g, y, 0)``),
    in one node: relu's backward under ``create_graph``. See Note [Gradients linked to the output].

    >>> from threadgrad import engine, ops
    >>> x = engine.tensor([1.5, -2.0], requires_grad=True)
    >>> (g,) = engine.grad(ops.relu(x).sum(), x, create_graph=True)
    >>> g.tolist(), g.grad_fn.name()
    ([1.0, 0.0], 'ThresholdBackwardBackward0')
    """
    dev = g.device
    out = _wrap(dev.kernels.relu_grad(g._data, y._data), dev)  # g * (y > 0), as the first-order form
    if tls.grad_enabled and (g._rg or y._rg):
        record(ThresholdBackwardBackward0(), (g, y), out, (y,))
    return out


# Note [Gradients linked to the output]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# relu's and abs's gradients are ``g`` times a mask (``y > 0``, ``sign(x)``) whose derivative
# is zero. Multiplying by a constant mask gives the right values, but under ``create_graph``
# with a ``g`` that needs no gradient (``grad(y.sum(), x, create_graph=True)``) the result
# would not require grad, and ``g.sum().backward()`` would raise where PyTorch gives zeros.
# PyTorch's formulas keep the link: relu's is ``threshold_backward(g, result)``, a node with
# an edge to relu's output (ThresholdBackwardBackward0); abs's is ``g * x.sgn()``, whose
# SgnBackward0 sends zeros to x. We record the same nodes, so requires_grad, grad_fn names and
# second (zero) derivatives match. Only the create_graph form does: the first-order form
# (Note [First-order formulas] in _core.py) computes the same values on arrays.


@register
def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``; the gradient at 0 is 0, as in torch. Bool tensors are refused (RuntimeError), as in torch."""
    check_tensor(x, "relu")
    if x._data.dtype is _BOOL:
        raise RuntimeError("relu: Boolean inputs not supported for relu (got a tensor of dtype bool); "
                           "convert it first, e.g. x.to(engine.float32)")
    return unary_result(x, x.device.xp.maximum(x._data, 0).astype(x.dtype, copy=False), ReluBackward0, OUTPUT)


_FLOATS = ("float32", "float64")  # the dtypes the fused gelu/softplus/softmax kernels take
_SQRT1_2 = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_TANH_K = math.sqrt(2 / math.pi)
_TANH_C = 0.044715


class GeluBackward0(Node):
    __slots__ = ("approximate",)

    def backward(self, g: Tensor) -> tuple:
        # Arrays where the device's kernel takes the operands (a plain form on numpy too)
        dev = g.device
        if tls.grad_enabled or not _kernel_takes(self, g):  # See Note [First-order formulas] in _core.py
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        (x,) = F.saved(self)
        return (F.wrap(F.gelu_grad(g, x, self.approximate), dev),)


def _kernel_takes(node: Node, g: Tensor, fused_only: bool = False) -> bool:
    """Whether the device's formula for ``node`` (gelu_grad, softplus_grad, softmax_grad) takes
    ``g`` and the node's saved operand: one dtype, float32 or float64. ``fused_only``: a
    formula only fused tables have (Note [Fused kernels] in devices/_fused.py)."""
    if fused_only and not g.device.kernels.fused:
        return False
    (d,) = node.saved_arrays()
    return g._data.dtype == d.dtype and d.dtype.name in _FLOATS


def gelu_grad(g: Tensor, x: Tensor, approximate: str) -> Tensor:
    """gelu's backward ``g * (Phi(x) + x * phi(x))`` (or its tanh form) with ops: the formula
    tables' ``gelu_grad``."""
    if approximate == "tanh":
        x2 = mul(x, x)
        t = tanh(mul(add(x, mul(mul(x2, x), _TANH_C)), _TANH_K))
        # d/dx 0.5 x (1 + t) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3c x^2)
        dt = mul(sub(1, mul(t, t)), add(mul(x2, 3 * _TANH_C * _TANH_K), _TANH_K))
        d = mul(add(add(t, 1), mul(x, dt)), 0.5)
    else:
        cdf = mul(add(erf(mul(x, _SQRT1_2)), 1), 0.5)
        pdf = mul(exp(mul(mul(x, x), -0.5)), _INV_SQRT_2PI)
        d = add(cdf, mul(x, pdf))
    return mul(g, d)


@register
def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """``x * Phi(x)`` with the exact normal CDF (``approximate="none"``) or its tanh form
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (``approximate="tanh"``)."""
    data = _float_data(x, "gelu")
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"gelu: approximate argument must be either 'none' or 'tanh', got {approximate!r}")
    res = x.device.kernels.gelu(data, approximate)  # one kernel on a GPU (devices/_fused.py)
    out = _wrap(res.astype(x.dtype, copy=False), x.device)
    if tls.grad_enabled and x._rg:
        node = GeluBackward0()
        node.approximate = approximate
        record_unary(node, x, out, x)
    return out


class SoftplusBackward0(Node):
    __slots__ = ("beta", "threshold")

    def backward(self, g: Tensor) -> tuple:
        # Arrays where the device has a softplus kernel that takes the operands (none on numpy)
        dev = g.device
        if tls.grad_enabled or not _kernel_takes(self, g, fused_only=True):  # See Note [First-order formulas] in _core.py
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        (x,) = F.saved(self)
        return (F.wrap(F.softplus_grad(g, x, self.beta, self.threshold), dev),)


def softplus_grad(g: Tensor, x: Tensor, beta: float, threshold: float) -> Tensor:
    """softplus's backward ``g * sigmoid(beta x)`` (``g`` where ``beta x > threshold``) with
    ops: the fused tables' ``softplus_grad``."""
    bx = mul(x, beta)
    linear = const(bx._data > threshold, x)
    return mul(g, where(linear, const(x.device.xp.ones((), dtype=g.dtype), g), sigmoid(bx)))


@register
def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta x)) / beta``; linear (``x``) where ``beta x > threshold``, as in torch."""
    data = _float_data(x, "softplus")
    xp = x.device.xp
    bx = data * beta
    res = xp.where(bx > threshold, data, xp.logaddexp(0, bx) / beta)
    out = _wrap(res.astype(x.dtype, copy=False), x.device)
    if tls.grad_enabled and x._rg:
        node = SoftplusBackward0()
        node.beta, node.threshold = beta, threshold
        record_unary(node, x, out, x)
    return out


def _shifted(data: Any, d: int, xp: Any) -> Any:
    """``data - max(data, d)``, as torch's softmax kernels shift: a slice whose max is +inf or
    that is all -inf comes out NaN (``inf - inf``), as torch's does (shifting those by 0 gave
    ``[nan, 0, 0]`` for ``[inf, 1, 2]``, where torch's softmax is all NaN)."""
    m = xp.max(data, axis=d, keepdims=True) if data.size else xp.zeros_like(data)
    return data - m


class SoftmaxBackward0(Node):
    __slots__ = ("dim",)

    def backward(self, g: Tensor) -> tuple:
        # Arrays where the device has a softmax kernel that takes the operands (none on numpy)
        dev = g.device
        if tls.grad_enabled or not _kernel_takes(self, g, fused_only=True):  # See Note [First-order formulas] in _core.py
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        (y,) = F.saved(self)
        return (F.wrap(F.softmax_grad(g, y, self.dim), dev),)


def softmax_grad(g: Tensor, y: Tensor, dim: Any) -> Tensor:
    """softmax's backward from its output ``y``, ``y * (g - sum(g * y, dim))``, with ops: the
    fused tables' ``softmax_grad``."""
    return mul(y, sub(g, _sum(mul(g, y), dim, keepdim=True)))


@register
def softmax(x: Tensor, dim: Any = None, *, axis: Any = None) -> Tensor:
    """``exp(x) / sum(exp(x), dim)``, shifted by the max for stability."""
    if axis is not None:
        dim = dim_alias(dim, axis, "softmax")
    if dim is None:
        raise TypeError("softmax() missing 1 required argument: 'dim'")
    data = _float_data(x, "softmax")
    d = normalize_dim(dim, x.ndim, "softmax")
    xp = x.device.xp
    if x.ndim == 0:
        res = xp.ones_like(data)
    else:
        e = xp.exp(_shifted(data, d, xp))
        res = e / e.sum(axis=d, keepdims=True)
    out = _wrap(res.astype(x.dtype, copy=False), x.device)
    if tls.grad_enabled and x._rg:
        node = SoftmaxBackward0()
        node.dim = d if x.ndim else None
        record_unary(node, x, out, out)
    return out


class LogSoftmaxBackward0(Node):
    __slots__ = ("dim",)

    def backward(self, g: Tensor) -> tuple:
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py (arrays, (8, 16): 7.97 -> 3.25 us)
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        (y,) = F.saved(self)
        return (F.wrap(F.log_softmax_grad(g, y, self.dim, dev.xp), dev),)  # Note [Fused kernels] in devices/_fused.py


def log_softmax_grad(g: Tensor, y: Tensor, dim: Any, xp: Any = None) -> Tensor:
    """log_softmax's backward from its output ``y``, ``g - exp(y) * sum(g, dim)``, with ops: the
    formula tables' ``log_softmax_grad`` (whose ``xp`` an op has no use for)."""
    return sub(g, mul(exp(y), _sum(g, dim, keepdim=True)))


@register
def log_softmax(x: Tensor, dim: Any = None, *, axis: Any = None) -> Tensor:
    """``x - logsumexp(x, dim)``: finite even where ``softmax`` underflows to 0."""
    if axis is not None:
        dim = dim_alias(dim, axis, "log_softmax")
    if dim is None:
        raise TypeError("log_softmax() missing 1 required argument: 'dim'")
    data = _float_data(x, "log_softmax")
    d = normalize_dim(dim, x.ndim, "log_softmax")
    xp = x.device.xp
    if x.ndim == 0:
        res = xp.zeros_like(data)
    else:
        s = _shifted(data, d, xp)
        res = s - xp.log(xp.exp(s).sum(axis=d, keepdims=True))
    out = _wrap(res.astype(x.dtype, copy=False), x.device)
    if tls.grad_enabled and x._rg:
        node = LogSoftmaxBackward0()
        node.dim = d if x.ndim else None
        record_unary(node, x, out, out)
    return out


# The formula namespaces' names for these ops: See Note [First-order formulas] in _core.py.
OPS.sigmoid_grad, OPS.relu_grad, OPS.gelu_grad = sigmoid_backward, threshold_backward, gelu_grad
OPS.softplus_grad, OPS.softmax_grad, OPS.log_softmax_grad = softplus_grad, softmax_grad, log_softmax_grad
