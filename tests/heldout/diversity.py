"""Held-out set, chapter 5 (why heads diversify): mistakes written before any check was
changed for them, each absent from tests/submissions/diversity.py.

Solution cells: relation_scores, make_heads_identical, head_similarity,
ablation_importance, prune_heads.
"""
from . import Bug, edit, reference

NOTEBOOK = "05_diversity"

_RELATION = reference(NOTEBOOK, "relation_scores")
_IDENTICAL = reference(NOTEBOOK, "make_heads_identical")
_SIMILARITY = reference(NOTEBOOK, "head_similarity")
_ABLATION = reference(NOTEBOOK, "ablation_importance")
_PRUNE = reference(NOTEBOOK, "prune_heads")

CORRECT = {
    # the previous-token weights read off the diagonal below the main one; cosine similarity
    # of every pair of maps by broadcasting; head 0's blocks repeated with Tensor.repeat and
    # copied in place.
    "diagonal_cosine_repeat": {
        "relation_scores": '''
def relation_scores(weights):
    below = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)   # (B, h, L-1): (i, i-1), i >= 1
    prev = below[..., 1:].mean(dim=(0, 2))                         # i >= 2
    first = weights[..., 2:, 0].mean(dim=(0, 2))
    return RelationScores(prev, first)
''',
        "head_similarity": '''
def head_similarity(weights):
    maps = weights.flatten(start_dim=2)                            # (B, h, Lq*Lk)
    sim = F.cosine_similarity(maps[:, :, None], maps[:, None, :], dim=-1)
    return sim.mean(dim=0)
''',
        "make_heads_identical": '''
@torch.no_grad()
def make_heads_identical(mha):
    h, hd = mha.num_heads, mha.head_dim
    for proj in (mha.q_proj, mha.k_proj, mha.v_proj):
        proj.weight.copy_(proj.weight[:hd].clone().repeat(h, 1))    # head 0's rows, h times
        if proj.bias is not None:
            proj.bias.copy_(proj.bias[:hd].clone().repeat(h))
    w = mha.out_proj.weight
    w.copy_(w[:, :hd].clone().repeat(1, h))                        # head 0's columns, h times
    return mha
''',
    },
    # ablation with the gates as rows of 1 - I; pruning through index_select.
    "identity_gates_index_select": {
        "ablation_importance": '''
@torch.no_grad()
def ablation_importance(model, batch):
    p = next(model.parameters())
    tokens, prev_t, first_t = (t.to(p.device) for t in batch)

    def total(head_mask=None):
        logits_prev, logits_first, _ = model(tokens, head_mask=head_mask)
        loss_prev, loss_first = relation_losses(logits_prev, logits_first, prev_t, first_t)
        return loss_prev + loss_first

    h = model.num_heads
    gates = 1 - torch.eye(h, dtype=p.dtype, device=p.device)      # row k: head k off
    base = total()
    return torch.stack([total(g) for g in gates]) - base
''',
        "prune_heads": '''
@torch.no_grad()
def prune_heads(mha, heads_to_remove):
    h, hd = mha.num_heads, mha.head_dim
    remove = set(int(k) for k in heads_to_remove)
    if not remove.issubset(range(h)):
        raise ValueError(f"heads_to_remove must lie in [0, {h})")
    keep = [k for k in range(h) if k not in remove]
    if not keep:
        raise ValueError("cannot remove every head")
    w = mha.out_proj.weight
    index = (torch.tensor(keep)[:, None] * hd + torch.arange(hd)).flatten().to(w.device)
    new = MultiHeadAttention(mha.d_model, len(keep), query_size=mha.query_size,
                             key_size=mha.key_size, value_size=mha.value_size, bias=mha.bias,
                             dropout=mha.dropout, head_dim=hd, device=w.device, dtype=w.dtype)
    for old, small in ((mha.q_proj, new.q_proj), (mha.k_proj, new.k_proj), (mha.v_proj, new.v_proj)):
        small.weight.copy_(old.weight.index_select(0, index))
        if old.bias is not None:
            small.bias.copy_(old.bias.index_select(0, index))
    new.out_proj.weight.copy_(w.index_select(1, index))
    if mha.out_proj.bias is not None:
        new.out_proj.bias.copy_(mha.out_proj.bias)
    new.train(mha.training)
    return new
''',
    },
}

BUGS = {
    # --- relation_scores
    # "First token" read at key 1.
    "relation_first_is_key_1": Bug(
        cells={"relation_scores": edit(_RELATION, "on_first = weights[:, :, i, 0]",
                                       "on_first = weights[:, :, i, 1]")},
        fails=["test_relation_scores"],
        diagnosis=r"(?i)key 1|off by one|position 1.{0,40}(instead|not) .{0,10}0|first token is key 0"),
    # A block sliced where the pairs (i, i - 1) are wanted: every key 1..L-2 of every query.
    "relation_prev_block_not_pairs": Bug(
        cells={"relation_scores": edit(_RELATION, "on_prev = weights[:, :, i, i - 1]",
                                       "on_prev = weights[:, :, 2:, 1:-1]")},
        fails=["test_relation_scores"],
        diagnosis=r"(?i)pairs|diagonal|block|(i, i ?- ?1)|every key"),
    # The last query left out of the average.
    "relation_drops_last_query": Bug(
        cells={"relation_scores": edit(_RELATION, "torch.arange(2, L, device", "torch.arange(2, L - 1, device")},
        fails=["test_relation_scores"],
        diagnosis=r"(?i)last (query|position|row)|L - 1|off by one"),

    # --- make_heads_identical
    # Head 1 copied, as if heads were numbered from 1.
    "identical_copies_head_1": Bug(
        cells={"make_heads_identical": edit(edit(edit(_IDENTICAL,
            "rows[1:] = rows[:1]", "rows[1:] = rows[1:2]"),
            "bias[1:] = bias[:1]", "bias[1:] = bias[1:2]"),
            "columns[:, 1:] = columns[:, :1]", "columns[:, 1:] = columns[:, 1:2]")},
        fails=["test_make_heads_identical"],
        diagnosis=r"(?i)head 1|numbered from 0|head 0 (is|was) (not|un)|copied head \d"),
    # Head 0's block assigned to the rest without repeating it: right for 2 heads only.
    "identical_block_not_repeated": Bug(
        cells={"make_heads_identical": '''
@torch.no_grad()
def make_heads_identical(mha):
    hd = mha.head_dim
    for proj in (mha.q_proj, mha.k_proj, mha.v_proj):
        proj.weight[hd:] = proj.weight[:hd]
        if proj.bias is not None:
            proj.bias[hd:] = proj.bias[:hd]
    mha.out_proj.weight[:, hd:] = mha.out_proj.weight[:, :hd]
    return mha
'''},
        fails=["test_make_heads_identical"],
        diagnosis=r"(?i)repeat|every head|num_heads - 1|each (other )?head|more than (2|two) heads"),

    # --- head_similarity
    # Maps multiplied on the wrong side: similarities between positions, not heads.
    "similarity_between_positions": Bug(
        cells={"head_similarity": edit(_SIMILARITY, "(maps @ maps.transpose(1, 2))",
                                       "(maps.transpose(1, 2) @ maps)")},
        fails=["test_head_similarity"],
        diagnosis=r"(?i)positions|Lq \* Lk|\d+ = Lq \* Lk|wrong side|transpos"),
    # One norm for the whole tensor instead of one per map.
    "similarity_global_norm": Bug(
        cells={"head_similarity": edit(_SIMILARITY, "F.normalize(weights.flatten(2), dim=-1)",
                                       "weights.flatten(2) / weights.norm()")},
        fails=["test_head_similarity"],
        diagnosis=r"(?i)(each|per) map|norm of the whole|one norm|diagonal.{0,20}(not 1|1)|normali[sz]"),

    # --- ablation_importance
    # The gates made once: head k is switched off together with every earlier head.
    "ablation_gates_accumulate": Bug(
        cells={"ablation_importance": edit(_ABLATION,
            "    for k in range(h):\n        gates = torch.ones(h, dtype=param.dtype, device=param.device)    # (h,)\n",
            "    gates = torch.ones(h, dtype=param.dtype, device=param.device)        # (h,)\n    for k in range(h):\n")},
        fails=["test_ablation_importance"],
        diagnosis=r"(?i)earlier heads|cumulat|accumulat|(one|each) head alone|reset|heads 0"),
    # The relative increase (divided by the base loss).
    "ablation_relative_increase": Bug(
        cells={"ablation_importance": edit(_ABLATION, "importance[k] = loss(gates) - base",
                                           "importance[k] = (loss(gates) - base) / base")},
        fails=["test_ablation_importance"],
        diagnosis=r"(?i)relative|divided by (the )?(base|loss)|ratio|base loss"),

    # --- prune_heads
    # Rows k .. k + head_dim (the head index not multiplied by head_dim).
    "prune_rows_not_scaled_by_head_dim": Bug(
        cells={"prune_heads": edit(_PRUNE, "torch.arange(k * hd, (k + 1) * hd)",
                                   "torch.arange(k, k + hd)")},
        fails=["test_prune_heads"],
        diagnosis=r"(?i)k \* head_dim|multipl\w* by head_dim|rows k|overlap|head_dim \* k"),
    # del in the order given: the indices shift after the first deletion.
    "prune_del_shifts_indices": Bug(
        cells={"prune_heads": edit(_PRUNE, "    keep = [k for k in range(h) if k not in remove]\n",
                                   "    keep = list(range(h))\n"
                                   "    for k in heads_to_remove:\n"
                                   "        del keep[int(k)]\n")},
        fails=["test_prune_heads"],
        diagnosis=r"(?i)shift|order|ascending|indices|del\b|kept heads",
        notes="every test removes one head or lists heads_to_remove in descending order"),
    # The new layer built with the default input sizes.
    "prune_forgets_input_sizes": Bug(
        cells={"prune_heads": edit(_PRUNE, "query_size=mha.query_size,\n                             key_size=mha.key_size, value_size=mha.value_size, bias=mha.bias,",
                                   "bias=mha.bias,")},
        fails=["test_prune_heads"],
        diagnosis=r"(?i)query_size|key_size|value_size|input sizes"),
}
