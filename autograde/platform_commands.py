"""The commands that connect the course to where instructors already are: `collect` (a
learning platform's bulk download into nbgrader's layout), `export` (grades in a
platform's import format) and `gradescope` (an autograder.zip for Gradescope).
`__main__` adds them to its parser and hands them here."""
import sys
from pathlib import Path

COMMANDS = ("collect", "export", "gradescope")


# the keys of collect.PLATFORMS, named here so that building the parser does not import
# nbgrader (seconds) for every command (tests/test_collect.py keeps the two equal)
PLATFORM_NAMES = ("blackboard", "canvas", "moodle")


def add_commands(commands):
    collect = commands.add_parser(
        "collect", help="a learning platform's bulk download into submitted/")
    collect.add_argument("download", help="the zip file the platform gave")
    collect.add_argument("assignment", help="e.g. 01_attention")
    collect.add_argument("--from", dest="platform", required=True, choices=PLATFORM_NAMES)
    collect.add_argument("--roster", default=None,
                         help="CSV with student_id and the platform's ids (see the "
                              "instructor guide); without it ids come from the file names")
    collect.add_argument("--course-dir", default=".", help="nbgrader course root (default: .)")

    from autograde.lms_export import FORMATS, MOODLE_KEYS
    export = commands.add_parser("export", help="grades in Canvas's or Moodle's import format")
    export.add_argument("assignments", nargs="*", help="default: every graded chapter")
    export.add_argument("--to", required=True, choices=FORMATS)
    export.add_argument("--roster", default=None, help="CSV with student_id and the "
                        "platform's ids (required for canvas and moodle)")
    export.add_argument("--output", default=None, help="default: <to>-grades.csv in the "
                        "course directory")
    export.add_argument("--missing-as-zero", action="store_true",
                        help="0 for a student with no submission (default: an empty cell)")
    export.add_argument("--column", action="append", default=[], metavar="ASSIGNMENT=TITLE",
                        help="the platform's column for an assignment, e.g. "
                             "'01_attention=Attention (12345)' (repeatable)")
    export.add_argument("--moodle-key", choices=sorted(MOODLE_KEYS), default=None,
                        help="the roster column Moodle identifies users by (default: the "
                             "first of email, username, id_number every student has)")
    export.add_argument("--course-dir", default=".", help="nbgrader course root (default: .)")
    export.add_argument("--db", default=None, help="gradebook URL (default: sqlite gradebook.db)")

    gradescope = commands.add_parser("gradescope", help="Gradescope's autograder.zip for a chapter")
    gradescope.add_argument("assignment", help="e.g. 01_attention")
    gradescope.add_argument("--output", default=None,
                            help="default: gradescope/<assignment>/autograder.zip in the "
                                 "course directory")
    gradescope.add_argument("--course-dir", default=".", help="default: .")
    gradescope.add_argument("--lang", default=None, metavar="LANGUAGE",
                            help="the class's language (e.g. zh_CN): its release is shipped "
                                 "too, and an upload without a notebook is told so in it "
                                 "(default: English; a graded notebook speaks its own)")


def run(args):
    return {"collect": _collect, "export": _export,
            "gradescope": _gradescope}[args.command](args)


def _gradescope(args):
    """`gradescope`: autograder.zip for a chapter, what it prints in the language the class
    will be told in once it is done, as `release` (paths.class_language of --course-dir,
    counting --lang as released)."""
    from autograde import course, messages
    from autograde.gradescope import build
    from autograde.paths import class_language
    course_dir = Path(args.course_dir)
    known = args.assignment in course.assignments()
    # (a name that is no chapter: the class's language of any chapter)
    language = messages.supported(class_language(course_dir, [args.assignment] if known else None,
                                                 [args.lang] if args.lang else []))
    if not known:
        print("ERROR: " + messages.text("gradescope.no_chapter", language,
                                        name=repr(args.assignment),
                                        chapters=", ".join(course.assignments())),
              file=sys.stderr)
        return 2
    output = Path(args.output) if args.output else (
        course_dir / "gradescope" / args.assignment / "autograder.zip")
    try:
        path = build(args.assignment, output, args.lang)
    except (ValueError, RuntimeError, OSError) as refused:
        print(f"ERROR: {refused}", file=sys.stderr)
        return 2
    print(messages.text("gradescope.built", language, assignment=args.assignment, path=path))
    return 0


def _export(args):
    from autograde import messages
    from autograde.lms_export import ExportError, export
    from autograde.paths import class_language
    from autograde.roster import RosterError
    course_dir = Path(args.course_dir)
    language = messages.supported(class_language(course_dir, args.assignments or None))
    columns = {}
    for item in args.column:
        assignment, sep, title = item.partition("=")
        if not sep or not title.strip():
            print("ERROR: " + messages.text("export.bad_column", language, item=repr(item)),
                  file=sys.stderr)
            return 2
        columns[assignment.strip()] = title.strip()
    output = Path(args.output) if args.output else course_dir / f"{args.to}-grades.csv"
    try:
        done = export(course_dir, args.to, output, args.roster, args.assignments or None,
                      args.missing_as_zero, columns, args.moodle_key, args.db)
    except (ExportError, RosterError, OSError) as refused:
        print(f"ERROR: {refused}", file=sys.stderr)
        return 2
    for note in done.notes:
        print(f"NOTE {note}", file=sys.stderr)
    print(messages.text("export.written", language, rows=done.rows, path=done.path))
    return 0


def _collect(args):
    from autograde.collect import DownloadError, collect
    from autograde.roster import RosterError
    try:
        report = collect(args.download, args.assignment, args.platform,
                         Path(args.course_dir), args.roster)
    except (DownloadError, RosterError, OSError) as refused:
        print(f"ERROR: {refused}", file=sys.stderr)
        return 2
    lines = list(report.lines())
    for line in lines[:-1]:
        print(line, file=sys.stderr)
    print(lines[-1])
    return 0
