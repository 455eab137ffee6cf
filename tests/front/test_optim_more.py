"""RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam and LBFGS against torch.optim on the same
numbers (trajectories over several steps, state_dict keys and values, defaults, errors)."""
from __future__ import annotations

import numpy as np
import pytest

import threadgrad as tg

CONFIGS = [
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, momentum=0.8, centered=True, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.02, momentum=0.5, maximize=True)),
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.2, eps=1e-6)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1, maximize=True)),
    ("Adamax", dict(lr=0.01)),
    ("Adamax", dict(lr=0.02, betas=(0.8, 0.99), eps=1e-4, weight_decay=0.1)),
    ("NAdam", dict(lr=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("RAdam", dict(lr=0.01)),
    ("RAdam", dict(lr=0.01, betas=(0.5, 0.9), weight_decay=0.1)),  # rho_inf 19: plain steps, then rectified from step 6
    ("RAdam", dict(lr=0.01, betas=(0.5, 0.9), weight_decay=0.1, decoupled_weight_decay=True)),
]


def _data(dtype: str, steps: int = 8) -> tuple:
    rng = np.random.default_rng(11)
    shapes = [(3, 4), (4,), (2, 2)]
    init = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(steps)]
    return init, grads


def _run(lib, name: str, kw: dict, dtype: str, groups: bool) -> tuple:
    init, grads = _data(dtype)
    ps = [lib.tensor(a.copy(), requires_grad=True) for a in init]
    if groups:
        opt = getattr(lib.optim, name)([{"params": ps[:2]}, {"params": ps[2:], "lr": kw.get("lr", 1.0) * 3}], **kw)
    else:
        opt = getattr(lib.optim, name)(ps, **kw)
    for step_grads in grads:
        for p, g in zip(ps, step_grads):
            p.grad = lib.tensor(g)
        opt.step()
    return [p.detach().numpy().copy() for p in ps], opt


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("groups", [False, True])
@pytest.mark.parametrize("name,kw", CONFIGS, ids=[f"{n}-{'-'.join(k)}" for n, k in CONFIGS])
def test_matches_torch_optim(name, kw, dtype, groups):
    torch = pytest.importorskip("torch")
    ours, opt = _run(tg, name, kw, dtype, groups)
    theirs, topt = _run(torch, name, kw, dtype, groups)
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == "float32" else dict(rtol=1e-11, atol=1e-12)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, **tol)
    ts, os_ = topt.state_dict(), opt.state_dict()
    assert sorted(os_["state"]) == sorted(ts["state"])
    for k, st in ts["state"].items():
        assert sorted(os_["state"][k]) == sorted(st)
        for key, v in st.items():
            np.testing.assert_allclose(np.asarray(os_["state"][k][key].tolist()), np.asarray(v.tolist()), **tol)
            assert os_["state"][k][key].dtype == np.dtype(str(v.dtype).replace("torch.", ""))
    assert os_["param_groups"] == ts["param_groups"]


@pytest.mark.parametrize("name", ["RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "LBFGS"])
def test_defaults_and_initial_state_match_torch(name):
    torch = pytest.importorskip("torch")
    p, tp = tg.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)
    ours, theirs = getattr(tg.optim, name)([p]), getattr(torch.optim, name)([tp])
    assert ours.defaults == theirs.defaults
    so, st = ours.state_dict(), theirs.state_dict()
    assert so["param_groups"] == st["param_groups"]
    assert {k: sorted(v) for k, v in so["state"].items()} == {k: sorted(v) for k, v in st["state"].items()}


@pytest.mark.parametrize("name,kw", [("RMSprop", dict(lr=-1)), ("RMSprop", dict(alpha=-0.5)),
                                     ("Adagrad", dict(lr_decay=-1)), ("Adadelta", dict(rho=1.5)),
                                     ("Adamax", dict(betas=(1.0, 0.9))), ("NAdam", dict(momentum_decay=-1)),
                                     ("RAdam", dict(eps=-1)), ("LBFGS", dict(lr=-1))])
def test_argument_errors_match_torch(name, kw):
    torch = pytest.importorskip("torch")
    msgs = []
    for lib in (tg, torch):
        with pytest.raises(ValueError) as err:
            getattr(lib.optim, name)([lib.zeros(1, requires_grad=True)], **kw)
        msgs.append(str(err.value))
    assert msgs[0] == msgs[1]
    for lib in (tg, torch):
        x = lib.zeros(1, requires_grad=True)
        with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
            getattr(lib.optim, name)([x * 2])


def _lbfgs_problem(lib, line_search):
    """A small least-squares fit with a tanh: several LBFGS steps of several iterations each."""
    rng = np.random.default_rng(3)
    a = lib.tensor(rng.standard_normal((12, 4)))
    b = lib.tensor(rng.standard_normal(12))
    w = lib.tensor(rng.standard_normal(4) * 0.1, requires_grad=True)
    c = lib.tensor([0.5], requires_grad=True)
    opt = lib.optim.LBFGS([w, c], lr=0.8, max_iter=6, history_size=4, line_search_fn=line_search)

    def closure():
        opt.zero_grad()
        loss = ((lib.tanh(a @ w) + c - b) ** 2).mean()
        loss.backward()
        return loss

    losses = [float(opt.step(closure).detach()) for _ in range(4)]  # (a loss that requires grad: torch warns on float())
    return losses, w.detach().numpy(), c.detach().numpy(), opt.state[w]


@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
def test_lbfgs_matches_torch(line_search):
    torch = pytest.importorskip("torch")
    lo, wo, co, so = _lbfgs_problem(tg, line_search)
    lt, wt, ct, st = _lbfgs_problem(torch, line_search)
    np.testing.assert_allclose(lo, lt, rtol=1e-10)
    np.testing.assert_allclose(wo, wt, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(co, ct, rtol=1e-9, atol=1e-12)
    assert so["func_evals"] == st["func_evals"] and so["n_iter"] == st["n_iter"]
    assert sorted(so) == sorted(st)


def test_lbfgs_errors():
    torch = pytest.importorskip("torch")
    for lib in (tg, torch):
        a, b = lib.zeros(1, requires_grad=True), lib.zeros(1, requires_grad=True)
        with pytest.raises(ValueError, match="LBFGS doesn't support per-parameter options"):
            lib.optim.LBFGS([{"params": [a]}, {"params": [b]}])
        opt = lib.optim.LBFGS([a], line_search_fn="bogus")

        def closure():
            opt.zero_grad()
            loss = ((a - 1) ** 2).sum()
            loss.backward()
            return loss

        with pytest.raises(RuntimeError, match="only 'strong_wolfe' is supported"):
            opt.step(closure)
