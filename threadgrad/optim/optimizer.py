"""``tg.optim.Optimizer``: what SGD, Adam and AdamW share, with torch's interface.

Parameters are leaf tensors, given as a list or as param groups (dicts with ``"params"`` and
per-group settings). ``step(closure=None)`` updates them in place, outside the graph;
``zero_grad(set_to_none=True)``; ``state_dict()`` / ``load_state_dict()`` in torch's format
(parameters numbered by their order across groups).

Note [Optimizer threads]
~~~~~~~~~~~~~~~~~~~~~~~~
Each optimizer has one lock. ``step``'s update, ``zero_grad``, ``add_param_group``,
``state_dict`` and ``load_state_dict`` run under it, so several threads may call ``step()``
(or ``zero_grad()``) on one optimizer at once: the updates are serialized, each one whole,
and the state (``step`` counts, moments) is never torn. A ``closure`` runs before the lock is
taken (it usually calls backward, which must not wait on the optimizer). What the lock does
not cover is a backward running at the same time on another thread: its AccumulateGrad adds
into ``p.grad`` in place while ``step`` reads it, so ``step`` could see part of a gradient.
Finish the backward first (``loss.backward()`` returns after accumulating;
``backward_async(...).result()``): see the concurrency section of docs/autograd.md and
docs/optim.md. Two optimizers over the same parameters have two locks: do not step them
concurrently.

Note [Update functions]
~~~~~~~~~~~~~~~~~~~~~~~
Each optimizer's arithmetic is one private function over lists of raw arrays of one device
(``_sgd_update``, ``_adam_update``), written against that device's array module ``xp``, that
updates them in place. ``step`` gathers the arrays per device and calls it, then bumps each
parameter's version (an in-place change, as torch's ``param.add_``: a graph that saved the
parameter refuses to backward through the stale value). On a device with fused kernels (a
GPU: ``device.kernels.fused``), ``step`` calls the device's ``sgd`` / ``adam`` instead (one
kernel per parameter, devices/_fused.py), which compute the same update, checked against the
plain formulas on a real GPU (tests/cuda/test_optim_cuda.py).
"""
from __future__ import annotations

import threading
import warnings
from collections import defaultdict
from copy import deepcopy
from typing import Any, Callable, Iterable

from ..devices import Device
from ..engine._locks import remade_at_fork
from ..engine.grad_mode import enable_grad
from ..engine.tensor import Tensor
from ..engine.versions import bump as _bump_version

__all__ = ["Optimizer", "required"]


class _Required:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()


def _typename(obj: Any) -> str:
    return "threadgrad.Tensor" if isinstance(obj, Tensor) else type(obj).__name__


class Optimizer:
    """Base class: holds ``param_groups`` (a list of dicts), ``state`` (parameter -> dict) and
    ``defaults``; subclasses define ``_update_group(group)``."""

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.state: defaultdict[Tensor, dict] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        self._lock = threading.RLock()  # See Note [Optimizer threads]
        remade_at_fork(self)  # a child forked mid-step finds it free: Note [Locks across fork]
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            f"but got {_typename(params)}")
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    # -- groups -------------------------------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters (a dict with ``"params"`` and any per-group settings; the
        others take the optimizer's defaults)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {_typename(param_group)}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering of "
                            "tensors in sets will change between runs. Please use a list instead.")
        else:
            params = list(params)
        if params and isinstance(params[0], tuple):  # named parameters: (name, tensor) pairs
            param_group = dict(param_group, param_names=[n for n, _ in params])
            params = [p for _, p in params]
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {_typename(p)}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        group = dict(param_group, params=params)
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {name}")
            group.setdefault(name, default)
        if len({id(p) for p in params}) != len(params):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in future, this will "
                          "cause an error; see github.com/pytorch/pytorch/issues/40967 for more information",
                          stacklevel=3)
        with self._lock:
            seen = {id(p) for g in self.param_groups for p in g["params"]}
            if seen & {id(p) for p in params}:
                raise ValueError("some parameters appear in more than one parameter group")
            self.param_groups.append(group)

    # -- the update ---------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's gradient: to None (default, as torch), or to zeros in place."""
        with self._lock:
            for group in self.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is None:
                        continue
                    if set_to_none:
                        p.grad = None
                    else:
                        if g.grad_fn is not None:
                            g.detach_()
                        else:
                            g.requires_grad_(False)
                        g.zero_()

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter that has a gradient. ``closure`` (re-evaluating the
        loss, under grad mode) is called first; its result is returned."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        self._opt_called = True  # what lr_scheduler's order warning looks for (torch wraps step to set it)
        with self._lock:  # See Note [Optimizer threads]
            for group in self.param_groups:
                self._update_group(group)
        return loss

    def _update_group(self, group: dict[str, Any]) -> None:
        raise NotImplementedError

    @staticmethod
    def _by_device(params: list[Tensor]) -> dict[Device, list[int]]:
        """Positions of the parameters that have a gradient, per device (one update call each)."""
        out: dict[Device, list[int]] = {}
        for i, p in enumerate(params):
            if p.grad is not None:
                out.setdefault(p.device, []).append(i)
        return out

    @staticmethod
    def _finish(params: list[Tensor]) -> None:
        """Each updated parameter's version goes up by one. See Note [Update functions]."""
        for p in params:
            _bump_version(p)

    # -- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}``, torch's
        format: parameters numbered in order across groups; the state's tensors are the live ones."""
        with self._lock:
            index: dict[int, int] = {}
            groups = []
            for group in self.param_groups:
                packed = {k: v for k, v in group.items() if k != "params"}
                for p in group["params"]:
                    index.setdefault(id(p), len(index))
                packed["params"] = [index[id(p)] for p in group["params"]]
                groups.append(packed)
            state = {(index[id(p)] if isinstance(p, Tensor) else p): v for p, v in self.state.items()}
            return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the state and group settings of :meth:`state_dict` (from this optimizer's kind,
        over parameters of the same shapes in the same order). State tensors are copied onto
        each parameter's device, and floating ones into its dtype (``step`` stays as saved)."""
        saved_groups = deepcopy(state_dict["param_groups"])
        with self._lock:
            groups = self.param_groups
            if len(groups) != len(saved_groups):
                raise ValueError("loaded state dict has a different number of parameter groups")
            if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
                raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                                 "optimizer's group")
            id_map = {old: p for g, s in zip(groups, saved_groups) for old, p in zip(s["params"], g["params"])}
            state: defaultdict[Any, dict] = defaultdict(dict)
            for k, v in state_dict["state"].items():
                if k in id_map:
                    param = id_map[k]
                    state[param] = {key: _cast(param, value, key) for key, value in v.items()}
                else:
                    state[k] = v
            new_groups = []
            for g, s in zip(groups, saved_groups):
                for key, default in self.defaults.items():  # a state dict from before a setting existed
                    s.setdefault(key, default)
                s["params"] = g["params"]
                if "param_names" in g and "param_names" not in s:
                    s["param_names"] = g["param_names"]
                new_groups.append(s)
            self.state = state
            self.param_groups = new_groups

    def __getstate__(self) -> dict[str, Any]:
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()
        remade_at_fork(self)

    def _remake_locks(self) -> None:
        """In a forked child (engine/_locks.py, Note [Locks across fork]): a thread of the parent
        inside ``step`` left the lock held, and that thread does not exist here."""
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        lines = [type(self).__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines.extend(f"    {k}: {group[k]}" for k in sorted(group) if k != "params")
        lines.append(")")
        return "\n".join(lines)


def _cast(param: Tensor, value: Any, key: str) -> Any:
    """A saved state value for ``param``: tensors copied to its device (floating ones to its
    dtype, ``step`` excepted, as torch's load_state_dict)."""
    if isinstance(value, Tensor):
        from ..ops import to

        dtype = param.dtype if (key != "step" and value.dtype.kind == "f" and param.dtype.kind == "f") else None
        out = to(value.detach(), param.device, dtype)
        return out.clone() if out is value or out._data is value._data else out
    if isinstance(value, dict):
        return {k: _cast(param, v, k) for k, v in value.items()}
    return value
