"""Where everything lies: the repository's own folders, and a course directory's layout.

The repository (the course's single source):
    chapters/<assignment>.ipynb       each chapter notebook, with its solutions and tests
    chapters/checks/                  the checks (imported by the grader as chapters.checks)
A course directory (nbgrader's layout, plus the grader's own folder .autograde/):
    source/<assignment>/<assignment>.ipynb    what `release` prepared (course.prepare_source)
    release/<assignment>/                     the student version (nbgrader) and its kit
    release-<language>/<assignment>/          the same, its notebook translated (release --lang)
    submitted/<student>/<assignment>/<assignment>.ipynb    what a student handed in
    .autograde/results/<assignment>/<student>.json         each verdict (resume, feedback)
    .autograde/staging/<student>/<assignment>/             what the gradebook records from
    .autograde/sandbox/                       zygotes' folders where bwrap is missing
    .autograde/grade.lock                     held by the one `grade` running
"""
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHAPTERS = REPO / "chapters"
CHECKS = CHAPTERS / "checks"
# The grader imports the checks one way: as the package chapters.checks, from the
# repository root, which is on sys.path wherever autograde itself is importable (no
# sys.path edits). A chapter's notebook, the student's kit and the release in the
# sandbox hold the same package as `checks`, beside the notebook.
CHECKS_PACKAGE = "chapters.checks"

SOURCE = "source"
RELEASE = "release"
SUBMITTED = "submitted"
RESULTS = ".autograde/results"
STAGING = ".autograde/staging"  # nbgrader's "submitted" folder for the recording step
SANDBOX = ".autograde/sandbox"
LOCK = ".autograde/grade.lock"


def source_notebook(course_dir, assignment):
    """<course>/source/<assignment>/<assignment>.ipynb: the trusted notebook that grades."""
    return Path(course_dir) / SOURCE / assignment / f"{assignment}.ipynb"


def released_notebook(course_dir, assignment):
    """<course>/release/<assignment>/<assignment>.ipynb: the student version."""
    return Path(course_dir) / RELEASE / assignment / f"{assignment}.ipynb"


def result_path(course_dir, student, assignment):
    """<course>/.autograde/results/<assignment>/<student>.json: one saved verdict."""
    return Path(course_dir) / RESULTS / assignment / f"{student}.json"


def release_dir(course_dir, language=None):
    """<course>/release/, where nbgrader writes the English student versions, or, for another
    `language` (e.g. "zh_CN"), <course>/release-zh_CN/: the same folders with the notebook
    translated and the same file names, since nbgrader collects and grades a submission by
    its notebook's name (<assignment>.ipynb in either language). nbgrader's own commands
    release it with --CourseDirectory.release_directory=release-zh_CN."""
    return Path(course_dir) / (RELEASE if language is None else f"{RELEASE}-{language}")


def released_language(course_dir, assignment):
    """The language the class was given `assignment` in, for what the grader says where no
    notebook tells it (a student folder without the notebook): that of its translated
    student version, release-<language>/<assignment>/ (`release --lang`; the first in
    alphabetical order where there are several), else English ("en"). A course that
    released a chapter in Chinese hears about a missing notebook in Chinese, whichever
    language the other students chose (each graded notebook speaks its own)."""
    prefix = f"{RELEASE}-"
    for folder in sorted(Path(course_dir).glob(f"{prefix}*/{assignment}")):
        if folder.is_dir():
            return folder.parent.name[len(prefix):]
    return "en"


def class_language(course_dir, assignments=None, releasing=()):
    """The language the class is taught in, for what the grader's commands tell the
    instructor (a refused `grade`, an export's notes): the language of the translated
    releases release-<language>/<assignment>/ of `assignments` (of any chapter where None;
    the first in alphabetical order where there are several, as released_language), else
    English ("en"). A course whose instructor ran `release --lang zh_CN` is told in Chinese.
    `releasing`: the languages a command is writing releases in now (`release --lang`,
    `gradescope --lang`), counted as released, so that the command speaks from its first
    line the language the class will be told in once it is done."""
    prefix = f"{RELEASE}-"
    released = [folder.parent.name[len(prefix):]
                for folder in Path(course_dir).glob(f"{prefix}*/*")
                if folder.is_dir() and (assignments is None or folder.name in assignments)]
    languages = sorted({*released, *releasing} - {"en"})
    return languages[0] if languages else "en"
