"""torch.linalg's norms: ``vector_norm``, ``matrix_norm`` and ``norm`` (``tg.linalg.*``), each
composed as torch composes it, so its graph carries torch's node names. See Note [Op
definitions] in _core.py; the vector norm's node is ``ops.norm``'s (stats.py)."""
from __future__ import annotations

import math
from typing import Any

import numpy

from ..engine.tensor import Tensor

from ._core import check_tensor, normalize_dims, register
from .device import to
from .decomp import _TORCH_DTYPE_NAMES, _matrices, linalg_svd
from .math import amax, amin
from .reduce import sum as _sum
from .shape import permute, unsqueeze
from .stats import _vector_norm


@register
def linalg_vector_norm(x: Tensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, *,  # noqa: A002
                       dtype: Any = None) -> Tensor:
    """The vector ``ord``-norm over ``dim`` (None: every element), as
    ``torch.linalg.vector_norm``: ``ord`` any number, ``inf``, ``-inf`` or 0. One node,
    ``LinalgVectorNormBackward0`` (ops.norm's)."""
    check_tensor(x, "linalg.vector_norm")
    if isinstance(ord, (str, bool)) or not isinstance(ord, (int, float, numpy.number)):
        raise TypeError(f"linalg_vector_norm(): argument 'ord' (position 2) must be Number, not "
                        f"{type(ord).__name__}")
    if dtype is not None:
        x = to(x, None, dtype)
    if x.dtype.kind != "f":
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                           f"{_TORCH_DTYPE_NAMES.get(x.dtype.name, x.dtype.name)}")
    dims = normalize_dims(dim, x.ndim, "linalg.vector_norm") if dim is not None else ()
    return _vector_norm(x, float(ord), dims, keepdim)


def _svdvals(A: Tensor) -> Tensor:
    return linalg_svd(A, full_matrices=False).S


@register
def linalg_matrix_norm(A: Tensor, ord: Any = "fro", dim: Any = (-2, -1), keepdim: bool = False, *,  # noqa: A002
                       dtype: Any = None) -> Tensor:
    """The matrix norm over the two dims ``dim``, as ``torch.linalg.matrix_norm``: ``"fro"``,
    ``"nuc"`` (sum of singular values), 2 / -2 (largest / smallest singular value), 1 / -1
    (largest / smallest column sum of absolute values), ``inf`` / ``-inf`` (rows). torch's
    graph: ``fro`` a vector norm, ``nuc`` a sum over ``svd``, the others an amax/amin."""
    check_tensor(A, "linalg.matrix_norm")
    if A.ndim < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
    if dtype is not None:
        A = to(A, None, dtype)
    _matrices(A, "linalg.matrix_norm", square=False)
    dims = tuple(dim) if not isinstance(dim, int) else (dim,)
    if len(dims) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, dims))}")
    d0, d1 = (normalize_dims(d, A.ndim, "linalg.matrix_norm")[0] for d in dims)
    if d0 == d1:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({dims[0]}, {dims[1]})")
    if ord == "fro":
        return _vector_norm(A, 2.0, tuple(sorted((d0, d1))), keepdim)
    if ord == "nuc" or ord in (2, -2):
        perm = [d for d in range(A.ndim) if d not in (d0, d1)] + [d0, d1]
        s = _svdvals(permute(A, perm))
        r = _sum(s, -1) if ord == "nuc" else (amax(s, -1) if ord == 2 else amin(s, -1))
        if keepdim:  # as torch: two trailing 1s, then the dims put back (PermuteBackward0 on top)
            r = permute(unsqueeze(unsqueeze(r, -1), -1), [perm.index(d) for d in range(A.ndim)])
        return r
    if ord in (1, -1, math.inf, -math.inf):
        if ord in (math.inf, -math.inf):
            d0, d1 = d1, d0
        sums = _vector_norm(A, 1.0, (d0,), keepdim)  # the sum of |a| along d0: per column for ord 1
        if not keepdim and d0 < d1:
            d1 -= 1
        return amax(sums, d1, keepdim) if ord > 0 else amin(sums, d1, keepdim)
    raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")


@register
def linalg_norm(A: Tensor, ord: Any = None, dim: Any = None, keepdim: bool = False, *,  # noqa: A002
                dtype: Any = None) -> Tensor:
    """A vector or a matrix norm, as ``torch.linalg.norm``: with ``dim`` an int (or one dim),
    the vector norm (``ord`` default 2); with two dims, the matrix norm (``ord`` default
    ``"fro"``); without ``dim``, every element's 2-norm when ``ord`` is None, else ``A`` must
    be 1-D (vector norm) or 2-D (matrix norm)."""
    check_tensor(A, "linalg.norm")
    if dim is not None:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        if len(dims) == 1:
            return linalg_vector_norm(A, 2 if ord is None else ord, dims, keepdim, dtype=dtype)
        return linalg_matrix_norm(A, "fro" if ord is None else ord, dims, keepdim, dtype=dtype)
    if ord is None:
        return linalg_vector_norm(A, 2, None, keepdim, dtype=dtype)
    if A.ndim not in (1, 2):
        raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. "
                           f"Got {A.ndim}D.")
    if A.ndim == 1:
        return linalg_vector_norm(A, ord, None, keepdim, dtype=dtype)
    return linalg_matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
