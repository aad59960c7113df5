"""Exact parameter and FLOP counts (seed 001's FAQ, seed 000's cost claim)."""
import pytest
import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from solutions import MultiHeadAttention, count_flops, count_parameters

PARAM_CONFIGS = [
    dict(d_model=16, num_heads=4),
    dict(d_model=512, num_heads=8),
    dict(d_model=24, num_heads=3, bias=False),
    dict(d_model=12, num_heads=2, query_size=5),
    dict(d_model=12, num_heads=4, key_size=7, value_size=9),
    dict(d_model=20, num_heads=5, query_size=3, key_size=4, value_size=6, bias=False),
    dict(d_model=7, num_heads=1),
]


@pytest.mark.parametrize("cfg", PARAM_CONFIGS, ids=str)
def test_count_parameters_equals_the_module(cfg):
    mha = MultiHeadAttention(**cfg, device="meta")      # meta: no memory for d_model=512
    assert count_parameters(**cfg) == sum(p.numel() for p in mha.parameters())


@pytest.mark.parametrize("d_model,num_heads", [(512, 8), (768, 12), (1024, 16), (64, 1),
                                               (12, 12)])
def test_default_count_is_4d2_plus_4d_for_any_num_heads(d_model, num_heads):
    assert count_parameters(d_model, num_heads) == 4 * d_model**2 + 4 * d_model
    assert count_parameters(d_model, num_heads, bias=False) == 4 * d_model**2
    assert count_parameters(512, 8) == 1_050_624         # Transformer base, one layer


@pytest.mark.parametrize("kw", [dict(), dict(kdim=5, vdim=9), dict(bias=False)], ids=str)
def test_count_parameters_equals_nn_multihead_attention(kw):
    m = nn.MultiheadAttention(16, 4, **kw)
    n = count_parameters(16, 4, key_size=kw.get("kdim"), value_size=kw.get("vdim"),
                         bias=kw.get("bias", True))
    assert n == sum(p.numel() for p in m.parameters())


def test_count_flops_by_stage():
    f = count_flops(2, 5, 16, 4, k_len=7, query_size=3, key_size=6, value_size=8)
    assert f["q_proj"] == 2 * 2 * 5 * 3 * 16
    assert f["k_proj"] == 2 * 2 * 7 * 6 * 16
    assert f["v_proj"] == 2 * 2 * 7 * 8 * 16
    assert f["scores"] == f["weighted_sum"] == 2 * 2 * 4 * 5 * 7 * 4
    assert f["out_proj"] == 2 * 2 * 5 * 16 * 16
    assert f["attention"] == f["scores"] + f["weighted_sum"] == 4 * 2 * 5 * 7 * 16
    assert f["total"] == sum(f[k] for k in ("q_proj", "k_proj", "v_proj", "attention",
                                            "out_proj"))
    assert f["per_head_attention"] * 4 == f["attention"]
    # self-attention defaults: k_len = q_len, sizes = d_model
    g = count_flops(1, 10, 8, 2)
    assert g["total"] == 4 * (2 * 10 * 8 * 8) + 4 * 10 * 10 * 8


@pytest.mark.parametrize("d_model", [64, 512])
def test_splitting_into_heads_does_not_lower_the_total(d_model):
    """Seed 000 claims heads cut the cost from O(L^2 d_model) to O(L^2 d_k): per head yes,
    in total no."""
    counts = {h: count_flops(2, 128, d_model, h) for h in (1, 2, 4, 8, 16)}
    totals = {h: c["total"] for h, c in counts.items()}
    attention = {h: c["attention"] for h, c in counts.items()}
    assert len(set(totals.values())) == 1 and len(set(attention.values())) == 1
    for h, c in counts.items():
        assert c["per_head_attention"] * h == c["attention"]
        assert c["per_head_attention"] == attention[1] // h       # 1/h of one big head


@pytest.mark.parametrize("cfg", [
    dict(batch=2, q_len=7, d_model=32, num_heads=4, k_len=9, key_size=24, value_size=40),
    dict(batch=3, q_len=5, d_model=16, num_heads=2),
    dict(batch=1, q_len=4, d_model=12, num_heads=3, k_len=6, query_size=5),
], ids=["cross", "self", "query_size"])
def test_count_flops_matches_torch_flop_counter(cfg):
    """torch.utils.flop_counter counts the matmuls of the readable path: the same total."""
    mha = MultiHeadAttention(cfg["d_model"], cfg["num_heads"], query_size=cfg.get("query_size"),
                             key_size=cfg.get("key_size"), value_size=cfg.get("value_size"))
    B, Lq = cfg["batch"], cfg["q_len"]
    Lk = cfg.get("k_len", Lq)
    q = torch.randn(B, Lq, mha.query_size)
    k, v = torch.randn(B, Lk, mha.key_size), torch.randn(B, Lk, mha.value_size)
    with FlopCounterMode(display=False) as counter:
        mha(q, k, v, need_weights=True)
    expected = count_flops(**cfg)
    assert counter.get_total_flops() == expected["total"]
    by_module = counter.get_flop_counts()
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        assert sum(by_module[f"MultiHeadAttention.{name}"].values()) == expected[name]
