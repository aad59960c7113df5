"""The catalogue of every chapter (tests/submissions/<module>.py), graded as the grader runs
the test cells: each submission is executed into the chapter's namespace (its given cells'
definitions, its solution cells with the submission's code in place of the reference;
tests/chapter.py) and then every test cell runs whole, hidden tests included (the
chapter_results fixture of tests/conftest.py: once per test run).

- every CORRECT (and MORE_CORRECT) submission passes every test cell;
- every BUG fails exactly the test cells in its `fails`, and the message of the first of them
  in the notebook's order matches its `diagnosis`: the visible part's message when the
  visible part fails, else the hidden part's (a cell stops at its first failure), so a bug
  only the hidden tests catch is catalogued like any other;
- the fraction of each chapter's bugs whose message names them (tests.submissions.names)
  is the table of README.md between its `named-bugs` markers.

Chapter modules are found by their files: a new chapter's catalogue needs no edit here.
"""
import re
from pathlib import Path

import pytest

from autograde import course
from tests.chapter import Chapter, checks_module
from tests.submissions import CHAPTERS, catalogue, named_by_family, names

REPO = Path(__file__).resolve().parent.parent


def _notebook(assignment):
    return course.CHAPTERS / f"{assignment}.ipynb"


def _results(chapter_results, assignment, kind, name):
    """{test grade_id: None, or the message of what it raised} of one catalogue entry (kind:
    "CORRECT", "MORE_CORRECT" or "BUGS"), every test cell run whole; computed once per test
    run (the table of named bugs reads the same results)."""
    entry = getattr(catalogue(assignment), kind)[name]
    return chapter_results(assignment, entry.cells if kind == "BUGS" else entry)


def _importable(assignment):
    try:
        catalogue(assignment)
    except Exception:  # noqa: BLE001 - test_catalogue_imports reports it
        return False
    return True


def _entries(kind):
    for assignment in filter(_importable, CHAPTERS):
        for name in getattr(catalogue(assignment), kind, {}):
            yield pytest.param(assignment, kind, name, id=f"{assignment}-{name}")


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_catalogue_imports(assignment):
    """Each catalogue imports and names its notebook (a broken one fails here, alone)."""
    assert catalogue(assignment).NOTEBOOK == assignment


@pytest.mark.parametrize("assignment, kind, name",
                         list(_entries("CORRECT")) + list(_entries("MORE_CORRECT")))
def test_correct_submission_passes_every_test_cell(chapter_results, assignment, kind, name,
                                                   capsys):
    results = _results(chapter_results, assignment, kind, name)
    assert results, f"{assignment} has no test cells"
    assert results == dict.fromkeys(results), {t: m for t, m in results.items() if m}


def _first_failure(assignment, bug, results):
    """The first cell of `bug.fails` in the notebook's order, and its message."""
    first = next(t for t in results if t in bug.fails)
    return first, results[first]


@pytest.mark.parametrize("assignment, kind, name", list(_entries("BUGS")))
def test_bug_fails_its_cells_with_its_diagnosis(chapter_results, assignment, kind, name,
                                                capsys):
    bug = catalogue(assignment).BUGS[name]
    results = _results(chapter_results, assignment, kind, name)
    unknown = set(bug.fails) - set(results)
    assert not unknown, f"{name} names test cells the notebook lacks: {sorted(unknown)}"
    failed = {t for t, message in results.items() if message is not None}
    assert failed == set(bug.fails), {t: results[t] for t in failed ^ set(bug.fails)}
    first, message = _first_failure(assignment, bug, results)
    assert bug.diagnosis, f"{name} has no diagnosis"
    assert re.search(bug.diagnosis, message, re.S), f"{first}: {message}"


def test_every_chapter_with_a_catalogue_is_found():
    """Each tests/submissions/<module>.py is the catalogue of one notebook, and found."""
    modules = sorted(p.stem for p in (REPO / "tests" / "submissions").glob("*.py")
                     if p.stem != "__init__")
    assert sorted(catalogue(a).__name__.rsplit(".", 1)[1] for a in CHAPTERS) == modules
    for assignment in CHAPTERS:
        assert _notebook(assignment).exists(), assignment


# ------------------------------------------------------------------ the named fraction
README = REPO / "README.md"
TABLE = re.compile(r"<!-- named-bugs -->\n(.*?)<!-- /named-bugs -->", re.S)
ROW = re.compile(r"^\| *(\d\d_\w+) *\| *(\d+) *\| *(\d+) *\| *(\d+)% *\|"
                 r" *(\d+) \((\d+)%\) *\|", re.M)


def named_table():
    """{assignment: (named, catalogued, percent)} of the README's table."""
    return {a: (int(n), int(total), int(percent)) for a, n, total, percent, _, _ in ROW.findall(
        TABLE.search(README.read_text()).group(1))}


def family_column():
    """{assignment: (named by the families alone, percent)} of the README's table."""
    return {a: (int(n), int(percent)) for a, _, _, _, n, percent in ROW.findall(
        TABLE.search(README.read_text()).group(1))}


def test_readme_table_gives_each_chapters_named_bugs(chapter_results):
    measured = {}
    for assignment in CHAPTERS:  # (a catalogue that does not import fails here too)
        bugs = catalogue(assignment).BUGS
        named = 0
        for name, bug in bugs.items():
            results = _results(chapter_results, assignment, "BUGS", name)
            if any(m is not None for m in results.values()):
                named += names(bug, _first_failure(assignment, bug, results)[1])
        measured[assignment] = (named, len(bugs), round(100 * named / max(len(bugs), 1)))
    rows = "\n".join(f"| {a} | {n} | {t} | {p}% |" for a, (n, t, p) in measured.items())
    assert named_table() == measured, f"README.md's named-bugs table should read:\n{rows}"


def _results_without_tables(grading, assignment, name):
    """_results() of a bug with the per-bug tables switched off (checks.common.TABLES, the
    flag COURSE_BUG_TABLES=off sets): only the families of checks/diagnose.py name it.
    grading: the bug's chapter_gradings() (tables on); one that consulted no non-empty table
    gives its own results (the same with the tables off), else the bug is graded again as
    chapter_gradings grades (tests/chapter.py's Chapter.graded), the tables off."""
    if not grading["tables"]:
        return grading["results"]
    common = checks_module("common")
    saved, common.TABLES = common.TABLES, False
    try:
        return Chapter(assignment).graded(catalogue(assignment).BUGS[name].cells)["results"]
    finally:
        common.TABLES = saved


# issue 20: the families alone name at least this share of every chapter's catalogue
FAMILIES_TARGET = 75


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_readme_table_gives_what_the_families_alone_name(chapter_gradings, assignment):
    """The column "Families alone", one chapter's row: the catalogued bugs that the first
    test cell they fail names through a family of checks/diagnose.py
    (tests.submissions.named_by_family) with the per-bug tables switched off. (The issue's
    target: 75% of every chapter.)

    Each catalogued bug's grading of the run (chapter_gradings, the tables on), graded once
    more with the tables off only where it consulted a non-empty table (only a run tells
    which messages a table still decides)."""
    bugs = catalogue(assignment).BUGS
    named = 0
    for name, bug in bugs.items():
        results = _results_without_tables(chapter_gradings(assignment, bug.cells), assignment,
                                          name)
        if any(results[t] is not None for t in bug.fails if t in results):
            named += named_by_family(_first_failure(assignment, bug, results)[1])
    measured = (named, round(100 * named / max(len(bugs), 1)))
    assert family_column().get(assignment) == measured, (
        f"README.md's named-bugs table, column Families alone, should read for {assignment}: "
        f"{measured[0]} ({measured[1]}%)")
    assert measured[1] >= FAMILIES_TARGET, (
        f"the families alone name less than {FAMILIES_TARGET}% of {assignment}: {measured}")


def test_a_grading_that_consults_a_table_is_graded_again_without_it(monkeypatch):
    """The column "Families alone" reuses a bug's grading only where it consulted no table:
    06_kv's count_kv_as_mha, named by a table of kv's counts (put in here: their tables are
    empty), is graded again with the tables off, and gets what it gets with no table."""
    kv, chapter = checks_module("kv"), Chapter("06_kv")
    bug = catalogue("06_kv").BUGS["count_kv_as_mha"]
    plain = chapter.graded(bug.cells)
    assert plain["tables"] == 0
    assert _results_without_tables(plain, "06_kv", "count_kv_as_mha") is plain["results"]

    tabled_message, answers = "a table's name of the mistake", kv._count_answers
    counted = chapter.namespace(bug.cells)["count_gqa_parameters"]
    monkeypatch.setattr(kv, "_count_answers", lambda configs: [
        (expected, {tabled_message: counted(d, h, g, bias=bias)})
        for (d, h, g, bias), (expected, _) in zip(configs, answers(configs))])
    tabled = chapter.graded(bug.cells)
    assert tabled["tables"] > 0
    assert tabled_message in tabled["results"]["test_count_gqa_parameters"]
    assert _results_without_tables(tabled, "06_kv", "count_kv_as_mha") == plain["results"]


# ------------------------------------------------------------------ the float32 sqrt(d_k) rule
# common.py's one rule: every chapter whose checks compute a scaled score names a float32
# sqrt(d_k) constant in its float64 tests (at a d_k whose root float32 cannot hold). Chapter 5's
# exercises compute no scores (its model is given), nor do chapters 6 to 8's catalogues count
# here: their owners list them when their checks compute a scaled score of the student's.
SCALED_SCORE_CHAPTERS = ["01_attention", "02_heads", "03_mha", "04_masks"]


@pytest.mark.parametrize("assignment", SCALED_SCORE_CHAPTERS)
def test_float32_sqrt_constant_is_catalogued_and_named(chapter_results, assignment, capsys):
    FLOAT32_SQRT = checks_module("common").FLOAT32_SQRT
    bugs = catalogue(assignment).BUGS
    named = [name for name, bug in bugs.items() if "dtype=torch.float32))" in str(bug.cells)
             and FLOAT32_SQRT in _first_failure(
                 assignment, bug, _results(chapter_results, assignment, "BUGS", name))[1]]
    assert named, f"{assignment}: no catalogued float32 sqrt(d_k) constant named by the checks"
