"""Random programs with in-place writes through views in their forward, against torch 2.13
(issue 16's differential check, in the suite).

``programs.generate(seed, inplace=True)`` adds ``vwrite`` steps (tests/programs/interpreter.py,
``_vwrite``): a recorded in-place op on a slice (CopySlices), a preallocated buffer filled
slice by slice, a write through a view of a ``detach()`` alias, a view made under no_grad, a
view made stale by an in-place op on its base, a view of a view written in place. The rest
of the program is the combination test's (tests/stress/test_combinations.py): devices, both
checkpoints, reentrant Functions, hooks registered by 1-4 threads, retain_grad, saved-tensor
hooks, faults, and the calls of 1-4 threads on the shared retained graph.

The oracle is torch: live where torch is installed, and in CI (no torch) the outcomes torch
2.13 gave for the first seeds, recorded in ``torch_inplace_outcomes.json`` by
``cd tests && python -m programs --seeds 0:80 --inplace --record stress/torch_inplace_outcomes.json``.
The sequential reference of the combination test is not used here: it computes each call
with one ``grad()`` over a plainly built graph, and where a hook is given None (a gradient
that does not arrive) its counts differ from torch's by construction.
"""
from __future__ import annotations

import json
import os

import pytest
from programs import ThreadgradBackend, TorchBackend, compare, dumps, generate, outcome_from_json, run
from programs.generator import VWRITE
from test_combinations import _device_workers, _engine_is_clean

RECORDED = os.path.join(os.path.dirname(__file__), "torch_inplace_outcomes.json")
N_LIVE = int(os.environ.get("THREADGRAD_INPLACE_TORCH_N", "120"))


def _recorded() -> dict:
    with open(RECORDED) as f:
        return json.load(f)


def _report(seed: int, diffs: list) -> str:
    lines = "\n  ".join(d[:400] for d in diffs)
    return (f"seed {seed}: {len(diffs)} differences\n  {lines}\n"
            f"replay: cd tests && python -m programs --seed {seed} --inplace --torch\n"
            f"program: {dumps(generate(seed, True))}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", range(len(_recorded()["outcomes"])))
def test_inplace_mix_matches_torchs_recorded_outcome(seed):
    expected = outcome_from_json(_recorded()["outcomes"][str(seed)])
    before = _device_workers()
    diffs = compare(expected, run(generate(seed, True), ThreadgradBackend(), concurrent=True))
    _engine_is_clean(before)
    assert not diffs, _report(seed, diffs)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", range(len(_recorded()["outcomes"]), N_LIVE))
def test_inplace_mix_matches_torch(seed):
    pytest.importorskip("torch")
    program = generate(seed, True)
    theirs = run(program, TorchBackend(), concurrent=False)
    before = _device_workers()
    diffs = compare(theirs, run(program, ThreadgradBackend(), concurrent=True))
    _engine_is_clean(before)
    assert not diffs, _report(seed, diffs)


def test_recorded_outcomes_are_torchs_for_these_programs():
    """The recording matches the generator: re-recording a few seeds with the installed torch
    gives the same outcomes (a generator change must come with a new recording)."""
    torch = pytest.importorskip("torch")
    rec = _recorded()
    assert rec["inplace"] is True and rec["torch"].startswith("2.13")
    if not torch.__version__.startswith("2.13"):
        pytest.skip("the recording is of torch 2.13")
    for seed in (0, 1, 2, 17, 41):
        theirs = run(generate(seed, True), TorchBackend(), concurrent=False)
        assert not compare(outcome_from_json(rec["outcomes"][str(seed)]), theirs), seed


def test_inplace_programs_cover_every_write_and_leave_other_seeds_alone():
    seen = {s["variant"] for seed in range(40) for s in generate(seed, True)["steps"] if s["op"] == "vwrite"}
    assert seen == set(VWRITE)
    assert all(s["op"] != "vwrite" for seed in range(40) for s in generate(seed)["steps"])
