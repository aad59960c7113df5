"""Chapter 5 (why heads diversify): alternative correct submissions and classic bugs.

Solution cells: relation_scores, make_heads_identical, head_similarity, ablation_importance,
prune_heads. Test cells: test_relation_scores, test_make_heads_identical,
test_head_similarity, test_ablation_importance, test_prune_heads. Each test calls only its
own exercise's function, so a bug fails exactly one test cell.
The code runs in the notebook's namespace: torch, F, plt, check, MultiHeadAttention,
RelationScores, relation_losses, IGNORE_INDEX and the other names of the first cell.
More mistakes, each with its diagnosis, are checked without nbgrader in
tests/test_checks_diversity.py.
"""
from . import Bug, edit as _edit

NOTEBOOK = "05_diversity"

# ------------------------------------------------------------------------------ correct
CORRECT = {
    # torch.diagonal, loops over heads, F.cosine_similarity, explicit cross-entropy with
    # one-hot gates, and pruning through the module's state_dict
    "diagonal_loops_state_dict": {
        "relation_scores": '''
def relation_scores(weights):
    # diagonal offset -1 holds (i, i-1) for i = 1..L-1; drop i = 1
    prev = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)[..., 1:]  # (B, h, L-2)
    first = weights[..., 2:, 0]                                           # (B, h, L-2)
    return RelationScores(prev.mean(dim=(0, 2)), first.mean(dim=(0, 2)))
''',
        "make_heads_identical": '''
def make_heads_identical(mha):
    hd = mha.head_dim
    with torch.no_grad():
        for i in range(1, mha.num_heads):
            rows = slice(i * hd, (i + 1) * hd)
            for proj in (mha.q_proj, mha.k_proj, mha.v_proj):
                proj.weight[rows] = proj.weight[:hd]
                if proj.bias is not None:
                    proj.bias[rows] = proj.bias[:hd]
            mha.out_proj.weight[:, rows] = mha.out_proj.weight[:, :hd]
    return mha
''',
        "head_similarity": '''
def head_similarity(weights):
    maps = weights.flatten(start_dim=2)                                   # (B, h, Lq*Lk)
    return F.cosine_similarity(maps[:, :, None], maps[:, None], dim=-1).mean(dim=0)
''',
        "ablation_importance": '''
def ablation_importance(model, batch):
    tokens, prev, first = batch.tokens, batch.prev_target, batch.first_target
    h = model.num_heads

    def loss(mask):
        logits_prev, logits_first, _ = model(tokens, head_mask=mask)
        V = logits_prev.shape[-1]
        return (F.cross_entropy(logits_prev.reshape(-1, V), prev.reshape(-1),
                                ignore_index=IGNORE_INDEX)
                + F.cross_entropy(logits_first.reshape(-1, V), first.reshape(-1)))

    with torch.no_grad():
        base = loss(None)
        return torch.stack([loss(1.0 - torch.eye(h)[k]) - base for k in range(h)])
''',
        "prune_heads": '''
def prune_heads(mha, heads_to_remove):
    h, hd = mha.num_heads, mha.head_dim
    if any(k < 0 or k >= h for k in heads_to_remove):
        raise ValueError(f"head indices must be in [0, {h})")
    keep = [k for k in range(h) if k not in heads_to_remove]
    if not keep:
        raise ValueError("at least one head must remain")
    w = mha.out_proj.weight
    new = MultiHeadAttention(mha.d_model, len(keep), query_size=mha.query_size,
                             key_size=mha.key_size, value_size=mha.value_size, bias=mha.bias,
                             dropout=mha.dropout, head_dim=hd, dtype=w.dtype, device=w.device)
    state = {}
    for name, tensor in mha.state_dict().items():
        proj, kind = name.split(".")
        if proj == "out_proj" and kind == "bias":
            state[name] = tensor
        elif proj == "out_proj":
            state[name] = torch.cat([tensor[:, k * hd:(k + 1) * hd] for k in keep], dim=1)
        else:
            state[name] = torch.cat([tensor[k * hd:(k + 1) * hd] for k in keep], dim=0)
    new.load_state_dict(state)
    new.train(mha.training)          # a new module starts in training mode: take mha's
    return new
''',
    },
    # the per-head view of chapter 3 (head_weights), einsum, (N, h) gates, float64 sums
    "head_weights_einsum": {
        "relation_scores": '''
def relation_scores(weights):
    B, h, L, _ = weights.shape
    prev_mask = torch.zeros(L, L, dtype=weights.dtype, device=weights.device)
    prev_mask[range(2, L), range(1, L - 1)] = 1.0
    first_mask = torch.zeros_like(prev_mask)
    first_mask[2:, 0] = 1.0
    count = B * (L - 2)
    return RelationScores(torch.einsum("bhqk,qk->h", weights, prev_mask) / count,
                          torch.einsum("bhqk,qk->h", weights, first_mask) / count)
''',
        "make_heads_identical": '''
@torch.no_grad()
def make_heads_identical(mha):
    w = mha.head_weights()           # views of the fused parameters, head axis first
    for block in (w.query, w.key, w.value, w.output, w.query_bias, w.key_bias, w.value_bias):
        if block is not None:
            block[1:] = block[0]
    return mha
''',
        "head_similarity": '''
def head_similarity(weights):
    flat = weights.flatten(2).double()
    unit = flat / flat.norm(dim=-1, keepdim=True)
    sims = torch.einsum("bin,bjn->ij", unit, unit) / weights.shape[0]
    return sims.to(weights.dtype)
''',
        "ablation_importance": '''
@torch.no_grad()
def ablation_importance(model, batch):
    tokens, prev, first = batch
    N, h = tokens.shape[0], model.num_heads

    def loss(gates):                 # gates (N, h): one gate per example and head
        logits_prev, logits_first, _ = model(tokens, head_mask=gates)
        return sum(relation_losses(logits_prev, logits_first, prev, first))

    full = loss(torch.ones(N, h))
    drops = []
    for k in range(h):
        gates = torch.ones(N, h)
        gates[:, k] = 0.0
        drops.append(loss(gates) - full)
    return torch.stack(drops)
''',
        "prune_heads": '''
@torch.no_grad()
def prune_heads(mha, heads_to_remove):
    h = mha.num_heads
    if not set(heads_to_remove) <= set(range(h)) or len(set(heads_to_remove)) == h:
        raise ValueError("heads_to_remove must name existing heads and leave one")
    keep = torch.tensor([k for k in range(h) if k not in set(heads_to_remove)])
    p = mha.q_proj.weight
    new = MultiHeadAttention(mha.d_model, len(keep), query_size=mha.query_size,
                             key_size=mha.key_size, value_size=mha.value_size, bias=mha.bias,
                             head_dim=mha.head_dim, dropout=mha.dropout, dtype=p.dtype,
                             device=p.device)
    w = mha.head_weights()           # query (h, in, hd) ... output (h, hd, d_model)
    for proj, block, bias in ((new.q_proj, w.query, w.query_bias),
                              (new.k_proj, w.key, w.key_bias),
                              (new.v_proj, w.value, w.value_bias)):
        proj.weight.copy_(block[keep].transpose(1, 2).reshape(-1, block.shape[1]))
        if bias is not None:
            proj.bias.copy_(bias[keep].reshape(-1))
    new.out_proj.weight.copy_(w.output[keep].reshape(-1, mha.d_model).T)
    if w.output_bias is not None:
        new.out_proj.bias.copy_(w.output_bias)
    return new if mha.training else new.eval()
''',
    },
}

# More correct submissions, checked by tests/test_checks_diversity.py only: the nbgrader test
# autogrades every CORRECT and BUGS entry through the whole notebook (about 20 s each here),
# so alternatives that exercise nothing new in nbgrader itself stay out of it.
MORE_CORRECT = {
    # one forward pass for all ablations (the batch repeated once per head), a strided
    # diagonal, and F.normalize
    "one_pass": {
        "relation_scores": '''
def relation_scores(weights):
    prev = weights[:, :, 2:, 1:].diagonal(dim1=-2, dim2=-1)   # (B, h, L-2): keys i-1, i >= 2
    first = weights[:, :, 2:, 0]
    return RelationScores(prev.mean((0, 2)), first.mean((0, 2)))
''',
        "head_similarity": '''
def head_similarity(weights):
    unit = F.normalize(weights.reshape(*weights.shape[:2], -1), p=2, dim=2)
    return torch.bmm(unit, unit.transpose(1, 2)).mean(0)
''',
        "ablation_importance": '''
@torch.no_grad()
def ablation_importance(model, batch):
    tokens, prev, first = batch
    N, h = tokens.shape[0], model.num_heads
    # group 0: all heads on; group k+1: head k off. One forward pass for all h+1 groups.
    gates = torch.cat([torch.ones(1, h), 1.0 - torch.eye(h)]).repeat_interleave(N, dim=0)
    logits_prev, logits_first, _ = model(tokens.repeat(h + 1, 1), head_mask=gates)

    def per_group(logits, target):
        target = target.repeat(h + 1, 1)                                   # ((h+1)*N, L)
        ce = F.cross_entropy(logits.transpose(1, 2), target, reduction="none")  # 0 if ignored
        defined = (target != IGNORE_INDEX).to(ce.dtype)
        return ce.view(h + 1, -1).sum(1) / defined.view(h + 1, -1).sum(1)  # (h+1,)

    loss = per_group(logits_prev, prev) + per_group(logits_first, first)
    return loss[1:] - loss[0]
''',
    },
}

# ------------------------------------------------------------------------------ bugs
# The nbgrader test autogrades the first three by default (COURSE_NBGRADER_ALL=1 for
# all): they cover three different exercises.
BUGS = {
    "scores_main_diagonal": Bug(
        cells={"relation_scores": '''
def relation_scores(weights):
    L = weights.shape[-1]
    i = torch.arange(2, L)
    return RelationScores(weights[:, :, i, i].mean((0, 2)), weights[:, :, i, 0].mean((0, 2)))
'''},
        fails=["test_relation_scores"],
        diagnosis=r"prev is wrong: .*reads key i \(the main diagonal.* instead of key i-1",
        notes="reads weights[i, i] (the query itself) instead of weights[i, i-1]"),
    "identical_out_proj_rows": Bug(
        cells={"make_heads_identical": '''
@torch.no_grad()
def make_heads_identical(mha):
    h, hd = mha.num_heads, mha.head_dim
    for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
        blocks = proj.weight.view(h, hd, -1)       # rows, also for out_proj
        blocks[1:] = blocks[:1]
        if proj is not mha.out_proj and proj.bias is not None:
            proj.bias.view(h, hd)[1:] = proj.bias.view(h, hd)[:1]
    return mha
'''},
        fails=["test_make_heads_identical"],
        diagnosis=r"out_proj\.weight is wrong: .*takes the rows .* instead of the columns",
        notes="treats out_proj like the input projections: W_O's head blocks are columns"),
    "prune_out_proj_rows": Bug(
        cells={"prune_heads": '''
@torch.no_grad()
def prune_heads(mha, heads_to_remove):
    hd = mha.head_dim
    keep = [k for k in range(mha.num_heads) if k not in heads_to_remove]
    rows = torch.cat([torch.arange(k * hd, (k + 1) * hd) for k in keep])
    new = MultiHeadAttention(mha.d_model, len(keep), query_size=mha.query_size,
                             key_size=mha.key_size, value_size=mha.value_size,
                             bias=mha.bias, head_dim=hd)
    for old, small in zip((mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj),
                          (new.q_proj, new.k_proj, new.v_proj, new.out_proj)):
        small.weight = torch.nn.Parameter(old.weight[rows].clone())
        if mha.bias:
            small.bias = torch.nn.Parameter(old.bias[rows].clone() if old is not mha.out_proj
                                            else old.bias.clone())
    return new
'''},
        fails=["test_prune_heads"],
        diagnosis=r"kept rows of out_proj\.weight.*columns",
        notes="prunes rows of out_proj.weight like the input projections"),
    "similarity_not_normalised": Bug(
        cells={"head_similarity": '''
def head_similarity(weights):
    maps = weights.flatten(2)                         # (B, h, Lq*Lk)
    return (maps @ maps.transpose(1, 2)).mean(0)
'''},
        fails=["test_head_similarity"],
        diagnosis=r"normalise step is left out",
        notes="raw dot products instead of cosine similarities"),
    "ablation_keeps_only_k": Bug(
        cells={"ablation_importance": '''
@torch.no_grad()
def ablation_importance(model, batch):
    tokens, prev, first = batch
    h = model.num_heads

    def loss(gates=None):
        logits_prev, logits_first, _ = model(tokens, head_mask=gates)
        return sum(relation_losses(logits_prev, logits_first, prev, first))

    base = loss()
    return torch.stack([loss(torch.eye(h)[k]) - base for k in range(h)])
'''},
        fails=["test_ablation_importance"],
        diagnosis=r"switches off every head except head k",
        notes="masks every head but k (keeps only head k) instead of masking head k"),
    "scores_rows_0_and_1": Bug(
        cells={"relation_scores": '''
def relation_scores(weights):
    prev = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)     # every row i >= 1
    return RelationScores(prev.mean((0, 2)), weights[..., 0].mean((0, 2)))
'''},
        fails=["test_relation_scores"],
        diagnosis=r"prev is wrong: .*starts at i = 1 instead of i = 2",
        notes="averages over every row, where i-1 and 0 coincide (i = 1) or i = 0 has one key"),
    "identical_no_bias": Bug(
        cells={"make_heads_identical": '''
@torch.no_grad()
def make_heads_identical(mha):
    h, hd = mha.num_heads, mha.head_dim
    for proj in (mha.q_proj, mha.k_proj, mha.v_proj):
        rows = proj.weight.view(h, hd, -1)
        rows[1:] = rows[:1]
    columns = mha.out_proj.weight.view(-1, h, hd)
    columns[:, 1:] = columns[:, :1]
    return mha
'''},
        fails=["test_make_heads_identical"],
        diagnosis=r"q_proj\.bias is wrong: .*q_proj\.bias was not changed",
        notes="copies the weights but forgets the per-head biases"),
}


# ------------------------------------------------------------------ more bugs, each a whole cell
_SCORES = '''
def relation_scores(weights):
    L = weights.shape[-1]
    i = torch.arange(2, L, device=weights.device)
    on_prev = weights[:, :, i, i - 1]                 # (B, h, L-2)
    on_first = weights[:, :, i, 0]                    # (B, h, L-2)
    return RelationScores(on_prev.mean((0, 2)), on_first.mean((0, 2)))
'''
_SIMILARITY = '''
def head_similarity(weights):
    maps = F.normalize(weights.flatten(2), dim=-1)    # (B, h, Lq*Lk)
    return (maps @ maps.transpose(1, 2)).mean(0)      # (h, h)
'''
_IDENTICAL = '''
@torch.no_grad()
def make_heads_identical(mha):
    h, hd = mha.num_heads, mha.head_dim
    for proj in (mha.q_proj, mha.k_proj, mha.v_proj):
        rows = proj.weight.view(h, hd, -1)          # (h, hd, in)
        rows[1:] = rows[:1]
        if proj.bias is not None:
            bias = proj.bias.view(h, hd)
            bias[1:] = bias[:1]
    columns = mha.out_proj.weight.view(-1, h, hd)   # (d_model, h, hd)
    columns[:, 1:] = columns[:, :1]
    return mha
'''
_ABLATION = '''
@torch.no_grad()
def ablation_importance(model, batch):
    param = next(model.parameters())
    tokens, prev_target, first_target = (t.to(param.device) for t in batch)

    def loss(head_mask=None):
        logits_prev, logits_first, _ = model(tokens, head_mask=head_mask)
        return sum(relation_losses(logits_prev, logits_first, prev_target, first_target))

    h = model.num_heads
    base = loss()
    importance = torch.empty(h, dtype=param.dtype, device=param.device)
    for k in range(h):
        gates = torch.ones(h, dtype=param.dtype, device=param.device)
        gates[k] = 0.0
        importance[k] = loss(gates) - base
    return importance
'''
_PRUNE = '''
@torch.no_grad()
def prune_heads(mha, heads_to_remove):
    h, hd = mha.num_heads, mha.head_dim
    if not set(heads_to_remove) <= set(range(h)):
        raise ValueError(f"heads_to_remove must lie in [0, {h})")
    keep = [k for k in range(h) if k not in heads_to_remove]
    if not keep:
        raise ValueError(f"cannot remove all {h} heads")
    ref = mha.out_proj.weight
    new = MultiHeadAttention(mha.d_model, len(keep), query_size=mha.query_size,
                             key_size=mha.key_size, value_size=mha.value_size, bias=mha.bias,
                             dropout=mha.dropout, head_dim=hd, device=ref.device,
                             dtype=ref.dtype)
    rows = torch.cat([torch.arange(k * hd, (k + 1) * hd) for k in keep]).to(ref.device)
    for old, small in zip((mha.q_proj, mha.k_proj, mha.v_proj),
                          (new.q_proj, new.k_proj, new.v_proj)):
        small.weight.copy_(old.weight[rows])
        if mha.bias:
            small.bias.copy_(old.bias[rows])
    new.out_proj.weight.copy_(mha.out_proj.weight[:, rows])
    if mha.bias:
        new.out_proj.bias.copy_(mha.out_proj.bias)
    return new.train(mha.training)
'''


def _bug(cell, base, old, new, diagnosis, notes=""):
    """A bug of one exercise: its cell is `base` edited; it fails that exercise's test."""
    return Bug(cells={cell: _edit(base, old, new)}, fails=[f"test_{cell}"], diagnosis=diagnosis,
               notes=notes)


def _scores(old, new, diagnosis):
    return _bug("relation_scores", _SCORES, old, new, diagnosis)


def _similarity(old, new, diagnosis):
    return _bug("head_similarity", _SIMILARITY, old, new, diagnosis)


def _identical(old, new, diagnosis):
    return _bug("make_heads_identical", _IDENTICAL, old, new, diagnosis)


def _ablation(old, new, diagnosis):
    return _bug("ablation_importance", _ABLATION, old, new, diagnosis)


def _prune(old, new, diagnosis):
    return _bug("prune_heads", _PRUNE, old, new, diagnosis)


_PREV = "on_prev = weights[:, :, i, i - 1]"
_FIRST = "on_first = weights[:, :, i, 0]"
_MEANS = "return RelationScores(on_prev.mean((0, 2)), on_first.mean((0, 2)))"
_LOSS = "        return sum(relation_losses(logits_prev, logits_first, prev_target, first_target))\n"

BUGS.update({
    # --- relation_scores: axes and averaging
    "scores_above_diagonal": _scores(
        _PREV, "on_prev = torch.diagonal(weights, offset=1, dim1=-2, dim2=-1)[..., 1:]",
        r"prev is wrong: .*above the diagonal .*causal mask sets those to 0"),
    "scores_query_key_swapped": _scores(_PREV, "on_prev = weights[:, :, i - 1, i]",
                                        r"prev is wrong: .*weights\[\.\.\., i-1, i\] with query "
                                        r"and key exchanged"),
    "scores_first_row_not_column": _scores(_FIRST, "on_first = weights[:, :, 0, i]",
                                           r"first is wrong: .*reads row 0.*instead of column 0, "
                                           r"weights\[\.\.\., i, 0\]"),
    "scores_fields_swapped": _scores(
        _MEANS, "return RelationScores(on_first.mean((0, 2)), on_prev.mean((0, 2)))",
        r"prev is wrong: .*reads key 0 instead of key i-1.*prev and first swapped"),
    "scores_summed_over_queries": _scores(
        _MEANS, "return RelationScores(on_prev.sum(2).mean(0), on_first.mean((0, 2)))",
        r"sums over the query positions instead of averaging"),
    "scores_averaged_over_heads": _scores(
        _MEANS, "return RelationScores(on_prev.mean((1, 2)), on_first.mean((1, 2)))",
        r"num_heads axis has 3 = B entries"),
    "scores_per_query_position": _scores(
        _MEANS, "return RelationScores(on_prev.mean(0), on_first.mean(0))",
        r"keeping one number per head"),
    "scores_stacked_tensor": _scores(
        _MEANS, "return torch.stack([on_prev.mean((0, 2)), on_first.mean((0, 2))])",
        r"returned a Tensor of shape \(2, 2\) where the exercise documents a pair"),
    "scores_zeroes_input_in_place": _scores(
        _PREV, "weights[:, :, 0] = 0      # the first query has no previous token\n"
               "    on_prev = weights[:, :, i, i - 1]", r"changed its argument `weights` in place"),
    "scores_float64_result": _scores(
        _MEANS, "return RelationScores(on_prev.double().mean((0, 2)), on_first.mean((0, 2)))",
        r"dtype"),
    # --- head_similarity: normalisation and averaging
    "similarity_per_query_row": Bug(
        cells={"head_similarity": '''
def head_similarity(weights):
    # cosine of each query's row, then the mean over batch and queries
    return F.cosine_similarity(weights[:, :, None], weights[:, None], dim=-1).mean((0, 3))
'''}, fails=["test_head_similarity"], diagnosis=r"one query row at a time"),
    "similarity_not_averaged_over_batch": _similarity(
        "return (maps @ maps.transpose(1, 2)).mean(0)", "return maps @ maps.transpose(1, 2)",
        r"(?i)average over the batch step is left out"),
    "similarity_maps_averaged_first": _similarity(
        "maps = F.normalize(weights.flatten(2), dim=-1)    # (B, h, Lq*Lk)\n"
        "    return (maps @ maps.transpose(1, 2)).mean(0)",
        "maps = F.normalize(weights.mean(0).flatten(1), dim=-1)   # (h, Lq*Lk)\n"
        "    return maps @ maps.T", r"averages the maps over the batch before"),
    "similarity_batch_flattened": _similarity(
        "maps = F.normalize(weights.flatten(2), dim=-1)    # (B, h, Lq*Lk)\n"
        "    return (maps @ maps.transpose(1, 2)).mean(0)",
        "maps = F.normalize(weights.transpose(0, 1).flatten(1), dim=-1)  # (h, B*Lq*Lk)\n"
        "    return maps @ maps.T", r"flattens the batch into each head's vector"),
    "similarity_pearson": _similarity(
        "maps = F.normalize(weights.flatten(2), dim=-1)",
        "maps = weights.flatten(2)\n"
        "    maps = F.normalize(maps - maps.mean(-1, keepdim=True), dim=-1)", r"Pearson"),
    "similarity_normalised_over_heads": _similarity(
        "F.normalize(weights.flatten(2), dim=-1)", "F.normalize(weights.flatten(2), dim=1)",
        r"runs along the heads axis"),
    "similarity_summed_over_batch": _similarity(
        "return (maps @ maps.transpose(1, 2)).mean(0)", "return (maps @ maps.transpose(1, 2)).sum(0)",
        r"average over the batch step sums instead of averaging"),
    # --- make_heads_identical: parameter writes
    "identical_without_no_grad": _identical("@torch.no_grad()\n", "",
                                            r"leaf Variable.*torch\.no_grad\(\)"),
    "identical_returns_none": _identical("    return mha\n", "", r"returned None where the exercise documents"),
    "identical_returns_copy": _identical("    return mha\n", "    return copy.deepcopy(mha)\n",
                                         r"returned another object"),
    "identical_forgets_out_proj": _identical("    columns[:, 1:] = columns[:, :1]\n", "",
                                             r"out_proj\.weight was not changed"),
    "identical_zeroes_out_bias": _identical(
        "    columns[:, 1:] = columns[:, :1]\n",
        "    columns[:, 1:] = columns[:, :1]\n    mha.out_proj.bias.zero_()   # no head owns it\n",
        r"out_proj\.bias changed"),
    "identical_strided_rows": _identical(
        "        rows = proj.weight.view(h, hd, -1)          # (h, hd, in)\n"
        "        rows[1:] = rows[:1]\n",
        "        rows = proj.weight.view(hd, h, -1)          # (hd, h, in)\n"
        "        rows[:, 1:] = rows[:, :1]\n", r"q_proj\.weight is wrong: .*takes strided rows"),
    "identical_columns_of_inputs": _identical(
        "        rows = proj.weight.view(h, hd, -1)          # (h, hd, in)\n"
        "        rows[1:] = rows[:1]\n",
        "        cols = proj.weight.view(-1, h, hd)          # like out_proj\n"
        "        cols[:, 1:] = cols[:, :1]\n",
        r"q_proj\.weight is wrong: .*takes the columns .* instead of the rows"),
    "identical_forgets_v_proj": _identical("    for proj in (mha.q_proj, mha.k_proj, mha.v_proj):\n",
                                           "    for proj in (mha.q_proj, mha.k_proj):\n",
                                           r"v_proj\.weight was not changed"),
    "identical_replaces_parameter": _identical(
        "    return mha\n",
        "    mha.q_proj.weight = torch.nn.Parameter(mha.q_proj.weight.clone())  # fresh leaf\n"
        "    return mha\n", r"replaced the parameter q_proj\.weight"),
    # --- ablation_importance: evaluation
    "ablation_loss_not_increase": _ablation("importance[k] = loss(gates) - base",
                                            "importance[k] = loss(gates)",
                                            r"baseline subtraction step is left out"),
    "ablation_sign_reversed": _ablation("importance[k] = loss(gates) - base",
                                        "importance[k] = base - loss(gates)",
                                        r"baseline subtraction step is the wrong way round"),
    "ablation_only_first_loss": _ablation(
        _LOSS, "        return relation_losses(logits_prev, logits_first, prev_target, "
               "first_target)[1]\n", r"uses only loss_first"),
    "ablation_summed_cross_entropy": _ablation(
        _LOSS, "        V = logits_prev.shape[-1]\n"
               "        return (F.cross_entropy(logits_prev.reshape(-1, V), prev_target.reshape(-1),"
               " reduction='sum')\n"
               "                + F.cross_entropy(logits_first.reshape(-1, V), "
               "first_target.reshape(-1), reduction='sum'))\n",
        r"sums the cross-entropy over the positions"),
    "ablation_changes_the_model": _ablation(
        "        importance[k] = loss(gates) - base\n",
        "        importance[k] = loss(gates) - base\n"
        "        model.w_out[0, 0] += 1.0   # (a leftover of a debugging session)\n",
        r"changed its argument `model`'s `w_out` in place"),
    "ablation_returns_list": _ablation("    return importance\n", "    return importance.tolist()\n",
                                       r"returned a list of 3 items where .*torch\.Tensor"),
    # --- prune_heads: parameter loading
    "prune_forgets_input_biases": _prune("        if mha.bias:\n            small.bias.copy_(old.bias[rows])\n",
                                         "", r"q_proj\.bias is wrong: every entry is 0"),
    "prune_forgets_out_bias": _prune("    if mha.bias:\n        new.out_proj.bias.copy_(mha.out_proj.bias)\n",
                                     "", r"out_proj\.bias is wrong: every entry is 0"),
    "prune_default_head_dim": _prune("dropout=mha.dropout, head_dim=hd,", "dropout=mha.dropout,",
                                     r"build it with head_dim=mha\.head_dim"),
    "prune_keeps_first_heads": _prune("    keep = [k for k in range(h) if k not in heads_to_remove]\n",
                                      "    keep = list(range(h - len(heads_to_remove)))\n",
                                      r"keeps the first heads 0 \.\. num_kept - 1"),
    "prune_returns_original": _prune("    return new.train(mha.training)\n", "    return mha\n",
                                     r"returned mha itself"),
    "prune_zeroes_original": _prune(
        "    for old, small in zip(",
        "    for k in heads_to_remove:   # switch the removed heads off first\n"
        "        mha.q_proj.weight[k * hd:(k + 1) * hd] = 0\n    for old, small in zip(",
        r"changed its argument `mha`'s `q_proj\.weight` in place"),
    "prune_default_dtype": Bug(
        cells={"prune_heads": _edit(_PRUNE, "device=ref.device,\n                             dtype=ref.dtype)", ")")},
        fails=["test_prune_heads"], diagnosis=r"dtype", notes="hidden only: float64"),
    "prune_returns_none": _prune("    return new.train(mha.training)\n", "",
                                 r"returned None where the exercise documents"),
})

# ------------------------------------------------------------------ held-out mistakes (the
# outside tester's set): each was a false pass or a generic message, now named
BUGS.update({
    "prune_new_module_in_train_mode": _prune(
        "    return new.train(mha.training)\n", "    return new\n",
        r"Your pruned module is in training mode.*\.train\(mha\.training\)"),
    "prune_always_eval": _prune(
        "    return new.train(mha.training)\n", "    return new.eval()\n",
        r"mha is in training mode here but your pruned module is in eval mode"),
    "similarity_divided_by_size": Bug(
        cells={"head_similarity": '''
def head_similarity(weights):
    maps = weights.flatten(2)                                   # (B, h, Lq*Lk)
    return (maps @ maps.transpose(1, 2)).mean(0) / maps.shape[-1]
'''},
        fails=["test_head_similarity"],
        diagnosis=r"dot products by the number of entries.*instead of by each map's norm",
        notes="a mean of products in place of the cosine's division by the norms"),
    "ablation_mean_of_losses": _ablation(
        _LOSS, _LOSS.replace("first_target))\n", "first_target)) / 2\n"),
        r"averages the two losses"),
    # promises of the exercise's text that no check exercised before: mha's dropout, and the
    # ValueError for an index outside [0, num_heads)
    "prune_forgets_dropout": _prune("dropout=mha.dropout, head_dim=hd,", "head_dim=hd,",
                                    r"its dropout is off.*dropout=mha\.dropout"),
    "prune_no_index_check": Bug(
        cells={"prune_heads": _edit(
            CORRECT["diagonal_loops_state_dict"]["prune_heads"],
            "    if any(k < 0 or k >= h for k in heads_to_remove):\n"
            "        raise ValueError(f\"head indices must be in [0, {h})\")\n", "")},
        fails=["test_prune_heads"], diagnosis=r"prune_heads\(mha, \[4\]\) raised nothing where the "
                                              r"exercise documents a ValueError",
        notes="an unknown head index is ignored silently instead of refused"),
    "identical_last_head_missed": Bug(
        cells={"make_heads_identical": _edit(
            CORRECT["diagonal_loops_state_dict"]["make_heads_identical"],
            "range(1, mha.num_heads)", "range(1, mha.num_heads - 1)")},
        fails=["test_make_heads_identical"],
        diagnosis=r"q_proj\.weight is wrong: .*stops before the last head",
        notes="range(1, num_heads - 1) misses the last head"),
})


# The promises every exercise makes beyond its values (checks.common's PROMISES, issue 20
# item 3): the documented return type, a measurement without a graph in the model's dtype,
# a new module that owns its tensors, the argument left in the mode it came in.
BUGS.update({
    "scores_returns_list": _scores(
        _MEANS, "return [on_prev.mean((0, 2)), on_first.mean((0, 2))]",
        r"returned a list of 2 items where the exercise documents RelationScores\(prev, "
        r"first\), a named tuple"),
    "ablation_graph_kept": Bug(
        cells={"ablation_importance": _edit(_edit(
            _ABLATION, "@torch.no_grad()\ndef ablation_importance", "def ablation_importance"),
            "    base = loss()\n", "    base = loss().detach()   # the baseline needs no graph\n")},
        fails=["test_ablation_importance"],
        diagnosis=r"attached to the autograd graph .*@torch\.no_grad\(\)",
        notes="detaches the baseline only: every importance keeps the graph of its loss"),
    "ablation_default_dtype": _ablation(
        "    importance = torch.empty(h, dtype=param.dtype, device=param.device)\n",
        "    importance = torch.empty(h, device=param.device)\n",
        r"its dtype is torch\.float32 where it should be torch\.float64 \(the dtype of the "
        r"model's parameters\)"),
    "prune_shares_bias_data": _prune(
        "        new.out_proj.bias.copy_(mha.out_proj.bias)\n",
        "        new.out_proj.bias.data = mha.out_proj.bias.data   # the bias as it is\n",
        r"`out_proj\.bias` shares its memory with mha's `out_proj\.bias`"),
    "prune_sets_mha_to_eval": _prune(
        "    h, hd = mha.num_heads, mha.head_dim\n",
        "    mha.eval()   # no dropout while copying\n    h, hd = mha.num_heads, mha.head_dim\n",
        r"argument `mha`'s mode after the call is eval where it should be training"),
})


# ------------------------------------------------------------------ a practice set (issue 20)
# Written from the exercises' text before the checks were changed for them (each diagnosis
# too): 11 of these 16 were named then, 14 after (the two left: messages true of the
# mistake in other words than the diagnosis first written, which is adapted here).
BUGS.update({
    "scores_from_row_1": _scores(
        "i = torch.arange(2, L, device=weights.device)",
        "i = torch.arange(1, L, device=weights.device)",
        r"prev is wrong: .*starts at i = 1 instead of i = 2"),
    "scores_prev_two_back": _scores(_PREV, "on_prev = weights[:, :, i, i - 2]",
                                    r"reads key i-2 instead of key i-1"),
    "scores_first_is_key_1": _scores(_FIRST, "on_first = weights[:, :, i, 1]",
                                     r"reads key 1 instead of key 0"),
    "scores_batch_summed": _scores(
        _MEANS, "return RelationScores(on_prev.sum(0).mean(-1), on_first.sum(0).mean(-1))",
        r"sums over the batch instead of averaging"),
    "scores_mean_over_L_minus_1": _scores(
        _MEANS, "return RelationScores(on_prev.sum(2).mean(0) / (L - 1), "
                "on_first.sum(2).mean(0) / (L - 1))",
        r"times 0\.8 = 4/5: as if a sum were divided by 5 where it should be divided by 4"),
    "similarity_rows_normalised": _similarity(
        "maps = F.normalize(weights.flatten(2), dim=-1)",
        "maps = F.normalize(weights, dim=-1).flatten(2)",
        r"normalises each query's row of the map"),
    "similarity_distance": _similarity(
        "return (maps @ maps.transpose(1, 2)).mean(0)",
        "return 1 - (maps @ maps.transpose(1, 2)).mean(0)", r"it is 1 minus the right answer"),
    "similarity_between_positions": _similarity(
        "return (maps @ maps.transpose(1, 2)).mean(0)",
        "return (maps.transpose(1, 2) @ maps).mean(0)",
        r"expected shape \(3, 3\) = \(num_heads, num_heads\), got \(25, 25\)"),
    "identical_copies_head_1": _identical("        rows[1:] = rows[:1]\n",
                                          "        rows[:] = rows[1:2]\n",
                                          r"copies head 1's block into every head"),
    "identical_averages_heads": _identical(
        "        rows[1:] = rows[:1]\n", "        rows[:] = rows.mean(0, keepdim=True)\n",
        r"copies the average of all heads' blocks into every head"),
    "identical_out_proj_head_1_only": _identical(
        "    columns[:, 1:] = columns[:, :1]\n", "    columns[:, 1:2] = columns[:, :1]\n",
        r"out_proj\.weight is wrong: .*(misses head num_heads - 1|into head 1 only)"),
    "ablation_baseline_all_off": _ablation(
        "    base = loss()\n",
        "    base = loss(torch.zeros(model.num_heads, dtype=param.dtype, device=param.device))\n",
        r"subtracts the loss with every head off"),
    "ablation_relative_increase": _ablation(
        "        importance[k] = loss(gates) - base\n",
        "        importance[k] = (loss(gates) - base) / base\n",
        r"divides by the loss with no mask \(a relative increase\)"),
    "ablation_gates_never_reset": _ablation(
        "    for k in range(h):\n        gates = torch.ones(h, dtype=param.dtype, device=param.device)\n",
        "    gates = torch.ones(h, dtype=param.dtype, device=param.device)\n    for k in range(h):\n",
        r"switches off heads 0 \.\. k together"),
    "prune_kept_heads_reversed": _prune(
        "keep = [k for k in range(h) if k not in heads_to_remove]",
        "keep = [k for k in reversed(range(h)) if k not in heads_to_remove]",
        r"head of the pruned module axis runs in reverse order"),
    "prune_removes_first_index_only": _prune(
        "keep = [k for k in range(h) if k not in heads_to_remove]",
        "keep = [k for k in range(h) if k != heads_to_remove[0]]",
        r"prune_heads\(mha, \[0, 1, 2, 3\]\) raised nothing where the exercise documents a "
        r"ValueError: no head would be left"),
})


# issue 20: mistakes that RAISE (helper i20raise's practice set; each diagnosis was written
# from the exercise's text before the checks named the cause: diagnose.error_cause)
from functools import partial as _partial  # noqa: E402

from tests.submissions import replaced_in as _replaced_in  # noqa: E402

_raising = _partial(_replaced_in, NOTEBOOK)   # _raising(cell, old, new): {cell: its new code}


BUGS.update({
    "raise_similarity_transpose_batch_axis": Bug(
        cells=_raising("head_similarity", "maps.transpose(1, 2)",
                       "maps.transpose(0, 1)"),
        fails=["test_head_similarity"],
        diagnosis=r"last two axes|transpose\((1, 2|-2, -1|-1, -2)\)|axes 1 and 2"),
    "raise_similarity_not_flattened": Bug(
        cells=_raising("head_similarity", "F.normalize(weights.flatten(2), dim=-1)",
                       "F.normalize(weights, dim=-1)"),
        fails=["test_head_similarity"], diagnosis=r"flatten|Lq \* Lk|one vector per head"),
    "raise_relation_mean_two_args": Bug(
        cells=_raising("relation_scores", "on_prev.mean((0, 2))",
                       "on_prev.mean(0, 2)"),
        fails=["test_relation_scores"],
        diagnosis=r"tuple|\(0, 2\)|several axes|keepdim"),
})

# ------------------------------------------------------------------ a second practice set
# (issue 20, sixth session): 23 mistakes written from the exercises' text before the checks
# were changed for them, each diagnosis naming the cause; 8 of the 23 were named then, 20
# after. The three left out are not named yet: `torch.diagonal(weights, -1)` with its
# default axes (0, 1); `maps @ maps.T` on a 3-D tensor (a raise whose restated error says
# what broadcasting met, not that .T reverses every axis); F.cross_entropy(...,
# ignore_index=0) on targets holding IGNORE_INDEX = -100 (PyTorch's "Target -100 is out of
# bounds", not that position 0's target is IGNORE_INDEX, cross_entropy's default).
_CLONE_ROWS = "        rows = proj.weight.view(h, hd, -1)          # (h, hd, in)\n"
_NO_BIAS_CHECK = ("        if proj.bias is not None:\n"
                  "            bias = proj.bias.view(h, hd)\n"
                  "            bias[1:] = bias[:1]\n")
_NORMALISED = "maps = F.normalize(weights.flatten(2), dim=-1)    # (B, h, Lq*Lk)"
_SIMILARITIES = "return (maps @ maps.transpose(1, 2)).mean(0)      # (h, h)"
_ONES = "        gates = torch.ones(h, dtype=param.dtype, device=param.device)\n"
_OUT_BIAS = "        new.out_proj.bias.copy_(mha.out_proj.bias)\n"
_CE = ("        V = logits_prev.shape[-1]\n"
       "        return (F.{loss}(logits_prev.reshape(-1, V), prev_target.reshape(-1){extra})\n"
       "                + F.{loss}(logits_first.reshape(-1, V), first_target.reshape(-1)))\n")

BUGS.update({
    "scores_diagonal_drops_two": _scores(
        _PREV, "on_prev = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)[..., 2:]",
        r"(?i)i = 3|i >= 3|off by one"),
    "scores_first_every_row": _scores(
        _FIRST, "on_first = weights[:, :, :, 0]",
        r"(?i)first.*(every query position|from i = 0|rows 0 and 1)"),
    "scores_batch_kept": _scores(
        _MEANS, "return RelationScores(on_prev.mean(2), on_first.mean(2))",
        r"(?i)(average|mean).*over the batch"),
    "scores_mean_two_args": _scores(
        _MEANS, "return RelationScores(on_prev.mean(0, 2), on_first.mean(0, 2))",
        r"(?i)keepdim"),
    "identical_writes_clone": _identical(
        _CLONE_ROWS, _CLONE_ROWS.replace(".view(h, hd, -1)  ", ".view(h, hd, -1).clone()"),
        r"(?i)(writ\w*|copied) (in)?to a copy|clone\(\)|not a view"),
    "identical_bias_none": _identical(
        _NO_BIAS_CHECK, "        bias = proj.bias.view(h, hd)\n        bias[1:] = bias[:1]\n",
        r"(?i)bias=False|bias is None"),
    "identical_out_bias_blocks": _identical(
        "    columns[:, 1:] = columns[:, :1]\n",
        "    columns[:, 1:] = columns[:, :1]\n"
        "    mha.out_proj.bias.view(h, hd)[1:] = mha.out_proj.bias.view(h, hd)[:1]\n",
        r"(?i)out_proj\.bias.*(belongs to no head|leave it|no head)"),
    "identical_from_last_head": _identical("        rows[1:] = rows[:1]\n",
                                           "        rows[:-1] = rows[-1:]\n",
                                           r"(?i)head 2's block.*instead of head 0"),
    "similarity_global_norm": _similarity(
        _NORMALISED, "maps = weights.flatten(2)\n    maps = maps / maps.norm()",
        r"(?i)norm.*(whole|entire)|each map's (own )?norm"),
    "similarity_norm_no_keepdim": _similarity(
        _NORMALISED, "maps = weights.flatten(2)\n    maps = maps / maps.norm(dim=-1)",
        r"(?i)keepdim"),
    "similarity_heads_of_all_examples": _similarity(
        _SIMILARITIES, "maps = maps.flatten(0, 1)                          # (B*h, Lq*Lk)\n"
                       "    return maps @ maps.T",
        r"(?i)(batch|examples?).*(merged|with the heads|into the heads)"),
    "similarity_mean_everything": _similarity(
        _SIMILARITIES, "return (maps @ maps.transpose(1, 2)).mean()",
        r"(?i)(mean|averag)\w* over (every|all) (the )?axes|only over the batch|mean\(0\)"),
    "ablation_gates_example_k": _ablation(
        _ONES, _ONES.replace("torch.ones(h,", "torch.ones(tokens.shape[0], h,"),
        r"(?i)example k|gates\[:, k\]"),
    "ablation_nll_on_logits": _ablation(
        _LOSS, _CE.format(loss="nll_loss", extra=""),
        r"(?i)log.?softmax|log-probabilit"),
    "ablation_gate_off_by_one": _ablation("        gates[k] = 0.0\n", "        gates[k - 1] = 0.0\n",
                                          r"(?i)head k - 1|off by one"),
    "ablation_abs": _ablation("importance[k] = loss(gates) - base",
                              "importance[k] = (loss(gates) - base).abs()",
                              r"(?i)absolute"),
    "prune_out_bias_pruned": _prune(
        _OUT_BIAS, _OUT_BIAS.replace("mha.out_proj.bias)", "mha.out_proj.bias[rows])"),
        r"(?i)out_proj\.bias.*(as it is|whole|belongs to no head)"),
    "prune_assign_tensor": _prune("        small.weight.copy_(old.weight[rows])\n",
                                  "        small.weight = old.weight[rows]\n",
                                  r"(?i)nn\.Parameter|copy_\(\)"),
    "prune_range_check_off_by_one": _prune(
        "    if not set(heads_to_remove) <= set(range(h)):\n",
        "    if any(k < 0 or k > h for k in heads_to_remove):\n",
        r"(?i)raised nothing where the exercise documents a ValueError: there is no head"),
    "prune_out_bias_scaled": _prune(
        _OUT_BIAS, _OUT_BIAS.replace("mha.out_proj.bias)", "mha.out_proj.bias * len(keep) / h)"),
        r"(?i)out_proj\.bias.*(as it is|unchanged|belongs to no head)"),
})


# ------------------------------------------------- i20fix's practice set (issue 20)
# Mistakes that raise, written from the exercise's text before the raise layer of
# chapters/checks/diagnose.py was changed for them (error_reason / error_cause): each
# diagnosis names the cause. See the report of branch i20fix for the counts.
BUGS.update({
    "similarity_dot_T_3d": Bug(
        cells=_raising("head_similarity",
                       "(maps @ maps.transpose(1, 2)).mean(0)",
                       "(maps @ maps.T).mean(0)"),
        fails=["test_head_similarity"],
        diagnosis=r"(?i)\.T\b.{0,80}(all|every) (the |its )?axes|reverses (all|every)|"
                  r"transpose\(1, 2\)|transpose\(-2, -1\)|\.mT"),
    "ablation_ignore_index_0": Bug(
        cells=_raising("ablation_importance",
                       "        return sum(relation_losses(logits_prev, logits_first, prev_target, first_target))\n",
                       "        V = logits_prev.shape[-1]\n"
                       "        return (F.cross_entropy(logits_prev.reshape(-1, V), prev_target.reshape(-1), ignore_index=0)\n"
                       "                + F.cross_entropy(logits_first.reshape(-1, V), first_target.reshape(-1), ignore_index=0))\n"),
        fails=["test_ablation_importance"],
        diagnosis=r"IGNORE_INDEX|ignore_index=-100|(?i:default ignore_index)|"
                  r"(?i:positions? (marked|holding) -100)"),
})

# issue 20 item 5: prune_heads with heads_to_remove in another order (the check also runs the
# removal list ascending, descending and unsorted; every test cell's own lists are descending)
BUGS.update({
    "prune_deletes_by_index": _prune(
        "    keep = [k for k in range(h) if k not in heads_to_remove]\n"
        "    if not keep:\n        raise ValueError(f\"cannot remove all {h} heads\")\n",
        "    if len(set(heads_to_remove)) == h:\n"
        "        raise ValueError(f\"cannot remove all {h} heads\")\n"
        "    keep = list(range(h))\n    for k in heads_to_remove:\n        del keep[k]\n",
        r"must not depend on the order of heads_to_remove.*del keep\[k\].*shifts the indices"),
})

# a practice round of mistakes that RAISE (issue 20, helper i20raise): written from the
# exercises' text, each diagnosis before the run; named by the shapes on the raising line
# (checks.operations.line_shapes, diagnose._cause_line_shapes) and the restated error.
BUGS.update({
    "raise_relation_range_past_end": Bug(
        cells=_raising("relation_scores", "torch.arange(2, L, ",
                       "torch.arange(2, L + 1, "),
        fails=["test_relation_scores"],
        diagnosis=r"one past|off.by.one|last (valid )?(index|position)"),
    "raise_identical_bias_unchecked": Bug(
        cells=_raising("make_heads_identical", "        if proj.bias is not None:\n"
                       "            bias = proj.bias.view(h, hd)            # (h, hd)\n"
                       "            bias[1:] = bias[:1]",
                       "        bias = proj.bias.view(h, hd)            # (h, hd)\n"
                       "        bias[1:] = bias[:1]"),
        fails=["test_make_heads_identical"],
        diagnosis=r"bias.*None|None.*bias|bias=False"),
    "raise_ablation_gates_column": Bug(
        cells=_raising("ablation_importance", "gates = torch.ones(h, dtype=",
                       "gates = torch.ones(h, 1, dtype="),
        fails=["test_ablation_importance"],
        diagnosis=r"head_mask.*(\(num_heads,\)|shape|axis|axes)|gates.*(shape|axis|axes)"),
})


# ------------------------------------------------- i20shape's practice set (issue 20)
# Wrong shapes, and wrong values whose cause lies upstream of where they show, written from
# the exercise's text before the trace family learnt its data flow (the line that made a
# wrong shape and what it did to it; the wrong value a departing line reads); each diagnosis
# names the cause. See the report of branch i20shape for the counts (three more of the set
# were held-out mistakes already: entropy keepdim, head_dim from in_features, sin/cos halves).
from tests.submissions import ReferenceCells as _Cells  # noqa: E402

_SHAPE_CELLS = _Cells(NOTEBOOK)
BUGS.update({
    "similarity_mean_over_heads": Bug(
        cells=_SHAPE_CELLS.edit("head_similarity", ("(maps @ maps.transpose(1, 2)).mean(0)",
                                                    "(maps @ maps.transpose(1, 2)).mean(1)")),
        fails=["test_head_similarity"],
        diagnosis=r"(mean|averag|reduc).*(batch|dim=0)|(mean|averag|reduc).*(head|wrong axis)"),
})


# issue 20: mistakes that give a wrong VALUE, of kinds the formula's steps should name (helper
# i20steps' practice set; each diagnosis was written from the exercise's text before it was
# run; one adapted after the run would say so)
from tests.submissions import ReferenceCells as _ReferenceCells  # noqa: E402

_steps_edit = _ReferenceCells(NOTEBOOK).edit   # _steps_edit(cell, (old, new), ...)


BUGS.update({
    "steps_similarity_first_example": Bug(
        cells=_steps_edit("head_similarity", (".mean(0)", "[0]")),
        fails=["test_head_similarity"],
        diagnosis=(r"(first|one) (example|batch element)|only.*batch|"
                   r"averag\w* over the batch")),
    "steps_ablation_keeps_only_head_k": Bug(
        cells=_steps_edit("ablation_importance",
                          ("gates = torch.ones(h,", "gates = torch.zeros(h,"),
                          ("gates[k] = 0.0", "gates[k] = 1.0")),
        fails=["test_ablation_importance"],
        # (adapted after the run: the last alternative, the formula's words for it)
        diagnosis=(r"(keeps?|only) (head k|one head|that head)|switch(es|"
                   r"ed)? off (every|all the) other|other heads|"
                   r"switches off every head except head k")),
})
