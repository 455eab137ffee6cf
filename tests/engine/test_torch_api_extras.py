"""API torch users reach for (issue 17): Tensor.output_nr, Tensor.detach_(),
disable_saved_tensors_hooks, Function.setup_context. Expected behaviour is torch 2.13's."""
from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest

from threadgrad import engine, ops


def test_output_nr():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    a, b = ops.split(y, 1)
    assert (x.output_nr, y.output_nr, a.output_nr, b.output_nr) == (0, 0, 0, 1)


def test_detach_in_place_makes_a_leaf_without_grad():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    z = x * 3
    v0 = z.version
    assert z.detach_() is z
    assert z.grad_fn is None and not z.requires_grad and z.is_leaf and z.version == v0
    w = engine.tensor([1.0], requires_grad=True)
    w.detach_()
    assert not w.requires_grad


def test_detach_in_place_refuses_a_view():
    """torch's Variable::detach_ refuses views with this message."""
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    v = y[0:1]
    with pytest.raises(RuntimeError, match="Can't detach views in-place. Use detach\\(\\) instead."):
        v.detach_()
    d = y.detach()  # a detach() alias is no view
    assert d.detach_() is d


def test_disable_saved_tensors_hooks():
    """As torch.autograd.graph.disable_saved_tensors_hooks: nests, and refuses hooks either way round."""
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with engine.disable_saved_tensors_hooks("no hooks here"):
        with pytest.raises(RuntimeError, match="no hooks here"):
            with engine.saved_tensors_hooks(lambda t: t, lambda t: t):
                pass
        (x * x).sum().backward()  # ops still save and backward works
        with engine.disable_saved_tensors_hooks("inner"):
            with pytest.raises(RuntimeError, match="inner"):
                with engine.saved_tensors_hooks(lambda t: t, lambda t: t):
                    pass
        with pytest.raises(RuntimeError, match="no hooks here"):  # the outer one again
            with engine.saved_tensors_hooks(lambda t: t, lambda t: t):
                pass
    with engine.saved_tensors_hooks(lambda t: t, lambda t: t):  # enabled again
        with pytest.raises(RuntimeError, match="off"):
            with engine.disable_saved_tensors_hooks("off"):
                pass
    assert x.grad.tolist() == [2.0, 4.0]


@pytest.mark.timeout(30)
def test_disable_saved_tensors_hooks_is_per_thread():
    seen = []
    with engine.disable_saved_tensors_hooks("here only"):
        def other():
            with engine.saved_tensors_hooks(lambda t: t, lambda t: t):
                seen.append("entered")
        th = threading.Thread(target=other)
        th.start()
        th.join(10)
    assert seen == ["entered"]


class _TryHooks(engine.Function):
    """The identity; its backward waits at ``ctx.barrier`` (if any), tries to enter
    saved_tensors_hooks and logs (thread name, what happened)."""

    @staticmethod
    def forward(ctx, x, barrier, log):
        ctx.barrier, ctx.log = barrier, log
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if ctx.barrier is not None:
            ctx.barrier.wait(20)
        try:
            with engine.saved_tensors_hooks(lambda t: t, lambda t: t):
                pass
            what = "entered"
        except RuntimeError as e:
            what = str(e)
        ctx.log.append((threading.current_thread().name, what))
        return g, None, None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["virtual:1 worker", "cpu worker", "async"])
def test_disable_saved_tensors_hooks_follows_the_backward_to_its_threads(where):
    """torch's engine carries the caller's thread-local state, disable_saved_tensors_hooks's
    message included (SavedTensorDefaultHooksTLS), to whichever thread runs a node: a node run
    by a device worker, a parallel cpu worker or the pool thread of an async backward refuses
    saved-tensor hooks as it would on the caller's thread. Afterwards those threads are clean."""
    from threadgrad import autograd

    def run(disabled):
        log = []
        if where == "virtual:1 worker":
            x = engine.tensor([1.0, 2.0], device="virtual:1", requires_grad=True)
            loss = _TryHooks.apply(x * 2.0, None, log).sum()
        else:
            barrier = threading.Barrier(2) if where == "cpu worker" else None
            x = engine.tensor([1.0, 2.0], requires_grad=True)
            loss = (_TryHooks.apply(x * 2.0, barrier, log).sum()
                    + _TryHooks.apply(x * 3.0, barrier, log).sum())
        with engine.disable_saved_tensors_hooks("off here") if disabled else contextlib.nullcontext():
            if where == "async":
                engine.backward_async(loss).result(30)
            else:
                loss.backward()
        return log, x.grad.tolist()

    prev = autograd.set_cpu_workers(1 if where == "cpu worker" else 0)
    try:
        log, grad = run(True)
        assert [what for _, what in log] == ["off here"] * len(log) and log
        assert grad == ([2.0, 2.0] if where == "virtual:1 worker" else [5.0, 5.0])
        caller = threading.current_thread().name
        assert any(name != caller for name, _ in log)  # a node did run on another thread
        log, _ = run(False)  # the same threads, now outside the region: hooks allowed
        assert [what for _, what in log] == ["entered"] * len(log) and log
    finally:
        autograd.set_cpu_workers(prev)


class _Scale(engine.Function):
    @staticmethod
    def forward(a, k):
        return a * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, k = inputs
        ctx.save_for_backward(a)
        ctx.k = k

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * ctx.k * 1.0, None


def test_setup_context_forward_without_ctx():
    """torch's Function with a separate setup_context: forward takes no ctx."""
    x = engine.tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)
    y = _Scale.apply(x, 3.0)
    assert y.grad_fn.name() == "_ScaleBackward"
    y.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
    assert engine.gradcheck(lambda t: _Scale.apply(t, 2.5), (x,))


def test_setup_context_with_a_ctx_forward_is_called_without_ctx():
    """As in torch: defining setup_context means forward is called without ctx."""
    class G(engine.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(TypeError):
        G.apply(engine.tensor([1.0], requires_grad=True))


def test_setup_context_can_mark_outputs():
    class Twice(engine.Function):
        @staticmethod
        def forward(a):
            return a * 2, (a > 0)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.mark_non_differentiable(output[1])

        @staticmethod
        def backward(ctx, g, g_mask):
            return g * 2

    x = engine.tensor([1.0, -1.0], requires_grad=True)
    y, mask = Twice.apply(x)
    assert not mask.requires_grad
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_function_without_forward_or_backward_raises_torchs_words():
    class NoForward(engine.Function):
        pass

    with pytest.raises(NotImplementedError, match="You must implement the forward function for custom autograd.Function."):
        NoForward.apply(engine.tensor([1.0], requires_grad=True))

    class NoBackward(engine.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

    y = NoBackward.apply(engine.tensor([1.0], requires_grad=True))
    with pytest.raises(NotImplementedError, match="You must implement either the backward or vjp method"):
        y.sum().backward()


def test_assigning_a_tensor_as_its_own_grad_raises():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="can't assign Variable as its own grad"):
        x.grad = x


def test_function_node_has_edges_for_tensor_arguments_only():
    """Issue 17 H: as torch, a custom Function's node has one edge per tensor argument, so
    next_functions and its post-hooks' grad_inputs have no slots for other arguments."""
    class F(engine.Function):
        @staticmethod
        def forward(ctx, a, k, b):
            return a * k + b

        @staticmethod
        def backward(ctx, g):
            return g * 2, None, g

    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = engine.tensor([1.0, 2.0], requires_grad=True)
    out = F.apply(x, 3.0, y)
    nf = out.grad_fn.next_functions
    assert len(nf) == 2 and nf[0][0].variable is x and nf[1][0].variable is y
    seen = []
    out.grad_fn.register_hook(lambda gi, go: seen.append((len(gi), len(go), [g.tolist() for g in gi])))
    out.sum().backward()
    assert seen == [(2, 1, [[2.0, 2.0], [1.0, 1.0]])]
    assert x.grad.tolist() == [2.0, 2.0] and y.grad.tolist() == [1.0, 1.0]


def test_function_returning_a_gradient_for_a_non_tensor_argument_raises():
    class F(engine.Function):
        @staticmethod
        def forward(ctx, a, k):
            return a * k

        @staticmethod
        def backward(ctx, g):
            return g, g

    x = engine.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="returned a gradient different than None at position 1"):
        F.apply(x, 2.0).sum().backward()


def test_multi_grad_hook_all_gets_none_for_tensors_not_reached():
    """torch.autograd.graph.register_multi_grad_hook(mode="all"), values as torch 2.13's."""
    a = engine.tensor([1.0, 2.0], requires_grad=True)
    b = engine.tensor([3.0], requires_grad=True)
    log = []
    h = engine.register_multi_grad_hook((a, b), lambda gs: log.append([None if g is None else g.tolist() for g in gs]))
    (a * 2).sum().backward()
    assert log == [[[2.0, 2.0], None]]
    log.clear()
    (a.sum() * b).sum().backward()
    assert log == [[[3.0, 3.0], [3.0]]]
    log.clear()
    h.remove()
    (a * 2).sum().backward()
    assert log == []


def test_multi_grad_hook_any_runs_once_per_call():
    a = engine.tensor([1.0, 2.0], requires_grad=True)
    b = engine.tensor([3.0], requires_grad=True)
    log = []
    engine.register_multi_grad_hook((a, b), lambda g: log.append(g.tolist()), mode="any")
    (b * 7).sum().backward()
    (a.sum() * b).sum().backward()
    assert len(log) == 2 and log[0] == [7.0]
    with pytest.raises(ValueError, match="Expects mode to be one of \\('all', 'any'\\) but got bad"):
        engine.register_multi_grad_hook((a,), lambda g: None, mode="bad")


@pytest.mark.timeout(60)
def test_multi_grad_hook_all_with_concurrent_calls_on_a_device():
    """Each concurrent backward call has its own state; grads are gathered from the device worker."""
    a = engine.tensor([1.0, 2.0], device="virtual:1", requires_grad=True)
    b = engine.tensor([3.0, 4.0], requires_grad=True)
    seen = []
    lock = threading.Lock()

    def fn(gs):
        with lock:
            seen.append(tuple(g.tolist() for g in gs))

    engine.register_multi_grad_hook((a, b), fn)
    y = (ops.to(a, "cpu") * b).sum()
    threads = [threading.Thread(target=lambda: [y.backward(retain_graph=True) for _ in range(5)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert seen == [([3.0, 4.0], [1.0, 2.0])] * 20
    assert a.grad.tolist() == [60.0, 80.0] and b.grad.tolist() == [20.0, 40.0]


def test_set_cpu_workers_returns_the_previous_value_and_refuses_bad_counts(workers):
    # the workers fixture starts the test at n = 0 and puts back the suite's n afterwards
    # (THREADGRAD_TEST_CPU_WORKERS): resetting to 0 here ran the rest of that suite serially
    import threadgrad as tg
    assert tg.autograd.set_cpu_workers(0) == 0 and engine.set_cpu_workers(0) == 0
    assert tg.autograd.set_cpu_workers(2) == 0
    assert engine.set_cpu_workers(1) == 2
    assert engine.get_engine().cpu_workers == 1
    for bad in (-1, True, 1.0, "2"):
        with pytest.raises(ValueError, match="n must be an int >= 0"):
            engine.set_cpu_workers(bad)
    assert engine.get_engine().cpu_workers == 1  # a refused call changes nothing
