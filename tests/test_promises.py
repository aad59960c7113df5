"""Every parameter an exercise promises is exercised by its checks (issue 20: a layer that
accepted cache= and never used it got full marks, because no test passed a cache).

The walk: for each chapter, the functions and classes its solution cells define (the
exercises' signatures, which the instructions state) are wrapped so that every call records
which parameters the caller passed explicitly; every test cell then runs whole (hidden tests
included) on the reference solution. A parameter that no call ever passed is a promise no
check exercises. UNEXERCISED lists the ones known today, each a gap still open: the test
fails when a new one appears, and when one listed is closed (so the list only shrinks)."""
import ast
import functools
import inspect
import json
import re
import sys

import pytest
import torch

from autograde import course, kit
from autograde.notebook import parse
from tests.chapter import Chapter, checks_module
from tests.submissions import CHAPTERS

# {assignment: {"function.parameter", ...}}: promises no check exercises yet (open gaps).
UNEXERCISED = {}
# {assignment: {"function.parameter", ...}}: parameters with a default that every check
# passes, so that a wrong default is never seen (open gaps, as UNEXERCISED).
UNDEFAULTED = {}


def _exercises(notebook):
    """{name: kind} of the top-level functions ("function") and classes ("class") that the
    notebook's solution cells define: the exercises' public signatures."""
    found = {}
    for cell in json.loads(notebook.read_text())["cells"]:
        if not cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        for node in parse(kit.solution_code(source)).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                found[node.name] = "function"
            elif isinstance(node, ast.ClassDef):
                found[node.name] = "class"
    return found


def _recording(function, label, seen, defaulted=None):
    """`function` wrapped: each call from a check (directly, or through nn.Module's
    __call__ for forward) adds "label.parameter" to `seen` for every parameter the caller
    passed (positionally or by name), and to `defaulted` for every parameter it left to its
    default."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return function(*args, **kwargs)
        if _called_by_check():
            seen.update(f"{label}.{name}" for name in bound.arguments if name != "self")
            if defaulted is not None:
                defaulted.update(f"{label}.{name}" for name in _defaults(function)
                                 if name not in bound.arguments)
        return function(*args, **kwargs)
    return wrapper


def _defaults(function):
    """The names of `function`'s parameters that have a default (not *args or **kwargs)."""
    return [name for name, p in inspect.signature(function).parameters.items()
            if p.default is not p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _called_by_check():
    """True when the nearest caller outside torch (nn.Module.__call__ stands between a check
    and forward) is a module of the checks: a solution function calling another does not
    count."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("torch"):
        frame = frame.f_back
    return frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "checks"


def _promised(function, label):
    """{"label.parameter"} of `function`'s parameters (not self, *args or **kwargs)."""
    return {f"{label}.{name}" for name, p in inspect.signature(function).parameters.items()
            if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_every_parameter_an_exercise_promises_is_passed_by_some_check(assignment, capsys):
    notebook = course.CHAPTERS / f"{assignment}.ipynb"
    namespace = Chapter(assignment).namespace()
    seen, promised, defaulted, defaults = set(), set(), set(), set()
    for name, kind in _exercises(notebook).items():
        target = namespace.get(name)
        if kind == "function" and callable(target):
            promised |= _promised(target, name)
            defaults |= {f"{name}.{p}" for p in _defaults(target)}
            namespace[name] = _recording(target, name, seen, defaulted)
        elif kind == "class" and isinstance(target, type):
            for method in ("__init__", "forward"):
                if method in vars(target):
                    label = f"{name}.{method}"
                    promised |= _promised(vars(target)[method], label)
                    defaults |= {f"{label}.{p}" for p in _defaults(vars(target)[method])}
                    setattr(target, method, _recording(vars(target)[method], label, seen,
                                                       defaulted))
    results = kit.run_visible_tests(notebook, namespace, hidden=True)
    assert all(message is None for message in results.values()), results
    missing = promised - seen
    assert missing == UNEXERCISED.get(assignment, set()), (
        f"{assignment}: parameters no test cell's check passes: {sorted(missing)}")
    # a default is a promise too (issue 20: a softmax whose default dim was 0 kept its
    # points while every check passed dim)
    always_passed = defaults - defaulted
    assert always_passed == UNDEFAULTED.get(assignment, set()), (
        f"{assignment}: parameters with a default that every check passes: "
        f"{sorted(always_passed)}")


# ------------------------------------------------------------------------------------------
# The promises every exercise makes beyond its parameters (checks.common's PROMISES), walked
# by breaking each one on the reference solution: every exercise, called by a check, is
# wrapped so that it breaks one promise after computing its right answer, and the test cells
# that call it must then fail with that promise's sentence. The breaks are generic, taken
# from what the reference does on the checks' own calls, never from a list of exercises:
# - "input": it changes its first tensor argument in place (adds 1; flips a bool), which no
#   exercise's instructions allow (a training step changes its model, not its batch);
# - "kind": where it returns a Python int or float, it returns that number as a 0-d tensor;
# - "mode": it flips the mode (train/eval) of each nn.Module among its arguments (self
#   aside), except the one whose change is the exercise's documented job.
# NOT_CAUGHT lists the breaks known to go unseen, each a gap still open: the test fails when
# a new one appears and when one listed is closed (so the list only shrinks).
BREAKS = {"input": r"changed its argument `[^`]+` in place",
          "kind": r"where the exercise documents",
          "mode": r"mode after the call is (training|eval) where it should be"}
# {assignment: {"exercise:break"}}
NOT_CAUGHT = {}
# {assignment: {exercise}}: the exercises that take no tensor or module and return no
# number, so that no break applies to them (each stated in its chapter's instructions)
NOTHING_TO_BREAK = {
    "04_masks": {"causal_mask"},                  # (q_len, k_len, device) -> a mask
    "05_diversity": {"make_heads_identical"},     # changes its one argument, mha, in place
    "06_kv": {"decoding_causal_mask"},            # (L_new, T, device) -> a mask
    "07_positions": {"sinusoidal_positions"},     # (num_positions, d_model, base) -> a table
}
# {exercise: the position of the module argument whose change is its documented job}: the
# mode break leaves that one alone
CHANGES_ITS_MODULE = {"load_from_torch": 0, "make_heads_identical": 0, "train_step": 0}


def _break_promise(function, label, kind, broken):
    """`function` wrapped: when a check calls it (not another exercise), it returns its right
    answer having broken the promise `kind` (see BREAKS), and adds `label` to `broken`."""
    method = "." in label

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        result = function(*args, **kwargs)
        if not _called_by_check():
            return result
        arguments = list(args[1:] if method else args) + list(kwargs.values())
        if kind == "input":
            tensor = next((a for a in arguments if isinstance(a, torch.Tensor) and a.numel()),
                          None)
            if tensor is not None:
                with torch.no_grad():
                    tensor.logical_not_() if tensor.dtype == torch.bool else tensor.add_(1)
                broken.add(label)
        elif kind == "kind" and isinstance(result, (int, float)) \
                and not isinstance(result, bool):
            broken.add(label)
            return torch.tensor(result)
        elif kind == "mode":
            mine = CHANGES_ITS_MODULE.get(label.split(".")[0])
            for index, module in enumerate(arguments):
                if isinstance(module, torch.nn.Module) and index != mine:
                    module.train(not module.training)
                    broken.add(label)
        return result
    return wrapper


def _test_cells(notebook):
    """[(grade_id, source)] of the notebook's test cells, hidden tests included."""
    return [(meta["grade_id"], source) for _, meta, source in kit._code_cells(notebook)
            if meta.get("grade")]


def _wrap_exercises(namespace, notebook, wrap):
    """Every exercise of the notebook in `namespace` replaced by wrap(function, label):
    top-level functions, and the forward and public methods of its classes."""
    for name, kind in _exercises(notebook).items():
        target = namespace.get(name)
        if kind == "function" and callable(target):
            namespace[name] = wrap(target, name)
        elif kind == "class" and isinstance(target, type):
            for method, function in list(vars(target).items()):
                if callable(function) and (method == "forward" or not method.startswith("_")):
                    setattr(target, method, wrap(function, f"{name}.{method}"))


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_every_promise_an_exercise_breaks_fails_its_check(assignment, capsys):
    """Each exercise in turn breaks each promise (BREAKS) when its checks call it, and the
    test cells that call it must fail with that promise's sentence."""
    callers, missed, breakable = _walk_breaks(assignment)
    assert missed == NOT_CAUGHT.get(assignment, set()), (
        f"{assignment}: broken promises no check caught (exercise:promise): {sorted(missed)}")
    # the walk breaks something of every exercise but those that take no tensor or module
    # and return no number (a mask built from sizes, a table)
    assert set(callers) - breakable == NOTHING_TO_BREAK.get(assignment, set()), (
        f"{assignment}: exercises the walk could not break: {sorted(set(callers) - breakable)}")


def test_the_walk_sees_a_promise_no_check_keeps(monkeypatch, capsys):
    """The walk is honest: with the comparison of the arguments switched off, the in-place
    and mode breaks go unseen, and it says so."""
    # (the checks as the notebooks import them: `from checks import ...`)
    monkeypatch.setattr(checks_module("common"), "expect_unchanged", lambda *a, **k: None)
    _, missed, _ = _walk_breaks("04_masks")
    assert {"padding_mask:input", "to_torch_key_padding_mask:input"} <= missed, missed


def _walk_breaks(assignment):
    """({exercise: [(test grade_id, source)] of the cells whose checks call it}, {"exercise:
    break"} the checks did not catch, {exercise} some break applied to)."""
    notebook = course.CHAPTERS / f"{assignment}.ipynb"
    cells = _test_cells(notebook)
    # which test cells call which exercise (from a check), on the reference solution
    callers = {}
    for grade_id, source in cells:
        seen = set()
        namespace = Chapter(assignment).namespace()
        _wrap_exercises(namespace, notebook,
                        lambda function, label: _recording(function, label, seen))
        exec(compile(source, grade_id, "exec"), dict(namespace))
        for label in {entry.rpartition(".")[0] for entry in seen}:
            callers.setdefault(label, []).append((grade_id, source))
    missed, breakable = set(), set()
    for label in sorted(callers):
        for kind, words in BREAKS.items():
            broken, messages = set(), []
            for grade_id, source in callers[label]:
                namespace = Chapter(assignment).namespace()
                _wrap_exercises(namespace, notebook, lambda function, name: _break_promise(
                    function, name, kind, broken) if name == label else function)
                try:
                    exec(compile(source, grade_id, "exec"), dict(namespace))
                except Exception as error:  # a check's failure: its message
                    messages.append(str(error))
            if label in broken:
                breakable.add(label)
                if not any(re.search(words, m) for m in messages):
                    missed.add(f"{label}:{kind}")
    return callers, missed, breakable



# ------------------------------------------------------------------------------------------
# Each promise's function of checks.common, on its own (in the student's process here; the
# sandboxed side of expect_unchanged: tests/test_runtime.py)
from chapters.checks import common  # noqa: E402  (as the grader imports the checks)


def _fails(pattern, function, *args, **kwargs):
    with pytest.raises(common.CheckFailure, match=re.compile(pattern, re.S)):
        function(*args, **kwargs)


def test_expect_type_names_what_came_back_against_the_documented_kind():
    assert common.expect_type(2.5, float, "gap(x)") == 2.5
    assert common.expect_type(3, (int, float), "count(4)") == 3
    _fails(r"^gap\(x\) returned a 0-d Tensor where the exercise documents a Python float "
           r"\(\.item\(\) gives", common.expect_type, torch.tensor(2.5), float, "gap(x)")
    _fails(r"count\(4\) returned a bool \(True\) where the exercise documents an int",
           common.expect_type, True, int, "count(4)", documented="an int")
    _fails(r"returned None where the exercise documents `ours` \(a return statement is "
           r"missing", common.expect_type, None, torch.nn.Module, "load(ours)",
           documented="`ours`")
    assert common.expect_type(torch.nn.Linear(2, 2), torch.nn.Module, "load(ours)")


def test_expect_named_tuple_reads_the_class_from_the_calls_report():
    import collections
    Pair = collections.namedtuple("RelationScores", ["prev", "first"])
    named = common.observe(lambda: Pair(torch.zeros(2), torch.ones(2)))
    common.expect_named_tuple(named, "RelationScores", ("prev", "first"), "scores(w)")
    plain = common.observe(lambda: (torch.zeros(2), torch.ones(2)))
    _fails(r"scores\(w\) returned a tuple of 2 items where the exercise documents "
           r"RelationScores\(prev, first\), a named tuple\. Return RelationScores",
           common.expect_named_tuple, plain, "RelationScores", ("prev", "first"), "scores(w)")
    Other = collections.namedtuple("Scores", ["prev", "first"])
    other = common.observe(lambda: Other(torch.zeros(2), torch.ones(2)))
    _fails(r"returned a Scores where", common.expect_named_tuple, other, "RelationScores",
           ("prev", "first"), "scores(w)")


def test_expect_no_graph_and_expect_dtype():
    weight = torch.ones(3, requires_grad=True)
    attached = common.observe(lambda: weight * 2)
    _fails(r"^importance\(m\) returned a tensor attached to the autograd graph",
           common.expect_no_graph, attached, "importance(m)")
    with torch.no_grad():
        common.expect_no_graph(common.observe(lambda: weight * 2), "importance(m)")
    common.expect_no_graph(weight.detach(), "importance(m)")          # a direct call's result
    _fails(r"attached to the autograd graph", common.expect_no_graph, weight * 2, "f")
    common.expect_dtype(torch.zeros(2, dtype=torch.float64), torch.float64, "f", "x.dtype")
    _fails(r"^f is wrong: its dtype is torch\.float32 where it should be torch\.float64 "
           r"\(the model's dtype\)\. Make the result in that dtype", common.expect_dtype,
           torch.zeros(2), torch.float64, "f", "the model's dtype")


def test_expect_own_storage_finds_a_tensor_shared_with_the_source():
    source = torch.nn.Linear(3, 2)
    copy = torch.nn.Linear(3, 2)
    with torch.no_grad():
        copy.weight.copy_(source.weight)
    common.expect_own_storage(copy, source, "prune(mha)", "mha")
    copy.bias = source.bias
    _fails(r"prune\(mha\) returned a module whose `bias` shares its memory with mha's "
           r"`bias`", common.expect_own_storage, copy, source, "prune(mha)", "mha")
    view = torch.nn.Linear(3, 1)
    view.weight = torch.nn.Parameter(source.weight[:1])                # a view: one storage
    _fails(r"`weight` shares its memory with mha's `weight`", common.expect_own_storage,
           view, source, "prune(mha)", "mha")


def test_the_arguments_are_compared_only_where_no_opt_out_names_them():
    def scale(x, pair):
        x.mul_(2)
        pair[1].add_(1)
        return x

    x, pair = torch.ones(2), (torch.zeros(1), torch.zeros(1))
    _fails(r"^scale is wrong: it changed its argument `x` in place: 2 of 2 entries differ "
           r"from what was passed in\. The exercise leaves its inputs as they were",
           common.call, scale, x, pair)
    x = torch.ones(2)   # named as changing: its item of the pair is next
    _fails(r"changed its argument `pair\[1\]` in place: 1 of 1 entries differ", common.call,
           scale, x, (torch.zeros(1), torch.zeros(1)), may_change=(x,))
    x, pair = torch.ones(2), (torch.zeros(1), torch.zeros(1))
    assert common.call(scale, x, pair, may_change=(x, pair)) is x
    _fails(r"it came in as a float32 tensor of shape \(2, 3\) and left as a float32 tensor "
           r"of shape \(3, 2\)", common.call, lambda t: t.t_(), torch.zeros(2, 3))
    _fails(r"argument `module`'s mode after the call is eval where it should be training "
           r"\(the mode it came in with", common.call, lambda module: module.eval(),
           torch.nn.Linear(2, 2))
    common.call(lambda module: module.eval(), torch.nn.Linear(2, 2).eval())
