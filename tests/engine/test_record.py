"""Recording in forward: the fast recorders store exactly what ``record`` stores."""
import numpy as np
import pytest

import engine
import ops
from engine._record import record, record_binary, record_unary
from engine.graph import SavedOutput, SavedHooked
from engine.tensor import _wrap
from ops.elementwise import MulBackward0, TanhBackward0


def _leaf():
    return engine.tensor(np.linspace(-1.0, 1.0, 4), requires_grad=True)


def _nonleaf():
    return ops.exp(_leaf())


def _const(shape=(4,)):
    return engine.tensor(np.full(shape, 0.5))


def _out(x):
    return _wrap(np.tanh(x.data), x.device)


def _state(node, out):
    """Everything recording stores, in a comparable form (saved entries by kind and identity)."""
    def saved(e):
        if e is None:
            return None
        if type(e) is SavedOutput:
            return ("output", e.data is out.data, e._vc is out._vc, e.output_nr, e.device)
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


@pytest.mark.parametrize("op", ["tanh", "mul", "pow"], ids=["record_unary", "record_binary", "record"])
def test_anomaly_trace_ends_at_the_op_the_user_called(op):
    x = engine.tensor(np.linspace(0.5, 1.5, 4), requires_grad=True)
    with engine.detect_anomaly():
        y = {"tanh": lambda: ops.tanh(x), "mul": lambda: ops.mul(x, 2.0), "pow": lambda: ops.pow(x, x)}[op]()
    trace = y.grad_fn.metadata["traceback_"]
    assert f"in {op}\n" in trace[-1]  # the op's own frame is the last; the recorders' frames are gone
    assert "ops.%s(x" % op in trace[-2]
