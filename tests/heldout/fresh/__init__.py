"""The second held-out set (issue 20 item 2): chapters 1-5, written fresh on 2026-11-26.

Written by an outside tester who read each exercise's text and reference solution, the
catalogue (tests/submissions/) and the first held-out set (tests/heldout/<topic>.py) to
avoid their mistakes, and never read chapters/checks/: every mistake and its `diagnosis`
regex was written before it was run, and before any check change meant for it. Same format
as the first set (NOTEBOOK, CORRECT, BUGS with tests.heldout.Bug); graded by the same tests
(tests/test_heldout.py), with its own README table (`heldout-fresh-named`).

As for the first set: no check is ever tuned on this folder and no per-bug entry is added
for its mistakes; a mistake met here that a check should name is copied into
tests/submissions/ and named from there.
"""
import importlib
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_CHAPTERS_DIR = _HERE.parents[2] / "chapters"

# The chapters of this set, in course order (chapters 1-5 only): those whose module exists.
CHAPTERS = sorted(path.stem for path in _CHAPTERS_DIR.glob("[0-9][0-9]_*.ipynb")
                  if (_HERE / f"{path.stem.split('_', 1)[1]}.py").exists())


def fresh(assignment):
    """The fresh held-out module of chapter `assignment` ("01_attention" -> .attention)."""
    return importlib.import_module(f"tests.heldout.fresh.{assignment.split('_', 1)[1]}")


# The diagnosis shared by every "changed its input in place" mistake of this set: a message
# that says the function changed its input. PyTorch's own "... used in an in-place
# operation" (autograd refusing a write) does not say that, so it does not count.
IN_PLACE = (r"(?i)in[- ]place(?! operation)|(changed|modifie[sd]|overwr\w*) (its|the|your|an?) "
            r"(input|argument|query|scores|lengths|mask|w)\b|(input|query|scores|lengths|mask|"
            r"argument)s? (was |were )?(changed|modified)")
# ... and by every "returns another dtype" mistake: a message that says the dtype is wrong
# (every message names dtypes, so "float32" alone is not enough).
DTYPE = (r"(?i)(expected|its|wrong|another|the input's) dtype|dtype (is|was) torch\.\w+ where|"
         r"dtype torch\.\w+ .{0,40}(where|instead|expected)")
