"""Run a chapter notebook's code cells in order as one plain Python program, without Jupyter.

For machines that have PyTorch but no Jupyter kernel (the lent GPU machine): lines that are
IPython magics (`%matplotlib inline`) are dropped, matplotlib draws off-screen, and every
cell runs in one namespace from the notebook's folder, as the kernel would. The instructor's
notebook holds the reference solutions, so every cell runs.

Run:  python3 bench/run_cells.py chapters/07_positions.ipynb [--from-heading "Fast paths"]
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path


def code_cells(notebook, from_heading=None):
    """The notebook's code cells as (index, source) in order; with `from_heading`, the cells
    before the first markdown cell holding it are still returned (they define what later
    cells use) but marked to run silently."""
    cells = json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]
    reached = from_heading is None
    for index, cell in enumerate(cells):
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and from_heading and from_heading in source:
            reached = True
        if cell["cell_type"] == "code":
            kept = "\n".join(line for line in source.splitlines()
                             if not line.lstrip().startswith(("%", "!")))
            yield index, kept, reached


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook")
    parser.add_argument("--from-heading", help="print output only from this markdown text on")
    args = parser.parse_args()
    notebook = Path(args.notebook).resolve()
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.chdir(notebook.parent)
    sys.path.insert(0, str(notebook.parent.parent))   # the repository: `import solutions`
    sys.path.insert(0, str(notebook.parent))
    namespace = {"__name__": "__main__"}
    devnull = open(os.devnull, "w")
    for index, source, shown in code_cells(notebook, args.from_heading):
        start = time.perf_counter()
        stdout = sys.stdout
        if not shown:
            sys.stdout = devnull
        try:
            exec(compile(source, f"{notebook.name}[cell {index}]", "exec"), namespace)
        finally:
            sys.stdout = stdout
        if shown:
            print(f"--- cell {index} ({time.perf_counter() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
