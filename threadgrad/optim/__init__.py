"""``tg.optim``: torch.optim's optimizers (SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax,
NAdam, RAdam, LBFGS) with its signatures and update rules, and ``lr_scheduler``.

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

from . import lr_scheduler
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .adamax import Adamax
from .lbfgs import LBFGS
from .nadam import NAdam
from .optimizer import Optimizer
from .radam import RAdam
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "LBFGS",
           "lr_scheduler"]
