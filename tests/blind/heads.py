"""Blind set, chapter 2 (heads): mistakes and correct variants written by tester blindA from
the exercise text and the reference solutions alone (2026-11-27).
Regexes committed in 983c12e before any run; first graded 2026-11-27: 12/14 named (not named:
merge_flatten_from_axis_1, core_never_splits); no false pass, both correct variants full marks.
No regex or `fails` was changed after the run."""
from tests.heldout import Bug, edit, reference

NOTEBOOK = "02_heads"

SPLIT = reference(NOTEBOOK, "split_heads")
MERGE = reference(NOTEBOOK, "merge_heads")
CORE = reference(NOTEBOOK, "multihead_attention_core")
PROJECTION = reference(NOTEBOOK, "head_projection")
FUSE = reference(NOTEBOOK, "fuse_head_weights")

CORRECT = {
    # reshape + permute, flatten, F.linear on the head's rows
    "permute_flatten_linear": {
        "split_heads": '''
def split_heads(x, num_heads):
    """(B, L, d_model) -> (B, num_heads, L, d_model // num_heads)."""
    batch, length, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    return x.reshape(batch, length, num_heads, -1).permute(0, 2, 1, 3)
''',
        "merge_heads": '''
def merge_heads(x):
    """(B, num_heads, L, head_dim) -> (B, L, num_heads * head_dim)."""
    return x.permute(0, 2, 1, 3).flatten(start_dim=2)
''',
        "multihead_attention_core": '''
def multihead_attention_core(query, key, value, num_heads):
    """(B, Lq, d_model), (B, Lk, d_model) x2 -> ((B, Lq, d_model), (B, h, Lq, Lk))."""
    q, k, v = (split_heads(t, num_heads) for t in (query, key, value))
    head_dim = q.shape[-1]
    weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(head_dim), dim=-1)
    return merge_heads(weights @ v), weights
''',
        "head_projection": '''
def head_projection(x, weight, bias, i, num_heads):
    """x (B, L, in_features), weight (d_model, in_features) -> (B, L, head_dim)."""
    head_dim = weight.shape[0] // num_heads
    start, stop = i * head_dim, (i + 1) * head_dim
    return F.linear(x, weight[start:stop], None if bias is None else bias[start:stop])
''',
        "fuse_head_weights": '''
def fuse_head_weights(w):
    """(num_heads, in_features, head_dim) -> (num_heads * head_dim, in_features)."""
    return w.permute(0, 2, 1).flatten(0, 1)
''',
    },
    # split / cat / einsum, no view at all
    "split_cat_einsum": {
        "split_heads": '''
def split_heads(x, num_heads):
    """(B, L, d_model) -> (B, num_heads, L, head_dim)."""
    d_model = x.shape[-1]
    if d_model % num_heads != 0:
        raise ValueError(f"num_heads={num_heads} does not divide d_model={d_model}")
    return torch.stack(x.split(d_model // num_heads, dim=-1), dim=1)
''',
        "merge_heads": '''
def merge_heads(x):
    """(B, num_heads, L, head_dim) -> (B, L, num_heads * head_dim)."""
    return torch.cat(x.unbind(dim=1), dim=-1)
''',
        "multihead_attention_core": '''
def multihead_attention_core(query, key, value, num_heads):
    """Split, attend per head, merge."""
    heads, weights = scaled_dot_product_attention(split_heads(query, num_heads),
                                                  split_heads(key, num_heads),
                                                  split_heads(value, num_heads))
    output = merge_heads(heads)
    return output, weights
''',
        "head_projection": '''
def head_projection(x, weight, bias, i, num_heads):
    """Head i's rows of an nn.Linear's weight: (B, L, in_features) -> (B, L, head_dim)."""
    head_dim = weight.shape[0] // num_heads
    w_rows = weight[i * head_dim:(i + 1) * head_dim]         # (head_dim, in_features)
    out = torch.einsum("bli,oi->blo", x, w_rows)
    if bias is None:
        return out
    return out + bias[i * head_dim:(i + 1) * head_dim]
''',
        "fuse_head_weights": '''
def fuse_head_weights(w):
    """(h, in, hd) -> (h * hd, in): the heads' blocks side by side, then transposed."""
    return torch.cat(list(w), dim=-1).T.contiguous()
''',
    },
}

BUGS = {
    # reshapes straight to (B, h, L, hd) without the transpose: positions and heads get mixed
    "split_reshape_without_transpose": Bug(
        cells={"split_heads": edit(edit(SPLIT, "x = x.view(B, L, num_heads, head_dim)",
                                        "x = x.reshape(B, num_heads, L, head_dim)"),
                                   "return x.transpose(1, 2)", "return x")},
        fails=["test_split_heads"],
        diagnosis=r"(?i)transpos|permute|positions? .{0,40}(mix|scrambl|spread|across)|"
                  r"reshap\w* (straight|directly)|\(1, ?2\)"),
    # cuts head_dim first and num_heads last: head i gets every num_heads-th feature
    "split_interleaved_heads": Bug(
        cells={"split_heads": edit(edit(SPLIT, "x = x.view(B, L, num_heads, head_dim)",
                                        "x = x.view(B, L, head_dim, num_heads)"),
                                   "return x.transpose(1, 2)", "return x.permute(0, 3, 1, 2)")},
        fails=["test_split_heads"],
        diagnosis=r"(?i)interleav|strided|every num_heads|every h-?th|contiguous (block|slice|range)|"
                  r"consecutive|\(head_dim, num_heads\)|\[i ?\* ?head_dim"),
    # guards the division with an assert: AssertionError instead of ValueError
    "split_assert_not_valueerror": Bug(
        cells={"split_heads": edit(SPLIT, """    if d_model % num_heads != 0:
        raise ValueError(
            f"d_model={d_model} is not divisible by num_heads={num_heads}: "
            f"head_dim = d_model / num_heads = {d_model / num_heads:g} must be a whole number"
        )""", """    assert d_model % num_heads == 0, f"d_model={d_model} not divisible by num_heads={num_heads}\"""")},
        fails=["test_split_heads_divisibility"],
        diagnosis=r"(?i)ValueError|assert"),
    # no divisibility check at all: view fails with PyTorch's own error, or floors head_dim
    "split_no_divisibility_check": Bug(
        cells={"split_heads": edit(SPLIT, """    if d_model % num_heads != 0:
        raise ValueError(
            f"d_model={d_model} is not divisible by num_heads={num_heads}: "
            f"head_dim = d_model / num_heads = {d_model / num_heads:g} must be a whole number"
        )
""", "")},
        fails=["test_split_heads_divisibility"],
        diagnosis=r"(?i)ValueError|not divisible|does not divide|divisib|check .{0,30}(first|before)"),
    # merges without moving the heads back behind the positions
    "merge_reshape_without_transpose": Bug(
        cells={"merge_heads": edit(MERGE, "    x = x.transpose(1, 2)                          # (B, L, h, hd), not contiguous\n", "")},
        fails=["test_merge_heads"],
        diagnosis=r"(?i)transpos|permute|positions? .{0,40}(mix|scrambl|spread|across)|"
                  r"\(1, ?2\)|heads? .{0,30}(into|across) (the )?positions"),
    # flattens from axis 1: the positions are merged into the features too
    "merge_flatten_from_axis_1": Bug(
        cells={"merge_heads": edit(MERGE, "return x.reshape(B, L, num_heads * head_dim)", "return x.flatten(1)")},
        fails=["test_merge_heads"],
        diagnosis=r"(?i)flatten\(1\)|start_dim=2|flatten\w* .{0,30}(positions|length|L\b)|(merg|flatten)\w* (the )?(positions|length)|"
                  r"last two (axes|dim)|positions? .{0,30}(merged|flattened|folded)"),
    # attends with all d_model features as one head: never splits
    "core_never_splits": Bug(
        cells={"multihead_attention_core": '''
def multihead_attention_core(query, key, value, num_heads):
    output, weights = scaled_dot_product_attention(query, key, value)  # (B, Lq, d_model)
    return output, weights
'''},
        fails=["test_multihead_attention_core"],
        diagnosis=r"(?i)split|single head|one head|sqrt\(?\s*d_model|√ ?d_model|"
                  r"d_model.{0,30}instead of .{0,15}head_dim"),
    # averages the weights over the heads instead of returning every head's
    "core_averaged_weights": Bug(
        cells={"multihead_attention_core": edit(CORE, "return merge_heads(heads), weights",
                                                "return merge_heads(heads), weights.mean(dim=1)")},
        fails=["test_multihead_attention_core"],
        diagnosis=r"(?i)averag|\bmean\b|every head|each head|per.head|all (the )?heads"),
    # scales each head by sqrt(d_model) instead of sqrt(head_dim)
    "core_scaled_by_d_model": Bug(
        cells={"multihead_attention_core": '''
def multihead_attention_core(query, key, value, num_heads):
    q = split_heads(query, num_heads)                       # (B, h, Lq, hd)
    k = split_heads(key, num_heads)                         # (B, h, Lk, hd)
    v = split_heads(value, num_heads)                       # (B, h, Lk, hd)
    d_model = query.shape[-1]
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_model), dim=-1)
    return merge_heads(weights @ v), weights
'''},
        fails=["test_multihead_attention_core"],
        diagnosis=r"(?i)sqrt\(?\s*d_model|√ ?d_model|d_model.{0,30}(instead of|not|rather than) .{0,15}head_dim|"
                  r"(scal\w*|divid\w*) by .{0,10}(sqrt\(?)?head_dim|√ ?head_dim"),
    # passes value and key in each other's places
    "core_key_value_swapped": Bug(
        cells={"multihead_attention_core": edit(CORE, "scaled_dot_product_attention(q, k, v)",
                                                "scaled_dot_product_attention(q, v, k)")},
        fails=["test_multihead_attention_core"],
        diagnosis=r"(?i)swap|key and value|value and key|mix\w* up|order of (the )?arguments|"
                  r"values? (as|for) (the )?keys?|keys? (as|for) (the )?values?"),
    # takes head i's columns of the weight instead of its rows
    "projection_columns_not_rows": Bug(
        cells={"head_projection": edit(PROJECTION, "w_i = weight[rows].T", "w_i = weight[:, rows]")},
        fails=["test_head_projection"],
        diagnosis=r"(?i)columns?|rows? of (the )?weight|weight\[rows\]|block of .{0,20}rows|out_features"),
    # numbers the heads from 1: takes head i-1's block (and an empty one for i = 0)
    "projection_heads_from_one": Bug(
        cells={"head_projection": edit(PROJECTION, "rows = slice(i * head_dim, (i + 1) * head_dim)",
                                       "rows = slice((i - 1) * head_dim, i * head_dim)")},
        fails=["test_head_projection"],
        diagnosis=r"(?i)(from|at) (1|one|0|zero)\b|counted from|one.based|zero.based|off.by.one|i ?- ?1|previous head|"
                  r"neighbou?r\w* (head|block)|wrong head'?s? (block|rows)|another head"),
    # reads head_dim from x's features (in_features) instead of from the weight's rows
    "projection_head_dim_from_x": Bug(
        cells={"head_projection": edit(PROJECTION, "head_dim = weight.shape[0] // num_heads",
                                       "head_dim = x.shape[-1] // num_heads")},
        fails=["test_head_projection"],
        diagnosis=r"(?i)in_features|x\.shape|from x\b|weight\.shape\[0\]|"
                  r"d_model.{0,40}(not|instead of|rather than) .{0,20}in_features"),
    # reshapes without transposing each block: W_i is put in place but not as W_i^T
    "fuse_no_transpose": Bug(
        cells={"fuse_head_weights": edit(FUSE, "    w = w.transpose(1, 2)                                    # (h, hd, in_features): W_i^T\n", "")},
        fails=["test_fuse_head_weights"],
        diagnosis=r"(?i)transpos|W_i\^?T|\.T\b|\bmT\b|which way round|permute"),
}
