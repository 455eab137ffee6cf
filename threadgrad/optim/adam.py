"""``tg.optim.Adam`` and ``tg.optim.AdamW``: torch's update rules and signatures.

>>> import threadgrad as tg
>>> w = tg.tensor([1.0, -2.0], requires_grad=True)
>>> opt = tg.optim.Adam([w], lr=0.1)
>>> (w * w).sum().backward(); opt.step()
>>> [round(v, 4) for v in w.tolist()], opt.state[w]["step"].item()
([0.9, -1.9], 1.0)
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import numpy

from .. import devices
from ..engine.tensor import Tensor, _wrap
from .optimizer import Optimizer

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """``torch.optim.Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    amsgrad=False, *, foreach=None, maximize=False, capturable=False, differentiable=False,
    fused=None, decoupled_weight_decay=False)``.

    ``weight_decay`` adds ``weight_decay * param`` to the gradient (L2), or with
    ``decoupled_weight_decay=True`` scales the parameter by ``1 - lr * weight_decay`` first
    (AdamW). ``foreach``/``fused``/``capturable`` are accepted and change nothing;
    ``differentiable=True`` is refused. State per parameter: ``step`` (a 0-d float32 tensor),
    ``exp_avg``, ``exp_avg_sq`` and, with ``amsgrad``, ``max_exp_avg_sq``."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, amsgrad: bool = False, *, foreach: Any = None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False, fused: Any = None,
                 decoupled_weight_decay: bool = False) -> None:
        _check_adam_args(lr, betas, eps, weight_decay, differentiable, type(self).__name__)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize,
                        foreach=foreach, capturable=capturable, differentiable=differentiable, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    def _update_group(self, group: dict[str, Any]) -> None:
        params = group["params"]
        amsgrad = group["amsgrad"]
        beta1, beta2 = group["betas"]
        for device, idx in self._by_device(params).items():
            ps = [params[i] for i in idx]
            states = [self._init_state(p, amsgrad) for p in ps]
            kernels = device.kernels
            if kernels.fused:  # a GPU: one fused kernel per parameter (Note [Update functions])
                steps = []
                for s in states:
                    s["step"]._data += 1
                    steps.append(int(s["step"]._data))
                kernels.adam([p._data for p in ps], [p.grad._data for p in ps], [s["exp_avg"]._data for s in states],
                             [s["exp_avg_sq"]._data for s in states],
                             [s["max_exp_avg_sq"]._data for s in states] if amsgrad else None, steps,
                             lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"],
                             weight_decay=group["weight_decay"], amsgrad=amsgrad, maximize=group["maximize"],
                             decoupled_weight_decay=group["decoupled_weight_decay"])
                self._finish(ps)
                continue
            _adam_update([p._data for p in ps], [p.grad._data for p in ps], [s["exp_avg"]._data for s in states],
                         [s["exp_avg_sq"]._data for s in states],
                         [s["max_exp_avg_sq"]._data for s in states] if amsgrad else [],
                         [s["step"]._data for s in states], xp=device.xp, amsgrad=amsgrad, beta1=beta1, beta2=beta2,
                         lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"],
                         maximize=group["maximize"], decoupled_weight_decay=group["decoupled_weight_decay"])
            self._finish(ps)

    def _init_state(self, p: Tensor, amsgrad: bool) -> dict:
        state = self.state[p]
        if not state:
            xp = p.device.xp
            state["step"] = _wrap(numpy.zeros((), dtype="float32"), devices.cpu)  # on the cpu, as torch's
            state["exp_avg"] = _wrap(xp.zeros_like(p._data), p.device)
            state["exp_avg_sq"] = _wrap(xp.zeros_like(p._data), p.device)
            if amsgrad:
                state["max_exp_avg_sq"] = _wrap(xp.zeros_like(p._data), p.device)
        else:
            if not isinstance(state["step"], Tensor):  # a state dict whose step is a number (older torch)
                state["step"] = _wrap(numpy.asarray(float(state["step"]), dtype="float32"), devices.cpu)
            if amsgrad and "max_exp_avg_sq" not in state:  # amsgrad switched on in a loaded group
                state["max_exp_avg_sq"] = _wrap(p.device.xp.zeros_like(p._data), p.device)
        return state


class AdamW(Adam):
    """``torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
    amsgrad=False, *, maximize=False, foreach=None, capturable=False, differentiable=False,
    fused=None)``: Adam with decoupled weight decay."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 foreach: Any = None, capturable: bool = False, differentiable: bool = False,
                 fused: Any = None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)


def _check_adam_args(lr: float, betas: Any, eps: float, weight_decay: float, differentiable: bool, name: str) -> None:
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    if differentiable:
        raise NotImplementedError(f"{name}(differentiable=True): threadgrad's optimizers update outside the graph")


def _adam_update(params: list, grads: list, exp_avgs: list, exp_avg_sqs: list, max_exp_avg_sqs: list,
                 state_steps: list, *, xp: Any, amsgrad: bool, beta1: float, beta2: float, lr: float,
                 weight_decay: float, eps: float, maximize: bool, decoupled_weight_decay: bool) -> None:
    """torch's single-tensor Adam/AdamW over raw arrays of one device, in place; each
    ``state_steps`` entry (a 0-d array) is incremented. See Note [Update functions] in optimizer.py."""
    for i, (p, g) in enumerate(zip(params, grads)):
        if maximize:
            g = -g
        step_t = state_steps[i]
        step_t += 1
        step = float(step_t)
        if weight_decay != 0:
            if decoupled_weight_decay:
                p *= 1 - lr * weight_decay
            else:
                g = g + weight_decay * p
        m, v = exp_avgs[i], exp_avg_sqs[i]
        m += (1 - beta1) * (g - m)  # torch's lerp_(g, 1 - beta1) for a weight below 0.5
        v *= beta2
        v += (1 - beta2) * g * g
        bias_correction1 = 1 - beta1 ** step
        bias_correction2_sqrt = math.sqrt(1 - beta2 ** step)
        step_size = lr / bias_correction1
        if amsgrad:
            xp.maximum(max_exp_avg_sqs[i], v, out=max_exp_avg_sqs[i])
            denom = xp.sqrt(max_exp_avg_sqs[i]) / bias_correction2_sqrt
        else:
            denom = xp.sqrt(v) / bias_correction2_sqrt
        denom += eps
        update = -step_size * m
        update /= denom
        p += update
