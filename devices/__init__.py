"""Device registry: ``cpu`` (numpy), ``virtual:N`` (numpy, own worker thread), ``cuda:N`` (cupy).

A :class:`Device` names where a tensor's array lives and which array module (``xp``)
operates on it. Devices are interned: ``devices.get("virtual:1") is devices.get("virtual:1")``,
so the engine compares them by identity on its hot path.

>>> from threadgrad import devices
>>> devices.get("cpu") is devices.cpu
True
>>> str(devices.get("virtual:2")), devices.get("virtual:2").index
('virtual:2', 2)
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Union

import numpy

from . import _fused

__all__ = ["Device", "get", "cpu", "available", "cuda_available", "DeviceSpec"]


class Device:
    """One place where arrays live. Create through :func:`get`, never directly.

    Attributes: ``type`` (``"cpu"``, ``"virtual"`` or ``"cuda"``), ``index`` (None for cpu),
    ``xp`` (the array module: numpy or cupy). ``needs_worker`` is True for every device
    whose backward nodes run on a dedicated engine worker thread (all but cpu). ``kernels`` is
    the device's formula table (devices/_fused.py): plain array expressions on numpy devices,
    fused kernels on a GPU.
    """

    __slots__ = ("type", "index", "xp", "needs_worker", "has_streams", "kernels", "_str", "__weakref__")

    def __init__(self, type: str, index: int | None, xp: Any) -> None:
        self.type = type
        self.index = index
        self.xp = xp
        self.needs_worker = type != "cpu"
        self.has_streams = False  # True for devices with streams and events (cuda)
        self.kernels = _fused.PLAIN
        self._str = type if index is None else f"{type}:{index}"

    def fork_safe(self) -> bool:
        """Can a child process forked from this one still use this device? (numpy: yes.)"""
        return True

    def synchronize(self) -> None:
        """Block until all work queued on this device is done (a no-op for numpy devices)."""

    def guard(self) -> Any:
        """Context manager making this device current for allocations (a no-op for numpy devices)."""
        return _NULL_GUARD

    def asarray(self, data: Any, dtype: Any = None) -> Any:
        """Return ``data`` as an array of this device (copying only when it must)."""
        return self.xp.asarray(data, dtype=dtype)

    def to_host(self, array: Any) -> numpy.ndarray:
        """Return a numpy copy-or-view of an array that lives on this device."""
        return array

    def __repr__(self) -> str:
        return f"device(type='{self.type}'" + ("" if self.index is None else f", index={self.index}") + ")"

    def __str__(self) -> str:
        return self._str

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = get(other)
            except (ValueError, RuntimeError):
                return False
        return self is other

    def __hash__(self) -> int:
        return hash(self._str)

    def __reduce__(self):
        return (get, (self._str,))


DeviceSpec = Union[Device, str]
_NULL_GUARD = contextlib.nullcontext()

# True once any device with streams exists in this process; the executor reads it once per
# backward call, so graphs without such devices never pay for stream bookkeeping.
streams_in_use = False

# The registry is process-global but append-only and guarded by a lock: devices are
# interned once and never change afterwards, so readers need no lock.
_registry: dict[str, Device] = {}
_registry_lock = threading.Lock()

cpu = Device("cpu", None, numpy)
_registry["cpu"] = cpu


def _parse(spec: str) -> tuple[str, int | None]:
    kind, sep, idx = spec.strip().partition(":")
    if kind not in ("cpu", "virtual", "cuda"):
        raise ValueError(f"unknown device '{spec}': expected 'cpu', 'cuda', 'cuda:N' or 'virtual:N'")
    if not sep:
        if kind == "virtual":
            raise ValueError(f"device '{spec}' needs an index: use 'virtual:N'")
        return kind, (None if kind == "cpu" else 0)
    if kind == "cpu":
        raise ValueError(f"device '{spec}': cpu takes no index")
    if not idx.isdigit():
        raise ValueError(f"device '{spec}': the index must be a non-negative integer")
    return kind, int(idx)


def get(spec: DeviceSpec) -> Device:
    """Return the interned :class:`Device` for ``spec`` (``"cpu"``, ``"cuda[:N]"``, ``"virtual:N"`` or a Device).

    Raises ValueError for a malformed spec and RuntimeError for ``cuda`` without cupy or a GPU.

    >>> get("virtual:0") is get(get("virtual:0"))
    True
    """
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"expected a Device or a device string like 'cpu' or 'virtual:1', got {type(spec).__name__}")
    dev = _registry.get(spec)
    if dev is not None:
        return dev
    kind, index = _parse(spec)
    name = kind if index is None else f"{kind}:{index}"
    with _registry_lock:
        dev = _registry.get(name)
        if dev is None:
            if kind == "virtual":
                dev = Device("virtual", index, numpy)
            else:  # cuda
                if _forked_from_cuda:  # See Note [Fork]
                    raise RuntimeError(
                        f"device '{name}': Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
                        "multiprocessing, you must use the 'spawn' start method"
                    )
                from . import cuda as _cuda

                dev = _cuda.make_device(index)
            _registry[name] = dev
            if dev.has_streams:
                global streams_in_use
                streams_in_use = True
        _registry[spec] = dev
    return dev


def register(name: str, device: Device) -> Device:
    """Install ``device`` under ``name`` (used by tests to plug in a stand-in cuda device)."""
    global streams_in_use
    with _registry_lock:
        _registry[name] = device
        if device.has_streams:
            streams_in_use = True
    return device


def unregister(name: str) -> None:
    """Remove a device installed with :func:`register`."""
    global streams_in_use
    with _registry_lock:
        _registry.pop(name, None)
        streams_in_use = any(d.has_streams for d in _registry.values())


# Note [Fork]
# ~~~~~~~~~~~
# CUDA cannot be used in a child forked after the parent initialized it, and a cupy call
# there fails (PyTorch refuses with "Cannot re-initialize CUDA in forked subprocess"). The
# child must still run cpu and virtual graphs: so in the child every device that is not
# fork-safe (a GPU driven by the real cupy) leaves the registry, ``streams_in_use`` is
# recomputed (the executor would otherwise ask cupy for the current streams of every backward
# call), ``get("cuda...")`` raises torch's error, and the registry lock is made anew (a
# thread of the parent may have held it at the fork). The engine resets its own threads and
# queues in its own at-fork handler (executor.py).
_forked_from_cuda = False


def _after_fork_in_child() -> None:
    global _registry_lock, streams_in_use, _forked_from_cuda
    _registry_lock = threading.Lock()
    gone = [name for name, d in _registry.items() if not d.fork_safe()]
    for name in gone:
        del _registry[name]
    if gone:
        _forked_from_cuda = True
    streams_in_use = any(d.has_streams for d in _registry.values())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def cuda_available() -> bool:
    """True when cupy imports and sees at least one GPU."""
    from . import cuda as _cuda

    return _cuda.device_count() > 0


def available() -> list[Device]:
    """cpu and every usable cuda device (virtual devices exist on demand and are not listed)."""
    from . import cuda as _cuda

    return [cpu] + [get(f"cuda:{i}") for i in range(_cuda.device_count())]
