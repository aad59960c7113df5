"""The same agreements and fully-masked-row checks on a GPU, in fp32, fp16 and bf16.

Skipped where torch.cuda.is_available() is False. To check these tests' own logic on a
machine without a GPU, run them on another device:
    COURSE_TEST_DEVICE=cpu python -m pytest tests/test_cuda.py
"""
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from mha_helpers import (LOW_TOL, every_row_has_a_key, naive_attention, random_mask, randomize_,
                         torch_mha_grads, our_grads)
from solutions import (MultiHeadAttention, causal_mask, padding_mask,
                       scaled_dot_product_attention, to_torch_attn_mask,
                       to_torch_key_padding_mask)

DEVICE = torch.device(os.environ.get("COURSE_TEST_DEVICE", "cuda"))
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(DEVICE.type == "cuda" and not torch.cuda.is_available(),
                       reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]
DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                                 ids=["fp32", "fp16", "bf16"])
PATHS = pytest.mark.parametrize("need_weights", [True, False], ids=["readable", "fast"])
# GPU kernels reorder sums: fp32 results agree to ~1e-6 relative, not bit for bit.
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), **LOW_TOL}


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE).to(dtype)


@DTYPES
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "padding+causal", "random"])
def test_sdpa_agrees_with_torch(dtype, mask_kind):
    q, k, v = randn(2, 4, 6, 16, dtype=dtype), randn(2, 4, 9, 16, dtype=dtype), \
        randn(2, 4, 9, 8, dtype=dtype)
    mask = None
    if "padding" in mask_kind:
        mask = padding_mask(torch.tensor([9, 5], device=DEVICE), 9)
    if "causal" in mask_kind:
        c = causal_mask(6, 9, device=DEVICE)
        mask = c if mask is None else mask & c
    if mask_kind == "random":
        mask = every_row_has_a_key(random_mask((2, 4, 6, 9), device=DEVICE))
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.device == q.device and out.dtype == dtype
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected, **TOL[dtype])
    exact_out, exact_w = naive_attention(q.double(), k.double(), v.double(), mask)
    torch.testing.assert_close(out.double(), exact_out, **TOL[dtype])
    torch.testing.assert_close(weights.double(), exact_w.expand_as(weights), **TOL[dtype])


@DTYPES
def test_sdpa_fully_masked_rows(dtype):
    q = randn(2, 3, 5, 8, dtype=dtype).requires_grad_()
    k = randn(2, 3, 6, 8, dtype=dtype).requires_grad_()
    v = randn(2, 3, 6, 4, dtype=dtype).requires_grad_()
    mask = torch.ones(2, 1, 5, 6, dtype=torch.bool, device=DEVICE)
    mask[0, :, 2] = False
    mask[1, :, :, 3:] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert not out[0, :, 2].any() and not weights[0, :, 2].any()
    assert not weights[1, ..., 3:].any()
    out.float().square().sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()


@DTYPES
@PATHS
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_mha_agrees_with_nn_multihead_attention(dtype, need_weights, cross):
    kdim = 12 if cross else None
    ref = nn.MultiheadAttention(32, 4, kdim=kdim, vdim=kdim, batch_first=True, device=DEVICE)
    randomize_(ref)
    ours = MultiHeadAttention.from_torch(ref)
    ref.to(dtype), ours.to(dtype)
    x = randn(3, 7, 32, dtype=dtype).requires_grad_()
    kv = randn(3, 9, 12, dtype=dtype).requires_grad_() if cross else x
    Lk = kv.shape[1]
    pad = padding_mask(torch.tensor([Lk, 4, 1], device=DEVICE), Lk)
    per_head = every_row_has_a_key(random_mask((3, 4, 7, Lk), device=DEVICE) & pad)
    cases = [
        (None, {}),
        (pad & causal_mask(7, Lk, device=DEVICE),
         dict(key_padding_mask=to_torch_key_padding_mask(pad),
              attn_mask=to_torch_attn_mask(causal_mask(7, Lk, device=DEVICE)))),
        (per_head, dict(attn_mask=to_torch_attn_mask(per_head))),
    ]
    for mask, kwargs in cases:
        ours.zero_grad(), ref.zero_grad()
        out, w = ours(x, kv, kv, mask=mask, need_weights=need_weights)
        expected, expected_w = ref(x, kv, kv, need_weights=need_weights,
                                   average_attn_weights=False, **kwargs)
        assert out.device == x.device and out.dtype == dtype
        torch.testing.assert_close(out, expected, **TOL[dtype])
        if need_weights:
            torch.testing.assert_close(w, expected_w, **TOL[dtype])
        if dtype == torch.float32:
            g = torch.randn_like(out)
            (out * g).sum().backward()
            (expected * g).sum().backward()
            theirs = torch_mha_grads(ref)
            for name, grad in our_grads(ours).items():
                torch.testing.assert_close(grad, theirs[name], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@PATHS
def test_mha_low_precision_agrees_with_fp32(dtype, need_weights):
    low = randomize_(MultiHeadAttention(32, 4, device=DEVICE)).to(dtype)
    full = MultiHeadAttention(32, 4, device=DEVICE)
    full.load_state_dict({k: v.float() for k, v in low.state_dict().items()})
    x = randn(2, 9, 32, dtype=dtype)
    mask = padding_mask(torch.tensor([9, 6], device=DEVICE), 9) & causal_mask(9, device=DEVICE)
    out, _ = low(x, x, x, mask=mask, need_weights=need_weights)
    out32, _ = full(x.float(), x.float(), x.float(), mask=mask, need_weights=need_weights)
    torch.testing.assert_close(out.float(), out32, **LOW_TOL[dtype])


@DTYPES
@PATHS
def test_mha_fully_masked_rows(dtype, need_weights):
    mha = randomize_(MultiHeadAttention(16, 4, bias=False, device=DEVICE)).to(dtype)
    x = randn(2, 5, 16, dtype=dtype).requires_grad_()
    mask = torch.ones(2, 4, 5, 5, dtype=torch.bool, device=DEVICE)
    mask[0, :, 3] = False
    mask[1] = False                                   # batch element 1: nothing at all
    out, w = mha(x, x, x, mask=mask, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert not out[0, 3].any() and not out[1].any()
    if need_weights:
        assert not w[0, :, 3].any() and not w[1].any()
    out.float().square().sum().backward()
    assert torch.isfinite(x.grad).all()
    for name, p in mha.named_parameters():
        assert torch.isfinite(p.grad).all(), name


@PATHS
def test_mha_padding_invariance(need_weights):
    mha = randomize_(MultiHeadAttention(16, 4, device=DEVICE))
    x = randn(2, 6, 16)
    mask = padding_mask(torch.tensor([6, 3], device=DEVICE), 6)
    out, _ = mha(x, x, x, mask=mask, need_weights=need_weights)
    x2 = x.clone()
    x2[1, 3:] = 1000 * randn(3, 16)
    out2, _ = mha(x2, x2, x2, mask=mask, need_weights=need_weights)
    torch.testing.assert_close(out2[0], out[0])
    torch.testing.assert_close(out2[1, :3], out[1, :3], atol=1e-5, rtol=1e-5)


def test_fp16_large_scores_stay_finite():
    q = torch.full((1, 3, 4), 120.0, device=DEVICE).half()
    k = torch.full((1, 5, 4), 120.0, device=DEVICE).half()
    k[0, 1::2] *= -1
    v = randn(1, 5, 3, dtype=torch.float16)
    mask = torch.tensor([[1, 1, 0, 1, 0], [0, 1, 0, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool,
                        device=DEVICE)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert not out[0, 2].any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_device_result_equals_cpu_result(dtype):
    mha_cpu = randomize_(MultiHeadAttention(16, 4, dtype=dtype))
    mha_dev = MultiHeadAttention(16, 4, dtype=dtype, device=DEVICE)
    mha_dev.load_state_dict(mha_cpu.state_dict())
    x = torch.randn(2, 5, 16, dtype=dtype)
    mask = padding_mask([5, 2], 5) & causal_mask(5)
    for need_weights in (True, False):
        a, _ = mha_cpu(x, x, x, mask=mask, need_weights=need_weights)
        b, _ = mha_dev(x.to(DEVICE), x.to(DEVICE), x.to(DEVICE), mask=mask.to(DEVICE),
                       need_weights=need_weights)
        tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else {}
        torch.testing.assert_close(b.cpu(), a, **tol)


def test_gradcheck_on_device():
    mha = randomize_(MultiHeadAttention(6, 2, dtype=torch.float64, device=DEVICE))
    mask = every_row_has_a_key(random_mask((1, 2, 3, 3), device=DEVICE))
    mask[0, 1, 0] = False
    for need_weights in (True, False):
        x = torch.randn(1, 3, 6, dtype=torch.float64, device=DEVICE, requires_grad=True)
        assert torch.autograd.gradcheck(
            lambda x: mha(x, x, x, mask=mask, need_weights=need_weights)[0], (x,))


@pytest.mark.skipif(DEVICE.type == "cpu", reason="needs a second device")
def test_mismatched_devices_are_refused():
    x = randn(2, 3, 8)
    with pytest.raises(ValueError, match=r"mask is on cpu but the inputs are on cuda"):
        scaled_dot_product_attention(x, x, x, torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key is on cpu but query is on cuda"):
        scaled_dot_product_attention(x, x.cpu(), x)
    with pytest.raises(ValueError, match=r"parameters is on cpu but query is on cuda"):
        MultiHeadAttention(8, 2)(x, x, x)
    with pytest.raises(ValueError, match=r"head_mask is on cpu but query is on cuda"):
        MultiHeadAttention(8, 2, device=DEVICE)(x, x, x, head_mask=torch.ones(2))
