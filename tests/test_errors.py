"""Bad input is refused with the right exception type and a message that names the problem
and the shapes involved. `meta` tensors stand in for a second device on a CPU-only machine."""
import re

import pytest
import torch
import torch.nn as nn

from solutions import (MultiHeadAttention, causal_mask, count_flops, count_parameters,
                       from_torch_attn_mask, from_torch_key_padding_mask, merge_heads,
                       padding_mask, scaled_dot_product_attention, split_heads,
                       to_torch_attn_mask, to_torch_key_padding_mask)

META = torch.device("meta")


def raises(exc, *fragments):
    """pytest.raises that requires every fragment (literal text) in the message, in order."""
    return pytest.raises(exc, match=".*".join(re.escape(f) for f in fragments))


# ----------------------------------------------------------------- scaled_dot_product_attention
Q, K, V = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)


@pytest.mark.parametrize("which", ["query", "key", "value"])
def test_sdpa_non_tensor_and_non_float(which):
    args = dict(query=Q, key=K, value=V)
    args[which] = args[which].tolist()
    with raises(TypeError, f"{which} must be a torch.Tensor, got list"):
        scaled_dot_product_attention(**args)
    args[which] = torch.ones(2, 5, 4, dtype=torch.long)
    with raises(TypeError, f"{which} must be a floating-point tensor", "torch.int64"):
        scaled_dot_product_attention(**args)


@pytest.mark.parametrize("which", ["query", "key", "value"])
def test_sdpa_wrong_rank(which):
    args = dict(query=Q, key=K, value=V)
    args[which] = torch.randn(4)
    with raises(ValueError, f"{which} must have rank >= 2", "(4,)", "rank 1"):
        scaled_dot_product_attention(**args)


def test_sdpa_mismatched_dtypes():
    with raises(TypeError, "key has dtype torch.float64 but query has dtype torch.float32"):
        scaled_dot_product_attention(Q, K.double(), V)
    with raises(TypeError, "value has dtype torch.float16 but query has dtype torch.float32"):
        scaled_dot_product_attention(Q, K, V.half())


def test_sdpa_mismatched_devices():
    with raises(ValueError, "key is on meta but query is on cpu"):
        scaled_dot_product_attention(Q, K.to(META), V)
    with raises(ValueError, "value is on meta but query is on cpu"):
        scaled_dot_product_attention(Q, K, V.to(META))
    with raises(ValueError, "mask is on meta but the inputs are on cpu"):
        scaled_dot_product_attention(Q, K, V, torch.ones(3, 5, dtype=torch.bool, device=META))


def test_sdpa_feature_and_length_mismatch():
    with raises(ValueError, "same feature size d_k", "query (2, 3, 4)", "key (2, 5, 7)"):
        scaled_dot_product_attention(Q, torch.randn(2, 5, 7), V)
    with raises(ValueError, "same length Lk", "key (2, 5, 4)", "value (2, 6, 6)"):
        scaled_dot_product_attention(Q, K, torch.randn(2, 6, 6))


def test_sdpa_batch_dims_do_not_broadcast():
    with raises(ValueError, "batch dimensions", "(2, 3, 4)", "(3, 5, 4)", "do not broadcast"):
        scaled_dot_product_attention(Q, torch.randn(3, 5, 4), torch.randn(3, 5, 6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_sdpa_mask_of_wrong_dtype(dtype):
    with raises(TypeError, "mask must have dtype torch.bool", str(dtype), "from_torch_attn_mask"):
        scaled_dot_product_attention(Q, K, V, torch.ones(3, 5, dtype=dtype))


def test_sdpa_mask_not_a_tensor():
    with raises(TypeError, "mask must be a torch.Tensor, got list"):
        scaled_dot_product_attention(Q, K, V, [[True] * 5] * 3)


@pytest.mark.parametrize("shape", [(5, 3), (3, 4), (3, 2, 3, 5), (2, 2, 3, 5), (7,)])
def test_sdpa_mask_that_cannot_broadcast(shape):
    mask = torch.ones(shape, dtype=torch.bool)
    with raises(ValueError, f"mask of shape {shape} cannot broadcast", "(2, 3, 5)"):
        scaled_dot_product_attention(Q, K, V, mask)


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5, float("nan")])
def test_sdpa_bad_dropout(p):
    with raises(ValueError, "dropout_p must be in [0, 1)"):
        scaled_dot_product_attention(Q, K, V, dropout_p=p)


# ----------------------------------------------------------------- MultiHeadAttention()
@pytest.mark.parametrize("d_model,num_heads", [(10, 3), (512, 7), (6, 4)])
def test_d_model_not_divisible(d_model, num_heads):
    with raises(ValueError, f"d_model={d_model} is not divisible by num_heads={num_heads}"):
        MultiHeadAttention(d_model, num_heads)
    with raises(ValueError, f"d_model={d_model} is not divisible by num_heads={num_heads}"):
        split_heads(torch.randn(1, 2, d_model), num_heads)
    with raises(ValueError, "is not divisible"):
        count_parameters(d_model, num_heads)
    with raises(ValueError, "is not divisible"):
        count_flops(1, 2, d_model, num_heads)


@pytest.mark.parametrize("name,kw", [
    ("num_heads", dict(d_model=8, num_heads=0)),
    ("num_heads", dict(d_model=8, num_heads=-2)),
    ("num_heads", dict(d_model=8, num_heads=2.0)),
    ("num_heads", dict(d_model=8, num_heads=True)),
    ("d_model", dict(d_model=0, num_heads=1)),
    ("d_model", dict(d_model="8", num_heads=1)),
    ("head_dim", dict(d_model=8, num_heads=2, head_dim=0)),
    ("head_dim", dict(d_model=8, num_heads=2, head_dim=2.5)),
    ("num_heads", dict(d_model=8, num_heads=0, head_dim=4)),
    ("query_size", dict(d_model=8, num_heads=2, query_size=0)),
    ("key_size", dict(d_model=8, num_heads=2, key_size=-3)),
    ("value_size", dict(d_model=8, num_heads=2, value_size=4.0)),
])
def test_bad_sizes(name, kw):
    with raises(ValueError, f"{name} must be a positive int"):
        MultiHeadAttention(**kw)


def test_bad_sizes_in_counts():
    with raises(ValueError, "key_size must be a positive int"):
        count_parameters(8, 2, key_size=0)
    with raises(ValueError, "value_size must be a positive int"):
        count_flops(1, 3, 8, 2, value_size=-1)


@pytest.mark.parametrize("p", [-0.5, 1.0, 2])
def test_bad_dropout(p):
    with raises(ValueError, "dropout must be in [0, 1)", str(p)):
        MultiHeadAttention(8, 2, dropout=p)


# ----------------------------------------------------------------- MultiHeadAttention.forward
MHA = MultiHeadAttention(8, 2, key_size=6, value_size=5)
X, KX, VX = torch.randn(2, 3, 8), torch.randn(2, 4, 6), torch.randn(2, 4, 5)


@pytest.mark.parametrize("which", ["query", "key", "value"])
def test_mha_wrong_rank(which):
    args = dict(query=X, key=KX, value=VX)
    unbatched = args[which][0]
    args[which] = unbatched
    with raises(ValueError, f"{which} must have rank 3", f"{tuple(unbatched.shape)} (rank 2)"):
        MHA(**args)


@pytest.mark.parametrize("which", ["query", "key", "value"])
def test_mha_non_float_input(which):
    args = dict(query=X, key=KX, value=VX)
    args[which] = args[which].long()
    with raises(TypeError, f"{which} must be a floating-point tensor", "torch.int64"):
        MHA(**args)


@pytest.mark.parametrize("which,size", [("query", 8), ("key", 6), ("value", 5)])
def test_mha_wrong_feature_size(which, size):
    args = dict(query=X, key=KX, value=VX)
    args[which] = torch.randn(2, args[which].shape[1], size + 1)
    with raises(ValueError, f"{which} must have shape (B, L, {size}) ({which}_size={size})",
                f"got {tuple(args[which].shape)}"):
        MHA(**args)


def test_mha_mismatched_batch_and_lengths():
    with raises(ValueError, "share the batch size B", "(2, 3, 8)", "(3, 4, 6)", "(3, 4, 5)"):
        MHA(X, torch.randn(3, 4, 6), torch.randn(3, 4, 5))
    with raises(ValueError, "key and value must have the same length Lk", "key (2, 4, 6)",
                "value (2, 7, 5)"):
        MHA(X, KX, torch.randn(2, 7, 5))


def test_mha_mismatched_dtypes():
    with raises(TypeError, "key has dtype torch.float64 but query has dtype torch.float32"):
        MHA(X, KX.double(), VX)
    mha64 = MultiHeadAttention(8, 2, dtype=torch.float64)
    with raises(TypeError, "parameters has dtype torch.float64 but query has dtype torch.float32"):
        mha64(X, X, X)


def test_mha_mismatched_devices():
    with raises(ValueError, "value is on meta but query is on cpu"):
        MHA(X, KX, VX.to(META))
    on_meta = MultiHeadAttention(8, 2, device=META)
    with raises(ValueError, "parameters is on meta but query is on cpu"):
        on_meta(X, X, X)
    with raises(ValueError, "mask is on meta but the inputs are on cpu"):
        MHA(X, KX, VX, mask=torch.ones(3, 4, dtype=torch.bool, device=META))
    with raises(ValueError, "head_mask is on meta but query is on cpu"):
        MHA(X, KX, VX, head_mask=torch.ones(2, device=META))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
def test_mha_mask_of_wrong_dtype(dtype):
    with raises(TypeError, "mask must have dtype torch.bool", str(dtype)):
        MHA(X, KX, VX, mask=torch.zeros(3, 4, dtype=dtype))


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 3, 4), (3, 2, 3, 4), (2, 2, 2, 3, 4), (5,)])
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_mask_that_cannot_broadcast(shape, need_weights):
    with raises(ValueError, f"mask of shape {shape} cannot broadcast", "(2, 2, 3, 4)"):
        MHA(X, KX, VX, mask=torch.ones(shape, dtype=torch.bool), need_weights=need_weights)


def test_mha_bad_head_mask():
    with raises(ValueError, "head_mask must have shape (2,) or (2, 2)", "got (3,)"):
        MHA(X, KX, VX, head_mask=torch.ones(3))
    with raises(ValueError, "head_mask must have shape (2,) or (2, 2)", "got (2, 2, 1)"):
        MHA(X, KX, VX, head_mask=torch.ones(2, 2, 1))
    with raises(TypeError, "head_mask must be a torch.Tensor, got list"):
        MHA(X, KX, VX, head_mask=[1.0, 0.0])


# ----------------------------------------------------------------- from_torch / to_torch
def test_from_torch_refuses_other_modules_and_options():
    with raises(TypeError, "expected nn.MultiheadAttention, got Linear"):
        MultiHeadAttention.from_torch(nn.Linear(4, 4))
    with raises(ValueError, "add_bias_kv and add_zero_attn are not supported"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with raises(ValueError, "add_bias_kv and add_zero_attn are not supported"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_zero_attn=True))


def test_to_torch_needs_query_size_d_model():
    with raises(ValueError, "query_size == d_model == num_heads * head_dim", "query_size=5"):
        MultiHeadAttention(8, 2, query_size=5).to_torch()
    with raises(ValueError, "num_heads * head_dim=6"):
        MultiHeadAttention(8, 2, head_dim=3).to_torch()


# ----------------------------------------------------------------- heads
def test_split_and_merge_heads_errors():
    with raises(ValueError, "x must have rank 3", "(2, 8)", "rank 2"):
        split_heads(torch.randn(2, 8), 2)
    with raises(ValueError, "x must have rank 3", "(1, 2, 2, 8)", "rank 4"):
        split_heads(torch.randn(1, 2, 2, 8), 2)
    with raises(TypeError, "x must be a floating-point tensor", "torch.int64"):
        split_heads(torch.ones(1, 2, 8, dtype=torch.long), 2)
    with raises(ValueError, "num_heads must be a positive int", "0"):
        split_heads(torch.randn(1, 2, 8), 0)
    with raises(ValueError, "x must have rank 4", "(2, 3, 8)", "rank 3"):
        merge_heads(torch.randn(2, 3, 8))
    with raises(TypeError, "x must be a torch.Tensor, got ndarray"):
        merge_heads(torch.randn(1, 2, 3, 4).numpy())


# ----------------------------------------------------------------- masks
def test_padding_mask_errors():
    with raises(ValueError, "lengths must have shape (B,)", "got (2, 1)"):
        padding_mask(torch.tensor([[1], [2]]), 3)
    with raises(TypeError, "lengths must hold integers", "torch.float32"):
        padding_mask(torch.tensor([1.0, 2.0]), 3)
    with raises(TypeError, "lengths must hold integers", "torch.bool"):
        padding_mask(torch.tensor([True, False]), 3)
    with raises(ValueError, "lengths must lie in [0, max_len=3]", "[1, 4]"):
        padding_mask([1, 4], 3)
    with raises(ValueError, "lengths must lie in [0, max_len=3]", "[-1, 2]"):
        padding_mask([-1, 2], 3)
    for bad in (-1, 2.0, True, None):
        with raises(ValueError, "max_len must be a non-negative int", repr(bad)):
            padding_mask([1, 2], bad)


def test_causal_mask_errors():
    with raises(ValueError, "q_len must be a non-negative int", "-1"):
        causal_mask(-1)
    with raises(ValueError, "k_len must be a non-negative int", "2.5"):
        causal_mask(3, 2.5)


def test_mask_converter_errors():
    with raises(TypeError, "mask must have dtype torch.bool", "torch.float32"):
        to_torch_key_padding_mask(torch.ones(2, 3))
    with raises(TypeError, "mask must be a torch.Tensor, got list"):
        to_torch_attn_mask([[True]])
    with raises(ValueError, "padding mask must have shape (B, 1, 1, Lk) or (B, Lk)",
                "(2, 1, 3, 4)"):
        to_torch_key_padding_mask(torch.ones(2, 1, 3, 4, dtype=torch.bool))
    with raises(TypeError, "key_padding_mask must have dtype torch.bool", "torch.int64"):
        from_torch_key_padding_mask(torch.zeros(2, 3, dtype=torch.long))
    with raises(ValueError, "key_padding_mask must have shape (B, Lk)", "(2, 1, 3)"):
        from_torch_key_padding_mask(torch.zeros(2, 1, 3, dtype=torch.bool))
    with raises(ValueError, "mask must have shape (Lq, Lk) or (B, num_heads, Lq, Lk)",
                "(2, 3, 4)"):
        to_torch_attn_mask(torch.ones(2, 3, 4, dtype=torch.bool))
    with raises(ValueError, "only if it holds just 0 and -inf"):
        from_torch_attn_mask(torch.tensor([[0.0, -1e9]]))
    with raises(ValueError, "only if it holds just 0 and -inf"):
        from_torch_attn_mask(torch.tensor([[0.0, float("nan")]]))
    with raises(TypeError, "attn_mask must be bool or float", "torch.int64"):
        from_torch_attn_mask(torch.zeros(3, 3, dtype=torch.long))
    with raises(TypeError, "attn_mask must be a torch.Tensor, got list"):
        from_torch_attn_mask([[0.0]])
    with raises(ValueError, "first axis 5 is not B * num_heads for num_heads=2"):
        from_torch_attn_mask(torch.zeros(5, 3, 3, dtype=torch.bool), num_heads=2)
    with raises(ValueError, "attn_mask must have shape (Lq, Lk) or (B * num_heads, Lq, Lk)",
                "(1, 2, 3, 3)"):
        from_torch_attn_mask(torch.zeros(1, 2, 3, 3, dtype=torch.bool))


# ----------------------------------------------------------------- the public contract
TENSOR_API = ["scaled_dot_product_attention", "masked_softmax", "stable_softmax", "split_heads",
              "merge_heads", "padding_mask", "causal_mask", "to_torch_key_padding_mask",
              "from_torch_key_padding_mask", "to_torch_attn_mask", "from_torch_attn_mask"]


@pytest.mark.parametrize("name", TENSOR_API + ["MultiHeadAttention.forward", "HeadWeights"])
def test_public_functions_state_their_shapes(name):
    """COURSE.md: every public function of `solutions` states its tensor shapes."""
    import solutions
    obj = solutions
    for part in name.split("."):
        obj = getattr(obj, part)
    doc = obj.__doc__ or ""
    shape = re.compile(r"\((?:[^()]*\b(?:B|L|Lq|Lk|d_k|hd|h|d_model|num_heads|q_len|max_len)\b"
                       r"[^()]*|\.\.\.[^()]*)\)|any shape")
    assert shape.search(doc), f"{name}'s docstring states no tensor shape"
    assert set(TENSOR_API) <= set(solutions.__all__)
