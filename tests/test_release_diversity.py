"""Chapter 5's release ships the lab it needs and no answer to its own exercises.

Its notebook trains models built with the reference package, so part of `solutions/`
ships beside it (autograde.course.EXTRA_SHIPPED); these tests release the chapter through
nbgrader (about 10 s) and read what came out.
"""
import ast
import json
import os
import subprocess
import sys

import pytest

from autograde import course

ASSIGNMENT = "05_diversity"
# the chapter's exercises, and the package functions that compute one of their answers
EXERCISES = {"relation_scores", "make_heads_identical", "head_similarity",
             "ablation_importance", "prune_heads"}
ANSWERS = EXERCISES | {"head_importance"}  # head_importance returns the ablation scores too


@pytest.fixture(scope="module")
def released(course_release):
    return course_release(ASSIGNMENT) / "release" / ASSIGNMENT


def shipped_python(folder):
    """{path relative to the release folder: parsed module} of every shipped .py file."""
    return {str(p.relative_to(folder)): ast.parse(p.read_text(), str(p))
            for p in sorted(folder.rglob("*.py"))}


def test_the_lab_ships_and_the_answers_do_not(released):
    files = shipped_python(released)
    assert "solutions/diversity_lab.py" in files and "solutions/__init__.py" in files
    assert "solutions/diversity.py" not in files
    # its own checks and the runtime they import; the other chapters' checks (and their
    # diagnoses) stay home
    shipped = {name for name in files if name.startswith("checks/")}
    assert {"checks/__init__.py", "checks/common.py", "checks/diversity.py"} <= shipped
    others = {f"checks/{module}.py" for notebook in course.CHAPTERS.glob("0*.ipynb")
              if notebook.stem != ASSIGNMENT for module in course.notebook_checks(notebook)}
    assert others and not shipped & others, sorted(shipped & others)


def test_no_shipped_file_defines_an_answer(released):
    """No shipped function is named after an exercise, except the checks' own functions,
    which take the student's function `fn` and grade it."""
    found = []
    for name, tree in shipped_python(released).items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ANSWERS:
                args = [a.arg for a in node.args.posonlyargs + node.args.args]
                if not (name.startswith("checks/") and args[:1] == ["fn"]):
                    found.append(f"{name}:{node.lineno} defines {node.name}({', '.join(args)})")
    assert not found, "\n".join(found)


def test_no_shipped_file_imports_the_answers(released):
    """Nothing shipped imports solutions.diversity or an answer's name, and the checks do
    not import solutions at all."""
    for name, tree in shipped_python(released).items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules, names = [a.name for a in node.names], set()
            elif isinstance(node, ast.ImportFrom):
                modules = ["." * node.level + (node.module or "")]
                names = {a.name for a in node.names}
            else:
                continue
            assert not set(modules) & {".diversity", "solutions.diversity"}, \
                f"{name} imports {modules}"
            assert name.startswith("checks/") or not names & ANSWERS, \
                f"{name} imports {sorted(names & ANSWERS)}"
            assert not (name.startswith("checks/")
                        and any(m.split(".")[0] == "solutions" for m in modules)), \
                f"{name} imports solutions: the checks must not rely on the answers"


def _imports(source):
    """The import statements of a code cell's source (magics dropped), as one snippet."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("%"))
    tree = ast.parse(code)
    return "\n".join(ast.unparse(node) for node in tree.body
                     if isinstance(node, (ast.Import, ast.ImportFrom)))


def test_the_released_notebook_imports_from_the_shipped_files(released):
    """The setup cell runs as it is, and every import of every cell resolves, in a fresh
    interpreter that sees only the release folder (not the repository's solutions/)."""
    nb = json.loads((released / f"{ASSIGNMENT}.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    # magics become `pass` (keeping the indentation: the first cell's %pip sits in an `if`)
    setup = "\n".join(line[:len(line) - len(line.lstrip())] + "pass"
                      if line.lstrip().startswith("%") else line
                      for line in "".join(code[0]["source"]).splitlines())
    imports = "\n".join(_imports("".join(c["source"])) for c in code)
    assert "solutions.diversity_lab" in imports
    probe = f"""
{setup}
{imports}
import importlib.util, pathlib, solutions
assert pathlib.Path(solutions.__file__).parent.parent == pathlib.Path.cwd(), solutions.__file__
assert importlib.util.find_spec("solutions.diversity") is None
print("ok", DEVICE, STEPS)
"""
    # unset as in the book build: STEPS is the notebook's own 200 (tests/conftest.py caps it)
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "COURSE_DIVERSITY_STEPS"}}
    env["MPLBACKEND"] = "Agg"
    result = subprocess.run([sys.executable, "-c", probe], cwd=released, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["ok", "cpu", "200"]
