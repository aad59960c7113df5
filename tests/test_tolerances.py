"""Tolerances from the arithmetic (chapters/checks/common.py, ROUNDINGS): every
mathematically correct formulation passes in every float dtype, with room to spare, and
the catalogued mistakes stay far outside.

Hypothesis builds attention and softmax implementations from interchangeable parts (the
association order of the scaling, einsum, explicit loops over features or keys, a softmax
through the maximum, through logsumexp or torch.softmax, float64 or float32 inside and a
cast back) and runs chapter 1's and chapter 4's checks on them in float64, float32,
float16 and bfloat16, with shapes and seeds it draws. The course profile of
tests/conftest.py is derandomized: the same examples on every run.
"""
import contextlib
import io
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.chapter import checks_module

ch1, common, ch2, ch4 = (checks_module(name) for name in ("attention", "common", "heads", "masks"))

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
# A correct formulation may use this fraction of the tolerance at most: ROUNDINGS is a
# worst-case count, and the formulations below stay far under it (measured: < 0.05).
MARGIN = 0.25


# ------------------------------------------------------------------ interchangeable parts
def _scores(q, k, how):
    d = q.shape[-1]
    if how == "divide_after":
        return q @ k.transpose(-2, -1) / math.sqrt(d)
    if how == "scale_query_first":
        return (q / math.sqrt(d)) @ k.transpose(-2, -1)
    if how == "fourth_root_on_both":
        return (q / d ** 0.25) @ (k / d ** 0.25).transpose(-2, -1)
    if how == "multiply_by_inverse":
        return torch.matmul(q, k.mT) * (1.0 / math.sqrt(d))
    if how == "einsum":
        return torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(d)
    if how == "loop_over_features":  # sum of d rank-one products, in order
        total = q[..., :, 0:1] * k[..., :, 0].unsqueeze(-2)
        for i in range(1, d):
            total = total + q[..., :, i:i + 1] * k[..., :, i].unsqueeze(-2)
        return total / math.sqrt(d)
    raise ValueError(how)


def _softmax(s, how, dim=-1):
    if how == "torch":
        return torch.softmax(s, dim=dim)
    if how == "max":
        e = (s - s.amax(dim=dim, keepdim=True)).exp()
        return e / e.sum(dim=dim, keepdim=True)
    if how == "logsumexp":
        return (s - torch.logsumexp(s, dim=dim, keepdim=True)).exp()
    if how == "loop_over_keys":  # a running maximum and sum, one key at a time
        parts = s.unbind(dim)
        top = parts[0]
        for p in parts[1:]:
            top = torch.maximum(top, p)
        exps = [(p - top).exp() for p in parts]
        total = exps[0]
        for e in exps[1:]:
            total = total + e
        return torch.stack([e / total for e in exps], dim=dim)
    raise ValueError(how)


def _weighted_sum(w, v, how):
    if how == "matmul":
        return w @ v
    if how == "einsum":
        return torch.einsum("...qk,...kv->...qv", w, v)
    if how == "loop_over_keys":
        out = w[..., :, 0:1] * v[..., 0:1, :]
        for j in range(1, v.shape[-2]):
            out = out + w[..., :, j:j + 1] * v[..., j:j + 1, :]
        return out
    raise ValueError(how)


def _inside(dtype, how):
    """The dtype a variant computes in: the inputs', float64, or at least float32."""
    if how == "float64":
        return torch.float64
    if how == "at_least_float32":
        return torch.promote_types(dtype, torch.float32)
    return dtype


VARIANT = st.fixed_dictionaries({
    "scores": st.sampled_from(["divide_after", "scale_query_first", "fourth_root_on_both",
                               "multiply_by_inverse", "einsum", "loop_over_features"]),
    "softmax": st.sampled_from(["torch", "max", "logsumexp", "loop_over_keys"]),
    "output": st.sampled_from(["matmul", "einsum", "loop_over_keys"]),
    "inside": st.sampled_from(["same", "float64", "at_least_float32"]),
})


def attention(variant):
    """scaled_dot_product_attention(query, key, value, mask=None) built from `variant`,
    with the course's masking rule (finfo.min before the softmax, zeros after)."""
    def scaled_dot_product_attention(query, key, value, mask=None):
        dtype = query.dtype
        inside = _inside(dtype, variant["inside"])
        q, k, v = (t.to(inside) for t in (query, key, value))
        s = _scores(q, k, variant["scores"])
        if mask is not None:
            s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
        w = _softmax(s, variant["softmax"])
        if mask is not None:
            w = w.masked_fill(~mask, 0.0)
        return _weighted_sum(w, v, variant["output"]).to(dtype), w.to(dtype)
    return scaled_dot_product_attention


def stable_softmax(variant):
    def softmax(scores, dim=-1):
        inside = _inside(scores.dtype, variant["inside"])
        how = variant["softmax"] if variant["softmax"] != "torch" else "max"
        return _softmax(scores.to(inside), how, dim=dim).to(scores.dtype)
    return softmax


@contextlib.contextmanager
def measured():
    """Record the largest excess() (error / tolerance) of the checks run inside."""
    seen = []
    original = common.excess

    def spy(*args, **kwargs):
        value = original(*args, **kwargs)
        seen.append(value)
        return value
    common.excess = spy
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield seen
    finally:
        common.excess = original


# ------------------------------------------------------------------ chapter 1
@given(variant=VARIANT, dtype=st.sampled_from(DTYPES), seed=st.integers(0, 10 ** 6),
       batch=st.sampled_from([(), (2,), (2, 3)]), Lq=st.integers(1, 6), Lk=st.integers(1, 7),
       d_k=st.integers(1, 9), d_v=st.integers(1, 6))
def test_correct_attention_passes_chapter_1(variant, dtype, seed, batch, Lq, Lk, d_k, d_v):
    sdpa = attention(variant)
    with measured() as seen:
        ch1.cross_attention(sdpa, seed=seed, batch=batch, Lq=Lq, Lk=Lk, d_k=d_k, d_v=d_v,
                            dtype=dtype)
        ch1.scaled_dot_product_attention(sdpa, seed=seed, batch=batch, L=Lk, d_k=d_k,
                                         d_v=d_v, dtype=dtype)
        if dtype in (torch.float32, torch.float64):  # whole numbers exact in the scores
            ch1.sdpa_large_scores(sdpa, seed=seed, batch=batch or (1,), Lq=Lq, Lk=max(Lk, 2),
                                  d_k=16, d_v=d_v, magnitude=20, dtype=dtype)
    assert max(seen) <= MARGIN, (variant, dtype, max(seen))


@given(variant=VARIANT, dtype=st.sampled_from(DTYPES), seed=st.integers(0, 10 ** 6),
       shape=st.sampled_from([(2, 3, 5), (4, 6), (3, 2, 2, 4), (7,)]))
def test_correct_softmax_passes_chapter_1(variant, dtype, seed, shape):
    softmax = stable_softmax(variant)
    dims = tuple(range(-len(shape), 0))
    with measured() as seen:
        ch1.stable_softmax(softmax, seed=seed, shape=shape, dims=dims, dtype=dtype)
        if dtype in (torch.float32, torch.float64):
            # float16 cannot hold scores near 1000 to better than 0.5: a logsumexp there
            # is off by a third of the weights, correct but meaningless (the chapter's
            # large-score tests are float32 and float64)
            for dim in dims:
                ch1.stable_softmax_large_scores(softmax, seed=seed, shape=shape, dim=dim,
                                                dtype=dtype)
    assert max(seen) <= MARGIN, (variant, dtype, max(seen))


# ------------------------------------------------------------------ chapter 2
@given(variant=VARIANT, dtype=st.sampled_from(DTYPES), seed=st.integers(0, 10 ** 6),
       B=st.integers(1, 3), Lq=st.integers(1, 6), Lk=st.integers(1, 6),
       num_heads=st.integers(1, 4), head_dim=st.integers(1, 6))
def test_correct_core_passes_chapter_2(variant, dtype, seed, B, Lq, Lk, num_heads, head_dim):
    sdpa = attention(variant)

    def multihead_attention_core(query, key, value, num_heads):
        def split(t):
            return t.reshape(t.shape[0], t.shape[1], num_heads, -1).transpose(1, 2)
        heads, weights = sdpa(split(query), split(key), split(value))
        return heads.transpose(1, 2).flatten(2), weights
    with measured() as seen:
        ch2.multihead_attention_core(multihead_attention_core, seed=seed, B=B, Lq=Lq, Lk=Lk,
                                     num_heads=num_heads, head_dim=head_dim, dtype=dtype)
    assert max(seen) <= MARGIN, (variant, dtype, max(seen))


# ------------------------------------------------------------------ chapter 4
@given(variant=VARIANT, dtype=st.sampled_from(DTYPES), seed=st.integers(0, 10 ** 6),
       batch=st.sampled_from([(3,), (2, 2), (3, 2)]), Lq=st.integers(3, 6),
       Lk=st.integers(2, 8), d_k=st.integers(2, 9), d_v=st.integers(1, 6))
def test_correct_attention_passes_chapter_4(variant, dtype, seed, batch, Lq, Lk, d_k, d_v):
    sdpa = attention(variant)
    with measured() as seen:
        ch4.scaled_dot_product_attention(sdpa, seed=seed, batch=batch, Lq=Lq, Lk=Lk, d_k=d_k,
                                         d_v=d_v, dtype=dtype)
        ch4.invariances(sdpa, seed=seed, batch=batch[0], L=Lk + 1, d_k=d_k, dtype=dtype)
    assert max(seen) <= MARGIN, (variant, dtype, max(seen))


@given(how=st.sampled_from(["torch", "max", "logsumexp", "loop_over_keys"]),
       fill=st.sampled_from(["masked_fill", "where"]), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 10 ** 6), batch=st.sampled_from([(2, 3), (4,), (2, 2, 2)]),
       Lq=st.integers(3, 7), Lk=st.integers(2, 9))
def test_correct_masked_softmax_passes_chapter_4(how, fill, dtype, seed, batch, Lq, Lk):
    def masked_softmax(scores, mask=None):
        if mask is None:
            return _softmax(scores, how)
        low = torch.finfo(scores.dtype).min
        s = (scores.masked_fill(~mask, low) if fill == "masked_fill"
             else torch.where(mask, scores, low))
        return _softmax(s, how).masked_fill(~mask, 0.0)
    with measured() as seen:
        ch4.masked_softmax(masked_softmax, seed=seed, batch=batch, Lq=Lq, Lk=Lk, dtype=dtype)
    assert max(seen) <= MARGIN, (how, fill, dtype, max(seen))


# ------------------------------------------------------------------ the mistakes stay far
def _float32_sqrt_attention(query, key, value, mask=None):
    d_k = query.size(-1)
    s = query @ key.transpose(-2, -1) / torch.sqrt(torch.tensor(d_k, dtype=torch.float32))
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ value, w


@pytest.mark.parametrize("d_k", [2, 3, 5, 6, 7, 8])
def test_float32_sqrt_constant_is_named_in_float64_and_harmless_below(d_k):
    """common.py's rule: many tolerances away in float64, within tolerance in float32 and
    below; invisible where d_k is a perfect square."""
    with measured() as seen:
        with pytest.raises(common.CheckFailure, match="float32 number"):
            ch1.scaled_dot_product_attention(_float32_sqrt_attention, seed=d_k, d_k=d_k,
                                             dtype=torch.float64)
    assert seen[0] > 1e4, seen[0]  # the weights' error, in tolerances
    with pytest.raises(common.CheckFailure, match=r"float64 inputs\) is wrong: .*the "
                                                  r"scale step divides by sqrt\(d_k\) "
                                                  r"rounded to float32 .*your sqrt\(d_k\) "
                                                  r"is a float32 number"):
        ch4.scaled_dot_product_attention(_float32_sqrt_attention, seed=d_k, d_k=d_k)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        with contextlib.redirect_stdout(io.StringIO()):
            ch1.scaled_dot_product_attention(_float32_sqrt_attention, seed=d_k, d_k=d_k,
                                             dtype=dtype)
    for square in (1, 4, 16):
        assert common.float32_sqrt(square) is None


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_minimum_overflows_in_every_dtype(dtype):
    """The large-score check holds rows that span more than exp's range in each dtype."""
    def softmax(scores, dim=-1):
        e = (scores - scores.amin(dim=dim, keepdim=True)).exp()
        return e / e.sum(dim=dim, keepdim=True)
    with pytest.raises(common.CheckFailure, match="The row's maximum, not its minimum"):
        ch1.stable_softmax_large_scores(softmax, dtype=dtype)


def test_tolerance_is_eps_times_the_roundings():
    for dtype in DTYPES:
        rtol, atol = common.tolerance(dtype)
        assert rtol == atol == common.ROUNDINGS * torch.finfo(dtype).eps
    e = torch.tensor([1.0, 1e-6])
    atol = common.tolerance(torch.float32)[1]
    # a small entry may be off by the rounding of the large one (scale = max |expected|)
    assert common.close(e + torch.tensor([0.0, 0.9 * atol]), e, torch.float32)
    assert not common.close(e + torch.tensor([0.0, 2.1 * atol]), e, torch.float32)
    nan = e + torch.tensor([float("nan"), 0.0])
    assert not common.close(nan, e, torch.float32)
    assert not common.close(nan, nan.clone(), torch.float32)  # two NaN are not alike
    inf = torch.tensor([float("-inf"), 1.0])
    assert common.close(inf, inf.clone(), torch.float32)
    assert not common.close(inf, torch.tensor([-1e30, 1.0]), torch.float32)
