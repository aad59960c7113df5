"""The commands that connect the course to where instructors already are: `collect` (a
learning platform's bulk download into nbgrader's layout), `export` (grades in a
platform's import format) and `gradescope` (an autograder.zip for Gradescope).
`__main__` adds them to its parser and hands them here."""
import sys
from pathlib import Path

COMMANDS = ("collect", "export", "gradescope")


def add_commands(commands):
    from autograde.collect import PLATFORMS
    collect = commands.add_parser(
        "collect", help="a learning platform's bulk download into submitted/")
    collect.add_argument("download", help="the zip file the platform gave")
    collect.add_argument("assignment", help="e.g. 01_attention")
    collect.add_argument("--from", dest="platform", required=True, choices=sorted(PLATFORMS))
    collect.add_argument("--roster", default=None,
                         help="CSV with student_id and the platform's ids (see the "
                              "instructor guide); without it ids come from the file names")
    collect.add_argument("--course-dir", default=".", help="nbgrader course root (default: .)")


def run(args):
    return {"collect": _collect}[args.command](args)


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
