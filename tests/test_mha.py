"""Chapter 3: MultiHeadAttention against nn.MultiheadAttention, on both forward paths.

need_weights=True is the readable path (split_heads, our scaled_dot_product_attention,
merge_heads); need_weights=False is the fast path (fused projections and
F.scaled_dot_product_attention). Both must agree with torch, with each other, with the
per-head loop of the papers, and keep fully masked rows at zero without NaN.
"""
import copy

import pytest
import torch
import torch.nn as nn
from hypothesis import given
from hypothesis import strategies as st

from mha_helpers import (LOW_TOL, TOL, every_row_has_a_key, loop_mha, our_grads, random_mask,
                         randomize_, torch_mha_grads, torch_pair)
from solutions import (MultiHeadAttention, causal_mask, padding_mask, to_torch_attn_mask,
                       to_torch_key_padding_mask)

PATHS = pytest.mark.parametrize("need_weights", [True, False], ids=["readable", "fast"])

# Each config: nn.MultiheadAttention arguments, and which inputs are the same tensor.
CONFIGS = {
    "self-16x4": dict(d_model=16, num_heads=4, inputs="self"),
    "self-24x3": dict(d_model=24, num_heads=3, inputs="self"),
    "self-8x1": dict(d_model=8, num_heads=1, inputs="self"),
    "self-16x16": dict(d_model=16, num_heads=16, inputs="self"),
    "self-nobias": dict(d_model=12, num_heads=3, bias=False, inputs="self"),
    "cross-kv-same-tensor": dict(d_model=16, num_heads=4, inputs="kv"),
    "cross-distinct": dict(d_model=16, num_heads=4, inputs="distinct"),
    "cross-kdim-vdim": dict(d_model=16, num_heads=4, kdim=12, vdim=20, inputs="distinct"),
    "cross-kdim-nobias": dict(d_model=12, num_heads=2, kdim=5, vdim=7, bias=False,
                              inputs="distinct"),
}
GRAD_TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float64: dict(atol=1e-11, rtol=1e-11)}
OUT_TOL = {torch.float32: dict(atol=1e-6, rtol=1e-6), torch.float64: dict(atol=1e-12, rtol=1e-12)}


def make_inputs(cfg, B=3, Lq=5, Lk=7, dtype=torch.float32, requires_grad=False):
    """query, key, value for a config; `self` uses one tensor three times (the fused path)."""
    d = cfg["d_model"]
    x = torch.randn(B, Lq, d, dtype=dtype, requires_grad=requires_grad)
    if cfg["inputs"] == "self":
        return x, x, x
    kv = torch.randn(B, Lk, d, dtype=dtype, requires_grad=requires_grad)
    if cfg["inputs"] == "kv":
        return x, kv, kv
    k = torch.randn(B, Lk, cfg.get("kdim") or d, dtype=dtype, requires_grad=requires_grad)
    v = torch.randn(B, Lk, cfg.get("vdim") or d, dtype=dtype, requires_grad=requires_grad)
    return x, k, v


def masks_for(B, h, Lq, Lk):
    """(name, our mask, nn.MHA kwargs); no row is fully masked (nn.MHA would give NaN)."""
    lengths = torch.randint(1, Lk + 1, (B,))
    lengths[0] = Lk
    pad = padding_mask(lengths, Lk)                                   # (B, 1, 1, Lk)
    causal = causal_mask(Lq, Lk)                                      # (Lq, Lk)
    per_head = every_row_has_a_key(random_mask((B, h, Lq, Lk), 0.5))  # (B, h, Lq, Lk)
    per_head_pad = every_row_has_a_key(per_head & pad)   # key 0 is never padding
    kpm, causal_t = to_torch_key_padding_mask(pad), to_torch_attn_mask(causal)
    return [
        ("none", None, {}),
        ("padding", pad, dict(key_padding_mask=kpm)),
        ("causal", causal, dict(attn_mask=causal_t)),
        ("padding+causal", pad & causal, dict(key_padding_mask=kpm, attn_mask=causal_t)),
        ("per-head", per_head, dict(attn_mask=to_torch_attn_mask(per_head))),
        ("per-head+padding", per_head_pad,     # both kinds together, as nn.MHA takes them
         dict(attn_mask=to_torch_attn_mask(per_head_pad), key_padding_mask=kpm)),
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@PATHS
@pytest.mark.parametrize("name", list(CONFIGS))
def test_agrees_with_nn_multihead_attention(name, need_weights, dtype):
    cfg = CONFIGS[name]
    ref, ours = torch_pair(cfg["d_model"], cfg["num_heads"], kdim=cfg.get("kdim"),
                           vdim=cfg.get("vdim"), bias=cfg.get("bias", True), dtype=dtype)
    B, h = 3, cfg["num_heads"]
    query, key, value = make_inputs(cfg, B=B, dtype=dtype, requires_grad=True)
    Lq, Lk = query.shape[1], key.shape[1]
    for mask_name, mask, torch_kwargs in masks_for(B, h, Lq, Lk):
        ours.zero_grad(), ref.zero_grad()
        out, weights = ours(query, key, value, mask=mask, need_weights=need_weights)
        expected, expected_weights = ref(query, key, value, need_weights=need_weights,
                                         average_attn_weights=False, **torch_kwargs)
        assert out.shape == (B, Lq, cfg["d_model"]) and out.dtype == dtype
        torch.testing.assert_close(out, expected, **OUT_TOL[dtype], msg=lambda m: f"{mask_name}: {m}")
        if need_weights:
            assert weights.shape == (B, h, Lq, Lk)
            torch.testing.assert_close(weights, expected_weights, **OUT_TOL[dtype])
            averaged = ref(query, key, value, **torch_kwargs)[1]             # (B, Lq, Lk)
            torch.testing.assert_close(weights.mean(1), averaged, **OUT_TOL[dtype])
        else:
            assert weights is None

        # gradients of every parameter and every input
        g = torch.randn_like(out)
        inputs = tuple({id(t): t for t in (query, key, value)}.values())
        ours_in = torch.autograd.grad((out * g).sum(), inputs + tuple(ours.parameters()))
        ref_in = torch.autograd.grad((expected * g).sum(), inputs + tuple(ref.parameters()),
                                     allow_unused=True)
        for a, b in zip(ours_in[:len(inputs)], ref_in[:len(inputs)]):
            torch.testing.assert_close(a, b, **GRAD_TOL[dtype])
        for p, gp in zip(ours.parameters(), ours_in[len(inputs):]):
            p.grad = gp
        for p, gp in zip(ref.parameters(), ref_in[len(inputs):]):
            p.grad = gp
        theirs = torch_mha_grads(ref)
        for pname, grad in our_grads(ours).items():
            torch.testing.assert_close(grad, theirs[pname], **GRAD_TOL[dtype],
                                       msg=lambda m: f"{mask_name}, {pname}: {m}")


def test_readable_and_fast_paths_agree():
    mha = randomize_(MultiHeadAttention(16, 4, key_size=6, value_size=10))
    q, k, v = torch.randn(2, 5, 16), torch.randn(2, 8, 6), torch.randn(2, 8, 10)
    mask = every_row_has_a_key(random_mask((2, 4, 5, 8)))
    a, _ = mha(q, k, v, mask=mask, need_weights=True)
    b, _ = mha(q, k, v, mask=mask, need_weights=False)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


@st.composite
def mha_cases(draw):
    h, hd = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    inputs = draw(st.sampled_from(["self", "kv", "distinct"]))
    B, Lq, Lk = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
    Lk = Lq if inputs == "self" else Lk
    full = [B, h, Lq, Lk]
    mask_shape = full[draw(st.integers(0, 4)):]                   # drop leading axes ...
    mask_shape = [1 if draw(st.booleans()) else n for n in mask_shape]   # ... and broadcast
    return dict(h=h, hd=hd, B=B, Lq=Lq, Lk=Lk, mask_shape=mask_shape, inputs=inputs,
                use_mask=draw(st.booleans()), bias=draw(st.booleans()),
                key_size=draw(st.sampled_from([None, 3])), seed=draw(st.integers(0, 2**31 - 1)))


@given(mha_cases())
def test_both_paths_equal_the_per_head_loop_for_any_mask_shape(c):
    """Any mask that broadcasts to (B, h, Lq, Lk) -- fully masked rows included."""
    torch.manual_seed(c["seed"])
    d = c["h"] * c["hd"]
    key_size = c["key_size"] if c["inputs"] == "distinct" else None
    mha = randomize_(MultiHeadAttention(d, c["h"], key_size=key_size, value_size=key_size,
                                        bias=c["bias"], dtype=torch.float64))
    if c["inputs"] == "self":
        q = k = v = torch.randn(c["B"], c["Lq"], d, dtype=torch.float64)
    elif c["inputs"] == "kv":
        q = torch.randn(c["B"], c["Lq"], d, dtype=torch.float64)
        k = v = torch.randn(c["B"], c["Lk"], d, dtype=torch.float64)
    else:
        q = torch.randn(c["B"], c["Lq"], d, dtype=torch.float64)
        k = torch.randn(c["B"], c["Lk"], mha.key_size, dtype=torch.float64)
        v = torch.randn(c["B"], c["Lk"], mha.value_size, dtype=torch.float64)
    if c["use_mask"]:
        mask = random_mask(c["mask_shape"], 0.6)
    else:
        mask = None
    expected, expected_weights = loop_mha(mha, q, k, v, mask=mask)
    for need_weights in (True, False):
        out, weights = mha(q, k, v, mask=mask, need_weights=need_weights)
        torch.testing.assert_close(out, expected, **TOL[torch.float64])
        if need_weights:
            torch.testing.assert_close(weights, expected_weights, **TOL[torch.float64])


# ----------------------------------------------------------------- fully masked rows
@PATHS
@pytest.mark.parametrize("bias", [True, False])
def test_fully_masked_rows_zeros_where_torch_gives_nan(need_weights, bias):
    ref, ours = torch_pair(8, 2, bias=bias)
    x = torch.randn(2, 4, 8, requires_grad=True)
    kpm = torch.tensor([[False, False, True, True], [True, True, True, True]])  # b1: all pad
    # nn.MHA's own result on the fully masked batch element depends on its path and
    # version (NaN with need_weights=True in torch 2.13): compare only where it is finite.
    expected, _ = ref(x, x, x, key_padding_mask=kpm, need_weights=need_weights)
    out, weights = ours(x, x, x, mask=~kpm[:, None, None, :], need_weights=need_weights)
    finite = torch.isfinite(expected)
    assert finite[0].all()
    torch.testing.assert_close(out[finite], expected[finite], **OUT_TOL[torch.float32])
    # a fully masked row: zero attention, so the output is out_proj(0) = its bias (or 0)
    row = torch.zeros(4, 8) if not bias else ours.out_proj.bias.detach().expand(4, 8)
    assert torch.equal(out[1], row)
    if need_weights:
        assert torch.equal(weights[1], torch.zeros(2, 4, 4))
    out.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    for name, p in ours.named_parameters():
        assert torch.isfinite(p.grad).all(), name


@PATHS
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fully_masked_rows_in_low_precision(need_weights, dtype):
    mha = randomize_(MultiHeadAttention(16, 4, bias=False, dtype=dtype))
    x = torch.randn(2, 5, 16, dtype=dtype, requires_grad=True)
    mask = torch.ones(2, 4, 5, 5, dtype=torch.bool)
    mask[0, :, 3] = False            # query 3 of batch 0 sees no key, in every head
    mask[1, 2] = False               # head 2 of batch 1 sees nothing at all
    mask &= causal_mask(5)
    out, weights = mha(x, x, x, mask=mask, need_weights=need_weights)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert torch.equal(out[0, 3], torch.zeros(16, dtype=dtype))
    if need_weights:
        assert torch.equal(weights[0, :, 3], torch.zeros(4, 5, dtype=dtype))
        assert torch.equal(weights[1, 2], torch.zeros(5, 5, dtype=dtype))
    # head 2 of batch 1 contributes nothing: equal to gating it off
    gate = torch.ones(2, 4, dtype=dtype)
    gate[1, 2] = 0
    unmasked_head = mask.clone()
    unmasked_head[1, 2] = causal_mask(5)
    gated, _ = mha(x, x, x, mask=unmasked_head, head_mask=gate, need_weights=need_weights)
    torch.testing.assert_close(out[1], gated[1], **(LOW_TOL.get(dtype) or TOL[dtype]))
    out.float().square().sum().backward()
    assert torch.isfinite(x.grad).all()
    for name, p in mha.named_parameters():
        assert torch.isfinite(p.grad).all(), f"{name} in {dtype}"


@PATHS
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_agrees_with_fp32(need_weights, dtype):
    low = randomize_(MultiHeadAttention(32, 4, dtype=dtype))
    full = copy.deepcopy(low).float()                 # the same (rounded) weights in fp32
    x = torch.randn(2, 9, 32).to(dtype)
    mask = padding_mask([9, 6], 9) & causal_mask(9)
    out, w = low(x, x, x, mask=mask, need_weights=need_weights)
    out32, w32 = full(x.float(), x.float(), x.float(), mask=mask, need_weights=need_weights)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), out32, **LOW_TOL[dtype])
    if need_weights:
        torch.testing.assert_close(w.float(), w32, **LOW_TOL[dtype])


def test_fp16_large_scores_with_masks_stay_finite():
    """Scores of about +-2e4 (finite in fp16) with masks, on both paths."""
    mha = MultiHeadAttention(4, 1, bias=False, dtype=torch.float16)
    with torch.no_grad():
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.weight.copy_(torch.eye(4))
    x = torch.full((1, 4, 4), 100.0, dtype=torch.float16)
    x[0, 1::2] *= -1                                  # scores +-100*100*4/2 = +-2e4
    mask = torch.tensor([[1, 0, 1, 0], [0, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    expected, _ = mha.double()(x.double(), x.double(), x.double(), mask=mask)
    mha.half()
    for need_weights in (True, False):
        out, _ = mha(x, x, x, mask=mask, need_weights=need_weights)
        assert torch.isfinite(out).all(), need_weights
        torch.testing.assert_close(out.double(), expected, atol=0.5, rtol=1e-2)
        assert torch.equal(out[0, 2], torch.zeros(4, dtype=torch.float16))


# ----------------------------------------------------------------- gradcheck (fp64)
@PATHS
@pytest.mark.parametrize("inputs", ["self", "kv", "distinct"])
def test_gradcheck(need_weights, inputs):
    torch.manual_seed(1)
    cfg = dict(d_model=6, num_heads=2, inputs=inputs)
    kdim = 4 if inputs == "distinct" else None
    mha = randomize_(MultiHeadAttention(6, 2, key_size=kdim, value_size=kdim,
                                        dtype=torch.float64))
    cfg["kdim"] = cfg["vdim"] = kdim
    query, key, value = make_inputs(cfg, B=2, Lq=3, Lk=4, dtype=torch.float64)
    Lk = key.shape[1]
    mask = every_row_has_a_key(random_mask((2, 2, 3, Lk), 0.6))
    mask[1, 0, 2] = False                                   # one fully masked row
    names = [n for n, _ in mha.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in mha.parameters())

    def f(*args):
        if inputs == "self":
            q = k = v = args[0]
        elif inputs == "kv":
            q, k = args[:2]
            v = k
        else:
            q, k, v = args[:3]
        n_in = {"self": 1, "kv": 2, "distinct": 3}[inputs]
        state = dict(zip(names, args[n_in:]))
        out, _ = torch.func.functional_call(mha, state, (q, k, v),
                                            dict(mask=mask, need_weights=need_weights))
        return out

    unique = {"self": (query,), "kv": (query, key), "distinct": (query, key, value)}[inputs]
    args = tuple(t.detach().clone().requires_grad_() for t in unique) + params
    assert torch.autograd.gradcheck(f, args)


@PATHS
def test_gradcheck_full_jacobian_inputs(need_weights):
    """Every entry of the input Jacobian (gradcheck's default mode), cross-attention."""
    mha = randomize_(MultiHeadAttention(4, 2, key_size=3, value_size=5, dtype=torch.float64))
    q = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 4, 5, dtype=torch.float64, requires_grad=True)
    mask = padding_mask([4, 2], 4) & causal_mask(3, 4)
    mask = mask.expand(2, 2, 3, 4).clone()
    mask[0, 1, 0] = False                                   # one fully masked row
    assert torch.autograd.gradcheck(
        lambda q, k, v: mha(q, k, v, mask=mask, need_weights=need_weights)[0], (q, k, v))


# ----------------------------------------------------------------- from_torch / to_torch
@pytest.mark.parametrize("kw", [dict(), dict(kdim=5, vdim=7), dict(bias=False)], ids=str)
def test_to_torch_round_trip(kw):
    ours = randomize_(MultiHeadAttention(12, 3, key_size=kw.get("kdim"),
                                         value_size=kw.get("vdim"), bias=kw.get("bias", True)))
    m = ours.to_torch()
    assert isinstance(m, nn.MultiheadAttention) and m.batch_first
    assert m.embed_dim == 12 and m.num_heads == 3 and m.kdim == ours.key_size
    q = torch.randn(2, 4, 12)
    k, v = torch.randn(2, 6, ours.key_size), torch.randn(2, 6, ours.value_size)
    for need_weights in (True, False):
        torch.testing.assert_close(ours(q, k, v, need_weights=need_weights)[0],
                                   m(q, k, v, need_weights=need_weights)[0],
                                   **OUT_TOL[torch.float32])
    back = MultiHeadAttention.from_torch(m)
    assert back.state_dict().keys() == ours.state_dict().keys()
    for key_, t in ours.state_dict().items():
        assert torch.equal(back.state_dict()[key_], t), key_


def test_from_torch_of_a_sequence_first_module():
    ref = randomize_(nn.MultiheadAttention(8, 2, kdim=3, vdim=5))     # batch_first=False
    ours = MultiHeadAttention.from_torch(ref)
    q, k, v = torch.randn(6, 2, 8), torch.randn(4, 2, 3), torch.randn(4, 2, 5)   # (L, B, .)
    kpm = torch.tensor([[False, False, True, True], [False] * 4])
    expected, expected_w = ref(q, k, v, key_padding_mask=kpm, average_attn_weights=False)
    for need_weights in (True, False):
        out, w = ours(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                      mask=~kpm[:, None, None, :], need_weights=need_weights)
        torch.testing.assert_close(out.transpose(0, 1), expected, **OUT_TOL[torch.float32])
        if need_weights:
            torch.testing.assert_close(w, expected_w, **OUT_TOL[torch.float32])


def test_from_torch_keeps_dtype_mode_and_dropout():
    ref = nn.MultiheadAttention(8, 2, dropout=0.25, batch_first=True, dtype=torch.float64).eval()
    ours = MultiHeadAttention.from_torch(ref)
    assert ours.q_proj.weight.dtype == torch.float64
    assert not ours.training and ours.dropout == 0.25
    assert MultiHeadAttention.from_torch(ref.train()).training
    assert ours.to_torch().dropout == 0.25


# ----------------------------------------------------------------- dropout
@PATHS
def test_dropout_random_in_training_deterministic_in_eval(need_weights):
    mha = randomize_(MultiHeadAttention(16, 4, dropout=0.5))
    plain = MultiHeadAttention(16, 4, dropout=0.0)
    plain.load_state_dict(mha.state_dict())
    x = torch.randn(2, 6, 16)
    mask = causal_mask(6)
    mha.train()
    a, wa = mha(x, x, x, mask=mask, need_weights=need_weights)
    b, _ = mha(x, x, x, mask=mask, need_weights=need_weights)
    assert not torch.allclose(a, b), "dropout in training mode changed nothing"
    torch.manual_seed(7)
    c, _ = mha(x, x, x, mask=mask, need_weights=need_weights)
    torch.manual_seed(7)
    d, _ = mha(x, x, x, mask=mask, need_weights=need_weights)
    assert torch.equal(c, d)
    if need_weights:     # the returned weights are the probabilities before dropout
        torch.testing.assert_close(wa.sum(-1), torch.ones(2, 4, 6))
    mha.eval()
    e, _ = mha(x, x, x, mask=mask, need_weights=need_weights)
    f, _ = mha(x, x, x, mask=mask, need_weights=need_weights)
    assert torch.equal(e, f)
    torch.testing.assert_close(e, plain(x, x, x, mask=mask, need_weights=need_weights)[0])


def test_dropout_in_eval_matches_torch():
    ref, ours = torch_pair(8, 2, dropout=0.3)
    ref.eval(), ours.eval()
    x = torch.randn(2, 5, 8, requires_grad=True)
    for need_weights in (True, False):
        torch.testing.assert_close(ours(x, x, x, need_weights=need_weights)[0],
                                   ref(x, x, x, need_weights=need_weights)[0],
                                   **OUT_TOL[torch.float32])


def test_default_initialisation():
    mha = MultiHeadAttention(32, 4)
    for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
        bound = (6 / (proj.in_features + proj.out_features)) ** 0.5     # xavier_uniform
        assert proj.weight.abs().max() <= bound and proj.weight.std() > bound / 3
        assert torch.equal(proj.bias, torch.zeros_like(proj.bias))
    assert "num_heads=4" in repr(mha) and "head_dim=8" in repr(mha)
