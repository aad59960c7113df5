"""Blind set, chapter 4 (masks): mistakes and correct variants written by tester blindA from
the exercise text and the reference solutions alone (2026-11-27).
Regexes committed in 983c12e before any run; first graded 2026-11-27: 10/15 named (not named:
padding_less_or_equal, causal_inverted, softmax_mask_after_only, sdpa_mask_not_passed,
key_padding_not_inverted); no false pass, both correct variants full marks. No regex or `fails`
was changed after the run."""
from tests.heldout import Bug, edit, reference

NOTEBOOK = "04_masks"

PADDING = reference(NOTEBOOK, "padding_mask")
CAUSAL = reference(NOTEBOOK, "causal_mask")
SOFTMAX = reference(NOTEBOOK, "masked_softmax")
SDPA = reference(NOTEBOOK, "scaled_dot_product_attention")
KEY_PADDING = reference(NOTEBOOK, "to_torch_key_padding_mask")

CORRECT = {
    # comparisons of aranges, torch.where, logical_not on a reshaped mask
    "arange_where": {
        "padding_mask": '''
def padding_mask(lengths, max_len):
    """lengths (B,) -> (B, 1, 1, max_len) bool, True where position < length."""
    positions = torch.arange(max_len, device=lengths.device).expand(lengths.shape[0], -1)
    return (positions < lengths.unsqueeze(1)).view(-1, 1, 1, max_len)
''',
        "causal_mask": '''
def causal_mask(q_len, k_len=None, device=None):
    """(q_len, k_len) bool, True where key j <= query i."""
    if k_len is None:
        k_len = q_len
    query_index = torch.arange(q_len, device=device).unsqueeze(1)   # (q_len, 1)
    key_index = torch.arange(k_len, device=device).unsqueeze(0)     # (1, k_len)
    return key_index <= query_index
''',
        "masked_softmax": '''
def masked_softmax(scores, mask=None):
    """softmax over the last axis where mask is True; all-masked rows give zeros."""
    if mask is None:
        return scores.softmax(dim=-1)
    allowed = mask.expand_as(scores)                     # (..., Lq, Lk)
    floor = torch.full_like(scores, torch.finfo(scores.dtype).min)
    weights = torch.where(allowed, scores, floor).softmax(dim=-1)
    return torch.where(allowed, weights, torch.zeros_like(weights))
''',
        "scaled_dot_product_attention": '''
def scaled_dot_product_attention(query, key, value, mask=None):
    """(output (..., Lq, d_v), weights (..., Lq, Lk)) with an optional bool mask."""
    scale = 1.0 / math.sqrt(query.shape[-1])
    weights = masked_softmax(torch.einsum("...qd,...kd->...qk", query, key) * scale, mask)
    return torch.einsum("...qk,...kv->...qv", weights, value), weights
''',
        "to_torch_key_padding_mask": '''
def to_torch_key_padding_mask(mask):
    """(B, 1, 1, Lk) or (B, Lk), True = real -> (B, Lk), True = padding."""
    return torch.logical_not(mask.reshape(mask.shape[0], mask.shape[-1]))
''',
    },
    # tril on a bool matrix made by comparison, a multiplied mask, flatten
    "tril_multiply": {
        "padding_mask": '''
def padding_mask(lengths, max_len):
    """(B,) lengths -> (B, 1, 1, max_len) bool."""
    real = torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]
    return real.unsqueeze(1).unsqueeze(1)
''',
        "causal_mask": '''
def causal_mask(q_len, k_len=None, device=None):
    """Lower triangle with its diagonal, top-left aligned."""
    k_len = k_len or q_len
    return torch.tril(torch.ones((q_len, k_len), device=device)).bool()
''',
        "masked_softmax": '''
def masked_softmax(scores, mask=None):
    """Weights in the dtype of scores; masked keys get exactly 0."""
    if mask is None:
        return torch.softmax(scores, -1)
    filled = scores.masked_fill(mask.logical_not(), torch.finfo(scores.dtype).min)
    return torch.softmax(filled, -1) * mask
''',
        "scaled_dot_product_attention": '''
def scaled_dot_product_attention(query, key, value, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V with a mask."""
    scores = torch.matmul(query, key.transpose(-1, -2)) / query.shape[-1] ** 0.5
    weights = masked_softmax(scores, mask=mask)
    return torch.matmul(weights, value), weights
''',
        "to_torch_key_padding_mask": '''
def to_torch_key_padding_mask(mask):
    """Our padding mask -> nn.MultiheadAttention's key_padding_mask (True = ignore)."""
    return mask.flatten(start_dim=1) == False  # noqa: E712 - element-wise comparison
''',
    },
}

BUGS = {
    # <= lets one padding position through: off by one
    "padding_less_or_equal": Bug(
        cells={"padding_mask": edit(PADDING, "positions < lengths[:, None]", "positions <= lengths[:, None]")},
        fails=["test_padding_mask"],
        diagnosis=r"(?i)off.by.one|<=|one (position |key )?too (many|far)|one extra|strictly|"
                  r"position (=|equal to|equals) (the )?length|p < length"),
    # forgets the two singleton axes: returns (B, max_len)
    "padding_no_singleton_axes": Bug(
        cells={"padding_mask": edit(PADDING, "return real[:, None, None, :]", "return real")},
        fails=["test_padding_mask"],
        diagnosis=r"(?i)singleton|\(B, 1, 1, max_len\)|unsqueeze|None, None|two (extra |missing )?axes|"
                  r"broadcast over (the )?heads"),
    # returns a 0/1 integer tensor, not a boolean one
    "padding_integer_mask": Bug(
        cells={"padding_mask": edit(PADDING, "return real[:, None, None, :]", "return real[:, None, None, :].long()")},
        fails=["test_padding_mask"],
        diagnosis=r"(?i)torch\.bool|\bbool\b|boolean"),
    # upper triangle: each query sees the future, not the past
    "causal_upper_triangle": Bug(
        cells={"causal_mask": edit(CAUSAL, ".tril()", ".triu()")},
        fails=["test_causal_mask"],
        diagnosis=r"(?i)triu|upper|future|lower triang|transpos|j ?<= ?i|keys? after"),
    # excludes the diagonal: a query may not attend to itself
    "causal_without_diagonal": Bug(
        cells={"causal_mask": edit(CAUSAL, ".tril()", ".tril(diagonal=-1)")},
        fails=["test_causal_mask"],
        diagnosis=r"(?i)diagonal|itself|own position|j ?<= ?i|j < i"),
    # aligns the triangle at the bottom-right corner instead of the top-left
    "causal_bottom_right": Bug(
        cells={"causal_mask": edit(CAUSAL, ".tril()", ".tril(diagonal=k_len - q_len)")},
        fails=["test_causal_mask"],
        diagnosis=r"(?i)bottom.right|top.left|align|corner|lower_right"),
    # returns PyTorch's convention: True where attending is forbidden
    "causal_inverted": Bug(
        cells={"causal_mask": edit(CAUSAL, "return torch.ones(", "return ~torch.ones(")},
        fails=["test_causal_mask"],
        diagnosis=r"(?i)invert|opposite|convention|True (=|means|where) .{0,20}(masked|forbidden|not allowed|blocked)|"
                  r"~|negat|upside"),
    # fills with -inf and stops: a fully masked row gives NaN
    "softmax_minus_inf_nan": Bug(
        cells={"masked_softmax": edit(edit(SOFTMAX, "torch.finfo(scores.dtype).min", "float('-inf')"),
                                      "return weights.masked_fill(~mask, 0.0)", "return weights")},
        fails=["test_masked_softmax"],
        diagnosis=r"(?i)\bnan\b|-inf|fully masked|all (its |of its )?keys (are )?masked|no (allowed |key )|"
                  r"0 ?/ ?0|empty rows?"),
    # fills with -1e9: not representable in float16
    "softmax_minus_1e9": Bug(
        cells={"masked_softmax": edit(SOFTMAX, "torch.finfo(scores.dtype).min", "-1e9")},
        fails=["test_masked_softmax"],
        diagnosis=r"(?i)-?1e9|finfo|overflow|(large|big) negative (number|constant|value)|most negative|"
                  r"does not fit|out of range|cannot be (converted|represented)"),
    # masks after the softmax without renormalising: rows no longer sum to 1
    "softmax_mask_after_only": Bug(
        cells={"masked_softmax": edit(SOFTMAX, """    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # (..., Lq, Lk)
""", "")},
        fails=["test_masked_softmax"],
        diagnosis=r"(?i)renormali|sum to 1|before (the )?softmax|after (the )?softmax|"
                  r"(multipl\w*|zero\w*) .{0,30}after"),
    # no None branch: ~None raises
    "softmax_no_none_branch": Bug(
        cells={"masked_softmax": edit(SOFTMAX, """    if mask is None:
        return torch.softmax(scores, dim=-1)
""", "")},
        fails=["test_masked_softmax"],
        diagnosis=r"(?i)\bNone\b|no mask|without (a )?mask"),
    # fills the caller's scores in place
    "softmax_in_place": Bug(
        cells={"masked_softmax": edit(SOFTMAX, "scores = scores.masked_fill(~mask,",
                                      "scores = scores.masked_fill_(~mask,")},
        fails=["test_masked_softmax"],
        diagnosis=r"(?i)in.place|modif|chang\w* (the |your )?(input|scores|argument)|masked_fill_|overwr"),
    # computes the masked scores but never passes the mask on
    "sdpa_mask_not_passed": Bug(
        cells={"scaled_dot_product_attention": edit(SDPA, "masked_softmax(scores, mask)", "masked_softmax(scores)")},
        fails=["test_scaled_dot_product_attention"],
        diagnosis=r"(?i)ignor\w* (the )?mask|mask (is |was )?(not|never) (used|applied|passed)|"
                  r"without (the )?mask|masked (keys?|positions?) .{0,40}(weight|nonzero|non-zero|attend)"),
    # forgets to invert: True still means a real token
    "key_padding_not_inverted": Bug(
        cells={"to_torch_key_padding_mask": edit(KEY_PADDING, "return ~mask                 # (B, Lk), True = ignore",
                                                 "return mask")},
        fails=["test_to_torch_key_padding_mask"],
        diagnosis=r"(?i)invert|opposite|~|True (at|=|means|for) (the )?padding|convention|negat|logical_not"),
    # returns a float mask: nn.MultiheadAttention adds a float mask to the scores
    "key_padding_float": Bug(
        cells={"to_torch_key_padding_mask": edit(KEY_PADDING, "return ~mask                 # (B, Lk), True = ignore",
                                                 "return (~mask).float()")},
        fails=["test_to_torch_key_padding_mask"],
        diagnosis=r"(?i)torch\.bool|\bbool\b|boolean|float mask|additive|added to the scores"),
}
