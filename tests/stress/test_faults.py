"""Fault injection: exceptions raised at seeded random points of backward, under threads.

Fault sites: a custom Function's backward, a tensor hook (non-leaf and leaf), a node
pre-hook, a node post-hook, a post-accumulate-grad hook, a ``queue_callback`` callback,
a saved-tensor pack hook (fires in forward), a saved-tensor unpack hook, and a node whose
backward runs a child (reentrant) backward that fails. Each site raises its own exception
class, so a test can tell that the *original* exception (type and object) came back.

Per faulty call a seeded RNG picks: the site, the position in a 6-stage chain, the device
the chain runs on (cpu, virtual:1, virtual:2) and whether the call is synchronous
(``backward`` / ``grad``) or a future (``backward_async``). Meanwhile other calls on other
threads run clean chains into shared leaves, whose gradients must be exact. Afterwards the
same device workers are still alive and a fresh backward works on every device.
"""
from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from threadgrad import devices, engine, ops
from stress_helpers import DEVICES, assert_engine_usable, device_workers_alive, f64, run_threads

STAGES = 6  # a chain x -> s0 -> ... -> s5 -> sum; d(sum)/dx = 2**STAGES


class Fault(Exception):
    """Base of the injected faults."""


class FaultInBackward(Fault):
    pass


class FaultInTensorHook(Fault):
    pass


class FaultInLeafHook(Fault):
    pass


class FaultInPreHook(Fault):
    pass


class FaultInPostHook(Fault):
    pass


class FaultInPostAccumulateHook(Fault):
    pass


class FaultInCallback(Fault):
    pass


class FaultInPack(Fault):
    pass


class FaultInUnpack(Fault):
    pass


class FaultInChildBackward(Fault):
    pass


class FaultInCheckpointRerun(Fault):
    pass


SITES = {
    "node_backward": FaultInBackward,
    "tensor_hook": FaultInTensorHook,
    "leaf_hook": FaultInLeafHook,
    "pre_hook": FaultInPreHook,
    "post_hook": FaultInPostHook,
    "post_accumulate_hook": FaultInPostAccumulateHook,
    "queue_callback": FaultInCallback,
    "pack": FaultInPack,
    "unpack": FaultInUnpack,
    "child_backward": FaultInChildBackward,
    "checkpoint_rerun": FaultInCheckpointRerun,
}


class Injected:
    """One planned fault: raises ``SITES[site]`` once, remembers the object it raised."""

    fired_total = 0
    _lock = threading.Lock()

    def __init__(self, site: str, position: int, device: str) -> None:
        self.site, self.position, self.device = site, position, device
        self.raised: list[BaseException] = []

    def fire(self, *_: object) -> None:
        e = SITES[self.site](f"injected {self.site} fault at stage {self.position} on {self.device}")
        self.raised.append(e)
        with Injected._lock:
            Injected.fired_total += 1
        raise e


class Stage(engine.Function):
    """y = 2 x (saves x); its backward fires the plan's fault when told to."""

    @staticmethod
    def forward(ctx, x, fault):
        ctx.fault = fault
        ctx.save_for_backward(x)
        return x * 2.0

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        assert x.shape == g.shape
        if ctx.fault is not None:
            ctx.fault.fire()
        return g * 2.0, None


class Boom(engine.Function):
    @staticmethod
    def forward(ctx, x, fault):
        ctx.fault = fault
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        ctx.fault.fire()
        return g, None  # pragma: no cover


class ChildStage(engine.Function):
    """y = 2 x; backward first runs a child backward (reentrant) over a graph whose node fails."""

    @staticmethod
    def forward(ctx, x, fault):
        ctx.fault = fault
        return x * 2.0

    @staticmethod
    def backward(ctx, g):
        leaf = f64([1.0, 2.0], device=g.device)
        with engine.enable_grad():
            inner = ops.sum(ops.mul(Boom.apply(leaf, ctx.fault), 3.0))
        inner.backward()  # raises the child's fault: the parent fails with the same object
        raise AssertionError("unreachable: the child backward should have failed")  # pragma: no cover


def _fails_on_rerun(fault: Injected):
    """A checkpointed stage (2 h) that raises when backward re-runs it; the reentrant
    variant re-runs inside a child backward, the other inside a saved-tensor unpack."""
    calls = [0]

    def fn(h):
        calls[0] += 1
        if calls[0] == 2:
            fault.fire()
        return Stage.apply(h, None)  # saves h: its unpack triggers the non-reentrant re-run

    return fn


def build_chain(x: engine.Tensor, device: str, fault: Injected | None):
    """The 6-stage chain on ``device``; stages alternate custom Function and built-in mul
    (by a constant tensor: saves tensors too). Returns (loss, stage outputs)."""
    site = fault.site if fault is not None else None
    pos = fault.position if fault is not None else -1
    two = f64([2.0, 2.0], requires_grad=False, device=device)
    h = ops.to(x, device)
    outs = []
    for i in range(STAGES):
        if i == pos and site == "node_backward":
            h = Stage.apply(h, fault)
        elif i == pos and site == "child_backward":
            h = ChildStage.apply(h, fault)
        elif i == pos and site == "checkpoint_rerun":
            h = engine.checkpoint(_fails_on_rerun(fault), h, use_reentrant=fault.position % 2 == 0)
        elif i % 2 == 0:
            h = Stage.apply(h, None)
        else:
            h = ops.mul(h, two)
        outs.append(h)
    if fault is not None:
        t = outs[pos]
        if site == "tensor_hook":
            t.register_hook(fault.fire)
        elif site == "pre_hook":
            t.grad_fn.register_prehook(fault.fire)
        elif site == "post_hook":
            t.grad_fn.register_hook(fault.fire)
        elif site == "queue_callback":
            t.register_hook(lambda g: engine.queue_callback(fault.fire))
    return ops.sum(h), outs


def run_faulty_call(rng: random.Random) -> tuple[Injected, BaseException | None]:
    """Build and run one call with one planned fault; return the plan and what was raised."""
    site = rng.choice(sorted(SITES))
    device = rng.choice(DEVICES)
    fault = Injected(site, rng.randrange(STAGES), device)
    mode = rng.choice(("backward", "grad", "async"))
    if site in ("post_accumulate_hook", "leaf_hook"):
        mode = rng.choice(("backward", "async"))  # grad() never accumulates into a leaf
    if site == "checkpoint_rerun" and fault.position % 2 == 0 and mode == "grad":
        mode = "backward"  # a reentrant checkpoint refuses grad() (a different error)
    leaf_dev = device if rng.random() < 0.5 else "cpu"  # the leaf itself may live on the device
    x = f64([1.0, -1.0], device=leaf_dev)
    if site == "post_accumulate_hook":
        x.register_post_accumulate_grad_hook(fault.fire)
    elif site == "leaf_hook":
        x.register_hook(fault.fire)
    try:
        if site in ("pack", "unpack"):
            count = [0]

            def pack(t):
                count[0] += 1
                if site == "pack" and count[0] == fault.position + 1:
                    fault.fire()
                return t

            def unpack(t):
                count[0] -= 1
                if site == "unpack" and count[0] == fault.position:
                    fault.fire()
                return t

            with engine.saved_tensors_hooks(pack, unpack):
                loss, _ = build_chain(x, device, fault)
        else:
            loss, _ = build_chain(x, device, fault)
        if mode == "backward":
            loss.backward()
        elif mode == "grad":
            engine.grad(loss, x)
        else:
            engine.backward_async(loss).result(timeout=60)
    except Fault as e:
        return fault, e
    return fault, None


def run_clean_call(shared: engine.Tensor, device: str, mode: str) -> bool:
    """A clean chain over x * shared (shared = [-2, 3], x = [1, 3]):
    d(loss)/dx = 2**STAGES * shared = [-128, 192], d(loss)/dshared = 2**STAGES * x = [64, 192]."""
    x = f64([1.0, 3.0])
    loss, _ = build_chain(ops.mul(x, shared), device, None)
    if mode == "grad":
        gx, gs = engine.grad(loss, (x, shared))
        return gx.tolist() == [-128.0, 192.0] and gs.tolist() == [64.0, 192.0]
    if mode == "async":
        engine.backward_async(loss).result(timeout=60)
    else:
        loss.backward()
    return x.grad.tolist() == [-128.0, 192.0]


def check_raised(fault: Injected, raised: BaseException | None) -> str | None:
    """None when the call raised exactly the injected exception object (original type)."""
    if len(fault.raised) != 1:
        return f"{fault.site}@{fault.position} on {fault.device}: fired {len(fault.raised)} times"
    if raised is not fault.raised[0] or type(raised) is not SITES[fault.site]:
        return f"{fault.site}@{fault.position} on {fault.device}: got {raised!r}, expected {fault.raised[0]!r}"
    if f"injected {fault.site} fault at stage {fault.position}" not in str(raised):
        return f"message lost: {raised}"
    return None


# --- one deterministic test per site and device ----------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("site", sorted(SITES))
def test_each_site_raises_the_original_exception(site, device):
    class FixedRng(random.Random):
        def choice(self, seq):
            if site in seq:
                return site
            if device in seq:
                return device
            return seq[0]

        def randrange(self, n):
            return 2

    rng = FixedRng(0)
    workers_before = {t.ident for t in engine.get_engine().worker_threads() if t.name.startswith("threadgrad-virtual")}
    fault, raised = run_faulty_call(rng)
    assert check_raised(fault, raised) is None, check_raised(fault, raised)
    if device != "cpu" and workers_before:
        workers_after = {t.ident for t in engine.get_engine().worker_threads() if t.name.startswith("threadgrad-virtual")}
        assert workers_before <= workers_after, "a device worker died or was replaced"
    assert_engine_usable()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("device", DEVICES)
def test_base_exception_in_a_node_does_not_kill_the_worker(device):
    """Even a BaseException (not an Exception) from a node fails only its own call."""

    class Abort(BaseException):
        pass

    class Raiser(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            raise Abort("abort from backward")

    x = f64([1.0])
    with pytest.raises(Abort, match="abort from backward"):
        ops.sum(Raiser.apply(ops.to(x, device))).backward()
    assert device_workers_alive()
    assert_engine_usable()


# --- the storm ---------------------------------------------------------------------------

THREADS = 16
CALLS_PER_THREAD = 150


@pytest.mark.timeout(240)
def test_random_faults_under_16_threads_leave_clean_calls_exact_and_workers_alive():
    assert_engine_usable()  # make sure the device workers exist before the storm
    eng = engine.get_engine()
    workers_before = {(t.name, t.ident) for t in eng.worker_threads() if t.name.startswith("threadgrad-virtual")}
    assert {n for n, _ in workers_before} >= {"threadgrad-virtual:1", "threadgrad-virtual:2"}
    shared = f64([-2.0, 3.0])
    fired_before = Injected.fired_total

    def body(i: int) -> dict:
        rng = random.Random(104729 + i)
        out = {"faulty": 0, "clean": 0, "accumulated": 0, "bad": [], "sites": {}}
        for _ in range(CALLS_PER_THREAD):
            if rng.random() < 0.5:
                fault, raised = run_faulty_call(rng)
                out["faulty"] += 1
                key = (fault.site, fault.device)
                out["sites"][key] = out["sites"].get(key, 0) + 1
                problem = check_raised(fault, raised)
                if problem:
                    out["bad"].append(problem)
            else:
                device, mode = rng.choice(DEVICES), rng.choice(("backward", "grad", "async"))
                if not run_clean_call(shared, device, mode):
                    out["bad"].append(f"clean {mode} call on {device} gave a wrong gradient")
                out["clean"] += 1
                out["accumulated"] += mode != "grad"  # grad() returns without touching .grad
        return out

    results = run_threads(THREADS, body, timeout=200)
    bad = [b for r in results for b in r["bad"]]
    assert bad == [], bad[:10]
    faulty = sum(r["faulty"] for r in results)
    clean = sum(r["clean"] for r in results)
    fired = Injected.fired_total - fired_before
    assert fired == faulty  # every planned fault fired exactly once
    sites: dict = {}
    for r in results:
        for k, n in r["sites"].items():
            sites[k] = sites.get(k, 0) + n
    assert {s for s, _ in sites} == set(SITES), "every fault site was exercised"
    n_acc = sum(r["accumulated"] for r in results)
    assert shared.grad.tolist() == [64.0 * n_acc, 192.0 * n_acc]
    workers_after = {(t.name, t.ident) for t in eng.worker_threads() if t.name.startswith("threadgrad-virtual")}
    assert workers_before <= workers_after, "a device worker died or was restarted during the storm"
    assert all(t.is_alive() for t in eng.worker_threads())
    print(f"\n[faults] {THREADS} threads x {CALLS_PER_THREAD} calls: {faulty} fault points injected "
          f"(fired {fired}), {clean} clean calls exact; sites x devices: {len(sites)}")
    assert_engine_usable()


class NestOrFail(engine.Function):
    """Identity whose backward runs a child backward ``n`` levels deep; the deepest level fails."""

    @staticmethod
    def forward(ctx, x, n, fault):
        ctx.n, ctx.fault = n, fault
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if ctx.n == 0:
            if ctx.fault is not None:
                ctx.fault.fire()
            return g, None, None
        leaf = f64([1.0], device=g.device)
        with engine.enable_grad():
            out = ops.sum(ops.mul(NestOrFail.apply(leaf, ctx.n - 1, ctx.fault), 3.0))
        out.backward()
        assert leaf.grad.tolist() == [3.0]
        return g, None, None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("device", DEVICES)
def test_fault_deep_in_a_reentrant_chain_that_crossed_to_pool_threads(device):
    """Past max_recursion_depth the child backward runs on pool threads; a fault 9 levels
    down comes back to the caller as the original object, and the pool keeps working."""
    eng = engine.get_engine()
    old = eng.max_recursion_depth
    eng.max_recursion_depth = 2
    try:
        fault = Injected("child_backward", 9, device)
        x = f64([1.0])
        with pytest.raises(FaultInChildBackward) as info:
            ops.sum(NestOrFail.apply(ops.to(x, device), 9, fault)).backward()
        assert info.value is fault.raised[0]
        assert len(fault.raised) == 1
        assert sum(t.name.startswith("threadgrad-pool") for t in eng.worker_threads()) >= 2
        assert all(t.is_alive() for t in eng.worker_threads())
        y = f64([1.0])
        ops.sum(ops.mul(NestOrFail.apply(ops.to(y, device), 9, None), 2.0)).backward()
        assert y.grad.tolist() == [2.0]
    finally:
        eng.max_recursion_depth = old
    assert_engine_usable()


# --- the error path itself fails -------------------------------------------------------------

class ReadOnlyArgs(Exception):
    """``args`` is a read-only property: the node's name cannot go into the message."""

    @property
    def args(self):
        return ("read-only args",)


class RefusesAttributes(Exception):
    def __setattr__(self, name, value):
        raise TypeError("no attributes on this exception")


class BadStr(Exception):
    def __str__(self):
        raise ValueError("__str__ raised")

    def __repr__(self):
        raise ValueError("__repr__ raised")


class TwoArgs(Exception):
    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


ODD_EXCEPTIONS = {
    "read-only args": lambda: ReadOnlyArgs(),
    "refuses attributes": lambda: RefusesAttributes("refused"),
    "__str__ and __repr__ raise": lambda: BadStr("bad str"),
    "constructor needs two arguments": lambda: TwoArgs("two args", 7),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", sorted(ODD_EXCEPTIONS))
def test_an_exception_the_engine_cannot_annotate_still_reaches_the_caller(kind, device):
    """Naming the node in the message is best effort: when the exception refuses it, the
    caller still gets that exception object, and the worker survives (it used to die in
    the error path, and backward waited forever)."""
    made = []

    class Raiser(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            made.append(ODD_EXCEPTIONS[kind]())
            raise made[0]

    assert_engine_usable()
    workers_before = {(t.name, t.ident) for t in engine.get_engine().worker_threads() if t.name.startswith("threadgrad-virtual")}
    x = f64([1.0])
    with pytest.raises(BaseException) as info:
        ops.sum(Raiser.apply(ops.to(x, device))).backward()
    assert info.value is made[0]
    if kind == "constructor needs two arguments":
        assert info.value.args == ("two args [raised in RaiserBackward during backward]",)
        assert info.value.code == 7
    if kind == "read-only args":  # named in a note instead
        assert info.value.args == ("read-only args",)
        assert getattr(info.value, "__notes__", None) == ["raised in RaiserBackward during backward"]
    workers_after = {(t.name, t.ident) for t in engine.get_engine().worker_threads() if t.name.startswith("threadgrad-virtual")}
    assert workers_before <= workers_after, "a device worker died"
    assert_engine_usable()


@pytest.mark.timeout(60)
def test_a_device_worker_that_dies_fails_its_task_and_the_next_backward_starts_a_new_one(monkeypatch):
    """Workers catch every error of the nodes they run; should the worker's own loop fail
    anyway (here: installing a task's state raises, as an engine bug would), the caller
    gets a clear error instead of waiting forever, and the next backward gets a new worker."""
    from threadgrad.engine import executor

    assert_engine_usable()
    eng = engine.get_engine()
    old = [t for t in eng.worker_threads() if t.name == "threadgrad-virtual:1"]
    assert len(old) == 1
    real_install = executor._install
    boom = MemoryError("injected: the worker's loop failed")

    def install(gt):
        if threading.current_thread() is old[0]:
            raise boom
        real_install(gt)

    monkeypatch.setattr(executor, "_install", install)
    x = f64([1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"engine thread threadgrad-virtual:1 stopped on an internal error \(MemoryError") as info:
        ops.sum(ops.mul(ops.to(x, "virtual:1"), 2.0)).backward()
    assert info.value.__cause__ is boom
    old[0].join(10)
    assert not old[0].is_alive()
    monkeypatch.setattr(executor, "_install", real_install)
    assert x.grad is None
    assert_engine_usable()
    new = [t for t in eng.worker_threads() if t.name == "threadgrad-virtual:1"]
    assert len(new) == 1 and new[0] is not old[0] and new[0].is_alive()


# --- pool threads retire when idle -----------------------------------------------------------

@pytest.fixture
def pool_timeout():
    eng = engine.get_engine()
    old_timeout, old_depth = eng.pool_idle_timeout, eng.max_recursion_depth
    try:
        yield eng
    finally:
        eng.pool_idle_timeout, eng.max_recursion_depth = old_timeout, old_depth


def _pool_threads() -> list:
    return [t for t in engine.get_engine().worker_threads() if t.name.startswith("threadgrad-pool")]


def _join_pool_threads(deadline_s: float) -> list:
    """Wait (joins with a deadline, no polling) for the pool threads to end; the names left."""
    deadline = time.monotonic() + deadline_s
    for t in _pool_threads():
        t.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in _pool_threads()]


@pytest.mark.timeout(120)
def test_idle_pool_threads_retire_after_the_idle_timeout(pool_timeout):
    """40 backward_async calls held together in one node need 40 pool threads; once idle
    for pool_idle_timeout seconds they retire (the pool used to keep them all for good),
    and later calls start threads again."""
    eng = pool_timeout
    eng.pool_idle_timeout = 30.0
    n = 40
    together = threading.Barrier(n, timeout=30)

    class HoldAll(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            together.wait()  # all n calls run at once: n pool threads
            return g

    leaves = [f64([float(i)]) for i in range(n)]
    futures = [engine.backward_async(ops.sum(ops.mul(HoldAll.apply(x), 2.0))) for x in leaves]
    for f in futures:
        f.result(timeout=60)
    assert [x.grad.tolist() for x in leaves] == [[2.0]] * n
    assert len(_pool_threads()) >= n
    eng.pool_idle_timeout = 0.05  # applies to the threads already waiting
    assert _join_pool_threads(30) == [], "idle pool threads did not retire"
    y = f64([3.0])
    engine.backward_async(ops.sum(ops.mul(y, y))).result(timeout=30)
    assert y.grad.tolist() == [6.0]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("timeout", [0.0, 1e-4])
def test_retiring_pool_threads_never_drop_a_reentrant_hand_off(pool_timeout, timeout):
    """With threads retiring as soon as they are idle, deep reentrant chains (a pool hop per
    level) and backward_async calls from 4 threads all finish, exact: a thread whose wait
    timed out while a job was handed to it takes the job instead of retiring."""
    eng = pool_timeout
    eng.pool_idle_timeout = timeout
    eng.max_recursion_depth = 1

    def body(i: int) -> list:
        bad = []
        for k in range(15):
            x = f64([1.0])
            loss = ops.sum(ops.mul(NestOrFail.apply(x, 6, None), float(k + 1)))
            if k % 2:
                engine.backward_async(loss).result(timeout=60)
            else:
                loss.backward()
            if x.grad.tolist() != [float(k + 1)]:
                bad.append((i, k, x.grad.tolist()))
        return bad

    results = run_threads(4, body, timeout=200)
    assert [b for r in results for b in r] == []
    eng.pool_idle_timeout = 0.01
    assert _join_pool_threads(30) == []
    assert_engine_usable()


@pytest.mark.timeout(30)
def test_pool_idle_timeout_rejects_a_negative_number():
    with pytest.raises(ValueError, match="pool_idle_timeout must be a number of seconds >= 0, got -1"):
        engine.get_engine().pool_idle_timeout = -1
