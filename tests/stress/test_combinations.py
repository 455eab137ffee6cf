"""Seeded random mixes of features, each checked against a sequential reference (issue 15).

The engine's bugs lived where two features meet: checkpoint and a shared parameter,
retain_grad and ``inputs=``, hooks and threads, an interrupt and a device hand-off. Each seed
here is one program from ``programs.generate`` (tests/programs): a forward over a few float64
leaves mixing devices, both checkpoint variants, reentrant custom Functions, views and
detach, some ops under saved-tensor hooks (copies, save_on_cpu); retain_grad; tensor, node pre/post and post-accumulate-grad hooks registered
concurrently by 1-4 threads (plus hooks added and removed around the calls); then each
thread's ``backward`` / ``grad`` calls (``inputs=`` or not) on the shared retained graph,
some of them failing by design (a custom exception or KeyboardInterrupt, from a node or a
hook, on cpu or on a device worker).

``programs.run`` runs it for real; ``programs.reference`` computes, on one thread, what it
must give; they must agree to 1e-12 (tests/programs/interpreter.py says why not bit-exactly)
with exact hook counts and exception types. With torch installed, torch's run is the second
oracle. A failure prints the seed and the program; replay it with
``cd tests && python -m programs --seed S [--torch]``. ``THREADGRAD_COMBO_N`` sets the number
of seeds (default 150, about 10 s).
"""
from __future__ import annotations

import os

import pytest
from programs import ThreadgradBackend, TorchBackend, compare, dumps, generate, reference, run
from stress_helpers import assert_engine_usable, device_workers_alive

from threadgrad import engine

N = int(os.environ.get("THREADGRAD_COMBO_N", "150"))
N_TORCH = int(os.environ.get("THREADGRAD_COMBO_TORCH_N", str(max(1, N // 2))))


def _report(seed: int, diffs: list, program: dict) -> str:
    lines = "\n  ".join(d[:400] for d in diffs)
    return (f"seed {seed}: {len(diffs)} differences\n  {lines}\n"
            f"replay: cd tests && python -m programs --seed {seed} --torch\n"
            f"program: {dumps(program)}")


def _device_workers() -> set:
    return {t for t in engine.get_engine().worker_threads() if t.name.startswith("threadgrad-virtual")}


def _engine_is_clean(before: set) -> None:
    """No grad mode leaked; no device worker that ran before or during the mix died (a dead
    one is replaced by the next push, so compare thread objects); the engine is exact."""
    assert engine.is_grad_enabled(), "a mix left grad mode off on the main thread"
    assert all(t.is_alive() for t in before | _device_workers()), "a device worker died"
    assert_engine_usable()
    assert device_workers_alive()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", range(N))
def test_random_mix_matches_the_sequential_reference(seed):
    program = generate(seed)
    tg = ThreadgradBackend()
    before = _device_workers()
    diffs = compare(reference(program, tg), run(program, tg, concurrent=True))
    _engine_is_clean(before)
    assert not diffs, _report(seed, diffs, program)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", range(N_TORCH))
def test_random_mix_matches_torch(seed):
    pytest.importorskip("torch")
    program = generate(seed)
    theirs = run(program, TorchBackend(), concurrent=False)
    before = _device_workers()
    diffs = compare(theirs, run(program, ThreadgradBackend(), concurrent=True))
    _engine_is_clean(before)
    assert not diffs, _report(seed, diffs, program)


def test_the_generator_is_deterministic_and_covers_every_feature():
    """One seed gives one program; the first seeds use every feature the docstring names."""
    assert dumps(generate(7)) == dumps(generate(7))
    seen = set()
    for seed in range(max(N, 40)):
        p = generate(seed)
        seen.update(s["op"] for s in p["steps"])
        seen.update(f"ckpt-{s['use_reentrant']}" for s in p["steps"] if s["op"] == "checkpoint")
        seen.update(f"hook-{h['kind']}" for h in p["hooks"])
        seen.update(f"fault-{c['fault']}" for t in p["threads"] for c in t if c["fault"])
        seen.update(f"threads-{len(p['threads'])}" for _ in [0])
        seen.update(f"{c['api']}-inputs" for t in p["threads"] for c in t if c["inputs"] is not None)
        if p["retain"]:
            seen.add("retain")
        if p["churn"]:
            seen.add("churn")
        seen.update(f"saved-{s['saved_hooks']}" for s in p["steps"] if s.get("saved_hooks"))
    expected = {"to", "detach", "r_tanh", "r_mul", "fault", "checkpoint", "ckpt-True", "ckpt-False",
                "hook-tensor", "hook-pre", "hook-post", "hook-post_acc", "hook-raise", "fault-exc",
                "fault-kbi", "threads-1", "threads-4", "backward-inputs", "grad-inputs", "retain", "churn",
                "rowroll", "splitswap", "treshape", "sumk", "matmul", "saved-copy", "saved-cpu"}
    assert expected <= seen, sorted(expected - seen)
