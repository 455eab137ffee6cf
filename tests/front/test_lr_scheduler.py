"""tg.optim.lr_scheduler against torch.optim.lr_scheduler: the lr (and momentum) of every
step, get_last_lr, state_dict round trips and errors."""
from __future__ import annotations

import warnings

import pytest

import threadgrad as tg


def _make(lib, name, opt_name="SGD"):
    p = lib.zeros(2, requires_grad=True)
    q = lib.zeros(1, requires_grad=True)
    if opt_name == "SGD":
        opt = lib.optim.SGD([{"params": [p]}, {"params": [q], "lr": 0.5}], lr=0.1, momentum=0.9)
    else:
        opt = lib.optim.Adam([{"params": [p]}, {"params": [q], "lr": 0.5}], lr=0.1)
    S = lib.optim.lr_scheduler
    if name == "StepLR":
        sched = S.StepLR(opt, step_size=3, gamma=0.5)
    elif name == "MultiStepLR":
        sched = S.MultiStepLR(opt, milestones=[2, 5, 5, 9], gamma=0.3)
    elif name == "ExponentialLR":
        sched = S.ExponentialLR(opt, gamma=0.9)
    elif name == "CosineAnnealingLR":
        sched = S.CosineAnnealingLR(opt, T_max=4, eta_min=0.01)
    elif name == "LambdaLR":
        sched = S.LambdaLR(opt, [lambda e: 0.95 ** e, lambda e: 1.0 / (e + 1)])
    elif name == "LinearLR":
        sched = S.LinearLR(opt, start_factor=0.25, end_factor=0.9, total_iters=6)
    elif name == "OneCycleLR":
        sched = S.OneCycleLR(opt, max_lr=[1.0, 2.0], total_steps=16)
    elif name == "OneCycleLR3":
        sched = S.OneCycleLR(opt, max_lr=1.0, epochs=4, steps_per_epoch=4, three_phase=True,
                             anneal_strategy="linear", pct_start=0.25)
    elif name == "SequentialLR":
        first = S.LinearLR(opt, start_factor=0.1, total_iters=3)
        second = S.ExponentialLR(opt, gamma=0.8)
        third = S.CosineAnnealingLR(opt, T_max=3)
        sched = S.SequentialLR(opt, [first, second, third], milestones=[4, 8])
    return opt, sched


NAMES = ["StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LambdaLR", "LinearLR", "OneCycleLR",
         "OneCycleLR3", "SequentialLR"]


@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
@pytest.mark.parametrize("name", NAMES)
def test_schedule_matches_torch(name, opt_name):
    torch = pytest.importorskip("torch")

    def trace(lib):
        opt, sched = _make(lib, name, opt_name)
        out = [(sched.get_last_lr(), [g.get("momentum", g.get("betas")) for g in opt.param_groups])]
        for _ in range(15):
            opt.step()
            sched.step()
            out.append((sched.get_last_lr(), [g.get("momentum", g.get("betas")) for g in opt.param_groups]))
        return out

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = trace(tg), trace(torch)
    assert len(ours) == len(theirs)
    for (lo, mo), (lt, mt) in zip(ours, theirs):
        assert lo == pytest.approx(lt, rel=1e-12, abs=1e-15)
        assert mo == mt or all(pytest.approx(a, rel=1e-12) == b for a, b in zip(mo, mt))


@pytest.mark.parametrize("name", ["StepLR", "LambdaLR", "OneCycleLR", "CosineAnnealingLR"])
def test_state_dict_keys_and_resume_match_torch(name):
    torch = pytest.importorskip("torch")
    (o1, s1), (t1, ts1) = _make(tg, name), _make(torch, name)
    for _ in range(5):
        o1.step(), s1.step(), t1.step(), ts1.step()
    assert sorted(s1.state_dict()) == sorted(ts1.state_dict())
    o2, s2 = _make(tg, name)
    s2.load_state_dict(s1.state_dict())
    o2.load_state_dict(o1.state_dict())
    for _ in range(4):
        o1.step(), s1.step(), o2.step(), s2.step()
    assert s1.get_last_lr() == s2.get_last_lr()


def test_reduce_lr_on_plateau_matches_torch():
    torch = pytest.importorskip("torch")
    metrics = [1.0, 0.9, 0.95, 0.95, 0.96, 0.97, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]

    def trace(lib, **kw):
        opt = lib.optim.SGD([lib.zeros(1, requires_grad=True), ], lr=1.0)
        sched = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)
        out = []
        for m in metrics:
            sched.step(lib.tensor(m))
            out.append((sched.get_last_lr(), sched.num_bad_epochs, sched.best))
        return out, sorted(sched.state_dict())

    for kw in (dict(patience=1), dict(mode="max", factor=0.5, patience=2, cooldown=1, threshold_mode="abs"),
               dict(patience=0, min_lr=0.05, threshold=0.2)):
        assert trace(tg, **kw) == trace(torch, **kw)
    for lib in (tg, torch):
        opt = lib.optim.SGD([lib.zeros(1, requires_grad=True)], lr=1.0)
        with pytest.raises(ValueError, match="Factor should be < 1.0."):
            lib.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=1.0)
        with pytest.raises(ValueError, match="mode avg is unknown!"):
            lib.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="avg")


def test_scheduler_errors_match_torch():
    torch = pytest.importorskip("torch")
    for lib in (tg, torch):
        S = lib.optim.lr_scheduler
        opt = lib.optim.SGD([lib.zeros(1, requires_grad=True)], lr=1.0)
        with pytest.raises(TypeError, match="list is not an Optimizer"):
            S.StepLR([], 2)
        with pytest.raises(KeyError, match="param 'initial_lr' is not specified in param_groups\\[0\\]"):
            S.StepLR(lib.optim.SGD([lib.zeros(1, requires_grad=True)], lr=1.0), 2, last_epoch=3)
        with pytest.raises(ValueError, match="Starting multiplicative factor expected to be greater than 0"):
            S.LinearLR(opt, start_factor=0)
        with pytest.raises(ValueError, match="You must define either total_steps OR"):
            S.OneCycleLR(opt, 1.0)
        with pytest.raises(ValueError, match="Sequential Schedulers expects number of schedulers provided to be one "
                                             "more than the number of milestone points"):
            S.SequentialLR(opt, [S.StepLR(opt, 2), S.StepLR(opt, 3)], milestones=[])
        one = S.OneCycleLR(opt, 1.0, total_steps=2)
        with pytest.warns(UserWarning, match="Detected call of `lr_scheduler.step\\(\\)` before `optimizer.step\\(\\)`"):
            one.step()
        with pytest.raises(ValueError, match="Tried to step 3 times. The specified number of total steps is 2"):
            one.step()
            one.step()


def test_order_warning_matches_torch():
    torch = pytest.importorskip("torch")
    for lib in (tg, torch):
        opt = lib.optim.SGD([lib.zeros(1, requires_grad=True)], lr=1.0)
        sched = lib.optim.lr_scheduler.StepLR(opt, 2)
        with pytest.warns(UserWarning, match="Detected call of `lr_scheduler.step\\(\\)` before `optimizer.step\\(\\)`"):
            sched.step()
        opt2 = lib.optim.SGD([lib.zeros(1, requires_grad=True)], lr=1.0)
        sched2 = lib.optim.lr_scheduler.StepLR(opt2, 2)
        opt2.step()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sched2.step()  # the right order: no warning
