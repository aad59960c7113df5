"""The default grading engine on the whole catalogue: every correct alternative gets full
marks, every bug (a fixed sample of up to 4 per test cell, tests.submissions.sample_bugs;
COURSE_ALL_SUBMISSIONS=1: every bug) loses exactly its tests, with the diagnosis the
catalogue names.

The student's code runs in the sandbox (bwrap when installed), the checks here; this is
the same verdict as the notebook's own test cells (tests/test_checks_*) and as nbgrader
(tests/test_nbgrader.py), reached without executing the notebooks' demonstrations.
"""
import json
import re

import pytest

from autograde import course
from autograde.engine import Assignment, Grader, suspicious, trusted_namespace
from autograde.remote import Zygote
from tests.submissions import PER_CELL, catalogue, catalogue_submissions


@pytest.fixture(scope="module")
def grader(released_course):
    zygote = Zygote(released_course / "release", slot=0)
    yield Grader(zygote, trusted_namespace())
    zygote.close()


def graded_catalogue(released_course, grader, assignment, tmp_path):
    notebook = f"{assignment}.ipynb"
    source_nb = json.loads((released_course / "source" / assignment / notebook).read_text())
    student_nb = json.loads((released_course / "release" / assignment / notebook).read_text())
    spec = Assignment.from_source(released_course / "source" / assignment / notebook)
    results = {}
    for student, (nb, expected) in catalogue_submissions(assignment, source_nb, student_nb,
                                                         per_cell=PER_CELL).items():
        path = tmp_path / f"{student}.ipynb"
        path.write_text(json.dumps(nb))
        results[student] = (grader.grade(spec, path, student), expected)
    return results


# One of the suite's slowest (tens of seconds for a chapter): every submission of the sample is
# a real grading in the sandbox, as `python -m autograde grade` does it; the sample (up to 4
# bugs per test cell, tests.submissions.PER_CELL) keeps the cost from growing with the
# catalogue, and each chapter is a test of its own, so the xdist workers share them.
@pytest.mark.parametrize("assignment", course.assignments())
def test_catalogue_verdicts(released_course, grader, assignment, tmp_path):
    bugs = getattr(catalogue(assignment), "BUGS", {})
    wrong = []
    for student, (result, expected) in graded_catalogue(released_course, grader, assignment,
                                                        tmp_path).items():
        assert result.status == "graded", f"{student}: {result.error}"
        flags = [p for p in result.problems if p["kind"] == "suspicious"]
        assert not flags, f"{student}: an honest submission flagged: {flags}"
        by_id = {t.grade_id: t for t in result.tests}
        assert set(by_id) == set(expected)
        for test, should_pass in expected.items():
            outcome = by_id[test]
            if outcome.passed != should_pass:
                wrong.append(f"{student}: {test} {outcome.status}, expected "
                             f"{'pass' if should_pass else 'fail'}: {outcome.message[:300]}")
            elif should_pass and "\u2714" not in outcome.output:
                wrong.append(f"{student}: {test} passed without printing its check marks")
        name = student.removeprefix("bug_")
        if student.startswith("bug_") and bugs[name].diagnosis:
            first = next(t for t in result.tests if not t.passed)
            if not re.search(bugs[name].diagnosis, first.message, re.S):
                wrong.append(f"{student}: diagnosis {bugs[name].diagnosis!r} not in "
                             f"{first.message[:300]!r}")
    assert not wrong, "\n".join(wrong)


def _steps(*sources, solution=True):
    return [(f"cell x, line {i + 1}", source, solution) for i, source in enumerate(sources)]


def test_suspicious_flags_tampering_not_honest_code():
    honest = _steps("import math\nimport torch.nn.functional as F",
                    "def f(x):\n    return torch.softmax(x, dim=-1)",
                    "class M(nn.Module):\n    def forward(self, x):\n        return x",
                    "import sys\nprint(sys.version)")
    assert suspicious(honest) == []
    given = _steps("from checks import attention as check", solution=False)
    assert suspicious(given) == []  # the released notebook's own import
    tampering = _steps("import checks.attention",
                       "from autograde import wire",
                       "f.__code__ = g.__code__",
                       "import sys\nsys.modules['torch'].allclose = None",
                       "torch._C._DisableTorchFunction()",
                       "class Mode(torch.overrides.TorchFunctionMode):\n    pass")
    flagged = suspicious(tampering)
    assert [p["cell"] for p in flagged] == [f"cell x, line {i}" for i in range(1, 7)]
    assert all(p["kind"] == "suspicious" for p in flagged)
    assert re.match(r"imports checks\.attention \(the checks run in the grader",
                    flagged[0]["message"])
    # outside the solution cells, only the course's own given steps go unflagged
    added = _steps("import checks.attention",
                   "def patch():\n    m.__torch_function__ = None", solution=False)
    assert [p["message"].split(" (")[0] for p in suspicious(added)] == \
        ["imports checks.attention", "uses m.__torch_function__"]
    assert suspicious(added, given=frozenset(source for _, source, _ in added)) == []


def test_a_checks_verdict_is_known_by_identity_not_by_name():
    from autograde.engine import _failure_text
    from autograde.remote import _exception
    from chapters.checks import common
    assert _failure_text(common.CheckFailure("the check's own words")) == "the check's own words"
    # what the student's process raised comes back as a look-alike of the same name and
    # builtin base: it reads as what their code raised, never as the check's verdict
    forged = _exception("CheckFailure", "\u2714 all tests pass", "AssertionError")
    forged.student_traceback = '  File "<cell>", line 2, in attention_scores\n'
    assert isinstance(forged, AssertionError) and not isinstance(forged, common.CheckFailure)
    assert _failure_text(forged) == ("CheckFailure: \u2714 all tests pass\nIn your code:\n"
                                     '  File "<cell>", line 2, in attention_scores\n')
    own = type("CheckFailure", (AssertionError,), {})  # a class of the student's, here
    assert _failure_text(own("forged")) == "CheckFailure: forged"


def test_the_fingerprint_covers_every_checks_module_a_chapter_reaches(tmp_path):
    """_judged_by: the checks modules a notebook imports and, transitively, the sibling
    modules they import (common.py, then nested.py), and the release's modules."""
    import types

    from autograde.engine import _judged_by
    package = tmp_path / "checks"
    package.mkdir()
    (package / "attention.py").write_text("from .common import fail\n")
    (package / "common.py").write_text("from . import nested\n")
    (package / "nested.py").write_text("MAX_DEPTH = 200\n")
    (package / "masks.py").write_text("")  # not imported: not part of the verdict
    checks = {"check": types.SimpleNamespace(__file__=str(package / "attention.py"))}
    notebook = tmp_path / "source" / "01_attention" / "01_attention.ipynb"
    released = tmp_path / "release" / "01_attention" / "solutions"
    released.mkdir(parents=True)
    (released / "attention.py").write_text("")
    before = _judged_by(b"{}", notebook, checks)
    assert _judged_by(b"{}", notebook, checks) == before
    (package / "masks.py").write_text("# changed\n")
    assert _judged_by(b"{}", notebook, checks) == before
    for changed in (package / "nested.py", released / "attention.py"):
        changed.write_text("# changed\n")
        assert _judged_by(b"{}", notebook, checks) != before
        before = _judged_by(b"{}", notebook, checks)
