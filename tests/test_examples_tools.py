"""The examples of issue 19 run, in their reduced (--quick) forms, and show what they claim."""
from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys
from types import ModuleType

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(120)
def test_profile_timeline_shows_the_caller_and_the_virtual_worker(tmp_path):
    prof = _load("profile_timeline").main(tmp_path, quick=True, verbose=False)
    assert prof.threads() == [prof.threads()[0], "virtual:1 worker"] and prof.threads()[0].startswith("caller")
    directions = {(h.src_thread, h.dst_thread) for h in prof.handoffs()}
    caller = prof.threads()[0]
    assert directions == {(caller, "virtual:1 worker"), ("virtual:1 worker", caller)}
    on_worker = {e.name for e in prof.events() if e.kind == "node" and e.thread == "virtual:1 worker"}
    assert {"TanhBackward0", "MmBackward0", "ToCopyBackward0"} <= on_worker
    trace = json.loads((tmp_path / "timeline.json").read_text())
    rows = [e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
    assert sorted(rows) == sorted(prof.threads())
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.timeout(120)
def test_profile_timeline_command_line(tmp_path):
    out = subprocess.run([sys.executable, str(EXAMPLES / "profile_timeline.py"), "--quick", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=100, check=True).stdout
    assert "threads: caller (MainThread), virtual:1 worker" in out and "device hand-off" in out
    assert (tmp_path / "timeline.json").exists()
