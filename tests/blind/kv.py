"""Blind set, chapter 6 (grouped-query attention and the KV cache): mistakes written from the
exercise text and the reference solutions alone, by a tester who never read the checks or
their messages."""
from tests.heldout import Bug, edit, reference

NOTEBOOK = "06_kv"

_RK = reference(NOTEBOOK, "repeat_kv")
_GQA = reference(NOTEBOOK, "GroupedQueryAttention")
_COUNTS = reference(NOTEBOOK, "counts")
_DEC = reference(NOTEBOOK, "decoding")

CORRECT = {
    # repeat_interleave on the head axis; the cache with a list-free concatenation on axis 2;
    # the mask by comparing position indices
    "interleave_and_arange_mask": {
        "repeat_kv": '''
def repeat_kv(kv, num_heads):
    """(B, num_kv_heads, L, head_dim) -> (B, num_heads, L, head_dim)."""
    return kv.repeat_interleave(num_heads // kv.shape[1], dim=1)
''',
        "decoding": '''
class KVCache:
    """keys, values (B, num_kv_heads, T, head_dim), or None while empty."""

    def __init__(self):
        self.keys = None
        self.values = None

    def __len__(self):
        if self.keys is None:
            return 0
        return self.keys.size(2)

    def append(self, keys, values):
        if self.keys is not None:
            keys = torch.cat((self.keys, keys), dim=2)
            values = torch.cat((self.values, values), dim=2)
        self.keys, self.values = keys, values
        return keys, values


def decoding_causal_mask(L_new, T, device=None):
    """(L_new, T) bool, aligned at the bottom-right corner."""
    query_pos = torch.arange(T - L_new, T, device=device)[:, None]   # (L_new, 1)
    key_pos = torch.arange(T, device=device)[None, :]                # (1, T)
    return key_pos <= query_pos


def cached_attention(attn, x_new, cache):
    """(B, L_new, d_model) over the cache and itself; appends the new keys and values."""
    q, k_new, v_new = project_heads(attn, x_new)
    keys, values = cache.append(k_new, v_new)
    mask = decoding_causal_mask(x_new.shape[1], len(cache), device=x_new.device)
    return attend_heads(attn, q, keys, values, mask)
''',
    },
    # repeat on a new group axis then flatten; counts written as sums of the four layers
    "repeat_flatten_and_sums": {
        "repeat_kv": '''
def repeat_kv(kv, num_heads):
    """(B, num_kv_heads, L, head_dim) -> (B, num_heads, L, head_dim)."""
    G = num_heads // kv.shape[1]
    return kv.unsqueeze(2).repeat(1, 1, G, 1, 1).flatten(1, 2)
''',
        "counts": '''
def count_gqa_parameters(d_model, num_heads, num_kv_heads, bias=True):
    """Parameters of GroupedQueryAttention(d_model, num_heads, num_kv_heads, bias=bias)."""
    if num_heads % num_kv_heads != 0 or d_model % num_heads != 0:
        raise ValueError("num_kv_heads must divide num_heads, num_heads must divide d_model")
    head_dim = d_model // num_heads
    kv_out = num_kv_heads * head_dim
    total = 0
    for n_in, n_out in ((d_model, d_model), (d_model, kv_out), (d_model, kv_out),
                        (d_model, d_model)):
        total += n_in * n_out + (n_out if bias else 0)
    return total


def count_kv_cache_bytes(num_layers, num_kv_heads, head_dim, bytes_per_value=2):
    """Bytes of KV cache per token."""
    per_layer = num_kv_heads * head_dim * bytes_per_value   # one key, or one value
    return num_layers * (per_layer + per_layer)
''',
    },
}

BUGS = {
    # tiles the whole stack of key/value heads (0, 1, 0, 1) instead of repeating each head
    "rk_tiled": Bug(
        cells={"repeat_kv": edit(_RK, "groups = kv[:, :, None].expand(B, num_kv_heads, G, L, head_dim)",
                                 "groups = kv[:, None].expand(B, G, num_kv_heads, L, head_dim)")},
        fails=["test_repeat_kv"],
        diagnosis=r"(?i)til(e|es|ed|ing)\b|0, ?1, ?0, ?1|interleav|repeat_interleave|order of the (heads|copies)|j ?\* ?G|i ?// ?G|whole stack|heads? (are )?in the wrong order|query head \d+ .{0,40}(key|value|kv) head|0, ?0, ?1, ?1"),
    # splits the heads with a view straight to (B, h, L, hd), without the transpose
    "ph_view_no_transpose": Bug(
        cells={"GroupedQueryAttention": edit(_GQA, "q = attn.q_proj(x).view(B, L, attn.num_heads, attn.head_dim).transpose(1, 2)",
                                             "q = attn.q_proj(x).view(B, attn.num_heads, L, attn.head_dim)")},
        fails=["test_gqa_forward"],
        diagnosis=r"(?i)transpos|view\(B, ?L|\(B, ?L, ?num_heads|mix\w* (the )?(positions|heads)|(positions|heads) (and|with) (the )?(heads|positions) (mixed|swapped|scrambled)|split\w* (the )?heads"),
    # attends without repeat_kv: the key/value heads do not match the query heads
    "ah_no_repeat": Bug(
        cells={"GroupedQueryAttention": edit(_GQA, "    k, v = repeat_kv(k, attn.num_heads), repeat_kv(v, attn.num_heads)  # (B, h, T, hd)\n", "")},
        fails=["test_gqa_forward"],
        diagnosis=r"(?i)repeat_kv|repeat\w* (the )?(keys|k\b|key/value)|(keys|values).{0,30}(not|never) repeat|expand"),
    # gives k_proj and v_proj d_model outputs, as in chapter 3, instead of num_kv_heads * head_dim
    "gqa_kv_full_size": Bug(
        cells={"GroupedQueryAttention": edit(_GQA, "kv_size = num_kv_heads * self.head_dim", "kv_size = d_model")},
        fails=["test_gqa_structure"],
        diagnosis=r"(?i)k_proj|v_proj|num_kv_heads ?\* ?head_dim|kv_size|out_features"),
    # counts a bias for W_Q and W_O only, none for W_K and W_V
    "count_bias_kv_missing": Bug(
        cells={"counts": edit(_COUNTS, "biases = 2 * d_model + 2 * kv_size if bias else 0", "biases = 2 * d_model if bias else 0")},
        fails=["test_count_gqa_parameters"],
        diagnosis=r"(?i)bias"),
    # leaves the five-axis view unmerged: (B, num_kv_heads, G, L, head_dim)
    "rk_group_axis_kept": Bug(
        cells={"repeat_kv": edit(_RK, "return groups.reshape(B, num_heads, L, head_dim)", "return groups")},
        fails=["test_repeat_kv"],
        diagnosis=r"(?i)reshape|5.?d\b|five (dims|dimensions|axes)|\(B, ?num_kv_heads, ?G|group axis|merge\w* (the )?(group|G)|flatten"),
    # expands the head axis itself, which only works for a single key/value head
    "rk_expand_without_new_axis": Bug(
        cells={"repeat_kv": edit(_RK, "    groups = kv[:, :, None].expand(B, num_kv_heads, G, L, head_dim)  # (B, g, G, L, hd): a view\n    return groups.reshape(B, num_heads, L, head_dim)",
                                 "    return kv.expand(B, num_heads, L, head_dim)")},
        fails=["test_repeat_kv"],
        diagnosis=r"(?i)expand|singleton|size.?1 (axis|dim)|new axis|None\]|unsqueeze"),
    # moves the diagonal one place too far: each new query also sees the next key
    "mask_one_too_far": Bug(
        cells={"decoding": edit(_DEC, ".tril(T - L_new)", ".tril(T - L_new + 1)")},
        fails=["test_cached_attention"],
        diagnosis=r"(?i)off by one|one (key|position) (too many|ahead|later|into the future)|future|diagonal|T ?- ?L_new|tril|peek"),
    # appends the new keys and values twice
    "cached_append_twice": Bug(
        cells={"decoding": edit(_DEC, "    k, v = cache.append(k, v)              # (B, g, T, hd)", "    cache.append(k, v)\n    k, v = cache.append(k, v)")},
        fails=["test_cached_attention"],
        diagnosis=r"(?i)twice|two times|double|more than once|again"),
    # len(cache) as len(self.keys): the batch size, not the number of cached positions
    "cache_len_batch": Bug(
        cells={"decoding": edit(_DEC, "return 0 if self.keys is None else self.keys.shape[-2]", "return 0 if self.keys is None else len(self.keys)")},
        fails=["test_kv_cache", "test_cached_attention"],
        diagnosis=r"(?i)__len__|len\(cache\)|length of (the )?cache|batch size|number of (cached )?positions|positions? (cached|stored)|shape\[(2|-2)\]|len\(self\.keys\)|first (axis|dim)"),
    # shrinks the query projection too: q_proj gets num_kv_heads * head_dim outputs
    "gqa_q_proj_shared": Bug(
        cells={"GroupedQueryAttention": edit(_GQA, "self.q_proj = nn.Linear(d_model, d_model, bias=bias)", "self.q_proj = nn.Linear(d_model, kv_size, bias=bias)")},
        fails=["test_gqa_structure", "test_gqa_forward"],
        diagnosis=r"(?i)q_proj|quer\w* (projection|heads)|num_heads ?\* ?head_dim|all (the )?query heads"),
    # forgets head_dim: counts one number per key/value head instead of head_dim numbers
    "bytes_no_head_dim": Bug(
        cells={"counts": edit(_COUNTS, "values_per_token = 2 * num_layers * num_kv_heads * head_dim", "values_per_token = 2 * num_layers * num_kv_heads")},
        fails=["test_count_kv_cache_bytes"],
        diagnosis=r"(?i)head_dim|numbers? per (key|head|value)|\bfeatures\b"),
}
