"""Held-out set, chapter 2 (head splitting): mistakes written before any check was changed
for them, each absent from tests/submissions/heads.py.

Solution cells: split_heads, merge_heads, multihead_attention_core, head_projection,
fuse_head_weights.
"""
from . import Bug, edit, reference

NOTEBOOK = "02_heads"

_SPLIT = reference(NOTEBOOK, "split_heads")
_MERGE = reference(NOTEBOOK, "merge_heads")
_CORE = reference(NOTEBOOK, "multihead_attention_core")
_PROJECTION = reference(NOTEBOOK, "head_projection")
_SPLIT_FAILS = ["test_split_heads", "test_multihead_attention_core"]
_MERGE_FAILS = ["test_merge_heads", "test_multihead_attention_core"]

CORRECT = {
    # unflatten + movedim; merge by concatenating the unbound heads; head projection through
    # F.linear on the head's rows; fuse by concatenating the per-head matrices' columns.
    "unflatten_movedim_cat": {
        "split_heads": '''
def split_heads(x, num_heads):
    d_model = x.shape[-1]
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    return x.unflatten(-1, (num_heads, d_model // num_heads)).movedim(2, 1)
''',
        "merge_heads": '''
def merge_heads(x):
    return torch.cat(x.unbind(dim=1), dim=-1)
''',
        "head_projection": '''
def head_projection(x, weight, bias, i, num_heads):
    hd = weight.shape[0] // num_heads
    w_i = weight[i * hd:(i + 1) * hd]
    b_i = None if bias is None else bias[i * hd:(i + 1) * hd]
    return F.linear(x, w_i, b_i)
''',
        "fuse_head_weights": '''
def fuse_head_weights(w):
    return torch.cat(list(w), dim=1).T
''',
    },
    # permute and flatten; attention written out per head with einsum; fuse through the
    # (in_features, h, hd) layout.
    "permute_flatten_einsum": {
        "split_heads": '''
def split_heads(x, num_heads):
    B, L, D = x.shape
    if D % num_heads != 0:
        raise ValueError(f"d_model={D} is not divisible by num_heads={num_heads}")
    return x.reshape(B, L, num_heads, -1).permute(0, 2, 1, 3)
''',
        "merge_heads": '''
def merge_heads(x):
    B, h, L, hd = x.shape
    return x.permute(0, 2, 1, 3).reshape(B, L, h * hd)
''',
        "multihead_attention_core": '''
def multihead_attention_core(query, key, value, num_heads):
    q, k, v = (split_heads(t, num_heads) for t in (query, key, value))
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    return merge_heads(torch.einsum("bhqk,bhkd->bhqd", weights, v)), weights
''',
        "fuse_head_weights": '''
def fuse_head_weights(w):
    h, n_in, hd = w.shape
    return w.permute(1, 0, 2).reshape(n_in, h * hd).T
''',
    },
}

BUGS = {
    # --- split_heads
    # The modulus written the wrong way round: refuses every valid num_heads.
    "split_divisibility_reversed": Bug(
        cells={"split_heads": edit(_SPLIT, "if d_model % num_heads != 0:",
                                   "if num_heads % d_model != 0:")},
        fails=["test_split_heads", "test_split_heads_divisibility", "test_multihead_attention_core"],
        diagnosis=r"(?i)refus|should not raise|valid (input|num_heads)|num_heads % d_model|the other way"),
    # x.split(num_heads) makes pieces of num_heads features (head_dim pieces), not num_heads
    # pieces: chunk and split confused.
    "split_pieces_of_num_heads": Bug(
        cells={"split_heads": edit(_SPLIT, "    x = x.view(B, L, num_heads, head_dim)  # (B, L, h, hd)\n"
                                           "    return x.transpose(1, 2)               # (B, h, L, hd)",
                                   "    return torch.stack(x.split(num_heads, dim=-1), dim=1)")},
        fails=_SPLIT_FAILS,
        diagnosis=r"(?i)\d+ = head_dim|head_dim (heads|pieces)|chunk|pieces of num_heads|split\(num_heads"),

    # --- merge_heads
    # The heads concatenated along the sequence axis.
    "merge_cat_along_sequence": Bug(
        cells={"merge_heads": '''
def merge_heads(x):
    return torch.cat([x[:, i] for i in range(x.shape[1])], dim=1)
'''},
        fails=_MERGE_FAILS,
        diagnosis=r"(?i)(sequence|position|\bL\b|length).{0,60}(axis|dim)|(axis|dim).{0,40}(sequence|positions)|num_heads \* L|L \* num_heads"),
    # The shape unpacked in the order of the output, not of the input.
    "merge_shape_unpacked_in_wrong_order": Bug(
        cells={"merge_heads": edit(_MERGE, "B, num_heads, L, head_dim = x.shape",
                                   "B, L, num_heads, head_dim = x.shape")},
        fails=_MERGE_FAILS,
        diagnosis=r"(?i)= num_heads.{0,80}= L\b|= L\b.{0,80}= num_heads|num_heads and L|L and num_heads|unpack"),

    # --- multihead_attention_core
    # Scales the queries by 1/sqrt(head_dim) and then calls the chapter's attention, which
    # scales again: divided by head_dim in all.
    "core_scaled_twice": Bug(
        cells={"multihead_attention_core": edit(
            _CORE, "    q = split_heads(query, num_heads)                       # (B, h, Lq, hd)\n",
            "    q = split_heads(query, num_heads)                       # (B, h, Lq, hd)\n"
            "    q = q / math.sqrt(q.shape[-1])\n")},
        fails=["test_multihead_attention_core"],
        diagnosis=r"(?i)twice|divided by head_dim|scaled two|double"),
    # The values are not split into heads (broadcast against every head).
    "core_values_not_split": Bug(
        cells={"multihead_attention_core": edit(
            _CORE, "    v = split_heads(value, num_heads)                       # (B, h, Lk, hd)\n",
            "    v = value\n")},
        fails=["test_multihead_attention_core"],
        diagnosis=r"(?i)value.{0,60}(not split|split_heads|into heads)|split_heads\(value"),
    # Returns the first head's weights only.
    "core_first_head_weights": Bug(
        cells={"multihead_attention_core": edit(_CORE, "return merge_heads(heads), weights",
                                                "return merge_heads(heads), weights[:, 0]")},
        fails=["test_multihead_attention_core"],
        diagnosis=r"(?i)(only|first) head|head 0|weights\[:, 0\]|every head"),

    # --- head_projection
    # The head's rows used without their transpose.
    "projection_rows_not_transposed": Bug(
        cells={"head_projection": edit(_PROJECTION, "w_i = weight[rows].T", "w_i = weight[rows]")},
        fails=["test_head_projection"],
        diagnosis=r"(?i)transpos|\.T\b|(out, in)|nn\.Linear stores"),
    # head_dim read from the input features.
    "projection_head_dim_from_inputs": Bug(
        cells={"head_projection": edit(_PROJECTION, "head_dim = weight.shape[0] // num_heads",
                                       "head_dim = weight.shape[1] // num_heads")},
        fails=["test_head_projection"],
        diagnosis=r"(?i)in_features|weight\.shape\[1\]|\d+ = in_features"),
    # An inclusive end: head_dim + 1 rows.
    "projection_slice_one_row_too_many": Bug(
        cells={"head_projection": edit(_PROJECTION, "rows = slice(i * head_dim, (i + 1) * head_dim)",
                                       "rows = slice(i * head_dim, (i + 1) * head_dim + 1)")},
        fails=["test_head_projection"],
        diagnosis=r"(?i)head_dim \+ 1|one (row|feature|column) too many|\d+ = head_dim \+ 1|off by one|exclusive"),
}
