"""Data-parallel training across processes and machines over MPI (torch.distributed's names).

Launch N processes with ``mpiexec -n N python train.py`` (or ``python -m
threadgrad.distributed.run -n N train.py``); in each, ``init_process_group("mpi")`` joins the
job, and :class:`DistributedDataParallel` all-reduces the gradients of a list of parameters
while backward runs. MPI comes from the optional extra ``threadgrad[distributed]`` (mpi4py and
MPICH's wheel) or from a cluster's own MPI under the same mpi4py. Importing this module loads
no MPI; ``init_process_group`` does. docs/distributed.md is the user guide.

Collectives act on tensors of any device: cpu and ``virtual:N`` arrays are reduced in place
by MPI; ``cuda:N`` arrays are reduced through host copies (backend ``"mpi"``).

The process group is process-wide state (one per process, as torch's default group): it is
set by ``init_process_group`` and cleared by ``destroy_process_group``, from any thread.
"""
from __future__ import annotations

import datetime
import os
import sys
import traceback
import threading
from typing import Any

import numpy

from .. import engine
from ._comm import Work, _CommThread, _Watchdog, abort_message, write_stderr

__all__ = ["ReduceOp", "Work", "init_process_group", "is_initialized", "is_available", "is_mpi_available",
           "is_nccl_available", "get_rank", "get_world_size", "get_backend", "all_reduce", "broadcast",
           "barrier", "destroy_process_group", "DistributedDataParallel"]

_NOT_INITIALIZED = ("Default process group has not been initialized, please make sure to call "
                    "init_process_group.")
# torch's default timeout for its non-NCCL backends
_DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)


class ReduceOp:
    """The reductions of :func:`all_reduce` (torch.distributed.ReduceOp's members)."""

    SUM = "SUM"
    AVG = "AVG"
    PRODUCT = "PRODUCT"
    MIN = "MIN"
    MAX = "MAX"
    BAND = "BAND"
    BOR = "BOR"
    BXOR = "BXOR"


_MPI_OPS = {"SUM": "SUM", "AVG": "SUM", "PRODUCT": "PROD", "MIN": "MIN", "MAX": "MAX", "BAND": "BAND",
            "BOR": "BOR", "BXOR": "BXOR"}


def is_available() -> bool:
    """True: this module is always importable (MPI is loaded by init_process_group)."""
    return True


def is_mpi_available() -> bool:
    """Whether mpi4py can be imported (the extra ``threadgrad[distributed]`` is installed)."""
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


def is_nccl_available() -> bool:
    """False: the NCCL backend is not part of this release (see docs/distributed.md)."""
    return False


class _ProcessGroup:
    """The default group: MPI's COMM_WORLD (duplicated), its communication thread, the
    watchdog and the timeout."""

    def __init__(self, mpi: Any, backend: str, timeout: float) -> None:
        self.MPI = mpi
        self.backend = backend
        self.timeout = timeout
        self.comm = mpi.COMM_WORLD.Dup()
        self.rank = self.comm.Get_rank()
        self.world_size = self.comm.Get_size()
        self.watchdog = _Watchdog(self._abort)
        self.thread = _CommThread("threadgrad.distributed comm", self.watchdog, timeout)
        self.children: list[Any] = []  # communication threads of DDP instances

    def _abort(self, what: str) -> None:
        write_stderr(abort_message(self.rank, self.world_size, what, self.timeout))
        self.MPI.COMM_WORLD.Abort(1)

    def new_channel(self, name: str) -> tuple[Any, _CommThread]:
        """A communicator and thread of its own (collective: every rank must call it, in the
        same order). See Note [Communication threads] in _comm.py."""
        out: list[Any] = []
        self.thread.submit(Work("duplicating the communicator", lambda: out.append(self.comm.Dup()))).wait()
        comm = out[0]
        thread = _CommThread(name, self.watchdog, self.timeout)
        self.children.append((comm, thread))
        return comm, thread

    def close(self) -> None:
        self.thread.stop()
        while self.children:  # (a DDP released meanwhile has taken itself off: Note [DDP lifetime])
            comm, thread = self.children.pop()
            thread.stop()
            comm.Free()
        self.watchdog.stop()
        self.comm.Free()


_group: _ProcessGroup | None = None
_group_lock = threading.Lock()  # read at each use: remade in a forked child (below)
_previous_excepthook: Any = None
_previous_threading_excepthook: Any = None


def _seconds(timeout: Any) -> float:
    if timeout is None:
        timeout = _DEFAULT_TIMEOUT
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0:
        return float(timeout)
    raise TypeError(f"timeout must be a datetime.timedelta or a positive number of seconds, got {timeout!r}")


def _load_mpi() -> Any:
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise RuntimeError("threadgrad.distributed needs mpi4py: pip install 'threadgrad[distributed]' "
                           f"(mpi4py and MPICH), or mpi4py built against your cluster's MPI ({e})") from None
    return MPI


def init_process_group(backend: str | None = None, init_method: str | None = None, timeout: Any = None,
                       world_size: int = -1, rank: int = -1, store: Any = None, group_name: str = "",
                       pg_options: Any = None, device_id: Any = None) -> None:
    """Join the job this process was launched in (by mpiexec, srun, ...) as its default group.

    ``backend``: ``"mpi"`` (or None, the same). ``timeout`` (a ``datetime.timedelta`` or
    seconds; 30 minutes by default, torch's) bounds every collective: past it the job is
    aborted with a message naming the rank and the collective. ``world_size`` and ``rank``,
    when given, must match the launcher's; ``init_method``, ``store``, ``group_name``,
    ``pg_options`` and ``device_id`` are torch's rendezvous settings, which MPI does not need
    (they are accepted and ignored). An exception that no code catches then aborts the job
    (``MPI_Abort``), so no rank waits for a peer that is gone.
    """
    global _group, _previous_excepthook, _previous_threading_excepthook
    backend = "mpi" if backend is None else str(backend).lower()
    if backend == "nccl":
        raise RuntimeError("init_process_group: the 'nccl' backend is not available in this release of "
                           "threadgrad; use backend='mpi', which all-reduces cuda tensors through host copies")
    if backend != "mpi":
        raise ValueError(f"init_process_group: unknown backend {backend!r}; threadgrad supports 'mpi'")
    seconds = _seconds(timeout)
    with _group_lock:
        if _group is not None:
            raise ValueError("trying to initialize the default process group twice!")
        MPI = _load_mpi()
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise RuntimeError("threadgrad.distributed needs an MPI that grants MPI_THREAD_MULTIPLE "
                               f"(this one granted level {MPI.Query_thread()}): collectives run on threads "
                               "of their own while backward runs")
        size, me = MPI.COMM_WORLD.Get_size(), MPI.COMM_WORLD.Get_rank()
        if world_size not in (-1, size):
            raise ValueError(f"init_process_group: world_size={world_size}, but the job was launched with "
                             f"{size} processes")
        if rank not in (-1, me):
            raise ValueError(f"init_process_group: rank={rank}, but the launcher made this process rank {me}")
        _group = _ProcessGroup(MPI, backend, seconds)
        _previous_excepthook = sys.excepthook
        sys.excepthook = _abort_on_uncaught
        # An exception escaping a thread (a backward run on a thread of the user's, a hook on an
        # engine thread) goes to threading.excepthook, not sys.excepthook: without this one the
        # other ranks waited in their all-reduce until the timeout.
        _previous_threading_excepthook = threading.excepthook
        threading.excepthook = _abort_on_uncaught_in_thread


def _abort_on_uncaught(etype: type, value: BaseException, tb: Any) -> None:
    """An uncaught exception on one rank aborts the job (Note [Watchdog] in _comm.py)."""
    group = _group
    if group is None or group.world_size == 1 or _previous_excepthook not in (None, sys.__excepthook__):
        (_previous_excepthook or sys.__excepthook__)(etype, value, tb)
    if group is not None and group.world_size > 1:
        # The traceback and the abort line go out in one write, just before MPI_Abort: the
        # launcher tears the job down at once and may drop output still in flight, and a
        # traceback printed line by line lost all but its first line that way.
        text = "".join(traceback.format_exception(etype, value, tb)) if _previous_excepthook in (
            None, sys.__excepthook__) else ""
        write_stderr(f"{text}threadgrad.distributed: rank {group.rank} of {group.world_size}: uncaught "
                     f"{etype.__name__}; aborting the job with MPI_Abort")
        group.MPI.COMM_WORLD.Abort(1)


def _abort_on_uncaught_in_thread(args: Any) -> None:
    """``threading.excepthook``: an exception that ends a thread aborts the job as one that
    ends the main thread does. SystemExit ends only its thread, as Python's own hook says."""
    group = _group
    previous = _previous_threading_excepthook or threading.__excepthook__
    if args.exc_type is SystemExit or group is None or group.world_size == 1:
        previous(args)
        return
    name = args.thread.name if args.thread is not None else "a thread"
    if previous is not threading.__excepthook__:
        previous(args)
        text = ""
    else:
        text = f"Exception in thread {name}:\n" + "".join(
            traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
    write_stderr(f"{text}threadgrad.distributed: rank {group.rank} of {group.world_size}: uncaught "
                 f"{args.exc_type.__name__} in thread {name}; aborting the job with MPI_Abort")
    group.MPI.COMM_WORLD.Abort(1)


def is_initialized() -> bool:
    """Whether init_process_group was called (and destroy_process_group not since)."""
    return _group is not None


def _default_group() -> _ProcessGroup:
    group = _group
    if group is None:
        raise ValueError(_NOT_INITIALIZED)
    return group


def get_rank(group: Any = None) -> int:
    """This process's rank in the default group (0 .. world_size - 1)."""
    return _default_group().rank


def get_world_size(group: Any = None) -> int:
    """The number of processes in the default group."""
    return _default_group().world_size


def get_backend(group: Any = None) -> str:
    """The backend of the default group (``"mpi"``)."""
    return _default_group().backend


def destroy_process_group(group: Any = None) -> None:
    """Finish pending collectives, stop the communication threads and leave the group; a
    later init_process_group starts anew (MPI itself is finalized at exit)."""
    global _group
    with _group_lock:
        g = _default_group()
        _group = None
    if sys.excepthook is _abort_on_uncaught:
        sys.excepthook = _previous_excepthook or sys.__excepthook__
    if threading.excepthook is _abort_on_uncaught_in_thread:
        threading.excepthook = _previous_threading_excepthook or threading.__excepthook__
    g.close()


def _mpi_dtype(MPI: Any, array: numpy.ndarray, fname: str) -> Any:
    try:  # MPI's predefined type for the numpy type code (reductions are defined on those)
        return MPI.Datatype.fromcode(array.dtype.char)
    except (KeyError, ValueError):
        raise TypeError(f"{fname}: dtype {array.dtype} cannot be sent through MPI") from None


def _host_copy(t: engine.Tensor) -> numpy.ndarray:
    """A C-contiguous numpy array of t's values that the collective may overwrite."""
    return numpy.array(t.device.to_host(t._data), copy=True, order="C")


def _write_back(t: engine.Tensor, host: numpy.ndarray) -> None:
    """Store the result in t, in place (bumping its version, as torch's collectives do)."""
    with engine.no_grad():
        t.copy_(engine.tensor(host, device=t.device))


def _check_tensor(t: Any, fname: str) -> None:
    if not isinstance(t, engine.Tensor):
        raise TypeError(f"{fname}: expected a Tensor, got {type(t).__name__}")


def all_reduce(tensor: engine.Tensor, op: str = ReduceOp.SUM, group: Any = None,
               async_op: bool = False) -> Work | None:
    """Reduce ``tensor`` across all processes with ``op``, in place: every rank ends with the
    result. With ``async_op=True`` return a :class:`Work` at once (``wait()``,
    ``is_completed()``, ``get_future()``); the tensor holds the result after ``wait()``."""
    _check_tensor(tensor, "all_reduce")
    g = _default_group()
    if op not in _MPI_OPS:
        raise ValueError(f"all_reduce: unknown op {op!r}; use a member of ReduceOp")
    host = _host_copy(tensor)
    if op == ReduceOp.AVG and host.dtype.kind not in "fc":
        raise TypeError(f"all_reduce: ReduceOp.AVG needs a floating-point tensor, got {host.dtype}")
    dtype = _mpi_dtype(g.MPI, host, "all_reduce")
    mpi_op = getattr(g.MPI, _MPI_OPS[op])

    def run() -> None:
        g.comm.Allreduce(g.MPI.IN_PLACE, [host, dtype], op=mpi_op)
        if op == ReduceOp.AVG:
            host[...] = host / g.world_size
        _write_back(tensor, host)

    return _submit(g, Work(f"all_reduce of a {tensor.shape} {tensor.dtype} tensor", run, [tensor]), async_op)


def broadcast(tensor: engine.Tensor, src: int, group: Any = None, async_op: bool = False) -> Work | None:
    """Copy rank ``src``'s ``tensor`` into ``tensor`` on every rank (in place)."""
    _check_tensor(tensor, "broadcast")
    g = _default_group()
    if not 0 <= src < g.world_size:
        raise ValueError(f"broadcast: src={src} is not a rank of this group of {g.world_size}")
    host = _host_copy(tensor)
    dtype = _mpi_dtype(g.MPI, host, "broadcast")

    def run() -> None:
        g.comm.Bcast([host, dtype], root=src)
        if g.rank != src:
            _write_back(tensor, host)

    return _submit(g, Work(f"broadcast from rank {src} of a {tensor.shape} {tensor.dtype} tensor", run,
                           [tensor]), async_op)


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None) -> Work | None:
    """Block until every rank has reached this barrier."""
    g = _default_group()
    return _submit(g, Work("barrier", g.comm.Barrier), async_op)


def _submit(g: _ProcessGroup, work: Work, async_op: bool) -> Work | None:
    g.thread.submit(work)
    if async_op:
        return work
    work.wait()
    return None


def _remake_group_lock() -> None:
    """See Note [Locks across fork] in engine/_locks.py."""
    global _group_lock
    _group_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_remake_group_lock)

from .ddp import DistributedDataParallel  # noqa: E402 - it uses the group above
