"""``tg.autograd.function``: custom Functions, as ``torch.autograd.function``."""
from __future__ import annotations

from ..engine.function import Function, FunctionCtx, once_differentiable

__all__ = ["Function", "FunctionCtx", "once_differentiable"]
