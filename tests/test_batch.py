"""`python -m autograde grade` on a small class: the gradebook, the CSVs, resuming after an
interruption, broken submissions named per student, and the plain-nbgrader engine."""
import csv
import json
import shutil

import pytest

from autograde import batch, course
from autograde.__main__ import main
from tests.submissions import catalogue, fill_submission

CHAPTER = "01_attention"


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    course_dir = tmp_path_factory.mktemp("released")
    course.release(course_dir, [CHAPTER])
    return course_dir


def make_class(released, target):
    """alice: the reference; bob: the blank notebook; carol: a bug; dave: a misnamed file;
    erin: not JSON. Returns the course directory."""
    shutil.copytree(released, target)
    source = json.loads((target / "source" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    blank = json.loads((target / "release" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    bug = next(iter(catalogue(CHAPTER).BUGS.values()))
    notebooks = {"alice": fill_submission(source, blank, {}), "bob": blank,
                 "carol": fill_submission(source, blank, bug.cells)}
    for student, nb in notebooks.items():
        folder = target / "submitted" / student / CHAPTER
        folder.mkdir(parents=True)
        (folder / f"{CHAPTER}.ipynb").write_text(json.dumps(nb))
    (target / "submitted" / "carol" / CHAPTER / "timestamp.txt").write_text(
        "2026-11-20 10:00:00.000000 UTC")
    misnamed = target / "submitted" / "dave" / CHAPTER
    misnamed.mkdir(parents=True)
    (misnamed / "Untitled.ipynb").write_text(json.dumps(notebooks["alice"]))
    broken = target / "submitted" / "erin" / CHAPTER
    broken.mkdir(parents=True)
    (broken / f"{CHAPTER}.ipynb").write_text('{"cells": [')
    return target, bug


def rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_grade_writes_gradebook_csvs_and_resumes(released, tmp_path, capsys):
    course_dir, bug = make_class(released, tmp_path / "course")
    assert main(["grade", CHAPTER, "--course-dir", str(course_dir), "--no-progress"]) == 0
    out = capsys.readouterr()
    assert "5 notebooks; 2 could not be graded" in out.out
    assert "dave/01_attention: no notebook named 01_attention.ipynb; found Untitled.ipynb" in out.err
    assert "erin/01_attention: 01_attention.ipynb is not a notebook" in out.err

    grades = {r["student_id"]: r for r in rows(course_dir / "grades.csv")}
    assert list(rows(course_dir / "grades.csv")[0]) == [
        "assignment", "duedate", "timestamp", "student_id", "last_name", "first_name",
        "email", "raw_score", "late_submission_penalty", "score", "max_score"]
    assert grades["alice"]["score"] == "14.0" and grades["alice"]["max_score"] == "14.0"
    assert grades["bob"]["score"] == "0.0"
    lost = sum(float(r["max_points"]) for r in rows(course_dir / "tests.csv")
               if r["student_id"] == "carol" and r["test"] in bug.fails)
    assert float(grades["carol"]["score"]) == 14.0 - lost
    assert grades["carol"]["timestamp"].startswith("2026-11-20 10:00:00")
    assert grades["dave"]["score"] == grades["erin"]["score"] == "0.0"
    tests = rows(course_dir / "tests.csv")
    assert {r["status"] for r in tests if r["student_id"] == "alice"} == {"passed"}
    failed = [r for r in tests if r["student_id"] == "carol" and r["status"] == "failed"]
    assert {r["test"] for r in failed} == set(bug.fails) and all(r["diagnosis"] for r in failed)
    # the notebooks nbgrader's formgrader and generate_feedback read
    graded_nb = json.loads((course_dir / "autograded" / "carol" / CHAPTER
                            / f"{CHAPTER}.ipynb").read_text())
    errors = [o for c in graded_nb["cells"] for o in c.get("outputs", [])
              if o["output_type"] == "error"]
    assert len(errors) == len(bug.fails)

    # nothing changed: nothing is graded again
    assert batch.grade(course_dir, [CHAPTER], progress=False, log=print) is not None
    assert "nothing to grade: 5 results are up to date" in capsys.readouterr().out

    # an interrupted batch (a result saved but not recorded) and a resubmission: only
    # those two are graded again
    saved = batch.result_path(course_dir, "bob", CHAPTER)
    data = json.loads(saved.read_text())
    saved.write_text(json.dumps(dict(data, recorded=False)))
    shutil.copy(course_dir / "submitted" / "alice" / CHAPTER / f"{CHAPTER}.ipynb",
                course_dir / "submitted" / "carol" / CHAPTER / f"{CHAPTER}.ipynb")
    results = batch.grade(course_dir, [CHAPTER], progress=False, log=print)
    assert "graded 2 notebooks" in capsys.readouterr().out
    assert results[("carol", CHAPTER)].score == 14.0
    assert results[("bob", CHAPTER)].score == 0.0


def test_engine_nbgrader_grades_the_same_job(released, tmp_path, capsys):
    course_dir = tmp_path / "course"
    shutil.copytree(released, course_dir)
    source = json.loads((course_dir / "source" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    blank = json.loads((course_dir / "release" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    folder = course_dir / "submitted" / "alice" / CHAPTER
    folder.mkdir(parents=True)
    (folder / f"{CHAPTER}.ipynb").write_text(json.dumps(fill_submission(source, blank, {})))
    assert main(["grade", CHAPTER, "--course-dir", str(course_dir), "--engine", "nbgrader"]) == 0
    assert "1 notebooks; 0 could not be graded" in capsys.readouterr().out
    (row,) = rows(course_dir / "grades.csv")
    assert row["student_id"] == "alice" and row["score"] == "14.0"
    assert {r["status"] for r in rows(course_dir / "tests.csv")} == {"passed"}
