"""Checks for chapter 7, the capstone: the pre-LayerNorm TransformerBlock, train_step and
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
this interface: TransformerBlock(d_model, num_heads, d_ff, dropout) with parameters named
ln1.*, attn.{q,k,v,out}_proj.*, ln2.*, ff.0.*, ff.2.* (nn.Module names), forward(x,
cache=None) -> (B, L, D); KVCache() empty.
train_step and generate receive stand-in models built here (StepModel, DecoderModel), so
that they are judged on their own, whatever the block does.

Shape letters: B batch, L sequence length, D d_model, F d_ff, V vocab_size, P prompt
length, T tokens generated.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import current_dims, step_mistakes
from .common import (MALFORMED, CheckFailure, attempt, by_owner, check, construct, expect_close,
                     expect_tensor, fail, generator, given, is_class, is_module,
                     judge_construct, load_weights, max_error, observe, passed, raised,
                     random_inputs, read_back, reference, revive, type_name,
                     where_it_differs)

BLOCK_PARAMS = ("ln1.weight", "ln1.bias", "attn.q_proj.weight", "attn.q_proj.bias",
                "attn.k_proj.weight", "attn.k_proj.bias", "attn.v_proj.weight",
                "attn.v_proj.bias", "attn.out_proj.weight", "attn.out_proj.bias",
                "ln2.weight", "ln2.bias", "ff.0.weight", "ff.0.bias", "ff.2.weight", "ff.2.bias")
INTERFACE = ("Keep the __init__ the notebook gives: ln1, attn (MultiHeadAttention), ln2, ff "
             "(nn.Sequential(Linear, GELU, Linear)) and drop.")
# A block chains a LayerNorm (a mean, a variance and a division), the attention and a
# two-layer MLP: about three times the roundings of chapter 3's forward, with the softmax's
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
def _block_inputs(seed, B, L, d_model, d_ff, dtype):
    """(P {parameter name: float64 tensor, rounded to dtype}, x (B, L, D) float64 rounded to
    dtype, x_future: x with positions >= L // 2 replaced)."""
    rounded, _ = _drawer(seed, dtype)

    def draw(*shape, scale):
        return rounded(*shape, scale=scale).double()

    D = d_model
    P = {"ln1.weight": 1.0 + draw(D, scale=0.3), "ln1.bias": draw(D, scale=0.3),
         "ln2.weight": 1.0 + draw(D, scale=0.3), "ln2.bias": draw(D, scale=0.3),
         "ff.0.weight": draw(d_ff, D, scale=1 / math.sqrt(D)), "ff.0.bias": draw(d_ff, scale=0.3),
         "ff.2.weight": draw(D, d_ff, scale=1 / math.sqrt(d_ff)), "ff.2.bias": draw(D, scale=0.3)}
    for name in ("q", "k", "v", "out"):
        # queries and keys a little larger: sharper attention tells more mistakes apart
        scale = (2.0 if name in "qk" else 1.0) / math.sqrt(D)
        P[f"attn.{name}_proj.weight"] = draw(D, D, scale=scale)
        P[f"attn.{name}_proj.bias"] = draw(D, scale=0.3)
    (x,) = random_inputs((B, L, D), seed=seed + 1, dtype=dtype)
    x = x.double()
    (noise,) = random_inputs((B, L, D), seed=seed + 2, dtype=dtype)
    x_future = x.clone()
    x_future[:, L // 2:] += 3.0 * noise.double()[:, L // 2:]
    return P, x, x_future


def _block_run(cls, cache_cls, d_model, num_heads, d_ff, P, x, x_future, dtype, device):
    """Build cls(d_model, num_heads, d_ff, 0.3) where the student's code runs, move it to
    dtype and device in eval mode and load the grader's parameters P ("found": what
    load_weights found there). Then call it on the grader's inputs, each output sent back by
    value ([result, error] pairs): on x, x_future and x again; with a cache_cls() cache, the
    first half of the positions as a prefill, then one position per call ("cached"); and in
    training mode with the attention's own dropout off, after torch.manual_seed(0)
    ("train")."""
    block, data = construct(cls, d_model, num_heads, d_ff, 0.3)
    if block is None:
        return data
    block, data["to_error"] = attempt(lambda: block.to(dtype=dtype, device=device).eval())
    if data["to_error"] is not None:
        return data
    data["found"] = load_weights(block, by_owner(P))
    if _missing(data["found"], P):
        return data
    x, x_future = (t.to(dtype=dtype, device=device) for t in (x, x_future))

    def run(*args, **kwargs):
        seen = observe(block, *args, **kwargs)
        return [seen.result, seen.error]

    data["out"], data["future"] = run(x), run(x_future)
    data["again"] = run(x)
    cache, data["cache_error"] = attempt(cache_cls)
    if data["cache_error"] is None:
        half = max(x.shape[1] // 2, 1)
        steps = [run(x[:, :half], cache=cache)]
        steps += [run(x[:, t:t + 1], cache=cache) for t in range(half, x.shape[1])]
        data["cached"] = steps
    # training mode with the attention's own dropout off: what remains is the block's
    _, data["train_error"] = attempt(lambda: block.train())
    attn = getattr(block, "attn", None)
    if is_module(attn):
        attempt(lambda: attn.eval())
    given("torch:manual_seed", 0)
    data["train"] = run(x)
    return data


def _dropout_masks(shape, p, dtype, count=2, seed=0):
    """The `count` dropout masks (kept / (1 - p), else 0) that nn.Dropout(p) draws, one per
    call on a tensor of `shape` in `dtype`, right after torch.manual_seed(seed): the grader
    controls the randomness of the training-mode run, so where the dropout sits shows in the
    values. (Drawn here, by the same torch that runs the student's block: CPU dropout is
    empty_like(x).bernoulli_(1 - p) / (1 - p).)"""
    gen = torch.Generator().manual_seed(seed)
    return [torch.empty(shape, dtype=dtype).bernoulli_(1 - p, generator=gen) / (1 - p)
            for _ in range(count)]


@reference
def _block_train_answer(P, x, num_heads, masks):
    """The block's output in training mode (attention dropout off) with the dropout masks
    `masks` on each sublayer's output: x + m1 attn(ln1(x)), then + m2 ff(ln2(.)), float64."""
    L = x.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    x = x + masks[0].double() * _attention(P, _layer_norm(x, P, "ln1"), num_heads, causal)
    return x + masks[1].double() * _ff(P, _layer_norm(x, P, "ln2"))


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
        fail(f"{name} returned a tuple of {len(out)} items; a block returns one tensor "
             "(B, L, d_model): unpack the attention's (output, weights) inside forward.")
    expect_tensor(out, name, shape=shape, dtype=dtype, shape_names="(B, L, d_model)")
    return out.detach().double().cpu()


def _layer_norm(x, P, name):
    return F.layer_norm(x, x.shape[-1:], P[f"{name}.weight"], P[f"{name}.bias"])


def _attention(P, h, num_heads, allowed):
    """Self-attention of h (B, L, D) in float64 with the weights P; allowed (L, L) bool
    (True = may attend) or None; a row with no allowed key gives zeros (the course's rule)."""
    B, L, D = h.shape
    hd = D // num_heads

    def project(name):
        y = F.linear(h, P[f"attn.{name}_proj.weight"], P[f"attn.{name}_proj.bias"])
        return y.view(B, L, num_heads, hd).transpose(1, 2)                   # (B, nh, L, hd)

    q, k, v = project("q"), project("k"), project("v")
    scores = q @ k.transpose(-2, -1) / math.sqrt(hd)                          # (B, nh, L, L)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)                   # (B, nh, L, L)
    merged = (weights @ v).transpose(1, 2).reshape(B, L, D)                   # (B, L, D)
    return F.linear(merged, P["attn.out_proj.weight"], P["attn.out_proj.bias"])


def _ff(P, h, activation=F.gelu):
    return F.linear(activation(F.linear(h, P["ff.0.weight"], P["ff.0.bias"])),
                    P["ff.2.weight"], P["ff.2.bias"])


NO_MASK = ("every position attends to every other, future ones included: pass chapter 4's "
           "causal mask, causal_mask(L) (True on and below the diagonal), to the attention.")
REVERSED_MASK = ("the causal mask is reversed: position i attends to the positions after it. "
                 "True means *may attend*: keys 0..i, causal_mask(L), not ~causal_mask(L).")
UPPER_MASK = ("the mask lets position i attend to positions i..L-1 (an upper triangle, "
              "e.g. triu): the causal mask is the lower triangle, keys 0..i (causal_mask(L)).")
POST_LN = ("that is a post-LayerNorm block (the 2017 Transformer's x = ln(x + sublayer(x))). "
           "This chapter's block is pre-LayerNorm (GPT-2): x + attn(ln1(x)), then "
           "x + ff(ln2(x)); the LayerNorm is applied to the sublayer's input only.")
NORMED_RESIDUAL = ("the residual adds the *normalised* input: h = ln1(x); x = h + attn(h). "
                   "The residual stream carries x itself: x = x + attn(ln1(x)).")
NO_RESIDUAL = ("the residual connections are missing: each sublayer's output is added to its "
               "input, x = x + attn(ln1(x)), then x = x + ff(ln2(x)).")
NO_FF_RESIDUAL = ("the feed-forward sublayer replaces x instead of adding to it: "
                  "x = x + ff(ln2(x)).")
SAME_NORM = ("ln1 is used before both sublayers: the feed-forward sublayer has its own "
             "LayerNorm, ln2: x = x + ff(ln2(x)).")
FF_ON_INPUT = ("the feed-forward sublayer reads the block's input instead of the output of "
               "the attention sublayer: x = x + attn(ln1(x)) first, then x = x + ff(ln2(x)) "
               "on that new x.")
RELU = ("the feed-forward sublayer uses ReLU: this block (GPT-2's) uses GELU between its two "
        "linear layers, nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), "
        "nn.Linear(d_ff, d_model)), as the notebook's __init__ gives it.")
ATTN_ON_X = ("the attention reads x instead of ln1(x): pre-LayerNorm normalises each "
             "sublayer's input, h = ln1(x), attn(h, h, h), while the residual adds x itself: "
             "x = x + attn(ln1(x)).")
LEAK = ("future tokens leak: changing the positions >= {cut} changed the output at positions "
        "< {cut} (largest change {change:.3g}). Each position may read only itself and the "
        "positions before it: apply causal_mask(L) in the attention.")
DROPOUT_AT_EVAL = ("in eval mode two calls on the same input gave different outputs: dropout "
                   "is still on. Use the block's nn.Dropout modules (self.drop, and the "
                   "attention's own dropout), which model.eval() switches off; not "
                   "F.dropout(x, p) with its default training=True.")
NO_DROPOUT = ("in training mode the output equals the eval-mode output: dropout is never "
              "applied. Pass each sublayer's output through self.drop before adding it to x.")
DROPOUT_PLACEMENT = ("in training mode, with the dropout masks that torch.manual_seed(0) gives "
                     "(the grader's), the output is not the block's ({where}): dropout applies "
                     "to each sublayer's output before it is added to x, x = x + "
                     "drop(attn(ln1(x))), then x = x + drop(ff(ln2(x))); never to the sum "
                     "x + sublayer(x), and on both branches, through self.drop.")
CACHE_IGNORED = ("with a cache the block gives other outputs than without: with `cache`, "
                 "call cached_attention(self.attn, h, cache) (chapter 6) instead of "
                 "self-attention over the new positions only.")


@reference
def _block_answers(P, x, num_heads):
    """(expected (B, L, D), {bug message: output}), float64, for the block holding P."""
    L = x.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool).tril()

    def pre_ln(x, allowed=causal):
        x = x + _attention(P, _layer_norm(x, P, "ln1"), num_heads, allowed)
        return x + _ff(P, _layer_norm(x, P, "ln2"))

    h = _layer_norm(x, P, "ln1")
    attended = x + _attention(P, h, num_heads, causal)
    post = _layer_norm(x + _attention(P, x, num_heads, causal), P, "ln1")
    bugs = {
        NO_MASK: pre_ln(x, None),
        REVERSED_MASK: pre_ln(x, ~causal),
        UPPER_MASK: pre_ln(x, causal.T),
        POST_LN: _layer_norm(post + _ff(P, post), P, "ln2"),
        NORMED_RESIDUAL: (lambda y: y + _ff(P, _layer_norm(y, P, "ln2")))(
            h + _attention(P, h, num_heads, causal)),
        NO_RESIDUAL: _ff(P, _layer_norm(_attention(P, h, num_heads, causal), P, "ln2")),
        NO_FF_RESIDUAL: _ff(P, _layer_norm(attended, P, "ln2")),
        SAME_NORM: attended + _ff(P, _layer_norm(attended, P, "ln1")),
        FF_ON_INPUT: attended + _ff(P, _layer_norm(x, P, "ln2")),
        RELU: attended + _ff(P, _layer_norm(attended, P, "ln2"), F.relu),
        ATTN_ON_X: (lambda y: y + _ff(P, _layer_norm(y, P, "ln2")))(
            x + _attention(P, x, num_heads, causal)),
    }
    return pre_ln(x), bugs


@check
def transformer_block(cls, cache_cls, *, seed=0, B=2, L=6, d_model=8, num_heads=2, d_ff=16,
                      dtype=torch.float32, device="cpu"):
    """cls(d_model, num_heads, d_ff, dropout): forward(x (B, L, D), cache=None) -> (B, L, D),
    a pre-LayerNorm causal block; with cache_cls() caches, prefill + one position per call
    equals the full forward; dropout only in training mode."""
    if not (is_class(cls) and is_class(cache_cls)):
        fail("pass the two classes to the check: check.transformer_block(TransformerBlock, "
             f"KVCache); got {type_name(cls)} and {type_name(cache_cls)}")
    where = f"TransformerBlock({d_model}, {num_heads}, {d_ff}, 0.3)"
    P, x, x_future = _block_inputs(seed, B, L, d_model, d_ff, dtype)
    data = _block_run(cls, cache_cls, d_model, num_heads, d_ff, P, x, x_future, dtype, device)
    judge_construct(data, where)
    error = data["to_error"]
    if error is not None:
        fail(f"{where}.to(dtype={dtype}, device={device}) raised {error[0]}: {error[1]}")
    missing = _missing(data["found"], P)
    for name in P:
        if name in missing:
            shape = missing[name]
            got = f"has shape {shape}" if isinstance(shape, tuple) else "is missing"
            fail(f"{where}: parameter {name} {got}, expected {tuple(P[name].shape)}. {INTERFACE}")
    shape = (B, L, d_model)
    out = _output(data["out"], f"{where}(x)", shape, dtype)
    future = _output(data["future"], f"{where}(x)", shape, dtype)
    again = _output(data["again"], f"{where}(x)", shape, dtype)
    expected, bugs = _block_answers(P, x, num_heads)
    tolerance = dict(dtype=dtype, condition=CONDITION)
    bugs = {m: c.to(dtype).double() for m, c in bugs.items()}
    if not torch.equal(out, again):
        fail(f"{where}: {DROPOUT_AT_EVAL}")
    cut = max(L // 2, 1)  # x_future differs from position L // 2 on
    change = max_error(future[:, :L // 2], out[:, :L // 2]) if L > 1 else 0.0
    if change > 0 and not expect_close_quiet(future[:, :L // 2], out[:, :L // 2], **tolerance):
        for message in (NO_MASK, REVERSED_MASK, UPPER_MASK):
            if expect_close_quiet(out, bugs[message], **tolerance):
                fail(f"{where}: {message}")
        fail(f"{where}: " + LEAK.format(cut=L // 2, change=change))
    # the formula with one step left out or moved (checks/diagnose.py), for a mistake that
    # no entry of the tables names
    inputs = {"x": x, "mask": torch.ones(L, L, dtype=torch.bool).tril(),
              **{f"{n}_{part[0]}": P[f"{n}.{part}"] for n in ("ln1", "ln2")
                 for part in ("weight", "bias")},
              **{f"ff{i}_{part[0]}": P[f"ff.{i}.{part}"] for i in (0, 2)
                 for part in ("weight", "bias")},
              **{f"{n}_{part[0]}": P[f"attn.{n}_proj.{part}"] for n in ("q", "k", "v", "out")
                 for part in ("weight", "bias")}}
    inputs["o_w"], inputs["o_b"] = inputs.pop("out_w"), inputs.pop("out_b")
    expect_close(out, expected.to(dtype).double(), f"{where}(x)", bugs=bugs,
                 mistakes=step_mistakes("pre-LayerNorm block", inputs, current_dims(),
                                        num_heads=num_heads),
                 hint="Pre-LayerNorm: x = x + attn(ln1(x)) with the causal mask, then "
                      "x = x + ff(ln2(x)).", **tolerance)
    raised(data["cache_error"], "KVCache()")
    steps = data["cached"]
    pieces = [_output(item, f"{where}(x[:, {i}], cache=cache)" if i else
                      f"{where}(x[:, :{cut}], cache=cache)",
                      (B, cut if i == 0 else 1, d_model), dtype) for i, item in enumerate(steps)]
    cached = torch.cat(pieces, dim=1)
    if not expect_close_quiet(cached, expected.to(dtype).double(), **tolerance):
        fail(f"{where} with a cache (a prefill of {cut} positions, then one per call): "
             f"{CACHE_IGNORED} (largest error {max_error(cached, expected):.3g})")
    raised(data["train_error"], f"{where}.train()")
    trained = _output(data["train"], f"{where}(x) in training mode", shape, dtype)
    if torch.equal(trained, out):
        fail(f"{where}: {NO_DROPOUT}")
    in_training = _block_train_answer(P, x, num_heads, _dropout_masks(shape, 0.3, dtype))
    if not expect_close_quiet(trained, in_training.to(dtype).double(), **tolerance):
        fail(f"{where}: " + DROPOUT_PLACEMENT.format(where=where_it_differs(
            trained, in_training.to(dtype).double(), "(B, L, d_model)", **tolerance).strip(". ")))
    passed(f"TransformerBlock: x (B, L, d_model) = {shape} ({dtype}) -> pre-LayerNorm causal "
           f"block; no future leakage; prefill + {L - cut} cached steps equal the full "
           "forward; dropout in training mode only")


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
    """Build _step_setup's model and optimizer, call fn(model, optimizer, batch) and read
    back by value: what it returned or raised ("loss", "error"), the batch as the call left
    it, the model's parameters before ("built") and after ("params"), and its `modes`."""
    model, optimizer = given("checks.capstone:_step_setup", params, keep, p, stale, lr, device)
    data = {"built": read_back(model, params)}
    seen = observe(fn, model, optimizer, batch.to(device, copy=True))
    data.update(error=seen.error, loss=seen.result, batch=revive(seen.args[2]),
                params=read_back(model, params), modes=getattr(model, "modes", None))
    return data


NO_ZERO_GRAD = ("the gradients of an earlier step were added to this step's: call "
                "optimizer.zero_grad() before loss.backward() (PyTorch accumulates gradients "
                "in .grad).")
NOT_UPDATED = ("the parameters did not change: the step needs loss.backward() and then "
               "optimizer.step(), with optimizer.zero_grad() before the backward pass, not "
               "between it and the step.")
EVAL_MODE = ("the model ran in eval mode, so its dropout was off during training: call "
             "model.train() at the start of the step (the model may come from an evaluation).")
UNSHIFTED = ("the targets are the input tokens themselves: the model must predict the *next* "
             "token, so inputs = batch[:, :-1] and targets = batch[:, 1:].")
PREVIOUS = ("the targets are the previous tokens (inputs batch[:, 1:], targets batch[:, :-1]): "
            "the model predicts the next token: inputs = batch[:, :-1], targets = batch[:, 1:].")
SOFTMAX_FIRST = ("you applied softmax before F.cross_entropy, which applies log_softmax "
                 "itself: pass the raw logits.")
SUMMED = ("the loss is summed over positions: use the mean (F.cross_entropy's default "
          "reduction), so that the step size does not grow with the batch.")
LOSS_KIND = ("train_step must return the loss as a number (loss.item()), got {got}.")


@reference
def _step_answers(params, keep, stale, batch, p, lr):
    """(expected loss, expected parameters after the step, {bug message: (loss, params)}),
    float64, SGD without momentum."""
    def run(inputs, targets, training=True, loss_fn=None, accumulate=False, step=True):
        model = StepModel({k: v.double() for k, v in params.items()}, keep.double(), p)
        model.train(training)
        logits = model(inputs)                                               # (B, L, V)
        flat = logits.flatten(0, 1)
        loss = (loss_fn or F.cross_entropy)(flat, targets.flatten())
        loss.backward()
        new = {}
        for name, parameter in model.named_parameters():
            grad = parameter.grad + (stale[name].double() if accumulate else 0.0)
            new[name] = (parameter - lr * grad).detach() if step else parameter.detach()
        return loss.detach(), new

    inputs, targets = batch[:, :-1], batch[:, 1:]
    expected = run(inputs, targets)
    bugs = {
        NO_ZERO_GRAD: run(inputs, targets, accumulate=True),
        NOT_UPDATED: run(inputs, targets, step=False),
        EVAL_MODE: run(inputs, targets, training=False),
        UNSHIFTED: run(inputs, inputs),
        PREVIOUS: run(batch[:, 1:], batch[:, :-1]),
        SOFTMAX_FIRST: run(inputs, targets,
                           loss_fn=lambda z, t: F.cross_entropy(torch.softmax(z, -1), t)),
        SUMMED: run(inputs, targets,
                    loss_fn=lambda z, t: F.cross_entropy(z, t, reduction="sum")),
    }
    return expected[0], expected[1], {m: (loss, new) for m, (loss, new) in bugs.items()}


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
    """fn(model, optimizer, batch (B, L + 1)) -> loss (a number): model.train(), logits of
    batch[:, :-1], mean cross-entropy against batch[:, 1:], zero_grad, backward, step."""
    name = "train_step(model, optimizer, batch)"
    params, keep, stale, batch = _step_inputs(seed, B, L, vocab_size, d_model, p, dtype)
    data = _step_run(fn, params, keep, stale, batch, p, lr, device)
    if not all(_same(data["built"][k], v) for k, v in params.items()):
        fail(MALFORMED.format(what="the model before train_step ran"))
    # (b) the model's record of its calls: it only names a mistake the values fail
    modes = data["modes"] if isinstance(data["modes"], list) else []
    if data["error"] is None and not modes and _same(data["params"], params):
        fail(f"{name} never called the model: logits = model(batch[:, :-1]).")
    raised(data["error"], name)
    # (a) an in-place change: the batch as the call left it, by value
    if not _same(data["batch"], batch):
        fail(f"{name} changed the batch in place; slice it instead (batch[:, :-1], "
             "batch[:, 1:]).")
    loss = revive(data["loss"])
    if isinstance(loss, torch.Tensor) and loss.dim() == 0:
        loss = loss.item()
    if isinstance(loss, bool) or not isinstance(loss, (int, float)):
        fail(f"{name}: " + LOSS_KIND.format(got=type_name(loss) if not isinstance(
            loss, torch.Tensor) else f"a tensor of shape {tuple(loss.shape)}"))
    after = data["params"]
    for k in params:
        expect_tensor(after[k], f"model.{k} after {name}", shape=params[k].shape)
    got = {k: after[k].double() for k in params}
    expected_loss, expected_params, bugs = _step_answers(params, keep, stale, batch, p, lr)
    loss_t = torch.tensor([float(loss)], dtype=torch.float64)

    def matches(candidate):
        c_loss, c_params = candidate
        return (_close_quiet(loss_t, c_loss.reshape(1), dtype)
                and all(_close_quiet(got[k], c_params[k], dtype) for k in params))

    if matches((expected_loss, expected_params)):
        passed(f"train_step: batch (B, L + 1) = {tuple(batch.shape)} ({dtype}) -> one SGD step "
               "in training mode on the mean next-token cross-entropy; loss returned as a "
               "number")
        return
    for message, candidate in bugs.items():
        if matches(candidate):
            fail(f"{name}: {message}")
    # (b) the values failed: the model's record of its calls may say why
    if not modes:
        fail(f"{name} never called the model: logits = model(batch[:, :-1]).")
    if False in modes:
        fail(f"{name}: {EVAL_MODE}")
    if not _close_quiet(loss_t, expected_loss.reshape(1), dtype):
        fail(f"{name} returned the loss {float(loss):.6g}, expected {expected_loss.item():.6g} "
             "(the mean cross-entropy of the logits of batch[:, :-1] against batch[:, 1:], "
             "before the step).")
    wrong = [k for k in params if not _close_quiet(got[k], expected_params[k], dtype)]
    fail(f"{name}: the loss is right but the parameters {', '.join(wrong)} are not those of one "
         "step of the optimizer: optimizer.zero_grad(), loss.backward(), optimizer.step(), "
         "each once.")


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
    mode, positions beyond the model's raise, a call with gradients enabled raises (GEN_GRAD),
    and the caches it made (`made`) can be read back. Each call is logged in `calls` as [L,
    start, cached positions before the call or None, training mode, gradients enabled]: only
    to name a mistake that the values already fail.
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
            raise RuntimeError(f"DecoderModel: called with {GEN_GRAD}")
        if not 0 <= start <= self.pos.shape[0] - L:
            raise IndexError(f"positions {start}..{start + L - 1} are beyond the model's "
                             f"{self.pos.shape[0]} positions")
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


@reference
def _greedy(params, keep, prompt, T, first_position=0, cached=False):
    """(tokens (B, P + T), logits (B, T, V)) of greedy decoding, float64, eval mode: by the
    whole sequence each step, or (`cached`) a prefill then one token per call into the
    model's cache; the first `first_position` steps read the logits of position 0 instead
    of the last one (a catalogued mistake)."""
    model = DecoderModel({k: v.double() for k, v in params.items()}, keep.double()).eval()
    tokens, chosen = prompt, []
    caches = model.new_caches() if cached else None
    with torch.no_grad():
        for step in range(T):
            fed, start = (tokens[:, -1:], tokens.shape[1] - 1) if cached and step else (tokens, 0)
            logits = model(fed, caches=caches, start=start)                # (B, L, V)
            last = logits[:, 0 if step < first_position else -1]            # (B, V)
            chosen.append(last)
            tokens = torch.cat([tokens, last.argmax(-1, keepdim=True)], 1)
    return tokens, torch.stack(chosen, 1)


def _generate_run(fn, params, keep, prompt, T, device):
    """For use_cache True and False: a DecoderModel built where the student's code runs
    (common.given), left in training mode; fn(model, prompt, T, use_cache=...) observed, and
    read back by value: what it returned or raised, the model's mode afterwards, the keys of
    the caches it made, and its call log."""
    runs = {}
    for use_cache in (True, False):
        model = given("checks.capstone:DecoderModel", params, keep).to(device).train()
        seen = observe(fn, model, prompt.to(device, copy=True), T, use_cache=use_cache)
        made = getattr(model, "made", None)
        runs[use_cache] = {"error": seen.error, "out": seen.result,
                           "training_after": getattr(model, "training", None),
                           "keys": [getattr(c, "keys", None) for c in made]
                           if isinstance(made, list) else None,
                           "calls": getattr(model, "calls", None)}
    # the other starting state: a model that comes in eval mode must leave in eval mode
    model = given("checks.capstone:DecoderModel", params, keep).to(device).eval()
    seen = observe(fn, model, prompt.to(device, copy=True), T, use_cache=False)
    runs["from_eval"] = {"error": seen.error, "training_after": getattr(model, "training", None)}
    return runs


GEN_EVAL = ("the model ran in training mode, so dropout changed its predictions: call "
            "model.eval() before generating (and restore the mode after).")
GEN_GRAD = ("gradients enabled: generation needs none; decorate generate with "
            "@torch.no_grad() (or use `with torch.no_grad():`), which saves the memory of the "
            "whole graph.")
GEN_NO_CACHE = ("use_cache=True but the model was never given the caches: create them with "
                "model.new_caches() and pass caches=caches at every call.")
GEN_REFEED = ("with the cache, step {step} fed {L} positions: after the prefill, feed only "
              "the newest token, tokens[:, -1:]; the cache holds the keys and values of the "
              "others, and feeding them again appends them twice.")
GEN_START = ("the position of the newest token is off: a call with {cached} cached positions "
             "passed start={start}. The tokens fed sit right after the cached ones, "
             "start = len(cache) = tokens.shape[1] - 1 after the prefill (positions count "
             "from 0).")
GEN_UNCACHED_CALLS = ("use_cache=False but the model was given caches: without the cache, "
                      "call model(tokens) on the whole sequence at every step.")
GEN_MODE_RESTORE = ("generate left the model in eval mode: restore the mode it had "
                    "(model.train(was_training)), so that training can continue after sampling.")
GEN_MODE_FROM_EVAL = ("generate left the model in training mode although it came in eval mode: "
                      "restore the mode it had, whichever it was (model.train(was_training)), "
                      "not always model.train().")
GEN_PROBABILITIES = ("you returned probabilities (the softmax of the logits): return the logits "
                     "themselves, logits[:, -1] of each step; the argmax picks the same token "
                     "from either.")
GEN_FIRST = ("the logits of the *first* position were used: the next token is predicted by the "
             "last position, logits[:, -1].")


def _judge_run(run, name, B, P, T, V, dtype):
    """(tokens (B, P + T), logits (B, T, V)) of one observed run."""
    raised(run["error"], name)
    out = revive(run["out"])
    if not (isinstance(out, tuple) and len(out) == 2):
        fail(f"{name} must return a pair (tokens, logits), got {type_name(out)}"
             + (" (did you forget to return it?)" if out is None else "") + ".")
    tokens, logits = out
    expect_tensor(tokens, f"{name}: tokens", shape=(B, P + T), shape_names="(B, P + num_tokens)")
    if tokens.dtype != torch.long:
        fail(f"{name}: tokens must be token ids (torch.long), got {tokens.dtype}")
    expect_tensor(logits, f"{name}: logits", shape=(B, T, V), dtype=dtype,
                  shape_names="(B, num_tokens, vocab_size)")
    return tokens.cpu(), logits.detach().double().cpu()


def _name_from_log(run, use_cache, name):
    """(b) Called only once a run's values have failed: fail with the mistake that the
    stand-in model's log of its calls shows, if any (a forged log changes only the wording
    of a failure)."""
    calls = run["calls"]
    if not isinstance(calls, list):
        return
    if not calls and run["error"] is None:  # (what raised says more)
        fail(f"{name} never called the model.")
    for i, call in enumerate(calls):
        if not (isinstance(call, list) and len(call) == 5):
            return
        L, start, cached, training, grad = call
        if training:
            fail(f"{name}: {GEN_EVAL}")
        if grad:
            fail(f"{name}: the model ran with {GEN_GRAD}")
        if use_cache and cached is None:
            fail(f"{name}: {GEN_NO_CACHE}")
        if not use_cache and cached is not None:
            fail(f"{name}: {GEN_UNCACHED_CALLS}")
        if use_cache and i > 0 and L != 1:
            fail(f"{name}: " + GEN_REFEED.format(step=i, L=L))
        if use_cache and start != cached:
            fail(f"{name}: " + GEN_START.format(cached=cached, start=start))


@reference
def _cached_keys(params, tokens):
    """The keys (B, n, D), float64, that DecoderModel caches for `tokens` (B, n) fed from
    position 0: what a cached generation leaves in its cache (every token but the last)."""
    n = tokens.shape[1]
    x = params["emb"].double()[tokens] + params["pos"].double()[:n]          # (B, n, D)
    return _stored(x @ params["wk"].double())                                # (B, n, D)


@check
def generate(fn, *, seed=0, B=2, P=3, num_tokens=5, vocab_size=9, d_model=8,
             dtype=torch.float64, device="cpu"):
    """fn(model, prompt (B, P), num_tokens, use_cache) -> (tokens (B, P + T), logits (B, T, V)):
    greedy decoding in eval mode without gradients; with use_cache, a prefill of the prompt
    then one token per call at start = len(cache); the same tokens either way."""
    T = num_tokens
    params, keep, prompt = _decoder_inputs(seed, B, P, T, vocab_size, d_model, dtype)
    runs = _generate_run(fn, params, keep, prompt, T, device)
    # with the cache, each step's logits attend over the keys the cache stored (rounded),
    # so they show that step's call: the prefill, then one position into the given cache
    answers = {cached: _greedy(params, keep, prompt, T, cached=cached)
               for cached in (False, True)}
    # logits[:, 0]: every step without the cache, the prefill's step with it (the later
    # steps feed one position, where first and last coincide)
    first_logits = {False: _greedy(params, keep, prompt, T, first_position=T)[1],
                    True: _greedy(params, keep, prompt, T, first_position=1, cached=True)[1]}
    for use_cache in (False, True):
        name = f"generate(model, prompt, {T}, use_cache={use_cache})"
        run = runs[use_cache]
        expected_tokens, expected_logits = answers[use_cache]
        try:  # the values: what generate returned, on the grader's model and prompt
            tokens, logits = _judge_run(run, name, B, P, T, vocab_size, dtype)
            if not torch.equal(tokens[:, :P], prompt):
                fail(f"{name}: tokens[:, :P] must be the prompt itself, followed by the new "
                     "tokens.")
            expect_close(logits, expected_logits.to(dtype).double(), f"{name}: logits",
                         dtype=dtype, condition=CONDITION,
                         bugs={GEN_FIRST: first_logits[use_cache].to(dtype).double(),
                               GEN_PROBABILITIES: expected_logits.softmax(-1).to(dtype)
                               .double()},
                         hint="Each step: the logits of the last position, logits[:, -1], "
                              "then the argmax over the vocabulary appended to the tokens.")
            if not torch.equal(tokens, expected_tokens):
                wrong = (tokens != expected_tokens).nonzero()[0].tolist()
                fail(f"{name}: token {wrong[1]} of sequence {wrong[0]} is "
                     f"{int(tokens[tuple(wrong)])}, but the largest logit of that step is at "
                     f"{int(expected_tokens[tuple(wrong)])}: greedy decoding appends "
                     "logits[:, -1].argmax(-1).")
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
                fail(f"{name}: {GEN_NO_CACHE}")
        elif filled:
            fail(f"{name}: {GEN_UNCACHED_CALLS}")
        # (a) the model's mode after the call, read back by value
        if run["training_after"] is not True:
            fail(f"{name}: {GEN_MODE_RESTORE}")
    name = f"generate(model in eval mode, prompt, {T}, use_cache=False)"
    raised(runs["from_eval"]["error"], name)
    if runs["from_eval"]["training_after"] is not False:
        fail(f"{name}: {GEN_MODE_FROM_EVAL}")
    passed(f"generate: prompt (B, P) = {(B, P)} -> {T} greedy tokens, the same with and without "
           "the KV cache (prefill, then one token per step at start = len(cache)); eval mode, "
           "no gradients")
