"""Citations in the code and the docs resolve inside the repository.

1. Every Note cited (``See Note [Errors]``, ``Notes [Completion], [Shared tasks]``, a row of
   docs/architecture.md's table of Notes) is defined: a line ``Note [<title>]`` with a line of
   ``~~~~`` under it (engine/executor.py's docstring shows the form). A citation that names
   its file right after the title (``Note [Errors] in engine/executor.py``, ``(_state.py)``
   from a module beside it, ``, engine/graph_task.py``, the next cell of a table) must find the Note in
   that file.
2. Every repository file cited by its path (``docs/performance.md``, ``benchmarks/gpu.py``,
   ``tests/devices/fake_cupy.py``, a capitalised top-level page such as README.md) exists. A
   page kept outside the repository cannot be read by whoever reads the repository: cite what
   in it says the same thing (docs/architecture.md, a Note), or say it in place.
3. Every block of code a page quotes (``<!-- quoted from ops/nn.py -->`` over the fence) is
   still in the file it names.

A renamed Note, a moved file or changed quoted code fails here, each broken citation listed
as file:line.
"""
from __future__ import annotations

import functools
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PARTS = ("engine", "ops", "devices", "threadgrad", "benchmarks", "examples", "tests", "docs")
# Root files: the sdist carries README.md and pyproject.toml; the rest only a checkout has.
ROOT_FILES = ("README.md", "pyproject.toml", "mkdocs.yml", "mkdocs_hooks.py", "MANIFEST.in", ".ci/run")
SKIP = {".venv", "build", "site", ".git", "__pycache__", "results", ".hypothesis", ".pytest_cache"}
# Written by the benchmarks and git-ignored: cited as where a run's output goes.
OUTPUTS = ("benchmarks/results/",)

DEFINITION = re.compile(r"^[ \t#]*Note \[([^\]\n]+)\][ \t]*\n[ \t#]*~{4,}[ \t]*$", re.M)
# The start of a line a citation may continue on: a comment's #, a diagram's bar, a quote.
PREFIX = re.compile(r"^[ \t]*(?:#+|│|>+)?", re.M)
FILE = r"(?:``|`)?([\w./-]+\.(?:py|md))"
# "Note [<title>]", optionally with the file it is read in right after it: "in <file>",
# "(<file>", ", <file>" or, in a Markdown table, "| <file>".
NOTE = re.compile(r"\bNote\s+\[([^\]]+)\](?:(?:\s+in\s+|\s*\|\s*|\s*\(\s*|,\s*)" + FILE + r")?")
# "Notes [A], [B] and [C]", optionally "in <file>".
NOTES = re.compile(r"\bNotes\s+((?:\[[^\]]+\](?:\s*,\s*(?:and\s+)?|\s+and\s+)?)+)(?:\s*in\s+" + FILE + r")?")
TITLE = re.compile(r"\[([^\]]+)\]")
# Note [X], Note [...], Note [<title>], an f-string's Note [{title}]: the form, not a Note.
PLACEHOLDER = re.compile(r"^(?:[A-Z]|\.\.\.|<[^>]*>|\{[^}]*\})$")

_TOP = "|".join(re.escape(p) for p in PARTS + (".ci",))
# A file in one of the repository's folders (with its suffix, or a glob; a folder with its
# trailing /), a capitalised top-level page (README.md) or a root file. Not a bare name
# (benchmarks write report.md into results/), not "engine/ops/devices" (three folders).
PATH = re.compile(
    r"(?<![\w./<>{-])("
    rf"(?:{_TOP})/(?:[\w*-]+/)*(?:[\w*-]*\.[A-Za-z*]+|[\w*-]+/)"
    r"|[A-Z][A-Z0-9_]*\.md|pyproject\.toml|mkdocs\.yml|mkdocs_hooks\.py|MANIFEST\.in"
    r")(?![\w{<])"
)
# A placeholder, not a file: examples/NAME.py.
PATH_PLACEHOLDER = re.compile(r"(?:^|/)NAME(?:\.\w+)?$")


def _sources() -> list[pathlib.Path]:
    files = [ROOT / name for name in ROOT_FILES if (ROOT / name).is_file()]
    for part in PARTS:
        files += sorted(p for p in (ROOT / part).rglob("*")
                        if p.suffix in (".py", ".md") and p.is_file()
                        and not SKIP & set(p.relative_to(ROOT).parts))
    return files


@functools.cache  # read once for both tests
def _texts() -> dict[str, str]:
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in _sources()}


def _rel(path: pathlib.Path) -> str | None:
    """``path`` relative to the root, or None when it leaves the repository."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None


def _candidates(citing: str, cited: str) -> list[str]:
    """The repository files ``cited`` may name from ``citing``: beside it, from the root, in
    docs/ (a page named bare), or in the installed layout (a wheel's threadgrad/engine/graph.py
    is engine/graph.py)."""
    here = (ROOT / citing).parent
    paths = [here / cited, ROOT / cited, ROOT / "docs" / cited]
    head, _, rest = cited.partition("/")
    sub, _, tail = rest.partition("/")
    if head == "threadgrad" and sub in ("engine", "ops", "devices") and tail:
        paths.append(ROOT / sub / tail)
    return [r for r in (_rel(p) for p in paths) if r is not None]


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _note_citations(texts: dict[str, str]):
    """(citing file, line, title, file named or None) for every Note cited."""
    for name, text in texts.items():
        flat = PREFIX.sub(lambda m: " " * len(m.group(0)), text)  # same offsets, same lines
        for m in NOTE.finditer(flat):
            yield name, _line(text, m.start()), " ".join(m.group(1).split()), m.group(2)
        for m in NOTES.finditer(flat):
            for title in TITLE.findall(m.group(1)):
                yield name, _line(text, m.start()), " ".join(title.split()), m.group(2)


def test_every_cited_note_is_defined_where_the_citation_says():
    texts = _texts()
    defined: dict[str, set[str]] = {}
    for name, text in texts.items():
        for m in DEFINITION.finditer(text):
            defined.setdefault(m.group(1), set()).add(name)
    assert len(defined) > 40, sorted(defined)  # the scan sees the Notes at all

    broken = []
    for citing, line, title, cited in _note_citations(texts):
        if PLACEHOLDER.match(title):
            continue
        homes = defined.get(title)
        if not homes:
            broken.append(f"{citing}:{line}: Note [{title}] is defined nowhere")
        elif cited and not homes & set(_candidates(citing, cited)):
            broken.append(f"{citing}:{line}: Note [{title}] is not in {cited}; it is in {', '.join(sorted(homes))}")
    assert not broken, "broken Note citations:\n" + "\n".join(broken)


def test_every_cited_repository_file_exists():
    in_checkout = (ROOT / ".git").exists()  # an sdist leaves mkdocs.yml and .ci/ out
    broken = []
    for citing, text in _texts().items():
        for m in PATH.finditer(text):
            cited = m.group(1)
            if (cited.startswith(OUTPUTS) or PATH_PLACEHOLDER.search(cited)
                    or (not in_checkout and cited.startswith(ROOT_FILES[2:]))):
                continue
            found = False
            for candidate in _candidates(citing, cited):
                if "*" in cited:
                    found = any(ROOT.glob(candidate))
                else:
                    found = (ROOT / candidate).exists()
                if found:
                    break
            if not found:
                broken.append(f"{citing}:{_line(text, m.start())}: {cited}")
    assert not broken, "cited files not in the repository:\n" + "\n".join(broken)


# A page quotes code as "<!-- quoted from ops/nn.py -->" over a fenced block; "# ..." lines
# in the block mark what was left out between the parts.
QUOTE = re.compile(r"^<!-- quoted from ([\w./-]+) -->\n```\w*\n(.*?)^```", re.M | re.S)


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _contains(lines: list[str], part: list[str]) -> bool:
    n = len(part)
    return any(lines[i:i + n] == part for i in range(len(lines) - n + 1))


def test_every_quoted_block_is_in_the_file_it_quotes():
    broken, quotes = [], 0
    for citing, text in _texts().items():
        if not citing.endswith(".md"):
            continue
        for m in QUOTE.finditer(text):
            quotes += 1
            source = ROOT / m.group(1)
            where = f"{citing}:{_line(text, m.start())}"
            if not source.is_file():
                broken.append(f"{where}: quotes {m.group(1)}, which is not in the repository")
                continue
            lines = _lines(source.read_text(encoding="utf-8"))
            for part in re.split(r"^[ \t]*# \.\.\.[ \t]*$", m.group(2), flags=re.M):
                part = _lines(part)
                if part and not _contains(lines, part):
                    broken.append(f"{where}: not in {m.group(1)} as quoted, from: {part[0]}")
    assert quotes, "no quoted blocks found (docs/contributing.md has several)"
    assert not broken, "quoted code that its file no longer holds:\n" + "\n".join(broken)
