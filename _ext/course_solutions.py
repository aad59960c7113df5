"""Sphinx extension: the book's two editions, from the chapter notebooks' nbgrader metadata.

COURSE_EDITION=self-study (`make book`, the default): solution cells folded, their code
shown without nbgrader's markers. COURSE_EDITION=class (`make book-class`): no solution
code at all (the cell's input is removed; its outputs stay). In both editions:
  - the hidden tests are cut out of the test cells before the page is executed and shown
    (the grader runs them, the book never does), as nbgrader cuts them for students;
  - the first cell's kit address (autograde.kit.WHEEL_URL_TOKEN) is filled in from
    html_baseurl, the one place it is set (_config.yml's html.baseurl);
  - each chapter page links its student zip (`make book` writes _build/downloads/), and,
    once the site is written, every notebook under _sources/ (the page's ".ipynb"
    download) is replaced by the student version of _build/course/release/, or removed.
The tags that Jupyter Book uses to fold or remove code are derived here from the metadata,
so no tags are kept by hand.
"""
import json
import os
import re
import shutil
import sys
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms import SphinxTransform

EDITIONS = {"self-study": "hide-input", "class": "remove-input"}


def edition():
    name = os.environ.get("COURSE_EDITION", "self-study")
    if name not in EDITIONS:
        raise ValueError(f"COURSE_EDITION must be one of {sorted(EDITIONS)}, got {name!r}")
    return name


def _kit(app):
    """autograde.kit, imported from the book's root (the repository)."""
    if os.fspath(app.srcdir) not in sys.path:
        sys.path.insert(0, os.fspath(app.srcdir))
    from autograde import kit
    return kit


def _source(cell):
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def prepared(notebook, chapter, edition_name, baseurl, kit):
    """The chapter notebook `notebook` (a dict, changed in place and returned) as the book
    executes and shows it in edition `edition_name`. _ext/execute_chapters.py executes the
    same notebooks ahead of the build: what the cache's keys hash (code and cell metadata)
    comes from here alone."""
    tag = EDITIONS[edition_name]
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        text = _source(cell).replace(kit.WHEEL_URL_TOKEN, kit.wheel_url(baseurl))
        if meta.get("grade"):
            text = kit.visible_part(text)
        if meta.get("solution"):
            text = kit.solution_code(text)
            tags = cell["metadata"].setdefault("tags", [])
            if tag not in tags:
                tags.append(tag)
        cell["source"] = text
    if re.fullmatch(r"\d\d_\w+", chapter):
        notebook["cells"].insert(1, {"cell_type": "markdown", "metadata": {}, "id": "download-note",
                                     "source": DOWNLOAD_NOTE.format(chapter=chapter)})
    return notebook


def _prepare_notebook(app, docname, source):
    if not os.fspath(app.env.doc2path(docname)).endswith(".ipynb"):
        return
    source[0] = json.dumps(prepared(json.loads(source[0]), os.path.basename(docname), edition(),
                                    app.config.html_baseurl, _kit(app)))


DOWNLOAD_NOTE = """\
```{{admonition}} Do the exercises
:class: tip
Download the student version of this chapter,
{{download}}`{chapter}.zip </_build/downloads/{chapter}.zip>`: the notebook without the
solution code, the checks it runs, and the course's checks package. Unzip it, open
`{chapter}.ipynb` in Jupyter, and follow the {{doc}}`student guide <student_guide>`.
```
"""


def _student_sources(app, exception):
    """Each _sources/**/*.ipynb (the page's download) becomes the student version, in the
    edition's language."""
    if exception is not None or app.builder.name != "html":
        return
    _kit(app)  # (puts the repository on sys.path)
    from autograde.paths import release_dir
    # an edition in another language offers that language's student notebooks
    # (`python -m autograde release --lang`)
    language = app.config.language if app.config.language not in (None, "en") else None
    release = release_dir(Path(app.srcdir) / "_build" / "course", language)
    for path in sorted(Path(app.outdir, "_sources").rglob("*.ipynb*")):
        chapter = path.name.split(".ipynb")[0]
        student = release / chapter / f"{chapter}.ipynb"
        if student.is_file():
            shutil.copyfile(student, path)
        else:  # never leave the source notebook, answers and hidden tests inside
            path.unlink()


# A link to a chapter's page, as MyST leaves it in the doctree: a pending_xref to the
# document (chapters/NN_topic), or, where the page is not in the project, a download of the
# notebook (NN_topic.ipynb).
CHAPTER_TARGET = re.compile(r"(?:.*/)?(?P<chapter>0[0-9]_[a-z]+)(?:\.ipynb)?")
# What such a link reads once the chapter is not open, in each language of the book
# (_config.yml's course_language_editions)
NOT_OPEN = {"en": " (not open yet)", "zh_CN": "（尚未开放）"}


class UnpublishedLinks(SphinxTransform):
    """In the class edition, a link to a chapter the course calendar has not opened
    (autograde.class_calendar: its page is not built) becomes its text, marked NOT_OPEN.
    On the doctree, after Sphinx's Locale transform (priority 20), so that a translated page
    keeps its translated text: the link in the catalogue is the English page's, and the
    message it is part of is found only while the link is still a link."""
    default_priority = 102

    def apply(self, **kwargs):
        if edition() != "class":
            return
        _kit(self.app)  # puts the repository on sys.path
        from autograde import class_calendar, course
        closed = set(course.assignments()) - set(class_calendar.published(class_calendar.setting()))
        links = (addnodes.pending_xref, addnodes.download_reference)
        for link in list(self.document.findall(lambda node: isinstance(node, links))):
            target = CHAPTER_TARGET.fullmatch(link.get("reftarget", ""))
            if target is None or target["chapter"] not in closed:
                continue
            # the link's own text (MyST wraps it in one inline node), maths included
            text = link.children
            if len(text) == 1 and isinstance(text[0], nodes.inline):
                text = text[0].children
            link.replace_self([child.deepcopy() for child in text]
                              + [nodes.Text(NOT_OPEN[self.config.language or "en"])])


def _class_site_extra(app, config):
    """The class edition serves the kit of its published chapters (`make book-class`
    writes it to COURSE_SITE_EXTRA) instead of the kit of every chapter."""
    extra = os.environ.get("COURSE_SITE_EXTRA")
    if edition() == "class" and extra:
        config.html_extra_path = [extra]


def setup(app):
    edition()  # refuse an unknown edition before any page is read
    app.connect("config-inited", _class_site_extra)
    app.connect("source-read", _prepare_notebook)
    app.add_transform(UnpublishedLinks)
    app.connect("build-finished", _student_sources)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
