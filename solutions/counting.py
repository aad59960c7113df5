"""Exact parameter and FLOP counts of one multi-head attention layer.

FLOPs count matrix products only, 2 per multiply-add (the usual convention); softmax,
scaling and masking add O(B * h * Lq * Lk) more, small beside the products.
"""
from ._checks import check_heads, check_positive_int


def count_parameters(d_model, num_heads, *, query_size=None, key_size=None,
                     value_size=None, bias=True):
    """Number of parameters of MultiHeadAttention(d_model, num_heads, ...).

    With the default sizes: 4 * d_model**2 (W_Q, W_K, W_V, W_O) + 4 * d_model (biases),
    whatever num_heads is: splitting into heads re-arranges the parameters, it adds none.
    """
    check_heads(d_model, num_heads)
    for name, v in (("query_size", query_size), ("key_size", key_size), ("value_size", value_size)):
        check_positive_int(v, name, optional=True)
    inputs = [query_size or d_model, key_size or d_model, value_size or d_model]
    weights = sum(size * d_model for size in inputs) + d_model * d_model
    biases = 4 * d_model if bias else 0
    return weights + biases


def count_flops(batch, q_len, d_model, num_heads, *, k_len=None, query_size=None,
                key_size=None, value_size=None):
    """Matmul FLOPs of one forward pass, by stage, as a dict.

    Keys: q_proj, k_proj, v_proj, scores (Q K^T), weighted_sum (weights @ V), out_proj,
    attention (scores + weighted_sum), total, and per_head_attention (one head's share of
    `attention`). `attention` is 4 * B * Lq * Lk * d_model for any num_heads: each head
    costs 1/num_heads of it, so splitting lowers the cost per head, not the total.
    """
    check_heads(d_model, num_heads)
    for name, v in (("query_size", query_size), ("key_size", key_size), ("value_size", value_size)):
        check_positive_int(v, name, optional=True)
    k_len = q_len if k_len is None else k_len
    head_dim = d_model // num_heads
    q_in, k_in, v_in = query_size or d_model, key_size or d_model, value_size or d_model
    flops = {
        "q_proj": 2 * batch * q_len * q_in * d_model,
        "k_proj": 2 * batch * k_len * k_in * d_model,
        "v_proj": 2 * batch * k_len * v_in * d_model,
        "scores": 2 * batch * num_heads * q_len * k_len * head_dim,
        "weighted_sum": 2 * batch * num_heads * q_len * k_len * head_dim,
        "out_proj": 2 * batch * q_len * d_model * d_model,
    }
    flops["attention"] = flops["scores"] + flops["weighted_sum"]
    flops["total"] = sum(flops[k] for k in ("q_proj", "k_proj", "v_proj", "attention", "out_proj"))
    flops["per_head_attention"] = flops["attention"] // num_heads
    return flops
