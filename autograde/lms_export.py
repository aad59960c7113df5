"""Grades in a learning platform's import format, one row per student on the roster.

    python -m autograde export --to canvas|moodle|csv --roster roster.csv

Scores come from nbgrader's gradebook (what formgrader shows, after late penalties and
any manual grading: score - late_submission_penalty, never below 0, as `nbgrader export`
computes it). A student on the roster with no submission gets an empty cell, not a zero
(`missing_as_zero` writes 0); a submission the grader could not grade (its saved result
says so) is left empty too and named in a note, so that no one gets a silent zero.
Every text cell goes through spreadsheet_safe (OWASP's CSV injection rule).

Formats:
- canvas: the Gradebook import file. Leading columns Student, ID, SIS User ID,
  SIS Login ID, Section (as Canvas's own Gradebook export writes them; Canvas matches a
  row by its ID, SIS User ID or SIS Login ID), a "Points Possible" row, then one column
  per assignment. A column named "<title> (<canvas assignment id>)" updates that Canvas
  assignment; a bare name makes Canvas create a new assignment (`columns`).
- moodle: Grade import "CSV file": one column identifying the user (Moodle maps it to
  the user field of the same kind on import: "Email address", "Username" or
  "ID number"), "Full name" (ignored by the import, there for a person), then one column
  per assignment, mapped to a grade item on the import page.
- csv: student_id, name, then one column per assignment.
"""
import csv
from dataclasses import dataclass, field
from pathlib import Path

from autograde import messages
# FORMULA_STARTS: OWASP's "CSV Injection" starts, one list for every CSV the grader writes
from autograde.exports import FORMULA_STARTS
from autograde.paths import class_language
from autograde.roster import Roster

FORMATS = ("canvas", "moodle", "csv")
CANVAS_LEADING = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
MOODLE_KEYS = {"email": "Email address", "username": "Username", "id_number": "ID number"}


def spreadsheet_safe(text):
    """`text` as a spreadsheet shows it and never runs it: a leading ' when it starts
    with = + - @ tab or carriage return (OWASP's rule for CSV files)."""
    text = "" if text is None else str(text)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def points(value):
    """12.0 -> "12", 8.25 -> "8.25" (four decimals at most: what a gradebook shows)."""
    return f"{round(float(value), 4):.12g}"


@dataclass
class Export:
    path: Path
    rows: int
    notes: list = field(default_factory=list)  # one line each, for the instructor


class ExportError(ValueError):
    """An export that cannot be written as asked (the message says what is missing, in the
    class's language: paths.class_language)."""


def gradebook_scores(course_dir, assignments, db_url=None):
    """({assignment: max score}, {(student, assignment): score after late penalty})."""
    from nbgrader.api import Gradebook, MissingEntry

    from autograde.course import nbgrader_api
    db_url = db_url or nbgrader_api(course_dir).coursedir.db_url
    maxima, scores = {}, {}
    with Gradebook(db_url) as gradebook:
        for assignment in assignments:
            try:
                maxima[assignment] = gradebook.find_assignment(assignment).max_score
            except MissingEntry:
                continue
            for submission in gradebook.assignment_submissions(assignment):
                scores[(submission.student_id, assignment)] = max(
                    0.0, submission.score - (submission.late_submission_penalty or 0.0))
    return maxima, scores


def _ungradable(course_dir, assignments):
    """{(student, assignment): why} for the saved results the grader could not grade."""
    from autograde.batch import load_results
    return {key: (result.error or result.status).strip().splitlines()[0][:200]
            for key, result in load_results(course_dir, assignments).items()
            if result.status != "graded"}


def export(course_dir, to, path, roster, assignments=None, missing_as_zero=False,
           columns=None, moodle_key=None, db_url=None):
    """Write the grade file `to` (canvas | moodle | csv) at `path`; returns an Export, its
    notes (and an ExportError's message) in the class's language (paths.class_language)."""
    from autograde import course
    course_dir = Path(course_dir)
    language = messages.supported(class_language(course_dir, assignments))
    said = lambda key, **fields: messages.text(key, language, **fields)  # noqa: E731
    if isinstance(roster, (str, Path)):
        roster = Roster.read(roster, language)
    assignments = list(assignments or course.assignments())
    maxima, scores = gradebook_scores(course_dir, assignments, db_url)
    assignments = [a for a in assignments if a in maxima]  # the ones graded at all
    if not assignments:
        raise ExportError(said("export.nothing"))
    if roster is None:
        if to != "csv":
            raise ExportError(said("export.needs_roster", to=to, platform=to.capitalize()))
        from autograde.roster import Student
        roster = Roster([Student(s) for s in sorted({s for s, _ in scores})])
    ungradable = _ungradable(course_dir, assignments)
    notes = [said("export.not_on_roster", student=student)
             for student in sorted({s for s, _ in scores} - set(roster.ids()))]

    def cell(student, assignment):
        key = (student, assignment)
        if key in ungradable:
            notes.append(said("export.left_empty", student=student, assignment=assignment,
                              why=ungradable[key]))
            return ""
        if key in scores:
            return points(scores[key])
        return "0" if missing_as_zero else ""

    titles = [(columns or {}).get(a, a) for a in assignments]
    if to == "canvas":
        header = CANVAS_LEADING + titles
        first = ["    Points Possible", "", "", "", ""] + [points(maxima[a])
                                                          for a in assignments]
        body = []
        for student in roster.students:
            if not (student.get("canvas_user_id") or student.get("sis_user_id")
                    or student.get("sis_login_id")):
                notes.append(said("export.canvas_unmatched", student=student.student_id))
            body.append([student.get("sortable_name") or student.get("name")
                         or student.student_id, student.get("canvas_user_id"),
                         student.get("sis_user_id"), student.get("sis_login_id"),
                         student.get("section")]
                        + [cell(student.student_id, a) for a in assignments])
        rows = [first] + body
    elif to == "moodle":
        moodle_key = moodle_key or next(
            (k for k in MOODLE_KEYS if all(s.get(k) for s in roster.students)), None)
        if moodle_key not in MOODLE_KEYS or not any(s.get(moodle_key)
                                                    for s in roster.students):
            raise ExportError(said("export.moodle_key", keys=", ".join(MOODLE_KEYS)))
        header = [MOODLE_KEYS[moodle_key], "Full name"] + titles
        rows = []
        for student in roster.students:
            if not student.get(moodle_key):
                notes.append(said("export.moodle_unmatched", student=student.student_id,
                                  key=moodle_key))
            rows.append([student.get(moodle_key), student.get("name")]
                        + [cell(student.student_id, a) for a in assignments])
    elif to == "csv":
        header = ["student_id", "name"] + titles
        rows = [[s.student_id, s.get("name")] + [cell(s.student_id, a) for a in assignments]
                for s in roster.students]
    else:
        raise ExportError(said("export.unknown_format", format=repr(to),
                               formats=", ".join(FORMATS)))
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as handle:  # both platforms read UTF-8
        writer = csv.writer(handle, lineterminator="\r\n")  # RFC 4180
        writer.writerow([spreadsheet_safe(v) for v in header])
        for row in rows:
            writer.writerow([spreadsheet_safe(v) for v in row])
    return Export(path, len(roster.students), notes)
