"""``threadgrad.utils.checkpoint``: activation checkpointing, imported as torch users write it.

>>> from threadgrad.utils.checkpoint import checkpoint
>>> import threadgrad as tg
>>> x = tg.ones(3, requires_grad=True)
>>> checkpoint(lambda t: (t * t).sum(), x, use_reentrant=False).backward()
>>> x.grad.tolist()
[2.0, 2.0, 2.0]
"""
from __future__ import annotations

from ..engine.checkpoint import CheckpointError, checkpoint, checkpoint_sequential

__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointError"]
