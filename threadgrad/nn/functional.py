"""``tg.nn.functional``: torch.nn.functional's names and signatures over threadgrad's ops.

Each function takes torch's arguments in torch's order. Arguments threadgrad cannot honour
(a class ``weight`` in ``cross_entropy``, ``dilation``/``groups`` in ``conv2d`` ...) raise
NotImplementedError naming the argument, rather than being ignored.

>>> import threadgrad as tg
>>> import threadgrad.nn.functional as F
>>> logits = tg.tensor([[2.0, 0.0], [0.0, 2.0]], requires_grad=True)
>>> round(F.cross_entropy(logits, tg.tensor([0, 1])).item(), 4)
0.1269
"""
from __future__ import annotations

import warnings
from typing import Any

from .. import ops
from ..engine.tensor import Tensor
from ..ops.nn import one_hot, squared_error, warn_broadcast

__all__ = ["relu", "gelu", "sigmoid", "tanh", "softplus", "softmax", "log_softmax", "cross_entropy", "mse_loss",
           "l1_loss", "linear", "conv2d", "dropout", "one_hot"]


def _unsupported(fname: str, **given: Any) -> None:
    for name, (value, default) in given.items():
        if value is not default and (isinstance(value, Tensor) or value != default):
            shown = "a tensor" if isinstance(value, Tensor) else repr(value)
            raise NotImplementedError(f"{fname}: threadgrad does not support {name}={shown} "
                                      f"(only {name}={default!r}); see docs/porting.md")


def _inplace(input: Tensor, result: Tensor) -> Tensor:
    """torch's ``inplace=True``: the result written into ``input`` (an in-place op on it, with
    its version bump and graph rebase; a leaf that requires grad is refused, as in torch)."""
    return input.copy_(result)


def relu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002 - torch's names
    """``max(input, 0)``; see ``ops.relu``."""
    out = ops.relu(input)
    return _inplace(input, out) if inplace else out


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    """Gaussian error linear unit: the exact erf form, or ``approximate='tanh'``."""
    return ops.gelu(input, approximate)


def sigmoid(input: Tensor) -> Tensor:  # noqa: A002
    return ops.sigmoid(input)


def tanh(input: Tensor) -> Tensor:  # noqa: A002
    return ops.tanh(input)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:  # noqa: A002
    return ops.softplus(input, beta, threshold)


def _softmax_dim(name: str, ndim: int, stacklevel: int) -> int:
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X "
                  "as an argument.", stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:  # noqa: A002
    """Softmax along ``dim`` (``dtype``: convert the input first, as torch)."""
    if dim is None:
        dim = _softmax_dim("softmax", input.ndim, _stacklevel)
    if dtype is not None:
        input = ops.to(input, None, dtype)
    return ops.softmax(input, dim)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:  # noqa: A002
    """Log-softmax along ``dim`` (``dtype``: convert the input first, as torch)."""
    if dim is None:
        dim = _softmax_dim("log_softmax", input.ndim, _stacklevel)
    if dtype is not None:
        input = ops.to(input, None, dtype)
    return ops.log_softmax(input, dim)


def _legacy_reduction(fname: str, size_average: Any, reduce: Any, reduction: str) -> str:
    """torch's deprecated ``size_average``/``reduce`` pair, turned into ``reduction`` with its warning."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    ret = ("mean" if size_average else "sum") if reduce else "none"
    warnings.warn(f"size_average and reduce args will be deprecated, please use reduction='{ret}' instead.",
                  stacklevel=3)
    return ret


def cross_entropy(input: Tensor, target: Tensor, weight: Any = None, size_average: Any = None,  # noqa: A002
                  ignore_index: int = -100, reduce: Any = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of logits ``input`` against integer class indices ``target``."""
    _unsupported("cross_entropy", weight=(weight, None), label_smoothing=(label_smoothing, 0.0))
    reduction = _legacy_reduction("cross_entropy", size_average, reduce, reduction)
    return ops.cross_entropy(input, target, reduction=reduction, ignore_index=ignore_index)


def mse_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None,  # noqa: A002
             reduction: str = "mean", weight: Any = None) -> Tensor:
    """Mean squared error; warns, as torch, when ``target``'s shape differs from ``input``'s."""
    _unsupported("mse_loss", weight=(weight, None))
    reduction = _legacy_reduction("mse_loss", size_average, reduce, reduction)
    if isinstance(target, Tensor) and target.device is not input.device:
        return ops.mse_loss(input, target, reduction)  # raises the device error
    warn_broadcast(input, target, 2)
    return squared_error(input, target, reduction)


def l1_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None,  # noqa: A002
            reduction: str = "mean", weight: Any = None) -> Tensor:
    """Mean absolute error; warns, as torch, when ``target``'s shape differs from ``input``'s."""
    _unsupported("l1_loss", weight=(weight, None))
    reduction = _legacy_reduction("l1_loss", size_average, reduce, reduction)
    warn_broadcast(input, target, 2)
    loss = ops.abs(ops.sub(input, target))
    if reduction == "none":
        return loss
    if reduction not in ("mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return ops.mean(loss) if reduction == "mean" else ops.sum(loss)


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002
    """``input @ weight.T + bias``, ``weight`` of shape ``(out_features, in_features)``."""
    return ops.linear(input, weight, bias)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,  # noqa: A002
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-D cross-correlation; ``padding`` an int, a pair, ``'valid'`` or ``'same'`` (stride 1,
    odd kernels)."""
    if dilation not in (1, (1, 1), [1, 1]):
        _unsupported("conv2d", dilation=(dilation, 1))
    _unsupported("conv2d", groups=(groups, 1))
    if padding == "valid":
        padding = 0
    elif padding == "same":
        kh, kw = weight.shape[-2:]
        if stride not in (1, (1, 1), [1, 1]):
            raise ValueError("padding='same' is not supported for strided convolutions")
        if kh % 2 == 0 or kw % 2 == 0:
            raise NotImplementedError("conv2d: padding='same' with an even kernel size needs asymmetric padding, "
                                      "which threadgrad does not support")
        padding = (kh // 2, kw // 2)
    elif isinstance(padding, str):
        raise ValueError(f"Invalid padding string '{padding}', should be one of {{'valid', 'same'}}")
    return ops.conv2d(input, weight, bias, stride, padding)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)`` when ``training``."""
    out = ops.dropout(input, p, training)
    return _inplace(input, out) if inplace and out is not input else out
