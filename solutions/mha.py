"""Chapter 3: multi-head attention = project, split, attend per head, merge, project.

Shape letters: B batch, Lq query length, Lk key length, h num_heads,
hd head_dim, D d_model (= h * hd unless head_dim is given, e.g. after pruning).
"""
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import (check_heads, check_mask, check_positive_int, check_same_device_and_dtype,
                      check_tensor)
from .attention import scaled_dot_product_attention
from .heads import merge_heads, split_heads


class HeadWeights(NamedTuple):
    """Per-head matrices in the papers' x @ W convention (nn.Linear stores W transposed).

    query (h, query_size, hd), key (h, key_size, hd), value (h, value_size, hd):
        W_Q^i, W_K^i, W_V^i, so head i's queries are `x @ query[i] + query_bias[i]`.
    output (h, hd, D): W_O's row block for head i; the module's output is
        sum_i head_i @ output[i] + output_bias.
    Biases: query_bias/key_bias/value_bias (h, hd) and output_bias (D,), or None.
    """

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    output: torch.Tensor
    query_bias: torch.Tensor = None
    key_bias: torch.Tensor = None
    value_bias: torch.Tensor = None
    output_bias: torch.Tensor = None


class MultiHeadAttention(nn.Module):
    """Multi-head attention with separate query/key/value inputs, batch first.

    MultiHeadAttention(d_model, num_heads, *, query_size=None, key_size=None,
    value_size=None, bias=True, dropout=0.0, head_dim=None)

    query_size/key_size/value_size are the feature sizes of the three inputs
    (default d_model); head_dim defaults to d_model // num_heads, which must divide.
    Parameters: q_proj (query_size -> h*hd), k_proj, v_proj, out_proj (h*hd -> D).
    """

    def __init__(self, d_model, num_heads, *, query_size=None, key_size=None,
                 value_size=None, bias=True, dropout=0.0, head_dim=None,
                 device=None, dtype=None):
        super().__init__()
        if head_dim is None:
            head_dim = check_heads(d_model, num_heads)
        else:  # explicit head_dim (e.g. after pruning): num_heads * head_dim may differ from d_model
            for name, v in (("d_model", d_model), ("num_heads", num_heads), ("head_dim", head_dim)):
                check_positive_int(v, name)
        for name, v in (("query_size", query_size), ("key_size", key_size),
                        ("value_size", value_size)):
            check_positive_int(v, name, optional=True)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, head_dim
        self.query_size = query_size or d_model
        self.key_size = key_size or d_model
        self.value_size = value_size or d_model
        self.dropout = dropout
        inner = num_heads * head_dim
        kw = dict(bias=bias, device=device, dtype=dtype)
        self.q_proj = nn.Linear(self.query_size, inner, **kw)
        self.k_proj = nn.Linear(self.key_size, inner, **kw)
        self.v_proj = nn.Linear(self.value_size, inner, **kw)
        self.out_proj = nn.Linear(inner, d_model, **kw)
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(proj.weight)
            if bias:
                nn.init.zeros_(proj.bias)

    @property
    def bias(self):
        return self.q_proj.bias is not None

    def extra_repr(self):
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, head_dim={self.head_dim}, "
                f"bias={self.bias}, dropout={self.dropout}")

    # ---------------------------------------------------------------- forward
    def forward(self, query, key, value, mask=None, need_weights=True, head_mask=None):
        """query (B, Lq, query_size), key (B, Lk, key_size), value (B, Lk, value_size).

        mask: bool broadcastable to (B, h, Lq, Lk), True = may attend; e.g. a padding
              mask (B, 1, 1, Lk), a causal mask (Lq, Lk), or both combined with `&`.
        head_mask: (h,) or (B, h) gate per head, multiplied into each head's output
              before W_O (0 switches a head off); chapter 5 uses it.
        Returns (output (B, Lq, D), weights (B, h, Lq, Lk) or None). need_weights=False
        takes the fast path: fused projections and F.scaled_dot_product_attention.
        """
        self._check_inputs(query, key, value)
        B, Lq, Lk = query.shape[0], query.shape[1], key.shape[1]
        check_mask(mask, (B, self.num_heads, Lq, Lk), query.device)
        head_mask = self._check_head_mask(head_mask, B, query)
        dropout_p = self.dropout if self.training else 0.0

        if need_weights:  # the readable path, exactly as the chapters build it
            q = split_heads(self.q_proj(query), self.num_heads)  # (B, h, Lq, hd)
            k = split_heads(self.k_proj(key), self.num_heads)    # (B, h, Lk, hd)
            v = split_heads(self.v_proj(value), self.num_heads)  # (B, h, Lk, hd)
            heads, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p)
        else:
            q, k, v = self._fused_projections(query, key, value)
            heads, weights = self._fast_attention(q, k, v, mask, dropout_p), None
        if head_mask is not None:
            heads = heads * head_mask                            # (B, h, Lq, hd)
        return self.out_proj(merge_heads(heads)), weights        # (B, Lq, D)

    def _fused_projections(self, query, key, value):
        """Q, K, V as (B, h, L, hd) views, with one matmul for the inputs that coincide."""
        h, hd = self.num_heads, self.head_dim
        projs = (self.q_proj, self.k_proj, self.v_proj)
        if query is key is value:
            groups = [(query, projs)]                  # self-attention: one (3*h*hd) matmul
        elif key is value:
            groups = [(query, projs[:1]), (key, projs[1:])]  # cross-attention: K and V fused
        else:
            groups = [(x, (p,)) for x, p in zip((query, key, value), projs)]
        out = []
        for x, group in groups:
            weight = torch.cat([p.weight for p in group]) if len(group) > 1 else group[0].weight
            bias = None
            if self.bias:
                bias = torch.cat([p.bias for p in group]) if len(group) > 1 else group[0].bias
            y = F.linear(x, weight, bias)                       # (B, L, n*h*hd)
            y = y.view(x.shape[0], x.shape[1], len(group), h, hd)
            out.extend(y.permute(2, 0, 3, 1, 4).unbind(0))    # n x (B, h, L, hd)
        return out

    @staticmethod
    def _fast_attention(q, k, v, mask, dropout_p):
        """F.scaled_dot_product_attention with our fully-masked-row rule: zeros, no NaN."""
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
        if mask.dim() < 2:                                  # (Lk,) or 0-d: F.sdpa needs a
            mask = mask.reshape(1, -1)                      # 2-d mask; same broadcast
        has_key = mask.any(dim=-1, keepdim=True)            # (..., Lq, 1)
        # Let fully masked rows attend everywhere (finite), then zero their output, so
        # no backend ever sees a row with no key (some give NaN there).
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~has_key,
                                             dropout_p=dropout_p)
        return out.masked_fill(~has_key, 0.0)               # (B, h, Lq, hd)

    # ---------------------------------------------------------------- checks
    def _check_inputs(self, query, key, value):
        for name, x, size in (("query", query, self.query_size), ("key", key, self.key_size),
                              ("value", value, self.value_size)):
            check_tensor(x, name, rank=3)
            if x.shape[-1] != size:
                raise ValueError(
                    f"{name} must have shape (B, L, {size}) ({name}_size={size}), "
                    f"got {tuple(x.shape)}"
                )
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(
                f"query, key and value must share the batch size B: got {tuple(query.shape)}, "
                f"{tuple(key.shape)}, {tuple(value.shape)}"
            )
        if key.shape[1] != value.shape[1]:
            raise ValueError(
                f"key and value must have the same length Lk: key {tuple(key.shape)}, "
                f"value {tuple(value.shape)}"
            )
        check_same_device_and_dtype(query=query, key=key, value=value,
                                    parameters=self.q_proj.weight)

    def _check_head_mask(self, head_mask, B, query):
        if head_mask is None:
            return None
        if not isinstance(head_mask, torch.Tensor):
            raise TypeError(f"head_mask must be a torch.Tensor, got {type(head_mask).__name__}")
        if head_mask.shape not in ((self.num_heads,), (B, self.num_heads)):
            raise ValueError(
                f"head_mask must have shape ({self.num_heads},) or ({B}, {self.num_heads}), "
                f"got {tuple(head_mask.shape)}"
            )
        if head_mask.device != query.device:
            raise ValueError(f"head_mask is on {head_mask.device} but query is on {query.device}")
        return head_mask.to(query.dtype)[..., :, None, None]   # (h, 1, 1) or (B, h, 1, 1)

    # ---------------------------------------------------------------- per-head view
    def head_weights(self):
        """The per-head matrices W_Q^i, W_K^i, W_V^i and W_O's blocks W_O^i, as HeadWeights.

        They are views of the fused nn.Linear weights: head i's W_Q^i is rows
        [i*hd, (i+1)*hd) of q_proj.weight, transposed. One big matrix and h small ones
        are the same parameters, arranged differently.
        """
        h, hd = self.num_heads, self.head_dim

        def per_head(proj):  # weight (h*hd, in) -> (h, in, hd)
            return proj.weight.view(h, hd, -1).transpose(1, 2)

        def bias(proj):
            return None if proj.bias is None else proj.bias.view(h, hd)

        return HeadWeights(
            query=per_head(self.q_proj), key=per_head(self.k_proj),
            value=per_head(self.v_proj),
            output=self.out_proj.weight.T.reshape(h, hd, self.d_model),  # (h, hd, D)
            query_bias=bias(self.q_proj), key_bias=bias(self.k_proj),
            value_bias=bias(self.v_proj), output_bias=self.out_proj.bias,
        )

    # ---------------------------------------------------------------- nn.MultiheadAttention
    @classmethod
    def from_torch(cls, m):
        """A MultiHeadAttention with the weights of `m`, an nn.MultiheadAttention.

        Our forward is batch first; for an `m` built with batch_first=False, transpose
        its inputs when comparing. add_bias_kv and add_zero_attn have no counterpart here.
        """
        if not isinstance(m, nn.MultiheadAttention):
            raise TypeError(f"expected nn.MultiheadAttention, got {type(m).__name__}")
        if m.bias_k is not None or m.add_zero_attn:
            raise ValueError("add_bias_kv and add_zero_attn are not supported")
        E = m.embed_dim
        ref = m.out_proj.weight
        new = cls(E, m.num_heads, key_size=m.kdim, value_size=m.vdim,
                  bias=m.in_proj_bias is not None, dropout=m.dropout,
                  device=ref.device, dtype=ref.dtype)
        if m._qkv_same_embed_dim:
            wq, wk, wv = m.in_proj_weight.chunk(3)
        else:
            wq, wk, wv = m.q_proj_weight, m.k_proj_weight, m.v_proj_weight
        with torch.no_grad():
            for proj, w in zip((new.q_proj, new.k_proj, new.v_proj), (wq, wk, wv)):
                proj.weight.copy_(w)
            new.out_proj.weight.copy_(m.out_proj.weight)
            if new.bias:
                for proj, b in zip((new.q_proj, new.k_proj, new.v_proj), m.in_proj_bias.chunk(3)):
                    proj.bias.copy_(b)
                new.out_proj.bias.copy_(m.out_proj.bias)
        return new.train(m.training)

    def to_torch(self):
        """An nn.MultiheadAttention(batch_first=True) with these weights."""
        if self.num_heads * self.head_dim != self.d_model or self.query_size != self.d_model:
            raise ValueError(
                "nn.MultiheadAttention needs query_size == d_model == num_heads * head_dim; "
                f"here query_size={self.query_size}, d_model={self.d_model}, "
                f"num_heads * head_dim={self.num_heads * self.head_dim}"
            )
        ref = self.out_proj.weight
        m = nn.MultiheadAttention(self.d_model, self.num_heads, dropout=self.dropout,
                                  bias=self.bias, kdim=self.key_size, vdim=self.value_size,
                                  batch_first=True, device=ref.device, dtype=ref.dtype)
        weights = [p.weight for p in (self.q_proj, self.k_proj, self.v_proj)]
        with torch.no_grad():
            if m._qkv_same_embed_dim:
                m.in_proj_weight.copy_(torch.cat(weights))
            else:
                for dst, w in zip((m.q_proj_weight, m.k_proj_weight, m.v_proj_weight), weights):
                    dst.copy_(w)
            m.out_proj.weight.copy_(self.out_proj.weight)
            if self.bias:
                m.in_proj_bias.copy_(torch.cat([self.q_proj.bias, self.k_proj.bias,
                                                self.v_proj.bias]))
                m.out_proj.bias.copy_(self.out_proj.bias)
        return m.train(self.training)
