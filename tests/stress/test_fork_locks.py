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
* Every place in the library's source that makes a lock (engine/, ops/, devices/ and the front
  door: optimizers, DDP, the profiler) is listed with what remakes it in a child, and the locks
  of objects (an optimizer inside ``step``, a profile, a checkpoint, a multi-grad hook, the
  distributed communication threads) are held while forking: the child uses each object.
"""
from __future__ import annotations

import ast
import importlib
import json
import os
import pathlib
import pkgutil
import sys
import threading
import types
from typing import Any, Callable

import numpy as np
import pytest

import threadgrad as tg
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
        self.locks = [lk for lock in locks for lk in (lock if isinstance(lock, tuple) else (lock,))]
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
    "leaf": lambda: _accumulation_into_a_known_leaf(),
}


def _accumulation_into_a_known_leaf() -> Callable[[], bool]:
    """A leaf whose AccumulateGrad (and so its stripe of LOCKS.leaf) exists before the fork."""
    x = f64([1.0, 2.0])
    y = ops.mul(x, 2.0)  # keeps x's AccumulateGrad alive across the fork

    def work() -> bool:
        x.grad = None
        ops.sum(y).backward(retain_graph=True)
        return x.grad.tolist() == [2.0, 2.0]
    return work


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
        if isinstance(v, tuple) and v and all(isinstance(w, LOCK_TYPES) for w in v):  # LOCKS.leaf's stripes
            for k, w in enumerate(v):
                visit(path + (k,), w, left)
        elif isinstance(v, LOCK_TYPES):
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
        obj = obj[name] if isinstance(name, int) else getattr(obj, name, None)
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
    names = {".".join(map(str, p[1:])) for p in locks}
    # The scan sees what it must (else it could pass by seeing nothing).
    wanted = {f"LOCKS.{s}" for s in ProcessLocks.__slots__ if s != "leaf"} | {"LOCKS.leaf.0", "LOCKS.leaf.63"}
    assert wanted | {"_engine._lock", "_engine._pool._cv"} <= names, names
    report = tmp_path / "held.json"

    def child() -> int:
        held = []
        for path in locks:
            lock = _resolve(path)
            if isinstance(lock, LOCK_TYPES):
                if not lock.acquire(False):
                    held.append(".".join(map(str, path)))
                    continue
                lock.release()
        report.write_text(json.dumps(held))
        return 0 if not held and _retain_grad_backward() and _first_accumulation() else 1

    with _Holder(list(locks.values())):
        code = run_in_fork(child, timeout=10)
    held = json.loads(report.read_text()) if report.exists() else "no report"
    assert code == 0 and held == [], f"still held in the child: {held} (exit {code})"


# --- every lock the library's source makes ------------------------------------------------------

LOCK_MAKERS = {"Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore", "Event", "Barrier"}

# (file, the function or class body that makes it) -> what makes it anew in a forked child.
# A lock added anywhere in the library fails test_every_lock_the_source_makes_is_remade_at_fork
# until it gets a line here, and its way of being remade a test below.
COVERED = {
    ("engine/_locks.py", "ProcessLocks.remake"): "LOCKS: remade by the at-fork handler (tests above)",
    ("engine/_locks.py", "OwnLock.__init__"): "remade_at_fork (multi-grad hook test)",
    ("engine/_locks.py", "OwnLock._remake_locks"): "the remaking itself",
    ("engine/checkpoint.py", "_Recompute.__init__"): "remade_at_fork (checkpoint test)",
    ("engine/checkpoint.py", "_Recompute._remake_locks"): "the remaking itself",
    ("engine/ready_queue.py", "ReadyQueue.__init__"): "Engine._after_fork_in_child drops every queue",
    ("engine/threads.py", "_Pool.__init__"): "Engine._after_fork_in_child: a new pool",
    ("engine/graph_task.py", "GraphTask.__init__"): "a backward in flight at the fork: its threads are gone",
    ("engine/threads.py", "_CpuHelpers.__init__"): "Engine._after_fork_in_child: new helpers",
    ("engine/executor.py", "Engine.__init__"): "Engine._after_fork_in_child",
    ("engine/executor.py", "Engine._after_fork_in_child"): "the remaking itself",
    ("engine/executor.py", "Engine._drive_on_pool"): "a reentrant backward's pool hop in flight",
    ("devices/__init__.py", "<module>"): "devices' Note [Fork]",
    ("devices/__init__.py", "_after_fork_in_child"): "the remaking itself",
    ("threadgrad/optim/optimizer.py", "Optimizer.__init__"): "remade_at_fork (optimizer test)",
    ("threadgrad/optim/optimizer.py", "Optimizer.__setstate__"): "remade_at_fork (optimizer test)",
    ("threadgrad/optim/optimizer.py", "Optimizer._remake_locks"): "the remaking itself",
    ("threadgrad/profiler/_recorder.py", "_Recorder.__init__"): "remade_at_fork (profiler test)",
    ("threadgrad/profiler/_recorder.py", "_Recorder._remake_locks"): "the remaking itself",
    ("threadgrad/distributed/__init__.py", "<module>"): "_remake_group_lock (distributed test)",
    ("threadgrad/distributed/__init__.py", "_remake_group_lock"): "the remaking itself",
    ("threadgrad/distributed/_comm.py", "_Watchdog.__init__"): "remade_at_fork (distributed test)",
    ("threadgrad/distributed/_comm.py", "_Watchdog._remake_locks"): "the remaking itself",
    ("threadgrad/distributed/_comm.py", "_CommThread.__init__"): "remade_at_fork (distributed test)",
    ("threadgrad/distributed/_comm.py", "_CommThread._remake_locks"): "the remaking itself",
    ("threadgrad/distributed/ddp.py", "DistributedDataParallel.__init__"): "remade_at_fork (mp_cases ddp_fork)",
    ("threadgrad/distributed/ddp.py", "DistributedDataParallel._remake_locks"): "the remaking itself",
    ("threadgrad/_generator.py", "Generator.__init__"): "remade_at_fork (generator and module test)",
    ("threadgrad/_generator.py", "Generator._remake_locks"): "the remaking itself",
    ("threadgrad/nn/modules/module.py", "Module.__init__"): "remade_at_fork (generator and module test)",
    ("threadgrad/nn/modules/module.py", "Module.__setstate__"): "remade_at_fork (generator and module test)",
    ("threadgrad/nn/modules/module.py", "Module._remake_locks"): "the remaking itself",
    ("threadgrad/utils/data/dataloader.py", "DataLoader._prefetch_stream"):
        "one iteration's stop event: its worker threads do not survive the fork either",
}


def _lock_sites() -> set[tuple[str, str]]:
    """(file, enclosing Class.function or function, or <module>) of each ``threading.X(...)``
    call in the library's source that makes a lock, a condition, an event, ..."""
    from threadgrad import devices

    # Each part from where Python found it: the repository's folders (an editable install) or
    # site-packages/threadgrad/<part> (a wheel); the front door is the rest of threadgrad/.
    parts = {name: pathlib.Path(mod.__file__).resolve().parent
             for name, mod in (("engine", engine), ("ops", ops), ("devices", devices))}
    front = pathlib.Path(tg.__file__).resolve().parent
    files = [(f"{name}/{p.relative_to(base).as_posix()}", p) for name, base in parts.items()
             for p in sorted(base.rglob("*.py"))]
    files += [(f"threadgrad/{p.relative_to(front).as_posix()}", p) for p in sorted(front.rglob("*.py"))
              if not any(p.is_relative_to(base) for base in parts.values())]
    sites: set[tuple[str, str]] = set()

    def walk(rel: str, node: ast.AST, where: list) -> None:
        # (a walk over a source file's syntax tree, not over a graph: the no-recursion rule is the graph's)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                walk(rel, child, where + [(child.name, isinstance(child, ast.ClassDef))])
                continue
            if (isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute)
                    and child.func.attr in LOCK_MAKERS and isinstance(child.func.value, ast.Name)
                    and child.func.value.id == "threading"):
                names = where[:2] if where and where[0][1] else where[:1]  # Class.method or function
                sites.add((rel, ".".join(n for n, _c in names) or "<module>"))
            walk(rel, child, where)

    for rel, path in files:
        walk(rel, ast.parse(path.read_text()), [])
    return sites


def test_every_lock_the_source_makes_is_remade_at_fork():
    sites = _lock_sites()
    assert ("threadgrad/optim/optimizer.py", "Optimizer.__init__") in sites, sites  # the scan sees them
    missing = sorted(sites - set(COVERED))
    assert not missing, f"locks made here are not listed (with what remakes them in a forked child): {missing}"
    stale = sorted(set(COVERED) - sites)
    assert not stale, f"listed but no longer made: {stale}"


class _SlowSGD(tg.optim.SGD):
    """An SGD whose update waits, holding the optimizer's lock, until told to go on."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.inside = threading.Event()
        self.go_on = threading.Event()

    def _update_group(self, group: dict) -> None:
        if not self.inside.is_set():
            self.inside.set()
            self.go_on.wait(60)
        super()._update_group(group)


@pytest.mark.timeout(60)
def test_child_forked_while_another_thread_is_inside_step_can_step():
    """Issue 34, item 4: the child's first step, zero_grad or state_dict hung on the lock that
    the parent's stepping thread held."""
    w = tg.tensor([1.0, 2.0], dtype=tg.float64, requires_grad=True)
    opt = _SlowSGD([w], lr=0.5, momentum=0.9)
    w.grad = tg.ones(2, dtype=tg.float64)
    stepping = threading.Thread(target=opt.step, daemon=True)
    stepping.start()
    assert opt.inside.wait(10)

    def child() -> int:
        opt.go_on.set()  # (this child's copy: no thread of it waits on it)
        opt.zero_grad()
        w.grad = tg.ones(2, dtype=tg.float64)
        opt.step()  # the parent's step never ran its update in this copy: this is the first
        st = opt.state_dict()
        return 0 if w.tolist() == [0.5, 1.5] and st["state"][0]["momentum_buffer"].tolist() == [1.0, 1.0] else 1

    try:
        code = run_in_fork(child, timeout=10)
    finally:
        opt.go_on.set()
        stepping.join(10)
    assert code == 0, f"the child's optimizer gave wrong values (exit {code})"
    assert w.tolist() == [0.5, 1.5]  # the parent's step finished as usual


def _objects_with_their_own_locks() -> list[tuple[str, Any, Callable[[], bool]]]:
    """(name, the object's locks, the child's work with it) for each kind of object that makes
    locks of its own (the optimizer has the test above)."""
    from threadgrad.distributed import _comm
    from threadgrad.profiler import _recorder

    found = []
    rec = _recorder._Recorder()
    found.append(("profiler recorder", [rec._rows_lock, rec._running_cv],
                  lambda: (rec.row() is not None, rec._running_cv.acquire(False))[1]))

    from threadgrad.engine._locks import OwnLock
    from threadgrad.engine.checkpoint import _Recompute

    x = f64([1.0, 2.0])
    before = _registered(_Recompute)
    out = engine.checkpoint(lambda a: ops.mul(ops.sin(a), a), x, use_reentrant=False)
    (recompute,) = [o for o in _registered(_Recompute) if all(o is not b for b in before)]

    def checkpoint_backward() -> bool:
        ops.sum(out).backward()
        xs = np.array([1.0, 2.0])
        return np.allclose(x.grad.numpy(), np.cos(xs) * xs + np.sin(xs))
    found.append(("checkpoint re-run", [recompute.lock], checkpoint_backward))

    a, b = f64([1.0]), f64([2.0])
    seen: list = []
    before = _registered(OwnLock)
    handle = engine.register_multi_grad_hook((a, b), lambda gs: seen.append([g.tolist() for g in gs]))
    (box,) = [o for o in _registered(OwnLock) if all(o is not b for b in before)]

    def multi_hook() -> bool:
        ops.sum(ops.mul(a, b)).backward()
        return seen == [[[2.0], [1.0]]]
    found.append(("multi-grad hook", [box.lock], multi_hook))

    dog = _comm._Watchdog(lambda what: None)
    thread = _comm._CommThread("test comm", dog, 30.0)

    def comm_work() -> bool:
        return dog._cond.acquire(False) and thread._cond.acquire(False)
    found.append(("distributed watchdog and comm thread", [dog._cond, thread._cond], comm_work))

    import threadgrad as tg

    gen = tg.Generator().manual_seed(3)
    found.append(("generator", [gen._lock], lambda: gen.manual_seed(5).initial_seed() == 5))
    lin = tg.nn.Linear(2, 2)
    calls: list = []

    def module_hooks() -> bool:
        lin.register_forward_hook(lambda *a: calls.append(1))
        lin(tg.tensor([[1.0, 2.0]]))
        return calls == [1]
    found.append(("module hooks", [lin._hooks_lock], module_hooks))

    from threadgrad import distributed
    found.append(("distributed group lock", [distributed._group_lock],
                  lambda: distributed._group_lock.acquire(False)))
    found.append(("_keep", [], lambda: (thread, dog) is not None))  # (keeps them alive in the child)
    return found


def _registered(cls: type) -> list:
    """The live objects of ``cls`` that registered to be remade at fork."""
    from threadgrad.engine._locks import _owners
    return [o for o in list(_owners) if type(o) is cls]


@pytest.mark.timeout(60)
def test_child_forked_while_objects_hold_their_own_locks_uses_them():
    cases = _objects_with_their_own_locks()
    report = {}
    for name, locks, work in cases:
        with _Holder(locks):
            report[name] = run_in_fork(lambda: 0 if work() else 1, timeout=10)
    assert all(code == 0 for code in report.values()), report
