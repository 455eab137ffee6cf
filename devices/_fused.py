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
(softplus, softmax), the node tests ``kernels.fused`` and keeps the ops path on cpu; gelu's
plain first-order form is an array formula (erf twice in one backward was too slow as ops).

Each fused wrapper falls back to the plain expression for what its kernel does not cover
(operands of different dtypes, dtypes other than float32/float64: float16 and complex keep
the plain cupy ufuncs), so it can be called with anything the plain formula accepts. tests/cuda/test_fused.py checks every kernel against the plain formula on a
real GPU; tests/devices/test_fused_dispatch.py checks, on the numpy stand-in, that a cuda
device picks the fused table and cpu the plain one.

Note [Multi-tensor updates]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
An optimizer step touches every parameter, and one kernel per parameter costs one launch
each (about 9 µs of host time on an H100 machine, more inside a training step), which for
small and medium models is most of the step. ``Fused.sgd`` and ``Fused.adam`` update up to
``_SLOTS`` (32) parameters per launch, as torch's ``foreach`` optimizers do with
``multi_tensor_apply``: the kernel takes one struct by value holding, per tensor, the
addresses of the parameter, its gradient and its state buffers, its size and its own
scalars (Adam's bias corrections, SGD's first-step flag); block row ``blockIdx.y`` serves
tensor ``y``, and its blocks stride over that tensor's elements. The struct is built on
the host per launch, so nothing is copied to the GPU and nothing waits. The arithmetic of
each element is the single-tensor kernel's, written out over index ``i``, so both give the
same values (tests/cuda/test_fused.py checks them against each other and against the plain
formulas). A launch takes tensors that are float32 or float64 of one dtype, C-contiguous, of
one shape with their buffers, on one GPU; anything else (a non-contiguous gradient, mixed
dtypes, float16, a parameter listed twice) takes the single-tensor path after the launch,
on the same stream. The kernel runs on the GPU that holds the arrays (``cupy.cuda.Device``
around the launch), on that GPU's current stream, as every other kernel here.
"""
from __future__ import annotations

import contextlib
import math
import operator
from typing import Any, Optional, Sequence, Union

import numpy

from ._special import erf_array

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


def _erf(x: Any) -> Any:
    return erf_array(x, numpy)


def _gelu(x: Any, approximate: str) -> Any:
    # gelu's forward: x * Phi(x), exact (erf) or in its tanh form
    if approximate == "tanh":
        return 0.5 * x * (1 + numpy.tanh(_TANH_K * (x + _TANH_C * x * x * x)))
    return 0.5 * x * (1 + erf_array(x * _SQRT1_2, numpy))


def _gelu_grad(g: Any, x: Any, approximate: str) -> Any:
    # gelu's backward from its input: g * (Phi(x) + x * phi(x)), in place over two fresh arrays
    # (measured on a (32, 64, 512) float32 array, benchmarks/models.py's: 25.5 ms as ops, 22 so;
    # erf is 16 of them)
    if approximate == "tanh":
        x2 = x * x
        t = numpy.tanh((x + x2 * x * _TANH_C) * _TANH_K)
        dt = (1 - t * t) * (x2 * (3 * _TANH_C * _TANH_K) + _TANH_K)
        return g * ((t + 1 + x * dt) * 0.5)
    d = erf_array(x * _SQRT1_2, numpy)
    d += 1
    d *= 0.5
    pdf = numpy.multiply(x, x, out=numpy.empty_like(x))  # (an array even when x is 0-d)
    pdf *= -0.5
    numpy.exp(pdf, out=pdf)
    pdf *= _INV_SQRT_2PI
    pdf *= x
    d += pdf
    d *= g
    return d


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
    erf = staticmethod(_erf)                            # erf's forward (devices/_special.py)
    gelu = staticmethod(_gelu)                          # gelu's forward, exact or tanh
    gelu_grad = staticmethod(_gelu_grad)                # gelu's backward from its input x
    mul = staticmethod(operator.mul)                    # mul's backward: g times the other operand
    div_grad_b = staticmethod(_div_grad_b)              # div's backward for b: -(g * a / b^2)
    sgd = staticmethod(plain_sgd)
    adam = staticmethod(plain_adam)


PLAIN = _Table()


# --- fused formulas (cupy) -------------------------------------------------------------------

_FLOATS = ("float32", "float64")
_F32, _F64 = numpy.dtype(numpy.float32), numpy.dtype(numpy.float64)


# --- multi-tensor optimizer updates (cupy RawKernel) ------------------------------------------
#
# See Note [Multi-tensor updates]. One struct of pointers per launch, passed by value (a numpy
# structured scalar, which cupy hands to the kernel as the struct's bytes); every field is 8
# bytes wide, so numpy's aligned layout is the C compiler's.

_SLOTS = 32  # tensors per launch: the Adam struct is then 2,112 bytes, under CUDA's 4 KiB of parameters
_THREADS = 256
_MAX_BLOCKS_X = 512  # blocks per tensor; a bigger tensor is covered by the grid-stride loop


def _struct_dtype(pointers: Sequence[str], per_tensor: Sequence[str], scalars: Sequence[str]) -> numpy.dtype:
    fields = [(name, numpy.uint64, _SLOTS) for name in pointers]
    fields.append(("numel", numpy.int64, _SLOTS))
    fields += [(name, numpy.float64 if name.startswith("f_") else numpy.int64, _SLOTS) for name in per_tensor]
    fields += [(name, numpy.float64 if name.startswith("f_") else numpy.int64) for name in scalars]
    return numpy.dtype(fields, align=True)


_SGD_STRUCT = _struct_dtype(("param", "grad", "buf"), ("first",),
                            ("f_lr", "f_wd", "f_momentum", "f_dampening", "nesterov", "maximize"))
_ADAM_STRUCT = _struct_dtype(("param", "grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"), ("f_bc1", "f_bc2_sqrt"),
                             ("f_lr", "f_beta1", "f_beta2", "f_eps", "f_wd", "maximize", "decoupled", "amsgrad"))


def _c_struct(name: str, dtype: numpy.dtype) -> str:
    """The C declaration of a struct dtype made by :func:`_struct_dtype`."""
    lines = []
    for field in dtype.names:
        base, shape = dtype.fields[field][0].base, dtype.fields[field][0].shape
        ctype = {"u": "unsigned long long", "i": "long long", "f": "double"}[base.kind]
        lines.append(f"  {ctype} {field}{f'[{shape[0]}]' if shape else ''};")
    return "struct " + name + " {\n" + "\n".join(lines) + "\n};\n"


# The loop bodies are the ElementwiseKernel formulas of the single-tensor forms, over index i.
_SGD_SOURCE = _c_struct("SgdArgs", _SGD_STRUCT) + r"""
extern "C" __global__ void NAME(const SgdArgs a) {
  const int t = blockIdx.y;
  const long long n = a.numel[t];
  T* p = (T*)a.param[t];
  const T* g = (const T*)a.grad[t];
  T* buf = (T*)a.buf[t];
  const bool first = a.first[t] != 0;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    T d = a.maximize ? -g[i] : g[i];
    if (a.f_wd != 0) d = d + (T)a.f_wd * p[i];
    if (a.f_momentum != 0) {
      T b = first ? d : buf[i] * (T)a.f_momentum + (T)(1 - a.f_dampening) * d;
      buf[i] = b;
      d = a.nesterov ? d + (T)a.f_momentum * b : b;
    }
    p[i] = p[i] - (T)a.f_lr * d;
  }
}
"""

_ADAM_SOURCE = _c_struct("AdamArgs", _ADAM_STRUCT) + r"""
extern "C" __global__ void NAME(const AdamArgs a) {
  const int t = blockIdx.y;
  const long long n = a.numel[t];
  T* p = (T*)a.param[t];
  const T* g = (const T*)a.grad[t];
  T* m = (T*)a.exp_avg[t];
  T* v = (T*)a.exp_avg_sq[t];
  T* vmax = (T*)a.max_exp_avg_sq[t];
  const double lr = a.f_lr, wd = a.f_wd, bc1 = a.f_bc1[t], bc2_sqrt = a.f_bc2_sqrt[t];
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    T d = a.maximize ? -g[i] : g[i];
    T pi = p[i];
    if (wd != 0) { if (a.decoupled) pi = pi * (T)(1 - lr * wd); else d = d + (T)wd * pi; }
    T mi = m[i] + (T)(1 - a.f_beta1) * (d - m[i]);
    T vi = v[i] * (T)a.f_beta2 + (T)(1 - a.f_beta2) * d * d;
    m[i] = mi;
    v[i] = vi;
    if (a.amsgrad) {  // torch's maximum: a NaN on either side wins
      const T old = vmax[i];
      vi = (old != old || old > vi) ? old : vi;
      vmax[i] = vi;
    }
    p[i] = pi - (T)(lr / bc1) * (mi / (SQRT(vi) / (T)bc2_sqrt + (T)a.f_eps));
  }
}
"""


# clip_grad_norm_ (Note [Multi-tensor updates]): the gradients' norms and their scaling with
# no read of the GPU. ``kind`` is the norm: 0 the 2-norm, 1 the 1-norm, 2 the inf-norm. As
# torch computes it: each tensor's norm, then the norm of those norms, then the coefficient
# clamp(max_norm / (total + 1e-6), max=1) in the gradients' dtype, and every gradient times it.
_NORM_STRUCT = _struct_dtype(("grad",), (), ("out", "kind"))
_NORM_PARTIAL_SOURCE = _c_struct("NormArgs", _NORM_STRUCT) + r"""
__device__ __forceinline__ T fold(T acc, T v, long long kind) {
  v = v < (T)0 ? -v : v;
  if (kind == 0) return acc + v * v;
  if (kind == 1) return acc + v;
  return (v != v || v > acc) ? v : acc;  // max, a NaN wins
}
__device__ __forceinline__ T combine(T a, T b, long long kind) {
  if (kind == 2) return (b != b || b > a) ? b : a;
  return a + b;
}
extern "C" __global__ void NAME(const NormArgs a) {
  __shared__ T red[THREADS];
  const int t = blockIdx.y;
  const long long n = a.numel[t];
  const T* g = (const T*)a.grad[t];
  T acc = 0;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) acc = fold(acc, g[i], a.kind);
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = combine(red[threadIdx.x], red[threadIdx.x + s], a.kind);
    __syncthreads();
  }
  if (threadIdx.x == 0) ((T*)a.out)[(long long)t * gridDim.x + blockIdx.x] = red[0];
}
""".replace("THREADS", str(_THREADS))

# One block per tensor: its blocks' partials, then its norm (the root of the sum of squares).
_NORM_FINISH_SOURCE = r"""
extern "C" __global__ void NAME(const T* partial, const long long blocks, const long long kind, T* norms) {
  __shared__ T red[THREADS];
  const T* p = partial + (long long)blockIdx.x * blocks;
  T acc = 0;
  for (long long j = threadIdx.x; j < blocks; j += THREADS) {
    T v = p[j];
    acc = kind == 2 ? ((v != v || v > acc) ? v : acc) : acc + v;
  }
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      T b = red[threadIdx.x + s];
      red[threadIdx.x] = kind == 2 ? ((b != b || b > red[threadIdx.x]) ? b : red[threadIdx.x]) : red[threadIdx.x] + b;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) norms[blockIdx.x] = kind == 0 ? SQRT(red[0]) : red[0];
}
""".replace("THREADS", str(_THREADS))

# One block: the norm of the norms, written to out[0], and the clipping coefficient to out[1].
_NORM_TOTAL_SOURCE = r"""
extern "C" __global__ void NAME(const T* norms, const long long count, const long long kind,
                                const double max_norm, T* out) {
  __shared__ T red[THREADS];
  T acc = 0;
  for (long long j = threadIdx.x; j < count; j += THREADS) {
    T v = norms[j];
    acc = kind == 0 ? acc + v * v : (kind == 1 ? acc + v : ((v != v || v > acc) ? v : acc));
  }
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      T b = red[threadIdx.x + s];
      red[threadIdx.x] = kind == 2 ? ((b != b || b > red[threadIdx.x]) ? b : red[threadIdx.x]) : red[threadIdx.x] + b;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const T total = kind == 0 ? SQRT(red[0]) : red[0];
    const T c = (T)max_norm / (total + (T)1e-6);
    out[0] = total;
    out[1] = (c != c || c < (T)1) ? c : (T)1;  // clamp(max=1); a NaN stays NaN, as torch's clamp
  }
}
""".replace("THREADS", str(_THREADS))

_SCALE_SOURCE = _c_struct("NormArgs", _NORM_STRUCT) + r"""
extern "C" __global__ void NAME(const NormArgs a) {
  const int t = blockIdx.y;
  const long long n = a.numel[t];
  T* g = (T*)a.grad[t];
  const T c = *(const T*)a.out;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) g[i] = g[i] * c;
}
"""
_NORM_KINDS = {2.0: 0, 1.0: 1, math.inf: 2}
_NORM_BLOCKS_X = 64  # partial sums per tensor: few enough for one block to finish them


# cross_entropy's forward on (N, C) logits: one block per row computes the row's log_softmax
# as ops/activation.py's _shifted does (shifted by the row's max, NaN-propagating; a row whose
# max is +inf, or that is all -inf, comes out NaN, as torch's), writes it, and writes the
# row's loss ``-lsm[row, t[row]]`` with the same expression, so the loss equals what the
# separate kernels gave from the same lsm.
_CE_BLOCK = 256
_LOG_SOFTMAX_NLL_SOURCE = r"""
extern "C" __global__ void NAME(const T* __restrict__ x, const long long* __restrict__ t,
                                T* __restrict__ lsm, T* __restrict__ picked, const long long C) {
  __shared__ T red[BLOCK];
  const long long row = blockIdx.x;
  const T* xr = x + row * C;
  T* out = lsm + row * C;
  T m = xr[0];  // (C > 0) a NaN anywhere in the row makes m NaN, and it stays NaN
  for (long long j = threadIdx.x; j < C; j += BLOCK) { T v = xr[j]; if (v != v || v > m) m = v; }
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) { T b = red[threadIdx.x + s]; if (b != b || b > red[threadIdx.x]) red[threadIdx.x] = b; }
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  const T shift = m;
  T sum = 0;
  for (long long j = threadIdx.x; j < C; j += BLOCK) sum += EXP(xr[j] - shift);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const T lse = LOG(red[0]);
  for (long long j = threadIdx.x; j < C; j += BLOCK) out[j] = (xr[j] - shift) - lse;
  if (threadIdx.x == 0) picked[row] = -((xr[t[row]] - shift) - lse);
}
""".replace("BLOCK", str(_CE_BLOCK))


# layer_norm over the last N elements of each row (ops/nn.py's layer_norm): one block a row, the
# mean and the variance in two passes as the plain formula computes them, then the output; the
# backward's dx likewise, from the saved mean and rstd. ``has_w``/``has_b``: whether ``w``/``b``
# are given (when not, the caller passes ``x`` in their place, never read).
_LN_BLOCK = 256
_LN_REDUCE = r"""
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) { RED }
    __syncthreads();
  }
"""
_LAYER_NORM_SOURCE = (r"""
extern "C" __global__ void NAME(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                T* __restrict__ y, T* __restrict__ mean, T* __restrict__ rstd,
                                const long long N, const double eps, const long long has_w, const long long has_b) {
  __shared__ T red[BLOCK];
  const long long row = blockIdx.x;
  const T* xr = x + row * N;
  T* yr = y + row * N;
  T sum = 0;
  for (long long j = threadIdx.x; j < N; j += BLOCK) sum += xr[j];
  red[threadIdx.x] = sum;""" + _LN_REDUCE.replace("RED", "red[threadIdx.x] += red[threadIdx.x + s];") + r"""
  const T mu = red[0] / (T)N;
  __syncthreads();
  T sq = 0;
  for (long long j = threadIdx.x; j < N; j += BLOCK) { T d = xr[j] - mu; sq += d * d; }
  red[threadIdx.x] = sq;""" + _LN_REDUCE.replace("RED", "red[threadIdx.x] += red[threadIdx.x + s];") + r"""
  const T r = (T)1 / SQRT(red[0] / (T)N + (T)eps);
  for (long long j = threadIdx.x; j < N; j += BLOCK) {
    T v = (xr[j] - mu) * r;
    if (has_w) v *= w[j];
    if (has_b) v += b[j];
    yr[j] = v;
  }
  if (threadIdx.x == 0) { mean[row] = mu; rstd[row] = r; }
}
""").replace("BLOCK", str(_LN_BLOCK))
_LAYER_NORM_BACKWARD_SOURCE = (r"""
extern "C" __global__ void NAME(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                                const T* __restrict__ mean, const T* __restrict__ rstd, T* __restrict__ dx,
                                const long long N, const long long has_w) {
  __shared__ T red1[BLOCK];
  __shared__ T red2[BLOCK];
  const long long row = blockIdx.x;
  const T* dyr = dy + row * N;
  const T* xr = x + row * N;
  const T mu = mean[row], r = rstd[row];
  T s1 = 0, s2 = 0;
  for (long long j = threadIdx.x; j < N; j += BLOCK) {
    T gh = has_w ? dyr[j] * w[j] : dyr[j];
    s1 += gh;
    s2 += gh * ((xr[j] - mu) * r);
  }
  red1[threadIdx.x] = s1;
  red2[threadIdx.x] = s2;""" + _LN_REDUCE.replace(
    "RED", "red1[threadIdx.x] += red1[threadIdx.x + s]; red2[threadIdx.x] += red2[threadIdx.x + s];") + r"""
  const T m1 = red1[0] / (T)N, m2 = red2[0] / (T)N;
  T* dxr = dx + row * N;
  for (long long j = threadIdx.x; j < N; j += BLOCK) {
    T gh = has_w ? dyr[j] * w[j] : dyr[j];
    dxr[j] = r * (gh - m1 - ((xr[j] - mu) * r) * m2);
  }
}
""").replace("BLOCK", str(_LN_BLOCK))


def _typed_source(source: str, ctype: str, name: str) -> str:
    """``source`` for element type ``ctype`` (``float`` or ``double``) as kernel ``name``. The
    math is spelled with the C functions of that type (expf, ...), which NVRTC knows without
    headers; RawKernel sources get no cupy preamble."""
    f = "f" if ctype == "float" else ""
    return (f"typedef {ctype} T;\n#define EXP exp{f}\n#define LOG log{f}\n#define SQRT sqrt{f}\n"
            + source.replace("NAME", name))


def _tensor_record(dtype: numpy.dtype, chunk: list, pointers: Sequence[str]) -> Any:
    """A zeroed struct of ``dtype`` (made by :func:`_struct_dtype`) with each tensor of
    ``chunk`` (``(i, addresses, numel)`` from ``_multi_tensor_groups``) filled in: its
    addresses under ``pointers``, in order, and its size."""
    r = numpy.zeros((), dtype)
    k = len(chunk)
    for j, field in enumerate(pointers):
        r[field][:k] = [w[j] for _, w, _ in chunk]
    r["numel"][:k] = [size for _, _, size in chunk]
    return r


def _cupy_address(a: Any) -> tuple:
    memory = a.data  # cupy's MemoryPointer: the address and the GPU it is on
    return memory.ptr, memory.device_id


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
        self._log_softmax_nll = {
            dt: xp.RawKernel(_typed_source(_LOG_SOFTMAX_NLL_SOURCE, ctype, f"threadgrad_log_softmax_nll_{ctype}"),
                             f"threadgrad_log_softmax_nll_{ctype}")
            for dt, ctype in (("f", "float"), ("d", "double"))}
        self._nll_reduce = rk("T x, int64 count", "T y", "x", "a + b", "y = a / (T)count", "0", "threadgrad_nll_reduce")
        self._mse = rk("T a, T b, int64 count", "T y", "(a - b) * (a - b)", "a + b", "y = a / (T)count", "0",
                       "threadgrad_mse")
        self._mse_grad = ek("T g, T a, T b, float64 norm", "T z", "z = (a - b) * ((T)norm * g)",
                            "threadgrad_mse_backward")
        self._targets = rk("T t, int64 ignore, int64 n", "int32 code",
                           "t == ignore ? 1 : ((t < 0 || t >= n) ? 2 : 0)", "a | b", "code = a", "0",
                           "threadgrad_class_index_check")
        self._dot = rk("T g, T y", "T s", "g * y", "a + b", "s = a", "0", "threadgrad_softmax_dot")
        self._ln_weight_grad = rk("T dy, T x, T mean, T rstd", "T dw", "dy * ((x - mean) * rstd)", "a + b", "dw = a", "0",
                                  "threadgrad_layer_norm_weight_backward")
        self._softmax = ek("T g, T y, T s", "T z", "z = y * (g - s)", "threadgrad_softmax_backward")
        self._erf = ek("T x", "T z", "z = erf(x)", "threadgrad_erf")
        self._gelu_forward = ek("T x", "T z", f"z = (T)0.5 * x * ((T)1 + erf(x * (T){_SQRT1_2!r}))", "threadgrad_gelu")
        self._gelu_tanh_forward = ek(
            "T x", "T z", f"z = (T)0.5 * x * ((T)1 + tanh((T){_TANH_K!r} * (x + (T){_TANH_C!r} * x * x * x)))",
            "threadgrad_gelu_tanh")
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
        # The multi-tensor updates (Note [Multi-tensor updates]): one RawKernel per dtype,
        # compiled on first use. The numpy stand-in of the tests has no ``cuda``: its arrays'
        # addresses are numpy's, and there is no current GPU to choose.
        self._multi = {}
        for dt, ctype in (("f", "float"), ("d", "double")):
            for name, source in (("sgd", _SGD_SOURCE), ("adam", _ADAM_SOURCE)):
                kernel_name = f"threadgrad_{name}_multi_{ctype}"
                self._multi[name, dt] = xp.RawKernel(_typed_source(source, ctype, kernel_name), kernel_name)
        for name, source in (("norm_partial", _NORM_PARTIAL_SOURCE), ("norm_finish", _NORM_FINISH_SOURCE),
                             ("norm_total", _NORM_TOTAL_SOURCE), ("scale", _SCALE_SOURCE),
                             ("layer_norm", _LAYER_NORM_SOURCE), ("layer_norm_backward", _LAYER_NORM_BACKWARD_SOURCE)):
            for dt, ctype in (("f", "float"), ("d", "double")):
                kernel_name = f"threadgrad_{name}_{ctype}"
                self._multi[name, dt] = xp.RawKernel(_typed_source(source, ctype, kernel_name), kernel_name)
        if hasattr(xp, "cuda"):
            self._address = _cupy_address
            self._on_device = lambda index: xp.cuda.Device(index)
        else:
            self._address = lambda a: (a.ctypes.data, 0)
            self._on_device = lambda index: contextlib.nullcontext()

    def erf(self, x: Any) -> Any:  # type: ignore[override]
        """CUDA's ``erf`` in one kernel (float16 through float32)."""
        if x.dtype.char in "fd":
            return self._erf(x)
        return self._erf(x.astype(numpy.float32)).astype(x.dtype)

    def gelu(self, x: Any, approximate: str) -> Any:  # type: ignore[override]
        """gelu's forward in one kernel (float16 through float32)."""
        kernel = self._gelu_tanh_forward if approximate == "tanh" else self._gelu_forward
        if x.dtype.char in "fd":
            return kernel(x)
        return kernel(x.astype(numpy.float32)).astype(x.dtype)

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

    def cross_entropy_forward(self, x: Any, t: Any, mean: bool) -> Optional[tuple]:
        """``(lsm, loss)`` of cross_entropy on (N, C) float32/64 logits ``x`` and int64 class
        indices ``t`` (all in range): ``lsm = log_softmax(x, 1)``, ``loss`` the sum (or the
        mean, when ``mean``) of ``-lsm[i, t_i]``, in two launches (the rows, then the
        reduction) instead of eleven. None when the operands do not fit the kernel (another
        target dtype, non-contiguous logits, no classes): the caller takes the ops path."""
        n, c = x.shape
        if t.dtype != numpy.int64 or c == 0 or not (x.flags.c_contiguous and t.flags.c_contiguous):
            return None
        lsm = self.xp.empty_like(x)
        picked = self.xp.empty(n, dtype=x.dtype)
        if n:
            self._log_softmax_nll[x.dtype.char]((n,), (_CE_BLOCK,), (x, t, lsm, picked, c))
        return lsm, self._nll_reduce(picked, n if mean else 1)

    def layer_norm(self, x: Any, w: Any, b: Any, eps: float) -> Optional[tuple]:
        """``(y, mean, rstd)`` of layer_norm over the last axis of the 2-D ``x`` (rows M,
        normalized size N), ``w``/``b`` of shape (N,) or None: one launch. ``mean``/``rstd``
        are (M,). None when the operands do not fit the kernel (not C-contiguous, dtypes
        other than one of float32/float64, N == 0): the caller takes the plain path."""
        m, n = x.shape
        if x.dtype.char not in "fd" or n == 0 or not x.flags.c_contiguous or any(
                a is not None and (a.dtype != x.dtype or not a.flags.c_contiguous) for a in (w, b)):
            return None
        y = self.xp.empty_like(x)
        mean = self.xp.empty(m, dtype=x.dtype)
        rstd = self.xp.empty(m, dtype=x.dtype)
        if m:
            self._multi["layer_norm", x.dtype.char]((m,), (_LN_BLOCK,), (
                x, x if w is None else w, x if b is None else b, y, mean, rstd, n, float(eps),
                int(w is not None), int(b is not None)))
        return y, mean, rstd

    def layer_norm_grad(self, dy: Any, x: Any, w: Any, mean: Any, rstd: Any, needs: tuple) -> Optional[tuple]:
        """``(dx, dw, db)`` of :meth:`layer_norm` (each None unless ``needs`` asks for it), from
        the 2-D ``dy`` and ``x`` and the saved (M,) ``mean``/``rstd``: dx in one launch (one
        block a row), dw and db one reduction over the rows each. None when the operands do
        not fit (the caller takes the ops path)."""
        m, n = x.shape
        if dy.dtype != x.dtype or not (dy.flags.c_contiguous and x.flags.c_contiguous):
            return None
        dx = dw = db = None
        if needs[0]:
            dx = self.xp.empty_like(x)
            if m:
                self._multi["layer_norm_backward", x.dtype.char]((m,), (_LN_BLOCK,), (
                    dy, x, x if w is None else w, mean, rstd, dx, n, int(w is not None)))
        if needs[1]:
            dw = self._ln_weight_grad(dy, x, mean[:, None], rstd[:, None], axis=0)
        if needs[2]:
            db = dy.sum(axis=0)
        return dx, dw, db

    def mse(self, a: Any, b: Any, mean: bool) -> Any:
        """mse_loss of same-shape, same-dtype float32/64 arrays: ``sum((a - b)**2)``, divided
        by the size when ``mean``, in one reduction."""
        return self._mse(a, b, a.size if mean else 1)

    def mse_grad(self, g: Any, a: Any, b: Any, mean: bool) -> Any:
        """:meth:`mse`'s gradient for ``a``, torch's formula ``(a - b) * (norm * g)`` with
        ``norm`` 2/size (``mean``) or 2; ``g`` is the loss's (0-d) gradient. One kernel."""
        return self._mse_grad(g, a, b, 2.0 / a.size if mean else 2.0)

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

    def _multi_tensor_groups(self, arrays: Sequence[Sequence[Any]]) -> tuple:
        """Split tensors into launches of a multi-tensor kernel and the rest.

        ``arrays[i]`` holds the arrays one tensor's update reads and writes, the parameter
        first (``None`` for an absent buffer). A tensor joins a launch when all of them are
        float32 or float64 of one dtype, C-contiguous, of one shape and on one GPU; the others
        come back in ``rest`` for the single-tensor kernels (which broadcast, promote or
        refuse as they always did), and so does a parameter met a second time (one launch
        would update it twice at once; after the launch, on the same stream, it is in order). Returns ``(launches, rest)``: ``launches`` maps ``(dtype
        name, GPU index)`` to ``[(i, [address or 0 per array], numel), ...]``."""
        # This runs once per step over every parameter, so it compares dtypes by identity
        # (numpy's built-in dtypes are singletons; any other float32 spelling, a byte-swapped
        # one say, merely takes the single-tensor path) and keys by dtype.char, not .name (a
        # Python-level property in numpy).
        launches: dict = {}
        rest = []
        seen = set()  # parameter addresses: a parameter listed twice is updated twice, in order
        address = self._address
        for i, group in enumerate(arrays):
            first = group[0]
            dtype, shape = first.dtype, first.shape
            if dtype is not _F32 and dtype is not _F64:
                rest.append(i)
                continue
            where = []
            device = None
            for a in group:
                if a is None:
                    where.append(0)
                    continue
                if a.dtype is not dtype or a.shape != shape or not a.flags.c_contiguous:
                    break
                ptr, index = address(a)
                if device is not None and index != device:
                    break
                device = index
                where.append(ptr)
            else:
                if where[0] not in seen:
                    seen.add(where[0])
                    launches.setdefault((dtype.char, device), []).append((i, where, first.size))
                    continue
            rest.append(i)
        return launches, rest

    def _launch_multi(self, name: str, dtype: str, device: int, record: Any, count: int, largest: int) -> None:
        # (dtype: a dtype.char, "f" or "d")
        """Launch the multi-tensor kernel ``name`` on GPU ``device`` for the ``count`` tensors
        of ``record``: a row of blocks per tensor (``blockIdx.y``), enough for the largest."""
        blocks = min(-(-largest // _THREADS), _MAX_BLOCKS_X)
        if blocks == 0:
            return  # every tensor of the launch is empty
        with self._on_device(device):  # the kernel runs on the current GPU: make it theirs
            self._multi[name, dtype]((blocks, count), (_THREADS,), (record[()],))

    def sgd(self, params: Sequence[Any], grads: Sequence[Any], momentum_buffers: list, *, lr: float,  # type: ignore[override]
            momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
            nesterov: bool = False, maximize: bool = False) -> None:
        """:func:`plain_sgd`, one kernel launch per 32 parameters (Note [Multi-tensor updates])."""
        n = len(params)
        first = [False] * n
        if momentum != 0:
            for i in range(n):  # a first step: the kernel writes the new buffer
                if momentum_buffers[i] is None and params[i].dtype.char in "fd" and params[i].dtype == grads[i].dtype:
                    momentum_buffers[i] = self.xp.empty_like(params[i])
                    first[i] = True
            bufs = momentum_buffers
        else:
            bufs = [None] * n
        launches, rest = self._multi_tensor_groups([(params[i], grads[i], bufs[i]) for i in range(n)])
        for (dtype, device), items in launches.items():
            for c in range(0, len(items), _SLOTS):
                chunk = items[c:c + _SLOTS]
                k = len(chunk)
                r = _tensor_record(_SGD_STRUCT, chunk, ("param", "grad", "buf"))
                r["first"][:k] = [first[i] for i, _, _ in chunk]
                r["f_lr"], r["f_wd"], r["f_momentum"], r["f_dampening"] = lr, weight_decay, momentum, dampening
                r["nesterov"], r["maximize"] = nesterov, maximize
                self._launch_multi("sgd", dtype, device, r, k, max(size for _, _, size in chunk))
        for i in rest:
            p, g = params[i], grads[i]
            if p.dtype != g.dtype or p.dtype.char not in "fd":  # the kernels take float32/64
                bufs_i = momentum_buffers[i:i + 1]
                plain_sgd([p], [g], bufs_i, lr=lr, momentum=momentum, dampening=dampening,
                          weight_decay=weight_decay, nesterov=nesterov, maximize=maximize)
                momentum_buffers[i] = bufs_i[0]
            elif momentum == 0:
                self._sgd(g, lr, weight_decay, maximize, p)
            else:
                self._sgd_momentum(g, lr, weight_decay, momentum, dampening, nesterov, maximize, first[i], p,
                                   momentum_buffers[i])

    def adam(self, params: Sequence[Any], grads: Sequence[Any], exp_avgs: Sequence[Any],  # type: ignore[override]
             exp_avg_sqs: Sequence[Any], max_exp_avg_sqs: Optional[Sequence[Any]], steps: Union[int, Sequence[int]],
             *, lr: float, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0,
             amsgrad: bool = False, maximize: bool = False, decoupled_weight_decay: bool = False) -> None:
        """:func:`plain_adam`, one kernel launch per 32 parameters (Note [Multi-tensor updates])."""
        n = len(params)
        steps = [steps] * n if isinstance(steps, int) else steps
        maxes = max_exp_avg_sqs if amsgrad else [None] * n
        launches, rest = self._multi_tensor_groups(
            [(params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], maxes[i]) for i in range(n)])
        for (dtype, device), items in launches.items():
            for c in range(0, len(items), _SLOTS):
                chunk = items[c:c + _SLOTS]
                k = len(chunk)
                r = _tensor_record(_ADAM_STRUCT, chunk, ("param", "grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"))
                r["f_bc1"][:k] = [1 - beta1 ** steps[i] for i, _, _ in chunk]
                r["f_bc2_sqrt"][:k] = [math.sqrt(1 - beta2 ** steps[i]) for i, _, _ in chunk]
                r["f_lr"], r["f_beta1"], r["f_beta2"], r["f_eps"], r["f_wd"] = lr, beta1, beta2, eps, weight_decay
                r["maximize"], r["decoupled"], r["amsgrad"] = maximize, decoupled_weight_decay, amsgrad
                self._launch_multi("adam", dtype, device, r, k, max(size for _, _, size in chunk))
        for i in rest:
            p, g, m, v = params[i], grads[i], exp_avgs[i], exp_avg_sqs[i]
            if p.dtype != g.dtype or p.dtype.char not in "fd":  # the kernels take float32/64
                plain_adam([p], [g], [m], [v], None if not amsgrad else [maxes[i]], steps[i],
                           lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                           maximize=maximize, decoupled_weight_decay=decoupled_weight_decay)
                continue
            bc1, bc2_sqrt = 1 - beta1 ** steps[i], math.sqrt(1 - beta2 ** steps[i])
            args = (g, lr, beta1, beta2, eps, weight_decay, bc1, bc2_sqrt, maximize, decoupled_weight_decay, p, m, v)
            if amsgrad:
                self._adam_amsgrad(*args, maxes[i])
            else:
                self._adam(*args)


    def clip_norm(self, grads: Sequence[Any], max_norm: float, norm_type: float) -> Optional[Any]:
        """The first half of ``clip_grad_norm_`` over raw gradient arrays, with no read of the
        GPU: a (2,) array of their dtype holding the total ``norm_type`` norm and the clipping
        coefficient ``clamp(max_norm / (total + 1e-6), max=1)``, in four launches for up to 32
        gradients. None when the arrays do not fit the kernels (another norm than 1, 2 or inf,
        mixed dtypes, a non-contiguous or repeated array, several GPUs, none at all, an empty
        one with the inf-norm): the caller computes it with ops. See Note [Multi-tensor updates]."""
        kind = _NORM_KINDS.get(float(norm_type))
        if kind is None or not grads or (kind == 2 and any(g.size == 0 for g in grads)):
            return None  # (the inf-norm of an empty gradient is torch's error, which the ops raise)
        launches, rest = self._multi_tensor_groups([(g,) for g in grads])
        if rest or len(launches) != 1:
            return None
        ((dtype, device), items), = launches.items()
        xp = self.xp
        largest = max(size for _, _, size in items)
        blocks = max(1, min(-(-largest // _THREADS), _NORM_BLOCKS_X))
        with self._on_device(device):
            first = grads[items[0][0]]
            partial = xp.empty(_SLOTS * blocks, dtype=first.dtype)
            norms = xp.empty(len(items), dtype=first.dtype)
            out = xp.empty(2, dtype=first.dtype)
            for c in range(0, len(items), _SLOTS):
                chunk = items[c:c + _SLOTS]
                k = len(chunk)
                r = _tensor_record(_NORM_STRUCT, chunk, ("grad",))
                r["out"], r["kind"] = self._address(partial)[0], kind
                self._multi["norm_partial", dtype]((blocks, k), (_THREADS,), (r[()],))
                self._multi["norm_finish", dtype]((k,), (_THREADS,), (partial, blocks, kind, norms[c:c + k]))
            self._multi["norm_total", dtype]((1,), (_THREADS,), (norms, len(items), kind, float(max_norm), out))
        return out

    def scale_(self, grads: Sequence[Any], coef: Any) -> None:
        """Multiply every array of ``grads`` in place by the one-element device array ``coef``
        (:meth:`clip_norm`'s ``out[1:]``), in one launch per 32 arrays, with no read of the
        GPU; for the arrays :meth:`clip_norm` accepted."""
        launches, rest = self._multi_tensor_groups([(g,) for g in grads])
        assert not rest and len(launches) == 1, "scale_ takes the arrays clip_norm took"
        ((dtype, device), items), = launches.items()
        address = self._address(coef)[0]
        for c in range(0, len(items), _SLOTS):
            chunk = items[c:c + _SLOTS]
            k = len(chunk)
            r = _tensor_record(_NORM_STRUCT, chunk, ("grad",))
            r["out"] = address
            self._launch_multi("scale", dtype, device, r, k, max(size for _, _, size in chunk))


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
