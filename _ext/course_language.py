"""The book's language editions (issue 24): English from the sources, Simplified Chinese from
the same sources through Sphinx's gettext workflow.

Two parts:

- a Sphinx extension: each page's header links to the same page in the other edition
  (templates/language-switch.html, in the book theme's article header), and names it for
  search engines (<link rel="alternate" hreflang>); the table of contents' captions are
  translated too (TranslateTocCaptions); a search in Chinese splits the reader's query into
  the words of the index (ChineseSearch). Where each edition's root lies on the
  published site, relative to the English root, is `course_language_editions` in
  _config.yml; the edition a build writes is Sphinx's `language`. Both editions exist in
  each language (`make book-zh`): a class edition's switch leads to the class edition in
  the other language (published under zh_CN/ of the English class edition), never to a
  self-study one, whose solutions are folded under each exercise.
- the configuration of the other builds, written from _config.yml so that it stays the one
  source of the book's settings:

      python _ext/course_language.py config --gettext OUT.yml       (`make gettext`)
      python _ext/course_language.py config --language zh_CN OUT.yml (`make book-zh`)

  `--gettext`: the messages of every page, one catalogue per document (gettext_compact off:
  chapters/intro.pot, not one chapters.pot), the notebooks not executed (the gettext
  builder reads prose only). `--language`: the edition in that language, from the
  catalogues under locales/<language>/LC_MESSAGES/, with the configuration strings of
  locales/<language>/config.yml (the title), executed outputs from the language's own
  jupyter-cache (language_cache: the same code, executed with the plots' labels in that
  language by _ext/execute_chapters.py --language).
"""
import argparse
import os
import re
from pathlib import Path

import yaml
from docutils import nodes
from sphinx import addnodes, locale
from sphinx.search.zh import SearchChinese
from sphinx.transforms import SphinxTransform
from sphinx.util.i18n import docname_to_domain


REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "_config.yml"
LOCALES = REPO / "locales"
TEMPLATES = Path(__file__).resolve().parent / "templates"
ENGLISH = "en"
# each edition's name for itself, the label of the switch that leads to it
LABELS = {"en": "English", "zh_CN": "中文"}
TITLES = {"en": "Read this page in English", "zh_CN": "阅读本页的中文版"}


def edition_config(language=None, gettext=False):
    """_config.yml as a dict, changed for the gettext extraction or for `language`'s edition.
    Paths that Jupyter Book resolves against the configuration file's folder (the local
    extensions) are made absolute, so the result may be written anywhere."""
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    sphinx = config.setdefault("sphinx", {})
    sphinx["local_extensions"] = {name: str((REPO / folder).resolve())
                                  for name, folder in sphinx.get("local_extensions", {}).items()}
    settings = sphinx.setdefault("config", {})
    # one catalogue per document; no source line numbers in them, so that moving an
    # English paragraph changes no translation file
    settings.update(gettext_compact=False, gettext_location=False,
                    locale_dirs=[os.path.relpath(LOCALES, REPO)])
    if gettext:
        config.setdefault("execute", {})["execute_notebooks"] = "off"
        # the raw HTML blocks too (the predict-then-run answers' <details><summary>): in
        # the extraction only, since Sphinx's Locale transform re-parses a translated raw
        # block as rST, which MyST pages drop; TranslateAfterLocale applies them instead
        settings["gettext_additional_targets"] = ["raw"]
    if language:
        settings["language"] = language
        # its own jupyter-cache: its notebooks are executed with their plots' labels in
        # `language` (_ext/execute_chapters.py --language, _ext/plot_language.py)
        config.setdefault("execute", {})["cache"] = language_cache(config, language)
        # the launch buttons open this language's student notebooks: on the branch `student`
        # (autograde.course.student_branch), under the edition's root, as on the site
        root = settings.get("course_language_editions", {}).get(language, "").strip("/")
        if root:
            config.setdefault("repository", {})["path_to_book"] = root
        overrides = LOCALES / language / "config.yml"
        if overrides.exists():
            _merge(config, yaml.safe_load(overrides.read_text(encoding="utf-8")))
    return config


def language_cache(config, language):
    """The jupyter-cache of `language`'s edition: beside the English one (_config.yml's
    execute.cache), its name ending in the language (_build/.jupyter_cache-zh_CN)."""
    return f"{config.get('execute', {}).get('cache', '_build/.jupyter_cache')}-{language}"


def _merge(config, overrides):
    """`overrides` written into `config`, key by key down the nested mappings (an edition's
    sphinx: config: entries join _config.yml's instead of replacing them)."""
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            _merge(config[key], value)
        else:
            config[key] = value


def other_editions(language, pagename, editions):
    """[{url, hreflang, label, title}] of `pagename` in every edition but `language`'s,
    relative to the page itself. `editions`: {language: root relative to the English root}."""
    here = editions[language]
    to_root = "../" * pagename.count("/") + "../" * here.count("/")
    return [{"url": f"{to_root}{root}{pagename}.html", "hreflang": other.replace("_", "-"),
             "label": LABELS.get(other, other), "title": TITLES.get(other, other)}
            for other, root in editions.items() if other != language]


# A chapter page's link to its student zip (course_solutions.DOWNLOAD_NOTE): the English
# one, which `python -m autograde release --zip _build/downloads` writes; with --lang, each
# language's lies in _build/downloads/<language>/ (the notebook's prose translated).
STUDENT_ZIP = re.compile(r"/_build/downloads/(?P<name>[0-9][0-9]_[a-z_]+\.zip)")


class TranslateAfterLocale(SphinxTransform):
    """What Sphinx's Locale transform (priority 20) leaves in English, translated from the
    page's catalogue: the captions of the table of contents ("Using the course",
    "Chapters"), which sphinx-external-toc inserts at priority 100, after Locale; and the
    raw HTML blocks (the predict-then-run answers' <details><summary>), which Locale would
    re-parse as rST and a MyST page would lose. The gettext builder extracts both (the
    captions into the root page's catalogue; raw blocks with gettext_additional_targets)."""
    default_priority = 101

    def apply(self, **kwargs):
        language = self.config.language
        if not language or language == ENGLISH:
            return
        for download in self.document.findall(addnodes.download_reference):
            target = STUDENT_ZIP.fullmatch(download.get("reftarget", ""))
            if target:  # this edition's student notebooks, in its language
                download["reftarget"] = f"/_build/downloads/{language}/{target['name']}"
        domain = docname_to_domain(self.env.docname, self.config.gettext_compact)
        folders = [os.path.join(self.env.srcdir, d) for d in self.config.locale_dirs]
        catalogue, found = locale.init(folders, language, domain)
        if not found:
            return
        for toctree in self.document.findall(addnodes.toctree):
            if toctree.get("caption"):
                toctree["caption"] = catalogue.gettext(toctree["caption"])
        for raw in self.document.findall(nodes.raw):
            english = raw.rawsource or raw.astext()   # the message, as the extraction took it
            translated = catalogue.gettext(english)
            if raw.get("format") == "html" and translated != english:
                raw.children = [nodes.Text(translated)]
                raw.rawsource = translated


# The query splitter of the Chinese search (searchtools.js calls splitQuery, at query time,
# once the index is loaded). Sphinx's default splits at what is not a letter, so a query
# written as Chinese is, with no spaces (多头注意力), stays one word, which the index does not
# hold: jieba cut the pages' text into its words (多头, 注意力), and no result matched. Here
# each run of Han characters that is not itself a word of the index is cut into the index's
# longest words from its start (forward maximum matching, with the index as the
# dictionary); a character that begins no word of the index is left out, as the index
# leaves out words of one character (SearchChinese.word_filter).
CHINESE_SPLITTER_JS = r"""
var splitQuery = (query) => {
  const index = typeof Search !== "undefined" && Search._index;
  const known = (word) => index && (Object.prototype.hasOwnProperty.call(index.terms, word)
                                    || Object.prototype.hasOwnProperty.call(index.titleterms, word));
  const words = [];
  for (const term of query.split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu)) {
    for (const run of term.match(/\p{Script=Han}+|[^\p{Script=Han}]+/gu) || []) {
      if (!index || known(run) || !/\p{Script=Han}/u.test(run)) { words.push(run); continue; }
      for (let start = 0; start < run.length;) {
        let end = run.length;
        while (end > start + 1 && !known(run.slice(start, end))) end--;
        if (known(run.slice(start, end))) words.push(run.slice(start, end));
        start = end;
      }
    }
  }
  return words;
};
"""


class ChineseSearch(SearchChinese):
    """Sphinx's Chinese search (jieba cuts the pages' text into words), whose query splitter
    cuts a query written with no spaces into the index's words (CHINESE_SPLITTER_JS)."""
    js_splitter_code = CHINESE_SPLITTER_JS


def _use_template(app, config):
    config.templates_path.append(str(TEMPLATES))
    options = config.html_theme_options
    options["article_header_end"] = ["language-switch.html", "article-header-buttons.html"]


def _page_context(app, pagename, templatename, context, doctree):
    editions = app.config.course_language_editions
    language = app.config.language or ENGLISH
    if language not in editions:
        raise ValueError(f"language {language!r} is not in course_language_editions {editions}")
    base, pageurl = app.config.html_baseurl, context.get("pageurl")
    if base and pageurl and pageurl.startswith(base) and editions[language]:
        # the canonical address of a page of this edition, under its own root (the build's
        # html_baseurl stays the English one: the notebooks' kit address, and with it the
        # execution cache's keys, are the same in both editions)
        context["pageurl"] = base.rstrip("/") + "/" + editions[language] + pageurl[len(base):].lstrip("/")
    others = other_editions(language, pagename, editions)
    context["course_other_editions"] = others
    context["metatags"] = context.get("metatags", "") + "".join(
        f'\n<link rel="alternate" hreflang="{o["hreflang"]}" href="{o["url"]}" />' for o in others)


def setup(app):
    app.add_config_value("course_language_editions", {ENGLISH: ""}, "html", dict)
    app.connect("config-inited", _use_template)
    # in _ext/static/, which course_html adds to html_static_path
    app.add_css_file("course-language.css")
    app.add_transform(TranslateAfterLocale)
    app.add_search_language(ChineseSearch)  # for `language: zh_CN`, in place of Sphinx's own
    app.connect("html-page-context", _page_context)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("config", help="write a build's _config.yml")
    kind = write.add_mutually_exclusive_group(required=True)
    kind.add_argument("--gettext", action="store_true", help="for the gettext extraction")
    kind.add_argument("--language", help="for this language's edition, e.g. zh_CN")
    write.add_argument("output", type=Path)
    args = parser.parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    config = edition_config(language=args.language, gettext=args.gettext)
    args.output.write_text("# written by _ext/course_language.py from _config.yml: edit that\n"
                           + yaml.safe_dump(config, allow_unicode=True, sort_keys=False),
                           encoding="utf-8")


if __name__ == "__main__":
    main()
