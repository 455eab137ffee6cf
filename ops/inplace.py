"""In-place methods on Tensor: add_, sub_, mul_, div_, zero_, fill_, copy_, __setitem__, and
the augmented operators ``+= -= *= /=`` that map to them.

Note [In-place ops]
~~~~~~~~~~~~~~~~~~~
Every in-place op bumps the version counter ``_vc[0]`` by exactly one (views share it), so a
node that saved the tensor earlier raises "modified by an inplace operation" in backward.

* Under grad mode, a leaf that requires grad refuses in-place ops (torch's rule; do them
  under ``engine.no_grad()``, as optimizers do).
* When nothing is recorded (grad mode off, or neither operand requires grad) the op writes
  straight into the array (a ufunc with ``out=``, or slice assignment).
* When the op must be recorded, the out-of-place op runs on a *snapshot*: a tensor over a
  copy of the old array that carries this tensor's grad_fn, so the new node saves values
  that the write below cannot change. The result is written into the array in place, and
  this tensor takes over the result's grad_fn.
* A recorded in-place op on a view also rebases its root: Note [In-place ops on views].
  Other views made stale by it take their history anew when next used (Note [Stale
  views] in views.py).

In-place ops on views rebase the view's base: Note [In-place ops on views] in views.py.

>>> from threadgrad import engine
>>> x = engine.tensor([1.0, 2.0])
>>> x += 1
>>> x.mul_(2).tolist(), x.version
([4.0, 6.0], 2)
"""
from __future__ import annotations

from typing import Any, Callable

import numpy

from ..engine.tensor import Tensor, _wrap, add_methods

from . import device, elementwise, index
from ..engine.versions import bump, next_generation
from ._core import BOOL, CATEGORY, as_operand, check_tensor, device_error, result_dtype, tls
from .views import rebase, regenerate, take_history, view_index, view_inplace_error, view_offset

LEAF_MESSAGE = "a leaf Variable that requires grad is being used in an in-place operation."
NO_GRAD_VIEW_MESSAGE = (  # torch's words, for a view of a leaf made under no_grad (Note [No-grad views])
    "A view was created in no_grad mode and is being modified inplace with grad mode enabled. Given that this "
    "use case is ambiguous and error-prone, it is forbidden. You can clarify your code by moving both the view "
    "and the inplace either both inside the no_grad block (if you don't want the inplace to be tracked) or both "
    "outside (if you want the inplace to be tracked)."
)


def _other(self: Tensor, other: Any, name: str) -> Tensor:
    other = as_operand(other, self, name)
    if other.device is not self.device:
        raise device_error(name, self, other)
    return other


def _check_write(self: Tensor, dtype: Any, shape: tuple, name: str) -> None:
    """The result must fit into ``self``: same shape, and a dtype castable to ``self.dtype``."""
    if shape != self.shape:
        raise RuntimeError(f"{name}: output with shape {list(self.shape)} doesn't match the broadcast shape {list(shape)}")
    if CATEGORY.get(dtype.kind, 2) > CATEGORY.get(self.dtype.kind, 2):
        raise RuntimeError(f"{name}: result type {dtype} can't be cast to the desired output type {self.dtype}")


def _broadcast(a: tuple, b: tuple, name: str) -> tuple:
    if a == b:
        return a
    try:
        return numpy.broadcast_shapes(a, b)
    except ValueError:
        raise RuntimeError(f"{name}: shapes {list(a)} and {list(b)} cannot be broadcast together") from None


def _must_record(self: Tensor, others: tuple, name: str) -> bool:
    """True when autograd must record this in-place op; raises where torch refuses it."""
    check_tensor(self, name, "self")
    if not getattr(self._data.flags, "writeable", True):
        raise RuntimeError(f"{name}: this tensor is a read-only view (an expand() result, whose elements share "
                           f"memory); clone() it before writing to it")
    if not tls.grad_enabled:
        return False
    root = self._base
    if root is None and self._grad_fn is None and self._rg:
        raise RuntimeError(LEAF_MESSAGE)
    fn = self._grad_fn
    err = view_inplace_error(self, name)  # (its base may be gone: still a view)
    if err is not None:
        raise err
    regenerated = False
    if root is not None:
        no_grad_view = fn is None and self._ext is not None and self._ext.no_grad_view
        if fn is None and self._rg and not no_grad_view:
            raise RuntimeError(LEAF_MESSAGE)  # a view that was made a leaf of its own (requires_grad_())
        # A view of a leaf that requires grad; or a view that requires grad over a base outside
        # the graph: a view of a view made a leaf of its own (y = x.view(2); y.requires_grad_();
        # z = y.view(2)) has x as its base, but writing to z writes y. torch's check_inplace
        # refuses both, whatever the base.
        if root._grad_fn is None and (root._rg or (self._rg and not no_grad_view)):
            if root._rg and no_grad_view:
                raise RuntimeError(NO_GRAD_VIEW_MESSAGE)
            raise RuntimeError(f"{name}: a view of a leaf Variable that requires grad is being used in an in-place "
                               "operation.")
        if fn is None and root._grad_fn is not None:
            # A view made while nothing was recorded (no_grad) of a base that has a graph: the
            # change must reach the base's graph even if nothing here requires grad, so the
            # view first takes its history from the base (Note [In-place ops on views] in views.py).
            regenerated = regenerate(self)
    if not (self._rg or any(o is not None and o._rg for o in others)):
        return False
    if root is not None:
        if self._grad_fn is not None and root._grad_fn is not None and not regenerated:
            # The op reads the view's elements of the base as it is now, through a new node: as
            # in torch's CopySlices, the gradient for them goes straight to the base's history,
            # never through the view's old grad_fn, whose hooks must not fire (Note [Stale views]).
            regenerate(self)
        # A view of a tensor outside the graph (no history on either) is recorded: the base joins
        # the graph through CopySlices, as torch's (the "fill a preallocated buffer" pattern).
        # Refused: a view made under no_grad of a base in the graph that could not take its
        # history anew, and a base whose array layout cannot be read.
        no_history = self._grad_fn is None and root._grad_fn is not None
        if no_history or view_offset(self, root) is None:
            # Name the one cause that applies (issue 33, item 6: a base's layout was blamed on
            # "a tensor outside the graph").
            why = ("the view was taken under no_grad of a tensor in the graph" if no_history else
                   f"its base's array has gaps: strides {_strides(root)} for shape {list(root.shape)}")
            raise RuntimeError(
                f"{name}: an in-place op on this view of another tensor cannot be recorded for autograd ({why}): "
                f"the base's graph would miss the change. Use the out-of-place form, clone() the view first, or "
                f"run it under engine.no_grad()."
            )
    return True


def _strides(t: Tensor) -> list:
    """``t``'s array's strides in elements, for messages."""
    return [st // t._data.itemsize for st in t._data.strides]


def _snapshot(self: Tensor) -> Tensor:
    """A tensor over a copy of ``self``'s array that stands for ``self`` in the graph."""
    snap = _wrap(self._data.copy(), self.device)
    snap._grad_fn, snap._output_nr, snap._rg = self._grad_fn, self._output_nr, self._rg
    return snap


def _adopt(self: Tensor, result: Tensor, name: str) -> Tensor:
    """Write ``result`` into ``self`` and make it ``self``'s history; bump the version once.
    For a view, the root's history is rebased too: see Note [In-place ops on views]."""
    _check_write(self, result.dtype, result.shape, name)
    if result.dtype != self.dtype:
        if isinstance(result._grad_fn, elementwise._Binary):
            # torch computes in the promoted dtype and writes into self's: no node for the cast,
            # as a binary node casts each gradient to its operand's dtype (so a CopySlices wraps
            # the op's own node: Note [CopySlices] in views.py)
            result = _retyped(result, self.dtype)
        else:
            result = device.to(result, dtype=self.dtype)
    root = self._base
    if root is not None:
        rebase(root, root, view_index(self, root), result, view=self)  # See Note [CopySlices] in views.py
    self._data[...] = result._data
    _bump(self, recorded=True)
    if root is not None:
        regenerate(self)  # a view of the rebased base: See Note [Stale views] in views.py
    else:
        take_history(self, result)  # its views made before are stale now: a new generation
    return self


def _retyped(result: Tensor, dtype: Any) -> Tensor:
    """``result`` cast to ``dtype``, standing for the same output of the same node."""
    out = _wrap(result._data.astype(dtype), result.device)
    out._grad_fn, out._output_nr, out._rg = result._grad_fn, result._output_nr, result._rg
    return out


def _bump(self: Tensor, recorded: bool = False) -> int:
    """One more version; for a ``recorded`` op also a new graph generation of ``self``'s base
    (returned; Note [Versions and views] in engine/versions.py)."""
    bump(self)
    return next_generation(self) if recorded else 0


def _binary_inplace(name: str, op: Callable, ufunc: str, refuse_bool: bool = False) -> Callable:
    """The in-place form of ``op``; ``refuse_bool``: a bool operand raises, as ``sub`` does (torch)."""
    def method(self: Tensor, other: Any, alpha: Any = None) -> Tensor:
        given = other
        other = _other(self, other, name)
        if refuse_bool and (self._data.dtype is BOOL or other._data.dtype is BOOL or type(given) is bool):
            elementwise.check_sub_operands(self, given, self, other, name)
        if alpha is not None:
            other = elementwise.mul(other, alpha)
        if _must_record(self, (other,), name):
            snap = _snapshot(self)
            return _adopt(self, op(snap, snap if other is self else other), name)
        rdt = result_dtype(self, other)
        if ufunc == "true_divide" and rdt.kind not in "fc":
            rdt = self.device.xp.dtype("float32")
        shape = _broadcast(self.shape, other.shape, name)
        _check_write(self, rdt, shape, name)
        getattr(self.device.xp, ufunc)(self._data, other._data, out=self._data, casting="unsafe")
        _bump(self)
        return self

    method.__name__ = name
    method.__doc__ = (f"In place ``{op.__name__}``: ``self`` becomes ``{op.__name__}(self, other)``"
                      f"{' (other scaled by alpha)' if name in ('add_', 'sub_') else ''}; returns self. "
                      "See Note [In-place ops].")
    return method


add_ = _binary_inplace("add_", elementwise.add, "add")
sub_ = _binary_inplace("sub_", elementwise.sub, "subtract", refuse_bool=True)
mul_ = _binary_inplace("mul_", elementwise.mul, "multiply")
div_ = _binary_inplace("div_", elementwise.div, "true_divide")


def _put(self: Tensor, idx: Any, value: Any, name: str) -> Tensor:
    """``self[idx] = value`` in place: recorded as :func:`ops.index_put` on a snapshot."""
    idx = index.select_ints(idx)
    v = as_operand(value, self, name)
    record = _must_record(self, (v,), name)
    if v.device is not self.device:  # copy_ and setitem take values from any device
        v = device.to(v, self.device) if record else _wrap(self.device.asarray(v.device.to_host(v._data)), self.device)
    if record:
        narrow = index.is_basic(idx) and index.narrows(idx, self.shape)  # torch's CopySlices
        return _adopt(self, index.put(_snapshot(self), idx, v, copy_slices=narrow,
                                      node_cls=None if narrow else _whole_write_node(idx, value, name)), name)
    if CATEGORY.get(v.dtype.kind, 2) > CATEGORY.get(self.dtype.kind, 2):
        raise RuntimeError(f"{name}: value of dtype {v.dtype} can't be cast to the tensor's dtype {self.dtype}")
    try:
        self._data[index.convert_index(idx, self, name)] = v._data
    except (IndexError, ValueError) as e:
        raise type(e)(f"{name}: cannot write a value of shape {list(v.shape)} at index {idx!r:.80} "
                      f"of a tensor of shape {list(self.shape)} ({e})") from None
    _bump(self)
    return self


def _whole_write_node(idx: Any, value: Any, name: str) -> type | None:
    """torch's node for a write to all of a tensor (None: an advanced index, IndexPutBackward0)."""
    if name == "zero_":
        return index.ZeroBackward0
    if name == "fill_":
        return index.FillBackward3 if isinstance(value, Tensor) else index.FillBackward2
    if name == "copy_":
        return index.CopyBackwards
    if index.is_basic(idx):  # x[...] = v, x[:] = v: a number or a 0-d value fills, else copies
        return index.FillBackward3 if not isinstance(value, Tensor) or value.ndim == 0 else index.CopyBackwards
    return None


def fill_(self: Tensor, value: Any) -> Tensor:
    """Set every element to ``value`` (a number or a 0-d tensor); returns self."""
    if isinstance(value, Tensor) and value.ndim != 0:
        raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} dimensions.")
    return _put(self, Ellipsis, value, "fill_")


def zero_(self: Tensor) -> Tensor:
    """Set every element to 0; returns self."""
    return _put(self, Ellipsis, 0, "zero_")


def copy_(self: Tensor, src: Any) -> Tensor:
    """Copy ``src`` (broadcast to self's shape, from any device) into self; returns self.
    Gradients flow to ``src``, back on its own device."""
    if isinstance(src, Tensor):
        if _broadcast(self.shape, src.shape, "copy_") != self.shape:
            raise RuntimeError(f"copy_: the source of shape {list(src.shape)} cannot be broadcast to {list(self.shape)}")
    return _put(self, Ellipsis, src, "copy_")


def setitem(self: Tensor, idx: Any, value: Any) -> None:
    """``self[idx] = value``: any getitem index; recorded as index_put when autograd needs it."""
    _put(self, idx, value, "__setitem__")


def _augmented(method: Callable) -> Callable:
    def op(self: Tensor, other: Any) -> Tensor:
        return method(self, other)

    op.__name__ = f"__i{method.__name__.rstrip('_')}__"
    return op


_METHODS = {
    "add_": add_, "sub_": sub_, "mul_": mul_, "div_": div_,
    "zero_": zero_, "fill_": fill_, "copy_": copy_, "__setitem__": setitem,
    "__iadd__": _augmented(add_), "__isub__": _augmented(sub_),
    "__imul__": _augmented(mul_), "__itruediv__": _augmented(div_),
}

add_methods(_METHODS)
