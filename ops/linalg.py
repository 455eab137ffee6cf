"""Matrix products. See Note [Op definitions] in _core.py."""
from __future__ import annotations

from typing import Any

import numpy

from ..engine.tensor import Tensor, _wrap

from ._core import ARRAYS, OPS, Node, binary_operands, fit, normalize_dim, record, register, tls
from .elementwise import mul
from .shape import UnsafeViewBackward0, ViewBackward0, _reshape, permute, reshape, transpose, unsqueeze


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


# --- vdot, the add-products (addmm, addmv, baddbmm), tensordot, kron ---------------------------

class VdotBackward0(Node):
    """``vdot(a, b)`` of two real 1-D tensors: each gradient is ``g`` times the other operand."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        a, b = self.saved_tensors()
        ea, eb = self.next_edges
        return (mul(g, b) if ea[0] is not None else None, mul(g, a) if eb[0] is not None else None)


@register
def vdot(a: Tensor, b: Tensor) -> Tensor:
    """The inner product of two 1-D tensors, conjugating the first, as ``torch.vdot`` (real
    tensors: ``dot``), recording ``VdotBackward0``.

    >>> import threadgrad as tg
    >>> tg.vdot(tg.tensor([1.0, 2.0]), tg.tensor([3.0, 4.0])).item()
    11.0
    """
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)) or a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {getattr(a, 'ndim', '?')}D and "
                           f"{getattr(b, 'ndim', '?')}D tensors")
    a, b = binary_operands(a, b, "vdot", elementwise=False)
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{a.shape[0]}] and src [{b.shape[0]}] to have "
                           f"the same number of elements, but got {a.shape[0]} and {b.shape[0]} elements respectively")
    out = _wrap(a.device.xp.asarray(a.device.xp.vdot(a._data, b._data)), a.device)
    if tls.grad_enabled and (a._rg or b._rg):
        record(VdotBackward0(), (a, b), out, (a if b._rg else None, b if a._rg else None))
    return out


class AddmmBackward0(Node):
    """``beta * input + alpha * (a @ b)`` (addmm, addmv, baddbmm): input's gradient is
    ``beta * g`` summed to its shape (zeros times ``g`` when beta is 0, as torch's
    ``maybe_multiply``), the factors' ``alpha`` times matmul's."""

    __slots__ = ("beta", "alpha", "in_shape", "in_dtype", "a_shape", "a_dtype", "b_shape", "b_dtype")

    def backward(self, g: Tensor) -> tuple:
        a, b = self.saved_tensors()
        ei, ea, eb = self.next_edges
        gi = ga = gb = None
        if ei[0] is not None:
            gi = fit(g if self.beta == 1 else mul(g, self.beta), self.in_shape, self.in_dtype)
        if ea[0] is not None or eb[0] is not None:
            gs = g if self.alpha == 1 else mul(g, self.alpha)
            g2 = unsqueeze(gs, -1) if len(self.b_shape) == 1 else gs  # addmv: (n,) -> (n, 1)
            if ea[0] is not None:
                b2 = unsqueeze(b, -1) if b.ndim == 1 else b
                ga = fit(matmul(g2, _mT(b2)), self.a_shape, self.a_dtype)
            if eb[0] is not None:
                gb = fit(matmul(_mT(a), g2), self.b_shape[:1] + (1,) if len(self.b_shape) == 1 else self.b_shape,
                         self.b_dtype)
                if len(self.b_shape) == 1:
                    gb = reshape(gb, self.b_shape)
        return (gi, ga, gb)


class AddmvBackward0(AddmmBackward0):
    __slots__ = ()


class BaddbmmBackward0(AddmmBackward0):
    __slots__ = ()


def _expand_error(shape: tuple, target: tuple) -> RuntimeError | None:
    """torch's message when ``shape`` does not expand to ``target`` (None when it does)."""
    if len(shape) > len(target):
        return RuntimeError(f"The expanded size of the tensor ({len(target)}) must be greater or equal to the number "
                            f"of dimensions in the tensor ({len(shape)})")
    for i in range(1, len(shape) + 1):
        if shape[-i] != 1 and shape[-i] != target[-i]:
            return RuntimeError(f"The expanded size of the tensor ({target[-i]}) must match the existing size "
                                f"({shape[-i]}) at non-singleton dimension {len(target) - i}.  Target sizes: "
                                f"{list(target)}.  Tensor sizes: {list(shape)}")
    return None


def _add_product(name: str, node: AddmmBackward0, input: Any, a: Tensor, b: Tensor, beta: Any,  # noqa: A002
                 alpha: Any) -> Tensor:
    """``beta * input + alpha * (a @ b)`` with ``input`` expanded to the product's shape; beta
    0 ignores input's values (NaN and inf included), as torch's (BLAS's) rule."""
    a, b = binary_operands(a, b, name, elementwise=False)
    input, a = binary_operands(input, a, name, elementwise=False)  # noqa: A001
    xp = a.device.xp
    prod = a._data @ b._data
    err = _expand_error(input.shape, prod.shape)
    if err is not None:
        raise err
    if alpha == 0:  # BLAS does not read the factors then: their NaN do not show, as torch's
        prod = xp.zeros_like(prod)
    elif alpha != 1:
        prod = prod * alpha
    if beta == 0:
        data = prod.astype(numpy.result_type(prod, input._data), copy=False)  # (prod is fresh)
    else:
        data = (input._data if beta == 1 else input._data * beta) + prod
    out = _wrap(xp.asarray(data), a.device)
    if tls.grad_enabled and (input._rg or a._rg or b._rg):
        node.beta, node.alpha = beta, alpha
        node.in_shape, node.in_dtype = input.shape, input.dtype
        node.a_shape, node.a_dtype, node.b_shape, node.b_dtype = a.shape, a.dtype, b.shape, b.dtype
        record(node, (input, a, b), out, (a if b._rg else None, b if a._rg else None))
    return out


@register
def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # noqa: A002
    """``beta * input + alpha * (mat1 @ mat2)`` for matrices, ``input`` broadcast to the
    product's shape, as ``torch.addmm`` (``beta=0``: input is not read, so its NaN do not
    show). One node, ``AddmmBackward0``.

    >>> import threadgrad as tg
    >>> tg.addmm(tg.ones(2, 2), tg.ones(2, 2), tg.ones(2, 2), beta=0.5).tolist()
    [[2.5, 2.5], [2.5, 2.5]]
    """
    for t, what in ((mat1, "mat1"), (mat2, "mat2")):
        if isinstance(t, Tensor) and t.ndim != 2:
            raise RuntimeError(f"{what} must be a matrix, got {t.ndim}-D tensor")
    if isinstance(mat1, Tensor) and isinstance(mat2, Tensor) and mat1.shape[1] != mat2.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({mat1.shape[0]}x{mat1.shape[1]} and "
                           f"{mat2.shape[0]}x{mat2.shape[1]})")
    return _add_product("addmm", AddmmBackward0(), input, mat1, mat2, beta, alpha)


@register
def addmv(input: Tensor, mat: Tensor, vec: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # noqa: A002
    """``beta * input + alpha * (mat @ vec)``, as ``torch.addmv`` (``beta=0`` ignores input's
    values). One node, ``AddmvBackward0``."""
    if not (isinstance(mat, Tensor) and isinstance(vec, Tensor)) or mat.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got {getattr(input, 'ndim', '?')}, "
                           f"{getattr(mat, 'ndim', '?')}, {getattr(vec, 'ndim', '?')}")
    n, m = mat.shape
    in_shape = getattr(input, "shape", ())
    if vec.shape[0] != m or (len(in_shape) == 1 and in_shape[0] not in (1, n)):
        raise RuntimeError(f"size mismatch, got input ({', '.join(map(str, in_shape))}), mat ({n}x{m}), "
                           f"vec ({vec.shape[0]})")
    return _add_product("addmv", AddmvBackward0(), input, mat, vec, beta, alpha)


@register
def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # noqa: A002
    """``beta * input + alpha * bmm(batch1, batch2)``, as ``torch.baddbmm`` (``beta=0``
    ignores input's values). One node, ``BaddbmmBackward0``."""
    for t, what in ((batch1, "batch1"), (batch2, "batch2")):
        if not isinstance(t, Tensor) or t.ndim != 3:
            raise RuntimeError(f"{what} must be a 3D tensor")
    if batch2.shape[0] != batch1.shape[0] or batch2.shape[1] != batch1.shape[2]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{batch1.shape[0]}, {batch1.shape[2]}] but got: [{batch2.shape[0]}, {batch2.shape[1]}].")
    return _add_product("baddbmm", BaddbmmBackward0(), input, batch1, batch2, beta, alpha)


@register
def tensordot(a: Tensor, b: Tensor, dims: Any = 2) -> Tensor:
    """Contract the last ``dims`` dims of ``a`` with the first ``dims`` of ``b`` (an int), or
    the dims listed in a pair ``([dims of a], [dims of b])``, as ``torch.tensordot``: a
    permute and a reshape of each, one ``mm``, a reshape (torch's graph: ``ViewBackward0``
    over ``MmBackward0``).

    >>> import threadgrad as tg
    >>> tg.tensordot(tg.ones(2, 3, 4), tg.ones(3, 4, 5)).shape
    (2, 5)
    """
    a, b = binary_operands(a, b, "tensordot", elementwise=False)
    if isinstance(dims, (int, numpy.integer)):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        if dims > a.ndim or dims > b.ndim:
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={dims}")
        dims_a, dims_b = list(range(-dims, 0)), list(range(dims))  # (torch's messages name a's dims so)
    else:
        dims_a, dims_b = ([d] if isinstance(d, (int, numpy.integer)) else list(d) for d in dims)
        if len(dims_a) != len(dims_b):
            raise RuntimeError("both dimension lists should have same length")
    for da, db in zip(dims_a, dims_b):
        if a.shape[da] != b.shape[db]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size {a.shape[da]} in dim {da} "
                               f"and second has size {b.shape[db]} in dim {db}")
    dims_a = [normalize_dim(d, a.ndim, "tensordot") for d in dims_a]
    dims_b = [normalize_dim(d, b.ndim, "tensordot") for d in dims_b]
    free_a = [d for d in range(a.ndim) if d not in dims_a]
    free_b = [d for d in range(b.ndim) if d not in dims_b]
    size = int(numpy.prod([a.shape[d] for d in dims_a], dtype=numpy.int64))
    out_shape = tuple(a.shape[d] for d in free_a) + tuple(b.shape[d] for d in free_b)
    a2 = reshape(permute(a, free_a + dims_a), (-1 if size else int(numpy.prod([a.shape[d] for d in free_a])), size))
    b2 = reshape(permute(b, dims_b + free_b), (size, -1 if size else int(numpy.prod([b.shape[d] for d in free_b]))))
    return reshape(matmul(a2, b2), out_shape)


@register
def kron(a: Tensor, b: Tensor) -> Tensor:
    """The Kronecker product, as ``torch.kron``: the operands padded to the same rank with
    leading 1s, ``a[i0, j0, ...] * b`` put in block ``(i0, j0, ...)``; torch's graph (a product
    of interleaved views, ``UnsafeViewBackward0`` on top).

    >>> import threadgrad as tg
    >>> tg.kron(tg.tensor([1.0, 2.0]), tg.tensor([1.0, 10.0])).tolist()
    [1.0, 10.0, 2.0, 20.0]
    """
    a, b = binary_operands(a, b, "kron", elementwise=False)
    n = max(a.ndim, b.ndim)
    sa = (1,) * (n - a.ndim) + a.shape
    sb = (1,) * (n - b.ndim) + b.shape
    # a as (a0, 1, a1, 1, ...), b as (1, b0, 1, b1, ...): their product's dims interleave
    a2 = reshape(a, tuple(s for d in sa for s in (d, 1)))
    b2 = reshape(b, tuple(s for d in sb for s in (1, d)))
    return _reshape(mul(a2, b2), tuple(x * y for x, y in zip(sa, sb)), UnsafeViewBackward0)
