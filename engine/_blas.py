"""BLAS threads while parallel cpu workers are on (``set_cpu_workers``).

Note [BLAS threads and cpu workers]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
numpy's BLAS (OpenBLAS in its wheels) runs each matrix product on a pool of its own threads,
one per core by default. With ``n`` cpu helpers beside the caller, up to ``n + 1`` threads call
BLAS at once, each asking for every core: the cores are oversubscribed and OpenBLAS's threads
spin against each other. On 2 cores, a backward of four towers of 256x256 matmuls ran 1.4-2x
slower with ``set_cpu_workers(2)`` than without (docs/performance.md, issue 34). OpenBLAS's
thread count is one process-wide setting (not per thread), so while helpers are on, BLAS gets
``cores // (n + 1)`` threads (at least 1, and never more than it had): the engine's threads
share the cores, each product on few. ``set_cpu_workers(0)`` puts back what BLAS had before. The setting goes through
threadpoolctl (the well-kept library that finds the BLAS numpy loaded and calls its own
setter), when it is installed; without it nothing changes (docs/autograd.md says how to set
``OPENBLAS_NUM_THREADS`` instead). While helpers are on the limit applies to the program's
own numpy products too, as any BLAS setting does.
"""
from __future__ import annotations

import os
from typing import Any

_limiter: Any = None  # threadpoolctl's limiter while helpers are on; None otherwise (Engine._lock held)
_threads: int = 0  # the BLAS threads it set


def blas_threads_for(n: int) -> int:
    """The BLAS threads for ``n`` cpu helpers (0: no limit)."""
    if n <= 0:
        return 0
    return max(1, (os.cpu_count() or 1) // (n + 1))


def limit_for_workers(n: int) -> None:
    """Limit BLAS to :func:`blas_threads_for` ``(n)`` threads, or restore it for ``n == 0``.
    The caller holds the engine's lock (one change at a time). See Note [BLAS threads and cpu
    workers]."""
    global _limiter, _threads
    want = blas_threads_for(n)
    if want == _threads:
        return
    if _limiter is not None:
        _limiter.restore_original_limits()
        _limiter, _threads = None, 0
    if not want:
        return
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        return
    have = [i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"]
    if have and max(have) > want:  # never more threads than the program chose (OPENBLAS_NUM_THREADS=1)
        _limiter = threadpool_limits(limits=want, user_api="blas")
    _threads = want
