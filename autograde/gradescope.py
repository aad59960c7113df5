"""Gradescope's autograder for one chapter: `python -m autograde gradescope 01_attention`
writes autograder.zip, which Gradescope unpacks into /autograder/source.

Inside the zip:
- setup.sh (Gradescope runs it once, as root, when it builds the image): Python 3.11,
  bubblewrap, a virtualenv at /autograder/venv with the grader's packages at the pins of
  requirements.txt (requirements-gradescope.txt, the lines of GRADER_PACKAGES);
- run_autograder (Gradescope runs it for each submission): this module's `run`, which
  grades /autograder/submission/*.ipynb with `batch.grade`, the same grader as `python -m
  autograde grade` (each submission in its own sandboxed process, hidden tests on fresh
  inputs), and writes /autograder/results/results.json. Whatever happens, a results.json
  is written: a crash of the grader itself gives one that says so;
- the grader and the course (autograde/, chapters/, solutions/, _config.yml) and a
  course directory with the chapter already released (course/: nbgrader's source/,
  release/ and gradebook.db), built here so Gradescope runs nbgrader only to record.

results.json (Gradescope's format): `score`, `output` (what the student reads at the top),
and one entry per test cell: `name` (its grade id), `score`, `max_score`, `status`,
`output` (the check's message, naming the mistake when it knows it) and `visibility`: a
test cell holding hidden tests is `after_published`, so its result, and the total, show
only once the instructor publishes the grades.
"""
import json
import os
import shlex
import shutil
import sys
import tempfile
import traceback
import zipfile
from pathlib import Path

from autograde import course, messages
from autograde.notebook import Submission
from autograde.paths import release_dir, released_language

# babel: the grader's catalogues (autograde.messages) for a notebook in another language
GRADER_PACKAGES = ("torch", "numpy", "matplotlib", "nbformat", "nbgrader", "tqdm", "pyyaml",
                   "babel")
SHIPPED_TREES = ("autograde", "chapters", "solutions")
# of locales/, only the grader's catalogues: the book's are no business of the grader's
SHIPPED_CATALOGUES = f"*/LC_MESSAGES/{messages.DOMAIN}.po"
SHIPPED_FILES = ("_config.yml", "requirements.txt")
SKIPPED = ("__pycache__", ".ipynb_checkpoints")
HIDDEN_MARK = "### BEGIN HIDDEN TESTS"
STUDENT = "student"  # the one student of a Gradescope run, in the course directory's layout
ROOT = "/autograder"

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once when it builds the autograder (written by
# `python -m autograde gradescope {assignment}`; base image: Ubuntu 22.04).
set -euo pipefail
apt-get update
apt-get install -y --no-install-recommends python3.11 python3.11-venv bubblewrap
python3.11 -m venv /autograder/venv
/autograder/venv/bin/pip install --quiet pip==24.3.1
# the CPU build of torch: PyPI's Linux wheel pulls gigabytes of CUDA libraries
/autograder/venv/bin/pip install --quiet {torch_pin} --index-url https://download.pytorch.org/whl/cpu
/autograder/venv/bin/pip install --quiet -r /autograder/source/requirements-gradescope.txt
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for each submission (written by `python -m autograde gradescope
# {assignment}`): grade /autograder/submission into /autograder/results/results.json.
results=/autograder/results/results.json
mkdir -p /autograder/results
rm -f "$results"
cd /autograder/source
PATH=/autograder/venv/bin:$PATH PYTHONPATH=/autograder/source \\
  python -m autograde.gradescope run {assignment} --root /autograder
if [ ! -s "$results" ]; then  # the grader did not even start: say so, never leave none
  printf '%s\\n' {failed_to_start} > "$results"
fi
"""


def run_autograder(assignment, language=None):
    """run_autograder's text for `assignment`: where the grader cannot even start, it writes
    a results.json that says so in `language` (the class's, build's: no notebook is read
    then), its JSON in ASCII and shell-quoted."""
    said = messages.supported(language or messages.ENGLISH)
    failed = {"score": 0, "tests": [],
              "output": messages.text("gradescope.failed_to_start", said)}
    return RUN_AUTOGRADER.format(assignment=assignment,
                                 failed_to_start=shlex.quote(json.dumps(failed)))


def grader_requirements():
    """The lines of requirements.txt for GRADER_PACKAGES: the same pins, one source."""
    lines = []
    for line in (course.REPO / "requirements.txt").read_text().splitlines():
        name = line.split("==")[0].strip().lower()
        if name in GRADER_PACKAGES:
            lines.append(line.strip())
    missing = set(GRADER_PACKAGES) - {line.split("==")[0].lower() for line in lines}
    if missing:
        raise RuntimeError(f"requirements.txt pins none of {', '.join(sorted(missing))}")
    return lines


def _add_tree(archive, folder, arcname):
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and not any(part in SKIPPED for part in path.parts):
            archive.write(path, f"{arcname}/{path.relative_to(folder).as_posix()}")


def _add_script(archive, name, text):
    info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
    info.external_attr = 0o100755 << 16  # executable: Gradescope runs them as they are
    archive.writestr(info, text)


def build(assignment, output, language=None):
    """Write autograder.zip for `assignment` at `output`; returns its path. `language`
    (e.g. "zh_CN"): the class's, where it is not English: the chapter's release in it
    (course.release_language) is shipped too, and what the grader says where no notebook
    tells the language (an upload without the notebook) is said in it."""
    if assignment not in course.assignments():
        raise ValueError(messages.text("gradescope.no_chapter",
                                       messages.supported(language or messages.ENGLISH),
                                       name=repr(assignment),
                                       chapters=", ".join(course.assignments())))
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    requirements = grader_requirements()
    torch_pin = next(line for line in requirements if line.lower().startswith("torch=="))
    with tempfile.TemporaryDirectory() as scratch:
        course_dir = Path(scratch) / "course"
        course.release(course_dir, [assignment])
        parts = [f"source/{assignment}", f"release/{assignment}"]
        if language and language != messages.ENGLISH:
            course.release_language(course_dir, assignment, language)
            parts.append(release_dir(course_dir, language).relative_to(course_dir).as_posix()
                         + f"/{assignment}")
        partial = output.with_name(output.name + ".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            _add_script(archive, "setup.sh", SETUP_SH.format(assignment=assignment,
                                                             torch_pin=torch_pin))
            _add_script(archive, "run_autograder", run_autograder(assignment, language))
            archive.writestr("requirements-gradescope.txt", "\n".join(requirements) + "\n")
            for name in SHIPPED_FILES:
                archive.write(course.REPO / name, name)
            for name in SHIPPED_TREES:
                _add_tree(archive, course.REPO / name, name)
            for path in sorted(messages.LOCALES.glob(SHIPPED_CATALOGUES)):
                archive.write(path, path.relative_to(course.REPO).as_posix())
            for part in parts:
                _add_tree(archive, course_dir / part, f"course/{part}")
            archive.write(course_dir / "gradebook.db", "course/gradebook.db")
        os.replace(partial, output)
    return output


# -- at Gradescope, for each submission ------------------------------------------------
def graded_cells(source_notebook):
    """[(grade id, max points, holds hidden tests)] of the chapter's test cells, in order."""
    cells = []
    for cell in json.loads(Path(source_notebook).read_text())["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") and cell.get("cell_type") == "code":
            source = "".join(cell.get("source", ""))
            cells.append((meta["grade_id"], float(meta.get("points", 0)),
                          HIDDEN_MARK in source))
    return cells


def _choose_notebook(submission, assignment):
    """(path, note) of the notebook to grade, or (None, why none can be); a note is
    (template key of autograde.messages, its fields), said in a language once known, or
    None."""
    wanted = f"{assignment}.ipynb"
    found = sorted(p for p in Path(submission).rglob("*.ipynb")
                   if p.is_file() and ".ipynb_checkpoints" not in p.parts)
    exact = [p for p in found if p.name == wanted]
    if len(exact) == 1:
        return exact[0], None
    if not found:
        return None, ("gradescope.no_notebook", {"wanted": wanted})
    if len(found) == 1:  # one student, one notebook: the browser may have renamed it
        return found[0], ("gradescope.only_notebook", {"found": found[0].name, "wanted": wanted})
    names = ", ".join(p.relative_to(submission).as_posix() for p in found)
    return None, ("gradescope.several_named" if exact else "gradescope.none_named",
                  {"count": len(found), "names": names, "wanted": wanted})


def _said(note, language):
    """A note of _choose_notebook in `language` ("" for none)."""
    return messages.text(note[0], language, **note[1]) if note else ""


def results_json(result, cells, note=None):
    """Gradescope's results.json (a dict) for one NotebookResult of `batch.grade`; `note`:
    which notebook was graded (_choose_notebook's), said in the notebook's language."""
    hidden = {grade_id for grade_id, _, has_hidden in cells if has_hidden}
    language = result.language  # (the notebook's: its sentences are the student's)
    lines = [_said(note, language)] if note else []
    if hidden:
        lines.append(messages.text("gradescope.hidden", language, hidden=len(hidden),
                                   cells=len(cells)))
    if result.status != "graded":
        lines.append(messages.text("gradescope.not_graded", language,
                                   error=result.error.strip()))
    for problem in result.problems:
        where = problem.get("cell", "")
        said = messages.problem_message(problem, language)
        lines.append(messages.text("where.problem", language,
                                   where=messages.where(where, language),
                                   message=said).strip(": ："))
    tests = []
    for test in result.tests:
        tests.append({
            "name": test.grade_id, "score": test.points, "max_score": test.max_points,
            "status": "passed" if test.passed else "failed",
            "output": (test.output or messages.text("status.passed", language)) if test.passed
            else (test.message or test.status),
            "visibility": "after_published" if test.grade_id in hidden else "visible"})
    return {"score": result.score, "output": "\n".join(lines), "tests": tests,
            "stdout_visibility": "hidden"}


def _not_graded(cells, message, language=messages.ENGLISH):
    """results.json for a submission the grader never reached: every test cell at 0."""
    return {"score": 0.0, "output": message, "stdout_visibility": "hidden",
            "tests": [{"name": grade_id, "score": 0.0, "max_score": points,
                       "status": "failed",
                       "output": messages.text("gradescope.see_above", language),
                       "visibility": "visible"} for grade_id, points, _ in cells]}


def _sandbox_works():
    """Whether bubblewrap can make its namespaces here (a container may forbid it)."""
    import subprocess
    from autograde.remote import bwrap_path
    bwrap = bwrap_path()
    if not bwrap:
        return False
    done = subprocess.run([bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                           "--unshare-all", "--die-with-parent", "true"],
                          capture_output=True, timeout=60)
    return done.returncode == 0


def grade_submission(assignment, root):
    """Grade <root>/submission for `assignment` with the course in <root>/source/course;
    returns the results.json dict."""
    from autograde import batch
    root = Path(root)
    template = root / "source" / "course"
    cells = graded_cells(template / "source" / assignment / f"{assignment}.ipynb")
    notebook, note = _choose_notebook(root / "submission", assignment)
    if notebook is None:
        # no notebook to tell the language: the chapter's release's (build's `language`)
        language = _released(assignment, root)
        return _not_graded(cells, _said(note, language), language)
    if not _sandbox_works():
        # (the instructor reads it in the autograder's output: in the class's language)
        print("WARNING: " + messages.text("gradescope.no_bubblewrap",
                                          _released(assignment, root)), flush=True)
        os.environ["AUTOGRADE_NO_BWRAP"] = "1"
    with tempfile.TemporaryDirectory(dir=root) as scratch:
        course_dir = Path(scratch) / "course"
        shutil.copytree(template, course_dir)
        target = course_dir / "submitted" / STUDENT / assignment
        target.mkdir(parents=True)
        shutil.copyfile(notebook, target / f"{assignment}.ipynb")
        graded = batch.grade(course_dir, [assignment], [STUDENT], jobs=1, resume=False,
                             progress=False, log=lambda line: print(line, flush=True))
        result = graded[(STUDENT, assignment)]
    return results_json(result, cells, note)


def _language(assignment, root):
    """The language of the upload's notebook (the one _choose_notebook grades), else the
    chapter's release's (build's `language`), else English: what a failure is said in."""
    try:
        notebook, _ = _choose_notebook(Path(root) / "submission", assignment)
        released = _released(assignment, root)
        return Submission.read(notebook).language(released) if notebook else released
    except Exception:  # (the grader failed: this must not)
        return messages.ENGLISH


def _released(assignment, root):
    """The language the chapter was released in at build (paths.released_language)."""
    return messages.supported(released_language(Path(root) / "source" / "course", assignment))


def run(assignment, root=ROOT):
    """Write <root>/results/results.json for the submission, whatever happens; 0."""
    path = Path(root) / "results" / "results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = grade_submission(assignment, root)
    except BaseException as error:  # the grader's own failure: still a results.json
        traceback.print_exc()
        data = {"score": 0.0, "tests": [], "stdout_visibility": "hidden",
                "output": messages.text("gradescope.failed", _language(assignment, root),
                                        error=type(error).__name__)}
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data, indent=1))
    os.replace(partial, path)
    # (the instructor's line in the autograder's output: in the class's language)
    print(messages.text("gradescope.score", _released(assignment, root), assignment=assignment,
                        score=data["score"],
                        max_score=sum(t["max_score"] for t in data["tests"]), path=path),
          flush=True)
    return 0


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(prog="python -m autograde.gradescope")
    commands = parser.add_subparsers(dest="command", required=True)
    grade = commands.add_parser("run", help="grade <root>/submission (run_autograder)")
    grade.add_argument("assignment")
    grade.add_argument("--root", default=ROOT, help="Gradescope's /autograder")
    args = parser.parse_args(argv)
    return run(args.assignment, args.root)


if __name__ == "__main__":
    sys.exit(main())
