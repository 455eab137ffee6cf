"""Data-parallel training from several threads: each thread runs its shard's forward and
starts that shard's backward with ``engine.grad_async``.

Run: python examples/data_parallel_threads.py [--threads K] [--epochs N] [--quick]
(needs scikit-learn for the digits: ``pip install -e '.[examples]'``; ``--quick`` or
THREADGRAD_EXAMPLES_QUICK=1: one epoch, for CI.)

Each step splits the minibatch into K shards. K trainer threads (a ThreadPoolExecutor) each run
the forward pass of their shard, recording their own graph (grad mode is thread-local, graphs
are independent), and hand the backward to the engine with ``engine.grad_async(loss, params)``,
which returns a Future at once: the K backward passes then run on engine pool threads
concurrently. The main thread waits for the K futures, averages the gradients by shard size
(exactly the whole minibatch's gradient) and applies SGD with momentum. The update is written by
hand under ``engine.no_grad()``: threadgrad's optimizers (``threadgrad.optim``) are being added
separately, and this loop will use them once they land.
"""
from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from threadgrad import engine, ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits import load_split  # noqa: E402 - the same split as digits.py


def logits(params: list, x: np.ndarray) -> engine.Tensor:
    h = ops.relu(ops.linear(engine.tensor(x), params[0], params[1]))
    return ops.linear(h, params[2], params[3])


def shard_backward(params: list, x: np.ndarray, y: np.ndarray) -> tuple[float, Future]:
    """On a trainer thread: this shard's forward, then its backward started on the engine."""
    loss = ops.cross_entropy(logits(params, x), engine.tensor(y))
    return loss.item(), engine.grad_async(loss, params)


def main(threads: int = 4, epochs: int = 5, batch: int = 128, lr: float = 0.1, momentum: float = 0.9,
         seed: int = 0, verbose: bool = True) -> float:
    """Train; return the held-out accuracy."""
    engine.manual_seed(seed)
    rng = np.random.default_rng(seed)
    x_train, y_train, x_test, y_test = load_split()
    params = [(engine.randn(64, 64) * 0.18).requires_grad_(), engine.zeros(64, requires_grad=True),
              (engine.randn(10, 64) * 0.18).requires_grad_(), engine.zeros(10, requires_grad=True)]
    velocity = [engine.zeros_like(p) for p in params]
    acc = 0.0
    with ThreadPoolExecutor(threads, thread_name_prefix="trainer") as pool:
        for epoch in range(1, epochs + 1):
            order = rng.permutation(len(x_train))
            losses = []
            for b in range(0, len(order), batch):
                shards = [s for s in np.array_split(order[b:b + batch], threads) if len(s)]
                started = [pool.submit(shard_backward, params, x_train[s], y_train[s]) for s in shards]
                results = [f.result() for f in started]             # (loss, Future of its gradients)
                grads = [fut.result() for _, fut in results]        # in shard order: reproducible
                weights = [len(s) / sum(len(t) for t in shards) for s in shards]
                with engine.no_grad():  # the average gradient, then SGD with momentum
                    for i, (p, v) in enumerate(zip(params, velocity)):
                        g = sum(w * gs[i] for w, gs in zip(weights, grads))
                        v.mul_(momentum).add_(g)
                        p.sub_(v * lr)
                losses.append(sum(w * loss for w, (loss, _) in zip(weights, results)))
            with engine.no_grad():
                acc = float((logits(params, x_test).numpy().argmax(axis=1) == y_test).mean())
            if verbose:
                print(f"epoch {epoch}: train loss {np.mean(losses):.4f}  test accuracy {acc:.3f}")
    return acc


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    quick = a.quick or os.environ.get("THREADGRAD_EXAMPLES_QUICK") == "1"
    main(threads=a.threads, epochs=1 if quick else a.epochs)
