"""Checks for the capstone: the student's decoder block (TransformerBlock: pre-RMSNorm,
grouped-query attention with rotary positions, a SwiGLU feed-forward), train_step and
generate (with and without the KV cache).

Each check builds its inputs from `seed` and reaches the student's code only through the
runtime (common.py): it builds the objects the student's code is handed with common.given
(under the autograder they live in the student's process), loads its own parameters into
them (common.load_weights), calls the student's code on its own inputs (common.observe) and
reads the state back by value. It judges those values against answers computed here in
float64 by the @reference functions (in the student's kit, read from its fixtures), and
against what the classic mistakes give on the same inputs, so that a message names the
mistake. What only the student's process could report (the stand-in models' records of
their calls) only names a mistake that the values already fail.

transformer_block receives the chapter's TransformerBlock class and KVCache class and uses
this interface: TransformerBlock(d_model, num_heads, num_kv_heads, d_ff, dropout) with
parameters named norm1.weight, attn.{q,k,v,out}_proj.{weight,bias}, norm2.weight,
gate_proj.weight, up_proj.weight, down_proj.weight (nn.Module names), forward(x,
cache=None) -> (B, L, D); KVCache() empty.
train_step and generate receive stand-in models built here (StepModel, DecoderModel), so
that they are judged on their own, whatever the block does.

Shape letters: B batch, L sequence length, D d_model, F d_ff, V vocab_size, P prompt
length, T tokens generated.
"""
import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import close, current_dims, expect_type, family_reason, step_mistakes
from .common import (MALFORMED, CheckFailure, attempt, by_owner, check, construct, expect_close,
                     expect_tensor, fail, generator, given, is_class, is_module,
                     judge_construct, load_weights, max_error, observe, passed, raised,
                     random_inputs, read_back, reference, revive, type_name)
from .diagnose import explained, one_step, restate_error, state_dependent
from .language import translated

# Every message of the chapter's checks, one template each with named fields, in one place
# (a second language translates them here); the families' sentences are diagnose.MESSAGES.
MESSAGES = translated(__name__) | {
    # ---------------------------------------------------------------- exercise 1: the block
    "classes": "pass the two classes to the check: check.transformer_block(TransformerBlock, "
               "KVCache); got {cls} and {cache_cls}",
    "to_raised": "{where}.to(dtype={dtype}, device={device}) raised {kind}: {message}",
    "parameter": "{where}: parameter {name} {found}, expected {want}. Build the submodules "
                 "with the exercise's names and sizes: norm1 and norm2 (nn.RMSNorm(d_model)), "
                 "attn (GroupedQueryAttention(d_model, num_heads, num_kv_heads)), gate_proj "
                 "and up_proj (nn.Linear(d_model, d_ff, bias=False)), down_proj "
                 "(nn.Linear(d_ff, d_model, bias=False)) and drop (nn.Dropout(dropout)).",
    "parameter_shape": "has shape {shape}",
    "parameter_extra": "{where}: the block has {name}, which the exercise's block has not: "
                       "{why}",
    "no_linear_bias": "its linear layers are nn.Linear(..., bias=False), as Llama's (a bias "
                      "nn.Linear draws at random changes every output).",
    "no_norm_bias": "nn.RMSNorm has a weight and no bias (a LayerNorm has both; this block's "
                    "norms are RMSNorms, nn.RMSNorm(d_model)).",
    "parameter_missing": "is missing",
    "block_tuple": "{name} returned a tuple of {count} items; a block returns one tensor "
                   "(B, L, d_model).",
    "eval_run": "{where}(x) in eval mode",
    "dropout_at_eval": "{where}: in eval mode two calls on the same input gave different "
                       "outputs: dropout is still on. Use the block's nn.Dropout module "
                       "(self.drop), which model.eval() switches off; not F.dropout(x, p) "
                       "with its default training=True.",
    "leak": "{where}: future tokens leak: changing the positions >= {cut} changed the output at "
            "positions < {cut} (largest change {change:.3g}). Each position may read only "
            "itself and the positions before it: attend through "
            "rotary_cached_attention(self.attn, h, cache), which applies the causal mask.",
    "block_hint": "Pre-norm: x = x + attn(norm1(x)), the attention causal with rotary "
                  "positions (rotary_cached_attention(self.attn, h, cache)), then "
                  "x = x + down_proj(silu(gate_proj(h)) * up_proj(h)) with h = norm2(x).",
    "cached_run": "{where} with a cache (a prefill of {cut} positions, then one per call)",
    "cache_hint": "With `cache`, the block must give the outputs it gives without: pass "
                  "that cache to rotary_cached_attention(self.attn, h, cache) (chapter 7), "
                  "which rotates the new positions from len(cache) on and attends over "
                  "the cached ones too.",
    "training_run": "{where}(x) in training mode, under the dropout masks that "
                    "torch.manual_seed(0) draws (the grader's),",
    "training_call": "{where}(x) in training mode",
    "dropout_hint": "Dropout applies to each sublayer's output before it is added to x, "
                    "x = x + drop(attn(norm1(x))), then x = x + drop(ff(norm2(x))); never to the "
                    "sum x + sublayer(x), and on both branches, through self.drop.",
    "block_passed": "TransformerBlock: x (B, L, d_model) = {shape} ({dtype}), {heads} query "
                    "heads sharing {kv_heads} key/value heads -> pre-RMSNorm causal block with "
                    "rotary positions and a SwiGLU feed-forward; no future leakage; prefill + "
                    "{steps} cached steps equal the full forward; dropout on each sublayer's "
                    "output in training mode only",
    # ----------------------------------------------------------- exercise 2: train_step
    "model_before": "the model before train_step ran",
    "parameter_after": "model.{parameter} after {name}",
    "step_never_called": "{name} never called the model: logits = model(batch[:, :-1]).",
    "loss_kind": "Return the loss as a Python number, loss.item(): a tensor keeps the step's "
                 "graph alive.",
    "step_passed": "train_step: batch (B, L + 1) = {shape} ({dtype}) -> one SGD step in "
                   "training mode on the mean next-token cross-entropy; loss returned as a "
                   "number",
    "step_eval_mode": "{name}: the model ran in eval mode, so its dropout was off during "
                      "training: call model.train() at the start of the step (the model may "
                      "come from an evaluation).",
    "loss_value": "{name} returned the loss {got:.6g}, expected {want:.6g} (the mean "
                  "cross-entropy of the logits of batch[:, :-1] against batch[:, 1:], before "
                  "the step).",
    "parameters": "{name}: the loss is right but the parameters {wrong} are not those of one "
                  "step of the optimizer: optimizer.zero_grad(), loss.backward(), "
                  "optimizer.step(), each once.",
    # ------------------------------------------------------------- exercise 3: generate
    "gradients": "gradients enabled: generation needs none; decorate generate with "
                 "@torch.no_grad() (or use `with torch.no_grad():`), which saves the memory "
                 "of the whole graph.",
    "generate_call": "generate(model, prompt, {T}, use_cache={use_cache})",
    "pair": "{name} must return a pair (tokens, logits), got {got}{forgot}.",
    "forgot": " (did you forget to return it?)",
    "token_ids": "{name}: tokens must be token ids (torch.long), got {dtype}",
    "gen_never_called": "{name} never called the model.",
    "gen_training": "{name}: the model ran in training mode, so dropout changed its "
                    "predictions: call model.eval() before generating (and restore the mode "
                    "after).",
    "gen_gradients": "{name}: the model ran with {gradients}",
    "gen_no_cache": "{name}: use_cache=True but the model was never given the caches: create "
                    "them with model.new_caches() and pass caches=caches at every call.",
    "gen_uncached_calls": "{name}: use_cache=False but the model was given caches: without the "
                          "cache, call model(tokens) on the whole sequence at every step.",
    "gen_refeed": "{name}: with the cache, step {step} fed {L} positions: after the prefill, "
                  "feed only the newest token, tokens[:, -1:]; the cache holds the keys and "
                  "values of the others, and feeding them again appends them twice.",
    "gen_start": "{name}: the position of the newest token is off: a call with {cached} cached "
                 "positions passed start={start}. The tokens fed sit right after the cached "
                 "ones, start = len(cache) = tokens.shape[1] - 1 after the prefill (positions "
                 "count from 0).",
    "prompt_kept": "{name}: tokens[:, :P] must be the prompt itself, followed by the new "
                   "tokens.",
    "tokens": "{name}: tokens",
    "logits": "{name}: logits",
    "beyond_positions": "positions {first}..{last} are beyond the model's {positions} "
                        "positions",
    "generate_hint": "Each step: the logits of the last position, logits[:, -1], then the "
                     "argmax over the vocabulary appended to the tokens.",
    "token": "{name}: token {index} of sequence {sequence} is {got}, but the largest logit of "
             "that step is at {want}: greedy decoding appends logits[:, -1].argmax(-1).",
    "from_eval": "generate(model, prompt, {T}, use_cache=False) on a model in eval mode",
    "generate_passed": "generate: prompt (B, P) = {shape} -> {T} greedy tokens, the same with "
                       "and without the KV cache (prefill, then one token per step at start = "
                       "len(cache)); eval mode, no gradients; the model left in the mode it "
                       "came in",
    "token_not_argmax": "{name}: token {index} of sequence {sequence} is {got}, but the "
                        "largest of the logits it returned for that step is at {want}: greedy "
                        "decoding appends the argmax over the vocabulary of the last "
                        "position's logits, logits[:, -1].argmax(-1) (no sampling)",
    "gen_caches_made": "{name}: model.new_caches() was called {count} times in one "
                       "generation: make the caches once, before the loop, and pass the same "
                       "ones at every step (a new cache holds none of the earlier keys and "
                       "values)",
    # the starting states of generate (diagnose.state_dependent), in words
    "from_training_mode": "a model in training mode",
    "from_eval_mode": "a model in eval mode",
    # the block built without `dropout`: the exercise's default, dropout=0.0
    "default_call": "TransformerBlock({sizes})",
    "default_dropout": "{where}(x) in training mode, built without `dropout`, gives other "
                       "outputs than in eval mode ({count} of {total} entries differ): the "
                       "exercise's default is dropout=0.0, no dropout at all "
                       "(def __init__(self, d_model, num_heads, num_kv_heads, d_ff, "
                       "dropout=0.0))",
    "dropout_argument": "; with dropout=0.0 training mode is eval mode, so the block's dropout "
                        "acts at another rate: its nn.Dropout must take the argument, "
                        "nn.Dropout(dropout), never a fixed rate",
    # what an error or a size of the student's code means in these exercises
    "in_this_exercise": "\nIn this exercise: {reason}.",
    "one_position_off": "the logits hold {rows} rows and the targets {other}, {B} sequences of "
                        "{L_more} and of {L} positions: likely the inputs or the targets not cut "
                        "to L positions (the inputs are batch[:, :-1] and the targets batch[:, "
                        "1:], L = {L} positions each: the model is given the first L tokens)",
    "float_loss": "the loss is a Python number on that line: .item() (or float()) turned the loss "
                  "tensor into a number before loss.backward(), and a number has no backward; "
                  "call backward on the loss tensor and take loss.item() only for the value "
                  "returned",
    "tokens_count": "{name}: tokens has {got} positions where it should have P + num_tokens = "
                    "{want}: one token {which} (the loop appends one token per step, "
                    "num_tokens steps: range(num_tokens))",
    "too_few": "too few",
    "too_many": "too many",
}
# A block chains an RMSNorm (a mean square and a division), the rotary attention and a
# gated MLP: about three times the roundings of chapter 3's forward, with the softmax's
# amplification on top, so its comparisons allow `CONDITION` times the base tolerance.
CONDITION = 40.0


def _drawer(seed, dtype):
    """draw(*shape, scale=1.0): standard-normal tensors times `scale`, drawn in float64 from
    generator(seed) and rounded to dtype (each call continues the same stream)."""
    gen = generator(seed)

    def draw(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)
    return draw, gen


# ============================================================ exercise 1: the block
@reference
def _block_inputs(seed, B, L, d_model, num_kv_heads, d_ff, num_heads, dtype):
    """(P {parameter name: float64 tensor, rounded to dtype}, x (B, L, D) float64 rounded to
    dtype, x_future: x with positions >= L // 2 replaced)."""
    rounded, _ = _drawer(seed, dtype)

    def draw(*shape, scale):
        return rounded(*shape, scale=scale).double()

    D, kv_size = d_model, num_kv_heads * (d_model // num_heads)
    P = {"norm1.weight": 1.0 + draw(D, scale=0.3), "norm2.weight": 1.0 + draw(D, scale=0.3),
         # gate and up at the same scale: SwiGLU's two branches, which a swap must change
         "gate_proj.weight": draw(d_ff, D, scale=1.5 / math.sqrt(D)),
         "up_proj.weight": draw(d_ff, D, scale=1.5 / math.sqrt(D)),
         "down_proj.weight": draw(D, d_ff, scale=1 / math.sqrt(d_ff))}
    for name, rows in (("q", D), ("k", kv_size), ("v", kv_size), ("out", D)):
        # queries and keys a little larger: sharper attention tells more mistakes apart
        scale = (2.0 if name in "qk" else 1.0) / math.sqrt(D)
        P[f"attn.{name}_proj.weight"] = draw(rows, D, scale=scale)
        P[f"attn.{name}_proj.bias"] = draw(rows, scale=0.3)
    (x,) = random_inputs((B, L, D), seed=seed + 1, dtype=dtype)
    x = x.double()
    (noise,) = random_inputs((B, L, D), seed=seed + 2, dtype=dtype)
    x_future = x.clone()
    x_future[:, L // 2:] += 3.0 * noise.double()[:, L // 2:]
    return P, x, x_future


def _block_run(cls, cache_cls, sizes, P, x, x_future, dtype, device):
    """Build cls(*sizes, 0.3) (sizes: d_model, num_heads, num_kv_heads, d_ff) where the
    student's code runs, move it to dtype and device in eval mode and load the grader's
    parameters P ("found": what load_weights found there). Then call it on the grader's
    inputs, each output sent back by value ([result, error] pairs): after
    torch.manual_seed(0), on x, x_future and x again; with a cache_cls() cache, the first
    half of the positions as a prefill, then one position per call ("cached"); and in
    training mode after torch.manual_seed(0) ("train")."""
    block, data = construct(cls, *sizes, 0.3)
    if block is None:
        return data
    block, data["to_error"] = attempt(lambda: block.to(dtype=dtype, device=device).eval())
    if data["to_error"] is not None:
        return data
    data["found"] = load_weights(block, _weights_sent(P))
    if _missing(data["found"], P):
        return data
    x, x_future = (t.to(dtype=dtype, device=device) for t in (x, x_future))

    def run(*args, **kwargs):
        seen = observe(block, *args, **kwargs)
        return [seen.result, seen.error]

    # eval mode: dropout must be off; seeded as the training-mode run below is, so that a
    # dropout left on draws the masks the grader knows (_dropout_masks) and shows in values
    given("torch:manual_seed", 0)
    data["out"], data["future"] = run(x), run(x_future)
    data["again"] = run(x)
    cache, data["cache_error"] = attempt(cache_cls)
    if data["cache_error"] is None:
        half = max(x.shape[1] // 2, 1)
        steps = [run(x[:, :half], cache=cache)]
        steps += [run(x[:, t:t + 1], cache=cache) for t in range(half, x.shape[1])]
        data["cached"] = steps
    _, data["train_error"] = attempt(lambda: block.train())
    given("torch:manual_seed", 0)
    data["train"] = run(x)
    data["default"] = _default_run(cls, sizes, P, x, dtype, device)
    return data


def _default_run(cls, sizes, P, x, dtype, device):
    """cls(*sizes), `dropout` left to its default (0.0: no dropout), with the grader's
    parameters P, called on x in training mode after torch.manual_seed(0): an observed
    [result, error] pair, or [None, what raised] where it could not be built or moved."""
    block, made = construct(cls, *sizes)
    if block is None:
        return [None, made["error"]]
    block, error = attempt(lambda: block.to(dtype=dtype, device=device).train())
    if error is not None:
        return [None, error]
    load_weights(block, _weights_sent(P))
    given("torch:manual_seed", 0)
    seen = observe(block, x)
    return [seen.result, seen.error]


def _dropout_masks(shape, p, dtype, count=2, seed=0, shapes=None):
    """The `count` dropout masks (kept / (1 - p), else 0) that nn.Dropout(p) draws, one per
    call on a tensor of `shape` in `dtype`, right after torch.manual_seed(seed): the grader
    controls the randomness of the training-mode run, so where the dropout sits shows in the
    values. (Drawn here, by the same torch that runs the student's block: CPU dropout is
    empty_like(x).bernoulli_(1 - p) / (1 - p).) shapes: one shape per call instead (calls on
    tensors of different sizes)."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.empty(size, dtype=dtype).bernoulli_(1 - p, generator=gen) / (1 - p)
            for size in (shapes or [shape] * count)]


# parameters the exercise's block must not have, with the reason a message gives
ABSENT = {"gate_proj.bias": "no_linear_bias", "up_proj.bias": "no_linear_bias",
          "down_proj.bias": "no_linear_bias", "norm1.bias": "no_norm_bias",
          "norm2.bias": "no_norm_bias"}


def _weights_sent(P):
    """What load_weights receives: P by owner, and None for each ABSENT part (nothing to
    copy: the report then says whether the block has it)."""
    weights = by_owner(P)
    for name in ABSENT:
        owner, _, part = name.rpartition(".")
        weights.setdefault(owner, {})[part] = None
    return weights


# the block's submodules -> the names of formulas.block_formula's inputs (name_w, name_b)
_FORMULA_NAMES = {"norm1": "n1", "norm2": "n2", "gate_proj": "gate", "up_proj": "up",
                  "down_proj": "down", "attn.q_proj": "q", "attn.k_proj": "k",
                  "attn.v_proj": "v", "attn.out_proj": "o"}


def _formula_inputs(P, x, masks, hidden=None):
    """The inputs of formulas.block_formula from the block's parameters P {parameter name:
    tensor}, x (B, L, D) and the dropout masks (B, L, D) each: "x", "n1_w", "n2_w",
    "gate_w", "up_w", "down_w", the attention's "q_w" ... "o_b", "drop" (3, B, L, D), and
    "drop_hidden" (B, L, F), the `hidden` mask, where given."""
    inputs = {f"{_FORMULA_NAMES[name.rpartition('.')[0]]}_{name.rpartition('.')[2][0]}": value
              for name, value in P.items()}
    extra = {} if hidden is None else {"drop_hidden": hidden}
    return {**inputs, "x": x, "drop": torch.stack(masks), **extra}


@reference
def _block_answer(inputs, num_heads, num_kv_heads, training=False):
    """The block's output (B, L, D), float64, for formulas.block_formula's `inputs`: in eval
    mode, or (training) under the dropout masks inputs["drop"]."""
    from . import formulas  # grader-only (the right answers): the kit removes this body
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    return formulas.block_formula({}, num_heads, num_kv_heads, training).run(inputs)


def _missing(found, P):
    """{name: its shape (a tuple) or None} of the parameters of P that load_weights' report
    `found` (a common.Loaded) says the block lacks or holds in another shape."""
    missing = {}
    for name, value in P.items():
        owner, _, part = name.rpartition(".")
        slot = found.slot(owner, part)
        if slot != tuple(value.shape):
            missing[name] = slot if isinstance(slot, tuple) else None
    return missing


def _output(item, name, shape, dtype):
    """The tensor of an observed [result, error] pair, required of `shape`."""
    if not (isinstance(item, (list, tuple)) and len(item) == 2):
        fail(MALFORMED.format(what=name))
    raised(item[1], name)
    out = revive(item[0])
    if isinstance(out, tuple):
        fail(MESSAGES["block_tuple"].format(name=name, count=len(out)))
    expect_tensor(out, name, shape=shape, dtype=dtype, shape_names="(B, L, d_model)")
    return out.detach().double().cpu()


@check
def transformer_block(cls, cache_cls, *, seed=0, B=2, L=6, d_model=8, num_heads=2,
                      num_kv_heads=1, d_ff=12, dtype=torch.float32, device="cpu"):
    """cls(d_model, num_heads, num_kv_heads, d_ff, dropout): forward(x (B, L, D), cache=None)
    -> (B, L, D), a pre-RMSNorm causal block of grouped-query attention with rotary positions
    and a SwiGLU feed-forward; with cache_cls() caches, prefill + one position per call
    equals the full forward; dropout on each sublayer's output, only in training mode (judged
    under the dropout masks the grader's seed draws)."""
    if not (is_class(cls) and is_class(cache_cls)):
        fail(MESSAGES["classes"].format(cls=type_name(cls), cache_cls=type_name(cache_cls)))
    sizes = (d_model, num_heads, num_kv_heads, d_ff)
    where = f"TransformerBlock({', '.join(map(str, sizes))}, 0.3)"
    P, x, x_future = _block_inputs(seed, B, L, d_model, num_kv_heads, d_ff, num_heads, dtype)
    data = _block_run(cls, cache_cls, sizes, P, x, x_future, dtype, device)
    judge_construct(data, where)
    error = data["to_error"]
    if error is not None:
        fail(MESSAGES["to_raised"].format(where=where, dtype=dtype, device=device,
                                          kind=error[0], message=error[1]))
    missing = _missing(data["found"], P)
    for name in P:
        if name in missing:
            shape = missing[name]
            fail(MESSAGES["parameter"].format(
                where=where, name=name, want=tuple(P[name].shape),
                found=MESSAGES["parameter_shape"].format(shape=shape)
                if isinstance(shape, tuple) else MESSAGES["parameter_missing"]))
    for name, why in ABSENT.items():
        if isinstance(data["found"].slot(*name.rsplit(".", 1)), tuple):
            fail(MESSAGES["parameter_extra"].format(where=where, name=name, why=MESSAGES[why]))
    shape = (B, L, d_model)
    out = _output(data["out"], f"{where}(x)", shape, dtype)
    future = _output(data["future"], f"{where}(x)", shape, dtype)
    again = _output(data["again"], f"{where}(x)", shape, dtype)
    cut = max(L // 2, 1)  # x_future differs from position L // 2 on; the cache's prefill
    # the formula with one step left out or moved (checks/diagnose.py, formulas.py), in eval
    # mode, with the cache, and in training mode under the masks of the grader's seed
    # (three masks: a dropout applied twice draws one more than the block's two)
    # (and the mask of a second call on the feed-forward's hidden (B, L, d_ff) features)
    hidden = _dropout_masks(shape, 0.3, dtype, shapes=[shape, (B, L, d_ff)])[1]
    inputs = _formula_inputs(P, x, _dropout_masks(shape, 0.3, dtype, count=3), hidden)
    heads = dict(num_heads=num_heads, num_kv_heads=num_kv_heads)
    expected = _block_answer(inputs, **heads).to(dtype).double()
    in_training = _block_answer(inputs, **heads, training=True).to(dtype).double()
    mistakes = {state: step_mistakes(formula, inputs, current_dims(), **heads, **options)
                for state, formula, options in (
                    ("eval", "decoder block", {}),
                    ("cached", "decoder block with a cache", {"prefill": cut}),
                    ("training", "decoder block", {"training": True}))}
    tolerance = dict(dtype=dtype, condition=CONDITION)

    def named(name):
        """A family's message for the eval-mode output, or None."""
        reason = family_reason(out, expected, mistakes=mistakes["eval"], **tolerance)
        return reason and explained(name, reason)

    if not torch.equal(out, again):
        fail(named(MESSAGES["eval_run"].format(where=where))
             or MESSAGES["dropout_at_eval"].format(where=where))
    change = max_error(future[:, :L // 2], out[:, :L // 2]) if L > 1 else 0.0
    if change > 0 and not expect_close_quiet(future[:, :L // 2], out[:, :L // 2], **tolerance):
        fail(named(f"{where}(x)") or MESSAGES["leak"].format(where=where, cut=L // 2,
                                                             change=change))
    expect_close(out, expected, f"{where}(x)", mistakes=mistakes["eval"],
                 hint=MESSAGES["block_hint"], **tolerance)
    raised(data["cache_error"], "KVCache()")
    steps = data["cached"]
    pieces = [_output(item, f"{where}(x[:, {i}], cache=cache)" if i else
                      f"{where}(x[:, :{cut}], cache=cache)",
                      (B, cut if i == 0 else 1, d_model), dtype) for i, item in enumerate(steps)]
    expect_close(torch.cat(pieces, dim=1), expected,
                 MESSAGES["cached_run"].format(where=where, cut=cut),
                 mistakes=mistakes["cached"], hint=MESSAGES["cache_hint"], **tolerance)
    raised(data["train_error"], f"{where}.train()")
    # built without `dropout` (its default, 0.0), training mode gives the eval-mode output
    # (judged first: a dropout at a rate of its own fails the seeded comparison below too)
    built = MESSAGES["default_call"].format(sizes=", ".join(map(str, sizes)))
    by_default = _output(data["default"], MESSAGES["training_call"].format(where=built),
                         shape, dtype)
    if not close(by_default, expected, **tolerance):
        fail(MESSAGES["default_dropout"].format(
            where=built, count=int((by_default != out).sum()), total=out.numel())
             + MESSAGES["dropout_argument"])
    trained = _output(data["train"], MESSAGES["training_call"].format(where=where),
                      shape, dtype)
    expect_close(trained, in_training, MESSAGES["training_run"].format(where=where),
                 mistakes=mistakes["training"], hint=MESSAGES["dropout_hint"], **tolerance)
    passed(MESSAGES["block_passed"].format(shape=shape, dtype=dtype, steps=L - cut,
                                           heads=num_heads, kv_heads=num_kv_heads))


def expect_close_quiet(actual, expected, **tolerance):
    """True when expect_close would pass."""
    try:
        expect_close(actual, expected, "", **tolerance)
    except AssertionError:
        return False
    return True


# ============================================================ exercise 2: train_step
class StepModel(nn.Module):
    """A few-line causal language model for train_step's check: embeddings, a causal running
    mean (so each position sees its past), a tanh layer with a *fixed* dropout mask in
    training mode (so its output is known), and a linear readout. forward(tokens (B, L))
    -> logits (B, L, V). Records in `modes` whether each call ran in training mode: only to
    name a mistake that the parameters after the step already show."""

    def __init__(self, params, keep, p):
        super().__init__()
        for name, value in params.items():
            setattr(self, name, nn.Parameter(value.detach().clone()))
        self.register_buffer("keep", keep.detach().clone())
        self.p = p
        self.modes = []

    def forward(self, tokens):
        self.modes.append(bool(self.training))
        L = tokens.shape[1]
        x = self.emb[tokens] + self.pos[:L]                                  # (B, L, D)
        counts = torch.arange(1, L + 1, dtype=x.dtype, device=x.device)[:, None]
        past = x.cumsum(1) / counts                                          # (B, L, D)
        h = torch.tanh(past @ self.w + self.b)                               # (B, L, D)
        if self.training:
            h = h * self.keep[:L] / (1 - self.p)                             # fixed mask
        return h @ self.readout                                              # (B, L, V)


@reference
def _step_inputs(seed, B, L, vocab_size, d_model, p, dtype):
    """(params {name: tensor in dtype}, keep (L, D) 0/1 in dtype, stale gradients {name:
    tensor}, batch (B, L + 1) long)."""
    draw, gen = _drawer(seed, dtype)
    params = {"emb": draw(vocab_size, d_model), "pos": draw(L + 1, d_model, scale=0.5),
              "w": draw(d_model, d_model, scale=1.5 / math.sqrt(d_model)),
              "b": draw(d_model, scale=0.3),
              "readout": draw(d_model, vocab_size, scale=2.0 / math.sqrt(d_model))}
    keep = (torch.rand(L + 1, d_model, generator=gen) >= p).to(dtype)
    stale = {name: draw(*value.shape) for name, value in params.items()}
    batch = torch.randint(vocab_size, (B, L + 1), generator=gen)
    return params, keep, stale, batch


def _step_setup(params, keep, p, stale, lr, device):
    """(model, optimizer) that train_step's check hands the student's function, built where
    the student's code runs (common.given): a StepModel in eval mode (as after an evaluation)
    whose parameters hold the stale gradients `stale` {name: tensor}, and SGD(lr) over them."""
    model = StepModel(params, keep, p).to(device).eval()
    for name, parameter in model.named_parameters():
        parameter.grad = stale[name].to(device).clone()
    return model, torch.optim.SGD(model.parameters(), lr=lr)


def _step_run(fn, params, keep, stale, batch, p, lr, device):
    """Build _step_setup's model and optimizer, call fn(model, optimizer, batch) (observe():
    a batch changed in place fails there) and read back by value: what it returned or
    raised ("loss", "error"), the model's parameters before ("built") and after ("params"),
    and its `modes`."""
    model, optimizer = given("checks.capstone:_step_setup", params, keep, p, stale, lr, device)
    data = {"built": read_back(model, params)}
    # the step's documented job is to change the model (its mode, then its parameters)
    seen = observe(fn, model, optimizer, batch.to(device, copy=True), may_change=(model,))
    data.update(error=seen.error, loss=seen.result,
                params=read_back(model, params), modes=getattr(model, "modes", None))
    return data


def _step_formula_inputs(params, keep, stale, batch):
    """The inputs of formulas.training_step_formula: the parameters by name, "keep",
    "stale_<name>" and "batch"."""
    return {**params, "keep": keep, **{f"stale_{k}": v for k, v in stale.items()},
            "batch": batch}


@reference
def _step_answer(inputs, p, lr):
    """The loss, then every parameter after one SGD step (without momentum), flattened in
    the order of `params`, float64 (formulas.training_step_formula)."""
    from . import formulas  # grader-only (the right answers): the kit removes this body
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    return formulas.training_step_formula({}, p, lr).run(inputs)


def _same(actual, expected):
    """Values read back equal the grader's: tensors of one shape and dtype with equal
    entries, or dicts of such tensors with the same keys."""
    if isinstance(expected, dict):
        return (isinstance(actual, dict) and set(actual) == set(expected)
                and all(_same(actual[k], v) for k, v in expected.items()))
    return (isinstance(actual, torch.Tensor) and actual.shape == expected.shape
            and actual.dtype == expected.dtype and torch.equal(actual.cpu(), expected))


def _close_quiet(actual, expected, dtype):
    return expect_close_quiet(actual, expected.to(dtype).double(), dtype=dtype,
                              condition=CONDITION)


@check
def train_step(fn, *, seed=0, B=3, L=6, vocab_size=7, d_model=8, p=0.5, lr=0.5,
               dtype=torch.float32, device="cpu"):
    """fn(model, optimizer, batch (B, L + 1)) -> loss (a Python number): model.train(),
    logits of batch[:, :-1], mean cross-entropy against batch[:, 1:], zero_grad, backward,
    step."""
    name = "train_step(model, optimizer, batch)"
    params, keep, stale, batch = _step_inputs(seed, B, L, vocab_size, d_model, p, dtype)
    data = _step_run(fn, params, keep, stale, batch, p, lr, device)
    if not all(_same(data["built"][k], v) for k, v in params.items()):
        fail(MALFORMED.format(what=MESSAGES["model_before"]))
    # (b) the model's record of its calls: it only names a mistake the values fail
    modes = data["modes"] if isinstance(data["modes"], list) else []
    if data["error"] is None and not modes and _same(data["params"], params):
        fail(MESSAGES["step_never_called"].format(name=name))
    # logits and targets one position per sequence apart (B * (L + 1) rows against B * L)
    # (or a loss that is a Python number before the backward pass)
    error = data["error"]
    rows = {B * (L + 1), B * L}
    reason = (MESSAGES["one_position_off"].format(rows=B * (L + 1), other=B * L, B=B,
                                                  L_more=L + 1, L=L)
              if error and rows <= {int(v) for v in re.findall(r"\d+", error[1])}
              else MESSAGES["float_loss"]
              if error and "'float' object has no attribute 'backward'" in error[1] else None)
    if reason:
        fail((restate_error(name, *error[:2], current_dims(), *error[2:4]) or error[1])
             + MESSAGES["in_this_exercise"].format(reason=reason))
    raised(data["error"], name)
    loss = expect_type(revive(data["loss"]), float, name, hint=MESSAGES["loss_kind"])
    after = data["params"]
    for k in params:
        expect_tensor(after[k], MESSAGES["parameter_after"].format(parameter=k, name=name),
                      shape=params[k].shape)
    # the loss and every parameter after the step as one vector, each part compared at the
    # scale of its own values (as one comparison per tensor would)
    inputs = _step_formula_inputs(params, keep, stale, batch)
    expected = _step_answer(inputs, p, lr).to(dtype).double()
    mistakes = step_mistakes("training step", inputs, current_dims(), p=p, lr=lr)
    got = torch.cat([torch.tensor([float(loss)], dtype=torch.float64)]
                    + [after[k].double().flatten() for k in params])
    sizes = [1] + [params[k].numel() for k in params]
    scale = torch.cat([part.abs().max().expand(part.numel())
                       for part in expected.split(sizes)])
    if close(got, expected, dtype, scale, CONDITION):
        passed(MESSAGES["step_passed"].format(shape=tuple(batch.shape), dtype=dtype))
        return
    # the formula family alone: the vector's layout is the check's, not the exercise's
    reason = one_step(got, mistakes, lambda a, b: close(a, b, dtype, scale, CONDITION))
    if reason:
        fail(explained(name, reason))
    # (b) the values failed and no family names how: the model's record of its calls may
    # say why
    if not modes:
        fail(MESSAGES["step_never_called"].format(name=name))
    if False in modes:
        fail(MESSAGES["step_eval_mode"].format(name=name))
    expected_loss, *expected_params = expected.split(sizes)
    if not _close_quiet(got[:1], expected_loss, dtype):
        fail(MESSAGES["loss_value"].format(name=name, got=float(loss),
                                           want=expected_loss.item()))
    wrong = [k for k, part, want in zip(params, got[1:].split(sizes[1:]), expected_params)
             if not _close_quiet(part, want, dtype)]
    fail(MESSAGES["parameters"].format(name=name, wrong=", ".join(wrong)))


# ============================================================ exercise 3: generate
class _Cache:
    """The stand-in model's cache: keys and values (B, T, D) or None while empty, stored in
    bfloat16 precision (as quantised KV caches do; _stored)."""

    def __init__(self):
        self.keys = self.values = None

    def __len__(self):
        return 0 if self.keys is None else self.keys.shape[1]


class DecoderModel(nn.Module):
    """A one-layer, one-head causal decoder with the interface of the chapter's CharLM:
    forward(tokens (B, L), caches=None, start=0) -> logits (B, L, V), new_caches(). Built so
    that generate's mistakes show in what it returns: a fixed dropout mask acts in training
    mode, positions beyond the model's raise, a call with gradients enabled raises
    (MESSAGES["gradients"]), and the caches it made (`made`) can be read back. Each call is
    logged in `calls` as [L, start, cached positions before the call or None, training mode,
    gradients enabled]: only to name a mistake that the values already fail.
    Its cache stores keys and values rounded to bfloat16 (_stored), while the positions fed
    in a call attend with their own exact ones: the logits of each step then show how its
    keys were made (a prefill, then one new position per call appended to the cache it was
    given), which decoding without the cache, re-running the sequence in a fresh cache or
    writing the cache by hand cannot give, whatever the cache holds at the end."""

    def __init__(self, params, keep):
        super().__init__()
        for name, value in params.items():
            setattr(self, name, nn.Parameter(value.detach().clone()))
        self.register_buffer("keep", keep.detach().clone())
        self.calls, self.made = [], []

    def new_caches(self):
        self.made.append(_Cache())
        return [self.made[-1]]

    def forward(self, tokens, caches=None, start=0):
        B, L = tokens.shape
        cache = caches[0] if caches is not None else None
        self.calls.append([L, int(start), None if cache is None else len(cache),
                           bool(self.training), bool(torch.is_grad_enabled())])
        if torch.is_grad_enabled() and self.emb.requires_grad:
            raise RuntimeError("DecoderModel: called with " + MESSAGES["gradients"])
        if not 0 <= start <= self.pos.shape[0] - L:
            raise IndexError(MESSAGES["beyond_positions"].format(
                first=start, last=start + L - 1, positions=self.pos.shape[0]))
        x = self.emb[tokens] + self.pos[start:start + L]                     # (B, L, D)
        q, k, v = x @ self.wq, x @ self.wk, x @ self.wv                       # (B, L, D)
        if cache is not None:
            held_k, held_v = (k[:, :0], v[:, :0]) if cache.keys is None else \
                (cache.keys, cache.values)                                   # (B, T - L, D)
            cache.keys = torch.cat([held_k, _stored(k)], 1)                  # (B, T, D)
            cache.values = torch.cat([held_v, _stored(v)], 1)
            k, v = torch.cat([held_k, k], 1), torch.cat([held_v, v], 1)      # (B, T, D)
        T = k.shape[1]
        allowed = torch.ones(L, T, dtype=torch.bool, device=x.device).tril(T - L)
        scores = (q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).masked_fill(
            ~allowed, float("-inf"))                                          # (B, L, T)
        h = x + torch.softmax(scores, -1) @ v                                # (B, L, D)
        if self.training:
            h = h * self.keep[:L] * 2.0
        return h @ self.readout                                              # (B, L, V)


def _stored(x):
    """`x` as DecoderModel's cache holds it: rounded to bfloat16, in x's dtype."""
    return x.to(torch.bfloat16).to(x.dtype)


@reference
def _decoder_inputs(seed, B, P, T, vocab_size, d_model, dtype):
    """(params {name: tensor in dtype}, keep (P + T, D), prompt (B, P) long)."""
    draw, gen = _drawer(seed, dtype)
    params = {"emb": draw(vocab_size, d_model), "pos": draw(P + T, d_model),
              "wq": draw(d_model, d_model, scale=2 / math.sqrt(d_model)),
              "wk": draw(d_model, d_model, scale=2 / math.sqrt(d_model)),
              "wv": draw(d_model, d_model, scale=1 / math.sqrt(d_model)),
              "readout": draw(d_model, vocab_size, scale=3 / math.sqrt(d_model))}
    keep = (torch.rand(P + T, d_model, generator=gen) >= 0.5).to(dtype)
    prompt = torch.randint(vocab_size, (B, P), generator=gen)
    return params, keep, prompt


def _generation_inputs(params, keep, prompt):
    """The inputs of formulas.generation_formula: the parameters by name, "keep", "prompt"."""
    return {**params, "keep": keep, "prompt": prompt}


@reference
def _greedy(inputs, T, cached=False):
    """(tokens (B, P + T), logits (B, T, V)) of greedy decoding, float64, eval mode: by the
    whole sequence each step, or (`cached`) a prefill then one token per call into the
    model's cache (formulas.generation_formula)."""
    from . import formulas  # grader-only (the right answers): the kit removes this body
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    logits = formulas.generation_formula({}, T, cached).run(inputs)          # (B, T, V)
    return torch.cat([inputs["prompt"], logits.argmax(-1)], 1), logits


def _generate_run(fn, params, keep, prompt, T, device):
    """For use_cache True and False: a DecoderModel built where the student's code runs
    (common.given), left in training mode; fn(model, prompt, T, use_cache=...) observed, and
    read back by value: what it returned or raised, the keys of the caches it made, and its
    call log. Then from the other starting state, eval mode. observe() fails a call that
    leaves the model in another mode than it came in (or changes the prompt)."""
    runs = {}
    for use_cache in (True, False):
        model = given("checks.capstone:DecoderModel", params, keep).to(device).train()
        # use_cache=True, the default the exercise promises, is left to it (not passed)
        chosen = {} if use_cache else {"use_cache": False}
        seen = observe(fn, model, prompt.to(device, copy=True), T, **chosen)
        made = getattr(model, "made", None)
        runs[use_cache] = {"error": seen.error, "out": seen.result,
                           "keys": [getattr(c, "keys", None) for c in made]
                           if isinstance(made, list) else None,
                           "calls": getattr(model, "calls", None)}
    # the other starting state: a model that comes in eval mode gives the same tokens and
    # logits, and leaves in eval mode
    model = given("checks.capstone:DecoderModel", params, keep).to(device).eval()
    seen = observe(fn, model, prompt.to(device, copy=True), T, use_cache=False)
    made = getattr(model, "made", None)
    runs["from_eval"] = {"error": seen.error, "out": seen.result,
                         "keys": [getattr(c, "keys", None) for c in made]
                         if isinstance(made, list) else None,
                         "calls": getattr(model, "calls", None)}
    return runs


def _judge_run(run, name, B, P, T, V, dtype):
    """(tokens (B, P + T), logits (B, T, V)) of one observed run."""
    raised(run["error"], name)
    out = revive(run["out"])
    if not (isinstance(out, tuple) and len(out) == 2):
        fail(MESSAGES["pair"].format(name=name, got=type_name(out),
                                     forgot=MESSAGES["forgot"] if out is None else ""))
    tokens, logits = out
    if isinstance(tokens, torch.Tensor) and tokens.dim() == 2 \
            and abs(tokens.shape[1] - (P + T)) == 1:   # a loop that ran once too few or often
        fail(MESSAGES["tokens_count"].format(
            name=name, got=tokens.shape[1], want=P + T,
            which=MESSAGES["too_few" if tokens.shape[1] < P + T else "too_many"]))
    expect_tensor(tokens, MESSAGES["tokens"].format(name=name), shape=(B, P + T),
                  shape_names="(B, P + num_tokens)")
    if tokens.dtype != torch.long:
        fail(MESSAGES["token_ids"].format(name=name, dtype=tokens.dtype))
    expect_tensor(logits, MESSAGES["logits"].format(name=name), shape=(B, T, V), dtype=dtype,
                  shape_names="(B, num_tokens, vocab_size)")
    return tokens.cpu(), logits.detach().double().cpu()


def _name_from_log(run, use_cache, name):
    """(b) Called only once a run's values have failed: fail with the mistake that the
    stand-in model's log of its calls shows, if any (a forged log changes only the wording
    of a failure)."""
    made = run["keys"] if isinstance(run["keys"], list) else []
    if use_cache and len(made) > 1:  # (one cache per step: each call's start looks off too)
        fail(MESSAGES["gen_caches_made"].format(name=name, count=len(made)))
    calls = run["calls"]
    if not isinstance(calls, list):
        return
    if not calls and run["error"] is None:  # (what raised says more)
        fail(MESSAGES["gen_never_called"].format(name=name))
    for i, call in enumerate(calls):
        if not (isinstance(call, list) and len(call) == 5):
            return
        L, start, cached, training, grad = call
        if training:
            fail(MESSAGES["gen_training"].format(name=name))
        if grad:
            fail(MESSAGES["gen_gradients"].format(name=name, gradients=MESSAGES["gradients"]))
        if use_cache and cached is None:
            fail(MESSAGES["gen_no_cache"].format(name=name))
        if not use_cache and cached is not None:
            fail(MESSAGES["gen_uncached_calls"].format(name=name))
        if use_cache and i > 0 and L != 1:
            fail(MESSAGES["gen_refeed"].format(name=name, step=i, L=L))
        if use_cache and start != cached:
            fail(MESSAGES["gen_start"].format(name=name, cached=cached, start=start))


@reference
def _cached_keys(params, tokens):
    """The keys (B, n, D), float64, that DecoderModel caches for `tokens` (B, n) fed from
    position 0: what a cached generation leaves in its cache (every token but the last)."""
    n = tokens.shape[1]
    x = params["emb"].double()[tokens] + params["pos"].double()[:n]          # (B, n, D)
    return _stored(x @ params["wk"].double())                                # (B, n, D)


def _expect_greedy(new_tokens, logits, name):
    """Fail unless each new token (B, T) is the argmax over the vocabulary of the logits
    (B, T, V) returned for its step: what greedy decoding appends, whatever the logits."""
    chosen = logits.argmax(-1)                                                  # (B, T)
    # (a tie between two logits may go either way)
    top = logits.amax(-1)
    picked = logits.gather(-1, new_tokens.clamp(0, logits.shape[-1] - 1)[..., None])[..., 0]
    wrong = ((new_tokens != chosen) & (picked != top)).nonzero()
    if len(wrong):
        sequence, index = wrong[0].tolist()
        fail(MESSAGES["token_not_argmax"].format(name=name, index=index, sequence=sequence,
                                                 got=int(new_tokens[sequence, index]),
                                                 want=int(chosen[sequence, index])))


def _right(judged):
    """True when judged() (a judgement that fails with CheckFailure) passes."""
    try:
        judged()
    except CheckFailure:
        return False
    return True


def _judge_generation(run, use_cache, name, answer, mistakes, params, prompt, B, P, T, V,
                      dtype):
    """Fail unless the observed run of generate (use_cache: how it was called) returned the
    greedy tokens (B, P + T) and logits (B, T, V) of `answer` and left in the stand-in
    model's caches the keys of every token but the last (with the cache; none without)."""
    expected_tokens, expected_logits = answer
    expected_logits = expected_logits.to(dtype).double()
    try:  # the values: what generate returned, on the grader's model and prompt
        tokens, logits = _judge_run(run, name, B, P, T, V, dtype)
        if not torch.equal(tokens[:, :P], prompt):
            fail(MESSAGES["prompt_kept"].format(name=name))
        _expect_greedy(tokens[:, P:], logits, name)
        reason = family_reason(logits, expected_logits, dtype=dtype, condition=CONDITION,
                               mistakes=mistakes)
    except CheckFailure:
        _name_from_log(run, use_cache, name)
        raise
    if reason:  # the values name the mistake (the call log would only restate it)
        fail(explained(MESSAGES["logits"].format(name=name), reason))
    try:
        expect_close(logits, expected_logits, MESSAGES["logits"].format(name=name),
                     dtype=dtype, condition=CONDITION, hint=MESSAGES["generate_hint"])
        if not torch.equal(tokens, expected_tokens):
            wrong = (tokens != expected_tokens).nonzero()[0].tolist()
            fail(MESSAGES["token"].format(name=name, index=wrong[1], sequence=wrong[0],
                                          got=int(tokens[tuple(wrong)]),
                                          want=int(expected_tokens[tuple(wrong)])))
    except CheckFailure:
        _name_from_log(run, use_cache, name)
        raise
    # (a) the caches' contents, read back by value: the keys of every token but the last
    # with the cache, none without it
    keys = run["keys"] if isinstance(run["keys"], list) else []
    filled = [k for k in keys if k is not None]
    if use_cache:
        expected_keys = _cached_keys(params, expected_tokens[:, :-1])
        if not any(isinstance(k, torch.Tensor) and k.shape == expected_keys.shape
                   and expect_close_quiet(k.double(), expected_keys.to(dtype).double(),
                                          dtype=dtype, condition=CONDITION)
                   for k in filled):
            _name_from_log(run, use_cache, name)  # (b): failed on values already
            fail(MESSAGES["gen_no_cache"].format(name=name))
    elif filled:
        fail(MESSAGES["gen_uncached_calls"].format(name=name))


@check
def generate(fn, *, seed=0, B=2, P=3, num_tokens=5, vocab_size=9, d_model=8,
             dtype=torch.float64, device="cpu"):
    """fn(model, prompt (B, P), num_tokens, use_cache) -> (tokens (B, P + T), logits (B, T, V)):
    greedy decoding in eval mode without gradients; with use_cache, a prefill of the prompt
    then one token per call at start = len(cache); the same tokens either way; the model
    left in the mode it came in (training, or eval)."""
    T = num_tokens
    params, keep, prompt = _decoder_inputs(seed, B, P, T, vocab_size, d_model, dtype)
    runs = _generate_run(fn, params, keep, prompt, T, device)
    # with the cache, each step's logits attend over the keys the cache stored (rounded),
    # so they show that step's call: the prefill, then one position into the given cache
    inputs = _generation_inputs(params, keep, prompt)
    answers = {cached: _greedy(inputs, T, cached=cached) for cached in (False, True)}
    sizes = dict(B=B, P=P, T=T, V=vocab_size, dtype=dtype)
    mistakes = {use_cache: step_mistakes("greedy generation", inputs, current_dims(),
                                         num_tokens=T, use_cache=use_cache)
                for use_cache in (False, True)}

    def judge(run, use_cache, name):
        _judge_generation(run, use_cache, name, answers[use_cache], mistakes[use_cache],
                          params, prompt, **sizes)

    from_eval = MESSAGES["from_eval"].format(T=T)
    for use_cache in (False, True):
        name = MESSAGES["generate_call"].format(T=T, use_cache=use_cache)
        try:
            judge(runs[use_cache], use_cache, name)
        except CheckFailure as failure:
            # from training mode, wrong; from eval mode (the same call), right: the state
            # family says so, with what went wrong from training mode
            if not use_cache and _right(lambda: judge(runs["from_eval"], False, from_eval)):
                fail(explained(name, state_dependent({
                    MESSAGES["from_eval_mode"]: (True, ""),
                    MESSAGES["from_training_mode"]: (False, str(failure))})))
            raise
    # the other starting state, eval mode (its run, observe(), failed if the mode changed):
    # the same tokens and logits
    try:
        judge(runs["from_eval"], False, from_eval)
    except CheckFailure as failure:
        fail(explained(from_eval, state_dependent({
            MESSAGES["from_training_mode"]: (True, ""),
            MESSAGES["from_eval_mode"]: (False, str(failure))})))
    passed(MESSAGES["generate_passed"].format(shape=(B, P), T=T))
