"""The engine timeline profiler: which thread ran which backward node, when, and for how long.

``with threadgrad.profiler.profile() as prof:`` records, for every backward node run while
the block is active: its name, the thread that ran it (the caller, a ``virtual:N`` /
``cuda:N`` device worker, a pool thread), the device of its gradients, the backward call it
belongs to (a number per call, and the call's reentrant depth), its start, its duration and
how long it waited in its ready queue; each backward call as a span; and every hand-off of
work between threads (a node queued by one thread and run by another, a call handed to the
pool) as an arrow. With ``record_forward=True`` it also times the forward ops.

Then ``prof.export_chrome_trace(path)`` writes a Trace Event JSON file for Perfetto or
chrome://tracing, ``prof.key_averages().table()`` prints the nodes that took the most time,
and ``prof.plot(path)`` draws the timeline to a PNG (needs matplotlib: the ``viz`` extra).

>>> import threadgrad as tg
>>> from threadgrad import engine, ops
>>> x = engine.ones(3, requires_grad=True)
>>> with tg.profiler.profile() as prof:
...     ops.tanh(x * 2).sum().backward()
>>> [e.name for e in prof.events() if e.kind == "node"]
['GraphRoot', 'SumBackward0', 'TanhBackward0', 'MulBackward0', 'AccumulateGrad']

Profiling costs nothing while no profile is active (the executor tests one global per
node: Note [Profiler hooks] in engine/executor.py); docs/profiler.md gives the cost when on.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from ..engine import executor as _executor
from . import _recorder
from ._recorder import CALL, NODE, OP, _ForwardTracer, _Recorder
from ._tables import KeyAverages, key_averages

__all__ = ["profile", "Event", "HandOff", "KeyAverages"]


class Event(NamedTuple):
    """One recorded span. ``kind``: ``"node"`` (a backward node run), ``"call"`` (a backward
    call, or a ``backward_async`` hand-off) or ``"op"`` (a forward op, with
    ``record_forward=True``). Times are microseconds from the start of the profile."""

    kind: str
    name: str
    thread: str            # the row's role: "caller (MainThread)", "virtual:1 worker", "pool 0"
    device: str | None     # the device of the node's gradients (of the op's output)
    task: int | None       # the backward call, numbered from 1 in the order calls started
    depth: int | None      # that call's reentrant depth (0: not reentrant)
    start_us: float
    duration_us: float
    wait_us: float | None  # time in the ready queue (None: run at once, never queued)
    sequence_nr: int | None


class HandOff(NamedTuple):
    """Work passed from one thread to another: ``kind`` is ``"device hand-off"`` (to or from
    a device worker), ``"pool hand-off"`` or ``"thread hand-off"``; times in microseconds."""

    kind: str
    src_thread: str
    src_us: float
    dst_thread: str
    dst_us: float


_KINDS = {NODE: "node", CALL: "call", OP: "op"}


class profile:
    """Record the engine's timeline while the block runs (torch.profiler.profile's shape).

    One profile at a time in a process: starting a second one while another is active raises
    RuntimeError. ``record_forward``: also time each op called outside backward, through a
    Python profile function (forward runs a few times slower while it records; see
    docs/profiler.md).
    """

    def __init__(self, *, record_forward: bool = False) -> None:
        self.record_forward = record_forward
        self._rec: _Recorder | None = None
        self._tracer: _ForwardTracer | None = None

    # -- start and stop ---------------------------------------------------------------
    def start(self) -> None:
        if self._rec is not None:
            raise RuntimeError("this profile was already started; make a new profile() to record again")
        if _executor._profiler is not None:
            raise RuntimeError("a threadgrad profiler is already active; profiles cannot be nested or run "
                               "side by side")
        rec = _Recorder()
        if self.record_forward:
            self._tracer = _ForwardTracer(rec)
        self._rec = rec
        _executor.set_profiler(rec)
        if self._tracer is not None:
            self._tracer.start()

    def stop(self) -> None:
        rec = self._rec
        if rec is None or rec.stop is not None:
            return
        if self._tracer is not None:
            self._tracer.stop()
        rec.stop = _recorder._now()
        if _executor._profiler is rec:
            _executor.set_profiler(None)
        rec._queued.clear()

    def __enter__(self) -> "profile":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- results ----------------------------------------------------------------------
    def _recorded(self) -> _Recorder:
        rec = self._rec
        if rec is None:
            raise RuntimeError("this profile has not run: use it as `with profiler.profile() as prof:`")
        return rec

    def events(self) -> list[Event]:
        """Every recorded span, ordered by start time."""
        rec = self._recorded()
        us = _to_us(rec.start)
        out = []
        for kind, row, name, t0, t1, task, depth, device, queued, seq in sorted(rec.events, key=_by_start):
            wait = None if queued is None else (t0 - queued[1]) / 1000.0
            out.append(Event(_KINDS[kind], name, row.role, None if device is None else str(device), task, depth,
                             us(t0), (t1 - t0) / 1000.0, wait, seq))
        return out

    def handoffs(self) -> list[HandOff]:
        """Every hand-off between threads, ordered by the time the work was handed over."""
        rec = self._recorded()
        us = _to_us(rec.start)
        return [HandOff(kind, src.role, us(ts), dst.role, us(td))
                for kind, src, ts, dst, td, _ in sorted(rec.flows, key=lambda f: f[2])]

    def threads(self) -> list[str]:
        """The rows of the timeline, in display order: callers, device workers, pool threads."""
        return [r.role for r in sorted(self._recorded().rows, key=lambda r: r.sort_key())]

    def key_averages(self) -> KeyAverages:
        """Per node name (and op name): calls, total and self time, average, max, queue wait."""
        return key_averages(self.events())

    def export_chrome_trace(self, path: str) -> None:
        """Write the timeline as Trace Event JSON (Perfetto, chrome://tracing)."""
        from ._chrome import write_trace

        write_trace(self._recorded(), path)

    def plot(self, path: str, title: str | None = None) -> None:
        """Draw the timeline to an image file (PNG by its extension): one lane per thread,
        nodes coloured by device, hand-offs as arrows. Needs matplotlib (``threadgrad[viz]``)."""
        from ._plot import plot_timeline

        plot_timeline(self, path, title)


def _by_start(e: tuple) -> tuple:
    return (e[3], -e[4])  # by start; an enclosing span before what it encloses


def _to_us(start: int) -> Any:
    return lambda t: (t - start) / 1000.0
