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

import math
import warnings
from typing import Any

import numpy

from .. import ops
from ..engine.creation import random_array
from ..engine.grad_mode import no_grad as _no_grad
from ..engine.tensor import Tensor, _wrap
from ..engine.versions import bump as _bump
from ..ops.nn import _col2im, _im2col, one_hot, squared_error, warn_broadcast

__all__ = ["relu", "gelu", "sigmoid", "tanh", "softplus", "softmax", "log_softmax", "cross_entropy", "mse_loss",
           "l1_loss", "linear", "conv1d", "conv2d", "conv_transpose2d", "dropout", "one_hot", "layer_norm",
           # composites of existing ops (no op of their own; see Note [Composite functionals])
           "bilinear", "scaled_dot_product_attention", "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool2d", "batch_norm", "group_norm",
           "dropout2d", "normalize", "cosine_similarity", "pairwise_distance", "pad", "cosine_embedding_loss",
           "triplet_margin_loss", "interpolate", "unfold", "fold", "embedding", "nll_loss", "silu", "leaky_relu", "elu", "hardtanh", "relu6",
           "mish", "logsigmoid", "binary_cross_entropy", "binary_cross_entropy_with_logits", "smooth_l1_loss",
           "huber_loss", "kl_div"]


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
    """Cross entropy of logits ``input`` (classes on dim 1, or dim 0 for an unbatched ``(C,)``)
    against class indices or class probabilities ``target``, as ``torch.nn.functional.cross_entropy``:
    class ``weight``, ``ignore_index`` (indices), ``label_smoothing`` (the loss mixed with the
    weighted mean of ``-log_softmax`` over the classes, torch's normalization), ``reduction``.
    Plain class indices take the fused op (one node); the rest is log_softmax and nll_loss."""
    reduction = _legacy_reduction("cross_entropy", size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    probabilities = isinstance(target, Tensor) and target.dtype.kind == "f"
    if weight is None and label_smoothing == 0.0 and not probabilities:
        return ops.cross_entropy(input, target, reduction=reduction, ignore_index=ignore_index)
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    class_dim = 0 if input.ndim == 1 else 1
    n_classes = input.shape[class_dim]
    lsm = ops.log_softmax(input, class_dim)
    w = None
    if weight is not None:
        if tuple(weight.shape) != (n_classes,):
            raise RuntimeError(f"weight tensor should be defined either for all {n_classes} classes or no classes "
                               f"but got weight tensor of shape: {list(weight.shape)}")
        w = ops.reshape(weight, (n_classes,) + (1,) * (input.ndim - class_dim - 1))
    if probabilities:
        if tuple(target.shape) != tuple(input.shape):
            raise RuntimeError(f"Expected target size {list(input.shape)}, got {list(target.shape)}")
        if label_smoothing > 0.0:
            target = ops.add(ops.mul(target, 1.0 - label_smoothing), label_smoothing / n_classes)
        terms = ops.mul(lsm, target) if w is None else ops.mul(ops.mul(lsm, target), w)
        if reduction == "none":
            return ops.neg(ops.sum(terms, class_dim))
        total = ops.neg(ops.sum(terms))
        return total if reduction == "sum" else ops.div(total, float(input.numel() // n_classes))
    nll = nll_loss(lsm, target, weight, ignore_index=ignore_index, reduction=reduction)
    if label_smoothing == 0.0:
        return nll
    smooth = ops.neg(ops.sum(lsm if w is None else ops.mul(lsm, w), class_dim))
    keep = target != ignore_index
    smooth = ops.where(keep, smooth, 0.0)
    if reduction == "sum":
        smooth = ops.sum(smooth)
    elif reduction == "mean":
        if weight is None:
            smooth = ops.div(ops.sum(smooth), ops.to(ops.sum(keep), None, input.dtype))
        else:
            picked = ops.where(keep, ops.getitem(weight, ops.where(keep, target, 0)), 0.0)
            smooth = ops.div(ops.sum(smooth), ops.sum(picked))
    return ops.add(ops.mul(nll, 1.0 - label_smoothing), ops.mul(smooth, label_smoothing / n_classes))


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
    """``input @ weight.T + bias``, ``weight`` of shape ``(out_features, in_features)``; a
    feature count that does not fit raises torch's RuntimeError naming both shapes."""
    try:
        return ops.linear(input, weight, bias)
    except RuntimeError:
        # torch's words for the common mistake (checked only after the op refused, so the
        # call costs nothing more when shapes fit)
        if (isinstance(input, Tensor) and isinstance(weight, Tensor) and input.ndim >= 2 and weight.ndim == 2
                and input.shape[-1] != weight.shape[1]):
            rows = 1
            for n in input.shape[:-1]:
                rows *= n
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{input.shape[-1]} and "
                               f"{weight.shape[1]}x{weight.shape[0]})") from None
        raise


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,  # noqa: A002
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-D cross-correlation, as ``torch.nn.functional.conv2d``: ``padding`` an int, a pair,
    ``'valid'`` or ``'same'`` (stride 1, odd effective kernels); ``dilation``; ``groups``."""
    if padding == "valid":
        padding = 0
    elif padding == "same":
        kh, kw = weight.shape[-2:]
        dh, dw = (dilation, dilation) if isinstance(dilation, int) else tuple(dilation)
        if stride not in (1, (1, 1), [1, 1]):
            raise ValueError("padding='same' is not supported for strided convolutions")
        if (kh - 1) * dh % 2 or (kw - 1) * dw % 2:
            raise NotImplementedError("conv2d: padding='same' with an even effective kernel size needs asymmetric "
                                      "padding, which threadgrad does not support")
        padding = ((kh - 1) * dh // 2, (kw - 1) * dw // 2)
    elif isinstance(padding, str):
        raise ValueError(f"Invalid padding string '{padding}', should be one of {{'valid', 'same'}}")
    return ops.conv2d(input, weight, bias, stride, padding, dilation, groups)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)`` when ``training``."""
    out = ops.dropout(input, p, training)
    return _inplace(input, out) if inplace and out is not input else out


# Note [Composite functionals]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The functions below have no op (and no node) of their own: each is a few existing ops, so
# its backward, double backward and device rules come from those ops. They compute torch's
# values; where torch has a fused kernel (nll_loss, embedding, scaled_dot_product_attention)
# the graph here has more nodes. An op of its own for each, with its registry samples, is
# issue 30's and 32's later work (ops/ is being restructured first).

def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``y[..., k] = input1 @ weight[k] @ input2 + bias[k]``, ``weight`` of shape
    ``(out, in1, in2)``, as ``torch.nn.functional.bilinear``."""
    out_f, in1, in2 = weight.shape
    if input1.shape[-1] != in1:
        raise RuntimeError(f"bilinear(): input1 size does not match weight size: got {input1.shape[-1]} but "
                           f"expected {in1}")
    if input2.shape[-1] != in2:
        raise RuntimeError(f"bilinear(): input2 size does not match weight size: got {input2.shape[-1]} but "
                           f"expected {in2}")
    lead = input1.shape[:-1]
    x1 = ops.reshape(input1, (-1, in1))
    x2 = ops.reshape(input2, (-1, in2))
    w = ops.reshape(ops.permute(weight, (1, 0, 2)), (in1, out_f * in2))
    t = ops.reshape(ops.matmul(x1, w), (-1, out_f, in2))  # (N, out, in2)
    y = ops.sum(ops.mul(t, ops.unsqueeze(x2, 1)), dim=2)
    if bias is not None:
        y = ops.add(y, bias)
    return ops.reshape(y, tuple(lead) + (out_f,))


def layer_norm(input: Tensor, normalized_shape: Any, weight: Tensor | None = None,  # noqa: A002
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalize over the last ``len(normalized_shape)`` dims (biased variance), then scale by
    ``weight`` and shift by ``bias``, as ``torch.nn.functional.layer_norm``."""
    return ops.layer_norm(input, normalized_shape, weight, bias, eps)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """``softmax(query @ key^T * scale + bias) @ value`` over the last two dims, as torch 2.13's
    ``F.scaled_dot_product_attention``: ``scale`` defaults to ``1/sqrt(E)``; ``is_causal``
    lets position i attend to positions j <= i (top-left aligned when L != S); a boolean
    ``attn_mask`` says where attention may go (True: allowed; with ``is_causal`` both must
    allow), a float one is added to the scores; a row with nowhere to attend gives zeros (and
    zero gradients), as torch's; dropout with probability ``dropout_p`` on the weights whenever
    ``dropout_p > 0`` (torch applies it regardless of a module's training flag: pass 0 in
    eval, as nanoGPT does); ``enable_gqa`` repeats each key/value head for its group of query
    heads. A composition of ops (Note [Composite functionals])."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"scaled_dot_product_attention(): argument '{name}' must be Tensor, not {type(t).__name__}")
    L, S, E = query.shape[-2], key.shape[-2], query.shape[-1]
    if enable_gqa and query.ndim >= 3 and key.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        if key.shape[-3] == 0 or query.shape[-3] % key.shape[-3] or value.shape[-3] != key.shape[-3]:
            raise RuntimeError(f"scaled_dot_product_attention: with enable_gqa, the query's {query.shape[-3]} heads "
                               f"must be a multiple of the key's and value's ({key.shape[-3]}, {value.shape[-3]})")
        groups = query.shape[-3] // key.shape[-3]
        key, value = _repeat_heads(key, groups), _repeat_heads(value, groups)
    factor = 1.0 / math.sqrt(E) if scale is None else scale
    scores = ops.mul(ops.matmul(query, ops.transpose(key, -2, -1)), factor)
    dev, xp = query.device, query.device.xp
    allowed = xp.tril(xp.ones((L, S), dtype=bool)) if is_causal else None
    if attn_mask is not None:
        if attn_mask.dtype == bool:
            allowed = attn_mask._data if allowed is None else allowed & attn_mask._data
        else:
            scores = ops.add(scores, attn_mask)
    if allowed is not None:
        scores = ops.where(_constant(allowed, dev), scores, -math.inf)
    if attn_mask is not None:
        # A row with nowhere to attend (all -inf) would be 0/0 in softmax; torch gives zeros.
        # Its scores are replaced by zeros (a uniform softmax, finite) and its weights zeroed.
        # (Only an explicit mask can empty a row: a causal row always keeps position 0.)
        dead = scores._data.max(axis=-1, keepdims=True) == -math.inf
        scores = ops.where(_constant(dead, dev), 0.0, scores)
        weights = ops.mul(ops.softmax(scores, -1), _constant(~dead, dev))
    else:
        weights = ops.softmax(scores, -1)
    if dropout_p > 0.0:
        weights = ops.dropout(weights, dropout_p, True)
    return ops.matmul(weights, value)


def _constant(array: Any, device: Any) -> Tensor:
    """A constant tensor (no gradient) over ``array``, which already lives on ``device``."""
    return _wrap(array, device)


def _repeat_heads(t: Tensor, groups: int) -> Tensor:
    """``t.repeat_interleave(groups, dim=-3)``: each head ``groups`` times, in place."""
    shape = tuple(t.shape)
    lead, heads = shape[:-3], shape[-3]
    expanded = ops.expand(ops.unsqueeze(t, -3), lead + (heads, groups) + shape[-2:])
    return ops.reshape(expanded, lead + (heads * groups,) + shape[-2:])


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,  # noqa: A002
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """The transposed 2-D convolution (the gradient of ``conv2d`` with respect to its input), as
    ``torch.nn.functional.conv_transpose2d``: ``weight`` ``(C_in, C_out, kh, kw)``, output
    ``(H - 1) * stride - 2 * padding + kh + output_padding``. Each input pixel's ``C_out*kh*kw``
    contributions in one matrix product, then summed into the image (ops/nn.py's col2im, the
    adjoint of conv2d's patch columns). No ``groups`` or ``dilation``."""
    _unsupported("conv_transpose2d", groups=(groups, 1))
    if dilation not in (1, (1, 1), [1, 1]):
        _unsupported("conv_transpose2d", dilation=(dilation, 1))
    st, pd, op = (tuple((v, v) if isinstance(v, int) else v) for v in (stride, padding, output_padding))
    x, unbatched = (ops.unsqueeze(input, 0), True) if input.ndim == 3 else (input, False)
    if x.ndim != 4 or weight.ndim != 4 or x.shape[1] != weight.shape[0]:
        raise RuntimeError(f"conv_transpose2d: expected input (N, C_in, H, W) and weight (C_in, C_out, kh, kw) with "
                           f"equal C_in, got input {list(input.shape)} and weight {list(weight.shape)}")
    if op[0] >= st[0] or op[1] >= st[1]:
        raise RuntimeError("output padding must be smaller than either stride or dilation, but got "
                           f"output_padding_height: {op[0]} output_padding_width: {op[1]} stride_height: {st[0]} "
                           f"stride_width: {st[1]} dilation_height: 1 dilation_width: 1")
    n, c_in, h, w = x.shape
    c_out, kh, kw = weight.shape[1], weight.shape[2], weight.shape[3]
    oh, ow = (h - 1) * st[0] - 2 * pd[0] + kh + op[0], (w - 1) * st[1] - 2 * pd[1] + kw + op[1]
    if oh < 1 or ow < 1:
        raise RuntimeError(f"conv_transpose2d: the output would be {oh}x{ow}")
    cols = ops.matmul(ops.transpose(ops.reshape(weight, (c_in, c_out * kh * kw)), 0, 1),
                      ops.reshape(x, (n, c_in, h * w)))  # (N, C_out*kh*kw, H*W)
    out = _col2im(cols, (n, c_out, oh, ow, kh, kw, st, pd, h, w))
    if bias is not None:
        out = ops.add(out, ops.reshape(bias, (1, c_out, 1, 1)))
    return ops.squeeze(out, 0) if unbatched else out


def _pool_args(name: str, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> tuple:
    def pair(v: Any, what: str) -> tuple:
        p = (v, v) if isinstance(v, int) else tuple(v)
        if len(p) == 1:
            p = (p[0], p[0])
        if len(p) != 2 or not all(isinstance(i, int) for i in p):
            raise TypeError(f"{name}: {what} must be an int or a pair of ints, got {v!r}")
        return p
    k = pair(kernel_size, "kernel_size")
    st = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else pair(stride, "stride")
    pd, dl = pair(padding, "padding"), pair(dilation, "dilation")
    if dl != (1, 1):
        _unsupported(name, dilation=(dilation, 1))
    if min(k) < 1 or min(st) < 1 or min(pd) < 0:
        raise RuntimeError(f"{name}: kernel_size and stride must be positive and padding non-negative, got "
                           f"kernel_size={k}, stride={st}, padding={pd}")
    if pd[0] > k[0] // 2 or pd[1] > k[1] // 2:
        bad = 0 if pd[0] > k[0] // 2 else 1
        raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={pd[bad]}, "
                           f"kernel_size={k[bad]} and dilation=1")
    return k, st, pd


def _pool_out(size: int, k: int, s: int, p: int, ceil_mode: bool) -> int:
    """torch's pooling output size: a last window that would start in the right padding is dropped."""
    out = -(-(size + 2 * p - k) // s) + 1 if ceil_mode else (size + 2 * p - k) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _windows(x: Tensor, k: tuple, st: tuple, pd: tuple, out: tuple, fill: float) -> Tensor:
    """``(N, C, kh*kw, OH*OW)``: each pooling window of ``x`` (N, C, H, W) as a column, the
    padding (and, with ceil_mode, what the last windows hang over) filled with ``fill``."""
    n, c, h, w = x.shape
    right = (max(0, (out[0] - 1) * st[0] + k[0] - h - pd[0]), max(0, (out[1] - 1) * st[1] + k[1] - w - pd[1]))
    if pd[0] or pd[1] or right[0] or right[1]:
        def block(shape: tuple) -> Tensor:
            return _constant(x.device.xp.full(shape, fill, dtype=x.dtype), x.device)
        parts = [block((n, c, pd[0], w))] if pd[0] else []
        x = ops.cat(parts + [x] + ([block((n, c, right[0], w))] if right[0] else []), dim=2)
        hh = x.shape[2]
        parts = [block((n, c, hh, pd[1]))] if pd[1] else []
        x = ops.cat(parts + [x] + ([block((n, c, hh, right[1]))] if right[1] else []), dim=3)
    geom = (n, c, x.shape[2], x.shape[3], k[0], k[1], st, (0, 0), out[0], out[1])
    return ops.reshape(_im2col(x, geom), (n, c, k[0] * k[1], out[0] * out[1]))


def _batched(name: str, input: Tensor) -> tuple:  # noqa: A002
    if not isinstance(input, Tensor) or input.ndim not in (3, 4):
        got = f"{input.ndim}-D" if isinstance(input, Tensor) else type(input).__name__
        raise RuntimeError(f"{name}: Expected 3D or 4D (batch mode) tensor for input, got {got}")
    return (ops.unsqueeze(input, 0), True) if input.ndim == 3 else (input, False)


def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,  # noqa: A002
               ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """The maximum of each ``kernel_size`` window, as ``torch.nn.functional.max_pool2d``:
    ``stride`` defaults to the kernel, ``padding`` (at most half the kernel) never wins,
    ``ceil_mode`` keeps a last partial window, a NaN in a window is its maximum, and the
    gradient goes to the first maximum of each window (row-major), as torch's.
    ``return_indices``: also the position of each maximum in its input plane (H*W flattened).
    A composition of ops (Note [Composite functionals])."""
    k, st, pd = _pool_args("max_pool2d", kernel_size, stride, padding, dilation)
    x, unbatched = _batched("max_pool2d", input)
    n, c, h, w = x.shape
    out = (_pool_out(h, k[0], st[0], pd[0], ceil_mode), _pool_out(w, k[1], st[1], pd[1], ceil_mode))
    if out[0] < 1 or out[1] < 1:
        raise RuntimeError(f"max_pool2d: Given input size: ({c}x{h}x{w}). Calculated output size: "
                           f"({c}x{out[0]}x{out[1]}). Output size is too small")
    values, where = ops.max(_windows(x, k, st, pd, out, -math.inf), dim=2)
    result = ops.reshape(values, (n, c) + out)
    if unbatched:
        result = ops.squeeze(result, 0)
    if not return_indices:
        return result
    xp = x.device.xp
    local = where._data.reshape((n, c) + out)
    rows = xp.arange(out[0]).reshape(-1, 1) * st[0] - pd[0] + local // k[1]
    cols = xp.arange(out[1]).reshape(1, -1) * st[1] - pd[1] + local % k[1]
    indices = _constant((rows * w + cols).astype("int64"), x.device)
    return result, (ops.squeeze(indices, 0) if unbatched else indices)


def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,  # noqa: A002
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """The mean of each ``kernel_size`` window, as ``torch.nn.functional.avg_pool2d``: zero
    padding counted in the divisor unless ``count_include_pad=False``; with ``ceil_mode`` a
    last partial window divides by the part inside the padded input, as torch's; a
    ``divisor_override`` replaces every divisor. A composition of ops (Note [Composite
    functionals])."""
    k, st, pd = _pool_args("avg_pool2d", kernel_size, stride, padding, 1)
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    x, unbatched = _batched("avg_pool2d", input)
    n, c, h, w = x.shape
    out = (_pool_out(h, k[0], st[0], pd[0], ceil_mode), _pool_out(w, k[1], st[1], pd[1], ceil_mode))
    if out[0] < 1 or out[1] < 1:
        raise RuntimeError(f"avg_pool2d: Given input size: ({c}x{h}x{w}). Calculated output size: "
                           f"({c}x{out[0]}x{out[1]}). Output size is too small")
    total = ops.reshape(ops.sum(_windows(x, k, st, pd, out, 0.0), dim=2), (n, c) + out)
    if divisor_override is not None:
        result = ops.div(total, float(divisor_override))
    else:
        divisor = numpy.ones(out)  # torch's rule, per output position
        for axis, (size, kk, ss, pp) in enumerate(zip((h, w), k, st, pd)):
            start = numpy.arange(out[axis]) * ss - pp
            end = numpy.minimum(start + kk, size + pp)
            span = end - start
            if not count_include_pad:
                span = numpy.minimum(end, size) - numpy.maximum(start, 0)
            divisor = divisor * (span.reshape(-1, 1) if axis == 0 else span.reshape(1, -1))
        result = ops.div(total, _constant(x.device.xp.asarray(divisor.astype(x.dtype)), x.device))
    return ops.squeeze(result, 0) if unbatched else result


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,  # noqa: A002
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalize each channel (dim 1) over the batch and the other dims, as
    ``torch.nn.functional.batch_norm``: with ``training``, by the batch's mean and biased
    variance, updating the running statistics in place (``running = (1 - momentum) * running
    + momentum * batch``, the variance unbiased there); otherwise by ``running_mean`` and
    ``running_var``. A composition of ops (Note [Composite functionals])."""
    if not isinstance(input, Tensor) or input.ndim < 2:
        raise ValueError(f"batch_norm: expected an input of at least 2 dims (N, C, ...), got "
                         f"{input.ndim if isinstance(input, Tensor) else type(input).__name__}")
    c = input.shape[1]
    dims = (0,) + tuple(range(2, input.ndim))
    shape = (1, c) + (1,) * (input.ndim - 2)
    if training:
        count = input.numel() // c if c else 0
        if count <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"torch.Size([{', '.join(str(n) for n in input.shape)}])")
        mean = ops.mean(input, dims, keepdim=True)
        centered = ops.sub(input, mean)
        var = ops.mean(ops.mul(centered, centered), dims, keepdim=True)
        with _no_grad():
            for stat, value, scale in ((running_mean, mean, 1.0), (running_var, var, count / (count - 1))):
                if stat is not None:
                    batch = value._data.reshape(c) * scale
                    stat._data[...] = (1 - momentum) * stat._data + momentum * batch.astype(stat.dtype)
                    _bump(stat)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
        centered = ops.sub(input, ops.reshape(running_mean, shape))
        var = ops.reshape(running_var, shape)
    out = ops.div(centered, ops.sqrt(ops.add(var, eps)))
    if weight is not None:
        out = ops.mul(out, ops.reshape(weight, shape))
    if bias is not None:
        out = ops.add(out, ops.reshape(bias, shape))
    return out


def _single_to_pair(v: Any, fill: int) -> Any:
    """A 1-d conv or pool argument as the 2-d one over a (…, 1, L) view: ``fill`` for the new dim."""
    if isinstance(v, str):
        return v
    v = v if isinstance(v, int) else tuple(v)[0]
    return (fill, v)


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,  # noqa: A002
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """1-D cross-correlation of ``input`` ``(N, C, L)`` (or ``(C, L)``) with ``weight`` ``(O, C, k)``:
    conv2d over a height of 1, as ``torch.nn.functional.conv1d``."""
    x = ops.unsqueeze(input, -2)
    out = conv2d(x, ops.unsqueeze(weight, -2), bias, _single_to_pair(stride, 1), _single_to_pair(padding, 0),
                 _single_to_pair(dilation, 1), groups)
    return ops.squeeze(out, -2)


def max_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,  # noqa: A002
               ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """max_pool2d over a height of 1, as ``torch.nn.functional.max_pool1d``."""
    out = max_pool2d(ops.unsqueeze(input, -2), _single_to_pair(kernel_size, 1),
                     None if stride is None else _single_to_pair(stride, 1), _single_to_pair(padding, 0),
                     _single_to_pair(dilation, 1), ceil_mode, return_indices)
    if return_indices:
        return ops.squeeze(out[0], -2), ops.squeeze(out[1], -2)
    return ops.squeeze(out, -2)


def avg_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,  # noqa: A002
               count_include_pad: bool = True) -> Tensor:
    """avg_pool2d over a height of 1, as ``torch.nn.functional.avg_pool1d``."""
    out = avg_pool2d(ops.unsqueeze(input, -2), _single_to_pair(kernel_size, 1),
                     None if stride is None else _single_to_pair(stride, 1), _single_to_pair(padding, 0), ceil_mode,
                     count_include_pad)
    return ops.squeeze(out, -2)


def _adaptive_matrix(size: int, out: int, dtype: Any) -> numpy.ndarray:
    """(out, size): row i averages torch's adaptive window [floor(i*size/out), ceil((i+1)*size/out))."""
    m = numpy.zeros((out, size), dtype=dtype)
    for i in range(out):
        start, end = (i * size) // out, -(-((i + 1) * size) // out)
        m[i, start:end] = 1.0 / (end - start)
    return m


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:  # noqa: A002
    """The mean over torch's adaptive windows (window i of a size-S dim covers
    ``[floor(i*S/out), ceil((i+1)*S/out))``), as ``torch.nn.functional.adaptive_avg_pool2d``;
    ``None`` in ``output_size`` keeps that dim. Two matrix products with the averaging
    matrices of the two dims."""
    if not isinstance(input, Tensor) or input.ndim not in (3, 4):
        raise RuntimeError("adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got "
                           f"{input.ndim if isinstance(input, Tensor) else type(input).__name__}")
    h, w = input.shape[-2:]
    oh, ow = (output_size, output_size) if isinstance(output_size, int) or output_size is None else tuple(output_size)
    oh, ow = h if oh is None else oh, w if ow is None else ow
    xp, dev = input.device.xp, input.device
    rows = _constant(xp.asarray(_adaptive_matrix(h, oh, input.dtype)), dev)
    cols = _constant(xp.asarray(_adaptive_matrix(w, ow, input.dtype).T), dev)
    return ops.matmul(ops.matmul(rows, input), cols)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Zero whole channels (the last two dims of an (N, C, H, W) or (C, H, W) input) with
    probability ``p``, scaling the rest by ``1/(1-p)``, as ``torch.nn.functional.dropout2d``."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if input.ndim not in (3, 4):
        warnings.warn(f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is deprecated and will "
                      "result in an error in a future release.", stacklevel=2)
    shape = tuple(input.shape[:-2]) + (1, 1)
    keep = random_array("uniform", shape, numpy.float64) >= p
    mask = _constant(input.device.xp.asarray((keep / (1.0 - p) if p < 1 else keep * 0.0).astype(input.dtype)),
                     input.device)
    out = ops.mul(input, mask)
    return _inplace(input, out) if inplace else out


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,  # noqa: A002
               eps: float = 1e-5) -> Tensor:
    """Normalize each of ``num_groups`` groups of channels (dim 1) over the group and the other
    dims, then scale and shift per channel, as ``torch.nn.functional.group_norm``."""
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {_torch_size(tuple(input.shape))} and num_groups={num_groups}")
    x = ops.reshape(input, (n, num_groups, -1))
    mean = ops.mean(x, 2, keepdim=True)
    centered = ops.sub(x, mean)
    var = ops.mean(ops.mul(centered, centered), 2, keepdim=True)
    out = ops.reshape(ops.div(centered, ops.sqrt(ops.add(var, eps))), tuple(input.shape))
    shape = (1, c) + (1,) * (input.ndim - 2)
    if weight is not None:
        out = ops.mul(out, ops.reshape(weight, shape))
    if bias is not None:
        out = ops.add(out, ops.reshape(bias, shape))
    return out


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:  # noqa: A002
    """``input / max(||input||_p, eps)`` over ``dim``, as ``torch.nn.functional.normalize``."""
    norm = ops.norm(input, p, dim, keepdim=True)
    return ops.div(input, ops.clamp(norm, min=eps))


def _clamped_norm(x: Tensor, dim: int, eps: float) -> Tensor:
    """``||x||_2`` over ``dim`` whose value is clamped below at ``eps`` and whose gradient is the
    unclamped norm's, as torch's cosine_similarity clamps under no_grad."""
    norm = ops.norm(x, 2, dim, keepdim=True)
    raw = norm._data
    lift = _constant(norm.device.xp.maximum(raw, eps) - raw, norm.device)
    return ops.add(norm, lift)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """``sum(x1/||x1|| * x2/||x2||)`` over ``dim``, each norm at least ``eps`` (the clamp not in
    the gradient), after broadcasting, as ``torch.nn.functional.cosine_similarity``."""
    if tuple(x1.shape) != tuple(x2.shape):
        shape = numpy.broadcast_shapes(tuple(x1.shape), tuple(x2.shape))
        x1, x2 = ops.expand(x1, shape), ops.expand(x2, shape)
    return ops.sum(ops.mul(ops.div(x1, _clamped_norm(x1, dim, eps)), ops.div(x2, _clamped_norm(x2, dim, eps))), dim)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """``||x1 - x2 + eps||_p`` over the last dim, as ``torch.nn.functional.pairwise_distance``."""
    return ops.norm(ops.add(ops.sub(x1, x2), eps), p, -1, keepdim=keepdim)


def pad(input: Tensor, pad: Any, mode: str = "constant", value: float | None = None) -> Tensor:  # noqa: A002
    """Pad (or, with negative amounts, crop) the last ``len(pad) // 2`` dims, as
    ``torch.nn.functional.pad``: ``pad`` pairs from the last dim backwards; ``mode`` constant
    (``value``, 0 by default), reflect, replicate or circular (gathers along each dim)."""
    pad = tuple(pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError("Padding length must be divisible by 2" if len(pad) % 2 else
                         "Padding length should be less than or equal to two times the input dimension but got "
                         f"padding length {len(pad)} and input of dimension {input.ndim}")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unsupported padding mode: {mode}")
    if mode != "constant" and value not in (None, 0):
        raise ValueError(f"Padding mode \"{mode}\" doesn't take in value argument.")
    x = input
    for k in range(len(pad) // 2):
        d = input.ndim - 1 - k
        left, right = pad[2 * k], pad[2 * k + 1]
        size = x.shape[d]
        if mode == "constant":
            if left < 0 or right < 0:  # crop first
                x = ops.getitem(x, (slice(None),) * d + (slice(max(-left, 0), size - max(-right, 0)),))
                left, right = max(left, 0), max(right, 0)
            blocks = []
            for amount in (left, right):
                shape = tuple(x.shape[:d]) + (amount,) + tuple(x.shape[d + 1:])
                blocks.append(_constant(x.device.xp.full(shape, 0 if value is None else value, dtype=x.dtype),
                                        x.device) if amount else None)
            x = ops.cat([b for b in (blocks[0], x, blocks[1]) if b is not None], dim=d)
            continue
        if mode == "reflect" and (left >= size or right >= size):
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input dimension, "
                               f"but got: padding ({left}, {right}) at dimension {d} of input {list(input.shape)}")
        positions = numpy.arange(-left, size + right)
        if mode == "replicate":
            index = numpy.clip(positions, 0, size - 1)
        elif mode == "circular":
            index = positions % size
        else:
            period = 2 * (size - 1) if size > 1 else 1
            folded = numpy.abs(positions) % period
            index = numpy.where(folded >= size, period - folded, folded)
        x = ops.getitem(x, (slice(None),) * d + (_constant(x.device.xp.asarray(index), x.device),))
    return x


def _interp_matrix(size: int, out: int, mode: str, align_corners: bool, scale: float | None) -> numpy.ndarray:
    """(out, size): row i holds torch's interpolation weights of output i over the input.
    ``scale``: the input/output ratio torch uses (from scale_factor), else size/out."""
    ratio = (size / out) if scale is None else scale
    m = numpy.zeros((out, size))
    i = numpy.arange(out)
    if mode in ("nearest", "nearest-exact"):
        src = numpy.floor((i + 0.5) * ratio) if mode == "nearest-exact" else numpy.floor(i * ratio)
        m[i, numpy.minimum(src.astype(int), size - 1)] = 1.0
        return m
    if align_corners:
        src = i * ((size - 1) / (out - 1)) if out > 1 else numpy.zeros(out)
    else:
        src = numpy.maximum((i + 0.5) * ratio - 0.5, 0.0)
    lo = numpy.minimum(numpy.floor(src).astype(int), size - 1)
    hi = numpy.minimum(lo + 1, size - 1)
    frac = src - lo
    numpy.add.at(m, (i, lo), 1.0 - frac)
    numpy.add.at(m, (i, hi), frac)
    return m


def interpolate(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",  # noqa: A002
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resample the spatial dims (the last one for 3-D input, the last two for 4-D), as
    ``torch.nn.functional.interpolate`` with mode ``nearest``, ``nearest-exact``, ``linear``
    (3-D) or ``bilinear`` (4-D), torch's ``align_corners`` and its use of ``scale_factor``: one
    matrix product per dim with the interpolation weights."""
    if antialias:
        raise NotImplementedError("interpolate: threadgrad does not support antialias=True; see docs/porting.md")
    spatial = input.ndim - 2
    modes = {"nearest": (1, 2), "nearest-exact": (1, 2), "linear": (1,), "bilinear": (2,)}
    if mode not in modes:
        raise NotImplementedError(f"interpolate: threadgrad does not support mode={mode!r} (only nearest, "
                                  "nearest-exact, linear, bilinear); see docs/porting.md")
    if spatial not in modes[mode]:
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs "
                                  f"{'3D' if mode == 'linear' else '4D' if mode == 'bilinear' else '3D or 4D'} input")
    if align_corners is not None and mode.startswith("nearest"):
        raise ValueError("align_corners option can only be set with the interpolating modes: linear | bilinear | "
                         "bicubic | trilinear")
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined")
    sizes = tuple(input.shape[2:])
    if size is not None:
        out = (size,) * spatial if isinstance(size, int) else tuple(size)
        scales: tuple = (None,) * spatial
    else:
        factors = (scale_factor,) * spatial if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
        out = tuple(int(math.floor(n * f)) for n, f in zip(sizes, factors))
        scales = (None,) * spatial if recompute_scale_factor else tuple(1.0 / f for f in factors)
    if len(out) != spatial:
        raise ValueError(f"Input and output must have the same number of spatial dimensions, but got input with "
                         f"spatial dimensions of {list(sizes)} and output size of {list(out)}.")
    xp, dev = input.device.xp, input.device
    result = input
    for k in range(spatial):
        m = _interp_matrix(sizes[k], out[k], mode, bool(align_corners), scales[k]).astype(input.dtype)
        if k == spatial - 1:  # the last dim: x @ M^T
            result = ops.matmul(result, _constant(xp.asarray(m.T), dev))
        else:  # the height of a 4-D input: M @ x over (H, W)
            result = ops.matmul(_constant(xp.asarray(m), dev), result)
    return result


def unfold(input: Tensor, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1) -> Tensor:  # noqa: A002
    """The sliding ``kernel_size`` blocks of a (N, C, H, W) ``input`` as columns,
    ``(N, C*kh*kw, L)``, as ``torch.nn.functional.unfold`` (conv2d's im2col; no dilation)."""
    if dilation not in (1, (1, 1), [1, 1]):
        _unsupported("unfold", dilation=(dilation, 1))
    k, st, pd = ((v, v) if isinstance(v, int) else tuple(v) for v in (kernel_size, stride, padding))
    x, unbatched = (ops.unsqueeze(input, 0), True) if input.ndim == 3 else (input, False)
    if x.ndim != 4:
        raise RuntimeError(f"Input Error: Only 3D or 4D input Tensors are supported (got {input.ndim}D)")
    n, c, h, w = x.shape
    oh, ow = (h + 2 * pd[0] - k[0]) // st[0] + 1, (w + 2 * pd[1] - k[1]) // st[1] + 1
    if oh < 1 or ow < 1:
        raise RuntimeError(f"Given input with spatial size ({h}, {w}), kernel_size={k}, dilation=(1, 1), "
                           f"padding={pd}, calculated shape of the array of sliding blocks as ({oh}, {ow}), "
                           "but its components must be at least one.")
    cols = _im2col(x, (n, c, h, w, k[0], k[1], st, pd, oh, ow))
    return ops.squeeze(cols, 0) if unbatched else cols


def fold(input: Tensor, output_size: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0,  # noqa: A002
         stride: Any = 1) -> Tensor:
    """The adjoint of :func:`unfold`: columns ``(N, C*kh*kw, L)`` summed back into a
    (N, C, H, W) image of ``output_size``, as ``torch.nn.functional.fold`` (no dilation)."""
    if dilation not in (1, (1, 1), [1, 1]):
        _unsupported("fold", dilation=(dilation, 1))
    k, st, pd, size = ((v, v) if isinstance(v, int) else tuple(v) for v in (kernel_size, stride, padding, output_size))
    x, unbatched = (ops.unsqueeze(input, 0), True) if input.ndim == 2 else (input, False)
    n, ckk, length = x.shape
    oh, ow = (size[0] + 2 * pd[0] - k[0]) // st[0] + 1, (size[1] + 2 * pd[1] - k[1]) // st[1] + 1
    if ckk % (k[0] * k[1]) or oh * ow != length:
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, "
                           f"and its dimension 2 to match the calculated number of sliding blocks {oh} * {ow} = "
                           f"{oh * ow}, but got input.size(1)={ckk} and input.size(2)={length}.")
    out = _col2im(x, (n, ckk // (k[0] * k[1]), size[0], size[1], k[0], k[1], st, pd, oh, ow))
    return ops.squeeze(out, 0) if unbatched else out


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm: float | None = None,  # noqa: A002
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of ``weight`` picked by the integer ``input``; the row ``padding_idx`` gets no
    gradient, as torch's."""
    _unsupported("embedding", max_norm=(max_norm, None), scale_grad_by_freq=(scale_grad_by_freq, False),
                 sparse=(sparse, False))
    if not isinstance(input, Tensor) or input.dtype.kind not in "iu":
        kind = type(input).__name__ if not isinstance(input, Tensor) else f"{input.dtype}"
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {kind} instead (while checking arguments for embedding)")
    n = weight.shape[0]
    # Every index in [0, n), as torch (a negative one is out of range too), in one reduction
    # read once (one wait for a GPU, where a max and a min were two): the kernel's "ignored"
    # code is spent on index n, out of range anyway.
    if input.numel() and input.device.kernels.class_index_check(input._data, n, n):
        raise IndexError("index out of range in self")
    out = ops.getitem(weight, input)
    if padding_idx is not None:
        if padding_idx < 0:
            padding_idx += n
        keep = ops.unsqueeze(input != padding_idx, -1)
        out = ops.where(keep, out, out.detach())  # same values; no gradient into the padding row
    return out


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: Any = None,  # noqa: A002
             ignore_index: int = -100, reduce: Any = None, reduction: str = "mean") -> Tensor:
    """Negative log likelihood of log-probabilities ``input`` (``(N, C)``, ``(C,)`` or
    ``(N, C, d1, ...)``) at class indices ``target``, with class ``weight`` and
    ``ignore_index``, as ``torch.nn.functional.nll_loss``."""
    reduction = _legacy_reduction("nll_loss", size_average, reduce, reduction)
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if input.ndim == 1:
        input, target = ops.unsqueeze(input, 0), ops.unsqueeze(target, 0)
    if input.ndim < 2:
        raise ValueError(f"Expected 1 or more dimensions (got {input.ndim})")
    if input.shape[0] != target.shape[0]:
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
                         f"({target.shape[0]}).")
    valid = target != ignore_index
    safe = ops.where(valid, target, 0)
    picked = ops.squeeze(ops.gather(input, 1, ops.unsqueeze(safe, 1)), 1)
    w = ops.where(valid, 1.0, 0.0) if weight is None else ops.where(valid, ops.getitem(weight, safe), 0.0)
    w = ops.to(w, None, input.dtype)
    loss = ops.neg(ops.mul(picked, w))
    if reduction == "none":
        return loss
    if reduction == "sum":
        return ops.sum(loss)
    return ops.div(ops.sum(loss), ops.sum(w))


def silu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``x * sigmoid(x)``."""
    out = ops.mul(input, ops.sigmoid(input))
    return _inplace(input, out) if inplace else out


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:  # noqa: A002
    """``x`` where positive, ``negative_slope * x`` elsewhere."""
    out = ops.where(input > 0, input, ops.mul(input, negative_slope))
    return _inplace(input, out) if inplace else out


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere."""
    neg = ops.mul(ops.sub(ops.exp(ops.clamp(input, max=0.0)), 1.0), alpha)
    out = ops.where(input > 0, input, neg)
    return _inplace(input, out) if inplace else out


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """``input`` clamped to ``[min_val, max_val]``."""
    out = ops.clamp(input, min_val, max_val)
    return _inplace(input, out) if inplace else out


def relu6(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``min(max(x, 0), 6)``."""
    return hardtanh(input, 0.0, 6.0, inplace)


def mish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``x * tanh(softplus(x))``."""
    out = ops.mul(input, ops.tanh(ops.softplus(input)))
    return _inplace(input, out) if inplace else out


def logsigmoid(input: Tensor) -> Tensor:  # noqa: A002
    """``log(sigmoid(x))``, computed as ``-softplus(-x)``."""
    return ops.neg(ops.softplus(ops.neg(input)))


def _reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "mean":
        return ops.mean(loss)
    if reduction == "sum":
        return ops.sum(loss)
    raise ValueError(f"{reduction} is not a valid value for reduction")


def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                          size_average: Any = None, reduce: Any = None, reduction: str = "mean") -> Tensor:
    """``1 - cos`` where ``target`` is 1 and ``max(0, cos - margin)`` where it is -1, ``cos`` over
    dim 1 (dim 0 for 1-D inputs) with torch's ``1e-12`` in each squared magnitude, as
    ``torch.nn.functional.cosine_embedding_loss``."""
    reduction = _legacy_reduction("cosine_embedding_loss", size_average, reduce, reduction)
    dim = 1 if input1.ndim == 2 else 0
    prod = ops.sum(ops.mul(input1, input2), dim)
    mag1 = ops.add(ops.sum(ops.mul(input1, input1), dim), 1e-12)
    mag2 = ops.add(ops.sum(ops.mul(input2, input2), dim), 1e-12)
    cos = ops.div(prod, ops.sqrt(ops.mul(mag1, mag2)))
    pos = ops.where(target == 1, ops.sub(1.0, cos), 0.0)
    neg = ops.where(target == -1, ops.clamp(ops.sub(cos, margin), min=0.0), 0.0)
    return _reduce_loss(ops.add(pos, neg), reduction)


def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0, p: float = 2.0,
                        eps: float = 1e-6, swap: bool = False, size_average: Any = None, reduce: Any = None,
                        reduction: str = "mean") -> Tensor:
    """``max(0, margin + d(a, p) - d(a, n))`` with ``d`` the ``p``-norm pairwise distance (``swap``:
    ``d(a, n)`` is the smaller of it and ``d(p, n)``), as ``torch.nn.functional.triplet_margin_loss``."""
    reduction = _legacy_reduction("triplet_margin_loss", size_average, reduce, reduction)
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = ops.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce_loss(ops.clamp(ops.sub(ops.add(d_pos, margin), d_neg), min=0.0), reduction)


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                         size_average: Any = None, reduce: Any = None, reduction: str = "mean") -> Tensor:
    """``-(t log x + (1 - t) log(1 - x))`` for probabilities ``input``, the logs clamped at
    -100 as torch's."""
    reduction = _legacy_reduction("binary_cross_entropy", size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({_torch_size(target.shape)}) that is different to the input size "
                         f"({_torch_size(input.shape)}) is deprecated. Please ensure they have the same size.")
    log_x = ops.clamp(ops.log(input), min=-100.0)
    log_1mx = ops.clamp(ops.log(ops.sub(1.0, input)), min=-100.0)
    loss = ops.neg(ops.add(ops.mul(target, log_x), ops.mul(ops.sub(1.0, target), log_1mx)))
    if weight is not None:
        loss = ops.mul(loss, weight)
    return _reduce_loss(loss, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                                     size_average: Any = None, reduce: Any = None, reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """Sigmoid and binary cross entropy in one stable formula, with ``pos_weight`` (the weight
    of positive examples, per class), as torch's."""
    reduction = _legacy_reduction("binary_cross_entropy_with_logits", size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({_torch_size(target.shape)}) must be the same as input size "
                         f"({_torch_size(input.shape)})")
    sp = ops.softplus(ops.neg(input))  # -log(sigmoid(x)), stable
    if pos_weight is None:
        loss = ops.add(ops.mul(ops.sub(1.0, target), input), sp)
    else:
        coeff = ops.add(ops.mul(ops.sub(pos_weight, 1.0), target), 1.0)
        loss = ops.add(ops.mul(ops.sub(1.0, target), input), ops.mul(coeff, sp))
    if weight is not None:
        loss = ops.mul(loss, weight)
    return _reduce_loss(loss, reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None,  # noqa: A002
                   reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """``0.5 d^2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta`` (``d = input - target``;
    ``beta=0`` is the L1 loss), as torch's."""
    reduction = _legacy_reduction("smooth_l1_loss", size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    warn_broadcast(input, target, 2)
    d = ops.abs(ops.sub(input, target))
    if beta == 0:
        return _reduce_loss(d, reduction)
    loss = ops.where(d < beta, ops.div(ops.mul(ops.mul(d, d), 0.5), beta), ops.sub(d, 0.5 * beta))
    return _reduce_loss(loss, reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,  # noqa: A002
               weight: Tensor | None = None) -> Tensor:
    """``0.5 d^2`` where ``|d| < delta``, else ``delta (|d| - 0.5 delta)``, as torch's."""
    _unsupported("huber_loss", weight=(weight, None))
    warn_broadcast(input, target, 2)
    d = ops.abs(ops.sub(input, target))
    loss = ops.where(d < delta, ops.mul(ops.mul(d, d), 0.5), ops.mul(ops.sub(d, 0.5 * delta), delta))
    return _reduce_loss(loss, reduction)


def kl_div(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None,  # noqa: A002
           reduction: str = "mean", log_target: bool = False) -> Tensor:
    """``target (log target - input)`` pointwise (0 where ``target`` is 0), ``input`` being
    log-probabilities; ``reduction='batchmean'`` divides the sum by the batch size, as torch's."""
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction("kl_div", size_average, reduce, reduction)
    elif reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                      "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
                      stacklevel=2)
    if log_target:
        loss = ops.mul(ops.exp(target), ops.sub(target, input))
    else:
        positive = target > 0
        safe = ops.where(positive, target, 1.0)  # log(1) = 0 where target is 0: xlogy's rule
        loss = ops.sub(ops.mul(target, ops.log(safe)), ops.mul(target, input))
    if reduction == "batchmean":
        return ops.div(ops.sum(loss), input.shape[0]) if input.ndim else ops.sum(loss)
    return _reduce_loss(loss, reduction)


def _torch_size(shape: tuple) -> str:
    return f"torch.Size({list(shape)})"
