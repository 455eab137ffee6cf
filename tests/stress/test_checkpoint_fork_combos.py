"""Issue 34's parts together, in the attack's style: a training loop on threads (cpu workers
on, an optimizer stepping, parameters on two devices, checkpoints written with tg.save) while
the process forks at whatever moment the loop is in; the child resumes from the last
checkpoint and must compute exactly what the parent computes from it, within a timeout.
Memory over many save/load round trips stays flat."""
from __future__ import annotations

import io
import json
import os
import threading
import tracemalloc

import numpy as np
import pytest

import threadgrad as tg
from fork_util import run_in_fork

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _model():
    rng = np.random.default_rng(3)
    w1 = tg.tensor(rng.uniform(-1, 1, (4, 6)), requires_grad=True)
    w2 = tg.tensor(rng.uniform(-1, 1, (6, 2)), device="virtual:1", requires_grad=True)
    return [w1, w2]


def _loss(params, step):
    w1, w2 = params
    x = tg.tensor(np.arange(12.0).reshape(3, 4) / (step + 1))
    h = tg.tanh(x @ w1)
    out = tg.ops.to(h, "virtual:1") @ w2
    return tg.ops.to(tg.norm(out, 3, dim=1).sum() + tg.relu(out).sum(), "cpu")


def _train(params, opt, steps, first=0):
    for s in range(first, first + steps):
        opt.zero_grad()
        _loss(params, s).backward()
        opt.step()


def _resume(blob: bytes, steps: int) -> list:
    """Load a checkpoint into fresh parameters and optimizer, train, return the values."""
    state = tg.load(io.BytesIO(blob))
    params = [state["w1"], state["w2"]]
    opt = tg.optim.Adam(params, lr=0.01, amsgrad=True)
    opt.load_state_dict(state["opt"])
    _train(params, opt, steps, first=state["step"])
    return [p.detach().cpu().numpy().tolist() for p in params]


@pytest.mark.timeout(120)
def test_a_child_forked_mid_training_resumes_exactly_from_the_last_checkpoint(tmp_path, workers):
    workers(1)
    params = _model()
    opt = tg.optim.Adam(params, lr=0.01, amsgrad=True)
    _train(params, opt, 3)
    buf = io.BytesIO()
    tg.save({"w1": params[0], "w2": params[1], "opt": opt.state_dict(), "step": 3}, buf)
    blob = buf.getvalue()
    want = _resume(blob, 4)  # the parent's answer, before any fork

    stop = threading.Event()
    errors: list = []

    def loop():  # keeps the optimizer's lock, the leaf stripes and the helpers busy
        try:
            s = 3
            while not stop.is_set():
                _train(params, opt, 1, first=s)
                tg.save({"opt": opt.state_dict()}, io.BytesIO())
                s += 1
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    trainer = threading.Thread(target=loop)
    trainer.start()
    report = tmp_path / "child.json"
    try:
        for _ in range(5):  # forks land at different moments of the loop
            def child() -> int:
                got = _resume(blob, 4)
                opt.zero_grad()  # the parent's optimizer, whose lock the trainer may have held
                opt.state_dict()
                report.write_text(json.dumps(got))
                return 0 if got == want else 1
            code = run_in_fork(child, timeout=30)
            assert code == 0, (code, report.read_text() if report.exists() else "no report")
    finally:
        stop.set()
        trainer.join(30)
    assert not trainer.is_alive() and not errors, errors


@pytest.mark.timeout(120)
def test_save_and_load_round_trips_hold_memory_flat():
    params = _model()
    opt = tg.optim.Adam(params, lr=0.01)
    _train(params, opt, 2)

    def round_trip(k):
        for _ in range(k):
            buf = io.BytesIO()
            tg.save({"w": params, "view": params[0][1:, ::2], "opt": opt.state_dict(), "s": {1, 2}}, buf)
            buf.seek(0)
            back = tg.load(buf)
            assert back["view"].tolist() == params[0][1:, ::2].tolist()

    round_trip(50)
    tracemalloc.start()
    round_trip(100)
    first, _ = tracemalloc.get_traced_memory()
    round_trip(400)
    second, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert second - first < 64 * 1024, (first, second)
