"""docs/ops.md lists every registered op (tests/test_docs.py runs the pages' examples)."""
from __future__ import annotations

import pathlib

from threadgrad import ops

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"


def test_every_registered_op_is_documented() -> None:
    text = (DOCS / "ops.md").read_text()
    missing = [name for name in ops.REGISTRY if f"`{name}`" not in text]
    assert not missing, f"ops missing from docs/ops.md: {missing}"
