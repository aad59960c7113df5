"""Second held-out set, chapter 3 (multi-head attention with W_O): mistakes written from the
exercises' text before they were run, each absent from tests/submissions/mha.py and
tests/heldout/mha.py.

Solution cells: output_projection_by_heads, MultiHeadAttention, load_from_torch,
count_parameters.
"""
from tests.heldout import Bug, edit, reference
from tests.heldout.fresh import DTYPE as _DTYPE, IN_PLACE as _IN_PLACE

NOTEBOOK = "03_mha"

_BY_HEADS = reference(NOTEBOOK, "output_projection_by_heads")
_MHA = reference(NOTEBOOK, "MultiHeadAttention")
_LOADER = reference(NOTEBOOK, "load_from_torch")
_COUNT = reference(NOTEBOOK, "count_parameters")

CORRECT = {
    # The sum over heads as a loop over row slices of W_O with the bias tested by
    # identity; the count written per projection.
    "slice_loop_and_count_per_projection": {
        "output_projection_by_heads": '''
def output_projection_by_heads(heads, W_O, b_O=None):
    B, h, L, hd = heads.shape
    if W_O.shape[0] != h * hd:
        raise ValueError(f"W_O needs num_heads * head_dim = {h * hd} rows, got {W_O.shape[0]}")
    total = heads.new_zeros(B, L, W_O.shape[1])
    for i in range(h):
        total = total + heads[:, i] @ W_O[i * hd:(i + 1) * hd]
    return total if b_O is None else total + b_O
''',
        "count_parameters": '''
def count_parameters(d_model, num_heads, *, query_size=None, key_size=None, value_size=None,
                     bias=True):
    if d_model % num_heads:
        raise ValueError(f"num_heads={num_heads} does not divide d_model={d_model}")
    sizes = {"q": query_size, "k": key_size, "v": value_size, "out": d_model}
    per_layer = [(size if size is not None else d_model) * d_model + (d_model if bias else 0)
                 for size in sizes.values()]
    return int(sum(per_layer))
''',
    },
    # The layer with one fused check-and-build helper and a forward written with einsum;
    # the loader through state-dict style dictionaries.
    "helper_and_einsum_forward_loader_dict": {
        "MultiHeadAttention": edit(
            edit(_MHA,
                 "        self.q_proj = nn.Linear(query_size or d_model, d_model, bias=bias)\n"
                 "        self.k_proj = nn.Linear(key_size or d_model, d_model, bias=bias)\n"
                 "        self.v_proj = nn.Linear(value_size or d_model, d_model, bias=bias)\n"
                 "        self.out_proj = nn.Linear(d_model, d_model, bias=bias)\n"
                 "        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):\n"
                 "            nn.init.xavier_uniform_(proj.weight)\n"
                 "            if bias:\n"
                 "                nn.init.zeros_(proj.bias)\n",
                 "        def linear(size):\n"
                 "            layer = nn.Linear(d_model if size is None else size, d_model, bias=bias)\n"
                 "            nn.init.xavier_uniform_(layer.weight)\n"
                 "            if layer.bias is not None:\n"
                 "                nn.init.zeros_(layer.bias)\n"
                 "            return layer\n"
                 "        self.q_proj, self.k_proj = linear(query_size), linear(key_size)\n"
                 "        self.v_proj, self.out_proj = linear(value_size), linear(d_model)\n"),
            "        q = split_heads(self.q_proj(query), self.num_heads)  # (B, h, Lq, hd)\n"
            "        k = split_heads(self.k_proj(key), self.num_heads)    # (B, h, Lk, hd)\n"
            "        v = split_heads(self.v_proj(value), self.num_heads)  # (B, h, Lk, hd)\n"
            "        heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, h, Lq, hd), (B, h, Lq, Lk)\n",
            "        if mask is not None:\n"
            "            raise NotImplementedError('masks come in chapter 4')\n"
            "        B, h, hd = query.shape[0], self.num_heads, self.head_dim\n"
            "        q = self.q_proj(query).view(B, -1, h, hd)\n"
            "        k = self.k_proj(key).view(B, -1, h, hd)\n"
            "        v = self.v_proj(value).view(B, -1, h, hd)\n"
            "        weights = torch.einsum('bqhd,bkhd->bhqk', q, k).div(math.sqrt(hd)).softmax(-1)\n"
            "        heads = torch.einsum('bhqk,bkhd->bhqd', weights, v)\n"),
        "load_from_torch": '''
def load_from_torch(ours, torch_mha):
    if torch_mha.in_proj_weight is None:
        weights = [torch_mha.q_proj_weight, torch_mha.k_proj_weight, torch_mha.v_proj_weight]
    else:
        weights = list(torch.split(torch_mha.in_proj_weight, ours.d_model))
    biases = [None] * 3 if torch_mha.in_proj_bias is None else \\
        list(torch.split(torch_mha.in_proj_bias, ours.d_model))
    source = {"q_proj": (weights[0], biases[0]), "k_proj": (weights[1], biases[1]),
              "v_proj": (weights[2], biases[2]),
              "out_proj": (torch_mha.out_proj.weight, torch_mha.out_proj.bias)}
    with torch.no_grad():
        for name, (w, b) in source.items():
            layer = getattr(ours, name)
            layer.weight.copy_(w)
            if b is not None:
                layer.bias.copy_(b)
    return ours
''',
    },
}

BUGS = {
    # --- output_projection_by_heads
    # b_O=None not handled: the bias is always added.
    "by_heads_bias_none_crashes": Bug(
        cells={"output_projection_by_heads": edit(_BY_HEADS, "    if b_O is not None:\n        output = output + b_O",
                                                  "    output = output + b_O")},
        fails=["test_output_projection_by_heads"],
        diagnosis=r"(?i)b_O (is|may be|can be) None|b_O=None|no bias|without (a )?bias"),
    # The blocks shaped with d_model = num_heads * head_dim assumed.
    "by_heads_assumes_square_W_O": Bug(
        cells={"output_projection_by_heads": edit(_BY_HEADS, "blocks = W_O.reshape(h, hd, W_O.shape[-1])",
                                                  "blocks = W_O.reshape(h, hd, h * hd)")},
        fails=["test_output_projection_by_heads"],
        diagnosis=r"(?i)d_model.{0,80}(num_heads \* head_dim|h \* hd|not equal|differ|need not)"),
    # Accumulates into torch.zeros (float32): float64 heads come back float32.
    "by_heads_float32_accumulator": Bug(
        cells={"output_projection_by_heads": edit(
            _BY_HEADS, "    output = sum(heads[:, i] @ blocks[i] for i in range(h))    # (B, L, d_model)\n",
            "    output = torch.zeros(B, L, W_O.shape[-1])\n"
            "    for i in range(h):\n"
            "        output += heads[:, i] @ blocks[i]\n")},
        fails=["test_output_projection_by_heads"], diagnosis=_DTYPE),
    # The per-head products stacked on axis 0, then summed over axis 1 (the batch).
    "by_heads_summed_over_batch": Bug(
        cells={"output_projection_by_heads": edit(
            _BY_HEADS, "output = sum(heads[:, i] @ blocks[i] for i in range(h))",
            "output = torch.stack([heads[:, i] @ blocks[i] for i in range(h)]).sum(1)")},
        fails=["test_output_projection_by_heads"],
        diagnosis=r"(?i)sum\w*.{0,60}(batch|wrong axis|axis 1)|over the batch"),

    # --- MultiHeadAttention
    # The biases keep nn.Linear's default initialisation instead of zeros.
    "init_biases_not_zeroed": Bug(
        cells={"MultiHeadAttention": edit(_MHA, "            if bias:\n                nn.init.zeros_(proj.bias)\n", "")},
        fails=["test_mha_structure"],
        diagnosis=r"(?i)bias\w*.{0,60}(zero|initiali)",
        notes="test_mha_structure checks shapes and counts, not that the biases "
              "start at zero"),
    # xavier_normal_ where the exercise says xavier_uniform_.
    "init_xavier_normal": Bug(
        cells={"MultiHeadAttention": edit(_MHA, "nn.init.xavier_uniform_(proj.weight)",
                                          "nn.init.xavier_normal_(proj.weight)")},
        fails=["test_mha_structure"],
        diagnosis=r"(?i)xavier_uniform|xavier_normal|normal distribution|uniform",
        notes="test_mha_structure does not look at how the weights are "
              "initialised"),
    # out_proj left out of the initialisation loop: PyTorch's default init.
    "init_out_proj_default_init": Bug(
        cells={"MultiHeadAttention": edit(_MHA, "for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):",
                                          "for proj in (self.q_proj, self.k_proj, self.v_proj):")},
        fails=["test_mha_structure"],
        diagnosis=r"(?i)out_proj.{0,80}(xavier|initiali|zero)|initiali\w*.{0,60}out_proj",
        notes="test_mha_structure does not look at how the weights are "
              "initialised"),
    # out_proj applied to each head before the merge (works only when head_dim == d_model).
    "forward_out_proj_before_merge": Bug(
        cells={"MultiHeadAttention": edit(_MHA, "return self.out_proj(merge_heads(heads)), weights",
                                          "return merge_heads(self.out_proj(heads)), weights")},
        fails=["test_mha_forward"],
        diagnosis=r"(?i)out_proj.{0,80}(before|each head|per head|merge)|merge.{0,60}(before|after) out_proj"),
    # The weights returned in the merged layout (B, Lq, num_heads, Lk).
    "forward_weights_transposed": Bug(
        cells={"MultiHeadAttention": edit(_MHA, "return self.out_proj(merge_heads(heads)), weights",
                                          "return self.out_proj(merge_heads(heads)), weights.transpose(1, 2)")},
        fails=["test_mha_forward"],
        diagnosis=r"(?i)weights.{0,80}(transpos|axes 1 and 2|swapped|\(B, num_heads, Lq, Lk\))"),
    # Scales the caller's query in place before the projection.
    "forward_query_scaled_in_place": Bug(
        cells={"MultiHeadAttention": edit(
            _MHA, "        q = split_heads(self.q_proj(query), self.num_heads)  # (B, h, Lq, hd)\n",
            "        query /= math.sqrt(self.head_dim)     # scale once, early\n"
            "        q = split_heads(self.q_proj(query), self.num_heads)  # (B, h, Lq, hd)\n")},
        fails=["test_mha_forward"], diagnosis=_IN_PLACE),

    # --- load_from_torch
    # copy_ without torch.no_grad(): autograd refuses in-place writes to parameters.
    "loader_without_no_grad": Bug(
        cells={"load_from_torch": edit(
            edit(_LOADER, "    with torch.no_grad():\n        for proj", "    if True:\n        for proj"),
            "    return ours", "    return ours")},
        fails=["test_load_from_torch"],
        diagnosis=r"(?i)no_grad"),
    # Always chunks in_proj_weight: the separate layout (kdim != embed_dim) crashes on None.
    "loader_ignores_separate_layout": Bug(
        cells={"load_from_torch": edit(
            _LOADER,
            "    if torch_mha.in_proj_weight is not None:                 # one stacked matrix\n"
            "        w_q, w_k, w_v = torch_mha.in_proj_weight.chunk(3)    # 3 x (d_model, d_model)\n"
            "    else:                                                    # kdim or vdim differ\n"
            "        w_q, w_k, w_v = torch_mha.q_proj_weight, torch_mha.k_proj_weight, torch_mha.v_proj_weight\n",
            "    w_q, w_k, w_v = torch_mha.in_proj_weight.chunk(3)\n")},
        fails=["test_load_from_torch"],
        diagnosis=r"(?i)in_proj_weight (is|was) None|(separate|second) (layout|matrices)|when in_proj_weight is None"),
    # `if torch_mha.in_proj_bias:` asks a many-element tensor for its truth value.
    "loader_bias_truth_value": Bug(
        cells={"load_from_torch": edit(_LOADER, "if torch_mha.in_proj_bias is not None:",
                                       "if torch_mha.in_proj_bias:")},
        fails=["test_load_from_torch"],
        diagnosis=r"(?i)is not None|truth value.{0,80}(bias|tensor)|(bias|tensor).{0,80}truth value"),
    # out_proj.bias is left out: only the input biases are copied.
    "loader_forgets_out_proj_bias": Bug(
        cells={"load_from_torch": edit(_LOADER, "(b_q, b_k, b_v, torch_mha.out_proj.bias)", "(b_q, b_k, b_v, None)")},
        fails=["test_load_from_torch"],
        diagnosis=r"(?i)out_proj\.bias.{0,80}(not (copied|changed|loaded)|left out|unchanged)"),
    # Copies everything and returns nothing.
    "loader_returns_none": Bug(
        cells={"load_from_torch": edit(_LOADER, "    return ours", "")},
        fails=["test_load_from_torch"],
        diagnosis=r"(?i)return\w* None|returns nothing|return ours|returned None",
        notes="test_load_from_torch reads the copied parameters from its own "
              "module, never the returned value"),

    # --- count_parameters
    # Sizes left as None used as numbers.
    "count_none_sizes": Bug(
        cells={"count_parameters": edit(_COUNT, "inputs = [query_size or d_model, key_size or d_model, value_size or d_model]",
                                        "inputs = [query_size, key_size, value_size]")},
        fails=["test_count_parameters"],
        diagnosis=r"(?i)None.{0,60}(means|default|d_model)|default\w*.{0,40}d_model|sizes? left as None"),
    # W_O counted as query_size x d_model (as if out_proj read the queries).
    "count_W_O_from_query_size": Bug(
        cells={"count_parameters": edit(_COUNT, "+ d_model * d_model  # W_Q, W_K, W_V, W_O",
                                        "+ inputs[0] * d_model  # W_Q, W_K, W_V, W_O")},
        fails=["test_count_parameters"],
        diagnosis=r"(?i)(W_O|out_proj).{0,80}(query_size|d_model \* d_model|d_model x d_model)"),
    # Returns a 0-d tensor instead of an int.
    "count_returns_tensor": Bug(
        cells={"count_parameters": edit(_COUNT, "return weights + biases", "return torch.tensor(weights + biases)")},
        fails=["test_count_parameters"],
        diagnosis=r"(?i)\btensor\b.{0,60}\bint\b|\bint\b.{0,60}\btensor\b|Python int"),
}
