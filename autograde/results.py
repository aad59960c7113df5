"""The result of grading: one TestResult per test cell, in one NotebookResult per notebook.

Made by the grader's workers (engine.Grader), recorded in the gradebook (record), kept as
JSON for resuming, `feedback` and `report` (batch), and written to the CSV files (exports).
"""
from dataclasses import dataclass, field


@dataclass
class TestResult:
    grade_id: str
    points: float
    max_points: float
    status: str        # passed | failed | timeout | crash | protocol | error
    message: str = ""  # the diagnosis (first failure) for the student
    output: str = ""   # what a passing check printed (the check marks)

    @property
    def passed(self):
        return self.status == "passed"


@dataclass
class NotebookResult:
    student: str
    assignment: str
    notebook: str
    status: str                 # graded | error
    error: str = ""
    tests: list = field(default_factory=list)
    problems: list = field(default_factory=list)  # cells of the student's code that failed
    seconds: float = 0.0
    sandbox: str = ""
    fingerprint: str = ""
    # the notebook's language (notebook.language): the grader's messages, feedback's and
    # report's are written in it; where no notebook could be read, that of the chapter's
    # release where the notebook is missing (batch.find_jobs), else "en"
    language: str = "en"

    def to_json(self):
        data = dict(self.__dict__)
        data["tests"] = [dict(t.__dict__) for t in self.tests]
        return data

    @classmethod
    def from_json(cls, data):
        data = dict(data)
        data["tests"] = [TestResult(**t) for t in data.get("tests", [])]
        return cls(**data)

    @property
    def score(self):
        return sum(t.points for t in self.tests)

    @property
    def max_score(self):
        return sum(t.max_points for t in self.tests)
