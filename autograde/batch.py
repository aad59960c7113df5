"""Grade a class: every submitted/<student>/<assignment>/ folder, in parallel, resumably.

Workers are trusted processes, each holding the checks, the chapters (engine.Assignment,
built once here and handed to them) and one sandbox zygote (torch imported once). Each
submission is read once: here, where a saved result may still hold (its digest decides, and
the worker gets the bytes), else by the worker that grades it. The worker hands back the
NotebookResult and the student's answers; this process records them in the gradebook as
they arrive, then keeps the result as JSON in <course>/.autograde/results/, so that an
interrupted batch resumes where it stopped (a submission whose file and chapter are
unchanged is not graded again), and `feedback` and `report` find it.
"""
import contextlib
import ctypes
import fcntl
import hashlib
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from nbgrader.api import Gradebook, MissingEntry
from tqdm import tqdm

from autograde import course, engine, messages, remote
from autograde.course import nbgrader_api
from autograde.engine import LIMITS, Assignment, Grader, trusted_namespace
from autograde.exports import results_from_gradebook
from autograde.notebook import Submission, printable
from autograde.paths import (LOCK, RELEASE, RESULTS, SUBMITTED, class_language,
                             released_language, released_notebook, result_path,
                             source_notebook)
from autograde.record import Recorder
from autograde.results import NotebookResult, TestResult


@dataclass
class Job:
    student: str
    assignment: str
    folder: Path    # submitted/<student>/<assignment>
    notebook: Path  # the file graded (may not exist: then the result says so)
    problem: str = ""
    # the language of what is said where no notebook tells it (the problem's, a notebook
    # the grader failed on that cannot be read): the assignment's release's (see
    # paths.released_language: the language the class was given the chapter in)
    language: str = messages.ENGLISH


def find_jobs(course_dir, assignments, students=None):
    """A Job for each student folder of each assignment, in a stable order."""
    submitted = Path(course_dir) / SUBMITTED
    jobs = []
    if not submitted.is_dir():
        return jobs
    released = {assignment: messages.supported(released_language(course_dir, assignment))
                for assignment in assignments}
    for student_dir in sorted(p for p in submitted.iterdir() if p.is_dir()):
        if students and student_dir.name not in students:
            continue
        for assignment in assignments:
            folder = student_dir / assignment
            if not folder.is_dir():
                continue
            notebook = folder / f"{assignment}.ipynb"
            problem, language = "", released[assignment]
            if not notebook.exists():
                others = sorted(p.name for p in folder.glob("*.ipynb"))
                problem = messages.text("submission.misnamed", language, name=notebook.name,
                                        found=", ".join(others)) if others else \
                    messages.text("submission.missing", language, name=notebook.name)
            jobs.append(Job(student_dir.name, assignment, folder, notebook, problem, language))
    return jobs


# -- worker processes ------------------------------------------------------------------
PR_SET_PDEATHSIG = 1


def die_with_parent(parent):
    """Ask the kernel to SIGKILL this process when its parent dies (however it ends: a
    grader killed with SIGKILL runs no cleanup of its own), or exit now if it already did."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


@dataclass
class Task:
    """One notebook to grade, as the main process hands it to a worker: the job, and the
    Submission where the main process read it already (to know whether it changed)."""
    job: Job
    submission: Submission = None


class Worker:
    """What a worker process holds: a Grader with its sandbox zygote (torch imported once),
    and the chapters (engine.Assignment, built once by the main process) it grades."""

    def __init__(self, release_dir, limits, sandbox, assignments, slot=0):
        self.release_dir, self.sandbox, self.slot = release_dir, sandbox, slot
        self.assignments = assignments
        self.grader = Grader(None, trusted_namespace(), limits)
        self.start_error = None
        try:
            self.new_zygote()
        except Exception as error:  # no sandbox yet: each job tries again, and says why
            self.start_error = error

    def new_zygote(self):
        self.close_zygote()
        self.grader.zygote = remote.Zygote(self.release_dir, slot=self.slot,
                                           sandbox=self.sandbox)

    def close_zygote(self):
        zygote, self.grader.zygote = self.grader.zygote, None
        if zygote is not None:
            try:
                zygote.close()
            except Exception:
                pass

    def grade(self, task):
        """(NotebookResult, {grade_id: source} of the student's answers, for the gradebook's
        copy of the notebook: none where it was not graded)."""
        job = task.job
        assignment = self.assignments[job.assignment]
        if job.problem:
            return _error_result(assignment, job.student, job.problem,
                                 language=job.language), {}
        submission = task.submission or Submission.read(
            job.notebook, self.grader.limits["notebook_file_bytes"])
        last, self.start_error = self.start_error, None
        for attempt in range(2):
            try:
                if self.grader.zygote is None:
                    self.new_zygote()
                result = self.grader.grade(assignment, submission, job.student)
                return result, submission.answers() if result.status != "error" else {}
            except Exception as error:
                # the zygote itself died (its sandbox was killed), or did not start: a new
                # one for the next try; failing twice costs this submission only
                last = error
                self.close_zygote()
        failed = _grader_failed(assignment, job, last, submission)
        failed.fingerprint = engine.fingerprint(submission, assignment)
        return failed, {}


def _work(connection, release_dir, limits, sandbox, parent, assignments):
    """A worker process: grades each Task that `connection` brings, answering (result,
    answers), until it brings None."""
    die_with_parent(parent)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    worker = Worker(release_dir, limits, sandbox, assignments, slot=os.getpid() % 1000)
    try:
        for task in iter(connection.recv, None):
            try:
                connection.send(worker.grade(task))
            except Exception as error:  # a bug of the grader's on this notebook: it only
                connection.send((_grader_failed(
                    worker.assignments[task.job.assignment], task.job, error,
                    task.submission), {}))
    except EOFError:  # the main process is gone
        pass
    finally:
        worker.close_zygote()


def _language(job, submission=None):
    """The language of what the grader says of `job`'s notebook: the notebook's where the
    `submission` read tells it, else the release's (job.language)."""
    return submission.language(job.language) if submission is not None else job.language


def _grader_failed(assignment, job, error, submission=None):
    """The result of a notebook the grader itself failed on (`error`, its words English:
    the grader's own), every test "crash", said in the notebook's language, or the
    release's where no notebook read tells it (job.language)."""
    language = _language(job, submission)
    return _error_result(assignment, job.student,
                         messages.text("batch.grader_failed", language,
                                       error=f"{type(error).__name__}: {error}"),
                         status="crash", language=language)


def _error_result(assignment, student, message, status="error", language=messages.ENGLISH):
    message = printable(message)
    result = NotebookResult(student, assignment.name, assignment.notebook, "error", message,
                            language=language)
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
        language = messages.supported(class_language(course_dir, chapters))
        changed = messages.text("forbid.separator", language).join(
            messages.text("cli.stale_chapter", language, chapter=a, files=", ".join(names))
            for a, names in stale.items() if names)
        super().__init__(messages.text(
            "cli.stale_release", language, changed=changed,
            command=f"python -m autograde release {' '.join(chapters)} --course-dir "
                    f"{course_dir}"))


@contextlib.contextmanager
def course_lock(course_dir):
    """Hold <course>/.autograde/grade.lock (fcntl.flock) or raise Busy at once, naming the
    process that holds it. Two batches on one course would record into the same staging
    folders and gradebook rows; the kernel drops the lock when its holder dies."""
    path = Path(course_dir).resolve() / LOCK
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
        raise Busy(messages.text("cli.busy", messages.supported(class_language(course_dir)),
                                 course=Path(course_dir).resolve(), pid=holder)) from None
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
    warnings.simplefilter("ignore")
    course_dir = Path(course_dir).resolve()
    remote.remove_stale_workdirs(course_dir / RELEASE)  # what a killed batch could not remove
    assignments = assignments or course.assignments()
    release_dir = course_dir / RELEASE
    in_gradebook, recorded = gradebook_state(course_dir, assignments, db_url)
    missing = [a for a in assignments if not released_notebook(course_dir, a).is_file()
               or not source_notebook(course_dir, a).is_file()
               or a not in in_gradebook]
    if missing:
        log(f"releasing {', '.join(missing)} first (nbgrader generate_assignment)")
        course.release(course_dir, missing, db_url)
    stale = {a: course.stale_files(course_dir, a) for a in assignments}
    if any(stale.values()):
        raise StaleRelease(stale, course_dir)
    specs = {a: Assignment.from_source(source_notebook(course_dir, a)) for a in assignments}
    released = {a: json.loads(released_notebook(course_dir, a).read_text())
                for a in assignments}
    max_bytes = dict(LIMITS, **(limits or {}))["notebook_file_bytes"]
    todo, results, unrecorded = [], {}, []
    for job in find_jobs(course_dir, assignments, students):
        path = result_path(course_dir, job.student, job.assignment)
        task = Task(job)
        if job.problem:
            fingerprint = hashlib.sha256(
                (job.problem + specs[job.assignment].fingerprint).encode()).hexdigest()
        elif resume and path.is_file():  # read here, once: the worker gets the bytes
            task.submission = Submission.read(job.notebook, max_bytes)
            fingerprint = engine.fingerprint(task.submission, specs[job.assignment])
        else:
            fingerprint = None  # the worker reads it, and its result says
        if fingerprint is not None and resume and path.is_file():
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
                    answers = task.submission.answers() if task.submission and \
                        result.status != "error" else {}
                    unrecorded.append((job, result, answers))
                continue
        todo.append((task, fingerprint))
    if sandbox and not remote.bwrap_path():
        log("WARNING: bwrap (Debian package bubblewrap) is not installed: students' code "
            "runs WITHOUT a sandbox, with only process limits; it can read and write "
            "whatever this user can. Install bubblewrap to isolate it.")
    if not todo and not unrecorded:
        log(f"nothing to grade: {len(results)} results are up to date")
        return results
    recorder = Recorder(course_dir, db_url)

    def finish(job, result, answers):
        """Record `result` in the gradebook, then keep it (and whether it was recorded)
        as JSON, for a resumed run, `feedback` and `report`."""
        try:
            failure = recorder.record(result, released[job.assignment], job.folder, answers)
        except Exception as error:  # nbgrader's own failure: this result only
            failure = f"{type(error).__name__}: {error}"
        if failure:
            result.status = "error"
            result.error = (result.error + "\n" if result.error else "") + messages.text(
                "batch.not_recorded", result.language, error=failure[-1000:])
        _save(result_path(course_dir, job.student, job.assignment),
              dict(result.to_json(), recorded=not failure))
        results[(job.student, job.assignment)] = result

    if unrecorded:
        log(f"recording {len(unrecorded)} results that the gradebook lacks")
        for job, result, answers in unrecorded:
            finish(job, result, answers)
    if not todo:
        return results
    jobs = jobs or max(1, min(os.cpu_count() or 1, len(todo)))
    started = time.monotonic()
    bar = tqdm(total=len(todo), unit="notebook", disable=not progress, desc="grading",
               file=sys.stderr)
    pending, breaks = dict(enumerate(todo)), {}
    settings = (str(release_dir), limits, sandbox, os.getpid(), specs)
    # A worker is handed one notebook at a time, the others wait here (_run_workers): a
    # worker that dies costs only the notebook it was grading, which is graded once more
    # (by a new worker), then is an error ("crash"); the notebooks still waiting are graded
    # as ever, never marked crash (issue 21).
    while pending:
        for index, graded in _run_workers(settings, jobs, pending):
            task, fingerprint = pending[index]
            job = task.job
            if graded is None:  # its worker died: once more by a new worker, then an error
                breaks[index] = breaks.get(index, 0) + 1
                if breaks[index] < 2:
                    continue
                language = _language(job, task.submission)
                graded = (_error_result(specs[job.assignment], job.student,
                                        messages.text("batch.worker_died", language),
                                        status="crash", language=language), {})
                if fingerprint is None:
                    fingerprint = engine.fingerprint(
                        task.submission or Submission.read(job.notebook, max_bytes),
                        specs[job.assignment])
            result, answers = graded
            if fingerprint is not None:
                result.fingerprint = fingerprint
            finish(job, result, answers)
            del pending[index]
            bar.update()
    bar.close()
    log(f"graded {len(todo)} notebooks in {time.monotonic() - started:.1f} s "
        f"with {jobs} workers ({len(results) - len(todo)} up to date)")
    return results


def _run_workers(settings, jobs, pending):
    """Yield (index, (result, answers)) for the pending tasks ({index: (Task, _)}) as their
    grading ends, from up to `jobs` worker processes (_work), each handed one task at a time;
    (index, None) for the task of a worker process that died (the others go on, and a new
    process takes its place while tasks are left)."""
    context = multiprocessing.get_context("spawn")
    queue = list(pending)
    workers = {}  # our end of a worker's pipe -> [its process, the index it grades or None]

    def start():
        ours, theirs = context.Pipe()
        process = context.Process(target=_work, args=(theirs, *settings), daemon=True)
        process.start()
        theirs.close()
        workers[ours] = [process, None]
        return ours

    def hand_out(connection):
        index = queue.pop(0) if queue else None
        workers[connection][1] = index
        try:
            connection.send(None if index is None else pending[index][0])
        except OSError:  # it died already (its pipe says so next): the task waits
            if index is not None:
                queue.insert(0, index)
            workers[connection][1] = None

    try:
        # all started before any is handed a task: a task holding a large notebook waits
        # until its worker has started, and the others start meanwhile
        for connection in [start() for _ in range(min(jobs, len(queue)))]:
            hand_out(connection)
        while workers:
            sentinels = {process.sentinel: connection
                         for connection, (process, _) in workers.items()}
            for ready in multiprocessing.connection.wait([*workers, *sentinels]):
                connection = sentinels.get(ready, ready)
                if connection not in workers:
                    continue  # (its pipe and its sentinel were both ready)
                process, index = workers[connection]
                try:
                    graded = connection.recv() if connection.poll() else None
                except (EOFError, OSError):
                    graded = None
                if graded is not None:
                    yield index, graded
                    hand_out(connection)
                    continue
                # its pipe closed or its process ended: it is gone
                del workers[connection]
                connection.close()
                process.join(5)
                if index is not None:  # it died while grading
                    yield index, None
                    if queue:
                        hand_out(start())
    finally:
        for connection, (process, _) in workers.items():
            try:
                connection.send(None)
            except OSError:
                pass
            connection.close()
        for process, _ in workers.values():
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join()


def save_results(course_dir, results):
    """Keep results graded elsewhere (plain nbgrader) where `feedback` and `report` look.

    They carry no fingerprint, so the default engine grades those notebooks again."""
    for (student, assignment), result in results.items():
        _save(result_path(course_dir, student, assignment),
              dict(result.to_json(), fingerprint="", recorded=True))


def load_results(course_dir, assignments=None, have=None):
    """Every saved result: {(student, assignment): NotebookResult}, in the order of their
    files; those of `have` ({(student, assignment): NotebookResult}, a run's own) taken from
    it instead of their files."""
    root = Path(course_dir) / RESULTS
    have = have or {}
    results = {}
    for path in sorted(root.glob("*/*.json")):
        if assignments and path.parent.name not in assignments:
            continue
        key = (path.stem, path.parent.name)
        if key in have:
            results[key] = have[key]
            continue
        data = json.loads(path.read_text())
        data.pop("recorded", None)
        results[(data["student"], data["assignment"])] = NotebookResult.from_json(data)
    return results


def grade_with_nbgrader(course_dir=".", assignments=None, students=None, db_url=None,
                        log=print):
    """The same job by plain `nbgrader autograde` (one notebook at a time, as it does)."""
    course_dir = Path(course_dir).resolve()
    assignments = assignments or course.assignments()
    missing = [a for a in assignments if not (course_dir / RELEASE / a).is_dir()]
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
