"""``tg.autograd.graph``: the graph's nodes and saved-tensor hooks, as ``torch.autograd.graph``.

>>> import threadgrad as tg
>>> with tg.autograd.graph.save_on_cpu():
...     y = (tg.ones(2, requires_grad=True) * 2).sum()
>>> y.grad_fn.name()
'SumBackward0'
"""
from __future__ import annotations

from ..engine import register_multi_grad_hook
from ..engine.graph import Node
from ..engine.saved_hooks import disable_saved_tensors_hooks, save_on_cpu, saved_tensors_hooks

__all__ = ["Node", "saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks", "register_multi_grad_hook"]
