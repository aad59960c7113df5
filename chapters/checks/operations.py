"""The operations on the student's objects, run where those objects live.

A check reaches the student's code only through checks.common's observe(), load_weights(),
is_module(), is_class(), type_name() and given(). Each is one of the operations below, run
in the process that holds the student's objects: in the student's Jupyter, checks.common's
LocalRuntime calls them in-process; under the autograder, the student's sandboxed process
runs them (autograde/sandbox.py, asked by the grader's autograde.remote.RemoteRuntime) and
sends back what they return, by value. The same file serves both: the kit ships it as
checks/operations.py, and the sandbox gets this very file (autograde/remote.py), so that
no other code of the checks runs in the student's process.

It holds no judging code: no expected output, no comparison, no diagnosis. Its one message
is the forbid's (forbid_spec): a teaching message in the student's Jupyter, forwarded to the
sandbox around a call; the grader decides from the submitted source (autograde/forbids.py).
It imports torch, and of the course only checks.repair (pure code that edits code: the
repair family's mutants are made where the student's objects live).
"""
import ast
import contextvars
import copy
import importlib
import inspect
import json
import linecache
import os
import re
import sys
import sysconfig
import traceback
import warnings
from dataclasses import dataclass

import torch

from . import repair

# Every sentence these operations can put before a student, one template each with named
# fields (a second language translates them here): where in their code an error came from,
# the forbid's teaching message, and what given() refuses.
# (A plain dict: this module runs in the student's sandboxed process too, which holds no
# other module of the checks and no catalogue; there the grader sends these templates in the
# notebook's language with each spawn, autograde.remote.child_messages, and
# autograde.sandbox.speak puts them here. They are translated in checks.po, as every
# module's; in the student's Jupyter they stay English.)
MESSAGES = {
    "student_line": "line {line} of {cell}",
    "student_line_code": "line {line} of {cell}: {code}",
    "your_cell": "your cell",
    "forbidden": "you called {label}, {what}; build it from the operations the chapter shows "
                 "instead.",
    "not_given": "given(): {path!r} is not the course's code",
    "grader_cell": "cell {cell}",
}

# Bound now, before any student code runs in the same process, so that rebinding
# torch.Tensor in a notebook does not change what these operations see.
_Tensor = torch.Tensor
_Module = torch.nn.Module
_Parameter = torch.nn.Parameter


class CheckFailure(AssertionError):
    """A failed check; its message says what is wrong and the likely cause."""

    def _render_traceback_(self):
        """IPython's hook: in Jupyter a failed check shows as its message alone, not as a
        traceback through the checks' own code. The cell still ends in an error, so a "run
        all" stops there and nbgrader counts the test as failed."""
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


def attempt(function, *args, _raising=None, **kwargs):
    """(function(*args, **kwargs), None), or (None, [class name, message, shapes of the
    tensor arguments, where in the student's code it raised (student_line), the shapes on
    that line and in its frame (line_shapes)]) when it raised. _raising: [the exception,
    [torch function name, its tensor arguments' shapes]] of the torch call that raised, as
    attempt_traced's mode saw it (filled in while the call runs). The judge passes the
    error to raised()."""
    try:
        return function(*args, **kwargs), None
    except Exception as error:
        shapes = ", ".join(str(tuple(a.shape)) for a in args if isinstance(a, _Tensor))
        return None, [type(error).__name__, str(error), shapes, student_line(error),
                      raised_line_shapes(error, _raising)]


def raised_line_shapes(error, raising=None):
    """line_shapes() of `error`, with the torch call that raised it where `raising` ([the
    exception, [function name, shapes]], as a _Trace or _RaisingCall mode noted it) holds
    that call: what attempt() reports, and the sandbox's error reply to a call of the
    student's objects (autograde/sandbox.py), so that both say the same."""
    call = raising[1] if raising and _raised_by(error, raising[0]) else None
    return line_shapes(error, call)


def _raised_by(error, cause):
    """True when `error` is `cause` or was raised while handling it (raise ... from)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if error is cause:
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


# Files that are no student's code: this package (the checks), torch, the standard library
# and installed packages. What remains in a traceback is a notebook cell (compiled under a
# name such as "cell stable_softmax, line 4" by the grader, "01_attention.ipynb cell 12" by
# the kit, "/tmp/ipykernel_.../....py" or "<ipython-input-...>" by Jupyter) or a file of
# the student's own. Each also as its resolved path: the student's process that the grader
# starts runs the virtualenv's resolved Python (autograde.remote._sandbox_python), so the
# traceback it sends back names torch's files there, even where the grader reached that
# virtualenv through a symlink.
_LIBRARY_FOLDERS = {os.path.dirname(__file__), os.path.dirname(torch.__file__),
                    # the grader's package, beside chapters/ (its remote proxies)
                    os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
                        os.path.abspath(__file__)))), "autograde")} | {
    path for path in map(sysconfig.get_paths().get, ("stdlib", "platstdlib", "purelib",
                                                     "platlib")) if path}
_LIBRARIES = tuple(sorted({folder for path in _LIBRARY_FOLDERS
                           for folder in (os.path.join(path, ""),
                                          os.path.join(os.path.realpath(path), ""))}))


def _cell_name(filename):
    """How the student knows the file of a traceback frame: the cell's name where the
    grader or the kit named it, "your cell" for Jupyter's generated names."""
    name = filename.rpartition(", line ")[0] if ", line " in filename else filename
    if name.startswith("<") or "ipykernel_" in name:
        return MESSAGES["your_cell"]
    if name.startswith("cell "):  # the grader's label (autograde.notebook.plan)
        return MESSAGES["grader_cell"].format(cell=name[len("cell "):])
    return name


def _is_students(filename, course=()):
    """True for a traceback frame's file that runs the student's code: not this package's,
    not torch's, not the standard library's or an installed package's, not the course's own
    reference code (`course`, see _course_code), not Python's frozen modules. The one test of
    student_line, line_shapes and the trace's _student_place."""
    return not (filename.startswith(_LIBRARIES + tuple(course))
                or filename.startswith("<frozen"))


def _course_code():
    """The folders of the course's reference package where the student's code imported it
    (`from solutions import ...` in a later chapter): a frame there is a course function the
    student called, and the line that matters is theirs, the call. Looked up, not imported."""
    package = sys.modules.get("solutions")
    return tuple(os.path.join(os.path.abspath(path), "")
                 for path in getattr(package, "__path__", None) or ())


def student_line(error):
    """"line N of <cell>: <code>" of the innermost frame of `error`'s traceback that runs
    the student's code (not torch's, not the checks' own): the line of *their* cell the
    error came from, or "" where none is found (the code text is left out where the
    source is not at hand). An error that the student's process raised and the grader's
    proxy raised again (autograde.remote) carries that process's traceback as text, in
    `student_traceback`: its frames are the innermost."""
    frames = [(f.filename, f.lineno, f.line) for f in traceback.extract_tb(error.__traceback__)]
    remote = getattr(error, "student_traceback", None)
    if isinstance(remote, str):
        frames += [(name, int(line), code) for name, line, code in _FRAME.findall(remote)]
    course = _course_code()
    candidates = [(filename, lineno, (code or "").strip()) for filename, lineno, code
                  in reversed(frames) if _is_students(filename, course)]
    # a frame whose source is not at hand is a given cell the kit ran (it registers the
    # student's cells, as Jupyter does): the student's line is the one that called it
    for filename, lineno, code in [c for c in candidates if c[2]] or candidates[:1]:
        return MESSAGES["student_line_code" if code else "student_line"].format(
            line=lineno, cell=_cell_name(filename), code=code)
    return ""


# What travels with an error about the line it came from (line_shapes), bounded as the trace
# is: at most LINE_SHAPES shapes of at most 8 axes, in at most LINE_TEXT characters.
LINE_SHAPES = 8
LINE_TEXT = 1000


def bounded_line_shapes(reported):
    """`reported` (another process's line_shapes report) where it is text of at most
    LINE_TEXT characters, else "": kept by the grader's proxy (autograde.remote) and checked
    again where line_shapes reads it back."""
    return reported if isinstance(reported, str) and len(reported) <= LINE_TEXT else ""


def line_shapes(error, call=None):
    """The shapes on the line of the student's code that `error` came from (the innermost
    frame of its traceback that _is_students), as JSON text: {"call": [the torch function
    that raised, [the shape of each tensor it was given]] (`call`, from attempt_traced's
    mode) or null, "names": [[an expression of the line, its shape]], "others": [[a name of
    the frame's other tensors, its shape]]}. The expressions: each name of the frame that
    holds a tensor and occurs on the line, `self.<name>` where that is a parameter or buffer
    of the module `self`, and `name[index]` of such a tensor whose index is made of numbers,
    slices, None, ... and local ints. Read without running any code of the student's (dict
    lookups; torch's own indexing of a plain tensor). "" where there is nothing to say, and
    for an error another process raised (autograde.remote: its frames are not here). A
    report of the student's process: the grader only words a message with it
    (checks.diagnose.error_cause).

    An error that the student's process raised and the grader's proxy raised again
    (autograde.remote: it has `student_traceback`) has no frames here: its line shapes are
    the ones that process reported with it (the error reply's "line_shapes", made there by
    raised_line_shapes), which the proxy kept as `student_line_shapes` where they are text
    of at most LINE_TEXT characters (checked again, entry by entry, where a message reads
    them: checks.diagnose._line_report); "" where it reported none."""
    if hasattr(error, "student_traceback"):
        return bounded_line_shapes(getattr(error, "student_line_shapes", ""))
    frames, course, tb = [], _course_code(), error.__traceback__
    while tb is not None:
        if _is_students(tb.tb_frame.f_code.co_filename, course):
            frames.insert(0, (tb.tb_frame, tb.tb_lineno,
                              linecache.getline(tb.tb_frame.f_code.co_filename,
                                                tb.tb_lineno).strip()))
        tb = tb.tb_next
    # as student_line: the innermost frame whose source is at hand (a given cell the kit ran
    # is not registered; the student's line is the one that called it)
    found = next((f for f in frames if f[2]), None)
    names, others = [], []
    if found is not None:
        frame, lineno, code = found
        try:
            local = dict(frame.f_locals)
            names = _named_shapes(code, local)
            # the frame's other tensors (an argument the line's tensor was made from)
            others = [[name[:80], _shape(value)] for name, value in local.items()
                      if _shape(value) is not None and name not in dict(names)]
        except Exception:   # a frame or a line that cannot be read: nothing to say of it
            names, others = [], []
    if call is None and not names:
        return ""
    report = {"call": call, "names": names[:LINE_SHAPES],
              "others": others[:LINE_SHAPES - len(names[:LINE_SHAPES])]}
    text = json.dumps(report)
    while len(text) > LINE_TEXT and (report["others"] or report["names"]):
        report["others" if report["others"] else "names"].pop()
        text = json.dumps(report)
    return text if len(text) <= LINE_TEXT else ""


def _shape(value):
    """The shape of a plain tensor or parameter (a list of at most 8 ints), or None (a
    tensor subclass of the student's could run their code on being read)."""
    if type(value) in (_Tensor, _Parameter) and value.dim() <= 8:
        return [int(size) for size in value.shape]
    return None


def _named_shapes(code, local):
    """[[expression, shape]] of the tensors the line `code` names (see line_shapes)."""
    names, seen = [], set()
    try:
        nodes = list(ast.walk(ast.parse(code)))
    except SyntaxError:   # a line that does not parse alone: its plain names only
        nodes = [ast.Name(id=name) for name in re.findall(r"[A-Za-z_]\w*", code)]
    nodes.sort(key=lambda node: getattr(node, "col_offset", 0))   # in the line's order
    for node in nodes:
        shape = None
        if isinstance(node, ast.Name):
            text, shape = node.id, _shape(local.get(node.id))
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "self" and isinstance(local.get("self"), _Module)):
            owned = {**vars(local["self"]).get("_parameters", {}),
                     **vars(local["self"]).get("_buffers", {})}
            text, shape = f"self.{node.attr}", _shape(owned.get(node.attr))
        elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
              and type(local.get(node.value.id)) is _Tensor):
            text = ast.unparse(node)
            try:
                with torch.no_grad():
                    shape = _shape(local[node.value.id][_index(node.slice, local)])
            except Exception:   # an index it does not read (a tensor, a call): left out
                shape = None
        if shape is not None and text not in seen and len(names) < LINE_SHAPES:
            seen.add(text)
            names.append([text[:80], shape])
    return names


def _index(node, local):
    """The index an ast node of a subscript stands for, where it is made of ints, slices,
    None, ... and names of local ints only; else ValueError."""
    if isinstance(node, ast.Tuple):
        return tuple(_index(item, local) for item in node.elts)
    if isinstance(node, ast.Slice):
        return slice(*(None if part is None else _index(part, local)
                       for part in (node.lower, node.upper, node.step)))
    if isinstance(node, ast.Constant) and (node.value is None or node.value is Ellipsis or (
            isinstance(node.value, int) and not isinstance(node.value, bool))):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_index(node.operand, local)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        left, right = _index(node.left, local), _index(node.right, local)
        if isinstance(left, int) and isinstance(right, int):
            return {ast.Add: left + right, ast.Sub: left - right,
                    ast.Mult: left * right}[type(node.op)]
    if isinstance(node, ast.Name) and type(local.get(node.id)) is int:
        return local[node.id]
    raise ValueError("not an index of ints")


def _call_shapes(values):
    """The shapes of the tensors among a torch call's arguments (a list or tuple of tensors,
    as torch.cat takes, counts its tensors), at most LINE_SHAPES."""
    shapes = [shape for shape in map(_shape, _one_level(values)) if shape is not None]
    return shapes[:LINE_SHAPES]


def _one_level(values):
    """The items of `values`, and of each list or tuple among them (torch.cat's tensors):
    what a torch call was given, as _call_shapes and _Trace.read look at it."""
    for value in values:
        yield from value if isinstance(value, (list, tuple)) else (value,)


# one frame of traceback.format_list(): its file, its line number and its code (if known)
_FRAME = re.compile(r'  File "(.+?)", line (\d+), in [^\n]*\n(?:    ([^\n]*)\n)?')


def observe(function, args, kwargs, copy):
    """function(*args, **kwargs) observed: {"result": copy(what it returned), "error": None
    or attempt()'s [class name, message, shapes], "args": [copy(argument)] as the call left
    them, "warnings": [message]}. `copy` makes a value independent of the student's objects
    (checks.common.export in-process, the sandbox's own for the wire). Warned always: torch
    warns once per process, and what a call reports must not depend on what ran before."""
    warn_always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result, error, trace = attempt_traced(function, *args, **kwargs)
    finally:
        torch.set_warn_always(warn_always)
    # copied here, where what a tensor subclass raises on copying is the call's own error
    return {"result": copy(result), "error": error, "args": [copy(a) for a in args],
            "kwargs": {str(k): copy(v) for k, v in kwargs.items()},
            "warnings": [str(w.message) for w in caught], "attached": attached(result),
            "type": described_type(result), "trace": trace}


def described_type(value):
    """[the name of `value`'s class, the field names of a named tuple or None]: what a copy
    by value loses (a named tuple crosses to the grader as a plain tuple)."""
    fields = getattr(type(value), "_fields", None)
    named = isinstance(value, tuple) and isinstance(fields, tuple)
    return [type(value).__name__, [str(f) for f in fields] if named else None]


def attached(value):
    """Whether `value` (a call's result: a tensor, or a tuple or list of them) holds a
    tensor that requires grad, i.e. carries an autograd graph (what a copy loses)."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    return any(isinstance(item, _Tensor) and item.requires_grad for item in items)


def parameter_names(function):
    """The names of the parameters of `function` that take positional arguments, in order
    (an nn.Module: its forward's; a bound method: without self), for a message that names
    an argument as the student's code does; [] where no signature can be read."""
    target = function.forward if isinstance(function, _Module) else function
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return []
    return [str(p.name) for p in parameters
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def module_state(module):
    """{"training": the mode of an nn.Module, "tensors": {name: tensor}} of its parameters
    and buffers, as they are (the caller copies them), or None for anything else: what a
    call that must leave the module as it was is compared on."""
    if not isinstance(module, _Module):
        return None
    tensors = dict(module.named_parameters())
    tensors.update({name: buffer for name, buffer in module.named_buffers()
                    if isinstance(buffer, _Tensor)})
    return {"training": bool(module.training), "tensors": tensors}


def storages(module):
    """{name: the address of its storage} of an nn.Module's parameters and buffers (two
    tensors that share memory have one), or None for anything else: whether a module made
    from another owns its tensors."""
    state = module_state(module)
    if state is None:
        return None
    return {name: int(tensor.untyped_storage().data_ptr())
            for name, tensor in state["tensors"].items()}


def load_weights(module, weights):
    """Copy `weights` ({attribute: {part: tensor or None}}) into `module`, in place: each
    tensor to module.<attribute>.<part> where that is a tensor of its shape (in that
    tensor's dtype and device). An attribute is a dotted path of submodules ("attn.q_proj",
    "ff.0"); "" is the module itself. Returns what was found, as data: {attribute: None (no
    such attribute) | {part: None (nothing there) | its shape (a list) | the class name of
    what is there instead}}."""
    found = {}
    with torch.no_grad():
        for attr, parts in dict(weights).items():
            owner = module
            for name in str(attr).split(".") if attr else ():
                owner = getattr(owner, name, None)
            if owner is None:
                found[attr] = None
                continue
            found[attr] = {}
            for part, value in dict(parts).items():
                slot = getattr(owner, str(part), None)
                if not isinstance(slot, _Tensor):
                    found[attr][part] = None if slot is None else type(slot).__name__
                    continue
                found[attr][part] = list(slot.shape)
                if isinstance(value, _Tensor) and tuple(slot.shape) == tuple(value.shape):
                    slot.copy_(value.to(dtype=slot.dtype, device=slot.device))
    return found


def kind(obj):
    """"class", "module" (an nn.Module), "callable" (any other) or "object"."""
    if isinstance(obj, type):
        return "class"
    if isinstance(obj, _Module):
        return "module"
    return "callable" if callable(obj) else "object"


# what given() may call: the course's own code, never the student's
GIVEN_ROOTS = ("torch", "solutions", "checks")


def resolve_given(path, checks=__name__.rpartition(".")[0]):
    """The function or class named by `path` ("module:qualified.name", e.g.
    "torch.nn:MultiheadAttention"), imported here; only under GIVEN_ROOTS. A module under
    "checks" is looked up in the package `checks` names (default: the one holding this
    module; the sandbox names the release's own, "checks")."""
    module, _, qualname = str(path).partition(":")
    if module.split(".")[0] not in GIVEN_ROOTS or not qualname or any(
            part.startswith("__") for part in qualname.split(".")):
        raise PermissionError(MESSAGES["not_given"].format(path=path))
    if module.split(".")[0] == "checks":
        module = checks + module[len("checks"):]
    target = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


# ---------------------------------------------------------------------------------------
# Forbidden shortcuts: the specs, and the run-time forbid that only teaches
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Forbidden:
    """What one exercise must not delegate to PyTorch.

    exercise: the grade_id of its solution cell; tests: the grade_ids of the test cells
    whose points need it written by hand; pattern: a regex searched (ignoring case) in the
    names of torch's functions, as called (a function's __name__) and as written (an
    attribute, `torch.softmax`, `x.softmax`, or an imported name); what: the end of the
    message ("which ... for you"); label: how the message names the function (default: the
    name found)."""
    exercise: str
    tests: tuple
    pattern: str
    what: str
    label: str = ""
    context: str = ""   # the msgctxt of `what` in the checks' catalogue ("heads.forbid_core")

    def matches(self, name):
        return bool(re.search(self.pattern, str(name), re.IGNORECASE))

    def said_what(self):
        """`what` in the language of now (see say_with)."""
        return _SAY[0](self.context, self.what) if self.context else self.what

    def message(self, name):
        return _SAY[0]("operations.forbidden", MESSAGES["forbidden"]).format(
            label=self.label or name, what=self.said_what())


# How a Forbidden's message is said: as written (English, or in the student's process the
# templates the grader swapped in, already in the notebook's language), unless a side that
# binds the checks' catalogue (checks.common: the grader and the student's Jupyter) gives
# say(context, english) -> the text in the language of now. This module binds none itself.
_SAY = [lambda _context, english: english]


def say_with(say):
    """Say the Forbidden specs' messages with say(context, english) from now on."""
    _SAY[0] = say


# The forbid_spec() blocks in force in this context, outermost first: per check run, so a
# context variable (as checks.common's salt), not a module global.
_ACTIVE_FORBIDS = contextvars.ContextVar("checks_active_forbids", default=())


def active_forbids():
    """The Forbidden specs of the forbid_spec() blocks in force in this context, outermost
    first (the grader forwards them to the student's process around each call:
    autograde/remote.py)."""
    return tuple(spec for mode in _ACTIVE_FORBIDS.get() for spec in mode.specs)


class _ForbidSpec(torch.overrides.TorchFunctionMode):
    """forbid_spec()'s mode: a torch function whose __name__ a spec matches fails."""

    def __init__(self, specs):
        super().__init__()
        self.specs = tuple(specs)
        self._tokens = []  # one per __enter__ not yet exited (a block may be re-entered)

    def __enter__(self):
        self._tokens.append(_ACTIVE_FORBIDS.set(_ACTIVE_FORBIDS.get() + (self,)))
        return super().__enter__()

    def __exit__(self, *exc):
        _ACTIVE_FORBIDS.reset(self._tokens.pop())
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", None) or str(func)
        for spec in self.specs:
            if spec.matches(name):
                raise CheckFailure(spec.message(name))
        return func(*args, **(kwargs or {}))


def forbid_spec(*specs):
    """Context manager: calling a torch function that one of `specs` (Forbidden) names
    fails the check. The grader forwards it to the student's process too, but decides
    from the submitted source (see checks.common's FORBIDS): there it only adds a message."""
    return _ForbidSpec(specs)


# ---------------------------------------------------------------------------------------
# The student's call traced: the tensors their own lines computed, for the trace family
# ---------------------------------------------------------------------------------------
# A teacher reads the student's code line by line and says where it departs from the
# formula; checks.diagnose.traced does that from the values the student's lines computed,
# recorded here while their function runs (in their Jupyter and the kit in-process, in the
# grader's sandbox in the student's process, whose report comes back with the observation).
# Bounded, so that a loop cannot flood the report: at most TRACE_MOST tensors and
# TRACE_ENTRIES entries in all; a tensor of fewer than 2 entries, or not of floats or bools
# (a mask), is left out (it names no step). What the caps leave out is not traced.
# Each record also says what made it (the data flow a teacher follows back to a cause): the
# torch function's name, and [shape, index of the record that made it or -1] of each tensor
# it read (its arguments, one level into lists and tuples, at most TRACE_ARGS).
TRACE_MOST = 160
TRACE_ENTRIES = 2**17
TRACE_TEXT = 300   # characters of a line's place and of its code
TRACE_ARGS = 16


def _student_place(frame):
    """(place "line N of <cell>", the line's code) of the innermost frame from `frame`
    outwards that runs the student's code (not torch's, not the checks' own, as
    student_line()), or None."""
    course = _course_code()   # (once per traced tensor, not once per frame: a hot path)
    while frame is not None:
        filename = frame.f_code.co_filename
        if _is_students(filename, course):
            line = frame.f_lineno
            place = MESSAGES["student_line"].format(line=line, cell=_cell_name(filename))
            code = linecache.getline(filename, line).strip()
            return place[:TRACE_TEXT], code[:TRACE_TEXT]
        frame = frame.f_back
    return None


def _note_raising(raising, error, func, args, kwargs):
    """Set `raising` to [error, [func's name, the shapes of its tensor arguments]] unless it
    already holds `error`: the innermost torch call that raised it (an outer one, which
    sees the same exception pass, is not the one that raised)."""
    if not raising or raising[0] is not error:
        name = str(getattr(func, "__name__", func))[:40]
        raising[:] = [error, [name, _call_shapes([*args, *(kwargs or {}).values()])]]


class RaisingCall(torch.overrides.TorchFunctionMode):
    """A mode that notes only the torch call that raised (in `raising`, as _Trace does, for
    raised_line_shapes), tracing nothing: the sandbox runs the grader's direct call of the
    student's function in it where the grader's check would have traced that call in the
    student's Jupyter (checks.common.call on inputs that require grad, whose call the
    grader makes itself and whose trace comes with its second, observed call)."""

    def __init__(self):
        super().__init__()
        self.raising = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        try:
            return func(*args, **(kwargs or {}))
        except Exception as error:
            _note_raising(self.raising, error, func, args, kwargs)
            raise


class _Trace(torch.overrides.TorchFunctionMode):
    """attempt_traced()'s mode: every tensor a torch function returns to a line of the
    student's code is kept as [place, code, detached copy], in the order computed."""

    def __init__(self):
        super().__init__()
        self.records, self.entries = [], 0
        self.raising = []   # [the exception, [function name, shapes]] of the call that raised
        # {id(tensor): its record's index}, with the tensors kept alive for the call's
        # length so that an id is not reused for another tensor meanwhile
        self.made, self.alive = {}, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        try:
            result = func(*args, **(kwargs or {}))
        except Exception as error:
            _note_raising(self.raising, error, func, args, kwargs)
            raise
        # (torch calls this mode's hook with the mode off: the tensor methods below are
        # not traced themselves)
        if type(result) is _Tensor or isinstance(result, _Tensor):
            try:
                self.keep(result, func, args)
            except Exception:   # a tensor subclass that refuses to be read: not traced
                pass
        return result

    def read(self, args):
        """[[shape, index of the record that made it or -1]] of the tensors in `args`."""
        tensors = [item for item in _one_level(args) if isinstance(item, _Tensor)]
        return [[[int(n) for n in item.shape], self.made.get(id(item), -1)]
                for item in tensors[:TRACE_ARGS]]

    def keep(self, result, func=None, args=()):
        size = result.numel()
        # (a tensor without data, on the meta device, as a count of parameters may build: no
        # value to compare, and nothing that could be copied to the grader)
        if (len(self.records) >= TRACE_MOST or size < 2 or self.entries + size > TRACE_ENTRIES
                or not (result.is_floating_point() or result.dtype == torch.bool)
                or result.is_meta):
            return
        place = _student_place(sys._getframe(2))
        if place is None:
            return
        self.entries += size
        # (read first: an in-place operation, or .to() that changes nothing, returns the
        # very tensor it read)
        read = self.read(args)
        self.made[id(result)] = len(self.records)
        self.alive.append(result)
        self.records.append([place[0], place[1],
                             result.detach().clone().as_subclass(_Tensor),
                             str(getattr(func, "__name__", ""))[:TRACE_TEXT], read])


def attempt_traced(function, *args, **kwargs):
    """attempt(function, *args, **kwargs) and the trace of the call: [[place, code, tensor,
    function name, [[shape, record index or -1] of each tensor it read]]] of the tensors the
    student's own lines computed (see _Trace), bounded."""
    trace = _Trace()
    with trace:
        result, error = attempt(function, *args, _raising=trace.raising, **kwargs)
    trace.made, trace.alive = {}, []
    return result, error, trace.records


# ---------------------------------------------------------------------------------------
# The repair family's edits: the student's object with one small change (checks.repair)
# ---------------------------------------------------------------------------------------
# checks.common reruns a failed check with each of these in place of the student's object;
# the first with which it passes names the mistake. Made where the object lives (under the
# autograder, in the student's process: its source is there), each from the object's own
# source, compiled in a shallow copy of its globals (a mutant rebinds none of the student's
# names). What comes back is [mutant, description]: the descriptions are data of a process
# that runs the student's code, which the grader bounds (checks.common.repair_descriptions)
# and only ever words a message with; the verdict is the check's, rerun by the grader.

def mutants(obj, most=repair.MOST):
    """[[mutant, description]] of `obj` (a function or class of the student's code; an
    instance of such a class: copies of it whose class is mutated), most likely first, at
    most `most` (see checks.repair); [] for anything else or where no source is at hand."""
    try:
        if isinstance(obj, type):
            return _class_mutants(obj, most)
        if inspect.isfunction(obj):
            return _function_mutants(obj, most)
        if isinstance(obj, _Module) and _methods(type(obj)):
            return [[_instance_of(obj, cls), about]
                    for cls, about in _class_mutants(type(obj), most)]
    except Exception:   # a source that cannot be read or compiled: no repair
        pass
    return []


def _students_code(obj):
    """The source of `obj` (a function or class of the student's code), or None."""
    try:
        filename = inspect.getsourcefile(obj) or ""
        if not _is_students(filename, _course_code()):
            return None
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return None


def _function_mutants(function, most):
    source = _students_code(function)
    if source is None or function.__code__.co_freevars or function.__name__ == "<lambda>":
        return []
    found = []
    for code, about in repair.mutants(source, most=most):
        namespace = dict(function.__globals__)
        exec(compile(code, function.__code__.co_filename, "exec"), namespace)
        made = namespace.get(function.__name__)
        if inspect.isfunction(made):
            made.__qualname__, made.__module__ = function.__qualname__, function.__module__
            found.append([made, about])
    return found


def _methods(cls):
    """[(name, function, source)] of the methods defined in the body of `cls` that have a
    source (staticmethod and classmethod too), in the body's order."""
    found = []
    for name, value in vars(cls).items():
        function = getattr(value, "__func__", value)
        source = _students_code(function) if inspect.isfunction(function) else None
        if source is not None and not set(function.__code__.co_freevars) - {"__class__"}:
            found.append((name, function, source))
    return found


def _class_mutants(cls, most):
    """[[subclass of cls with one method mutated, description]]: the edits of every method,
    most likely kind first (checks.repair.KINDS), then the methods' order."""
    methods = _methods(cls)
    trees = [repair.parse_function(source) for _, _, source in methods]
    attributes = repair._self_attributes([tree for tree in trees if tree is not None])
    edits = []
    for order, (name, function, source) in enumerate(methods):
        for rank, (code, about) in enumerate(repair.mutants(source, attributes, most)):
            edits.append(((repair.KINDS.index(about["kind"]), order, rank), name, function,
                          code, about))
    edits.sort(key=lambda edit: edit[0])
    found = []
    for _, name, function, code, about in edits[:most]:
        made = _mutated_method(cls, name, function, code)
        if made is not None:
            found.append([made, {**about, "function": f"{cls.__name__}.{about['function']}"}])
    return found


def _mutated_method(cls, name, function, code):
    """A subclass of `cls` (same names) whose method `name` is `code`, compiled in a class
    body (zero-argument super() in it reads `cls`, as the original's)."""
    namespace = dict(function.__globals__)
    body = "class _Mutant:\n" + "\n".join("    " + line for line in code.splitlines())
    exec(compile(body, function.__code__.co_filename, "exec"), namespace)
    method = vars(namespace["_Mutant"])[name]
    made = getattr(method, "__func__", method)
    if "__class__" in made.__code__.co_freevars:
        made.__closure__[made.__code__.co_freevars.index("__class__")].cell_contents = cls
    made.__qualname__ = function.__qualname__
    mutant = type(cls)(cls.__name__, (cls,), {name: method, "__module__": cls.__module__,
                                               "__qualname__": cls.__qualname__})
    return mutant


def _instance_of(module, cls):
    """A shallow copy of the module `module` whose class is `cls` (its mutant)."""
    made = copy.copy(module)
    made.__class__ = cls
    return made
