"""Round-4 ports of PyTorch's test/autograd/test_node_lifecycle.py: nodes, their hooks and
saved tensors are freed by reference counting where torch frees them so, and by the cycle
collector where a hook closes a cycle through its node.

The "refcount" checks run with the cycle collector off, so they fail if freeing needs it.
``a._use_count()`` (torch-internal) is replaced by a weak reference to the output's node.
"""
from __future__ import annotations

import gc
import weakref
from contextlib import contextmanager

import pytest
from parity_util import randn

from threadgrad import engine, ops


class PythonId(engine.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad


class PythonMul(engine.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2


class PythonExp(engine.Function):
    @staticmethod
    def forward(ctx, x):
        y = ops.exp(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


class PythonSplit(engine.Function):
    @staticmethod
    def forward(ctx, x):
        return x[:2].clone(), x[2:].clone()

    @staticmethod
    def backward(ctx, grad0, grad1):
        return ops.cat([grad0, grad1])


class Marker:
    pass


@contextmanager
def no_cycle_collector():
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _make_output(node_type, a):
    return a * 2 if node_type == "cpp" else PythonMul.apply(a)


def _run(node_type, hook_type, backward_state):
    a = randn(4, requires_grad=True)
    b = _make_output(node_type, a)
    marker = Marker()
    marker_ref = weakref.ref(marker)
    grad_fn = b.grad_fn
    if hook_type == "tensor_hook":
        b.register_hook(lambda grad: marker and None)
    elif hook_type == "tensor_hook_captures_grad_fn":
        b.register_hook(lambda grad: (grad_fn, marker) and None)
    elif hook_type == "grad_fn_hook":
        b.grad_fn.register_hook(lambda *args: marker and None)
    elif hook_type == "grad_fn_hook_captures_grad_fn":
        b.grad_fn.register_hook(lambda *args: (grad_fn, marker) and None)
    if backward_state == "backward":
        b.sum().backward()
    elif backward_state == "retain_graph":
        b.sum().backward(retain_graph=True)
    return a, b, marker, marker_ref, grad_fn


REFCOUNT_CASES = [(n, h, s) for n in ("cpp", "python") for h, states in (
    ("none", ("no_backward", "backward", "retain_graph")),
    ("tensor_hook", ("no_backward", "backward")),
    ("grad_fn_hook", ("no_backward", "backward"))) for s in states]
GC_CASES = [(n, h, s) for n in ("cpp", "python")
            for h in ("tensor_hook_captures_grad_fn", "grad_fn_hook_captures_grad_fn")
            for s in ("no_backward", "backward")]


@pytest.mark.parametrize("node_type,hook_type,backward_state", REFCOUNT_CASES)
def test_node_lifecycle_freed_by_refcount(node_type, hook_type, backward_state):
    """Port of test_node_lifecycle.py TestNodeLifecycle.test_{cpp,python}_{no_hook,tensor_hook,
    grad_fn_hook}_{no_backward,backward,retain}_refcount."""
    with no_cycle_collector():
        a, b, marker, marker_ref, grad_fn = _run(node_type, hook_type, backward_state)
        del a, b, marker, grad_fn
        assert marker_ref() is None, f"not freed by refcount: {node_type} {hook_type} {backward_state}"


@pytest.mark.parametrize("node_type,hook_type,backward_state", GC_CASES)
def test_node_lifecycle_freed_by_gc(node_type, hook_type, backward_state):
    """Port of test_node_lifecycle.py TestNodeLifecycle.test_*_hook_captures_*_gc."""
    a, b, marker, marker_ref, grad_fn = _run(node_type, hook_type, backward_state)
    del a, b, marker, grad_fn
    gc.collect()
    assert marker_ref() is None, f"not freed by GC: {node_type} {hook_type} {backward_state}"


def test_post_accumulate_grad_hook_freed():
    """Port of test_node_lifecycle.py TestLeafNodeLifecycle.test_post_accumulate_grad_hook_freed."""
    marker = Marker()
    ref = weakref.ref(marker)
    a = randn(2, requires_grad=True)
    a.register_post_accumulate_grad_hook(lambda t: marker and None)
    b = a * 2
    b.sum().backward()
    del a, b, marker
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("node_type", ["cpp", "python"])
def test_shared_grad_fn_one_deleted(node_type):
    """Port of test_node_lifecycle.py TestSharedGradFn.test_{cpp,python}_shared_grad_fn_one_deleted."""
    with no_cycle_collector():
        a = randn(4, requires_grad=True)
        b0, b1 = ops.split(a * 2, 2) if node_type == "cpp" else PythonSplit.apply(a)
        ref = weakref.ref(b0.grad_fn)
        del b0
        assert ref() is not None
        del b1
        assert ref() is None


@pytest.mark.parametrize("node_type", ["cpp", "python"])
def test_shared_grad_fn_backward_one(node_type):
    """Port of test_node_lifecycle.py TestSharedGradFn.test_{cpp,python}_shared_grad_fn_backward_one."""
    with no_cycle_collector():
        a = randn(4, requires_grad=True)
        b0, b1 = ops.split(a * 2, 2) if node_type == "cpp" else PythonSplit.apply(a)
        ref = weakref.ref(b0.grad_fn)
        b0.sum().backward(retain_graph=True)
        del b0, b1
        assert ref() is None


@pytest.mark.parametrize("node_type", ["cpp", "python"])
def test_shared_grad_fn_hook_cycle_gc(node_type):
    """Port of test_node_lifecycle.py TestSharedGradFn.test_{cpp,python}_shared_grad_fn_hook_cycle_gc."""
    marker = Marker()
    ref = weakref.ref(marker)
    a = randn(4, requires_grad=True)
    b0, b1 = ops.split(a * 2, 2) if node_type == "cpp" else PythonSplit.apply(a)
    grad_fn = b0.grad_fn

    def hook(*args):
        grad_fn  # noqa: B018
        marker  # noqa: B018

    b0.grad_fn.register_hook(hook)
    del a, b0, b1, grad_fn, hook, marker
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("kind", ["cpp", "python", "mixed"])
def test_chain_freed_refcount(kind):
    """Port of test_node_lifecycle.py TestChainLifecycle.test_{cpp,python,mixed}_chain_freed_refcount."""
    with no_cycle_collector():
        a = randn(2, requires_grad=True)
        if kind == "cpp":
            b = a * 2
            c = b + 1
            d = c * 3
        elif kind == "python":
            b = PythonMul.apply(a)
            c = PythonId.apply(b)
            d = c
        else:
            b = a * 2
            c = PythonId.apply(b)
            d = c + 1
        refs = [weakref.ref(b.grad_fn), weakref.ref(c.grad_fn), weakref.ref(d.grad_fn)]
        del b, c, d
        assert [r() for r in refs] == [None, None, None]


@pytest.mark.parametrize("python", [False, True])
def test_deep_chain_no_stack_overflow(python):
    """Port of test_node_lifecycle.py TestChainLifecycle.test_deep{,_python}_chain_no_stack_overflow."""
    x = randn(2, requires_grad=True)
    for _ in range(2000):
        x = PythonId.apply(x) if python else x + randn(2)
    del x


@pytest.mark.parametrize("node_type", ["cpp", "python"])
@pytest.mark.parametrize("when", ["graph_free", "after_backward", "retain_graph"])
def test_saved_freed(node_type, when):
    """Port of test_node_lifecycle.py TestSavedVariableLifecycle.test_{cpp,python}_saved_{freed_on_graph_free,
    freed_after_backward,kept_with_retain_graph}."""
    with no_cycle_collector():
        a = randn(2, requires_grad=True)
        b = a + 1
        ref = weakref.ref(b)
        c = ops.sum(b ** 2) if node_type == "cpp" else PythonMul.apply(b).sum()
        del b
        assert ref() is not None
        if when == "after_backward":
            c.backward()
            assert ref() is None
        elif when == "retain_graph":
            c.backward(retain_graph=True)
            assert ref() is not None
        del c
        assert ref() is None


@pytest.mark.parametrize("node_type", ["cpp", "python"])
@pytest.mark.parametrize("backward", [False, True])
def test_saved_output_freed(node_type, backward):
    """Port of test_node_lifecycle.py TestSavedVariableLifecycle.test_{cpp,python}_saved_output_freed_{on_graph_free,
    after_backward}."""
    with no_cycle_collector():
        a = randn(2, requires_grad=True)
        b = ops.exp(a) if node_type == "cpp" else PythonExp.apply(a)
        ref = weakref.ref(b)
        if backward:
            b.sum().backward()
        del b
        assert ref() is None


@pytest.mark.parametrize("how", ["freed", "after_backward", "retain_graph"])
def test_accumulate_grad_freed(how):
    """Port of test_node_lifecycle.py TestLeafNodeLifecycle.test_accumulate_grad_freed_{refcount,
    after_backward,retain_graph} (a._use_count() -> a weak reference to the leaf's AccumulateGrad,
    which holds the leaf: torch's count drops back to 1 when it is gone)."""
    with no_cycle_collector():
        a = randn(2, requires_grad=True)
        b = a * 2
        acc = weakref.ref(b.grad_fn.next_functions[0][0])
        assert acc() is not None and acc().variable is a
        if how == "after_backward":
            b.sum().backward()
        elif how == "retain_graph":
            b = b.sum()
            b.backward(retain_graph=True)
            assert acc() is not None
        del b
        assert acc() is None
