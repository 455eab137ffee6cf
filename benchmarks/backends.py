"""The libraries a benchmark can run, behind one small graph-building vocabulary.

Every backend offers ``tanh``, ``mul``, ``add``, ``sum`` (the ops the elementwise graphs use),
``leaf``/``const`` to make inputs, and :meth:`Backend.sample`, which builds one graph (timed as
forward) and runs its backward (timed separately) and returns both times and the leaf's
gradient. The graph builders below (:func:`build_chain`, :func:`build_wide`) take a backend
and work unchanged for all of them, so every library runs exactly the same op sequence.

* :class:`Ours` - threadgrad (always present).
* :class:`Torch` - PyTorch, when importable.
* :class:`Autograd` - HIPS autograd, when importable. It is functional: the graph is traced
  while ``make_vjp`` runs the forward (timed as forward), and calling the returned vjp is the
  backward.
* :class:`MyGrad` - MyGrad, when importable (default settings, memory guarding included).

Peers are optional: :func:`available_backends` returns the ones that import, and a missing
one just drops its column from the reports.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy

from _common import gc_paused, try_import_torch  # noqa: E402 - _common loads this checkout's threadgrad

from threadgrad import engine  # noqa: E402
from threadgrad import ops  # noqa: E402

SHAPE = (16,)
C = 1.5   # chain constant: x -> 1.5 * tanh(x) has a stable fixed point, so values stay O(1)
C1, C2 = 0.7, 1.3

PEER_NAMES = ("torch", "autograd", "mygrad")


def make_inputs(seed: int = 0) -> tuple:
    """The leaf's values and the three constants used by the chain and wide graphs."""
    rng = numpy.random.default_rng(seed)
    return (rng.standard_normal(SHAPE), numpy.full(SHAPE, C), numpy.full(SHAPE, C1), numpy.full(SHAPE, C2))


# --- graphs (backend-generic) --------------------------------------------------------------

def build_chain(b: Any, x: Any, c: Any, n: int) -> Any:
    """``n`` ops alternating ``x = tanh(x)`` and ``x = x * c``."""
    tanh, mul = b.tanh, b.mul
    for i in range(n):
        x = tanh(x) if i % 2 == 0 else mul(x, c)
    return x


def build_wide(b: Any, x: Any, c1: Any, c2: Any, branches: int) -> Any:
    """``branches`` branches ``tanh(x * c1) * c2`` summed by a balanced tree of adds, then ``sum``."""
    tanh, mul, add = b.tanh, b.mul, b.add
    outs = [mul(tanh(mul(x, c1)), c2) for _ in range(branches)]
    while len(outs) > 1:
        nxt = [add(outs[i], outs[i + 1]) for i in range(0, len(outs) - 1, 2)]
        if len(outs) % 2:
            nxt.append(outs[-1])
        outs = nxt
    return b.sum(outs[0])


def wide_op_count(branches: int) -> int:
    return 3 * branches + (branches - 1) + 1


# --- backends ------------------------------------------------------------------------------

# Note [Warm samples]
# ~~~~~~~~~~~~~~~~~~~
# Libraries measured side by side in one process leave each other's heap and caches behind.
# Measured on the 10,000-op chain (this machine, 2026-11-22, three processes each): right
# after a torch sample, threadgrad's forward took 1.57-1.59 us/op and torch's 1.29-1.30;
# each after an untimed sample of its own, threadgrad took 1.35-1.40 and torch 1.38-1.66;
# each alone in its own process (isolated.py), threadgrad took 1.29-1.34 and torch 1.54-1.67.
# threadgrad pays for following torch, and torch gains from following threadgrad, by 15-25%
# each: more than the differences the targets judge. No program alternates two autograd
# libraries op by op, so the side-by-side workloads time each sample right after an untimed
# one of the same library and size (``warm=True``): every library is measured in the state
# its own work leaves. Repeats still alternate libraries, so a slow phase of the machine
# still moves both samples of a repeat.

class Backend:
    """Base: a leaf/const factory, the op vocabulary, and one timed forward + backward."""

    name = "?"
    version = ""

    def leaf(self, a: numpy.ndarray) -> Any:
        raise NotImplementedError

    def const(self, a: numpy.ndarray) -> Any:
        raise NotImplementedError

    def backward(self, y: Any) -> None:
        y.backward()

    def grad_numpy(self, x: Any) -> numpy.ndarray:
        raise NotImplementedError

    def sample(self, build: Callable[[Any, Any], Any], xa: numpy.ndarray,
               probe: Callable[[Any], None] | None = None, warm: bool = False) -> tuple[float, float, numpy.ndarray]:
        """Build ``build(self, leaf)`` (timed: forward), then backward from it (timed apart).

        ``probe(y)`` runs between the two timed regions (e.g. to count nodes). The cyclic
        GC is collected before and off during both; the graph is freed after the timing.
        With ``warm``, the same sample first runs once untimed: see Note [Warm samples].
        Returns ``(forward_s, backward_s, leaf gradient)``.
        """
        if warm:
            self._sample(build, xa, None)
        return self._sample(build, xa, probe)

    def _sample(self, build: Callable[[Any, Any], Any], xa: numpy.ndarray,
                probe: Callable[[Any], None] | None) -> tuple[float, float, numpy.ndarray]:
        x = self.leaf(xa)
        with gc_paused():
            t0 = time.perf_counter()
            y = build(self, x)
            t1 = time.perf_counter()
            if probe is not None:
                probe(y)
            t2 = time.perf_counter()
            self.backward(y)
            t3 = time.perf_counter()
        g = self.grad_numpy(x)
        del x, y  # the graph is freed here, outside the timed regions
        return t1 - t0, t3 - t2, g


class Ours(Backend):
    name = "threadgrad"

    def __init__(self) -> None:
        self.tanh = ops.tanh
        self.mul = ops.mul
        self.add = ops.add
        self.sum = ops.sum
        self.no_grad = engine.no_grad

    def leaf(self, a: numpy.ndarray) -> Any:
        return engine.tensor(a, dtype=a.dtype, requires_grad=True)

    def const(self, a: numpy.ndarray) -> Any:
        return engine.tensor(a, dtype=a.dtype)

    def grad_numpy(self, x: Any) -> numpy.ndarray:
        return numpy.array(x.grad._data)


class Torch(Backend):
    name = "torch"

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.version = torch.__version__
        self.tanh = torch.tanh
        self.mul = torch.mul
        self.add = torch.add
        self.sum = torch.sum
        self.no_grad = torch.no_grad

    def leaf(self, a: numpy.ndarray) -> Any:
        return self.torch.tensor(a, requires_grad=True)

    def const(self, a: numpy.ndarray) -> Any:
        return self.torch.tensor(a)

    def grad_numpy(self, x: Any) -> numpy.ndarray:
        return x.grad.detach().numpy().copy()


class Autograd(Backend):
    """HIPS autograd: ``make_vjp`` traces the forward; the vjp it returns is the backward."""

    name = "autograd"

    def __init__(self, anp: Any, make_vjp: Any, version: str) -> None:
        self.anp = anp
        self.make_vjp = make_vjp
        self.version = version
        self.tanh = anp.tanh
        self.mul = anp.multiply
        self.add = anp.add
        self.sum = anp.sum

    def leaf(self, a: numpy.ndarray) -> Any:
        return a

    def const(self, a: numpy.ndarray) -> Any:
        return a

    def _sample(self, build: Callable[[Any, Any], Any], xa: numpy.ndarray,
                probe: Callable[[Any], None] | None) -> tuple[float, float, numpy.ndarray]:
        with gc_paused():
            t0 = time.perf_counter()
            vjp, ans = self.make_vjp(lambda x: build(self, x), xa)
            t1 = time.perf_counter()
            g = vjp(numpy.ones_like(ans))
            t2 = time.perf_counter()
        del vjp, ans
        return t1 - t0, t2 - t1, numpy.array(g)


class MyGrad(Backend):
    name = "mygrad"

    def __init__(self, mg: Any) -> None:
        self.mg = mg
        self.version = mg.__version__
        self.tanh = mg.tanh
        self.mul = mg.multiply
        self.add = mg.add
        self.sum = mg.sum

    def leaf(self, a: numpy.ndarray) -> Any:
        return self.mg.tensor(a)

    def const(self, a: numpy.ndarray) -> Any:
        return self.mg.tensor(a, constant=True)

    def grad_numpy(self, x: Any) -> numpy.ndarray:
        return numpy.array(x.grad)


def try_autograd() -> Autograd | None:
    try:
        import autograd  # noqa: PLC0415
        import autograd.numpy as anp  # noqa: PLC0415
        from autograd.core import make_vjp  # noqa: PLC0415
    except Exception:
        return None
    try:
        from importlib.metadata import version  # noqa: PLC0415

        ver = version("autograd")
    except Exception:
        ver = getattr(autograd, "__version__", "?")
    return Autograd(anp, make_vjp, ver)


def try_mygrad() -> MyGrad | None:
    try:
        import mygrad  # noqa: PLC0415
    except Exception:
        return None
    return MyGrad(mygrad)


def available_backends(skip: tuple[str, ...] = ()) -> list[Backend]:
    """threadgrad first, then every importable peer not in ``skip``."""
    out: list[Backend] = [Ours()]
    if "torch" not in skip:
        torch = try_import_torch()
        if torch is not None:
            out.append(Torch(torch))
    if "autograd" not in skip:
        a = try_autograd()
        if a is not None:
            out.append(a)
    if "mygrad" not in skip:
        m = try_mygrad()
        if m is not None:
            out.append(m)
    return out
