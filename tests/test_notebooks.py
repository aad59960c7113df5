"""The chapter notebooks as files: clean, complete, well-formed nbgrader sources."""
import json
import re
from pathlib import Path

import pytest
import yaml

from autograde import course

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO / "chapters").glob("*.ipynb"))


def load(path):
    return json.loads(path.read_text())


def nbgrader(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


def test_all_eight_chapters_exist_in_order():
    assert course.assignments() == ["01_attention", "02_heads", "03_mha", "04_masks",
                                    "05_diversity", "06_kv", "07_positions", "08_capstone"]


def test_toc_lists_every_chapter():
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    for assignment in course.assignments():
        assert f"chapters/{assignment}" in files


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path):
    for cell in load(path)["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [] and cell.get("execution_count") is None, \
                f"{path.name} has outputs: clear them before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_nbgrader_cells_are_well_formed(path):
    cells = load(path)["cells"]
    ids = [nbgrader(c)["grade_id"] for c in cells if nbgrader(c)]
    assert len(ids) == len(set(ids)), f"duplicate grade_ids in {path.name}"
    solutions = [c for c in cells if nbgrader(c).get("solution")]
    tests = [c for c in cells if nbgrader(c).get("grade")]
    assert 3 <= len(solutions) <= 6, f"{path.name}: {len(solutions)} exercises, want 3-6"
    for cell in solutions:
        src = "".join(cell["source"])
        assert src.count("### BEGIN SOLUTION") == src.count("### END SOLUTION") >= 1
    for cell in tests:
        meta = nbgrader(cell)
        assert meta.get("points", 0) > 0 and meta.get("locked"), meta
        assert meta["schema_version"] == 3
    hidden = [c for c in tests if "### BEGIN HIDDEN TESTS" in "".join(c["source"])]
    assert hidden, f"{path.name} has no hidden tests"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_one_title_and_no_skipped_heading_levels(path):
    levels = []
    for cell in load(path)["cells"]:
        if cell["cell_type"] == "markdown":
            text = re.sub(r"```.*?```", "", "".join(cell["source"]), flags=re.S)
            levels += [len(m) for m in re.findall(r"^(#+) ", text, flags=re.M)]
    assert levels and levels[0] == 1 and levels.count(1) == 1, f"{path.name}: one # title first"
    for before, after in zip(levels, levels[1:]):
        assert after <= before + 1, f"{path.name}: heading level jumps from {before} to {after}"
