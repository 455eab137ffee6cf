"""The profiler on cuda devices, run without a GPU on the numpy stand-in for cupy
(tests/devices/fake_cupy.py): the ``cuda:N`` worker's lane and the hand-offs to and from it."""
from __future__ import annotations

import pathlib
import sys
import threading

import numpy as np
import pytest

from threadgrad import devices, engine, ops
from threadgrad.devices.cuda import CudaDevice
from threadgrad.profiler import profile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "devices"))
from fake_cupy import FakeCupy  # noqa: E402


@pytest.fixture
def fake_cuda(monkeypatch):
    """A stand-in GPU installed as cuda:0 for one test (as tests/devices/test_streams.py's
    ``cuda`` fixture does), removed afterwards."""
    fake = FakeCupy(device_count=1)
    dev = CudaDevice(0, np, fake.cuda)
    monkeypatch.setattr(devices, "streams_in_use", devices.streams_in_use)
    before = {name: devices._registry.get(name) for name in ("cuda", "cuda:0")}
    for name in before:
        devices.register(name, dev)
    try:
        yield dev
    finally:
        engine.get_engine().shutdown()
        for name, prev in before.items():
            if prev is None:
                devices.unregister(name)
            else:
                devices.register(name, prev)


@pytest.mark.timeout(60)
def test_a_cuda_backward_has_the_cuda_worker_lane(fake_cuda):
    w = engine.randn(3, 3, requires_grad=True)
    y = ops.to(ops.tanh(ops.to(w, fake_cuda) * 2.0), "cpu").sum()
    with profile() as prof:
        y.backward()
    caller = f"caller ({threading.current_thread().name})"
    assert prof.threads() == [caller, "cuda:0 worker"]
    on_gpu = [e for e in prof.events() if e.kind == "node" and e.thread == "cuda:0 worker"]
    assert [e.name for e in on_gpu] == ["TanhBackward0", "MulBackward0", "ToCopyBackward0"]
    assert {e.device for e in on_gpu} == {"cuda:0"}
    assert [(h.kind, h.src_thread, h.dst_thread) for h in prof.handoffs()] == [
        ("device hand-off", caller, "cuda:0 worker"), ("device hand-off", "cuda:0 worker", caller)]
    np.testing.assert_allclose(w.grad.numpy(), 2 * (1 - np.tanh(2 * w.detach().numpy()) ** 2), rtol=1e-5)
