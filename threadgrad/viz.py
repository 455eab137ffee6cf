"""Draw the backward graph of a tensor: ``make_dot(y)`` (torchviz's shape), through the
``graphviz`` Python package (the ``viz`` extra).

Each backward node is a box named as ``Node.name()`` gives, filled with its device's colour;
a leaf that requires grad is drawn as its ``AccumulateGrad`` node plus a light blue box with
its shape and dtype (and its name, bold, when it is one of ``params``); the tensors drawn
from are green boxes; with ``show_saved=True``, each value a node saved for backward is an
orange box (shape, dtype, device) joined to it by a dashed edge. Edges go the way the forward
ran (an op's inputs point at it). The walk is iterative (nothing in threadgrad recurses over
the graph, so any depth draws), and stops with ValueError past ``max_nodes``.

``make_dot`` returns a ``graphviz.Digraph``: its ``.source`` is the DOT text (no Graphviz
program needed); ``.render(...)`` / ``.pipe(...)`` need Graphviz's ``dot`` (Debian's
``graphviz`` package).

>>> from threadgrad import engine, ops, viz
>>> w = engine.randn(3, 2, requires_grad=True)
>>> x = engine.randn(4, 2)
>>> dot = viz.make_dot(ops.tanh(x @ w.T).sum(), params={"w": w})
>>> [name for name in ("SumBackward0", "TanhBackward0", "MmBackward0", "AccumulateGrad") if name in dot.source]
['SumBackward0', 'TanhBackward0', 'MmBackward0', 'AccumulateGrad']
>>> 'label="w\\n(3, 2): float32"' in dot.source  # the named parameter, with its shape and dtype
True
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .engine.graph import AccumulateGrad, Node
from .engine.tensor import Tensor

__all__ = ["make_dot", "DEFAULT_MAX_NODES"]

# Graphviz lays out a few thousand nodes in seconds and a hundred thousand in hours: past this
# a drawing is more useful of a part of the graph (make_dot of an intermediate tensor).
DEFAULT_MAX_NODES = 5000

# Fill colour of a node by the device of its gradients: cpu grey, then one hue per device.
_CPU_COLOUR = "#E8E8E8"
_DEVICE_COLOURS = ["#C9A0DC", "#FFD966", "#8FD3C9", "#F8CBAD", "#B4C7E7", "#A9D18E", "#D0CECE", "#F4B183"]


def _colour(device: Any, palette: dict) -> str:
    if device is None or str(device) == "cpu":
        return _CPU_COLOUR
    key = str(device)
    if key not in palette:
        palette[key] = _DEVICE_COLOURS[len(palette) % len(_DEVICE_COLOURS)]
    return palette[key]


def _shape(shape: tuple) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _describe(t: Tensor) -> str:
    return f"{_shape(t.shape)}: {t.dtype}" + ("" if str(t.device) == "cpu" else f" on {t.device}")


def _own_device(node: Node) -> Any:
    """The device of ``node``'s gradients where the node itself tells it, else None."""
    if type(node) is AccumulateGrad:
        return node.variable.device
    if node.stream is not None:
        return node.stream[0]
    summary = node.saved_summary()
    for entry in summary or ():
        if isinstance(entry, tuple):
            return entry[2]
    return None


def make_dot(tensor: "Tensor | Sequence[Tensor]", params: Mapping[str, Tensor] | None = None,
             show_saved: bool = False, max_nodes: int | None = DEFAULT_MAX_NODES) -> Any:
    """The backward graph of ``tensor`` (or of several tensors) as a ``graphviz.Digraph``.

    ``params``: names for leaves (``{"weight": w}``), drawn bold with their name.
    ``show_saved``: also draw what each node saved for backward (shape, dtype, device; a
    value saved under ``saved_tensors_hooks`` is drawn as packed; after a backward that freed
    them, the node says so). ``max_nodes``: stop with ValueError once the graph has more
    backward nodes than this (None: no limit)."""
    outputs = (tensor,) if isinstance(tensor, Tensor) else tuple(tensor)
    for t in outputs:
        if not isinstance(t, Tensor):
            raise TypeError(f"make_dot: expected a Tensor or a sequence of Tensors, got {type(t).__name__}")
    names: dict[int, str] = {}
    for name, p in (params or {}).items():
        if not isinstance(p, Tensor):
            raise TypeError(f"make_dot: params[{name!r}] must be a Tensor, got {type(p).__name__}")
        names[id(p)] = name

    dot = _Statements()  # the walk first (its errors need no graphviz), then the Digraph
    palette: dict[str, str] = {}
    seen: dict[int, str] = {}  # id(node) -> its DOT name
    device_of: dict[int, Any] = {}
    stack: list[tuple[Node, Any]] = []
    count = 0

    def visit(node: Node, inherited: Any) -> str:
        """The node's DOT name; a node not seen yet is queued for drawing (no recursion)."""
        nonlocal count
        key = id(node)
        if key not in seen:
            count += 1
            if max_nodes is not None and count > max_nodes:
                raise ValueError(
                    f"make_dot: the graph has more than max_nodes={max_nodes} backward nodes; Graphviz "
                    "would take very long to lay it out and the drawing would be unreadable. Draw a part of "
                    "it (make_dot of an intermediate tensor), or pass a larger max_nodes (None: no limit)")
            seen[key] = str(key)
            stack.append((node, inherited))
        return seen[key]

    for i, out in enumerate(outputs):
        out_name = f"output{i}_{id(out)}"
        if out.grad_fn is None and out.requires_grad:  # a leaf drawn from: itself
            dot.node(out_name, f"{names.get(id(out), 'output (leaf)')}\n{_describe(out)}", fillcolor="lightblue")
            continue
        dot.node(out_name, f"output\n{_describe(out)}", fillcolor="darkolivegreen1")
        if out.grad_fn is not None:
            dot.edge(visit(out.grad_fn, out.device), out_name)

    while stack:
        node, inherited = stack.pop()
        me = seen[id(node)]
        device = _own_device(node)
        if device is None:
            device = inherited
        device_of[id(node)] = device
        if type(node) is AccumulateGrad:
            dot.node(me, "AccumulateGrad", fillcolor="lightgrey")
            var = node.variable
            label = names.get(id(var))
            var_name = f"var_{id(var)}"
            if label is None:
                dot.node(var_name, f"leaf\n{_describe(var)}", fillcolor="lightblue")
            else:
                dot.node(var_name, f"{label}\n{_describe(var)}", fillcolor="lightblue", style="filled,bold",
                         penwidth="2")
            dot.edge(var_name, me)
        else:
            label = node.name()
            summary = node.saved_summary() if show_saved else ()
            if show_saved and summary is None:
                label += "\n(saved tensors freed by backward)"
            dot.node(me, label, fillcolor=_colour(device, palette))
            for j, entry in enumerate(summary or ()):
                if entry is None:
                    continue
                saved_name = f"{me}_saved{j}"
                text = entry if isinstance(entry, str) else (
                    f"{_shape(entry[0])}: {entry[1]}" + ("" if str(entry[2]) == "cpu" else f" on {entry[2]}"))
                dot.node(saved_name, f"saved {j}\n{text}", fillcolor="orange")
                dot.edge(saved_name, me, style="dashed", dir="none")
        # What a gradient leaving this node goes on: ToCopyBackward0 sends it back to its source.
        child_device = getattr(node, "src_device", device)
        for nxt, _ in node.next_edges:
            if nxt is not None:
                dot.edge(visit(nxt, child_device), me)

    try:
        import graphviz
    except ImportError as e:
        raise ImportError("make_dot needs the graphviz Python package: pip install 'threadgrad[viz]' "
                          "(rendering to an image also needs Graphviz's dot program)") from e
    graph = graphviz.Digraph(
        node_attr=dict(style="filled", shape="box", align="left", fontsize="10", ranksep="0.1", height="0.2",
                       fontname="monospace"),
        graph_attr=dict(size="12,12"))
    for method, args, kwargs in dot.calls:
        getattr(graph, method)(*args, **kwargs)
    used = sorted({str(d) for d in device_of.values() if d is not None} | {"cpu"}, key=lambda d: (d != "cpu", d))
    with graph.subgraph(name="cluster_devices") as legend:  # the colour key
        legend.attr(label="devices", fontsize="10", style="dashed")
        for d in used:
            legend.node(f"device_{d}", d, fillcolor=_colour(d, palette), shape="box")
    return graph


class _Statements:
    """``node`` and ``edge`` calls kept in order, to be replayed on a ``graphviz.Digraph``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def node(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("node", args, kwargs))

    def edge(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("edge", args, kwargs))
