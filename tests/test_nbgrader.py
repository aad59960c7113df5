"""The chapter notebooks through real nbgrader: generate_assignment, then autograde of
the reference, the untouched student version and part of the catalogue of submissions.

nbgrader executes whole notebooks, one at a time (5-30 s each here, each in a kernel of its
own that imports torch), so by default this grades, besides the reference and the untouched
student version, NBGRADER_CORRECT of each chapter's CORRECT submissions (the last in
catalogue order) and its first NBGRADER_BUGS bug: 32 notebooks for the eight chapters
instead of the 48 that two of each made (about 9 s each on a 2-core CI machine: nbgrader's
runs were a third of the suite's wall time, on the 15-minute budget of issue 19). What this
compares is the points nbgrader records against those our engine records for the same
notebooks, and one honest failing submission per chapter shows them; tests/test_catalogue.py
grades every CORRECT submission and every bug through the same test cells with our engine,
in seconds. Set COURSE_NBGRADER_ALL=1 to autograde the whole catalogue.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograde import batch, course
from tests.submissions import catalogue, catalogue_submissions, grade_id

NBGRADER_ALL = os.environ.get("COURSE_NBGRADER_ALL") == "1"
NBGRADER_BUGS = None if NBGRADER_ALL else 1
NBGRADER_CORRECT = None if NBGRADER_ALL else 1


def submissions(assignment, source_nb, student_nb):
    """catalogue_submissions' {student: (notebook, expected)}, its CORRECT ones cut down to
    the last NBGRADER_CORRECT (1; None: all)."""
    subs = catalogue_submissions(assignment, source_nb, student_nb, NBGRADER_BUGS)
    correct = [student for student in subs if student.startswith("correct_")]
    if NBGRADER_CORRECT is None or len(correct) <= NBGRADER_CORRECT:
        return subs
    kept = set(correct[-NBGRADER_CORRECT:])
    return {student: sub for student, sub in subs.items()
            if not student.startswith("correct_") or student in kept}


def autograde(course_dir, assignment):
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", "autograde", assignment, "--force",
         f"--CourseDirectory.root={course_dir}"],
        capture_output=True, text=True, env=env, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]


def gradebook_scores(course_dir, assignment, students):
    """{student: {test grade_id: (score, max_score)}} as recorded in the gradebook."""
    from nbgrader.api import Gradebook
    scores = {}
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gb:
        for student in students:
            nb = gb.find_submission_notebook(assignment, assignment, student)
            scores[student] = {g.name: (g.score, g.max_score) for g in nb.grades
                               if g.cell.cell_type == "code"}
    return scores


def grade_chapter(course_release, assignment):
    """Release `assignment` and autograde its submissions with nbgrader, then the same
    submissions with our engine into a gradebook of its own."""
    course_dir = course_release(assignment)
    ours_dir = course_release(assignment)  # the same release, before nbgrader's grading
    notebook = f"{assignment}.ipynb"
    source_nb = json.loads((course_dir / "source" / assignment / notebook).read_text())
    student_nb = json.loads((course_dir / "release" / assignment / notebook).read_text())
    subs = submissions(assignment, source_nb, student_nb)
    for student, (nb, _) in subs.items():
        target = course_dir / "submitted" / student / assignment
        target.mkdir(parents=True)
        (target / notebook).write_text(json.dumps(nb))
    autograde(course_dir, assignment)
    shutil.copytree(course_dir / "submitted", ours_dir / "submitted")
    batch.grade(ours_dir, [assignment], jobs=1, progress=False, log=lambda *a: None)
    return dict(source=source_nb, student=student_nb, subs=subs,
                scores=gradebook_scores(course_dir, assignment, subs),
                engine_scores=gradebook_scores(ours_dir, assignment, subs))


class GradedChapters(dict):
    """{assignment: grade_chapter's result}, each chapter graded when a test first asks (a
    grading that raised raises again for the chapter's other tests, without a second try)."""

    def __init__(self, course_release):
        super().__init__()
        self.course_release = course_release
        self.failed = {}

    def __missing__(self, assignment):
        if assignment in self.failed:
            raise self.failed[assignment]
        try:
            self[assignment] = grade_chapter(self.course_release, assignment)
        except Exception as error:
            self.failed[assignment] = error
            raise
        return self[assignment]


@pytest.fixture(scope="session")
def graded(course_release):
    return GradedChapters(course_release)


# Each chapter's tests run on one xdist worker (tests/conftest.py, work_unit), which grades
# that chapter once, in the first of them: among the suite's slowest tests, as nbgrader
# executes each of the 8 notebooks whole, in a kernel of its own that imports torch (65-85 s
# of CPU for each of chapters 5-8 here, with chapters 5-8's long runs shortened by
# tests/conftest.py's switches; 120-145 s with every CORRECT submission and the full runs);
# the chapters are spread over the workers.
# Real nbgrader's runs cost about 45 s of CPU per chapter, most of it fixed (its start, the
# release, kernels that import torch), on the 15-minute budget: by default the two chapters
# whose notebooks differ most (plain functions; the capstone, with the reference modules, its
# lab, corpus and training), all eight with COURSE_NBGRADER_ALL=1. Our engine grades every chapter's catalogue in tests/test_engine.py.
CHAPTERS = course.assignments() if NBGRADER_ALL else ["01_attention", "08_capstone"]


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_student_version_has_no_solutions_or_hidden_tests(graded, assignment):
    student = graded[assignment]["student"]
    text = json.dumps(student)
    assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text
    source = {grade_id(c): "".join(c["source"]) for c in graded[assignment]["source"]["cells"]
              if grade_id(c)}
    for cell in student["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and cell["cell_type"] == "code":
            src = "".join(cell["source"])
            assert "raise NotImplementedError" in src, f"{meta['grade_id']} still has code"
            solution = source[meta["grade_id"]].split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
            body = [line.strip() for line in solution.splitlines() if line.strip()]
            assert not any(line in src.splitlines() for line in body if len(line) > 12), \
                f"solution code of {meta['grade_id']} leaked into the student version"


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_grades_match_expectations(graded, assignment):
    info = graded[assignment]
    assert info["scores"]["reference"], f"{assignment} has no graded test cells"
    wrong = []
    for student, (_, expected) in info["subs"].items():
        for test, should_pass in expected.items():
            score, max_score = info["scores"][student][test]
            if (score == max_score) != should_pass:
                wrong.append(f"{student}: {test} scored {score}/{max_score}, "
                             f"expected {'full' if should_pass else 'zero'}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_engine_records_the_same_scores_as_nbgrader(graded, assignment):
    """Our engine, recording through nbgrader's Autograde, gives every test cell of every
    honest submission the score that `nbgrader autograde` gives it."""
    info = graded[assignment]
    assert info["engine_scores"] == info["scores"]


def test_catalogue_size():
    """At least 5 alternative correct solutions and 8 classic bugs across the chapters."""
    cats = [catalogue(a) for a in course.assignments()]
    assert sum(len(getattr(c, "CORRECT", {})) for c in cats) >= 5
    assert sum(len(getattr(c, "BUGS", {})) for c in cats) >= 8
