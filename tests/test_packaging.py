"""Release quality: license metadata, README links that work on a package index page, an
sdist that carries what its tests need, and a wheel with py.typed and the license."""
from __future__ import annotations

import pathlib
import re
import shutil
import tarfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BASE = "https://github.com/threadgrad/threadgrad"
SKIP_PARTS = {"__pycache__", "results", ".hypothesis", ".pytest_cache"}


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_license_is_an_spdx_string_matching_the_license_file():
    meta = _pyproject()
    assert meta["project"]["license"] == "MIT"
    assert meta["project"]["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Permission is hereby granted, free of charge" in text
    # an SPDX string needs setuptools 77 to build; the test extra builds offline with it too
    assert "setuptools>=77" in meta["build-system"]["requires"]
    assert "setuptools>=77" in meta["project"]["optional-dependencies"]["test"]
    assert not any(c.startswith("License ::") for c in meta["project"]["classifiers"])  # PEP 639: not both


def test_metadata_a_package_index_shows():
    project = _pyproject()["project"]
    assert project["requires-python"] == ">=3.10" and project["authors"]
    assert {"Homepage", "Source", "Issues", "Documentation"} <= set(project["urls"])
    assert "Typing :: Typed" in project["classifiers"]
    versions = {c.rsplit(" ", 1)[-1] for c in project["classifiers"] if c.startswith("Programming Language :: Python :: 3.")}
    assert versions == {"3.10", "3.11", "3.12", "3.13"}
    assert (ROOT / "threadgrad" / "py.typed").is_file()
    packages = _pyproject()["tool"]["setuptools"]["packages"]
    on_disk = {"threadgrad." + p.parent.name for p in (ROOT / "threadgrad").glob("*/__init__.py")}
    assert on_disk <= set(packages), "a subpackage of threadgrad/ is missing from [tool.setuptools] packages"


def test_readme_links_are_absolute_and_point_at_files_that_exist():
    """A package index page shows README.md without the repository around it: relative links
    break there. Every link is absolute; those into the repository name files it has."""
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    assert links
    for link in links:
        assert link.startswith(("https://", "http://")), f"relative link in README.md: {link}"
        for kind in ("blob", "tree"):
            prefix = f"{BASE}/{kind}/main/"
            if link.startswith(prefix):
                assert (ROOT / link[len(prefix):].split("#")[0]).exists(), link


def _copy_source(dst: pathlib.Path) -> None:
    """The files an sdist is built from (a copy: an in-tree build leaves egg-info behind)."""
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy(ROOT / name, dst / name)
    for part in ("threadgrad", "engine", "ops", "devices", "tests", "docs", "examples", "benchmarks"):
        shutil.copytree(ROOT / part, dst / part, ignore=shutil.ignore_patterns(*SKIP_PARTS))


@pytest.mark.timeout(300)
def test_the_sdist_carries_what_its_tests_need(tmp_path):
    pytest.importorskip("setuptools", minversion="77")
    from setuptools import build_meta

    src = tmp_path / "src"
    src.mkdir()
    _copy_source(src)
    out = tmp_path / "dist"
    out.mkdir()
    import os

    cwd = os.getcwd()
    try:
        os.chdir(src)
        name = build_meta.build_sdist(str(out))
    finally:
        os.chdir(cwd)
    with tarfile.open(out / name) as tf:
        members = {m.split("/", 1)[1] for m in tf.getnames() if "/" in m}
    expected = {str(p.relative_to(ROOT)) for part in ("threadgrad", "engine", "ops", "devices", "tests", "docs",
                                                       "examples", "benchmarks")
                for p in (ROOT / part).rglob("*")
                if p.is_file() and not SKIP_PARTS & set(p.relative_to(ROOT).parts) and p.suffix != ".pyc"}
    assert {"LICENSE", "README.md", "pyproject.toml", "threadgrad/py.typed"} <= members
    missing = sorted(expected - members)
    assert not missing, f"the sdist lacks {missing[:10]}"
    assert not [m for m in members if "__pycache__" in m or m.startswith("benchmarks/results")]
