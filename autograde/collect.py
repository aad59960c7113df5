"""A learning platform's bulk download -> nbgrader's submitted/<student>/<assignment>/.

    python -m autograde collect DOWNLOAD.zip 01_attention --from canvas [--roster roster.csv]

Built on nbgrader's `zip_collect` plugins: its ExtractorPlugin unpacks the download into
nbgrader's own layout (downloaded/<assignment>/archive -> downloaded/<assignment>/extracted,
as `nbgrader zip_collect` does), and a FileNameCollectorPlugin per platform reads the
student and the file from each file name with a named regular expression. What nbgrader
would guess at or stop on, this module reports instead: every file that matches no
student, a second file for one student, a file that is not a notebook, a notebook under
another name, each in one line, and each left in collect-problems/<assignment>/ for the
instructor to look at. Nothing is renamed or chosen by guess.

A second collect of a newer download writes only what changed: a student's notebook
with the same bytes as the one already in submitted/ is left as it is (with its
timestamp), a changed one replaces it, and a student absent from the new download keeps
what an earlier collect put there. Every collect appends what it did to
downloaded/<assignment>/collect-log.csv.

File names, one regular expression per platform (PLATFORMS):
- Canvas, "Download Submissions": <login>_<userid>_<submissionid>_<file>, with `late`
  after the login for a late submission (<login>_late_<userid>_...): no time is given.
- Moodle, "Download all submissions": <Full Name>_<participant id>_assignsubmission_file_/
  <file> (one folder per student), or the same prefix on the file itself.
- Blackboard, "Assignment File Download": <Assignment>_<username>_attempt_
  <YYYY-MM-DD-HH-MM-SS>_<file>, plus a receipt <Assignment>_<username>_attempt_<time>.txt
  per attempt. The time is kept in nbgrader's timestamp.txt (late penalties read it).
  Both names may hold "_": the roster's usernames tell where one ends (_blackboard_username).
"""
import csv
import datetime
import hashlib
import os
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.plugins import ExtractorPlugin, FileNameCollectorPlugin
from traitlets import Unicode

from autograde import messages
from autograde.paths import class_language
from autograde.roster import Roster, safe_id

PROBLEMS_DIR = "collect-problems"
DOWNLOADED_DIR = "downloaded"  # nbgrader zip_collect's default downloaded_directory
MAX_DOWNLOAD_BYTES = 4 * 2**30  # unpacked size of one download: far above a real class's


@dataclass(frozen=True)
class Platform:
    label: str
    named_regexp: str       # nbgrader's FileNameCollectorPlugin.named_regexp, on the path
    roster_column: str      # the roster column holding the id the file name carries
    file_key: str           # the group of named_regexp that roster_column is matched with
    default_id: str         # without a roster: the group the student id is made from


PLATFORMS = {
    "canvas": Platform(
        "Canvas",
        r"(?:.*/)?(?P<login>[^/]+?)_(?:(?P<late>late|LATE)_)?(?P<user_id>\d+)"
        r"_(?P<submission_id>\d+)_(?P<file_id>[^/]+)$",
        "canvas_user_id", "user_id", "login"),
    "moodle": Platform(
        "Moodle",
        r"(?:.*/)?(?P<name>[^/]+)_(?P<participant_id>\d+)_assignsubmission_file_/?"
        r"(?P<file_id>[^/]+)$",
        "name", "name", "name"),
    "blackboard": Platform(
        "Blackboard",
        # "<Assignment>_<username>" is read whole: either may hold "_" (see _student)
        r"(?:.*/)?(?P<bb_head>[^/]+?)_attempt_"
        r"(?P<timestamp>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)(?:_(?P<file_id>[^/]+)|\.txt)$",
        "username", "username", "username"),
}


class PlatformCollector(FileNameCollectorPlugin):
    """nbgrader's file-name collector with one platform's named_regexp. Unlike the base
    class it answers for every file (zip_collect skips what it cannot use without a
    word): the groups for a file in the platform's form, whatever its extension, and
    None for one that is not."""
    platform = Unicode("canvas").tag(config=True)

    def collect(self, submitted_file):
        match = re.match(PLATFORMS[self.platform].named_regexp, submitted_file)
        return match.groupdict() if match else None


@dataclass
class Problem:
    kind: str      # no-student | duplicate | not-notebook | other-name | older-attempt
    path: str      # the file, relative to the extracted download
    message: str   # in the class's language (CollectReport.language)

    def line(self, assignment, language=messages.ENGLISH):
        return "PROBLEM " + messages.text("collect.problem", language, kind=self.kind,
                                          path=self.path, message=self.message,
                                          folder=f"{PROBLEMS_DIR}/{assignment}")


@dataclass
class Found:
    student_id: str
    path: Path
    timestamp: datetime.datetime = None
    late: bool = False


@dataclass
class CollectReport:
    assignment: str
    added: list = field(default_factory=list)      # student ids
    updated: list = field(default_factory=list)
    unchanged: list = field(default_factory=list)
    late: list = field(default_factory=list)
    receipts: int = 0
    problems: list = field(default_factory=list)
    language: str = messages.ENGLISH  # the class's (paths.class_language), for lines()

    def lines(self):
        for problem in self.problems:
            yield problem.line(self.assignment, self.language)
        late = messages.text("collect.late", self.language, count=len(self.late),
                             students=", ".join(self.late)) if self.late else ""
        yield messages.text("collect.summary", self.language, assignment=self.assignment,
                            added=len(self.added), updated=len(self.updated),
                            unchanged=len(self.unchanged), late=late,
                            problems=len(self.problems))


class DownloadError(ValueError):
    """A download that is not a zip file, or one this module refuses to unpack."""


def check_download(path, language=messages.ENGLISH):
    """Refuse a zip whose members would land outside its folder or unpack to more than
    MAX_DOWNLOAD_BYTES (setuptools, which nbgrader's unzip calls, skips the first kind
    silently and does not bound the second), saying why in `language` (the class's)."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (OSError, zipfile.BadZipFile) as error:
        raise DownloadError(messages.text("collect.not_zip", language, path=path,
                                          error=error)) from None
    for member in members:
        parts = member.filename.replace("\\", "/").split("/")
        if member.filename.startswith(("/", "\\")) or ".." in parts:
            raise DownloadError(messages.text("collect.outside", language, path=path,
                                              member=repr(member.filename)))
    total = sum(member.file_size for member in members)
    if total > MAX_DOWNLOAD_BYTES:
        raise DownloadError(messages.text("collect.too_big", language, path=path,
                                          size=f"{total / 2**30:.1f}",
                                          limit=f"{MAX_DOWNLOAD_BYTES / 2**30:.0f}"))


def _timestamp(text):
    """Blackboard's 2026-11-20-15-04-05 as a datetime (the server's local time)."""
    return datetime.datetime.strptime(text, "%Y-%m-%d-%H-%M-%S") if text else None


def _student(platform, info, roster, language=messages.ENGLISH):
    """(student id, None) or (None, why no student, in `language`): the roster's student
    whose platform column holds the file name's key; without a roster, an id made from it."""
    if info.get("bb_head") is not None:  # Blackboard
        key, why = _blackboard_username(info["bb_head"], roster, language)
        if why:
            return None, why
        info = {**info, "username": key}
    key = info.get(platform.file_key) or ""
    if roster is None:
        student_id = safe_id(info.get(platform.default_id) or "")
        return (student_id, None) if student_id else (
            None, messages.text("collect.no_usable_id", language))
    found = roster.find(platform.roster_column, key)
    if len(found) == 1:
        return found[0].student_id, None
    if not found:
        return None, messages.text("collect.not_on_roster", language,
                                   column=platform.roster_column, key=repr(key))
    return None, messages.text("collect.several_on_roster", language, count=len(found),
                               column=platform.roster_column, key=repr(key),
                               students=", ".join(s.student_id for s in found))


def _blackboard_username(head, roster, language=messages.ENGLISH):
    """(username, None) or (None, why) from Blackboard's "<Assignment>_<username>", where
    either may hold "_" (Blackboard writes an assignment name's spaces as "_", and a login
    may be jane_doe): with a roster, the one ending of `head` after an "_" that is a
    username on it; without one, the text after the last "_" (a login with "_" in it needs
    the roster). Why not, in `language`."""
    endings = [head[index + 1:] for index, char in enumerate(head) if char == "_"]
    if not endings:
        return None, messages.text("collect.no_username", language, head=repr(head))
    if roster is None:
        return endings[-1], None
    on_roster = [ending for ending in endings if roster.find("username", ending)]
    if len(on_roster) == 1:
        return on_roster[0], None
    if not on_roster:
        others = messages.text("collect.nor", language,
                               usernames=", ".join(map(repr, endings[:-1]))) \
            if endings[:-1] else ""
        return None, messages.text("collect.username_not_on_roster", language,
                                   username=repr(endings[-1]), others=others)
    return None, messages.text("collect.any_username", language, head=repr(head),
                               usernames=", ".join(map(repr, on_roster)))


def _sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def collect(download, assignment, platform_name, course_dir=".", roster=None):
    """Collect `download` (a platform's zip) for `assignment` into course_dir/submitted/.
    Returns a CollectReport; raises DownloadError for a zip it will not unpack (and
    RosterError for a roster it cannot use), in the class's language (class_language)."""
    platform = PLATFORMS[platform_name]
    course_dir = Path(course_dir).resolve()
    language = messages.supported(class_language(course_dir, [assignment]))
    if isinstance(roster, (str, os.PathLike)):
        roster = Roster.read(roster, language)
    download = Path(download).resolve()
    check_download(download, language)
    work = course_dir / DOWNLOADED_DIR / assignment
    archive, extracted = work / "archive", work / "extracted"
    for folder in (archive, extracted):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    shutil.copy2(download, archive / download.name)
    extractor = ExtractorPlugin(force=True, zip_ext=[".zip"])
    extractor.extract(str(archive), str(extracted))
    collector = PlatformCollector(platform=platform_name)

    report = CollectReport(assignment, language=language)
    said = lambda key, **fields: messages.text(key, language, **fields)  # noqa: E731
    wanted = f"{assignment}.ipynb"
    candidates = {}  # student id -> [Found]
    for path in sorted(p for p in extracted.rglob("*") if p.is_file()):
        relative = path.relative_to(extracted).as_posix()
        info = collector.collect(path.as_posix())
        if info is None:
            report.problems.append(Problem(
                "no-student", relative, said("collect.not_platform", platform=platform.label)))
            continue
        if not info.get("file_id"):  # Blackboard's receipt of an attempt
            report.receipts += 1
            continue
        student_id, why = _student(platform, info, roster, language)
        if why:
            report.problems.append(Problem("no-student", relative, why))
            continue
        file_id = info["file_id"]
        if not file_id.endswith(".ipynb"):
            report.problems.append(Problem(
                "not-notebook", relative, said("collect.not_notebook", student=student_id,
                                               file=repr(file_id), wanted=wanted)))
            continue
        if file_id != wanted:
            report.problems.append(Problem(
                "other-name", relative, said("collect.other_name", student=student_id,
                                             file=repr(file_id), wanted=wanted)))
            continue
        candidates.setdefault(student_id, []).append(Found(
            student_id, path, _timestamp(info.get("timestamp")), bool(info.get("late"))))

    chosen = []
    for student_id, found in sorted(candidates.items()):
        if len(found) == 1:
            chosen.append(found[0])
            continue
        times = [f.timestamp for f in found]
        if all(times) and len(set(times)) == len(times):  # attempts: the newest counts
            found.sort(key=lambda f: f.timestamp)
            chosen.append(found[-1])
            for older in found[:-1]:
                report.problems.append(Problem(
                    "older-attempt", older.path.relative_to(extracted).as_posix(),
                    said("collect.older_attempt", student=student_id, older=older.timestamp,
                         newer=found[-1].timestamp)))
            continue
        for each in found:
            report.problems.append(Problem(
                "duplicate", each.path.relative_to(extracted).as_posix(),
                said("collect.duplicate", count=len(found), wanted=wanted,
                     student=student_id)))

    problems_dir = course_dir / PROBLEMS_DIR / assignment
    shutil.rmtree(problems_dir, ignore_errors=True)  # it shows the latest collect only
    for problem in report.problems:
        target = problems_dir / problem.path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(extracted / problem.path, target)

    log_rows = []
    for found in chosen:
        action = _transfer(course_dir, assignment, found)
        getattr(report, action).append(found.student_id)
        if found.late:
            report.late.append(found.student_id)
        log_rows.append([found.student_id, action, found.path.relative_to(extracted)
                         .as_posix(), found.timestamp or "", "late" if found.late else ""])
    _append_log(work / "collect-log.csv", download.name, log_rows)
    return report


def _transfer(course_dir, assignment, found):
    """Write one student's notebook into submitted/; 'added', 'updated' or 'unchanged'."""
    folder = course_dir / "submitted" / found.student_id / assignment
    target = folder / f"{assignment}.ipynb"
    stamp = folder / "timestamp.txt"
    if target.is_file() and _sha256(target) == _sha256(found.path):
        return "unchanged"
    action = "updated" if target.is_file() else "added"
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{assignment}.ipynb.partial"
    shutil.copyfile(found.path, partial)
    os.replace(partial, target)
    if found.timestamp:
        stamp.write_text(found.timestamp.isoformat(" "))  # nbgrader's own format
    elif stamp.exists():
        stamp.unlink()  # it was the time of the notebook this one replaces
    return action


def _append_log(path, download_name, rows):
    new = not path.exists()
    with open(path, "a", newline="") as handle:
        writer = csv.writer(handle)
        if new:
            writer.writerow(["collected_at", "download", "student_id", "action", "file",
                             "timestamp", "late"])
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        for row in rows:
            writer.writerow([now, download_name] + row)
