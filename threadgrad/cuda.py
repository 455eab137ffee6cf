"""``tg.cuda``: the few ``torch.cuda`` calls device-agnostic scripts make.

>>> import threadgrad as tg
>>> device = "cuda" if tg.cuda.is_available() else "cpu"
"""
from __future__ import annotations

from . import devices


def is_available() -> bool:
    """Whether cupy and at least one NVIDIA GPU are usable."""
    return devices.cuda_available()


def device_count() -> int:
    """How many cuda devices are usable (0 without cupy or a GPU)."""
    return sum(1 for d in devices.available() if d.type == "cuda")


def synchronize(device: devices.DeviceSpec | None = None) -> None:
    """Wait for all work queued on ``device`` (default ``cuda``) to finish."""
    devices.get(device if device is not None else "cuda").synchronize()


__all__ = ["is_available", "device_count", "synchronize"]
