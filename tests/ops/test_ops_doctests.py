"""Run the docstring examples of ops/ and engine/gradcheck.py, _record.py, dtypes.py (STYLE.md habit 10)."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["ops", "ops.elementwise", "ops.activation", "ops.reduce", "ops.shape", "ops.index", "ops.linalg",
           "ops.nn", "ops.device", "ops.inplace", "engine.gradcheck", "engine._record", "engine.dtypes"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
