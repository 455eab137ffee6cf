"""MkDocs hook: give mkdocstrings the installed package layout of threadgrad.

The package's parts live in root folders (engine/, ops/, devices/) that pyproject.toml's
package-dir maps to threadgrad.engine, threadgrad.ops and threadgrad.devices. mkdocstrings
(griffe) reads source by the import layout, so before each build this makes
build/docs-src/threadgrad/: links to threadgrad/'s own files and to the three part folders,
the tree a wheel installs. mkdocs.yml points the python handler there. Also the griffe
extension that fences docstring examples.
"""
from __future__ import annotations

import os
import re
import pathlib
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent
SRC = ROOT / "build" / "docs-src"
PARTS = ("engine", "ops", "devices")


def lay_out() -> None:
    """Make the links that are missing (idempotent: mkdocs and griffe both import this file)."""
    pkg = SRC / "threadgrad"
    pkg.mkdir(parents=True, exist_ok=True)
    targets = {e.name: e for e in (ROOT / "threadgrad").iterdir() if e.name != "__pycache__"}
    targets.update({part: ROOT / part for part in PARTS})
    for link in pkg.iterdir():
        if link.name not in targets:  # a file removed from threadgrad/ since the last build
            link.unlink()
    for name, target in targets.items():
        if not (pkg / name).is_symlink():
            os.symlink(target, pkg / name)


# At import, while MkDocs loads mkdocs.yml: before mkdocstrings sets up its search paths (a
# path that does not exist then is not searched).
lay_out()


class DoctestFences:
    """A griffe extension (mkdocs.yml: python handler ``extensions``): each run of ``>>>``
    example lines in a docstring, with the output lines after it, becomes a fenced ``pycon``
    block, so Markdown shows it as code (unfenced, ``[...]`` in an output reads as a link);
    reST roles become code spans."""

    def __init__(self, **kwargs: Any) -> None:
        pass

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        doc = getattr(obj, "docstring", None)
        if doc is None:
            return
        if ">>>" in doc.value:
            doc.value = fence_doctests(doc.value)
        if ":`" in doc.value:  # reST roles (:func:`name`) as Markdown code spans
            doc.value = _ROLE.sub(r"`\1`", doc.value)


_ROLE = re.compile(r":(?:func|class|meth|data|attr|mod|exc|obj):`~?([^`]+)`")


def fence_doctests(text: str) -> str:
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        stripped = line.strip()
        if not inside and stripped.startswith(">>>"):
            out.append("```pycon")
            inside = True
        elif inside and not stripped:
            out.append("```")
            inside = False
        out.append(line.strip() if inside else line)
    if inside:
        out.append("```")
    return "\n".join(out)
