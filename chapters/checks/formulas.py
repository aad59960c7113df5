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

def relation_formula(dims, relation):
    """relation_scores' prev (relation "prev") or first ("first"), (num_heads,): the weight of
    query i on key i-1 (prev) or on key 0 (first), averaged over the batch and over the query
    positions i >= 2. Inputs {"weights": (B, num_heads, L, L)}."""
    def rows(start):
        return lambda _v, x: torch.arange(start, x["weights"].shape[-1])

    def pick(key, query=lambda i: i):
        """The entries weights[..., query(i), key(i)] for the rows i where both exist:
        (B, num_heads, rows)."""
        def step(i, x):
            w = x["weights"]
            q, k = query(i), key(i) + 0 * i
            inside = (q >= 0) & (q < w.shape[-2]) & (k >= 0) & (k < w.shape[-1])
            return w[:, :, q[inside], k[inside]]
        return step

    right, other = ((lambda i: i - 1), (lambda i: 0 * i))
    right_key, other_name = "key i-1", "first"
    if relation == "first":
        right, other = other, right
        right_key, other_name = "key 0", "prev"
    other_key = "key 0" if relation == "prev" else "key i-1"
    keys = {f"reads {other_key} instead of {right_key}: that is `{other_name}` (are prev and "
            "first swapped? return RelationScores(prev, first))": pick(other)}
    if relation == "first":  # (before the entry above the diagonal: both read the mask's 0)
        keys = {"reads row 0, weights[..., 0, i] (query 0 on key i), instead of column 0, "
                "weights[..., i, 0] (query i on key 0)": pick(lambda i: i, query=lambda i: 0 * i),
                **keys}
    keys.update({
        f"reads key i (the main diagonal, each query on itself) instead of {right_key}":
            pick(lambda i: i),
        "reads an entry above the diagonal (key i+1 of query i, or weights[..., i-1, i] with "
        f"query and key exchanged) instead of {right_key}: the causal mask sets those to 0":
            pick(lambda i: i, query=lambda i: i - 1)})
    steps = [("query positions", rows(2)),
             ("key", pick(right)),
             ("average", lambda picked, _x: picked.mean((0, 2)))]
    variants = {
        "query positions": {"starts at i = 1 instead of i = 2: at i = 1 the previous token is "
                            "the first token, a row that cannot tell the two relations apart":
                            rows(1),
                            "takes every query position from i = 0 instead of i >= 2: rows 0 "
                            "and 1 cannot tell the two relations apart": rows(0)},
        "key": keys,
        "average": {"sums over the query positions instead of averaging (each score is a mean "
                    "attention weight, between 0 and 1)":
                    lambda picked, _x: picked.sum(2).mean(0),
                    "sums over the batch instead of averaging":
                    lambda picked, _x: picked.sum(0).mean(-1)}}
    return Formula(steps, variants)


FORMULAS["relation score"] = relation_formula


def similarity_formula(dims):
    """head_similarity: for each example, each head's (Lq, Lk) map flattened, normalised to
    length 1, the dot products between heads; averaged over the batch: (num_heads,
    num_heads). Inputs {"weights": (B, num_heads, Lq, Lk)}."""
    normalize = torch.nn.functional.normalize
    steps = [("flatten", lambda _v, x: x["weights"].flatten(2)),            # (B, h, Lq*Lk)
             ("normalise", lambda maps, _x: normalize(maps, dim=-1)),
             ("dot products", lambda unit, _x: unit @ unit.transpose(1, 2)),  # (B, h, h)
             ("average over the batch", lambda s, _x: s.mean(0))]
    variants = {
        "flatten": {
            "compares the maps one query row at a time (a cosine per row, averaged over the "
            "rows) instead of each map as one vector of Lq * Lk numbers":
                lambda _v, x: x["weights"].transpose(1, 2).flatten(0, 1),   # (B*Lq, h, Lk)
            "averages the maps over the batch before comparing them (compare each example's "
            "maps, then average the matrices)":
                lambda _v, x: x["weights"].mean(0).flatten(1)[None],        # (1, h, Lq*Lk)
            "flattens the batch into each head's vector (one cosine over all examples at "
            "once) instead of one cosine per example":
                lambda _v, x: x["weights"].transpose(0, 1).flatten(1)[None]},  # (1, h, B*Lq*Lk)
        "normalise": {
            "is left out: the dot products are not normalised (the cosine divides each "
            "flattened map by its norm, so that every head has similarity 1 with itself)":
                lambda maps, _x: maps,
            "runs along the heads axis (dim=1) instead of along each flattened map (dim=-1)":
                lambda maps, _x: normalize(maps, dim=1),
            "subtracts each map's mean first (a Pearson correlation): the cosine takes the "
            "maps as they are":
                lambda maps, _x: normalize(maps - maps.mean(-1, keepdim=True), dim=-1),
            "divides by sqrt(Lq * Lk) (the dot products by the number of entries) instead of "
            "by each map's norm":
                lambda maps, _x: maps / math.sqrt(maps.shape[-1])},
        "average over the batch": {"sums instead of averaging": lambda s, _x: s.sum(0)}}
    return Formula(steps, variants)


FORMULAS["head similarity"] = similarity_formula


def ablation_formula(dims, num_heads, L, vocab_size, d_model):
    """ablation_importance: for each head k, the loss with gates all ones but gates[k] = 0,
    minus the loss with no mask; loss = mean cross-entropy of prev + that of first. Inputs:
    the lab model's parameters by name (checks.diversity.GatedModel) and "tokens",
    "prev_target", "first_target" (N, L) long."""
    from .diversity import GatedModel  # the lab model the check builds (grader-only here)
    cross_entropy = torch.nn.functional.cross_entropy
    targets = ("tokens", "prev_target", "first_target")
    h = num_heads

    def model(x):
        params = {k: v for k, v in x.items() if k not in targets}
        return GatedModel(vocab_size, L, d_model, h, params=params).double()

    def loss(parts=("prev", "first"), reduction="mean", combine=sum):
        def of(x, gates):
            with torch.no_grad():
                logits_prev, logits_first, _ = model(x)(x["tokens"], head_mask=gates)
            logits = {"prev": logits_prev, "first": logits_first}
            return combine([cross_entropy(logits[p].flatten(0, 1),
                                          x[f"{p}_target"].flatten(), reduction=reduction)
                            for p in parts])
        return lambda gates, x: {
            "masked": torch.stack([of(x, g) for g in gates]), "base": of(x, None)}

    def gates(off_only=True):
        def step(_v, _x):
            eye = torch.eye(h, dtype=torch.float64)
            return list(1 - eye) if off_only else list(eye)
        return step

    def gradient_score(_st, x):
        """E_x |dL(x)/d gate_k| at gates = 1: each example's own gates (N, h)."""
        tokens = x["tokens"]
        gate = torch.ones(tokens.shape[0], h, dtype=torch.float64, requires_grad=True)
        with torch.enable_grad():
            logits_prev, logits_first, _ = model(x)(tokens, head_mask=gate)
            per_example = sum(  # the mean over each example's positions with a target
                cross_entropy(logits.transpose(1, 2), x[f"{p}_target"], reduction="none").sum(1)
                / (x[f"{p}_target"] != -100).sum(1)
                for p, logits in (("prev", logits_prev), ("first", logits_first)))
            per_example.sum().backward()
        return gate.grad.abs().mean(0)

    steps = [("gates", gates()),
             ("loss", loss()),
             ("baseline subtraction", lambda st, _x: st["masked"] - st["base"])]
    variants = {
        "gates": {"switches off every head except head k (gates = 0, gates[k] = 1) instead "
                  "of head k alone (gates = 1, gates[k] = 0)": gates(off_only=False)},
        "loss": {"uses only loss_prev instead of loss_prev + loss_first":
                 loss(parts=("prev",)),
                 "uses only loss_first instead of loss_prev + loss_first":
                 loss(parts=("first",)),
                 "sums the cross-entropy over the positions (reduction='sum') instead of its "
                 "mean": loss(reduction="sum"),
                 "averages the two losses, (loss_prev + loss_first) / 2, instead of adding them":
                 loss(combine=lambda parts: sum(parts) / 2)},
        "baseline subtraction": {"is the wrong way round: the loss with every head on minus "
                                 "the loss with head k off":
                                 lambda st, _x: st["base"] - st["masked"],
                                 "is replaced by the gradient score |dL/d gate_k| (Michel et "
                                 "al.), not the ablation: set head k's gate to 0 and measure "
                                 "how much the loss grows": gradient_score}}
    return Formula(steps, variants, {"baseline subtraction": lambda st, _x: st["masked"]})


FORMULAS["ablation importance"] = ablation_formula


def _head_blocks(h, hd, layout):
    """A function (W) -> a view of W with its heads on axis 0: "rows" (h*hd, ...) as
    (h, hd, ...); "columns" (D, h*hd) as (h, D, hd); "strided" rows i, i + h, ... as head i."""
    if layout == "rows":
        return lambda W: W.unflatten(0, (h, hd))
    if layout == "columns":
        return lambda W: W.unflatten(1, (h, hd)).movedim(1, 0)
    return lambda W: W.unflatten(0, (hd, h)).movedim(1, 0)


_LAYOUT_WORDS = {"rows": "the rows [i*head_dim, (i+1)*head_dim)",
                 "columns": "the columns [i*head_dim, (i+1)*head_dim)",
                 "strided": "strided rows (head i as rows i, i + num_heads, ...)"}
# why the right layout is right, said after a wrong one
_LAYOUT_WHY = {"rows": " (nn.Linear stores its matrix as (out_features, in_features): head i's "
                       "block is a block of rows)",
               "columns": " (nn.Linear stores W_O transposed, (d_model, num_heads * head_dim): "
                          "head i's block W_O^i is a block of columns)"}


def _other_layouts(W, layout, make_step):
    """{description: step} of the two other layouts than `layout` for W's head blocks."""
    others = ("rows", "columns", "strided") if W.dim() == 2 else ("rows", "strided")
    return {f"takes {_LAYOUT_WORDS[other]} as head i's block instead of "
            f"{_LAYOUT_WORDS[layout]}{_LAYOUT_WHY.get(layout, '')}": make_step(other)
            for other in others if other != layout}


def head_copy_formula(dims, num_heads, head_dim, layout, ndim=2, key="the parameter"):
    """make_heads_identical for one parameter W (inputs {"W"}, named `key`): head 0's block
    copied into every head i = 1 .. num_heads - 1; the blocks are rows of q_proj, k_proj,
    v_proj and of their biases (layout "rows") and columns of out_proj.weight ("columns")."""
    h, hd = num_heads, head_dim

    def copied(split, heads):
        def step(_v, x):
            W = x["W"].clone()
            blocks = split(W)                     # a view: writes reach W
            for i in heads:
                blocks[i] = blocks[0]
            return W
        return step

    def layout_step(other):
        return copied(_head_blocks(h, hd, other), range(1, h))

    steps = [("copy", layout_step(layout))]
    variants = {"copy": {
        f"is left out: {key} was not changed (head 0's block goes into every head i = 1 .. "
        "num_heads - 1, or the heads still compute different things)": lambda _v, x: x["W"],
        **_other_layouts(torch.empty((1,) * ndim), layout, layout_step),
        "stops before the last head (range(1, num_heads - 1) misses head num_heads - 1)":
            copied(_head_blocks(h, hd, layout), range(1, h - 1))}}
    return Formula(steps, variants)


FORMULAS["head copy"] = head_copy_formula


def head_pruning_formula(dims, num_heads, head_dim, layout, remove, ndim=2):
    """prune_heads for one parameter W (inputs {"W"}): the blocks of the heads not in
    `remove`, in their original order (rows of q_proj, k_proj, v_proj and their biases:
    layout "rows"; columns of out_proj.weight: "columns")."""
    h, hd = num_heads, head_dim
    keep = [k for k in range(h) if k not in remove]

    def kept(heads, layout_=layout):
        def step(_v, x):
            blocks = _head_blocks(h, hd, layout_)(x["W"])[heads]   # (kept, ...)
            axis = 1 if layout_ == "columns" else 0
            return blocks.movedim(0, axis).flatten(axis, axis + 1)
        return step

    steps = [("selection", kept(keep))]
    variants = {"selection": {
        "keeps the first heads 0 .. num_kept - 1 instead of those not in heads_to_remove":
            kept(list(range(len(keep)))),
        "keeps the heads in heads_to_remove instead of the others": kept(sorted(remove)),
        **{description: step for description, step in _other_layouts(
            torch.empty((1,) * ndim), layout, lambda other: kept(keep, other)).items()}}}
    return Formula(steps, variants)


FORMULAS["head pruning"] = head_pruning_formula



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
