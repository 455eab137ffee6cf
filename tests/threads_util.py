"""One helper for tests that run work on several threads at once."""
from __future__ import annotations

import threading
from typing import Any, Callable


def run_threads(n: int, fn: Callable[[int], Any], timeout: float = 120.0, name: str = "test-thread") -> list:
    """Run ``fn(i)`` on ``n`` threads released together by a barrier; fail on a hang;
    re-raise the first exception any thread raised; return the results by index."""
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors: list[BaseException] = []
    lock = threading.Lock()

    def body(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=body, args=(i,), name=f"{name}-{i}", daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    alive = [t.name for t in threads if t.is_alive()]
    assert not alive, f"threads still running after {timeout}s (hang): {alive}"
    if errors:
        raise errors[0]
    return results


def cpu_helpers() -> list[threading.Thread]:
    """The live ``set_cpu_workers`` helper threads."""
    from threadgrad import engine
    return [t for t in engine.get_engine().worker_threads() if t.name.startswith("threadgrad-cpu-")]


def retire_cpu_helpers(timeout: float = 10.0) -> None:
    """``set_cpu_workers(0)`` and wait for the helpers to retire (else stop the engine's threads)."""
    from threadgrad import engine
    engine.set_cpu_workers(0)
    for t in cpu_helpers():
        t.join(timeout)
    if cpu_helpers():  # test_lowering_n_to_zero_retires_the_helpers says why this is a failure
        engine.get_engine().shutdown()
