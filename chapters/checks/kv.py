"""Checks of chapter 6: heads that share keys and values, and decoding with a cache.

repeat_kv, GroupedQueryAttention (structure and forward),
count_gqa_parameters, count_kv_cache_bytes, KVCache, decoding_causal_mask and
cached_attention. A wrong value that no entry of the tables names is named by the families
of diagnose.py, with the exercise's formula as steps (formulas.py's chapter 6 section)
where it has one.

The float64 references of attention computed chunk by chunk (_ref_run, with the rotation
_ref_rotate) and the decoding loop (_decoding) serve chapter 7's rotary checks too
(checks/positions.py), whose rotary mistakes the formula names
(formulas.cached_attention_formula with rotary=True).

The expected outputs come from float64 references in this module (checked against
F.scaled_dot_product_attention(enable_gqa=True) where it applies); the outputs of the
catalogued mistakes on the same inputs name a wrong answer. Decoding checks run the
student's code one chunk at a time (a prompt, then one position per step) and compare
every step with the rows of full causal attention over the whole sequence.

Interfaces the checks use:
    GroupedQueryAttention(d_model, num_heads, num_kv_heads, *, bias=True), attributes
    d_model, num_heads, num_kv_heads, head_dim and the nn.Linear q_proj, k_proj, v_proj,
    out_proj (overwritten in place by the checks); forward(x, mask=None) ->
    (B, L, d_model).
    KVCache(): len(cache), cache.keys / cache.values, append(keys, values) -> (keys, values).
    decoding_causal_mask(L_new, T) -> (L_new, T) bool.
    cached_attention(attn, x_new, cache), where attn has q_proj, k_proj, v_proj, out_proj,
    num_heads, head_dim and, for grouped
    heads, num_kv_heads (chapter 3's layer has none: then num_kv_heads = num_heads).

The checks reach the student's objects only through common's runtime: construct(), calls
and observe() of their functions and methods, load_weights(), attribute reads and len() by
value, and given() for the course's own objects the student's code is handed (the decoding
checks' attn). Every verdict compares those values with answers
computed here; nothing the student's process reports about itself awards a point.

Shape letters: B batch, L length, T total length (cached + new), h num_heads,
g num_kv_heads, G = h // g, hd head_dim, D d_model = h * hd.
"""
import math
import numbers
import random
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import (attempt, by_owner, call, check, close, construct, differs, expect_close,
                     expect_tensor, fail, fresh_seed, generator, given, judge_construct,
                     load_weights, observe, passed, raised, random_inputs, reference, refusal,
                     revive, softmax_condition, type_name)
from .common import current_dims, expect_type, named_by_shape, step_mistakes
from .operations import CheckFailure
from . import common, diagnose
from .language import translated

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")

# ----------------------------------------------------------------------------- messages
ROTARY_BASE = 10000.0  # rotary's default base (Su et al.; chapter 7's apply_rotary's default)

# Every message of this module: one template each, with named fields (str.format), in one
# place for a second language. Code (function calls, shapes, dimension names) stays as it is.
MESSAGES = translated(__name__) | {
    # the interface and its shapes
    "interface": "The checks use: attributes d_model, num_heads, num_kv_heads, head_dim and "
                 "q_proj, k_proj, v_proj, out_proj, each an nn.Linear.",
    "kv_full_size": "k_proj and v_proj map d_model to d_model, as in chapter 3: with shared "
                    "heads they map d_model to num_kv_heads * head_dim, the only place where "
                    "grouped-query attention saves parameters.",
    "head_dim_from_kv": "head_dim must be d_model // num_heads (the query heads), not "
                        "d_model // num_kv_heads.",
    # shared by several checks
    "raised": "{name} raised {kind}: {message}",
    "documented_int": "an int",
    "len_after": "len(cache) after {shown}",
    "cached_positions": "number of cached positions",
    # repeat_kv
    "repeat_name": "repeat_kv(kv of shape {shape}, num_heads={num_heads})",
    "repeat_hint": "Query head i uses key/value head i // (num_heads // num_kv_heads).",
    "repeat_passed": "repeat_kv: {shape} -> {out}, query head i reads key/value head "
                     "i // {group} ({dtype})",
    # GroupedQueryAttention: structure
    "attribute": "attribute {attr}",
    "no_attribute": "GroupedQueryAttention({shown}) has no attribute `{attr}`. {interface}",
    "bias_shape": "{attr}.bias should be a tensor of shape ({size},) when bias=True.",
    "bias_exists": "{attr}.bias exists although bias=False: pass bias=bias to every nn.Linear.",
    "count_layer": "GroupedQueryAttention({shown}) has {count} parameters, expected "
                   "{expected}: the four nn.Linear layers and nothing else.",
    "did_not_raise": "did not raise",
    "raised_what": "raised {kind}: {message}",
    "gqa_not_implemented": "GroupedQueryAttention is not implemented yet: replace `raise "
                           "NotImplementedError()` with your code.",
    "gqa_no_value_error": "GroupedQueryAttention{bad} {what}: num_kv_heads={num_kv_heads} does "
                          "not divide num_heads={num_heads}, so the query heads cannot be split "
                          "into equal groups; raise ValueError.",
    "structure_passed": "GroupedQueryAttention({shown}): q_proj {q}, k_proj and v_proj {kv}, "
                        "out_proj {out}, {count} parameters, and a ValueError when "
                        "num_kv_heads does not divide num_heads",
    # GroupedQueryAttention: forward
    "weight_shape": "{name} has shape {got}, expected {want}. {interface}",
    "label_no_mask": "no mask",
    "label_causal": "causal mask (L, L)",
    "label_padding_causal": "padding & causal mask (B, 1, L, L)",
    "forward_name": "forward ({label})",
    "forward_output": "output ({label}, {shown}, {dtype})",
    "forward_hint": "Project, split into num_heads query heads and num_kv_heads key/value "
                    "heads, repeat_kv, attend per head, merge, out_proj.",
    "kind_mha": "chapter 3's layer",
    "kind_mqa": "multi-query attention",
    "kind_gqa": "grouped-query attention",
    "forward_passed": "GroupedQueryAttention({shown}) ({kind}): forward equals "
                      "F.scaled_dot_product_attention(enable_gqa=True) with the same weights, "
                      "without a mask, causal, and padding & causal ({dtype})",
    # project_heads and attend_heads
    "not_triple": "project_heads(attn, x) must return the tuple (q, k, v), got {got}.",
    "project_name": "{what} of project_heads(attn, x of shape {shape})",
    "project_hint": "{what} = attn.{what}_proj(x), viewed as (B, L, {heads}, head_dim) and "
                    "transposed to (B, heads, L, head_dim).",
    "no_kv_heads": "no num_kv_heads",
    "project_passed": "project_heads ({layer}, {dtype}): q {q}, k and v {kv}",
    "label_decoding_mask": "the decoding mask (L, T)",
    "attend_name": "attend_heads(attn, q, k, v, mask) with {label}",
    "attend_hint": "repeat_kv the keys and values, attend per head (scale by sqrt(head_dim), "
                   "mask, softmax over the keys), merge_heads, attn.out_proj.",
    "attend_passed": "attend_heads (num_heads={num_heads}, num_kv_heads={num_kv_heads}, "
                     "{dtype}): L={L} queries over T={T} keys, with the decoding mask and "
                     "without a mask",
    # the counts
    "count_bug": "{shown} returned {got}, expected {expected}: {message}",
    "count_named": "{shown} = {got} (expected {expected})",
    "count_formula": "{shown} returned {got}, expected {expected}. {formula}",
    "params_formula": "W_Q and W_O are d_model x d_model, W_K and W_V d_model x "
                      "(num_kv_heads * head_dim), plus one bias per output feature.",
    "count_not_implemented": "count_gqa_parameters is not implemented yet.",
    "count_no_value_error": "count_gqa_parameters({d_model}, {num_heads}, {num_kv_heads}) must "
                            "raise ValueError: num_kv_heads={num_kv_heads} does not divide "
                            "num_heads={num_heads}.",
    "count_passed": "count_gqa_parameters is exact on {count} configurations and refuses "
                    "num_heads % num_kv_heads != 0",
    "bytes_formula": "Per token: a key and a value (2) of head_dim numbers, for each "
                     "key/value head of each layer, bytes_per_value bytes each.",
    "bytes_passed": "count_kv_cache_bytes is exact on {count} configurations",
    # KVCache
    "cache_not_empty": "len(KVCache()) is {length}: an empty cache has 0 positions.",
    "keys_missing": "a new KVCache must have keys = None (nothing cached yet), got no "
                    "attribute keys.",
    "keys_not_none": "a new KVCache must have keys = None (nothing cached yet), got {got}.",
    "append_shown": "append #{index} (keys {shape})",
    "no_append": "KVCache has no method append(keys, values): the checks use len(cache), "
                 "cache.keys, cache.values and cache.append.",
    "append_sizes": "The cached and the new keys differ in length only, along the sequence "
                    "axis: concatenate along the sequence axis, dim=-2.",
    "append_not_pair": "{shown} must return the tuple (keys, values) of everything cached, got "
                       "{got}.",
    "cache_none": "{what} is None after {shown}: append must keep what it returns in the cache "
                  "(self.{attr} = ...), or the next call starts from nothing.",
    "after": "{what} after {shown}",
    "only_new": "{what} after {shown} holds only the new positions: concatenate them to the "
                "cached ones (torch.cat along the sequence axis, dim=-2) and return everything "
                "cached.",
    "append_shape": "{what} after {shown} has shape {got}, expected {want} = (B, num_kv_heads, "
                    "T, head_dim): concatenate along the sequence axis, dim=-2.",
    "append_order": "{what} after {shown} does not hold the cached positions in order: old ones "
                    "first, then the new ones.",
    "only_old": "{what} after {shown} holds only the positions cached before this call: the "
                "new ones were not appended (torch.cat of the cached and the new along the "
                "sequence axis, dim=-2, kept in the cache and returned).",
    "length_axis": " (keys.shape[-2], the sequence axis)",
    "cache_passed": "KVCache: empty at first, append concatenates along the sequence axis "
                    "(lengths {lengths} -> {total} positions) and returns everything cached",
    # decoding_causal_mask
    "mask_hint": "Query i sits at position T - L_new + i and may attend to keys "
                 "0 .. T - L_new + i.",
    "mask_passed": "decoding_causal_mask: bottom-right aligned for (L_new, T) in {sizes}",
    # cached_attention (and chapter 7's rotary_cached_attention)
    "layer_chapter3": "chapter 3's MultiHeadAttention (no num_kv_heads attribute)",
    "the_prompt": "the prompt",
    "step_at": "step {index} (position {start})",
    "call_at": "call {index} (positions {start}..{end})",
    "decoding_one": "{name}(attn, x_new of 1 position, cache{options}), {what}",
    "decoding_many": "{name}(attn, x_new of {n} positions, cache{options}), {what}",
    "appended_twice": " (the new keys and values were appended twice)",
    "not_appended": " (the new keys and values were not appended to the cache)",
    "output_of": "the output of {shown}",
    "decoding_hint": "It must equal the row of full causal attention over the whole sequence "
                     "at the same positions.",
    "attention_plain": "attention",
    "attention_rotary": "rotary attention",
    "decoding_passed": "{name} ({layer}, {dtype}): a prompt of {prompt}, then {more} more calls "
                       "({rest} positions), every output equals full causal {attention} over "
                       "the {total} positions, and the cache grows by the new positions",
    # what an error of the student's code means in this chapter (_chapter_reason)
    "in_this_chapter": "\nIn this exercise: {reason}.",
    "heads_getattr": "chapter 3's MultiHeadAttention, which the checks hand to your function as "
                     "well, has no attribute num_kv_heads (all its heads are key/value heads): "
                     "read it as getattr(attn, \"num_kv_heads\", attn.num_heads), as the "
                     "exercise says",
    "heads_view_kv": "the keys or values are split into num_heads = {h} heads instead of "
                     "num_kv_heads = {g}: the tensor viewed holds num_kv_heads * head_dim = "
                     "{width} features per position (k_proj and v_proj give num_kv_heads "
                     "heads; only the queries have num_heads)",
    "heads_view_q": "the queries are split into num_kv_heads = {g} heads instead of num_heads "
                    "= {h}: the tensor viewed holds num_heads * head_dim = {width} features per "
                    "position (q_proj gives num_heads heads; only the keys and values have "
                    "num_kv_heads)",
    "keys_new_only": "the {n} new queries attend over T = {T} keys (the {start} cached positions "
                     "and the {n} new ones), and the error meets a size of {n} = L_new there: "
                     "a mask or a length taken from the new positions alone where T must count "
                     "every key (k.shape[-2] of what append returns, decoding_causal_mask(L_new, "
                     "T))",
    "keys_before_append": "the {n} new queries attend over T = {T} keys (the {start} cached "
                          "positions and the {n} new ones), and the error meets a size of "
                          "{start}, the positions cached before this call: a length read "
                          "before the append (len(cache) or cache.keys before cache.append); T "
                          "counts every key after it (k.shape[-2] of what append returns)",
    "mask_transposed": "the mask has shape (T, L_new) = ({T}, {n}) where the scores end in "
                       "(L_new, T) = ({n}, {T}): decoding_causal_mask's two sizes in the other "
                       "order (decoding_causal_mask(L_new, T): the new queries first, then every "
                       "key)",
    "length_from_batch": "the {n} new positions meet a size of {batch} = batch there: likely a "
                         "number of positions read off the batch axis (x_new.shape[0]) where "
                         "the new positions are x_new.shape[1] = L_new",
    "empty_cache_none": "this is the first call, when the cache is still empty: a KVCache's "
                        "keys and values are None until the first append, so the number of "
                        "positions cached before the call is len(cache) (0 now), and the keys "
                        "to attend over are what cache.append returns",
    "keys_values_mixed": "the sizes {hd} and {hv} are the last axes of the keys ({hd} = "
                         "head_dim) and of the values (the check gives the values {hv} "
                         "features, so that they cannot be mistaken for keys): keys were joined "
                         "to the values, or values to the keys (self.values = torch.cat of the "
                         "cached values and the new values)",
    # a second cache (kv_cache)
    "cache_shared": "a second KVCache(), made after {total} positions were appended to a "
                    "first one, has len {length} and keys {keys}: the caches share their state. "
                    "A new cache starts empty: keep keys and values on the instance, set in "
                    "__init__ (self.keys = None), not on the class (a class attribute) or in a "
                    "global, which every cache shares.",
    # the counts: the configurations where only a mode is wrong (_judge_counts)
    "count_group": "it is right in every configuration except exactly those {where} ({count} "
                   "of {total}): look at what your code does differently there",
    "group_default": "that leave bytes_per_value at its default (the signature's "
                     "bytes_per_value=2)",
    "group_bias_false": "with bias=False (no biases)",
    "group_bias_true": "with bias=True (a bias in each of the four nn.Linear)",
    "group_mha": "with num_kv_heads == num_heads (chapter 3's layer)",
    "group_mqa": "with num_kv_heads == 1 (multi-query attention)",
    "count_int_hint": "A count divides with // (a / gives a float even where it divides).",
    # GroupedQueryAttention's key/value projections of another width (gqa_structure)
    "kv_width": "k_proj and v_proj map d_model to num_kv_heads * head_dim = {g} * {hd} = {kv} "
                "features, head_dim = d_model // num_heads = {hd} being the size of every head, "
                "query or key/value.",
}


# ----------------------------------------------------------------------------- references
@reference
def _weights(d_model, num_heads, num_kv_heads, bias, seed, dtype):
    """{"q_proj.weight": (D, D), "k_proj.weight": (g * hd, D), ..., "*.bias"}: random weights
    with non-zero biases, rounded to `dtype` (the student's module holds them in dtype)."""
    gen = generator(seed)
    kv = num_kv_heads * (d_model // num_heads)
    state = {}
    for attr, out in zip(PROJECTIONS, (d_model, kv, kv, d_model)):
        state[f"{attr}.weight"] = (torch.randn(out, d_model, generator=gen, dtype=torch.float64)
                                   / math.sqrt(d_model)).to(dtype)
        if bias:
            state[f"{attr}.bias"] = (0.5 * torch.randn(out, generator=gen,
                                                       dtype=torch.float64)).to(dtype)
    return state


@reference
def _ref_rotate(x, positions, base=ROTARY_BASE):
    """Rotary position embedding in float64, halves layout: pair (i, i + hd/2) of the row at
    position p turns by p * base ** (-2i / hd)."""
    x = x.double()
    hd = x.shape[-1]
    P = hd // 2
    exponent = torch.arange(P, dtype=torch.float64) / hd * 2
    angles = positions.double()[:, None] * base ** (-exponent)               # (L, P)
    cos, sin = angles.cos(), angles.sin()
    a, b = x[..., :P], x[..., P:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)           # (..., L, hd)


@reference
def _ref_run(state, x, h, g, chunks, mask="causal", rotary=False, base=ROTARY_BASE):
    """Attention of x (B, L, D) under the weights `state`, in float64, computed chunk by chunk
    as a KV cache does (chunks: the lengths of the successive calls; rotary: with rotary
    positions of that base on queries and keys). mask: "causal"
    (bottom-right aligned in each call), None or an explicit boolean mask for a single chunk.
    Returns (output (B, L, D), the softmax_condition of the scores, largest per row, (B, L),
    the largest |value| per row of outputs, (B, L))."""
    W = {name: t.double() for name, t in state.items()}

    def project(name, t, heads):
        y = F.linear(t, W[f"{name}.weight"], W.get(f"{name}.bias"))
        return y.view(t.shape[0], t.shape[1], heads, -1).transpose(1, 2)   # (B, heads, n, hd)

    x = x.double()
    B, L, D = x.shape
    hd, G = D // h, h // g
    keys = values = None
    outs, conditions, sizes, start = [], [], [], 0
    for n in chunks:
        xc = x[:, start:start + n]
        q, k, v = project("q_proj", xc, h), project("k_proj", xc, g), project("v_proj", xc, g)
        if rotary:
            pos = torch.arange(start, start + n)
            q, k = _ref_rotate(q, pos, base=base), _ref_rotate(k, pos, base=base)
        keys = k if keys is None else torch.cat([keys, k], 2)                 # (B, g, T, hd)
        values = v if values is None else torch.cat([values, v], 2)
        T = keys.shape[2]
        kk, vv = keys.repeat_interleave(G, 1), values.repeat_interleave(G, 1)  # (B, h, T, hd)
        scores = q @ kk.transpose(-2, -1) / math.sqrt(hd)
        if isinstance(mask, str):
            allowed = torch.ones(n, T, dtype=torch.bool).tril(T - n)
        else:
            allowed = mask
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(scores, dim=-1)                               # (B, h, n, T)
        if allowed is not None:  # a query with no key allowed: zero weights, as in chapter 4
            weights = weights.masked_fill(~allowed, 0.0)
        heads = weights @ vv                                                  # (B, h, n, hd)
        merged = heads.transpose(1, 2).reshape(B, n, D)
        outs.append(F.linear(merged, W["out_proj.weight"], W.get("out_proj.bias")))
        finite = scores if allowed is None else torch.where(allowed, scores, 0.0)
        conditions.append(softmax_condition(finite).amax(dim=(1, 3)))        # (B, n)
        bias = W["out_proj.bias"].abs().max() if "out_proj.bias" in W else 0.0
        sizes.append((vv.abs().amax(dim=(1, 2, 3))[:, None] * W["out_proj.weight"].abs()
                      .sum(1).max() + bias).expand(B, n))
        start += n
    return torch.cat(outs, 1), torch.cat(conditions, 1), torch.cat(sizes, 1)


def _formula_weights(state):
    """The weights `state` ({"q_proj.weight": ...}) under the names of the formulas'
    inputs ("q_w", "q_b", ..., "o_b"; None where there is no bias)."""
    return {f"{attr[0]}_{part[0]}": state.get(f"{attr}.{part}") for attr in PROJECTIONS
            for part in ("weight", "bias")}


def _compare(actual, answers, name, dtype, hint, mistakes=None):
    """expect_close against answers = (expected, condition, size); mistakes: the formula's
    with one step left out or moved (common.step_mistakes), which name a wrong output."""
    expected, condition, size = answers
    expect_close(actual, expected.to(dtype), name, mistakes=mistakes,
                 dtype=dtype, scale=size[..., None], condition=condition[..., None], hint=hint)


_VIEW_ERROR = re.compile(r"shape '\[([-\d, ]+)\]' is invalid for input of size (\d+)")
_BROADCAST = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)")
_MASK_SHAPE = re.compile(r"mask of shape \(([\d, ]+)\)")


def _sizes(text):
    return tuple(int(v) for v in text.split(",") if v.strip())


def _heads_reason(message, dims):
    """What an error meeting this chapter's two numbers of heads means (num_heads query
    heads, num_kv_heads key/value heads), read off its message: a view into the other
    number of heads, an attribute chapter 3's layer lacks; or None. (Keys or values not
    repeated to num_heads heads: diagnose.error_cause names them, for any exercise.)"""
    if "no attribute 'num_kv_heads'" in message:
        return MESSAGES["heads_getattr"]
    h, g = dims.get("num_heads"), dims.get("num_kv_heads")
    if not (h and g) or h == g:
        return None
    found = _VIEW_ERROR.search(message)
    if found and "-1" not in found.group(1):
        sizes, have = _sizes(found.group(1)), int(found.group(2))
        per_position = have // math.prod(sizes[:-2]) if math.prod(sizes[:-2]) else 0
        for size, other, key in ((h, g, "heads_view_kv"), (g, h, "heads_view_q")):
            if size in sizes[-2:] and math.prod(sizes) * other == have * size:
                return MESSAGES[key].format(h=h, g=g, width=per_position)
    return None


def _keys_reason(message, start, n, batch=None):
    """What an error of a decoding call (`start` positions cached, `n` new, x_new's `batch`)
    means when it meets the number of keys T = start + n with another length: the new
    positions alone, or what was cached before the append; a mask of shape (T, n); a length
    of `batch` where n belongs; or None."""
    T = start + n
    found = _MASK_SHAPE.search(message)
    if found and _sizes(found.group(1))[-2:] == (T, n) and T != n:
        return MESSAGES["mask_transposed"].format(n=n, T=T)
    met = ({_sizes(found.group(1))[-1]} if found and _sizes(found.group(1))
           else {int(v) for v in _BROADCAST.search(message).groups()}
           if _BROADCAST.search(message) else set())
    if found or T in met:
        for size, key in ((start, "keys_before_append"), (n, "keys_new_only")):
            if size in met and size != T:
                return MESSAGES[key].format(n=n, T=T, start=start)
    if batch and batch != n and {batch, n} <= met:
        return MESSAGES["length_from_batch"].format(n=n, batch=batch)
    return None


def _raised(error, name, decoding=None):
    """common.raised, with what the error means in this chapter where its message shows it
    (_heads_reason; for a decoding call, decoding = (positions cached before it, new ones,
    batch): _keys_reason, and a None met in the first call, the empty cache's keys)."""
    if error is None or not (isinstance(error, (list, tuple)) and len(error) >= 2
                             and all(isinstance(e, str) for e in error)) \
            or error[0] in ("NotImplementedError", "CheckFailure"):
        raised(error, name)
        return
    reason = (_heads_reason(error[1], current_dims())
              or (_keys_reason(error[1], *decoding) if decoding else None)
              or (MESSAGES["empty_cache_none"] if decoding and decoding[0] == 0
                  and "'NoneType'" in error[1] else None))
    if reason is None:
        raised(error, name)
    restated = diagnose.restate_error(name, *error[:2], current_dims(), *error[2:4])
    fail((restated or MESSAGES["raised"].format(name=name, kind=error[0], message=error[1]))
         + MESSAGES["in_this_chapter"].format(reason=reason))


def _wrong_length(shown, got, want, why=""):
    """Fail: len(cache) after `shown` is `got` where `want` positions are cached, in the
    state family's words (diagnose.wrong_state); `why` says what went wrong or fixes it."""
    fail(diagnose.explained(MESSAGES["len_after"].format(shown=shown), diagnose.wrong_state(
        MESSAGES["cached_positions"], got, want, why)))


# ----------------------------------------------------------------------------- repeat_kv
@reference
def _repeat_answers(kv, num_heads):
    G = num_heads // kv.shape[1]
    return kv.repeat_interleave(G, dim=1)


@check
def repeat_kv(function, seed=0, batch=2, num_kv_heads=2, num_heads=6, L=5, head_dim=3,
              dtype=torch.float32):
    """The student's repeat_kv(kv, num_heads): (B, g, L, hd) -> (B, num_heads, L, hd),
    key/value head j serving query heads j*G .. j*G + G - 1."""
    (kv,) = random_inputs((batch, num_kv_heads, L, head_dim), seed=seed, dtype=dtype)
    expected = _repeat_answers(kv, num_heads)
    actual = call(function, kv.clone(), num_heads, name="repeat_kv")
    name = MESSAGES["repeat_name"].format(shape=tuple(kv.shape), num_heads=num_heads)
    # a repeat by the wrong count or along the wrong axis, named before the shape is
    mistakes = step_mistakes("repeat kv", {"kv": kv}, current_dims(), num_heads=num_heads)
    named_by_shape(actual, expected, name, dtype=dtype, mistakes=mistakes)
    # (L = 5 by default, so that the size a wrong repeat gives, 4 = 2 * 2, is no quantity's)
    expect_tensor(actual, name, shape=expected.shape, dtype=dtype,
                  shape_names="(B, num_heads, L, head_dim)")
    # a repeat in the other order (tiled) is named by diagnose.other_layout's factors family
    expect_close(actual, expected, name, dtype=dtype, mistakes=mistakes,
                 hint=MESSAGES["repeat_hint"])
    passed(MESSAGES["repeat_passed"].format(shape=tuple(kv.shape), out=tuple(expected.shape),
                                            group=num_heads // num_kv_heads, dtype=dtype))


# ----------------------------------------------------------------------------- GQA structure
def _structure(cls, args, kwargs, bad):
    """Build cls(*args, **kwargs) and describe it from values the grader reads back (never a
    report of the student's process): the attributes of the interface, each projection's
    weight and bias (None where there is no such attribute), the parameter count, and what
    cls(*bad) raised (["ValueError", "", ""] for ValueError and its subclasses)."""
    module, data = construct(cls, *args, **kwargs)
    if module is None:
        return data
    data["attrs"] = {a: getattr(module, a, None)
                     for a in ("d_model", "num_heads", "num_kv_heads", "head_dim")}
    data["projections"] = {}
    for attr in PROJECTIONS:
        proj = getattr(module, attr, None)
        data["projections"][attr] = None if proj is None else {
            part: getattr(proj, part, None) for part in ("weight", "bias")}
    data["count"] = sum(p.numel() for p in module.parameters())
    data["bad"] = refusal(cls, *bad)
    return data


@reference
def _structure_answers(d_model, num_heads, num_kv_heads, bias):
    """{"head_dim", "shapes": {attr: (out, in)}, "count"}."""
    hd = d_model // num_heads
    kv = num_kv_heads * hd
    shapes = {"q_proj": (d_model, d_model), "k_proj": (kv, d_model), "v_proj": (kv, d_model),
              "out_proj": (d_model, d_model)}
    count = sum(o * i + (o if bias else 0) for o, i in shapes.values())
    return {"head_dim": hd, "shapes": shapes, "count": count}


def _shown(args, kwargs):
    return ", ".join([str(a) for a in args] + [f"{k}={v}" for k, v in kwargs.items()])


@check
def gqa_structure(cls, d_model=16, num_heads=4, num_kv_heads=2, bias=True):
    """GroupedQueryAttention(d_model, num_heads, num_kv_heads, bias=bias): attributes, the
    shapes of the four nn.Linear, the parameter count, and a ValueError when num_kv_heads
    does not divide num_heads."""
    args, kwargs = (d_model, num_heads, num_kv_heads), ({} if bias else {"bias": False})
    shown = _shown(args, kwargs)
    answers = _structure_answers(d_model, num_heads, num_kv_heads, bias)
    bad = (4 * 6, 4, 3)
    data = _structure(cls, args, kwargs, bad)
    judge_construct(data, f"GroupedQueryAttention({shown})")
    attrs = data["attrs"]
    for attr, value in (("d_model", d_model), ("num_heads", num_heads),
                        ("num_kv_heads", num_kv_heads), ("head_dim", answers["head_dim"])):
        got = attrs[attr]
        if differs(got, value):
            extra = (" " + MESSAGES["head_dim_from_kv"] if attr == "head_dim"
                     and not differs(got, d_model // num_kv_heads) else "")
            fail(diagnose.explained(f"GroupedQueryAttention({shown})", diagnose.wrong_state(
                MESSAGES["attribute"].format(attr=attr), repr(got), value)) + extra)
    for attr in PROJECTIONS:
        proj = data["projections"][attr]
        if proj is None:
            fail(MESSAGES["no_attribute"].format(shown=shown, attr=attr,
                                                 interface=MESSAGES["interface"]))
        weight, b = proj["weight"], proj["bias"]
        shape = answers["shapes"][attr]
        try:
            expect_tensor(weight, f"{attr}.weight", shape=shape,
                          shape_names="(out_features, in_features)")
        except CheckFailure as failure:
            if attr not in ("k_proj", "v_proj") or not isinstance(weight, torch.Tensor):
                raise
            fail(f"{failure} " + MESSAGES["kv_width"].format(
                g=num_kv_heads, hd=answers["head_dim"], kv=shape[0]))
        if bias and (not isinstance(b, torch.Tensor) or tuple(b.shape) != (shape[0],)):
            fail(MESSAGES["bias_shape"].format(attr=attr, size=shape[0]))
        if not bias and b is not None:
            fail(MESSAGES["bias_exists"].format(attr=attr))
    count = data["count"]
    if count != answers["count"]:
        fail(MESSAGES["count_layer"].format(shown=shown, count=count,
                                            expected=answers["count"]))
    error = data["bad"]
    if error is None or error[0] != "ValueError":
        what = (MESSAGES["did_not_raise"] if error is None
                else MESSAGES["raised_what"].format(kind=error[0], message=error[1]))
        if error is not None and error[0] == "NotImplementedError":
            fail(MESSAGES["gqa_not_implemented"])
        fail(MESSAGES["gqa_no_value_error"].format(bad=bad, what=what, num_heads=bad[1],
                                                   num_kv_heads=bad[2]))
    shapes = answers["shapes"]
    passed(MESSAGES["structure_passed"].format(shown=shown, q=shapes["q_proj"],
                                               kv=shapes["k_proj"], out=shapes["out_proj"],
                                               count=count))


# ----------------------------------------------------------------------------- GQA forward
def _forward(cls, args, kwargs, state, dtype, inputs):
    """Build cls(*args, **kwargs), move it to `dtype`, load the weights `state` into it
    (common.load_weights) and call it on each (x, mask) of `inputs`. Returns construct()'s
    data, "to_error", "targets" (what load_weights found) and "results": [[result, error]]
    per input: outputs on the grader's inputs of the grader's weights, sent back by value."""
    module, data = construct(cls, *args, **kwargs)
    if module is None:
        return data
    module, data["to_error"] = attempt(lambda: module.to(dtype=dtype).eval())
    if data["to_error"] is not None:
        return data
    data["targets"] = load_weights(module, by_owner(state))
    data["results"] = []
    for x, mask in inputs:
        # no mask: left to forward's default (mask=None), as the exercise promises
        seen = observe(module, x.clone(), *([] if mask is None else [mask.clone()]))
        data["results"].append([seen.result, seen.error])
    return data


@reference
def _forward_inputs(seed, batch, L, d_model, dtype):
    """x (B, L, D) and three masks: None, causal (L, L), padding & causal (B, 1, L, L)."""
    (x,) = random_inputs((batch, L, d_model), seed=seed + 1, dtype=dtype)
    lengths = torch.randint(1, L + 1, (batch,), generator=generator(seed + 2))
    lengths[0] = L
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    pad = (torch.arange(L) < lengths[:, None])[:, None, None, :]
    return x, [None, causal, pad & causal]


@reference
def _forward_answers(state, x, masks, h, g):
    """For each mask: (expected, condition, size); the expected output is checked against
    F.scaled_dot_product_attention(enable_gqa=True). Its mistakes: the formula's
    (formulas.grouped_query_formula)."""
    answers = []
    L = x.shape[1]
    for mask in masks:
        expected, condition, size = _ref_run(state, x, h, g, [L], mask=mask)
        W = {n: t.double() for n, t in state.items()}
        B, D = x.shape[0], x.shape[2]
        q, k, v = (F.linear(x.double(), W[f"{n}.weight"], W.get(f"{n}.bias"))
                   .view(B, L, heads, -1).transpose(1, 2)
                   for n, heads in (("q_proj", h), ("k_proj", g), ("v_proj", g)))
        sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        trusted = F.linear(sdpa.transpose(1, 2).reshape(B, L, D), W["out_proj.weight"],
                           W.get("out_proj.bias"))
        assert close(expected, trusted, torch.float64), "internal: reference disagrees with SDPA"
        answers.append((expected, condition, size))
    return answers


@check
def gqa_forward(cls, seed=0, batch=2, L=6, d_model=16, num_heads=4, num_kv_heads=2,
                bias=True, dtype=torch.float32):
    """forward(x, mask) of GroupedQueryAttention holding random weights (loaded by the
    check), without a mask, with a causal mask and with padding & causal masks."""
    args, kwargs = (d_model, num_heads, num_kv_heads), ({} if bias else {"bias": False})
    shown = _shown(args, kwargs)
    state = _weights(d_model, num_heads, num_kv_heads, bias, seed, dtype)
    x, masks = _forward_inputs(seed, batch, L, d_model, dtype)
    answers = _forward_answers(state, x, masks, num_heads, num_kv_heads)
    data = _forward(cls, args, kwargs, state, dtype, [(x, m) for m in masks])
    judge_construct(data, f"GroupedQueryAttention({shown})")
    error = data["to_error"]
    if error is not None:
        fail(MESSAGES["raised"].format(name=f"GroupedQueryAttention({shown}).to(dtype={dtype})",
                                       kind=error[0], message=error[1]))
    for name, value in state.items():
        got = data["targets"].slot(*name.split("."))
        if got != tuple(value.shape):
            fail(MESSAGES["weight_shape"].format(name=name, got=got, want=tuple(value.shape),
                                                 interface=MESSAGES["interface"])
                 + (" " + MESSAGES["kv_full_size"] if got == (d_model, d_model) else ""))
    labels = [MESSAGES[key] for key in ("label_no_mask", "label_causal", "label_padding_causal")]
    for label, (result, error), answer, mask in zip(labels, data["results"], answers, masks):
        _raised(error, MESSAGES["forward_name"].format(label=label))
        output = revive(result)
        name = MESSAGES["forward_output"].format(label=label, shown=shown, dtype=dtype)
        expect_tensor(output, name, shape=(batch, L, d_model), dtype=dtype,
                      shape_names="(B, L, d_model)")
        # the formula with one step left out or moved (checks/diagnose.py), for a mistake
        # that no entry of the tables names
        inputs = {"query": x, "key": x, "value": x, "mask": mask, **_formula_weights(state)}
        _compare(output, answer, name, dtype,
                 hint=MESSAGES["forward_hint"],
                 mistakes=step_mistakes("grouped-query attention", inputs, current_dims(),
                                        num_heads=num_heads, num_kv_heads=num_kv_heads))
    kind = MESSAGES["kind_mha" if num_kv_heads == num_heads else
                    "kind_mqa" if num_kv_heads == 1 else "kind_gqa"]
    passed(MESSAGES["forward_passed"].format(shown=shown, kind=kind, dtype=dtype))


# ----------------------------------------------------------------------------- the helpers
def _helper_attn(d_model, num_heads, num_kv_heads, state):
    """The course's stand-in attn (checks.kv:_stand_in, built where the student's code runs)
    with the interface's attributes; num_kv_heads None: chapter 3's layer, which has none."""
    attrs = {"d_model": d_model, "num_heads": num_heads, "head_dim": d_model // num_heads}
    if num_kv_heads is not None:
        attrs["num_kv_heads"] = num_kv_heads
    return given("checks.kv:_stand_in", attrs, state)


@reference
def _project_answers(state, x, h, g):
    """q (B, h, L, hd), k and v (B, g, L, hd) of x under the weights `state`, in float64."""
    B, L, _ = x.shape
    return tuple(F.linear(x.double(), state[f"{n}.weight"].double(),
                          state[f"{n}.bias"].double()).view(B, L, heads, -1).transpose(1, 2)
                 for n, heads in (("q_proj", h), ("k_proj", g), ("v_proj", g)))


@check
def project_heads(fn, seed=0, batch=2, L=5, d_model=16, num_heads=4, num_kv_heads=2,
                  dtype=torch.float32):
    """fn(attn, x) -> (q, k, v): x (B, L, d_model) projected by attn's q_proj, k_proj,
    v_proj and split into num_heads query heads, num_kv_heads key/value heads (B, heads, L,
    head_dim). num_kv_heads=None: attn has no num_kv_heads (chapter 3's layer)."""
    h, g = num_heads, num_kv_heads or num_heads
    state = _weights(d_model, h, g, True, seed, dtype)
    (x,) = random_inputs((batch, L, d_model), seed=seed + 1, dtype=dtype)
    attn = _helper_attn(d_model, h, num_kv_heads, state)
    seen = observe(fn, attn, x.clone())
    _raised(seen.error, "project_heads(attn, x)")
    result = revive(seen.result)
    if not (isinstance(result, tuple) and len(result) == 3):
        fail(MESSAGES["not_triple"].format(got=type_name(result)))
    inputs = {"x": x, **_formula_weights(state)}   # what a mistake gives: the formula's steps
    for what, got, expected, heads in zip(("q", "k", "v"), result,
                                          _project_answers(state, x, h, g), ("num_heads", "num_kv_heads", "num_kv_heads")):
        shown = MESSAGES["project_name"].format(what=what, shape=tuple(x.shape))
        expect_tensor(got, shown, shape=expected.shape, dtype=dtype,
                      shape_names=f"(B, {heads}, L, head_dim)")
        expect_close(got, expected.to(dtype), shown, dtype=dtype,
                     mistakes=step_mistakes("project heads", inputs, current_dims(),
                                            num_heads=h, num_kv_heads=g, role=what),
                     scale=x.double().abs().max() * state[f"{what}_proj.weight"].double().abs()
                     .sum(1).max() + 1,
                     hint=MESSAGES["project_hint"].format(what=what, heads=heads))
    passed(MESSAGES["project_passed"].format(
        layer=f"num_kv_heads={g}" if num_kv_heads else MESSAGES["no_kv_heads"], dtype=dtype,
        q=tuple(result[0].shape), kv=tuple(result[1].shape)))


@reference
def _attend_inputs(seed, batch, L, T, num_heads, num_kv_heads, head_dim, dtype):
    """q (B, h, L, hd), k and v (B, g, T, hd), and the decoding mask (L, T) of the last L
    of T positions."""
    q, k, v = random_inputs((batch, num_heads, L, head_dim), (batch, num_kv_heads, T, head_dim),
                            (batch, num_kv_heads, T, head_dim), seed=seed + 2, dtype=dtype)
    return q, k, v, torch.ones(L, T, dtype=torch.bool).tril(T - L)


@reference
def _attend_answers(state, q, k, v, mask):
    """attn.out_proj of the merged heads of attention of q over k, v (repeated for the query
    heads) under `mask` (or None), in float64 (its mistakes: the formula's,
    formulas.attend_heads_formula)."""
    h, g = q.shape[1], k.shape[1]
    W = {n: t.double() for n, t in state.items()}
    kk, vv = (t.double().repeat_interleave(h // g, 1) for t in (k, v))      # (B, h, T, hd)
    scores = q.double() @ kk.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    heads = torch.softmax(scores, dim=-1) @ vv                               # (B, h, L, hd)
    merged = heads.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)      # (B, L, D)
    return F.linear(merged, W["out_proj.weight"], W["out_proj.bias"])


@check
def attend_heads(fn, seed=0, batch=2, L=3, T=5, d_model=16, num_heads=4, num_kv_heads=2,
                 dtype=torch.float32):
    """fn(attn, q, k, v, mask) -> (B, L, d_model): the key/value heads repeated for the
    query heads, attention per head under the mask (L, T) (and with mask=None), the heads
    merged and projected by attn.out_proj."""
    h, g, hd = num_heads, num_kv_heads, d_model // num_heads
    state = _weights(d_model, h, g, True, seed, dtype)
    q, k, v, mask = _attend_inputs(seed, batch, L, T, h, g, hd, dtype)
    attn = _helper_attn(d_model, h, g, state)
    for label, given_mask in ((MESSAGES["label_decoding_mask"], mask), ("mask=None", None)):
        shown = MESSAGES["attend_name"].format(label=label)
        # mask=None, the default the exercise promises, is left to it (not passed)
        seen = observe(fn, attn, q.clone(), k.clone(), v.clone(),
                       *([] if given_mask is None else [given_mask.clone()]))
        _raised(seen.error, shown)
        output = revive(seen.result)
        expected = _attend_answers(state, q, k, v, given_mask)
        expect_tensor(output, shown, shape=(batch, L, d_model), dtype=dtype,
                      shape_names="(B, L, d_model)")
        inputs = {"q": q, "k": k, "v": v, "mask": given_mask, **_formula_weights(state)}
        expect_close(output, expected.to(dtype), shown, dtype=dtype,
                     mistakes=step_mistakes("attend heads", inputs, current_dims(),
                                            num_heads=h, num_kv_heads=g),
                     scale=v.double().abs().max() * state["out_proj.weight"]
                     .double().abs().sum(1).max() + state["out_proj.bias"].double().abs().max(),
                     hint=MESSAGES["attend_hint"])
    passed(MESSAGES["attend_passed"].format(num_heads=h, num_kv_heads=g, dtype=dtype, L=L, T=T))


# ----------------------------------------------------------------------------- counts
def _number(got, shown, count=False):
    """`got` as a Python number: the counts are computed by arithmetic, no tensor (the
    documented kind: common.expect_type); a number of numpy's (numpy.int64:
    numbers.Integral, not int) counts as one, in the student's kit as in the grader.
    count=True: a count, an int (a float from a / is not one); chapter 7's gap: a float."""
    if count:
        expect_type(got, (int, numbers.Integral), shown, documented=MESSAGES["documented_int"],
                    hint=MESSAGES["count_int_hint"] if isinstance(got, float) else "")
        return int(got)
    expect_type(got, (int, float, numbers.Integral), shown,
                documented=MESSAGES["documented_int"])
    return int(got) if isinstance(got, numbers.Integral) else float(got)


def _judge_counts(rows, formula, mistakes, groups=None):
    """rows: [(shown, got, expected, {bug: value})], one per configuration; mistakes: the
    formula's values with one step left out or moved (common.step_mistakes), a tensor of one
    entry per configuration each. Fail naming the bug that explains every wrong row, else
    the family that fits all rows (diagnose.explain), else with the formula. groups:
    {where, in words: [bool per row]}, the configurations of one mode (bias=False, the
    default left alone): named when exactly they are wrong and no step of the formula fits."""
    wrong = [r for r in rows if r[1] != r[2]]
    if not wrong:
        return
    shown, got, expected, bugs = wrong[0]
    for message in common.consulted(bugs):
        if all(r[1] == r[3][message] for r in rows):
            fail(MESSAGES["count_bug"].format(shown=shown, got=got, expected=expected,
                                              message=message))
    actual, right = (torch.tensor([float(r[i]) for r in rows], dtype=torch.float64)
                     for i in (1, 2))
    same = lambda a, b: close(a, b, torch.float64)   # noqa: E731
    off = [r[1] != r[2] for r in rows]
    mode = next((where for where, members in (groups or {}).items() if list(members) == off),
                None)
    reason = (diagnose.one_step(actual, mistakes, same)
              or (mode and MESSAGES["count_group"].format(where=mode, count=sum(off),
                                                          total=len(off)))
              or diagnose.explain(actual, right, same, actual != right, current_dims(),
                                  ("configuration",), mistakes))
    if reason:
        fail(diagnose.explained(MESSAGES["count_named"].format(shown=shown, got=got,
                                                               expected=expected), reason))
    fail(MESSAGES["count_formula"].format(shown=shown, got=got, expected=expected,
                                          formula=formula))


def _config_tensors(configs, names):
    """{name: tensor of one entry per configuration} of `configs` (tuples of numbers in the
    order of `names`; None and bools become ints): the formulas' inputs."""
    return {name: torch.tensor([int(c[i]) for c in configs]) for i, name in enumerate(names)}


@reference
def _count_configs(seed):
    """[(d_model, num_heads, num_kv_heads, bias)] for count_gqa_parameters."""
    if seed == 0:
        return [(4096, 32, 8, False), (4096, 32, 32, False), (4096, 32, 1, False),
                (16, 4, 2, True), (24, 6, 3, True)]
    rng = random.Random(fresh_seed(seed))
    configs = []
    for _ in range(6):
        g = rng.choice([1, 2, 4])
        h = g * rng.choice([1, 2, 3, 4])
        configs.append((h * rng.randint(2, 40), h, g, rng.random() < 0.5))
    return configs


@reference
def _count_answers(configs):
    answers = []
    for d, h, g, bias in configs:
        kv = g * (d // h)
        b = (lambda n: n if bias else 0)
        # its mistakes: the formula's (formulas.gqa_parameters_formula)
        answers.append((2 * d * d + 2 * d * kv + b(2 * d + 2 * kv), {}))
    return answers


@check
def count_gqa_parameters(fn, seed=0):
    """fn(d_model, num_heads, num_kv_heads, bias=True) -> the exact parameter count of
    GroupedQueryAttention; ValueError when num_kv_heads does not divide num_heads."""
    configs = _count_configs(seed)
    rows = []
    for (d, h, g, bias), (expected, bugs) in zip(configs, _count_answers(configs)):
        shown = f"count_gqa_parameters({d}, {h}, {g}, bias={bias})"
        rows.append((shown, _number(call(fn, d, h, g, bias=bias, name=shown), shown, True),
                     expected, bugs))
    inputs = _config_tensors(configs, ("d_model", "num_heads", "num_kv_heads", "bias"))
    groups = {MESSAGES["group_bias_false"]: [not bias for _, _, _, bias in configs],
              MESSAGES["group_bias_true"]: [bias for _, _, _, bias in configs],
              MESSAGES["group_mha"]: [g == h for _, h, g, _ in configs],
              MESSAGES["group_mqa"]: [g == 1 for _, _, g, _ in configs]}
    _judge_counts(rows, MESSAGES["params_formula"],
                  step_mistakes("GQA parameter count", inputs, current_dims()), groups)
    bad = (32, 8, 3)
    _, error = attempt(fn, *bad)
    if error is None or error[0] != "ValueError":
        if error is not None and error[0] == "NotImplementedError":
            fail(MESSAGES["count_not_implemented"])
        fail(MESSAGES["count_no_value_error"].format(d_model=bad[0], num_heads=bad[1],
                                                     num_kv_heads=bad[2]))
    passed(MESSAGES["count_passed"].format(count=len(rows)))


@reference
def _bytes_configs(seed):
    """[(num_layers, num_kv_heads, head_dim, bytes_per_value or None = the default)]."""
    if seed == 0:
        return [(32, 8, 128, None), (80, 8, 128, 2), (2, 3, 16, 4), (32, 32, 128, 1)]
    rng = random.Random(fresh_seed(seed))
    return [(rng.randint(1, 96), rng.choice([1, 2, 4, 8, 16]), rng.choice([32, 64, 96, 128]),
             rng.choice([None, 1, 2, 4])) for _ in range(5)]


@reference
def _bytes_answers(configs):
    answers = []
    for layers, g, hd, nbytes in configs:
        b = 2 if nbytes is None else nbytes
        answers.append((2 * layers * g * hd * b, {}))   # its mistakes: the formula's
    return answers


@check
def count_kv_cache_bytes(fn, seed=0):
    """fn(num_layers, num_kv_heads, head_dim, bytes_per_value=2) -> bytes of KV cache per
    token."""
    configs = _bytes_configs(seed)
    rows = []
    for (layers, g, hd, nbytes), (expected, bugs) in zip(configs, _bytes_answers(configs)):
        extra = {} if nbytes is None else {"bytes_per_value": nbytes}
        shown = "count_kv_cache_bytes(" + _shown((layers, g, hd), extra) + ")"
        rows.append((shown, _number(call(fn, layers, g, hd, name=shown, **extra), shown, True),
                     expected, bugs))
    inputs = _config_tensors([(layers, g, hd, 2 if nbytes is None else nbytes)
                              for layers, g, hd, nbytes in configs],
                             ("num_layers", "num_kv_heads", "head_dim", "bytes_per_value"))
    _judge_counts(rows, MESSAGES["bytes_formula"],
                  step_mistakes("KV-cache bytes", inputs, current_dims()),
                  {MESSAGES["group_default"]: [nbytes is None for *_, nbytes in configs]})
    passed(MESSAGES["bytes_passed"].format(count=len(rows)))


# ----------------------------------------------------------------------------- KVCache
@reference
def _cache_inputs(seed, batch, num_kv_heads, head_dim, lengths, dtype):
    """[(keys, values)] with values of head_dim + 1 features (so that they cannot be
    mistaken for keys), and the concatenations after each append."""
    shapes = [s for n in lengths for s in ((batch, num_kv_heads, n, head_dim),
                                           (batch, num_kv_heads, n, head_dim + 1))]
    tensors = random_inputs(*shapes, seed=seed, dtype=dtype)
    chunks = list(zip(tensors[0::2], tensors[1::2]))
    totals = [(torch.cat(tensors[0:2 * i + 2:2], 2), torch.cat(tensors[1:2 * i + 2:2], 2))
              for i in range(len(lengths))]
    return chunks, totals


@check
def kv_cache(cls, seed=0, batch=2, num_kv_heads=2, head_dim=3, lengths=(3, 1, 2)):
    """KVCache(): empty (len 0, keys None), then append(keys, values) concatenates along the
    sequence axis (-2) and returns the full (keys, values)."""
    lengths = tuple(lengths)
    chunks, totals = _cache_inputs(seed, batch, num_kv_heads, head_dim, lengths, torch.float32)
    # the cache lives where the student's code runs: the grader calls its methods and reads
    # its length and its state back by value after each call ((a) of issue 13's rule: what
    # append did is judged from those values, never from a report of that process)
    cache, error = attempt(cls)
    raised(error, "KVCache()")
    length, error = attempt(len, cache)
    raised(error, "len(KVCache())")
    if differs(length, 0):
        fail(MESSAGES["cache_not_empty"].format(length=repr(length)))
    if not hasattr(cache, "keys"):
        fail(MESSAGES["keys_missing"])
    keys = cache.keys
    if keys is not None:
        fail(MESSAGES["keys_not_none"].format(got=type_name(keys)))
    total = 0
    for i, ((k, v), (all_k, all_v)) in enumerate(zip(chunks, totals)):
        shown = MESSAGES["append_shown"].format(index=i + 1, shape=tuple(k.shape))
        append = getattr(cache, "append", None)
        if append is None:
            fail(MESSAGES["no_append"])
        seen = observe(append, k.clone(), v.clone())
        result, error = revive(seen.result), seen.error
        length, _ = attempt(len, cache)
        keys, values = getattr(cache, "keys", None), getattr(cache, "values", None)
        if error is not None and "Sizes of tensors must match" in str(error[1]):
            # the student's error, its sizes named, then what it means here: the keys' and
            # the values' last sizes (head_dim, head_dim + 1) met, or lengths along another axis
            restated = diagnose.restate_error(shown, *error[:2], current_dims(), *error[2:])
            sizes = {int(s) for s in re.findall(r"size (\d+)", str(error[1]))}
            mixed = sizes == {head_dim, head_dim + 1} and "dimension 2" in str(error[1])
            fail((restated or MESSAGES["raised"].format(name=shown, kind=error[0],
                                                        message=error[1]))
                 + "\n" + (MESSAGES["keys_values_mixed"].format(hd=head_dim, hv=head_dim + 1)
                           if mixed else MESSAGES["append_sizes"]))
        raised(error, shown)
        total += k.shape[2]
        if not (isinstance(result, tuple) and len(result) == 2):
            fail(MESSAGES["append_not_pair"].format(shown=shown, got=type_name(result)))
        for what, got, expected in (("keys", result[0], all_k), ("values", result[1], all_v),
                                    ("cache.keys", keys, all_k), ("cache.values", values, all_v)):
            if got is None and what.startswith("cache."):
                fail(MESSAGES["cache_none"].format(what=what, shown=shown, attr=what[6:]))
            expect_tensor(got, MESSAGES["after"].format(what=what, shown=shown))
            before = totals[i - 1][0 if what.endswith("keys") else 1] if i else None
            if before is not None and tuple(got.shape) == tuple(before.shape) \
                    and torch.equal(got, before):
                fail(MESSAGES["only_old"].format(what=what, shown=shown))
            if tuple(got.shape) == tuple(k.shape if what.endswith("keys") else v.shape) and i:
                fail(MESSAGES["only_new"].format(what=what, shown=shown))
            if tuple(got.shape) != tuple(expected.shape):
                fail(MESSAGES["append_shape"].format(what=what, shown=shown,
                                                     got=tuple(got.shape),
                                                     want=tuple(expected.shape)))
            if not torch.equal(got, expected):
                fail(MESSAGES["append_order"].format(what=what, shown=shown))
        if differs(length, total):
            _wrong_length(shown, repr(length), total, MESSAGES["length_axis"])
    # each cache its own: a second one starts empty whatever the first holds
    other, error = attempt(cls)
    raised(error, "KVCache()")
    length, error = attempt(len, other)
    raised(error, "len(KVCache())")
    keys = getattr(other, "keys", None)
    if differs(length, 0) or keys is not None:
        fail(MESSAGES["cache_shared"].format(total=total, length=repr(length),
                                             keys=type_name(keys)))
    passed(MESSAGES["cache_passed"].format(lengths=list(lengths), total=total))


# ----------------------------------------------------------------------------- decoding mask
@reference
def _decoding_mask_answer(L_new, T):
    """The (L_new, T) bool mask of new queries at positions T - L_new .. T - 1 (True = may
    attend: keys 0 .. T - L_new + i for query i)."""
    return torch.ones(L_new, T, dtype=torch.bool).tril(T - L_new)


@check
def decoding_causal_mask(fn, sizes=((3, 4), (1, 4), (2, 2), (4, 7))):
    """fn(L_new, T) -> (L_new, T) bool, aligned at the bottom-right corner, for each
    (L_new, T) of `sizes` (one new position, a prompt with nothing cached, and chunks); the
    last also with device= the device of the check's own tensors (the grader receives every
    tensor on the CPU, so a device it cannot see is not asked for), where it must be."""
    calls = []
    for index, (L_new, T) in enumerate(sizes):
        expected = _decoding_mask_answer(L_new, T)
        mistakes = step_mistakes("decoding mask", {"L_new": L_new, "T": T}, current_dims())
        on_device = {"device": expected.device} if index == len(sizes) - 1 else {}
        shown = f"decoding_causal_mask({_shown((L_new, T), on_device)})"
        mask = call(fn, L_new, T, name="decoding_causal_mask", **on_device)
        expect_tensor(mask, shown, shape=(L_new, T), dtype=torch.bool, shape_names="(L_new, T)",
                      **on_device)
        calls.append((shown, mask, expected, mistakes))
    # a step's mistake is named only where it gives every size's mask (two mistakes may
    # give the same mask on one size: the diagonal off by one is the top-left mask at
    # T - L_new = 1)
    fits = {m for m in calls[0][3] if all(torch.equal(mask, mistakes[m])
                                          or torch.equal(mask, want)
                                          for _, mask, want, mistakes in calls)}
    for shown, mask, expected, mistakes in calls:
        expect_close(mask, expected, shown, hint=MESSAGES["mask_hint"], mistakes={
            m: b for m, b in mistakes.items() if m in fits and not torch.equal(b, expected)})
    passed(MESSAGES["mask_passed"].format(sizes=list(sizes)))


# ----------------------------------------------------------------------------- decoding
def _stand_in(attrs, state):
    """attn for the decoding checks: an nn.Module with the attributes `attrs` and the four
    nn.Linear of the interface holding `state` (a state_dict)."""
    layer = nn.Module()
    for name, value in attrs.items():
        setattr(layer, name, value)
    with torch.random.fork_rng():  # nn.Linear's initial weights, replaced at once
        for attr in PROJECTIONS:
            out_features, in_features = state[f"{attr}.weight"].shape
            setattr(layer, attr, nn.Linear(in_features, out_features,
                                           bias=f"{attr}.bias" in state,
                                           dtype=state[f"{attr}.weight"].dtype))
    layer.load_state_dict(state)
    return layer


@reference
def _decode_answers(state, x, h, g, rotary, base=ROTARY_BASE):
    """(expected (B, L, D): full causal attention in one chunk, condition, size); the
    mistakes of each call are the formula's (formulas.cached_attention_formula)."""
    return _ref_run(state, x, h, g, [x.shape[1]], rotary=rotary, base=base)


def _decoding(fn, cache_cls, name, seed, batch, d_model, num_heads, num_kv_heads, chunks,
              dtype, rotary, base=ROTARY_BASE):
    """Run fn(attn, x_new, cache) on a prompt, then chunk by chunk (`chunks`), and judge every
    call against full causal attention (with rotary positions of `base` if `rotary`; the
    mistakes of a call: the formula's, see _compare)."""
    chunks = list(chunks)
    h, g = num_heads, num_kv_heads or num_heads
    state = _weights(d_model, h, g, True, seed, dtype)
    (x,) = random_inputs((batch, sum(chunks), d_model), seed=seed + 1, dtype=dtype)
    expected, condition, size = _decode_answers(state, x, h, g, rotary, base)
    # rotary_cached_attention's base, passed as its signature promises (cached_attention has none)
    # base=10000.0, the default the exercise promises, is left to it (not passed)
    options = {"base": base} if rotary and base != ROTARY_BASE else {}
    attrs = {"d_model": d_model, "num_heads": h, "head_dim": d_model // h}
    if num_kv_heads is not None:
        attrs["num_kv_heads"] = g
    layer = (MESSAGES["layer_chapter3"] if num_kv_heads is None
             else f"num_heads={h}, num_kv_heads={g}")
    # attn and the cache live where the student's code runs: attn is the course's own
    # stand-in (given: built there from the grader's weights), the cache the student's class;
    # the grader drives the loop one call at a time and judges what each call returns and
    # len(cache) afterwards, by value, against its own full causal attention ((a): cached
    # decoding judged by its outputs). A stand-in replaced in that process changes what the
    # student's function sees, never the answer it must match.
    attn = given("checks.kv:_stand_in", attrs, state)
    cache, error = attempt(cache_cls)
    raised(error, "KVCache()")
    start = 0
    for i, n in enumerate(chunks):
        what = (MESSAGES["the_prompt"] if i == 0
                else MESSAGES["step_at"].format(index=i, start=start) if n == 1
                else MESSAGES["call_at"].format(index=i + 1, start=start, end=start + n - 1))
        shown = MESSAGES["decoding_one" if n == 1 else "decoding_many"].format(
            name=name, n=n, what=what,
            options="".join(f", {k}={v:g}" for k, v in options.items() if v != ROTARY_BASE))
        seen = observe(fn, attn, x[:, start:start + n].clone(), cache, **options)
        _raised(seen.error, shown, decoding=(start, n, batch))
        result = revive(seen.result)
        length, _ = attempt(len, cache)
        # a result of another shape that a family names (only some of the new positions)
        named_by_shape(result, expected[:, start:start + n].to(dtype), shown, dtype=dtype,
                       axes="(B, L_new, d_model)", scale=size[:, start:start + n, None],
                       condition=condition[:, start:start + n, None])
        expect_tensor(result, shown, shape=(batch, n, d_model), dtype=dtype,
                      shape_names="(B, L_new, d_model)")
        if differs(length, start + n):
            why = (MESSAGES["appended_twice"] if length == 2 * (start + n)
                   else MESSAGES["not_appended"] if length == start else "")
            _wrong_length(shown, repr(length), start + n, why)
        sl = slice(start, start + n)
        # this call's formula, the cache holding the right keys and values of the positions
        # before it (the first call that goes wrong is the one judged)
        inputs = {"x": x[:, :start + n], "start": start, **_formula_weights(state)}
        _compare(result, (expected[:, sl], condition[:, sl], size[:, sl]),
                 MESSAGES["output_of"].format(shown=shown), dtype,
                 hint=MESSAGES["decoding_hint"],
                 mistakes=step_mistakes("cached attention", inputs, current_dims(),
                                        num_heads=h, num_kv_heads=g, rotary=rotary,
                                        **options))
        start += n
    passed(MESSAGES["decoding_passed"].format(
        name=name, layer=layer, dtype=dtype, prompt=chunks[0], more=len(chunks) - 1,
        rest=chunks[1:], total=start,
        attention=MESSAGES["attention_rotary" if rotary else "attention_plain"]))


@check
def cached_attention(fn, cache_cls, seed=0, batch=2, d_model=16, num_heads=4, num_kv_heads=2,
                     chunks=(3, 1, 1, 1), dtype=torch.float32):
    """fn(attn, x_new, cache) run on a prompt, then one position per step, equals full causal
    attention at every step. num_kv_heads=None: attn has no num_kv_heads (chapter 3's layer)."""
    _decoding(fn, cache_cls, "cached_attention", seed, batch, d_model, num_heads, num_kv_heads,
              chunks, dtype, rotary=False)
