"""Checks for chapter 3, concatenation and the output projection W_O:
output_projection_by_heads, MultiHeadAttention (structure and forward), load_from_torch,
count_parameters.

Each check builds random inputs from `seed`, runs the student's code, compares with
nn.MultiheadAttention (or a few-line float64 reference where PyTorch has no counterpart)
and, when the numbers differ, names the mistake by its shape (checks/diagnose.py): one step
of the exercise's formula left out or done another way (checks/formulas.py: "multi-head
attention", "multi-head weights", "output projection by heads", "loaded weight",
"parameter count"), an axis lost, another layout, or a value of another kind than the
exercise documents (diagnose.kind). The @reference functions compute those answers and
draw the inputs (in the student's kit they are read from its fixtures instead, see
common.py); the messages stay in the judging code.

The MultiHeadAttention checks use only this documented interface of the student's class:
    MultiHeadAttention(d_model, num_heads, *, query_size=None, key_size=None,
                       value_size=None, bias=True)
    attributes d_model, num_heads, head_dim, and q_proj, k_proj, v_proj, out_proj, each
    with `.weight` of shape (out_features, in_features) and `.bias` (out_features,) or
    None, as nn.Linear stores them; the checks overwrite them in place with `copy_`;
    .parameters(), .to(dtype=...), .eval(), and
    forward(query, key, value) -> (output (B, Lq, d_model), weights (B, num_heads, Lq, Lk)).

Under the autograder the student's objects live in another process. The module checks judge
only values the grader can verify: it builds the module there, reads its attributes and
parameters (sent by value), loads its own weights into it (common.load_weights) and compares
its outputs on its own inputs (common.observe); no code of the checks runs there. The
loading exercise builds torch's module and the target there with common.given, and decides
"shares memory" and "returned ours" by writing into one module and reading the other back.

Shape letters: B batch, Lq/Lk query/key length, h num_heads, hd head_dim,
D d_model = num_heads * head_dim.
"""
import math
import numbers
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import (MALFORMED, CheckFailure, Forbidden, attempt, by_owner, call, close,
                     call_keeping, check, construct, differs, expect_close, expect_tensor,
                     export, fail, forbid_spec, generator, given, is_module,
                     judge_construct, load_weights, observe, passed, raised, random_inputs,
                     read_back, reference, refusal, revive, softmax_condition, take,
                     take_error, type_name, fresh_seed)
from .common import Intermediate, current_dims, expect_type, named_by_shape, step_mistakes
from .common import expect_unchanged, said_later, size_kwargs, watch_arguments
from . import diagnose
from .common import merge_heads_reference as _merge, split_heads_reference as _split
from .language import translated

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")

# Every message of this module: one template each, with named fields (a second language
# translates them here). The mistakes inside a wrong value are named by the families of
# checks/diagnose.py and the formulas' step sentences of checks/formulas.py.
MESSAGES = translated(__name__) | {
    # the documented interface, where a check loads its weights
    "interface": "The checks use: attributes d_model, num_heads, head_dim and q_proj, k_proj, "
                 "v_proj, out_proj, each an nn.Linear (or anything with .weight of shape "
                 "(out_features, in_features) and .bias).",
    "no_attribute": "MultiHeadAttention has no attribute `{attr}`. {interface}",
    "bias_without_bias": "{attr}.{part} exists although bias=False: pass bias=bias to every "
                         "nn.Linear.",
    "bias_missing": "{attr}.{part} is missing although bias=True. {interface}",
    "part_shape": "{attr}.{part} has shape {got}, expected {want}: nn.Linear(in_features, "
                  "out_features) stores its weight as (out_features, in_features).",
    "kind": "{reason}: {hint}.",
    # exercise 1
    "projection_passed": "output_projection_by_heads: sum over {h} heads of head_i @ W_O^i"
                         "{bias} equals Concat(heads) @ W_O{bias} (B={batch}, L={L}, "
                         "head_dim={hd}, d_model={d_model}, {dtype}).",
    # exercise 2: the constructor
    "int_attribute": "store d_model, num_heads and head_dim = d_model // num_heads as int "
                     "attributes (with //, not /: reshapes such as view(B, L, num_heads, "
                     "head_dim) refuse a float size)",
    "attribute_value": "MultiHeadAttention({shown}).{attr} is {got!r}, expected {want}. Store "
                       "d_model, num_heads and head_dim = d_model // num_heads as attributes.",
    "weight_shape": "{attr}.weight has shape {got}, expected {want} = (d_model, {inputs}). In "
                    "words: {words}. {attr} maps {inputs} = {size} input features to d_model "
                    "= {d_model}, and nn.Linear(in_features, out_features) stores "
                    "(out_features, in_features).",
    "bias_shape": "{attr}.bias should be a tensor of shape ({d_model},) when bias=True, got "
                  "{got}.",
    "pass_bias": "pass bias=bias to every nn.Linear",
    "shared": "two of q_proj, k_proj, v_proj, out_proj share one weight tensor: each needs its "
              "own parameters.",
    "count": "MultiHeadAttention({shown}) has {count} parameters, expected {expected} = "
             "{weights} weights + {biases} biases: the four nn.Linear layers and nothing else "
             "(no per-head copies of the matrices).",
    "not_implemented": "{name} is not implemented yet: replace `raise NotImplementedError()` "
                       "with your code.",
    "refuse": "head_dim = d_model / num_heads must be a whole number, so raise ValueError when "
              "num_heads does not divide d_model (an assert disappears under python -O){said}",
    "structure_passed": "MultiHeadAttention({shown}): q_proj, k_proj, v_proj, out_proj have "
                        "the right shapes and start as the exercise asks (xavier_uniform_ "
                        "weights{zero_biases}), {count} parameters in all, and a ValueError for "
                        "d_model % num_heads != 0.",
    # exercise 2: forward
    "to_raised": "MultiHeadAttention({shown}).to(dtype={dtype}) raised {kind}: {message}",
    "pair": "forward ({label}) must return a tuple (output, weights), got a tuple of length "
            "{length}.",
    "output_hint": "Compare each step with the formula: project, split, attend, merge, W_O.",
    "weights_hint": "Each head's weights are softmax(q_i k_i^T / sqrt(head_dim)) over the "
                    "keys.",
    "forward_passed": "MultiHeadAttention({shown}): outputs and per-head weights equal {what} "
                      "({cases}; {dtype}).",
    # exercise 3
    "not_ours": "load_from_torch must copy the weights into `ours` in place and return "
                "`ours`; it returned a different object ({result}).",
    "none_after": "{label} is None after load_from_torch: copy the values into the existing "
                  "parameters (with torch.no_grad(): ours.q_proj.weight.copy_(w_q)).",
    "shares": "{label} shares memory with torch_mha's parameters: copy the values "
              "(ours.q_proj.weight.copy_(w_q) under torch.no_grad()) so that the two modules "
              "stay independent.",
    "separate_hint": "With kdim or vdim != embed_dim, in_proj_weight is None and the matrices "
                     "are {where}.",
    "stacked_hint": "Take the q, k, v matrices from {where} (in_proj_weight stacks them along "
                    "its rows, (3 * d_model, d_model)).",
    "inexact": "{label} does not hold torch's values exactly (largest error {error:.3g}): copy "
               "them as they are. {hint}",
    "load_raised": "{failure}\n{hint}",
    "load_passed": "load_from_torch copied {layout}{biases} and out_proj into q_proj, k_proj, "
                   "v_proj, out_proj (d_model={d_model}, kdim={ks}, vdim={vs}, bias={bias}).",
    # exercise 4
    "count_int": "return the count as an int (// and *, never /, and no tensors)",
    "count_wrong": "count_parameters({shown}) returned {got}, expected {expected} = W_Q "
                   "{qs}*{d} + W_K {ks}*{d} + W_V {vs}*{d} + W_O {d}*{d}{biases}{reason}.",
    "count_refuse": "num_heads={h} does not divide d_model={d} (head_dim would be {ratio:g}), "
                    "so raise ValueError",
    "count_passed": "count_parameters is exact on {n} layer shapes (checked against "
                    "nn.MultiheadAttention where it applies) and refuses d_model % num_heads "
                    "!= 0.",
    # exercise 2: the initialisation the exercise specifies
    "init_weight": "MultiHeadAttention({shown}).{attr}.weight does not start as the exercise "
                   "asks: nn.init.xavier_uniform_ draws it uniform in [-a, a] with a = "
                   "sqrt(6 / (fan_in + fan_out)) = {bound:.3g} (fan_in = {inputs} = {fan_in}, "
                   "fan_out = d_model = {fan_out}), with standard deviation {std:.3g}; its "
                   "entries {seen}{like}. Initialise each of the four weights with "
                   "nn.init.xavier_uniform_.",
    "init_bias": "MultiHeadAttention({shown}).{attr}.bias does not start at zero as the "
                 "exercise asks: {count} of {numel} entries are not 0 (largest |b| "
                 "{largest:.3g}){like}. Initialise the biases with nn.init.zeros_.",
    "init_seen_beyond": "reach |w| = {largest:.3g}, beyond that bound",
    "init_seen_spread": "have standard deviation {got:.3g}, {ratio:.2f} times xavier_uniform_'s",
    "init_seen_mean": "have mean {mean:.3g} where xavier_uniform_'s is 0",
    "init_look": ": they look {shape}",
    "init_uniform": "uniform in [-{bound:.3g}, {bound:.3g}]",
    "init_normal": "normal with standard deviation {std:.3g}",
    "init_constant": "all equal to {value:.3g}",
    "init_like": ", which is what {initialisers} gives",
    "init_or": " or ",
    "init_linear_default": "nn.Linear's default (uniform in [-a, a] with a = 1/sqrt(fan_in) = "
                           "{bound:.3g})",
    "init_stacked": "xavier_uniform_ on a stacked (3 * d_model, {inputs}) matrix "
                    "(nn.MultiheadAttention's start for its in_proj_weight: uniform in [-a, a] "
                    "with a = sqrt(6 / ({inputs} + 3 * d_model)) = {bound:.3g})",
    "init_xavier_normal": "nn.init.xavier_normal_ (normal, standard deviation sqrt(2 / "
                          "(fan_in + fan_out)) = {std:.3g})",
    "init_kaiming_uniform": "nn.init.kaiming_uniform_ with its defaults (uniform in [-a, a] "
                            "with a = sqrt(6 / fan_in) = {bound:.3g})",
    "init_kaiming_normal": "nn.init.kaiming_normal_ with its defaults (normal, standard "
                           "deviation sqrt(2 / fan_in) = {std:.3g})",
    "init_normal_default": "nn.init.normal_ with its defaults (standard deviation 1)",
    # the words around the checks' values: documented kinds, cases, references
    "kind_alone": "{reason}.",
    "doc_output": "a tensor (B, L, d_model)",
    "doc_int_value": "an int ({value})",
    "doc_linear": "an nn.Linear",
    "doc_no_bias": "None (bias=False)",
    "doc_value_error": "a ValueError",
    "doc_pair": "a tuple (output, weights)",
    "doc_ours": "`ours`, the module it filled",
    "doc_int": "an int",
    "refuse_said": "; it said: {message}",
    "zero_biases": ", zero biases",
    "forbid_reason": "which does the whole exercise for you",
    "case_self": "self-attention, module(x, x, x)",
    "case_cross": "cross-attention",
    "against_torch": "nn.MultiheadAttention with the same weights",
    "against_float64": "a float64 reference (nn.MultiheadAttention needs query_size == d_model)",
    "count_biases": " + biases 4*{d}",
    "count_no_biases": " (no biases)",
    "count_reason": ": {reason}",
    "output_label": "output",
    "weights_label": "weights",
    "outputs": "outputs",
    "ours_before_load": "`ours` before load_from_torch ran",
    "layer_shape_axis": "layer shape",
    "cases_joiner": ", ",
}

# ------------------------------------------------------------------ references and helpers


@reference
def _reference(P, query, key, value, h):
    """Multi-head attention in float64 from the weights P (nn.Linear layout), for the sizes
    nn.MultiheadAttention does not support (query_size != d_model). Returns (output
    (B, Lq, D), weights (B, h, Lq, Lk))."""
    q, k, v = (_split(F.linear(t.double(), P[n + "_w"], P[n + "_b"]), h)   # (B, h, L, hd)
               for n, t in (("q", query), ("k", key), ("v", value)))
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return F.linear(_merge(weights @ v), P["o_w"], P["o_b"]), weights  # (B, Lq, D), (B, h, Lq, Lk)


@reference
def _random_weights(d_model, sizes, bias, seed):
    """{q_w, k_w, v_w, o_w: (D, in) float64, q_b...: (D,) or None} with non-zero biases."""
    gen = generator(seed)
    P = {}
    for name, size in zip("qkvo", (*sizes, d_model)):
        P[name + "_w"] = torch.randn(d_model, size, generator=gen, dtype=torch.float64) / math.sqrt(size)
        P[name + "_b"] = (0.5 * torch.randn(d_model, generator=gen, dtype=torch.float64)
                          if bias else None)
    return P


def _load_into(module, P):
    """Copy P into module.q_proj ... out_proj in place where the target is a tensor of the
    right shape (common.load_weights); returns what it found there, for _judge_load_into."""
    return load_weights(module, {attr: {"weight": P[name + "_w"], "bias": P[name + "_b"]}
                                 for attr, name in zip(PROJECTIONS, "qkvo")})


def _judge_load_into(targets, P):
    """Fail unless _load_into could copy every weight of P (the documented interface);
    `targets` is what it found (a common.Loaded, validated when made)."""
    for attr, name in zip(PROJECTIONS, "qkvo"):
        if not targets.has(attr):
            fail(MESSAGES["no_attribute"].format(attr=attr, interface=MESSAGES["interface"]))
        for part, value in (("weight", P[name + "_w"]), ("bias", P[name + "_b"])):
            target = targets.slot(attr, part)
            if value is None:
                if target is not None:
                    fail(MESSAGES["bias_without_bias"].format(attr=attr, part=part))
                continue
            if not isinstance(target, tuple):
                fail(MESSAGES["bias_missing"].format(attr=attr, part=part,
                                                     interface=MESSAGES["interface"]))
            if target != tuple(value.shape):
                fail(MESSAGES["part_shape"].format(attr=attr, part=part, got=target,
                                                   want=tuple(value.shape)))


def _shown(d_model, num_heads, kwargs):
    return ", ".join([str(d_model), str(num_heads)] + [f"{k}={v}" for k, v in kwargs.items()])


# ------------------------------------------------------------------ exercise 1
@reference
def _projection_answer(heads, W_O, b_O):
    """Concat(heads) @ W_O + b_O (B, L, d_model), output_projection_by_heads's answer,
    computed in float64 and returned in the inputs' dtype."""
    bias = 0 if b_O is None else b_O.double()
    return (_merge(heads.double()) @ W_O.double() + bias).to(heads.dtype)


def _expect_kind(what, documented, value=None, kinds=(), raised=None, hint=""):
    """Fail with the kind family's sentence (diagnose.kind) and `hint` when `value` (or the
    exception `raised`) is not of the documented kind."""
    reason = diagnose.kind(what, documented, value, kinds, raised)
    if reason:
        fail(MESSAGES["kind"].format(reason=reason, hint=hint) if hint
             else MESSAGES["kind_alone"].format(reason=reason))


@check
def output_projection_by_heads(fn, *, seed=0, batch=2, num_heads=4, L=5, head_dim=3,
                               d_model=None, bias=True, dtype=torch.float32, device="cpu"):
    """fn(heads (B, h, L, hd), W_O (h*hd, d_model), b_O (d_model,) or None) -> (B, L, d_model)
    equals Concat(heads) @ W_O + b_O."""
    h, hd = num_heads, head_dim
    d_model = h * hd if d_model is None else d_model
    heads, W_O, b_O = random_inputs((batch, h, L, hd), (h * hd, d_model), (d_model,),
                                    seed=seed, dtype=dtype, device=device)
    b_O = b_O if bias else None
    expected = _projection_answer(heads, W_O, b_O)
    # (the inputs must not change: call_keeping fails when they did)
    # b_O=None, the default the exercise promises, is left to it (not passed) without a bias
    output, _ = call_keeping(fn, heads, W_O, *([b_O] if bias else []),
                             name="output_projection_by_heads")
    _expect_kind("output_projection_by_heads(heads, W_O, b_O)", MESSAGES["doc_output"],
                 output, (torch.Tensor,))
    # the formula's steps (checks/formulas.py) name a mistake in one of them, also one that
    # gives another shape (a sum over the positions)
    mistakes = step_mistakes("output projection by heads",
                             {"heads": heads, "W_O": W_O, "b_O": b_O}, current_dims(),
                             num_heads=h)
    named_by_shape(output, expected, "output", dtype, ("B", "L", "d_model"), mistakes)
    expect_tensor(output, "output", shape=(batch, L, d_model), dtype=dtype, device=device,
                  shape_names="(B, L, d_model)")
    expect_close(output, expected, "output", dtype=dtype, axes=("B", "L", "d_model"),
                 mistakes=mistakes)
    passed(MESSAGES["projection_passed"].format(h=h, bias=" + b_O" if bias else "", batch=batch,
                                                L=L, hd=hd, d_model=d_model, dtype=dtype))


# ------------------------------------------------------------------ exercise 2
def _structure(cls, d_model, num_heads, kwargs, bad, seed):
    """Build cls(d_model, num_heads, **kwargs) right after torch.manual_seed(seed) where the
    student's code runs (the initial weights are judged: the grader chooses their draws), and
    describe it from what the grader can read of it (values, never a report of the
    student's process): attributes d_model, num_heads, head_dim; each projection's weight
    and bias (None when there is no such attribute); whether two weights are one tensor
    (equal values: random initial weights never are); the parameter count; and what
    cls(*bad) raised."""
    with torch.random.fork_rng():  # (in the student's Jupyter: their random stream is kept)
        given("torch:manual_seed", seed)
        module, data = construct(cls, d_model, num_heads, **kwargs)
    if module is None:
        return data
    data["attrs"] = {a: export(getattr(module, a, None)) for a in ("d_model", "num_heads",
                                                                   "head_dim")}
    data["projections"], weights = {}, []
    for attr in PROJECTIONS:
        proj = getattr(module, attr, None)
        data["projections"][attr] = None if proj is None else {
            part: export(getattr(proj, part, None)) for part in ("weight", "bias")}
        weight = (data["projections"][attr] or {}).get("weight")
        if isinstance(weight, torch.Tensor):
            weights.append(weight)
    data["shared"] = any(a.shape == b.shape and bool((a == b).all())
                         for i, a in enumerate(weights) for b in weights[i + 1:])
    data["count"] = sum(p.numel() for p in module.parameters())
    data["bad"] = refusal(cls, *bad)
    return data


@reference
def _structure_answers(d_model, num_heads, query_size, key_size, value_size, bias):
    """{"head_dim", "weights": the weights' count, "count": all parameters} of
    MultiHeadAttention(d_model, num_heads, ...)."""
    return {"head_dim": d_model // num_heads,
            "weights": _count_reference(d_model, num_heads, query_size, key_size, value_size,
                                        bias=False),
            "count": _count_reference(d_model, num_heads, query_size, key_size, value_size,
                                      bias)}


# ------------------------------------------------------------------ the initialisation
# The exercise specifies the layer's start: nn.init.xavier_uniform_ on each of the four
# weights (uniform in [-a, a] with a = sqrt(6 / (fan_in + fan_out)), so a standard deviation
# of a / sqrt(3)) and zeros for the biases. A weight is judged as n samples of that
# distribution: every entry within the bound, and a root mean square and a mean within
# INIT_SIGMAS standard errors of xavier_uniform_'s. (The mean square of n uniform draws has
# a relative standard error of 0.894 / sqrt(n), so its root 0.447 / sqrt(n); for normal
# draws 0.707 / sqrt(n); a mean's is the standard deviation / sqrt(n).) At 7 standard
# errors a correct layer, however it is written (nn.Linear then re-initialised, its own
# Parameters, views of one fused tensor), fails less than once in 10^11 draws, and the
# grader seeds the construction besides. A layer started another way stays far outside at
# d_model = 16 (the visible test: 256 entries per weight, a tolerance of 20% on the
# spread): nn.Linear's default spreads 0.58 times as far, xavier_uniform_ on
# nn.MultiheadAttention's stacked (3 * d_model, d_model) matrix 0.71 times, and a normal
# draw of the same spread passes the bound in about 21 of its 256 entries.
INIT_SIGMAS = 7
UNIFORM_RMS_ERROR, NORMAL_RMS_ERROR = 0.447, 0.707   # times 1 / sqrt(n), see above
PEAKED = 2.4  # mean(x^4) / mean(x^2)^2: 1.8 for uniform draws, 3 for normal ones


def _spread(values):
    """(root mean square, mean, largest |entry|, mean(x^4) / mean(x^2)^2) of a tensor's
    entries, in float64: how far they spread around 0 and whether they look uniform."""
    x = values.detach().double().flatten()
    square = x.pow(2).mean().item()
    peaked = x.pow(4).mean().item() / square ** 2 if square > 0 else 0.0
    return math.sqrt(square), x.mean().item(), x.abs().max().item(), peaked


def _looks(values):
    """The message's words for the distribution the entries of `values` look drawn from."""
    rms, _, largest, peaked = _spread(values)
    flat = values.detach().double().flatten()
    if bool((flat == flat[0]).all()):
        return MESSAGES["init_constant"].format(value=flat[0].item())
    if peaked > PEAKED:
        return MESSAGES["init_normal"].format(std=rms)
    return MESSAGES["init_uniform"].format(bound=largest)


def _initialisers(fan_in, fan_out, inputs, stacked):
    """[(sentence, "uniform" or "normal", its bound or standard deviation)]: the standard ways
    of starting a linear layer's weight (fan_in inputs, fan_out outputs) other than the
    exercise's; `stacked`: also xavier_uniform_ on nn.MultiheadAttention's stacked
    (3 * fan_out, fan_in) matrix, for an input projection (`inputs`: its input size's name)."""
    found = [(MESSAGES["init_linear_default"].format(bound=1 / math.sqrt(fan_in)), "uniform",
              1 / math.sqrt(fan_in))]
    if stacked:
        bound = math.sqrt(6 / (fan_in + 3 * fan_out))
        found.append((MESSAGES["init_stacked"].format(inputs=inputs, bound=bound), "uniform",
                      bound))
    for key, kind, size in (("init_xavier_normal", "normal", math.sqrt(2 / (fan_in + fan_out))),
                            ("init_kaiming_uniform", "uniform", math.sqrt(6 / fan_in)),
                            ("init_kaiming_normal", "normal", math.sqrt(2 / fan_in)),
                            ("init_normal_default", "normal", 1.0)):
        found.append((MESSAGES[key].format(bound=size, std=size), kind, size))
    return found


def _like(values, initialisers):
    """", which is what X gives" for the initialisers whose distribution the entries of `values` fit
    within the check's tolerance (the same INIT_SIGMAS standard errors), "" for none."""
    rms, _, largest, peaked = _spread(values)
    kind = "normal" if peaked > PEAKED else "uniform"
    error = (NORMAL_RMS_ERROR if kind == "normal" else UNIFORM_RMS_ERROR) / math.sqrt(
        values.numel())
    fits = [sentence for sentence, their_kind, size in initialisers
            if their_kind == kind and (kind == "normal" or largest <= size * (1 + 1e-6))
            and abs(rms / (size / math.sqrt(3) if kind == "uniform" else size) - 1)
            <= INIT_SIGMAS * error]
    return MESSAGES["init_like"].format(initialisers=MESSAGES["init_or"].join(fits)) \
        if fits else ""


def _judge_init(projections, shown, sizes, inputs, d_model, bias):
    """Fail unless each projection's weight (read back from the module the grader built
    after its own seed; shapes already checked) looks drawn by nn.init.xavier_uniform_ and,
    with bias=True, each bias is zeros; the message names the parameter, what it holds and
    which standard initialiser gives that."""
    for attr in PROJECTIONS:
        weight = revive(projections[attr]["weight"])
        fan_in, n = sizes[attr], weight.numel()
        bound = math.sqrt(6 / (fan_in + d_model))
        std = bound / math.sqrt(3)
        rms, mean, largest, _ = _spread(weight)
        if not largest <= bound * (1 + 1e-6):   # (a NaN too)
            seen = MESSAGES["init_seen_beyond"].format(largest=largest)
        elif abs(rms / std - 1) > INIT_SIGMAS * UNIFORM_RMS_ERROR / math.sqrt(n):
            seen = MESSAGES["init_seen_spread"].format(got=rms, ratio=rms / std)
        elif abs(mean) > INIT_SIGMAS * std / math.sqrt(n):
            seen = MESSAGES["init_seen_mean"].format(mean=mean)
        else:
            continue
        look = MESSAGES["init_look"].format(shape=_looks(weight))
        like = _like(weight, _initialisers(fan_in, d_model, inputs[attr], attr != "out_proj"))
        fail(MESSAGES["init_weight"].format(shown=shown, attr=attr, bound=bound,
                                            inputs=inputs[attr], fan_in=fan_in,
                                            fan_out=d_model, std=std, seen=seen + look,
                                            like=like))
    for attr in PROJECTIONS if bias else ():
        b = revive(projections[attr]["bias"]).detach()
        if bool((b == 0).all()):
            continue
        default = 1 / math.sqrt(sizes[attr])
        like = _like(b, [(MESSAGES["init_linear_default"].format(bound=default), "uniform",
                          default)])
        fail(MESSAGES["init_bias"].format(shown=shown, attr=attr, count=int((b != 0).sum()),
                                          numel=b.numel(), largest=b.abs().max().item(),
                                          like=like))


@check
def multi_head_attention_structure(cls, *, d_model=16, num_heads=4, query_size=None,
                                   key_size=None, value_size=None, bias=True, seed=0):
    """The constructor: attribute names, nn.Linear shapes, biases, parameter count, a
    ValueError when num_heads does not divide d_model, and the initialisation the exercise
    specifies (xavier_uniform_ weights, zero biases), built after torch.manual_seed(seed)."""
    kwargs = size_kwargs(query_size, key_size, value_size, bias)
    shown = _shown(d_model, num_heads, kwargs)
    bad_h = max(num_heads, 2)
    bad_d = 3 * bad_h + 1  # never divisible by bad_h
    answers = _structure_answers(d_model, num_heads, query_size, key_size, value_size, bias)
    data = _structure(cls, d_model, num_heads, kwargs, (bad_d, bad_h), fresh_seed(seed))
    judge_construct(data, f"MultiHeadAttention({shown})")
    head_dim = answers["head_dim"]
    attrs = take(data, "attrs", dict)
    for attr, value in (("d_model", d_model), ("num_heads", num_heads), ("head_dim", head_dim)):
        got = revive(attrs.get(attr))
        # an int: a float equal in value still fails view() and range()
        _expect_kind(f"MultiHeadAttention({shown}).{attr}",
                     MESSAGES["doc_int_value"].format(value=value), got,
                     (numbers.Integral,),
                     hint=MESSAGES["int_attribute"])
        if differs(got, value):
            fail(MESSAGES["attribute_value"].format(shown=shown, attr=attr, got=got, want=value))
    sizes = {"q_proj": query_size or d_model, "k_proj": key_size or d_model,
             "v_proj": value_size or d_model, "out_proj": d_model}
    inputs = {"q_proj": "query_size", "k_proj": "key_size", "v_proj": "value_size",
              "out_proj": "d_model"}
    projections = take(data, "projections", dict)
    for attr in PROJECTIONS:
        proj = projections.get(attr)
        if proj is None:
            _expect_kind(f"MultiHeadAttention({shown}).{attr}", MESSAGES["doc_linear"],
                         kinds=(nn.Linear,),
                         raised="AttributeError",
                         hint=MESSAGES["no_attribute"].format(
                             attr=attr, interface=MESSAGES["interface"]).rstrip(".。"))
        weight, b = revive(take(proj, "weight", object)), revive(take(proj, "bias", object))
        expect_tensor(weight, f"{attr}.weight")
        want = (d_model, sizes[attr])
        if tuple(weight.shape) != want:
            words = diagnose.wrong_shape(tuple(weight.shape), want, current_dims(),
                                         ("d_model", inputs[attr]))
            fail(MESSAGES["weight_shape"].format(attr=attr, got=tuple(weight.shape), want=want,
                                                 inputs=inputs[attr], words=words,
                                                 size=sizes[attr], d_model=d_model))
        if bias and (not isinstance(b, torch.Tensor) or tuple(b.shape) != (d_model,)):
            fail(MESSAGES["bias_shape"].format(
                attr=attr, d_model=d_model,
                got=tuple(b.shape) if isinstance(b, torch.Tensor) else b))
        if not bias:
            _expect_kind(f"{attr}.bias", MESSAGES["doc_no_bias"], b, (type(None),),
                         hint=MESSAGES["pass_bias"])
    if take(data, "shared", bool):
        fail(MESSAGES["shared"])
    _judge_init(projections, shown, sizes, inputs, d_model, bias)
    count = take(data, "count", int)
    weights, expected = answers["weights"], answers["count"]
    if count != expected:
        fail(MESSAGES["count"].format(shown=shown, count=count, expected=expected,
                                      weights=weights, biases=expected - weights))
    bad = take_error(data, "bad")
    if bad is not None and bad[0] == "NotImplementedError":
        fail(MESSAGES["not_implemented"].format(name="MultiHeadAttention"))
    _expect_kind(f"MultiHeadAttention({bad_d}, {bad_h})", MESSAGES["doc_value_error"],
                 raised=None if bad is None else bad[0],
                 hint=MESSAGES["refuse"].format(
                     said="" if bad is None else MESSAGES["refuse_said"].format(message=bad[1])))
    passed(MESSAGES["structure_passed"].format(
        shown=shown, count=count, zero_biases=MESSAGES["zero_biases"] if bias else ""))


# forward must not hand the work to PyTorch's own implementation, which the check compares
# with (see common.Forbidden): decided by the grader from the submitted source, and caught
# here, in the student's Jupyter, when it runs.
FORBIDS = (Forbidden("MultiHeadAttention", ("test_mha_forward",),
                     r"multi_head_attention|MultiheadAttention",
                     **said_later(MESSAGES, "forbid_reason"),
                     label="nn.MultiheadAttention (F.multi_head_attention_forward)"),)


def _forward(cls, d_model, num_heads, kwargs, P, dtype, device, inputs):
    """Build cls(d_model, num_heads, **kwargs), move it to dtype and device, load the weights
    P and call it on each (query (B, Lq, query_size), key (B, Lk, key_size), value (B, Lk,
    value_size)) of `inputs`, PyTorch's attention forbidden. Returns the construction's data,
    "to_error", "targets" (_load_into) and "results": [[result, error]] per input: outputs
    on the grader's inputs of the grader's weights, sent back by value."""
    module, data = construct(cls, d_model, num_heads, **kwargs)
    if module is None:
        return data
    module, data["to_error"] = attempt(lambda: module.to(dtype=dtype, device=device).eval())
    if data["to_error"] is not None:
        return data
    data["targets"] = _load_into(module, P)
    data["results"] = []
    for index, (query, key, value) in enumerate(inputs):
        with forbid_spec(*FORBIDS):
            # without a mask, as the exercise documents it (chapter 4 gives masks); the first
            # call passes mask=None, which the signature promises to take
            given_mask = {"mask": None} if index == 0 else {}
            seen = observe(module, query, key, value, **given_mask)
        data["results"].append([seen.result, seen.error])
    # the first input once more: an eval-mode forward gives the same result again
    with forbid_spec(*FORBIDS):
        data["again"] = observe(module, *inputs[0], mask=None).result
    return data


@reference
def _forward_answers(P, inputs, num_heads, key_size, value_size, bias, dtype, device):
    """For each (query, key, value) of `inputs`: (expected output (B, Lq, D), expected
    weights (B, h, Lq, Lk)) in `dtype`, from nn.MultiheadAttention holding the weights P where
    it supports the sizes (query_size == d_model), else from the float64 _reference. What a
    mistake gives instead comes from the formula's steps (step_mistakes)."""
    d_model = P["q_w"].shape[0]
    torch_mha = None
    if P["q_w"].shape[1] == d_model:
        torch_mha = nn.MultiheadAttention(d_model, num_heads, bias=bias, kdim=key_size,
                                          vdim=value_size, batch_first=True, dtype=dtype,
                                          device=device)
        with torch.no_grad():
            ws = [P[n + "_w"].to(dtype=dtype, device=device) for n in "qkv"]
            if torch_mha.in_proj_weight is not None:
                torch_mha.in_proj_weight.copy_(torch.cat(ws))
            else:
                for dst, w in zip((torch_mha.q_proj_weight, torch_mha.k_proj_weight,
                                   torch_mha.v_proj_weight), ws):
                    dst.copy_(w)
            torch_mha.out_proj.weight.copy_(P["o_w"])
            if bias:
                torch_mha.in_proj_bias.copy_(torch.cat([P[n + "_b"] for n in "qkv"]))
                torch_mha.out_proj.bias.copy_(P["o_b"])
        torch_mha.eval()
    answers = []
    for q_in, k_in, v_in in inputs:
        if torch_mha is not None:
            with torch.no_grad():
                expected, expected_w = torch_mha(q_in, k_in, v_in, need_weights=True,
                                                 average_attn_weights=False)
        else:
            expected, expected_w = (t.to(dtype) for t in _reference(P, q_in, k_in, v_in,
                                                                     num_heads))
        answers.append((expected, expected_w))
    return answers


def _magnitudes(P, query, key, value, h):
    """For common.py's tolerance rule: (the size of the terms the output is summed from,
    the softmax_condition() of each head's scores). The output is W_O times weighted means
    of the projected values plus b_O: its terms are up to max|V| |W_O[i, j]|."""
    q, k, v = (F.linear(t.detach().double().cpu(), P[n + "_w"], P[n + "_b"])
               for n, t in (("q", query), ("k", key), ("v", value)))
    B, Lq, D = q.shape
    q, k = (t.reshape(B, t.shape[1], h, D // h).transpose(1, 2) for t in (q, k))
    bias = 0.0 if P["o_b"] is None else P["o_b"].abs().max()
    scale = v.abs().max() * P["o_w"].abs().sum(dim=1).max() + bias
    return scale, softmax_condition(q @ k.transpose(-2, -1) / math.sqrt(D // h))


@check
def multi_head_attention(cls, *, seed=0, batch=2, Lq=5, Lk=7, d_model=16, num_heads=4,
                         query_size=None, key_size=None, value_size=None, bias=True,
                         dtype=torch.float32, device="cpu"):
    """forward against nn.MultiheadAttention holding the same weights (loaded by the check):
    self-attention (query is key is value) and cross-attention (Lq != Lk), outputs and
    per-head weights. With query_size != d_model (which nn.MultiheadAttention does not
    support) the reference is a float64 implementation in this module."""
    kwargs = size_kwargs(query_size, key_size, value_size, bias)
    shown = _shown(d_model, num_heads, kwargs)
    sizes = (query_size or d_model, key_size or d_model, value_size or d_model)
    P = _random_weights(d_model, sizes, bias, seed)

    cases = []
    if sizes[0] == sizes[1] == sizes[2]:
        (x,) = random_inputs((batch, Lq, sizes[0]), seed=seed + 1, dtype=dtype, device=device)
        cases.append((MESSAGES["case_self"], x, x, x))
    query, key, value = random_inputs((batch, Lq, sizes[0]), (batch, Lk, sizes[1]),
                                      (batch, Lk, sizes[2]), seed=seed + 2, dtype=dtype,
                                      device=device)
    cases.append((MESSAGES["case_cross"], query, key, value))
    answers = _forward_answers(P, [case[1:] for case in cases], num_heads, key_size, value_size,
                               bias, dtype, device)

    data = _forward(cls, d_model, num_heads, kwargs, P, dtype, device,
                    [case[1:] for case in cases])
    judge_construct(data, f"MultiHeadAttention({shown})")
    error = take_error(data, "to_error")
    if error is not None:
        fail(MESSAGES["to_raised"].format(shown=shown, dtype=dtype, kind=error[0],
                                          message=error[1]))
    _judge_load_into(take(data, "targets", dict), P)
    results = take(data, "results", list)
    if len(results) != len(cases):
        fail(MALFORMED.format(what="results"))

    h = num_heads
    for (label, q_in, k_in, v_in), item, answer in zip(cases, results, answers):
        if not (isinstance(item, (list, tuple)) and len(item) == 2):
            fail(MALFORMED.format(what="results"))
        raised(item[1], f"forward ({label})")
        result = revive(item[0])
        _expect_kind(f"forward ({label})", MESSAGES["doc_pair"], result, (tuple,))
        if len(result) != 2:
            fail(MESSAGES["pair"].format(label=label, length=len(result)))
        output, weights = result
        Lk_case = k_in.shape[1]
        expected, expected_w = answer
        if isinstance(output, torch.Tensor) and isinstance(weights, torch.Tensor):
            # the tuple family: (weights, output) returned for (output, weights)
            swapped = diagnose.item_order((output.shape, weights.shape),
                                          (expected.shape, expected_w.shape),
                                          (MESSAGES["output_label"], MESSAGES["weights_label"]))
            if swapped:
                fail(diagnose.explained(f"forward ({label})", swapped))

        context = f" ({label}, B={batch}, Lq={q_in.shape[1]}, Lk={Lk_case}, {dtype})"
        output_name = MESSAGES["output_label"] + context
        weights_name = MESSAGES["weights_label"] + context
        expect_tensor(output, output_name, dtype=dtype, device=device)
        again = revive(data.get("again")) if item is results[0] else None
        if isinstance(again, tuple) and again:   # the randomness family: a second call
            reason = diagnose.unrepeatable(MESSAGES["outputs"], output, again[0],
                                           lambda a, b: close(a, b, dtype))
            if reason:
                fail(diagnose.explained("forward" + context, reason))
        scale, condition = _magnitudes(P, q_in, k_in, v_in, h)
        # the formula with one step left out or moved (checks/diagnose.py), for a mistake
        # that no entry of the tables names
        inputs = {"query": q_in, "key": k_in, "value": v_in, "mask": None,
                  **{f"{n}_{part}": P[f"{n}_{part}"] for n in "qkvo" for part in "wb"}}
        output_mistakes = step_mistakes("multi-head attention", inputs, current_dims(),
                                        num_heads=h)
        weight_mistakes = step_mistakes("multi-head weights", inputs, current_dims(),
                                        num_heads=h)
        axes = ("B", "num_heads", "Lq", "Lk")
        # where no family names the output's mistake: the weights, if they differ first
        expect_close(output, expected, output_name, dtype=dtype,
                     mistakes=output_mistakes, scale=scale, condition=condition.amax(),
                     axes=("B", "Lq", "d_model"), hint=MESSAGES["output_hint"],
                     earlier=[Intermediate(MESSAGES["weights_label"], weights, expected_w, dtype,
                                           condition, axes, weight_mistakes)])
        expect_tensor(weights, weights_name)
        shape = (batch, h, q_in.shape[1], Lk_case)
        if weights.dim() + 1 == len(shape):  # the fewer-axes family: averaged, flattened
            expect_close(weights, expected_w, weights_name, dtype=dtype,
                         axes=("B", "num_heads", "Lq", "Lk"))
        expect_tensor(weights, weights_name, shape=shape, dtype=dtype,
                      shape_names="(B, num_heads, Lq, Lk)")
        expect_close(weights, expected_w, weights_name, dtype=dtype,
                     condition=condition, axes=axes, mistakes=weight_mistakes,
                     hint=MESSAGES["weights_hint"])
    what = MESSAGES["against_torch" if sizes[0] == d_model else "against_float64"]
    passed(MESSAGES["forward_passed"].format(shown=shown, what=what, dtype=dtype,
                                             cases=MESSAGES["cases_joiner"].join(
                                                 c[0] for c in cases)))


# ------------------------------------------------------------------ exercise 3
class _Target(nn.Module):
    """A stand-in for the student's MultiHeadAttention: the attributes `attrs` (d_model,
    num_heads, head_dim) and the four nn.Linear of the interface, holding `state`
    ({"q_proj.weight": tensor, "q_proj.bias": tensor, ...}, no bias entries without biases)."""

    def __init__(self, attrs, state):
        super().__init__()
        for name, value in attrs.items():
            setattr(self, name, value)
        for attr in PROJECTIONS:
            weight, bias = state[f"{attr}.weight"], state.get(f"{attr}.bias")
            linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None,
                               dtype=weight.dtype)
            with torch.no_grad():
                linear.weight.copy_(weight)
                if bias is not None:
                    linear.bias.copy_(bias)
            setattr(self, attr, linear)


@reference
def _load_setup(seed, d_model, num_heads, key_size, value_size, bias, dtype):
    """The inputs of load_from_torch's check: {"torch": the parameters of an
    nn.MultiheadAttention with random weights (named_parameters' names and order), "ours":
    the stale values of the target's projections, which no correct copy leaves behind,
    "attrs": the target's d_model, num_heads, head_dim}."""
    torch_mha = nn.MultiheadAttention(d_model, num_heads, bias=bias, kdim=key_size,
                                      vdim=value_size, batch_first=True, dtype=dtype)
    gen = generator(seed)
    with torch.no_grad():
        for p in torch_mha.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
    ours = {}
    for attr, size in zip(PROJECTIONS, (d_model, key_size or d_model, value_size or d_model,
                                        d_model)):
        shapes = [("weight", (d_model, size))] + ([("bias", (d_model,))] if bias else [])
        for part, shape in shapes:
            ours[f"{attr}.{part}"] = (10 + torch.randn(shape, generator=gen,
                                                       dtype=torch.float64)).to(dtype)
    return {"torch": {n: p.detach().clone() for n, p in torch_mha.named_parameters()},
            "ours": ours,
            "attrs": {"d_model": d_model, "num_heads": num_heads,
                      "head_dim": d_model // num_heads}}


@reference
def _load_answers(torch_state):
    """{"weight": {"q", "k", "v", "o": tensor}, "bias": {...} or {}}: what load_from_torch
    must copy into q_proj, k_proj, v_proj, out_proj from nn.MultiheadAttention's parameters
    `torch_state`."""
    if "in_proj_weight" in torch_state:
        weights = dict(zip("qkv", torch_state["in_proj_weight"].chunk(3)))
    else:
        weights = {n: torch_state[f"{n}_proj_weight"] for n in "qkv"}
    weights["o"] = torch_state["out_proj.weight"]
    biases = {}
    if "in_proj_bias" in torch_state:
        biases = dict(zip("qkv", torch_state["in_proj_bias"].chunk(3)))
        biases["o"] = torch_state["out_proj.bias"]
    return {"weight": weights, "bias": biases}


def _load_run(fn, setup, key_size, value_size, bias):
    """Build, where the student's code runs (given()), an nn.MultiheadAttention and a _Target
    holding _load_setup's values `setup` (load_weights), call fn(ours, torch_mha) (torch_mha
    must come out as it went in: common.expect_unchanged fails here if not) and read ours
    back by value ("built": ours held its given values before the call, so a replaced
    _Target cannot hand in torch's values itself). Then two cross-checks of
    behaviour, each a write of the grader's into one module read back from the other:
    "shares" {name: ours' tensor changed when torch_mha's parameters were overwritten}, and
    "is_ours": writing into what fn returned reached ours (None when it returned None, False
    when it returned no module)."""
    torch_state, attrs = setup["torch"], setup["attrs"]
    dtype = torch_state["out_proj.weight"].dtype
    torch_mha = given("torch.nn:MultiheadAttention", attrs["d_model"], attrs["num_heads"],
                      bias=bias, kdim=key_size, vdim=value_size, batch_first=True, dtype=dtype)
    load_weights(torch_mha, by_owner(torch_state))
    ours = given("checks.mha:_Target", attrs, setup["ours"])
    names = [f"{attr}.{part}" for attr in PROJECTIONS for part in ("weight", "bias")]
    # ours must hold what it was given before fn runs (not, say, torch_mha's values already)
    before = read_back(ours, names)
    data = {"built": all(not _differs_tensor(before[n], v) for n, v in setup["ours"].items())}
    # a plain call: what fn returns must stay itself (a module of the student's process) for
    # the "is_ours" cross-check; the in-place effects are read back from the two modules
    watched = watch_arguments((ours, torch_mha), {}, may_change=(ours,))  # ours: its job
    result, error = attempt(fn, ours, torch_mha)
    if error is None:   # torch_mha must be left as it was, its mode too
        expect_unchanged(watched, fn, "load_from_torch", [ours, torch_mha], {})
    data.update(error=error, result=None if result is None else type_name(result),
                ours=read_back(ours, names))
    # (a) shared memory, by behaviour: new values into torch_mha, ours read again
    load_weights(torch_mha, by_owner({n: p + 1.0 for n, p in torch_state.items()}))
    again = read_back(ours, names)
    data["shares"] = {name: _differs_tensor(again[name], data["ours"][name]) for name in names}
    # (a) "returned ours", by behaviour: a marker written into the result, read from ours
    data["is_ours"] = None if result is None else False
    if result is not None and is_module(result):
        marker = {name: torch.full(tuple(value.shape), 7.0, dtype=value.dtype)
                  for name, value in again.items() if isinstance(value, torch.Tensor)}
        load_weights(result, by_owner(marker))
        seen = read_back(ours, marker)
        data["is_ours"] = None if not marker else all(
            isinstance(seen[n], torch.Tensor) and torch.equal(seen[n], m)
            for n, m in marker.items())
    return data


def _differs_tensor(a, b):
    """Two values read back differ: not both tensors of one shape with equal entries."""
    return not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.shape == b.shape and torch.equal(a, b))


@check
def load_from_torch(fn, *, seed=0, d_model=16, num_heads=4, key_size=None, value_size=None,
                    bias=True, dtype=torch.float32):
    """fn(ours, torch_mha) copies nn.MultiheadAttention's weights into ours in place."""
    ks, vs = key_size or d_model, value_size or d_model
    setup = _load_setup(seed, d_model, num_heads, key_size, value_size, bias, dtype)
    torch_state, stale = setup["torch"], setup["ours"]  # what the student's copies start from
    answers = _load_answers(torch_state)
    data = _load_run(fn, setup, key_size, value_size, bias)
    if not data["built"]:
        fail(MALFORMED.format(what=MESSAGES["ours_before_load"]))
    separate = "in_proj_weight" not in torch_state
    if separate:
        where = "q_proj_weight, k_proj_weight, v_proj_weight"
    else:
        where = "in_proj_weight.chunk(3)"
    hint = MESSAGES["separate_hint" if separate else "stacked_hint"].format(where=where)
    try:  # the error in the exercise's words, then where torch_mha holds what to copy
        raised(data["error"], "load_from_torch")
    except CheckFailure as failure:
        fail(MESSAGES["load_raised"].format(failure=str(failure).rstrip(), hint=hint))
    if data["result"] is None:  # the documented return: `ours`, the module it filled
        expect_type(None, torch.nn.Module, "load_from_torch(ours, torch_mha)",
                    documented=MESSAGES["doc_ours"])
    if data["result"] is not None and data["is_ours"] is False:
        fail(MESSAGES["not_ours"].format(result=data["result"]))
    copied, shares = data["ours"], data["shares"]
    w, b = answers["weight"], answers["bias"]
    for attr, n in zip(PROJECTIONS, "qkvo"):
        for part, table in (("weight", w), ("bias", b)):
            if part == "bias" and not bias:
                continue
            actual = revive(copied[f"{attr}.{part}"])
            expected = table[n].detach()
            label = f"ours.{attr}.{part}"
            # the loading's steps (checks/formulas.py): which tensor it took, whether it
            # copied; asked on every run, so that the kit's fixtures hold them too
            mistakes = step_mistakes("loaded weight",
                                     {**torch_state, "stale": stale[f"{attr}.{part}"]},
                                     current_dims(), name=n, part=part)
            if actual is None:
                fail(MESSAGES["none_after"].format(label=label))
            expect_tensor(actual, label, shape=expected.shape, dtype=dtype,
                          shape_names="(out_features, in_features)" if part == "weight" else None)
            if torch.equal(actual.detach(), expected):
                if shares[f"{attr}.{part}"]:
                    fail(MESSAGES["shares"].format(label=label))
                continue
            expect_close(actual, expected, label, dtype=dtype, hint=hint, mistakes=mistakes)
            fail(MESSAGES["inexact"].format(
                label=label, hint=hint,
                error=(actual.detach().double() - expected.double()).abs().max().item()))
    layout = ("q_proj_weight, k_proj_weight, v_proj_weight" if separate
              else "in_proj_weight (3*d_model, d_model)")
    passed(MESSAGES["load_passed"].format(layout=layout, biases=", in_proj_bias" if bias else "",
                                          d_model=d_model, ks=ks, vs=vs, bias=bias))


# ------------------------------------------------------------------ exercise 4
@reference
def _count_reference(d_model, num_heads, query_size=None, key_size=None, value_size=None,
                     bias=True):
    """Trusted count: nn.MultiheadAttention's own numel where it applies (on the meta device,
    so no memory is used), else the four matrices and four biases written out."""
    qs, ks, vs = query_size or d_model, key_size or d_model, value_size or d_model
    if qs == d_model:
        m = nn.MultiheadAttention(d_model, num_heads, bias=bias, kdim=ks, vdim=vs, device="meta")
        return sum(p.numel() for p in m.parameters())
    return d_model * (qs + ks + vs + d_model) + (4 * d_model if bias else 0)


@reference
def _count_configs(seed):
    """[(d_model, num_heads, {keyword arguments})]: the layer shapes count_parameters is
    asked about (fixed for seed 0, drawn from `seed` otherwise)."""
    if seed == 0:
        return [(512, 8, {}), (512, 1, {}), (16, 4, {}),
                (12, 3, dict(query_size=5, key_size=7, value_size=9)),
                (8, 2, dict(bias=False)), (256, 4, dict(query_size=64, key_size=128))]
    rng = random.Random(seed)
    configs = []
    for _ in range(6):
        h = rng.choice([1, 2, 3, 4, 6, 8])
        d = h * rng.randint(2, 40)
        kw = {}
        for name in ("query_size", "key_size", "value_size"):
            if rng.random() < 0.5:
                kw[name] = rng.randint(1, 300)
        if rng.random() < 0.4:
            kw["bias"] = False
        configs.append((d, h, kw))
    configs.append((rng.choice([96, 144, 240]), 2 * rng.randint(2, 6), {}))
    return configs


def _count_inputs(configs):
    """The layer shapes of `configs` ([(d_model, num_heads, {keyword arguments})]) as the
    inputs of formulas.parameter_count_formula: {"d_model", "num_heads", "query_size",
    "key_size", "value_size", "bias" (1 or 0)}, each a float64 tensor (one entry a shape)."""
    columns = {name: [] for name in ("d_model", "num_heads", "query_size", "key_size",
                                     "value_size", "bias")}
    for d, h, kw in configs:
        for name, value in (("d_model", d), ("num_heads", h),
                            ("query_size", kw.get("query_size") or d),
                            ("key_size", kw.get("key_size") or d),
                            ("value_size", kw.get("value_size") or d),
                            ("bias", int(kw.get("bias", True)))):
            columns[name].append(value)
    return {name: torch.tensor(values, dtype=torch.float64) for name, values in columns.items()}


@check
def count_parameters(fn, *, seed=0):
    """fn(d_model, num_heads, *, query_size=None, key_size=None, value_size=None, bias=True)
    -> the exact number of parameters, an int; ValueError when num_heads does not divide
    d_model."""
    configs = _count_configs(seed)
    shown, got = [], []
    for d, h, kw in configs:
        shown.append(", ".join([str(d), str(h)] + [f"{k}={v}" for k, v in kw.items()]))
        value = call(fn, d, h, name=f"count_parameters({shown[-1]})", **kw)
        # an int (numpy's integers are ints too); a float, a bool or a tensor is not
        _expect_kind(f"count_parameters({shown[-1]})", MESSAGES["doc_int"], value,
                     (numbers.Integral,),
                     hint=MESSAGES["count_int"])
        got.append(int(value))
    expected = [_count_reference(d, h, **kw) for d, h, kw in configs]
    # every layer shape at once: a mistake in one step of the formula fits all of them (asked
    # on every run, so that the kit's fixtures hold it too)
    mistakes = step_mistakes("parameter count", _count_inputs(configs), {})
    wrong = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    if wrong:
        i = wrong[0]
        actual, answer = (torch.tensor(v, dtype=torch.float64) for v in (got, expected))
        reason = diagnose.explain(actual, answer, torch.equal, actual != answer, {},
                                  (MESSAGES["layer_shape_axis"],), mistakes)
        (d, h, kw) = configs[i]
        qs, ks, vs = kw.get("query_size") or d, kw.get("key_size") or d, kw.get("value_size") or d
        fail(MESSAGES["count_wrong"].format(
            shown=shown[i], got=got[i], expected=expected[i], qs=qs, ks=ks, vs=vs, d=d,
            biases=(MESSAGES["count_biases"].format(d=d) if kw.get("bias", True)
                    else MESSAGES["count_no_biases"]),
            reason=MESSAGES["count_reason"].format(reason=reason) if reason else ""))
    for d, h in ((10, 4), (12, 5)):
        value, error = attempt(fn, d, h)
        if error is not None and error[0] == "NotImplementedError":
            fail(MESSAGES["not_implemented"].format(name="count_parameters"))
        _expect_kind(f"count_parameters({d}, {h})", MESSAGES["doc_value_error"], value,
                     raised=None if error is None else error[0],
                     hint=MESSAGES["count_refuse"].format(h=h, d=d, ratio=d / h))
    passed(MESSAGES["count_passed"].format(n=len(configs)))
