"""Reentrant backward: a backward started inside a running backward (Note [Reentrant backward])."""
from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from threadgrad import engine, ops


class SquareViaInnerGrad(engine.Function):
    """y = x**2, whose backward computes d(x**2)/dx with a nested engine.grad call."""

    log: list = []

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        with engine.enable_grad():
            xd = x.detach().requires_grad_()
            inner = (xd * xd).sum()
        (gx,) = engine.grad(inner, xd)  # reentrant
        SquareViaInnerGrad.log.append(threading.current_thread())
        return g * gx


class Nest(engine.Function):
    """Identity whose backward runs a nested backward ``n`` levels deep (recursively via Nest)."""

    @staticmethod
    def forward(ctx, x, n):
        ctx.n = n
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if ctx.n > 0:
            leaf = engine.ones(1, requires_grad=True)
            with engine.enable_grad():
                out = (Nest.apply(leaf, ctx.n - 1) * 3.0).sum()
            out.backward()
            assert leaf.grad.tolist() == [3.0]
        return g, None


@pytest.mark.timeout(30)
def test_reentrant_from_caller_thread_gives_exact_gradient():
    x = engine.tensor([1.0, -2.0, 3.0], requires_grad=True)
    SquareViaInnerGrad.log.clear()
    (SquareViaInnerGrad.apply(x) * 2.0).sum().backward()
    assert x.grad.tolist() == [4.0, -8.0, 12.0]
    assert SquareViaInnerGrad.log == [threading.current_thread()]


@pytest.mark.timeout(30)
def test_reentrant_from_virtual_worker_thread():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    SquareViaInnerGrad.log.clear()
    xv = ops.to(x, "virtual:3")
    SquareViaInnerGrad.apply(xv).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]
    (ran_on,) = SquareViaInnerGrad.log
    assert ran_on is not threading.current_thread()
    assert ran_on.name == "threadgrad-virtual:3"


@pytest.mark.timeout(30)
def test_child_tasks_pop_before_parent_tasks_in_the_same_queue():
    order: list[str] = []

    class Parent(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            order.append("parent-start")
            leaf = engine.ones(2, requires_grad=True)
            with engine.enable_grad():
                y = (leaf * 2.0).sum()
            y.grad_fn.register_prehook(lambda grads: order.append("child-node") or None)
            y.backward()
            order.append("parent-end")
            return g

    a = engine.ones(2, requires_grad=True)
    b = engine.ones(2, requires_grad=True)
    other = b * 5.0  # recorded first: lower sequence number, runs after Parent's node
    other.grad_fn.register_prehook(lambda grads: order.append("sibling") or None)
    p = Parent.apply(a)
    (p + other).sum().backward()
    assert order == ["parent-start", "child-node", "parent-end", "sibling"]


@pytest.mark.timeout(60)
def test_past_max_recursion_depth_moves_to_pool_threads():
    eng = engine.get_engine()
    old = eng.max_recursion_depth
    eng.max_recursion_depth = 2
    try:
        x = engine.ones(1, requires_grad=True)
        Nest.apply(x, 7).sum().backward()
        assert x.grad.tolist() == [1.0]
        names = [t.name for t in eng.worker_threads()]
        assert sum(n.startswith("threadgrad-pool") for n in names) >= 2
    finally:
        eng.max_recursion_depth = old
        eng.shutdown()


@pytest.mark.timeout(120)
def test_5000_levels_deep_within_default_recursion_limit_and_no_leaked_threads():
    eng = engine.get_engine()
    eng.shutdown()
    before = threading.active_count()
    assert sys.getrecursionlimit() == 1000
    x = engine.ones(1, requires_grad=True)
    (Nest.apply(x, 5000) * 2.0).sum().backward()
    assert x.grad.tolist() == [2.0]
    # each pool thread drives max_recursion_depth + 1 levels: its own task, then that many nested
    assert len(eng.worker_threads()) >= 5000 // (eng.max_recursion_depth + 1)
    eng.shutdown()
    assert eng.worker_threads() == []
    assert threading.active_count() == before


@pytest.mark.timeout(30)
def test_queue_callback_binds_to_innermost_backward():
    log: list[str] = []

    class WithCallbacks(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            engine.queue_callback(lambda: log.append("outer-callback"))
            leaf = engine.ones(1, requires_grad=True)
            with engine.enable_grad():
                y = (leaf * 2.0).sum()

            def inner_hook(grad):
                engine.queue_callback(lambda: log.append("inner-callback"))

            y.grad_fn.register_prehook(inner_hook)
            y.backward()
            log.append("inner-returned")
            return g

    x = engine.ones(1, requires_grad=True)
    WithCallbacks.apply(x).sum().backward()
    assert log == ["inner-callback", "inner-returned", "outer-callback"]


@pytest.mark.timeout(30)
def test_error_in_child_reaches_parent_with_original_type_and_engine_recovers():
    class Boom(Exception):
        pass

    class FailingChild(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            leaf = engine.ones(1, requires_grad=True)
            with engine.enable_grad():
                y = (leaf * 2.0).sum()

            def explode(grads):
                raise Boom("child exploded")

            y.grad_fn.register_prehook(explode)
            y.backward()
            return g

    sibling_ran = []
    a = engine.ones(1, requires_grad=True)
    b = engine.ones(1, requires_grad=True)
    other = b * 4.0
    other.grad_fn.register_prehook(lambda grads: sibling_ran.append(True) or None)
    out = FailingChild.apply(a) + other
    with pytest.raises(Boom, match="child exploded"):
        out.sum().backward()
    assert sibling_ran == []  # the parent's remaining work was dropped
    assert b.grad is None
    # The engine keeps working on the same thread and on a device worker.
    z = engine.ones(2, requires_grad=True)
    (ops.to(z, "virtual:1") * 3.0).sum().backward()
    assert z.grad.tolist() == [3.0, 3.0]


@pytest.mark.timeout(120)
def test_reentrant_backward_from_8_threads_at_once():
    errors: list[BaseException] = []
    results: list[list[float]] = []
    barrier = threading.Barrier(8)

    def work(k: int) -> None:
        try:
            barrier.wait()
            for _ in range(25):
                x = engine.tensor([float(k), 1.0], requires_grad=True)
                dev = f"virtual:{k % 3}" if k % 2 else "cpu"
                (SquareViaInnerGrad.apply(ops.to(x, dev)) * 0.5).sum().backward()
                results.append(x.grad.tolist())
                assert x.grad.tolist() == [float(k), 1.0]
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 200


@pytest.mark.timeout(60)
def test_reentrant_mixed_with_virtual_devices_and_shared_leaf():
    w = engine.tensor([2.0], requires_grad=True)

    class CrossDevice(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            with engine.enable_grad():
                hop = ops.to(ops.to(w, "virtual:2") * 1.0, "virtual:5")
                y = (hop * ops.to(w, "virtual:5")).sum()
            y.backward()  # accumulates 2*w = 4 into w.grad, from inside a backward
            return g

    x = engine.tensor([1.0], requires_grad=True)
    CrossDevice.apply(ops.to(x, "virtual:1")).sum().backward()
    assert x.grad.tolist() == [1.0]
    assert w.grad.tolist() == [4.0]


@pytest.mark.timeout(30)
def test_nested_grad_with_create_graph_inside_backward():
    class GradNorm(engine.Function):
        """forward: x; backward: g * d/dx(sum(x**3)) computed by a nested grad."""

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            with engine.enable_grad():
                xd = x.detach().requires_grad_()
                (d,) = engine.grad((xd ** 3).sum(), xd, create_graph=True)
                (dd,) = engine.grad(d.sum(), xd)
            return g * dd  # 6x

    x = engine.tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)
    GradNorm.apply(x).sum().backward()
    assert x.grad.tolist() == [6.0, 12.0]


@pytest.mark.timeout(60)
def test_pool_hop_keeps_one_consumer_per_queue_and_the_caller_returns() -> None:
    """Past max_recursion_depth the child runs on a pool thread serving the caller's queue.
    The caller must not pop that queue again until the pool thread has left it: here the
    pool thread is busy in a parent node (Slow) when the child completes on virtual:1's
    worker, and then finishes the parent itself. Waiting on the child's future instead let
    the caller return to popping, and the parent's completion woke no one (a hang)."""
    eng = engine.get_engine()
    child_done = threading.Event()

    class Slow(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            child_done.wait(10)
            # Widen the window in which the old code's caller went back to popping; the
            # fixed code does not depend on it (the caller waits for this thread to leave).
            threading.Event().wait(0.2)
            return g

    class Reent(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            v = ops.to(engine.tensor([1.0, 2.0]), "virtual:1").detach().requires_grad_()
            v.register_post_accumulate_grad_hook(lambda t: child_done.set())
            with engine.enable_grad():
                inner = (v * 2.0).sum()
            inner.backward()  # past the depth limit: runs on a pool thread
            assert v.grad.tolist() == [2.0, 2.0]
            return g

    a = engine.tensor([1.0, 2.0], requires_grad=True)
    b = engine.tensor([3.0, 4.0], requires_grad=True)
    s = Slow.apply(b).sum()  # recorded first: queued behind Reent's branch
    n = Reent.apply(a).sum()
    prev = eng.max_recursion_depth
    eng.max_recursion_depth = 0
    try:
        done = []
        t = threading.Thread(target=lambda: ((s + n).backward(), done.append(True)), daemon=True)
        t.start()
        t.join(30)
        assert done == [True], "backward did not return"
    finally:
        eng.max_recursion_depth = prev
    assert a.grad.tolist() == [1.0, 1.0] and b.grad.tolist() == [1.0, 1.0]
