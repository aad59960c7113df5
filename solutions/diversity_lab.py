"""Chapter 5's lab: the task, the model, the training loop and the given measurements.

Everything the chapter's own (non-exercise) cells use, and nothing that answers one of
its exercises: those answers live in `solutions.diversity`, which re-exports this module.
Chapter 5's release ships this module (with chapters 1-4's), never `diversity.py`.

Shape letters: N samples, B batch, L seq_len, V vocab_size, D d_model, h num_heads,
hd head_dim.
"""
import contextlib
import time
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import environment_count
from .masks import causal_mask
from .mha import MultiHeadAttention

IGNORE_INDEX = -100  # F.cross_entropy's default ignore_index: positions with no target

# The chapter's sizes, tuned by measurement (200 steps, batch 128, one CPU thread,
# about 1 s a run): two heads of head_dim 8 reach 100% on both relations for every
# seed tried; one head of head_dim 16 stays far below. A vocabulary much larger than
# d_model is what makes one head struggle: with 16 tokens and d_model 32, one head
# reached ~95% by weighting the two positions unequally (see two_relation_task).
VOCAB_SIZE, SEQ_LEN, D_MODEL = 64, 8, 16


# ----------------------------------------------------------------------------- the task
class TwoRelationBatch(NamedTuple):
    """tokens (N, L) long; prev_target (N, L) long: the token at i-1 (IGNORE_INDEX at
    i = 0); first_target (N, L) long: the token at position 0."""

    tokens: torch.Tensor
    prev_target: torch.Tensor
    first_target: torch.Tensor


def two_relation_task(num_samples, seq_len, vocab_size, generator=None):
    """Random token sequences with two targets per position: "previous token" and
    "first token". Returns a TwoRelationBatch of three (N, L) long tensors.

    The two relations point at different positions (i-1 and 0) for every i >= 2, so a
    head that attends to one position cannot serve both. One head that splits its
    attention between them hands the readouts w_prev * v(a) + w_first * v(b), a sum of
    the two tokens' values: when w_prev = w_first the sum is symmetric in (a, b) and no
    readout can tell which token was previous and which was first. A trained single
    head keeps the weights unequal (e.g. 0.5 and 0.43) and decodes the more heavily
    weighted relation well and the other poorly. Two heads each copy one token cleanly.
    Tokens are drawn uniformly, with repeats.
    """
    for name, v in (("num_samples", num_samples), ("seq_len", seq_len),
                    ("vocab_size", vocab_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if seq_len < 3:
        raise ValueError(f"seq_len must be >= 3 so that i-1 and 0 differ somewhere, got {seq_len}")
    tokens = torch.randint(vocab_size, (num_samples, seq_len), generator=generator)  # (N, L)
    prev_target = torch.full_like(tokens, IGNORE_INDEX)                     # (N, L)
    prev_target[:, 1:] = tokens[:, :-1]                  # (N, L-1); position 0 has no previous
    first_target = tokens[:, :1].expand(-1, seq_len).clone()               # (N, L)
    return TwoRelationBatch(tokens, prev_target, first_target)


# ----------------------------------------------------------------------------- the model
class TinyAttentionModel(nn.Module):
    """Embeddings -> one causal MultiHeadAttention -> two linear readouts.

    TinyAttentionModel(vocab_size, seq_len, d_model, num_heads, *, head_dim=None, seed=None)

    No residual connection and no MLP: the readouts see only the attention output, so
    everything they know about other positions flows through the heads. `seed` makes
    the initialisation reproducible without touching the global RNG.
    """

    def __init__(self, vocab_size, seq_len, d_model, num_heads, *, head_dim=None, seed=None):
        super().__init__()
        self.vocab_size, self.seq_len = vocab_size, seq_len
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            self.tok_emb = nn.Embedding(vocab_size, d_model)
            self.pos_emb = nn.Embedding(seq_len, d_model)
            self.attn = MultiHeadAttention(d_model, num_heads, head_dim=head_dim)
            self.readout_prev = nn.Linear(d_model, vocab_size)
            self.readout_first = nn.Linear(d_model, vocab_size)
        self.register_buffer("mask", causal_mask(seq_len), persistent=False)  # (L, L)

    @property
    def num_heads(self):
        return self.attn.num_heads  # follows prune_heads replacing self.attn

    def forward(self, tokens, head_mask=None):
        """tokens (B, L) long, L <= seq_len; head_mask (h,) or (B, h) gates, as in
        MultiHeadAttention. Returns (logits_prev (B, L, V), logits_first (B, L, V),
        weights (B, h, L, L))."""
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.long:
            raise TypeError(f"tokens must be a torch.long tensor of token ids, got "
                            f"{getattr(tokens, 'dtype', type(tokens).__name__)}")
        if tokens.dim() != 2 or tokens.shape[1] > self.seq_len:
            raise ValueError(f"tokens must have shape (B, L) with L <= {self.seq_len}, "
                             f"got {tuple(tokens.shape)}")
        L = tokens.shape[1]
        pos = torch.arange(L, device=tokens.device)             # (L,)
        x = self.tok_emb(tokens) + self.pos_emb(pos)            # (B, L, D)
        out, weights = self.attn(x, x, x, mask=self.mask[:L, :L], head_mask=head_mask)
        # (B, L, V), (B, L, V), (B, h, L, L)
        return self.readout_prev(out), self.readout_first(out), weights


def relation_losses(logits_prev, logits_first, prev_target, first_target):
    """Cross-entropy of each relation, ignoring IGNORE_INDEX positions.
    logits (B, L, V), targets (B, L). Returns (loss_prev, loss_first), scalars."""
    loss_prev = F.cross_entropy(logits_prev.flatten(0, 1), prev_target.flatten())
    loss_first = F.cross_entropy(logits_first.flatten(0, 1), first_target.flatten())
    return loss_prev, loss_first


def _accuracy(logits, target):
    """logits (B, L, V), target (B, L) -> fraction correct where target is defined."""
    keep = target != IGNORE_INDEX                                # (B, L)
    return (logits.argmax(-1) == target)[keep].float().mean().item()


@torch.no_grad()
def evaluate(model, batch):
    """batch: TwoRelationBatch (N, L). Returns dict(loss, acc_prev, acc_first)."""
    device = next(model.parameters()).device
    tokens, prev, first = (t.to(device) for t in batch)
    logits_prev, logits_first, _ = model(tokens)
    loss_prev, loss_first = relation_losses(logits_prev, logits_first, prev, first)
    return dict(loss=(loss_prev + loss_first).item(),
                acc_prev=_accuracy(logits_prev, prev),
                acc_first=_accuracy(logits_first, first))


# ----------------------------------------------------------------------------- training
def default_device():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@contextlib.contextmanager
def _cpu_threads(n):
    """Run the block with n intra-op CPU threads, then restore the previous count."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_steps(steps):
    """The length of one of the chapter's training runs, written `steps` in the notebook
    (200 per run, 150 for the three-head models, 50 more after pruning): `steps`, or
    $COURSE_DIVERSITY_STEPS when that is set and smaller. The tests that execute the whole
    notebook (nbgrader, the student kit) need its code paths, not its numbers, and set it
    (tests/conftest.py); `make book` leaves it unset and trains in full."""
    cap = environment_count("COURSE_DIVERSITY_STEPS")
    return steps if cap is None else min(steps, cap)


def train(model, *, steps=200, lr=1e-2, batch_size=128, seed=0, device=None,
          task=two_relation_task, track=None, cpu_threads=1):
    """Adam on fresh batches of `task` (a function like two_relation_task); returns the
    history: a dict of per-step lists "loss", "acc_prev", "acc_first" (measured on each
    step's batch before the update; the batch is new to the model, so these estimate
    held-out accuracy), "track" (track(model) -> float, recorded before every step and
    after the last, if given) and the float "seconds".

    Batches come from a CPU generator seeded with `seed`, so a run is a deterministic
    function of (initial weights, seed) on a given machine. On the CPU it runs with
    `cpu_threads` threads (restored afterwards): this model's matmuls are too small to
    gain from more, a busy machine makes extra threads much slower (seen here: 1 s
    with one thread, 20-45 s with two while other jobs ran), and one thread gives the
    same numbers whatever the core count.
    """
    device = torch.device(device) if device is not None else default_device()
    model.to(device).train()
    gen = torch.Generator().manual_seed(seed)   # CPU generator: same batches on any device
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history = dict(loss=[], acc_prev=[], acc_first=[], track=[])
    threads = _cpu_threads(cpu_threads) if device.type == "cpu" else contextlib.nullcontext()
    start = time.perf_counter()
    with threads:
        for _ in range(steps):
            if track is not None:
                history["track"].append(track(model))
            tokens, prev, first = (t.to(device) for t in
                                   task(batch_size, model.seq_len, model.vocab_size, gen))
            logits_prev, logits_first, _ = model(tokens)                   # (B, L, V) x2
            loss_prev, loss_first = relation_losses(logits_prev, logits_first, prev, first)
            loss = loss_prev + loss_first
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            history["loss"].append(loss.item())
            history["acc_prev"].append(_accuracy(logits_prev.detach(), prev))
            history["acc_first"].append(_accuracy(logits_first.detach(), first))
        if track is not None:
            history["track"].append(track(model))
    history["seconds"] = time.perf_counter() - start
    return history


# ----------------------------------------------------------------------------- symmetry
def _check_mha(mha):
    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"expected a solutions.MultiHeadAttention, got {type(mha).__name__}")


@torch.no_grad()
def head_param_gap(mha):
    """Largest absolute difference between any head's parameters and head 0's: a float,
    0.0 exactly when all heads are bitwise identical (the key bias aside, see below).

    The key bias is left out (make_heads_identical still copies it). It adds q . b_k to
    all of a query's scores alike, which the softmax ignores, so it never changes what a
    head computes and its true gradient is 0. Its computed gradient is rounding noise
    (~1e-9), and Adam, which divides each gradient by its own running size, turns that
    noise into steps of ~lr: measured, a 2e-3 gap in the key bias after one step between
    heads whose other parameters differed by 1e-8.
    """
    _check_mha(mha)
    w = mha.head_weights()
    blocks = [w.query, w.key, w.value, w.output]                 # (h, in, hd) x3, (h, hd, D)
    blocks += [b for b in (w.query_bias, w.value_bias) if b is not None]  # (h, hd) x2
    return max((b - b[:1]).abs().max().item() for b in blocks)


# ----------------------------------------------------------------------------- specialisation
class RelationScores(NamedTuple):
    """prev (h,): mean attention mass on position i-1; first (h,): on position 0.
    What relation_scores (an exercise, in solutions.diversity) returns."""

    prev: torch.Tensor
    first: torch.Tensor


# ----------------------------------------------------------------------------- importance
@contextlib.contextmanager
def _eval_mode(model):
    """Run the block with `model` in eval mode, then restore its training flag."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def _total_loss(model, batch, head_mask=None, reduce=True):
    """loss_prev + loss_first on batch (B, L): a scalar, or (B,) per example if not reduce.
    Every example has the same number of defined positions, so the mean of the per-example
    losses equals the reduced loss."""
    tokens, prev, first = batch
    logits_prev, logits_first, _ = model(tokens, head_mask=head_mask)  # (B, L, V) x2
    if reduce:
        return sum(relation_losses(logits_prev, logits_first, prev, first))
    # per example: mean over the example's defined positions, for each relation
    per_prev = F.cross_entropy(logits_prev.transpose(1, 2), prev, reduction="none")   # (B, L)
    per_first = F.cross_entropy(logits_first.transpose(1, 2), first, reduction="none")  # (B, L)
    n_prev = (prev != IGNORE_INDEX).sum(1).clamp(min=1)         # (B,)
    n_first = (first != IGNORE_INDEX).sum(1).clamp(min=1)       # (B,)
    return per_prev.sum(1) / n_prev + per_first.sum(1) / n_first  # (B,)


def gradient_importance(model, batch):
    """Michel et al.'s (2019, eq. 2) head importance: batch TwoRelationBatch (N, L) ->
    (h,) on the model's device and in its dtype.

    gradient[k] = mean over examples x of |dL(x)/d gate_k|, with per-example gates
    (N, h) = 1 and L = loss_prev + loss_first in eval mode: a first-order estimate of
    what removing head k costs, for all heads from one backward pass. The model's
    gradients are cleared afterwards (set to None).
    """
    h = model.num_heads
    param = next(model.parameters())
    batch = tuple(t.to(param.device) for t in batch)
    gates = torch.ones(batch[0].shape[0], h, device=param.device, dtype=param.dtype,
                       requires_grad=True)                       # (N, h)
    with _eval_mode(model):
        # summing per-example losses gives each example's own dL(x)/d gate in its row
        _total_loss(model, batch, gates, reduce=False).sum().backward()
    model.zero_grad(set_to_none=True)
    return gates.grad.abs().mean(0)                              # (h,)


# ----------------------------------------------------------------------------- similarity
@torch.no_grad()
def head_circuit_similarity(mha):
    """Weight-space similarity: (qk (h, h), ov (h, h)) cosine similarities between heads'
    QK circuits W_Q^i (W_K^i)^T (query_size, key_size) and OV circuits W_V^i W_O^i
    (value_size, D). Biases are ignored.

    Comparing W_Q^i directly would be misleading: any rotation R of a head's subspace
    (W_Q^i R, W_K^i R) leaves the head unchanged, while these products are invariant.
    """
    _check_mha(mha)
    w = mha.head_weights()
    qk = (w.query @ w.key.transpose(1, 2)).flatten(1)            # (h, query_size*key_size)
    ov = (w.value @ w.output).flatten(1)                         # (h, value_size*D)
    qk, ov = F.normalize(qk, dim=-1), F.normalize(ov, dim=-1)
    return qk @ qk.T, ov @ ov.T                                  # (h, h) x2
