"""Checks for chapter 2, head splitting: split_heads, merge_heads, multihead_attention_core,
head_projection, fuse_head_weights.

Each check builds random inputs from `seed`, runs the student's function, compares with a
few-line reference (or nn.MultiheadAttention) and, when the numbers differ, names the
mistake by its shape (checks/diagnose.py): one step of the exercise's formula left out or
done another way (checks/formulas.py: "split heads", "merge heads", "multi-head attention
core", "multi-head weights", "head projection", "fuse head weights"), another layout, an
axis lost.
The @reference functions compute those inputs and answers (in the student's kit they are
read from its fixtures instead, see common.py); the student's code gets copies of the
inputs, so that nothing it does in place reaches them. The messages live here, outside
the @reference functions. Shape letters: B batch, L (Lq, Lk) sequence length, h num_heads,
hd head_dim, D d_model = num_heads * head_dim.
"""
import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import (CheckFailure, Forbidden, attempt, call, check, observe, raised, revive,
                     expect_close, expect_tensor, fail, forbid_spec, passed,
                     random_inputs, reference, softmax_condition, type_name)
from .common import Intermediate, current_dims, said_later, shape_reason, step_mistakes
from . import diagnose
from .diagnose import located
from .operations import student_line
from .common import merge_heads_reference as _merge, split_heads_reference as _split
from .language import translated

SPLIT_LAYOUT = "(B, num_heads, L, head_dim)"
# Every message of this chapter's checks, one template each with named fields (str.format),
# in one place for a second language.
MESSAGES = translated(__name__) | {
    # what each exercise asks, after the shape family has named a wrong shape
    "split_shape": "Reshape to (B, L, num_heads, head_dim), then transpose(1, 2) swaps L and "
                   "num_heads, so that each head holds a whole (L, head_dim) sequence.",
    "merge_shape": "Transpose(1, 2) back to (B, L, num_heads, head_dim), then flatten num_heads "
                   "and head_dim into d_model: reshape(B, L, num_heads * head_dim).",
    "core_shape": "Merge the heads back into (B, Lq, d_model) with merge_heads.",
    "core_weights_shape": "Return every head's weights, (B, num_heads, Lq, Lk), not their "
                          "average (nor their sum, nor one head's).",
    # the checks' own messages
    "refuses_all": "split_heads(x, num_heads={num_heads}) with d_model={d_model} raised "
                   "{kind}: {message}. But {num_heads} divides {d_model}: your function refuses "
                   "every input. Raise ValueError only when d_model % num_heads != 0.",
    "not_implemented": "split_heads is not implemented yet: replace `raise "
                       "NotImplementedError()` with your code.",
    "unnamed_numbers": "{name} raised ValueError, good, but its message {message!r} does not "
                       "name {missing}. Say which numbers do not divide, e.g. 'd_model={d_model} "
                       "is not divisible by num_heads={num_heads}'.",
    "refuses_passed": "split_heads refuses d_model={d_model}, num_heads={num_heads} with "
                      "ValueError: {message}",
    "assert_raised": "{name} raised AssertionError ({error}). Raise ValueError instead: an "
                     "assert is skipped under `python -O`, and AssertionError reports a bug in "
                     "your code, not a bad argument from the caller.{where}",
    "torch_raised": "{name} raised PyTorch's RuntimeError ({error}). That message does not say "
                    "what the caller did wrong: check d_model % num_heads before reshaping and "
                    "raise ValueError naming d_model and num_heads.{where}",
    "other_raised": "{name} raised {kind}: {error}. Expected ValueError naming d_model and "
                    "num_heads.{where}",
    "no_refusal": "{name} returned {shape} without an error, but {d_model} features cannot be "
                  "cut into {num_heads} equal heads (head_dim would be {head_dim:.3g}). Check "
                  "d_model % num_heads and raise ValueError naming both.",
    "split_hint": "Reshape to (B, L, num_heads, head_dim), then transpose(1, 2).",
    "split_passed": "split_heads: (B, L, d_model) = {x} -> {layout} = {out} ({dtype}, {memory} "
                    "input), head i holds features [i*head_dim, (i+1)*head_dim)",
    "merge_hint": "Transpose(1, 2) to (B, L, num_heads, head_dim), then reshape(B, L, d_model).",
    "roundtrip_hint": "merge_heads must undo split_heads exactly.",
    "merge_passed": "merge_heads: (B, num_heads, L, head_dim) = {heads} ({memory}, {dtype}) -> "
                    "(B, L, d_model) = {out}, and merge_heads(split_heads(x)) == x",
    "not_pair": "it must return a tuple (output, weights); it returned {what}",
    "items": "{kind} of {count} items",
    "core_hint": "Split query, key and value with split_heads, run "
                 "scaled_dot_product_attention on the (B, num_heads, L, head_dim) tensors, and "
                 "merge the output with merge_heads. If split_heads or merge_heads fails its own "
                 "check, fix that first.",
    "weights_hint": "Return the softmax weights of every head, before they multiply V.",
    "core_passed": "multihead_attention_core matches nn.MultiheadAttention (identity "
                   "projections) with num_heads={num_heads}, head_dim={head_dim}, Lq={Lq}, "
                   "Lk={Lk} ({kind}, {dtype}): output (B, Lq, d_model), weights (B, num_heads, "
                   "Lq, Lk)",
    "proj_every_head": "That is every head's projection: keep only head i's rows [i*head_dim, "
                       "(i+1)*head_dim) of the weight (and of the bias).",
    "proj_all_heads": "That is every head: return only head i.",
    "proj_hint": "Head i's weight is weight[i*head_dim:(i+1)*head_dim] (and the same slice of "
                 "the bias); project x with it as nn.Linear does, x @ W^T + b.",
    "proj_passed": "head_projection: head {i} of {num_heads} (x {x}, weight {weight}, {bias} "
                   "bias, {dtype}) equals split_heads(nn.Linear(x))[:, {i}]",
    "fuse_x_at_w": "That is the x @ W matrix [W_0 | W_1 | ... ] of shape (in_features, "
                   "d_model); nn.Linear stores its transpose, (d_model, in_features).",
    "fuse_unstacked": "Right blocks, but stack them into one matrix: reshape to (num_heads * "
                      "head_dim, in_features).",
    "fuse_unchanged": "You returned the per-head matrices unchanged.",
    "fuse_hint": "Transpose each W_i to (head_dim, in_features) and stack them in head order "
                 "along the first axis.",
    "fuse_per_head": "split_heads(F.linear(x, fused)) vs x @ W_i for each head",
    "fuse_passed": "fuse_head_weights: {num_heads} matrices {shape} -> one nn.Linear weight {out} "
                   "({dtype}); projecting once and splitting equals x @ W_i for every head",
    "swapped_numbers": "{name} raised ValueError with both names and both numbers, but "
                       "its message {message!r} writes {word}={wrong}, which is {other}'s "
                       "value: the two numbers are swapped ({word} is {value}). Write each "
                       "number beside its own name, e.g. 'd_model={d_model} is not divisible "
                       "by num_heads={num_heads}'.",
    "proj_other_heads": "{name} reads the other heads' rows of the weight: head {i} must be "
                        "computed from its own block alone, rows [{start}, {stop}) of the "
                        "weight and the same slice of the bias, as a model with one matrix per "
                        "head would. In this test every other row holds NaN, and {where} came "
                        "out NaN: all d_model features were projected (or the whole weight "
                        "masked) and head {i}'s kept afterwards. Slice weight[{start}:{stop}] "
                        "(and bias[{start}:{stop}]) first, then project x with that block.",
    "proj_where_output": "your result",
    "proj_where_grad": "the gradient of your result with respect to x (the part cut away "
                       "gets a zero gradient, and 0 * NaN is NaN)",
    "refuses_divisible": "{name} raised ValueError ({message}) for d_model={d_model} and "
                         "num_heads={num_heads}, which divide: head_dim = {head_dim}. The "
                         "divisibility test refuses an input it must accept: raise only when "
                         "d_model % num_heads != 0 (the remainder of d_model divided by "
                         "num_heads).{where}",
    # labels and compositions
    "labelled": "{name}: {label}",
    "output_label": "output",
    "weights_label": "weights",
    "joined": "{first} {then}",
    "divisibility_call": "split_heads(x, num_heads={num_heads}) with d_model={d_model}",
    # the forbid's end of sentence ("you called ..., {what}; build it ...")
    "forbid_core": "which does the whole exercise for you",
    "memory_contiguous": "contiguous",
    "memory_non_contiguous": "non-contiguous",
    "memory_view": "a non-contiguous view",
    "kind_self": "self-attention",
    "kind_cross": "cross-attention",
    "with_bias": "with",
    "no_bias": "no",
    "tuple_pair": "a tuple (output, weights)",
}

# The shortcut the core exercise forbids (see common.Forbidden): decided by the grader from
# the submitted source, and caught here, in the student's Jupyter, when it runs.
FORBIDS = (Forbidden("multihead_attention_core", ("test_multihead_attention_core",),
                     r"multi_head_attention|MultiheadAttention",
                     **said_later(MESSAGES, "forbid_core"),
                     label="nn.MultiheadAttention (F.multi_head_attention_forward)"),)


# ------------------------------------------------------------------ references and helpers


def _layout(shape, sizes):
    """Name each axis of `shape`, e.g. '(B, L, num_heads, head_dim)', or None if ambiguous."""
    by_size = {}
    for name, size in sizes.items():
        by_size.setdefault(size, []).append(name)
    names = []
    for size in shape:
        candidates = by_size.get(size, [])
        if len(candidates) != 1:
            return None
        names.append(candidates[0])
    return "(" + ", ".join(names) + ")"


def _expect_layout(actual, shape, name, shape_names, sizes, known, **named):
    """_expect_shape(), its hint chosen by the wrong layout: sizes {axis name: size} name the
    axes of the shape found; known {layout string: what that layout likely means}."""
    expect_tensor(actual, name)
    return _expect_shape(actual, name, shape, shape_names,
                         known.get(_layout(tuple(actual.shape), sizes), ""), **named)


def _expect_shape(actual, name, shape, shape_names, hint, expected=None, mistakes=None):
    """expect_tensor(actual, name, shape=shape): a wrong shape is named by the shape family
    (checks/diagnose.py, expect_tensor's "In words"), then `hint` (if any) says what the
    exercise asks. With the `expected` value, the families that name a result of another
    shape (common.shape_reason: a step of the formula, `mistakes`, or the right values in
    another layout) come first."""
    reason = None if expected is None else shape_reason(actual, expected, None, shape_names,
                                                         mistakes)
    if reason:
        fail(MESSAGES["joined"].format(first=diagnose.explained(name, reason), then=hint)
             if hint else diagnose.explained(name, reason))
    try:
        return expect_tensor(actual, name, shape=shape, shape_names=shape_names)
    except CheckFailure as failure:
        if hint and isinstance(actual, torch.Tensor) and tuple(actual.shape) != tuple(shape):
            fail(MESSAGES["joined"].format(first=failure, then=hint))
        raise


def _run(function, *args, name, refused=None):
    """call_keeping(): (result, the arguments as the student's code left them). refused: the
    fields of MESSAGES["refuses_divisible"] (d_model, num_heads, head_dim) where the check's
    input is one split_heads must accept, for a ValueError it raised."""
    seen = observe(function, *args, name=name)
    # (a ValueError of Python's own, a shape unpacked into the wrong count, is no refusal)
    if refused and seen.error is not None and seen.error[0] == "ValueError" \
            and "values to unpack" not in seen.error[1]:
        fail(MESSAGES["refuses_divisible"].format(
            name=name, message=seen.error[1], **refused,
            where=located(seen.error[3] if len(seen.error) > 3 else "")))
    raised(seen.error, name)
    return revive(seen.result), [revive(a) for a in seen.args]


def _copy(tensor):
    """A copy for the student's code, with the same strides (a transposed view stays one):
    what it does in place must not reach the check's inputs (in the kit, its fixtures)."""
    return None if tensor is None else tensor.clone()


def _tokens(B, L, D, seed, dtype, contiguous):
    """Random (B, L, D) tokens; a non-contiguous view (a transposed tensor) if asked."""
    if contiguous:
        return random_inputs((B, L, D), seed=seed, dtype=dtype)[0]
    return random_inputs((B, D, L), seed=seed, dtype=dtype)[0].transpose(1, 2)


def _in_split_layout(heads):
    """A copy of `heads` (B, num_heads, L, head_dim), values unchanged, laid out in memory as
    split_heads leaves its result: a transposed view of a (B, L, num_heads, head_dim) tensor.
    (The kit's fixtures store tensors contiguous; this gives back the layout.)"""
    return heads.transpose(1, 2).clone(memory_format=torch.contiguous_format).transpose(1, 2)


# ------------------------------------------------------------------ exercise 1: split_heads
@reference
def _split_answers(x, num_heads):
    """The split of x (what a mistake gives instead: the formula's steps, step_mistakes)."""
    return _split(x, num_heads)

@check
def split_heads(split_heads, *, seed=0, B=2, L=5, num_heads=3, head_dim=4,
                dtype=torch.float32, contiguous=True):
    """split_heads(x, num_heads): (B, L, d_model) -> (B, num_heads, L, head_dim), head i
    holding features [i*head_dim, (i+1)*head_dim)."""
    D = num_heads * head_dim
    x = _tokens(B, L, D, seed, dtype, contiguous)
    expected = _split_answers(x, num_heads)
    name = "split_heads(x, num_heads)"
    out, _ = _run(split_heads, _copy(x), num_heads, name=name,
                  refused=dict(num_heads=num_heads, d_model=D, head_dim=head_dim))
    mistakes = step_mistakes("split heads", {"x": x}, current_dims(), num_heads=num_heads)
    _expect_shape(out, name, (B, num_heads, L, head_dim), SPLIT_LAYOUT, MESSAGES["split_shape"],
                  expected, mistakes)
    expect_tensor(out, name, dtype=x.dtype)
    expect_close(out, expected, name, axes=SPLIT_LAYOUT, mistakes=mistakes,
                 hint=MESSAGES["split_hint"])
    passed(MESSAGES["split_passed"].format(
        x=tuple(x.shape), layout=SPLIT_LAYOUT, out=tuple(out.shape), dtype=x.dtype,
        memory=MESSAGES["memory_contiguous" if contiguous else "memory_non_contiguous"]))


# a number written right beside a name, before or after it, with nothing but "=", ":",
# brackets and spaces between: "d_model=10", "num_heads (3)", "10 (d_model)"
_NUMBER = r"(?<![\w.])(\d+)(?!\w|\.\d)"
_BESIDE_AFTER = r"\b{word}\b[\s=:(\[]*" + _NUMBER
_BESIDE_BEFORE = _NUMBER + r"[\s(\[]*\b{word}\b"


def _beside(message, word):
    """The whole numbers written right beside `word` in `message` (see _BESIDE_AFTER)."""
    return {int(n) for pattern in (_BESIDE_AFTER, _BESIDE_BEFORE)
            for n in re.findall(pattern.format(word=re.escape(word)), message)}


def _expect_paired(message, name, values):
    """Fail when the error message writes a name beside another name's value and never
    beside its own ("d_model=3 is not divisible by num_heads=10" for d_model=10,
    num_heads=3): the exercise asks for each name with its value. values: {name: value}.
    A message that writes no number right beside a name is not judged here."""
    for word, value in values.items():
        found = _beside(message, word)
        others = {other: v for other, v in values.items() if other != word and v in found}
        if value not in found and others:
            other, wrong = next(iter(others.items()))
            fail(MESSAGES["swapped_numbers"].format(
                name=name, message=message, word=word, wrong=wrong, other=other, value=value,
                **values))


def _accepts_what_divides(split_heads, x, num_heads):
    """Fail unless split_heads splits x (B, L, d_model), cut or padded to a d_model that
    num_heads divides, without an error: a refusal earns its point only from a function that
    refuses no more than it should (one that refuses every input computes nothing)."""
    d_model = num_heads * max(x.shape[-1] // num_heads, 1)
    fits = x[..., :d_model].contiguous() if d_model <= x.shape[-1] else \
        torch.cat([x, x.new_zeros(*x.shape[:-1], d_model - x.shape[-1])], dim=-1)
    _, error = attempt(split_heads, fits, num_heads)
    if error is not None:
        fail(MESSAGES["refuses_all"].format(num_heads=num_heads, d_model=d_model,
                                            kind=error[0], message=error[1]))


@check
def split_heads_divisibility(split_heads, *, seed=0, B=2, L=5, d_model=10, num_heads=3):
    """split_heads must raise ValueError naming d_model and num_heads when they don't divide."""
    if d_model % num_heads == 0:
        raise ValueError("this check needs a d_model that num_heads does not divide")
    x = random_inputs((B, L, d_model), seed=seed)[0]
    name = MESSAGES["divisibility_call"].format(num_heads=num_heads, d_model=d_model)
    try:
        out = split_heads(_copy(x), num_heads)
    except NotImplementedError:
        fail(MESSAGES["not_implemented"])
    except ValueError as error:
        message = str(error)
        missing = [w for w in ("d_model", "num_heads", str(d_model), str(num_heads))
                   if w not in message]
        if missing:
            fail(MESSAGES["unnamed_numbers"].format(name=name, message=message,
                                                    missing=", ".join(missing),
                                                    d_model=d_model, num_heads=num_heads))
        _expect_paired(message, name, {"d_model": d_model, "num_heads": num_heads})
        _accepts_what_divides(split_heads, x, num_heads)
        passed(MESSAGES["refuses_passed"].format(d_model=d_model, num_heads=num_heads,
                                                 message=message))
        return
    except CheckFailure:
        raise
    except AssertionError as error:
        fail(MESSAGES["assert_raised"].format(name=name, error=error,
                                              where=located(student_line(error))))
    except RuntimeError as error:
        fail(MESSAGES["torch_raised"].format(name=name, error=error,
                                             where=located(student_line(error))))
    except Exception as error:
        fail(MESSAGES["other_raised"].format(name=name, kind=type(error).__name__, error=error,
                                             where=located(student_line(error))))
    shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type_name(out)
    fail(MESSAGES["no_refusal"].format(name=name, shape=shape, d_model=d_model,
                                       num_heads=num_heads, head_dim=d_model / num_heads))


# ------------------------------------------------------------------ exercise 2: merge_heads
@reference
def _split_tokens(B, L, num_heads, head_dim, seed, dtype):
    """Heads as split_heads returns them: random (B, L, d_model) tokens, split."""
    x = random_inputs((B, L, num_heads * head_dim), seed=seed, dtype=dtype)[0]
    return _split(x, num_heads)


@reference
def _merge_answers(heads):
    """The merge of heads (what a mistake gives instead: the formula's steps)."""
    return _merge(heads)

@check
def merge_heads(merge_heads, *, seed=0, B=2, L=5, num_heads=3, head_dim=4,
                dtype=torch.float32, contiguous=True):
    """merge_heads(x): (B, num_heads, L, head_dim) -> (B, L, d_model), inverse of split_heads.

    contiguous=True: heads as attention returns them (a contiguous tensor);
    False: a view, as split_heads returns it.
    """
    D = num_heads * head_dim
    if contiguous:
        heads = random_inputs((B, num_heads, L, head_dim), seed=seed, dtype=dtype)[0]
    else:
        heads = _in_split_layout(_split_tokens(B, L, num_heads, head_dim, seed, dtype))
    expected = _merge_answers(heads)
    name = "merge_heads(x)"
    out, _ = _run(merge_heads, _copy(heads), name=name)
    mistakes = step_mistakes("merge heads", {"x": heads}, current_dims())
    _expect_shape(out, name, (B, L, D), "(B, L, d_model)", MESSAGES["merge_shape"], expected,
                  mistakes)
    expect_tensor(out, name, dtype=heads.dtype)
    expect_close(out, expected, name, axes="(B, L, d_model)", mistakes=mistakes,
                 hint=MESSAGES["merge_hint"])
    # the heads as split_heads(merged heads) returns them: a view, not contiguous
    roundtrip, _ = _run(merge_heads, _in_split_layout(heads), name=name)
    expect_close(roundtrip, expected, "merge_heads(split_heads(x))", mistakes=mistakes,
                 hint=MESSAGES["roundtrip_hint"])
    passed(MESSAGES["merge_passed"].format(
        heads=tuple(heads.shape),
        memory=MESSAGES["memory_contiguous" if contiguous else "memory_view"],
        dtype=heads.dtype, out=tuple(out.shape)))


# ------------------------------------------------------------------ exercise 3: the core
@reference
def _torch_core(q, k, v, num_heads):
    """nn.MultiheadAttention with identity projections: split, attend per head, merge."""
    B, Lq, D = q.shape
    m = nn.MultiheadAttention(D, num_heads, batch_first=True, dtype=q.dtype, device=q.device)
    eye = torch.eye(D, dtype=q.dtype, device=q.device)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([eye, eye, eye]))
        m.in_proj_bias.zero_()
        m.out_proj.weight.copy_(eye)
        m.out_proj.bias.zero_()
        return m(q, k, v, need_weights=True, average_attn_weights=False)


@reference
def _core_answers(q, k, v, num_heads):
    """(expected output, expected weights); what a mistake gives instead comes from the
    formula's steps (step_mistakes: "multi-head attention core", "multi-head weights")."""
    return _torch_core(q, k, v, num_heads)

@check
def multihead_attention_core(multihead_attention_core, *, seed=0, B=2, Lq=5, Lk=None,
                             num_heads=3, head_dim=4, dtype=torch.float32):
    """multihead_attention_core(query, key, value, num_heads): projected (B, Lq, d_model),
    (B, Lk, d_model), (B, Lk, d_model) -> (output (B, Lq, d_model), weights
    (B, num_heads, Lq, Lk)), compared with nn.MultiheadAttention with identity projections."""
    Lk = Lq if Lk is None else Lk
    D = num_heads * head_dim
    q, k, v = random_inputs((B, Lq, D), (B, Lk, D), (B, Lk, D), seed=seed, dtype=dtype)
    expected_out, expected_weights = _core_answers(q, k, v, num_heads)
    name = "multihead_attention_core(query, key, value, num_heads)"
    with forbid_spec(*FORBIDS):
        result, _ = _run(multihead_attention_core, _copy(q), _copy(k), _copy(v), num_heads,
                         name=name)
    if not (isinstance(result, tuple) and len(result) == 2):
        # the kind family: what it returned instead, in words
        fail(diagnose.explained(name, diagnose.kind(name, MESSAGES["tuple_pair"], result,
                                                    (tuple,))
                                or MESSAGES["not_pair"].format(
                                    what=MESSAGES["items"].format(kind=type_name(result),
                                                                  count=len(result)))))
    out, weights = result
    if isinstance(out, torch.Tensor) and isinstance(weights, torch.Tensor):
        # the tuple family: (weights, output) returned for (output, weights)
        swapped = diagnose.item_order((out.shape, weights.shape),
                                      (expected_out.shape, expected_weights.shape),
                                      (MESSAGES["output_label"], MESSAGES["weights_label"]))
        if swapped:
            fail(diagnose.explained(name, swapped))
    output_name = MESSAGES["labelled"].format(name=name, label=MESSAGES["output_label"])
    out = expect_tensor(out, output_name)
    # the formula with one step left out or moved (checks/diagnose.py), projections the
    # identity, for a mistake that no entry of the tables names
    identity = torch.eye(D, dtype=torch.float64)
    inputs = {"query": q, "key": k, "value": v, "mask": None,
              **{f"{n}_w": identity for n in "qkvo"}}
    mistakes = step_mistakes("multi-head attention core", inputs, current_dims(),
                             num_heads=num_heads)
    weight_mistakes = step_mistakes("multi-head core weights", inputs, current_dims(),
                                    num_heads=num_heads)
    _expect_shape(out, output_name, (B, Lq, D), "(B, Lq, d_model)", MESSAGES["core_shape"],
                  expected_out, mistakes)
    expect_tensor(out, output_name, dtype=q.dtype)
    # common.py's rule: each head's weights round with its scores' magnitude, the output
    # (weighted means of the values) with the values'
    def heads(t):
        return t.detach().double().reshape(B, t.shape[1], num_heads, head_dim).transpose(1, 2)
    condition = softmax_condition(heads(q) @ heads(k).transpose(-2, -1) / math.sqrt(head_dim))
    weight_axes = "(B, num_heads, Lq, Lk)"
    expect_close(out, expected_out, output_name, mistakes=mistakes,
                 scale=v.detach().double().abs().max(), condition=condition.amax(),
                 axes="(B, Lq, d_model)", hint=MESSAGES["core_hint"],
                 # where no family names the output's mistake: the weights, if they differ
                 earlier=[Intermediate(MESSAGES["weights_label"], weights, expected_weights,
                                       q.dtype, condition, weight_axes, weight_mistakes)])
    weights_name = MESSAGES["labelled"].format(name=name, label=MESSAGES["weights_label"])
    weights = expect_tensor(weights, weights_name)
    _expect_shape(weights, weights_name, (B, num_heads, Lq, Lk), weight_axes,
                  MESSAGES["core_weights_shape"], expected_weights, weight_mistakes)
    expect_close(weights, expected_weights, weights_name, condition=condition,
                 axes=weight_axes, mistakes=weight_mistakes, hint=MESSAGES["weights_hint"])
    kind = MESSAGES["kind_self" if Lq == Lk else "kind_cross"]
    passed(MESSAGES["core_passed"].format(num_heads=num_heads, head_dim=head_dim, Lq=Lq, Lk=Lk,
                                          kind=kind, dtype=q.dtype))


# ------------------------------------------------------------------ exercise 4: head i's block
@reference
def _projection_answers(x, weight, b, i, num_heads):
    """Head i's projection (B, L, head_dim): the whole layer's, cut into heads (what a
    mistake gives instead: the formula's steps, step_mistakes("head projection"))."""
    return _split(F.linear(x, weight, b), num_heads)[:, i]   # (B, L, hd)

@check
def head_projection(head_projection, *, seed=0, B=2, L=5, in_features=None, num_heads=3,
                    head_dim=4, i=1, bias=True, dtype=torch.float32):
    """head_projection(x, weight, bias, i, num_heads): head i's queries from its own block of
    nn.Linear's weight (d_model, in_features) and bias (d_model,) -> (B, L, head_dim)."""
    D = num_heads * head_dim
    in_features = D if in_features is None else in_features
    x, weight, b = random_inputs((B, L, in_features), (D, in_features), (D,), seed=seed,
                                 dtype=dtype)
    b = b if bias else None
    expected = _projection_answers(x, weight, b, i, num_heads)
    name = f"head_projection(x, weight, bias, i={i}, num_heads={num_heads})"
    out, _ = _run(head_projection, _copy(x), _copy(weight), _copy(b), i, num_heads, name=name)
    sizes = dict(B=B, L=L, num_heads=num_heads, head_dim=head_dim, d_model=D)
    if in_features != D:
        sizes["in_features"] = in_features
    mistakes = step_mistakes("head projection", {"x": x, "weight": weight, "bias": b},
                             current_dims(), i=i, num_heads=num_heads)
    _expect_layout(out, (B, L, head_dim), name, "(B, L, head_dim)", sizes, known={
        "(B, L, d_model)": MESSAGES["proj_every_head"],
        "(B, num_heads, L, head_dim)": MESSAGES["proj_all_heads"]}, expected=expected,
        mistakes=mistakes)
    expect_tensor(out, name, dtype=x.dtype)
    expect_close(out, expected, name, mistakes=mistakes, hint=MESSAGES["proj_hint"])
    _expect_own_block(head_projection, x, weight, b, i, num_heads, expected, name)
    passed(MESSAGES["proj_passed"].format(i=i, num_heads=num_heads, x=tuple(x.shape),
                                          weight=tuple(weight.shape),
                                          bias=MESSAGES["with_bias" if bias else "no_bias"],
                                          dtype=x.dtype))


def _expect_own_block(head_projection, x, weight, b, i, num_heads, expected, name):
    """Fail unless head_projection computes head i from head i's block of the weight and of
    the bias alone, as the exercise asks ("never project all d_model features to keep a
    few"). The values cannot show it (a projection of every feature, cut afterwards, gives
    the same numbers), so the other heads' rows hold NaN here: no correct projection reads
    them, forward or backward, while one that projects all d_model features carries them
    into the gradient with respect to x (the cut's zero gradient times NaN is NaN), and
    one that masks the whole weight into its result."""
    rows_per_head = weight.shape[0] // num_heads  # (head_dim)
    start, stop = i * rows_per_head, (i + 1) * rows_per_head
    others = torch.ones(weight.shape[0], dtype=torch.bool)
    others[start:stop] = False
    x_in = x.clone().requires_grad_()
    out = call(head_projection, x_in, weight.masked_fill(others[:, None], float("nan")),
               None if b is None else b.masked_fill(others, float("nan")), i, num_heads,
               name=name)
    out = expect_tensor(out, name, shape=expected.shape)
    where = None
    if not bool(torch.isfinite(out).all()):
        where = MESSAGES["proj_where_output"]
    elif out.requires_grad:
        out.sum().backward()
        if x_in.grad is not None and not bool(torch.isfinite(x_in.grad).all()):
            where = MESSAGES["proj_where_grad"]
    if where:
        fail(MESSAGES["proj_other_heads"].format(name=name, i=i, start=start, stop=stop,
                                                 where=where))
    expect_close(out, expected, name, hint=MESSAGES["proj_hint"])


# ------------------------------------------------------------------ exercise 5: fusing
@reference
def _fuse_answers(w, x):
    """(the fused weight (d_model, in_features), the heads' projections x @ W_i side by side
    (B, L, d_model): what F.linear(x, fused) gives); what a mistake gives instead comes from
    the formula's steps (step_mistakes("fuse head weights"))."""
    num_heads, in_features, head_dim = w.shape
    expected = w.transpose(1, 2).reshape(num_heads * head_dim, in_features)
    per_head = torch.stack([x @ w[i] for i in range(num_heads)], dim=1)   # (B, h, L, hd)
    return expected, _merge(per_head)


@check
def fuse_head_weights(fuse_head_weights, *, seed=0, num_heads=3, in_features=7, head_dim=4,
                      dtype=torch.float32):
    """fuse_head_weights(w): per-head W_i (num_heads, in_features, head_dim), x @ W_i
    convention -> nn.Linear weight (num_heads * head_dim, in_features)."""
    D = num_heads * head_dim
    w, x = random_inputs((num_heads, in_features, head_dim), (2, 5, in_features), seed=seed,
                         dtype=dtype)
    expected, per_head = _fuse_answers(w, x)
    name = "fuse_head_weights(w)"
    out, _ = _run(fuse_head_weights, _copy(w), name=name)
    sizes = dict(num_heads=num_heads, in_features=in_features, head_dim=head_dim, d_model=D)
    mistakes = step_mistakes("fuse head weights", {"w": w}, current_dims())
    _expect_layout(out, (D, in_features), name, "(d_model, in_features)", sizes, known={
        "(in_features, d_model)": MESSAGES["fuse_x_at_w"],
        "(num_heads, head_dim, in_features)": MESSAGES["fuse_unstacked"],
        "(num_heads, in_features, head_dim)": MESSAGES["fuse_unchanged"]}, expected=expected,
        mistakes=mistakes)
    expect_tensor(out, name, dtype=w.dtype)
    expect_close(out, expected, name, axes="(d_model, in_features)",
                 mistakes=mistakes, hint=MESSAGES["fuse_hint"])
    # head i's outputs are features [i*head_dim, (i+1)*head_dim) of F.linear(x, fused): the
    # same numbers as comparing split_heads of it with x @ W_i, head by head
    expect_close(F.linear(x, out), per_head, MESSAGES["fuse_per_head"])
    passed(MESSAGES["fuse_passed"].format(num_heads=num_heads, shape=tuple(w.shape[1:]),
                                          out=tuple(out.shape), dtype=w.dtype))
