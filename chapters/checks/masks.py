"""Checks of chapter 4 (masking): padding and causal masks, masked softmax, masked
attention, the invariances a mask promises, and nn.MultiheadAttention's opposite convention.

Our boolean masks mean True = may attend, as in F.scaled_dot_product_attention. The
references below are a few lines each, computed in float64; F.scaled_dot_product_attention
and nn.MultiheadAttention are the trusted implementations compared against where they apply.
The @reference functions compute the answers and draw the inputs (in the student's kit
they are read from its fixtures instead, see common.py).
"""
import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import diagnose
from .common import (CheckFailure, Forbidden, _isfinite, beyond_tolerance, call,
                     check, close, expect_close, expect_tensor, fail, forbid_spec,
                     fresh_seed, generator, max_error, passed, random_inputs, reference,
                     softmax_condition, type_name)
from .common import Intermediate, current_dims, said_later, shape_reason
from .common import expect_from_weights, step_mistakes
from .language import translated

_softmax = torch.softmax
_where = torch.where

# Every message of this module, one template per message with named fields (one place, for
# a second language); the families' sentences are diagnose.MESSAGES.
MESSAGES = translated(__name__) | {
    # where NaN or inf can sit (diagnose.nonfinite's regions), and why it comes there
    "fully_masked": "the fully masked rows (queries with no key they may attend to)",
    "allowed": "the keys that may be attended",
    "attending": "the queries that have a key to attend to",
    "nan_fully_masked": (
        "The softmax of a row that is all -inf is 0/0 = NaN, and so is a division by the "
        "sum of a row's weights once its masked ones are zeroed (that sum is 0 there).{fp16} "
        "Fill masked scores with torch.finfo(scores.dtype).min (finite), and after the softmax "
        "set the weights of masked keys to 0, which turns those rows into zeros."),
    "fp16_note": (" In float16, -1e9 is -inf too: float16's finite range ends at -65504, and "
                  "score + finfo.min also overflows to -inf when the score is below about -16."),
    "nan_allowed": (
        "A common cause: a mask multiplied by -inf gives 0 * -inf = NaN at every allowed key; "
        "build the fill with masked_fill or torch.where instead of multiplying by -inf. "
        "Another: a softmax of your own that subtracts the row's minimum (or nothing) instead "
        "of its maximum: a row with a masked key holds finfo.min, so it spans far more than "
        "exp's range and exp overflows to inf (inf / inf = NaN). The row's maximum, not its "
        "minimum, keeps every exponent <= 0."),
    "nan_grad": (
        "The forward pass is fine, so most likely a -inf reached the softmax of a fully "
        "masked row (a -inf fill, -1e9 in float16, or score + finfo.min overflowing to -inf in "
        "float16), the softmax's backward made NaN, and an addition passed it back to the "
        "scores. Cleaning the forward output (nan_to_num, masked_fill after the softmax) does "
        "not clean the gradient. Put torch.finfo(scores.dtype).min into the scores with "
        "masked_fill or torch.where, not with an addition."),
    "nonfinite": "{failure} {cause}",
    # the student's call raised
    "raised_hint": "{raised}\n{hint}",
    "fill_lowest": ("Fill with torch.finfo(scores.dtype).min, the most negative finite value of "
                    "whatever dtype the scores have."),
    "no_mask": "With mask=None nothing is masked: handle it first (if mask is None: ...).",
    "no_device": ("The exercise's signature is causal_mask(q_len, k_len=None, device=None): "
                  "create the mask on `device`."),
    # gradients
    "no_graph": ("no gradient can reach {what}: your result is not connected to it in the "
                 "autograd graph (did you use .detach(), .data, torch.no_grad() or a new "
                 "tensor?)."),
    "no_grad": ("no gradient reached {what}: your result is not connected to it in the "
                "autograd graph (did you use .detach(), .data, torch.no_grad() or a new "
                "tensor?)."),
    "grad_hint": ("The forward values are right, so look for an operation that blocks or "
                  "bends the gradient (an in-place change, .detach(), a rounding)."),
    # shapes and dtypes of masks
    "singletons": "{name}: expected shape {want} = {want_axes}, got {got}: {reason}. {hint}",
    "broadcasting": ("Against scores of shape (B, num_heads, Lq, Lk), broadcasting aligns "
                     "shapes from the right, so a (B, Lk) mask acts as (1, 1, B, Lk): the "
                     "batch axis lines up with the queries. Keep the two axes of size 1: "
                     "mask[:, None, None, :]."),
    "key_padding_shape": "nn.MultiheadAttention wants its key_padding_mask of shape (B, Lk).",
    # a mask of another dtype: "{failure}" is diagnose.wrong_state's sentence
    "padding_bool": ("{failure} Return a torch.bool tensor (True = may attend): a comparison "
                     "such as positions < lengths already gives bool."),
    "causal_bool": "{failure} Return a torch.bool tensor (True = may attend).",
    "key_padding_bool": ("{failure} Return a torch.bool mask (a float key_padding_mask is "
                         "added to the scores, so 1.0 would not hide anything)."),
    "batch_of_one": ("{name}, a batch of one sequence: expected shape (1, {Lk}) = (B, Lk), got "
                     "{got}: {words}. A bare .squeeze() removes every axis of size 1, the "
                     "batch axis too when B = 1: remove only the two singleton axes "
                     "(mask[:, 0, 0, :], or squeeze(2).squeeze(1))."),
    # what the generic message of a wrong mask shows
    "padding_shown": "Expected {want}, got {got} (1 = True, per sequence).",
    "causal_shown": "Expected\n{want}\ngot\n{got}",
    "key_padding_shown": "For lengths {lengths}: expected {want}, got {got} (1 = True).",
    # weights and outputs
    "masked_not_zero": ("{name}: the weights of masked keys must be exactly 0, got values up "
                        "to {top:.3g}."),
    "plain_softmax": "With mask=None, return a plain softmax over the last axis.",
    "not_a_pair": "{name} must return (output, weights), got {got}.",
    "weights_hint": ("Return the softmax weights (after masking), before multiplying by "
                     "value."),
    "output_not_zero": "output: queries with no key to attend to must output exactly 0.",
    "plain_attention": "With mask=None, nothing is masked: a plain softmax.",
    # invariances
    "echoed": ("the output is the {what} itself, which no mask can change: the invariances "
               "count only for an attention (weights @ value)."),
    "constant": ("the output does not change when the values change (a constant, or zeros?): "
                 "the invariances count only for an attention (weights @ value)."),
    "padding_leaks": (
        "changing the values at padded positions changed the outputs of real tokens (by up "
        "to {error:.3g}): padded keys still take part in the attention. A common cause: "
        "masking where the mask is True, which masks the real tokens and attends to the "
        "padding (the bug of seed 003); True means may attend."),
    "future_leaks": (
        "changing the tokens after position {t} changed the outputs at positions 0..{t} (by "
        "up to {error:.3g}): queries see the future. With a causal mask (lower triangular, "
        "True = may attend) query i may attend to keys 0..i only."),
    # what a passing check verified
    "padding_passed": ("padding_mask: shape (B, 1, 1, max_len) = {shape}, bool, True exactly "
                       "at positions < length for lengths {lengths}, and for lengths all "
                       "shorter than max_len"),
    "causal_passed": ("causal_mask: shape {shape}, bool, query i attends to keys 0..i, as "
                      "F.scaled_dot_product_attention(is_causal=True), and on device={device!r}"),
    "softmax_passed": ("masked_softmax ({dtype}, scores {shape}, mask {mask_shape}): right "
                       "weights, exact zeros on masked keys and on {fully} fully masked rows, "
                       "no NaN in forward or backward, gradient equal to the reference's"),
    "attention_passed": (
        "scaled_dot_product_attention ({dtype}, padding & causal mask {mask_shape}, lengths "
        "{lengths}): equals F.scaled_dot_product_attention on every query with a key to "
        "attend to, exact zeros on {fully} fully masked rows, finite gradients equal to the "
        "reference's, and mask=None works (in float64 too)"),
    "invariances_passed": (
        "invariances ({dtype}): outputs of real tokens ignore the values at padded positions "
        "(lengths {lengths}), and outputs at positions 0..{t} ignore the tokens after them "
        "under a causal mask"),
    "key_padding_passed": ("to_torch_key_padding_mask: (B, Lk) = {shape}, True at padding; "
                           "nn.MultiheadAttention with it equals our attention with our mask"),
    # the likely cause of an error the student's code raised, by the exercise's step
    "k_len_default": ("causal_mask(q_len) leaves k_len at its default None, which means k_len "
                      "= q_len (a square mask): replace it first, k_len = q_len if k_len is "
                      "None else k_len."),
    "argument_in_place": ("Here the tensor written in place is not a parameter but your "
                          "argument, the scores (scores[...] = ..., masked_fill_, +=): "
                          "torch.no_grad() would only hide that the caller's scores change. "
                          "Compute out of place (masked_fill, without the underscore, or "
                          "torch.where), which returns a new tensor."),
    # a wrong shape, and the step of the formula that gives it
    "shape_cause": "{failure} That is, {reason}.",
    "forbid_sdpa": "which does the whole exercise for you",
    "gradient_of": "the gradient of {what}",
    "the_scores": "the scores",
    "query_key_value": "query, key and value",
    "low_scores_call": "masked_softmax(scores near -16384, mask)",
    "tuple_of": "a tuple of {count}",
    "plain_output": "output without a mask (float64 inputs)",
    "key_padding_call": "to_torch_key_padding_mask(mask of shape {shape})",
    "one_sequence": "{name}, a batch of one sequence,",
    "torch_output": "nn.MultiheadAttention's output",
    "output_label": "output",
    "weights_label": "weights",
}

# The shortcut the exercise forbids (see common.Forbidden): decided by the grader from the
# submitted source, and caught here, in the student's Jupyter, when it runs.
FORBIDS = (Forbidden("scaled_dot_product_attention",
                     ("test_scaled_dot_product_attention", "test_invariances"),
                     r"scaled_dot_product", **said_later(MESSAGES, "forbid_sdpa"),
                     label="F.scaled_dot_product_attention"),)


# ----------------------------------------------------------------------------- references
@reference
def _ref_padding_mask(lengths, max_len):
    return (torch.arange(max_len) < lengths[:, None])[:, None, None, :]  # (B, 1, 1, max_len)


@reference
def _ref_causal_mask(q_len, k_len):
    return torch.ones(q_len, k_len, dtype=torch.bool).tril()             # (q_len, k_len)


@reference
def _ref_masked_softmax(scores, mask):
    """The course's rule in float64: fill with the most negative finite value, softmax,
    then zero the masked weights (which zeroes the rows with no allowed key)."""
    scores = scores.double()
    if mask is None:
        return _softmax(scores, dim=-1)
    weights = _softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
    return weights.masked_fill(~mask, 0.0)


@reference
def _ref_attention(query, key, value, mask):
    """(output, weights) of masked scaled dot-product attention, in float64."""
    query, key, value = query.double(), key.double(), value.double()
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])   # (..., Lq, Lk)
    weights = _ref_masked_softmax(scores, mask)                            # (..., Lq, Lk)
    return weights @ value, weights                                        # (..., Lq, d_v)


@reference
def _lengths(batch, max_len, seed, allow_zero):
    """Random lengths in [1, max_len] with max_len and a short one present; a 0 if allowed."""
    lengths = torch.randint(1, max_len + 1, (batch,), generator=generator(seed + 1))
    lengths[0] = max_len
    if batch > 1:
        lengths[-1] = 0 if allow_zero else 1
    return lengths


def _fully_masked_rows(mask, shape):
    """Bool (..., Lq, 1): True where a query has no key it may attend to."""
    return ~mask.expand(shape).any(dim=-1, keepdim=True)


def _condition(scores, mask):
    """softmax_condition() of the scores a key may attend to (masked scores take no part:
    the weights there are exactly 0; a fully masked row counts as a row of zeros)."""
    s = scores.detach().double()
    if mask is None:
        return softmax_condition(s)
    return softmax_condition(_where(mask, s, torch.zeros((), dtype=torch.float64)))


def _expect_mask(actual, expected, name, axes, shown, mistakes=None):
    """Require the bool mask `actual` (of the right shape) to equal `expected`; else name
    the mistake by the families of checks/diagnose.py through expect_close (a complement,
    a diagonal or a run of True off by k, two axes swapped, a step of `mistakes`, ...), or
    show both (`shown`)."""
    if not torch.equal(actual, expected):
        expect_close(actual, expected, name, axes=axes, hint=shown, mistakes=mistakes)


def _call(function, *args, hint=None, when=None, **kwargs):
    """call(), naming a number beyond the dtype (diagnose.overflow: a fill value such as
    -1e9 in float16) with the fill that fits, a promised parameter the function lacks
    (diagnose.missing_parameter), and adding the given hint (when: a regex the failure's
    text must match for the hint to apply, the kind of error it explains)."""
    try:
        return call(function, *args, **kwargs)
    except CheckFailure as failure:
        text = str(failure)   # call() names the overflow and the missing parameter
        if when and not re.search(when, text):
            hint = None
        if diagnose.overflow(text):
            hint = MESSAGES["fill_lowest"]
        if hint:
            raise CheckFailure(MESSAGES["raised_hint"].format(raised=text, hint=hint)) from None
        raise


def _not_bool(name, mask):
    """The state family's sentence for a mask of another dtype than torch.bool."""
    return diagnose.explained(name, diagnose.wrong_state("dtype", mask.dtype, torch.bool))


def _expect_graph(result, what):
    if not result.requires_grad:
        fail(MESSAGES["no_graph"].format(what=what))


def _nonfinite_reason(actual, expected, regions):
    """diagnose.nonfinite's sentence for `actual` against the finite `expected`, the
    entries that are NaN or inf located in `regions` ({words: bool tensor that broadcasts})."""
    return diagnose.nonfinite(actual.detach(), expected.detach().to(actual.device),
                              current_dims(), regions=regions)


def _expect_finite_forward(actual, expected, mask, shape, name, dtype, is_output=False):
    """Fail, saying where (diagnose.nonfinite) and the likely cause, when the forward output
    holds NaN or inf. shape: the scores' shape (..., Lq, Lk); is_output: `actual` is
    (..., Lq, d_v)."""
    bad = ~_isfinite(actual.detach())
    if not bool(bad.any()):
        return
    fully = _fully_masked_rows(mask, shape)                      # (..., Lq, 1)
    regions = ({MESSAGES["fully_masked"]: fully, MESSAGES["attending"]: ~fully} if is_output
               else {MESSAGES["fully_masked"]: fully, MESSAGES["allowed"]: mask.expand(shape)})
    on_fully = not bool((bad & ~fully).any())
    fp16 = MESSAGES["fp16_note"] if dtype == torch.float16 else ""
    cause = (MESSAGES["nan_fully_masked"].format(fp16=fp16) if on_fully
             else MESSAGES["nan_allowed"])
    fail(MESSAGES["nonfinite"].format(
        failure=diagnose.explained(name, _nonfinite_reason(actual, expected, regions)),
        cause=cause))


def _expect_grad(tensor, expected, what, dtype, scale=None, condition=1.0, regions=None):
    """scale, condition: see common.excess(); a gradient that cancels (w * (g - sum(w g)))
    is off by the rounding of its terms, so its scale is theirs, not its own. regions:
    {words: bool tensor} of the places a NaN of the gradient is named by."""
    grad = tensor.grad
    if grad is None:
        fail(MESSAGES["no_grad"].format(what=what))
    if not bool(_isfinite(grad).all()):
        reason = _nonfinite_reason(grad, expected, regions)
        fail(MESSAGES["nonfinite"].format(
            failure=diagnose.explained(MESSAGES["gradient_of"].format(what=what), reason),
            cause=MESSAGES["nan_grad"]))
    expect_close(grad, expected, MESSAGES["gradient_of"].format(what=what), dtype=dtype,
                 scale=scale,
                 condition=condition, hint=MESSAGES["grad_hint"])


def _expect_singletons(actual, expected, name, shape_names, hint):
    """Fail when the shape of `actual` is `expected`'s with axes of size 1 left out or
    added (diagnose.singleton_axes), with `hint`."""
    reason = diagnose.singleton_axes(actual.shape, expected.shape, current_dims(), shape_names)
    if reason:
        fail(MESSAGES["singletons"].format(name=name, want=tuple(expected.shape),
                                           want_axes=shape_names, got=tuple(actual.shape),
                                           reason=reason, hint=hint))


# ----------------------------------------------------------------------------- padding_mask
@reference
def _padding_answers(seed, batch, max_len, allow_zero):
    """(lengths, the expected (B, 1, 1, max_len) mask)."""
    lengths = _lengths(batch, max_len, seed, allow_zero)
    return lengths, _ref_padding_mask(lengths, max_len)


@check
def padding_mask(function, seed=0, batch=4, max_len=7, allow_zero=False):
    """The student's padding_mask(lengths, max_len) -> (B, 1, 1, max_len) bool."""
    lengths, expected = _padding_answers(seed, batch, max_len, allow_zero)
    actual = _call(function, lengths.clone(), max_len, name="padding_mask")
    expect_tensor(actual, "padding_mask(lengths, max_len)")
    _expect_singletons(actual, expected, "padding_mask(lengths, max_len)", "(B, 1, 1, max_len)",
                       MESSAGES["broadcasting"])
    expect_tensor(actual, "padding_mask(lengths, max_len)", shape=expected.shape,
                  shape_names="(B, 1, 1, max_len)")
    if actual.dtype != torch.bool:
        fail(MESSAGES["padding_bool"].format(failure=_not_bool("padding_mask(lengths, max_len)",
                                                                actual)))
    _expect_mask(actual, expected, f"padding_mask(lengths={lengths.tolist()}, max_len={max_len})",
                 "(B, 1, 1, max_len)",
                 MESSAGES["padding_shown"].format(want=expected[:, 0, 0].int().tolist(),
                                                  got=actual[:, 0, 0].int().tolist()))
    # every sequence shorter than max_len (above, one had length max_len): the mask's last
    # axis is max_len, whatever the lengths
    short = lengths.clamp(max=max_len - 1)                                   # (B,)
    shown = f"padding_mask(lengths={short.tolist()}, max_len={max_len})"
    got = _call(function, short.clone(), max_len, name="padding_mask")
    expect_tensor(got, shown, shape=expected.shape, shape_names="(B, 1, 1, max_len)")
    want = _ref_padding_mask(short, max_len)
    _expect_mask(got, want, shown, "(B, 1, 1, max_len)",
                 MESSAGES["padding_shown"].format(want=want[:, 0, 0].int().tolist(),
                                                  got=got[:, 0, 0].int().tolist()))
    passed(MESSAGES["padding_passed"].format(shape=tuple(expected.shape),
                                             lengths=lengths.tolist()))


# ----------------------------------------------------------------------------- causal_mask
def _expect_causal(actual, expected, name, mistakes=None):
    """Require the (q_len, k_len) bool mask `expected` of the student's `actual`; mistakes:
    step_mistakes("causal mask", ...), which names a mask of another size by its cause."""
    try:
        expect_tensor(actual, name, shape=expected.shape, shape_names="(q_len, k_len)")
    except CheckFailure as failure:   # the sizes in words, then what gives them (a step)
        reason = shape_reason(actual, expected, axes=("q_len", "k_len"), mistakes=mistakes)
        if not reason:
            raise
        raise CheckFailure(MESSAGES["shape_cause"].format(failure=failure,
                                                          reason=reason)) from None
    if actual.dtype != torch.bool:
        fail(MESSAGES["causal_bool"].format(failure=_not_bool(name, actual)))
    _expect_mask(actual, expected, name, "(q_len, k_len)",
                 MESSAGES["causal_shown"].format(want=expected.int(), got=actual.int()),
                 mistakes=mistakes)


@check
def causal_mask(function, q_len=5, k_len=None):
    """The student's causal_mask(q_len, k_len=None, device=None) -> (q_len, k_len) bool,
    lower triangular, on `device` (asked for the device of the check's own tensors: the
    grader receives every tensor on the CPU, so a device it cannot see is not asked for)."""
    Lk = q_len if k_len is None else k_len
    args = (q_len,) if k_len is None else (q_len, k_len)
    expected = _ref_causal_mask(q_len, Lk)
    mistakes = step_mistakes("causal mask", {"q_len": q_len, "k_len": Lk}, current_dims())
    # k_len left to its default, None: it means q_len
    default = MESSAGES["k_len_default"] if k_len is None else None
    _expect_causal(_call(function, *args, name="causal_mask", hint=default, when=r"NoneType"),
                   expected, f"causal_mask{args}", mistakes)
    device = expected.device
    on_device = _call(function, *args, device=device, name="causal_mask",
                      hint=MESSAGES["no_device"])
    _expect_causal(on_device, expected, f"causal_mask{args}, device={str(device)!r}",
                   mistakes)
    expect_tensor(on_device, f"causal_mask{args}, device={str(device)!r}", device=device)
    passed(MESSAGES["causal_passed"].format(shape=(q_len, Lk), device=str(device)))


# ----------------------------------------------------------------------------- masked_softmax
@reference
def _softmax_inputs(seed, batch, Lq, Lk, dtype):
    """Scores (*batch, Lq, Lk) and a mask (*batch[:-1], 1, Lq, Lk) with fully masked rows,
    fully open rows and, in the fully masked rows, scores far from 0 (as real logits are)."""
    (scores,) = random_inputs((*batch, Lq, Lk), seed=seed, dtype=torch.float64)
    scores = scores * 4
    gen = generator(seed + 2)
    mask_batch = (*batch[:-1], 1) if batch else ()
    mask = torch.rand(*mask_batch, Lq, Lk, generator=gen) < 0.6
    flat = mask.view(-1, Lq, Lk)
    flat[0, 0] = False                       # a fully masked row ...
    flat[0, 1 % Lq] = True                   # ... and a fully open one
    flat[-1, Lq - 1] = False                 # another fully masked row
    if Lk > 1 and Lq > 2:
        flat[0, 2, 0] = False                # a masked key with a large score
        flat[0, 2, 1] = True
    s = scores.view(-1, batch[-1], Lq, Lk) if batch else scores.view(1, 1, Lq, Lk)
    s[0, :, 0] = -40 - s[0, :, 0].abs()      # fully masked row with very negative scores
    s[-1, :, Lq - 1] = 40 + s[-1, :, Lq - 1].abs()   # ... and with very positive ones
    if Lk > 1 and Lq > 2:
        s[0, :, 2, 0] = 30.0
    return scores.to(dtype), mask


@reference
def _masked_softmax_answers(scores, mask, upstream):
    """(expected weights, the expected gradient of the scores when `upstream` flows back
    into the weights, the expected weights with mask=None), float64."""
    plain = _softmax(scores.double(), -1)
    ref_s = scores.double().clone().requires_grad_()
    (_ref_masked_softmax(ref_s, mask) * upstream.double()).sum().backward()
    return _ref_masked_softmax(scores, mask), ref_s.grad, plain


@reference
def _low_scores_case(dtype):
    """Scores (2, 4) near -16384 (exact in every float dtype) at the keys that may be attended and
    -20480 at masked ones, the mask and the expected weights (float64): a fill value above the real
    scores (a fixed -1e4) lets the masked keys take the weight."""
    step = max(1.0, 16384 * torch.finfo(dtype).eps)  # the spacing at 16384: 16 in float16
    mask = torch.tensor([[True, True, False, False], [False, True, True, False]])
    offsets = torch.tensor([[0.0, 1.0, 2.0, 3.0], [3.0, 0.0, 2.0, 1.0]], dtype=torch.float64)
    # masked scores below the real ones (exact in every float dtype): only a fill value
    # above the real scores, not an absent fill, lets the masked keys win
    scores = (-16384.0 - step * offsets).masked_fill(~mask, -20480.0)   # (2, 4)
    return scores.to(dtype), mask, _ref_masked_softmax(scores, mask)


@check
def masked_softmax(function, seed=0, batch=(2, 3), Lq=5, Lk=6, dtype=torch.float32):
    """The student's masked_softmax(scores, mask) -> weights (..., Lq, Lk)."""
    batch = tuple(batch)
    scores, mask = _softmax_inputs(seed, batch, Lq, Lk, dtype)
    shape = scores.shape
    upstream = random_inputs(shape, seed=seed + 3, dtype=dtype)[0]
    expected, expected_grad, expected_plain = _masked_softmax_answers(scores, mask, upstream)
    fully = _fully_masked_rows(mask, shape)
    s = scores.clone().requires_grad_()
    weights = _call(function, s, mask.clone(), name="masked_softmax",
                    hint=MESSAGES["argument_in_place"],
                    when=r"leaf Variable that requires grad is being used in an in-place")
    name = "masked_softmax(scores, mask)"
    expect_tensor(weights, name, shape=shape, shape_names="(..., Lq, Lk)")
    expect_tensor(weights, name, dtype=dtype)
    _expect_finite_forward(weights, expected, mask, shape, name, dtype)
    # the formula with one step left out or done another way (checks/formulas.py), for the
    # families of checks/diagnose.py to name the mistake by
    expect_close(weights, expected, name, dtype=dtype, condition=_condition(scores, mask),
                 mistakes=step_mistakes("masked softmax", {"scores": scores, "mask": mask},
                                        current_dims()))
    w = weights.detach()
    if bool((w.masked_select(~mask.expand(shape)) != 0).any()):
        fail(MESSAGES["masked_not_zero"].format(
            name=name, top=w.masked_select(~mask.expand(shape)).abs().max().item()))
    # backward: the gradient must be finite and equal to the reference's
    _expect_graph(weights, MESSAGES["the_scores"])
    (weights * upstream).sum().backward()
    # its terms: w * (g - sum(w g)), of size w (|g| + sum(w |g|)), largest of each row
    w64, g = expected.double(), upstream.double().abs()
    terms = w64 * (g + (w64 * g).sum(dim=-1, keepdim=True))
    _expect_grad(s, expected_grad, MESSAGES["the_scores"], dtype,
                 scale=terms.amax(dim=-1, keepdim=True),
                 condition=_condition(scores, mask).amax(-1, keepdim=True),
                 regions={MESSAGES["fully_masked"]: fully,
                          MESSAGES["allowed"]: mask.expand(shape)})
    # mask left to its default, None: a plain softmax
    plain = _call(function, scores.clone(), name="masked_softmax",
                  hint=MESSAGES["no_mask"])
    expect_close(plain, expected_plain, "masked_softmax(scores)",
                 dtype=dtype, condition=_condition(scores, None),
                 mistakes=step_mistakes("masked softmax", {"scores": scores, "mask": None},
                                        current_dims()),
                 hint=MESSAGES["plain_softmax"])
    # real scores far below 0: a fixed fill value (-1e4) is no longer below them
    low, low_mask, low_expected = _low_scores_case(dtype)
    low_weights = _call(function, low.clone(), low_mask.clone(),
                        name="masked_softmax")
    expect_close(low_weights, low_expected, MESSAGES["low_scores_call"],
                 dtype=dtype, condition=_condition(low, low_mask),
                 mistakes=step_mistakes("masked softmax", {"scores": low, "mask": low_mask},
                                        current_dims()))
    passed(MESSAGES["softmax_passed"].format(dtype=dtype, shape=tuple(shape),
                                             mask_shape=tuple(mask.shape),
                                             fully=int(fully.sum())))


# ----------------------------------------------------------------- scaled_dot_product_attention
@reference
def _attention_inputs(seed, batch, Lq, Lk, d_k, d_v, dtype):
    """query, key, value, a padding & causal mask (B, 1, Lq, Lk) and the lengths."""
    query, key, value = random_inputs((*batch, Lq, d_k), (*batch, Lk, d_k), (*batch, Lk, d_v),
                                      seed=seed, dtype=dtype)
    B = batch[0]
    lengths = _lengths(B, Lk, seed, allow_zero=True)
    extra = (1,) * (len(batch) - 1)
    pad = _ref_padding_mask(lengths, Lk).view(B, *extra, 1, Lk)            # (B, 1, 1, Lk)
    mask = pad & _ref_causal_mask(Lq, Lk)                                   # (B, 1, Lq, Lk)
    return query, key, value, mask, lengths


@reference
def _attention_answers(query, key, value, mask, upstream):
    """(expected output, expected weights, the expected gradients of (query, key, value)
    when `upstream` flows back into the output, the expected output with mask=None), in
    float64: F.scaled_dot_product_attention for the outputs (a float32 sqrt(d_k), which
    shows in that float64 run, is a step of the formula: formulas.masked_attention_formula)."""
    q, k, v = query.double(), key.double(), value.double()
    fully = _fully_masked_rows(mask, (*q.shape[:-1], k.shape[-2]))        # (..., Lq, 1)
    # The trusted reference on every query that has a key to attend to; zeros elsewhere.
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    expected = _where(fully, torch.zeros((), dtype=torch.float64), sdpa)
    ref_out, ref_w = _ref_attention(query, key, value, mask)
    assert close(ref_out, expected, torch.float64), "internal: reference disagrees with SDPA"
    rq, rk, rv = (t.double().clone().requires_grad_() for t in (query, key, value))
    (_ref_attention(rq, rk, rv, mask)[0] * upstream.double()).sum().backward()
    plain = F.scaled_dot_product_attention(q, k, v)
    return expected, ref_w, (rq.grad, rk.grad, rv.grad), plain


def _unpack(result, name, shapes=None):
    """(output, weights) of the student's result; shapes: theirs, for naming the two
    returned in the other order (diagnose.item_order)."""
    if not (isinstance(result, tuple) and len(result) == 2):
        got = (MESSAGES["tuple_of"].format(count=len(result)) if isinstance(result, tuple)
               else type_name(result))
        fail(MESSAGES["not_a_pair"].format(name=name, got=got))
    if shapes and all(isinstance(item, torch.Tensor) for item in result):
        reason = diagnose.item_order([item.shape for item in result], shapes,
                                     (MESSAGES["output_label"], MESSAGES["weights_label"]))
        if reason:
            fail(diagnose.explained(name, reason))
    return result


@check
def scaled_dot_product_attention(function, seed=0, batch=(3, 2), Lq=5, Lk=7, d_k=8, d_v=6,
                                 dtype=torch.float32):
    """The student's scaled_dot_product_attention(query, key, value, mask=None)
    -> (output (..., Lq, d_v), weights (..., Lq, Lk)), with padding & causal masks."""
    batch = tuple(batch)
    query, key, value, mask, lengths = _attention_inputs(seed, batch, Lq, Lk, d_k, d_v, dtype)
    scores_shape = (*batch, Lq, Lk)
    upstream = random_inputs((*batch, Lq, d_v), seed=seed + 3, dtype=dtype)[0]
    expected, expected_w, expected_grads, expected_plain = _attention_answers(
        query, key, value, mask, upstream)
    fully = _fully_masked_rows(mask, scores_shape)                          # (..., Lq, 1)
    q, k, v = (t.clone().requires_grad_() for t in (query, key, value))
    name = "scaled_dot_product_attention(query, key, value, mask)"
    with forbid_spec(*FORBIDS):
        result = _call(function, q, k, v, mask.clone(),
                       name="scaled_dot_product_attention")
    output, weights = _unpack(result, name, ((*batch, Lq, d_v), scores_shape))
    expect_tensor(output, "output", shape=(*batch, Lq, d_v), shape_names="(..., Lq, d_v)")
    expect_tensor(weights, "weights", shape=scores_shape, shape_names="(..., Lq, Lk)")
    expect_tensor(output, "output", dtype=dtype)
    _expect_finite_forward(output, expected, mask, scores_shape, "output", dtype,
                           is_output=True)
    _expect_finite_forward(weights, expected_w, mask, scores_shape, "weights", dtype)
    # the weights' rounding follows the scores' magnitude; the output's, the values'
    condition = _condition(query.double() @ key.double().transpose(-2, -1) / math.sqrt(d_k),
                           mask)
    # the formula with one step left out or done another way (checks/formulas.py), for the
    # families of checks/diagnose.py to name the mistake by
    inputs = {"query": query, "key": key, "value": value, "mask": mask}
    output_mistakes = step_mistakes("masked attention", inputs, current_dims(), d_k=d_k)
    expect_from_weights(output, weights, value, expected, expected_w, dtype, condition,
                        output_mistakes)
    expect_close(output, expected, "output", dtype=dtype, mistakes=output_mistakes,
                 scale=value.double().abs().max(), condition=condition.amax(-1, keepdim=True),
                 earlier=[Intermediate(MESSAGES["weights_label"], weights, expected_w, dtype,
                                       condition)])
    expect_close(weights, expected_w, "weights", dtype=dtype, condition=condition,
                 mistakes=step_mistakes("masked attention weights", inputs, current_dims(),
                                        d_k=d_k),
                 hint=MESSAGES["weights_hint"])
    if bool((output.detach().masked_select(fully) != 0).any()):
        fail(MESSAGES["output_not_zero"])
    # backward
    _expect_graph(output, MESSAGES["query_key_value"])
    (output * upstream).sum().backward()
    # the size of the terms each gradient is summed from, largest of each row: d weights
    # = g v^T, d scores = w * (d weights - sum(w d weights)), d query = d scores k / sqrt(d_k),
    # d key = d scores^T q / sqrt(d_k), d value = w^T g
    aq, ak, av, ag = (t.double().abs() for t in (query, key, value, upstream))
    w64 = expected_w.double()
    d_weights = ag @ av.transpose(-2, -1)
    d_scores = w64 * (d_weights + (w64 * d_weights).sum(dim=-1, keepdim=True))
    scales = {"query": d_scores @ ak / math.sqrt(d_k),
              "key": d_scores.transpose(-2, -1) @ aq / math.sqrt(d_k),
              "value": w64.transpose(-2, -1) @ ag}
    for tensor, grad, what in zip((q, k, v), expected_grads, ("query", "key", "value")):
        _expect_grad(tensor, grad, what, dtype, scale=scales[what].amax(dim=-1, keepdim=True),
                     condition=condition.amax(),
                     regions={MESSAGES["fully_masked"]: fully} if what == "query" else None)
    # mask=None, on the same inputs in float64: the chapter has no float64 test of its
    # own, and a float64 run is where a float32 sqrt(d_k) constant shows (common.py's rule)
    with forbid_spec(*FORBIDS):
        result = _call(function, query.double(), key.double(), value.double(),
                       name="scaled_dot_product_attention",
                       hint=MESSAGES["no_mask"])
    plain, _ = _unpack(result, "scaled_dot_product_attention(query, key, value)")
    expect_tensor(plain, MESSAGES["plain_output"], dtype=torch.float64)
    expect_close(plain, expected_plain, MESSAGES["plain_output"],
                 dtype=torch.float64, scale=value.double().abs().max(),
                 mistakes=step_mistakes("masked attention", dict(inputs, mask=None),
                                        current_dims(), d_k=d_k),
                 condition=_condition(query.double() @ key.double().transpose(-2, -1)
                                      / math.sqrt(d_k), None).amax(-1, keepdim=True),
                 hint=MESSAGES["plain_attention"])
    passed(MESSAGES["attention_passed"].format(dtype=dtype, mask_shape=tuple(mask.shape),
                                               lengths=lengths.tolist(),
                                               fully=int(fully.sum())))


# ----------------------------------------------------------------------------- invariances
@reference
def _invariance_inputs(seed, batch, num_heads, L, d_k, dtype):
    """(query, key, value), the lengths, the padding mask (B, 1, 1, L), the real tokens
    (B, L), (query, key, value) with new values at padded positions, a position t, the
    causal mask (L, L), and (query, key, value) with new tokens after position t."""
    gen = generator(seed + 5)
    query, key, value = random_inputs(*[(batch, num_heads, L, d_k)] * 3, seed=seed, dtype=dtype)
    lengths = torch.randint(1, L, (batch,), generator=gen)             # every sequence padded
    lengths[0] = L                                                      # ... but one
    pad = _ref_padding_mask(lengths, L)                                 # (B, 1, 1, L)
    real = pad[:, 0, 0, :]                                              # (B, L)
    # 1. padding: new random keys, values (and queries) at padded positions
    noise = random_inputs(*[(batch, num_heads, L, d_k)] * 3, seed=seed + 7, dtype=dtype)
    padded = ~real[:, None, :, None]                                    # (B, 1, L, 1)
    k2, v2, q2 = (_where(padded, 10 * n, t) for n, t in zip(noise, (key, value, query)))
    # 2. causality: new random tokens after position t
    t = int(torch.randint(1, L - 1, (), generator=gen)) if L > 2 else 0
    future = (torch.arange(L) > t)[:, None]                             # (L, 1)
    q3, k3, v3 = (_where(future, 10 * n, x) for n, x in zip(noise, (query, key, value)))
    return ((query, key, value), lengths, pad, real, (q2, k2, v2), t, _ref_causal_mask(L, L),
            (q3, k3, v3))


@check
def invariances(function, seed=0, batch=3, num_heads=2, L=6, d_k=8, dtype=torch.float32):
    """Masked attention must not depend on what it masks: the values at padded positions,
    and the tokens in the future of a causal query."""
    inputs, lengths, pad, real, padded_inputs, t, causal, future_inputs = _invariance_inputs(
        seed, batch, num_heads, L, d_k, dtype)

    def run(q, k, v, mask):
        with forbid_spec(*FORBIDS):
            result = _call(function, q.clone(), k.clone(), v.clone(), mask.clone(),
                           name="scaled_dot_product_attention")
        out, _ = _unpack(result, "scaled_dot_product_attention")
        return out.detach()

    # 0. a constant (zero) output, or an input echoed back, is trivially invariant: the
    # points are for an attention, whose outputs follow the values of the keys it attends to
    before = run(*inputs, pad)
    rows = real[:, None, :, None].expand_as(before)                     # real queries
    query, key, value = inputs
    for echoed, what in ((query, "query"), (value, "value")):
        if not beyond_tolerance(before, echoed, dtype):
            fail(MESSAGES["echoed"].format(what=what))
    moved = run(query, key, 2 * value + 1, pad)                 # every output moves: 2 out + 1
    if not beyond_tolerance(moved.masked_select(rows), before.masked_select(rows), dtype):
        fail(MESSAGES["constant"])
    # 1. padding: new random keys, values (and queries) at padded positions
    after = run(*padded_inputs, pad)
    if not close(after.masked_select(rows), before.masked_select(rows), dtype):
        err = max_error(after.masked_select(rows), before.masked_select(rows))
        fail(MESSAGES["padding_leaks"].format(error=err))
    # 2. causality: new random tokens after position t
    before, after = run(*inputs, causal), run(*future_inputs, causal)
    if not close(after[..., :t + 1, :], before[..., :t + 1, :], dtype):
        err = max_error(after[..., :t + 1, :], before[..., :t + 1, :])
        fail(MESSAGES["future_leaks"].format(t=t, error=err))
    passed(MESSAGES["invariances_passed"].format(dtype=dtype, lengths=lengths.tolist(), t=t))


# ----------------------------------------------------------------------------- conversions
@reference
def _mha_reference(mha, x, mask):
    """nn.MultiheadAttention's computation, with our attention and our mask convention."""
    B, L, d_model = x.shape
    h = mha.num_heads
    qkv = F.linear(x.double(), mha.in_proj_weight.double(), mha.in_proj_bias.double())
    split = [t.reshape(B, L, h, d_model // h).transpose(1, 2) for t in qkv.chunk(3, dim=-1)]
    out, _ = _ref_attention(*split, mask)                                  # (B, h, L, head_dim)
    out = out.transpose(1, 2).reshape(B, L, d_model)                       # (B, L, d_model)
    return F.linear(out, mha.out_proj.weight.double(), mha.out_proj.bias.double())


@reference
def _key_padding_answers(seed, batch, Lk, d_model, num_heads, flat):
    """(the lengths, our padding mask as given to the student ((B, 1, 1, Lk), or (B, Lk) if
    flat), the expected (B, Lk) key_padding_mask, the state of an nn.MultiheadAttention
    (float64), an input x and the output our attention with our mask gives for x)."""
    lengths = _lengths(batch, Lk, seed, allow_zero=False)
    ours = _ref_padding_mask(lengths, Lk)                                   # (B, 1, 1, Lk)
    given = ours[:, 0, 0, :].clone() if flat else ours.clone()
    with torch.random.fork_rng():
        torch.manual_seed(fresh_seed(seed))
        mha = nn.MultiheadAttention(d_model, num_heads, batch_first=True).double()
    (x,) = random_inputs((batch, Lk, d_model), seed=seed + 4, dtype=torch.float64)
    with torch.no_grad():
        out = _mha_reference(mha, x, ours)
    expected = ~ours[:, 0, 0, :]                                            # (B, Lk)
    return lengths, given, expected, dict(mha.state_dict()), x, out


@check
def to_torch_key_padding_mask(function, seed=0, batch=3, Lk=6, d_model=8, num_heads=2,
                              flat=False):
    """The student's to_torch_key_padding_mask(mask) -> (B, Lk) bool, True = padding, checked
    on its own and by feeding it to nn.MultiheadAttention."""
    lengths, given, expected, state, x, expected_out = _key_padding_answers(
        seed, batch, Lk, d_model, num_heads, flat)
    name = MESSAGES["key_padding_call"].format(shape=tuple(given.shape))
    actual = call(function, given.clone())
    expect_tensor(actual, name)
    _expect_singletons(actual, expected, name, "(B, Lk)", MESSAGES["key_padding_shape"])
    expect_tensor(actual, name, shape=expected.shape, shape_names="(B, Lk)")
    if actual.dtype != torch.bool:
        fail(MESSAGES["key_padding_bool"].format(failure=_not_bool(name, actual)))
    _expect_mask(actual, expected, name, "(B, Lk)",
                 MESSAGES["key_padding_shown"].format(lengths=lengths.tolist(),
                                                      want=expected.int().tolist(),
                                                      got=actual.int().tolist()))
    # a batch of one sequence: a bare .squeeze() drops the batch axis too
    one = call(function, given[:1].clone())
    one_name = MESSAGES["key_padding_call"].format(shape=tuple(given[:1].shape))
    expect_tensor(one, one_name)
    if tuple(one.shape) != (1, Lk):
        words = diagnose.wrong_shape(tuple(one.shape), (1, Lk), current_dims(), "(B, Lk)")
        fail(MESSAGES["batch_of_one"].format(name=one_name, Lk=Lk, got=tuple(one.shape),
                                             words=words))
    _expect_mask(one, expected[:1], MESSAGES["one_sequence"].format(name=one_name), "(B, Lk)",
                 MESSAGES["key_padding_shown"].format(lengths=lengths[:1].tolist(),
                                                      want=expected[:1].int().tolist(),
                                                      got=one.int().tolist()))
    with torch.random.fork_rng():  # its initial weights, replaced at once, draw from the RNG
        mha = nn.MultiheadAttention(d_model, num_heads, batch_first=True).double()
    mha.load_state_dict(state)
    with torch.no_grad():
        out, _ = mha(x, x, x, key_padding_mask=actual, need_weights=False)
        expect_close(out, expected_out, MESSAGES["torch_output"], dtype=torch.float64)
    passed(MESSAGES["key_padding_passed"].format(shape=tuple(expected.shape)))
