"""Comparison and diagnosis helpers shared by every chapter's checks.

A check calls the student's function on fixed inputs, compares with the expected output
and, when the numbers differ, with the outputs of known bugs on the same inputs, so that
the message can name the mistake. Every failure raises CheckFailure (an AssertionError,
so nbgrader counts it as failed).

Two copies of each check module exist, generated from one source (this folder):
- the grader's (this code): the functions marked @reference compute the expected outputs
  and the catalogued bugs' outputs, on inputs drawn for each call;
- the student's kit (written by autograde/kit.py): the same module with the body of every
  @reference function removed and KIT = True; their results are read from the fixtures
  recorded when the course was released, for the calls of the visible tests only. So the
  kit judges from data and holds no answer.
"""
import contextlib
import contextvars
import functools
import io
import hashlib
import inspect
import json
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from . import diagnose, language, nested, operations, repair
# (the operations' own names that the checks modules take from here)
from .operations import (CheckFailure, Forbidden, _ForbidSpec, attempt,  # noqa: F401
                         forbid_spec)

# The forbids' teaching messages in the language of now (operations binds no catalogue)
operations.say_with(lambda context, english:
                    language.catalogue(language.current()).pgettext(context, english))
# nested's and operations' own sentences (a value too deep to send, where in the student's
# code an error came from) in the language of now as well, as every module's MESSAGES: they
# bind no catalogue, since the student's sandboxed process runs them and is sent their
# templates instead (autograde.remote.child_messages); here, where the catalogue is at hand
# (the grader, the student's Jupyter and kit), their plain dicts are looked up in it. (The
# checks read student_line's words back in either language: diagnose.restate_error and
# attention's hints.)
for _module in (nested, operations):
    _module.MESSAGES = language.translated(
        _module.__name__, getattr(_module.MESSAGES, "english", _module.MESSAGES))


def said_later(messages, key):
    """Forbidden's `what` and `context` for MESSAGES[key] of a checks module (`messages`):
    its English template, said in the language of the moment the message is made."""
    return {"what": messages.english[key], "context": f"{messages.context}.{key}"}


# Bound now, before any student code runs in the same kernel, so that rebinding
# torch.allclose or friends in a notebook does not change what the checks compute.
_isfinite = torch.isfinite
_isnan = torch.isnan
_where = torch.where
_equal = torch.equal
_Tensor = torch.Tensor

# Every sentence these helpers can print to a student, one template each with named fields,
# in one place (a second language translates them here): the failures of expect_tensor,
# raised(), expect_close() and the kit's replay, what a report that is no report gets
# (malformed_*), and the promises every exercise makes (see "The promises every exercise
# makes" below). Values that are code (shapes, dtypes, function names) are fields.
MESSAGES = language.translated(__name__) | {
    "passed": "\u2714 {message}",
    # expect_tensor
    "tensor_tuple": "{name}: expected a tensor, got a tuple of {count} items (did you return "
                    "(output, weights) where only one tensor was asked for?)",
    "tensor_kind": "{name}: expected a torch.Tensor, got {got}{forgot}",
    "tensor_forgot": " (did you forget to return it?)",
    "tensor_shape": "{name}: expected shape {want}{named}, got {got}.{found}{hint}",
    "tensor_shape_named": " = {names}",
    "tensor_shape_words": " In words: {found}.",
    "tensor_shape_order": " The sizes are right but in the wrong order: check which axes you "
                          "transposed.",
    "tensor_shape_count": " The number of elements is right: check your view/reshape.",
    "tensor_dtype": "{name}: expected dtype {want} (the input's dtype), got {got}. Avoid "
                    "creating tensors with a fixed dtype; use the input's dtype.",
    "tensor_device": "{name}: expected a tensor on {want}, got one on {got}",
    # what a report from the student's process must be
    "malformed": "the grader received malformed data ({what}) from the process that runs "
                 "your code: does your code change the checks module or the grader's "
                 "messages?",
    "malformed_error": "the error of {name}",
    "malformed_report": "a call's report",
    "malformed_loaded": "what load_weights found",
    "malformed_loaded_at": "what load_weights found at {attr!r}",
    "foreign": "<{name} object>",
    # raised(), judge_construct()
    "not_implemented": "{name} is not implemented yet: replace `raise NotImplementedError()` "
                       "with your code.",
    "not_module": "{shown} is not an nn.Module: subclass nn.Module and call "
                  "super().__init__() first.",
    # expect_close(), where_it_differs()
    "nonfinite": "{name}: {where}. {hint}",
    "nonfinite_hint": "Look for 0/0 (a fully masked row) or an overflowing exp().",
    "wrong_bug": "{name} is wrong: {bug}",
    "wrong_bugs": "{name} is wrong in a way that {count} mistakes share on these inputs: "
                  "{bugs}",
    "wrong_bugs_or": " OR: ",
    "wrong": "{name} is wrong (largest error {error:.3g}). {where}{hint}",
    "wrong_hint": "Compare your steps with the formula above, one tensor at a time.",
    "differs": "{count} of {total} entries are off in {dtype}{place}. ",
    "differs_only": "; only at {parts} (0-based)",
    "differs_everywhere": ", along every axis",
    "differs_index": "index {indices} of {axis}",
    "differs_axis": "axis {index}",
    # the float32 sqrt(d_k) rule (see float32_sqrt below)
    "float32_sqrt": "your sqrt(d_k) is a float32 number (e.g. torch.sqrt(torch.tensor(d_k, "
                    "dtype=torch.float32)), as in seed 000): with float64 inputs the result "
                    "keeps only float32's 7 digits. Divide by math.sqrt(d_k), a Python float, "
                    "which adapts to the inputs' dtype.",
    # the promises every exercise makes (PROMISES below)
    "unchanged": "The exercise leaves its inputs as they were: compute new tensors "
                 "(y = x * 2, not x *= 2, x[...] = ..., or a method ending in _ such as "
                 "masked_fill_), and give a module back with the weights it came in with.",
    "reshaped": "it changed its argument `{argument}` in place: it came in as {before} and "
                "left as {after}{words}",
    "reshaped_words": " (in words: {found})",
    "reshaped_gone": "gone",
    "more_tensors": " (and {count} more of its tensors)",
    "mode": "argument `{argument}`'s mode after the call",
    "mode_why": " (the mode it came in with: note module.training first, and give it back "
                "with module.train(was_training))",
    "mode_training": "training",
    "mode_eval": "eval",
    "kind": "{reason}.{hint}",
    "named": "Return {documented}({fields}): its fields are read by name.",
    "named_kind": "{documented}({fields}), a named tuple",
    "graph": "{name} returned a tensor attached to the autograd graph (requires_grad=True): "
             "the exercise documents a measurement computed without gradients. Decorate it "
             "with @torch.no_grad(), or compute it inside `with torch.no_grad():`.",
    "dtype": "Make the result in that dtype: a tensor built from Python numbers "
             "(torch.tensor([...]), torch.zeros(n)) is float32 unless given dtype=.",
    "shared": "{name} returned a module whose `{tensor}` shares its memory with {source}'s "
              "`{other}` (the same storage): changing one changes the other. Copy the values "
              "into the new module's own tensors (new.weight.copy_(old.weight[rows]), or "
              ".clone()).",
    "described_tensor": "a {dtype} tensor of shape {shape}",
    "argument_number": "argument {number}",
    "argument_its": "its argument `{label}`",
    "module_tensor": "{module}`'s `{tensor}",
    "kind_float": "a Python float",
    "kind_int": "a Python int",
    "kind_bool": "a Python bool",
    "kind_tuple": "a tuple",
    "kind_tensor": "a tensor",
    "kind_other": "a {name}",
    "kinds_or": " or ",
    # the student's kit: answers replayed from its fixtures
    "reinstall": "the course's checks package is out of date or incomplete: reinstall it as "
                 "the student guide says",
    "kit_outside": "{name} runs only inside a check: {reinstall}.",
    "kit_no_answers": "no stored answers for the check {key}: the student kit holds the "
                      "answers of the visible tests only, for the arguments written in them; "
                      "the hidden tests run in the grader.",
    "kit_mismatch": "the stored answers of {key} do not match this call ({slot}): "
                    "{reinstall}.",
    "fixture_kind": "a @reference function returned {kind}, which fixtures cannot store: "
                    "return tensors, numbers, strings, tuples, lists or dicts",
    "fixture_entry": "unknown fixture entry {keys}",
    # expect_from_weights: the returned weights are right, the output is not made from them
    "other_weights": ("{name} is wrong: the weights you return are right, but the output is not "
                      "weights @ value with them (it was computed from other weights, or from "
                      "another tensor than value){reason}."),
    "other_weights_reason": ": {reason}",
    # the repair family (_repair): its sentence (diagnose.repaired) in place of the generic
    # message, or before the message it leads (a restated error, a shape, a trace's symptom)
    "repaired": "{sentence}.",
    "repaired_lead": "{sentence}.\n{message}",
}


# ---------------------------------------------------------------------------------------
# Tolerances from the arithmetic
# ---------------------------------------------------------------------------------------
# A check compares the student's result, computed in `dtype`, with an answer computed in
# float64 from the very same inputs (already rounded to `dtype`), so the only difference a
# correct formulation can make is the rounding of its own operations. Each operation
# rounds its result to within u = eps / 2 of the value's magnitude (eps =
# torch.finfo(dtype).eps: 2^-52, 2^-23, 2^-10, 2^-7 for float64, float32, float16,
# bfloat16). Errors of earlier steps are carried along and added up, and which values
# they are relative to depends on the formulation: a product summed in another order is
# off by a few u of the *summands*, exp(s - logsumexp(s)) by a few u of |s| on every
# weight, a gradient that cancels (w * (g - sum(w g))) by a few u of its largest terms.
# So the error of a correct result is bounded by the magnitude of the compared values,
# not by each entry's own size: a small entry may carry the rounding of the large ones.
# The rule, for every comparison of the checks (close(), expect_close()):
#
#     |actual - expected| <= (ROUNDINGS + condition - 1) * eps * (scale + |expected|)
#
# scale: the magnitude of the values the result is computed from: by default the largest
# |expected| of the compared tensor; a check passes the largest |value| for a weighted sum
# of values, the size of the terms for a gradient that cancels. condition: how much the
# computation amplifies the rounding of its inputs (softmax_condition(): exp turns the
# rounding of a score s, u |s|, into the same relative error of its weight); 1 elsewhere.
# That amplified error adds to the roundings of the chain, hence the sum.
# ROUNDINGS: the longest chain of operations of the course's exercises rounds about
# n = 100 times (an input projection of d_model <= 24 terms, a dot product of d_k <= 16
# terms and its scaling, the softmax: a subtraction, exp, a sum of Lk <= 11 terms, a
# division; the weighted sum of Lk values and the output projection). Rounding errors
# behave as independent, centred random variables (Higham & Mary, "A new approach to
# probabilistic rounding error analysis", 2019): their sum stays below lambda sqrt(n) u
# except with probability 2 exp(-lambda^2 / 2) per value; lambda = 3.2 and n = 100 give
# 32 u = 16 eps. (The worst case, n u = 50 eps, is reached by no formulation: adversarial
# roundings all of one sign.) tests/test_tolerances.py builds correct formulations from
# interchangeable parts (association orders, einsum, loops, logsumexp, float64 or float32
# inside) and requires each to use at most a quarter of it, in every dtype. Every
# catalogued bug stays many tolerances away: it changes the value by a relative amount
# that does not shrink with eps (a wrong scale, axis or mask), or, for the float32
# sqrt(d_k) constant in a float64 test, by ~1e-8, about 10^5 float64 tolerances.
ROUNDINGS = 16


def tolerance(dtype):
    """(rtol, atol) that a correct implementation meets in `dtype`: both ROUNDINGS * eps.
    atol is relative to the scale of the compared values (see close()), not absolute."""
    dtype = dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32
    eps = torch.finfo(dtype).eps
    return ROUNDINGS * eps, ROUNDINGS * eps


# ---------------------------------------------------------------------------------------
# One rule for a float32 sqrt(d_k) constant, in every chapter
# ---------------------------------------------------------------------------------------
# torch.sqrt(torch.tensor(d_k, dtype=torch.float32)) (seed 000) divides the scores by
# sqrt(d_k) rounded to float32. A 0-dim tensor does not promote, so float32, float16 and
# bfloat16 inputs get the same result as with math.sqrt(d_k) once rounded: harmless there.
# float64 inputs stay float64 but are scaled by a number off by up to 3e-8 (relative),
# about 10^6 float64 tolerances: every check that scales scores (chapter 1's scores and
# attention, chapter 2's multi-head core, chapter 3's forward, chapter 4's masked
# attention) computes, in its float64 runs, the output of this mistake with
# float32_sqrt(d_k) and names it with FLOAT32_SQRT. Where d_k is a perfect square (4, 16,
# 64) the float32 root is exact and the mistake changes nothing, so no test can see it.
# (The English sentence, a constant; a check that names the mistake says it in the language
# of the moment with float32_sqrt_message(), as the per-bug tables and formulas.py do.)
FLOAT32_SQRT = MESSAGES.english["float32_sqrt"]


def float32_sqrt_message():
    """FLOAT32_SQRT's sentence in the language of now (checks/language.py)."""
    return MESSAGES["float32_sqrt"]


def float32_sqrt(d_k):
    """sqrt(d_k) as a float32 constant holds it (a Python float), or None where it equals
    math.sqrt(d_k) (a perfect square: the mistake is invisible)."""
    root = float(torch.tensor(float(d_k), dtype=torch.float32).sqrt())
    return None if root == math.sqrt(d_k) else root


def fail(message):
    raise CheckFailure(message)


def passed(message):
    """Tell the student what was verified (printed by a passing check)."""
    print(MESSAGES["passed"].format(message=message))


def expect_tensor(actual, name, shape=None, dtype=None, device=None, shape_names=None):
    """Require a torch.Tensor with the given shape/dtype/device; return it.

    shape_names: a string such as "(B, num_heads, L, head_dim)", printed beside the
    numbers so the student sees which axis is wrong.
    """
    if isinstance(actual, tuple) and name:
        fail(MESSAGES["tensor_tuple"].format(name=name, count=len(actual)))
    if not isinstance(actual, _Tensor):
        fail(MESSAGES["tensor_kind"].format(
            name=name, got=type_name(actual),
            forgot=MESSAGES["tensor_forgot"] if actual is None else ""))
    if shape is not None and tuple(actual.shape) != tuple(shape):
        named = MESSAGES["tensor_shape_named"].format(names=shape_names) if shape_names else ""
        found = diagnose.wrong_shape(tuple(actual.shape), tuple(shape), current_dims(),
                                     shape_names)
        call = _CURRENT.get()
        if found and call is not None:   # the line that made that shape, and what it did
            found += diagnose.traced_shape(actual, shape, call.traces, call.dims,
                                           shape_names) or ""
        # the hints only where the words do not already say it (a swap or a recut names
        # the transpose or the view/reshape itself)
        hint = ""
        if sorted(actual.shape) == sorted(shape) and not found:
            hint = MESSAGES["tensor_shape_order"]
        elif (actual.numel() == torch.Size(shape).numel() and sorted(actual.shape) != sorted(shape)
              and diagnose._signature("shape_recut") not in (found or "")):
            hint = MESSAGES["tensor_shape_count"]
        found = MESSAGES["tensor_shape_words"].format(found=found) if found else ""
        fail(_weak(MESSAGES["tensor_shape"].format(name=name, want=tuple(shape), named=named,
                                                   got=tuple(actual.shape), found=found,
                                                   hint=hint)))
    if dtype is not None and actual.dtype != dtype:
        fail(MESSAGES["tensor_dtype"].format(name=name, want=dtype, got=actual.dtype))
    if device is not None and actual.device != torch.device(device):
        fail(MESSAGES["tensor_device"].format(name=name, want=device, got=actual.device))
    return actual


# ---------------------------------------------------------------------------------------
# The runtime: the checks' one way to the student's code
# ---------------------------------------------------------------------------------------
# A check never touches the student's objects except through these calls (observe(), call(),
# load_weights(), is_module(), is_class(), type_name(), given()), each served by the runtime
# in force: LocalRuntime when the student's code runs in this process (their Jupyter, the
# kit, the tests), or the one the grader installs with use_runtime() while it runs a test
# cell (autograde.remote.RemoteRuntime: the student's objects live in another process, and
# what comes back is values). No check knows which one it talks to.

class LocalRuntime:
    """The runtime where the student's objects live in this process: checks.operations,
    called here (under the autograder the student's process calls the same ones)."""

    # a CheckFailure raised inside the student's call is a check's own (the forbid's
    # teaching message), shown as it is; from another process it could be anything
    # the student's code raised under that name (RemoteRuntime: False)
    own_failures = True

    def observe(self, function, args, kwargs):
        """{"result", "error", "args", "warnings"} of function(*args, **kwargs), plain data."""
        return operations.observe(function, args, kwargs, copy=export)

    def attempt_traced(self, function, args, kwargs):
        """(result, error, trace) of operations.attempt_traced(function, *args, **kwargs):
        a call whose result stays as it is (call() on inputs that require grad)."""
        return operations.attempt_traced(function, *args, **kwargs)

    def load_weights(self, module, weights):
        """See load_weights()."""
        return operations.load_weights(module, weights)

    def kind(self, obj):
        """"module" (an nn.Module), "class", "callable" (any other) or "object"."""
        return operations.kind(obj)

    def type_name(self, obj):
        return type(obj).__name__

    def given(self, path, args, kwargs):
        return operations.resolve_given(path)(*args, **kwargs)

    def mutants(self, obj):
        """[[mutant, description]] of the student's object (checks.operations.mutants)."""
        return operations.mutants(obj)

    def repair_seconds(self, most):
        """How long the repair family may search here: `most` (no deadline in this process)."""
        return most

    def lost(self, fault):
        """A fault other than an Exception in the repair family's search: none is expected in
        this process, so it goes on."""
        raise fault


LOCAL = LocalRuntime()
_RUNTIME = contextvars.ContextVar("checks_runtime", default=LOCAL)


def runtime():
    """The runtime in force (LocalRuntime unless the grader installed its own)."""
    return _RUNTIME.get()


class use_runtime:
    """Context manager: the checks reach the student's code through `runtime` inside it."""

    def __init__(self, runtime):
        self.runtime, self.token = runtime, None

    def __enter__(self):
        self.token = _RUNTIME.set(self.runtime)
        return self.runtime

    def __exit__(self, *exc):
        _RUNTIME.reset(self.token)


def given(path, *args, **kwargs):
    """Call the course's own function or class `path` ("module:name", under GIVEN_ROOTS:
    torch, solutions, checks) where the student's code runs, e.g. to build the
    nn.MultiheadAttention or model that the student's function is handed. Returns what it
    returned: under the autograder, a stand-in for an object of the student's process (which
    the student's code could have changed: a check trusts only values it reads back)."""
    return runtime().given(path, list(args), kwargs)


def is_module(obj):
    """True for an nn.Module, also one that lives in the student's process."""
    return runtime().kind(obj) == "module"


def is_class(obj):
    """True for a class, also one that lives in the student's process."""
    return runtime().kind(obj) == "class"


class Foreign:
    """What export() makes of an object of the student's that is not plain data."""

    def __init__(self, name):
        self.name = str(name)[:100]

    def __repr__(self):
        return MESSAGES["foreign"].format(name=self.name)


def type_name(obj):
    """The class name of `obj`, also when it lives in the student's process."""
    if isinstance(obj, Foreign):
        return obj.name
    return runtime().type_name(obj)


# What a call reports comes from the student's process, where the student's code could
# have changed anything: the judge takes nothing from it without checking its type.
# (MALFORMED: the template, looked up when it is filled; the chapters' checks use it too.)


class _Template:
    """MESSAGES[key] looked up when it is filled (.format), in the language of that moment:
    for a template other modules import by name."""

    def __init__(self, key):
        self.key = key

    def format(self, **fields):
        return MESSAGES[self.key].format(**fields)


MALFORMED = _Template("malformed")


def take(data, key, *kinds):
    """data[key] of a report (a call's, a load's), required to be an instance of one of
    `kinds`."""
    if not isinstance(data, dict) or key not in data or not isinstance(data[key], kinds):
        fail(MALFORMED.format(what=key))
    return data[key]


def take_error(data, key):
    """data[key] of a report: None, or what attempt() caught: [class name, message,
    shapes] and, from attempt(), where in the student's code and the shapes on that line."""
    error = take(data, key, type(None), list, tuple)
    if error is not None and not (len(error) in (3, 4, 5) and all(isinstance(e, str)
                                                                  for e in error)):
        fail(MALFORMED.format(what=key))
    return error


def differs(got, value):
    """got != value, where a comparison that raises (a multi-element tensor) counts as differing."""
    try:
        return bool(got != value)
    except Exception:
        return True


def _unwalked(value):
    """What export() and revive() do not walk into: dicts, dataclasses (only tuples and
    lists, `depth` levels down, are walked; nested.map_leaves does the walking)."""
    return isinstance(value, dict) or nested.is_dataclass_instance(value)


def _exported(value):
    if isinstance(value, _Tensor):
        return value.detach().clone()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return {"object": type(value).__name__}


def export(value, depth=2):
    """`value` (produced by the student's code) as plain data, as a call reports it.
    Tensors become detached copies; None, numbers, strings and tuples or lists of them
    stay; any other object becomes {"object": its class name} (see revive)."""
    return nested.map_leaves(value, _exported, depth=depth, is_leaf=_unwalked)


def _revived(value):
    if value is None or isinstance(value, (bool, int, float, str, _Tensor)):
        return value
    name = value.get("object") if isinstance(value, dict) else None
    return Foreign(name if isinstance(name, str) else type_name(value))


def revive(value, depth=3):
    """For the judge: what export() produced, with each {"object": name} as a Foreign."""
    return nested.map_leaves(value, _revived, depth=depth, is_leaf=_unwalked)


def raised(error, name):
    """For the judge: fail, as call() does, when attempt() caught an error."""
    if error is None:
        return
    if not (isinstance(error, (list, tuple)) and len(error) in (3, 4, 5)
            and all(isinstance(e, str) for e in error)):
        fail(MALFORMED.format(what=MESSAGES["malformed_error"].format(name=name)))
    kind, message, shapes, where, line = (*error, "", "")[:5]
    if kind == "NotImplementedError":
        fail(MESSAGES["not_implemented"].format(name=name))
    if kind == "CheckFailure" and runtime().own_failures:  # the forbid's, in their Jupyter
        fail(message)
    fail(_weak(diagnose.restate_error(name, kind, message, current_dims(), shapes,
                                      where=where, line=line)
               or diagnose.MESSAGES["raised_plain"].format(name=name, kind=kind,
                                                           message=message, shapes=shapes)))


def construct(cls, *args, **kwargs):
    """Build the student's module cls(*args, **kwargs): (the module or None, {"error": what
    the call raised (attempt()'s list) or None, "module": whether it built an nn.Module}),
    from what the grader sees (the runtime's is_module), never a report of the student's
    process. judge_construct() fails on the data."""
    with torch.random.fork_rng():  # the initial weights, which checks replace, draw from it
        module, error = attempt(cls, *args, **kwargs)
    built = is_module(module)
    return (module if built else None), {"error": error, "module": built}


def size_kwargs(query_size=None, key_size=None, value_size=None, bias=True):
    """The keyword arguments a check passes to MultiHeadAttention(d_model, num_heads, ...)
    (chapters 3 and 5): the input sizes that are given (not None), and bias=False when the
    biases are off; the defaults are left out."""
    kwargs = {k: v for k, v in dict(query_size=query_size, key_size=key_size,
                                    value_size=value_size).items() if v is not None}
    if not bias:
        kwargs["bias"] = False
    return kwargs


def refusal(function, *args, **kwargs):
    """What function(*args, **kwargs) raised, for a check that requires a ValueError: None
    when it raised nothing, ["ValueError", "", ""] for ValueError and its subclasses (the
    student's own too, also raised in the student's process), else [class name, message,
    ""]."""
    with torch.random.fork_rng():  # a call that does not refuse may build a module
        try:
            function(*args, **kwargs)
        except ValueError:
            return ["ValueError", "", ""]
        except Exception as error:
            return [type(error).__name__, str(error), ""]
    return None


def judge_construct(data, shown):
    """Fail unless construct()'s data says the call `shown` (e.g. "MultiHeadAttention(16, 4)")
    built an nn.Module."""
    raised(take_error(data, "error"), shown)
    if not take(data, "module", bool):
        fail(MESSAGES["not_module"].format(shown=shown))


@dataclass
class Observed:
    """One call of the student's function, as observe() reports it: what it returned
    (export()ed), what it raised (attempt()'s [class name, message, shapes], or None), its
    arguments afterwards (export()ed: to see what it changed in place), its keyword
    arguments afterwards ({name: export()ed}), the messages of the warnings it emitted, and
    whether its result carried an autograd graph (which the copy lost) and its result's
    type ([class name, the fields of a named tuple or None]: the copy's type may differ).
    Validated once, when made (see observed())."""
    result: object
    error: object
    args: list
    warnings: list
    kwargs: dict = None
    attached: bool = False
    result_type: tuple = ("NoneType", None)
    trace: list = None   # [(place, code, tensor)] the student's lines computed (traced_records)


def observed(data, count):
    """Observed from the dict a call reported, each field checked (`count` arguments): the
    report of a process that runs the student's code is data, never trusted as it comes."""
    if not isinstance(data, dict) or "result" not in data:
        fail(MALFORMED.format(what=MESSAGES["malformed_report"]))
    error = take_error(data, "error")
    after = take(data, "args", list, tuple)
    messages = take(data, "warnings", list, tuple)
    if len(after) != count or not all(isinstance(m, str) for m in messages):
        fail(MALFORMED.format(what="args"))
    keywords = data.get("kwargs", {})
    if not isinstance(keywords, dict) or not all(isinstance(k, str) for k in keywords):
        fail(MALFORMED.format(what="kwargs"))
    graph = data.get("attached", False)
    kind = data.get("type", [type(data["result"]).__name__, None])
    if not isinstance(graph, bool) or not (
            isinstance(kind, (list, tuple)) and len(kind) == 2 and isinstance(kind[0], str)
            and (kind[1] is None or (isinstance(kind[1], (list, tuple))
                                     and all(isinstance(f, str) for f in kind[1])))):
        fail(MALFORMED.format(what="attached, type"))
    return Observed(data["result"], error, list(after), list(messages), dict(keywords), graph,
                    (kind[0], None if kind[1] is None else tuple(kind[1])),
                    traced_records(data.get("trace")))


def observe(function, *args, name=None, may_change=(), **kwargs):
    """Call the student's function: an Observed (what it returned or raised, its arguments
    afterwards, its warnings). In a notebook the call happens here; under the autograder the
    function is remote and the grader's own runtime in the student's process calls it and
    sends all four back by value (its `observe`): no code of the checks runs there, so the
    student's code has nothing of them to replace. A forbid_spec() block around it reaches
    the call in both cases.

    A call that raised nothing must have left its arguments as they were (see
    expect_unchanged: the tensors among them, the parameters, buffers and mode of a module
    among them); may_change: the arguments (the objects passed) whose change is the
    exercise's documented job (a model a training step updates), left out of that
    comparison; name: the function as the message names it (default: its own name)."""
    watched = watch_arguments(args, kwargs, may_change)
    seen = observed(runtime().observe(function, list(args), kwargs), len(args))
    _keep_trace(seen.trace)
    if seen.error is None:
        expect_unchanged(watched, function, name, seen.args, seen.kwargs)
    return seen


def load_weights(module, weights):
    """Copy weights into the student's module, in place: `weights` {attribute: {part: tensor
    or None}} (e.g. {"q_proj": {"weight": W, "bias": b}}); each tensor goes to
    module.<attribute>.<part> where that is a tensor of its shape (in its dtype and device).
    An attribute may be a dotted path of submodules ("attn.q_proj", "ff.0"); "" names the
    module itself (nn.MultiheadAttention's {"": {"in_proj_weight": W}}).
    Returns {attribute: None (no such attribute) | {part: None (none) | its shape (a list) |
    the class name of what is there instead}}. Under the autograder the grader's own runtime
    in the student's process does the copying (the module's `load_weights`): facts about a
    module come from values the grader sent, then from its outputs on the grader's inputs.
    The report is a Loaded, validated once here whichever runtime made it."""
    return Loaded.of(runtime().load_weights(module, weights), weights)


class Loaded(dict):
    """What load_weights() found: {attribute: None (no such attribute) | {part: None (no
    such part) | its shape (a list of ints) | the class name of what is there instead}},
    for exactly the attributes and parts that were sent. Made by Loaded.of(), which checks
    every entry of the runtime's report (under the autograder, data from the student's
    process), so that a check reads it with slot() and no check parses it by hand."""

    @classmethod
    def of(cls, report, weights):
        if not isinstance(report, dict) or list(report) != list(weights):
            fail(MALFORMED.format(what=MESSAGES["malformed_loaded"]))
        for attr, parts in report.items():
            if parts is None:
                continue
            if not isinstance(parts, dict) or list(parts) != list(weights[attr]) or not all(
                    slot is None or isinstance(slot, str) or (isinstance(slot, list) and all(
                        type(n) is int and n >= 0 for n in slot)) for slot in parts.values()):
                fail(MALFORMED.format(what=MESSAGES["malformed_loaded_at"].format(attr=attr)))
        return cls(report)

    def has(self, attr):
        """Whether the module has the attribute (submodule) `attr`."""
        return self[attr] is not None

    def slot(self, attr, part):
        """What is at module.<attr>.<part>: its shape (a tuple) where it is a tensor, None
        where nothing (or no attribute `attr`) is there, else the class name found."""
        found = self[attr][part] if self.has(attr) else None
        return tuple(found) if isinstance(found, list) else found


def by_owner(state):
    """{"attn.q_proj.weight": t, "in_proj_weight": u} -> {"attn.q_proj": {"weight": t}, "":
    {"in_proj_weight": u}}: a state dict's names as load_weights() takes them."""
    weights = {}
    for name, value in state.items():
        owner, _, part = name.rpartition(".")
        weights.setdefault(owner, {})[part] = value
    return weights


def read_back(module, names):
    """{dotted name: module.<name> read back by value: a copy of the tensor, None where there
    is none, a Foreign naming anything else}, e.g. the parameters after the student's call."""
    values = {}
    for name in names:
        value = module
        for part in name.split("."):
            value = getattr(value, part, None)
        values[name] = (export(value) if value is None or isinstance(value, _Tensor)
                        else Foreign(type_name(value)))
    return values


def call_keeping(function, *args, name=None, may_change=(), **kwargs):
    """call() observed: (result, the arguments as the student's code left them). A
    forbid_spec() block around it reaches the call, under the autograder too. may_change:
    as observe()'s."""
    name = name or getattr(function, "__name__", "your function")
    seen = observe(function, *args, name=name, may_change=may_change, **kwargs)
    raised(seen.error, name)
    return revive(seen.result), [revive(a) for a in seen.args]


# ---------------------------------------------------------------------------------------
# The promises every exercise makes, kept around every call of the student's code
# ---------------------------------------------------------------------------------------
# An exercise promises more than its values (issue 20: mistakes of these kinds got full
# marks), and each promise is kept here once, for every chapter:
# - it leaves its inputs as they were (expect_unchanged, run by call(), call_keeping() and
#   observe() around every call): the tensors among its arguments (one level into tuples
#   and lists) and the parameters, buffers and mode of each nn.Module among them compare
#   equal before and after the call, unless the check names the argument in
#   `may_change=` because changing it is the exercise's documented job (a training step
#   updates its model, load_from_torch fills `ours`);
# - it returns the kind of value its instructions document (expect_type: a Python float
#   is not a 0-d tensor, a count is an int; expect_named_tuple: RelationScores, not a
#   plain tuple);
# - a result the instructions call a measurement, computed without gradients, carries no
#   autograd graph (expect_no_graph), in the documented dtype (expect_dtype);
# - a module it builds owns its tensors (expect_own_storage: none shares storage with the
#   module it was made from);
# - a behaviour that depends on a starting state is right from each: a check calls from
#   each (a module in training and in eval mode, an empty and a filled cache), and every
#   call must give a module argument back in the mode it came in (expect_unchanged).
# Every sentence is a template of MESSAGES (at the top), filled with named fields.
_MODE_WORDS = {True: "mode_training", False: "mode_eval"}   # MESSAGES' keys


def _described_tensor(tensor):
    return MESSAGES["described_tensor"].format(dtype=str(tensor.dtype)[6:],
                                               shape=tuple(tensor.shape))


def watch_arguments(args, kwargs, may_change=()):
    """What a call must leave as it was, copied before the call: [(place, snapshot, module)]
    with place (i, None, j) for positional argument i (j: its item j, or None), (None, key,
    j) for a keyword argument, snapshot a tensor's copy or a module's state ({"training",
    "tensors"}, see checks.operations.module_state), and module the module itself (read
    again after the call), None for a tensor. may_change: the argument objects left out.
    Only tensors are copied (cheap: a check's inputs are small); a module's are read where
    it lives (under the autograder, by value)."""
    kept = [id(value) for value in may_change]
    watched = []
    for place, value in [((i, None), a) for i, a in enumerate(args)] + \
            [((None, key), v) for key, v in kwargs.items()]:
        if id(value) in kept:
            continue
        items = [(None, value)]
        if isinstance(value, (tuple, list)):
            items = list(enumerate(value))
        for j, item in items:
            if isinstance(item, _Tensor) and id(item) not in kept:
                watched.append(((*place, j), item.detach().clone(), None))
            elif j is None and is_module(item):
                state = _module_state(item)
                if state is not None:
                    watched.append(((*place, None), state, item))
    return watched


def _where_it_lives(path, obj):
    """given(path, obj): the course's function `path` run where `obj` lives (under the
    autograder, in the student's process, for an object of theirs; here for the grader's
    own, which the student's process cannot be sent)."""
    try:
        return given(path, obj)
    except TypeError:
        return LOCAL.given(path, [obj], {})


def _module_state(module):
    """checks.operations.module_state(module) read where the module lives, copied: its mode
    and {name: tensor} of its parameters and buffers; None where it reports none."""
    state = _where_it_lives("checks.operations:module_state", module)
    if not (isinstance(state, dict) and isinstance(state.get("training"), bool)
            and isinstance(state.get("tensors"), dict)):
        return None
    return {"training": state["training"],
            "tensors": {str(k): v.detach().clone() for k, v in state["tensors"].items()
                        if isinstance(v, _Tensor)}}


def _argument_after(place, args, kwargs):
    """The argument at `place` (see watch_arguments) among the arguments after the call."""
    i, key, j = place
    value = args[i] if i is not None else (kwargs or {}).get(key)
    if j is not None:
        value = value[j] if isinstance(value, (tuple, list)) and j < len(value) else None
    return value


def _argument_label(place, function):
    """How the message names the argument at `place`: as the student's code names it (its
    parameter's name, read where the function lives), "argument 2" where unknown."""
    i, key, j = place
    label = key
    if i is not None:
        names = _where_it_lives("checks.operations:parameter_names", function)
        names = names if isinstance(names, list) else []
        label = (str(names[i]) if i < len(names)
                 else MESSAGES["argument_number"].format(number=i + 1))
    return label if j is None else f"{label}[{j}]"


def _same_tensor(before, after):
    """True when the tensor `after` has `before`'s shape, dtype and values (NaN where NaN)."""
    if not (isinstance(after, _Tensor) and tuple(after.shape) == tuple(before.shape)
            and after.dtype == before.dtype):
        return False
    after = after.detach().to(before.device)
    return _equal(after, before) or diagnose.changed_in_place("", before, after) is None


def _tensor_change(label, before, after):
    """The sentence that says how the tensor argument `label` changed: `after`, not
    `before` (diagnose's in-place family, or MESSAGES["reshaped"])."""
    if isinstance(after, _Tensor) and tuple(after.shape) == tuple(before.shape) \
            and after.dtype == before.dtype:
        return diagnose.changed_in_place(MESSAGES["argument_its"].format(label=label), before,
                                         after.detach().to(before.device))
    shown = (_described_tensor(after) if isinstance(after, _Tensor)
             else MESSAGES["reshaped_gone"])
    found = isinstance(after, _Tensor) and diagnose.wrong_shape(
        tuple(after.shape), tuple(before.shape), current_dims())
    words = MESSAGES["reshaped_words"].format(found=found) if found else ""
    return MESSAGES["reshaped"].format(argument=label, before=_described_tensor(before),
                                       after=shown, words=words)


def _module_change(label, before, after):
    """The sentence that says how the module argument label() (a function: the name is read
    only for a message) changed from its state `before` to `after` (a tensor changed, gone
    or reshaped; else its mode), or None."""
    changed = [(tensor, old) for tensor, old in before["tensors"].items()
               if not _same_tensor(old, after["tensors"].get(tensor))]
    if changed:
        tensor, old = changed[0]
        more = MESSAGES["more_tensors"].format(count=len(changed) - 1) if changed[1:] else ""
        return _tensor_change(MESSAGES["module_tensor"].format(module=label(), tensor=tensor),
                              old, after["tensors"].get(tensor)) + more
    if after["training"] == before["training"]:
        return None
    return diagnose.wrong_state(MESSAGES["mode"].format(argument=label()),
                                MESSAGES[_MODE_WORDS[after["training"]]],
                                MESSAGES[_MODE_WORDS[before["training"]]], MESSAGES["mode_why"])


def expect_unchanged(watched, function, name, args, kwargs):
    """Fail, naming the argument and what changed, unless every argument watch_arguments()
    copied before the call is the same after it. args, kwargs: the arguments as the call
    left them (the objects themselves, or the copies a report holds; a keyword argument a
    report lacks is not compared); a module is read again where it lives."""
    for place, before, module in watched:
        if module is not None:
            state = _module_state(module)
            reason = state and _module_change(
                lambda: _argument_label(place, function), before, state)
        elif place[1] is not None and place[1] not in kwargs:
            continue
        else:
            after = _argument_after(place, args, kwargs)
            reason = None if _same_tensor(before, after) else _tensor_change(
                _argument_label(place, function), before, after)
        if reason:
            shown = name or getattr(function, "__name__", None) or type_name(function)
            # (a mode's sentence says what to do; a tensor's, the advice)
            advice = "" if MESSAGES["mode_why"] in reason else " " + MESSAGES["unchanged"]
            fail(diagnose.explained(shown, reason) + advice)


# the documented kinds of value, in the exercises' words (expect_type)
KINDS = {float: "kind_float", int: "kind_int", bool: "kind_bool", tuple: "kind_tuple",
         _Tensor: "kind_tensor"}   # MESSAGES' keys


def expect_type(value, kinds, name, hint="", documented=None):
    """Fail unless `value`, what the call `name` returned (as the student reads it:
    "count_parameters(16, 4)"), is of one of the Python types `kinds` (a type or a tuple of
    them) that the exercise documents, with the kind family's sentence (diagnose.kind: a
    0-d tensor where a Python float is documented gets the .item() hint; a bool is no int;
    numpy's float64 is a float) and `hint`. documented: the kind in the exercise's words
    (default: KINDS's). An nn.Module of the student's process fits nn.Module; any other
    object of theirs is named by its class. Returns `value`."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    documented = documented or MESSAGES["kinds_or"].join(
        MESSAGES[KINDS[kind]] if kind in KINDS else
        MESSAGES["kind_other"].format(name=kind.__name__) for kind in kinds)
    if torch.nn.Module in kinds and is_module(value):
        return value
    plain = value is None or isinstance(value, (_Tensor, tuple, list, dict, bool, int, float,
                                                str)) or isinstance(value, kinds)
    shown = value if plain else type(type_name(value), (), {})()
    reason = diagnose.kind(name, documented, shown, kinds=kinds)
    if reason:
        fail(MESSAGES["kind"].format(reason=reason, hint=f" {hint}" if hint else ""))
    return value


def expect_named_tuple(seen, documented, fields, name):
    """Fail unless the call `seen` (an Observed) returned a named tuple of the class
    `documented` with `fields` (RelationScores, ("prev", "first")), with the kind family's
    sentence: what it returned where the exercise documents that class (a copy by value
    keeps no names, so the class comes from the call's report)."""
    class_name, got_fields = seen.result_type
    if class_name == documented and got_fields == tuple(fields):
        return
    returned = revive(seen.result)
    if isinstance(returned, tuple) and got_fields is not None:
        returned = type(class_name, (), {})()   # another named tuple: said by its class
    reason = diagnose.kind(name, MESSAGES["named_kind"].format(documented=documented,
                                                                fields=", ".join(fields)),
                           returned, kinds=(_Never,))
    fail(MESSAGES["kind"].format(reason=reason, hint=" " + MESSAGES["named"].format(
        documented=documented, fields=", ".join(fields))))


class _Never:
    """No value is one: diagnose.kind() then describes whatever came back."""


def expect_no_graph(result, name):
    """Fail when what the call `name` returned carries an autograd graph where the exercise
    documents a measurement computed without gradients (@torch.no_grad()). result: an
    Observed (its `attached`: the copy it holds has lost the graph) or what call() returned
    (checks.operations.attached). The call must run with gradients enabled, on inputs or a
    model that require them, for the promise to be exercised."""
    graph = result.attached if isinstance(result, Observed) else operations.attached(result)
    if graph:
        fail(MESSAGES["graph"].format(name=name))


def expect_dtype(value, dtype, name, whose):
    """Fail unless the tensor `value` (what `name` returned) has the documented `dtype`,
    with the state family's sentence; whose: what fixes it, in the exercise's words ("the
    dtype of the model's parameters")."""
    if isinstance(value, _Tensor) and value.dtype != dtype:
        fail(diagnose.explained(name, diagnose.wrong_state("dtype", value.dtype, dtype,
                                                           f" ({whose})"))
             + " " + MESSAGES["dtype"])


def expect_own_storage(module, source, name, source_name):
    """Fail unless every parameter and buffer of `module` (what the call `name` built from
    the module `source_name`, e.g. a pruned copy) has a storage of its own: none shares
    memory with a tensor of `source`, so that changing one never changes the other. The
    addresses are read where the modules live (checks.operations.storages)."""
    ours = _where_it_lives("checks.operations:storages", module)
    theirs = _where_it_lives("checks.operations:storages", source)
    if not (isinstance(ours, dict) and isinstance(theirs, dict)):
        return
    owners = {address: tensor for tensor, address in theirs.items()}
    for tensor, address in ours.items():
        if address in owners and address:   # (an empty tensor has no memory to share)
            fail(MESSAGES["shared"].format(name=name, tensor=tensor, source=source_name,
                                           other=owners[address]))


def max_error(actual, expected):
    return (actual.double() - expected.double()).abs().max().item()


def excess(actual, expected, dtype=None, scale=None, condition=1.0):
    """max |actual - expected| / tolerance: <= 1 is within the tolerance of `dtype` (see
    the rule above), inf where NaN or inf differ.

    scale: the magnitude of the values the result is made from (a tensor that broadcasts
    against `expected`, or a number); default: max |expected|. condition: how much the
    computation amplifies its roundings (a tensor that broadcasts, or a number), e.g.
    softmax_condition() for a softmax's weights.
    """
    if actual.numel() == 0:
        return 0.0
    return _ratios(actual, expected, dtype, scale, condition).max().item()


def _ratios(actual, expected, dtype=None, scale=None, condition=1.0):
    """|actual - expected| / tolerance, entry by entry (see excess())."""
    rtol, atol = tolerance(dtype or expected.dtype)
    a, e = actual.detach().double(), expected.detach().double().to(actual.device)
    if scale is None:
        scale = e.abs().max()
    scale = torch.as_tensor(scale, dtype=torch.float64).to(a.device)
    condition = torch.as_tensor(condition, dtype=torch.float64).to(a.device)
    # the amplified rounding of the inputs adds to the roundings of the chain
    bound = (atol * scale + rtol * e.abs()) * (1 + (condition - 1) / ROUNDINGS)
    error = (a - e).abs()
    zero = torch.zeros((), dtype=torch.float64, device=a.device)
    inf = torch.full((), float("inf"), dtype=torch.float64, device=a.device)
    ratio = _where(bound > 0, error / bound.clamp_min(1e-300), _where(error > 0, inf, zero))
    ratio = _where(a == e, zero, _where(_isnan(ratio), inf, ratio))  # equal infinities pass
    return _where(_isnan(a) | _isnan(e), inf, ratio)                    # NaN never does


def softmax_condition(scores, dim=-1):
    """The condition of a softmax's weights (for excess()), entry by entry:
    1 + |s| + |max of its row| + log(row length). A correct softmax may compute
    exp(s - logsumexp(s)): s and logsumexp(s) (between the row's maximum and the maximum +
    log(row length)) are known to within u times their magnitude once rounded, and exp
    turns that absolute error into the same relative error of the weight. exp(s - max) is
    exact where s is near the maximum; logsumexp is not, and is just as correct."""
    s = scores.detach().double()
    top = s.amax(dim=dim, keepdim=True).abs()
    return 1.0 + s.abs() + top + math.log(max(s.shape[dim], 1)) if s.dim() else 1.0 + s.abs()


def close(actual, expected, dtype=None, scale=None, condition=1.0):
    """True when `actual` matches `expected` within the tolerance of `dtype`:
    |actual - expected| <= (atol * scale + rtol * |expected|) * (1 + (condition - 1) /
    ROUNDINGS), i.e. (ROUNDINGS + condition - 1) eps (scale + |expected|) (see above)."""
    if tuple(actual.shape) != tuple(expected.shape):
        return False
    return excess(actual, expected, dtype, scale, condition) <= 1.0


def beyond_tolerance(actual, expected, dtype=None, scale=None, condition=1.0):
    """not close(...), for a check that requires two results to differ (differs() compares
    plain values). It reads the ratios without excess(), which measures only the
    comparisons that must hold (the margins of tests/test_tolerances.py)."""
    if tuple(actual.shape) != tuple(expected.shape):
        return True
    if actual.numel() == 0:
        return False
    return _ratios(actual, expected, dtype, scale, condition).max().item() > 1.0


def expect_close(actual, expected, name, bugs=None, hint=None, dtype=None, scale=None,
                 condition=1.0, axes=None, mistakes=None, earlier=None):
    """Require `actual` == `expected` within the dtype's tolerance (scale, condition: see
    excess()).

    bugs: {message: tensor}, outputs that known mistakes produce on the same input; a
    match names the mistake (within the same tolerance). hint: what to look at when no
    known bug matches. axes: the axes' names, for the message that says where the numbers
    differ when no known bug matches (where_it_differs()). When no known bug matches, the
    families of checks/diagnose.py try to name the mistake by its shape first; mistakes:
    {sentence: output} of the exercise's formula with one step left out or moved
    (diagnose.Formula.mistakes(), computed by a @reference). earlier: Intermediate()s the
    result is made from (the weights an output is made from), compared, in their order,
    when no family names the result's mistake: the first that differs, and what a family
    says of it, is named instead of the generic message.
    """
    reason = shape_reason(actual, expected, dtype, axes, mistakes)
    if reason:
        fail(diagnose.explained(name, reason))
    expect_tensor(actual, name, shape=expected.shape)
    if not bool(_isfinite(actual.detach()).all()) and bool(_isfinite(expected).all()):
        # the non-finite family says how many and where, in the exercise's words; a step of
        # the formula done another way that gives these NaN or inf (a mask read the other
        # way round) names the mistake, else the exercise's hint says what usually puts them
        where = diagnose.nonfinite(actual.detach(), expected.detach(), current_dims(), axes)
        step = diagnose.step_nonfinite(actual, mistakes, _same_within(
            dtype or expected.dtype, scale, condition))
        if step:
            where = diagnose.MESSAGES["nonfinite_step"].format(where=where, step=step)
        fail(MESSAGES["nonfinite"].format(name=name, where=where,
                                          hint=hint or MESSAGES["nonfinite_hint"]))
    if close(actual, expected, dtype, scale, condition):
        return
    bugs = consulted(bugs)  # {} when measuring the families alone (tests/test_catalogue.py)
    matches = [message for message, candidate in (bugs or {}).items()
               if candidate is not None and close(actual, candidate, dtype, scale, condition)]
    if len(matches) == 1:
        fail(MESSAGES["wrong_bug"].format(name=name, bug=matches[0]))
    if matches:  # on these inputs the mistakes give the same numbers: name them all
        fail(MESSAGES["wrong_bugs"].format(name=name, count=len(matches),
                                           bugs=MESSAGES["wrong_bugs_or"].join(matches)))
    reason = diagnose.explain(
        actual.detach(), expected.detach(), _same_within(dtype or expected.dtype, scale,
                                                         condition),
        _ratios(actual, expected, dtype, scale, condition) > 1, current_dims(), axes,
        mistakes)
    if reason:
        fail(diagnose.explained(name, reason))
    for step in earlier or ():
        first = step.differs()
        if first:
            fail(diagnose.explained(name, diagnose.MESSAGES["earlier"].format(
                what=step.name, reason=first)))
    reason = _traced_reason(actual, mistakes, _same_within(dtype or expected.dtype, scale,
                                                           condition))
    if reason:
        fail(_weak(diagnose.explained(name, reason)))
    fail(_weak(MESSAGES["wrong"].format(
        name=name, error=max_error(actual, expected),
        where=where_it_differs(actual, expected, axes, dtype, scale, condition),
        hint=hint or MESSAGES["wrong_hint"]), replaced=True))


def shape_reason(actual, expected, dtype=None, axes=None, mistakes=None, scale=None,
                 condition=1.0):
    """What the families say of `actual`, a tensor of another shape than `expected` (a
    step of the formula done another way that gives another shape, a sum over another axis,
    the right values with the axes in another order, axes averaged away or merged), or
    None: named before the shape is. scale, condition: as expect_close's (their largest
    value where they do not broadcast to a part)."""
    if not (isinstance(actual, _Tensor) and tuple(actual.shape) != tuple(expected.shape)):
        return None
    same = _same_within(dtype or expected.dtype, scale, condition)
    got, want = actual.detach(), expected.detach()
    return (diagnose.one_step(got, mistakes, same)
            or diagnose.permuted(got, want, same, current_dims(), axes)
            or diagnose.reduced_many(got, want, same, current_dims(), axes)
            or diagnose.fewer_axes(got, want, same, current_dims(), axes)
            or diagnose.part_of(got, want, same, current_dims(), axes))


def named_by_shape(actual, expected, name, dtype=None, axes=None, mistakes=None, scale=None,
                   condition=1.0):
    """Fail where a family names `actual`, a result of another shape than `expected`
    (shape_reason: a step done another way, Q Q^T or K Q^T; the right values in another
    layout), before a shape check says only which axis is off."""
    reason = shape_reason(actual, expected, dtype, axes, mistakes, scale, condition)
    if reason:
        fail(diagnose.explained(name, reason))


@dataclass
class Intermediate:
    """A value the student's result is made from that the check holds (the weights an
    output is made from), with its expected value, for expect_close's `earlier`."""
    name: str
    actual: object
    expected: _Tensor
    dtype: object = None
    condition: object = 1.0
    axes: object = None
    mistakes: object = None

    def differs(self):
        """What a family says of how it differs (a sentence), or None where it is right
        or no family names it."""
        if not (isinstance(self.actual, _Tensor)
                and tuple(self.actual.shape) == tuple(self.expected.shape)):
            return None
        if not bool(_isfinite(self.actual.detach()).all()):
            return None
        return family_reason(self.actual, self.expected, self.dtype, None, self.condition,
                             self.axes, self.mistakes)


def _same_within(dtype, scale, condition):
    """same(a, b) for the families of checks/diagnose.py: close() with the tolerance of the
    comparison at hand; for a part of the output (a shifted slice), where a `scale` or
    `condition` tensor no longer broadcasts, with their largest value."""
    def same(a, b):
        try:
            return close(a, b, dtype, scale, condition)
        except RuntimeError:
            top = [None if s is None else float(torch.as_tensor(s).double().max())
                   for s in (scale, condition)]
            return close(a, b, dtype, top[0], 1.0 if top[1] is None else top[1])
    return same


def where_it_differs(actual, expected, axes=None, dtype=None, scale=None, condition=1.0):
    """A sentence saying where `actual` is off (beyond the tolerance) from `expected`: how
    many entries, and along each axis where only some indices hold wrong entries, which
    ones (e.g. "only head 2", "only positions 4, 5"). axes: a name per axis, e.g.
    ("B", "num_heads", "Lq", "Lk") or the string "(B, num_heads, Lq, Lk)"; a name holding
    "{}" gets the indices in its place (("B", "head {}"): "only at head 2")."""
    wrong = _ratios(actual, expected, dtype, scale, condition) > 1          # (same shape)
    if isinstance(axes, str):
        axes = [a.strip() for a in axes.strip("()").split(",")]
    if not axes or len(axes) != wrong.dim():
        axes = [None] * wrong.dim()
    parts = []
    for d, axis in enumerate(axes):
        others = [o for o in range(wrong.dim()) if o != d]
        hit = wrong.any(dim=others) if others else wrong                    # (size of d,)
        if 0 < int(hit.sum()) < hit.numel():
            where = [str(i) for i in hit.nonzero().flatten().tolist()]
            shown = ", ".join(where[:8]) + (", ..." if len(where) > 8 else "")
            # a name with "{}" reads with the indices in it ("head {}": "head 1, 2")
            parts.append(axis.format(shown) if axis and "{}" in axis
                         else MESSAGES["differs_index"].format(
                             indices=shown,
                             axis=axis or MESSAGES["differs_axis"].format(index=d)))
    dtype = dtype or actual.dtype
    place = (MESSAGES["differs_only"].format(parts="; ".join(parts)) if parts
             else MESSAGES["differs_everywhere"])
    return MESSAGES["differs"].format(count=int(wrong.sum()), total=wrong.numel(), dtype=dtype,
                                      place=place)




def call(function, *args, name=None, may_change=(), **kwargs):
    """Call the student's function; turn its exceptions into messages that say where, and
    fail when it changed an argument that the exercise leaves as it was (expect_unchanged;
    may_change: the argument objects whose change is its documented job, e.g. the model of
    a training step). Under the autograder the arguments travel by value, so a call that
    needs no gradient is observed (observe(): the arguments come back as the call left
    them). One whose inputs require grad is called directly (the runtime's attempt_traced:
    under the autograder the student's process notes the torch call that raises in it and
    sends the shapes on the raising line with the error, so that its message is the kit's),
    so that its result joins the grader's graph; there its arguments stay in the student's
    process, so the same call is
    observed once more (its arguments sent without their graph) and the arguments it sends
    back are compared with the ones copied before the first call (in the student's Jupyter
    and the kit the first call's own arguments are compared)."""
    name = name or getattr(function, "__name__", "your function")
    local = runtime() is LOCAL
    if not local and not any(isinstance(t, _Tensor) and t.requires_grad
                             for t in nested.flatten((list(args), kwargs), objects=False)):
        seen = observe(function, *args, name=name, may_change=may_change, **kwargs)
        raised(seen.error, name)
        return revive(seen.result)
    watched = watch_arguments(args, kwargs, may_change)
    # (the grader's runtime makes the call itself, and the student's process notes the torch
    # call that raises in it, so that an error carries the same line shapes on both sides)
    result, error, trace = runtime().attempt_traced(function, list(args), kwargs)
    _keep_trace(traced_records(trace))
    raised(error, name)
    if local:
        expect_unchanged(watched, function, name, list(args), kwargs)
        return result
    # a module among the arguments lives in the student's process: the second call's
    # comparison reads it again there, against its state before the first call
    seen = observed(runtime().observe(function, list(args), kwargs), len(args))
    _keep_trace(seen.trace)
    if seen.error is None:
        expect_unchanged(watched, function, name, seen.args, seen.kwargs)
    return result


# ---------------------------------------------------------------------------------------
# Forbidden shortcuts as data: one spec per exercise
# ---------------------------------------------------------------------------------------
# Whether a shortcut was used is a fact about the student's *code*, which only their own
# process could report at run time, and a process that runs their code can be told to lie.
# So each checks module declares FORBIDS, a tuple of Forbidden specs, read twice:
# - by the grader (autograde/forbids.py), which analyses the submitted source with `ast`
#   (no student code runs there): a forbidden name in the exercise's cell, or code anywhere
#   in the submission that could switch a run-time check off (reaching the checks, torch's
#   dispatch internals, threads, eval, ...), costs the points of the spec's tests;
# - by forbid_spec() around the student's call, in their own Jupyter, where it only
#   teaches: the message arrives the moment the shortcut runs.

# (Forbidden, and forbid_spec() that only teaches, are in checks.operations: the forbid
# runs where the student's code runs.)


# ---------------------------------------------------------------------------------------
# Answers: computed by @reference functions in the grader, replayed from fixtures in the kit
# ---------------------------------------------------------------------------------------

# autograde/kit.py writes `KIT = True` into the student's copy of this module.
KIT = False
FIXTURES = Path(__file__).resolve().parent / "fixtures"


class _Call:
    """One run of a public check: its key and how often each @reference ran in it."""

    def __init__(self, key, dims=None):
        self.key, self.counts = key, {}
        self.dims = dims or {}   # the exercise's named sizes (diagnose.named_dims)
        self.traces = []   # the traces of the student's last calls (_keep_trace), latest last
        self.steps = []    # [(mistakes, step values)] of step_mistakes(), for the trace family
        self.weak = []     # [(message, replaced)] of the failures that name no cause (_weak)
        # {slot: (signature, result)} of the @reference answers given in this run; a rerun
        # of the check for the repair family is given them again (`answered`), as the kit is
        # given its fixtures' (they depend on the check's arguments only), not recomputed
        self.answers, self.answered = {}, None

    def next_slot(self, name):
        index = self.counts.get(name, 0)
        self.counts[name] = index + 1
        return f"{name}#{index}"


_CURRENT = contextvars.ContextVar("checks_call", default=None)
# {call key: {slot: (signature, result)}} inside recording() (autograde/kit.py)
_RECORDING = contextvars.ContextVar("checks_recording", default=None)


def current_dims():
    """{name: size} of the exercise's quantities in the check that runs (its parameters,
    see diagnose.named_dims); {} outside a check."""
    call = _CURRENT.get()
    return dict(call.dims) if call is not None else {}


# The per-bug tables (the `bugs` of expect_close, of kv's counts) are on unless
# COURSE_BUG_TABLES=off: with them off, only the families of checks/diagnose.py name a wrong
# output (the measurement of tests/test_catalogue.py). Read by consulted() only.
TABLES = os.environ.get("COURSE_BUG_TABLES", "on") != "off"
# how many non-empty tables the checks consulted with TABLES on: a grading that consulted none
# gives the same messages with them off (tests/chapter.py's Chapter.graded reads it)
TABLES_CONSULTED = 0


def consulted(table):
    """A per-bug table ({message: what the mistake gives}) as a check reads it: {} with the
    tables off; a non-empty one read with them on counts in TABLES_CONSULTED."""
    global TABLES_CONSULTED
    TABLES_CONSULTED += bool(TABLES and table)
    return (table or {}) if TABLES else {}


_STORED = None


class recording:
    """Context manager: inside, every answer a @reference function gives within a check is
    kept in the dict it returns ({call key: {slot: (signature, result)}}): the fixtures
    that autograde/kit.py records for the kit."""

    def __enter__(self):
        self.kept = {}
        self.token = _RECORDING.set(self.kept)
        return self.kept

    def __exit__(self, *exc):
        _RECORDING.reset(self.token)


def _plain(value):
    return repr(value) if isinstance(value, (torch.dtype, torch.device)) else value


def call_key(function, bound):
    """'module.check(name=value, ...)': the check's parameters (those with a default: the
    student's function or class comes first, without one), which fix its inputs."""
    module = function.__module__.rsplit(".", 1)[-1]
    parameters = inspect.signature(function).parameters
    shown = [f"{name}={_plain(value)!r}" for name, value in bound.arguments.items()
             if parameters[name].default is not inspect.Parameter.empty]
    return f"{module}.{function.__name__}({', '.join(shown)})"


def check(function):
    """Decorator of a public check: the answers its @reference functions produce are stored
    under call_key(), so the kit can find them for the same call."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def run(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        outer = _CURRENT.get()
        call = _Call(call_key(function, bound), diagnose.named_dims(bound.arguments))
        token = _CURRENT.set(call)
        try:
            return function(*args, **kwargs)
        except CheckFailure as failure:
            if outer is None:   # (a check run inside another is repaired with it)
                _repair(failure, function, signature, bound, call)
            raise
        finally:
            _CURRENT.reset(token)
    return run


# ---------------------------------------------------------------------------------------
# The repair family: the one edit of the student's code with which the check passes
# ---------------------------------------------------------------------------------------
# A teacher who reads wrong code looks for the one small change that makes it right. Where a
# check failed with a message that names no cause (the generic "is wrong", the student's
# error restated, a wrong shape or the trace family's symptom: _weak marks them where they
# are raised; a per-bug table's or a family's named cause is kept as it is, which also
# bounds the cost), the check is run again with each of checks.repair's one-edit variants of
# the student's object in its place (checks.operations.mutants, made where the object lives,
# most likely first), output hidden, nothing recorded, no repair inside; the first with which
# the whole check passes is named: its sentence replaces the generic message, or leads the
# others. The verdict never changes: this only runs once the check has failed, and only
# rewrites its message; anything that goes wrong in it leaves the message as it was.
# A safety cap on the whole search (the count cap: repair.MOST); under the autograder less,
# where the test cell's or the notebook's time is short (RemoteRuntime.repair_seconds), so
# that a search never costs a later cell its time. (A fault of the student's process in it,
# a SubmissionFault, is no Exception: it goes on to the grader, as in any call.)
REPAIR_SECONDS = 60.0
_REPAIRING = contextvars.ContextVar("checks_repairing", default=False)


def _weak(message, replaced=False):
    """`message`, noted in the check that runs as a failure that names no cause (replaced:
    one the repair family's sentence replaces, the generic "is wrong"; else it leads)."""
    call = _CURRENT.get()
    if call is not None and message:
        call.weak.append((message, replaced))
    return message


def repair_descriptions(found):
    """[(mutant, description)] of what a runtime's mutants() returned, each description
    checked: under the autograder they come from the student's process, which could lie
    (it can only change the words of a message: the check itself is run again here), so
    each field is plain bounded text; [] where the report is not one."""
    fields = ("code", "edited", "kind", "before", "after", "function", "step")
    kept = []
    if not isinstance(found, (list, tuple)):
        return []
    for entry in list(found)[:repair.MOST]:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 2
                and isinstance(entry[1], dict)):
            return []
        about = entry[1]
        if not (all(isinstance(about.get(key), str) and len(about[key]) <= operations.LINE_TEXT
                    for key in fields)
                and type(about.get("line")) is int and 0 < about["line"] < 100_000
                and about["kind"] in repair.KINDS):
            return []
        kept.append((entry[0], {key: about[key] for key in fields + ("line",)}))
    return kept


def _repair(failure, function, signature, bound, call):
    """Lead or replace the message of `failure` (a CheckFailure of the check `function`,
    called with `bound`, run as `call`) with the repair family's sentence, where its message
    is one _weak noted and an edit makes the check pass; else leave it. Never raises."""
    message = str(failure)
    weak = [(text, replaced) for text, replaced in call.weak if text in message]
    if _REPAIRING.get() or not weak:
        return
    try:
        about = _first_repair(function, signature, bound, call)
    except Exception:   # the search is only ever an extra: the message stays
        return
    except BaseException as fault:  # (the student's process failed under a mutant: the
        if isinstance(fault, (KeyboardInterrupt, SystemExit)):  # autograder's fault, which
            raise                       # costs no later cell: the runtime has it restarted)
        runtime().lost(fault)
        return
    if about is None:
        return
    sentence = diagnose.repaired(about)
    text, replaced = weak[-1]
    if replaced and text == message:
        failure.args = (MESSAGES["repaired"].format(sentence=sentence),)
    else:
        failure.args = (MESSAGES["repaired_lead"].format(sentence=sentence, message=message),)


def _first_repair(function, signature, bound, call):
    """The description of the first mutant of the student's objects (the check's arguments
    without a default: the student's function, class or module, first) with which the
    check `function` passes, or None (none does, or the time cap is reached)."""
    start, budget = time.monotonic(), runtime().repair_seconds(REPAIR_SECONDS)
    parameters = signature.parameters
    students = [name for name, value in bound.arguments.items()
                if parameters[name].default is inspect.Parameter.empty
                and parameters[name].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                              inspect.Parameter.POSITIONAL_ONLY)]
    for name in students:
        if runtime().kind(bound.arguments[name]) == "object":
            continue
        for mutant, about in repair_descriptions(runtime().mutants(bound.arguments[name])):
            if time.monotonic() - start > budget:
                return None
            arguments = dict(bound.arguments, **{name: mutant})
            if _passes(function, signature.bind(**arguments), call):
                return about
    return None


def _passes(function, bound, call):
    """True when the check `function` passes with the arguments `bound` (a mutant in place
    of the student's object): run as `call` ran (its key and sizes: the kit replays the same
    answers), its output hidden, nothing recorded, no repair inside, the random state as it
    was."""
    rerun = _Call(call.key, call.dims)
    rerun.answered = call.answers
    tokens = (_CURRENT.set(rerun), _REPAIRING.set(True), _RECORDING.set(None))
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(
                io.StringIO()), warnings.catch_warnings(), torch.random.fork_rng():
            warnings.simplefilter("ignore")
            function(*bound.args, **bound.kwargs)
        return True
    except Exception:
        return False
    finally:
        _RECORDING.reset(tokens[2])
        _REPAIRING.reset(tokens[1])
        _CURRENT.reset(tokens[0])


def _signature_of_leaf(value):
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype)[6:]}{list(value.shape)}"
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
        return repr(value)[:80]
    return type(value).__name__


def _signature_of(container, items):
    if isinstance(container, dict):
        return "{" + ",".join(f"{_signature_of_leaf(k)}:{item}"
                              for k, item in zip(container, items)) + "}"
    return "(" + ",".join(items) + ")"


def _signature(value, depth=3):
    """What a reference's arguments look like (shapes and dtypes, not values): replaying a
    stored answer for arguments of another shape is a bug of the checks, caught here."""
    return nested.fold(value, _signature_of_leaf, _signature_of, depth=depth,
                       is_leaf=nested.is_dataclass_instance)


def reference(function):
    """Decorator of a function that computes an answer (an expected output, a catalogued
    bug's output, or the fixed inputs of a check): it runs in the grader and when fixtures
    are recorded; in the student's kit its body is gone and its result comes from them."""
    name = f"{function.__module__.rsplit('.', 1)[-1]}.{function.__qualname__}"

    @functools.wraps(function)
    def answer(*args, **kwargs):
        call = _CURRENT.get()
        if call is None:
            if KIT:
                fail(MESSAGES["kit_outside"].format(name=name, reinstall=MESSAGES["reinstall"]))
            return function(*args, **kwargs)
        slot = call.next_slot(name)
        signature = _signature((args, kwargs))
        if KIT:
            return _replay(call.key, slot, signature)
        if call.answered is not None and call.answered.get(slot, (None,))[0] == signature:
            return _copy(call.answered[slot][1])
        # references called by this one are part of its answer: not stored on their own
        token = _CURRENT.set(None)
        try:
            result = function(*args, **kwargs)
        finally:
            _CURRENT.reset(token)
        if call.answered is None:
            call.answers[slot] = (signature, _copy(result))
        kept = _RECORDING.get()
        if kept is not None:
            kept.setdefault(call.key, {})[slot] = (signature, result)
            kept[call.key].update({f"{slot}@{spoken}": (signature, texts) for spoken, texts
                                   in _in_other_languages(function, args, kwargs, result)})
        return result
    answer.reference = True
    return answer


def _replay(key, slot, signature):
    global _STORED
    if _STORED is None:
        _STORED = load_fixtures(FIXTURES)
    if key not in _STORED:
        fail(MESSAGES["kit_no_answers"].format(key=key))
    stored = _STORED[key].get(slot)
    if stored is None or stored[0] != signature:
        fail(MESSAGES["kit_mismatch"].format(key=key, slot=slot,
                                             reinstall=MESSAGES["reinstall"]))
    # (its messages in the language spoken, where they were recorded in it)
    spoken = _STORED[key].get(f"{slot}@{language.current()}")
    result = language.with_texts(stored[1], iter(spoken[1])) if spoken else stored[1]
    return _copy(result)  # a check or the student's code may change what it gets


def _in_other_languages(function, args, kwargs, result):
    """[(language, strings)]: the strings of a @reference's `result` (language.texts), as
    function(*args, **kwargs) gives them in each other language the checks speak, where they
    differ (its messages), recorded for the kit's replay. Runs outside any check, the random
    state untouched."""
    english, found = language.texts(result), []
    for spoken in language.languages() if english else ():
        token = _CURRENT.set(None)
        try:
            with torch.random.fork_rng(), language.speaking(spoken):
                texts = language.texts(function(*args, **kwargs))
        finally:
            _CURRENT.reset(token)
        if len(texts) == len(english) and texts != english:
            found.append((spoken, texts))
    return found


def _copied(value):
    if isinstance(value, torch.Tensor):
        copied = value.detach().clone()
        return copied.requires_grad_() if value.requires_grad else copied
    return value


def _copy(value):
    """`value` with its tensors copied (a stored answer, given out again)."""
    return nested.map_leaves(value, _copied)


# Fixtures: one .npz per chapter, read with allow_pickle=False. "index" holds JSON bytes
# {call key: {slot: [signature, encoded result]}}; tensors are arrays "t0", "t1", ...
# (bfloat16, which numpy lacks, stored as its int16 bits).

# The containers are nested.encode()'s, as on the grader's wire; these write the leaves.

def _encode(value, arrays):
    def leaf(item):
        if isinstance(item, torch.Tensor):
            tensor = item.detach().cpu().contiguous()
            kept = tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor
            arrays.append(kept.numpy())
            return {"tensor": len(arrays) - 1, "dtype": str(tensor.dtype)[6:],
                    "grad": bool(item.requires_grad)}
        if item is None or isinstance(item, (bool, int, float, str)):
            return item
        if isinstance(item, torch.dtype):
            return {"dtype": str(item)[6:]}
        raise TypeError(MESSAGES["fixture_kind"].format(kind=type(item).__name__))
    return nested.encode(value, leaf, pairs=True)


def _decode(data, arrays):
    def leaf(item):
        if not isinstance(item, dict):
            return item
        if "tensor" in item:
            tensor = torch.from_numpy(arrays[f"t{item['tensor']}"].copy())
            dtype = getattr(torch, item["dtype"])
            tensor = tensor.view(dtype) if dtype == torch.bfloat16 else tensor.to(dtype)
            return tensor.requires_grad_() if item["grad"] else tensor
        if "dtype" in item:
            return getattr(torch, item["dtype"])
        raise ValueError(MESSAGES["fixture_entry"].format(keys=sorted(item)))
    return nested.decode(data, leaf)


def save_fixtures(path, recording):
    """Write `recording` ({call key: {slot: (signature, result)}}) to the .npz `path`."""
    import numpy as np
    arrays = []
    index = {key: {slot: [signature, _encode(result, arrays)]
                   for slot, (signature, result) in slots.items()}
             for key, slots in recording.items()}
    payload = {f"t{i}": array for i, array in enumerate(arrays)}
    payload["index"] = np.frombuffer(json.dumps(index, sort_keys=True).encode(), np.uint8)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as file:
        np.savez_compressed(file, **payload)


def load_fixtures(folder):
    """{call key: {slot: (signature, result)}} from every .npz of `folder`."""
    import numpy as np
    stored = {}
    for path in sorted(Path(folder).glob("*.npz")):
        with np.load(path, allow_pickle=False) as arrays:
            index = json.loads(arrays["index"].tobytes())
            for key, slots in index.items():
                stored.setdefault(key, {}).update(
                    {slot: (signature, _decode(data, arrays))
                     for slot, (signature, data) in slots.items()})
    return stored


def step_mistakes(formula, inputs, dims, **options):
    """{sentence: output} of formulas.FORMULAS[formula](dims, **options) with one step left
    out or done another way, on `inputs` (a dict of tensors): what expect_close's
    `mistakes` takes (formula_mistakes). The formula's own step values on the same inputs
    (step_values) are kept with it in the check that runs, for the trace family that
    expect_close tries with these `mistakes`. Both are @references, replayed by the kit."""
    mistakes = formula_mistakes(formula, inputs, dims, **options)
    values = step_values(formula, inputs, dims, **options)
    call = _CURRENT.get()
    if call is not None:
        call.steps.append((mistakes, values))
    return mistakes


def _in_float64(inputs):
    """`inputs` with its floating-point tensors in float64, as the formulas compute."""
    return {k: v.double() if isinstance(v, _Tensor) and v.is_floating_point() else v
            for k, v in inputs.items()}


@reference
def formula_mistakes(formula, inputs, dims, **options):
    """step_mistakes()'s answer: a @reference, so the student's kit replays it from the
    fixtures."""
    inputs = _in_float64(inputs)
    # grader-only (it computes the right answers): the kit removes this body, import and all
    from . import formulas
    return formulas.FORMULAS[formula](dims, **options).mistakes(inputs)


@reference
def split_heads_reference(x, num_heads):
    """Reference split: (B, L, D) -> (B, num_heads, L, D // num_heads)."""
    B, L, D = x.shape
    return x.reshape(B, L, num_heads, D // num_heads).transpose(1, 2)


@reference
def merge_heads_reference(x):
    """Reference merge: (B, h, L, hd) -> (B, L, h * hd)."""
    B, h, L, hd = x.shape
    return x.transpose(1, 2).reshape(B, L, h * hd)


# The grader draws fresh inputs for each grading run: inside salted(salt), a number the
# student never sees, every check's random inputs come from generator(seed) or
# fresh_seed(seed), which mix it in. Outside (notebooks, the kit's fixtures): the seeds as
# written. A context variable, not a module global: it holds only inside the block.
_SALT = contextvars.ContextVar("checks_salt", default=None)


def fresh_seed(seed):
    """`seed`, or inside salted(), a seed derived from both (the same within one run)."""
    salt = _SALT.get()
    if salt is None:
        return seed
    digest = hashlib.sha256(f"{salt}:{seed}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


def generator(seed):
    """A torch.Generator for a check's random inputs: seeded with fresh_seed(seed)."""
    return torch.Generator().manual_seed(fresh_seed(seed))


class salted:
    """Context manager: the checks' inputs salted with `salt` inside (the grader, around
    each test cell), as written again after."""

    def __init__(self, salt):
        self.salt, self.token = salt, None

    def __enter__(self):
        self.token = _SALT.set(self.salt)

    def __exit__(self, *exc):
        _SALT.reset(self.token)


@reference
def random_inputs(*shapes, seed, dtype=torch.float32, device="cpu"):
    """Reproducible standard-normal tensors of the given shapes (a @reference, so that the
    kit replays the very inputs its answers were computed on, whatever torch it runs)."""
    gen = generator(seed)
    return [torch.randn(*s, generator=gen, dtype=torch.float64).to(dtype=dtype, device=device)
            for s in shapes]



def family_reason(actual, expected, dtype=None, scale=None, condition=1.0, axes=None,
                  mistakes=None):
    """The reason (a sentence) that the first family of checks/diagnose.py gives for how
    `actual` differs from `expected` (tensors of one shape) beyond expect_close's tolerance,
    or None (also where they agree): for a check whose own message for what no family names
    says more than expect_close's generic one (a leak, a mode, a call log)."""
    if close(actual, expected, dtype, scale, condition):
        return None
    return diagnose.explain(
        actual.detach(), expected.detach(), _same_within(dtype or expected.dtype, scale,
                                                         condition),
        _ratios(actual, expected, dtype, scale, condition) > 1, current_dims(), axes,
        mistakes)


def expect_from_weights(output, weights, value, expected, expected_w, dtype, condition,
                        mistakes, name="output"):
    """Fail when the returned weights are right but the output is not weights @ value with
    them (it was computed from other weights: unmasked, unscaled, the scores; or from another
    tensor than value) and a family names what the output is, for any attention that
    returns (output, weights); where none does, expect_close (its trace family) says more.
    output (..., Lq, d_v), weights (..., Lq, Lk), value (..., Lk, d_v); condition: the
    weights' (..., Lq, Lk); mistakes: step_mistakes() of the output."""
    scale = value.detach().double().abs().max()
    out_condition = condition.amax(-1, keepdim=True)
    if not close(weights, expected_w, dtype, condition=condition) or close(
            output, expected, dtype, scale=scale, condition=out_condition):
        return
    own = weights.detach().double() @ value.detach().double()             # (..., Lq, d_v)
    if close(output, own, dtype, scale=scale, condition=out_condition):
        return
    reason = family_reason(output, expected, dtype, scale, out_condition, mistakes=mistakes)
    if reason:
        fail(MESSAGES["other_weights"].format(
            name=name, reason=MESSAGES["other_weights_reason"].format(reason=reason)))



# ---------------------------------------------------------------------------------------
# The trace family's inputs: the student's traced tensors and the formula's step values
# ---------------------------------------------------------------------------------------

@reference
def step_values(formula, inputs, dims, **options):
    """{"steps": [(step name, value)] of formulas.FORMULAS[formula](dims, **options) on
    `inputs` (diagnose.Formula.values: a step that changes nothing has None), "inputs": the
    floating-point tensors of `inputs`}, in float64: what the trace family (diagnose.traced)
    compares the student's traced tensors with. A @reference, so the student's kit replays
    it from the fixtures, as step_mistakes' answers."""
    inputs = _in_float64(inputs)
    # grader-only (it computes the right answers): the kit removes this body, import and all
    from . import formulas
    try:
        steps = formulas.FORMULAS[formula](dims, **options).values(inputs)
    except (RuntimeError, KeyError):   # a formula that cannot run on these inputs: no steps
        steps = []
    return {"steps": steps, "inputs": {k: v for k, v in inputs.items()
                                       if isinstance(v, _Tensor) and v.is_floating_point()}}


# how many of the student's latest calls' traces a check keeps (the one judged may not be
# the latest: the forward of chapter 3 is called on every case first, then judged)
TRACES_KEPT = 4


def traced_records(trace):
    """[(place, code, tensor, function name, ((shape, source), ...))] from a call's report of
    its trace (operations.attempt_traced; a record without the last two reads as made by "",
    from nothing), each entry checked and the whole bounded as the student's process bounds
    it; [] where the report is not one. The student's process may lie in it (under the
    autograder it runs their code): a trace only ever changes the words of a message (the
    trace family), never a grade, which comes from the values the check compares."""
    if not isinstance(trace, (list, tuple)):
        return []
    kept, entries = [], 0
    for index, record in enumerate(trace[:operations.TRACE_MOST]):
        if not (isinstance(record, (list, tuple)) and len(record) in (3, 5)
                and all(isinstance(text, str) for text in record[:2])
                and isinstance(record[2], _Tensor)
                and (record[2].is_floating_point() or record[2].dtype == torch.bool)):
            return []
        read = _read_by(record[3:], index)
        if read is None:
            return []
        entries += record[2].numel()
        if entries > operations.TRACE_ENTRIES:
            break
        kept.append((record[0][:operations.TRACE_TEXT], record[1][:operations.TRACE_TEXT],
                     record[2].detach(), *read))
    return kept


def _read_by(made, index):
    """(function name, ((shape, source record index or -1), ...)) of a trace record's last two
    fields (`made`, empty for a record without them), checked: a source is an earlier record;
    None where they are malformed."""
    if not made:
        return "", ()
    function, args = made
    if not (isinstance(function, str) and isinstance(args, (list, tuple))
            and len(args) <= operations.TRACE_ARGS):
        return None
    read = []
    for arg in args:
        if not (isinstance(arg, (list, tuple)) and len(arg) == 2
                and isinstance(arg[0], (list, tuple)) and len(arg[0]) <= 16
                and all(type(n) is int and n >= 0 for n in arg[0])
                and type(arg[1]) is int and -1 <= arg[1] < index):
            return None
        read.append((tuple(arg[0]), arg[1]))
    return function[:operations.TRACE_TEXT], tuple(read)


def _keep_trace(trace):
    """Keep `trace` (traced_records()) in the check that runs, for the trace family."""
    call = _CURRENT.get()
    if call is not None and trace:
        call.traces = (call.traces + [trace])[-TRACES_KEPT:]


def _traced_reason(actual, mistakes, same):
    """What the trace family (diagnose.traced) says of `actual`, a wrong output whose
    formula's step_mistakes() gave `mistakes`, from the student's latest traced calls in
    the check that runs; None where it has nothing to say (or no trace, no step values)."""
    call = _CURRENT.get()
    if call is None or mistakes is None or not isinstance(actual, _Tensor):
        return None
    values = next((values for kept, values in call.steps if kept is mistakes), None)
    if not values:
        return None
    return diagnose.traced(actual.detach(), values, call.traces, same, call.dims)
