"""``tg.accelerator``: as ``torch.accelerator``, the device-agnostic front for "the GPU if
there is one" (pytorch/examples' scripts start with ``torch.accelerator.is_available()``).
threadgrad's accelerator is CUDA through cupy; ``virtual:N`` devices are not accelerators.

>>> import threadgrad as tg
>>> tg.accelerator.is_available() == tg.cuda.is_available()
True
"""
from __future__ import annotations

from typing import Any

from . import cuda


def is_available() -> bool:
    """Whether a CUDA device can be used (cupy installed and a GPU present)."""
    return cuda.is_available()


def device_count() -> int:
    return cuda.device_count() if cuda.is_available() else 0


def current_accelerator(check_available: bool = False) -> Any:
    """``tg.device("cuda")`` where threadgrad was built with an accelerator, as torch's; with
    ``check_available=True``, None unless one is available now. threadgrad's accelerator is
    CUDA when cupy is installed; without it there is none, and this returns None."""
    from ._front import device

    if check_available and not is_available():
        return None
    return device("cuda") if is_available() else None
