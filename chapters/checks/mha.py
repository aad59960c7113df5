"""Checks for chapter 3, concatenation and the output projection W_O:
output_projection_by_heads, MultiHeadAttention (structure and forward), load_from_torch,
count_parameters.

Each check builds random inputs from `seed`, runs the student's code, compares with
nn.MultiheadAttention (or a few-line float64 reference where PyTorch has no counterpart)
and, when the numbers differ, with the outputs of the classic mistakes on the same input,
so that the message names the mistake. The @reference functions compute those answers and
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
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import (FLOAT32_SQRT, MALFORMED, Forbidden, attempt, by_owner, call,
                     call_keeping, check, construct, differs, expect_close, expect_tensor,
                     export, fail, float32_sqrt, forbid_spec, generator, given, is_module,
                     judge_construct, load_weights, observe, passed, raised, random_inputs,
                     read_back, reference, refusal, revive, softmax_condition, take,
                     take_error, type_name)
from .common import current_dims, step_mistakes
from .common import merge_heads_reference as _merge, split_heads_reference as _split

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")
INTERFACE = ("The checks use: attributes d_model, num_heads, head_dim and q_proj, k_proj, "
             "v_proj, out_proj, each an nn.Linear (or anything with .weight of shape "
             "(out_features, in_features) and .bias).")
SCALE_D_MODEL = ("the scores are divided by sqrt(d_model). Each head's dot product q . k has "
                 "head_dim terms, not d_model, so divide by sqrt(head_dim).")
NO_SCALE = "the scores are not scaled: divide Q K^T by sqrt(head_dim) before the softmax."
K_FROM_Q = ("the keys were projected with q_proj: use k_proj for the keys (a copy-paste slip "
            "that no shape error reveals when query_size == key_size).")
V_FROM_K = "the values were projected with k_proj: use v_proj for the values."
KV_SWAPPED = ("keys and values are swapped: the scores compare queries with k_proj(key), "
              "and the weights average v_proj(value).")
SOFTMAX_DIM = ("the softmax normalises over the queries (dim=-2): it must normalise over the "
               "keys (dim=-1), so that each query's weights sum to 1.")
SOFTMAX_HEADS = ("the softmax normalises over the heads (dim=1): it must normalise over the keys "
                 "(dim=-1), each head separately.")
SCALE_HEAD_DIM = ("the scores are divided by head_dim instead of sqrt(head_dim): the dot product "
                  "of head_dim terms grows like sqrt(head_dim).")
SCORES_K_Q = ("you computed K Q^T instead of Q K^T: scores[i, j] must be q_i . k_j, query i "
              "against key j (q @ k.transpose(-2, -1)).")
QK_PROJ_SWAPPED = ("q_proj and k_proj are swapped: the queries are projected with q_proj, the "
                   "keys with k_proj.")
V_FROM_KEY = ("the values were computed as v_proj(key): project the `value` input, "
              "v_proj(value) (self-attention hides the slip, where key is value).")
SPLIT_INTERLEAVED = ("head i got strided features (i, i + num_heads, ...) when splitting: "
                     "reshape to (B, L, num_heads, head_dim), so that head i owns the contiguous "
                     "block [i*head_dim, (i+1)*head_dim), then transpose(1, 2).")
MERGE_INTERLEAVED = ("the heads' features are interleaved when merging (permuted to (B, Lq, "
                     "head_dim, num_heads)): transpose to (B, Lq, num_heads, head_dim) before "
                     "reshaping, so that head i fills [i*head_dim, (i+1)*head_dim).")
NO_B_O_FORWARD = ("the output bias b_O is missing: out_proj(x) = x @ out_proj.weight.T + "
                  "out_proj.bias.")
NO_IN_BIASES = ("the biases of q_proj, k_proj, v_proj are missing: call the layers (q_proj(query)) "
                "or add their .bias.")
RESIDUAL = ("the output has the query added to it (a residual connection): that belongs to the "
            "Transformer block around the layer, not to MultiHeadAttention.")
SCORES_AS_WEIGHTS = ("the weights returned are the scores before the softmax: return "
                     "softmax(Q K^T / sqrt(head_dim)), the weights each query gives the keys.")
SPLIT_MIXED = ("heads and positions are mixed when splitting: reshape to (B, L, num_heads, "
               "head_dim), then transpose(1, 2) (split_heads from chapter 2).")
MERGE_MIXED = ("heads and positions are mixed when merging: transpose (B, num_heads, Lq, "
               "head_dim) back to (B, Lq, num_heads, head_dim) before reshaping to "
               "(B, Lq, d_model) (merge_heads from chapter 2).")
NO_W_O = ("W_O is missing: your output equals the concatenated heads. Apply out_proj to the "
          "merged heads: MultiHead = Concat(head_1, ..., head_h) W_O.")
W_O_UNTRANSPOSED = ("W_O was applied without the transpose. nn.Linear stores W_O transposed: "
                    "out_proj.weight is (d_model, num_heads * head_dim), so use out_proj(x) = "
                    "x @ out_proj.weight.T + bias, and head i's block W_O^i is "
                    "out_proj.weight[:, i*head_dim:(i+1)*head_dim].T, not rows of out_proj.weight.")
W_O_BLOCK_DIAGONAL = ("each head was projected only into its own slice of the output (only the "
                      "diagonal blocks of W_O were used). W_O^i has d_model columns: every head "
                      "writes into all d_model output features, and the sum over heads mixes them.")
B_O_PER_HEAD = ("the output bias was added once per head (num_heads times): add b_O once, "
                "after summing the heads' contributions.")
# output_projection_by_heads's mistakes
INTERLEAVED_BLOCKS = (
    "head i's block of W_O must be rows [i*head_dim, (i+1)*head_dim). W_O.view(head_dim, "
    "num_heads, d_model) interleaves the rows of different heads (head i gets rows i, "
    "i + num_heads, ...); use W_O.view(num_heads, head_dim, d_model)")
FIRST_BLOCK = ("every head was multiplied by the first block W_O[:head_dim]: head i needs its own "
               "block W_O[i*head_dim:(i+1)*head_dim]")
HEADS_AVERAGED = "you averaged the heads' contributions: the formula is a sum over heads, not a mean"
CONCAT_MIXED = ("heads and positions are mixed: the concatenation must put head i's features of "
                "position l at [l, i*head_dim:(i+1)*head_dim] (transpose before reshape)")
NO_B_O = "the bias b_O is missing: add it once, after the sum over heads"
NO_W_O_MATRIX = NO_W_O.replace("Apply out_proj to the merged heads", "Multiply by W_O")
# count_parameters's mistakes
COUNT_NO_BIASES = ("the biases are missing: each of the four nn.Linear layers has d_model biases "
                   "(4 * d_model in all when bias=True)")
COUNT_W_O_PER_HEAD = ("W_O was counted once per head: there is one W_O of shape (num_heads * "
                      "head_dim, d_model) = (d_model, d_model), shared by all heads (head i uses "
                      "its row block)")
COUNT_QKV_PER_HEAD = ("W_Q, W_K, W_V were counted as full matrices per head: all heads together "
                      "have one (input size, d_model) matrix each, head i owning head_dim of its "
                      "columns")
COUNT_ONE_HEAD = ("only one head's W_Q, W_K, W_V (input size x head_dim) were counted: the heads "
                  "together hold (input size x d_model) each")
COUNT_SIZES_IGNORED = ("query_size, key_size and value_size were ignored: W_Q has query_size * "
                       "d_model weights, W_K key_size * d_model, W_V value_size * d_model")
COUNT_NO_OUT_BIAS = ("the output projection's bias is missing: W_O (out_proj) has d_model biases "
                     "too")


# ------------------------------------------------------------------ references and helpers


@reference
def _reference(P, query, key, value, h, *, scale="head_dim", q_with="q", k_with="k",
               v_with="v", v_input="value", in_bias=True, swap_kv=False, scores="qk",
               softmax_dim=-1, split="ok", merge="ok", out="ok"):
    """Multi-head attention in float64 from the weights P (nn.Linear layout); the keyword
    arguments reproduce known mistakes. Returns (output (B, Lq, D), weights (B, h, Lq, Lk))."""
    bias = (lambda n: P[n + "_b"]) if in_bias else (lambda n: None)
    v_in = value if v_input == "value" else key
    q = F.linear(query.double(), P[q_with + "_w"], bias(q_with))      # (B, Lq, D)
    k = F.linear(key.double(), P[k_with + "_w"], bias(k_with))        # (B, Lk, D)
    v = F.linear(v_in.double(), P[v_with + "_w"], bias(v_with))       # (B, Lk, D)
    if swap_kv:
        k, v = v, k
    B, Lq, D = q.shape
    hd = D // h
    if split == "ok":
        q, k, v = _split(q, h), _split(k, h), _split(v, h)            # (B, h, L, hd)
    elif split == "interleaved":  # (B, L, hd, h): head i gets features i, i + h, ...
        q, k, v = (t.reshape(B, t.shape[1], hd, h).permute(0, 3, 1, 2) for t in (q, k, v))
    else:  # reshape straight to (B, h, L, hd)
        q, k, v = (t.reshape(B, h, t.shape[1], hd) for t in (q, k, v))
    divisor = {"head_dim": math.sqrt(hd), "d_model": math.sqrt(D), "none": 1.0,
               "head_dim_plain": float(hd), "float32": float32_sqrt(hd) or math.sqrt(hd)}[scale]
    products = q @ k.transpose(-2, -1) if scores == "qk" else k @ q.transpose(-2, -1)
    weights = torch.softmax(products / divisor, dim=softmax_dim)     # (B, h, Lq, Lk)
    heads = weights @ v                                               # (B, h, Lq, hd)
    if merge == "ok":
        merged = _merge(heads)                                        # (B, Lq, h*hd)
    elif merge == "interleaved":  # (B, Lq, hd, h) flattened
        merged = heads.permute(0, 2, 3, 1).reshape(B, Lq, h * hd)
    else:
        merged = heads.reshape(B, Lq, h * hd)
    W, b = P["o_w"], P["o_b"]                                         # W: (D, h*hd) = W_O^T
    if out == "ok":
        output = F.linear(merged, W, b)
    elif out == "no_bias":
        output = F.linear(merged, W)
    elif out == "residual":
        output = F.linear(merged, W, b) + query.double()
    elif out == "missing":
        output = merged
    elif out == "untransposed":
        output = merged @ W + (0 if b is None else b)
    elif out == "block_diagonal":
        blocks = torch.zeros_like(W)
        for i in range(h):
            s = slice(i * hd, (i + 1) * hd)
            blocks[s, s] = W[s, s]
        output = F.linear(merged, blocks, b)
    elif out == "bias_per_head":
        output = F.linear(merged, W, None) + h * b
    return output, weights


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
            fail(f"MultiHeadAttention has no attribute `{attr}`. {INTERFACE}")
        for part, value in (("weight", P[name + "_w"]), ("bias", P[name + "_b"])):
            target = targets.slot(attr, part)
            if value is None:
                if target is not None:
                    fail(f"{attr}.{part} exists although bias=False: pass bias=bias to "
                         "every nn.Linear.")
                continue
            if not isinstance(target, tuple):
                fail(f"{attr}.{part} is missing although bias=True. {INTERFACE}")
            if target != tuple(value.shape):
                fail(f"{attr}.{part} has shape {target}, expected "
                     f"{tuple(value.shape)}: nn.Linear(in_features, out_features) stores its "
                     "weight as (out_features, in_features).")


def _shown(d_model, num_heads, kwargs):
    return ", ".join([str(d_model), str(num_heads)] + [f"{k}={v}" for k, v in kwargs.items()])


# ------------------------------------------------------------------ exercise 1
@reference
def _projection_answers(heads, W_O, b_O):
    """(expected output, {bug message: output}) of output_projection_by_heads, in the inputs'
    dtype: Concat(heads) @ W_O + b_O, and what the classic mistakes give instead."""
    batch, h, L, hd = heads.shape
    d_model = W_O.shape[1]
    Hd, Wd = heads.double(), W_O.double()
    bd = 0 if b_O is None else b_O.double()
    merged = _merge(Hd)                                     # (B, L, h*hd)
    expected = merged @ Wd + bd                             # (B, L, d_model)
    bugs = {
        INTERLEAVED_BLOCKS: torch.einsum("bhld,dhe->ble", Hd, Wd.reshape(hd, h, d_model)) + bd,
        FIRST_BLOCK: (Hd @ Wd[:hd]).sum(1) + bd,
        HEADS_AVERAGED: (merged @ Wd) / h + bd,
        CONCAT_MIXED: Hd.reshape(batch, L, h * hd) @ Wd + bd,
    }
    if b_O is not None:
        bugs[NO_B_O] = merged @ Wd
        bugs[B_O_PER_HEAD] = merged @ Wd + h * bd
    if d_model == h * hd:
        bugs[NO_W_O_MATRIX] = merged + bd
        blocks = torch.block_diag(*[Wd[i * hd:(i + 1) * hd, i * hd:(i + 1) * hd] for i in range(h)])
        bugs[W_O_BLOCK_DIAGONAL] = merged @ blocks + bd
    dtype = heads.dtype
    return expected.to(dtype), {m: c.to(dtype) for m, c in bugs.items()}


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
    expected, bugs = _projection_answers(heads, W_O, b_O)
    originals = [t.clone() for t in (heads, W_O) + ((b_O,) if bias else ())]
    output, inputs = call_keeping(fn, heads, W_O, b_O, name="output_projection_by_heads")
    for before, after, name in zip(originals, inputs, ("heads", "W_O", "b_O")):
        if not (isinstance(after, torch.Tensor) and torch.equal(before, after)):
            fail(f"output_projection_by_heads changed its input `{name}` in place: "
                 "compute new tensors instead (avoid +=, add_ and friends on the inputs).")
    expect_tensor(output, "output", shape=(batch, L, d_model), dtype=dtype, device=device,
                  shape_names="(B, L, d_model)")
    expect_close(output, expected, "output", bugs=bugs, dtype=dtype)
    passed(f"output_projection_by_heads: sum over {h} heads of head_i @ W_O^i"
           f"{' + b_O' if bias else ''} equals Concat(heads) @ W_O{' + b_O' if bias else ''} "
           f"(B={batch}, L={L}, head_dim={hd}, d_model={d_model}, {dtype}).")


# ------------------------------------------------------------------ exercise 2
def _structure(cls, d_model, num_heads, kwargs, bad):
    """Build cls(d_model, num_heads, **kwargs) and describe it from what the grader can read
    of it (values, never a report of the student's process): attributes d_model, num_heads,
    head_dim; each projection's weight and bias (None when there is no such attribute);
    whether two weights are one tensor (equal values: random initial weights never are);
    the parameter count; and what cls(*bad) raised."""
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


@check
def multi_head_attention_structure(cls, *, d_model=16, num_heads=4, query_size=None,
                                   key_size=None, value_size=None, bias=True):
    """The constructor: attribute names, nn.Linear shapes, biases, parameter count, and a
    ValueError when num_heads does not divide d_model."""
    kwargs = {k: v for k, v in dict(query_size=query_size, key_size=key_size,
                                    value_size=value_size).items() if v is not None}
    if not bias:
        kwargs["bias"] = False
    shown = _shown(d_model, num_heads, kwargs)
    bad_h = max(num_heads, 2)
    bad_d = 3 * bad_h + 1  # never divisible by bad_h
    answers = _structure_answers(d_model, num_heads, query_size, key_size, value_size, bias)
    data = _structure(cls, d_model, num_heads, kwargs, (bad_d, bad_h))
    judge_construct(data, f"MultiHeadAttention({shown})")
    head_dim = answers["head_dim"]
    attrs = take(data, "attrs", dict)
    for attr, value in (("d_model", d_model), ("num_heads", num_heads), ("head_dim", head_dim)):
        got = revive(attrs.get(attr))
        if differs(got, value):
            fail(f"MultiHeadAttention({shown}).{attr} is {got!r}, expected {value}. "
                 "Store d_model, num_heads and head_dim = d_model // num_heads as attributes.")
        if isinstance(got, float):  # equal in value, but view() and range() refuse a float
            fail(f"MultiHeadAttention({shown}).{attr} is {got!r}, a float: store an int "
                 "(head_dim = d_model // num_heads, with //, not /). Reshapes such as "
                 "view(B, L, num_heads, head_dim) refuse a float size.")
    sizes = {"q_proj": query_size or d_model, "k_proj": key_size or d_model,
             "v_proj": value_size or d_model, "out_proj": d_model}
    inputs = {"q_proj": "query_size", "k_proj": "key_size", "v_proj": "value_size",
              "out_proj": "d_model"}
    projections = take(data, "projections", dict)
    for attr in PROJECTIONS:
        proj = projections.get(attr)
        if proj is None:
            fail(f"MultiHeadAttention({shown}) has no attribute `{attr}`. {INTERFACE}")
        weight, b = revive(take(proj, "weight", object)), revive(take(proj, "bias", object))
        expect_tensor(weight, f"{attr}.weight")
        if tuple(weight.shape) != (d_model, sizes[attr]):
            fail(f"{attr}.weight has shape {tuple(weight.shape)}, expected "
                 f"{(d_model, sizes[attr])} = (d_model, {inputs[attr]}): {attr} maps "
                 f"{inputs[attr]} = {sizes[attr]} input features to d_model = {d_model}, and "
                 "nn.Linear(in_features, out_features) stores (out_features, in_features).")
        if bias and (not isinstance(b, torch.Tensor) or tuple(b.shape) != (d_model,)):
            fail(f"{attr}.bias should be a tensor of shape ({d_model},) when bias=True, got "
                 f"{b if b is None else tuple(b.shape) if isinstance(b, torch.Tensor) else b}.")
        if not bias and b is not None:
            fail(f"{attr}.bias exists although bias=False: pass bias=bias to every nn.Linear.")
    if take(data, "shared", bool):
        fail("two of q_proj, k_proj, v_proj, out_proj share one weight tensor: each needs its "
             "own parameters.")
    count = take(data, "count", int)
    weights, expected = answers["weights"], answers["count"]
    if count != expected:
        fail(f"MultiHeadAttention({shown}) has {count} parameters, expected {expected} = "
             f"{weights} weights + {expected - weights} biases: the four nn.Linear layers and "
             "nothing else (no per-head copies of the matrices).")
    bad = take_error(data, "bad")
    if bad is None:
        fail(f"MultiHeadAttention({bad_d}, {bad_h}) did not raise: head_dim = d_model / "
             "num_heads must be a whole number, so raise ValueError when num_heads does not "
             "divide d_model.")
    if bad[0] != "ValueError":
        if bad[0] == "NotImplementedError":
            fail("MultiHeadAttention is not implemented yet: replace `raise "
                 "NotImplementedError()` with your code.")
        fail(f"MultiHeadAttention({bad_d}, {bad_h}) raised {bad[0]}: {bad[1]}; "
             "raise ValueError when num_heads does not divide d_model (an assert disappears "
             "under python -O).")
    passed(f"MultiHeadAttention({shown}): q_proj, k_proj, v_proj, out_proj have the right "
           f"shapes, {count} parameters in all, and a ValueError for d_model % num_heads != 0.")


# forward must not hand the work to PyTorch's own implementation, which the check compares
# with (see common.Forbidden): decided by the grader from the submitted source, and caught
# here, in the student's Jupyter, when it runs.
FORBIDS = (Forbidden("MultiHeadAttention", ("test_mha_forward",),
                     r"multi_head_attention|MultiheadAttention",
                     "which does the whole exercise for you",
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
    for query, key, value in inputs:
        with forbid_spec(*FORBIDS):
            seen = observe(module, query, key, value)
        data["results"].append([seen.result, seen.error])
    return data


@reference
def _forward_answers(P, inputs, num_heads, key_size, value_size, bias, dtype, device):
    """For each (query, key, value) of `inputs`: (expected output, expected weights,
    {bug message: output}, {bug message: weights}) in `dtype`. The expected values come from
    nn.MultiheadAttention holding the weights P where it supports the sizes
    (query_size == d_model), else from the float64 _reference."""
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
    variants = {
        NO_W_O: dict(out="missing"), W_O_UNTRANSPOSED: dict(out="untransposed"),
        W_O_BLOCK_DIAGONAL: dict(out="block_diagonal"),
        SCALE_D_MODEL: dict(scale="d_model"), NO_SCALE: dict(scale="none"),
        K_FROM_Q: dict(k_with="q"), V_FROM_K: dict(v_with="k"),
        KV_SWAPPED: dict(swap_kv=True), SOFTMAX_DIM: dict(softmax_dim=-2),
        SPLIT_MIXED: dict(split="mixed"), MERGE_MIXED: dict(merge="mixed"),
        SOFTMAX_HEADS: dict(softmax_dim=1), SCALE_HEAD_DIM: dict(scale="head_dim_plain"),
        SCORES_K_Q: dict(scores="kq"), QK_PROJ_SWAPPED: dict(q_with="k", k_with="q"),
        V_FROM_KEY: dict(v_input="key"), SPLIT_INTERLEAVED: dict(split="interleaved"),
        MERGE_INTERLEAVED: dict(merge="interleaved"), RESIDUAL: dict(out="residual"),
    }
    if bias:
        variants[B_O_PER_HEAD] = dict(out="bias_per_head")
        variants[NO_B_O_FORWARD] = dict(out="no_bias")
        variants[NO_IN_BIASES] = dict(in_bias=False)
    if float32_sqrt(d_model // num_heads) is not None:  # common.py's rule (float64 runs)
        variants[FLOAT32_SQRT] = dict(scale="float32")
    answers = []
    for q_in, k_in, v_in in inputs:
        if torch_mha is not None:
            with torch.no_grad():
                expected, expected_w = torch_mha(q_in, k_in, v_in, need_weights=True,
                                                 average_attn_weights=False)
        else:
            expected, expected_w = (t.to(dtype) for t in _reference(P, q_in, k_in, v_in,
                                                                     num_heads))
        bugs = ({}, {})
        for message, variant in variants.items():
            try:
                out = _reference(P, q_in, k_in, v_in, num_heads, **variant)
            except RuntimeError:  # the mistake would have raised for these sizes
                continue
            bugs[0][message] = out[0].to(dtype)
            if not {"out", "merge", "v_with", "v_input"} & set(variant):
                # mistakes after the softmax, or in the values, leave the weights right
                bugs[1][message] = out[1].to(dtype)
        q, k = (_split(F.linear(t.double(), P[n + "_w"], P[n + "_b"]), num_heads)
                for n, t in (("q", q_in), ("k", k_in)))
        bugs[1][SCORES_AS_WEIGHTS] = (q @ k.transpose(-2, -1)
                                      / math.sqrt(d_model // num_heads)).to(dtype)
        answers.append((expected, expected_w, bugs[0], bugs[1]))
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
    kwargs = {k: v for k, v in dict(query_size=query_size, key_size=key_size,
                                    value_size=value_size).items() if v is not None}
    if not bias:
        kwargs["bias"] = False
    shown = _shown(d_model, num_heads, kwargs)
    sizes = (query_size or d_model, key_size or d_model, value_size or d_model)
    P = _random_weights(d_model, sizes, bias, seed)

    cases = []
    if sizes[0] == sizes[1] == sizes[2]:
        (x,) = random_inputs((batch, Lq, sizes[0]), seed=seed + 1, dtype=dtype, device=device)
        cases.append(("self-attention, module(x, x, x)", x, x, x))
    query, key, value = random_inputs((batch, Lq, sizes[0]), (batch, Lk, sizes[1]),
                                      (batch, Lk, sizes[2]), seed=seed + 2, dtype=dtype,
                                      device=device)
    cases.append(("cross-attention", query, key, value))
    answers = _forward_answers(P, [case[1:] for case in cases], num_heads, key_size, value_size,
                               bias, dtype, device)

    data = _forward(cls, d_model, num_heads, kwargs, P, dtype, device,
                    [case[1:] for case in cases])
    judge_construct(data, f"MultiHeadAttention({shown})")
    error = take_error(data, "to_error")
    if error is not None:
        fail(f"MultiHeadAttention({shown}).to(dtype={dtype}) raised {error[0]}: {error[1]}")
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
        if not (isinstance(result, tuple) and len(result) == 2):
            fail(f"forward ({label}) must return a tuple (output, weights), got "
                 f"{type_name(result)}" + (f" of length {len(result)}"
                                           if isinstance(result, tuple) else "") + ".")
        output, weights = result
        Lk_case = k_in.shape[1]
        expected, expected_w, output_bugs, weight_bugs = answer

        context = f" ({label}, B={batch}, Lq={q_in.shape[1]}, Lk={Lk_case}, {dtype})"
        expect_tensor(output, "output" + context, dtype=dtype, device=device)
        scale, condition = _magnitudes(P, q_in, k_in, v_in, h)
        # the formula with one step left out or moved (checks/diagnose.py), for a mistake
        # that no entry of the tables names
        inputs = {"query": q_in, "key": k_in, "value": v_in, "mask": None,
                  **{f"{n}_{part}": P[f"{n}_{part}"] for n in "qkvo" for part in "wb"}}
        expect_close(output, expected, "output" + context, bugs=output_bugs, dtype=dtype,
                     mistakes=step_mistakes("multi-head attention", inputs, current_dims(),
                                            num_heads=h),
                     scale=scale, condition=condition.amax(), axes=("B", "Lq", "d_model"),
                     hint="Compare each step with the formula: project, split, attend, merge, "
                          "W_O.")
        expect_tensor(weights, "weights" + context)
        shape = (batch, h, q_in.shape[1], Lk_case)
        if tuple(weights.shape) == (batch, q_in.shape[1], Lk_case):
            fail(f"weights{context} have shape {tuple(weights.shape)} = (B, Lq, Lk): they were "
                 "averaged over the heads (nn.MultiheadAttention's default, "
                 "average_attn_weights=True). Return the weights of every head, "
                 f"(B, num_heads, Lq, Lk) = {shape}.")
        if tuple(weights.shape) == (batch * h, q_in.shape[1], Lk_case):
            fail(f"weights{context} have shape {tuple(weights.shape)} = (B * num_heads, Lq, Lk): "
                 f"keep the head axis separate, (B, num_heads, Lq, Lk) = {shape}.")
        expect_tensor(weights, "weights" + context, shape=shape, dtype=dtype,
                      shape_names="(B, num_heads, Lq, Lk)")
        expect_close(weights, expected_w, "weights" + context, bugs=weight_bugs, dtype=dtype,
                     condition=condition, axes=("B", "num_heads", "Lq", "Lk"),
                     hint="Each head's weights are softmax(q_i k_i^T / sqrt(head_dim)) over the "
                          "keys.")
    what = ("nn.MultiheadAttention with the same weights" if sizes[0] == d_model
            else "a float64 reference (nn.MultiheadAttention needs query_size == d_model)")
    passed(f"MultiHeadAttention({shown}): outputs and per-head weights equal {what} "
           f"({', '.join(c[0] for c in cases)}; {dtype}).")


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
    holding _load_setup's values `setup` (load_weights), call fn(ours, torch_mha) and read
    both modules back by value ("built": ours held its given values before the call, so a
    replaced _Target cannot hand in torch's values itself). Then two cross-checks of
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
    result, error = attempt(fn, ours, torch_mha)
    data.update(error=error, result=None if result is None else type_name(result),
                torch_mha=read_back(torch_mha, torch_state), ours=read_back(ours, names))
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
        fail(MALFORMED.format(what="`ours` before load_from_torch ran"))
    raised(data["error"], "load_from_torch")
    if data["result"] is not None and data["is_ours"] is False:
        fail("load_from_torch must copy the weights into `ours` in place and return `ours`; "
             f"it returned a different object ({data['result']}).")
    after = data["torch_mha"]
    for name, p in torch_state.items():
        if _differs_tensor(after[name], p):
            fail(f"load_from_torch changed torch_mha.{name}: copy from it, never into it.")
    separate = "in_proj_weight" not in torch_state
    copied, shares = data["ours"], data["shares"]
    if separate:
        where = "q_proj_weight, k_proj_weight, v_proj_weight"
    else:
        where = "in_proj_weight.chunk(3)"
    w, b = answers["weight"], answers["bias"]
    order = ("in_proj_weight stacks [W_q; W_k; W_v] in this order: "
             "w_q, w_k, w_v = in_proj_weight.chunk(3)")
    for attr, n in zip(PROJECTIONS, "qkvo"):
        for part, table in (("weight", w), ("bias", b)):
            if part == "bias" and not bias:
                continue
            actual = revive(copied[f"{attr}.{part}"])
            expected = table[n].detach()
            label = f"ours.{attr}.{part}"
            if actual is None:
                fail(f"{label} is None after load_from_torch: copy the values into the existing "
                     "parameters (with torch.no_grad(): ours.q_proj.weight.copy_(w_q)).")
            expect_tensor(actual, label, shape=expected.shape, dtype=dtype,
                          shape_names="(out_features, in_features)" if part == "weight" else None)
            if torch.equal(actual.detach(), expected):
                if shares[f"{attr}.{part}"]:
                    fail(f"{label} shares memory with torch_mha's parameters: copy the values "
                         "(ours.q_proj.weight.copy_(w_q) under torch.no_grad()) so that the two "
                         "modules stay independent.")
                continue
            if torch.equal(actual.detach(), stale[f"{attr}.{part}"]):
                hint = ""
                if attr == "out_proj":
                    hint = " W_O lives in torch_mha.out_proj (weight and bias)."
                elif part == "bias":
                    hint = " in_proj_bias stacks [b_q; b_k; b_v]: chunk(3) it like in_proj_weight."
                fail(f"{label} was not copied: it still holds its old values.{hint}")
            for other, tensor in table.items():
                if other != n and tuple(tensor.shape) == tuple(actual.shape) and \
                        torch.equal(actual.detach(), tensor.detach()):
                    if part == "bias":
                        fix = "in_proj_bias stacks [b_q; b_k; b_v]: b_q, b_k, b_v = in_proj_bias.chunk(3)"
                    elif separate:
                        fix = f"use {where}, in that order"
                    else:
                        fix = order
                    fail(f"{label} holds torch's {other}-{part} instead of its {n}-{part}: the "
                         f"q, k, v order is wrong. {fix}.")
            if part == "weight" and tuple(expected.shape[::-1]) == tuple(actual.shape) and \
                    torch.equal(actual.detach(), expected.T):
                fail(f"{label} holds the transpose of torch's matrix: nn.Linear.weight, "
                     "in_proj_weight and out_proj.weight all store (out_features, in_features), "
                     "so copy them without transposing.")
            fail(f"{label} does not hold torch's values (largest error "
                 f"{(actual.detach().double() - expected.double()).abs().max().item():.3g}). "
                 + (f"With kdim or vdim != embed_dim, in_proj_weight is None and the matrices "
                    f"are {where}." if separate else f"Take the q, k, v matrices from {where}."))
    layout = ("q_proj_weight, k_proj_weight, v_proj_weight" if separate
              else "in_proj_weight (3*d_model, d_model)")
    passed(f"load_from_torch copied {layout}{', in_proj_bias' if bias else ''} and out_proj "
           f"into q_proj, k_proj, v_proj, out_proj (d_model={d_model}, kdim={ks}, vdim={vs}, "
           f"bias={bias}).")


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


@reference
def _count_answers(configs):
    """[(expected count, {bug message: what the mistake counts})] for each (d_model,
    num_heads, {keyword arguments}) of `configs`."""
    answers = []
    for d, h, kw in configs:
        qs, ks, vs = kw.get("query_size") or d, kw.get("key_size") or d, kw.get("value_size") or d
        bias = kw.get("bias", True)
        biases = 4 * d if bias else 0
        answers.append((_count_reference(d, h, **kw), {
            COUNT_NO_BIASES: d * (qs + ks + vs + d),
            COUNT_W_O_PER_HEAD: d * (qs + ks + vs) + h * d * d + biases,
            COUNT_QKV_PER_HEAD: h * d * (qs + ks + vs) + d * d + biases,
            COUNT_ONE_HEAD: (d // h) * (qs + ks + vs) + d * d + biases,
            COUNT_SIZES_IGNORED: 4 * d * d + biases,
            COUNT_NO_OUT_BIAS: d * (qs + ks + vs + d) + (3 * d if bias else 0),
        }))
    return answers


@check
def count_parameters(fn, *, seed=0):
    """fn(d_model, num_heads, *, query_size=None, key_size=None, value_size=None, bias=True)
    -> the exact number of parameters; ValueError when num_heads does not divide d_model."""
    configs = _count_configs(seed)
    rows = []
    for (d, h, kw), (expected, bugs) in zip(configs, _count_answers(configs)):
        shown = ", ".join([str(d), str(h)] + [f"{k}={v}" for k, v in kw.items()])
        got = call(fn, d, h, name=f"count_parameters({shown})", **kw)
        if isinstance(got, bool) or not isinstance(got, (int, float)) and not (
                isinstance(got, torch.Tensor) and got.numel() == 1):
            fail(f"count_parameters({shown}) returned {got!r}: return a number (an int).")
        got = got.item() if isinstance(got, torch.Tensor) else got
        qs, ks, vs = kw.get("query_size") or d, kw.get("key_size") or d, kw.get("value_size") or d
        rows.append(dict(shown=shown, got=got, expected=expected, d=d, sizes=(qs, ks, vs),
                         bias=kw.get("bias", True), bugs=bugs))
    wrong = [r for r in rows if r["got"] != r["expected"]]
    if wrong:
        for message in wrong[0]["bugs"]:
            if all(r["got"] == r["bugs"][message] for r in rows):
                fail(f"count_parameters({wrong[0]['shown']}) returned {wrong[0]['got']}, "
                     f"expected {wrong[0]['expected']}: {message}.")
        r = wrong[0]
        (qs, ks, vs), d = r["sizes"], r["d"]
        fail(f"count_parameters({r['shown']}) returned {r['got']}, expected {r['expected']} = "
             f"W_Q {qs}*{d} + W_K {ks}*{d} + W_V {vs}*{d} + W_O {d}*{d}"
             + (f" + biases 4*{d}" if r["bias"] else " (no biases)") + ".")
    for d, h in ((10, 4), (12, 5)):
        try:
            got = fn(d, h)
        except ValueError:
            continue
        except NotImplementedError:
            fail("count_parameters is not implemented yet.")
        except Exception as error:
            fail(f"count_parameters({d}, {h}) raised {type(error).__name__}: {error}; raise "
                 "ValueError when num_heads does not divide d_model.")
        fail(f"count_parameters({d}, {h}) returned {got!r}: num_heads={h} does not divide "
             f"d_model={d} (head_dim would be {d / h:g}), so raise ValueError.")
    passed(f"count_parameters is exact on {len(rows)} layer shapes (checked against "
           "nn.MultiheadAttention where it applies) and refuses d_model % num_heads != 0.")
