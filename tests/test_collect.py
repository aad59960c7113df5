"""`python -m autograde collect`: each platform's bulk download, in its own file names,
into nbgrader's submitted/ layout, with every file it cannot place reported and kept."""
import io
import json
import zipfile

import nbformat
import pytest

from autograde import __main__ as cli
from autograde.collect import DownloadError, collect

ASSIGNMENT = "01_attention"


def notebook(text):
    """A small notebook whose one cell holds `text` (so two students' files differ)."""
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(text, id="cell-1"))  # fixed id: same bytes
    return nbformat.writes(nb).encode()


def write_zip(path, members):
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def write_roster(path, rows):
    header = sorted({key for row in rows for key in row})
    lines = [",".join(header)] + [",".join(row.get(k, "") for k in header) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def submitted(course, student):
    return course / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"


def problems(course):
    root = course / "collect-problems" / ASSIGNMENT
    return sorted(p.name for p in root.rglob("*") if p.is_file())


# Canvas "Download Submissions": <login>_[late_]<userid>_<submissionid>_<file>, flat.
CANVAS = {
    "lovelaceada_1001_5001_01_attention.ipynb": notebook("ada"),
    "turingalan_late_1002_5002_01_attention.ipynb": notebook("alan"),
    "hoppergrace_1003_5003_attention_final.ipynb": notebook("grace, other name"),
    "hoppergrace_1003_5003_01_attention.pdf": b"%PDF-1.4 not a notebook",
    "knuthdon_1004_5004_01_attention.ipynb": notebook("don, not on the roster"),
    "noether_1005_5005_01_attention.ipynb": notebook("emmy 1"),
    "noether_1005_5006_01_attention.ipynb": notebook("emmy 2"),
    "readme.txt": b"not from Canvas",
}


@pytest.fixture
def canvas_roster(tmp_path):
    return write_roster(tmp_path / "roster.csv", [
        {"student_id": "ada", "canvas_user_id": "1001", "name": "Ada Lovelace"},
        {"student_id": "alan", "canvas_user_id": "1002", "name": "Alan Turing"},
        {"student_id": "grace", "canvas_user_id": "1003", "name": "Grace Hopper"},
        {"student_id": "emmy", "canvas_user_id": "1005", "name": "Emmy Noether"},
    ])


def test_canvas_download_with_roster(tmp_path, canvas_roster, capsys):
    course = tmp_path / "course"
    download = write_zip(tmp_path / "submissions.zip", CANVAS)
    assert cli.main(["collect", str(download), ASSIGNMENT, "--from", "canvas",
                     "--roster", str(canvas_roster), "--course-dir", str(course)]) == 0
    out, err = capsys.readouterr()
    assert submitted(course, "ada").read_bytes() == CANVAS[
        "lovelaceada_1001_5001_01_attention.ipynb"]
    assert submitted(course, "alan").is_file()
    # Canvas marks late work but gives no time: nothing invented in timestamp.txt
    assert not (submitted(course, "alan").parent / "timestamp.txt").exists()
    assert "1 late (alan)" in out and "2 added" in out and "6 problems" in out
    assert not (course / "submitted" / "grace").exists()  # nothing guessed
    assert not (course / "submitted" / "emmy").exists()
    problem_lines = [line for line in err.splitlines() if line.startswith("PROBLEM")]
    assert len(problem_lines) == 6
    kinds = sorted(line.split(":")[0] for line in problem_lines)
    assert kinds == ["PROBLEM duplicate", "PROBLEM duplicate", "PROBLEM no-student",
                     "PROBLEM no-student", "PROBLEM not-notebook", "PROBLEM other-name"]
    assert any("knuthdon_1004" in line and "canvas_user_id '1004'" in line
               for line in problem_lines)
    assert problems(course) == sorted(
        ["hoppergrace_1003_5003_attention_final.ipynb", "hoppergrace_1003_5003_01_attention.pdf",
         "knuthdon_1004_5004_01_attention.ipynb", "noether_1005_5005_01_attention.ipynb",
         "noether_1005_5006_01_attention.ipynb", "readme.txt"])
    log = (course / "downloaded" / ASSIGNMENT / "collect-log.csv").read_text()
    assert "alan,added" in log and ",late" in log


def test_second_collect_adds_only_what_changed(tmp_path, canvas_roster):
    course = tmp_path / "course"
    first = write_zip(tmp_path / "first.zip", {
        "lovelaceada_1001_5001_01_attention.ipynb": notebook("ada v1"),
        "turingalan_1002_5002_01_attention.ipynb": notebook("alan v1")})
    report = collect(first, ASSIGNMENT, "canvas", course, canvas_roster)
    assert (report.added, report.updated, report.unchanged) == (["ada", "alan"], [], [])
    alan_before = submitted(course, "alan").stat().st_mtime_ns
    newer = write_zip(tmp_path / "newer.zip", {
        "lovelaceada_1001_5101_01_attention.ipynb": notebook("ada v2"),
        "turingalan_1002_5002_01_attention.ipynb": notebook("alan v1"),
        "hoppergrace_late_1003_5103_01_attention.ipynb": notebook("grace v1")})
    report = collect(newer, ASSIGNMENT, "canvas", course, canvas_roster)
    assert (report.added, report.updated, report.unchanged) == (["grace"], ["ada"], ["alan"])
    assert report.late == ["grace"]
    assert b"ada v2" in submitted(course, "ada").read_bytes()
    assert submitted(course, "alan").stat().st_mtime_ns == alan_before  # not rewritten
    # a student missing from a later download keeps what the earlier one gave
    only_grace = write_zip(tmp_path / "grace.zip", {
        "hoppergrace_late_1003_5103_01_attention.ipynb": notebook("grace v1")})
    report = collect(only_grace, ASSIGNMENT, "canvas", course, canvas_roster)
    assert report.unchanged == ["grace"] and not report.added and not report.updated
    assert submitted(course, "ada").is_file() and submitted(course, "alan").is_file()


def test_canvas_without_roster_uses_the_login(tmp_path):
    course = tmp_path / "course"
    download = write_zip(tmp_path / "submissions.zip", {
        "lovelaceada_1001_5001_01_attention.ipynb": notebook("ada")})
    report = collect(download, ASSIGNMENT, "canvas", course)
    assert report.added == ["lovelaceada"] and submitted(course, "lovelaceada").is_file()


# Moodle "Download all submissions": a folder per student,
# <Full Name>_<participant id>_assignsubmission_file_/<file>; or the same prefix flat.
MOODLE = {
    "Ada Lovelace_210_assignsubmission_file_/01_attention.ipynb": notebook("ada"),
    "Alan Turing_211_assignsubmission_file_01_attention.ipynb": notebook("alan, flat"),
    "Grace Hopper_212_assignsubmission_file_/notes.txt": b"my notes",
    "Grace Hopper_212_assignsubmission_onlinetext_/onlinetext.html": b"<p>hi</p>",
    "Unknown Person_213_assignsubmission_file_/01_attention.ipynb": notebook("who"),
}


def test_moodle_download(tmp_path):
    course = tmp_path / "course"
    roster = write_roster(tmp_path / "roster.csv", [
        {"student_id": "ada", "name": "Ada  Lovelace", "email": "ada@example.org"},
        {"student_id": "alan", "name": "alan turing", "email": "alan@example.org"},
        {"student_id": "grace", "name": "Grace Hopper", "email": "grace@example.org"}])
    report = collect(write_zip(tmp_path / "moodle.zip", MOODLE), ASSIGNMENT, "moodle",
                     course, roster)
    assert sorted(report.added) == ["ada", "alan"]
    assert b"alan, flat" in submitted(course, "alan").read_bytes()
    kinds = sorted((p.kind, p.path.rsplit("/", 1)[-1]) for p in report.problems)
    assert kinds == [("no-student", "01_attention.ipynb"),   # Unknown Person
                     ("no-student", "onlinetext.html"),      # not a file submission
                     ("not-notebook", "notes.txt")]
    assert "no student on the roster has name 'Unknown Person'" in " ".join(
        p.message for p in report.problems)


# Blackboard "Assignment File Download": <Assignment>_<username>_attempt_<time>_<file>,
# and a receipt <Assignment>_<username>_attempt_<time>.txt for each attempt.
BLACKBOARD = {
    "Attention_ada_attempt_2026-11-20-09-15-00_01_attention.ipynb": notebook("ada 1"),
    "Attention_ada_attempt_2026-11-20-09-15-00.txt": b"Name: Ada Lovelace (ada)\n",
    "Attention_ada_attempt_2026-11-21-23-59-30_01_attention.ipynb": notebook("ada 2"),
    "Attention_ada_attempt_2026-11-21-23-59-30.txt": b"Name: Ada Lovelace (ada)\n",
    "Attention_alan_attempt_2026-11-22-08-00-00_01_attention.ipynb": notebook("alan"),
    "Attention_alan_attempt_2026-11-22-08-00-00.txt": b"Name: Alan Turing (alan)\n",
}


def test_blackboard_download_keeps_times(tmp_path):
    course = tmp_path / "course"
    report = collect(write_zip(tmp_path / "gradebook.zip", BLACKBOARD), ASSIGNMENT,
                     "blackboard", course)
    assert sorted(report.added) == ["ada", "alan"] and report.receipts == 3
    assert b"ada 2" in submitted(course, "ada").read_bytes()
    stamp = submitted(course, "ada").parent / "timestamp.txt"
    assert stamp.read_text() == "2026-11-21 23:59:30"
    from nbgrader.utils import parse_utc  # nbgrader reads it back for late penalties
    assert parse_utc(stamp.read_text()).hour == 23
    [older] = report.problems
    assert older.kind == "older-attempt" and "2026-11-20-09-15-00" in older.path
    # a resubmission with new bytes updates the notebook and its time
    later = dict(BLACKBOARD)
    later["Attention_alan_attempt_2026-11-23-10-00-00_01_attention.ipynb"] = notebook("alan 2")
    report = collect(write_zip(tmp_path / "later.zip", later), ASSIGNMENT, "blackboard",
                     course)
    assert report.updated == ["alan"] and report.unchanged == ["ada"]
    assert (submitted(course, "alan").parent / "timestamp.txt").read_text() == \
        "2026-11-23 10:00:00"


def test_the_command_offers_every_platform():
    from autograde.collect import PLATFORMS
    from autograde.platform_commands import PLATFORM_NAMES
    assert sorted(PLATFORMS) == list(PLATFORM_NAMES)


def test_a_zip_that_escapes_its_folder_is_refused(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("../../evil_1_2_01_attention.ipynb", notebook("x"))
    path = tmp_path / "evil.zip"
    path.write_bytes(buffer.getvalue())
    with pytest.raises(DownloadError, match="outside"):
        collect(path, ASSIGNMENT, "canvas", tmp_path / "course")
    not_zip = tmp_path / "not.zip"
    not_zip.write_text(json.dumps({}))
    assert cli.main(["collect", str(not_zip), ASSIGNMENT, "--from", "moodle",
                     "--course-dir", str(tmp_path / "course")]) == 2


def test_blackboard_usernames_and_assignments_with_underscores(tmp_path):
    """Blackboard writes an assignment's spaces as "_", and a login may hold "_" too: the
    roster's usernames tell where the assignment ends; one ending that two usernames fit,
    or none, is a problem, never a guess."""
    members = {
        "Homework_1_jane_doe_attempt_2026-11-20-09-15-00_01_attention.ipynb": notebook("jane"),
        "Homework_1_doe_attempt_2026-11-20-09-16-00_01_attention.ipynb": notebook("doe"),
        "Homework_1_alan_attempt_2026-11-20-09-17-00_01_attention.ipynb": notebook("alan"),
        "Homework_1_nobody_here_attempt_2026-11-20-09-18-00_01_attention.ipynb": notebook("?"),
    }
    roster = write_roster(tmp_path / "roster.csv", [
        {"student_id": "s1", "username": "jane_doe"}, {"student_id": "s2", "username": "doe"},
        {"student_id": "s3", "username": "alan"}])
    course = tmp_path / "course"
    report = collect(write_zip(tmp_path / "bb.zip", members), ASSIGNMENT, "blackboard",
                     course, roster=roster)
    # "Homework_1_doe" ends with one username; "Homework_1_jane_doe" with two (jane_doe, doe)
    assert sorted(report.added) == ["s2", "s3"]
    why = {p.path.rpartition("/")[2].split("_attempt_")[0]: p.message
           for p in report.problems}
    assert why["Homework_1_jane_doe"] == ("'Homework_1_jane_doe' may end with any of the "
                                          "usernames 'jane_doe', 'doe' on the roster")
    assert why["Homework_1_nobody_here"].startswith(
        "no student on the roster has username 'here' (nor '1_nobody_here', 'nobody_here')")
    # without a roster: the text after the last "_" (the README says a login with "_"
    # needs the roster): jane_doe's file reads as an earlier attempt of doe's
    report = collect(write_zip(tmp_path / "bb.zip", members), ASSIGNMENT, "blackboard",
                     tmp_path / "bare")
    assert sorted(report.added) == ["alan", "doe", "here"]
    assert [(p.kind, p.path.rpartition("/")[2].split("_attempt_")[0])
            for p in report.problems] == [("older-attempt", "Homework_1_jane_doe")]
