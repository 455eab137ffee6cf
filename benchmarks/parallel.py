"""The ``parallel`` workload of the performance suite (issue 21): cpu workers inside one backward,
and threads running backward at the same time, on the GIL build and on free-threaded CPython.

Usage::

    python benchmarks/parallel.py                      # both builds, prints the table
    python benchmarks/parallel.py --quick              # fewer repeats, a shorter chain for e (~30 s)
    python benchmarks/parallel.py --ft-python PATH     # the free-threaded interpreter to use
    python benchmarks/parallel.py --json [--quick]     # one half: this interpreter's raw timings

``run_all.py --only parallel`` runs the same thing inside the suite. Each half runs in a
subprocess of its interpreter (``--json``), started with BLAS pinned to one thread. Every figure
is a ratio measured beside a control doing the same work with the same threads in the same
repeats (raw numpy calls in a Python loop, or raw numpy matmuls), and is reported as the median
of per-repeat ratios. See benchmarks/README.md (workload ``parallel``) and docs/performance.md.

Measurements, for each build:

a. wide graph (workload 2's, 1,000 branches), one backward: 2 cpu workers
   (``set_cpu_workers(1)``: the caller and one helper) vs 1 (``set_cpu_workers(0)``: the caller
   alone). Control: the backward's math as raw numpy calls in a Python loop, the branches split
   over 2 threads vs all on 1. Also the CPU time (every thread) with 2 workers over 1: what
   sharing the nodes costs. a2 (no target): the same with 32 branches of 512 KiB arrays.
b. towers: 8 independent towers of 4 layers ``tanh(h @ W)`` (256x256 float64 W, batch 64)
   summed, one backward, 2 workers vs 1. Control: the towers' backward math in raw numpy
   (its 64 matmuls and the tanh gradients), 4 towers on each of 2 threads vs 8 on 1.
c. 2 threads each running backward on its own tiny-op chain vs 1 thread running both in a row
   (throughput scaling). Control: the chain's backward math as raw numpy calls, same shape.
d. 4 threads calling ``backward(retain_graph=True)`` on one shared tiny-op chain vs the same 4
   calls in a row (total time). Control: the same with the raw-numpy floor's shared closures.
e. single thread: chain backward µs/node. The FT/GIL ratio of this is the build's penalty for
   threadgrad; the control's FT/GIL ratio (the least correct executor of bounds.py: the same
   work as plain Python) is the interpreter's own. The raw-numpy floor and a pure-Python walk
   are shown beside it, not judged.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
             "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy loads; the driver sets them to 1 explicitly

import numpy  # noqa: E402

from _common import ROOT, Row, Table, gc_paused, load_average, median, write_result  # noqa: E402

import threadgrad as tg  # noqa: E402
from threadgrad import engine, ops  # noqa: E402
from backends import Ours, build_chain, build_wide, make_inputs  # noqa: E402
from bounds import least_correct_backward  # noqa: E402
from workloads import (  # noqa: E402
    _BLAS_ENV,
    CHAIN_N,
    TINY_CHAIN,
    WIDE_BRANCHES,
    _blas_summary,
    _minor_faults,
    _run_threads,
    log,
    numpy_floor_chain,
    paired_ratio,
)

TOWERS, TOWER_DEPTH, TOWER_WIDTH, TOWER_BATCH = 8, 4, 256, 64
FLOOR_PASSES = 5  # c, d: a floor call lasts about as long as one threadgrad backward of the chain
BIG_BRANCHES, BIG_SIZE = 32, 65_536  # a2: 512 KiB float64 arrays, well past numpy's GIL-release size
FT_TOOL = os.path.join(os.path.dirname(ROOT), "shared", "tools", "freethreaded-python")

# Targets (issue 21, part 3), each judged on the build named.
TARGET_WIDE_FT = 1.7       # a: free-threaded, 2 workers vs 1 on the wide graph
TARGET_TOWERS_GIL = 1.6    # b: GIL build, 2 workers vs 1 on the towers
TARGET_OWN_CHAINS = 0.9    # c: free-threaded, scaling / the control's scaling
TARGET_SHARED_FT = 0.7     # d: free-threaded, 4 threads / 4 calls in a row (0.5 is 2 cores' floor)
TARGET_PENALTY = 1.1       # e: threadgrad's FT/GIL per-node ratio / the control's


def gil_enabled() -> bool:
    f = getattr(sys, "_is_gil_enabled", None)
    return True if f is None else bool(f())


# --- the graphs and their controls --------------------------------------------------------

def _wide_inputs(size: int | None) -> tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
    """The wide graph's leaf values and constants: workload 2's, or ``size`` elements each."""
    xa, _, c1a, c2a = make_inputs()
    if size is not None:
        xa = numpy.random.default_rng(4).standard_normal(size)
        c1a, c2a = numpy.full(size, c1a[0]), numpy.full(size, c2a[0])
    return xa, c1a, c2a


def _wide_floor(branches: int, size: int | None = None) -> Callable[[int, int], numpy.ndarray]:
    """The wide backward's math as raw numpy, one Python call per op node, no engine:
    ``part(k, step)`` runs branches k, k + step, ... and returns their summed leaf gradient."""
    xa, c1a, c2a = _wide_inputs(size)
    saved = [numpy.tanh(xa * c1a) for _ in range(branches)]  # each branch's own tanh output
    mul2 = lambda g: g * c2a  # noqa: E731
    tanh_bw = lambda g, y: g - g * y * y  # noqa: E731
    mul1 = lambda g: g * c1a  # noqa: E731

    def part(k: int, step: int) -> numpy.ndarray:
        g = numpy.ones_like(xa)
        acc = numpy.zeros_like(xa)
        for i in range(k, branches, step):
            acc = acc + mul1(tanh_bw(mul2(g), saved[i]))
        return acc

    return part


class _Towers:
    """TOWERS towers of TOWER_DEPTH layers ``h = tanh(h @ W)`` from one input, summed, then
    ``sum``; and the same backward as raw numpy (:meth:`floor`)."""

    def __init__(self) -> None:
        rng = numpy.random.default_rng(3)
        self.xa = rng.standard_normal((TOWER_BATCH, TOWER_WIDTH))
        self.Wa = [[rng.standard_normal((TOWER_WIDTH, TOWER_WIDTH)) / numpy.sqrt(TOWER_WIDTH)
                    for _ in range(TOWER_DEPTH)] for _ in range(TOWERS)]
        # The raw-numpy control's saved values: each layer's input and tanh output.
        self.saved = []
        for ws in self.Wa:
            h, layers = self.xa, []
            for w in ws:
                y = numpy.tanh(h @ w)
                layers.append((h, w, y))
                h = y
            self.saved.append(layers)

    def build(self) -> tuple[Any, Any, list[Any]]:
        x = engine.tensor(self.xa, requires_grad=True)
        ws = [[engine.tensor(w, requires_grad=True) for w in t] for t in self.Wa]
        out = None
        for t in ws:
            h = x
            for w in t:
                h = ops.tanh(ops.matmul(h, w))
            out = h if out is None else ops.add(out, h)
        return ops.sum(out), x, ws

    def floor(self, towers: range, kept: list | None = None) -> numpy.ndarray:
        """The backward of ``towers`` in raw numpy: per layer the tanh gradient and two matmuls.
        The weights' gradients go on ``kept``, as the engine keeps them in ``.grad``: fresh memory
        for each, which the caller frees after the timing (it costs page faults on Linux)."""
        gx = numpy.zeros_like(self.xa)
        for t in towers:
            g = numpy.ones((TOWER_BATCH, TOWER_WIDTH))
            for h, w, y in reversed(self.saved[t]):
                g = g - g * y * y
                gw = h.T @ g
                if kept is not None:
                    kept.append(gw)
                g = g @ w.T
            gx = gx + g
        return gx


def _pure_python_chain(n: int) -> Callable[[], float]:
    """A chain walk in pure Python (no numpy): one object and one method call per node, floats.
    An informational control for e: the interpreter's penalty on bytecode alone."""

    class N:
        __slots__ = ("nxt", "c")

        def __init__(self, nxt: Any, c: float) -> None:
            self.nxt, self.c = nxt, c

        def apply(self, g: float) -> float:
            return g * self.c + 0.5 * g

    head = None
    for i in range(n):
        head = N(head, 0.5 + (i % 3) * 0.1)

    def run() -> float:
        g, node = 1.0, head
        while node is not None:
            g = node.apply(g)
            node = node.nxt
        return g

    return run


# --- the half that runs in one interpreter ------------------------------------------------

def _timed(fn: Callable[[], Any]) -> float:
    with gc_paused():
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0


def _timed_cpu(fn: Callable[[], Any]) -> tuple[float, float]:
    """Wall time and this process's CPU time (every thread's) of one call: CPU over wall says
    how many threads were busy, and CPU with 2 workers over CPU with 1 what sharing costs."""
    with gc_paused():
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        return time.perf_counter() - t0, time.process_time() - c0


def _threads_cpu(fns: list[Callable[[], Any]]) -> tuple[float, float]:
    """``_run_threads``'s wall time, and the process's CPU time over the same call (every
    thread's): the same work costing more CPU on 2 threads than on 1 is contention between them
    (shared cache lines, locks), which a busy second core hides rather than causes."""
    c0 = time.process_time()
    dt = _run_threads(fns)
    return dt, time.process_time() - c0


def _close(a: numpy.ndarray, b: numpy.ndarray) -> bool:
    return bool(numpy.allclose(a, b, rtol=1e-9, atol=1e-12))


def worker(quick: bool) -> dict[str, Any]:
    """Run a-e on this interpreter; return raw per-repeat timings (seconds) and facts."""
    load0 = load_average()
    repeats = 5 if quick else 15
    res: dict[str, list[float]] = {}

    def put(key: str, value: float, r: int) -> None:
        if r:  # repeat 0 is a warm-up
            res.setdefault(key, []).append(value)

    prev_workers = tg.autograd.set_cpu_workers(0)
    b = Ours()
    xa, ca, _, _ = make_inputs()

    # a. wide graph, one backward, 1 worker vs 2; a2: the same shape with big arrays, whose
    # elementwise kernels release the GIL.
    for key, branches, size in (("a", WIDE_BRANCHES, None), ("a2", BIG_BRANCHES, BIG_SIZE)):
        wide_part = _wide_floor(branches, size)
        ref = wide_part(0, 1)
        wxa, wc1a, wc2a = _wide_inputs(size)
        wc1, wc2 = b.const(wc1a), b.const(wc2a)

        def build(bb: Any, x: Any, branches: int = branches, wc1: Any = wc1, wc2: Any = wc2) -> Any:
            return build_wide(bb, x, wc1, wc2, branches)

        log(f"parallel: {key}. wide, {branches:,} branches of {len(wxa):,} elements x{repeats}")
        for r in range(repeats + 1):
            for n in ((0, 1) if r % 2 else (1, 0)):  # alternate which goes first
                tg.autograd.set_cpu_workers(n)
                b.sample(build, wxa)  # untimed: starts the helper
                x = b.leaf(wxa)
                y = build(b, x)
                bw, cpu = _timed_cpu(y.backward)
                g = numpy.array(x.grad._data)
                del x, y
                put(f"{key}_w{n}", bw, r)
                put(f"{key}_cpu{n}", cpu, r)
                if r == 0 and not _close(g, ref):
                    raise AssertionError(f"wide: threadgrad's gradient with {n} helper(s) differs from numpy's")
            with gc_paused():
                put(f"{key}_c1", _run_threads([lambda: wide_part(0, 1)]), r)
                put(f"{key}_c2", _run_threads([lambda: wide_part(0, 2), lambda: wide_part(1, 2)]), r)
            if key == "a":
                # The engine's ceiling: the graph split by hand into two backward calls of half
                # the branches each (one leaf), on 2 threads vs in a row; no sharing inside a call.
                # Both halves run on threads that did not build the graph, so they run at one
                # speed: with this (main) thread running one half, the halves ran at different
                # speeds and the split, which cannot rebalance, measured the imbalance
                # (docs/performance.md, third round of issue 21).
                tg.autograd.set_cpu_workers(0)
                for k in ("a_s1", "a_s2"):
                    x = b.leaf(wxa)
                    h1, h2 = build_wide(b, x, wc1, wc2, branches // 2), build_wide(b, x, wc1, wc2, branches // 2)
                    jobs = [lambda: (h1.backward(), h2.backward())] if k == "a_s1" else [h1.backward, h2.backward]
                    with gc_paused():  # as every timed region here
                        put(k, _run_threads(jobs), r)
                    if r == 0 and not _close(numpy.array(x.grad._data), ref):
                        raise AssertionError("wide, split by hand: the gradient differs from numpy's")
                    del x, h1, h2
        tg.autograd.set_cpu_workers(0)
        assert _close(wide_part(0, 2) + wide_part(1, 2), ref)

    # b. towers, one backward, 1 worker vs 2.
    towers = _Towers()
    tower_ref = towers.floor(range(TOWERS))

    def towers_sample(n: int) -> tuple[float, float, int, numpy.ndarray]:
        tg.autograd.set_cpu_workers(n)
        for _ in range(2):  # the first sample is untimed (starts the helper, warms BLAS buffers)
            y, x, ws = towers.build()
            f0 = _minor_faults()
            dt, cpu = _timed_cpu(y.backward)
            faults = _minor_faults() - f0
            g = numpy.array(x.grad._data)
            del y, x, ws
        return dt, cpu, faults, g

    kept: list = []

    def towers_floor(r: int, *parts: range) -> float:
        """The control's time; its weight gradients are freed after the timing, as the engine's are."""
        f0 = _minor_faults()
        dt = _run_threads([lambda p=p: towers.floor(p, kept) for p in parts])
        if len(parts) == 1:
            put("b_cflt", _minor_faults() - f0, r)
        kept.clear()
        return dt

    log(f"parallel: b. towers {TOWERS}x{TOWER_DEPTH} layers of {TOWER_WIDTH}x{TOWER_WIDTH} x{repeats}")
    half = TOWERS // 2
    for r in range(repeats + 1):
        order = (0, 1) if r % 2 else (1, 0)
        for n in order:
            dt, cpu, faults, g = towers_sample(n)
            put(f"b_w{n}", dt, r)
            put(f"b_cpu{n}", cpu, r)
            put(f"b_flt{n}", faults, r)
            if r == 0 and not _close(g, tower_ref):
                raise AssertionError(f"towers: threadgrad's input gradient with {n} helper(s) differs from numpy's")
        with gc_paused():
            put("b_c1", towers_floor(r, range(TOWERS)), r)
            put("b_c2", towers_floor(r, range(half), range(half, TOWERS)), r)
    tg.autograd.set_cpu_workers(0)

    # c. 2 threads, each on its own chain, vs 1 thread running both chains in a row.
    chain_n = TINY_CHAIN
    inputs = [make_inputs(seed) for seed in (10, 11)]  # each chain its own leaf and constant
    own = [(b.const(ins[1]), ins[0]) for ins in inputs]
    floors = [numpy_floor_chain(ins[0], ins[1], chain_n) for ins in inputs]

    def floor_call(k: int) -> Callable[[], None]:
        def run() -> None:
            for _ in range(FLOOR_PASSES):
                floors[k]()
        return run

    def chains() -> list[Any]:
        ys = []
        for c, xv in own:
            x = b.leaf(xv)
            ys.append((ops.sum(build_chain(b, x, c, chain_n)), x))
        return ys

    inner = 2 if quick else 3  # short samples: several per repeat, against noise
    log(f"parallel: c. 2 threads on their own {chain_n:,}-node chains x{repeats * inner}")
    for r in range(repeats + 1):
        for _ in range(inner):
            ys = chains()
            with gc_paused():
                seq, seq_cpu = _threads_cpu([lambda: [y.backward() for y, _ in ys]])
            ys = chains()
            with gc_paused():
                par, par_cpu = _threads_cpu([lambda y=y: y.backward() for y, _ in ys])
            ys = []
            put("c_seq", seq, r)
            put("c_par", par, r)
            put("c_cpu", par_cpu / seq_cpu, r)
            with gc_paused():
                cseq, cseq_cpu = _threads_cpu([lambda: (floor_call(0)(), floor_call(1)())])
                cpar, cpar_cpu = _threads_cpu([floor_call(0), floor_call(1)])
            put("c_cseq", cseq, r)
            put("c_cpar", cpar, r)
            put("c_ccpu", cpar_cpu / cseq_cpu, r)

    # d. 4 threads on one shared retained chain vs the same 4 calls in a row.
    log(f"parallel: d. 4 threads on one retained {chain_n:,}-node chain x{repeats * inner}")
    x = b.leaf(xa)
    y = ops.sum(build_chain(b, x, b.const(ca), chain_n))
    y.backward(retain_graph=True)  # the first call allocates .grad
    shared_floor = numpy_floor_chain(xa, ca, chain_n)

    def shared_floor_call() -> None:
        for _ in range(FLOOR_PASSES):
            shared_floor()

    for r in range(repeats + 1):
        for _ in range(inner):
            with gc_paused():
                put("d_seq", _run_threads([lambda: [y.backward(retain_graph=True) for _ in range(4)]]), r)
                put("d_par", _run_threads([lambda: y.backward(retain_graph=True) for _ in range(4)]), r)
                put("d_cseq", _run_threads([lambda: [shared_floor_call() for _ in range(4)]]), r)
                put("d_cpar", _run_threads([shared_floor_call for _ in range(4)]), r)
    calls = 1 + 2 * 4 * (repeats + 1) * inner
    if not numpy.allclose(x.grad._data, calls * numpy.array(_single_grad(b, xa, ca, chain_n))):
        raise AssertionError("shared retained graph: .grad is not the sum of every call's gradient")
    x = y = None  # free the graph before e

    # e. single thread, chain backward µs/node, beside the least correct executor (the same work
    # as plain Python, the judged control), the raw-numpy floor and a pure-Python walk.
    n_e = 2_000 if quick else CHAIN_N
    c = b.const(ca)
    floor_e = numpy_floor_chain(xa, ca, n_e)
    pure = _pure_python_chain(n_e)
    log(f"parallel: e. chain of {n_e:,} ops, single thread x{repeats}")
    for r in range(repeats + 1):
        _, bw, g_tg = b.sample(lambda bb, xx: ops.sum(build_chain(bb, xx, c, n_e)), xa, warm=True)
        put("e_tg", bw / (n_e + 2), r)
        for _ in range(2):  # the second timed, after an untimed run on a graph of its own (as e_tg)
            x = b.leaf(xa)
            y = ops.sum(build_chain(b, x, c, n_e))
            with gc_paused():
                t0 = time.perf_counter()
                got = least_correct_backward(y.grad_fn, numpy.asarray(1.0))
                t = time.perf_counter() - t0
            if not _close(got[x], g_tg):
                raise AssertionError("e: the least correct executor computed another gradient than threadgrad")
            x = y = got = None
        put("e_least", t / (n_e + 2), r)
        floor_e()
        put("e_floor", _timed(floor_e) / n_e, r)
        pure()
        put("e_pure", _timed(pure) / n_e, r)

    # z. the machine check: two pure-Python walks on 2 threads vs the same two in a row. No
    # numpy and no shared object, so on the free-threaded build it reaches about 2.0 whenever a
    # second core is free (tiny numpy calls do not: numpy's own shared state, see
    # docs/performance.md); with the GIL it cannot pass 1.0.
    walk_a, walk_b = _pure_python_chain(n_e), _pure_python_chain(n_e)
    for r in range(repeats + 1):
        with gc_paused():
            put("z_seq", _run_threads([lambda: (walk_a(), walk_b())]), r)
            put("z_par", _run_threads([walk_a, walk_b]), r)

    tg.autograd.set_cpu_workers(prev_workers)
    return {
        "res": res,
        "gil": gil_enabled(),
        "python": sys.version.split()[0] + ("t" if not gil_enabled() else ""),
        "numpy": numpy.__version__,
        "blas": _blas_summary(),
        "repeats": repeats,
        "inner": inner,
        "chain_n": chain_n,
        "chain_e": n_e,
        "load": [load0, load_average()],
    }


def _single_grad(b: Ours, xa: numpy.ndarray, ca: numpy.ndarray, n: int) -> numpy.ndarray:
    x = b.leaf(xa)
    ops.sum(build_chain(b, x, b.const(ca), n)).backward()
    return numpy.array(x.grad._data)


# --- the driver: both halves, one table ---------------------------------------------------

def find_ft_python(given: str | None) -> tuple[str | None, str]:
    """The free-threaded interpreter to use, or None and the reason. Order: ``--ft-python``;
    ``.venv-ft/bin/python`` (made by .ci/run); the interpreter ../shared/tools/freethreaded-python
    unpacks. It must import numpy with the GIL off."""
    if given:
        candidates = [given]
    else:
        candidates = [os.path.join(ROOT, ".venv-ft", "bin", "python")]
        if os.access(FT_TOOL, os.X_OK):
            with contextlib.suppress(Exception):
                out = subprocess.run([FT_TOOL], capture_output=True, text=True, timeout=300).stdout.split()
                if out:
                    candidates.append(out[-1])
    why = "no free-threaded interpreter: pass --ft-python PATH (see docs/freethreaded.md)"
    for py in candidates:
        if not os.path.exists(py):
            if given:
                why = f"{py} does not exist"
            continue
        # The GIL state is read after numpy's import: an extension can switch the GIL back on.
        probe = subprocess.run([py, "-c", "import sys\ntry:\n    import numpy\nexcept ImportError:\n    pass\n"
                                "print(getattr(sys, '_is_gil_enabled', lambda: True)(), 'numpy' in sys.modules)"],
                               capture_output=True, text=True, timeout=120)
        gil, has_numpy = (probe.stdout.split() + ["?", "?"])[:2]
        if gil == "True":
            why = f"{py} runs with the GIL enabled (not a free-threaded build, or PYTHON_GIL=1)"
            continue
        if probe.returncode != 0 or has_numpy != "True":
            why = f"{py} cannot import numpy (install it: pip install --only-binary :all: 'numpy<2.5')"
            continue
        return py, ""
    return None, why


def run_half(python: str, quick: bool) -> dict[str, Any]:
    env = dict(os.environ, **_BLAS_ENV)
    env.pop("PYTHON_GIL", None)
    cmd = [python, os.path.abspath(__file__), "--json"] + (["--quick"] if quick else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    sys.stderr.write("".join(f"  [{os.path.basename(python)}] {line}\n" for line in proc.stderr.splitlines()))
    if proc.returncode != 0:
        raise RuntimeError(f"parallel worker ({python}) failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


COLS = ("GIL", "GIL control", "FT", "FT control")


def _speedup(s: dict, one: str, two: str) -> float:
    """Median over repeats of t(one) / t(two): >1 means the second configuration is faster."""
    return paired_ratio(s[one], s[two])


def _rel(s: dict, a1: str, a2: str, c1: str, c2: str) -> float:
    """Median over repeats of (a1/a2) / (c1/c2): the engine's scaling over the control's."""
    return median((x1 / x2) / (y1 / y2) for x1, x2, y1, y2 in zip(s[a1], s[a2], s[c1], s[c2]))


def make_table(gil: dict | None, ft: dict | None, ft_note: str) -> Table:
    """The merged table of both halves (either may be missing)."""
    t = Table("parallel", "9. Parallel cpu workers and free-threaded CPython", list(COLS),
              ratio_header="judged")
    G = gil["res"] if gil else None
    F = ft["res"] if ft else None

    def pair(fn: Callable[[dict], float], cfn: Callable[[dict], float] | None = None) -> dict[str, float | None]:
        v: dict[str, float | None] = {}
        for name, s in (("GIL", G), ("FT", F)):
            v[name] = fn(s) if s else None
            v[f"{name} control"] = cfn(s) if (s and cfn) else None
        return v

    def judged(row: Row, value: float | None, ok: Callable[[float], bool]) -> Row:
        row.show_ratio = value is not None
        row.ratio = value
        row.met = None if value is None else ok(value)
        return row

    def rel(a1: str, a2: str, c1: str, c2: str, label: str) -> Row:
        return Row(label, pair(lambda s: _rel(s, a1, a2, c1, c2)), show_ratio=False)

    ra = Row(f"a. wide ({WIDE_BRANCHES:,} branches), one backward: 2 workers vs 1, speedup",
             pair(lambda s: _speedup(s, "a_w0", "a_w1"), lambda s: _speedup(s, "a_c1", "a_c2")),
             target=f"≥ {TARGET_WIDE_FT} (FT)")
    judged(ra, ra.values["FT"], lambda v: v >= TARGET_WIDE_FT)
    ra_rel = rel("a_w0", "a_w1", "a_c1", "a_c2", "a. wide: speedup / the control's")
    ra_split = Row("a. ceiling: the same graph split by hand into 2 backward calls, 2 threads vs in a row",
                   pair(lambda s: _speedup(s, "a_s1", "a_s2") if "a_s1" in s else None), show_ratio=False)
    ra_ms = Row("a. wide, one backward with 1 worker, ms (control: 1 thread)",
                pair(lambda s: median(s["a_w0"]) * 1e3, lambda s: median(s["a_c1"]) * 1e3), show_ratio=False)
    ra_cpu = Row("a. CPU time of one backward (all threads), 2 workers / 1",
                 pair(lambda s: paired_ratio(s["a_cpu1"], s["a_cpu0"])), show_ratio=False)
    ra2 = Row(f"a2. wide, {BIG_BRANCHES} branches of {BIG_SIZE:,}-element arrays: 2 workers vs 1, speedup",
              pair(lambda s: _speedup(s, "a2_w0", "a2_w1"), lambda s: _speedup(s, "a2_c1", "a2_c2")), show_ratio=False)
    ra2_ms = Row("a2. the same, one backward with 1 worker, ms (control: 1 thread)",
                 pair(lambda s: median(s["a2_w0"]) * 1e3, lambda s: median(s["a2_c1"]) * 1e3), show_ratio=False)
    ra2_cpu = Row("a2. CPU time of one backward (all threads), 2 workers / 1",
                  pair(lambda s: paired_ratio(s["a2_cpu1"], s["a2_cpu0"])), show_ratio=False)
    rb = Row(f"b. towers ({TOWERS}x{TOWER_DEPTH} layers, {TOWER_WIDTH}x{TOWER_WIDTH}), one backward: 2 workers vs 1, "
             "speedup", pair(lambda s: _speedup(s, "b_w0", "b_w1"), lambda s: _speedup(s, "b_c1", "b_c2")),
             target=f"≥ {TARGET_TOWERS_GIL} (GIL)")
    judged(rb, rb.values["GIL"], lambda v: v >= TARGET_TOWERS_GIL)
    rb_rel = rel("b_w0", "b_w1", "b_c1", "b_c2", "b. towers: speedup / the control's")
    rb_ms = Row("b. towers, one backward with 1 worker, ms (control: 1 thread)",
                pair(lambda s: median(s["b_w0"]) * 1e3, lambda s: median(s["b_c1"]) * 1e3), show_ratio=False)
    rb_cpu = Row("b. CPU time of one backward (all threads), 2 workers / 1",
                 pair(lambda s: paired_ratio(s["b_cpu1"], s["b_cpu0"])), show_ratio=False)
    rb_flt = Row("b. minor page faults during one backward with 1 worker (control: 1 thread)",
                 pair(lambda s: median(s["b_flt0"]) if s.get("b_flt0", [-1])[0] >= 0 else None,
                      lambda s: median(s["b_cflt"]) if s.get("b_cflt", [-1])[0] >= 0 else None),
                 show_ratio=False, digits=0)
    rc = Row("c. 2 threads, each a backward of its own chain, vs both in a row: throughput",
             pair(lambda s: _speedup(s, "c_seq", "c_par"), lambda s: _speedup(s, "c_cseq", "c_cpar")),
             show_ratio=False)
    rc_cpu = Row("c. CPU time of that work, 2 threads / in a row (1.0: no contention between the threads)",
                 pair(lambda s: median(s["c_cpu"]), lambda s: median(s["c_ccpu"])), show_ratio=False)
    rc_rel = Row("c. 2 threads on their own chains: scaling / the control's",
                 pair(lambda s: _rel(s, "c_seq", "c_par", "c_cseq", "c_cpar")), target=f"≥ {TARGET_OWN_CHAINS} (FT)")
    judged(rc_rel, rc_rel.values["FT"], lambda v: v >= TARGET_OWN_CHAINS)
    rd = Row("d. 4 threads on one retained chain / the 4 calls in a row: time",
             pair(lambda s: paired_ratio(s["d_par"], s["d_seq"]), lambda s: paired_ratio(s["d_cpar"], s["d_cseq"])),
             target=f"≤ {TARGET_SHARED_FT} (FT)")
    judged(rd, rd.values["FT"], lambda v: v <= TARGET_SHARED_FT)
    re_us = Row("e. chain backward, 1 thread, µs/node (control: the least correct executor)",
                pair(lambda s: median(s["e_tg"]) * 1e6, lambda s: median(s["e_least"]) * 1e6), show_ratio=False)
    re_floor = Row("e. raw-numpy floor of the chain, 1 thread, µs/node (informational control)",
                   {"GIL control": median(G["e_floor"]) * 1e6 if G else None,
                    "FT control": median(F["e_floor"]) * 1e6 if F else None}, show_ratio=False)
    re_pure = Row("e. pure-Python chain walk, 1 thread, µs/node (informational control)",
                  {"GIL control": median(G["e_pure"]) * 1e6 if G else None,
                   "FT control": median(F["e_pure"]) * 1e6 if F else None}, show_ratio=False)
    rz = Row("z. machine check: 2 pure-Python walks on 2 threads vs in a row (FT: about 2.0 on free cores)",
             {"GIL control": _speedup(G, "z_seq", "z_par") if G and "z_seq" in G else None,
              "FT control": _speedup(F, "z_seq", "z_par") if F and "z_seq" in F else None}, show_ratio=False)
    rows = [ra, ra_rel, ra_split, ra_ms, ra_cpu, ra2, ra2_ms, ra2_cpu, rb, rb_rel, rb_ms, rb_cpu, rb_flt,
            rc, rc_cpu, rc_rel, rd, re_us, re_floor,
            re_pure, rz]
    if G and F:
        # Within each process, threadgrad per node / the control's per node, repeat by repeat,
        # cancels the machine's speed of the moment; the FT/GIL ratio of that is the excess penalty.
        def excess(ctl: str) -> float:
            return paired_ratio(F["e_tg"], F[ctl]) / paired_ratio(G["e_tg"], G[ctl])

        rp = Row("e. FT/GIL per-node time: threadgrad (FT) and the least correct executor (FT control)",
                 {"FT": median(F["e_tg"]) / median(G["e_tg"]),
                  "FT control": median(F["e_least"]) / median(G["e_least"])},
                 target=f"≤ {TARGET_PENALTY}x the control's")
        judged(rp, excess("e_least"), lambda v: v <= TARGET_PENALTY)
        rows.append(rp)
        rows.append(Row("e. the same against the raw-numpy floor (informational): threadgrad's penalty / the floor's",
                        {"FT": excess("e_floor"),
                         "FT control": median(F["e_floor"]) / median(G["e_floor"])}, show_ratio=False))
    t.rows = rows
    halves = [h for h in (gil, ft) if h]
    e_ops = halves[0]["chain_e"] if halves else CHAIN_N
    t.notes = [
        "**1 worker** = `set_cpu_workers(0)` (the caller alone runs every cpu node, the default); "
        "**2 workers** = `set_cpu_workers(1)` (the caller and one helper thread). Speedups are t(1) / t(2); "
        "time ratios t(threads) / t(in a row). **judged**: the figure compared with the target, for the build "
        "the target names.",
        "Controls, run in the same repeats and interleaved with the measured runs, so the machine's state of "
        "the moment hits both: for a, a2, c and d the backward's math as raw numpy calls in a Python loop, one "
        "call per node, no engine, split the same way over the same threads (for c and d, "
        f"{FLOOR_PASSES} passes per call, so that a call lasts about as long as one threadgrad backward); for b "
        f"the towers' backward math in raw numpy ({2 * TOWERS * TOWER_DEPTH} matmuls and the tanh gradients; the "
        f"{TOWERS * TOWER_DEPTH} weight gradients kept until the call returns, as the engine keeps `.grad`), "
        f"{TOWERS // 2} towers on each of 2 threads vs {TOWERS} on one. A control's figure is the ceiling this "
        "machine and interpreter allowed at the time.",
        f"a: workload 2's graph (4,001 nodes). a2: the same shape, {BIG_BRANCHES} branches of float64 arrays of "
        f"{BIG_SIZE:,} elements ({BIG_SIZE * 8 // 1024} KiB), whose elementwise kernels release the GIL (no "
        f"target: does a worker help elementwise work with the GIL?). b: {TOWERS} towers of {TOWER_DEPTH} "
        f"layers `tanh(h @ W)`, W float64 {TOWER_WIDTH}x{TOWER_WIDTH}, input {TOWER_BATCH}x{TOWER_WIDTH} shared "
        f"by the towers (its AccumulateGrad gets {TOWERS} gradients), outputs summed, then `sum`. c, d: a chain "
        f"of {TINY_CHAIN:,} tiny ops (workload 1's), each thread in c with its own leaf and constant; in d all "
        f"4 calls accumulate into one leaf. e: the chain of {e_ops:,} ops; the penalty row's judged figure is "
        "threadgrad's µs/node over the least correct executor's, median over repeats, FT over GIL: how much more "
        "threadgrad pays for the free-threaded build than the same work written as plain Python does. The least "
        "correct executor (`bounds.least_correct_backward`: a dependency count, a dict of buffers, the formulas' "
        "numpy calls on saved arrays, nothing else) is that raw-Python control; its gradient is checked against "
        "threadgrad's. Informational: the raw-numpy floor (only the numpy calls, almost no bytecode) and a "
        "pure-Python walk (an object and a method call per node, floats, no numpy) bracket the interpreter's "
        "penalty from below and above.",
        "Each build runs in a subprocess of its interpreter (`benchmarks/parallel.py --json`) started with "
        f"{', '.join(f'{k}=1' for k in list(_BLAS_ENV)[:3])}. "
        + "; ".join(f"{'GIL' if h['gil'] else 'FT'}: Python {h['python']}, numpy {h['numpy']}, {h['blas']}, "
                    f"median of {h['repeats']} repeats after a warm-up ({h['repeats'] * h['inner']} samples "
                    f"for c and d), load average {h['load'][0]} at start / {h['load'][1]} at end"
                    for h in halves) + ".",
        "CPU time rows: the process's CPU time (`time.process_time`, every thread) during the backward with 2 "
        "workers over that with 1, median of per-repeat ratios. 1.0 means sharing the nodes cost nothing; at "
        "c, the speedup on 2 free cores cannot pass 2 / c. On a busy machine a helper that gets no core runs fewer "
        "nodes, which lowers this figure too.",
        "On a 2-core machine 2.0 is the ceiling of every speedup and 0.5 the floor of d; other processes "
        "running beside the benchmark take from both sides of each ratio, which is why every figure stands "
        "beside its control.",
    ]
    # Controls that reach about 2.0 whenever a second core is free: the pure-Python walks (FT) and
    # the towers' matmuls (both builds). The tiny-op numpy controls (a, c, d) are no such check:
    # on 3.13t two threads of tiny numpy calls stay near 1.4 on idle cores (docs/performance.md).
    busy = [f"{name} {col} {v:.2f}" for name, v, col in (
        ("z", rz.values["FT control"], "FT"),
        ("b", rb.values["GIL control"], "GIL"), ("b", rb.values["FT control"], "FT")) if v is not None and v < 1.5]
    if busy:
        t.notes.append("**The machine was busy**: controls that reach about 2.0 on an idle machine stayed below "
                       f"1.5 ({', '.join(busy)}): another process held a core for much of the run, and the "
                       "measured figures beside them say little about the engine. Read the rows "
                       "`/ the control's`, or run again.")
    if ft_note:
        t.notes.append(f"Free-threaded half not run: {ft_note}.")
    return t


def parallel(quick: bool, ft_python: str | None = None) -> Table:
    """The ``parallel`` workload of run_all.py: both halves, merged into one table."""
    log("parallel: GIL build (subprocess, BLAS single-threaded)")
    gil = run_half(sys.executable, quick)
    py, why = find_ft_python(ft_python)
    ft = None
    if py is not None:
        log(f"parallel: free-threaded build ({py})")
        ft = run_half(py, quick)
    else:
        log(f"parallel: free-threaded half skipped: {why}")
    return make_table(gil, ft, why)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats, a shorter chain for e")
    p.add_argument("--json", action="store_true", help="run this interpreter's half; print raw timings as JSON")
    p.add_argument("--ft-python", default=None, help="free-threaded interpreter (default: .venv-ft, then "
                   "../shared/tools/freethreaded-python)")
    args = p.parse_args(argv)
    if args.json:
        print(json.dumps(worker(args.quick)))
        return 0
    started = time.perf_counter()
    t = parallel(args.quick, args.ft_python)
    text = (f"# threadgrad: parallel workload{' (--quick)' if args.quick else ''}\n\n"
            f"- Wall time: {time.perf_counter() - started:.0f} s; {os.cpu_count()} CPUs.\n\n" + t.markdown())
    print(text)
    path = write_result("parallel.md", text)
    print(f"(written to {os.path.relpath(path, ROOT)})")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
