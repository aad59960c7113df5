"""Chapter 1: scaled dot-product attention, the one-head core that every head runs.

Shape letters: B batch, Lq query length, Lk key length, d_k query/key features,
d_v value features; `...` is any number of leading batch dimensions.
"""
import math

import torch
import torch.nn.functional as F

from ._checks import check_mask, check_same_device_and_dtype, check_tensor


def stable_softmax(scores, dim=-1):
    """Softmax that never overflows: exp(s - max s) / sum exp(s - max s).

    scores: float tensor of any shape. Returns the same shape, summing to 1 along `dim`.

    Subtracting the row maximum changes nothing mathematically (it cancels between
    numerator and denominator) but keeps every exponent <= 0, so exp() cannot overflow.
    `torch.softmax` does the same internally; this is the readable version.
    """
    shifted = scores - scores.amax(dim=dim, keepdim=True)
    exp = shifted.exp()
    return exp / exp.sum(dim=dim, keepdim=True)


def attention_scores(query, key):
    """Scaled scores Q K^T / sqrt(d_k): query (..., Lq, d_k), key (..., Lk, d_k) -> (..., Lq, Lk).

    Scale q before the product (not the scores after): same result, and fp16 scores are
    less likely to overflow.
    """
    return (query / math.sqrt(query.shape[-1])) @ key.transpose(-2, -1)


def attention_entropy(weights):
    """Entropy in nats of each row of weights (..., Lq, Lk) -> (..., Lq), with 0 log 0 = 0.

    log(Lk) for uniform weights, 0 for a one-hot row: how spread out a query's attention is.
    """
    return -torch.special.xlogy(weights, weights).sum(dim=-1)


def masked_softmax(scores, mask=None):
    """Softmax over the last axis where `mask` is True; rows with no True give zeros.

    scores: (..., Lq, Lk) float. mask: bool broadcastable to scores, True = may attend.
    Returns weights (..., Lq, Lk): each row sums to 1, or to 0 if all its keys are masked.

    Masked scores are set to the dtype's most negative *finite* value, not -inf and not
    -1e9: -inf makes a fully masked row 0/0 = NaN, and -1e9 overflows fp16 to -inf.
    A fully masked row then softmaxes to a uniform row, which the final multiply zeroes.
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    return weights.masked_fill(~mask, 0.0)  # zeroes fully masked rows; no-op elsewhere


def scaled_dot_product_attention(query, key, value, mask=None, dropout_p=0.0):
    """softmax(Q K^T / sqrt(d_k)) V, with an optional boolean mask.

    query: (..., Lq, d_k)   key: (..., Lk, d_k)   value: (..., Lk, d_v)
    mask:  bool, broadcastable to (..., Lq, Lk); True = may attend (as in
           F.scaled_dot_product_attention). A query whose keys are all masked gets
           zero weights and zero output, and no NaN in forward or backward.
    dropout_p: probability of zeroing an attention weight (inverted dropout).
    Returns (output (..., Lq, d_v), weights (..., Lq, Lk)); `weights` are the softmax
    probabilities before dropout.
    """
    check_tensor(query, "query", min_rank=2)
    check_tensor(key, "key", min_rank=2)
    check_tensor(value, "value", min_rank=2)
    check_same_device_and_dtype(query=query, key=key, value=value)
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must have the same feature size d_k: query {tuple(query.shape)}, "
            f"key {tuple(key.shape)}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same length Lk: key {tuple(key.shape)}, "
            f"value {tuple(value.shape)}"
        )
    try:
        batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of query {tuple(query.shape)}, key {tuple(key.shape)} and "
            f"value {tuple(value.shape)} do not broadcast"
        ) from None
    check_mask(mask, (*batch, query.shape[-2], key.shape[-2]), query.device)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")

    scores = attention_scores(query, key)                       # (..., Lq, Lk)
    weights = masked_softmax(scores, mask)                      # (..., Lq, Lk)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    output = dropped @ value                                    # (..., Lq, d_v)
    return output, weights
