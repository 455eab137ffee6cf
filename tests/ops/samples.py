"""Sample inputs for every op in ``ops.REGISTRY``: the one table the op tests run over.

``SAMPLES[name]()`` returns a list of :class:`Sample`. Each holds float64 leaf tensors (those
that require grad are checked with gradcheck/gradgradcheck), how to call the op on them,
and optionally a numpy reference. A new op without an entry here fails test_registry.py.
Values are kept away from kinks (|x| >= 0.2 where abs/relu/max/clamp care) so that finite
differences are meaningful.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from threadgrad import engine

_rng = np.random.default_rng(1234)


def t(*shape: int, lo: float = 0.2, hi: float = 2.0, positive: bool = False, grad: bool = True) -> engine.Tensor:
    """A float64 leaf with entries of magnitude in [lo, hi] (random signs unless positive)."""
    mag = _rng.uniform(lo, hi, size=shape)
    sign = 1.0 if positive else _rng.choice([-1.0, 1.0], size=shape)
    return engine.tensor(np.asarray(mag * sign, dtype=np.float64), requires_grad=grad)


def distinct(*shape: int, grad: bool = True) -> engine.Tensor:
    """A float64 leaf with well-separated distinct entries (max/min/sort-like ops)."""
    n = int(np.prod(shape)) if shape else 1
    vals = _rng.permutation(n).astype(np.float64) * 0.5 - n * 0.25 + 0.1
    return engine.tensor(vals.reshape(shape), requires_grad=grad)


def ints(*shape: int, high: int) -> engine.Tensor:
    return engine.tensor(_rng.integers(0, high, size=shape), dtype=engine.int64)


class Sample:
    """``tensors``: the op's tensor inputs (positional, in order, unless ``call`` says otherwise).
    ``args``/``kwargs``: extra arguments after them. ``call(op, *tensors)``: a custom call.
    ``ref(*arrays)``: numpy reference of the (first) output. ``seed``: reseed before each
    call (random ops). ``grad``: whether gradcheck applies."""

    def __init__(self, *tensors: engine.Tensor, args: tuple = (), kwargs: dict | None = None,
                 call: Callable | None = None, ref: Callable | None = None, seed: int | None = None,
                 grad: bool = True, desc: str = "") -> None:
        self.tensors = tensors
        self.args = args
        self.kwargs = kwargs or {}
        self.call = call
        self.ref = ref
        self.seed = seed
        self.grad = grad
        self.desc = desc or ", ".join(str(list(x.shape)) for x in tensors)

    def run(self, op: Callable, *tensors: engine.Tensor) -> Any:
        if self.seed is not None:
            engine.manual_seed(self.seed)
        if self.call is not None:
            return self.call(op, *tensors)
        return op(*tensors, *self.args, **self.kwargs)

    def __repr__(self) -> str:
        return self.desc


def _binary(ref: Callable, positive_b: bool = False) -> Callable[[], list]:
    def make() -> list:
        return [
            Sample(t(2, 3), t(2, 3, positive=positive_b), ref=ref),
            Sample(t(2, 3), t(3, positive=positive_b), ref=ref, desc="broadcast [2,3] [3]"),
            Sample(t(2, 1), t(1, 3, positive=positive_b), ref=ref, desc="broadcast [2,1] [1,3]"),
            Sample(t(), t(2, 2, positive=positive_b), ref=ref, desc="0-d with [2,2]"),
            Sample(t(2, 3), args=(1.5,), ref=lambda a: ref(a, 1.5), desc="tensor and number"),
            # torch's promotion (float32 * int64 -> float32) differs from numpy's (-> float64)
            Sample(t(1, 3), engine.tensor(_rng.integers(1, 50, size=(64, 3)), dtype=engine.int64), ref=ref,
                   desc="float [1,3] with int [64,3]"),
        ]
    return make


def _unary(ref: Callable, **kw: Any) -> Callable[[], list]:
    def make() -> list:
        return [Sample(t(3, **kw), ref=ref), Sample(t(2, 3, **kw), ref=ref), Sample(t(**kw), ref=ref, desc="0-d")]
    return make


def _svd_invariants(usv: Any) -> tuple:
    """What an SVD determines whatever its signs: ``S``, ``U * U`` and ``Vh * Vh`` on the ``k``
    singular vectors (a full ``U``'s other columns are any basis of the rest), ``U S Vh``."""
    U, S, Vh = usv
    k = S.shape[-1]
    Uk, Vhk = U[..., :, :k], Vh[..., :k, :]
    return S, Uk * Uk, Vhk * Vhk, (Uk * S.unsqueeze(-2)) @ Vhk


def _np_erf(a: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(a)


def _np_logsumexp(a: np.ndarray, axis: Any, keepdims: bool = False) -> np.ndarray:
    m = a.max(axis=axis, keepdims=True)
    r = np.log(np.exp(a - m).sum(axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis)


def _np_softmax(a: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _np_conv2d(x: np.ndarray, w: np.ndarray, b: Any = None, stride: int = 1, padding: int = 0) -> np.ndarray:
    """The naive loop conv2d is checked against."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh = (h + 2 * padding - kh) // stride + 1
    ow = (wd + 2 * padding - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nckl,ockl->no", patch, w)
    if b is not None:
        out += b.reshape(1, o, 1, 1)
    return out


def _np_dilate(w: np.ndarray, d: int) -> np.ndarray:
    """A kernel with d-1 zeros between its taps: a dilated conv is the plain one with it."""
    o, c, kh, kw = w.shape
    out = np.zeros((o, c, (kh - 1) * d + 1, (kw - 1) * d + 1))
    out[:, :, ::d, ::d] = w
    return out


def _np_grouped(x: np.ndarray, w: np.ndarray, b: Any, groups: int, padding: int = 0) -> np.ndarray:
    """A grouped conv as one plain conv per group of channels, concatenated."""
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    parts = [_np_conv2d(x[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og], b[g * og:(g + 1) * og], padding=padding)
             for g in range(groups)]
    return np.concatenate(parts, axis=1)


def _np_layer_norm(x: np.ndarray, k: int, w: Any = None, b: Any = None, eps: float = 1e-5) -> np.ndarray:
    axes = tuple(range(x.ndim - k, x.ndim))
    y = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def _np_cross_entropy(logits: np.ndarray, target: np.ndarray) -> np.ndarray:
    lp = logits - _np_logsumexp(logits, axis=1, keepdims=True)
    return -lp[np.arange(len(target)), target].mean()


_SOME = [[True, False, True], [False, True, True]]  # where a sample keeps its numbers (else NaN)


def _with_zeros(x: engine.Tensor, at: list) -> engine.Tensor:
    """``x`` (a leaf) with exact zeros at the positions ``at`` (prod's and cumprod's special cases)."""
    data = x.detach().numpy().copy()
    for pos in at:
        data[pos] = 0.0
    return engine.tensor(data, requires_grad=True)


def _max_samples(name: str) -> Callable[[], list]:
    fn = getattr(np, name)
    arg = getattr(np, "arg" + name)

    def make() -> list:
        return [
            Sample(distinct(3, 4), ref=fn, desc="full reduction"),
            Sample(distinct(3, 4), kwargs={"dim": 1}, ref=lambda a: fn(a, axis=1), desc="dim=1"),
            Sample(distinct(2, 3, 2), kwargs={"dim": -2, "keepdim": True},
                   ref=lambda a: fn(a, axis=-2, keepdims=True), desc="dim=-2 keepdim"),
            Sample(distinct(), ref=fn, desc="0-d"),
            Sample(distinct(3), kwargs={"dim": 0}, call=lambda op, x: op(x, dim=0).indices, grad=False,
                   ref=lambda a: arg(a, axis=0), desc="indices"),
        ]
    return make


SAMPLES: dict[str, Callable[[], list]] = {
    # elementwise
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": _binary(np.divide, positive_b=True),
    "pow": lambda: [
        Sample(t(2, 3, positive=True), t(2, 3), ref=np.power),
        Sample(t(2, 3, positive=True), t(3), ref=np.power, desc="broadcast"),
        Sample(t(2, 3), args=(3,), ref=lambda a: a ** 3, desc="int exponent"),
        Sample(t(3, positive=True), args=(0.5,), ref=lambda a: a ** 0.5, desc="float exponent"),
        Sample(t(3), call=lambda op, b: op(2.0, b), ref=lambda b: 2.0 ** b, desc="number base"),
    ],
    "maximum": _binary(np.maximum),
    "remainder": lambda: [Sample(t(2, 3), t(2, 3, positive=True), ref=np.remainder),
                          Sample(t(2, 3), t(3, positive=True), ref=np.remainder, desc="broadcast [2,3] [3]"),
                          Sample(t(2, 3), args=(0.7,), ref=lambda a: np.remainder(a, 0.7), desc="tensor and number")],
    "atan2": _binary(np.arctan2),
    "hypot": lambda: [Sample(t(2, 3), t(2, 3), ref=np.hypot), Sample(t(2, 3), t(3), ref=np.hypot, desc="broadcast")],
    "fmod": lambda: [Sample(t(2, 3), t(2, 3, lo=0.3, hi=0.7, positive=True), ref=np.fmod),
                     Sample(t(2, 3), args=(0.7,), ref=lambda a: np.fmod(a, 0.7), desc="tensor and number")],
    "clamp_min": lambda: [Sample(t(2, 3), args=(0.5,), ref=lambda a: np.maximum(a, 0.5))],
    "clamp_max": lambda: [Sample(t(2, 3), args=(0.5,), ref=lambda a: np.minimum(a, 0.5))],
    "addcmul": lambda: [Sample(t(2, 3), t(3), t(2, 1), kwargs={"value": 0.5}, ref=lambda x, a, b: x + 0.5 * a * b)],
    "addcdiv": lambda: [Sample(t(2, 3), t(2, 3), t(3, positive=True), kwargs={"value": 2.0},
                               ref=lambda x, a, b: x + 2.0 * a / b)],
    "lerp": lambda: [Sample(t(2, 3), t(3), args=(0.25,), ref=lambda a, b: a + 0.25 * (b - a)),
                     Sample(t(2, 3), t(3), t(2, 3), ref=lambda a, b, w: a + w * (b - a), desc="tensor weight")],
    "bmm": lambda: [Sample(t(2, 3, 4), t(2, 4, 2), ref=np.matmul)],
    "dot": lambda: [Sample(t(4), t(4), ref=np.dot)],
    "mv": lambda: [Sample(t(3, 4), t(4), ref=np.dot)],
    "outer": lambda: [Sample(t(3), t(4), ref=np.outer)],
    # linear algebra (issue 31): products and einsum
    "vdot": lambda: [Sample(t(4), t(4), ref=np.vdot)],
    "addmm": lambda: [Sample(t(2, 3), t(2, 4), t(4, 3), ref=lambda i, a, b: i + a @ b),
                      Sample(t(3), t(2, 4), t(4, 3), kwargs={"beta": 0.5, "alpha": -2.0},
                             ref=lambda i, a, b: 0.5 * i - 2.0 * (a @ b), desc="broadcast input, beta, alpha"),
                      Sample(t(2, 3), t(2, 4), t(4, 3), kwargs={"beta": 0},
                             ref=lambda i, a, b: a @ b, desc="beta=0")],
    "addmv": lambda: [Sample(t(2), t(2, 4), t(4), ref=lambda i, a, v: i + a @ v),
                      Sample(t(1), t(2, 4), t(4), kwargs={"beta": 2.0, "alpha": 0.5},
                             ref=lambda i, a, v: 2.0 * i + 0.5 * (a @ v), desc="broadcast input, beta, alpha")],
    "baddbmm": lambda: [Sample(t(2, 3, 2), t(2, 3, 4), t(2, 4, 2), ref=lambda i, a, b: i + a @ b),
                        Sample(t(3, 1), t(2, 3, 4), t(2, 4, 2), kwargs={"beta": -1.0, "alpha": 3.0},
                               ref=lambda i, a, b: -i + 3.0 * (a @ b), desc="broadcast input, beta, alpha")],
    "tensordot": lambda: [Sample(t(2, 3, 4), t(3, 4, 2), ref=lambda a, b: np.tensordot(a, b, 2)),
                          Sample(t(2, 3, 4), t(4, 3, 2), args=(([0, 2], [2, 0]),),
                                 ref=lambda a, b: np.tensordot(a, b, ([0, 2], [2, 0])), desc="dim lists"),
                          Sample(t(2, 3), t(3), args=(0,), ref=lambda a, b: np.tensordot(a, b, 0), desc="dims=0")],
    "kron": lambda: [Sample(t(2, 3), t(3, 2), ref=np.kron),
                     Sample(t(2, 1, 3), t(2, 2), ref=np.kron, desc="ranks 3 and 2")],
    "einsum": lambda: [
        Sample(t(2, 3), t(3, 4), call=lambda op, a, b: op("ij,jk->ik", a, b),
               ref=lambda a, b: a @ b, desc="ij,jk->ik"),
        Sample(t(3, 3), call=lambda op, a: op("ii", a), ref=np.trace, desc="ii (trace)"),
        Sample(t(3, 3, 2), call=lambda op, a: op("iij->ji", a),
               ref=lambda a: np.einsum("iij->ji", a), desc="iij->ji (diagonal)"),
        Sample(t(2, 3), t(3), call=lambda op, a, b: op("ij,k->i", a, b),
               ref=lambda a, b: a.sum(1) * b.sum(), desc="ij,k->i (labels summed alone)"),
        Sample(t(1, 2, 3), t(4, 3, 2), call=lambda op, a, b: op("bij,bjk->bik", a, b),
               ref=lambda a, b: a @ b, desc="bij,bjk->bik (size-1 batch broadcasts)"),
        Sample(t(5, 2, 3), t(3, 2), call=lambda op, a, b: op("...ij,...jk", a, b),
               ref=lambda a, b: a @ b, desc="...ij,...jk (implicit, ellipsis)"),
        Sample(t(2, 3), t(3, 4), t(4, 2), call=lambda op, a, b, c: op("ij,jk,kl->il", [a, b, c]),
               ref=lambda a, b, c: a @ b @ c, desc="three operands, as a list"),
        Sample(t(2, 3), t(3, 2), call=lambda op, a, b: op(a, [0, 1], b, [1, 0], []),
               ref=lambda a, b: np.einsum("ij,ji", a, b), desc="sublist form")],
    # tg.linalg (ops/decomp.py). Inputs are products with their transposes where the op reads one
    # triangle (cholesky, eigh); eigen/singular vectors enter through quantities their signs do
    # not change (Note [Gauge of decompositions] in ops/decomp.py), as torch's OpInfos do.
    "linalg_inv": lambda: [Sample(t(3, 3), ref=np.linalg.inv),
                           Sample(t(2, 3, 3), ref=np.linalg.inv, desc="batch")],
    "linalg_det": lambda: [Sample(t(3, 3), ref=np.linalg.det),
                           Sample(t(2, 2, 2), ref=np.linalg.det, desc="batch"),
                           Sample(t(1, 1), ref=np.linalg.det, desc="1x1")],
    "linalg_slogdet": lambda: [Sample(t(3, 3), ref=lambda a: np.linalg.slogdet(a)[0]),
                               Sample(t(2, 3, 3), call=lambda op, a: op(a).logabsdet,
                                      ref=lambda a: np.linalg.slogdet(a)[1], desc="batch, logabsdet")],
    "linalg_solve": lambda: [Sample(t(3, 3), t(3), ref=np.linalg.solve),
                             Sample(t(2, 3, 3), t(3, 2), ref=np.linalg.solve, desc="batch broadcast"),
                             Sample(t(2, 3, 3), t(2, 3), ref=lambda a, b: np.linalg.solve(a, b[..., None])[..., 0],
                                    desc="batch of vectors"),
                             Sample(t(3, 3), t(2, 3), kwargs={"left": False},
                                    ref=lambda a, b: np.linalg.solve(a.T, b.T).T, desc="left=False")],
    "linalg_cholesky": lambda: [
        Sample(t(3, 5), call=lambda op, a: op(a @ a.mT), ref=lambda a: np.linalg.cholesky(a @ a.T)),
        Sample(t(2, 3, 5), call=lambda op, a: op(a @ a.mT, upper=True),
               ref=lambda a: np.swapaxes(np.linalg.cholesky(a @ np.swapaxes(a, -1, -2)), -1, -2),
               desc="batch, upper")],
    "linalg_qr": lambda: [
        Sample(t(4, 3), call=lambda op, a: tuple(x * x for x in op(a)), ref=lambda a: np.linalg.qr(a)[0] ** 2),
        Sample(t(3, 4), call=lambda op, a: tuple(x * x for x in op(a)), ref=lambda a: np.linalg.qr(a)[0] ** 2,
               desc="wide"),
        Sample(t(2, 3, 3), call=lambda op, a: tuple(x * x for x in op(a, mode="complete")),
               ref=lambda a: np.linalg.qr(a)[0] ** 2, desc="batch, complete")],
    "linalg_eigh": lambda: [
        Sample(t(3, 3), call=lambda op, a: (lambda r: (r.eigenvalues, r.eigenvectors * r.eigenvectors))(op(a + a.mT)),
               ref=lambda a: np.linalg.eigvalsh(a + a.T)),
        Sample(t(2, 3, 3), call=lambda op, a: op(a + a.mT, UPLO="U").eigenvalues,
               ref=lambda a: np.linalg.eigvalsh(a + np.swapaxes(a, -1, -2)), desc="batch, eigenvalues, UPLO=U")],
    "linalg_svd": lambda: [
        Sample(t(4, 3), call=lambda op, a: _svd_invariants(op(a, full_matrices=False)),
               ref=lambda a: np.linalg.svd(a, compute_uv=False)),
        Sample(t(3, 4), call=lambda op, a: _svd_invariants(op(a)),
               ref=lambda a: np.linalg.svd(a, compute_uv=False), desc="wide, full_matrices"),
        Sample(t(2, 4, 3), call=lambda op, a: _svd_invariants(op(a)),
               ref=lambda a: np.linalg.svd(a, compute_uv=False), desc="batch, tall, full_matrices"),
        Sample(t(3, 3), call=lambda op, a: op(a).S, ref=lambda a: np.linalg.svd(a, compute_uv=False),
               desc="singular values alone")],
    "linalg_pinv": lambda: [Sample(t(4, 3), ref=np.linalg.pinv), Sample(t(3, 4), ref=np.linalg.pinv, desc="wide"),
                            Sample(t(2, 3, 3), ref=np.linalg.pinv, desc="batch"),
                            Sample(t(3, 3), call=lambda op, a: op(a + a.mT, hermitian=True),
                                   ref=lambda a: np.linalg.pinv(a + a.T), desc="hermitian")],
    "linalg_vector_norm": lambda: [
        Sample(t(2, 3), ref=lambda a: np.sqrt((a * a).sum())),
        Sample(t(2, 3), args=(1.5, 1), ref=lambda a: (np.abs(a) ** 1.5).sum(1) ** (1 / 1.5), desc="ord 1.5, dim 1"),
        Sample(distinct(2, 3), kwargs={"ord": math.inf, "dim": (0, 1), "keepdim": True},
               ref=lambda a: np.abs(a).max(keepdims=True), desc="inf, keepdim")],
    "linalg_matrix_norm": lambda: [
        Sample(t(2, 3, 3), kwargs={"ord": o}, ref=lambda a, o=o: np.linalg.norm(a, o, axis=(-2, -1)),
               desc=f"ord={o}")
        for o in ("fro", "nuc", 2, -2)] + [
        # (continuous magnitudes: sums of |a| do not tie, as they can with distinct()'s grid)
        Sample(t(3, 4), kwargs={"ord": o}, ref=lambda a, o=o: np.linalg.norm(a, o), desc=f"ord={o}")
        for o in (1, -1, math.inf, -math.inf)] + [
        Sample(t(3, 2, 3), kwargs={"ord": "nuc", "dim": (0, 2), "keepdim": True},
               ref=lambda a: np.linalg.norm(a, "nuc", axis=(0, 2), keepdims=True),
               desc="nuc, dims (0, 2), keepdim")],
    "linalg_norm": lambda: [Sample(t(2, 3), ref=lambda a: np.sqrt((a * a).sum())),
                            Sample(t(3, 3), args=("nuc",), ref=lambda a: np.linalg.norm(a, "nuc"), desc="nuc"),
                            Sample(t(2, 3), kwargs={"dim": 1}, ref=lambda a: np.linalg.norm(a, axis=1),
                                   desc="dim 1")],
    "amax": lambda: [Sample(distinct(3, 4), args=(1,), ref=lambda a: a.max(1)),
                     Sample(distinct(2, 3), ref=lambda a: a.max(), desc="all dims"),
                     Sample(distinct(2, 3, 2), kwargs={"dim": (0, 2), "keepdim": True},
                            ref=lambda a: a.max(axis=(0, 2), keepdims=True), desc="dims (0, 2), keepdim")],
    "amin": lambda: [Sample(distinct(3, 4), args=(0,), ref=lambda a: a.min(0))],
    "sort": lambda: [Sample(distinct(3, 4), call=lambda op, a: op(a, 1)[0], ref=lambda a: np.sort(a, 1)),
                     Sample(distinct(3, 4), call=lambda op, a: op(a, 0, descending=True)[0],
                            ref=lambda a: -np.sort(-a, 0), desc="dim 0 descending"),
                     Sample(distinct(3, 4), call=lambda op, a: op(a, stable=True)[1], grad=False,
                            ref=lambda a: np.argsort(a, -1, kind="stable"), desc="indices")],
    "cumsum": lambda: [Sample(t(2, 3), args=(1,), ref=lambda a: np.cumsum(a, 1)),
                       Sample(t(4), args=(0,), ref=lambda a: np.cumsum(a, 0), desc="1-d"),
                       Sample(t(2, 3), kwargs={"dim": 0}, ref=lambda a: np.cumsum(a, 0), desc="dim=0")],
    # (inputs that need no gradient: floor_divide has no derivative, and a backward through it raises)
    "floor_divide": lambda: [Sample(t(2, 3, grad=False), t(2, 3, positive=True, grad=False), ref=np.floor_divide,
                                    grad=False),
                             Sample(t(3, grad=False), args=(0.7,), ref=lambda a: np.floor_divide(a, 0.7), grad=False,
                                    desc="tensor and number")],
    "minimum": _binary(np.minimum),
    "neg": _unary(np.negative),
    "exp": _unary(np.exp),
    "log": _unary(np.log, positive=True),
    "sqrt": _unary(np.sqrt, positive=True),
    "abs": _unary(np.abs),
    "sin": _unary(np.sin),
    "log1p": _unary(np.log1p, lo=0.1, hi=0.9),
    "expm1": _unary(np.expm1),
    "log2": _unary(np.log2, positive=True),
    "log10": _unary(np.log10, positive=True),
    "exp2": _unary(np.exp2),
    "rsqrt": _unary(lambda a: 1 / np.sqrt(a), positive=True),
    "reciprocal": _unary(lambda a: 1 / a, positive=True),
    "square": _unary(np.square),
    "sinh": _unary(np.sinh),
    "cosh": _unary(np.cosh),
    "asin": _unary(np.arcsin, lo=0.1, hi=0.45),  # (the stale-view test doubles the values)
    "acos": _unary(np.arccos, lo=0.1, hi=0.45),
    "atan": _unary(np.arctan),
    "asinh": _unary(np.arcsinh),
    "acosh": _unary(np.arccosh, lo=1.2, hi=3.0, positive=True),
    "atanh": _unary(np.arctanh, lo=0.1, hi=0.8),
    "floor": _unary(np.floor),
    "ceil": _unary(np.ceil),
    "trunc": _unary(np.trunc),
    "sign": _unary(np.sign),
    "frac": _unary(lambda a: a - np.trunc(a)),
    "round": lambda: [Sample(t(2, 3), ref=np.round),
                      Sample(t(3), kwargs={"decimals": 1}, ref=lambda a: np.round(a, 1),
                             desc="decimals=1")],
    "cos": _unary(np.cos),
    "tanh": _unary(np.tanh),
    "erf": _unary(_np_erf, lo=0.0, hi=3.0),
    "where": lambda: [
        Sample(t(2, 3), t(2, 3), call=lambda op, a, b: op(a > 0, a, b),
               ref=lambda a, b: np.where(a > 0, a, b), desc="condition from a"),
        Sample(t(2, 3), t(3), call=lambda op, a, b: op(b > 0, a, b),
               ref=lambda a, b: np.where(b > 0, a, b), desc="broadcast"),
        Sample(t(2, 3), call=lambda op, a: op(a < 0, a, 0.0), ref=lambda a: np.where(a < 0, a, 0.0), desc="number other"),
    ],
    "clamp": lambda: [
        Sample(t(2, 3), kwargs={"min": -0.5, "max": 0.5}, ref=lambda a: np.clip(a, -0.5, 0.5)),
        Sample(t(3), kwargs={"min": 0.1}, ref=lambda a: np.maximum(a, 0.1), desc="min only"),
        Sample(t(3), kwargs={"max": 0.1}, ref=lambda a: np.minimum(a, 0.1), desc="max only"),
        Sample(t(2, 3), t(3, lo=0.05, hi=0.1), t(3, lo=1.0, hi=1.5, positive=True),
               call=lambda op, x, lo, hi: op(x, min=lo, max=hi),
               ref=lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi), desc="tensor bounds"),
    ],
    # activations
    "sigmoid": _unary(lambda a: 1 / (1 + np.exp(-a))),
    "relu": _unary(lambda a: np.maximum(a, 0)),
    "gelu": lambda: [
        Sample(t(2, 3), ref=lambda a: 0.5 * a * (1 + _np_erf(a / math.sqrt(2)))),
        Sample(t(3), kwargs={"approximate": "tanh"},
               ref=lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3))), desc="tanh"),
        Sample(t(), desc="0-d"),
    ],
    "softplus": lambda: [
        Sample(t(2, 3), ref=lambda a: np.log1p(np.exp(a))),
        Sample(t(3), kwargs={"beta": 2.0, "threshold": 1.0},
               ref=lambda a: np.where(2 * a > 1.0, a, np.log1p(np.exp(2 * a)) / 2), desc="beta, threshold"),
    ],
    "softmax": lambda: [
        Sample(t(2, 3), args=(1,), ref=lambda a: _np_softmax(a, 1)),
        Sample(t(2, 3), args=(0,), ref=lambda a: _np_softmax(a, 0), desc="dim 0"),
        Sample(t(2, 2, 3), args=(-1,), ref=lambda a: _np_softmax(a, -1), desc="dim -1"),
        Sample(t(), args=(0,), ref=lambda a: np.ones(()), desc="0-d"),
    ],
    "log_softmax": lambda: [
        Sample(t(2, 3), args=(1,), ref=lambda a: np.log(_np_softmax(a, 1))),
        Sample(t(2, 2, 3), args=(0,), ref=lambda a: np.log(_np_softmax(a, 0)), desc="dim 0"),
    ],
    # reductions
    "sum": lambda: [
        Sample(t(2, 3), ref=np.sum, desc="all"),
        Sample(t(2, 3), kwargs={"dim": 1}, ref=lambda a: a.sum(1), desc="dim 1"),
        Sample(t(2, 3, 2), kwargs={"dim": (0, -1), "keepdim": True}, ref=lambda a: a.sum((0, 2), keepdims=True),
               desc="dims keepdim"),
        Sample(t(), ref=np.sum, desc="0-d"),
    ],
    "mean": lambda: [
        Sample(t(2, 3), ref=np.mean, desc="all"),
        Sample(t(2, 3), kwargs={"dim": -1, "keepdim": True}, ref=lambda a: a.mean(-1, keepdims=True), desc="dim keepdim"),
        Sample(t(), ref=np.mean, desc="0-d"),
    ],
    "max": _max_samples("max"),
    "min": _max_samples("min"),
    "logsumexp": lambda: [
        Sample(t(2, 3), args=(1,), ref=lambda a: _np_logsumexp(a, 1)),
        Sample(t(2, 3), args=((0, 1),), kwargs={"keepdim": True}, ref=lambda a: _np_logsumexp(a, (0, 1), True),
               desc="all dims keepdim"),
        Sample(t(3), args=(0,), ref=lambda a: _np_logsumexp(a, 0), desc="1-d"),
    ],
    "var": lambda: [
        Sample(t(2, 3), ref=lambda a: a.var(ddof=1), desc="all"),
        Sample(t(2, 3), kwargs={"dim": 1, "keepdim": True}, ref=lambda a: a.var(1, ddof=1, keepdims=True),
               desc="dim keepdim"),
        Sample(t(2, 3, 2), kwargs={"dim": (0, 2), "correction": 0}, ref=lambda a: a.var((0, 2)), desc="dims, correction 0"),
    ],
    "std": lambda: [
        Sample(t(2, 3), ref=lambda a: a.std(ddof=1), desc="all"),
        Sample(t(2, 3), kwargs={"dim": 0, "unbiased": False}, ref=lambda a: a.std(0), desc="dim 0 biased"),
    ],
    "norm": lambda: [
        Sample(t(2, 3), ref=lambda a: np.sqrt((a * a).sum()), desc="fro"),
        Sample(t(2, 3), args=(1,), kwargs={"dim": 1}, ref=lambda a: np.abs(a).sum(1), desc="p=1 dim 1"),
        Sample(distinct(2, 3), args=(float("inf"),), kwargs={"dim": 1}, ref=lambda a: np.abs(a).max(1), desc="p=inf"),
        Sample(t(2, 3), args=(3,), ref=lambda a: (np.abs(a) ** 3).sum() ** (1 / 3), desc="p=3"),
    ],
    # products, scans and order statistics (ops/scan.py, ops/order.py)
    "prod": lambda: [
        Sample(t(2, 3), ref=np.prod, desc="all"),
        Sample(t(2, 3), args=(1,), kwargs={"keepdim": True}, ref=lambda a: a.prod(1, keepdims=True),
               desc="dim keepdim"),
        Sample(_with_zeros(t(3, 4), [(0, 1)]), args=(1,), ref=lambda a: a.prod(1), desc="one zero"),
        Sample(_with_zeros(t(3, 4), [(0, 1), (0, 3), (2, 0)]), args=(1,), ref=lambda a: a.prod(1),
               desc="two zeros in a slice"),
        Sample(_with_zeros(t(2, 3), [(1, 2)]), ref=np.prod, desc="all, one zero"),
        Sample(_with_zeros(t(2, 3), [(1, 2), (0, 0)]), ref=np.prod, desc="all, two zeros"),
        Sample(t(), args=(0,), ref=np.prod, desc="0-d"),
    ],
    "cumprod": lambda: [
        Sample(t(2, 4), args=(1,), ref=lambda a: np.cumprod(a, 1)),
        Sample(_with_zeros(t(3, 4), [(0, 1), (1, 3), (2, 0), (2, 2)]), args=(1,), ref=lambda a: np.cumprod(a, 1),
               desc="zeros: one per row, two in a row"),
        Sample(t(3, 2), kwargs={"dim": 0}, ref=lambda a: np.cumprod(a, 0), desc="dim=0"),
    ],
    "cummax": lambda: [Sample(distinct(3, 4), args=(1,), call=lambda op, a: op(a, 1).values,
                              ref=lambda a: np.maximum.accumulate(a, 1)),
                       Sample(distinct(4), call=lambda op, a: op(a, 0).indices, grad=False, desc="indices")],
    "cummin": lambda: [Sample(distinct(3, 4), call=lambda op, a: op(a, 0)[0],
                              ref=lambda a: np.minimum.accumulate(a, 0))],
    "logcumsumexp": lambda: [Sample(t(2, 4), args=(1,), ref=lambda a: np.logaddexp.accumulate(a, 1)),
                             Sample(t(3), args=(0,), ref=lambda a: np.log(np.cumsum(np.exp(a))), desc="1-d")],
    "aminmax": lambda: [Sample(distinct(3, 4), call=lambda op, a: op(a).min, ref=np.min, desc="min"),
                        Sample(distinct(3, 4), call=lambda op, a: op(a, dim=1, keepdim=True).max,
                               ref=lambda a: a.max(1, keepdims=True), desc="max dim keepdim"),
                        Sample(distinct(3, 4), call=lambda op, a: op(a, dim=0)[0] * op(a, dim=0)[1],
                               ref=lambda a: a.min(0) * a.max(0), desc="both")],
    "median": lambda: [Sample(distinct(3, 4), ref=lambda a: np.sort(a, None)[5], desc="all, lower median"),
                       Sample(distinct(3, 5), call=lambda op, a: op(a, dim=1).values,
                              ref=lambda a: np.median(a, 1), desc="dim"),
                       Sample(distinct(4, 3), call=lambda op, a: op(a, 0, True).indices, grad=False,
                              ref=lambda a: np.argsort(a, 0)[1:2], desc="indices keepdim")],
    "nanmedian": lambda: [Sample(distinct(3, 3), ref=np.median, desc="all"),
                          Sample(distinct(3, 5), call=lambda op, a: op(a, 1)[0], ref=lambda a: np.median(a, 1),
                                 desc="dim")],
    "nansum": lambda: [Sample(t(2, 3), ref=np.sum, desc="all"),
                       Sample(t(2, 3), args=(1,), kwargs={"keepdim": True}, ref=lambda a: a.sum(1, keepdims=True),
                              desc="dim keepdim"),
                       Sample(t(2, 3), call=lambda op, a: op(a.where(a > 0.0, math.nan)), desc="NaN where x < 0")],
    "nanmean": lambda: [Sample(t(2, 3), ref=np.mean, desc="all"),
                        Sample(t(2, 3), call=lambda op, a: op(a.where(engine.tensor(_SOME, device=a.device),
                                                                        math.nan), 1),
                               ref=lambda a: np.nanmean(np.where(_SOME, a, np.nan), 1), desc="NaN in each row")],
    "topk": lambda: [Sample(distinct(3, 5), call=lambda op, a: op(a, 2).values, ref=lambda a: -np.sort(-a, 1)[:, :2]),
                     Sample(distinct(4, 3), call=lambda op, a: op(a, 3, dim=0, largest=False)[0],
                            ref=lambda a: np.sort(a, 0)[:3], desc="smallest, dim 0"),
                     Sample(distinct(5), call=lambda op, a: op(a, 2).indices, grad=False,
                            ref=lambda a: np.argsort(-a)[:2], desc="indices")],
    "kthvalue": lambda: [Sample(distinct(3, 5), call=lambda op, a: op(a, 2).values, ref=lambda a: np.sort(a, 1)[:, 1]),
                         Sample(distinct(4, 3), call=lambda op, a: op(a, 4, 0, True)[0],
                                ref=lambda a: a.max(0, keepdims=True),
                                desc="dim 0 keepdim")],
    "mode": lambda: [Sample(distinct(3, 4), call=lambda op, a: op(a).values, ref=lambda a: a.min(1),
                            desc="all distinct: the smallest"),
                     Sample(engine.tensor([[0.5, 1.5, 0.5, 2.5], [3.0, -1.0, -1.0, 3.0]], dtype=engine.float64),
                            call=lambda op, a: op(a).indices, ref=lambda a: np.array([2, 2]), grad=False,
                            desc="ties: the last position")],
    "var_mean": lambda: [Sample(t(2, 3), call=lambda op, a: op(a)[0], ref=lambda a: a.var(ddof=1), desc="var"),
                         Sample(t(2, 3), call=lambda op, a: op(a, 1, keepdim=True)[1],
                                ref=lambda a: a.mean(1, keepdims=True),
                                desc="mean dim keepdim"),
                         Sample(t(2, 3, 2),
                                call=lambda op, a: op(a, (0, 2), correction=0)[0] * op(a, (0, 2), correction=0)[1],
                                ref=lambda a: a.var((0, 2)) * a.mean((0, 2)), desc="both, correction 0")],
    "std_mean": lambda: [Sample(t(2, 3), call=lambda op, a: op(a)[0], ref=lambda a: a.std(ddof=1), desc="std"),
                         Sample(t(2, 3), call=lambda op, a: op(a, 0, unbiased=False)[0] + op(a, 0, unbiased=False)[1],
                                ref=lambda a: a.std(0) + a.mean(0), desc="both, biased")],
    # linalg
    "matmul": lambda: [
        Sample(t(2, 3), t(3, 2), ref=np.matmul),
        Sample(t(3), t(3, 2), ref=np.matmul, desc="vector @ matrix"),
        Sample(t(2, 3), t(3), ref=np.matmul, desc="matrix @ vector"),
        Sample(t(3), t(3), ref=np.matmul, desc="dot"),
        Sample(t(2, 2, 3), t(3, 2), ref=np.matmul, desc="batched broadcast"),
    ],
    # shape
    "reshape": lambda: [
        Sample(t(2, 3), args=((3, 2),), ref=lambda a: a.reshape(3, 2)),
        Sample(t(2, 3), args=((-1,),), ref=lambda a: a.reshape(-1), desc="-1"),
        Sample(t(), args=((1, 1),), ref=lambda a: a.reshape(1, 1), desc="0-d"),
    ],
    "transpose": lambda: [
        Sample(t(2, 3), args=(0, 1), ref=lambda a: a.T),
        Sample(t(2, 3, 2), args=(-1, 0), ref=lambda a: np.swapaxes(a, -1, 0), desc="negative"),
    ],
    "permute": lambda: [Sample(t(2, 3, 2), args=((2, 0, 1),), ref=lambda a: a.transpose(2, 0, 1))],
    "expand": lambda: [
        Sample(t(3, 1), args=((2, 3, 4),), ref=lambda a: np.broadcast_to(a, (2, 3, 4))),
        Sample(t(), args=((3,),), ref=lambda a: np.broadcast_to(a, (3,)), desc="0-d"),
        Sample(t(1, 2), args=((-1, 2),), ref=lambda a: a, desc="-1 and no-op"),
    ],
    "squeeze": lambda: [
        Sample(t(2, 1, 3, 1), ref=np.squeeze, desc="all"),
        Sample(t(2, 1, 3), args=(1,), ref=lambda a: a.squeeze(1), desc="dim"),
        Sample(t(2, 3), args=(0,), ref=lambda a: a, desc="dim not 1"),
    ],
    "unsqueeze": lambda: [
        Sample(t(2, 3), args=(1,), ref=lambda a: a[:, None]),
        Sample(t(2, 3), args=(-1,), ref=lambda a: a[..., None], desc="-1"),
        Sample(t(), args=(0,), ref=lambda a: a.reshape(1), desc="0-d"),
    ],
    "cat": lambda: [
        Sample(t(2, 3), t(1, 3), call=lambda op, a, b: op([a, b]), ref=lambda a, b: np.concatenate([a, b])),
        Sample(t(2, 1), t(2, 2), t(2, 3), call=lambda op, *ts: op(list(ts), dim=-1),
               ref=lambda *a: np.concatenate(a, axis=-1), desc="three, dim -1"),
    ],
    "stack": lambda: [
        Sample(t(2, 3), t(2, 3), call=lambda op, a, b: op([a, b]), ref=lambda a, b: np.stack([a, b])),
        Sample(t(3), t(3), t(3), call=lambda op, *ts: op(ts, dim=1), ref=lambda *a: np.stack(a, axis=1), desc="dim 1"),
        Sample(t(), t(), call=lambda op, a, b: op([a, b]), ref=lambda a, b: np.stack([a, b]), desc="0-d"),
    ],
    "split": lambda: [
        Sample(t(5, 2), args=(2,), ref=lambda a: a[:2], desc="size 2 (last smaller)"),
        Sample(t(2, 6), args=([1, 2, 3],), kwargs={"dim": 1}, ref=lambda a: a[:, :1], desc="sections dim 1"),
        Sample(t(4, 2), call=lambda op, x: op(x, 2)[1], ref=lambda a: a[2:], desc="only the second piece"),
    ],
    # indexing
    "getitem": lambda: [
        Sample(t(3, 4), args=((1, slice(None, None, 2)),), ref=lambda a: a[1, ::2], desc="int and step slice"),
        Sample(t(3, 4), args=((None, Ellipsis, -1),), ref=lambda a: a[None, ..., -1], desc="None, Ellipsis"),
        Sample(t(4), args=([0, 2, 2, 3],), ref=lambda a: a[[0, 2, 2, 3]], desc="repeated int list"),
        Sample(t(3, 4), call=lambda op, x: op(x, x > 0), ref=lambda a: a[a > 0], desc="bool mask"),
        Sample(t(3, 4), args=((engine.tensor([0, 2, 0]), slice(1, 3)),), ref=lambda a: a[[0, 2, 0], 1:3],
               desc="int tensor and slice"),
        Sample(t(), args=((),), ref=lambda a: a[()], desc="0-d"),
    ],
    "index_put": lambda: [
        Sample(t(3, 4), t(4), args=(), call=lambda op, x, v: op(x, 1, v), desc="row"),
        Sample(t(4), t(3), call=lambda op, x, v: op(x, [0, 2, 0], v, accumulate=True), desc="accumulate repeats"),
        Sample(t(3, 4), t(), call=lambda op, x, v: op(x, (slice(None), [1, 3]), v), desc="broadcast value"),
    ],
    "gather": lambda: [  # (the index on the input's device: gather refuses one from another device, as torch)
        Sample(t(3, 4), call=lambda op, x: op(x, 1, engine.tensor([[0, 0], [3, 1], [2, 2]], device=x.device)),
               ref=lambda a: np.take_along_axis(a, np.array([[0, 0], [3, 1], [2, 2]]), 1)),
        Sample(t(3, 2), call=lambda op, x: op(x, 0, engine.tensor([[2, 0]], device=x.device)),
               ref=lambda a: np.take_along_axis(a, np.array([[2, 0]]), 0), desc="dim 0"),
    ],
    # devices and copies
    "to": lambda: [
        Sample(t(2, 3), args=("virtual:1",), ref=lambda a: a, desc="to virtual:1"),
        Sample(t(3), args=("cpu",), ref=lambda a: a, desc="no-op"),
    ],
    "clone": lambda: [Sample(t(2, 3), ref=lambda a: a.copy()), Sample(t(), ref=lambda a: a.copy(), desc="0-d")],
    # nn
    "linear": lambda: [
        Sample(t(2, 3), t(4, 3), t(4), ref=lambda x, w, b: x @ w.T + b),
        Sample(t(3), t(2, 3), ref=lambda x, w: w @ x, desc="1-d input, no bias"),
        Sample(t(2, 3), t(4, 3), ref=lambda x, w: x @ w.T, desc="2-d input, no bias (fused node)"),
        Sample(t(2, 2, 3), t(2, 3), t(2), ref=lambda x, w, b: x @ w.T + b, desc="batched"),
    ],
    "layer_norm": lambda: [
        Sample(t(2, 3, 4), t(4), t(4), call=lambda op, x, w, b: op(x, (4,), w, b), ref=lambda x, w, b: _np_layer_norm(x, 1, w, b)),
        Sample(t(2, 3, 4), call=lambda op, x: op(x, (3, 4)), ref=lambda x: _np_layer_norm(x, 2), desc="two dims, no affine"),
        Sample(t(3, 4), t(4), call=lambda op, x, w: op(x, 4, w, eps=0.1), ref=lambda x, w: _np_layer_norm(x, 1, w, eps=0.1),
               desc="weight only, eps 0.1"),
        Sample(t(4), t(4), call=lambda op, x, b: op(x, (4,), None, b), ref=lambda x, b: _np_layer_norm(x, 1, None, b),
               desc="1-d, bias only"),
    ],
    "conv2d": lambda: [
        Sample(t(1, 2, 4, 4), t(3, 2, 3, 3), t(3), ref=_np_conv2d),
        Sample(t(2, 1, 5, 5), t(2, 1, 3, 3), kwargs={"stride": 2, "padding": 1},
               ref=lambda x, w: _np_conv2d(x, w, stride=2, padding=1), desc="stride 2 padding 1"),
        Sample(t(1, 3, 3), t(1, 1, 2, 2), ref=lambda x, w: _np_conv2d(x[:, None], w)[:, 0], desc="unbatched"),
        Sample(t(1, 2, 6, 6), t(2, 2, 2, 2), kwargs={"dilation": 2},
               ref=lambda x, w: _np_conv2d(x, _np_dilate(w, 2)), desc="dilation 2"),
        Sample(t(1, 4, 4, 4), t(4, 2, 2, 2), t(4), kwargs={"groups": 2, "padding": 1},
               ref=lambda x, w, b: _np_grouped(x, w, b, 2, padding=1), desc="groups 2"),
    ],
    "dropout": lambda: [
        Sample(t(4, 5), args=(0.5,), seed=7, desc="p=0.5 seeded"),
        Sample(t(3), kwargs={"p": 0.3, "training": False}, ref=lambda a: a, desc="eval"),
        Sample(t(3), args=(0.0,), ref=lambda a: a, desc="p=0"),
    ],
    "cross_entropy": lambda: [
        Sample(t(3, 4), ints(3, high=4), ref=_np_cross_entropy),
        Sample(t(4), engine.tensor(2), ref=lambda x, y: -(x - _np_logsumexp(x, 0))[2], desc="unbatched"),
        Sample(t(2, 3, 2), ints(2, 2, high=3), desc="spatial"),
        Sample(t(3, 4), engine.tensor([1, -100, 3]), desc="ignore_index"),
        Sample(t(3, 4), ints(3, high=4), kwargs={"reduction": "none"}, desc="reduction none"),
    ],
    "mse_loss": lambda: [
        Sample(t(2, 3), t(2, 3), ref=lambda a, b: ((a - b) ** 2).mean()),
        Sample(t(2, 3), t(2, 3, grad=False), kwargs={"reduction": "sum"}, ref=lambda a, b: ((a - b) ** 2).sum(),
               desc="sum, constant target"),
    ],
}


def _index_samples() -> dict:
    """The indexing and shape ops of issue 31, item 4 (ops/scatter.py, ops/rearrange.py), from
    samples_index.py, loaded by its path: tests/devices loads this file by path too."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).with_name("samples_index.py")
    spec = importlib.util.spec_from_file_location("_samples_index", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.make(Sample, t, distinct)


SAMPLES.update(_index_samples())
