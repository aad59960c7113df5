"""Chapter 4: boolean attention masks, True = may attend.

Our masks follow F.scaled_dot_product_attention: True means "this query may look at
this key". nn.MultiheadAttention's `key_padding_mask` and boolean `attn_mask` mean the
opposite (True = ignore); the converters below cross between the two conventions.
Masks combine with `&` and broadcasting: padding (B, 1, 1, Lk) & causal (Lq, Lk)
gives (B, 1, Lq, Lk), which broadcasts over the heads.
"""
import torch


def padding_mask(lengths, max_len):
    """lengths: (B,) ints, the number of real tokens in each sequence.
    Returns (B, 1, 1, max_len) bool: True at positions < length (real tokens).
    The two singleton axes broadcast over heads and query positions.
    """
    if not isinstance(lengths, torch.Tensor):
        lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1:
        raise ValueError(f"lengths must have shape (B,), got {tuple(lengths.shape)}")
    if lengths.is_floating_point() or lengths.dtype == torch.bool or lengths.is_complex():
        raise TypeError(f"lengths must hold integers, got dtype {lengths.dtype}")
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 0:
        raise ValueError(f"max_len must be a non-negative int, got {max_len!r}")
    if lengths.numel() and (lengths.min() < 0 or lengths.max() > max_len):
        raise ValueError(
            f"lengths must lie in [0, max_len={max_len}], got {lengths.tolist()}"
        )
    positions = torch.arange(max_len, device=lengths.device)  # (max_len,)
    real = positions < lengths[:, None]                         # (B, max_len)
    return real[:, None, None, :]                               # (B, 1, 1, max_len)


def causal_mask(q_len, k_len=None, device=None):
    """(q_len, k_len) bool, lower triangular: query i may attend to keys 0..i.

    Aligned at the top-left corner, as F.scaled_dot_product_attention(is_causal=True).
    """
    k_len = q_len if k_len is None else k_len
    for name, v in (("q_len", q_len), ("k_len", k_len)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be a non-negative int, got {v!r}")
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril()


def _check_bool(mask, name):
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must have dtype torch.bool, got {mask.dtype}")


def to_torch_key_padding_mask(mask):
    """Our padding mask (B, 1, 1, Lk) or (B, Lk), True = real token ->
    nn.MultiheadAttention's key_padding_mask (B, Lk), True = padding (ignore)."""
    _check_bool(mask, "mask")
    if mask.dim() == 4 and mask.shape[1] == mask.shape[2] == 1:
        mask = mask[:, 0, 0, :]
    if mask.dim() != 2:
        raise ValueError(
            f"a padding mask must have shape (B, 1, 1, Lk) or (B, Lk), got {tuple(mask.shape)}"
        )
    return ~mask


def from_torch_key_padding_mask(key_padding_mask):
    """nn.MultiheadAttention's key_padding_mask (B, Lk), True = ignore ->
    our padding mask (B, 1, 1, Lk), True = may attend."""
    _check_bool(key_padding_mask, "key_padding_mask")
    if key_padding_mask.dim() != 2:
        raise ValueError(
            f"key_padding_mask must have shape (B, Lk), got {tuple(key_padding_mask.shape)}"
        )
    return ~key_padding_mask[:, None, None, :]


def to_torch_attn_mask(mask):
    """Our mask (Lq, Lk) or (B, num_heads, Lq, Lk), True = may attend ->
    nn.MultiheadAttention's boolean attn_mask, True = not allowed:
    (Lq, Lk) stays (Lq, Lk); (B, num_heads, Lq, Lk) becomes (B * num_heads, Lq, Lk)."""
    _check_bool(mask, "mask")
    if mask.dim() == 2:
        return ~mask
    if mask.dim() == 4:
        B, h, Lq, Lk = mask.shape
        return ~mask.reshape(B * h, Lq, Lk)
    raise ValueError(
        f"mask must have shape (Lq, Lk) or (B, num_heads, Lq, Lk) (expand broadcast axes "
        f"first), got {tuple(mask.shape)}"
    )


def from_torch_attn_mask(attn_mask, num_heads=None):
    """nn.MultiheadAttention's attn_mask -> ours (True = may attend).

    Boolean (True = not allowed) is inverted; a float additive mask may hold only 0
    (allowed) and -inf (not allowed): other values are biases, which no boolean mask
    can express. (Lq, Lk) stays (Lq, Lk); (B * num_heads, Lq, Lk) becomes
    (B, num_heads, Lq, Lk) when num_heads is given.
    """
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"attn_mask must be a torch.Tensor, got {type(attn_mask).__name__}")
    if attn_mask.dtype == torch.bool:
        allowed = ~attn_mask
    elif attn_mask.is_floating_point():
        blocked = attn_mask == float("-inf")
        if not ((attn_mask == 0) | blocked).all():
            raise ValueError(
                "a float attn_mask can be converted only if it holds just 0 and -inf; "
                "other values are additive biases, not a mask"
            )
        allowed = ~blocked
    else:
        raise TypeError(f"attn_mask must be bool or float, got dtype {attn_mask.dtype}")
    if allowed.dim() == 3 and num_heads is not None:
        BH, Lq, Lk = allowed.shape
        if BH % num_heads:
            raise ValueError(
                f"attn_mask's first axis {BH} is not B * num_heads for num_heads={num_heads}"
            )
        allowed = allowed.view(BH // num_heads, num_heads, Lq, Lk)
    elif allowed.dim() not in (2, 3):
        raise ValueError(
            f"attn_mask must have shape (Lq, Lk) or (B * num_heads, Lq, Lk), got "
            f"{tuple(attn_mask.shape)}"
        )
    return allowed
