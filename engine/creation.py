"""Creating tensors, and the random generator that ``manual_seed`` seeds.

Floats default to float32 and integers to int64, as in torch; numpy arrays keep their dtype.

>>> from threadgrad import engine
>>> engine.tensor([1, 2]).dtype, engine.tensor([1.0]).dtype, engine.zeros(2, 3).shape
(dtype('int64'), dtype('float32'), (2, 3))

The shape functions also take torch's keyword spellings: ``zeros(size=(2, 3))``,
``full(size=(2,), fill_value=1.5)``, ``arange(start=1, end=5, step=2)``, ``arange(end=3)``.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import numpy

from ._locks import LOCKS
from ._state import tls
from .tensor import Tensor, _wrap, to_device, to_dtype

_DEFAULT_FLOAT = numpy.dtype(numpy.float32)


def _shape(shape: tuple) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    for s in shape:
        if not isinstance(s, (int, numpy.integer)) or s < 0:
            raise ValueError(f"a shape must be non-negative integers, got {shape}")
    return tuple(int(s) for s in shape)


def _shape_or_size(fname: str, shape: tuple, size: Any) -> tuple:
    """The shape given positionally (``zeros(2, 3)``, ``zeros((2, 3))``) or as torch's ``size=``."""
    if size is None:
        return shape
    if shape:
        raise TypeError(f"{fname}() got multiple values for argument 'size': the shape was given "
                        f"positionally {shape!r} and as size={size!r}; pass it one way")
    if isinstance(size, (int, numpy.integer)) and not isinstance(size, bool):
        return (size,)
    if isinstance(size, (tuple, list)):
        return (tuple(size),)
    raise TypeError(f"{fname}(): argument 'size' must be a tuple of ints, not {type(size).__name__}")


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
        data = data.device.to_host(data._data)
    elif hasattr(data, "__cuda_array_interface__"):  # a cupy array
        data = data.get()
    from_array = isinstance(data, (numpy.ndarray, numpy.generic))
    if isinstance(data, (list, tuple)) and data and isinstance(_first_leaf(data), _TYPED):
        # A sequence of typed elements (numpy scalars or arrays, tensors, which become host
        # arrays here) keeps their dtype, as in torch; once a Python number is among them, the
        # usual rule below applies (floats give float32). Only sequences that start with a
        # typed element are scanned, so long lists of Python numbers cost nothing more.
        leaves = list(_leaves(data))
        if any(isinstance(leaf, Tensor) for leaf in leaves):
            data = _host_nested(data)
        from_array = all(isinstance(leaf, _TYPED) for leaf in leaves)
    try:
        arr = numpy.array(data, copy=True)  # always a copy, like torch.tensor
    except RuntimeError:
        # A tensor that requires grad, after a Python number (so not scanned above): its
        # __array__ refuses, while torch.tensor takes its values
        if not isinstance(data, (list, tuple)) or not any(isinstance(leaf, Tensor) for leaf in _leaves(data)):
            raise
        arr = numpy.array(_host_nested(data), copy=True)
    if arr.dtype.kind in "USO":
        raise TypeError(f"engine.tensor: cannot make a numeric tensor from {type(data).__name__} {data!r:.60}")
    if dt is None and not from_array and arr.dtype == numpy.float64:
        dt = _DEFAULT_FLOAT  # python floats -> float32, like torch
    if dt is not None:
        arr = arr.astype(dt, copy=False)
    return _finish(arr if dev.xp is numpy else dev.asarray(arr), dev, requires_grad)


_TYPED = (Tensor, numpy.ndarray, numpy.generic)


def _first_leaf(data: Any) -> Any:
    while isinstance(data, (list, tuple)) and data:
        data = data[0]
    return data


def _leaves(data: Any) -> Any:
    if isinstance(data, (list, tuple)):
        for d in data:
            yield from _leaves(d)
    else:
        yield data


def _host_nested(data: Any) -> Any:
    """Nested sequences with the Tensors in them replaced by host arrays."""
    if isinstance(data, Tensor):
        return data.device.to_host(data._data)
    if isinstance(data, (list, tuple)):
        return [_host_nested(d) for d in data]
    return data


def _filled(fill: Any, shape: tuple, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    dev = to_device(device)
    dt = to_dtype(dtype) or _DEFAULT_FLOAT
    with dev.guard():
        return _finish(fill(dev.xp, _shape(shape), dt), dev, requires_grad)


def zeros(*shape: Any, size: Any = None, dtype: Any = None, device: Any = None,
          requires_grad: bool = False) -> Tensor:
    """A tensor of zeros: ``zeros(2, 3)``, ``zeros((2, 3))`` or ``zeros(size=(2, 3))``; ``zeros()`` is 0-d."""
    shape = _shape_or_size("zeros", shape, size)
    return _filled(lambda xp, s, d: xp.zeros(s, dtype=d), shape, dtype, device, requires_grad)


def ones(*shape: Any, size: Any = None, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    """A tensor of ones; the shape is given as for :func:`zeros`."""
    shape = _shape_or_size("ones", shape, size)
    return _filled(lambda xp, s, d: xp.ones(s, dtype=d), shape, dtype, device, requires_grad)


def empty(*shape: Any, size: Any = None, dtype: Any = None, device: Any = None,
          requires_grad: bool = False) -> Tensor:
    """An uninitialized tensor (whatever the memory held); the shape is given as for :func:`zeros`."""
    shape = _shape_or_size("empty", shape, size)
    return _filled(lambda xp, s, d: xp.empty(s, dtype=d), shape, dtype, device, requires_grad)


def _one_of(fname: str, ours: str, ours_value: Any, torchs: str, torchs_value: Any) -> Any:
    """The value of an argument that has two names (``shape``/``size``, ``value``/``fill_value``)."""
    if torchs_value is None:
        return ours_value
    if ours_value is not None:
        raise TypeError(f"{fname}() got multiple values for argument '{torchs}': {ours}={ours_value!r} "
                        f"(or positionally) and {torchs}={torchs_value!r}; pass it once")
    return torchs_value


def full(shape: Any = None, value: Any = None, dtype: Any = None, device: Any = None,
         requires_grad: bool = False, *, size: Any = None, fill_value: Any = None) -> Tensor:
    """A tensor of ``shape`` (an int or a sequence of ints) filled with ``value``.

    torch's keyword names work too: ``full(size=(2, 3), fill_value=1.5)``. Without a dtype, a
    bool value gives bool, an int int64, a float float32 (torch's rule)."""
    shape = _one_of("full", "shape", shape, "size", size)
    value = _one_of("full", "value", value, "fill_value", fill_value)
    missing = [n for n, v in (("size", shape), ("fill_value", value)) if v is None]
    if missing:
        raise TypeError(f"full() missing {len(missing)} required argument{'s' * (len(missing) > 1)}: "
                        + " and ".join(f"'{n}'" for n in missing)
                        + " (full(size, fill_value), also spelled full(shape, value))")
    value = _fill_number("full", value)
    if dtype is None and isinstance(value, bool):
        dtype = numpy.bool_
    elif dtype is None and isinstance(value, (int, numpy.integer)):
        dtype = numpy.int64
    shape = (shape,) if isinstance(shape, (int, numpy.integer)) else tuple(shape)
    return _filled(lambda xp, s, d: xp.full(s, value, dtype=d), shape, dtype, device, requires_grad)


def _fill_number(name: str, value: Any) -> Any:
    """A fill value as a number: a 0-d tensor that does not require grad gives its own, as in
    torch; any other tensor is refused with torch's TypeError."""
    if not isinstance(value, Tensor):
        return value
    if value.ndim != 0 or value._rg:
        what = "requires grad" if value._rg else f"has shape {tuple(value.shape)}"
        raise TypeError(f"{name}(): argument 'fill_value' must be Number, not Tensor (this one {what}; "
                        "a 0-d tensor that does not require grad is taken as its number)")
    return value.item()


def _like(t: Tensor, fill: Any, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    dev = t.device if device is None else to_device(device)
    dt = t.dtype if dtype is None else to_dtype(dtype)
    with dev.guard():
        return _finish(fill(dev.xp, t.shape, dt), dev, requires_grad)


def zeros_like(t: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Zeros with ``t``'s shape, and its dtype and device unless given."""
    return _like(t, lambda xp, s, d: xp.zeros(s, dtype=d), dtype, device, requires_grad)


def ones_like(t: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Ones with ``t``'s shape, and its dtype and device unless given."""
    return _like(t, lambda xp, s, d: xp.ones(s, dtype=d), dtype, device, requires_grad)


def empty_like(t: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _like(t, lambda xp, s, d: xp.empty(s, dtype=d), dtype, device, requires_grad)


def full_like(t: Tensor, value: Any = None, dtype: Any = None, device: Any = None, requires_grad: bool = False,
              *, fill_value: Any = None) -> Tensor:
    """``t``'s shape filled with ``value`` (torch's name ``fill_value=`` works too), in ``t``'s dtype."""
    value = _one_of("full_like", "value", value, "fill_value", fill_value)
    if value is None:
        raise TypeError("full_like() missing 1 required argument: 'fill_value'")
    value = _fill_number("full_like", value)
    return _like(t, lambda xp, s, d: xp.full(s, value, dtype=d), dtype, device, requires_grad)


_ARANGE_POSITIONAL = ("start", "end", "step", "dtype", "device", "requires_grad")


def _arange_number(name: str, v: Any) -> Any:
    if isinstance(v, Tensor):
        if v.ndim != 0:
            raise TypeError(f"arange(): argument '{name}' must be a number or a 0-d tensor, "
                            f"got a tensor of shape {v.shape}")
        return v.item()
    if not isinstance(v, (int, float, numpy.integer, numpy.floating)):
        raise TypeError(f"arange(): argument '{name}' must be a number, not {type(v).__name__}")
    return v


def arange(*args: Any, start: Any = None, end: Any = None, step: Any = None, dtype: Any = None,
           device: Any = None, requires_grad: bool = False) -> Tensor:
    """Like torch.arange: ``arange(end)``, ``arange(start, end, step=1)``, or with keywords
    (``arange(end=3)``, ``arange(start=1, end=5, step=2)``). A single positional argument is
    ``end`` (start 0). int64 for integer arguments, float32 otherwise.

    For compatibility, ``dtype``, ``device`` and ``requires_grad`` may also follow ``step``
    positionally."""
    if len(args) > len(_ARANGE_POSITIONAL):
        raise TypeError(f"arange() takes at most 3 positional numbers (start, end, step), "
                        f"then dtype, device, requires_grad; {len(args)} arguments were given")
    kw = {"start": start, "end": end, "step": step, "dtype": dtype, "device": device,
          "requires_grad": requires_grad}
    if len(args) == 1 and end is not None:  # arange(start, end=...)
        names: tuple = ("start",)
    elif len(args) == 1:  # arange(end)
        if start is not None:
            raise TypeError(f"arange() got start={start!r} and a single positional argument ({args[0]!r}), "
                            f"which arange reads as 'end'; write arange(start, end) or pass end= as a keyword")
        names = ("end",)
    else:
        names = _ARANGE_POSITIONAL[:len(args)]
    for name, value in zip(names, args):
        given = kw[name] is not None and not (name == "requires_grad" and kw[name] is False)
        if given:
            raise TypeError(f"arange() got multiple values for argument '{name}'")
        kw[name] = value
    start, end, step = kw["start"], kw["end"], kw["step"]
    if end is None and len(args) >= 1 and args[0] is not None and len(names) > 1:
        start, end = None, start  # arange(5, None[, step]): the old spelling of arange(5)
    if end is None:
        raise TypeError("arange() missing required argument 'end' "
                        "(arange(end), arange(start, end, step=1), or end= as a keyword)")
    end = _arange_number("end", end)
    start = 0 if start is None else _arange_number("start", start)
    step = 1 if step is None else _arange_number("step", step)
    if step == 0:
        raise RuntimeError("arange(): step must be nonzero")
    dev = to_device(kw["device"])
    dt = to_dtype(kw["dtype"])
    if dt is None:
        ints = all(isinstance(v, (int, numpy.integer)) for v in (start, end, step))
        dt = numpy.dtype(numpy.int64) if ints else _DEFAULT_FLOAT
    with dev.guard():
        return _finish(dev.xp.arange(start, end, step, dtype=dt), dev, kw["requires_grad"])


# --- random numbers ---------------------------------------------------------------------
# One process-wide generator (like torch's default CPU generator), guarded by a lock because
# numpy Generators are not thread-safe. Random arrays for other devices are drawn here and
# moved, so one seed reproduces the same numbers on every device. The lock is LOCKS.rng
# (Note [Locks across fork] in _locks.py).
_rng = numpy.random.Generator(numpy.random.PCG64(0))

# Note [Checkpointed random draws]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A checkpointed function runs twice, in forward and again in backward, and with
# ``preserve_rng_state`` the re-run must draw exactly the numbers forward drew (dropout's
# mask). PyTorch saves the global generator's state at checkpoint entry and sets it back
# for the re-run: another thread drawing from the global generator between two of the
# forward's draws, or during the re-run, then shifts the re-run's numbers (a wrong mask, a
# silently wrong gradient). Here the re-run never touches the global generator:
#
# * Forward runs under a ``DrawRecorder``: each draw this thread makes still comes from the
#   generator that was current (the global one, so a one-thread checkpointed forward draws
#   exactly the numbers, and leaves exactly the state, of an unchecked one; other threads'
#   draws interleave as they would without checkpoint and never repeat the forward's), and
#   the recorder notes the state each draw started from. ``record()`` freezes the notes
#   into an immutable ``DrawRecord``.
# * Each re-run runs under its own ``DrawReplay`` of that record: draw i starts from the
#   state forward's draw i started from, in a private numpy Generator. So the re-run is
#   exact whatever other threads draw meanwhile, on whichever thread it runs (the thread
#   that runs the checkpoint's node: the caller, a device worker, a pool thread), and two
#   re-runs of one retained graph at once share nothing mutable. A re-run that draws more
#   often than forward did (a non-deterministic function) continues from where its last
#   draw left off; it still never touches the global generator.
# * Nesting composes: a checkpoint inside a checkpointed function records through whatever
#   is current, so during the outer re-run it records the replayed states, which are the
#   states its first forward saw.
# ``manual_seed``, ``get_rng_state`` and ``set_rng_state`` act on the current source too:
# through a recorder on the generator below it, in a replay on the replay's private
# generator (as a set inside torch's ``fork_rng`` stays inside it).
# Only draws made on the thread that runs the checkpointed function are recorded; draws
# that it hands to threads of its own come from the global generator.


def _draw(gen: numpy.random.Generator, kind: str, shape: tuple, dtype: Any) -> numpy.ndarray:
    if kind == "uniform":
        return gen.random(shape, dtype=numpy.float64).astype(dtype, copy=False)
    return gen.standard_normal(shape, dtype=numpy.float64).astype(dtype, copy=False)


def _draw_noting_state(source: Any, kind: str, shape: tuple, dtype: Any) -> tuple:
    """(the state the draw started from, the samples), from ``source`` (None: the global one)."""
    if source is not None:
        return source.draw(kind, shape, dtype)
    with LOCKS.rng:
        return _rng.bit_generator.state, _draw(_rng, kind, shape, dtype)


class DrawRecord:
    """What a checkpointed forward drew: the state it started from and the state each of its
    draws started from (immutable). See Note [Checkpointed random draws]."""

    __slots__ = ("start", "states")

    def __init__(self, start: dict, states: tuple) -> None:
        self.start, self.states = start, states


class DrawRecorder:
    """Passes this thread's draws to the source below it and notes each draw's starting state."""

    __slots__ = ("below", "start", "states")

    def __init__(self, below: Any) -> None:
        self.below = below
        self.start = _get_state(below)
        self.states: list = []

    def draw(self, kind: str, shape: tuple, dtype: Any) -> tuple:
        state, arr = _draw_noting_state(self.below, kind, shape, dtype)
        self.states.append(state)
        return state, arr

    def get_state(self) -> dict:
        return _get_state(self.below)

    def set_state(self, state: dict) -> None:
        _set_state(self.below, state)

    def seed(self, seed: int) -> None:
        _seed(self.below, seed)

    def record(self) -> DrawRecord:
        return DrawRecord(self.start, tuple(self.states))


class DrawReplay:
    """Replays a DrawRecord in a private generator: draw i starts where recorded draw i did."""

    __slots__ = ("record", "next", "gen")

    def __init__(self, record: DrawRecord) -> None:
        self.record = record
        self.next = 0
        self.gen = numpy.random.Generator(numpy.random.PCG64(0))
        self.gen.bit_generator.state = record.start

    def draw(self, kind: str, shape: tuple, dtype: Any) -> tuple:
        if self.next < len(self.record.states):
            self.gen.bit_generator.state = self.record.states[self.next]
            self.next += 1
        state = self.gen.bit_generator.state
        return state, _draw(self.gen, kind, shape, dtype)

    def get_state(self) -> dict:
        if self.next < len(self.record.states):
            return self.record.states[self.next]
        return self.gen.bit_generator.state

    def set_state(self, state: dict) -> None:
        self.gen.bit_generator.state = state

    def seed(self, seed: int) -> None:
        self.gen.bit_generator.state = numpy.random.PCG64(int(seed)).state


def _get_state(source: Any) -> dict:
    if source is not None:
        return source.get_state()
    with LOCKS.rng:
        return _rng.bit_generator.state


def _set_state(source: Any, state: dict) -> None:
    if source is not None:
        source.set_state(state)
        return
    with LOCKS.rng:
        _rng.bit_generator.state = state


def _seed(source: Any, seed: int) -> None:
    global _rng
    if source is not None:
        source.seed(seed)
        return
    with LOCKS.rng:
        _rng = numpy.random.Generator(numpy.random.PCG64(int(seed)))


@contextmanager
def record_draws() -> Iterator[DrawRecorder]:
    """Note the state of every draw this thread makes inside the block; ``.record()`` on the
    yielded recorder gives them back. See Note [Checkpointed random draws]."""
    prev = tls.rng_source
    recorder = DrawRecorder(prev)
    tls.rng_source = recorder
    try:
        yield recorder
    finally:
        tls.rng_source = prev


@contextmanager
def replay_draws(record: DrawRecord) -> Iterator[None]:
    """Inside the block, this thread's draws replay ``record`` and leave every other
    generator alone. See Note [Checkpointed random draws]."""
    prev = tls.rng_source
    tls.rng_source = DrawReplay(record)
    try:
        yield
    finally:
        tls.rng_source = prev


def manual_seed(seed: int) -> None:
    """Seed the generator behind rand, randn and dropout."""
    _seed(tls.rng_source, seed)


def get_rng_state() -> dict:
    """A snapshot of the generator, for :func:`set_rng_state`."""
    return _get_state(tls.rng_source)


def set_rng_state(state: dict) -> None:
    """Put the generator back to a state :func:`get_rng_state` returned."""
    _set_state(tls.rng_source, state)


def random_array(kind: str, shape: tuple, dtype: Any) -> numpy.ndarray:
    """Draw ``uniform`` / ``normal`` host samples of ``shape`` from the seeded generator (or,
    inside a checkpointed function, through its recorder or replay)."""
    source = tls.rng_source
    if source is not None:
        return source.draw(kind, shape, dtype)[1]
    with LOCKS.rng:
        return _draw(_rng, kind, shape, dtype)


def _random(kind: str, shape: tuple, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    dev = to_device(device)
    dt = to_dtype(dtype) or _DEFAULT_FLOAT
    return _finish(dev.asarray(random_array(kind, _shape(shape), dt)), dev, requires_grad)


def rand(*shape: Any, size: Any = None, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    """Uniform samples in [0, 1) from the generator seeded by :func:`manual_seed`; the shape is
    given as for :func:`zeros` (``rand(2, 3)``, ``rand((2, 3))``, ``rand(size=(2, 3))``)."""
    return _random("uniform", _shape_or_size("rand", shape, size), dtype, device, requires_grad)


def randn(*shape: Any, size: Any = None, dtype: Any = None, device: Any = None,
          requires_grad: bool = False) -> Tensor:
    """Standard normal samples from the generator seeded by :func:`manual_seed`; the shape is
    given as for :func:`zeros`."""
    return _random("normal", _shape_or_size("randn", shape, size), dtype, device, requires_grad)
