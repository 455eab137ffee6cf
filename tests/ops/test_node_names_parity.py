"""The node each op records is named as torch's (``grad_fn.name()``), op by op over
``ops.REGISTRY`` and, where torch picks the node by the operands (matmul by ranks, a reshape
that copies), case by case. Code that walks ``grad_fn`` (graph tools, tests, viz) then sees
torch's graph. The few cases that differ are listed in EXCEPTIONS, each with its reason, and
in docs/parity.md ("Node names"), which this test reads. Skipped without torch."""
from __future__ import annotations

import pathlib
import warnings

import numpy as np
import pytest

import threadgrad as tg
from threadgrad import ops

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _both(fn_name):
    """A call spelled the same in both libraries, through the module each tensor comes from."""
    def call(*ts, **kw):
        first = ts[0][0] if isinstance(ts[0], list) else ts[0]
        lib = tg if isinstance(first, tg.Tensor) else torch
        return getattr(lib, fn_name)(*ts, **kw)
    return call


def _f(tg_fn, torch_fn):
    """A call spelled differently: tg_fn for threadgrad tensors, torch_fn for torch's."""
    return lambda *ts: (tg_fn if isinstance(ts[0], tg.Tensor) else torch_fn)(*ts)


def _lib(t):
    return tg if isinstance(t, tg.Tensor) else torch


def _quiet(fn, *args):
    """``fn(*args)`` without the deprecation warning torch gives (torch.cholesky)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return fn(*args)


def _linalg(fn_name):
    """A call to ``tg.linalg.fn_name`` or ``torch.linalg.fn_name``, by the first tensor's library."""
    return lambda *ts: getattr(_lib(ts[0]).linalg, fn_name)(*ts)


# op (a name of ops.REGISTRY) -> {case: (call, shapes of its float64 inputs)}
CASES = {
    "abs": {"abs": (lambda a: a.abs(), [(3,)])},
    "add": {"add": (lambda a, b: a + b, [(2, 3), (3,)])},
    "sub": {"sub": (lambda a, b: a - b, [(2, 3), (2, 3)])},
    "mul": {"mul": (lambda a, b: a * b, [(2, 3), (2, 3)])},
    "div": {"div": (lambda a, b: a / b, [(2, 3), (2, 3)])},
    "pow": {"pow tensor": (lambda a, b: a ** b, [(3,), (3,)]), "pow number": (lambda a: a ** 2.0, [(3,)])},
    "neg": {"neg": (lambda a: -a, [(3,)])},
    "exp": {"exp": (lambda a: a.exp(), [(3,)])},
    "log": {"log": (lambda a: a.log(), [(3,)])},
    "sqrt": {"sqrt": (lambda a: a.sqrt(), [(3,)])},
    "sin": {"sin": (lambda a: a.sin(), [(3,)])},
    "log1p": {"log1p": (lambda a: a.log1p(), [(3,)])},
    "expm1": {"expm1": (lambda a: a.expm1(), [(3,)])},
    "log2": {"log2": (lambda a: a.log2(), [(3,)])},
    "log10": {"log10": (lambda a: a.log10(), [(3,)])},
    "exp2": {"exp2": (lambda a: a.exp2(), [(3,)])},
    "rsqrt": {"rsqrt": (lambda a: a.rsqrt(), [(3,)])},
    "reciprocal": {"reciprocal": (lambda a: a.reciprocal(), [(3,)])},
    "square": {"square": (lambda a: a.square(), [(3,)])},
    "sinh": {"sinh": (lambda a: a.sinh(), [(3,)])},
    "cosh": {"cosh": (lambda a: a.cosh(), [(3,)])},
    "asin": {"asin": (lambda a: a.asin(), [(3,)])},
    "acos": {"acos": (lambda a: a.acos(), [(3,)])},
    "atan": {"atan": (lambda a: a.atan(), [(3,)])},
    "asinh": {"asinh": (lambda a: a.asinh(), [(3,)])},
    "acosh": {"acosh": (lambda a: a.acosh(), [(3,)])},
    "atanh": {"atanh": (lambda a: a.atanh(), [(3,)])},
    "floor": {"floor": (lambda a: a.floor(), [(3,)])},
    "ceil": {"ceil": (lambda a: a.ceil(), [(3,)])},
    "trunc": {"trunc": (lambda a: a.trunc(), [(3,)])},
    "sign": {"sign": (lambda a: a.sign(), [(3,)])},
    "frac": {"frac": (lambda a: a.frac(), [(3,)])},
    "round": {"round": (lambda a: a.round(), [(3,)]),
              "round decimals": (lambda a: (tg if isinstance(a, tg.Tensor) else torch).round(a, decimals=1), [(3,)])},
    "cos": {"cos": (lambda a: a.cos(), [(3,)])},
    "tanh": {"tanh": (lambda a: a.tanh(), [(3,)])},
    "sigmoid": {"sigmoid": (lambda a: a.sigmoid(), [(3,)])},
    "relu": {"relu": (lambda a: a.relu(), [(3,)])},
    "erf": {"erf": (_both("erf"), [(3,)])},
    "gelu": {"gelu": (_f(tg.nn.functional.gelu, F.gelu), [(3,)])},
    "softplus": {"softplus": (_f(tg.nn.functional.softplus, F.softplus), [(3,)])},
    "maximum": {"maximum": (lambda a, b: a.maximum(b), [(3,), (3,)])},
    "remainder": {"remainder": (lambda a, b: a % b, [(3,), (3,)]), "remainder number": (lambda a: a % 0.7, [(3,)])},
    "floor_divide": {"floor_divide": (lambda a, b: a // b, [(3,), (3,)])},
    "cumsum": {"cumsum": (lambda a: a.cumsum(1), [(2, 3)])},
    "bmm": {"bmm": (_both("bmm"), [(2, 3, 4), (2, 4, 2)])},
    "dot": {"dot": (_both("dot"), [(4,), (4,)])},
    "mv": {"mv": (_both("mv"), [(3, 4), (4,)])},
    "outer": {"outer": (_both("outer"), [(3,), (4,)])},
    # linear algebra (issue 31)
    "vdot": {"vdot": (_both("vdot"), [(4,), (4,)])},
    "addmm": {"addmm": (lambda i, a, b: i.addmm(a, b, beta=0.5), [(3,), (2, 4), (4, 3)])},
    "addmv": {"addmv": (_both("addmv"), [(2,), (2, 4), (4,)])},
    "baddbmm": {"baddbmm": (_both("baddbmm"), [(2, 3, 2), (2, 3, 4), (2, 4, 2)])},
    "tensordot": {"tensordot": (_both("tensordot"), [(2, 3, 4), (3, 4, 2)]),
                  "tensordot dim lists": (lambda a, b: (tg if isinstance(a, tg.Tensor) else torch).tensordot(
                      a, b, ([0], [1])), [(2, 3), (4, 2)])},
    "kron": {"kron": (_both("kron"), [(2, 3), (3, 2)])},
    "einsum": {"einsum mm": (lambda a, b: (tg if isinstance(a, tg.Tensor) else torch).einsum("ij,jk->ik", a, b),
                             [(2, 3), (3, 4)]),
               "einsum trace": (lambda a: (tg if isinstance(a, tg.Tensor) else torch).einsum("ii", a), [(3, 3)])},
    "linalg_inv": {"linalg.inv": (_linalg("inv"), [(3, 3)]), "inverse": (_both("inverse"), [(3, 3)])},
    "linalg_det": {"linalg.det": (_linalg("det"), [(2, 3, 3)]), "det": (_both("det"), [(3, 3)])},
    "linalg_slogdet": {"linalg.slogdet": (lambda a: _lib(a).linalg.slogdet(a).logabsdet, [(3, 3)]),
                       "logdet": (lambda a: _lib(a).logdet(a @ a.mT), [(3, 3)])},
    "linalg_solve": {"linalg.solve": (_linalg("solve"), [(3, 3), (3,)])},
    "linalg_cholesky": {"linalg.cholesky": (lambda a: _lib(a).linalg.cholesky(a @ a.mT), [(3, 5)]),
                        "cholesky": (lambda a: _quiet(_lib(a).cholesky, a @ a.mT), [(3, 5)])},
    "linalg_qr": {"linalg.qr": (lambda a: _lib(a).linalg.qr(a).R, [(4, 3)])},
    "linalg_eigh": {"linalg.eigh": (lambda a: _lib(a).linalg.eigh(a + a.mT).eigenvalues, [(3, 3)]),
                    "linalg.eigvalsh": (lambda a: _lib(a).linalg.eigvalsh(a + a.mT), [(3, 3)])},
    "linalg_svd": {"linalg.svd": (lambda a: _lib(a).linalg.svd(a).S, [(4, 3)]),
                   "linalg.svdvals": (lambda a: _lib(a).linalg.svdvals(a), [(4, 3)]),
                   "svd V": (lambda a: _lib(a).svd(a)[2], [(4, 3)])},
    "linalg_pinv": {"linalg.pinv": (_linalg("pinv"), [(4, 3)]), "pinverse": (_both("pinverse"), [(4, 3)])},
    "linalg_vector_norm": {"linalg.vector_norm": (_linalg("vector_norm"), [(2, 3)])},
    "linalg_matrix_norm": {f"linalg.matrix_norm {o}": (lambda a, o=o: _lib(a).linalg.matrix_norm(a, o), [(2, 3, 3)])
                           for o in ("fro", "nuc", 2, -2, 1, -1, float("inf"), -float("inf"))},
    "linalg_norm": {"linalg.norm": (_linalg("norm"), [(2, 3)]),
                    "linalg.norm nuc": (lambda a: _lib(a).linalg.norm(a, "nuc"), [(3, 3)])},
    "amax": {"amax": (lambda a: a.amax(1), [(2, 3)])},
    "sort": {"sort": (lambda a: a.sort(1)[0], [(2, 3)]), "sort stable": (lambda a: a.sort(stable=True)[0], [(2, 3)])},
    # ops/scan.py, ops/order.py
    "prod": {"prod": (lambda a: a.prod(), [(2, 3)]), "prod dim": (lambda a: a.prod(1, keepdim=True), [(2, 3)])},
    "cumprod": {"cumprod": (lambda a: a.cumprod(1), [(2, 3)])},
    "cummax": {"cummax": (lambda a: a.cummax(1).values, [(2, 3)])},
    "cummin": {"cummin": (lambda a: a.cummin(0)[0], [(2, 3)])},
    "logcumsumexp": {"logcumsumexp": (lambda a: a.logcumsumexp(1), [(2, 3)])},
    "aminmax": {"aminmax": (lambda a: a.aminmax().min, [(2, 3)]),
                "aminmax dim": (lambda a: a.aminmax(dim=1).max, [(2, 3)])},
    "median": {"median": (lambda a: a.median(), [(2, 3)]), "median dim": (lambda a: a.median(dim=0).values, [(2, 3)])},
    "nanmedian": {"nanmedian": (lambda a: a.nanmedian(), [(2, 3)]),
                  "nanmedian dim": (lambda a: a.nanmedian(1)[0], [(2, 3)])},
    "nansum": {"nansum": (lambda a: a.nansum(), [(2, 3)]), "nansum dim": (lambda a: a.nansum(1), [(2, 3)])},
    "nanmean": {"nanmean": (lambda a: a.nanmean(1), [(2, 3)])},
    "topk": {"topk": (lambda a: a.topk(2).values, [(2, 3)]), "topk 0-d": (lambda a: a.topk(1)[0], [()])},
    "kthvalue": {"kthvalue": (lambda a: a.kthvalue(2, 1).values, [(2, 3)])},
    "mode": {"mode": (lambda a: a.mode(1).values, [(2, 3)])},
    "var_mean": {"var_mean": (lambda a: _both("var_mean")(a, 1)[0], [(2, 3)]),
                 "var_mean mean": (lambda a: _both("var_mean")(a)[1], [(2, 3)])},
    "std_mean": {"std_mean": (lambda a: _both("std_mean")(a, 0, keepdim=True)[1], [(2, 3)])},
    "amin": {"amin": (lambda a: a.amin(1), [(2, 3)])},
    "atan2": {"atan2": (_both("atan2"), [(3,), (3,)])},
    "hypot": {"hypot": (_both("hypot"), [(3,), (3,)])},
    "fmod": {"fmod": (_both("fmod"), [(3,), (3,)]), "fmod number": (lambda a: a.fmod(0.7), [(3,)])},
    "clamp_min": {"clamp_min": (lambda a: a.clamp_min(0.1), [(3,)])},
    "clamp_max": {"clamp_max": (lambda a: a.clamp_max(0.1), [(3,)])},
    "addcmul": {"addcmul": (_both("addcmul"), [(3,), (3,), (3,)])},
    "addcdiv": {"addcdiv": (_both("addcdiv"), [(3,), (3,), (3,)])},
    "lerp": {"lerp": (lambda a, b: a.lerp(b, 0.3), [(3,), (3,)]), "lerp tensor weight": (_both("lerp"), [(3,), (3,), (3,)])},
    "minimum": {"minimum": (lambda a, b: a.minimum(b), [(3,), (3,)])},
    "where": {"where": (lambda a, b: (tg if isinstance(a, tg.Tensor) else torch).where(a > b, a, b),
                        [(3,), (3,)])},
    "clamp": {"clamp": (lambda a: a.clamp(-0.5, 0.5), [(3,)]), "clamp min": (lambda a: a.clamp(min=0.0), [(3,)])},
    "sum": {"sum": (lambda a: a.sum(), [(2, 3)]), "sum dim": (lambda a: a.sum(1), [(2, 3)])},
    "mean": {"mean": (lambda a: a.mean(), [(2, 3)]), "mean dim": (lambda a: a.mean(1), [(2, 3)])},
    "max": {"max": (lambda a: a.max(), [(2, 3)]), "max dim": (lambda a: a.max(1)[0], [(2, 3)])},
    "min": {"min": (lambda a: a.min(), [(2, 3)]), "min dim": (lambda a: a.min(1)[0], [(2, 3)])},
    "logsumexp": {"logsumexp": (lambda a: a.logsumexp(1), [(2, 3)])},
    "softmax": {"softmax": (lambda a: a.softmax(1), [(2, 3)])},
    "log_softmax": {"log_softmax": (lambda a: a.log_softmax(1), [(2, 3)])},
    "var": {"var": (lambda a: a.var(1), [(2, 3)])},
    "std": {"std": (lambda a: a.std(1), [(2, 3)])},
    "norm": {"norm": (lambda a: a.norm(), [(2, 3)]), "norm p=3 dim": (lambda a: a.norm(3, 1), [(2, 3)]),
             "norm inf": (lambda a: a.norm(float("inf")), [(2, 3)])},
    "reshape": {"reshape view": (lambda a: a.reshape(3, 2), [(2, 3)]),
                "reshape copy": (lambda a: a.t().reshape(6), [(2, 3)]), "view": (lambda a: a.view(6), [(2, 3)])},
    "transpose": {"transpose": (lambda a: a.transpose(0, 1), [(2, 3)])},
    "permute": {"permute": (lambda a: a.permute(1, 0), [(2, 3)])},
    "expand": {"expand": (lambda a: a.expand(2, 2, 3), [(2, 3)])},
    "squeeze": {"squeeze dim": (lambda a: a.squeeze(0), [(1, 3)]), "squeeze all": (lambda a: a.squeeze(), [(1, 3)])},
    "unsqueeze": {"unsqueeze": (lambda a: a.unsqueeze(0), [(3,)])},
    "getitem": {"getitem int": (lambda a: a[0], [(2, 3)]), "getitem slice": (lambda a: a[:, 1:], [(2, 3)]),
                "getitem indices": (lambda a: a[[0, 1, 0]], [(2, 3)])},
    "matmul": {"matmul mm": (lambda a, b: a @ b, [(2, 3), (3, 4)]), "matmul dot": (lambda a, b: a @ b, [(3,), (3,)]),
               "matmul mv": (lambda a, b: a @ b, [(2, 3), (3,)]), "matmul vm": (lambda a, b: a @ b, [(3,), (3, 4)]),
               "matmul batched": (lambda a, b: a @ b, [(5, 2, 3), (5, 3, 4)]),
               "matmul batched by matrix": (lambda a, b: a @ b, [(5, 2, 3), (3, 4)])},
    "clone": {"clone": (lambda a: a.clone(), [(3,)])},
    "cat": {"cat": (lambda a, b: _both("cat")([a, b]), [(3,), (2,)])},
    "stack": {"stack": (lambda a, b: _both("stack")([a, b]), [(3,), (3,)])},
    "split": {"split": (lambda a: _both("split")(a, 2)[0], [(4,)])},
    "linear": {"linear": (_f(tg.nn.functional.linear, F.linear), [(2, 3), (4, 3), (4,)]),
               "linear without bias": (_f(tg.nn.functional.linear, F.linear), [(2, 3), (4, 3)])},
    "layer_norm": {"layer_norm": (lambda x, w, b: (tg.nn.functional.layer_norm if isinstance(x, tg.Tensor)
                                                    else F.layer_norm)(x, (3,), w, b), [(2, 3), (3,), (3,)]),
                   "layer_norm without affine": (lambda x: (tg.nn.functional.layer_norm if isinstance(x, tg.Tensor)
                                                            else F.layer_norm)(x, (3,)), [(2, 3)])},
    "mse_loss": {"mse_loss": (_f(tg.nn.functional.mse_loss, F.mse_loss), [(3,), (3,)])},
    "cross_entropy": {"cross_entropy": (
        _f(lambda a: tg.nn.functional.cross_entropy(a, tg.tensor([0, 2])),
           lambda a: F.cross_entropy(a, torch.tensor([0, 2]))), [(2, 3)])},
    "conv2d": {"conv2d": (_f(tg.nn.functional.conv2d, F.conv2d), [(1, 2, 4, 4), (3, 2, 3, 3)])},
    "dropout": {"dropout": (lambda a: (tg.nn.functional.dropout if isinstance(a, tg.Tensor) else F.dropout)(a, 0.5),
                            [(3,)])},
    "gather": {"gather": (lambda a: (tg.gather(a, 1, tg.tensor([[0], [2]])) if isinstance(a, tg.Tensor)
                                     else torch.gather(a, 1, torch.tensor([[0], [2]]))), [(2, 3)])},
    "index_put": {"index_put": (lambda a, v: (ops.index_put(a, (tg.tensor([0, 1]),), v) if isinstance(a, tg.Tensor)
                                              else torch.index_put(a, (torch.tensor([0, 1]),), v)), [(2, 3), (3,)])},
    "to": {"to dtype": (lambda a: a.to(tg.float32 if isinstance(a, tg.Tensor) else torch.float32), [(3,)])},
}

# the indexing and shape ops of issue 31, item 4 (ops/scatter.py, ops/rearrange.py)
from index_parity_cases import NODE_CASES as _INDEX_CASES  # noqa: E402 - needs torch, imported above

CASES.update(_INDEX_CASES)

# case -> why threadgrad's node has another name. Each is in docs/parity.md too.
EXCEPTIONS = {
    "matmul batched": "torch folds the batch into a bmm wrapped in reshapes (UnsafeViewBackward0 on top); one "
                      "MmBackward0 here",
    "matmul batched by matrix": "torch folds the batch into an mm wrapped in reshapes (UnsafeViewBackward0 on "
                                "top); one MmBackward0 here",
    "mse_loss": "composed of ops (sub, mul, mean: MeanBackward0 on top); torch has one MseLossBackward0",
    "cross_entropy": "composed of log_softmax and a mean of picked entries (MeanBackward0 on top); torch has "
                     "NllLossBackward0 over LogSoftmaxBackward0",
    "conv2d": "composed of ops (an im2col view, matmul, a reshape: ViewBackward0 on top); torch has one "
              "ConvolutionBackward0",
    "einsum mm": "one EinsumBackward0 (numpy's einsum); torch lowers to permutes, reshapes and bmm "
                 "(ViewBackward0 on top)",
    "einsum trace": "one EinsumBackward0; torch takes a diagonal view and sums it (SumBackward1 on top)",
}


def _names(call, shapes):
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(0.5, 1.5, s) for s in shapes]
    tg.manual_seed(0)
    torch.manual_seed(0)
    ours = call(*[tg.tensor(a, requires_grad=True) for a in arrays])
    theirs = call(*[torch.tensor(a, requires_grad=True) for a in arrays])
    return ours.grad_fn.name(), theirs.grad_fn.name()


def test_every_op_of_the_registry_has_cases():
    assert set(CASES) == set(ops.REGISTRY), set(ops.REGISTRY) ^ set(CASES)


CASE_LIST = [(op, case) for op in sorted(CASES) for case in sorted(CASES[op])]


@pytest.mark.parametrize("op, case", CASE_LIST, ids=[c for _, c in CASE_LIST])
def test_node_names_are_torchs(op, case):
    ours, theirs = _names(*CASES[op][case])
    if case in EXCEPTIONS:
        assert ours != theirs, f"{case} now matches torch ({theirs}): drop it from EXCEPTIONS and docs/parity.md"
    else:
        assert ours == theirs


def test_every_exception_is_in_the_parity_page():
    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "parity.md").read_text()
    section = page.split("## Node names", 1)[1].split("\n## ", 1)[0]
    missing = [case for case in EXCEPTIONS if f"`{case}`" not in section]
    assert not missing, missing
