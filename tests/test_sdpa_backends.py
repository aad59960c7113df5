"""Chapter 6's fast paths (solutions.sdpa_backends): every backend of
F.scaled_dot_product_attention forced in turn on the device, each one either runs and agrees
with the formula or is reported with PyTorch's own reason; and the recorded GPU table.

The device tests run on the CPU here and, where torch.cuda.is_available(), on CUDA too
(marked cuda, as tests/test_cuda.py is).
"""
import json
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right
from torch.profiler import profile

from solutions.attention import scaled_dot_product_attention
from solutions.kv import decoding_causal_mask, repeat_kv
from solutions.masks import causal_mask
from solutions.sdpa_backends import (BACKENDS, HEADINGS, RECORDED, Attempt, conditions,
                                     default_backend, load_recorded, measure_dtype, probe,
                                     recorded_rows, refusal_reason, report_probe, run_forced,
                                     time_backends, timed_lengths)

REPO = Path(__file__).resolve().parent.parent
DEVICES = ["cpu", pytest.param("cuda", marks=[
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA GPU (torch.cuda.is_available() is False)")])]


def pytorch_says(backend, q, k, v, **kwargs):
    """What PyTorch itself reports for `backend` forced on this call, gathered here without
    the module: (ran, [warning texts], error text or None)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v, **kwargs)
            error = None
        except RuntimeError as e:
            error = str(e)
    return error is None, [str(w.message) for w in caught], error


def formula(q, k, v, is_causal=False, attn_mask=None, enable_gqa=False, dropout_p=0.0):
    """The attention the call computes, in float64 with the course's own functions."""
    q, k, v = (t.double() for t in (q, k, v))
    if enable_gqa:
        k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device) if is_causal else attn_mask
    return scaled_dot_product_attention(q, k, v, mask)[0]


# ------------------------------------------------------------------ every backend forced
@pytest.mark.parametrize("device", DEVICES)
def test_each_forced_backend_runs_right_or_is_reported_with_pytorchs_reason(device):
    results = probe(device)
    cases = conditions(device)
    report = report_probe(results)
    assert set(results) == set(cases)
    for name, attempts in results.items():
        (q, k, v), kwargs = cases[name]
        assert [a.backend for a in attempts] == list(BACKENDS)
        for attempt in attempts:
            ran, warned, error = pytorch_says(attempt.backend, q, k, v, **kwargs)
            assert (attempt.reason is None) == ran, (name, attempt.backend, attempt.reason)
            if ran:
                assert attempt.output.shape == q.shape
                if not kwargs.get("dropout_p"):
                    tol = 1e-4 if q.dtype == torch.float32 else 3e-2
                    torch.testing.assert_close(attempt.output.double(), formula(q, k, v, **kwargs),
                                               atol=tol, rtol=tol)
                continue
            # the reason is PyTorch's: its warnings naming the failed conditions, or, where it
            # warns none, the error it raised
            conditions_warned = [w.split(" (Triggered internally")[0].strip() for w in warned
                                 if w.split(" (Triggered")[0].strip() not in HEADINGS.values()]
            if conditions_warned:
                assert any(c in attempt.reason for c in conditions_warned), (attempt, warned)
                assert all(part in " ".join(warned) for part in attempt.reason.split(". ")), \
                    (attempt, warned)
            else:
                assert attempt.reason == error
            assert attempt.backend.name in report                     # and its reason, wrapped
            assert " ".join(attempt.reason.split()) in " ".join(report.split())


def test_on_the_cpu_flash_and_math_run_and_the_cuda_backends_refuse():
    results = probe("cpu")
    dropout = next(name for name in results if "dropout" in name)
    for name, attempts in results.items():
        by_backend = {a.backend: a for a in attempts}
        assert by_backend[SDPBackend.MATH].reason is None
        for cuda_only in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
            assert "No viable backend" in by_backend[cuda_only].reason, name
        flash = by_backend[SDPBackend.FLASH_ATTENTION]
        if name == dropout:    # CPU flash refuses dropout, and its warning says so
            assert flash.reason == "Both fused kernels do not support non-zero dropout."
        else:
            assert flash.reason is None, (name, flash.reason)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_flash_and_cudnn_refuse_float32_for_its_dtype():
    # recorded on the H200 with torch 2.11 (chapters/data/sdpa_backends_h200.json)
    attempts = {a.backend: a for a in probe("cuda")["float32"]}
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        assert attempts[backend].reason is not None and "dtype" in attempts[backend].reason
    assert measure_dtype("cuda") == torch.bfloat16
    bf16 = {a.backend: a for a in probe("cuda")["bfloat16"]}
    assert bf16[SDPBackend.FLASH_ATTENTION].reason is None


def test_refusal_reason_keeps_the_forced_backends_section():
    # a CUDA refusal warns every backend's heading, then its conditions (sdp_utils.cpp)
    warned = [HEADINGS[SDPBackend.EFFICIENT_ATTENTION],
              "Memory efficient attention has been runtime disabled.",
              HEADINGS[SDPBackend.FLASH_ATTENTION] + " (Triggered internally at x.cpp:1.)",
              "Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query "
              "dtype: float (Triggered internally at sdp_utils_cpp.h:2.)",
              HEADINGS[SDPBackend.CUDNN_ATTENTION], "cuDNN attention has been runtime disabled."]
    error = RuntimeError("No available kernel. Aborting execution.")
    assert refusal_reason(SDPBackend.FLASH_ATTENTION, warned, error) == (
        "Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: "
        "float")
    assert refusal_reason(SDPBackend.CUDNN_ATTENTION, warned, error) == (
        "cuDNN attention has been runtime disabled.")
    assert refusal_reason(SDPBackend.EFFICIENT_ATTENTION, [], error) == str(error)


def test_math_copies_grouped_keys_and_values_cpu_flash_reads_them_in_place():
    q, k, v = (torch.randn(1, h, 32, 16) for h in (8, 2, 2))
    ops = {}
    for backend in (SDPBackend.MATH, SDPBackend.FLASH_ATTENTION):
        with profile() as prof, sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        ops[backend] = {event.name for event in prof.events()}
    assert "aten::repeat_interleave" in ops[SDPBackend.MATH]
    assert "aten::repeat_interleave" not in ops[SDPBackend.FLASH_ATTENTION]
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in ops[SDPBackend.FLASH_ATTENTION]


def test_is_causal_is_aligned_top_left_and_causal_lower_right_bottom_right():
    q, k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8)
    top_left = scaled_dot_product_attention(q, k, v, causal_mask(3, 7))[0]
    bottom_right = scaled_dot_product_attention(q, k, v, decoding_causal_mask(3, 7))[0]
    for backend in (SDPBackend.MATH, SDPBackend.FLASH_ATTENTION):
        with sdpa_kernel(backend):
            causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            lower_right = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(3, 7))
        torch.testing.assert_close(causal, top_left)
        torch.testing.assert_close(lower_right, bottom_right)
        assert not torch.allclose(causal, bottom_right)


def test_priority_order_and_the_default_choice_on_the_cpu():
    order = [SDPBackend(b) for b in torch._C._get_sdp_priority_order()]
    assert order[:4] == [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                         SDPBackend.MATH, SDPBackend.CUDNN_ATTENTION]
    assert list(BACKENDS) == order[:4]
    (q, k, v), kwargs = conditions("cpu")["float32, 2 KV heads, enable_gqa"]
    assert default_backend(q, k, v, **kwargs) == SDPBackend.FLASH_ATTENTION
    assert default_backend(q, k, v, dropout_p=0.25, **kwargs) == SDPBackend.MATH


def test_measure_dtype_is_one_every_backend_of_the_device_takes():
    assert measure_dtype("cpu") == torch.float32
    assert measure_dtype(torch.device("cuda", 0)) == torch.bfloat16


@pytest.mark.parametrize("device", DEVICES)
def test_time_backends_times_what_runs_and_keeps_the_reasons(device):
    seen = []

    def own(q, k, v):
        seen.append(q.dtype)
        return formula(q, k, v, is_causal=True, enable_gqa=True)

    rows, picked = time_backends(device, [16, 32], own, repeats=1)
    assert seen and set(seen) == {measure_dtype(device)}
    assert {"chapter 4", "default", "MATH"} <= set(rows)
    refused = {name for name, row in rows.items() if isinstance(row, str)}
    assert set(rows) == {"chapter 4", "default"} | {b.name for b in BACKENDS}
    for name, row in rows.items():
        if name not in refused:
            assert len(row) == 2 and all(ms > 0 for ms, _ in row), name
    if device == "cpu":
        assert refused == {"EFFICIENT_ATTENTION", "CUDNN_ATTENTION"}
        assert picked == SDPBackend.FLASH_ATTENTION
    assert isinstance(run_forced(SDPBackend.MATH, *conditions(device)["float32"][0]), Attempt)


# ------------------------------------------------------------------ the recorded GPU table
def test_recorded_table_is_complete_and_carries_its_provenance():
    recorded = load_recorded()
    assert recorded == load_recorded(RECORDED) == json.loads(RECORDED.read_text())
    provenance = recorded["provenance"]
    assert provenance["gpu"] == "NVIDIA H200" and provenance["torch"].startswith("2.11.0")
    assert provenance["date"] == "2026-11-26" and provenance["cuda"] == "13.0"
    assert recorded["columns"] == ["dtype", "gqa", "L", "backend", "ms", "MiB"]
    keys = [tuple(row[:4]) for row in recorded["rows"]]
    assert len(keys) == len(set(keys)) == 3 * 2 * 3 * 5        # dtypes, gqa, L, backends
    for dtype, gqa, L, backend, ms, mib in recorded["rows"]:
        reasons = [r for r in recorded["reasons"] if backend in r["backends"]
                   and (r["when"] == dtype or (r["when"] == "gqa" and gqa))]
        assert (ms is None) == bool(reasons), (dtype, gqa, L, backend)
        assert (ms is None) == (mib is None)


def test_recorded_default_is_cudnn_in_16_bits_and_math_in_float32():
    recorded = load_recorded()
    for L, row in recorded_rows(recorded, "bfloat16", True).items():
        assert row["default"][1] == row["CUDNN_ATTENTION"][1]
        assert abs(row["default"][0] - row["CUDNN_ATTENTION"][0]) <= 0.01 + 1e-9
    for L, row in recorded_rows(recorded, "float32", True).items():
        ran = {name for name, value in row.items() if value is not None}
        assert ran == {"default", "MATH"}


def test_chapter_7_shows_the_recorded_numbers_it_quotes_and_never_reads_shared():
    nb = json.loads((REPO / "chapters" / "07_positions.ipynb").read_text())
    prose = " ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    prose = " ".join(prose.split())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "shared" not in code                       # the book builds from its own copy
    recorded = load_recorded()
    bf16 = recorded_rows(recorded, "bfloat16", True)[16384]
    fp32 = recorded_rows(recorded, "float32", True)[16384]
    quoted = (f"at L = 16384, {bf16['default'][0]:.2f} ms and {bf16['default'][1]} MiB against "
              f"MATH's {bf16['MATH'][0]:.2f} ms and {bf16['MATH'][1]:,} MiB")
    assert quoted in prose
    assert (f"took {fp32['default'][0]:.2f} ms and {fp32['default'][1]:,} MiB, "
            f"{fp32['default'][0] / bf16['default'][0]:.0f} times the time and "
            f"{fp32['default'][1] / bf16['default'][1]:,.0f} times the memory") in prose
    provenance = recorded["provenance"]
    assert (f"{provenance['gpu'].split()[-1]}, torch {provenance['torch'].split('+')[0]} with "
            f"CUDA {provenance['cuda']}, on {provenance['date']}") in prose


def test_timed_lengths_caps_the_lengths_with_one_environment_variable(monkeypatch):
    """Chapters 6 and 7's timed lengths: unset, as written (sorted); COURSE_TIMING_MAX_LENGTH caps
    each of them, equal ones kept once (the tests' notebook executions)."""
    monkeypatch.delenv("COURSE_TIMING_MAX_LENGTH", raising=False)
    assert timed_lengths(256, 512, 1024, 2048) == [256, 512, 1024, 2048]
    assert timed_lengths(256) == [256]
    monkeypatch.setenv("COURSE_TIMING_MAX_LENGTH", "600")
    assert timed_lengths(256, 512, 1024, 2048) == [256, 512, 600]
    monkeypatch.setenv("COURSE_TIMING_MAX_LENGTH", "0")
    with pytest.raises(ValueError, match="COURSE_TIMING_MAX_LENGTH must be a positive integer"):
        timed_lengths(256)
