"""tg.optim on a real GPU: the fused per-parameter kernels (devices/_fused.py) give the updates
the cpu formulas give (Note [Update functions] in threadgrad/optim/optimizer.py). Skipped
unless cupy imports and sees a GPU; the dispatch itself is tested without one in
tests/devices/test_fused_dispatch.py."""
from __future__ import annotations

import numpy as np
import pytest

import threadgrad as tg
from threadgrad import devices, engine

cupy = pytest.importorskip("cupy")
if not devices.cuda_available():
    pytest.skip("cupy is installed but no GPU is visible", allow_module_level=True)

pytestmark = [pytest.mark.cuda, pytest.mark.timeout(120)]

SETTINGS = [
    (tg.optim.SGD, dict(lr=0.1)),
    (tg.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    (tg.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
    (tg.optim.Adam, dict(lr=0.01, weight_decay=0.01)),
    (tg.optim.Adam, dict(lr=0.01, amsgrad=True, maximize=True)),
    (tg.optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cls, kw", SETTINGS, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(SETTINGS)])
def test_fused_optimizer_steps_match_the_cpu_formulas(cls, kw, dtype):
    rng = np.random.default_rng(0)
    p0 = [rng.standard_normal(s).astype(dtype) for s in ((5, 3), (3,))]
    grads = [[rng.standard_normal(a.shape).astype(dtype) for a in p0] for _ in range(4)]
    runs = {}
    for dev in ("cpu", "cuda"):
        params = [engine.tensor(a, device=dev, requires_grad=True) for a in p0]
        opt = cls(params, **kw)
        for gs in grads:
            for p, g in zip(params, gs):
                p.grad = engine.tensor(g, device=dev)
            opt.step()
        runs[dev] = [devices.get(dev).to_host(p.data) for p in params]
        assert all(p.version == len(grads) for p in params)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    for a, b in zip(runs["cpu"], runs["cuda"]):
        np.testing.assert_allclose(b, a, **tol)
