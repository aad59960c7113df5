"""Measure on a CUDA GPU the table chapter 7 shows as recorded data
(chapters/data/sdpa_backends_<gpu>.json): which backend of F.scaled_dot_product_attention runs
causal attention, with and without grouped keys/values, in each float dtype, and what it costs.

    q (1, 8, L, 64); k, v (1, 2, L, 64) when gqa, else (1, 8, L, 64); is_causal=True,
    enable_gqa=gqa; "default" = every backend allowed, then each backend forced alone.

Every number comes from solutions.sdpa_backends (run_forced, measure_under, refusal_reason), the
code the chapter runs on the build machine's CPU; the JSON carries its provenance (GPU,
torch, CUDA, date, this script). A book built without a GPU shows it as recorded data.

Run on a GPU machine:  PYTHONPATH=. python3 bench/record_sdpa_gpu.py --output FILE.json
"""
import argparse
import datetime
import json
import re
import sys

import torch
import torch.nn.functional as F

from solutions.sdpa_backends import BACKENDS, measure_under, probe_inputs, run_forced

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
LENGTHS = (1024, 4096, 16384)


def first_sentence(reason):
    """PyTorch's reason up to its first full stop: what it refuses, without the sizes it
    then quotes ("Got Query dtype: float, ...")."""
    return re.split(r"(?<=[a-z}])\. ", reason)[0].rstrip(".")


def record(device="cuda", repeats=5):
    """(rows [[dtype, gqa, L, backend, ms or None, MiB or None]], reasons [{backends, when,
    reason}]): the refusals' reasons grouped by the condition they depend on ("gqa" when the
    backend runs the same dtype with as many key/value heads as query heads, else the dtype)."""
    rows, refused = [], {}
    with torch.no_grad():
        for dtype in DTYPES:
            name = str(dtype).removeprefix("torch.")
            for gqa in (True, False):
                for L in LENGTHS:
                    q, k, v = probe_inputs(device, dtype, L=L, num_kv_heads=2 if gqa else 8)
                    kwargs = {"is_causal": True, "enable_gqa": gqa}
                    for backend in (None, *BACKENDS):
                        label = "default" if backend is None else backend.name
                        attempt = None if backend is None else run_forced(backend, q, k, v,
                                                                          **kwargs)
                        if attempt is not None and attempt.reason is not None:
                            refused[(name, gqa, label)] = first_sentence(attempt.reason)
                            rows.append([name, gqa, L, label, None, None])
                            continue
                        ms, mib = measure_under(backend, lambda: F.scaled_dot_product_attention(
                            q, k, v, **kwargs), device, repeats)
                        rows.append([name, gqa, L, label, round(ms, 2), round(mib)])
                    del q, k, v
                    torch.cuda.empty_cache()
    reasons = {}
    for (dtype, gqa, backend), reason in refused.items():
        # a refusal that also happens without grouped heads depends on the dtype alone
        when = dtype if (dtype, False, backend) in refused else "gqa"
        entry = reasons.setdefault((when, reason), {"backends": [], "when": when,
                                                    "reason": reason})
        if backend not in entry["backends"]:
            entry["backends"].append(backend)
    return rows, list(reasons.values())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    rows, reasons = record("cuda", args.repeats)
    table = {
        "provenance": {
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "date": datetime.date.today().isoformat(),
            "measured_by": ("bench/record_sdpa_gpu.py (solutions.sdpa_backends), run by "
                            "bench/gpu_checks.sh; its other results: bench/GPU.md")},
        "call": ("F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa), with "
                 "every backend allowed ('default') and with each backend forced by "
                 "torch.nn.attention.sdpa_kernel"),
        "shapes": "q (1, 8, L, 64); k and v (1, 2, L, 64) when gqa, else (1, 8, L, 64)",
        "measure": (f"best of {args.repeats} calls in ms; peak memory the call adds in MiB "
                    "(torch.cuda.max_memory_allocated minus memory_allocated before it)"),
        "columns": ["dtype", "gqa", "L", "backend", "ms", "MiB"],
        "reasons": reasons,
        "rows": rows,
    }
    header = json.dumps({key: value for key, value in table.items() if key != "rows"}, indent=1)
    with open(args.output, "w", encoding="utf-8") as f:           # one row a line, as read
        f.write(header[:-2] + ',\n "rows": [\n'
                + ",\n".join("  " + json.dumps(row) for row in rows) + "\n ]\n}\n")
    for row in rows:
        print(*row)


if __name__ == "__main__":
    main()
