"""Thread-local grad mode: no_grad, enable_grad, set_grad_enabled, is_grad_enabled."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from threadgrad import engine, ops


def leaf():
    return engine.tensor([1.0, 2.0], requires_grad=True)


def test_default_is_enabled():
    assert engine.is_grad_enabled() is True
    assert (leaf() * 2).requires_grad


def test_no_grad_context_manager():
    x = leaf()
    with engine.no_grad():
        assert engine.is_grad_enabled() is False
        y = x * 2
    assert engine.is_grad_enabled() is True
    assert not y.requires_grad and y.grad_fn is None and y.is_leaf
    assert y.tolist() == [2.0, 4.0]
    assert (x * 2).requires_grad


def test_enable_grad_inside_no_grad():
    x = leaf()
    with engine.no_grad():
        with engine.enable_grad():
            assert engine.is_grad_enabled()
            y = x * 2
        assert not engine.is_grad_enabled()
        z = x * 2
    assert y.requires_grad and y.grad_fn.name() == "MulBackward0"
    assert not z.requires_grad


def test_nested_no_grad_restores_outer_state():
    with engine.no_grad():
        with engine.no_grad():
            assert not engine.is_grad_enabled()
        assert not engine.is_grad_enabled()
    assert engine.is_grad_enabled()


def test_context_restores_state_after_exception():
    with pytest.raises(KeyError):
        with engine.no_grad():
            raise KeyError("x")
    assert engine.is_grad_enabled()
    with engine.no_grad():
        with pytest.raises(KeyError):
            with engine.enable_grad():
                raise KeyError("y")
        assert not engine.is_grad_enabled()


def test_set_grad_enabled_as_function():
    x = leaf()
    engine.set_grad_enabled(False)
    try:
        assert engine.is_grad_enabled() is False
        assert not (x * 2).requires_grad
        engine.set_grad_enabled(True)
        assert engine.is_grad_enabled() is True
        assert (x * 2).requires_grad
    finally:
        engine.set_grad_enabled(True)


def test_set_grad_enabled_as_context_manager():
    x = leaf()
    with engine.set_grad_enabled(False):
        assert not engine.is_grad_enabled()
        assert not (x * 2).requires_grad
    assert engine.is_grad_enabled()
    with engine.no_grad():
        with engine.set_grad_enabled(True):
            assert engine.is_grad_enabled()
            assert (x * 2).requires_grad
        assert not engine.is_grad_enabled()


def test_no_grad_and_enable_grad_as_decorators():
    x = leaf()

    @engine.no_grad()
    def f(t):
        assert not engine.is_grad_enabled()
        return t * 2

    @engine.enable_grad()
    def g(t):
        assert engine.is_grad_enabled()
        return t * 3

    y = f(x)
    assert not y.requires_grad
    assert engine.is_grad_enabled()
    with engine.no_grad():
        z = g(x)
        assert not engine.is_grad_enabled()
    assert z.requires_grad
    assert f.__name__ == "f" and g.__name__ == "g"  # functools.wraps


def test_decorator_restores_mode_when_function_raises():
    @engine.no_grad()
    def f():
        raise ValueError("inner")

    with pytest.raises(ValueError, match="inner"):
        f()
    assert engine.is_grad_enabled()


def test_no_grad_and_enable_grad_as_bare_decorators():
    """torch.no_grad / torch.enable_grad also decorate without parentheses."""
    x = leaf()

    @engine.no_grad
    def f(t):
        return t * 2

    @engine.enable_grad
    def g(t):
        return t * 2

    assert not f(x).requires_grad
    with engine.no_grad():
        assert g(x).requires_grad
    assert engine.is_grad_enabled()


def test_set_grad_enabled_as_decorator_does_not_switch_mode_at_definition():
    """torch.set_grad_enabled(False) used as a decorator restores the mode right away
    (the switch made by its constructor) and applies it only while the function runs."""

    @engine.set_grad_enabled(False)
    def f():
        return engine.is_grad_enabled()

    try:
        assert engine.is_grad_enabled() is True  # decorating must not disable grad here
        assert f() is False
        assert engine.is_grad_enabled() is True
    finally:
        engine.set_grad_enabled(True)


def test_no_grad_decorates_generator_functions():
    """Like torch: the mode applies each time the generator body runs, not only while the
    generator object is created."""
    x = leaf()

    @engine.no_grad()
    def gen():
        for _ in range(2):
            yield engine.is_grad_enabled(), (x * 2).requires_grad

    assert list(gen()) == [(False, False), (False, False)]
    assert engine.is_grad_enabled()


# --- thread locality ----------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_no_grad_on_another_thread_does_not_affect_this_one():
    x = leaf()
    inside = threading.Event()
    release = threading.Event()
    seen = {}

    def worker():
        with engine.no_grad():
            inside.set()
            assert release.wait(30)
            seen["enabled"] = engine.is_grad_enabled()
            seen["rg"] = (x * 2).requires_grad
        seen["after"] = engine.is_grad_enabled()

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert inside.wait(30)
        # The other thread is inside no_grad right now.
        assert engine.is_grad_enabled() is True
        y = x * 2
        assert y.requires_grad and y.grad_fn.name() == "MulBackward0"
    finally:
        release.set()
        t.join(30)
    assert seen == {"enabled": False, "rg": False, "after": True}


@pytest.mark.timeout(60)
def test_no_grad_here_does_not_affect_other_threads():
    x = leaf()
    seen = {}
    barrier = threading.Barrier(2)

    def worker():
        barrier.wait(30)  # main is inside no_grad now
        seen["enabled"] = engine.is_grad_enabled()
        seen["rg"] = (x * 2).requires_grad
        barrier.wait(30)

    t = threading.Thread(target=worker)
    t.start()
    with engine.no_grad():
        barrier.wait(30)
        barrier.wait(30)  # the worker has recorded its state
        assert not engine.is_grad_enabled()
        assert not (x * 2).requires_grad
    t.join(30)
    assert seen == {"enabled": True, "rg": True}


@pytest.mark.timeout(60)
def test_set_grad_enabled_function_is_thread_local():
    go = threading.Event()
    done = threading.Event()
    seen = {}

    def worker():
        engine.set_grad_enabled(False)
        go.set()
        assert done.wait(30)
        seen["worker"] = engine.is_grad_enabled()

    t = threading.Thread(target=worker)
    t.start()
    assert go.wait(30)
    seen["main"] = engine.is_grad_enabled()
    done.set()
    t.join(30)
    assert seen == {"main": True, "worker": False}


@pytest.mark.timeout(60)
def test_new_thread_starts_with_grad_enabled():
    seen = []
    with engine.no_grad():
        t = threading.Thread(target=lambda: seen.append(engine.is_grad_enabled()))
        t.start()
        t.join(30)
    assert seen == [True]


@pytest.mark.timeout(60)
def test_many_threads_toggling_record_only_their_own_mode(run_in_threads):
    x = leaf()

    def body(i):
        out = []
        for k in range(200):
            want = (i + k) % 2 == 0
            with engine.set_grad_enabled(want):
                y = x * 2
                out.append(y.requires_grad == want and engine.is_grad_enabled() == want)
        return all(out)

    assert run_in_threads(8, body) == [True] * 8


# --- grad mode inside backward ------------------------------------------------------------

def test_backward_runs_nodes_with_grad_mode_equal_to_create_graph():
    seen = []
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * x
    h.register_hook(lambda g: seen.append(engine.is_grad_enabled()))
    h.sum().backward(retain_graph=True)
    h.sum().backward(create_graph=True)
    assert seen == [False, True]
    assert engine.is_grad_enabled()  # the caller's mode is restored


def test_backward_inside_no_grad_works_and_keeps_caller_mode():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    with engine.no_grad():
        y.backward()
        assert not engine.is_grad_enabled()
    assert x.grad.tolist() == [2.0, 4.0]


# --- the process-wide record of threads with grad mode off (Note [Grad mode fast path]) ---

def test_grad_off_threads_holds_exactly_the_threads_with_grad_mode_off_now():
    from threadgrad.engine._state import grad_off_threads
    me = threading.get_ident()
    assert me not in grad_off_threads
    with engine.no_grad():
        assert me in grad_off_threads
        with engine.enable_grad():
            assert me not in grad_off_threads
        assert me in grad_off_threads
    assert me not in grad_off_threads
    engine.set_grad_enabled(False)
    try:
        assert me in grad_off_threads and not engine.is_grad_enabled()
    finally:
        engine.set_grad_enabled(True)
    assert me not in grad_off_threads
    with pytest.raises(ValueError):
        with engine.no_grad():
            raise ValueError
    assert me not in grad_off_threads


@pytest.mark.timeout(60)
def test_a_thread_that_ends_with_grad_mode_off_leaves_no_entry_behind():
    # Otherwise every op of every other thread reads the thread-local for the rest of the process.
    from threadgrad.engine._state import grad_off_threads
    idents = []

    def worker():
        idents.append(threading.get_ident())
        engine.set_grad_enabled(False)
        assert threading.get_ident() in grad_off_threads

    for _ in range(3):
        t = threading.Thread(target=worker)
        t.start()
        t.join(30)
        assert not t.is_alive()
    assert len(idents) == 3
    assert not grad_off_threads.intersection(idents)
    assert not grad_off_threads  # (no other thread of this test process has grad mode off)


@pytest.mark.timeout(60)
def test_ops_on_a_thread_with_grad_on_record_while_another_thread_has_it_off():
    # While the other thread is in no_grad, grad_off_threads is not empty: every op here
    # must read this thread's own mode, and both kinds of result maker must record.
    x = leaf()
    inside, release = threading.Event(), threading.Event()
    seen = {}

    def worker():
        with engine.no_grad():
            inside.set()
            assert release.wait(30)
            seen["worker"] = [ops.tanh(x).requires_grad, (x * 2).requires_grad]

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert inside.wait(30)
        from threadgrad.engine._state import grad_off_threads
        assert grad_off_threads  # the worker's entry
        seen["main"] = [ops.tanh(x).grad_fn.name(), (x * 2).grad_fn.name()]
        with engine.no_grad():
            seen["main_no_grad"] = [ops.tanh(x).grad_fn, (x * 2).grad_fn]
    finally:
        release.set()
        t.join(30)
    assert seen == {"main": ["TanhBackward0", "MulBackward0"], "main_no_grad": [None, None],
                    "worker": [False, False]}


def test_backward_leaves_no_thread_marked_grad_off_on_the_caller():
    from threadgrad.engine._state import grad_off_threads
    x = leaf()
    (x * x).sum().backward()
    assert threading.get_ident() not in grad_off_threads
    with engine.no_grad():
        pass
    assert threading.get_ident() not in grad_off_threads


def test_set_grad_enabled_takes_only_a_bool_as_torch_does():
    for bad in (0, 1, None, "yes"):
        with pytest.raises(TypeError, match=f"set_grad_enabled\\(\\): argument 'mode' \\(position 1\\) must be bool, not {type(bad).__name__}"):
            engine.set_grad_enabled(bad)
        assert engine.is_grad_enabled() is True  # nothing changed


def test_grad_off_threads_is_never_empty_while_this_threads_flag_is_off(monkeypatch):
    # A signal handler can run ops between the descriptor's two steps, so the ident must go in
    # before the flag goes off and come out after it is back on.
    from threadgrad.engine import _state as state
    seen = []

    class Watch(set):
        def add(self, ident):
            seen.append(("add", state.tls.__dict__["grad_enabled"]))
            super().add(ident)

        def discard(self, ident):
            seen.append(("discard", state.tls.__dict__["grad_enabled"]))
            super().discard(ident)

    monkeypatch.setattr(state, "grad_off_threads", Watch())
    with engine.no_grad():
        pass
    assert seen == [("add", True), ("discard", True)]


@pytest.mark.timeout(60)
def test_an_idle_device_worker_turns_grad_mode_back_on():
    # Its task's install turned grad mode off (create_graph=False); once idle, the worker must
    # leave grad_off_threads, or every op in the process reads the thread-local from then on.
    from threadgrad.engine._state import grad_off_threads
    x = engine.ones(3, device="virtual:1", requires_grad=True)
    seen = []
    y = x * 2
    y.register_hook(lambda g: seen.append((threading.get_ident(), engine.is_grad_enabled())))
    ops.tanh(y).sum().backward()
    (worker, enabled), = seen
    assert worker != threading.get_ident() and enabled is False  # the hook ran on virtual:1's worker
    done = threading.Event()
    for _ in range(10_000):  # the worker goes idle after the caller returns: wait for it, boundedly
        if worker not in grad_off_threads:
            break
        done.wait(0.001)
    assert worker not in grad_off_threads
    assert np.allclose(x.grad.numpy(), 2 * (1 - np.tanh(2.0) ** 2))
