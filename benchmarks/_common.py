"""Helpers shared by the benchmark scripts: timing, graph counting, Markdown output.

Not part of the installed package. Importing this module makes ``import threadgrad`` load the
threadgrad of this checkout (or of the tree named by ``THREADGRAD_TREE``, as instructions.py's
children do), whatever is installed, so the scripts measure the code beside them and run from a
checkout without ``pip install -e .``.
"""
from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import platform
import statistics
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def profile_top(stats: Any, top: int) -> Iterable[tuple]:
    """``(where, ncalls, own s, cumulative s)`` of the ``top`` functions of a pstats.Stats by
    own time, ``where`` as ``path:line name`` with paths relative to the repository."""
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]
    for (path, line, name), (_, ncalls, tottime, cumtime, _) in rows:
        where = path.replace(ROOT + "/", "") if path.startswith(ROOT) else path.rsplit("/", 1)[-1]
        yield f"{where}:{line} {name}", ncalls, tottime, cumtime
RESULTS_DIR = os.path.join(ROOT, "benchmarks", "results")



def use_tree(root: str) -> None:
    """Make ``import threadgrad`` load the checkout at ``root``. Its parts are folders at the root
    (installed as subpackages through ``package-dir``), so the package's search path lists both
    ``root/threadgrad`` and ``root``. A revision from before the threadgrad package (its parts were
    top-level packages) is given a stand-in ``threadgrad`` holding them, for ``--against`` runs."""
    if "threadgrad" in sys.modules:
        raise RuntimeError("use_tree must run before threadgrad is imported")
    init = os.path.join(root, "threadgrad", "__init__.py")
    if os.path.isfile(init):
        spec = importlib.util.spec_from_file_location(
            "threadgrad", init, submodule_search_locations=[os.path.dirname(init), root])
        module = importlib.util.module_from_spec(spec)
        sys.modules["threadgrad"] = module
        spec.loader.exec_module(module)
        return
    sys.path.insert(0, root)
    stand_in = types.ModuleType("threadgrad")
    for part in ("devices", "engine", "ops"):
        setattr(stand_in, part, importlib.import_module(part))
        sys.modules[f"threadgrad.{part}"] = getattr(stand_in, part)
    sys.modules["threadgrad"] = stand_in


use_tree(os.environ.get("THREADGRAD_TREE", ROOT))


def try_import_torch() -> Any:
    """``torch`` when it is importable, else None (torch is optional for every benchmark)."""
    try:
        import torch  # noqa: PLC0415
    except Exception:  # ImportError, or a broken install: just omit the torch column
        return None
    return torch


class gc_paused:
    """Context manager: collect once, then keep the cyclic GC off while timing."""

    def __enter__(self) -> None:
        self._was = gc.isenabled()
        gc.collect()
        gc.disable()

    def __exit__(self, *exc: Any) -> None:
        if self._was:
            gc.enable()


def median(xs: Iterable[float]) -> float:
    return statistics.median(list(xs))


def _calibrate(fn: Callable[[], Any], target_s: float) -> int:
    """How many calls of ``fn`` take about ``target_s``."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= target_s / 4 or n >= 1 << 24:
            break
        n *= 4
    return max(1, int(n * target_s / max(dt, 1e-9)))


def per_call_us(fns: dict[str, Callable[[], Any]], repeats: int, target_s: float = 0.03) -> dict[str, float]:
    """Median per-call time (µs) of each function over ``repeats`` samples of ~target_s each.

    The functions are interleaved within each repeat, so a burst of machine noise hits all
    of them alike instead of skewing one.
    """
    return {k: median(v) for k, v in per_call_samples_us(fns, repeats, target_s).items()}


def per_call_samples_us(fns: dict[str, Callable[[], Any]], repeats: int,
                        target_s: float = 0.03) -> dict[str, list[float]]:
    """What :func:`per_call_us` takes the median of: each function's per-call µs in every repeat,
    for ratios or differences of samples taken back to back."""
    counts = {k: _calibrate(fn, target_s) for k, fn in fns.items()}
    samples: dict[str, list[float]] = {k: [] for k in fns}
    with gc_paused():
        for _ in range(repeats):
            for k, fn in fns.items():
                n = counts[k]
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                samples[k].append((time.perf_counter() - t0) / n * 1e6)
    return samples


def count_nodes(root: Any) -> int:
    """Nodes reachable from ``root`` through ``next_functions`` (root included).

    Works for threadgrad's Node and torch's autograd nodes alike, so both sides of a
    comparison count the same things (op nodes, the final sum, AccumulateGrad).
    """
    seen = {root}
    stack = [root]
    while stack:
        fn = stack.pop()
        for nxt, _ in fn.next_functions:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return len(seen)


def fmt(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "–"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits}f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep] + [line(r) for r in rows])


def machine_summary() -> str:
    import numpy

    parts = [
        f"Python {platform.python_version()}",
        f"numpy {numpy.__version__}",
        f"{platform.machine()}, {os.cpu_count()} logical CPUs",
    ]
    return ", ".join(parts)


def write_result(name: str, text: str) -> str:
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def load_average() -> str:
    """The 1-minute load average, for the report (other processes skew timings)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


# --- result tables (run_all.py) ------------------------------------------------------------

@dataclass
class Row:
    """One measurement: a value per column (None: not measured), a target and whether it is met.

    ``ratio`` is threadgrad / torch; when left None it is computed from the ``threadgrad``
    and ``torch`` values. ``met`` is None for rows that only inform (no target).
    """

    label: str
    values: dict[str, float | None]
    target: str = ""
    met: bool | None = None
    ratio: float | None = None
    digits: int = 2
    show_ratio: bool = True

    def ratio_to_torch(self) -> float | None:
        if not self.show_ratio:
            return None
        if self.ratio is not None:
            return self.ratio
        ours, torch = self.values.get("threadgrad"), self.values.get("torch")
        if ours is None or torch is None or torch == 0:
            return None
        return ours / torch


@dataclass
class Table:
    """One workload's Markdown table plus the notes printed under it."""

    key: str
    title: str
    columns: list[str]
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ratio_header: str = "ours/torch"
    plain: bool = False  # only the value columns: no ratio, target or met?
    headers: dict[str, str] = field(default_factory=dict)  # a column's header, where not its key

    def markdown(self) -> str:
        header = ["measurement", *[self.headers.get(c, c) for c in self.columns], self.ratio_header, "target", "met?"]
        body = []
        if self.plain:
            header = header[: 1 + len(self.columns)]
            body = [[r.label, *[fmt(r.values.get(c), r.digits) for c in self.columns]] for r in self.rows]
        for r in [] if self.plain else self.rows:
            ratio = r.ratio_to_torch()
            met = "–" if r.met is None else ("**met**" if r.met else "**not met**")
            body.append([r.label, *[fmt(r.values.get(c), r.digits) for c in self.columns],
                         "–" if ratio is None else f"{ratio:.2f}x", r.target or "–", met])
        parts = [f"### {self.title}", "", markdown_table(header, body)]
        if self.notes:
            parts += ["", *[f"- {n}" for n in self.notes]]
        return "\n".join(parts) + "\n"
