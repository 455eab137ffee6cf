"""The torch-oracle guard: in a run that promises torch, a test skipped for want of it fails.

The leg of .ci/run that installs the ``oracle`` extra (torch's CPU wheel) sets
``THREADGRAD_EXPECT_TORCH=1``. Without this guard a broken torch install would turn every
comparison with torch into a skip and the leg would still pass, testing nothing against the
oracle. tests/conftest.py imports these hooks; tests/test_oracle_guard.py runs them in a
pytest of their own.
"""
from __future__ import annotations

import os

import pytest

EXPECT_TORCH = os.environ.get("THREADGRAD_EXPECT_TORCH") == "1"

# pytest.importorskip("torch")'s reason begins so; a test that skips torch in other words
# names torch too, so the guard looks for the module's name in quotes or after "import".
_TORCH_REASONS = ("'torch'", "import torch", "torch is not installed")


def _skipped_for_torch(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    """The skip reason when ``report`` is a skip for want of torch, else None."""
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return None
    reason = str(report.longrepr[2])
    return reason if any(marker in reason for marker in _TORCH_REASONS) else None


def pytest_configure(config: pytest.Config) -> None:
    if not EXPECT_TORCH:
        return
    try:
        import torch  # noqa: F401
    except Exception as exc:  # an ImportError, or a wheel that fails to load its libraries
        raise pytest.UsageError(f"THREADGRAD_EXPECT_TORCH=1, but torch does not import: {exc!r}") from exc


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not EXPECT_TORCH:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter is not None else {}
    skipped = [(report.nodeid, reason) for report in stats.get("skipped", [])
               if (reason := _skipped_for_torch(report)) is not None]
    if not skipped:
        return
    if reporter is not None:
        reporter.write_line(f"THREADGRAD_EXPECT_TORCH=1, yet {len(skipped)} test(s) skipped for want of torch:", red=True)
        for nodeid, reason in skipped[:20]:
            reporter.write_line(f"  {nodeid or '(collection)'}: {reason}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
