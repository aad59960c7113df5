"""Benchmark solutions.MultiHeadAttention against torch.nn.MultiheadAttention.

Both modules run in ONE process with the SAME weights (MultiHeadAttention.from_torch)
on the same input. For every configuration the two calls are interleaved, torch then
ours, then ours then torch on the next repetition, so machine noise (other processes,
frequency changes) hits both alike, and each repetition gives one paired ratio
torch_time / ours_time. The table reports the median of those ratios (> 1 means ours is
faster) and the peak memory of one call for each implementation.

Rows (self-attention, query is key is value, tokens (B, L, d_model), batch first):
  fwd train  forward under torch.no_grad(), both modules in training mode (dropout 0);
             nn.MultiheadAttention takes its Python path (F.multi_head_attention_forward).
  fwd eval   forward under torch.no_grad(), both modules in eval mode; here
             nn.MultiheadAttention takes its fused native fast path
             (torch._native_multi_head_attention), its strongest configuration.
  fwd+bwd    input requires grad, out.sum().backward(), training mode.
  weights yes: ours need_weights=True (the readable path) vs torch need_weights=True,
             average_attn_weights=False (both return (B, h, L, L) weights);
  weights no:  ours need_weights=False (the fast path) vs torch need_weights=False.

Peak memory of a call.
  CPU: growth of the resident set during the call: the kernel's high-water mark is
  reset (`5` written to /proc/self/clear_refs) just before the call, and VmHWM minus
  VmRSS before the call is read just after it. With glibc's default settings this reads
  low or zero: freed blocks of up to 32 MiB stay inside malloc's heap and are handed out
  again without the RSS growing. So the memory is measured in a second run of this
  script (a child process, after the timing) with MALLOC_MMAP_THRESHOLD_=65536, which
  gives every buffer of 64 KiB or more its own mapping, returned to the kernel on free.
  The timing itself runs with glibc's defaults, as users run: forcing a fresh mapping
  for every tensor would add page-fault costs that the default allocator avoids.
  CUDA: torch.cuda.max_memory_allocated() during the call minus memory_allocated()
  before it, read on the timed calls themselves.

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
import subprocess
import sys
import time

import torch
import torch.nn as nn

from solutions import MultiHeadAttention  # (PYTHONPATH=., as `make bench` sets it)

MMAP_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}
MiB = 2.0 ** 20
MODES = ("fwd train", "fwd eval", "fwd+bwd")
MODE_TEXT = {"fwd train": "fwd train", "fwd eval": "fwd eval (torch fast path)",
             "fwd+bwd": "fwd+bwd"}

# Targets, checked at the target configuration (B=8, L=512, d_model=512, h=8).
TARGET_NO_WEIGHTS = 1.0   # no-weights path at least as fast as torch need_weights=False
TARGET_WEIGHTS = 0.9      # weights path at least 0.9x torch need_weights=True
# Peak memory growth when L doubles: 2 for linear, 4 for quadratic; 3 separates them.
LINEAR_GROWTH_MAX = 3.0


# ---------------------------------------------------------------- measuring one call
def _status_kib(field):
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


def rss_peak_available():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        _status_kib("VmHWM")
        return True
    except (OSError, AttributeError):
        return False


class CpuMeter:
    """Wall time of one call, and optionally its resident-set peak growth (MiB)."""

    def __init__(self, memory):
        self.memory = memory and rss_peak_available()

    def measure(self, fn):
        if self.memory:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")                        # VmHWM := current RSS
            before = _status_kib("VmRSS")
        t0 = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - t0
        peak = (_status_kib("VmHWM") - before) * 1024 / MiB if self.memory else math.nan
        return elapsed, peak


class CudaMeter:
    """Wall time (synchronised) and peak allocated memory (MiB) of one call on a GPU."""

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


class Row:
    """One configuration: both modules set up for `mode`, callable by name."""

    def __init__(self, meter, modules, x, mode, need_weights):
        training = mode != "fwd eval"
        self.meter, self.modules = meter, modules
        self.x = x.detach().clone().requires_grad_(mode == "fwd+bwd")
        self.calls = {}
        for name, module in modules.items():
            module.train(training)
            self.calls[name] = make_call(module, self.x, name == "ours", mode, need_weights)
        # As timeit does: collect once, then keep the cyclic garbage collector (~50 ms a
        # pass with torch loaded) from running inside the measured calls.
        gc.collect()
        gc.disable()

    def run(self, name):
        self.modules[name].zero_grad(set_to_none=True)  # each call allocates its grads
        self.x.grad = None
        return self.meter.measure(self.calls[name])

    def close(self):
        for module in self.modules.values():
            module.zero_grad(set_to_none=True)
        gc.enable()


def time_row(row, warmup, min_reps, max_reps, seconds):
    """Time torch and ours alternately; medians, paired ratios and (CUDA) peak memory."""
    pair_time = 0.0
    for _ in range(max(1, warmup)):       # warm up both, then size the repetitions
        pair_time = row.run("torch")[0] + row.run("ours")[0]
        if pair_time > 2.0:               # slow calls: one warm-up pair is enough
            break
    reps = int(min(max_reps, max(min_reps, seconds // max(pair_time, 1e-9))))

    times = {"torch": [], "ours": []}
    peaks = {"torch": [], "ours": []}
    for rep in range(reps):
        for name in (("torch", "ours") if rep % 2 == 0 else ("ours", "torch")):
            t, p = row.run(name)
            times[name].append(t)
            peaks[name].append(p)
    ratios = [a / b for a, b in zip(times["torch"], times["ours"])]
    q1, _, q3 = (statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1
                 else ratios * 3)
    return {
        "reps": reps,
        "torch_s": statistics.median(times["torch"]),
        "ours_s": statistics.median(times["ours"]),
        "ratio": statistics.median(ratios),
        "ratio_q1": q1,
        "ratio_q3": q3,
        "best_ratio": min(times["torch"]) / min(times["ours"]),
        "torch_mib": max(peaks["torch"]),
        "ours_mib": max(peaks["ours"]),
    }


def memory_row(row, calls=2):
    """Peak memory of torch and ours after one warm-up call each (the largest of `calls`)."""
    row.run("torch")
    row.run("ours")
    peaks = {"torch": [], "ours": []}
    for _ in range(calls):
        for name in peaks:
            peaks[name].append(row.run(name)[1])
    return {"torch_mib": max(peaks["torch"]), "ours_mib": max(peaks["ours"])}


def check_same_outputs(torch_mha, ours, x):
    """Sanity check before timing: both modules compute the same function."""
    tol = dict(rtol=1e-3, atol=1e-4) if x.dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    with torch.no_grad():
        for train in (True, False):
            torch_mha.train(train)
            ours.train(train)
            for nw in (True, False):
                a, wa = torch_mha(x, x, x, need_weights=nw, average_attn_weights=False)
                b, wb = ours(x, x, x, need_weights=nw)
                torch.testing.assert_close(b, a, **tol)
                if nw:
                    torch.testing.assert_close(wb, wa, **tol)


def build(args, device):
    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    torch_mha = nn.MultiheadAttention(args.d_model, args.heads, batch_first=True,
                                      device=device, dtype=dtype)
    ours = MultiHeadAttention.from_torch(torch_mha)
    check_same_outputs(torch_mha, ours,
                       torch.randn(2, 16, args.d_model, device=device, dtype=dtype))
    return {"torch": torch_mha, "ours": ours}, dtype


def configurations(args):
    for L in args.lengths:
        for mode in args.modes:
            for need_weights in (False, True):
                yield L, mode, need_weights


# ---------------------------------------------------------------- CPU memory, in a child
def memory_child(args):
    """Entry of the child process: print {"L mode weights": peaks} as JSON."""
    modules, dtype = build(args, torch.device("cpu"))
    meter = CpuMeter(memory=True)
    out = {}
    if meter.memory:
        x = None
        for L, mode, nw in configurations(args):
            if x is None or x.shape[1] != L:
                x = torch.randn(args.batch, L, args.d_model, dtype=dtype)
            row = Row(meter, modules, x, mode, nw)
            out[f"{L} {mode} {nw}"] = memory_row(row)
            row.close()
            print(f"# memory L={L:5d} {mode:9s} weights={'yes' if nw else 'no':3s} "
                  f"{out[f'{L} {mode} {nw}']}", file=sys.stderr, flush=True)
    print(json.dumps(out))


def cpu_memory(args):
    """Run memory_child in a fresh interpreter with glibc's mmap threshold fixed."""
    cmd = [sys.executable, os.path.abspath(__file__), "--memory-child",
           "--lengths", *map(str, args.lengths), "--modes", *args.modes,
           "--batch", str(args.batch), "--d-model", str(args.d_model),
           "--heads", str(args.heads), "--dtype", args.dtype, "--seed", str(args.seed)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    res = subprocess.run(cmd, env=dict(os.environ, **MMAP_ENV), stdout=subprocess.PIPE,
                         text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- machine description
def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
        if m:
            return m.group(1).strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(device):
    info = {
        "CPU": cpu_model(),
        "cores": os.cpu_count(),
        "torch threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "CPU capability": torch.backends.cpu.get_cpu_capability(),
        "python": platform.python_version(),
        "OS": f"{platform.system()} {platform.release()}",
        "device": str(device),
    }
    try:
        kib = int(re.search(r"^MemTotal:\s+(\d+) kB", open("/proc/meminfo").read(), re.M)[1])
        info["memory"] = f"{kib / 2 ** 20:.0f} GiB"
    except (OSError, TypeError):
        pass
    if device.type == "cuda":
        info["GPU"] = torch.cuda.get_device_name(device)
        info["CUDA"] = torch.version.cuda
    try:
        info["load average before the run (1, 5, 15 min)"] = " ".join(
            open("/proc/loadavg").read().split()[:3])
    except OSError:
        pass
    return info


# ---------------------------------------------------------------- report
def ms(s):
    return f"{s * 1e3:.1f}"


def results_table(rows):
    lines = [
        "| mode | weights | L | torch ms | ours ms | **ratio** | ratio IQR | best-time ratio "
        "| torch MiB | ours MiB | reps |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {MODE_TEXT[r['mode']]} | {'yes' if r['need_weights'] else 'no'} | {r['L']} | "
            f"{ms(r['torch_s'])} | {ms(r['ours_s'])} | **{r['ratio']:.2f}** | "
            f"{r['ratio_q1']:.2f}-{r['ratio_q3']:.2f} | {r['best_ratio']:.2f} | "
            f"{r['torch_mib']:.1f} | {r['ours_mib']:.1f} | {r['reps']} |"
        )
    return "\n".join(lines)


def growth(rows, lengths):
    """Peak memory growth factors when L doubles, per (mode, need_weights, impl)."""
    pairs = [(a, b) for a, b in zip(lengths, lengths[1:]) if b == 2 * a]
    out = {}
    for mode in MODES:
        for nw in (False, True):
            by_l = {r["L"]: r for r in rows if r["mode"] == mode and r["need_weights"] == nw}
            for impl in ("ours", "torch"):
                key = f"{impl}_mib"
                g = [by_l[b][key] / by_l[a][key] for a, b in pairs
                     if a in by_l and b in by_l and by_l[a][key] > 0]
                if len(g) == len(pairs) and g:
                    out[(mode, nw, impl)] = g
    return pairs, out


def growth_table(pairs, factors):
    if not factors:
        return "(no memory measurements)"
    lines = ["| mode | weights | impl | " + " | ".join(f"L {a} -> {b}" for a, b in pairs) + " |",
             "|---|---|---|" + "---:|" * len(pairs)]
    for (mode, nw, impl), g in factors.items():
        lines.append(f"| {MODE_TEXT[mode]} | {'yes' if nw else 'no'} | {impl} | "
                     + " | ".join(f"{v:.2f}" for v in g) + " |")
    return "\n".join(lines)


def verdicts(rows, factors, target_L):
    """[(passed or None for information, line)] for the targets."""
    out = []
    at = {(r["mode"], r["need_weights"]): r for r in rows if r["L"] == target_L}
    rival = {False: "nn.MultiheadAttention(need_weights=False)",
             True: "nn.MultiheadAttention(need_weights=True, average_attn_weights=False)"}
    for mode, nw, target in (("fwd train", False, TARGET_NO_WEIGHTS),
                             ("fwd+bwd", False, TARGET_NO_WEIGHTS),
                             ("fwd train", True, TARGET_WEIGHTS),
                             ("fwd+bwd", True, TARGET_WEIGHTS)):
        r = at.get((mode, nw))
        if r is not None:
            ok = r["ratio"] >= target
            what = "forward" if mode == "fwd train" else "forward+backward"
            out.append((ok, f"{'PASS' if ok else 'FAIL'}: {'weights' if nw else 'no-weights'} "
                            f"path, {what}, vs {rival[nw]}: median ratio {r['ratio']:.2f} "
                            f"(target >= {target:.1f}; IQR {r['ratio_q1']:.2f}-"
                            f"{r['ratio_q3']:.2f}, best-time ratio {r['best_ratio']:.2f})"))
    for nw in (False, True):
        r = at.get(("fwd eval", nw))
        if r is not None:
            out.append((None, f"INFO: {'weights' if nw else 'no-weights'} path, forward in eval "
                              f"mode, vs torch's native fast path: median ratio "
                              f"{r['ratio']:.2f} (no target)"))
    g = factors.get(("fwd eval", False, "torch"))
    if g:
        out.append((None, f"INFO: torch's native fast path without weights: peak memory grows "
                          f"{', '.join(f'{v:.2f}x' for v in g)} per doubling of L"))
    for mode in ("fwd train", "fwd+bwd"):
        g = factors.get((mode, False, "ours"))
        if g:
            ok = max(g) < LINEAR_GROWTH_MAX
            out.append((ok, f"{'PASS' if ok else 'FAIL'}: no-weights path, {MODE_TEXT[mode]}: "
                            f"peak memory is not quadratic in L: it grows "
                            f"{', '.join(f'{v:.2f}x' for v in g)} per doubling of L (linear "
                            f"2x, quadratic 4x; target < {LINEAR_GROWTH_MAX:.0f}x)"))
    return out


def report(args, info, rows, pairs, factors, verdict_lines, started, wall):
    cfg = f"B={args.batch}, d_model={args.d_model}, h={args.heads}, {args.dtype}"
    if args.device == "cpu":
        mem = """- **Peak memory** (MiB) of one call: how much the process's resident set grows
  during it. It is measured after the timing, in a second run of the script with
  `MALLOC_MMAP_THRESHOLD_=65536`: with glibc's defaults, freed blocks of up to 32 MiB
  stay resident and are reused without the resident set growing, so the growth reads
  low. The timings run with glibc's defaults, as users run."""
    else:
        mem = """- **Peak memory** (MiB) of one call: `torch.cuda.max_memory_allocated()` during the
  call minus `memory_allocated()` before it."""
    mach = "\n".join(f"- {k}: {v}" for k, v in info.items())
    verdict_md = "\n".join(f"- {line}" for _, line in verdict_lines)
    return f"""# Benchmark: `solutions.MultiHeadAttention` vs `torch.nn.MultiheadAttention`

Generated by `bench/bench_mha.py` on {started:%Y-%m-%d %H:%M} UTC (the run took
{wall / 60:.1f} minutes). Do not edit by hand: `make bench` regenerates this file.

## What is measured
Self-attention (`query is key is value`) on tokens `(B, L, d_model)` with {cfg},
at L = {', '.join(map(str, args.lengths))}. `nn.MultiheadAttention(batch_first=True)` and
`MultiHeadAttention.from_torch` of it hold the same weights and run in one process on
the same input; the script first checks that their outputs and weights agree. After
warm-up calls, the two are called alternately (torch then ours, then ours then torch,
...), so that noise from the machine hits both, and every repetition gives a paired
ratio **torch time / ours time: above 1 means ours is faster**.

- **fwd train**: forward under `torch.no_grad()`, both modules in training mode
  (dropout 0), so `nn.MultiheadAttention` runs its Python path
  (`F.multi_head_attention_forward`).
- **fwd eval (torch fast path)**: forward under `torch.no_grad()` in eval mode, where
  `nn.MultiheadAttention` takes its fused native fast path
  (`torch._native_multi_head_attention`), its strongest configuration. Ours runs the
  same code as in training mode.
- **fwd+bwd**: training mode, the input requires grad, `out.sum().backward()`. Grads
  are reset to `None` before every call, so each call allocates them.
- **weights yes**: ours `need_weights=True` (the readable path: three projections,
  explicit scores and softmax) vs torch `need_weights=True, average_attn_weights=False`;
  both return the `(B, h, L, L)` weights. **weights no**: ours `need_weights=False`
  (one fused QKV projection and `F.scaled_dot_product_attention`) vs torch
  `need_weights=False`.

Columns: the median time of each; **ratio** = the median of the paired ratios, with
their interquartile range; best-time ratio = torch's fastest call / ours' fastest call,
a cross-check that ignores slow outliers.

{mem}
  It includes what the call returns and, for fwd+bwd, the gradients.

Other processes running at the same time slow the calls down unevenly. The load
averages under Machine tell whether the {info.get("cores")} cores were shared: before the
run it should be well under 1, after it about {info.get("torch threads")} (the benchmark's own
threads). With shared cores the paired ratios stay centred but scatter (a wide IQR):
rerun on a quiet machine before trusting a verdict close to its threshold.

## How to run
```
make bench                                                  # CPU; rewrites this file
PYTHONPATH=. .venv/bin/python bench/bench_mha.py --help       # lengths, sizes, repetitions
PYTHONPATH=. .venv/bin/python bench/bench_mha.py --device cuda --output bench/README-cuda.md
```
Progress lines go to stderr, the report to stdout (and to `--output`).

## Machine
{mach}

## Results
{results_table(rows)}

### Peak memory growth when L doubles (2x = linear, 4x = quadratic)
The weights path is quadratic by nature: it returns the `(B, h, L, L)` weights. The
no-weights path need not be.

{growth_table(pairs, factors)}

## Verdicts at the target configuration
B={args.batch}, L={args.target_length}, d_model={args.d_model}, h={args.heads}:

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
    p.add_argument("--min-reps", type=int, default=5,
                   help="fewest timed repetitions of a row (x2 at the target length)")
    p.add_argument("--max-reps", type=int, default=40)
    p.add_argument("--row-seconds", type=float, default=5.0,
                   help="time budget of a row (x3 at the target length); repetitions are "
                        "clamped to [min-reps, max-reps] (default 5)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads (default: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", help="also write the Markdown report to this file")
    p.add_argument("--json", help="also write the raw results as JSON to this file")
    p.add_argument("--strict", action="store_true", help="exit with status 1 if a target fails")
    p.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.target_length not in args.lengths:
        args.lengths.append(args.target_length)
    args.lengths = sorted(set(args.lengths))
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_child:
        memory_child(args)
        return 0
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: CUDA is not available here")
    if device.type not in ("cpu", "cuda"):
        sys.exit(f"--device {args.device}: only cpu and cuda are supported")

    info = machine(device)
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.perf_counter()
    print("# " + "; ".join(f"{k}: {v}" for k, v in info.items()), file=sys.stderr)
    modules, dtype = build(args, device)
    meter = CudaMeter(device) if device.type == "cuda" else CpuMeter(memory=False)

    rows, x = [], None
    for L, mode, nw in configurations(args):
        if x is None or x.shape[1] != L:
            x = torch.randn(args.batch, L, args.d_model, device=device, dtype=dtype)
        row = Row(meter, modules, x, mode, nw)
        r = time_row(row, args.warmup, args.min_reps * (2 if L == args.target_length else 1),
                     args.max_reps,
                     args.row_seconds * (3 if L == args.target_length else 1))
        row.close()
        r.update(mode=mode, need_weights=nw, L=L)
        rows.append(r)
        print(f"# {time.perf_counter() - t_start:4.0f} s  L={L:5d} {mode:9s} "
              f"weights={'yes' if nw else 'no ':3s} torch {ms(r['torch_s']):>8} ms  "
              f"ours {ms(r['ours_s']):>8} ms  "
              f"ratio {r['ratio']:.2f} (best {r['best_ratio']:.2f})  reps {r['reps']}",
              file=sys.stderr, flush=True)
    del x, row

    if device.type == "cpu":
        print("# peak memory (child process) ...", file=sys.stderr, flush=True)
        peaks = cpu_memory(args)
        if not peaks:
            print("warning: /proc/self/clear_refs is not usable here; no memory measured",
                  file=sys.stderr)
        for r in rows:
            r.update(peaks.get(f"{r['L']} {r['mode']} {r['need_weights']}",
                               {"torch_mib": math.nan, "ours_mib": math.nan}))

    wall = time.perf_counter() - t_start
    try:
        info["load average after the run (1, 5, 15 min)"] = " ".join(
            open("/proc/loadavg").read().split()[:3])
    except OSError:
        pass
    pairs, factors = growth(rows, args.lengths)
    verdict_lines = verdicts(rows, factors, args.target_length)
    text = report(args, info, rows, pairs, factors, verdict_lines, started, wall)
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "args": vars(args), "rows": rows,
                       "started": started.isoformat(), "wall_s": wall}, f, indent=1)
    failed = any(ok is False for ok, _ in verdict_lines)
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
