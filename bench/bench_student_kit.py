"""From a downloaded chapter zip to the first green check, timed as a student meets it.

Each step as the student guide says, on a laptop-like setup (a warm pip cache, as on a
student's machine after the first chapter or with a course's cached wheels):
  1. unzip the chapter;
  2. python -m venv, then pip install --no-compile -r requirements-student.txt (from the zip);
  3. start Jupyter's kernel and run the notebook from the top to its first check cell,
     with the first exercise answered (the reference answer pasted in).
The pip cache is warmed by one untimed install first. Writes a table (markdown).

    PYTHONPATH=. .venv/bin/python bench/bench_student_kit.py [--chapter 01_attention] [--output bench/STUDENT_KIT.md]
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from autograde import course  # (PYTHONPATH=., as the usage above says)
from tests.submissions import fill_submission

REPO = Path(__file__).resolve().parent.parent

RUN_TO_FIRST_CHECK = r"""
import sys, nbformat
from nbclient import NotebookClient
path, folder = sys.argv[1], sys.argv[2]
nb = nbformat.read(path, as_version=4)
first = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade"))
nb.cells = nb.cells[:first + 1]
NotebookClient(nb, timeout=600, kernel_name="python3",
               resources={"metadata": {"path": folder}}).execute()
text = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
assert "\u2714" in text, nb.cells[-1].outputs
print(text.strip())
"""


def install(venv, requirements):
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                    "--no-compile", "--disable-pip-version-check", "-r", str(requirements)],
                   check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chapter", default="01_attention")
    parser.add_argument("--zip-dir", default=str(REPO / "_build" / "downloads"))
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    archive = Path(args.zip_dir) / f"{args.chapter}.zip"
    if not archive.is_file():
        sys.exit(f"{archive} is missing: run `make book` first")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        install(scratch / "warm", REPO / "requirements-student.txt")  # warms pip's cache
        steps = []
        load = os.getloadavg()[0]
        start = time.monotonic()
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(scratch / "student")
        folder = scratch / "student" / args.chapter
        steps.append(("unzip the chapter", time.monotonic() - start))
        mark = time.monotonic()
        install(scratch / "venv", folder / "requirements-student.txt")
        steps.append(("venv + pip install --no-compile -r requirements-student.txt (warm cache)",
                      time.monotonic() - mark))
        notebook = folder / f"{args.chapter}.ipynb"
        source = json.loads((course.CHAPTERS / f"{args.chapter}.ipynb").read_text())
        notebook.write_text(json.dumps(fill_submission(source, json.loads(notebook.read_text()),
                                                       {})))
        mark = time.monotonic()
        done = subprocess.run([str(scratch / "venv" / "bin" / "python"), "-c", RUN_TO_FIRST_CHECK,
                               str(notebook), str(folder)], capture_output=True, text=True,
                              check=True, cwd=folder)
        steps.append(("kernel start, cells up to the first check: green", time.monotonic() - mark))
        total = time.monotonic() - start
    lines = [f"# From the zip to the first green check ({args.chapter})", "",
             f"Measured by `bench/bench_student_kit.py` on {platform.processor() or platform.machine()}, "
             f"{platform.system()}, Python {platform.python_version()}, "
             f"{time.strftime('%Y-%m-%d')}, load average {load:.1f} on {os.cpu_count()} cores "
             "at the start (other jobs slow every step). Target: under 60 s with a warm pip "
             "cache.", "",
             "| step | seconds |", "|---|---|"]
    lines += [f"| {name} | {seconds:.1f} |" for name, seconds in steps]
    lines += [f"| **total** | **{total:.1f}** |", "", "The first check printed:", "",
              "```text", done.stdout.strip(), "```", ""]
    table = "\n".join(lines)
    print(table)
    if args.output:
        Path(args.output).write_text(table)


if __name__ == "__main__":
    main()
