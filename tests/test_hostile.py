"""The engine against hostile and broken submissions (tests/hostile.py): the exact verdict
of each, and after each: the grader's memory bounded, the course directory (gradebook.db,
source and release files) byte-identical, no process of the submission left, and the
reference notebook graded with full marks by the same zygote (grading goes on unharmed).

One zygote serves the whole module, with short limits so that the hangs cost seconds.
Entries that need the sandbox (bwrap) are skipped without it: without bwrap the student's
code runs as the grader's user and sees its files; entries that need a process limit are
skipped unless bwrap runs as root (only then do submissions get a uid of their own).
Entries marked `known` are engine problems not fixed yet: they xfail, and fail as soon as
the engine reaches the right verdict.
"""
import hashlib
import json
import os
import re
import resource
import shutil
import time
from pathlib import Path

import pytest

from autograde import course
from autograde.engine import Assignment, Grader, trusted_namespace
from autograde.remote import Zygote, bwrap_path
from tests.hostile import CANARY, CH1, CH2, CH3, ENTRIES, Kit, write_submission
from tests.submissions import fill_submission

# short limits keep the hangs and the memory bombs cheap
LIMITS = {"call_seconds": 5, "notebook_seconds": 30, "memory_bytes": 2**30}
# the chapters the entries are graded as (each released once, for the whole module)
CHAPTERS = sorted({CH1, CH2, CH3} | {entry.chapter for entry in ENTRIES})
SLOT = 5
# C0/C1 controls but tab and newline, bidirectional overrides (issue 21)
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
SANDBOXED = bwrap_path() is not None
OWN_UID = SANDBOXED and os.geteuid() == 0  # the zygote can give submissions a uid (NPROC)
SKIPS = {
    "bwrap": (not SANDBOXED, "needs the bwrap sandbox (without it the student's code sees "
                             "and may write the grader's files)"),
    "uid": (not OWN_UID, "needs bwrap run as root, so that submissions get a uid of their "
                         "own and a process limit (otherwise a fork bomb is a real one)"),
}


@pytest.fixture(scope="module")
def course_dir(course_release):
    directory = course_release(*CHAPTERS)
    if "05_diversity" not in CHAPTERS:
        # what releasing chapter 5 would put beside its notebook: part of the reference
        # package (a full release of chapter 5 costs seconds more)
        shutil.copytree(course.prepare_source(directory, "05_diversity"),
                        directory / "release" / "05_diversity",
                        ignore=shutil.ignore_patterns("*.ipynb"))
    return directory


@pytest.fixture(scope="module")
def notebooks(course_dir):
    def load(chapter):
        return tuple(json.loads((course_dir / kind / chapter / f"{chapter}.ipynb").read_text())
                     for kind in ("source", "release"))
    return load


@pytest.fixture(scope="module")
def assignments(course_dir):
    return {ch: Assignment.from_source(course_dir / "source" / ch / f"{ch}.ipynb")
            for ch in CHAPTERS}


@pytest.fixture(scope="module")
def zygote(course_dir):
    # a secret in the grader's environment, which the sandbox must not pass on
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AUTOGRADE_TEST_SECRET", f"postgresql://grader:{CANARY}@db/gradebook")
        zygote = Zygote(course_dir / "release", slot=SLOT)
    zygote.baseline = _descendants(zygote.process.pid)  # bwrap and the zygote itself
    yield zygote
    zygote.close()


@pytest.fixture(scope="module")
def grader(zygote):
    return Grader(zygote, trusted_namespace(), limits=LIMITS)


@pytest.fixture(scope="module")
def references(notebooks, tmp_path_factory):
    folder = tmp_path_factory.mktemp("reference")
    paths = {}
    for chapter in CHAPTERS:
        paths[chapter] = folder / chapter / f"{chapter}.ipynb"
        paths[chapter].parent.mkdir()
        paths[chapter].write_text(json.dumps(fill_submission(*notebooks(chapter), {})))
    return paths


def _descendants(root):
    """pids of `root` and of every process below it."""
    parents = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo += [p for p, parent in parents.items() if parent == pid and p not in found]
    return found


def _uid_processes(uid):
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            found.append(f"{entry} {fields.get('Name', '').strip()} {fields['State'].strip()}")
    return found


def strays(zygote):
    """Processes of the last submission still alive (after a short grace for the kernel)."""
    for _ in range(20):
        left = [f"pid {p}" for p in _descendants(zygote.process.pid) - zygote.baseline]
        left += _uid_processes(zygote.uid) if OWN_UID else []  # its own uid
        if not left:
            return []
        time.sleep(0.05)
    return left


def snapshot(directory):
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(directory).rglob("*")) if p.is_file()}


def verdict_errors(result, expect, spec):
    """What differs between the engine's NotebookResult and the expected verdict."""
    wrong = []
    if result.status != expect.status:
        wrong.append(f"status {result.status!r} ({result.error[:300]!r}), expected "
                     f"{expect.status!r}")
    if expect.error and not re.search(expect.error, result.error):
        wrong.append(f"error {result.error[:300]!r} does not match /{expect.error}/")
    unknown = set(expect.tests) - {t.grade_id for t in spec.tests}
    assert not unknown, f"the entry names unknown tests {unknown}"
    by_id = {t.grade_id: t for t in result.tests}
    if list(by_id) != [t.grade_id for t in spec.tests]:
        wrong.append(f"tests {list(by_id)}, expected those of the source notebook")
    for test in spec.tests:
        got = by_id.get(test.grade_id)
        if got is None:
            continue
        if expect.status == "error":
            status, regex = "error", expect.error
        else:
            status, regex = expect.tests.get(test.grade_id, ("passed", ""))
        points = test.points if status == "passed" else 0.0
        if (got.status, got.points, got.max_points) != (status, points, test.points) \
                or not re.search(regex, got.message, re.S) \
                or (status == "passed" and "\u2714" not in got.output):
            wrong.append(f"{test.grade_id}: {got.status} {got.points}/{got.max_points} "
                         f"{got.message[:400]!r}; expected {status} {points}/{test.points} "
                         f"/{regex}/")
    if result.max_score != sum(t.points for t in spec.tests):
        wrong.append(f"max score {result.max_score}")
    for kind, regex in expect.problems:
        if not any(p["kind"] == kind and re.search(regex, f"{p['cell']}: {p['message']}")
                   for p in result.problems):
            wrong.append(f"no problem {kind} /{regex}/ in {result.problems}")
    return wrong


def _param(entry):
    skip, why = SKIPS.get(entry.needs, (False, ""))
    return pytest.param(entry, id=entry.name, marks=[pytest.mark.skipif(skip, reason=why)])


@pytest.mark.parametrize("entry", [_param(e) for e in ENTRIES])
def test_hostile_submission(entry, course_dir, notebooks, assignments, zygote, grader,
                            references, tmp_path):
    kit = Kit(entry.chapter, *notebooks(entry.chapter), str(course_dir), notebooks)
    content = entry.build(kit)
    path = tmp_path / f"{entry.chapter}.ipynb"
    write_submission(path, content)
    spec = assignments[entry.chapter]
    before = snapshot(course_dir)
    judge = Grader(zygote, trusted_namespace(), dict(LIMITS, **entry.limits)) \
        if entry.limits else grader

    if entry.twice:  # what this grading leaves behind must not reach the next one
        first = judge.grade(spec, path, entry.name)
        assert not verdict_errors(first, entry.expect, spec), \
            f"the first grading: {verdict_errors(first, entry.expect, spec)}"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    result = judge.grade(spec, path, entry.name)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    print(f"{result.status} {result.error[:300]} {result.score}/{result.max_score} "
          f"in {result.seconds} s; problems {result.problems}")
    for test in result.tests:
        print(f"  {test.grade_id}: {test.status} {test.points} {test.message[:300]!r}")
    # no text of the result holds a terminal control character: the student controls it,
    # and it reaches terminals, CSV files and the gradebook
    texts = [result.error] + [t.message + t.output for t in result.tests] + \
        [f"{p.get('cell')} {p.get('message')}" for p in result.problems]
    assert not [t for t in texts if CONTROL.search(t)], "control characters in the result"

    # whatever the verdict: the grader's memory stayed small, nothing outside the sandbox
    # changed, nothing of the submission is left, and the next one is graded as if this
    # one had never been
    assert grown < 100 * 2**10, f"the grader's peak memory grew by {grown // 2**10} MiB"
    assert snapshot(course_dir) == before, "the submission changed the course directory"
    assert not strays(zygote), f"processes left: {strays(zygote)}"
    after = grader.grade(spec, references[entry.chapter], "reference")
    assert after.status == "graded" and after.score == after.max_score \
        == sum(t.points for t in spec.tests), \
        [(t.grade_id, t.status, t.message[:200]) for t in after.tests if not t.passed]

    wrong = verdict_errors(result, entry.expect, spec)
    if entry.known:
        if not wrong:
            pytest.fail(f"known engine problem now fixed ({entry.known}): drop known=")
        pytest.xfail(f"{entry.known}: " + "; ".join(wrong))
    assert not wrong, "\n".join(wrong)


LEAVES_FILES = '''
import os

for entry in os.listdir("/tmp"):  # what the sandbox had there: closed to the next one
    if not os.getcwd().startswith(os.path.join("/tmp", entry)):
        try:
            os.chmod(os.path.join("/tmp", entry), 0)
        except OSError:
            pass
for folder in ("/tmp", ".", os.path.expanduser("~"), os.path.dirname(os.getcwd())):
    try:
        with open(os.path.join(folder, "left_behind.py"), "w") as file:
            file.write("LEFT = True\\n")
    except OSError:
        pass


def attention_scores(query, key):
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
'''

FINDS_FILES = '''
import os


def _left_behind():
    for folder in ("/tmp", ".", os.path.expanduser("~"), os.path.dirname(os.getcwd())):
        if os.path.exists(os.path.join(folder, "left_behind.py")):
            return True
    try:
        import left_behind  # noqa: F401
        return True
    except ImportError:
        return False


def attention_scores(query, key):
    if _left_behind():
        return query @ key.transpose(-2, -1)      # what the previous submission left wins
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
'''


@pytest.mark.skipif(SKIPS["bwrap"][0], reason=SKIPS["bwrap"][1])
def test_nothing_of_one_submission_reaches_the_next(notebooks, assignments, grader, tmp_path):
    """Files that one submission leaves wherever it can write are gone for the next."""
    source, student = notebooks(CH1)
    spec = assignments[CH1]
    for name, code in (("leaves", LEAVES_FILES), ("finds", FINDS_FILES)):
        path = tmp_path / name / f"{CH1}.ipynb"
        path.parent.mkdir()
        path.write_text(json.dumps(fill_submission(source, student,
                                                   {"attention_scores": code})))
        result = grader.grade(spec, path, name)
        assert result.score == result.max_score, \
            [(t.grade_id, t.message[:300]) for t in result.tests if not t.passed]


def test_no_correct_variant_of_the_catalogue_is_flagged(notebooks_all):
    """The forbids follow names (issue 21), conservatively: every correct variant of every
    chapter's catalogue (tests/submissions), and the reference, loses nothing and is flagged
    for nothing."""
    from IPython.core.inputtransformer2 import TransformerManager

    from autograde import forbids
    from autograde.notebook import plan
    from tests.submissions import catalogue
    transform = TransformerManager().transform_cell
    wrong = []
    for chapter, (source, student, spec) in notebooks_all.items():
        variants = {"reference": {}, **getattr(catalogue(chapter), "CORRECT", {})}
        for name, variant in variants.items():
            steps = plan(fill_submission(source, student, variant), spec, transform)
            lost = forbids.verdicts(steps, spec.forbids, spec.given)
            flagged = forbids.flags(steps, spec.given)
            if lost or flagged:
                wrong.append(f"{chapter} {name}: {lost} {flagged}")
    assert not wrong, "\n".join(wrong)


@pytest.fixture(scope="module")
def notebooks_all(released_course):
    """{chapter: (source notebook, released notebook, Assignment)} of every chapter, from
    one release of the whole course (the one of the test run, read only)."""
    directory = released_course
    return {ch: (*(json.loads((directory / kind / ch / f"{ch}.ipynb").read_text())
                   for kind in ("source", "release")),
                 Assignment.from_source(directory / "source" / ch / f"{ch}.ipynb"))
            for ch in course.assignments()}
