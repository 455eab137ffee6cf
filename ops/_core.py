"""What every op module shares: the registry, operand checks, and reducing broadcast gradients.

Note [Op definitions]
~~~~~~~~~~~~~~~~~~~~~
An op is one function and one Node subclass side by side in one module (forward and backward
in one place, registered in one table that tests and docs enumerate):
the function computes the forward on arrays (``x._data``, through ``x.device.xp`` only) and,
when :func:`needs_grad` says so, calls :func:`record` with the node, the inputs and what the
backward must save (one-output ops with one or two inputs: :func:`record_unary` /
:func:`record_binary`, Note [Fast recorders] in engine/_record.py). Elementwise ops hand
their result array to :func:`unary_result` / :func:`binary_result` instead, which make the
output Tensor and do the grad-mode test and the recording in the same call (Note [Result
makers] in engine/_record.py). The node's ``backward``
is written with ops, never with raw arrays, so that under ``create_graph=True`` it records a
graph of its own (double backward). It checks ``self.next_edges[i][0] is not None`` (the
input needs a gradient) before computing one. ``@register`` puts the function in REGISTRY,
which the test suite enumerates: an op without test samples fails the suite.

Note [First-order formulas]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
Most backward calls record nothing: grad mode is off in backward unless ``create_graph=True``
(the executor installs it per GraphTask). Then a formula written with ops pays, for every
op it calls, the checks a user-facing op needs (operand types, devices, dtype promotion,
``fit``) and a Tensor per intermediate: about 1.5 us of a 2-4 us node. So the hottest nodes
(those a training step runs most) carry a second form of their formula, under
``if not tls.grad_enabled``, that computes on the arrays (``self.saved_arrays()``, ``g._data``)
and wraps only the gradients it returns, through :func:`grad_of` (which undoes broadcasting
and dtype promotion as ``fit`` does, on arrays: :func:`sum_to_array`; ``fit`` itself takes that
path when no graph is recorded). The ops form stays the definition and
serves ``create_graph``. ``test_first_order_formulas_match_create_graph`` runs every op sample
both ways and requires equal gradients, so neither form can drift from the other.
"""
from __future__ import annotations

from numbers import Number
from typing import Any, Callable, TypeVar

import numpy

from ..engine._record import (OUTPUT, binary_result, needs_grad, record, record_binary, record_unary,  # noqa: F401 - re-exported
                            unary_result)  # for op modules
from ..engine import _state
from ..engine._state import tls  # noqa: F401
from ..engine.dtypes import CATEGORY, promoted, result_dtype  # noqa: F401 - re-exported for op modules
from ..engine.graph import Node, set_retains_grad  # noqa: F401
from ..engine.tensor import Tensor, WrappedNumber, _wrap
from ..engine._locks import LOCKS  # read at use: See Note [Locks across fork] in engine/_locks.py

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
    if x._base is not None and tls.grad_enabled:
        _state.refresh_view(x, name)  # a view, maybe stale: See Note [Stale views] in views.py
    return x


def as_operand(x: Any, like: Tensor, name: str) -> Tensor:
    """A non-Tensor operand (number, list, array) as a constant tensor on ``like``'s device.

    Python numbers take ``like``'s dtype (torch's rule: ``float32_tensor * 2.0`` stays
    float32), except a float with an integer or bool tensor, which gives the default float32,
    and an int with a bool tensor, which gives int64.
    """
    if isinstance(x, Tensor):
        return x
    if type(x) is float and like._data.dtype.kind == "f":
        t = _wrap(like.device.xp.asarray(x, dtype=like._data.dtype), like.device)  # the usual case, fast
        t.__class__ = WrappedNumber
        return t
    if isinstance(x, (bool, Number)) and not isinstance(x, numpy.ndarray):
        kind = like.dtype.kind
        if isinstance(x, (bool, numpy.bool_)):
            dt = like.dtype
        elif isinstance(x, (int, numpy.integer)):
            dt = like.dtype if kind != "b" else numpy.int64  # bool tensor + 2 -> int64, as torch
        elif kind in "fc":
            dt = like.dtype
        else:
            dt = numpy.float32
        t = _wrap(like.device.xp.asarray(x, dtype=dt), like.device)
        t.__class__ = WrappedNumber
        return t
    try:
        arr = like.device.asarray(x)
    except Exception:
        arr = None
    if arr is None or arr.dtype.kind not in "biufc":
        raise TypeError(f"{name}: unsupported operand of type {type(x).__name__}")
    return _wrap(arr, like.device)


def binary_operands(a: Any, b: Any, name: str, elementwise: bool = True) -> tuple[Tensor, Tensor]:
    """Both operands as tensors on one device; raises naming both devices otherwise. For an
    ``elementwise`` op, shapes must broadcast (torch's RuntimeError otherwise)."""
    if type(a) is not Tensor or type(b) is not Tensor:
        if isinstance(a, Tensor):
            b = as_operand(b, a, name)
        elif isinstance(b, Tensor):
            a = as_operand(a, b, name)
        else:
            raise TypeError(f"{name}: expected a Tensor operand, got {type(a).__name__} and {type(b).__name__}")
    if a.device is not b.device:
        raise device_error(name, a, b)
    if elementwise and a._data.shape != b._data.shape:
        broadcast_check(a._data.shape, b._data.shape, name)
    if (a._base is not None or b._base is not None) and tls.grad_enabled:  # See Note [Stale views] in views.py
        if a._base is not None:
            _state.refresh_view(a, name)
        if b._base is not None:
            _state.refresh_view(b, name)
    return a, b


def broadcast_check(sa: tuple, sb: tuple, name: str) -> None:
    """Raise torch's RuntimeError when two shapes do not broadcast together."""
    for i in range(1, min(len(sa), len(sb)) + 1):
        da, db = sa[-i], sb[-i]
        if da != db and da != 1 and db != 1:
            raise RuntimeError(
                f"{name}: The size of tensor a ({da}) must match the size of tensor b ({db}) at non-singleton "
                f"dimension {max(len(sa), len(sb)) - i} (shapes {list(sa)} and {list(sb)})"
            )


def normalize_dim(dim: int, ndim: int, name: str) -> int:
    if not isinstance(dim, (int, numpy.integer)):
        raise TypeError(f"{name}: dim must be an int, got {type(dim).__name__}")
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"{name}: Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return int(dim) % n


def dim_alias(dim: Any, axis: Any, name: str) -> Any:
    """``dim``, or numpy's ``axis=`` spelling of it, which torch accepts as an alias wherever
    a parameter is named ``dim`` (and ``keepdims=`` for ``keepdim=``)."""
    if axis is None:
        return dim
    if dim is not None:
        raise TypeError(f"{name}() got multiple values for argument 'dim' (axis= is its alias; pass one)")
    return axis


def normalize_dims(dim: Any, ndim: int, name: str) -> tuple[int, ...]:
    """``None`` or an empty sequence -> every dim (torch's rule for reductions); an int or a
    sequence -> sorted, non-negative dims, each at most once (RuntimeError otherwise, as torch)."""
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, (int, numpy.integer)) else tuple(dim)
    if not dims:
        return tuple(range(ndim))
    out = [normalize_dim(d, ndim, name) for d in dims]
    if len(set(out)) != len(out):
        d = next(d for d in out if out.count(d) > 1)
        raise RuntimeError(f"{name}: dim {d} appears multiple times in the list of dims")
    if ndim == 0:
        return ()
    return tuple(sorted(out))


def sum_to(g: Tensor, shape: tuple) -> Tensor:
    """Reduce a broadcast gradient back to ``shape`` (differentiable: built from ops)."""
    if g.shape == shape:
        return g
    from .reduce import sum as _sum
    from .shape import reshape

    dims = _sum_to_dims(g.shape, shape)
    if dims:
        g = _sum(g, dims, keepdim=True)
    return reshape(g, shape)


def _sum_to_dims(gshape: tuple, shape: tuple) -> tuple:
    """The dims :func:`sum_to` sums: the leading ones, and those where ``shape`` has 1."""
    lead = len(gshape) - len(shape)
    return tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and gshape[lead + i] != 1)


def sum_to_array(d: Any, shape: tuple) -> Any:
    """:func:`sum_to` on an array: the same numpy calls, so the same values (first-order formulas)."""
    if d.shape == shape:
        return d
    dims = _sum_to_dims(d.shape, shape)
    if dims:
        d = d.sum(axis=dims, keepdims=True)
    return d.reshape(shape)


def broadcast_array(d: Any, shape: tuple, xp: Any) -> Any:
    """``xp.broadcast_to(d, shape)``: a read-only view. A one-element numpy array (a full
    reduction's gradient, the usual case) is viewed with zero strides directly: numpy's
    ``broadcast_to`` is Python code (measured 3.2 -> 0.7 us)."""
    if d.size == 1 and type(d) is numpy.ndarray and len(shape) >= d.ndim:
        view = numpy.ndarray(shape, d.dtype, d, 0, (0,) * len(shape))
        view.setflags(write=False)
        return view
    return xp.broadcast_to(d, shape)


def fit(g: Tensor, shape: tuple, dtype: numpy.dtype) -> Tensor:
    """The gradient for an input of ``shape``/``dtype``: broadcast dims summed away, dtype cast back."""
    d = g._data
    if d.shape == shape and d.dtype == dtype:
        return g
    # On arrays when no graph is recorded (measured, AddBackward0 of (8, 16) + (16,): 7.16 -> 2.63 us)
    if not tls.grad_enabled:  # See Note [First-order formulas]
        return grad_of(d, shape, dtype, g.device)
    g = sum_to(g, shape)
    if g.dtype != dtype:
        from .device import to

        g = to(g, dtype=dtype)
    return g


def grad_of(d: Any, shape: tuple, dtype: Any, device: Any) -> Tensor:
    """A first-order formula's result array ``d`` as the gradient for an input of
    ``shape``/``dtype``: wrapped as it is in the usual case, else reduced and cast as ``fit``
    does. See Note [First-order formulas]."""
    if d.shape == shape and d.dtype == dtype:
        return _wrap(d, device)
    return _wrap(cast(sum_to_array(d, shape), dtype), device)


# CATEGORY and result_dtype (torch's promotion) live in engine/dtypes.py, shared with the recorders.


# The bool dtype, for ``arr.dtype is BOOL`` tests on hot paths (about 15 ns against 35 ns for
# ``.kind == "b"``): numpy's builtin dtypes are shared instances, on cupy arrays too.
BOOL = numpy.dtype(bool)


def cast(data: Any, dtype: numpy.dtype) -> Any:
    """``data`` as ``dtype`` (no copy when it already is)."""
    return data if data.dtype == dtype else data.astype(dtype)


def const(data: Any, like: Tensor) -> Tensor:
    """A constant (no grad) tensor on ``like``'s device; arrays come from ``like.device.xp``."""
    return _wrap(data, like.device)
