"""Helpers of the parallel cpu worker tests (test_cpu_workers.py, test_cpu_workers_combos.py):
probes that record the thread and the state a node runs with, a wide graph with a closed-form
gradient."""
from __future__ import annotations

import re
import threading

import numpy as np
from threadgrad import engine, ops

BARRIER_TIMEOUT = 10.0  # a barrier that times out raises BrokenBarrierError: a failure, not a hang
HELPER = re.compile(r"threadgrad-cpu-\d+$")


# --- helpers ------------------------------------------------------------------------------

def f64(values, requires_grad: bool = True, device=None) -> engine.Tensor:
    return engine.tensor(np.asarray(values, dtype=np.float64), dtype=np.float64, device=device,
                         requires_grad=requires_grad)


class Log:
    """A list appended to by many threads: (item, thread) pairs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list = []

    def add(self, item) -> None:
        with self.lock:
            self.items.append((item, threading.current_thread()))

    def tags(self) -> list:
        with self.lock:
            return [i for i, _ in self.items]

    def threads(self) -> set:
        with self.lock:
            return {t for _, t in self.items}


class Probe(engine.Function):
    """The identity; its backward records what the thread running it sees: (tag, gradient,
    grad mode, anomaly mode), after meeting the other probes at ``barrier`` if one is given."""

    @staticmethod
    def forward(ctx, x, log, tag, barrier=None):
        ctx.log, ctx.tag, ctx.barrier = log, tag, barrier
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if ctx.barrier is not None:
            ctx.barrier.wait(BARRIER_TIMEOUT)
        ctx.log.add((ctx.tag, g.tolist(), engine.is_grad_enabled(), engine.is_anomaly_enabled()))
        return g, None, None, None


class Boom(engine.Function):
    """The identity whose backward raises ``exc`` (when ``armed[0]``)."""

    @staticmethod
    def forward(ctx, x, exc, armed=(True,)):
        ctx.exc, ctx.armed = exc, armed
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if ctx.armed[0]:
            raise ctx.exc
        return g, None, None


class NaNGrad(engine.Function):
    """The identity whose backward returns NaN (for anomaly mode's check)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * float("nan")


class Nest(engine.Function):
    """The identity whose backward runs a nested backward ``n`` levels deep (via Nest)."""

    @staticmethod
    def forward(ctx, x, n):
        ctx.n = n
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if ctx.n > 0:
            leaf = f64([1.0])
            with engine.enable_grad():
                out = (Nest.apply(leaf, ctx.n - 1) * 3.0).sum()
            out.backward()
            assert leaf.grad.tolist() == [3.0]
        return g, None


def wide(x: engine.Tensor, n: int, ws: list | None = None, mid=None) -> engine.Tensor:
    """sum_i c_i * (x * w_i) over n branches split by one StackBackward (all ready at once);
    ``mid(i, t)`` may wrap each branch's tensor. c_i = i % 5 + 1."""
    parts = []
    for i in range(n):
        t = x * (ws[i] if ws is not None else float(i % 3 + 1))
        if mid is not None:
            t = mid(i, t)
        parts.append(t * float(i % 5 + 1))
    return ops.sum(ops.stack(parts))


def wide_expected(x_val: np.ndarray, n: int, w_vals: list | None = None) -> tuple:
    c = [float(i % 5 + 1) for i in range(n)]
    if w_vals is None:
        gx = sum(c[i] * (i % 3 + 1) for i in range(n)) * np.ones_like(x_val)
        return gx, None
    gx = sum(c[i] * w_vals[i] for i in range(n)) * np.ones_like(x_val)
    gws = [c[i] * x_val for i in range(n)]
    return gx, gws


def wide_grad_sq(n: int) -> float:
    """d/dx of wide(x, n, mid=t*t) is 2x times this."""
    return float(sum((i % 5 + 1) * (i % 3 + 1) ** 2 for i in range(n)))
