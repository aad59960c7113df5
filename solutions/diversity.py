"""Chapter 5: why heads diversify, measured: the answers to the chapter's exercises.

The task, the tiny model, the training loop and the measurements the chapter gives
(head_param_gap, gradient_importance, head_circuit_similarity) live in `diversity_lab`,
re-exported here. This module adds what the chapter's exercises ask for: symmetry
(make_heads_identical: identical heads stay identical), specialisation (relation_scores),
head importance by ablation and pruning (Michel et al., 2019), and head similarity.
Chapter 5's release ships diversity_lab, never this module.

Shape letters: N samples, B batch, L seq_len, V vocab_size, D d_model, h num_heads,
hd head_dim.
"""
from typing import NamedTuple

import torch
import torch.nn.functional as F

from ._checks import check_tensor
# the lab's names, re-exported: `from solutions.diversity import train` keeps working
from .diversity_lab import (D_MODEL, IGNORE_INDEX, SEQ_LEN, VOCAB_SIZE,  # noqa: F401
                            RelationScores, TinyAttentionModel, TwoRelationBatch, _check_mha,
                            _eval_mode, _total_loss, default_device, evaluate,
                            gradient_importance, head_circuit_similarity, head_param_gap,
                            relation_losses, train, two_relation_task)
from .mha import MultiHeadAttention


# ----------------------------------------------------------------------------- symmetry
def _per_head_blocks(mha):
    """Every per-head parameter of `mha`, each with the head axis first: list of (h, ...)."""
    w = mha.head_weights()
    blocks = [w.query, w.key, w.value, w.output]                 # (h, in, hd) x3, (h, hd, D)
    blocks += [b for b in (w.query_bias, w.key_bias, w.value_bias) if b is not None]  # (h, hd)
    return blocks


@torch.no_grad()
def make_heads_identical(mha, noise=0.0, generator=None):
    """Copy head 0's W_0^Q, W_0^K, W_0^V (and biases) and its W_O block into every head,
    in place; returns `mha`. The output bias is shared by all heads and stays as is.

    The heads then compute the same function, so they receive the same gradient, and
    no optimiser step can make them differ again: a symmetric start is a fixed point.
    In floating point this holds bit for bit only if every head's numbers are rounded
    alike. Measured on this CPU (AVX2, MKL): head_dim 8 stayed bitwise identical for
    1000 steps; with head_dim 5 the heads' columns straddle the 8-wide vectors of the
    matmul, the projections differ by ~1e-7, and training grows that to O(1) by step
    150-250: the fixed point is unstable, and rounding alone knocks the heads off it.
    noise > 0 adds noise * N(0, 1) to heads 1.. (drawn from `generator`), to watch
    nearly identical heads move apart (1e-6 grows to O(1) in ~100 steps).
    """
    _check_mha(mha)
    for block in _per_head_blocks(mha):                          # views into the parameters
        block[1:] = block[:1]                                    # (h-1, ...) <- head 0
        if noise:
            eps = torch.randn(block[1:].shape, generator=generator)  # (h-1, ...) on the CPU
            block[1:] += noise * eps.to(block.device, block.dtype)
    return mha


# ----------------------------------------------------------------------------- specialisation
def relation_scores(weights):
    """weights (B, h, L, L) from a causal model. Returns RelationScores of two (h,)
    tensors: each head's attention on the previous position and on position 0, averaged
    over the batch and over query positions i >= 2 (where i-1 and 0 differ)."""
    check_tensor(weights, "weights", rank=4)
    L = weights.shape[-1]
    if weights.shape[-2] != L or L < 3:
        raise ValueError(
            f"weights must have shape (B, h, L, L) with L >= 3, got {tuple(weights.shape)}")
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


@torch.no_grad()
def ablation_importance(model, batch):
    """batch: TwoRelationBatch (N, L). Returns (h,) on the model's device and in its dtype:
    ablation[k] = L(gate_k = 0) - L(all gates 1), what removing head k alone costs, with
    L = loss_prev + loss_first in eval mode."""
    h = model.num_heads
    param = next(model.parameters())
    kw = dict(device=param.device, dtype=param.dtype)
    batch = tuple(t.to(param.device) for t in batch)
    with _eval_mode(model):
        base = _total_loss(model, batch)
        importance = torch.empty(h, **kw)                        # (h,)
        for k in range(h):
            gates = torch.ones(h, **kw)                          # (h,)
            gates[k] = 0.0
            importance[k] = _total_loss(model, batch, gates) - base
    return importance


def head_importance(model, batch):
    """batch: TwoRelationBatch (N, L). Returns HeadImportance, two (h,) tensors on the
    model's device and in its dtype: ablation_importance (what removing head k alone
    costs) and gradient_importance (Michel et al.'s first-order estimate of the same
    cost, for all heads from one backward pass)."""
    return HeadImportance(ablation_importance(model, batch), gradient_importance(model, batch))


@torch.no_grad()
def prune_heads(mha, heads_to_remove):
    """A new, smaller MultiHeadAttention without the heads in `heads_to_remove`.

    It keeps head_dim and d_model; its output equals `mha`'s output with those heads'
    gates set to 0 (head_mask), because a head contributes only through its own rows of
    W_Q, W_K, W_V and its own block of W_O. The output bias is kept: it belongs to no head.
    """
    _check_mha(mha)
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
    """weights (B, h, Lq, Lk) -> (h, h): cosine similarity between heads' attention maps,
    computed per example and averaged over the batch. 1 on the diagonal; two heads that
    attend to disjoint positions score 0.

    Rows where the mask leaves one choice agree in every head (a causal map's row 0 has
    one key): pass weights[:, :, i0:] to compare only the rows where heads can differ.
    """
    check_tensor(weights, "weights", rank=4)
    maps = F.normalize(weights.flatten(2), dim=-1)               # (B, h, L*L)
    return (maps @ maps.transpose(1, 2)).mean(0)                 # (h, h)
