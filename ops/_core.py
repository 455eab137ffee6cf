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
is written once, against a namespace that is the ops under ``create_graph=True`` (so that it
records a graph of its own: double backward) and arrays otherwise (Note [First-order
formulas]). It checks ``self.next_edges[i][0] is not None`` (the
input needs a gradient) before computing one. ``@register`` puts the function in REGISTRY,
which the test suite enumerates: an op without test samples fails the suite.

Note [First-order formulas]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
Most backward calls record nothing: grad mode is off in backward unless ``create_graph=True``
(the executor installs it per GraphTask). A formula computed with ops would then pay, for
every op it calls, the checks a user-facing op needs (operand types, devices, dtype
promotion, ``fit``) and a Tensor per intermediate: about 1.5 us of a 2-4 us node. Yet under
``create_graph`` the formula must be ops, so that it records a graph of its own.

So each backward formula is written once, against a namespace ``F`` (as HIPS autograd gets
first- and higher-order gradients from one VJP), and a node's ``backward`` starts by
choosing it::

    dev = g.device
    if tls.grad_enabled:   # create_graph: the formula records a graph
        F = OPS
    else:                  # first order: the same formula on arrays
        F, g = ARRAYS[dev.kernels], g._data

:class:`OPS` holds the ops (each op module adds its own where it defines them). ``ARRAYS``
gives, per device formula table, an :class:`Arrays` namespace: plain array operators and
the table's entries (``mul``, ``tanh_grad`` ...: fused kernels on a GPU, Note [Fused kernels]
in devices/_fused.py); where a table entry is a formula of several ops, OPS has it under the
same name as one function of ops (``tanh_grad`` is ``tanh_backward``, which records a node
of its own). Both namespaces also have ``F.saved(node)`` (``saved_tensors()`` or
``saved_arrays()``) and three functions that make results gradients for an input on ``dev``:
``F.wrap(r, dev)``, ``F.fit(r, shape, dtype, dev)`` (undo broadcasting and dtype promotion:
``fit``, or :func:`grad_of` on arrays) and ``F.owned(r, dev, consumer)`` (a fresh array a leaf
may adopt without a copy: Note [Gradient ownership] in engine/tensor.py); on OPS they return
the Tensor, or ``fit`` it. The choice is written out in each node, not in a helper, because
a call costs about 700 CPU instructions on nodes of 15,000-19,000 (benchmarks/instructions.py).

Where arrays cannot mirror the ops bit for bit (mul's dtype promotion; a kernel that takes
only float32/float64), the node adds that test to ``tls.grad_enabled``, and the ops compute
the formula without recording. ``fit`` itself has such a cheaper branch (arrays when no
graph is recorded). ``test_first_order_formulas_match_create_graph`` runs every op sample
both ways and requires equal gradients, so the two namespaces cannot drift apart.
"""
from __future__ import annotations

import operator
from numbers import Number
from typing import Any, Callable, TypeVar

import numpy

from ..engine._record import (OUTPUT, binary_result, needs_grad, record, record_binary, record_unary,  # noqa: F401 - re-exported
                            unary_result)  # for op modules
from ..engine import _state
from ..engine._state import tls  # noqa: F401
from ..engine.dtypes import CATEGORY, promoted, result_dtype  # noqa: F401 - re-exported for op modules
from ..engine.graph import Node, set_retains_grad  # noqa: F401
from ..engine.tensor import Tensor, WrappedNumber, _wrap, owned_gradient
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


# Note [Imports in _core]
# ~~~~~~~~~~~~~~~~~~~~~~~
# Every op module imports this one at its top, so this one cannot import them at its top: the
# two helpers built from ops (sum_to: sum and reshape; fit: the cast back with ``to``) import
# them when called, which is only under create_graph (fit's first-order path is on arrays).
# Every other import in ops/ is at the top of its file (op modules depend in layers: this
# module; elementwise, index, device; shape; reduce and linalg; activation, nn and stats).

def sum_to(g: Tensor, shape: tuple) -> Tensor:
    """Reduce a broadcast gradient back to ``shape`` (differentiable: built from ops)."""
    if g.shape == shape:
        return g
    from .reduce import sum as _sum  # See Note [Imports in _core]
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
        from .device import to  # See Note [Imports in _core]

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


def sign_array(d: Any, xp: Any) -> Any:
    """torch's ``sgn``: -1, 0 or 1, and 0 at NaN (numpy's sign gives NaN there: a NaN input
    to abs, l1_loss or norm(p=1) then got a NaN gradient where torch's is 0)."""
    s = xp.sign(d)
    if d.dtype.kind == "f":
        s = xp.nan_to_num(xp.asarray(s), copy=False, nan=0.0)  # (in place: s is ours; 0-d: sign gave a scalar)
    return s


def const(data: Any, like: Tensor) -> Tensor:
    """A constant (no grad) tensor on ``like``'s device; arrays come from ``like.device.xp``."""
    return _wrap(data, like.device)


# --- the formula namespaces: See Note [First-order formulas] -------------------------------
#
# Each namespace is a class used as it is (never instantiated) whose attributes are plain
# functions: ``F.mul(...)`` on a class is one specialized lookup in CPython 3.11
# (LOAD_METHOD_CLASS), where an instance attribute or a staticmethod costs a generic one.

def _same(t: Any, *args: Any) -> Any:
    return t


def _fit_tensor(t: Tensor, shape: tuple, dtype: numpy.dtype, device: Any) -> Tensor:
    return fit(t, shape, dtype)


class OPS:
    """The ops namespace of backward formulas: under ``create_graph`` a formula records a
    graph with these. Each op module adds its own ops where it defines them (``OPS.mul = mul``)."""

    saved = Node.saved_tensors  # (node)
    wrap = _same                # (t, dev): t is already a Tensor
    owned = _same               # (t, dev, consumer)
    number = _same              # (c, like): an op takes a number as it is
    fit = _fit_tensor           # (t, shape, dtype, dev)


def _reshape_array(d: Any, shape: tuple) -> Any:
    return d.reshape(shape)


def _transpose_array(d: Any, dim0: int, dim1: int) -> Any:
    return d.swapaxes(dim0, dim1) if d.ndim > 1 else d  # as transpose's forward


def _permute_array(d: Any, dims: tuple) -> Any:
    return d.transpose(dims)


def _sum_array(d: Any, dims: Any) -> Any:
    return d.sum(axis=dims)


class Arrays:
    """The arrays namespace of backward formulas: plain array operators, and functions that
    make a formula's result arrays gradients. :func:`arrays_for` extends it with one device
    formula table's entries (``mul``, ``tanh_grad`` ...: fused kernels on a GPU)."""

    saved = Node.saved_arrays   # (node)
    wrap = _wrap                # (d, dev)
    owned = owned_gradient      # (d, dev, consumer): Note [Gradient ownership] in engine/tensor.py
    fit = grad_of               # (d, shape, dtype, dev)
    sum_to = sum_to_array
    reshape = _reshape_array
    transpose = _transpose_array
    permute = _permute_array
    sum = _sum_array  # noqa: A003 - the op's name (no keepdim: sum(g, dims))
    t = operator.attrgetter("T")  # a matrix's transpose, as an attribute read (no Python frame)
    sub = operator.sub
    div = operator.truediv
    neg = operator.neg
    matmul = operator.matmul
    pow = operator.pow  # noqa: A003 - the op's name


class _ArraysByTable(dict):
    """formula table -> its Arrays namespace, made on first use (:func:`arrays_for`)."""

    def __missing__(self, kernels: Any) -> type:
        space = self[kernels] = arrays_for(kernels)
        return space


ARRAYS: dict = _ArraysByTable()


def arrays_for(kernels: Any) -> type:
    """The Arrays namespace over the formula table ``kernels``: :class:`Arrays` and the
    table's entries, and the functions that need the table's array module."""
    xp = kernels.xp if kernels.fused else numpy  # the plain table serves the numpy devices

    def expand(d: Any, shape: tuple) -> Any:
        return d if d.shape == shape else broadcast_array(d, shape, xp)

    def number(c: Any, like: Any) -> Any:  # as as_operand makes it: an array of like's dtype
        return xp.asarray(c, dtype=like.dtype)

    def sgn(d: Any) -> Any:
        return sign_array(d, xp)

    table = {name: getattr(kernels, name) for name in dir(kernels)
             if not name.startswith("_") and name not in ("fused", "name", "xp")}
    if xp is numpy:
        table["sum"] = numpy.add.reduce  # what ndarray.sum calls, without its Python frame
    return type(f"Arrays_{kernels.name}", (Arrays,), dict(table, xp=xp, expand=expand, number=number, sgn=sgn))
