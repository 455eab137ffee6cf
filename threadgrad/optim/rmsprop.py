"""``tg.optim.RMSprop``: torch's update rule and signature.

>>> import threadgrad as tg
>>> w = tg.tensor([1.0, -2.0], requires_grad=True)
>>> opt = tg.optim.RMSprop([w], lr=0.01)
>>> (w * w).sum().backward(); opt.step()
>>> [round(v, 4) for v in w.tolist()]
[0.9, -1.9]
"""
from __future__ import annotations

from typing import Any, Iterable

from ._common import check, ensure_step, refuse_differentiable, step_tensor, zeros_like
from .optimizer import Optimizer

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """``RMSprop(params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
    centered=False, capturable=False, foreach=None, maximize=False, differentiable=False)``.
    State: ``step``, ``square_avg``, ``momentum_buffer`` (momentum > 0), ``grad_avg``
    (centered)."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0, momentum: float = 0, centered: bool = False, capturable: bool = False,
                 foreach: Any = None, maximize: bool = False, differentiable: bool = False) -> None:
        check("RMSprop", lr, "learning rate")
        check("RMSprop", eps, "epsilon value")
        check("RMSprop", momentum, "momentum value")
        check("RMSprop", weight_decay, "weight_decay value")
        check("RMSprop", alpha, "alpha value")
        refuse_differentiable("RMSprop", differentiable)
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered, weight_decay=weight_decay,
                        capturable=capturable, foreach=foreach, maximize=maximize, differentiable=differentiable)
        super().__init__(params, defaults)

    def _update_group(self, group: dict[str, Any]) -> None:
        params = group["params"]
        lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
        wd, momentum, centered = group["weight_decay"], group["momentum"], group["centered"]
        for device, idx in self._by_device(params).items():
            xp = device.xp
            ps = [params[i] for i in idx]
            for p in ps:
                state = self.state[p]
                if not state:
                    state["step"] = step_tensor()
                    state["square_avg"] = zeros_like(p)
                    if momentum > 0:
                        state["momentum_buffer"] = zeros_like(p)
                    if centered:
                        state["grad_avg"] = zeros_like(p)
                step = ensure_step(state)
                step += 1
                param, g = p._data, p.grad._data
                if group["maximize"]:
                    g = -g
                if wd != 0:
                    g = g + wd * param
                sq = state["square_avg"]._data
                sq *= alpha
                sq += (1 - alpha) * g * g
                if centered:
                    ga = state["grad_avg"]._data
                    ga += (1 - alpha) * (g - ga)  # torch's lerp_ for a weight below 0.5
                    avg = xp.sqrt(sq - ga * ga)
                else:
                    avg = xp.sqrt(sq)
                avg += eps
                if momentum > 0:
                    buf = state["momentum_buffer"]._data
                    buf *= momentum
                    buf += g / avg
                    param -= lr * buf
                else:
                    param -= lr * (g / avg)
            self._finish(ps)
