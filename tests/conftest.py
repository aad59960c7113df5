"""Shared pytest set-up: hypothesis profiles, a fixed torch seed per test, and the fixtures
that the workers of one run share (`make test` runs pytest-xdist's `pytest -n 3`): releases
of the course and the chapters' graded results, made once per run (tests/across_workers.py).
Test files whose module fixtures hold a browser, a virtualenv or a trained model run whole on
one worker (ONE_WORKER below, with `--dist loadgroup`).

Hypothesis profiles (choose with HYPOTHESIS_PROFILE=...):
    course    (default) modest example counts, derandomized: the same examples on every run,
              so CI is reproducible and the whole suite stays fast on a 2-core CPU;
    thorough  many more random examples, for a local bug hunt.
"""
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, settings

from tests.across_workers import made_once

settings.register_profile(
    "course", max_examples=30, deadline=None, derandomize=True, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough", max_examples=500, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "course"))

# The tests use tiny tensors: one intra-op thread is faster than two, and far faster when
# the machine is busy (measured here: 0.08 s instead of 0.6-1.1 s for one nn.MHA agreement
# test on 2 loaded cores, where OpenMP threads wait on each other).
torch.set_num_threads(1)

# The chapters' long runs, shortened: the tests that execute whole notebooks (nbgrader, seven
# to thirteen notebooks per chapter, and the student kit) need their code paths, not their
# numbers; `make book` sets none of these and runs in full, and the book's numbers are what
# tests/test_text_claims.py and the predict-then-run answers are checked against (README,
# "Quick start"). Each variable is read in one place:
# chapter 8 trains a language model for 800 steps (solutions.capstone_lab.train_steps);
os.environ.setdefault("COURSE_CAPSTONE_STEPS", "20")
# chapter 5 trains 17 small models for 50-200 steps each (solutions.diversity_lab.run_steps);
os.environ.setdefault("COURSE_DIVERSITY_STEPS", "10")
# chapter 6 decodes 256 tokens with and without its cache, chapter 7 times its fast paths at
# L up to 2048 (solutions.sdpa_backends.timed_lengths).
os.environ.setdefault("COURSE_TIMING_MAX_LENGTH", "64")


# Test files whose module fixtures cost seconds and would be built again by a second worker:
# each runs whole on one worker, as one work unit that starts early (the scheduler below).
ONE_WORKER = {
    "test_browser.py": "a Chromium that loads every page of an edition once per viewport (one "
                       "unit per edition)",
    "test_student_kit.py": "a fresh virtualenv from pip; one test installs a wheel into it",
    "test_diversity.py": "two models trained for 150 steps",
    "test_nested.py": "a zygote (a sandbox that imported torch)",
    "test_runtime.py": "a zygote (a sandbox that imported torch)",
    # two tests of a minute or more (a pytest run as `nobody`): as a group they start early,
    # never as the run's last tests while the other worker has nothing left
    "test_unprivileged.py": "an interpreter that `nobody` may run",
    # one batch of every chapter's reference and bugs, in both languages, graded once per
    # worker that needs it (about two minutes each): one worker grades it once
    "test_release_languages.py": "a batch graded in both languages (the graded_both fixture)",
}


def work_unit(nodeid):
    """What xdist hands to one worker whole, for the test `nodeid`: its file (ONE_WORKER),
    its chapter's nbgrader grading (tests/test_nbgrader.py: a session's worth of nbgrader
    runs per chapter, shared by that chapter's tests), or the test alone."""
    name = nodeid.partition("::")[0].rsplit("/", 1)[-1]
    chapter = re.search(r"\[(\d\d_[a-z]+)\]$", nodeid)
    edition = re.search(r"\[(en-class|zh_CN-class|en|zh_CN)\b", nodeid)
    if name == "test_browser.py" and edition:  # one Chromium per edition, side by side
        return f"{name}[{edition.group(1)}]"
    if name in ONE_WORKER:
        return name
    if name == "test_nbgrader.py" and chapter:
        return f"nbgrader-{chapter.group(1)}"
    return nodeid


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` by work_unit(). (xdist 3.8's own loadgroup reads xdist_group marks
    by rewriting item._nodeid, which pytest 9.2's nodeid no longer reads: its groups do not
    form.) The largest units go out first, then single tests in the order collected."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return work_unit(nodeid)
    return ByWorkUnit(config, log)


@pytest.fixture(autouse=True)
def _seed_torch():
    """Every test starts from the same torch RNG state, whatever ran before it."""
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory):
    """A folder shared by every worker of this test run: under xdist each worker's base temp
    folder (popen-gw0, ...) lies in it; without xdist, the base temp folder itself."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def recorded_fixtures(run_dir):
    """recorded_fixtures(out_dir, chapters) -> {chapter: out_dir/<chapter>.npz}, as
    kit.record(out_dir, chapters) writes them: each chapter's fixtures recorded once per test
    run (kit.record of that chapter alone, 3-15 s of CPU: byte for byte what a recording of
    several chapters writes for it) and copied. The releases of course_release and the kits
    of tests/test_kit.py would each record their chapters again."""
    from autograde.kit import record as record_now  # (course_release puts `record` there)

    def record(out_dir, chapters):
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for chapter in chapters:
            made = made_once(run_dir, f"fixtures-{chapter}",
                             lambda folder, chapter=chapter: record_now(folder, [chapter]))
            shutil.copy2(made / f"{chapter}.npz", out_dir / f"{chapter}.npz")
        return {chapter: out_dir / f"{chapter}.npz" for chapter in chapters}
    return record


@pytest.fixture(scope="session")
def course_release(run_dir, tmp_path_factory, recorded_fixtures):
    """course_release(*chapters) -> a course directory of the caller's own with those chapters
    released (none named: every chapter), as autograde.course.release makes it.

    Each set of chapters is released once per test run (about 30 s of CPU for all, with each
    chapter's fixtures recorded once per run: recorded_fixtures) and copied for each caller
    (5 MB, well under a second): a test may change its copy."""
    from autograde import course, kit

    def release(*chapters):
        chosen = sorted(chapters) if chapters else course.assignments()
        key = "all" if chosen == course.assignments() else "-".join(chosen)

        def make(folder):
            folder.mkdir(parents=True)
            with mock.patch.object(kit, "record", recorded_fixtures):  # recorded once a run
                course.release(folder, chosen)

        made = made_once(run_dir, f"release-{key}", make)
        own = tmp_path_factory.mktemp(f"course-{key}")
        shutil.copytree(made, own, symlinks=True, dirs_exist_ok=True)
        return own
    return release


@pytest.fixture(scope="session")
def released_course(course_release):
    """A course directory with every chapter released, shared by the tests of one worker that
    grade across all chapters; don't modify it."""
    return course_release()


@pytest.fixture(scope="session")
def chapter_gradings(run_dir):
    """chapter_gradings(assignment, cells) -> tests/chapter.py's Chapter.graded(cells):
    {"results": every test cell of the chapter run whole, hidden tests included, in its
    namespace with `cells` ({solution grade_id: code}) in place of the reference, with the
    checks' seeds as written (no salt), "tables": how many non-empty per-bug tables the checks
    consulted (none: the tables switched off give the same results)}.

    Computed once per test run, whichever worker asks first: tests/test_catalogue.py grades
    every catalogue entry with it (its families-alone column grades again only the entries
    whose grading consulted a table), and tests/test_fresh_inputs.py compares other salts
    with the same verdicts (chapter_results)."""
    from tests.chapter import Chapter

    chapters, folder = {}, run_dir / "chapter-results"
    folder.mkdir(exist_ok=True)

    def graded(assignment, cells):
        key = hashlib.sha256(json.dumps([assignment, sorted(cells.items())]).encode())

        def run(path):
            chapter = chapters.setdefault(assignment, Chapter(assignment))
            path.write_text(json.dumps(chapter.graded(cells)))

        return json.loads(made_once(folder, key.hexdigest()[:32], run).read_text())
    return graded


@pytest.fixture(scope="session")
def chapter_results(chapter_gradings):
    """chapter_results(assignment, cells) -> {test grade_id: None, or the message of what it
    raised}: chapter_gradings()'s results."""
    return lambda assignment, cells: chapter_gradings(assignment, cells)["results"]
