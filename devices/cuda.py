"""cuda:N devices backed by cupy (optional extra ``threadgrad[cuda]``).

Without cupy, or with cupy but no GPU, :func:`make_device` raises RuntimeError saying which
is missing; :func:`device_count` returns 0.

Streams. The engine needs five things from a device with streams (Note [Streams] in
engine/executor.py): the thread's current stream, a way to make a stream current for a
block, recording an event on a stream, making a stream wait for an event, and waiting for
the whole device. :class:`CudaDevice` implements them on top of a ``cuda_api`` object with
the shape of ``cupy.cuda`` (``get_current_stream``, ``Stream``, ``Event``, ``Device``). The
test suite passes a small numpy-backed stand-in with the same shape, so the ordering logic
runs in CI on machines without GPUs.
"""
from __future__ import annotations

from typing import Any, ContextManager

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
    """A GPU: arrays of ``xp`` (cupy), streams and events of ``cuda_api`` (cupy.cuda)."""

    __slots__ = ("cuda_api",)

    def __init__(self, index: int, xp: Any, cuda_api: Any) -> None:
        super().__init__("cuda", index, xp)
        self.cuda_api = cuda_api
        self.has_streams = True

    # -- arrays -------------------------------------------------------------------------
    def asarray(self, data: Any, dtype: Any = None) -> Any:
        with self.cuda_api.Device(self.index):
            return self.xp.asarray(data, dtype=dtype)

    def to_host(self, array: Any) -> numpy.ndarray:
        get = getattr(array, "get", None)
        return get() if get is not None else numpy.asarray(array)

    def synchronize(self) -> None:
        self.cuda_api.Device(self.index).synchronize()

    def activate(self) -> None:
        """Make this GPU current on the calling thread (device workers call it once)."""
        self.cuda_api.Device(self.index).use()

    # -- streams ------------------------------------------------------------------------
    def current_stream(self) -> Any:
        with self.cuda_api.Device(self.index):
            return self.cuda_api.get_current_stream()

    def stream_context(self, stream: Any) -> ContextManager:
        """``with device.stream_context(s):`` makes ``s`` current on this thread for the block."""
        return stream  # cupy streams are context managers setting the thread's current stream

    def record_event(self, stream: Any) -> Any:
        return stream.record()

    def wait_event(self, stream: Any, event: Any) -> None:
        stream.wait_event(event)


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
    return CudaDevice(index, cp, cp.cuda)
