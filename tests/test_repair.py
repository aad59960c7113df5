"""The repair family (checks.repair, checks.common._repair): where a check fails with a message
that names no cause, the one small edit of the student's code with which it passes is named,
the same in the student's Jupyter, the kit and the grader; the verdict never changes."""

import pytest
import torch
from torch import nn

from autograde import kit
from autograde.remote import RemoteRuntime, Zygote
from chapters.checks import common, diagnose, operations, repair
from tests.test_runtime import runtime_release



# ------------------------------------------------------------------ small checks of our own
def _inputs(seed, *shapes):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=generator, dtype=torch.float64) for shape in shapes]


@common.check
def softmax_rows(function, seed=0):
    """function(x) must be the softmax of x (2, 3, 5) along its last axis."""
    x, = _inputs(seed, (2, 3, 5))
    common.expect_close(common.call(function, x), torch.softmax(x, -1), "softmax_rows")


@common.check
def scores(function, seed=0):
    """function(q, k) must be q k^T, q (2, 3, 4), k (2, 5, 4)."""
    q, k = _inputs(seed, (2, 3, 4), (2, 5, 4))
    common.expect_close(common.call(function, q, k), q @ k.transpose(-2, -1), "scores")


@common.check
def ratio(function, seed=0):
    """function(a, b) must be a / (|b| + 1), all (2, 3)."""
    a, b = _inputs(seed, (2, 3), (2, 3))
    common.expect_close(common.call(function, a, b), a / (b.abs() + 1), "ratio")


@common.check
def doubled(cls, seed=0):
    """cls(3) must be a module whose forward(x) is 2 x (x: (2, 3))."""
    x, = _inputs(seed, (2, 3))
    module, data = common.construct(cls, 3)
    common.judge_construct(data, "Twice(3)")
    common.expect_close(common.call(module, x), 2 * x, "Twice(3)(x)")


STUDENT = '''import torch
from torch import nn

def softmax_axis(x):
    weights = x.softmax(dim=1)
    return weights

def no_transpose(q, k):
    product = q @ k
    return product

def swapped(a, b):
    return (b.abs() + 1) / a

def reads_a(a, b):
    return a / (a.abs() + 1)

def extra_line(x):
    e = x.exp()
    e = e - e.mean()
    return e / e.sum(-1, keepdim=True)

def right(x):
    return torch.softmax(x, dim=-1)

def far_off(x):
    return torch.zeros_like(x) + 5

class Twice(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.size = size

    def forward(self, x):
        return x + x.flip(0)
'''


def _student(source=STUDENT, cell="cell student"):
    """The student's names, their cell registered as the kit and Jupyter register it."""
    namespace = {}
    exec(kit._compiled_cell(source, cell), namespace)
    return namespace


def _message(check, obj):
    with pytest.raises(common.CheckFailure) as failed:
        check(obj)
    return str(failed.value)


def test_each_operator_finds_and_describes_its_edit():
    student = _student()
    said = {name: _message(check, student[name]) for check, name in (
        (softmax_rows, "softmax_axis"), (scores, "no_transpose"), (ratio, "swapped"),
        (ratio, "reads_a"), (softmax_rows, "extra_line"))}
    assert said["softmax_axis"] == (
        "line 2 of your `softmax_axis`: `weights = x.softmax(dim=1)` \u2014 with `-1` in place "
        "of `1` (the line then reads `weights = x.softmax(dim=-1)`) this check passes: the "
        "step runs along another axis than it should.")
    assert said["no_transpose"].startswith(
        "line 2 of your `no_transpose`: `product = q @ k` \u2014 with `k.transpose(-2, -1)` in "
        "place of `k` (the line then reads `product = q @ k.transpose(-2, -1)`) this check "
        "passes: a transpose is missing.\nno_transpose raised")
    assert "with `a / (b.abs() + 1)` in place of `(b.abs() + 1) / a` (the line then reads " \
           "`return a / (b.abs() + 1)`) this check passes: the operands should be in the " \
           "other order" in said["swapped"]
    assert "it reads `a` where it should read `b`" in said["reads_a"]
    assert said["extra_line"].startswith(
        "line 3 of your `extra_line`: `e = e - e.mean()` \u2014 without this line this check "
        "passes: this line should not be there.")


def test_a_method_of_the_students_class_is_repaired():
    message = _message(doubled, _student()["Twice"])
    assert message == ("line 2 of your `Twice.forward`: `return x + x.flip(0)` \u2014 with "
                       "`x` in place of `x.flip(0)` (the line then reads `return x + x`) this "
                       "check passes: the `flip` step should "
                       "not be there.")


def test_the_search_runs_only_after_a_failure_that_names_no_cause(monkeypatch):
    asked = []
    monkeypatch.setattr(common.LocalRuntime, "mutants",
                        lambda self, obj: asked.append(obj) or operations.mutants(obj))
    student = _student()
    softmax_rows(student["right"])                 # a correct function: never searched
    assert asked == []
    message = _message(scores, _student('''
def transposed(q, k):
    return (q @ k.transpose(-2, -1)).transpose(-2, -1)
''')["transposed"])                                  # a family names the layout: kept
    assert "axes are in another order" in message and asked == []


def test_no_source_or_no_passing_edit_keeps_the_message():
    no_source = {}
    exec(compile("def hidden(x):\n    return x.softmax(dim=1)\n", "<nowhere>", "exec"),
         no_source)
    assert operations.mutants(no_source["hidden"]) == []
    for function in (no_source["hidden"], _student()["far_off"]):
        message = _message(softmax_rows, function)
        assert common.MESSAGES["wrong"].split("{")[1].split("}")[1] in message
        assert "this check passes" not in message


def test_the_message_is_the_same_every_time():
    student = _student()
    assert len({_message(ratio, student["reads_a"]) for _ in range(3)}) == 1
    first = repair.mutants("def f(x, y):\n    return x.sum(dim=1) @ y.T - 2\n")
    assert first == repair.mutants("def f(x, y):\n    return x.sum(dim=1) @ y.T - 2\n")
    assert [about["kind"] for _, about in first] == sorted(
        (about["kind"] for _, about in first), key=repair.KINDS.index)


def test_a_mutant_rebinds_none_of_the_students_globals():
    student = _student("LIMIT = 2\n\ndef capped(x):\n    global LIMIT\n    LIMIT = 3\n"
                       "    return x.clamp(max=LIMIT)\n")
    for mutant, _ in operations.mutants(student["capped"]):
        try:
            mutant(torch.ones(2))
        except Exception:
            pass
    assert student["LIMIT"] == 2


def test_no_edit_inside_a_while_loop():
    source = "def f(x):\n    i = 0\n    while i < 3:\n        x = x + 1\n        i += 1\n" \
             "    return x\n"
    lines = {about["line"] for _, about in repair.mutants(source)}
    assert lines and not lines & {3, 4, 5}


def test_forged_descriptions_are_refused():
    good = {"line": 2, "code": "x", "edited": "y", "kind": "name", "before": "x",
            "after": "y", "function": "f", "step": ""}
    assert common.repair_descriptions([["m", good]]) == [("m", good)]
    for bad in ({**good, "line": "2"}, {**good, "kind": "rewrite"}, {**good, "code": 7},
                {**good, "after": "y" * (operations.LINE_TEXT + 1)}, "text"):
        assert common.repair_descriptions([["m", good], ["m", bad]]) == []
    assert common.repair_descriptions("no") == []


# ------------------------------------------------------------------ the grader's side
@pytest.fixture(scope="module")
def child(tmp_path_factory):
    zygote = Zygote(runtime_release(tmp_path_factory.mktemp("release")), slot=7)
    child = zygote.spawn("runtime", {"call_seconds": 30})
    child.run(STUDENT, "cell student")
    yield child
    zygote.kill()
    zygote.close()


def test_the_grader_names_the_same_edit_as_the_kit(child):
    """Over a real socket: the mutants are made in the student's process and sent back as
    new objects with their descriptions; the grader reruns the check with them and says what
    the kit says, word for word."""
    student = _student()
    cases = ((softmax_rows, "softmax_axis"), (scores, "no_transpose"), (ratio, "reads_a"),
             (softmax_rows, "extra_line"), (doubled, "Twice"), (softmax_rows, "far_off"))
    local = [_message(check, student[name]) for check, name in cases]
    with common.use_runtime(RemoteRuntime(child, common.LOCAL)):
        remote = [_message(check, child.lookup(name)) for check, name in cases]
    assert remote == local
    assert sum("this check passes" in message for message in remote) == 5


def test_the_graders_search_stops_well_before_the_cells_and_the_notebooks_time():
    import time
    from types import SimpleNamespace
    now = time.monotonic()
    for test, notebook, most in ((None, None, 60), (now + 40, None, 10), (now + 40, now + 50, 5),
                                 (now - 1, None, 0)):
        child = SimpleNamespace(test_deadline=test, deadline=notebook)
        assert RemoteRuntime(child, common.LOCAL).repair_seconds(60) == pytest.approx(
            most, abs=0.1)
    assert common.LOCAL.repair_seconds(60) == 60


def test_the_repair_sentence_is_a_family():
    about = {"line": 3, "code": "y = x", "edited": "", "kind": "delete", "before": "y = x",
             "after": "", "function": "f", "step": ""}
    assert diagnose.FAMILY_PATTERN.search(diagnose.repaired(about))


CRASHING = '''import os

def crashes_under_a_mutant(x):
    if x.dim() == 99:
        os._exit(3)
    return x * 2
'''


def test_a_mutant_that_kills_the_students_process_leaves_the_message_and_marks_it_lost(
        tmp_path):
    """A mutant may take a branch the student's code never takes (here one that exits): the
    student's process dies in the search, after the check had failed. The check keeps its own
    message (no fault is charged to it) and the process is marked lost, so that the engine
    starts a fresh one for the next test cell (autograde.engine, Child.lost)."""
    zygote = Zygote(runtime_release(tmp_path), slot=8)
    try:
        child = zygote.spawn("runtime", {"call_seconds": 30})
        child.run(CRASHING, "cell student")
        with common.use_runtime(RemoteRuntime(child, common.LOCAL)):
            remote = _message(softmax_rows, child.lookup("crashes_under_a_mutant"))
        # (not compared with the kit's here: in this process the mutant would exit pytest)
        assert "is wrong (largest error" in remote and "this check passes" not in remote
        assert child.lost is not None and child.lost.kind == "crash"
    finally:
        zygote.kill()
        zygote.close()
