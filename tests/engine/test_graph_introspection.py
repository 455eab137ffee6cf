"""Graph introspection: Node.name(), next_functions, AccumulateGrad.variable, metadata."""
from __future__ import annotations

import gc
import weakref

import pytest

from threadgrad import engine, ops


def leaf(*vals):
    return engine.tensor(list(vals) if vals else [1.0, 2.0], requires_grad=True)


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda x, w: x + w, "AddBackward0"),
        (lambda x, w: x - w, "SubBackward0"),
        (lambda x, w: x * w, "MulBackward0"),
        (lambda x, w: x / w, "DivBackward0"),
        (lambda x, w: -x, "NegBackward0"),
        (lambda x, w: x ** 2, "PowBackward0"),
        (lambda x, w: x ** w, "PowBackward1"),
        (lambda x, w: x.exp(), "ExpBackward0"),
        (lambda x, w: ops.log(x), "LogBackward0"),
        (lambda x, w: x.tanh(), "TanhBackward0"),
        (lambda x, w: x.relu(), "ReluBackward0"),
        (lambda x, w: x.sum(), "SumBackward0"),
        (lambda x, w: x.reshape(2, 1), "ViewBackward0"),
        (lambda x, w: x.reshape(1, 2).transpose(0, 1), "TransposeBackward0"),
        (lambda x, w: x.reshape(1, 2).permute(1, 0), "PermuteBackward0"),
        (lambda x, w: x.expand(3, 2), "ExpandBackward0"),
        (lambda x, w: x.reshape(1, 2) @ w.reshape(2, 1), "MmBackward0"),
        (lambda x, w: x.clone(), "CloneBackward0"),
        (lambda x, w: ops.to(x, "virtual:1"), "ToCopyBackward0"),
        # torch's names where one function makes several kinds of node
        (lambda x, w: x.reshape(1, 2).sum(0), "SumBackward1"),
        (lambda x, w: x.reshape(1, 2).mean(1), "MeanBackward1"),
        (lambda x, w: x.mean(), "MeanBackward0"),
        (lambda x, w: 2 ** x, "PowBackward2"),
        (lambda x, w: 1 - x, "RsubBackward1"),
        (lambda x, w: x.reshape(1, 2, 1).squeeze(), "SqueezeBackward0"),
        (lambda x, w: x.reshape(1, 2).squeeze(0), "SqueezeBackward1"),
        (lambda x, w: x.reshape(1, 2, 1).squeeze((0, 2)), "SqueezeBackward2"),
        (lambda x, w: x.unsqueeze(0), "UnsqueezeBackward0"),
        (lambda x, w: x[0], "SelectBackward0"),
        (lambda x, w: x[1:], "SliceBackward0"),
        (lambda x, w: x[:], "SliceBackward0"),
        (lambda x, w: x.reshape(2, 1)[1:, 0], "SelectBackward0"),
        (lambda x, w: x.reshape(2, 1)[0, :], "SelectBackward0"),
        (lambda x, w: x.reshape(2, 1)[:, :], "AliasBackward0"),
        (lambda x, w: x.reshape(1, 2)[0, 0:2], "SelectBackward0"),  # 0:2 covers its dim: skipped
        (lambda x, w: x.reshape(1, 2)[None, 0:1], "UnsqueezeBackward0"),
        (lambda x, w: x[...], "AliasBackward0"),
        (lambda x, w: x[None], "UnsqueezeBackward0"),
        (lambda x, w: x[[0, 1]], "IndexBackward0"),
        (lambda x, w: x[x > 1.5], "IndexBackward0"),
    ],
)
def test_node_names(make, name):
    x = leaf(1.0, 2.0)
    w = leaf(3.0, 4.0)
    y = make(x, w)
    assert y.grad_fn.name() == name
    assert type(y.grad_fn).__name__ == name
    assert isinstance(y.grad_fn, engine.Node)
    assert repr(y.grad_fn).startswith(f"<{name} object at 0x")


def test_mean_node_name_is_mean_backward():
    """PyTorch names the node of ``x.mean()`` MeanBackward0."""
    x = leaf(1.0, 2.0)
    assert x.mean().grad_fn.name() == "MeanBackward0"


def test_next_functions_point_to_inputs_nodes():
    x = leaf()
    w = leaf(3.0, 4.0)
    h = x * w
    u = h + x
    y = u.sum()
    s = y.grad_fn
    assert s.name() == "SumBackward0"
    (add, nr), = s.next_functions
    assert add is u.grad_fn and nr == 0
    assert add.name() == "AddBackward0"
    (mul, nr0), (acc_x, nr1) = add.next_functions
    assert mul is h.grad_fn and nr0 == 0
    assert acc_x.name() == "AccumulateGrad" and nr1 == 0
    assert acc_x.variable is x
    (a0, n0), (a1, n1) = mul.next_functions
    assert a0 is acc_x  # one AccumulateGrad per leaf, shared by every use
    assert a1.variable is w
    assert (n0, n1) == (0, 0)
    assert acc_x.next_functions == ()
    assert isinstance(acc_x, engine.AccumulateGrad)


def test_next_functions_none_for_inputs_not_requiring_grad():
    x = leaf()
    c = engine.tensor([5.0, 6.0])
    y = x * c
    assert y.grad_fn.next_functions[1] == (None, 0)
    assert y.grad_fn.next_functions[0][0].variable is x
    z = c * x + 1.0
    (mul, _), second = z.grad_fn.next_functions
    assert second == (None, 0)  # the python scalar
    assert mul.next_functions[0] == (None, 0)
    assert mul.next_functions[1][0].variable is x
    n = x.exp()
    assert isinstance(n.grad_fn.next_functions, tuple)
    assert len(n.grad_fn.next_functions) == 1


def test_same_leaf_used_twice_has_one_accumulate_grad():
    x = leaf()
    y = x + x
    (a, _), (b, _) = y.grad_fn.next_functions
    assert a is b
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_accumulate_grad_reused_across_graphs_while_alive():
    x = leaf()
    a = x * 2
    b = x * 3
    assert a.grad_fn.next_functions[0][0] is b.grad_fn.next_functions[0][0]


def test_accumulate_grad_is_held_weakly_by_the_leaf():
    x = leaf()
    y = x * 2
    acc = weakref.ref(y.grad_fn.next_functions[0][0])
    assert acc() is not None
    del y
    gc.collect()
    assert acc() is None  # only the graph kept it alive
    assert x.requires_grad and x.is_leaf


def test_metadata_is_a_persistent_dict():
    x = leaf()
    y = x * 2
    md = y.grad_fn.metadata
    assert isinstance(md, dict)
    assert md == {}
    md["tag"] = "scale"
    y.grad_fn.metadata["n"] = 3
    assert y.grad_fn.metadata == {"tag": "scale", "n": 3}
    assert y.grad_fn.metadata is md
    acc = y.grad_fn.next_functions[0][0]
    acc.metadata["leaf"] = True
    assert y.grad_fn.next_functions[0][0].metadata == {"leaf": True}
    y.sum().backward()
    assert y.grad_fn.metadata == {"tag": "scale", "n": 3}


def test_metadata_is_per_node():
    x = leaf()
    a = x * 2
    b = x * 3
    a.grad_fn.metadata["k"] = 1
    assert b.grad_fn.metadata == {}


def test_output_nr_of_input_edges():
    x = leaf()
    y = x * 2
    z = y.exp()
    assert z.grad_fn.next_functions == ((y.grad_fn, 0),)


def test_no_graph_recorded_when_no_input_requires_grad():
    a = engine.tensor([1.0, 2.0])
    for t in (a + a, a * 2, a.exp(), a.sum(), a.reshape(2, 1), ops.to(a, "virtual:1")):
        assert t.grad_fn is None and t.is_leaf and not t.requires_grad


def test_graph_edges_are_created_in_grad_mode_only_for_the_grad_branch():
    x = leaf()
    with engine.no_grad():
        c = x * 2
    y = c * x
    assert c.grad_fn is None
    assert y.grad_fn.next_functions[0] == (None, 0)
    assert y.grad_fn.next_functions[1][0].variable is x
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]  # d(c*x)/dx with c constant: c
