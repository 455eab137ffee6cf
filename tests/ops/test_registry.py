"""Every registered op, over every sample in samples.py: forward against numpy, gradcheck and
gradgradcheck in float64, float32 in -> float32 out (forward and gradients), and a device pass
on ``virtual:1``. An op registered without samples fails ``test_every_op_has_samples``."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import engine
import ops
from engine.gradcheck import gradcheck, gradgradcheck
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
    dev = engine.devices_get = __import__("devices").get("virtual:1")
    ts = tuple(engine.tensor(x.detach().numpy(), device=dev, requires_grad=x.requires_grad) for x in s.tensors)
    out = _outputs(s.run(ops.REGISTRY[name], *ts))
    expected_dev = dev
    for o in out:
        assert o.device is expected_dev, f"{name}: output on {o.device}"
    if s.grad:
        assert gradcheck(lambda *a: s.run(ops.REGISTRY[name], *a), ts)
