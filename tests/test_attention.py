"""Chapter 1: scaled dot-product attention, against torch's own and a textbook reference."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_helpers import LOW_TOL, TOL, lengths_mask, naive_attention, random_mask
import solutions
from solutions import causal_mask, masked_softmax, scaled_dot_product_attention, stable_softmax

MASK_KINDS = ["none", "padding", "causal", "padding+causal", "random", "random+empty_row"]


@st.composite
def attention_cases(draw):
    """Shapes with 0..3 leading batch dims, broadcasting ones, Lq != Lk, d_k != d_v, a mask."""
    n_batch = draw(st.integers(0, 3))
    batch = draw(st.lists(st.integers(1, 3), min_size=n_batch, max_size=n_batch))

    def broadcastable_to(dims):
        """A shape that broadcasts to `dims`: leading dims dropped, some dims set to 1."""
        dims = dims[draw(st.integers(0, len(dims))):]
        ones = draw(st.lists(st.booleans(), min_size=len(dims), max_size=len(dims)))
        return [1 if one else d for d, one in zip(dims, ones)]

    qb, kb, vb = broadcastable_to(batch), broadcastable_to(batch), broadcastable_to(batch)
    full = list(torch.broadcast_shapes(qb, kb, vb))
    return dict(
        qb=qb, kb=kb, vb=vb, full=full,
        Lq=draw(st.integers(1, 6)), Lk=draw(st.integers(1, 6)),
        d_k=draw(st.integers(1, 8)), d_v=draw(st.integers(1, 8)),
        mask_kind=draw(st.sampled_from(MASK_KINDS)),
        mask_batch=broadcastable_to(full),
        p_true=draw(st.sampled_from([0.2, 0.5, 0.9])),
        dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


def build_case(c):
    g = torch.Generator().manual_seed(c["seed"])
    dt = c["dtype"]
    q = torch.randn(*c["qb"], c["Lq"], c["d_k"], generator=g, dtype=dt)
    k = torch.randn(*c["kb"], c["Lk"], c["d_k"], generator=g, dtype=dt)
    v = torch.randn(*c["vb"], c["Lk"], c["d_v"], generator=g, dtype=dt)
    kind, mb, Lq, Lk = c["mask_kind"], c["mask_batch"], c["Lq"], c["Lk"]
    mask = None
    if "padding" in kind:
        lengths = torch.randint(0, Lk + 1, mb, generator=g)          # 0 = all padding
        mask = lengths_mask(lengths, Lk)                               # (*mb, 1, Lk)
    if "causal" in kind:
        causal = causal_mask(Lq, Lk)                                   # (Lq, Lk)
        mask = causal if mask is None else mask & causal
    if kind.startswith("random"):
        mask = random_mask((*mb, Lq, Lk), c["p_true"], generator=g)
        if kind.endswith("empty_row"):
            mask[..., Lq // 2, :] = False
    return q, k, v, mask


@given(attention_cases())
@settings(max_examples=50)
def test_agrees_with_torch_sdpa(c):
    q, k, v, mask = build_case(c)
    full, Lq, Lk = c["full"], c["Lq"], c["Lk"]
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == (*full, Lq, c["d_v"]) and out.dtype == q.dtype
    weights = weights.expand(*full, Lq, Lk)

    # torch's reference on inputs expanded to the full batch (its mask must broadcast to
    # the scores, which are only as big as q and k).
    qe, ke, ve = (t.expand(*full, *t.shape[-2:]) for t in (q, k, v))
    me = None if mask is None else mask.expand(*full, Lq, Lk)
    expected = F.scaled_dot_product_attention(qe, ke, ve, attn_mask=me)
    has_key = torch.ones(*full, Lq, dtype=torch.bool) if me is None else me.any(-1)
    torch.testing.assert_close(out[has_key], expected[has_key], **TOL[q.dtype])

    # fully masked rows: exact zeros, in weights and output
    assert torch.equal(out[~has_key], torch.zeros_like(out[~has_key]))
    assert torch.equal(weights[~has_key], torch.zeros_like(weights[~has_key]))
    # weights: the textbook softmax; rows sum to 1, or 0 where no key may be attended
    _, expected_weights = naive_attention(q, k, v, mask)
    torch.testing.assert_close(weights.double(), expected_weights.expand(*full, Lq, Lk),
                               **TOL[q.dtype])
    torch.testing.assert_close(weights.sum(-1), has_key.to(q.dtype), **TOL[q.dtype])
    if mask is not None:
        assert not weights[~me].any(), "a masked key got weight"
    assert torch.isfinite(out).all()


@given(attention_cases())
@settings(max_examples=15)
def test_backward_has_no_nan_and_matches_reference(c):
    q, k, v, mask = build_case(c)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    expected_out, _ = naive_attention(q, k, v, mask)
    expected = torch.autograd.grad(expected_out.square().sum(), (q, k, v))
    for g, e in zip(grads, expected):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, e.to(g.dtype), atol=1e-4 if g.dtype == torch.float32
                                   else 1e-10, rtol=1e-4)


def test_lq_ne_lk_and_dk_ne_dv_shapes():
    q, k, v = torch.randn(2, 3, 5), torch.randn(2, 7, 5), torch.randn(2, 7, 4)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 4) and weights.shape == (2, 3, 7)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


def test_scale_is_one_over_sqrt_d_k():
    """softmax(q k^T / sqrt(d_k)): with one query and two keys the weight ratio is explicit."""
    d_k = 9
    q = torch.ones(1, d_k, dtype=torch.float64)
    k = torch.stack([torch.ones(d_k), torch.zeros(d_k)]).double()     # scores d_k and 0
    v = torch.eye(2, dtype=torch.float64)
    out, weights = scaled_dot_product_attention(q, k, v)
    ratio = weights[0, 0] / weights[0, 1]
    torch.testing.assert_close(ratio, torch.tensor(math.exp(d_k / math.sqrt(d_k)),
                                                   dtype=torch.float64))
    torch.testing.assert_close(out, weights)


def test_no_keys_at_all_gives_zero_output():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 0, 4), torch.randn(2, 0, 5)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 5) and weights.shape == (2, 3, 0)
    assert torch.equal(out, torch.zeros(2, 3, 5))


# ----------------------------------------------------------------- softmax helpers
def test_stable_softmax_matches_torch_and_never_overflows():
    scores = torch.randn(4, 5, 6)
    torch.testing.assert_close(stable_softmax(scores), torch.softmax(scores, -1))
    torch.testing.assert_close(stable_softmax(scores, dim=0), torch.softmax(scores, 0))
    big = torch.tensor([[1000.0, 999.0, -1000.0]])   # exp(1000) overflows fp32 unshifted
    assert not torch.isfinite(big.exp()).all()
    out = stable_softmax(big)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.softmax(big.double(), -1).float())


def test_masked_softmax():
    scores = torch.randn(3, 4, dtype=torch.float64)
    torch.testing.assert_close(masked_softmax(scores), torch.softmax(scores, -1))
    mask = torch.tensor([[True, True, False, False],
                         [False, False, False, False],
                         [True, False, True, True]])
    w = masked_softmax(scores, mask)
    torch.testing.assert_close(w[0, :2], torch.softmax(scores[0, :2], -1))
    torch.testing.assert_close(w[2, [0, 2, 3]], torch.softmax(scores[2, [0, 2, 3]], -1))
    assert torch.equal(w[~mask], torch.zeros(int((~mask).sum()), dtype=w.dtype))
    torch.testing.assert_close(w.sum(-1), torch.tensor([1.0, 0.0, 1.0], dtype=w.dtype))


# ----------------------------------------------------------------- gradcheck (fp64)
def test_gradcheck_with_fully_masked_row():
    q = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 5, 2, dtype=torch.float64, requires_grad=True)
    mask = random_mask((2, 4, 5), 0.6) | causal_mask(4, 5)
    mask[0, 1] = False                       # a fully masked row
    mask[1, :, 3] = False                    # a masked key column

    def f(q, k, v):
        return scaled_dot_product_attention(q, k, v, mask)

    assert torch.autograd.gradcheck(f, (q, k, v))
    assert torch.autograd.gradgradcheck(f, (q, k, v))


def test_gradcheck_broadcast_batch_no_mask():
    q = torch.randn(2, 1, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(3, 5, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 3, 5, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v),
                                    (q, k, v))


# ----------------------------------------------------------------- fully masked rows, low precision
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fully_masked_rows_are_zero_and_nan_free(dtype):
    q = torch.randn(2, 3, 5, 8, dtype=dtype, requires_grad=True)
    k = torch.randn(2, 3, 6, 8, dtype=dtype, requires_grad=True)
    v = torch.randn(2, 3, 6, 4, dtype=dtype, requires_grad=True)
    mask = torch.ones(2, 1, 5, 6, dtype=torch.bool)
    mask[0, :, 2] = False                     # row 2 of batch 0: no key at all
    mask[1, :, :, 4:] = False                 # batch 1: keys 4, 5 are padding
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.dtype == weights.dtype == dtype
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert torch.equal(out[0, :, 2], torch.zeros_like(out[0, :, 2]))
    assert torch.equal(weights[0, :, 2], torch.zeros_like(weights[0, :, 2]))
    assert not weights[1, ..., 4:].any()
    out.float().square().sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all(), f"NaN/inf gradient in {dtype}"
    # no query reaches the fully masked row's query: its gradient is exactly zero
    assert torch.equal(q.grad[0, :, 2], torch.zeros_like(q.grad[0, :, 2]))
    assert torch.equal(v.grad[1, :, 4:], torch.zeros_like(v.grad[1, :, 4:]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_agrees_with_fp32(dtype):
    q, k, v = (torch.randn(2, 4, 7, 16).to(dtype) for _ in range(3))
    mask = random_mask((2, 1, 7, 7), 0.7) & causal_mask(7)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    out32, weights32 = scaled_dot_product_attention(q.float(), k.float(), v.float(), mask)
    torch.testing.assert_close(out.float(), out32, **LOW_TOL[dtype])
    torch.testing.assert_close(weights.float(), weights32, **LOW_TOL[dtype])


def test_fp16_masking_never_overflows():
    """Scores near fp16's limit with masks: the fill (finfo.min, not -inf nor -1e9, which is
    -inf in fp16) must keep every result finite, and fully masked rows zero."""
    assert torch.tensor(-1e9, dtype=torch.float16).isinf()          # why -1e9 is no good
    d = 4
    q = torch.full((1, 3, d), 120.0, dtype=torch.float16)
    k = torch.full((1, 5, d), 120.0, dtype=torch.float16)
    k[0, 1::2] *= -1                                                  # scores +-28800
    v = torch.randn(1, 5, 3).half()
    mask = torch.tensor([[True, True, False, True, False],
                         [False, True, False, True, True],
                         [False, False, False, False, False]])
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    exp_out, exp_w = naive_attention(q, k, v, mask)
    torch.testing.assert_close(weights.double(), exp_w, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(out.double(), exp_out, atol=1e-2, rtol=1e-2)
    assert torch.equal(out[0, 2], torch.zeros(3, dtype=torch.float16))
    # masked_softmax directly, with scores at +-60000 (finite in fp16)
    scores = torch.tensor([[6e4, -6e4, 6e4], [-6e4, -6e4, -6e4]], dtype=torch.float16)
    w = masked_softmax(scores, torch.tensor([[False, True, False], [False, False, False]]))
    assert torch.isfinite(w).all()
    torch.testing.assert_close(w.float(), torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))


# ----------------------------------------------------------------- dropout
def test_dropout_zeroes_or_rescales_weights():
    p = 0.5
    q, k = torch.randn(2, 6, 4, dtype=torch.float64), torch.randn(2, 6, 4, dtype=torch.float64)
    v = torch.eye(6, dtype=torch.float64).expand(2, 6, 6)     # output == dropped weights
    out, weights = scaled_dot_product_attention(q, k, v, dropout_p=p)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 6, dtype=torch.float64))
    kept = out != 0
    assert kept.any() and (~kept).any()
    torch.testing.assert_close(out[kept], weights[kept] / (1 - p))
    torch.manual_seed(1)
    a, _ = scaled_dot_product_attention(q, k, v, dropout_p=p)
    torch.manual_seed(1)
    b, _ = scaled_dot_product_attention(q, k, v, dropout_p=p)
    c, _ = scaled_dot_product_attention(q, k, v, dropout_p=p)
    assert torch.equal(a, b) and not torch.equal(b, c)
    d, _ = scaled_dot_product_attention(q, k, v, dropout_p=0.0)
    torch.testing.assert_close(d, weights)


def test_attention_scores_are_scaled_dot_products():
    q, k = torch.randn(2, 3, 4, 8, dtype=torch.float64), torch.randn(2, 3, 6, 8, dtype=torch.float64)
    expected = torch.einsum("bhqd,bhkd->bhqk", q, k) / 8 ** 0.5
    torch.testing.assert_close(solutions.attention_scores(q, k), expected)


def test_attention_entropy_bounds_and_zero_weights():
    uniform = torch.full((2, 3, 5), 0.2, dtype=torch.float64)
    torch.testing.assert_close(solutions.attention_entropy(uniform),
                               torch.full((2, 3), math.log(5), dtype=torch.float64))
    one_hot = torch.eye(4, dtype=torch.float64)            # 0 log 0 must count as 0, not NaN
    torch.testing.assert_close(solutions.attention_entropy(one_hot), torch.zeros(4, dtype=torch.float64))
