"""Fixtures of the reliability suite (tests/stress); helpers are in stress_helpers.py.

Every stress test carries ``@pytest.mark.timeout``; threads are joined with a timeout of
their own, so a hang shows up as a named, failing thread instead of a frozen run.
"""
from __future__ import annotations

import sys

import pytest


@pytest.fixture(autouse=True)
def _preempt_often():
    """Switch threads every 10 us instead of every 5 ms, so interleavings that would be
    rare (a node finishing while another thread routes into the same task, a worker going
    idle between two pushes) happen many times per test."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)
