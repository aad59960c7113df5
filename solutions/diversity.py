"""Chapter 5: why heads diversify, measured.

A task that needs two different relations, a tiny attention-only model to learn it,
and the tools that make the chapter's claims measurable: symmetry (identical heads
stay identical), specialisation (trained heads split the relations between them),
head importance and pruning (Michel et al., 2019), and head similarity.

Shape letters: N samples, B batch, L seq_len, V vocab_size, D d_model, h num_heads,
hd head_dim.
"""
import time
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import check_tensor
from .masks import causal_mask
from .mha import MultiHeadAttention

IGNORE_INDEX = -100  # F.cross_entropy's default ignore_index: positions with no target


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
    attention between the two receives a weighted *sum* of the two tokens' values,
    and a linear readout of a sum cannot tell which token came from where; two heads
    can each copy one token cleanly. Tokens are drawn uniformly, with repeats.
    """
    for name, v in (("num_samples", num_samples), ("seq_len", seq_len),
                    ("vocab_size", vocab_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if seq_len < 3:
        raise ValueError(f"seq_len must be >= 3 so that i-1 and 0 differ somewhere, got {seq_len}")
    tokens = torch.randint(vocab_size, (num_samples, seq_len), generator=generator)  # (N, L)
    prev_target = torch.full_like(tokens, IGNORE_INDEX)                     # (N, L)
    prev_target[:, 1:] = tokens[:, :-1]                                     # position 0 has no previous
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
        if tokens.dim() != 2 or tokens.shape[1] > self.seq_len:
            raise ValueError(f"tokens must have shape (B, L) with L <= {self.seq_len}, "
                             f"got {tuple(tokens.shape)}")
        L = tokens.shape[1]
        pos = torch.arange(L, device=tokens.device)             # (L,)
        x = self.tok_emb(tokens) + self.pos_emb(pos)            # (B, L, D)
        out, weights = self.attn(x, x, x, mask=self.mask[:L, :L], head_mask=head_mask)
        return self.readout_prev(out), self.readout_first(out), weights  # (B, L, V) x2, (B, h, L, L)


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


def train(model, *, steps=300, lr=1e-2, batch_size=128, seed=0, device=None,
          task=two_relation_task, track=None):
    """Adam on fresh batches of `task` (a function like two_relation_task).

    Every batch comes from a generator seeded with `seed`, so a run is a deterministic
    function of (model's initial weights, seed) on a given machine and thread count.
    `track(model)` -> float, if given, is recorded before each step and after the last.
    Returns the history: dict of lists, one entry per step, of loss, acc_prev and
    acc_first (measured on that step's batch before the update, so they estimate
    held-out accuracy: the batch is new to the model), plus "track" and "seconds".
    """
    device = torch.device(device) if device is not None else default_device()
    model.to(device).train()
    gen = torch.Generator().manual_seed(seed)   # CPU generator: same batches on any device
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history = dict(loss=[], acc_prev=[], acc_first=[], track=[])
    start = time.perf_counter()
    for _ in range(steps):
        if track is not None:
            history["track"].append(track(model))
        tokens, prev, first = (t.to(device) for t in
                               task(batch_size, model.seq_len, model.vocab_size, gen))
        logits_prev, logits_first, _ = model(tokens)
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
def _per_head_blocks(mha):
    """Every per-head parameter of `mha`, each with the head axis first: list of (h, ...)."""
    w = mha.head_weights()
    blocks = [w.query, w.key, w.value, w.output]                 # (h, in, hd) x3, (h, hd, D)
    blocks += [b for b in (w.query_bias, w.key_bias, w.value_bias) if b is not None]  # (h, hd)
    return blocks


@torch.no_grad()
def make_heads_identical(mha):
    """Copy head 0's W_0^Q, W_0^K, W_0^V (and biases) and its W_O block into every head,
    in place; returns `mha`. The output bias is shared by all heads and stays as is.

    The heads then compute the same function, so they receive the same gradient, and
    (up to floating-point rounding) no optimiser step can make them differ again.
    """
    for block in _per_head_blocks(mha):                          # views into the parameters
        block[1:] = block[:1]                                    # (h-1, ...) <- head 0
    return mha


@torch.no_grad()
def head_param_gap(mha):
    """Largest absolute difference between any head's parameters and head 0's: a float,
    0.0 exactly when all heads are bitwise identical."""
    return max((b - b[:1]).abs().max().item() for b in _per_head_blocks(mha))


# ----------------------------------------------------------------------------- specialisation
class RelationScores(NamedTuple):
    """prev (h,): mean attention mass on position i-1; first (h,): on position 0."""

    prev: torch.Tensor
    first: torch.Tensor


def relation_scores(weights):
    """weights (B, h, L, L) from a causal model. Returns RelationScores of two (h,)
    tensors: each head's attention on the previous position and on position 0, averaged
    over the batch and over query positions i >= 2 (where i-1 and 0 differ)."""
    check_tensor(weights, "weights", rank=4)
    L = weights.shape[-1]
    if weights.shape[-2] != L or L < 3:
        raise ValueError(f"weights must have shape (B, h, L, L) with L >= 3, got {tuple(weights.shape)}")
    i = torch.arange(2, L, device=weights.device)                # query positions with i-1 != 0
    on_prev = weights[:, :, i, i - 1]                            # (B, h, L-2)
    on_first = weights[:, :, i, 0]                               # (B, h, L-2)
    return RelationScores(on_prev.mean((0, 2)), on_first.mean((0, 2)))


# ----------------------------------------------------------------------------- importance
class HeadImportance(NamedTuple):
    """ablation (h,): loss increase when the head is masked out (its gate set to 0);
    gradient (h,): Michel et al.'s score E_x |dL(x)/d gate_h| at gates = 1."""

    ablation: torch.Tensor
    gradient: torch.Tensor


def _total_loss(model, batch, head_mask=None, reduce=True):
    tokens, prev, first = batch
    logits_prev, logits_first, _ = model(tokens, head_mask=head_mask)
    if reduce:
        return sum(relation_losses(logits_prev, logits_first, prev, first))
    # per example: mean over the example's defined positions, for each relation
    B = tokens.shape[0]
    per_prev = F.cross_entropy(logits_prev.transpose(1, 2), prev, reduction="none")   # (B, L)
    per_first = F.cross_entropy(logits_first.transpose(1, 2), first, reduction="none")  # (B, L)
    n_prev = (prev != IGNORE_INDEX).sum(1).clamp(min=1)         # (B,)
    n_first = (first != IGNORE_INDEX).sum(1).clamp(min=1)       # (B,)
    return per_prev.sum(1) / n_prev + per_first.sum(1) / n_first  # (B,)


def head_importance(model, batch):
    """batch: TwoRelationBatch (N, L) on the model's device. Returns HeadImportance.

    ablation[k] = L(gate_k = 0) - L(all gates 1): what removing head k alone costs.
    gradient[k] = mean over examples x of |dL(x)/d gate_k|, with per-example gates
    (N, h) = 1 (Michel et al., 2019, eq. 2): a first-order estimate of the same cost,
    for all heads from one backward pass.
    """
    h = model.num_heads
    device = next(model.parameters()).device
    batch = tuple(t.to(device) for t in batch)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        base = _total_loss(model, batch).item()
        ablation = torch.empty(h)
        for k in range(h):
            gates = torch.ones(h, device=device)                 # (h,)
            gates[k] = 0.0
            ablation[k] = _total_loss(model, batch, gates).item() - base
    gates = torch.ones(batch[0].shape[0], h, device=device, requires_grad=True)  # (N, h)
    # summing per-example losses gives each example's own dL(x)/d gate in its row
    _total_loss(model, batch, gates, reduce=False).sum().backward()
    gradient = gates.grad.abs().mean(0).cpu()                    # (h,)
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return HeadImportance(ablation, gradient)


@torch.no_grad()
def prune_heads(mha, heads_to_remove):
    """A new, smaller MultiHeadAttention without the heads in `heads_to_remove`.

    It keeps head_dim and d_model; its output equals `mha`'s output with those heads'
    gates set to 0 (head_mask), because a head contributes only through its own rows of
    W^Q, W^K, W^V and its own block of W_O. The output bias is kept: it belongs to no head.
    """
    h, hd = mha.num_heads, mha.head_dim
    remove = sorted(set(int(k) for k in heads_to_remove))
    if any(not 0 <= k < h for k in remove):
        raise ValueError(f"heads_to_remove must lie in [0, {h}), got {remove}")
    keep = [k for k in range(h) if k not in remove]
    if not keep:
        raise ValueError(f"cannot remove all {h} heads")
    ref = mha.out_proj.weight
    new = MultiHeadAttention(mha.d_model, len(keep), query_size=mha.query_size,
                             key_size=mha.key_size, value_size=mha.value_size,
                             bias=mha.bias, dropout=mha.dropout, head_dim=hd,
                             device=ref.device, dtype=ref.dtype)
    rows = torch.cat([torch.arange(k * hd, (k + 1) * hd) for k in keep]).to(ref.device)  # (h'*hd,)
    for old_p, new_p in ((mha.q_proj, new.q_proj), (mha.k_proj, new.k_proj),
                         (mha.v_proj, new.v_proj)):
        new_p.weight.copy_(old_p.weight[rows])                   # (h'*hd, in)
        if mha.bias:
            new_p.bias.copy_(old_p.bias[rows])                   # (h'*hd,)
    new.out_proj.weight.copy_(mha.out_proj.weight[:, rows])      # (D, h'*hd)
    if mha.bias:
        new.out_proj.bias.copy_(mha.out_proj.bias)
    return new.train(mha.training)


# ----------------------------------------------------------------------------- similarity
def head_similarity(weights):
    """weights (B, h, L, L) -> (h, h): cosine similarity between heads' attention maps,
    computed per example and averaged over the batch. 1 on the diagonal; two heads that
    attend to disjoint positions score 0."""
    check_tensor(weights, "weights", rank=4)
    maps = F.normalize(weights.flatten(2), dim=-1)               # (B, h, L*L)
    return (maps @ maps.transpose(1, 2)).mean(0)                 # (h, h)


@torch.no_grad()
def head_circuit_similarity(mha):
    """Weight-space similarity: (qk (h, h), ov (h, h)) cosine similarities between heads'
    QK circuits W_i^Q W_i^K^T (query_size, key_size) and OV circuits W_i^V W_i^O
    (value_size, D). Biases are ignored.

    Comparing W_i^Q directly would be misleading: any rotation R of a head's subspace
    (W_i^Q R, W_i^K R) leaves the head unchanged, while these products are invariant.
    """
    w = mha.head_weights()
    qk = (w.query @ w.key.transpose(1, 2)).flatten(1)            # (h, query_size*key_size)
    ov = (w.value @ w.output).flatten(1)                         # (h, value_size*D)
    qk, ov = F.normalize(qk, dim=-1), F.normalize(ov, dim=-1)
    return qk @ qk.T, ov @ ov.T                                  # (h, h) x2
