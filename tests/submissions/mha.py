"""Chapter 3 catalogue: alternative correct submissions and classic bugs.

Solution cells: output_projection_by_heads, MultiHeadAttention, load_from_torch,
count_parameters. Test cells: test_output_projection_by_heads, test_mha_structure,
test_mha_forward, test_load_from_torch, test_count_parameters.
The code runs in the notebook's namespace: math, torch, nn, F, scaled_dot_product_attention
(chapter 1's, without masks: `mask` must be None), split_heads and merge_heads are defined
by the cells above the exercises. Masks come in chapter 4: a forward that computes the
softmax itself refuses a mask, as the given scaled_dot_product_attention does.
"""
from . import Bug

NOTEBOOK = "03_mha"

# ------------------------------------------------------------------ building blocks
_INIT = '''
    def __init__(self, d_model, num_heads, *, query_size=None, key_size=None,
                 value_size=None, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, d_model // num_heads
        self.q_proj = nn.Linear(query_size or d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(key_size or d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(value_size or d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
'''


def _mha(forward):
    """A MultiHeadAttention cell with the standard constructor and the given forward."""
    return "class MultiHeadAttention(nn.Module):\n" + _INIT + "\n" + forward


def _mha_forward_with(line_q="self.q_proj(query)", line_k="self.k_proj(key)",
                      attend="heads, weights = scaled_dot_product_attention(q, k, v, mask)",
                      finish="return self.out_proj(merge_heads(heads)), weights"):
    return f'''
    def forward(self, query, key, value, mask=None):
        q = split_heads({line_q}, self.num_heads)
        k = split_heads({line_k}, self.num_heads)
        v = split_heads(self.v_proj(value), self.num_heads)
        {attend}
        {finish}
'''


# ------------------------------------------------------------------ correct submissions
PER_HEAD_LOOP = {
    "output_projection_by_heads": '''
def output_projection_by_heads(heads, W_O, b_O=None):
    h, hd = heads.shape[1], heads.shape[3]
    output = 0
    for i in range(h):
        output = output + heads[:, i] @ W_O[i * hd:(i + 1) * hd]
    return output if b_O is None else output + b_O
''',
    "MultiHeadAttention": _mha('''
    def forward(self, query, key, value, mask=None):
        # one head at a time, with the head's rows of each weight: W_i^Q = q_proj.weight[rows].T
        if mask is not None:
            raise NotImplementedError("masks come in chapter 4")
        outs, all_weights = [], []
        for i in range(self.num_heads):
            rows = slice(i * self.head_dim, (i + 1) * self.head_dim)
            def part(proj, x):
                bias = None if proj.bias is None else proj.bias[rows]
                return F.linear(x, proj.weight[rows], bias)      # (B, L, hd)
            q_i, k_i, v_i = part(self.q_proj, query), part(self.k_proj, key), part(self.v_proj, value)
            scores = q_i @ k_i.transpose(1, 2) / math.sqrt(self.head_dim)
            weights = torch.softmax(scores, dim=-1)
            outs.append(weights @ v_i)
            all_weights.append(weights)
        return self.out_proj(torch.cat(outs, dim=-1)), torch.stack(all_weights, dim=1)
'''),
    "load_from_torch": '''
def load_from_torch(ours, torch_mha):
    E = torch_mha.embed_dim
    if torch_mha.in_proj_weight is not None:
        weights = torch_mha.in_proj_weight.split(E, dim=0)
    else:
        weights = (torch_mha.q_proj_weight, torch_mha.k_proj_weight, torch_mha.v_proj_weight)
    with torch.no_grad():
        ours.q_proj.weight[:] = weights[0]
        ours.k_proj.weight[:] = weights[1]
        ours.v_proj.weight[:] = weights[2]
        ours.out_proj.weight[:] = torch_mha.out_proj.weight
        if torch_mha.in_proj_bias is not None:
            ours.q_proj.bias[:] = torch_mha.in_proj_bias[:E]
            ours.k_proj.bias[:] = torch_mha.in_proj_bias[E:2 * E]
            ours.v_proj.bias[:] = torch_mha.in_proj_bias[2 * E:]
            ours.out_proj.bias[:] = torch_mha.out_proj.bias
    return ours
''',
    "count_parameters": '''
def count_parameters(d_model, num_heads, *, query_size=None, key_size=None, value_size=None,
                     bias=True):
    if d_model % num_heads:
        raise ValueError("num_heads must divide d_model")
    head_dim = d_model // num_heads
    total = 0
    for size in (query_size or d_model, key_size or d_model, value_size or d_model):
        total += num_heads * size * head_dim        # the heads' blocks W_i
    total += num_heads * head_dim * d_model         # W_O's row blocks
    if bias:
        total += 4 * num_heads * head_dim
    return total
''',
}

EINSUM = {
    "output_projection_by_heads": '''
def output_projection_by_heads(heads, W_O, b_O=None):
    h, hd = heads.shape[1], heads.shape[3]
    output = torch.einsum("bhld,hde->ble", heads, W_O.reshape(h, hd, -1))
    if b_O is not None:
        output = output + b_O
    return output
''',
    "MultiHeadAttention": _mha('''
    def forward(self, query, key, value, mask=None):
        if mask is not None:
            raise NotImplementedError("masks come in chapter 4")
        h, hd = self.num_heads, self.head_dim

        def project(proj, x):                         # (B, L, in) -> (B, h, L, hd)
            y = torch.einsum("bli,hdi->bhld", x, proj.weight.view(h, hd, -1))
            return y if proj.bias is None else y + proj.bias.view(1, h, 1, hd)

        q, k, v = project(self.q_proj, query), project(self.k_proj, key), project(self.v_proj, value)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / hd ** 0.5
        weights = torch.softmax(scores, dim=-1)
        heads = torch.einsum("bhqk,bhkd->bhqd", weights, v)
        W_O = self.out_proj.weight.view(self.d_model, h, hd)      # stored (d_model, h*hd)
        output = torch.einsum("bhqd,ehd->bqe", heads, W_O)
        if self.out_proj.bias is not None:
            output = output + self.out_proj.bias
        return output, weights
'''),
    "count_parameters": '''
def count_parameters(d_model, num_heads, *, query_size=None, key_size=None, value_size=None,
                     bias=True):
    if d_model % num_heads != 0:
        raise ValueError("num_heads must divide d_model")
    # build the layer on the meta device: shapes only, no memory
    with torch.device("meta"):
        layer = MultiHeadAttention(d_model, num_heads, query_size=query_size,
                                   key_size=key_size, value_size=value_size, bias=bias)
    return sum(p.numel() for p in layer.parameters())
''',
}

FUSED_QKV = {
    "MultiHeadAttention": _mha('''
    def forward(self, query, key, value, mask=None):
        # one matmul for the projections whose inputs are the same tensor
        if mask is not None:
            raise NotImplementedError("masks come in chapter 4")
        B, Lq, Lk, D = query.shape[0], query.shape[1], key.shape[1], self.d_model
        projs = (self.q_proj, self.k_proj, self.v_proj)
        if query is key and key is value:
            groups = [(query, projs)]
        elif key is value:
            groups = [(query, projs[:1]), (key, projs[1:])]
        else:
            groups = [(query, projs[:1]), (key, projs[1:2]), (value, projs[2:])]
        tensors = []
        for x, group in groups:
            weight = torch.cat([p.weight for p in group])
            bias = None if group[0].bias is None else torch.cat([p.bias for p in group])
            tensors.extend(F.linear(x, weight, bias).split(D, dim=-1))
        q, k, v = (t.reshape(B, t.shape[1], self.num_heads, self.head_dim).transpose(1, 2)
                   for t in tensors)
        scores = torch.baddbmm(
            torch.zeros(B * self.num_heads, Lq, Lk, dtype=q.dtype),
            q.reshape(-1, Lq, self.head_dim), k.reshape(-1, Lk, self.head_dim).transpose(1, 2),
            alpha=1 / math.sqrt(self.head_dim)).view(B, self.num_heads, Lq, Lk)
        weights = torch.softmax(scores, dim=-1)
        return self.out_proj(merge_heads(weights @ v)), weights
'''),
    "load_from_torch": '''
def load_from_torch(ours, torch_mha):
    state = {name: p.detach() for name, p in torch_mha.named_parameters()}
    if "in_proj_weight" in state:
        w = state["in_proj_weight"].chunk(3)
    else:
        w = (state["q_proj_weight"], state["k_proj_weight"], state["v_proj_weight"])
    new = {"q_proj.weight": w[0], "k_proj.weight": w[1], "v_proj.weight": w[2],
           "out_proj.weight": state["out_proj.weight"]}
    if "in_proj_bias" in state:
        b = state["in_proj_bias"].chunk(3)
        new.update({"q_proj.bias": b[0], "k_proj.bias": b[1], "v_proj.bias": b[2],
                    "out_proj.bias": state["out_proj.bias"]})
    ours.load_state_dict(new, strict=False)   # load_state_dict copies in place
    return ours
''',
}

# All parameters in one flat vector; q_proj ... out_proj are read-only properties whose
# .weight and .bias are views of it. The checks' in-place copy_ writes through the views.
FLAT_PARAMETER = {
    "MultiHeadAttention": '''
class _LinearView:
    def __init__(self, weight, bias):
        self.weight, self.bias = weight, bias

    def __call__(self, x):
        return F.linear(x, self.weight, self.bias)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, query_size=None, key_size=None,
                 value_size=None, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, d_model // num_heads
        self._inputs = [query_size or d_model, key_size or d_model, value_size or d_model, d_model]
        self._bias = bias
        size = d_model * sum(self._inputs) + (4 * d_model if bias else 0)
        self.flat = nn.Parameter(torch.empty(size))
        with torch.no_grad():
            for proj in self._views():
                nn.init.xavier_uniform_(proj.weight)
                if bias:
                    proj.bias.zero_()

    def _views(self):
        views, offset, D = [], 0, self.d_model
        for n in self._inputs:
            views.append([self.flat[offset:offset + D * n].view(D, n), None])
            offset += D * n
        if self._bias:
            for view in views:
                view[1] = self.flat[offset:offset + D]
                offset += D
        return [_LinearView(w, b) for w, b in views]

    q_proj = property(lambda self: self._views()[0])
    k_proj = property(lambda self: self._views()[1])
    v_proj = property(lambda self: self._views()[2])
    out_proj = property(lambda self: self._views()[3])

    def forward(self, query, key, value, mask=None):
        q_proj, k_proj, v_proj, out_proj = self._views()
        q = split_heads(q_proj(query), self.num_heads)
        k = split_heads(k_proj(key), self.num_heads)
        v = split_heads(v_proj(value), self.num_heads)
        heads, weights = scaled_dot_product_attention(q, k, v, mask)
        return out_proj(merge_heads(heads)), weights
''',
}

CORRECT = {
    "per_head_loop": PER_HEAD_LOOP,
    "einsum": EINSUM,
    "fused_qkv_baddbmm": FUSED_QKV,
    "flat_parameter": FLAT_PARAMETER,
}

# ------------------------------------------------------------------ classic bugs
BUGS = {
    "no_output_projection": Bug(
        cells={"MultiHeadAttention": _mha(_mha_forward_with(
            finish="return merge_heads(heads), weights"))},
        fails=["test_mha_forward"],
        diagnosis=r"W_O is missing",
        notes="forgets out_proj: the layer returns the concatenated heads"),
    "W_O_rows_of_stored_weight": Bug(
        cells={"MultiHeadAttention": _mha(_mha_forward_with(finish='''hd = self.head_dim
        W = self.out_proj.weight      # mistaken for W_O: it is W_O transposed
        output = sum(heads[:, i] @ W[i * hd:(i + 1) * hd] for i in range(self.num_heads))
        return output + self.out_proj.bias, weights'''))},
        fails=["test_mha_forward"],
        diagnosis=r"without the transpose.*nn\.Linear stores W_O transposed",
        notes="per-head W_O blocks cut from the rows of out_proj.weight (nn.Linear layout)"),
    "W_O_per_head_block_diagonal": Bug(
        cells={"output_projection_by_heads": '''
def output_projection_by_heads(heads, W_O, b_O=None):
    h, hd = heads.shape[1], heads.shape[3]
    # each head projected into its own slice, then concatenated
    parts = [heads[:, i] @ W_O[i * hd:(i + 1) * hd, i * hd:(i + 1) * hd] for i in range(h)]
    output = torch.cat(parts, dim=-1)
    return output if b_O is None else output + b_O
'''},
        fails=["test_output_projection_by_heads"],
        diagnosis=r"only the\s+diagonal blocks|own slice",
        notes="applies W_O per head before the merge, so the heads never mix"),
    "output_projection_bias_per_head": Bug(
        cells={"output_projection_by_heads": '''
def output_projection_by_heads(heads, W_O, b_O=None):
    h, hd = heads.shape[1], heads.shape[3]
    return sum(F.linear(heads[:, i], W_O[i * hd:(i + 1) * hd].T, b_O) for i in range(h))
'''},
        fails=["test_output_projection_by_heads"],
        diagnosis=r"once per head",
        notes="F.linear with the bias inside the loop adds b_O num_heads times"),
    "output_projection_interleaved_blocks": Bug(
        cells={"output_projection_by_heads": '''
def output_projection_by_heads(heads, W_O, b_O=None):
    B, h, L, hd = heads.shape
    blocks = W_O.reshape(hd, h, -1).transpose(0, 1)     # (h, hd, d_model), but interleaved
    output = torch.einsum("bhld,hde->ble", heads, blocks)
    return output if b_O is None else output + b_O
'''},
        fails=["test_output_projection_by_heads"],
        diagnosis=r"interleaves",
        notes="reshape (head_dim, num_heads, d_model) gives head i the rows i, i+h, ..."),
    "keys_projected_with_q_proj": Bug(
        cells={"MultiHeadAttention": _mha(_mha_forward_with(line_k="self.q_proj(key)"))},
        fails=["test_mha_forward"],
        diagnosis=r"keys were projected with q_proj",
        notes="copy-paste slip; silent when query_size == key_size"),
    "scaled_by_sqrt_d_model": Bug(
        cells={"MultiHeadAttention": _mha(_mha_forward_with(attend='''scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_model)
        weights = torch.softmax(scores, dim=-1)
        heads = weights @ v'''))},
        fails=["test_mha_forward"],
        diagnosis=r"sqrt\(d_model\).*sqrt\(head_dim\)",
        notes="the scale must use the per-head size head_dim"),
    "weights_averaged_over_heads": Bug(
        cells={"MultiHeadAttention": _mha(_mha_forward_with(
            finish="return self.out_proj(merge_heads(heads)), weights.mean(dim=1)"))},
        fails=["test_mha_forward"],
        diagnosis=r"averaged over the heads",
        notes="nn.MultiheadAttention's default, but the exercise asks for every head"),
    "merge_without_transpose": Bug(
        cells={"MultiHeadAttention": _mha(_mha_forward_with(
            finish="return self.out_proj(heads.reshape(query.shape[0], query.shape[1], "
                   "self.d_model)), weights"))},
        fails=["test_mha_forward"],
        diagnosis=r"merging: transpose",
        notes="reshape (B, h, Lq, hd) straight to (B, Lq, d_model)"),
    "loader_chunk_order_kqv": Bug(
        cells={"load_from_torch": '''
def load_from_torch(ours, torch_mha):
    if torch_mha.in_proj_weight is not None:
        w_k, w_q, w_v = torch_mha.in_proj_weight.chunk(3)
    else:
        w_q, w_k, w_v = torch_mha.q_proj_weight, torch_mha.k_proj_weight, torch_mha.v_proj_weight
    b = [None] * 3 if torch_mha.in_proj_bias is None else torch_mha.in_proj_bias.chunk(3)
    with torch.no_grad():
        for proj, w, bias in zip((ours.q_proj, ours.k_proj, ours.v_proj, ours.out_proj),
                                 (w_q, w_k, w_v, torch_mha.out_proj.weight),
                                 (*b, torch_mha.out_proj.bias)):
            proj.weight.copy_(w)
            if bias is not None:
                proj.bias.copy_(bias)
    return ours
'''},
        fails=["test_load_from_torch"],
        diagnosis=r"order is wrong.*w_q, w_k, w_v = in_proj_weight\.chunk\(3\)",
        notes="q and k chunks swapped"),
    "loader_transposed": Bug(
        cells={"load_from_torch": '''
def load_from_torch(ours, torch_mha):
    w_q, w_k, w_v = torch_mha.in_proj_weight.chunk(3)
    b = [None] * 3 if torch_mha.in_proj_bias is None else torch_mha.in_proj_bias.chunk(3)
    with torch.no_grad():
        for proj, w, bias in zip((ours.q_proj, ours.k_proj, ours.v_proj, ours.out_proj),
                                 (w_q, w_k, w_v, torch_mha.out_proj.weight),
                                 (*b, torch_mha.out_proj.bias)):
            proj.weight.copy_(w.T)     # thinks in x @ W: but both store (out, in)
            if bias is not None:
                proj.bias.copy_(bias)
    return ours
'''},
        fails=["test_load_from_torch"],
        diagnosis=r"transpose of torch's matrix",
        notes="transposes although nn.Linear and in_proj_weight share one layout; also "
              "ignores the kdim/vdim layout"),
    "count_forgets_biases": Bug(
        cells={"count_parameters": '''
def count_parameters(d_model, num_heads, *, query_size=None, key_size=None, value_size=None,
                     bias=True):
    if d_model % num_heads:
        raise ValueError("num_heads must divide d_model")
    return d_model * ((query_size or d_model) + (key_size or d_model) + (value_size or d_model)
                      + d_model)
'''},
        fails=["test_count_parameters"],
        diagnosis=r"biases are missing",
        notes="4 * d_model**2 only"),
    "count_W_O_per_head": Bug(
        cells={"count_parameters": '''
def count_parameters(d_model, num_heads, *, query_size=None, key_size=None, value_size=None,
                     bias=True):
    if d_model % num_heads:
        raise ValueError("num_heads must divide d_model")
    qkv = d_model * ((query_size or d_model) + (key_size or d_model) + (value_size or d_model))
    W_O = num_heads * d_model * d_model      # one W_O per head
    return qkv + W_O + (4 * d_model if bias else 0)
'''},
        fails=["test_count_parameters"],
        diagnosis=r"W_O was counted once per head",
        notes="counts W_O num_heads times"),
}
