"""``Identity``, ``Linear``, ``Bilinear``, ``Flatten``, ``Unflatten``: torch's parameter
names, shapes and default initialization.

>>> import threadgrad as tg
>>> fc = tg.nn.Linear(4, 3)
>>> [(n, p.shape) for n, p in fc.named_parameters()]
[('weight', (3, 4)), ('bias', (3,))]
"""
from __future__ import annotations

import math
from typing import Any

from ...engine import creation
from ...engine.tensor import Tensor
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module

__all__ = ["Identity", "Linear", "Bilinear", "Flatten", "Unflatten"]


def _empty(*shape: int, device: Any = None, dtype: Any = None) -> Tensor:
    return creation.empty(*shape, device=device, dtype=dtype)


class Identity(Module):
    """Returns its input; takes (and ignores) any constructor arguments, as torch's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return input


class Linear(Module):
    """``Linear(in_features, out_features, bias=True, device=None, dtype=None)``: ``y = x W^T + b``
    with ``weight`` ``(out_features, in_features)`` and ``bias`` ``(out_features,)``, both
    U(-1/sqrt(in_features), 1/sqrt(in_features)) as torch's (kaiming_uniform_ with a=sqrt(5))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(_empty(out_features, in_features, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(_empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Bilinear(Module):
    """``Bilinear(in1_features, in2_features, out_features, bias=True)``: ``y = x1^T A x2 + b``,
    ``weight`` ``(out, in1, in2)``, both U(-1/sqrt(in1), 1/sqrt(in1)) as torch's."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        self.weight = Parameter(_empty(out_features, in1_features, in2_features, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(_empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class Flatten(Module):
    """``Flatten(start_dim=1, end_dim=-1)``: merges those dims (the batch dim is kept)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """``Unflatten(dim, unflattened_size)``: splits ``dim`` into ``unflattened_size``."""

    def __init__(self, dim: int, unflattened_size: Any) -> None:
        super().__init__()
        if isinstance(dim, int):
            if not isinstance(unflattened_size, (tuple, list)) or not all(isinstance(s, int)
                                                                          for s in unflattened_size):
                raise TypeError("unflattened_size must be tuple of ints, but found type "
                                f"{type(unflattened_size).__name__}")
        else:
            raise TypeError(f"invalid argument type for dim parameter: {type(dim).__name__}")
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size) if isinstance(unflattened_size, list) else unflattened_size

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        dim = self.dim + input.ndim if self.dim < 0 else self.dim
        shape = tuple(input.shape[:dim]) + tuple(self.unflattened_size) + tuple(input.shape[dim + 1:])
        return input.reshape(shape)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
