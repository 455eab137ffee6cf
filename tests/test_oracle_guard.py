"""tests/oracle_plugin.py: with THREADGRAD_EXPECT_TORCH=1 a skip for want of torch fails the run.

Each case runs a pytest of its own over a two-test file in a temporary folder, with the plugin
loaded by ``-p`` and nothing of this suite's configuration.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TORCH_IMPORTS = importlib.util.find_spec("torch") is not None


def _run(tmp_path: Path, body: str, expect_torch: bool) -> subprocess.CompletedProcess:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_sample.py").write_text("import pytest\n\n" + body)
    env = dict(os.environ, PYTHONPATH=str(TESTS))
    env.pop("THREADGRAD_EXPECT_TORCH", None)
    if expect_torch:
        env["THREADGRAD_EXPECT_TORCH"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "oracle_plugin",
                           "-c", str(tmp_path / "pytest.ini"), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


SKIPS_FOR_TORCH = '''
def test_runs():
    assert True

def test_needs_torch():
    pytest.skip("could not import 'torch': No module named 'torch'")
'''

SKIPS_FOR_OTHER = '''
def test_runs():
    assert True

def test_needs_sklearn():
    pytest.skip("could not import 'sklearn': No module named 'sklearn'")
'''


@pytest.mark.timeout(240)
def test_a_skip_for_want_of_torch_passes_without_the_promise(tmp_path: Path) -> None:
    result = _run(tmp_path, SKIPS_FOR_TORCH, expect_torch=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 1 skipped" in result.stdout


@pytest.mark.timeout(240)
def test_a_skip_for_want_of_torch_fails_a_run_that_promises_torch(tmp_path: Path) -> None:
    result = _run(tmp_path, SKIPS_FOR_TORCH, expect_torch=True)
    if TORCH_IMPORTS:
        assert result.returncode == pytest.ExitCode.TESTS_FAILED, result.stdout + result.stderr
        assert "1 test(s) skipped for want of torch" in result.stdout
        assert "test_sample.py::test_needs_torch" in result.stdout
    else:  # the promise itself is broken: the run stops before any test
        assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
        assert "THREADGRAD_EXPECT_TORCH=1, but torch does not import" in result.stderr


@pytest.mark.timeout(240)
@pytest.mark.skipif(not TORCH_IMPORTS, reason="the promise of torch can only be kept where torch imports")
def test_other_skips_pass_a_run_that_promises_torch(tmp_path: Path) -> None:
    result = _run(tmp_path, SKIPS_FOR_OTHER, expect_torch=True)
    assert result.returncode == 0, result.stdout + result.stderr
