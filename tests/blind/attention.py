"""Blind set, chapter 1 (scaled dot-product attention): mistakes and correct variants written
by tester blindA from the exercise text and the reference solutions alone (2026-11-27).
Regexes committed in 983c12e before any run; first graded 2026-11-27: 10/13 named (not named:
softmax_global_sum, softmax_global_max, sdpa_refuses_cross_attention); no false pass, both
correct variants full marks. No regex or `fails` was changed after the run."""
from tests.heldout import Bug, edit, reference

NOTEBOOK = "01_attention"

SCORES = reference(NOTEBOOK, "attention_scores")
ENTROPY = reference(NOTEBOOK, "attention_entropy")
SOFTMAX = reference(NOTEBOOK, "stable_softmax")
SDPA = reference(NOTEBOOK, "scaled_dot_product_attention")

CORRECT = {
    # matmul with .mT and a power instead of math.sqrt; torch.where for 0 log 0; max().values
    "mT_where_values": {
        "attention_scores": '''
def attention_scores(query, key):
    """query (..., Lq, d_k), key (..., Lk, d_k) -> (..., Lq, Lk)."""
    scale = query.shape[-1] ** -0.5
    return torch.matmul(query, key.mT) * scale
''',
        "attention_entropy": '''
def attention_entropy(weights):
    """weights (..., Lq, Lk) -> entropy of each row (..., Lq), 0 log 0 counted as 0."""
    terms = torch.where(weights > 0, weights * torch.log(weights), torch.zeros_like(weights))
    return -terms.sum(-1)
''',
        "stable_softmax": '''
def stable_softmax(scores, dim=-1):
    """softmax of scores along dim, shifted by each slice's maximum."""
    largest = scores.max(dim=dim, keepdim=True).values
    e = torch.exp(scores - largest)
    return e / torch.sum(e, dim=dim, keepdim=True)
''',
        "scaled_dot_product_attention": '''
def scaled_dot_product_attention(query, key, value, mask=None):
    """query (..., Lq, d_k), key (..., Lk, d_k), value (..., Lk, d_v)
    -> (output (..., Lq, d_v), weights (..., Lq, Lk))."""
    if mask is not None:
        raise NotImplementedError("no masks before chapter 4")
    weights = stable_softmax(attention_scores(query, key), dim=-1)
    return torch.matmul(weights, value), weights
''',
    },
    # einsum everywhere, a clamped log, the softmax written on one line
    "einsum_clamp": {
        "attention_scores": '''
def attention_scores(query, key):
    """query (..., Lq, d_k), key (..., Lk, d_k) -> (..., Lq, Lk)."""
    dots = torch.einsum("...qd,...kd->...qk", query, key)
    return dots / math.sqrt(key.size(-1))
''',
        "attention_entropy": '''
def attention_entropy(weights):
    """weights (..., Lq, Lk) -> (..., Lq)."""
    tiny = torch.finfo(weights.dtype).tiny
    return (-weights * weights.clamp_min(tiny).log()).sum(dim=-1)
''',
        "stable_softmax": '''
def stable_softmax(scores, dim=-1):
    """softmax along dim without overflow."""
    exps = (scores - scores.amax(dim, keepdim=True)).exp()
    return exps / exps.sum(dim, keepdim=True)
''',
        "scaled_dot_product_attention": '''
def scaled_dot_product_attention(query, key, value, mask=None):
    """(output (..., Lq, d_v), weights (..., Lq, Lk))."""
    assert mask is None, "masks come in chapter 4"
    d_k = query.size(-1)
    scores = torch.einsum("...qd,...kd->...qk", query, key) / math.sqrt(d_k)
    weights = scores.softmax(dim=-1)
    output = torch.einsum("...qk,...kd->...qd", weights, value)
    return output, weights
''',
    },
}

BUGS = {
    # .T reverses every axis of a batched key instead of swapping its last two
    "scores_key_dot_T": Bug(
        cells={"attention_scores": edit(SCORES, "key.transpose(-2, -1)", "key.T")},
        fails=["test_attention_scores"],
        diagnosis=r"(?i)\.T\b|\.t\(\)|revers\w* (all|every|the order)|swap\w* (only )?(the )?last two|"
                  r"transpose\(-2, ?-1\)|mT\b|last two (axes|dim)"),
    # divides by d_k rather than by its square root
    "scores_divide_by_d_k": Bug(
        cells={"attention_scores": edit(SCORES, "math.sqrt(d_k)", "d_k")},
        fails=["test_attention_scores"],
        diagnosis=r"(?i)(divid\w*|scal\w*) by d_k\b(?!\))|instead of .{0,15}(sqrt|√|square root)|"
                  r"square root|sqrt\(d_k\)|√ ?d_k"),
    # scales by the square root of the number of keys Lk, not of the feature size d_k
    "scores_sqrt_of_Lk": Bug(
        cells={"attention_scores": edit(SCORES, "d_k = query.shape[-1]", "d_k = key.shape[-2]")},
        fails=["test_attention_scores"],
        diagnosis=r"(?i)sqrt\(?\s*L_?k|√ ?L_?k|number of keys|sequence length|key\.shape\[-2\]|"
                  r"(instead of|not|rather than) (by )?(the )?(feature size |sqrt\()?d_k|feature size"),
    # multiplies element by element and sums instead of taking the matrix product with the keys
    "scores_elementwise_product": Bug(
        cells={"attention_scores": edit(SCORES, "return (query / math.sqrt(d_k)) @ key.transpose(-2, -1)",
                                        "return (query * key).sum(dim=-1, keepdim=True) / math.sqrt(d_k)")},
        fails=["test_attention_scores"],
        diagnosis=r"(?i)element.?wise|matrix product|matmul|every (query|key) (against|with) every|"
                  r"each query with each key|\* instead of @|all pairs"),
    # log of an exact zero weight: 0 * log 0 = 0 * (-inf) = NaN
    "entropy_plain_log_nan": Bug(
        cells={"attention_entropy": edit(ENTROPY, "-torch.special.xlogy(weights, weights)",
                                         "-(weights * torch.log(weights))")},
        fails=["test_attention_entropy"],
        diagnosis=r"(?i)\bnan\b|0 ?(·|\*|x|×)? ?log ?\(?0|xlogy|exactly (0|zero)|zero weights?"),
    # forgets the minus sign: entropies come out negative
    "entropy_no_minus": Bug(
        cells={"attention_entropy": edit(ENTROPY, "return -torch.special", "return torch.special")},
        fails=["test_attention_entropy"],
        diagnosis=r"(?i)\bsign\b|negative|minus|negat\w*"),
    # reduces without keepdim, so the maximum does not line up with scores along dim
    "softmax_no_keepdim": Bug(
        cells={"stable_softmax": edit(edit(SOFTMAX, "scores.amax(dim=dim, keepdim=True)", "scores.amax(dim=dim)"),
                                      "exp.sum(dim=dim, keepdim=True)", "exp.sum(dim=dim)")},
        fails=["test_stable_softmax"],
        diagnosis=r"(?i)keepdim|keep\w* (the )?(reduced )?(axis|dim)|unsqueeze|line up|broadcast"),
    # divides by the sum of the whole tensor instead of the sum along dim
    "softmax_global_sum": Bug(
        cells={"stable_softmax": edit(SOFTMAX, "return exp / exp.sum(dim=dim, keepdim=True)",
                                      "return exp / exp.sum()")},
        fails=["test_stable_softmax"],
        diagnosis=r"(?i)sum of (the )?(whole|entire|all)|global sum|over (the )?(whole|entire)|"
                  r"sum (along|over) `?dim|(each|every) (row|slice) .{0,20}sums? to 1|sums? to 1 along"),
    # subtracts the maximum in place, changing the caller's scores
    "softmax_in_place": Bug(
        cells={"stable_softmax": edit(SOFTMAX, "shifted = scores - scores.amax(dim=dim, keepdim=True)",
                                      "scores -= scores.amax(dim=dim, keepdim=True)\n    shifted = scores")},
        fails=["test_stable_softmax"],
        diagnosis=r"(?i)in.place|modif|chang\w* (the |your )?(input|scores|argument)|-=|overwr"),
    # subtracts the maximum of the whole tensor, not of each slice along dim
    "softmax_global_max": Bug(
        cells={"stable_softmax": edit(SOFTMAX, "scores.amax(dim=dim, keepdim=True)", "scores.max()")},
        fails=["test_stable_softmax_large"],
        diagnosis=r"(?i)global max|max\w* of (the )?(whole|entire) (tensor|input)|over (the )?(whole|entire)|"
                  r"max(imum)? of each (row|slice)|each row'?s? max|per.row max|along `?dim`?"),
    # softmax over the queries (dim=-2): columns sum to 1 instead of rows
    "sdpa_softmax_over_queries": Bug(
        cells={"scaled_dot_product_attention": edit(SDPA, "torch.softmax(scores, dim=-1)",
                                                    "torch.softmax(scores, dim=-2)")},
        fails=["test_sdpa"],
        diagnosis=r"(?i)(dim|axis)\s*=?\s*-2|columns?|over (the )?quer|along (the )?quer|"
                  r"(over|along) the keys|last axis"),
    # a length check that refuses cross-attention (Lq != Lk)
    "sdpa_refuses_cross_attention": Bug(
        cells={"scaled_dot_product_attention": edit(SDPA, "if key.shape[-2] != value.shape[-2]:",
                                                    "if query.shape[-2] != key.shape[-2]:")},
        fails=["test_sdpa_cross"],
        diagnosis=r"(?i)cross|Lq (!=|≠|differs?|is not)|lengths? differ|different lengths|"
                  r"Lq and Lk|(may|can) differ"),
    # returns the pair in the wrong order, (weights, output)
    "sdpa_returns_weights_first": Bug(
        cells={"scaled_dot_product_attention": edit(SDPA, "return output, weights",
                                                    "return weights, output")},
        fails=["test_sdpa"],
        diagnosis=r"(?i)\border\b|swap|\(output, weights\)|revers|weights first|output first"),
}
