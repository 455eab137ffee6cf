"""threadgrad's engine: tensors, the autograd graph, the threaded executor, the autograd API.

The engine core (tensor, graph, grad mode, executor, autograd API) imports ``devices`` and no
ops. The layers built from ops, custom ``Function`` (engine/function.py) and ``checkpoint``
(engine/checkpoint.py), sit above ops and import it; once ops is imported, threadgrad/__init__.py
hands their names to :func:`bind_upper_layer` (``engine.Function``, ``engine.checkpoint``, ...).

>>> from threadgrad import engine
>>> x = engine.tensor([1.0, 2.0], requires_grad=True)
>>> y = (x * x).sum()
>>> y.backward()
>>> x.grad.tolist()
[2.0, 4.0]
"""
from __future__ import annotations

import numpy as _np

from .anomaly import detect_anomaly, is_anomaly_enabled, set_detect_anomaly
from .autograd import (backward, backward_async, grad, grad_async, queue_callback, register_multi_grad_hook,
                       set_cpu_workers)
from .creation import (arange, empty, full, manual_seed, ones, ones_like, rand, randn, tensor, zeros,
                       zeros_like, empty_like, full_like)
from .executor import Engine, get_engine
from .gradcheck import gradcheck, gradgradcheck
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .graph import AccumulateGrad, Node, RemovableHandle
from .saved_hooks import disable_saved_tensors_hooks, save_on_cpu, saved_tensors_hooks
from .tensor import Tensor
from . import serialization as _serialization  # noqa: F401 - binds Tensor's pickle and deepcopy protocol



def bind_upper_layer(names: dict) -> None:
    """Bind the public names of this package's two modules above ops (custom Function,
    checkpoint) here: threadgrad/__init__.py imports those modules once ops is imported and
    hands their names over (this package, part of the core, imports neither).
    ``engine.checkpoint`` is then the function, as ``torch.utils.checkpoint.checkpoint``, no
    longer the submodule of that name."""
    globals().update(names)


float16 = _np.float16
float32 = _np.float32
float64 = _np.float64
int32 = _np.int32
int64 = _np.int64
bool_ = _np.bool_

__all__ = [
    "set_cpu_workers",
    "Tensor", "Node", "AccumulateGrad", "RemovableHandle", "Engine", "get_engine",
    "tensor", "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like",
    "rand", "randn", "arange", "manual_seed",
    "backward", "grad", "backward_async", "grad_async", "queue_callback", "register_multi_grad_hook",
    "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
    "gradcheck", "gradgradcheck",
    "Function", "FunctionCtx", "once_differentiable", "checkpoint", "checkpoint_sequential", "CheckpointError",
    "saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks", "detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled",
    "float16", "float32", "float64", "int32", "int64", "bool_",
]
