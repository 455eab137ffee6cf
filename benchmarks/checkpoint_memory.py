"""Does checkpointing save memory? One training step of a deep MLP, with and without it.

Usage: python benchmarks/checkpoint_memory.py [--layers 32] [--width 1024] [--batch 256] [--segments 0]

Reports, for a plain step and for ``checkpoint_sequential`` (both variants), the memory the
graph holds for backward at the end of forward (the activations), the peak over the whole
step, both traced by tracemalloc above the step's starting point (numpy reports its buffers
to tracemalloc), and the step time (measured separately, without tracemalloc). Parameters and their ``.grad`` buffers exist before the
measured step (one warm-up step allocates the grads; later steps accumulate in place), so
the peak above baseline is the activation memory plus transient gradient buffers.
Targets (issue 4): checkpointed peak <= 1/3 of the plain peak, time <= 1.5x.
"""
from __future__ import annotations

import argparse
import gc
import math
import time
import tracemalloc

import numpy as np

from threadgrad import engine, ops


def build(layers: int, width: int, batch: int):
    engine.manual_seed(0)
    ws = [(engine.randn(width, width) * (1.0 / math.sqrt(width))).requires_grad_() for _ in range(layers)]
    # The input requires grad: the reentrant variant (like PyTorch's) records nothing otherwise.
    x = engine.randn(batch, width, requires_grad=True)
    fns = [(lambda w: (lambda h: ops.tanh(h @ w)))(w) for w in ws]
    return ws, x, fns


def forward(mode: str, fns, x, segments: int):
    """The model's output, plainly or through ``checkpoint_sequential`` (either variant)."""
    if mode == "plain":
        h = x
        for f in fns:
            h = f(h)
        return h
    return engine.checkpoint_sequential(fns, segments, x, use_reentrant=(mode == "reentrant"))


def step(mode: str, fns, x, segments: int) -> None:
    forward(mode, fns, x, segments).mean().backward()


def measure(mode: str, fns, ws, x, segments: int, repeats: int) -> tuple[float, float, float]:
    step(mode, fns, x, segments)  # warm-up: allocates every .grad
    times = []
    for _ in range(repeats):  # timed without tracemalloc, which slows every allocation
        gc.collect()
        t0 = time.perf_counter()
        step(mode, fns, x, segments)
        times.append(time.perf_counter() - t0)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    h = forward(mode, fns, x, segments)
    held = tracemalloc.get_traced_memory()[0] - base  # what the graph keeps for backward
    h.mean().backward()
    del h
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return held / 2**20, peak / 2**20, float(np.median(times))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--segments", type=int, default=8, help="0: sqrt(layers); 8 minimises memory for 32 layers")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    segments = a.segments or max(1, round(math.sqrt(a.layers)))
    ws, x, fns = build(a.layers, a.width, a.batch)
    print(f"MLP {a.layers} layers x {a.width} wide, batch {a.batch}, float32; checkpoint_sequential with {segments} segments")
    print()
    print("| run | activations held after forward (MiB) | ratio | peak during the step (MiB) | ratio | step time (s) | ratio |")
    print("|---|---|---|---|---|---|---|")
    p_held, p_peak, p_t = measure("plain", fns, ws, x, segments, a.repeats)
    print(f"| plain | {p_held:.1f} | 1.00 | {p_peak:.1f} | 1.00 | {p_t:.3f} | 1.00 |")
    for mode in ("reentrant", "non-reentrant"):
        held, peak, t = measure(mode, fns, ws, x, segments, a.repeats)
        print(f"| checkpoint ({mode}) | {held:.1f} | {held / p_held:.2f} | {peak:.1f} | {peak / p_peak:.2f} | {t:.3f} | {t / p_t:.2f} |")


if __name__ == "__main__":
    main()
