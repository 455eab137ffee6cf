"""``tg.optim.SGD``: stochastic gradient descent with momentum, dampening, Nesterov momentum,
weight decay and ``maximize``, torch's update rule and signature.

>>> import threadgrad as tg
>>> w = tg.tensor([1.0, -2.0], requires_grad=True)
>>> opt = tg.optim.SGD([w], lr=0.1, momentum=0.9)
>>> (w * w).sum().backward(); opt.step()
>>> w.tolist()
[0.800000011920929, -1.600000023841858]
"""
from __future__ import annotations

from typing import Any, Iterable

from .optimizer import Optimizer

__all__ = ["SGD"]


class SGD(Optimizer):
    """``torch.optim.SGD(params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
    nesterov=False, *, maximize=False, foreach=None, differentiable=False, fused=None)``.

    ``foreach`` and ``fused`` are accepted and ignored (one implementation per device);
    ``differentiable=True`` is refused. State per parameter: ``momentum_buffer`` (when
    ``momentum`` is not 0)."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False, foreach: Any = None,
                 differentiable: bool = False, fused: Any = None) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        if differentiable:
            raise NotImplementedError("SGD(differentiable=True): threadgrad's optimizers update outside the graph")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
                        maximize=maximize, foreach=foreach, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)

    def _update_group(self, group: dict[str, Any]) -> None:
        params = group["params"]
        momentum = group["momentum"]
        for device, idx in self._by_device(params).items():
            ps = [params[i] for i in idx]
            bufs = [self.state[p].get("momentum_buffer") if p in self.state else None for p in ps]
            buf_arrays = [None if b is None else b._data for b in bufs]
            hyper = dict(lr=group["lr"], momentum=momentum, dampening=group["dampening"], nesterov=group["nesterov"],
                         weight_decay=group["weight_decay"], maximize=group["maximize"])
            kernels = device.kernels
            if kernels.fused:  # a GPU: one fused kernel per parameter (Note [Update functions])
                kernels.sgd([p._data for p in ps], [p.grad._data for p in ps], buf_arrays, **hyper)
            else:
                _sgd_update([p._data for p in ps], [p.grad._data for p in ps], buf_arrays, xp=device.xp, **hyper)
            if momentum != 0:
                from ..engine.tensor import _wrap

                for p, b, a in zip(ps, bufs, buf_arrays):
                    if b is None:
                        self.state[p]["momentum_buffer"] = _wrap(a, device)
            self._finish(ps)


def _sgd_update(params: list, grads: list, momentum_buffers: list, *, xp: Any, lr: float, momentum: float,
                dampening: float, nesterov: bool, weight_decay: float, maximize: bool) -> None:
    """torch's single-tensor SGD over raw arrays of one device, in place. A ``None`` momentum
    buffer is created (a copy of the step's gradient) and stored into ``momentum_buffers``.
    See Note [Update functions] in optimizer.py."""
    for i, (p, g) in enumerate(zip(params, grads)):
        if maximize:
            g = -g
        if weight_decay != 0:
            g = g + weight_decay * p
        if momentum != 0:
            buf = momentum_buffers[i]
            if buf is None:
                buf = momentum_buffers[i] = xp.array(g, copy=True)
            else:
                buf *= momentum
                buf += (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        p -= lr * g
