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
import io
import json
import secrets
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from autograde import forbids, kit
from autograde.remote import (SCRATCH_BYTES, SHM_BYTES, RemoteNamespace, RemoteRuntime,
                              SubmissionFault)

LIMITS = {
    "call_seconds": 60,         # one test cell, or one cell of the student's code
    "notebook_seconds": 300,    # everything for one notebook
    "memory_bytes": 2 * 2**30,  # address space on top of what the warm process holds
    "output_bytes": 64 * 2**20,  # one reply from the student's process
    "print_chars": 20_000,      # what the student's prints may fill
    "file_bytes": 64 * 2**20,   # any file the student's code writes (scratch only)
    "processes": 64,            # processes and threads, where a uid of its own allows
    "notebook_file_bytes": 20 * 2**20,  # the submitted .ipynb itself
    # statements run one by one (an upper bound, counted before parsing: lines and ';'):
    # the chapters' longest cell has under 100, a whole notebook under 600
    "cell_statements": 2_000,
    "notebook_statements": 10_000,
    "scratch_bytes": SCRATCH_BYTES,  # its scratch folder (tmpfs), outside memory_bytes
    "shm_bytes": SHM_BYTES,          # /dev/shm and System V shared memory, the same
}


class SubmissionError(Exception):
    """The submission cannot be graded at all (not a notebook, wrong chapter, ...)."""


@dataclass
class TestCell:
    grade_id: str
    points: float
    source: str
    names: dict = field(default_factory=dict)  # e.g. {"check": checks.attention module}


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
        solution_ids, tests = [], []
        for cell in nb["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("solution") and not meta.get("grade"):
                solution_ids.append(meta["grade_id"])
            elif meta.get("grade") and cell["cell_type"] == "code":
                tests.append(TestCell(meta["grade_id"], float(meta.get("points", 0)),
                                      "".join(cell["source"])))
        kernel = nb.get("metadata", {}).get("kernelspec", {}).get("name", "python3")
        checks = _check_imports(nb) if imports else {}
        for test in tests:
            test.names = checks
        from autograde.forbids import specs_of
        from IPython.core.inputtransformer2 import TransformerManager
        transform = TransformerManager().transform_cell
        given = frozenset(step for cell in nb["cells"] if cell["cell_type"] == "code"
                          and not _nbgrader(cell).get("solution")
                          and not _nbgrader(cell).get("grade")
                          for _, step in definitions(_source(cell), transform))
        return cls(path.stem, path.stem, solution_ids, tests, kernel,
                   fingerprint=_judged_by(raw, path, checks),
                   forbids=specs_of(list(dict.fromkeys(checks.values())), solution_ids),
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
    tree = kit.parse(Path(filename).read_text(), str(filename))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module.split(".")[0]} if node.module else \
                {alias.name for alias in node.names}
    return found


def _checks_on_path():
    """The course's own checks (chapters/checks), never a submitted copy, for `import checks`."""
    from autograde.course import CHAPTERS
    if str(CHAPTERS) not in sys.path:
        sys.path.insert(0, str(CHAPTERS))


def _check_imports(nb):
    """{alias: module} for the source notebook's `from checks import X as alias` lines."""
    import importlib

    _checks_on_path()
    names = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        for line in "".join(cell["source"]).splitlines():
            try:
                tree = kit.parse(line.strip())
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, ast.ImportFrom) and node.module == "checks":
                    for alias in node.names:
                        names[alias.asname or alias.name] = importlib.import_module(
                            f"checks.{alias.name}")
    return names


def file_sha256(path):
    """sha256 of a file, read in chunks (a 500 MB submission is never held in memory)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def read_submission(path, assignment, max_bytes=LIMITS["notebook_file_bytes"]):
    """The student's notebook as a dict, or SubmissionError saying plainly (in one line)
    what is wrong. Its size is checked before a byte of it is read; then it must be UTF-8
    JSON, a valid nbformat 4 notebook (nbformat's own schema: any wrong type anywhere is
    named), hold only encodable text, and hold this assignment's exercises."""
    path = Path(path)
    if not path.is_file():
        raise SubmissionError(f"no notebook named {path.name} was submitted")
    size = path.stat().st_size
    if size == 0:
        raise SubmissionError(f"{path.name} is empty (0 bytes)")
    if size > max_bytes:
        raise SubmissionError(f"{path.name} is {size / 2**20:.0f} MB, over the limit of "
                              f"{max_bytes / 2**20:.0f} MB: clear its outputs and submit again")
    with open(path, "rb") as handle:
        data = handle.read(max_bytes + 1)  # (the file may have grown since)
    if len(data) > max_bytes:
        raise SubmissionError(f"{path.name} is over the limit of {max_bytes / 2**20:.0f} MB")
    try:
        nb = json.loads(data)
    except RecursionError:
        raise SubmissionError(f"{path.name} is not a notebook (its JSON is nested too "
                              "deeply to read)") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise SubmissionError(f"{path.name} is not a notebook (not valid JSON: "
                              f"{_one_line(error)})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise SubmissionError(f"{path.name} is JSON but not a Jupyter notebook (no cell list)")
    if nb.get("nbformat") != 4:
        raise SubmissionError(f"{path.name} has nbformat {_one_line(repr(nb.get('nbformat')))}"
                              "; expected 4")
    where = _undecodable(nb)
    if where:
        raise SubmissionError(f"{path.name} holds text that is not valid Unicode (a lone "
                              f"surrogate) in {where}: save it again from Jupyter")
    problem = _schema_problem(nb)
    if problem:
        raise SubmissionError(f"{path.name} is not a valid nbformat 4 notebook: {problem}")
    kernel = nb["metadata"].get("kernelspec") or {}
    language = nb["metadata"].get("language_info", {}).get("name") or "python"
    if kernel.get("language", language) != "python":
        raise SubmissionError(f"{path.name} uses the {_one_line(kernel.get('display_name'))}"
                              " kernel; the course's notebooks are Python")
    ids = set(_solutions(nb))
    ours = len(ids & set(assignment.solution_ids))
    best = max(((len(ids & set(other)), name) for name, other in chapter_exercises().items()
                if name != assignment.name), default=(0, ""))
    if assignment.solution_ids and (ours == 0 or best[0] > ours):
        where = f"; it holds {best[1]}'s exercises" if best[0] > ours else ""
        raise SubmissionError(f"{path.name} holds {ours} of {assignment.name}'s "
                              f"{len(assignment.solution_ids)} exercises{where} (the wrong "
                              "notebook, or submitted under the wrong chapter?)")
    return nb


def _one_line(value, limit=200):
    """str(value) on one line, at most `limit` characters, encodable, printable."""
    text = " ".join(printable(str(value)).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def clean_text(text):
    """`text` with what UTF-8 cannot encode (lone surrogates) written as escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def printable(text):
    """clean_text(text) without terminal control characters (autograde.feedback.clean: tab
    and newline kept): any text the student controls (a kernel's name, an exception's class
    name and message, a cell id, a file name) before it reaches a terminal or a file."""
    from autograde.feedback import clean
    return clean(clean_text(str(text)))


def _undecodable(nb):
    """Where (e.g. "cells[3].source") the first string that UTF-8 cannot encode sits, or ''.
    Iterative: json.loads already bounded the depth, this walk needs no stack."""
    todo = [(nb, "the notebook")]
    while todo:
        value, where = todo.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                todo.append((key, where))
                todo.append((item, f"{where}.{_one_line(key, 40)}"
                             if where != "the notebook" else _one_line(key, 40)))
        elif isinstance(value, list):
            todo += [(item, f"{where}[{i}]") for i, item in enumerate(value)]
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return where
    return ""


def _schema_problem(nb):
    """'' for a valid nbformat 4 notebook (nbformat's schema, at the notebook's own minor
    version), else one line naming the first problem and where it is."""
    import nbformat
    from nbformat.validator import ValidationError
    minor = nb.get("nbformat_minor")
    if not isinstance(minor, int) or isinstance(minor, bool) or minor < 0:
        return f"nbformat_minor is {_one_line(repr(minor), 40)}, not a version number"
    for index, cell in enumerate(nb["cells"]):  # (nbformat's validator assumes as much)
        if not isinstance(cell, dict):
            return f"at cells[{index}]: {_one_line(repr(cell), 60)} is not a cell (a JSON object)"
    try:
        with warnings.catch_warnings():  # (a missing cell id is added, with a warning)
            warnings.simplefilter("ignore")
            nbformat.validate(nb, version=4,
                              version_minor=min(minor, nbformat.current_nbformat_minor))
    except ValidationError as error:
        place = "".join(f"[{p}]" if isinstance(p, int) else f".{p}"
                        for p in getattr(error, "absolute_path", [])).lstrip(".")
        return f"at {_one_line(place, 80) or 'the top level'}: {_one_line(error.message)}"
    except RecursionError:
        return "it is nested too deeply to check"
    except Exception as error:  # the validator itself failed on it
        return _one_line(f"{type(error).__name__}: {error}")
    return ""


_EXERCISES = {}


def chapter_exercises():
    """{chapter: [solution grade_id]} of every chapter of the course (to name a mix-up)."""
    if not _EXERCISES:
        from autograde.course import CHAPTERS
        for path in sorted(CHAPTERS.glob("[0-9][0-9]_*.ipynb")):
            _EXERCISES[path.stem] = Assignment.from_source(path, imports=False).solution_ids
    return _EXERCISES


def _source(cell):
    source = cell.get("source", "")
    if isinstance(source, list):
        return "".join(part for part in source if isinstance(part, str))
    return source if isinstance(source, str) else ""


def _nbgrader(cell):
    """A cell's nbgrader metadata, {} where any part of it has the wrong type."""
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    meta = meta.get("nbgrader") if isinstance(meta, dict) else None
    return meta if isinstance(meta, dict) else {}


def _is_solution(cell):
    meta = _nbgrader(cell)
    return isinstance(cell, dict) and cell.get("cell_type") == "code" \
        and bool(meta.get("solution")) and not meta.get("grade")


def _solution_cells(nb):
    """{grade_id: index of the cell that counts} of the student's solution cells. A grade
    id given to several cells counts once, from its *last* cell, as nbgrader's
    DeduplicateIds decides (it clears the metadata of the earlier copies)."""
    found = {}
    cells = nb.get("cells") if isinstance(nb, dict) else None
    for index, cell in enumerate(cells if isinstance(cells, list) else []):
        if _is_solution(cell):
            found[str(_nbgrader(cell).get("grade_id"))] = index
    return found


def _solutions(nb):
    """{grade_id: source} of the student's solution cells (the last cell of each id)."""
    return {gid: _source(nb["cells"][index]) for gid, index in _solution_cells(nb).items()}


def duplicates(nb):
    """Problems ("duplicate") for each solution grade id that several cells carry."""
    counting = {}
    for index, cell in enumerate(nb["cells"]):
        if _is_solution(cell):
            counting.setdefault(str(_nbgrader(cell).get("grade_id")), []).append(index)
    return [{"cell": f"cell {where[-1] + 1}", "kind": "duplicate",
             "message": f"the exercise {_one_line(gid, 80)!r} is in {len(where)} cells ("
                        f"{', '.join(str(i + 1) for i in where)}): graded from the last, as "
                        "nbgrader does; the others ran as ordinary cells"}
            for gid, where in counting.items() if len(where) > 1]


_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _is_constant(node):
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _transformed(source, transform):
    try:
        return transform(source)
    except Exception:  # IPython's transformer on text it cannot take: run it as it is
        return source


_UNPARSABLE = (SyntaxError, ValueError, RecursionError, MemoryError)  # (null bytes: ValueError)


def definitions(source, transform):
    """[(line, source)] of the imports, definitions and constant assignments of a cell."""
    try:
        tree = kit.parse(_transformed(source, transform))
    except _UNPARSABLE:
        return []
    kept = []
    for node in tree.body:
        if isinstance(node, _KEPT):
            kept.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None \
                and _is_constant(node.value):
            kept.append(node)
    found = []
    for node in kept:
        try:
            found.append((node.lineno, ast.unparse(node)))
        except (RecursionError, MemoryError, ValueError):
            continue  # too deep to write back: it would not compile either
    return found


def statements(source, transform):
    """[(first line, source)] of each top-level statement. The source is not padded: the
    student's process compiles it at its first line (autograde.remote.Child.run's `line`),
    so that tracebacks name the cell's own lines at no cost per line above it."""
    code = _transformed(source, transform)
    try:
        tree = kit.parse(code)
    except _UNPARSABLE:
        return [(1, code)]  # run whole, so that the student sees Python's own message
    lines = code.splitlines()
    found = []
    for node in tree.body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        text = "\n".join(lines[first - 1:node.end_lineno])
        found.append((first, text))
    return found


def statement_bound(source):
    """An upper bound on the statements of `source`, read without parsing it (parsing
    40,000 one-word statements took 80 s and 800 MB): its lines and its semicolons."""
    return source.count("\n") + source.count(";") + 1


def plan(nb, assignment, transform, limits=LIMITS, problems=None):
    """[(label, source, is_solution)] to run in the student's process, in notebook order.
    A code cell over limits["cell_statements"] is left out (a "limit" problem appended to
    `problems`); a notebook over limits["notebook_statements"] is refused (SubmissionError),
    both before any parsing."""
    wanted = set(assignment.solution_ids)
    counted = {index for gid, index in _solution_cells(nb).items() if gid in wanted}
    code_cells = [(i, c) for i, c in enumerate(nb["cells"]) if c.get("cell_type") == "code"]
    bounds = [statement_bound(_source(cell)) for _, cell in code_cells]
    per_cell, per_notebook = limits["cell_statements"], limits["notebook_statements"]
    if sum(min(b, per_cell + 1) for b in bounds) > per_notebook:
        raise SubmissionError(f"the notebook's code cells hold more than {per_notebook:,} "
                              f"statements (lines and semicolons; the chapter's own hold "
                              f"under 1,000): over the grader's limit, not graded")
    steps = []
    for (index, cell), bound in zip(code_cells, bounds):
        meta = _nbgrader(cell)
        grade_id = str(meta.get("grade_id"))
        if bound > per_cell:
            if problems is not None:
                problems.append({"cell": f"cell {grade_id}" if index in counted
                                 else f"cell {index + 1}", "kind": "limit",
                                 "message": f"more than {per_cell:,} statements (lines and "
                                            "semicolons) in one cell, over the grader's "
                                            "limit: the cell was not run"})
            continue
        if index in counted:
            # statement by statement: a line that needs a skipped demonstration's data
            # must not take the definitions after it down with it
            for line, statement in statements(_source(cell), transform):
                steps.append((f"cell {grade_id}, line {line}", statement, True))
        elif not meta.get("grade"):
            # one statement at a time, so that one failing import loses nothing else
            for line, statement in definitions(_source(cell), transform):
                steps.append((f"cell {index + 1}, line {line}", statement, False))
    return steps


def suspicious(steps, given=frozenset()):
    """Problems ("suspicious") for each step whose code reaches what a solution never needs:
    the checks, the grader, torch's dispatch internals, threads, eval... (autograde.forbids;
    `given`: the course's own steps, Assignment.given, never flagged). Flagged for the
    instructor; where an exercise forbids shortcuts, forbids.verdicts() decides its points."""
    return forbids.flags(steps, given)


@dataclass
class TestResult:
    grade_id: str
    points: float
    max_points: float
    status: str        # passed | failed | timeout | crash | protocol | error
    message: str = ""  # the diagnosis (first failure) for the student
    output: str = ""   # what a passing check printed (the check marks)

    @property
    def passed(self):
        return self.status == "passed"


@dataclass
class NotebookResult:
    student: str
    assignment: str
    notebook: str
    status: str                 # graded | error
    error: str = ""
    tests: list = field(default_factory=list)
    problems: list = field(default_factory=list)  # cells of the student's code that failed
    seconds: float = 0.0
    sandbox: str = ""
    fingerprint: str = ""

    def to_json(self):
        data = dict(self.__dict__)
        data["tests"] = [dict(t.__dict__) for t in self.tests]
        return data

    @classmethod
    def from_json(cls, data):
        data = dict(data)
        data["tests"] = [TestResult(**t) for t in data.get("tests", [])]
        return cls(**data)

    @property
    def score(self):
        return sum(t.points for t in self.tests)

    @property
    def max_score(self):
        return sum(t.max_points for t in self.tests)


def _course_checks():
    """checks.common as the grader imports it: the course's own (see _check_imports)."""
    _checks_on_path()
    from checks import common
    return common


def _failure_text(error):
    """A check's verdict as it is; anything else (what the student's code raised, also a
    class of theirs named CheckFailure) with its class name and where in their code."""
    if isinstance(error, _course_checks().CheckFailure):
        return str(error)
    text = f"{type(error).__name__}: {error}"
    student = getattr(error, "student_traceback", "")
    return text + (f"\nIn your code:\n{student}" if student else "")


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
        from IPython.core.inputtransformer2 import TransformerManager
        self.transform = TransformerManager().transform_cell

    def _fresh_child(self, assignment, steps, skip, problems, deadline):
        """A new child that has run `steps` except those in `skip`; records what failed."""
        child = self.zygote.spawn(assignment.name, self.limits)
        child.deadline = deadline
        for label, source, is_solution in steps:
            if label in skip:
                continue
            try:
                child.run(source, label, timeout=self.limits["call_seconds"],
                          line=_first_line(label))
            except SubmissionFault as fault:
                problems.append({"cell": label, "kind": fault.kind, "message": fault.message})
                skip.add(label)
                raise
            except Exception as error:
                # a failing given statement is usually a skipped demonstration's fault
                if is_solution:
                    problems.append({"cell": label, "kind": "error",
                                     "message": _failure_text(error)})
        return child

    def _child_or_fault(self, assignment, steps, skip, problems, deadline):
        """A fresh child, leaving out each step that kills one (at most every step)."""
        for _ in range(len(steps) + 1):
            if time.monotonic() >= deadline:  # no step is to blame for the time spent before
                raise SubmissionFault("timeout", "the notebook's time limit ran out")
            try:
                return self._fresh_child(assignment, steps, skip, problems, deadline)
            except SubmissionFault:
                if time.monotonic() > deadline:
                    raise
        raise SubmissionFault("crash", "the student's code could not be loaded")

    def grade(self, assignment, path, student=""):
        started = time.monotonic()
        result = NotebookResult(student, assignment.name, assignment.notebook, "graded",
                                sandbox=self.zygote.sandbox)
        try:
            result.fingerprint = fingerprint(path, assignment)
            nb = read_submission(path, assignment, self.limits["notebook_file_bytes"])
            steps = plan(nb, assignment, self.transform, self.limits, result.problems)
            result.problems += duplicates(nb) + suspicious(steps, assignment.given)
            # which functions a solution calls: from its source, never from its process
            lost = forbids.verdicts(steps, assignment.forbids, assignment.given)
        except (SubmissionError, OSError, RecursionError, MemoryError) as error:
            # (anything but SubmissionError here is a notebook no check foresaw: it costs
            # that notebook only, with what went wrong)
            message = str(error) if isinstance(error, SubmissionError) else \
                f"{Path(path).name} could not be read: " + \
                _one_line(f"{type(error).__name__}: {error}")
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
                                                 deadline)
                outcome.output = self._run_test(test, child)
                outcome.status, outcome.points = "passed", test.points
                if test.grade_id in lost:  # right, but not written as the exercise asks
                    outcome.status, outcome.points = "failed", 0.0
                    outcome.message, outcome.output = lost[test.grade_id], ""
            except SubmissionFault as fault:
                outcome.status, outcome.message = fault.kind, _fault_text(fault, self.limits)
                self.zygote.kill()
                child = None
            except Exception as error:
                outcome.message = _failure_text(error)
            result.tests.append(outcome)
        self.zygote.kill()
        result.seconds = round(time.monotonic() - started, 3)
        return _cleaned(result)

    def _run_test(self, test, child):
        """Run one test cell here; returns what it printed, raises what it raised."""
        trusted = dict(self.trusted, **test.names)
        # names defined here (the checks, torch) never resolve in the student's process
        namespace = RemoteNamespace(child, trusted)
        printed = io.StringIO()
        code = compile(test.source, f"<test {test.grade_id}>", "exec")
        common = _course_checks()
        runtime = RemoteRuntime(child, common.LOCAL)
        # the limit is the test cell's, all its calls together (instructor_guide.md)
        child.test_deadline = time.monotonic() + self.limits["call_seconds"]
        try:
            with contextlib.redirect_stdout(printed), torch.random.fork_rng(), \
                    common.salted(self.salt), common.use_runtime(runtime):
                torch.manual_seed(0)
                exec(code, trusted, namespace)
        finally:
            child.test_deadline = None
            child.stdout.take()  # what the student's code printed in its calls: freed per test
        return printed.getvalue()


def fingerprint(path, assignment):
    """What a result was graded from: the submitted file (or its absence) and the chapter."""
    path = Path(path)
    if not path.is_file():
        digest = "missing"
    elif path.stat().st_size > LIMITS["notebook_file_bytes"]:  # refused unread: its size
        info = path.stat()                                   # and time say if it changed
        digest = f"over the limit: {info.st_size} bytes, {info.st_mtime_ns}"
    else:
        digest = file_sha256(path)
    return hashlib.sha256(f"{digest} {assignment.fingerprint}".encode()).hexdigest()


def _cleaned(result):
    """The result with every text encodable and printable (a student's message may hold
    lone surrogates, which no CSV, gradebook or HTML page could be written with, and escape
    sequences, which would rewrite the terminal that prints it): engine.printable."""
    result.error = printable(result.error)
    for test in result.tests:
        test.message, test.output = printable(test.message), printable(test.output)
    result.problems = [{k: printable(v) for k, v in p.items()} for p in result.problems]
    return result


def _fault_text(fault, limits):
    if fault.kind == "timeout":
        return (f"Timed out: {fault.message}. Each test may take {limits['call_seconds']} s "
                f"and the notebook {limits['notebook_seconds']} s.")
    if fault.kind == "crash":
        return f"Your code crashed the grader's process for it: {fault.message}."
    return f"Your code broke the grader's protocol: {fault.message}."


def trusted_namespace():
    """Globals for running test cells: torch, and (per test) the course's own checks."""
    import math

    import torch.nn as nn
    import torch.nn.functional as F

    return {"torch": torch, "nn": nn, "F": F, "math": math, "__builtins__": __builtins__}
