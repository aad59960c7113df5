"""The student kit judges as the grader does, from stored data, with no answer inside.

Every chapter's kit (autograde/kit.py: the checks with their @reference bodies removed,
plus the fixtures recorded from the reference solution) is imported beside the course's
own checks, and each submission of the catalogue (the reference, every correct variant, the
bugs of tests.submissions.sample_bugs; COURSE_ALL_SUBMISSIONS=1: every bug) runs the visible
tests both ways: the verdicts and messages must be the same.
"""
import ast
import importlib
import json
import re
import sys

import pytest

from autograde import course, kit
from autograde.engine import _check_imports
from tests.across_workers import made_once
from tests.chapter import Chapter
from tests.submissions import PER_CELL, every_submission

ASSIGNMENTS = course.assignments()
HARNESS = {assignment: Chapter(assignment) for assignment in ASSIGNMENTS}  # tests/chapter.py


def _write_kits(root, record):
    """Every chapter's kit as the package kit_<assignment> in `root`, with its fixtures
    recorded from the reference solution (record: kit.record, or conftest's
    recorded_fixtures, every chapter's visible tests run once per test run)."""
    fixtures = record(root / "fixtures", ASSIGNMENTS)
    for assignment in ASSIGNMENTS:
        kit.write_checks(root / f"kit_{assignment}",
                         course.checks_modules(assignment, kit_form=True), [fixtures[assignment]])


@pytest.fixture(scope="session")
def kits(run_dir, recorded_fixtures):
    """{assignment: {alias: kit module}}, as each notebook names its checks modules (the kits
    written once per test run, imported by each worker)."""
    root = made_once(run_dir, "kits", lambda folder: _write_kits(folder, recorded_fixtures))
    sys.path.insert(0, str(root))
    found = {}
    for assignment in ASSIGNMENTS:
        package = f"kit_{assignment}"
        # the notebook's `from checks import X as alias`, as the grader reads them
        graders = _check_imports(json.loads((course.CHAPTERS / f"{assignment}.ipynb")
                                            .read_text()))
        found[assignment] = {
            alias: importlib.import_module(f"{package}.{module.__name__.rsplit('.', 1)[1]}")
            for alias, module in graders.items()}
    yield found
    sys.path.remove(str(root))


def _submissions():
    for assignment, label, cells in every_submission(ASSIGNMENTS, PER_CELL):
        yield pytest.param(assignment, label, cells, id=f"{assignment}-{label}")


@pytest.mark.parametrize("assignment, label, cells", list(_submissions()))
def test_kit_gives_the_graders_verdicts(kits, assignment, label, cells, capsys):
    notebook = course.CHAPTERS / f"{assignment}.ipynb"
    graders = kit.run_visible_tests(notebook, HARNESS[assignment].namespace(cells))
    students = kit.run_visible_tests(notebook, kit.chapter_namespace(notebook, cells,
                                                                     kits[assignment]))
    assert students == graders
    if label == "reference":
        assert set(students.values()) == {None}


def test_kit_modules_hold_no_reference_code(kits):
    """Every @reference body is replaced, and the kit says it is the kit."""
    for assignment, modules in kits.items():
        for module in {m.__name__.rsplit(".", 1)[0] + ".common" for m in modules.values()}:
            assert importlib.import_module(module).KIT is True
    # (what kit_source makes of a checks file is the same for every chapter's kit: once)
    for path in course.CHECKS.glob("*.py"):
        original = ast.parse(path.read_text())
        stripped = ast.parse(kit.kit_source(path.read_text()))
        names = {n.name for n in ast.walk(original) if isinstance(n, ast.FunctionDef)
                 and any(kit._is_reference(d) for d in n.decorator_list)}
        for node in ast.walk(stripped):
            if isinstance(node, ast.FunctionDef) and node.name in names:
                assert len(node.body) == 1 and isinstance(node.body[0], ast.Raise)


def test_kit_refuses_a_call_it_has_no_answers_for(kits):
    check = kits["01_attention"]["check"]
    with pytest.raises(AssertionError, match="no stored answers .* hidden tests run in the "
                                             "grader"):
        check.attention_scores(lambda q, k: q @ k.mT, seed=12345)


def test_kit_traces_the_students_lines_as_the_grader_does(kits):
    """The trace family in the kit: the formula's step values replay from the fixtures
    (common.step_values, beside step_mistakes' answers) and the student's lines are traced
    in-process, so the message that says where their code departs from the formula is the
    grader's, word for word."""
    from tests.submissions import attention
    for name, words in (("sdpa_weights_squared", "squared (** 2)"),
                        ("sdpa_max_shift_over_queries", "with its maximum along")):
        cells = attention.BUGS[name].cells
        notebook = course.CHAPTERS / "01_attention.ipynb"
        graders = kit.run_visible_tests(notebook, HARNESS["01_attention"].namespace(cells))
        students = kit.run_visible_tests(notebook, kit.chapter_namespace(notebook, cells,
                                                                         kits["01_attention"]))
        assert students == graders
        assert "the formula" in students["test_sdpa"] and words in students["test_sdpa"]


# How each side names the student's cell in "line N of <cell>": the kit by the notebook's
# cell number ("04_masks.ipynb cell 9"), the grader by its grade_id ("cell masked_softmax")
_CELL_NAMES = re.compile(r"\b\d\d_\w+\.ipynb cell \d+|\bcell \w+(?=[:)\n])")


def test_the_sandboxed_grader_words_a_raising_mistake_as_the_kit(kits, course_release,
                                                                 tmp_path):
    """A catalogued mistake that raises where the grader makes the call itself
    (masked_softmax's check calls it on scores that require grad, so that its result joins
    the grader's autograd graph: not an observed call), graded in the sandbox as `python -m
    autograde grade` grades it (on the kit's inputs: no salt): the message is the kit's
    word for word, the shapes on the raising line and the likely cause included (the
    sandbox's error reply carries them, autograde.protocol's "line_shapes"), but for the
    name of the student's cell."""
    from autograde.engine import Assignment, Grader, trusted_namespace
    from autograde.remote import Zygote
    from tests.submissions import fill_submission
    from tests.submissions import masks as catalogue
    assignment, test = "04_masks", "test_masked_softmax"
    cells = catalogue.BUGS["raise_mask_viewed_to_scores"].cells
    directory = course_release(assignment)
    source = directory / "source" / assignment / f"{assignment}.ipynb"
    released = json.loads((directory / "release" / assignment / source.name).read_text())
    submission = tmp_path / source.name
    submission.write_text(json.dumps(fill_submission(json.loads(source.read_text()),
                                                     released, cells)))
    zygote = Zygote(directory / "release", slot=12)
    try:
        grader = Grader(zygote, trusted_namespace())
        grader.salt = None   # the checks' inputs as written, which the kit's fixtures hold
        graded = grader.grade(Assignment.from_source(source), submission, "student")
    finally:
        zygote.close()
    graders = next(t.message for t in graded.tests if t.grade_id == test)
    notebook = course.CHAPTERS / source.name
    students = kit.run_visible_tests(notebook, kit.chapter_namespace(notebook, cells,
                                                                     kits[assignment]))[test]
    assert "(the tensors on that line: `mask`" in graders and "Likely cause" in graders
    assert _CELL_NAMES.sub("<cell>", students) == "CheckFailure: " + _CELL_NAMES.sub(
        "<cell>", graders)
