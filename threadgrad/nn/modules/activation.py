"""Activation modules over ``tg.nn.functional``, with torch's arguments and ``repr``.

>>> import threadgrad as tg
>>> tg.nn.ReLU()(tg.tensor([-1.0, 2.0])).tolist(), repr(tg.nn.GELU(approximate="tanh"))
([0.0, 2.0], "GELU(approximate='tanh')")
"""
from __future__ import annotations

from ...engine.tensor import Tensor
from .. import functional as F
from .module import Module

__all__ = ["ReLU", "Tanh", "Sigmoid", "GELU", "Softplus", "Softmax", "LogSoftmax", "SiLU", "LeakyReLU", "ELU",
           "Hardtanh", "ReLU6", "Mish", "LogSigmoid"]


class _Inplace(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_Inplace):
    """``max(x, 0)``; ``inplace=True`` writes into the input."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.relu(input, inplace=self.inplace)


class SiLU(_Inplace):
    """``x * sigmoid(x)``."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.silu(input, inplace=self.inplace)


class Mish(_Inplace):
    """``x * tanh(softplus(x))``."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.mish(input, inplace=self.inplace)


class ReLU6(_Inplace):
    """``min(max(x, 0), 6)``."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.relu6(input, inplace=self.inplace)


class Tanh(Module):
    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.tanh(input)


class Sigmoid(Module):
    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.sigmoid(input)


class LogSigmoid(Module):
    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.logsigmoid(input)


class GELU(Module):
    """``GELU(approximate='none')``: the exact erf form, or ``'tanh'``."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softplus(Module):
    """``Softplus(beta=1.0, threshold=20.0)``."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Softmax(Module):
    """``Softmax(dim=None)`` (None: torch's implicit-dim warning and choice)."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.softmax(input, self.dim, _stacklevel=5)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    """``LogSoftmax(dim=None)``."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.log_softmax(input, self.dim, _stacklevel=5)


class LeakyReLU(Module):
    """``LeakyReLU(negative_slope=0.01, inplace=False)``."""

    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    """``ELU(alpha=1.0, inplace=False)``."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class Hardtanh(Module):
    """``Hardtanh(min_val=-1.0, max_val=1.0, inplace=False)``."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        if max_val <= min_val:
            raise ValueError("max_val must be greater than min_val")
        self.min_val = min_val
        self.max_val = max_val
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")
