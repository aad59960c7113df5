"""Reference computations and builders shared by the test modules.

Everything here is written the slow, obvious way (one head at a time, -inf masking in
fp64), so that it can serve as an independent reference for `solutions`.
"""
import math

import torch
import torch.nn as nn

import solutions

# assert_close tolerances when two fp64 / fp32 computations of the same thing are compared.
TOL = {
    torch.float64: dict(atol=1e-10, rtol=1e-10),
    torch.float32: dict(atol=1e-5, rtol=1e-5),
}
# A low-precision result against the fp32 result of the same (rounded) inputs, O(1) values.
LOW_TOL = {
    torch.float16: dict(atol=1e-2, rtol=1e-2),
    torch.bfloat16: dict(atol=6e-2, rtol=6e-2),
}


def naive_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d_k)) v in fp64 with -inf masking; fully masked rows -> 0.

    Shapes as solutions.scaled_dot_product_attention; returns (out, weights) in fp64,
    both broadcast to the full batch shape.
    """
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])           # (..., Lq, Lk)
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)             # 0/0 rows -> 0
    return weights @ v, weights


def loop_mha(mha, query, key, value, mask=None, head_mask=None):
    """MultiHeadAttention's forward as the papers write it, one head at a time:

        out = sum_i softmax((x_q Wq_i + bq_i)(x_k Wk_i + bk_i)^T / sqrt(hd)) (x_v Wv_i + bv_i)
                    * gate_i @ Wo_i + bo

    using only mha.head_weights(). Fully masked rows give zero weights. Returns
    (out (B, Lq, D), weights (B, h, Lq, Lk)) in the module's dtype.
    """
    W = mha.head_weights()
    B, Lq, Lk = query.shape[0], query.shape[1], key.shape[1]
    h, hd = mha.num_heads, mha.head_dim
    if mask is not None:
        mask = mask.expand(B, h, Lq, Lk)
    out = torch.zeros(B, Lq, mha.d_model, dtype=query.dtype, device=query.device)
    if W.output_bias is not None:
        out = out + W.output_bias
    all_weights = []
    for i in range(h):
        qi, ki, vi = query @ W.query[i], key @ W.key[i], value @ W.value[i]   # (B, L, hd)
        if W.query_bias is not None:
            qi, ki, vi = qi + W.query_bias[i], ki + W.key_bias[i], vi + W.value_bias[i]
        scores = qi @ ki.transpose(1, 2) / math.sqrt(hd)                      # (B, Lq, Lk)
        if mask is not None:
            scores = scores.masked_fill(~mask[:, i], float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        head = weights @ vi                                                   # (B, Lq, hd)
        if head_mask is not None:
            gate = head_mask[i] if head_mask.dim() == 1 else head_mask[:, i, None, None]
            head = head * gate
        out = out + head @ W.output[i]
        all_weights.append(weights)
    return out, torch.stack(all_weights, dim=1)


def randomize_(module, std=0.3):
    """Give every parameter (biases included: nn.MultiheadAttention zeroes them) random values."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * std)
    return module


def torch_pair(d_model, num_heads, *, kdim=None, vdim=None, bias=True, dtype=torch.float32,
               batch_first=True, dropout=0.0):
    """(nn.MultiheadAttention with random weights and biases, our copy via from_torch)."""
    ref = nn.MultiheadAttention(d_model, num_heads, bias=bias, kdim=kdim, vdim=vdim,
                                batch_first=batch_first, dropout=dropout, dtype=dtype)
    randomize_(ref)
    return ref, solutions.MultiHeadAttention.from_torch(ref)


def torch_mha_grads(m):
    """nn.MultiheadAttention's parameter gradients under our parameter names."""
    if m._qkv_same_embed_dim:
        gq, gk, gv = m.in_proj_weight.grad.chunk(3)
    else:
        gq, gk, gv = m.q_proj_weight.grad, m.k_proj_weight.grad, m.v_proj_weight.grad
    grads = {"q_proj.weight": gq, "k_proj.weight": gk, "v_proj.weight": gv,
             "out_proj.weight": m.out_proj.weight.grad}
    if m.in_proj_bias is not None:
        bq, bk, bv = m.in_proj_bias.grad.chunk(3)
        grads.update({"q_proj.bias": bq, "k_proj.bias": bk, "v_proj.bias": bv,
                      "out_proj.bias": m.out_proj.bias.grad})
    return grads


def our_grads(mha):
    return {name: p.grad for name, p in mha.named_parameters()}


def random_mask(shape, p_true=0.6, generator=None, device=None):
    """A random boolean mask, True = may attend, with about p_true of entries True."""
    return torch.rand(shape, generator=generator, device=device) < p_true


def every_row_has_a_key(mask):
    """`mask` with key 0 allowed in each row that had no allowed key (for nn.MHA, which NaNs)."""
    mask = mask.clone()
    mask[..., 0] |= ~mask.any(dim=-1)
    return mask


def lengths_mask(lengths, k_len):
    """Padding mask of any batch shape: lengths (...) ints -> (..., 1, Lk) True at real keys."""
    return torch.arange(k_len, device=lengths.device) < lengths[..., None, None]
