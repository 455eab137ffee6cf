"""``tg.nn.init``: torch's initializers, in place, outside the graph.

Each fills its tensor from the distribution torch's does (same bounds, same fan computations,
same gains), drawn from threadgrad's generator (``tg.manual_seed``) or from ``generator=`` (a
``tg.Generator``); the numbers themselves differ from torch's, the distributions do not.

>>> import threadgrad as tg
>>> w = tg.empty(3, 5)
>>> _ = tg.nn.init.kaiming_uniform_(w, a=5 ** 0.5)  # Linear's default: bound 1/sqrt(fan_in)
>>> bool(w.abs().max().item() <= 5 ** -0.5)
True
"""
from __future__ import annotations

import math
import warnings
from typing import Any

import numpy

from ..engine import creation
from ..engine.grad_mode import no_grad
from ..engine.tensor import Tensor

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_",
           "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
           "sparse_"]


def _draw(kind: str, shape: tuple, generator: Any) -> numpy.ndarray:
    """float64 host samples, from ``generator`` (a ``tg.Generator``) or the global one."""
    if generator is not None:
        return generator._draw(kind, shape)
    return creation.random_array(kind, shape, numpy.float64)


def _fill(tensor: Tensor, host: Any) -> Tensor:
    """Write ``host`` values into ``tensor`` in place (a version bump, no history)."""
    with no_grad():
        tensor.copy_(Tensor(numpy.asarray(host, dtype=tensor.dtype), tensor.device))
    return tensor


def _no_op_if_empty(tensor: Tensor) -> bool:
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return True
    return False


def calculate_gain(nonlinearity: str, param: Any = None) -> float:
    """The recommended gain for ``nonlinearity`` (torch's table: ``relu`` sqrt(2), ``tanh``
    5/3, ``leaky_relu`` sqrt(2 / (1 + slope^2)), ``selu`` 3/4, linear ones 1)."""
    linear_fns = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                  "conv_transpose3d"]
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Any = None) -> Tensor:
    """Fill with U(a, b)."""
    return _fill(tensor, a + (b - a) * _draw("uniform", tensor.shape, generator))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> Tensor:
    """Fill with N(mean, std^2)."""
    return _fill(tensor, mean + std * _draw("normal", tensor.shape, generator))


def _norm_cdf(x: float) -> float:
    return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0


def _erfinv(y: numpy.ndarray) -> numpy.ndarray:
    """Inverse error function of float64 ``y`` in (-1, 1): Giles' approximation refined by two
    Newton steps (exact to float64 rounding, without scipy)."""
    w = -numpy.log((1.0 - y) * (1.0 + y))
    small = w < 5.0
    ws = w - 2.5
    ps = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
              0.246640727, 1.50140941):
        ps = c + ps * ws
    wl = numpy.sqrt(numpy.maximum(w, 5.0)) - 3.0
    pl = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
              1.00167406, 2.83297682):
        pl = c + pl * wl
    x = numpy.where(small, ps, pl) * y
    erf = numpy.vectorize(math.erf, otypes=[numpy.float64])
    for _ in range(2):  # Newton on erf(x) = y
        x = x - (erf(x) - y) / (2.0 / math.sqrt(math.pi) * numpy.exp(-x * x))
    return x


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator: Any = None) -> Tensor:
    """Fill with N(mean, std^2) truncated to ``[a, b]`` (torch's inverse-CDF method)."""
    if (mean < a - 2 * std) or (mean > b + 2 * std):
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution of values "
                      "may be incorrect.", stacklevel=2)
    lo = _norm_cdf((a - mean) / std)
    hi = _norm_cdf((b - mean) / std)
    u = _draw("uniform", tensor.shape, generator) * (hi - lo) + lo  # U(lo, hi)
    x = _erfinv(numpy.clip(2 * u - 1, -1 + 1e-15, 1 - 1e-15)) * (std * math.sqrt(2.0)) + mean
    return _fill(tensor, numpy.clip(x, a, b))


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill with ``val``."""
    with no_grad():
        tensor.fill_(val)
    return tensor


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def eye_(tensor: Tensor) -> Tensor:
    """The identity matrix (a 2-D tensor only, as torch's)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _fill(tensor, numpy.eye(*tensor.shape))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """The Dirac delta for {3, 4, 5}-D convolution weights (identity of the channels)."""
    dims = tensor.ndim
    if dims not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    sizes = tensor.shape
    if sizes[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    out_chans_per_grp = sizes[0] // groups
    min_dim = min(out_chans_per_grp, sizes[1])
    host = numpy.zeros(sizes)
    for g in range(groups):
        for d in range(min_dim):
            centre = tuple(s // 2 for s in sizes[2:])
            host[(g * out_chans_per_grp + d, d) + centre] = 1
    return _fill(tensor, host)


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of ['fan_in', 'fan_out']")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    """U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot & Bengio)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    a = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    """N(0, std^2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator: Any = None) -> Tensor:
    """U(-bound, bound) with ``bound = gain * sqrt(3 / fan)`` (He et al.); ``a`` is the
    negative slope of ``leaky_relu``. ``a=sqrt(5)`` is Linear's and Conv's default."""
    if _no_op_if_empty(tensor):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    gain = calculate_gain(nonlinearity, a)
    bound = math.sqrt(3.0) * gain / math.sqrt(fan)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator: Any = None) -> Tensor:
    """N(0, std^2) with ``std = gain / sqrt(fan)``."""
    if _no_op_if_empty(tensor):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return normal_(tensor, 0.0, std, generator)


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    """A (semi-)orthogonal matrix (rows flattened past dim 0), from the QR of a normal matrix
    with the signs fixed as torch does, times ``gain``."""
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = _draw("normal", (rows, cols), generator)
    if rows < cols:
        flat = flat.T
    q, r = numpy.linalg.qr(flat)
    q = q * numpy.sign(numpy.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, (gain * q).reshape(tensor.shape))


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01, generator: Any = None) -> Tensor:
    """A 2-D tensor with a ``sparsity`` fraction of each column zero, the rest N(0, std^2)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    num_zeros = int(math.ceil(sparsity * rows))
    host = std * _draw("normal", (rows, cols), generator)
    for c in range(cols):
        order = numpy.argsort(_draw("uniform", (rows,), generator), kind="stable")
        host[order[:num_zeros], c] = 0
    return _fill(tensor, host)
