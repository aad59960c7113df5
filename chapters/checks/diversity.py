"""Checks for chapter 5, why heads diversify: relation_scores, make_heads_identical,
head_similarity, ablation_importance, prune_heads.

Each check builds random inputs from `seed`, runs the student's function, compares with a
few-line reference in this module and, when the numbers differ, with what the classic
mistakes give on the same input, so that the message names the mistake. The @reference
functions draw those inputs and compute those answers (in the student's kit they are read
from its fixtures instead, see common.py); the judging code outside them computes none.

make_heads_identical and prune_heads receive the chapter's MultiHeadAttention class (`cls`)
and use only this interface of it:
    cls(d_model, num_heads, *, query_size=None, key_size=None, value_size=None, bias=True,
        dropout=0.0)
    attributes num_heads, head_dim, and q_proj, k_proj, v_proj, out_proj, each with
    `.weight` (out_features, in_features) and `.bias` (out_features,) or None, as nn.Linear
    stores them (the checks overwrite them in place with their own values); .parameters(),
    .to(dtype=..., device=...), .eval(), .training, and
    forward(query, key, value) -> (output (B, Lq, D), weights (B, h, Lq, Lk)).
ablation_importance receives a model built by the checks (GatedModel) with the interface of
the chapter's TinyAttentionModel: `num_heads`, and forward(tokens, head_mask=None) ->
(logits_prev, logits_first, weights).

Under the autograder the student's objects live in another process. The checks judge only
values the grader can verify (common.py, "The runtime"): they build the modules and the lab
model there (the class the student passes; common.given() for the model), load their own
weights into them (common.load_weights), read their parameters back by value and compare
their outputs on the checks' own inputs (common.observe); no code of the checks runs there.
What is an object's identity there ("returned mha itself", "replaced a parameter") is
decided by behaviour: values the grader writes into one object and reads back from another.

Shape letters: B batch, L (Lq, Lk) sequence length, h num_heads, hd head_dim, D d_model,
V vocab_size.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import diagnose
from .common import (CheckFailure, attempt, by_owner, call_keeping, check, close,
                     construct, current_dims, differs, expect_close, expect_tensor, fail,
                     generator, given, is_class, is_module, judge_construct, load_weights,
                     observe, passed, raised, random_inputs, reference, refusal, revive,
                     step_mistakes, type_name)
from .common import named_by_shape, size_kwargs
from .common import (expect_dtype, expect_named_tuple, expect_no_graph, expect_own_storage,
                     expect_type, watch_arguments, expect_unchanged)
from .language import translated

IGNORE_INDEX = -100  # F.cross_entropy's default ignore_index: positions with no target
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")

# Every message of this chapter's checks, one template each with named fields (one place, for
# a second language); the families' sentences are diagnose.MESSAGES'.
MESSAGES = translated(__name__) | {
    # shared
    "interface": "The checks use: attributes num_heads, head_dim and q_proj, k_proj, v_proj, "
                 "out_proj, each an nn.Linear with .weight (out_features, in_features) and "
                 ".bias.",
    "in_words": " In words: {found}.",
    "dtype_of_weights": "the dtype of weights",
    # the modules the checks build
    "not_a_class": "pass the MultiHeadAttention class to the check, got {got}",
    "no_attribute": "{where} has no attribute `{attr}`. {interface}",
    "not_a_tensor": "{where}: {name} is a {value}, not a tensor. {interface}",
    "to_raised": "{where}.to(dtype={dtype}, device={device}) raised {kind}: {message}",
    "heads_attrs": "{where}: num_heads and head_dim are {heads}, expected [{h}, {hd}]. "
                   "{interface}",
    "param_shape": "{where}: {name} has shape {got}, expected shape {want}. {interface}",
    "param_missing": "{where}: {name} is missing, expected shape {want}. {interface}",
    "forward_pair": "{where} must return (output, weights) from forward. {interface}",
    # exercise 1
    "pair": "a pair RelationScores(prev, first) of two (num_heads,) tensors",
    "pair_one_tensor": "Return the two (num_heads,) tensors as RelationScores(prev, first), "
                       "not one tensor that stacks them.",
    "pair_none": "Did you forget to return it?",
    "relation_shape": "{name}: {label} has shape {got}, expected ({h},) = (num_heads,).{words} "
                      "Keep the head axis (dim 1) and average over the batch (dim 0) and over "
                      "the query positions i >= 2, keeping one number per head.",
    "relation_hint": "For each query position i >= 2, take the weight on key i-1 (prev) and on "
                     "key 0 (first), then average over the batch and over i.",
    "relation_passed": "relation_scores: weights (B, num_heads, L, L) = {shape} ({dtype}) -> "
                       "prev and first of shape ({h},), the mean weight on keys i-1 and 0 over "
                       "query positions i >= 2",
    # exercise 2
    "parameter_list_raised": "nn.ParameterList({where}.parameters()) raised {kind}: {message}",
    "identical_returns": "mha itself, the module it changed in place",
    "identical_none": "Return mha, so that calls can be chained.",
    "identical_other": "{name} returned another object ({got}): change mha in place and return "
                       "mha itself.",
    "replaced_parameter": "{name} replaced the parameter {param} by a new object: copy into "
                          "the existing parameters (`param[...] = ...` or `param.copy_(...)` "
                          "under torch.no_grad()), so that an optimizer built earlier still "
                          "sees them.",
    "gone": "{name}: {key} is gone after the call. {interface}",
    "out_bias_changed": "out_proj.bias changed: it is added once to the sum over heads and "
                        "belongs to no head; leave it as it is.",
    "identical_hint": "Every head's rows (q_proj, k_proj, v_proj, and their biases) and "
                      "columns (out_proj) must equal head 0's.",
    "weights_differ": "{name}: head {i}'s attention weights differ from head 0's after the "
                      "copy. Copy q_proj and k_proj rows (and biases) of head 0 into every "
                      "head.",
    "identical_passed": "make_heads_identical: {where} ({dtype}) now holds {h} copies of head 0 "
                        "(rows of q_proj, k_proj, v_proj and their biases, columns of "
                        "out_proj; out_proj.bias unchanged), in place, and every head has the "
                        "same attention weights",
    # exercise 3
    "similarity_hint": "Flatten each head's map, normalise it to length 1, take the dot "
                       "products between heads, average over the batch.",
    "similarity_passed": "head_similarity: weights (B, num_heads, Lq, Lk) = {shape} ({dtype}) "
                         "-> ({h}, {h}) cosine similarities of the heads' maps, averaged over "
                         "the batch",
    # exercise 4
    "ablation_returns": "a (num_heads,) torch.Tensor",
    "ablation_hint": "For each head k: gates = torch.ones(num_heads), gates[k] = 0, loss of "
                     "model(tokens, head_mask=gates) minus the loss with no mask.",
    "ablation_passed": "ablation_importance: for each of {h} heads, the loss increase when that "
                       "head alone is masked (loss_prev + loss_first, {N} sequences of length "
                       "{L}, {dtype})",
    # exercise 5
    "out_rows_pruned": "out_proj.weight has shape {got}: you kept rows of out_proj.weight. "
                       "nn.Linear stores W_O transposed, (d_model, num_heads * head_dim): keep "
                       "the columns of the kept heads, out_proj.weight[:, rows].",
    "head_dim_changed": "the pruned module has head_dim = {got}, expected {hd}: pass "
                        "head_dim=mha.head_dim when you build it (with fewer heads, d_model // "
                        "num_heads would be a different head_dim).",
    "prune_shapes": "The new module's projections must have {kept} * head_dim = {kept} * {hd} "
                    "rows (out_proj: columns): build it with head_dim=mha.head_dim (with fewer "
                    "heads, d_model // num_heads is a different head_dim, or does not divide), "
                    "and keep rows of q_proj, k_proj, v_proj but columns of out_proj.weight; copy "
                    "out_proj.bias whole ((d_model,): it belongs to no head).",
    "prune_returns": "a new, smaller MultiHeadAttention module",
    "prune_none": "Return the module you built.",
    "prune_itself": "{name} returned mha itself: build and return a new module and leave mha "
                    "as it is.",
    "prune_added": "{name} added {key} to the original module: leave mha as it is and build a "
                   "new module.",
    "prune_num_heads": "{name}: the pruned module has num_heads = {got}, expected {kept} ({h} "
                       "heads minus the {removed} removed).",
    "prune_no_bias": "{name}: the pruned module has no {key} although mha has one: build it "
                     "with bias=mha.bias.",
    "prune_extra_bias": "{name}: the pruned module has a {key} that mha does not have: build "
                        "it with the same bias setting (bias=mha.bias).",
    "dtype_of_mha": "the dtype of mha's parameters",
    "prune_hint": "Keep the rows [k*head_dim, (k+1)*head_dim) of q_proj, k_proj, v_proj "
                  "(weights and biases) and the same columns of out_proj.weight, for each kept "
                  "head k; keep out_proj.bias.",
    "pruned_module": "{name}: the pruned module",
    "mode_words": {"state": "mode", "training": "training", "eval": "eval",
                   "why": " (mha's mode)"},
    "dropout_words": {"state": "dropout", "off": "off", "on": "on, p = {p}", "why": " (mha's)"},
    "prune_training": "Your pruned module is in training mode while mha is in eval mode, so "
                      "its dropout is on and its output changes from call to call: a new "
                      "module starts in training mode; copy the original's mode with "
                      ".train(mha.training).",
    "prune_always_eval": "mha is in training mode here but your pruned module is in eval mode: "
                         "copy the original's mode, .train(mha.training), rather than always "
                         "calling .eval() (a model pruned mid-training goes on training).",
    "prune_no_dropout": "In training mode your pruned module gave the same output twice for "
                        "the same inputs although mha has dropout = {p}: its dropout is off. "
                        "Build it with dropout=mha.dropout (everything but the number of heads "
                        "as in mha).",
    "prune_random": "the pruned module gave two different outputs for the same inputs: mha is "
                    "in eval mode, where dropout is off and the output is the same on every "
                    "call; the pruned copy must be in mha's mode (.train(mha.training)) and "
                    "compute what mha computes.",
    "prune_output_hint": "Its output must equal mha's output with the removed heads' gates at "
                         "0.",
    "no_head": "there is no head {h} (the heads are 0 .. {last})",
    "none_left": "no head would be left",
    "value_error": "a ValueError",
    "prune_refusal": "{reason}: {why} (check the indices before building anything).",
    "prune_passed": "prune_heads: {where} ({dtype}) without heads {remove} -> {kept} heads of "
                    "head_dim {hd}; its output equals the original's with those heads masked",
    "prune_order": "prune_heads(mha, {given}) is right, but the same heads to remove in another "
                   "order, {order}, are not: the result must not depend on the order of "
                   "heads_to_remove. Likely the kept heads are found by deleting from a list by "
                   "index while walking heads_to_remove (del keep[k], keep.pop(k)): each "
                   "deletion shifts the indices of the heads after it. Keep the heads that are "
                   "not removed instead: [k for k in range(num_heads) if k not in "
                   "heads_to_remove].",
    # labels and compositions (a call's name with what it holds, an axis's name: "{}" is
    # the index along it)
    "labelled": "{name}: {label}",
    "joined": "{first} {then}",
    "joined_below": "{first}\n{then}",
    "forward_of": "forward of {where}",
    "forward_weights": "forward of {where}: weights",
    "dtype_of_model": "the dtype of the model's parameters",
    "pruned_label": "the pruned module",
    "pruned_output": "{name}: output of the pruned module",
    "pruned_training_label": "the pruned module in training mode",
    "in_training": "{name} with mha in training mode",
    "kept_axes": "(d_model, kept heads * head_dim)",
    "axis_head": "head {}",
    "pruned_head": "head {} of the pruned module",
    "axis_row": "row {} of each head",
    "axis_column": "column {} of each head",
    "axis_input": "input feature",
    "axis_output": "output feature",
    # the lab model (GatedModel): what it raises for a head_mask it cannot take
    "head_mask_type": "head_mask must be a tensor, got {got}",
    "head_mask_shape": "head_mask must have shape ({h},) or ({B}, {h}), got {got}",
    "batch_repr": "Batch(tokens, prev_target, first_target: {shape} each)",
    # a raise on None under bias=False (make_heads_identical, prune_heads)
    "bias_none": "This mha was built with bias=False: its projections' biases are None (the "
                 "exercise: `None when bias=False`), so copy a bias only when it is not None "
                 "(`if proj.bias is not None:`).",
    "axis_head_rows": "head {} (rows)",
    "axis_head_columns": "head {} (columns)",
}

# ----------------------------------------------------------------------------- helpers
@reference
def _attention_maps(B, h, Lq, Lk, seed, causal):
    """Random attention weights in float64, (B, h, Lq, Lk), rows summing to 1; each head has
    its own temperature, so the heads' maps differ in sharpness."""
    (scores,) = random_inputs((B, h, Lq, Lk), seed=seed, dtype=torch.float64)
    scores = scores * torch.linspace(0.5, 3.0, h, dtype=torch.float64).view(1, h, 1, 1)
    if causal:
        allowed = torch.ones(Lq, Lk, dtype=torch.bool).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1)


def _shape_words(got, want, axes):
    """" In words: <the wrong_shape family's sentence>." for a shape `got` where `want`
    (axes: its axes' names, "(num_heads,)") is documented; "" when none fits."""
    found = diagnose.wrong_shape(tuple(got), tuple(want), current_dims(), axes)
    return MESSAGES["in_words"].format(found=found) if found else ""


def _pair(seen, name):
    """The (prev, first) pair the call `seen` (an Observed) returned, a RelationScores."""
    result = revive(seen.result)
    advice = (MESSAGES["pair_one_tensor"] if isinstance(result, torch.Tensor) else
              MESSAGES["pair_none"] if result is None else "")
    expect_type(result, (tuple, list), name, advice, documented=MESSAGES["pair"])
    expect_named_tuple(seen, "RelationScores", ("prev", "first"), name)
    return result


def _bias_none(failure, error, bias):
    """Fail with the raise's message and MESSAGES["bias_none"] where the student's code
    raised on a None (error: attempt()'s (kind, message)) in a module built with
    bias=False, whose biases are None."""
    if not bias and error and "NoneType" in error[1]:
        fail(MESSAGES["joined_below"].format(first=failure, then=MESSAGES["bias_none"]))


# ----------------------------------------------------------------------------- exercise 1
@reference
def _relation_answers(w64):
    """(expected prev, expected first) in float64, (num_heads,) each, for the weights w64
    (B, h, L, L) in float64: the mean weights on keys i-1 and 0 over the query positions
    i >= 2. (The mistakes come from the exercise's formula, formulas.relation_formula.)"""
    i = torch.arange(2, w64.shape[-1])
    return w64[:, :, i, i - 1].mean((0, 2)), w64[:, :, i, 0].mean((0, 2))


@check
def relation_scores(fn, *, seed=0, B=3, num_heads=2, L=6, dtype=torch.float32, device="cpu"):
    """fn(weights (B, h, L, L)) -> (prev (h,), first (h,)): the mean attention weight on key
    i-1 and on key 0, over the batch and the query positions i >= 2."""
    w64 = _attention_maps(B, num_heads, L, L, seed, causal=True)
    weights = w64.to(dtype=dtype, device=device, copy=True)  # the student's: w64 stays intact
    name = "relation_scores(weights)"
    seen = observe(fn, weights, name=name)   # (weights changed in place fail there)
    raised(seen.error, name)
    prev, first = _pair(seen, name)
    h = num_heads
    for label, value in (("prev", prev), ("first", first)):
        expect_tensor(value, MESSAGES["labelled"].format(name=name, label=label))
        if tuple(value.shape) != (h,):
            fail(MESSAGES["relation_shape"].format(
                name=name, label=label, got=tuple(value.shape), h=h,
                words=_shape_words(value.shape, (h,), "(num_heads,)")))
        expect_tensor(value, MESSAGES["labelled"].format(name=name, label=label), shape=(h,),
                      device=device,
                      shape_names="(num_heads,)")
        expect_dtype(value, dtype, MESSAGES["labelled"].format(name=name, label=label),
                     MESSAGES["dtype_of_weights"])
    prev, first = prev.detach().cpu(), first.detach().cpu()

    hint = MESSAGES["relation_hint"]
    for label, value, expected in zip(("prev", "first"), (prev, first), _relation_answers(w64)):
        labelled = MESSAGES["labelled"].format(name=name, label=label)
        expect_close(value, expected.to(dtype), labelled, dtype=dtype, hint=hint,
                     axes=[MESSAGES["axis_head"]],
                     mistakes=step_mistakes("relation score", {"weights": w64},
                                            current_dims(), relation=label))
    passed(MESSAGES["relation_passed"].format(shape=tuple(weights.shape), dtype=dtype, h=h))


# ----------------------------------------------------------------------------- modules
def _spec(cls, d_model, num_heads, query_size, key_size, value_size, bias, dropout=0.0):
    """(kwargs for cls, "MultiHeadAttention(...)")."""
    if not is_class(cls):
        fail(MESSAGES["not_a_class"].format(got=type_name(cls)))
    kwargs = size_kwargs(query_size, key_size, value_size, bias)
    if dropout:
        kwargs["dropout"] = dropout
    shown = ", ".join([str(d_model), str(num_heads)] + [f"{k}={v}" for k, v in kwargs.items()])
    return kwargs, f"MultiHeadAttention({shown})"


@reference
def _module_params(d_model, query_size, key_size, value_size, bias, dtype, seed):
    """P, the weights and biases that the module gets, {name: float64 (CPU)}: random (biases
    too: zeros would hide mistakes) and rounded to `dtype` as the module stores them."""
    gen = generator(seed)
    P = {}
    sizes = (query_size or d_model, key_size or d_model, value_size or d_model, d_model)
    for attr, fan_in in zip(PROJECTIONS, sizes):
        W = torch.randn((d_model, fan_in), generator=gen, dtype=torch.float64)
        P[attr + ".weight"] = (W / math.sqrt(fan_in)).to(dtype).double()  # (D, fan_in)
        if bias:
            b = 0.5 * torch.randn((d_model,), generator=gen, dtype=torch.float64)
            P[attr + ".bias"] = b.to(dtype).double()                      # (D,)
    return P


NO_ATTRIBUTE = object()  # what _read() finds where the module has no such projection


def _read(module):
    """{name: what module.<projection>.<part> holds now} for the projections' weights and
    biases, read back by value: a tensor (a copy), None, a class name, or NO_ATTRIBUTE."""
    # one call reads every registered tensor (under the autograder each read is a round trip
    # to the student's process); the attributes only for what the state_dict lacks
    state = module.state_dict()
    state = state if isinstance(state, dict) else {}
    found, projections = {}, {}
    for attr in PROJECTIONS:
        for part in ("weight", "bias"):
            value = state.get(f"{attr}.{part}")
            if not isinstance(value, torch.Tensor):
                if attr not in projections:
                    projections[attr] = getattr(module, attr, None)
                proj = projections[attr]
                value = NO_ATTRIBUTE if proj is None else getattr(proj, part, None)
            if isinstance(value, torch.Tensor):
                value = value.detach().clone()  # (here: a snapshot of the live tensor)
            elif value is not None and value is not NO_ATTRIBUTE:
                value = type_name(value)
            found[f"{attr}.{part}"] = value
    return found


def _params(found, where):
    """{name: tensor} of the projections' weights and biases that _read() found; fails on a
    missing projection or one whose weight or bias is not a tensor."""
    out = {}
    for name, value in found.items():
        if value is NO_ATTRIBUTE:
            fail(MESSAGES["no_attribute"].format(where=where, attr=name.split(".")[0],
                                                 interface=MESSAGES["interface"]))
        if isinstance(value, str):
            fail(MESSAGES["not_a_tensor"].format(where=where, name=name, value=value,
                                                 interface=MESSAGES["interface"]))
        if value is not None:
            out[name] = value
    return out


def _build(cls, d_model, num_heads, kwargs, P, dtype, device, where):
    """cls(d_model, num_heads, **kwargs), built where the student's code runs, moved to dtype
    and device, in eval mode, holding P (copied in by load_weights); fails unless it has the
    documented interface. Returns (module, h, hd)."""
    module, data = construct(cls, d_model, num_heads, **kwargs)
    judge_construct(data, where)
    module, error = attempt(lambda: module.to(dtype=dtype, device=device).eval())
    if error is not None:
        fail(MESSAGES["to_raised"].format(where=where, dtype=dtype, device=device,
                                          kind=error[0], message=error[1]))
    _params(_read(module), where)
    h, hd = num_heads, d_model // num_heads
    heads = [getattr(module, "num_heads", None), getattr(module, "head_dim", None)]
    if differs(heads[0], h) or differs(heads[1], hd):
        fail(MESSAGES["heads_attrs"].format(where=where, heads=heads, h=h, hd=hd,
                                            interface=MESSAGES["interface"]))
    found = load_weights(module, by_owner(P))
    for name, value in P.items():
        shape = found.slot(*name.split("."))
        if shape != tuple(value.shape):
            fail(MESSAGES["param_shape" if isinstance(shape, tuple) else "param_missing"].format(
                where=where, name=name, got=shape, want=tuple(value.shape),
                interface=MESSAGES["interface"]))
    return module, h, hd


def _forward_result(seen, where):
    """(output, weights) from the Observed forward call of a module."""
    raised(seen.error, MESSAGES["forward_of"].format(where=where))
    result = revive(seen.result)
    if not (isinstance(result, tuple) and len(result) == 2):
        fail(MESSAGES["forward_pair"].format(where=where, interface=MESSAGES["interface"]))
    return result


def _layout(key):
    """How the parameter `key` holds its heads: "columns" of out_proj.weight, "rows" else."""
    return "columns" if key == "out_proj.weight" else "rows"


def _same_tensor(value, marker):
    return (isinstance(value, torch.Tensor) and value.shape == marker.shape
            and torch.equal(value.detach().cpu(), marker))


def _markers(found):
    """{name: values the grader writes to recognise a tensor when it reads it back} for each
    tensor _read() found: 2 + i + k/4, exact in every float dtype and far from any weight."""
    return {name: (2 + i + torch.arange(value.numel(), dtype=torch.float64) % 4 / 4)
            .to(value.dtype).view(value.shape)
            for i, (name, value) in enumerate(found.items()) if isinstance(value, torch.Tensor)}


def _written_back(target, source, found):
    """A cross-check by behaviour, in place of "is the same object": the grader writes
    markers into target's projections (load_weights) and reads source's back. `found`: a
    _read() whose tensors' shapes and dtypes the markers take (target's, or source's, which
    target must match to be it). Returns (markers, the names whose markers source now
    holds: all, when target is source)."""
    markers = _markers(found) if is_module(target) else {}
    if markers:
        load_weights(target, by_owner(markers))
    back = _read(source)
    return markers, {name for name, m in markers.items() if _same_tensor(back.get(name), m)}


@reference
def _ref_mha(P, query, key, value, h, hd, gates=None):
    """Multi-head attention in float64 from the weights P (nn.Linear layout), with each head's
    output multiplied by gates[i] before W_O. Returns output (B, Lq, D)."""
    def project(name, x):
        y = F.linear(x.double(), P[name + ".weight"], P.get(name + ".bias"))  # (B, L, h*hd)
        return y.view(x.shape[0], x.shape[1], h, hd).transpose(1, 2)         # (B, h, L, hd)

    q, k, v = project("q_proj", query), project("k_proj", key), project("v_proj", value)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(hd), dim=-1)  # (B, h, Lq, Lk)
    heads = weights @ v                                                       # (B, h, Lq, hd)
    if gates is not None:
        heads = heads * gates.double().view(1, h, 1, 1)
    merged = heads.transpose(1, 2).reshape(query.shape[0], query.shape[1], h * hd)
    return F.linear(merged, P["out_proj.weight"], P.get("out_proj.bias"))     # (B, Lq, D)


def _expect_param(actual, expected, name, key, hd, dtype, hint, head=None,
                  mistakes=None):
    """expect_close for the parameter `key` of a projection (nn.Linear's layout), with its
    heads on an axis of their own: q_proj, k_proj, v_proj's rows (h*hd, ...) as (h, hd, ...),
    out_proj.weight's columns (D, h*hd) as (D, h, hd); so that the message names the heads
    that differ ("head 2"), not rows. head: that axis's name ("{}": the heads' indices).
    mistakes: step_mistakes() of the exercise's formula for this parameter."""
    head = head or MESSAGES["axis_head"]
    axis = 1 if key == "out_proj.weight" else 0
    if key == "out_proj.bias" or tuple(actual.shape) != tuple(expected.shape) \
            or actual.dim() <= axis or actual.shape[axis] % hd:
        return expect_close(actual, expected, name, dtype=dtype, hint=hint,
                            mistakes=mistakes)
    names = ([head, MESSAGES["axis_row"]] + [MESSAGES["axis_input"]] * (actual.dim() - 1)
             if axis == 0 else [MESSAGES["axis_output"], head, MESSAGES["axis_column"]])

    def by_head(t):
        return t.unflatten(axis, (-1, hd))

    expect_close(by_head(actual), by_head(expected), name, dtype=dtype, hint=hint, axes=names,
                 mistakes={m: by_head(c) for m, c in (mistakes or {}).items()
                           if tuple(c.shape) == tuple(expected.shape)})


# ----------------------------------------------------------------------------- exercise 2
@reference
def _identical_answers(P, h, hd):
    """{name: expected} in float64 for each parameter of P that make_heads_identical copies
    (all but out_proj.bias): head 0's block in every head. (The mistakes come from the
    exercise's formula, formulas.head_copy_formula.)"""
    answers = {}
    for key, W in P.items():
        if key == "out_proj.bias":
            continue
        if key == "out_proj.weight":
            expected = W[:, :hd].repeat(1, h)                            # (D, h*hd)
        elif key.endswith(".weight"):
            expected = W[:hd].repeat(h, 1)                               # (h*hd, in)
        else:
            expected = W[:hd].repeat(h)                                  # (h*hd,)
        answers[key] = expected
    return answers


@check
def make_heads_identical(fn, cls, *, seed=0, d_model=12, num_heads=3, query_size=None,
                         key_size=None, value_size=None, bias=True, dtype=torch.float32,
                         device="cpu"):
    """fn(mha) copies head 0's rows of q_proj, k_proj, v_proj (weights and biases) and its
    column block of out_proj.weight into every head, in place, and returns mha."""
    kwargs, where = _spec(cls, d_model, num_heads, query_size, key_size, value_size, bias)
    P = _module_params(d_model, query_size, key_size, value_size, bias, dtype, seed)
    sizes = (query_size or d_model, key_size or d_model, value_size or d_model)
    inputs = random_inputs((2, 4, sizes[0]), (2, 5, sizes[1]), (2, 5, sizes[2]), seed=seed + 1,
                           dtype=dtype, device=device)
    module, h, hd = _build(cls, d_model, num_heads, kwargs, P, dtype, device, where)
    # (a) "replaced a parameter by a new object", by behaviour: a ParameterList built before
    # the call holds the module's parameters, as an optimizer built earlier would (an optimizer
    # itself would cost the student's process torch._dynamo's import, 2 s); after the call the
    # grader writes its own values into the module and reads back which of them it holds
    originals, error = attempt(lambda: given("torch.nn:ParameterList", module.parameters()))
    if error is not None:
        fail(MESSAGES["parameter_list_raised"].format(where=where, kind=error[0],
                                                      message=error[1]))
    name = "make_heads_identical(mha)"
    result, error = attempt(fn, module)
    try:
        # (an in-place write into a parameter outside torch.no_grad(): diagnose's error_reason)
        raised(error, name)
    except CheckFailure as failure:
        _bias_none(failure, error, bias)
        raise
    if result is None:   # (another object than mha: decided by behaviour, below)
        expect_type(result, nn.Module, name, MESSAGES["identical_none"],
                    documented=MESSAGES["identical_returns"])
    found = _read(module)
    # copies: the student's forward gets these
    forward = observe(module, *(x.clone() for x in inputs))
    # (a) "returned mha itself", by behaviour: the grader's markers written into the result
    # are read back from mha (this leaves them in mha: `found` and `forward` came first)
    markers, shared = _written_back(result, module, found)
    if not markers or shared != set(markers) or set(markers) != set(_params(found, where)):
        fail(MESSAGES["identical_other"].format(name=name, got=type_name(result)))
    after = _params(found, where)
    held = list(originals)  # their values, read back
    for pname in after:
        if not any(_same_tensor(p, markers[pname]) for p in held):
            fail(MESSAGES["replaced_parameter"].format(name=name, param=pname))
    answers = _identical_answers(P, num_heads, d_model // num_heads)
    for pname in PROJECTIONS:
        for part in ("weight", "bias"):
            key = f"{pname}.{part}"
            if key not in P:
                continue
            W = P[key]
            if key not in after:
                fail(MESSAGES["gone"].format(name=name, key=key,
                                             interface=MESSAGES["interface"]))
            if key == "out_proj.bias":
                # (computed whatever the student did: the kit replays only the answers that
                # the reference's run asked for)
                mistakes = step_mistakes("out bias", {"W": W}, current_dims(), num_heads=h,
                                         head_dim=hd)
                if not torch.equal(after[key].double().cpu(), W):
                    try:  # how it changed, in the families' words, when one fits
                        expect_close(after[key].cpu(), W.to(dtype),
                                     MESSAGES["labelled"].format(name=name, label=key),
                                     dtype=dtype, hint="", mistakes=mistakes)
                    except CheckFailure as failure:
                        fail(MESSAGES["joined"].format(
                            first=failure, then=MESSAGES["out_bias_changed"]))
                    fail(MESSAGES["labelled"].format(name=name,
                                                     label=MESSAGES["out_bias_changed"]))
                continue
            _expect_param(after[key].cpu(), answers[key].to(dtype),
                          MESSAGES["labelled"].format(name=name, label=key), key, hd,
                          dtype=dtype,
                          mistakes=step_mistakes("head copy", {"W": W}, current_dims(),
                                                 num_heads=h, head_dim=hd,
                                                 layout=_layout(key), ndim=W.dim(), key=key),
                          hint=MESSAGES["identical_hint"])
    # the heads now compute the same thing: equal attention weights for every head
    _, weights = _forward_result(forward, where)
    expect_tensor(weights, MESSAGES["forward_weights"].format(where=where), shape=(2, h, 4, 5),
                  shape_names="(B, num_heads, Lq, Lk)")
    weights = weights.detach().cpu()
    for i in range(1, h):
        if not close(weights[:, i], weights[:, 0], dtype):
            fail(MESSAGES["weights_differ"].format(name=name, i=i))
    passed(MESSAGES["identical_passed"].format(where=where, dtype=dtype, h=h))


# ----------------------------------------------------------------------------- exercise 3
@reference
def _similarity_answers(w64):
    """The expected (h, h) similarities in float64 for the weights w64 (B, h, Lq, Lk) in
    float64. (The mistakes come from the exercise's formula, formulas.similarity_formula.)"""
    unit = F.normalize(w64.flatten(2), dim=-1)                           # (B, h, Lq*Lk)
    return (unit @ unit.transpose(1, 2)).mean(0)                         # (h, h)


@check
def head_similarity(fn, *, seed=0, B=4, num_heads=3, Lq=5, Lk=None, dtype=torch.float32,
                    device="cpu"):
    """fn(weights (B, h, Lq, Lk)) -> (h, h): cosine similarity of the heads' flattened maps,
    computed per example and averaged over the batch."""
    Lk = Lq if Lk is None else Lk
    w64 = _attention_maps(B, num_heads, Lq, Lk, seed, causal=False)
    weights = w64.to(dtype=dtype, device=device, copy=True)  # the student's: w64 stays intact
    name = "head_similarity(weights)"
    out, _ = call_keeping(fn, weights, name=name)   # (weights changed in place fail there)
    h = num_heads
    expect_tensor(out, name)
    expected = _similarity_answers(w64).to(dtype)
    mistakes = step_mistakes("head similarity", {"weights": w64}, current_dims())
    named_by_shape(out.detach().cpu(), expected, name, dtype=dtype, mistakes=mistakes)
    expect_tensor(out, name, shape=(h, h), device=device,
                  shape_names="(num_heads, num_heads)")
    expect_dtype(out, dtype, name, MESSAGES["dtype_of_weights"])
    out = out.detach().cpu()

    expect_close(out, expected, name, dtype=dtype,
                 axes=[MESSAGES["axis_head_rows"], MESSAGES["axis_head_columns"]],
                 mistakes=mistakes,
                 hint=MESSAGES["similarity_hint"])
    passed(MESSAGES["similarity_passed"].format(shape=tuple(weights.shape), dtype=dtype, h=h))


# ----------------------------------------------------------------------------- exercise 4
class Batch:
    """tokens, prev_target, first_target: (N, L) long each, read by name, by index or
    unpacked, like the chapter's TwoRelationBatch. Not a tuple: under the autograder a tuple
    crosses to the student's process by value, as a plain tuple without the names, while
    this stays an object there (built with common.given, see _ablation_setup)."""

    __slots__ = ("tokens", "prev_target", "first_target")

    def __init__(self, tokens, prev_target, first_target):
        self.tokens, self.prev_target, self.first_target = tokens, prev_target, first_target

    def __iter__(self):
        return iter((self.tokens, self.prev_target, self.first_target))

    def __getitem__(self, index):
        return tuple(self)[index]

    def __len__(self):
        return 3

    def __repr__(self):
        return MESSAGES["batch_repr"].format(shape=tuple(self.tokens.shape))


@reference
def _gated_params(vocab_size, seq_len, d_model, num_heads, seed, dtype):
    """GatedModel's parameters drawn from `seed`, {name: tensor in dtype (CPU)}."""
    gen = generator(seed)

    def param(*shape, scale):
        return (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)

    return {
        "tok_emb": param(vocab_size, d_model, scale=1.0),
        "pos_emb": param(seq_len, d_model, scale=1.0),
        "w_qkv": param(d_model, 3 * d_model, scale=2.0 / math.sqrt(d_model)),
        "w_out": param(d_model, d_model, scale=1.0 / math.sqrt(d_model)),
        "readout_prev": param(d_model, vocab_size, scale=2.0 / math.sqrt(d_model)),
        "readout_first": param(d_model, vocab_size, scale=2.0 / math.sqrt(d_model)),
    }


class GatedModel(nn.Module):
    """A few-line model with the interface of the chapter's TinyAttentionModel: token and
    position embeddings, one causal multi-head attention whose heads are multiplied by
    head_mask (h,) or (B, h), and two linear readouts. Its parameters are `params`
    ({name: tensor}, copied), or drawn from `seed` in `dtype` (_gated_params) without it."""

    def __init__(self, vocab_size, seq_len, d_model, num_heads, seed=None, dtype=None,
                 params=None):
        super().__init__()
        if params is None:
            params = _gated_params(vocab_size, seq_len, d_model, num_heads, seed, dtype)
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        for name, value in params.items():
            setattr(self, name, nn.Parameter(value.detach().clone()))

    def forward(self, tokens, head_mask=None):
        """tokens (B, L) long -> (logits_prev (B, L, V), logits_first (B, L, V),
        weights (B, h, L, L))."""
        B, L = tokens.shape
        h, hd = self.num_heads, self.head_dim
        x = self.tok_emb[tokens] + self.pos_emb[:L]                               # (B, L, D)
        q, k, v = (x @ self.w_qkv).view(B, L, 3, h, hd).permute(2, 0, 3, 1, 4)   # (B, h, L, hd)
        scores = q @ k.transpose(-2, -1) / math.sqrt(hd)                          # (B, h, L, L)
        allowed = torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril()
        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        heads = weights @ v                                                       # (B, h, L, hd)
        if head_mask is not None:
            if not isinstance(head_mask, torch.Tensor):
                raise TypeError(MESSAGES["head_mask_type"].format(got=type(head_mask).__name__))
            if tuple(head_mask.shape) not in ((h,), (B, h)):
                raise ValueError(MESSAGES["head_mask_shape"].format(
                    h=h, B=B, got=tuple(head_mask.shape)))
            heads = heads * head_mask.to(heads.dtype)[..., None, None]
        out = heads.transpose(1, 2).reshape(B, L, h * hd) @ self.w_out            # (B, L, D)
        return out @ self.readout_prev, out @ self.readout_first, weights


@reference
def _ablation_inputs(seed, N, L, vocab_size, d_model, num_heads, dtype):
    """(the GatedModel's parameters (_gated_params), (tokens, prev_target, first_target): N
    sequences of length L), the same for the same arguments."""
    params = _gated_params(vocab_size, L, d_model, num_heads, seed, dtype)
    tokens = torch.randint(vocab_size, (N, L), generator=generator(seed + 1))  # (N, L)
    prev = torch.full_like(tokens, IGNORE_INDEX)
    prev[:, 1:] = tokens[:, :-1]
    first = tokens[:, :1].expand(-1, L).clone()
    return params, (tokens, prev, first)


def _ablation_setup(params, batch, L, vocab_size, d_model, num_heads, device):
    """(GatedModel holding `params`, Batch of `batch`'s tensors), on device: the lab that
    ablation_importance builds where the student's code runs (common.given)."""
    model = GatedModel(vocab_size, L, d_model, num_heads, params=params).to(device)
    return model, Batch(*(t.to(device, copy=True) for t in batch))  # copies: `batch` stays


@reference
def _ablation_answers(params, batch, N, L, vocab_size, d_model, num_heads, dtype, device):
    """The expected importances, (h,) on the CPU, for the model holding `params` and `batch`
    (_ablation_inputs): loss with head k's gate at 0 minus the loss with no mask, loss =
    mean cross-entropy of prev + that of first. (The mistakes come from the exercise's
    formula, formulas.ablation_formula.)"""
    model, batch = _ablation_setup(params, batch, L, vocab_size, d_model, num_heads, device)

    def loss(gates=None):
        logits_prev, logits_first, _ = model(batch.tokens, head_mask=gates)
        return (F.cross_entropy(logits_prev.flatten(0, 1), batch.prev_target.flatten())
                + F.cross_entropy(logits_first.flatten(0, 1), batch.first_target.flatten()))

    with torch.no_grad():
        off = 1 - torch.eye(num_heads, dtype=dtype, device=device)   # row k: head k off
        return torch.stack([loss(gates) for gates in off]).cpu() - loss().cpu()


@check
def ablation_importance(fn, *, seed=0, N=16, L=6, vocab_size=11, d_model=12, num_heads=3,
                        dtype=torch.float32, device="cpu"):
    """fn(model, batch) -> (h,): loss with head k's gate at 0 minus the loss with all gates
    at 1, for each head k; loss = mean cross-entropy of prev + that of first."""
    params, batch = _ablation_inputs(seed, N, L, vocab_size, d_model, num_heads, dtype)
    name = "ablation_importance(model, batch)"
    # the lab, built where the student's code runs: what the code there does to it (a
    # replaced GatedModel, say) changes only what fn sees; the answer is the grader's own
    model, lab_batch = given("checks.diversity:_ablation_setup", params, batch, L, vocab_size,
                             d_model, num_heads, device)
    # (the model's parameters changed in place fail there: heads go off through head_mask)
    seen = observe(fn, model, lab_batch, name=name)
    raised(seen.error, name)
    out = revive(seen.result)
    h = num_heads
    expect_type(out, torch.Tensor, name, documented=MESSAGES["ablation_returns"])
    expect_tensor(out, name, shape=(h,), shape_names="(num_heads,)")
    # a measurement: no gradients (@torch.no_grad()), in the model's dtype
    expect_no_graph(seen, name)
    expect_dtype(out, dtype, name, MESSAGES["dtype_of_model"])
    out = out.detach().cpu()

    expected = _ablation_answers(params, batch, N, L, vocab_size, d_model, num_heads, dtype,
                                 device)
    tokens, prev_target, first_target = batch
    mistakes = step_mistakes("ablation importance",
                             {**params, "tokens": tokens, "prev_target": prev_target,
                              "first_target": first_target}, current_dims(),
                             num_heads=num_heads, L=L, vocab_size=vocab_size, d_model=d_model)
    expect_close(out, expected, name, dtype=torch.float32, axes=[MESSAGES["axis_head"]],
                 mistakes=mistakes,
                 hint=MESSAGES["ablation_hint"])
    passed(MESSAGES["ablation_passed"].format(h=h, N=N, L=L, dtype=dtype))


# ----------------------------------------------------------------------------- exercise 5
def _pruned_state(name, which, got, want, **fields):
    """The state family's sentence for the pruned module's mode or dropout (which: "mode" or
    "dropout"; got, want: keys of MESSAGES[which + "_words"])."""
    words = MESSAGES[f"{which}_words"]
    return diagnose.explained(MESSAGES["pruned_module"].format(name=name), diagnose.wrong_state(
        words["state"], words[got].format(**fields), words[want].format(**fields),
        words["why"]))


@reference
def _prune_answers(P, inputs, num_heads, d_model, remove, dtype):
    """({name: expected} in float64 for each parameter of P, and the expected output (in
    dtype) on `inputs` of the module without the heads `remove`, which is mha's output with
    their gates at 0). (The mistakes come from the exercise's formula,
    formulas.head_pruning_formula.)"""
    h, hd = num_heads, d_model // num_heads
    keep = [k for k in range(h) if k not in remove]

    r = torch.cat([torch.arange(k * hd, (k + 1) * hd) for k in keep])  # the kept rows
    answers = {key: W if key == "out_proj.bias" else W[:, r] if key == "out_proj.weight"
               else W[r] for key, W in P.items()}
    gates = torch.ones(h, dtype=torch.float64)
    gates[remove] = 0.0
    expected_out = _ref_mha(P, *(x.cpu() for x in inputs), h, hd, gates).to(dtype)
    return answers, expected_out


def _judge_pruned(found, P, answers, name, h, hd, keep, remove, dtype, device):
    """Fail unless the pruned module's parameters (found: _read() of it) are `answers`, the
    blocks of the heads `keep` of mha's parameters P (heads `remove` left out)."""
    after = _params(found, MESSAGES["pruned_label"])
    inner = len(keep) * hd
    for key in P:
        if key not in after:
            fail(MESSAGES["prune_no_bias"].format(name=name, key=key))
    for key, value in after.items():
        if key not in P:
            fail(MESSAGES["prune_extra_bias"].format(name=name, key=key))
        expected = answers[key]
        if key == "out_proj.weight" and tuple(value.shape) != tuple(expected.shape):
            if tuple(value.shape)[0] == inner:
                fail(MESSAGES["labelled"].format(
                    name=name, label=MESSAGES["out_rows_pruned"].format(got=tuple(value.shape)))
                     + _shape_words(value.shape, expected.shape, MESSAGES["kept_axes"]))
            expect_tensor(value, MESSAGES["labelled"].format(name=name, label=key),
                          shape=expected.shape, shape_names=MESSAGES["kept_axes"])
        labelled = MESSAGES["labelled"].format(name=name, label=key)
        expect_tensor(value, labelled, shape=expected.shape, device=device)
        expect_dtype(value, dtype, labelled, MESSAGES["dtype_of_mha"])
        value = value.detach().cpu()
        _expect_param(value, expected.to(dtype), labelled, key, hd, dtype=dtype,
                      mistakes=step_mistakes("out bias", {"W": P[key]}, current_dims(),
                                             num_heads=h, head_dim=hd, kept=len(keep))
                      if key == "out_proj.bias" else step_mistakes(
                          "head pruning", {"W": P[key]}, current_dims(), num_heads=h,
                          head_dim=hd, layout=_layout(key), remove=tuple(sorted(remove)),
                          ndim=P[key].dim()),
                      head=MESSAGES["pruned_head"],
                      hint=MESSAGES["prune_hint"])


def _other_orders(remove):
    """The heads `remove` in ascending, descending and an unsorted order (a rotation of the
    ascending one), each once, without the order `remove` itself."""
    ascending = sorted(remove)
    orders = [ascending, ascending[::-1], ascending[1:] + ascending[:1]]
    return [order for i, order in enumerate(orders)
            if order != list(remove) and order not in orders[:i]]


@check
def prune_heads(fn, cls, *, seed=0, d_model=12, num_heads=4, remove=(1,), query_size=None,
                key_size=None, value_size=None, bias=True, dropout=0.5, dtype=torch.float32,
                device="cpu"):
    """fn(mha, heads_to_remove) -> a new, smaller module: same d_model and head_dim, the kept
    heads' rows of q_proj, k_proj, v_proj, their columns of out_proj, out_proj.bias, and mha's
    mode; its output equals mha's with the removed heads' gates at 0. mha has dropout > 0
    and is in eval mode, so that a copy left in training mode (where a new module starts)
    gives random outputs; then in training mode, where the copy must be too, with its
    dropout on. The same heads to remove in other orders (ascending, descending, unsorted)
    must give the same module. fn raises ValueError for a head index outside [0, num_heads)
    and when no head would be left."""
    kwargs, where = _spec(cls, d_model, num_heads, query_size, key_size, value_size, bias,
                          dropout)
    P = _module_params(d_model, query_size, key_size, value_size, bias, dtype, seed)
    sizes = (query_size or d_model, key_size or d_model, value_size or d_model)
    inputs = random_inputs((2, 4, sizes[0]), (2, 6, sizes[1]), (2, 6, sizes[2]), seed=seed + 1,
                           dtype=dtype, device=device)
    remove = list(remove)
    module, h, hd = _build(cls, d_model, num_heads, kwargs, P, dtype, device, where)
    keep = sorted(set(range(h)) - set(remove))  # the heads the pruned module holds
    name = f"prune_heads(mha, {remove})"
    # a plain call (what fn returns must stay itself, a module), mha watched: the exercise
    # leaves it as it was, its parameters and its mode
    watched = watch_arguments((module,), {})
    new, error = attempt(fn, module, list(remove))
    try:
        raised(error, name)
    except CheckFailure as failure:
        _bias_none(failure, error, bias)
        if any(s in error[1] for s in ("must match the size", "size mismatch", "divisible",
                                       "shape")):
            fail(MESSAGES["joined_below"].format(
                first=failure, then=MESSAGES["prune_shapes"].format(kept=len(keep), hd=hd)))
        raise
    expect_unchanged(watched, fn, name, [module], {})
    if new is None:   # (mha itself: decided by behaviour, below)
        expect_type(new, nn.Module, name, MESSAGES["prune_none"],
                    documented=MESSAGES["prune_returns"])
    original = _read(module)  # mha after the call
    if is_module(new):
        got_h, got_hd = getattr(new, "num_heads", None), getattr(new, "head_dim", None)
        training = getattr(new, "training", None)
        found = _read(new)
        # copies: the student's forward gets these; twice, as eval mode is deterministic
        forward, again = (observe(new, *(x.clone() for x in inputs)) for _ in range(2))
        # (a) "returned mha itself", by behaviour: the grader's markers written into the
        # result are read back from mha (after `original`, `found` and `forward` were taken)
        markers, shared = _written_back(new, module, found)
        if markers and shared == set(markers) == set(_params(original, where)):
            fail(MESSAGES["prune_itself"].format(name=name))
        expect_own_storage(new, module, name, "mha")
    for key, value in _params(original, where).items():  # mha's values, read back
        if key not in P:
            fail(MESSAGES["prune_added"].format(name=name, key=key))
    expect_type(new, nn.Module, name, documented=MESSAGES["prune_returns"])
    if differs(got_hd, hd):
        fail(MESSAGES["labelled"].format(
            name=name, label=MESSAGES["head_dim_changed"].format(got=got_hd, hd=hd)))
    if differs(got_h, len(keep)):
        fail(MESSAGES["prune_num_heads"].format(name=name, got=got_h, kept=len(keep), h=h,
                                                removed=len(remove)))
    answers, expected_out = _prune_answers(P, inputs, num_heads, d_model, remove, dtype)
    _judge_pruned(found, P, answers, name, h, hd, keep, remove, dtype, device)
    if differs(training, False):  # mha's mode: _build put it in eval mode
        fail(MESSAGES["joined"].format(first=_pruned_state(name, "mode", "training", "eval"),
                                       then=MESSAGES["prune_training"]))
    output, _ = _forward_result(forward, MESSAGES["pruned_label"])
    pruned_output = MESSAGES["pruned_output"].format(name=name)
    expect_tensor(output, pruned_output, device=device)
    repeated, _ = _forward_result(again, MESSAGES["pruned_label"])
    output = output.detach().cpu()
    # the same inputs twice (an output with NaN is not close to itself: judged below)
    if close(output, output, dtype) and not (isinstance(repeated, torch.Tensor)
                                             and close(repeated.detach().cpu(), output, dtype)):
        fail(MESSAGES["labelled"].format(name=name, label=MESSAGES["prune_random"]))
    expect_close(output, expected_out, pruned_output,
                 dtype=dtype, hint=MESSAGES["prune_output_hint"])
    # the same heads in other orders (ascending, descending, unsorted): heads_to_remove is a
    # collection of heads, and a removal that depends on its order is wrong
    for order in _other_orders(remove):
        shown = f"prune_heads(mha, {order})"
        reordered, error = attempt(fn, module, list(order))
        try:
            raised(error, shown)
            expect_type(reordered, nn.Module, shown, documented=MESSAGES["prune_returns"])
            _judge_pruned(_read(reordered), P, answers, shown, h, hd, keep, order, dtype,
                          device)
        except CheckFailure as failure:
            fail(MESSAGES["joined_below"].format(first=failure, then=MESSAGES["prune_order"]
                                                 .format(given=remove, order=order)))
    # the other mode: a copy put in eval mode whatever mha's mode is as wrong as one left in
    # training mode, which eval mode alone cannot tell from a copied mode
    module.train()
    watched = watch_arguments((module,), {})
    in_training, error = attempt(fn, module, list(remove))
    in_training_mode = MESSAGES["in_training"].format(name=name)
    raised(error, in_training_mode)
    expect_unchanged(watched, fn, in_training_mode, [module], {})
    if is_module(in_training) and differs(getattr(in_training, "training", None), True):
        fail(MESSAGES["joined"].format(first=_pruned_state(name, "mode", "eval", "training"),
                                       then=MESSAGES["prune_always_eval"]))
    if dropout and is_module(in_training):  # mha's dropout, seen where it acts: training mode
        outputs = [_forward_result(observe(in_training, *(x.clone() for x in inputs)),
                                   MESSAGES["pruned_training_label"])[0] for _ in range(2)]
        if all(isinstance(o, torch.Tensor) for o in outputs) and close(
                outputs[0].detach().cpu(), outputs[1].detach().cpu(), dtype):
            fail(MESSAGES["joined"].format(
                first=_pruned_state(name, "dropout", "off", "on", p=dropout),
                then=MESSAGES["prune_no_dropout"].format(p=dropout)))
    # the refusals the exercise specifies: an index outside [0, num_heads), no head left
    for bad, why in (([h], MESSAGES["no_head"].format(h=h, last=h - 1)),
                     (list(range(h)), MESSAGES["none_left"])):
        error = refusal(fn, module, bad)
        reason = diagnose.kind(f"prune_heads(mha, {bad})", MESSAGES["value_error"],
                               raised=error[0] if error else None)
        if reason:
            fail(MESSAGES["prune_refusal"].format(reason=reason, why=why))
    passed(MESSAGES["prune_passed"].format(where=where, dtype=dtype, remove=remove,
                                           kept=len(keep), hd=hd))
