"""Reductions: sum, mean. See Note [Op definitions] in _core.py."""
from __future__ import annotations

from typing import Any

from engine.tensor import Tensor, _wrap

from ._core import Node, check_tensor, normalize_dims, record, register, tls


def keepdim_shape(shape: tuple, dims: tuple) -> tuple:
    return tuple(1 if i in dims else s for i, s in enumerate(shape))


class SumBackward0(Node):
    __slots__ = ("in_shape", "dims", "keepdim")

    def backward(self, g: Tensor) -> tuple:
        from .shape import expand, reshape

        if not self.keepdim:
            g = reshape(g, keepdim_shape(self.in_shape, self.dims))
        return (expand(g, self.in_shape),)


@register
def sum(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:  # noqa: A001 - torch's name
    """Sum over ``dim`` (an int, a tuple, or None for all dims)."""
    check_tensor(x, "sum")
    dims = normalize_dims(dim, x.ndim, "sum")
    data = x.data.sum(axis=dims, keepdims=keepdim)
    out = _wrap(x.device.xp.asarray(data, dtype=x.dtype) if x.dtype.kind in "fc" else x.device.xp.asarray(data), x.device)
    if tls.grad_enabled and x._rg:
        node = SumBackward0()
        node.in_shape, node.dims, node.keepdim = x.shape, dims, keepdim
        record(node, (x,), out)
    return out


@register
def mean(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Mean over ``dim``; floating point tensors only, like torch."""
    check_tensor(x, "mean")
    if x.dtype.kind not in "fc":
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be floating point, but got {x.dtype}")
    dims = normalize_dims(dim, x.ndim, "mean")
    n = 1
    for d in dims:
        n *= x.shape[d]
    from .elementwise import div

    return div(sum(x, dims, keepdim), float(n) if n else float("nan"))
