"""The CSV files for an LMS: grades.csv as `nbgrader export` writes it, and tests.csv.

Their cells hold student-controlled text (student ids from folder names, diagnoses that
quote what the student's code raised): a spreadsheet would run a text cell that starts
with =, +, -, @, a tab or a carriage return as a formula, so every such text cell is
written with a leading ' (OWASP's rule for CSV injection); numbers stay numbers.
"""
import csv
import json
import re
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import CsvExportPlugin

from autograde.course import nbgrader_api
from autograde.notebook import _language as notebook_language
from autograde.results import NotebookResult, TestResult

TEST_COLUMNS = ["student_id", "assignment", "test", "points", "max_points", "status",
                "diagnosis"]


def export_grades(course_dir, path, db_url=None):
    """grades.csv with nbgrader export's columns: one row per student and assignment."""
    db_url = db_url or nbgrader_api(course_dir).coursedir.db_url
    with Gradebook(db_url) as gradebook:
        CsvExportPlugin(to=str(path)).export(gradebook)
    with open(path, newline="") as handle:  # (nbgrader writes the student's text as it is)
        rows = list(csv.reader(handle))
    with open(path, "w", newline="") as handle:
        csv.writer(handle).writerows([[csv_cell(cell) for cell in row] for row in rows])
    return Path(path)


# a cell that a spreadsheet reads as a number (nbgrader writes scores as text: "-1.5", "2.0")
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
# OWASP, "CSV Injection": a cell starting with one of these is read as a formula by Excel,
# LibreOffice or Google Sheets (tab and carriage return hide the '=' after them)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """`value` as a CSV cell no spreadsheet runs: numbers as they are, text without terminal
    control characters and, where it starts like a formula, behind a leading '."""
    from autograde.feedback import clean
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    text = str(value) if value is not None else ""
    if _NUMBER.fullmatch(text):
        return text
    if text.startswith(FORMULA_STARTS):  # (before clean(): a leading CR goes quietly)
        return "'" + clean(text)
    text = clean(text)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def export_tests(results, path):
    """tests.csv: one row per student, assignment and test cell, with the diagnosis."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(TEST_COLUMNS)
        for (student, assignment), result in sorted(results.items()):
            for test in result.tests:
                writer.writerow([csv_cell(cell) for cell in (
                    student, assignment, test.grade_id, test.points, test.max_points,
                    test.status, first_line(test.message) if not test.passed else "")])
    return Path(path)


def first_line(message):
    return (message or "").strip().splitlines()[0][:500] if (message or "").strip() else ""


def results_from_gradebook(course_dir, assignments, db_url=None):
    """NotebookResults rebuilt from the gradebook (for grading done by plain nbgrader)."""
    course_dir = Path(course_dir)
    db_url = db_url or nbgrader_api(course_dir).coursedir.db_url
    results = {}
    with Gradebook(db_url) as gradebook:
        for assignment in assignments:
            for student in gradebook.students:
                try:
                    nb = gradebook.find_submission_notebook(assignment, assignment, student.id)
                except MissingEntry:
                    continue
                graded = _read(course_dir / "autograded" / student.id / assignment
                               / f"{assignment}.ipynb")
                errors = _errors(graded)
                # (the language it was released in: nbgrader keeps the notebook's metadata)
                result = NotebookResult(student.id, assignment, assignment, "graded",
                                        language=notebook_language(graded))
                for grade in nb.grades:
                    if grade.cell.cell_type != "code":
                        continue
                    passed = grade.score == grade.max_score
                    result.tests.append(TestResult(
                        grade.name, float(grade.score or 0), float(grade.max_score),
                        "passed" if passed else "failed",
                        "" if passed else errors.get(grade.name, "failed")))
                results[(student.id, assignment)] = result
    return results


def _read(path):
    """The autograded notebook at `path` as a dict ({} where it cannot be read)."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return nb if isinstance(nb, dict) else {}


def _errors(nb):
    """{grade_id: "Error: message"} from an autograded notebook's error outputs."""
    found = {}
    for cell in nb.get("cells", []):
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                found[grade_id] = f"{output.get('ename')}: {output.get('evalue')}"
            elif output.get("output_type") == "stream" and output.get("name") == "stderr":
                found.setdefault(grade_id, "wrote to stderr: " + "".join(output.get("text", ""))[:300])
    return found
