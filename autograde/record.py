"""Record the engine's verdicts in nbgrader's gradebook, the way `nbgrader autograde` does.

nbgrader's own Autograde converter does the recording: it sanitizes the notebook
(restoring locked and test cells from the gradebook), then runs its autograde
preprocessors, of which we replace only `Execute` by `InjectResults`, which writes the
engine's outcome of each test cell as that cell's output (a stream for a pass, an error for
a failure). nbgrader's SaveAutoGrades then scores the outputs with its usual rule, so
`nbgrader export`, `generate_feedback` and formgrader find what they expect, including
the executed notebook in autograded/<student>/<assignment>/.

The notebook nbgrader sees is staged, not the raw submission: the released notebook with
the student's solution cells put back in. An unreadable submission is thus still recorded
(with zero for every test) instead of stopping nbgrader.
"""
import copy
import json
import shutil
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor

from autograde.engine import LIMITS, NotebookResult, _solutions, clean_text

STAGING = ".autograde/staging"  # nbgrader's "submitted" folder for the recording step
RESULTS = {}  # (student, assignment, notebook) -> NotebookResult, read by InjectResults


class InjectResults(NbGraderPreprocessor):
    """Stands in for nbgrader's Execute: test cell outputs come from the engine's result."""

    def preprocess(self, nb, resources):
        key = (resources["nbgrader"]["student"], resources["nbgrader"]["assignment"],
               resources["nbgrader"]["notebook"])
        result = RESULTS[key]
        outcomes = {t.grade_id: t for t in result.tests}
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell.cell_type != "code":
                continue
            cell.outputs = []
            outcome = outcomes.get(meta.get("grade_id")) if meta.get("grade") else None
            if outcome is None:
                continue
            if outcome.passed:
                if outcome.output:
                    cell.outputs.append(_stream(outcome.output))
            else:
                cell.outputs.append(_error(outcome))
        return nb, resources


def _stream(text):
    from nbformat.v4 import new_output
    return new_output("stream", name="stdout", text=text)


def _error(outcome):
    from nbformat.v4 import new_output
    name = {"failed": "CheckFailure", "timeout": "Timeout", "crash": "Crash",
            "protocol": "ProtocolError", "error": "SubmissionError"}.get(outcome.status,
                                                                           "Error")
    # no traceback: it would show the hidden tests' source to the student
    return new_output("error", ename=name, evalue=outcome.message,
                      traceback=[f"{name}: {outcome.message}"])


def staged_notebook(released_nb, submitted_path, readable=True):
    """The released notebook with the student's solution cells (where readable: never for
    a submission the grader refused, nor one over the size limit, which is not even read)."""
    nb = copy.deepcopy(released_nb)
    answers = {}
    path = Path(submitted_path)
    try:
        if readable and path.is_file() and path.stat().st_size <= LIMITS["notebook_file_bytes"]:
            answers = _solutions(json.loads(path.read_bytes()))
    except Exception:
        answers = {}
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id") in answers:
            cell["source"] = clean_text(answers[meta["grade_id"]])
    return nb


class Recorder:
    """Writes results into <course>/gradebook.db (or `db_url`) through nbgrader."""

    def __init__(self, course_dir, db_url=None):
        from autograde.course import nbgrader_api
        self.course_dir = Path(course_dir).resolve()
        self.api = nbgrader_api(self.course_dir, db_url)
        self.db_url = self.api.coursedir.db_url

    def record(self, result, released_nb, submitted_dir):
        """Record one NotebookResult; returns nbgrader's log on failure, else ''."""
        from nbgrader.converters import Autograde
        from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata,
                                            LimitOutput, SaveAutoGrades)
        from nbgrader.utils import capture_log, temp_attrs
        staging = self.course_dir / STAGING / result.student / result.assignment
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        notebook = staging / f"{result.notebook}.ipynb"
        notebook.write_text(json.dumps(staged_notebook(
            released_nb, Path(submitted_dir) / f"{result.notebook}.ipynb",
            readable=result.status != "error")))
        # timestamp.txt: late penalties; submission_secret.txt (written by nbgrader's
        # `submit`): `release_feedback` finds the student's feedback by it
        for name in ("timestamp.txt", "submission_secret.txt"):
            if (Path(submitted_dir) / name).is_file():
                shutil.copy(Path(submitted_dir) / name, staging / name)
        RESULTS[(result.student, result.assignment, result.notebook)] = result
        coursedir = self.api.coursedir
        try:
            with temp_attrs(coursedir, assignment_id=result.assignment,
                            student_id=result.student, submitted_directory=STAGING):
                app = Autograde(coursedir=coursedir, parent=self.api)
                app.autograde_preprocessors = [InjectResults, LimitOutput, SaveAutoGrades,
                                               AssignLatePenalties, CheckCellMetadata]
                app.force = True
                app.create_student = True
                outcome = capture_log(app)
        finally:
            RESULTS.pop((result.student, result.assignment, result.notebook), None)
        return "" if outcome["success"] else outcome.get("log", "") + outcome.get("error", "")


def load_result(path):
    return NotebookResult.from_json(json.loads(Path(path).read_text()))
