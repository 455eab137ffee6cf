"""Where the host time of a GPU backward goes: threadgrad's own Python against cupy's launch path.

Usage::

    python benchmarks/gpu_profile.py [--chain 2000] [--top 25]

Needs cupy and a GPU (exits with status 2 otherwise). Three parts:

1. **Launch costs**: µs per call of a cupy ufunc (``a * b``), a cupy ElementwiseKernel (the fused
   tanh backward), a cupy reduction, and (when torch sees the GPU) a torch op, on 16-element
   arrays, timed over many calls with one synchronize at the end: the floor a formula's
   launches put under a backward node.
2. **Profile of the chain's backward** (benchmarks/gpu.py's chain: tanh and mul alternating)
   under cProfile, its own time grouped by where the code lives: threadgrad's engine, its ops,
   its devices layer, cupy, and the rest (threading, builtins). cProfile's own overhead inflates
   every Python call about alike, so read the shares, not the totals.
3. **No synchronization on the hot path**: the chain's backward is timed with CUDA events on
   the stream; when the host returns from ``backward()`` well before the events say the GPU
   finished, the host did not wait for the GPU. It also counts the calls to cupy's
   synchronize functions in the profile (0 expected).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

import numpy

import _common  # noqa: F401 - imports threadgrad from this tree; must come first
from threadgrad import devices, engine, ops


def launch_costs(cp, n: int = 20000) -> dict[str, float]:
    a = cp.asarray(numpy.random.default_rng(0).uniform(-1, 1, 16))
    b = cp.asarray(numpy.random.default_rng(1).uniform(-1, 1, 16))
    k = getattr(devices.get("cuda"), "kernels", None)
    cases = [("cupy ufunc a*b", lambda: a * b), ("cupy 3 ufuncs g - g*y*y", lambda: a - a * b * b),
             ("cupy a.sum()", lambda: a.sum())]
    if k is not None and k.fused:
        cases.append(("fused ElementwiseKernel tanh_grad", lambda: k.tanh_grad(a, b)))
    out = {}
    for name, fn in cases:
        for _ in range(200):
            fn()
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        cp.cuda.Device().synchronize()
        out[name] = (time.perf_counter() - t0) / n * 1e6
    try:
        import torch
    except ImportError:
        return out
    if torch.cuda.is_available():
        ta = torch.tensor(a.get(), device="cuda")
        tb = torch.tensor(b.get(), device="cuda")
        for name, fn in [("torch a*b", lambda: ta * tb),
                         ("torch tanh_backward", lambda: torch.ops.aten.tanh_backward(ta, tb))]:
            for _ in range(200):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            out[name] = (time.perf_counter() - t0) / n * 1e6
    return out


# The tree threadgrad was imported from (this checkout, or THREADGRAD_TREE: see _common.py).
_TREE = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["threadgrad"].__file__))).replace(os.sep, "/")


def where(filename: str) -> str:
    f = filename.replace(os.sep, "/")
    if "cupy" in f:
        return "cupy"
    for part in ("engine", "ops", "devices", "threadgrad"):
        if f.startswith(f"{_TREE}/{part}/"):
            return f"threadgrad {part}"
    if f.startswith("<built-in") or f == "~":
        return "builtins (incl. cupy's compiled code called from Python)"
    return "other (threading, stdlib)"


def chain_graph(cuda, n: int):
    rng = numpy.random.default_rng(2)
    c = engine.tensor(rng.uniform(0.9, 1.1, 16), device=cuda)
    x = engine.tensor(rng.uniform(-1.0, 1.0, 16), device=cuda, requires_grad=True)
    h = x
    for i in range(n):
        h = ops.tanh(h) if i % 2 == 0 else h * c
    return h.sum()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chain", type=int, default=2000)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    try:
        cuda = devices.get("cuda")
    except RuntimeError as e:
        print(f"benchmarks/gpu_profile.py needs cupy and a GPU; not running: {e}", file=sys.stderr)
        return 2
    import cupy as cp

    print("## Launch cost, µs per call (16 elements, host loop, one sync at the end)")
    for name, us in launch_costs(cp).items():
        print(f"  {name:40s} {us:7.2f}")

    for _ in range(2):  # warm-up: kernels compiled, worker started
        chain_graph(cuda, args.chain).backward()
    cuda.synchronize()
    y = chain_graph(cuda, args.chain)
    cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    y.backward()
    cuda.synchronize()
    prof.disable()
    stats = pstats.Stats(prof)
    groups: dict[str, float] = {}
    syncs: dict[str, int] = {}
    for (filename, _line, func), (_cc, nc, tt, _ct, _callers) in stats.stats.items():
        key = where(filename)
        groups[key] = groups.get(key, 0.0) + tt
        if "synchronize" in func or func in ("get", "item", "tolist", "__bool__", "__int__", "__float__"):
            syncs[func] = syncs.get(func, 0) + nc
    total = sum(groups.values())
    n_nodes = args.chain + 2
    print(f"\n## cProfile of one chain backward ({n_nodes} nodes): own time by place "
          f"(total {total * 1e3:.1f} ms under the profiler, {total / n_nodes * 1e6:.1f} µs/node)")
    for key, tt in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {key:58s} {tt * 1e3:8.1f} ms  {100 * tt / total:5.1f}%")
    print(f"  calls that may wait for the GPU (synchronize, get, item, bool/int/float of an array): {syncs} "
          "(one synchronize expected: the profile's own, after backward)")
    print(f"\n## Top {args.top} functions by own time")
    stats.sort_stats("tottime").print_stats(args.top)

    # Host time vs GPU time of the same backward, with events on the current stream.
    y = chain_graph(cuda, args.chain)
    cuda.synchronize()
    stream = cp.cuda.get_current_stream()
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    t0 = time.perf_counter()
    e0.record(stream)
    y.backward()
    t_host = time.perf_counter() - t0
    e1.record(stream)
    e1.synchronize()
    t_gpu = cp.cuda.get_elapsed_time(e0, e1) * 1e-3
    print(f"## backward(): host returned after {t_host * 1e3:.2f} ms; CUDA events on the stream around it: "
          f"{t_gpu * 1e3:.2f} ms")
    mlp_profile(args.top)
    engine.get_engine().shutdown()
    return 0


def mlp_profile(top: int) -> None:
    """The MLP step of benchmarks/gpu.py: host time against GPU time, and where the host time goes."""
    import cupy as cp
    from cupyx.profiler import benchmark

    import gpu

    rng = numpy.random.default_rng(1)
    xa = rng.standard_normal((512, 256)).astype(numpy.float32)
    ya = rng.integers(0, 10, size=512)
    ours = gpu.Ours("cuda")
    params = [ours.tensor(p, requires_grad=True) for p in gpu.mlp_params(1024, 4, 256, 10)]
    x, y = ours.tensor(xa), ours.tensor(ya)
    opt = ours.optimizer(params, 0.01)
    res = benchmark(lambda: ours.mlp_step(params, x, y, opt), n_repeat=30, n_warmup=5)
    cpu_ms, gpu_ms = numpy.median(res.cpu_times) * 1e3, numpy.median(res.gpu_times[0]) * 1e3
    print(f"\n## MLP step (batch 512, width 1024): cupyx.profiler.benchmark medians: host {cpu_ms:.2f} ms, "
          f"GPU (events) {gpu_ms:.2f} ms")
    try:
        import torch

        tb = gpu.Torch(torch, "cuda")
        tparams = [tb.tensor(p, requires_grad=True) for p in gpu.mlp_params(1024, 4, 256, 10)]
        tx, ty, topt = tb.tensor(xa), tb.tensor(ya), tb.optimizer(tparams, 0.01)
        res = benchmark(lambda: tb.mlp_step(tparams, tx, ty, topt), n_repeat=30, n_warmup=5)
        print(f"   torch: host {numpy.median(res.cpu_times) * 1e3:.2f} ms, "
              f"GPU (events) {numpy.median(res.gpu_times[0]) * 1e3:.2f} ms")
    except ImportError:
        pass
    cp.cuda.Device().synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(10):
        ours.mlp_step(params, x, y, opt)
    cp.cuda.Device().synchronize()
    prof.disable()
    stats = pstats.Stats(prof)
    print(f"## cProfile of 10 MLP steps: top {top} by own time, then by cumulative time")
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


if __name__ == "__main__":
    sys.exit(main())
