"""Real-GPU tests: cupy arrays, real cupy streams and events.

Skipped as a whole unless cupy imports and sees a GPU. The stream protocol itself is checked
exactly, without a GPU, in tests/devices/test_streams.py (on a numpy stand-in for cupy);
here the same contract meets real asynchronous kernels: user streams are non-blocking, so
a missing event wait shows up as a wrong value rather than being hidden by the legacy
default stream's implicit synchronization.
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest

import threadgrad as tg
from threadgrad import devices, engine, ops
from threadgrad.devices import cuda as cuda_mod

cupy = pytest.importorskip("cupy")
if not devices.cuda_available():
    pytest.skip("cupy is installed but no GPU is visible", allow_module_level=True)

pytestmark = pytest.mark.cuda

CUDA = devices.get("cuda")
TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-10, atol=1e-12)}


@pytest.fixture(autouse=True)
def _synchronized():
    """Each test starts and ends with the GPU idle (a failure cannot leak queued work)."""
    CUDA.synchronize()
    yield
    CUDA.synchronize()


def nb_stream():
    """A non-blocking stream: no implicit synchronization with the null stream."""
    return cupy.cuda.Stream(non_blocking=True)


def test_the_device():
    assert CUDA.xp is cupy
    assert (CUDA.type, CUDA.index, str(CUDA)) == ("cuda", 0, "cuda:0")
    assert devices.get("cuda:0") is CUDA
    assert CUDA in devices.available()
    t = engine.tensor([1.0, 2.0], device="cuda")
    assert isinstance(t._data, cupy.ndarray)
    assert t.tolist() == [1.0, 2.0]
    host = t.numpy()
    assert isinstance(host, np.ndarray)


# --- ops: values and gradients equal cpu's -----------------------------------------------------

OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b * b + 1.0),
    "matmul": lambda a, b: a @ b.transpose(0, 1),
    "sum": lambda a, b: (a * b).sum(dim=1),
    "mean": lambda a, b: ops.mean(a * b, dim=0, keepdim=True),
    "max": lambda a, b: ops.max(a + b, dim=1)[0],
    "exp": lambda a, b: ops.exp(a) * b,
    "log": lambda a, b: ops.log(a * a + 1.0) + b,
    "tanh": lambda a, b: ops.tanh(a) * b,
    "sigmoid": lambda a, b: ops.sigmoid(a) + b,
    "relu": lambda a, b: ops.relu(a) * b,
    "gelu": lambda a, b: ops.gelu(a) + b,
    "softmax": lambda a, b: ops.softmax(a, dim=1) * b,
    "log_softmax": lambda a, b: ops.log_softmax(a + b, dim=-1),
    "logsumexp": lambda a, b: ops.logsumexp(a * b, dim=1),
    "getitem": lambda a, b: a[1:, ::2] * b[0, 0],
    "reshape": lambda a, b: ops.reshape(a, (6, 4)) @ ops.reshape(b, (4, 6)),
    "transpose": lambda a, b: ops.transpose(a, 0, 1) * ops.transpose(b, 0, 1),
    "linear": lambda a, b: ops.linear(a, b, b[:, 0]),
    "cat": lambda a, b: ops.cat([a, b], dim=1),
    "mse_loss": lambda a, b: ops.mse_loss(a, b),
    "erf": lambda a, b: ops.erf(a) * b,
    "gelu tanh": lambda a, b: ops.gelu(a, approximate="tanh") + b,
    "layer_norm": lambda a, b: ops.layer_norm(a, (6,), b[0], b[1]),
    "layer_norm over two dims": lambda a, b: ops.layer_norm(a, (4, 6)) * b,
    "linear on 3-d input": lambda a, b: ops.linear(ops.reshape(a, (2, 2, 6)), b, b[:, 0]),
    "embedding": lambda a, b: tg.nn.functional.embedding(engine.tensor([[0, 3], [2, 2]], device=a.device), a) * b[0],
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(OPS))
def test_ops_match_cpu(name, dtype):
    rng = np.random.default_rng(3)
    a0, b0 = rng.standard_normal((4, 6)).astype(dtype), rng.standard_normal((4, 6)).astype(dtype)
    got = []
    for dev in ("cpu", "cuda"):
        a = engine.tensor(a0, device=dev, requires_grad=True)
        b = engine.tensor(b0, device=dev, requires_grad=True)
        out = OPS[name](a, b)
        assert out.device is devices.get(dev) and out.dtype == dtype
        (out * out).sum().backward()
        assert a.grad.device is devices.get(dev) and a.grad.dtype == dtype
        got.append([out.detach().numpy(), a.grad.numpy(), b.grad.numpy()])
    for cpu_arr, gpu_arr in zip(*got):
        np.testing.assert_allclose(gpu_arr, cpu_arr, **TOL[dtype])


def test_embedding_rejects_out_of_range_indices_on_the_gpu():
    w = engine.tensor(np.ones((5, 2)), device="cuda")
    for bad in ([5], [0, -1]):
        with pytest.raises(IndexError, match="index out of range in self"):
            tg.nn.functional.embedding(engine.tensor(bad, device="cuda"), w)
    assert tg.nn.functional.embedding(engine.tensor([4, 0], device="cuda"), w).tolist() == [[1.0, 1.0]] * 2


@pytest.mark.timeout(120)
def test_cross_entropy_matches_cpu():
    rng = np.random.default_rng(4)
    logits0 = rng.standard_normal((8, 5))
    target0 = rng.integers(0, 5, size=8)
    got = []
    for dev in ("cpu", "cuda"):
        logits = engine.tensor(logits0, device=dev, requires_grad=True)
        target = engine.tensor(target0, device=dev)
        loss = ops.cross_entropy(logits, target)
        loss.backward()
        got.append((loss.item(), logits.grad.numpy()))
    assert got[1][0] == pytest.approx(got[0][0], rel=1e-12)
    np.testing.assert_allclose(got[1][1], got[0][1], rtol=1e-10, atol=1e-12)


@pytest.mark.timeout(120)
def test_gradcheck_on_cuda():
    x = engine.tensor(np.random.default_rng(5).standard_normal((3, 4)), device="cuda", requires_grad=True)
    assert engine.gradcheck(lambda t: ops.tanh(t @ t.transpose(0, 1)).sum(), (x,))


# --- streams ------------------------------------------------------------------------------------

def _heavy(t, n=8):
    """Enough GPU work that an unsynchronized reader would see unfinished results."""
    for _ in range(n):
        t = ops.tanh(t @ t) * 0.5
    return t


@pytest.mark.timeout(120)
def test_backward_runs_on_the_forward_stream_on_the_cuda_worker():
    seen = []

    class Probe(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            seen.append((cupy.cuda.get_current_stream(), threading.current_thread()))
            return g

    s1 = nb_stream()
    x = engine.ones(4, device="cuda", requires_grad=True)
    with s1:
        y = Probe.apply(x)
        y.sum().backward()
    ((stream, thread),) = seen
    assert stream == s1
    assert thread is not threading.current_thread() and thread.name == "threadgrad-cuda:0"
    with s1:
        assert x.grad.tolist() == [1.0] * 4


@pytest.mark.timeout(120)
def test_two_branches_on_two_streams_are_summed_correctly():
    rng = np.random.default_rng(6)
    x0 = rng.standard_normal((512, 512)) / 40.0
    s0, s1, s2 = nb_stream(), nb_stream(), nb_stream()

    def run(dev, streams):
        x = engine.tensor(x0, device=dev, requires_grad=True)
        with streams[0]:
            a = x * 1.0
        with streams[1]:
            b = _heavy(a)
        with streams[2]:
            c = _heavy(a * 2.0)
        with streams[0]:
            loss = (b + c).sum()
            loss.backward()
            return x.grad.numpy()  # read on the caller's stream, no explicit synchronize

    expected = run("cpu", [contextlib.nullcontext()] * 3)
    for _ in range(3):
        got = run("cuda", [s0, s1, s2])
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.timeout(120)
def test_grad_is_ready_on_the_callers_stream_when_backward_returns():
    x0 = np.random.default_rng(7).standard_normal((512, 512)) / 40.0
    s_leaf, s_caller = nb_stream(), nb_stream()
    x = engine.tensor(x0, device="cuda", requires_grad=True)
    with s_leaf:
        h = _heavy(x * 1.0)  # x accumulates on s_leaf
    with s_caller:
        loss = (h * 1.0).sum()
        loss.backward()
        snapshot = x.grad._data.copy()  # queued on s_caller right away
    s_caller.synchronize()
    xc = engine.tensor(x0, requires_grad=True)
    _heavy(xc * 1.0).sum().backward()
    np.testing.assert_allclose(cupy.asnumpy(snapshot), xc.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.timeout(120)
def test_multithreaded_backward_each_thread_on_its_own_stream(run_in_threads):
    w = engine.tensor([1.0, 2.0, 3.0], device="cuda", requires_grad=True, dtype=np.float64)
    keep = w * 1.0  # w's AccumulateGrad lives on the null stream for the whole test

    def body(i):
        s = nb_stream()
        with s:
            x = engine.ones(3, device="cuda", requires_grad=True, dtype=np.float64)
            for _ in range(10):
                (w * float(i + 1) + x * w).sum().backward()
            out = x.grad.tolist()
        return out

    results = run_in_threads(8, body)
    assert results == [[10.0, 20.0, 30.0]] * 8
    CUDA.synchronize()
    assert w.grad.tolist() == [10.0 * (36 + 8)] * 3
    assert keep.grad_fn is not None


@pytest.mark.timeout(120)
def test_to_both_directions_with_gradients(virtual1):
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    c = ops.to(x, "cuda")
    assert isinstance(c._data, cupy.ndarray)
    v = ops.to(c * 2.0, virtual1)
    assert isinstance(v._data, np.ndarray)
    back = ops.to(ops.to(v * 3.0, "cuda") + c, "cpu")
    assert back.tolist() == [7.0, 14.0]
    (back * back).sum().backward()
    assert x.grad.device is devices.cpu and x.grad.tolist() == [98.0, 196.0]
    g = engine.tensor([1.0, -2.0], device="cuda", requires_grad=True, dtype=np.float64)
    (ops.to(g, "cpu") ** 2).sum().backward()
    assert g.grad.device is CUDA and isinstance(g.grad._data, cupy.ndarray)
    assert g.grad.tolist() == [2.0, -4.0]


@pytest.mark.timeout(120)
def test_second_gpu_if_present():
    if cuda_mod.device_count() < 2:
        pytest.skip("needs two GPUs")
    d1 = devices.get("cuda:1")
    with cupy.cuda.Device(1):
        x = engine.tensor([1.0, 2.0], device=d1, requires_grad=True)
        y = ops.to(x * 2.0, "cuda:0")
    (y * 3.0).sum().backward()
    assert x.grad.device is d1 and x.grad.tolist() == [6.0, 6.0]
