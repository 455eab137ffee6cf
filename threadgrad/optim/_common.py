"""What the optimizers beyond SGD/Adam share: argument checks in torch's words and their
per-parameter state tensors."""
from __future__ import annotations

from typing import Any

import numpy

from .. import devices
from ..engine.tensor import Tensor, _wrap


def check(name: str, value: float, what: str, low: float = 0.0) -> None:
    """torch's ``ValueError(f"Invalid {what}: {value}")`` when ``value < low``."""
    if not low <= value:
        raise ValueError(f"Invalid {what}: {value}")


def check_betas(betas: Any) -> None:
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")


def refuse_differentiable(name: str, differentiable: bool) -> None:
    if differentiable:
        raise NotImplementedError(f"{name}(differentiable=True): threadgrad's optimizers update outside the graph")


def step_tensor(value: float = 0.0) -> Tensor:
    """A ``step`` (or ``mu_product``) state entry: a 0-d float32 tensor on the cpu, as torch's."""
    return _wrap(numpy.asarray(value, dtype="float32"), devices.cpu)


def zeros_like(p: Tensor, fill: float = 0.0) -> Tensor:
    """A state buffer of ``p``'s shape, dtype and device."""
    xp = p.device.xp
    return _wrap(xp.full_like(p._data, fill), p.device)


def ensure_step(state: dict, key: str = "step") -> Any:
    """The state's ``step`` as a 0-d array (a loaded state dict may hold a number)."""
    if not isinstance(state[key], Tensor):
        state[key] = step_tensor(float(state[key]))
    return state[key]._data
