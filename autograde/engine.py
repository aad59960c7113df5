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
import re
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from autograde.remote import RemoteNamespace, SubmissionFault

LIMITS = {
    "call_seconds": 60,         # one test cell, or one cell of the student's code
    "notebook_seconds": 300,    # everything for one notebook
    "memory_bytes": 2 * 2**30,  # address space on top of what the warm process holds
    "output_bytes": 64 * 2**20,  # one reply from the student's process
    "print_chars": 20_000,      # what the student's prints may fill
    "file_bytes": 64 * 2**20,   # any file the student's code writes (scratch only)
    "processes": 64,            # processes and threads, where a uid of its own allows
    "notebook_file_bytes": 20 * 2**20,  # the submitted .ipynb itself
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
        return cls(path.stem, path.stem, solution_ids, tests, kernel,
                   fingerprint=hashlib.sha256(raw).hexdigest())


def _check_imports(nb):
    """{alias: module} for the source notebook's `from checks import X as alias` lines."""
    import importlib
    import sys

    from autograde.course import CHAPTERS
    if str(CHAPTERS) not in sys.path:  # the course's own checks, never a submitted copy
        sys.path.insert(0, str(CHAPTERS))
    names = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        for line in "".join(cell["source"]).splitlines():
            try:
                tree = ast.parse(line.strip())
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, ast.ImportFrom) and node.module == "checks":
                    for alias in node.names:
                        names[alias.asname or alias.name] = importlib.import_module(
                            f"checks.{alias.name}")
    return names


def read_submission(path, assignment, max_bytes=LIMITS["notebook_file_bytes"]):
    """The student's notebook as a dict, or SubmissionError saying plainly what is wrong."""
    path = Path(path)
    if not path.exists():
        raise SubmissionError(f"no notebook named {path.name} was submitted")
    size = path.stat().st_size
    if size == 0:
        raise SubmissionError(f"{path.name} is empty (0 bytes)")
    if size > max_bytes:
        raise SubmissionError(f"{path.name} is {size / 2**20:.0f} MB, over the limit of "
                              f"{max_bytes / 2**20:.0f} MB: clear its outputs and submit again")
    try:
        nb = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as error:
        raise SubmissionError(f"{path.name} is not a notebook (not valid JSON: {error})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise SubmissionError(f"{path.name} is JSON but not a Jupyter notebook (no cell list)")
    if nb.get("nbformat") != 4:
        raise SubmissionError(f"{path.name} has nbformat {nb.get('nbformat')!r}; expected 4")
    kernel = (nb.get("metadata") or {}).get("kernelspec", {})
    if isinstance(kernel, dict) and kernel.get("language", "python") != "python":
        raise SubmissionError(f"{path.name} uses the {kernel.get('display_name') or kernel.get('name')}"
                              " kernel; the course's notebooks are Python")
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or not isinstance(cell.get("source", ""), (str, list)):
            raise SubmissionError(f"{path.name} has a malformed cell")
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
    return "".join(source) if isinstance(source, list) else source


def _solutions(nb):
    """{grade_id: source} of the student's solution cells (the first cell of each id)."""
    found = {}
    for cell in nb["cells"]:
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        if cell.get("cell_type") == "code" and meta.get("solution") and not meta.get("grade"):
            found.setdefault(str(meta.get("grade_id")), _source(cell))
    return found


_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _is_constant(node):
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def definitions(source, transform):
    """[(line, source)] of the imports, definitions and constant assignments of a cell."""
    try:
        tree = ast.parse(transform(source))
    except SyntaxError:
        return []
    kept = []
    for node in tree.body:
        if isinstance(node, _KEPT):
            kept.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None \
                and _is_constant(node.value):
            kept.append(node)
    return [(node.lineno, ast.unparse(node)) for node in kept]


def statements(source, transform):
    """[(first line, source)] of each top-level statement, padded to keep line numbers."""
    code = transform(source)
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return [(1, code)]  # run whole, so that the student sees Python's own message
    lines = code.splitlines()
    found = []
    for node in tree.body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        text = "\n".join(lines[first - 1:node.end_lineno])
        found.append((first, "\n" * (first - 1) + text))
    return found


def plan(nb, assignment, transform):
    """[(label, source, is_solution)] to run in the student's process, in notebook order."""
    wanted = set(assignment.solution_ids)
    steps, seen = [], set()
    for index, cell in enumerate(nb["cells"]):
        if cell.get("cell_type") != "code":
            continue
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        grade_id = str(meta.get("grade_id"))
        if meta.get("solution") and not meta.get("grade") and grade_id in wanted \
                and grade_id not in seen:
            seen.add(grade_id)
            # statement by statement: a line that needs a skipped demonstration's data
            # must not take the definitions after it down with it
            for line, statement in statements(_source(cell), transform):
                steps.append((f"cell {grade_id}, line {line}", statement, True))
        elif not meta.get("grade"):
            # one statement at a time, so that one failing import loses nothing else
            for line, statement in definitions(_source(cell), transform):
                steps.append((f"cell {index + 1}, line {line}", statement, False))
    return steps


# What a solution never needs and tampering does: the checks that judge it (patched in the
# student's process, they could be switched off), the grader's package, and the hooks
# under torch's function modes. Flagged for the instructor; scores do not depend on it.
SUSPICIOUS_MODULES = {"checks", "autograde"}
SUSPICIOUS_NAMES = {"__torch_function__", "TorchFunctionMode", "_pop_mode", "_push_mode",
                    "_pop_mode_temporarily", "DisableTorchFunction", "_DisableTorchFunction",
                    "DisableTorchFunctionSubclass", "_get_current_function_mode_stack",
                    "__code__", "modules"}


def suspicious(steps):
    """Problems ("suspicious") for each step whose code imports the checks or the grader,
    or reaches into torch's function modes, code objects or sys.modules. (The given cells
    import the checks: outside the solution cells that import is no sign.)"""
    found = []
    for label, source, is_solution in steps:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        reasons = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                reasons |= {f"imports {a.name}" for a in node.names
                            if a.name.split(".")[0] in SUSPICIOUS_MODULES}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.split(".")[0] in SUSPICIOUS_MODULES:
                reasons.add(f"imports {node.module}")
            elif isinstance(node, ast.Attribute) and node.attr in SUSPICIOUS_NAMES \
                    and not (node.attr == "modules" and not _is_name(node.value, "sys")):
                reasons.add(f"uses {ast.unparse(node)[:60]}")
            elif isinstance(node, ast.Name) and node.id in SUSPICIOUS_NAMES - {"modules"}:
                reasons.add(f"uses {node.id}")
        if not is_solution:
            reasons = {r for r in reasons if not re.match(r"imports checks\b", r)}
        if reasons:
            found.append({"cell": label, "kind": "suspicious",
                          "message": "; ".join(sorted(reasons)) + " (the checks run in the "
                          "grader: a solution needs none of this)"})
    return found


def _is_name(node, name):
    return isinstance(node, ast.Name) and node.id == name


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


def _failure_text(error):
    if isinstance(error, AssertionError) and type(error).__name__ == "CheckFailure":
        return str(error)
    text = f"{type(error).__name__}: {error}"
    student = getattr(error, "student_traceback", "")
    return text + (f"\nIn your code:\n{student}" if student else "")


class Grader:
    """Grades notebooks one at a time through a zygote (autograde.remote.Zygote)."""

    def __init__(self, zygote, checks_namespace, limits=None):
        self.zygote = zygote
        self.trusted = checks_namespace
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
                child.run(source, label, timeout=self.limits["call_seconds"])
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
            raw = Path(path).read_bytes() if Path(path).is_file() else b""
            result.fingerprint = hashlib.sha256(raw + assignment.fingerprint.encode()).hexdigest()
            nb = read_submission(path, assignment, self.limits["notebook_file_bytes"])
        except SubmissionError as error:
            result.status, result.error = "error", str(error)
            result.tests = [TestResult(t.grade_id, 0.0, t.points, "error", str(error))
                            for t in assignment.tests]
            return result
        steps = plan(nb, assignment, self.transform)
        result.problems += suspicious(steps)
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
            except SubmissionFault as fault:
                outcome.status, outcome.message = fault.kind, _fault_text(fault, self.limits)
                self.zygote.kill()
                child = None
            except Exception as error:
                outcome.message = _failure_text(error)
            result.tests.append(outcome)
        self.zygote.kill()
        result.seconds = round(time.monotonic() - started, 3)
        return result

    def _run_test(self, test, child):
        """Run one test cell here; returns what it printed, raises what it raised."""
        trusted = dict(self.trusted, **test.names)
        # names defined here (the checks, torch) never resolve in the student's process
        namespace = RemoteNamespace(child, trusted)
        printed = io.StringIO()
        code = compile(test.source, f"<test {test.grade_id}>", "exec")
        with contextlib.redirect_stdout(printed), torch.random.fork_rng():
            torch.manual_seed(0)
            exec(code, trusted, namespace)
        return printed.getvalue()


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
