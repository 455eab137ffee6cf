"""Locks across fork: a child forked while another thread holds a process-wide lock of the
engine or the ops finds it free (Note [Locks across fork] in engine/_locks.py).

* For each lock of ``LOCKS``: a thread holds it, the process forks, and the child runs the
  work that needs it (a retain_grad backward, a view, a leaf's first accumulation, a hook, a
  random draw, a checkpoint re-run), with exact values, within a timeout.
* Every lock reachable from the globals of the engine's and the ops' modules (directly, or
  two attributes deep into the engine's own objects) is held at once while forking; the child
  must find every one free. A lock added later anywhere there is checked without a new test.
* No module of engine/ or ops/ keeps a lock in a global of its own: a copy bound there would
  stay held in a child.
"""
from __future__ import annotations

import importlib
import json
import os
import pkgutil
import sys
import threading
import types
from typing import Any, Callable

import numpy as np
import pytest

from threadgrad import engine, ops
from threadgrad.engine._locks import LOCKS, ProcessLocks
from threadgrad.engine.creation import get_rng_state, set_rng_state
from fork_util import run_in_fork

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()), threading.Condition, threading.Semaphore)


def f64(values: Any) -> engine.Tensor:
    return engine.tensor(np.asarray(values, dtype=np.float64), requires_grad=True)


class _Holder:
    """A thread that holds ``locks`` from ``__enter__`` until ``__exit__``."""

    def __init__(self, locks: list) -> None:
        self.locks = locks
        self.held = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for lock in self.locks:
            lock.acquire()
        self.held.set()
        self.release.wait(60)
        for lock in reversed(self.locks):
            lock.release()

    def __enter__(self) -> "_Holder":
        self.thread.start()
        assert self.held.wait(10), "could not take the locks (held by a leftover thread?)"
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


# --- each lock, with the work that needs it -----------------------------------------------------

def _retain_grad_backward() -> bool:
    x = f64([1.0, 2.0])
    y = ops.mul(x, 3.0)
    y.retain_grad()
    ops.sum(ops.mul(y, 2.0)).backward()
    return y.grad.tolist() == [2.0, 2.0] and x.grad.tolist() == [6.0, 6.0]


def _view_backward() -> bool:
    x = f64([1.0, 2.0, 3.0, 4.0])
    a, b = ops.split(x, 2)  # views of x: the first marks x's version counter's root
    ops.sum(ops.mul(b, 2.0)).backward()
    return x.grad.tolist() == [0.0, 0.0, 2.0, 2.0] and b.version == x.version == 0


def _first_accumulation() -> bool:
    x = f64([1.0, 2.0])  # a fresh leaf: its AccumulateGrad is made by this backward
    ops.sum(ops.mul(x, 2.0)).backward()
    return x.grad.tolist() == [2.0, 2.0]


def _hook_backward() -> bool:
    x = f64([1.0, 2.0])
    y = ops.mul(x, 3.0)
    seen: list = []
    y.register_hook(lambda g: seen.append(g.tolist()))
    x.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
    ops.sum(y).backward()
    return seen == [[1.0, 1.0], [3.0, 3.0]]


def _random_draw(expected: list) -> bool:
    engine.manual_seed(5)
    return engine.randn(3).tolist() == expected


def _expected_draw() -> list:
    state = get_rng_state()
    engine.manual_seed(5)
    expected = engine.randn(3).tolist()
    set_rng_state(state)
    return expected


CHILD_WORK: dict[str, Callable[[], Callable[[], bool]]] = {
    # lock name in LOCKS -> (in the parent, before the fork) the child's work
    "nonleaf_grad": lambda: _retain_grad_backward,
    "view": lambda: _view_backward,
    "acc": lambda: _first_accumulation,
    "hooks": lambda: _hook_backward,
    "rng": lambda: (lambda expected: lambda: _random_draw(expected))(_expected_draw()),
}


def test_every_process_lock_has_a_fork_test():
    assert set(CHILD_WORK) == set(ProcessLocks.__slots__)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(CHILD_WORK))
def test_child_forked_while_a_thread_holds_the_lock_runs_the_work_that_needs_it(name):
    work = CHILD_WORK[name]()
    assert work()  # the work is right in the parent
    with _Holder([getattr(LOCKS, name)]):
        code = run_in_fork(lambda: 0 if work() else 1, timeout=10)
    assert code == 0, f"child's {work.__name__} gave wrong values (exit {code})"


# --- every lock reachable from the modules -------------------------------------------------------

def _modules() -> list[types.ModuleType]:
    found = []
    for pkg in (engine, ops):
        found.append(pkg)
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            found.append(importlib.import_module(info.name))
    return found


def _ours(v: Any) -> bool:
    """An instance of a threadgrad class (not a class, function or module)."""
    return (type(v).__module__.startswith("threadgrad.")
            and not isinstance(v, (type, types.ModuleType, types.FunctionType, types.MethodType)))


def _attributes(obj: Any) -> dict:
    out = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
    for cls in type(obj).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                out[slot] = getattr(obj, slot)
    return out


def _reachable_locks(depth: int = 2) -> dict[tuple, Any]:
    """``{path: lock}``, a path being (module name, attribute, ...): every lock that is a module
    global of engine/ or ops/, or up to ``depth`` attributes into a threadgrad object held by
    one (the engine's executor, the LOCKS registry, this thread's ready queue ...). Each lock
    once, under its first path."""
    found: dict[tuple, Any] = {}
    seen: set = set()

    def visit(path: tuple, v: Any, left: int) -> None:
        if isinstance(v, LOCK_TYPES):
            inner = v._lock if isinstance(v, threading.Condition) else v  # a Condition shares its lock
            if id(inner) not in seen:
                seen.add(id(inner))
                found[path] = v
        elif left and _ours(v):
            for name, w in _attributes(v).items():
                visit(path + (name,), w, left - 1)

    for mod in _modules():
        for name, v in list(vars(mod).items()):
            visit((mod.__name__, name), v, depth)
    return found


def _resolve(path: tuple) -> Any:
    obj: Any = sys.modules[path[0]]
    for name in path[1:]:
        obj = getattr(obj, name, None)
    return obj


def test_no_module_keeps_a_lock_of_its_own():
    """Each process-wide lock is a slot of ProcessLocks, read at use: a module-level lock (or a
    copy bound by ``from ... import``) would stay held in a forked child."""
    bare = [f"{mod.__name__}.{name}" for mod in _modules() for name, v in vars(mod).items()
            if isinstance(v, LOCK_TYPES)]
    assert not bare, f"module-level locks: {bare}; make each a slot of engine/_locks.py's ProcessLocks"


@pytest.mark.timeout(60)
def test_child_forked_while_every_reachable_lock_is_held_finds_them_all_free(tmp_path):
    locks = _reachable_locks()
    names = {".".join(p[1:]) for p in locks}
    # The scan sees what it must (else it could pass by seeing nothing).
    assert {f"LOCKS.{s}" for s in ProcessLocks.__slots__} | {"_engine._lock", "_engine._pool._cv"} <= names, names
    report = tmp_path / "held.json"

    def child() -> int:
        held = []
        for path in locks:
            lock = _resolve(path)
            if isinstance(lock, LOCK_TYPES):
                if not lock.acquire(False):
                    held.append(".".join(path))
                    continue
                lock.release()
        report.write_text(json.dumps(held))
        return 0 if not held and _retain_grad_backward() and _first_accumulation() else 1

    with _Holder(list(locks.values())):
        code = run_in_fork(child, timeout=10)
    held = json.loads(report.read_text()) if report.exists() else "no report"
    assert code == 0 and held == [], f"still held in the child: {held} (exit {code})"
