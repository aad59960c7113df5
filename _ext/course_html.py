"""Sphinx extension: fixes to the HTML pages that Jupyter Book 1.x writes.

- MathJax on every page: a page without maths of its own still shows maths in the
  navigation (the title of chapter 3 has $W_O$), which Sphinx would leave as raw TeX.
- One copy of each script per page: with Sphinx 7.4 the inline scripts that extensions
  add (sphinx-thebe's `const THEBE_JS_URL = ...`, sphinx-togglebutton's settings) reach
  each page twice, and the second `const` throws "Identifier 'THEBE_JS_URL' has already
  been declared" on every page.
- static/course.css: long inline code wraps at phone width instead of widening the page;
  printed outputs wrap at the column; display maths and tables wider than the column
  scroll inside their own box.
- static/course.js: marks each such box that scrolls with a visible hint (a shadow, a
  scroll bar and the words "scroll sideways"): a phone shows no scroll bar by itself. It
  also lets each figure of an executed cell shrink with the column only as far as its
  smallest text stays at 70% of the body text; narrower, the figure's box scrolls.
- the sidebar (static/course.css): the book theme's 20% from 960 px instead of 992 px, so that
  the tablet widths in between keep a column as wide as a desktop's.

tests/test_browser.py checks all of this on every page, in a browser.
"""
from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"


def _add_static_path(app):
    app.config.html_static_path.append(str(STATIC))


def _one_copy_of_each_script(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        attributes = getattr(script, "attributes", {})
        key = (getattr(script, "filename", str(script)) or "", tuple(sorted(attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique  # in place: the builder restores its own list after each page


def setup(app):
    app.set_html_assets_policy("always")
    app.connect("builder-inited", _add_static_path)
    app.add_css_file("course.css")
    app.add_js_file("course.js", loading_method="defer")
    # late, after the extensions that add scripts while a page is written
    app.connect("html-page-context", _one_copy_of_each_script, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
