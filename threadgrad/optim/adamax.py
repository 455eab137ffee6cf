"""``tg.optim.Adamax``: torch's update rule and signature (Adam with the infinity norm).

>>> import threadgrad as tg
>>> w = tg.tensor([1.0, -2.0], requires_grad=True)
>>> opt = tg.optim.Adamax([w], lr=0.1)
>>> (w * w).sum().backward(); opt.step()
>>> [round(v, 4) for v in w.tolist()]
[0.9, -1.9]
"""
from __future__ import annotations

from typing import Any, Iterable

from ._common import check, check_betas, ensure_step, refuse_differentiable, step_tensor, zeros_like
from .optimizer import Optimizer

__all__ = ["Adamax"]


class Adamax(Optimizer):
    """``Adamax(params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach=None, *,
    maximize=False, differentiable=False, capturable=False)``. State: ``step``, ``exp_avg``,
    ``exp_inf``."""

    def __init__(self, params: Iterable[Any], lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, foreach: Any = None, *, maximize: bool = False,
                 differentiable: bool = False, capturable: bool = False) -> None:
        check("Adamax", lr, "learning rate")
        check("Adamax", eps, "epsilon value")
        check_betas(betas)
        check("Adamax", weight_decay, "weight_decay value")
        refuse_differentiable("Adamax", differentiable)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach, maximize=maximize,
                        differentiable=differentiable, capturable=capturable)
        super().__init__(params, defaults)

    def _update_group(self, group: dict[str, Any]) -> None:
        params = group["params"]
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        for device, idx in self._by_device(params).items():
            xp = device.xp
            ps = [params[i] for i in idx]
            for p in ps:
                state = self.state[p]
                if not state:
                    state["step"] = step_tensor()
                    state["exp_avg"] = zeros_like(p)
                    state["exp_inf"] = zeros_like(p)
                step_t = ensure_step(state)
                step_t += 1
                step = float(step_t)
                param, g = p._data, p.grad._data
                if group["maximize"]:
                    g = -g
                if wd != 0:
                    g = g + wd * param
                m, u = state["exp_avg"]._data, state["exp_inf"]._data
                m += (1 - beta1) * (g - m)  # torch's lerp_ for a weight below 0.5
                u *= beta2
                xp.maximum(u, xp.abs(g) + eps, out=u)
                clr = lr / (1 - beta1 ** step)
                param += (-clr) * (m / u)
            self._finish(ps)
