"""The executor under threads: concurrent backward calls, device worker threads, errors
crossing threads, backward_async / grad_async, and Engine.shutdown()."""
from __future__ import annotations

import threading
from concurrent.futures import Future

import numpy as np
import pytest

from threadgrad import devices, engine, ops


def engine_threads():
    return engine.get_engine().worker_threads()


def _rec(where: dict, key: str):
    """A hook (any signature) that records the first thread it ran on and returns None."""

    def hook(*args):
        where.setdefault(key, threading.current_thread())

    return hook


# --- many threads -------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_eight_threads_each_run_200_backward_calls_on_their_own_graphs(run_in_threads):
    def body(i):
        bad = []
        for k in range(200):
            v = np.array([i, k, i + k, 1.0]) + 1.0
            x = engine.tensor(v, requires_grad=True)
            w = engine.tensor([float(i + 1)], requires_grad=True)
            y = (x * x * w + x * 3.0).sum()
            y.backward()
            if x.grad.tolist() != list(2 * v * (i + 1) + 3.0) or w.grad.tolist() != [float((v * v).sum())]:
                bad.append((k, x.grad.tolist(), w.grad.tolist()))
        return bad

    assert run_in_threads(8, body) == [[]] * 8


@pytest.mark.timeout(60)
def test_eight_threads_backward_on_one_shared_graph(run_in_threads):
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = engine.tensor([2.0], requires_grad=True)
    h = x * w  # shared intermediate with saved tensors
    y = (h * h + x * 3.0).sum()

    y.backward(retain_graph=True)
    single_x, single_w = x.grad.tolist(), w.grad.tolist()
    assert single_x == [11.0, 19.0, 27.0]  # 2 x w^2 + 3
    assert single_w == [56.0]  # 2 w sum(x^2)
    x.grad = None
    w.grad = None

    run_in_threads(8, lambda i: y.backward(retain_graph=True))
    assert x.grad.tolist() == [8 * g for g in single_x]
    assert w.grad.tolist() == [8 * g for g in single_w]


@pytest.mark.timeout(60)
def test_threads_share_one_accumulate_grad_per_leaf(run_in_threads):
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    outs = run_in_threads(8, lambda i: (x * float(i + 1)).sum())
    accs = {id(y.grad_fn.next_functions[0][0].next_functions[0][0]) for y in outs}
    assert len(accs) == 1
    engine.backward(outs)
    assert x.grad.tolist() == [36.0, 36.0]  # 1 + 2 + ... + 8


@pytest.mark.timeout(60)
def test_threads_backward_on_shared_graph_crossing_a_virtual_device(run_in_threads, virtual1):
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    w = engine.tensor([3.0], requires_grad=True)
    v = ops.to(x, virtual1) * ops.to(w, virtual1)
    y = ops.to(v * v, "cpu").sum()
    run_in_threads(8, lambda i: [y.backward(retain_graph=True) for _ in range(20)])
    assert x.grad.tolist() == [160 * 18.0, 160 * 36.0]  # 2 x w^2
    assert w.grad.tolist() == [160 * 30.0]  # 2 w sum(x^2)
    assert x.grad.device is w.grad.device is devices.cpu


@pytest.mark.timeout(60)
def test_threads_repeatedly_backward_through_shared_graph(run_in_threads):
    x = engine.tensor([1.0, -2.0], requires_grad=True)
    y = (x * x * x).sum()
    run_in_threads(8, lambda i: [y.backward(retain_graph=True) for _ in range(50)])
    assert x.grad.tolist() == [400 * 3.0, 400 * 12.0]


@pytest.mark.timeout(60)
def test_threads_call_grad_on_shared_graph(run_in_threads):
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x.exp()
    y = (h * x).sum()
    expected = np.exp([1.0, 2.0]) * (1 + np.array([1.0, 2.0]))

    def body(i):
        return [engine.grad(y, x, retain_graph=True)[0].tolist() for _ in range(50)]

    for per_thread in run_in_threads(8, body):
        for g in per_thread:
            np.testing.assert_allclose(g, expected, rtol=1e-6)
    assert x.grad is None


@pytest.mark.timeout(60)
def test_threads_on_virtual_devices(run_in_threads):
    def body(i):
        dev = f"virtual:{i % 3}"
        out = []
        for k in range(30):
            x = engine.tensor([float(k), 1.0], requires_grad=True)
            v = ops.to(x, dev)
            y = (v * v * float(i + 1)).sum()
            y.backward()
            out.append(x.grad.tolist() == [2.0 * k * (i + 1), 2.0 * (i + 1)] and x.grad.device is devices.cpu)
        return all(out)

    assert run_in_threads(6, body) == [True] * 6


# --- device worker threads ----------------------------------------------------------------

@pytest.mark.timeout(60)
def test_node_with_grads_on_virtual_device_runs_on_its_worker(virtual1):
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    v = ops.to(x, virtual1)
    z = v * 3.0
    y = z.sum()
    where = {}
    z.grad_fn.register_prehook(_rec(where, "mul"))
    z.register_hook(_rec(where, "hook"))
    v.grad_fn.register_prehook(_rec(where, "to"))
    x.register_post_accumulate_grad_hook(_rec(where, "acc"))
    y.backward()
    assert x.grad.tolist() == [3.0, 3.0]
    assert x.grad.device is devices.cpu
    me = threading.current_thread()
    workers = engine_threads()
    for key in ("mul", "hook", "to"):
        assert where[key] is not me, key
        assert where[key] in workers, key
    assert where["mul"] is where["hook"] is where["to"]  # one worker per device
    assert where["acc"] is me  # the cpu gradient comes back to the caller thread


@pytest.mark.timeout(60)
def test_each_virtual_device_has_its_own_worker(virtual1, virtual2):
    x = engine.tensor([1.0], requires_grad=True)
    a = ops.to(x, virtual1) * 2.0
    b = ops.to(x, virtual2) * 5.0
    where = {}
    a.grad_fn.register_prehook(_rec(where, "v1"))
    b.grad_fn.register_prehook(_rec(where, "v2"))
    engine.backward([a.sum(), b.sum()])
    assert x.grad.tolist() == [7.0]
    assert where["v1"] is not where["v2"]
    assert {where["v1"], where["v2"]} <= set(engine_threads())
    # The same worker serves the device on the next call.
    again = {}
    c = ops.to(x, virtual1) * 1.0
    c.grad_fn.register_prehook(_rec(again, "v1"))
    c.sum().backward()
    assert again["v1"] is where["v1"]


@pytest.mark.timeout(60)
def test_grad_mode_is_installed_on_worker_threads(virtual1):
    x = engine.tensor([2.0], requires_grad=True)
    v = ops.to(x, virtual1)
    z = v * v * v
    seen = []
    z.grad_fn.register_prehook(lambda g: seen.append(engine.is_grad_enabled()))
    (g,) = engine.grad(z.sum(), x, create_graph=True)
    assert g.tolist() == [12.0]
    (gg,) = engine.grad(g.sum(), x)
    assert gg.tolist() == [12.0]  # 6x: double backward across devices
    assert seen[0] is True  # create_graph=True: the worker ran the node with grad mode on
    z2 = v * 1.0
    seen.clear()
    z2.grad_fn.register_prehook(lambda g: seen.append(engine.is_grad_enabled()))
    z2.sum().backward()
    assert seen == [False]


@pytest.mark.timeout(60)
def test_queue_callback_from_worker_thread_runs_before_return(virtual1):
    x = engine.tensor([1.0], requires_grad=True)
    z = ops.to(x, virtual1) * 4.0
    events = []
    z.register_hook(lambda g: engine.queue_callback(lambda: events.append(("cb", x.grad.tolist()))))
    z.sum().backward()
    assert events == [("cb", [4.0])]


# --- errors -------------------------------------------------------------------------------

def _raise_boom(g):
    raise ValueError("boom")


@pytest.mark.timeout(60)
def test_exception_in_node_reaches_caller_with_type_message_and_node_name():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x.exp()
    y = (h * 2.0).sum()
    handle = h.register_hook(_raise_boom)  # runs as part of ExpBackward0
    with pytest.raises(ValueError, match="boom") as info:
        y.backward(retain_graph=True)
    assert "ExpBackward0" in str(info.value)
    assert x.grad is None
    # The graph and the engine are intact: remove the hook and run the same graph again.
    handle.remove()
    y.backward()
    np.testing.assert_allclose(x.grad.tolist(), 2 * np.exp([1.0, 2.0]), rtol=1e-6)
    w = engine.tensor([3.0], requires_grad=True)
    (w * w).sum().backward()
    assert w.grad.tolist() == [6.0]


@pytest.mark.timeout(60)
def test_exception_on_worker_thread_reaches_caller(virtual1):
    x = engine.tensor([1.0], requires_grad=True)
    z = ops.to(x, virtual1) * 2.0
    z.grad_fn.register_prehook(lambda g: (_ for _ in ()).throw(KeyError("worker boom")))
    with pytest.raises(KeyError, match="worker boom") as info:
        z.sum().backward()
    assert "MulBackward0" in str(info.value)
    assert x.grad is None
    # The worker survived and serves the next backward.
    z2 = ops.to(x, virtual1) * 5.0
    z2.sum().backward()
    assert x.grad.tolist() == [5.0]


@pytest.mark.timeout(60)
def test_exception_in_post_accumulate_hook_names_accumulate_grad():
    x = engine.tensor([1.0], requires_grad=True)
    x.register_post_accumulate_grad_hook(lambda t: (_ for _ in ()).throw(ValueError("boom")))
    with pytest.raises(ValueError, match="boom") as info:
        (x * 2).sum().backward()
    assert "AccumulateGrad" in str(info.value)


@pytest.mark.timeout(60)
def test_error_in_one_thread_does_not_disturb_others(run_in_threads):
    def body(i):
        out = []
        for k in range(40):
            x = engine.tensor([float(k)], requires_grad=True)
            h = x * 2.0
            if i % 2 == 0:
                h.register_hook(_raise_boom)
                try:
                    h.sum().backward()
                except ValueError as e:
                    out.append("boom" in str(e))
                else:
                    out.append(False)
            else:
                (h * h).sum().backward()
                out.append(x.grad.tolist() == [8.0 * k])
        return all(out)

    assert run_in_threads(8, body) == [True] * 8


# --- async --------------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_backward_async_returns_future_with_none():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    fut = engine.backward_async((x * x).sum())
    assert isinstance(fut, Future)
    assert fut.result(timeout=30) is None
    assert x.grad.tolist() == [2.0, 4.0]


@pytest.mark.timeout(60)
def test_backward_async_runs_on_an_engine_thread():
    x = engine.tensor([1.0], requires_grad=True)
    h = x * 2.0
    where = []
    h.grad_fn.register_prehook(lambda g: where.append(threading.current_thread()))
    engine.backward_async(h.sum()).result(timeout=30)
    assert where[0] is not threading.current_thread()
    assert where[0] in engine_threads()


@pytest.mark.timeout(60)
def test_grad_async_result_is_the_tuple():
    x = engine.tensor([3.0], requires_grad=True)
    w = engine.tensor([4.0], requires_grad=True)
    fut = engine.grad_async((x * w).sum(), [x, w])
    gx, gw = fut.result(timeout=30)
    assert gx.tolist() == [4.0] and gw.tolist() == [3.0]
    assert x.grad is None


@pytest.mark.timeout(60)
def test_many_async_calls_complete():
    xs = [engine.tensor([float(i)], requires_grad=True) for i in range(32)]
    futs = [engine.backward_async((x * x * 0.5).sum()) for x in xs]
    for f in futs:
        assert f.result(timeout=30) is None
    assert [x.grad.item() for x in xs] == [float(i) for i in range(32)]


@pytest.mark.timeout(60)
def test_async_futures_carry_exceptions():
    x = engine.tensor([1.0], requires_grad=True)
    h = x * 2.0
    h.register_hook(_raise_boom)
    fut = engine.backward_async(h.sum())
    exc = fut.exception(timeout=30)
    assert type(exc) is ValueError and "boom" in str(exc)
    with pytest.raises(ValueError, match="boom"):
        fut.result()
    # Argument errors also come through the future, not from the call.
    fut = engine.backward_async(engine.tensor([1.0]).sum())
    with pytest.raises(RuntimeError, match="does not require grad"):
        fut.result(timeout=30)
    fut = engine.grad_async((x * 2).sum(), [x, engine.tensor([1.0], requires_grad=True)])
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        fut.result(timeout=30)


@pytest.mark.timeout(60)
def test_backward_async_with_create_graph_and_virtual_device(virtual1):
    x = engine.tensor([2.0], requires_grad=True)
    y = (ops.to(x, virtual1) ** 3).sum()
    (g,) = engine.grad_async(y, x, create_graph=True).result(timeout=30)
    assert g.tolist() == [12.0] and g.requires_grad
    (gg,) = engine.grad_async(g.sum(), x).result(timeout=30)
    assert gg.tolist() == [12.0]


# --- shutdown -----------------------------------------------------------------------------

def _device_workers():
    return sorted(t.name for t in engine_threads() if not t.name.startswith("threadgrad-pool"))


@pytest.mark.timeout(60)
def test_shutdown_stops_threads_and_next_backward_restarts_them(virtual1):
    eng = engine.get_engine()
    x = engine.tensor([1.0], requires_grad=True)
    (ops.to(x, virtual1) * 2.0).sum().backward()
    engine.backward_async((x * 3.0).sum()).result(timeout=30)
    before = engine_threads()
    assert any(t.name == "threadgrad-virtual:1" for t in before)
    assert any(t.name.startswith("threadgrad-pool") for t in before)

    eng.shutdown()
    assert engine_threads() == []
    assert not any(t.is_alive() for t in before)
    eng.shutdown()  # idempotent
    assert engine_threads() == []

    x.grad = None
    z = ops.to(x, virtual1) * 2.0
    where = []
    z.grad_fn.register_prehook(lambda g: where.append(threading.current_thread()))
    z.sum().backward()
    assert x.grad.tolist() == [2.0]
    assert _device_workers() == ["threadgrad-virtual:1"]
    assert where[0] in engine_threads() and where[0] not in before
    fut = engine.backward_async((x * 1.0).sum())
    assert fut.result(timeout=30) is None
    assert x.grad.tolist() == [3.0]
    assert engine.get_engine() is eng


@pytest.mark.timeout(60)
def test_shutdown_while_other_threads_run_backward():
    eng = engine.get_engine()
    stop = threading.Event()
    results = []

    def user(i):
        dev = f"virtual:{i}"
        ok = True
        n = 0
        while not stop.is_set() or n < 20:
            x = engine.tensor([float(n)], requires_grad=True)
            (ops.to(x, dev) * ops.to(x, dev)).sum().backward()
            ok = ok and x.grad.tolist() == [2.0 * n]
            n += 1
        results.append(ok)

    threads = [threading.Thread(target=user, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(200):
            eng.shutdown()
    finally:
        stop.set()
        for t in threads:
            t.join(40)
    assert not any(t.is_alive() for t in threads)
    assert results == [True] * 3
    x = engine.tensor([1.0], requires_grad=True)
    (ops.to(x, "virtual:0") * 4.0).sum().backward()
    assert x.grad.tolist() == [4.0]


@pytest.mark.timeout(60)
def test_cpu_only_backward_starts_no_thread():
    engine.get_engine().shutdown()
    x = engine.tensor([1.0], requires_grad=True)
    for _ in range(5):
        (x * x).sum().backward()
    assert engine_threads() == []
    assert x.grad.tolist() == [10.0]


@pytest.mark.timeout(60)
def test_one_worker_per_device_under_concurrent_first_use(run_in_threads):
    engine.get_engine().shutdown()
    dev = devices.get("virtual:7")

    def body(i):
        x = engine.tensor([1.0], requires_grad=True)
        (ops.to(x, dev) * 2.0).sum().backward()
        return x.grad.tolist()

    assert run_in_threads(8, body) == [[2.0]] * 8
    assert _device_workers() == ["threadgrad-virtual:7"]


@pytest.mark.timeout(60)
def test_shutdown_inside_backward_raises():
    x = engine.tensor([1.0], requires_grad=True)
    h = x * 2.0
    h.register_hook(lambda g: engine.get_engine().shutdown())
    with pytest.raises(RuntimeError, match="cannot be called from inside a backward pass"):
        h.sum().backward()


@pytest.mark.timeout(30)
def test_a_task_is_shared_only_once_a_device_worker_gets_one_of_its_nodes() -> None:
    """Note [Shared tasks]: a backward whose nodes all run on the caller routes without the
    GraphTask lock; the first hand-off to a device worker makes it shared (locked) for good,
    and the gradients are the same either way."""
    from threadgrad.engine._state import tls

    seen = []
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = ops.tanh(x) * 3.0
    y.grad_fn.register_prehook(lambda g: seen.append(("cpu only", tls.current_task.shared)))
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3.0 * (1 - np.tanh([1.0, 2.0]) ** 2), rtol=1e-6)

    x.grad = None
    first = ops.tanh(x) * 3.0  # runs on cpu before any hand-off
    first.grad_fn.register_prehook(lambda g: seen.append(("before hop", tls.current_task.shared)))
    v = ops.to(first, "virtual:1") * 2.0
    back = ops.to(v, "cpu")
    back.grad_fn.register_prehook(lambda g: seen.append(("after hop", tls.current_task.shared)))
    back.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6.0 * (1 - np.tanh([1.0, 2.0]) ** 2), rtol=1e-6)
    assert seen == [("cpu only", False), ("after hop", False), ("before hop", True)]


@pytest.mark.timeout(60)
def test_an_error_while_routing_on_a_worker_is_raised_even_if_another_thread_finishes_the_task(monkeypatch):
    """A routing error must be claimed before the failing task's outstanding count drops: once
    it drops, the caller's thread may finish the last task and complete the backward. Here the
    virtual:1 worker fails while routing (a stand-in for any exception inside _route), and its
    _fail is slowed down, so the caller's slow cpu node finishes first; without the claim the
    backward returned normally with x's gradient missing."""
    import time

    from threadgrad.engine import executor as ex

    def on_worker() -> bool:
        return threading.current_thread().name.startswith("threadgrad-virtual")

    real_fail, real_add = ex.Engine._fail, ex._buffer_add

    def slow_fail(self, gt, e, fn, **kw):
        if on_worker():
            time.sleep(0.3)  # widens the window after the decrement; it decides nothing by itself
        return real_fail(self, gt, e, fn, **kw)

    def failing_add(buf, i, g, consumer, streams):
        if on_worker():
            raise RuntimeError("routing failed on purpose")
        return real_add(buf, i, g, consumer, streams)

    monkeypatch.setattr(ex.Engine, "_fail", slow_fail)
    monkeypatch.setattr(ex, "_buffer_add", failing_add)

    class Slow(engine.Function):
        @staticmethod
        def forward(ctx, x, s):
            ctx.s = s
            return x * 1

        @staticmethod
        def backward(ctx, g):
            time.sleep(ctx.s)  # keeps a task of this backward in flight on the caller's thread
            return g, None

    x = engine.tensor([1.0, 2.0], requires_grad=True)
    x2 = engine.tensor([1.0], requires_grad=True)
    p = x * 2  # (recorded first: it runs last, after the slow node below)
    q = Slow.apply(ops.to(x, "virtual:1"), 0.05)  # its ToCopyBackward0 routes into x's buffer on the worker
    r = Slow.apply(x2, 0.2)
    loss = ops.sum(p) + ops.sum(ops.to(q, "cpu")) + ops.sum(r)
    with pytest.raises(RuntimeError, match=r"routing failed on purpose \[raised in ToCopyBackward0 during backward\]"):
        loss.backward()
    monkeypatch.undo()
    t = engine.tensor([1.0], device="virtual:1", requires_grad=True)
    ops.sum(t * 3).backward()  # the worker survived
    assert t.grad.tolist() == [3.0]


@pytest.mark.timeout(60)
def test_sequence_numbers_are_unique_across_threads(run_in_threads):
    """Nodes recorded by 4 threads at once get distinct sequence numbers (the ready queues'
    order rests on them). ``itertools.count`` is atomic on both builds: a C call under the
    GIL, a compare-exchange on free-threaded CPython (docs/architecture.md, section 10)."""
    def body(i):
        x = engine.tensor([1.0, 2.0], requires_grad=True)
        seqs = []
        for _ in range(3000):
            x = ops.mul(x, 1.0)
            seqs.append(x.grad_fn.sequence_nr)
        return seqs

    drawn = [s for seqs in run_in_threads(4, body) for s in seqs]
    assert len(set(drawn)) == len(drawn) == 12000
