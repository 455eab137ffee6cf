"""Data-parallel training step time at 1, 2 and 4 processes, and how much of the gradient
all-reduce DistributedDataParallel hides behind backward (issue 20).

    .venv/bin/python benchmarks/distributed.py            # n = 1, 2, 4 (about a minute)
    .venv/bin/python benchmarks/distributed.py --nproc 1,2 --reps 20

The driver launches ``mpiexec -n N`` (loopback only: ``-hosts localhost``) on this file with
``--worker``; every rank runs the same measurements and rank 0 prints one JSON line. Per N,
with a per-rank batch fixed (weak scaling, as PyTorch's published DDP numbers):

* ``fwd``: forward alone; ``bwd``: backward alone (inside ``no_sync()``: plain .grad);
* ``allreduce``: all-reducing DDP's buckets one after the other on the main thread, no backward;
* ``ddp bwd``: backward with DDP (hooks, bucket copies, overlapped all-reduce, averaging);
* ``hidden``: ``(bwd + allreduce - ddp bwd) / allreduce``, the fraction of the all-reduce that
  the overlap hid (1: all of it; 0: none; below 0: DDP costs more than its parts in series).

Medians of ``--reps`` steps after warm-up; the four measurements alternate step by step, so
they share the machine's load, and each lasts until every rank finished it (a barrier), so
that all of them include the wait for the slowest rank, as DDP's backward does.
Writes results/distributed.md. docs/distributed.md holds a run and the step-time model these numbers check.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402,F401 - makes `import threadgrad` load this checkout


def worker(args: argparse.Namespace) -> None:
    import numpy as np
    from threadgrad import engine, ops
    from threadgrad import distributed as dist

    dist.init_process_group("mpi", timeout=600)
    rank, world = dist.get_rank(), dist.get_world_size()
    comm = dist._default_group().comm
    sizes = [int(s) for s in args.layers.split(",")]
    engine.manual_seed(0)
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        params += [engine.randn(a, b, requires_grad=True) * (1.0 / a ** 0.5), engine.zeros(b, requires_grad=True)]
    params = [p.detach().requires_grad_() for p in params]
    rng = np.random.default_rng(rank)
    x = engine.tensor(rng.standard_normal((args.batch, sizes[0])).astype(np.float32))
    y = engine.tensor(rng.integers(0, sizes[-1], args.batch))

    def forward():
        h = x
        for i in range(0, len(params), 2):
            h = h @ params[i] + params[i + 1]
            if i + 2 < len(params):
                h = ops.relu(h)
        return ops.cross_entropy(h, y)

    def fwd_bwd():
        for p in params:
            p.grad = None
        forward().backward()

    if args.one_bucket:
        from threadgrad.distributed import ddp as ddp_module
        ddp_module.FIRST_BUCKET_BYTES = 1 << 40
        args.bucket_cap_mb = 1 << 20
    ddp = dist.DistributedDataParallel(params, bucket_cap_mb=args.bucket_cap_mb)
    from mpi4py import MPI
    bufs = [b.new_buffer() for b in ddp._buckets]

    def allreduce():
        for buf in bufs:
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

    def plain():
        with ddp.no_sync():  # the hooks return at once: a backward without DDP's work
            fwd_bwd()

    # The four measurements take turns, step by step, so that they share whatever load the
    # machine has (on a busy 2-core machine it changes from second to second).
    kinds = {"fwd": forward, "plain": plain, "ddp": fwd_bwd, "ar": allreduce}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for rep in range(args.reps + 3):
        for name, fn in kinds.items():
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            # until the slowest rank is done: a synchronous step lasts as long as its slowest
            # rank, and DDP's backward includes that wait (its last all-reduce needs every rank)
            comm.Barrier()
            if rep >= 3:  # warm-up
                times[name].append(time.perf_counter() - t0)
    t_fwd, t_plain, t_ddp, t_ar = (statistics.median(times[k]) for k in ("fwd", "plain", "ddp", "ar"))
    if rank == 0:
        bwd, ddp_bwd = t_plain - t_fwd, t_ddp - t_fwd
        print(json.dumps({
            "n": world, "fwd": t_fwd, "bwd": bwd, "step": t_plain, "ddp_step": t_ddp, "ddp_bwd": ddp_bwd,
            "allreduce": t_ar, "hidden": (bwd + t_ar - ddp_bwd) / t_ar if world > 1 else None,
            "buckets": [round(b.nbytes / 1e6, 3) for b in bufs],
            "params": int(sum(np.prod(p.shape) for p in params))}), flush=True)
    ddp.remove_hooks()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", default="1,2,4")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--batch", type=int, default=64, help="samples per rank")
    parser.add_argument("--layers", default="784,1024,1024,10")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0)
    parser.add_argument("--one-bucket", action="store_true",
                        help="every gradient in one bucket, reduced after backward: no overlap, for comparison")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    from threadgrad.distributed.run import find_mpiexec
    rows = []
    for n in [int(s) for s in args.nproc.split(",")]:
        cmd = [find_mpiexec(), "-n", str(n), "-hosts", "localhost", sys.executable, os.path.abspath(__file__),
               "--worker", "--reps", str(args.reps), "--batch", str(args.batch), "--layers", args.layers,
               "--bucket-cap-mb", str(args.bucket_cap_mb)] + (["--one-bucket"] if args.one_bucket else [])
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                             env=dict(os.environ, MPIEXEC_TIMEOUT="880", OMP_NUM_THREADS="1",
                                      OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1"))
        if out.returncode != 0:
            sys.exit(out.stderr)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"n={n} done", file=sys.stderr)
    ms = lambda s: f"{s * 1e3:.1f}"  # noqa: E731
    lines = [f"MLP {args.layers} ({rows[0]['params']:,} float32 parameters), {args.batch} samples per rank, "
             f"buckets {rows[0]['buckets']} MB, median of {args.reps} steps, {os.cpu_count()} cores",
             "", "| processes | fwd ms | bwd ms | step ms (no DDP) | DDP step ms | DDP bwd ms | all-reduce ms | hidden |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        hidden = "-" if r["hidden"] is None else f"{r['hidden']:.0%}"
        lines.append(f"| {r['n']} | {ms(r['fwd'])} | {ms(r['bwd'])} | {ms(r['step'])} | {ms(r['ddp_step'])} | "
                     f"{ms(r['ddp_bwd'])} | {ms(r['allreduce'])} | {hidden} |")
    text = "\n".join(lines)
    print(text)
    os.makedirs(_common.RESULTS_DIR, exist_ok=True)
    with open(os.path.join(_common.RESULTS_DIR, "distributed.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
