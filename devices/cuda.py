"""cuda:N devices backed by cupy (optional extra ``threadgrad[cuda]``).

Without cupy, or with cupy but no GPU, :func:`make_device` raises RuntimeError saying which
is missing; :func:`device_count` returns 0.
"""
from __future__ import annotations

from typing import Any

import numpy

from . import Device

_cupy: Any = None
_import_error: BaseException | None = None


def _load_cupy() -> Any:
    global _cupy, _import_error
    if _cupy is None and _import_error is None:
        try:
            import cupy  # noqa: F401

            _cupy = cupy
        except Exception as e:  # ImportError, or a broken CUDA install
            _import_error = e
    return _cupy


def device_count() -> int:
    """Number of GPUs cupy sees; 0 when cupy is missing or no GPU is present."""
    cp = _load_cupy()
    if cp is None:
        return 0
    try:
        return int(cp.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


class CudaDevice(Device):
    """A GPU. Arrays are cupy arrays; ``synchronize`` waits for the GPU."""

    __slots__ = ()

    def synchronize(self) -> None:
        with self.xp.cuda.Device(self.index):
            self.xp.cuda.Device(self.index).synchronize()

    def asarray(self, data: Any, dtype: Any = None) -> Any:
        with self.xp.cuda.Device(self.index):
            return self.xp.asarray(data, dtype=dtype)

    def to_host(self, array: Any) -> numpy.ndarray:
        return self.xp.asnumpy(array)


def make_device(index: int | None) -> Device:
    cp = _load_cupy()
    if cp is None:
        raise RuntimeError(
            f"device 'cuda:{index or 0}' needs cupy, which is not installed or failed to import "
            f"({_import_error!r}); install the extra: pip install 'threadgrad[cuda]'"
        )
    n = device_count()
    if n == 0:
        raise RuntimeError(f"device 'cuda:{index or 0}': cupy is installed but no NVIDIA GPU is visible")
    index = index or 0
    if index >= n:
        raise RuntimeError(f"device 'cuda:{index}' does not exist: cupy sees {n} GPU(s)")
    return CudaDevice("cuda", index, cp)
