"""Does splitting d_model into more heads give the hardware more parallel work? Measured for
chapter 2 (seed 002 claims "increasing the number of heads raises the model's parallelism"),
on a quiet machine with many cores and, where there is one, a GPU; the chapter shows the
result as recorded data (chapters/data/heads_parallelism.json), since the book's build
machine has 2 shared cores, where a multi-threaded timing measures the other processes.

For each num_heads (d_model fixed, head_dim = d_model // num_heads), attention over all heads
at once, softmax(Q K^T / sqrt(head_dim)) V on (B, num_heads, L, head_dim), no mask:
  cpu      chapter 2's formula in float32, with 1 thread and with every core: the speed-up
           the extra cores bring, per head count;
  cuda     the same formula, and F.scaled_dot_product_attention (fused; bfloat16), timed
           with CUDA events after warm-up.
Every row does the same multiply-adds (B * L * L * d_model for the scores, as many again
for the weighted sum): only how they are grouped changes.

Run:  PYTHONPATH=. python3 bench/heads_parallelism.py --output FILE.json
"""
import argparse
import datetime
import json
import math
import os
import platform
import time

import torch
import torch.nn.functional as F

HEAD_COUNTS = (1, 2, 4, 8, 16, 32)
D_MODEL = 1024


def formula(q, k, v):
    # (B, h, L, hd) x 3 -> (B, h, L, hd): chapter 2's attention on all heads at once
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v


def heads(B, L, h, device, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(3, B, h, L, D_MODEL // h, generator=gen).unbind(0)
    return tuple(t.to(device=device, dtype=dtype).contiguous() for t in (q, k, v))


def best_cpu_ms(fn, repeats):
    fn()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return 1e3 * best


def median_cuda_ms(fn, repeats):
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def measure_cpu(B, L, repeats=20):
    cores = torch.get_num_threads()
    rows = []
    for h in HEAD_COUNTS:
        q, k, v = heads(B, L, h, "cpu", torch.float32)
        torch.set_num_threads(1)
        one = best_cpu_ms(lambda: formula(q, k, v), repeats)
        torch.set_num_threads(cores)
        every = best_cpu_ms(lambda: formula(q, k, v), repeats)
        rows.append({"device": "cpu", "B": B, "L": L, "num_heads": h, "head_dim": D_MODEL // h,
                     "threads": cores, "ms_1_thread": round(one, 3),
                     "ms_all_threads": round(every, 3), "speed_up": round(one / every, 2)})
    return rows


def measure_cuda(B, L, repeats=50):
    rows = []
    for h in HEAD_COUNTS:
        q, k, v = heads(B, L, h, "cuda", torch.bfloat16)
        row = {"device": "cuda", "B": B, "L": L, "num_heads": h, "head_dim": D_MODEL // h,
               "ms_formula_bf16": round(median_cuda_ms(lambda: formula(q, k, v), repeats), 4)}
        try:
            row["ms_sdpa_bf16"] = round(median_cuda_ms(
                lambda: F.scaled_dot_product_attention(q, k, v), repeats), 4)
        except RuntimeError as error:                      # a head_dim no kernel takes
            row["ms_sdpa_bf16"] = None
            row["sdpa_refused"] = str(error).splitlines()[0]
        rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    with torch.no_grad():
        rows = [r for B, L in ((1, 128), (1, 512), (8, 512)) for r in measure_cpu(B, L)]
        if torch.cuda.is_available():
            rows += [r for B, L in ((1, 512), (1, 4096), (8, 4096)) for r in measure_cuda(B, L)]
    record = {
        "provenance": {
            "date": datetime.date.today().isoformat(),
            "torch": torch.__version__,
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "load_average_before": os.getloadavg()[0],
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "cuda": torch.version.cuda,
            "measured_by": "bench/heads_parallelism.py"},
        "d_model": D_MODEL,
        "rows": rows,
    }
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
