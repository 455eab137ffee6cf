"""The engine's threads at work: the timeline of a backward pass that crosses devices.

Run: python examples/profile_timeline.py [--out DIR] [--quick]
(``--quick``, or THREADGRAD_EXAMPLES_QUICK=1: smaller layers, for CI; needs matplotlib for the
PNG: ``pip install -e '.[examples]'``.)

A two-branch network: one branch on the cpu, the other on the ``virtual:1`` device (numpy
arrays, but served by a worker thread of its own, exactly as a GPU's would be). Backward of
their summed loss starts on the calling thread; the gradient that enters the ``virtual:1``
branch is handed to that device's worker, which runs the branch's nodes while the caller runs
the cpu branch's, and the worker hands the gradients for the cpu-side weights back. The
profiler records it all; the script writes

* ``timeline.json``: Trace Event JSON, to open in https://ui.perfetto.dev or chrome://tracing;
* ``timeline.png``: the same timeline drawn by ``prof.plot``: one lane per thread, nodes
  coloured by device, hand-offs as arrows;

and prints the profiler's table of the nodes that took the most time.
"""
from __future__ import annotations

import argparse
import os
import pathlib

import threadgrad as tg
from threadgrad import engine, ops


def build(quick: bool, seed: int = 0) -> tuple[dict, engine.Tensor]:
    """Parameters and a batch: (params, x). Layer widths are smaller with ``quick``."""
    engine.manual_seed(seed)
    n, d, h = (64, 64, 128) if quick else (512, 512, 1024)
    vdev = "virtual:1"
    params = {
        "cpu.W1": engine.randn(h, d, requires_grad=True),
        "cpu.W2": engine.randn(1, h, requires_grad=True),
        # The virtual:1 branch's weights live on cpu and are moved each step, so their
        # gradients come back across the device boundary (hand-offs in both directions).
        "virtual.W1": engine.randn(h, d, requires_grad=True),
        "virtual.W2": engine.randn(1, h, requires_grad=True),
    }
    with engine.no_grad():
        for p in params.values():
            p.mul_(0.05)
    x = engine.randn(n, d)
    return params, (x, vdev)


def loss_fn(params: dict, batch: tuple) -> engine.Tensor:
    x, vdev = batch
    cpu_branch = ops.linear(ops.tanh(ops.linear(x, params["cpu.W1"])), params["cpu.W2"])
    xv = ops.to(x, vdev)
    v_hidden = ops.tanh(ops.linear(xv, ops.to(params["virtual.W1"], vdev)))
    v_branch = ops.to(ops.linear(v_hidden, ops.to(params["virtual.W2"], vdev)), "cpu")
    return ops.mean((cpu_branch + v_branch) ** 2)


def main(out_dir: str | os.PathLike = ".", quick: bool = False, steps: int = 2, verbose: bool = True) -> tg.profiler.profile:
    """Profile ``steps`` forward+backward passes; write timeline.json and timeline.png (when
    matplotlib is installed) into ``out_dir``; return the profile."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    params, batch = build(quick)
    loss_fn(params, batch).backward()  # warm-up: starts the virtual:1 worker outside the profile
    with tg.profiler.profile(record_forward=True) as prof:
        for _ in range(steps):
            loss = loss_fn(params, batch)
            loss.backward()
    prof.export_chrome_trace(str(out / "timeline.json"))
    try:
        prof.plot(str(out / "timeline.png"),
                  title=f"backward across cpu and virtual:1 ({steps} steps): the caller and the device worker")
    except ImportError:
        if verbose:
            print("matplotlib is not installed: no timeline.png (pip install -e '.[examples]')")
    if verbose:
        print(prof.key_averages().table(row_limit=12))
        print(f"threads: {', '.join(prof.threads())}")
        kinds = [h.kind for h in prof.handoffs()]
        print(f"hand-offs: {len(kinds)} ({', '.join(sorted(set(kinds)))})")
        print(f"wrote {out / 'timeline.json'} and {out / 'timeline.png'}")
    return prof


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".", help="folder for timeline.json and timeline.png")
    ap.add_argument("--quick", action="store_true", help="small layers (CI); also THREADGRAD_EXAMPLES_QUICK=1")
    ap.add_argument("--steps", type=int, default=2)
    args = ap.parse_args()
    main(args.out, quick=args.quick or os.environ.get("THREADGRAD_EXAMPLES_QUICK") == "1", steps=args.steps)
