"""``tg.optim.Adadelta``: torch's update rule and signature.

>>> import threadgrad as tg
>>> w = tg.tensor([1.0], requires_grad=True)
>>> opt = tg.optim.Adadelta([w])
>>> (w * w).sum().backward(); opt.step()
>>> round(w.item(), 6)
0.996838
"""
from __future__ import annotations

from typing import Any, Iterable

from ._common import check, ensure_step, refuse_differentiable, step_tensor, zeros_like
from .optimizer import Optimizer

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    """``Adadelta(params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *,
    capturable=False, maximize=False, differentiable=False)``. State: ``step``,
    ``square_avg``, ``acc_delta``."""

    def __init__(self, params: Iterable[Any], lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0, foreach: Any = None, *, capturable: bool = False, maximize: bool = False,
                 differentiable: bool = False) -> None:
        check("Adadelta", lr, "learning rate")
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        check("Adadelta", eps, "epsilon value")
        check("Adadelta", weight_decay, "weight_decay value")
        refuse_differentiable("Adadelta", differentiable)
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize, capturable=capturable,
                        foreach=foreach, differentiable=differentiable)
        super().__init__(params, defaults)

    def _update_group(self, group: dict[str, Any]) -> None:
        params = group["params"]
        lr, rho, eps, wd = group["lr"], group["rho"], group["eps"], group["weight_decay"]
        for device, idx in self._by_device(params).items():
            xp = device.xp
            ps = [params[i] for i in idx]
            for p in ps:
                state = self.state[p]
                if not state:
                    state["step"] = step_tensor()
                    state["square_avg"] = zeros_like(p)
                    state["acc_delta"] = zeros_like(p)
                step = ensure_step(state)
                step += 1
                param, g = p._data, p.grad._data
                if group["maximize"]:
                    g = -g
                if wd != 0:
                    g = g + wd * param
                sq, acc = state["square_avg"]._data, state["acc_delta"]._data
                sq *= rho
                sq += (1 - rho) * g * g
                std = xp.sqrt(sq + eps)
                delta = xp.sqrt(acc + eps) / std * g
                acc *= rho
                acc += (1 - rho) * delta * delta
                param -= lr * delta
            self._finish(ps)
