"""Chapters 2-3: splitting into heads, merging back, and the per-head view of the weights."""
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mha_helpers import TOL, loop_mha, random_mask, randomize_
from solutions import MultiHeadAttention, causal_mask, merge_heads, split_heads


@st.composite
def head_shapes(draw):
    h, hd = draw(st.integers(1, 6)), draw(st.integers(1, 5))
    return draw(st.integers(1, 3)), draw(st.integers(1, 5)), h, hd


@given(head_shapes())
def test_split_merge_shapes_inverse_and_feature_blocks(shape):
    B, L, h, hd = shape
    x = torch.randn(B, L, h * hd)
    heads = split_heads(x, h)
    assert heads.shape == (B, h, L, hd)
    for i in range(h):            # head i holds features [i*hd, (i+1)*hd) of every position
        assert torch.equal(heads[:, i], x[..., i * hd:(i + 1) * hd])
    assert torch.equal(merge_heads(heads), x)
    y = torch.randn(B, h, L, hd)
    merged = merge_heads(y)
    assert merged.shape == (B, L, h * hd)
    assert torch.equal(split_heads(merged, h), y)


def test_split_is_not_a_plain_reshape():
    """Seed 001's bug: reshaping (B, L, d) straight to (B, h, L, hd) mixes positions and
    heads without any shape error. split_heads must differ from it."""
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).view(2, 3, 8)
    assert not torch.equal(split_heads(x, 4), x.reshape(2, 4, 3, 2))
    # position p of head i is x[:, p, 2i:2i+2]
    assert torch.equal(split_heads(x, 4)[1, 2, 0], x[1, 0, 4:6])


def test_split_of_non_contiguous_input():
    x = torch.randn(5, 2, 12).transpose(0, 1)          # (B=2, L=5, 12), not contiguous
    assert not x.is_contiguous()
    assert torch.equal(split_heads(x, 3), split_heads(x.contiguous(), 3))
    assert torch.equal(merge_heads(split_heads(x, 3)), x)


def test_one_head_and_one_feature_per_head():
    x = torch.randn(2, 4, 6)
    assert torch.equal(split_heads(x, 1), x[:, None])
    assert torch.equal(split_heads(x, 6), x.transpose(1, 2)[..., None])


def test_split_and_merge_pass_gradients():
    x = torch.randn(2, 3, 8, requires_grad=True)
    g = torch.randn(2, 3, 8)
    (merge_heads(split_heads(x, 2)) * g).sum().backward()
    assert torch.equal(x.grad, g)


# ----------------------------------------------------------------- per-head weights
CONFIGS = [
    dict(d_model=16, num_heads=4),
    dict(d_model=12, num_heads=3, key_size=7, value_size=5, query_size=9),
    dict(d_model=8, num_heads=2, bias=False),
    dict(d_model=10, num_heads=1),
]


def make_inputs(mha, B=2, Lq=5, Lk=6, dtype=torch.float64):
    return (torch.randn(B, Lq, mha.query_size, dtype=dtype),
            torch.randn(B, Lk, mha.key_size, dtype=dtype),
            torch.randn(B, Lk, mha.value_size, dtype=dtype))


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
@pytest.mark.parametrize("need_weights", [True, False])
def test_head_weights_reproduce_the_module(cfg, need_weights):
    """out = sum_i softmax((x Wq_i + bq_i)(x Wk_i + bk_i)^T / sqrt(hd)) (x Wv_i + bv_i) Wo_i + bo"""
    mha = randomize_(MultiHeadAttention(**cfg, dtype=torch.float64))
    W = mha.head_weights()
    h, hd, D = mha.num_heads, mha.head_dim, mha.d_model
    assert W.query.shape == (h, mha.query_size, hd)
    assert W.key.shape == (h, mha.key_size, hd) and W.value.shape == (h, mha.value_size, hd)
    assert W.output.shape == (h, hd, D)
    if mha.bias:
        assert W.query_bias.shape == W.key_bias.shape == W.value_bias.shape == (h, hd)
        assert W.output_bias.shape == (D,)
    else:
        assert W.query_bias is W.key_bias is W.value_bias is W.output_bias is None

    q, k, v = make_inputs(mha)
    mask = random_mask((2, 1, 5, 6), 0.7) & causal_mask(5, 6)
    for m in (None, mask):
        out, weights = mha(q, k, v, mask=m, need_weights=need_weights)
        expected, expected_weights = loop_mha(mha, q, k, v, mask=m)
        torch.testing.assert_close(out, expected, **TOL[torch.float64])
        if need_weights:
            torch.testing.assert_close(weights, expected_weights, **TOL[torch.float64])


def test_head_weights_are_row_blocks_of_the_fused_weights():
    mha = randomize_(MultiHeadAttention(12, 3))
    W = mha.head_weights()
    for i in range(3):
        rows = slice(4 * i, 4 * (i + 1))
        assert torch.equal(W.query[i], mha.q_proj.weight[rows].T)
        assert torch.equal(W.key[i], mha.k_proj.weight[rows].T)
        assert torch.equal(W.value[i], mha.v_proj.weight[rows].T)
        assert torch.equal(W.output[i], mha.out_proj.weight[:, rows].T)
        assert torch.equal(W.query_bias[i], mha.q_proj.bias[rows])


def test_explicit_formula_for_one_head_by_hand():
    """The loop reference itself, checked on one head against the formula written inline."""
    mha = randomize_(MultiHeadAttention(6, 2, dtype=torch.float64))
    x = torch.randn(1, 4, 6, dtype=torch.float64)
    W = mha.head_weights()
    out = W.output_bias.clone()
    for i in range(2):
        s = (x @ W.query[i] + W.query_bias[i]) @ (x @ W.key[i] + W.key_bias[i]).transpose(1, 2)
        head = torch.softmax(s / math.sqrt(3), -1) @ (x @ W.value[i] + W.value_bias[i])
        out = out + head @ W.output[i]
    torch.testing.assert_close(mha(x, x, x)[0], out)


# ----------------------------------------------------------------- head_mask
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("j", [0, 2])
def test_zero_gate_equals_zeroing_the_heads_block_of_W_O(need_weights, j):
    mha = randomize_(MultiHeadAttention(12, 3, dtype=torch.float64))
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    gate = torch.ones(3, dtype=torch.float64)
    gate[j] = 0.0
    gated, _ = mha(x, x, x, head_mask=gate, need_weights=need_weights)
    pruned = randomize_(MultiHeadAttention(12, 3, dtype=torch.float64))
    pruned.load_state_dict(mha.state_dict())
    with torch.no_grad():
        pruned.out_proj.weight[:, 4 * j:4 * (j + 1)] = 0.0
    expected, _ = pruned(x, x, x, need_weights=need_weights)
    torch.testing.assert_close(gated, expected, **TOL[torch.float64])
    ungated, _ = mha(x, x, x, need_weights=need_weights)
    assert not torch.allclose(gated, ungated)


@pytest.mark.parametrize("need_weights", [True, False])
def test_head_mask_per_batch_and_fractional(need_weights):
    mha = randomize_(MultiHeadAttention(12, 3, dtype=torch.float64))
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    mask = causal_mask(5)
    gates = torch.tensor([[1.0, 0.0, 0.5], [0.0, 2.0, 1.0]], dtype=torch.float64)
    out, _ = mha(x, x, x, mask=mask, head_mask=gates, need_weights=need_weights)
    expected, _ = loop_mha(mha, x, x, x, mask=mask, head_mask=gates)
    torch.testing.assert_close(out, expected, **TOL[torch.float64])
    for b in range(2):       # (B, h) gates act per batch element, like an (h,) gate on it
        single, _ = mha(x[b:b + 1], x[b:b + 1], x[b:b + 1], mask=mask, head_mask=gates[b],
                        need_weights=need_weights)
        torch.testing.assert_close(out[b:b + 1], single, **TOL[torch.float64])
    ones, _ = mha(x, x, x, mask=mask, head_mask=torch.ones(3), need_weights=need_weights)
    torch.testing.assert_close(ones, mha(x, x, x, mask=mask, need_weights=need_weights)[0])
    # a boolean gate works too (converted to the input's dtype)
    keep = torch.tensor([True, False, True])
    out_bool, _ = mha(x, x, x, head_mask=keep, need_weights=need_weights)
    out_float, _ = mha(x, x, x, head_mask=keep.double(), need_weights=need_weights)
    torch.testing.assert_close(out_bool, out_float)


def test_explicit_head_dim_after_pruning():
    """head_dim given explicitly: num_heads * head_dim need not equal d_model."""
    mha = randomize_(MultiHeadAttention(12, 2, head_dim=3, dtype=torch.float64))
    assert mha.q_proj.weight.shape == (6, 12) and mha.out_proj.weight.shape == (12, 6)
    x = torch.randn(2, 4, 12, dtype=torch.float64)
    for need_weights in (True, False):
        out, _ = mha(x, x, x, mask=causal_mask(4), need_weights=need_weights)
        expected, _ = loop_mha(mha, x, x, x, mask=causal_mask(4))
        torch.testing.assert_close(out, expected, **TOL[torch.float64])
