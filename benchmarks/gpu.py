"""threadgrad on a GPU (cupy) against threadgrad on the cpu (numpy) and PyTorch on the same GPU.

Usage::

    python benchmarks/gpu.py              # full run
    python benchmarks/gpu.py --quick      # smaller sizes, 3 repeats
    python benchmarks/gpu.py --no-torch   # leave out the torch columns
    python benchmarks/gpu.py --gpu-only   # leave out the cpu rows

Needs cupy and an NVIDIA GPU (``pip install 'threadgrad[cuda]'``); without them it prints
why and exits with status 2. PyTorch is optional: when ``torch.cuda.is_available()`` the
same workloads run in torch on the same GPU (and on the cpu), side by side.

Workloads:

* **mlp step**: one SGD training step of an MLP (``depth`` Linear layers of ``width``
  units, relu between them, cross-entropy on ``classes`` outputs) on a random batch:
  forward, backward, parameter update (threadgrad: the device's multi-tensor ``sgd`` of
  devices/_fused.py; torch: ``torch.optim.SGD``, multi-tensor on cuda). Timed from the first op to the device being idle
  again (``synchronize``), so queued GPU work is counted. A control, ``cupy by hand``, makes
  the same cupy launches with no autograd at all: the floor for an engine over cupy; a second
  control runs its backward on another thread, handed over each step as the engine hands a
  GPU backward to the device's worker (the cost of the hand-off alone). Two more
  rows run the step as a torch program writes it (``nn.Sequential``, ``nn.CrossEntropyLoss``,
  ``optim.SGD``, ``zero_grad``), the same code on torch and on threadgrad.
* **chain**: the engine-overhead chain of benchmarks/engine_overhead.py on the GPU: ``N``
  ops alternating ``tanh(x)`` and ``x * c`` on a (16,) float64 array, then ``sum``. The
  arrays are tiny, so this measures what the engine and the kernel launches cost per node
  (the cuda worker thread, stream bookkeeping), not arithmetic.

Every timed region ends with a device synchronize; repeats are interleaved across backends
and the median is reported, after one warm-up repeat. Results also go to
benchmarks/results/gpu.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

import numpy

from _common import fmt, gc_paused, machine_summary, markdown_table, median, try_import_torch, write_result  # noqa: E402

from threadgrad import devices  # noqa: E402
from threadgrad import engine  # noqa: E402
from threadgrad import ops  # noqa: E402


# --- backends ---------------------------------------------------------------------------------

class Ours:
    """threadgrad on one device."""

    def __init__(self, device: str) -> None:
        self.device = devices.get(device)
        self.name = f"threadgrad {device}"

    def sync(self) -> None:
        self.device.synchronize()

    def tensor(self, a: numpy.ndarray, requires_grad: bool = False) -> Any:
        return engine.tensor(a, device=self.device, requires_grad=requires_grad)

    def optimizer(self, params: list, lr: float) -> Callable[[], None]:
        """SGD through the device's multi-tensor update (one fused kernel per tensor on a GPU;
        devices/_fused.py), then ``grad = None`` as torch's ``zero_grad()``."""
        sgd = self.device.kernels.sgd
        bufs: list = [None] * len(params)

        def step() -> None:
            sgd([p._data for p in params], [p.grad._data for p in params], bufs, lr=lr)
            for p in params:
                p.grad = None

        return step

    def mlp_step(self, params: list, x: Any, y: Any, step: Callable[[], None]) -> None:
        h = x
        for i in range(0, len(params), 2):
            h = ops.linear(h, params[i], params[i + 1])
            if i + 2 < len(params):
                h = ops.relu(h)
        ops.cross_entropy(h, y).backward()
        step()

    def chain(self, x0: numpy.ndarray, c0: numpy.ndarray, n: int) -> Callable[[], tuple]:
        c = self.tensor(c0)

        def build() -> tuple:
            x = self.tensor(x0, requires_grad=True)
            h = x
            for i in range(n):
                h = ops.tanh(h) if i % 2 == 0 else h * c
            return x, h.sum()

        return build

    @staticmethod
    def backward(y: Any) -> None:
        y.backward()

    @staticmethod
    def grad_numpy(x: Any) -> numpy.ndarray:
        return x.grad.numpy()


class CupyByHand:
    """The MLP step written by hand in cupy, no autograd: the same launches threadgrad's nodes
    make (its kernels of devices/_fused.py, cupy's matmul and sum), in the order its backward
    runs them, all on the calling thread. What is left between this and ``threadgrad cuda``
    is the engine (recording, scheduling, the worker thread); what is left between this and
    torch is cupy's host time per launch."""

    def __init__(self) -> None:
        self.device = devices.get("cuda")
        self.cp = self.device.xp
        self.k = self.device.kernels
        self.name = "cupy by hand (no autograd)"

    def sync(self) -> None:
        self.device.synchronize()

    def tensor(self, a: numpy.ndarray, requires_grad: bool = False) -> Any:
        return self.cp.asarray(a)

    def optimizer(self, params: list, lr: float) -> Callable[[list], None]:
        sgd = self.k.sgd
        bufs: list = [None] * len(params)
        return lambda grads: sgd(params, grads, bufs, lr=lr)

    def mlp_step(self, params: list, x: Any, y: Any, step: Callable[[list], None],
                 run_backward: Callable[[Callable[[], None]], Any] = lambda backward: backward()) -> None:
        k, cp = self.k, self.cp
        inputs, outs = [], []
        h = x
        for i in range(0, len(params), 2):
            inputs.append(h)
            h = h @ params[i].T
            h += params[i + 1]
            if i + 2 < len(params):
                h = cp.maximum(h, 0)
                outs.append(h)
        if k.class_index_check(y, -100, h.shape[1]):  # the read of the GPU cross_entropy makes
            raise IndexError("target out of range")
        lsm, _loss = k.cross_entropy_forward(h, y, True)

        def backward() -> None:
            g = k.cross_entropy_grad(cp.ones((), h.dtype), lsm, y, True)
            grads = [None] * len(params)
            for i in range(len(params) - 2, -1, -2):
                grads[i] = g.T @ inputs[i // 2]
                grads[i + 1] = g.sum(axis=0)
                if i:
                    g = k.relu_grad(g @ params[i], outs[i // 2 - 1])
            step(grads)

        run_backward(backward)


class CupyByHandTwoThreads(CupyByHand):
    """``CupyByHand`` with its backward and update on a second thread, handed over and waited
    for each step as the engine hands a GPU backward to the device's worker thread: the
    thread hand-off alone, with no engine. The worker thread makes the GPU current once, as
    the engine's does."""

    def __init__(self) -> None:
        super().__init__()
        self.name = "cupy by hand, backward on a 2nd thread"
        self._jobs: Any = None

    def _worker(self) -> None:
        self.device.activate()
        while True:
            job, done = self._jobs.get()
            if job is None:
                return
            job()
            done.put(None)

    def optimizer(self, params: list, lr: float) -> Callable[[list], None]:
        import queue  # noqa: PLC0415
        import threading  # noqa: PLC0415

        self._jobs = queue.SimpleQueue()
        threading.Thread(target=self._worker, daemon=True, name="cupy-by-hand-worker").start()
        return super().optimizer(params, lr)

    def mlp_step(self, params: list, x: Any, y: Any, step: Callable[[list], None]) -> None:
        import queue  # noqa: PLC0415

        done: Any = queue.SimpleQueue()
        super().mlp_step(params, x, y, step, run_backward=lambda backward: (self._jobs.put((backward, done)), done.get()))


class ModuleProgram:
    """The MLP step as a torch program writes it: ``nn.Sequential`` of ``nn.Linear`` and
    ``nn.ReLU``, ``nn.CrossEntropyLoss``, ``optim.SGD``, ``zero_grad()`` / ``backward()`` /
    ``step()``, the same code run by torch or by threadgrad (``lib``), each with its own
    default initialization."""

    def __init__(self, lib: Any, device: str, name: str) -> None:
        self.lib, self.device, self.name = lib, device, name

    def sync(self) -> None:
        if self.lib.__name__ == "torch":
            self.lib.cuda.synchronize()
        else:
            devices.get(self.device).synchronize()

    def tensor(self, a: numpy.ndarray, requires_grad: bool = False) -> Any:
        return self.lib.tensor(a, device=self.device)

    def optimizer(self, params: list, lr: float) -> Callable[[Any, Any], None]:
        nn = self.lib.nn
        sizes = [params[0].shape[1]] + [p.shape[0] for p in params[0::2]]
        layers: list = []
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(fan_in, fan_out))
            if i + 2 < len(sizes):
                layers.append(nn.ReLU())
        model = nn.Sequential(*layers).to(self.device)
        opt = self.lib.optim.SGD(model.parameters(), lr=lr)
        criterion = nn.CrossEntropyLoss()

        def step(x: Any, y: Any) -> None:
            opt.zero_grad()
            criterion(model(x), y).backward()
            opt.step()

        return step

    def mlp_step(self, params: list, x: Any, y: Any, step: Callable[[Any, Any], None]) -> None:
        step(x, y)


class Torch:
    """PyTorch on one device (``cuda`` or ``cpu``)."""

    def __init__(self, torch: Any, device: str) -> None:
        self.torch = torch
        self.device = torch.device(device)
        self.name = f"torch {device}"

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def tensor(self, a: numpy.ndarray, requires_grad: bool = False) -> Any:
        return self.torch.tensor(a, device=self.device, requires_grad=requires_grad)

    def optimizer(self, params: list, lr: float) -> Callable[[], None]:
        """torch.optim.SGD with its defaults (multi-tensor ``foreach`` kernels on cuda)."""
        opt = self.torch.optim.SGD(params, lr=lr)

        def step() -> None:
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step

    def mlp_step(self, params: list, x: Any, y: Any, step: Callable[[], None]) -> None:
        F = self.torch.nn.functional
        h = x
        for i in range(0, len(params), 2):
            h = F.linear(h, params[i], params[i + 1])
            if i + 2 < len(params):
                h = self.torch.relu(h)
        F.cross_entropy(h, y).backward()
        step()

    def chain(self, x0: numpy.ndarray, c0: numpy.ndarray, n: int) -> Callable[[], tuple]:
        torch = self.torch
        c = self.tensor(c0)

        def build() -> tuple:
            x = self.tensor(x0, requires_grad=True)
            h = x
            for i in range(n):
                h = torch.tanh(h) if i % 2 == 0 else torch.mul(h, c)
            return x, h.sum()

        return build

    @staticmethod
    def backward(y: Any) -> None:
        y.backward()

    @staticmethod
    def grad_numpy(x: Any) -> numpy.ndarray:
        return x.grad.detach().cpu().numpy()


# --- measurements -----------------------------------------------------------------------------

def mlp_params(width: int, depth: int, features: int, classes: int, seed: int = 0) -> list[numpy.ndarray]:
    rng = numpy.random.default_rng(seed)
    sizes = [features] + [width] * (depth - 1) + [classes]
    out = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        out.append((rng.standard_normal((fan_out, fan_in)) / numpy.sqrt(fan_in)).astype(numpy.float32))
        out.append(numpy.zeros(fan_out, dtype=numpy.float32))
    return out


def measure_mlp(backends: list, args: argparse.Namespace) -> dict[str, float]:
    rng = numpy.random.default_rng(1)
    xa = rng.standard_normal((args.batch, args.features)).astype(numpy.float32)
    ya = rng.integers(0, args.classes, size=args.batch)
    state = {}
    for b in backends:
        params = [b.tensor(p, requires_grad=True) for p in mlp_params(args.width, args.depth, args.features, args.classes)]
        state[b.name] = (params, b.tensor(xa), b.tensor(ya), b.optimizer(params, 0.01))
    samples: dict[str, list[float]] = {b.name: [] for b in backends}
    for r in range(args.repeats + 1):
        for b in backends:
            params, x, y, opt = state[b.name]
            b.sync()
            with gc_paused():
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    b.mlp_step(params, x, y, opt)
                b.sync()
                dt = (time.perf_counter() - t0) / args.steps
            if r:
                samples[b.name].append(dt)
    return {k: median(v) * 1e3 for k, v in samples.items()}  # ms per step


def measure_chain(backends: list, args: argparse.Namespace) -> dict[str, tuple[float, float, numpy.ndarray]]:
    rng = numpy.random.default_rng(2)
    x0 = rng.uniform(-1.0, 1.0, 16)
    c0 = rng.uniform(0.9, 1.1, 16)
    builders = {b.name: b.chain(x0, c0, args.chain) for b in backends}
    samples: dict[str, tuple[list, list]] = {b.name: ([], []) for b in backends}
    grads: dict[str, numpy.ndarray] = {}
    for r in range(args.repeats + 1):
        for b in backends:
            b.sync()
            with gc_paused():
                t0 = time.perf_counter()
                x, y = builders[b.name]()
                b.sync()
                t1 = time.perf_counter()
                b.backward(y)
                b.sync()
                t2 = time.perf_counter()
            grads[b.name] = b.grad_numpy(x)
            del x, y
            if r:
                samples[b.name][0].append(t1 - t0)
                samples[b.name][1].append(t2 - t1)
    n_nodes = args.chain + 2  # the ops, SumBackward0, AccumulateGrad
    return {k: (median(f) / args.chain * 1e6, median(bw) / n_nodes * 1e6, grads[k]) for k, (f, bw) in samples.items()}


# --- report -----------------------------------------------------------------------------------

def gpu_name() -> str:
    try:
        import cupy  # noqa: PLC0415

        props = cupy.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - only for the report
        return "unknown GPU"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, 3 repeats")
    ap.add_argument("--no-torch", action="store_true", help="leave out torch even if it is installed")
    ap.add_argument("--gpu-only", action="store_true",
                    help="leave out the cpu rows (their BLAS and OpenMP threads, busy between the GPU rows, "
                         "slow the GPU rows' host threads)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--width", type=int, default=None)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--chain", type=int, default=None, help="chain length (ops)")
    args = ap.parse_args(argv)
    args.repeats = args.repeats or (3 if args.quick else 7)
    args.batch = args.batch or (128 if args.quick else 512)
    args.width = args.width or (256 if args.quick else 1024)
    args.chain = args.chain or (1000 if args.quick else 5000)
    args.features, args.classes = 256, 10
    args.steps = 3 if args.quick else 10

    try:
        devices.get("cuda")
    except RuntimeError as e:
        print(f"benchmarks/gpu.py needs cupy and an NVIDIA GPU; not running: {e}", file=sys.stderr)
        return 2

    torch = None if args.no_torch else try_import_torch()
    torch_cuda = torch is not None and torch.cuda.is_available()
    mlp_backends: list = [Ours("cuda")] + ([] if args.gpu_only else [Ours("cpu")])
    if hasattr(devices.get("cuda").kernels, "cross_entropy_forward"):  # (absent in older trees: THREADGRAD_TREE)
        mlp_backends += [CupyByHand(), CupyByHandTwoThreads()]
    chain_backends: list = [Ours("cuda")]
    if torch_cuda:
        mlp_backends += [Torch(torch, "cuda")] + ([] if args.gpu_only else [Torch(torch, "cpu")])
        chain_backends.append(Torch(torch, "cuda"))
    import threadgrad  # noqa: PLC0415 - this tree's (see _common.py)

    programs = hasattr(getattr(threadgrad, "nn", None), "Sequential")  # (absent in older trees)
    if programs:
        mlp_backends.append(ModuleProgram(threadgrad, "cuda", "threadgrad cuda, nn.Module program"))
        if torch_cuda:
            mlp_backends.append(ModuleProgram(torch, "cuda", "torch cuda, nn.Module program"))

    t_start = time.perf_counter()
    mlp = measure_mlp(mlp_backends, args)
    chain = measure_chain(chain_backends, args)

    lines = [f"# GPU benchmark{' (--quick)' if args.quick else ''}", ""]
    lines.append(f"MLP step: batch {args.batch}, {args.depth} Linear layers of width {args.width} "
                 f"({args.features} inputs, {args.classes} classes), float32, relu, cross-entropy, SGD.")
    lines.append("")
    base = mlp.get("threadgrad cpu")
    rows = [[name, fmt(ms), f"{base / ms:.2f}x" if base else "-"] for name, ms in mlp.items()]
    lines.append(markdown_table(["backend", "ms / step", "speed-up vs threadgrad cpu"], rows))
    if torch_cuda:
        lines += ["", f"threadgrad cuda / torch cuda: {mlp['threadgrad cuda'] / mlp['torch cuda']:.2f}x (above 1: threadgrad slower)"]
        if programs:
            ratio = mlp["threadgrad cuda, nn.Module program"] / mlp["torch cuda, nn.Module program"]
            lines += [f"nn.Module programs, threadgrad / torch: {ratio:.2f}x"]
    lines += ["", f"Chain on the GPU: {args.chain} ops alternating tanh and mul on a (16,) float64 array, then sum "
              f"({args.chain + 2} backward nodes).", ""]
    rows = [[name, fmt(f), fmt(bw)] for name, (f, bw, _) in chain.items()]
    lines.append(markdown_table(["backend", "forward µs / op (recording)", "backward µs / node"], rows))
    if torch_cuda:
        ours, theirs = chain["threadgrad cuda"], chain["torch cuda"]
        lines += ["", f"backward ours/torch: {ours[1] / theirs[1]:.2f}x"]
        if not numpy.allclose(ours[2], theirs[2], rtol=1e-9, atol=1e-12):
            lines.append("WARNING: the chain's leaf gradients differ between threadgrad and torch")
    lines += [
        "",
        f"- Machine: {machine_summary()}; GPU: {gpu_name()}.",
        f"- Median of {args.repeats} repeats after 1 warm-up, repeats interleaved across backends; every timed "
        "region ends with a device synchronize; cyclic GC off while timing.",
        "- torch: " + ("same workloads on the same GPU and on the cpu." if torch_cuda else
                       "omitted (not installed, --no-torch, or torch.cuda.is_available() is False)."),
        f"- Benchmark wall time: {time.perf_counter() - t_start:.1f} s.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    print(f"(written to {write_result('gpu.md', text)})")
    engine.get_engine().shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
