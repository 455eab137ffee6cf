"""Backends: the few primitives the interpreter needs, for threadgrad and for torch.

Both have the same shape: ``tensor``, the vocabulary's ops, ``hop`` (threadgrad: ``ops.to``
a device; torch, CPU only here: ``clone``, the same identity gradient through one node),
``checkpoint``, ``backward`` / ``grad``, the custom Functions (reentrant and faulting), and
``to_numpy``. Hooks and ``retain_grad`` are called on the tensors directly: their names and
signatures are the same in both.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np


class InjectedFault(Exception):
    """What a faulting node or hook raises (``"exc"`` faults); ``"kbi"`` raises KeyboardInterrupt."""


FAULT_MESSAGE = "injected fault"


def raise_fault(kind: str) -> None:
    if kind == "kbi":
        raise KeyboardInterrupt(FAULT_MESSAGE)
    raise InjectedFault(FAULT_MESSAGE)


class ThreadgradBackend:
    name = "threadgrad"

    def __init__(self) -> None:
        from threadgrad import engine, ops
        self.engine, self.ops = engine, ops
        self.RTanh, self.RMul, self.Fault, self.Tie, self.DirtyMul = _functions(
            engine.Function, engine.grad, engine.enable_grad, ops.tanh, ops.mul)

    def tensor(self, values: Any, requires_grad: bool) -> Any:
        return self.engine.tensor(np.array(values, dtype=np.float64), dtype=np.float64,
                                  requires_grad=requires_grad)

    def hop(self, x: Any, device: str) -> Any:
        return self.ops.to(x, device)

    def device_of(self, x: Any) -> str:
        return str(x.device)

    def full_like(self, values: Any, like: Any) -> Any:
        return self.engine.tensor(np.array(values, dtype=np.float64), dtype=np.float64, device=like.device)

    add = staticmethod(lambda a, b: a + b)
    mul = staticmethod(lambda a, b: a * b)

    def tanh(self, x): return self.ops.tanh(x)
    def exp(self, x): return self.ops.exp(x)
    def matmul(self, a, b): return self.ops.matmul(a, b)
    def clone(self, x): return self.ops.clone(x)
    def detach(self, x): return x.detach()
    def sum(self, x, dim, keepdim): return self.ops.sum(x, dim=dim, keepdim=keepdim)
    def cat(self, xs, dim): return self.ops.cat(xs, dim)
    def split(self, x, sizes, dim): return self.ops.split(x, sizes, dim)
    def reshape(self, x, shape): return self.ops.reshape(x, shape)
    def transpose(self, x, d0, d1): return self.ops.transpose(x, d0, d1)
    def zeros_like(self, x): return self.engine.zeros(x.shape, dtype=np.float64, device=x.device)
    def no_grad(self): return self.engine.no_grad()

    def checkpoint(self, fn: Callable, *args: Any, use_reentrant: bool) -> Any:
        return self.engine.checkpoint(fn, *args, use_reentrant=use_reentrant)

    def saved_hooks(self, kind: str) -> Any:
        if kind == "cpu":
            return self.engine.save_on_cpu()
        return self.engine.saved_tensors_hooks(lambda t: t.detach().clone(), lambda t: t)

    def backward(self, root: Any, gout: Any, inputs: Any) -> None:
        self.engine.backward(root, gout, retain_graph=True, inputs=inputs)

    def grad(self, root: Any, inputs: list, gout: Any) -> tuple:
        return self.engine.grad(root, inputs, grad_outputs=gout, retain_graph=True, allow_unused=True)

    def to_numpy(self, t: Any) -> np.ndarray:
        return np.array(t.detach().cpu()._data, dtype=np.float64)

    def grad_enabled(self) -> bool:
        return self.engine.is_grad_enabled()


class TorchBackend:
    name = "torch"

    def __init__(self) -> None:
        import torch
        import torch.utils.checkpoint
        self.torch = torch
        self.RTanh, self.RMul, self.Fault, self.Tie, self.DirtyMul = _functions(
            torch.autograd.Function, torch.autograd.grad, torch.enable_grad, torch.tanh, torch.mul)

    def tensor(self, values: Any, requires_grad: bool) -> Any:
        return self.torch.tensor(values, dtype=self.torch.float64, requires_grad=requires_grad)

    def hop(self, x: Any, device: str) -> Any:
        return x.clone()

    def device_of(self, x: Any) -> str:
        return "cpu"

    def full_like(self, values: Any, like: Any) -> Any:
        return self.torch.tensor(values, dtype=self.torch.float64)

    add = staticmethod(lambda a, b: a + b)
    mul = staticmethod(lambda a, b: a * b)

    def tanh(self, x): return self.torch.tanh(x)
    def exp(self, x): return self.torch.exp(x)
    def matmul(self, a, b): return self.torch.matmul(a, b)
    def clone(self, x): return x.clone()
    def detach(self, x): return x.detach()
    def sum(self, x, dim, keepdim): return self.torch.sum(x, dim=dim, keepdim=keepdim)
    def cat(self, xs, dim): return self.torch.cat(xs, dim)
    def split(self, x, sizes, dim): return self.torch.split(x, sizes, dim)
    def reshape(self, x, shape): return self.torch.reshape(x, shape)
    def transpose(self, x, d0, d1): return self.torch.transpose(x, d0, d1)
    def zeros_like(self, x): return self.torch.zeros(x.shape, dtype=self.torch.float64)
    def no_grad(self): return self.torch.no_grad()

    def checkpoint(self, fn: Callable, *args: Any, use_reentrant: bool) -> Any:
        return self.torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=use_reentrant)

    def saved_hooks(self, kind: str) -> Any:
        if kind == "cpu":
            return self.torch.autograd.graph.save_on_cpu()
        return self.torch.autograd.graph.saved_tensors_hooks(lambda t: t.detach().clone(), lambda t: t)

    def backward(self, root: Any, gout: Any, inputs: Any) -> None:
        self.torch.autograd.backward(root, gout, retain_graph=True, inputs=inputs)

    def grad(self, root: Any, inputs: list, gout: Any) -> tuple:
        return self.torch.autograd.grad(root, inputs, grad_outputs=gout, retain_graph=True, allow_unused=True)

    def to_numpy(self, t: Any) -> np.ndarray:
        return t.detach().numpy().astype(np.float64)

    def grad_enabled(self) -> bool:
        return self.torch.is_grad_enabled()


def _functions(Function: type, grad: Callable, enable_grad: Callable, tanh: Callable, mul: Callable) -> tuple:
    """The custom Functions, written once over either library's names."""

    class RTanh(Function):
        """tanh whose backward differentiates tanh again with a nested grad (reentrant)."""

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return tanh(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            with enable_grad():
                xd = x.detach().requires_grad_()
                y = tanh(xd)
            (gx,) = grad(y, xd, grad_outputs=g)
            return gx

    class RMul(Function):
        """a * b whose backward runs a nested grad."""

        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return mul(a, b)

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            with enable_grad():
                ad = a.detach().requires_grad_()
                bd = b.detach().requires_grad_()
                y = mul(ad, bd)
            ga, gb = grad(y, (ad, bd), grad_outputs=g)
            return (ga if ctx.needs_input_grad[0] else None, gb if ctx.needs_input_grad[1] else None)

    class Fault(Function):
        """The identity whose backward raises (a fault injected into one call's own root)."""

        @staticmethod
        def forward(ctx, x, kind):
            ctx.kind = kind
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            raise_fault(ctx.kind)

    class Tie(Function):
        """The reentrant checkpoint's node, modelled plainly: the identity on the body's
        result, with an edge to each of the checkpoint's arguments that carries no gradient.
        The body's own graph gives the arguments it uses their gradients; an argument the body
        ignores is still reached, with None, as through the real checkpoint node (its tensor
        hooks run with None, as torch's)."""

        @staticmethod
        def forward(ctx, out, *args):
            return out.clone()

        @staticmethod
        def backward(ctx, g):
            return (g,) + (None,) * (len(ctx.needs_input_grad) - 1)

    class DirtyMul(Function):
        """x <- x * w in place, marked dirty (x may be a view: its base is rebased)."""

        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x.clone(), w)
            x.mul_(w)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            x0, w = ctx.saved_tensors
            return mul(g, w), mul(g, x0)

    return RTanh, RMul, Fault, Tie, DirtyMul
