"""``tg.utils``: as ``torch.utils``, the parts threadgrad has: ``checkpoint`` and ``data``."""
from __future__ import annotations

from . import checkpoint, data

__all__ = ["checkpoint", "data"]
