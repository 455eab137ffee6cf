"""Hook registration under threads: every registration counts, and a backward running a
node's hooks never sees its hook tables change under it.

* A backward that iterates a multi-output node's tensor hooks while another thread
  registers the first hook on another output of that node finishes, with exact gradients
  (it runs the hooks that were there when it started; the new one runs from the next backward).
* Hooks registered at the same moment from many threads (released together by a barrier)
  are all kept: tensor hooks on leaves and non-leaves, retain_grad, post-accumulate-grad
  hooks, node hooks and pre-hooks, and ``handle.remove()`` racing with registration. Each
  kind loops trials on fresh tensors, with the racing threads giving the GIL away before
  every line of the engine, and counts the calls of the next backward exactly.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable

import numpy as np
import pytest

from threadgrad import engine, ops

THREADS = 8
TRIALS = 50
ENGINE_DIR = os.path.dirname(engine.__file__)


def _yield_on_every_engine_line(frame: Any, event: str, arg: Any) -> Any:
    """A trace function that gives the GIL away before every line the engine runs on this
    thread: any check-then-act spanning two lines (``if h is None: h = make()``) is then
    interleaved with the other threads' in nearly every race, not in 1 of 100."""
    if event == "call":
        return _yield_on_every_engine_line if frame.f_code.co_filename.startswith(ENGINE_DIR) else None
    if event == "line":
        time.sleep(0)
    return _yield_on_every_engine_line


def f64(values: Any) -> engine.Tensor:
    return engine.tensor(np.asarray(values, dtype=np.float64), requires_grad=True)


# --- bug 5: a backward iterating the hook tables while another thread registers --------------

@pytest.mark.timeout(30)
def test_first_hook_on_other_output_registered_while_backward_runs_the_nodes_hooks():
    x = f64([1.0, 2.0, 3.0, 4.0])
    a, b = ops.split(x, 2)
    loss = ops.sum(ops.mul(a, 2.0)) + ops.sum(ops.mul(b, 3.0))
    in_hook = threading.Event()
    registered = threading.Event()
    calls: list = []

    def on_a(g: engine.Tensor) -> None:
        calls.append(("a", g.tolist()))
        if not registered.is_set():
            in_hook.set()  # the backward is inside SplitBackward0's tensor hooks, now
            assert registered.wait(10)

    def on_b(g: engine.Tensor) -> None:
        calls.append(("b", g.tolist()))

    a.register_hook(on_a)
    errors: list = []

    def register_on_b() -> None:
        try:
            assert in_hook.wait(10)
            b.register_hook(on_b)  # the first hook of b's slot: a new entry in the node's table
        except BaseException as e:  # noqa: BLE001 - checked below
            errors.append(e)
        finally:
            registered.set()

    t = threading.Thread(target=register_on_b, daemon=True)
    t.start()
    loss.backward(retain_graph=True)
    t.join(10)
    assert not errors
    assert x.grad.tolist() == [2.0, 2.0, 3.0, 3.0]
    assert calls == [("a", [2.0, 2.0])]  # the table as it was when the node started
    loss.backward()
    assert x.grad.tolist() == [4.0, 4.0, 6.0, 6.0]
    assert calls[1:] == [("a", [2.0, 2.0]), ("b", [3.0, 3.0])]


@pytest.mark.timeout(30)
def test_hook_registering_a_hook_on_another_output_of_its_node():
    """The same, on one thread: a tensor hook adds the first tensor hook of another slot of its
    own node (it runs from the next backward on: the tensor hooks were read as the node
    started them), and a pre- and a post-hook to that node, which run in this backward
    already, as in torch (each kind is read as its turn comes)."""
    x = f64([1.0, 2.0, 3.0])
    a, b, c = ops.split(x, 1)
    loss = ops.sum(a) + ops.sum(ops.mul(b, 2.0)) + ops.sum(ops.mul(c, 3.0))
    calls: list = []
    handles: list = []

    def on_a(g: engine.Tensor) -> None:
        calls.append("a")
        if not handles:
            handles.append(b.register_hook(lambda g: calls.append("b")))
            handles.append(c.grad_fn.register_prehook(lambda gs: calls.append("c pre")))
            handles.append(a.grad_fn.register_hook(lambda gi, go: calls.append("split post")))

    a.register_hook(on_a)
    loss.backward(retain_graph=True)
    assert x.grad.tolist() == [1.0, 2.0, 3.0]
    assert calls == ["a", "c pre", "split post"]
    calls.clear()
    loss.backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]
    assert calls == ["a", "b", "c pre", "split post"]  # tensor hooks, pre-hooks, post-hooks


# --- bug 6: registrations at the same moment are all kept --------------------------------------

def _race(setup: Callable[[], Any], act: Callable[[int, Any], None], check: Callable[[Any], str | None],
          threads: int = THREADS, trials: int = TRIALS) -> None:
    """``trials`` times: ``target = setup()``; ``act(i, target)`` on ``threads`` threads
    released together by a barrier; then ``check(target)`` (None, or what went wrong). Fails
    with the number of trials that went wrong. The threads live across trials and give the
    GIL away before every engine line they run (``_yield_on_every_engine_line``): before the
    fix every trial lost registrations (50 of 50; without the trace function and with a
    switch interval of 1 us, about 1 in 100)."""
    state: dict = {}
    start = threading.Barrier(threads + 1)
    done = threading.Barrier(threads + 1)
    errors: list = []

    def worker(i: int) -> None:
        sys.settrace(_yield_on_every_engine_line)
        try:
            for _ in range(trials):
                start.wait(30)
                try:
                    act(i, state["target"])
                except BaseException as e:  # noqa: BLE001 - reported below
                    errors.append(e)
                done.wait(30)
        except threading.BrokenBarrierError:
            pass  # the test thread gave up (its check raised): reported there

    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    old = sys.getswitchinterval()
    failures: list = []
    for t in pool:
        t.start()
    try:
        for trial in range(trials):
            state["target"] = setup()
            sys.setswitchinterval(1e-6)
            start.wait(30)
            done.wait(30)
            sys.setswitchinterval(old)
            problem = check(state["target"])
            if problem is not None:
                failures.append((trial, problem))
    finally:
        sys.setswitchinterval(old)
        start.abort()
        done.abort()
        for t in pool:
            t.join(30)
    assert not errors, errors[:3]
    assert not failures, f"{len(failures)} of {trials} trials went wrong; first: {failures[:3]}"


@pytest.mark.timeout(60)
def test_tensor_hooks_on_a_non_leaf_registered_at_once_all_run():
    def setup() -> Any:
        x = f64([1.0, 2.0])
        y = ops.mul(x, 3.0)
        calls: list = []
        return x, y, calls

    def act(i: int, target: Any) -> None:
        x, y, calls = target
        y.register_hook(lambda g: calls.append(i))

    def check(target: Any) -> str | None:
        x, y, calls = target
        ops.sum(y).backward()
        if sorted(calls) != list(range(THREADS)) or x.grad.tolist() != [3.0, 3.0]:
            return f"hooks run: {sorted(calls)}, x.grad {x.grad.tolist()}"
        return None

    _race(setup, act, check)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("graph_first", [False, True], ids=["hooks-before-graph", "graph-before-hooks"])
def test_tensor_hooks_on_a_leaf_registered_at_once_all_run(graph_first):
    """With the leaf's AccumulateGrad not made yet, and made (by the forward) before."""
    def setup() -> Any:
        x = f64([1.0, 2.0])
        y = ops.mul(x, 3.0) if graph_first else None
        return x, y, []

    def act(i: int, target: Any) -> None:
        x, y, calls = target
        x.register_hook(lambda g: calls.append(i))

    def check(target: Any) -> str | None:
        x, y, calls = target
        ops.sum(y if y is not None else ops.mul(x, 3.0)).backward()
        if sorted(calls) != list(range(THREADS)) or x.grad.tolist() != [3.0, 3.0]:
            return f"hooks run: {sorted(calls)}, x.grad {x.grad.tolist()}"
        return None

    _race(setup, act, check)


@pytest.mark.timeout(60)
def test_leaf_hooks_registered_while_its_accumulator_is_made_all_run():
    """Half the threads register hooks on a leaf while the other half build graphs from it
    (making its AccumulateGrad): every hook runs, on every graph."""
    half = THREADS // 2

    def setup() -> Any:
        return f64([1.0, 2.0]), [None] * half, []

    def act(i: int, target: Any) -> None:
        x, ys, calls = target
        if i < half:
            x.register_hook(lambda g: calls.append(i))
        else:
            ys[i - half] = ops.mul(x, 3.0)

    def check(target: Any) -> str | None:
        x, ys, calls = target
        total = ys[0]
        for y in ys[1:]:
            total = total + y
        ops.sum(total).backward()
        if sorted(calls) != list(range(half)) or x.grad.tolist() != [3.0 * half] * 2:
            return f"hooks run: {sorted(calls)}, x.grad {x.grad.tolist()}"
        return None

    _race(setup, act, check)


@pytest.mark.timeout(60)
def test_post_accumulate_grad_hooks_registered_at_once_all_run():
    def setup() -> Any:
        return f64([1.0, 2.0]), []

    def act(i: int, target: Any) -> None:
        x, calls = target
        x.register_post_accumulate_grad_hook(lambda t: calls.append(i))

    def check(target: Any) -> str | None:
        x, calls = target
        ops.sum(ops.mul(x, 3.0)).backward()
        if sorted(calls) != list(range(THREADS)):
            return f"hooks run: {sorted(calls)}"
        return None

    _race(setup, act, check)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["register_hook", "register_prehook", "mixed"])
def test_node_hooks_registered_at_once_all_run(kind):
    """Node post-hooks, pre-hooks, and (mixed) both with tensor hooks and retain_grad on the
    same node, all registered at once."""
    def setup() -> Any:
        x = f64([1.0, 2.0])
        return x, ops.mul(x, 3.0), []

    def act(i: int, target: Any) -> None:
        x, y, calls = target
        how = kind if kind != "mixed" else ("register_hook", "register_prehook", "tensor", "retain_grad")[i % 4]
        if how == "register_hook":
            y.grad_fn.register_hook(lambda gi, go: calls.append(i))
        elif how == "register_prehook":
            y.grad_fn.register_prehook(lambda go: calls.append(i))
        elif how == "tensor":
            y.register_hook(lambda g: calls.append(i))
        else:
            y.retain_grad()

    def check(target: Any) -> str | None:
        x, y, calls = target
        ops.sum(y).backward()
        expected = list(range(THREADS)) if kind != "mixed" else [i for i in range(THREADS) if i % 4 != 3]
        grad_ok = y.grad is not None and y.grad.tolist() == [1.0, 1.0] if kind == "mixed" else y.grad is None
        if sorted(calls) != expected or x.grad.tolist() != [3.0, 3.0] or not grad_ok:
            return f"hooks run: {sorted(calls)}, y.grad {y.grad}, x.grad {x.grad.tolist()}"
        return None

    _race(setup, act, check)


@pytest.mark.timeout(60)
def test_retain_grad_from_many_threads_retains_once():
    def setup() -> Any:
        x = f64([1.0, 2.0])
        return x, ops.mul(x, 3.0)

    def act(i: int, target: Any) -> None:
        target[1].retain_grad()

    def check(target: Any) -> str | None:
        x, y = target
        ops.sum(ops.mul(y, 2.0)).backward()
        if y.grad is None or y.grad.tolist() != [2.0, 2.0] or not y.retains_grad:
            return f"y.grad {y.grad}"
        return None

    _race(setup, act, check)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["non-leaf", "leaf", "post-accumulate", "node"])
def test_handle_remove_racing_with_registration(where):
    """Half the threads remove one of the hooks registered before; the other half register
    new ones: exactly the new hooks run."""
    half = THREADS // 2

    def register(x: engine.Tensor, y: engine.Tensor, fn: Callable) -> Any:
        if where == "non-leaf":
            return y.register_hook(lambda g: fn())
        if where == "leaf":
            return x.register_hook(lambda g: fn())
        if where == "post-accumulate":
            return x.register_post_accumulate_grad_hook(lambda t: fn())
        return y.grad_fn.register_prehook(lambda go: fn())

    def setup() -> Any:
        x = f64([1.0, 2.0])
        y = ops.mul(x, 3.0)
        calls: list = []
        old = [register(x, y, lambda i=i: calls.append(("old", i))) for i in range(half)]
        return x, y, calls, old

    def act(i: int, target: Any) -> None:
        x, y, calls, old = target
        if i < half:
            old[i].remove()
        else:
            register(x, y, lambda: calls.append(("new", i)))

    def check(target: Any) -> str | None:
        x, y, calls, old = target
        ops.sum(y).backward()
        if sorted(calls) != [("new", i) for i in range(half, THREADS)] or x.grad.tolist() != [3.0, 3.0]:
            return f"hooks run: {sorted(calls)}"
        return None

    _race(setup, act, check)
