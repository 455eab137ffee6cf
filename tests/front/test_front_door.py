"""``import threadgrad as tg``: torch's flat names, submodules and everyday tensor methods,
checked against torch where it is installed."""
from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import threadgrad as tg
from threadgrad import engine, ops


def test_every_op_and_creation_function_is_flat():
    for name in ops.REGISTRY:
        if name.startswith("linalg_"):  # torch.linalg's ops (ATen's names): tg.linalg.X, not flat
            assert getattr(tg.linalg, name[len("linalg_"):]) is ops.REGISTRY[name], name
            assert not hasattr(tg, name), name
            continue
        assert getattr(tg, name) is ops.REGISTRY[name], name
    for name in ("tensor", "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like",
                 "rand", "randn", "arange", "manual_seed", "no_grad", "enable_grad", "set_grad_enabled",
                 "is_grad_enabled", "Tensor"):
        assert getattr(tg, name) is getattr(engine, name), name
    assert tg.Function is engine.Function and tg.argmax is ops.argmax and tg.one_hot is ops.one_hot
    assert set(tg.__all__) <= set(dir(tg))


def test_torch_names_a_port_reaches_for_exist():
    torch = pytest.importorskip("torch")
    names = ["tensor", "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "rand", "randn", "rand_like",
             "randn_like", "arange", "manual_seed", "from_numpy", "as_tensor", "is_tensor", "numel", "no_grad",
             "enable_grad", "set_grad_enabled", "is_grad_enabled", "Tensor", "device", "save", "load",
             "float16", "half", "float32", "float", "float64", "double", "int8", "uint8", "int16", "short", "int32",
             "int", "int64", "long", "bool", "complex64", "complex128",
             "cat", "stack", "where", "split", "squeeze", "unsqueeze", "reshape", "transpose", "permute", "flatten",
             "sum", "mean", "max", "min", "argmax", "argmin", "var", "std", "norm", "logsumexp", "softmax",
             "log_softmax", "exp", "log", "sqrt", "abs", "sin", "cos", "tanh", "sigmoid", "relu", "maximum",
             "minimum", "clamp", "clip", "matmul", "add", "sub", "mul", "div", "neg", "pow", "erf", "gather",
             "conv2d", "dropout"]
    for name in names:
        assert hasattr(torch, name), name  # the list is torch's
        assert hasattr(tg, name), name
    for name in ("backward", "grad", "Function", "gradcheck", "gradgradcheck", "detect_anomaly",
                 "set_detect_anomaly"):
        assert hasattr(torch.autograd, name) and hasattr(tg.autograd, name), name
    for name in ("saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks", "Node",
                 "register_multi_grad_hook"):
        assert hasattr(torch.autograd.graph, name) and hasattr(tg.autograd.graph, name), name
    assert callable(tg.autograd.backward_async) and callable(tg.autograd.grad_async)
    assert tg.autograd.function.once_differentiable is engine.once_differentiable
    for name in ("SGD", "Adam", "AdamW", "Optimizer"):
        assert hasattr(torch.optim, name) and hasattr(tg.optim, name), name
    for name in ("is_available", "device_count", "synchronize"):
        assert hasattr(torch.cuda, name) and hasattr(tg.cuda, name), name


def test_dtypes_compare_with_tensor_dtypes():
    x = tg.ones(2)
    assert x.dtype == tg.float32 == tg.float and x.double().dtype == tg.float64 == tg.double
    assert x.long().dtype == tg.int64 == tg.long and x.int().dtype == tg.int32 and x.bool().dtype == tg.bool
    assert x.half().dtype == tg.float16 and tg.zeros(2, dtype=tg.int64).dtype == tg.long


def test_checkpoint_imports_as_torch_users_write_it():
    from threadgrad.utils.checkpoint import CheckpointError, checkpoint, checkpoint_sequential

    assert checkpoint is engine.checkpoint and checkpoint_sequential is engine.checkpoint_sequential
    assert CheckpointError is engine.CheckpointError and tg.utils.checkpoint.checkpoint is checkpoint


FUNCTIONAL = ["relu", "gelu", "softmax", "log_softmax", "cross_entropy", "mse_loss", "l1_loss", "linear", "conv2d",
              "dropout", "one_hot", "sigmoid", "tanh", "softplus"]


def test_nn_functional_has_torchs_signatures():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as TF

    for name in FUNCTIONAL:
        ours = getattr(tg.nn.functional, name)
        try:
            theirs = inspect.signature(getattr(TF, name))
        except ValueError:  # a C builtin (linear, conv2d, gelu, ...): no Python signature to compare
            continue
        assert list(inspect.signature(ours).parameters) == list(theirs.parameters), name


def test_nn_functional_values_match_torch():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as TF

    F = tg.nn.functional
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    tgt = np.array([0, 2, 1, 2])
    img = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    k = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    cases = [
        (lambda M, L: M.relu(L.tensor(x)), {}),
        (lambda M, L: M.gelu(L.tensor(x), approximate="tanh"), {}),
        (lambda M, L: M.softmax(L.tensor(x), dim=1), {}),
        (lambda M, L: M.log_softmax(L.tensor(x), 0), {}),
        (lambda M, L: M.cross_entropy(L.tensor(x), L.tensor(tgt)), {}),
        (lambda M, L: M.cross_entropy(L.tensor(x), L.tensor(tgt), reduction="sum", ignore_index=2), {}),
        (lambda M, L: M.mse_loss(L.tensor(x), L.tensor(x * 2), reduction="sum"), {}),
        (lambda M, L: M.l1_loss(L.tensor(x), L.tensor(x * 2)), {}),
        (lambda M, L: M.linear(L.tensor(x), L.tensor(w), L.tensor(b)), {}),
        (lambda M, L: M.conv2d(L.tensor(img), L.tensor(k), None, 1, "same"), {}),
        (lambda M, L: M.conv2d(L.tensor(img), L.tensor(k), stride=2, padding=1), {}),
        (lambda M, L: M.one_hot(L.tensor(tgt), 4), {}),
        (lambda M, L: M.dropout(L.tensor(x), 0.3, training=False), {}),
    ]
    for i, (f, _) in enumerate(cases):
        np.testing.assert_allclose(f(F, tg).numpy(), f(TF, torch).numpy(), rtol=1e-5, atol=1e-6, err_msg=str(i))


def test_nn_functional_refuses_what_it_cannot_do():
    F = tg.nn.functional
    x = tg.ones(2, 3)
    # (cross_entropy's weight= and label_smoothing= exist now: tests/nn/test_cross_entropy_more.py)
    with pytest.raises(NotImplementedError, match="max_norm=1.0"):
        F.embedding(tg.tensor([0, 1]), x, max_norm=1.0)
    with pytest.raises(NotImplementedError, match="groups=2"):
        F.conv_transpose2d(tg.ones(1, 2, 4, 4), tg.ones(2, 1, 3, 3), groups=2)
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        assert F.softmax(x).shape == (2, 3)


def test_inplace_relu_and_dropout():
    F = tg.nn.functional
    x = tg.tensor([-1.0, 2.0])
    y = F.relu(x, inplace=True)
    assert y is x and x.tolist() == [0.0, 2.0] and x.version == 1
    w = tg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        F.relu(w, inplace=True)


def _pair(torch, data, dtype=np.float32):
    a = np.asarray(data, dtype=dtype)
    return tg.tensor(a.copy(), requires_grad=a.dtype.kind == "f"), torch.tensor(a.copy(), requires_grad=a.dtype.kind == "f")


METHOD_CASES = [
    ("float", lambda t: t.float()), ("double", lambda t: t.double()), ("long", lambda t: (t * 3).long()),
    ("int", lambda t: (t * 3).int()), ("bool", lambda t: t.bool()), ("t", lambda t: t.t()),
    ("flatten", lambda t: t.reshape(2, 3, 2).flatten(1)), ("flatten all", lambda t: t.flatten()),
    ("argmax", lambda t: t.argmax()), ("argmax dim", lambda t: t.argmax(dim=1)),
    ("argmin keepdim", lambda t: t.argmin(1, keepdim=True)), ("var", lambda t: t.var()),
    ("var dim", lambda t: t.var(1, keepdim=True)), ("var unbiased=False", lambda t: t.var(0, False)),
    ("var correction", lambda t: t.var(dim=0, correction=0)), ("std", lambda t: t.std()),
    ("std dim", lambda t: t.std(dim=1)), ("norm", lambda t: t.norm()), ("norm 1", lambda t: t.norm(1)),
    ("norm dim", lambda t: t.norm(dim=1)), ("norm inf", lambda t: t.norm(float("inf"))),
    ("norm 3 dim keepdim", lambda t: t.norm(3, dim=0, keepdim=True)),
    ("sum axis", lambda t: t.sum(axis=1)), ("sum axis keepdims", lambda t: t.sum(axis=0, keepdims=True)),
    ("mean axis", lambda t: t.mean(axis=-1)), ("max axis", lambda t: t.max(axis=1)[0]),
    ("min axis", lambda t: t.min(axis=0).values), ("softmax axis", lambda t: t.softmax(axis=1)),
    ("logsumexp axis", lambda t: t.logsumexp(axis=1)), ("var axis", lambda t: t.var(axis=1)),
    ("unsqueeze axis", lambda t: t.unsqueeze(axis=0)), ("squeeze axis", lambda t: t.unsqueeze(1).squeeze(axis=1)),
]


@pytest.mark.parametrize("name,f", METHOD_CASES, ids=[c[0] for c in METHOD_CASES])
def test_tensor_methods_match_torch(name, f):
    """Values, dtypes, shapes and (for floating results) gradients, as torch's."""
    torch = pytest.importorskip("torch")
    a, b = _pair(torch, np.random.default_rng(5).standard_normal((4, 3)))
    ra, rb = f(a), f(b)
    assert ra.shape == tuple(rb.shape)
    assert str(ra.dtype) == str(rb.dtype).removeprefix("torch.")
    np.testing.assert_allclose(ra.detach().numpy(), rb.detach().numpy(), rtol=1e-5, atol=1e-6)
    if rb.requires_grad:
        ra.sum().backward()
        rb.sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-6)
    else:
        assert not ra.requires_grad


def test_functions_take_axis_as_torch():
    torch = pytest.importorskip("torch")
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    for f in (lambda L: L.cat([L.tensor(x), L.tensor(x)], axis=1), lambda L: L.stack([L.tensor(x)] * 2, axis=2),
              lambda L: L.sum(L.tensor(x), axis=0), lambda L: L.argmax(L.tensor(x), axis=1),
              lambda L: L.log_softmax(L.tensor(x), axis=0), lambda L: L.std(L.tensor(x), axis=1)):
        np.testing.assert_allclose(f(tg).numpy(), f(torch).numpy(), rtol=1e-6)
    with pytest.raises(TypeError, match="axis= is its alias"):
        tg.sum(tg.ones(2), dim=0, axis=0)


def test_std_and_norm_gradients_at_zero_are_torchs():
    """Zero where torch masks the 0 * inf of a plain sqrt (a constant input, a zero vector)."""
    torch = pytest.importorskip("torch")
    for f in (lambda t: t.std(), lambda t: t.norm(), lambda t: t.std(dim=0), lambda t: t.norm(dim=1)):
        a = tg.ones(2, 3, requires_grad=True) if f is not None else None
        z = tg.zeros(2, 3, requires_grad=True)
        ta, tz = torch.ones(2, 3, requires_grad=True), torch.zeros(2, 3, requires_grad=True)
        for ours, theirs in ((a, ta), (z, tz)):
            f(ours).sum().backward()
            f(theirs).sum().backward()
            np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())


def test_var_std_norm_double_backward():
    x = tg.tensor(np.random.default_rng(1).standard_normal((3, 4)), requires_grad=True)
    for f in (lambda t: t.var(1), lambda t: t.std(0), lambda t: t.norm(dim=1), lambda t: t.norm(3)):
        assert tg.autograd.gradcheck(f, (x,))
        assert tg.autograd.gradgradcheck(f, (x,))


def test_t_flatten_errors_and_devices():
    with pytest.raises(RuntimeError, match=r"t\(\) expects a tensor with <= 2 dimensions, but self is 3D"):
        tg.ones(2, 3, 4).t()
    with pytest.raises(RuntimeError, match="start_dim cannot come after end_dim"):
        tg.ones(2, 3).flatten(1, 0)
    v = tg.ones(2, device="virtual:1")
    assert v.cpu().device == tg.device("cpu") and tg.device("virtual", 1) is v.device
    if not tg.cuda.is_available():
        with pytest.raises(RuntimeError):
            tg.ones(2).cuda()
        assert tg.cuda.device_count() == 0


def test_from_numpy_and_as_tensor_share_memory():
    a = np.zeros(3, dtype=np.float32)
    t = tg.from_numpy(a)
    a[0] = 5.0
    assert t.tolist() == [5.0, 0.0, 0.0] and tg.as_tensor(a)._data is a
    assert tg.as_tensor(t) is t and tg.as_tensor([1.0]).dtype == tg.float32
    assert tg.as_tensor(a, dtype=tg.float64)._data is not a
    with pytest.raises(TypeError, match="expected np.ndarray"):
        tg.from_numpy([1.0])


def test_integer_conversion_of_a_tensor_that_requires_grad_is_outside_the_graph():
    x = tg.tensor([1.5, 2.5], requires_grad=True)
    i = x.long()
    assert i.tolist() == [1, 2] and not i.requires_grad and i.grad_fn is None
    y = (x * 2).to(tg.int32)
    assert not y.requires_grad
