"""The checks' runtime (checks.common: observe, load_weights, is_module, is_class, type_name,
given): the same calls give the same answers whether the student's objects live here
(LocalRuntime: the student's Jupyter, the kit) or in a sandboxed process (the grader's
RemoteRuntime), so no check needs to know which one it talks to."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autograde.remote import RemoteRef, RemoteRuntime, Zygote, bwrap_path

from chapters.checks import common  # as the grader imports them (engine._check_imports)

CHECKS = Path(common.__file__).resolve().parent

STUDENT = '''
import torch
from torch import nn

class Doubler(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.proj = nn.Linear(size, size)

    def forward(self, x):
        return 2 * self.proj(x)

def scale_in_place(x):
    x.mul_(3)
    return x.sum()

def swap_weights(target, source):
    with torch.no_grad():
        target.weight.copy_(source.weight)
    return target

def zero_masked(scores, mask):
    return scores.masked_fill(~mask, 0.0)

def zero_masked_in_place(scores, mask):
    mask.logical_not_()
    return scores.masked_fill(mask, 0.0)
'''


def runtime_release(release):
    """`release` (a folder) made the release of one assignment, "runtime", that holds only the
    checks modules every release ships (the runtime's own): what a sandboxed process needs to
    run the operations on the student's objects. Returns `release`."""
    (release / "runtime" / "checks").mkdir(parents=True)
    for name in ("__init__.py", "common.py", "nested.py", "operations.py", "repair.py"):
        shutil.copy(CHECKS / name, release / "runtime" / "checks" / name)
    return release


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    zygote = Zygote(runtime_release(tmp_path_factory.mktemp("release")), slot=6)
    child = zygote.spawn("runtime", {"call_seconds": 30})
    child.run(STUDENT, "cell")
    yield child
    zygote.kill()
    zygote.close()


@pytest.fixture(params=["local", "remote"])
def side(request, child):
    """(runtime, {name: the student's object}) of one side."""
    if request.param == "local":
        namespace = {}
        exec(STUDENT, namespace)
        return common.LOCAL, namespace
    names = ("Doubler", "scale_in_place", "swap_weights", "zero_masked",
             "zero_masked_in_place")
    return RemoteRuntime(child, common.LOCAL), {n: child.lookup(n) for n in names}


def test_kinds_and_names(side):
    runtime, student = side
    with common.use_runtime(runtime):
        module = student["Doubler"](3)
        assert common.is_class(student["Doubler"]) and not common.is_module(student["Doubler"])
        assert common.is_module(module) and not common.is_class(module)
        assert not common.is_module(student["scale_in_place"])
        assert common.type_name(module) == "Doubler"
        assert not common.is_module(torch.zeros(1)) and common.type_name(1.5) == "float"


def test_observe_reports_values_and_in_place_changes(side):
    runtime, student = side
    x = torch.ones(2, 2, dtype=torch.float64)
    with common.use_runtime(runtime):
        # (x named as changing: an exercise whose job is to change it)
        seen = common.observe(student["scale_in_place"], x, may_change=(x,))
    assert seen.error is None and float(seen.result) == 12.0
    assert torch.equal(seen.args[0], torch.full((2, 2), 3.0, dtype=torch.float64))
    if runtime is not common.LOCAL:  # what the grader sent went by value: its copy stays
        assert torch.equal(x, torch.ones(2, 2, dtype=torch.float64))
    with common.use_runtime(runtime):
        failed = common.observe(student["scale_in_place"], "not a tensor")
    assert failed.result is None and failed.error[0] == "AttributeError"


def test_load_weights_then_outputs_on_our_inputs(side):
    runtime, student = side
    weight, bias = torch.randn(3, 3), torch.randn(3)
    with common.use_runtime(runtime):
        module = student["Doubler"](3)
        found = common.load_weights(module, {"proj": {"weight": weight, "bias": bias},
                                             "missing": {"weight": weight}})
        x = torch.randn(4, 3)
        seen = common.observe(module, x)
    assert found == {"proj": {"weight": [3, 3], "bias": [3]}, "missing": None}
    assert torch.allclose(seen.result, 2 * (x @ weight.T + bias))


def test_load_weights_through_nested_submodules_and_into_the_module_itself(side):
    runtime, _ = side
    weight, bias = torch.randn(12, 4), torch.randn(4, 4)
    with common.use_runtime(runtime):
        mha = common.given("torch.nn:MultiheadAttention", 4, 2, batch_first=True)
        stack = common.given("torch.nn:Sequential", mha)
        found = common.load_weights(stack, {"0": {"in_proj_weight": weight},
                                            "0.out_proj": {"weight": bias},
                                            "0.nothing": {"weight": bias}})
        found_here = common.load_weights(mha, {"": {"in_proj_weight": weight + 1}})
        state = dict(mha.state_dict())  # an OrderedDict of tensors: by value
    assert found == {"0": {"in_proj_weight": [12, 4]}, "0.out_proj": {"weight": [4, 4]},
                     "0.nothing": None}
    assert isinstance(found, common.Loaded) and found.slot("0", "in_proj_weight") == (12, 4)
    assert not found.has("0.nothing") and found.slot("0.nothing", "weight") is None
    assert found_here == {"": {"in_proj_weight": [12, 4]}}
    assert torch.equal(state["in_proj_weight"], weight + 1)
    assert torch.equal(state["out_proj.weight"], bias)


def test_len_is_taken_where_the_object_lives(side):
    runtime, student = side
    with common.use_runtime(runtime):
        stack = common.given("torch.nn:Sequential", common.given("torch.nn:Identity"),
                             common.given("torch.nn:Identity"))
        empty = common.given("torch.nn:Sequential")
        module = student["Doubler"](3)
        assert len(stack) == 2 and len(empty) == 0
        assert module and stack  # an object stays true, sized or not
        with pytest.raises(TypeError):
            len(module)


def test_given_builds_the_courses_objects_where_the_student_code_runs(side):
    runtime, student = side
    with common.use_runtime(runtime):
        source = common.given("torch.nn:Linear", 3, 3, bias=False)
        target = common.given("torch.nn:Linear", 3, 3, bias=False)
        assert common.is_module(source) and common.type_name(source) == "Linear"
        common.load_weights(source, {"": {}})  # an attribute "" does not exist: nothing to do
        seen = common.observe(student["swap_weights"], target, source, may_change=(target,))
        assert seen.error is None
        weights = {"weight": source.weight}  # read back by value
    if runtime is not common.LOCAL:
        assert isinstance(source, RemoteRef) and isinstance(weights["weight"], torch.Tensor)
        assert not isinstance(weights["weight"], RemoteRef)
    assert torch.equal(target.weight.detach(), weights["weight"].detach())


def test_a_call_that_changes_its_inputs_fails_on_both_sides(side):
    """observe() and call() compare the arguments before and after the call, wherever the
    student's objects live (common.expect_unchanged): a tensor and a module's parameters,
    each named by the student's own parameter name (read where the function lives)."""
    runtime, student = side
    with common.use_runtime(runtime):
        for run in (common.observe, common.call):
            with pytest.raises(common.CheckFailure, match=r"scale_in_place is wrong: it "
                               r"changed its argument `x` in place: 4 of 4 entries differ"):
                run(student["scale_in_place"], torch.ones(2, 2, dtype=torch.float64))
        source = common.given("torch.nn:Linear", 3, 3, bias=False)
        target = common.given("torch.nn:Linear", 3, 3, bias=False)
        with pytest.raises(common.CheckFailure, match=r"changed its argument `target`'s "
                           r"`weight` in place: 9 of 9 entries differ"):
            common.observe(student["swap_weights"], target, source)
        with pytest.raises(common.CheckFailure, match=r"argument `source`'s mode after the "
                           r"call is eval where it should be training"):
            common.observe(lambda target, source: source.eval(), target, source)


def test_a_call_whose_inputs_require_grad_is_compared_too(side):
    """call() with an input that requires grad: its result joins the grader's graph, and an
    argument the student's code changed in place (here the mask beside the scores) fails
    the call on both sides, although under the autograder that call's arguments stay in
    the student's process (issue 20: such calls went uncompared there)."""
    runtime, student = side
    mask = torch.tensor([[True, False], [True, True]])
    with common.use_runtime(runtime):
        scores = torch.ones(2, 2, dtype=torch.float64, requires_grad=True)
        result = common.call(student["zero_masked"], scores, mask.clone())
        result.sum().backward()
        assert torch.equal(scores.grad, mask.double())
        with pytest.raises(common.CheckFailure, match=r"zero_masked_in_place is wrong: it "
                           r"changed its argument `mask` in place: 4 of 4 entries differ"):
            common.call(student["zero_masked_in_place"], scores, mask.clone())
    assert torch.equal(mask, torch.tensor([[True, False], [True, True]]))


@pytest.mark.parametrize("path", ["builtins:open", "os:system", "torch.nn:Linear.__init__",
                                  "torch", "__main__:Doubler"])
def test_given_calls_only_the_courses_code(side, path):
    runtime, _ = side
    with common.use_runtime(runtime), pytest.raises(PermissionError):
        common.given(path)


@pytest.mark.parametrize("report", [
    [],                                                    # not a dict
    {"proj": {"weight": [3, 3]}},                          # an attribute left out
    {"proj": {"weight": [3, 3], "bias": [3]}, "missing": None, "extra": None},
    {"proj": {"weight": [3, 3]}, "missing": None},         # a part left out
    {"proj": {"weight": [3, 3.0], "bias": [3]}, "missing": None},  # not a shape
    {"proj": {"weight": [3, True], "bias": [3]}, "missing": None},
    {"proj": {"weight": [3, 3], "bias": 3}, "missing": None},
    {"proj": "Linear", "missing": None},
])
def test_what_load_weights_found_is_validated_once(report):
    """Loaded.of: a report that is not of load_weights' form (a process that runs the
    student's code sent it) fails as malformed data, on either runtime."""
    weights = {"proj": {"weight": torch.zeros(3, 3), "bias": torch.zeros(3)},
               "missing": {"weight": torch.zeros(3, 3)}}
    good = {"proj": {"weight": [3, 3], "bias": "Parameter"}, "missing": None}
    assert common.Loaded.of(good, weights).slot("proj", "bias") == "Parameter"
    with pytest.raises(common.CheckFailure, match="malformed data"):
        common.Loaded.of(report, weights)


@pytest.mark.skipif(bwrap_path() is None, reason="needs the bwrap sandbox")
def test_the_sandbox_starts_from_a_virtualenv_reached_through_a_symlink(tmp_path):
    """.venv -> elsewhere (a common set-up): the sandbox binds the environment's resolved
    folder, so it must start Python there, not by the symlinked path it cannot see."""
    link = tmp_path / "venv"
    link.symlink_to(Path(sys.prefix).resolve())
    release = tmp_path / "release"
    (release / "runtime" / "checks").mkdir(parents=True)
    script = ("from autograde.remote import Zygote\n"
              f"zygote = Zygote({str(release)!r}, slot=11)\n"
              "child = zygote.spawn('runtime', {'call_seconds': 30})\n"
              "child.run('import torch; x = torch.ones(2)', 'cell')\n"
              "print(zygote.sandbox, float(child.lookup('x').sum()))\n"
              "zygote.close()\n")
    done = subprocess.run([str(link / "bin" / Path(sys.executable).name), "-c", script],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(CHECKS.parent.parent)))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["bwrap", "2.0"]


def test_observe_traces_the_tensors_the_students_lines_compute(side):
    """The trace family's report (operations.attempt_traced): the tensors the student's own
    lines returned, with their place, in order, on both sides (under the grader they come
    back over the wire with the observation), as the student's code computed them."""
    runtime, student = side
    x = torch.randn(2, 3)
    with common.use_runtime(runtime):
        module = student["Doubler"](3)
        seen = common.observe(module, x)
    # (one line of the cell: the grader runs the cell without its first, empty line)
    assert len({place for place, *_ in seen.trace}) == 1
    assert seen.trace[0][0].startswith(("line 10 of ", "line 11 of "))
    assert len(seen.trace) == 2 and all(code in ("", "return 2 * self.proj(x)")
                                        for _place, code, *_ in seen.trace)
    projected, doubled = (tensor for _place, _code, tensor, *_ in seen.trace)
    assert torch.equal(doubled, seen.result) and torch.equal(2 * projected, doubled)
    # the data flow: what made each tensor, and which record each read (-1: not traced)
    (_, _, _, linear, read_x), (_, _, _, _, read_projected) = seen.trace
    assert linear == "linear" and read_x[0] == ((2, 3), -1)
    assert ((2, 3), 0) in read_projected


def test_a_trace_report_is_checked_and_bounded():
    """What a student's process reports as its trace is data (it may lie): a malformed
    report is dropped whole, a long one cut to the operations' bounds; it can only change
    the words of a message (the trace family), never a grade."""
    from chapters.checks import operations
    tensor = torch.zeros(4)
    assert common.traced_records("not a list") == []
    assert common.traced_records([["line 1", 5, tensor]]) == []          # code not a string
    assert common.traced_records([["line 1", "x", torch.zeros(4, dtype=torch.int64)]]) == []
    many = common.traced_records([["line 1" * 100, "x", tensor]] * 1000)
    assert len(many) == operations.TRACE_MOST
    assert all(len(place) <= operations.TRACE_TEXT for place, *_ in many)
    # the data flow: a source is an earlier record; a mask (bool) is traced for its shape
    mask = torch.ones(2, 2, dtype=torch.bool)
    assert common.traced_records([["l", "x", tensor, "neg", [[[4], 0]]]]) == []
    assert common.traced_records([["l", "x", tensor, "neg", [[[4], -1]]],
                                  ["l", "y", mask, "ge", [[[4], 0]]]])[1][4] == (((4,), 0),)
    big = torch.zeros(operations.TRACE_ENTRIES // 2 + 1)
    assert len(common.traced_records([["l", "x", big]] * 3)) == 1


def test_a_trace_reads_the_records_before_each_even_in_place():
    """An operation that returns the very tensor it read (in place, or .to() that changes
    nothing) reads the record before it, never itself: the trace stays well-formed, and the
    grader keeps it (common.traced_records drops a trace whose sources are not earlier)."""
    from chapters.checks import operations

    def student(x):
        y = x * 2
        y = y.to(y.dtype)
        return y.add_(1)

    result, error, trace = operations.attempt_traced(student, torch.ones(3))
    assert error is None and [record[3] for record in trace] == ["mul", "to", "add_"]
    assert [read[0][1] for *_, read in trace] == [-1, 0, 1]
    assert len(common.traced_records(trace)) == 3


RAISING = '''import torch
from torch import nn

def mismatched_scores(q, k):
    scale = q.shape[-1] ** -0.5
    scores = q @ k * scale
    return scores

class Mismatched(nn.Module):
    def __init__(self, size):
        super().__init__()
        first = torch.ones(size, 2 * size)
        self.proj = nn.Parameter(first @ torch.ones(size, size))
'''


def test_a_raising_call_gets_the_same_message_on_both_sides(child):
    """A mistake that raises inside the student's code: the message names the shapes on
    their raising line and the torch call that raised (operations.line_shapes) on both sides,
    word for word, whichever way the check reaches the call: observed (inputs without
    grad), made by the check itself (call() on inputs that require grad: the grader's
    runtime asks the student's process to note the raising torch call, and its error reply
    brings the line shapes), or attempted directly (construct(): the proxy's exception)."""
    from autograde import kit
    namespace = {}
    exec(kit._compiled_cell(RAISING, "cell raising"), namespace)
    child.run(RAISING, "cell raising")
    sides = {"local": (common.LOCAL, namespace),
             "remote": (RemoteRuntime(child, common.LOCAL),
                        {n: child.lookup(n) for n in ("mismatched_scores", "Mismatched")})}
    said = {}
    for label, (runtime, student) in sides.items():
        with common.use_runtime(runtime):
            messages = []
            for grad in (False, True):
                q = torch.ones(2, 3, 4, requires_grad=grad)
                with pytest.raises(common.CheckFailure) as failed:
                    common.call(student["mismatched_scores"], q, torch.ones(2, 3, 4))
                messages.append(str(failed.value))
            _, built = common.construct(student["Mismatched"], 3)
            said[label] = messages, built["error"]
    assert said["local"] == said["remote"]
    (observed, made), error = said["remote"]
    assert observed == made
    assert "line 6 of cell raising: scores = q @ k * scale" in made
    assert "(the tensors on that line: `q` (2, 3, 4), `k` (2, 3, 4))" in made
    assert "Likely cause: `k` enters the product untransposed" in made
    assert error[3] == ("line 13 of cell raising: "
                        "self.proj = nn.Parameter(first @ torch.ones(size, size))")
    assert json.loads(error[4])["names"] == [["first", [3, 6]]]


def test_a_forged_line_shapes_report_changes_no_verdict():
    """The error reply's "line_shapes" is the student's process's report: a proxy keeps it
    only as text of at most LINE_TEXT characters ("" otherwise: never a fault), and a check
    reads it only for the words of its message (diagnose._line_report checks each entry),
    so a forged, oversized or ill-typed one leaves the verdict, a failure, as it is."""
    import socket

    from autograde import remote, wire
    from chapters.checks import operations
    forged = ["x" * (operations.LINE_TEXT + 1), {"call": None}, ["q"], 7, None,
              json.dumps({"call": ["matmul", [[-1], "x"]], "names": [["q", [2**50]]],
                          "others": "no"}),
              json.dumps({"call": ["matmul", [[2, 3], [5, 7]]], "names": [["q", [2, 3]]]}),
              "not json"]
    for shapes in forged:
        ours, theirs = socket.socketpair()
        with ours, theirs:
            proxy = remote.Child(ours, {"call_seconds": 5}, zygote=None)
            theirs.sendall(wire.pack({"error": {"error": "RuntimeError", "message":
                                                "mat1 and mat2 shapes cannot be multiplied",
                                                "base": "RuntimeError"},
                                      "traceback": "", "line_shapes": shapes}))
            ref = remote.RemoteRef(proxy, {"ref": 1, "type": "function", "kind": "callable"})
            with common.use_runtime(RemoteRuntime(proxy, common.LOCAL)):
                result, error = common.attempt(ref, torch.ones(2, 3))
                kept = error[4]
                with pytest.raises(common.CheckFailure, match="raised RuntimeError"):
                    common.raised(error, "scores")
        assert result is None and error[0] == "RuntimeError"
        assert kept == (shapes if isinstance(shapes, str)
                        and len(shapes) <= operations.LINE_TEXT else "")


def test_torchs_frames_are_no_students_under_either_path_of_a_symlinked_virtualenv():
    """The student's process runs the virtualenv's resolved Python (remote._sandbox_python),
    so the traceback it sends back names torch's files by their resolved path: a frame
    there is still torch's (operations._is_students), not "the line of the student's cell"
    that a message quotes, wherever the grader reached the virtualenv from."""
    from chapters.checks import operations
    for path in (torch.__file__, os.path.realpath(torch.__file__)):
        assert not operations._is_students(os.path.join(os.path.dirname(path), "nn", "init.py"))
    assert operations._is_students("cell raising")
