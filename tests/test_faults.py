"""Faults of a whole batch (`python -m autograde grade` as a process): broken notebooks mixed
among honest ones, the grader killed with SIGKILL, two batches at once, a deleted
gradebook, a sandbox that will not start. The verdicts are those of tests/hostile.py's
FAULTS; the notebooks are its broken-input entries.

After every batch, however it ended: nothing left in its temporary folder (TMPDIR) and no
process of it alive (every descendant of the grader, seen while it ran, gone).
"""
import csv
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autograde import batch
from autograde.engine import Assignment
from tests.hostile import CH1, CH2, ENTRIES, FAULTS, Kit, write_submission
from tests.submissions import fill_submission

REPO = Path(__file__).resolve().parent.parent
FULL = 14.0


@pytest.fixture(scope="module")
def released(course_release):
    return course_release(CH1, CH2)  # (chapter 2: the notebook handed in for 1)


def _notebooks(course_dir, chapter=CH1):
    return tuple(json.loads((Path(course_dir) / kind / chapter / f"{chapter}.ipynb").read_text())
                 for kind in ("source", "release"))


# broken but gradable: graded as nbgrader would, the rest of the notebook scored
GRADED_BROKEN = ("duplicated_grade_ids", "expression_nested_100000_deep")


def make_class(released, target, honest=3, broken=True):
    """A copy of the released course with `honest` students handing in the reference and,
    between them, one student for each broken-input entry of the catalogue. Returns
    (course dir, [honest students], {broken student: expected error regex, or the entry
    of a broken notebook that is graded})."""
    import shutil
    shutil.copytree(released, target)
    source, student = _notebooks(target)
    reference = fill_submission(source, student, {})
    kit = Kit(CH1, source, student, str(target), lambda chapter: _notebooks(target, chapter))
    entries = [e for e in ENTRIES if e.chapter == CH1 and (
        e.expect.status == "error" or e.name in GRADED_BROKEN)] if broken else []
    honest_names, errors = [], {}
    for index in range(max(honest, len(entries) + 1)):
        if index < honest:
            name = f"s{2 * index:02d}_honest"
            folder = target / "submitted" / name / CH1
            folder.mkdir(parents=True)
            write_submission(folder / f"{CH1}.ipynb", reference)
            honest_names.append(name)
        if index < len(entries):
            entry = entries[index]
            name = f"s{2 * index + 1:02d}_{entry.name}"
            folder = target / "submitted" / name / CH1
            folder.mkdir(parents=True)
            write_submission(folder / f"{CH1}.ipynb", entry.build(kit))
            errors[name] = entry.expect.error.lstrip("^") if entry.expect.status == "error" \
                else entry
    return target, honest_names, errors


# -- watching a batch's processes --------------------------------------------------------
def _table():
    """{pid: (parent pid, start time)} of every live (not zombie) process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            table[int(entry)] = (int(fields[1]), int(fields[19]))
    return table


class Watch(threading.Thread):
    """Collects every descendant of `root` (pid, start time) while it runs."""

    def __init__(self, root):
        super().__init__(daemon=True)
        self.root, self.seen, self.running = root, set(), True

    def run(self):
        while self.running:
            table = _table()
            family, grew = {self.root} | {pid for pid, _ in self.seen}, True
            while grew:
                more = {pid for pid, (parent, _) in table.items() if parent in family} - family
                family |= more
                grew = bool(more)
            self.seen |= {(pid, table[pid][1]) for pid in family if pid in table}
            time.sleep(0.05)

    def commands(self):
        names = []
        for pid, _ in self.seen:
            try:
                names.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                             .decode(errors="replace"))
            except OSError:
                pass
        return names

    def alive(self, grace=5.0):
        """Processes seen that are still alive after `grace` seconds."""
        self.running = False
        self.join()
        deadline = time.monotonic() + grace
        while True:
            table = _table()
            left = [pid for pid, start in self.seen if table.get(pid, (0, None))[1] == start]
            if not left or time.monotonic() > deadline:
                return [f"{pid}: {Path(f'/proc/{pid}/cmdline').read_bytes()[:120]!r}"
                        for pid in left if Path(f"/proc/{pid}").exists()]
            time.sleep(0.1)


def start(course_dir, tmpdir, *extra):
    tmpdir.mkdir(exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONPATH=str(REPO))
    process = subprocess.Popen(
        [sys.executable, "-m", "autograde", "grade", CH1, "--course-dir", str(course_dir),
         "--no-progress", "--jobs", "2", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    watch = Watch(process.pid)
    watch.start()
    return process, watch


def finish(process, watch, timeout=600):
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err, watch.alive()


def rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def scores(course_dir):
    """{student: score} of chapter 1 in grades.csv."""
    return {r["student_id"]: float(r["score"]) for r in rows(Path(course_dir) / "grades.csv")
            if r["assignment"] == CH1}


# The two batch tests below are among the suite's slowest (about 20 s and 45 s on an idle
# 2-core machine): each starts `python -m autograde grade` as a process (one, then four:
# killed, refused, resumed, after a deleted gradebook), each paying python, torch, nbgrader
# and the zygote's start-up; a process that dies whole, leaves nothing behind and resumes is
# what they test. tests/test_unprivileged.py runs them again as `nobody`.
def test_broken_notebooks_cost_themselves_only(released, tmp_path):
    """FAULTS["broken_notebooks_among_honest_ones"]."""
    course_dir, honest, errors = make_class(released, tmp_path / "course")
    started = time.monotonic()
    code, out, err, alive = finish(*start(course_dir, tmp_path / "tmp"))
    seconds = time.monotonic() - started
    print(f"{len(honest) + len(errors)} notebooks in {seconds:.1f} s\n{out}{err}")
    assert code == 0, err[-3000:]
    graded = {s: e for s, e in errors.items() if not isinstance(e, str)}
    errors = {s: e for s, e in errors.items() if isinstance(e, str)}
    summary = re.search(FAULTS["broken_notebooks_among_honest_ones"], out)
    assert summary and summary.groups() == (str(len(honest) + len(errors) + len(graded)),
                                            str(len(errors)))
    lines = [line for line in err.splitlines() if line.startswith("ERROR ")]
    assert len(lines) == len(errors), lines
    for student, regex in errors.items():
        (line,) = [line for line in lines if line.startswith(f"ERROR {student}/{CH1}: ")]
        assert re.search(regex, line.split(": ", 1)[1]), (line, regex)
    notes = [line for line in err.splitlines() if line.startswith("NOTE ")]
    assert len(notes) == 1 and re.match(
        rf"NOTE s\d+_duplicated_grade_ids/{CH1}: cell \d+: the exercise 'attention_scores' "
        r"is in 2 cells", notes[0]), notes
    spec = Assignment.from_source(course_dir / "source" / CH1 / f"{CH1}.ipynb")
    points = {t.grade_id: t.points for t in spec.tests}
    grades = scores(course_dir)
    assert grades == {**{s: FULL for s in honest}, **{s: 0.0 for s in errors},
                      **{s: FULL - sum(points[t] for t in e.expect.tests)
                         for s, e in graded.items()}}
    tests = rows(course_dir / "tests.csv")
    for student in errors:
        mine = [r for r in tests if r["student_id"] == student]
        assert mine and {r["status"] for r in mine} == {"error"}
        assert len({r["diagnosis"] for r in mine}) == 1 and "\n" not in mine[0]["diagnosis"]
    assert not list((tmp_path / "tmp").iterdir()), "left in TMPDIR"
    assert not alive, f"processes left: {alive}"


def test_killed_batch_dies_whole_and_resumes(released, tmp_path):
    """FAULTS["grader_killed_with_sigkill"], ["second_grade_on_the_same_course"] and
    ["gradebook_deleted"]: one batch killed while a second is refused; then resumed."""
    course_dir, honest, _ = make_class(released, tmp_path / "course", honest=4, broken=False)
    tmpdir = tmp_path / "tmp"
    first, watch = start(course_dir, tmpdir)
    deadline = time.monotonic() + 120
    while not any("autograde.sandbox" in c for c in watch.commands()):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.1)
    # Frozen from here on, the first batch records nothing more, however long the second
    # grader takes to start (tens of seconds on a loaded machine: the first batch used to
    # finish its 4 notebooks before the kill, and the resume found nothing to grade).
    os.kill(first.pid, signal.SIGSTOP)
    code, out, err, alive = finish(*start(course_dir, tmp_path / "tmp2"))
    assert code == 2 and not alive
    assert re.fullmatch(FAULTS["second_grade_on_the_same_course"], err.strip()), err
    assert f"(pid {first.pid})" in err
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    left = watch.alive(grace=5.0)
    assert not left, f"alive 5 s after the grader's SIGKILL: {left}"
    assert not list(tmpdir.iterdir()), "left in TMPDIR"

    code, out, err, alive = finish(*start(course_dir, tmpdir))
    assert code == 0 and not alive, err[-3000:]
    assert re.search(FAULTS["grader_killed_with_sigkill"], out), out
    grades = scores(course_dir)
    assert grades == {s: FULL for s in honest}
    assert not list(tmpdir.iterdir())
    assert not list((course_dir / ".autograde").glob("sandbox/*"))

    (course_dir / "gradebook.db").unlink()
    code, out, err, alive = finish(*start(course_dir, tmpdir))
    assert code == 0 and not alive, err[-3000:]
    assert re.search(FAULTS["gradebook_deleted"], out), out
    assert "graded" not in out.split("recording")[0]  # nothing graded again
    grades = scores(course_dir)
    assert grades == {s: FULL for s in honest}


def test_a_sandbox_that_will_not_start_costs_one_notebook(released, tmp_path, monkeypatch):
    """FAULTS["sandbox_fails_to_start"]: the worker's zygote dies and will not restart for
    one notebook: that notebook is an error; the next starts a sandbox and is graded."""
    from autograde import remote
    source, student = _notebooks(released)
    path = tmp_path / f"{CH1}.ipynb"
    path.write_text(json.dumps(fill_submission(source, student, {})))
    spec = Assignment.from_source(released / "source" / CH1 / f"{CH1}.ipynb")

    def task(student):
        return batch.Task(batch.Job(student, CH1, tmp_path, path))

    class Broken:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("the sandbox failed to start: (simulated)")

    with monkeypatch.context() as patch:
        patch.setattr(remote, "Zygote", Broken)
        worker = batch.Worker(str(released / "release"), {}, True, {CH1: spec}, slot=11)
        failed, _ = worker.grade(task("unlucky"))
    assert failed.status == "error"
    assert re.fullmatch(FAULTS["sandbox_fails_to_start"], failed.error), failed.error
    assert {t.status for t in failed.tests} == {"crash"}
    try:
        graded, answers = worker.grade(task("next"))
    finally:
        worker.close_zygote()
    assert graded.status == "graded" and answers  # (the answers the gradebook records)
    assert sum(t.points for t in graded.tests) == FULL
    assert spec.tests  # (the spec the worker used)


def test_lock_is_reentrant_and_refuses_another_process(tmp_path):
    with batch.course_lock(tmp_path):
        with batch.course_lock(tmp_path):  # the same process: grade inside the command
            probe = subprocess.run(
                [sys.executable, "-c", "import sys; from autograde import batch\n"
                 "try:\n    batch.course_lock(sys.argv[1]).__enter__()\n"
                 "except batch.Busy as busy:\n    print(busy)", str(tmp_path)],
                capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert re.fullmatch(FAULTS["second_grade_on_the_same_course"].removeprefix("ERROR: "),
                        probe.stdout.strip()), probe
    with batch.course_lock(tmp_path):  # released: free again
        pass


def test_two_graders_never_share_a_sandbox_uid(tmp_path, monkeypatch):
    """A uid's process limit binds across the machine, so a uid held by one grader (here:
    another process) is skipped by the next, and free again once its holder is gone."""
    from autograde import remote
    monkeypatch.setattr(remote, "UID_LOCKS", tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from autograde import remote\n"
         "remote.UID_LOCKS = __import__('pathlib').Path(sys.argv[1])\n"
         "print(remote.claim_uid(7)[0], flush=True); sys.stdin.read()", str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        assert holder.stdout.readline().strip() == "61007"
        uid, lock = remote.claim_uid(7)
        assert uid == 61008  # 61007 is the other grader's
        other, other_lock = remote.claim_uid(7)
        assert other == 61009  # ours, held until closed
        os.close(other_lock)
    finally:
        holder.kill()
        holder.wait()
    freed, freed_lock = remote.claim_uid(7)
    assert freed == 61007  # its holder died: the kernel let its lock go
    os.close(freed_lock)
    os.close(lock)
