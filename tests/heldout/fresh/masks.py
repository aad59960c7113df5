"""Second held-out set, chapter 4 (masks): mistakes written from the exercises' text before
they were run, each absent from tests/submissions/masks.py and tests/heldout/masks.py.

Solution cells: padding_mask, causal_mask, masked_softmax, scaled_dot_product_attention,
to_torch_key_padding_mask.
"""
from tests.heldout import Bug, edit, reference
from tests.heldout.fresh import DTYPE as _DTYPE, IN_PLACE as _IN_PLACE

NOTEBOOK = "04_masks"

_PADDING = reference(NOTEBOOK, "padding_mask")
_CAUSAL = reference(NOTEBOOK, "causal_mask")
_SOFTMAX = reference(NOTEBOOK, "masked_softmax")
_SDPA = reference(NOTEBOOK, "scaled_dot_product_attention")
_TO_TORCH = reference(NOTEBOOK, "to_torch_key_padding_mask")
_SDPA_TESTS = ["test_scaled_dot_product_attention", "test_invariances"]

CORRECT = {
    # padding mask from a comparison with expand; causal mask from two aranges; the
    # masked softmax through an additive bias of the dtype's lowest value.
    "expand_aranges_additive_bias": {
        "padding_mask": '''
def padding_mask(lengths, max_len):
    B = lengths.shape[0]
    positions = torch.arange(max_len, device=lengths.device).expand(B, max_len)
    return (positions < lengths.unsqueeze(1)).view(B, 1, 1, max_len)
''',
        "causal_mask": '''
def causal_mask(q_len, k_len=None, device=None):
    if k_len is None:
        k_len = q_len
    i = torch.arange(q_len, device=device).unsqueeze(1)
    j = torch.arange(k_len, device=device).unsqueeze(0)
    return j <= i
''',
        "masked_softmax": '''
def masked_softmax(scores, mask=None):
    if mask is None:
        return scores.softmax(-1)
    low = torch.finfo(scores.dtype).min
    bias = torch.zeros((), dtype=scores.dtype, device=scores.device).masked_fill(
        torch.tensor(True), low)
    filled = torch.where(mask, scores, bias)
    return torch.where(mask, filled.softmax(-1), torch.zeros((), dtype=scores.dtype))
''',
    },
    # attention through einsum; the conversion by reshape and logical_not.
    "einsum_attention_reshape_conversion": {
        "scaled_dot_product_attention": '''
def scaled_dot_product_attention(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key) / math.sqrt(key.shape[-1])
    weights = masked_softmax(scores, mask)
    return torch.einsum("...qk,...kd->...qd", weights, value), weights
''',
        "to_torch_key_padding_mask": '''
def to_torch_key_padding_mask(mask):
    return torch.logical_not(mask.reshape(mask.shape[0], mask.shape[-1]))
''',
    },
}

BUGS = {
    # --- padding_mask
    # Real tokens placed at the end (left padding, as some tokenizers pad): True at
    # p >= max_len - length instead of p < length.
    "padding_on_the_left": Bug(
        cells={"padding_mask": edit(_PADDING, "real = positions < lengths[:, None]",
                                    "real = positions >= max_len - lengths[:, None]")},
        fails=["test_padding_mask"],
        diagnosis=r"(?i)(left|front|start|beginning)[- ]?pad|(end|last) (positions|tokens)|right-aligned|at the end|reversed"),
    # lengths unsqueezed in place: the caller's tensor changes shape.
    "padding_lengths_unsqueezed_in_place": Bug(
        cells={"padding_mask": edit(_PADDING, "real = positions < lengths[:, None]",
                                    "real = positions < lengths.unsqueeze_(1)")},
        fails=["test_padding_mask"], diagnosis=_IN_PLACE,
        notes="test_padding_mask does not look at lengths after the call"),

    # --- causal_mask
    # The two aranges on the wrong axes: a (k_len, q_len) mask, transposed.
    "causal_aranges_swapped": Bug(
        cells={"causal_mask": '''
def causal_mask(q_len, k_len=None, device=None):
    k_len = q_len if k_len is None else k_len
    i = torch.arange(q_len, device=device)
    j = torch.arange(k_len, device=device)
    return j[:, None] <= i[None, :]
'''},
        fails=["test_causal_mask"],
        diagnosis=r"(?i)transpos|\(k_len, q_len\)|axes.{0,30}(swapped|other order)|upper[- ]triangular"),
    # The default written backwards: q_len is overwritten by k_len (None).
    "causal_default_assigned_backwards": Bug(
        cells={"causal_mask": edit(_CAUSAL, "k_len = q_len if k_len is None else k_len",
                                   "q_len = k_len if k_len is None else q_len")},
        fails=["test_causal_mask"],
        diagnosis=r"(?i)k_len.{0,60}default|default.{0,60}k_len|k_len=None|without k_len"),

    # --- masked_softmax
    # Masked scores filled with the smallest score of the tensor: masked keys keep a share.
    "softmax_fill_with_smallest_score": Bug(
        cells={"masked_softmax": edit(_SOFTMAX, "scores.masked_fill(~mask, torch.finfo(scores.dtype).min)",
                                      "scores.masked_fill(~mask, scores.min())")},
        fails=["test_masked_softmax"],
        diagnosis=r"(?i)(smallest|minimum|min\(\)).{0,60}score|fill value.{0,60}(not|too)|masked keys?.{0,60}(share|weight|not (exactly )?(0|zero))"),
    # The clean-up zeroes the allowed keys (mask) instead of the masked ones (~mask).
    "softmax_cleanup_zeroes_allowed_keys": Bug(
        cells={"masked_softmax": edit(_SOFTMAX, "return weights.masked_fill(~mask, 0.0)",
                                      "return weights.masked_fill(mask, 0.0)")},
        fails=["test_masked_softmax"],
        diagnosis=r"(?i)(complement|invert\w*|~mask|allowed keys).{0,80}(zero|0\b)|zero\w*.{0,60}(allowed|True)"),
    # Boolean indexing assignment into the caller's scores (and it needs the mask's full
    # shape).
    "softmax_scores_written_in_place": Bug(
        cells={"masked_softmax": edit(
            _SOFTMAX, "    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # (..., Lq, Lk)\n",
            "    scores[~mask.expand_as(scores)] = torch.finfo(scores.dtype).min\n")},
        fails=["test_masked_softmax"], diagnosis=_IN_PLACE),
    # The softmax computed in float32 and never cast back.
    "softmax_returns_float32": Bug(
        cells={"masked_softmax": edit(_SOFTMAX, "weights = torch.softmax(scores, dim=-1)",
                                      "weights = torch.softmax(scores.float(), dim=-1)")},
        fails=["test_masked_softmax"], diagnosis=_DTYPE),
    # mask=None replaced by float ones, which ~ refuses.
    "softmax_none_mask_as_float_ones": Bug(
        cells={"masked_softmax": edit(_SOFTMAX, "    if mask is None:\n        return torch.softmax(scores, dim=-1)\n",
                                      "    if mask is None:\n        mask = torch.ones_like(scores)\n")},
        fails=["test_masked_softmax"],
        diagnosis=r"(?i)mask=None|mask (is|of) None|ones_like"),

    # --- scaled_dot_product_attention
    # The mask transposed before use: queries and keys swapped in it.
    "sdpa_mask_transposed": Bug(
        cells={"scaled_dot_product_attention": edit(_SDPA, "weights = masked_softmax(scores, mask)",
                                                    "weights = masked_softmax(scores, mask.transpose(-2, -1))")},
        fails=_SDPA_TESTS,
        diagnosis=r"(?i)mask.{0,60}transpos|transpos\w*.{0,40}mask|(queries|keys) and (keys|queries) swapped"),
    # A heads axis added to the mask, which already broadcasts.
    "sdpa_mask_extra_heads_axis": Bug(
        cells={"scaled_dot_product_attention": edit(_SDPA, "weights = masked_softmax(scores, mask)",
                                                    "weights = masked_softmax(scores, mask[:, None])")},
        fails=_SDPA_TESTS,
        diagnosis=r"(?i)(extra|additional|one more|added) (size-1 )?(axis|dim)|unsqueez\w*|5-D|one axis too many"),
    # mask=None not handled: .bool() on None.
    "sdpa_mask_none_crashes": Bug(
        cells={"scaled_dot_product_attention": edit(_SDPA, "weights = masked_softmax(scores, mask)",
                                                    "weights = masked_softmax(scores, mask.bool())")},
        fails=["test_scaled_dot_product_attention"],
        diagnosis=r"(?i)mask=None|mask (is|of) None|without a mask|no mask"),

    # --- to_torch_key_padding_mask
    # Indexes the 4-D layout only: a (B, Lk) mask raises.
    "to_torch_4d_only": Bug(
        cells={"to_torch_key_padding_mask": edit(_TO_TORCH, "    if mask.dim() == 4:\n        mask = mask[:, 0, 0, :]  # (B, Lk)\n",
                                                 "    mask = mask[:, 0, 0, :]\n")},
        fails=["test_to_torch_key_padding_mask"],
        diagnosis=r"(?i)\(B, Lk\) (mask|input)|2-D|two[- ]dim|both (shapes|layouts)"),
    # 1 - mask to invert: PyTorch refuses subtraction on bool.
    "to_torch_one_minus_mask": Bug(
        cells={"to_torch_key_padding_mask": edit(_TO_TORCH, "return ~mask", "return 1 - mask")},
        fails=["test_to_torch_key_padding_mask"],
        diagnosis=r"(?i)(subtract\w*|1 - mask|the - operator).{0,80}(bool|~|logical_not)"),
    # Inverts the caller's mask in place.
    "to_torch_inverts_in_place": Bug(
        cells={"to_torch_key_padding_mask": edit(_TO_TORCH, "return ~mask", "return mask.logical_not_()")},
        fails=["test_to_torch_key_padding_mask"], diagnosis=_IN_PLACE,
        notes="test_to_torch_key_padding_mask does not look at the mask after "
              "the call"),
}
