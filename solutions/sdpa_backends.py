"""Chapter 7's fast paths: which backend of F.scaled_dot_product_attention runs on the device
at hand, PyTorch's own reason when one refuses, and what each costs in time and memory; and
the GPU measurements the book shows as recorded data (chapters/data/sdpa_backends_h200.json).

Nothing here answers an exercise: the notebook passes in its own attention (chapter 4's
function with chapter 6's repeat_kv) as one more candidate to time. Chapter 7's release
ships this module, and chapter 6's (whose cache timing reads timed_lengths).

Shape letters, as in chapters 6 and 7: B batch, h num_heads (query heads), g num_kv_heads
(key/value heads), L sequence length, hd head_dim.
"""
import contextlib
import ctypes
import json
import math
import os
import re
import textwrap
import time
import warnings
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ._checks import environment_count

# The backends the chapter forces one at a time, in the order of PyTorch's default priority
# on CUDA (torch._C._get_sdp_priority_order(): FLASH, EFFICIENT, MATH, CUDNN; cuDNN moves
# first on recent Hopper and Blackwell GPUs). On a CPU only FLASH_ATTENTION and MATH exist.
BACKENDS = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH,
            SDPBackend.CUDNN_ATTENTION)
# The heading PyTorch warns before the reasons of each backend (sdp_utils.cpp, CUDA; the
# CPU's sdp_utils_cpp.cpp warns only the flash one), then one warning per failed condition.
HEADINGS = {SDPBackend.EFFICIENT_ATTENTION: "Memory efficient kernel not used because:",
            SDPBackend.FLASH_ATTENTION: "Flash attention kernel not used because:",
            SDPBackend.CUDNN_ATTENTION: "cuDNN attention kernel not used because:"}
RECORDED = Path(__file__).resolve().parent.parent / "chapters" / "data" / "sdpa_backends_h200.json"


def timed_lengths(*lengths):
    """The sequence lengths chapters 6 and 7 time (chapter 7's fast paths' lengths L, the
    number of tokens chapter 6's decoding loop generates), in increasing order: `lengths`, each capped at
    $COURSE_TIMING_MAX_LENGTH when that is set (equal ones kept once). The tests that
    execute the whole notebook (nbgrader, the student kit) need its code paths, not its
    timings, and set it (tests/conftest.py); `make book` leaves it unset and times the
    lengths written."""
    cap = environment_count("COURSE_TIMING_MAX_LENGTH")
    return sorted({length if cap is None else min(length, cap) for length in lengths})


def measure_dtype(device):
    """The dtype in which every backend of `device` can run: bfloat16 on CUDA (FLASH and
    cuDNN take only float16 and bfloat16 there), float32 elsewhere (a CPU runs them all)."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


class Attempt(NamedTuple):
    """One call of F.scaled_dot_product_attention with one backend forced: `output`
    (B, h, Lq, hd) when it ran, else None and `reason`, PyTorch's words for the refusal."""

    backend: SDPBackend
    output: torch.Tensor = None
    reason: str = None


def _plain(message):
    # PyTorch appends where in its C++ the warning was raised: not part of the reason
    return re.sub(r"\s*\(Triggered internally at .*$", "", str(message), flags=re.S).strip()


def refusal_reason(backend, warned, error):
    """PyTorch's reason why `backend` refused a call: the warnings it emitted under that
    backend's heading ("Flash attention kernel not used because:", ...), or all of them if
    it emitted no heading, or else the text of the RuntimeError `error` (a CPU build warns
    nothing for the backends it does not have). `warned`: the warnings' texts, in order."""
    lines = [_plain(w) for w in warned]
    heading = HEADINGS.get(backend)
    if heading in lines:
        start = lines.index(heading) + 1
        later = [i for i, line in enumerate(lines) if i >= start and line in HEADINGS.values()]
        section = lines[start:later[0] if later else len(lines)]
        if section:
            return " ".join(section)
    others = [line for line in lines if line not in HEADINGS.values()]
    return " ".join(others) if others else _plain(error)


def run_forced(backend, query, key, value, **sdpa_kwargs):
    """F.scaled_dot_product_attention(query, key, value, **sdpa_kwargs) with only `backend`
    allowed (torch.nn.attention.sdpa_kernel): an Attempt with its output, or with PyTorch's
    reason when the backend refuses these inputs."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")                   # every reason, not once per place
        try:
            with sdpa_kernel(backend):
                output = F.scaled_dot_product_attention(query, key, value, **sdpa_kwargs)
        except RuntimeError as error:
            return Attempt(backend, None, refusal_reason(backend, [w.message for w in caught],
                                                         error))
    return Attempt(backend, output)


def default_backend(query, key, value, **sdpa_kwargs):
    """The backend F.scaled_dot_product_attention picks for these inputs with every backend
    allowed, as PyTorch's dispatcher reports it (torch._fused_sdp_choice, a private function:
    None where this PyTorch has none)."""
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return None
    return SDPBackend(choose(query, key, value, **sdpa_kwargs))


# ------------------------------------------------------------------ which backend takes what
def probe_inputs(device, dtype, *, L=128, num_heads=8, num_kv_heads=8, head_dim=64, Lq=None,
                 seed=0):
    """q (1, num_heads, Lq or L, head_dim), k and v (1, num_kv_heads, L, head_dim) on
    `device` in `dtype`, from a seeded generator."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, num_heads, Lq or L, head_dim, generator=gen)
    k, v = torch.randn(2, 1, num_kv_heads, L, head_dim, generator=gen).unbind(0)
    return tuple(t.to(device=device, dtype=dtype) for t in (q, k, v))


def conditions(device):
    """{name: (inputs (q, k, v), sdpa keyword arguments)}: the calls that tell the backends
    apart. Each dtype with 8 query and 8 key/value heads and is_causal; then, in the dtype
    the chapter measures in, fewer key/value heads, a boolean mask, dropout, and is_causal
    when a decoding step's 4 queries meet 128 keys."""
    dtype = measure_dtype(device)
    name = str(dtype).removeprefix("torch.")
    cases = {str(d).removeprefix("torch."): (probe_inputs(device, d), {"is_causal": True})
             for d in (torch.float32, torch.bfloat16, torch.float16)}
    allowed = torch.ones(128, 128, dtype=torch.bool, device=device).tril()  # (L, L), True = may attend
    cases[f"{name}, 2 KV heads, enable_gqa"] = (probe_inputs(device, dtype, num_kv_heads=2),
                                                {"is_causal": True, "enable_gqa": True})
    cases[f"{name}, boolean attn_mask"] = (probe_inputs(device, dtype), {"attn_mask": allowed})
    cases[f"{name}, dropout_p=0.25"] = (probe_inputs(device, dtype),
                                        {"is_causal": True, "dropout_p": 0.25})
    cases[f"{name}, is_causal, 4 queries, 128 keys"] = (probe_inputs(device, dtype, Lq=4),
                                                        {"is_causal": True})
    return cases


def probe(device):
    """{condition name: [Attempt per backend of BACKENDS]}: every backend forced on every
    call of conditions(device)."""
    with torch.no_grad():
        return {name: [run_forced(b, *inputs, **kwargs) for b in BACKENDS]
                for name, (inputs, kwargs) in conditions(device).items()}


def report_probe(results, width=72):
    """The probe as short lines (a phone's column), the reasons as numbered notes wrapped
    at `width` characters."""
    notes, lines = [], []
    for name, attempts in results.items():
        ran = [a.backend.name for a in attempts if a.reason is None]
        refused = []
        for a in attempts:
            if a.reason is not None:
                if a.reason not in notes:
                    notes.append(a.reason)
                refused.append(f"{a.backend.name} [{notes.index(a.reason) + 1}]")
        lines += [name, "  runs: " + (", ".join(ran) or "none")]
        if refused:
            lines.append("  refuses: " + ", ".join(refused))
    lines.append("PyTorch's reasons:")
    lines += [textwrap.fill(f"[{i}] {note}", width, subsequent_indent="    ")
              for i, note in enumerate(notes, 1)]
    return "\n".join(lines)


# ------------------------------------------------------------------ time and memory
_STATUS = "/proc/self/status"
_LIBC = ctypes.CDLL(None) if os.name == "posix" else None  # the C library (glibc: malloc_trim)


def _resident_bytes(field):
    # the process's resident memory, or its peak since the last reset (Linux only)
    with open(_STATUS) as f:
        return int(re.search(rf"{field}:\s+(\d+) kB", f.read()).group(1)) * 1024


def measure(fn, device, repeats=2):
    """(best time of `repeats` calls of fn() in ms, peak memory one call adds in MiB or None
    where it cannot be measured): on CUDA torch.cuda.max_memory_allocated; on a Linux CPU the
    process's peak resident memory (VmHWM), reset before the calls."""
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    elif os.path.exists("/proc/self/clear_refs"):
        if _LIBC is not None and hasattr(_LIBC, "malloc_trim"):
            _LIBC.malloc_trim(0)             # hand freed memory back, so that reuse shows
        with open("/proc/self/clear_refs", "w") as f:              # reset the peak (VmHWM)
            f.write("5")
        base = _resident_bytes("VmRSS")
    else:
        base = None
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        if cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
        del out
    if base is None:
        return 1e3 * best, None
    peak = torch.cuda.max_memory_allocated() - base if cuda else _resident_bytes("VmHWM") - base
    return 1e3 * best, max(peak, 0) / 2**20


def time_backends(device, lengths, own_attention, *, num_heads=8, num_kv_heads=2, head_dim=64,
                  repeats=2):
    """Causal grouped-query attention at each length L of `lengths`, in measure_dtype(device):
    `own_attention(q, k, v)` (the chapter's own code), F.scaled_dot_product_attention with
    every backend allowed ("default"), then each backend of BACKENDS forced, all with
    is_causal=True, enable_gqa=True; on a CPU on one thread. Returns (rows {name: [(ms, MiB
    or None) per L] or the refusal reason (a str)}, the backend the default picks at the
    first length, or None)."""
    threads = torch.get_num_threads()
    if torch.device(device).type == "cpu":
        # one thread: a shared machine stalls multi-threaded operations at every barrier,
        # which hits the many small operations of the plain formula far more than one kernel
        torch.set_num_threads(1)
    try:
        return _time_backends(device, lengths, own_attention, num_heads, num_kv_heads,
                              head_dim, repeats)
    finally:
        torch.set_num_threads(threads)


def _time_backends(device, lengths, own_attention, num_heads, num_kv_heads, head_dim, repeats):
    dtype = measure_dtype(device)
    cuda = torch.device(device).type == "cuda"
    kwargs = {"is_causal": True, "enable_gqa": True}
    rows, picked = {}, None
    with torch.no_grad():
        for i, L in enumerate(lengths):
            q, k, v = probe_inputs(device, dtype, L=L, num_heads=num_heads,
                                   num_kv_heads=num_kv_heads, head_dim=head_dim)
            calls = {"chapter 4": (None, lambda: own_attention(q, k, v)),
                     "default": (None, lambda: F.scaled_dot_product_attention(q, k, v, **kwargs))}
            for backend in BACKENDS:
                if i == 0:                       # tried once, on the shortest inputs
                    attempt = run_forced(backend, q, k, v, **kwargs)
                    if attempt.reason is not None:
                        rows[backend.name] = attempt.reason
                if not isinstance(rows.get(backend.name), str):
                    calls[backend.name] = (backend, lambda: F.scaled_dot_product_attention(
                        q, k, v, **kwargs))
            if i == 0:
                picked = default_backend(q, k, v, **kwargs)
            # on CUDA a warm-up at every length: cuDNN builds a plan for each new shape
            for name, (backend, fn) in calls.items():
                rows.setdefault(name, []).append(measure_under(backend, fn, device, repeats,
                                                               warm_up=i == 0 or cuda))
    return rows, picked


def measure_under(backend, fn, device, repeats=2, warm_up=True):
    """measure(fn, device, repeats) with only `backend` allowed (every backend when None),
    the backend chosen once around the timed calls: entering sdpa_kernel costs some
    microseconds, as much as a whole short fused call on a GPU. One untimed call first when
    `warm_up` (the first call of a kernel loads and tunes it)."""
    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
        if warm_up:
            fn()
        return measure(fn, device, repeats)


# ------------------------------------------------------------------ the recorded GPU table
def load_recorded(path=None):
    """The GPU measurements kept as data: {"provenance": {...}, "call": str, "columns":
    [...], "rows": [[dtype, gqa, L, backend, ms or None, MiB or None], ...], "reasons":
    [...]}. A row with ms None: the backend refused. Read from `path`, else from data/
    beside the notebook (an unzipped chapter, the book's build) or the repository's copy."""
    candidates = [Path(path)] if path else [Path("data") / RECORDED.name, RECORDED]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        raise FileNotFoundError(f"{RECORDED.name} not found (looked for "
                                f"{', '.join(map(str, candidates))})")
    with open(found, encoding="utf-8") as f:
        return json.load(f)


def recorded_rows(recorded, dtype, gqa):
    """{L: {backend name: (ms, MiB) or None when refused}} of the recorded rows for one
    dtype ("bfloat16", ...) and gqa (True: 2 key/value heads for 8 query heads)."""
    table = {}
    for row_dtype, row_gqa, L, backend, ms, mib in recorded["rows"]:
        if row_dtype == dtype and row_gqa == gqa:
            table.setdefault(L, {})[backend] = None if ms is None else (ms, mib)
    return table
