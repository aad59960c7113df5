"""The grader draws fresh inputs for every grading run (checks.common.salted(), a number the
student never sees, mixed into every seed of the checks): the verdicts must not depend on
it. Every submission of the catalogue, the reference, every correct variant and the bugs of
tests.submissions.sample_bugs (COURSE_ALL_SUBMISSIONS=1: every bug), gets the same pass/fail
on every test cell, hidden tests included, with the seeds as written and with two other
salts."""
import pytest

from autograde import course
from tests.chapter import Chapter, checks_module
from tests.submissions import PER_CELL, every_submission

common = checks_module("common")

SALTS = [None, 20261123, 7]


def _submissions():
    for assignment, label, cells in every_submission(course.assignments(), PER_CELL):
        yield pytest.param(assignment, cells, id=f"{assignment}-{label}")


@pytest.mark.parametrize("assignment, cells", list(_submissions()))
def test_verdicts_do_not_depend_on_the_salt(chapter_results, assignment, cells, capsys):
    chapter = Chapter(assignment)
    verdicts = []
    for salt in SALTS:
        with common.salted(salt):
            # the seeds as written: the verdicts test_catalogue.py reads, computed once
            results = chapter_results(assignment, cells) if salt is None else \
                chapter.run_tests(chapter.namespace(cells))
        verdicts.append({test: message is None for test, message in results.items()})
    assert verdicts[1] == verdicts[0] and verdicts[2] == verdicts[0]


def test_the_salt_changes_the_inputs():
    (plain,) = common.random_inputs((3,), seed=1)
    with common.salted(99):
        (salted,) = common.random_inputs((3,), seed=1)
        (again,) = common.random_inputs((3,), seed=1)
    assert not bool((plain == salted).all()) and bool((salted == again).all())
