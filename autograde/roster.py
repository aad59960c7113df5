"""The class list an instructor keeps: who the students are, under every name a platform
gives them. Read by `collect` (a platform's file name -> nbgrader student id) and by
`export` (nbgrader student id -> the platform's columns).

A roster is a CSV file with a header. One column is required, `student_id`: the id in
nbgrader's gradebook and in `submitted/<student_id>/`. The others are optional and each is
the key of one platform:

| column           | what it holds                                        | read by                |
|------------------|------------------------------------------------------|------------------------|
| `name`           | the full name the platform shows ("Ada Lovelace")    | Moodle (files, export) |
| `sortable_name`  | Canvas's "Lovelace, Ada"                             | Canvas export          |
| `canvas_user_id` | Canvas's numeric user id (in its file names)         | Canvas (files, export) |
| `sis_user_id`    | the SIS user id Canvas shows                         | Canvas export          |
| `sis_login_id`   | the SIS login id Canvas shows                        | Canvas export          |
| `section`        | the section Canvas shows                             | Canvas export          |
| `username`       | the platform's login (Blackboard's file names)       | Blackboard, Moodle     |
| `email`          | the e-mail address                                   | Moodle export          |
| `id_number`      | Moodle's "ID number" field                           | Moodle export          |
"""
import csv
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from autograde import messages

COLUMNS = ("student_id", "name", "sortable_name", "canvas_user_id", "sis_user_id",
           "sis_login_id", "section", "username", "email", "id_number")
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class RosterError(ValueError):
    """A roster that cannot be used as it is; the message names the row and column."""


@dataclass
class Student:
    student_id: str
    fields: dict = field(default_factory=dict)  # column -> value, "" where not given

    def get(self, column):
        return self.fields.get(column, "")


def name_key(name):
    """A full name compared the way people read it: case, accents' composition and runs of
    spaces or underscores ignored (Moodle writes underscores of a name as spaces)."""
    text = unicodedata.normalize("NFC", name or "").replace("_", " ")
    return " ".join(text.split()).casefold()


def safe_id(text):
    """A folder-safe nbgrader student id made from a platform's name or login, for a
    collect without a roster: lower case, runs of other characters as one '_'."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "_", ascii_text.lower()).strip("_")


class Roster:
    """Students in the roster's order, with look-ups by any of its columns."""

    def __init__(self, students):
        self.students = list(students)
        self._index = {}
        for student in self.students:
            for column, value in student.fields.items():
                key = name_key(value) if column == "name" else value.strip()
                if key:
                    self._index.setdefault((column, key), []).append(student)

    @classmethod
    def read(cls, path, language=messages.ENGLISH):
        """The roster at `path`; raises RosterError, said in `language` (the class's:
        paths.class_language), for a header or a student_id it cannot use."""
        path = Path(path)
        with open(path, newline="", encoding="utf-8-sig") as handle:  # Excel writes a BOM
            reader = csv.DictReader(handle)
            header = [name.strip() for name in reader.fieldnames or []]
            if "student_id" not in header:
                raise RosterError(messages.text(
                    "roster.no_student_id", language, path=path,
                    header=", ".join(header) or messages.text("roster.empty_header", language)))
            students, seen = [], set()
            for row_number, row in enumerate(reader, start=2):
                values = {(k or "").strip(): (v or "").strip() for k, v in row.items()
                          if k is not None}
                student_id = values.get("student_id", "")
                if not STUDENT_ID.match(student_id):
                    raise RosterError(messages.text("roster.unusable_id", language, path=path,
                                                    row=row_number,
                                                    student_id=repr(student_id)))
                if student_id in seen:
                    raise RosterError(messages.text("roster.twice", language, path=path,
                                                    row=row_number,
                                                    student_id=repr(student_id)))
                seen.add(student_id)
                students.append(Student(student_id, {c: values.get(c, "") for c in COLUMNS
                                                     if c != "student_id"}))
        return cls(students)

    def find(self, column, value):
        """The students whose `column` holds `value` (names compared by name_key)."""
        key = name_key(value) if column == "name" else (value or "").strip()
        return list(self._index.get((column, key), []))

    def ids(self):
        return [student.student_id for student in self.students]

    def has_column(self, column):
        return any(student.get(column) for student in self.students)
