"""threadgrad.viz.make_dot: the backward graph as DOT (graphviz package), rendered where Graphviz is."""
from __future__ import annotations

import doctest
import re
import shutil
import sys

import pytest

pytest.importorskip("graphviz")

from threadgrad import engine, ops, viz  # noqa: E402


def _labels(dot) -> list[str]:
    return [a or b for a, b in re.findall(r'label=(?:"([^"]*)"|([^\s\]]+))', dot.source)]


def _mlp():
    W1 = engine.randn(16, 8, requires_grad=True)
    b1 = engine.zeros(16, requires_grad=True)
    W2 = engine.randn(3, 16, requires_grad=True)
    b2 = engine.zeros(3, requires_grad=True)
    x = engine.randn(5, 8)
    t = engine.tensor([0, 1, 2, 0, 1])
    loss = ops.cross_entropy(ops.linear(ops.relu(ops.linear(x, W1, b1)), W2, b2), t)
    return loss, dict(W1=W1, b1=b1, W2=W2, b2=b2)


def test_docstring_examples():
    assert doctest.testmod(viz).failed == 0


def test_the_mlp_graph_names_nodes_params_and_accumulate_grad():
    loss, params = _mlp()
    dot = viz.make_dot(loss, params=params)
    labels = _labels(dot)
    assert labels.count("AccumulateGrad") == 4
    for name, p in params.items():  # each parameter by name, shape and dtype, drawn bold
        assert re.search(rf'label="{name}\n\({p.shape[0]},?[^)]*\): float32" fillcolor=lightblue penwidth=2', dot.source)
    for node in ("AddmmBackward0", "ReluBackward0", "LogSoftmaxBackward0", "MeanBackward0"):
        assert node in labels
    assert "output\n(): float32" in labels
    # One DOT node per backward node reached: the graph's own count
    seen, stack = set(), [loss.grad_fn]
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            stack.extend(m for m, _ in n.next_functions if m is not None)
    drawn = [ln for ln in dot.source.splitlines() if re.match(r"\s*\d+ \[label=", ln)]
    assert len(drawn) == len(seen)


def test_unnamed_leaves_and_edges_run_forward():
    a = engine.ones(2, requires_grad=True)
    y = a * 3
    src = viz.make_dot(y).source
    acc = y.grad_fn.next_functions[0][0]
    assert f"{id(acc)} -> {id(y.grad_fn)}" in src  # input -> op, the forward's direction
    assert 'label="leaf\n(2,): float32"' in src


def test_show_saved_gives_shapes_dtypes_devices_and_says_when_freed(virtual1):
    w = engine.randn(3, 4, dtype=engine.float64, requires_grad=True)
    y = ops.tanh(ops.to(w, virtual1)).sum()
    src = viz.make_dot(y, show_saved=True).source
    assert 'label="saved 0\n(3, 4): float64 on virtual:1"' in src
    assert "saved" not in viz.make_dot(y).source
    y.backward()
    src = viz.make_dot(y, show_saved=True).source
    assert "TanhBackward0\n(saved tensors freed by backward)" in src


def test_a_value_saved_under_hooks_is_drawn_packed():
    x = engine.ones(3, requires_grad=True)
    with engine.saved_tensors_hooks(lambda t: t.numpy() if not t.requires_grad else t.detach().numpy(),
                                    lambda a: engine.tensor(a)):
        y = ops.tanh(x)
    assert 'label="saved 0\npacked by a hook"' in viz.make_dot(y, show_saved=True).source


def test_devices_are_colours_with_a_key(virtual1):
    x = engine.ones(3, requires_grad=True)
    y = ops.to(ops.tanh(ops.to(x, virtual1)), "cpu").sum()
    src = viz.make_dot(y).source
    fill = dict(re.findall(r'label="?([\w:]+)"? fillcolor="([^"]+)"', src))
    assert fill["TanhBackward0"] != fill["SumBackward0"]
    assert fill["virtual:1"] == fill["TanhBackward0"] and fill["cpu"] == fill["SumBackward0"]
    # ToCopyBackward0 sends gradients back to the source device: the one for x runs on virtual:1
    # (its gradient arrives there), the other on cpu
    assert sorted(re.findall(r'label=ToCopyBackward0 fillcolor="([^"]+)"', src)) == sorted([fill["cpu"], fill["virtual:1"]])


def test_several_outputs_and_a_leaf_output():
    a = engine.ones(2, requires_grad=True)
    src = viz.make_dot([a * 2, a + 1, a], params={"a": a}).source
    assert src.count("darkolivegreen1") == 2 and src.count("AccumulateGrad") == 1
    assert 'label="a\n(2,): float32" fillcolor=lightblue' in src


def test_bad_arguments_are_named():
    a = engine.ones(2, requires_grad=True)
    with pytest.raises(TypeError, match="expected a Tensor or a sequence of Tensors, got int"):
        viz.make_dot([a, 3])
    with pytest.raises(TypeError, match=r"params\['w'\] must be a Tensor, got list"):
        viz.make_dot(a * 2, params={"w": [1.0]})


def _chain(n: int):
    x = engine.ones(1, requires_grad=True)
    y = x
    for _ in range(n):
        y = y * 1.0
    return y


def test_past_max_nodes_the_walk_stops_with_a_clear_error():
    y = _chain(50)
    with pytest.raises(ValueError, match=r"more than max_nodes=20 backward nodes.*intermediate tensor"):
        viz.make_dot(y, max_nodes=20)
    assert "MulBackward0" in viz.make_dot(y, max_nodes=51).source  # 50 muls and the AccumulateGrad


@pytest.mark.timeout(300)
def test_a_100000_node_chain_is_walked_without_recursion():
    y = _chain(100_000)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # a recursive walk would fail at once
    try:
        src = viz.make_dot(y, max_nodes=None).source
    finally:
        sys.setrecursionlimit(old)
    assert src.count("MulBackward0") == 100_000
    with pytest.raises(ValueError, match="max_nodes=5000"):
        viz.make_dot(y)


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot program is not installed")
def test_the_mlp_renders_with_dot(tmp_path):
    loss, params = _mlp()
    out = viz.make_dot(loss, params=params, show_saved=True).render(str(tmp_path / "mlp"), format="png", cleanup=True)
    data = open(out, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    svg = viz.make_dot(loss, params=params).pipe(format="svg").decode()
    assert "W1" in svg and "AccumulateGrad" in svg
