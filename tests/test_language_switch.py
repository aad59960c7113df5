"""Each page of each language edition links, from its header, to the same page in the other
edition (issue 24; _ext/course_language.py, templates/language-switch.html): the self-study
edition to the self-study edition, the class edition to the class edition. The links are
relative and follow the published layout of _config.yml's course_language_editions (the
Chinese root under zh_CN/ of the English one, for each of the two editions); here each built
edition's pages are read and each link is resolved in that layout. `make test` builds all
four; `make book-zh` builds the Chinese ones and runs this file."""
import posixpath
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "_ext"))
from course_language import _page_context, other_editions  # noqa: E402  (_ext/ is no package)

EDITIONS = yaml.safe_load((REPO / "_config.yml").read_text())["sphinx"]["config"][
    "course_language_editions"]
# {edition: {language: its built site}}
BUILT = {"self-study": {"en": REPO / "_build" / "html",
                        "zh_CN": REPO / "_build" / "zh_CN" / "_build" / "html"},
         "class": {"en": REPO / "_build" / "class" / "_build" / "html",
                   "zh_CN": REPO / "_build" / "zh_CN-class" / "_build" / "html"}}
SWITCH = re.compile(r'<a class="[^"]*course-language-switch[^"]*" href="([^"]+)" hreflang="([^"]+)"')


def pages(site):
    """The pages of a built edition (not its redirect index.html, static files or downloads),
    as {page name: HTML}: chapters/intro, search, genindex, ..."""
    found = {}
    for path in sorted(site.rglob("*.html")):
        relative = path.relative_to(site).as_posix()
        if relative.split("/")[0] in {"_static", "_sources", "_images", "kit", "vendor"}:
            continue
        text = path.read_text(encoding="utf-8")
        if 'http-equiv="Refresh"' in text or 'http-equiv="refresh"' in text:
            continue
        found[relative[:-len(".html")]] = text
    return found


def published(language, page, href):
    """Where `href` on `page` of `language`'s edition leads on the published site:
    (edition, page name) of the target."""
    here = EDITIONS[language] + page + ".html"
    target = posixpath.normpath(posixpath.join(posixpath.dirname(here), href))
    for other, root in sorted(EDITIONS.items(), key=lambda e: -len(e[1])):
        if target.startswith(root):
            return other, target[len(root):-len(".html")]
    raise AssertionError(f"{href} on {page} leads outside the site: {target}")


def test_the_links_lead_to_the_same_page_in_the_other_edition():
    assert EDITIONS == {"en": "", "zh_CN": "zh_CN/"}
    for page in ["intro", "chapters/intro", "chapters/figures/x"]:
        for language in EDITIONS:
            (link,) = other_editions(language, page, EDITIONS)
            other = "zh_CN" if language == "en" else "en"
            assert published(language, page, link["url"]) == (other, page)
            assert link["hreflang"] == other.replace("_", "-")
    assert other_editions("en", "chapters/intro", EDITIONS)[0]["url"] == "../zh_CN/chapters/intro.html"
    assert other_editions("zh_CN", "chapters/intro", EDITIONS)[0]["url"] == "../../chapters/intro.html"


@pytest.mark.parametrize("edition, language", [(e, l) for e in sorted(BUILT) for l in EDITIONS])
def test_every_built_page_links_to_itself_in_the_other_edition(edition, language):
    site = BUILT[edition][language]
    if not (site / "index.html").exists():
        pytest.skip(f"the {edition} edition in {language} is not built ({site}): `make test` "
                    "builds it, `make book-zh` builds and checks the Chinese ones")
    built = pages(site)
    assert "chapters/intro" in built and "chapters/student_guide" in built
    other = "zh_CN" if language == "en" else "en"
    other_site = BUILT[edition][other]  # the same edition in the other language
    other_pages = pages(other_site) if (other_site / "index.html").exists() else None
    for page, text in built.items():
        links = SWITCH.findall(text)
        assert len(links) == 1, f"{language} {page}: {len(links)} language switches"
        (href, hreflang), = links
        assert hreflang == other.replace("_", "-")
        assert published(language, page, href) == (other, page), (language, page, href)
        canonical = re.search(r'<link rel="canonical" href="([^"]+)"', text)
        assert canonical is None or canonical.group(1).endswith("/" + EDITIONS[language] + page + ".html"), (
            language, page, canonical.group(1))
        if other_pages is not None:
            assert page in other_pages, f"{href} on {language} {page}: no such page in {other}"


@pytest.mark.parametrize("course_edition", ["self-study", "class"])
def test_each_edition_has_the_switch(monkeypatch, course_edition):
    """The class edition too: its switch leads to the class edition in the other language
    (published under its zh_CN/, built by `make book-zh-class`), never to a self-study one."""
    monkeypatch.setenv("COURSE_EDITION", course_edition)
    for language in EDITIONS:
        config = SimpleNamespace(course_language_editions=EDITIONS, language=language,
                                 html_baseurl="https://example.org/course/")
        context = {"metatags": "", "pageurl": "https://example.org/course/chapters/intro.html"}
        _page_context(SimpleNamespace(config=config), "chapters/intro", "page.html", context, None)
        assert len(context["course_other_editions"]) == 1
        assert context["metatags"].count('rel="alternate"') == 1
        assert context["pageurl"] == ("https://example.org/course/" + EDITIONS[language]
                                      + "chapters/intro.html")
