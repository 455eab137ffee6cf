"""Saved-tensor hooks (every save passes the one choke point) and anomaly mode."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from threadgrad import engine, ops


def test_pack_and_unpack_see_every_saved_tensor():
    packed, unpacked = [], []

    def pack(t):
        packed.append(t)
        return len(packed) - 1

    def unpack(i):
        unpacked.append(i)
        return packed[i]

    x = engine.tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)
    with engine.saved_tensors_hooks(pack, unpack):
        y = ops.exp(x * x)  # MulBackward0 saves x twice, ExpBackward0 saves its output
    assert len(packed) == 3
    y.sum().backward()
    assert sorted(unpacked) == [0, 1, 2]
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.detach().numpy() * np.exp(x.detach().numpy() ** 2))


@pytest.mark.timeout(30)
def test_hooks_are_thread_local_and_nest():
    outer, inner = [], []
    with engine.saved_tensors_hooks(lambda t: outer.append(1) or t, lambda t: t):
        with engine.saved_tensors_hooks(lambda t: inner.append(1) or t, lambda t: t):
            x = engine.ones(2, requires_grad=True)
            ops.exp(x)
        ops.exp(x)
        seen_elsewhere = []
        th = threading.Thread(target=lambda: seen_elsewhere.append(len(outer)) or ops.exp(x))
        th.start()
        th.join()
    assert inner == [1] and outer == [1]  # the other thread's exp was not hooked


def test_hooks_with_custom_function_saves():
    class Mul3(engine.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 3.0

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3.0

    packed = []
    with engine.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        Mul3.apply(engine.ones(2, requires_grad=True))
    assert len(packed) == 1


def test_unpack_hook_returning_a_non_tensor_raises_type_error_naming_the_node():
    x = engine.ones(2, requires_grad=True)
    with engine.saved_tensors_hooks(lambda t: t, lambda t: "oops"):
        y = ops.exp(x)
    with pytest.raises(TypeError, match="saved-tensor unpack hook returned str in ExpBackward0"):
        y.sum().backward()


def test_save_on_cpu_moves_device_tensors_to_host_and_back():
    x = engine.tensor([1.0, 2.0], dtype=np.float64, device="virtual:1", requires_grad=True)
    with engine.save_on_cpu():
        y = ops.exp(x)
    saved = y.grad_fn._saved[0]
    assert saved.packed[0] is not None and not np.shares_memory(saved.packed[1], y._data)
    y.sum().backward()
    assert x.grad.device == "virtual:1"
    np.testing.assert_allclose(x.grad.numpy(), np.exp([1.0, 2.0]))


def test_anomaly_nan_names_the_node_and_engine_recovers():
    x = engine.tensor([0.0, 1.0], requires_grad=True)
    with engine.detect_anomaly():
        y = ops.sqrt(x) * 0.0  # sqrt backward at 0: 0 * inf = nan
        with pytest.raises(RuntimeError, match=r"Function 'SqrtBackward0' returned nan values in its 0th output"):
            with np.errstate(all="ignore"):
                y.sum().backward()
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_without_anomaly_nan_propagates_silently():
    x = engine.tensor([0.0], requires_grad=True)
    with np.errstate(all="ignore"):
        (ops.sqrt(x) * 0.0).sum().backward()
    assert np.isnan(x.grad.numpy()).all()


def test_anomaly_attaches_the_forward_traceback_to_errors_in_backward():
    class Boom(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            raise KeyError("no such key")

    x = engine.ones(1, requires_grad=True)
    with engine.detect_anomaly():
        y = Boom.apply(x)  # this line must appear in the note
    with pytest.raises(KeyError) as info:
        y.sum().backward()
    notes = "".join(getattr(info.value, "__notes__", []))
    assert "BoomBackward" in str(info.value)
    assert "Traceback of forward call that caused the error" in notes
    assert "y = Boom.apply(x)  # this line must appear in the note" in notes


@pytest.mark.timeout(30)
def test_anomaly_mode_is_thread_local_and_set_detect_anomaly_restores():
    assert not engine.is_anomaly_enabled()
    with engine.set_detect_anomaly(True):
        assert engine.is_anomaly_enabled()
        other = []
        th = threading.Thread(target=lambda: other.append(engine.is_anomaly_enabled()))
        th.start()
        th.join()
        assert other == [False]
    assert not engine.is_anomaly_enabled()


def test_nodes_record_a_trace_only_in_anomaly_mode():
    x = engine.ones(1, requires_grad=True)
    assert "traceback_" not in (x * 2).grad_fn.metadata
    with engine.detect_anomaly():
        assert "traceback_" in (x * 2).grad_fn.metadata


@pytest.mark.timeout(60)
def test_features_first_switched_on_in_a_fresh_process_take_effect() -> None:
    """Note [Used flags]: recording skips the anomaly and saved-hooks thread-locals until a
    thread first switches one on. In a fresh process (flags unset), the first use, on a
    thread other than the one that recorded before, must still take effect."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import threading
        from threadgrad import engine, ops
        from threadgrad.engine._state import used
        x = engine.tensor([0.5], requires_grad=True)
        ops.tanh(x)  # recorded with both flags unset
        assert not used.anomaly and not used.saved_hooks
        seen = []
        def worker():
            with engine.saved_tensors_hooks(lambda t: seen.append("pack") or t, lambda p: p):
                y = ops.tanh(x)
            with engine.detect_anomaly():
                z = ops.exp(x)
            seen.append("traceback_" in z.grad_fn.metadata)
            y.sum().backward()
        t = threading.Thread(target=worker)
        t.start(); t.join()
        assert seen == ["pack", True], seen
        assert abs(x.grad.item() - (1 - __import__("math").tanh(0.5) ** 2)) < 1e-6
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=50)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("first_use", ["a node switches anomaly mode on", "check_nan off alone"])
def test_backward_state_in_a_fresh_process_before_and_after_features_are_first_used(first_use: str) -> None:
    """Note [Used flags] in the executor: while no thread has used anomaly mode or saved-tensor
    hooks, a GraphTask captures, and _thread_main saves and restores, nothing of them. A node
    that first switches anomaly mode on mid-backward must still find the caller's state
    restored afterwards, and a caller's check_nan=False (anomaly mode off), the first use of the
    feature, must reach the worker."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import sys
        from threadgrad import engine, ops
        from threadgrad.engine._state import used

        seen = []

        class Probe(engine.Function):
            @staticmethod
            def forward(ctx, x, switch_on):
                ctx.switch_on = switch_on
                return x * 1.0

            @staticmethod
            def backward(ctx, g):
                seen.append((engine.is_anomaly_enabled(), engine.anomaly.is_anomaly_check_nan_enabled(),
                             engine.is_grad_enabled()))
                if ctx.switch_on:
                    engine.set_detect_anomaly(True)  # left on: the executor must restore the caller's
                return g * 2.0, None

        x = engine.tensor([1.0, 2.0], requires_grad=True)
        Probe.apply(ops.to(x, "virtual:1"), False).sum().backward()  # runs on virtual:1's worker
        assert not used.anomaly and not used.saved_hooks
        assert seen == [(False, True, False)], seen
        if sys.argv[1] == "switch":
            Probe.apply(x, True).sum().backward()  # runs on this thread, leaves anomaly mode on
            assert used.anomaly
            assert engine.is_anomaly_enabled() is False
            assert engine.anomaly.is_anomaly_check_nan_enabled() is True
        else:
            engine.set_detect_anomaly(False, check_nan=False)
            Probe.apply(ops.to(x, "virtual:1"), False).sum().backward()
            assert seen[1:] == [(False, False, False)], seen
        assert x.grad.tolist() == [4.0, 4.0]
        print("ok")
    """)
    arg = "switch" if first_use.startswith("a node") else "check_nan"
    out = subprocess.run([sys.executable, "-c", script, arg], capture_output=True, text=True, timeout=50)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
