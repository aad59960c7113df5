"""`python -m autograde gradescope`: the autograder.zip, unpacked into a folder laid out as
Gradescope's /autograder and bound there with bubblewrap, grades catalogue submissions
into results.json with the scores `python -m autograde grade` gives; a broken, empty or
hostile submission gets a results.json that says so."""
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograde.__main__ import main
from autograde.gradescope import graded_cells
from tests.submissions import catalogue, fill_submission, names, reference_cells

CHAPTER = "01_attention"
pytestmark = pytest.mark.skipif(not shutil.which("bwrap"),
                                reason="needs Debian's bubblewrap (bwrap) to lay out /autograder")


@pytest.fixture(scope="module")
def autograder(tmp_path_factory):
    """<tmp>/autograder as setup.sh leaves it: source/ unpacked from the zip, venv/ (this
    environment, standing in for the one setup.sh installs from the same pins)."""
    made = tmp_path_factory.mktemp("gradescope")
    zip_path = made / "autograder.zip"
    assert main(["gradescope", CHAPTER, "--output", str(zip_path)]) == 0
    root = made / "autograder"
    with zipfile.ZipFile(zip_path) as archive:
        names = set(archive.namelist())
        archive.extractall(root / "source")
        modes = {i.filename: i.external_attr >> 16 for i in archive.infolist()}
    for script in ("setup.sh", "run_autograder"):
        assert script in names and modes[script] & 0o111, script
        (root / "source" / script).chmod(0o755)
    assert "course/release/01_attention/01_attention.ipynb" in names
    # Gradescope copies run_autograder to /autograder/ before each run
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    (root / "venv").symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
    return root


def released(autograder):
    course = autograder / "source" / "course"
    source = json.loads((course / "source" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    blank = json.loads((course / "release" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    return source, blank


def run_autograder(root, files):
    """Run /autograder/run_autograder with `files` ({name: bytes}) as the submission, in a
    mount namespace whose /autograder is `root`; returns results.json, parsed."""
    submission = root / "submission"
    shutil.rmtree(submission, ignore_errors=True)
    shutil.rmtree(root / "results", ignore_errors=True)
    submission.mkdir()
    for name, data in files.items():
        (submission / name).write_bytes(data)
    binds = []
    for entry in sorted(Path("/").iterdir()):
        if entry.name in {"proc", "dev", "autograder"}:
            continue
        if entry.is_symlink():
            binds += ["--symlink", os.readlink(entry), str(entry)]
        elif entry.is_dir():
            binds += ["--bind", str(entry), str(entry)]
    command = ["bwrap", *binds, "--dev-bind", "/dev", "/dev", "--bind", "/proc", "/proc",
               "--bind", str(root), "/autograder", "--die-with-parent"]
    # the grader's own sandbox is a bwrap inside this one: it needs the capabilities
    command += ["--cap-add", "ALL"] if os.getuid() == 0 else ["--unshare-user", "--cap-add",
                                                              "ALL"]
    env = {key: value for key, value in os.environ.items()
           if key not in {"PYTHONPATH", "VIRTUAL_ENV"}}  # Gradescope's environment is bare
    done = subprocess.run(command + ["--", "/autograder/run_autograder"], env=env,
                          capture_output=True, text=True, timeout=600)
    results = root / "results" / "results.json"
    assert results.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(results.read_text()), done


def graded_by_grade(autograder, tmp_path, notebooks):
    """{student: score} from `python -m autograde grade` on the same notebooks."""
    course = tmp_path / "course"
    shutil.copytree(autograder / "source" / "course", course)
    for student, nb in notebooks.items():
        folder = course / "submitted" / student / CHAPTER
        folder.mkdir(parents=True)
        (folder / f"{CHAPTER}.ipynb").write_text(json.dumps(nb))
    assert main(["grade", CHAPTER, "--course-dir", str(course), "--no-progress"]) == 0
    from autograde.batch import load_results
    return {student: result for (student, _), result in load_results(course).items()}


# Slow (about 45 s and 30 s on an idle 2-core machine): each run_autograder is a fresh
# /autograder/run_autograder inside bwrap, as Gradescope runs one per submission (python,
# torch and the grader's zygote started each time); its start-up from a bare environment is
# what is tested. The zip and its unpacked /autograder are made once (the module fixture).
def test_scores_equal_grade_and_hidden_tests_wait_for_publication(autograder, tmp_path):
    source, blank = released(autograder)
    bug_name, bug = next(iter(catalogue(CHAPTER).BUGS.items()))
    notebooks = {"reference": fill_submission(source, blank, {}),
                 "bug": fill_submission(source, blank, bug.cells), "blank": blank}
    expected = graded_by_grade(autograder, tmp_path, notebooks)
    cells = graded_cells(autograder / "source" / "course" / "source" / CHAPTER
                         / f"{CHAPTER}.ipynb")
    hidden = {grade_id for grade_id, _, has_hidden in cells if has_hidden}
    assert hidden  # chapter 1: every test cell holds hidden tests
    for student, nb in notebooks.items():
        # Gradescope keeps the name the student's browser gave: one notebook is graded
        name = f"{CHAPTER}.ipynb" if student != "bug" else f"{CHAPTER} (1).ipynb"
        results, done = run_autograder(autograder, {name: json.dumps(nb).encode()})
        want = expected[student]
        assert results["score"] == pytest.approx(want.score), (student, done.stdout[-2000:])
        by_name = {t["name"]: t for t in results["tests"]}
        assert [t["name"] for t in results["tests"]] == [t.grade_id for t in want.tests]
        for test in want.tests:
            entry = by_name[test.grade_id]
            assert entry["score"] == pytest.approx(test.points)
            assert entry["max_score"] == pytest.approx(test.max_points)
            assert entry["visibility"] == ("after_published" if test.grade_id in hidden
                                           else "visible")
            if not test.passed:
                assert entry["output"] == test.message and entry["status"] == "failed"
        assert "show once your instructor publishes" in results["output"]
        if student == "reference":
            assert results["score"] == sum(points for _, points, _ in cells)
        if student == "bug":
            assert "Graded 01_attention (1).ipynb" in results["output"]
            first_failed = next(t for t in results["tests"] if t["status"] == "failed")
            assert names(bug, first_failed["output"]), (bug_name, first_failed["output"])


# (slow for the same reason: four runs of run_autograder, one per kind of submission)
def test_broken_empty_and_hostile_submissions_get_a_results_json(autograder):
    source, blank = released(autograder)
    results, _ = run_autograder(autograder, {})
    assert results["score"] == 0 and "holds no notebook" in results["output"]
    assert all(t["score"] == 0 for t in results["tests"]) and results["tests"]

    results, _ = run_autograder(autograder, {f"{CHAPTER}.ipynb": b'{"cells": ['})
    assert results["score"] == 0
    assert "could not be graded" in results["output"]

    two = {"a.ipynb": json.dumps(blank).encode(), "b.ipynb": json.dumps(blank).encode()}
    results, _ = run_autograder(autograder, two)
    assert results["score"] == 0 and "2 notebooks" in results["output"]

    # hostile: the exercise's function tries to write the results itself, then kills
    # its process; the sandbox shows it no /autograder, and the grader survives it
    first = next(iter(reference_cells(source)))
    reference = reference_cells(source)[first]
    name_line = next(line for line in reference.splitlines() if line.startswith("def "))
    hostile_code = f"""{name_line}
    import os
    for path in ("/autograder/results/results.json", "/autograder/source/run_autograder"):
        try:
            open(path, "w").write('{{"score": 1000, "tests": []}}')
        except OSError:
            pass
    os._exit(0)
"""
    hostile = fill_submission(source, blank, {first: hostile_code})
    results, done = run_autograder(autograder, {f"{CHAPTER}.ipynb": json.dumps(hostile).encode()})
    full = sum(points for _, points, _ in graded_cells(
        autograder / "source" / "course" / "source" / CHAPTER / f"{CHAPTER}.ipynb"))
    assert "bubblewrap cannot run" not in done.stdout  # it was graded in the sandbox
    assert results["score"] < full and results["tests"]
    assert "1000" not in json.dumps(results["score"])
    assert (autograder / "source" / "run_autograder").read_text().startswith("#!/usr/bin/env bash")


def test_a_grader_that_cannot_start_still_writes_results(autograder, tmp_path):
    """run_autograder's own fallback: even a Python that fails at once leaves a results.json."""
    broken = tmp_path / "autograder"
    shutil.copytree(autograder / "source", broken / "source", symlinks=True)
    shutil.copy2(autograder / "run_autograder", broken / "run_autograder")
    (broken / "venv" / "bin").mkdir(parents=True)
    (broken / "venv" / "bin" / "python").write_text("#!/bin/sh\nexit 3\n")
    (broken / "venv" / "bin" / "python").chmod(0o755)
    results, _ = run_autograder(broken, {f"{CHAPTER}.ipynb": b"{}"})
    assert results["score"] == 0 and "failed before it could grade" in results["output"]
