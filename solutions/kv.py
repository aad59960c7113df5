"""Chapter 6: heads that share keys and values (MQA/GQA), and decoding with a KV cache.

Shape letters: B batch, L (new) sequence length, T total length (cached + new),
h num_heads (query heads), g num_kv_heads (key/value heads), G = h // g query heads
per key/value head, hd head_dim, D d_model = h * hd.
"""
import torch
import torch.nn as nn

from ._checks import (check_heads, check_mask, check_positive_int, check_same_device_and_dtype,
                      check_tensor)
from .attention import scaled_dot_product_attention
from .heads import merge_heads


def check_kv_heads(num_heads, num_kv_heads):
    """Require num_kv_heads to divide num_heads; return G = num_heads // num_kv_heads."""
    check_positive_int(num_heads, "num_heads")
    check_positive_int(num_kv_heads, "num_kv_heads")
    if num_heads % num_kv_heads:
        raise ValueError(
            f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads}: each key/value "
            "head serves a whole group of query heads"
        )
    return num_heads // num_kv_heads


def repeat_kv(kv, num_heads):
    """(B, g, L, hd) -> (B, num_heads, L, hd): key/value head j serves query heads
    j*G .. j*G + G - 1, with G = num_heads // g.

    Each head is repeated G times *in place* (repeat_interleave, heads 0,0,1,1 for G = 2),
    Llama's layout and F.scaled_dot_product_attention(enable_gqa=True)'s; tiling the whole
    stack (kv.repeat, heads 0,1,0,1) would pair query heads with the wrong key heads.
    """
    check_tensor(kv, "kv", rank=4)
    B, g, L, hd = kv.shape
    G = check_kv_heads(num_heads, g)
    # expand is a view (no copy); the reshape copies once, into the layout the heads need
    return kv[:, :, None].expand(B, g, G, L, hd).reshape(B, g * G, L, hd)  # (B, h, L, hd)


def decoding_causal_mask(q_len, k_len, device=None):
    """(q_len, k_len) bool causal mask aligned at the bottom-right corner.

    The q_len queries are the *last* q_len of the k_len positions: query i sits at
    position k_len - q_len + i and may attend to keys 0 .. k_len - q_len + i.
    For q_len == k_len it is chapter 4's causal_mask; for q_len < k_len (decoding with a
    cache) chapter 4's top-left mask would let the newest query see only the first keys.
    """
    for name, v in (("q_len", q_len), ("k_len", k_len)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be a non-negative int, got {v!r}")
    if q_len > k_len:
        raise ValueError(f"q_len={q_len} new positions cannot exceed k_len={k_len} in total")
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)


class KVCache:
    """The keys and values of the positions seen so far, one layer's worth.

    keys, values: (B, g, T_cached, hd), or None while the cache is empty.
    """

    def __init__(self):
        self.keys = None
        self.values = None

    def __len__(self):
        return 0 if self.keys is None else self.keys.shape[-2]

    def append(self, keys, values):
        """keys, values (B, g, L_new, hd): append along the sequence axis and return the
        full (keys, values), each (B, g, T_cached + L_new, hd)."""
        check_tensor(keys, "keys", rank=4)
        check_tensor(values, "values", rank=4)
        if keys.shape[:-1] != values.shape[:-1]:
            raise ValueError(
                f"keys {tuple(keys.shape)} and values {tuple(values.shape)} must share "
                "(B, num_kv_heads, L_new)"
            )
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            if (keys.shape[:2] != self.keys.shape[:2] or keys.shape[-1] != self.keys.shape[-1]
                    or values.shape[-1] != self.values.shape[-1]):
                raise ValueError(
                    f"new keys {tuple(keys.shape)} / values {tuple(values.shape)} do not match "
                    f"the cached {tuple(self.keys.shape)} / {tuple(self.values.shape)} "
                    "outside the sequence axis"
                )
            check_same_device_and_dtype(cached=self.keys, keys=keys, values=values)
            self.keys = torch.cat([self.keys, keys], dim=-2)        # (B, g, T, hd)
            self.values = torch.cat([self.values, values], dim=-2)  # (B, g, T, hd)
        return self.keys, self.values


def project_heads(attn, x):
    """The query, key and value heads of x (B, L, D) under attn's projections.

    attn: chapter 3's MultiHeadAttention or a GroupedQueryAttention (anything with
    q_proj, k_proj, v_proj, num_heads, head_dim and optionally num_kv_heads).
    Returns q (B, h, L, hd), k and v (B, g, L, hd).
    """
    check_tensor(x, "x", rank=3)
    B, L, _ = x.shape
    h, hd = attn.num_heads, attn.head_dim
    g = getattr(attn, "num_kv_heads", h)
    q = attn.q_proj(x).view(B, L, h, hd).transpose(1, 2)   # (B, h, L, hd)
    k = attn.k_proj(x).view(B, L, g, hd).transpose(1, 2)   # (B, g, L, hd)
    v = attn.v_proj(x).view(B, L, g, hd).transpose(1, 2)   # (B, g, L, hd)
    return q, k, v


def attend_heads(attn, q, k, v, mask=None):
    """q (B, h, L, hd), k and v (B, g, T, hd), mask broadcastable to (B, h, L, T)
    -> attn.out_proj of the merged heads, (B, L, D)."""
    k = repeat_kv(k, attn.num_heads)                       # (B, h, T, hd)
    v = repeat_kv(v, attn.num_heads)                       # (B, h, T, hd)
    heads, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, h, L, hd)
    return attn.out_proj(merge_heads(heads))               # (B, L, D)


class GroupedQueryAttention(nn.Module):
    """Self-attention whose num_heads query heads share num_kv_heads key/value heads.

    GroupedQueryAttention(d_model, num_heads, num_kv_heads, *, bias=True)
    q_proj (D -> D), k_proj and v_proj (D -> g * hd), out_proj (D -> D), hd = D // h.
    num_kv_heads == num_heads is chapter 3's MultiHeadAttention; 1 is multi-query attention.
    """

    def __init__(self, d_model, num_heads, num_kv_heads, *, bias=True, device=None, dtype=None):
        super().__init__()
        self.head_dim = check_heads(d_model, num_heads)
        check_kv_heads(num_heads, num_kv_heads)
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        kv_size = num_kv_heads * self.head_dim
        kw = dict(bias=bias, device=device, dtype=dtype)
        self.q_proj = nn.Linear(d_model, d_model, **kw)
        self.k_proj = nn.Linear(d_model, kv_size, **kw)
        self.v_proj = nn.Linear(d_model, kv_size, **kw)
        self.out_proj = nn.Linear(d_model, d_model, **kw)

    def extra_repr(self):
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}")

    def forward(self, x, mask=None):
        """x (B, L, D); mask bool broadcastable to (B, h, L, L), True = may attend.
        Returns (B, L, D). (Decoding with a cache is cached_attention(self, x_new, cache).)"""
        check_tensor(x, "x", rank=3)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape (B, L, {self.d_model}), got {tuple(x.shape)}")
        check_same_device_and_dtype(x=x, parameters=self.q_proj.weight)
        q, k, v = project_heads(self, x)         # (B, h, L, hd), (B, g, L, hd) x 2
        check_mask(mask, (x.shape[0], self.num_heads, x.shape[1], x.shape[1]), x.device)
        return attend_heads(self, q, k, v, mask)  # (B, L, D)


def cached_attention(attn, x_new, cache):
    """Causal self-attention of the new positions x_new (B, L_new, D) over the cached ones
    and themselves; appends their keys and values to `cache` (a KVCache).

    attn: chapter 3's MultiHeadAttention or a GroupedQueryAttention. The new queries are
    the last L_new of T = len(cache) positions, so the causal mask is aligned at the
    bottom-right corner (decoding_causal_mask). Returns (B, L_new, D): with an empty cache
    it is full causal self-attention; one position per step gives, at every step, the
    row of full causal attention for that position. (Chapter 7's rotary_cached_attention,
    solutions/rotary.py, is the same with rotary positions on the queries and keys.)
    """
    q, k, v = project_heads(attn, x_new)     # (B, h, L_new, hd), (B, g, L_new, hd) x 2
    k, v = cache.append(k, v)                # (B, g, T, hd)
    mask = decoding_causal_mask(q.shape[-2], k.shape[-2], device=x_new.device)  # (L_new, T)
    return attend_heads(attn, q, k, v, mask)  # (B, L_new, D)


def count_gqa_parameters(d_model, num_heads, num_kv_heads, *, bias=True):
    """Parameters of GroupedQueryAttention(d_model, num_heads, num_kv_heads, bias=bias):
    2 * D * D for W_Q and W_O, plus 2 * D * (g * hd) for W_K and W_V, plus the biases."""
    head_dim = check_heads(d_model, num_heads)
    check_kv_heads(num_heads, num_kv_heads)
    kv_size = num_kv_heads * head_dim
    weights = 2 * d_model * d_model + 2 * d_model * kv_size
    biases = 2 * d_model + 2 * kv_size if bias else 0
    return weights + biases


def count_kv_cache_bytes(num_layers, num_kv_heads, head_dim, bytes_per_value=2):
    """Bytes of KV cache per token: a key and a value (2) of head_dim numbers for each
    key/value head of each layer, at bytes_per_value bytes each (2 for fp16/bf16)."""
    for name, v in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads),
                    ("head_dim", head_dim), ("bytes_per_value", bytes_per_value)):
        check_positive_int(v, name)
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_value
