"""Grade a class: every submitted/<student>/<assignment>/ folder, in parallel, resumably.

Workers are trusted processes, each holding the checks and one sandbox zygote (torch
imported once); the main process records each result in the gradebook as it arrives and
keeps it as JSON in <course>/.autograde/results/, so an interrupted batch resumes where it
stopped: a submission whose file and chapter are unchanged is not graded again.
"""
import json
import multiprocessing
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from autograde import course
from autograde.engine import Assignment, NotebookResult, TestResult

RESULTS_DIR = ".autograde/results"


@dataclass
class Job:
    student: str
    assignment: str
    folder: Path    # submitted/<student>/<assignment>
    notebook: Path  # the file graded (may not exist: then the result says so)
    problem: str = ""


def find_jobs(course_dir, assignments, students=None):
    """A Job for each student folder of each assignment, in a stable order."""
    submitted = Path(course_dir) / "submitted"
    jobs = []
    if not submitted.is_dir():
        return jobs
    for student_dir in sorted(p for p in submitted.iterdir() if p.is_dir()):
        if students and student_dir.name not in students:
            continue
        for assignment in assignments:
            folder = student_dir / assignment
            if not folder.is_dir():
                continue
            notebook = folder / f"{assignment}.ipynb"
            problem = ""
            if not notebook.exists():
                others = sorted(p.name for p in folder.glob("*.ipynb"))
                problem = (f"no notebook named {notebook.name}"
                           + (f"; found {', '.join(others)} (rename it to {notebook.name})"
                              if others else ""))
            jobs.append(Job(student_dir.name, assignment, folder, notebook, problem))
    return jobs


# -- worker processes ------------------------------------------------------------------
_WORKER = {}


def _start_worker(release_dir, limits, sandbox):
    import torch
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from autograde.engine import Grader, trusted_namespace
    from autograde.remote import Zygote
    slot = os.getpid() % 1000
    zygote = Zygote(release_dir, slot=slot, sandbox=sandbox)
    _WORKER.update(grader=Grader(zygote, trusted_namespace(), limits), assignments={},
                   release_dir=release_dir, slot=slot, sandbox=sandbox, limits=limits)


def _grade_in_worker(source_path, notebook, student, problem):
    assignments = _WORKER["assignments"]
    if source_path not in assignments:
        assignments[source_path] = Assignment.from_source(source_path)
    assignment = assignments[source_path]
    grader = _WORKER["grader"]
    if problem:
        return _error_result(assignment, student, problem).to_json()
    for attempt in range(2):
        try:
            return grader.grade(assignment, notebook, student).to_json()
        except (RuntimeError, OSError, EOFError) as error:
            # the zygote itself died (its sandbox was killed): start a new one, once
            from autograde.remote import Zygote
            try:
                grader.zygote.close()
            except Exception:
                pass
            grader.zygote = Zygote(_WORKER["release_dir"], slot=_WORKER["slot"],
                                   sandbox=_WORKER["sandbox"])
            last = error
    return _error_result(assignment, student, f"the grader failed on this notebook: {last}",
                         status="crash").to_json()


def _error_result(assignment, student, message, status="error"):
    result = NotebookResult(student, assignment.name, assignment.notebook, "error", message)
    result.tests = [TestResult(t.grade_id, 0.0, t.points, status, message)
                    for t in assignment.tests]
    return result


# -- the batch -------------------------------------------------------------------------
def result_path(course_dir, student, assignment):
    return Path(course_dir) / RESULTS_DIR / assignment / f"{student}.json"


def _fingerprint(job, assignment):
    import hashlib
    data = job.notebook.read_bytes() if job.notebook.is_file() else job.problem.encode()
    return hashlib.sha256(data + assignment.fingerprint.encode()).hexdigest()


def _save(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data, indent=1))
    os.replace(partial, path)  # atomic: an interrupted batch never leaves half a result


def grade(course_dir=".", assignments=None, students=None, jobs=None, resume=True,
          limits=None, db_url=None, sandbox=True, progress=True, log=print):
    """Grade every submission; returns {(student, assignment): NotebookResult}."""
    from tqdm import tqdm

    from autograde.record import Recorder
    warnings.simplefilter("ignore")
    course_dir = Path(course_dir).resolve()
    assignments = assignments or course.assignments()
    release_dir = course_dir / "release"
    missing = [a for a in assignments if not (release_dir / a / f"{a}.ipynb").is_file()
               or not (course_dir / "source" / a / f"{a}.ipynb").is_file()]
    if missing:
        log(f"releasing {', '.join(missing)} first (nbgrader generate_assignment)")
        course.release(course_dir, missing, db_url)
    specs = {a: Assignment.from_source(course_dir / "source" / a / f"{a}.ipynb")
             for a in assignments}
    released = {a: json.loads((release_dir / a / f"{a}.ipynb").read_text())
                for a in assignments}
    todo, results = [], {}
    for job in find_jobs(course_dir, assignments, students):
        path = result_path(course_dir, job.student, job.assignment)
        fingerprint = _fingerprint(job, specs[job.assignment])
        if resume and path.is_file():
            try:
                saved = json.loads(path.read_text())
            except ValueError:
                saved = {}
            if saved.get("fingerprint") == fingerprint and saved.get("recorded"):
                results[(job.student, job.assignment)] = NotebookResult.from_json(
                    {k: v for k, v in saved.items() if k != "recorded"})
                continue
        todo.append((job, fingerprint))
    from autograde.remote import bwrap_path
    if sandbox and not bwrap_path():
        log("WARNING: bwrap (Debian package bubblewrap) is not installed: students' code "
            "runs WITHOUT a sandbox, with only process limits; it can read and write "
            "whatever this user can. Install bubblewrap to isolate it.")
    if not todo:
        log(f"nothing to grade: {len(results)} results are up to date")
        return results
    recorder = Recorder(course_dir, db_url)
    jobs = jobs or max(1, min(os.cpu_count() or 1, len(todo)))
    context = multiprocessing.get_context("spawn")
    started = time.monotonic()
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_start_worker,
                             initargs=(str(release_dir), limits, sandbox)) as pool:
        futures = {pool.submit(_grade_in_worker,
                               str(course_dir / "source" / job.assignment
                                   / f"{job.assignment}.ipynb"),
                               str(job.notebook), job.student, job.problem): (job, fp)
                   for job, fp in todo}
        bar = tqdm(total=len(futures), unit="notebook", disable=not progress,
                   desc="grading", file=sys.stderr)
        for future in as_completed(futures):
            job, fingerprint = futures[future]
            data = future.result()
            data["fingerprint"] = fingerprint
            result = NotebookResult.from_json(data)
            path = result_path(course_dir, job.student, job.assignment)
            _save(path, dict(data, recorded=False))
            failure = recorder.record(result, released[job.assignment], job.folder)
            if failure:
                result.status = "error"
                result.error = (result.error + "\n" if result.error else "") + \
                    "nbgrader could not record this result: " + failure[-1000:]
            _save(path, dict(result.to_json(), recorded=not failure))
            results[(job.student, job.assignment)] = result
            bar.update()
        bar.close()
    log(f"graded {len(todo)} notebooks in {time.monotonic() - started:.1f} s "
        f"with {jobs} workers ({len(results) - len(todo)} up to date)")
    return results


def save_results(course_dir, results):
    """Keep results graded elsewhere (plain nbgrader) where `feedback` and `report` look.

    They carry no fingerprint, so the default engine grades those notebooks again."""
    for (student, assignment), result in results.items():
        _save(result_path(course_dir, student, assignment),
              dict(result.to_json(), fingerprint="", recorded=True))


def load_results(course_dir, assignments=None):
    """Every saved result: {(student, assignment): NotebookResult}."""
    root = Path(course_dir) / RESULTS_DIR
    results = {}
    for path in sorted(root.glob("*/*.json")):
        if assignments and path.parent.name not in assignments:
            continue
        data = json.loads(path.read_text())
        data.pop("recorded", None)
        results[(data["student"], data["assignment"])] = NotebookResult.from_json(data)
    return results


def grade_with_nbgrader(course_dir=".", assignments=None, students=None, db_url=None,
                        log=print):
    """The same job by plain `nbgrader autograde` (one notebook at a time, as it does)."""
    import subprocess

    from autograde.exports import results_from_gradebook
    course_dir = Path(course_dir).resolve()
    assignments = assignments or course.assignments()
    missing = [a for a in assignments if not (course_dir / "release" / a).is_dir()]
    if missing:
        course.release(course_dir, missing, db_url)
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep
               + os.environ.get("PATH", ""))
    started = time.monotonic()
    for assignment in assignments:
        for student in students or [None]:
            command = [sys.executable, "-m", "nbgrader", "autograde", assignment, "--force",
                       f"--CourseDirectory.root={course_dir}"]
            command += [f"--CourseDirectory.{name}={value}"
                        for name, value in course.db_settings(db_url).items()]
            if student:
                command.append(f"--student={student}")
            done = subprocess.run(command, capture_output=True, text=True, env=env,
                                  cwd=course_dir)
            if done.returncode != 0:
                log(f"nbgrader autograde {assignment} reported errors:\n{done.stderr[-3000:]}")
    log(f"nbgrader graded in {time.monotonic() - started:.1f} s")
    return results_from_gradebook(course_dir, assignments, db_url)
