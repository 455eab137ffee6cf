"""``engine.Tensor``: one array plus the autograd bookkeeping around it.

Operators (``+``, ``@``, ``.sum()``, ``.exp()``, in-place methods ...) are attached by the
``ops`` package when it is imported (threadgrad/__init__.py imports it), so that each op is
defined once, in ops/ (see ops/_methods.py).

>>> from threadgrad import engine
>>> x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> (x * x).sum().backward()
>>> x.grad.tolist()
[2.0, 4.0, 6.0]
"""
from __future__ import annotations

import warnings
import weakref
from typing import Any, Callable, Sequence

import numpy

from .. import devices
from ..devices import Device

from ._locks import LOCKS
from . import _state, versions
from ._state import tls
from .graph import (AccumulateGrad, HookTable, NodeHooks, RemovableHandle, _add_hook, _set_entry,
                    share_tensor_hooks, tensor_hook_table)

_cpu = devices.cpu

NON_LEAF_GRAD_WARNING = (  # torch's words (TensorBase::grad)
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad attribute won't be "
    "populated during autograd.backward(). If you indeed want the .grad field to be populated for a non-leaf "
    "Tensor, use .retain_grad() on the non-leaf Tensor. If you access the non-leaf Tensor by mistake, make sure "
    "you access the leaf Tensor instead."
)


class _TensorExt:
    """Rarely used per-tensor state, allocated on first use so plain tensors stay small."""

    __slots__ = ("hooks", "post_acc", "retains_grad", "generation", "view_gen", "no_grad_view", "view_meta",
                 "detached_at", "__weakref__")

    def __init__(self) -> None:
        self.hooks: NodeHooks | None = None  # leaf tensor hooks; shared with its AccumulateGrad
        self.post_acc: dict = {}  # copy-on-write: See Note [Hook tables] in graph.py
        self.retains_grad = False
        # See Note [Versions and views] in versions.py: a base's graph generation, and the
        # generation a view with no grad_fn was made at.
        self.generation = 0
        self.view_gen = 0
        self.no_grad_view = False  # See Note [No-grad views] in versions.py
        # A view of a view that may not be written in place, and why: "multi" (of one of several
        # views a function returned) or "custom" (of a view a custom Function returned), as
        # torch's creation meta passes to views of views. Set by versions.make_view.
        self.view_meta: str | None = None
        # See Note [Detached saved tensors] in graph.py: the sequence number current when
        # detach_() took this tensor's grad_fn away (0: never).
        self.detached_at = 0


def to_device(spec: Any) -> Device:
    """``None`` -> cpu; a Device -> itself; a spec string -> the interned Device."""
    if spec is None:
        return _cpu
    if type(spec) is Device or isinstance(spec, Device):
        return spec
    return devices.get(spec)


def to_dtype(dtype: Any) -> numpy.dtype | None:
    if dtype is None:
        return None
    try:
        return numpy.dtype(dtype)
    except TypeError:
        raise TypeError(f"not a dtype: {dtype!r} (use e.g. numpy.float32, 'float64' or engine.float32)") from None


class Tensor:
    """An n-dimensional array that can record the ops applied to it for autograd.

    Attributes: ``data`` (a detached alias: Note [Tensor.data]), ``shape``, ``ndim``, ``dtype``,
    ``device``, ``requires_grad``, ``grad``, ``grad_fn``, ``is_leaf``, ``retains_grad``,
    ``version``. Create tensors with :func:`engine.tensor` and friends.
    """

    # _data: the array; the library reads and writes this slot (``data`` is torch's detached
    # alias: Note [Tensor.data]). device: interned Device. grad_fn: Node or None. _rg:
    # requires_grad (True for every non-leaf with a grad_fn). _grad: .grad. _vc: version
    # counter, a one-element list shared by a tensor, its views and detach() aliases (not by a
    # ``.data`` alias, which has its own: Note [Tensor.data]). _base: the tensor this one is a
    # view of, or None (Note [Versions and views] in versions.py). _output_nr: which output of
    # grad_fn this is. _acc: weakref to the leaf's AccumulateGrad. _ext: _TensorExt or None.
    __slots__ = ("_data", "device", "_grad_fn", "_rg", "_grad", "_vc", "_base", "_output_nr", "_acc", "_ext",
                 "__weakref__")

    __array_priority__ = 1000  # numpy scalars/arrays on the left defer to our operators

    def __init__(self, data: Any, device: Any = None, requires_grad: bool = False) -> None:
        dev = to_device(device)
        if not isinstance(data, dev.xp.ndarray):
            data = dev.asarray(data)
        self._data = data
        self.device = dev
        self._grad_fn = None
        self._rg = False
        self._grad = None
        self._vc = [0]
        self._base = None
        self._output_nr = 0
        self._acc = None
        self._ext = None
        if requires_grad:
            self.requires_grad = True

    # -- array facts --------------------------------------------------------------------
    @property
    def data(self) -> "Tensor":
        """A new tensor over this tensor's array (no copy), outside autograd: no grad_fn, no
        requires_grad, a version counter of its own, not a view. See Note [Tensor.data]."""
        return _wrap(self._data, self.device)  # (a fresh _vc: torch's variable_data())

    @data.deleter
    def data(self) -> None:
        raise RuntimeError("Deleting tensor data is not allowed. Delete tensor instead!")  # torch's words

    @data.setter
    def data(self, value: Any) -> None:
        # Note [Tensor.data]
        # ~~~~~~~~~~~~~~~~~~
        # ``data`` is torch's: inside the library the array is the slot ``_data`` (read and
        # written directly, never through this property, which would build a Tensor per read),
        # and users get a host array from ``numpy()`` / ``__array__``.
        #
        # Reading ``t.data`` returns a new Tensor on every read (torch's variable_data()): it
        # holds t's array itself (no copy), on t's device; requires_grad False, no grad_fn,
        # a leaf, not a view (``_base`` None), and a version counter of its own that starts
        # at 0. So an in-place op on it (``p.data.add_(g, alpha=-lr)``, ``p.data.copy_(w)``,
        # ``p.data.zero_()``) writes t's array but is invisible to autograd: t's version does
        # not move, a graph that saved t backprops with the new values without an error, and a
        # leaf that requires grad accepts it under grad mode. All as in torch.
        #
        # Assigning ``t.data = v`` (torch's set_data) takes a Tensor only; t then holds v's
        # array (shared: later writes to either show in both), with v's shape and dtype, and
        # keeps its own grad_fn, requires_grad, grad and version counter (no bump, no
        # history). torch's refusals, in its words: a non-Tensor (TypeError "Variable data has
        # to be a tensor, but got numpy.ndarray"; an array never reaches t, so no raw array
        # can be left where the engine expects one of the device), and a non-floating v when t
        # requires grad. One rule is threadgrad's own: v must be on t's device (torch lets a
        # dense tensor take another dense device's storage). A tensor's device is fixed here:
        # its AccumulateGrad, streams and .grad were set up for it; move a tensor with
        # ``.to()`` (Module.to/cuda re-home parameters through module.py's _assign).
        #
        # torch's old idiom ``p.data -= lr * p.grad`` therefore runs as in torch: an in-place
        # sub on the alias (writing p's array), then the assignment of that same array back.
        if not isinstance(value, Tensor):
            tp = type(value)
            name = tp.__name__ if tp.__module__ == "builtins" else f"{tp.__module__}.{tp.__qualname__}"
            raise TypeError(f"Variable data has to be a tensor, but got {name}")  # torch's words
        dev = self.device
        if value.device is not dev:
            raise RuntimeError(
                f"data set to a tensor on {value.device}, but this tensor is on {dev}: "
                f"move the tensor itself with .to() (the new data must be on the tensor's device)"
            )
        if self._rg and value._data.dtype.kind not in "fc":
            raise RuntimeError("data set to a tensor that requires gradients must be floating point or complex dtype")
        self._data = value._data

    @property
    def shape(self) -> tuple:
        return self._data.shape

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def dtype(self) -> numpy.dtype:
        return self._data.dtype

    def size(self, dim: int | None = None) -> Any:
        return self._data.shape if dim is None else self._data.shape[dim]

    def numel(self) -> int:
        return int(self._data.size)

    def dim(self) -> int:
        return self._data.ndim

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    @property
    def version(self) -> int:
        """Bumped by exactly one by every in-place op on this tensor or a view of it."""
        return versions.version(self)

    # -- autograd attributes ------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        if self._base is not None:  # a view, maybe stale: See Note [Stale views] in ops/views.py
            _state.refresh_view(self, "requires_grad")
        return self._rg

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        flag = bool(flag)
        if self._grad_fn is not None:
            if not flag:
                raise RuntimeError(
                    "you can only change requires_grad flags of leaf variables. If you want to use a computed "
                    "variable in a subgraph that doesn't require differentiation use var_no_grad = var.detach()."
                )
            return
        if flag and self._data.dtype.kind not in "fc":
            raise RuntimeError(f"Only Tensors of floating point dtype can require gradients (got {self._data.dtype})")
        self._rg = flag
        if self._ext is not None:
            self._ext.no_grad_view = False  # now a leaf of its own: See Note [No-grad views] in versions.py

    @requires_grad.deleter
    def requires_grad(self) -> None:
        raise RuntimeError("requires_grad must be a bool")  # torch's words: it cannot be deleted

    def requires_grad_(self, flag: bool = True) -> "Tensor":
        self.requires_grad = flag
        return self

    @property
    def grad_fn(self) -> Any:
        """The Node that made this tensor (None for a leaf). A view whose base changed in place
        since gets its history anew first, as torch regenerates it on read (Note [Stale views]
        in ops/views.py); the engine reads the slot ``_grad_fn``."""
        if self._base is not None:
            _state.refresh_view(self, "grad_fn")
        return self._grad_fn

    @grad_fn.setter
    def grad_fn(self, value: Any) -> None:
        raise AttributeError("attribute 'grad_fn' of 'Tensor' objects is not writable")  # torch's words

    @property
    def is_leaf(self) -> bool:
        if self._base is not None:  # See Note [Stale views] in ops/views.py
            _state.refresh_view(self, "is_leaf")
        return self._grad_fn is None

    @property
    def grad(self) -> "Tensor | None":
        g = self._grad
        if g is None and self._grad_fn is not None and not self.retains_grad:
            warnings.warn(NON_LEAF_GRAD_WARNING, UserWarning, stacklevel=2)
        return g

    @grad.setter
    def grad(self, value: "Tensor | None") -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type {type(value).__name__}")
            if value is self:
                raise RuntimeError("can't assign Variable as its own grad")
            if value.shape != self.shape:
                raise RuntimeError(f"assigned grad has shape {tuple(value.shape)}, but the tensor has shape {tuple(self.shape)}")
            if value.device is not self.device:
                raise RuntimeError(f"assigned grad is on {value.device}, but the tensor is on {self.device}")
            if value.dtype != self.dtype:
                raise RuntimeError(f"assigned grad has dtype {value.dtype}, but the tensor has dtype {self.dtype}: "
                                   "a gradient must match its tensor's dtype, as in torch (convert it with .to())")
        self._grad = value

    @grad.deleter
    def grad(self) -> None:
        self._grad = None  # as torch: `del t.grad` clears it

    @property
    def retains_grad(self) -> bool:
        return self._ext is not None and self._ext.retains_grad

    def _ext_obj(self) -> _TensorExt:
        """This tensor's _TensorExt, made once (two threads registering hooks at once get the same one)."""
        e = self._ext
        if e is None:
            with LOCKS.hooks:  # See Note [Hook tables] in graph.py
                e = self._ext
                if e is None:
                    e = self._ext = _TensorExt()
        return e

    def retain_grad(self) -> None:
        """Keep ``.grad`` for this non-leaf after backward (a no-op on leaves)."""
        if self._base is not None:  # See Note [Stale views] in ops/views.py
            _state.refresh_view(self, "retain_grad")
        if not self._rg:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self._grad_fn is None:
            return
        ext = self._ext_obj()
        if ext.retains_grad:
            return
        hooks = self._grad_fn._hooks_obj()
        ref = weakref.ref(self)

        def retain(grad: Tensor) -> None:
            t = ref()
            if t is not None:
                with LOCKS.nonleaf_grad:  # concurrent backward calls may reach t at once
                    accumulate_into(t, grad)

        with LOCKS.hooks:  # one retain hook however many threads call this at once
            if ext.retains_grad:
                return
            _set_entry(hooks, "retains_grad", self._output_nr, retain)  # See Note [Hook tables]
            ext.retains_grad = True

    def register_hook(self, fn: Callable[["Tensor"], "Tensor | None"]) -> RemovableHandle:
        """``fn(grad)`` runs when this tensor's gradient is computed; a returned Tensor replaces it."""
        if self._base is not None:  # See Note [Stale views] in ops/views.py
            _state.refresh_view(self, "register_hook")
        if not self._rg:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._grad_fn is not None:
            return _add_hook(tensor_hook_table(self._grad_fn._hooks_obj(), self._output_nr), "fns", fn)
        ext = self._ext_obj()
        leaf_hooks = ext.hooks
        if leaf_hooks is None:
            leaf_hooks = self._make_leaf_hooks(ext)
        return _add_hook(leaf_hooks.tensor_pre[0], "fns", fn)

    # Note [Leaf hooks]
    # ~~~~~~~~~~~~~~~~~
    # A leaf's tensor hooks must run on its AccumulateGrad, whether that node is made before
    # the first hook (then the hook registration shares its table with the node) or after
    # (then AccumulateGrad.__init__ does). Both happen under LOCKS.acc, the lock
    # grad_accumulator makes the node under, so one of them always sees the other: the
    # registration sees ``_acc`` set, or the node's __init__ sees ``ext.hooks`` set.
    def _make_leaf_hooks(self, ext: _TensorExt) -> NodeHooks:
        with LOCKS.acc:  # See Note [Leaf hooks]
            leaf_hooks = ext.hooks
            if leaf_hooks is None:
                leaf_hooks = NodeHooks()
                leaf_hooks.tensor_pre = {0: HookTable()}  # its one slot, never replaced
                ext.hooks = leaf_hooks
                acc = self._acc() if self._acc is not None else None
                if acc is not None:
                    share_tensor_hooks(acc, leaf_hooks)  # next to any hooks of the node itself
        return leaf_hooks

    def register_post_accumulate_grad_hook(self, fn: Callable[["Tensor"], None]) -> RemovableHandle:
        """``fn(tensor)`` runs after a gradient was accumulated into this leaf's ``.grad``."""
        if self._grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        if not self._rg:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        return _add_hook(self._ext_obj(), "post_acc", fn)

    def backward(self, gradient: "Tensor | None" = None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs: Sequence["Tensor"] | None = None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``; see :func:`engine.backward`."""
        if self._base is not None:  # See Note [Stale views] in ops/views.py
            _state.refresh_view(self, "backward")
        # (a module global, not an import here: a function-level import costs about 1 us a call)
        _autograd.backward(self, gradient, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)

    # -- conversions --------------------------------------------------------------------
    def numpy(self) -> numpy.ndarray:
        """A host numpy array (a view for cpu tensors). Refused while requires_grad under grad
        mode, like torch (allowed under no_grad, as torch allows it)."""
        if self._rg and tls.grad_enabled:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        return self.device.to_host(self._data)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> numpy.ndarray:
        """``numpy.asarray(t)`` / ``numpy.array(t)``: the host array :meth:`numpy` gives (shared
        with a cpu tensor's data), refused while requires_grad, like torch. numpy 2's ``copy``
        is honoured: ``copy=False`` raises ValueError where a copy cannot be avoided."""
        a = self.numpy()
        if dtype is not None and numpy.dtype(dtype) != a.dtype:
            if copy is False:
                raise ValueError(f"numpy.asarray(tensor, copy=False): converting {self.dtype} to "
                                 f"{numpy.dtype(dtype)} needs a copy")
            return a.astype(dtype)
        if copy:
            return a.copy()
        if copy is False and a is not self._data:
            raise ValueError(f"numpy.asarray(tensor, copy=False): a {self.device} tensor's data is not "
                             "host memory; a copy is needed")
        return a

    def __array_wrap__(self, array: Any, context: Any = None, return_scalar: bool = False) -> "Tensor":
        """A numpy ufunc applied to tensors (``numpy.exp(t)``) returns a cpu tensor of the
        result, outside any graph, as torch does (0-d results too)."""
        return _wrap(numpy.asarray(array), devices.cpu)

    def item(self) -> Any:
        if self._data.size != 1:
            raise RuntimeError(f"a Tensor with {self._data.size} elements cannot be converted to Scalar")
        return self._data.item()

    def tolist(self) -> Any:
        return self.device.to_host(self._data).tolist()

    def detach(self) -> "Tensor":
        """A new leaf sharing data (and version counter) with this tensor, outside the graph."""
        t = _wrap(self._data, self.device)
        t._vc = self._vc  # an alias, not a view: See Note [Versions and views] in versions.py
        return t

    def detach_(self) -> "Tensor":
        """Detach this tensor from the graph in place: it becomes a leaf that requires no grad
        (torch's ``detach_``). A view cannot be detached in place."""
        if self._base is not None:
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        if self._grad_fn is not None:
            self._ext_obj().detached_at = _graph._next_seq()  # See Note [Detached saved tensors] in graph.py
        self._grad_fn = None
        self._rg = False
        self._output_nr = 0
        return self

    @property
    def output_nr(self) -> int:
        """Which output of ``grad_fn`` this tensor is (0 for a leaf), as torch's."""
        return self._output_nr

    def cpu(self) -> "Tensor":
        return self.to(_cpu)

    def __repr__(self) -> str:
        extra = ""
        if self.device is not _cpu:
            extra += f", device='{self.device}'"
        if self._grad_fn is not None:
            extra += f", grad_fn=<{self._grad_fn.name()}>"
        elif self._rg:
            extra += ", requires_grad=True"
        body = numpy.array2string(self.device.to_host(self._data), separator=", ", prefix="tensor(")
        return f"tensor({body}, dtype={self._data.dtype}{extra})"

    def __bool__(self) -> bool:
        if self._data.size != 1:
            raise RuntimeError(f"Boolean value of Tensor with {self._data.size} elements is ambiguous")
        return bool(self._data)

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self._data.dtype.kind not in "iub" or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    __hash__ = object.__hash__  # == is elementwise (ops), so hash stays identity like torch


_new_tensor = object.__new__


def _wrap(data: Any, device: Device) -> Tensor:
    """Internal constructor: ``data`` is already an array of ``device``. The op hot path.

    It repeats ``Tensor.__init__``'s slot assignments on purpose: a shared helper would add a
    call to every op (about 0.07 us)."""
    t = _new_tensor(Tensor)
    if not data.ndim:  # (ndim, not shape: no tuple built; measured 3,818 -> 3,594 instructions per _wrap)
        # numpy ufuncs return scalars (numpy.float64, not arrays) for 0-d results; a Tensor
        # always holds an array, or in-place ops and gradient accumulation on it would fail.
        data = device.xp.asarray(data)
    t._data = data
    t.device = device
    t._grad_fn = None
    t._rg = False
    t._grad = None
    t._vc = [0]
    t._base = None
    t._output_nr = 0
    t._acc = None
    t._ext = None
    return t


def grad_accumulator(t: Tensor) -> AccumulateGrad | None:
    """The leaf's AccumulateGrad, created on first use and kept weakly by the leaf (None for a
    view made under no_grad, whose gradient goes nowhere).

    Creation races between threads are benign only if both get the same node, so the
    check-and-set runs under the accumulator-creation lock (which also orders it against a
    leaf's first tensor hook: See Note [Leaf hooks]).
    """
    ref = t._acc
    acc = ref() if ref is not None else None
    if acc is None:
        e = t._ext
        if e is not None and e.no_grad_view:
            return None  # its gradient goes nowhere: See Note [No-grad views] in versions.py
        with LOCKS.acc:
            ref = t._acc
            acc = ref() if ref is not None else None
            if acc is None:
                acc = AccumulateGrad(t)
                if t.device.has_streams:
                    acc.stream = (t.device, t.device.current_stream())  # See Note [Streams]
                t._acc = weakref.ref(acc)
    return acc


def gradient_edge(t: Tensor) -> tuple:
    """``(node, input_nr)`` through which a gradient reaches ``t``; ``(None, 0)`` if none does."""
    if t._base is not None:  # See Note [Stale views] in ops/views.py
        _state.refresh_view(t, "backward")
    fn = t._grad_fn
    if fn is not None:
        return (fn, t._output_nr)
    if t._rg:
        return (grad_accumulator(t), 0)
    return (None, 0)


def accumulate_into(var: Tensor, g: Tensor, owned: bool = False) -> None:
    """Add gradient ``g`` into ``var.grad`` (caller holds the leaf's lock, or LOCKS.nonleaf_grad).

    Under grad mode (create_graph) the first gradient is copied and the sums are out of place,
    both recorded in the graph (torch's clone). Otherwise the first gradient's array is adopted
    only when ``owned`` says nothing else can read it (Note [Gradient ownership]) and copied
    otherwise; later gradients are added in place, so ``.grad`` keeps its identity across
    backward calls.
    """
    old = var._grad
    if tls.grad_enabled:
        # A recorded copy, as torch clones here: adopting g would let .grad alias the caller's
        # root gradient or a read-only broadcast view, which a later backward adds into in place.
        var._grad = g.clone() if old is None else old + g
        return
    if old is None:
        var._grad = _wrap(g._data if owned else g._data.copy(), g.device)
    elif old._rg or old.shape != g.shape or old.dtype != g.dtype:
        var._grad = (old + g).detach()
    else:
        old.device.xp.add(old._data, g._data, out=old._data)
        versions.bump(old)


# Note [Gradient ownership]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# A gradient's array may be written in place (adopted as a leaf's .grad, which the next
# backward adds into; or summed into by the next gradient for the same input slot) only when
# nothing else can still read it. A node's output cannot promise that: AddBackward0 hands one
# Tensor to both of its inputs, a view's backward returns a view of its incoming gradient, a
# custom Function or a hook may have kept what it returns, and the caller keeps its root
# gradient. Reference counts cannot see all of that either (two input buffers holding the
# same Tensor object leave its array's count at one). So ownership is stated, not inferred:
#
# * The engine owns two kinds of gradients, each an EngineSum whose ``owner`` names the one
#   AccumulateGrad whose input slot it is for: the sums it makes itself for that slot
#   (executor.py's _buffer_add: a fresh array from xp.add), and the fresh arrays a node's
#   first-order backward has just computed for an edge into that AccumulateGrad and keeps
#   nowhere else (``owned_gradient``: linear's weight and bias gradients, a matmul's result
#   and a column sum). Until the AccumulateGrad runs, only the producing node's return value
#   and then that buffer slot hold it (buffers are private to their GraphTask); the executor
#   disowns a node's outputs before its post-hooks see them, as below.
# * A later gradient for the slot is added into it in place; AccumulateGrad.apply adopts its
#   array as .grad, without a copy, only if ``owner is self`` (and clears the mark).
# * Before any user code can see an AccumulateGrad's inputs (its hooks, grad()'s capture) or a
#   node's outputs (its post-hooks), the executor replaces each EngineSum by a plain Tensor
#   (disown), so no marked object ever escapes: an escaped array can never come back as owned.
# * Every other first gradient is copied into .grad; other buffers sum out of place.
#
# The copy costs one memcpy per leaf whose .grad is None and whose gradient arrives along a
# single edge from a node that does not own it (benchmarks/run_all.py's mlp workload and
# benchmarks/gpu.py's MLP step measure it; docs/performance.md). torch decides the same
# question by the gradient's reference count (AccumulateGrad steals a tensor nothing else
# holds); threadgrad states it instead, for the reasons above.


class WrappedNumber(Tensor):
    """A Python number an op turned into a tensor operand (torch's "wrapped number", as in
    ``x * 2.0``). Saved for backward as it is: saved-tensor hooks never see it, as in torch,
    so a non-reentrant checkpoint does not count it either. Made by ops/_core.py's as_operand."""

    __slots__ = ()


class EngineSum(Tensor):
    """A gradient the engine owns for one AccumulateGrad's input slot (``owner``): a sum the
    executor made for it, or a node's fresh first-order result. See Note [Gradient ownership]."""

    __slots__ = ("owner",)


def engine_sum(old: Tensor, g: Tensor, owner: Any) -> Tensor:
    """``old + g`` for ``owner``'s input slot (grad mode off): in place when ``old`` is already
    the slot's EngineSum, else a new EngineSum; a plain out-of-place sum when the operands'
    shapes, dtypes or devices differ (then torch's promotion applies). Note [Gradient ownership]."""
    a, b = old._data, g._data
    if a.shape != b.shape or a.dtype != b.dtype or old.device is not g.device:
        return old + g
    if type(old) is EngineSum and old.owner is owner:
        old.device.xp.add(a, b, out=a)
        return old
    t = EngineSum(old.device.xp.add(a, b), old.device)
    t.owner = owner
    return t


def owned_gradient(data: Any, device: Device, consumer: Any) -> Tensor:
    """``data`` as the gradient a node's first-order backward sends to ``consumer`` (the node
    its edge leads to). The caller promises ``data`` is an array it has just made and keeps
    nowhere else; when ``consumer`` is an AccumulateGrad the engine then owns it, so the leaf
    adopts it as ``.grad`` without a copy. See Note [Gradient ownership]."""
    if type(consumer) is not AccumulateGrad:
        return _wrap(data, device)
    t = EngineSum(data, device)
    t.owner = consumer
    return t


def disown(inputs: list) -> list:
    """Replace each EngineSum in an AccumulateGrad's inputs by a plain Tensor over the same
    array, before user code sees them. Note [Gradient ownership]."""
    for k, g in enumerate(inputs):
        if type(g) is EngineSum:
            g.owner = None
            inputs[k] = _wrap(g._data, g.device)
    return inputs


from . import graph as _graph  # noqa: E402
from . import autograd as _autograd  # noqa: E402 - imports this module: read at call time only

_graph.bind_tensor_layer(wrap=_wrap, accumulate=accumulate_into, engine_sum=EngineSum,
                         grad_accumulator=grad_accumulator, wrapped_number=WrappedNumber, tensor=Tensor)


def add_methods(methods: dict[str, Any]) -> None:
    """Bind ``methods`` (functions, or properties) onto Tensor by name: the ops layer gives
    Tensor its operators and methods this way (ops/_methods.py, ops/inplace.py), since the
    engine core imports no ops."""
    for name, fn in methods.items():
        setattr(Tensor, name, fn)
