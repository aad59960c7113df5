"""solutions/positions.py: the sinusoidal table against the paper's formula, its shift
property, the learned table's limits, and what either does to attention's permutation
equivariance."""
import math

import pytest
import torch

from solutions import MultiHeadAttention
from solutions.positions import LearnedPositions, shift_matrix, sinusoidal_positions
from solutions.rotary import equivariance_gap


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
