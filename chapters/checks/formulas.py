"""The exercises' formulas as data, for the one-step family of diagnose.py: each is the list
of an exercise's steps (scale, mask, softmax, split, projection, norm, residual, ...) and the
other ways a step can be done, from which diagnose.Formula.mistakes() computes what the
formula gives with one step left out or moved. Data per exercise, not a hand-written bug: a
step's wrong constants come from the exercise's named sizes (diagnose.constant_names).

Grader-only. These functions compute the exercises' right answers, so this module must not
reach a student: only common.step_mistakes (a @reference, whose body the kit removes)
imports it, and the kit replays its results from the fixtures (autograde.kit,
course.checks_modules(kit=True), tests/test_course.py).

FORMULAS maps the name a check passes to step_mistakes() to a function of the check's named
sizes (and options) that returns a Formula. One section per chapter, in course order.
"""
import math

import torch

from .diagnose import Formula, constant_names

# name -> function(dims, **options) -> Formula; each chapter's section adds its own
FORMULAS = {}


# ==== chapter 1 (and 4): single-head attention and its weights ============================

def _scores(value, x):
    return x["query"] @ x["key"].transpose(-2, -1)


def _masked(scores, x):
    mask = x.get("mask")
    if mask is None:
        return scores
    return scores.masked_fill(~mask, float("-inf"))


def _softmax_over(dim):
    def softmax(scores, _x):
        weights = torch.softmax(scores, dim=dim)
        return torch.nan_to_num(weights, nan=0.0)   # a fully masked row: zeros, never NaN
    return softmax


def _scale_variants(dims, d_k):
    """{description: step} of a scale by another named constant than 1/sqrt(d_k)."""
    right = 1.0 / math.sqrt(d_k)
    ways = {}
    for label, value in constant_names(dims).items():
        if value > 0 and not math.isclose(1.0 / value, right) and not math.isclose(value, 1.0):
            ways[f"divides by {label} instead of sqrt(d_k) = sqrt({d_k})"] = (
                lambda s, _x, by=value: s / by)
    return ways


def attention_formula(dims, d_k, output=True):
    """softmax(mask(Q K^T / sqrt(d_k))) V (the weights alone when not `output`); inputs
    {"query", "key", "value", "mask" (bool, True = may attend, or None)}."""
    steps = [("Q K^T product", _scores),
             ("scale", lambda s, _x: s / math.sqrt(d_k)),
             ("mask", _masked),
             ("softmax", _softmax_over(-1))]
    variants = {"Q K^T product": {"computes K Q^T (keys and queries exchanged)":
                                  lambda _v, x: x["key"] @ x["query"].transpose(-2, -1)},
                "scale": _scale_variants(dims, d_k),
                "mask": {"uses the complement of the mask (True/False mixed up)":
                         lambda s, x: s if x.get("mask") is None
                         else s.masked_fill(x["mask"], float("-inf"))},
                "softmax": {"runs over the queries (dim=-2) instead of the keys":
                            _softmax_over(-2)}}
    optional = ["scale", "mask", "softmax"]
    if output:
        steps.append(("weighted sum", lambda w, x: w @ x["value"]))
        variants["weighted sum"] = {"multiplies the weights by the keys instead of the values":
                                    lambda w, x: w @ x["key"]}
    return Formula(steps, variants, optional)


FORMULAS["attention"] = attention_formula
FORMULAS["attention weights"] = (
    lambda dims, d_k: attention_formula(dims, d_k, output=False))


# ==== chapters 2 and 3 (and 6): multi-head and grouped-query attention ====================

def _linear(x, inputs, name, bias=True):
    """x W^T + b with the weights inputs[name + "_w"] (out, in) and inputs[name + "_b"]."""
    return torch.nn.functional.linear(x, inputs[f"{name}_w"],
                                      inputs.get(f"{name}_b") if bias else None)


def _split_heads(t, h, how="transpose"):
    """(B, L, h * hd) -> (B, h, L, hd): the view and transpose; "view": the reshape alone;
    "interleaved": head i takes features i, i + h, ..."""
    B, L, D = t.shape
    if how == "view":
        return t.reshape(B, h, L, D // h)
    if how == "interleaved":
        return t.reshape(B, L, D // h, h).permute(0, 3, 1, 2)
    return t.reshape(B, L, h, D // h).transpose(1, 2)


def _merge_heads(t, how="transpose"):
    """(B, h, L, hd) -> (B, L, h * hd), and its two mistakes (as _split_heads)."""
    B, h, L, hd = t.shape
    if how == "view":
        return t.reshape(B, L, h * hd)
    if how == "interleaved":
        return t.permute(0, 2, 3, 1).reshape(B, L, h * hd)
    return t.transpose(1, 2).reshape(B, L, h * hd)


def _with(state, **changes):
    return {**state, **changes}


def multihead_formula(dims, num_heads, output=True, num_kv_heads=None):
    """Multi-head attention: project query, key, value (weights "q_w", "q_b", "k_w", ...,
    "o_w", "o_b" of the inputs, nn.Linear's layout), split into num_heads heads, Q K^T,
    scale by 1/sqrt(head_dim), mask ("mask", True = may attend, or None), softmax over the
    keys, weighted sum of the values, merge, output projection. output=False: the weights
    (B, num_heads, Lq, Lk). num_kv_heads: keys and values split into that many heads, each
    repeated for num_heads // num_kv_heads query heads (grouped-query attention)."""
    h = num_heads
    g = num_kv_heads or num_heads

    def head_dim(state):
        return state["q"].shape[-1]

    def project(_value, x, q="q", k="k", v="v", bias=True, v_input="value"):
        return {"q": _linear(x["query"], x, q, bias), "k": _linear(x["key"], x, k, bias),
                "v": _linear(x[v_input], x, v, bias)}

    def split(how):
        return lambda st, _x: _with(st, q=_split_heads(st["q"], h, how),
                                    **{n: _split_heads(st[n], g, how) for n in "kv"})

    def repeat(tiled=False):
        def step(st, _x):
            if tiled:
                return _with(st, **{n: st[n].repeat(1, h // g, 1, 1) for n in "kv"})
            return _with(st, **{n: st[n].repeat_interleave(h // g, dim=1) for n in "kv"})
        return step

    def scale_by(divisor):
        return lambda st, _x: _with(st, s=st["s"] / divisor(st))

    def softmax(dim):
        return lambda st, _x: _with(st, w=torch.nan_to_num(torch.softmax(st["s"], dim=dim),
                                                          nan=0.0))

    def merge(how):
        return lambda st, _x: _with(st, o=_merge_heads(st["o"], how))

    steps = [("projection", project),
             ("split into heads", split("transpose")),
             ("repeat of the key/value heads", repeat()),
             ("Q K^T product", lambda st, _x: _with(st, s=st["q"] @ st["k"].transpose(-2, -1))),
             ("scale", scale_by(lambda st: math.sqrt(head_dim(st)))),
             ("mask", lambda st, x: _with(st, s=_masked(st["s"], x))),
             ("softmax", softmax(-1))]
    scale_ways = {f"divides by {label} instead of sqrt(head_dim)":
                  scale_by(lambda st, value=value: value)
                  for label, value in constant_names(dims).items()
                  if value > 1 and f"sqrt({label})" != "sqrt(head_dim)"}
    variants = {
        "projection": {
            "projects the keys with q_proj": lambda st, x: project(st, x, k="q"),
            "projects the values with k_proj": lambda st, x: project(st, x, v="k"),
            "projects queries with k_proj and keys with q_proj":
                lambda st, x: project(st, x, q="k", k="q"),
            "projects the key input as the values": lambda st, x: project(st, x, v_input="key"),
            "leaves out the input projections' biases": lambda st, x: project(st, x, bias=False),
            "exchanges keys and values": lambda st, x: {**project(st, x),
                                                       "k": project(st, x)["v"],
                                                       "v": project(st, x)["k"]}},
        "split into heads": {"reshapes without the transpose": split("view"),
                             "interleaves the heads' features": split("interleaved")},
        "repeat of the key/value heads": {
            "tiles the key/value heads (repeat) instead of giving each its group of "
            "consecutive query heads (repeat_interleave)": repeat(tiled=True)},
        "Q K^T product": {"computes K Q^T (keys and queries exchanged)":
                          lambda st, _x: _with(st, s=st["k"] @ st["q"].transpose(-2, -1))},
        "scale": scale_ways,
        "softmax": {"runs over the queries (dim=-2) instead of the keys": softmax(-2),
                    "runs over the heads (dim=1) instead of the keys": softmax(1)},
    }
    skips = {"scale": None, "mask": None,
             "softmax": lambda st, _x: _with(st, w=st["s"])}
    if output:
        steps += [("weighted sum", lambda st, _x: _with(st, o=st["w"] @ st["v"])),
                  ("merge of the heads", merge("transpose")),
                  ("output projection", lambda st, x: _linear(st["o"], x, "o"))]
        variants["merge of the heads"] = {"reshapes without the transpose": merge("view"),
                                          "interleaves the heads' features":
                                              merge("interleaved")}
        variants["output projection"] = {
            "leaves out the output bias": lambda st, x: _linear(st["o"], x, "o", bias=False),
            "multiplies by W_O untransposed (o @ out_proj.weight)":
                lambda st, x: st["o"] @ x["o_w"] + (0 if x.get("o_b") is None else x["o_b"]),
            "adds the query (a residual) to the output":
                lambda st, x: _linear(st["o"], x, "o") + x["query"]}
        skips["output projection"] = lambda st, _x: st["o"]
    else:
        steps.append(("weights", lambda st, _x: st["w"]))
    return Formula(steps, variants, skips)


FORMULAS["multi-head attention"] = multihead_formula
FORMULAS["multi-head weights"] = (
    lambda dims, num_heads: multihead_formula(dims, num_heads, output=False))


# ==== chapter 4: masks ====================================================================


# ==== chapter 5: why heads diversify ======================================================


# ==== chapter 6: shared keys and values, the KV cache, positions ==========================

def grouped_query_formula(dims, num_heads, num_kv_heads):
    """Multi-head attention whose keys and values have num_kv_heads heads, each repeated for
    num_heads // num_kv_heads query heads (multihead_formula)."""
    return multihead_formula(dims, num_heads, num_kv_heads=num_kv_heads)


FORMULAS["grouped-query attention"] = grouped_query_formula


ROTARY_BASE = 10000.0  # rotary's default base


def _rotate(x, positions, base=ROTARY_BASE, pairs="halves", written="halves", exponent=2.0,
            sign=1.0):
    """Rotary positions on x (..., L, hd) at `positions` (L,): pair i of each row turns by
    position * base ** (-exponent * i / hd). pairs: which features form pair i, "halves"
    (i, i + hd/2) or "neighbours" (2i, 2i + 1); written: where the turned pair goes back."""
    hd = x.shape[-1]
    half = hd // 2
    angles = positions.double()[:, None] * base ** (
        -exponent * torch.arange(half, dtype=torch.float64) / hd)             # (L, hd/2)
    cos, sin = angles.cos(), sign * angles.sin()
    a, b = ((x[..., :half], x[..., half:]) if pairs == "halves"
            else (x[..., 0::2], x[..., 1::2]))                                  # (..., L, hd/2)
    turned = (a * cos - b * sin, a * sin + b * cos)
    if written == "halves":
        return torch.cat(turned, -1)
    return torch.stack(turned, -1).flatten(-2)


def rotary_formula(dims, base=ROTARY_BASE):
    """apply_rotary(x, positions, base): the pairs (i, i + head_dim // 2) of x (..., L, hd)
    turned by position * base ** (-2 i / head_dim). Inputs "x", "positions" (L,)."""
    def rotate(**how):
        return lambda _v, x: _rotate(x["x"], x["positions"], base, **how)

    def rotate_at_0_to_L(_v, x):
        return _rotate(x["x"], torch.arange(x["x"].shape[-2]), base)

    steps = [("rotation", rotate())]
    variants = {"rotation": {
        "pairs neighbouring features (2i, 2i + 1) instead of i and i + head_dim // 2":
            rotate(pairs="neighbours", written="neighbours"),
        "reads the pairs as halves but writes them back interleaved (2i, 2i + 1)":
            rotate(written="neighbours"),
        "reads neighbouring features (2i, 2i + 1) but writes the pairs back as halves":
            rotate(pairs="neighbours"),
        "turns each pair by -angle (the other way)": rotate(sign=-1.0),
        "uses the frequencies base ** (-i / head_dim) (without the 2)": rotate(exponent=1.0),
        "ignores the positions given and uses 0 .. L - 1": rotate_at_0_to_L}}
    if base != ROTARY_BASE:
        variants["rotation"][f"ignores base={base:g} and uses the default {ROTARY_BASE:g}"] = (
            lambda _v, x: _rotate(x["x"], x["positions"], ROTARY_BASE))
    return Formula(steps, variants)


FORMULAS["rotary"] = rotary_formula


def cached_attention_formula(dims, num_heads, num_kv_heads, rotary=False, base=ROTARY_BASE):
    """One call of cached_attention (rotary_cached_attention with `rotary`): the queries of
    the last L_new positions of x attend, under the causal mask aligned at the bottom-right
    corner, over the cached keys and values of the first `start` positions and their own.
    Inputs: "x" (B, start + L_new, d_model), "start" (an int: what the cache holds before
    the call, computed right), the weights "q_w" ... "o_b" (multihead_formula)."""
    h, g = num_heads, num_kv_heads

    def project(_value, x):
        return {n: _split_heads(_linear(x["x"], x, n), heads)
                for n, heads in (("q", h), ("k", g), ("v", g))}

    def positions(x, restart=False):
        T, start = x["x"].shape[1], x["start"]
        new = torch.arange(T - start) if restart else torch.arange(start, T)
        return torch.cat([torch.arange(start), new])

    def rotate(names="qk", restart=False, turn=base):
        def step(st, x):
            at = positions(x, restart)
            return _with(st, **{n: _rotate(st[n], at, turn) for n in names})
        return step

    def new_queries(st, x):
        return _with(st, q=st["q"][:, :, x["start"]:])

    def keys_only_new(st, x):
        return _with(new_queries(st, x), k=st["k"][:, :, x["start"]:],
                     v=st["v"][:, :, x["start"]:])

    def rotate_cached_again(st, x):
        st = new_queries(st, x)
        return _with(st, k=_rotate(st["k"], torch.arange(st["k"].shape[-2]), base))

    def repeat(tiled=False):
        if tiled:
            return lambda st, _x: _with(st, **{n: st[n].repeat(1, h // g, 1, 1) for n in "kv"})
        return lambda st, _x: _with(st, **{n: st[n].repeat_interleave(h // g, dim=1)
                                           for n in "kv"})

    def mask(diagonal):
        def step(st, _x):
            n, T = st["s"].shape[-2:]
            allowed = torch.ones(n, T, dtype=torch.bool).tril(diagonal(n, T))
            return _with(st, s=st["s"].masked_fill(~allowed, float("-inf")))
        return step

    steps = [("projection", project)]
    if rotary:
        steps.append(("rotary", rotate()))
    steps += [("cache", new_queries),
              ("repeat of the key/value heads", repeat()),
              ("Q K^T product", lambda st, _x: _with(st, s=st["q"] @ st["k"].transpose(-2, -1))),
              ("scale", lambda st, _x: _with(st, s=st["s"] / math.sqrt(st["q"].shape[-1]))),
              ("mask", mask(lambda n, T: T - n)),
              ("softmax", lambda st, _x: _with(st, w=torch.nan_to_num(
                  torch.softmax(st["s"], dim=-1), nan=0.0))),
              ("weighted sum", lambda st, _x: _with(st, o=st["w"] @ st["v"])),
              ("merge of the heads", lambda st, _x: _merge_heads(st["o"])),
              ("output projection", lambda o, x: _linear(o, x, "o"))]
    variants = {
        "cache": {"attends over this call's keys and values only, not the cached ones":
                  keys_only_new},
        "repeat of the key/value heads": {
            "tiles the key/value heads (repeat) instead of giving each its group of "
            "consecutive query heads (repeat_interleave)": repeat(tiled=True)},
        "mask": {"aligns the causal mask at the top-left corner (tril(0)) instead of the "
                 "bottom-right (tril(T - L_new)): the new queries are the last L_new of T "
                 "positions": mask(lambda n, T: 0),
                 "flips the sign of the causal mask's diagonal offset (tril(L_new - T) "
                 "instead of tril(T - L_new))": mask(lambda n, T: n - T)}}
    optional = {"mask": None}
    if rotary:
        variants["rotary"] = {
            "restarts the positions at 0 in every call (the new positions are len(cache) "
            ".. len(cache) + L_new - 1)": rotate(restart=True),
            "rotates the values too (rotary turns queries and keys only)": rotate("qkv"),
            "rotates the keys only, not the queries": rotate("k")}
        if base != ROTARY_BASE:
            variants["rotary"][f"ignores base={base:g} and uses the default "
                               f"{ROTARY_BASE:g}"] = rotate(turn=ROTARY_BASE)
        variants["cache"]["rotates the cached keys again, every key by its position, "
                          "although each was rotated once before it was cached"] = (
            rotate_cached_again)
        optional["rotary"] = None
    return Formula(steps, variants, optional)


FORMULAS["cached attention"] = cached_attention_formula


def equivariance_formula(dims):
    """equivariance_gap(layer, x, perm) = max |layer(x[:, perm]) - layer(x)[:, perm]|, as a
    tensor of one entry. Inputs: "permuted" = layer(x[:, perm]), "output" = layer(x), both
    (B, L, d_model), and "perm" (L,)."""
    steps = [("permutation of the output", lambda _v, x: x["output"][:, x["perm"]]),
             ("difference", lambda out, x: x["permuted"] - out),
             ("absolute value", lambda d, _x: d.abs()),
             ("largest entry", lambda d, _x: d.max().reshape(1))]
    variants = {"permutation of the output": {
                    "uses the inverse permutation (argsort(perm))":
                        lambda _v, x: x["output"][:, x["perm"].argsort()]},
                "largest entry": {"takes the mean instead of the largest entry":
                                  lambda d, _x: d.mean().reshape(1)}}
    optional = {"permutation of the output": lambda _v, x: x["output"],
                "absolute value": None}
    return Formula(steps, variants, optional)


FORMULAS["equivariance gap"] = equivariance_formula


def kv_cache_bytes_formula(dims):
    """count_kv_cache_bytes per configuration: 2 (a key and a value) * num_layers *
    num_kv_heads * head_dim * bytes_per_value. Inputs: tensors of one entry per
    configuration, "num_layers", "num_kv_heads", "head_dim", "bytes_per_value"."""
    steps = [("per head", lambda _v, x: x["head_dim"].double()),
             ("key/value heads", lambda n, x: n * x["num_kv_heads"]),
             ("layers", lambda n, x: n * x["num_layers"]),
             ("key and value (2)", lambda n, _x: 2 * n),
             ("bytes per value", lambda n, x: n * x["bytes_per_value"])]
    variants = {"bytes per value": {
        "assumes 2 bytes per value (ignores bytes_per_value)": lambda n, _x: 2 * n,
        "counts bits (8 per byte) instead of bytes": lambda n, x: 8 * n * x["bytes_per_value"]}}
    return Formula(steps, variants, ["key/value heads", "layers", "key and value (2)",
                                     "bytes per value"])


FORMULAS["KV-cache bytes"] = kv_cache_bytes_formula


def gqa_parameters_formula(dims):
    """count_gqa_parameters per configuration: W_Q and W_O d_model x d_model, W_K and W_V
    d_model x (num_kv_heads * head_dim), one bias per output feature where bias. Inputs:
    tensors of one entry per configuration, "d_model", "num_heads", "num_kv_heads", "bias"
    (0 or 1)."""
    def kv_width(_v, x):
        return x["num_kv_heads"] * (x["d_model"] // x["num_heads"])

    def weights(kv, x):
        return {"kv": kv, "n": 2 * x["d_model"] ** 2 + 2 * x["d_model"] * kv}

    def biases(st, x, kv_biases=None):
        kv = st["kv"] if kv_biases is None else kv_biases
        return st["n"] + x["bias"] * (2 * x["d_model"] + 2 * kv)

    steps = [("key/value width", lambda v, x: kv_width(v, x).double()),
             ("weights", weights),
             ("biases", biases)]
    variants = {
        "key/value width": {
            "is d_model (as many key/value heads as query heads)":
                lambda _v, x: x["d_model"].double(),
            "is num_kv_heads (without head_dim)": lambda _v, x: x["num_kv_heads"].double()},
        "biases": {"counts d_model biases for k_proj and v_proj":
                   lambda st, x: biases(st, x, x["d_model"])}}
    return Formula(steps, variants, {"biases": lambda st, _x: st["n"]})


FORMULAS["GQA parameter count"] = gqa_parameters_formula


# ==== chapter 7: the capstone's pre-LayerNorm block =======================================

def block_formula(dims, num_heads):
    """A pre-LayerNorm decoder block: x + attn(ln1(x)) under the causal mask, then
    x + ff(ln2(x)), ff = Linear, GELU, Linear. Inputs: "x" (B, L, d_model), "mask" (L, L),
    "ln1_w", "ln1_b", "ln2_w", "ln2_b", "ff0_w", "ff0_b", "ff2_w", "ff2_b" and the attention's
    "q_w" ... "o_b" (multihead_formula)."""
    attention = multihead_formula(dims, num_heads)
    functional = torch.nn.functional

    def norm(t, x, which):
        return functional.layer_norm(t, t.shape[-1:], x[f"{which}_w"], x[f"{which}_b"])

    def attend(h, x, mask="mask"):
        return attention.run({**x, "query": h, "key": h, "value": h, "mask": x.get(mask)})

    def ff(t, x, activation=functional.gelu):
        return _linear(activation(_linear(t, x, "ff0")), x, "ff2")

    steps = [("ln1", lambda _v, x: {"x": x["x"], "h": norm(x["x"], x, "ln1")}),
             ("attention", lambda st, x: _with(st, a=attend(st["h"], x))),
             ("first residual", lambda st, _x: _with(st, x=st["x"] + st["a"])),
             ("ln2", lambda st, x: _with(st, h=norm(st["x"], x, "ln2"))),
             ("feed-forward", lambda st, x: _with(st, f=ff(st["h"], x))),
             ("second residual", lambda st, _x: st["x"] + st["f"])]
    variants = {
        "ln1": {"uses ln2": lambda _v, x: {"x": x["x"], "h": norm(x["x"], x, "ln2")}},
        "attention": {"reads x instead of ln1(x)": lambda st, x: _with(st, a=attend(st["x"], x)),
                      "has no causal mask": lambda st, x: _with(st, a=attend(st["h"], x, None))},
        "first residual": {"adds the normalised input instead of x":
                           lambda st, _x: _with(st, x=st["h"] + st["a"])},
        "ln2": {"uses ln1": lambda st, x: _with(st, h=norm(st["x"], x, "ln1"))},
        "feed-forward": {"reads the block's input instead of the attention's output":
                         lambda st, x: _with(st, f=ff(norm(x["x"], x, "ln2"), x)),
                         "uses ReLU instead of GELU":
                         lambda st, x: _with(st, f=ff(st["h"], x, functional.relu))},
        "second residual": {"adds the normalised input instead of x":
                            lambda st, _x: st["h"] + st["f"]}}
    skips = {"ln1": lambda _v, x: {"x": x["x"], "h": x["x"]},
             "first residual": lambda st, _x: _with(st, x=st["a"]),
             "ln2": lambda st, _x: _with(st, h=st["x"]),
             "second residual": lambda st, _x: st["f"]}
    return Formula(steps, variants, skips)


FORMULAS["pre-LayerNorm block"] = block_formula
