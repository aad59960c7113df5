"""Checks of chapter 7: positions, and the fast attention kernels.

equivariance_gap (attention without positions is permutation-equivariant),
sinusoidal_positions (the table of the original Transformer), apply_rotary and
rotary_cached_attention (rotary position embedding, per head and in decoding with chapter
6's cache). A wrong value that no entry of the tables names is named by the families of
diagnose.py, with the exercise's formula as steps (formulas.py) where it has one.

The rotary references are chapter 6's float64 attention computed chunk by chunk
(checks/kv.py: _ref_run, _ref_rotate, and the decoding loop _decoding); their mistakes
are named by the formulas' steps (formulas.py). Every message of this module is a template
in MESSAGES.

Interfaces the checks use:
    equivariance_gap(layer, x, perm) -> a Python float.
    sinusoidal_positions(num_positions, d_model, base=10000.0) -> (num_positions, d_model)
    float32.
    apply_rotary(x, positions, base=10000.0) -> x's shape and dtype.
    rotary_cached_attention(attn, x_new, cache, base=10000.0) -> (B, L_new, d_model), with
    chapter 6's KVCache; attn as in checks/kv.py.

The checks reach the student's objects only through common's runtime (see checks/kv.py):
the layer equivariance_gap is handed and the decoding checks' attn are the course's own
(given()), and every verdict compares values read back with answers computed here.

Shape letters: B batch, L length, T total length (cached + new), h num_heads,
g num_kv_heads, hd head_dim, D d_model, P = D // 2 (or hd // 2) feature pairs.
"""
import math
import re

import torch
import torch.nn as nn

from .common import (call, check, close, expect_close, expect_tensor, fail, generator, given,
                     observe, passed, raised, random_inputs, reference, revive)
from .common import current_dims, step_mistakes
from . import diagnose
from .kv import ROTARY_BASE, _decoding, _number, _ref_rotate
from .language import translated
from .operations import CheckFailure

# ----------------------------------------------------------------------------- messages
MESSAGES = translated(__name__) | {
    # sinusoidal_positions (its other mistakes: the formula's, formulas.sinusoidal_formula)
    "angles_float32": ("{shown} is right to float32's rounding of the angles, which grows "
                       "with the position (largest error {error:.1e}, at position {where}): "
                       "compute the angles p * w_i in float64 and round the table to "
                       "float32 once, at the end."),
    "not_on_circle": ("{shown}: features {a} and {b} of row {row} are {x:.4g} and {y:.4g}, "
                      "whose squares sum to {norm:.4g}: each pair of neighbouring features "
                      "(2i, 2i + 1) is (sin, cos) of one angle p * w_i, a point on the unit "
                      "circle, with sin at the even feature and cos right after it."),
    "sinusoidal_hint": ("Row p: sin(p w_i) at feature 2i, cos(p w_i) at feature 2i + 1, "
                        "w_i = base ** (-2 i / d_model), positions 0 .. num_positions - 1."),
    "sinusoidal_passed": ("sinusoidal_positions({num_positions}, {d_model}, base={base:g}): "
                          "sin at the even features and cos at the odd ones, positions 0 .. "
                          "{last}, float32 rounded once from float64 angles"),
    # apply_rotary (its mistakes: the formula's, formulas.rotary_formula)
    "rotary_name": "apply_rotary(x of shape {shape}, positions {positions}, base={base:g})",
    "norms_of": "the norms of the rows of {name}",
    "norms_hint": ("A rotation keeps the length of every row: each pair (x1, x2) must become "
                   "(x1 cos - x2 sin, x1 sin + x2 cos)."),
    "offset_score": ("the score of q at position {m} and k at position {n} is {before:.6g}, "
                     "but at positions {m2} and {n2} (the same offset) it is {after:.6g}: with "
                     "rotary positions, q . k depends only on the offset. Rotate each pair by "
                     "position * frequency, the same frequencies for q and k."),
    "rotary_hint": ("Pair feature i with i + head_dim // 2, angle position * "
                    "base ** (-2 i / head_dim)."),
    "rotary_passed": ("apply_rotary ({dtype}, base={base:g}): equals the reference for "
                      "positions {positions}, keeps every row's norm, and q . k depends only on "
                      "the offset (positions {m}, {n} and {m2}, {n2})"),
    # equivariance_gap (its mistakes: the formula's, formulas.equivariance_formula)
    "label_plain": "attention without positions",
    "label_positions": "attention with position vectors added",
    "gap_name": "equivariance_gap ({label})",
    "python_float": "a Python float",
    "sentence": "{reason}.",
    "gap_returned": ("equivariance_gap ({label}) returned {got:.6g}, expected {expected:.6g}: "
                     "the gap"),
    "gap_hint": ("Return max |layer(x[:, perm]) - layer(x)[:, perm]| over all entries "
                 "(rounding aside)."),
    "gap_passed": ("equivariance_gap ({dtype}, perm {perm}): {plain:.2g} (rounding) for "
                   "attention without positions, {positions:.3g} with position vectors, the "
                   "same with the layer's outputs negated"),
    "label_negated": "attention with position vectors added, its outputs negated",
    "table_dtype": ("{shown} returned a {got} table; the exercise documents float32: compute "
                    "the angles in float64 and round the table to float32 once, at the end "
                    "(.float())."),
    # what an error of the student's code means in this chapter (_sizes_met)
    "in_this_exercise": "\nIn this exercise: {reason}.",
    "half_other_axis": ("cos and sin have head_dim // 2 = {pairs} columns, and the error meets a "
                        "width of {half} = {size} // 2, half of x's axis {axis} ({axis_name}, "
                        "{size} entries): likely the number of pairs read off that axis "
                        "(x.shape[{axis}] // 2) where it is x.shape[-1] // 2, half of head_dim"),
    "perm_on_features": ("perm reorders the L = {L} positions, and the error meets that size "
                         "against d_model = {d_model}: likely the permutation applied to the "
                         "feature axis (x[..., perm], d_model entries) where it reorders the "
                         "positions, axis 1: x[:, perm] and layer(x)[:, perm]"),
    "angles_float64": ("{name} returned {got} for x in {want}: likely cos and sin left in "
                       "float64 (rotary_angles returns them so, exact angles), which promotes "
                       "every product with them to float64: convert them to x's dtype, "
                       ".to(x.dtype), before the products"),
}

_MET = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)")


def _sizes_met(text):
    """The two sizes a broadcasting error's message says met ({} for another error)."""
    found = _MET.search(text)
    return {int(v) for v in found.groups()} if found else set()


# ----------------------------------------------------------------------------- rotary decoding
@check
def rotary_cached_attention(fn, cache_cls, seed=0, batch=2, d_model=16, num_heads=4,
                            num_kv_heads=2, chunks=(3, 1, 1, 1), dtype=torch.float32,
                            base=ROTARY_BASE):
    """fn(attn, x_new, cache, base=base) with rotary positions on queries and keys: every
    step equals full causal rotary attention over the whole sequence (the rotary mistakes:
    the formula's, formulas.cached_attention_formula with rotary=True)."""
    _decoding(fn, cache_cls, "rotary_cached_attention", seed, batch, d_model, num_heads,
              num_kv_heads, chunks, dtype, rotary=True, base=base)


# ----------------------------------------------------------------------------- sinusoidal
@reference
def _sinusoidal_answer(num_positions, d_model, base):
    """The (num_positions, d_model) table in float64: row p holds sin(p w_i) at feature 2i
    and cos(p w_i) at 2i + 1, w_i = base ** (-2i / d_model)."""
    positions = torch.arange(num_positions, dtype=torch.float64)                  # (L,)
    pair = torch.arange(d_model // 2, dtype=torch.float64)                        # (P,)
    angles = positions[:, None] * base ** (-2 * pair / d_model)                   # (L, P)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(num_positions, d_model)


@check
def sinusoidal_positions(fn, num_positions=200, d_model=16, base=ROTARY_BASE):
    """fn(num_positions, d_model, base=base) -> the (num_positions, d_model) float32 table of
    the original Transformer: sin(p w_i) at feature 2i, cos(p w_i) at 2i + 1, w_i =
    base ** (-2i / d_model); right to one float32 rounding (angles in float64)."""
    expected = _sinusoidal_answer(num_positions, d_model, base)
    # the formula's mistakes, computed on every run (the kit replays what the reference's
    # run computed: an answer asked for only on a wrong table would not be stored)
    mistakes = step_mistakes("sinusoidal table", {"positions": torch.arange(num_positions)},
                             current_dims(), d_model=d_model, base=base)
    options = {} if base == ROTARY_BASE else {"base": base}
    shown = (f"sinusoidal_positions({num_positions}, {d_model}"
             + "".join(f", {k}={v:g}" for k, v in options.items()) + ")")
    actual = call(fn, num_positions, d_model, name="sinusoidal_positions", **options)
    expect_tensor(actual, shown, shape=(num_positions, d_model),
                  shape_names="(num_positions, d_model)")
    if actual.dtype != torch.float32:  # (the function has no input whose dtype it follows)
        fail(MESSAGES["table_dtype"].format(shown=shown, got=actual.dtype))
    table = actual.double()
    # a step of the formula done another way (sines and cosines in halves, say) is named
    # before the property below says only which pair is off the circle
    def same(a, b):
        return close(a, b.float(), torch.float32, scale=1.0)

    step = not same(actual, expected) and diagnose.one_step(actual, mistakes, same)
    if step:
        fail(diagnose.explained(shown, step))
    # a property that needs no answer: each neighbouring pair is a point of the unit circle
    norms = table[:, 0::2] ** 2 + table[:, 1::2] ** 2                             # (L, P)
    off = (norms - 1).abs()
    if off.numel() and off.max().item() > 1e-3:
        row, pair = divmod(int(off.argmax()), d_model // 2)
        fail(MESSAGES["not_on_circle"].format(shown=shown, a=2 * pair, b=2 * pair + 1, row=row,
                                              x=table[row, 2 * pair].item(),
                                              y=table[row, 2 * pair + 1].item(),
                                              norm=norms[row, pair].item()))
    # sin and cos of float64 angles, rounded once: one float32 rounding of numbers <= 1
    if not same(actual, expected):
        # right to the rounding of float32 angles, which grows with p * w_i
        if close(actual, expected.float(), torch.float32, scale=1.0,
                 condition=2 + 2 * num_positions):
            error = (table - expected).abs()
            fail(MESSAGES["angles_float32"].format(shown=shown, error=error.max().item(),
                                                   where=int(error.amax(1).argmax())))
        expect_close(actual, expected.float(), shown, dtype=torch.float32, scale=1.0,
                     mistakes=mistakes,
                     hint=MESSAGES["sinusoidal_hint"])
    passed(MESSAGES["sinusoidal_passed"].format(num_positions=num_positions, d_model=d_model,
                                                base=base, last=num_positions - 1))


# ----------------------------------------------------------------------------- apply_rotary
@reference
def _rotary_inputs(seed, batch, num_heads, L, head_dim, start, dtype):
    """x (B, h, L, hd), positions start .. start + L - 1, and for the offset property two
    rows q, k (hd,) with positions (m, n) and a shift."""
    x, q, k = random_inputs((batch, num_heads, L, head_dim), (head_dim,), (head_dim,),
                            seed=seed, dtype=dtype)
    gen = generator(seed + 3)
    m, n, shift = (int(v) for v in torch.randint(0, 20, (3,), generator=gen))
    return x, torch.arange(start, start + L), q, k, (m, n, shift + 1)


@reference
def _rotary_answer(x, positions, base=ROTARY_BASE):
    """x rotated by `positions` in float64 (its mistakes: the formula's, formulas.rotary_formula)."""
    return _ref_rotate(x, positions, base=base)


@check
def apply_rotary(fn, seed=0, batch=2, num_heads=2, L=5, head_dim=8, start=3,
                 dtype=torch.float32, base=ROTARY_BASE):
    """fn(x, positions, base=base) rotates feature pairs (i, i + hd/2): equal to the
    reference, norms kept, and scores q . k that depend only on the offset of the two
    positions."""
    x, positions, q, k, (m, n, shift) = _rotary_inputs(seed, batch, num_heads, L, head_dim,
                                                       start, dtype)
    expected = _rotary_answer(x, positions, base)
    name = MESSAGES["rotary_name"].format(shape=tuple(x.shape), positions=positions.tolist(),
                                          base=base)
    # base=10000.0, the default the exercise promises, is left to it (not passed)
    options = {} if base == ROTARY_BASE else {"base": base}
    try:
        actual = call(fn, x.clone(), positions.clone(), name="apply_rotary", **options)
    except CheckFailure as failure:
        # widths that meet in an error: the pairs' (head_dim // 2, cos and sin) and half of
        # another axis of x: the number of pairs read off that axis
        met, pairs = _sizes_met(str(failure)), head_dim // 2
        axis = next((k for k in range(x.dim() - 1) if x.shape[k] // 2 in met - {pairs}), None)
        if pairs not in met or axis is None:
            raise
        fail(str(failure) + MESSAGES["in_this_exercise"].format(
            reason=MESSAGES["half_other_axis"].format(
                pairs=pairs, half=x.shape[axis] // 2, size=x.shape[axis], axis=axis - x.dim(),
                axis_name=("batch", "num_heads", "L")[axis])))
    if isinstance(actual, torch.Tensor) and actual.dtype == torch.float64 != dtype:
        fail(MESSAGES["angles_float64"].format(name=name, got=actual.dtype, want=dtype))
    expect_tensor(actual, name, shape=x.shape, dtype=dtype, shape_names="(B, h, L, head_dim)")
    mistakes = step_mistakes("rotary", {"x": x, "positions": positions}, current_dims(),
                             base=base)
    scale = x.double().abs().amax(-1, keepdim=True)
    condition = 1 + int(positions.abs().max())
    # a step of the formula done another way is named before the properties below say only
    # that a norm or an offset is off
    if not close(actual.double(), expected, dtype, scale, condition):
        step = diagnose.one_step(actual.double(), mistakes,
                                 lambda a, b: close(a, b, dtype, scale, condition))
        if step:
            fail(diagnose.explained(name, step))
    # properties next: they need no answer, and say what kind of mistake it is
    norms = actual.double().norm(dim=-1)
    expect_close(norms, x.double().norm(dim=-1), MESSAGES["norms_of"].format(name=name),
                 dtype=dtype, hint=MESSAGES["norms_hint"])

    def score(i, j):
        qi = call(fn, q.view(1, head_dim).clone(), torch.tensor([i]), name="apply_rotary",
                  **options)
        kj = call(fn, k.view(1, head_dim).clone(), torch.tensor([j]), name="apply_rotary",
                  **options)
        return (qi.double() * kj.double()).sum()

    before, after = score(m, n), score(m + shift, n + shift)
    size = q.double().norm() * k.double().norm()
    # an angle p * frequency is rounded to about eps * p: the rotated rows carry that error
    if not close(after.view(1), before.view(1), dtype, scale=size,
                 condition=2 * (1 + max(m, n) + shift)):
        fail(MESSAGES["offset_score"].format(m=m, n=n, before=before.item(), m2=m + shift,
                                             n2=n + shift, after=after.item()))
    expect_close(actual, expected, name, dtype=dtype, scale=scale, condition=condition,
                 mistakes=mistakes, hint=MESSAGES["rotary_hint"])
    passed(MESSAGES["rotary_passed"].format(dtype=dtype, base=base, positions=positions.tolist(),
                                            m=m, n=n, m2=m + shift, n2=n + shift))


# ----------------------------------------------------------------------------- equivariance
def _torch_layer(state, d_model, num_heads, positions):
    """An nn.MultiheadAttention self-attention layer holding `state`, as a callable
    (B, L, D) -> (B, L, D); with `positions` (L_max, D), added to the tokens first."""
    with torch.random.fork_rng():
        mha = nn.MultiheadAttention(d_model, num_heads, batch_first=True,
                                    dtype=state["out_proj.weight"].dtype)
    mha.load_state_dict(state)
    mha.eval()

    def layer(x):
        if positions is not None:
            x = x + positions[: x.shape[1]]
        return mha(x, x, x, need_weights=False)[0]
    return layer


@reference
def _equivariance_setup(seed, batch, L, d_model, num_heads, dtype):
    """nn.MultiheadAttention's state, position vectors (L, D), x (B, L, D) and a permutation
    that moves every token: one cycle through all L positions in a random order. (With
    shorter cycles the catalogued mistakes give the same number: over a 3-cycle, comparing
    with the output unpermuted or permuted by the inverse takes the same differences, so
    whenever the largest one lay there the inverse permutation was named as the other.)"""
    gen = generator(seed)
    state = {"in_proj_weight": torch.randn(3 * d_model, d_model, generator=gen,
                                           dtype=torch.float64) / math.sqrt(d_model),
             "in_proj_bias": 0.5 * torch.randn(3 * d_model, generator=gen, dtype=torch.float64),
             "out_proj.weight": torch.randn(d_model, d_model, generator=gen,
                                            dtype=torch.float64) / math.sqrt(d_model),
             "out_proj.bias": 0.5 * torch.randn(d_model, generator=gen, dtype=torch.float64)}
    state = {n: t.to(dtype) for n, t in state.items()}
    positions, x = random_inputs((L, d_model), (batch, L, d_model), seed=seed + 1, dtype=dtype)
    if L < 4:
        raise ValueError(f"L = {L}: the mistakes are told apart from L = 4 on")
    order = torch.randperm(L, generator=gen)
    perm = torch.empty(L, dtype=torch.long)
    perm[order] = order.roll(-1)  # order[0] -> order[1] -> ... -> order[-1] -> order[0]
    return state, positions, x, perm


def _negated(state):
    """`state` with out_proj's weight and bias times -1: the same layer, its outputs negated,
    so that every difference the gap measures changes sign and its size does not."""
    return {**state, "out_proj.weight": -state["out_proj.weight"],
            "out_proj.bias": -state["out_proj.bias"]}


@reference
def _equivariance_answers(state, d_model, num_heads, positions, x, perm):
    """For the plain layer, the one with positions and that one negated (_negated): (expected
    gap, size of the outputs, the formula's inputs: {"output": layer(x), "permuted":
    layer(x[:, perm]), "perm": perm, "x": x}, whose steps done another way name a wrong gap)."""
    state64 = {n: t.double() for n, t in state.items()}
    answers = []
    for weights, pos in ((state64, None), (state64, positions.double()),
                         (_negated(state64), positions.double())):
        layer = _torch_layer(weights, d_model, num_heads, pos)
        with torch.no_grad():
            out, permuted = layer(x.double()), layer(x.double()[:, perm])
        diff = (permuted - out[:, perm]).abs()
        answers.append((diff.max().item(), out.abs().max().item(),
                        {"output": out, "permuted": permuted, "perm": perm,
                         "x": x.double()}))
    return answers


@check
def equivariance_gap(fn, seed=0, batch=2, L=6, d_model=8, num_heads=2, dtype=torch.float32):
    """fn(layer, x, perm) = max |layer(x[:, perm]) - layer(x)[:, perm]|: about 0 (rounding)
    for attention without positions, clearly not for the same layer with position vectors
    added to its tokens, and the same again for that layer with its outputs negated (a
    largest absolute difference keeps its size when every difference changes sign; a
    signed largest difference, the absolute value left out, is right for at most one sign
    unless the largest size comes with both)."""
    state, positions, x, perm = _equivariance_setup(seed, batch, L, d_model, num_heads, dtype)
    answers = _equivariance_answers(state, d_model, num_heads, positions, x, perm)
    labels = (MESSAGES["label_plain"], MESSAGES["label_positions"], MESSAGES["label_negated"])
    layers = ((state, None), (state, positions), (_negated(state), positions))
    # the layers with positions first: their gap is large, so a step of the formula done
    # another way shows in the number (without positions every gap is rounding)
    order = (1, 2, 0)
    for label, (weights, pos), (expected, size, inputs) in (
            (labels[i], layers[i], answers[i]) for i in order):
        # the layer is the course's own (given: built where the student's code runs, from the
        # grader's weights); the number the student's function returns is judged against the
        # grader's own gap, so a layer replaced there never changes the answer to match
        layer = given("checks.positions:_torch_layer", weights, d_model, num_heads, pos)
        seen = observe(fn, layer, x.clone(), perm.clone())
        shown = MESSAGES["gap_name"].format(label=label)
        if seen.error is not None and L != d_model and {L, d_model} <= _sizes_met(
                str(seen.error[1])):   # the positions' size met the features': perm's axis
            restated = diagnose.restate_error(shown, *seen.error[:2], current_dims(),
                                              *seen.error[2:4])
            fail((restated or str(seen.error[1])) + MESSAGES["in_this_exercise"].format(
                reason=MESSAGES["perm_on_features"].format(L=L, d_model=d_model)))
        raised(seen.error, shown)
        returned = revive(seen.result)
        # the documented return type: a Python float (numpy.float64 is one too)
        wrong_kind = diagnose.kind(shown, MESSAGES["python_float"], returned, kinds=(float,))
        if wrong_kind:
            fail(MESSAGES["sentence"].format(reason=wrong_kind))
        got = _number(returned, shown)
        one = {"dtype": torch.float64}
        expect_close(torch.tensor([float(got)], **one), torch.tensor([expected], **one),
                     MESSAGES["gap_returned"].format(label=label, got=got, expected=expected),
                     mistakes=step_mistakes("equivariance gap", inputs, current_dims()),
                     dtype=dtype, scale=size,
                     hint=MESSAGES["gap_hint"])
    passed(MESSAGES["gap_passed"].format(dtype=dtype, perm=perm.tolist(), plain=answers[0][0],
                                         positions=answers[1][0]))
