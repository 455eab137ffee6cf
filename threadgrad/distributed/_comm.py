"""The communication machinery under threadgrad.distributed: work handles, the threads that
run MPI's blocking collectives, and the watchdog that aborts a stalled job.

Note [Communication threads]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
MPI's non-blocking collectives (``Iallreduce``) only progress while some thread is inside the
MPI library; a Python thread computing a backward is not, so they would finish at the next
``Wait``. A *blocking* ``Allreduce`` run on a thread of its own releases the GIL for its whole
length and progresses by itself, so the collective overlaps the backward that goes on in the
other threads. Each communicator therefore gets one ``_CommThread`` that runs its collectives,
one at a time, in the order they were submitted: MPI requires every rank to issue the
collectives of a communicator in the same order, and a FIFO on one thread keeps the order
the submitters chose. Two users of the process group that could submit concurrently (two
DistributedDataParallel instances) each get a communicator of their own (``comm.Dup()``), so
their orders never interleave differently on different ranks.

Note [Watchdog]
~~~~~~~~~~~~~~~
A rank that raises, dies or stalls leaves the others blocked in a collective that will never
complete. Every submitted work is registered with the process's ``_Watchdog`` with a deadline
(the process group's timeout); if one passes its deadline the watchdog prints which rank and
which collective (for DDP: which bucket) timed out and calls ``MPI_Abort``, which makes the
launcher (mpiexec, srun) tear down every rank of the job. An exception that nobody catches
aborts the job at once (``sys.excepthook``, as ``python -m mpi4py`` does, and
``threading.excepthook`` for one that ends a thread), so the other ranks need not wait for
their timeout.
"""
from __future__ import annotations

import collections
import concurrent.futures
import sys
import threading
import time
from typing import Any, Callable

from ..engine._locks import remade_at_fork


class Work:
    """The handle of an asynchronous collective (torch's ``Work``): ``wait()``,
    ``is_completed()``, ``is_success()``, ``exception()``, ``get_future()``."""

    __slots__ = ("description", "_run", "_future", "_result", "deadline")

    def __init__(self, description: str, run: Callable[[], Any], result: Any = None) -> None:
        self.description = description
        self._run = run
        self._result = result
        self._future: concurrent.futures.Future = concurrent.futures.Future()
        self.deadline = float("inf")

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the collective completed; raise its error if it failed. Returns True
        (torch's return value); ``timeout`` (seconds) raises RuntimeError when it passes."""
        try:
            self._future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise RuntimeError(f"{self.description} did not complete within {timeout} s") from None
        return True

    def is_completed(self) -> bool:
        """Whether the collective finished (successfully or not)."""
        return self._future.done()

    def is_success(self) -> bool:
        """Whether the collective finished without an error."""
        return self._future.done() and self._future.exception() is None

    def exception(self) -> BaseException | None:
        """The error of a finished collective, or None."""
        return self._future.exception() if self._future.done() else None

    def get_future(self) -> concurrent.futures.Future:
        """A ``concurrent.futures.Future`` completed with the list of the output tensors."""
        return self._future

    def _execute(self) -> None:
        run, self._run = self._run, None  # what it refers to (a DDP, its buffers) is not kept by the handle
        try:
            run()
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits
            self._future.set_exception(e)
        else:
            self._future.set_result(self._result)


class _Watchdog:
    """One per process: aborts the job when a registered work passes its deadline.
    See Note [Watchdog]."""

    def __init__(self, abort: Callable[[str], None]) -> None:
        self._abort = abort
        self._works: dict[int, Work] = {}
        self._cond = threading.Condition()
        remade_at_fork(self)  # See Note [Locks across fork] in engine/_locks.py
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="threadgrad.distributed watchdog", daemon=True)
        self._thread.start()

    def _remake_locks(self) -> None:
        self._cond = threading.Condition()

    def watch(self, work: Work, timeout: float) -> None:
        work.deadline = time.monotonic() + timeout
        with self._cond:
            self._works[id(work)] = work
            self._cond.notify()
        work._future.add_done_callback(lambda _f, key=id(work): self._forget(key))

    def _forget(self, key: int) -> None:
        with self._cond:
            self._works.pop(key, None)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join()

    def _loop(self) -> None:
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                late = [w for w in self._works.values() if w.deadline <= now]
                if late:
                    self._abort(late[0].description)
                    return
                nearest = min((w.deadline for w in self._works.values()), default=now + 3600.0)
                self._cond.wait(max(0.01, nearest - now))


class _CommThread:
    """Runs the works submitted for one communicator, one at a time, in submission order.
    See Note [Communication threads]."""

    def __init__(self, name: str, watchdog: _Watchdog, timeout: float) -> None:
        self._queue: collections.deque[Work | None] = collections.deque()
        self._cond = threading.Condition()
        remade_at_fork(self)
        self._watchdog = watchdog
        self._timeout = timeout
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _remake_locks(self) -> None:
        self._cond = threading.Condition()

    def submit(self, work: Work) -> Work:
        self._watchdog.watch(work, self._timeout)
        with self._cond:
            self._queue.append(work)
            self._cond.notify()
        return work

    def stop(self) -> None:
        """Finish what was submitted, then end the thread."""
        with self._cond:
            self._queue.append(None)
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                work = self._queue.popleft()
            if work is None:
                return
            work._execute()
            del work  # not held while waiting for the next: See Note [DDP lifetime] in ddp.py


def abort_message(rank: int, world: int, what: str, timeout: float) -> str:
    return (f"threadgrad.distributed: rank {rank} of {world}: {what} did not complete within the "
            f"timeout of {timeout:g} s (another rank raised, died or stalls); aborting the job "
            "with MPI_Abort. See docs/distributed.md, 'Faults'.")


def write_stderr(message: str) -> None:
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
        _wait_until_read(sys.stderr.fileno())
    except Exception:  # noqa: BLE001 - best effort before an abort
        pass


def _wait_until_read(fd: int, limit: float = 2.0) -> None:
    """Wait (up to ``limit`` seconds) until the reader of pipe ``fd`` took what was written:
    MPI_Abort next makes the launcher kill this process's forwarder, and bytes still in the
    pipe were lost with it (an abort message missing from the job's output)."""
    import fcntl
    import termios
    import time

    end = time.monotonic() + limit
    buf = bytearray(4)
    while time.monotonic() < end:
        fcntl.ioctl(fd, termios.FIONREAD, buf)
        if not int.from_bytes(buf, sys.byteorder):
            return
        time.sleep(0.001)
