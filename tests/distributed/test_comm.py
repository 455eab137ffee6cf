"""The communication machinery of threadgrad.distributed without MPI: work handles, the
communication thread's order, and the watchdog (with a stand-in for MPI_Abort)."""
from __future__ import annotations

import threading

import pytest

from threadgrad.distributed._comm import Work, _CommThread, _Watchdog, abort_message


@pytest.mark.timeout(30)
def test_the_comm_thread_runs_works_in_submission_order_and_hands_out_errors():
    aborts: list[str] = []
    dog = _Watchdog(aborts.append)
    thread = _CommThread("test comm", dog, timeout=30)
    seen: list[int] = []
    works = [thread.submit(Work(f"w{i}", lambda i=i: seen.append(i), result=[i])) for i in range(50)]

    def boom():
        raise ValueError("collective failed")

    bad = thread.submit(Work("bad", boom))
    assert [w.get_future().result(10) for w in works] == [[i] for i in range(50)]
    assert seen == list(range(50))
    with pytest.raises(ValueError, match="collective failed"):
        bad.wait()
    assert bad.is_completed() and not bad.is_success() and isinstance(bad.exception(), ValueError)
    thread.stop()
    dog.stop()
    assert aborts == []


@pytest.mark.timeout(30)
def test_the_watchdog_aborts_naming_the_late_work_and_wait_can_time_out():
    aborted = threading.Event()
    aborts: list[str] = []

    def abort(what: str) -> None:
        aborts.append(what)
        aborted.set()

    dog = _Watchdog(abort)
    thread = _CommThread("test comm", dog, timeout=0.2)
    release = threading.Event()
    stuck = thread.submit(Work("DDP bucket 2 of 5", lambda: release.wait(20)))
    with pytest.raises(RuntimeError, match="DDP bucket 2 of 5 did not complete within 0.05 s"):
        stuck.wait(timeout=0.05)
    assert aborted.wait(20)
    assert aborts == ["DDP bucket 2 of 5"]
    release.set()
    assert stuck.wait() is True
    thread.stop()
    msg = abort_message(1, 4, "DDP bucket 2 of 5", 0.2)
    assert msg.startswith("threadgrad.distributed: rank 1 of 4: DDP bucket 2 of 5 did not complete "
                          "within the timeout of 0.2 s")


@pytest.mark.timeout(30)
def test_an_abort_message_waits_until_the_pipe_reader_took_it():
    """write_stderr's wait before MPI_Abort: the launcher kills the forwarder that reads a rank's
    stderr pipe right after the abort, and bytes still in the pipe were lost (an abort message
    missing from the job's output in about 1 of 8 runs of test_distributed's stalled-rank case)."""
    import fcntl
    import os
    import sys
    import termios

    from threadgrad.distributed._comm import _wait_until_read

    def unread(fd):
        buf = bytearray(4)
        fcntl.ioctl(fd, termios.FIONREAD, buf)
        return int.from_bytes(buf, sys.byteorder)

    r, w = os.pipe()
    try:
        os.write(w, b"rank 0 of 2: aborting\n")
        go, got = threading.Event(), []
        reader = threading.Thread(target=lambda: (go.wait(10), got.append(os.read(r, 100))))
        reader.start()
        go.set()
        _wait_until_read(w, limit=10)  # returns once the reader emptied the pipe
        assert unread(w) == 0
        reader.join(10)
        assert got == [b"rank 0 of 2: aborting\n"]
        os.write(w, b"nobody reads this\n")
        _wait_until_read(w, limit=0.05)  # bounded: no reader, it gives up
        assert unread(w) == len(b"nobody reads this\n")
    finally:
        os.close(r)
        os.close(w)
