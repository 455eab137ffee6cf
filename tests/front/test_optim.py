"""tg.optim: torch's update rules (oracle tests skip without torch), its interface and
errors, state_dict round trips, threads, and a training run."""
from __future__ import annotations

import copy
import threading

import numpy as np
import pytest

import threadgrad as tg
from threadgrad.optim.adam import _adam_update
from threadgrad.optim.sgd import _sgd_update

CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.05)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.5, maximize=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("Adam", dict(lr=0.01, maximize=True, weight_decay=0.02, decoupled_weight_decay=True)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.02, weight_decay=0.1, amsgrad=True)),
]


def _data(dtype: str, steps: int = 6) -> tuple:
    rng = np.random.default_rng(7)
    shapes = [(3, 4), (4,), (2, 2)]
    init = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(steps)]
    return init, grads


def _run(lib, name: str, kw: dict, dtype: str, groups: bool = False) -> tuple:
    init, grads = _data(dtype)
    ps = [lib.tensor(a.copy(), requires_grad=True) for a in init]
    if groups:  # two groups; the second overrides lr
        opt = getattr(lib.optim, name)([{"params": ps[:2]}, {"params": ps[2:], "lr": kw["lr"] * 3}], **kw)
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
    """The same parameters and gradients, six steps: torch.optim's numbers (to a few ulp:
    torch's CPU kernels may fuse a multiply-add that numpy rounds twice)."""
    torch = pytest.importorskip("torch")
    ours, opt = _run(tg, name, kw, dtype, groups)
    theirs, topt = _run(torch, name, kw, dtype, groups)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-13)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, **tol)
    # the state has torch's keys and values
    ts, os_ = topt.state_dict(), opt.state_dict()
    assert sorted(os_["state"]) == sorted(ts["state"])
    for k, st in ts["state"].items():
        assert sorted(os_["state"][k]) == sorted(st)
        for key, v in st.items():
            np.testing.assert_allclose(np.asarray(os_["state"][k][key].tolist()), np.asarray(v.tolist()), **tol)
    assert [{k: v for k, v in g.items()} for g in os_["param_groups"]] == ts["param_groups"]


def test_state_dict_keys_and_defaults_match_torch():
    torch = pytest.importorskip("torch")
    for name in ("SGD", "Adam", "AdamW"):
        p, tp = tg.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)
        assert getattr(tg.optim, name)([p]).state_dict() == getattr(torch.optim, name)([tp]).state_dict(), name
        assert getattr(tg.optim, name)([p]).defaults == getattr(torch.optim, name)([tp]).defaults, name


def test_signatures_match_torch():
    torch = pytest.importorskip("torch")
    import inspect

    for name in ("SGD", "Adam", "AdamW"):
        ours = inspect.signature(getattr(tg.optim, name).__init__).parameters
        theirs = inspect.signature(getattr(torch.optim, name).__init__).parameters
        assert [(n, p.kind, p.default) for n, p in ours.items()] == \
               [(n, p.kind, p.default) for n, p in theirs.items()], name
    for meth in ("zero_grad", "step", "state_dict", "load_state_dict", "add_param_group"):
        ours = inspect.signature(getattr(tg.optim.Optimizer, meth)).parameters
        theirs = inspect.signature(getattr(torch.optim.Optimizer, meth)).parameters
        assert [(n, p.default) for n, p in ours.items()] == [(n, p.default) for n, p in theirs.items()], meth


@pytest.mark.parametrize("name,kw", [("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=0.01, amsgrad=True)),
                                     ("AdamW", dict(lr=0.01))])
def test_state_dict_round_trip_continues_identically(name, kw, tmp_path):
    """Three steps, save (through a file), load into a fresh optimizer over copies of the
    parameters: the next three steps give the same parameters as not stopping."""
    init, grads = _data("float32")
    ps = [tg.tensor(a.copy(), requires_grad=True) for a in init]
    opt = getattr(tg.optim, name)(ps, **kw)
    for step_grads in grads[:3]:
        for p, g in zip(ps, step_grads):
            p.grad = tg.tensor(g)
        opt.step()
    tg.save({"params": ps, "opt": opt.state_dict()}, tmp_path / "ckpt.pt")
    loaded = tg.load(tmp_path / "ckpt.pt")
    qs = loaded["params"]
    opt2 = getattr(tg.optim, name)(qs, lr=123.0)  # the loaded groups bring back lr
    opt2.load_state_dict(loaded["opt"])
    assert opt2.param_groups[0]["lr"] == kw["lr"] and opt2.param_groups[0]["params"][0] is qs[0]
    for step_grads in grads[3:]:
        for p, q, g in zip(ps, qs, step_grads):
            p.grad, q.grad = tg.tensor(g), tg.tensor(g)
        opt.step()
        opt2.step()
    for p, q in zip(ps, qs):
        assert p.tolist() == q.tolist()


def test_load_state_dict_casts_to_the_parameters_and_checks_sizes():
    p = tg.zeros(2, dtype=tg.float64, requires_grad=True)
    opt = tg.optim.Adam([p])
    p.grad = tg.ones(2, dtype=tg.float64)
    opt.step()
    sd = opt.state_dict()
    q = tg.zeros(2, dtype=tg.float32, requires_grad=True)
    opt2 = tg.optim.Adam([q])
    opt2.load_state_dict(sd)
    assert opt2.state[q]["exp_avg"].dtype == np.float32 and opt2.state[q]["step"].dtype == np.float32
    assert opt2.state[q]["exp_avg"] is not sd["state"][0]["exp_avg"]
    with pytest.raises(ValueError, match="different number of parameter groups"):
        tg.optim.Adam([{"params": [q]}, {"params": [tg.zeros(1, requires_grad=True)]}]).load_state_dict(sd)
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        tg.optim.Adam([q, tg.zeros(1, requires_grad=True)]).load_state_dict(sd)


def test_zero_grad_step_closure_and_param_groups():
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    b = tg.tensor([0.5], requires_grad=True)
    opt = tg.optim.SGD([{"params": [w]}, {"params": b, "lr": 1.0}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 1.0] and opt.param_groups[1]["params"] == [b]
    calls = []

    def closure():
        calls.append(tg.is_grad_enabled())
        opt.zero_grad()
        loss = (w * w).sum() + (b * 3).sum()
        loss.backward()
        return loss

    with tg.no_grad():  # step's closure runs under grad mode anyway, as torch's
        loss = opt.step(closure)
    assert calls == [True] and loss.item() == 6.5
    np.testing.assert_allclose(w.tolist(), [0.8, 1.6], rtol=1e-6)
    np.testing.assert_allclose(b.tolist(), [-2.5], rtol=1e-6)
    assert w.is_leaf and w.requires_grad and w.grad_fn is None
    g = w.grad
    opt.zero_grad(set_to_none=False)
    assert w.grad is g and w.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert w.grad is None and b.grad is None
    opt.step()  # no gradients: nothing moves
    np.testing.assert_allclose(w.tolist(), [0.8, 1.6], rtol=1e-6)


def test_step_is_an_inplace_change_that_saved_tensors_notice():
    """A graph that saved a parameter refuses backward after step() changed it (torch's
    version check), rather than silently using the new values."""
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    opt = tg.optim.SGD([w], lr=0.1)
    y = (w * w).sum()
    y.backward(retain_graph=True)
    v = w.version
    opt.step()
    assert w.version == v + 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


@pytest.mark.parametrize("make,exc,msg", [
    (lambda p: tg.optim.SGD(p, lr=0.1), TypeError, "should be an iterable of Tensors or dicts, but got"),
    (lambda p: tg.optim.SGD([], lr=0.1), ValueError, "optimizer got an empty parameter list"),
    (lambda p: tg.optim.SGD([p * 2], lr=0.1), ValueError, "can't optimize a non-leaf Tensor"),
    (lambda p: tg.optim.SGD([p, [1.0]], lr=0.1), TypeError, "optimizer can only optimize Tensors"),
    (lambda p: tg.optim.SGD([{"params": {p}}], lr=0.1), TypeError, "ordered collections"),
    (lambda p: tg.optim.SGD([p], lr=-1), ValueError, "Invalid learning rate: -1"),
    (lambda p: tg.optim.SGD([p], momentum=-0.5), ValueError, "Invalid momentum value: -0.5"),
    (lambda p: tg.optim.SGD([p], lr=0.1, nesterov=True), ValueError, "Nesterov momentum requires a momentum and zero dampening"),
    (lambda p: tg.optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1), ValueError, "some parameters appear in more than one parameter group"),
    (lambda p: tg.optim.Adam([p], betas=(1.0, 0.9)), ValueError, "Invalid beta parameter at index 0: 1.0"),
    (lambda p: tg.optim.Adam([p], betas=(0.9, -0.1)), ValueError, "Invalid beta parameter at index 1: -0.1"),
    (lambda p: tg.optim.Adam([p], eps=-1), ValueError, "Invalid epsilon value: -1"),
    (lambda p: tg.optim.AdamW([p], weight_decay=-1), ValueError, "Invalid weight_decay value: -1"),
    (lambda p: tg.optim.Adam([p], differentiable=True), NotImplementedError, "differentiable=True"),
])
def test_errors_as_torch(make, exc, msg):
    p = tg.zeros(2, requires_grad=True)
    with pytest.raises(exc, match=msg.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        make(p)


def test_errors_are_torchs_words():
    """The messages above are torch's own (oracle)."""
    torch = pytest.importorskip("torch")
    p = torch.zeros(2, requires_grad=True)
    for make, msg in [(lambda: torch.optim.SGD(p, lr=0.1), "should be an iterable of Tensors or dicts, but got"),
                      (lambda: torch.optim.SGD([p], lr=0.1, nesterov=True), "Nesterov momentum requires a momentum and zero dampening"),
                      (lambda: torch.optim.SGD([{"params": [p]}, {"params": [p]}]), "some parameters appear in more than one parameter group"),
                      (lambda: torch.optim.Adam([p], betas=(1.0, 0.9)), "Invalid beta parameter at index 0: 1.0")]:
        with pytest.raises(Exception, match=msg):
            make()


def test_update_functions_work_on_raw_arrays_in_place():
    """The per-device update functions (the seam for fused kernels) change the arrays they get."""
    p, g = np.ones(3, np.float32), np.full(3, 0.5, np.float32)
    bufs = [None]
    _sgd_update([p], [g], bufs, xp=np, lr=0.1, momentum=0.9, dampening=0.0, nesterov=False, weight_decay=0.0,
                maximize=False)
    np.testing.assert_allclose(p, 0.95) and np.testing.assert_allclose(bufs[0], 0.5)
    assert bufs[0] is not g
    p, m, v, step = np.ones(2), np.zeros(2), np.zeros(2), np.zeros((), np.float32)
    _adam_update([p], [np.ones(2)], [m], [v], [], [step], xp=np, amsgrad=False, beta1=0.9, beta2=0.999, lr=0.1,
                 weight_decay=0.0, eps=1e-8, maximize=False, decoupled_weight_decay=False)
    assert float(step) == 1.0
    np.testing.assert_allclose(p, 0.9, rtol=1e-7)
    np.testing.assert_allclose(m, 0.1) and np.testing.assert_allclose(v, 0.001)


@pytest.mark.timeout(60)
def test_threads_stepping_one_optimizer_lose_no_update():
    """8 threads x 50 steps of SGD (lr 1, gradient 1) on one shared parameter: every update
    lands exactly once (the optimizer's lock serializes them), and Adam's step count is exact."""
    w = tg.zeros(4, requires_grad=True)
    w.grad = tg.ones(4)
    sgd = tg.optim.SGD([w], lr=1.0)
    a = tg.zeros(4, requires_grad=True)
    a.grad = tg.ones(4)
    adam = tg.optim.Adam([a])
    barrier = threading.Barrier(8)

    def work():
        barrier.wait()
        for _ in range(50):
            sgd.step()
            adam.step()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert w.tolist() == [-400.0] * 4
    assert adam.state[a]["step"].item() == 400.0


@pytest.mark.timeout(120)
def test_training_a_small_classifier_with_each_optimizer():
    """A 2-layer MLP on a separable 3-class problem: each optimizer drives the loss down to a
    fraction of where it started and classifies the training set."""
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((3, 5)) * 3
    y = rng.integers(0, 3, size=120)
    x = (centers[y] + rng.standard_normal((120, 5))).astype(np.float32)
    xt, yt = tg.tensor(x), tg.tensor(y)
    F = tg.nn.functional
    for make in (lambda ps: tg.optim.SGD(ps, lr=0.1, momentum=0.9), lambda ps: tg.optim.Adam(ps, lr=0.02),
                 lambda ps: tg.optim.AdamW(ps, lr=0.02)):
        tg.manual_seed(0)
        w1, b1 = (tg.randn(16, 5) * 0.3).requires_grad_(), tg.zeros(16, requires_grad=True)
        w2, b2 = (tg.randn(3, 16) * 0.3).requires_grad_(), tg.zeros(3, requires_grad=True)
        opt = make([w1, b1, w2, b2])
        losses = []
        for _ in range(60):
            opt.zero_grad()
            logits = F.linear(F.relu(F.linear(xt, w1, b1)), w2, b2)
            loss = F.cross_entropy(logits, yt)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < 0.2 * losses[0], losses[::10]
        assert (logits.argmax(dim=1) == yt).float().mean().item() > 0.95


# Ported from PyTorch's test/test_optim.py: TestOptim._test_state_dict and
# TestOptim._test_basic_cases_template (the checks that apply without schedulers, sparse
# gradients or cuda), run for each of our optimizers, with and without maximize.
PORTED = [
    lambda w, b, m: tg.optim.SGD([w, b], lr=1e-3, maximize=m),
    lambda w, b, m: tg.optim.SGD([{"params": [w]}, {"params": [b], "lr": 1e-2}], lr=1e-3, maximize=m),
    lambda w, b, m: tg.optim.SGD([w, b], lr=1e-3, momentum=0.9, nesterov=True, weight_decay=0.1, maximize=m),
    lambda w, b, m: tg.optim.Adam([w, b], lr=1e-2, maximize=m),
    lambda w, b, m: tg.optim.Adam([{"params": [w]}, {"params": [b], "lr": 1e-2}], lr=1e-3, amsgrad=True, maximize=m),
    lambda w, b, m: tg.optim.AdamW([w, b], lr=1e-2, weight_decay=0.1, maximize=m),
]


def _fn_base(opt, weight, bias, x):
    opt.zero_grad()
    loss = ((weight @ x + bias) ** 2).sum()
    loss.backward()
    return loss


@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("k", range(len(PORTED)))
def test_state_dict_ported_from_torch(k, maximize):
    constructor = PORTED[k]
    rng = np.random.default_rng(k)
    weight = tg.tensor(rng.standard_normal((10, 5)), requires_grad=True)
    bias = tg.tensor(rng.standard_normal(10), requires_grad=True)
    x = tg.tensor(rng.standard_normal(5))
    opt = constructor(weight, bias, maximize)
    for _ in range(20):  # prime the optimizer
        opt.step(lambda: _fn_base(opt, weight, bias, x))
    weight_c = tg.tensor(weight.detach().numpy().copy(), requires_grad=True)
    bias_c = tg.tensor(bias.detach().numpy().copy(), requires_grad=True)
    opt_c = constructor(weight_c, bias_c, maximize)
    state_dict = copy.deepcopy(opt.state_dict())
    state_dict_c = copy.deepcopy(opt.state_dict())
    opt_c.load_state_dict(state_dict_c)
    for _ in range(20):  # both in parallel: equal at every step
        opt.step(lambda: _fn_base(opt, weight, bias, x))
        opt_c.step(lambda: _fn_base(opt_c, weight_c, bias_c, x))
        assert weight.tolist() == weight_c.tolist() and bias.tolist() == bias_c.tolist()
    assert _flat(state_dict) == _flat(state_dict_c)  # loading did not tie the dict to the optimizer
    assert _flat(opt.state_dict()) == _flat(opt_c.state_dict())  # deterministic for equal parameters
    sd = opt.state_dict()  # a state dict from before maximize/foreach existed still loads and steps
    for group in sd["param_groups"]:
        del group["maximize"], group["foreach"]
    opt.load_state_dict(sd)
    opt.step()
    sd = opt.state_dict()  # and one whose step is a number, not a tensor
    if sd["state"] and "step" in sd["state"][0]:
        for st in sd["state"].values():
            st["step"] = st["step"].item()
        opt.load_state_dict(sd)
        opt.step()
        assert isinstance(opt.state[weight]["step"], tg.Tensor) and opt.state[weight]["step"].item() == 42.0
    public = {k for k in vars(opt) if not k.startswith("_")}
    twin = copy.deepcopy(opt)  # deepcopy copies every public attribute (and the state follows the copies)
    assert {k for k in vars(twin) if not k.startswith("_")} == public
    if opt.state:
        params = twin.param_groups[0]["params"] + twin.param_groups[-1]["params"]
        assert {id(p) for p in twin.state} == {id(p) for p in params}
        assert not {id(p) for p in twin.state} & {id(weight), id(bias)}


def _flat(sd: dict) -> tuple:
    """A state dict as comparable plain values."""
    state = {k: {n: (v.tolist() if isinstance(v, tg.Tensor) else v) for n, v in st.items()}
             for k, st in sd["state"].items()}
    return state, sd["param_groups"]


@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("k", range(len(PORTED)))
@pytest.mark.parametrize("contiguous", [True, False])
def test_basic_cases_ported_from_torch(k, maximize, contiguous):
    """200 closure steps move the loss the right way; non-contiguous parameters too; repr works."""
    rng = np.random.default_rng(10 + k)
    if contiguous:
        w0, b0 = rng.standard_normal((10, 5)), rng.standard_normal(10)
    else:
        w0, b0 = rng.standard_normal((10, 5, 2))[..., 0], rng.standard_normal((10, 2))[..., 0]
    weight = tg.as_tensor(w0).requires_grad_()  # shares the strided array: a non-contiguous leaf
    bias = tg.as_tensor(b0).requires_grad_()
    assert weight._data.flags["C_CONTIGUOUS"] == contiguous
    x = tg.tensor(rng.standard_normal(5))
    opt = PORTED[k](weight, bias, maximize)
    assert type(opt).__name__ in repr(opt) and "Parameter Group 0" in repr(opt)
    initial = _fn_base(opt, weight, bias, x).item()
    for _ in range(200):
        opt.step(lambda: _fn_base(opt, weight, bias, x))
    final = _fn_base(opt, weight, bias, x).item()
    assert final > initial if maximize else final < initial
