"""Chapter 6: grouped-query attention, the KV cache and the counts (chapter 7's rotary
positions: tests/test_positions.py).

References are independent: F.scaled_dot_product_attention (enable_gqa, is_causal),
chapter 3's MultiHeadAttention, and the papers' formulas written out in float64.
"""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_helpers import TOL
from solutions.kv import (GroupedQueryAttention, KVCache, cached_attention, count_gqa_parameters,
                          count_kv_cache_bytes, decoding_causal_mask, repeat_kv)
from solutions.masks import causal_mask
from solutions.mha import MultiHeadAttention


def gqa(d_model, num_heads, num_kv_heads, seed=0, dtype=torch.float64, bias=True):
    torch.manual_seed(seed)
    attn = GroupedQueryAttention(d_model, num_heads, num_kv_heads, bias=bias).to(dtype)
    with torch.no_grad():            # non-zero biases, so a bias on the wrong head shows
        for p in attn.parameters():
            p.normal_(0, 0.5)
    return attn


# ----------------------------------------------------------------- repeat_kv
def test_repeat_kv_maps_each_query_head_to_its_group():
    kv = torch.arange(3.0).view(1, 3, 1, 1).expand(2, 3, 4, 5)      # head j holds the value j
    out = repeat_kv(kv, 6)
    assert out.shape == (2, 6, 4, 5)
    assert out[0, :, 0, 0].tolist() == [0, 0, 1, 1, 2, 2]            # not 0, 1, 2, 0, 1, 2
    assert torch.equal(repeat_kv(kv, 3), kv)


@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 5))
@settings(deadline=None, max_examples=25)
def test_repeat_kv_is_torch_repeat_interleave(g, G, L):
    kv = torch.randn(2, g, L, 3)
    assert torch.equal(repeat_kv(kv, g * G), kv.repeat_interleave(G, dim=1))


def test_repeat_kv_refuses_a_group_that_does_not_divide():
    with pytest.raises(ValueError, match="num_kv_heads=3 must divide num_heads=4"):
        repeat_kv(torch.randn(1, 3, 2, 4), 4)
    with pytest.raises(ValueError, match="rank 4"):
        repeat_kv(torch.randn(3, 2, 4), 3)


# ----------------------------------------------------------------- GroupedQueryAttention
@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 4), (4, 2), (4, 1), (6, 3), (6, 2)])
def test_gqa_equals_torch_sdpa_with_enable_gqa(num_heads, num_kv_heads):
    attn = gqa(24, num_heads, num_kv_heads)
    x = torch.randn(3, 7, 24, dtype=torch.float64)
    q = attn.q_proj(x).view(3, 7, num_heads, -1).transpose(1, 2)
    k = attn.k_proj(x).view(3, 7, num_kv_heads, -1).transpose(1, 2)
    v = attn.v_proj(x).view(3, 7, num_kv_heads, -1).transpose(1, 2)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expected = attn.out_proj(heads.transpose(1, 2).reshape(3, 7, 24))
    torch.testing.assert_close(attn(x, causal_mask(7)), expected, **TOL[torch.float64])


def test_gqa_structure_and_parameter_count():
    attn = GroupedQueryAttention(32, 8, 2)
    assert (attn.d_model, attn.num_heads, attn.num_kv_heads, attn.head_dim) == (32, 8, 2, 4)
    assert attn.q_proj.weight.shape == (32, 32) and attn.out_proj.weight.shape == (32, 32)
    assert attn.k_proj.weight.shape == (8, 32) and attn.v_proj.weight.shape == (8, 32)
    assert sum(p.numel() for p in attn.parameters()) == count_gqa_parameters(32, 8, 2)
    nobias = GroupedQueryAttention(32, 8, 1, bias=False)
    assert sum(p.numel() for p in nobias.parameters()) == count_gqa_parameters(32, 8, 1,
                                                                                bias=False)
    assert count_gqa_parameters(32, 8, 8) == 4 * 32 ** 2 + 4 * 32     # chapter 3's count


def test_gqa_with_all_heads_is_chapter_3_layer():
    attn = gqa(16, 4, 4)
    mha = MultiHeadAttention(16, 4).to(torch.float64)
    mha.load_state_dict(attn.state_dict())
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    mask = causal_mask(5)
    torch.testing.assert_close(attn(x, mask), mha(x, x, x, mask)[0], **TOL[torch.float64])


def test_mqa_is_chapter_3_layer_with_copied_key_value_heads():
    """num_kv_heads == 1: every query head reads the same keys and values, exactly what
    chapter 3's layer computes when its W_K, W_V rows repeat one head's block h times."""
    attn = gqa(16, 4, 1)
    mha = MultiHeadAttention(16, 4).to(torch.float64)
    state = attn.state_dict()
    for name in ("k_proj", "v_proj"):
        state[f"{name}.weight"] = state[f"{name}.weight"].repeat(4, 1)
        state[f"{name}.bias"] = state[f"{name}.bias"].repeat(4)
    mha.load_state_dict(state)
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    torch.testing.assert_close(attn(x), mha(x, x, x)[0], **TOL[torch.float64])


def test_gqa_refuses_bad_configurations():
    with pytest.raises(ValueError, match="num_kv_heads=3 must divide num_heads=4"):
        GroupedQueryAttention(16, 4, 3)
    with pytest.raises(ValueError, match="not divisible"):
        GroupedQueryAttention(15, 4, 2)
    with pytest.raises(ValueError, match=r"\(B, L, 16\)"):
        GroupedQueryAttention(16, 4, 2)(torch.randn(2, 3, 12))
    with pytest.raises(ValueError, match="cannot broadcast"):
        GroupedQueryAttention(16, 4, 2)(torch.randn(2, 3, 16), torch.ones(4, 4, dtype=bool))


# ----------------------------------------------------------------- masks and the cache
@pytest.mark.parametrize("q_len,k_len", [(4, 4), (1, 5), (3, 7), (0, 3)])
def test_decoding_mask_is_the_bottom_right_of_the_full_causal_mask(q_len, k_len):
    mask = decoding_causal_mask(q_len, k_len)
    assert torch.equal(mask, causal_mask(k_len)[k_len - q_len:])
    if q_len == k_len:
        assert torch.equal(mask, causal_mask(q_len, k_len))
    with pytest.raises(ValueError, match="cannot exceed"):
        decoding_causal_mask(k_len + 1, k_len)


def test_chapter_4_causal_mask_is_top_left_so_decoding_needs_another():
    assert causal_mask(1, 5).tolist() == [[True, False, False, False, False]]
    assert decoding_causal_mask(1, 5).tolist() == [[True] * 5]


def test_kv_cache_appends_along_the_sequence():
    cache = KVCache()
    assert len(cache) == 0 and cache.keys is None and cache.values is None
    k1, v1 = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 6)
    keys, values = cache.append(k1, v1)
    assert len(cache) == 4 and keys is cache.keys and torch.equal(values, v1)
    k2, v2 = torch.randn(2, 3, 1, 5), torch.randn(2, 3, 1, 6)
    keys, values = cache.append(k2, v2)
    assert len(cache) == 5
    assert torch.equal(keys, torch.cat([k1, k2], 2)) and torch.equal(values, torch.cat([v1, v2], 2))
    with pytest.raises(ValueError, match="do not match"):
        cache.append(torch.randn(2, 2, 1, 5), torch.randn(2, 2, 1, 6))


def full_causal(attn, x):
    if isinstance(attn, MultiHeadAttention):
        return attn(x, x, x, causal_mask(x.shape[1]))[0]
    return attn(x, causal_mask(x.shape[1]))


@pytest.mark.parametrize("num_kv_heads", [None, 4, 2, 1], ids=["mha", "gqa4", "gqa2", "mqa"])
def test_token_by_token_decoding_equals_full_causal_attention(num_kv_heads):
    if num_kv_heads is None:
        torch.manual_seed(0)
        attn = MultiHeadAttention(16, 4).double()
    else:
        attn = gqa(16, 4, num_kv_heads)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    expected = full_causal(attn, x)
    cache = KVCache()
    prefill = cached_attention(attn, x[:, :3], cache)           # a prompt of 3 at once
    torch.testing.assert_close(prefill, expected[:, :3], **TOL[torch.float64])
    for t in range(3, 9):                                        # then one position per step
        step = cached_attention(attn, x[:, t:t + 1], cache)
        assert len(cache) == t + 1
        torch.testing.assert_close(step, expected[:, t:t + 1], **TOL[torch.float64])
    chunk_cache = KVCache()
    cached_attention(attn, x[:, :4], chunk_cache)                # chunks of any size work too
    torch.testing.assert_close(cached_attention(attn, x[:, 4:], chunk_cache), expected[:, 4:],
                               **TOL[torch.float64])


# ----------------------------------------------------------------- counts
def test_kv_cache_bytes_of_published_configurations():
    # Llama 2 70B: 80 layers, 8 KV heads of 128 -> 2 * 80 * 8 * 128 * 2 bytes = 320 KiB a token
    assert count_kv_cache_bytes(80, 8, 128) == 327_680
    assert count_kv_cache_bytes(32, 8, 128) == 131_072        # Llama 3 8B, Mistral 7B
    assert count_kv_cache_bytes(32, 32, 128) == 524_288       # Llama 2 7B (no GQA)
    assert count_kv_cache_bytes(32, 8, 128, bytes_per_value=4) == 2 * 131_072
    with pytest.raises(ValueError, match="num_kv_heads"):
        count_kv_cache_bytes(32, 0, 128)


def test_kv_cache_bytes_match_a_filled_cache():
    attn = gqa(32, 8, 2, dtype=torch.float16)
    cache = KVCache()
    with torch.no_grad():
        cached_attention(attn, torch.randn(1, 5, 32, dtype=torch.float16), cache)
    nbytes = (cache.keys.numel() + cache.values.numel()) * cache.keys.element_size()
    assert nbytes == 5 * count_kv_cache_bytes(1, 2, 4)
