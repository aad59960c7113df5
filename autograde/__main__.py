"""python -m autograde release [--course-dir DIR] [--zip DIR] [ASSIGNMENT ...]"""
import argparse
import shutil
import sys
from pathlib import Path

from . import course


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograde", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    rel = commands.add_parser("release", help="build student versions with nbgrader into release/")
    rel.add_argument("assignments", nargs="*", help="default: every chapter")
    rel.add_argument("--course-dir", default=".", help="nbgrader course root (default: .)")
    rel.add_argument("--db", default=None, help="gradebook URL (default: sqlite gradebook.db)")
    rel.add_argument("--zip", default=None, metavar="DIR",
                     help="also write DIR/<assignment>.zip of each student version")
    args = parser.parse_args(argv)
    if args.command == "release":
        for assignment, folder in course.release(args.course_dir, args.assignments or None,
                                                 args.db).items():
            print(f"{assignment}: {folder}")
            if args.zip:
                Path(args.zip).mkdir(parents=True, exist_ok=True)
                archive = shutil.make_archive(str(Path(args.zip) / assignment), "zip",
                                              folder.parent, assignment)
                print(f"{assignment}: {archive}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
