"""threadgrad's differentiable operators, in functional form with torch's signatures.

Every op broadcasts like numpy, promotes dtypes like torch, refuses operands on different
devices, and is differentiable twice. ``REGISTRY`` maps each public op name to its function;
docs/ops.md lists them.

>>> from threadgrad import engine, ops
>>> x = engine.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
>>> ops.sum(ops.mul(x, x), dim=1).tolist()
[5.0, 25.0]
"""
from __future__ import annotations


from ._core import REGISTRY, register
from .activation import gelu, log_softmax, relu, sigmoid, softmax, softplus
from .device import clone, to
from .elementwise import (abs, add, clamp, cos, div, erf, exp, log, maximum, minimum, mul, neg, pow, sin, sqrt,
                          sub, tanh, where)
from .index import gather, getitem, index_put
from .linalg import bmm, dot, matmul, mv, outer
# linear algebra (issue 31): products, einsum
from .linalg import addmm, addmv, baddbmm, kron, tensordot, vdot
from .einsum import einsum
from .decomp import (linalg_cholesky, linalg_det, linalg_eigh, linalg_inv, linalg_pinv, linalg_qr, linalg_slogdet,
                     linalg_solve, linalg_svd)
from .matrix_norms import linalg_matrix_norm, linalg_norm, linalg_vector_norm
from .decomp import cholesky, det, inverse, logdet, pinverse, qr, slogdet, svd
from .math import (acos, acosh, addcdiv, addcmul, all, allclose, amax, amin, any, asin, asinh, atan, atan2, atanh, bitwise_and, bitwise_left_shift, bitwise_not, bitwise_or,
                   bitwise_right_shift, bitwise_xor, ceil, clamp_max, clamp_min, cosh, count_nonzero, cumsum, equal,
                   exp2, fmod, hypot, lerp, expm1, floor, floor_divide, frac, isfinite, isinf,
                   isclose, isnan, log10, log1p, log2, logical_and, logical_not, logical_or, logical_xor, reciprocal, remainder,
                   round, rsqrt, sign, sinh, sort, square, trunc)
from .math import argsort
from .nn import conv2d, cross_entropy, dropout, layer_norm, linear, mse_loss, one_hot
from .reduce import argmax, argmin, logsumexp, max, mean, min, sum
from .stats import norm, std, var
from .scan import aminmax, cummax, cummin, cumprod, logcumsumexp, nanmean, nansum, prod, std_mean, var_mean
from .order import bincount, histc, kthvalue, median, mode, nanmedian, topk, unique
from .shape import cat, expand, permute, reshape, split, squeeze, stack, transpose, unsqueeze
from . import _methods  # noqa: F401 - binds Tensor's operators and methods
from ._methods import flatten
from . import inplace  # noqa: F401 - binds Tensor's in-place methods
from . import views  # noqa: F401 - binds engine._state.refresh_view
# indexing and shape ops of issue 31 (item 4): scatter.py and rearrange.py; nonzero and argwhere give
# indices (not in REGISTRY, nor in __all__: threadgrad/__init__.py exports them)
from .index import argwhere, nonzero
from .scatter import (index_add, index_copy, index_fill, masked_fill, masked_scatter, masked_select, scatter,
                      scatter_add, scatter_reduce, take, take_along_dim)
from .rearrange import (block_diag, broadcast_tensors, broadcast_to, cartesian_prod, diag, diag_embed, diagonal, dsplit,
                        flip, fliplr, flipud, hsplit, meshgrid, moveaxis, movedim, repeat_interleave, roll, rot90,
                        swapaxes, swapdims, tensor_split, tile, trace, vsplit)

# Not differentiable (they return indices or counts), so not in REGISTRY: argmax, argmin, one_hot, unique, histc,
# bincount; flatten is reshape.
__all__ = sorted(REGISTRY) + ["unique", "histc", "bincount"] + ["argmax", "argmin", "one_hot", "flatten", "isnan",
                             "isinf", "isfinite", "logical_and",
                             "logical_or", "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
                             "bitwise_not", "bitwise_left_shift", "bitwise_right_shift", "any", "all", "count_nonzero",
                             "isclose", "allclose", "equal", "argsort", "REGISTRY", "register"]
# linear algebra (issue 31): torch's top-level spellings; the linalg_* ops are tg.linalg's (threadgrad/linalg.py)
__all__ = [n for n in __all__ if not n.startswith("linalg_")] + ["cholesky", "det", "inverse", "logdet", "pinverse",
                                                                 "qr", "slogdet", "svd"]
