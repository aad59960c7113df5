"""A course through nbgrader's own filesystem exchange, as on a JupyterHub: the instructor
releases, two students fetch, work and submit, the instructor collects, grades with this
project's grader, generates and releases feedback, and each student fetches feedback that
names their mistake. The settings are those of the instructor guide's JupyterHub section.

Students are simulated the way JupyterHub's Docker images run them: the process's user is
`jovyan` (a passwd file bound over /etc/passwd by bubblewrap) and nbgrader takes the
student's name from JUPYTERHUB_USER; each student has a HOME of their own holding their
~/.jupyter/nbgrader_config.py."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.submissions import catalogue, fill_submission

CHAPTER = "01_attention"
COURSE_ID = "mha"
REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not shutil.which("bwrap"),
                                reason="needs Debian's bubblewrap (bwrap) to play the students")

# the same settings as chapters/instructor_guide.md's JupyterHub section, with the
# exchange in a temporary folder instead of /srv/nbgrader/exchange
STUDENT_CONFIG = """c = get_config()
c.CourseDirectory.course_id = "{course_id}"
c.Exchange.root = "{exchange}"
"""
INSTRUCTOR_CONFIG = STUDENT_CONFIG + """c.CourseDirectory.root = "{course_dir}"
"""


def environment(home, **extra):
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("JUPYTER", "NBGRADER"))}
    env.update(HOME=str(home), PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
               PYTHONPATH=str(REPO), **extra)
    return env


def run(command, cwd, env, wrapper=()):
    done = subprocess.run([*wrapper, *command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{command}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture
def hub(tmp_path):
    """An exchange root, the instructor's course directory and a home per student."""
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    exchange.chmod(0o777)  # as the guide says: every user writes their own part of it
    course_dir = tmp_path / "instructor" / "course"
    course_dir.mkdir(parents=True)
    (course_dir / "nbgrader_config.py").write_text(INSTRUCTOR_CONFIG.format(
        course_id=COURSE_ID, exchange=exchange, course_dir=course_dir))
    # a passwd file where this process's uid is JupyterHub's `jovyan`
    uid, gid = os.getuid(), os.getgid()
    passwd = tmp_path / "passwd"
    passwd.write_text(f"jovyan:x:{uid}:{gid}::/home/jovyan:/bin/sh\n"
                      + Path("/etc/passwd").read_text())
    homes = {}
    for student in ("alice", "bob"):
        home = tmp_path / "home" / student
        (home / ".jupyter").mkdir(parents=True)
        (home / ".jupyter" / "nbgrader_config.py").write_text(STUDENT_CONFIG.format(
            course_id=COURSE_ID, exchange=exchange))
        homes[student] = home
    return exchange, course_dir, passwd, homes


# Among the suite's slowest (about 45 s on an idle 2-core machine): fourteen processes, each
# a real command of the guide run the way its user runs it (nbgrader's exchange commands,
# two of them inside bwrap as `jovyan`, this project's release and grade, each paying its
# start-up: python, nbgrader's imports, the grader's zygote); the exchange's file layout and
# permissions are what is tested, which no in-process call or shared fixture stands in for.
def test_a_course_through_the_exchange(hub, tmp_path):
    exchange, course_dir, passwd, homes = hub
    nbgrader = [sys.executable, "-m", "nbgrader"]
    instructor = environment(tmp_path / "instructor")

    def as_student(student, *args):
        wrapper = ["bwrap", "--bind", "/", "/", "--dev-bind", "/dev", "/dev",
                   "--bind", "/proc", "/proc", "--ro-bind", str(passwd), "/etc/passwd",
                   "--die-with-parent", "--"]
        return run([*nbgrader, *args], homes[student],
                   environment(homes[student], JUPYTERHUB_USER=student), wrapper)

    # instructor: the student version (this project's release), then nbgrader's exchange
    run([sys.executable, "-m", "autograde", "release", CHAPTER, "--course-dir",
         str(course_dir)], course_dir, instructor)
    run([*nbgrader, "release_assignment", CHAPTER], course_dir, instructor)
    assert (exchange / COURSE_ID / "outbound" / CHAPTER / f"{CHAPTER}.ipynb").is_file()

    # students: fetch, work, submit
    source = json.loads((course_dir / "source" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    bug_name, bug = next(iter(catalogue(CHAPTER).BUGS.items()))
    work = {"alice": {}, "bob": bug.cells}
    for student, cells in work.items():
        as_student(student, "fetch_assignment", CHAPTER)
        fetched = homes[student] / CHAPTER / f"{CHAPTER}.ipynb"
        blank = json.loads(fetched.read_text())
        fetched.write_text(json.dumps(fill_submission(source, blank, cells)))
        as_student(student, "submit", CHAPTER)
    inbound = sorted(p.name for p in (exchange / COURSE_ID / "inbound").iterdir())
    assert [name.split("+")[0] for name in inbound] == ["alice", "bob"]

    # instructor: collect, grade with this project's grader, nbgrader's feedback
    run([*nbgrader, "collect", CHAPTER], course_dir, instructor)
    for student in work:
        assert (course_dir / "submitted" / student / CHAPTER / "timestamp.txt").is_file()
    graded = run([sys.executable, "-m", "autograde", "grade", CHAPTER, "--course-dir",
                  str(course_dir), "--no-progress"], course_dir, instructor)
    assert "0 could not be graded" in graded.stdout
    run([*nbgrader, "generate_feedback", CHAPTER], course_dir, instructor)
    run([*nbgrader, "release_feedback", CHAPTER], course_dir, instructor)

    # students: fetch their feedback
    feedback = {}
    for student in work:
        as_student(student, "fetch_feedback", CHAPTER)
        [page] = (homes[student] / CHAPTER / "feedback").glob(f"*/{CHAPTER}.html")
        feedback[student] = page.read_text()
    bob_scores = re.findall(r"Score: ([0-9.]+) / ([0-9.]+)", feedback["bob"])
    alice_scores = re.findall(r"Score: ([0-9.]+) / ([0-9.]+)", feedback["alice"])
    assert alice_scores and alice_scores[0][0] == alice_scores[0][1]  # full marks
    assert bob_scores and float(bob_scores[0][0]) < float(bob_scores[0][1])
    # the mistake is named in bob's page (HTML-escaped as nbgrader writes it), not alice's
    import html
    bob_text = html.unescape(re.sub(r"<[^>]+>", "", feedback["bob"]))
    assert re.search(bug.diagnosis, bob_text, re.S), (bug_name, bug.diagnosis)
    assert not re.search(bug.diagnosis, html.unescape(re.sub(r"<[^>]+>", "",
                                                             feedback["alice"])), re.S)
