"""Blind set, chapter 5 (why heads diversify): mistakes written from the exercise text and
the reference solutions alone, by a tester who never read the checks or their messages."""
from tests.heldout import Bug, edit, reference

NOTEBOOK = "05_diversity"

_RS = reference(NOTEBOOK, "relation_scores")
_MHI = reference(NOTEBOOK, "make_heads_identical")
_HS = reference(NOTEBOOK, "head_similarity")
_AI = reference(NOTEBOOK, "ablation_importance")
_PH = reference(NOTEBOOK, "prune_heads")

CORRECT = {
    # the two diagonals read with torch.diagonal and a column slice, then one mean each;
    # the similarity as an einsum of explicitly normalised maps
    "diagonal_and_einsum": {
        "relation_scores": '''
def relation_scores(weights):
    """Each head's mean attention on the previous and the first token: two (num_heads,)."""
    below = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)   # (B, h, L-1): query i+1, key i
    prev = below[..., 1:].mean(dim=(0, 2))                          # queries 2 .. L-1
    first = weights[..., 2:, 0].mean(dim=(0, 2))                    # (B, h, L-2) -> (h,)
    return RelationScores(prev, first)
''',
        "head_similarity": '''
def head_similarity(weights):
    """(B, h, Lq, Lk) -> (h, h) batch-mean cosine similarity of the heads' maps."""
    B, h = weights.shape[:2]
    flat = weights.reshape(B, h, -1)
    unit = flat / flat.norm(dim=-1, keepdim=True)
    return torch.einsum("bin,bjn->bij", unit, unit).mean(dim=0)
''',
    },
    # head 0 tiled with repeat and copy_; the losses collected in a list and stacked;
    # pruning through index_select on the kept heads' rows
    "repeat_and_index_select": {
        "make_heads_identical": '''
@torch.no_grad()
def make_heads_identical(mha):
    """Copy head 0 into every head of mha, in place; return mha."""
    h, hd = mha.num_heads, mha.head_dim
    for proj in (mha.q_proj, mha.k_proj, mha.v_proj):
        proj.weight.copy_(proj.weight[:hd].clone().repeat(h, 1))     # (h*hd, in)
        if proj.bias is not None:
            proj.bias.copy_(proj.bias[:hd].clone().repeat(h))         # (h*hd,)
    w_o = mha.out_proj.weight                                         # (d_model, h*hd)
    w_o.copy_(w_o[:, :hd].clone().repeat(1, h))
    return mha
''',
        "ablation_importance": '''
@torch.no_grad()
def ablation_importance(model, batch):
    """(num_heads,): loss with head k gated off minus the loss with every head on."""
    param = next(model.parameters())
    tokens, prev_target, first_target = (t.to(param.device) for t in batch)

    def total_loss(gates):
        logits_prev, logits_first, _ = model(tokens, head_mask=gates)
        loss_prev, loss_first = relation_losses(logits_prev, logits_first, prev_target,
                                                first_target)
        return loss_prev + loss_first

    full = total_loss(None)
    eye = torch.eye(model.num_heads, dtype=param.dtype, device=param.device)
    return torch.stack([total_loss(1 - eye[k]) - full for k in range(model.num_heads)])
''',
        "prune_heads": '''
@torch.no_grad()
def prune_heads(mha, heads_to_remove):
    """A new MultiHeadAttention without the heads in heads_to_remove; mha is unchanged."""
    h, hd = mha.num_heads, mha.head_dim
    for k in heads_to_remove:
        if not 0 <= int(k) < h:
            raise ValueError(f"head {k} is not in [0, {h})")
    keep = [k for k in range(h) if k not in {int(j) for j in heads_to_remove}]
    if len(keep) == 0:
        raise ValueError("no head would be left")
    w = mha.q_proj.weight
    small = MultiHeadAttention(mha.d_model, len(keep), query_size=mha.query_size,
                               key_size=mha.key_size, value_size=mha.value_size,
                               bias=mha.bias, dropout=mha.dropout, head_dim=hd,
                               device=w.device, dtype=w.dtype)
    index = torch.tensor([k * hd + j for k in keep for j in range(hd)], device=w.device)
    for old, new in ((mha.q_proj, small.q_proj), (mha.k_proj, small.k_proj),
                     (mha.v_proj, small.v_proj)):
        new.weight.copy_(old.weight.index_select(0, index))
        if old.bias is not None:
            new.bias.copy_(old.bias.index_select(0, index))
    small.out_proj.weight.copy_(mha.out_proj.weight.index_select(1, index))
    if mha.out_proj.bias is not None:
        small.out_proj.bias.copy_(mha.out_proj.bias)
    small.train(mha.training)
    return small
''',
    },
}

BUGS = {
    # reads query i-1's weight on key i (row and column swapped): zero in a causal map
    "rs_query_key_swapped": Bug(
        cells={"relation_scores": edit(_RS, "weights[:, :, i, i - 1]", "weights[:, :, i - 1, i]")},
        fails=["test_relation_scores"],
        diagnosis=r"(?i)transpos|swap|rows? (are|hold) (the )?quer|quer\w* (down|on the rows)|key i ?- ?1|above the diagonal|upper triangle|(masked|future) (key|position)"),
    # averages over the batch and the heads, leaving one number per query position
    "rs_mean_over_heads": Bug(
        cells={"relation_scores": edit(_RS, "RelationScores(on_prev.mean((0, 2)), on_first.mean((0, 2)))",
                                       "RelationScores(on_prev.mean((0, 1)), on_first.mean((0, 1)))")},
        fails=["test_relation_scores"],
        diagnosis=r"(?i)averag\w* over (the )?heads|mean over (the )?heads|over the heads|per head|for each head|one (score|value|number) (per|for each) head|instead of (the )?(query )?positions"),
    # copies head 0's rows of out_proj.weight instead of its columns (W_O stored transposed)
    "mhi_out_rows": Bug(
        cells={"make_heads_identical": edit(_MHI, "columns = mha.out_proj.weight.view(-1, h, hd)   # (d_model, h, hd): head i's columns\n    columns[:, 1:] = columns[:, :1]",
                                            "columns = mha.out_proj.weight.view(h, hd, -1)\n    columns[1:] = columns[:1]")},
        fails=["test_make_heads_identical"],
        diagnosis=r"(?i)column|W_?O.{0,40}(transpos|rows)|rows? of (the )?out_?proj|out_?proj\w*.{0,40}rows"),
    # writes into the parameters without torch.no_grad(): autograd refuses in-place writes
    "mhi_no_nograd": Bug(
        cells={"make_heads_identical": edit(_MHI, "@torch.no_grad()\n", "")},
        fails=["test_make_heads_identical"],
        diagnosis=r"(?i)no_grad|autograd|requires.?grad|leaf"),
    # takes plain dot products of the maps, never normalised to length 1
    "hs_no_normalize": Bug(
        cells={"head_similarity": edit(_HS, "F.normalize(weights.flatten(2), dim=-1)", "weights.flatten(2)")},
        fails=["test_head_similarity"],
        diagnosis=r"(?i)normali[sz]|unit (length|norm)|length 1|divid\w* by (the|their) (norm|length)|diagonal"),
    # scores the heads on the previous-token loss only, not loss_prev + loss_first
    "ai_prev_loss_only": Bug(
        cells={"ablation_importance": edit(_AI, "return sum(relation_losses(logits_prev, logits_first, prev_target, first_target))",
                                           "return relation_losses(logits_prev, logits_first, prev_target, first_target)[0]")},
        fails=["test_ablation_importance"],
        diagnosis=r"(?i)loss_first|both (relations|losses)|sum of (the )?(two|both)|loss_prev \+ loss_first|only (the )?(previous|first|one) (relation|loss)|training loss"),
    # leaves out head_dim: the pruned module gets d_model // num_kept features per head
    "ph_no_head_dim": Bug(
        cells={"prune_heads": edit(_PH, "dropout=mha.dropout, head_dim=hd, ", "dropout=mha.dropout, ")},
        fails=["test_prune_heads"],
        diagnosis=r"(?i)head_dim"),
    # returns the new module in its default training mode, whatever mha's mode was
    "ph_mode_not_copied": Bug(
        cells={"prune_heads": edit(_PH, "return new.train(mha.training)", "return new")},
        fails=["test_prune_heads"],
        diagnosis=r"(?i)\bmode\b|\.train\(|\.training|eval\(\)"),
    # sums the weights over the batch and the queries instead of averaging them
    "rs_sum_not_mean": Bug(
        cells={"relation_scores": edit(_RS, "RelationScores(on_prev.mean((0, 2)), on_first.mean((0, 2)))",
                                       "RelationScores(on_prev.sum((0, 2)), on_first.sum((0, 2)))")},
        fails=["test_relation_scores"],
        diagnosis=r"(?i)averag\w* over|sum\w* (instead|rather|over)|\bsums?\b|not divided|divid\w* by (the )?(number|count|batch)|too large by a factor|times (the )?number"),
    # copies head 0 into the query and key rows only, forgetting v_proj
    "mhi_forgets_v_proj": Bug(
        cells={"make_heads_identical": edit(_MHI, "for proj in (mha.q_proj, mha.k_proj, mha.v_proj):", "for proj in (mha.q_proj, mha.k_proj):")},
        fails=["test_make_heads_identical"],
        diagnosis=r"(?i)v_proj|value (projection|rows|weights)|W_?V"),
    # returns one similarity matrix per example, never averaged over the batch
    "hs_no_batch_mean": Bug(
        cells={"head_similarity": edit(_HS, "(maps @ maps.transpose(1, 2)).mean(0)", "maps @ maps.transpose(1, 2)")},
        fails=["test_head_similarity"],
        diagnosis=r"(?i)averag\w* over (the )?batch|mean over (the )?batch|batch (mean|average)|\(B, ?num_heads, ?num_heads\)|per example|one matrix per (example|batch)|batch (axis|dimension)"),
    # returns the loss with each head switched off, without subtracting the unmasked loss
    "ai_no_baseline": Bug(
        cells={"ablation_importance": edit(_AI, "importance[k] = loss(gates) - base", "importance[k] = loss(gates)")},
        fails=["test_ablation_importance"],
        diagnosis=r"(?i)minus|subtract|baseline|with no mask|unmasked|full model'?s? loss|all heads on|every head on|increase of the loss|loss increase"),
}
