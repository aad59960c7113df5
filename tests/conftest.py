"""Shared pytest set-up: hypothesis profiles, a fixed torch seed per test, and the fixtures
that the workers of one run share (`make test` runs pytest-xdist's `pytest -n 2`): releases
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
import shutil

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

# Chapter 7's notebook trains a language model for about a minute and a half; the tests that
# execute it whole (nbgrader, the student kit) need its code paths, not its numbers
# (solutions.capstone_lab.train_steps reads this variable; `make book` trains in full).
os.environ.setdefault("COURSE_CAPSTONE_STEPS", "20")


# Test files whose module fixtures cost seconds and would be built again by a second worker:
# each runs whole on one worker (`--dist loadgroup` keeps an xdist_group together), as a
# unit that starts early (xdist hands out the largest groups first).
ONE_WORKER = {
    "test_browser.py": "a Chromium that loads every page of the book once per viewport",
    "test_student_kit.py": "a fresh virtualenv from pip; one test installs a wheel into it",
    "test_diversity.py": "two models trained for 150 steps",
    "test_nested.py": "a zygote (a sandbox that imported torch)",
    "test_runtime.py": "a zygote (a sandbox that imported torch)",
}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the items
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.name in ONE_WORKER:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))


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
def course_release(run_dir, tmp_path_factory):
    """course_release(*chapters) -> a course directory of the caller's own with those chapters
    released (none named: every chapter), as autograde.course.release makes it.

    Each set of chapters is released once per test run (about 7 s of CPU for one chapter,
    15 s for all) and copied for each caller (5 MB, well under a second): a test may change
    its copy."""
    from autograde import course

    def release(*chapters):
        chosen = sorted(chapters) if chapters else course.assignments()
        key = "all" if chosen == course.assignments() else "-".join(chosen)

        def make(folder):
            folder.mkdir(parents=True)
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
def chapter_results(run_dir):
    """chapter_results(assignment, cells) -> {test grade_id: None, or the message of what it
    raised}: every test cell of the chapter run whole, hidden tests included, in its namespace
    with `cells` ({solution grade_id: code}) in place of the reference (tests/chapter.py),
    with the checks' seeds as written (no salt).

    Computed once per test run, whichever worker asks first: tests/test_catalogue.py grades
    every catalogue entry with it, and tests/test_fresh_inputs.py compares other salts with
    the same verdicts."""
    from tests.chapter import Chapter

    chapters, folder = {}, run_dir / "chapter-results"
    folder.mkdir(exist_ok=True)

    def results(assignment, cells):
        key = hashlib.sha256(json.dumps([assignment, sorted(cells.items())]).encode())

        def run(path):
            chapter = chapters.setdefault(assignment, Chapter(assignment))
            path.write_text(json.dumps(chapter.run_tests(chapter.namespace(cells))))

        return json.loads(made_once(folder, key.hexdigest()[:32], run).read_text())
    return results
