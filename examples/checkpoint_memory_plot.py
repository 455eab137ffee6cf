"""How much memory activation checkpointing saves, by network depth, as a plot.

Run: python examples/checkpoint_memory_plot.py [--out DIR] [--quick]
(matplotlib for the plot: ``pip install -e '.[examples]'``; ``--quick`` or
THREADGRAD_EXAMPLES_QUICK=1: small layers and depths, for CI.)

For each depth, one training step (forward and backward) of a deep tanh MLP, plainly and with
``engine.checkpoint_sequential`` (about sqrt(depth) segments, the non-reentrant variant). The
peak memory of the step above its starting point is traced with tracemalloc (numpy reports its
buffers to it): without checkpointing the graph keeps every layer's activation until backward,
so the peak grows with depth; with it, only the segment boundaries are kept and each segment's
activations are recomputed during backward, so the peak grows about as sqrt(depth). Writes
``checkpoint_memory.png`` and prints the table.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import pathlib
import tracemalloc

from threadgrad import engine, ops


def peak_bytes(depth: int, width: int, batch: int, checkpointed: bool) -> int:
    """Peak traced memory of one forward+backward step above its start, in bytes."""
    engine.manual_seed(0)
    ws = [(engine.randn(width, width) * (1.0 / math.sqrt(width))).requires_grad_() for _ in range(depth)]
    x = engine.randn(batch, width, requires_grad=True)
    layers = [(lambda w: (lambda h: ops.tanh(h @ w)))(w) for w in ws]

    def step() -> None:
        if checkpointed:
            out = engine.checkpoint_sequential(layers, max(1, round(math.sqrt(depth))), x, use_reentrant=False)
        else:
            out = x
            for f in layers:
                out = f(out)
        out.sum().backward()

    step()  # allocates every .grad: later steps accumulate in place, so the peak is activations
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    step()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


def main(out_dir: str | os.PathLike = ".", quick: bool = False, verbose: bool = True) -> dict:
    depths = [4, 8, 16] if quick else [4, 8, 16, 32, 64]
    width, batch = (64, 32) if quick else (256, 128)
    rows = {"depth": depths, "plain": [], "checkpointed": []}
    for d in depths:
        rows["plain"].append(peak_bytes(d, width, batch, False))
        rows["checkpointed"].append(peak_bytes(d, width, batch, True))
        if verbose:
            print(f"depth {d:3d}: peak {rows['plain'][-1] / 2**20:7.2f} MiB plain, "
                  f"{rows['checkpointed'][-1] / 2**20:7.2f} MiB checkpointed")
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return rows
    fig = Figure(figsize=(6.5, 4), dpi=100)
    ax = fig.add_subplot()
    for key, marker in (("plain", "o"), ("checkpointed", "s")):
        ax.plot(depths, [b / 2**20 for b in rows[key]], marker=marker, label=key)
    ax.set(xlabel="layers", ylabel="peak memory of a step (MiB)", ylim=(0, None),
           title=f"activation checkpointing: tanh MLP, width {width}, batch {batch}")
    ax.set_xticks(depths)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "checkpoint_memory.png")
    if verbose:
        print(f"wrote {out / 'checkpoint_memory.png'}")
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    main(a.out, quick=a.quick or os.environ.get("THREADGRAD_EXAMPLES_QUICK") == "1")
