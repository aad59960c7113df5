"""The blind set (issue 20): mistakes written by testers who never read the checks' code or
messages, for every chapter (2026-11-27).

Written, like the second held-out set (tests/heldout/fresh/), from each exercise's text and
reference solution alone: every mistake and its `diagnosis` regex (what a teacher would say,
in the exercise's words) was committed before it was run, and no regex was changed after its
message was seen. Unlike the held-out sets it was not written to stay unread: it measures the
checks on a tester's words first (its table in README.md, `blind-named`), and may then be
read to learn which of the families' sentences fail a reader who did not write them.
Same format as the held-out sets (NOTEBOOK, CORRECT, BUGS with tests.heldout.Bug), graded by
tests/test_heldout.py.
"""
import importlib
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_CHAPTERS_DIR = _HERE.parents[1] / "chapters"

# The chapters of this set, in course order: those whose module exists.
CHAPTERS = sorted(path.stem for path in _CHAPTERS_DIR.glob("[0-9][0-9]_*.ipynb")
                  if (_HERE / f"{path.stem.split('_', 1)[1]}.py").exists())


def blind(assignment):
    """The blind set's module of chapter `assignment` ("01_attention" -> .attention)."""
    return importlib.import_module(f"tests.blind.{assignment.split('_', 1)[1]}")
