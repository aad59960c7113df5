"""The diagrams are generated files: chapters/figures/make_diagrams.py, run again, writes
exactly the SVG files committed beside it, and every one of them is shown by a chapter."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

FIGURES = Path(__file__).resolve().parent.parent / "chapters" / "figures"


def test_the_committed_diagrams_are_what_the_script_draws(tmp_path):
    shutil.copy2(FIGURES / "make_diagrams.py", tmp_path)
    subprocess.run([sys.executable, "make_diagrams.py"], cwd=tmp_path, check=True)
    drawn = {p.name: p.read_text() for p in tmp_path.glob("*.svg")}
    committed = {p.name: p.read_text() for p in FIGURES.glob("*.svg")}
    assert sorted(drawn) == sorted(committed)
    stale = [name for name in drawn if drawn[name] != committed[name]]
    assert not stale, f"run python chapters/figures/make_diagrams.py: {stale} differ"


def test_every_diagram_is_shown_by_a_chapter_with_a_description():
    shown = {}
    for notebook in sorted(FIGURES.parent.glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            text = "".join(cell["source"]) if cell["cell_type"] == "markdown" else ""
            for svg in FIGURES.glob("*.svg"):
                marker = f"](figures/{svg.name})"
                if marker in text:
                    alt = text.split(marker)[0].rpartition("![")[2]
                    shown[svg.name] = len(alt.split())
    assert sorted(shown) == sorted(p.name for p in FIGURES.glob("*.svg"))
    assert all(words >= 30 for words in shown.values()), shown  # a description, not a title
