"""The programs tests/distributed/test_distributed.py runs under ``mpiexec -n N``: one case
per function, chosen by the first argument. Each rank checks its results and prints
``ok <case> <rank>``; any failure raises, which aborts the job (non-zero exit)."""
from __future__ import annotations

import os
import pathlib
import sys
import threading
import time

import numpy as np

from threadgrad import devices, engine, ops
from threadgrad import distributed as dist

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "devices"))


def _mlp_params(seed: int, device: object = "cpu", dtype: str = "float64") -> list:
    engine.manual_seed(seed)
    return [engine.randn(6, 16, dtype=dtype, device=device, requires_grad=True),
            engine.randn(16, dtype=dtype, device=device, requires_grad=True),
            engine.randn(16, 3, dtype=dtype, device=device, requires_grad=True),
            engine.randn(3, dtype=dtype, device=device, requires_grad=True)]


def _loss(params: list, x: np.ndarray, y: np.ndarray, total: int):
    w1, b1, w2, b2 = params
    dev = w1.device
    xt = engine.tensor(x, dtype=w1.dtype, device=dev)
    h = ops.tanh(xt @ w1 + b1)
    logits = h @ w2 + b2
    # a sum over the shard divided by the global batch: the shards' gradients average to the full one
    return ops.cross_entropy(logits, engine.tensor(y, device=dev)) * (len(x) / total)


def _data(n: int = 24) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return rng.standard_normal((n, 6)), rng.integers(0, 3, n)


def _full_batch_grads(params: list, x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    """Gradients of the mean loss over the whole batch, on one process. Each rank's loss is
    its shard's share of that mean, so the ranks' gradients *sum* to these: DDP's average
    times the world size."""
    copies = [p.detach().clone().requires_grad_() for p in params]
    _loss(copies, x, y, len(x)).backward()
    return [c.grad.numpy() for c in copies]


def _shard(x: np.ndarray, rank: int, world: int) -> slice:
    per = len(x) // world
    return slice(rank * per, (rank + 1) * per)


def _same_on_every_rank(value: object) -> None:
    everyone = dist._default_group().comm.allgather(value)
    assert all(v == everyone[0] for v in everyone), everyone


def case_collectives() -> None:
    r, n = dist.get_rank(), dist.get_world_size()
    t = engine.tensor([1.0, 2.0, 3.0]) * (r + 1)
    v = t.version
    assert dist.all_reduce(t) is None
    tri = n * (n + 1) / 2
    assert t.tolist() == [tri, 2 * tri, 3 * tri], t.tolist()
    assert t.version == v + 1  # in place, as torch's collectives
    m = engine.tensor([float(r), -float(r)])
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    assert m.tolist() == [n - 1, 0.0]
    a = engine.tensor([float(r)])
    dist.all_reduce(a, op=dist.ReduceOp.AVG)
    assert a.tolist() == [(n - 1) / 2]
    i = engine.tensor([r + 1], dtype="int64")
    dist.all_reduce(i, op=dist.ReduceOp.PRODUCT)
    assert i.tolist() == [int(np.prod(np.arange(1, n + 1)))]
    big = engine.full((1000,), float(r), dtype="float32")
    work = dist.all_reduce(big, async_op=True)
    assert work.wait() is True and work.is_completed() and work.is_success()
    (out,) = work.get_future().result()
    assert out is big and float(big[0].item()) == tri - n
    b = engine.tensor([float(r)] * 4, device="virtual:1")
    dist.broadcast(b, src=n - 1)
    assert b.tolist() == [n - 1.0] * 4 and b.device == devices.get("virtual:1")
    dist.barrier()
    leaf = engine.tensor([1.0], requires_grad=True)  # a leaf that requires grad: written under no_grad
    dist.all_reduce(leaf)
    assert leaf.detach().tolist() == [float(n)]
    try:
        dist.init_process_group("mpi")
    except ValueError as e:
        assert "twice" in str(e)
    else:
        raise AssertionError("a second init_process_group was accepted")
    try:
        dist.broadcast(b, src=n)
    except ValueError as e:
        assert "not a rank" in str(e)
    else:
        raise AssertionError("broadcast from a rank outside the group was accepted")


def case_ddp_matches_full_batch() -> None:
    """DDP's .grad equals the single-process full-batch gradient, with one bucket or many, and
    rank 0's parameters are broadcast at construction (every rank started from its own)."""
    r, n = dist.get_rank(), dist.get_world_size()
    x, y = _data()
    for cap in (25, 1e-4):
        params = _mlp_params(seed=100 + r)
        ddp = dist.DistributedDataParallel(params, bucket_cap_mb=cap)
        _same_on_every_rank([p.detach().numpy().tolist() for p in params])
        want = _full_batch_grads(params, x, y)
        s = _shard(x, r, n)
        _loss(params, x[s], y[s], len(x)).backward()
        for p, g in zip(params, want):
            np.testing.assert_allclose(p.grad.numpy() * n, g, rtol=1e-10, atol=1e-12)
        # reverse parameter order; a bucket closes once it reaches the cap (the first at most 1 MB)
        assert ddp.bucket_indices == ([[3, 2, 1, 0]] if cap == 25 else [[3, 2], [1], [0]]), ddp.bucket_indices
        assert list(ddp._launch_log) == list(range(len(ddp.bucket_indices)))
        ddp.remove_hooks()


def case_ddp_threads_shuffled() -> None:
    """Every parameter on its own device worker thread, their hooks forced into a different
    order on every rank: the buckets still launch in one order everywhere and the values are
    right (a mismatch would add different parameters' gradients together)."""
    r, n = dist.get_rank(), dist.get_world_size()
    k = 6
    engine.manual_seed(1)
    params = [engine.randn(50 + i, dtype="float64", device=f"virtual:{i + 1}", requires_grad=True) for i in range(k)]
    ddp = dist.DistributedDataParallel(params, bucket_cap_mb=1e-6)  # one parameter per bucket
    assert ddp.bucket_indices == [[i] for i in reversed(range(k))]
    perm = [int(i) for i in np.random.default_rng(r).permutation(k)]
    turn = [0]
    cond = threading.Condition()
    fired: list[int] = []

    def before(i):  # a tensor hook runs on the parameter's worker before accumulation
        def hook(g):
            with cond:
                assert cond.wait_for(lambda: perm[turn[0]] == i, timeout=30), f"param {i} never got its turn"
        return hook

    def after(i):  # registered after DDP's: runs once DDP's hook has copied the gradient
        def hook(p):
            with cond:
                fired.append(i)
                turn[0] += 1
                cond.notify_all()
        return hook

    for i, p in enumerate(params):
        p.register_hook(before(i))
        p.register_post_accumulate_grad_hook(after(i))
    coef = [float(r + 1 + i) for i in range(k)]
    total = None
    for i, p in enumerate(params):
        term = ops.to((p * coef[i]).sum(), "cpu")
        total = term if total is None else total + term
    total.backward()
    assert fired == perm, (fired, perm)
    _same_on_every_rank(list(ddp._launch_log))
    assert list(ddp._launch_log) == list(range(k))
    for i, p in enumerate(params):
        want = np.mean([float(q + 1 + i) for q in range(n)])
        np.testing.assert_allclose(p.grad.numpy(), np.full(p.shape, want))
        assert p.grad.device == devices.get(f"virtual:{i + 1}")
    orders = dist._default_group().comm.allgather(perm)
    assert len({tuple(o) for o in orders}) == n, orders  # the hook orders did differ between ranks
    ddp.remove_hooks()


def case_ddp_mixed_devices_steps() -> None:
    """Parameters on cpu, virtual:1 and virtual:2 (their AccumulateGrad nodes run on three
    threads at once), several steps: every step's .grad is the full-batch gradient."""
    r, n = dist.get_rank(), dist.get_world_size()
    x, y = _data(32)
    engine.manual_seed(5)
    w1 = engine.randn(6, 16, dtype="float64", device="virtual:1", requires_grad=True)
    b1 = engine.randn(16, dtype="float64", device="virtual:1", requires_grad=True)
    w2 = engine.randn(16, 3, dtype="float64", device="virtual:2", requires_grad=True)
    b2 = engine.randn(3, dtype="float64", requires_grad=True)
    params = [w1, b1, w2, b2]

    def loss_of(ps, xs, ys):
        a, c, d, e = ps
        h = ops.tanh(engine.tensor(xs, device="virtual:1") @ a + c)
        logits = ops.to(ops.to(h, "virtual:2") @ d, "cpu") + e
        return ops.cross_entropy(logits, engine.tensor(ys)) * (len(xs) / len(x))

    ddp = dist.DistributedDataParallel(params, bucket_cap_mb=1e-4)
    assert len(ddp.bucket_indices) == 4  # one per (dtype, device) at least
    for step in range(3):
        copies = [p.detach().clone().requires_grad_() for p in params]
        loss_of(copies, x, y).backward()
        for p in params:
            p.grad = None
        s = _shard(x, r, n)
        loss_of(params, x[s], y[s]).backward()
        for p, c in zip(params, copies):
            assert p.grad.device == p.device
            np.testing.assert_allclose(p.grad.numpy() * n, c.grad.numpy(), rtol=1e-10, atol=1e-12)
        with engine.no_grad():
            for p in params:
                p.sub_(p.grad * 0.5)
    _same_on_every_rank([p.detach().numpy().tolist() for p in params])
    ddp.remove_hooks()


def case_ddp_unused() -> None:
    r, n = dist.get_rank(), dist.get_world_size()
    a = engine.tensor([1.0, 2.0], dtype="float64", requires_grad=True)
    b = engine.tensor([3.0], dtype="float64", requires_grad=True)
    c = engine.tensor([5.0], dtype="float64", requires_grad=True)
    ddp = dist.DistributedDataParallel([a, b, c])
    try:
        (a * 2).sum().backward()
    except RuntimeError as e:
        assert "params [1, 2] received no gradient" in str(e) and "find_unused_parameters=True" in str(e), e
    else:
        raise AssertionError("unused parameters were accepted")
    a.grad = None
    ((a * 2).sum() + (b * 3).sum() + (c * 4).sum()).backward()  # the DDP is usable afterwards
    assert a.grad.tolist() == [2.0, 2.0] and b.grad.tolist() == [3.0] and c.grad.tolist() == [4.0]
    ddp.remove_hooks()
    for p in (a, b, c):
        p.grad = None
    ddp = dist.DistributedDataParallel([a, b, c], find_unused_parameters=True)
    loss = (a * (r + 1)).sum()
    if r == 0:
        loss = loss + (b * 10).sum()  # b: used on rank 0 only; c: on no rank
    loss.backward()
    assert a.grad.tolist() == [(n + 1) / 2] * 2
    assert b.grad.tolist() == [10.0 / n], b.grad.tolist()
    assert c.grad is None  # unused everywhere: untouched, as torch
    ddp.remove_hooks()


def case_ddp_no_sync() -> None:
    r, n = dist.get_rank(), dist.get_world_size()
    w = engine.tensor([1.0, 1.0], dtype="float64", requires_grad=True)
    ddp = dist.DistributedDataParallel([w])
    with ddp.no_sync():
        (w * (r + 1)).sum().backward()
        (w * (r + 1)).sum().backward()
    assert w.grad.tolist() == [2.0 * (r + 1)] * 2  # local only
    (w * (r + 1)).sum().backward()
    want = np.mean([3.0 * (q + 1) for q in range(n)])
    assert w.grad.tolist() == [want] * 2, w.grad.tolist()
    # grad() accumulates nothing and is not synchronized
    (g,) = engine.grad((w * (r + 1)).sum(), [w])
    assert g.tolist() == [r + 1.0] * 2 and w.grad.tolist() == [want] * 2


def case_ddp_concurrent_backward() -> None:
    r, n = dist.get_rank(), dist.get_world_size()
    w = engine.tensor([1.0, 2.0], dtype="float64", requires_grad=True)
    ddp = dist.DistributedDataParallel([w])
    inside, go = threading.Event(), threading.Event()
    first = [True]

    def hold(p):  # registered after DDP's hook: the first backward's round is open here
        if first[0] and threading.current_thread().name == "first":
            first[0] = False
            inside.set()
            assert go.wait(30)

    w.register_post_accumulate_grad_hook(hold)
    errors: list[BaseException] = []

    def run_first():
        try:
            (w * 3).sum().backward()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=run_first, name="first")
    t.start()
    assert inside.wait(30)
    try:
        (w * 5).sum().backward()
    except RuntimeError as e:
        assert "a second backward reached these parameters" in str(e), e
    else:
        raise AssertionError("a concurrent second backward was accepted")
    go.set()
    t.join(30)
    assert not t.is_alive() and not errors, errors
    w.grad = None
    (w * (r + 1)).sum().backward()
    assert w.grad.tolist() == [(n + 1) / 2] * 2


def case_ddp_checkpoint() -> None:
    """Non-reentrant activation checkpointing recomputes inside the same backward: DDP sees one
    backward. Parameters used both outside and inside a reentrant checkpoint get gradients from
    two backward calls (the outer and the checkpoint's own): refused with the advice."""
    r, n = dist.get_rank(), dist.get_world_size()
    w = engine.tensor([1.0, 2.0], dtype="float64", requires_grad=True)
    ddp = dist.DistributedDataParallel([w])
    base = np.array([0.3, 0.4])
    x = engine.tensor(base * (r + 1))
    engine.checkpoint(lambda a: ops.tanh(a * w), x, use_reentrant=False).sum().backward()
    want = np.mean([(1 - np.tanh(base * (q + 1) * [1.0, 2.0]) ** 2) * base * (q + 1) for q in range(n)], axis=0)
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-12)
    w.grad = None
    y = engine.checkpoint(lambda a: ops.tanh(a * w), x.detach().requires_grad_(), use_reentrant=True)
    try:
        (y.sum() + (w * 2.0).sum()).backward()
    except RuntimeError as e:
        assert "a second backward reached these parameters" in str(e) and "use_reentrant=False" in str(e), e
    else:
        raise AssertionError("gradients from a reentrant backward and its outer one were mixed")
    ddp.remove_hooks()


def case_ddp_refuses_different_parameters() -> None:
    """Ranks that pass parameters of different shapes all get the error (no hang, no silent
    reduction of mismatched buffers), and the group stays usable."""
    r, n = dist.get_rank(), dist.get_world_size()
    w = engine.zeros(3 + (r == n - 1), requires_grad=True)
    try:
        dist.DistributedDataParallel([w])
    except RuntimeError as e:
        assert "DDP expects same model across all ranks" in str(e) and "params[0] has shape" in str(e), e
    else:
        raise AssertionError("parameters of different shapes were accepted")
    t = engine.tensor([1.0])
    dist.all_reduce(t)
    assert t.tolist() == [float(n)]


def case_cuda_standin() -> None:
    """cuda tensors (the numpy stand-in for cupy) go through MPI on host copies."""
    from fake_cupy import FakeCupy
    from threadgrad.devices.cuda import CudaDevice

    r, n = dist.get_rank(), dist.get_world_size()
    host_copies = [0]

    class Counting(CudaDevice):
        def to_host(self, array):
            host_copies[0] += 1
            return super().to_host(array)

    fake = FakeCupy(device_count=1)
    dev = Counting(0, np, fake.cuda)
    devices.register("cuda", dev)
    devices.register("cuda:0", dev)
    t = engine.tensor([1.0, 2.0], device="cuda") * (r + 1)
    dist.all_reduce(t)
    assert t.device == dev and t.tolist() == [n * (n + 1) / 2, n * (n + 1)]
    assert host_copies[0] >= 1
    x, y = _data()
    params = _mlp_params(seed=30 + r, device="cuda")
    before = host_copies[0]
    ddp = dist.DistributedDataParallel(params, bucket_cap_mb=1e-4)
    want = _full_batch_grads(params, x, y)
    s = _shard(x, r, n)
    _loss(params, x[s], y[s], len(x)).backward()
    for p, g in zip(params, want):
        assert p.grad.device == dev
        np.testing.assert_allclose(p.grad.numpy() * n, g, rtol=1e-10, atol=1e-12)
    assert host_copies[0] - before >= 2 * len(params)  # broadcast and bucket copies went through the host
    ddp.remove_hooks()
    engine.get_engine().shutdown()


def case_raise_mid_backward() -> None:
    """Rank 1 raises inside backward and nobody catches it: the job ends at once."""
    r = dist.get_rank()

    class Boom(engine.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2.0

        @staticmethod
        def backward(ctx, g):
            if r == 1:
                raise ValueError("rank 1 fails in backward")
            return g * 2.0

    params = _mlp_params(seed=0)
    ddp = dist.DistributedDataParallel(params, bucket_cap_mb=1e-4)  # (held: a dropped DDP stops synchronizing)
    x, y = _data()
    loss = _loss([Boom.apply(params[0])] + params[1:], x, y, len(x))
    loss.backward()
    time.sleep(120)  # rank 0 would wait here for nothing; the abort ends it first


def case_stall() -> None:
    """Rank 1 stalls: rank 0's watchdog aborts the job after the timeout, naming the bucket."""
    r = dist.get_rank()
    params = _mlp_params(seed=0)
    # Both ranks reach this point before the first watched collective: on a loaded machine one
    # rank can start seconds after the other, and the 3 s timeout would then fire on the
    # construction's broadcast instead of the bucket this case is about (MPI's own barrier is
    # not watched).
    from mpi4py import MPI
    MPI.COMM_WORLD.Barrier()
    ddp = dist.DistributedDataParallel(params, bucket_cap_mb=1e-4)  # (held: a dropped DDP stops synchronizing)
    if r == 1:
        time.sleep(120)  # the stall being tested
    x, y = _data()
    _loss(params, x, y, len(x)).backward()


def case_die() -> None:
    """Rank 1 dies (os._exit) during a step: the launcher tears the job down."""
    r = dist.get_rank()
    params = _mlp_params(seed=0)
    ddp = dist.DistributedDataParallel(params)  # (held: a dropped DDP stops synchronizing)
    if r == 1:
        os._exit(7)
    x, y = _data()
    _loss(params, x, y, len(x)).backward()
    time.sleep(120)


def case_ddp_unused_no_sync() -> None:
    """Issue 34, item 1: with find_unused_parameters, a parameter used only in the no_sync
    micro-batches since the last synchronized backward counts as used (torch's reducer keeps
    its used-map across no_sync): its accumulated .grad is averaged, and the replicas stay
    equal after the step."""
    r, n = dist.get_rank(), dist.get_world_size()
    a = engine.tensor([1.0, 2.0], dtype="float64", requires_grad=True)
    b = engine.tensor([3.0], dtype="float64", requires_grad=True)
    c = engine.tensor([5.0], dtype="float64", requires_grad=True)
    ddp = dist.DistributedDataParallel([a, b, c], find_unused_parameters=True)
    for step in range(3):
        with ddp.no_sync():
            ((a * (r + 1)).sum() + (b * (r + 1) * 10).sum()).backward()  # b: only here
            if r == 0:
                (c * 7).sum().backward()  # c: only here, and only on rank 0
        (a * (r + 1)).sum().backward()  # the synchronized micro-batch uses a alone
        assert a.grad.tolist() == [(n + 1.0)] * 2, a.grad.tolist()  # mean of 2 * (q + 1)
        assert b.grad.tolist() == [np.mean([10.0 * (q + 1) for q in range(n)])], b.grad.tolist()
        assert c.grad.tolist() == [7.0 / n], c.grad.tolist()
        with engine.no_grad():
            for p in (a, b, c):
                p.sub_(p.grad * 0.1)
                p.grad = None
        _same_on_every_rank([p.tolist() for p in (a, b, c)])
    # the used-map starts afresh after each synchronized backward: unused everywhere now
    (a * 1.0).sum().backward()
    assert b.grad is None and c.grad is None
    ddp.close()


def case_ddp_raise_in_thread() -> None:
    """Issue 34, item 2: an exception escaping a thread that runs a DDP backward ends the job
    at once (threading.excepthook), as one on the main thread does."""
    r = dist.get_rank()

    class Boom(engine.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2.0

        @staticmethod
        def backward(ctx, g):
            if r == 1:
                raise ValueError("rank 1 fails in a thread's backward")
            return g * 2.0

    params = _mlp_params(seed=0)
    ddp = dist.DistributedDataParallel(params, bucket_cap_mb=1e-4)  # (held: a dropped DDP stops synchronizing)
    x, y = _data()

    def step() -> None:
        _loss([Boom.apply(params[0])] + params[1:], x, y, len(x)).backward()

    t = threading.Thread(target=step, name="trainer")
    t.start()
    t.join()
    time.sleep(120)  # rank 0 waits in its all-reduce, rank 1 here; the abort ends both first


def case_ddp_release() -> None:
    """Issue 34, item 3: every DDP holds a communicator and a thread; dropping it or close()
    releases both, so wrapping parameters anew thousands of times (past MPICH's ~2,045
    communicators) keeps the threads and communicators flat."""
    import gc
    r, n = dist.get_rank(), dist.get_world_size()
    group = dist._default_group()
    w = engine.tensor([1.0, 2.0], dtype="float64", requires_grad=True)
    import warnings
    threads_before = threading.active_count()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(2100):
            ddp = dist.DistributedDataParallel([w], init_sync=False)
            if k % 700 == 0:  # it still works, and the previous instances' hooks are gone
                w.grad = None
                (w * (r + 1)).sum().backward()
                assert w.grad.tolist() == [(n + 1) / 2] * 2, (k, w.grad.tolist())
            if k % 2:
                ddp.close()
                ddp.close()  # a second close does nothing
            elif k % 4 == 2:
                ddp.remove_hooks()  # done with it: dropped in silence
            del ddp  # dropped: released by its finalizer
    gc.collect()
    dropped = [str(c.message) for c in caught if "was dropped while its hooks" in str(c.message)]
    assert len(dropped) == 525, len(dropped)  # k % 4 == 0: dropped while synchronizing
    assert not group.children, len(group.children)
    for _ in range(100):  # the released threads end after freeing their communicators
        if threading.active_count() <= threads_before:
            break
        time.sleep(0.05)
    assert threading.active_count() <= threads_before, (threading.active_count(), threads_before)
    w.grad = None
    (w * 3.0).sum().backward()
    assert w.grad is not None and w.grad.tolist() == [3.0, 3.0]  # no DDP left: a plain local gradient


def case_ddp_memory_flat() -> None:
    """Issue 34, item 3: memory stays flat over many steps (_launch_log was one entry per
    bucket per step, forever)."""
    import tracemalloc
    from threadgrad.distributed import ddp as ddp_module
    r = dist.get_rank()
    params = [engine.tensor(np.arange(4.0) + i, dtype="float64", requires_grad=True) for i in range(3)]
    ddp = dist.DistributedDataParallel(params, bucket_cap_mb=1e-6)  # one bucket per parameter
    steps = ddp_module.LAUNCH_LOG  # enough to fill the log: it must stop growing there

    def run(k: int) -> None:
        for _ in range(k):
            for p in params:
                p.grad = None
            sum(((p * (r + 1)).sum() for p in params[1:]), (params[0] * (r + 1)).sum()).backward()

    run(steps // 3 + 10)
    assert len(ddp._launch_log) == ddp_module.LAUNCH_LOG
    tracemalloc.start()
    run(200)
    first, _ = tracemalloc.get_traced_memory()
    run(1000)
    second, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(ddp._launch_log) == ddp_module.LAUNCH_LOG
    assert second - first < 64 * 1024, (first, second)  # flat: no per-step growth
    ddp.close()


def case_ddp_fork() -> None:
    """Issue 34, item 4: a child forked while another thread holds a DDP's lock and its
    communication thread's finds them free (MPI itself is not usable in a forked child)."""
    import warnings
    w = engine.tensor([1.0, 2.0], dtype="float64", requires_grad=True)
    ddp = dist.DistributedDataParallel([w])
    group = dist._default_group()
    locks = [ddp._lock, ddp._thread._cond, group.thread._cond, group.watchdog._cond, dist._group_lock]
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        for lock in locks:
            lock.acquire()
        held.set()
        release.wait(60)
        for lock in reversed(locks):
            lock.release()

    t = threading.Thread(target=hold)
    t.start()
    assert held.wait(30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        ok = all(lock.acquire(timeout=5) for lock in
                 [ddp._lock, ddp._thread._cond, group.thread._cond, group.watchdog._cond, dist._group_lock])
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    release.set()
    t.join(30)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    ddp.close()


def main() -> None:
    case = sys.argv[1]
    timeout = float(os.environ.get("TG_DIST_TIMEOUT", "60"))
    dist.init_process_group("mpi", timeout=timeout)
    globals()["case_" + case]()
    print(f"ok {case} {dist.get_rank()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
