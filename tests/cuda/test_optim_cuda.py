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
        runs[dev] = [devices.get(dev).to_host(p._data) for p in params]
        assert all(p.version == len(grads) for p in params)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    for a, b in zip(runs["cpu"], runs["cuda"]):
        np.testing.assert_allclose(b, a, **tol)


@pytest.mark.parametrize("loss_name", ["cross_entropy", "mse"])
def test_an_nn_module_program_trains_on_cuda_as_on_the_cpu(loss_name):
    """A torch-style training loop (nn.Sequential, a loss module, clip_grad_norm_, Adam,
    zero_grad) on cuda and on the cpu from the same weights: the fused kernels, the owned
    gradients and the multi-tensor updates give the cpu's parameters."""
    rng = np.random.default_rng(3)
    xa = rng.standard_normal((32, 6)).astype(np.float32)
    target = rng.integers(0, 4, 32) if loss_name == "cross_entropy" else rng.standard_normal((32, 4)).astype(np.float32)
    tg.manual_seed(0)
    base = tg.nn.Sequential(tg.nn.Linear(6, 16), tg.nn.ReLU(), tg.nn.Linear(16, 4))
    state = {k: v.detach().numpy().copy() for k, v in base.state_dict().items()}
    runs = {}
    for dev in ("cpu", "cuda"):
        model = tg.nn.Sequential(tg.nn.Linear(6, 16), tg.nn.ReLU(), tg.nn.Linear(16, 4))
        model.load_state_dict({k: tg.tensor(v) for k, v in state.items()})
        model.to(dev)
        criterion = tg.nn.CrossEntropyLoss() if loss_name == "cross_entropy" else tg.nn.MSELoss()
        opt = tg.optim.Adam(model.parameters(), lr=0.01)
        x, y = tg.tensor(xa, device=dev), tg.tensor(target, device=dev)
        for _ in range(5):
            opt.zero_grad()
            criterion(model(x), y).backward()
            tg.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
        runs[dev] = [devices.get(dev).to_host(p._data) for p in model.parameters()]
    for a, b in zip(runs["cpu"], runs["cuda"]):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
