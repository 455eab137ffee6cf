"""``tg.optim.NAdam``: torch's update rule and signature (Adam with Nesterov momentum and
momentum decay; ``mu_product`` kept in float32, as torch's state tensor is).

>>> import threadgrad as tg
>>> w = tg.tensor([1.0, -2.0], requires_grad=True)
>>> opt = tg.optim.NAdam([w], lr=0.1)
>>> (w * w).sum().backward(); opt.step()
>>> [round(v, 3) for v in w.tolist()]
[0.894, -1.894]
"""
from __future__ import annotations

from typing import Any, Iterable

from ._common import check, check_betas, ensure_step, refuse_differentiable, step_tensor, zeros_like
from .optimizer import Optimizer

__all__ = ["NAdam"]


class NAdam(Optimizer):
    """``NAdam(params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    momentum_decay=4e-3, decoupled_weight_decay=False, *, foreach=None, maximize=False,
    capturable=False, differentiable=False)``. State: ``step``, ``mu_product``, ``exp_avg``,
    ``exp_avg_sq``."""

    def __init__(self, params: Iterable[Any], lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach: Any = None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False) -> None:
        check("NAdam", lr, "learning rate")
        check("NAdam", eps, "epsilon value")
        check_betas(betas)
        check("NAdam", weight_decay, "weight_decay value")
        check("NAdam", momentum_decay, "momentum_decay value")
        refuse_differentiable("NAdam", differentiable)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize, foreach=foreach,
                        capturable=capturable, differentiable=differentiable)
        super().__init__(params, defaults)

    def _update_group(self, group: dict[str, Any]) -> None:
        params = group["params"]
        lr, eps, wd, md = group["lr"], group["eps"], group["weight_decay"], group["momentum_decay"]
        beta1, beta2 = group["betas"]
        for device, idx in self._by_device(params).items():
            xp = device.xp
            ps = [params[i] for i in idx]
            for p in ps:
                state = self.state[p]
                if not state:
                    state["step"] = step_tensor()
                    state["mu_product"] = step_tensor(1.0)
                    state["exp_avg"] = zeros_like(p)
                    state["exp_avg_sq"] = zeros_like(p)
                step_t = ensure_step(state)
                step_t += 1
                step = float(step_t)
                mu_product = ensure_step(state, "mu_product")
                param, g = p._data, p.grad._data
                if group["maximize"]:
                    g = -g
                if wd != 0:
                    if group["decoupled_weight_decay"]:
                        param *= 1 - lr * wd
                    else:
                        g = g + wd * param
                bias_correction2 = 1 - beta2 ** step
                mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * md)))
                mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * md)))
                mu_product *= mu  # in float32, as torch's state tensor
                m, v = state["exp_avg"]._data, state["exp_avg_sq"]._data
                m += (1 - beta1) * (g - m)  # torch's lerp_ for a weight below 0.5
                v *= beta2
                v += (1 - beta2) * g * g
                denom = xp.sqrt(v / bias_correction2) + eps
                mp = float(mu_product)
                mu_product_next = mp * mu_next
                param += (-lr * (1.0 - mu) / (1.0 - mp)) * (g / denom)
                param += ((-lr * mu_next) / (1.0 - mu_product_next)) * (m / denom)
            self._finish(ps)
