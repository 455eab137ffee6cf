"""Every ```python block in README.md and docs/*.md runs (blocks of one file share a namespace)."""
from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


# The optional extras' modules (pyproject's viz, examples, distributed, cuda): a page whose blocks
# need one that is not installed is skipped, not failed (CI installs every extra but cuda).
EXTRAS = {"graphviz", "matplotlib", "sklearn", "tqdm", "mpi4py", "cupy"}


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
@pytest.mark.timeout(120)
def test_python_blocks_run(page: pathlib.Path) -> None:
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for i, block in enumerate(BLOCK.findall(page.read_text())):
        code = compile(block, f"{page.name}[block {i}]", "exec")
        try:
            exec(code, namespace)  # noqa: S102 - the docs are ours
        except ImportError as e:  # (threadgrad re-raises a missing extra with its pip line)
            missing = e if isinstance(e, ModuleNotFoundError) else e.__cause__
            name = getattr(missing, "name", None) or ""
            if name.split(".")[0] not in EXTRAS:
                raise
            pytest.skip(f"{page.name}[block {i}] needs the optional {name!r}, not installed")
