"""The nbgrader course directory: source notebooks in, student versions out.

nbgrader expects `<course>/source/<assignment>/<notebook>.ipynb`; the course keeps each
chapter as `chapters/<assignment>.ipynb` (the single source), so `prepare_source` copies
each chapter there with the files its student needs beside it, and `release` runs
nbgrader's own generate_assignment on it.
"""
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHAPTERS = REPO / "chapters"
# Files shipped beside every notebook, and the chapters that need more: chapter 5's
# experiments use the reference package (its release therefore reveals chapters 1-4).
SHIPPED = ["checks"]
EXTRA_SHIPPED = {"05_diversity": ["solutions"]}
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")


def assignments():
    """Names of the chapter assignments, in course order: ['01_attention', ...]."""
    return sorted(p.stem for p in CHAPTERS.glob("[0-9][0-9]_*.ipynb"))


def shipped_files(assignment):
    """(source path, name) of each file or folder shipped beside the notebook."""
    names = SHIPPED + EXTRA_SHIPPED.get(assignment, [])
    return [((CHAPTERS if n == "checks" else REPO) / n, n) for n in names]


def prepare_source(course_dir, assignment):
    """Copy chapter `assignment` and its shipped files to <course_dir>/source/<assignment>/."""
    target = Path(course_dir) / "source" / assignment
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.copy2(CHAPTERS / f"{assignment}.ipynb", target / f"{assignment}.ipynb")
    for path, name in shipped_files(assignment):
        shutil.copytree(path, target / name, ignore=IGNORE)
    return target


def nbgrader_api(course_dir, db_url=None):
    """nbgrader's Python API on `course_dir` (an in-process equivalent of its CLI)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    # nbgrader runs `alembic` from PATH to create the gradebook: use this environment's.
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    config = Config()
    config.CourseDirectory.root = str(Path(course_dir).resolve())
    if db_url:
        config.CourseDirectory.db_url = db_url
    config.CourseDirectory.ignore = ["__pycache__", "*.pyc", ".ipynb_checkpoints"]
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def release(course_dir=".", only=None, db_url=None):
    """Generate the student version of each chapter into <course_dir>/release/<assignment>/.

    Returns {assignment: release folder}. Raises RuntimeError with nbgrader's log if
    generation fails.
    """
    api = nbgrader_api(course_dir, db_url)
    done = {}
    for assignment in only or assignments():
        prepare_source(course_dir, assignment)
        result = api.generate_assignment(assignment, force=True, create=True)
        if not result["success"]:
            raise RuntimeError(f"nbgrader generate_assignment {assignment} failed:\n"
                               f"{result.get('error', '')}\n{result.get('log', '')}")
        done[assignment] = Path(course_dir).resolve() / "release" / assignment
    return done
