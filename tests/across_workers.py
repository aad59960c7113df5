"""What the workers of one test run share (`make test` runs pytest-xdist's `pytest -n 3`).

xdist runs each session fixture once in every worker. What costs seconds and is the same for
every worker (a release of the course, the catalogue's graded results, the student kits) is
made once per test run with made_once(): the pattern of pytest-xdist's docs, "Making
session-scoped fixtures execute only once".
"""
import shutil

from filelock import FileLock


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
