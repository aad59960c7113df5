"""Chapter 2 (head splitting): alternative correct submissions and classic bugs.

Solution cells: split_heads, merge_heads, multihead_attention_core, head_projection,
fuse_head_weights. Test cells: test_split_heads, test_split_heads_divisibility,
test_merge_heads, test_multihead_attention_core, test_head_projection,
test_fuse_head_weights. multihead_attention_core calls the notebook's split_heads and
merge_heads, so a bug in those also fails test_multihead_attention_core.
"""
from . import Bug, edit as _edit

NOTEBOOK = "02_heads"

# ------------------------------------------------------------------------------ correct
CORRECT = {
    # unflatten/permute/flatten: a rearrangement without einops
    "unflatten_permute": {
        "split_heads": '''
def split_heads(x, num_heads):
    d_model = x.shape[-1]
    if d_model % num_heads:
        raise ValueError(f"cannot split d_model={d_model} into num_heads={num_heads} equal heads")
    return x.unflatten(-1, (num_heads, d_model // num_heads)).permute(0, 2, 1, 3)
''',
        "merge_heads": '''
def merge_heads(x):
    return x.permute(0, 2, 1, 3).flatten(2)
''',
        "fuse_head_weights": '''
def fuse_head_weights(w):
    return w.permute(0, 2, 1).flatten(0, 1)
''',
    },
    # chunks stacked along a new head axis; head i's chunk of the weight and of the bias
    "stack_chunks": {
        "split_heads": '''
import torch

def split_heads(x, num_heads):
    if x.shape[-1] % num_heads != 0:
        raise ValueError(f"num_heads={num_heads} does not divide d_model={x.shape[-1]}")
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)
''',
        "merge_heads": '''
import torch

def merge_heads(x):
    return torch.cat(x.unbind(dim=1), dim=-1)
''',
        "head_projection": '''
import torch.nn.functional as F

def head_projection(x, weight, bias, i, num_heads):
    return F.linear(x, weight.chunk(num_heads)[i],
                    None if bias is None else bias.chunk(num_heads)[i])
''',
        "fuse_head_weights": '''
import torch

def fuse_head_weights(w):
    return torch.cat([w_i.T for w_i in w], dim=0)
''',
    },
    # reshape + permute with explicit copies; einsum attention computed in float64
    "reshape_permute_einsum": {
        "split_heads": '''
def split_heads(x, num_heads):
    B, L, d_model = x.shape
    if d_model % num_heads:
        raise ValueError("d_model=%d must be a multiple of num_heads=%d" % (d_model, num_heads))
    return x.reshape(B, L, num_heads, -1).permute(0, 2, 1, 3).contiguous()
''',
        "merge_heads": '''
def merge_heads(x):
    B, h, L, hd = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(B, L, h * hd)
''',
        "multihead_attention_core": '''
import math
import torch

def multihead_attention_core(query, key, value, num_heads):
    q, k, v = (split_heads(t, num_heads).double() for t in (query, key, value))
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
    weights = scores.softmax(dim=-1)
    out = torch.einsum("bhqk,bhkd->bhqd", weights, v)
    return merge_heads(out).to(query.dtype), weights.to(query.dtype)
''',
        "head_projection": '''
import torch

def head_projection(x, weight, bias, i, num_heads):
    w = weight.view(num_heads, -1, weight.shape[-1])[i]          # (hd, in)
    out = torch.einsum("bli,di->bld", x, w)
    return out if bias is None else out + bias.view(num_heads, -1)[i]
''',
    },
    # loops over heads with torch.split; baddbmm for the biased projection
    "split_loop": {
        "split_heads": '''
import torch

def split_heads(x, num_heads):
    d_model = x.shape[-1]
    if d_model % num_heads != 0:
        raise ValueError(f"d_model ({d_model}) % num_heads ({num_heads}) != 0")
    return torch.stack(torch.split(x, d_model // num_heads, dim=-1), dim=1)
''',
        "merge_heads": '''
import torch

def merge_heads(x):
    return torch.cat([x[:, i] for i in range(x.shape[1])], dim=-1)
''',
        "multihead_attention_core": '''
import torch

def multihead_attention_core(query, key, value, num_heads):
    hd = query.shape[-1] // num_heads
    outs, weights = [], []
    for i in range(num_heads):
        cols = slice(i * hd, (i + 1) * hd)
        o, w = scaled_dot_product_attention(query[..., cols], key[..., cols], value[..., cols])
        outs.append(o)
        weights.append(w)
    return torch.cat(outs, dim=-1), torch.stack(weights, dim=1)
''',
        "head_projection": '''
import torch

def head_projection(x, weight, bias, i, num_heads):
    w_i = torch.split(weight, weight.shape[0] // num_heads, dim=0)[i]   # (hd, in)
    if bias is None:
        return x @ w_i.T
    b_i = torch.split(bias, bias.shape[0] // num_heads)[i]
    B, L, n = x.shape
    return torch.baddbmm(b_i.expand(B, L, -1), x, w_i.T.expand(B, n, -1))
''',
        "fuse_head_weights": '''
import torch

def fuse_head_weights(w):
    rows = []
    for i in range(w.shape[0]):
        rows.append(w[i].transpose(0, 1))
    return torch.cat(rows)
''',
    },
}

# ------------------------------------------------------------------------------ bugs
_CORE_FAILS = "test_multihead_attention_core"

BUGS = {
    "split_no_transpose": Bug(
        cells={"split_heads": '''
def split_heads(x, num_heads):
    B, L, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    return x.reshape(B, num_heads, L, d_model // num_heads)
'''},
        fails=["test_split_heads", _CORE_FAILS],
        diagnosis=r"reshaped straight to \(B, num_heads, L, head_dim\) with no "
                  r"transpose\(1, 2\).*heads and positions are mixed",
        notes="reshape straight to (B, h, L, hd): runs, wrong values"),
    "split_strided": Bug(
        cells={"split_heads": '''
def split_heads(x, num_heads):
    B, L, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    return x.view(B, L, d_model // num_heads, num_heads).permute(0, 3, 1, 2)
'''},
        fails=["test_split_heads", _CORE_FAILS],
        diagnosis=r"cuts it as \(head_dim, num_heads\): head i gets the strided features",
        notes="head i gets features i, i+h, i+2h, ..."),
    "split_wrong_axes": Bug(
        cells={"split_heads": '''
def split_heads(x, num_heads):
    B, L, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    return x.view(B, L, num_heads, d_model // num_heads).transpose(1, 3)
'''},
        fails=["test_split_heads", _CORE_FAILS],
        diagnosis=r"you gave \(B, head_dim, num_heads, L\), the answer is \(B, num_heads, L, head_dim\)",
        notes="transpose(1, 3) instead of transpose(1, 2)"),
    "split_assert": Bug(
        cells={"split_heads": '''
def split_heads(x, num_heads):
    B, L, d_model = x.shape
    assert d_model % num_heads == 0, "d_model must be divisible by num_heads"
    return x.view(B, L, num_heads, d_model // num_heads).transpose(1, 2)
'''},
        fails=["test_split_heads_divisibility"],
        diagnosis=r"raised AssertionError.*Raise ValueError instead",
        notes="the tutorial's assert"),
    "split_unchecked_view": Bug(
        cells={"split_heads": '''
def split_heads(x, num_heads):
    B = x.shape[0]
    head_dim = x.shape[-1] // num_heads
    return x.view(B, -1, num_heads, head_dim).transpose(1, 2)
'''},
        fails=["test_split_heads_divisibility"],
        diagnosis=r"PyTorch's RuntimeError .*check d_model % num_heads",
        notes="no divisibility check; the hidden test's shapes make view(B, -1, ...) succeed"),
    "split_view_merges_batch_and_positions": Bug(
        cells={"split_heads": '''
def split_heads(x, num_heads):
    B, L, d_model = x.shape
    if d_model % num_heads != 0:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    rows = x.view(B * L, d_model)                  # merges B and L: needs contiguous memory
    return rows.view(B, L, num_heads, d_model // num_heads).transpose(1, 2)
'''},
        fails=["test_split_heads"],
        diagnosis=r"split_heads\(x, num_heads\) raised .*a \.view\(\) of a tensor whose entries "
                  r"are no longer in that order in memory.*use \.reshape\(\)",
        notes="hidden only: the non-contiguous input, with B > 1 (with B = 1 the view works)"),
    "merge_no_transpose": Bug(
        cells={"merge_heads": '''
def merge_heads(x):
    B, h, L, hd = x.shape
    return x.reshape(B, L, h * hd)
'''},
        fails=["test_merge_heads", _CORE_FAILS],
        diagnosis=r"transpose\(1, 2\) step is left out: .*mixes heads and positions",
        notes="merge without transposing back"),
    "merge_view": Bug(
        cells={"merge_heads": '''
def merge_heads(x):
    B, h, L, hd = x.shape
    return x.transpose(1, 2).view(B, L, h * hd)
'''},
        fails=["test_merge_heads", _CORE_FAILS],
        diagnosis=r"merge_heads\(x\) raised .*a \.view\(\) of a tensor whose entries are no "
                  r"longer in that order in memory.*use \.reshape\(\)",
        notes="view on the non-contiguous transposed tensor raises RuntimeError"),
    "merge_interleaved": Bug(
        cells={"merge_heads": '''
def merge_heads(x):
    B, h, L, hd = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, L, h * hd)
'''},
        fails=["test_merge_heads", _CORE_FAILS],
        diagnosis=r"interleaved",
        notes="flattens (head_dim, num_heads) instead of (num_heads, head_dim)"),
    "core_across_heads": Bug(
        cells={"multihead_attention_core": '''
import math
import torch

def multihead_attention_core(query, key, value, num_heads):
    B, L, d_model = query.shape
    depth = d_model // num_heads
    q = query.reshape(B, L, num_heads, depth)
    k = key.reshape(B, -1, num_heads, depth)
    v = value.reshape(B, -1, num_heads, depth)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(depth), dim=-1)
    return (weights @ v).reshape(B, L, d_model), weights
'''},
        fails=[_CORE_FAILS],
        diagnosis=r"the attention runs across the heads of each position instead of across",
        notes="the tutorial's Keras code: no transpose, attention over heads"),
    "core_scale_d_model": Bug(
        cells={"multihead_attention_core": '''
import math
import torch

def multihead_attention_core(query, key, value, num_heads):
    q, k, v = (split_heads(t, num_heads) for t in (query, key, value))
    scores = q @ k.transpose(-2, -1) / math.sqrt(query.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    return merge_heads(weights @ v), weights
'''},
        fails=[_CORE_FAILS],
        diagnosis=r"divides by sqrt\(d_model\) instead of sqrt\(head_dim\)",
        notes="scales by sqrt(d_model) instead of sqrt(head_dim)"),
    "core_averaged_weights": Bug(
        cells={"multihead_attention_core": '''
def multihead_attention_core(query, key, value, num_heads):
    q, k, v = (split_heads(t, num_heads) for t in (query, key, value))
    heads, weights = scaled_dot_product_attention(q, k, v)
    return merge_heads(heads), weights.mean(dim=1)
'''},
        fails=[_CORE_FAILS],
        diagnosis=r"weights is wrong: it is the right answer averaged over the num_heads axis",
        notes="nn.MultiheadAttention's default average_attn_weights=True"),
    "projection_columns": Bug(
        cells={"head_projection": '''
def head_projection(x, weight, bias, i, num_heads):
    hd = weight.shape[0] // num_heads
    cols = slice(i * hd, (i + 1) * hd)
    out = x @ weight[:, cols]
    return out if bias is None else out + bias[cols]
'''},
        fails=["test_head_projection"],
        diagnosis=r"takes columns of the weight instead of rows \(nn.Linear stores W",
        notes="forgets that nn.Linear stores W^T"),
    "projection_strided": Bug(
        cells={"head_projection": '''
def head_projection(x, weight, bias, i, num_heads):
    out = x @ weight[i::num_heads].T
    return out if bias is None else out + bias[i::num_heads]
'''},
        fails=["test_head_projection"],
        diagnosis=r"strided rows",
        notes="head blocks taken as strided rows"),
    "projection_no_bias": Bug(
        cells={"head_projection": '''
def head_projection(x, weight, bias, i, num_heads):
    hd = weight.shape[0] // num_heads
    return x @ weight[i * hd:(i + 1) * hd].T
'''},
        fails=["test_head_projection"],
        diagnosis=r"the bias step is left out",
        notes="ignores the bias"),
    "fuse_no_transpose": Bug(
        cells={"fuse_head_weights": '''
def fuse_head_weights(w):
    h, n, hd = w.shape
    return w.reshape(h * hd, n)
'''},
        fails=["test_fuse_head_weights"],
        diagnosis=r"transpose of each W_i step is left out",
        notes="reshapes the x @ W blocks without transposing them"),
    "fuse_interleaved": Bug(
        cells={"fuse_head_weights": '''
def fuse_head_weights(w):
    h, n, hd = w.shape
    return w.permute(2, 0, 1).reshape(h * hd, n)
'''},
        fails=["test_fuse_head_weights"],
        diagnosis=r"rows are interleaved",
        notes="rows ordered (head_dim, num_heads)"),
}


# ------------------------------------------------------------------ more bugs, each a whole cell
_SPLIT = '''
def split_heads(x, num_heads):
    B, L, d_model = x.shape
    if d_model % num_heads != 0:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    head_dim = d_model // num_heads
    x = x.view(B, L, num_heads, head_dim)  # (B, L, h, hd)
    return x.transpose(1, 2)               # (B, h, L, hd)
'''
_MERGE = '''
def merge_heads(x):
    B, num_heads, L, head_dim = x.shape
    x = x.transpose(1, 2)                          # (B, L, h, hd)
    return x.reshape(B, L, num_heads * head_dim)   # (B, L, d_model)
'''
_CORE = '''
def multihead_attention_core(query, key, value, num_heads):
    q = split_heads(query, num_heads)                       # (B, h, Lq, hd)
    k = split_heads(key, num_heads)                         # (B, h, Lk, hd)
    v = split_heads(value, num_heads)                       # (B, h, Lk, hd)
    heads, weights = scaled_dot_product_attention(q, k, v)
    return merge_heads(heads), weights
'''
# the core with the attention written out (as students often do once they have the heads)
_CORE_OWN = _edit(_CORE, "    heads, weights = scaled_dot_product_attention(q, k, v)\n",
                  "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
                  "    weights = torch.softmax(scores, dim=-1)                # (B, h, Lq, Lk)\n"
                  "    heads = weights @ v                                    # (B, h, Lq, hd)\n")
_PROJECTION = '''
def head_projection(x, weight, bias, i, num_heads):
    head_dim = weight.shape[0] // num_heads
    rows = slice(i * head_dim, (i + 1) * head_dim)
    out = x @ weight[rows].T             # (B, L, hd)
    if bias is not None:
        out = out + bias[rows]
    return out
'''


def _bug(cell, base, old, new, fails, diagnosis, notes=""):
    return Bug(cells={cell: _edit(base, old, new)}, fails=fails, diagnosis=diagnosis, notes=notes)


_SPLIT_FAILS = ["test_split_heads", "test_multihead_attention_core"]
_CORE_FAILS = ["test_multihead_attention_core"]

BUGS.update({
    # --- split_heads: layouts
    "split_forgets_transpose": _bug(
        "split_heads", _SPLIT, "    return x.transpose(1, 2)               # (B, h, L, hd)\n",
        "    return x\n", _SPLIT_FAILS,
        r"you gave \(B, L, num_heads, head_dim\), the answer is \(B, num_heads, L, head_dim\)"),
    "split_transposes_last_axes": _bug(
        "split_heads", _SPLIT, "x.transpose(1, 2)               # (B, h, L, hd)",
        "x.transpose(2, 3)", _SPLIT_FAILS, r"you gave \(B, L, head_dim, num_heads\), the answer"),
    "split_permutes_batch_away": _bug(
        "split_heads", _SPLIT, "x.transpose(1, 2)               # (B, h, L, hd)",
        "x.permute(2, 1, 0, 3)", _SPLIT_FAILS, r"you gave \(num_heads, L, B, head_dim\), the answer"),
    "split_transposes_first": _bug(
        "split_heads", _SPLIT, "    x = x.view(B, L, num_heads, head_dim)  # (B, L, h, hd)\n"
                               "    return x.transpose(1, 2)               # (B, h, L, hd)\n",
        "    x = x.transpose(1, 2)                  # (B, d_model, L)\n"
        "    return x.reshape(B, num_heads, L, head_dim)\n", _SPLIT_FAILS,
        r"x is transposed to \(B, d_model, L\) before the cut"),
    "split_message_without_numbers": _bug(
        "split_heads", _SPLIT, 'raise ValueError(f"d_model={d_model} is not divisible by '
                               'num_heads={num_heads}")',
        'raise ValueError("bad number of heads")', ["test_split_heads_divisibility"],
        r"does not name d_model, num_heads"),
    # --- merge_heads
    "merge_forgets_flatten": _bug(
        "merge_heads", _MERGE, "    return x.reshape(B, L, num_heads * head_dim)   # (B, L, d_model)\n",
        "    return x\n", ["test_merge_heads", "test_multihead_attention_core"],
        r"the d_model axis \(12\) is still split into two axes, num_heads x head_dim: "
        r"you gave \(B, L, num_heads, head_dim\)"),
    "merge_returns_heads": _bug(
        "merge_heads", _MERGE, "    x = x.transpose(1, 2)                          # (B, L, h, hd)\n"
                               "    return x.reshape(B, L, num_heads * head_dim)   # (B, L, d_model)\n",
        "    return x\n", ["test_merge_heads", "test_multihead_attention_core"],
        r"still split into two axes, num_heads x head_dim: you gave \(B, num_heads, L, head_dim\)"),
    "merge_transposes_in_place": _bug(
        "merge_heads", _MERGE, "    x = x.transpose(1, 2)                          # (B, L, h, hd)\n",
        "    x.transpose_(1, 2)                             # (B, L, h, hd), no copy\n",
        ["test_merge_heads"], r"changed its argument `x` in place: it came in as .* of shape "
        r"\(2, 3, 5, 4\) and left as .* of shape \(2, 5, 3, 4\)"),
    # --- the core: scaling, softmax axis, merging, delegation
    "core_float32_sqrt_constant": _bug(
        "multihead_attention_core", _CORE_OWN, "math.sqrt(q.shape[-1])",
        "torch.sqrt(torch.tensor(q.shape[-1], dtype=torch.float32))", _CORE_FAILS,
        r"float32 number .* seed 000", notes="hidden only: the float64 test at head_dim 8"),
    "core_not_scaled": _bug("multihead_attention_core", _CORE_OWN, " / math.sqrt(q.shape[-1])",
                            "", _CORE_FAILS, r"the scale step is left out"),
    "core_scaled_by_d_model": _bug("multihead_attention_core", _CORE_OWN, "math.sqrt(q.shape[-1])",
                                   "math.sqrt(query.shape[-1])", _CORE_FAILS,
                                   r"divides by sqrt\(d_model\) instead of sqrt\(head_dim\)"),
    "core_softmax_over_queries": _bug("multihead_attention_core", _CORE_OWN, "dim=-1)", "dim=-2)",
                                      _CORE_FAILS, r"over the queries \(dim=-2\)"),
    "core_scores_K_Q_T": _bug("multihead_attention_core", _CORE_OWN, "q @ k.transpose(-2, -1)",
                              "k @ q.transpose(-2, -1)", _CORE_FAILS, r"K Q\^T"),
    "core_keys_split_from_query": _bug("multihead_attention_core", _CORE,
                                       "k = split_heads(key, num_heads)",
                                       "k = split_heads(query, num_heads)", _CORE_FAILS,
                                       r"reads the query input for the keys"),
    "core_values_split_from_key": _bug("multihead_attention_core", _CORE,
                                       "v = split_heads(value, num_heads)",
                                       "v = split_heads(key, num_heads)", _CORE_FAILS,
                                       r"reads the key input for the values"),
    "core_reshape_instead_of_merge": _bug(
        "multihead_attention_core", _CORE, "return merge_heads(heads), weights",
        "return heads.reshape(query.shape), weights", _CORE_FAILS,
        r"merge of the heads step reshapes without the transpose"),
    "core_forgets_merge": _bug("multihead_attention_core", _CORE, "return merge_heads(heads), weights",
                               "return heads, weights", _CORE_FAILS,
                               r"still split into two axes, num_heads x head_dim: you gave "
                               r"\(B, num_heads, Lq, head_dim\)"),
    "core_returns_output_only": _bug("multihead_attention_core", _CORE,
                                     "return merge_heads(heads), weights",
                                     "return merge_heads(heads)", _CORE_FAILS,
                                     r"returned a Tensor .* where the exercise documents a tuple "
                                     r"\(output, weights\)"),
    "core_delegates_to_torch": Bug(
        cells={"multihead_attention_core": '''
def multihead_attention_core(query, key, value, num_heads):
    D = query.shape[-1]
    m = torch.nn.MultiheadAttention(D, num_heads, batch_first=True, bias=False)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([torch.eye(D)] * 3))
        m.out_proj.weight.copy_(torch.eye(D))
    return m(query, key, value, average_attn_weights=False)
'''}, fails=_CORE_FAILS, diagnosis=r"does the whole exercise for you"),
    # --- head_projection: blocks of an nn.Linear
    "projection_bias_first_block": _bug("head_projection", _PROJECTION, "bias[rows]",
                                        "bias[:head_dim]", ["test_head_projection"],
                                        r"adds head 0's part of the bias"),
    "projection_heads_from_one": _bug("head_projection", _PROJECTION,
                                      "rows = slice(i * head_dim, (i + 1) * head_dim)",
                                      "rows = slice((i - 1) * head_dim, i * head_dim)  # head 1 "
                                      "is the first", ["test_head_projection"],
                                      r"takes head 0's block \(off by one: .*counted from 0\)"),
    # --- fuse_head_weights
    "fuse_concatenated_columns": Bug(
        cells={"fuse_head_weights": '''
def fuse_head_weights(w):
    return torch.cat(list(w), dim=1)      # [W_0 | W_1 | ...], (in_features, h * head_dim)
'''}, fails=["test_fuse_head_weights"], diagnosis=r"x @ W matrix"),
})


# ------------------------------------------------------------------ promises of the text alone
BUGS.update({
    # the error message names both words and both numbers, each beside the other's name
    "split_message_numbers_swapped": _bug(
        "split_heads", _SPLIT, 'raise ValueError(f"d_model={d_model} is not divisible by '
                               'num_heads={num_heads}")',
        'raise ValueError(f"d_model={num_heads} is not divisible by num_heads={d_model}")',
        ["test_split_heads_divisibility"], r"writes d_model=3, which is num_heads's value: "
        r"the two numbers are swapped"),
    # "never project all d_model features to keep a few": the values are the same
    "projection_projects_every_feature": Bug(
        cells={"head_projection": '''
import torch.nn.functional as F

def head_projection(x, weight, bias, i, num_heads):
    head_dim = weight.shape[0] // num_heads
    return F.linear(x, weight, bias)[..., i * head_dim:(i + 1) * head_dim]
'''}, fails=["test_head_projection"],
        diagnosis=r"reads the other heads' rows of the weight: .* the gradient of your result "
                  r"with respect to x",
        notes="a projection of all d_model features, cut afterwards: its gradient reads the "
              "other heads' rows"),
    "projection_masks_the_weight": Bug(
        cells={"head_projection": '''
import torch

def head_projection(x, weight, bias, i, num_heads):
    head_dim = weight.shape[0] // num_heads
    keep = torch.zeros(weight.shape[0], 1, dtype=weight.dtype)
    keep[i * head_dim:(i + 1) * head_dim] = 1
    out = (x @ (weight * keep).T)[..., i * head_dim:(i + 1) * head_dim]
    return out if bias is None else out + bias[i * head_dim:(i + 1) * head_dim]
'''}, fails=["test_head_projection"],
        diagnosis=r"reads the other heads' rows of the weight: .* came out NaN",
        notes="zeroes the other heads' rows with a mask: the whole weight is still read"),
})


# ------------------------------------------------------------------ a practice set (issue 20)
# Written from the exercises' text before the checks were changed for them (each diagnosis
# too): 6 of these 15 were named then, 15 after the formula steps were completed.
_MERGE_FAILS = ["test_merge_heads", "test_multihead_attention_core"]
_FUSE = '''
def fuse_head_weights(w):
    num_heads, in_features, head_dim = w.shape
    w = w.transpose(1, 2)                                    # (h, hd, in_features)
    return w.reshape(num_heads * head_dim, in_features)      # (h*hd, in_features)
'''
BUGS.update({
    "split_view_head_dim_first": _bug(
        "split_heads", _SPLIT,
        "    x = x.view(B, L, num_heads, head_dim)  # (B, L, h, hd)\n"
        "    return x.transpose(1, 2)               # (B, h, L, hd)\n",
        "    x = x.view(B, L, head_dim, num_heads)  # (B, L, hd, h)\n"
        "    return x.permute(0, 3, 1, 2)           # (B, h, L, hd)\n", _SPLIT_FAILS,
        r"strided features i, i \+ num_heads"),
    "split_divisibility_backwards": _bug(
        "split_heads", _SPLIT, "if d_model % num_heads != 0:", "if num_heads % d_model != 0:",
        ["test_split_heads", "test_split_heads_divisibility", "test_multihead_attention_core"],
        r"The divisibility test refuses an input it must accept"),
    "split_heads_reversed": _bug(
        "split_heads", _SPLIT, "    return x.transpose(1, 2)               # (B, h, L, hd)\n",
        "    return x.transpose(1, 2).flip(1)       # (B, h, L, hd)\n", _SPLIT_FAILS,
        r"numbers the heads in reverse order"),
    "merge_transposes_last_axes": _bug(
        "merge_heads", _MERGE, "x.transpose(1, 2)                          # (B, L, h, hd)",
        "x.transpose(2, 3)", _MERGE_FAILS, r"swaps the last two axes \(transpose\(2, 3\)\)"),
    "merge_cat_along_positions": Bug(cells={"merge_heads": '''
import torch

def merge_heads(x):
    return torch.cat(x.unbind(dim=1), dim=1)
'''}, fails=_MERGE_FAILS, diagnosis=r"concatenates the heads along the positions"),
    "merge_heads_reversed": Bug(cells={"merge_heads": '''
import torch

def merge_heads(x):
    return torch.cat(x.unbind(dim=1)[::-1], dim=-1)
'''}, fails=_MERGE_FAILS, diagnosis=r"puts the heads side by side in reverse order"),
    "merge_sums_heads": Bug(cells={"merge_heads": '''
def merge_heads(x):
    return x.sum(dim=1)
'''}, fails=_MERGE_FAILS, diagnosis=r"sums the heads \(over num_heads\)"),
    "core_scales_after_softmax": _bug(
        "multihead_attention_core", _CORE_OWN,
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    weights = torch.softmax(scores, dim=-1)                # (B, h, Lq, Lk)\n",
        "    scores = q @ k.transpose(-2, -1)\n"
        "    weights = torch.softmax(scores, dim=-1) / math.sqrt(q.shape[-1])\n", _CORE_FAILS,
        r"the scale is moved after the softmax"),
    "core_divides_by_head_dim": _bug(
        "multihead_attention_core", _CORE_OWN, "math.sqrt(q.shape[-1])", "q.shape[-1]",
        _CORE_FAILS, r"divides by head_dim instead of sqrt\(head_dim\)"),
    "core_values_split_from_query": _bug(
        "multihead_attention_core", _CORE, "v = split_heads(value, num_heads)",
        "v = split_heads(query, num_heads)", _CORE_FAILS,
        r"reads the query input for the values"),
    "core_key_value_swapped": _bug(
        "multihead_attention_core", _CORE, "scaled_dot_product_attention(q, k, v)",
        "scaled_dot_product_attention(q, v, k)", _CORE_FAILS,
        r"swaps the key and value inputs"),
    "core_weights_transposed": _bug(
        "multihead_attention_core", _CORE, "return merge_heads(heads), weights",
        "return merge_heads(heads), weights.transpose(-2, -1)", _CORE_FAILS,
        r"weights is wrong: .*returns them transposed, \(B, num_heads, Lk, Lq\)"),
    "projection_subtracts_bias": _bug(
        "head_projection", _PROJECTION, "out = out + bias[rows]", "out = out - bias[rows]",
        ["test_head_projection"], r"subtracts the bias instead of adding it"),
    "projection_block_counted_from_end": _bug(
        "head_projection", _PROJECTION, "rows = slice(i * head_dim, (i + 1) * head_dim)",
        "rows = slice((num_heads - 1 - i) * head_dim, (num_heads - i) * head_dim)",
        ["test_head_projection"], r"takes head \d+'s block of rows, .* instead of head i = "),
    "fuse_heads_reversed": _bug(
        "fuse_head_weights", _FUSE, "w = w.transpose(1, 2)", "w = w.flip(0).transpose(1, 2)",
        ["test_fuse_head_weights"], r"puts the heads in reverse order"),
})

# a second practice round (errors the student's code raises): the error restated in the
# exercise's terms; 4 of 5 named before (one by luck, with a wrong explanation), 5 after
BUGS.update({
    "core_attention_tuple_not_unpacked": _bug(
        "multihead_attention_core", _CORE,
        "    heads, weights = scaled_dot_product_attention(q, k, v)\n"
        "    return merge_heads(heads), weights\n",
        "    heads = scaled_dot_product_attention(q, k, v)\n"
        "    return merge_heads(heads), heads[1]\n", _CORE_FAILS,
        r"a tuple has no \.shape: a tuple is used where one tensor is expected; .*unpack it"),
    "split_size_from_the_notebook": _bug(
        "split_heads", _SPLIT, "    head_dim = d_model // num_heads\n",
        "    head_dim = 512 // num_heads   # the notebook's d_model\n",
        ["test_split_heads", "test_split_heads_divisibility", "test_multihead_attention_core"],
        r"170 is none of this call's sizes .*read every size from the input's \.shape"),
    "projection_weight_not_transposed": _bug(
        "head_projection", _PROJECTION, "out = x @ weight[rows].T",
        "out = x @ weight[rows]", ["test_head_projection"],
        r"the product wants B transposed \(nn\.Linear keeps its weight as \(out_features, "
        r"in_features\)"),
    "core_merges_transposed_heads": _bug(
        "multihead_attention_core", _CORE, "    return merge_heads(heads), weights\n",
        "    return merge_heads(heads.transpose(1, 2)), weights\n", _CORE_FAILS,
        r"output is wrong: the values are right but in another layout"),
})

# a third round: a size read from the wrong tensor (the keys reshaped with the queries' length)
BUGS["core_keys_reshaped_with_query_length"] = Bug(cells={"multihead_attention_core": '''
def multihead_attention_core(query, key, value, num_heads):
    B, L, D = query.shape
    hd = D // num_heads
    q, k, v = (t.reshape(B, L, num_heads, hd).transpose(1, 2) for t in (query, key, value))
    heads, weights = scaled_dot_product_attention(q, k, v)
    return merge_heads(heads), weights
'''}, fails=_CORE_FAILS, diagnosis=r"with 7 = Lk in place of 4 = Lq \(size 1 of the view\)",
    notes="hidden only: the cross-attention test (Lq != Lk)")


# issue 20: mistakes that RAISE (helper i20raise's practice set; each diagnosis was written
# from the exercise's text before the checks named the cause: diagnose.error_cause)
from functools import partial as _partial  # noqa: E402

from tests.submissions import replaced_in as _replaced_in  # noqa: E402

_raising = _partial(_replaced_in, NOTEBOOK)   # _raising(cell, old, new): {cell: its new code}


BUGS.update({
    "raise_merge_view_after_transpose": Bug(
        cells=_raising("merge_heads", "x.reshape(B, L, num_heads * head_dim)",
                       "x.view(B, L, num_heads * head_dim)"),
        fails=["test_merge_heads", "test_multihead_attention_core"],
        diagnosis=r"view.*(transpos|contiguous)|\.contiguous\(\)|reshape"),
    "raise_split_view_d_model_per_head": Bug(
        cells=_raising("split_heads", "x.view(B, L, num_heads, head_dim)",
                       "x.view(B, L, num_heads, d_model)"),
        fails=["test_split_heads", "test_split_heads_divisibility",
               "test_multihead_attention_core"],
        diagnosis=r"head_dim.*(in place of|instead of|where).*d_model|"
                  r"d_model.*(in place of|instead of|where).*head_dim"),
    "raise_core_key_not_split": Bug(
        cells=_raising("multihead_attention_core",
                       "k = split_heads(key, num_heads) ", "k = key "),
        fails=["test_multihead_attention_core"],
        diagnosis=r"key.*(not split|split_heads)|split_heads.*key|(not|never) split"),
})

# a fourth practice round (issue 20, helper i20hm): written from the exercises' text, each
# diagnosis before the run; of the 10 chapter-2 mistakes of that round 5 were named before
# and 7 after the shape messages and formula steps were completed. The 3 that raise and
# stay unnamed (the values split without the transpose, the key transposed twice, the
# whole bias added to one head) are left out here: their message restates the error only.
BUGS.update({
    "split_sizes_unpacked_L_B": _bug(
        "split_heads", _SPLIT, "B, L, d_model = x.shape", "L, B, d_model = x.shape", _SPLIT_FAILS,
        r"B and L exchanged: a transpose\(0, 2\) too many or too few, or a view/reshape given "
        r"their sizes in the other order"),
    "split_float_head_dim": _bug(
        "split_heads", _SPLIT, "head_dim = d_model // num_heads", "head_dim = d_model / num_heads",
        ["test_split_heads", "test_split_heads_divisibility", "test_multihead_attention_core"],
        r"a size computed with / .*compute sizes with //"),
    "merge_sizes_unpacked_wrong_order": _bug(
        "merge_heads", _MERGE, "B, num_heads, L, head_dim = x.shape",
        "B, L, num_heads, head_dim = x.shape", _MERGE_FAILS,
        r"\(B, num_heads, L \* head_dim\) where the answer is \(B, L, d_model\): one way to "
        r"get this is a view/reshape given its sizes in another order .*unpacked from \.shape"),
    "core_returns_head0_weights": _bug(
        "multihead_attention_core", _CORE, "return merge_heads(heads), weights",
        "return merge_heads(heads), weights[:, 0]", _CORE_FAILS,
        r"weights is wrong: it is the right answer at the first index of the num_heads axis"),
    "core_causal_mask_added": _bug(
        "multihead_attention_core", _CORE_OWN, "    weights = torch.softmax(scores, dim=-1)",
        "    future = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)\n"
        "    scores = scores.masked_fill(future, float('-inf'))\n"
        "    weights = torch.softmax(scores, dim=-1)", _CORE_FAILS,
        r"adds a causal mask .* that the exercise does not ask for"),
    "projection_bias_none_sliced": _bug(
        "head_projection", _PROJECTION, "    if bias is not None:\n        out = out + bias[rows]",
        "    out = out + bias[rows]", ["test_head_projection"],
        r"a None is used as a tensor .*`bias` is None"),
    "fuse_cat_then_reshape": Bug(cells={"fuse_head_weights": '''
import torch

def fuse_head_weights(w):
    num_heads, in_features, head_dim = w.shape
    return torch.cat(list(w), dim=1).reshape(num_heads * head_dim, in_features)
'''}, fails=["test_fuse_head_weights"],
        diagnosis=r"the d_model axis and the in_features axis had been exchanged by a "
                  r"view/reshape without the transpose"),
    # written with the head projection's two new steps (a number for a block, the block's
    # start from the wrong size) and the core's self-attention reading
    "projection_bias_one_entry": _bug(
        "head_projection", _PROJECTION, "out = out + bias[rows]", "out = out + bias[i]",
        ["test_head_projection"], r"adds the one number bias\[i\] = bias\[1\] to every feature"),
    "projection_block_from_num_heads": _bug(
        "head_projection", _PROJECTION, "rows = slice(i * head_dim, (i + 1) * head_dim)",
        "rows = slice(i * num_heads, i * num_heads + head_dim)", ["test_head_projection"],
        r"starts head i's block at row i \* num_heads instead of i \* head_dim"),
    "core_self_attention_only": _bug(
        "multihead_attention_core", _CORE.replace("split_heads(key,", "split_heads(query,"),
        "v = split_heads(value, num_heads)", "v = split_heads(query, num_heads)",
        _CORE_FAILS, r"reads the query input for the keys and the values, as in self-attention"),
    # written after the tuple family was added to the core's check
    "core_returns_weights_first": _bug(
        "multihead_attention_core", _CORE, "return merge_heads(heads), weights",
        "return weights, merge_heads(heads)", _CORE_FAILS,
        r"you returned \(weights, output\), the exercise asks for \(output, weights\)"),
})


# ------------------------------------------------- i20fix's practice set (issue 20)
# Mistakes that raise, written from the exercise's text before the raise layer of
# chapters/checks/diagnose.py was changed for them (error_reason / error_cause): each
# diagnosis names the cause. See the report of branch i20fix for the counts.
# Left out: the key split and transposed before the attention, named now (the product
# that fails is inside the function the line calls), because its code is a held-out
# mistake's (the guard of tests/test_heldout.py found it).
from functools import partial as _partial  # noqa: E402

from tests.submissions import replaced_in as _replaced_in  # noqa: E402

_raising = _partial(_replaced_in, NOTEBOOK)
BUGS.update({
    "projection_whole_bias": Bug(
        cells=_raising("head_projection",
                       "out = out + bias[rows]",
                       "out = out + bias"),
        fails=["test_head_projection"],
        diagnosis=r"`bias` brings all 12 = d_model entries.{0,80}that head's block"),
    "core_merge_with_num_heads": Bug(
        cells=_raising("multihead_attention_core",
                       "return merge_heads(heads), weights",
                       "return merge_heads(heads, num_heads), weights"),
        fails=["test_multihead_attention_core"],
        diagnosis=r"merge_heads\(\) takes 1 positional argument\(s\) and the line gives it 2"),
})

# a practice round of mistakes that RAISE (issue 20, helper i20raise): written from the
# exercises' text, each diagnosis before the run; named by the shapes on the raising line
# (checks.operations.line_shapes, diagnose._cause_line_shapes) and the restated error.
BUGS.update({
    "raise_split_unpack_four": Bug(
        cells=_raising("split_heads", "B, L, d_model = x.shape",
                       "B, L, num_heads, d_model = x.shape"),
        fails=["test_split_heads", "test_split_heads_divisibility",
               "test_multihead_attention_core"],
        diagnosis=r"(3|three) axes|\(B, L, d_model\)|x\.shape.*(unpack|names)"),
})


# ------------------------------------------------- i20shape's practice set (issue 20)
# Wrong shapes, and wrong values whose cause lies upstream of where they show, written from
# the exercise's text before the trace family learnt its data flow (the line that made a
# wrong shape and what it did to it; the wrong value a departing line reads); each diagnosis
# names the cause. See the report of branch i20shape for the counts (three more of the set
# were held-out mistakes already: entropy keepdim, head_dim from in_features, sin/cos halves).
from tests.submissions import ReferenceCells as _Cells  # noqa: E402

_SHAPE_CELLS = _Cells(NOTEBOOK)
BUGS.update({
    "merge_flattens_positions_and_heads": Bug(
        cells=_SHAPE_CELLS.edit("merge_heads", ("    return x.reshape(B, L, num_heads * head_dim)",
                                                "    return x.flatten(1, 2)")),
        fails=["test_merge_heads", "test_multihead_attention_core"],
        diagnosis=r"flatten\(2, 3\)|(L|positions).*(num_heads|heads).*(merged|flatten)|"
                  r"merg.*wrong (pair|axes)"),
    "split_heads_d2l_three_axes": Bug(
        cells=_SHAPE_CELLS.edit("split_heads", (
            "    return x.transpose(1, 2)               # (B, h, L, hd)",
            "    return x.transpose(1, 2).reshape(B * num_heads, L, head_dim)")),
        fails=["test_split_heads", "test_multihead_attention_core"],
        diagnosis=r"(batch|B).*(num_heads|heads).*(merged|one axis|flatten)|B \* num_heads"),
    "core_value_not_split": Bug(
        cells=_SHAPE_CELLS.edit("multihead_attention_core", (
            "heads, weights = scaled_dot_product_attention(q, k, v)",
            "heads, weights = scaled_dot_product_attention(q, k, value)")),
        fails=["test_multihead_attention_core"],
        diagnosis=r"(value|v)\b.*(not split|split_heads|unsplit|into heads)"),
})


# issue 20: mistakes that give a wrong VALUE, of kinds the formula's steps should name (helper
# i20steps' practice set; each diagnosis was written from the exercise's text before it was
# run)
BUGS.update({
    "steps_core_scaled_by_num_heads": Bug(
        cells={"multihead_attention_core": '''
def multihead_attention_core(query, key, value, num_heads):
    q, k, v = (split_heads(t, num_heads) for t in (query, key, value))
    scores = q @ k.transpose(-2, -1) / math.sqrt(num_heads)
    weights = torch.softmax(scores, dim=-1)
    return merge_heads(weights @ v), weights
'''},
        fails=["test_multihead_attention_core"],
        diagnosis=r"sqrt\(num_heads\)|num_heads.*instead of.*head_dim"),
})
