"""``tg.optim.Adagrad``: torch's update rule and signature (state made at construction, as
torch's).

>>> import threadgrad as tg
>>> w = tg.tensor([1.0, -2.0], requires_grad=True)
>>> opt = tg.optim.Adagrad([w], lr=0.1)
>>> (w * w).sum().backward(); opt.step()
>>> [round(v, 4) for v in w.tolist()]
[0.9, -1.9]
"""
from __future__ import annotations

from typing import Any, Iterable

from ._common import check, ensure_step, refuse_differentiable, step_tensor, zeros_like
from .optimizer import Optimizer

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """``Adagrad(params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
    eps=1e-10, foreach=None, *, maximize=False, differentiable=False, fused=None)``. State:
    ``step`` and ``sum``, for every parameter from the start."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10, foreach: Any = None, *,
                 maximize: bool = False, differentiable: bool = False, fused: Any = None) -> None:
        check("Adagrad", lr, "learning rate")
        check("Adagrad", lr_decay, "lr_decay value")
        check("Adagrad", weight_decay, "weight_decay value")
        check("Adagrad", initial_accumulator_value, "initial_accumulator_value value")
        check("Adagrad", eps, "epsilon value")
        refuse_differentiable("Adagrad", differentiable)
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach, maximize=maximize,
                        differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                state["step"] = step_tensor()
                state["sum"] = zeros_like(p, group["initial_accumulator_value"])

    def _update_group(self, group: dict[str, Any]) -> None:
        params = group["params"]
        lr, lr_decay, wd, eps = group["lr"], group["lr_decay"], group["weight_decay"], group["eps"]
        for device, idx in self._by_device(params).items():
            xp = device.xp
            ps = [params[i] for i in idx]
            for p in ps:
                state = self.state[p]
                if "sum" not in state:  # a parameter added by add_param_group
                    state["step"] = step_tensor()
                    state["sum"] = zeros_like(p, group["initial_accumulator_value"])
                step_t = ensure_step(state)
                step_t += 1
                step = float(step_t)
                param, g = p._data, p.grad._data
                if group["maximize"]:
                    g = -g
                if wd != 0:
                    g = g + wd * param
                clr = lr / (1 + (step - 1) * lr_decay)
                s = state["sum"]._data
                s += g * g
                std = xp.sqrt(s) + eps
                param += (-clr) * (g / std)
            self._finish(ps)
