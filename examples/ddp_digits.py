"""Data-parallel training across processes: examples/digits.py's MLP on scikit-learn's digits,
with threadgrad.distributed's DistributedDataParallel over MPI.

Run:  mpiexec -n 2 python examples/ddp_digits.py [--epochs N] [--seed S]
  or  python -m threadgrad.distributed.run -n 2 examples/ddp_digits.py
  or  python examples/ddp_digits.py            (one process: the reference run)
(needs ``pip install -e '.[examples,distributed]'``: scikit-learn and mpi4py with MPICH.)

Every process builds the same model (DDP copies rank 0's weights to all at construction),
draws the same minibatch order, and takes its shard of each minibatch (rows ``rank::world``).
Its loss is its shard's share of the minibatch mean (the sum of its samples' losses divided by
the minibatch size, times the world size), so the average over the ranks that DDP writes to
``.grad`` is exactly the gradient of the whole minibatch's mean loss: the run follows the
one-process run, step for step, up to float rounding, and reaches the same test accuracy.
The SGD-with-momentum step is written by hand (the same on every rank, so the weights stay
equal without further communication). Rank 0 prints.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from threadgrad import distributed as dist
from threadgrad import engine, ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits import accuracy, forward, init_params, load_split  # noqa: E402 - the same data and model


def main(epochs: int = 10, seed: int = 0, batch_size: int = 64, lr: float = 0.05, momentum: float = 0.9,
         hidden: int = 64, verbose: bool = True) -> float:
    """Train on every rank of the job (init_process_group first); return the test accuracy."""
    rank, world = dist.get_rank(), dist.get_world_size()
    engine.manual_seed(seed + 1000 * rank)  # different on purpose: DDP's broadcast makes them equal
    rng = np.random.default_rng(seed)  # the same minibatch order on every rank
    x_train, y_train, x_test, y_test = load_split()
    params = init_params([x_train.shape[1], hidden, 10])
    ddp = dist.DistributedDataParallel(params)
    velocity = [engine.zeros_like(p) for p in params]
    say = print if verbose and rank == 0 else (lambda *a, **k: None)
    say(f"ddp digits: {world} processes, minibatch {batch_size} split {world} ways, MLP {x_train.shape[1]}-{hidden}-10")
    start = time.perf_counter()
    acc = accuracy(params, x_test, y_test)
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(x_train))
        loss_sum = 0.0
        for b in range(0, len(order), batch_size):
            idx = order[b:b + batch_size]
            mine = idx[rank::world]
            for p in params:
                p.grad = None
            logits = forward(params, engine.tensor(x_train[mine]))
            per_sample = ops.cross_entropy(logits, engine.tensor(y_train[mine])) * len(mine)
            loss = per_sample * (world / len(idx))
            loss.backward()  # .grad: the average over the ranks, i.e. the whole minibatch's gradient
            loss_sum += per_sample.item()
            with engine.no_grad():  # v = momentum * v + g;  p -= lr * v
                for p, v in zip(params, velocity):
                    v.mul_(momentum).add_(p.grad)
                    p.sub_(v * lr)
        total = engine.tensor([loss_sum])
        dist.all_reduce(total)
        acc = accuracy(params, x_test, y_test)
        say(f"epoch {epoch:3d}  train loss {total.item() / len(x_train):.4f}  test accuracy {acc:.3f}")
    say(f"done in {time.perf_counter() - start:.2f} s")
    ddp.remove_hooks()
    return acc


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    dist.init_process_group("mpi")
    acc = main(epochs=args.epochs, seed=args.seed)
    if dist.get_rank() == 0:
        print(f"final test accuracy {acc:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    cli()
