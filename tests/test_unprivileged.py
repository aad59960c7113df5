"""The hostile catalogue's isolation entries and the batch faults again, the grader run by
an unprivileged user.

As root, bwrap keeps every capability and each submission gets a uid of its own; run by an
ordinary user, bwrap makes a user namespace, the zygote holds CAP_SYS_ADMIN only inside it
(to give each child its namespaces) and the children run as that same user. Both must
keep submissions apart. tests/test_hostile.py runs as whoever runs the suite (root in CI):
this test runs its isolation entries as `nobody`, where it can: the suite runs as root,
bwrap is installed, and `nobody` can run an interpreter with the course's packages
(this one, or the system's Python of the same version given this environment's packages
by hard links, when this one lies under a folder closed to others, e.g. /root/.pyenv).
"""
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from autograde.remote import bwrap_path
from autograde.trees import remove_tree
from tests.hostile import ENTRIES

REPO = Path(__file__).resolve().parent.parent
SELECTED = sorted({e.name for e in ENTRIES if e.twice}
                  | {"writes_gradebook_and_course_files", "reads_hidden_tests_and_solutions",
                     "imports_chapter5_solutions_from_release", "notebook_of_500MB"})
TESTS = ["test_nothing_of_one_submission_reaches_the_next"]


def _works(python, user, env):
    try:
        done = subprocess.run([python, "-c", "import torch, nbgrader, pytest, autograde.engine"],
                              user=user.pw_uid, group=user.pw_gid, extra_groups=[], env=env,
                              cwd=REPO, capture_output=True)
    except PermissionError:  # (the interpreter itself is out of its reach)
        return False
    return done.returncode == 0


def _borrowed_interpreter(folder):
    """The system's Python of this version in a venv whose site-packages are hard links to
    this environment's (same file system: no copy), or None."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    system = shutil.which(f"python{version}", path="/usr/bin:/usr/local/bin:/bin")
    site = Path(sysconfig.get_paths()["purelib"])
    if system is None or os.stat(site).st_dev != os.stat(folder).st_dev:
        return None
    venv = Path(folder) / "python"
    made = subprocess.run([system, "-m", "venv", "--without-pip", str(venv)],
                          capture_output=True)
    if made.returncode != 0:
        return None
    target = venv / "lib" / f"python{version}" / "site-packages"
    remove_tree(str(target))
    subprocess.run(["cp", "-al", str(site), str(target)], check=True)
    python = venv / "bin" / "python"
    for script in ("alembic",):  # nbgrader runs it from PATH
        lines = (Path(sys.prefix) / "bin" / script).read_text().splitlines(keepends=True)
        (venv / "bin" / script).write_text(f"#!{python}\n" + "".join(lines[1:]))
        (venv / "bin" / script).chmod(0o755)
    return str(python)


@pytest.fixture(scope="module")
def unprivileged():
    if os.geteuid() != 0:
        pytest.skip("the suite runs unprivileged already: tests/test_hostile.py is this test")
    if bwrap_path() is None:
        pytest.skip("needs bwrap")
    try:
        user = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user `nobody`")
    base = tempfile.mkdtemp(prefix="autograde-unprivileged-")
    os.chmod(base, 0o755)  # (the borrowed interpreter lives in it)
    try:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": base, "LANG": "C.UTF-8",
               "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
        python = sys.executable
        if not _works(python, user, env):
            python = _borrowed_interpreter(base)
            if python is None or not _works(python, user, env):
                pytest.skip(f"`nobody` cannot run {sys.executable} (a folder above it is "
                            "closed), and no system Python of the same version can stand in")
        env["PATH"] = f"{Path(python).parent}:{env['PATH']}"
        work = Path(base) / "work"
        work.mkdir()
        os.chown(work, user.pw_uid, user.pw_gid)
        yield user, python, env, work
    finally:
        remove_tree(base)


def _pytest_as(unprivileged, *args):
    user, python, env, work = unprivileged
    done = subprocess.run(
        [python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs",
         f"--basetemp={work / 'pytest'}", *args],
        user=user.pw_uid, group=user.pw_gid, extra_groups=[], env=env, cwd=REPO,
        capture_output=True, text=True, timeout=900)
    print(done.stdout[-5000:], done.stderr[-3000:])
    assert done.returncode == 0, done.stdout[-5000:]
    return done.stdout.splitlines()[-1]


# Among the suite's slowest: each of these two tests is a pytest of its own, run as `nobody`
# (a fresh interpreter that imports torch, releases the course and starts a zygote): what is
# tested is that whole path as an unprivileged user, which no shared fixture can stand in for.
def test_isolation_entries_as_an_unprivileged_user(unprivileged):
    summary = _pytest_as(unprivileged, "tests/test_hostile.py", "-k",
                         " or ".join(SELECTED + TESTS))
    assert f"{len(SELECTED) + len(TESTS)} passed" in summary, summary


# A minute on one worker: run with COURSE_UNPRIVILEGED_BATCH=1 (the isolation test above
# keeps the sandbox's entries checked as `nobody` in every run).
@pytest.mark.skipif(os.environ.get("COURSE_UNPRIVILEGED_BATCH") != "1",
                    reason="set COURSE_UNPRIVILEGED_BATCH=1: a minute on the 15-minute budget")
def test_batch_faults_as_an_unprivileged_user(unprivileged):
    """tests/test_faults.py's killed batch (SIGKILL, a second batch refused, resume, a deleted
    gradebook) graded by `nobody`. (Its batch of broken notebooks among honest ones runs as
    root only: the same sandbox calls, on the 15-minute budget.)"""
    summary = _pytest_as(unprivileged, "tests/test_faults.py", "-k", "killed")
    assert "1 passed" in summary, summary
