"""Held-out set, chapter 1 (scaled dot-product attention): mistakes written before any check
was changed for them, each absent from tests/submissions/attention.py.

Solution cells: attention_scores, attention_entropy, stable_softmax,
scaled_dot_product_attention.
"""
from . import Bug, edit, reference

NOTEBOOK = "01_attention"

_SCORES = reference(NOTEBOOK, "attention_scores")
_ENTROPY = reference(NOTEBOOK, "attention_entropy")
_SOFTMAX = reference(NOTEBOOK, "stable_softmax")
_SDPA = reference(NOTEBOOK, "scaled_dot_product_attention")
_SOFTMAX_TESTS = ["test_stable_softmax", "test_stable_softmax_large"]
_SDPA_TESTS = ["test_sdpa", "test_sdpa_large", "test_sdpa_cross"]

CORRECT = {
    # x.mT for the transpose, a negative power for the scale; entropy with nansum, which
    # drops the 0 * log(0) = NaN terms (their true value is 0).
    "mT_and_nansum": {
        "attention_scores": '''
def attention_scores(query, key):
    return torch.matmul(query, key.mT) * query.shape[-1] ** -0.5
''',
        "attention_entropy": '''
def attention_entropy(weights):
    return -(weights * weights.log()).nansum(dim=-1)
''',
    },
    # softmax as exp(s - logsumexp(s)); attention built from the chapter's own functions.
    "logsumexp_and_own_parts": {
        "stable_softmax": '''
def stable_softmax(scores, dim=-1):
    return torch.exp(scores - torch.logsumexp(scores, dim=dim, keepdim=True))
''',
        "scaled_dot_product_attention": '''
def scaled_dot_product_attention(query, key, value, mask=None):
    weights = stable_softmax(attention_scores(query, key), dim=-1)
    return torch.matmul(weights, value), weights
''',
    },
    # entropy as -sum w log w written through log-weights clamped away from zero; softmax
    # with the maximum taken by torch.max's values.
    "clamped_log_and_max_values": {
        "attention_entropy": '''
def attention_entropy(weights):
    log_w = torch.log(weights.clamp(min=torch.finfo(weights.dtype).tiny))
    return -(weights * log_w).sum(-1)
''',
        "stable_softmax": '''
def stable_softmax(scores, dim=-1):
    top = torch.max(scores, dim=dim, keepdim=True).values
    e = torch.exp(scores - top)
    return e / torch.sum(e, dim=dim, keepdim=True)
''',
    },
}

BUGS = {
    # --- attention_scores
    # Multiplies by sqrt(d_k) where the formula divides: a constant factor d_k.
    "scores_multiplied_by_sqrt_d_k": Bug(
        cells={"attention_scores": edit(_SCORES, "(query / math.sqrt(d_k))",
                                        "(query * math.sqrt(d_k))")},
        fails=["test_attention_scores"],
        diagnosis=r"(?i)multipl\w* by sqrt|times sqrt\(d_k\)|factor (of )?d_k|= d_k\b"),
    # "Stabilises" the scores by subtracting each row's maximum: every row shifted by a
    # constant (harmless inside a softmax, wrong for the scores themselves).
    "scores_row_max_subtracted": Bug(
        cells={"attention_scores": '''
def attention_scores(query, key):
    d_k = query.shape[-1]
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    return scores - scores.amax(dim=-1, keepdim=True)   # keep them small for the softmax
'''},
        fails=["test_attention_scores"],
        diagnosis=r"(?i)shift|subtract|maximum|max\b|constant per row|plus a constant"),
    # d_k read from the first axis (the batch in a batched call).
    "scores_d_k_from_first_axis": Bug(
        cells={"attention_scores": edit(_SCORES, "d_k = query.shape[-1]", "d_k = query.size(0)")},
        fails=["test_attention_scores"],
        diagnosis=r"(?i)sqrt\(\d+\).*(batch|first axis|axis 0|shape\[0\])|batch size"),

    # --- attention_entropy
    "entropy_keepdim": Bug(
        cells={"attention_entropy": edit(_ENTROPY, ".sum(dim=-1)", ".sum(dim=-1, keepdim=True)")},
        fails=["test_attention_entropy"],
        diagnosis=r"(?i)keepdim|extra (axis|dim)|trailing|singleton|size[- ]1 axis"),
    # log1p in place of log, taken for a "safe log" that avoids log(0).
    "entropy_log1p": Bug(
        cells={"attention_entropy": '''
def attention_entropy(weights):
    return -(weights * torch.log1p(weights)).sum(dim=-1)   # log1p: no log(0)
'''},
        fails=["test_attention_entropy"],
        diagnosis=r"(?i)log1p|log\(1 \+ w\)|log\(1\+w\)"),
    # sum over every axis: one number for the whole batch.
    "entropy_summed_over_everything": Bug(
        cells={"attention_entropy": edit(_ENTROPY, ".sum(dim=-1)", ".sum()")},
        fails=["test_attention_entropy"],
        diagnosis=r"(?i)(one number|scalar|0-d|single value|every axis|whole tensor|all axes)"),

    # --- stable_softmax
    # The maximum is taken along the last axis whatever `dim` is; the sum along `dim`.
    "softmax_max_along_last_axis": Bug(
        cells={"stable_softmax": edit(_SOFTMAX, "scores.amax(dim=dim, keepdim=True)",
                                      "scores.amax(dim=-1, keepdim=True)")},
        fails=_SOFTMAX_TESTS,
        diagnosis=r"(?i)max\w*.*(last axis|dim=-1|along -1)|(last axis|dim=-1).*max"),
    # Returns the log-softmax (log-probabilities), not the probabilities.
    "softmax_returns_log_probabilities": Bug(
        cells={"stable_softmax": edit(_SOFTMAX, "    return exp / exp.sum(dim=dim, keepdim=True)",
                                      "    return shifted - exp.sum(dim=dim, keepdim=True).log()")},
        fails=_SOFTMAX_TESTS,
        diagnosis=r"(?i)log[- ]?(softmax|probab)|logarithm"),
    # Divides by the sum of the shifted scores instead of the sum of their exponentials.
    # (Replaces a first entry, exp / exp.max, whose output is exactly the catalogued
    # softmax_not_normalised's: the largest exponential is 1.)
    "softmax_divides_by_sum_of_scores": Bug(
        cells={"stable_softmax": edit(_SOFTMAX, "exp / exp.sum(dim=dim, keepdim=True)",
                                      "exp / shifted.sum(dim=dim, keepdim=True)")},
        fails=_SOFTMAX_TESTS,
        diagnosis=r"(?i)sum of (the )?(shifted )?scores|divid\w* by .{0,30}scores|instead of (the sum of )?(the )?exp"),

    # --- scaled_dot_product_attention
    # The output is taken with the transposed weights (one row per key).
    "sdpa_output_from_transposed_weights": Bug(
        cells={"scaled_dot_product_attention": edit(_SDPA, "output = weights @ value",
                                                    "output = weights.transpose(-2, -1) @ value")},
        fails=_SDPA_TESTS,
        diagnosis=r"(?i)transpos|one (row|column) per key|weights\.T|swap"),
    # The scale applied after the softmax, to the weights.
    "sdpa_scale_after_softmax": Bug(
        cells={"scaled_dot_product_attention": edit(
            _SDPA, "    scores = (query / math.sqrt(d_k)) @ key.transpose(-2, -1)  # (..., Lq, Lk)\n"
                   "    weights = torch.softmax(scores, dim=-1)                     # (..., Lq, Lk)\n",
            "    scores = query @ key.transpose(-2, -1)\n"
            "    weights = torch.softmax(scores, dim=-1) / math.sqrt(d_k)\n")},
        fails=_SDPA_TESTS,
        diagnosis=r"(?i)after the softmax|scale\w* .*(weights|softmax)|before the softmax|sum to 1"),
    # Refuses queries and keys of different lengths: cross-attention raises.
    "sdpa_refuses_cross_attention": Bug(
        cells={"scaled_dot_product_attention": edit(
            _SDPA, "    d_k = query.shape[-1]\n",
            "    if query.shape[-2] != key.shape[-2]:\n"
            "        raise ValueError(f\"query and key must have the same length: \"\n"
            "                         f\"{query.shape[-2]} != {key.shape[-2]}\")\n"
            "    d_k = query.shape[-1]\n")},
        fails=["test_sdpa_large", "test_sdpa_cross"],
        diagnosis=r"(?i)(Lq|queries).{0,80}(differ|other than|!=|not equal).{0,40}(Lk|keys)|cross-attention.{0,80}(differ|valid|should not raise|refus)"),
}
