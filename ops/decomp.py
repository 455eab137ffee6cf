"""torch.linalg's inverses, determinants, solves and decompositions, and its norms: the ops
behind ``tg.linalg``. See Note [Op definitions] in _core.py.

Each op is registered under torch's ATen name (``linalg_inv``, ``linalg_svd`` ...), which is
what ``tg.linalg.inv`` and friends are; the flat ``tg.`` namespace has only torch's own
top-level spellings (``tg.det``, ``tg.inverse``, ``tg.svd`` with ``torch.svd``'s ``V``).
Inputs are batches of matrices (``(..., m, n)``), real floating point; each node carries
torch's name and its derivative formula (torch's FunctionsManual.cpp), written with ops, so
every one is differentiable twice.

Note [Gauge of decompositions]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Eigenvectors and singular vectors are defined up to a sign per vector (a phase for complex
inputs): LAPACK's choice is arbitrary, and differs between numpy's and torch's builds. A loss
that depends on that sign has no derivative. So tests compare, as torch's own OpInfos do,
quantities that do not depend on it: eigenvalues and singular values, ``V * V``, ``U * U``,
``U @ diag(S) @ Vh``. The gradient formulas assume the loss is such a quantity, and assume
distinct eigen/singular values (torch's formulas divide by their differences).
"""
from __future__ import annotations

import math
import warnings
from collections import namedtuple
from typing import Any

import numpy

from ..engine.tensor import Tensor, _wrap

from ._core import Node, check_tensor, const, device_error, fit, record, register, tls
from .einsum import einsum
from .elementwise import add, div, mul, neg, sub, where
from .index import getitem
from .linalg import matmul
from .shape import cat, reshape, transpose, unsqueeze


class LinAlgError(RuntimeError):
    """A matrix that a linear algebra op cannot handle (singular, not positive-definite), as
    ``torch.linalg.LinAlgError`` (a RuntimeError)."""


# --- helpers, all differentiable ---------------------------------------------------------------

def _mT(x: Tensor) -> Tensor:
    return transpose(x, -1, -2)


def _diagonal(x: Tensor) -> Tensor:
    return einsum("...ii->...i", x)


def _diag_embed(v: Tensor) -> Tensor:
    n = v.shape[-1]
    return einsum("...i,ij->...ij", v, const(v.device.xp.eye(n, dtype=v.dtype), v))


def _eye_like(x: Tensor) -> Tensor:
    return const(x.device.xp.eye(x.shape[-1], dtype=x.dtype), x)


def _tri(x: Tensor, k: int, lower: bool) -> Tensor:
    """``tril(x, k)`` (lower) or ``triu(x, k)``: a selection (``where``), not a product with a
    mask, which would turn an infinity outside the triangle into NaN."""
    xp = x.device.xp
    ones = xp.ones(x.shape[-2:], dtype=bool)
    return where(const(xp.tril(ones, k) if lower else xp.triu(ones, k), x), x,
                 const(xp.zeros((), dtype=x.dtype), x))


def _unsq2(x: Tensor) -> Tensor:
    return unsqueeze(unsqueeze(x, -1), -1)


_TORCH_DTYPE_NAMES = {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
                      "bool": "Bool", "float16": "Half"}


def _matrices(A: Any, name: str, square: bool = True, arg: str = "A") -> Tensor:
    """``A`` checked as torch checks a batch of (square) floating-point matrices."""
    check_tensor(A, name, arg)
    if A.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor {arg} must have at least 2 dimensions.")
    if square and A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{name}: {arg} must be batches of square matrices, but they are {A.shape[-2]} by "
                           f"{A.shape[-1]} matrices")
    if A.dtype.kind not in "f":
        kind = "Expected a floating point or complex tensor as input" if A.dtype.kind != "c" else \
            "complex inputs are not supported by threadgrad (real floating point only)"
        raise RuntimeError(f"{name}: {kind}. Got {_TORCH_DTYPE_NAMES.get(A.dtype.name, A.dtype.name)}")
    return A


def _first_zero_pivot(a: numpy.ndarray) -> int:
    """The 1-based index of LAPACK getrf's first zero pivot in ``a`` (partial pivoting), 0 if none:
    the number torch's "The diagonal element k is zero" message names."""
    u = numpy.array(a)  # (a copy, in a's dtype: the zero LAPACK met is one in that precision)
    n = u.shape[0]
    first = 0
    for k in range(n):
        p = k + int(numpy.argmax(numpy.abs(u[k:, k])))
        if u[p, k] == 0:
            first = first or k + 1
            continue
        u[[k, p]] = u[[p, k]]
        u[k + 1:, k:] -= numpy.outer(u[k + 1:, k] / u[k, k], u[k, k:])
    return first


def _each_matrix(A: Tensor) -> Any:
    """``(prefix, matrix)`` for each matrix of a batch, prefix torch's "(Batch element i): "."""
    arr = A.detach().numpy()  # (the error path only: a host copy)
    if arr.ndim == 2:
        yield "", arr
        return
    flat = arr.reshape((-1,) + arr.shape[-2:])
    for i, m in enumerate(flat):
        yield f"(Batch element {i}): ", m


def _singular_error(A: Tensor, name: str) -> LinAlgError:
    for prefix, m in _each_matrix(A):
        k = _first_zero_pivot(m)
        if k:
            return LinAlgError(f"{name}: {prefix}The diagonal element {k} is zero, the inversion could not be "
                               f"completed because the input matrix is singular.")
    return LinAlgError(f"{name}: the input matrix is singular.")


# --- inv, det, slogdet ----------------------------------------------------------------------------

class LinalgInvExBackward0(Node):
    """``inv(A)``: ``-inv(A)^T @ g @ inv(A)^T``."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        (inv,) = self.saved_tensors()
        inv_t = _mT(inv)
        return (neg(matmul(inv_t, matmul(g, inv_t))),)


@register
def linalg_inv(A: Tensor) -> Tensor:
    """The inverse of each square matrix of ``A``, as ``torch.linalg.inv`` (``tg.linalg.inv``;
    ``tg.inverse``): a singular matrix raises ``LinAlgError`` naming LAPACK's zero pivot.

    >>> import threadgrad as tg
    >>> tg.linalg.inv(tg.tensor([[2.0, 0.0], [0.0, 4.0]])).tolist()
    [[0.5, 0.0], [0.0, 0.25]]
    """
    _matrices(A, "linalg.inv")
    try:
        data = A.device.xp.linalg.inv(A._data)
    except numpy.linalg.LinAlgError:
        raise _singular_error(A, "linalg.inv") from None
    out = _wrap(data, A.device)
    if tls.grad_enabled and A._rg:
        record(LinalgInvExBackward0(), (A,), out, (out,))
    return out


def _det_grad(g: Tensor, det: Tensor, A: Tensor) -> Tensor:
    """``g * det * inv(A)^T``; zeros for a matrix whose determinant is 0, as torch 2.13 gives."""
    if A.shape[-1] == 0:
        return const(A.device.xp.zeros(A.shape, dtype=A.dtype), A)
    singular = det._data == 0
    if not singular.any():
        return mul(_unsq2(mul(g, det)), _mT(linalg_inv(A)))
    mask = const(A.device.xp.asarray(singular)[..., None, None], A)
    safe = where(mask, _eye_like(A), A)  # the formula on a stand-in where it is not taken
    return where(mask, const(A.device.xp.zeros((), dtype=A.dtype), A),
                 mul(_unsq2(mul(g, det)), _mT(linalg_inv(safe))))


class LinalgDetBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        A, det = self.saved_tensors()
        return (_det_grad(g, det, A),)


@register
def linalg_det(A: Tensor) -> Tensor:
    """The determinant of each square matrix of ``A``, as ``torch.linalg.det`` (``tg.det``).
    Gradient ``g * det(A) * inv(A)^T``; at a matrix whose determinant is exactly 0 torch 2.13
    gives zeros, and so does this one.

    >>> import threadgrad as tg
    >>> tg.linalg.det(tg.tensor([[2.0, 1.0], [1.0, 3.0]])).item()
    5.0
    """
    _matrices(A, "linalg.det")
    out = _wrap(A.device.xp.asarray(A.device.xp.linalg.det(A._data)), A.device)
    if tls.grad_enabled and A._rg:
        record(LinalgDetBackward0(), (A,), out, (A, out))
    return out


SlogdetResult = namedtuple("SlogdetResult", ["sign", "logabsdet"])


class LinalgSlogdetBackward0(Node):
    """``logabsdet``'s gradient ``g * inv(A)^T`` (the sign of a real matrix has none)."""

    __slots__ = ()

    def backward(self, g_sign: Tensor | None, g_logabsdet: Tensor | None) -> tuple:
        if g_logabsdet is None:
            return (None,)
        (A,) = self.saved_tensors()
        return (mul(_unsq2(g_logabsdet), _mT(linalg_inv(A))),)


@register
def linalg_slogdet(A: Tensor) -> SlogdetResult:
    """``(sign, logabsdet)`` of each square matrix's determinant, as ``torch.linalg.slogdet``
    (``tg.slogdet``): a singular matrix gives sign 0 and ``-inf``; its gradient there raises
    ``LinAlgError`` (torch's is infinite)."""
    _matrices(A, "linalg.slogdet")
    xp = A.device.xp
    sign, logabs = xp.linalg.slogdet(A._data)
    s, la = _wrap(xp.asarray(sign), A.device), _wrap(xp.asarray(logabs), A.device)
    if tls.grad_enabled and A._rg:
        record(LinalgSlogdetBackward0(), (A,), (s, la), (A,))
    return SlogdetResult(s, la)


# --- solve ----------------------------------------------------------------------------------------

class LinalgSolveExBackward0(Node):
    """``X = solve(A, B)``: ``gB = solve(A^T, gX)``, ``gA = -gB X^T`` (``left=False``: the mirror)."""

    __slots__ = ("left", "vector", "a_shape", "a_dtype", "b_shape", "b_dtype")

    def backward(self, g: Tensor) -> tuple:
        A, X = self.saved_tensors()
        ea, eb = self.next_edges
        g2 = unsqueeze(g, -1) if self.vector else g
        gB = linalg_solve(_mT(A), g2, left=self.left)
        gA = None
        if ea[0] is not None:
            X2 = unsqueeze(X, -1) if self.vector else X
            gA = fit(neg(matmul(gB, _mT(X2)) if self.left else matmul(_mT(X2), gB)), self.a_shape, self.a_dtype)
        if eb[0] is None:
            return (gA, None)
        if self.vector:
            gB = reshape(gB, gB.shape[:-1])
        return (gA, fit(gB, self.b_shape, self.b_dtype))


@register
def linalg_solve(A: Tensor, B: Tensor, *, left: bool = True) -> Tensor:
    """The solution ``X`` of ``A @ X = B`` (``left=False``: ``X @ A = B``), as
    ``torch.linalg.solve``: batch dims broadcast; ``B`` is a batch of vectors when it is 1-D
    or has ``A``'s shape without its last dim. A singular ``A`` raises ``LinAlgError``.

    >>> import threadgrad as tg
    >>> tg.linalg.solve(tg.tensor([[2.0, 0.0], [0.0, 4.0]]), tg.tensor([1.0, 1.0])).tolist()
    [0.5, 0.25]
    """
    _matrices(A, "linalg.solve")
    check_tensor(B, "linalg.solve", "B")
    if A.device is not B.device:
        raise device_error("linalg.solve", A, B)
    xp = A.device.xp
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and B.shape == A.shape[:-1])
    b = B._data[..., None] if vector else B._data
    n = A.shape[-1]
    if b.ndim < 2 or (b.shape[-2] if left else b.shape[-1]) != n:
        eq = "AX = B" if left else "XA = B"
        bs = b.shape[-2:] if b.ndim >= 2 else (b.shape[0], 1)
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation {eq} ({n}x{n} and "
                           f"{bs[0]}x{bs[1]})")
    try:
        if left:
            x = xp.linalg.solve(A._data, b)
        else:
            x = xp.swapaxes(xp.linalg.solve(xp.swapaxes(A._data, -1, -2), xp.swapaxes(b, -1, -2)), -1, -2)
    except numpy.linalg.LinAlgError:
        raise LinAlgError("torch.linalg.solve: The solver failed because the input matrix is singular.") from None
    except ValueError as e:
        raise RuntimeError(f"linalg.solve: the batch dims of A {list(A.shape)} and B {list(B.shape)} do not "
                           f"broadcast ({e})") from None
    out = _wrap(xp.ascontiguousarray(x[..., 0] if vector else x), A.device)
    if tls.grad_enabled and (A._rg or B._rg):
        node = LinalgSolveExBackward0()
        node.left, node.vector = left, vector
        node.a_shape, node.a_dtype, node.b_shape, node.b_dtype = A.shape, A.dtype, B.shape, B.dtype
        record(node, (A, B), out, (A, out if A._rg else None))
    return out


# --- cholesky, qr -------------------------------------------------------------------------------

class LinalgCholeskyExBackward0(Node):
    """``A = L L^T``: ``gA = L^-T Phi L^-1``, ``Phi`` the symmetric matrix whose lower triangle
    is ``tril(L^T gL)`` with its diagonal halved (torch's cholesky_backward)."""

    __slots__ = ("upper",)

    def backward(self, g: Tensor) -> tuple:
        (L,) = self.saved_tensors()
        if self.upper:
            L, g = _mT(L), _mT(g)
        low = _tri(matmul(_mT(L), g), 0, lower=True)
        phi = mul(add(low, _mT(_tri(low, -1, lower=True))), 0.5)
        inv = linalg_inv(L)
        return (matmul(_mT(inv), matmul(phi, inv)),)


class CholeskyBackward0(LinalgCholeskyExBackward0):
    """``torch.cholesky`` (the deprecated spelling) records this name."""

    __slots__ = ()


def _cholesky(A: Tensor, upper: bool, name: str, node_cls: type) -> Tensor:
    _matrices(A, name)
    xp = A.device.xp
    try:
        L = xp.linalg.cholesky(A._data)  # reads the lower triangle, as torch's
        if xp.isnan(L).any():  # a NaN pivot: numpy fills NaN, LAPACK (and torch) call it not positive-definite
            raise numpy.linalg.LinAlgError
    except numpy.linalg.LinAlgError:
        for prefix, m in _each_matrix(A):
            order = next((k for k in range(1, m.shape[-1] + 1) if not _is_pd(m[:k, :k])), 0)
            if order:
                raise LinAlgError(f"{name}: {prefix}The factorization could not be completed because the input is "
                                  f"not positive-definite (the leading minor of order {order} is not "
                                  f"positive-definite).") from None
        raise LinAlgError(f"{name}: the input is not positive-definite.") from None
    out = _wrap(xp.ascontiguousarray(xp.swapaxes(L, -1, -2)) if upper else L, A.device)
    if tls.grad_enabled and A._rg:
        node = node_cls()
        node.upper = upper
        record(node, (A,), out, (out,))
    return out


def _is_pd(m: numpy.ndarray) -> bool:
    try:
        return not numpy.isnan(numpy.linalg.cholesky(m)).any()
    except numpy.linalg.LinAlgError:
        return False


@register
def linalg_cholesky(A: Tensor, *, upper: bool = False) -> Tensor:
    """The Cholesky factor ``L`` (lower triangular, ``A = L @ L.mT``; ``upper=True``: ``L.mT``)
    of each symmetric positive-definite matrix, as ``torch.linalg.cholesky``: only the lower
    triangle of ``A`` is read; a matrix that is not positive-definite raises ``LinAlgError``
    naming the order of the failing leading minor.

    >>> import threadgrad as tg
    >>> tg.linalg.cholesky(tg.tensor([[4.0, 2.0], [2.0, 2.0]])).tolist()
    [[2.0, 0.0], [1.0, 1.0]]
    """
    return _cholesky(A, upper, "linalg.cholesky", LinalgCholeskyExBackward0)


QRResult = namedtuple("QRResult", ["Q", "R"])


class LinalgQrBackward0(Node):
    """``A = Q R`` (torch's linalg_qr_backward, real case)."""

    __slots__ = ("mode",)

    def backward(self, gQ: Tensor | None, gR: Tensor | None) -> tuple:
        if self.mode == "r":
            raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed when mode='r'. "
                               "Please use linalg.qr(A, mode='reduced') if you are going to differentiate through "
                               "linalg.qr.")
        Q, R = self.saved_tensors()
        m, n = Q.shape[-2], R.shape[-1]
        if self.mode == "complete" and m > n:
            raise RuntimeError("The QR decomposition is not differentiable when mode='complete' and nrows > ncols.")
        if gQ is None and gR is None:
            return (None,)
        if gQ is not None:
            gA = neg(matmul(_mT(Q), gQ)) if gR is None else sub(matmul(gR, _mT(R)), matmul(_mT(Q), gQ))
        else:
            gA = matmul(gR, _mT(R))
        if m >= n:
            sym = _tri(gA, 0, lower=False)
            sym = add(sym, _mT(_tri(gA, 1, lower=False)))  # upper triangle mirrored, diagonal once
            gA = matmul(Q, sym)
            if gQ is not None:
                gA = add(gA, gQ)
            return (matmul(gA, _mT(linalg_inv(R))),)  # gA R^-T
        X = neg(gA)
        skew = _tri(sub(X, _mT(X)), 0, lower=True)
        gA = matmul(matmul(Q, skew), _mT(linalg_inv(getitem(R, (Ellipsis, slice(None), slice(0, m))))))
        zeros = const(R.device.xp.zeros(R.shape[:-1] + (n - m,), dtype=gA.dtype), gA)
        gA = cat([gA, zeros], -1)
        if gR is not None:
            gA = add(gA, matmul(Q, gR))
        return (gA,)


@register
def linalg_qr(A: Tensor, mode: str = "reduced") -> QRResult:
    """``(Q, R)`` with ``A = Q @ R``, ``Q`` with orthonormal columns and ``R`` upper triangular,
    as ``torch.linalg.qr``: ``mode`` ``"reduced"`` (``Q`` is ``(m, k)``, ``k = min(m, n)``),
    ``"complete"`` (``Q`` is ``(m, m)``) or ``"r"`` (``Q`` empty; not differentiable).
    LAPACK's signs (numpy's build), which may differ from torch's by a sign per column of Q
    and row of R (Note [Gauge of decompositions])."""
    _matrices(A, "linalg.qr", square=False)
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', "
                           f"or 'complete'")
    xp = A.device.xp
    if mode == "r":
        r = xp.linalg.qr(A._data, mode="r")
        Q, R = _wrap(xp.zeros((0,), dtype=A.dtype), A.device), _wrap(xp.asarray(r), A.device)
    else:
        q, r = xp.linalg.qr(A._data, mode=mode)
        Q, R = _wrap(xp.asarray(q), A.device), _wrap(xp.asarray(r), A.device)
    if tls.grad_enabled and A._rg:
        node = LinalgQrBackward0()
        node.mode = mode
        record(node, (A,), (Q, R), (Q, R) if mode != "r" else ())
    return QRResult(Q, R)


# --- eigh, svd, pinv ------------------------------------------------------------------------------

EighResult = namedtuple("EighResult", ["eigenvalues", "eigenvectors"])


class LinalgEighBackward0(Node):
    """``A = V diag(L) V^T`` (torch's linalg_eig_backward, Hermitian case)."""

    __slots__ = ()

    def backward(self, gL: Tensor | None, gV: Tensor | None) -> tuple:
        L, V = self.saved_tensors()
        if gV is None:
            if gL is None:
                return (None,)
            return (matmul(mul(V, unsqueeze(gL, -2)), _mT(V)),)
        VtgV = matmul(_mT(V), gV)
        VtgV = mul(sub(VtgV, _mT(VtgV)), 0.5)
        E = add(sub(unsqueeze(L, -2), unsqueeze(L, -1)), _eye_like(V))  # L_j - L_i, ones on the diagonal
        gA = div(VtgV, E)
        if gL is not None:
            gA = add(sub(gA, _diag_embed(_diagonal(gA))), _diag_embed(gL))
        return (matmul(V, matmul(gA, _mT(V))),)


@register
def linalg_eigh(A: Tensor, UPLO: str = "L") -> EighResult:  # noqa: N803 - torch's name
    """``(eigenvalues, eigenvectors)`` of each symmetric matrix, eigenvalues ascending, as
    ``torch.linalg.eigh``: only the ``UPLO`` ("L" or "U") triangle is read. The eigenvectors'
    signs are LAPACK's (Note [Gauge of decompositions]); the gradient assumes distinct
    eigenvalues."""
    _matrices(A, "linalg.eigh")
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    xp = A.device.xp
    w, v = xp.linalg.eigh(A._data, UPLO=UPLO)
    L, V = _wrap(xp.asarray(w), A.device), _wrap(xp.asarray(v), A.device)
    if tls.grad_enabled and A._rg:
        record(LinalgEighBackward0(), (A,), (L, V), (L, V))
    return EighResult(L, V)


SVDResult = namedtuple("SVDResult", ["U", "S", "Vh"])


def _lapack_svd(A: Tensor, full_matrices: bool) -> tuple:
    xp = A.device.xp
    try:
        return xp.linalg.svd(A._data, full_matrices=full_matrices)
    except numpy.linalg.LinAlgError:
        why = ("the input matrix contained non-finite values" if not bool(xp.isfinite(A._data).all()) else
               "the input matrix is ill-conditioned or has too many repeated singular values")
        raise LinAlgError(f"linalg.svd: The algorithm failed to converge because {why}.") from None


class LinalgSvdBackward0(Node):
    """``A = U diag(S) Vh`` (torch's svd_backward, real case; full matrices cut to ``k`` first)."""

    __slots__ = ("full_matrices",)

    def backward(self, gU: Tensor | None, gS: Tensor | None, gVh: Tensor | None) -> tuple:
        U, S, Vh = self.saved_tensors()
        if gU is None and gS is None and gVh is None:
            return (None,)
        k = S.shape[-1]
        if self.full_matrices:
            cols, rows = (Ellipsis, slice(None), slice(0, k)), (Ellipsis, slice(0, k), slice(None))
            U, Vh = getitem(U, cols), getitem(Vh, rows)
            gU = getitem(gU, cols) if gU is not None else None
            gVh = getitem(gVh, rows) if gVh is not None else None
        m, n = U.shape[-2], Vh.shape[-1]
        if gU is None and gVh is None:
            return (matmul(mul(U, unsqueeze(gS, -2)), Vh),)
        S2 = mul(S, S)
        E = add(sub(unsqueeze(S2, -2), unsqueeze(S2, -1)), _eye_like(U if m <= n else Vh))
        UtgU = VtgV = None
        if gU is not None:
            UtgU = matmul(_mT(U), gU)
            UtgU = sub(UtgU, _mT(UtgU))
        if gVh is not None:
            VtgV = matmul(Vh, _mT(gVh))
            VtgV = sub(VtgV, _mT(VtgV))
        if UtgU is not None and VtgV is not None:
            gA = div(add(mul(UtgU, unsqueeze(S, -2)), mul(unsqueeze(S, -1), VtgV)), E)
        elif UtgU is not None:
            gA = mul(div(UtgU, E), unsqueeze(S, -2))
        else:
            gA = mul(unsqueeze(S, -1), div(VtgV, E))
        if gS is not None:
            gA = add(gA, _diag_embed(gS))
        if m > n and gU is not None:
            gA = matmul(U, gA)
            gUSinv = div(gU, unsqueeze(S, -2))
            gA = add(gA, sub(gUSinv, matmul(U, matmul(_mT(U), gUSinv))))
            return (matmul(gA, Vh),)
        if m < n and gVh is not None:
            gA = matmul(gA, Vh)
            SinvgVh = div(gVh, unsqueeze(S, -1))
            gA = add(gA, sub(SinvgVh, matmul(matmul(SinvgVh, _mT(Vh)), Vh)))
            return (matmul(U, gA),)
        return (matmul(U, matmul(gA, Vh)),)


@register
def linalg_svd(A: Tensor, full_matrices: bool = True) -> SVDResult:
    """``(U, S, Vh)`` with ``A = U @ diag(S) @ Vh``, singular values descending, as
    ``torch.linalg.svd`` (``full_matrices=True``: ``U`` is ``(m, m)`` and ``Vh`` ``(n, n)``).
    The vectors' signs are LAPACK's (Note [Gauge of decompositions]); the gradient assumes
    distinct, non-zero singular values where it divides by them, as torch's."""
    _matrices(A, "linalg.svd", square=False)
    xp = A.device.xp
    u, s, vh = _lapack_svd(A, full_matrices)
    U, S, Vh = (_wrap(xp.asarray(a), A.device) for a in (u, s, vh))
    if tls.grad_enabled and A._rg:
        node = LinalgSvdBackward0()
        node.full_matrices = full_matrices
        record(node, (A,), (U, S, Vh), (U, S, Vh))
    return SVDResult(U, S, Vh)


class LinalgPinvBackward0(Node):
    """The pseudo-inverse's derivative in terms of itself (torch's pinv_backward, real case)."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        A, P = self.saved_tensors()
        m, n = A.shape[-2], A.shape[-1]
        Pt, gt = _mT(P), _mT(g)
        if m <= n:
            K = matmul(gt, P)
            KPt = matmul(K, Pt)
            r = add(sub(neg(_mT(matmul(P, K))), matmul(matmul(A, P), KPt)), KPt)
            return (add(r, matmul(matmul(Pt, P), sub(gt, matmul(K, A)))),)
        K = matmul(P, gt)
        PtK = matmul(Pt, K)
        r = add(neg(_mT(matmul(K, P))), matmul(matmul(sub(gt, matmul(A, K)), P), Pt))
        return (sub(add(r, PtK), matmul(matmul(PtK, P), A)),)


@register
def linalg_pinv(A: Tensor, *, atol: Any = None, rtol: Any = None, hermitian: bool = False) -> Tensor:
    """The Moore-Penrose pseudo-inverse, as ``torch.linalg.pinv``: singular values (absolute
    eigenvalues when ``hermitian``) below ``max(atol, rtol * largest)`` count as zero; with
    neither given, ``rtol = max(m, n) * eps``. One node, ``LinalgPinvBackward0``."""
    check_tensor(A, "linalg.pinv")
    if A.ndim < 2 or A.dtype.kind != "f":
        raise RuntimeError(f"linalg.pinv({A.dtype.name}{list(A.shape)}): expected a tensor with 2 or more dimensions "
                           f"of float, double, cfloat or cdouble types")
    xp = A.device.xp
    a = A._data
    if atol is None and rtol is None:
        rtol = max(A.shape[-2:]) * float(numpy.finfo(A.dtype).eps)
    atol, rtol = float(atol or 0.0), float(rtol or 0.0)
    if hermitian:
        w, v = xp.linalg.eigh(a)
        s = xp.abs(w)
        keep = s > xp.maximum(atol, rtol * s.max(axis=-1, keepdims=True))
        inv_w = xp.where(keep, 1.0 / xp.where(keep, w, 1.0), 0.0).astype(a.dtype)
        data = (v * inv_w[..., None, :]) @ xp.swapaxes(v, -1, -2)
    else:
        u, s, vh = _lapack_svd(A, False)
        top = s[..., :1] if s.shape[-1] else s
        keep = s > xp.maximum(atol, rtol * top)
        inv_s = xp.where(keep, 1.0 / xp.where(keep, s, 1.0), 0.0).astype(a.dtype)
        data = (xp.swapaxes(vh, -1, -2) * inv_s[..., None, :]) @ xp.swapaxes(u, -1, -2)
    out = _wrap(xp.ascontiguousarray(data), A.device)
    if tls.grad_enabled and A._rg:
        record(LinalgPinvBackward0(), (A,), out, (A, out))
    return out


# --- torch's top-level spellings (not in REGISTRY: compositions of the ops above) --------------

def det(A: Tensor) -> Tensor:
    """``torch.det``: :func:`linalg_det`."""
    return linalg_det(A)


def inverse(A: Tensor) -> Tensor:
    """``torch.inverse``: :func:`linalg_inv`."""
    return linalg_inv(A)


def slogdet(A: Tensor) -> SlogdetResult:
    """``torch.slogdet``: :func:`linalg_slogdet`."""
    return linalg_slogdet(A)


def logdet(A: Tensor) -> Tensor:
    """``torch.logdet``: ``log(det(A))``, NaN where the determinant is negative (torch's
    graph: a where over slogdet)."""
    sign, logabs = linalg_slogdet(A)
    return where(const(sign._data < 0, sign), const(A.device.xp.asarray(math.nan, dtype=logabs.dtype), logabs),
                 logabs)


TorchSVDResult = namedtuple("TorchSVDResult", ["U", "S", "V"])


def svd(A: Tensor, some: bool = True, compute_uv: bool = True) -> TorchSVDResult:
    """``torch.svd``: ``(U, S, V)`` with ``V = Vh.mT`` (not ``Vh``), reduced unless
    ``some=False``; ``compute_uv=False`` gives zero-filled ``U`` and ``V`` of shapes ``(m, m)``
    and ``(n, n)``, as torch's."""
    U, S, Vh = linalg_svd(A, full_matrices=not some)
    if not compute_uv:  # zero-filled (m, m) and (n, n), whatever ``some`` says, as torch's
        xp, (m, n) = A.device.xp, A.shape[-2:]
        return TorchSVDResult(_wrap(xp.zeros(A.shape[:-2] + (m, m), dtype=A.dtype), A.device), S,
                              _wrap(xp.zeros(A.shape[:-2] + (n, n), dtype=A.dtype), A.device))
    return TorchSVDResult(U, S, _mT(Vh))


def qr(A: Tensor, some: bool = True) -> QRResult:
    """``torch.qr`` (deprecated in torch, with its warning): :func:`linalg_qr` with mode
    ``"reduced"`` (``some=True``) or ``"complete"``."""
    warnings.warn("torch.qr is deprecated in favor of torch.linalg.qr and will be removed in a future PyTorch "
                  "release.\nThe boolean parameter 'some' has been replaced with a string parameter 'mode'.\n"
                  "Q, R = torch.qr(A, some)\nshould be replaced with\n"
                  "Q, R = torch.linalg.qr(A, 'reduced' if some else 'complete')", UserWarning, stacklevel=2)
    return linalg_qr(A, "reduced" if some else "complete")


def cholesky(A: Tensor, upper: bool = False) -> Tensor:
    """``torch.cholesky`` (deprecated in torch, with its warning): the factor, recording torch's
    ``CholeskyBackward0``."""
    warnings.warn("torch.cholesky is deprecated in favor of torch.linalg.cholesky and will be removed in a future "
                  "PyTorch release.\nL = torch.cholesky(A)\nshould be replaced with\nL = torch.linalg.cholesky(A)\n"
                  "and\nU = torch.cholesky(A, upper=True)\nshould be replaced with\n"
                  "U = torch.linalg.cholesky(A).mH\nThis transform will produce equivalent results for all valid "
                  "(symmetric positive definite) inputs.", UserWarning, stacklevel=2)
    return _cholesky(A, upper, "linalg.cholesky", CholeskyBackward0)


def pinverse(A: Tensor, rcond: float = 1e-15) -> Tensor:
    """``torch.pinverse``: :func:`linalg_pinv` with ``rtol=rcond``."""
    return linalg_pinv(A, rtol=rcond)
