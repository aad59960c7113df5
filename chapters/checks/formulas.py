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

FORMULAS["grouped-query attention"] = (
    lambda dims, num_heads, num_kv_heads: multihead_formula(dims, num_heads,
                                                            num_kv_heads=num_kv_heads))


# ==== chapter 7: the capstone: the pre-LayerNorm block, the training step, generation ====

class Together(Formula):
    """A Formula with, beside its one-step mistakes, the standard mistakes that do several
    steps another way at once (the LayerNorms after the residuals: post-LN; both dropouts
    left out): together {sentence: {step name: function}}, each sentence worded in full."""

    def __init__(self, steps, variants=None, optional=(), together=None):
        super().__init__(steps, variants, optional)
        self.together = dict(together or {})

    def mistakes(self, inputs):
        found = super().mistakes(inputs)
        for sentence, replace in self.together.items():
            try:
                found[sentence] = self.run(inputs, replace)
            except (RuntimeError, KeyError):
                continue
        return found


def block_formula(dims, num_heads, training=False):
    """A pre-LayerNorm decoder block: x + drop(attn(ln1(x))) under the causal mask, then
    x + drop(ff(ln2(x))), ff = Linear, GELU, Linear. Inputs: "x" (B, L, d_model), "mask"
    (L, L), "ln1_w", "ln1_b", "ln2_w", "ln2_b", "ff0_w", "ff0_b", "ff2_w", "ff2_b", the
    attention's "q_w" ... "o_b" (multihead_formula) and "drop" (2, B, L, d_model): the
    dropout masks (kept / (1 - p), else 0) of the first and the second dropout call, in the
    order they are made (the attention's output, then the feed-forward's).
    training: the dropout masks act (else dropout is the identity, as in eval mode)."""
    attention = multihead_formula(dims, num_heads)
    functional = torch.nn.functional

    def norm(t, x, which):
        return functional.layer_norm(t, t.shape[-1:], x[f"{which}_w"], x[f"{which}_b"])

    def attend(h, x, mask="mask", how=None):
        allowed = x.get(mask)
        if allowed is not None and how is not None:
            allowed = how(allowed)
        return attention.run({**x, "query": h, "key": h, "value": h, "mask": allowed})

    def ff(t, x, activation=functional.gelu):
        return _linear(activation(_linear(t, x, "ff0")), x, "ff2")

    # the masks go to the dropout calls in the order they are made (as a seeded nn.Dropout
    # draws them): a dropout left out shifts the later ones to the earlier masks
    def dropout(which, on=training):
        return (lambda st, x: _with(st, **{which: st[which] * x["drop"][st.get("drawn", 0)],
                                           "drawn": st.get("drawn", 0) + 1})) if on \
            else (lambda st, _x: st)

    def sum_dropped(which):  # dropout on x + sublayer(x): the residual and the dropout as one
        return lambda st, x: _with(st, x=x["drop"][st.get("drawn", 0)] * (st["x"] + st[which]),
                                   drawn=st.get("drawn", 0) + 1)

    steps = [("ln1", lambda _v, x: {"x": x["x"], "h": norm(x["x"], x, "ln1")}),
             ("attention", lambda st, x: _with(st, a=attend(st["h"], x))),
             ("attention dropout", dropout("a")),
             ("first residual", lambda st, _x: _with(st, x=st["x"] + st["a"])),
             ("ln2", lambda st, x: _with(st, h=norm(st["x"], x, "ln2"))),
             ("feed-forward", lambda st, x: _with(st, f=ff(st["h"], x))),
             ("feed-forward dropout", dropout("f")),
             ("second residual", lambda st, _x: st["x"] + st["f"])]
    variants = {
        "ln1": {"uses ln2": lambda _v, x: {"x": x["x"], "h": norm(x["x"], x, "ln2")}},
        "attention": {
            "has no causal mask (every position attends to every other, future ones "
            "included: causal_mask(L) is True on and below the diagonal)":
                lambda st, x: _with(st, a=attend(st["h"], x, None)),
            "uses the complement of the causal mask (the causal mask is reversed: position i "
            "attends to the positions after it; True means may attend)":
                lambda st, x: _with(st, a=attend(st["h"], x, how=lambda m: ~m)),
            "uses the causal mask's transpose (an upper triangle, e.g. triu: position i "
            "attends to positions i..L-1 instead of 0..i)":
                lambda st, x: _with(st, a=attend(st["h"], x, how=lambda m: m.mT))},
        "first residual": {"adds the normalised input instead of x":
                           lambda st, _x: _with(st, x=st["h"] + st["a"])},
        "ln2": {"uses ln1": lambda st, x: _with(st, h=norm(st["x"], x, "ln1"))},
        "feed-forward": {"reads the block's input instead of the attention's output":
                         lambda st, x: _with(st, f=ff(norm(x["x"], x, "ln2"), x)),
                         "uses ReLU instead of GELU":
                         lambda st, x: _with(st, f=ff(st["h"], x, functional.relu))},
        "second residual": {"adds the normalised input instead of x":
                            lambda st, _x: st["h"] + st["f"]}}
    def no_ln1(_value, x):  # the attention (and the first residual) read x itself
        return {"x": x["x"], "h": x["x"]}

    skips = {"first residual": lambda st, _x: _with(st, x=st["a"]),
             "ln2": lambda st, _x: _with(st, h=st["x"]),
             "second residual": lambda st, _x: st["f"]}
    together = {
        "the attention reads x instead of ln1(x) (the ln1 step is left out; the residual "
        "adds x itself)": {"ln1": no_ln1},
        "the LayerNorms come after the residual additions, x = ln(x + sublayer(x)) (post-LN, "
        "the 2017 Transformer's), where this block is pre-LayerNorm: x + sublayer(ln(x))": {
            "ln1": no_ln1,
            "first residual": lambda st, x: _with(st, x=norm(st["x"] + st["a"], x, "ln1")),
            "ln2": skips["ln2"],
            "second residual": lambda st, x: norm(st["x"] + st["f"], x, "ln2")},
        "both residual steps are left out (the residual connections are missing: each "
        "sublayer's output must be added to its input, x = x + attn(ln1(x)), then "
        "x = x + ff(ln2(x)))": {
            "first residual": skips["first residual"],
            "second residual": skips["second residual"]}}
    if training:
        skips.update({"attention dropout": None, "feed-forward dropout": None})
        together.update({
            "both dropout steps are left out (dropout is never applied, also in training "
            "mode: self.drop on each sublayer's output)": {
                "attention dropout": lambda st, _x: st, "feed-forward dropout": lambda st, _x: st},
            "the dropout applies to the sum x + sublayer(x) instead of the sublayer's output "
            "before it is added to x": {
                "attention dropout": lambda st, _x: st,
                "first residual": sum_dropped("a"),
                "feed-forward dropout": lambda st, _x: st,
                "second residual": lambda st, x: sum_dropped("f")(st, x)["x"]}})
    else:
        together["dropout acts in eval mode (the masks of the grader's seed applied): use "
                 "self.drop, or F.dropout(..., training=self.training), which eval() turns "
                 "off"] = {"attention dropout": dropout("a", on=True),
                           "feed-forward dropout": dropout("f", on=True)}
    return Together(steps, variants, skips, together)


def cached_block_formula(dims, num_heads, prefill):
    """The block run with a KV cache: a prefill of `prefill` positions, then one position per
    call, its outputs concatenated (B, L, d_model): the full forward's. Inputs: those of
    block_formula. The mistake: each call attends only over the positions it is given."""
    block = block_formula(dims, num_heads)

    def alone(_value, x):
        L = x["x"].shape[1]
        pieces = [(0, min(prefill, L))] + [(t, t + 1) for t in range(prefill, L)]
        return torch.cat([block.run({**x, "x": x["x"][:, a:b], "mask": x["mask"][a:b, a:b]})
                          for a, b in pieces], dim=1)

    return Together([("cache", lambda _v, x: block.run(x))], together={
        "each call attends only over the positions it is given, not over those the cache "
        "holds (with `cache`, call cached_attention(self.attn, h, cache))": {"cache": alone}})


FORMULAS["pre-LayerNorm block"] = block_formula
FORMULAS["pre-LayerNorm block with a cache"] = cached_block_formula


STEP_PARAMETERS = ("emb", "pos", "w", "b", "readout")  # checks.capstone.StepModel's, in order


def training_step_formula(dims, p, lr):
    """One step of next-token training of checks.capstone.StepModel (dropout p) with SGD
    (learning rate lr), as a vector: the loss, then every parameter after the step, flattened
    in STEP_PARAMETERS' order. Inputs: the parameters by name, "keep" (the model's fixed
    dropout mask), "stale_<name>" (the gradients left in .grad before the step) and "batch"
    (B, L + 1) token ids."""
    from .capstone import StepModel  # the stand-in model the check hands train_step
    functional = torch.nn.functional

    def logits(st, x):
        model = StepModel({n: x[n] for n in STEP_PARAMETERS}, x["keep"], p)
        return _with(st, model=model, logits=model.train(st["training"])(st["inputs"]))

    def loss(how=None, **options):
        return lambda st, _x: _with(st, loss=functional.cross_entropy(
            (how or (lambda z: z))(st["logits"]).flatten(0, 1), st["targets"].flatten(),
            **options))

    def update(step=True):
        def after(st, x):
            parameters = [getattr(st["model"], n) for n in STEP_PARAMETERS]
            grads = torch.autograd.grad(st["loss"], parameters)
            new = [w - lr * (g + st["stale"][n]) if step else w
                   for n, w, g in zip(STEP_PARAMETERS, parameters, grads)]
            return torch.cat([st["loss"].reshape(1)] + [w.flatten() for w in new]).detach()
        return after

    def pair(inputs, targets):
        return lambda st, x: _with(st, inputs=x["batch"][:, inputs], targets=x["batch"][:, targets])

    steps = [("model.train()", lambda _v, _x: {"training": True}),
             ("inputs and targets", pair(slice(None, -1), slice(1, None))),
             ("logits", logits),
             ("cross-entropy", loss()),
             ("optimizer.zero_grad()", lambda st, _x: _with(
                 st, stale={n: 0.0 for n in STEP_PARAMETERS})),
             ("loss.backward() and optimizer.step()", update())]
    variants = {
        "inputs and targets": {
            "uses batch[:, :-1] as the targets too (the input tokens themselves, not the "
            "next ones: targets = batch[:, 1:])": pair(slice(None, -1), slice(None, -1)),
            "exchanges them: inputs batch[:, 1:], targets batch[:, :-1] (the previous "
            "tokens; the model predicts the next: inputs = batch[:, :-1])":
                pair(slice(1, None), slice(None, -1))},
        "cross-entropy": {
            "is given the softmax of the logits (F.cross_entropy applies log_softmax itself: "
            "pass the raw logits)": loss(lambda z: z.softmax(-1)),
            "sums over the positions (reduction='sum') instead of the mean":
                loss(reduction="sum")}}
    skips = {"model.train()": lambda _v, _x: {"training": False},
             "optimizer.zero_grad()": lambda st, x: _with(
                 st, stale={n: x[f"stale_{n}"] for n in STEP_PARAMETERS})}
    return Together(steps, variants, skips, together={
        "the parameters did not change (no update: optimizer.step() after loss.backward(), "
        "with optimizer.zero_grad() before the backward pass, not between it and the step)":
            {"loss.backward() and optimizer.step()": update(step=False)}})


FORMULAS["training step"] = training_step_formula


def generation_formula(dims, num_tokens, use_cache):
    """Greedy decoding of checks.capstone.DecoderModel: the logits each new token was chosen
    from, (B, num_tokens, V), in eval mode without gradients; with use_cache, a prefill of the
    prompt then the newest token alone at start = len(cache). Inputs: the model's parameters
    by name ("emb", "pos", "wq", "wk", "wv", "readout"), "keep" (its dropout mask in training
    mode) and "prompt" (B, P) token ids."""
    from .capstone import DecoderModel  # the stand-in model the check hands generate

    def decode(cfg, x):
        params = {n: x[n] for n in ("emb", "pos", "wq", "wk", "wv", "readout")}
        model = DecoderModel(params, x["keep"]).train(cfg["training"])
        held = model.new_caches() if use_cache else None
        tokens, chosen = x["prompt"], []
        with torch.no_grad():
            for step in range(num_tokens):
                fed, start = tokens, 0                       # the prefill, or no cache
                if use_cache and step:                       # then the newest token alone
                    fed, start = tokens[:, -1:], cfg["start"](len(held[0]))
                logits = model(fed, caches=held, start=start)               # (B, L, V)
                chosen.append(logits[:, cfg["position"]])                   # (B, V)
                tokens = torch.cat([tokens, chosen[-1].argmax(-1, keepdim=True)], 1)
        return torch.stack(chosen, 1)                                       # (B, T, V)

    steps = [("model.eval()", lambda _v, _x: {"training": False}),
             ("start = len(cache)", lambda cfg, _x: _with(cfg, start=lambda cached: cached)),
             ("logits[:, -1]", lambda cfg, _x: _with(cfg, position=-1)),
             ("decoding", decode)]
    variants = {"logits[:, -1]": {"reads logits[:, 0] (the first position; the next token is "
                                  "predicted by the last)": lambda cfg, _x: _with(cfg, position=0)}}
    if use_cache:
        variants["start = len(cache)"] = {
            "passes len(cache) + 1 (the newest token sits at position len(cache): positions "
            "count from 0)": lambda cfg, _x: _with(cfg, start=lambda cached: cached + 1),
            "passes 0 (start's default) after the prefill: the newest token sits at position "
            "len(cache)": lambda cfg, _x: _with(cfg, start=lambda cached: 0)}
    skips = {"model.eval()": lambda _v, _x: {"training": True}}
    return Together(steps, variants, skips, together={
        "the logits of each step are returned as probabilities (their softmax): return the "
        "logits themselves, logits[:, -1] of each step":
            {"decoding": lambda cfg, x: decode(cfg, x).softmax(-1)}})


FORMULAS["greedy generation"] = generation_formula
