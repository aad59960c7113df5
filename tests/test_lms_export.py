"""`python -m autograde export --to canvas|moodle|csv`: golden files written from each
platform's documented import format (tests/golden/), from a real nbgrader gradebook."""
import csv
import json
from pathlib import Path

import pytest

from autograde import __main__ as cli
from autograde.results import NotebookResult
from autograde.lms_export import ExportError, export, spreadsheet_safe

GOLDEN = Path(__file__).parent / "golden"
ROSTER = """student_id,name,sortable_name,canvas_user_id,sis_user_id,sis_login_id,section,email
ada,Ada Lovelace,"Lovelace, Ada",1001,S-001,ada@uni.example,Section A,ada@uni.example
alan,Alan Turing,"Turing, Alan",1002,S-002,alan@uni.example,Section A,alan@uni.example
emmy,Emmy Noether,"Noether, Emmy",1003,S-003,emmy@uni.example,"=HYPERLINK(""http://x.example"")",emmy@uni.example
grace,-Grace Hopper,"Hopper, Grace",1004,S-004,grace@uni.example,@SUM(1+1),grace@uni.example
"""
# (student, assignment): {test cell: points}; late penalty of ada's 01_attention: 1 point
GRADED = {("ada", "01_attention"): {"test_a": 4, "test_b": 2.5},
          ("alan", "01_attention"): {"test_a": 4, "test_b": 6},
          ("alan", "02_heads"): {"test_c": 3},
          ("grace", "01_attention"): {"test_a": 0, "test_b": 0},  # could not be graded
          ("grace", "02_heads"): {"test_c": 0},
          ("eve", "01_attention"): {"test_a": 4, "test_b": 6}}   # not on the roster
CELLS = {"01_attention": {"test_a": 4, "test_b": 6}, "02_heads": {"test_c": 12}}


@pytest.fixture
def course(tmp_path):
    """A course directory whose gradebook.db nbgrader's own API filled as grading does."""
    from nbgrader.api import Gradebook
    (tmp_path / "roster.csv").write_text(ROSTER)
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gradebook:
        for assignment, cells in CELLS.items():
            gradebook.add_assignment(assignment)
            gradebook.add_notebook(assignment, assignment)
            for name, max_score in cells.items():
                gradebook.add_grade_cell(name, assignment, assignment, max_score=max_score,
                                         cell_type="code")
        for (student, assignment), earned in GRADED.items():
            if student not in {s.id for s in gradebook.students}:
                gradebook.add_student(student)
            gradebook.add_submission(assignment, student)
            for name, score in earned.items():
                gradebook.find_grade(name, assignment, assignment, student).auto_score = score
        gradebook.find_submission_notebook("01_attention", "01_attention",
                                           "ada").late_submission_penalty = 1.0
        gradebook.db.commit()
    # the grader's saved verdict for grace's chapter 1: not graded (a notebook that is
    # not JSON); her 0 in the gradebook must not reach the platform as a grade
    saved = tmp_path / ".autograde" / "results" / "01_attention" / "grace.json"
    saved.parent.mkdir(parents=True)
    saved.write_text(json.dumps(NotebookResult(
        "grace", "01_attention", "01_attention", "error",
        error="the notebook is not valid JSON").to_json()))
    return tmp_path


def run_export(course, *options):
    return cli.main(["export", "01_attention", "02_heads", "--roster",
                     str(course / "roster.csv"), "--course-dir", str(course),
                     "--db", f"sqlite:///{course / 'gradebook.db'}",
                     "--column", "01_attention=Attention (90001)", *options])


def test_canvas_golden(course, capsys):
    assert run_export(course, "--to", "canvas") == 0
    written = (course / "canvas-grades.csv").read_bytes()
    assert written == (GOLDEN / "canvas-grades.csv").read_bytes()
    out, err = capsys.readouterr()
    assert "4 students written" in out
    assert "NOTE grace/01_attention left empty: it could not be graded (the notebook is " \
           "not valid JSON)" in err
    assert "NOTE eve is in the gradebook but not on the roster" in err
    with open(course / "canvas-grades.csv", newline="") as handle:
        header = next(csv.reader(handle))
    assert header[:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


def test_moodle_golden(course):
    assert run_export(course, "--to", "moodle") == 0
    assert (course / "moodle-grades.csv").read_bytes() == \
        (GOLDEN / "moodle-grades.csv").read_bytes()


def test_missing_as_zero_and_plain_csv(course):
    assert run_export(course, "--to", "csv", "--missing-as-zero") == 0
    with open(course / "csv-grades.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["student_id", "name", "Attention (90001)", "02_heads"]
    by_student = {row[0]: row[2:] for row in rows[1:]}
    assert by_student == {"ada": ["5.5", "0"], "alan": ["10", "3"], "emmy": ["0", "0"],
                          "grace": ["", "0"]}  # ungradable stays empty even then
    assert rows[4][1] == "'-Grace Hopper"


def test_every_roster_student_is_present_and_platforms_need_a_roster(course):
    assert run_export(course, "--to", "moodle", "--moodle-key", "username") == 2  # empty
    with pytest.raises(ExportError, match="needs --roster"):
        export(course, "canvas", course / "x.csv", None,
               db_url=f"sqlite:///{course / 'gradebook.db'}")
    done = export(course, "csv", course / "x.csv", None, ["01_attention"],
                  db_url=f"sqlite:///{course / 'gradebook.db'}")
    assert done.rows == 4  # without a roster: the gradebook's students (ada alan eve grace)


@pytest.mark.parametrize("text, safe", [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-1", "'-1"), ("@A1", "'@A1"), ("\t=1", "'\t=1"),
    ("\r=1", "'\r=1"), ("Ada", "Ada"), ("", ""), (None, ""), ("a=b", "a=b")])
def test_spreadsheet_safe(text, safe):
    assert spreadsheet_safe(text) == safe
