"""Sphinx extension: solution cells fold (default) or vanish, from nbgrader metadata.

The chapter notebooks mark solutions only with nbgrader's own cell metadata
(`nbgrader.solution: true`), so the tags that Jupyter Book uses to hide code are derived
here instead of being kept by hand beside it. COURSE_EDITION=no-solutions (set by
`make book-no-solutions`) removes the solution code from the pages entirely; outputs stay.
"""
import json
import os

TAGS = {"folded": "hide-input", "no-solutions": "remove-input"}


def _tag_solution_cells(app, docname, source):
    if not app.env.doc2path(docname).endswith(".ipynb"):
        return
    edition = os.environ.get("COURSE_EDITION", "folded")
    if edition not in TAGS:
        raise ValueError(f"COURSE_EDITION must be one of {sorted(TAGS)}, got {edition!r}")
    notebook = json.loads(source[0])
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            tags = cell["metadata"].setdefault("tags", [])
            if TAGS[edition] not in tags:
                tags.append(TAGS[edition])
    source[0] = json.dumps(notebook)


def setup(app):
    app.connect("source-read", _tag_solution_cells)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
