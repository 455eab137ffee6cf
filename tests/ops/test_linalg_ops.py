"""Linear algebra (issue 31): einsum, the products and tg.linalg against torch, beyond what the
registry's samples check: torch's own einsum tests (ported from test/test_linalg.py), error
types and messages, batch and broadcast rules, the top-level spellings, singular matrices.
Skipped without torch."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import threadgrad as tg
from threadgrad.engine.gradcheck import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")

_rng = np.random.default_rng(31)


def _arr(*shape: int) -> np.ndarray:
    return _rng.uniform(-1.0, 1.0, size=shape)


def _both(fn, *arrays, grad: bool = True):
    """Run ``fn(lib, *tensors)`` on threadgrad and torch; compare values and, when ``grad``,
    the gradients of a weighted sum of the (first) output."""
    ours_in = [tg.tensor(a, requires_grad=grad) for a in arrays]
    theirs_in = [torch.tensor(a, requires_grad=grad) for a in arrays]
    ours, theirs = fn(tg, *ours_in), fn(torch, *theirs_in)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-10, atol=1e-12)
    if grad:
        w = _rng.uniform(0.5, 1.5, size=tuple(theirs.shape))
        (ours * tg.tensor(w)).sum().backward()
        (theirs * torch.tensor(w)).sum().backward()
        for a, b in zip(ours_in, theirs_in):
            want = np.zeros(a.shape) if b.grad is None else b.grad.numpy()
            got = np.zeros(a.shape) if a.grad is None else a.grad.numpy()
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    return ours


def _raises_as_torch(fn, *args):
    """``fn(lib, ...)`` raises the same exception type (LinAlgError for LinAlgError) with the same
    message in both libraries."""
    with pytest.raises(Exception) as theirs:  # noqa: PT011 - torch's type is what is compared
        fn(torch, *args)
    with pytest.raises(Exception) as ours:  # noqa: PT011
        fn(tg, *args)
    if isinstance(theirs.value, torch.linalg.LinAlgError):
        assert isinstance(ours.value, tg.linalg.LinAlgError) and isinstance(ours.value, RuntimeError)
    else:
        assert type(ours.value) is type(theirs.value)
    assert str(ours.value).split(" [raised in")[0] == str(theirs.value)


# --- einsum: ports of TestLinalg.test_einsum, test_einsum_sublist_format, test_einsum_corner_cases,
# --- test_einsum_error_cases (torch/test/test_linalg.py) ------------------------------------------

x, y = _arr(5), _arr(7)
A, B, C, D, E = _arr(3, 5), _arr(2, 5), _arr(2, 3, 5), _arr(2, 5, 7), _arr(7, 9)
F, G, H, I = _arr(2, 3, 3, 5), _arr(5, 4, 6), _arr(4, 4), _arr(2, 3, 2)
EINSUM_CASES = [
    ("i->", x), ("i,i->", x, x), ("i,i->i", x, x), ("i,j->ij", x, y),
    ("ij->ji", A), ("ij->j", A), ("ij->i", A), ("ij,ij->ij", A, A), ("ij,j->i", A, x), ("ij,kj->ik", A, B),
    ("ij,ab->ijab", A, E),
    ("Aij,Ajk->Aik", C, D), ("ijk,jk->i", C, A), ("aij,jk->aik", D, E), ("abCd,dFg->abCFg", F, G),
    ("ijk,jk->ik", C, A), ("ijk,jk->ij", C, A), ("ijk,ik->j", C, B), ("ijk,ik->jk", C, B),
    ("ii", H), ("ii->i", H), ("iji->j", I), ("ngrg...->nrg...", _arr(2, 1, 3, 1, 4)),
    ("i...->...", H), ("ki,...k->i...", A.T, B), ("k...,jk->...", A.T, B), ("...ik, ...j -> ...ij", C, x),
    ("Bik,k...j->i...j", C, _arr(5, 3)), ("i...j, ij... -> ...ij", C, _arr(2, 5, 2, 3)),
    ("bn,anm,bm->ba", _arr(5, 10), _arr(15, 10, 20), _arr(5, 20)),
    ("...,be,b...,beg,gi,bc...->bi...", A, B, C, D, E, F),
]


@pytest.mark.parametrize("case", EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum_matches_torch_and_numpy(case):
    """TestLinalg.test_einsum: values against numpy and torch, gradients against torch."""
    eq, *arrays = case
    ours = _both(lambda lib, *ts: lib.einsum(eq, *ts), *arrays)
    np.testing.assert_allclose(ours.detach().numpy(), np.einsum(eq.replace(" ", ""), *arrays), rtol=1e-10,
                               atol=1e-12)


@pytest.mark.parametrize("eq,shapes", [("ii->i", [(3, 3)]), ("ij,jk,kl->il", [(2, 3), (3, 2), (2, 2)]),
                                       ("...ij,...j->...i", [(4, 2, 3), (4, 1, 3)]), ("i,i->", [(3,), (3,)])])
def test_einsum_is_differentiable_twice(eq, shapes):
    ts = [tg.tensor(_arr(*s), requires_grad=True) for s in shapes]
    assert gradcheck(lambda *a: tg.einsum(eq, *a), ts)
    assert gradgradcheck(lambda *a: tg.einsum(eq, *a), ts)


def test_einsum_sublist_format():
    """TestLinalg.test_einsum_sublist_format."""
    cases = [(x, [0]), (x, [0], []), (x, [0], y, [1]), (A, [0, 1], A, [0, 1], [0, 1]), (A, [0, 1], x, [1], [0]),
             (C, [Ellipsis, 0, 1], D, [Ellipsis, 1, 2], [Ellipsis, 0, 2]), (H, [0, 0]), (H, [0, 0], [0])]
    for case in cases:
        def run(lib, *ts, case=case):
            args, it = [], iter(ts)
            for item in case:
                args.append(next(it) if isinstance(item, np.ndarray) else item)
            return lib.einsum(*args)
        _both(run, *[c for c in case if isinstance(c, np.ndarray)])


@pytest.mark.parametrize("eq,operands,expected", [
    (" ", [1.0], 1.0), (" -> ", [1.0], 1.0), (" , ", [2.0, 2.0], 4.0), (" , , ", [2.0, 2.0, 2.0], 8.0),
    (" i ", [[1.0]], [1.0]), (" i -> ", [[1.0]], 1.0), (" i , i -> i ", [[2.0], [2.0]], [4.0]),
    ("i", [[]], []), ("ij->i", [[[], []]], [0.0, 0.0]), (" i j k  ,  k  -> i j ", [[[[], []]], []], [[0.0, 0.0]]),
    ("i,j", [[2.0], [1.0, 2.0]], [[2.0, 4.0]]), ("i,ij->ij", [[1.0, 2.0], [[1.0, 2.0, 3.0], [2.0, 3.0, 4.0]]],
                                                  [[1.0, 2.0, 3.0], [4.0, 6.0, 8.0]]),
    ("...", [1.0], 1.0), ("...->", [1.0], 1.0), ("...->...", [1.0], 1.0), ("...", [[1.0]], [1.0]),
    ("z...->z", [[1.0]], [1.0]), ("Z...->...Z", [[1.0]], [1.0]), ("...a->", [[[2.0], [4.0]]], 6.0),
    ("a...b->ab", [[[[1.0], [2.0]], [[3.0], [4.0]]]], [[3.0], [7.0]]),
])
def test_einsum_corner_cases(eq, operands, expected):
    """TestLinalg.test_einsum_corner_cases: blanks, 0-d and empty operands, size-1 broadcasting."""
    out = tg.einsum(eq, *[tg.tensor(o, dtype=tg.float64) for o in operands])
    np.testing.assert_array_equal(out.numpy(), np.asarray(expected, dtype=np.float64))


@pytest.mark.parametrize("eq,shapes", [
    ("*", [(0,)]), (".i...", [(0,)]), ("...i...", [(0,)]), ("i...->i...i", [(0,)]), ("i", [(0,), (0,)]),
    ("", [(0,)]), ("ai", [(0,)]), ("ai...", [(0,)]), ("a->... .", [(0,)]), ("a->..", [(0,)]), ("a->1", [(0,)]),
    ("a->aa", [(1,)]), ("a->i", [(0,)]), ("aa", [(1, 0)]), ("...,...", [(2, 3), (4, 3)]), ("a,a", [(2,), (3,)]),
    ("i,i", []),
])
def test_einsum_errors_are_torchs(eq, shapes):
    """TestLinalg.test_einsum_error_cases: torch's exception types and words."""
    _raises_as_torch(lambda lib: lib.einsum(eq, *[lib.zeros(s, dtype=lib.float64) for s in shapes]))


def test_einsum_output_is_not_a_view_of_its_operand():
    a = tg.tensor([[1.0, 2.0], [3.0, 4.0]])
    d = tg.einsum("ii->i", a)
    a.add_(1.0)
    assert d.tolist() == [1.0, 4.0]


# --- products ------------------------------------------------------------------------------------

def test_addmm_family_beta_zero_does_not_read_input():
    """beta=0 (and alpha=0 for the factors): NaN there does not reach the result (BLAS's rule,
    torch's; TestLinalg.test_addmm_sizes and test_blas_nan_out check the same in torch)."""
    nan = np.full((2, 3), np.nan)
    _both(lambda lib, i, a, b: lib.addmm(i, a, b, beta=0), nan, _arr(2, 4), _arr(4, 3))
    _both(lambda lib, i, a, v: lib.addmv(i, a, v, beta=0.0), nan[:, 0], _arr(2, 4), _arr(4))
    _both(lambda lib, i, a, b: lib.baddbmm(i, a, b, beta=0, alpha=0.5), np.full((2, 2, 3), np.nan), _arr(2, 2, 4),
          _arr(2, 4, 3))
    _both(lambda lib, i, a, b: lib.addmm(i, a, b, alpha=0), _arr(2, 3), np.full((2, 4), np.nan), _arr(4, 3), grad=False)


def test_add_products_as_methods_and_with_integers():
    _both(lambda lib, i, a, b: i.addmm(a, b, beta=2, alpha=3), _arr(1, 3), _arr(2, 4), _arr(4, 3))
    _both(lambda lib, i, a, v: i.addmv(a, v, alpha=-1), _arr(2), _arr(2, 4), _arr(4))
    _both(lambda lib, i, a, b: i.baddbmm(a, b), _arr(3), _arr(2, 2, 4), _arr(2, 4, 3))
    _both(lambda lib, a, b: a.vdot(b) + a.kron(b).sum(), _arr(3), _arr(3))


@pytest.mark.parametrize("call,shapes", [
    (lambda lib, i, a, b: lib.addmm(i, a, b), [(2, 2), (3,), (3, 2)]),
    (lambda lib, i, a, b: lib.addmm(i, a, b), [(2, 2), (2, 3), (4, 2)]),
    (lambda lib, i, a, b: lib.addmm(i, a, b), [(3, 3), (2, 3), (3, 2)]),
    (lambda lib, i, a, v: lib.addmv(i, a, v), [(2,), (2, 3), (4,)]),
    (lambda lib, i, a, v: lib.addmv(i, a, v), [(2,), (3,), (3,)]),
    (lambda lib, i, a, b: lib.baddbmm(i, a, b), [(2, 2, 2), (2, 2, 3), (2, 4, 2)]),
    (lambda lib, i, a, b: lib.baddbmm(i, a, b), [(3, 2, 2), (2, 2, 3), (2, 3, 2)]),
    (lambda lib, a, b: lib.vdot(a, b), [(2, 2), (2, 2)]),
    (lambda lib, a, b: lib.vdot(a, b), [(3,), (4,)]),
    (lambda lib, a, b: lib.tensordot(a, b, 1), [(2, 3), (4, 5)]),
    (lambda lib, a, b: lib.tensordot(a, b, ([1], [0, 1])), [(2, 3), (3, 5)]),
    (lambda lib, a, b: lib.tensordot(a, b, -1), [(2, 3), (3, 5)]),
    (lambda lib, a, b: lib.tensordot(a, b, 3), [(2, 3), (3, 5)]),
])
def test_product_errors_are_torchs(call, shapes):
    _raises_as_torch(lambda lib: call(lib, *[lib.zeros(s) for s in shapes]))


def test_tensordot_and_kron_shapes():
    """TestLinalg.test_tensordot and test_kron: against numpy too."""
    a, b = _arr(3, 4, 5), _arr(4, 3, 2)
    out = _both(lambda lib, p, q: lib.tensordot(p, q, dims=([1, 0], [0, 1])), a, b)
    np.testing.assert_allclose(out.detach().numpy(), np.tensordot(a, b, axes=([1, 0], [0, 1])))
    out = _both(lambda lib, p, q: lib.tensordot(p, q, dims=0), _arr(2, 3), _arr(4))
    assert out.shape == (2, 3, 4)
    for sa, sb in [((2,), (3,)), ((2, 3), (4,)), ((1, 2, 3), (3, 1, 2)), ((), (2,))]:
        a, b = _arr(*sa), _arr(*sb)
        out = _both(lambda lib, p, q: lib.kron(p, q), a, b)
        np.testing.assert_allclose(out.detach().numpy(), np.kron(a, b))


# --- tg.linalg -----------------------------------------------------------------------------------

def _spd(*batch: int, n: int = 3) -> np.ndarray:
    m = _arr(*batch, n, n + 2)
    return m @ np.swapaxes(m, -1, -2)


@pytest.mark.parametrize("name", ["inv", "det", "slogdet", "cholesky", "eigh", "eigvalsh", "svd", "svdvals",
                                  "pinv", "qr", "matrix_norm", "norm", "vector_norm", "solve"])
def test_linalg_names_are_torchs(name):
    assert callable(getattr(tg.linalg, name)) and callable(getattr(torch.linalg, name))


@pytest.mark.parametrize("call,arrays", [
    (lambda lib, a: lib.linalg.inv(a), [np.zeros((2, 3))]),
    (lambda lib, a: lib.linalg.inv(a), [np.array([[1.0, 2.0], [2.0, 4.0]])]),
    (lambda lib, a: lib.linalg.inv(a), [np.stack([np.eye(3), np.diag([1.0, 0.0, 1.0])])]),
    (lambda lib, a: lib.linalg.inv(a), [np.zeros(3)]),
    (lambda lib, a: lib.linalg.det(a), [np.zeros((2, 3))]),
    (lambda lib, a: lib.linalg.slogdet(a), [np.zeros((3,))]),
    (lambda lib, a, b: lib.linalg.solve(a, b), [np.array([[1.0, 2.0], [2.0, 4.0]]), np.ones(2)]),
    (lambda lib, a, b: lib.linalg.solve(a, b), [np.eye(2), np.ones(3)]),
    (lambda lib, a, b: lib.linalg.solve(a, b), [np.zeros((2, 3)), np.ones(2)]),
    (lambda lib, a: lib.linalg.cholesky(a), [np.array([[1.0, 2.0], [2.0, 1.0]])]),
    (lambda lib, a: lib.linalg.cholesky(a), [np.stack([np.eye(2), -np.eye(2)])]),
    (lambda lib, a: lib.linalg.cholesky(a), [np.array([[1.0, math.nan], [math.nan, 1.0]])]),
    (lambda lib, a: lib.linalg.eigh(a), [np.zeros((2, 3))]),
    (lambda lib, a: lib.linalg.eigh(a, UPLO="X"), [np.eye(2)]),
    (lambda lib, a: lib.linalg.qr(a, mode="x"), [np.eye(2)]),
    (lambda lib, a: lib.linalg.svd(a), [np.zeros(3)]),
    (lambda lib, a: lib.linalg.svdvals(a), [np.array([[1.0, math.nan], [0.0, 1.0]])]),
    (lambda lib, a: lib.linalg.matrix_norm(a, 3), [np.eye(3)]),
    (lambda lib, a: lib.linalg.matrix_norm(a), [np.zeros(3)]),
    (lambda lib, a: lib.linalg.norm(a, 2), [np.zeros((2, 2, 2))]),
    (lambda lib, a: lib.linalg.vector_norm(a, "fro"), [np.zeros(3)]),
    (lambda lib, a: lib.linalg.inv(a.long()), [np.eye(2)]),
])
def test_linalg_errors_are_torchs(call, arrays):
    """TestLinalg.test_inverse_errors, test_cholesky_errors_and_warnings, test_linalg_solve_errors ...:
    torch's exception (LinAlgError where torch raises it) and message, batch element included."""
    _raises_as_torch(lambda lib: call(lib, *[lib.tensor(a) for a in arrays]))


@pytest.mark.parametrize("mode,shape", [("r", (3, 2)), ("complete", (3, 2))])
def test_qr_backward_errors_are_torchs(mode, shape):
    def run(lib):
        a = lib.ones(shape, dtype=lib.float64, requires_grad=True)
        q, r = lib.linalg.qr(a, mode=mode)
        (r.sum() + (q.sum() if q.numel() else 0)).backward()
    _raises_as_torch(run)


def test_batched_and_broadcast_solves():
    _both(lambda lib, a, b: lib.linalg.solve(a, b), _arr(2, 1, 3, 3), _arr(4, 3, 2))
    _both(lambda lib, a, b: lib.linalg.solve(a, b, left=False), _arr(2, 3, 3), _arr(2, 4, 3))
    _both(lambda lib, a, b: lib.linalg.solve(a, b), _arr(2, 3, 3), _arr(2, 3))  # a batch of vectors


def test_decompositions_through_invariants():
    """Note [Gauge of decompositions]: what a sign choice cannot change, against torch."""
    S = _spd(2)
    _both(lambda lib, a: lib.linalg.cholesky(a, upper=True), S)
    _both(lambda lib, a: (lambda r: r.eigenvectors ** 2 + r.eigenvalues.unsqueeze(-2))(lib.linalg.eigh(a)), S)
    for shape in [(4, 3), (3, 4), (2, 3, 3)]:
        a = _arr(*shape)
        _both(lambda lib, m: (lambda r: r.Q ** 2)(lib.linalg.qr(m)), a)
        if shape[-2] <= shape[-1]:  # (complete with more rows than columns has no derivative)
            _both(lambda lib, m: (lambda r: r.R ** 2)(lib.linalg.qr(m, mode="complete")), a)
        _both(lambda lib, m: (lambda r: (r.U[..., :, :r.S.shape[-1]] * r.S.unsqueeze(-2)) @ r.Vh[..., :r.S.shape[-1], :])(
            lib.linalg.svd(m)), a)
        _both(lambda lib, m: lib.linalg.pinv(m), a)


def test_top_level_spellings():
    """torch.det, inverse, slogdet, logdet, svd (V, some), qr (some), cholesky, pinverse, and methods."""
    a, s = _arr(3, 3), _spd()
    _both(lambda lib, m: lib.det(m) + m.det(), a)
    _both(lambda lib, m: lib.inverse(m) + m.inverse(), a)
    _both(lambda lib, m: lib.slogdet(m).logabsdet + m.slogdet()[1] + lib.logdet(m @ m.mT), a)
    _both(lambda lib, m: lib.logdet(m), np.diag([1.0, -2.0, 3.0]))  # NaN for a negative determinant
    _both(lambda lib, m: lib.pinverse(m) + m.pinverse(), _arr(4, 3))
    _both(lambda lib, m: (lambda r: r.V ** 2 + r.S)(lib.svd(m)), _arr(3, 3))
    _both(lambda lib, m: (lambda r: r[2] ** 2)(m.svd(some=False)), _arr(3, 3))
    _both(lambda lib, m: lib.svd(m, compute_uv=False)[0], _arr(4, 3), grad=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch.qr's and torch.cholesky's deprecation
        _both(lambda lib, m: lib.qr(m, some=False)[0] ** 2, _arr(4, 3), grad=False)
        out = _both(lambda lib, m: lib.cholesky(m, upper=True) + m.cholesky(), s)
        assert out.grad_fn.next_functions[0][0].name() == "CholeskyBackward0"
    for fn, words in ((tg.cholesky, "torch.cholesky is deprecated"), (tg.qr, "torch.qr is deprecated")):
        with pytest.warns(UserWarning, match=words):  # torch's deprecation warnings, as torch gives them
            fn(tg.tensor(s))


def test_det_at_singular_matrices_is_torchs():
    """Zeros where the determinant is exactly 0 (torch 2.13's value), a mixed batch included."""
    batch = np.stack([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 1.0], [0.5, 3.0]], np.zeros((2, 2))])
    _both(lambda lib, m: lib.linalg.det(m), batch)


def test_matrix_norms_over_any_dims():
    a = _arr(3, 2, 4)
    for o in ("fro", "nuc", 2, -2, 1, -1, math.inf, -math.inf):
        for dim in [(0, 2), (2, 0), (-1, -2)]:
            for keepdim in (False, True):
                _both(lambda lib, m, o=o, d=dim, k=keepdim: lib.linalg.matrix_norm(m, o, d, k), a)
    _both(lambda lib, m: lib.linalg.norm(m, dim=(0, 1), ord=-1) + lib.linalg.norm(m[0, 0], 0.5), a)


def test_mT_and_mH():
    a = tg.tensor(_arr(2, 3, 4))
    assert a.mT.shape == (2, 4, 3) and a.mH.shape == (2, 4, 3)
    np.testing.assert_array_equal(a.mT.numpy(), np.swapaxes(a.numpy(), -1, -2))
    _raises_as_torch(lambda lib: lib.zeros(3).mT)
    _raises_as_torch(lambda lib: lib.zeros(3).mH)
