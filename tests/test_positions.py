"""Chapter 7: solutions/positions.py (the sinusoidal table against the paper's formula, its
shift property, the learned table's limits, what either does to attention's permutation
equivariance) and solutions/rotary.py (rotary positions per head and in decoding).

References are independent: the papers' formulas written out in float64, Hugging Face's
rotate_half, and chapter 4's attention under a full causal mask.
"""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_helpers import TOL, naive_attention, randomize_
from solutions import MultiHeadAttention
from solutions.kv import GroupedQueryAttention, KVCache, attend_heads, project_heads
from solutions.masks import causal_mask
from solutions.positions import (LearnedPositions, equivariance_gap, shift_matrix,
                                 sinusoidal_positions)
from solutions.rotary import apply_rotary, rotary_angles, rotary_cached_attention


def gqa(seed=0):
    """GroupedQueryAttention(16, 4, 2) in float64 with random non-zero biases."""
    torch.manual_seed(seed)
    return randomize_(GroupedQueryAttention(16, 4, 2).double(), std=0.5)


def test_sinusoidal_table_is_the_papers_formula():
    L, D = 50, 16
    table = sinusoidal_positions(L, D, dtype=torch.float64)
    assert table.shape == (L, D) and table.dtype == torch.float64
    for p in (0, 1, 7, 49):
        for i in range(D // 2):
            angle = p / 10000 ** (2 * i / D)
            assert math.isclose(table[p, 2 * i].item(), math.sin(angle), abs_tol=1e-12)
            assert math.isclose(table[p, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-12)
    # the Annotated Transformer's exp/log formulation, in float32, agrees
    position = torch.arange(L).unsqueeze(1)
    div = torch.exp(torch.arange(0, D, 2) * -(math.log(10000.0) / D))
    theirs = torch.zeros(L, D)
    theirs[:, 0::2], theirs[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
    torch.testing.assert_close(sinusoidal_positions(L, D), theirs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("offset", [1, 3, 17])
def test_moving_k_positions_is_one_rotation_for_every_position(offset):
    D = 12
    table = sinusoidal_positions(40 + offset, D, dtype=torch.float64)
    M = shift_matrix(offset, D)
    torch.testing.assert_close(table[offset:], table[:40] @ M.T)
    assert torch.allclose(M @ M.T, torch.eye(D, dtype=torch.float64))  # a rotation


@pytest.mark.parametrize("bad", [7, 0, -2, 4.0, True])
def test_an_odd_or_non_int_width_is_refused(bad):
    with pytest.raises(ValueError, match="positive even int"):
        sinusoidal_positions(5, bad)


def test_learned_table_adds_its_rows_and_refuses_positions_it_has_not():
    torch.manual_seed(0)
    positions = LearnedPositions(8, 6)
    x = torch.randn(2, 5, 6)
    torch.testing.assert_close(positions(x), x + positions.table.weight[:5])
    torch.testing.assert_close(positions(x[:, 3:], start=3), positions(x)[:, 3:])  # decoding
    with pytest.raises(ValueError, match="positions 4..8 requested.*0..7 only"):
        positions(x, start=4)


def test_added_positions_break_attentions_permutation_equivariance():
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 9, 16)
    perm = torch.randperm(9)

    def layer(tokens):
        return attn(tokens, tokens, tokens)[0]

    def with_positions(tokens):
        return layer(tokens + sinusoidal_positions(tokens.shape[1], 16))

    assert equivariance_gap(layer, x, perm) < 1e-5
    assert equivariance_gap(with_positions, x, perm) > 1e-2


# ----------------------------------------------------------------- rotary
def test_rotary_angles_follow_the_formula():
    cos, sin = rotary_angles(torch.arange(6), 8)
    assert cos.shape == sin.shape == (6, 4) and cos.dtype == torch.float32
    for p in range(6):
        for i in range(4):
            angle = p * 10000.0 ** (-2 * i / 8)
            assert math.isclose(cos[p, i].item(), math.cos(angle), abs_tol=1e-6)
            assert math.isclose(sin[p, i].item(), math.sin(angle), abs_tol=1e-6)
    with pytest.raises(ValueError, match="even"):
        rotary_angles(torch.arange(3), 5)


def test_rotary_rotates_halves_as_hugging_face_rotate_half():
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    pos = torch.arange(5)
    cos, sin = rotary_angles(pos.double(), 8)
    cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)     # Hugging Face's (L, hd) tables

    def rotate_half(t):
        return torch.cat([-t[..., 4:], t[..., :4]], -1)

    torch.testing.assert_close(apply_rotary(x, pos), x * cos + rotate_half(x) * sin,
                               **TOL[torch.float64])


def test_rotary_interleaved_is_halves_up_to_a_feature_permutation():
    hd = 8
    x = torch.randn(1, 2, 4, hd, dtype=torch.float64)
    pos = torch.arange(4)
    cos, sin = rotary_angles(pos.double(), hd)
    pairs = x.view(1, 2, 4, hd // 2, 2)                           # (2i, 2i+1): the paper's
    a, b = pairs[..., 0], pairs[..., 1]
    interleaved = torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)
    perm = torch.cat([torch.arange(0, hd, 2), torch.arange(1, hd, 2)])   # evens, then odds
    torch.testing.assert_close(apply_rotary(x[..., perm], pos), interleaved[..., perm],
                               **TOL[torch.float64])


@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 1000))
@settings(deadline=None, max_examples=30)
def test_rotary_scores_depend_only_on_the_offset(m, n, shift):
    torch.manual_seed(0)
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)

    def score(i, j):
        qi = apply_rotary(q.view(1, 8), torch.tensor([i]))
        kj = apply_rotary(k.view(1, 8), torch.tensor([j]))
        return (qi * kj).sum().item()

    assert math.isclose(score(m, n), score(m + shift, n + shift), rel_tol=1e-9, abs_tol=1e-9)


def test_rotary_preserves_norms_and_position_zero():
    x = torch.randn(2, 3, 6, 8, dtype=torch.float64)
    rotated = apply_rotary(x, torch.arange(6))
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1), **TOL[torch.float64])
    torch.testing.assert_close(rotated[..., 0, :], x[..., 0, :], **TOL[torch.float64])
    assert apply_rotary(x.float(), torch.arange(6)).dtype == torch.float32
    with pytest.raises(ValueError, match=r"positions must have shape \(L,\) = \(6,\)"):
        apply_rotary(x, torch.arange(5))


def test_attention_without_positions_is_permutation_equivariant_and_rotary_breaks_it():
    attn = gqa()
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    perm = torch.randperm(6)
    torch.testing.assert_close(attn(x[:, perm]), attn(x)[:, perm], **TOL[torch.float64])
    q, k, v = (torch.randn(1, 2, 6, 8, dtype=torch.float64) for _ in range(3))
    pos = torch.arange(6)

    def rope_attention(q, k, v):
        return naive_attention(apply_rotary(q, pos), apply_rotary(k, pos), v)[0]

    permuted = rope_attention(q[:, :, perm], k[:, :, perm], v[:, :, perm])
    assert not torch.allclose(permuted, rope_attention(q, k, v)[:, :, perm])


def test_rotary_decoding_equals_full_causal_rotary_attention():
    attn = gqa()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    positions = torch.arange(7)
    q, k, v = project_heads(attn, x)
    expected = attend_heads(attn, apply_rotary(q, positions), apply_rotary(k, positions), v,
                            causal_mask(7))
    cache = KVCache()
    steps = [rotary_cached_attention(attn, x[:, :3], cache)]
    steps += [rotary_cached_attention(attn, x[:, t:t + 1], cache) for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, 1), expected, **TOL[torch.float64])


def test_equivariance_gap_is_rounding_without_positions_only():
    attn = gqa()
    x, perm = torch.randn(1, 6, 16, dtype=torch.float64), torch.tensor([3, 0, 5, 1, 4, 2])
    assert equivariance_gap(attn, x, perm) < 1e-12
    assert equivariance_gap(lambda t: attn(t, causal_mask(6)), x, perm) > 1e-3
