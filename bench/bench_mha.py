"""Benchmark solutions.MultiHeadAttention against torch.nn.MultiheadAttention.

Both modules run in ONE process with the SAME weights (MultiHeadAttention.from_torch)
on the same input. For every configuration the two calls are interleaved, A then B, then
B then A on the next repetition, so machine noise (another process, frequency changes)
hits both alike, and each repetition gives one paired ratio torch_time / ours_time.
The table reports the median of those ratios (> 1 means ours is faster) and the peak
memory of one call for each implementation.

Rows (self-attention, query is key is value, tokens (B, L, d_model), batch first):
  fwd train  forward under torch.no_grad(), both modules in training mode (dropout 0);
             nn.MultiheadAttention takes its Python path (F.multi_head_attention_forward).
  fwd eval   forward under torch.no_grad(), both modules in eval mode; here
             nn.MultiheadAttention takes its fused native fast path
             (torch._native_multi_head_attention), its strongest configuration.
  fwd+bwd    input requires grad, out.sum().backward(), training mode.
  weights: yes = ours need_weights=True (the readable path) vs torch need_weights=True,
             average_attn_weights=False (both return (B, h, L, L) weights);
           no  = ours need_weights=False (the fast path) vs torch need_weights=False.

Peak memory of a call (CPU): the kernel's resident-set high-water mark is reset
(`5` written to /proc/self/clear_refs) just before the call, and VmHWM minus the RSS
before the call is read just after it. glibc would otherwise keep freed blocks of a few
MiB inside its heap and hand them out again without the RSS growing, hiding part of the
peak; so on CPU the script re-executes itself once with MALLOC_MMAP_THRESHOLD_ fixed at
64 KiB, which makes every tensor buffer its own mapping, returned on free. On CUDA the
peak is torch.cuda.max_memory_allocated() minus memory_allocated() before the call.

Run:  make bench                      (CPU; writes bench/README.md)
      PYTHONPATH=. .venv/bin/python bench/bench_mha.py [--device cuda] [--output FILE]
"""
import argparse
import datetime
import gc
import json
import math
import os
import platform
import re
import statistics
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from solutions import MultiHeadAttention  # noqa: E402

MMAP_ENV = "MALLOC_MMAP_THRESHOLD_"
MMAP_THRESHOLD = "65536"
MiB = 2.0 ** 20

# Targets, checked at the target configuration (B=8, L=512, d_model=512, h=8).
TARGET_NO_WEIGHTS = 1.0   # no-weights path at least as fast as torch need_weights=False
TARGET_WEIGHTS = 0.9      # weights path at least 0.9x torch need_weights=True
# Peak memory growth when L doubles: 2 for linear, 4 for quadratic; 3 separates them.
LINEAR_GROWTH_MAX = 3.0


# ---------------------------------------------------------------- measuring one call
class CpuMeter:
    """Wall time and resident-set peak growth of one call, on the CPU."""

    @staticmethod
    def available():
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return "VmHWM" in open("/proc/self/status").read()
        except OSError:
            return False

    def __init__(self):
        self.has_hwm = self.available()

    @staticmethod
    def _status_kib(field):
        with open("/proc/self/status") as f:
            return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))

    def measure(self, fn):
        if self.has_hwm:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")                        # VmHWM := current RSS
            before = self._status_kib("VmRSS")
        t0 = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - t0
        peak = (self._status_kib("VmHWM") - before) * 1024 / MiB if self.has_hwm else math.nan
        return elapsed, peak


class CudaMeter:
    """Wall time (synchronised) and peak allocated memory of one call, on a GPU."""

    def __init__(self, device):
        self.device = device

    def measure(self, fn):
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        before = torch.cuda.memory_allocated(self.device)
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - t0
        peak = (torch.cuda.max_memory_allocated(self.device) - before) / MiB
        return elapsed, peak


# ---------------------------------------------------------------- the calls compared
def make_call(module, x, ours, mode, need_weights):
    """A no-argument function running one measured call of `module` on `x`."""
    kwargs = {"need_weights": need_weights}
    if not ours:
        kwargs["average_attn_weights"] = False

    if mode == "fwd+bwd":
        def call():
            out, _ = module(x, x, x, **kwargs)
            out.sum().backward()
    else:
        def call():
            with torch.no_grad():
                module(x, x, x, **kwargs)
    return call


def reset_grads(module, x):
    module.zero_grad(set_to_none=True)
    x.grad = None


def bench_row(meter, torch_mha, ours, x, mode, need_weights, warmup, min_reps, max_reps,
              row_seconds):
    """Time torch and ours alternately; return a dict of medians and paired ratios."""
    training = mode != "fwd eval"
    torch_mha.train(training)
    ours.train(training)
    xin = x.detach().clone().requires_grad_(mode == "fwd+bwd")
    calls = {
        "torch": make_call(torch_mha, xin, False, mode, need_weights),
        "ours": make_call(ours, xin, True, mode, need_weights),
    }
    modules = {"torch": torch_mha, "ours": ours}

    def run(name):
        reset_grads(modules[name], xin)     # each call allocates fresh grads, both alike
        gc.collect()
        return meter.measure(calls[name])

    # Warm up both (allocator, kernels' first-call costs), then size the repetitions.
    pair_time = 0.0
    for _ in range(warmup):
        pair_time = run("torch")[0] + run("ours")[0]
    reps = int(min(max_reps, max(min_reps, row_seconds // max(pair_time, 1e-9))))

    times = {"torch": [], "ours": []}
    peaks = {"torch": [], "ours": []}
    for rep in range(reps):
        order = ("torch", "ours") if rep % 2 == 0 else ("ours", "torch")
        for name in order:
            t, p = run(name)
            times[name].append(t)
            peaks[name].append(p)
    ratios = sorted(a / b for a, b in zip(times["torch"], times["ours"]))
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    reset_grads(torch_mha, xin)
    reset_grads(ours, xin)
    return {
        "reps": reps,
        "torch_s": statistics.median(times["torch"]),
        "ours_s": statistics.median(times["ours"]),
        "ratio": statistics.median(ratios),
        "ratio_q1": q[0],
        "ratio_q3": q[2],
        "torch_mib": statistics.median(peaks["torch"]),
        "ours_mib": statistics.median(peaks["ours"]),
    }


def check_same_outputs(torch_mha, ours, x):
    """Sanity check before timing: both modules compute the same function."""
    with torch.no_grad():
        for train in (True, False):
            torch_mha.train(train)
            ours.train(train)
            for nw in (True, False):
                a, wa = torch_mha(x, x, x, need_weights=nw, average_attn_weights=False)
                b, wb = ours(x, x, x, need_weights=nw)
                tol = dict(rtol=1e-3, atol=1e-4) if x.dtype == torch.float32 else \
                    dict(rtol=1e-2, atol=1e-2)
                torch.testing.assert_close(b, a, **tol)
                if nw:
                    torch.testing.assert_close(wb, wa, **tol)


# ---------------------------------------------------------------- machine description
def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
        return m.group(1).strip() if m else platform.processor() or "unknown"
    except OSError:
        return platform.processor() or "unknown"


def machine(device):
    info = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu capability": torch.backends.cpu.get_cpu_capability(),
        "device": str(device),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    if device.type == "cpu":
        info["malloc"] = f"{MMAP_ENV}={os.environ.get(MMAP_ENV, '(glibc default)')}"
    return info


# ---------------------------------------------------------------- report
MODES = ("fwd train", "fwd eval", "fwd+bwd")
MODE_TEXT = {
    "fwd train": "fwd train",
    "fwd eval": "fwd eval (torch native fast path)",
    "fwd+bwd": "fwd+bwd",
}


def fmt_time(s):
    return f"{s * 1e3:.1f}" if s < 10 else f"{s:.0f}"


def markdown_table(rows):
    lines = [
        "| mode | weights | L | torch ms | ours ms | ratio torch/ours (IQR) | torch MiB | ours MiB | reps |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {MODE_TEXT[r['mode']]} | {'yes' if r['need_weights'] else 'no'} | {r['L']} | "
            f"{fmt_time(r['torch_s'])} | {fmt_time(r['ours_s'])} | "
            f"**{r['ratio']:.2f}** ({r['ratio_q1']:.2f}-{r['ratio_q3']:.2f}) | "
            f"{r['torch_mib']:.1f} | {r['ours_mib']:.1f} | {r['reps']} |"
        )
    return "\n".join(lines)


def growth_table(rows, lengths):
    """Peak memory growth factor when L doubles, per mode and path (2 linear, 4 quadratic)."""
    pairs = [(a, b) for a, b in zip(lengths, lengths[1:]) if b == 2 * a]
    if not pairs:
        return "", {}
    head = "| mode | weights | impl | " + " | ".join(f"{a}->{b}" for a, b in pairs) + " |"
    lines = [head, "|---|---|---|" + "---:|" * len(pairs)]
    growth = {}
    for mode in MODES:
        for nw in (False, True):
            by_l = {r["L"]: r for r in rows if r["mode"] == mode and r["need_weights"] == nw}
            for impl in ("ours", "torch"):
                g = [by_l[b][f"{impl}_mib"] / by_l[a][f"{impl}_mib"]
                     if a in by_l and b in by_l and by_l[a][f"{impl}_mib"] > 0 else math.nan
                     for a, b in pairs]
                growth[(mode, nw, impl)] = g
                lines.append(f"| {MODE_TEXT[mode]} | {'yes' if nw else 'no'} | {impl} | "
                             + " | ".join(f"{v:.2f}" for v in g) + " |")
    return "\n".join(lines), growth


def verdicts(rows, growth, target_L):
    out = []
    at = {(r["mode"], r["need_weights"]): r for r in rows if r["L"] == target_L}

    def ratio_line(mode, nw, target, text):
        r = at.get((mode, nw))
        if r is None:
            return
        ok = r["ratio"] >= target
        out.append((ok, f"{'PASS' if ok else 'FAIL'}: {text}: median ratio {r['ratio']:.2f} "
                        f"(target >= {target:.1f}; torch {fmt_time(r['torch_s'])} ms, "
                        f"ours {fmt_time(r['ours_s'])} ms)"))

    ratio_line("fwd train", False, TARGET_NO_WEIGHTS,
               f"no-weights forward at L={target_L} vs nn.MultiheadAttention(need_weights=False)")
    ratio_line("fwd+bwd", False, TARGET_NO_WEIGHTS,
               f"no-weights forward+backward at L={target_L} vs nn.MultiheadAttention"
               "(need_weights=False)")
    ratio_line("fwd train", True, TARGET_WEIGHTS,
               f"weights forward at L={target_L} vs nn.MultiheadAttention(need_weights=True, "
               "average_attn_weights=False)")
    ratio_line("fwd+bwd", True, TARGET_WEIGHTS,
               f"weights forward+backward at L={target_L} vs nn.MultiheadAttention"
               "(need_weights=True, average_attn_weights=False)")
    # Informational: the eval-mode rows against torch's native fused kernel.
    for nw, target in ((False, TARGET_NO_WEIGHTS), (True, TARGET_WEIGHTS)):
        r = at.get(("fwd eval", nw))
        if r is not None:
            out.append((None, f"INFO: {'weights' if nw else 'no-weights'} forward, eval mode, "
                              f"at L={target_L} vs torch's native fast path: median ratio "
                              f"{r['ratio']:.2f}"))
    for mode in ("fwd train", "fwd+bwd"):
        g = growth.get((mode, False, "ours"))
        if g and not any(math.isnan(v) for v in g):
            ok = max(g) < LINEAR_GROWTH_MAX
            out.append((ok, f"{'PASS' if ok else 'FAIL'}: no-weights {MODE_TEXT[mode]} peak "
                            f"memory is linear in L, not quadratic: growth per doubling of L "
                            f"{', '.join(f'{v:.2f}' for v in g)} (linear 2, quadratic 4; "
                            f"target < {LINEAR_GROWTH_MAX:.0f})"))
    return out


def report(args, info, rows, growth_md, verdict_lines, started, wall):
    cfg = f"B={args.batch}, d_model={args.d_model}, h={args.heads}, {args.dtype}"
    mach = "\n".join(f"- {k}: {v}" for k, v in info.items())
    verdict_md = "\n".join(f"- {line}" for _, line in verdict_lines)
    return f"""# Benchmark: `solutions.MultiHeadAttention` vs `torch.nn.MultiheadAttention`

Generated by `bench/bench_mha.py` on {started:%Y-%m-%d %H:%M} UTC in {wall:.0f} s; do not
edit by hand, run `make bench` (CPU) to regenerate this file.

## What is measured
Self-attention (`query is key is value`), tokens `(B, L, d_model)` with {cfg}, at
L = {', '.join(map(str, args.lengths))}. `nn.MultiheadAttention(batch_first=True)` and
`MultiHeadAttention.from_torch` of it hold the same weights and run in one process on the
same input; the script first checks that their outputs agree. For each row the two
are called alternately (torch then ours, then ours then torch, ...), after warm-up calls,
and every repetition gives a paired ratio **torch time / ours time**: above 1 means ours
is faster. The table shows median times, the median ratio with its interquartile range,
and the median peak memory of one call.

- **fwd train**: forward under `torch.no_grad()`, both modules in training mode
  (dropout 0), so `nn.MultiheadAttention` runs `F.multi_head_attention_forward`.
- **fwd eval**: forward under `torch.no_grad()` in eval mode: here `nn.MultiheadAttention`
  takes its fused native fast path (`torch._native_multi_head_attention`), its strongest
  configuration; ours runs the same code as in training mode.
- **fwd+bwd**: training mode, input requires grad, `out.sum().backward()`; parameter and
  input grads are reset to `None` before every call, so each call allocates them.
- **weights yes**: ours `need_weights=True` (the readable path: separate projections,
  explicit softmax) vs torch `need_weights=True, average_attn_weights=False`; both return
  the `(B, h, L, L)` weights. **weights no**: ours `need_weights=False` (fused QKV
  projection and `F.scaled_dot_product_attention`) vs torch `need_weights=False`.
- **Peak memory** (MiB): {'growth of the resident set during the call (the high-water mark is reset through `/proc/self/clear_refs` before the call; glibc is told to map every buffer of 64 KiB or more on its own so freed memory leaves the resident set)' if args.device == 'cpu' else '`torch.cuda.max_memory_allocated()` during the call minus `memory_allocated()` before it'}.
  It includes the output (and for fwd+bwd the gradients) allocated by the call.

## How to run
```
make bench                                   # CPU, writes this file
PYTHONPATH=. .venv/bin/python bench/bench_mha.py --device cuda --output bench/README.md
PYTHONPATH=. .venv/bin/python bench/bench_mha.py --help  # lengths, sizes, repetitions
```
The whole CPU run takes about {wall / 60:.0f} minutes on the machine below.

## Machine
{mach}

## Results
{markdown_table(rows)}

### Peak memory growth when L doubles (2 = linear, 4 = quadratic)
The weights path must be quadratic: it materialises the `(B, h, L, L)` weights. The
no-weights path should not be.

{growth_md}

## Verdicts (target configuration B={args.batch}, L={args.target_length}, d_model={args.d_model}, h={args.heads})
{verdict_md}
"""


# ---------------------------------------------------------------- main
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:i]")
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024])
    p.add_argument("--target-length", type=int, default=512,
                   help="L at which the targets are checked (default 512)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    p.add_argument("--warmup", type=int, default=2, help="warm-up calls of each, per row")
    p.add_argument("--min-reps", type=int, default=5)
    p.add_argument("--max-reps", type=int, default=40)
    p.add_argument("--row-seconds", type=float, default=6.0,
                   help="time budget per row (doubled at the target length); the number "
                        "of repetitions is clamped to [min-reps, max-reps]")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads (default: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", help="also write the Markdown report to this file")
    p.add_argument("--json", help="also write the raw results as JSON to this file")
    p.add_argument("--no-reexec", action="store_true",
                   help=f"CPU: do not re-execute with {MMAP_ENV} set (peaks may read low)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu" and MMAP_ENV not in os.environ and not args.no_reexec:
        # Before any torch op: re-run this script with glibc's mmap threshold fixed (see
        # the module docstring). exec replaces this process; it is still one process.
        env = dict(os.environ, **{MMAP_ENV: MMAP_THRESHOLD})
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *sys.argv[1:]],
                  env)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: CUDA is not available here")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.target_length not in args.lengths:
        args.lengths = sorted(set(args.lengths) | {args.target_length})
    dtype = getattr(torch, args.dtype)

    meter = CudaMeter(device) if device.type == "cuda" else CpuMeter()
    if device.type == "cpu" and not meter.has_hwm:
        print("warning: /proc/self/clear_refs is not usable here; peak memory is not measured",
              file=sys.stderr)
    info = machine(device)
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.perf_counter()
    print("# machine: " + "; ".join(f"{k}: {v}" for k, v in info.items()), file=sys.stderr)

    torch.manual_seed(args.seed)
    torch_mha = nn.MultiheadAttention(args.d_model, args.heads, batch_first=True,
                                      device=device, dtype=dtype)
    ours = MultiHeadAttention.from_torch(torch_mha)
    check_same_outputs(torch_mha, ours,
                       torch.randn(2, 16, args.d_model, device=device, dtype=dtype))

    rows = []
    for L in args.lengths:
        x = torch.randn(args.batch, L, args.d_model, device=device, dtype=dtype)
        for mode in args.modes:
            for need_weights in (False, True):
                budget = args.row_seconds * (2 if L == args.target_length else 1)
                r = bench_row(meter, torch_mha, ours, x, mode, need_weights, args.warmup,
                              args.min_reps, args.max_reps, budget)
                r.update(mode=mode, need_weights=need_weights, L=L)
                rows.append(r)
                print(f"# L={L:5d} {mode:9s} weights={'yes' if need_weights else 'no ':3s} "
                      f"torch {r['torch_s'] * 1e3:8.1f} ms  ours {r['ours_s'] * 1e3:8.1f} ms  "
                      f"ratio {r['ratio']:.2f}  peak MiB torch {r['torch_mib']:7.1f} "
                      f"ours {r['ours_mib']:7.1f}  reps {r['reps']}",
                      file=sys.stderr, flush=True)
        del x

    wall = time.perf_counter() - t_start
    growth_md, growth = growth_table(rows, args.lengths)
    verdict_lines = verdicts(rows, growth, args.target_length)
    text = report(args, info, rows, growth_md, verdict_lines, started, wall)
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "args": vars(args), "rows": rows,
                       "started": started.isoformat(), "wall_s": wall}, f, indent=1)
    return 0 if all(ok is not False for ok, _ in verdict_lines) else 1


if __name__ == "__main__":
    sys.exit(main())
