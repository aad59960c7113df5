"""Grade a class: every submitted/<student>/<assignment>/ folder, in parallel, resumably.

Workers are trusted processes, each holding the checks and one sandbox zygote (torch
imported once); the main process records each result in the gradebook as it arrives and
keeps it as JSON in <course>/.autograde/results/, so an interrupted batch resumes where it
stopped: a submission whose file and chapter are unchanged is not graded again.
"""
import contextlib
import json
import multiprocessing
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
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
                              if others else " was submitted"))
            jobs.append(Job(student_dir.name, assignment, folder, notebook, problem))
    return jobs


# -- worker processes ------------------------------------------------------------------
_WORKER = {}
PR_SET_PDEATHSIG = 1


def die_with_parent(parent):
    """Ask the kernel to SIGKILL this process when its parent dies (however it ends: a
    grader killed with SIGKILL runs no cleanup of its own), or exit now if it already did."""
    import ctypes
    import signal
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def _start_worker(release_dir, limits, sandbox, parent):
    die_with_parent(parent)
    import atexit

    import torch
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from autograde.engine import Grader, trusted_namespace
    slot = os.getpid() % 1000
    _WORKER.update(grader=Grader(None, trusted_namespace(), limits), assignments={},
                   release_dir=release_dir, slot=slot, sandbox=sandbox, limits=limits)
    try:
        _new_zygote()
    except Exception as error:  # no sandbox yet: each job tries again, and says why
        _WORKER["start_error"] = error
    atexit.register(_close_zygote)


def _new_zygote():
    from autograde.remote import Zygote
    _close_zygote()
    _WORKER["grader"].zygote = Zygote(_WORKER["release_dir"], slot=_WORKER["slot"],
                                      sandbox=_WORKER["sandbox"])


def _close_zygote():
    zygote, _WORKER["grader"].zygote = _WORKER["grader"].zygote, None
    if zygote is not None:
        try:
            zygote.close()
        except Exception:
            pass


def _grade_in_worker(source_path, notebook, student, problem):
    assignments = _WORKER["assignments"]
    if source_path not in assignments:
        assignments[source_path] = Assignment.from_source(source_path)
    assignment = assignments[source_path]
    grader = _WORKER["grader"]
    if problem:
        return _error_result(assignment, student, problem).to_json()
    last = _WORKER.pop("start_error", None)
    for attempt in range(2):
        try:
            if grader.zygote is None:
                _new_zygote()
            return grader.grade(assignment, notebook, student).to_json()
        except Exception as error:
            # the zygote itself died (its sandbox was killed), or did not start: a new one
            # for the next try; failing twice costs this submission only
            last = error
            _close_zygote()
    return _error_result(assignment, student, "the grader failed on this notebook: "
                         f"{type(last).__name__}: {last}", status="crash").to_json()


def _error_result(assignment, student, message, status="error"):
    from autograde.engine import printable
    message = printable(message)
    result = NotebookResult(student, assignment.name, assignment.notebook, "error", message)
    result.tests = [TestResult(t.grade_id, 0.0, t.points, status, message)
                    for t in assignment.tests]
    return result


# -- one batch at a time ---------------------------------------------------------------
class Busy(RuntimeError):
    """Another `grade` holds this course's lock."""


_HELD = {}  # lock path -> [open file, depth]: the lock is re-entrant within a process


class StaleRelease(Exception):
    """The repository's checks (or the solutions a chapter ships) changed since the chapter
    was released: our grader would judge with the new ones while the student's process ran
    the released ones, and plain nbgrader would grade with the released (old) ones.
    `python -m autograde grade` refuses, with either engine, until it is released again."""

    def __init__(self, stale, course_dir):
        chapters = [a for a, names in stale.items() if names]
        changed = "; ".join(f"{a}: {', '.join(names)}" for a, names in stale.items() if names)
        super().__init__(
            f"the course's checks changed since these chapters were released ({changed}): "
            "grading now would not judge by the course's checks alone (the students' code "
            "runs beside the released ones). Release them again first: python -m autograde "
            f"release {' '.join(chapters)} --course-dir {course_dir}")


@contextlib.contextmanager
def course_lock(course_dir):
    """Hold <course>/.autograde/grade.lock (fcntl.flock) or raise Busy at once, naming the
    process that holds it. Two batches on one course would record into the same staging
    folders and gradebook rows; the kernel drops the lock when its holder dies."""
    import fcntl
    path = Path(course_dir).resolve() / ".autograde" / "grade.lock"
    if str(path) in _HELD:
        _HELD[str(path)][1] += 1
        try:
            yield
        finally:
            _HELD[str(path)][1] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise Busy(f"another `grade` is running on {Path(course_dir).resolve()} (pid "
                   f"{holder}): wait for it to finish, then run this again") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    _HELD[str(path)] = [handle, 1]
    try:
        yield
    finally:
        del _HELD[str(path)]
        handle.close()  # (the file stays: removing it would race with the next locker)


# -- the batch -------------------------------------------------------------------------
def result_path(course_dir, student, assignment):
    return Path(course_dir) / RESULTS_DIR / assignment / f"{student}.json"


def _fingerprint(job, assignment):
    import hashlib

    from autograde.engine import fingerprint
    if job.problem:
        return hashlib.sha256((job.problem + assignment.fingerprint).encode()).hexdigest()
    return fingerprint(job.notebook, assignment)


def _save(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data, indent=1))
    os.replace(partial, path)  # atomic: an interrupted batch never leaves half a result


def grade(course_dir=".", assignments=None, students=None, jobs=None, resume=True,
          limits=None, db_url=None, sandbox=True, progress=True, log=print):
    """Grade every submission; returns {(student, assignment): NotebookResult}. Holds the
    course's lock (course_lock) throughout: raises Busy while another batch runs."""
    with course_lock(course_dir):
        return _grade(course_dir, assignments, students, jobs, resume, limits, db_url,
                      sandbox, progress, log)


def gradebook_state(course_dir, assignments, db_url=None):
    """({assignment in the gradebook}, {(student, assignment): score recorded there})."""
    from nbgrader.api import Gradebook, MissingEntry

    from autograde.course import nbgrader_api
    db_url = db_url or nbgrader_api(course_dir).coursedir.db_url
    known, scores = set(), {}
    with Gradebook(db_url) as gradebook:
        for assignment in assignments:
            try:
                gradebook.find_assignment(assignment)
            except MissingEntry:
                continue
            known.add(assignment)
            for submission in gradebook.assignment_submissions(assignment):
                scores[(submission.student_id, assignment)] = submission.score
    return known, scores


def _grade(course_dir, assignments, students, jobs, resume, limits, db_url, sandbox,
           progress, log):
    from tqdm import tqdm

    from autograde.record import Recorder
    from autograde.remote import remove_stale_workdirs
    warnings.simplefilter("ignore")
    course_dir = Path(course_dir).resolve()
    remove_stale_workdirs(course_dir / "release")  # what a killed batch could not remove
    assignments = assignments or course.assignments()
    release_dir = course_dir / "release"
    in_gradebook, recorded = gradebook_state(course_dir, assignments, db_url)
    missing = [a for a in assignments if not (release_dir / a / f"{a}.ipynb").is_file()
               or not (course_dir / "source" / a / f"{a}.ipynb").is_file()
               or a not in in_gradebook]
    if missing:
        log(f"releasing {', '.join(missing)} first (nbgrader generate_assignment)")
        course.release(course_dir, missing, db_url)
    stale = {a: course.stale_files(course_dir, a) for a in assignments}
    if any(stale.values()):
        raise StaleRelease(stale, course_dir)
    specs = {a: Assignment.from_source(course_dir / "source" / a / f"{a}.ipynb")
             for a in assignments}
    released = {a: json.loads((release_dir / a / f"{a}.ipynb").read_text())
                for a in assignments}
    todo, results, unrecorded = [], {}, []
    for job in find_jobs(course_dir, assignments, students):
        path = result_path(course_dir, job.student, job.assignment)
        fingerprint = _fingerprint(job, specs[job.assignment])
        if resume and path.is_file():
            try:
                saved = json.loads(path.read_text())
                result = NotebookResult.from_json(
                    {k: v for k, v in saved.items() if k != "recorded"})
            except (ValueError, TypeError, KeyError):
                saved = {}
            if saved.get("fingerprint") == fingerprint:
                results[(job.student, job.assignment)] = result
                # the gradebook is the truth: a result it lacks is recorded again, from
                # the saved verdict, without grading again (one it holds is left as it
                # is: the instructor may have changed its score in formgrader)
                if not saved.get("recorded") or (job.student, job.assignment) not in recorded:
                    unrecorded.append((job, result))
                continue
        todo.append((job, fingerprint))
    from autograde.remote import bwrap_path
    if sandbox and not bwrap_path():
        log("WARNING: bwrap (Debian package bubblewrap) is not installed: students' code "
            "runs WITHOUT a sandbox, with only process limits; it can read and write "
            "whatever this user can. Install bubblewrap to isolate it.")
    if not todo and not unrecorded:
        log(f"nothing to grade: {len(results)} results are up to date")
        return results
    recorder = Recorder(course_dir, db_url)

    def finish(job, result):
        path = result_path(course_dir, job.student, job.assignment)
        _save(path, dict(result.to_json(), recorded=False))
        try:
            failure = recorder.record(result, released[job.assignment], job.folder)
        except Exception as error:  # nbgrader's own failure: this result only
            failure = f"{type(error).__name__}: {error}"
        if failure:
            result.status = "error"
            result.error = (result.error + "\n" if result.error else "") + \
                "nbgrader could not record this result: " + failure[-1000:]
        _save(path, dict(result.to_json(), recorded=not failure))
        results[(job.student, job.assignment)] = result

    if unrecorded:
        log(f"recording {len(unrecorded)} results that the gradebook lacks")
        for job, result in unrecorded:
            finish(job, result)
    if not todo:
        return results
    jobs = jobs or max(1, min(os.cpu_count() or 1, len(todo)))
    started = time.monotonic()
    bar = tqdm(total=len(todo), unit="notebook", disable=not progress, desc="grading",
               file=sys.stderr)
    pending, breaks = dict(enumerate(todo)), {}
    while pending:
        # A worker that dies breaks its whole pool: every job not finished comes back (None),
        # the one it was grading and those waiting alike. They go into a new pool; those
        # whose pool broke twice, into a pool of one worker, one at a time in order, where
        # the first to come back unfinished is the one that was being graded: that one
        # alone is an error, and the others are graded again, never marked crash.
        suspects = {i: item for i, item in pending.items() if breaks.get(i, 0) >= 2}
        running, broken = suspects or pending, []
        for index, data in _run_pool(course_dir, release_dir, limits, sandbox,
                                     1 if suspects else jobs, running):
            job, fingerprint = pending[index]
            if data is None:
                broken.append(index)
                continue
            data["fingerprint"] = fingerprint
            finish(job, NotebookResult.from_json(data))
            del pending[index]
            bar.update()
        if suspects and broken:
            index = min(broken)
            job, fingerprint = pending.pop(index)
            data = _error_result(specs[job.assignment], job.student,
                                 "the grader's worker process died while this notebook was "
                                 "being graded, twice among others and then alone",
                                 status="crash").to_json()
            data["fingerprint"] = fingerprint
            finish(job, NotebookResult.from_json(data))
            bar.update()
        elif not suspects:
            for index in broken:
                breaks[index] = breaks.get(index, 0) + 1
    bar.close()
    log(f"graded {len(todo)} notebooks in {time.monotonic() - started:.1f} s "
        f"with {jobs} workers ({len(results) - len(todo)} up to date)")
    return results


def _run_pool(course_dir, release_dir, limits, sandbox, jobs, pending):
    """Yield (index, result JSON) for the pending jobs as their grading ends; (index, None)
    for each job left when a worker process died (the pool is then broken)."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(jobs, len(pending)), mp_context=context,
                             initializer=_start_worker,
                             initargs=(str(release_dir), limits, sandbox, os.getpid())) as pool:
        futures = {pool.submit(_grade_in_worker,
                               str(course_dir / "source" / job.assignment
                                   / f"{job.assignment}.ipynb"),
                               str(job.notebook), job.student, job.problem): index
                   for index, (job, _) in pending.items()}
        for future in as_completed(futures):
            index = futures[future]
            try:
                yield index, future.result()
            except BrokenProcessPool:
                yield index, None
            except Exception as error:  # a bug of the grader's on this notebook: it only
                job = pending[index][0]
                spec = Assignment.from_source(course_dir / "source" / job.assignment
                                              / f"{job.assignment}.ipynb")
                yield index, _error_result(spec, job.student, "the grader failed on this "
                                           f"notebook: {type(error).__name__}: {error}",
                                           status="crash").to_json()


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

    from autograde.engine import printable
    from autograde.exports import results_from_gradebook
    course_dir = Path(course_dir).resolve()
    assignments = assignments or course.assignments()
    missing = [a for a in assignments if not (course_dir / "release" / a).is_dir()]
    if missing:
        course.release(course_dir, missing, db_url)
    stale = {a: course.stale_files(course_dir, a) for a in assignments}
    if any(stale.values()):  # nbgrader would grade with the source folder's old checks
        raise StaleRelease(stale, course_dir)
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
                log(f"nbgrader autograde {assignment} reported errors:\n"
                    f"{printable(done.stderr[-3000:])}")
    log(f"nbgrader graded in {time.monotonic() - started:.1f} s")
    return results_from_gradebook(course_dir, assignments, db_url)
