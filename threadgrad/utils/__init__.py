"""``tg.utils``: as ``torch.utils``, the part of it threadgrad has: ``checkpoint``."""
from __future__ import annotations

from . import checkpoint

__all__ = ["checkpoint"]
