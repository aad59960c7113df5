"""Held-out set, chapter 4 (masking): mistakes written before any check was changed for
them, each absent from tests/submissions/masks.py.

Solution cells: padding_mask, causal_mask, masked_softmax, scaled_dot_product_attention,
to_torch_key_padding_mask.
"""
from . import Bug, edit, reference

NOTEBOOK = "04_masks"

_PADDING = reference(NOTEBOOK, "padding_mask")
_CAUSAL = reference(NOTEBOOK, "causal_mask")
_SOFTMAX = reference(NOTEBOOK, "masked_softmax")
_SDPA = reference(NOTEBOOK, "scaled_dot_product_attention")
_TO_TORCH = reference(NOTEBOOK, "to_torch_key_padding_mask")
_SOFTMAX_TESTS = ["test_masked_softmax", "test_scaled_dot_product_attention", "test_invariances"]

CORRECT = {
    # masks by comparing aranges; torch.where to fill; the weights multiplied by the mask to
    # zero the fully masked rows; the conversion by logical_not of a reshape.
    "aranges_where_logical_not": {
        "padding_mask": '''
def padding_mask(lengths, max_len):
    positions = torch.arange(max_len, device=lengths.device)
    return lengths[:, None, None, None] > positions
''',
        "causal_mask": '''
def causal_mask(q_len, k_len=None, device=None):
    k_len = q_len if k_len is None else k_len
    rows = torch.arange(q_len, device=device)[:, None]
    cols = torch.arange(k_len, device=device)[None, :]
    return cols <= rows
''',
        "masked_softmax": '''
def masked_softmax(scores, mask=None):
    if mask is None:
        return scores.softmax(dim=-1)
    filled = torch.where(mask, scores, torch.finfo(scores.dtype).min)
    return filled.softmax(dim=-1) * mask
''',
        "to_torch_key_padding_mask": '''
def to_torch_key_padding_mask(mask):
    return mask.reshape(mask.shape[0], mask.shape[-1]).logical_not()
''',
    },
    # the softmax written out: exponentials of the shifted scores times the mask, divided
    # by a sum clamped away from 0 (a fully masked row gives 0 / tiny = 0); attention with
    # einsum.
    "explicit_exp_einsum": {
        "masked_softmax": '''
def masked_softmax(scores, mask=None):
    if mask is None:
        mask = torch.ones_like(scores, dtype=torch.bool)
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    e = (filled - filled.amax(dim=-1, keepdim=True)).exp() * mask
    return e / e.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(scores.dtype).tiny)
''',
        "scaled_dot_product_attention": '''
def scaled_dot_product_attention(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key) / math.sqrt(query.shape[-1])
    weights = masked_softmax(scores, mask)
    return torch.einsum("...qk,...kd->...qd", weights, value), weights
''',
    },
}

BUGS = {
    # --- padding_mask
    # lengths compared without a new axis: (max_len,) against (B,).
    "padding_lengths_not_unsqueezed": Bug(
        cells={"padding_mask": edit(_PADDING, "positions < lengths[:, None]", "positions < lengths")},
        fails=["test_padding_mask"],
        diagnosis=r"(?i)lengths\[:, None\]|new axis|unsqueeze|broadcast.{0,60}(B|lengths)"),
    # A float mask (1.0 / 0.0) where a boolean one is asked for.
    "padding_mask_float": Bug(
        cells={"padding_mask": edit(_PADDING, "return real[:, None, None, :]",
                                    "return real[:, None, None, :].float()")},
        fails=["test_padding_mask"],
        diagnosis=r"(?i)bool|dtype"),
    # The mask's length taken from the longest sequence, not max_len.
    "padding_uses_longest_length": Bug(
        cells={"padding_mask": edit(_PADDING, "torch.arange(max_len, device=lengths.device)",
                                    "torch.arange(int(lengths.max()), device=lengths.device)")},
        fails=["test_padding_mask"],
        diagnosis=r"(?i)max_len|longest|lengths\.max",
        notes="every test's batch holds a sequence of length max_len"),

    # --- causal_mask
    # k_len ignored: always square.
    "causal_ignores_k_len": Bug(
        cells={"causal_mask": edit(_CAUSAL, "torch.ones(q_len, k_len,", "torch.ones(q_len, q_len,")},
        fails=["test_causal_mask"],
        diagnosis=r"(?i)k_len (is |was )?ignored|square|\d+ = q_len|q_len.{0,20}instead of.{0,20}k_len"),
    # tril(1): each query also sees the next key (diagonal off by one, the other way than
    # the catalogue's tril(-1)).
    "causal_one_key_ahead": Bug(
        cells={"causal_mask": edit(_CAUSAL, ".tril()", ".tril(1)")},
        fails=["test_causal_mask"],
        diagnosis=r"(?i)off by one|next (key|token|position)|one (key|position) ahead|diagonal.{0,40}(1|above)|tril\(1\)"),
    # torch.ones without dtype: a float mask.
    "causal_float_mask": Bug(
        cells={"causal_mask": edit(_CAUSAL, "torch.ones(q_len, k_len, dtype=torch.bool, device=device)",
                                   "torch.ones(q_len, k_len, device=device)")},
        fails=["test_causal_mask"],
        diagnosis=r"(?i)bool|dtype"),

    # --- masked_softmax
    # With no mask, the scores come back unnormalised.
    "masked_softmax_no_mask_returns_scores": Bug(
        cells={"masked_softmax": edit(_SOFTMAX, "        return torch.softmax(scores, dim=-1)\n",
                                      "        return scores\n")},
        fails=["test_masked_softmax", "test_scaled_dot_product_attention"],
        diagnosis=r"(?i)mask=None|without a mask|no mask|mask is None"),
    # softmax, zero the masked weights, renormalise: right except fully masked rows (0 / 0).
    "masked_softmax_renormalised": Bug(
        cells={"masked_softmax": edit(_SOFTMAX,
            "    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # (..., Lq, Lk)\n"
            "    weights = torch.softmax(scores, dim=-1)                             # (..., Lq, Lk)\n"
            "    return weights.masked_fill(~mask, 0.0)  # zeroes fully masked rows; no-op elsewhere\n",
            "    weights = torch.softmax(scores, dim=-1) * mask\n"
            "    return weights / weights.sum(dim=-1, keepdim=True)\n")},
        fails=_SOFTMAX_TESTS,
        diagnosis=r"(?i)(fully|all).{0,20}masked.{0,60}(NaN|0 / 0)|0 / 0|divid\w* by (zero|0)"),

    # --- scaled_dot_product_attention
    # `if mask` on a tensor: ambiguous truth value.
    "sdpa_truth_value_of_mask": Bug(
        cells={"scaled_dot_product_attention": edit(_SDPA, "weights = masked_softmax(scores, mask)",
                                                    "weights = masked_softmax(scores, mask if mask else None)")},
        fails=["test_scaled_dot_product_attention", "test_invariances"],
        diagnosis=r"(?i)is not None|is None|truth value of the mask|if mask"),

    # --- to_torch_key_padding_mask
    # Assumes the 4-D form: a (B, Lk) mask fails.
    "to_torch_assumes_4d": Bug(
        cells={"to_torch_key_padding_mask": '''
def to_torch_key_padding_mask(mask):
    return ~mask[:, 0, 0, :]
'''},
        fails=["test_to_torch_key_padding_mask"],
        diagnosis=r"(?i)\(B, Lk\)|2-D|two-dimensional|both (forms|shapes)|flat"),
    # 1 - mask as integers: the right values, the wrong dtype.
    "to_torch_integer_mask": Bug(
        cells={"to_torch_key_padding_mask": edit(_TO_TORCH, "return ~mask", "return 1 - mask.long()")},
        fails=["test_to_torch_key_padding_mask"],
        diagnosis=r"(?i)bool|dtype|integer"),
}
