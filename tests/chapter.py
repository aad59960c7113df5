"""The one harness of the checks' tests (tests/test_checks_*.py): a chapter notebook's cells,
the namespace its test cells see, and those test cells run in it, as the grader runs them.

    chapter = Chapter("01_attention")
    chapter.solutions            {solution grade_id: reference code (nbgrader's markers removed)}
    chapter.tests                {test grade_id: the test cell's code, hidden tests included}
    ns = chapter.namespace({"stable_softmax": code}, attention_scores=function)
    chapter.run_tests(ns)        {test grade_id: None if it passed, else what it raised}

The namespace is autograde.kit.chapter_namespace's (the given cells' imports, definitions and
constants, then the solution cells with a submission's code in place of the reference), so
a test here sees what the grader and tests/test_catalogue.py see. The checks modules are
imported once, here, the way the notebooks import them (`from checks import attention`).
"""
import functools
import importlib
import json
import re
import sys

import torch

from autograde import course, kit

if str(course.CHAPTERS) not in sys.path:  # the grader's checks, as the notebooks import them
    sys.path.insert(0, str(course.CHAPTERS))


def checks_module(name):
    """The checks module `name` (common, attention, ...) as the notebooks import it."""
    return importlib.import_module(f"checks.{name}")


CheckFailure = checks_module("common").CheckFailure


def _source(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _nbgrader(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


# a solution block and the indentation of its first marker (kept by nbgrader's stub)
_SOLUTION_WITH_INDENT = re.compile(r"([ \t]*)### BEGIN SOLUTION\n.*?[ \t]*### END SOLUTION\n?",
                                   re.S)


def failure_message(error):
    """What a test cell that raised `error` reports (autograde.kit.run_visible_tests's form)."""
    return f"{type(error).__name__}: {error}"


class Chapter:
    """The cells of chapters/<assignment>.ipynb, and its test cells run against a namespace."""

    def __init__(self, assignment):
        self.assignment = assignment
        self.path = course.CHAPTERS / f"{assignment}.ipynb"
        self.notebook = json.loads(self.path.read_text())
        self.code_cells = [c for c in self.notebook["cells"] if c["cell_type"] == "code"]
        # {grade_id: source} of the solution cells, nbgrader's markers kept
        self.raw_solutions = {_nbgrader(c)["grade_id"]: _source(c) for c in self.code_cells
                              if _nbgrader(c).get("solution")}
        self.solutions = {gid: kit.solution_code(source)
                          for gid, source in self.raw_solutions.items()}
        self.tests = {_nbgrader(c)["grade_id"]: _source(c) for c in self.code_cells
                      if _nbgrader(c).get("grade")}
        self.points = sum(_nbgrader(c)["points"] for c in self.code_cells
                          if _nbgrader(c).get("grade"))

    @functools.cached_property
    def check(self):
        """The checks module the notebook binds to `check` (`from checks import X as check`)."""
        return self.namespace()["check"]

    def blank(self):
        """{grade_id: code} of the solution cells as nbgrader's generate_assignment leaves
        them: each solution block replaced by a stub that raises NotImplementedError."""
        stub = r"\1# YOUR CODE HERE\n\1raise NotImplementedError()\n"
        return {gid: _SOLUTION_WITH_INDENT.sub(stub, source)
                for gid, source in self.raw_solutions.items()}

    def namespace(self, cells=None, **replaced):
        """The names the test cells see: the given cells' definitions and the solution cells,
        `cells` ({grade_id: code}) in place of the reference's, then `replaced` (name: object)
        bound over them."""
        unknown = set(cells or {}) - set(self.solutions)
        assert not unknown, f"{self.assignment} has no solution cells named {sorted(unknown)}"
        namespace = kit.chapter_namespace(self.path, cells)
        namespace.update(replaced)
        return namespace

    def run(self, test, namespace, hidden=True):
        """None if test cell `test` (a grade_id, or a cell's code) passes in a copy of
        `namespace`, else the message of what it raised; hidden=False: its visible part."""
        source = self.tests.get(test, test)
        try:
            exec(compile(source if hidden else kit.visible_part(source),
                         f"{self.path.name} {test if test in self.tests else 'cell'}", "exec"),
                 dict(namespace))
        except Exception as error:  # noqa: BLE001 - any exception fails the cell, as in nbgrader
            return failure_message(error)
        return None

    def run_tests(self, namespace, hidden=True):
        """{test grade_id: None, or the message of what it raised} of every test cell, in the
        notebook's order; hidden=False: their visible parts only."""
        return {gid: self.run(gid, namespace, hidden) for gid in self.tests}

    def graded(self, cells=None):
        """{"results": run_tests()'s of namespace(cells), hidden tests included, from torch
        seed 0 (the same results whichever test grades them), "tables": how many non-empty
        per-bug tables the checks consulted (checks.common.TABLES_CONSULTED): with none, the
        tables switched off give the same results}."""
        common = checks_module("common")
        before = common.TABLES_CONSULTED
        torch.manual_seed(0)
        results = self.run_tests(self.namespace(cells))
        return {"results": results, "tables": common.TABLES_CONSULTED - before}


HIDDEN_MARKER = "### BEGIN HIDDEN TESTS"


def imports_solutions(checks_name):
    """True when chapters/checks/<checks_name>.py imports the reference package."""
    text = (course.CHAPTERS / "checks" / f"{checks_name}.py").read_text()
    return "solutions" in re.findall(r"^\s*(?:from|import)\s+(\w+)", text, re.M)
