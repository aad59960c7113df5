"""The grader's modules read as its pipeline: no import circle among them, and the package
docstring's pipeline names every module, each once, in an order that exists."""
import ast
import re
from pathlib import Path

import autograde

PACKAGE = Path(autograde.__file__).resolve().parent
MODULES = sorted(path.stem for path in PACKAGE.glob("*.py"))


def own_imports(path):
    """{module of autograde} that the file at `path` imports, at any depth (inside functions
    too): `import autograde.x`, `from autograde import x`, `from autograde.x import y`,
    `from . import x`, `from .x import y`. A name that is no module is the package itself
    (`__init__`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "autograde":
                    found.add(parts[1] if len(parts) > 1 else "__init__")
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and (node.module or "").split(".")[0] != "autograde":
                continue
            inner = (node.module or "").split(".")[0 if node.level else 1:]
            if inner and inner[0]:
                found.add(inner[0])
            else:  # from autograde import x / from . import x: a module, or the package's
                found |= {a.name if a.name in MODULES else "__init__" for a in node.names}
    return found - {path.stem}


def test_own_imports_reads_every_form():
    source = ("import autograde.wire\nfrom autograde import trees, NESTED\n"
              "from autograde.paths import REPO\ndef f():\n    from . import results\n"
              "    from .engine import Grader\nimport os\n")
    path = PACKAGE.parent / "tests" / "_imports_probe.py"
    try:
        path.write_text(source)
        assert own_imports(path) == {"wire", "trees", "__init__", "paths", "results", "engine"}
    finally:
        path.unlink()


def import_graph():
    return {module: own_imports(PACKAGE / f"{module}.py") for module in MODULES}


def cycle(graph):
    """One import circle of `graph` as [a, b, ..., a], or None."""
    state, stack = {}, []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for other in sorted(graph.get(module, ())):
            if state.get(other) == "open":
                return stack[stack.index(other):] + [other]
            if other not in state:
                found = visit(other)
                if found:
                    return found
        stack.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def test_cycle_finds_a_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_circle_among_the_graders_modules():
    graph = import_graph()
    assert set(graph["engine"]) >= {"notebook", "forbids", "remote", "results"}  # (read)
    assert cycle(graph) is None, f"import circle: {' -> '.join(cycle(graph))}"


def pipeline():
    """[(module, what it does)] of the package docstring's pipeline, in its order."""
    doc = autograde.__doc__
    block = doc.split("in the\norder the modules run", 1)[1].split("\n\n", 2)[1]
    # (a module's line is indented by 4; what continues it, further)
    return [tuple(re.match(r"    (\S+)\s+(.*)", line).groups()) for line in block.splitlines()
            if not line.startswith(" " * 5)]


def test_the_package_docstring_names_every_module_once():
    steps = [module for module, _ in pipeline()]
    assert steps[0] == "__main__" and steps[-1] == "exports"
    assert len(steps) == len(set(steps)), "a module is named twice in the pipeline"
    assert set(steps) <= set(MODULES), f"no such module: {set(steps) - set(MODULES)}"
    around = autograde.__doc__.split("Around it:", 1)[1]
    others = set(MODULES) - set(steps) - {"__init__"}
    unplaced = {m for m in others if not re.search(rf"\b{m}\b", around)}
    assert not unplaced, f"modules the docstring does not place: {sorted(unplaced)}"
    for stage in ("notebook", "sandbox", "engine", "record"):  # read, run, judged, recorded
        assert stage in steps


# -- the checks, one way; the requests between grader and sandbox, declared once -------------
def _imports_of(path):
    """[(module, names)] of every import in the file at `path` (inside functions too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append(("." * node.level + (node.module or ""),
                          tuple(alias.name for alias in node.names)))
    return found


def test_the_grader_edits_no_import_path_and_imports_the_checks_one_way():
    for module in MODULES:
        if module == "sandbox":  # (the student's process: its release goes on its path)
            continue
        tree = ast.parse((PACKAGE / f"{module}.py").read_text())
        touched = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                   and node.attr == "path" and isinstance(node.value, ast.Name)
                   and node.value.id == "sys"]
        assert not touched, f"autograde/{module}.py uses sys.path, line {touched}"
        for name, _ in _imports_of(PACKAGE / f"{module}.py"):
            # (kit's recording process runs the notebooks in chapters/, as Jupyter does)
            assert name.split(".")[0] != "checks" or module == "kit", \
                f"autograde/{module}.py imports the top-level checks ({name})"


def test_the_sandbox_holds_no_judging_code_of_the_checks():
    from autograde import remote
    checks = {name for name, names in _imports_of(PACKAGE / "sandbox.py")
              if name.split(".")[0] in ("checks", "chapters")}
    assert checks == {"chapters.checks"}
    imported = {n for name, names in _imports_of(PACKAGE / "sandbox.py")
                if name == "chapters.checks" for n in names}
    assert imported == {"nested", "operations"}
    # (repair: the repair family's edits of the student's code, made where it lives; pure
    # code that reads and writes code, holding no answer and no message)
    assert {Path(p).name for p, target in remote.SANDBOX_FILES.items()
            if "/chapters/" in target} == {"nested.py", "operations.py", "repair.py"}
    operations = (PACKAGE.parent / "chapters" / "checks" / "operations.py")
    # (os, sysconfig, traceback: student_line finds the student's own frame of a traceback;
    # sys: which frames are the course's package, looked up in sys.modules, not imported;
    # inspect: parameter_names, an argument named as the student's code names it;
    # linecache: the code of a traced line, attempt_traced; ast, json: line_shapes reads the
    # names on the raising line and writes their shapes as bounded JSON text)
    # (copy: an instance of the student's class copied with its class mutated; ".": its one
    # sibling, repair)
    assert {name for name, _ in _imports_of(operations)} <= {
        "contextvars", "importlib", "re", "warnings", "dataclasses", "torch", "os",
        "sysconfig", "traceback", "inspect", "sys", "linecache", "ast", "json", "copy",
        "."}, "operations imports the checks"
    assert [names for name, names in _imports_of(operations) if name == "."] == [("repair",)]
    assert {name for name, _ in _imports_of(operations.parent / "repair.py")} <= {
        "ast", "copy", "textwrap"}, "repair imports more than the standard library's ast"


def test_every_request_is_declared_once_and_served():
    from autograde import protocol, sandbox
    served = {name[3:] for name in dir(sandbox.Child) if name.startswith("op_")}
    assert served == set(protocol.CHILD)
    for module in ("remote", "sandbox"):  # requests come from protocol.request() only
        tree = ast.parse((PACKAGE / f"{module}.py").read_text())
        literal = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Dict)
                   and any(isinstance(k, ast.Constant) and k.value == "op" for k in node.keys)]
        assert not literal, f"autograde/{module}.py writes a request by hand, line {literal}"


def test_requests_and_replies_are_checked_against_the_declaration():
    import pytest

    from autograde import protocol
    assert protocol.request("lookup", name="x") == {"op": "lookup", "name": "x"}
    assert protocol.request("kill", protocol.ZYGOTE) == {"op": "kill"}
    for bad, why in (({"op": "nosuch"}, "unknown op 'nosuch'"),
                     ({"op": "lookup"}, "op 'lookup': missing name"),
                     ({"op": "len", "target": {}, "extra": 1}, "op 'len': unexpected extra"),
                     (["op"], "a request is not an object")):
        with pytest.raises(protocol.ProtocolError, match=re.escape(why)):
            protocol.check_request(bad)
    with pytest.raises(protocol.ProtocolError):
        protocol.request("call", target={"ref": 1}, args={"list": []})  # no kwargs
    protocol.check_reply("call", ["value", "call", "stdout"])
    protocol.check_reply("run", ["error", "traceback", "stdout"])
    # an error of the student's code carries the shapes on its raising line (operations.
    # raised_line_shapes), asked for on a call the grader makes itself ("traced")
    protocol.check_reply("call", ["error", "traceback", "stdout", "line_shapes"])
    protocol.request("call", target={"ref": 1}, args={"list": []}, kwargs={"dict": {}},
                     grad=True, traced=True)
    with pytest.raises(protocol.ProtocolError, match="a reply to 'call' holds line_shapes"):
        protocol.check_reply("call", ["value", "stdout", "line_shapes"])
    with pytest.raises(protocol.ProtocolError, match="a reply to 'run' holds value"):
        protocol.check_reply("run", ["value", "stdout"])


# -- one verdict, one journey -----------------------------------------------------------------
def test_a_submission_is_read_once_from_its_file_to_the_gradebooks_copy(tmp_path, monkeypatch):
    """Its digest (the resume fingerprint), its validation and plan, and the answers the
    gradebook's copy of it holds all come from one read of the file."""
    import builtins
    import json

    from autograde import course, engine, notebook, record
    source = course.CHAPTERS / "01_attention.ipynb"
    spec = engine.Assignment.from_source(source, imports=False)
    path = tmp_path / "01_attention.ipynb"
    path.write_bytes(source.read_bytes())
    opened, real_open = [], builtins.open
    monkeypatch.setattr(builtins, "open", lambda file, *args, **kwargs: (
        opened.append(str(file)), real_open(file, *args, **kwargs))[1])
    submission = notebook.Submission.read(path)
    assert engine.fingerprint(submission, spec) == engine.fingerprint(
        notebook.Submission.read(path), spec)
    opened.clear()
    nb = submission.notebook(spec)
    assert notebook.plan(nb, spec, lambda code: code)
    staged = record.staged_notebook(json.loads(source.read_text()), submission.answers())
    assert str(path) not in opened
    assert [c["source"] for c in staged["cells"] if c.get("metadata", {}).get(
        "nbgrader", {}).get("solution")] == ["".join(c["source"]) for c in nb["cells"] if c.get(
            "metadata", {}).get("nbgrader", {}).get("solution")]


def test_what_reading_refuses_is_said_as_before(tmp_path):
    from autograde import notebook
    missing = notebook.Submission.read(tmp_path / "a.ipynb")
    assert missing.digest == "missing" and str(missing.error) == \
        "no notebook named a.ipynb was submitted"
    (tmp_path / "b.ipynb").write_bytes(b"")
    empty = notebook.Submission.read(tmp_path / "b.ipynb")
    assert str(empty.error) == "b.ipynb is empty (0 bytes)" and empty.answers() == {}
    (tmp_path / "c.ipynb").write_bytes(b"x" * 3 * 2**20)
    big = notebook.Submission.read(tmp_path / "c.ipynb", max_bytes=2**20)
    assert big.data is None and big.digest.startswith("over the limit: 3145728 bytes, ")
    assert str(big.error).startswith("c.ipynb is 3 MB, over the limit of 1 MB")
