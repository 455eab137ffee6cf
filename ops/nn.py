"""Neural-network ops: linear, layer_norm, conv2d, dropout, cross_entropy, mse_loss.

These are compositions of differentiable ops (their backward is their parts' backward,
so double backward comes for free), except the im2col/col2im pair conv2d is built on,
which are adjoint ops of their own, and the single nodes layer_norm, cross_entropy and
(on a GPU) mse_loss record, whose backward is written with ops. See Note [Op definitions]
in _core.py.
"""
from __future__ import annotations

import math
import warnings
from typing import Any

from ..engine.tensor import Tensor, _wrap, owned_gradient
from ..engine.creation import random_array

from ._core import ARRAYS, OPS, Node, check_tensor, const, device_error, record, record_unary, register, tls
from .activation import _shifted, log_softmax, softmax
from .elementwise import add, div, mul, neg, sqrt, sub, where
from .index import gather
from .linalg import matmul
from .reduce import mean, sum as _sum
from .shape import reshape, squeeze, transpose, unsqueeze


def _same_device(name: str, *ts: Any) -> None:
    ts = [t for t in ts if t is not None]
    for t in ts[1:]:
        if t.device is not ts[0].device:
            raise device_error(name, ts[0], t)


@register
def linear(x: Tensor, weight: Tensor, bias: Any = None) -> Tensor:
    """``x @ weight.T + bias`` with ``weight`` of shape ``(out_features, in_features)``.

    >>> from threadgrad import engine, ops
    >>> ops.linear(engine.ones(2, 3), engine.ones(4, 3), engine.zeros(4)).shape
    (2, 4)
    """
    check_tensor(x, "linear")
    check_tensor(weight, "linear", "weight")
    if isinstance(bias, Tensor):
        check_tensor(bias, "linear", "bias")  # (a stale view is brought up to date here)
    _same_device("linear", x, weight, bias)
    if weight.ndim not in (1, 2) or x.ndim == 0 or x.shape[-1] != weight.shape[-1]:
        raise RuntimeError(f"linear: input of shape {list(x.shape)} and weight of shape {list(weight.shape)} "
                           f"do not fit: weight must be (out_features, {x.shape[-1] if x.ndim else '?'})")
    if (x._data.ndim >= 2 and weight._data.ndim == 2 and x._data.dtype == weight._data.dtype
            and (bias is None or (isinstance(bias, Tensor) and bias._data.shape == weight._data.shape[:1]
                                  and bias._data.dtype == x._data.dtype))):
        if x._data.ndim == 2:
            return _linear_2d(x, weight, bias)
        if x._data.flags.c_contiguous:
            # As torch: one matrix product over the rows of every leading dim, viewed back
            # (numpy's (B, T, C) @ (C, D) is B products, and its gradient for the weight a
            # (B, C, D) stack then summed: benchmarks/models.py's transformer step 300 -> ms)
            lead = x.shape[:-1]
            out = _linear_2d(reshape(x, (-1, x.shape[-1])), weight, bias)
            return reshape(out, lead + (weight.shape[0],))
    out = matmul(x, transpose(weight, 0, 1) if weight.ndim == 2 else weight)
    return out if bias is None else add(out, bias)


class AddmmBackward0(Node):
    """linear on a matrix input, fused like torch's addmm: gx = g @ W, gW = g.T @ x, gb = sum(g, 0).

    Computing gW as ``g.T @ x`` (not ``(x.T @ g).T``) gives a contiguous array that the
    weight's AccumulateGrad adopts without a copy (measured on the 784-512-512-10 MLP: the
    transposed form cost a strided copy of every weight gradient)."""

    __slots__ = ()

    def backward(self, g: Tensor) -> tuple:
        ex, ew = self.next_edges[0], self.next_edges[1]
        # Arrays against ops, measured with x (64, 784) float32, W (512, 784): 636 -> 617 us; at
        # (4, 8) and (6, 8), wrappers only: 7.6 -> 4.0 us
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        x, w = F.saved(self)
        # Fresh arrays, kept nowhere else: a leaf adopts them as .grad without a copy
        # (Note [Gradient ownership] in engine/tensor.py)
        gx = F.owned(F.matmul(g, w), dev, ex[0]) if ex[0] is not None else None
        gw = F.owned(F.matmul(F.t(g), x), dev, ew[0]) if ew[0] is not None else None
        if len(self.next_edges) == 2:
            return (gx, gw)
        eb = self.next_edges[2]
        return (gx, gw, F.owned(F.sum(g, 0), dev, eb[0]) if eb[0] is not None else None)


class MmBackward0(AddmmBackward0):
    """linear without bias: the same node, torch's name for it."""

    __slots__ = ()


def _linear_2d(x: Tensor, weight: Tensor, bias: "Tensor | None") -> Tensor:
    data = x._data @ weight._data.T
    if bias is not None:
        data += bias._data  # the product is a fresh array: add the bias in place
    out = _wrap(data, x.device)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    if tls.grad_enabled and (x._rg or weight._rg or (bias is not None and bias._rg)):
        node = MmBackward0() if bias is None else AddmmBackward0()
        record(node, inputs, out, (x if weight._rg else None, weight if x._rg else None))
    return out


# --- layer_norm -------------------------------------------------------------------------

class NativeLayerNormBackward0(Node):
    """layer_norm as one node (torch's name), edges to (input, weight, bias), None where absent.

    torch's formula, over the normalized dims D with ``xhat = (x - mean) * rstd``:
    ``dx = rstd * (dy*w - mean_D(dy*w) - xhat * mean_D(dy*w * xhat))``, ``dw = sum(dy * xhat)``
    and ``db = sum(dy)`` over the leading dims. Written once with ops: in first order the saved
    ``mean``/``rstd`` arrays are constants; under ``create_graph`` they are recomputed from x
    with ops, so the second derivative sees their dependence on x."""

    __slots__ = ("dims", "eps", "mean", "rstd")

    def backward(self, g: Tensor) -> tuple:
        ex, ew, eb = self.next_edges
        dev = g.device
        if dev.kernels.fused and not tls.grad_enabled:  # Note [Fused kernels] in devices/_fused.py
            xd, wd = self.saved_arrays()
            m = self.rstd.size  # rows M, each of the normalized size N
            n = xd.size // m if m else 0
            if n:
                res = dev.kernels.layer_norm_grad(
                    g._data.reshape(m, n), xd.reshape(m, n), None if wd is None else wd.reshape(n),
                    self.mean.reshape(m), self.rstd.reshape(m), (ex[0] is not None, ew[0] is not None, eb[0] is not None))
                if res is not None:
                    dx, dw, db = res
                    shape = xd.shape[xd.ndim - len(self.dims):]
                    return (None if dx is None else owned_gradient(dx.reshape(xd.shape), dev, ex[0]),
                            None if dw is None else owned_gradient(dw.reshape(shape), dev, ew[0]),
                            None if db is None else owned_gradient(db.reshape(shape), dev, eb[0]))
        x, w = self.saved_tensors()
        dims = self.dims
        lead = tuple(range(x.ndim - len(dims)))
        if tls.grad_enabled:  # create_graph
            mu = mean(x, dims, keepdim=True)
            centered = sub(x, mu)
            rstd = div(1.0, sqrt(add(mean(mul(centered, centered), dims, keepdim=True), self.eps)))
        else:
            dev = x.device
            centered, rstd = sub(x, _wrap(self.mean, dev)), _wrap(self.rstd, dev)
        xhat = mul(centered, rstd)
        gx = gw = gb = None
        if ex[0] is not None:
            gxhat = g if w is None else mul(g, w)
            m1 = mean(gxhat, dims, keepdim=True)
            m2 = mean(mul(gxhat, xhat), dims, keepdim=True)
            gx = mul(sub(sub(gxhat, m1), mul(xhat, m2)), rstd)
        if ew[0] is not None:
            gw = mul(g, xhat)
            gw = _sum(gw, lead) if lead else gw
        if eb[0] is not None:
            gb = _sum(g, lead) if lead else g
        return (gx, gw, gb)


@register
def layer_norm(x: Tensor, normalized_shape: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Tensor:
    """Normalize over the last ``len(normalized_shape)`` dims (biased variance), then scale by
    ``weight`` and shift by ``bias``, as ``torch.nn.functional.layer_norm``: one node,
    ``NativeLayerNormBackward0``.

    >>> from threadgrad import engine, ops
    >>> ops.layer_norm(engine.tensor([[1.0, 3.0]]), (2,)).tolist()
    [[-0.9999949932098389, 0.9999949932098389]]
    """
    check_tensor(x, "layer_norm")
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(shape):]) != shape or len(shape) > x.ndim:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape [*, "
                           f"{', '.join(str(n) for n in shape)}], but got input of size{list(x.shape)}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        check_tensor(t, "layer_norm", name)
        if tuple(t.shape) != shape:
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but got {name} of shape "
                               f"{list(t.shape)} and normalized_shape = {list(shape)}")
        if t.dtype != x.dtype:
            raise RuntimeError(f"layer_norm: mixed dtype: expected {name} to have the input's dtype {x.dtype}, "
                               f"got {t.dtype}")
    _same_device("layer_norm", x, weight, bias)
    if x.dtype.kind != "f":
        raise RuntimeError(f"layer_norm: expected a floating point input, got {x.dtype}")
    xp, dims = x.device.xp, tuple(range(x.ndim - len(shape), x.ndim))
    xd = x._data
    fused = None
    if x.device.kernels.fused:  # one launch on a GPU (devices/_fused.py)
        n = math.prod(shape)
        m = xd.size // n if n else 0
        fused = x.device.kernels.layer_norm(xd.reshape(m, n), None if weight is None else weight._data.reshape(n),
                                            None if bias is None else bias._data.reshape(n), eps) if n else None
    if fused is not None:
        data, mu, rstd = fused
        kept = x.shape[:x.ndim - len(shape)] + (1,) * len(shape)
        data, mu, rstd = data.reshape(x.shape), mu.reshape(kept), rstd.reshape(kept)
    else:
        mu = xd.mean(axis=dims, keepdims=True)
        data = xd - mu
        var = (data * data).mean(axis=dims, keepdims=True)
        rstd = 1.0 / xp.sqrt(var + eps)
        data *= rstd  # (data is a fresh array: scaled and shifted in place)
        if weight is not None:
            data *= weight._data
        if bias is not None:
            data += bias._data
    out = _wrap(data, x.device)
    if tls.grad_enabled and (x._rg or (weight is not None and weight._rg) or (bias is not None and bias._rg)):
        node = NativeLayerNormBackward0()
        node.dims, node.eps, node.mean, node.rstd = dims, eps, mu, rstd
        w_needed = weight is not None and x._rg
        record(node, (x, weight, bias), out, (x, weight if w_needed else None))
    return out


# --- conv2d: im2col + matmul ------------------------------------------------------------

def _pair(v: Any, name: str, what: str) -> tuple:
    p = (v, v) if isinstance(v, int) else tuple(v)
    if len(p) != 2 or not all(isinstance(i, int) for i in p):
        raise TypeError(f"{name}: {what} must be an int or a pair of ints, got {v!r}")
    return p


class Im2ColBackward0(Node):
    __slots__ = ("geom",)

    def backward(self, g: Tensor) -> tuple:
        return (_col2im(g, self.geom),)


class Col2ImBackward0(Node):
    __slots__ = ("geom",)

    def backward(self, g: Tensor) -> tuple:
        return (_im2col(g, self.geom),)


def _geometry(shape: tuple, kh: int, kw: int, stride: tuple, padding: tuple, dilation: tuple = (1, 1)) -> tuple:
    """``(n, c, h, w, kh, kw, stride, padding, oh, ow, dilation)``: what _im2col and _col2im
    take (callers may leave out the dilation, (1, 1))."""
    n, c, h, w = shape
    oh = (h + 2 * padding[0] - ((kh - 1) * dilation[0] + 1)) // stride[0] + 1
    ow = (w + 2 * padding[1] - ((kw - 1) * dilation[1] + 1)) // stride[1] + 1
    return (n, c, h, w, kh, kw, stride, padding, oh, ow, dilation)


def _im2col(x: Tensor, geom: tuple) -> Tensor:
    """``(N, C, H, W)`` -> ``(N, C*kh*kw, OH*OW)`` patch columns (a strided view, then one copy)."""
    n, c, h, w, kh, kw, (sh, sw), (ph, pw), oh, ow = geom[:10]
    dh, dw = geom[10] if len(geom) > 10 else (1, 1)
    xp = x.device.xp
    data = x._data
    if ph or pw:
        data = xp.pad(data, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    s0, s1, s2, s3 = data.strides
    windows = xp.lib.stride_tricks.as_strided(
        data, shape=(n, c, kh, kw, oh, ow), strides=(s0, s1, s2 * dh, s3 * dw, s2 * sh, s3 * sw))
    out = _wrap(windows.reshape(n, c * kh * kw, oh * ow), x.device)  # reshape copies
    if tls.grad_enabled and x._rg:
        node = Im2ColBackward0()
        node.geom = geom
        record_unary(node, x, out)
    return out


def _col2im(g: Tensor, geom: tuple) -> Tensor:
    """The adjoint of :func:`_im2col`: patch columns summed back into an image."""
    n, c, h, w, kh, kw, (sh, sw), (ph, pw), oh, ow = geom[:10]
    dh, dw = geom[10] if len(geom) > 10 else (1, 1)
    xp = g.device.xp
    cols = g._data.reshape(n, c, kh, kw, oh, ow)
    img = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=g.dtype)
    for i in range(kh):  # kh*kw strided adds: each kernel offset covers the image once
        for j in range(kw):
            img[:, :, i * dh:i * dh + sh * oh:sh, j * dw:j * dw + sw * ow:sw] += cols[:, :, i, j]
    out = _wrap(xp.ascontiguousarray(img[:, :, ph:ph + h, pw:pw + w]), g.device)
    if tls.grad_enabled and g._rg:
        node = Col2ImBackward0()
        node.geom = geom
        record_unary(node, g, out)
    return out


@register
def conv2d(x: Tensor, weight: Tensor, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1) -> Tensor:
    """2-D cross-correlation of ``x`` ``(N, C, H, W)`` (or ``(C, H, W)``) with ``weight``
    ``(O, C // groups, kh, kw)``, plus ``bias`` ``(O,)``; ``stride``/``padding``/``dilation`` are
    ints or pairs; ``groups`` splits the channels (each group of ``O // groups`` outputs sees
    its ``C // groups`` inputs). One patch-column copy, then one (batched) product.

    >>> from threadgrad import engine, ops
    >>> ops.conv2d(engine.ones(1, 2, 5, 5), engine.ones(3, 2, 3, 3), padding=1).shape
    (1, 3, 5, 5)
    """
    check_tensor(x, "conv2d")
    check_tensor(weight, "conv2d", "weight")
    _same_device("conv2d", x, weight, bias)
    st, pd = _pair(stride, "conv2d", "stride"), _pair(padding, "conv2d", "padding")
    dl = _pair(dilation, "conv2d", "dilation")
    if st[0] < 1 or st[1] < 1 or pd[0] < 0 or pd[1] < 0 or dl[0] < 1 or dl[1] < 1:
        raise RuntimeError(f"conv2d: stride and dilation must be positive and padding non-negative, got "
                           f"stride={st}, padding={pd}, dilation={dl}")
    if not isinstance(groups, int) or groups < 1:
        raise RuntimeError(f"non-positive groups is not supported, got groups={groups}")
    if x.ndim == 3:
        return squeeze(conv2d(unsqueeze(x, 0), weight, bias, st, pd, dl, groups), 0)
    if x.ndim != 4 or weight.ndim != 4 or x.shape[1] != weight.shape[1] * groups or weight.shape[0] % groups:
        raise RuntimeError(f"conv2d: expected input (N, C, H, W) and weight (O, C/groups, kh, kw) with groups "
                           f"dividing O, got input {list(x.shape)}, weight {list(weight.shape)} and groups={groups}")
    o, cg, kh, kw = weight.shape
    geom = _geometry(x.shape, kh, kw, st, pd, dl)
    if geom[8] < 1 or geom[9] < 1:
        raise RuntimeError(f"conv2d: kernel {kh}x{kw} (dilation {dl}) is larger than the padded input "
                           f"{x.shape[2] + 2 * pd[0]}x{x.shape[3] + 2 * pd[1]}")
    cols = _im2col(x, geom)                                       # (N, C*kh*kw, L)
    if groups == 1:
        out = matmul(reshape(weight, (o, cg * kh * kw)), cols)    # (N, O, L)
    else:  # one product per group, batched: (g, O/g, K) @ (N, g, K, L) -> (N, g, O/g, L)
        k = cg * kh * kw
        out = matmul(reshape(weight, (groups, o // groups, k)), reshape(cols, (x.shape[0], groups, k, cols.shape[-1])))
    out = reshape(out, (x.shape[0], o, geom[8], geom[9]))
    if bias is not None:
        out = add(out, reshape(bias, (1, o, 1, 1)))
    return out


@register
def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``; the
    identity when not ``training``. The mask comes from the generator ``engine.manual_seed`` seeds."""
    check_tensor(x, "dropout")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return x
    keep = random_array("uniform", x.shape, "float64") >= p
    scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
    mask = x.device.asarray((keep * scale).astype(x.dtype))
    return mul(x, const(mask, x))


# --- losses -----------------------------------------------------------------------------

def _reduce(loss: Tensor, reduction: str, name: str) -> Tensor:
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return _sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


@register
def cross_entropy(logits: Tensor, target: Any, reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Cross entropy of ``logits`` ``(N, C)`` (or ``(C,)``, or ``(N, C, d1, ...)``) against
    integer class indices ``target`` ``(N,)`` (``()``, ``(N, d1, ...)``), via log_softmax so
    huge logits stay finite. ``mean`` averages over the targets not equal to ``ignore_index``.

    >>> from threadgrad import engine, ops
    >>> loss = ops.cross_entropy(engine.tensor([[1e4, 0.0], [0.0, 1e4]]), engine.tensor([0, 0]))
    >>> loss.item()
    5000.0
    """
    check_tensor(logits, "cross_entropy", "logits")
    check_tensor(target, "cross_entropy", "target")
    _same_device("cross_entropy", logits, target)
    if target.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: target must hold integer class indices, got dtype {target.dtype}")
    cdim = 1 if logits.ndim >= 2 else 0
    if logits.ndim == 0 or target.shape != logits.shape[:cdim] + logits.shape[cdim + 1:]:
        raise ValueError(f"cross_entropy: logits of shape {list(logits.shape)} need a target of shape "
                         f"{list(logits.shape[:cdim] + logits.shape[cdim + 1:])}, got {list(target.shape)}")
    xp = target.device.xp
    n_classes = logits.shape[cdim]
    # One read of the device for both checks (a fused reduction on a GPU): Note [Fused kernels]
    code = target.device.kernels.class_index_check(target._data, ignore_index, n_classes)
    if code & 2:
        raise IndexError(f"cross_entropy: target holds class indices outside [0, {n_classes - 1}]")
    if (code == 0 and logits.ndim == 2 and reduction in ("mean", "sum") and logits.device.kernels.fused
            and logits._data.dtype.char in "fd"):  # float32, float64 (dtype.name is slow in numpy)
        return _cross_entropy_fused(logits, target._data, reduction)
    valid = target._data != ignore_index if code & 1 else None
    td = target._data if valid is None else xp.where(valid, target._data, 0)
    idx = _wrap(td[..., None] if cdim == 0 else xp.expand_dims(td, cdim), target.device)
    picked = squeeze(gather(log_softmax(logits, cdim), cdim, idx), cdim)
    loss = neg(picked)
    if valid is None:
        return _reduce(loss, reduction, "cross_entropy")
    loss = where(const(valid, target), loss, const(xp.zeros((), dtype=loss.dtype), loss))
    if reduction == "mean":
        return div(_sum(loss), float(valid.sum()))
    return _reduce(loss, reduction, "cross_entropy")


def warn_broadcast(input: Tensor, target: Any, stacklevel: int) -> None:
    """torch's UserWarning when a loss's target has another shape than its input (they
    broadcast, which is rarely what was meant: (4, 1) against (4,) gives a (4, 4) loss)."""
    if isinstance(target, Tensor) and target.shape != input.shape:
        warnings.warn(f"Using a target size ({tuple(target.shape)}) that is different to the input size "
                      f"({tuple(input.shape)}). This will likely lead to incorrect results due to broadcasting. "
                      "Please ensure they have the same size.", UserWarning, stacklevel=stacklevel + 1)

class CrossEntropyBackward0(Node):
    """cross_entropy of (N, C) logits on a device with fused kernels, as one node: the loss
    ``-mean(log_softmax(x)[i, t_i])`` (or the sum) has the gradient ``(softmax(x) - onehot(t))
    * g / N``, one kernel on a GPU (Note [Fused kernels] in devices/_fused.py). Under
    ``create_graph`` the same formula is recorded with ops, so double backward works."""

    __slots__ = ("lsm", "target", "mean")

    def backward(self, g: Tensor) -> tuple:
        dev = g.device
        if not tls.grad_enabled:
            self.saved_arrays()  # the version check of the saved logits
            return (_wrap(dev.kernels.cross_entropy_grad(g._data, self.lsm, self.target, self.mean), dev),)
        (x,) = self.saved_tensors()
        xp = dev.xp
        n, c = x.shape
        onehot = xp.zeros((n, c), dtype=x._data.dtype)
        onehot[xp.arange(n), self.target] = 1
        scale = div(g, n) if self.mean else g
        return (mul(sub(softmax(x, 1), const(onehot, x)), scale),)


def _cross_entropy_fused(logits: Tensor, td: Any, reduction: str) -> Tensor:
    # log_softmax and the loss in two kernels (Fused.cross_entropy_forward), or, for operands
    # that kernel does not take, log_softmax as the op computes it, then the loss in one
    # kernel and one reduction.
    kernels = logits.device.kernels
    mean = reduction == "mean"
    fused = kernels.cross_entropy_forward(logits._data, td, mean)
    if fused is not None:
        lsm, loss = fused
    else:
        xp = logits.device.xp
        s = _shifted(logits._data, 1, xp)
        lsm = s - xp.log(xp.exp(s).sum(axis=1, keepdims=True))
        loss = kernels.nll(lsm, td, mean)
    out = _wrap(loss, logits.device)
    if tls.grad_enabled and logits._rg:
        node = CrossEntropyBackward0()
        node.lsm, node.target, node.mean = lsm, td, mean
        record_unary(node, logits, out, logits)
    return out


@register
def mse_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:  # noqa: A002 - torch's name
    """``mean((input - target) ** 2)`` (or ``sum`` / ``none``), broadcasting like torch (and,
    like torch, warning when the two shapes differ)."""
    check_tensor(input, "mse_loss")
    if isinstance(target, Tensor) and target.device is not input.device:
        raise device_error("mse_loss", input, target)
    warn_broadcast(input, target, 2)
    return squared_error(input, target, reduction)


def squared_error(input: Tensor, target: Any, reduction: str) -> Tensor:  # noqa: A002 - torch's name
    """mse_loss after its checks and warning (``tg.nn.functional.mse_loss`` warns at its own caller)."""
    if (reduction in ("mean", "sum") and isinstance(target, Tensor) and input.device.kernels.fused
            and target.device is input.device and target.shape == input.shape
            and input._data.dtype is target._data.dtype and input._data.dtype.char in "fd"):
        check_tensor(target, "mse_loss", "target")  # (a stale view is brought up to date here)
        return _mse_fused(input, target, reduction == "mean")
    d = sub(input, target)
    return _reduce(mul(d, d), reduction, "mse_loss")


class MseLossBackward0(Node):
    """mse_loss of two tensors of one shape on a device with fused kernels, as one node (torch's
    name): the loss in one reduction, its gradient ``(input - target) * (norm * g)``, torch's
    formula, in one kernel (Note [Fused kernels] in devices/_fused.py); the target's is its
    negation. Under ``create_graph`` the same formula is recorded with ops."""

    __slots__ = ("mean",)

    def backward(self, g: Tensor) -> tuple:
        ea, eb = self.next_edges
        dev = g.device
        if tls.grad_enabled:  # See Note [First-order formulas] in _core.py
            F = OPS
        else:
            F, g = ARRAYS[dev.kernels], g._data
        a, b = F.saved(self)
        ga = F.mse_grad(g, a, b, self.mean)  # a fresh array, kept nowhere else (as -ga): Note [Gradient ownership]
        return (F.owned(ga, dev, ea[0]) if ea[0] is not None else None,
                F.owned(F.neg(ga), dev, eb[0]) if eb[0] is not None else None)


def mse_grad(g: Tensor, a: Tensor, b: Tensor, mean: bool) -> Tensor:
    """mse_loss's gradient for its input, ``(a - b) * (norm * g)``, with ops: the fused tables'
    ``mse_grad``."""
    return mul(sub(a, b), mul(g, 2.0 / a.numel() if mean else 2.0))


def _mse_fused(input: Tensor, target: Tensor, mean: bool) -> Tensor:  # noqa: A002 - torch's name
    out = _wrap(input.device.kernels.mse(input._data, target._data, mean), input.device)
    if tls.grad_enabled and (input._rg or target._rg):
        node = MseLossBackward0()
        node.mean = mean
        record(node, (input, target), out, (input, target))
    return out


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """``(*, num_classes)`` int64 tensor with a 1 at each index of the int64 ``tensor`` and 0
    elsewhere, as ``torch.nn.functional.one_hot`` (``num_classes=-1``: one more than the
    largest index). Not differentiable (an integer tensor).

    >>> from threadgrad import engine, ops
    >>> ops.one_hot(engine.tensor([0, 2]), 3).tolist()
    [[1, 0, 0], [0, 0, 1]]
    """
    check_tensor(tensor, "one_hot", "tensor")
    if tensor.dtype != "int64":
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    xp = tensor.device.xp
    data = tensor._data
    if num_classes == -1:
        if data.size == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(data.max()) + 1
    if data.size and int(data.min()) < 0:
        raise RuntimeError("Class values must be non-negative.")
    if data.size and int(data.max()) >= num_classes:
        raise RuntimeError("Class values must be smaller than num_classes.")
    out = (data[..., None] == xp.arange(num_classes)).astype("int64")
    return _wrap(out, tensor.device)


# The formula namespaces' names for these ops: See Note [First-order formulas] in _core.py.
OPS.mse_grad = mse_grad
