"""Moving between devices and dtypes, and copying: ``to``, ``clone``. See Note [Op definitions]."""
from __future__ import annotations

from typing import Any

from ..engine.tensor import Tensor, _wrap, to_device, to_dtype

from ._core import Node, check_tensor, record_unary, register, tls


def _transfer(data: Any, src: Any, dst: Any) -> Any:
    if src.xp is dst.xp and src.type != "cuda":
        return data.copy()  # numpy -> numpy (cpu, virtual): a copy, so devices never alias
    return dst.asarray(src.to_host(data))


class ToCopyBackward0(Node):
    __slots__ = ("src_device", "src_dtype")

    def backward(self, g: Tensor) -> tuple:
        return (to(g, self.src_device, self.src_dtype),)


@register
def to(t: Tensor, device: Any = None, dtype: Any = None) -> Tensor:
    """``t`` on ``device`` and/or as ``dtype``; returns ``t`` itself when nothing changes.
    The gradient flows back to ``t``'s device and dtype; a conversion to an integer or bool
    dtype gives a tensor that does not require grad, as in torch."""
    check_tensor(t, "to")
    dev = t.device if device is None else to_device(device)
    dt = t.dtype if dtype is None else to_dtype(dtype)
    if dev is t.device and dt == t.dtype:
        return t
    data = t._data if dev is t.device else _transfer(t._data, t.device, dev)
    if dt != data.dtype:
        data = data.astype(dt)
    out = _wrap(data, dev)
    if tls.grad_enabled and t._rg and dt.kind in "fc":  # an integer or bool result is outside the graph, as in torch
        node = ToCopyBackward0()
        node.src_device, node.src_dtype = t.device, t.dtype
        record_unary(node, t, out)
    return out


class CloneBackward0(Node):
    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        return (g,)


@register
def clone(t: Tensor) -> Tensor:
    """A copy of ``t`` with its own memory; gradients flow through unchanged."""
    check_tensor(t, "clone")
    out = _wrap(t._data.copy(), t.device)
    if tls.grad_enabled and t._rg:
        record_unary(CloneBackward0(), t, out)
    return out
