"""The student kit: the checks as students get them, judging from stored data.

One source, chapters/checks/, gives two copies. The grader imports it as it is. The kit,
which ships in each chapter's release and in the installable package mha-course-checks,
is generated here:
  - kit_source(): a checks module with the body of every @reference function removed
    (they compute expected outputs, the catalogued bugs' outputs and fixed inputs), and
    `KIT = True` in common.py;
  - record(): the fixtures, what those functions returned while the chapter's reference
    solution ran the visible part of each test cell, stored without pickle (.npz);
  - write_checks() puts both beside a chapter's notebook, build_wheel() makes the package.

`python -m autograde.kit record OUT_DIR ASSIGNMENT...` records in a fresh interpreter,
so that nothing of the caller's state reaches the fixtures.
"""
import ast
import json
import linecache
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from IPython.core.inputtransformer2 import TransformerManager

from autograde import checks_catalogue
from autograde.notebook import definitions, parse
from autograde.paths import CHAPTERS, CHECKS, REPO
DISTRIBUTION = "mha-course-checks"
VERSION = "1.0.0"
# What the kit needs besides the checks: loose on purpose, so that installing it on Colab
# or a hub keeps the torch they have (requirements-student.txt pins a laptop's versions).
KIT_REQUIRES = ["torch>=2.1", "numpy>=1.24"]
WHEEL = f"{DISTRIBUTION.replace('-', '_')}-{VERSION}-py3-none-any.whl"
# In each chapter notebook's first cell, replaced by wheel_url() when the notebook is
# released or shown in the book: the one place the URL comes from is _config.yml.
WHEEL_URL_TOKEN = "COURSE_KIT_WHEEL_URL"


def wheel_url(site):
    """Where the book at `site` (its html.baseurl) serves the kit's wheel."""
    return f"{site.rstrip('/')}/kit/{WHEEL}"


HIDDEN = re.compile(r"[ \t]*### BEGIN HIDDEN TESTS\n.*?[ \t]*### END HIDDEN TESTS\n?", re.S)
SOLUTION = re.compile(r"[ \t]*### BEGIN SOLUTION\n(.*?)[ \t]*### END SOLUTION\n?", re.S)
STUB = ("raise AssertionError('computed by the grader; the kit reads its results from "
        "checks/fixtures')")


def visible_part(test_source):
    """A test cell's code without its hidden tests (what nbgrader gives the student)."""
    return HIDDEN.sub("", test_source)


def solution_code(source):
    """A solution cell's code with nbgrader's markers removed (the reference answer)."""
    return SOLUTION.sub(lambda m: m.group(1), source)


def _is_reference(decorator):
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Name) and target.id == "reference") or \
        (isinstance(target, ast.Attribute) and target.attr == "reference")


def kit_source(text, where="a checks module"):
    """`text` (a checks module) as the kit ships it: every function decorated @reference
    keeps its decorators and signature, its body becomes one line that never runs; in
    common.py, `KIT = False` becomes `KIT = True`."""
    tree = parse(text, where)
    lines = text.splitlines(keepends=True)
    cuts = []  # (first line, last line, indent) of each body to replace, 1-based
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                any(_is_reference(d) for d in node.decorator_list):
            first = node.body[0].lineno
            indent = " " * node.body[0].col_offset
            cuts.append((first, node.end_lineno, indent))
    for first, last, indent in sorted(cuts, reverse=True):
        lines[first - 1:last] = [f"{indent}{STUB}\n"]
    out = "".join(lines)
    if re.search(r"^KIT = False$", out, re.M):
        out = re.sub(r"^KIT = False$", "KIT = True  # the student's kit: answers from fixtures",
                     out, count=1, flags=re.M)
    parse(out, where)  # still Python
    return out


def _source(cell):
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _code_cells(notebook_path):
    """[(number, nbgrader metadata, source)] of the code cells of a notebook."""
    nb = json.loads(Path(notebook_path).read_text())
    return [(number, cell.get("metadata", {}).get("nbgrader", {}), _source(cell))
            for number, cell in enumerate(nb["cells"]) if cell["cell_type"] == "code"]


def _compiled_cell(source, filename):
    """compile(source, filename), its lines registered in linecache, as Jupyter does: a
    traceback through the student's cell then quotes their line (checks.operations.
    student_line names it in a check's message)."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return compile(source, filename, "exec")


def chapter_namespace(notebook_path, cells=None, checks=None):
    """The names a chapter's test cells see: its given cells' imports, definitions and
    constants (the demonstrations grade nothing), and its solution cells, with `cells`
    ({grade_id: code}) in place of the reference answers. checks: {alias: module} to bind
    after the given imports (e.g. the kit's copy of a checks module)."""
    transform = TransformerManager().transform_cell
    namespace = {"__name__": "__main__"}
    name = Path(notebook_path).name
    for number, meta, source in _code_cells(notebook_path):
        if meta.get("grade"):
            continue
        if meta.get("solution"):
            code = (cells or {}).get(meta.get("grade_id"), solution_code(source))
            exec(_compiled_cell(transform(code), f"{name} cell {number}"), namespace)
        for _, text in ([] if meta.get("solution") else definitions(source, transform)):
            try:  # one at a time, as the grader runs them: e.g. `x[:, 4:] = 1` needs a
                exec(compile(text, f"{name} cell {number}", "exec"), namespace)  # demo's x
            except Exception:
                pass
        namespace.update(checks or {})
    return namespace


def run_visible_tests(notebook_path, namespace, stop=False, hidden=False):
    """{test grade_id: None, or the message of what it raised}: the visible part of each
    test cell (hidden=True: the whole cell), run in a copy of `namespace`; stop=True:
    raise RuntimeError at a failure."""
    results = {}
    for number, meta, source in _code_cells(notebook_path):
        if not meta.get("grade"):
            continue
        try:
            exec(compile(source if hidden else visible_part(source),
                         f"{Path(notebook_path).name} cell {number}", "exec"), dict(namespace))
            results[meta["grade_id"]] = None
        except Exception as error:
            if stop:
                raise RuntimeError(f"{Path(notebook_path).name} cell {number} "
                                   f"({meta['grade_id']}) failed on the reference solution "
                                   f"while recording the kit's fixtures: {error!r}") from error
            results[meta["grade_id"]] = f"{type(error).__name__}: {error}"
    return results


def _record_chapter(notebook_path, common):
    """{call key: {slot: (signature, result)}} of the visible tests of one chapter, run on
    its reference solution (`common`: the notebook's own checks.common). Raises
    RuntimeError if a visible test fails on it."""
    namespace = chapter_namespace(notebook_path)
    with common.recording() as recorded:
        run_visible_tests(notebook_path, namespace, stop=True)
    return recorded


def record(out_dir, assignments):
    """Write <out_dir>/<assignment>.npz for each assignment, in a fresh interpreter that
    runs the notebooks as Jupyter does: in chapters/, their folder, whence their own
    `from checks import ...` imports the course's checks (the grader's form)."""
    path = os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    done = subprocess.run([sys.executable, "-m", "autograde.kit", "record",
                           str(Path(out_dir).resolve()), *assignments], cwd=CHAPTERS,
                          capture_output=True, text=True,
                          env={**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": path,
                               "COURSE_LANGUAGE": "en"})  # (the others: common.reference)
    if done.returncode != 0:
        raise RuntimeError(f"recording the kit's fixtures failed:\n{done.stdout[-3000:]}"
                           f"{done.stderr[-5000:]}")
    return {a: Path(out_dir) / f"{a}.npz" for a in assignments}


def write_checks(target, modules, fixtures):
    """checks/ at `target` in kit form: the given modules (names), the fixture files, and
    the messages' catalogues (locale/<language>/LC_MESSAGES/checks.mo)."""
    target = Path(target)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for module in modules:
        path = CHECKS / f"{module}.py"
        (target / f"{module}.py").write_text(kit_source(path.read_text(), str(path)))
    (target / "fixtures").mkdir()
    for fixture in fixtures:
        shutil.copy2(fixture, target / "fixtures" / Path(fixture).name)
    # the messages of these modules in each other language, compiled for the standard
    # library's gettext (checks/language.py; the kit runs without Babel)
    checks_catalogue.write_compiled(target / "locale", modules)
    return target


def build_wheel(out_dir, modules, fixtures):
    """The package mha-course-checks (the kit form of the checks `modules`, and `fixtures`,
    a list of .npz paths) as a wheel in `out_dir`; returns its path. Built by pip with the
    setuptools of this environment, offline."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as staging:
        staging = Path(staging)
        write_checks(staging / "checks", modules, fixtures)
        (staging / "pyproject.toml").write_text(PYPROJECT.format(
            name=DISTRIBUTION, version=VERSION, requires=json.dumps(KIT_REQUIRES)))
        for old in out_dir.glob(f"{DISTRIBUTION.replace('-', '_')}-*.whl"):
            old.unlink()
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                        "--no-build-isolation", "--wheel-dir", str(out_dir), str(staging)],
                       check=True, cwd=staging)
    wheel = out_dir / WHEEL
    if not wheel.is_file():
        raise RuntimeError(f"pip wheel did not write {wheel}")
    (out_dir / "index.html").write_text(  # for pip install --find-links <site>/kit/
        f'<!DOCTYPE html>\n<html><body><a href="{WHEEL}">{WHEEL}</a></body></html>\n')
    return wheel


PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
description = "The checks of the multi-head attention course's exercises (no answers inside)"
requires-python = ">=3.9"
dependencies = {requires}

[tool.setuptools]
packages = ["checks"]

[tool.setuptools.package-data]
checks = ["fixtures/*.npz", "locale/*/LC_MESSAGES/*.mo"]
"""


def main(argv):
    if len(argv) < 3 or argv[0] != "record":
        sys.exit("usage: python -m autograde.kit record OUT_DIR ASSIGNMENT...")
    # the notebooks' `checks`, from the working directory (record() runs this in chapters/)
    from checks import common
    for assignment in argv[2:]:
        recorded = _record_chapter(CHAPTERS / f"{assignment}.ipynb", common)
        common.save_fixtures(Path(argv[1]) / f"{assignment}.npz", recorded)


if __name__ == "__main__":
    main(sys.argv[1:])
