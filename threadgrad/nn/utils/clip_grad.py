"""Gradient clipping, torch's functions and arithmetic (the total norm over every gradient,
each scaled by ``clamp(max_norm / (total + 1e-6), max=1)``), in place, outside the graph."""
from __future__ import annotations

import math
import warnings
from typing import Any

from ... import ops
from ...engine.grad_mode import no_grad
from ...engine.tensor import Tensor, _wrap
from ...engine.versions import bump as _bump_version

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_"]


def _tensors(tensors: Any) -> list[Tensor]:
    return [tensors] if isinstance(tensors, Tensor) else list(tensors)


def get_total_norm(tensors: Any, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach: bool | None = None) -> Tensor:
    """The ``norm_type`` norm of all ``tensors`` together, as if concatenated (a 0-d tensor;
    on the first tensor's device)."""
    ts = _tensors(tensors)
    norm_type = float(norm_type)
    if not ts:
        from ...engine.creation import tensor

        return tensor(0.0)
    device = ts[0].device
    with no_grad():
        norms = [ops.to(ops.norm(t.detach(), norm_type), device) for t in ts]
        if math.isinf(norm_type):
            total = ops.max(ops.stack(norms)) if norm_type > 0 else ops.min(ops.stack(norms))
        else:
            total = ops.norm(ops.stack(norms), norm_type)
    if error_if_nonfinite:
        _check_finite(total, norm_type)
    return total


def _check_finite(total: Tensor, norm_type: float) -> None:
    if not math.isfinite(total.item()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so "
                           "it cannot be clipped. To disable this error and scale the gradients by the non-finite "
                           "norm anyway, set `error_if_nonfinite=False`")


def _clip_on_device(grads: list[Tensor], max_norm: float, norm_type: float, error_if_nonfinite: bool) -> Tensor | None:
    """clip_grad_norm_ on a device with multi-tensor kernels (a GPU): the total norm and the
    coefficient stay on the device, as torch's do, so nothing waits for the GPU unless
    ``error_if_nonfinite`` must look at the norm (torch reads it then too). None when the
    kernels do not take these gradients. See Note [Multi-tensor updates] in devices/_fused.py."""
    device = grads[0].device
    kernels = device.kernels
    if not kernels.fused or any(g.device is not device for g in grads):
        return None
    arrays = [g._data for g in grads]
    out = kernels.clip_norm(arrays, float(max_norm), float(norm_type))
    if out is None:
        return None
    total = _wrap(out[0], device)
    if error_if_nonfinite:
        _check_finite(total, float(norm_type))
    kernels.scale_(arrays, out[1:])
    for g in grads:
        _bump_version(g)  # an in-place change, as torch's mul_
    return total


def clip_grads_with_norm_(parameters: Any, max_norm: float, total_norm: Tensor,
                          foreach: bool | None = None) -> None:
    """Scale every gradient by ``clamp(max_norm / (total_norm + 1e-6), max=1)``, in place."""
    grads = [p.grad for p in _tensors(parameters) if p.grad is not None]
    if not grads:
        return
    coef = min(float(max_norm) / (total_norm.item() + 1e-6), 1.0)
    with no_grad():
        for g in grads:
            # the coefficient in the gradient's dtype, as torch's clip_coef_clamped.to(g.dtype)
            g.mul_(_wrap(g.device.xp.asarray(coef, dtype=g.dtype), g.device))


def clip_grad_norm_(parameters: Any, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach: bool | None = None) -> Tensor:
    """Scale the gradients of ``parameters`` (a tensor or an iterable) so that their total
    ``norm_type`` norm is at most ``max_norm``; returns the total norm before clipping.
    ``error_if_nonfinite``: a NaN or infinite total raises RuntimeError instead. ``foreach``
    is accepted and changes nothing (one implementation)."""
    ps = _tensors(parameters)
    grads = [p.grad for p in ps if p.grad is not None]
    if grads:
        total = _clip_on_device(grads, max_norm, norm_type, error_if_nonfinite)
        if total is not None:
            return total
    total = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(ps, max_norm, total, foreach)
    return total


def clip_grad_norm(parameters: Any, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach: bool | None = None) -> Tensor:
    """Deprecated spelling of :func:`clip_grad_norm_` (torch's warning)."""
    warnings.warn("`torch.nn.utils.clip_grad_norm` is now deprecated in favor of "
                  "`torch.nn.utils.clip_grad_norm_`.", FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def clip_grad_value_(parameters: Any, clip_value: float, foreach: bool | None = None) -> None:
    """Clamp every gradient of ``parameters`` to ``[-clip_value, clip_value]``, in place."""
    clip_value = float(clip_value)
    with no_grad():
        for p in _tensors(parameters):
            if p.grad is not None:
                p.grad.copy_(ops.clamp(p.grad, -clip_value, clip_value))
