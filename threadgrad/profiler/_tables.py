"""``prof.key_averages()``: recorded spans grouped by name, and their table (torch's layout)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

# torch's sort keys, and ours
_SORT_KEYS = {
    "total": "total_us", "cpu_time_total": "total_us", "self": "self_us", "self_cpu_time_total": "self_us",
    "count": "count", "avg": "avg_us", "cpu_time": "avg_us", "max": "max_us", "wait": "wait_us",
}


@dataclass
class Average:
    """The spans of one name: ``kind`` ``"node"`` or ``"op"``; times in microseconds.
    ``self_us`` leaves out the spans nested inside (a reentrant backward's nodes inside the
    node that started it, an op's inner ops); ``wait_us`` is the mean time queued."""

    name: str
    kind: str
    count: int = 0
    total_us: float = 0.0
    self_us: float = 0.0
    max_us: float = 0.0
    wait_total_us: float = 0.0
    waits: int = 0
    threads: set = field(default_factory=set)

    @property
    def avg_us(self) -> float:
        return self.total_us / self.count if self.count else 0.0

    @property
    def wait_us(self) -> float:
        return self.wait_total_us / self.waits if self.waits else 0.0


class KeyAverages(list):
    """A list of :class:`Average`, heaviest first; ``table()`` formats it."""

    def table(self, sort_by: str = "total", row_limit: int = 20) -> str:
        """The rows as text, sorted by ``sort_by`` (``"total"``, ``"self"``, ``"count"``,
        ``"avg"``, ``"max"``, ``"wait"``, or torch's ``"cpu_time_total"``,
        ``"self_cpu_time_total"``), at most ``row_limit`` of them (-1: all)."""
        try:
            attr = _SORT_KEYS[sort_by]
        except KeyError:
            raise ValueError(f"key_averages().table(): unknown sort_by {sort_by!r}; expected one of "
                             f"{', '.join(sorted(_SORT_KEYS))}") from None
        rows = sorted(self, key=lambda a: getattr(a, attr), reverse=True)
        if row_limit >= 0:
            rows = rows[:row_limit]
        head = ["Name", "Kind", "Self", "Self %", "Total", "Total %", "Avg", "Max", "Queue wait", "# of Calls", "Threads"]
        grand_self = sum(a.self_us for a in self) or 1.0
        grand_total = sum(a.total_us for a in self if a.kind == "node") or 1.0
        body = [[a.name, a.kind, _fmt(a.self_us), f"{100 * a.self_us / grand_self:.2f}%", _fmt(a.total_us),
                 f"{100 * a.total_us / grand_total:.2f}%" if a.kind == "node" else "-",
                 _fmt(a.avg_us), _fmt(a.max_us), _fmt(a.wait_us) if a.waits else "-", str(a.count),
                 str(len(a.threads))] for a in rows]
        widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
        line = "  ".join("-" * w for w in widths)

        def fmt_row(r: list) -> str:
            return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

        out = [line, fmt_row(head), line, *(fmt_row(r) for r in body), line,
               f"Self time total: {_fmt(sum(a.self_us for a in self))}"]
        return "\n".join(out)

    def __str__(self) -> str:
        return self.table()


def _fmt(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def key_averages(events: Iterable[Any]) -> KeyAverages:
    """Group node and op events by (name, kind); self time from their nesting per thread."""
    spans = [e for e in events if e.kind in ("node", "op")]
    self_time = {id(e): e.duration_us for e in spans}
    by_thread: dict[str, list] = {}
    for e in spans:
        by_thread.setdefault(e.thread, []).append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e.start_us, -e.duration_us))
        stack: list = []  # open spans, innermost last (an explicit stack: no recursion)
        for e in evs:
            end = e.start_us + e.duration_us
            while stack and stack[-1][1] <= e.start_us:  # spans that ended before e began
                stack.pop()
            if stack:
                self_time[id(stack[-1][0])] -= e.duration_us
            stack.append((e, end))
    groups: dict[tuple, Average] = {}
    for e in spans:
        a = groups.get((e.name, e.kind))
        if a is None:
            a = groups[(e.name, e.kind)] = Average(e.name, e.kind)
        a.count += 1
        a.total_us += e.duration_us
        a.self_us += max(self_time[id(e)], 0.0)
        a.max_us = max(a.max_us, e.duration_us)
        if e.wait_us is not None:
            a.wait_total_us += e.wait_us
            a.waits += 1
        a.threads.add(e.thread)
    return KeyAverages(sorted(groups.values(), key=lambda a: a.total_us, reverse=True))
