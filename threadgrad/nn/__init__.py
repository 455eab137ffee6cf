"""``tg.nn``: as ``torch.nn``, only its functional half. There is no ``nn.Module``:
parameters are tensors that require grad, and the ops of ``tg.nn.functional`` take them.

>>> import threadgrad as tg
>>> import threadgrad.nn.functional as F
>>> F.relu(tg.tensor([-1.0, 2.0])).tolist()
[0.0, 2.0]
"""
from __future__ import annotations

from . import functional

__all__ = ["functional"]
