"""Shared pytest set-up: hypothesis profiles and a fixed torch seed per test.

Hypothesis profiles (choose with HYPOTHESIS_PROFILE=...):
    course    (default) modest example counts, derandomized: the same examples on every run,
              so CI is reproducible and the whole suite stays fast on a 2-core CPU;
    thorough  many more random examples, for a local bug hunt.
"""
import os

import pytest
import torch
from hypothesis import HealthCheck, settings

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


@pytest.fixture(autouse=True)
def _seed_torch():
    """Every test starts from the same torch RNG state, whatever ran before it."""
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def released_course(tmp_path_factory):
    """A course directory with every chapter released (about 30 s), shared by the tests
    that grade across all chapters; don't modify it."""
    from autograde import course
    course_dir = tmp_path_factory.mktemp("course")
    course.release(course_dir)
    return course_dir
