"""Train an MLP on scikit-learn's handwritten digits, with a progress bar and a plot of the run.

Run: python examples/digits_plot.py [--epochs N] [--out DIR] [--quick]
(needs the examples extra: ``pip install -e '.[examples]'``: scikit-learn for the data, which
ships inside it, tqdm for the progress bar, matplotlib for the plot. ``--quick`` or
THREADGRAD_EXAMPLES_QUICK=1: two epochs, for CI.)

Plain minibatch SGD with momentum, written by hand under ``engine.no_grad()`` (threadgrad's
optimizers are on their way as ``threadgrad.optim``). Each epoch's progress bar shows the
running loss; after each epoch the held-out accuracy is measured; at the end
``digits_training.png`` shows training loss per step and test accuracy per epoch.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys

import numpy as np

from threadgrad import engine, ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits import load_split  # noqa: E402 - the same split as digits.py


def train(epochs: int = 10, batch: int = 32, lr: float = 0.05, momentum: float = 0.9, hidden: int = 64,
          seed: int = 0, progress: bool = True) -> dict:
    """Train; return the history: ``{"loss": [per step], "accuracy": [per epoch]}``."""
    from tqdm import tqdm

    engine.manual_seed(seed)
    rng = np.random.default_rng(seed)
    x_train, y_train, x_test, y_test = load_split()
    params = [(engine.randn(hidden, 64) * float(np.sqrt(2 / 64))).requires_grad_(), engine.zeros(hidden, requires_grad=True),
              (engine.randn(10, hidden) * float(np.sqrt(2 / hidden))).requires_grad_(), engine.zeros(10, requires_grad=True)]
    velocity = [engine.zeros_like(p) for p in params]

    def logits(x: np.ndarray) -> engine.Tensor:
        h = ops.relu(ops.linear(engine.tensor(x), params[0], params[1]))
        return ops.linear(h, params[2], params[3])

    history: dict = {"loss": [], "accuracy": []}
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(x_train))
        bar = tqdm(range(0, len(order), batch), desc=f"epoch {epoch}/{epochs}", disable=not progress, leave=False)
        for b in bar:
            idx = order[b:b + batch]
            loss = ops.cross_entropy(logits(x_train[idx]), engine.tensor(y_train[idx]))
            grads = engine.grad(loss, params)
            with engine.no_grad():  # SGD with momentum: v = m v + g; p -= lr v
                for p, v, g in zip(params, velocity, grads):
                    v.mul_(momentum).add_(g)
                    p.sub_(v * lr)
            history["loss"].append(loss.item())
            bar.set_postfix(loss=f"{history['loss'][-1]:.3f}")
        with engine.no_grad():
            acc = float((logits(x_test).numpy().argmax(axis=1) == y_test).mean())
        history["accuracy"].append(acc)
        if progress:
            tqdm.write(f"epoch {epoch}: test accuracy {acc:.3f}")
    return history


def plot(history: dict, path: str | os.PathLike) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.8), dpi=100)
    ax1, ax2 = fig.subplots(1, 2)
    loss = np.asarray(history["loss"])
    ax1.plot(loss, lw=0.6, alpha=0.5, label="minibatch")
    k = max(1, len(loss) // 50)
    ax1.plot(np.arange(k - 1, len(loss)), np.convolve(loss, np.ones(k) / k, mode="valid"), lw=1.5,
             label=f"mean of {k}")
    ax1.set(xlabel="step", ylabel="cross-entropy loss", title="training loss", yscale="log")
    ax1.legend()
    acc = history["accuracy"]
    ax2.plot(range(1, len(acc) + 1), acc, marker="o")
    ax2.set(xlabel="epoch", ylabel="accuracy", title="held-out accuracy", ylim=(min(acc + [0.8]) - 0.02, 1.0))
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)


def main(out_dir: str | os.PathLike = ".", epochs: int = 10, quick: bool = False, progress: bool = True) -> dict:
    history = train(epochs=2 if quick else epochs, progress=progress)
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot(history, out / "digits_training.png")
    if progress:
        print(f"final test accuracy {history['accuracy'][-1]:.3f}; wrote {out / 'digits_training.png'}")
    return history


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    main(a.out, a.epochs, quick=a.quick or os.environ.get("THREADGRAD_EXAMPLES_QUICK") == "1")
