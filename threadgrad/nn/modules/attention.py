"""``nn.MultiheadAttention``, as torch/nn/modules/activation.py's, with torch's
``multi_head_attention_forward`` written out over threadgrad's ops (a composition: its
backward and double backward come from those ops, Note [Composite functionals] in
threadgrad/nn/functional.py)."""
from __future__ import annotations

import math
from typing import Any

import numpy

from ... import ops
from ...engine import creation
from ...engine.tensor import Tensor, _wrap
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .linear import Linear
from .module import Module


class NonDynamicallyQuantizableLinear(Linear):
    """``MultiheadAttention.out_proj``'s class: a Linear under torch's name for it (its repr
    and type name are torch's)."""


def _canonical_mask(mask: Any, name: str, dtype: Any) -> Any:
    """A mask as an additive float mask of ``dtype``: a boolean one's True (masked out, in
    MultiheadAttention's convention, the opposite of scaled_dot_product_attention's) becomes
    -inf, its False 0; a float one stays as it is."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a Tensor, got {type(mask).__name__}")
    if mask.dtype == numpy.bool_:
        xp = mask.device.xp
        return _wrap(xp.where(mask._data, xp.asarray(-math.inf, dtype=dtype), xp.asarray(0.0, dtype=dtype)),
                     mask.device)
    if mask.dtype.kind != "f":
        raise AssertionError(f"only bool and floating types of {name} are supported")
    return mask


def _pad_last(mask: Any) -> Any:
    """``F.pad(mask, (0, 1))``: one zero column more (for the bias or zero attention slot)."""
    if mask is None:
        return None
    zeros = creation.zeros(*(tuple(mask.shape[:-1]) + (1,)), dtype=mask.dtype, device=mask.device)
    return ops.cat([mask, zeros], dim=-1)


class MultiheadAttention(Module):
    """``MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
    add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None, dtype=None)``,
    torch's parameters (``in_proj_weight``/``in_proj_bias`` packed, or ``q_proj_weight``,
    ``k_proj_weight``, ``v_proj_weight`` when ``kdim``/``vdim`` differ; ``out_proj``;
    ``bias_k``/``bias_v``), initialization (xavier_uniform_ projections, zero biases) and
    forward: ``forward(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False)`` returns ``(output,
    weights)``, weights averaged over heads unless ``average_attn_weights=False``, None
    unless ``need_weights``. Boolean masks are True where attention is *not* allowed."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: Any = None, dtype: Any = None) -> None:
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        kw = {"device": device, "dtype": dtype}
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = Parameter(creation.empty(embed_dim, embed_dim, **kw))
            self.k_proj_weight = Parameter(creation.empty(embed_dim, self.kdim, **kw))
            self.v_proj_weight = Parameter(creation.empty(embed_dim, self.vdim, **kw))
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = Parameter(creation.empty(3 * embed_dim, embed_dim, **kw))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(creation.empty(3 * embed_dim, **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = Parameter(creation.empty(1, 1, embed_dim, **kw))
            self.bias_v = Parameter(creation.empty(1, 1, embed_dim, **kw))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple:
        if query.ndim not in (2, 3):
            raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received {query.ndim}-D "
                                 "query tensor")
        batched = query.ndim == 3
        if key.ndim != query.ndim or value.ndim != query.ndim:
            raise AssertionError(f"For {'batched (3-D)' if batched else 'unbatched (2-D)'} `query`, expected `key` "
                                 f"and `value` to be {query.ndim}-D but found {key.ndim}-D and {value.ndim}-D "
                                 "tensors respectively")
        if self.batch_first and batched:
            query, key, value = (ops.transpose(t, 0, 1) for t in (query, key, value))
        if not batched:
            query, key, value = (ops.unsqueeze(t, 1) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = ops.unsqueeze(key_padding_mask, 0)
        out, weights = self._attend(query, key, value, key_padding_mask, need_weights, attn_mask,
                                    average_attn_weights, is_causal)
        if not batched:
            out = ops.squeeze(out, 1)
            if weights is not None:
                weights = ops.squeeze(weights, 0)
        elif self.batch_first:
            out = ops.transpose(out, 0, 1)
        return out, weights

    def _attend(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Any, need_weights: bool,
                attn_mask: Any, average_attn_weights: bool, is_causal: bool) -> tuple:
        """torch's multi_head_attention_forward on (L, N, E) query and (S, N, kdim/vdim) key/value."""
        tgt_len, bsz, embed_dim = query.shape
        heads, head_dim = self.num_heads, self.head_dim
        if embed_dim != self.embed_dim:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, but got {embed_dim}")
        key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask", query.dtype)
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                               "method `generate_square_subsequent_mask` to create this mask.")
        attn_mask = _canonical_mask(attn_mask, "attn_mask", query.dtype)  # (is_causal is only a hint)
        e = self.embed_dim
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[0:e], b[e:2 * e], b[2 * e:])
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            wq, wk, wv = w[0:e], w[e:2 * e], w[2 * e:]
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        if key.shape[:2] != value.shape[:2]:
            raise AssertionError(f"key's sequence and batch dims {tuple(key.shape[:2])} do not match value's "
                                 f"{tuple(value.shape[:2])}")
        q, k, v = F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)
        src_len = key.shape[0]
        if attn_mask is not None:
            if attn_mask.ndim == 2:
                if tuple(attn_mask.shape) != (tgt_len, src_len):
                    raise RuntimeError(f"The shape of the 2D attn_mask is {_size(attn_mask.shape)}, but should be "
                                       f"{(tgt_len, src_len)}.")
                attn_mask = ops.unsqueeze(attn_mask, 0)
            elif attn_mask.ndim == 3:
                if tuple(attn_mask.shape) != (bsz * heads, tgt_len, src_len):
                    raise RuntimeError(f"The shape of the 3D attn_mask is {_size(attn_mask.shape)}, but should be "
                                       f"{(bsz * heads, tgt_len, src_len)}.")
            else:
                raise RuntimeError(f"attn_mask's dimension {attn_mask.ndim} is not supported")
        if self.bias_k is not None and self.bias_v is not None:
            k = ops.cat([k, ops.expand(self.bias_k, (1, bsz, e))])
            v = ops.cat([v, ops.expand(self.bias_v, (1, bsz, e))])
            attn_mask, key_padding_mask = _pad_last(attn_mask), _pad_last(key_padding_mask)
        q = ops.transpose(ops.reshape(q, (tgt_len, bsz * heads, head_dim)), 0, 1)
        k = ops.transpose(ops.reshape(k, (k.shape[0], bsz * heads, head_dim)), 0, 1)
        v = ops.transpose(ops.reshape(v, (v.shape[0], bsz * heads, head_dim)), 0, 1)
        if self.add_zero_attn:
            zeros = creation.zeros(bsz * heads, 1, head_dim, dtype=k.dtype, device=k.device)
            k, v = ops.cat([k, zeros], dim=1), ops.cat([v, zeros], dim=1)
            attn_mask, key_padding_mask = _pad_last(attn_mask), _pad_last(key_padding_mask)
        src_len = k.shape[1]
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (bsz, src_len):
                raise AssertionError(f"expecting key_padding_mask shape of {(bsz, src_len)}, but got "
                                     f"{tuple(key_padding_mask.shape)}")
            kpm = ops.reshape(ops.expand(ops.reshape(key_padding_mask, (bsz, 1, 1, src_len)),
                                         (bsz, heads, 1, src_len)), (bsz * heads, 1, src_len))
            attn_mask = kpm if attn_mask is None else ops.add(attn_mask, kpm)
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            scores = ops.matmul(ops.mul(q, math.sqrt(1.0 / float(head_dim))), ops.transpose(k, -2, -1))
            if attn_mask is not None:
                scores = ops.add(attn_mask, scores)
            weights = ops.softmax(scores, -1)
            if dropout_p > 0.0:
                weights = ops.dropout(weights, dropout_p, True)
            out = ops.matmul(weights, v)  # (N*H, L, hd)
            out = ops.reshape(ops.transpose(out, 0, 1), (tgt_len * bsz, embed_dim))
            out = ops.reshape(F.linear(out, self.out_proj.weight, self.out_proj.bias), (tgt_len, bsz, embed_dim))
            weights = ops.reshape(weights, (bsz, heads, tgt_len, src_len))
            if average_attn_weights:
                weights = ops.mean(weights, 1)
            return out, weights
        if attn_mask is not None:
            attn_mask = (ops.unsqueeze(attn_mask, 0) if attn_mask.shape[0] == 1
                         else ops.reshape(attn_mask, (bsz, heads, -1, src_len)))
        q4 = ops.reshape(q, (bsz, heads, tgt_len, head_dim))
        k4 = ops.reshape(k, (bsz, heads, src_len, head_dim))
        v4 = ops.reshape(v, (bsz, heads, src_len, head_dim))
        out = F.scaled_dot_product_attention(q4, k4, v4, attn_mask, dropout_p)
        out = ops.reshape(ops.permute(out, (2, 0, 1, 3)), (bsz * tgt_len, embed_dim))
        out = ops.reshape(F.linear(out, self.out_proj.weight, self.out_proj.bias), (tgt_len, bsz, embed_dim))
        return out, None

    def extra_repr(self) -> str:
        return ""


def _size(shape: Any) -> str:
    return f"torch.Size([{', '.join(str(int(n)) for n in shape)}])"
