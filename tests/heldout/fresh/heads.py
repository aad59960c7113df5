"""Second held-out set, chapter 2 (splitting into heads): mistakes written from the
exercises' text before they were run, each absent from tests/submissions/heads.py and
tests/heldout/heads.py.

Solution cells: split_heads, merge_heads, multihead_attention_core, head_projection,
fuse_head_weights.
"""
from tests.heldout import Bug, edit, reference
from tests.heldout.fresh import DTYPE as _DTYPE, IN_PLACE as _IN_PLACE

NOTEBOOK = "02_heads"

_SPLIT = reference(NOTEBOOK, "split_heads")
_MERGE = reference(NOTEBOOK, "merge_heads")
_CORE = reference(NOTEBOOK, "multihead_attention_core")
_PROJECTION = reference(NOTEBOOK, "head_projection")
_FUSE = reference(NOTEBOOK, "fuse_head_weights")

CORRECT = {
    # split with the sizes unpacked from x.shape[:-1] and swapaxes; merge with movedim and
    # flatten; the core with its own attention, scaled by head_dim.
    "swapaxes_movedim_own_attention": {
        "split_heads": '''
def split_heads(x, num_heads):
    *lead, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    return x.view(*lead, num_heads, d_model // num_heads).swapaxes(-3, -2)
''',
        "merge_heads": '''
def merge_heads(x):
    return x.movedim(1, 2).flatten(start_dim=2)
''',
        "multihead_attention_core": '''
def multihead_attention_core(query, key, value, num_heads):
    q, k, v = (split_heads(t, num_heads) for t in (query, key, value))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = scores.softmax(dim=-1)
    return merge_heads(weights @ v), weights
''',
    },
    # head_projection through F.linear on head i's narrowed rows; fuse by concatenating
    # the blocks along head_dim and transposing the whole.
    "narrow_linear_and_cat_transpose": {
        "head_projection": '''
def head_projection(x, weight, bias, i, num_heads):
    head_dim = weight.size(0) // num_heads
    w_i = weight.narrow(0, i * head_dim, head_dim)
    b_i = None if bias is None else bias.narrow(0, i * head_dim, head_dim)
    return F.linear(x, w_i, b_i)
''',
        "fuse_head_weights": '''
def fuse_head_weights(w):
    return torch.cat(list(w.unbind(0)), dim=1).T.contiguous()
''',
    },
}

BUGS = {
    # --- split_heads
    # The heads cut with chunk and stacked with stack's default dim=0: (num_heads, B, L,
    # head_dim), heads before the batch.
    "split_stacks_heads_first": Bug(
        cells={"split_heads": edit(_SPLIT, "    x = x.view(B, L, num_heads, head_dim)  # (B, L, h, hd)\n"
                                           "    return x.transpose(1, 2)               # (B, h, L, hd)\n",
                                   "    return torch.stack(x.chunk(num_heads, dim=-1))\n")},
        fails=["test_split_heads"],
        diagnosis=r"(?i)num_heads (axis )?(first|before (the )?batch)|heads? (axis )?(is |comes )?(first|before the batch)|stack\w* .{0,40}dim=0"),
    # The divisibility test inverted: refuses every valid split, accepts the invalid ones.
    "split_raises_when_divisible": Bug(
        cells={"split_heads": edit(_SPLIT, "if d_model % num_heads != 0:", "if d_model % num_heads == 0:")},
        fails=["test_split_heads", "test_split_heads_divisibility"],
        diagnosis=r"(?i)(raised|refus\w*)[^.]{0,80}(although|but|even though|when)[^.]{0,40}(divisible|valid)|condition.{0,30}(invert|revers)|(should not|must not) raise"),
    # head_dim computed with / : a float, which view refuses.
    "split_float_head_dim": Bug(
        cells={"split_heads": edit(_SPLIT, "    head_dim = d_model // num_heads\n", "    head_dim = d_model / num_heads\n")},
        fails=["test_split_heads"],
        diagnosis=r"(?i)head_dim.{0,60}float|/ instead of //|integer division|use //"),
    # The message has the two values the wrong way round.
    "split_message_values_swapped": Bug(
        cells={"split_heads": edit(
            _SPLIT, 'f"d_model={d_model} is not divisible by num_heads={num_heads}: "',
            'f"d_model={num_heads} is not divisible by num_heads={d_model}: "')},
        fails=["test_split_heads_divisibility"],
        diagnosis=r"(?i)(values?|numbers?) (are |were )?(swapped|the other way round|reversed)|d_model=\d+ .{0,20}but d_model is",
        notes="test_split_heads_divisibility finds both words and both numbers in "
              "the message, not which number goes with which word"),

    # --- merge_heads
    # Accumulated in float32 ("to be safe"): float64 heads come back float32.
    "merge_returns_float32": Bug(
        cells={"merge_heads": edit(_MERGE, "return x.reshape(B, L, num_heads * head_dim)",
                                   "return x.reshape(B, L, num_heads * head_dim).float()")},
        fails=["test_merge_heads"], diagnosis=_DTYPE),
    # The number of heads read from the notebook's variable num_heads, not from x.
    "merge_num_heads_from_notebook": Bug(
        cells={"merge_heads": '''
def merge_heads(x):
    B, _, L, head_dim = x.shape
    return x.transpose(1, 2).reshape(B, L, num_heads * head_dim)
'''},
        fails=["test_merge_heads"],
        diagnosis=r"(?i)num_heads.{0,80}(global|notebook|not (read )?from x|x\.shape)|(global|notebook)('s)? variable"),

    # --- multihead_attention_core
    # The keys transposed before the call, although scaled_dot_product_attention
    # transposes them itself.
    "core_key_transposed_twice": Bug(
        cells={"multihead_attention_core": edit(
            _CORE, "k = split_heads(key, num_heads)                         # (B, h, Lk, hd)",
            "k = split_heads(key, num_heads).transpose(-2, -1)        # K^T")},
        fails=["test_multihead_attention_core"],
        diagnosis=r"(?i)transpos\w*.{0,60}(twice|already|again)|keys?.{0,40}transposed"),
    # The weights merged as well as the outputs: (B, Lq, num_heads * Lk).
    "core_weights_merged": Bug(
        cells={"multihead_attention_core": edit(_CORE, "return merge_heads(heads), weights",
                                                "return merge_heads(heads), merge_heads(weights)")},
        fails=["test_multihead_attention_core"],
        diagnosis=r"(?i)weights.{0,80}(merged|merge_heads|one axis per head)"),
    # split_heads given the head size where it wants the number of heads.
    "core_split_by_head_size": Bug(
        cells={"multihead_attention_core": '''
def multihead_attention_core(query, key, value, num_heads):
    head_dim = query.shape[-1] // num_heads
    q, k, v = (split_heads(t, head_dim) for t in (query, key, value))
    heads, weights = scaled_dot_product_attention(q, k, v)
    return merge_heads(heads), weights
'''},
        fails=["test_multihead_attention_core"],
        diagnosis=r"(?i)split\w* .{0,40}(head_dim|head size) (heads|pieces)|(num_heads|number of heads) and head_dim (are )?(swapped|exchanged)|head_dim where num_heads"),
    # Its own attention, scaled by sqrt(num_heads) instead of sqrt(head_dim).
    "core_scaled_by_sqrt_num_heads": Bug(
        cells={"multihead_attention_core": '''
def multihead_attention_core(query, key, value, num_heads):
    q, k, v = (split_heads(t, num_heads) for t in (query, key, value))
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(num_heads), dim=-1)
    return merge_heads(weights @ v), weights
'''},
        fails=["test_multihead_attention_core"],
        diagnosis=r"(?i)sqrt\(num_heads\)|divid\w* by .{0,20}num_heads"),

    # --- head_projection
    # Head i's bias taken as the one entry bias[i], broadcast over every feature.
    "projection_bias_single_entry": Bug(
        cells={"head_projection": edit(_PROJECTION, "out = out + bias[rows]", "out = out + bias[i]")},
        fails=["test_head_projection"],
        diagnosis=r"(?i)bias.{0,80}(one (entry|number|value)|scalar|single|bias\[i\]|same (value|number))"),
    # The block of rows found with num_heads where head_dim belongs.
    "projection_rows_by_num_heads": Bug(
        cells={"head_projection": edit(_PROJECTION, "rows = slice(i * head_dim, (i + 1) * head_dim)",
                                       "rows = slice(i * num_heads, (i + 1) * num_heads)")},
        fails=["test_head_projection"],
        diagnosis=r"(?i)i \* num_heads|(rows?|blocks?) .{0,30}(of|in) (steps|blocks) of num_heads|num_heads (rows|instead of head_dim)"),
    # A bias of None not handled: None[rows] raises.
    "projection_bias_none_crashes": Bug(
        cells={"head_projection": edit(_PROJECTION, "    if bias is not None:\n        out = out + bias[rows]",
                                       "    out = out + bias[rows]")},
        fails=["test_head_projection"],
        diagnosis=r"(?i)bias (is|may be|can be|of) None|bias=None|no bias|bias=False|without (a )?bias"),
    # Projects all d_model features, then keeps head i's: the values are right, the
    # exercise forbids it ("never project all d_model features to keep a few").
    "projection_projects_everything": Bug(
        cells={"head_projection": '''
def head_projection(x, weight, bias, i, num_heads):
    head_dim = weight.shape[0] // num_heads
    full = F.linear(x, weight, bias)                      # (B, L, d_model)
    return full[..., i * head_dim:(i + 1) * head_dim]
'''},
        fails=["test_head_projection"],
        diagnosis=r"(?i)(whole|all d_model|full|every).{0,40}(project|feature)|project\w* (all|every)",
        notes="test_head_projection compares values only; a projection of all "
              "d_model features cut afterwards gives the same numbers"),

    # --- fuse_head_weights
    # Transposes axes 0 and 2 (heads and head_dim) instead of 1 and 2.
    "fuse_transposes_heads_and_head_dim": Bug(
        cells={"fuse_head_weights": edit(_FUSE, "w = w.transpose(1, 2)", "w = w.transpose(0, 2)")},
        fails=["test_fuse_head_weights"],
        diagnosis=r"(?i)transpos\w*.{0,60}(axes 0 and 2|the heads? axis)|wrong (pair of )?axes"),
    # mT then flatten(1, 2): the rows of the result are the heads, not their features.
    "fuse_flattens_wrong_axes": Bug(
        cells={"fuse_head_weights": '''
def fuse_head_weights(w):
    return w.mT.flatten(1, 2)
'''},
        fails=["test_fuse_head_weights"],
        diagnosis=r"(?i)flatten\w*.{0,60}(axes|axis)|\(num_heads, head_dim \* in_features\)|axis 0 has \d+ = num_heads"),
    # Transposes the caller's w in place (transpose_), then reshapes it.
    "fuse_transposes_input_in_place": Bug(
        cells={"fuse_head_weights": edit(_FUSE, "w = w.transpose(1, 2)", "w.transpose_(1, 2)")},
        fails=["test_fuse_head_weights"], diagnosis=_IN_PLACE),
    # view where reshape is needed: the transposed w is not contiguous.
    "fuse_view_after_transpose": Bug(
        cells={"fuse_head_weights": edit(_FUSE, "return w.reshape(num_heads * head_dim, in_features)",
                                         "return w.view(num_heads * head_dim, in_features)")},
        fails=["test_fuse_head_weights"],
        diagnosis=r"(?i)view\(\) cannot|view.{0,40}(non-contiguous|not contiguous)|\.reshape\(\.\.\.\) instead"),
}
