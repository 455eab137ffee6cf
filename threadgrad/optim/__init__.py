"""``tg.optim``: SGD, Adam and AdamW with torch.optim's signatures and update rules.

See docs/optim.md (and, for threads, Note [Optimizer threads] in optimizer.py).

>>> import threadgrad as tg
>>> w = tg.tensor([3.0], requires_grad=True)
>>> opt = tg.optim.SGD([w], lr=0.25)
>>> for _ in range(3):
...     opt.zero_grad()
...     (w * w).sum().backward()
...     opt.step()
>>> w.item()
0.375
"""
from __future__ import annotations

from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW"]
