"""Chapter 4: boolean masks (True = may attend), conversions to nn.MultiheadAttention's
conventions, and the invariances a mask promises."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from mha_helpers import TOL, random_mask, randomize_, torch_pair
from solutions import (MultiHeadAttention, causal_mask, from_torch_attn_mask,
                       from_torch_key_padding_mask, padding_mask, scaled_dot_product_attention,
                       to_torch_attn_mask, to_torch_key_padding_mask)


# ----------------------------------------------------------------- padding_mask / causal_mask
def test_padding_mask_values_and_shape():
    mask = padding_mask(torch.tensor([3, 0, 5]), 5)
    assert mask.dtype == torch.bool and mask.shape == (3, 1, 1, 5)
    expected = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(mask[:, 0, 0], expected)
    assert torch.equal(padding_mask([3, 0, 5], 5), mask)          # a list works too
    assert padding_mask(torch.tensor([], dtype=torch.long), 4).shape == (0, 1, 1, 4)
    assert padding_mask(torch.tensor([0], dtype=torch.int32), 0).shape == (1, 1, 1, 0)


@given(st.lists(st.integers(0, 7), min_size=1, max_size=4), st.integers(0, 3))
def test_padding_mask_counts_real_tokens(lengths, extra):
    max_len = max(lengths) + extra
    mask = padding_mask(lengths, max_len)
    assert mask.shape == (len(lengths), 1, 1, max_len)
    assert mask.sum(-1).flatten().tolist() == lengths
    # real tokens first, then padding: each row is a run of True then a run of False
    assert torch.equal(mask, mask.cummin(dim=-1).values)


@pytest.mark.parametrize("q_len,k_len", [(4, 4), (3, 6), (6, 3), (1, 1), (0, 2)])
def test_causal_mask_values(q_len, k_len):
    mask = causal_mask(q_len, k_len)
    assert mask.dtype == torch.bool and mask.shape == (q_len, k_len)
    for i in range(q_len):
        for j in range(k_len):
            assert mask[i, j] == (j <= i)


@pytest.mark.parametrize("q_len,k_len", [(5, 5), (3, 6), (6, 3)])
def test_causal_mask_matches_torch_is_causal(q_len, k_len):
    """Aligned at the top-left corner, like F.scaled_dot_product_attention(is_causal=True)."""
    q = torch.randn(2, q_len, 4, dtype=torch.float64)
    k, v = torch.randn(2, k_len, 4, dtype=torch.float64), torch.randn(2, k_len, 3,
                                                                        dtype=torch.float64)
    out, _ = scaled_dot_product_attention(q, k, v, causal_mask(q_len, k_len))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_padding_and_causal_combine_by_broadcasting():
    pad = padding_mask([2, 4], 4)                   # (2, 1, 1, 4)
    both = pad & causal_mask(4)                     # (2, 1, 4, 4)
    assert both.shape == (2, 1, 4, 4)
    assert torch.equal(both[0, 0], torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0],
                                                 [1, 1, 0, 0]], dtype=torch.bool))
    assert torch.equal(both[1, 0], causal_mask(4))


# ----------------------------------------------------------------- conversions
def test_key_padding_mask_conversions():
    ours = padding_mask([2, 3, 0], 3)                            # (3, 1, 1, 3), True = real
    kpm = to_torch_key_padding_mask(ours)
    assert kpm.shape == (3, 3) and kpm.dtype == torch.bool
    assert torch.equal(kpm, torch.tensor([[0, 0, 1], [0, 0, 0], [1, 1, 1]], dtype=torch.bool))
    assert torch.equal(to_torch_key_padding_mask(ours[:, 0, 0]), kpm)   # (B, Lk) form
    assert torch.equal(from_torch_key_padding_mask(kpm), ours)


def test_attn_mask_conversions_bool():
    causal = causal_mask(4, 5)
    torch_mask = to_torch_attn_mask(causal)
    assert torch.equal(torch_mask, torch.ones(4, 5, dtype=torch.bool).triu(1))
    assert torch.equal(from_torch_attn_mask(torch_mask), causal)
    per_head = random_mask((2, 3, 4, 5))                         # (B, h, Lq, Lk)
    flat = to_torch_attn_mask(per_head)
    assert flat.shape == (6, 4, 5)
    assert torch.equal(flat[1 * 3 + 2], ~per_head[1, 2])         # nn.MHA's b * h + i order
    assert torch.equal(from_torch_attn_mask(flat, num_heads=3), per_head)
    assert torch.equal(from_torch_attn_mask(flat), ~flat)        # no num_heads: stays 3-D


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_attn_mask_conversion_float(dtype):
    allowed = random_mask((4, 5))
    additive = torch.zeros(4, 5, dtype=dtype).masked_fill(~allowed, float("-inf"))
    assert torch.equal(from_torch_attn_mask(additive), allowed)
    biased = additive.clone()
    biased[0, 0] = 0.5                                 # a bias, not a mask
    with pytest.raises(ValueError, match=r"only if it holds just 0 and -inf"):
        from_torch_attn_mask(biased)
    large_negative = torch.zeros(4, 5, dtype=dtype).masked_fill(~allowed, -1e4)
    if not allowed.all():
        with pytest.raises(ValueError, match=r"0 and -inf"):
            from_torch_attn_mask(large_negative)


def test_converted_masks_drive_nn_multihead_attention_identically():
    """A float -inf attn_mask and a boolean key_padding_mask given to nn.MHA equal our mask."""
    ref, ours = torch_pair(8, 2, dtype=torch.float64)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    allowed = causal_mask(5) | random_mask((5, 5))
    additive = torch.zeros(5, 5, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
    kpm = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    kpm_additive = torch.zeros(2, 5, dtype=torch.float64).masked_fill(kpm, float("-inf"))
    expected, _ = ref(x, x, x, attn_mask=additive, key_padding_mask=kpm_additive)
    torch.testing.assert_close(
        ref(x, x, x, attn_mask=~allowed, key_padding_mask=kpm)[0], expected)   # bool form
    mask = from_torch_attn_mask(additive) & from_torch_key_padding_mask(kpm)
    for need_weights in (True, False):
        out, _ = ours(x, x, x, mask=mask, need_weights=need_weights)
        torch.testing.assert_close(out, expected, **TOL[torch.float64])


# ----------------------------------------------------------------- invariances
def _paths():
    return pytest.mark.parametrize("need_weights", [True, False], ids=["readable", "fast"])


@_paths()
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_padded_keys_never_change_real_outputs(need_weights, cross):
    mha = randomize_(MultiHeadAttention(16, 4, key_size=6 if cross else None,
                                        value_size=6 if cross else None))
    B, L = 3, 7
    lengths = torch.tensor([7, 4, 1])
    mask = padding_mask(lengths, L)
    q = torch.randn(B, L, 16)
    kv = torch.randn(B, L, 6) if cross else q
    out, _ = mha(q, kv, kv, mask=mask, need_weights=need_weights)
    # new values, 1000x larger, at every padded position
    pad = ~mask[:, 0, 0, :, None]                                 # (B, L, 1)
    kv2 = torch.where(pad, 1000 * torch.randn_like(kv), kv)
    q2 = q if cross else kv2
    out2, _ = mha(q2, kv2, kv2, mask=mask, need_weights=need_weights)
    for b, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(out2[b, :n], out[b, :n], atol=1e-6, rtol=1e-6)
    if cross:       # every query is real in cross-attention: no output may change
        torch.testing.assert_close(out2, out, atol=1e-6, rtol=1e-6)
    # and the masks do matter: without them, the padded values leak in
    leak, _ = mha(q2, kv2, kv2, need_weights=need_weights)
    assert not torch.allclose(leak[1, :4], out[1, :4], atol=1e-3)


@_paths()
def test_future_tokens_never_change_causal_outputs(need_weights):
    mha = randomize_(MultiHeadAttention(12, 3))
    L = 6
    x = torch.randn(2, L, 12)
    mask = causal_mask(L)
    out, weights = mha(x, x, x, mask=mask, need_weights=need_weights)
    if need_weights:
        assert not weights[..., ~mask].any()
    for t in range(L - 1):
        x2 = x.clone()
        x2[:, t + 1:] = 100 * torch.randn(2, L - t - 1, 12)
        out2, _ = mha(x2, x2, x2, mask=mask, need_weights=need_weights)
        torch.testing.assert_close(out2[:, :t + 1], out[:, :t + 1], atol=1e-6, rtol=1e-6)
        assert not torch.allclose(out2[:, t + 1:], out[:, t + 1:])


@_paths()
def test_padding_and_causal_together(need_weights):
    mha = randomize_(MultiHeadAttention(8, 2))
    L = 5
    lengths = torch.tensor([5, 3])
    mask = padding_mask(lengths, L) & causal_mask(L)
    x = torch.randn(2, L, 8)
    out, _ = mha(x, x, x, mask=mask, need_weights=need_weights)
    for b, n in enumerate(lengths.tolist()):       # a prefix alone equals the padded batch
        alone, _ = mha(x[b:b + 1, :n], x[b:b + 1, :n], x[b:b + 1, :n], mask=causal_mask(n),
                       need_weights=need_weights)
        torch.testing.assert_close(out[b:b + 1, :n], alone, atol=1e-6, rtol=1e-6)


def test_invariances_of_scaled_dot_product_attention():
    q, k, v = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 6, 5), torch.randn(2, 3, 6, 2)
    mask = padding_mask([4, 6], 6)                                  # (2, 1, 1, 6)
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    k2, v2 = k.clone(), v.clone()
    k2[0, :, 4:], v2[0, :, 4:] = 1e3, -1e3
    out2, _ = scaled_dot_product_attention(q, k2, v2, mask)
    torch.testing.assert_close(out2, out)
