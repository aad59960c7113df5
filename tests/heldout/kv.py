"""Held-out set, chapter 6 (shared keys and values, the KV cache, rotary positions):
mistakes written before any check was changed for them, each absent from
tests/submissions/kv.py.

Solution cells: repeat_kv, GroupedQueryAttention (project_heads, attend_heads and the
class), counts, decoding (KVCache, decoding_causal_mask, cached_attention),
equivariance_gap, rotary (apply_rotary, rotary_cached_attention). Later cells call the
earlier functions, so a mistake in repeat_kv or project_heads also fails the tests built on
them.
"""
from . import Bug, edit, reference

NOTEBOOK = "06_kv"

_REPEAT = reference(NOTEBOOK, "repeat_kv")
_GQA = reference(NOTEBOOK, "GroupedQueryAttention")
_COUNTS = reference(NOTEBOOK, "counts")
_DECODING = reference(NOTEBOOK, "decoding")
_DECODING_TESTS = ["test_cached_attention"]
_REPEAT_TESTS = ["test_repeat_kv", "test_gqa_forward"] + _DECODING_TESTS

CORRECT = {
    # repeat by gathering head i // G; counts written as products; a cache that starts from
    # empty tensors' shapes; the decoding mask as the complement of an upper triangle; the
    # gap through a vector norm of order inf.
    "gather_and_norms": {
        "repeat_kv": '''
def repeat_kv(kv, num_heads):
    G = num_heads // kv.shape[1]
    return kv[:, torch.arange(num_heads, device=kv.device) // G]
''',
        "counts": '''
def count_gqa_parameters(d_model, num_heads, num_kv_heads, bias=True):
    if d_model % num_heads != 0 or num_heads % num_kv_heads != 0:
        raise ValueError("num_heads must divide d_model and num_kv_heads must divide num_heads")
    head_dim = d_model // num_heads
    per_output = d_model + (1 if bias else 0)          # one weight row (+ bias) per output
    outputs = d_model + 2 * num_kv_heads * head_dim    # q_proj, k_proj, v_proj
    return outputs * per_output + d_model * per_output  # + out_proj


def count_kv_cache_bytes(num_layers, num_kv_heads, head_dim, bytes_per_value=2):
    keys = values = num_layers * num_kv_heads * head_dim
    return (keys + values) * bytes_per_value
''',
    },
    # rotation as a 2x2 matrix per pair, applied with einsum; the decoding mask by ~triu.
    "rotation_matrices": {
        "decoding": edit(_DECODING,
            "    return torch.ones(L_new, T, dtype=torch.bool, device=device).tril(T - L_new)",
            "    return ~torch.ones(L_new, T, dtype=torch.bool, device=device).triu(T - L_new + 1)"),
    },
}

BUGS = {
    # --- repeat_kv
    # Repeated along the sequence axis instead of the head axis.
    "repeat_along_sequence": Bug(
        cells={"repeat_kv": edit(_REPEAT, "    groups = kv[:, :, None].expand(B, num_kv_heads, G, L, head_dim)  # (B, g, G, L, hd): a view\n"
                                          "    return groups.reshape(B, num_heads, L, head_dim)                  # (B, h, L, hd)",
                                 "    return kv.repeat_interleave(G, dim=2)")},
        fails=_REPEAT_TESTS,
        diagnosis=r"(?i)(sequence|positions?) axis|along (the )?(sequence|L\b|positions)|dim=2|\d+ = L \* G|G \* L|repeated along"),
    # The group size inverted: num_kv_heads // num_heads is 0.
    "repeat_group_size_inverted": Bug(
        cells={"repeat_kv": edit(_REPEAT, "    G = num_heads // num_kv_heads\n", "    G = num_kv_heads // num_heads\n")},
        fails=_REPEAT_TESTS,
        diagnosis=r"(?i)num_kv_heads // num_heads|inverted|G = 0|group size|the other way"),
    # view() on an expanded tensor: it has no strides a view can merge.
    "repeat_expand_then_view": Bug(
        cells={"repeat_kv": edit(_REPEAT, "return groups.reshape(B, num_heads, L, head_dim)",
                                 "return groups.view(B, num_heads, L, head_dim)")},
        fails=_REPEAT_TESTS,
        diagnosis=r"(?i)reshape|contiguous|expand\w*.{0,60}view|view.{0,60}expand"),

    # --- GroupedQueryAttention (project_heads, attend_heads)
    # Keys and values viewed as (B, g, L, hd) directly: a view without its transpose.
    "project_kv_view_without_transpose": Bug(
        cells={"GroupedQueryAttention": edit(edit(_GQA,
            "k = attn.k_proj(x).view(B, L, num_kv_heads, attn.head_dim).transpose(1, 2)",
            "k = attn.k_proj(x).view(B, num_kv_heads, L, attn.head_dim)"),
            "v = attn.v_proj(x).view(B, L, num_kv_heads, attn.head_dim).transpose(1, 2)",
            "v = attn.v_proj(x).view(B, num_kv_heads, L, attn.head_dim)")},
        fails=["test_gqa_forward"] + _DECODING_TESTS,
        diagnosis=r"(?i)transpos|swap|head.{0,20}(axis|position)|without .{0,20}transpose"),
    # Only the keys repeated; the values keep num_kv_heads heads (broadcasts when it is 1).
    "attend_values_not_repeated": Bug(
        cells={"GroupedQueryAttention": edit(_GQA,
            "k, v = repeat_kv(k, attn.num_heads), repeat_kv(v, attn.num_heads)",
            "k = repeat_kv(k, attn.num_heads)")},
        fails=["test_gqa_forward"] + _DECODING_TESTS,
        diagnosis=r"(?i)values?.{0,40}(not repeated|repeat_kv)|repeat_kv\(v"),
    # The merged heads returned without the output projection.
    "attend_no_out_proj": Bug(
        cells={"GroupedQueryAttention": edit(_GQA, "return attn.out_proj(merge_heads(heads))",
                                             "return merge_heads(heads)")},
        fails=["test_gqa_forward"] + _DECODING_TESTS,
        diagnosis=r"(?i)out_proj|output projection|W_O"),

    # --- counts
    "count_one_kv_bias": Bug(
        cells={"counts": edit(_COUNTS, "biases = 2 * d_model + 2 * kv_size", "biases = 2 * d_model + kv_size")},
        fails=["test_count_gqa_parameters"],
        diagnosis=r"(?i)bias.{0,60}(v_proj|k_proj|once|one of)|v_proj.{0,40}bias"),
    "count_forgets_W_O": Bug(
        cells={"counts": edit(_COUNTS, "weights = 2 * d_model * d_model + 2 * d_model * kv_size",
                              "weights = d_model * d_model + 2 * d_model * kv_size")},
        fails=["test_count_gqa_parameters"],
        diagnosis=r"(?i)(out_proj|W_O|output projection).{0,40}(missing|not counted|forgot|left out)"
                  r"|(missing|without|forgot).{0,40}(out_proj|W_O|output projection)"),
    "bytes_one_layer": Bug(
        cells={"counts": edit(_COUNTS, "values_per_token = 2 * num_layers * num_kv_heads * head_dim",
                              "values_per_token = 2 * num_kv_heads * head_dim")},
        fails=["test_count_kv_cache_bytes"],
        diagnosis=r"(?i)num_layers|one layer|per layer|every layer|each layer"),

    # --- decoding (KVCache, decoding_causal_mask, cached_attention)
    # len() reads the batch axis.
    "cache_len_batch_axis": Bug(
        cells={"decoding": edit(_DECODING, "self.keys.shape[-2]", "self.keys.shape[0]")},
        fails=["test_kv_cache"] + _DECODING_TESTS,
        diagnosis=r"(?i)batch|shape\[0\]|positions.{0,40}(axis|dim=-2)|sequence axis"),
    # New keys put before the cached ones.
    "cache_prepends": Bug(
        cells={"decoding": edit(edit(_DECODING,
            "torch.cat([self.keys, keys], dim=-2)", "torch.cat([keys, self.keys], dim=-2)"),
            "torch.cat([self.values, values], dim=-2)", "torch.cat([values, self.values], dim=-2)")},
        fails=["test_kv_cache"] + _DECODING_TESTS,
        diagnosis=r"(?i)before|order|prepend|at the end|after the cached|reversed"),
    # tril(T - L_new - 1): each new query misses its own key.
    "decoding_mask_excludes_self": Bug(
        cells={"decoding": edit(_DECODING, ".tril(T - L_new)", ".tril(T - L_new - 1)")},
        fails=_DECODING_TESTS,
        diagnosis=r"(?i)(its own|itself|diagonal).{0,60}(key|position|excluded|masked)|off by one|T - L_new - 1"),
    # The mask sized before the append: (L_new, L_new) against T keys.
    "cached_mask_before_append": Bug(
        cells={"decoding": edit(_DECODING, """    k, v = cache.append(k, v)              # (B, g, T, hd)
    mask = decoding_causal_mask(q.shape[-2], k.shape[-2], device=x_new.device)  # (L_new, T)
""", """    mask = decoding_causal_mask(q.shape[-2], k.shape[-2], device=x_new.device)
    k, v = cache.append(k, v)
""")},
        fails=["test_cached_attention"],
        diagnosis=r"(?i)before (the )?append|after (the )?append|\(L_new, L_new\)|T = len|cached positions"),
}
