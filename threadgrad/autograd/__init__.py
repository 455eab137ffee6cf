"""``tg.autograd``: torch.autograd's names over threadgrad's engine.

>>> import threadgrad as tg
>>> x = tg.tensor([1.0, 2.0], requires_grad=True)
>>> tg.autograd.grad((x * x).sum(), x)[0].tolist()
[2.0, 4.0]
"""
from __future__ import annotations

from ..engine import (Function, backward, backward_async, detect_anomaly, grad, grad_async, gradcheck,
                      gradgradcheck, is_anomaly_enabled, queue_callback, set_cpu_workers, set_detect_anomaly)
from ..engine.function import FunctionCtx, once_differentiable
from . import function, graph

__all__ = ["Function", "FunctionCtx", "once_differentiable", "backward", "grad", "backward_async", "grad_async",
           "gradcheck", "gradgradcheck", "detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled",
           "queue_callback", "set_cpu_workers", "function", "graph"]
