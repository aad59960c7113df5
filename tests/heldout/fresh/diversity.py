"""Second held-out set, chapter 5 (why heads diversify): mistakes written from the
exercises' text before they were run, each absent from tests/submissions/diversity.py and
tests/heldout/diversity.py. Every entry changes one solution cell and trains nothing: the
chapter's test cells build their small models themselves, so each entry costs a fraction of
a second to grade.

Solution cells: relation_scores, make_heads_identical, head_similarity,
ablation_importance, prune_heads.
"""
from tests.heldout import Bug, edit, reference
from tests.heldout.fresh import DTYPE as _DTYPE

NOTEBOOK = "05_diversity"

_RELATION = reference(NOTEBOOK, "relation_scores")
_IDENTICAL = reference(NOTEBOOK, "make_heads_identical")
_SIMILARITY = reference(NOTEBOOK, "head_similarity")
_ABLATION = reference(NOTEBOOK, "ablation_importance")
_PRUNE = reference(NOTEBOOK, "prune_heads")

CORRECT = {
    # relation scores from the diagonal under the main one; similarity from
    # F.cosine_similarity between every pair of flattened maps.
    "diagonal_and_cosine_pairs": {
        "relation_scores": '''
def relation_scores(weights):
    below = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)   # (B, h, L-1): query i on i-1
    prev = below[..., 1:].mean(dim=(0, 2))                         # queries i >= 2
    first = weights[:, :, 2:, 0].mean(dim=(0, 2))
    return RelationScores(prev=prev, first=first)
''',
        "head_similarity": '''
def head_similarity(weights):
    maps = weights.flatten(start_dim=2)                             # (B, h, Lq*Lk)
    pairs = F.cosine_similarity(maps[:, :, None], maps[:, None, :], dim=-1)  # (B, h, h)
    return pairs.mean(dim=0)
''',
    },
    # Heads copied slice by slice; ablation with the gates as rows of 1 - I; pruning by
    # index_select on the kept heads' rows.
    "slices_eye_gates_index_select": {
        "make_heads_identical": '''
@torch.no_grad()
def make_heads_identical(mha):
    hd = mha.head_dim
    for i in range(1, mha.num_heads):
        rows = slice(i * hd, (i + 1) * hd)
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj):
            proj.weight[rows] = proj.weight[:hd]
            if proj.bias is not None:
                proj.bias[rows] = proj.bias[:hd]
        mha.out_proj.weight[:, rows] = mha.out_proj.weight[:, :hd]
    return mha
''',
        "ablation_importance": '''
@torch.no_grad()
def ablation_importance(model, batch):
    param = next(model.parameters())
    tokens, prev_target, first_target = [t.to(param.device) for t in batch]
    def total(gates):
        logits_prev, logits_first, _ = model(tokens, head_mask=gates)
        loss_prev, loss_first = relation_losses(logits_prev, logits_first, prev_target, first_target)
        return loss_prev + loss_first
    h = model.num_heads
    all_gates = 1 - torch.eye(h, dtype=param.dtype, device=param.device)   # row k: head k off
    losses = torch.stack([total(all_gates[k]) for k in range(h)])
    return losses - total(None)
''',
        "prune_heads": '''
@torch.no_grad()
def prune_heads(mha, heads_to_remove):
    h, hd = mha.num_heads, mha.head_dim
    removed = sorted(set(int(k) for k in heads_to_remove))
    if any(k < 0 or k >= h for k in removed):
        raise ValueError(f"head indices must be in [0, {h}), got {removed}")
    kept = [k for k in range(h) if k not in removed]
    if len(kept) == 0:
        raise ValueError("no head would be left")
    w = mha.q_proj.weight
    index = torch.tensor([k * hd + j for k in kept for j in range(hd)], device=w.device)
    new = MultiHeadAttention(mha.d_model, len(kept), query_size=mha.query_size,
                             key_size=mha.key_size, value_size=mha.value_size, bias=mha.bias,
                             dropout=mha.dropout, head_dim=hd, device=w.device, dtype=w.dtype)
    for name in ("q_proj", "k_proj", "v_proj"):
        old, small = getattr(mha, name), getattr(new, name)
        small.weight.copy_(old.weight.index_select(0, index))
        if old.bias is not None:
            small.bias.copy_(old.bias.index_select(0, index))
    new.out_proj.weight.copy_(mha.out_proj.weight.index_select(1, index))
    if mha.out_proj.bias is not None:
        new.out_proj.bias.copy_(mha.out_proj.bias)
    new.train(mha.training)
    return new
''',
    },
}

BUGS = {
    # --- relation_scores
    # Query positions from 1: row 1, whose previous token is the first, is counted.
    "relation_rows_from_1": Bug(
        cells={"relation_scores": edit(_RELATION, "i = torch.arange(2, L, device=weights.device)",
                                       "i = torch.arange(1, L, device=weights.device)")},
        fails=["test_relation_scores"],
        diagnosis=r"(?i)(starts?|from) (at )?(i = 1|row 1|query 1|position 1)|i = 1 instead of i = 2|includes? (row|query|position) 1"),
    # A plain tuple where the exercise asks for RelationScores.
    "relation_plain_tuple": Bug(
        cells={"relation_scores": edit(_RELATION, "return RelationScores(on_prev.mean((0, 2)), on_first.mean((0, 2)))",
                                       "return on_prev.mean((0, 2)), on_first.mean((0, 2))")},
        fails=["test_relation_scores"],
        diagnosis=r"(?i)RelationScores|named (pair|tuple)|plain tuple",
        notes="test_relation_scores unpacks the result, so a plain tuple passes "
              "where the exercise asks for RelationScores"),
    # Summed over the positions and divided by L, where there are L - 2 of them.
    "relation_divided_by_L": Bug(
        cells={"relation_scores": edit(_RELATION, "return RelationScores(on_prev.mean((0, 2)), on_first.mean((0, 2)))",
                                       "return RelationScores(on_prev.sum(2).mean(0) / L, on_first.sum(2).mean(0) / L)")},
        fails=["test_relation_scores"],
        diagnosis=r"(?i)L - 2|L-2|divid\w* by L\b|number of (query )?(positions|rows)|\(L - 2\) / L|= \(L-2\)/L"),

    # --- make_heads_identical
    # The copy written into a clone of the rows: the parameters do not change.
    "identical_writes_into_clone": Bug(
        cells={"make_heads_identical": edit(_IDENTICAL, "rows = proj.weight.view(h, hd, -1)          # (h, hd, in): head i's rows, a view",
                                            "rows = proj.weight.view(h, hd, -1).clone()")},
        fails=["test_make_heads_identical"],
        diagnosis=r"(?i)(q_proj|k_proj|v_proj)\.weight.{0,40}(not changed|unchanged)|clone|a copy"),
    # The bias copied without its view: every entry becomes bias[0].
    "identical_bias_first_entry_everywhere": Bug(
        cells={"make_heads_identical": edit(
            _IDENTICAL, "            bias = proj.bias.view(h, hd)            # (h, hd)\n"
                        "            bias[1:] = bias[:1]\n",
            "            proj.bias[1:] = proj.bias[:1]\n")},
        fails=["test_make_heads_identical"],
        diagnosis=r"(?i)bias.{0,80}(first (entry|element|number)|one number|scalar|bias\[0\])"),
    # out_proj.bias treated as per-head blocks and copied too.
    "identical_copies_out_bias": Bug(
        cells={"make_heads_identical": edit(
            _IDENTICAL, "    columns[:, 1:] = columns[:, :1]\n",
            "    columns[:, 1:] = columns[:, :1]\n"
            "    if mha.out_proj.bias is not None:\n"
            "        out_bias = mha.out_proj.bias.view(h, -1)\n"
            "        out_bias[1:] = out_bias[:1]\n")},
        fails=["test_make_heads_identical"],
        diagnosis=r"(?i)out_proj\.bias.{0,80}(changed|no head|leave|copied|unchanged)"),

    # --- head_similarity
    # Each row normalised before the flatten, instead of each whole map.
    "similarity_rows_normalised": Bug(
        cells={"head_similarity": edit(_SIMILARITY, "maps = F.normalize(weights.flatten(2), dim=-1)",
                                       "maps = F.normalize(weights, dim=-1).flatten(2)")},
        fails=["test_head_similarity"],
        diagnosis=r"(?i)(each|every) (row|query).{0,60}normali|normali\w*.{0,60}(rows?|before (the )?flatten)"),
    # flatten(1): the heads flattened into the vector too.
    "similarity_flattens_heads": Bug(
        cells={"head_similarity": edit(_SIMILARITY, "maps = F.normalize(weights.flatten(2), dim=-1)",
                                       "maps = F.normalize(weights.flatten(1), dim=-1)")},
        fails=["test_head_similarity"],
        diagnosis=r"(?i)flatten\w*.{0,60}(heads|axis 1|num_heads)|heads.{0,40}flattened"),
    # Normalised to sum 1 (L1) instead of length 1.
    "similarity_l1_normalised": Bug(
        cells={"head_similarity": edit(_SIMILARITY, "maps = F.normalize(weights.flatten(2), dim=-1)",
                                       "maps = weights.flatten(2) / weights.flatten(2).sum(-1, keepdim=True)")},
        fails=["test_head_similarity"],
        diagnosis=r"(?i)\bL1\b|sums? (of|to) 1|sum of (its|the) entries|(L2|euclidean) norm"),
    # A loop accumulating into torch.zeros (float32).
    "similarity_float32_accumulator": Bug(
        cells={"head_similarity": '''
def head_similarity(weights):
    B, h = weights.shape[:2]
    total = torch.zeros(h, h)
    for b in range(B):
        maps = F.normalize(weights[b].flatten(1), dim=-1)      # (h, Lq*Lk)
        total += maps @ maps.T
    return total / B
'''},
        fails=["test_head_similarity"], diagnosis=_DTYPE),

    # --- ablation_importance
    # The baseline taken with every head switched off instead of none.
    "ablation_baseline_all_heads_off": Bug(
        cells={"ablation_importance": edit(_ABLATION, "base = loss()",
                                           "base = loss(torch.zeros(h, dtype=param.dtype, device=param.device))")},
        fails=["test_ablation_importance"],
        diagnosis=r"(?i)(baseline|base loss|reference loss|loss with no mask).{0,60}(all (the )?heads (off|masked|switched off)|every head (off|masked)|gates? (of )?zeros|torch\.zeros)"),
    # The losses collected as Python floats: a float32 tensor for a float64 model.
    "ablation_float32_from_items": Bug(
        cells={"ablation_importance": edit(
            _ABLATION,
            "    importance = torch.empty(h, dtype=param.dtype, device=param.device)  # (h,)\n"
            "    for k in range(h):\n"
            "        gates = torch.ones(h, dtype=param.dtype, device=param.device)    # (h,)\n"
            "        gates[k] = 0.0\n"
            "        importance[k] = loss(gates) - base\n"
            "    return importance\n",
            "    increases = []\n"
            "    for k in range(h):\n"
            "        gates = torch.ones(h, dtype=param.dtype, device=param.device)\n"
            "        gates[k] = 0.0\n"
            "        increases.append((loss(gates) - base).item())\n"
            "    return torch.tensor(increases)\n")},
        fails=["test_ablation_importance"], diagnosis=_DTYPE,
        notes="test_ablation_importance does not compare the result's dtype with "
              "the model's"),
    # The batch unpacked in the wrong order: the two targets swapped.
    "ablation_targets_swapped": Bug(
        cells={"ablation_importance": edit(_ABLATION, "tokens, prev_target, first_target = (t.to(param.device) for t in batch)",
                                           "tokens, first_target, prev_target = (t.to(param.device) for t in batch)")},
        fails=["test_ablation_importance"],
        diagnosis=r"(?i)(prev_target|first_target|targets?).{0,60}(swapped|other order|exchanged|wrong order)"),
    # gates[k - 1] = 0: entry k measures head k - 1.
    "ablation_gate_off_by_one": Bug(
        cells={"ablation_importance": edit(_ABLATION, "gates[k] = 0.0", "gates[k - 1] = 0.0")},
        fails=["test_ablation_importance"],
        diagnosis=r"(?i)(shift\w*|roll\w*|off by one|next|previous|neighbou?r\w*) head|head k ?- ?1|heads? in (an)?other order|one (head|position) (off|over)"),
    # The @torch.no_grad() decorator forgotten: the values are right, the graph is kept.
    "ablation_without_no_grad": Bug(
        cells={"ablation_importance": edit(_ABLATION, "@torch.no_grad()\ndef ablation_importance", "def ablation_importance")},
        fails=["test_ablation_importance"],
        diagnosis=r"(?i)no_grad|requires_grad|(records?|tracks?|keeps?) (the )?(gradient|graph)",
        notes="test_ablation_importance does not look at whether the result "
              "carries an autograd graph"),

    # --- prune_heads
    # out_proj.bias shared with mha (the same Parameter) instead of copied.
    "prune_shares_out_bias": Bug(
        cells={"prune_heads": edit(_PRUNE, "new.out_proj.bias.copy_(mha.out_proj.bias)",
                                   "new.out_proj.bias = mha.out_proj.bias")},
        fails=["test_prune_heads"],
        diagnosis=r"(?i)shar\w*|same (parameter|tensor|object)|independent|alias",
        notes="test_prune_heads does not check that the new module's parameters are "
              "its own (a change to one does not reach the other)"),
    # k_proj's rows copied from q_proj (a copy-paste slip in the tuple).
    "prune_k_from_q_proj": Bug(
        cells={"prune_heads": edit(_PRUNE, "for old, small in zip((mha.q_proj, mha.k_proj, mha.v_proj),",
                                   "for old, small in zip((mha.q_proj, mha.q_proj, mha.v_proj),")},
        fails=["test_prune_heads"],
        diagnosis=r"(?i)k_proj.{0,60}(copied from|taken from|equals|is) (the )?q_proj|q_proj('s)? (rows|weights?) (in|into|for) k_proj"),
    # The rows gathered for the removed heads instead of the kept ones.
    "prune_copies_removed_heads": Bug(
        cells={"prune_heads": edit(_PRUNE, "for k in keep]).to(ref.device)", "for k in sorted(remove)]).to(ref.device)")},
        fails=["test_prune_heads"],
        diagnosis=r"(?i)(removed|heads_to_remove).{0,80}(instead of|not|rather than).{0,30}kept|kept.{0,60}removed"),
}
