"""The held-out set: mistakes and correct variants that no check was written for.

Issue 20 (item 2) measures how well the checks name mistakes nobody catalogued. This
package is that measure: each chapter module (named like tests/submissions/, in the same
format: NOTEBOOK, CORRECT = {name: {solution grade_id: code}}, BUGS = {name: Bug(...)}) holds
mistakes written before any check change meant to catch them, each checked absent from
tests/submissions/<module>.py. No check is ever tuned on this folder and no per-bug entry
is added for its mistakes: a mistake met here that a check should name is copied into
tests/submissions/, never named from here.

A Bug's `fails` are the test cells it must lose; its `diagnosis` is a regex that a message
naming the mistake in the exercise's terms would match (tests.submissions.names decides).
A Bug whose notes start with "false pass" gets full marks from today's checks: its `fails`
names the cell that should catch it, and tests/test_heldout.py expects that cell to fail
(strict xfail) until a check catches it.
"""
import importlib
import json
from pathlib import Path

from tests.submissions import Bug, edit, grade_id, reference_code  # noqa: F401 - the format

_CHAPTERS_DIR = Path(__file__).resolve().parents[2] / "chapters"

FALSE_PASS = "false pass"


def reference(notebook, cell):
    """The reference code of solution cell `cell` of chapters/<notebook>.ipynb (what a
    perfect student writes), to write a mistake as an edit of it."""
    cells = json.loads((_CHAPTERS_DIR / f"{notebook}.ipynb").read_text())["cells"]
    source = next("".join(c["source"]) for c in cells
                  if c.get("metadata", {}).get("nbgrader", {}).get("solution")
                  and grade_id(c) == cell)
    return reference_code(source)


def is_false_pass(bug):
    """True when today's checks give `bug` full marks (its notes say so)."""
    return bug.notes.startswith(FALSE_PASS)


# The chapters of the held-out set, in course order: (notebook, module).
_HERE = Path(__file__).resolve().parent
CHAPTERS = sorted(path.stem for path in _CHAPTERS_DIR.glob("[0-9][0-9]_*.ipynb")
                  if (_HERE / f"{path.stem.split('_', 1)[1]}.py").exists())


def heldout(assignment):
    """The held-out module of chapter `assignment` ("01_attention" -> .attention)."""
    return importlib.import_module(f"tests.heldout.{assignment.split('_', 1)[1]}")


# The sets graded as this one is: the first held-out set (tests/heldout/<topic>.py, every
# chapter), the second (tests/heldout/fresh/, chapters 1-5, written 2026-11-26 by a tester who
# did not read the checks) and the blind set (tests/blind/, every chapter, written 2026-11-27
# by testers who read neither the checks nor their messages; not held out: it may be read once
# measured). {name: (its chapters, the function that gives a chapter's module)}.
def sets():
    from tests import blind
    from tests.heldout import fresh
    return {"heldout": (CHAPTERS, heldout), "fresh": (fresh.CHAPTERS, fresh.fresh),
            "blind": (blind.CHAPTERS, blind.blind)}


def module(set_name, assignment):
    """The module of chapter `assignment` in held-out set `set_name` ("heldout", "fresh")."""
    return sets()[set_name][1](assignment)
