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
    if d_k / 2 != math.sqrt(d_k):  # ** binds tighter than /: d_k ** 1/2 is (d_k ** 1) / 2
        ways[f"divides by d_k / 2 = {d_k / 2:g} instead of sqrt(d_k) = sqrt({d_k}) (d_k ** 1/2 "
             "is (d_k ** 1) / 2: write d_k ** 0.5)"] = lambda s, _x: s / (d_k / 2)
    ways[f"divides by 2 * d_k = {2 * d_k} instead of sqrt(d_k) = sqrt({d_k}) (x / d_k ** 1/2 "
         "is (x / d_k) / 2: write d_k ** 0.5)"] = lambda s, _x: s / (2 * d_k)
    for label, value in constant_names(dims).items():
        if value > 0 and not math.isclose(1.0 / value, right) and not math.isclose(value, 1.0):
            ways[f"divides by {label} instead of sqrt(d_k) = sqrt({d_k})"] = (
                lambda s, _x, by=value: s / by)
    ways.update(_float32_root(d_k, "d_k"))
    return ways


def _float32_root(size, label):
    """{description: step} of a scale by sqrt(size) rounded to float32 (a torch.sqrt of a
    float32 tensor), where it differs from the Python float math.sqrt(size)."""
    root32 = float(torch.tensor(float(size), dtype=torch.float32).sqrt())
    if root32 == math.sqrt(size):   # a perfect square: the same number
        return {}
    return {f"divides by sqrt({label}) rounded to float32 ({root32!r}, a torch.sqrt of a "
            f"float32 tensor), not the Python float math.sqrt({label})":
            lambda s, _x: s / root32 if isinstance(s, torch.Tensor)
            else _with(s, s=s["s"] / root32)}


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


def scores_formula(dims, d_k):
    """attention_scores: Q K^T / sqrt(d_k), the scores before the softmax; inputs
    {"query", "key"}."""
    steps = [("Q K^T product", _scores),
             ("scale", lambda s, _x: s / math.sqrt(d_k)),
             ("output", lambda s, _x: s)]
    variants = {"scale": _scale_variants(dims, d_k),
                "output": {"is the softmax of the scores (the weights), not the scores that "
                           "go into it": _softmax_over(-1)}}
    return Formula(steps, variants, ["scale"])


def softmax_formula(dims, dim):
    """stable_softmax(scores, dim): exp(s - max) / sum exp(s - max), the max and the sum
    along `dim`; inputs {"scores"}. The first step chooses the axis the reductions run
    along, so that one variant moves both."""
    def reduce(kind):
        def step(state, _x):
            s, axis = state["s"], state["dim"]
            if kind == "max":
                return _with(state, s=s - s.amax(dim=axis, keepdim=True))
            if kind == "exp":
                return _with(state, s=s.exp())
            total = s.sum() if axis is None else s.sum(dim=axis, keepdim=True)
            return _with(state, s=s / total)
        return step

    steps = [("reduction axis", lambda _v, x: {"s": x["scores"], "dim": dim}),
             ("subtraction of the maximum", reduce("max")),
             ("exponential", reduce("exp")),
             ("division by the sum", reduce("sum")),
             ("result", lambda state, _x: state["s"])]
    variants = {"reduction axis": {f"is the last axis instead of dim={dim} (in the max and "
                                   "the sum)": lambda _v, x: {"s": x["scores"], "dim": -1}},
                "division by the sum": {
                    "sums the whole tensor instead of along dim":
                    lambda state, _x: _with(state, s=state["s"] / state["s"].sum())}}
    return Formula(steps, variants, ["division by the sum"])


def entropy_formula(dims):
    """attention_entropy(weights): -sum_k w log w over the keys (the last axis), in nats,
    with 0 log 0 = 0; inputs {"weights"}."""
    reductions = {"takes the mean instead of the sum": lambda t: t.mean(dim=-1),
                  "takes the largest term instead of the sum": lambda t: t.amax(dim=-1)}
    steps = [("w log w", lambda _v, x: torch.special.xlogy(x["weights"], x["weights"])),
             ("sum over the keys", lambda t, _x: t.sum(dim=-1)),
             ("minus sign", lambda t, _x: -t)]
    variants = {"sum over the keys": {what: (lambda t, _x, r=r: r(t))
                                      for what, r in reductions.items()}}
    return Formula(steps, variants, ["minus sign"])


FORMULAS["attention scores"] = scores_formula
FORMULAS["stable softmax"] = softmax_formula
FORMULAS["attention entropy"] = entropy_formula


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


def split_formula(dims, num_heads):
    """split_heads(x, num_heads): (B, L, d_model) -> (B, num_heads, L, head_dim), d_model cut
    as (num_heads, head_dim) (head i holds features [i*head_dim, (i+1)*head_dim)), then
    transpose(1, 2); inputs {"x"}."""
    def cut(order):
        def step(_v, x):
            B, L, D = x["x"].shape
            if order == "heads first":
                return x["x"].reshape(B, L, num_heads, D // num_heads)
            return x["x"].reshape(B, L, D // num_heads, num_heads).transpose(-2, -1)
        return step

    steps = [("cut of d_model into (num_heads, head_dim)", cut("heads first")),
             ("transpose(1, 2)", lambda t, _x: t.transpose(1, 2))]
    variants = {"cut of d_model into (num_heads, head_dim)": {
        "cuts it as (head_dim, num_heads): head i gets the strided features i, "
        "i + num_heads, ...": cut("head_dim first")}}
    return Formula(steps, variants)


def head_projection_formula(dims, i, num_heads):
    """head_projection(x, weight, bias, i, num_heads): head i's block of nn.Linear's
    weight (d_model, in_features), rows [i*head_dim, (i+1)*head_dim), and of its bias, then
    x W_i^T + b_i; inputs {"x", "weight", "bias" (or None)}."""
    def rows(which):
        def step(_v, x):
            head_dim = x["weight"].shape[0] // num_heads
            block = (slice(i, None, num_heads) if which == "strided"
                     else slice(which * head_dim, (which + 1) * head_dim))
            bias = x.get("bias")
            return {"w": x["weight"][block], "b": None if bias is None else bias[block]}
        return step

    def columns(_v, x):
        head_dim = x["weight"].shape[0] // num_heads
        block = slice(i * head_dim, (i + 1) * head_dim)
        bias = x.get("bias")
        return {"w": x["weight"][:, block].transpose(0, 1),
                "b": None if bias is None else bias[block]}

    def add_bias(state, _x):
        return state["y"] if state["b"] is None else state["y"] + state["b"]

    steps = [("block of rows of head i", rows(i)),
             ("product x W_i^T", lambda st, x: _with(st, y=x["x"] @ st["w"].transpose(0, 1))),
             ("bias", add_bias)]
    ways = {"takes the strided rows i, i + num_heads, ... instead of a block": rows("strided"),
            "takes columns of the weight instead of rows (nn.Linear stores W transposed)":
            columns}
    ways.update({f"takes head {j}'s block (off by one: head i = {i} is asked, counted "
                 "from 0)": rows(j) for j in (i - 1, i + 1) if 0 <= j < num_heads})
    return Formula(steps, {"block of rows of head i": ways},
                   {"bias": lambda st, _x: st["y"]})


def core_formula(dims, num_heads):
    """multihead_attention_core (chapter 2): multihead_formula with identity projections,
    and the other ways of its steps that reading the three inputs and scaling by
    sqrt(head_dim) allow: keys or values split from another input, a float32 root."""
    formula = multihead_formula(dims, num_heads)
    project = dict(formula.steps)["projection"]
    merge = dict(formula.steps)["merge of the heads"]

    def heads_after_positions(st, _x):
        """The split without its transpose: (B, L, num_heads, head_dim), so that the
        attention's last two axes are the heads and their features (this chapter's silent
        bug); the merge then flattens them back in place."""
        return _with(st, across=True, **{n: st[n].reshape(*st[n].shape[:2], num_heads, -1)
                                         for n in "qkv"})

    def merge_in_place(st, x):
        if not st.get("across"):
            return merge(st, x)
        B, L, h, head_dim = st["o"].shape
        return _with(st, o=st["o"].reshape(B, L, h * head_dim))

    formula.steps = tuple((name, merge_in_place if name == "merge of the heads" else step)
                          for name, step in formula.steps)
    formula.variants["split into heads"] = {
        **formula.variants["split into heads"],
        "leaves the heads after the positions, (B, L, num_heads, head_dim), with no "
        "transpose: the attention runs across the heads of each position instead of across "
        "positions": heads_after_positions}

    def reading(which, source):
        return lambda st, x: project(st, {**x, which: x[source]})

    formula.variants["projection"] = {
        **formula.variants["projection"],
        "reads the query input for the keys": reading("key", "query"),
        "reads the query input for the values": reading("value", "query")}
    if "head_dim" in dims:
        formula.variants["scale"] = {**formula.variants["scale"],
                                     **_float32_root(dims["head_dim"], "head_dim")}
    return formula


FORMULAS["split heads"] = split_formula
FORMULAS["head projection"] = head_projection_formula
FORMULAS["multi-head attention core"] = core_formula


# ==== chapter 4: masks ====================================================================


# ==== chapter 5: why heads diversify ======================================================


# ==== chapter 6: shared keys and values, the KV cache, positions ==========================

FORMULAS["grouped-query attention"] = (
    lambda dims, num_heads, num_kv_heads: multihead_formula(dims, num_heads,
                                                            num_kv_heads=num_kv_heads))


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
