"""`python -m autograde grade` on a small class: the gradebook, the CSVs, resuming after an
interruption, broken submissions named per student, and the plain-nbgrader engine."""
import csv
import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from autograde import batch, course
from autograde.__main__ import main
from tests.submissions import catalogue, fill_submission

CHAPTER = "01_attention"


@pytest.fixture(scope="module")
def released(course_release):
    return course_release(CHAPTER)


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


# Among the suite's slowest twenty (about 18 s on an idle 2-core machine): three batches,
# each starting the grader's zygote and recording into nbgrader's gradebook, as a resumed
# run does; what is tested is that sequence (grade, nothing to redo, resume).
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

    # an interrupted batch (a result saved but not recorded) and a resubmission: the first
    # is recorded from its saved verdict, only the second is graded again
    saved = batch.result_path(course_dir, "bob", CHAPTER)
    data = json.loads(saved.read_text())
    saved.write_text(json.dumps(dict(data, recorded=False)))
    shutil.copy(course_dir / "submitted" / "alice" / CHAPTER / f"{CHAPTER}.ipynb",
                course_dir / "submitted" / "carol" / CHAPTER / f"{CHAPTER}.ipynb")
    results = batch.grade(course_dir, [CHAPTER], progress=False, log=print)
    out = capsys.readouterr().out
    assert "recording 1 results that the gradebook lacks" in out
    assert "graded 1 notebooks" in out
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


def _postgres_bin():
    """The folder of PostgreSQL's initdb/pg_ctl (Debian keeps them off PATH), or None."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    folders = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    return folders[-1] if folders and (folders[-1] / "initdb").is_file() else None


@pytest.fixture
def postgres_url():
    """A throw-away PostgreSQL server on a unix socket (no TCP): its gradebook's URL."""
    pytest.importorskip("psycopg", reason="needs psycopg (requirements.txt)")
    bin_dir = _postgres_bin()
    if bin_dir is None:
        pytest.skip("needs PostgreSQL's server (Debian package postgresql)")
    folder = Path(tempfile.mkdtemp(prefix="autograde-pg-"))
    folder.chmod(0o755)
    # PostgreSQL refuses to run as root: run it as the postgres user then
    prefix = []
    if os.geteuid() == 0:
        account = pwd.getpwnam("postgres")
        os.chown(folder, account.pw_uid, account.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    data, socket_dir = folder / "data", folder
    run = lambda *args: subprocess.run(prefix + [str(a) for a in args], check=True,  # noqa: E731
                                       capture_output=True, text=True, timeout=120)
    run(bin_dir / "initdb", "-D", data, "-U", "postgres", "--auth=trust")
    run(bin_dir / "pg_ctl", "-D", data, "-w", "-l", folder / "log", "start", "-o",
        f"-c listen_addresses='' -c unix_socket_directories='{socket_dir}'")
    try:
        run(bin_dir / "createdb", "-h", socket_dir, "-U", "postgres", "gradebook")
        yield f"postgresql://postgres@/gradebook?host={socket_dir}"
    finally:
        run(bin_dir / "pg_ctl", "-D", data, "-w", "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)


# Among the suite's slowest twenty (about 20 s on an idle 2-core machine): a PostgreSQL
# server made and stopped (initdb, pg_ctl), and this course's release and grading into it,
# the path under test, which the shared SQLite release of the other tests cannot stand in for.
def test_grade_into_a_postgresql_gradebook(released, tmp_path, postgres_url, capsys):
    """--db takes a PostgreSQL URL: release, grade and export all use that gradebook."""
    course_dir, bug = make_class(released, tmp_path / "course")
    (course_dir / "gradebook.db").unlink()
    args = ["--course-dir", str(course_dir), "--db", postgres_url]
    assert main(["release", CHAPTER, *args]) == 0
    assert main(["grade", CHAPTER, "--no-progress", *args]) == 0
    assert "5 notebooks; 2 could not be graded" in capsys.readouterr().out
    assert not (course_dir / "gradebook.db").exists()
    grades = {r["student_id"]: r["score"] for r in rows(course_dir / "grades.csv")}
    from nbgrader.api import Gradebook
    with Gradebook(postgres_url) as gradebook:
        recorded = {s.student_id: s.score for s in gradebook.assignment_submissions(CHAPTER)}
    assert recorded["alice"] == 14.0 and recorded["bob"] == 0.0
    assert recorded["carol"] < 14.0
    assert {k: float(v) for k, v in grades.items()} == recorded


def test_a_failed_zygote_restart_costs_that_submission_only(monkeypatch):
    """A zygote that cannot be restarted (twice, for one submission) gives that submission
    an error; the next one starts a new zygote and is graded: the batch goes on."""
    from autograde import remote
    from autograde.engine import Assignment
    from autograde.results import NotebookResult

    class Grader:
        zygote = None
        limits = {"notebook_file_bytes": 2**20}

        def grade(self, assignment, notebook, student):
            return NotebookResult(student, assignment.name, assignment.notebook, "graded")

    starts = []

    class Zygote:
        def __init__(self, release_dir, slot=0, sandbox=True):
            starts.append(release_dir)
            if len(starts) <= 3:  # the worker's own start, both tries of the first submission
                raise RuntimeError("the sandbox failed to start: no bwrap today")

        def close(self):
            pass

    monkeypatch.setattr(remote, "Zygote", Zygote)
    monkeypatch.setattr(batch, "Grader", lambda *args: Grader())
    spec = Assignment.from_source(course.CHAPTERS / "01_attention.ipynb")
    worker = batch.Worker("release", {}, True, {spec.name: spec})  # (its first start fails)

    def task(student):
        return batch.Task(batch.Job(student, spec.name, Path(student), Path(student) / "x"))
    first, _ = worker.grade(task("alice"))
    second, _ = worker.grade(task("bob"))
    assert first.status == "error" and len(starts) == 4
    assert "the grader failed on this notebook: RuntimeError: the sandbox failed to start" \
        in first.error and {t.status for t in first.tests} == {"crash"}
    assert second.status == "graded" and second.student == "bob"


def test_a_changed_check_regrades_on_resume(released, tmp_path, capsys):
    """The resume fingerprint covers the checks that judge a chapter (and their released
    copy), not only the notebooks: a check changed since a batch regrades its submissions."""
    from autograde.engine import Assignment
    course_dir, _ = make_class(released, tmp_path / "course")
    source = course_dir / "source" / CHAPTER / f"{CHAPTER}.ipynb"
    before = Assignment.from_source(source).fingerprint
    assert main(["grade", CHAPTER, "--course-dir", str(course_dir), "--no-progress",
                 "--student", "alice"]) == 0
    capsys.readouterr()
    assert main(["grade", CHAPTER, "--course-dir", str(course_dir), "--no-progress",
                 "--student", "alice"]) == 0
    assert "nothing to grade: 1 results are up to date" in capsys.readouterr().out
    released_common = course_dir / "release" / CHAPTER / "checks" / "common.py"
    released_common.chmod(0o644)
    released_common.write_text(released_common.read_text() + "\n# changed\n")
    assert Assignment.from_source(source).fingerprint != before
    assert main(["grade", CHAPTER, "--course-dir", str(course_dir), "--no-progress",
                 "--student", "alice"]) == 0
    assert "graded 1 notebooks in" in capsys.readouterr().out


def test_grading_refuses_a_release_older_than_the_checks(released, tmp_path, capsys):
    """The grader judges with the repository's checks and the student's process runs the
    released copy: a check edited without releasing again (here: the release's copy of it
    made different) stops `grade` with what to do, before any verdict."""
    course_dir, _ = make_class(released, tmp_path / "course")
    assert course.stale_files(course_dir, CHAPTER) == []
    copied = course_dir / "source" / CHAPTER / "checks" / "nested.py"
    original = copied.read_bytes()
    copied.chmod(0o644)
    copied.write_bytes(original + b"\n# an older release\n")
    extra = course_dir / "source" / CHAPTER / "checks" / "gone.py"  # no longer shipped
    extra.write_text("")
    assert course.stale_files(course_dir, CHAPTER) == ["checks/gone.py", "checks/nested.py"]
    assert main(["grade", CHAPTER, "--course-dir", str(course_dir), "--no-progress",
                 "--student", "alice"]) == 2
    error = capsys.readouterr().err
    assert f"checks changed since these chapters were released ({CHAPTER}: checks/gone.py, " \
           "checks/nested.py)" in error
    assert f"python -m autograde release {CHAPTER} --course-dir {course_dir}" in error
    assert not batch.result_path(course_dir, "alice", CHAPTER).exists()
    # plain nbgrader would grade with the source folder's old copy: refused the same way
    assert main(["grade", CHAPTER, "--course-dir", str(course_dir), "--no-progress",
                 "--student", "alice", "--engine", "nbgrader"]) == 2
    assert "checks changed since these chapters were released" in capsys.readouterr().err
    assert not batch.result_path(course_dir, "alice", CHAPTER).exists()
    copied.write_bytes(original)
    extra.unlink()
    assert main(["grade", CHAPTER, "--course-dir", str(course_dir), "--no-progress",
                 "--student", "alice"]) == 0


def test_a_dying_worker_costs_only_the_notebook_it_was_grading(released, tmp_path,
                                                                monkeypatch):
    """A worker that dies (issue 21: the grader's memory run out on a notebook) costs only
    the notebook it was grading: each worker is handed one notebook at a time, so the
    notebooks waiting are graded as ever, never marked crash; the one that kills its worker
    is graded once more by a new worker, then is an error ("crash")."""
    from autograde.engine import Assignment
    from autograde.results import NotebookResult, TestResult
    course_dir = tmp_path / "course"
    shutil.copytree(released, course_dir)
    source = json.loads((course_dir / "source" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    blank = json.loads((course_dir / "release" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    students = ["alice", "bob", "carol_kills", "dave", "erin", "frank"]
    for student in students:
        folder = course_dir / "submitted" / student / CHAPTER
        folder.mkdir(parents=True)
        (folder / f"{CHAPTER}.ipynb").write_text(json.dumps(fill_submission(source, blank, {})))
    spec = Assignment.from_source(course_dir / "source" / CHAPTER / f"{CHAPTER}.ipynb")
    runs = []

    def run_workers(settings, jobs, pending):
        """`jobs` workers, each handed one task at a time, in order (as batch._run_workers):
        carol_kills's notebook kills the worker grading it (None for it alone), a new
        worker takes the tasks left, which are graded."""
        runs.append((jobs, [pending[i][0].job.student for i in pending]))
        for index in list(pending):
            job = pending[index][0].job
            if job.student == "carol_kills":
                yield index, None
                continue
            yield index, (NotebookResult(job.student, CHAPTER, CHAPTER, "graded", tests=[
                TestResult(t.grade_id, t.points, t.points, "passed", "", "\u2714")
                for t in spec.tests]), {})

    monkeypatch.setattr(batch, "_run_workers", run_workers)
    results = batch.grade(course_dir, [CHAPTER], jobs=2, progress=False, log=lambda *a: None)
    statuses = {student: result.status for (student, _), result in results.items()}
    assert statuses == {**dict.fromkeys(students, "graded"), "carol_kills": "error"}
    killed = results[("carol_kills", CHAPTER)]
    assert {t.status for t in killed.tests} == {"crash"} and killed.error == (
        "the grader's worker process died twice while this notebook was being graded")
    assert all(t.status == "passed" for (s, _), r in results.items() if s != "carol_kills"
               for t in r.tests)
    # the first run grades every notebook but carol_kills's; the second, hers alone
    assert runs == [(2, students), (2, ["carol_kills"])]
