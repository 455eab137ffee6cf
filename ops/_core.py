"""What every op module shares: the registry, operand checks, and reducing broadcast gradients.

Note [Op definitions]
~~~~~~~~~~~~~~~~~~~~~
An op is one function and one Node subclass side by side in one module (STYLE.md habit 1):
the function computes the forward on arrays (``x.data``, through ``x.device.xp`` only) and,
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
``if not tls.grad_enabled``, that computes on the arrays (``self.saved_arrays()``, ``g.data``)
and wraps only the gradients it returns, through :func:`grad_of` (which undoes broadcasting
and dtype promotion as ``fit`` does, on arrays: :func:`sum_to_array`; ``fit`` itself takes that
path when no graph is recorded). The ops form stays the definition and
serves ``create_graph``. ``test_first_order_formulas_match_create_graph`` runs every op sample
both ways and requires equal gradients, so neither form can drift from the other.
"""
from __future__ import annotations

import weakref
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
    if len(x._vc) > 2:
        check_fresh(x, name)
    return x


def as_operand(x: Any, like: Tensor, name: str) -> Tensor:
    """A non-Tensor operand (number, list, array) as a constant tensor on ``like``'s device.

    Python numbers take ``like``'s dtype (torch's rule: ``float32_tensor * 2.0`` stays
    float32), except a float with an integer or bool tensor, which gives the default float32,
    and an int with a bool tensor, which gives int64.
    """
    if isinstance(x, Tensor):
        return x
    if type(x) is float and like.data.dtype.kind == "f":
        t = _wrap(like.device.xp.asarray(x, dtype=like.data.dtype), like.device)  # the usual case, fast
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
    if elementwise and a.data.shape != b.data.shape:
        broadcast_check(a.data.shape, b.data.shape, name)
    if len(a._vc) > 2 or len(b._vc) > 2:  # See Note [Views and in-place]
        check_fresh(a, name)
        check_fresh(b, name)
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
    d = g.data
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


# --- views and in-place ops ----------------------------------------------------------------
#
# Note [Views and in-place]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# A view (reshape, transpose, permute, expand, basic getitem, split) shares its input's
# array and its version counter ``_vc``, a list whose element 0 is the version the engine
# checks. ops/ extends that shared list, and only ops/ reads the extra entries:
#   _vc[1]  a weakref to the *root*: the tensor the first view was taken from. Every tensor
#           sharing the list whose root is not itself is a view (or a detach() alias).
#   _vc[2]  the root's graph generation: bumped when an in-place op *recorded* in the graph
#           changes the root while views of it exist.
# A view node (grad_fn of a view) created at generation k stores ``_view_gen = k``. The
# rules, enforced in inplace.py and by :func:`check_fresh`:
#   * a recorded in-place op on a view rebases the root too (Note [In-place ops on views]
#     in inplace.py, PyTorch's CopySlices);
#   * a view whose generation is older than its root's has a grad_fn that still points at
#     the root's old graph: when an op uses it, it takes its history anew from the root's
#     current graph at its own positions (:func:`view_index`), as torch regenerates a view's
#     grad_fn. Where that cannot be done (the root is gone, or its array has gaps), the op
#     raises: never wrong gradients. While grad mode is off nothing is recorded, and a
#     detach() alias (marked in its _ext) is no view: neither is ever stale.
# In-place ops under no_grad, or on tensors nothing requires grad of, are free.
#
# Note [Stale views]
# ~~~~~~~~~~~~~~~~~~
# torch regenerates a stale view's grad_fn whenever it is read, so everything that reads a
# view's autograd state sees the root's new history. Here ``grad_fn`` is a plain slot (the
# hot paths read it), so the places that read a view's state refresh it first, through
# :func:`refresh` (bound as ``engine._state.refresh_view``): ops using it (check_tensor,
# binary_operands), its ``requires_grad`` and ``is_leaf``, ``register_hook``,
# ``retain_grad()``, ``backward()`` from it and its gradient edge in ``backward``/``grad``
# (engine/tensor.py), a custom Function's apply. Reading ``t.grad_fn`` itself does not:
# read ``t.requires_grad`` first. As in torch, the regenerated history is
# AsStridedBackward0 over the root's current graph; a retain_grad() moves to it, while a
# hook registered on the view before stays on its old grad_fn and no longer fires (torch's
# test_tensor_hooks_inplace_over_view). A recorded in-place op on a view regenerates that
# view too, right after rebasing its root: its gradient is the gradient of its own new value,
# not the sum of every use of the op's result (torch's test_retain_grad_inplace_over_view).



def share_version(out: Tensor, x: Tensor) -> None:
    """Make ``out`` a view of ``x``: share its version counter and mark the root (see Note above).
    A view of a detach() alias is outside the graph as the alias is, and marked so too."""
    vc = x._vc
    if len(vc) == 1:
        with LOCKS.view:  # first view of x only: two threads must not both append
            if len(vc) == 1:
                vc.append(weakref.ref(x))
    out._vc = vc
    if x._ext is not None and x._ext.detached:
        out._ext_obj().detached = True


def mark_view_node(node: Node, x: Tensor) -> None:
    """Stamp a view's grad_fn with its root's graph generation (Note [Views and in-place])."""
    vc = x._vc
    if len(vc) > 2:
        node._view_gen = vc[2]


def _address(a: Any) -> int:
    return a.data.ptr if hasattr(a.data, "ptr") else a.__array_interface__["data"][0]  # cupy / numpy


def view_offset(view: Tensor, root: Tensor) -> int | None:
    """``view``'s first element's offset in ``root``'s memory, in elements; None when the
    layout cannot be read (the root's array has gaps, or the view is not aligned on its
    elements). Cheap: no array is built."""
    r, v = root.data, view.data
    if not (r.flags.c_contiguous or r.flags.f_contiguous):
        return None
    size = r.itemsize
    offset = _address(v) - _address(r)
    if offset % size or any(st % size for st in v.strides) or not 0 <= offset < max(r.nbytes, 1):
        return None
    return offset // size


def view_index(view: Tensor, root: Tensor) -> Any:
    """For each element of ``view``, its position in ``root`` flattened in C order (an int64
    host array of the view's shape), read from the two arrays' memory layout; None where
    :func:`view_offset` is."""
    start = view_offset(view, root)
    if start is None:
        return None
    r, v = root.data, view.data
    size = r.itemsize
    # Each element's C-order position, laid out in memory as the root's elements are: the
    # view's offset and strides then pick its elements' positions.
    logical = numpy.arange(r.size, dtype=numpy.int64).reshape(r.shape)
    in_memory = (logical if r.flags.c_contiguous else numpy.asfortranarray(logical)).ravel(order="K")
    return numpy.lib.stride_tricks.as_strided(in_memory[start:], v.shape,
                                              tuple(st // size * in_memory.itemsize for st in v.strides)).copy()


def regenerate_view(t: Tensor, vc: list) -> bool:
    """Give the stale view ``t`` the history "its elements of the root as the root is now":
    the root's current graph, read at the view's positions (PyTorch regenerates a view's
    grad_fn the same way). False when the root is gone or its layout cannot be read.

    As torch's, a ``retain_grad()`` moves to the new grad_fn and hooks registered before stay
    on the old one, which the root's graph no longer reaches (Note [Stale views])."""
    root = vc[1]()
    if root is None:
        return False
    if root.grad_fn is None:
        return True  # the root has no graph (never a leaf that requires grad: those refuse recorded in-place ops)
    idx = view_index(t, root)
    if idx is None:
        return False
    from .index import take_view
    from .shape import reshape

    prev = tls.grad_enabled
    tls.grad_enabled = True  # the history is recorded whatever the mode it is asked for in
    try:
        proxy = _wrap(root.data, root.device)  # stands for the root in the graph (shares no counter)
        proxy.grad_fn, proxy._output_nr, proxy._rg = root.grad_fn, root._output_nr, root._rg
        regen = take_view(reshape(proxy, (-1,)), idx)
    finally:
        tls.grad_enabled = prev
    old_fn, old_nr = t.grad_fn, t._output_nr
    t.grad_fn, t._output_nr, t._rg = regen.grad_fn, 0, regen._rg
    move_retain(t, old_fn, old_nr)
    if t.grad_fn is not None:
        t.grad_fn._view_gen = vc[2] if len(vc) > 2 else 0
    return True


def move_retain(t: Tensor, old_fn: Node | None, old_nr: int) -> None:
    """``t`` has a new grad_fn: its retain_grad() hook (kept on ``old_fn``'s slot ``old_nr``)
    moves along, as torch's update_tensor_hooks_on_new_gradfn; its tensor hooks stay behind."""
    if t.retains_grad and old_fn is not None and old_fn._hooks is not None and t.grad_fn is not None:
        retain = set_retains_grad(old_fn._hooks, old_nr, None)
        if retain is not None:
            set_retains_grad(t.grad_fn._hooks_obj(), t._output_nr, retain)


def is_alias(t: Tensor) -> bool:
    """A detach() alias: it shares a version counter but is no view for autograd."""
    return t._ext is not None and t._ext.detached


def is_stale(t: Tensor) -> bool:
    """``t`` is a view whose root a recorded in-place op changed after ``t`` took its history
    (Note [Views and in-place]); a detach() alias never is."""
    vc = t._vc
    if len(vc) > 2 and vc[1]() is not t and not is_alias(t):
        made = getattr(t.grad_fn, "_view_gen", 0) if t.grad_fn is not None else 0
        return made < vc[2]
    return False


def check_fresh(t: Tensor, name: str) -> None:
    """Bring a view made stale by a recorded in-place op on its root up to date (its history is
    taken anew from the root's), or raise when that cannot be done. Nothing to do while no
    graph is recorded, nor for detach() aliases."""
    if tls.grad_enabled:
        refresh(t, name)


def refresh(t: Tensor, name: str) -> None:
    """:func:`check_fresh` in any grad mode: for what reads a view's autograd state (its
    ``requires_grad``, ``is_leaf``, hooks, ``retain_grad()``, a backward from it), as torch's
    grad_fn getter regenerates a stale view's (Note [Stale views])."""
    if is_stale(t) and not regenerate_view(t, t._vc):
        raise RuntimeError(
            f"{name}: this tensor is a view of a tensor that an in-place op changed afterwards while "
            "recording gradients, so its graph is out of date, and it cannot be taken anew (the base is "
            "gone, or its array has gaps). Take the view again after the in-place op (or use the "
            "out-of-place op)."
        )


_state.refresh_view = refresh  # the engine core refreshes stale views through this (it imports no ops)
