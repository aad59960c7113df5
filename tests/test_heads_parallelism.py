"""Chapter 2's measured answer to "more heads give more parallelism": the recorded table
(chapters/data/heads_parallelism.json, written on a 16-core machine with a GPU by
bench/heads_parallelism.py) is complete and carries its provenance, every claim the prose
makes of it holds in it, and the numbers the prose quotes are the table's."""
import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RECORDED = json.loads((REPO / "chapters" / "data" / "heads_parallelism.json").read_text())
CHAPTER_2 = json.loads((REPO / "chapters" / "02_heads.ipynb").read_text())
HEAD_COUNTS = [1, 2, 4, 8, 16, 32]


def rows(device, B, L):
    found = [r for r in RECORDED["rows"] if r["device"] == device and r["B"] == B and r["L"] == L]
    assert [r["num_heads"] for r in found] == HEAD_COUNTS, (device, B, L)
    assert all(r["head_dim"] * r["num_heads"] == RECORDED["d_model"] for r in found)
    return found


def prose():
    text = " ".join("".join(c["source"]) for c in CHAPTER_2["cells"] if c["cell_type"] == "markdown")
    return " ".join(text.split())


def test_the_record_carries_its_provenance():
    source = RECORDED["provenance"]
    assert source["measured_by"] == "bench/heads_parallelism.py"
    assert source["cores"] == 16 and source["gpu"] == "NVIDIA H200" and source["date"]
    assert RECORDED["d_model"] == 1024
    for B, L in ((1, 128), (1, 512), (8, 512)):
        for r in rows("cpu", B, L):
            # the times are rounded to the microsecond: their ratio to within 1%
            assert abs(r["ms_1_thread"] / r["ms_all_threads"] / r["speed_up"] - 1) < 0.01


def test_more_heads_never_bought_speed_on_the_cpu():
    """The prose: the 16 threads' speed-up is largest with one head, and a call takes longer
    as heads are added."""
    for B in (1, 8):
        measured = rows("cpu", B, 512)
        assert max(measured, key=lambda r: r["speed_up"])["num_heads"] == 1
        one_thread = [r["ms_1_thread"] for r in measured]
        assert one_thread == sorted(one_thread), one_thread


def test_on_the_gpu_the_formula_slows_and_the_fused_kernel_is_fastest_at_4_or_8_heads():
    for B in (1, 8):
        measured = rows("cuda", B, 4096)
        formula = [r["ms_formula_bf16"] for r in measured]
        assert formula == sorted(formula), formula
        fused = {r["num_heads"]: r["ms_sdpa_bf16"] for r in measured}
        assert min(fused, key=fused.get) in (4, 8)
        assert fused[8] < fused[16] < fused[32]
        assert fused[1] > fused[4] and fused[2] > fused[4]      # head_dim 1024, 512: slower kernels


def test_the_prose_quotes_the_record():
    text = prose()
    cpu = {r["num_heads"]: r for r in rows("cpu", 1, 512)}
    gpu = {r["num_heads"]: r for r in rows("cuda", 1, 4096)}
    assert (f"`{cpu[1]['speed_up']}`x speed-up with 1 head and `{cpu[8]['speed_up']}`x with 8"
            in text)
    assert f"from `{cpu[1]['ms_1_thread']}` ms with 1 head to `{cpu[32]['ms_1_thread']}` ms" in text
    assert (f"from `{gpu[1]['ms_formula_bf16']}` ms to `{gpu[32]['ms_formula_bf16']}` ms at "
            "`L=4096`") in text
