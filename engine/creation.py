"""Creating tensors, and the random generator that ``manual_seed`` seeds.

Floats default to float32 and integers to int64, as in torch; numpy arrays keep their dtype.

>>> import engine
>>> engine.tensor([1, 2]).dtype, engine.tensor([1.0]).dtype, engine.zeros(2, 3).shape
(dtype('int64'), dtype('float32'), (2, 3))
"""
from __future__ import annotations

import threading
from typing import Any

import numpy

from .tensor import Tensor, _wrap, to_device, to_dtype

_DEFAULT_FLOAT = numpy.dtype(numpy.float32)


def _shape(shape: tuple) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    for s in shape:
        if not isinstance(s, (int, numpy.integer)) or s < 0:
            raise ValueError(f"a shape must be non-negative integers, got {shape}")
    return tuple(int(s) for s in shape)


def _finish(data: Any, device: Any, requires_grad: bool) -> Tensor:
    t = _wrap(data, device)
    if requires_grad:
        t.requires_grad = True
    return t


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A new leaf tensor holding a copy of ``data`` (a number, nested lists, an array or a Tensor)."""
    dev = to_device(device)
    dt = to_dtype(dtype)
    if isinstance(data, Tensor):
        data = data.device.to_host(data.data)
    elif hasattr(data, "__cuda_array_interface__"):  # a cupy array
        data = data.get()
    from_array = isinstance(data, (numpy.ndarray, numpy.generic))
    arr = numpy.array(data, copy=True)  # always a copy, like torch.tensor
    if arr.dtype.kind in "USO":
        raise TypeError(f"engine.tensor: cannot make a numeric tensor from {type(data).__name__} {data!r:.60}")
    if dt is None and not from_array and arr.dtype == numpy.float64:
        dt = _DEFAULT_FLOAT  # python floats -> float32, like torch
    if dt is not None:
        arr = arr.astype(dt, copy=False)
    return _finish(arr if dev.xp is numpy else dev.asarray(arr), dev, requires_grad)


def _filled(fill: Any, shape: tuple, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    dev = to_device(device)
    dt = to_dtype(dtype) or _DEFAULT_FLOAT
    with dev.guard():
        return _finish(fill(dev.xp, _shape(shape), dt), dev, requires_grad)


def zeros(*shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _filled(lambda xp, s, d: xp.zeros(s, dtype=d), shape, dtype, device, requires_grad)


def ones(*shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _filled(lambda xp, s, d: xp.ones(s, dtype=d), shape, dtype, device, requires_grad)


def empty(*shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _filled(lambda xp, s, d: xp.empty(s, dtype=d), shape, dtype, device, requires_grad)


def full(shape: Any, value: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    if dtype is None and isinstance(value, bool):
        dtype = numpy.bool_
    elif dtype is None and isinstance(value, int):
        dtype = numpy.int64
    shape = (shape,) if isinstance(shape, (int, numpy.integer)) else tuple(shape)
    return _filled(lambda xp, s, d: xp.full(s, value, dtype=d), shape, dtype, device, requires_grad)


def _like(t: Tensor, fill: Any, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    dev = t.device if device is None else to_device(device)
    dt = t.dtype if dtype is None else to_dtype(dtype)
    with dev.guard():
        return _finish(fill(dev.xp, t.shape, dt), dev, requires_grad)


def zeros_like(t: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _like(t, lambda xp, s, d: xp.zeros(s, dtype=d), dtype, device, requires_grad)


def ones_like(t: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _like(t, lambda xp, s, d: xp.ones(s, dtype=d), dtype, device, requires_grad)


def empty_like(t: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _like(t, lambda xp, s, d: xp.empty(s, dtype=d), dtype, device, requires_grad)


def full_like(t: Tensor, value: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _like(t, lambda xp, s, d: xp.full(s, value, dtype=d), dtype, device, requires_grad)


def arange(start: Any, end: Any = None, step: Any = 1, dtype: Any = None, device: Any = None,
           requires_grad: bool = False) -> Tensor:
    """Like torch.arange: int64 for integer arguments, float32 otherwise."""
    if end is None:
        start, end = 0, start
    dev = to_device(device)
    dt = to_dtype(dtype)
    if dt is None:
        dt = numpy.dtype(numpy.int64) if all(isinstance(v, (int, numpy.integer)) for v in (start, end, step)) else _DEFAULT_FLOAT
    with dev.guard():
        return _finish(dev.xp.arange(start, end, step, dtype=dt), dev, requires_grad)


# --- random numbers ---------------------------------------------------------------------
# One process-wide generator (like torch's default CPU generator), guarded by a lock because
# numpy Generators are not thread-safe. Random arrays for other devices are drawn here and
# moved, so one seed reproduces the same numbers on every device.
_rng_lock = threading.Lock()
_rng = numpy.random.Generator(numpy.random.PCG64(0))


def manual_seed(seed: int) -> None:
    """Seed the generator behind rand, randn and dropout."""
    global _rng
    with _rng_lock:
        _rng = numpy.random.Generator(numpy.random.PCG64(int(seed)))


def get_rng_state() -> dict:
    """A snapshot of the generator, for :func:`set_rng_state` (checkpointing uses this)."""
    with _rng_lock:
        return _rng.bit_generator.state


def set_rng_state(state: dict) -> None:
    with _rng_lock:
        _rng.bit_generator.state = state


def random_array(kind: str, shape: tuple, dtype: Any) -> numpy.ndarray:
    """Draw ``uniform`` / ``normal`` host samples of ``shape`` from the seeded generator."""
    with _rng_lock:
        if kind == "uniform":
            return _rng.random(shape, dtype=numpy.float64).astype(dtype, copy=False)
        return _rng.standard_normal(shape, dtype=numpy.float64).astype(dtype, copy=False)


def _random(kind: str, shape: tuple, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    dev = to_device(device)
    dt = to_dtype(dtype) or _DEFAULT_FLOAT
    return _finish(dev.asarray(random_array(kind, _shape(shape), dt)), dev, requires_grad)


def rand(*shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Uniform samples in [0, 1) from the generator seeded by :func:`manual_seed`."""
    return _random("uniform", shape, dtype, device, requires_grad)


def randn(*shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Standard normal samples from the generator seeded by :func:`manual_seed`."""
    return _random("normal", shape, dtype, device, requires_grad)
