"""What every op module shares: the registry, operand checks, and reducing broadcast gradients.

Note [Op definitions]
~~~~~~~~~~~~~~~~~~~~~
An op is one function and one Node subclass side by side in one module (STYLE.md habit 1):
the function computes the forward on arrays (``x.data``, through ``x.device.xp`` only) and,
when :func:`needs_grad` says so, calls :func:`record` with the node, the inputs and what the
backward must save. The node's ``backward`` is written with ops, never with raw arrays, so
that under ``create_graph=True`` it records a graph of its own (double backward). It checks
``self.next_edges[i][0] is not None`` (the input needs a gradient) before computing one.
``@register`` puts the function in REGISTRY, which the test suite enumerates: an op without
test samples fails the suite.
"""
from __future__ import annotations

from numbers import Number
from typing import Any, Callable, TypeVar

import numpy

from engine._record import needs_grad, record  # noqa: F401 - re-exported for op modules
from engine._state import tls  # noqa: F401
from engine.graph import Node  # noqa: F401
from engine.tensor import Tensor, _wrap

REGISTRY: dict[str, Callable[..., Any]] = {}

F = TypeVar("F", bound=Callable[..., Any])


def register(fn: F) -> F:
    """Add a public op to REGISTRY under its function name."""
    REGISTRY[fn.__name__] = fn
    return fn


def device_error(name: str, a: Tensor, b: Tensor) -> RuntimeError:
    return RuntimeError(
        f"{name}: expected all tensors to be on the same device, but found at least two devices, "
        f"{a.device} and {b.device}; move one with .to('{a.device}') or ops.to(t, '{a.device}')"
    )


def check_tensor(x: Any, name: str, arg: str = "input") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: argument '{arg}' must be a Tensor, got {type(x).__name__}")
    return x


def as_operand(x: Any, like: Tensor, name: str) -> Tensor:
    """A non-Tensor operand (number, list, array) as a constant tensor on ``like``'s device.

    Python numbers take ``like``'s dtype (torch's rule: ``float32_tensor * 2.0`` stays
    float32), except a float with an integer tensor, which gives the default float32.
    """
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (bool, Number)) and not isinstance(x, numpy.ndarray):
        if like.dtype.kind in "fc" or isinstance(x, (bool, int, numpy.integer)):
            dt = like.dtype
        else:
            dt = numpy.float32
        return _wrap(like.device.xp.asarray(x, dtype=dt), like.device)
    try:
        return _wrap(like.device.asarray(x), like.device)
    except Exception:
        raise TypeError(f"{name}: unsupported operand of type {type(x).__name__}") from None


def binary_operands(a: Any, b: Any, name: str) -> tuple[Tensor, Tensor]:
    """Both operands as tensors on one device; raises naming both devices otherwise."""
    if type(a) is Tensor and type(b) is Tensor:
        if a.device is not b.device:
            raise device_error(name, a, b)
        return a, b
    if isinstance(a, Tensor):
        b = as_operand(b, a, name)
    elif isinstance(b, Tensor):
        a = as_operand(a, b, name)
    else:
        raise TypeError(f"{name}: expected a Tensor operand, got {type(a).__name__} and {type(b).__name__}")
    if a.device is not b.device:
        raise device_error(name, a, b)
    return a, b


def normalize_dim(dim: int, ndim: int, name: str) -> int:
    if not isinstance(dim, (int, numpy.integer)):
        raise TypeError(f"{name}: dim must be an int, got {type(dim).__name__}")
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"{name}: Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return int(dim) % n


def normalize_dims(dim: Any, ndim: int, name: str) -> tuple[int, ...]:
    """``None`` -> every dim; an int or a sequence -> sorted, non-negative, unique dims."""
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, (int, numpy.integer)) else tuple(dim)
    out = sorted({normalize_dim(d, ndim, name) for d in dims})
    if ndim == 0:
        return ()
    return tuple(out)


def sum_to(g: Tensor, shape: tuple) -> Tensor:
    """Reduce a broadcast gradient back to ``shape`` (differentiable: built from ops)."""
    if g.shape == shape:
        return g
    from .reduce import sum as _sum
    from .shape import reshape

    lead = g.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1)
    if dims:
        g = _sum(g, dims, keepdim=True)
    return reshape(g, shape)


def fit(g: Tensor, shape: tuple, dtype: numpy.dtype) -> Tensor:
    """The gradient for an input of ``shape``/``dtype``: broadcast dims summed away, dtype cast back."""
    g = sum_to(g, shape)
    if g.dtype != dtype:
        from .device import to

        g = to(g, dtype=dtype)
    return g
