"""The device registry, and how ops treat devices: placement errors, ops.to, gradients
flowing back to the source device."""
from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest

from threadgrad import devices, engine, ops

# Several tests run backward through virtual devices, whose nodes run on engine worker threads.
pytestmark = pytest.mark.timeout(60)


# --- registry -----------------------------------------------------------------------------

def test_cpu():
    cpu = devices.get("cpu")
    assert cpu is devices.cpu
    assert cpu.type == "cpu"
    assert cpu.index is None
    assert cpu.xp is np
    assert str(cpu) == "cpu"
    assert repr(cpu) == "device(type='cpu')"
    assert cpu.synchronize() is None


def test_virtual_device():
    d = devices.get("virtual:3")
    assert d.type == "virtual"
    assert d.index == 3
    assert d.xp is np
    assert str(d) == "virtual:3"
    assert repr(d) == "device(type='virtual', index=3)"
    assert isinstance(d, devices.Device)
    assert d.synchronize() is None


def test_interning():
    assert devices.get("virtual:1") is devices.get("virtual:1")
    d = devices.get("virtual:4")
    assert devices.get(d) is d
    assert devices.get(devices.cpu) is devices.cpu
    assert devices.get("virtual:1") is not devices.get("virtual:2")


@pytest.mark.timeout(60)
def test_interning_is_thread_safe(run_in_threads):
    got = run_in_threads(8, lambda i: devices.get("virtual:99"))
    assert all(d is got[0] for d in got)


def test_equality_with_devices_and_strings():
    v1 = devices.get("virtual:1")
    assert v1 == devices.get("virtual:1")
    assert v1 == "virtual:1"
    assert v1 != "virtual:2"
    assert v1 != devices.get("virtual:2")
    assert v1 != devices.cpu
    assert devices.cpu == "cpu"
    assert devices.cpu != "virtual:1"
    assert not (devices.cpu == "not a device")  # a bad spec compares unequal, no error
    assert not (devices.cpu == "cuda:0")  # even without cupy
    assert devices.cpu != 0


def test_hash():
    v1 = devices.get("virtual:1")
    assert hash(v1) == hash(devices.get("virtual:1"))
    table = {devices.cpu: "c", v1: "v"}
    assert table[devices.get("cpu")] == "c"
    assert table[devices.get("virtual:1")] == "v"
    assert len({devices.get("virtual:5"), devices.get("virtual:5"), devices.cpu}) == 2


def test_pickle_keeps_identity():
    v = devices.get("virtual:6")
    assert pickle.loads(pickle.dumps(v)) is v
    assert pickle.loads(pickle.dumps(devices.cpu)) is devices.cpu


@pytest.mark.parametrize("spec", ["gpu", "virtual", "virtual:x", "virtual:-1", "cpu:0", "", "virtual:1.5", "tpu:0"])
def test_bad_specs_are_value_errors(spec):
    with pytest.raises(ValueError):
        devices.get(spec)


def test_bad_spec_message_lists_valid_forms():
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        devices.get("gpu")
    with pytest.raises(ValueError, match="virtual:N"):
        devices.get("virtual")


def test_non_string_spec_is_type_error():
    with pytest.raises(TypeError):
        devices.get(3)
    with pytest.raises(TypeError):
        devices.get(None)


def test_cuda_without_cupy_raises_runtime_error_mentioning_cupy(cupy_importable):
    if cupy_importable:
        pytest.skip("cupy is importable here: the cupy-missing message cannot be observed")
    for spec in ("cuda", "cuda:0", "cuda:1"):
        with pytest.raises(RuntimeError, match="cupy"):
            devices.get(spec)
    assert devices.cuda_available() is False
    assert devices.available() == [devices.cpu]


def test_available_starts_with_cpu_and_lists_no_virtual_devices():
    devices.get("virtual:1")
    av = devices.available()
    assert av[0] is devices.cpu
    assert all(d.type in ("cpu", "cuda") for d in av)
    assert isinstance(devices.cuda_available(), bool)


# --- devices and tensors ------------------------------------------------------------------

def test_tensor_device_accepts_specs_and_devices():
    v = devices.get("virtual:2")
    assert engine.tensor([1.0], device="virtual:2").device is v
    assert engine.tensor([1.0], device=v).device is v
    assert engine.tensor([1.0]).device is devices.cpu
    with pytest.raises(ValueError):
        engine.tensor([1.0], device="virtual")


@pytest.mark.parametrize(
    "op",
    [ops.add, ops.sub, ops.mul, ops.div, ops.pow, lambda a, b: a + b, lambda a, b: a * b,
     lambda a, b: ops.matmul(a.reshape(1, 2), b.reshape(2, 1))],
)
def test_ops_mixing_devices_raise_naming_both(op):
    a = engine.tensor([1.0, 2.0])
    b = engine.tensor([3.0, 4.0], device="virtual:1")
    with pytest.raises(RuntimeError) as info:
        op(a, b)
    msg = str(info.value)
    assert "cpu" in msg and "virtual:1" in msg
    c = engine.tensor([3.0, 4.0], device="virtual:2")
    with pytest.raises(RuntimeError) as info:
        op(b, c)
    msg = str(info.value)
    assert "virtual:1" in msg and "virtual:2" in msg


def test_mixing_devices_with_grad_records_nothing():
    a = engine.tensor([1.0], requires_grad=True)
    b = engine.tensor([1.0], device="virtual:1", requires_grad=True)
    with pytest.raises(RuntimeError, match="same device"):
        a * b


def test_scalars_take_the_tensor_device():
    v = devices.get("virtual:1")
    t = engine.tensor([1.0, 2.0], device=v)
    for out in (t + 1, 2.0 * t, t / 2, t - 1.0, t ** 2):
        assert out.device is v
        assert out.dtype == np.float32


def test_ops_to_moves_and_copies():
    src = engine.tensor([1.0, 2.0])
    moved = ops.to(src, "virtual:1")
    assert moved.device is devices.get("virtual:1")
    assert moved.tolist() == [1.0, 2.0]
    assert moved.dtype == np.float32
    assert not np.shares_memory(moved._data, src._data)
    other = ops.to(moved, devices.get("virtual:2"))
    assert other.device is devices.get("virtual:2")
    assert not np.shares_memory(other._data, moved._data)
    assert ops.to(src, "cpu") is src
    assert ops.to(moved, "virtual:1") is moved


def test_gradient_flows_back_to_source_device():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    v = ops.to(x, "virtual:1")
    assert v.grad_fn.name() == "ToCopyBackward0"
    assert v.requires_grad and not v.is_leaf
    y = (v * v).sum()
    y.backward()
    assert x.grad.device is devices.cpu
    assert x.grad.tolist() == [2.0, 4.0]


def test_gradient_flows_back_through_several_devices():
    x = engine.tensor([1.0, 2.0], device="virtual:1", requires_grad=True)
    a = ops.to(x, "virtual:2") * 3.0
    b = ops.to(a, "cpu") * 5.0
    c = ops.to(b, "virtual:1") + x  # back on x's device, plus a direct path
    c.sum().backward()
    assert x.grad.device is devices.get("virtual:1")
    assert x.grad.tolist() == [16.0, 16.0]


def test_leaf_gradient_lives_on_leaf_device():
    v = devices.get("virtual:2")
    x = engine.ones(3, device=v, requires_grad=True)
    (x * x * 2.0).sum().backward()
    assert x.grad.device is v
    assert x.grad.tolist() == [4.0, 4.0, 4.0]


def test_backward_gradient_must_match_output_device():
    x = engine.tensor([1.0, 2.0], device="virtual:1", requires_grad=True)
    y = x * 2.0
    with pytest.raises(RuntimeError, match="virtual:1") as info:
        y.backward(engine.ones(2))
    assert "cpu" in str(info.value)
    y.backward(engine.ones(2, device="virtual:1"))
    assert x.grad.tolist() == [2.0, 2.0]


def test_to_with_dtype_and_device_gradient_dtype_and_device():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = ops.to(x, "virtual:1", np.float64)
    assert y.device is devices.get("virtual:1") and y.dtype == np.float64
    (y * y).sum().backward()
    assert x.grad.device is devices.cpu and x.grad.dtype == np.float32
    assert x.grad.tolist() == [2.0, 4.0]


def test_like_functions_keep_device():
    v = devices.get("virtual:3")
    t = engine.tensor([[1.0, 2.0]], device=v)
    assert engine.zeros_like(t).device is v
    assert engine.ones_like(t).device is v


@pytest.mark.timeout(60)
def test_virtual_device_backward_uses_one_worker_thread_per_device():
    dev = devices.get("virtual:8")
    seen = set()
    for _ in range(5):
        x = engine.tensor([1.0], requires_grad=True)
        z = ops.to(x, dev) * 2.0
        z.grad_fn.register_prehook(lambda g: seen.add(threading.current_thread()))
        z.sum().backward()
        assert x.grad.tolist() == [2.0]
    assert len(seen) == 1
    (t,) = seen
    assert t is not threading.current_thread()
    assert t in engine.get_engine().worker_threads()
