"""Which formula table a device picks (Note [Fused kernels] in devices/_fused.py), without a GPU.

The numpy stand-in cannot run CUDA C, so the kernels themselves are checked on a real GPU
(tests/cuda/test_fused.py). Here a cuda device is built over a stand-in array module that has
cupy's ``ElementwiseKernel``/``ReductionKernel``: each kernel it makes records its launches and
computes, in numpy, the expression its CUDA source states. That checks the dispatch (a cuda
device picks the fused table, cpu and virtual the plain one, and each op's backward launches
its kernel with the arguments in the kernel's order) and that the results equal cpu's.
"""
from __future__ import annotations

import ctypes
import math
import types

import numpy as np
import pytest

from threadgrad import devices, engine, ops
from threadgrad.devices import _fused
from threadgrad.devices.cuda import CudaDevice
from fake_cupy import FakeCupy

pytestmark = pytest.mark.timeout(60)

_erf = np.vectorize(math.erf, otypes=[float])


def _sim(name):
    """numpy for each kernel's CUDA source in devices/_fused.py (ins, then outs in place)."""
    def sgd(g, lr, wd, maximize, p):
        d = -g if maximize else g
        if wd:
            d = d + wd * p
        p -= lr * d

    def sgd_momentum(g, lr, wd, mom, damp, nesterov, maximize, first, p, buf):
        d = -g if maximize else g
        if wd:
            d = d + wd * p
        buf[...] = d if first else buf * mom + (1 - damp) * d
        p -= lr * (d + mom * buf if nesterov else buf)

    def adam(g, lr, b1, b2, eps, wd, bc1, bc2s, maximize, decoupled, p, m, v, vmax=None):
        d = -g if maximize else g
        if wd:
            if decoupled:
                p *= 1 - lr * wd
            else:
                d = d + wd * p
        m += (1 - b1) * (d - m)
        v[...] = v * b2 + (1 - b2) * d * d
        if vmax is not None:
            np.maximum(vmax, v, out=vmax)
        p -= (lr / bc1) * (m / (np.sqrt(v if vmax is None else vmax) / bc2s + eps))

    def gelu(g, x):
        return g * (0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))

    def gelu_tanh(g, x):
        k, c = math.sqrt(2 / math.pi), 0.044715
        t = np.tanh((x + c * x ** 3) * k)
        return g * 0.5 * (1 + t + x * (1 - t * t) * (k + 3 * c * k * x * x))

    def check(t, ignore, n):
        return np.bitwise_or.reduce(np.where(t == ignore, 1, np.where((t < 0) | (t >= n), 2, 0)).ravel(),
                                    initial=0)

    return {
        "threadgrad_tanh_backward": lambda g, y: g - g * y * y,
        "threadgrad_mul": lambda a, b: a * b,
        "threadgrad_nll": lambda lsm, t, c: -lsm.reshape(-1)[np.arange(len(t)) * c + t],
        "threadgrad_nll_reduce": lambda x, count: x.sum() / count,
        "threadgrad_mse": lambda a, b, count: ((a - b) * (a - b)).sum() / count,
        "threadgrad_mse_backward": lambda g, a, b, norm: (a - b) * (norm * g),
        "threadgrad_cross_entropy_backward": lambda lsm, t, g, scale, c: (
            (np.exp(lsm) - (np.arange(lsm.size).reshape(lsm.shape) % c == t[:, None])) * (g[0] * scale)),
        "threadgrad_div_backward_b": lambda g, a, b: -(g * a / (b * b)),
        "threadgrad_sigmoid_backward": lambda g, y: g * (1 - y) * y,
        "threadgrad_threshold_backward": lambda g, y: g * (y > 0),
        "threadgrad_log_softmax_backward": lambda g, y, s: g - np.exp(y) * s,
        "threadgrad_softmax_dot": lambda g, y, axis=None, keepdims=False: (g * y).sum(axis=axis, keepdims=keepdims),
        "threadgrad_softmax_backward": lambda g, y, s: y * (g - s),
        "threadgrad_erf": _erf,
        "threadgrad_layer_norm_weight_backward": lambda dy, x, mean, rstd, axis: (dy * ((x - mean) * rstd)).sum(axis=axis),
        "threadgrad_gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
        "threadgrad_gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
        "threadgrad_gelu_backward": gelu,
        "threadgrad_gelu_tanh_backward": gelu_tanh,
        "threadgrad_softplus_backward": lambda g, x, b, th: np.where(x * b > th, g, g / (1 + np.exp(-x * b))),
        "threadgrad_class_index_check": check,
        "threadgrad_sgd": sgd,
        "threadgrad_sgd_momentum": sgd_momentum,
        "threadgrad_adam": adam,
        "threadgrad_adam_amsgrad": adam,
    }[name]


class _Kernel:
    def __init__(self, launches, in_params, out_params, *rest):
        self.name = rest[-1]
        self.params = (in_params, out_params)
        self.launches = launches
        self.fn = _sim(self.name)

    def __call__(self, *args, **kw):
        self.launches.append(self.name)
        out = self.fn(*args, **kw)
        same_dtype = "backward" in self.name or self.name in _SAME_DTYPE
        return None if out is None else np.asarray(out).astype(args[0].dtype if same_dtype else out.dtype, copy=False)


_SAME_DTYPE = ("threadgrad_mul", "threadgrad_erf", "threadgrad_gelu", "threadgrad_gelu_tanh")


def _memory(address, n, dtype):
    """The ``n`` elements of ``dtype`` at ``address`` (a numpy array's), as a writable array."""
    dtype = np.dtype(dtype)
    return np.frombuffer((ctypes.c_char * (n * dtype.itemsize)).from_address(address), dtype=dtype)


class _RawKernel:
    """A multi-tensor kernel of devices/_fused.py (Note [Multi-tensor updates]): reads the
    struct it is given as the CUDA code does, and updates the arrays at its addresses in numpy."""

    def __init__(self, launches, code, name):
        assert name in code
        self.name, self.launches = name, launches
        self.dtype = np.float32 if name.endswith("_float") else np.float64
        self.kind = name.split("_")[1]  # sgd, adam, log (log_softmax_nll), norm (partial, finish, total), scale

    def __call__(self, grid, block, args):
        self.launches.append(self.name)
        if self.kind == "log":
            return self._log_softmax_nll(grid, block, *args)
        if self.kind == "layer":
            return (self._layer_norm_backward if "backward" in self.name else self._layer_norm)(grid, block, *args)
        if self.kind == "norm":
            return getattr(self, "_" + self.name.split("_")[2])(grid, block, *args)
        (r,) = args
        if self.kind == "scale":
            coef = _memory(int(r["out"]), 1, self.dtype)[0]
            for t in range(grid[1]):
                g = _memory(int(r["grad"][t]), int(r["numel"][t]), self.dtype)
                g *= coef
            return None
        assert grid[0] >= 1 and 1 <= grid[1] <= 32 and block == (256,)
        for t in range(grid[1]):
            n = int(r["numel"][t])

            def mem(field):
                return _memory(int(r[field][t]), n, self.dtype) if r[field][t] else None

            if self.kind == "sgd":
                p, g, buf = mem("param"), mem("grad"), mem("buf")
                mom = float(r["f_momentum"])
                if mom:
                    _sim("threadgrad_sgd_momentum")(g, float(r["f_lr"]), float(r["f_wd"]), mom, float(r["f_dampening"]),
                                                    bool(r["nesterov"]), bool(r["maximize"]), bool(r["first"][t]), p, buf)
                else:
                    _sim("threadgrad_sgd")(g, float(r["f_lr"]), float(r["f_wd"]), bool(r["maximize"]), p)
            else:
                _sim("threadgrad_adam")(mem("grad"), float(r["f_lr"]), float(r["f_beta1"]), float(r["f_beta2"]),
                                        float(r["f_eps"]), float(r["f_wd"]), float(r["f_bc1"][t]),
                                        float(r["f_bc2_sqrt"][t]), bool(r["maximize"]), bool(r["decoupled"]),
                                        mem("param"), mem("exp_avg"), mem("exp_avg_sq"),
                                        mem("max_exp_avg_sq") if r["amsgrad"] else None)


    @staticmethod
    def _fold(values, kind):
        a = np.abs(values)
        if kind == 2:
            return np.max(a, initial=0) if not np.isnan(a).any() else np.nan
        return (a * a).sum() if kind == 0 else a.sum()

    def _partial(self, grid, block, r):
        # each block bx folds the elements its threads stride over: i // 256 == bx (mod blocks)
        blocks = grid[0]
        out = _memory(int(r["out"]), grid[1] * blocks, self.dtype)
        for t in range(grid[1]):
            n = int(r["numel"][t])
            g = _memory(int(r["grad"][t]), n, self.dtype)
            owner = (np.arange(n) // 256) % blocks
            for bx in range(blocks):
                out[t * blocks + bx] = self._fold(g[owner == bx], int(r["kind"]))

    def _finish(self, grid, block, partial, blocks, kind, norms):
        for t in range(grid[0]):
            p = partial[t * blocks:(t + 1) * blocks]
            acc = (np.nan if np.isnan(p).any() else p.max()) if kind == 2 else p.sum()
            norms[t] = np.sqrt(acc) if kind == 0 else acc

    def _total(self, grid, block, norms, count, kind, max_norm, out):
        total = self._fold(norms[:count], kind)
        total = np.sqrt(total) if kind == 0 else total
        c = self.dtype(max_norm) / (self.dtype(total) + self.dtype(1e-6))
        out[0], out[1] = total, c if (np.isnan(c) or c < 1) else 1

    def _layer_norm(self, grid, block, x, w, b, y, mean, rstd, n, eps, has_w, has_b):
        # one block per row: two-pass mean and variance, then the affine output
        assert grid == (x.shape[0],) and block == (256,) and x.shape[1] == n and x.dtype == self.dtype
        assert isinstance(eps, float) and has_w in (0, 1) and has_b in (0, 1)
        mean[...] = x.mean(axis=1)
        rstd[...] = 1 / np.sqrt(((x - mean[:, None]) ** 2).mean(axis=1) + eps)
        y[...] = (x - mean[:, None]) * rstd[:, None] * (w if has_w else 1) + (b if has_b else 0)

    def _layer_norm_backward(self, grid, block, dy, x, w, mean, rstd, dx, n, has_w):
        assert grid == (x.shape[0],) and block == (256,) and x.shape[1] == n and dy.dtype == self.dtype
        gh = dy * w if has_w else dy
        xhat = (x - mean[:, None]) * rstd[:, None]
        dx[...] = rstd[:, None] * (gh - gh.mean(axis=1, keepdims=True) - xhat * (gh * xhat).mean(axis=1, keepdims=True))

    def _log_softmax_nll(self, grid, block, x, t, lsm, picked, c):
        # one block per row; log_softmax as ops/activation.py's _shifted computes it
        n = x.shape[0]
        assert grid == (n,) and block == (256,) and c == x.shape[1] and x.dtype == self.dtype and t.dtype == np.int64
        s = x - x.max(axis=1, keepdims=True)
        lse = np.log(np.exp(s).sum(axis=1, keepdims=True))
        lsm[...] = s - lse
        picked[...] = -(s[np.arange(n), t] - lse[:, 0])


def _kernel_xp():
    """numpy plus cupy's three kernel factories, recording every launch in ``xp.launches``."""
    launches: list = []
    xp = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    xp.launches = launches
    xp.ElementwiseKernel = lambda i, o, op, name, **kw: _Kernel(launches, i, o, op, name)
    xp.ReductionKernel = lambda i, o, m, r, post, ident, name, **kw: _Kernel(launches, i, o, m, r, post, ident, name)
    xp.RawKernel = lambda code, name, **kw: _RawKernel(launches, code, name)
    return xp


@pytest.fixture
def kcuda(monkeypatch):
    """A stand-in GPU over the kernel-making array module, installed as ``kcuda``."""
    xp = _kernel_xp()
    dev = CudaDevice(0, xp, FakeCupy().cuda)
    monkeypatch.setattr(devices, "streams_in_use", devices.streams_in_use)
    devices.register("kcuda", dev)
    try:
        yield dev
    finally:
        engine.get_engine().shutdown()
        devices.unregister("kcuda")


def test_numpy_devices_pick_the_plain_formulas_and_a_cupy_like_module_the_fused():
    assert devices.cpu.kernels is _fused.PLAIN and not _fused.PLAIN.fused
    assert devices.get("virtual:1").kernels is _fused.PLAIN
    assert CudaDevice(0, np, FakeCupy().cuda).kernels is _fused.PLAIN  # the numpy stand-in: no kernels
    xp = _kernel_xp()
    table = CudaDevice(0, xp, FakeCupy().cuda).kernels
    assert isinstance(table, _fused.Fused) and table.fused
    assert _fused.for_array_module(xp) is table  # one table per array module
    # The plain table hands out the formulas themselves: no extra call on the cpu hot path.
    assert _fused.PLAIN.tanh_grad is _fused._tanh_grad


def _grads(dev, fn, *arrays):
    ts = [engine.tensor(a, device=dev, requires_grad=True) for a in arrays]
    fn(*ts).backward()
    return [t.grad.numpy() for t in ts]


CASES = {
    "tanh": (lambda x: ops.tanh(x).sum(), ["threadgrad_tanh_backward"]),
    "mul": (lambda x: (x * (x + 1.0)).sum(), ["threadgrad_mul", "threadgrad_mul"]),
    "div": (lambda x: ((x + 5.0) / (x * x + 1.0)).sum(), ["threadgrad_div_backward_b"]),
    "sigmoid": (lambda x: ops.sigmoid(x).sum(), ["threadgrad_sigmoid_backward"]),
    "relu": (lambda x: (ops.relu(x) * x).sum(), ["threadgrad_threshold_backward"]),
    "gelu": (lambda x: ops.gelu(x).sum(), ["threadgrad_gelu_backward"]),
    "gelu_tanh": (lambda x: ops.gelu(x, approximate="tanh").sum(), ["threadgrad_gelu_tanh_backward"]),
    "softplus": (lambda x: ops.softplus(x, beta=2.0, threshold=1.0).sum(), ["threadgrad_softplus_backward"]),
    "softmax": (lambda x: (ops.softmax(x, 1) * x).sum(), ["threadgrad_softmax_dot", "threadgrad_softmax_backward"]),
    "log_softmax": (lambda x: (ops.log_softmax(x, 1) * x).sum(), ["threadgrad_log_softmax_backward"]),
}


@pytest.mark.parametrize("affine", ["weight and bias", "weight", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_is_one_launch_forward_and_three_backward_on_cuda(kcuda, affine, dtype):
    rng = np.random.default_rng(5)
    x0, w0, b0 = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    kind = "double" if dtype == np.float64 else "float"

    def run(dev):
        x = engine.tensor(x0.astype(dtype), device=dev, requires_grad=True)
        w = engine.tensor(w0.astype(dtype), device=dev, requires_grad=True) if affine != "none" else None
        b = engine.tensor(b0.astype(dtype), device=dev, requires_grad=True) if affine == "weight and bias" else None
        y = ops.layer_norm(x, (4, 5), w, b, eps=1e-3)
        assert y.grad_fn.name() == "NativeLayerNormBackward0"
        (y * engine.tensor(np.arange(120.0).reshape(2, 3, 4, 5).astype(dtype), device=dev)).sum().backward()
        return [t.grad.numpy() if t is not None else None for t in (x, w, b)] + [y.detach().numpy()]

    kcuda.xp.launches.clear()
    got = run(kcuda)
    launches = [k for k in kcuda.xp.launches if "layer_norm" in k]
    want_launches = [f"threadgrad_layer_norm_{kind}", f"threadgrad_layer_norm_backward_{kind}"]
    if affine != "none":
        want_launches.append("threadgrad_layer_norm_weight_backward")
    assert launches == want_launches
    want = run(devices.cpu)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-11)
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a, b, **tol)


def test_layer_norm_double_backward_on_cuda_records_ops(kcuda):
    rng = np.random.default_rng(6)
    x0, w0 = rng.standard_normal((3, 4)), rng.standard_normal(4)
    hs = []
    for dev in (kcuda, devices.cpu):
        x = engine.tensor(x0, device=dev, requires_grad=True)
        w = engine.tensor(w0, device=dev, requires_grad=True)
        (gx,) = engine.grad((ops.layer_norm(x, (4,), w) ** 2).sum(), x, create_graph=True)
        hs.append(engine.grad(gx.sum(), [x, w]))
    for a, b in zip(*hs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cuda_launches_the_fused_kernel_and_matches_cpu(kcuda, name, dtype):
    fn, kernels = CASES[name]
    x = np.random.default_rng(0).uniform(-2, 2, (3, 5)).astype(dtype)
    kcuda.xp.launches.clear()
    got = _grads(kcuda, fn, x)
    assert [k for k in kcuda.xp.launches if k in kernels] == kernels
    want = _grads(devices.cpu, fn, x)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got[0], want[0], **tol)


FORWARDS = {
    "erf": (ops.erf, "threadgrad_erf"),
    "gelu": (ops.gelu, "threadgrad_gelu"),
    "gelu_tanh": (lambda x: ops.gelu(x, approximate="tanh"), "threadgrad_gelu_tanh"),
}


@pytest.mark.parametrize("name", sorted(FORWARDS))
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_cuda_runs_erf_and_gelu_forwards_as_one_kernel_and_matches_cpu(kcuda, name, dtype):
    fn, kernel = FORWARDS[name]
    x = np.random.default_rng(1).uniform(-4, 4, (4, 6)).astype(dtype)
    kcuda.xp.launches.clear()
    got = fn(engine.tensor(x, device=kcuda))
    assert kcuda.xp.launches == [kernel]
    want = fn(engine.tensor(x))
    assert got.dtype == want.dtype == engine.tensor(x).dtype
    tol = {np.float16: dict(rtol=2e-3, atol=1e-3), np.float32: dict(rtol=3e-7, atol=1e-7),
           np.float64: dict(rtol=1e-13, atol=1e-16)}[dtype]
    np.testing.assert_allclose(got.numpy(), want.numpy(), **tol)


def test_double_backward_on_cuda_records_ops_not_kernels(kcuda):
    # Under create_graph the nodes record ops (their own backward is written with ops), so the
    # second derivative exists: d2/dx2 of sum(tanh(x)) = -2 tanh(x) (1 - tanh(x)^2).
    x0 = np.array([-0.7, 0.1, 1.3])
    x = engine.tensor(x0, device=kcuda, requires_grad=True)
    (g,) = engine.grad(ops.tanh(x).sum(), x, create_graph=True)
    assert g.grad_fn.name() == "TanhBackwardBackward0"
    kcuda.xp.launches.clear()
    g.sum().backward()
    t = np.tanh(x0)
    np.testing.assert_allclose(x.grad.numpy(), -2 * t * (1 - t * t), rtol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_is_one_fused_node_on_cuda(kcuda, reduction):
    rng = np.random.default_rng(3)
    logits, target = rng.standard_normal((6, 4)), rng.integers(0, 4, 6)
    x = engine.tensor(logits, device=kcuda, requires_grad=True)
    kcuda.xp.launches.clear()
    loss = ops.cross_entropy(x, engine.tensor(target, device=kcuda), reduction=reduction)
    assert loss.grad_fn.name() == "CrossEntropyBackward0"
    loss.backward()
    launches = kcuda.xp.launches
    assert launches.count("threadgrad_log_softmax_nll_double") == launches.count("threadgrad_nll_reduce") == 1
    assert launches.count("threadgrad_cross_entropy_backward") == 1 and "threadgrad_nll" not in launches
    xc = engine.tensor(logits, requires_grad=True)
    want = ops.cross_entropy(xc, engine.tensor(target), reduction=reduction)
    want.backward()
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), xc.grad.numpy(), rtol=1e-12, atol=1e-15)
    # double backward: the node records its formula with ops under create_graph
    (g,) = engine.grad(ops.cross_entropy(x, engine.tensor(target, device=kcuda), reduction=reduction), x,
                       create_graph=True)
    (gc,) = engine.grad(ops.cross_entropy(xc, engine.tensor(target), reduction=reduction), xc, create_graph=True)
    w = rng.standard_normal((6, 4))
    (h,) = engine.grad((g * engine.tensor(w, device=kcuda)).sum(), x)
    (hc,) = engine.grad((gc * engine.tensor(w)).sum(), xc)
    np.testing.assert_allclose(h.numpy(), hc.numpy(), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("case", ["int32 targets", "transposed logits"])
def test_cross_entropy_forward_kernel_leaves_other_operands_to_the_separate_kernels(kcuda, case):
    rng = np.random.default_rng(4)
    logits, target = rng.standard_normal((5, 6)), rng.integers(0, 5, 6)
    if case == "int32 targets":
        logits, target = logits.T.copy(), target.astype(np.int32)
        x = engine.tensor(logits, device=kcuda, requires_grad=True)
        arg = x
    else:
        x = engine.tensor(logits, device=kcuda, requires_grad=True)
        arg = ops.transpose(x, 0, 1)  # a (6, 5) view, not C-contiguous
        logits = logits.T
    kcuda.xp.launches.clear()
    loss = ops.cross_entropy(arg, engine.tensor(target, device=kcuda))
    assert "threadgrad_nll" in kcuda.xp.launches and "threadgrad_log_softmax_nll_double" not in kcuda.xp.launches
    loss.backward()
    xc = engine.tensor(logits, requires_grad=True)
    want = ops.cross_entropy(xc, engine.tensor(target))
    want.backward()
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-12)
    got = x.grad.numpy() if case == "int32 targets" else x.grad.numpy().T
    np.testing.assert_allclose(got, xc.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_cross_entropy_forward_kernel_keeps_nan_and_inf_rows_as_the_ops_path(kcuda):
    """The row kernel shifts by the NaN-propagating row max, as _shifted does (a +inf or all
    -inf row comes out NaN, as torch's): the same NaN and finite losses as cpu."""
    logits = np.array([[1.0, np.nan, 2.0], [-np.inf, -np.inf, -np.inf], [np.inf, 0.0, 1.0], [0.5, -1.0, 3.0]])
    target = np.array([0, 1, 2, 2])
    with np.errstate(all="ignore"):  # log(0) and inf - inf, on purpose
        _nan_and_inf_rows(kcuda, logits, target)


def _nan_and_inf_rows(kcuda, logits, target):
    got = ops.cross_entropy(engine.tensor(logits, device=kcuda), engine.tensor(target, device=kcuda), reduction="sum")
    assert "threadgrad_log_softmax_nll_double" in kcuda.xp.launches
    want = ops.cross_entropy(engine.tensor(logits), engine.tensor(target), reduction="sum")
    np.testing.assert_array_equal(np.isnan(got.numpy()), np.isnan(want.numpy()))
    for row in range(4):  # row by row: which rows are NaN, inf or finite, and their values
        g = ops.cross_entropy(engine.tensor(logits[row:row + 1], device=kcuda),
                              engine.tensor(target[row:row + 1], device=kcuda), reduction="sum").item()
        w = ops.cross_entropy(engine.tensor(logits[row:row + 1]), engine.tensor(target[row:row + 1]),
                              reduction="sum").item()
        np.testing.assert_allclose(g, w, rtol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("target_grad", [False, True])
def test_mse_loss_is_one_fused_node_on_cuda(kcuda, reduction, target_grad):
    """mse_loss of two same-shape tensors: one reduction forward, one kernel backward, torch's
    node name; values and both gradients as on cpu, and double backward records ops."""
    rng = np.random.default_rng(6)
    a0, b0 = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    a = engine.tensor(a0, device=kcuda, requires_grad=True)
    b = engine.tensor(b0, device=kcuda, requires_grad=target_grad)
    kcuda.xp.launches.clear()
    loss = ops.mse_loss(a, b, reduction=reduction)
    assert loss.grad_fn.name() == "MseLossBackward0"
    loss.backward()
    assert kcuda.xp.launches == ["threadgrad_mse", "threadgrad_mse_backward"]
    ac, bc = engine.tensor(a0, requires_grad=True), engine.tensor(b0, requires_grad=target_grad)
    want = ops.mse_loss(ac, bc, reduction=reduction)
    want.backward()
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-14)
    np.testing.assert_allclose(a.grad.numpy(), ac.grad.numpy(), rtol=1e-14)
    if target_grad:
        np.testing.assert_allclose(b.grad.numpy(), bc.grad.numpy(), rtol=1e-14)
    (g,) = engine.grad(ops.mse_loss(a, b, reduction=reduction), a, create_graph=True)
    (h,) = engine.grad((g * g).sum(), a)  # d/da sum(g^2) = 2 g * norm
    norm = 2.0 / a0.size if reduction == "mean" else 2.0
    np.testing.assert_allclose(h.numpy(), 2 * (a0 - b0) * norm * norm, rtol=1e-12)


def test_mse_loss_keeps_the_ops_form_for_broadcast_targets_and_none(kcuda):
    a0, b0 = np.arange(6.0).reshape(2, 3), np.array([1.0, 0.5, -1.0])
    a = engine.tensor(a0, device=kcuda, requires_grad=True)
    with pytest.warns(UserWarning, match="different to the input size"):
        loss = ops.mse_loss(a, engine.tensor(b0, device=kcuda))
    assert loss.grad_fn.name() != "MseLossBackward0"
    none = ops.mse_loss(a, engine.tensor(a0 * 0.5, device=kcuda), reduction="none")
    assert none.shape == (2, 3) and none.grad_fn.name() != "MseLossBackward0"
    np.testing.assert_allclose(loss.item(), ((a0 - b0) ** 2).mean(), rtol=1e-14)


def test_cross_entropy_checks_targets_with_one_kernel(kcuda):
    logits = np.random.default_rng(1).standard_normal((4, 3))
    target = np.array([0, 2, 1, 2])
    kcuda.xp.launches.clear()
    loss = ops.cross_entropy(engine.tensor(logits, device=kcuda), engine.tensor(target, device=kcuda))
    assert kcuda.xp.launches.count("threadgrad_class_index_check") == 1
    want = ops.cross_entropy(engine.tensor(logits), engine.tensor(target))
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-12)
    with pytest.raises(IndexError, match=r"outside \[0, 2\]"):
        ops.cross_entropy(engine.tensor(logits, device=kcuda), engine.tensor(np.array([0, 3, 1, 2]), device=kcuda))
    ignored = ops.cross_entropy(engine.tensor(logits, device=kcuda), engine.tensor(np.array([0, -100, 1, 2]), device=kcuda))
    want = ops.cross_entropy(engine.tensor(logits), engine.tensor(np.array([0, -100, 1, 2])))
    np.testing.assert_allclose(ignored.item(), want.item(), rtol=1e-12)


def _optim_state(seed, n=3):
    rng = np.random.default_rng(seed)
    shapes = [(4, 3), (3,), (2, 2)][:n]
    return ([rng.standard_normal(s) for s in shapes], [rng.standard_normal(s) for s in shapes])


@pytest.mark.parametrize("kw", [dict(), dict(weight_decay=0.1, maximize=True),
                                dict(momentum=0.9), dict(momentum=0.9, dampening=0.2, weight_decay=0.01),
                                dict(momentum=0.8, nesterov=True)])
def test_fused_sgd_launches_one_kernel_per_step_and_equals_plain(kw):
    xp = _kernel_xp()
    table = _fused.Fused(xp)
    p1, grads = _optim_state(2)
    p2 = [p.copy() for p in p1]
    b1, b2 = [None] * 3, [None] * 3
    for _ in range(3):
        table.sgd(p1, grads, b1, lr=0.1, **kw)
        _fused.plain_sgd(p2, grads, b2, lr=0.1, **kw)
    assert xp.launches == ["threadgrad_sgd_multi_double"] * 3  # Note [Multi-tensor updates]
    for a, b in zip(p1 + [x for x in b1 if x is not None], p2 + [x for x in b2 if x is not None]):
        np.testing.assert_allclose(a, b, rtol=1e-13)


@pytest.mark.parametrize("kw", [dict(), dict(weight_decay=0.1), dict(weight_decay=0.1, decoupled_weight_decay=True),
                                dict(amsgrad=True, maximize=True)])
def test_fused_adam_launches_one_kernel_per_step_and_equals_plain(kw):
    xp = _kernel_xp()
    table = _fused.Fused(xp)
    p1, grads = _optim_state(3)
    p2 = [p.copy() for p in p1]
    st1 = [[np.zeros_like(p) for p in p1] for _ in range(3)]
    st2 = [[np.zeros_like(p) for p in p1] for _ in range(3)]
    for step in (1, 2, 3):
        table.adam(p1, grads, st1[0], st1[1], st1[2], step, lr=0.01, **kw)
        _fused.plain_adam(p2, grads, st2[0], st2[1], st2[2], [step] * 3, lr=0.01, **kw)
    assert xp.launches == ["threadgrad_adam_multi_double"] * 3
    for a, b in zip(p1 + sum(st1, []), p2 + sum(st2, [])):
        np.testing.assert_allclose(a, b, rtol=1e-13)


# --- the plain updates against torch.optim (the oracle the fused ones are then held to) ---------

@pytest.mark.parametrize("kw", [dict(), dict(momentum=0.9, dampening=0.1, weight_decay=0.01),
                                dict(momentum=0.9, nesterov=True, maximize=True)])
def test_plain_sgd_matches_torch_optim_sgd(kw):
    torch = pytest.importorskip("torch")
    params, grads = _optim_state(4)
    tp = [torch.tensor(p, requires_grad=True) for p in params]
    opt = torch.optim.SGD(tp, lr=0.05, foreach=False, **kw)
    bufs = [None] * 3
    for _ in range(3):
        for t, g in zip(tp, grads):
            t.grad = torch.tensor(g)
        opt.step()
        _fused.plain_sgd(params, grads, bufs, lr=0.05, **kw)
    for p, t in zip(params, tp):
        np.testing.assert_allclose(p, t.detach().numpy(), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("cls,kw", [("Adam", dict()), ("Adam", dict(weight_decay=0.1, amsgrad=True)),
                                    ("AdamW", dict(weight_decay=0.1)), ("AdamW", dict(maximize=True, amsgrad=True, weight_decay=0.01))])
def test_plain_adam_matches_torch_optim_adam(cls, kw):
    torch = pytest.importorskip("torch")
    params, grads = _optim_state(5)
    tp = [torch.tensor(p, requires_grad=True) for p in params]
    opt = getattr(torch.optim, cls)(tp, lr=0.01, foreach=False, **kw)
    state = [[np.zeros_like(p) for p in params] for _ in range(3)]
    for step in (1, 2, 3, 4):
        for t, g in zip(tp, grads):
            t.grad = torch.tensor(g) * step
        opt.step()
        _fused.plain_adam(params, [g * step for g in grads], *state, step, lr=0.01,
                          decoupled_weight_decay=cls == "AdamW", **kw)
    for p, t in zip(params, tp):
        np.testing.assert_allclose(p, t.detach().numpy(), rtol=1e-13, atol=1e-15)


def _mixed_state(seed):
    """40 parameters: float64 ones (more than one launch holds), float32 ones, a float64 one
    whose gradient is a transposed view (not C-contiguous), one listed twice, and an empty one."""
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal((i % 4 + 1, 3)) for i in range(36)]
    params += [rng.standard_normal((2, 5)).astype(np.float32), rng.standard_normal(3).astype(np.float32)]
    params += [rng.standard_normal((3, 3)), np.zeros((0, 4))]
    grads = [rng.standard_normal(p.shape).astype(p.dtype) for p in params]
    grads[38] = np.ascontiguousarray(grads[38].T).T  # same values, Fortran order
    params.append(params[5])  # listed twice: updated twice, in order
    grads.append(rng.standard_normal(params[5].shape))
    return params, grads


@pytest.mark.parametrize("kw", [dict(momentum=0.9, nesterov=True, weight_decay=0.01), dict(maximize=True)])
def test_fused_sgd_groups_tensors_into_launches_and_leaves_the_rest_to_single_kernels(kw):
    xp = _kernel_xp()
    table = _fused.Fused(xp)
    p1, grads = _mixed_state(7)
    p2 = [p.copy() for p in p1]
    p2[-1] = p2[5]  # the same array twice, as in p1
    b1, b2 = [None] * len(p1), [None] * len(p1)
    for _ in range(2):
        xp.launches.clear()
        table.sgd(p1, grads, b1, lr=0.1, **kw)
        _fused.plain_sgd(p2, grads, b2, lr=0.1, **kw)
        # 32 + 5 float64 tensors (the last one empty) in two launches, 2 float32 in one; the
        # Fortran-ordered gradient and the repeated parameter take the single-tensor kernel
        single = "threadgrad_sgd_momentum" if kw.get("momentum") else "threadgrad_sgd"
        assert sorted(xp.launches) == sorted(["threadgrad_sgd_multi_double"] * 2 + ["threadgrad_sgd_multi_float"]
                                             + [single] * 2)
    for a, b in zip(p1 + [x for x in b1 if x is not None], p2 + [x for x in b2 if x is not None]):
        np.testing.assert_allclose(a, b, rtol=1e-6 if a.dtype == np.float32 else 1e-13)


def test_fused_adam_groups_tensors_into_launches_with_per_tensor_steps():
    xp = _kernel_xp()
    table = _fused.Fused(xp)
    p1, grads = _mixed_state(8)
    p1, grads = p1[:-1], grads[:-1]  # (Adam's state is per parameter: no repeated one here)
    p2 = [p.copy() for p in p1]
    st1 = [[np.zeros_like(p) for p in p1] for _ in range(3)]
    st2 = [[np.zeros_like(p) for p in p1] for _ in range(3)]
    for step in (1, 2):
        steps = [step + (i % 3) for i in range(len(p1))]  # parameters added to the optimizer at other times
        xp.launches.clear()
        table.adam(p1, grads, st1[0], st1[1], st1[2], steps, lr=0.01, amsgrad=True, weight_decay=0.1)
        _fused.plain_adam(p2, grads, st2[0], st2[1], st2[2], steps, lr=0.01, amsgrad=True, weight_decay=0.1)
        assert sorted(xp.launches) == sorted(["threadgrad_adam_multi_double"] * 2 + ["threadgrad_adam_multi_float",
                                                                                      "threadgrad_adam_amsgrad"])
    for a, b in zip(p1 + sum(st1, []), p2 + sum(st2, [])):
        np.testing.assert_allclose(a, b, rtol=1e-5 if a.dtype == np.float32 else 1e-13)


def _torch_like_clip(grads, max_norm, norm_type):
    """torch's clip_grad_norm_ arithmetic over numpy arrays: each norm, the norm of the norms,
    the coefficient in the gradients' dtype."""
    dt = grads[0].dtype.type
    norms = np.array([np.linalg.norm(g.ravel(), norm_type) for g in grads], dtype=dt)
    total = dt(np.linalg.norm(norms, norm_type))
    coef = min(dt(max_norm) / (total + dt(1e-6)), dt(1.0))
    return total, [g * coef for g in grads]


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_clip_norm_computes_torchs_norm_and_scales_with_no_read(norm_type, dtype):
    """Note [Multi-tensor updates]: four launches for the norm and coefficient (per tensor,
    per tensor's norm, the total, then the scaling), more than a launch's 32 tensors, and the
    values of torch's arithmetic."""
    xp = _kernel_xp()
    table = _fused.Fused(xp)
    rng = np.random.default_rng(9)
    empty = [] if norm_type == float("inf") else [(0,)]  # (torch refuses the inf-norm of an empty tensor)
    grads = [rng.standard_normal(s).astype(dtype) for s in [(700,), (3, 5)] + empty + [(4,)] * 35]
    want_total, want = _torch_like_clip(grads, 0.5, norm_type)
    out = table.clip_norm(grads, 0.5, norm_type)
    ctype = "float" if dtype == np.float32 else "double"
    assert xp.launches == [f"threadgrad_norm_partial_{ctype}", f"threadgrad_norm_finish_{ctype}"] * 2 + [
        f"threadgrad_norm_total_{ctype}"]
    table.scale_(grads, out[1:])
    assert xp.launches[-2:] == [f"threadgrad_scale_{ctype}"] * 2
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(out[0], want_total, rtol=tol)
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g, w, rtol=tol)


def test_clip_norm_declines_what_its_kernels_do_not_take():
    table = _fused.Fused(_kernel_xp())
    a, b = np.ones(3), np.ones(3, np.float32)
    assert table.clip_norm([a, b], 1.0, 2.0) is None  # mixed dtypes
    assert table.clip_norm([a, a], 1.0, 2.0) is None  # one array twice
    assert table.clip_norm([np.ones((3, 2)).T], 1.0, 2.0) is None  # not C-contiguous
    assert table.clip_norm([a], 1.0, 3.0) is None  # a p-norm without a kernel
    assert table.clip_norm([], 1.0, 2.0) is None
    assert table.clip_norm([a, np.ones(0)], 1.0, float("inf")) is None  # torch's error, from the ops


def test_fused_updates_leave_float16_to_the_plain_form():
    xp = _kernel_xp()
    table = _fused.Fused(xp)
    p1 = [np.ones(3, np.float16)]
    p2 = [np.ones(3, np.float16)]
    g = [np.full(3, 0.5, np.float16)]
    b1, b2 = [None], [None]
    table.sgd(p1, g, b1, lr=0.1, momentum=0.9)
    _fused.plain_sgd(p2, g, b2, lr=0.1, momentum=0.9)
    st1 = [[np.zeros(3, np.float16)] for _ in range(3)]
    st2 = [[np.zeros(3, np.float16)] for _ in range(3)]
    table.adam(p1, g, *st1, 1, lr=0.01, amsgrad=True)
    _fused.plain_adam(p2, g, *st2, 1, lr=0.01, amsgrad=True)
    assert xp.launches == []
    assert b1[0] is not None and p1[0].dtype == np.float16
    np.testing.assert_array_equal(p1[0], p2[0])
    np.testing.assert_array_equal(b1[0], b2[0])


@pytest.mark.parametrize("make", [lambda ps: __import__("threadgrad").optim.SGD(ps, lr=0.1, momentum=0.9),
                                  lambda ps: __import__("threadgrad").optim.Adam(ps, lr=0.01, amsgrad=True),
                                  lambda ps: __import__("threadgrad").optim.AdamW(ps, lr=0.01)],
                         ids=["SGD", "Adam", "AdamW"])
def test_tg_optim_steps_through_the_fused_updates_on_cuda(kcuda, make):
    """tg.optim on a device with fused kernels calls them, one launch per step for all the
    parameters (Note [Multi-tensor updates]), and gives what it gives on cpu (Note [Update functions] in threadgrad/optim/optimizer.py)."""
    p0, grads = _optim_state(5, n=2)
    runs = {}
    for dev in (devices.cpu, kcuda):
        ps = [engine.tensor(a, device=dev, requires_grad=True) for a in p0]
        opt = make(ps)
        kcuda.xp.launches.clear()
        for _ in range(3):
            for p, g in zip(ps, grads):
                p.grad = engine.tensor(g, device=dev)
            opt.step()
        launched = len(kcuda.xp.launches)
        runs[dev] = [np.asarray(p._data) for p in ps]
        assert all(p.version == 3 for p in ps)
    assert launched == 3  # the kcuda run: one launch per step for both parameters
    for a, b in zip(runs[devices.cpu], runs[kcuda]):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("norm_type", [2.0, float("inf")])
def test_clip_grad_norm_on_cuda_takes_the_multi_tensor_kernels_and_reads_nothing(kcuda, norm_type):
    """tg.nn.utils.clip_grad_norm_ on a device with fused kernels: four launches for the norm
    and one for the scaling, no .item(), each gradient's version up by one, and cpu's values."""
    import threadgrad as tg

    rng = np.random.default_rng(12)
    shapes = [(4, 3), (3,), (2, 2)]
    runs = {}
    for dev in (devices.cpu, kcuda):
        ps = [tg.nn.Parameter(engine.tensor(rng.standard_normal(s) * 0 + 1.0, device=dev)) for s in shapes]
        for p, s in zip(ps, shapes):
            p.grad = engine.tensor(np.arange(np.prod(s), dtype=float).reshape(s) - 2.5, device=dev)
        versions = [p.grad.version for p in ps]
        kcuda.xp.launches.clear()
        with pytest.MonkeyPatch.context() as mp:
            if dev is kcuda:
                mp.setattr(engine.Tensor, "item", lambda self: pytest.fail("clip_grad_norm_ read the GPU"))
            total = tg.nn.utils.clip_grad_norm_(ps, 1.5, norm_type)
        runs[dev] = (total.numpy(), [p.grad.numpy() for p in ps])
        assert [p.grad.version for p in ps] == [v + 1 for v in versions]
    assert [k for k in kcuda.xp.launches if "norm" in k or "scale" in k] == [
        "threadgrad_norm_partial_double", "threadgrad_norm_finish_double", "threadgrad_norm_total_double",
        "threadgrad_scale_double"]
    np.testing.assert_allclose(runs[kcuda][0], runs[devices.cpu][0], rtol=1e-14)
    for a, b in zip(runs[kcuda][1], runs[devices.cpu][1]):
        np.testing.assert_allclose(a, b, rtol=1e-14)


def test_clip_grad_norm_on_cuda_raises_for_a_nonfinite_norm_before_scaling(kcuda):
    import threadgrad as tg

    p = tg.nn.Parameter(engine.tensor(np.ones(3), device=kcuda))
    p.grad = engine.tensor(np.array([1.0, np.inf, 2.0]), device=kcuda)
    with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
        tg.nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(p.grad.numpy(), [1.0, np.inf, 2.0])
