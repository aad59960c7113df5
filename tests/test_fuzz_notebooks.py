"""Fuzzing the grader's reading of a submission with hypothesis: whatever JSON (or bytes) a
student hands in, the notebook is either graded or refused with one line saying why, and
nothing the grader does with it afterwards (planning the run, flagging, duplicates,
staging it for nbgrader, grading it in the sandbox) raises. Then the grader goes on: the
reference notebook still gets full marks from the same zygote.

The mutations start from a real submission (chapter 1's reference) and replace, delete or
corrupt one value anywhere in it: a wrong type, a lone surrogate, nesting 100,000 deep,
bytes cut short or replaced.
"""
import copy
import json

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from autograde import course
from autograde.engine import Assignment, Grader, suspicious, trusted_namespace
from autograde.notebook import Submission, SubmissionError, duplicates, plan, read_submission
from autograde.record import staged_notebook
from tests.submissions import fill_submission

CHAPTER = "01_attention"
SOURCE = course.CHAPTERS / f"{CHAPTER}.ipynb"
DEEP = "__deep_nesting__"

surrogates = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1,
                     max_size=2)
scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20)
           | surrogates | st.just(DEEP) | st.sampled_from(["code", "markdown", "raw"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=8) | st.sampled_from(
                          ["nbgrader", "grade_id", "solution", "grade", "source",
                           "metadata", "cell_type", "outputs", "kernelspec"]), inner,
                          max_size=3), max_leaves=8)


@st.composite
def mutated(draw, nb):
    """The bytes of `nb` with one value replaced, deleted or corrupted."""
    nb = copy.deepcopy(nb)
    parent, key, node = None, None, nb
    for _ in range(draw(st.integers(1, 7))):  # how deep into the notebook the change is
        if not isinstance(node, (dict, list)) or not node:
            break
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if node is nb and draw(st.booleans()):
            keys = ["cells"]  # most of a notebook is in its cells
        parent, key = node, draw(st.sampled_from(keys))
        node = node[key]
    action = draw(st.sampled_from(["replace", "replace", "delete", "insert", "bytes"]))
    if parent is None or action == "replace":
        value = draw(values)
        if parent is None:
            nb = value
        else:
            parent[key] = value
    elif action == "delete":
        del parent[key]
    elif action == "insert":
        if isinstance(parent, list):
            parent.insert(key, draw(values))
        else:
            parent[draw(st.text(max_size=8))] = draw(values)
    data = json.dumps(nb).encode()
    if DEEP.encode() in data:
        depth = draw(st.sampled_from([999, 1001, 5000, 100_000]))
        data = data.replace(f'"{DEEP}"'.encode(), b"[" * depth + b"]" * depth, 1)
    if action == "bytes" and data:
        cut = draw(st.integers(0, len(data) - 1))
        junk = draw(st.binary(max_size=4))
        data = data[:cut] + junk + data[cut + draw(st.integers(0, 3)):]
    return data


def one_line(message):
    assert message and "\n" not in message and len(message) < 400, repr(message)
    message.encode("utf-8")  # no lone surrogate reaches a CSV, the gradebook or a page


@pytest.fixture(scope="module")
def reference():
    nb = json.loads(SOURCE.read_text())
    return nb, Assignment.from_source(SOURCE)


@pytest.fixture(scope="module")
def transform():
    from IPython.core.inputtransformer2 import TransformerManager
    return TransformerManager().transform_cell


def _reference_notebook():
    return json.loads(SOURCE.read_text())


@settings(max_examples=300, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_json_is_read_or_refused_in_one_line(data, reference, transform, tmp_path_factory):
    nb, assignment = reference
    raw = data.draw(mutated(nb))
    path = tmp_path_factory.mktemp("fuzz") / f"{CHAPTER}.ipynb"
    path.write_bytes(raw)
    try:
        read = read_submission(path, assignment)
    except SubmissionError as error:
        one_line(str(error))
        event(str(error).split(":")[0].split("(")[0][:60])
        staged = staged_notebook(nb, {})
    else:
        event("read")
        steps = plan(read, assignment, transform)
        for problem in duplicates(read) + suspicious(steps):
            one_line(f"{problem['cell']}: {problem['message']}")
        for label, source, _ in steps:
            source.encode("utf-8")
        staged = staged_notebook(nb, Submission.read(path).answers())
    json.dumps(staged, ensure_ascii=False).encode("utf-8")


@pytest.fixture(scope="module")
def released(course_release):
    return course_release(CHAPTER)


@pytest.fixture(scope="module")
def grader(released):
    from autograde.remote import Zygote
    zygote = Zygote(released / "release", slot=9)
    yield Grader(zygote, trusted_namespace(),
                 limits={"call_seconds": 10, "notebook_seconds": 30})
    zygote.close()


@pytest.fixture(scope="module")
def submission(released):
    load = lambda kind: json.loads(  # noqa: E731
        (released / kind / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    return fill_submission(load("source"), load("release"), {}), \
        Assignment.from_source(released / "source" / CHAPTER / f"{CHAPTER}.ipynb")


# Slow (a minute or so): each example is two gradings in the sandbox (the mutated notebook,
# then the reference); 25 examples reach every mutation kind of `mutated` several times.
@settings(max_examples=25, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_json_is_graded_or_refused_and_grading_goes_on(data, grader, submission,
                                                            tmp_path_factory):
    nb, assignment = submission
    folder = tmp_path_factory.mktemp("graded")
    path = folder / f"{CHAPTER}.ipynb"
    path.write_bytes(data.draw(mutated(nb)))
    result = grader.grade(assignment, path, "fuzz")
    assert result.status in ("graded", "error")
    assert [t.grade_id for t in result.tests] == [t.grade_id for t in assignment.tests]
    if result.status == "error":
        one_line(result.error)
        assert all(t.status == "error" and t.message == result.error for t in result.tests)
    for test in result.tests:
        test.message.encode("utf-8")
    reference = folder / "reference" / f"{CHAPTER}.ipynb"
    reference.parent.mkdir()
    reference.write_text(json.dumps(nb))
    after = grader.grade(assignment, reference, "reference")
    assert after.score == after.max_score, [t.message[:200] for t in after.tests]
