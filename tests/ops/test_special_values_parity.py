"""Every op's gradient at the values where formulas break: 0 (and -0), +-inf, NaN and ties,
against torch (skipped without it). torch is the oracle: where its formula masks a 0/0 or
passes a gradient through a NaN, threadgrad's must do the same, value for value, NaN for NaN.

The ops are those of ``ops.REGISTRY`` whose formulas have kinks, divisions or tie-breaking:
the pointwise ones, the binary ones, the reductions and norms, the losses. Each case runs the
op on one input (or pair) holding all the special values at once, weights its output with
distinct numbers (so a gradient sent to the wrong element or split wrongly shows), and
compares values and gradients of threadgrad and torch in float64.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import threadgrad as tg
from threadgrad import ops

torch = pytest.importorskip("torch")

# Every case here makes floating-point events on purpose (0/0, inf - inf, log(0)), and some
# come from inside numpy's own Python code (ndarray.sum), which the filter on threadgrad's
# modules (Note [Floating-point warnings]) does not name; the values are what is asserted.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

INF, NAN = math.inf, math.nan
# every special value, twice where a tie matters
UNARY_X = [0.0, -0.0, 1.0, -1.0, 2.0, 2.0, 0.5, INF, -INF, NAN]
# pairs (a, b): ties, NaN on either side, infinities, zeros of both signs
PAIRS_A = [1.0, 2.0, 2.0, NAN, 1.0, NAN, INF, -INF, INF, 0.0, -0.0, 0.0]
PAIRS_B = [2.0, 1.0, 2.0, 1.0, NAN, NAN, 1.0, -INF, INF, -0.0, 0.0, 0.0]
# rows for reductions over dim=1: a zero row, ties of |x|, ties of the max, NaN, infinities
ROWS = [[0.0, 0.0, 0.0], [1.0, -1.0, 1.0], [2.0, 2.0, -1.0], [NAN, 1.0, 2.0], [INF, 1.0, 2.0],
        [-INF, -INF, 0.0], [0.5, -3.0, 3.0], [-2.0, 0.0, 2.0]]


def _pair(values):
    return (tg.tensor(np.array(values, dtype=np.float64), requires_grad=True),
            torch.tensor(np.array(values, dtype=np.float64), requires_grad=True))


def _check(fn_ours, fn_theirs, *inputs, atol=1e-15):
    """Run both, weight the outputs with distinct numbers, compare outputs and gradients
    (``atol``: for gradients that are differences of terms near 1, whose summation order differs)."""
    pairs = [_pair(v) for v in inputs]
    ours = fn_ours(*[p[0] for p in pairs])
    theirs = fn_theirs(*[p[1] for p in pairs])
    # (values to the last bits or so: the formulas are the same, the summation orders not)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12, atol=1e-15,
                               equal_nan=True)
    w = np.arange(1, theirs.numel() + 1, dtype=np.float64).reshape(theirs.shape)
    (ours * tg.tensor(w)).sum().backward()
    (theirs * torch.tensor(w)).sum().backward()
    for (a, b), v in zip(pairs, inputs):
        got = a.grad.numpy() if a.grad is not None else np.zeros(np.shape(v))
        want = b.grad.numpy() if b.grad is not None else np.zeros(np.shape(v))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=atol, equal_nan=True,
                                   err_msg=f"gradient at {v}")


UNARY = {
    "abs": (ops.abs, torch.abs), "relu": (ops.relu, torch.relu), "neg": (ops.neg, torch.neg),
    "exp": (ops.exp, torch.exp), "log": (ops.log, torch.log), "sqrt": (ops.sqrt, torch.sqrt),
    "sin": (ops.sin, torch.sin), "cos": (ops.cos, torch.cos), "tanh": (ops.tanh, torch.tanh),
    "sigmoid": (ops.sigmoid, torch.sigmoid), "erf": (ops.erf, torch.erf),
    "clamp_min": (lambda x: ops.clamp_min(x, 0.5), lambda x: torch.clamp_min(x, 0.5)),
    "clamp_max": (lambda x: ops.clamp_max(x, 0.5), lambda x: torch.clamp_max(x, 0.5)),
    **{n: (getattr(ops, n), getattr(torch, n)) for n in (
        "log1p", "expm1", "log2", "log10", "exp2", "rsqrt", "reciprocal", "square", "sinh", "cosh", "asin", "acos",
        "atan", "asinh", "acosh", "atanh", "floor", "ceil", "trunc", "round", "sign", "frac")},
    "gelu": (ops.gelu, torch.nn.functional.gelu),
    "gelu tanh": (lambda x: ops.gelu(x, approximate="tanh"),
                  lambda x: torch.nn.functional.gelu(x, approximate="tanh")),
    "softplus": (ops.softplus, torch.nn.functional.softplus),
    "clamp": (lambda x: ops.clamp(x, -1.0, 1.0), lambda x: torch.clamp(x, -1.0, 1.0)),
    "clamp min": (lambda x: ops.clamp(x, min=0.0), lambda x: torch.clamp(x, min=0.0)),
    "pow 2": (lambda x: ops.pow(x, 2.0), lambda x: torch.pow(x, 2.0)),
    "pow 0.5": (lambda x: ops.pow(x, 0.5), lambda x: torch.pow(x, 0.5)),  # (-0 and -inf: below)
    "pow 0": (lambda x: ops.pow(x, 0.0), lambda x: torch.pow(x, 0.0)),
    "pow -1": (lambda x: ops.pow(x, -1.0), lambda x: torch.pow(x, -1.0)),
    "maximum with 0": (lambda x: ops.maximum(x, tg.zeros((), dtype=tg.float64)),
                       lambda x: torch.maximum(x, torch.zeros((), dtype=torch.float64))),
    "l1_loss none": (lambda x: tg.nn.functional.l1_loss(x, tg.zeros(10, dtype=tg.float64), reduction="none"),
                     lambda x: torch.nn.functional.l1_loss(x, torch.zeros(10, dtype=torch.float64),
                                                           reduction="none")),
}


# torch's cpu kernel computes x ** -0.5 as 1 / sqrt(x): -inf at -0.0 and NaN at -inf, where
# IEEE pow (numpy's) gives +inf and 0 (docs/parity.md).
EXCEPT = {"pow 0.5": {-0.0, -INF}}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_at_special_values(name):
    ours, theirs = UNARY[name]
    skip = EXCEPT.get(name, set())
    _check(ours, theirs, [v for v in UNARY_X if not (v in skip and math.copysign(1, v) == -1)])


BINARY = {
    "add": (ops.add, torch.add), "sub": (ops.sub, torch.sub), "mul": (ops.mul, torch.mul),
    "div": (ops.div, torch.div), "pow": (ops.pow, torch.pow),
    "maximum": (ops.maximum, torch.maximum), "minimum": (ops.minimum, torch.minimum),
    "remainder": (ops.remainder, torch.remainder),
    "atan2": (ops.atan2, torch.atan2), "hypot": (ops.hypot, torch.hypot), "fmod": (ops.fmod, torch.fmod),
    "lerp": (lambda a, b: ops.lerp(a, b, 0.3), lambda a, b: torch.lerp(a, b, 0.3)),
    "addcmul": (lambda a, b: ops.addcmul(a, b, b, value=0.5), lambda a, b: torch.addcmul(a, b, b, value=0.5)),
    "addcdiv": (lambda a, b: ops.addcdiv(a, a, b, value=2.0), lambda a, b: torch.addcdiv(a, a, b, value=2.0)),
    "where": (lambda a, b: ops.where(a > b, a, b), lambda a, b: torch.where(a > b, a, b)),
    "mse_loss none": (lambda a, b: ops.mse_loss(a, b, reduction="none"),
                      lambda a, b: torch.nn.functional.mse_loss(a, b, reduction="none")),
    "l1_loss none": (lambda a, b: tg.nn.functional.l1_loss(a, b, reduction="none"),
                     lambda a, b: torch.nn.functional.l1_loss(a, b, reduction="none")),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_at_special_values(name):
    ours, theirs = BINARY[name]
    _check(ours, theirs, PAIRS_A, PAIRS_B)


def _norms():
    cases = {}
    for p in (1, 2, 3, 0.5, 1.5, 4, INF, -INF, 0):
        for dim in (None, 1, (0, 1)):
            cases[f"norm p={p} dim={dim}"] = (
                lambda x, p=p, dim=dim: ops.norm(x, p, dim),
                lambda x, p=p, dim=dim: torch.norm(x, p, dim))
    return cases


REDUCTIONS = {
    "sum": (lambda x: ops.sum(x, 1), lambda x: torch.sum(x, 1)),
    "mean": (lambda x: ops.mean(x, 1), lambda x: torch.mean(x, 1)),
    "max": (ops.max, torch.max), "min": (ops.min, torch.min),
    "max dim": (lambda x: ops.max(x, 1).values, lambda x: torch.max(x, 1).values),
    "min dim": (lambda x: ops.min(x, 1).values, lambda x: torch.min(x, 1).values),
    "logsumexp": (lambda x: ops.logsumexp(x, 1), lambda x: torch.logsumexp(x, 1)),
    "softmax": (lambda x: ops.softmax(x, 1), lambda x: torch.softmax(x, 1)),
    "log_softmax": (lambda x: ops.log_softmax(x, 1), lambda x: torch.log_softmax(x, 1)),
    "var": (lambda x: ops.var(x, 1), lambda x: torch.var(x, 1)),
    "std": (lambda x: ops.std(x, 1), lambda x: torch.std(x, 1)),
    "l1_loss mean": (lambda x: tg.nn.functional.l1_loss(x, tg.zeros_like(x)),
                     lambda x: torch.nn.functional.l1_loss(x, torch.zeros_like(x))),
    **_norms(),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_and_norms_at_special_values(name):
    ours, theirs = REDUCTIONS[name]
    _check(ours, theirs, ROWS)


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_and_norms_on_finite_rows_with_ties_and_zeros(name):
    """The same without NaN and inf rows, where a masked 0/0 or a tie split shows alone."""
    ours, theirs = REDUCTIONS[name]
    _check(ours, theirs, [r for r in ROWS if all(math.isfinite(v) for v in r)])


W = [[1.0, 0.0], [INF, -1.0], [NAN, 2.0]]  # a right operand with its own special values
TARGETS = [0, 1, 2, 0, 1, 2, 0, 1]

STRUCTURED = {
    "matmul": (lambda x, w: x @ w, lambda x, w: x @ w, (ROWS, W)),
    "linear": (lambda x, w: tg.nn.functional.linear(x, w.T), lambda x, w: torch.nn.functional.linear(x, w.T),
               (ROWS, W)),
    "cross_entropy": (lambda x: tg.nn.functional.cross_entropy(x, tg.tensor(TARGETS)),
                      lambda x: torch.nn.functional.cross_entropy(x, torch.tensor(TARGETS)), (ROWS,)),
    "getitem": (lambda x: x[[0, 2, 2], 1:], lambda x: x[[0, 2, 2], 1:], (ROWS,)),
    "gather": (lambda x: tg.gather(x, 1, tg.tensor([[t] for t in TARGETS])),
               lambda x: torch.gather(x, 1, torch.tensor([[t] for t in TARGETS])), (ROWS,)),
    "cat": (lambda x, w: tg.cat([x.T, w], 1), lambda x, w: torch.cat([x.T, w], 1), (ROWS, W)),
    "stack": (lambda x: tg.stack([x, x * 2.0]), lambda x: torch.stack([x, x * 2.0]), (ROWS,)),
    "expand": (lambda x: x[:1].expand(4, 3), lambda x: x[:1].expand(4, 3), (ROWS,)),
    "reshape": (lambda x: x.T.reshape(-1), lambda x: x.T.reshape(-1), (ROWS,)),
    "where": (lambda x: tg.where(x > 0.5, x, x * x), lambda x: torch.where(x > 0.5, x, x * x), (ROWS,)),
    # linear algebra (issue 31): beta=0 does not read input (its NaN stay out), alpha=0 the factors
    "addmm": (lambda x, w: tg.addmm(x[:, :2], x, w) + tg.addmm(x[:, :2], x, w, beta=0, alpha=2.0),
              lambda x, w: torch.addmm(x[:, :2], x, w) + torch.addmm(x[:, :2], x, w, beta=0, alpha=2.0), (ROWS, W)),
    "addmm alpha=0": (lambda x, w: tg.addmm(x[:, :2], x, w, alpha=0),
                      lambda x, w: torch.addmm(x[:, :2], x, w, alpha=0), (ROWS, W)),
    "addmv": (lambda x, w: tg.addmv(x[:, 0], x, w[:, 0], beta=0) + tg.addmv(x[:, 1], x, w[:, 1], alpha=0.5),
              lambda x, w: torch.addmv(x[:, 0], x, w[:, 0], beta=0) + torch.addmv(x[:, 1], x, w[:, 1], alpha=0.5),
              (ROWS, W)),
    "baddbmm": (lambda x, w: tg.baddbmm(x.reshape(2, 4, 3)[:, :, :2], x.reshape(2, 4, 3), w.expand(2, 3, 2), beta=0),
                lambda x, w: torch.baddbmm(x.reshape(2, 4, 3)[:, :, :2], x.reshape(2, 4, 3), w.expand(2, 3, 2),
                                           beta=0), (ROWS, W)),
    "vdot kron tensordot": (lambda x, w: tg.vdot(x[:, 0], x[:, 2]) + tg.kron(x[:3], w).sum()
                            + tg.tensordot(x, w, 1).sum(),
                            lambda x, w: torch.vdot(x[:, 0], x[:, 2]) + torch.kron(x[:3], w).sum()
                            + torch.tensordot(x, w, 1).sum(), (ROWS, W)),
    "einsum": (lambda x, w: tg.einsum("ij,jk->ik", x, w) + tg.einsum("ij->i", x)[:, None],
               lambda x, w: torch.einsum("ij,jk->ik", x, w) + torch.einsum("ij->i", x)[:, None], (ROWS, W)),
}


@pytest.mark.parametrize("name", sorted(STRUCTURED))
def test_products_losses_and_indexing_at_special_values(name):
    """Ops whose gradients only move or multiply values: a NaN or inf reaches the same
    elements as in torch, and no 0 * inf appears where torch has none."""
    ours, theirs, inputs = STRUCTURED[name]
    _check(ours, theirs, *inputs)


IMG = [[[[0.0, 1.0, -1.0], [INF, 2.0, 2.0], [NAN, 0.5, -INF]]]]  # (1, 1, 3, 3)
KERNEL = [[[[1.0, 0.0], [-2.0, 0.5]]]]  # (1, 1, 2, 2)

# 2x2 matrices: zero, rank one (det exactly 0), ties of column and row sums, invertible, NaN, inf
SQUARES = [[[0.0, 0.0], [0.0, 0.0]], [[1.0, 2.0], [2.0, 4.0]], [[1.0, -2.0], [2.0, 1.0]], [[3.0, 1.0], [1.0, 2.0]],
           [[2.0, 1.0], [0.5, 3.0]], [[1.0, NAN], [NAN, 1.0]], [[INF, 0.0], [0.0, 1.0]]]
MATRIX_ORDERS = ("fro", "nuc", 2, -2, 1, -1, INF, -INF)

MORE = {
    "conv2d": (lambda x, k: tg.nn.functional.conv2d(x, k), lambda x, k: torch.nn.functional.conv2d(x, k),
               (IMG, KERNEL)),
    "cumsum": (lambda x: x.cumsum(1), lambda x: x.cumsum(1), (ROWS,)),
    "amax": (lambda x: x.amax(1), lambda x: x.amax(1), (ROWS,)),
    "sort": (lambda x: x.sort(1)[0], lambda x: x.sort(1)[0], (ROWS,)),
    "sort descending dim 0": (lambda x: x.sort(0, descending=True)[0], lambda x: x.sort(0, descending=True)[0],
                              (ROWS,)),
    "amin": (lambda x: x.amin(1), lambda x: x.amin(1), (ROWS,)),
    # ops/scan.py, ops/order.py (the indices' ties and NaN: tests/ops/test_scan_ops.py)
    **{f"{name} dim 1": (lambda x, name=name: getattr(x, name)(1), lambda x, name=name: getattr(x, name)(1), (ROWS,))
       for name in ("prod", "cumprod", "logcumsumexp", "nansum", "nanmean")},
    **{f"{name} all": (lambda x, name=name: getattr(x, name)(), lambda x, name=name: getattr(x, name)(), (ROWS,))
       for name in ("prod", "median", "nanmedian", "nansum")},
    **{f"{name} dim 1": (lambda x, name=name: getattr(x, name)(1)[0], lambda x, name=name: getattr(x, name)(1)[0],
                         (ROWS,)) for name in ("cummax", "cummin", "median", "nanmedian")},
    "mode dim 1": (lambda x: x.mode(1)[0], lambda x: x.mode(1)[0], (ROWS,)),
    "prod dim 0": (lambda x: x.prod(0), lambda x: x.prod(0), (ROWS,)),
    "cumprod dim 0": (lambda x: x.cumprod(0), lambda x: x.cumprod(0), (ROWS,)),
    "aminmax": (lambda x: tg.stack(x.aminmax(dim=1)), lambda x: torch.stack(x.aminmax(dim=1)), (ROWS,)),
    "aminmax all": (lambda x: tg.stack(x.aminmax()), lambda x: torch.stack(x.aminmax()), (ROWS,)),
    "topk": (lambda x: x.topk(2, 1).values, lambda x: x.topk(2, 1).values, (ROWS,)),
    "topk smallest": (lambda x: x.topk(1, 1, largest=False).values, lambda x: x.topk(1, 1, largest=False).values,
                      (ROWS,)),
    "kthvalue": (lambda x: x.kthvalue(2, 1).values, lambda x: x.kthvalue(2, 1).values, (ROWS,)),
    "var_mean": (lambda x: tg.stack(tg.var_mean(x, 1)), lambda x: torch.stack(torch.var_mean(x, 1)), (ROWS,)),
    "std_mean": (lambda x: tg.stack(tg.std_mean(x, 1)), lambda x: torch.stack(torch.std_mean(x, 1)), (ROWS,)),
    "bmm": (lambda x, w: tg.bmm(x.reshape(2, 4, 3), (w @ w.T).reshape(1, 3, 3).expand(2, 3, 3)),
            lambda x, w: torch.bmm(x.reshape(2, 4, 3), (w @ w.T).reshape(1, 3, 3).expand(2, 3, 3)), (ROWS, W)),
    "dot mv outer": (lambda x: tg.dot(x[:, 0], x[:, 1]) + tg.mv(x, x[0]).sum() + tg.outer(x[0], x[1]).sum(),
                     lambda x: torch.dot(x[:, 0], x[:, 1]) + torch.mv(x, x[0]).sum() + torch.outer(x[0], x[1]).sum(),
                     (ROWS,)),
    "split": (lambda x: tg.split(x, 2)[1], lambda x: torch.split(x, 2)[1], (ROWS,)),
    # tg.linalg (issue 31): singular and rank-deficient matrices, ties of the 1- and inf-norms,
    # zero matrices, NaN (which LAPACK passes through)
    "linalg_det": (lambda a: tg.linalg.det(a), lambda a: torch.linalg.det(a), (SQUARES,)),
    "linalg_inv linalg_solve": (lambda a: tg.linalg.inv(a[4:]) + tg.linalg.solve(a[4:], a[4:, 0]).unsqueeze(-1),
                                lambda a: torch.linalg.inv(a[4:]) + torch.linalg.solve(a[4:], a[4:, 0]).unsqueeze(-1),
                                (SQUARES,)),
    "linalg_slogdet": (lambda a: tg.linalg.slogdet(a[2:]).logabsdet, lambda a: torch.linalg.slogdet(a[2:]).logabsdet,
                       (SQUARES,)),
    "linalg_matrix_norm": (lambda a: tg.stack([tg.linalg.matrix_norm(a[:4], o) for o in MATRIX_ORDERS]),
                           lambda a: torch.stack([torch.linalg.matrix_norm(a[:4], o) for o in MATRIX_ORDERS]),
                           (SQUARES,)),
    "linalg_norm linalg_vector_norm": (lambda a: tg.linalg.norm(a[:4], dim=(1, 2))
                                       + tg.linalg.vector_norm(a[:4], 3.0, (1, 2)),
                                       lambda a: torch.linalg.norm(a[:4], dim=(1, 2))
                                       + torch.linalg.vector_norm(a[:4], 3.0, (1, 2)), (SQUARES,)),
    "linalg_svd linalg_pinv": (lambda a: tg.linalg.pinv(a[:4]) + tg.linalg.svdvals(a[:4]).sum(),
                               lambda a: torch.linalg.pinv(a[:4]) + torch.linalg.svdvals(a[:4]).sum(), (SQUARES,)),
    "linalg_eigh linalg_cholesky": (lambda a: tg.linalg.eigvalsh(a[4:])
                                    + tg.linalg.cholesky(a[2:4] @ a[2:4].mT + 1.0).sum(),
                                    lambda a: torch.linalg.eigvalsh(a[4:])
                                    + torch.linalg.cholesky(a[2:4] @ a[2:4].mT + 1.0).sum(), (SQUARES,)),
    "linalg_qr": (lambda a: tg.linalg.qr(a[2:4])[1] ** 2, lambda a: torch.linalg.qr(a[2:4])[1] ** 2, (SQUARES,)),
    "clone": (lambda x: x.clone(), lambda x: x.clone(), (ROWS,)),
    "to float32": (lambda x: x.to(tg.float32).to(tg.float64), lambda x: x.to(torch.float32).to(torch.float64),
                   (ROWS,)),
    "index_put": (lambda x, v: ops.index_put(x, (tg.tensor([0, 3, 5]),), v),
                  lambda x, v: torch.index_put(x, (torch.tensor([0, 3, 5]),), v), (ROWS, [NAN, INF, 0.0])),
    "transpose": (lambda x: x.transpose(0, 1), lambda x: x.transpose(0, 1), (ROWS,)),
    "permute": (lambda x: x.permute(1, 0), lambda x: x.permute(1, 0), (ROWS,)),
    "squeeze, unsqueeze": (lambda x: x.unsqueeze(0).squeeze(0), lambda x: x.unsqueeze(0).squeeze(0), (ROWS,)),
}


@pytest.mark.parametrize("name", sorted(MORE))
def test_the_remaining_ops_at_special_values(name):
    ours, theirs, inputs = MORE[name]
    _check(ours, theirs, *inputs)


def test_floor_divide_at_special_values_has_torchs_values():
    # (no derivative, as torch's: values only)
    a = np.array(PAIRS_A, dtype=np.float64)
    b = np.array(PAIRS_B, dtype=np.float64)
    np.testing.assert_array_equal(ops.floor_divide(tg.tensor(a), tg.tensor(b)).numpy(),
                                  torch.floor_divide(torch.tensor(a), torch.tensor(b)).numpy())


def test_layer_norm_at_special_values():
    # a row's gradient is rstd * (g*w - mean(g*w) - xhat * mean(g*w * xhat)): terms near 1 that
    # cancel to 1e-4, in torch's summation order and ours
    _check(lambda x, w: tg.nn.functional.layer_norm(x, (3,), w[0]),
           lambda x, w: torch.nn.functional.layer_norm(x, (3,), w[0]), ROWS, [[1.0, -2.0, 0.5]], atol=1e-13)


def test_every_op_of_the_registry_is_checked_here():
    """Each op of ops.REGISTRY runs at special values in one of the tables above but dropout,
    whose mask is random (its gradient is g times the mask, as mul's, which is here)."""
    covered = {"prod", "cumprod", "cummax", "cummin", "logcumsumexp", "aminmax", "median", "nanmedian", "nansum",
               "nanmean", "topk", "kthvalue", "mode", "var_mean", "std_mean",  # ops/scan.py, ops/order.py
               "abs", "relu", "neg", "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "erf", "gelu",
               "softplus", "clamp", "pow", "maximum", "add", "sub", "mul", "div", "minimum", "where", "mse_loss",
               "sum", "mean", "max", "min", "logsumexp", "softmax", "log_softmax", "var", "std", "norm",
               "matmul", "linear", "layer_norm", "cross_entropy",
               "log1p", "expm1", "log2", "log10", "exp2", "rsqrt", "reciprocal", "square", "sinh", "cosh", "asin",
               "acos", "atan", "asinh", "acosh", "atanh", "floor", "ceil", "trunc", "round", "sign", "frac",
               "remainder", "floor_divide", "cumsum", "atan2", "hypot", "fmod", "clamp_min", "clamp_max", "lerp",
               "addcmul", "addcdiv", "amax", "amin", "bmm", "dot", "mv", "outer",
               "vdot", "addmm", "addmv", "baddbmm", "tensordot", "kron", "einsum", "linalg_inv", "linalg_det",
               "linalg_slogdet", "linalg_solve", "linalg_cholesky", "linalg_qr", "linalg_eigh", "linalg_svd",
               "linalg_pinv", "linalg_vector_norm", "linalg_matrix_norm", "linalg_norm", "sort", "getitem", "gather", "cat", "stack", "expand", "reshape",
               "conv2d", "split", "clone", "to", "index_put", "transpose", "dropout", "permute", "squeeze",
               "unsqueeze"}
    # the indexing and shape ops of issue 31, item 4: at special values in test_index_shape_parity.py
    from index_parity_cases import SPECIAL as index_ops

    covered |= set(index_ops)
    assert set(ops.REGISTRY) <= covered, set(ops.REGISTRY) - covered
