"""Which chapters the class edition publishes, from one setting of _config.yml:

    class_calendar: all              # every chapter (the default)
    class_calendar: 3                # chapters 1-3
    class_calendar:                  # a date per chapter: each opens on its date
      01_attention: 2026-09-07
      02_heads: 2026-09-14
      ...

Later chapters hold earlier chapters' answers by design (chapter 3's page gives chapter 2's
`split_heads`; chapters 5-8's zips ship the solutions of chapters 1-7), so opening chapter
N publishes chapters 1..N and nothing after: the answers of chapter N appear nowhere, and
those of chapters before it only where the course already gives them, once N is open.
A chapter without a date opens with the next dated one; one whose date has not come
closes every chapter after it.

`make book-class` runs `python -m autograde.class_calendar` before building: it writes the
class edition's table of contents (only the published chapters) and its kit (the checks
package of the published chapters that ship no answers), and the book's extension turns
links to unpublished chapters into plain text. COURSE_CLASS_CALENDAR (the same YAML as
the setting) overrides _config.yml, for a rehearsal or a test.
"""
import argparse
import datetime
import os
import sys
from pathlib import Path

import yaml

from autograde import course

ENV = "COURSE_CLASS_CALENDAR"


def setting(config_path=course.REPO / "_config.yml"):
    """The class_calendar setting: COURSE_CLASS_CALENDAR if set, else _config.yml's."""
    if os.environ.get(ENV, "").strip():
        return yaml.safe_load(os.environ[ENV])
    return yaml.safe_load(Path(config_path).read_text()).get("class_calendar", "all")


def published(value="all", today=None):
    """The chapters the class edition publishes for a class_calendar `value`, in order."""
    chapters = course.assignments()
    if value in (None, "all"):
        return chapters
    if isinstance(value, bool) or not isinstance(value, (int, dict)):
        raise ValueError(f"class_calendar must be all, a number of chapters or a date per "
                         f"chapter, not {value!r}")
    if isinstance(value, int):
        if not 0 <= value <= len(chapters):
            raise ValueError(f"class_calendar: {value} chapters, but the course has "
                             f"{len(chapters)}")
        return chapters[:value]
    unknown = set(value) - set(chapters)
    if unknown:
        raise ValueError(f"class_calendar names no chapter {', '.join(sorted(unknown))}: "
                         f"the chapters are {', '.join(chapters)}")
    today = today or datetime.date.today()
    opened = 0
    for index, chapter in enumerate(chapters, start=1):
        date = value.get(chapter)
        if date is None:
            continue
        if not isinstance(date, datetime.date):
            raise ValueError(f"class_calendar: {chapter}'s date {date!r} is not YYYY-MM-DD")
        if date > today:
            break
        opened = index
    return chapters[:opened]


def write_toc(source, target, chapters):
    """`source` (_toc.yml) without the chapter entries not in `chapters`, at `target`."""
    toc = yaml.safe_load(Path(source).read_text())
    closed = {f"chapters/{c}" for c in course.assignments()} - {f"chapters/{c}"
                                                                  for c in chapters}
    for part in toc.get("parts", []):
        part["chapters"] = [entry for entry in part.get("chapters", [])
                            if entry.get("file") not in closed]
    toc["parts"] = [part for part in toc.get("parts", []) if part["chapters"]]
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    Path(target).write_text("# written by `python -m autograde.class_calendar` from _toc.yml: "
                            "the class edition's published chapters\n"
                            + yaml.safe_dump(toc, sort_keys=False))
    return Path(target)


def write_kit(course_dir, target, chapters):
    """<target>/kit/: the checks package of the published chapters that ship no answer
    (release's kit holds them all), with requirements-student.txt beside it."""
    from autograde import kit
    import shutil
    target = Path(target).resolve()  # kit.build_wheel runs pip in another folder
    shutil.rmtree(target, ignore_errors=True)
    public = [a for a in chapters if not course.answers_shipped(a)]
    fixtures = Path(course_dir) / "fixtures"
    (target / "kit").mkdir(parents=True)
    if public:  # no chapter published, no notebook that would install the kit
        modules = sorted(set().union(*(course.checks_modules(a, kit_form=True)
                                           for a in public)))
        kit.build_wheel(target / "kit", modules, [fixtures / f"{a}.npz" for a in public])
    shutil.copy2(course.REPO / "requirements-student.txt", target)
    return target


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograde.class_calendar",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--toc", required=True, help="where to write the class edition's toc")
    parser.add_argument("--kit", required=True, help="the class edition's extra site folder")
    parser.add_argument("--course-dir", default="_build/course", help="the released course")
    args = parser.parse_args(argv)
    chapters = published(setting())
    write_toc(course.REPO / "_toc.yml", args.toc, chapters)
    write_kit(args.course_dir, args.kit, chapters)
    print(f"class edition: {', '.join(chapters) or 'no chapter'} published")
    return 0


if __name__ == "__main__":
    sys.exit(main())
