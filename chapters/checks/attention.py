"""Checks of chapter 1: attention scores, a stable softmax, the entropy of attention
weights, and scaled dot-product attention (self- and cross-attention shapes).

Each check runs the student's function on random inputs (from `seed`, with the shapes
given), compares with PyTorch's own functions (torch.softmax,
F.scaled_dot_product_attention) computed in float64, and, when the numbers differ,
with the outputs of the classic mistakes on the same inputs, so that the message names
the mistake. The @reference functions compute those answers (in the student's kit they
are read from its fixtures instead, see common.py). Shape letters: B batch, Lq queries, Lk keys, d_k query/key features,
d_v value features, `...` any number of leading batch dimensions.
"""
import math
import re

import torch
import torch.nn.functional as F

from . import diagnose
from .common import (CheckFailure, Forbidden, _same_within, check, current_dims,
                     expect_close, expect_from_weights, expect_tensor, fail, forbid_spec,
                     generator, observe, passed, named_by_shape, raised, random_inputs,
                     reference, revive, said_later, softmax_condition, step_mistakes, type_name)
from .language import translated

# Bound at import, before student code runs in the same kernel.
_softmax = torch.softmax
_sdpa = F.scaled_dot_product_attention
_xlogy = torch.special.xlogy
_equal = torch.equal

# Every message of this chapter's checks, one template each with named fields, for a second
# language.
MESSAGES = translated(__name__) | {
    "warning": "Note: {name} emitted a warning: {text}",
    "scores_passed": "attention_scores: shape (..., Lq, Lk) = {shape}, dtype {dtype}, values "
                     "Q K^T / sqrt(d_k) (batch {batch}, Lq={Lq}, Lk={Lk}, d_k={d_k})",
    "entropy_nan": "{name}: {where}. NaN where the weights contain exact zeros (a one-hot "
                   "row, as a saturated softmax gives): in floating point 0 * log(0) = 0 * "
                   "(-inf) = NaN, but the entropy's limit is 0: use torch.special.xlogy(w, w), "
                   "which is 0 where w is 0, or torch.where(w > 0, w * w.log(), 0).",
    "entropy_zero_rows": "the queries whose weights hold an exact 0",
    "entropy_step": "{name} is wrong: {step}; {where}.",
    "entropy_inf": "{name}: {where}. inf (not NaN) where the weights contain exact zeros: "
                   "log(0) = -inf, and only a term multiplied by its own w, w log w, is 0 "
                   "there (its limit): a log w without its factor w, or a division by w, "
                   "stays infinite. Use torch.special.xlogy(w, w), which is 0 where w is 0.",
    "entropy_passed": "attention_entropy: shape (..., Lq) = {shape}, values in nats, 0 for "
                      "one-hot rows (batch {batch}, Lq={Lq}, Lk={Lk}, {dtype})",
    "softmax_passed": "stable_softmax matches torch.softmax along dims {dims} of a tensor of "
                      "shape {shape} ({dtype})",
    "overflow": "stable_softmax: NaN or inf for {label} ({found}). exp({offset:g}) overflows "
                "to inf (the largest finite exp() is about exp(88.7) in float32, exp(709.8) "
                "in float64), and inf / inf = NaN. Subtract the maximum along dim first: "
                "scores - scores.amax(dim=dim, keepdim=True), so every exponent is <= 0.",
    "underflow": "stable_softmax: NaN or inf for {label} ({found}). exp(-{offset:g}) "
                 "underflows to 0, and 0 / 0 = NaN. Subtracting the maximum along dim first "
                 "fixes this too: the largest entry of every row becomes exp(0) = 1.",
    "one_max": "stable_softmax: NaN or inf for {label} ({found}), although it works when all "
               "rows are alike: you subtracted ONE maximum for the whole tensor, so the rows near "
               "-{offset:g} become exp(-{twice:g}) = 0 and 0 / 0 = NaN. Subtract each row's "
               "maximum along dim, its own (not the global max of the whole tensor): "
               "scores.amax(dim=dim, keepdim=True).",
    "min_subtracted": "stable_softmax: NaN or inf for {label} ({found}): {where}you "
                      "subtracted each row's minimum (or another value below its maximum): "
                      "softmax does not change, but the exponents are then >= 0 and, in a "
                      "row whose scores span more than {range:.1f} (exp's range in {dtype}), "
                      "the largest overflows to inf and inf / inf = NaN. The row's maximum, "
                      "not its minimum, keeps every exponent <= 0: scores - "
                      "scores.amax(dim=dim, keepdim=True).",
    "min_subtracted_where": "NaN or inf where the softmax is finite: ",
    "large_passed": "stable_softmax is finite and right for scores near +-{offset:g} and for "
                    "rows that span more than exp's range ({dtype}), where exp() alone "
                    "overflows or underflows",
    "one_tensor": "{reason}: output (..., Lq, d_v) and weights (..., Lq, Lk).",
    "pair": "the pair (output, weights)",
    "not_pair": "{name} returned {what}; return the pair (output, weights).",
    "items": "{kind} of {count} items",
    "sdpa_passed": "scaled_dot_product_attention matches F.scaled_dot_product_attention: "
                   "output {output}, weights {weights} ({dtype})",
    "cross_passed": "cross-attention: batch dims {batch}, Lq={Lq} queries, Lk={Lk} keys, "
                    "d_k={d_k}, d_v={d_v}: output {output}, weights {weights} ({dtype})",
    "large_overflow": "{error}\nWith scores as large as {top:.0f}, exp(score) overflows {dtype} "
                      "to inf and inf / inf = NaN: a softmax must subtract each row's maximum "
                      "first (torch.softmax does; so does your stable_softmax).",
    "sdpa_large_passed": "scaled_dot_product_attention is finite and right with scores up to "
                         "{top:.0f} ({dtype})",
    # hints read from the student's line (HINTS' "front_transpose", "elementwise", ...)
    "hint_front_transpose": "Hint: your line transposes axes counted from the front (0, 1, "
                            "2, ...): they are the last two axes only of a tensor of one "
                            "particular number of axes; with more or fewer batch dimensions "
                            "it swaps other axes (or names one that does not exist). Count "
                            "from the end: key.transpose(-2, -1) (or key.mT).",
    "hint_elementwise": "Hint: your line multiplies with *, entry by entry, where a matrix "
                        "product, @, is likely meant (here the two tensors' axes do not line "
                        "up entry by entry): a product that sums over a shared axis is @, "
                        "query @ key.transpose(-2, -1) over d_k, weights @ value over the "
                        "keys Lk.",
    # the hints that follow a raised error (ATTENTION_HINTS, SOFTMAX_HINTS)
    "hint_cross_refused": "Hint: these are valid cross-attention inputs, which your own check "
                          "refused: the queries and the keys may have different lengths (Lq "
                          "and Lk differ: Lq queries attend over Lk keys); only key and value "
                          "must have the same length Lk, and query and key the same d_k.",
    "hint_t2d": "Hint: .t() and .T are for 2-D matrices (on more axes .T reverses all of them). "
                "Transpose the last two axes only: key.transpose(-2, -1) (or key.mT).",
    "hint_matmul": "Hint: a matrix product A @ B needs A's last axis to equal B's second-to-last. "
                   "Q K^T is query (..., Lq, d_k) @ key.transpose(-2, -1) (..., d_k, Lk); query @ "
                   "key without the transpose fails. The output is weights (..., Lq, Lk) @ value "
                   "(..., Lk, d_v). A matrix product does not commute: its operands must also come"
                   " in this order (value @ weights, the other order, pairs d_v with Lq).",
    "softmax_hint_max_pair": "Hint: tensor.max(dim=...) returns a pair (values, indices): use "
                             ".values, or tensor.amax(dim=dim, keepdim=True).",
    # what each forbidden shortcut does (FORBIDS)
    "forbid_softmax": "a softmax that PyTorch computes for you (this exercise is to write it)",
    "forbid_attention": "which computes the whole attention for you",
    "softmax_axis_mark": " (dim={dim}, the softmax's axis)",
    "shape_of_scores": "(the shape of scores)",
    "case_near_plus": "all scores near +{offset:g}",
    "case_near_minus": "all scores near -{offset:g}",
    "case_near_both": "rows near +{offset:g} and rows near -{offset:g} in one tensor",
    "case_span": "rows that span {span:g} (from -{spread:g} to about +6), more than exp's "
                 "range in {dtype}",
    "softmax_for": "stable_softmax(scores, dim={dim}) for {label}",
    "output_of": "output ({label})",
    "weights_of": "weights ({label})",
    "weights_right_hint": "The weights are right: the output is weights @ value, shape (..., "
                          "Lq, d_v).",
    "label_self": "self-attention, batch {batch}, L={L}, d_k={d_k}",
    "label_cross": "batch {batch}, Lq={Lq}, Lk={Lk}, d_k={d_k}, d_v={d_v}",
    "label_large": "scores up to {top:.0f}",
    "output_label": "output",
    "weights_label": "weights",
}

# Error messages of common slips, and what to do about them: (regex, hint).
HINTS = {
    "matmul": r"Expected size for first two dimensions of batch2|shapes cannot be multiplied",
    "t2d": r"t\(\) expects a tensor with <= 2 dimensions|use of `x\.T`",
    "max_pair": r"return_types\.max",
    # the student's own line, as the restated error quotes it ("line N of <cell>: code", or
    # in Chinese "<cell> 第 N 行：code": the student's process says it in their language)
    "front_transpose": r"(\bline \d+ of |第 \d+ 行)[^\n]*\.(transpose|swapaxes|swapdims)"
                       r"\(\s*\d+\s*,\s*\d+\s*\)",
    # the student's own raise or assert (its line, as the restated error quotes it)
    "own_raise": r"(\bline \d+ of |第 \d+ 行)[^\n]*\b(raise|assert)\b",
    "elementwise": r"(?s)must match the size of tensor b.*(\bline \d+ of |第 \d+ 行)[^\n]*"
                   r"[\w)\]]\s*\*(?![*=])\s*[\w(]",
}
# (error pattern key of HINTS, MESSAGES key of the hint), the first pattern that matches wins
ATTENTION_HINTS = [
    ("front_transpose", "hint_front_transpose"),
    ("elementwise", "hint_elementwise"),
    ("t2d", "hint_t2d"),
    ("matmul", "hint_matmul"),
]
SOFTMAX_HINTS = [("max_pair", "softmax_hint_max_pair")]


def _hint(text, hints):
    for key, hint in hints:
        if re.search(HINTS[key], text):
            return [MESSAGES[hint]]
    return []


# The shortcuts the exercises forbid (see common.Forbidden): decided by the grader from the
# submitted source, and caught here, in the student's Jupyter, when they run.
FORBIDS = (
    Forbidden("stable_softmax", ("test_stable_softmax", "test_stable_softmax_large"),
              r"softmax", **said_later(MESSAGES, "forbid_softmax")),
    Forbidden("scaled_dot_product_attention", ("test_sdpa", "test_sdpa_large", "test_sdpa_cross"),
              r"scaled_dot_product|multi_head_attention",
              **said_later(MESSAGES, "forbid_attention")),
)
FORBIDDEN = {"softmax": FORBIDS[0], "attention": FORBIDS[1]}  # by name, for _run


def _run(function, *args, name, hints=(), forbidden=None, **kwargs):
    """Call the student's function (common.observe, which also fails when it changed its
    inputs in place; forbidden: a key of FORBIDDEN): errors become messages with a hint, and
    warnings are printed as notes (a correct answer that warns keeps its points)."""
    with forbid_spec(*([FORBIDDEN[forbidden]] if forbidden else [])):
        seen = observe(function, *args, name=name, **kwargs)
    try:
        raised(seen.error, name)
    except CheckFailure as error:
        message = str(error)
        warned = " ".join(seen.warnings)
        raise CheckFailure("\n".join([message] + (_hint(warned, hints)
                                                   or _hint(message, hints)))) from None
    for text in seen.warnings[:3]:  # they cost nothing, but often name a mistake
        print("\n".join([MESSAGES["warning"].format(name=name, text=text)]
                        + _hint(text, hints)))
    return revive(seen.result)


def _leading(batch):
    """The names of the leading axes, as diagnose.named_dims names the check's `batch`."""
    return ("batch",) if len(batch) == 1 else tuple(f"batch[{i}]" for i in range(len(batch)))


def _batch_text(batch):
    return "()" if not batch else str(tuple(batch))


# ---------------------------------------------------------------------------------------
# Scores and the classic scaling mistakes
# ---------------------------------------------------------------------------------------

@reference
def _scores_answer(query, key):
    """The expected scores Q K^T / sqrt(d_k) (..., Lq, Lk) in float64; what a mistake gives
    comes from the formula's steps (step_mistakes("attention scores"))."""
    qk = query.double() @ key.double().transpose(-2, -1)
    return qk / math.sqrt(query.shape[-1])


@check
def attention_scores(attention_scores, seed=0, batch=(2,), Lq=3, Lk=5, d_k=4,
                     dtype=torch.float32, device="cpu"):
    """Check attention_scores(query, key) = Q K^T / sqrt(d_k), shape (..., Lq, Lk)."""
    name = "attention_scores(query, key)"
    query, key = random_inputs((*batch, Lq, d_k), (*batch, Lk, d_k), seed=seed, dtype=dtype,
                               device=device)
    scores = _run(attention_scores, query, key, name="attention_scores",
                  hints=ATTENTION_HINTS)
    shape = (*batch, Lq, Lk)
    expected = _scores_answer(query, key)
    mistakes = step_mistakes("attention scores", {"query": query, "key": key}, current_dims(),
                             d_k=d_k)
    axes = (*_leading(batch), "Lq", "Lk")
    named_by_shape(scores, expected, name, dtype, axes, mistakes)
    expect_tensor(scores, name, shape=shape, dtype=dtype, device=device,
                  shape_names="(..., Lq, Lk)")
    expect_close(scores, expected, name, dtype=dtype, axes=axes, mistakes=mistakes)
    passed(MESSAGES["scores_passed"].format(shape=shape, dtype=dtype, batch=_batch_text(batch),
                                            Lq=Lq, Lk=Lk, d_k=d_k))


# ---------------------------------------------------------------------------------------
# Entropy of attention weights
# ---------------------------------------------------------------------------------------

@reference
def _weights_with_zeros(batch, Lq, Lk, seed, dtype, device):
    """Softmax rows, with some one-hot rows and some rows with exact zeros."""
    (scores,) = random_inputs((*batch, Lq, Lk), seed=seed, dtype=torch.float64)
    weights = _softmax(2 * scores, dim=-1)
    flat = weights.reshape(-1, Lq, Lk)
    gen = generator(seed + 1)
    for b in range(flat.shape[0]):
        flat[b, 0] = 0.0                                     # a one-hot row
        flat[b, 0, int(torch.randint(Lk, (1,), generator=gen))] = 1.0
        if Lq > 1:                                           # a row with half its keys at 0
            row = flat[b, 1].clone()
            row[: Lk // 2] = 0.0
            flat[b, 1] = row / row.sum()
    return flat.reshape(*batch, Lq, Lk).to(dtype=dtype, device=device)


@reference
def _entropy_answer(weights):
    """The expected entropy -sum_k w log w (..., Lq) in float64 (what a mistake gives instead
    comes from the formula's steps, step_mistakes("attention entropy"))."""
    w = weights.double()
    return -_xlogy(w, w).sum(dim=-1)


@check
def attention_entropy(attention_entropy, seed=0, batch=(2,), Lq=4, Lk=6,
                      dtype=torch.float32, device="cpu"):
    """Check attention_entropy(weights) = -sum_k w log w over the last axis, in nats."""
    name = "attention_entropy(weights)"
    weights = _weights_with_zeros(batch, Lq, Lk, seed, dtype, device)
    entropy = _run(attention_entropy, weights, name="attention_entropy")
    shape = (*batch, Lq)
    expected = _entropy_answer(weights)
    mistakes = step_mistakes("attention entropy", {"weights": weights}, current_dims())
    if isinstance(entropy, torch.Tensor) and tuple(entropy.shape) != shape:
        # a step done another way may give the shape (a sum over the queries): named first
        expect_close(entropy, expected, name, dtype=dtype, mistakes=mistakes,
                     axes=(*_leading(batch), "Lq"))
    expect_tensor(entropy, name, shape=shape, dtype=dtype, device=device,
                  shape_names="(..., Lq)")
    # the non-finite family says how many and where (in the rows with exact zeros?)
    where = diagnose.nonfinite(entropy.detach(), expected, current_dims(),
                               (*_leading(batch), "Lq"),
                               {MESSAGES["entropy_zero_rows"]: (weights == 0).any(dim=-1)})
    if where:
        # a step of the formula that gives these NaN or inf (log w without its factor w)
        step = diagnose.step_nonfinite(entropy, mistakes, _same_within(dtype, None, 1.0))
        if step:
            fail(MESSAGES["entropy_step"].format(name=name, step=step, where=where))
        if not bool(entropy.detach().isnan().any()):   # inf alone: not 0 * log(0)
            fail(MESSAGES["entropy_inf"].format(name=name, where=where))
        fail(MESSAGES["entropy_nan"].format(name=name, where=where))
    expect_close(entropy, expected, name, dtype=dtype, mistakes=mistakes,
                 axes=(*_leading(batch), "Lq"))
    passed(MESSAGES["entropy_passed"].format(shape=shape, batch=_batch_text(batch), Lq=Lq,
                                             Lk=Lk, dtype=dtype))


# ---------------------------------------------------------------------------------------
# A softmax that does not overflow
# ---------------------------------------------------------------------------------------

def _stable_call(stable_softmax, scores, dim, default=False):
    """stable_softmax(scores, dim=dim) run and its shape, dtype and device checked; default:
    dim left to its default (-1, which the exercise promises), not passed."""
    passed_dim = {} if default else {"dim": dim}
    out = _run(stable_softmax, scores, **passed_dim, name="stable_softmax", hints=SOFTMAX_HINTS,
               forbidden="softmax")
    expect_tensor(out, _softmax_call(dim, default), shape=scores.shape,
                  dtype=scores.dtype, device=scores.device,
                  shape_names=MESSAGES["shape_of_scores"])
    return out


def _softmax_call(dim, default):
    """The call as the message shows it: stable_softmax(scores) where dim was left to its
    default, stable_softmax(scores, dim=0) where it was passed."""
    return "stable_softmax(scores)" if default else f"stable_softmax(scores, dim={dim})"


@reference
def _softmax_answer(scores, dim):
    """The expected softmax along dim in float64 (what a mistake gives instead comes from the
    formula's steps, step_mistakes("stable softmax"))."""
    return _softmax(scores.double(), dim=dim)


@check
def stable_softmax(stable_softmax, seed=0, shape=(2, 3, 5), dims=(-1, -2),
                   dtype=torch.float32, device="cpu"):
    """Check stable_softmax(scores, dim) against torch.softmax on ordinary scores."""
    (scores,) = random_inputs(shape, seed=seed, dtype=torch.float64)
    scores = (3 * scores).to(dtype=dtype, device=device)
    for dim in dims:
        # dim=-1, the default the exercise promises, is left to it (not passed)
        out = _stable_call(stable_softmax, scores, dim, default=dim == -1)
        expected = _softmax_answer(scores, dim)
        expect_close(out, expected, _softmax_call(dim, dim == -1),
                     dtype=dtype, condition=softmax_condition(scores, dim),
                     axes=_softmax_axes(len(shape), dim),
                     mistakes=step_mistakes("stable softmax", {"scores": scores},
                                            current_dims(), dim=dim))
    passed(MESSAGES["softmax_passed"].format(dims=tuple(dims), shape=tuple(shape), dtype=dtype))


def _softmax_axes(rank, dim):
    """The axes' names for the families' sentences: "axis k", the softmax's own marked."""
    return tuple(diagnose.numbered_axis(k) + (MESSAGES["softmax_axis_mark"].format(dim=dim)
                                               if k == dim % rank else "")
                 for k in range(rank))


def _exp_range(dtype):
    """The largest x with a finite exp(x) in `dtype` (88.7 in float32, 709.8 in float64,
    11.1 in float16)."""
    return math.log(torch.finfo(dtype).max)


@reference
def _large_score_cases(shape, seed, dim, offset, dtype):
    """[(label, scores in float64, where subtracting the row's minimum gives NaN or inf)]:
    rows near +offset, near -offset, both, and rows that span more than exp's range in
    `dtype` (one entry per row far below the others)."""
    (noise,) = random_inputs(shape, seed=seed, dtype=torch.float64)
    # one sign per row along `dim`, alternating +1, -1 from row to row
    moved = noise.movedim(dim, -1)
    rows = moved.shape[:-1]
    signs = 1.0 - 2.0 * (torch.arange(math.prod(rows)) % 2).double()
    signs = signs.reshape(*rows, 1).movedim(-1, dim)
    # each row's lowest entry (at a position that moves from row to row) sent to -spread:
    # the row's maximum keeps every exponent <= 0 (its weight underflows to 0, rightly);
    # its minimum, or a mean, leaves exponents above the range, which overflow to inf
    # (the mean of a row of n entries is about -spread / n: above the range too)
    n = moved.shape[-1]
    spread = float(max(offset, math.ceil(2 * n * _exp_range(dtype))))
    low = torch.nn.functional.one_hot(torch.arange(math.prod(rows)) % n, n).bool()
    wide = torch.where(low.reshape(moved.shape), -spread, 3 * moved).movedim(-1, dim)
    cases = [
        (MESSAGES["case_near_plus"].format(offset=offset), offset + 3 * noise),
        (MESSAGES["case_near_minus"].format(offset=offset), -offset + 3 * noise),
        (MESSAGES["case_near_both"].format(offset=offset), signs * offset + 3 * noise),
        (MESSAGES["case_span"].format(span=spread + 6, spread=spread, dtype=str(dtype)[6:]),
         wide),
    ]
    # with each case, where the softmax that subtracts each row's minimum, computed in
    # `dtype`, is NaN or inf (bool, the shape of the scores)
    found = []
    for label, scores in cases:
        low = scores.to(dtype)
        e = (low - low.amin(dim=dim, keepdim=True)).exp()
        found.append((label, scores, ~torch.isfinite(e / e.sum(dim=dim, keepdim=True))))
    return found


@check
def stable_softmax_large_scores(stable_softmax, seed=0, shape=(2, 3, 5), dim=-1,
                                offset=1000.0, dtype=torch.float32, device="cpu"):
    """Check that stable_softmax stays finite and right for scores far from 0.

    Case 1: every row near +offset (a naive exp overflows: exp(1000) = inf in float32
    and float64, inf / inf = NaN). Case 2: every row near -offset (exp underflows to 0,
    0 / 0 = NaN). Case 3: rows near +offset and -offset in one tensor (subtracting one
    maximum for the whole tensor underflows the low rows to 0 / 0). Case 4: rows whose
    scores span more than exp's range in dtype (subtracting the row's minimum overflows).
    """
    cases = _large_score_cases(shape, seed, dim, offset, dtype)
    for i, (label, scores64, min_bad) in enumerate(cases):
        scores = scores64.to(dtype=dtype, device=device)
        out = _stable_call(stable_softmax, scores, dim)
        expected = _softmax_answer(scores, dim)
        if not bool(torch.isfinite(out.detach()).all()):
            # the non-finite family: how many, and where
            found = diagnose.nonfinite(out.detach(), expected, current_dims(),
                                       _softmax_axes(len(shape), dim))
            if i < 3:  # the case's own cause: overflow, underflow, one maximum for all
                fail(MESSAGES[("overflow", "underflow", "one_max")[i]].format(
                    label=label, offset=offset, twice=2 * offset, found=found))
            bad = ~torch.isfinite(out.detach()).cpu()
            where = "" if _equal(bad, min_bad) else MESSAGES["min_subtracted_where"]
            fail(MESSAGES["min_subtracted"].format(label=label, where=where, found=found,
                                                   range=_exp_range(dtype), dtype=dtype))
        expect_close(out, expected, MESSAGES["softmax_for"].format(dim=dim, label=label),
                     dtype=dtype, condition=softmax_condition(scores, dim),
                     mistakes=step_mistakes("stable softmax", {"scores": scores},
                                            current_dims(), dim=dim))
    passed(MESSAGES["large_passed"].format(offset=offset, dtype=dtype))


# ---------------------------------------------------------------------------------------
# Scaled dot-product attention
# ---------------------------------------------------------------------------------------



@reference
def _attention_answers(query, key, value):
    """(expected output, expected weights) in float64: PyTorch's own attention for the
    output (what a mistake gives comes from the formula's steps, step_mistakes)."""
    q, k, v = query.double(), key.double(), value.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return _sdpa(q, k, v), _softmax(scores, dim=-1)


def _check_attention(fn, query, key, value, label, hints=ATTENTION_HINTS, **mask):
    """Run fn(query, key, value, **mask) and compare (output, weights) with the reference.
    mask: {"mask": None} to pass the exercise's mask parameter by name, as "no mask" (this
    chapter's promise; chapter 4's checks pass real masks), or nothing."""
    name = "scaled_dot_product_attention"
    *batch, Lq, d_k = query.shape
    Lk, d_v = value.shape[-2:]
    batch = tuple(batch)
    dtype, device = query.dtype, query.device
    result = _run(fn, query, key, value, name=name, hints=hints, forbidden="attention",
                  **mask)

    out_shape, w_shape = (*batch, Lq, d_v), (*batch, Lq, Lk)
    if isinstance(result, torch.Tensor):   # the kind family: a tensor, not the pair
        fail(MESSAGES["one_tensor"].format(reason=diagnose.kind(
            f"{name}(query, key, value)", MESSAGES["pair"], result, (tuple, list))))
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        what = (MESSAGES["items"].format(kind=type_name(result), count=len(result))
                if isinstance(result, (tuple, list)) else type_name(result))
        fail(MESSAGES["not_pair"].format(name=name, what=what))
    output, weights = result
    if isinstance(output, torch.Tensor) and isinstance(weights, torch.Tensor):
        swapped = diagnose.item_order((output.shape, weights.shape), (out_shape, w_shape),
                                      (MESSAGES["output_label"], MESSAGES["weights_label"]))
        if swapped:
            fail(diagnose.explained(name, swapped))
    expected_out, expected_w = _attention_answers(query, key, value)
    # the formula with one step left out or moved (checks/diagnose.py), to name a mistake
    inputs = {"query": query, "key": key, "value": value, "mask": None}
    weight_mistakes = step_mistakes("attention weights", inputs, current_dims(), d_k=d_k)
    output_mistakes = step_mistakes("attention", inputs, current_dims(), d_k=d_k)
    # the axes' names, for the families' sentences (as diagnose.named_dims names the batch)
    leading = _leading(batch)
    output_name = MESSAGES["output_of"].format(label=label)
    weights_name = MESSAGES["weights_of"].format(label=label)
    named_by_shape(output, expected_out, output_name, dtype, (*leading, "Lq", "d_v"),
                    output_mistakes)
    named_by_shape(weights, expected_w, weights_name, dtype, (*leading, "Lq", "Lk"),
                    weight_mistakes)
    expect_tensor(output, "output", shape=out_shape, dtype=dtype, device=device,
                  shape_names="(..., Lq, d_v)")
    expect_tensor(weights, "weights", shape=w_shape, dtype=dtype, device=device,
                  shape_names="(..., Lq, Lk)")
    # the weights' rounding follows the scores' magnitude; the output's, the values'
    condition = softmax_condition(query.double() @ key.double().transpose(-2, -1)
                                  / math.sqrt(d_k))
    expect_close(weights, expected_w, weights_name, dtype=dtype,
                 condition=condition, axes=(*leading, "Lq", "Lk"), mistakes=weight_mistakes)
    # right weights, and an output made from other ones (unscaled, the scores) or from
    # another tensor than value
    expect_from_weights(output, weights, value, expected_out, expected_w, dtype, condition,
                        output_mistakes, name=output_name)
    expect_close(output, expected_out, output_name, dtype=dtype,
                 axes=(*leading, "Lq", "d_v"), mistakes=output_mistakes,
                 scale=value.detach().double().abs().max(),
                 condition=condition.amax(dim=-1, keepdim=True),
                 hint=MESSAGES["weights_right_hint"])
    return batch, Lq, Lk, d_k, d_v


@check
def scaled_dot_product_attention(scaled_dot_product_attention, seed=0, batch=(2,), L=6,
                                 d_k=4, d_v=4, dtype=torch.float32, device="cpu"):
    """Self-attention shapes: query, key and value all of length L, and mask=None passed
    by name (the exercise's signature; no mask in this chapter)."""
    query, key, value = random_inputs((*batch, L, d_k), (*batch, L, d_k), (*batch, L, d_v),
                                      seed=seed, dtype=dtype, device=device)
    _check_attention(scaled_dot_product_attention, query, key, value, mask=None,
                     label=MESSAGES["label_self"].format(batch=_batch_text(batch), L=L,
                                                         d_k=d_k))
    passed(MESSAGES["sdpa_passed"].format(output=(*batch, L, d_v), weights=(*batch, L, L),
                                          dtype=dtype))


@check
def cross_attention(scaled_dot_product_attention, seed=0, batch=(2, 3), Lq=3, Lk=7, d_k=4,
                    d_v=5, dtype=torch.float32, device="cpu"):
    """Cross-attention shapes: Lq != Lk, d_k != d_v, any number of batch dimensions."""
    query, key, value = random_inputs((*batch, Lq, d_k), (*batch, Lk, d_k), (*batch, Lk, d_v),
                                      seed=seed, dtype=dtype, device=device)
    _check_attention(scaled_dot_product_attention, query, key, value,
                     label=MESSAGES["label_cross"].format(batch=_batch_text(batch), Lq=Lq,
                                                          Lk=Lk, d_k=d_k, d_v=d_v),
                     # a refusal of the student's own: of Lq != Lk, which cross-attention has
                     hints=[("own_raise", "hint_cross_refused"), *ATTENTION_HINTS])
    passed(MESSAGES["cross_passed"].format(batch=_batch_text(batch), Lq=Lq, Lk=Lk, d_k=d_k,
                                           d_v=d_v, output=(*batch, Lq, d_v),
                                           weights=(*batch, Lq, Lk), dtype=dtype))


@reference
def _integer_inputs(batch, Lq, Lk, d_k, d_v, magnitude, seed):
    """query and key of whole numbers in [-magnitude, magnitude], value normal (float64)."""
    gen = generator(seed)
    query = torch.randint(-magnitude, magnitude + 1, (*batch, Lq, d_k), generator=gen)
    key = torch.randint(-magnitude, magnitude + 1, (*batch, Lk, d_k), generator=gen)
    value = torch.randn(*batch, Lk, d_v, generator=gen, dtype=torch.float64)
    # Scores this large make most rows one-hot, scaled or not. Query 0's two best keys get
    # scores a whole |q_j| apart, so that its weights show the scaling whatever the seed:
    # key 0 points along query 0 (its best), key 1 is key 0 one unit closer to 0 at j.
    q0 = query[..., 0, :]                                        # (*batch, d_k)
    best = torch.where(q0 >= 0, magnitude, -magnitude)           # (*batch, d_k)
    j = q0.abs().argmax(dim=-1, keepdim=True)                    # (*batch, 1)
    second = best.scatter(-1, j, best.gather(-1, j) - best.gather(-1, j).sign())
    key[..., 0, :], key[..., 1, :] = best, second
    return query, key, value


@check
def sdpa_large_scores(scaled_dot_product_attention, seed=0, batch=(2,), Lq=5, Lk=7, d_k=16,
                      d_v=16, magnitude=20, dtype=torch.float32, device="cpu"):
    """Scores in the hundreds: a softmax written with a bare exp() overflows.

    query and key hold whole numbers in [-magnitude, magnitude] and sqrt(d_k) is a power
    of two, so every correct implementation computes exactly the same scores whatever the
    order of its operations (scale q first or the scores after, matmul or einsum).
    """
    root = math.isqrt(d_k)
    if root * root != d_k or root & (root - 1):
        raise ValueError("sqrt(d_k) must be a power of two (d_k = 4, 16, 64...) so that "
                         "the scores are exact")
    query, key, value = (t.to(dtype=dtype, device=device)
                         for t in _integer_inputs(batch, Lq, Lk, d_k, d_v, magnitude, seed))
    top = (query.double() @ key.double().transpose(-2, -1)).abs().max().item() / root
    try:
        _check_attention(scaled_dot_product_attention, query, key, value,
                         label=MESSAGES["label_large"].format(top=top))
    except CheckFailure as error:
        if diagnose._signature("nonfinite") in str(error):  # (in the language spoken)
            raise CheckFailure(MESSAGES["large_overflow"].format(error=error, top=top,
                                                                 dtype=dtype)) from None
        raise
    passed(MESSAGES["sdpa_large_passed"].format(top=top, dtype=dtype))
