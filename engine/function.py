"""Custom differentiable functions: ``engine.Function`` and ``once_differentiable``.

The ``ctx`` that forward and backward receive *is* the backward node (as in PyTorch), so
what forward stores on it lives exactly as long as the graph. Tensors go through
``ctx.save_for_backward`` (the save choke point: version checks, saved-tensor hooks);
other values may be set as plain attributes.

>>> from threadgrad import engine
>>> class Cube(engine.Function):
...     @staticmethod
...     def forward(ctx, x):
...         ctx.save_for_backward(x)
...         return x * x * x
...     @staticmethod
...     def backward(ctx, g):
...         (x,) = ctx.saved_tensors
...         return g * 3 * x * x
>>> x = engine.tensor([2.0], requires_grad=True)
>>> y = Cube.apply(x)
>>> y.grad_fn.name()
'CubeBackward'
>>> y.backward(engine.ones(1)); x.grad.tolist()
[12.0]
"""
from __future__ import annotations

import functools
import inspect
import traceback
import warnings
from typing import Any, Callable

from ._state import tls
from ._record import record
from .graph import Node, _next_seq, pack_saved
from . import _state
from .tensor import Tensor, _wrap, gradient_edge
from ..ops._core import fit
from ..ops.views import dirty_base, move_retain, rebase_dirty, regenerate
from .versions import generation, next_generation


class FunctionCtx(Node):
    """The node (and ``ctx``) of one custom Function call."""

    __slots__ = ("_fn_cls", "_to_save", "_non_diff", "_dirty", "_materialize", "needs_input_grad",
                 "_in_meta", "_out_meta")
    runs_without_gradients = True  # torch runs a custom backward even when no gradient arrived
    computes_only_needed = False  # its post-hooks see what backward returned, as torch's
    runs_user_code = True

    def name(self) -> str:
        return f"{self._fn_cls.__name__}Backward"

    # -- the ctx API --------------------------------------------------------------------
    def save_for_backward(self, *tensors: "Tensor | None") -> None:
        """Save tensors (inputs, outputs or None) for backward; read them via ``saved_tensors``."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save Tensors or None, but argument {i} is {type(t).__name__}")
        self._to_save = tensors

    @property
    def saved_tensors(self) -> tuple:  # type: ignore[override]
        """What forward saved, unpacked (raises if the graph was freed or a tensor modified)."""
        return Node.saved_tensors(self)

    def mark_non_differentiable(self, *tensors: Tensor) -> None:
        """These outputs get no gradient (their grad in backward is zeros or None)."""
        self._non_diff = {id(t) for t in tensors}

    def mark_dirty(self, *tensors: Tensor) -> None:
        """These inputs were modified in place by forward and are returned as outputs."""
        self._dirty = {id(t) for t in tensors}

    def set_materialize_grads(self, value: bool) -> None:
        """When True (default), undefined output gradients reach backward as zeros, not None."""
        self._materialize = bool(value)

    # -- running backward ---------------------------------------------------------------
    def apply(self, grads: list) -> tuple:
        if self._materialize:
            grads = [_zeros(meta) if g is None and meta is not None else g for g, meta in zip(grads, self._out_meta)]
        result = self._fn_cls.backward(self, *grads)
        return self._check_grads(result)

    def _check_grads(self, result: Any) -> tuple:
        if not isinstance(result, tuple):
            result = (result,)
        n = len(self._in_meta)
        if len(result) > n and all(r is None for r in result[n:]):
            result = result[:n]
        if len(result) != n:
            raise RuntimeError(f"function {self.name()} returned an incorrect number of gradients (expected {n}, got {len(result)})")
        out = []  # one per edge: per tensor argument, as torch's node has no edge for the others
        edges = self.next_edges
        for i, (g, meta) in enumerate(zip(result, self._in_meta)):
            if meta is None:
                if g is not None:
                    raise RuntimeError(
                        f"function {self.name()} returned a gradient different than None at position {i}, "
                        "but the corresponding forward input was not a Tensor"
                    )
                continue
            edge = edges[len(out)]
            if g is None:
                out.append(None)
                continue
            if not isinstance(g, Tensor):
                raise TypeError(f"function {self.name()} returned a {type(g).__name__} as gradient {i}; expected a Tensor or None")
            shape, dtype, device = meta
            if g.shape != shape and _expandable(shape, g.shape):
                g = fit(g, shape, g.dtype)  # summed down to the input's shape, as torch does
            if g.shape != shape:
                raise RuntimeError(
                    f"Function {self.name()} returned an invalid gradient at index {i} - got {list(g.shape)} "
                    f"but expected shape compatible with {list(shape)}"
                )
            if g.device is not device:
                raise RuntimeError(f"Function {self.name()} returned an invalid gradient at index {i} - expected device {device} but got {g.device}")
            if g.dtype != dtype:
                g = g.to(dtype)
            out.append(g if edge[0] is not None else None)
        return tuple(out)


def _expandable(shape: tuple, to: tuple) -> bool:
    """Can ``shape`` broadcast to ``to`` (torch's is_expandable_to)?"""
    return len(shape) <= len(to) and all(s == t or s == 1 for s, t in zip(reversed(shape), reversed(to)))


def _zeros(meta: tuple) -> Tensor:
    shape, dtype, device = meta
    with device.guard():
        return _wrap(device.xp.zeros(shape, dtype=dtype), device)


class Function:
    """Base class for custom differentiable operations (``torch.autograd.Function``).

    Subclass with ``@staticmethod forward(ctx, *args, **kwargs)`` and
    ``@staticmethod backward(ctx, *grad_outputs)`` (one gradient per forward argument,
    None for arguments that are not tensors or need none); call ``F.apply(*args)``.
    Or, as torch allows, ``forward(*args)`` without ctx plus ``@staticmethod
    setup_context(ctx, inputs, output)``, which saves what backward needs.
    A backward may itself call ``engine.backward`` / ``engine.grad`` (reentrant backward).
    """

    _node_cls: type
    _separate_ctx: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._node_cls = type(f"{cls.__name__}Backward", (FunctionCtx,), {"__slots__": ()})
        cls._separate_ctx = cls.setup_context is not Function.setup_context

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        warnings.warn(f"{self.__class__} should not be instantiated. Methods on autograd functions are all static, "
                      "so you should invoke them on the class itself. Instantiating an autograd function will raise "
                      "an error in a future version of PyTorch.", DeprecationWarning, stacklevel=2)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "Legacy autograd function with non-static forward method is deprecated. Please use new-style autograd "
            "function with static forward method: call F.apply(...) on the class (docs/custom_functions.md).")

    @staticmethod
    def forward(ctx: FunctionCtx, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple, output: Any) -> None:
        """Override to use ``forward(*args)`` without ctx: called after it, with ``apply``'s
        arguments and forward's result, to save what backward needs (torch's setup_context)."""
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx: FunctionCtx, *grad_outputs: Any) -> Any:
        raise NotImplementedError(
            "You must implement either the backward or vjp method for your custom autograd.Function to use it "
            "with backward mode AD."
        )

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        ctx = cls._node_cls()
        ctx._fn_cls = cls
        ctx._to_save = ()
        ctx._non_diff = ctx._dirty = frozenset()
        ctx._materialize = True
        if cls._separate_ctx:
            # As torch: setup_context sees every forward argument, defaults filled in. The
            # signature is read once per class (inspect.signature costs tens of µs).
            sig = cls.__dict__.get("_forward_sig")
            if sig is None:
                sig = cls._forward_sig = inspect.signature(cls.forward)
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = bound.args, bound.kwargs
        for a in args:
            if isinstance(a, Tensor) and a._base is not None:
                _state.refresh_view(a, f"{cls.__name__}.apply")  # maybe stale: Note [Stale views] in ops/views.py
        recording = tls.grad_enabled and any(isinstance(a, Tensor) and a._rg for a in args)
        ctx.needs_input_grad = tuple(recording and isinstance(a, Tensor) and a._rg for a in args)
        prev = tls.grad_enabled
        tls.grad_enabled = False
        try:
            if cls._separate_ctx:
                outputs = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, outputs)
            else:
                outputs = cls.forward(ctx, *args, **kwargs)
        finally:
            tls.grad_enabled = prev
        is_tuple = isinstance(outputs, tuple)
        outs = list(outputs) if is_tuple else [outputs]
        if ctx._dirty and not ctx._dirty <= {id(o) for o in outs if isinstance(o, Tensor)}:
            # Checked even when not recording, as torch does: the rule is about what forward returns.
            raise RuntimeError(
                f"{cls.__name__}: Some elements marked as dirty during the forward method were not returned as "
                "output. The inputs that are modified inplace must all be outputs of the Function."
            )
        if recording:
            _link(ctx, args, outs)
        else:
            # Not recording: returned inputs still come back as new tensor objects (like torch), and
            # so does a dirty input that requires grad (torch's: the result is outside the graph).
            ids = {id(a) for a in args if isinstance(a, Tensor)}
            outs = [_alias(o) if isinstance(o, Tensor) and id(o) in ids and (id(o) not in ctx._dirty or o._rg)
                    else o for o in outs]
        return tuple(outs) if is_tuple else outs[0]


def _alias(t: Tensor) -> Tensor:
    out = _wrap(t._data, t.device)
    out._vc = t._vc
    return out


def _link(ctx: FunctionCtx, args: tuple, outs: list) -> None:
    """Record ``ctx`` as the grad_fn of the differentiable outputs (PyTorch's _wrap_outputs)."""
    input_args = [a for a in args if isinstance(a, Tensor)]
    input_ids = {id(a) for a in input_args}
    # Check every dirty output before changing any history, so a refused call leaves none half-linked.
    dirty_views = {}  # id of a differentiable dirty view -> (base, its positions in it)
    dirty_others = []  # the other differentiable dirty outputs
    for o in outs:
        if isinstance(o, Tensor) and id(o) in ctx._dirty:
            differentiable = id(o) not in ctx._non_diff and o.dtype.kind in "fc"
            if differentiable:
                _check_dirty(o, id(o) in input_ids)
            base = dirty_base(ctx._fn_cls.__name__, o, differentiable)
            if differentiable:
                if base is not None:
                    dirty_views[id(o)] = base
                else:
                    dirty_others.append(o)
    if dirty_views and len(outs) > 1:
        # torch's refusal: the base's CopySlices wraps this node and takes one output's
        # gradient (Note [CopySlices] in ops/views.py), so the other outputs' gradients would
        # run this node a second time.
        raise RuntimeError(
            "If your Function modifies inplace an input that is a view of another Tensor, your Function cannot "
            "return more than one Tensor. This is not supported by the current autograd engine. You should either "
            "make sure the input is not a view (using .clone() for example) or make your Function only return one "
            "Tensor (potentially splitting it into two Functions: one doing the inplace that returns a single "
            "Tensor and a second one that does the other operations)."
        )
    for o in outs:
        if id(o) in dirty_views and o._grad_fn is not None and o._base._grad_fn is not None:
            # torch's CopySlices sends the gradient of the view's elements straight to its base's
            # history, never through the view's old grad_fn (whose hooks must not fire): so this
            # node's edge for it is its elements of the base as the base is now, as a built-in
            # in-place op on a view takes it (_must_record in ops/inplace.py).
            regenerate(o)
    ctx.sequence_nr = _next_seq()
    ctx.next_edges = tuple([gradient_edge(a) for a in args if isinstance(a, Tensor)])  # tensors only, as torch
    ctx._in_meta = tuple((a.shape, a.dtype, a.device) if isinstance(a, Tensor) else None for a in args)
    out_meta = []
    n_diff = 0
    view_outputs: list = []
    rebased: list = []
    for i, o in enumerate(outs):
        if not isinstance(o, Tensor):
            out_meta.append(None)
            continue
        given = id(o)  # ids in _dirty/_non_diff are the objects forward returned, not the alias below
        if given in input_ids and given not in ctx._dirty:
            o = outs[i] = _alias(o)  # an input returned as-is becomes a new tensor (torch's view_as(self))
        out_meta.append((o.shape, o.dtype, o.device))
        if given in ctx._non_diff or o.dtype.kind not in "fc":
            continue
        n_diff += 1
        if given in dirty_views:
            # torch's rebase_history: the view's base takes CopySlices over this node's output
            # i, and the view's history is taken anew on top of the base's (below), so this
            # node is not the view's grad_fn, and the view's hooks and retain_grad() see only
            # the gradient of its own later uses (issue 33, item 1).
            rebased.append((o, i, *dirty_views[given]))
            continue
        old_fn, old_nr = o._grad_fn, o._output_nr
        o._grad_fn = ctx
        o._rg = True
        o._output_nr = i
        if given in ctx._dirty:
            move_retain(o, old_fn, old_nr)  # torch's update_tensor_hooks_on_new_gradfn (item 2)
        elif o._base is not None or any(o._vc is a._vc for a in input_args):
            # A view (of an input or of a temporary) or an input returned as-is: an in-place op
            # on it would override this Function's backward, so it is refused there, as torch
            # refuses it (with the multiple-views message when there are several outputs).
            view_outputs.append(i)
    if view_outputs:
        # torch's CreationMeta: IN_CUSTOM_FUNCTION, or MULTI_OUTPUT_NODE with several
        # differentiable outputs (custom_function.cpp, _process_backward_mode_ad).
        if n_diff > 1:
            ctx.multi_view_outputs = tuple(view_outputs)
        else:
            ctx.custom_view_outputs = tuple(view_outputs)
        # Those views describe their bases as they are now: stamp this node with the bases'
        # generation, or an in-place op made on a base before this call would make them look
        # stale, and the Function's node would be replaced by the base's history (Note [Stale
        # views] in ops/views.py). One stamp per node: with views of several bases, the oldest.
        gens = [generation(outs[i]._base) for i in view_outputs if outs[i]._base is not None]
        if gens and min(gens):
            ctx._view_gen = min(gens)
    for o in dirty_others:
        next_generation(o)  # its views hold an old graph now (Note [Versions and views])
    for o, i, base, idx in rebased:
        # As a built-in in-place op on a view does (ops/inplace.py's _adopt): rebase the base,
        # start a new generation, then give the view its history anew from the rebased base.
        rebase_dirty(ctx, i, o, base, idx, next(k for k, a in enumerate(input_args) if a is o))
        next_generation(o)
        regenerate(o)
    ctx._out_meta = tuple(out_meta)
    ctx.num_inputs = len(outs)
    for o in outs:
        if isinstance(o, Tensor) and o.device.has_streams:
            ctx.stream = (o.device, o.device.current_stream())  # See Note [Streams] in executor.py
            break
    pack_saved(ctx, ctx._to_save)
    ctx._to_save = ()
    if tls.anomaly:
        ctx.metadata["traceback_"] = traceback.format_stack()[:-2]


def _check_dirty(o: Tensor, is_input: bool) -> None:
    """torch's check on a differentiable output marked dirty that is not an input
    (custom_function.cpp); a dirty view input with several outputs is refused in :func:`_link`."""
    is_view = o._base is not None
    if not is_input:
        msg = ("ctx.mark_dirty() received a tensor that was not an input. Only input Tensors that have been "
               "mutated should be passed to ctx.mark_dirty().")
        if is_view:
            raise RuntimeError(msg)  # torch: the view-of-an-intermediate case
        warnings.warn(msg, UserWarning, stacklevel=4)


class _DelayedError(Node):
    """Stands in for the backward of a once_differentiable backward: differentiating it raises."""

    __slots__ = ("msg",)

    def backward(self, *grads: Any) -> tuple:
        raise RuntimeError(self.msg)


def once_differentiable(backward: Callable) -> Callable:
    """Decorate a Function's backward that is not itself differentiable: it runs without
    recording, and trying to differentiate its result (double backward) raises."""

    @functools.wraps(backward)
    def wrapper(ctx: FunctionCtx, *grads: Any) -> Any:
        prev = tls.grad_enabled
        tls.grad_enabled = False
        try:
            result = backward(ctx, *grads)
        finally:
            tls.grad_enabled = prev
        if not (prev and any(isinstance(g, Tensor) and g._rg for g in grads)):
            return result
        single = not isinstance(result, tuple)
        results = (result,) if single else result
        wrapped = []
        for r in results:
            if isinstance(r, Tensor) and r.dtype.kind in "fc":
                r = _alias(r)
                node = _DelayedError()
                node.msg = f"trying to differentiate twice a function that was marked with @once_differentiable ({ctx.name()})"
                record(node, [g for g in grads if isinstance(g, Tensor)], r)
            wrapped.append(r)
        return wrapped[0] if single else tuple(wrapped)

    return wrapper
