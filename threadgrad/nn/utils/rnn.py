"""``tg.nn.utils.rnn.pad_sequence``: variable-length sequences padded into one tensor, as
torch's (differentiable: a cat and a stack of existing ops).

>>> import threadgrad as tg
>>> from threadgrad.nn.utils.rnn import pad_sequence
>>> pad_sequence([tg.ones(3), tg.ones(1) * 2], batch_first=True).tolist()
[[1.0, 1.0, 1.0], [2.0, 0.0, 0.0]]
"""
from __future__ import annotations

from typing import Sequence

from ... import ops
from ...engine import creation
from ...engine.tensor import Tensor

__all__ = ["pad_sequence"]


def pad_sequence(sequences: Sequence[Tensor] | Tensor, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack ``sequences`` (each ``(L_i, *)``) into ``(L_max, B, *)`` (``(B, L_max, *)`` with
    ``batch_first``), filling with ``padding_value`` on the ``padding_side``."""
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    seqs = [sequences[i] for i in range(sequences.shape[0])] if isinstance(sequences, Tensor) else list(sequences)
    if not seqs:
        raise RuntimeError("received an empty list of sequences")
    longest = max(s.shape[0] for s in seqs)
    padded = []
    for s in seqs:
        missing = longest - s.shape[0]
        if missing:
            fill = creation.full((missing,) + tuple(s.shape[1:]), padding_value, dtype=s.dtype, device=s.device)
            s = ops.cat([s, fill] if padding_side == "right" else [fill, s], 0)
        padded.append(s)
    return ops.stack(padded, 0 if batch_first else 1)
