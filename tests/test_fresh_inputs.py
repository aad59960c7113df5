"""The grader draws fresh inputs for every grading run (checks.common.salted(), a number the
student never sees, mixed into every seed of the checks): the verdicts must not depend on
it. Every submission of the catalogue, the reference, every correct variant and the bugs of
tests.submissions.sample_bugs (COURSE_ALL_SUBMISSIONS=1: every bug), gets the same pass/fail
on every test cell, hidden tests included, with the seeds as written and with two other
salts."""
import sys

import pytest

from autograde import course, kit
from tests.submissions import PER_CELL, every_submission

if str(course.CHAPTERS) not in sys.path:  # the grader's checks, as the notebooks import them
    sys.path.insert(0, str(course.CHAPTERS))
from checks import common  # noqa: E402

SALTS = [None, 20261123, 7]


def _submissions():
    for assignment, label, cells in every_submission(course.assignments(), PER_CELL):
        yield pytest.param(assignment, cells, id=f"{assignment}-{label}")


@pytest.mark.parametrize("assignment, cells", list(_submissions()))
def test_verdicts_do_not_depend_on_the_salt(assignment, cells, capsys):
    notebook = course.CHAPTERS / f"{assignment}.ipynb"
    verdicts = []
    for salt in SALTS:
        with common.salted(salt):
            results = kit.run_visible_tests(notebook, kit.chapter_namespace(notebook, cells),
                                            hidden=True)
        verdicts.append({test: message is None for test, message in results.items()})
    assert verdicts[1] == verdicts[0] and verdicts[2] == verdicts[0]


def test_the_salt_changes_the_inputs():
    (plain,) = common.random_inputs((3,), seed=1)
    with common.salted(99):
        (salted,) = common.random_inputs((3,), seed=1)
        (again,) = common.random_inputs((3,), seed=1)
    assert not bool((plain == salted).all()) and bool((salted == again).all())
