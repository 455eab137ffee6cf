"""Module backward hooks (``register_full_backward_hook``, ``register_full_backward_pre_hook``),
built as torch's torch/utils/hooks.py BackwardHook is: on the engine's node hooks.

Note [Module backward hooks]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A call of a module that has backward hooks passes its tensor arguments, and then its tensor
outputs, through an identity custom Function (``BackwardHookFunction``). In backward, the
output identity's node pre-hook sees the gradients with respect to the module's outputs
(it runs the backward pre-hooks, which may replace them, and keeps them), and the input
identity's node hook sees the gradients with respect to the module's inputs: it calls each
user hook with ``(module, grad_input, grad_output)``, whose non-None result replaces
``grad_input``. All of it lives in one ``BackwardHook`` object per call, so threads calling
one module at once never share it (Note [Modules and threads] in module.py). As in torch,
the identity's outputs are views of the arguments: an in-place op on them is refused.
"""
from __future__ import annotations

import itertools
import warnings
from collections import OrderedDict
from typing import Any, Callable

from ...engine.function import Function
from ...engine.grad_mode import is_grad_enabled
from ...engine.tensor import Tensor

__all__ = ["HooksMixin", "RemovableHandle", "BackwardHook", "BackwardHookFunction"]

_hook_ids = itertools.count()  # handle ids; next() on a count is atomic under the GIL and free-threaded builds


class RemovableHandle:
    """What ``register_*_hook`` returns: ``remove()`` takes the hook out (under the module's
    lock; See Note [Modules and threads]); also a context manager."""

    def __init__(self, module: "Module", table: str) -> None:
        self.id = next(_hook_ids)
        self._module = module
        self._tables = (table,) if isinstance(table, str) else table

    def remove(self) -> None:
        module = self._module
        with module._hooks_lock:
            for table in self._tables:
                hooks = module.__dict__[table]
                if self.id in hooks:
                    new = OrderedDict(hooks)
                    del new[self.id]
                    object.__setattr__(module, table, new)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()



class HooksMixin:
    """Module's hook registration and ``__call__`` (the forward and backward hooks around
    ``forward``); the tables are made by ``Module.__init__``. See Note [Modules and threads]
    in module.py."""

    # -- calling ------------------------------------------------------------------------------
    def _add_hook(self, table: str, hook: Callable, prepend: bool, extra: dict[str, bool]) -> RemovableHandle:
        handle = RemovableHandle(self, (table,) + tuple(extra))
        with self._hooks_lock:  # copy-on-write: See Note [Modules and threads]
            hooks = self.__dict__[table]
            new = OrderedDict(hooks)
            new[handle.id] = hook
            if prepend:
                new.move_to_end(handle.id, last=False)
            object.__setattr__(self, table, new)
            for side, flag in extra.items():
                if flag:
                    marks = dict(self.__dict__[side])
                    marks[handle.id] = True
                    object.__setattr__(self, side, marks)
        return handle

    def register_forward_pre_hook(self, hook: Callable, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args)`` (or ``hook(module, args, kwargs)`` with ``with_kwargs``) runs
        before ``forward``; a non-None result replaces the arguments (a single value is made a
        1-tuple; with kwargs, an ``(args, kwargs)`` pair)."""
        return self._add_hook("_forward_pre_hooks", hook, prepend, {"_forward_pre_hooks_with_kwargs": with_kwargs})

    def register_forward_hook(self, hook: Callable, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """``hook(module, args, output)`` (or ``hook(module, args, kwargs, output)``) runs after
        ``forward``; a non-None result replaces the output. ``always_call``: it runs even when
        ``forward`` raised."""
        return self._add_hook("_forward_hooks", hook, prepend, {"_forward_hooks_with_kwargs": with_kwargs,
                                                                 "_forward_hooks_always_called": always_call})

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_input, grad_output)`` runs when the gradients with respect to the
        module's inputs are computed (tuples, None for non-tensor or non-differentiable
        positions); a non-None result replaces ``grad_input``. See Note [Module backward hooks]."""
        return self._add_hook("_backward_hooks", hook, prepend, {})

    def register_full_backward_pre_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_output)`` runs when the gradients with respect to the module's
        outputs are known; a non-None result replaces ``grad_output``."""
        return self._add_hook("_backward_pre_hooks", hook, prepend, {})

    def register_backward_hook(self, hook: Callable) -> RemovableHandle:
        raise NotImplementedError("register_backward_hook (torch's deprecated form) is not supported: use "
                                  "register_full_backward_hook")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        d = self.__dict__
        pre_hooks = d["_forward_pre_hooks"]  # snapshots: See Note [Modules and threads]
        hooks = d["_forward_hooks"]
        if d["_backward_hooks"] or d["_backward_pre_hooks"]:
            return self._call_with_backward_hooks(args, kwargs)
        if not pre_hooks and not hooks:
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs, pre_hooks, hooks)

    def _call_with_backward_hooks(self, args: tuple, kwargs: dict) -> Any:
        """See Note [Module backward hooks]."""
        d = self.__dict__
        bw = BackwardHook(self, list(d["_backward_hooks"].values()), list(d["_backward_pre_hooks"].values()))
        args = bw.setup_input_hook(args)
        pre_hooks, hooks = d["_forward_pre_hooks"], d["_forward_hooks"]
        result = self._call_with_hooks(args, kwargs, pre_hooks, hooks) if pre_hooks or hooks else \
            self.forward(*args, **kwargs)
        if not isinstance(result, (Tensor, tuple)):
            warnings.warn("For backward hooks to be called, module output should be a Tensor or a tuple of Tensors "
                          f"but received {type(result)}", stacklevel=3)
            return result
        return bw.setup_output_hook(result)

    def _call_with_hooks(self, args: tuple, kwargs: dict, pre_hooks: dict, hooks: dict) -> Any:
        d = self.__dict__
        if pre_hooks:
            with_kwargs = d["_forward_pre_hooks_with_kwargs"]
            for hook_id, hook in pre_hooks.items():
                if hook_id in with_kwargs:
                    result = hook(self, args, kwargs)
                    if result is not None:
                        if not (isinstance(result, tuple) and len(result) == 2):
                            raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, "
                                               f"new_kwargs), but got {result}.")
                        args, kwargs = result
                else:
                    result = hook(self, args)
                    if result is not None:
                        args = result if isinstance(result, tuple) else (result,)
        if not hooks:
            return self.forward(*args, **kwargs)
        with_kwargs = d["_forward_hooks_with_kwargs"]
        always = d["_forward_hooks_always_called"]
        try:
            output = self.forward(*args, **kwargs)
        except Exception:
            for hook_id, hook in hooks.items():
                if hook_id in always:
                    try:
                        hook(self, args, kwargs, None) if hook_id in with_kwargs else hook(self, args, None)
                    except Exception:  # noqa: BLE001,S110 - torch warns and re-raises the forward's error
                        pass
            raise
        for hook_id, hook in hooks.items():
            result = hook(self, args, kwargs, output) if hook_id in with_kwargs else hook(self, args, output)
            if result is not None:
                output = result
        return output



class BackwardHookFunction(Function):
    """The identity, as a node on which backward hooks hang (torch's name: its node is
    ``BackwardHookFunctionBackward``)."""

    @staticmethod
    def forward(ctx: Any, *args: Tensor) -> tuple:
        ctx.mark_non_differentiable(*[a for a in args if not a.requires_grad])
        return args

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple:
        return grads


def _pack_with_none(indices: list[int], values: Any, size: int) -> tuple:
    out = [None] * size
    for i, v in zip(indices, values):
        out[i] = v
    return tuple(out)


def _unpack_none(indices: list[int], values: tuple) -> tuple:
    return tuple(values[i] for i in indices)


class BackwardHook:
    """The backward hooks of one module call. See Note [Module backward hooks]."""

    def __init__(self, module: Any, user_hooks: list[Callable], user_pre_hooks: list[Callable]) -> None:
        self.module = module
        self.user_hooks = user_hooks
        self.user_pre_hooks = user_pre_hooks
        self.grad_outputs: tuple | None = None
        self.n_inputs = self.n_outputs = 0
        self.input_tensors_index: list[int] | None = None
        self.output_tensors_index: list[int] | None = None

    def _apply_on_tensors(self, fn: Callable, args: tuple) -> tuple:
        idx = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        tensors = [args[i] for i in idx]
        if not (any(t.requires_grad for t in tensors) and is_grad_enabled()):
            return args, None
        # What torch's hook sees for a tensor input that gets no gradient is zeros (its custom
        # Function materializes them); keep what is needed to make them.
        self._zeros_meta = [(t.shape, t.dtype, t.device) for t in tensors]
        new = BackwardHookFunction.apply(*tensors)
        if not isinstance(new, tuple):
            new = (new,)
        grad_fns = [t.grad_fn for t in new if t.grad_fn is not None]
        fn(grad_fns[0])
        out = list(args)
        for i, t in zip(idx, new):
            out[i] = t
        return tuple(out), idx

    def setup_input_hook(self, args: tuple) -> tuple:
        res, self.input_tensors_index = self._apply_on_tensors(self._set_user_hook, args)
        self._zeros_meta_in = getattr(self, "_zeros_meta", [])
        self.n_inputs = len(args)
        return res

    def _set_user_hook(self, grad_fn: Any) -> None:
        def hook(grad_input: tuple, _grad_output: tuple) -> Any:
            if self.grad_outputs is None:
                return None  # the gradient reached the inputs without passing the outputs
            from ...engine import creation

            filled = [g if g is not None else creation.zeros(*shape, dtype=dtype, device=device)
                      for g, (shape, dtype, device) in zip(grad_input, self._zeros_meta_in)]
            res = _pack_with_none(self.input_tensors_index or [], filled, self.n_inputs)
            for user_hook in self.user_hooks:
                out = user_hook(self.module, res, self.grad_outputs)
                if out is None:
                    continue
                if len(out) != len(res):
                    raise RuntimeError(f"Backward hook returned an invalid number of grad_input, got {len(out)}, "
                                       f"but expected {len(res)}")
                res = out
            self.grad_outputs = None
            out = _unpack_none(self.input_tensors_index or [], res)
            # the engine keeps a None gradient None (the zeros above were for the hooks' eyes only)
            return tuple(None if given is None else o for o, given in zip(out, grad_input))

        grad_fn.register_hook(hook)

    def setup_output_hook(self, result: Any) -> Any:
        is_tuple = isinstance(result, tuple)
        args = result if is_tuple else (result,)

        def fn(grad_fn: Any) -> None:
            def prehook(grad_output: tuple) -> Any:
                self.grad_outputs = _pack_with_none(self.output_tensors_index or [], grad_output, self.n_outputs)
                for user_pre_hook in self.user_pre_hooks:
                    new = user_pre_hook(self.module, self.grad_outputs)
                    if new is None:
                        continue
                    if len(new) != len(self.grad_outputs):
                        raise RuntimeError(f"Backward pre hook returned an invalid number of grad_output, got "
                                           f"{len(new)}, but expected {len(self.grad_outputs)}")
                    self.grad_outputs = tuple(new)
                local = self.grad_outputs
                if self.input_tensors_index is None:  # no input requires grad: call the hooks here
                    if self.user_hooks:
                        warnings.warn("Full backward hook is firing when gradients are computed with respect to "
                                      "module outputs since no inputs require gradients. See "
                                      "https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html#torch.nn."
                                      "Module.register_full_backward_hook for more details.", stacklevel=2)
                    grad_inputs = _pack_with_none([], [], self.n_inputs)
                    for user_hook in self.user_hooks:
                        res = user_hook(self.module, grad_inputs, self.grad_outputs)
                        if res is not None and not (isinstance(res, tuple) and all(r is None for r in res)):
                            raise RuntimeError("Backward hook for Modules where no input requires gradient should "
                                               "always return None or None for all gradients.")
                    self.grad_outputs = None
                return tuple(local[i] for i in self.output_tensors_index or [])

            grad_fn.register_prehook(prehook)

        res, self.output_tensors_index = self._apply_on_tensors(fn, args)
        self.n_outputs = len(args)
        return res if is_tuple else res[0]
