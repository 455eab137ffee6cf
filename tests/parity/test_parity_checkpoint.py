"""Ports of PyTorch's TestCheckpoint (test/test_utils.py): checkpoint and checkpoint_sequential.

nn.Sequential / nn.Linear / nn.Dropout become lists of functions over float64 parameters
(threadgrad has no nn.Module); everything else keeps PyTorch's assertions. A test threadgrad
fails today is a strict xfail saying what it does instead.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
from parity_util import arr, assert_equal, rand, randn, t

from threadgrad import engine, ops


class MLP:
    """nn.Sequential(Linear(100, 50), ReLU, Linear(50, 20), ReLU, Linear(20, 5), ReLU)."""

    def __init__(self) -> None:
        self.params = {}
        self.layers = []
        for i, (n_in, n_out) in enumerate([(100, 50), (50, 20), (20, 5)]):
            w = (randn(n_out, n_in) * (1.0 / n_in ** 0.5)).detach().requires_grad_()
            b = (randn(n_out) * 0.1).detach().requires_grad_()
            self.params[f"{i}.weight"], self.params[f"{i}.bias"] = w, b
            self.layers.append((lambda w, b: (lambda h: ops.linear(h, w, b)))(w, b))
            self.layers.append(ops.relu)

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None


def _check_checkpoint_sequential(model, functions, num_chunks, inp, use_reentrant):
    out = model(inp)
    out_not_checkpointed = arr(out).copy()
    model.zero_grad()
    out.sum().backward()
    grad_not_checkpointed = {name: arr(p.grad).copy() for name, p in model.params.items()}
    input_grad_not_checkpointed = arr(inp.grad).copy()

    detached = inp.detach()
    detached.requires_grad = True
    out = engine.checkpoint_sequential(functions, num_chunks, detached, use_reentrant=use_reentrant)
    out_checkpointed = arr(out).copy()
    model.zero_grad()
    out.sum().backward()
    assert_equal(out_checkpointed, out_not_checkpointed)
    assert_equal(detached.grad, input_grad_not_checkpointed)
    for name, p in model.params.items():
        assert_equal(p.grad, grad_not_checkpointed[name])


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_trigger(use_reentrant):
    """Port of test_utils.py TestCheckpoint.test_checkpoint_trigger."""
    class Net:
        def __init__(self):
            self.counter = 0

        def __call__(self, input_var):
            self.counter += 1
            return input_var * t(2.0)

    modules = [Net() for _ in range(10)]
    input_var = randn(3, 4, requires_grad=True)
    out = engine.checkpoint_sequential(modules, 2, input_var, use_reentrant=use_reentrant)
    assert [m.counter for m in modules] == [1] * 10
    out.sum().backward()
    assert [m.counter for m in modules[:5]] == [2] * 5
    assert [m.counter for m in modules[5:]] == [1] * 5


def test_checkpoint_valid():
    """Port of test_utils.py TestCheckpoint.test_checkpoint_valid."""
    model = MLP()
    input_var = randn(1, 100, requires_grad=True)
    out = engine.checkpoint_sequential(model.layers, 2, input_var, use_reentrant=True)
    with pytest.raises(RuntimeError, match="torch.utils.checkpoint is incompatible"):
        engine.grad(outputs=[out], grad_outputs=[engine.ones(1, 5, dtype=engine.float64)],
                    inputs=[input_var], create_graph=True)


def test_checkpoint_valid_non_reentrant():
    """Port of test_utils.py TestCheckpoint.test_checkpoint_valid (the use_reentrant=False half)."""
    model = MLP()
    input_var = randn(1, 100, requires_grad=True)
    go = [engine.ones(1, 5, dtype=engine.float64)]
    out = model(input_var)
    grads_no_checkpoint = engine.grad(outputs=[out], grad_outputs=go, inputs=[input_var], create_graph=True)
    out_checkpoint = engine.checkpoint_sequential(model.layers, 2, input_var, use_reentrant=False)
    assert_equal(out_checkpoint, out)
    grads_checkpoint = engine.grad(outputs=[out_checkpoint], grad_outputs=go, inputs=[input_var], create_graph=True)
    assert_equal(grads_checkpoint[0], grads_no_checkpoint[0])


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint(use_reentrant):
    """Port of test_utils.py TestCheckpoint.test_checkpoint (and test_checkpoint_module_list:
    the same comparison over a list of layers)."""
    model = MLP()
    _check_checkpoint_sequential(model, model.layers, 2, randn(1, 100, requires_grad=True), use_reentrant)


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_sequential_deprecated_no_args(use_reentrant):
    """Port of test_utils.py TestCheckpoint.test_checkpoint_sequential_deprecated_no_args."""
    with pytest.raises(TypeError):
        engine.checkpoint_sequential([lambda: None], 1, use_reentrant=use_reentrant)  # type: ignore[call-arg]


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_rng_cpu(use_reentrant):
    """Port of test_utils.py TestCheckpoint.test_checkpoint_rng_cpu (get/set_rng_state -> the
    same manual_seed before each run; run with both variants)."""
    for seed in range(5):
        inp = randn(20000).requires_grad_()

        def run_fn(x):
            return ops.dropout(x, 0.5, training=True)

        engine.manual_seed(seed)
        out = ops.dropout(inp, 0.5, training=True)
        out = engine.checkpoint(run_fn, out, use_reentrant=use_reentrant)
        out.sum().backward()
        grad_with_checkpointing = inp.grad

        engine.manual_seed(seed)
        inp.grad = None
        out = run_fn(ops.dropout(inp, 0.5, training=True))
        out.sum().backward()
        assert_equal(grad_with_checkpointing, inp.grad)


def test_checkpoint_non_tensor():
    """Port of test_utils.py TestCheckpoint.test_checkpoint_non_tensor."""
    def run_fn(tensor1, tensor2):
        if tensor2 is None:
            return tensor1
        return tensor1 + tensor2

    input_var = randn(1, 100, requires_grad=True)
    out = engine.checkpoint(run_fn, input_var, None, use_reentrant=True)
    out.sum().backward()
    assert_equal(input_var.grad, np.ones((1, 100)))


def test_checkpoint_non_tensor_inputs_outputs():
    """Port of test_utils.py TestCheckpoint.test_checkpoint_non_tensor_inputs_outputs."""
    def foo(t1, t2, scale, t3):
        t4 = t1 + t2 * t3
        t5 = t1 * t2 + t3
        t4 *= scale
        t5 *= scale
        return scale, t4, None, True, t5, "bar", t1

    t1 = rand(10, requires_grad=True)
    t2 = rand(10, requires_grad=True)
    t3 = rand(10)
    scale = random.randint(0, 10)
    res = engine.checkpoint(foo, t1, t2, scale, t3, use_reentrant=True)
    assert scale == res[0]
    assert_equal(res[1], (arr(t1) + arr(t2) * arr(t3)) * scale)
    assert res[2] is None
    assert res[3] is True
    assert_equal(res[4], (arr(t1) * arr(t2) + arr(t3)) * scale)
    assert res[5] == "bar"
    assert_equal(res[6], t1)

    res[1].sum().backward(retain_graph=True)
    res[4].sum().backward(retain_graph=True)
    res[6].sum().backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        res[6].sum().backward()
    t1_grad, t2_grad = t1.grad, t2.grad

    t1.grad = None
    t2.grad = None
    res = foo(t1, t2, scale, t3)
    engine.backward([res[1].sum(), res[4].sum(), res[6].sum()])
    assert_equal(t1.grad, t1_grad)
    assert_equal(t2.grad, t2_grad)


def test_checkpoint_no_tensors():
    """Port of test_utils.py TestCheckpoint.test_checkpoint_no_tensors."""
    def foo(t1, t2, scale, t3):
        t4 = t1 + t2 * t3
        t5 = t1 * t2 + t3
        t4 *= scale
        t5 *= scale
        return scale, t4, None, True, t5, "bar", t1

    t1, t2, t3 = random.random(), random.random(), random.random()
    scale = random.randint(0, 10)
    res = engine.checkpoint(foo, t1, t2, scale, t3, use_reentrant=True)
    assert scale == res[0]
    assert res[1] == pytest.approx((t1 + t2 * t3) * scale)
    assert res[2] is None
    assert res[3] is True
    assert res[4] == pytest.approx((t1 * t2 + t3) * scale)
    assert res[5] == "bar"
    assert t1 == res[6]


def test_checkpoint_partial_grad():
    """Port of test_utils.py TestCheckpoint.test_checkpoint_partial_grad."""
    def run_fn(tensor1, tensor2):
        return tensor1, tensor2

    input_var = randn(1, 4, requires_grad=True)
    input_var2 = randn(1, 4, requires_grad=False)
    out = engine.checkpoint(run_fn, input_var, input_var2, use_reentrant=True)
    out[0].sum().backward()

    def run_fn2(tensor1, tensor2):
        return tensor1

    input_var = randn(1, 4, requires_grad=False)
    input_var2 = randn(1, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"none of output has requires_grad=True, this checkpoint\(\) is not necessary"):
        out = engine.checkpoint(run_fn2, input_var, input_var2, use_reentrant=True)
        out.sum().backward()


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_not_preserve_rng_state(use_reentrant):
    """Port of test_utils.py TestCheckpoint.test_checkpoint_not_preserve_rng_state_and_without_reentrant
    (on the cpu: torch runs it on an accelerator)."""
    inp = randn(2).requires_grad_()
    out = engine.checkpoint(lambda x: ops.dropout(x, 0.5), inp, use_reentrant=use_reentrant,
                            preserve_rng_state=False)
    out.sum().backward()
