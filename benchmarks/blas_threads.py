"""BLAS threads with parallel cpu workers (issue 34; docs/performance.md, "BLAS threads with
cpu workers on"): four towers of three 256x256 ``tanh(h @ w)`` layers, batch 256, float64.

    python benchmarks/blas_threads.py WORKERS BLAS    # BLAS: "default" or a thread count

prints the median of 15 backward calls after 3 warm-ups. Run each setting in its own process
(BLAS's thread pool is process-wide), interleaving the settings over several rounds.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import threadgrad as tg


def main() -> None:
    workers, blas = int(sys.argv[1]), sys.argv[2]
    if blas != "default":
        from threadpoolctl import threadpool_limits
        threadpool_limits(int(blas), user_api="blas")
    rng = np.random.default_rng(0)
    towers = [[tg.tensor(rng.standard_normal((256, 256)) * 0.05, requires_grad=True) for _ in range(3)]
              for _ in range(4)]
    x = tg.tensor(rng.standard_normal((256, 256)))

    def step() -> None:
        loss = None
        for tower in towers:
            h = x
            for w in tower:
                h = tg.tanh(h @ w)
            loss = h.sum() if loss is None else loss + h.sum()
        loss.backward()

    tg.autograd.set_cpu_workers(workers)
    for _ in range(3):
        step()
    times = []
    for _ in range(15):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    print(f"workers={workers} blas={blas}: median {np.median(times) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
