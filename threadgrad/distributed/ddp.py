"""DistributedDataParallel over a list of parameter tensors: gradients all-reduced in buckets
while backward runs.

Note [DDP buckets]
~~~~~~~~~~~~~~~~~~
At construction the parameters are cut into flat buckets, per (dtype, device), walking them
in *reverse* order (backward produces the last layers' gradients first), the first bucket at
most 1 MB (torch's ``_DEFAULT_FIRST_BUCKET_BYTES``: communication starts early), the others at
most ``bucket_cap_mb``. The assignment depends only on the parameters' shapes and dtypes, which
are checked equal on every rank, so every rank has the same buckets in the same order.

During a backward each leaf's post-accumulate-grad hook copies its ``.grad`` (host copy for a
cuda tensor) into its slot. A bucket whose slots are all written is *ready*, but it is
launched (handed to this DDP's communication thread, which runs a blocking
``Allreduce(IN_PLACE)``: Note [Communication threads] in _comm.py) only once every earlier
bucket was launched: hooks fire from several engine threads (the workers of the parameters' devices) in
no fixed order, and MPI needs every rank to issue the collectives in one order. The first
hook of a backward queues a final callback (``engine.queue_callback``) that, after the last
node ran, writes what never arrived (zeros for unused parameters, or an error unless
``find_unused_parameters``), launches the rest, waits, and writes the averages to ``.grad``.
A backward is identified by its graph task; a hook from a second one while the first is
still running raises (one backward at a time per instance).

With ``find_unused_parameters``, a parameter counts as used by this rank when it got a
gradient in the synchronized backward *or in any ``no_sync`` backward since the last
synchronized one* (torch's reducer keeps its ``local_used_map`` across ``no_sync`` the same
way): its accumulated ``.grad`` is this rank's contribution, and the ranks that did not use it
contribute zeros. Counting only the last backward left a parameter that was used only in
``no_sync`` micro-batches unsynchronized: every rank kept its own gradient and the replicas
drifted apart after the step.

Note [DDP lifetime]
~~~~~~~~~~~~~~~~~~~
Each instance holds a duplicated communicator and a communication thread (Note
[Communication threads] in _comm.py); MPICH has room for about 2,000 communicators. The
parameters' hooks hold the instance only weakly, as torch's module holds no reference to its
DDP, so dropping the last reference to it releases both (``weakref.finalize``): its hooks are
removed, and its thread frees the communicator after the collectives already queued, then
ends. ``close()`` does the same at once. An instance dropped while its hooks were still on
the parameters warns (a UserWarning, once per process by Python's default filter): from then
on nothing synchronizes those parameters, and a program that meant to keep training with it
would otherwise let the replicas drift apart in silence. ``close()`` or ``remove_hooks()``
first says it was meant. The release is local (MPICH's ``MPI_Comm_free`` does not
synchronize), so ranks may drop their instances at different moments. ``_launch_log`` keeps
only the launches of the last few steps.
"""
from __future__ import annotations

import collections
import contextlib
import threading
import warnings
import weakref
from typing import Any, Iterable, Iterator

import numpy

from .. import engine
from ..engine._locks import remade_at_fork
from ..engine.autograd import current_graph_task  # which backward a hook runs in (See Note [DDP buckets])
from ._comm import Work

FIRST_BUCKET_BYTES = 1024 * 1024
LAUNCH_LOG = 4096  # bucket launches kept in _launch_log (bounded: See Note [DDP lifetime])


class _Bucket:
    __slots__ = ("index", "params", "offsets", "dtype", "mpi_dtype", "description")

    def __init__(self, index: int, params: list[int], sizes: list[int], dtype: numpy.dtype) -> None:
        self.index = index
        self.params = params
        self.offsets = [int(o) for o in numpy.cumsum([0] + sizes)]
        self.dtype = dtype
        self.mpi_dtype = None
        self.description = ""

    def new_buffer(self) -> numpy.ndarray:
        """A flat host array for one round (for every device: cuda goes through the host).
        Fresh each round, so the .grad tensors the round hands out may be views of it."""
        return numpy.empty(self.offsets[-1], dtype=self.dtype)


class _Round:
    """The state of one synchronized backward."""

    __slots__ = ("task", "ready", "pending", "next_launch", "works", "buffers")

    def __init__(self, task: Any, n_params: int, buckets: list[_Bucket]) -> None:
        self.task = task
        self.buffers = [b.new_buffer() for b in buckets]
        self.ready = [False] * n_params
        self.pending = [len(b.params) for b in buckets]
        self.next_launch = 0
        self.works: list[Work] = []


class DistributedDataParallel:
    """Synchronize the gradients of ``params`` across the processes of the default group.

    Construction is collective (every rank, same order): it checks that every rank passed
    parameters of the same shapes and dtypes, and copies rank 0's values into every rank's
    parameters. Afterwards each ``backward()`` that reaches the parameters leaves in their
    ``.grad`` the average over the ranks of the local gradients, as torch's DDP does; the
    all-reduce runs in buckets while the backward goes on (Note [DDP buckets]).
    ``engine.grad()`` / ``grad_async`` accumulate into no ``.grad`` and are not synchronized.
    Parameters that get no gradient in a backward are an error, unless
    ``find_unused_parameters=True``: then they count as zeros, and one that no rank used keeps
    its ``.grad`` untouched (a parameter used in a ``no_sync`` backward since the last
    synchronized one counts as used). Inside ``with ddp.no_sync():`` backward accumulates
    locally; the next synchronized backward all-reduces the accumulated ``.grad``.
    ``close()`` (or dropping the instance) releases its communicator and thread
    (Note [DDP lifetime]).

    >>> # under mpiexec: .grad of w and b is the average over the ranks after each backward
    >>> ddp = DistributedDataParallel([w, b])          # doctest: +SKIP
    >>> loss_fn(w, b, shard).backward()                # doctest: +SKIP
    """

    def __init__(self, params: Iterable[engine.Tensor], bucket_cap_mb: float | None = 25,
                 find_unused_parameters: bool = False, *, init_sync: bool = True) -> None:
        from . import _default_group
        group = _default_group()
        params = list(params)
        seen: set[int] = set()
        for i, p in enumerate(params):
            if not isinstance(p, engine.Tensor):
                raise TypeError(f"DistributedDataParallel: params[{i}] is a {type(p).__name__}, not a Tensor")
            if id(p) in seen:
                raise ValueError(f"DistributedDataParallel: params[{i}] appears twice in params")
            seen.add(id(p))
            if p.requires_grad and not p.is_leaf:
                raise ValueError(f"DistributedDataParallel: params[{i}] is not a leaf tensor (it has "
                                 f"grad_fn={p.grad_fn.name()}); pass the parameters themselves")
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't have any "
                               "parameter that requires a gradient.")
        if bucket_cap_mb is None:
            bucket_cap_mb = 25
        if not bucket_cap_mb > 0:
            raise ValueError(f"DistributedDataParallel: bucket_cap_mb must be positive, got {bucket_cap_mb}")
        self.find_unused_parameters = bool(find_unused_parameters)
        self._group = group
        self._world = group.world_size
        self._comm, self._thread = group.new_channel("threadgrad.distributed DDP comm")
        try:
            self._check_same_parameters()
            if init_sync:
                self._broadcast_parameters()
        except BaseException:
            _release(group, self._comm, self._thread, [])  # (every rank raises here: Note [DDP lifetime])
            raise
        self._buckets = self._make_buckets(int(bucket_cap_mb * 1024 * 1024))
        self._bucket_of = [0] * len(self.params)
        self._slot_of = [0] * len(self.params)
        for b in self._buckets:
            for k, i in enumerate(b.params):
                self._bucket_of[i], self._slot_of[i] = b.index, k
        self._lock = threading.Lock()
        remade_at_fork(self)  # See Note [Locks across fork] in engine/_locks.py
        self._round: _Round | None = None
        self._require_sync = True
        # bucket indices in launch order, the last LAUNCH_LOG of them (tests read it)
        self._launch_log: collections.deque[int] = collections.deque(maxlen=LAUNCH_LOG)
        # params that got a gradient in a no_sync backward since the last synchronized one
        self._used_since_sync = [False] * len(self.params)
        self._handles = [p.register_post_accumulate_grad_hook(self._hook_for(i)) for i, p in enumerate(self.params)]
        self._release = weakref.finalize(self, _release, group, self._comm, self._thread, self._handles)
        self._release.atexit = False  # at exit MPI_Finalize frees it all; a join there could wait

    def _remake_locks(self) -> None:
        self._lock = threading.Lock()

    # -- construction ---------------------------------------------------------------------
    def _collective(self, description: str, fn: Any) -> Any:
        out: list[Any] = []
        self._thread.submit(Work(f"DistributedDataParallel: {description}", lambda: out.append(fn()))).wait()
        return out[0] if out else None

    def _check_same_parameters(self) -> None:
        mine = [(tuple(p.shape), str(p.dtype), p.device.type) for p in self.params]
        everyone = self._collective("checking the parameters' shapes", lambda: self._comm.allgather(mine))
        for r, theirs in enumerate(everyone):
            if len(theirs) != len(mine):
                raise RuntimeError(f"DDP expects same model across all ranks, but Rank {self._group.rank} has "
                                   f"{len(mine)} params, while rank {r} has inconsistent {len(theirs)} params.")
            for i, (a, b) in enumerate(zip(mine, theirs)):
                if a[:2] != b[:2]:
                    raise RuntimeError(f"DDP expects same model across all ranks, but params[{i}] has shape "
                                       f"{a[0]} and dtype {a[1]} on rank {self._group.rank} and shape {b[0]} and "
                                       f"dtype {b[1]} on rank {r}.")

    def _broadcast_parameters(self) -> None:
        from . import _host_copy, _mpi_dtype, _write_back
        MPI = self._group.MPI
        for p in self.params:
            host = _host_copy(p)
            dtype = _mpi_dtype(MPI, host, "DistributedDataParallel")
            self._collective("broadcasting rank 0's parameters",
                             lambda h=host, d=dtype: self._comm.Bcast([h, d], root=0))
            if self._group.rank != 0:
                _write_back(p, host)

    def _make_buckets(self, cap: int) -> list[_Bucket]:
        from . import _mpi_dtype
        open_: dict[tuple, tuple[list[int], int, int]] = {}  # key -> (params, bytes, limit)
        groups: list[tuple[tuple, list[int]]] = []
        for i in reversed(range(len(self.params))):
            p = self.params[i]
            key = (numpy.dtype(p.dtype), p.device)
            members, size, limit = open_.get(key, ([], 0, min(FIRST_BUCKET_BYTES, cap)))
            members.append(i)
            size += int(numpy.prod(p.shape, dtype=numpy.int64)) * key[0].itemsize
            if size >= limit:
                groups.append((key, members))
                open_[key] = ([], 0, cap)
            else:
                open_[key] = (members, size, limit)
        groups += [(key, members) for key, (members, _s, _l) in open_.items() if members]
        buckets = []
        for k, ((dtype, device), members) in enumerate(groups):
            sizes = [int(numpy.prod(self.params[i].shape, dtype=numpy.int64)) for i in members]
            b = _Bucket(k, members, sizes, dtype)
            b.mpi_dtype = _mpi_dtype(self._group.MPI, numpy.empty(0, dtype), "DistributedDataParallel")
            b.description = (f"DDP bucket {k} of {len(groups)} ({dtype}, {device}, "
                             f"{b.offsets[-1] * dtype.itemsize / 1e6:.3g} MB, params {members})")
            buckets.append(b)
        return buckets

    @property
    def bucket_indices(self) -> list[list[int]]:
        """The parameter indices of each bucket, in launch order."""
        return [list(b.params) for b in self._buckets]

    # -- no_sync ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward calls inside accumulate ``.grad`` locally, without communication."""
        old = self._require_sync
        self._require_sync = False
        try:
            yield
        finally:
            self._require_sync = old

    # -- during backward ----------------------------------------------------------------------
    def _hook_for(self, i: int) -> Any:
        ref = weakref.ref(self)  # the parameters must not keep the instance alive (Note [DDP lifetime])

        def hook(p: engine.Tensor) -> None:
            ddp = ref()
            if ddp is not None:
                ddp._grad_ready(i, p)
        return hook

    def _grad_ready(self, i: int, p: engine.Tensor) -> None:
        if not self._require_sync:
            if p.grad is not None:
                self._used_since_sync[i] = True  # (each hook writes its own slot)
            return
        task = current_graph_task()
        with self._lock:
            r = self._round
            if r is not None and r.task is not task:
                if not getattr(r.task, "done", False):
                    raise RuntimeError(
                        "DistributedDataParallel: a second backward reached these parameters while another "
                        "backward of the same DistributedDataParallel is running; run one backward at a time "
                        "per instance (a reentrant backward, such as checkpoint(use_reentrant=True), counts as "
                        "a second one: use use_reentrant=False)")
                # that backward ended without its final callback: it failed. Its launched buckets
                # stay in this DDP's queue ahead of the new round's (Note [Watchdog] bounds them).
                r = None
            if r is None:
                r = self._round = _Round(task, len(self.params), self._buckets)
                engine.queue_callback(self._finish)
            if r.ready[i]:
                raise RuntimeError(
                    "Expected to mark a variable ready only once. This error is caused by a parameter "
                    f"(params[{i}]) receiving gradients twice in one backward of DistributedDataParallel "
                    "(e.g. from a reentrant backward); run one backward per step")
            if p.grad is None:
                return  # no gradient arrived: counted as unused at the end
            r.ready[i] = True
        b = self._buckets[self._bucket_of[i]]
        k = self._slot_of[i]
        numpy.copyto(r.buffers[b.index][b.offsets[k]:b.offsets[k + 1]], p.device.to_host(p.grad._data).reshape(-1))
        with self._lock:
            r.pending[b.index] -= 1
            self._launch_ready(r)

    def _launch_ready(self, r: _Round) -> None:
        """Launch, in bucket order, every bucket whose slots are all written (under self._lock)."""
        while r.next_launch < len(self._buckets) and r.pending[r.next_launch] == 0:
            b = self._buckets[r.next_launch]
            r.works.append(self._thread.submit(Work(b.description, self._reduce_fn(b, r.buffers[b.index]))))
            self._launch_log.append(b.index)
            r.next_launch += 1

    def _reduce_fn(self, b: _Bucket, buffer: numpy.ndarray) -> Any:
        comm, MPI, world = self._comm, self._group.MPI, self._world

        def run() -> None:
            if world > 1:
                comm.Allreduce(MPI.IN_PLACE, [buffer, b.mpi_dtype], op=MPI.SUM)
                numpy.divide(buffer, world, out=buffer)
        return run

    def _finish(self) -> None:
        """The final callback of a synchronized backward (See Note [DDP buckets])."""
        with self._lock:
            r = self._round
        if r is None:
            return
        missing = [i for i, done in enumerate(r.ready) if not done]
        if missing and not self.find_unused_parameters:
            with self._lock:
                self._round = None
                works = list(r.works)
            for w in works:  # the same buckets were launched on every rank that lacks the same ones
                w.wait()
            raise RuntimeError(
                f"DistributedDataParallel: params {missing} received no gradient in this backward (they were "
                "not used in producing the loss). Pass find_unused_parameters=True to DistributedDataParallel "
                "to count them as zeros, or make every parameter take part in the loss.")
        for i in missing:
            p = self.params[i]
            b = self._buckets[self._bucket_of[i]]
            k = self._slot_of[i]
            slot = r.buffers[b.index][b.offsets[k]:b.offsets[k + 1]]
            if p.grad is None:
                slot[...] = 0
            else:  # accumulated earlier (no_sync): this rank's contribution
                numpy.copyto(slot, p.device.to_host(p.grad._data).reshape(-1))
        used = None
        with self._lock:
            for i in missing:
                r.pending[self._bucket_of[i]] -= 1
            self._launch_ready(r)
            if self.find_unused_parameters:  # every rank, every time: the collectives must match
                used = numpy.array(r.ready, dtype=numpy.int32) | numpy.array(self._used_since_sync, dtype=numpy.int32)
                MPI, comm = self._group.MPI, self._comm
                r.works.append(self._thread.submit(Work(
                    "DDP: the count of ranks that used each parameter",
                    lambda: comm.Allreduce(MPI.IN_PLACE, [used, MPI.INT32_T], op=MPI.SUM))))
            works = list(r.works)
        try:
            for w in works:
                w.wait()
        finally:
            with self._lock:
                self._round = None
                self._used_since_sync = [False] * len(self.params)
        for b in self._buckets:
            for k, i in enumerate(b.params):
                if used is not None and used[i] == 0:
                    continue  # no rank used it: .grad untouched, as torch
                p = self.params[i]
                view = r.buffers[b.index][b.offsets[k]:b.offsets[k + 1]].reshape(p.shape)
                # a view of this round's buffer (no copy) where the device holds numpy arrays
                p.grad = engine.Tensor(p.device.asarray(view), device=p.device)

    def remove_hooks(self) -> None:
        """Stop synchronizing: remove the hooks from the parameters."""
        for h in self._handles:
            h.remove()
        self._handles.clear()  # (the list the finalizer holds)

    def close(self) -> None:
        """Stop synchronizing and release the communicator and the thread this instance holds
        (what dropping it does, at once; Note [DDP lifetime]). Collectives already launched
        finish first; a second call does nothing."""
        self.remove_hooks()
        self._release()


def _release(group: Any, comm: Any, thread: Any, handles: list) -> None:
    """Remove the hooks, free the communicator on its own thread after what is queued there,
    and end the thread. Not a method: the finalizer must not hold the instance."""
    if handles:  # dropped while synchronizing: See Note [DDP lifetime]
        warnings.warn("a DistributedDataParallel was dropped while its hooks were on its parameters: they are "
                      "no longer synchronized by it. Keep a reference to it while training, and call close() "
                      "when done (that releases its communicator and thread without this warning)",
                      UserWarning, stacklevel=2)
    for h in handles:
        h.remove()
    handles.clear()
    try:
        group.children.remove((comm, thread))
    except ValueError:
        return  # destroy_process_group released it already
    thread.submit(Work("DistributedDataParallel: freeing its communicator", comm.Free))
    thread.stop()
