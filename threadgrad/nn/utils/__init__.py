"""``tg.nn.utils``: gradient clipping and parameter/vector conversion, as ``torch.nn.utils``.

>>> import threadgrad as tg
>>> w = tg.tensor([3.0, 4.0], requires_grad=True)
>>> w.grad = tg.tensor([3.0, 4.0])
>>> tg.nn.utils.clip_grad_norm_([w], max_norm=1.0).item()
5.0
>>> [round(v, 4) for v in w.grad.tolist()]
[0.6, 0.8]
"""
from __future__ import annotations

from . import rnn
from .clip_grad import clip_grad_norm, clip_grad_norm_, clip_grad_value_, get_total_norm, clip_grads_with_norm_
from .convert_parameters import parameters_to_vector, vector_to_parameters

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_",
           "parameters_to_vector", "vector_to_parameters", "rnn"]
