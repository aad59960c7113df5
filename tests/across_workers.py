"""What the workers of one test run share (`make test` runs pytest-xdist's `pytest -n 2`).

xdist runs each session fixture once in every worker. What costs seconds and is the same for
every worker (a release of the course, the catalogue's graded results, the student kits) is
made once per test run with made_once(): the pattern of pytest-xdist's docs, "Making
session-scoped fixtures execute only once".
"""
import os
import shutil
from pathlib import Path

from filelock import FileLock

# A pytest run started by a test of this one (tests/test_unprivileged.py: tests run again as
# `nobody`) takes the releases its parent made from this folder, where they lie under
# release_name(): the same releases, without making them again.
OUTER_RELEASES = "COURSE_TEST_RELEASES"


def made_once(run_dir, name, make):
    """run_dir/name, made by make(path) once per test run: by the first worker that asks for
    it, while the others wait on its file lock, then find it made. A make that raised leaves
    no mark, and the next worker to ask tries again (and fails the same way)."""
    target, done = run_dir / name, run_dir / f"{name}.done"
    with FileLock(run_dir / f"{name}.lock"):
        if not done.exists():
            if target.is_dir():
                shutil.rmtree(target)
            make(target)
            done.touch()
    return target


def release_name(chapters, every_chapter):
    """The name under which a release of `chapters` (sorted, course order) is made once per
    test run: "release-all" when they are `every_chapter`."""
    return "release-" + ("all" if list(chapters) == list(every_chapter) else "-".join(chapters))


def outer_release(name):
    """The folder `name` among the releases a parent run handed down ($COURSE_TEST_RELEASES),
    or None."""
    folder = os.environ.get(OUTER_RELEASES)
    found = Path(folder) / name if folder else None
    return found if found is not None and found.is_dir() else None
