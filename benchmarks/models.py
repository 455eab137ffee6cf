"""Training steps of real models, threadgrad beside torch on the same device, one run.

One model code serves both libraries, built from ``lib.nn`` with ``lib`` either ``torch`` or
``threadgrad``, so the two run the same ops:

* ``gpt``: a character-level GPT (nanoGPT's block: pre-LayerNorm, causal self-attention
  through ``masked_fill`` on a ``tril`` mask and ``softmax``, a GELU MLP, weight tying); a step
  is ``zero_grad(set_to_none=True)``, forward, ``F.cross_entropy``, ``backward()``,
  ``clip_grad_norm_(1.0)``, ``AdamW.step()``;
* ``lstm``: pytorch/examples' word language model shape (Embedding, a 2-layer LSTM, a Linear
  decoder; 35 steps of batch 20, the hidden state carried over detached, ``clip_grad_norm_``,
  SGD);
* ``cnn``: pytorch/examples' MNIST network (two ``Conv2d``, ``max_pool2d``, dropout, two
  ``Linear``, ``log_softmax``) on 28x28 images, ``F.nll_loss``, ``Adadelta`` (its dropout on:
  the losses are compared with dropout off, in a separate run of the first steps).

threadgrad's model starts from torch's initial weights (through ``state_dict``), and the
first losses of the two are compared, so a wrong result shows up as a warning here, not as a
speed. ``--steps`` steps, then one device synchronize, are one sample; samples of the
backends interleave. Medians of ``--repeats`` samples after 3 warm-up steps.

Run: ``python benchmarks/models.py`` (cpu, every model; ``--model gpt``, ``cnn`` or ``lstm`` for
one; ``--device cuda`` for the GPU, where it needs cupy and torch's cuda build). Writes
results/models_<device>.md.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

import numpy

from _common import fmt, gc_paused, machine_summary, markdown_table, median, try_import_torch, write_result  # noqa: E402

import threadgrad  # noqa: E402 - this tree's (see _common.py)


def gpt(lib: Any, vocab: int, block: int, n_embd: int, n_head: int, n_layer: int) -> Any:
    """A character-level GPT written once against ``lib`` (torch or threadgrad)."""
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.mlp_proj = nn.Linear(4 * n_embd, n_embd)
            self.register_buffer("mask", lib.tril(lib.ones(block, block)).view(1, 1, block, block))

        def forward(self, x: Any) -> Any:
            B, T, C = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(n_embd, dim=2)
            q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
            k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
            v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // n_head))
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.c_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(vocab, n_embd)
            self.wpe = nn.Embedding(block, n_embd)
            self.h = nn.ModuleList([Block() for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            self.lm_head.weight = self.wte.weight  # weight tying, as nanoGPT
            self.apply(self._init_weights)

        @staticmethod
        def _init_weights(module: Any) -> None:  # nanoGPT's: N(0, 0.02), zero biases
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

        def forward(self, idx: Any, targets: Any) -> Any:
            T = idx.shape[1]
            x = self.wte(idx) + self.wpe(lib.arange(T, device=idx.device))
            for b in self.h:
                x = b(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return GPT()


def cnn(lib: Any, dropout: bool = True) -> Any:
    """pytorch/examples' MNIST network (examples/torch_programs/mnist_cnn.py), written against ``lib``."""
    nn, F = lib.nn, lib.nn.functional

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 3, 1)
            self.conv2 = nn.Conv2d(32, 64, 3, 1)
            self.dropout1 = nn.Dropout(0.25 if dropout else 0.0)
            self.dropout2 = nn.Dropout(0.5 if dropout else 0.0)
            self.fc1 = nn.Linear(9216, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x: Any, target: Any) -> Any:
            x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
            x = F.relu(self.fc1(lib.flatten(self.dropout1(x), 1)))
            return F.nll_loss(F.log_softmax(self.fc2(self.dropout2(x)), dim=1), target)

    return Net()


def lstm_lm(lib: Any, ntoken: int, ninp: int, nhid: int, nlayers: int) -> Any:
    """pytorch/examples' word language model shape (Embedding, LSTM, Linear decoder), no dropout."""
    nn = lib.nn

    class RNNModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = nn.LSTM(ninp, nhid, nlayers)
            self.decoder = nn.Linear(nhid, ntoken)

        def forward(self, x: Any, target: Any, hidden: Any) -> Any:
            output, hidden = self.rnn(self.encoder(x), hidden)
            loss = lib.nn.functional.cross_entropy(self.decoder(output).view(-1, ntoken), target.view(-1))
            return loss, hidden

    return RNNModel()


class _Steps:
    """What the model programs share: the name, the state to copy, the device's synchronize."""

    lib: Any
    device: str
    model: Any

    def state(self) -> dict:
        return {k: v.detach().cpu().numpy().copy() for k, v in self.model.state_dict().items()}

    def sync(self) -> None:
        if self.device == "cuda":
            if self.lib.__name__ == "torch":
                self.lib.cuda.synchronize()
            else:
                threadgrad.devices.get("cuda").synchronize()


class LstmProgram(_Steps):
    """The LSTM language model's step: truncated backprop through ``bptt`` steps (the hidden
    state carried over, detached), ``clip_grad_norm_(0.25)``, SGD, as pytorch/examples'."""

    def __init__(self, lib: Any, device: str, args: argparse.Namespace, init: dict | None) -> None:
        self.lib, self.device = lib, device
        self.name = f"{lib.__name__} {device}"
        lib.manual_seed(0)
        model = lstm_lm(lib, args.lm_vocab, args.lm_hidden, args.lm_hidden, 2)
        if init is not None:
            model.load_state_dict({k: lib.tensor(v) for k, v in init.items()})
        self.model = model.to(device)
        self.opt = lib.optim.SGD(self.model.parameters(), lr=1.0)
        rng = numpy.random.default_rng(5)
        data = rng.integers(0, args.lm_vocab, size=(args.lm_bptt + 1, args.lm_batch))
        self.x = lib.tensor(data[:-1], device=device)
        self.y = lib.tensor(data[1:], device=device)
        zeros = numpy.zeros((2, args.lm_batch, args.lm_hidden), dtype=numpy.float32)
        self.hidden = (lib.tensor(zeros, device=device), lib.tensor(zeros, device=device))
        self.losses: list[float] = []

    def step(self, keep_loss: bool = False) -> None:
        self.opt.zero_grad(set_to_none=True)
        hidden = tuple(h.detach() for h in self.hidden)
        loss, self.hidden = self.model(self.x, self.y, hidden)
        loss.backward()
        self.lib.nn.utils.clip_grad_norm_(self.model.parameters(), 0.25)
        self.opt.step()
        if keep_loss:
            self.losses.append(float(loss.item()))


class CnnProgram(_Steps):
    """The MNIST CNN's training step of one library on one device."""

    def __init__(self, lib: Any, device: str, args: argparse.Namespace, init: dict | None,
                 dropout: bool = True) -> None:
        self.lib, self.device = lib, device
        self.name = f"{lib.__name__} {device}"
        lib.manual_seed(0)
        model = cnn(lib, dropout)
        if init is not None:
            model.load_state_dict({k: lib.tensor(v) for k, v in init.items()})
        self.model = model.to(device)
        self.opt = lib.optim.Adadelta(self.model.parameters(), lr=1.0)
        rng = numpy.random.default_rng(4)
        self.x = lib.tensor(rng.standard_normal((args.cnn_batch, 1, 28, 28)).astype(numpy.float32), device=device)
        self.y = lib.tensor(rng.integers(0, 10, size=args.cnn_batch), device=device)
        self.losses: list[float] = []

    def step(self, keep_loss: bool = False) -> None:
        self.opt.zero_grad(set_to_none=True)
        loss = self.model(self.x, self.y)
        loss.backward()
        self.opt.step()
        if keep_loss:
            self.losses.append(float(loss.item()))


class Program(_Steps):
    """The GPT training step of one library on one device."""

    def __init__(self, lib: Any, device: str, args: argparse.Namespace, init: dict | None) -> None:
        self.lib, self.device = lib, device
        self.name = f"{lib.__name__} {device}"
        lib.manual_seed(0)
        model = gpt(lib, args.vocab, args.block, args.n_embd, args.n_head, args.n_layer)
        if init is not None:  # torch's initial weights, so both start from the same point
            model.load_state_dict({k: lib.tensor(v) for k, v in init.items()})
        self.model = model.to(device)
        self.opt = lib.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.1)
        rng = numpy.random.default_rng(3)
        data = rng.integers(0, args.vocab, size=(args.batch, args.block + 1))
        self.x = lib.tensor(data[:, :-1], device=device)
        self.y = lib.tensor(data[:, 1:], device=device)
        self.losses: list[float] = []

    def step(self, keep_loss: bool = False) -> None:
        self.opt.zero_grad(set_to_none=True)
        loss = self.model(self.x, self.y)
        loss.backward()
        self.lib.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        if keep_loss:
            self.losses.append(float(loss.item()))


def measure(programs: list[Program], args: argparse.Namespace) -> dict[str, float]:
    for p in programs:  # the first steps, with their losses kept, are the warm-up
        for _ in range(3):
            p.step(keep_loss=True)
    samples: dict[str, list[float]] = {p.name: [] for p in programs}
    for _ in range(args.repeats):
        for p in programs:
            p.sync()
            with gc_paused():
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    p.step()
                p.sync()
                samples[p.name].append((time.perf_counter() - t0) / args.steps)
    return {k: median(v) * 1e3 for k, v in samples.items()}  # ms per step


def _report(title: str, config: str, programs: list, ms: dict, args: argparse.Namespace, checked: list) -> list[str]:
    lines = [f"## {title}", "", config, ""]
    lines.append(markdown_table(["backend", "ms / step"], [[name, fmt(v)] for name, v in ms.items()]))
    if len(programs) == 2:
        ours, theirs = programs
        lines += ["", f"threadgrad / torch: {ms[ours.name] / ms[theirs.name]:.2f}x (above 1: threadgrad slower)"]
        a, b = checked
        lines.append(f"first {len(a)} losses, threadgrad vs torch from the same weights: "
                     + ", ".join(f"{x:.5f}/{y:.5f}" for x, y in zip(a, b)))
        if max(abs(x - y) for x, y in zip(a, b)) > 1e-3:
            lines.append("WARNING: the losses differ between threadgrad and torch")
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--model", default="all", choices=("all", "gpt", "cnn", "lstm"))
    ap.add_argument("--quick", action="store_true", help="smaller models, 3 repeats")
    ap.add_argument("--no-torch", action="store_true", help="leave out torch even if it is installed")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    args = ap.parse_args(argv)
    args.repeats = args.repeats or (3 if args.quick else 7)
    args.steps = args.steps or (2 if args.quick else 5)
    args.vocab, args.block, args.batch = 65, 64, (8 if args.quick else 32)
    args.n_embd, args.n_head, args.n_layer = (64, 4, 2) if args.quick else (128, 4, 4)
    args.cnn_batch = 16 if args.quick else 64
    args.lm_vocab, args.lm_hidden, args.lm_bptt, args.lm_batch = (1000, 50, 10, 5) if args.quick else (10000, 200, 35, 20)
    if args.device == "cuda":
        try:
            threadgrad.devices.get("cuda")
        except RuntimeError as e:
            print(f"benchmarks/models.py --device cuda needs cupy and an NVIDIA GPU; not running: {e}", file=sys.stderr)
            return 2

    torch = None if args.no_torch else try_import_torch()
    if torch is not None and args.device == "cuda" and not torch.cuda.is_available():
        torch = None
    t_start = time.perf_counter()
    lines = ["# Model training steps" + (" (--quick)" if args.quick else ""), ""]
    if args.model in ("all", "gpt"):
        programs: list = []
        init = None
        if torch is not None:
            programs.append(Program(torch, args.device, args, None))
            init = programs[0].state()
        programs.insert(0, Program(threadgrad, args.device, args, init))
        ms = measure(programs, args)
        n_params = sum(int(numpy.prod(p.shape)) for p in programs[0].model.parameters())
        config = (f"Character GPT (nanoGPT's block): {args.n_layer} layers, {args.n_head} heads, n_embd {args.n_embd}, "
                  f"context {args.block}, vocabulary {args.vocab}, batch {args.batch}, {n_params:,} parameters, "
                  f"float32; AdamW, clip_grad_norm_(1.0); on {args.device}.")
        lines += _report("Transformer", config, programs, ms, args, [p.losses for p in programs])
    if args.model in ("all", "cnn"):
        programs = []
        checked: list = []
        if torch is not None:
            # the losses from the same weights, dropout off (each library draws its own masks)
            ref = CnnProgram(torch, args.device, args, None, dropout=False)
            mine = CnnProgram(threadgrad, args.device, args, ref.state(), dropout=False)
            for p in (ref, mine):
                for _ in range(3):
                    p.step(keep_loss=True)
            checked = [mine.losses, ref.losses]
            programs.append(CnnProgram(torch, args.device, args, None))
        programs.insert(0, CnnProgram(threadgrad, args.device, args, programs[0].state() if programs else None))
        ms = measure(programs, args)
        config = (f"pytorch/examples' MNIST CNN (two Conv2d, max_pool2d, dropout, two Linear), batch {args.cnn_batch} "
                  f"of 1x28x28, float32; nll_loss, Adadelta; on {args.device}.")
        lines += _report("MNIST CNN", config, programs, ms, args, checked)
    if args.model in ("all", "lstm"):
        programs = []
        init = None
        if torch is not None:
            programs.append(LstmProgram(torch, args.device, args, None))
            init = programs[0].state()
        programs.insert(0, LstmProgram(threadgrad, args.device, args, init))
        ms = measure(programs, args)
        config = (f"LSTM language model (pytorch/examples' word_language_model shape): Embedding({args.lm_vocab}, "
                  f"{args.lm_hidden}), LSTM 2 layers of {args.lm_hidden}, Linear decoder; {args.lm_bptt} steps of "
                  f"batch {args.lm_batch}, hidden state carried over detached; clip_grad_norm_(0.25), SGD; "
                  f"float32; on {args.device}.")
        lines += _report("LSTM language model", config, programs, ms, args, [p.losses for p in programs])
    lines += [
        f"- Machine: {machine_summary()}.",
        f"- Median of {args.repeats} samples of {args.steps} steps after 3 warm-up steps, samples interleaved across "
        "backends; every sample ends with a device synchronize; cyclic GC off while timing.",
        f"- Benchmark wall time: {time.perf_counter() - t_start:.1f} s.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    print(f"(written to {write_result(f'models_{args.device}.md', text)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
