"""Grade one submitted notebook: run the student's code in the sandbox, judge it here.

What runs in the student's process (in notebook order):
  - every solution cell, whole;
  - from every other code cell, only its imports, definitions and constant assignments,
    so that a helper the student wrote beside an answer still exists, while the chapter's
    demonstrations (figures, training runs, timings) are not re-run: they grade nothing.
What runs here, in the grader: each test cell of the *source* notebook (hidden tests
included, never shown to the student's process), with the student's names standing for
their objects in the child. A test cell passes when it raises nothing, as in nbgrader.
"""
import ast
import contextlib
import hashlib
import importlib
import io
import json
import math
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from IPython.core.inputtransformer2 import TransformerManager

from autograde import checks_catalogue, forbids, messages
from autograde.notebook import (CELL_STATEMENTS, NOTEBOOK_FILE_BYTES, NOTEBOOK_STATEMENTS,
                                Submission, SubmissionError, _nbgrader, _one_line, _source,
                                definitions, duplicates, exercises, parse, plan, printable)
from autograde.notebook import language as notebook_language
from autograde.paths import CHECKS_PACKAGE
from autograde.remote import (SCRATCH_BYTES, SHM_BYTES, RemoteNamespace, RemoteRuntime,
                              SubmissionFault)
from autograde.results import NotebookResult, TestResult
from chapters.checks import common
from chapters.checks import language as checks_language

LIMITS = {
    "call_seconds": 60,         # one test cell, or one cell of the student's code
    "notebook_seconds": 300,    # everything for one notebook
    "memory_bytes": 2 * 2**30,  # address space on top of what the warm process holds
    "output_bytes": 64 * 2**20,  # one reply from the student's process
    "print_chars": 20_000,      # what the student's prints may fill
    "file_bytes": 64 * 2**20,   # any file the student's code writes (scratch only)
    "processes": 64,            # processes and threads, where a uid of its own allows
    "notebook_file_bytes": NOTEBOOK_FILE_BYTES,  # the submitted .ipynb itself
    # statements run one by one (an upper bound, counted before parsing: lines and ';'):
    # the chapters' longest cell has under 100, a whole notebook under 600
    "cell_statements": CELL_STATEMENTS,
    "notebook_statements": NOTEBOOK_STATEMENTS,
    "scratch_bytes": SCRATCH_BYTES,  # its scratch folder (tmpfs), outside memory_bytes
    "shm_bytes": SHM_BYTES,          # /dev/shm and System V shared memory, the same
}


@dataclass
class TestCell:
    grade_id: str
    points: float
    source: str
    names: dict = field(default_factory=dict)  # e.g. {"check": checks.attention module}

    def __reduce__(self):
        """Pickled (to a worker process, with its Assignment) with its checks modules by
        name: the worker imports the same ones."""
        return _test_cell, (self.grade_id, self.points, self.source,
                            {alias: module.__name__ for alias, module in self.names.items()})


def _test_cell(grade_id, points, source, names):
    return TestCell(grade_id, points, source,
                    {alias: importlib.import_module(name) for alias, name in names.items()})


@dataclass
class Assignment:
    """What the grader knows about a chapter, read from its source notebook (trusted)."""
    name: str
    notebook: str
    solution_ids: list
    tests: list
    kernel: str
    fingerprint: str = ""
    forbids: list = field(default_factory=list)  # checks.common.Forbidden of its exercises
    given: frozenset = frozenset()  # the steps (see plan) of its given cells: the course's

    @classmethod
    def from_source(cls, path, imports=True):
        path = Path(path)
        raw = path.read_bytes()
        nb = json.loads(raw)
        solution_ids, tests = exercises(nb), []
        for cell in nb["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade") and cell["cell_type"] == "code":
                tests.append(TestCell(meta["grade_id"], float(meta.get("points", 0)),
                                      "".join(cell["source"])))
        kernel = nb.get("metadata", {}).get("kernelspec", {}).get("name", "python3")
        checks = _check_imports(nb) if imports else {}
        for test in tests:
            test.names = checks
        transform = TransformerManager().transform_cell
        given = frozenset(step for cell in nb["cells"] if cell["cell_type"] == "code"
                          and not _nbgrader(cell).get("solution")
                          and not _nbgrader(cell).get("grade")
                          for _, step in definitions(_source(cell), transform))
        return cls(path.stem, path.stem, solution_ids, tests, kernel,
                   fingerprint=_judged_by(raw, path, checks),
                   forbids=forbids.specs_of(list(dict.fromkeys(checks.values())), solution_ids),
                   given=given)


def _judged_by(raw, path, checks):
    """sha256 of what a verdict depends on besides the submission: the source notebook
    (`raw`), the checks modules that judge it (each file of the trusted `checks` modules'
    package that they use, transitively: common.py, nested.py) and the released code that
    the student's process gets (release/<assignment>/'s modules beside source/, when there
    is one: checks/, solutions/): a check changed, or released again, regrades on resume.
    (A check changed without releasing again is refused before: batch.StaleRelease.)"""
    digest = hashlib.sha256(raw)
    files, todo = set(), [Path(module.__file__) for module in checks.values()]
    while todo:  # the modules and, transitively, the sibling modules they import
        file = todo.pop()
        if file not in files and file.is_file():
            files.add(file)
            todo += [file.parent / f"{name}.py" for name in _relative_imports(file)]
    released = path.parent.parent.parent / "release" / path.stem
    if path.parent.parent.name == "source" and released.is_dir():  # checks/, solutions/
        files |= {f for f in released.rglob("*.py") if "__pycache__" not in f.parts}
        files |= set((released / "checks" / "fixtures").glob("*.npz"))
    for file in sorted(files):
        if file.is_file():
            digest.update(f"\0{file.name}\0".encode() + file.read_bytes())
    return digest.hexdigest()


def _relative_imports(filename):
    """Names of the sibling modules a checks module imports (`from .common import ...`,
    `from . import nested`)."""
    tree = parse(Path(filename).read_text(), str(filename))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module.split(".")[0]} if node.module else \
                {alias.name for alias in node.names}
    return found


def _check_imports(nb):
    """{alias: module} for the source notebook's `from checks import X as alias` lines: the
    course's own checks (chapters.checks.X), never a submitted or released copy."""
    names = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        for line in "".join(cell["source"]).splitlines():
            try:
                tree = parse(line.strip())
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, ast.ImportFrom) and node.module == "checks":
                    for alias in node.names:
                        names[alias.asname or alias.name] = importlib.import_module(
                            f"{CHECKS_PACKAGE}.{alias.name}")
    return names

def suspicious(steps, given=frozenset()):
    """Problems ("suspicious") for each step whose code reaches what a solution never needs:
    the checks, the grader, torch's dispatch internals, threads, eval... (autograde.forbids;
    `given`: the course's own steps, Assignment.given, never flagged). Flagged for the
    instructor; where an exercise forbids shortcuts, forbids.verdicts() decides its points."""
    return forbids.flags(steps, given)



def _failure_text(error, language=messages.ENGLISH):
    """A check's verdict as it is; anything else (what the student's code raised, also a
    class of theirs named CheckFailure) with its class name and where in their code."""
    if isinstance(error, common.CheckFailure):
        return str(error)
    text = f"{type(error).__name__}: {error}"
    student = getattr(error, "student_traceback", "")
    where = messages.text("failure.in_your_code", language)
    return text + (f"\n{where}\n{student}" if student else "")


def _first_line(label):
    """The cell line a step starts at, from its label ("cell x, line 4" -> 4; else 1)."""
    line = label.rpartition(", line ")[2]
    return int(line) if line.isdigit() else 1


class Grader:
    """Grades notebooks one at a time through a zygote (autograde.remote.Zygote)."""

    def __init__(self, zygote, checks_namespace, limits=None):
        self.zygote = zygote
        self.trusted = checks_namespace
        # the checks draw fresh inputs for this grader, from a number no student sees
        self.salt = secrets.randbits(48)
        self.limits = dict(LIMITS, **(limits or {}))
        self.transform = TransformerManager().transform_cell

    def _fresh_child(self, assignment, steps, skip, problems, deadline, language):
        """A new child that has run `steps` except those in `skip`; records what failed."""
        child = self.zygote.spawn(assignment.name, self.limits, language)
        child.deadline = deadline
        for label, source, is_solution in steps:
            if label in skip:
                continue
            try:
                child.run(source, label, timeout=self.limits["call_seconds"],
                          line=_first_line(label))
            except SubmissionFault as fault:
                problems.append({"cell": label, "kind": fault.kind,
                                 "message": fault.reason(language)})
                skip.add(label)
                raise
            except Exception as error:
                # a failing given statement is usually a skipped demonstration's fault
                if is_solution:
                    problems.append({"cell": label, "kind": "error",
                                     "message": _failure_text(error, language)})
        return child

    def _child_or_fault(self, assignment, steps, skip, problems, deadline, language):
        """A fresh child, leaving out each step that kills one (at most every step)."""
        for _ in range(len(steps) + 1):
            if time.monotonic() >= deadline:  # no step is to blame for the time spent before
                raise SubmissionFault("timeout", key="fault.notebook_time_ran_out")
            try:
                return self._fresh_child(assignment, steps, skip, problems, deadline,
                                         language)
            except SubmissionFault:
                if time.monotonic() > deadline:
                    raise
        raise SubmissionFault("crash", key="fault.not_loaded")

    def grade(self, assignment, submission, student=""):
        """The NotebookResult of `submission` (a notebook.Submission, or the path of the
        file, then read here) for `assignment`."""
        started = time.monotonic()
        if not isinstance(submission, Submission):
            submission = Submission.read(submission, self.limits["notebook_file_bytes"])
        result = NotebookResult(student, assignment.name, assignment.notebook, "graded",
                                sandbox=self.zygote.sandbox)
        result.fingerprint = fingerprint(submission, assignment)
        try:
            nb = submission.notebook(assignment)
            # the grader's own messages in the notebook's language, the checks' too (each
            # from its own catalogue)
            spoken = _spoken(nb)
            with contextlib.suppress(AttributeError):  # (metadata.course not a dict: English)
                result.language = messages.supported(notebook_language(nb))
            steps = plan(nb, assignment, self.transform, self.limits, result.problems)
            result.problems += duplicates(nb) + suspicious(steps, assignment.given)
            # which functions a solution calls: from its source, never from its process
            lost = forbids.verdicts(steps, assignment.forbids, assignment.given,
                                    result.language)
        except (SubmissionError, OSError, RecursionError, MemoryError) as error:
            # (anything but SubmissionError here is a notebook no check foresaw: it costs
            # that notebook only, with what went wrong)
            if isinstance(error, SubmissionError):  # (in the notebook's language, if read)
                message, result.language = error.text(), error.language
            else:  # (said in the notebook's language where its bytes tell it)
                result.language = submission.language(result.language)
                message = messages.text("submission.unreadable", result.language,
                                        name=submission.path.name,
                                        error=_one_line(f"{type(error).__name__}: {error}"))
            result.status, result.error = "error", printable(message)
            result.tests = [TestResult(t.grade_id, 0.0, t.points, "error", result.error)
                            for t in assignment.tests]
            result.seconds = round(time.monotonic() - started, 3)
            return result
        deadline = started + self.limits["notebook_seconds"]
        skip, child = set(), None
        for test in assignment.tests:
            outcome = TestResult(test.grade_id, 0.0, test.points, "failed")
            try:
                if child is None:
                    child = self._child_or_fault(assignment, steps, skip, result.problems,
                                                 deadline, result.language)
                outcome.output = self._run_test(test, child, spoken)
                outcome.status, outcome.points = "passed", test.points
                if test.grade_id in lost:  # right, but not written as the exercise asks
                    outcome.status, outcome.points = "failed", 0.0
                    outcome.message, outcome.output = lost[test.grade_id], ""
            except SubmissionFault as fault:
                outcome.status = fault.kind
                outcome.message = _fault_text(fault, self.limits, result.language)
                self.zygote.kill()
                child = None
            except Exception as error:
                outcome.message = _failure_text(error, result.language)
            if child is not None and child.lost is not None:  # (a mutant's fault, after the
                self.zygote.kill()  # cell had failed: the next cell gets a fresh process)
                child = None
            result.tests.append(outcome)
        self.zygote.kill()
        result.seconds = round(time.monotonic() - started, 3)
        return _cleaned(result)

    def _run_test(self, test, child, spoken=checks_language.ENGLISH):
        """Run one test cell here, its checks' messages in the language `spoken`; returns
        what it printed, raises what it raised."""
        trusted = dict(self.trusted, **test.names)
        # names defined here (the checks, torch) never resolve in the student's process
        namespace = RemoteNamespace(child, trusted)
        printed = io.StringIO()
        code = compile(test.source, f"<test {test.grade_id}>", "exec")
        runtime = RemoteRuntime(child, common.LOCAL)
        # the limit is the test cell's, all its calls together (instructor_guide.md)
        child.test_deadline = time.monotonic() + self.limits["call_seconds"]
        try:
            with contextlib.redirect_stdout(printed), torch.random.fork_rng(), \
                    common.salted(self.salt), common.use_runtime(runtime), \
                    checks_language.speaking(spoken):
                torch.manual_seed(0)
                exec(code, trusted, namespace)
        finally:
            child.test_deadline = None
            child.stdout.take()  # what the student's code printed in its calls: freed per test
        return printed.getvalue()


def _spoken(nb):
    """The language of the checks' messages for the notebook `nb`: the one it was released
    in (notebook.language), if the checks have a catalogue of it, else English (a
    notebook's metadata is the student's to write: no other value reaches a path)."""
    try:
        chosen = notebook_language(nb)
    except AttributeError:  # (metadata that is not a dict where the release writes one)
        return checks_language.ENGLISH
    return chosen if chosen in checks_catalogue.languages() else checks_language.ENGLISH


def fingerprint(submission, assignment):
    """What a result was graded from: the submitted file (its digest, or its absence: a
    notebook.Submission) and the chapter."""
    return hashlib.sha256(f"{submission.digest} {assignment.fingerprint}".encode()).hexdigest()


def _cleaned(result):
    """The result with every text encodable and printable (a student's message may hold
    lone surrogates, which no CSV, gradebook or HTML page could be written with, and escape
    sequences, which would rewrite the terminal that prints it): notebook.printable."""
    result.error = printable(result.error)
    for test in result.tests:
        test.message, test.output = printable(test.message), printable(test.output)
    result.problems = [_printable_all(p) for p in result.problems]
    return result


def _printable_all(value):
    """`value` (a problem: a dict of texts, a flag's findings a list of dicts of them) with
    every text in it printable, walked through dicts and lists."""
    if isinstance(value, dict):
        return {key: _printable_all(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_printable_all(item) for item in value]
    return printable(value)


def _fault_text(fault, limits, language=messages.ENGLISH):
    """What the student reads of a SubmissionFault, in `language`."""
    key = {"timeout": "fault.timeout", "crash": "fault.crash"}.get(fault.kind, "fault.protocol")
    return messages.text(key, language, reason=fault.reason(language),
                         call_seconds=limits["call_seconds"],
                         notebook_seconds=limits["notebook_seconds"])


def trusted_namespace():
    """Globals for running test cells: torch, and (per test) the course's own checks."""
    return {"torch": torch, "nn": nn, "F": F, "math": math, "__builtins__": __builtins__}
