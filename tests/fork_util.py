"""One helper for tests that run work in a forked child process."""
from __future__ import annotations

import os
import time
import warnings
from typing import Callable

import pytest

RAISED = 6  # the child's exit code when ``child()`` raised


def run_in_fork(child: Callable[[], int], timeout: float = 30.0) -> int:
    """Fork; in the child run ``child()`` and leave with the code it returns (``RAISED`` if it
    raised), never returning into pytest; in the parent wait for it, failing the test (and
    killing the child) if it hangs past ``timeout`` seconds, and return its exit code."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12 warns on fork with threads
        pid = os.fork()
    if pid == 0:
        code = RAISED
        try:
            code = child()
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)
    assert os.WIFEXITED(status), status
    return os.WEXITSTATUS(status)
