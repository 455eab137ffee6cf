"""``Dropout(p=0.5, inplace=False)``: active in training mode only, as torch's.

>>> import threadgrad as tg
>>> drop = tg.nn.Dropout(0.5).eval()
>>> drop(tg.ones(3)).tolist()
[1.0, 1.0, 1.0]
"""
from __future__ import annotations

from ...engine.tensor import Tensor
from .. import functional as F
from .module import Module

__all__ = ["Dropout", "Dropout2d"]


class Dropout(Module):
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``, while
    ``self.training``; the identity in eval mode."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout2d(Dropout):
    """Zero whole channels with probability ``p`` (F.dropout2d) while ``self.training``."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout2d(input, self.p, self.training, self.inplace)
