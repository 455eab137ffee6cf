"""16 threads x 300 backward calls, mixing every way of running backward at once.

Each call picks (seeded) one of: its own cpu graph; one graph shared by all threads and
retained (backward and grad); reentrant checkpoints (``use_reentrant=True`` and ``False``)
over a shared parameter; graphs spread over ``virtual:1`` / ``virtual:2`` through
``ops.to`` with a shared cpu leaf; ``backward_async`` / ``grad_async`` futures (several in
flight per thread). Values are small integers in float64, so every per-call gradient and
every shared leaf's accumulated gradient is compared exactly with its closed form:
``shared.grad == (number of calls that reached it) * closed form``.
"""
from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from threadgrad import engine, ops
from stress_helpers import DEVICES, assert_engine_usable, f64, run_threads

THREADS = 16
CALLS = 300
KINDS = ("own", "shared", "shared_grad", "ckpt_reentrant", "ckpt_hooks", "virtual", "async", "grad_async")

W0 = np.array([1.0, 2.0, 3.0])   # leaf of the shared retained graph
P0 = np.array([1.0, -2.0])       # parameter used inside checkpointed functions
V0 = np.array([2.0, 1.0, -1.0])  # cpu leaf used on virtual devices
A0 = np.array([3.0, -1.0])       # leaf reached by async calls


class Shared:
    """Shared leaves and the one shared retained graph (built once, used by every thread)."""

    def __init__(self) -> None:
        self.W = f64(W0)
        self.P = f64(P0)
        self.V = f64(V0)
        self.A = f64(A0)
        # S = sum(2 * W^2) + sum(W on virtual:1 * 3): dS/dW = 4W + 3, partly on a device worker.
        wv = ops.to(self.W, "virtual:1")
        part = ops.to(ops.mul(wv, 3.0), "cpu")
        self.S = ops.add(ops.sum(ops.mul(ops.mul(self.W, self.W), 2.0)), ops.sum(part))
        self.dS = 4 * W0 + 3


def _checked(cond: bool, what: str, errors: list) -> None:
    if not cond:
        errors.append(what)


def _one_call(kind: str, sh: Shared, rng: random.Random, tally: dict, errors: list, pending: list) -> None:
    v = np.array([rng.randint(-3, 3) for _ in range(3)], dtype=np.float64)
    if kind == "own":
        x = f64(v)
        c = float(rng.randint(1, 4))
        y = ops.sum(ops.add(ops.mul(ops.mul(x, x), c), ops.mul(x, 3.0)))
        y.backward()
        _checked(x.grad.tolist() == list(2 * c * v + 3), f"own {x.grad.tolist()} {v}", errors)
    elif kind == "shared":
        sh.S.backward(retain_graph=True)
        tally["S"] += 1
    elif kind == "shared_grad":
        (g,) = engine.grad(sh.S, sh.W, retain_graph=True)
        _checked(g.tolist() == list(sh.dS), f"shared_grad {g.tolist()}", errors)
    elif kind in ("ckpt_reentrant", "ckpt_hooks"):
        a = f64(v[:2] + 4.0)  # positive, distinct per call

        def fn(t):
            return ops.mul(ops.mul(t, sh.P), sh.P)

        out = engine.checkpoint(fn, a, use_reentrant=(kind == "ckpt_reentrant"))
        ops.sum(ops.mul(out, 1.0)).backward()
        _checked(a.grad.tolist() == list(P0 * P0), f"{kind} a.grad {a.grad.tolist()}", errors)
        tally["P"] += 2 * a.detach().numpy()
    elif kind == "virtual":
        d1, d2 = rng.choice([("virtual:1", "virtual:2"), ("virtual:2", "virtual:1"), ("virtual:1", "cpu")])
        x = f64(v)
        xv = ops.mul(ops.to(x, d1), 2.0)         # runs on d1
        y = ops.mul(ops.to(xv, d2), ops.to(sh.V, d2))  # meets the shared leaf on d2
        loss = ops.sum(y)
        loss.backward()
        _checked(x.grad.tolist() == list(2 * V0), f"virtual x.grad {x.grad.tolist()}", errors)
        tally["V"] += 2 * v
    elif kind in ("async", "grad_async"):
        x = f64(v)
        loss = ops.sum(ops.mul(ops.mul(x, ops.to(sh.A[:1], "cpu")), ops.sum(x)))  # x * A0[0] * sum(x)
        if kind == "async":
            fut = engine.backward_async(loss)
        else:
            fut = engine.grad_async(loss, x)
        # loss = sum_i x_i * a * s = a * s^2 with s = sum(x): dloss/dx_j = 2 a s
        expect = np.full(3, 2 * A0[0] * v.sum())
        pending.append((kind, fut, x, expect, v))
        if kind == "async":  # grad_async touches no .grad
            tally["A0"] += v.sum() * v.sum()  # dloss/dA[0] = sum(x)^2
        if len(pending) >= 4:
            _drain(pending, errors)
    else:  # pragma: no cover
        raise AssertionError(kind)


def _drain(pending: list, errors: list) -> None:
    while pending:
        kind, fut, x, expect, v = pending.pop(0)
        res = fut.result(timeout=60)
        got = x.grad.tolist() if kind == "async" else res[0].tolist()
        _checked(got == list(expect), f"{kind} {got} != {list(expect)} for {v}", errors)


@pytest.mark.timeout(240)
def test_16_threads_x_300_mixed_backward_calls_exact():
    sh = Shared()
    start = time.perf_counter()

    def body(i: int) -> dict:
        rng = random.Random(7919 * i + 1)
        tally = {"S": 0, "P": np.zeros(2), "V": np.zeros(3), "A0": 0.0, "kinds": dict.fromkeys(KINDS, 0)}
        errors: list = []
        pending: list = []
        for _ in range(CALLS):
            kind = rng.choice(KINDS)
            tally["kinds"][kind] += 1
            _one_call(kind, sh, rng, tally, errors, pending)
        _drain(pending, errors)
        tally["errors"] = errors
        return tally

    tallies = run_threads(THREADS, body, timeout=200)
    elapsed = time.perf_counter() - start
    errors = [e for t in tallies for e in t["errors"]]
    assert errors == [], errors[:10]
    kinds = {k: sum(t["kinds"][k] for t in tallies) for k in KINDS}
    assert sum(kinds.values()) == THREADS * CALLS
    assert all(n > 0 for n in kinds.values()), kinds
    n_s = sum(t["S"] for t in tallies)
    assert sh.W.grad.tolist() == list(n_s * sh.dS)
    p_sum = sum(t["P"] for t in tallies)
    assert sh.P.grad.tolist() == list(p_sum * P0)            # d(a P^2)/dP = 2 a P, summed
    v_sum = sum(t["V"] for t in tallies)
    assert sh.V.grad.tolist() == list(v_sum)
    a_sum = sum(t["A0"] for t in tallies)
    assert sh.A.grad.tolist() == [a_sum, 0.0]
    print(f"\n[stress] {THREADS} threads x {CALLS} calls = {THREADS * CALLS} backward calls in "
          f"{elapsed:.2f}s; per kind: {kinds}")
    assert_engine_usable()


@pytest.mark.timeout(120)
def test_16_threads_hammer_one_retained_graph_spanning_three_devices():
    """Every thread runs backward over the same retained graph whose nodes live on cpu,
    virtual:1 and virtual:2, so all threads feed the same device workers at once."""
    x = f64([1.0, 2.0, 3.0, 4.0])
    h = ops.mul(ops.to(x, "virtual:1"), 2.0)          # 2x on virtual:1
    k = ops.mul(ops.to(h, "virtual:2"), ops.to(h, "virtual:2"))  # 4x^2 on virtual:2
    y = ops.add(ops.sum(ops.to(k, "cpu")), ops.sum(ops.mul(x, 5.0)))  # dy/dx = 8x + 5
    per_thread = 60

    def body(i: int) -> list:
        bad = []
        for j in range(per_thread):
            if j % 3 == 0:
                (g,) = engine.grad(y, x, retain_graph=True)
                if g.tolist() != [13.0, 21.0, 29.0, 37.0]:
                    bad.append(g.tolist())
            else:
                y.backward(retain_graph=True)
        return bad

    assert run_threads(THREADS, body) == [[]] * THREADS
    n = THREADS * sum(1 for j in range(per_thread) if j % 3)
    assert x.grad.tolist() == [n * 13.0, n * 21.0, n * 29.0, n * 37.0]


@pytest.mark.timeout(120)
def test_many_futures_in_flight_from_many_threads():
    """Each of 16 threads launches 50 backward_async calls before awaiting any."""
    shared = f64([1.0, 1.0])
    n = 50

    def body(i: int) -> list:
        xs = [f64([float(i), float(j)]) for j in range(n)]
        futs = [engine.backward_async(ops.sum(ops.mul(ops.mul(x, x), shared))) for x in xs]
        bad = []
        for j, (x, f) in enumerate(zip(xs, futs)):
            assert f.result(timeout=60) is None
            if x.grad.tolist() != [2.0 * i, 2.0 * j]:
                bad.append((i, j, x.grad.tolist()))
        return bad

    assert run_threads(THREADS, body) == [[]] * THREADS
    s0 = THREADS * n * sum(i * i for i in range(THREADS)) / THREADS  # sum over i of i^2, n times
    s1 = THREADS * sum(j * j for j in range(n))
    assert shared.grad.tolist() == [s0, s1]


@pytest.mark.timeout(120)
def test_reentrant_checkpoints_nest_on_device_workers_under_threads():
    """Checkpoint segments on virtual devices (the reentrant backward runs on a worker
    thread that other threads are feeding at the same time), both variants."""
    w = f64([1.0, 2.0])

    def seg(t):
        return ops.mul(t, ops.to(w, t.device))

    def body(i: int) -> list:
        bad = []
        for j in range(40):
            dev = DEVICES[(i + j) % 3]
            x = f64([float(i % 5 + 1), float(j % 7 + 1)])
            z = ops.to(x, dev)
            for r in (True, False, j % 2 == 0):
                z = engine.checkpoint(seg, z, use_reentrant=r)
            ops.sum(z).backward()  # z = x * w^3
            if x.grad.tolist() != [1.0, 8.0]:
                bad.append((dev, x.grad.tolist()))
        return bad

    assert run_threads(THREADS, body) == [[]] * THREADS
    # dz/dw = 3 x w^2 per call
    xs0 = sum(float(i % 5 + 1) for i in range(THREADS)) * 40
    xs1 = sum(float(j % 7 + 1) for j in range(40)) * THREADS
    assert w.grad.tolist() == [3.0 * xs0 * 1.0, 3.0 * xs1 * 4.0]


@pytest.mark.timeout(120)
def test_non_leaf_grads_accumulate_exactly_under_threads():
    """``retain_grad()`` and ``backward(inputs=[non_leaf])`` accumulate into a non-leaf's
    ``.grad`` from every thread that runs backward over a shared retained graph, as
    AccumulateGrad does for leaves: no update may be lost. Arrays are large enough (32768)
    that numpy releases the GIL inside the in-place add, so unsynchronized read-add-write
    sequences really interleave."""
    n = 1 << 15
    x = f64(np.ones(n))
    h = ops.mul(x, 2.0)
    h.retain_grad()
    y = ops.sum(ops.mul(h, 3.0))          # dy/dh = 3, dy/dx = 6
    k = ops.mul(x, 5.0)
    z = ops.sum(ops.mul(k, 7.0))          # dz/dk = 7
    per_thread = 40

    def body(i: int) -> None:
        for j in range(per_thread):
            y.backward(retain_graph=True)
            engine.backward(z, inputs=[k], retain_graph=True)

    run_threads(THREADS, body)
    calls = THREADS * per_thread
    assert np.array_equal(x.grad.numpy(), np.full(n, 6.0 * calls))
    assert np.array_equal(h.grad.numpy(), np.full(n, 3.0 * calls)), \
        f"retain_grad lost updates: {sorted(set(h.grad.numpy().tolist()))[:5]} != {3.0 * calls}"
    assert np.array_equal(k.grad.numpy(), np.full(n, 7.0 * calls)), \
        f"backward(inputs=[non-leaf]) lost updates: {sorted(set(k.grad.numpy().tolist()))[:5]} != {7.0 * calls}"
