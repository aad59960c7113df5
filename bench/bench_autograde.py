"""Benchmark `python -m autograde grade` (ours) against `--engine nbgrader` (plain nbgrader).

A course directory is built in a temporary folder: `python -m autograde release` (every
chapter), then, for each batch size N, N students x every chapter of submissions in
nbgrader's layout submitted/<student>/<assignment>/<assignment>.ipynb. Student i hands in
entry i (mod its length) of the chapter's catalogue (tests/submissions), taken in the
order: the reference solution, the blank student version, then the classic bugs and the
correct alternatives alternately, so that scores vary and every batch mixes full marks,
zeros and partial credit.

Each grading runs in a fresh subprocess on a fresh copy of that batch's course directory,
timed by the wall clock around the subprocess (Python start-up, imports, the gradebook
and the CSV exports included):
  ours      python -m autograde grade --no-progress [--jobs J]   (default: one worker per CPU)
  nbgrader  python -m autograde grade --engine nbgrader          (`nbgrader autograde` once
                                                                  per chapter, one notebook
                                                                  at a time)
nbgrader is run for real on the smallest batch (and on every batch with --full-nbgrader).
For larger batches its time is extrapolated linearly from that run: nbgrader grades one
notebook after the other (jupyter/nbgrader#174), so one more student costs one more
notebook of each chapter. The per-notebook cost of each chapter is read from the
modification times of the autograded notebooks nbgrader writes as it finishes each one
((last - first) / (n - 1)); the rest of the measured run (start-ups, the first notebook's
set-up, exports) is kept as a fixed cost:
  T(N) = T(n) + (N - n) * sum over chapters of the per-notebook cost.

Then the per-test scores recorded in the two gradebooks of every batch graded by both are
compared (nbgrader.api.Gradebook), and ours are checked against what the catalogue says
each submission must score.

Writes the Markdown report to stdout and to --output (default bench/AUTOGRADE.md);
progress goes to stderr. A 6 x 5 + 100 x 5 run takes 10-20 minutes on 2 cores.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent  # (importable through PYTHONPATH=., as `make` sets it)

# batch size (students) -> target for nbgrader time / ours time
TARGETS = {6: 10.0, 100: 20.0}


def log(*args):
    print("#", *args, file=sys.stderr, flush=True)


def loadavg():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


CAPSTONE_STEPS = "20"


def env():
    """The environment of every subprocess: this venv's bin/ first (nbgrader runs alembic
    from PATH), the repository importable."""
    path = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    # chapter 7's notebook trains its model as it runs: nbgrader executes it whole, so the
    # bench sets the steps the tests use (ours runs definitions and tests only: it never
    # trains); an instructor grading with nbgrader sets it too (instructor guide)
    return dict(os.environ, PATH=path, PYTHONPATH=pythonpath, PYTHONWARNINGS="ignore",
                COURSE_CAPSTONE_STEPS=CAPSTONE_STEPS)


def run(command, cwd, what):
    """Run `command` in a fresh process; returns (wall seconds, stdout, stderr, load before,
    load after, start time as time.time())."""
    before = loadavg()
    log(f"{what}: {' '.join(command)}  (load {before})")
    wall_start = time.time()
    t0 = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env(), capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    after = loadavg()
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-5000:])
        raise SystemExit(f"{what} failed with status {done.returncode}")
    log(f"{what}: {seconds:.1f} s  (load {after})")
    return dict(seconds=seconds, stdout=done.stdout, stderr=done.stderr, load_before=before,
                load_after=after, started=wall_start)


# ---------------------------------------------------------------- the class
def catalogue_order(assignment, source_nb, student_nb):
    """[(entry name, notebook, {test grade_id: expected to pass})] in round-robin order:
    reference, blank, then bugs and correct alternatives alternately."""
    from tests.submissions import catalogue_submissions
    subs = catalogue_submissions(assignment, source_nb, student_nb)
    bugs = [k for k in subs if k.startswith("bug_")]
    correct = [k for k in subs if k.startswith("correct_")]
    order = ["reference", "blank"]
    for i in range(max(len(bugs), len(correct))):
        order += bugs[i:i + 1] + correct[i:i + 1]
    return [(name, *subs[name]) for name in order]


def build_class(released, target, students, assignments):
    """A copy of the released course dir with `students` students' submissions.
    Returns {(student, assignment): (entry name, expected)}."""
    shutil.copytree(released, target)
    manifest = {}
    for assignment in assignments:
        notebook = f"{assignment}.ipynb"
        source_nb = json.loads((target / "source" / assignment / notebook).read_text())
        student_nb = json.loads((target / "release" / assignment / notebook).read_text())
        entries = catalogue_order(assignment, source_nb, student_nb)
        for i in range(students):
            student = f"s{i + 1:03d}"
            name, nb, expected = entries[i % len(entries)]
            folder = target / "submitted" / student / assignment
            folder.mkdir(parents=True)
            (folder / notebook).write_text(json.dumps(nb))
            manifest[(student, assignment)] = (name, expected)
    return manifest


def mix(manifest):
    kinds = {"reference": 0, "correct": 0, "bug": 0, "blank": 0}
    for name, _ in manifest.values():
        kinds[name.split("_")[0]] += 1
    return ", ".join(f"{v} {k}" for k, v in kinds.items())


# ---------------------------------------------------------------- gradebooks
def gradebook_scores(course_dir, manifest):
    """{(student, assignment, test grade_id): (score, max_score)}; a notebook missing from
    the gradebook gives {(student, assignment, None): None}."""
    from nbgrader.api import Gradebook, MissingEntry
    scores = {}
    with Gradebook(f"sqlite:///{Path(course_dir) / 'gradebook.db'}") as gradebook:
        for student, assignment in sorted(manifest):
            try:
                nb = gradebook.find_submission_notebook(assignment, assignment, student)
            except MissingEntry:
                scores[(student, assignment, None)] = None
                continue
            for grade in nb.grades:
                if grade.cell.cell_type == "code":
                    scores[(student, assignment, grade.name)] = (grade.score, grade.max_score)
    return scores


def compare(ours, theirs):
    """Lines describing every difference between two gradebook_scores."""
    out = []
    for key in sorted(set(ours) | set(theirs), key=lambda k: tuple(map(str, k))):
        a, b = ours.get(key, "missing"), theirs.get(key, "missing")
        if a != b:
            student, assignment, test = key
            out.append(f"{student}/{assignment}/{test or '(notebook)'}: ours {a}, "
                       f"nbgrader {b}")
    return out


def against_catalogue(scores, manifest):
    """Lines for every test whose score contradicts the catalogue's expectation."""
    out = []
    for (student, assignment), (name, expected) in sorted(manifest.items()):
        for test, should_pass in expected.items():
            got = scores.get((student, assignment, test))
            if got is None:
                out.append(f"{student}/{assignment}/{test} ({name}): not in the gradebook")
            elif (got[0] == got[1]) != should_pass:
                out.append(f"{student}/{assignment}/{test} ({name}): scored {got[0]}/{got[1]}, "
                           f"expected {'full marks' if should_pass else 'zero'}")
    return out


# ---------------------------------------------------------------- nbgrader's costs
def nbgrader_costs(course_dir, manifest, assignments, run_info):
    """Per chapter: the per-notebook cost and the set-up before its first notebook, from the
    mtimes of autograded/<student>/<assignment>/<assignment>.ipynb (nbgrader writes each
    one when that notebook is done; the chapters are graded one after the other)."""
    costs, previous_end = {}, run_info["started"]
    for assignment in assignments:
        done = sorted(
            ((Path(course_dir) / "autograded" / student / assignment / f"{assignment}.ipynb")
             .stat().st_mtime, student)
            for student, a in manifest if a == assignment)
        times = [t for t, _ in done]
        n = len(times)
        per_notebook = (times[-1] - times[0]) / (n - 1) if n > 1 else float("nan")
        # the time of each notebook but the first, by the kind of submission
        by_kind = {"blank": [], "other": []}
        for (t0, _), (t1, student) in zip(done, done[1:]):
            kind = "blank" if manifest[(student, assignment)][0] == "blank" else "other"
            by_kind[kind].append(t1 - t0)
        costs[assignment] = dict(notebooks=n, per_notebook=per_notebook,
                                 setup=times[0] - previous_end - per_notebook,
                                 span=times[-1] - previous_end, by_kind=by_kind)
        previous_end = times[-1]
    costs["_tail"] = run_info["started"] + run_info["seconds"] - previous_end
    return costs


def mix_aware(base_s, costs, base_manifest, manifest):
    """nbgrader's time on `manifest` extrapolated from the run on `base_manifest` with a
    cost for blank notebooks and one for the others, per chapter (where both were seen)."""
    total = base_s
    for assignment, c in costs.items():
        if assignment.startswith("_"):
            continue
        mean = {k: sum(v) / len(v) if v else c["per_notebook"] for k, v in c["by_kind"].items()}
        n_base = [(name == "blank") for (_, a), (name, _) in base_manifest.items()
                  if a == assignment]
        n_new = [(name == "blank") for (_, a), (name, _) in manifest.items() if a == assignment]
        total += (sum(n_new) - sum(n_base)) * mean["blank"]
        total += ((len(n_new) - sum(n_new)) - (len(n_base) - sum(n_base))) * mean["other"]
    return total


def blank_share(manifest):
    return sum(name == "blank" for name, _ in manifest.values()) / len(manifest)


# ---------------------------------------------------------------- machine
def cpu_model():
    try:
        m = re.search(r"^model name\s*:\s*(.+)$", open("/proc/cpuinfo").read(), re.M)
        if m:
            return m.group(1).strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine():
    import nbgrader
    import torch
    info = {
        "CPU": cpu_model(),
        "cores (nproc)": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
    }
    try:
        kib = int(re.search(r"^MemTotal:\s+(\d+) kB", open("/proc/meminfo").read(), re.M)[1])
        info["memory"] = f"{kib / 2 ** 20:.0f} GiB"
    except (OSError, TypeError):
        pass
    from autograde.remote import bwrap_path
    info.update({
        "python": platform.python_version(),
        "nbgrader": nbgrader.__version__,
        "torch": torch.__version__,
        "OS": f"{platform.system()} {platform.release()}",
        "sandbox (bwrap)": bwrap_path() or "not installed: ours ran without bubblewrap",
    })
    return info


# ---------------------------------------------------------------- report
def fmt(seconds):
    return f"{seconds:.1f}"


def report(args, info, rows, checks, costs, started, wall, commands, details):
    mach = "\n".join(f"- {k}: {v}" for k, v in info.items())
    table = ["| batch | notebooks | ours s | nbgrader s | ratio | target | verdict |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        nbg = fmt(r["nbgrader_s"]) + ("" if r["measured"] else " (extrapolated\\*)")
        target = f">= {r['target']:.0f}" if r["target"] else "-"
        verdict = ("PASS" if r["ratio"] >= r["target"] else "FAIL") if r["target"] else "INFO"
        table.append(f"| {r['students']} students x {r['chapters']} chapters | {r['notebooks']} "
                     f"| {fmt(r['ours_s'])} | {nbg} | **{r['ratio']:.1f}** | {target} "
                     f"| {verdict} |")
    notes = []
    for r in rows:
        if not r["measured"]:
            notes.append(
                f"\\* {r['students']} x {r['chapters']}: nbgrader was **not run** on this batch; "
                f"its time is extrapolated linearly from the measured "
                f"{r['from_students']} x {r['chapters']} run ({fmt(r['from_s'])} s): "
                f"{fmt(r['from_s'])} s + ({r['students']} - {r['from_students']}) students x "
                f"{r['per_student']:.1f} s (one notebook of each chapter, per-notebook costs "
                f"below). `--full-nbgrader` runs it for real. Cross-check: "
                f"{r['blank_from']:.0%} of the measured batch's notebooks are blank, "
                f"{r['blank']:.0%} of this one's; costing blank and other notebooks "
                f"separately (table below) gives {fmt(r['mix_aware_s'])} s, ratio "
                f"{r['mix_aware_s'] / r['ours_s']:.1f}.")
    cost_md = ""
    if costs:
        n, c = costs
        lines = [f"Measured in the {n}-student nbgrader run, from the modification times of "
                 "the autograded\nnotebooks (nbgrader writes each when it is done): per "
                 "notebook = (last - first) / (n - 1)\nin each chapter; blank s, others s: "
                 "the mean time of a blank notebook and of the others\n(each from the "
                 "previous one's end); start-up = the time from the previous chapter's last\n"
                 "notebook (or the command's start) to this chapter's first, less one "
                 "per-notebook cost.", "",
                 "| chapter | notebooks | per notebook s | blank s | others s "
                 "| start-up s (before its first) |",
                 "|---|---:|---:|---:|---:|---:|"]
        for assignment, v in c.items():
            if assignment.startswith("_"):
                continue
            kinds = {k: f"{sum(t) / len(t):.1f}" if t else "-" for k, t in v["by_kind"].items()}
            lines.append(f"| {assignment} | {v['notebooks']} | {v['per_notebook']:.1f} "
                         f"| {kinds['blank']} | {kinds['other']} | {v['setup']:.1f} |")
        lines.append(f"\nAfter the last notebook (gradebook read-back, CSV exports): "
                     f"{c['_tail']:.1f} s.")
        cost_md = "\n### nbgrader's costs\n" + "\n".join(lines) + "\n"
    detail_md = "\n".join(f"- {d}" for d in details)
    check_md = "\n".join(f"- {line}" for line in checks)
    cmd_md = "\n".join(commands)
    cores = info.get("cores (nproc)")
    return f"""# Benchmark: `python -m autograde grade` vs plain `nbgrader autograde`

Generated by `bench/bench_autograde.py` on {started:%Y-%m-%d %H:%M} UTC (the run took
{wall / 60:.1f} minutes). Do not edit by hand: rerun the script to regenerate this file.

## What is measured
A course directory is released (`python -m autograde release`, nbgrader's
generate_assignment for the {rows[0]['chapters'] if rows else 'all'} chapters) in a temporary folder; each batch gives N
students one submission of every chapter, in nbgrader's layout
`submitted/<student>/<assignment>/<assignment>.ipynb`. Student i hands in entry i (mod
its length) of that chapter's catalogue (`tests/submissions`), in the order reference,
blank, then bugs and correct alternatives alternately, so that scores vary.

Each grading runs in a **fresh subprocess on a fresh copy** of the batch's course
directory and is timed by the wall clock around the subprocess: Python start-up,
imports, the gradebook, and grades.csv/tests.csv included.

- **ours**: `python -m autograde grade --no-progress` (the sandbox engine, one worker per
  CPU{'' if not args.jobs else f'; here --jobs {args.jobs}'}).
- **nbgrader**: `python -m autograde grade --engine nbgrader`: plain `nbgrader autograde
  <chapter> --force`, once per chapter; nbgrader executes whole notebooks, one at a time
  (chapter 7's training with `COURSE_CAPSTONE_STEPS={CAPSTONE_STEPS}`, as in the tests; ours
  never trains).
- **ratio** = nbgrader s / ours s: above 1 means ours is faster.

Other processes slow both down: the load averages before and after each command are
listed under Runs; before the run they should be well under 1 ({cores} cores here; ours
keeps them busy, nbgrader one).

## How to run
```
{cmd_md}
```

## Machine
{mach}

## Results
{chr(10).join(table)}
{(chr(10) + chr(10).join(notes) + chr(10)) if notes else ""}{cost_md}
## Scores
{check_md}

## Runs
{detail_md}
"""


# ---------------------------------------------------------------- main
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--students", default="6,100",
                   help="comma-separated batch sizes, students per batch (default 6,100)")
    p.add_argument("--jobs", type=int, default=None,
                   help="--jobs for ours (default: the grader's default, one per CPU)")
    p.add_argument("--full-nbgrader", action="store_true",
                   help="run nbgrader on every batch instead of extrapolating from the "
                        "smallest (hours for 100 students)")
    p.add_argument("--output", default=str(REPO / "bench" / "AUTOGRADE.md"),
                   help="write the Markdown report here (default bench/AUTOGRADE.md; "
                        "'-': stdout only)")
    p.add_argument("--json", help="also write the raw timings as JSON to this file")
    p.add_argument("--strict", action="store_true",
                   help="exit with status 1 if the gradebooks differ, a score contradicts "
                        "the catalogue, or a target fails")
    p.add_argument("--keep", action="store_true", help="keep the temporary course folders")
    args = p.parse_args(argv)
    args.students = sorted({int(s) for s in args.students.split(",") if s.strip()})
    if not args.students or min(args.students) < 2:
        p.error("--students: batch sizes of at least 2 students (the per-notebook cost of "
                "nbgrader needs two notebooks of a chapter)")
    return args


def main(argv=None):
    args = parse_args(argv)
    from autograde import course
    assignments = course.assignments()
    info = machine()
    info["load average before the run (1, 5, 15 min)"] = loadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.perf_counter()
    log("; ".join(f"{k}: {v}" for k, v in info.items()))

    py = sys.executable
    ours_cmd = [py, "-m", "autograde", "grade", "--no-progress"] + (
        ["--jobs", str(args.jobs)] if args.jobs else [])
    nbg_cmd = [py, "-m", "autograde", "grade", "--engine", "nbgrader"]
    rows, checks, details, failed, costs, raw = [], [], [], False, None, {}
    work = Path(tempfile.mkdtemp(prefix="bench_autograde_"))
    try:
        released = work / "released"
        released.mkdir()
        rel = run([py, "-m", "autograde", "release"], released, "release")
        details.append(f"release ({len(assignments)} chapters): {fmt(rel['seconds'])} s")
        smallest = args.students[0]
        measured = {}  # students -> (nbgrader seconds, per-student seconds)
        for n in args.students:
            manifest = build_class(released, work / f"class{n}", n, assignments)
            notebooks = len(manifest)
            log(f"batch {n} x {len(assignments)}: {mix(manifest)}")
            ours_dir = work / f"ours{n}"
            shutil.copytree(work / f"class{n}", ours_dir)
            ours = run(ours_cmd, ours_dir, f"ours {n}x{len(assignments)}")
            summary = ours["stdout"].strip().splitlines()[-1]
            graded_line = next((line for line in ours["stdout"].splitlines()
                                if line.startswith("graded ")), "")
            details.append(f"{n} x {len(assignments)} ours: {fmt(ours['seconds'])} s "
                           f"(load {ours['load_before']} -> {ours['load_after']}); "
                           f"`{graded_line}`; `{summary}`")
            ours_scores = gradebook_scores(ours_dir, manifest)
            wrong = against_catalogue(ours_scores, manifest)
            tests = sum(len(e) for _, e in manifest.values())
            checks.append(f"{'PASS' if not wrong else 'FAIL'}: {n} x {len(assignments)}, ours: "
                          f"{tests - len(wrong)} of {tests} test scores as the catalogue "
                          f"expects ({mix(manifest)})")
            checks += [f"  - {line}" for line in wrong[:50]]
            failed |= bool(wrong)
            row = dict(students=n, chapters=len(assignments), notebooks=notebooks,
                       ours_s=ours["seconds"], target=TARGETS.get(n))
            if n == smallest or args.full_nbgrader:
                nbg_dir = work / f"nbgrader{n}"
                shutil.copytree(work / f"class{n}", nbg_dir)
                nbg = run(nbg_cmd, nbg_dir, f"nbgrader {n}x{len(assignments)}")
                summary = nbg["stdout"].strip().splitlines()[-1]
                details.append(f"{n} x {len(assignments)} nbgrader: {fmt(nbg['seconds'])} s "
                               f"(load {nbg['load_before']} -> {nbg['load_after']}); "
                               f"`{summary}`")
                c = nbgrader_costs(nbg_dir, manifest, assignments, nbg)
                per_student = sum(v["per_notebook"] for k, v in c.items()
                                  if not k.startswith("_"))
                measured[n] = (nbg["seconds"], per_student, c, manifest)
                if n == smallest:
                    costs = (n, c)
                diff = compare(ours_scores, gradebook_scores(nbg_dir, manifest))
                keys = sum(1 for k in ours_scores if k[2] is not None)
                checks.insert(0, f"{'PASS' if not diff else 'FAIL'}: {n} x {len(assignments)}: "
                                 f"the per-test scores in the two gradebooks are "
                                 f"{'identical' if not diff else 'NOT identical'} ({keys} "
                                 f"test scores compared, {len(diff)} differ)")
                for line in diff:
                    print(f"score mismatch: {line}", file=sys.stderr)
                checks[1:1] = [f"  - {line}" for line in diff[:50]]
                failed |= bool(diff)
                row.update(nbgrader_s=nbg["seconds"], measured=True)
                raw[n] = dict(ours=ours["seconds"], nbgrader=nbg["seconds"], costs=c)
            else:
                base = max(k for k in measured if k < n) if any(k < n for k in measured) \
                    else smallest
                base_s, per_student, c, base_manifest = measured[base]
                row.update(nbgrader_s=base_s + (n - base) * per_student, measured=False,
                           from_students=base, from_s=base_s, per_student=per_student,
                           mix_aware_s=mix_aware(base_s, c, base_manifest, manifest),
                           blank_from=blank_share(base_manifest), blank=blank_share(manifest))
                raw[n] = dict(ours=ours["seconds"], nbgrader_extrapolated=row["nbgrader_s"],
                              nbgrader_mix_aware=row["mix_aware_s"])
            row["ratio"] = row["nbgrader_s"] / row["ours_s"]
            if row["target"] and row["ratio"] < row["target"]:
                failed = True
            rows.append(row)
            log(f"batch {n}: ours {fmt(row['ours_s'])} s, nbgrader {fmt(row['nbgrader_s'])} s"
                f"{'' if row['measured'] else ' (extrapolated)'}, ratio {row['ratio']:.1f}")
            if not args.keep:
                for name in (f"class{n}", f"ours{n}", f"nbgrader{n}"):
                    shutil.rmtree(work / name, ignore_errors=True)
    finally:
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    wall = time.perf_counter() - t_start
    info["load average after the run (1, 5, 15 min)"] = loadavg()
    commands = [
        "# rewrites bench/AUTOGRADE.md (10-20 minutes on 2 cores)",
        "PYTHONPATH=. .venv/bin/python bench/bench_autograde.py",
        "PYTHONPATH=. .venv/bin/python bench/bench_autograde.py --students 6,100 --strict",
        "# what it times, in each (fresh) copy of the course directory:",
        "python -m autograde grade --no-progress" + (f" --jobs {args.jobs}" if args.jobs else ""),
        "python -m autograde grade --engine nbgrader",
    ]
    text = report(args, info, rows, checks, costs, started, wall, commands, details)
    print(text)
    if args.output and args.output != "-":
        Path(args.output).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"machine": info, "students": args.students, "rows": rows, "raw": raw,
             "started": started.isoformat(), "wall_s": wall}, indent=1, default=str))
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
