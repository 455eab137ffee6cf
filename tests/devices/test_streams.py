"""The cuda device and the executor's stream protocol (Note [Streams] in engine/executor.py),
run without a GPU on the numpy stand-in for cupy in fake_cupy.py.

The ``cuda`` fixture builds ``CudaDevice(0, numpy, fake.cuda)`` and ``CudaDevice(1, ...)``
over one ``FakeCupy(device_count=2)`` and installs them as ``cuda``, ``cuda:0`` and
``cuda:1``; on teardown it stops the engine's workers, removes the devices and restores
``devices.streams_in_use``, so nothing leaks into other test files. Assertions read the
fake's global log, renumbered by :func:`protocol` so event ids start at 1 in each test.
"""
from __future__ import annotations

import doctest
import importlib.util
import os
import pathlib
import threading
import types

import numpy as np
import pytest

from threadgrad import devices
from threadgrad.devices import cuda as cuda_mod
from threadgrad import engine, ops
from threadgrad.devices.cuda import CudaDevice
from fake_cupy import FakeCupy

HERE = pathlib.Path(__file__).resolve().parent


# --- fixtures and helpers -----------------------------------------------------------------

@pytest.fixture
def cuda(monkeypatch):
    """Two stand-in GPUs installed as cuda/cuda:0 and cuda:1; removed again on teardown."""
    fake = FakeCupy(device_count=2)
    dev0 = CudaDevice(0, np, fake.cuda)
    dev1 = CudaDevice(1, np, fake.cuda)
    # Restored after the test: registering a device with streams sets it for the process.
    monkeypatch.setattr(devices, "streams_in_use", devices.streams_in_use)
    names = {"cuda": dev0, "cuda:0": dev0, "cuda:1": dev1}
    before = {name: devices._registry.get(name) for name in names}  # real GPUs, on a GPU machine
    for name, dev in names.items():
        devices.register(name, dev)
    try:
        yield types.SimpleNamespace(fake=fake, api=fake.cuda, Stream=fake.cuda.Stream, dev=dev0, dev1=dev1)
    finally:
        engine.get_engine().shutdown()  # the fake devices' workers stop here
        for name, prev in before.items():
            if prev is None:
                devices.unregister(name)
            else:
                devices.register(name, prev)


def protocol(log: list, ops_too: bool = False) -> list:
    """The log with event ids renumbered 1, 2, ... by first appearance (and without
    ``op`` entries unless ``ops_too``)."""
    ids: dict[int, int] = {}
    out = []
    for e in log:
        if e[0] in ("record", "wait"):
            out.append((e[0], e[1], ids.setdefault(e[2], len(ids) + 1)))
        elif e[0] != "op" or ops_too:
            out.append(e)
    return out


def stream_name(api) -> str:
    """The name of this thread's current stream on its current (stand-in) device."""
    return api.get_current_stream().name


def make_probe(cuda):
    """A custom Function that passes gradients through and records, in backward, the
    current stream, thread and device, and logs an ``op`` entry."""
    seen: list = []

    class Probe(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            seen.append((stream_name(cuda.api), threading.current_thread(), cuda.fake.current_device()))
            cuda.fake.note("probe")
            return g

    return Probe, seen


@pytest.fixture
def note_adds(cuda, monkeypatch):
    """Log ``("op", "add", stream)`` for every Tensor + Tensor on a stand-in GPU (the
    executor sums gradients that meet in an input buffer with ``+``)."""
    orig = engine.Tensor.__add__

    def add(self, other):
        if isinstance(other, engine.Tensor) and other.device.type == "cuda":
            cuda.fake.note("add")
        return orig(self, other)

    monkeypatch.setattr(engine.Tensor, "__add__", add)


# --- devices.get("cuda") and make_device ---------------------------------------------------

@pytest.fixture
def clean_registry(monkeypatch):
    """An empty registry (but cpu) for this test, and streams_in_use restored after it."""
    monkeypatch.setattr(devices, "_registry", {"cpu": devices.cpu})
    monkeypatch.setattr(devices, "streams_in_use", devices.streams_in_use)


def _fake_cupy_module(count=None, error=None):
    fake = FakeCupy(device_count=count or 1)
    if error is not None:
        def boom():
            raise error
        fake.cuda.runtime.getDeviceCount = staticmethod(boom)
    elif count == 0:
        fake.cuda.runtime.getDeviceCount = staticmethod(lambda: 0)
    return types.SimpleNamespace(cuda=fake.cuda, asarray=np.asarray, ndarray=np.ndarray)


def test_get_cuda_without_cupy_says_cupy_is_missing(clean_registry, monkeypatch):
    monkeypatch.setattr(cuda_mod, "_cupy", None)
    monkeypatch.setattr(cuda_mod, "_import_error", ImportError("No module named 'cupy'"))
    for spec in ("cuda", "cuda:0", "cuda:2"):
        with pytest.raises(RuntimeError, match=r"needs cupy.*No module named 'cupy'.*threadgrad\[cuda\]"):
            devices.get(spec)
    assert devices.cuda_available() is False
    assert devices.available() == [devices.cpu]
    assert set(devices._registry) == {"cpu"}  # nothing was registered


def test_get_cuda_without_gpu_says_no_gpu(clean_registry, monkeypatch):
    monkeypatch.setattr(cuda_mod, "_cupy", _fake_cupy_module(count=0))
    monkeypatch.setattr(cuda_mod, "_import_error", None)
    with pytest.raises(RuntimeError, match="cupy is installed but no NVIDIA GPU is visible"):
        devices.get("cuda")
    assert devices.cuda_available() is False
    assert devices.available() == [devices.cpu]


def test_get_cuda_without_driver_names_the_cuda_error(clean_registry, monkeypatch):
    err = RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
    monkeypatch.setattr(cuda_mod, "_cupy", _fake_cupy_module(error=err))
    monkeypatch.setattr(cuda_mod, "_import_error", None)
    monkeypatch.setattr(cuda_mod, "_count_error", None)
    with pytest.raises(RuntimeError, match="no NVIDIA GPU is visible.*cudaErrorNoDevice"):
        devices.get("cuda:0")
    assert devices.cuda_available() is False


def test_get_cuda_index_out_of_range(clean_registry, monkeypatch):
    monkeypatch.setattr(cuda_mod, "_cupy", _fake_cupy_module(count=2))
    monkeypatch.setattr(cuda_mod, "_import_error", None)
    with pytest.raises(RuntimeError, match=r"'cuda:2' does not exist: cupy sees 2 GPU\(s\)"):
        devices.get("cuda:2")


def test_get_cuda_with_cupy_builds_interned_cuda_devices(clean_registry, monkeypatch):
    cp = _fake_cupy_module(count=2)
    monkeypatch.setattr(cuda_mod, "_cupy", cp)
    monkeypatch.setattr(cuda_mod, "_import_error", None)
    d0, d1 = devices.get("cuda:0"), devices.get("cuda:1")
    assert isinstance(d0, CudaDevice) and isinstance(d1, CudaDevice)
    assert devices.get("cuda") is d0 and devices.get("cuda:1") is d1
    assert (d0.type, d0.index, str(d1), repr(d1)) == ("cuda", 0, "cuda:1", "device(type='cuda', index=1)")
    assert d0.xp is cp and d0.cuda_api is cp.cuda
    assert d0.has_streams and d0.needs_worker
    assert devices.streams_in_use is True
    assert devices.cuda_available() is True
    assert devices.available() == [devices.cpu, d0, d1]


# --- CudaDevice on its own: Note [Current device] in devices/cuda.py -----------------------

def test_fake_refuses_a_stream_of_another_device(cuda):
    with cuda.api.Device(1):
        s = cuda.Stream(name="t")
    assert s.device_id == 1
    with pytest.raises(RuntimeError, match=r"stream is created on \(1\) does not match with the current device \(0\)"):
        with s:
            pass
    with pytest.raises(RuntimeError, match="does not match"):
        s.use()


def test_stream_context_makes_the_device_and_stream_current(cuda):
    with cuda.api.Device(1):
        t = cuda.Stream(name="t")
    assert cuda.fake.current_device() == 0
    with cuda.dev1.stream_context(t) as entered:
        assert entered is t
        assert cuda.fake.current_device() == 1
        assert cuda.dev1.current_stream() is t
        assert cuda.dev.current_stream() is cuda.Stream.null  # device 0's stream is untouched
    assert cuda.fake.current_device() == 0
    assert cuda.dev1.current_stream() is cuda.Stream.null


def test_stream_context_restores_after_an_error(cuda):
    s = cuda.Stream(name="s")
    with pytest.raises(KeyError):
        with cuda.dev.stream_context(s):
            raise KeyError("boom")
    assert cuda.dev.current_stream() is cuda.Stream.null
    assert cuda.fake.current_device() == 0


def test_record_and_wait_act_on_the_devices_streams_from_any_thread(cuda):
    with cuda.api.Device(1):
        t = cuda.Stream(name="t")
    # This thread's current device is 0; the methods must still act on device 1.
    ev = cuda.dev1.record_event(t)
    assert ev.device_id == 1 and ev.disable_timing and ev.recorded_on is t
    cuda.dev1.wait_event(cuda.Stream.null, ev)  # device 1's null stream, not device 0's
    ev0 = cuda.dev.record_event(cuda.Stream.null)
    cuda.dev.wait_event(t, ev0)  # a stream may wait for another device's event
    assert protocol(cuda.fake.log) == [("record", "t", 1), ("wait", "null@1", 1), ("record", "null@0", 2), ("wait", "t", 2)]
    assert t.log == [("record", ev.id), ("wait", ev0.id)]
    assert cuda.fake.current_device() == 0


def test_without_the_device_guard_the_fake_would_catch_the_mistake(cuda):
    with cuda.api.Device(1):
        t = cuda.Stream(name="t")
    with pytest.raises(RuntimeError, match="cannot record event"):
        t.record()  # an event made on device 0 recorded on a device-1 stream


@pytest.mark.timeout(60)
def test_current_stream_is_per_thread_and_per_device(cuda):
    s = cuda.Stream(name="s")
    inside = threading.Event()
    release = threading.Event()
    seen = {}

    def other():
        with s:
            seen["other_in"] = cuda.dev.current_stream()
            inside.set()
            release.wait(30)

    th = threading.Thread(target=other)
    th.start()
    assert inside.wait(30)
    seen["main"] = cuda.dev.current_stream()
    release.set()
    th.join(30)
    assert seen == {"other_in": s, "main": cuda.Stream.null}
    with cuda.api.Device(1):
        assert cuda.dev.current_stream() is cuda.Stream.null  # asked by device, not by current device
        with cuda.Stream(name="t") as t:
            assert cuda.dev1.current_stream() is t and cuda.dev.current_stream() is cuda.Stream.null


@pytest.mark.timeout(30)
def test_arrays_synchronize_and_activate(cuda):
    a = cuda.dev1.asarray([1, 2], dtype=np.float32)
    assert a.dtype == np.float32 and a.tolist() == [1.0, 2.0]
    h = cuda.dev1.to_host(a)
    assert h.tolist() == [1.0, 2.0] and not np.shares_memory(h, a)  # a copy, as cupy's get()
    cuda.dev1.synchronize()
    assert cuda.fake.log == [("device_sync", 1)]
    seen = []
    th = threading.Thread(target=lambda: (cuda.dev1.activate(), seen.append(cuda.fake.current_device())))
    th.start()
    th.join(30)
    assert seen == [1] and cuda.fake.current_device() == 0


def test_doctests_of_the_devices_package():
    for mod in (devices, cuda_mod):
        result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, mod.__name__
        assert result.attempted > 0, mod.__name__


# --- (a) a node's backward runs on its forward stream, on the device's worker ----------------

@pytest.mark.timeout(60)
def test_backward_runs_on_the_forward_stream_on_the_cuda_worker(cuda):
    Probe, seen = make_probe(cuda)
    s0, s1, s2 = (cuda.Stream(name=n) for n in ("s0", "s1", "s2"))
    x = engine.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    with s1:
        a = Probe.apply(x)
    with s2:
        b = Probe.apply(a)
    with s0:
        loss = b.sum()
        loss.backward()
        assert stream_name(cuda.api) == "s0"  # backward leaves the caller's stream alone
    assert stream_name(cuda.api) == "null"
    assert [(s, d) for s, _, d in seen] == [("s2", 0), ("s1", 0)]
    workers = {t for _, t, _ in seen}
    assert len(workers) == 1
    (worker,) = workers
    assert worker is not threading.current_thread()
    assert worker.name == "threadgrad-cuda:0"
    assert worker in engine.get_engine().worker_threads()
    assert x.grad.device is cuda.dev and x.grad.tolist() == [1.0, 1.0]


def test_a_node_that_switches_the_workers_stream_does_not_move_the_next_node(cuda):
    # Nodes on the worker's own stream run without a stream context (Note [Worker stream] in
    # engine/executor.py); a backward that switches the thread's current stream or device must
    # still leave the next node on its own stream, as leaving the context would.
    Probe, seen = make_probe(cuda)
    other = cuda.Stream(name="other")
    with cuda.api.Device(1):
        other1 = cuda.Stream(name="other1")

    class Switch(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            seen.append((stream_name(cuda.api), threading.current_thread(), cuda.fake.current_device()))
            other.use()
            cuda.api.Device(1).use()
            other1.use()
            return g

    x = engine.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    Probe.apply(Switch.apply(Probe.apply(x))).sum().backward()
    assert [(s, d) for s, _, d in seen] == [("null", 0), ("null", 0), ("null", 0)]
    assert x.grad.tolist() == [1.0, 1.0]


@pytest.mark.timeout(60)
def test_second_gpu_runs_on_its_own_worker_with_its_device_current(cuda):
    Probe, seen = make_probe(cuda)
    with cuda.api.Device(1):
        t = cuda.Stream(name="t")
        x = engine.tensor([3.0], device="cuda:1", requires_grad=True)
        with t:
            y = Probe.apply(x)
    y.sum().backward()
    ((name, worker, device),) = seen
    assert (name, worker.name, device) == ("t", "threadgrad-cuda:1", 1)
    assert x.grad.device is cuda.dev1 and x.grad.tolist() == [1.0]


@pytest.mark.timeout(60)
def test_leaf_accumulates_on_the_stream_of_its_first_use(cuda):
    s1, s2 = cuda.Stream(name="s1"), cuda.Stream(name="s2")
    x = engine.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    seen = []
    x.register_post_accumulate_grad_hook(lambda t: seen.append((stream_name(cuda.api), t.grad.tolist())))
    with s1:
        h = x * 3.0  # x's AccumulateGrad is made here, on s1
    with s2:
        (h * x).sum().backward()
    assert seen == [("s1", [6.0, 12.0])]


@pytest.mark.timeout(60)
def test_hooks_run_on_the_nodes_stream(cuda):
    s1 = cuda.Stream(name="s1")
    x = engine.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    seen = []
    with s1:
        b = x * 2.0
        b.register_hook(lambda g: seen.append(("tensor", stream_name(cuda.api))))
        b.grad_fn.register_prehook(lambda g: seen.append(("pre", stream_name(cuda.api))))
        b.grad_fn.register_hook(lambda gi, go: seen.append(("post", stream_name(cuda.api))))
        (b * 1.0).sum().backward()
    assert seen == [("tensor", "s1"), ("pre", "s1"), ("post", "s1")]


# --- (b) gradients from two streams meet on a third -----------------------------------------

@pytest.mark.timeout(60)
def test_two_streams_feeding_one_node_are_synced_before_the_sum(cuda, note_adds):
    Probe, seen = make_probe(cuda)
    s0, s1, s2 = (cuda.Stream(name=n) for n in ("s0", "s1", "s2"))
    x = engine.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    with s0:
        a = Probe.apply(x)  # the node where both branches meet: its stream is s0
    with s1:
        b = a * 2.0
    with s2:
        c = a * 3.0
    with s0:
        loss = ops.add(b, c).sum()
        cuda.fake.clear()
        loss.backward()
    assert protocol(cuda.fake.log, ops_too=True) == [
        ("record", "s0", 1), ("wait", "s1", 1),  # AddBackward (s0) -> b's MulBackward (s1)
        ("record", "s0", 2), ("wait", "s2", 2),  # AddBackward (s0) -> c's MulBackward (s2)
        ("record", "s2", 3), ("wait", "s0", 3),  # c's branch (later in forward, so first) -> Probe
        ("record", "s1", 4), ("wait", "s0", 4),  # b's branch -> Probe
        ("op", "add", "s0"),                     # the two gradients summed, on s0, after both waits
        ("op", "probe", "s0"),                   # then Probe's backward, on s0
    ]
    assert [s for s, _, _ in seen] == ["s0"]
    assert x.grad.tolist() == [5.0, 5.0]
    assert x.grad.dtype == np.float32 and x.grad.device is cuda.dev


@pytest.mark.timeout(60)
def test_cross_device_gradient_syncs_the_consumer_stream_on_its_device(cuda):
    s0 = cuda.Stream(name="s0")
    with cuda.api.Device(1):
        t = cuda.Stream(name="t")
    x = engine.tensor([1.0, 2.0], device="cuda:0", requires_grad=True)
    with s0:
        h = x * 2.0
    with cuda.api.Device(1), t:
        y = ops.to(h, "cuda:1") * 5.0
        loss = y.sum()
        cuda.fake.clear()
        loss.backward()
    assert protocol(cuda.fake.log) == [
        ("record", "t", 1), ("wait", "s0", 1),       # ToCopyBackward0 (cuda:1, t) -> MulBackward0 (cuda:0, s0)
        ("record", "s0", 2), ("wait", "null@0", 2),  # leaf x (s0) -> the caller's stream on cuda:0
    ]
    assert x.grad.device is cuda.dev and x.grad.tolist() == [10.0, 10.0]


@pytest.mark.timeout(60)
def test_null_streams_of_two_gpus_are_different_streams(cuda):
    with cuda.api.Device(1):
        x = engine.tensor([1.0, 2.0], device="cuda:1", requires_grad=True)
        h = x * 2.0  # MulBackward0 on cuda:1's null stream
    loss = (ops.to(h, "cuda:0") * 3.0).sum()  # ToCopyBackward0 on cuda:0's null stream
    cuda.fake.clear()
    loss.backward()
    assert protocol(cuda.fake.log) == [("record", "null@0", 1), ("wait", "null@1", 1)]
    assert x.grad.device is cuda.dev1 and x.grad.tolist() == [6.0, 6.0]


@pytest.mark.timeout(60)
def test_gradients_meeting_on_a_second_gpu_are_summed_from_the_cpu_thread(cuda, note_adds):
    """Two cpu nodes produce cuda:1 gradients for one cuda:1 node, so the sum runs on the
    caller's thread, whose current device is 0: the device guard must switch to 1."""
    with cuda.api.Device(1):
        t = cuda.Stream(name="t")
        x = engine.tensor([1.0, 2.0], device="cuda:1", requires_grad=True)
        with t:
            h = x * 2.0
    loss = (ops.to(h, "cpu") * 3.0 + ops.to(h, "cpu") * 4.0).sum()
    cuda.fake.clear()
    loss.backward()
    assert cuda.fake.current_device() == 0
    assert ("op", "add", "t") in cuda.fake.log
    assert x.grad.device is cuda.dev1 and x.grad.tolist() == [14.0, 14.0]


# --- (c) .grad is usable on the caller's stream when backward returns ------------------------

@pytest.mark.timeout(60)
def test_caller_stream_waits_for_the_leaf_stream(cuda):
    s1, s2 = cuda.Stream(name="s1"), cuda.Stream(name="s2")
    x = engine.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    with s1:
        h = x * 2.0  # x accumulates on s1
    with s2:
        loss = h.sum()
        cuda.fake.clear()
        loss.backward()  # the caller's stream is s2
    assert protocol(cuda.fake.log) == [
        ("record", "s2", 1), ("wait", "s1", 1),  # SumBackward0 (s2) -> MulBackward0 (s1)
        ("record", "s1", 2), ("wait", "s2", 2),  # before returning: caller's s2 waits for x's s1
    ]
    assert s2.log[-1][0] == "wait"
    assert x.grad.tolist() == [2.0, 2.0]


@pytest.mark.timeout(60)
def test_caller_waits_once_per_distinct_leaf_stream(cuda):
    s1, s2, s3 = (cuda.Stream(name=n) for n in ("s1", "s2", "s3"))
    x = engine.tensor([1.0], device="cuda", requires_grad=True)
    w = engine.tensor([2.0], device="cuda", requires_grad=True)
    v = engine.tensor([4.0], device="cuda", requires_grad=True)
    with s1:
        a = x * 1.0
        a2 = v * 1.0  # v accumulates on s1 too
    with s3:
        b = w * 1.0
    with s2:
        loss = (a * b + a2).sum()
        cuda.fake.clear()
        loss.backward()
    log = protocol(cuda.fake.log)
    # Inside the graph only s1 and s3 wait (for s2's nodes); the caller's s2 waits last, once
    # for each distinct leaf stream (in either order).
    assert [e for e in log[:-4] if e[0] == "wait" and e[1] == "s2"] == []
    r1, w1, r2, w2 = log[-4:]
    assert {r1[1], r2[1]} == {"s1", "s3"} and r1[0] == r2[0] == "record"
    assert w1 == ("wait", "s2", r1[2]) and w2 == ("wait", "s2", r2[2])
    assert (x.grad.tolist(), w.grad.tolist(), v.grad.tolist()) == ([2.0], [1.0], [1.0])


@pytest.mark.timeout(60)
def test_no_caller_wait_when_the_leaf_is_on_the_callers_stream(cuda):
    s1, s2 = cuda.Stream(name="s1"), cuda.Stream(name="s2")
    x = engine.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    with s1:
        a = x * 1.0  # x accumulates on s1
    with s2:
        b = a * 2.0
    with s1:
        loss = b.sum()
        cuda.fake.clear()
        loss.backward()
    assert protocol(cuda.fake.log) == [
        ("record", "s1", 1), ("wait", "s2", 1),  # SumBackward0 (s1) -> b's MulBackward0 (s2)
        ("record", "s2", 2), ("wait", "s1", 2),  # b's MulBackward0 (s2) -> a's MulBackward0 (s1)
    ]                                            # x's stream is the caller's: no final wait
    assert x.grad.tolist() == [2.0, 2.0]


@pytest.mark.timeout(60)
def test_grad_result_is_synced_to_the_callers_stream(cuda):
    s1, s2 = cuda.Stream(name="s1"), cuda.Stream(name="s2")
    x = engine.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    with s1:
        h = x * 2.0
    with s2:
        loss = h.sum()
        cuda.fake.clear()
        (g,) = engine.grad(loss, x)
    assert protocol(cuda.fake.log) == [("record", "s2", 1), ("wait", "s1", 1), ("record", "s1", 2), ("wait", "s2", 2)]
    assert g.tolist() == [2.0, 2.0]


@pytest.mark.timeout(60)
def test_backward_async_syncs_the_callers_stream(cuda):
    s1, s2 = cuda.Stream(name="s1"), cuda.Stream(name="s2")
    x = engine.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    with s1:
        h = x * 2.0
    with s2:
        loss = h.sum()
        cuda.fake.clear()
        engine.backward_async(loss).result(timeout=30)
    assert protocol(cuda.fake.log) == [("record", "s2", 1), ("wait", "s1", 1), ("record", "s1", 2), ("wait", "s2", 2)]
    assert x.grad.tolist() == [2.0, 2.0]


@pytest.mark.timeout(60)
def test_root_gradient_is_synced(cuda):
    s1 = cuda.Stream(name="s1")
    x = engine.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    with s1:
        loss = (x * 2.0).sum()
    cuda.fake.clear()
    loss.backward()  # the root gradient (ones) is made on the caller's null stream
    assert protocol(cuda.fake.log) == [
        ("record", "null@0", 1), ("wait", "s1", 1),  # GraphRoot (caller's stream) -> SumBackward0 (s1)
        ("record", "s1", 2), ("wait", "null@0", 2),  # leaf (s1) -> caller
    ]


@pytest.mark.timeout(60)
def test_gradient_from_a_cpu_node_is_synced(cuda):
    s1 = cuda.Stream(name="s1")
    x = engine.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    with s1:
        y = ops.to(x * 1.0, "cpu")
    loss = (y * 3.0).sum()
    cuda.fake.clear()
    loss.backward()
    assert protocol(cuda.fake.log) == [
        ("record", "null@0", 1), ("wait", "s1", 1),  # ToCopyBackward0 (cpu thread, null) -> MulBackward0 (s1)
        ("record", "s1", 2), ("wait", "null@0", 2),  # leaf (s1) -> caller
    ]


# --- (d) one stream everywhere: no events at all ---------------------------------------------

@pytest.mark.timeout(60)
def test_default_stream_everywhere_records_nothing(cuda):
    x = engine.tensor([[1.0, 2.0], [3.0, 4.0]], device="cuda", requires_grad=True)
    w = engine.tensor([[0.5], [0.25]], device="cuda", requires_grad=True)
    loss = (ops.tanh(x @ w) * x.sum(dim=1, keepdim=True)).sum()
    cuda.fake.clear()
    loss.backward()
    assert cuda.fake.log == []
    assert x.grad is not None and w.grad is not None


@pytest.mark.timeout(60)
def test_one_user_stream_everywhere_records_nothing(cuda):
    s1 = cuda.Stream(name="s1")
    with s1:
        x = engine.tensor([1.0, 2.0], device="cuda", requires_grad=True)
        a, b = x * 2.0, x * 3.0
        loss = (a * b).sum()
        cuda.fake.clear()
        loss.backward()
    assert cuda.fake.log == []
    assert s1.log == []
    assert x.grad.tolist() == [12.0, 24.0]


@pytest.mark.timeout(60)
def test_cpu_and_virtual_graphs_touch_no_stream(cuda, virtual1):
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    (ops.to(x, virtual1) * 2.0).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
    assert cuda.fake.log == []


# --- (e) many threads -----------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_multithreaded_backward_on_cuda_each_thread_on_its_own_stream(cuda, run_in_threads):
    n_threads, iters = 8, 10
    w = engine.tensor([1.0, 2.0, 3.0], device="cuda", requires_grad=True)
    keep = w * 1.0  # makes w's AccumulateGrad now, on the null stream, and keeps it alive
    streams = [cuda.Stream(name=f"t{i}") for i in range(n_threads)]

    def body(i):
        s = streams[i]
        with s:
            x = engine.tensor([1.0, 1.0, 1.0], device="cuda", requires_grad=True)
            for _ in range(iters):
                loss = (w * float(i + 1) + x * w).sum()
                loss.backward()
                assert stream_name(cuda.api) == f"t{i}"
        return x.grad.tolist()

    results = run_in_threads(n_threads, body)
    assert results == [[float(iters) * v for v in (1.0, 2.0, 3.0)]] * n_threads
    total = sum(range(1, n_threads + 1)) + n_threads  # d/dw of w*(i+1) + x*w, x = 1
    assert w.grad.tolist() == [float(iters * total)] * 3
    recorded = {e[2]: e[1] for e in cuda.fake.log if e[0] == "record"}
    for s in streams:
        # Per backward: w's AccumulateGrad (null) waits twice for s (two gradients reach it
        # from nodes on s), then the caller's s waits for w's null stream.
        assert [e[0] for e in s.log] == ["record", "record", "wait"] * iters
        assert all(recorded[eid] == "null@0" for kind, eid in s.log if kind == "wait")
    assert keep.grad_fn is not None


@pytest.mark.timeout(60)
def test_many_threads_share_one_graph_on_two_streams(cuda, run_in_threads):
    s1, s2 = cuda.Stream(name="s1"), cuda.Stream(name="s2")
    x = engine.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    with s1:
        a = x * 2.0
    with s2:
        b = x * 3.0
    loss = (a + b).sum()
    run_in_threads(8, lambda i: loss.backward(retain_graph=True))
    assert x.grad.tolist() == [40.0, 40.0]


# --- (f) moving between cpu, virtual and cuda -------------------------------------------------

@pytest.mark.timeout(60)
def test_to_between_cpu_virtual_and_cuda_and_back(cuda, virtual1):
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    c = ops.to(x, "cuda")
    assert c.device is cuda.dev and not np.shares_memory(c._data, x._data)
    v = ops.to(c * 2.0, virtual1)
    assert v.device is virtual1 and not np.shares_memory(v._data, c._data)
    c2 = ops.to(v * 3.0, cuda.dev)
    back = ops.to(c2 + c, "cpu")
    assert back.device is devices.cpu and not np.shares_memory(back._data, c2._data)
    assert back.tolist() == [7.0, 14.0]
    (back * back).sum().backward()
    assert x.grad.device is devices.cpu
    assert x.grad.tolist() == [2 * 7.0 * 7.0, 2 * 14.0 * 7.0]


@pytest.mark.timeout(60)
def test_cuda_leaf_through_cpu_and_virtual(cuda, virtual1):
    x = engine.tensor([1.0, -2.0], device="cuda", requires_grad=True, dtype=np.float64)
    y = ops.to(ops.to(x, "cpu") * 3.0, virtual1)
    z = ops.to(ops.tanh(y), "cuda:1") + 1.0
    z.sum().backward()
    assert x.grad.device is cuda.dev and x.grad.dtype == np.float64
    np.testing.assert_allclose(x.grad.tolist(), 3.0 * (1 - np.tanh([3.0, -6.0]) ** 2), rtol=1e-12)


@pytest.mark.timeout(60)
def test_to_with_dtype_on_cuda(cuda):
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = ops.to(x, "cuda", np.float64)
    assert y.device is cuda.dev and y.dtype == np.float64
    (y * y).sum().backward()
    assert x.grad.device is devices.cpu and x.grad.dtype == np.float32
    assert x.grad.tolist() == [2.0, 4.0]


def test_tensor_api_on_cuda(cuda):
    t = engine.tensor([[1.0, 2.0]], device="cuda")
    assert t.device is cuda.dev and str(t.device) == "cuda:0"
    host = t.numpy()
    assert host.tolist() == [[1.0, 2.0]] and not np.shares_memory(host, t._data)
    assert t.cpu().device is devices.cpu
    assert engine.zeros_like(t).device is cuda.dev
    assert engine.ones(2, device="cuda:1").device is cuda.dev1
    with pytest.raises(RuntimeError, match="cuda:0") as info:
        t + engine.tensor([[1.0, 2.0]])
    assert "cpu" in str(info.value)


# --- (g) ops give the same values and gradients on cuda as on cpu ----------------------------

REPRESENTATIVE = {
    "add": lambda a, b: ops.add(a, b),
    "mul": lambda a, b: ops.mul(a, b),
    "matmul": lambda a, b: ops.matmul(a, b.transpose(0, 1)),
    "sum": lambda a, b: ops.sum(a * b, dim=1),
    "tanh": lambda a, b: ops.tanh(a) + b,
    "exp": lambda a, b: ops.exp(a) * b,
    "getitem": lambda a, b: a[1:, ::2] * b[0, 0],
    "reshape": lambda a, b: ops.reshape(a, (3, 2)) @ ops.reshape(b, (2, 3)),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(REPRESENTATIVE))
def test_representative_ops_match_cpu(cuda, name, dtype):
    rng = np.random.default_rng(7)
    a0, b0 = rng.standard_normal((2, 3)).astype(dtype), rng.standard_normal((2, 3)).astype(dtype)
    fn = REPRESENTATIVE[name]
    results = []
    for dev in ("cpu", "cuda"):
        a = engine.tensor(a0, device=dev, requires_grad=True)
        b = engine.tensor(b0, device=dev, requires_grad=True)
        out = fn(a, b)
        assert out.device is devices.get(dev) and out.dtype == dtype
        (out * out).sum().backward()
        assert a.grad.device is devices.get(dev) and a.grad.dtype == dtype
        results.append((out.detach().numpy(), a.grad.numpy(), b.grad.numpy()))
    for cpu_arr, cuda_arr in zip(*results):
        np.testing.assert_array_equal(cpu_arr, cuda_arr)


def _load_op_samples():
    """tests/ops/samples.py's SAMPLES table (owned by the op tests), or the reason it is unusable."""
    path = HERE.parent / "ops" / "samples.py"
    if not path.exists():
        return None, f"{path} does not exist"
    spec = importlib.util.spec_from_file_location("_devices_op_samples", path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001 - the op tests report a broken samples file themselves
        return None, f"tests/ops/samples.py failed to import: {e!r}"
    return getattr(mod, "SAMPLES", None), "tests/ops/samples.py has no SAMPLES"


_SAMPLES, _SAMPLES_WHY = _load_op_samples()


def _flat(result) -> list:
    if isinstance(result, engine.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for r in result for t in _flat(r)]
    return []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(ops.REGISTRY))
def test_every_registered_op_matches_cpu(cuda, name):
    """Every sample of tests/ops/samples.py, run on cpu and on the stand-in GPU: equal
    values, and equal gradients for a ones gradient on every differentiable output."""
    if _SAMPLES is None:
        pytest.skip(_SAMPLES_WHY)
    if name not in _SAMPLES:
        pytest.skip(f"no samples for '{name}' in tests/ops/samples.py")
    op = ops.REGISTRY[name]
    for sample in _SAMPLES[name]():
        cpu_in = [t.detach().requires_grad_(t.requires_grad) for t in sample.tensors]
        cuda_in = [ops.to(t.detach(), cuda.dev).requires_grad_(t.requires_grad) for t in sample.tensors]
        outs = [_flat(sample.run(op, *ins)) for ins in (cpu_in, cuda_in)]
        assert len(outs[0]) == len(outs[1]), sample
        for a, b in zip(*outs):
            if name != "to":  # to moves to the device it is given
                assert b.device is cuda.dev, sample
            np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy(), err_msg=repr(sample))
        diff = [[o for o in out if o.requires_grad] for out in outs]
        if not diff[0]:
            continue
        for out in diff:
            engine.backward(out, [engine.ones_like(o) for o in out])
        for a, b in zip(cpu_in, cuda_in):
            assert (a.grad is None) == (b.grad is None), sample
            if a.grad is not None:
                assert b.grad.device is cuda.dev, sample
                np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy(), err_msg=repr(sample))


# --- nothing leaks ----------------------------------------------------------------------------

def test_the_fake_device_does_not_leak(cupy_importable):
    """Runs after the tests above (file order): the stand-ins are gone from the registry and
    their workers are stopped."""
    for dev in list(devices._registry.values()):
        assert not (isinstance(dev, CudaDevice) and dev.xp is np), dev
    if not cupy_importable:
        assert devices.streams_in_use is False
        assert not [t for t in engine.get_engine().worker_threads() if t.name.startswith("threadgrad-cuda")]
        with pytest.raises(RuntimeError, match="cupy"):
            devices.get("cuda")


@pytest.mark.timeout(60)
def test_a_device_worker_that_cannot_start_fails_the_backward_instead_of_hanging():
    import numpy

    from threadgrad.devices.cuda import CudaDevice

    class BrokenApi:
        class Device:
            def __init__(self, index):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def use(self):
                raise OSError("driver gone")

        @staticmethod
        def get_current_stream(*args):
            return None

    broken = CudaDevice(7, numpy, BrokenApi)
    devices.register("cuda:7", broken)
    try:
        x = engine.tensor([1.0, 2.0], requires_grad=True)
        y = ops.to(x, "cuda:7") * 2.0
        with pytest.raises(RuntimeError, match=r"the worker thread of cuda:7 could not start: OSError\('driver gone'\)"):
            y.sum().backward()
        (x * 3.0).sum().backward()  # the engine stays usable
        assert x.grad.tolist() == [3.0, 3.0]
    finally:
        engine.get_engine().shutdown()
        devices.unregister("cuda:7")


# --- fork after GPU use (Note [Fork] in devices/__init__.py) ---------------------------------

@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_after_gpu_use_refuses_cuda_and_still_runs_cpu_backward(cuda):
    from threadgrad import ops
    from fork_util import run_in_fork

    class NotForkSafe(CudaDevice):  # stands for a GPU of the real cupy, which a child cannot use
        __slots__ = ()

        def fork_safe(self) -> bool:
            return False

    gpu = NotForkSafe(0, np, cuda.api)
    devices.register("cuda:0", gpu)  # (the fixture restores the registry afterwards)
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    ops.sum(ops.mul(ops.to(x, "cuda:0"), 3.0)).backward()  # the parent used the "GPU"
    assert x.grad.tolist() == [3.0, 3.0] and devices.streams_in_use
    def child() -> int:
        if "cuda:0" in devices._registry or "cuda:1" not in devices._registry:
            return 2  # only the GPU that is not fork-safe leaves
        try:
            devices.get("cuda:0")
            return 3
        except RuntimeError as e:
            if "Cannot re-initialize CUDA in forked subprocess" not in str(e):
                return 4
        y = engine.tensor([1.0, 2.0], requires_grad=True)
        v = ops.to(y, "virtual:1")
        ops.sum(ops.to(ops.mul(v, v), "cpu")).backward()
        return 0 if y.grad.tolist() == [2.0, 4.0] else 5

    code = run_in_fork(child)
    assert code == 0, f"child failed with code {code}"
    assert devices.get("cuda:0") is gpu and devices.streams_in_use  # the parent is untouched
