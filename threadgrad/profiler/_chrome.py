"""``prof.export_chrome_trace(path)``: the timeline as Trace Event JSON.

The format is the one chrome://tracing and Perfetto read ("Trace Event Format", the JSON
object form): ``{"traceEvents": [...]}``. Each thread row is one ``tid`` named by a single
``thread_name`` metadata event (its role: caller, device worker, pool thread) and ordered by
``thread_sort_index``; every span is a complete event (``ph: "X"``, ``ts`` and ``dur`` in
microseconds); every hand-off is a flow, a ``"s"`` event inside the span that queued the
work and an ``"f"`` event bound to the span that ran it; with forward recording, each op is
linked to the backward node it recorded by a ``fwdbwd`` flow, as torch's traces do.
"""
from __future__ import annotations

import json
import os
from typing import Any

from ._recorder import CALL, NODE, OP, _Recorder

_CATEGORY = {NODE: "backward node", CALL: "backward call", OP: "forward op"}


def trace_events(rec: _Recorder) -> list[dict]:
    """The Trace Event list for a finished recording."""
    pid = os.getpid()
    start = rec.start

    def us(t: int) -> float:
        return (t - start) / 1000.0

    out: list[dict] = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "threadgrad"}}]
    rows = sorted(rec.rows, key=lambda r: r.sort_key())
    for order, r in enumerate(rows):
        tid = r.index + 1
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": r.role}})
        out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": order}})
    node_by_seq: dict[int, tuple] = {}
    for kind, row, name, t0, t1, task, depth, device, queued, seq in rec.events:
        args: dict[str, Any] = {"thread": row.thread_name}
        if device is not None:
            args["device"] = str(device)
        if task is not None:
            args["graph_task"] = task
            args["reentrant_depth"] = depth
        if queued is not None:
            args["queue_wait_us"] = (t0 - queued[1]) / 1000.0
        if seq is not None:
            args["sequence_nr"] = seq
        if kind == NODE and seq is not None:
            node_by_seq.setdefault(seq, (row, t0))
        out.append({"name": name, "cat": _CATEGORY[kind], "ph": "X", "ts": us(t0), "dur": (t1 - t0) / 1000.0,
                    "pid": pid, "tid": row.index + 1, "args": args})
    flow_id = 0
    for kind, src, ts, dst, td, at_span_start in rec.flows:
        flow_id += 1
        out.append({"name": kind, "cat": "handoff", "ph": "s", "id": flow_id, "ts": us(ts), "pid": pid,
                    "tid": src.index + 1})
        end = {"name": kind, "cat": "handoff", "ph": "f", "id": flow_id, "ts": us(td), "pid": pid,
               "tid": dst.index + 1}
        if at_span_start:
            end["bp"] = "e"  # bound to the span that encloses ts (the node, which starts there)
        out.append(end)
    linked: set = set()
    for kind, row, name, t0, t1, task, depth, device, queued, seq in rec.events:
        if kind != OP or seq is None or seq in linked or seq not in node_by_seq:
            continue
        linked.add(seq)  # the first op to return the node's output made it (inner ops return first)
        dst, td = node_by_seq[seq]
        flow_id += 1
        # ts just before the op's end: inside the op, after any op nested in it has returned
        out.append({"name": "fwdbwd", "cat": "fwdbwd", "ph": "s", "id": flow_id, "ts": us(t1 - 1),
                    "pid": pid, "tid": row.index + 1})
        out.append({"name": "fwdbwd", "cat": "fwdbwd", "ph": "f", "id": flow_id, "ts": us(td), "bp": "e",
                    "pid": pid, "tid": dst.index + 1})
    return out


def write_trace(rec: _Recorder, path: str) -> None:
    from .. import __version__

    with open(path, "w") as f:
        json.dump({"traceEvents": trace_events(rec), "displayTimeUnit": "ms",
                   "otherData": {"generator": f"threadgrad {__version__} profiler"}}, f)
