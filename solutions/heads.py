"""Chapter 2: splitting d_model features into heads, and merging them back.

Shape letters: B batch, L sequence length, h num_heads, hd head_dim = d_model // h.
"""
from ._checks import check_heads, check_tensor


def split_heads(x, num_heads):
    """(B, L, d_model) -> (B, num_heads, L, head_dim); head i holds features
    [i*head_dim, (i+1)*head_dim).

    The transpose matters: without it a plain reshape to (B, num_heads, L, head_dim)
    would run without error but mix positions and heads, and attention would then
    compare features of different heads instead of different positions.
    """
    check_tensor(x, "x", rank=3)
    B, L, d_model = x.shape
    head_dim = check_heads(d_model, num_heads)
    x = x.view(B, L, num_heads, head_dim)  # (B, L, h, hd)
    return x.transpose(1, 2)               # (B, h, L, hd)


def merge_heads(x):
    """(B, num_heads, L, head_dim) -> (B, L, num_heads * head_dim); inverse of split_heads."""
    check_tensor(x, "x", rank=4)
    B, h, L, hd = x.shape
    return x.transpose(1, 2).reshape(B, L, h * hd)  # (B, L, h, hd) -> (B, L, d_model)
