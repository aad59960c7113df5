"""The Chinese edition's catalogues (issue 24): every document has one, each is current (its
English messages are the ones the book's sources hold now: a changed English sentence fails
here until `make locales` has merged it and a translator has translated it again), and the
documents of locales/zh_CN/TRANSLATED are wholly translated, keeping their code, maths and
link targets. The glossary's terms are checked in tests/test_glossary.py, the language
switch in tests/test_language_switch.py."""
import html
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog

from tests.translations import (MESSAGES, NOT_PROSE, REPO, catalogue_path, catalogued_documents,
                                read_catalogue, translated_documents)


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    """{document: {English message}} of every page of the book, extracted now as `make gettext`
    does (Sphinx's gettext builder through Jupyter Book, the notebooks not executed: ~4 s)."""
    out = tmp_path_factory.mktemp("gettext")
    config = out / "_config.yml"
    subprocess.run([sys.executable, str(REPO / "_ext" / "course_language.py"), "config",
                    "--gettext", str(config)], check=True, cwd=REPO)
    build = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build", ".",
                            "--config", str(config), "--path-output", str(out), "--builder",
                            "custom", "--custom-builder", "gettext", "--all", "--warningiserror",
                            "-q"], cwd=REPO, capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    templates = catalogued_documents(out / "_build" / "gettext", suffix=".pot")
    assert "chapters/intro" in templates, sorted(templates)
    return {document: {m.id for m in read_catalogue(path) if m.id}
            for document, path in templates.items()}


def stale(catalogue, english):
    """What `catalogue` lacks of the English messages `english`, and what it holds that they
    no longer do: (missing, gone), each sorted."""
    held = {m.id for m in catalogue if m.id}
    return sorted(english - held), sorted(held - english)


def untranslated(catalogue):
    """Each message of `catalogue` that the edition would show in English or as a guess:
    [(why, English)], why being "empty", "fuzzy" or "obsolete"."""
    found = [("empty", m.id) for m in catalogue if m.id and not m.string]
    found += [("fuzzy", m.id) for m in catalogue if m.id and m.fuzzy]
    found += [("obsolete", m.id) for m in catalogue.obsolete.values()]
    return found


ROLE = re.compile(r"\{([a-z]+)\}`(?:[^`<]*<([^>`]*)>|([^`]*))`")


def _fixed_part(span):
    """What a translation must keep of a span NOT_PROSE found: all of it, except a role's
    link text ({doc}`student guide <student_guide>` keeps {doc} and student_guide only: the
    words a reader clicks are prose)."""
    role = ROLE.fullmatch(span)
    return f"{{{role.group(1)}}}`{role.group(2) or role.group(3)}`" if role else span


def not_kept(english, chinese):
    """The code spans, maths, link targets and addresses of `english` that `chinese` does not
    hold as often (a translation changes the prose around them, never them)."""
    def fixed(text):
        return Counter(_fixed_part(span) for span in NOT_PROSE.findall(text))
    return sorted((fixed(english) - fixed(chinese)).elements())


def test_a_roles_link_text_may_be_translated_and_its_target_may_not():
    english = "see the {doc}`student guide <student_guide>` and `x`"
    assert not_kept(english, "见{doc}`学生指南 <student_guide>`和 `x`") == []
    assert not_kept(english, "见{doc}`学生指南 <run_locally>`和 `x`") == [
        "{doc}`student_guide`"]
    assert not_kept("{ref}`masks`", "{ref}`masks`") == []


def test_every_page_has_a_current_catalogue(extracted):
    catalogued = catalogued_documents(MESSAGES)
    assert sorted(catalogued) == sorted(extracted), (
        "the documents with a catalogue are not the book's pages: run `make locales`")
    report = {}
    for document, english in extracted.items():
        missing, gone = stale(read_catalogue(catalogued[document]), english)
        if missing or gone:
            report[document] = {"new or changed English": [m[:90] for m in missing],
                                "no longer in the English": [m[:90] for m in gone]}
    assert not report, f"catalogues behind the English sources: run `make locales`, then translate: {report}"


def test_the_documents_listed_as_translated_are_wholly_translated():
    documents = translated_documents()
    assert {"chapters/intro", "chapters/student_guide", "chapters/run_locally"} <= set(documents)
    for document in documents:
        catalogue = read_catalogue(catalogue_path(document))
        assert len([m for m in catalogue if m.id]) > 10, document
        assert untranslated(catalogue) == [], document


def test_every_page_of_the_book_is_listed_as_translated():
    """Issue 24's "100% of messages translated": the manifest lists every page that has a
    catalogue, so the test above holds the whole book to no message empty, fuzzy or obsolete
    (the checks', grader's, figures', plots' and prints' catalogues have tests of their own)."""
    assert sorted(catalogued_documents(MESSAGES)) == sorted(translated_documents()), \
        "a page whose catalogue is not wholly translated: translate it, then list it in TRANSLATED"


def test_translations_keep_code_maths_and_links():
    for document in translated_documents():
        for message in read_catalogue(catalogue_path(document)):
            if message.id:
                assert not_kept(message.id, message.string) == [], (document, message.id)


def test_the_checks_above_catch_what_they_name():
    catalogue = Catalog(locale="zh_CN")
    catalogue.add("Masking", "掩码")
    catalogue.add("Padding", "")
    catalogue.add("A mask", "一个掩码", flags=["fuzzy"])
    catalogue.obsolete["Old"] = catalogue["Masking"].__class__("Old", "旧")
    assert untranslated(catalogue) == [("empty", "Padding"), ("fuzzy", "A mask"),
                                       ("obsolete", "Old")]
    assert stale(catalogue, {"Masking", "Padding", "Heads"}) == (["Heads"], ["A mask"])
    assert not_kept("call `split_heads` on $X$", "对 $X$ 调用 `split_head`") == ["`split_heads`"]
    assert not_kept("[1. Masks](04_masks.ipynb)", "[1. 掩码](04_masks.ipynb)") == []


def test_the_build_configurations_follow_config_yml():
    """`make gettext` and `make book-zh` build from _config.yml changed only where they must:
    the Chinese edition reads the catalogues and a jupyter-cache of its own (its notebooks
    executed with their plots' labels in Chinese), and its launch buttons open the Chinese
    student notebooks under its root; the extraction executes nothing."""
    import yaml
    sys.path.insert(0, str(REPO / "_ext"))
    from course_language import edition_config

    english = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    chinese = edition_config(language="zh_CN")
    settings = chinese["sphinx"]["config"]
    assert settings["language"] == "zh_CN" and settings["locale_dirs"] == ["locales"]
    assert settings["gettext_compact"] is False
    assert chinese["execute"] == dict(english["execute"], cache=english["execute"]["cache"] + "-zh_CN")
    assert chinese["repository"] == dict(english["repository"], path_to_book="zh_CN")
    assert settings["course_language_editions"]["zh_CN"] == "zh_CN/"
    assert chinese["title"] != english["title"] and chinese["parse"] == english["parse"]
    for folder in chinese["sphinx"]["local_extensions"].values():
        assert Path(folder).is_absolute() and Path(folder).is_dir()
    assert set(chinese["sphinx"]["local_extensions"]) == set(english["sphinx"]["local_extensions"])
    extraction = edition_config(gettext=True)
    assert extraction["execute"]["execute_notebooks"] == "off"
    assert "language" not in extraction["sphinx"]["config"]


CHINESE_RUN = re.compile(r"[\u4e00-\u9fff\u3000-\u303f\uff00-\uffef]{4,}")
ZH_SITE = REPO / "_build" / "zh_CN" / "_build" / "html"


# A figure's translated description is its image's alternative text: an attribute, not text.
IMAGE_ALT = re.compile(r'<img\b[^>]*?\balt="([^"]*)"[^>]*>')


def page_text(path):
    """The text of a built page's body (the article, and the sidebar with the table of
    contents' captions) with each image's alternative text, its markup removed and its spaces
    collapsed."""
    article = path.read_text(encoding="utf-8").split("<body", 1)[1]
    article = IMAGE_ALT.sub(r" \1 ", article)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", article)))


def test_page_text_holds_the_text_and_the_images_descriptions(tmp_path):
    page = tmp_path / "page.html"
    page.write_text('<html><body><p>掩码<em>示意</em></p><img src="a.svg" alt="填充掩码 &amp; 因果掩码" '
                    'class="x" /><script>var x;</script></body></html>', encoding="utf-8")
    text = page_text(page)
    assert "掩码示意 填充掩码 & 因果掩码" in text and "img" not in text and "<" not in text


def test_the_built_chinese_pages_show_every_translation():
    """Sphinx falls back to the English, silently, for a translation whose markup does not
    parse to the same kind of node ("2. 收集" would be a list where the English was a title):
    each translated message's first run of Chinese must be on its built page."""
    if not (ZH_SITE / "index.html").exists():
        pytest.skip(f"the Chinese edition is not built ({ZH_SITE}): `make book-zh` builds and checks it")
    for document in translated_documents():
        text = page_text(ZH_SITE / f"{document}.html")
        for message in read_catalogue(catalogue_path(document)):
            run = CHINESE_RUN.search(message.string) if message.id else None
            if run:
                assert run.group() in text, (document, message.id[:80], run.group())


# What a translated page must show as the English one does: each of its formulas (Sphinx
# drops, silently, a display formula whose words were translated; a translation may repeat
# a symbol, so the Chinese may hold more), and the same code cells and images.
FORMULA = re.compile(r'class="math notranslate nohighlight">(.*?)</(?:span|div)>', re.S)
SAME_COUNT = {"code cells": re.compile(r'<div class="cell docutils container'),
              "images": re.compile(r"<img\b")}
EN_SITE = REPO / "_build" / "html"


def test_the_built_chinese_pages_keep_every_formula_cell_and_image():
    if not (ZH_SITE / "index.html").exists() or not (EN_SITE / "index.html").exists():
        pytest.skip("both editions must be built (`make book` and `make book-zh`)")
    different = []
    for document in translated_documents():
        english = (EN_SITE / f"{document}.html").read_text(encoding="utf-8")
        chinese = (ZH_SITE / f"{document}.html").read_text(encoding="utf-8")

        def formulas(page):
            return Counter(" ".join(f.split()) for f in FORMULA.findall(page))
        lost = formulas(english) - formulas(chinese)
        different += [f"{document}: the formula {f[:80]!r} is not on the Chinese page" for f in lost]
        for what, pattern in SAME_COUNT.items():
            counts = len(pattern.findall(english)), len(pattern.findall(chinese))
            if counts[0] != counts[1]:
                different.append(f"{document}: {what} {counts[0]} in English, {counts[1]} in Chinese")
    assert not different, different
