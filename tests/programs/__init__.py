"""Random autograd programs for combination tests: one generator, one interpreter, backends.

``generate(seed)`` gives a program as plain data (generator.py says what is in it and what is
kept out); ``run(program, backend)`` runs it for real and ``reference(program, backend)``
computes what it must give; ``compare`` lists the differences. ``check(seed)`` does all of it
for one seed on threadgrad (and on torch with ``torch=True``); ``python -m programs --seed S [--inplace]``
(from tests/) replays one seed. docs/testing.md describes the design.
"""
from __future__ import annotations

from .backends import InjectedFault, ThreadgradBackend, TorchBackend
from .generator import dumps, generate
from .interpreter import Outcome, compare, outcome_from_json, outcome_to_json, reference, run


def check(seed: int, torch: bool = False, concurrent: bool = True, inplace: bool = False,
          extended: bool = False) -> list:
    """Differences found for ``seed``: threadgrad's real run against the reference, and with
    ``torch`` torch's run against both (each line says which pair). ``inplace``: the program
    has in-place writes through views in its forward (``generate``). ``extended``: the issue 33
    program (``generate(seed, extended=True)``), compared with torch only (its hooks that shift
    gradients are outside what the reference models)."""
    program = generate(seed, inplace, extended)
    tg = ThreadgradBackend()
    if extended:
        theirs = run(program, TorchBackend(), concurrent=False)
        return [f"threadgrad vs torch: {d}" for d in compare(theirs, run(program, tg, concurrent=concurrent))]
    expected = reference(program, tg)
    actual = run(program, tg, concurrent=concurrent)
    diffs = [f"threadgrad vs reference: {d}" for d in compare(expected, actual)]
    if torch:
        theirs = run(program, TorchBackend(), concurrent=False)
        diffs += [f"torch vs reference: {d}" for d in compare(theirs, expected)]
        diffs += [f"threadgrad vs torch: {d}" for d in compare(theirs, actual)]
    return diffs


__all__ = ["InjectedFault", "Outcome", "ThreadgradBackend", "TorchBackend", "check", "compare", "dumps",
           "generate", "reference", "run"]
