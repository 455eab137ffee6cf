"""One import name, ``threadgrad``, and the layering of its parts (ops -> engine -> devices).

``engine``, ``ops`` and ``devices`` are also the names of other PyPI distributions, and a bare
``import engine`` run from the checkout's root would load a second copy of every module (two
``Tensor`` classes): nothing of ours may import them under those names.
"""
from __future__ import annotations

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PARTS = ("engine", "ops", "devices")
BARE = re.compile(r"^\s*(?:>>> |\.\.\. )?(?:import\s+(?:engine|ops|devices)\b|from\s+(?:engine|ops|devices)\b[\w.]*\s+import)")
# The modules of engine/ built from ops: they sit above it (docs/architecture.md's dependency direction).
ABOVE_OPS = {"function.py", "checkpoint.py"}


def _text_files() -> list[pathlib.Path]:
    # (virtual environments: .venv, and .venv-ft of .ci/run's free-threaded leg, hold other projects' files)
    skip = {".git", "build", "dist", "site", "__pycache__"}
    return [p for p in ROOT.rglob("*") if p.suffix in (".py", ".md", ".toml") and p.is_file()
            and not skip.intersection(parts := p.relative_to(ROOT).parts)
            and not any(part.startswith(".venv") for part in parts) and not p.name.endswith(".egg-info")]


def test_nothing_imports_the_bare_part_names():
    """Code, doctests, subprocess scripts in strings, docs and examples all import through
    threadgrad (a line-based scan, so code inside strings and Markdown is covered too)."""
    offenders = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
                 for p in _text_files() for i, line in enumerate(p.read_text().splitlines(), 1)
                 if BARE.match(line)]
    assert not offenders, "bare imports of engine/ops/devices:\n" + "\n".join(offenders)


def test_the_scan_sees_each_form():
    for line in ("import engine", "import ops, numpy", ">>> import devices", "from engine.tensor import Tensor",
                 "    from ops import tanh", "import engine.executor as ex"):
        assert BARE.match(line), line
    for line in ("from threadgrad import engine", "from ..engine.tensor import Tensor", "import engineering",
                 "from .ops import x", "import opsy"):
        assert not BARE.match(line), line


def _imports(path: pathlib.Path) -> tuple[set[str], set[str]]:
    """(parts, siblings): the parts (engine, ops, devices) a module of the package imports from
    outside its own part, and the modules of its own part it imports (``from .x import``)."""
    parts, siblings = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 1:
                siblings.update([mod.split(".")[0]] if mod else [a.name for a in node.names])
            elif node.level == 2:
                parts.update([mod.split(".")[0]] if mod else [a.name for a in node.names])
            elif mod.split(".")[0] == "threadgrad":
                rest = mod.split(".")[1:]
                parts.update(rest[:1] if rest else [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            for a in node.names:
                bits = a.name.split(".")
                if bits[0] == "threadgrad" and len(bits) > 1:
                    parts.add(bits[1])
    return parts & set(PARTS), siblings


def test_engine_core_imports_no_ops_and_devices_imports_neither():
    """The engine modules that reach ops, directly or through a sibling, are exactly the
    declared upper layer; the package's __init__ (part of the core) imports none of them."""
    modules = {p.stem: _imports(p) for p in (ROOT / "engine").glob("*.py")}
    assert len(modules) >= 12
    reach = {name for name, (parts, _) in modules.items() if "ops" in parts}
    grew = True
    while grew:
        more = {name for name, (_, sib) in modules.items() if sib & reach} - reach
        reach |= more
        grew = bool(more)
    assert reach == {n.removesuffix(".py") for n in ABOVE_OPS}, f"engine modules that import ops: {sorted(reach)}"
    for p in (ROOT / "devices").glob("*.py"):
        assert not _imports(p)[0] & {"engine", "ops"}, f"devices/{p.name} imports from above"


def test_import_threadgrad_from_the_checkout_loads_no_bare_part(tmp_path):
    """From the checkout's root (where ``engine/`` is on sys.path as a folder), importing every
    module of threadgrad brings in no module named engine, ops or devices."""
    script = (
        "import pkgutil, sys\n"
        "import threadgrad as tg\n"
        "from threadgrad import devices, engine, ops\n"
        "for part in (devices, engine, ops):\n"
        "    for m in pkgutil.walk_packages(part.__path__, part.__name__ + '.'):\n"
        "        if m.name != 'threadgrad.devices.cuda':\n"
        "            __import__(m.name)\n"
        "bare = sorted(n for n in sys.modules if n.split('.')[0] in ('engine', 'ops', 'devices'))\n"
        "assert not bare, bare\n"
        "assert engine.Function.__module__ == 'threadgrad.engine.function'\n"
        "assert callable(engine.checkpoint) and issubclass(engine.CheckpointError, RuntimeError)\n"
        "assert tg.engine is engine and tg.ops is ops and tg.devices is devices and tg.__version__\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# The README's first example, as a user of the installed wheel runs it.
README_SNIPPET = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)


def _setuptools_can_build() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 77  # the SPDX license string


@pytest.mark.timeout(300)
@pytest.mark.skipif(not _setuptools_can_build(), reason="needs setuptools >= 77 in this environment to build offline")
def test_the_wheel_holds_only_threadgrad_and_survives_another_ops(tmp_path):
    """The built wheel has one top-level package; installed beside another distribution's
    ``ops`` (a stand-in here: PyPI's ``ops`` is Canonical's charm library), threadgrad still
    runs, ``import engine`` fails and ``import ops`` gives the other one."""
    src = tmp_path / "src"  # a copy: an in-tree build would leave (and reuse) build/ in the checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy(ROOT / name, src / name)
    for part in ("threadgrad",) + PARTS:
        shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(wheels), str(src)], capture_output=True, text=True, timeout=240)
    assert build.returncode == 0, build.stderr
    (wheel,) = wheels.glob("threadgrad-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        top = {name.split("/")[0] for name in zf.namelist()}
        assert {n for n in top if not n.endswith(".dist-info")} == {"threadgrad"}, top
        assert {"threadgrad/engine/executor.py", "threadgrad/ops/elementwise.py",
                "threadgrad/devices/__init__.py", "threadgrad/profiler/_chrome.py", "threadgrad/viz.py",
                "threadgrad/py.typed", "threadgrad/optim/adam.py", "threadgrad/nn/functional.py",
                "threadgrad/utils/checkpoint.py", "threadgrad/autograd/graph.py",
                "threadgrad/distributed/ddp.py"} <= set(zf.namelist())
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = zf.read(meta).decode()
        assert "License-Expression: MIT" in metadata and "Requires-Python: >=3.10" in metadata
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in zf.namelist())
        site = tmp_path / "site"
        zf.extractall(site)
    other = tmp_path / "other"
    (other / "ops").mkdir(parents=True)
    (other / "ops" / "__init__.py").write_text("WHO = 'the other ops'\n")
    script = README_SNIPPET + (
        "import threadgrad, ops\n"
        f"assert threadgrad.__file__.startswith({str(site)!r}), threadgrad.__file__\n"
        "assert ops.WHO == 'the other ops'\n"
        "try:\n    import engine\nexcept ImportError:\n    print('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(other)]))
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["(10,", "784)", "ok"]  # the README's print, then ours
