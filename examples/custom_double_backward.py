"""A custom autograd Function whose backward is itself differentiable: double backward.

Run: python examples/custom_double_backward.py

``Softplus`` computes log(1 + e^x) in one numpy call and saves its input. Its backward,
``g * sigmoid(x)``, is written with threadgrad ops rather than numpy, so under
``create_graph=True`` the backward records a graph of its own: the gradient can be
differentiated again (Hessian-vector products, gradient penalties). The script checks the first
and second derivatives against their closed forms (sigmoid(x) and sigmoid(x)(1 - sigmoid(x)))
and with ``gradcheck`` / ``gradgradcheck`` (finite differences, float64).
"""
from __future__ import annotations

import numpy as np

from threadgrad import engine, ops


class Softplus(engine.Function):
    @staticmethod
    def forward(ctx, x: engine.Tensor) -> engine.Tensor:
        ctx.save_for_backward(x)
        return engine.tensor(np.logaddexp(0.0, x.detach().numpy()), dtype=x.dtype, device=x.device)

    @staticmethod
    def backward(ctx, g: engine.Tensor) -> engine.Tensor:
        (x,) = ctx.saved_tensors
        return g * ops.sigmoid(x)  # ops, not numpy: differentiable again


def main(verbose: bool = True) -> dict:
    x = engine.tensor([-2.0, -0.5, 0.0, 1.0, 3.0], dtype=engine.float64, requires_grad=True)
    y = Softplus.apply(x).sum()
    (g,) = engine.grad(y, x, create_graph=True)        # first derivative, as a graph
    (h,) = engine.grad(g.sum(), x)                     # its derivative: the Hessian's diagonal
    s = 1.0 / (1.0 + np.exp(-x.detach().numpy()))
    results = {
        "grad": g.detach().numpy(), "grad_closed_form": s,
        "second": h.numpy(), "second_closed_form": s * (1 - s),
        "gradcheck": engine.gradcheck(Softplus.apply, (x,)),
        "gradgradcheck": engine.gradgradcheck(Softplus.apply, (x,)),
    }
    if verbose:
        print("x                     ", x.detach().numpy())
        print("d softplus / dx       ", np.round(results["grad"], 6), " closed form sigmoid(x):", np.round(s, 6))
        print("d2 softplus / dx2     ", np.round(results["second"], 6), " closed form s(1-s):", np.round(s * (1 - s), 6))
        print("gradcheck:", results["gradcheck"], " gradgradcheck:", results["gradgradcheck"])
    return results


if __name__ == "__main__":
    main()
