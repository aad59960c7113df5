"""python -m autograde release [--course-dir DIR] [ASSIGNMENT ...]"""
import argparse
import sys

from . import course


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograde", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    rel = commands.add_parser("release", help="build student versions with nbgrader into release/")
    rel.add_argument("assignments", nargs="*", help="default: every chapter")
    rel.add_argument("--course-dir", default=".", help="nbgrader course root (default: .)")
    rel.add_argument("--db", default=None, help="gradebook URL (default: sqlite gradebook.db)")
    args = parser.parse_args(argv)
    if args.command == "release":
        for assignment, folder in course.release(args.course_dir, args.assignments or None,
                                                 args.db).items():
            print(f"{assignment}: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
