"""``tg.nn``: as ``torch.nn``: ``Module`` and ``Parameter``, containers, layers, losses,
``nn.init``, ``nn.utils`` and ``nn.functional``. docs/nn.md is the guide.

>>> import threadgrad as tg
>>> import threadgrad.nn.functional as F
>>> F.relu(tg.tensor([-1.0, 2.0])).tolist()
[0.0, 2.0]
>>> model = tg.nn.Sequential(tg.nn.Linear(2, 4), tg.nn.ReLU(), tg.nn.Linear(4, 1))
>>> sum(p.numel() for p in model.parameters())
17
"""
from __future__ import annotations

from . import functional, init, utils
from .modules import *  # noqa: F401,F403 - torch.nn's flat names
from .modules import __all__ as _module_names
from .parameter import Buffer, Parameter

__all__ = ["functional", "init", "utils", "Parameter", "Buffer"] + list(_module_names)
