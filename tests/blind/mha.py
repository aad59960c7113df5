"""Blind set, chapter 3 (the multi-head attention module): mistakes and correct variants
written by tester blindA from the exercise text and the reference solutions alone
(2026-11-27).
Regexes committed in 983c12e before any run; first graded 2026-11-27: 14/14 named; no false
pass, both correct variants full marks. No regex or `fails` was changed after the run."""
from tests.heldout import Bug, edit, reference

NOTEBOOK = "03_mha"

BY_HEADS = reference(NOTEBOOK, "output_projection_by_heads")
MODULE = reference(NOTEBOOK, "MultiHeadAttention")
LOAD = reference(NOTEBOOK, "load_from_torch")
COUNT = reference(NOTEBOOK, "count_parameters")

CORRECT = {
    # einsum over the heads; explicit None tests; slices of in_proj_weight; a sum of products
    "einsum_slices": {
        "output_projection_by_heads": '''
def output_projection_by_heads(heads, W_O, b_O=None):
    """heads (B, h, L, hd), W_O (h * hd, d_model), b_O (d_model,) or None -> (B, L, d_model)."""
    num_heads, head_dim = heads.shape[1], heads.shape[3]
    per_head = W_O.view(num_heads, head_dim, -1)                 # (h, hd, d_model)
    out = torch.einsum("bhld,hde->ble", heads, per_head)
    return out if b_O is None else out + b_O
''',
        "MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """Batch-first multi-head attention with its own q/k/v/out projections."""

    def __init__(self, d_model, num_heads, *, query_size=None, key_size=None,
                 value_size=None, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"num_heads={num_heads} does not divide d_model={d_model}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        sizes = [d_model if s is None else s for s in (query_size, key_size, value_size)]
        self.q_proj = nn.Linear(sizes[0], d_model, bias=bias)
        self.k_proj = nn.Linear(sizes[1], d_model, bias=bias)
        self.v_proj = nn.Linear(sizes[2], d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        for layer in [self.q_proj, self.k_proj, self.v_proj, self.out_proj]:
            nn.init.xavier_uniform_(layer.weight)
            if layer.bias is not None:
                nn.init.constant_(layer.bias, 0.0)

    def forward(self, query, key, value, mask=None):
        """-> (output (B, Lq, d_model), weights (B, num_heads, Lq, Lk))."""
        B, Lq, _ = query.shape
        Lk = key.shape[1]
        q = self.q_proj(query).reshape(B, Lq, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(key).reshape(B, Lk, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(value).reshape(B, Lk, self.num_heads, self.head_dim).transpose(1, 2)
        heads, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        merged = heads.transpose(1, 2).reshape(B, Lq, self.d_model)
        return self.out_proj(merged), weights
''',
        "load_from_torch": '''
def load_from_torch(ours, torch_mha):
    """Copy nn.MultiheadAttention's weights into ours, in place; return ours."""
    d = torch_mha.embed_dim
    if torch_mha.in_proj_weight is None:
        weights = [torch_mha.q_proj_weight, torch_mha.k_proj_weight, torch_mha.v_proj_weight]
    else:
        weights = [torch_mha.in_proj_weight[n * d:(n + 1) * d] for n in range(3)]
    biases = [None] * 3
    if torch_mha.in_proj_bias is not None:
        biases = [torch_mha.in_proj_bias[n * d:(n + 1) * d] for n in range(3)]
    layers = [ours.q_proj, ours.k_proj, ours.v_proj]
    with torch.no_grad():
        for layer, weight, bias in zip(layers, weights, biases):
            layer.weight.copy_(weight)
            if bias is not None:
                layer.bias.copy_(bias)
        ours.out_proj.weight.copy_(torch_mha.out_proj.weight)
        if torch_mha.out_proj.bias is not None:
            ours.out_proj.bias.copy_(torch_mha.out_proj.bias)
    return ours
''',
        "count_parameters": '''
def count_parameters(d_model, num_heads, *, query_size=None, key_size=None, value_size=None,
                     bias=True):
    """Exact parameter count of MultiHeadAttention(d_model, num_heads, ...)."""
    if d_model % num_heads != 0:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    q = d_model if query_size is None else query_size
    k = d_model if key_size is None else key_size
    v = d_model if value_size is None else value_size
    total = d_model * (q + k + v + d_model)
    if bias:
        total += 4 * d_model
    return int(total)
''',
    },
    # a plain loop with slices of W_O; the module built from the notebook's helpers
    "loop_slices": {
        "output_projection_by_heads": '''
def output_projection_by_heads(heads, W_O, b_O=None):
    """sum over heads of heads[:, i] @ W_O[i*hd:(i+1)*hd], plus b_O once."""
    head_dim = heads.shape[-1]
    total = None
    for i in range(heads.shape[1]):
        term = heads[:, i] @ W_O[i * head_dim:(i + 1) * head_dim]   # (B, L, d_model)
        total = term if total is None else total + term
    if b_O is not None:
        total = total + b_O
    return total
''',
        "MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """Multi-head attention, batch first."""

    def __init__(self, d_model, num_heads, *, query_size=None, key_size=None,
                 value_size=None, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by num_heads={num_heads}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        query_size = d_model if query_size is None else query_size
        key_size = d_model if key_size is None else key_size
        value_size = d_model if value_size is None else value_size
        self.q_proj = nn.Linear(query_size, d_model, bias=bias)
        self.k_proj = nn.Linear(key_size, d_model, bias=bias)
        self.v_proj = nn.Linear(value_size, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self._reset_parameters(bias)

    def _reset_parameters(self, bias):
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            layer = getattr(self, name)
            nn.init.xavier_uniform_(layer.weight)
            if bias:
                nn.init.zeros_(layer.bias)

    def forward(self, query, key, value, mask=None):
        """-> (output (B, Lq, d_model), weights (B, num_heads, Lq, Lk))."""
        heads, weights = scaled_dot_product_attention(
            split_heads(self.q_proj(query), self.num_heads),
            split_heads(self.k_proj(key), self.num_heads),
            split_heads(self.v_proj(value), self.num_heads),
            mask,
        )
        return self.out_proj(merge_heads(heads)), weights
''',
        "load_from_torch": '''
def load_from_torch(ours, torch_mha):
    """Copy torch_mha's weights into ours, in place."""
    if torch_mha.in_proj_weight is None:
        qkv = (torch_mha.q_proj_weight, torch_mha.k_proj_weight, torch_mha.v_proj_weight)
    else:
        qkv = torch_mha.in_proj_weight.split(torch_mha.embed_dim, dim=0)
    with torch.no_grad():
        ours.q_proj.weight.copy_(qkv[0])
        ours.k_proj.weight.copy_(qkv[1])
        ours.v_proj.weight.copy_(qkv[2])
        ours.out_proj.weight.copy_(torch_mha.out_proj.weight)
        if torch_mha.in_proj_bias is not None:
            b_q, b_k, b_v = torch_mha.in_proj_bias.split(torch_mha.embed_dim)
            ours.q_proj.bias.copy_(b_q)
            ours.k_proj.bias.copy_(b_k)
            ours.v_proj.bias.copy_(b_v)
        if torch_mha.out_proj.bias is not None:
            ours.out_proj.bias.copy_(torch_mha.out_proj.bias)
    return ours
''',
        "count_parameters": '''
def count_parameters(d_model, num_heads, *, query_size=None, key_size=None, value_size=None,
                     bias=True):
    """Parameters of the four projections, from their in and out sizes."""
    if d_model % num_heads:
        raise ValueError(f"num_heads={num_heads} does not divide d_model={d_model}")
    in_sizes = [query_size or d_model, key_size or d_model, value_size or d_model, d_model]
    return sum(n_in * d_model + (d_model if bias else 0) for n_in in in_sizes)
''',
    },
}

BUGS = {
    # adds the bias inside the loop: b_O counted once per head
    "by_heads_bias_per_head": Bug(
        cells={"output_projection_by_heads": edit(BY_HEADS, """    output = sum(heads[:, i] @ blocks[i] for i in range(h))    # (B, L, d_model)
    if b_O is not None:
        output = output + b_O                                  # once, after the sum
""", """    output = 0
    for i in range(h):
        output = output + heads[:, i] @ blocks[i]
        if b_O is not None:
            output = output + b_O
""")},
        fails=["test_output_projection_by_heads"],
        diagnosis=r"(?i)(bias|b_O).{0,50}(once|every head|each head|num_heads times|\bh times|per head|"
                  r"inside the (loop|sum))|added .{0,20}(several|many|\d+) times"),
    # cuts W_O into strided rows: head i gets every num_heads-th row, not its block
    "by_heads_strided_blocks": Bug(
        cells={"output_projection_by_heads": edit(BY_HEADS, "blocks = W_O.reshape(h, hd, W_O.shape[-1])",
                                                  "blocks = W_O.reshape(hd, h, W_O.shape[-1]).transpose(0, 1)")},
        fails=["test_output_projection_by_heads"],
        diagnosis=r"(?i)interleav|strided|every num_heads|every h-?th|contiguous (block|slice|range)|consecutive|"
                  r"row block|block of .{0,20}rows|\[i ?\* ?head_dim"),
    # averages the heads' terms instead of summing them
    "by_heads_mean_not_sum": Bug(
        cells={"output_projection_by_heads": edit(BY_HEADS, "sum(heads[:, i] @ blocks[i] for i in range(h))",
                                                  "sum(heads[:, i] @ blocks[i] for i in range(h)) / h")},
        fails=["test_output_projection_by_heads"],
        diagnosis=r"(?i)\bmean\b|averag|divid\w* by (the number of heads|num_heads|h)\b|"
                  r"sum,? not (the|an) (mean|average)|too small by"),
    # forgets W_O: returns the merged heads without out_proj
    "module_no_out_proj": Bug(
        cells={"MultiHeadAttention": edit(MODULE, "return self.out_proj(merge_heads(heads)), weights",
                                          "return merge_heads(heads), weights")},
        fails=["test_mha_forward"],
        diagnosis=r"(?i)out_proj|W_O|output projection"),
    # returns the heads' average instead of every head's weights
    "module_averaged_weights": Bug(
        cells={"MultiHeadAttention": edit(MODULE, "return self.out_proj(merge_heads(heads)), weights",
                                          "return self.out_proj(merge_heads(heads)), weights.mean(dim=1)")},
        fails=["test_mha_forward"],
        diagnosis=r"(?i)averag|\bmean\b|every head|each head|per.head|all (the )?heads"),
    # copy-paste: projects the values with k_proj
    "module_values_through_k_proj": Bug(
        cells={"MultiHeadAttention": edit(MODULE, "v = split_heads(self.v_proj(value), self.num_heads)",
                                          "v = split_heads(self.k_proj(value), self.num_heads)")},
        fails=["test_mha_forward"],
        diagnosis=r"(?i)v_proj|k_proj.{0,40}(value|instead)|value.{0,40}(k_proj|key projection)|copy.?paste"),
    # self-attention only: projects the query input for the keys
    "module_keys_from_query": Bug(
        cells={"MultiHeadAttention": edit(MODULE, "k = split_heads(self.k_proj(key), self.num_heads)",
                                          "k = split_heads(self.k_proj(query), self.num_heads)")},
        fails=["test_mha_forward"],
        diagnosis=r"(?i)cross|self-attention only|query (instead|in place) of (the )?key|"
                  r"keys? .{0,30}from (the )?query|`?key`? (argument|input) .{0,20}(unused|ignored|never)"),
    # zeroes the biases even when bias=False (they are None)
    "module_zero_missing_bias": Bug(
        cells={"MultiHeadAttention": edit(MODULE, """            if bias:
                nn.init.zeros_(proj.bias)""", """            nn.init.zeros_(proj.bias)""")},
        fails=["test_mha_structure"],
        diagnosis=r"(?i)bias=False|\bNone\b|no bias|without (a )?bias"),
    # no divisibility check: head_dim is floored silently
    "module_no_divisibility_check": Bug(
        cells={"MultiHeadAttention": edit(MODULE, """        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
""", "")},
        fails=["test_mha_structure"],
        diagnosis=r"(?i)ValueError|not divisible|does not divide|divisib"),
    # replaces the parameters by new ones made from PyTorch's tensors: they share memory
    "load_new_parameters": Bug(
        cells={"load_from_torch": edit(edit(LOAD, "proj.weight.copy_(w)", "proj.weight = nn.Parameter(w)"),
                                       "proj.bias.copy_(b)", "proj.bias = nn.Parameter(b)")},
        fails=["test_load_from_torch"],
        diagnosis=r"(?i)in.place|copy_|shar\w* (memory|storage|the same)|independent|new (nn\.)?Parameters?|"
                  r"replac\w* (the )?param|same (object|parameter|tensor)"),
    # takes q, k and v from the stacked matrix in the wrong order
    "load_q_k_order": Bug(
        cells={"load_from_torch": edit(LOAD, "w_q, w_k, w_v = torch_mha.in_proj_weight.chunk(3)",
                                       "w_k, w_q, w_v = torch_mha.in_proj_weight.chunk(3)")},
        fails=["test_load_from_torch"],
        diagnosis=r"(?i)\border\b|swap|mix\w* up|\[W_q; ?W_k; ?W_v\]|q.{0,3}k.{0,3}v|exchang"),
    # assumes in_proj_bias exists: crashes when bias=False
    "load_bias_always": Bug(
        cells={"load_from_torch": edit(LOAD, """    b_q = b_k = b_v = None
    if torch_mha.in_proj_bias is not None:
        b_q, b_k, b_v = torch_mha.in_proj_bias.chunk(3)      # 3 x (d_model,)""",
                                       """    b_q, b_k, b_v = torch_mha.in_proj_bias.chunk(3)          # 3 x (d_model,)""")},
        fails=["test_load_from_torch"],
        diagnosis=r"(?i)\bNone\b|no bias|bias=False|without (a )?bias"),
    # counts the matrices once per head: heads slice the matrices, they add none
    "count_times_num_heads": Bug(
        cells={"count_parameters": edit(COUNT, "return weights + biases", "return num_heads * weights + biases")},
        fails=["test_count_parameters"],
        diagnosis=r"(?i)num_heads.{0,50}(not|no|never)|(independent|regardless) of (the number of heads|num_heads)|"
                  r"(do|does) not depend on|counted .{0,20}(twice|per head|once per head)|heads .{0,30}slice"),
    # counts three biases: forgets out_proj's
    "count_three_biases": Bug(
        cells={"count_parameters": edit(COUNT, "biases = 4 * d_model if bias else 0",
                                        "biases = 3 * d_model if bias else 0")},
        fails=["test_count_parameters"],
        diagnosis=r"(?i)out_proj|W_O|four|4 ?\* ?d_model|fourth|output projection"),
}
