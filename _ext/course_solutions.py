"""Sphinx extension: solution cells fold (default) or vanish, from nbgrader metadata.

The chapter notebooks mark solutions only with nbgrader's own cell metadata
(`nbgrader.solution: true`), so the tags that Jupyter Book uses to hide code are derived
here instead of being kept by hand beside it. COURSE_EDITION=no-solutions (set by
`make book-no-solutions`) removes the solution code from the pages entirely; outputs stay.
Each chapter page also gets, under its title, the link to its student version (zipped by
`make book` from nbgrader's generate_assignment into _build/downloads/).
"""
import json
import os
import re

TAGS = {"folded": "hide-input", "no-solutions": "remove-input"}


def _prepare_notebook(app, docname, source):
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
    chapter = os.path.basename(docname)
    if re.fullmatch(r"\d\d_\w+", chapter):
        notebook["cells"].insert(1, {"cell_type": "markdown", "metadata": {}, "id": "download-note",
                                     "source": DOWNLOAD_NOTE.format(chapter=chapter)})
    source[0] = json.dumps(notebook)


DOWNLOAD_NOTE = """\
```{{admonition}} Do the exercises
:class: tip
Download the student version of this chapter,
{{download}}`{chapter}.zip </_build/downloads/{chapter}.zip>`: the notebook with the
solution code and hidden tests removed, and the checks it runs. Unzip it, open
`{chapter}.ipynb` in Jupyter, and follow the {{doc}}`student guide <student_guide>`.
```
"""


def setup(app):
    app.connect("source-read", _prepare_notebook)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
