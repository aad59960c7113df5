"""Chapter 7, positions added to the tokens: why attention needs them (equivariance_gap),
the sinusoidal table and the learned one (absolute position encodings, the part of the
positions chapter that comes before RoPE, solutions/rotary.py).

Attention without positions is permutation-equivariant (equivariance_gap measures
it): shuffle the tokens and the outputs are shuffled the same way, so "dog bites man" and
"man bites dog" look alike to it. An absolute encoding adds a vector per position to each
token's embedding, once, before the first layer.

Shape letters: B batch, L positions, D = d_model (even for the sinusoidal table), P = D // 2
feature pairs.

Sinusoidal (Vaswani et al., 2017, section 3.5): PE[p, 2i] = sin(p w_i) and
PE[p, 2i + 1] = cos(p w_i), with w_i = base ** (-2i / D): the frequencies of RoPE's pairs
(rotary.rotary_angles), pairing neighbouring features as the paper does. Moving k positions
turns each pair by the angle k w_i, so PE[p + k] is a fixed linear map of PE[p]
(shift_matrix), the property the paper gives for choosing it; RoPE applies the same
rotation to queries and keys in every layer instead of adding it once.
"""
import torch
from torch import nn

from ._checks import check_tensor
from .rotary import rotary_angles


def _check_even(d_model):
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model <= 0 \
            or d_model % 2:
        raise ValueError(f"d_model must be a positive even int (sin and cos in pairs), "
                         f"got {d_model!r}")


def sinusoidal_positions(num_positions, d_model, base=10000.0, dtype=torch.float32,
                         device=None):
    """The (num_positions, d_model) table: row p holds sin(p w_i) at feature 2i and
    cos(p w_i) at feature 2i + 1, w_i = base ** (-2i / d_model). Computed in float64 (p w_i
    for p in the thousands loses digits in float32), returned in `dtype`."""
    _check_even(d_model)
    if isinstance(num_positions, bool) or not isinstance(num_positions, int) \
            or num_positions < 0:
        raise ValueError(f"num_positions must be an int >= 0, got {num_positions!r}")
    positions = torch.arange(num_positions, dtype=torch.float64, device=device)   # (L,)
    cos, sin = rotary_angles(positions, d_model, base)                              # (L, P) x 2
    table = torch.stack([sin, cos], dim=-1).reshape(num_positions, d_model)         # (L, D)
    return table.to(dtype)


def shift_matrix(offset, d_model, base=10000.0, dtype=torch.float64):
    """The (d_model, d_model) block-diagonal rotation M with PE[p + offset] = M @ PE[p] for
    every p (PE = sinusoidal_positions): pair i, (sin, cos) of p w_i, turns by offset w_i.
    The same M for every p: the offset, not the position, decides it."""
    _check_even(d_model)
    cos, sin = rotary_angles(torch.tensor([float(offset)], dtype=torch.float64), d_model,
                             base)                                           # (1, P) x 2
    c, s = cos[0], sin[0]                                                    # (P,) x 2
    # sin(a + b) = sin a cos b + cos a sin b;  cos(a + b) = cos a cos b - sin a sin b
    blocks = torch.stack([torch.stack([c, s], -1), torch.stack([-s, c], -1)], -2)  # (P, 2, 2)
    return torch.block_diag(*blocks).to(dtype)                               # (D, D)


class LearnedPositions(nn.Module):
    """A trained table of max_positions rows of d_model features (GPT-2's wpe), added to
    the tokens: forward(x (B, L, D), start=0) -> x + table[start : start + L], (B, L, D).
    `start` is the position of x's first token (a cache of `start` tokens before it while
    decoding). No row exists past max_positions - 1: a learned table cannot extrapolate."""

    def __init__(self, max_positions, d_model):
        super().__init__()
        self.table = nn.Embedding(max_positions, d_model)

    def forward(self, x, start=0):
        check_tensor(x, "x", rank=3)
        L, limit = x.shape[1], self.table.num_embeddings
        if start < 0 or start + L > limit:
            raise ValueError(f"positions {start}..{start + L - 1} requested, but the learned "
                             f"table has rows for positions 0..{limit - 1} only: it was "
                             "trained for that many and cannot extrapolate")
        positions = torch.arange(start, start + L, device=x.device)     # (L,)
        return x + self.table(positions)                                # (B, L, D)


def equivariance_gap(layer, x, perm):
    """max |layer(x[:, perm]) - layer(x)[:, perm]| for a layer (B, L, D) -> (B, L, D), x
    (B, L, D) and a permutation perm (L,) of the positions, as a float. About 0 (rounding)
    when the layer is permutation-equivariant, as attention without positions is."""
    with torch.no_grad():
        permuted_first = layer(x[:, perm])          # (B, L, D)
        permuted_after = layer(x)[:, perm]          # (B, L, D)
    return (permuted_first - permuted_after).abs().max().item()
