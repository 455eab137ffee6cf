"""docs/errors.md is executable: every row of its table is run here.

For each row: run the page's setup block in a fresh namespace, run the row's snippet, and
check that it raises exactly the documented exception type with the documented message
fragment. Then check that the engine is still usable: a fresh backward (and grad) works,
exactly, on cpu, virtual:1 and virtual:2, and no grad-mode / anomaly-mode state leaked.
"""
from __future__ import annotations

import builtins
import importlib
import pathlib
import re
import warnings

import numpy as np
import pytest

from threadgrad import engine, ops

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "errors.md"
CELL_CODE = re.compile(r"^(`+)(?!`)(.*?)\1$")  # a code span; ``...`` when it holds backticks


def _split_row(line: str) -> list[str]:
    """Cells of a markdown table row; ``\\|`` is a literal pipe inside a cell."""
    cells = re.split(r"(?<!\\)\|", line.strip())
    if cells and cells[0] == "":
        cells = cells[1:]
    if cells and cells[-1] == "":
        cells = cells[:-1]
    return [c.strip().replace("\\|", "|") for c in cells]


def _unquote(cell: str, what: str, row: str) -> str:
    m = CELL_CODE.match(cell)
    if m is None:
        raise AssertionError(f"row {row}: the {what} cell must be one `code span`, got {cell!r}")
    text = m.group(2)
    if len(m.group(1)) > 1 and text.startswith(" ") and text.endswith(" "):
        text = text[1:-1]  # Markdown strips one space each side of a ``...`` span
    return text


def parse(text: str) -> tuple[str, list[tuple[str, str, type, str]]]:
    """Return (setup code, rows as (number, snippet, exception type, message fragment))."""
    setup_part = text.split("## Setup", 1)[1].split("## Table", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", setup_part, re.S)
    assert len(blocks) == 1, "docs/errors.md: the Setup section must hold exactly one python block"
    table = text.split("## Table", 1)[1]
    rows = []
    header_seen = False
    for line in table.splitlines():
        if not line.startswith("|"):
            continue
        cells = _split_row(line)
        if not header_seen:
            assert [c.lower() for c in cells] == ["#", "input", "exception", "message"], cells
            header_seen = True
            continue
        if set("".join(cells)) <= set("-: "):
            continue  # the |---| line
        assert len(cells) == 4, f"malformed row: {line}"
        num, snippet, exc_name, message = cells
        exc = getattr(builtins, exc_name, None) if "." not in exc_name else _dotted(exc_name)
        assert isinstance(exc, type) and issubclass(exc, BaseException), f"row {num}: unknown exception {exc_name}"
        rows.append((num, _unquote(snippet, "input", num), exc, _unquote(message, "message", num)))
    return blocks[0], rows


def _dotted(name: str) -> type | None:
    """An exception class of the project named as users reach it under threadgrad, e.g.
    engine.CheckpointError."""
    obj = importlib.import_module("threadgrad")
    for part in name.split("."):
        obj = getattr(obj, part, None)
    return obj


SETUP, ROWS = parse(PAGE.read_text())


def test_table_is_well_formed():
    nums = [r[0] for r in ROWS]
    assert nums == [str(i) for i in range(1, len(ROWS) + 1)], "rows must be numbered 1, 2, 3, ..."
    assert len(ROWS) >= 60
    assert len({r[1] for r in ROWS}) == len(ROWS), "duplicate snippets"


def _engine_still_usable() -> None:
    assert engine.is_grad_enabled(), "grad mode leaked"
    assert not engine.is_anomaly_enabled(), "anomaly mode leaked"
    for dev in ("cpu", "virtual:1", "virtual:2"):
        x = engine.tensor([1.0, 2.0, 3.0], dtype=np.float64, requires_grad=True)
        loss = ops.sum(ops.mul(ops.mul(ops.to(x, dev), ops.to(x, dev)), 3.0))
        loss.backward()
        assert x.grad.tolist() == [6.0, 12.0, 18.0], dev
        (g,) = engine.grad(ops.sum(ops.mul(ops.to(x, dev), 2.0)), x)
        assert g.tolist() == [2.0, 2.0, 2.0], dev


@pytest.mark.timeout(30)
@pytest.mark.parametrize("num,snippet,exc,message", ROWS, ids=[f"row{r[0]}" for r in ROWS])
def test_documented_error(num, snippet, exc, message):
    namespace: dict = {"__name__": f"errors_row_{num}"}
    exec(compile(SETUP, "docs/errors.md[setup]", "exec"), namespace)  # noqa: S102 - our docs
    code = compile(snippet, f"docs/errors.md[row {num}]", "exec")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(BaseException) as info:
            exec(code, namespace)  # noqa: S102
    err = info.value
    assert type(err) is exc, f"row {num}: expected {exc.__name__}, got {type(err).__name__}: {err}"
    assert message in str(err), f"row {num}: message {str(err)!r} lacks {message!r}"
    _engine_still_usable()


def test_parser_reads_double_backtick_spans():
    text = (
        "## Setup\n```python\na = 1\n```\n## Table\n| # | input | exception | message |\n|---|---|---|---|\n"
        "| 1 | `a` | TypeError | `` `inputs` argument `` |\n"
    )
    assert parse(text)[1] == [("1", "a", TypeError, "`inputs` argument")]


def test_parser_reads_escaped_pipes_and_rejects_bad_rows():
    text = (
        "## Setup\n```python\na = 1\n```\n## Table\n| # | input | exception | message |\n|---|---|---|---|\n"
        "| 1 | `a \\| 2` | TypeError | `x` |\n"
    )
    setup, rows = parse(text)
    assert setup == "a = 1\n" and rows == [("1", "a | 2", TypeError, "x")]
    with pytest.raises(AssertionError, match="unknown exception"):
        parse(text.replace("TypeError", "NoSuchError"))
    with pytest.raises(AssertionError, match="code span"):
        parse(text.replace("`a \\| 2`", "a"))
