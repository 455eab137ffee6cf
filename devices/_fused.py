"""Per-device formula tables: plain array expressions, or fused GPU kernels.

Every :class:`~threadgrad.devices.Device` carries a ``kernels`` table. The numpy devices (cpu,
``virtual:N``) carry :data:`PLAIN`: each formula is an expression over array operators, as
ops have always computed it. A cupy device carries a :class:`Fused` table: the same formulas,
each one ``cupy.ElementwiseKernel`` (or ``ReductionKernel``), compiled once per dtype by cupy
and cached, so a formula is one kernel launch instead of one per operator. See Note [Fused
kernels].

The optimizer updates are here too, as multi-tensor functions over lists of raw arrays, so an
optimizer calls one function per parameter group (see :func:`plain_sgd` and
:func:`plain_adam` for the signatures, which the fused forms share).

Note [Fused kernels]
~~~~~~~~~~~~~~~~~~~~
On a GPU the device is idle in small and medium workloads: what costs is the host's work per
kernel launch (cupy spends several µs of Python on each). A formula such as tanh's backward
``g - g*y*y`` is three cupy ufunc launches; torch launches one ``tanh_backward`` kernel. The
fused table replaces each hot formula with one kernel. Ops stay the definition: a node asks
its gradient's device for ``kernels.<formula>`` only in its first-order form (Note
[First-order formulas] in ops/_core.py); under ``create_graph`` it records ops as before, so
double backward is unchanged on every device. Where a node has no first-order form on numpy
(gelu, softplus, softmax), the node tests ``kernels.fused`` and keeps the ops path on cpu.

Each fused wrapper falls back to the plain expression for what its kernel does not cover
(operands of different dtypes, dtypes other than float32/float64: float16 and complex keep
the plain cupy ufuncs), so it can be called with anything the plain formula accepts. tests/cuda/test_fused.py checks every kernel against the plain formula on a
real GPU; tests/devices/test_fused_dispatch.py checks, on the numpy stand-in, that a cuda
device picks the fused table and cpu the plain one.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Optional, Sequence, Union

import numpy

__all__ = ["PLAIN", "Fused", "for_array_module", "plain_sgd", "plain_adam"]

_SQRT1_2 = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_TANH_K = math.sqrt(2 / math.pi)
_TANH_C = 0.044715


# --- plain formulas (numpy, and any array module with operators) ------------------------------

def _tanh_grad(g: Any, y: Any) -> Any:
    # g - g*y*y, not g * (1 - y*y): three array-by-array ufuncs, no Python-float operand to
    # convert (measured 1.56 -> 1.20 us on 16 elements; ``out=`` forms are slower)
    return g - g * y * y


def _sigmoid_grad(g: Any, y: Any) -> Any:
    # g * (1 - y) * y, as torch's sigmoid_backward: 1 - y is exact for y in [0.5, 1], where
    # y - y*y would cancel (relative error 1.7e-4 in float32 near y = 1, against 9e-8).
    return g * (1.0 - y) * y


def _relu_grad(g: Any, y: Any) -> Any:
    # torch's threshold_backward: 0 where y <= 0, else g. A NaN y passes g (NaN > 0 is False,
    # so g * (y > 0) gave 0 there), and a NaN g stays NaN only where y > 0.
    return numpy.where(y <= 0, numpy.zeros((), g.dtype), g) if isinstance(g, numpy.ndarray) else g * ~(y <= 0)


def _div_grad_b(g: Any, a: Any, b: Any) -> Any:
    return -(g * a / (b * b))


def _log_softmax_grad(g: Any, y: Any, dim: Optional[int], xp: Any) -> Any:
    return g - xp.exp(y) * g.sum(axis=dim, keepdims=True)


def _class_index_check(t: Any, ignore_index: int, n_classes: int) -> int:
    """For cross_entropy's integer targets ``t``: bit 1 set when some target is ``ignore_index``,
    bit 2 when some other target is outside ``[0, n_classes)``. One host read of the device."""
    valid = t != ignore_index
    code = 0 if bool(valid.all()) else 1
    if bool((valid & ((t < 0) | (t >= n_classes))).any()):
        code |= 2
    return code


def plain_sgd(params: Sequence[Any], grads: Sequence[Any], momentum_buffers: list, *, lr: float,
              momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
              nesterov: bool = False, maximize: bool = False) -> None:
    """One SGD step over lists of raw arrays, in place, as torch.optim.SGD (``foreach=False``).

    ``params[i] -= lr * d`` where ``d`` is ``grads[i]`` (negated when ``maximize``) plus
    ``weight_decay * params[i]``, then, with ``momentum``, ``buf = momentum*buf + (1-dampening)*d``
    (``buf = d`` on the first step, when ``momentum_buffers[i]`` is None: the new buffer is
    stored there) and ``d = d + momentum*buf`` (``nesterov``) or ``d = buf``. Arrays of one
    call share an array module; ``grads`` are not modified.
    """
    for i, (p, g) in enumerate(zip(params, grads)):
        d = -g if maximize else g
        if weight_decay != 0:
            d = d + weight_decay * p
        if momentum != 0:
            buf = momentum_buffers[i]
            if buf is None:
                buf = momentum_buffers[i] = d.copy()
            else:
                buf *= momentum
                buf += (1 - dampening) * d
            d = d + momentum * buf if nesterov else buf
        p -= lr * d


def plain_adam(params: Sequence[Any], grads: Sequence[Any], exp_avgs: Sequence[Any], exp_avg_sqs: Sequence[Any],
               max_exp_avg_sqs: Optional[Sequence[Any]], steps: Union[int, Sequence[int]], *, lr: float,
               beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0,
               amsgrad: bool = False, maximize: bool = False, decoupled_weight_decay: bool = False) -> None:
    """One Adam (or AdamW: ``decoupled_weight_decay=True``) step over lists of raw arrays, in place,
    as torch.optim.Adam/AdamW (``foreach=False``).

    ``exp_avgs``/``exp_avg_sqs`` (and ``max_exp_avg_sqs`` with ``amsgrad``) are the state
    arrays, zero-initialized by the caller; ``steps`` is the step number after this update (1
    on the first step), one int for all or one per parameter. AdamW multiplies the parameter by
    ``1 - lr*weight_decay``; Adam adds ``weight_decay * param`` to the gradient.
    """
    for i, (p, g, m, v) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs)):
        step = steps if isinstance(steps, int) else steps[i]
        d = -g if maximize else g
        if weight_decay != 0:
            if decoupled_weight_decay:
                p *= 1 - lr * weight_decay
            else:
                d = d + weight_decay * p
        m += (1 - beta1) * (d - m)                      # exp_avg.lerp_(d, 1 - beta1)
        v *= beta2
        v += (1 - beta2) * d * d
        bc1 = 1 - beta1 ** step
        bc2_sqrt = math.sqrt(1 - beta2 ** step)
        if amsgrad:
            vmax = max_exp_avg_sqs[i]
            numpy.maximum(vmax, v, out=vmax)  # a cupy array answers numpy's ufuncs itself
            denom = numpy.sqrt(vmax) / bc2_sqrt + eps
        else:
            denom = numpy.sqrt(v) / bc2_sqrt + eps
        p -= (lr / bc1) * (m / denom)


class _Table:
    """A formula table: attributes are functions over raw arrays (see the module docstring)."""

    fused = False
    name = "plain"

    # The plain functions themselves, not wrappers: the cpu hot path pays no extra call.
    tanh_grad = staticmethod(_tanh_grad)                # tanh's backward from its output y
    sigmoid_grad = staticmethod(_sigmoid_grad)          # sigmoid's backward from its output y
    relu_grad = staticmethod(_relu_grad)                # relu's backward from its output y
    log_softmax_grad = staticmethod(_log_softmax_grad)  # log_softmax's backward from its output y
    class_index_check = staticmethod(_class_index_check)
    mul = staticmethod(operator.mul)                    # mul's backward: g times the other operand
    div_grad_b = staticmethod(_div_grad_b)              # div's backward for b: -(g * a / b^2)
    sgd = staticmethod(plain_sgd)
    adam = staticmethod(plain_adam)


PLAIN = _Table()


# --- fused formulas (cupy) -------------------------------------------------------------------

_FLOATS = ("float32", "float64")


class Fused(_Table):
    """The fused table of one cupy-like array module ``xp`` (one with ``ElementwiseKernel`` and
    ``ReductionKernel``). Kernels are made here and compiled by cupy on first use per dtype."""

    fused = True
    name = "fused"

    def __init__(self, xp: Any) -> None:
        ek, rk = xp.ElementwiseKernel, xp.ReductionKernel
        self.xp = xp
        self._tanh = ek("T g, T y", "T z", "z = g - g * y * y", "threadgrad_tanh_backward")
        self._sigmoid = ek("T g, T y", "T z", "z = g * ((T)1 - y) * y", "threadgrad_sigmoid_backward")
        self._relu = ek("T g, T y", "T z", "z = y <= (T)0 ? (T)0 : g", "threadgrad_threshold_backward")
        self._mul = ek("T a, T b", "T z", "z = a * b", "threadgrad_mul")
        self._div_b = ek("T g, T a, T b", "T z", "z = -(g * a / (b * b))", "threadgrad_div_backward_b")
        self._nll = ek("raw T lsm, S t, int64 c", "T z", "z = -lsm[i * c + t]", "threadgrad_nll")
        self._ce_grad = ek("T lsm, raw S t, raw T g, float64 scale, int64 c", "T z",
                           "z = (exp(lsm) - (T)((i % c) == t[i / c])) * (g[0] * (T)scale)",
                           "threadgrad_cross_entropy_backward")
        self._lsm = ek("T g, T y, T s", "T z", "z = g - exp(y) * s", "threadgrad_log_softmax_backward")
        self._targets = rk("T t, int64 ignore, int64 n", "int32 code",
                           "t == ignore ? 1 : ((t < 0 || t >= n) ? 2 : 0)", "a | b", "code = a", "0",
                           "threadgrad_class_index_check")
        self._dot = rk("T g, T y", "T s", "g * y", "a + b", "s = a", "0", "threadgrad_softmax_dot")
        self._softmax = ek("T g, T y, T s", "T z", "z = y * (g - s)", "threadgrad_softmax_backward")
        self._gelu = ek(
            "T g, T x", "T z",
            f"T cdf = (T)0.5 * ((T)1 + erf(x * (T){_SQRT1_2!r}));"
            f"T pdf = exp(x * x * (T)-0.5) * (T){_INV_SQRT_2PI!r};"
            "z = g * (cdf + x * pdf)",
            "threadgrad_gelu_backward")
        self._gelu_tanh = ek(
            "T g, T x", "T z",
            "T x2 = x * x;"
            f"T t = tanh((x + x2 * x * (T){_TANH_C!r}) * (T){_TANH_K!r});"
            f"T dt = ((T)1 - t * t) * (x2 * (T){3 * _TANH_C * _TANH_K!r} + (T){_TANH_K!r});"
            "z = g * ((t + (T)1 + x * dt) * (T)0.5)",
            "threadgrad_gelu_tanh_backward")
        self._softplus = ek(
            "T g, T x, float64 beta, float64 threshold", "T z",
            "T bx = x * (T)beta;"
            "z = bx > (T)threshold ? g : g * ((T)1 / ((T)1 + exp(-bx)))",
            "threadgrad_softplus_backward")
        self._sgd = ek(
            "T g, float64 lr, float64 wd, bool maximize", "T p",
            "T d = maximize ? -g : g; if (wd != 0) d = d + (T)wd * p; p = p - (T)lr * d",
            "threadgrad_sgd")
        self._sgd_momentum = ek(
            "T g, float64 lr, float64 wd, float64 momentum, float64 dampening, bool nesterov, bool maximize, "
            "bool first", "T p, T buf",
            "T d = maximize ? -g : g; if (wd != 0) d = d + (T)wd * p;"
            "if (first) buf = d; else buf = buf * (T)momentum + (T)(1 - dampening) * d;"
            "d = nesterov ? d + (T)momentum * buf : buf; p = p - (T)lr * d",
            "threadgrad_sgd_momentum")
        adam_body = (
            "T d = maximize ? -g : g;"
            "if (wd != 0) { if (decoupled) p = p * (T)(1 - lr * wd); else d = d + (T)wd * p; }"
            "m = m + (T)(1 - beta1) * (d - m);"
            "v = v * (T)beta2 + (T)(1 - beta2) * d * d;")
        adam_args = ("T g, float64 lr, float64 beta1, float64 beta2, float64 eps, float64 wd, float64 bc1, "
                     "float64 bc2_sqrt, bool maximize, bool decoupled")
        self._adam = ek(adam_args, "T p, T m, T v",
                        adam_body + "p = p - (T)(lr / bc1) * (m / (sqrt(v) / (T)bc2_sqrt + (T)eps))",
                        "threadgrad_adam")
        self._adam_amsgrad = ek(adam_args, "T p, T m, T v, T vmax",
                                adam_body + "vmax = max(vmax, v);"
                                "p = p - (T)(lr / bc1) * (m / (sqrt(vmax) / (T)bc2_sqrt + (T)eps))",
                                "threadgrad_adam_amsgrad")

    def tanh_grad(self, g: Any, y: Any) -> Any:  # type: ignore[override]
        if g.dtype == y.dtype and g.dtype.char in "fd":
            return self._tanh(g, y)
        return _tanh_grad(g, y)

    def sigmoid_grad(self, g: Any, y: Any) -> Any:  # type: ignore[override]
        if g.dtype == y.dtype and g.dtype.char in "fd":
            return self._sigmoid(g, y)
        return _sigmoid_grad(g, y)

    def mul(self, a: Any, b: Any) -> Any:  # type: ignore[override]
        # One ElementwiseKernel launch costs less host time than one cupy ufunc call (measured
        # on an H100: 12.6 against 14.0 us), so even a single product goes through a kernel.
        if a.dtype == b.dtype and a.dtype.char in "fd":
            return self._mul(a, b)
        return a * b

    def div_grad_b(self, g: Any, a: Any, b: Any) -> Any:  # type: ignore[override]
        if g.dtype == a.dtype == b.dtype and g.dtype.char in "fd":
            return self._div_b(g, a, b)
        return _div_grad_b(g, a, b)

    def relu_grad(self, g: Any, y: Any) -> Any:  # type: ignore[override]
        if g.dtype == y.dtype and g.dtype.char in "fd":
            return self._relu(g, y)
        return _relu_grad(g, y)

    def log_softmax_grad(self, g: Any, y: Any, dim: Optional[int], xp: Any) -> Any:  # type: ignore[override]
        if g.dtype == y.dtype and g.dtype.char in "fd":
            return self._lsm(g, y, g.sum(axis=dim, keepdims=True))
        return _log_softmax_grad(g, y, dim, xp)

    def class_index_check(self, t: Any, ignore_index: int, n_classes: int) -> int:  # type: ignore[override]
        """:func:`_class_index_check` in one reduction kernel and one read of its result."""
        if t.dtype.kind not in "iu" or t.size == 0:
            return _class_index_check(t, ignore_index, n_classes)
        return int(self._targets(t, ignore_index, n_classes))

    def nll(self, lsm: Any, t: Any, mean: bool) -> Any:
        """cross_entropy's loss from log-probabilities ``lsm`` (N, C) and valid targets ``t``
        (N,): ``-lsm[i, t_i]`` summed, or averaged when ``mean`` (float32/64 only)."""
        picked = self._nll(lsm, t, lsm.shape[1])
        return picked.mean() if mean else picked.sum()

    def cross_entropy_grad(self, g: Any, lsm: Any, t: Any, mean: bool) -> Any:
        """The gradient of :meth:`nll` through log_softmax: ``(exp(lsm) - onehot(t)) * g``,
        divided by N when ``mean``; ``g`` is the loss's (0-d) gradient."""
        n, c = lsm.shape
        return self._ce_grad(lsm, t, g.reshape(1), 1.0 / n if mean else 1.0, c)

    def softmax_grad(self, g: Any, y: Any, dim: Optional[int]) -> Any:
        """softmax's backward ``y * (g - sum(g*y, dim))`` from the output ``y`` (float32/64 only)."""
        return self._softmax(g, y, self._dot(g, y, axis=dim, keepdims=True))

    def gelu_grad(self, g: Any, x: Any, approximate: str) -> Any:
        """gelu's backward from its input ``x`` (float32/64 only)."""
        return (self._gelu_tanh if approximate == "tanh" else self._gelu)(g, x)

    def softplus_grad(self, g: Any, x: Any, beta: float, threshold: float) -> Any:
        """softplus's backward from its input ``x`` (float32/64 only)."""
        return self._softplus(g, x, beta, threshold)

    def sgd(self, params: Sequence[Any], grads: Sequence[Any], momentum_buffers: list, *, lr: float,  # type: ignore[override]
            momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
            nesterov: bool = False, maximize: bool = False) -> None:
        """:func:`plain_sgd`, one kernel per parameter."""
        for i, (p, g) in enumerate(zip(params, grads)):
            if p.dtype != g.dtype or p.dtype.char not in "fd":  # the kernels take float32/64
                bufs = momentum_buffers[i:i + 1]
                plain_sgd([p], [g], bufs, lr=lr, momentum=momentum, dampening=dampening,
                          weight_decay=weight_decay, nesterov=nesterov, maximize=maximize)
                momentum_buffers[i] = bufs[0]
                continue
            if momentum == 0:
                self._sgd(g, lr, weight_decay, maximize, p)
                continue
            buf = momentum_buffers[i]
            first = buf is None
            if first:
                buf = momentum_buffers[i] = self.xp.empty_like(p)
            self._sgd_momentum(g, lr, weight_decay, momentum, dampening, nesterov, maximize, first, p, buf)

    def adam(self, params: Sequence[Any], grads: Sequence[Any], exp_avgs: Sequence[Any],  # type: ignore[override]
             exp_avg_sqs: Sequence[Any], max_exp_avg_sqs: Optional[Sequence[Any]], steps: Union[int, Sequence[int]],
             *, lr: float, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0,
             amsgrad: bool = False, maximize: bool = False, decoupled_weight_decay: bool = False) -> None:
        """:func:`plain_adam`, one kernel per parameter."""
        for i, (p, g, m, v) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs)):
            step = steps if isinstance(steps, int) else steps[i]
            if p.dtype != g.dtype or p.dtype.char not in "fd":  # the kernels take float32/64
                plain_adam([p], [g], [m], [v], None if max_exp_avg_sqs is None else [max_exp_avg_sqs[i]], step,
                           lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                           maximize=maximize, decoupled_weight_decay=decoupled_weight_decay)
                continue
            bc1, bc2_sqrt = 1 - beta1 ** step, math.sqrt(1 - beta2 ** step)
            args = (g, lr, beta1, beta2, eps, weight_decay, bc1, bc2_sqrt, maximize, decoupled_weight_decay, p, m, v)
            if amsgrad:
                self._adam_amsgrad(*args, max_exp_avg_sqs[i])
            else:
                self._adam(*args)


_tables: dict = {}


def for_array_module(xp: Any) -> _Table:
    """The formula table of a device whose array module is ``xp``: :data:`PLAIN` unless ``xp``
    can build kernels (cupy), then one :class:`Fused` per module."""
    if not hasattr(xp, "ElementwiseKernel"):
        return PLAIN
    table = _tables.get(id(xp))
    if table is None:
        table = _tables[id(xp)] = Fused(xp)
    return table
