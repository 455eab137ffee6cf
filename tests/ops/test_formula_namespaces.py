"""The two namespaces a backward formula is written against (Note [First-order formulas] in
ops/_core.py) have the same names: every ``F.<name>(`` in ops/ is an op on OPS and an array
function on the arrays namespace of the plain table (cpu) or, for the formulas only fused
tables have, on the fused table."""
from __future__ import annotations

import pathlib
import re

from threadgrad.devices import _fused
from threadgrad.ops._core import ARRAYS, OPS

OPS_DIR = pathlib.Path(__file__).resolve().parents[2] / "ops"


def _formula_names() -> set:
    names = set()
    for path in OPS_DIR.glob("*.py"):
        names |= set(re.findall(r"\bF\.(\w+)\(", path.read_text()))
    return names


def test_every_formula_name_is_in_both_namespaces() -> None:
    names = _formula_names()
    assert {"saved", "wrap", "fit", "owned", "mul", "tanh_grad"} <= names
    plain = ARRAYS[_fused.PLAIN]
    for name in sorted(names):
        assert callable(getattr(OPS, name, None)), f"OPS has no {name}"
        assert callable(getattr(plain, name, None)) or callable(getattr(_fused.Fused, name, None)), \
            f"no array form of {name}"


def test_the_plain_arrays_namespace_is_made_once() -> None:
    assert ARRAYS[_fused.PLAIN] is ARRAYS[_fused.PLAIN]
    assert ARRAYS[_fused.PLAIN].tanh_grad is _fused.PLAIN.tanh_grad
