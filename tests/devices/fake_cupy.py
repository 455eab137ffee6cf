"""A numpy-backed stand-in for the parts of cupy that ``devices.cuda.CudaDevice`` uses.

It lets the stream and event protocol of the executor (Note [Streams] in engine/executor.py)
run, and be checked exactly, on machines without a GPU. Arrays are plain numpy arrays
(``xp = numpy``); only ``cupy.cuda`` is imitated::

    fake = FakeCupy(device_count=1)
    dev = devices.cuda.CudaDevice(0, numpy, fake.cuda)
    s1 = fake.cuda.Stream(name="s1")
    with s1:
        ...                      # fake.cuda.get_current_stream() is s1 on this thread
    fake.log                     # [("record", "s1", 1), ("wait", "s0", 1), ...]

What it models, as cupy does (cupy/cuda/stream.pyx, cupy/cuda/device.pyx):

* a current device per thread (``Device(i)`` as a context manager, ``Device(i).use()``), 0 by
  default, and ``runtime.getDeviceCount()`` / ``runtime.getDevice()``;
* a current stream per thread *and per device* (``get_current_stream(device_id=-1)``), the
  null stream by default; ``with stream:`` pushes, exit pops, ``stream.use()`` sets;
* a stream belongs to the device current when it was made, and ``with stream:`` /
  ``stream.use()`` raise RuntimeError when that is not the current device;
* ``Stream.null`` is one object for every device and means "the null stream of the current
  device": the log names it ``null@N`` with N the device current at the call;
* ``Event()`` belongs to the current device; recording it on another device's stream raises
  RuntimeError (CUDA refuses it too);
* ``stream.record(event=None)`` returns the (new) event; ``stream.wait_event(event)``;
  ``stream.synchronize()``; ``Device(i).synchronize()``.

What it records: ``fake.log`` is one global, ordered list of tuples, appended under a lock:

* ``("record", stream, event_id)`` and ``("wait", stream, event_id)``;
* ``("stream_sync", stream)``, ``("device_sync", device_id)``, ``("event_sync", event_id)``;
* ``("op", name, stream)``: what tests add with ``fake.note(name)`` (the stream current on
  the calling thread's current device), to place "work" in the order.

``stream`` entries are stream names: the ``name=`` given to ``Stream`` (a fake-only keyword),
else ``"s<N>"``. Each Stream also keeps its own ``log`` of ``("record", event_id)`` /
``("wait", event_id)`` / ``("sync",)``. Events are numbered from 1 per fake; an event
remembers the stream it was last recorded on (``recorded_on``).
"""
from __future__ import annotations

import itertools
import threading
import types
from typing import Any

__all__ = ["FakeCupy"]


class FakeCupy:
    """One stand-in cupy: ``.cuda`` has the cupy.cuda names, ``.log`` the global event log."""

    def __init__(self, device_count: int = 1) -> None:
        self.device_count = device_count
        self.log: list[tuple] = []
        self._lock = threading.Lock()
        self._tls = threading.local()
        self._next_event = itertools.count(1).__next__
        self._next_stream = itertools.count(1).__next__
        self._streams: list = []  # every Stream made, so clear() can reset their logs
        self.cuda = _make_cuda_namespace(self)

    # -- the log --------------------------------------------------------------------------
    def _append(self, entry: tuple) -> None:
        with self._lock:
            self.log.append(entry)

    def note(self, name: str) -> None:
        """Log ``("op", name, <current stream>)``: stands for a kernel launched now."""
        self._append(("op", name, self._stream_name(self.cuda.get_current_stream())))

    def clear(self) -> None:
        """Forget the global log and every stream's log."""
        with self._lock:
            self.log.clear()
            for s in list(self._streams):
                s.log.clear()

    def events(self) -> list[tuple]:
        """The log without ``op`` entries: the synchronization protocol alone."""
        with self._lock:
            return [e for e in self.log if e[0] != "op"]

    # -- per-thread state -----------------------------------------------------------------
    def current_device(self) -> int:
        return getattr(self._tls, "device", 0)

    def _set_device(self, i: int) -> None:
        self._tls.device = i

    def _streams_tls(self) -> Any:
        """This thread's streams, as cupy keeps them: ``current[d]`` (what get_current_stream
        answers), ``stack[d]`` (what ``with`` restores on exit; the bottom is the null
        stream) and ``pushed`` (the device of each open ``with stream:``)."""
        t = self._tls
        if not hasattr(t, "current"):
            null = self.cuda.Stream.null
            t.current = [null] * self.device_count
            t.stack = [[null] for _ in range(self.device_count)]
            t.pushed = []
        return t

    def _check_device(self, i: int) -> int:
        if not isinstance(i, int) or not 0 <= i < self.device_count:
            raise RuntimeError(f"fake cupy: invalid device ordinal {i!r} ({self.device_count} device(s))")
        return i

    def _resolve(self, stream: Any) -> int:
        """The device a stream acts on now (the null stream: the current device)."""
        return self.current_device() if stream.device_id < 0 else stream.device_id

    def _stream_name(self, stream: Any) -> str:
        if stream.device_id < 0:
            return f"{stream.name}@{self.current_device()}"
        return stream.name


def _make_cuda_namespace(fake: FakeCupy) -> Any:
    """Build the ``cupy.cuda``-shaped namespace whose classes log into ``fake``."""

    class Event:
        """cupy.cuda.Event: belongs to the device current when it is made."""

        def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False) -> None:
            self.id = fake._next_event()
            self.device_id = fake.current_device()
            self.block = block
            self.disable_timing = disable_timing
            self.interprocess = interprocess
            self.recorded_on: Any = None

        @property
        def done(self) -> bool:
            return True  # numpy work is finished when the call returns

        def record(self, stream: Any = None) -> None:
            (stream if stream is not None else get_current_stream()).record(self)

        def synchronize(self) -> None:
            fake._append(("event_sync", self.id))

        def __repr__(self) -> str:
            return f"<fake Event {self.id} (device {self.device_id})>"

    class Stream:
        """cupy.cuda.Stream over nothing: it logs what would be queued on it."""

        null: "Stream"  # set below: one object for every device, like cupy's Stream.null

        def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False,
                     priority: int | None = None, *, name: str | None = None) -> None:
            self.non_blocking = non_blocking
            self.priority = priority
            if null or ptds:
                self.ptr = 0 if null else 2
                self.device_id = -1
                self.name = name or ("null" if null else "ptds")
            else:
                n = fake._next_stream()
                self.ptr = 0x1000 + n
                self.device_id = fake.current_device()
                self.name = name or f"s{n}"
            self.log: list[tuple] = []
            with fake._lock:
                fake._streams.append(self)

        # equality and hash by handle, as cupy's _BaseStream
        def __eq__(self, other: object) -> bool:
            return isinstance(other, Stream) and self.ptr == other.ptr

        def __hash__(self) -> int:
            return self.ptr

        def _match(self) -> int:
            cur = fake.current_device()
            if self.device_id >= 0 and self.device_id != cur:
                raise RuntimeError(
                    f"The device that the stream is created on ({self.device_id}) does not match "
                    f"with the current device ({cur})"
                )
            return cur

        def __enter__(self) -> "Stream":
            dev = self._match()
            t = fake._streams_tls()
            t.stack[dev].append(self)
            t.pushed.append(dev)
            t.current[dev] = self
            return self

        def __exit__(self, *exc: Any) -> None:
            t = fake._streams_tls()
            dev = t.pushed.pop()
            t.stack[dev].pop()
            t.current[dev] = t.stack[dev][-1]

        def use(self) -> "Stream":
            """Make this stream current without pushing it (a ``with`` exit restores the stack)."""
            dev = self._match()
            fake._streams_tls().current[dev] = self
            return self

        def record(self, event: Any = None) -> Any:
            if event is None:
                event = Event()
            dev = fake._resolve(self)
            if event.device_id != dev:
                raise RuntimeError(
                    f"fake cupy: cannot record event {event.id} of device {event.device_id} "
                    f"on stream {fake._stream_name(self)} of device {dev} (cudaErrorInvalidResourceHandle)"
                )
            event.recorded_on = self
            self.log.append(("record", event.id))
            fake._append(("record", fake._stream_name(self), event.id))
            return event

        def wait_event(self, event: Any) -> None:
            self.log.append(("wait", event.id))
            fake._append(("wait", fake._stream_name(self), event.id))

        def synchronize(self) -> None:
            self.log.append(("sync",))
            fake._append(("stream_sync", fake._stream_name(self)))

        @property
        def done(self) -> bool:
            return True

        def __repr__(self) -> str:
            return f"<fake Stream {self.name} (device {self.device_id})>"

    class Device:
        """cupy.cuda.Device: a context manager making device ``i`` current on this thread."""

        def __init__(self, device: int | None = None) -> None:
            self.id = fake.current_device() if device is None else fake._check_device(device)
            self._prev: list[int] = []

        def __enter__(self) -> "Device":
            self._prev.append(fake.current_device())
            fake._set_device(self.id)
            return self

        def __exit__(self, *exc: Any) -> None:
            fake._set_device(self._prev.pop())

        def use(self) -> None:
            fake._set_device(self.id)

        def synchronize(self) -> None:
            fake._append(("device_sync", self.id))

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Device) and other.id == self.id

        def __hash__(self) -> int:
            return self.id

        def __repr__(self) -> str:
            return f"<fake CUDA Device {self.id}>"

    def get_current_stream(device_id: int = -1) -> Any:
        dev = fake.current_device() if device_id == -1 else fake._check_device(device_id)
        return fake._streams_tls().current[dev]

    class runtime:
        @staticmethod
        def getDeviceCount() -> int:
            return fake.device_count

        @staticmethod
        def getDevice() -> int:
            return fake.current_device()

    Stream.null = Stream(null=True)

    return types.SimpleNamespace(
        Event=Event, Stream=Stream, Device=Device, get_current_stream=get_current_stream, runtime=runtime
    )
