"""The catalogue of submissions: alternative correct solutions and classic bugs.

Each chapter module (named like its checks module: attention, heads, mha, masks,
diversity) defines
    NOTEBOOK = "01_attention"                      # chapters/<NOTEBOOK>.ipynb
    CORRECT  = {name: {solution_grade_id: code}}   # must get full marks
    BUGS     = {name: Bug(...)}                    # must lose exactly the named tests
A submission is the chapter's student notebook with every solution cell filled in: with
the code given here for the named cells, with the reference solution for the others, so
that a bug costs only the points of the tests that exercise it.
"""
import copy
import importlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from autograde.kit import SOLUTION as SOLUTION_BLOCK, solution_code
from autograde.notebook import parse  # the grader's parse: one lock (tests grade in threads)


@dataclass
class Bug:
    cells: dict                 # solution grade_id -> code of the buggy submission
    fails: list                 # grade_ids of the test cells that must fail
    diagnosis: str = ""         # regex the first failing test cell's message must match
    notes: str = field(default="")


def edit(base, old, new):
    """`base` with `old` replaced by `new`, which must occur exactly once: a student's version
    of a cell, written as a change to a correct one."""
    assert base.count(old) == 1, f"{old!r} occurs {base.count(old)} times"
    return base.replace(old, new)


# The message a check gives when no catalogued mistake matches the output (common.expect_close:
# "<name> is wrong (largest error X). <hint>"): it says that the result is wrong, not which
# mistake made it.
GENERIC = re.compile(r"is wrong \(largest error")


def names(bug, message):
    """True when `message` (of the first test cell `bug` fails) names the mistake: it matches
    the bug's diagnosis and is not the generic "is wrong (largest error ...)" message. The one
    definition of a named bug (tests/test_catalogue.py counts them for README.md)."""
    return bool(bug.diagnosis) and bool(re.search(bug.diagnosis, message, re.S)) \
        and not GENERIC.search(message)


def named_by_family(message):
    """True when `message` names a mistake through one of the families of
    chapters/checks/diagnose.py (its shape: layout, constant, shift, one step of the formula,
    ...), not through an entry of a per-bug table: what the families alone achieve, measured
    with the tables switched off (tests/test_catalogue.py)."""
    from chapters.checks.diagnose import FAMILY_PATTERN
    return bool(FAMILY_PATTERN.search(message or "")) and not GENERIC.search(message or "")


def grade_id(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def reference_code(cell_source):
    """The source cell with nbgrader's markers removed (what a perfect student writes)."""
    return solution_code(cell_source)


def reference_cells(source_nb):
    """{grade_id: reference code} of the solution cells of `source_nb`."""
    return {grade_id(c): reference_code("".join(c["source"]) if isinstance(c["source"], list)
                                        else c["source"])
            for c in source_nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


class ReferenceCells:
    """The reference code of the solution cells of chapters/<notebook>.ipynb, and a
    student's versions of them written as edits (a chapter's catalogue writes most bugs as
    one edit of a reference cell; an edit that does not apply is refused)."""

    def __init__(self, notebook):
        path = Path(__file__).resolve().parents[2] / "chapters" / f"{notebook}.ipynb"
        self.code = reference_cells(json.loads(path.read_text()))

    def edit(self, cell, *pairs):
        """{cell: the reference code of `cell` with each (old, new) of `pairs` replaced once}."""
        code = self.code[cell]
        for old, new in pairs:
            code = edit(code, old, new)
        return {cell: code}

    def replaced(self, cell, old, new):
        """The reference code of `cell` with `old` (which must occur once) replaced by `new`."""
        return self.edit(cell, (old, new))[cell]

    def replace_def(self, cell, name, code):
        """The reference code of `cell` with its top-level definition `name` (a function or a
        class) replaced by `code`."""
        source = self.code[cell]
        node = next(n for n in parse(source).body if getattr(n, "name", None) == name)
        lines = source.splitlines(keepends=True)
        return "".join(lines[:node.lineno - 1]) + code + "".join(lines[node.end_lineno:])


def fill_submission(source_nb, student_nb, cells):
    """A copy of `student_nb` whose solution cells hold `cells[grade_id]` or the reference."""
    reference = reference_cells(source_nb)
    unknown = set(cells) - set(reference)
    if unknown:
        raise KeyError(f"no solution cells named {sorted(unknown)}; have {sorted(reference)}")
    submission = copy.deepcopy(student_nb)
    for cell in submission["cells"]:
        gid = grade_id(cell)
        if gid in reference:
            cell["source"] = cells.get(gid, reference[gid])
    return submission


def catalogue(assignment):
    """The catalogue module of chapter `assignment` ("01_attention" -> .attention), or None."""
    try:
        return importlib.import_module(f"tests.submissions.{assignment.split('_', 1)[1]}")
    except ModuleNotFoundError:
        return None


def catalogue_submissions(assignment, source_nb, student_nb, max_bugs=None, per_cell=None):
    """{student_id: (notebook, {test grade_id: expected to pass})}: the reference, the blank
    student version, every correct alternative and the first `max_bugs` bugs (all: None) of
    sample_bugs(bugs, per_cell) (per_cell None: every bug)."""
    tests = [grade_id(c) for c in source_nb["cells"]
             if c.get("metadata", {}).get("nbgrader", {}).get("grade")]
    subs = {
        "reference": (fill_submission(source_nb, student_nb, {}), dict.fromkeys(tests, True)),
        "blank": (student_nb, dict.fromkeys(tests, False)),
    }
    cat = catalogue(assignment)
    for name, cells in getattr(cat, "CORRECT", {}).items():
        subs[f"correct_{name}"] = (fill_submission(source_nb, student_nb, cells),
                                   dict.fromkeys(tests, True))
    for name, bug in list(sample_bugs(getattr(cat, "BUGS", {}), per_cell).items())[:max_bugs]:
        unknown = set(bug.fails) - set(tests)
        assert not unknown, f"{assignment} bug {name} names unknown tests {unknown}"
        subs[f"bug_{name}"] = (fill_submission(source_nb, student_nb, bug.cells),
                               {t: t not in bug.fails for t in tests})
    return subs


# The chapters that have a catalogue, found by its file (chapters/<NN_name>.ipynb and
# tests/submissions/<name>.py), in course order; found without importing them, so that one
# chapter's broken catalogue does not stop the others' tests.
_HERE = Path(__file__).resolve().parent
CHAPTERS = sorted(path.stem for path in (_HERE.parent.parent / "chapters").glob("[0-9][0-9]_*.ipynb")
                  if (_HERE / f"{path.stem.split('_', 1)[1]}.py").exists())


# Tests that run every submission through a second path (the student kit, other salts) take
# a sample of the bugs: for each test cell, PER_CELL of the bugs whose first listed failing
# cell it is, spread evenly over them in catalogue order (the first and the last included),
# so each check's diagnoses, old and new, are exercised without the cost growing with the
# catalogue. COURSE_ALL_SUBMISSIONS=1: every bug.
PER_CELL = None if os.environ.get("COURSE_ALL_SUBMISSIONS") == "1" else 4


def sample_bugs(bugs, per_cell=PER_CELL):
    """{name: bug} of `bugs` (catalogue order), at most `per_cell` for each first failing
    cell, spread evenly over that cell's bugs (per_cell None: all)."""
    if per_cell is None:
        return dict(bugs)
    by_cell = {}
    for name, bug in bugs.items():
        by_cell.setdefault(bug.fails[0] if bug.fails else None, []).append(name)
    keep = set()
    for names_ in by_cell.values():
        n = len(names_)
        keep.update(names_[round(k * (n - 1) / max(per_cell - 1, 1))]
                    for k in range(min(per_cell, n)))
    return {name: bug for name, bug in bugs.items() if name in keep}


def every_submission(assignments, per_cell=None):
    """(assignment, label, {grade_id: code}) of the reference ({}: every solution cell as
    written, label "reference"), each correct variant ("correct-<name>") and each bug
    ("bug-<name>") of every chapter's catalogue; per_cell: only sample_bugs()'s bugs."""
    for assignment in assignments:
        entries = catalogue(assignment)
        yield assignment, "reference", {}
        for name, cells in (entries.CORRECT if entries else {}).items():
            yield assignment, f"correct-{name}", cells
        for name, bug in sample_bugs(entries.BUGS if entries else {}, per_cell).items():
            yield assignment, f"bug-{name}", bug.cells


def replaced_in(notebook, cell, old, new):
    """{cell: the reference code of chapters/<notebook>.ipynb's solution cell `cell` with
    `old` (which must occur once) replaced by `new`}: one bug written as one edit."""
    return ReferenceCells(notebook).edit(cell, (old, new))
