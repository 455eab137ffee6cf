"""``tg.optim.RAdam``: torch's update rule and signature (Adam with the variance
rectification term; plain momentum SGD while the rectification is undefined).

>>> import threadgrad as tg
>>> w = tg.tensor([1.0, -2.0], requires_grad=True)
>>> opt = tg.optim.RAdam([w], lr=0.1)
>>> (w * w).sum().backward(); opt.step()
>>> [round(v, 4) for v in w.tolist()]
[0.8, -1.6]
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from ._common import check, check_betas, ensure_step, refuse_differentiable, step_tensor, zeros_like
from .optimizer import Optimizer

__all__ = ["RAdam"]


class RAdam(Optimizer):
    """``RAdam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
    differentiable=False)``. State: ``step``, ``exp_avg``, ``exp_avg_sq``."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, decoupled_weight_decay: bool = False, *,
                 foreach: Any = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        check("RAdam", lr, "learning rate")
        check("RAdam", eps, "epsilon value")
        check_betas(betas)
        check("RAdam", weight_decay, "weight_decay value")
        refuse_differentiable("RAdam", differentiable)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize, foreach=foreach,
                        capturable=capturable, decoupled_weight_decay=decoupled_weight_decay,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def _update_group(self, group: dict[str, Any]) -> None:
        params = group["params"]
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        rho_inf = 2 / (1 - beta2) - 1
        for device, idx in self._by_device(params).items():
            xp = device.xp
            ps = [params[i] for i in idx]
            for p in ps:
                state = self.state[p]
                if not state:
                    state["step"] = step_tensor()
                    state["exp_avg"] = zeros_like(p)
                    state["exp_avg_sq"] = zeros_like(p)
                step_t = ensure_step(state)
                step_t += 1
                step = float(step_t)
                param, g = p._data, p.grad._data
                if group["maximize"]:
                    g = -g
                if wd != 0:
                    if group["decoupled_weight_decay"]:
                        param *= 1 - lr * wd
                    else:
                        g = g + wd * param
                m, v = state["exp_avg"]._data, state["exp_avg_sq"]._data
                m += (1 - beta1) * (g - m)  # torch's lerp_ for a weight below 0.5
                v *= beta2
                v += (1 - beta2) * g * g
                bias_correction1 = 1 - beta1 ** step
                bias_correction2 = 1 - beta2 ** step
                corrected = m / bias_correction1
                rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
                if rho_t > 5.0:
                    rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
                    adaptive = (bias_correction2 ** 0.5) / (xp.sqrt(v) + eps)
                    param -= corrected * lr * adaptive * rect
                else:
                    param -= corrected * lr
            self._finish(ps)
