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

from nbformat.v4 import new_output
from nbgrader.converters import Autograde
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, LimitOutput,
                                    NbGraderPreprocessor, SaveAutoGrades)
from nbgrader.utils import capture_log, temp_attrs
from traitlets import Instance

from autograde.course import nbgrader_api
from autograde.notebook import clean_text
from autograde.paths import STAGING
from autograde.results import NotebookResult


class InjectResults(NbGraderPreprocessor):
    """Stands in for nbgrader's Execute: test cell outputs come from the engine's result,
    the one this preprocessor is made with (one instance per notebook recorded)."""

    result = Instance(NotebookResult)

    def preprocess(self, nb, resources):
        outcomes = {t.grade_id: t for t in self.result.tests}
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
    return new_output("stream", name="stdout", text=text)


def _error(outcome):
    name = {"failed": "CheckFailure", "timeout": "Timeout", "crash": "Crash",
            "protocol": "ProtocolError", "error": "SubmissionError"}.get(outcome.status,
                                                                           "Error")
    # no traceback: it would show the hidden tests' source to the student
    return new_output("error", ename=name, evalue=outcome.message,
                      traceback=[f"{name}: {outcome.message}"])


def staged_notebook(released_nb, answers):
    """The released notebook with the student's solution cells, `answers` ({grade_id:
    source}, notebook.Submission.answers(): none for a submission the grader refused)."""
    nb = copy.deepcopy(released_nb)
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id") in answers:
            cell["source"] = clean_text(answers[meta["grade_id"]])
    return nb


class Recorder:
    """Writes results into <course>/gradebook.db (or `db_url`) through nbgrader."""

    def __init__(self, course_dir, db_url=None):
        self.course_dir = Path(course_dir).resolve()
        self.api = nbgrader_api(self.course_dir, db_url)
        self.db_url = self.api.coursedir.db_url

    def record(self, result, released_nb, submitted_dir, answers):
        """Record one NotebookResult, with the student's `answers` in the released notebook
        (staged_notebook); returns nbgrader's log on failure, else ''."""
        staging = self.course_dir / STAGING / result.student / result.assignment
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        notebook = staging / f"{result.notebook}.ipynb"
        notebook.write_text(json.dumps(staged_notebook(released_nb, answers)))
        # timestamp.txt: late penalties; submission_secret.txt (written by nbgrader's
        # `submit`): `release_feedback` finds the student's feedback by it
        for name in ("timestamp.txt", "submission_secret.txt"):
            if (Path(submitted_dir) / name).is_file():
                shutil.copy(Path(submitted_dir) / name, staging / name)
        coursedir = self.api.coursedir
        with temp_attrs(coursedir, assignment_id=result.assignment,
                        student_id=result.student, submitted_directory=STAGING):
            app = Autograde(coursedir=coursedir, parent=self.api)
            app.autograde_preprocessors = [InjectResults(result=result), LimitOutput,
                                           SaveAutoGrades, AssignLatePenalties,
                                           CheckCellMetadata]
            app.force = True
            app.create_student = True
            outcome = capture_log(app)
        return "" if outcome["success"] else outcome.get("log", "") + outcome.get("error", "")

