"""Data-parallel training: an MLP learns scikit-learn's handwritten digits, two shards at a time.

Run: python examples/digits.py [--epochs N] [--seed S]
(needs scikit-learn: ``pip install -e '.[examples]'``; the data set ships inside it, no download.)

What it shows: each SGD step cuts its minibatch into 2 shards, builds one loss per shard and
starts both backward passes at once with ``engine.grad_async(loss, params)``. Each call returns
a ``concurrent.futures.Future`` and runs on an engine thread, so the two shards' gradients are
computed concurrently (numpy releases the GIL inside its matrix products). The step then
waits on both futures, averages the gradients (weighted by shard size, which gives exactly the
whole minibatch's gradient) and applies a momentum step under ``engine.no_grad()``.

It prints the training loss and the held-out test accuracy after every epoch (test set: a
fixed 20% of the 1,797 8x8 images, features standardized with the training set's statistics),
then the wall time and the engine threads that ran the shards. The default run (10 epochs)
reaches about 0.98 test accuracy in about a second.
"""
from __future__ import annotations

import argparse
import time
from concurrent.futures import Future

import numpy as np

from threadgrad import engine, ops
from threadgrad.engine import Tensor

N_SHARDS = 2
TEST_FRACTION = 0.2
SPLIT_SEED = 0  # the train/test split is the same for every run, whatever main's seed


def load_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_test, y_test)``: the digits shuffled once with SPLIT_SEED, the
    last 20% held out, features standardized by the training set's mean and standard deviation
    (constant pixels stay 0). The shuffle matters: the data set is ordered by writer, and the
    unshuffled last 20% are writers the model never saw (a linear model scores ~0.90 there,
    ~0.97 on a shuffled split)."""
    from sklearn.datasets import load_digits  # the optional dependency: pip install -e '.[examples]'

    x, y = load_digits(return_X_y=True)
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(x))
    x, y = x[perm], y[perm]
    n_test = int(round(len(x) * TEST_FRACTION))
    mean, std = x[:-n_test].mean(axis=0), x[:-n_test].std(axis=0)
    std[std == 0] = 1.0
    x = ((x - mean) / std).astype(np.float32)
    y = y.astype(np.int64)
    return x[:-n_test], y[:-n_test], x[-n_test:], y[-n_test:]


def init_params(sizes: list[int]) -> list[Tensor]:
    """Weights ``(out, in)`` (as ``ops.linear`` takes them) with He initialisation; zero biases."""
    params: list[Tensor] = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        params.append((engine.randn(n_out, n_in) * float(np.sqrt(2.0 / n_in))).requires_grad_())
        params.append(engine.zeros(n_out, requires_grad=True))
    return params


def forward(params: list[Tensor], x: Tensor) -> Tensor:
    """The MLP's logits: linear layers with relu between them."""
    h = x
    for i in range(0, len(params), 2):
        h = ops.linear(h, params[i], params[i + 1])
        if i + 2 < len(params):
            h = ops.relu(h)
    return h


def accuracy(params: list[Tensor], x: np.ndarray, y: np.ndarray) -> float:
    with engine.no_grad():
        logits = forward(params, engine.tensor(x)).numpy()
    return float((logits.argmax(axis=1) == y).mean())


def sharded_gradients(params: list[Tensor], x: np.ndarray, y: np.ndarray) -> tuple[float, list[Tensor]]:
    """The minibatch's mean loss and its gradients, computed as N_SHARDS concurrent backward
    passes (one ``grad_async`` per shard) whose results are averaged by shard size."""
    shards = [s for s in np.array_split(np.arange(len(x)), N_SHARDS) if len(s)]
    losses: list[Tensor] = []
    futures: list[Future] = []
    for idx in shards:
        loss = ops.cross_entropy(forward(params, engine.tensor(x[idx])), engine.tensor(y[idx]))
        losses.append(loss)
        futures.append(engine.grad_async(loss, params))  # starts at once, on an engine thread
    weights = [len(idx) / len(x) for idx in shards]
    # Waits on both; summed in shard order whichever finished first, so a run is reproducible.
    per_shard = [future.result() for future in futures]
    with engine.no_grad():
        total = [sum(w * g for w, g in zip(weights, grads)) for grads in zip(*per_shard)]
    mean_loss = sum(w * loss.item() for w, loss in zip(weights, losses))
    return mean_loss, total


def main(epochs: int = 10, seed: int = 0, batch_size: int = 64, lr: float = 0.05,
         momentum: float = 0.9, hidden: int = 64, verbose: bool = True) -> float:
    """Train for ``epochs`` epochs from ``seed`` (weights and batch order); return the final
    test accuracy."""
    engine.manual_seed(seed)
    rng = np.random.default_rng(seed)
    x_train, y_train, x_test, y_test = load_split()
    params = init_params([x_train.shape[1], hidden, 10])
    velocity = [engine.zeros_like(p) for p in params]
    say = print if verbose else (lambda *a, **k: None)
    say(f"digits: {len(x_train)} train / {len(x_test)} test images, minibatch {batch_size} "
        f"in {N_SHARDS} shards, MLP {x_train.shape[1]}-{hidden}-10")

    start = time.perf_counter()
    acc = accuracy(params, x_test, y_test)
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(x_train))
        loss_sum = 0.0
        for b in range(0, len(order), batch_size):
            idx = order[b:b + batch_size]
            loss, grads = sharded_gradients(params, x_train[idx], y_train[idx])
            loss_sum += loss * len(idx)
            with engine.no_grad():  # v = momentum * v + g;  p -= lr * v
                for p, v, g in zip(params, velocity, grads):
                    v.mul_(momentum).add_(g)
                    p.sub_(v * lr)
        acc = accuracy(params, x_test, y_test)
        say(f"epoch {epoch:3d}  train loss {loss_sum / len(x_train):.4f}  test accuracy {acc:.3f}")
    say(f"done in {time.perf_counter() - start:.2f} s; engine threads: "
        f"{[t.name for t in engine.get_engine().worker_threads()]}")
    return acc


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(epochs=args.epochs, seed=args.seed)


if __name__ == "__main__":
    cli()
