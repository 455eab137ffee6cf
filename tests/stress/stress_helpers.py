"""Helpers shared by the reliability suite (tests/stress); fixtures live in conftest.py.

Every stress test carries ``@pytest.mark.timeout``; threads are joined with a timeout of
their own, so a hang shows up as a named, failing thread instead of a frozen run.
All numbers are float64 with small integer values, so every gradient (and every sum of
gradients accumulated by many threads, in any order) is exact and compared with ``==``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from threadgrad import devices, engine, ops
from threads_util import run_threads  # noqa: F401 - re-exported for the stress tests

DEVICES = ("cpu", "virtual:1", "virtual:2")


def f64(values: Any, requires_grad: bool = True, device: Any = None) -> engine.Tensor:
    return engine.tensor(np.asarray(values, dtype=np.float64), dtype=np.float64, device=device,
                         requires_grad=requires_grad)


def assert_engine_usable(devs: tuple = DEVICES) -> None:
    """A fresh small backward works on every device (and its result is exact)."""
    for d in devs:
        x = f64([1.0, 2.0, 3.0])
        y = ops.to(x, d)
        loss = ops.sum(ops.mul(ops.mul(y, y), 3.0))
        loss.backward()
        assert x.grad.tolist() == [6.0, 12.0, 18.0], (d, x.grad.tolist())
        (g,) = engine.grad(ops.sum(ops.mul(ops.to(x, d), 2.0)), x)
        assert g.tolist() == [2.0, 2.0, 2.0], d


def device_workers_alive(devs: tuple = ("virtual:1", "virtual:2")) -> bool:
    names = {t.name for t in engine.get_engine().worker_threads() if t.is_alive()}
    return all(f"threadgrad-{devices.get(d)}" in names for d in devs)
