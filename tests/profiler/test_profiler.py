"""threadgrad.profiler: what the timeline records, and the Trace Event JSON it writes."""
from __future__ import annotations

import doctest
import json
import sys
import threading

import pytest

import threadgrad as tg
from threadgrad import engine, ops
from threadgrad.engine import executor
from threadgrad.profiler import profile


def _chain(x):
    return ops.tanh(x * 2).sum()


def test_docstring_examples():
    import importlib

    for name in ("", "._tables", "._chrome", "._plot", "._recorder"):
        mod = importlib.import_module("threadgrad.profiler" + name)
        assert doctest.testmod(mod, optionflags=doctest.ELLIPSIS).failed == 0


def test_a_chain_on_the_caller_thread():
    x = engine.ones(3, requires_grad=True)
    y = _chain(x)
    with profile() as prof:
        y.backward()
    nodes = [e for e in prof.events() if e.kind == "node"]
    assert [e.name for e in nodes] == ["GraphRoot", "SumBackward0", "TanhBackward0", "MulBackward0", "AccumulateGrad"]
    assert {e.thread for e in nodes} == {f"caller ({threading.current_thread().name})"}
    assert {e.device for e in nodes} == {"cpu"}
    assert {(e.task, e.depth) for e in nodes} == {(1, 0)}
    (call,) = [e for e in prof.events() if e.kind == "call"]
    assert call.name == "backward" and call.task == 1
    for a, b in zip(nodes, nodes[1:]):  # one thread: the runs follow each other
        assert a.start_us + a.duration_us <= b.start_us
    for e in nodes:  # inside the call's span
        assert call.start_us <= e.start_us and e.start_us + e.duration_us <= call.start_us + call.duration_us
    # A chain continues on this thread without queueing (Note [Continuation]): no queue wait.
    assert all(e.wait_us is None for e in nodes)
    assert prof.handoffs() == []
    assert prof.threads() == [f"caller ({threading.current_thread().name})"]


def test_the_profiler_is_off_outside_the_block_even_after_an_error():
    assert executor._profiler is None
    with pytest.raises(ZeroDivisionError):
        with profile():
            assert executor._profiler is not None
            1 / 0
    assert executor._profiler is None
    x = engine.ones(2, requires_grad=True)
    with profile() as prof:
        pass
    _chain(x).backward()  # after the block: not recorded
    assert prof.events() == []


def test_one_profile_at_a_time():
    with profile():
        with pytest.raises(RuntimeError, match="already active"):
            profile().start()
    p = profile()
    with pytest.raises(RuntimeError, match="has not run"):
        p.events()
    with p:
        pass
    with pytest.raises(RuntimeError, match="already started"):
        p.start()


@pytest.mark.timeout(60)
def test_a_cross_device_backward_has_two_lanes_and_hand_offs_both_ways(virtual1):
    w = engine.randn(4, 4, requires_grad=True)
    xv = ops.to(w, virtual1)
    y = ops.to(ops.tanh(xv @ xv), "cpu") * 3
    with profile() as prof:
        y.sum().backward()
    caller = f"caller ({threading.current_thread().name})"
    assert prof.threads() == [caller, "virtual:1 worker"]
    by_name = {e.name + "@" + e.thread: e for e in prof.events() if e.kind == "node"}
    for name in ("TanhBackward0", "MmBackward0", "ToCopyBackward0"):
        e = by_name[name + "@virtual:1 worker"]
        assert e.device == "virtual:1"
    assert by_name["ToCopyBackward0@" + caller].device == "cpu"
    assert by_name["AccumulateGrad@" + caller].device == "cpu"
    # The worker's first node was queued by the caller; the leaf's node by the worker.
    assert by_name["TanhBackward0@virtual:1 worker"].wait_us >= 0
    assert by_name["AccumulateGrad@" + caller].wait_us >= 0
    kinds = [(h.kind, h.src_thread, h.dst_thread) for h in prof.handoffs()]
    assert kinds == [("device hand-off", caller, "virtual:1 worker"), ("device hand-off", "virtual:1 worker", caller)]
    go, back = prof.handoffs()
    assert go.src_us <= go.dst_us == by_name["TanhBackward0@virtual:1 worker"].start_us
    assert back.src_us <= back.dst_us == by_name["AccumulateGrad@" + caller].start_us


class _Reentrant(engine.Function):
    """Its backward runs a backward of its own (torch's reentrant pattern)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 1.0

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        with engine.enable_grad():
            inner = x.detach().requires_grad_()
            (ops.tanh(inner) * 1.0).sum().backward()
        return g * inner.grad


def test_a_reentrant_backward_is_a_nested_call_with_its_own_task_and_depth():
    x = engine.ones(2, requires_grad=True)
    y = _Reentrant.apply(x).sum()
    with profile() as prof:
        y.backward()
    events = prof.events()
    calls = [e for e in events if e.kind == "call"]
    assert [(c.name, c.task, c.depth) for c in calls] == [("backward", 1, 0), ("reentrant backward", 2, 1)]
    outer = [e for e in events if e.kind == "node" and e.task == 1]
    inner = [e for e in events if e.kind == "node" and e.task == 2]
    assert {e.depth for e in inner} == {1} and "TanhBackward0" in [e.name for e in inner]
    (fn,) = [e for e in outer if e.name == "_ReentrantBackward"]
    for e in inner + [calls[1]]:  # nested in the node that started it, on its thread
        assert e.thread == fn.thread
        assert fn.start_us <= e.start_us and e.start_us + e.duration_us <= fn.start_us + fn.duration_us
    table = prof.key_averages()
    row = next(a for a in table if a.name == "_ReentrantBackward")
    inner_total = sum(e.duration_us for e in inner)
    assert row.self_us == pytest.approx(fn.duration_us - inner_total, abs=1e-3)


@pytest.mark.timeout(60)
def test_past_the_recursion_limit_the_reentrant_call_runs_on_a_pool_thread():
    eng = engine.get_engine()
    old = eng.max_recursion_depth
    eng.max_recursion_depth = 0
    try:
        x = engine.ones(2, requires_grad=True)
        y = _Reentrant.apply(x).sum()
        with profile() as prof:
            y.backward()
    finally:
        eng.max_recursion_depth = old
    inner = [e for e in prof.events() if e.kind == "node" and e.task == 2]
    assert inner and {e.thread for e in inner} == {inner[0].thread}
    assert inner[0].thread.startswith("pool ")
    assert prof.threads()[-1] == inner[0].thread
    assert ("pool hand-off", prof.threads()[0], inner[0].thread) in [(h.kind, h.src_thread, h.dst_thread)
                                                                      for h in prof.handoffs()]


@pytest.mark.timeout(60)
def test_backward_async_is_handed_to_a_pool_thread():
    x = engine.ones(3, requires_grad=True)
    y = _chain(x)
    with profile() as prof:
        engine.backward_async(y).result(timeout=30)
    calls = [e for e in prof.events() if e.kind == "call"]
    assert [c.name for c in calls] == ["backward_async (hand-off)", "backward"]
    hand, call = calls
    assert hand.thread.startswith("caller") and call.thread.startswith("pool ")
    (h,) = prof.handoffs()
    assert (h.kind, h.src_thread, h.dst_thread) == ("pool hand-off", hand.thread, call.thread)
    assert h.dst_us <= call.start_us
    assert {e.thread for e in prof.events() if e.kind == "node"} == {call.thread}


@pytest.mark.timeout(120)
def test_concurrent_backward_calls_from_several_threads_are_all_recorded(virtual1):
    n_threads, calls = 4, 5
    x = engine.ones(8, requires_grad=True)
    barrier = threading.Barrier(n_threads)
    errors = []

    def work():
        try:
            barrier.wait(timeout=30)
            for _ in range(calls):
                y = ops.to(ops.tanh(ops.to(x, virtual1) * 2), "cpu").sum()
                engine.grad(y, x)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    with profile() as prof:
        threads = [threading.Thread(target=work, name=f"trainer-{i}") for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert not errors
    events = prof.events()
    call_events = [e for e in events if e.kind == "call"]
    assert len(call_events) == n_threads * calls
    assert len({e.task for e in call_events}) == n_threads * calls
    # Per call: GraphRoot, Sum, ToCopy (cpu), then Tanh, Mul, ToCopy on the worker, and the
    # leaf's AccumulateGrad (grad() runs it to capture the gradient).
    nodes = [e for e in events if e.kind == "node"]
    assert len(nodes) == 7 * n_threads * calls
    per_task: dict = {}
    for e in nodes:
        per_task.setdefault(e.task, []).append(e)
    assert all(len(v) == 7 for v in per_task.values())
    assert all(sum(e.thread == "virtual:1 worker" for e in v) == 3 for v in per_task.values())
    assert set(prof.threads()) == {f"caller (trainer-{i})" for i in range(n_threads)} | {"virtual:1 worker"}
    assert len(prof.handoffs()) == 2 * n_threads * calls


def test_a_failing_node_is_recorded_and_the_profile_stays_usable():
    class Boom(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            raise ValueError("boom")

    x = engine.ones(2, requires_grad=True)
    with profile() as prof:
        with pytest.raises(ValueError, match="boom"):
            Boom.apply(x).sum().backward()
        _chain(x).backward()
    names = [e.name for e in prof.events() if e.kind == "node"]
    assert "BoomBackward" in names and names[-1] == "AccumulateGrad"
    assert [e.task for e in prof.events() if e.kind == "call"] == [1, 2]


def test_record_forward_times_ops_and_links_them_to_their_nodes(tmp_path):
    x = engine.ones(3, requires_grad=True)
    before = sys.getprofile()
    with profile(record_forward=True) as prof:
        y = _chain(x)
        with engine.no_grad():
            ops.exp(x)  # an op that records no node: still timed
        y.backward(create_graph=True)  # its backward formulas run ops: recorded as nodes only
    assert sys.getprofile() is before
    ops_ = [e for e in prof.events() if e.kind == "op"]
    assert [e.name for e in ops_] == ["mul", "tanh", "sum", "exp"]
    nodes = {e.sequence_nr: e.name for e in prof.events() if e.kind == "node"}
    assert [nodes[e.sequence_nr] for e in ops_[:3]] == ["MulBackward0", "TanhBackward0", "SumBackward0"]
    assert ops_[3].sequence_nr is None
    path = tmp_path / "fwd.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    assert sum(1 for e in events if e["ph"] == "s" and e["cat"] == "fwdbwd") == 3
    _check_trace(events)


def test_record_forward_names_custom_functions():
    x = engine.ones(2, requires_grad=True)
    with profile(record_forward=True) as prof:
        _Reentrant.apply(x)
    assert [e.name for e in prof.events() if e.kind == "op"] == ["_Reentrant.apply", "mul"]  # by start: mul runs inside


# -- the Trace Event format --------------------------------------------------------------

_REQUIRED = {"X": {"name", "ph", "ts", "dur", "pid", "tid"}, "M": {"name", "ph", "pid", "tid", "args"},
             "s": {"name", "cat", "ph", "id", "ts", "pid", "tid"}, "f": {"name", "cat", "ph", "id", "ts", "pid", "tid"}}


def _check_trace(events: list) -> None:
    """The Trace Event format's rules that viewers depend on: required keys per phase,
    numeric times, complete events that nest per thread, flows whose start and end match and
    bind to a span, and one thread_name per row."""
    for e in events:
        assert e["ph"] in _REQUIRED, e
        assert _REQUIRED[e["ph"]] <= set(e), e
        if "ts" in e:
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
    spans: dict = {}
    for e in events:
        if e["ph"] == "X":
            assert e["dur"] >= 0
            spans.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for row in spans.values():  # complete events on one thread nest or follow (no partial overlap)
        row.sort(key=lambda s: (s[0], -s[1]))
        stack: list = []
        for a, b in row:
            while stack and stack[-1] <= a:
                stack.pop()
            assert not stack or b <= stack[-1] + 1e-9, "overlapping spans on one thread"
            stack.append(b)
    names = [(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert len(names) == len(set(names)), "a row named twice"
    assert set(spans) <= set(names), "a row without a thread_name"
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys()
    for i, s in starts.items():
        f = ends[i]
        assert (s["name"], s["cat"]) == (f["name"], f["cat"]) and s["ts"] <= f["ts"]
        assert any(a <= s["ts"] <= b for a, b in spans[(s["pid"], s["tid"])]), "a flow starts outside any span"
        if f.get("bp") == "e":
            assert any(a <= f["ts"] <= b for a, b in spans[(f["pid"], f["tid"])]), "a flow ends outside any span"
        else:  # bound to the next span that starts on its row
            assert any(a >= f["ts"] for a, b in spans[(f["pid"], f["tid"])])


@pytest.mark.timeout(60)
def test_the_chrome_trace_follows_the_trace_event_format(tmp_path, virtual1):
    # As torch's test_profiler_tracing: export, then load the file back and check it.
    eng = engine.get_engine()
    old = eng.max_recursion_depth
    eng.max_recursion_depth = 0
    try:
        w = engine.randn(4, 4, requires_grad=True)
        with profile(record_forward=True) as prof:
            y = ops.to(ops.tanh(ops.to(w, virtual1) @ ops.to(w, virtual1)), "cpu")
            (_Reentrant.apply(y) * 2).sum().backward()
            engine.backward_async(_chain(w)).result(timeout=30)
    finally:
        eng.max_recursion_depth = old
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    _check_trace(events)
    rows = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert rows == set(prof.threads())
    assert {"virtual:1 worker"} < rows and any(r.startswith("pool ") for r in rows)
    x_nodes = [e for e in events if e["ph"] == "X" and e["cat"] == "backward node"]
    assert len(x_nodes) == sum(1 for e in prof.events() if e.kind == "node")
    for e in x_nodes:
        assert {"device", "graph_task", "reentrant_depth", "thread"} <= set(e["args"])
    kinds = {e["name"] for e in events if e["ph"] == "s"}
    assert {"device hand-off", "pool hand-off", "fwdbwd"} <= kinds


def test_the_format_check_catches_broken_traces():
    good = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "a"}},
            {"name": "n", "ph": "X", "ts": 0, "dur": 5, "pid": 1, "tid": 1}]
    _check_trace(good)
    bad_cases = [
        good + [{"name": "m", "ph": "X", "ts": 3, "dur": 5, "pid": 1, "tid": 1}],  # partial overlap
        good + [{"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "b"}}],  # named twice
        good + [{"name": "n", "ph": "X", "ts": 0, "dur": 5, "pid": 1, "tid": 2}],  # unnamed row
        good + [{"name": "h", "cat": "c", "ph": "s", "id": 1, "ts": 1, "pid": 1, "tid": 1}],  # no end
        good + [{"name": "n", "ph": "X", "ts": 0, "pid": 1, "tid": 1}],  # no dur
    ]
    for events in bad_cases:
        with pytest.raises(AssertionError):
            _check_trace(events)


# -- key_averages and the plot -------------------------------------------------------------

def test_key_averages_counts_and_times():
    x = engine.ones(3, requires_grad=True)
    with profile() as prof:
        for _ in range(3):
            _chain(x).backward()
    avg = {a.name: a for a in prof.key_averages()}
    nodes = [e for e in prof.events() if e.kind == "node"]
    for name in ("SumBackward0", "TanhBackward0", "MulBackward0", "AccumulateGrad", "GraphRoot"):
        runs = [e for e in nodes if e.name == name]
        assert avg[name].count == 3 == len(runs)
        assert avg[name].total_us == pytest.approx(sum(e.duration_us for e in runs))
        assert avg[name].self_us == pytest.approx(avg[name].total_us)  # nothing nested
        assert avg[name].max_us == pytest.approx(max(e.duration_us for e in runs))
    table = prof.key_averages().table(sort_by="count", row_limit=2)
    lines = table.splitlines()
    assert lines[1].split()[:3] == ["Name", "Kind", "Self"]
    assert len([ln for ln in lines if ln.split() and ln.split()[0] in avg]) == 2
    assert "Self time total" in lines[-1]
    assert prof.key_averages().table(sort_by="self_cpu_time_total")  # torch's key
    with pytest.raises(ValueError, match="unknown sort_by 'bogus'"):
        prof.key_averages().table(sort_by="bogus")


@pytest.mark.timeout(120)
def test_plot_draws_one_lane_per_thread(tmp_path, virtual1):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    w = engine.randn(4, 4, requires_grad=True)
    with profile(record_forward=True) as prof:
        y = ops.to(ops.tanh(ops.to(w, virtual1) * 2), "cpu").sum()
        y.backward()
    path = tmp_path / "timeline.png"
    prof.plot(str(path))
    img = imread(str(path))
    assert img.shape[0] > 100 and img.shape[1] > 1000
    # The virtual:1 nodes' colour (the second device colour, #DD8452) is on the picture.
    orange = (abs(img[..., 0] - 0xDD / 255) < 0.02) & (abs(img[..., 1] - 0x84 / 255) < 0.02)
    assert orange.sum() > 50
