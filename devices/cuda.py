"""cuda:N devices backed by cupy (optional extra ``threadgrad[cuda]``).

Without cupy, or with cupy but no GPU, :func:`make_device` raises RuntimeError saying which
is missing; :func:`device_count` returns 0.

Streams. The engine needs five things from a device with streams (Note [Streams] in
engine/executor.py): the thread's current stream, a way to make a stream current for a
block, recording an event on a stream, making a stream wait for an event, and waiting for
the whole device. :class:`CudaDevice` implements them on top of a ``cuda_api`` object with
the shape of ``cupy.cuda`` (``get_current_stream``, ``Stream``, ``Event``, ``Device``). The
test suite passes a small numpy-backed stand-in with the same shape
(tests/devices/fake_cupy.py), so the ordering logic runs in CI on machines without GPUs.

Note [Current device]
~~~~~~~~~~~~~~~~~~~~~
cupy keeps, per thread, a current *device* and, per thread and per device, a current
*stream*. Three of its rules matter here, and each method below that depends on one of
them enters ``cuda_api.Device(self.index)`` first:
  * ``with stream:`` and ``stream.use()`` raise RuntimeError unless the stream's device is
    the thread's current device;
  * ``Stream.record()`` creates its Event on the current device, and CUDA refuses to record
    an event of one device on a stream of another;
  * the null stream (``Stream.null``, handle 0) means "the legacy default stream of the
    *current* device", so recording on it or making it wait under the wrong current device
    silently synchronizes the wrong GPU.
The engine calls these methods on whichever thread routes a gradient or completes a
backward (the caller's thread, a device worker, a pool thread), and that thread's current
device can be any GPU, so none of them may rely on it.
"""
from __future__ import annotations

from typing import Any, ContextManager

import numpy

from . import Device, _fused

_cupy: Any = None
_import_error: BaseException | None = None
_count_error: BaseException | None = None


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
    """Number of GPUs cupy sees; 0 when cupy is missing or no GPU (or no driver) is present."""
    global _count_error
    cp = _load_cupy()
    if cp is None:
        return 0
    try:
        return int(cp.cuda.runtime.getDeviceCount())
    except Exception as e:  # cupy's CUDARuntimeError when there is no driver or no device
        _count_error = e
        return 0


class _StreamGuard:
    """``with``: make the device, then the stream, current on this thread; restore both after.
    See Note [Current device]. A small class rather than contextlib (it runs once per node)."""

    __slots__ = ("_device", "_stream")

    def __init__(self, device_ctx: Any, stream: Any) -> None:
        self._device = device_ctx
        self._stream = stream

    def __enter__(self) -> Any:
        self._device.__enter__()
        try:
            self._stream.__enter__()
        except BaseException:
            self._device.__exit__(None, None, None)
            raise
        return self._stream

    def __exit__(self, *exc: Any) -> None:
        try:
            self._stream.__exit__(*exc)
        finally:
            self._device.__exit__(*exc)


class CudaDevice(Device):
    """A GPU: arrays of ``xp`` (cupy), streams and events of ``cuda_api`` (cupy.cuda).

    ``CudaDevice(index, xp, cuda_api)``; ``devices.get("cuda:N")`` builds one with cupy. Tests
    build one over numpy and a stand-in ``cuda_api`` and install it with ``devices.register``:

    >>> import numpy, devices
    >>> from threadgrad.devices.cuda import CudaDevice
    >>> from fake_cupy import FakeCupy  # tests/devices/fake_cupy.py (on sys.path under pytest)
    >>> fake = FakeCupy()
    >>> dev = CudaDevice(0, numpy, fake.cuda)
    >>> s = fake.cuda.Stream(name="s")
    >>> with dev.stream_context(s):
    ...     dev.current_stream() is s
    True
    >>> dev.wait_event(fake.cuda.Stream.null, dev.record_event(s))
    >>> fake.log
    [('record', 's', 1), ('wait', 'null@0', 1)]
    """

    __slots__ = ("cuda_api", "_stream_of_device")

    def __init__(self, index: int, xp: Any, cuda_api: Any) -> None:
        super().__init__("cuda", index, xp)
        self.cuda_api = cuda_api
        self.has_streams = True
        self.kernels = _fused.for_array_module(xp)  # fused kernels when xp is cupy
        # cupy >= 10 keeps one current stream per device and takes the device id; older
        # releases take no argument and answer for the current device. Decided once here.
        try:
            cuda_api.get_current_stream(index)
            self._stream_of_device = True
        except TypeError:
            self._stream_of_device = False

    # -- arrays -------------------------------------------------------------------------
    def asarray(self, data: Any, dtype: Any = None) -> Any:
        with self.cuda_api.Device(self.index):
            return self.xp.asarray(data, dtype=dtype)

    def to_host(self, array: Any) -> numpy.ndarray:
        """A numpy *copy* (cupy's ``get()``), never a view: device and host never alias."""
        get = getattr(array, "get", None)
        return get() if get is not None else numpy.array(array, copy=True)

    def guard(self) -> Any:
        """``with device.guard():`` makes this GPU current, so cupy allocates there."""
        return self.cuda_api.Device(self.index)

    def synchronize(self) -> None:
        self.cuda_api.Device(self.index).synchronize()

    def fork_safe(self) -> bool:
        """False for a GPU of the real cupy: a forked child cannot use it (Note [Fork] in
        devices/__init__.py). A stand-in ``cuda_api`` (the tests') is as fork-safe as numpy."""
        return _cupy is None or self.cuda_api is not _cupy.cuda

    def activate(self) -> None:
        """Make this GPU current on the calling thread (device workers call it once)."""
        self.cuda_api.Device(self.index).use()

    # -- streams: see Note [Streams] in engine/executor.py and Note [Current device] ----
    def current_stream(self) -> Any:
        """The calling thread's current stream on this GPU."""
        if self._stream_of_device:
            return self.cuda_api.get_current_stream(self.index)
        with self.cuda_api.Device(self.index):
            return self.cuda_api.get_current_stream()

    def stream_context(self, stream: Any) -> ContextManager:
        """``with device.stream_context(s):`` makes this GPU and ``s`` (one of its streams)
        current on this thread for the block, then restores both."""
        return _StreamGuard(self.cuda_api.Device(self.index), stream)

    def keep_current(self, stream: Any) -> None:
        """Make this GPU and ``stream`` current on this thread again if they no longer are (a
        device worker runs a node on its own current stream without a stream context, then
        calls this: Note [Worker stream] in engine/executor.py)."""
        api = self.cuda_api
        if api.runtime.getDevice() != self.index:
            api.Device(self.index).use()
        if self.current_stream() is not stream:
            stream.use()

    def record_event(self, stream: Any) -> Any:
        """Record a new event on ``stream`` (a stream of this GPU) and return it."""
        api = self.cuda_api
        with api.Device(self.index):
            # No timing: cheaper to record, and all the engine does is wait on it (PyTorch too).
            return stream.record(api.Event(disable_timing=True))

    def wait_event(self, stream: Any, event: Any) -> None:
        """Make future work on ``stream`` (a stream of this GPU) wait for ``event`` (any GPU's)."""
        with self.cuda_api.Device(self.index):
            stream.wait_event(event)


def make_device(index: int | None) -> Device:
    cp = _load_cupy()
    name = f"cuda:{index or 0}"
    if cp is None:
        raise RuntimeError(
            f"device '{name}' needs cupy, which is not installed or failed to import "
            f"({_import_error!r}); install the extra: pip install 'threadgrad[cuda]'"
        )
    n = device_count()
    if n == 0:
        why = f" ({_count_error!r})" if _count_error is not None else ""
        raise RuntimeError(f"device '{name}': cupy is installed but no NVIDIA GPU is visible{why}")
    index = index or 0
    if index >= n:
        raise RuntimeError(f"device 'cuda:{index}' does not exist: cupy sees {n} GPU(s)")
    return CudaDevice(index, cp, cp.cuda)
