"""Read a submitted notebook, validate it, and plan what of it runs in the student's process.

The first stage of grading, and the only one that reads a submission: read_submission()
(its bytes, bounded, then JSON, nbformat's schema and this chapter's exercises), then
plan(), which turns its cells into the steps the sandbox runs (engine.Grader), and
duplicates(), which notes exercises handed in twice. Every parse of Python in the grader's
process goes through parse(), under one lock.
"""
import ast
import hashlib
import json
import threading
import warnings
from pathlib import Path

from autograde import messages
from autograde.paths import CHAPTERS

NOTEBOOK_FILE_BYTES = 20 * 2**20  # the submitted .ipynb itself (engine.LIMITS)
# statements run one by one (an upper bound, counted before parsing: lines and ';'):
# the chapters' longest cell has under 100, a whole notebook under 600 (engine.LIMITS)
CELL_STATEMENTS = 2_000
NOTEBOOK_STATEMENTS = 10_000

# CPython 3.11.7's ast.parse is not thread-safe (SystemError: AST constructor recursion
# depth mismatch, seen here when releases run in threads, as tests/test_nbgrader.py does):
# every parse in the grader's process (releases, the engine, the forbid analysis) goes
# through parse(), under one lock (reentrant: a caller may hold it around several parses).
PARSING = threading.RLock()


def parse(text, where="<unknown>"):
    """ast.parse(text, where), one thread at a time."""
    with PARSING:
        return ast.parse(text, where)


def language(nb):
    """The language the notebook `nb` (a dict) was released in: its metadata course.language
    (autograde.course.release_language writes it), "en" where it has none."""
    return nb.get("metadata", {}).get("course", {}).get("language", "en")


class SubmissionError(Exception):
    """The submission cannot be graded at all (not a notebook, wrong chapter, ...): why, as
    the template `key` of autograde.messages with its `fields`; str() is the English, text()
    the student's, in `language`, the notebook's where it could be read."""

    def __init__(self, key, language=messages.ENGLISH, **fields):
        super().__init__(messages.text(key, **fields))
        self.key, self.language, self.fields = key, language, fields

    def __reduce__(self):  # (pickled with a Submission, to a worker process)
        return _submission_error, (self.key, self.language, self.fields)

    def text(self):
        """Why, in the notebook's language."""
        return messages.text(self.key, self.language, **self.fields)


def _submission_error(key, language, fields):
    return SubmissionError(key, language, **fields)


def _language(nb):
    """language(nb) as the grader can trust it (messages.supported), English where the
    notebook's metadata is malformed (also exports', for results rebuilt from nbgrader's)."""
    try:
        return messages.supported(language(nb))
    except (AttributeError, TypeError):
        return messages.ENGLISH


class Submission:
    """A submitted notebook file, read once: its bytes (at most the size limit, and only
    after its size was checked), the digest that names them, and what reading it refused
    (a SubmissionError, or the OSError it raised). Read in the main process where a resume
    needs the digest, else in the worker that grades it; the fingerprint, the notebook and
    the answers that the gradebook records all come from these bytes."""

    def __init__(self, path, data=None, digest="", error=None):
        self.path, self.data, self.digest, self.error = Path(path), data, digest, error
        self._nb = None

    @classmethod
    def read(cls, path, max_bytes=NOTEBOOK_FILE_BYTES):
        path = Path(path)
        try:
            if not path.is_file():
                return cls(path, digest="missing", error=SubmissionError(
                    "submission.missing", name=path.name))
            info = path.stat()
            if info.st_size > max_bytes:  # refused unread: its size and time say if it changed
                return cls(path, digest=f"over the limit: {info.st_size} bytes, "
                                        f"{info.st_mtime_ns}", error=SubmissionError(
                    "submission.too_big", name=path.name, size=f"{info.st_size / 2**20:.0f}",
                    limit=f"{max_bytes / 2**20:.0f}"))
            with open(path, "rb") as handle:
                data = handle.read(max_bytes + 1)  # (the file may have grown since)
        except OSError as error:
            return cls(path, digest=f"unreadable: {_one_line(error)}", error=error)
        error = None
        if not data:
            error = SubmissionError("submission.empty", name=path.name)
        elif len(data) > max_bytes:
            error = SubmissionError("submission.grew_over_limit", name=path.name,
                                    limit=f"{max_bytes / 2**20:.0f}")
        return cls(path, data, hashlib.sha256(data).hexdigest(), error)

    def notebook(self, assignment):
        """The notebook as a dict, validated for `assignment` (once), or the SubmissionError
        saying plainly, in one line, what is wrong (or the OSError reading it raised)."""
        if self.error is not None:
            raise self.error
        if self._nb is None:
            self._nb = _validated(self.data, self.path.name, assignment)
        return self._nb

    def language(self, default=messages.ENGLISH):
        """The language of the notebook it holds (its metadata, as _language trusts it), or
        `default` where it holds no JSON object to tell it (what the grader says of a file
        it could not read is said in the language the class was given the chapter in)."""
        try:
            nb = self._nb if self._nb is not None else json.loads(self.data)
        except Exception:  # (no bytes, not JSON, nested too deep: any bytes at all)
            return default
        return _language(nb) if isinstance(nb, dict) else default

    def answers(self):
        """{grade_id: source} of its solution cells, {} where it holds no notebook."""
        if self.error is not None:
            return {}
        try:
            return _solutions(self._nb if self._nb is not None else json.loads(self.data))
        except Exception:  # (any JSON at all: its answers are put in the released notebook)
            return {}


def read_submission(path, assignment, max_bytes=NOTEBOOK_FILE_BYTES):
    """The student's notebook as a dict, or SubmissionError saying plainly (in one line)
    what is wrong. Its size is checked before a byte of it is read; then it must be UTF-8
    JSON, a valid nbformat 4 notebook (nbformat's own schema: any wrong type anywhere is
    named), hold only encodable text, and hold this assignment's exercises."""
    return Submission.read(path, max_bytes).notebook(assignment)


def _validated(data, filename, assignment):
    """The notebook in `data` (the bytes of the file `filename`), checked as read_submission
    says, or SubmissionError."""
    try:
        nb = json.loads(data)
    except RecursionError:
        raise SubmissionError("submission.nested", name=filename) from None
    except (ValueError, UnicodeDecodeError) as error:
        raise SubmissionError("submission.not_json", name=filename,
                              error=_one_line(error)) from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise SubmissionError("submission.no_cells", name=filename)
    said = _language(nb)  # the language its refusals are written in, from here on
    if nb.get("nbformat") != 4:
        raise SubmissionError("submission.nbformat", said, name=filename,
                              version=_one_line(repr(nb.get("nbformat"))))
    where = _undecodable(nb)
    if where:
        raise SubmissionError("submission.surrogate", said, name=filename, where=where)
    problem = _schema_problem(nb)
    if problem:
        raise SubmissionError("submission.invalid", said, name=filename, problem=problem)
    kernel = nb["metadata"].get("kernelspec") or {}
    language = nb["metadata"].get("language_info", {}).get("name") or "python"
    if kernel.get("language", language) != "python":
        raise SubmissionError("submission.kernel", said, name=filename,
                              kernel=_one_line(kernel.get("display_name")))
    ids = set(_solutions(nb))
    ours = len(ids & set(assignment.solution_ids))
    best = max(((len(ids & set(other)), name) for name, other in chapter_exercises().items()
                if name != assignment.name), default=(0, ""))
    if assignment.solution_ids and (ours == 0 or best[0] > ours):
        raise SubmissionError(
            "submission.other_chapter" if best[0] > ours else "submission.wrong_chapter", said,
            name=filename, ours=ours, assignment=assignment.name,
            exercises=len(assignment.solution_ids), other=best[1])
    return nb


def _one_line(value, limit=200):
    """str(value) on one line, at most `limit` characters, encodable, printable."""
    text = " ".join(printable(str(value)).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def clean_text(text):
    """`text` with what UTF-8 cannot encode (lone surrogates) written as escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def printable(text):
    """clean_text(text) without terminal control characters (autograde.feedback.clean: tab
    and newline kept): any text the student controls (a kernel's name, an exception's class
    name and message, a cell id, a file name) before it reaches a terminal or a file."""
    from autograde.feedback import clean
    return clean(clean_text(str(text)))


def _undecodable(nb):
    """Where (e.g. "cells[3].source") the first string that UTF-8 cannot encode sits, or ''.
    Iterative: json.loads already bounded the depth, this walk needs no stack."""
    todo = [(nb, "the notebook")]
    while todo:
        value, where = todo.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                todo.append((key, where))
                todo.append((item, f"{where}.{_one_line(key, 40)}"
                             if where != "the notebook" else _one_line(key, 40)))
        elif isinstance(value, list):
            todo += [(item, f"{where}[{i}]") for i, item in enumerate(value)]
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return where
    return ""


def _schema_problem(nb):
    """'' for a valid nbformat 4 notebook (nbformat's schema, at the notebook's own minor
    version), else one line naming the first problem and where it is."""
    import nbformat
    from nbformat.validator import ValidationError
    minor = nb.get("nbformat_minor")
    if not isinstance(minor, int) or isinstance(minor, bool) or minor < 0:
        return f"nbformat_minor is {_one_line(repr(minor), 40)}, not a version number"
    for index, cell in enumerate(nb["cells"]):  # (nbformat's validator assumes as much)
        if not isinstance(cell, dict):
            return f"at cells[{index}]: {_one_line(repr(cell), 60)} is not a cell (a JSON object)"
    try:
        with warnings.catch_warnings():  # (a missing cell id is added, with a warning)
            warnings.simplefilter("ignore")
            nbformat.validate(nb, version=4,
                              version_minor=min(minor, nbformat.current_nbformat_minor))
    except ValidationError as error:
        place = "".join(f"[{p}]" if isinstance(p, int) else f".{p}"
                        for p in getattr(error, "absolute_path", [])).lstrip(".")
        return f"at {_one_line(place, 80) or 'the top level'}: {_one_line(error.message)}"
    except RecursionError:
        return "it is nested too deeply to check"
    except Exception as error:  # the validator itself failed on it
        return _one_line(f"{type(error).__name__}: {error}")
    return ""


_EXERCISES = {}


def chapter_exercises():
    """{chapter: [solution grade_id]} of every chapter of the course (to name a mix-up)."""
    if not _EXERCISES:
        for path in sorted(CHAPTERS.glob("[0-9][0-9]_*.ipynb")):
            _EXERCISES[path.stem] = exercises(json.loads(path.read_bytes()))
    return _EXERCISES


def exercises(nb):
    """[grade_id] of a source notebook's solution cells (those that are not tests too)."""
    found = []
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            found.append(meta["grade_id"])
    return found


def _source(cell):
    source = cell.get("source", "")
    if isinstance(source, list):
        return "".join(part for part in source if isinstance(part, str))
    return source if isinstance(source, str) else ""


def _nbgrader(cell):
    """A cell's nbgrader metadata, {} where any part of it has the wrong type."""
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    meta = meta.get("nbgrader") if isinstance(meta, dict) else None
    return meta if isinstance(meta, dict) else {}


def _is_solution(cell):
    meta = _nbgrader(cell)
    return isinstance(cell, dict) and cell.get("cell_type") == "code" \
        and bool(meta.get("solution")) and not meta.get("grade")


def _solution_cells(nb):
    """{grade_id: index of the cell that counts} of the student's solution cells. A grade
    id given to several cells counts once, from its *last* cell, as nbgrader's
    DeduplicateIds decides (it clears the metadata of the earlier copies)."""
    found = {}
    cells = nb.get("cells") if isinstance(nb, dict) else None
    for index, cell in enumerate(cells if isinstance(cells, list) else []):
        if _is_solution(cell):
            found[str(_nbgrader(cell).get("grade_id"))] = index
    return found


def _solutions(nb):
    """{grade_id: source} of the student's solution cells (the last cell of each id)."""
    return {gid: _source(nb["cells"][index]) for gid, index in _solution_cells(nb).items()}


def duplicates(nb):
    """Problems ("duplicate") for each solution grade id that several cells carry."""
    counting = {}
    for index, cell in enumerate(nb["cells"]):
        if _is_solution(cell):
            counting.setdefault(str(_nbgrader(cell).get("grade_id")), []).append(index)
    return [{"cell": f"cell {where[-1] + 1}", "kind": "duplicate",
             "message": messages.text("problem.duplicate", _language(nb),
                                      exercise=repr(_one_line(gid, 80)), count=len(where),
                                      cells=", ".join(str(i + 1) for i in where))}
            for gid, where in counting.items() if len(where) > 1]


_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _is_constant(node):
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _transformed(source, transform):
    try:
        return transform(source)
    except Exception:  # IPython's transformer on text it cannot take: run it as it is
        return source


_UNPARSABLE = (SyntaxError, ValueError, RecursionError, MemoryError)  # (null bytes: ValueError)


def definitions(source, transform):
    """[(line, source)] of the imports, definitions and constant assignments of a cell."""
    try:
        tree = parse(_transformed(source, transform))
    except _UNPARSABLE:
        return []
    kept = []
    for node in tree.body:
        if isinstance(node, _KEPT):
            kept.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None \
                and _is_constant(node.value):
            kept.append(node)
    found = []
    for node in kept:
        try:
            found.append((node.lineno, ast.unparse(node)))
        except (RecursionError, MemoryError, ValueError):
            continue  # too deep to write back: it would not compile either
    return found


def statements(source, transform):
    """[(first line, source)] of each top-level statement. The source is not padded: the
    student's process compiles it at its first line (autograde.remote.Child.run's `line`),
    so that tracebacks name the cell's own lines at no cost per line above it."""
    code = _transformed(source, transform)
    try:
        tree = parse(code)
    except _UNPARSABLE:
        return [(1, code)]  # run whole, so that the student sees Python's own message
    lines = code.splitlines()
    found = []
    for node in tree.body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        text = "\n".join(lines[first - 1:node.end_lineno])
        found.append((first, text))
    return found


def statement_bound(source):
    """An upper bound on the statements of `source`, read without parsing it (parsing
    40,000 one-word statements took 80 s and 800 MB): its lines and its semicolons."""
    return source.count("\n") + source.count(";") + 1


def plan(nb, assignment, transform, limits=None, problems=None):
    """[(label, source, is_solution)] to run in the student's process, in notebook order.
    A code cell over limits["cell_statements"] is left out (a "limit" problem appended to
    `problems`); a notebook over limits["notebook_statements"] is refused (SubmissionError),
    both before any parsing. `limits`: engine.LIMITS's two, CELL_STATEMENTS and
    NOTEBOOK_STATEMENTS where not given."""
    limits = limits or {}
    wanted = set(assignment.solution_ids)
    counted = {index for gid, index in _solution_cells(nb).items() if gid in wanted}
    code_cells = [(i, c) for i, c in enumerate(nb["cells"]) if c.get("cell_type") == "code"]
    bounds = [statement_bound(_source(cell)) for _, cell in code_cells]
    per_cell = limits.get("cell_statements", CELL_STATEMENTS)
    per_notebook = limits.get("notebook_statements", NOTEBOOK_STATEMENTS)
    if sum(min(b, per_cell + 1) for b in bounds) > per_notebook:
        raise SubmissionError("submission.too_many_statements", _language(nb),
                              limit=f"{per_notebook:,}")
    steps = []
    for (index, cell), bound in zip(code_cells, bounds):
        meta = _nbgrader(cell)
        grade_id = str(meta.get("grade_id"))
        if bound > per_cell:
            if problems is not None:
                problems.append({"cell": f"cell {grade_id}" if index in counted
                                 else f"cell {index + 1}", "kind": "limit",
                                 "message": messages.text("problem.cell_limit", _language(nb),
                                                          limit=f"{per_cell:,}")})
            continue
        if index in counted:
            # statement by statement: a line that needs a skipped demonstration's data
            # must not take the definitions after it down with it
            for line, statement in statements(_source(cell), transform):
                steps.append((f"cell {grade_id}, line {line}", statement, True))
        elif not meta.get("grade"):
            # one statement at a time, so that one failing import loses nothing else
            for line, statement in definitions(_source(cell), transform):
                steps.append((f"cell {index + 1}, line {line}", statement, False))
    return steps


