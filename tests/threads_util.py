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
