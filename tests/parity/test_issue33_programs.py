"""A few seeds of issue 33's differential check in the suite (skipped without torch).

``programs.generate(seed, extended=True)`` (tests/programs): random programs with custom
Functions marking a view or a retained tensor dirty, node post-hooks on CopySlices, on matmul of
a vector and a matrix and on a chained basic index, and hooks that change gradients by more
than a scaling, besides the in-place writes, checkpoints, reentrant Functions, devices and
threads of the other programs; threadgrad's run (its threads concurrent) against torch 2.13's.
docs/parity.md gives the counts of the full run (``python -m programs --seeds 0:5000 --extended``).
"""
from __future__ import annotations

import os

import pytest
from programs import check, dumps, generate

N = int(os.environ.get("THREADGRAD_EXTENDED_PROGRAMS_N", "40"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", range(N))
def test_extended_program_matches_torch(seed):
    pytest.importorskip("torch")
    diffs = check(seed, torch=True, concurrent=True, extended=True)
    assert not diffs, (f"seed {seed}: " + "\n  ".join(d[:400] for d in diffs) +
                       f"\nreplay: cd tests && python -m programs --seed {seed} --extended\n"
                       f"program: {dumps(generate(seed, extended=True))}")


def test_extended_programs_cover_every_case_and_leave_other_programs_alone():
    """The first seeds draw each extended write, and programs made without the flag are the
    ones they were (the recorded torch outcomes of tests/stress stay valid)."""
    from programs.generator import VWRITE_EXTENDED
    seen = {s.get("variant") for seed in range(N) for s in generate(seed, extended=True)["steps"]}
    assert set(VWRITE_EXTENDED) <= seen
    plain = generate(3, inplace=True)
    assert all(s.get("variant") not in VWRITE_EXTENDED for s in plain["steps"])
    assert all("shift" not in h for h in plain["hooks"])
