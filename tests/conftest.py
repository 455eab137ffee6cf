"""Shared fixtures for the whole suite.

Layout: tests/ mirrors the package tree (tests/engine, tests/ops, tests/devices) and has no
``__init__.py`` files, so every test module needs a basename unique across the suite.
Tests that start threads carry ``@pytest.mark.timeout(60)`` so a deadlock fails instead of
hanging the run.
"""
from __future__ import annotations

import os
import sys

import pytest
from oracle_plugin import pytest_sessionfinish  # noqa: F401 - a hook: fails skips for want of torch
from oracle_plugin import pytest_configure as _oracle_configure
from threads_util import retire_cpu_helpers, run_threads

from threadgrad import devices, engine


@pytest.fixture(scope="session")
def cupy_importable() -> bool:
    """True when ``import cupy`` succeeds (cuda tests and cupy-missing checks depend on it)."""
    try:
        import cupy  # noqa: F401
    except Exception:
        return False
    return True


@pytest.fixture(autouse=True)
def _grad_mode_is_restored():
    """Every test starts with grad mode on; a test that leaves it off fails loudly."""
    engine.set_grad_enabled(True)
    yield
    leaked = not engine.is_grad_enabled()
    engine.set_grad_enabled(True)
    assert not leaked, "the test left grad mode disabled on the main thread"


# The free-threaded leg of .ci/run sets THREADGRAD_EXPECT_NO_GIL=1: an extension module
# imported without declaring itself free-threading safe turns the GIL back on, and the leg
# would then test the GIL build. The leg also makes that import's RuntimeWarning an error
# (python -W); this check catches an import that re-enabled the GIL in any other way.
EXPECT_NO_GIL = os.environ.get("THREADGRAD_EXPECT_NO_GIL") == "1"


def _gil_enabled() -> bool:
    return getattr(sys, "_is_gil_enabled", lambda: True)()


# THREADGRAD_TEST_CPU_WORKERS=n runs the whole suite with set_cpu_workers(n): a shake-out of
# the parallel mode (docs/testing.md). Tests that assert the exact n = 0 schedule fail there.
CPU_WORKERS = int(os.environ.get("THREADGRAD_TEST_CPU_WORKERS", "0"))


def pytest_configure(config: pytest.Config) -> None:
    _oracle_configure(config)
    if CPU_WORKERS:
        engine.set_cpu_workers(CPU_WORKERS)
    if EXPECT_NO_GIL and _gil_enabled():
        raise pytest.UsageError("THREADGRAD_EXPECT_NO_GIL=1, but the GIL is enabled (not a free-threaded "
                                "interpreter, or an import re-enabled it)")


@pytest.fixture(autouse=True)
def _gil_stays_disabled(request: pytest.FixtureRequest):
    yield
    if EXPECT_NO_GIL and _gil_enabled():
        pytest.fail(f"the GIL was enabled during {request.node.nodeid} (an import re-enabled it)")


@pytest.fixture
def virtual1() -> devices.Device:
    return devices.get("virtual:1")


@pytest.fixture
def virtual2() -> devices.Device:
    return devices.get("virtual:2")


@pytest.fixture
def run_in_threads():
    """``run_in_threads(n, fn)``: run ``fn(i)`` on n threads started together behind a
    barrier; re-raise the first exception any of them raised; return their results."""
    return lambda n, fn, timeout=50.0: run_threads(n, fn, timeout)


@pytest.fixture
def workers():
    """``workers(n)`` sets set_cpu_workers(n) for this test (which starts at n = 0, no
    helper alive); afterwards the previous n is back, and where that is 0 the helpers have
    retired, so no other test sees them. (THREADGRAD_TEST_CPU_WORKERS runs the suite with
    another n: see above.)"""
    prev = engine.set_cpu_workers(0)
    retire_cpu_helpers()
    yield engine.set_cpu_workers
    retire_cpu_helpers()
    engine.set_cpu_workers(prev)
