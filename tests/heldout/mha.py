"""Held-out set, chapter 3 (concatenation and W_O, the MultiHeadAttention layer): mistakes
written before any check was changed for them, each absent from tests/submissions/mha.py.

Solution cells: output_projection_by_heads, MultiHeadAttention, load_from_torch,
count_parameters.
"""
from . import Bug, edit, reference

NOTEBOOK = "03_mha"

_PROJECTION = reference(NOTEBOOK, "output_projection_by_heads")
_MHA = reference(NOTEBOOK, "MultiHeadAttention")
_LOADER = reference(NOTEBOOK, "load_from_torch")
_COUNT = reference(NOTEBOOK, "count_parameters")

CORRECT = {
    # the sum over heads as one einsum; the layer's scale folded into the queries and the
    # softmax written out; the weights loaded through load_state_dict; the count as one
    # product.
    "einsum_state_dict": {
        "output_projection_by_heads": '''
def output_projection_by_heads(heads, W_O, b_O=None):
    B, h, L, hd = heads.shape
    if W_O.shape[0] != h * hd:
        raise ValueError(f"W_O must have num_heads * head_dim = {h * hd} rows")
    out = torch.einsum("bhld,hdm->blm", heads, W_O.reshape(h, hd, -1))
    return out if b_O is None else out + b_O
''',
        "MultiHeadAttention": edit(_MHA, """        q = split_heads(self.q_proj(query), self.num_heads)  # (B, h, Lq, hd)
        k = split_heads(self.k_proj(key), self.num_heads)    # (B, h, Lk, hd)
        v = split_heads(self.v_proj(value), self.num_heads)  # (B, h, Lk, hd)
        heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, h, Lq, hd), (B, h, Lq, Lk)
        return self.out_proj(merge_heads(heads)), weights   # (B, Lq, d_model)
""", """        B, Lq, Lk = query.shape[0], query.shape[1], key.shape[1]
        q = self.q_proj(query).view(B, Lq, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(key).view(B, Lk, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(value).view(B, Lk, self.num_heads, self.head_dim).transpose(1, 2)
        q = q * self.head_dim ** -0.5
        scores = q @ k.transpose(-1, -2)
        weights = torch.exp(scores - scores.logsumexp(dim=-1, keepdim=True))
        heads = (weights @ v).transpose(1, 2).reshape(B, Lq, self.d_model)
        return self.out_proj(heads), weights
"""),
        "load_from_torch": '''
def load_from_torch(ours, torch_mha):
    if torch_mha.in_proj_weight is not None:
        weights = dict(zip("qkv", torch_mha.in_proj_weight.split(ours.d_model)))
    else:
        weights = {"q": torch_mha.q_proj_weight, "k": torch_mha.k_proj_weight,
                   "v": torch_mha.v_proj_weight}
    state = {f"{n}_proj.weight": w for n, w in weights.items()}
    state["out_proj.weight"] = torch_mha.out_proj.weight
    if torch_mha.in_proj_bias is not None:
        for n, b in zip("qkv", torch_mha.in_proj_bias.split(ours.d_model)):
            state[f"{n}_proj.bias"] = b
        state["out_proj.bias"] = torch_mha.out_proj.bias
    ours.load_state_dict({k: v.detach().clone() for k, v in state.items()})
    return ours
''',
        "count_parameters": '''
def count_parameters(d_model, num_heads, *, query_size=None, key_size=None, value_size=None,
                     bias=True):
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    fan_in = (query_size or d_model) + (key_size or d_model) + (value_size or d_model) + d_model
    return d_model * fan_in + (4 * d_model if bias else 0)
''',
    },
    # W_O applied to the concatenated heads (the other side of the identity); the count read
    # from a layer built on the meta device.
    "concat_then_W_O_meta_count": {
        "output_projection_by_heads": '''
def output_projection_by_heads(heads, W_O, b_O=None):
    h, hd = heads.shape[1], heads.shape[3]
    if W_O.shape[0] != h * hd:
        raise ValueError(f"W_O must have num_heads * head_dim = {h * hd} rows")
    return F.linear(merge_heads(heads), W_O.T, b_O)
''',
        "count_parameters": '''
def count_parameters(d_model, num_heads, *, query_size=None, key_size=None, value_size=None,
                     bias=True):
    with torch.device("meta"):
        layer = MultiHeadAttention(d_model, num_heads, query_size=query_size,
                                   key_size=key_size, value_size=value_size, bias=bias)
    return sum(p.numel() for p in layer.parameters())
''',
    },
}

BUGS = {
    # --- output_projection_by_heads
    # range(h - 1): the last head left out of the sum.
    "projection_last_head_left_out": Bug(
        cells={"output_projection_by_heads": edit(_PROJECTION, "for i in range(h))",
                                                  "for i in range(h - 1))")},
        fails=["test_output_projection_by_heads"],
        diagnosis=r"(?i)last head|head \d+ (is )?(missing|left out|not)|range\(h - 1\)|without head"),
    # heads[:, :, i] indexes positions, not heads.
    "projection_indexes_positions": Bug(
        cells={"output_projection_by_heads": edit(_PROJECTION, "heads[:, i] @ blocks[i]",
                                                  "heads[:, :, i] @ blocks[i]")},
        fails=["test_output_projection_by_heads"],
        diagnosis=r"(?i)position.{0,40}(axis|instead of.{0,20}head)|heads\[:, :, i\]|indexe?d? (the )?(L|sequence|positions)"),
    # The shape check reads the columns: refuses W_O whenever d_model != num_heads * head_dim.
    "projection_checks_columns": Bug(
        cells={"output_projection_by_heads": edit(_PROJECTION, "if W_O.shape[0] != h * hd:",
                                                  "if W_O.shape[1] != h * hd:")},
        fails=["test_output_projection_by_heads"],
        diagnosis=r"(?i)refus|should not raise|valid W_O|rows.{0,40}columns|W_O\.shape\[1\]"),

    # --- MultiHeadAttention
    # split_heads given head_dim where it takes num_heads.
    "forward_split_by_head_dim": Bug(
        cells={"MultiHeadAttention": edit(edit(edit(_MHA,
            "split_heads(self.q_proj(query), self.num_heads)", "split_heads(self.q_proj(query), self.head_dim)"),
            "split_heads(self.k_proj(key), self.num_heads)", "split_heads(self.k_proj(key), self.head_dim)"),
            "split_heads(self.v_proj(value), self.num_heads)", "split_heads(self.v_proj(value), self.head_dim)")},
        fails=["test_mha_forward"],
        diagnosis=r"(?i)\d+ = head_dim.{0,80}num_heads|head_dim heads|head_dim (instead of|in place of|for) num_heads|num_heads and head_dim"),
    # key_size and value_size swapped in the constructor.
    "init_key_value_sizes_swapped": Bug(
        cells={"MultiHeadAttention": edit(edit(_MHA,
            "nn.Linear(key_size or d_model, d_model", "nn.Linear(value_size or d_model, d_model"),
            "self.v_proj = nn.Linear(value_size or d_model", "self.v_proj = nn.Linear(key_size or d_model")},
        fails=["test_mha_structure", "test_mha_forward"],
        diagnosis=r"(?i)key_size.{0,80}value_size|value_size.{0,80}key_size|swapped"),
    # num_heads stored as head_dim (d_model // num_heads) and head_dim as num_heads.
    "init_num_heads_and_head_dim_swapped": Bug(
        cells={"MultiHeadAttention": edit(_MHA,
            "self.d_model, self.num_heads, self.head_dim = d_model, num_heads, d_model // num_heads",
            "self.d_model, self.head_dim, self.num_heads = d_model, num_heads, d_model // num_heads")},
        fails=["test_mha_structure", "test_mha_forward"],
        diagnosis=r"(?i)num_heads (is|=) \d+.{0,60}(expected|should)|head_dim.{0,60}num_heads.{0,30}swapped|\.num_heads"),

    # --- load_from_torch
    # in_proj_weight chunked along its columns.
    "loader_chunks_columns": Bug(
        cells={"load_from_torch": edit(_LOADER, "torch_mha.in_proj_weight.chunk(3)",
                                       "torch_mha.in_proj_weight.chunk(3, dim=1)")},
        fails=["test_load_from_torch"],
        diagnosis=r"(?i)chunk.{0,40}(dim=0|rows|columns|dim=1)|along (its )?(rows|columns)|row blocks"),
    # With separate matrices (kdim, vdim != embed_dim), k and v taken in the wrong order.
    "loader_separate_k_v_swapped": Bug(
        cells={"load_from_torch": edit(_LOADER,
            "w_q, w_k, w_v = torch_mha.q_proj_weight, torch_mha.k_proj_weight, torch_mha.v_proj_weight",
            "w_q, w_v, w_k = torch_mha.q_proj_weight, torch_mha.k_proj_weight, torch_mha.v_proj_weight")},
        fails=["test_load_from_torch"],
        diagnosis=r"(?i)k_proj_weight.{0,80}v_proj_weight|swapped|order"),

    # --- count_parameters
    # The biases counted by input size, not by output size.
    "count_biases_by_input_size": Bug(
        cells={"count_parameters": edit(_COUNT, "biases = 4 * d_model if bias else 0",
                                        "biases = sum(inputs) + d_model if bias else 0")},
        fails=["test_count_parameters"],
        diagnosis=r"(?i)bias.{0,80}(input size|query_size|key_size|value_size|d_model each|output)"),
    # bias=False ignored.
    "count_bias_flag_ignored": Bug(
        cells={"count_parameters": edit(_COUNT, "biases = 4 * d_model if bias else 0",
                                        "biases = 4 * d_model")},
        fails=["test_count_parameters"],
        diagnosis=r"(?i)(ignor\w*|counted).{0,40}bias|bias.{0,40}(ignor|counted)|bias flag"),
    # head_dim with true division: the count is a float.
    "count_float": Bug(
        cells={"count_parameters": edit(_COUNT, "weights = sum(size * d_model for size in inputs)",
                                        "head_dim = d_model / num_heads\n"
                                        "    weights = sum(size * num_heads * head_dim for size in inputs)")},
        fails=["test_count_parameters"],
        diagnosis=r"(?i)\bint\b|integer|float|whole number",
        notes="the check accepts 444.0 where the exercise asks for an int"),
}
