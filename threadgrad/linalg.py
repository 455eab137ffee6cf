"""``tg.linalg``: torch.linalg's functions, with its names and signatures.

Each is an op of ``threadgrad.ops`` registered under torch's ATen name (``tg.linalg.inv`` is
``ops.linalg_inv``); ``ops/decomp.py`` and ``ops/matrix_norms.py`` hold their forward and backward.

>>> import threadgrad as tg
>>> A = tg.tensor([[4.0, 2.0], [2.0, 3.0]], requires_grad=True)
>>> tg.linalg.det(A).backward()
>>> A.grad.tolist()
[[3.0, -2.0], [-2.0, 4.0]]
"""
from __future__ import annotations

from .ops.decomp import LinAlgError
from .ops.decomp import linalg_cholesky as cholesky
from .ops.decomp import linalg_det as det
from .ops.decomp import linalg_eigh as eigh
from .ops.decomp import linalg_inv as inv
from .ops.matrix_norms import linalg_matrix_norm as matrix_norm
from .ops.matrix_norms import linalg_norm as norm
from .ops.decomp import linalg_pinv as pinv
from .ops.decomp import linalg_qr as qr
from .ops.decomp import linalg_slogdet as slogdet
from .ops.decomp import linalg_solve as solve
from .ops.decomp import linalg_svd as svd
from .ops.matrix_norms import linalg_vector_norm as vector_norm
from .ops.linalg import matmul, vdot
from .engine.tensor import Tensor


def eigvalsh(A: Tensor, UPLO: str = "L") -> Tensor:  # noqa: N803 - torch's name
    """The eigenvalues of each symmetric matrix, ascending, as ``torch.linalg.eigvalsh``
    (torch's node: ``LinalgEighBackward0``)."""
    return eigh(A, UPLO).eigenvalues


def svdvals(A: Tensor) -> Tensor:
    """The singular values, descending, as ``torch.linalg.svdvals`` (``LinalgSvdBackward0``)."""
    return svd(A, full_matrices=False).S


__all__ = ["LinAlgError", "cholesky", "det", "eigh", "eigvalsh", "inv", "matmul", "matrix_norm", "norm", "pinv", "qr",
           "slogdet", "solve", "svd", "svdvals", "vdot", "vector_norm"]
