"""The instructor's commands, run from the course directory (default: the current one).

  python -m autograde release  [ASSIGNMENT ...]   student versions into release/ (nbgrader)
                    [--lang zh_CN]                and translated ones into release-zh_CN/
                    [--calendar]                  of the chapters class_calendar has opened
  python -m autograde grade    [ASSIGNMENT ...]   grade submitted/ into the gradebook,
                                                  grades.csv and tests.csv
  python -m autograde feedback [ASSIGNMENT ...]   feedback/<student>/<assignment>.html
                                                  (each in its notebook's language)
  python -m autograde report   [ASSIGNMENT ...]   report.md and report.png for the class
                    [--lang zh_CN]                (its own sentences in LANGUAGE)
  python -m autograde collect DOWNLOAD.zip ASSIGNMENT --from canvas|moodle|blackboard
                                                  a platform's download into submitted/
  python -m autograde export --to canvas|moodle|csv --roster ROSTER.csv
                                                  grades in a platform's import format
  python -m autograde gradescope ASSIGNMENT       Gradescope's autograder.zip
"""
import argparse
import sys
from pathlib import Path

from autograde import course, messages
from autograde.feedback import write_feedback
from autograde.report import write_report


def _common(parser):
    parser.add_argument("assignments", nargs="*", help="default: every chapter")
    parser.add_argument("--course-dir", default=".", help="nbgrader course root (default: .)")
    parser.add_argument("--db", default=None,
                        help="gradebook URL, e.g. postgresql://... (default: sqlite gradebook.db)")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograde", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    rel = commands.add_parser("release", help="build student versions with nbgrader into release/")
    _common(rel)
    rel.add_argument("--zip", default=None, metavar="DIR",
                     help="also write DIR/<assignment>.zip of each student version "
                          "(and DIR/<language>/<assignment>.zip of each translated one)")
    rel.add_argument("--lang", action="append", default=[], metavar="LANGUAGE",
                     help="also write the student versions in LANGUAGE (e.g. zh_CN, from "
                          "locales/LANGUAGE/LC_MESSAGES/) into release-LANGUAGE/; repeatable")
    rel.add_argument("--calendar", action="store_true",
                     help="the chapters that _config.yml's class_calendar has opened (those the "
                          "class edition publishes), in place of naming them")
    grade = commands.add_parser("grade", help="grade every submission in submitted/")
    _common(grade)
    grade.add_argument("--engine", choices=["sandbox", "nbgrader"], default="sandbox",
                       help="sandbox: ours, parallel and isolated (default); nbgrader: plain "
                            "`nbgrader autograde`")
    grade.add_argument("--student", action="append", default=None,
                       help="only this student (repeatable)")
    grade.add_argument("--jobs", type=int, default=None, help="parallel workers (default: CPUs)")
    grade.add_argument("--restart", action="store_true",
                       help="grade everything again instead of resuming")
    grade.add_argument("--call-seconds", type=float, default=None,
                       help="time limit of each test cell (default 60)")
    grade.add_argument("--notebook-seconds", type=float, default=None,
                       help="time limit of each notebook (default 300)")
    grade.add_argument("--memory-mb", type=int, default=None,
                       help="memory each submission may allocate (default 2048)")
    grade.add_argument("--no-progress", action="store_true", help="no progress bar")
    feedback = commands.add_parser("feedback", help="per-student feedback from the last grading")
    _common(feedback)
    report = commands.add_parser("report", help="class summary from the last grading")
    _common(report)
    report.add_argument("--lang", default="en", metavar="LANGUAGE",
                        help="the report's own sentences in LANGUAGE (e.g. zh_CN, from "
                             "locales/LANGUAGE/LC_MESSAGES/grader.po; default: en); what it "
                             "quotes of each student stays in that student's language")
    from . import platform_commands
    platform_commands.add_commands(commands)
    args = parser.parse_args(argv)
    if args.command in platform_commands.COMMANDS:
        return platform_commands.run(args)
    assignments = args.assignments or None
    course_dir = Path(args.course_dir)

    if args.command == "release":
        return _release(parser, args, assignments, course_dir)

    # (imported here: torch and the grader, which `release` does not need, cost seconds)
    from autograde import batch, exports
    if args.command == "grade":
        try:
            with batch.course_lock(course_dir):
                return _grade(args, assignments, course_dir)
        except (batch.Busy, batch.StaleRelease) as refused:
            print(f"ERROR: {refused}", file=sys.stderr)
            return 2
    from .notebook import printable  # (student ids name the files printed)
    results = batch.load_results(course_dir, assignments)
    if not results:
        print(messages.text("cli.no_results", _class_language(course_dir, assignments)),
              file=sys.stderr)
        return 1
    if args.command == "feedback":
        for path in write_feedback(course_dir, results):
            print(printable(path))
        return 0
    for path in write_report(course_dir, results, args.lang):
        print(printable(path))
    return 0


def _release(parser, args, assignments, course_dir):
    """`release`: the student versions of `assignments` (every chapter where None; those
    class_calendar has opened with --calendar), in English and in each --lang, each line it
    prints in the language the class will be told in once it is done: paths.class_language,
    the languages of --lang counted as released (`release --lang zh_CN` speaks Chinese from
    its first line, as `grade`, `report` and `export` will after it)."""
    if args.calendar:
        if assignments:
            parser.error("release: name chapters or give --calendar, not both")
        from autograde import class_calendar
        assignments = class_calendar.published(class_calendar.setting())
        if not assignments:  # (course.release would take none for every chapter)
            print(messages.text("release.nothing_opened",
                                _class_language(course_dir, None, args.lang)))
            return 0
    said = _class_language(course_dir, assignments, args.lang)
    for assignment, folder in course.release(course_dir, assignments, args.db).items():
        earlier = course.answers_shipped(assignment)
        print(messages.text("release.answers", said, assignment=assignment, folder=folder,
                            chapters=", ".join(earlier)) if earlier else
              messages.text("release.no_answers", said, assignment=assignment, folder=folder))
        if args.zip:
            print(messages.text("release.zip", said, assignment=assignment,
                                path=course.write_zip(folder, args.zip)))
    for language in args.lang:
        _release_language(course_dir, assignments or course.assignments(), language,
                          args.zip, said)
    print(messages.text("release.kit", said, path=course_dir.resolve() / "kit"))
    return 0


def _release_language(course_dir, assignments, language, zip_dir, said):
    """The translated student versions (course.release_language) of the English ones just
    released, each listed with the blocks its catalogue left in English, in the language
    `said`."""
    for assignment in assignments:
        folder, unmatched = course.release_language(course_dir, assignment, language)
        print(messages.text("release.left_in_english", said, assignment=assignment,
                            language=language, folder=folder, count=len(unmatched))
              if unmatched else
              messages.text("release.translated", said, assignment=assignment,
                            language=language, folder=folder))
        for cell, message in unmatched:
            shown = message if len(message) <= 100 else message[:97] + "..."
            print("  " + messages.text("where.problem", said,
                                       where=messages.where(f"cell {cell}", said),
                                       message=shown))
        if zip_dir:
            print(messages.text("release.translated_zip", said, assignment=assignment,
                                language=language,
                                path=course.write_zip(folder, Path(zip_dir) / language)))


def _grade(args, assignments, course_dir):
    from autograde import batch, exports
    if args.engine == "nbgrader":
        results = batch.grade_with_nbgrader(course_dir, assignments, args.student, args.db)
        batch.save_results(course_dir, results)  # for `feedback` and `report`
    else:
        limits = {key: value for key, value in (
            ("call_seconds", args.call_seconds), ("notebook_seconds", args.notebook_seconds),
            ("memory_bytes", args.memory_mb and args.memory_mb * 2**20)) if value}
        results = batch.grade(course_dir, assignments, args.student, args.jobs,
                              resume=not args.restart, limits=limits, db_url=args.db,
                              progress=not args.no_progress)
        # the class's other results, saved by earlier runs, for tests.csv (this run's own
        # are in hand: never read back)
        results = batch.load_results(course_dir, assignments, have=results)
    grades = exports.export_grades(course_dir, course_dir / "grades.csv", args.db)
    tests = exports.export_tests(results, course_dir / "tests.csv")
    from .notebook import printable  # (student ids, cell ids and messages: the student's text)
    errors = [r for r in results.values() if r.status != "graded"]
    for result in errors:
        print(printable(f"ERROR {result.student}/{result.assignment}: {result.error}"),
              file=sys.stderr)
    for result in results.values():
        for problem in result.problems:
            if problem.get("kind") == "duplicate":
                print(printable(f"NOTE {result.student}/{result.assignment}: "
                                f"{problem.get('cell')}: {problem.get('message')}"),
                      file=sys.stderr)
    print(messages.text("cli.graded", _class_language(course_dir, assignments),
                        notebooks=len(results), errors=len(errors), grades=grades,
                        tests=tests))
    return 0


def _class_language(course_dir, assignments, releasing=()):
    """The language the commands speak to the instructor in: the class's
    (paths.class_language; `releasing`: the languages a release is writing now), where the
    grader has a catalogue for it."""
    from autograde.paths import class_language
    return messages.supported(class_language(course_dir, assignments, releasing))


if __name__ == "__main__":
    sys.exit(main())
