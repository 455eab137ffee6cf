"""Matrix products. See Note [Op definitions] in _core.py."""
from __future__ import annotations

from typing import Any

import numpy

from ..engine.tensor import Tensor, _wrap

from ._core import ARRAYS, OPS, Node, binary_operands, fit, record, register, tls
from .elementwise import mul
from .shape import ViewBackward0, reshape, transpose, unsqueeze


def _mT(t: Tensor) -> Tensor:
    return transpose(t, -1, -2)


class MmBackward0(Node):
    """matmul of two tensors with at least 2 dims each (batch dims broadcast)."""

    __slots__ = ("a_shape", "a_dtype", "b_shape", "b_dtype")

    def backward(self, g: Tensor) -> tuple:
        ea, eb = self.next_edges
        # Arrays against ops, measured on (64, 784) @ (784, 512) float32: 597 -> 587 us; on
        # (4, 8) @ (8, 6), wrappers only: 8.9 -> 3.8 us
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        a, b = F.saved(self)
        return (F.fit(F.matmul(g, F.transpose(b, -1, -2)), self.a_shape, self.a_dtype, dev) if ea[0] is not None else None,
                F.fit(F.matmul(F.transpose(a, -1, -2), g), self.b_shape, self.b_dtype, dev) if eb[0] is not None else None)


class MatmulBackward0(MmBackward0):
    """matmul where an operand is 1-D: lifted to 2-D, then as MmBackward0."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        a, b = self.saved_tensors()  # a is None when b needs no gradient, and b when a needs none
        a2_shape = (1,) + self.a_shape if len(self.a_shape) == 1 else self.a_shape
        b2_shape = self.b_shape + (1,) if len(self.b_shape) == 1 else self.b_shape
        batch = numpy.broadcast_shapes(a2_shape[:-2], b2_shape[:-2])
        g2 = reshape(g, batch + (a2_shape[-2], b2_shape[-1]))  # g with the lifted dims put back
        ea, eb = self.next_edges
        ga = gb = None
        if ea[0] is not None:
            b2 = unsqueeze(b, -1) if b.ndim == 1 else b
            ga = fit(matmul(g2, _mT(b2)), a2_shape, self.a_dtype)  # batch dims summed away
            if a2_shape != self.a_shape:
                ga = reshape(ga, self.a_shape)
        if eb[0] is not None:
            a2 = unsqueeze(a, 0) if a.ndim == 1 else a
            gb = fit(matmul(_mT(a2), g2), b2_shape, self.b_dtype)
            if b2_shape != self.b_shape:
                gb = reshape(gb, self.b_shape)
        return (ga, gb)


class DotBackward0(MatmulBackward0):
    """matmul of two 1-D tensors: torch's node name for it (``torch.dot``)."""

    __slots__ = ()


class MvBackward0(MatmulBackward0):
    """matmul of a matrix and a 1-D tensor: torch's node name for it (``torch.mv``)."""

    __slots__ = ()


def _matmul_node(a_ndim: int, b_ndim: int) -> Node:
    """The node of ``a @ b``, named as torch's where torch records one node: ``MmBackward0``
    (and, for batched operands, threadgrad's one node where torch wraps a bmm in reshapes:
    docs/parity.md), ``DotBackward0``, ``MvBackward0``; ``MatmulBackward0`` for a vector and a
    batch of matrices (a vector times a matrix is torch's three nodes: :func:`matmul`)."""
    if a_ndim >= 2 and b_ndim >= 2:
        return MmBackward0()
    if a_ndim == 1 and b_ndim == 1:
        return DotBackward0()
    if a_ndim == 2 and b_ndim == 1:
        return MvBackward0()
    return MatmulBackward0()


@register
def matmul(a: Any, b: Any) -> Tensor:
    """Matrix product with numpy's ``@`` rules (1-D operands, broadcast batch dims)."""
    a, b = binary_operands(a, b, "matmul", elementwise=False)
    if a.ndim == 1 and b.ndim == 2 and a.shape[0] == b.shape[0]:
        # A vector times a matrix is torch's three nodes: unsqueeze, mm, an in-place squeeze_
        # (its result is no view), so a node hook sees the (1, n) gradient (issue 33, item 5).
        lifted = _matmul(unsqueeze(a, 0), b, "matmul", None)
        out = _wrap(lifted._data.reshape(b.shape[1:]), lifted.device)
        if lifted._rg and tls.grad_enabled:
            node = SqueezeBackward4()
            node.in_shape = lifted.shape
            record(node, (lifted,), out)
        return out
    return _matmul(a, b, "matmul", None)


class SqueezeBackward4(ViewBackward0):
    """torch's node of ``squeeze_(dim)``, the last step of a vector times a matrix."""

    __slots__ = ()


def _matmul(a: Any, b: Any, name: str, node_cls: type | None) -> Tensor:
    """matmul, recording ``node_cls`` (bmm's BmmBackward0) or the node torch picks by the ranks."""
    a, b = binary_operands(a, b, name, elementwise=False)
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"{name}: both arguments need at least 1 dimension, got shapes {list(a.shape)} and "
                           f"{list(b.shape)}")
    try:
        data = a._data @ b._data
    except ValueError:
        raise RuntimeError(
            f"{name}: shapes {list(a.shape)} and {list(b.shape)} cannot be multiplied "
            f"(inner dims {a.shape[-1]} and {b.shape[-2] if b.ndim > 1 else b.shape[0]} differ)"
        ) from None
    out = _wrap(a.device.xp.asarray(data), a.device)
    if tls.grad_enabled and (a._rg or b._rg):
        node = node_cls() if node_cls is not None else _matmul_node(a.ndim, b.ndim)
        node.a_shape, node.a_dtype, node.b_shape, node.b_dtype = a.shape, a.dtype, b.shape, b.dtype
        record(node, (a, b), out, (a if b._rg else None, b if a._rg else None))
    return out


class BmmBackward0(MmBackward0):
    """bmm: the batched product's node under torch's name."""

    __slots__ = ()


@register
def bmm(a: Tensor, b: Tensor) -> Tensor:
    """The product of two batches of matrices, ``(B, n, m) @ (B, m, p)``, as ``torch.bmm`` (no
    broadcasting)."""
    for t, what in ((a, "batch1"), (b, "batch2")):
        if not isinstance(t, Tensor) or t.ndim != 3:
            raise RuntimeError(f"{what} must be a 3D tensor")
    if b.shape[0] != a.shape[0] or b.shape[1] != a.shape[2]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{a.shape[0]}, {a.shape[2]}] but got: [{b.shape[0]}, {b.shape[1]}].")
    return _matmul(a, b, "bmm", BmmBackward0)


@register
def dot(a: Tensor, b: Tensor) -> Tensor:
    """The inner product of two 1-D tensors, as ``torch.dot``."""
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)) or a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {getattr(a, 'ndim', '?')}D and "
                           f"{getattr(b, 'ndim', '?')}D tensors")
    return _matmul(a, b, "dot", None)


@register
def mv(a: Tensor, v: Tensor) -> Tensor:
    """A matrix times a vector, as ``torch.mv``."""
    if not (isinstance(a, Tensor) and isinstance(v, Tensor)) or a.ndim != 2 or v.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {getattr(a, 'ndim', '?')}, "
                           f"{getattr(v, 'ndim', '?')}")
    return _matmul(a, v, "mv", None)


@register
def outer(a: Tensor, b: Tensor) -> Tensor:
    """The outer product of two 1-D tensors, ``a[:, None] * b``, as ``torch.outer`` (its nodes:
    a view of ``a``, then a multiplication)."""
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)) or a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"outer: expected 1-D tensors, got {getattr(a, 'ndim', '?')}-D and "
                           f"{getattr(b, 'ndim', '?')}-D")
    return mul(reshape(a, (a.shape[0], 1)), b)


# The formula namespaces' names for these ops: See Note [First-order formulas] in _core.py.
OPS.matmul = matmul
