"""Demo: train a small MLP on a synthetic two-spirals problem; the loss falls step by step.

Run: python examples/demo.py [--steps N]
Each backward runs on threadgrad's executor; the second layer lives on a ``virtual:1``
device, so every step also crosses to that device's worker thread and back.
"""
from __future__ import annotations

import argparse
import math

import numpy as np

from threadgrad import engine, ops


def spirals(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.sqrt(rng.random(n)) * 3 * math.pi
    sign = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    x = np.stack([sign * t * np.cos(t), sign * t * np.sin(t)], axis=1) / 10 + rng.normal(0, 0.02, (n, 2))
    y = (sign > 0).astype(np.float32)[:, None]
    return x.astype(np.float32), y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=0.4)
    args = parser.parse_args()

    engine.manual_seed(0)
    x_np, y_np = spirals(512)
    x, y = engine.tensor(x_np), engine.tensor(y_np)
    w1 = (engine.randn(2, 64) * 0.8).requires_grad_()
    b1 = engine.zeros(64, requires_grad=True)
    w2 = (engine.randn(64, 64, device="virtual:1") * 0.2).requires_grad_()
    w3 = (engine.randn(64, 1) * 0.2).requires_grad_()
    params = [w1, b1, w2, w3]

    for step in range(args.steps + 1):
        h = ops.tanh(x @ w1 + b1)
        h = ops.to(ops.tanh(ops.to(h, "virtual:1") @ w2), "cpu")  # a hop to another device worker
        logits = h @ w3
        p = 1 / (1 + ops.exp(-logits))
        loss = ((p - y) ** 2).mean()
        for w in params:
            w.grad = None
        loss.backward()
        with engine.no_grad():
            for w in params:
                w -= args.lr * w.grad
        if step % 20 == 0:
            acc = float(((p.detach().numpy() > 0.5) == (y_np > 0.5)).mean())
            print(f"step {step:4d}  loss {loss.item():.4f}  accuracy {acc:.3f}")
    print("engine threads:", [t.name for t in engine.get_engine().worker_threads()])


if __name__ == "__main__":
    main()
