"""Recording in forward: the fast recorders store exactly what ``record`` stores."""
import numpy as np
import pytest

from threadgrad import engine, ops
from threadgrad.engine._record import OUTPUT, binary_result, record, record_binary, record_unary, unary_result
from threadgrad.engine.graph import SavedOutput, SavedHooked
from threadgrad.engine.tensor import _wrap
from threadgrad.ops.elementwise import MulBackward0, TanhBackward0


def _leaf():
    return engine.tensor(np.linspace(-1.0, 1.0, 4), requires_grad=True)


def _nonleaf():
    return ops.exp(_leaf())


def _const(shape=(4,)):
    return engine.tensor(np.full(shape, 0.5))


def _out(x):
    return _wrap(np.tanh(x._data), x.device)


def _state(node, out):
    """Everything recording stores, in a comparable form (saved entries by kind and identity)."""
    def saved(e):
        if e is None:
            return None
        if type(e) is SavedOutput:
            return ("output", e._data is out._data, e._vc is out._vc, e.output_nr, e.device)
        if type(e) is SavedHooked:
            return ("hooked", e.packed)
        return ("tensor", id(e))
    slots = {k: getattr(node, k) for k in ("a_shape", "a_dtype", "b_shape", "b_dtype") if hasattr(node, k)}
    return (node.next_edges, tuple(saved(e) for e in node._saved), node._saved_ver, node.stream, slots,
            out.grad_fn is node, out._rg, "traceback_" in node.__dict__.get("_metadata", {}))


@pytest.mark.parametrize("make_x", [_leaf, _nonleaf], ids=["leaf", "nonleaf"])
@pytest.mark.parametrize("save", ["none", "input", "output"])
@pytest.mark.parametrize("mode", ["plain", "saved_hooks", "anomaly"])
def test_record_unary_stores_what_record_stores(make_x, save, mode):
    x = make_x()
    states = []
    for fast in (False, True):
        out = _out(x)
        saved = {"none": None, "input": x, "output": out}[save]
        node = TanhBackward0()
        with _mode(mode):
            if fast:
                record_unary(node, x, out, saved)
            else:
                record(node, (x,), out, () if saved is None else (saved,))
        states.append(_state(node, out))
    assert states[0] == states[1]
    if save == "output" and mode != "saved_hooks":
        assert states[1][1] == (("output", True, True, 0, x.device),)  # by data: no cycle through the output


@pytest.mark.parametrize("a_kind", ["leaf", "nonleaf", "const"])
@pytest.mark.parametrize("b_kind", ["leaf", "const", "broadcast"])
@pytest.mark.parametrize("mode", ["plain", "saved_hooks", "anomaly"])
def test_record_binary_stores_what_record_stores(a_kind, b_kind, mode):
    make = {"leaf": _leaf, "nonleaf": _nonleaf, "const": _const, "broadcast": lambda: _const((1,))}
    a, b = make[a_kind](), make[b_kind]()
    if not (a._rg or b._rg):
        a = _leaf()
    states = []
    for fast in (False, True):
        out = _out(a)
        sa, sb = (a if b._rg else None), (b if a._rg else None)  # mul's rule
        node = MulBackward0()
        with _mode(mode):
            if fast:
                record_binary(node, a, b, out, sa, sb)
            else:
                record(node._meta(a, b), (a, b), out, (sa, sb))
        states.append(_state(node, out))
    assert states[0] == states[1]


def test_record_binary_with_nothing_saved_saves_nothing():
    a, b = _leaf(), _leaf()
    out = _out(a)
    node = MulBackward0()
    record_binary(node, a, b, out)
    assert node._saved == () and node._saved_ver == ()


class _mode:
    """Run the recorders plainly, under saved-tensor hooks, or in anomaly mode."""

    def __init__(self, mode):
        self.mode = mode
        self.ctx = None

    def __enter__(self):
        if self.mode == "saved_hooks":
            self.ctx = engine.saved_tensors_hooks(lambda t: "packed", lambda p: None)
        elif self.mode == "anomaly":
            self.ctx = engine.detect_anomaly()
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


@pytest.mark.parametrize("op", ["tanh", "mul", "sum", "pow"], ids=["unary_result", "binary_result", "record_unary", "record"])
def test_anomaly_trace_ends_at_the_op_the_user_called(op):
    x = engine.tensor(np.linspace(0.5, 1.5, 4), requires_grad=True)
    with engine.detect_anomaly():
        y = {"tanh": lambda: ops.tanh(x), "mul": lambda: ops.mul(x, 2.0), "sum": lambda: ops.sum(x),
             "pow": lambda: ops.pow(x, x)}[op]()
    trace = y.grad_fn.metadata["traceback_"]
    assert f"in {op}\n" in trace[-1]  # the op's own frame is the last; the recorders' frames are gone
    assert "ops.%s(x" % op in trace[-2]


# --- the result makers: output Tensor and recording in one call (Note [Result makers]) ------

def _tensor_slots(t):
    return (type(t._data), t._data.dtype, t._data.shape, t.device, t._grad, t._vc, t._output_nr, t._acc, t._ext)


class _NeverMade:
    """A node class that must not be instantiated (nothing is to be recorded)."""

    def __init__(self):
        raise AssertionError("a node was made although nothing requires grad")


@pytest.mark.parametrize("make_x", [_leaf, _nonleaf], ids=["leaf", "nonleaf"])
@pytest.mark.parametrize("save", ["none", "input", "output"])
@pytest.mark.parametrize("mode", ["plain", "saved_hooks", "anomaly"])
def test_unary_result_stores_what_record_stores(make_x, save, mode):
    x = make_x()
    data = np.tanh(x._data)
    ref = _wrap(data, x.device)
    ref_node = TanhBackward0()
    with _mode(mode):
        record(ref_node, (x,), ref, {"none": (), "input": (x,), "output": (ref,)}[save])
        out = unary_result(x, data, TanhBackward0, {"none": None, "input": x, "output": OUTPUT}[save])
    assert type(out.grad_fn) is TanhBackward0 and out.grad_fn is not ref_node
    assert _state(out.grad_fn, out) == _state(ref_node, ref)
    assert out._data is data and _tensor_slots(out) == _tensor_slots(ref)
    assert out.grad_fn.sequence_nr > ref_node.sequence_nr  # numbered in recording order


@pytest.mark.parametrize("a_kind", ["leaf", "nonleaf", "const"])
@pytest.mark.parametrize("b_kind", ["leaf", "const", "broadcast"])
@pytest.mark.parametrize("mode", ["plain", "saved_hooks", "anomaly"])
def test_binary_result_stores_what_record_stores(a_kind, b_kind, mode):
    make = {"leaf": _leaf, "nonleaf": _nonleaf, "const": _const, "broadcast": lambda: _const((1,))}
    a, b = make[a_kind](), make[b_kind]()
    if not (a._rg or b._rg):
        a = _leaf()
    data = a._data * b._data
    sa, sb = (a if b._rg else None), (b if a._rg else None)  # mul's rule
    ref = _wrap(data, a.device)
    ref_node = MulBackward0()
    with _mode(mode):
        record(ref_node._meta(a, b), (a, b), ref, (sa, sb))
        out = binary_result(a, b, data, MulBackward0, sa, sb)
    assert type(out.grad_fn) is MulBackward0
    assert _state(out.grad_fn, out) == _state(ref_node, ref)
    assert out._data is data and _tensor_slots(out) == _tensor_slots(ref)


def test_binary_result_with_nothing_saved_saves_nothing():
    a, b = _leaf(), _leaf()
    out = binary_result(a, b, a._data + b._data, MulBackward0)
    assert out.grad_fn._saved == () and out.grad_fn._saved_ver == ()


@pytest.mark.parametrize("case", ["no input requires grad", "no_grad"])
def test_result_makers_record_nothing_when_no_gradient_is_wanted(case):
    x = _const() if case == "no input requires grad" else _leaf()
    c = _const()
    with engine.set_grad_enabled(case != "no_grad"):
        u = unary_result(x, np.tanh(x._data), _NeverMade, OUTPUT)
        b = binary_result(x, c, x._data * c._data, _NeverMade, None, c)
    for out in (u, b):
        assert out.grad_fn is None and out._rg is False and out.is_leaf
        assert _tensor_slots(out)[4:] == (None, [0], 0, None, None)


def test_result_makers_hold_a_zero_dim_result_as_an_array():
    x = engine.tensor(0.5, requires_grad=True)
    u = unary_result(x, np.tanh(x._data), TanhBackward0, OUTPUT)  # numpy returns a numpy.float64 here
    b = binary_result(x, x, x._data * x._data, MulBackward0, x, x)
    for out in (u, b):
        assert type(out._data) is np.ndarray and out._data.shape == ()
    assert type(u.grad_fn._saved[0]._data) is np.ndarray  # the saved output is the held array
    (g,) = engine.grad(u + b, x)
    assert np.isclose(g.item(), 1 - np.tanh(0.5) ** 2 + 2 * 0.5)


@pytest.mark.parametrize("da, db, shape_a, shape_b, want", [
    ("int64", "float32", (3,), (3,), "float32"),     # a higher category wins (numpy: float64)
    ("float32", "float64", (3,), (), "float32"),     # a dimensioned tensor wins in one category
    ("float64", "float32", (), (3,), "float32"),
    ("int32", "int64", (3,), (3,), "int64"),         # else the wider type
    ("bool", "int32", (3,), (3,), "int32"),
    ("float32", "float32", (3,), (3,), "float32"),
])
def test_binary_result_gives_torchs_result_dtype(da, db, shape_a, shape_b, want):
    a = engine.tensor(np.ones(shape_a, dtype=da))
    b = engine.tensor(np.ones(shape_b, dtype=db))
    out = binary_result(a, b, a._data + b._data, MulBackward0)
    assert out.dtype == np.dtype(want) and out.shape == (3,)
    assert np.array_equal(out._data, np.full(3, 2, dtype=want))
