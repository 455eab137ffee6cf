"""Every fused GPU kernel of devices/_fused.py against the plain formula it replaces, on a real GPU.

Skipped unless cupy imports and sees a GPU. Inputs are fresh random draws per test (never
zeros); the plain formula runs on the same cupy arrays (its operators are cupy ufuncs), or,
for nodes whose plain form is written with ops, through ``create_graph=True``, which records
the ops form on the same device. Which table a device picks is checked without a GPU in
tests/devices/test_fused_dispatch.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import devices, engine, ops
from threadgrad.devices import _fused

cupy = pytest.importorskip("cupy")
if not devices.cuda_available():
    pytest.skip("cupy is installed but no GPU is visible", allow_module_level=True)

pytestmark = [pytest.mark.cuda, pytest.mark.timeout(120)]

CUDA = devices.get("cuda")
K = CUDA.kernels
TOL = {np.float32: dict(rtol=2e-6, atol=1e-6), np.float64: dict(rtol=1e-13, atol=1e-14)}
DTYPES = [np.float32, np.float64]


def rand(seed, shape, dtype, lo=-3.0, hi=3.0):
    return cupy.asarray(np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype))


def close(a, b, dtype, loose=1.0):
    tol = {k: v * loose for k, v in TOL[dtype].items()}
    np.testing.assert_allclose(cupy.asnumpy(a), cupy.asnumpy(b), **tol)


def test_the_gpu_picks_the_fused_table():
    assert isinstance(K, _fused.Fused) and K.fused and devices.cpu.kernels is _fused.PLAIN


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["tanh_grad", "sigmoid_grad", "relu_grad"])
def test_elementwise_kernel_equals_plain(name, dtype):
    g = rand(1, (257, 33), dtype)
    y = rand(2, (257, 33), dtype, -1, 1)
    y[0, :5] = 0  # relu's boundary
    out = getattr(K, name)(g, y)
    assert out.dtype == dtype and out.shape == g.shape
    close(out, getattr(_fused.PLAIN, name)(g, y), dtype)


@pytest.mark.parametrize("dtype", [np.float16] + DTYPES)
@pytest.mark.parametrize("name", ["erf", "gelu", "gelu_tanh"])
def test_erf_and_gelu_forward_kernels_equal_plain(name, dtype):
    x = rand(3, (129, 65), dtype, -5, 5)
    x[0, :4] = cupy.asarray([0.0, -0.0, np.inf, -np.inf], dtype)
    x[1, 0] = np.nan
    fn = {"erf": K.erf, "gelu": lambda a: K.gelu(a, "none"), "gelu_tanh": lambda a: K.gelu(a, "tanh")}[name]
    plain = {"erf": _fused.PLAIN.erf, "gelu": lambda a: _fused.PLAIN.gelu(a, "none"),
             "gelu_tanh": lambda a: _fused.PLAIN.gelu(a, "tanh")}[name]
    out = fn(x)
    assert out.dtype == dtype and out.shape == x.shape
    want = plain(cupy.asnumpy(x))  # the plain formula on numpy: the cpu's values
    tol = dict(rtol=2e-3, atol=1e-3) if dtype == np.float16 else {k: v * 2 for k, v in TOL[dtype].items()}
    np.testing.assert_allclose(cupy.asnumpy(out), want, **tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 1000), (5, 3), (2, 1), (0, 4)])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_kernels_equal_the_plain_formula(shape, dtype, affine):
    m, n = shape
    x, dy = rand(7, shape, dtype), rand(8, shape, dtype)
    if m > 1:
        x[1] = 0.5  # a constant row: variance 0
    w, b = (rand(9, (n,), dtype), rand(10, (n,), dtype)) if affine else (None, None)
    y, mean, rstd = K.layer_norm(x, w, b, 1e-5)
    xh, dyh = cupy.asnumpy(x).astype(np.float64), cupy.asnumpy(dy).astype(np.float64)
    wh = cupy.asnumpy(w).astype(np.float64) if affine else np.ones(n)
    bh = cupy.asnumpy(b).astype(np.float64) if affine else np.zeros(n)
    mu = xh.mean(axis=1, keepdims=True)
    r = 1 / np.sqrt(((xh - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    xhat = (xh - mu) * r
    loose = 50.0 if n == 1000 else 5.0  # float32 sums over 1000 elements, in another order
    close(y, xhat * wh + bh, dtype, loose)
    close(mean, mu[:, 0], dtype, loose)
    close(rstd, r[:, 0], dtype, loose)
    dx, dw, db = K.layer_norm_grad(dy, x, w, mean, rstd, (True, affine, affine))
    gh = dyh * wh
    want_dx = r * (gh - gh.mean(axis=1, keepdims=True) - xhat * (gh * xhat).mean(axis=1, keepdims=True))
    close(dx, want_dx, dtype, loose * 20)  # rstd is 447 on the constant row: its dx is scaled up
    if affine:
        close(dw, (dyh * xhat).sum(axis=0), dtype, loose)
        close(db, dyh.sum(axis=0), dtype, loose)
    else:
        assert dw is None and db is None


@pytest.mark.parametrize("dtype", DTYPES)
def test_mul_and_div_kernels_equal_plain(dtype):
    g, a, b = rand(12, (99, 7), dtype), rand(13, (99, 7), dtype), rand(14, (7,), dtype, 0.5, 2)
    close(K.mul(g, b), _fused.PLAIN.mul(g, b), dtype)
    close(K.div_grad_b(g, a, b), _fused.PLAIN.div_grad_b(g, a, b), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_operand(dtype):
    g = rand(3, (64, 16), dtype)
    y = rand(4, (16,), dtype, -1, 1)
    close(K.tanh_grad(g, y), _fused.PLAIN.tanh_grad(g, y), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1])
def test_log_softmax_grad_equals_plain(dtype, dim):
    g = rand(5, (40, 70), dtype)
    y = rand(6, (40, 70), dtype, -5, 0)
    close(K.log_softmax_grad(g, y, dim, cupy), _fused.PLAIN.log_softmax_grad(g, y, dim, cupy), dtype, loose=10)


def test_mixed_dtypes_fall_back_to_plain():
    g = rand(7, (8,), np.float32)
    y = rand(8, (8,), np.float64, -1, 1)
    out = K.tanh_grad(g, y)
    assert out.dtype == np.float64
    close(out, _fused.PLAIN.tanh_grad(g, y), np.float64)


NODES = {
    "tanh": lambda x: ops.tanh(x),
    "mul": lambda x: x * (x + 1.0),
    "div": lambda x: (x + 5.0) / (x * x + 1.0),
    "sigmoid": lambda x: ops.sigmoid(x),
    "relu": lambda x: ops.relu(x),
    "gelu": lambda x: ops.gelu(x),
    "gelu_tanh": lambda x: ops.gelu(x, approximate="tanh"),
    "softplus": lambda x: ops.softplus(x, beta=1.5, threshold=2.0),
    "softmax0": lambda x: ops.softmax(x, 0),
    "softmax1": lambda x: ops.softmax(x, 1),
    "log_softmax": lambda x: ops.log_softmax(x, 1),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(NODES))
def test_node_fused_first_order_equals_ops_form(name, dtype):
    # backward() takes the first-order form (the fused kernel); grad(create_graph=True) the ops form.
    x = engine.tensor(rand(9, (31, 17), dtype).get(), device=CUDA, requires_grad=True)
    w = engine.tensor(rand(10, (31, 17), dtype).get(), device=CUDA)
    (NODES[name](x) * w).sum().backward()
    fused = x.grad._data.copy()
    (ops_form,) = engine.grad((NODES[name](x) * w).sum(), x, create_graph=True)
    close(fused, ops_form._data, dtype, loose=10)
    # ... and both equal the cpu's gradient.
    xc = engine.tensor(x.detach().numpy(), requires_grad=True)
    (NODES[name](xc) * engine.tensor(w.numpy())).sum().backward()
    close(fused, cupy.asarray(xc.grad.numpy()), dtype, loose=10)


def test_double_backward_through_a_fused_node():
    x0 = np.random.default_rng(11).uniform(-2, 2, 50)
    x = engine.tensor(x0, device=CUDA, requires_grad=True)
    (g,) = engine.grad(ops.sigmoid(x).sum(), x, create_graph=True)
    g.sum().backward()
    s = 1 / (1 + np.exp(-x0))
    np.testing.assert_allclose(x.grad.numpy(), s * (1 - s) * (1 - 2 * s), rtol=1e-12)


@pytest.mark.parametrize("targets,code", [([0, 9, 3, 9], 0), ([0, -100, 3, 9], 1), ([0, 10, 3, 1], 2),
                                          ([-100, -1, 3, 1], 3)])
def test_class_index_check_equals_plain(targets, code):
    t = cupy.asarray(np.array(targets))
    assert K.class_index_check(t, -100, 10) == code == _fused.PLAIN.class_index_check(t, -100, 10)


def test_cross_entropy_matches_cpu():
    rng = np.random.default_rng(12)
    logits, target = rng.standard_normal((64, 10)), rng.integers(0, 10, 64)
    x = engine.tensor(logits, device=CUDA, requires_grad=True)
    ops.cross_entropy(x, engine.tensor(target, device=CUDA)).backward()
    xc = engine.tensor(logits, requires_grad=True)
    ops.cross_entropy(xc, engine.tensor(target)).backward()
    np.testing.assert_allclose(x.grad.numpy(), xc.grad.numpy(), rtol=1e-12, atol=1e-15)
    with pytest.raises(IndexError, match="outside"):
        ops.cross_entropy(x, engine.tensor(np.array([10] + [0] * 63), device=CUDA))


def _state(seed, dtype):
    shapes = [(300, 7), (7,), (33, 65)]
    return ([rand(seed + i, s, dtype) for i, s in enumerate(shapes)],
            [rand(seed + 10 + i, s, dtype) for i, s in enumerate(shapes)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [dict(), dict(weight_decay=0.1, maximize=True), dict(momentum=0.9),
                                dict(momentum=0.9, dampening=0.3, weight_decay=0.01, nesterov=False),
                                dict(momentum=0.8, nesterov=True)])
def test_fused_sgd_equals_plain(kw, dtype):
    p1, grads = _state(20, dtype)
    p2 = [p.copy() for p in p1]
    b1, b2 = [None] * 3, [None] * 3
    for _ in range(3):
        K.sgd(p1, grads, b1, lr=0.1, **kw)
        _fused.plain_sgd(p2, grads, b2, lr=0.1, **kw)
    for a, b in zip(p1, p2):
        close(a, b, dtype, loose=10)
    for a, b in zip(b1, b2):
        assert (a is None) == (b is None)
        if a is not None:
            close(a, b, dtype, loose=10)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [dict(), dict(weight_decay=0.1), dict(weight_decay=0.1, decoupled_weight_decay=True),
                                dict(amsgrad=True, maximize=True)])
def test_fused_adam_equals_plain(kw, dtype):
    p1, grads = _state(40, dtype)
    p2 = [p.copy() for p in p1]
    st1 = [[cupy.zeros_like(p) for p in p1] for _ in range(3)]
    st2 = [[cupy.zeros_like(p) for p in p1] for _ in range(3)]
    for step in (1, 2, 3, 4):
        K.adam(p1, grads, *st1, step, lr=0.01, **kw)
        _fused.plain_adam(p2, grads, *st2, step, lr=0.01, **kw)
    for a, b in zip(p1 + sum(st1, []), p2 + sum(st2, [])):
        close(a, b, dtype, loose=50)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_fused_cross_entropy_equals_cpu_first_and_second_order(reduction, dtype):
    rng = np.random.default_rng(13)
    logits, target, w = rng.standard_normal((128, 10)).astype(dtype), rng.integers(0, 10, 128), rng.standard_normal((128, 10))
    x = engine.tensor(logits, device=CUDA, requires_grad=True)
    xc = engine.tensor(logits, requires_grad=True)
    loss = ops.cross_entropy(x, engine.tensor(target, device=CUDA), reduction=reduction)
    want = ops.cross_entropy(xc, engine.tensor(target), reduction=reduction)
    if reduction != "none":
        assert loss.grad_fn.name() == "CrossEntropyBackward0"
    close(loss._data, cupy.asarray(want.detach().numpy()), dtype, loose=10)
    loss.sum().backward()
    want.sum().backward()
    close(x.grad._data, cupy.asarray(xc.grad.numpy()), dtype, loose=10)
    (g,) = engine.grad(ops.cross_entropy(x, engine.tensor(target, device=CUDA), reduction=reduction).sum(), x,
                       create_graph=True)
    (gc,) = engine.grad(ops.cross_entropy(xc, engine.tensor(target), reduction=reduction).sum(), xc, create_graph=True)
    (h,) = engine.grad((g * engine.tensor(w.astype(dtype), device=CUDA)).sum(), x)
    (hc,) = engine.grad((gc * engine.tensor(w.astype(dtype))).sum(), xc)
    close(h._data, cupy.asarray(hc.numpy()), dtype, loose=10)


def _many(seed, dtype):
    """40 parameters and gradients for the multi-tensor launches (Note [Multi-tensor updates]):
    one bigger than a launch's blocks cover in one pass (the grid-stride loop), an empty one,
    and more than one launch holds."""
    shapes = [(600_001,), (0, 3)] + [(i % 5 + 1, 7) for i in range(38)]
    return ([rand(seed + i, s, dtype) for i, s in enumerate(shapes)],
            [rand(seed + 100 + i, s, dtype) for i, s in enumerate(shapes)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [dict(weight_decay=0.1, maximize=True), dict(momentum=0.9, dampening=0.3, weight_decay=0.01),
                                dict(momentum=0.8, nesterov=True)])
def test_multi_tensor_sgd_equals_the_single_tensor_kernels(kw, dtype):
    p1, grads = _many(60, dtype)
    p2 = [p.copy() for p in p1]
    b1, b2 = [None] * len(p1), [None] * len(p1)
    mom = kw.get("momentum", 0)
    for step in range(3):
        K.sgd(p1, grads, b1, lr=0.1, **kw)
        for i, (p, g) in enumerate(zip(p2, grads)):  # the single-tensor kernels, one launch each
            if mom:
                first = b2[i] is None
                if first:
                    b2[i] = cupy.empty_like(p)
                K._sgd_momentum(g, 0.1, kw.get("weight_decay", 0.0), mom, kw.get("dampening", 0.0),
                                kw.get("nesterov", False), False, first, p, b2[i])
            else:
                K._sgd(g, 0.1, kw.get("weight_decay", 0.0), kw.get("maximize", False), p)
    for a, b in zip(p1 + [x for x in b1 if x is not None], p2 + [x for x in b2 if x is not None]):
        close(a, b, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [dict(weight_decay=0.1), dict(weight_decay=0.1, decoupled_weight_decay=True),
                                dict(amsgrad=True, maximize=True)])
def test_multi_tensor_adam_equals_plain_with_per_tensor_steps(kw, dtype):
    p1, grads = _many(70, dtype)
    p2 = [p.copy() for p in p1]
    st1 = [[cupy.zeros_like(p) for p in p1] for _ in range(3)]
    st2 = [[cupy.zeros_like(p) for p in p1] for _ in range(3)]
    for step in (1, 2, 3):
        steps = [step + i % 4 for i in range(len(p1))]
        K.adam(p1, grads, *st1, steps, lr=0.01, **kw)
        _fused.plain_adam(p2, grads, *st2, steps, lr=0.01, **kw)
    for a, b in zip(p1 + sum(st1, []), p2 + sum(st2, [])):
        close(a, b, dtype, loose=50)


def test_multi_tensor_update_runs_on_the_arrays_gpu_and_the_current_stream():
    # The launch enters the arrays' GPU and queues on its current stream: a non-blocking
    # stream, synchronized only through its own event, sees the update.
    p, g = _many(80, np.float32)
    want = [a - 0.5 * b for a, b in zip(p, g)]
    s = cupy.cuda.Stream(non_blocking=True)
    s.wait_event(cupy.cuda.get_current_stream().record())
    with s:
        K.sgd(p, g, [None] * len(p), lr=0.5)
        done = s.record()
    done.synchronize()
    for a, b in zip(p, want):
        close(a, b, np.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(64, 10), (7, 1000), (0, 5), (3, 1)])
@pytest.mark.parametrize("mean", [True, False])
def test_cross_entropy_forward_kernel_equals_the_separate_kernels(shape, mean, dtype):
    n, c = shape
    x = rand(90, shape, dtype, -8, 8)
    t = cupy.asarray(np.random.default_rng(91).integers(0, c, n))
    lsm, loss = K.cross_entropy_forward(x, t, mean)
    s = x - (x.max(axis=1, keepdims=True) if n else cupy.zeros((0, 1), dtype))
    want_lsm = s - cupy.log(cupy.exp(s).sum(axis=1, keepdims=True))
    assert lsm.dtype == loss.dtype == dtype and lsm.shape == shape and loss.shape == ()
    close(lsm, want_lsm, dtype)
    if n:
        close(loss, K.nll(want_lsm, t, mean), dtype)


def test_cross_entropy_forward_kernel_nan_and_inf_rows_equal_the_cpu():
    logits = np.array([[1.0, np.nan, 2.0], [-np.inf, -np.inf, -np.inf], [np.inf, 0.0, 1.0], [0.5, -1.0, 3.0]])
    target = np.array([0, 1, 2, 2])
    with np.errstate(all="ignore"):
        for row in range(4):
            got = ops.cross_entropy(engine.tensor(logits[row:row + 1], device=CUDA),
                                    engine.tensor(target[row:row + 1], device=CUDA), reduction="sum").item()
            want = ops.cross_entropy(engine.tensor(logits[row:row + 1]), engine.tensor(target[row:row + 1]),
                                     reduction="sum").item()
            np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_fused_mse_loss_equals_cpu_first_and_second_order(reduction, dtype):
    rng = np.random.default_rng(14)
    a0, b0 = rng.standard_normal((300, 17)).astype(dtype), rng.standard_normal((300, 17)).astype(dtype)
    a, b = engine.tensor(a0, device=CUDA, requires_grad=True), engine.tensor(b0, device=CUDA, requires_grad=True)
    ac, bc = engine.tensor(a0, requires_grad=True), engine.tensor(b0, requires_grad=True)
    loss, want = ops.mse_loss(a, b, reduction=reduction), ops.mse_loss(ac, bc, reduction=reduction)
    assert loss.grad_fn.name() == "MseLossBackward0"
    close(loss._data, cupy.asarray(want.detach().numpy()), dtype, loose=10)
    loss.backward()
    want.backward()
    close(a.grad._data, cupy.asarray(ac.grad.numpy()), dtype, loose=10)
    close(b.grad._data, cupy.asarray(bc.grad.numpy()), dtype, loose=10)
    (g,) = engine.grad(ops.mse_loss(a, b, reduction=reduction), a, create_graph=True)
    (gc,) = engine.grad(ops.mse_loss(ac, bc, reduction=reduction), ac, create_graph=True)
    (h,) = engine.grad((g * g).sum(), a)
    (hc,) = engine.grad((gc * gc).sum(), ac)
    close(h._data, cupy.asarray(hc.numpy()), dtype, loose=10)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_norm_and_scale_equal_torchs_clip_grad_norm(norm_type, max_norm, dtype):
    """The multi-tensor norm and scaling (Note [Multi-tensor updates]) against torch's own
    clip_grad_norm_ on the same GPU: 40 gradients, one bigger than a launch's blocks cover."""
    torch = pytest.importorskip("torch")
    empty = [] if norm_type == float("inf") else [(0, 3)]  # torch refuses the inf-norm of an empty tensor
    grads = [rand(120 + i, s, dtype) for i, s in enumerate([(600_001,)] + empty + [(i % 5 + 1, 7) for i in range(38)])]
    params = [torch.zeros(tuple(g.shape), dtype=getattr(torch, np.dtype(dtype).name), device="cuda") for g in grads]
    for p, g in zip(params, grads):
        p.grad = torch.as_tensor(g, device="cuda").clone()
    want = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
    out = K.clip_norm(grads, max_norm, norm_type)
    K.scale_(grads, out[1:])
    close(out[0], cupy.asarray(want), dtype, loose=50)
    for g, p in zip(grads, params):
        close(g, cupy.asarray(p.grad), dtype, loose=50)
