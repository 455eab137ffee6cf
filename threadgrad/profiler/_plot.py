"""``prof.plot(path)``: the timeline drawn with matplotlib, one lane per thread.

Each lane is a thread row (callers on top, then device workers, then pool threads). Backward
node runs are bars (``broken_barh``) coloured by the device of their gradients, labelled with
the node's name where the bar is wide enough; backward calls are thin bars under the
lane's nodes; forward ops (with ``record_forward``) are grey bars above them; every hand-off
between threads is an arrow from the moment the work was queued to the moment it started.
"""
from __future__ import annotations

from typing import Any

_DEVICE_COLOURS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]
_ARROW_COLOURS = {"device hand-off": "#C44E52", "pool hand-off": "#8172B3", "thread hand-off": "#55A868"}
_MAX_ARROWS = 400      # past this, arrows hide the bars (and matplotlib slows down): draw a sample
_MAX_LABELS = 200


def plot_timeline(prof: Any, path: str, title: str | None = None) -> None:
    try:
        # A Figure without pyplot: no backend chosen, no global state touched, no window.
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError("profile.plot() needs matplotlib: pip install 'threadgrad[viz]'") from e
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    events = prof.events()
    lanes = prof.threads()
    handoffs = prof.handoffs()
    lane_y = {name: len(lanes) - 1 - i for i, name in enumerate(lanes)}  # first lane on top
    devices = sorted({e.device for e in events if e.kind == "node" and e.device is not None},
                     key=lambda d: (d != "cpu", d))
    colour = {d: _DEVICE_COLOURS[i % len(_DEVICE_COLOURS)] for i, d in enumerate(devices)}
    end_us = max([e.start_us + e.duration_us for e in events] + [h.dst_us for h in handoffs] + [1.0])
    scale, unit = (1e-3, "ms") if end_us >= 2000 else (1.0, "us")

    fig_h = 1.2 + 0.9 * max(len(lanes), 1)
    fig = Figure(figsize=(13, fig_h), dpi=110)
    ax = fig.add_subplot()
    node_h, call_h, op_h = 0.5, 0.12, 0.18
    bars: dict[tuple, list] = {}
    labels: list = []
    op_labels: list = []
    for e in events:
        y = lane_y[e.thread]
        x, w = e.start_us * scale, max(e.duration_us * scale, end_us * scale / 4000)
        if e.kind == "node":
            bars.setdefault((y - node_h / 2, node_h, colour.get(e.device, "#4C72B0"), 1.0), []).append((x, w))
            labels.append((w, x, y, e.name))
        elif e.kind == "call":
            bars.setdefault((y - node_h / 2 - call_h - 0.03, call_h, "#333333", 0.6), []).append((x, w))
        else:
            bars.setdefault((y + node_h / 2 + 0.03, op_h, "#AAAAAA", 1.0), []).append((x, w))
            op_labels.append((w, x, y + node_h / 2 + 0.03 + op_h / 2, e.name))
    for (y0, h, c, alpha), xs in bars.items():
        ax.broken_barh(xs, (y0, h), facecolors=c, edgecolors="white", linewidth=0.3, alpha=alpha)
    span = end_us * scale
    labels.sort(reverse=True)
    for w, x, y, name in labels[:_MAX_LABELS]:
        if w < span * 0.06:
            break
        ax.text(x + w / 2, y, name, ha="center", va="center", fontsize=6.5, color="white", clip_on=True)
    op_labels.sort(reverse=True)
    for w, x, y, name in op_labels[:_MAX_LABELS]:
        if w < span * 0.04:
            break
        ax.text(x + w / 2, y, name, ha="center", va="center", fontsize=6, color="black", clip_on=True)
    step = max(1, len(handoffs) // _MAX_ARROWS)
    for h in handoffs[::step]:
        ax.annotate("", xy=(h.dst_us * scale, lane_y[h.dst_thread]), xytext=(h.src_us * scale, lane_y[h.src_thread]),
                    arrowprops=dict(arrowstyle="->", color=_ARROW_COLOURS.get(h.kind, "black"), lw=0.7,
                                    shrinkA=0, shrinkB=0, alpha=0.8))
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(list(reversed(lanes)))
    ax.set_ylim(-0.8, len(lanes) - 0.2)
    ax.set_xlim(0, span * 1.01)
    ax.set_xlabel(f"time since the profile started ({unit})")
    ax.grid(axis="x", alpha=0.3)
    handles: list = [Patch(color=colour[d], label=f"node on {d}") for d in devices]
    if any(e.kind == "call" for e in events):
        handles.append(Patch(color="#333333", alpha=0.6, label="backward call"))
    if any(e.kind == "op" for e in events):
        handles.append(Patch(color="#AAAAAA", label="forward op"))
    for kind in sorted({h.kind for h in handoffs}):
        handles.append(Line2D([0], [0], color=_ARROW_COLOURS.get(kind, "black"), lw=1, marker=">", label=kind))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    nodes = sum(1 for e in events if e.kind == "node")
    ax.set_title(title or f"threadgrad engine timeline: {nodes} node runs on {len(lanes)} threads, "
                          f"{len(handoffs)} hand-offs", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
