"""``parameters_to_vector`` / ``vector_to_parameters``, as torch's."""
from __future__ import annotations

from typing import Iterable

from ... import ops
from ...engine.grad_mode import no_grad
from ...engine.tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def _check_same_device(param: Tensor, old: object) -> object:
    if old is None:
        return param.device
    if param.device is not old:
        raise TypeError("Found two parameters on different devices, this is currently not supported.")
    return old


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """All ``parameters`` flattened and concatenated into one 1-D tensor (differentiable)."""
    device = None
    vec = []
    for param in parameters:
        device = _check_same_device(param, device)
        vec.append(ops.reshape(param, (-1,)))
    return ops.cat(vec)


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of the 1-D ``vec`` into ``parameters`` (their data, in place:
    torch replaces ``param.data``; here the same memory is written)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    device = None
    pointer = 0
    with no_grad():
        for param in parameters:
            device = _check_same_device(param, device)
            n = param.numel()
            param.copy_(ops.reshape(vec[pointer:pointer + n], param.shape))
            pointer += n
