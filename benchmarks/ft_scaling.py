"""What the interpreter allows two threads doing tiny things at once (issue 21; no engine).

Usage::

    python benchmarks/ft_scaling.py          # on any interpreter; run it on a free-threaded one

For each kind of work, two threads each run the same loop (of their own objects, then of one
shared object), and the time is compared with one thread running the loop once: 1.0 means the
threads ran fully in parallel, 2.0 that they took turns. With the GIL every row is about 2.0.
On free-threaded CPython 3.13 some rows stay near 2.0 even on idle cores: they show where the
interpreter or numpy, not threadgrad, bounds a backward of tiny nodes (docs/performance.md,
"What 3.13t allows for tiny ops"). Prints a table; writes nothing.
"""
from __future__ import annotations

import statistics
import sys
import threading
import time
from typing import Any, Callable

import numpy

N = 200_000  # iterations per thread


class _Obj:
    __slots__ = ("a",)

    def __init__(self) -> None:
        self.a = numpy.ones(16)

    def meth(self) -> None:
        return None


def _func() -> None:
    return None


_local = threading.local()


def _call_function(o: _Obj, n: int) -> None:
    for _ in range(n):
        _func()


def _make_instance(o: _Obj, n: int) -> None:
    for _ in range(n):
        _Obj.__new__(_Obj)


def _call_method(o: _Obj, n: int) -> None:
    for _ in range(n):
        o.meth()


def _numpy_mul(o: _Obj, n: int) -> None:
    a, b = o.a, numpy.ones(16)
    for _ in range(n // 4):
        a * b


def _local_read(o: _Obj, n: int) -> None:
    _local.x = 1
    for _ in range(n):
        _local.x


WORK: list[tuple[str, Callable[[_Obj, int], None]]] = [
    ("call a module-level function", _call_function),
    ("make an instance of one class", _make_instance),
    ("call a method", _call_method),
    ("`a * b` on 16-element float64 arrays", _numpy_mul),
    ("read an attribute of a `threading.local`", _local_read),
]


def _run(fn: Callable[[_Obj, int], None], objs: list[_Obj]) -> float:
    threads = [threading.Thread(target=fn, args=(o, N)) for o in objs]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def measure(repeats: int = 5) -> list[tuple[str, float, float]]:
    """Per kind of work: (name, own objects, one shared object), medians of ``repeats``."""
    rows = []
    for name, fn in WORK:
        own, shared = [], []
        for _ in range(repeats):
            one = _run(fn, [_Obj()])
            own.append(_run(fn, [_Obj(), _Obj()]) / one)
            s = _Obj()
            shared.append(_run(fn, [s, s]) / one)
        rows.append((name, statistics.median(own), statistics.median(shared)))
    return rows


def main() -> int:
    gil: Any = getattr(sys, "_is_gil_enabled", lambda: True)()
    print(f"Python {sys.version.split()[0]} ({'GIL' if gil else 'free-threaded'}), numpy {numpy.__version__}: "
          "two threads' time / one thread's (1.0 = parallel, 2.0 = taking turns)\n")
    print("| work per iteration | own objects | one shared object |")
    print("|---|---|---|")
    for name, own, shared in measure():
        print(f"| {name} | {own:.2f} | {shared:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
