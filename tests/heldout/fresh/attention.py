"""Second held-out set, chapter 1 (scaled dot-product attention): mistakes written from the
exercises' text before they were run, each absent from tests/submissions/attention.py and
tests/heldout/attention.py.

Solution cells: attention_scores, attention_entropy, stable_softmax,
scaled_dot_product_attention.
"""
from tests.heldout import Bug, edit, reference
from tests.heldout.fresh import DTYPE as _DTYPE, IN_PLACE as _IN_PLACE

NOTEBOOK = "01_attention"

_SCORES = reference(NOTEBOOK, "attention_scores")
_ENTROPY = reference(NOTEBOOK, "attention_entropy")
_SOFTMAX = reference(NOTEBOOK, "stable_softmax")
_SDPA = reference(NOTEBOOK, "scaled_dot_product_attention")
_SOFTMAX_TESTS = ["test_stable_softmax", "test_stable_softmax_large"]
_SDPA_TESTS = ["test_sdpa", "test_sdpa_large", "test_sdpa_cross"]

CORRECT = {
    # Scores by broadcasting (every query against every key, summed over d_k); entropy
    # through torch.special.entr, which is -x log x with entr(0) = 0.
    "broadcast_scores_and_entr": {
        "attention_scores": '''
def attention_scores(query, key):
    pairs = query.unsqueeze(-2) * key.unsqueeze(-3)      # (..., Lq, Lk, d_k)
    return pairs.sum(dim=-1) / math.sqrt(query.shape[-1])
''',
        "attention_entropy": '''
def attention_entropy(weights):
    return torch.special.entr(weights).sum(dim=-1)
''',
    },
    # Softmax whose maximum is detached (the gradient does not depend on the shift) and a
    # division written as a multiplication by the reciprocal; attention that normalises
    # with logsumexp.
    "detached_max_and_logsumexp_attention": {
        "stable_softmax": '''
def stable_softmax(scores, dim=-1):
    top = scores.detach().amax(dim=dim, keepdim=True)
    e = torch.exp(scores - top)
    return e * torch.sum(e, dim=dim, keepdim=True).reciprocal()
''',
        "scaled_dot_product_attention": '''
def scaled_dot_product_attention(query, key, value, mask=None):
    scale = 1.0 / math.sqrt(query.size(-1))
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale
    weights = torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))
    return torch.matmul(weights, value), weights
''',
    },
}

BUGS = {
    # --- attention_scores
    # The transpose written as permute(0, 2, 1): right for 3-D inputs only.
    "scores_permute_for_3d_only": Bug(
        cells={"attention_scores": edit(_SCORES, "key.transpose(-2, -1)", "key.permute(0, 2, 1)")},
        fails=["test_attention_scores"],
        diagnosis=r"(?i)(only|just) (for )?3-D|three (axes|dim)|any number of (batch|leading) (dim|axes)|no batch dim"),
    # Floor division by sqrt(d_k): every score rounded down to a whole number.
    "scores_floor_division": Bug(
        cells={"attention_scores": '''
def attention_scores(query, key):
    d_k = query.shape[-1]
    return (query @ key.transpose(-2, -1)) // math.sqrt(d_k)
'''},
        fails=["test_attention_scores"],
        diagnosis=r"(?i)floor|round\w* down|whole numbers?|integer|//"),
    # Scales the caller's query in place (query /= ...): the scores are right, the input
    # is changed.
    "scores_scale_query_in_place": Bug(
        cells={"attention_scores": '''
def attention_scores(query, key):
    query /= math.sqrt(query.shape[-1])
    return query @ key.transpose(-2, -1)
'''},
        fails=["test_attention_scores"], diagnosis=_IN_PLACE),
    # Always returns float64 ("more precise"): the exercise asks for the inputs' dtype.
    "scores_always_float64": Bug(
        cells={"attention_scores": edit(_SCORES, "return (query / math.sqrt(d_k)) @ key.transpose(-2, -1)",
                                        "return ((query / math.sqrt(d_k)) @ key.transpose(-2, -1)).double()")},
        fails=["test_attention_scores"], diagnosis=_DTYPE),

    # --- attention_entropy
    # Normalised entropy: divided by log(Lk), so that a uniform row scores 1.
    "entropy_divided_by_log_Lk": Bug(
        cells={"attention_entropy": '''
def attention_entropy(weights):
    H = -torch.special.xlogy(weights, weights).sum(dim=-1)
    return H / math.log(weights.shape[-1])          # 1 for a uniform row
'''},
        fails=["test_attention_entropy"],
        diagnosis=r"(?i)log\(?\s*L_?k\)?|normali[sz]ed entropy|divid\w* by log\(?\s*L"),
    # Forgets the weight in front of the log: -sum_j log w_j.
    "entropy_without_weight_factor": Bug(
        cells={"attention_entropy": '''
def attention_entropy(weights):
    return -torch.log(weights).sum(dim=-1)
'''},
        fails=["test_attention_entropy"],
        diagnosis=r"(?i)(without|missing|forg\w*|leaves? out) (the )?(weight|w_j|factor w)\w* (in front|before|times)|sum of (the )?log(arithm)?s of the weights|-sum log w"),
    # Takes the softmax of the weights again before the entropy.
    "entropy_of_softmaxed_weights": Bug(
        cells={"attention_entropy": '''
def attention_entropy(weights):
    p = torch.softmax(weights, dim=-1)              # make sure the rows are distributions
    return -torch.special.xlogy(p, p).sum(dim=-1)
'''},
        fails=["test_attention_entropy"],
        diagnosis=r"(?i)softmax (of|on) the weights|weights.{0,40}(softmax(ed)? again|through a softmax)|softmax.{0,30}(again|twice)"),
    # Returns a Python list (tolist) instead of a tensor.
    "entropy_returns_list": Bug(
        cells={"attention_entropy": '''
def attention_entropy(weights):
    return (-torch.special.xlogy(weights, weights).sum(dim=-1)).tolist()
'''},
        fails=["test_attention_entropy"],
        diagnosis=r"(?i)\blist\b|not a (torch\.)?tensor|return\w* a \w+ (instead|not)"),

    # --- stable_softmax
    # Moves `dim` to the last axis to work there, and forgets to move it back.
    "softmax_dim_moved_not_back": Bug(
        cells={"stable_softmax": '''
def stable_softmax(scores, dim=-1):
    s = scores.transpose(dim, -1)                   # work along the last axis
    e = (s - s.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)
'''},
        fails=["test_stable_softmax"],
        diagnosis=r"(?i)(move|transpos\w*|swap\w*).{0,60}back|axes? .{0,40}(swapped|other order|moved)|(dim|axis).{0,40}(last|-1).{0,40}(swapped|moved|transpos)"),
    # amax(...)[0], as if amax returned a pair like max: every row is shifted by the
    # maximum of the matching row of the first slice (a broadcasting accident that only
    # shows when the rows' ranges differ).
    "softmax_max_of_first_slice": Bug(
        cells={"stable_softmax": edit(_SOFTMAX, "scores.amax(dim=dim, keepdim=True)",
                                      "scores.amax(dim=dim, keepdim=True)[0]")},
        fails=["test_stable_softmax_large"],
        diagnosis=r"(?i)(first|another|other|wrong) (batch|row|slice)('s)? max|max\w* of (a|the) (wrong|other|first) (row|slice|batch)"),
    # The default argument changed to dim=0 (the first axis).
    "softmax_default_dim_0": Bug(
        cells={"stable_softmax": edit(_SOFTMAX, "def stable_softmax(scores, dim=-1):",
                                      "def stable_softmax(scores, dim=0):")},
        fails=["test_stable_softmax"],
        diagnosis=r"(?i)default|dim=0|without (a |the )?dim",
        notes="test_stable_softmax always passes dim, so a wrong default is not "
              "seen"),
    # Exponentials of the shifted scores divided by the sum of the unshifted ones: each row
    # is off by the factor exp(-max).
    "softmax_denominator_unshifted": Bug(
        cells={"stable_softmax": edit(_SOFTMAX, "exp / exp.sum(dim=dim, keepdim=True)",
                                      "exp / scores.exp().sum(dim=dim, keepdim=True)")},
        fails=_SOFTMAX_TESTS,
        diagnosis=r"(?i)(denominator|divid\w*|sum).{0,60}(unshifted|raw|original|before the shift|exp\(scores\))|rows? (do not|don't|does not) sum to 1"),

    # --- scaled_dot_product_attention
    # The output averages the keys instead of the values.
    "sdpa_output_from_keys": Bug(
        cells={"scaled_dot_product_attention": edit(_SDPA, "output = weights @ value", "output = weights @ key")},
        fails=_SDPA_TESTS,
        diagnosis=r"(?i)key.{0,40}(instead of|in place of|not).{0,20}value|averag\w* (of )?the keys"),
    # mask has no default: a call without it raises TypeError.
    "sdpa_mask_without_default": Bug(
        cells={"scaled_dot_product_attention": edit(
            _SDPA, "def scaled_dot_product_attention(query, key, value, mask=None):",
            "def scaled_dot_product_attention(query, key, value, mask):")},
        fails=["test_sdpa_large", "test_sdpa_cross"],
        diagnosis=r"(?i)mask.{0,80}(default|None|optional|required)"),
    # The values transposed before the product: a shape error unless d_v == Lk.
    "sdpa_value_transposed": Bug(
        cells={"scaled_dot_product_attention": edit(_SDPA, "output = weights @ value",
                                                    "output = weights @ value.transpose(-2, -1)")},
        fails=_SDPA_TESTS,
        diagnosis=r"(?i)values?.{0,40}transposed|transposed? (the )?values?"),
    # Two slips at once: no scaling, and the scores returned in place of the weights.
    "sdpa_unscaled_and_returns_scores": Bug(
        cells={"scaled_dot_product_attention": edit(
            _SDPA, "    scores = (query / math.sqrt(d_k)) @ key.transpose(-2, -1)  # (..., Lq, Lk)\n"
                   "    weights = torch.softmax(scores, dim=-1)                     # (..., Lq, Lk)\n"
                   "    output = weights @ value                                    # (..., Lq, d_v)\n"
                   "    return output, weights\n",
            "    scores = query @ key.transpose(-2, -1)\n"
            "    output = torch.softmax(scores, dim=-1) @ value\n"
            "    return output, scores\n")},
        fails=_SDPA_TESTS,
        diagnosis=r"(?i)(not scaled|without (the )?scal|unscaled|sqrt\(d_k\)).{0,200}(scores|softmax)|(scores|softmax).{0,200}(not scaled|unscaled|without (the )?scal)"),
    # Scales the caller's query in place with mul_.
    "sdpa_scales_query_in_place": Bug(
        cells={"scaled_dot_product_attention": edit(
            _SDPA, "    scores = (query / math.sqrt(d_k)) @ key.transpose(-2, -1)  # (..., Lq, Lk)\n",
            "    scores = query.mul_(d_k ** -0.5) @ key.transpose(-2, -1)\n")},
        fails=_SDPA_TESTS, diagnosis=_IN_PLACE),
}
