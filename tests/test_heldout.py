"""The held-out set (tests/heldout/, issue 20 item 2), graded with the catalogue's machinery:
each entry is executed into the chapter's namespace (kit.chapter_namespace) and every test
cell runs whole, hidden tests included (kit.run_visible_tests), as tests/test_catalogue.py
grades tests/submissions/.

- every CORRECT variant passes every test cell;
- every BUG loses the points of the cells in its `fails` (a check that grows stricter may
  fail more cells; one that stops failing a listed cell fails here); a bug marked "false
  pass" in its notes gets full marks today, and its test is a strict xfail that turns red
  when a check starts catching it (then drop the mark);
- the fraction of each chapter's held-out bugs whose message names them
  (tests.submissions.names, on the first listed cell the bug fails: test_catalogue's
  _first_failure) is the table of README.md between its `heldout-named` markers.

The second held-out set (tests/heldout/fresh/, chapters 1-5, written on 2026-11-26 by a tester
who did not read the checks) is graded by the same tests, and its named fraction is the
table between the `heldout-fresh-named` markers. So is the blind set (tests/blind/, every
chapter, written on 2026-11-27 by testers who read neither the checks nor their messages),
table `blind-named`.

No check may be tuned on this set: a mistake found here that a check should name is copied
into tests/submissions/, and the message is written for that copy.
"""
import functools
import json
import re
from pathlib import Path

import pytest
import torch

from autograde import kit
from tests.across_workers import made_once
from tests.heldout import CHAPTERS, heldout, is_false_pass, module, sets
from tests.heldout.fresh import CHAPTERS as FRESH_CHAPTERS
from tests.submissions import catalogue, names
from tests.test_catalogue import _first_failure, _notebook

REPO = Path(__file__).resolve().parent.parent

# Issue 20: at least 60 held-out mistakes, at least 8 per chapter, and 2 correct variants.
MIN_BUGS_PER_CHAPTER = 8
MIN_CORRECT_PER_CHAPTER = 2
MIN_BUGS = 60
ALL_CHAPTERS = sorted(path.stem for path in (REPO / "chapters").glob("[0-9][0-9]_*.ipynb"))
# The second set (issue 20 item 4): chapters 1-5, at least 13 mistakes and 2 correct variants
# written differently from the reference per chapter, at least 65 mistakes in all.
FRESH_MIN_BUGS_PER_CHAPTER = 13
FRESH_MIN_BUGS = 65
# The blind set (tests/blind/): every chapter, at least 10 mistakes and 2 correct variants each.
BLIND_MIN_BUGS_PER_CHAPTER = 10


def _graded(assignment, kind, name, set_name="heldout"):
    """{test grade_id: None, or the message of what it raised} of one held-out entry (kind:
    "CORRECT" or "BUGS") of held-out set `set_name`, every test cell run whole, from the
    torch seed each test starts from (conftest's _seed_torch): the same results whichever
    test grades it."""
    entry = getattr(module(set_name, assignment), kind)[name]
    cells = entry.cells if kind == "BUGS" else entry
    notebook = _notebook(assignment)
    torch.manual_seed(0)
    return kit.run_visible_tests(notebook, kit.chapter_namespace(notebook, cells), hidden=True)


# _graded once per process, for a caller outside pytest (measured_table() in a shell)
_graded_here = functools.lru_cache(maxsize=None)(_graded)


@pytest.fixture(scope="session")
def heldout_results(run_dir):
    """heldout_results(assignment, kind, name, set_name) -> _graded()'s results, computed
    once per test run by whichever worker asks first (tests/across_workers.py): the
    per-entry tests and the README tables read the same results (an lru_cache would grade
    again, in the table's worker, every entry another worker graded: 90 s of CPU)."""
    folder = run_dir / "heldout-results"
    folder.mkdir(exist_ok=True)

    def results(assignment, kind, name, set_name="heldout"):
        def grade(path):
            path.write_text(json.dumps(_graded(assignment, kind, name, set_name)))

        made = made_once(folder, f"{set_name}-{assignment}-{kind}-{name}", grade)
        return json.loads(made.read_text())
    return results


def _entries(kind):
    """(set, chapter, name) of every entry of `kind` of both held-out sets; the first set's
    ids are "<chapter>-<name>", the second's "fresh-<chapter>-<name>"."""
    for set_name, (chapters, module_of) in sets().items():
        prefix = "" if set_name == "heldout" else f"{set_name}-"
        for assignment in chapters:
            for name in getattr(module_of(assignment), kind):
                yield pytest.param(set_name, assignment, name, id=f"{prefix}{assignment}-{name}")


def test_every_chapter_has_its_held_out_set():
    """Each chapter of the course has a held-out module, big enough to measure."""
    assert CHAPTERS == ALL_CHAPTERS
    counts = {a: (len(heldout(a).BUGS), len(heldout(a).CORRECT)) for a in CHAPTERS}
    assert all(bugs >= MIN_BUGS_PER_CHAPTER and correct >= MIN_CORRECT_PER_CHAPTER
               for bugs, correct in counts.values()), counts
    assert sum(bugs for bugs, _ in counts.values()) >= MIN_BUGS, counts
    for assignment in CHAPTERS:
        assert heldout(assignment).NOTEBOOK == assignment


def test_the_second_set_covers_chapters_1_to_5():
    """The second held-out set: chapters 1-5, each with enough mistakes to measure and
    correct variants written differently from the reference."""
    assert FRESH_CHAPTERS == ALL_CHAPTERS[:5]
    counts = {a: (len(module("fresh", a).BUGS), len(module("fresh", a).CORRECT))
              for a in FRESH_CHAPTERS}
    assert all(bugs >= FRESH_MIN_BUGS_PER_CHAPTER and correct >= MIN_CORRECT_PER_CHAPTER
               for bugs, correct in counts.values()), counts
    assert sum(bugs for bugs, _ in counts.values()) >= FRESH_MIN_BUGS, counts
    for assignment in FRESH_CHAPTERS:
        assert module("fresh", assignment).NOTEBOOK == assignment


def test_the_blind_set_covers_every_chapter():
    """The blind set: every chapter, each with enough mistakes to measure and correct variants
    written differently from the reference."""
    from tests.blind import CHAPTERS as BLIND_CHAPTERS
    assert BLIND_CHAPTERS == ALL_CHAPTERS
    counts = {a: (len(module("blind", a).BUGS), len(module("blind", a).CORRECT))
              for a in BLIND_CHAPTERS}
    assert all(bugs >= BLIND_MIN_BUGS_PER_CHAPTER and correct >= MIN_CORRECT_PER_CHAPTER
               for bugs, correct in counts.values()), counts
    for assignment in BLIND_CHAPTERS:
        assert module("blind", assignment).NOTEBOOK == assignment


def _normalised(code):
    """`code` without comments and white space: two spellings of one edit compare equal."""
    return re.sub(r"\s+", "", re.sub(r"#[^\n]*", "", code))


def _codes(bugs):
    """{(solution cell, normalised code)} of `bugs`."""
    return {(cell, _normalised(code)) for bug in bugs.values() for cell, code in bug.cells.items()}


@pytest.mark.parametrize("set_name, assignment",
                         [(s, a) for s, (chapters, _) in sets().items() for a in chapters])
def test_held_out_mistakes_are_not_in_the_catalogue(set_name, assignment):
    """No held-out bug is a catalogued bug's code (the part of "new" a machine can check;
    that it is not the same mistake in other words was checked by reading), no bug of the
    second set is one of the first set's, and no bug of the blind set is one of either's."""
    known = _codes(catalogue(assignment).BUGS)
    if set_name != "heldout":
        known |= _codes(heldout(assignment).BUGS)
    if set_name == "blind" and assignment in FRESH_CHAPTERS:
        known |= _codes(module("fresh", assignment).BUGS)
    again = [name for name, bug in module(set_name, assignment).BUGS.items()
             if any((cell, _normalised(code)) in known for cell, code in bug.cells.items())]
    assert not again, f"{set_name} {assignment}: bugs already catalogued or held out: {again}"


@pytest.mark.parametrize("set_name, assignment, name", list(_entries("CORRECT")))
def test_correct_variant_gets_full_marks(heldout_results, set_name, assignment, name, capsys):
    results = heldout_results(assignment, "CORRECT", name, set_name)
    assert results, f"{assignment} has no test cells"
    assert results == dict.fromkeys(results), {t: m for t, m in results.items() if m}


@pytest.mark.parametrize("set_name, assignment, name", list(_entries("BUGS")))
def test_bug_loses_the_points_of_its_cells(heldout_results, set_name, assignment, name, request,
                                           capsys):
    bug = module(set_name, assignment).BUGS[name]
    assert bug.fails, f"{name} names no test cell it must fail"
    assert bug.diagnosis, f"{name} has no diagnosis"
    if is_false_pass(bug):
        request.applymarker(pytest.mark.xfail(strict=True, reason=bug.notes))
    results = heldout_results(assignment, "BUGS", name, set_name)
    unknown = set(bug.fails) - set(results)
    assert not unknown, f"{name} names test cells the notebook lacks: {sorted(unknown)}"
    kept = {t for t in bug.fails if results[t] is None}
    assert not kept, f"{name} kept the points of {sorted(kept)}"


def _named(assignment, name, set_name="heldout", graded=_graded_here):
    """True when the first listed cell that `name` fails names the mistake (graded: what
    grades an entry, _graded()'s arguments)."""
    bug = module(set_name, assignment).BUGS[name]
    results = graded(assignment, "BUGS", name, set_name)
    if all(results.get(t) is None for t in bug.fails):
        return False  # a false pass: no message at all
    return names(bug, _first_failure(assignment, bug, results)[1])


# ------------------------------------------------------------------ the named fraction
README = REPO / "README.md"
TABLE = re.compile(r"<!-- heldout-named -->\n(.*?)<!-- /heldout-named -->", re.S)
FRESH_TABLE = re.compile(r"<!-- heldout-fresh-named -->\n(.*?)<!-- /heldout-fresh-named -->", re.S)
BLIND_TABLE = re.compile(r"<!-- blind-named -->\n(.*?)<!-- /blind-named -->", re.S)
ROW = re.compile(r"^\| *(\d\d_\w+|all) *\| *(\d+) *\| *(\d+) *\| *(\d+)% *\|", re.M)


def heldout_table(table=TABLE):
    """{chapter or "all": (named, held-out bugs, percent)} of the README's table (`table`:
    TABLE for the first held-out set, FRESH_TABLE for the second, BLIND_TABLE for the blind
    set)."""
    return {a: (int(n), int(total), int(percent)) for a, n, total, percent in ROW.findall(
        table.search(README.read_text()).group(1))}


def measured_table(assignments=CHAPTERS, set_name="heldout", graded=_graded_here):
    """{chapter: (named, held-out bugs, percent)}, and "all" over every chapter (graded: as
    _named's)."""
    measured = {}
    for assignment in assignments:
        bugs = module(set_name, assignment).BUGS
        named = sum(_named(assignment, name, set_name, graded) for name in bugs)
        measured[assignment] = (named, len(bugs))
    total = tuple(map(sum, zip(*measured.values())))
    measured["all"] = total
    return {a: (n, t, round(100 * n / max(t, 1))) for a, (n, t) in measured.items()}


def test_readme_table_gives_each_chapters_named_held_out_bugs(heldout_results, capsys):
    measured = measured_table(graded=heldout_results)
    rows = "\n".join(f"| {a} | {n} | {t} | {p}% |" for a, (n, t, p) in measured.items())
    assert heldout_table() == measured, f"README.md's heldout-named table should read:\n{rows}"


def test_readme_table_gives_the_second_sets_named_bugs(heldout_results, capsys):
    measured = measured_table(FRESH_CHAPTERS, "fresh", heldout_results)
    rows = "\n".join(f"| {a} | {n} | {t} | {p}% |" for a, (n, t, p) in measured.items())
    assert heldout_table(FRESH_TABLE) == measured, \
        f"README.md's heldout-fresh-named table should read:\n{rows}"


def test_readme_table_gives_the_blind_sets_named_bugs(heldout_results, capsys):
    from tests.blind import CHAPTERS as BLIND_CHAPTERS
    assert BLIND_CHAPTERS == ALL_CHAPTERS, "the blind set covers every chapter"
    measured = measured_table(BLIND_CHAPTERS, "blind", heldout_results)
    rows = "\n".join(f"| {a} | {n} | {t} | {p}% |" for a, (n, t, p) in measured.items())
    assert heldout_table(BLIND_TABLE) == measured, \
        f"README.md's blind-named table should read:\n{rows}"
