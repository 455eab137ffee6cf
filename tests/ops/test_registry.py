"""Every registered op, over every sample in samples.py: forward against numpy, gradcheck and
gradgradcheck in float64, float32 in -> float32 out (forward and gradients), and a device pass
on ``virtual:1``. An op registered without samples fails ``test_every_op_has_samples``."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from threadgrad import engine, ops
from threadgrad.engine.gradcheck import gradcheck, gradgradcheck
from samples import SAMPLES, Sample


def test_every_op_has_samples() -> None:
    missing = set(ops.REGISTRY) - set(SAMPLES)
    extra = set(SAMPLES) - set(ops.REGISTRY)
    assert not missing, f"ops without samples in tests/ops/samples.py: {sorted(missing)}"
    assert not extra, f"samples for ops that are not registered: {sorted(extra)}"


def test_registry_is_the_public_surface() -> None:
    for name, fn in ops.REGISTRY.items():
        assert getattr(ops, name) is fn, name
        assert fn.__doc__, f"ops.{name} has no docstring"


CASES = [(name, i) for name in sorted(SAMPLES) for i in range(len(SAMPLES[name]()))]


def _case(name: str, i: int) -> Sample:
    return SAMPLES[name]()[i]


def _outputs(out: Any) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _first(out: Any) -> engine.Tensor:
    return _outputs(out)[0]


def _cast(ts: tuple, dtype: Any) -> tuple:
    return tuple(engine.tensor(x.detach().numpy(), dtype=dtype, requires_grad=x.requires_grad)
                 if x.dtype.kind == "f" else x for x in ts)


@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_forward_matches_numpy(name: str, i: int) -> None:
    s = _case(name, i)
    out = s.run(ops.REGISTRY[name], *s.tensors)
    for o in _outputs(out):
        assert isinstance(o, engine.Tensor)
    if s.ref is not None:
        expected = s.ref(*[x.detach().numpy() for x in s.tensors])
        got = _first(out).detach().numpy()
        assert got.shape == np.shape(expected), f"{name} [{s}]: shape {got.shape} != {np.shape(expected)}"
        np.testing.assert_allclose(got, expected, rtol=1e-7, atol=1e-12, err_msg=f"{name} [{s}]")


@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_gradcheck_and_gradgradcheck(name: str, i: int) -> None:
    s = _case(name, i)
    if not s.grad:
        pytest.skip("not differentiable")
    op = ops.REGISTRY[name]

    def fn(*ts: engine.Tensor) -> Any:
        return s.run(op, *ts)

    assert gradcheck(fn, s.tensors)
    assert gradgradcheck(fn, s.tensors)


@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_float32_stays_float32(name: str, i: int) -> None:
    s = _case(name, i)
    ts = _cast(s.tensors, engine.float32)
    out = _outputs(s.run(ops.REGISTRY[name], *ts))
    for o in out:
        if o.dtype.kind == "f":
            assert o.dtype == np.float32, f"{name} [{s}] gave {o.dtype} for float32 inputs"
    diff = [x for x in ts if x.requires_grad]
    used = [o for o in out if o.requires_grad]
    if s.grad and diff and used:
        loss = ops.sum(ops.stack([ops.sum(o) for o in used]))
        grads = engine.grad(loss, diff, allow_unused=True)
        for g, x in zip(grads, diff):
            assert g is None or (g.dtype == np.float32 and g.shape == x.shape), name


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_on_virtual_device(name: str) -> None:
    """The first sample, on ``virtual:1``: outputs and gradients stay on that device."""
    s = SAMPLES[name]()[0]
    dev = engine.devices_get = __import__("threadgrad").devices.get("virtual:1")
    ts = tuple(engine.tensor(x.detach().numpy(), device=dev, requires_grad=x.requires_grad) for x in s.tensors)
    out = _outputs(s.run(ops.REGISTRY[name], *ts))
    expected_dev = dev
    for o in out:
        assert o.device is expected_dev, f"{name}: output on {o.device}"
    if s.grad:
        assert gradcheck(lambda *a: s.run(ops.REGISTRY[name], *a), ts)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_first_order_formulas_match_create_graph(name: str, i: int, dtype: str) -> None:
    """A backward formula may take an array fast path when no graph is recorded (Note
    [First-order formulas] in ops/_core.py): its gradients must equal the ops path's
    (``create_graph=True``) bit for bit, in float64 and float32, hold arrays (never numpy scalars, which
    0-d results give), and accumulate into ``.grad`` over two backward calls."""
    s = _case(name, i)
    tensors = s.tensors if dtype == "float64" else _cast(s.tensors, engine.float32)
    out = _outputs(s.run(ops.REGISTRY[name], *tensors))
    for o in out:
        assert type(o._data) is np.ndarray, f"{name} [{s}]: output holds {type(o._data).__name__}"
    diff = [x for x in tensors if x.requires_grad]
    if not (s.grad and diff and any(o.requires_grad for o in out)):
        return
    rng = np.random.default_rng(7)
    weights = [engine.tensor(rng.uniform(0.5, 1.5, size=o.shape), dtype=o.dtype, device=o.device) for o in out]

    def loss() -> engine.Tensor:
        outs = _outputs(s.run(ops.REGISTRY[name], *tensors))
        return ops.sum(ops.stack([ops.sum(o * w) for o, w in zip(outs, weights) if o.requires_grad]))

    fast = engine.grad(loss(), diff, allow_unused=True)
    slow = engine.grad(loss(), diff, allow_unused=True, create_graph=True)
    for x, f, g in zip(diff, fast, slow):
        assert (f is None) == (g is None), f"{name} [{s}]"
        if f is None:
            continue
        assert type(f._data) is np.ndarray, f"{name} [{s}]: gradient holds {type(f._data).__name__}"
        assert f.shape == x.shape and f.dtype == x.dtype, f"{name} [{s}]"
        np.testing.assert_array_equal(f.detach().numpy(), g.detach().numpy(), err_msg=f"{name} [{s}]")
    for x in diff:
        x.grad = None
    for _ in range(2):
        loss().backward()
    for x, f in zip(diff, fast):
        if f is not None:
            np.testing.assert_allclose(x.grad.numpy(), 2 * f.numpy(), rtol=1e-12, err_msg=f"{name} [{s}]")


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_op_brings_a_stale_view_up_to_date(name: str) -> None:
    """A view whose root was changed by a recorded in-place op has an out-of-date graph
    (Note [Stale views] in ops/views.py): every op must take its history anew from the root
    (check_fresh), so its gradients equal those through a view taken after the change; an op
    that skipped the check would send them through the root's old graph (half of them here)."""
    s = SAMPLES[name]()[0]
    first = s.tensors[0] if s.tensors else None
    if first is None or first.dtype.kind != "f" or not s.grad:
        pytest.skip("no float tensor input to replace")
    grads = []
    for stale in (True, False):
        x = engine.tensor(np.stack([first.detach().numpy()] * 2), requires_grad=True)
        root = x * 1.0
        view = root[0]
        root.mul_(2.0)
        if not stale:
            view = root[0]
        outs = s.run(ops.REGISTRY[name], view, *s.tensors[1:])
        outs = [o for o in (outs if isinstance(outs, (tuple, list)) else (outs,)) if o.requires_grad]
        engine.backward([ops.sum(o * 1.0) for o in outs])
        grads.append(x.grad.tolist())
    assert grads[0] == grads[1], name
