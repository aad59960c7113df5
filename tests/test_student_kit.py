"""What a student gets runs where students work, proven in a bare virtualenv.

A fresh virtualenv gets only requirements-student.txt. Each chapter's zip, as each
edition of the book offers it on the chapter's page (the self-study and the class edition,
in English and in Chinese: `make book`, `make book-class`, `make book-zh`, `make
book-zh-class`; ids [en-...], [en-class-...], [zh_CN-...], [zh_CN-class-...]), is unzipped as
the student guide says, and its notebook runs in Jupyter's own machinery (nbclient, from the
student's environment, the kernel being that environment's python):
  - with the reference answers pasted into the exercise cells: every check passes;
  - untouched: every check cell fails with one line, no traceback through the checks, in
    the edition's language (the checks' catalogue, checks.po);
  - alone in an empty folder, before the checks package is installed: the first cell
    says in one line how to get the checks (its install from the book's site cannot
    reach the placeholder address here);
  - alone, after `pip install` of the wheel the zip holds: every check passes (chapter 5,
    whose lab comes in its zip only, says so in one line).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograde import course, kit
from chapters.checks import common
from tests.across_workers import made_once
from tests.submissions import fill_submission
from tests.translations import CHECKS_CATALOGUE, MESSAGES, read_catalogue

REPO = Path(__file__).resolve().parent.parent
DOWNLOADS = REPO / "_build" / "downloads"
ASSIGNMENTS = course.assignments()
# Each edition of the book: its language, its built site (whose chapter pages link the
# chapter's zip) and the make target that builds it.
EDITIONS = {
    "en": ("en", REPO / "_build" / "html", "make book"),
    "en-class": ("en", REPO / "_build" / "class" / "_build" / "html", "make book-class"),
    "zh_CN": ("zh_CN", REPO / "_build" / "zh_CN" / "_build" / "html", "make book-zh"),
    "zh_CN-class": ("zh_CN", REPO / "_build" / "zh_CN-class" / "_build" / "html",
                    "make book-zh-class"),
}

# Run inside the student's environment: execute a notebook, report every cell's outputs.
RUNNER = r"""
import json, sys
import nbformat
from nbclient import NotebookClient
path, folder = sys.argv[1], sys.argv[2]
nb = nbformat.read(path, as_version=4)
NotebookClient(nb, timeout=900, allow_errors=True, kernel_name="python3",
               resources={"metadata": {"path": folder}}).execute()
cells = []
for cell in nb.cells:
    if cell.cell_type != "code":
        continue
    outputs = [{"type": o.output_type, "ename": o.get("ename"), "evalue": o.get("evalue"),
                "traceback": o.get("traceback"), "text": o.get("text", "")}
               for o in cell.outputs]
    cells.append({"meta": cell.metadata.get("nbgrader", {}), "outputs": outputs})
json.dump(cells, sys.stdout)
"""


def _student_venv(venv):
    """A fresh virtualenv at `venv` holding requirements-student.txt only."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                    "--no-compile", "--disable-pip-version-check",  # as the guide says
                    "-r", str(REPO / "requirements-student.txt")], check=True)


@pytest.fixture(scope="module")
def student_python(run_dir):
    """The python of a fresh virtualenv holding requirements-student.txt only (made once per
    test run: pip installs torch, about 35 s; this file's tests run on one worker,
    tests/conftest.py's ONE_WORKER, as one of them installs a wheel into it for a while)."""
    return made_once(run_dir, "student-venv", _student_venv) / "bin" / "python"


def _unzip(assignment, where, archive=None):
    archive = archive or DOWNLOADS / f"{assignment}.zip"
    assert archive.is_file(), f"{archive} is missing: `make test` builds the book first"
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(where)
    return where / assignment


def _edition_zip(edition, assignment):
    """The zip of `assignment` that `edition`'s page of the chapter links (a copy of
    _build/downloads/[<language>/]<assignment>.zip, under the site's _downloads/)."""
    _, site, make = EDITIONS[edition]
    page = site / "chapters" / f"{assignment}.html"
    if not page.is_file():
        pytest.fail(f"{page} is missing: run `{make}` (`make test` builds every edition)")
    (href,) = set(re.findall(rf'href="([^"]*/{re.escape(assignment)}\.zip)"', page.read_text()))
    return (page.parent / href).resolve()


def _not_implemented(language):
    """The words of the checks' "not implemented yet" in `language`: common.not_implemented,
    from the checks' catalogue in another language ("还没有实现"), up to its colon."""
    english = common.MESSAGES.english["not_implemented"]
    template = english if language == "en" else next(
        m.string for m in read_catalogue(MESSAGES / f"{CHECKS_CATALOGUE}.po")
        if m.context == "common.not_implemented")
    return re.split("[:：]", template.format(name=""), maxsplit=1)[0].strip()


def _run(python, notebook, folder):
    """[{meta, outputs}] of every code cell, the notebook run in `folder`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(PIP_RETRIES="0", PIP_TIMEOUT="3", MPLBACKEND="Agg")  # fail fast, offline
    done = subprocess.run([str(python), "-c", RUNNER, str(notebook), str(folder)], env=env,
                          capture_output=True, text=True, cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _with_answers(assignment, notebook):
    source = json.loads((course.CHAPTERS / f"{assignment}.ipynb").read_text())
    filled = fill_submission(source, json.loads(notebook.read_text()), {})
    notebook.write_text(json.dumps(filled))
    return notebook


def _tests(cells):
    return [c for c in cells if c["meta"].get("grade")]


def _errors(cell):
    return [o for o in cell["outputs"] if o["type"] == "error"]


def _assert_all_green(cells, where):
    tests = _tests(cells)
    assert tests, where
    for cell in tests:
        assert _errors(cell) == [], (where, cell["meta"]["grade_id"], _errors(cell))
        printed = "".join(o["text"] for o in cell["outputs"] if o["type"] == "stream")
        assert "\u2714" in printed, (where, cell["meta"]["grade_id"], printed)


# Slow (half a minute each, the alone test several minutes): every run is what a student
# does, a fresh kernel of the bare virtualenv that imports torch and runs the whole chapter;
# the virtualenv itself is made once per test run.
# By default the two chapters whose zips hold the most kinds of file (earlier chapters'
# reference modules and checks, a data file; the lab, corpus and training; the notebook-alone
# test below runs chapter 1), every chapter with COURSE_STUDENT_KIT_ALL=1: tests/test_kit.py replays
# every chapter's kit in-process.
BARE_VIRTUALENV_CHAPTERS = ASSIGNMENTS if os.environ.get("COURSE_STUDENT_KIT_ALL") == "1" else [
    "07_positions", "08_capstone"]


@pytest.mark.slow
@pytest.mark.parametrize("assignment", BARE_VIRTUALENV_CHAPTERS)
@pytest.mark.parametrize("edition", list(EDITIONS))
def test_unzipped_chapter_runs_in_a_bare_virtualenv(student_python, edition, assignment,
                                                    tmp_path):
    folder = _unzip(assignment, tmp_path, _edition_zip(edition, assignment))
    notebook = folder / f"{assignment}.ipynb"
    language = EDITIONS[edition][0]
    assert json.loads(notebook.read_text())["metadata"].get("course", {}).get(
        "language", "en") == language, f"{edition}'s zip holds a notebook of another language"

    untouched = _run(student_python, notebook, folder)
    for cell in _tests(untouched):
        (error,) = _errors(cell)
        assert error["ename"] == "CheckFailure", (cell["meta"]["grade_id"], error)
        (line,) = error["traceback"]  # one line: the message, no frames of the checks
        assert "File " not in line and "checks/" not in line
        assert _not_implemented(language) in error["evalue"], (cell["meta"]["grade_id"], error)

    _assert_all_green(_run(student_python, _with_answers(assignment, notebook), folder),
                      f"{assignment}, unzipped, with the reference answers")


@pytest.mark.slow
def test_a_notebook_alone_gets_the_checks_package(student_python, tmp_path):
    """Alone, as on Colab: one line when the package cannot be had; after installing the
    wheel from the zip, green checks; chapter 5 names its missing lab in one line."""
    alone = tmp_path / "alone"
    alone.mkdir()
    folders = {a: _unzip(a, tmp_path / "zips") for a in ASSIGNMENTS}
    for assignment, folder in folders.items():
        shutil.copy(folder / f"{assignment}.ipynb", alone / f"{assignment}.ipynb")

    first = _run(student_python, alone / f"{ASSIGNMENTS[0]}.ipynb", alone)[0]
    (error,) = _errors(first)
    assert error["ename"] == "SystemExit" and "The checks are missing" in error["evalue"]

    wheel = folders[ASSIGNMENTS[0]] / kit.WHEEL
    subprocess.run([str(student_python), "-m", "pip", "install", "--quiet", "--no-index",
                    "--disable-pip-version-check", str(wheel)], check=True)
    try:
        for assignment in ASSIGNMENTS:
            notebook = _with_answers(assignment, alone / f"{assignment}.ipynb")
            cells = _run(student_python, notebook, alone)
            if course.answers_shipped(assignment):  # its lab is in its zip only
                (error,) = _errors(cells[0])
                assert error["ename"] == "SystemExit" and "unzipped chapter folder" in error["evalue"]
            else:
                _assert_all_green(cells, f"{assignment} alone, the package installed")
    finally:
        subprocess.run([str(student_python), "-m", "pip", "uninstall", "--quiet", "--yes",
                        kit.DISTRIBUTION], check=True)
