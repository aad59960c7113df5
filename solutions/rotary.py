"""Chapter 7: rotary position embedding (RoPE, Su et al. 2021), applied per head, and in
decoding with chapter 6's KV cache.

Shape letters: B batch, h heads, L length, hd head_dim (even), P = hd // 2 feature pairs.

Pairing: the "halves" layout of Hugging Face's Llama (rotate_half), feature i is paired
with feature i + hd/2. The paper and Meta's reference code for Llama (view_as_complex of
neighbouring features) pair neighbours (2i, 2i + 1) instead ("interleaved"). Both rotate
the same P two-dimensional planes by the same angles; they differ only in which features
form a plane, i.e. by a fixed permutation of the hd features. Applied to queries and keys
alike, a permutation of features leaves every dot product, hence every score, unchanged,
so a model trained with one layout works with the other once its W_Q and W_K rows are
permuted to match.
"""
import torch

from ._checks import check_tensor
from .kv import attend_heads, decoding_causal_mask, project_heads


def rotary_angles(positions, head_dim, base=10000.0):
    """positions (L,) ints or floats -> (cos, sin), each (L, head_dim // 2), float32 (or
    positions' float dtype): pair i at position p turns by p * base ** (-2i / head_dim)."""
    if not isinstance(positions, torch.Tensor):
        positions = torch.as_tensor(positions)
    if positions.dim() != 1:
        raise ValueError(f"positions must have shape (L,), got {tuple(positions.shape)}")
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim <= 0 \
            or head_dim % 2:
        raise ValueError(f"head_dim must be a positive even int (pairs of features), "
                         f"got {head_dim!r}")
    dtype = positions.dtype if positions.is_floating_point() else torch.float32
    pair = torch.arange(head_dim // 2, device=positions.device, dtype=torch.float64)
    inv_freq = base ** (-2 * pair / head_dim)                      # (P,)
    angles = positions.to(torch.float64)[:, None] * inv_freq       # (L, P)
    # angles in float64: position * frequency for positions in the thousands loses
    # digits in float32 before the cos/sin
    return angles.cos().to(dtype), angles.sin().to(dtype)          # (L, P) x 2


def apply_rotary(x, positions, base=10000.0):
    """Rotate the feature pairs (i, i + hd/2) of x (..., L, hd) by the angles of their
    positions (L,); returns the same shape and dtype. Apply it to queries and keys of
    every head (never to values): then q_m . k_n depends on m - n only."""
    check_tensor(x, "x", min_rank=2)
    L, hd = x.shape[-2], x.shape[-1]
    positions = torch.as_tensor(positions, device=x.device)
    if positions.shape != (L,):
        raise ValueError(f"positions must have shape (L,) = ({L},) for x of shape "
                         f"{tuple(x.shape)}, got {tuple(positions.shape)}")
    cos, sin = rotary_angles(positions.to(torch.float64), hd, base)  # (L, P) x 2
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)    # rounded once, to x's precision
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]                   # (..., L, P) x 2
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (..., L, hd)


def rotary_cached_attention(attn, x_new, cache, base=10000.0):
    """Chapter 6's cached_attention with rotary positions on the queries and the new keys:
    x_new (B, L_new, D) -> (B, L_new, D); appends the rotated keys and the values to `cache`.
    The new positions are len(cache) .. len(cache) + L_new - 1 (read before the append), so
    every cached key is rotated once, with its own position; every step equals the rows of
    full causal rotary attention."""
    start = len(cache)
    q, k, v = project_heads(attn, x_new)     # (B, h, L_new, hd), (B, g, L_new, hd) x 2
    positions = torch.arange(start, start + q.shape[-2], device=x_new.device)  # (L_new,)
    q, k = apply_rotary(q, positions, base), apply_rotary(k, positions, base)
    k, v = cache.append(k, v)                # (B, g, T, hd), keys rotated once
    mask = decoding_causal_mask(q.shape[-2], k.shape[-2], device=x_new.device)  # (L_new, T)
    return attend_heads(attn, q, k, v, mask)  # (B, L_new, D)
