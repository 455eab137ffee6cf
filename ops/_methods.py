"""Tensor's operators and op methods, bound to the ops defined in this package.

Kept in one table so that each op stays defined once (in its module) and the Tensor class
in engine/ knows nothing of individual operators. In-place methods live in inplace.py.
"""
from __future__ import annotations

from typing import Any

import numpy

from ..engine.tensor import Tensor, _wrap, add_methods

from . import activation, decomp, device, elementwise, index, linalg, nn, reduce, shape, stats
from . import math as pointwise
from . import rearrange, scatter
from ._core import binary_operands, normalize_dim
from . import order, scan


def _rev(fn: Any) -> Any:
    def reflected(self: Tensor, other: Any) -> Tensor:
        return fn(other, self)

    reflected.__name__ = f"r{fn.__name__}"
    return reflected


def _compare(ufunc_name: str) -> Any:
    def compare(self: Tensor, other: Any) -> Tensor:
        a, b = binary_operands(self, other, ufunc_name)
        return _wrap(a.device.xp.asarray(getattr(a.device.xp, ufunc_name)(a._data, b._data)), a.device)

    compare.__name__ = f"__{ufunc_name}__"
    return compare


def _shape_args(shape: tuple) -> Any:
    return shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape


_METHODS: dict[str, Any] = {
    "__add__": elementwise.add, "__radd__": _rev(elementwise.add),
    "__sub__": elementwise.sub, "__rsub__": _rev(elementwise.sub),
    "__mul__": elementwise.mul, "__rmul__": _rev(elementwise.mul),
    "__truediv__": elementwise.div, "__rtruediv__": _rev(elementwise.div),
    "__pow__": elementwise.pow, "__rpow__": _rev(elementwise.pow),
    "__matmul__": linalg.matmul, "__rmatmul__": _rev(linalg.matmul),
    "__neg__": elementwise.neg, "__abs__": elementwise.abs,
    "__getitem__": index.getitem,
    "__lt__": _compare("less"), "__le__": _compare("less_equal"),
    "__gt__": _compare("greater"), "__ge__": _compare("greater_equal"),
    "__eq__": _compare("equal"), "__ne__": _compare("not_equal"),
    "add": elementwise.add, "sub": elementwise.sub, "mul": elementwise.mul, "div": elementwise.div,
    "neg": elementwise.neg, "pow": elementwise.pow, "matmul": linalg.matmul,
    "exp": elementwise.exp, "log": elementwise.log, "sqrt": elementwise.sqrt, "abs": elementwise.abs,
    "sin": elementwise.sin, "cos": elementwise.cos, "tanh": elementwise.tanh,
    **{name: getattr(pointwise, name) for name in (
        "log1p", "expm1", "log2", "log10", "exp2", "rsqrt", "reciprocal", "square", "sinh", "cosh", "asin", "acos",
        "atan", "asinh", "acosh", "atanh", "floor", "ceil", "trunc", "round", "sign", "frac", "isnan", "isinf",
        "isfinite", "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and", "bitwise_or",
        "bitwise_xor", "bitwise_not", "remainder", "floor_divide", "cumsum", "any", "all", "count_nonzero",
        "isclose", "allclose", "equal", "atan2", "hypot", "fmod", "clamp_min", "clamp_max", "lerp", "addcmul",
        "addcdiv", "amax", "amin", "sort", "argsort")},
    "bmm": linalg.bmm, "dot": linalg.dot, "mv": linalg.mv, "outer": linalg.outer,
    # linear algebra (issue 31)
    **{name: getattr(linalg, name) for name in ("vdot", "addmm", "addmv", "baddbmm", "kron")},
    **{name: getattr(decomp, name) for name in ("det", "inverse", "slogdet", "logdet", "svd", "qr", "cholesky",
                                                "pinverse")},
    "__and__": pointwise.bitwise_and, "__rand__": _rev(pointwise.bitwise_and),
    "__or__": pointwise.bitwise_or, "__ror__": _rev(pointwise.bitwise_or),
    "__xor__": pointwise.bitwise_xor, "__rxor__": _rev(pointwise.bitwise_xor),
    "__invert__": pointwise.bitwise_not,
    "__lshift__": pointwise.bitwise_left_shift, "__rlshift__": _rev(pointwise.bitwise_left_shift),
    "__rshift__": pointwise.bitwise_right_shift, "__rrshift__": _rev(pointwise.bitwise_right_shift),
    "__mod__": pointwise.remainder, "__rmod__": _rev(pointwise.remainder),
    "__floordiv__": pointwise.floor_divide, "__rfloordiv__": _rev(pointwise.floor_divide),
    "clamp": elementwise.clamp, "maximum": elementwise.maximum, "minimum": elementwise.minimum,
    "sigmoid": activation.sigmoid, "relu": activation.relu,
    "softmax": activation.softmax, "log_softmax": activation.log_softmax,
    "sum": reduce.sum, "mean": reduce.mean, "max": reduce.max, "min": reduce.min, "logsumexp": reduce.logsumexp,
    "reshape": lambda self, *s: shape.reshape(self, _shape_args(s)),
    "view": lambda self, *s: shape.reshape(self, _shape_args(s)),
    "expand": lambda self, *s: shape.expand(self, _shape_args(s)),
    "permute": lambda self, *d: shape.permute(self, _shape_args(d)),
    "transpose": shape.transpose,
    "squeeze": shape.squeeze, "unsqueeze": shape.unsqueeze,
    "split": shape.split, "gather": index.gather,
    "to": lambda self, device=None, dtype=None: device_to(self, device, dtype),
    "clone": device.clone,
    # torch's everyday spellings
    "float": lambda self: device.to(self, None, "float32"),
    "double": lambda self: device.to(self, None, "float64"),
    "half": lambda self: device.to(self, None, "float16"),
    "long": lambda self: device.to(self, None, "int64"),
    "int": lambda self: device.to(self, None, "int32"),
    "bool": lambda self: device.to(self, None, "bool"),
    "cuda": lambda self, device=None: device_to(self, _cuda_spec(device), None),
    "t": lambda self: _t(self),
    "flatten": lambda self, start_dim=0, end_dim=-1: flatten(self, start_dim, end_dim),
    "argmax": reduce.argmax, "argmin": reduce.argmin,
    "var": stats.var, "std": stats.std, "norm": stats.norm,
    "where": lambda self, condition, other: elementwise.where(condition, self, other),
    "expand_as": lambda self, other: shape.expand(self, other.shape),
    **{name: getattr(scan, name) for name in (
        "prod", "cumprod", "cummax", "cummin", "logcumsumexp", "aminmax", "nansum", "nanmean")},
    **{name: getattr(order, name) for name in (
        "median", "nanmedian", "topk", "kthvalue", "mode", "unique", "histc", "bincount")},
    "reshape_as": lambda self, other: shape.reshape(self, other.shape),
    "view_as": lambda self, other: shape.reshape(self, other.shape),
    # indexing and shape ops of issue 31 (item 4)
    "nonzero": index.nonzero, "argwhere": index.argwhere, **scatter.METHODS, **rearrange.METHODS,
}


def _cuda_spec(device: Any) -> str:
    if device is None:
        return "cuda"
    return f"cuda:{device}" if isinstance(device, int) else device


def _t(x: Tensor) -> Tensor:
    """torch's ``t()``: the transpose of a matrix; vectors and scalars come back unchanged."""
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return shape.transpose(x, 0, 1) if x.ndim == 2 else shape.reshape(x, x.shape)


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """``x`` with dims ``start_dim..end_dim`` merged into one (a 0-d tensor becomes 1-d), as
    ``torch.flatten``.

    >>> from threadgrad import engine
    >>> engine.ones(2, 3, 4).flatten(1).shape
    (2, 12)
    """
    if x.ndim == 0:
        return shape.reshape(x, (1,))
    s = normalize_dim(start_dim, x.ndim, "flatten")
    e = normalize_dim(end_dim, x.ndim, "flatten")
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    n = 1
    for d in x.shape[s:e + 1]:
        n *= d
    return shape.reshape(x, x.shape[:s] + (n,) + x.shape[e + 1:])


def device_to(t: Tensor, device_or_dtype: Any, dtype: Any) -> Tensor:
    """``t.to(device)``, ``t.to(dtype)`` or ``t.to(device, dtype)``."""
    if dtype is None and device_or_dtype is not None and not isinstance(device_or_dtype, str) and not hasattr(device_or_dtype, "xp"):
        try:
            return device.to(t, None, numpy.dtype(device_or_dtype))
        except TypeError:
            pass
    return device.to(t, device_or_dtype, dtype)


add_methods(_METHODS)
add_methods({"T": property(lambda self: shape.permute(self, tuple(reversed(range(self.ndim)))))})


# linear algebra (issue 31): a batch of matrices transposed (mH conjugates too: the same on real dtypes)
def _matrices_transposed(attr: str) -> property:
    def get(self: Tensor) -> Tensor:
        if self.ndim < 2:
            raise RuntimeError(f"tensor.{attr} is only supported on matrices or batches of matrices. Got "
                               f"{self.ndim}-D tensor.")
        return shape.transpose(self, -1, -2)
    return property(get)


add_methods({"mT": _matrices_transposed("mT"), "mH": _matrices_transposed("mH")})
