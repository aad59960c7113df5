"""A class edition that follows the course's calendar: _config.yml's class_calendar
decides which chapters `make book-class` (and `make book-zh-class`, the same in Chinese) and
its kit publish; built here for every setting, no published byte holds an answer of an open
chapter."""
import datetime
import html
import os
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
from filelock import FileLock

from autograde import class_calendar, course
from tests.test_leaks import _site_files, leaks, needles, owner
from tests.translations import catalogue_path, read_catalogue

REPO = Path(__file__).resolve().parent.parent
CHAPTERS = course.assignments()


def test_the_setting_reads_all_a_number_or_dates():
    assert class_calendar.published("all") == CHAPTERS
    assert class_calendar.published(0) == []
    assert class_calendar.published(3) == CHAPTERS[:3]
    day = datetime.date(2026, 10, 1)
    dates = {"01_attention": datetime.date(2026, 9, 7), "03_mha": datetime.date(2026, 9, 21),
             "04_masks": datetime.date(2026, 10, 2)}
    # 02_heads has no date: it opens with the next dated chapter (03_mha)
    assert class_calendar.published(dates, today=day) == CHAPTERS[:3]
    assert class_calendar.published(dates, today=datetime.date(2026, 10, 2)) == CHAPTERS[:4]
    assert class_calendar.published(dates, today=datetime.date(2026, 9, 1)) == []
    for bad in (len(CHAPTERS) + 1, -1, "some", {"99_nothing": day}, {"01_attention": "soon"},
                True):
        with pytest.raises(ValueError):
            class_calendar.published(bad, today=day)


def test_the_repository_setting_publishes_every_chapter():
    """The setting as committed: the class edition `make test` builds has every chapter."""
    assert class_calendar.published(class_calendar.setting(REPO / "_config.yml")) == CHAPTERS


def test_the_kit_is_written_where_asked_from_a_relative_path(tmp_path, monkeypatch):
    """make book-class names the kit's folder relative to the repository."""
    monkeypatch.chdir(tmp_path)
    fixtures = tmp_path / "course" / "fixtures"
    fixtures.mkdir(parents=True)
    built = REPO / "_build" / "course" / "fixtures" / "01_attention.npz"
    if not built.is_file():
        pytest.skip("the released course is not built (make test builds it)")
    (fixtures / "01_attention.npz").write_bytes(built.read_bytes())
    class_calendar.write_kit(tmp_path / "course", "extra", CHAPTERS[:1])
    assert len(list((tmp_path / "extra" / "kit").glob("*.whl"))) == 1


def test_the_toc_keeps_only_published_chapters(tmp_path):
    toc = class_calendar.write_toc(REPO / "_toc.yml", tmp_path / "toc.yml", CHAPTERS[:2])
    text = toc.read_text()
    assert "chapters/01_attention" in text and "chapters/02_heads" in text
    assert "chapters/03_mha" not in text and "chapters/intro" in text


@pytest.fixture(scope="module")
def found():
    return needles()


# each language's class edition: its make target and the variable naming its output folder
TARGETS = {"en": ("book-class", "CLASS_OUT"), "zh_CN": ("book-zh-class", "ZH_CLASS_OUT")}


def build(tmp_path_factory, opened, language="en"):
    """`make book-class` (or its Chinese sibling) for the setting `opened` chapters, into a
    folder of its own."""
    out = tmp_path_factory.mktemp(f"class-{language}-{opened}")
    env = dict(os.environ, COURSE_CLASS_CALENDAR=str(opened))
    # the prerequisites every setting shares (the release, its zips and the kit's wheel),
    # brought up to date by one worker at a time: two makes rebuilding the wheel at once
    # let one zip it while the other rewrites it
    with FileLock(REPO / "_build" / "class-prerequisites.lock"):
        done = subprocess.run(["make", "_build/downloads/.stamp"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    # what an earlier build with another calendar left there (the last chapter's page and
    # zip), which this one must not publish
    stale = out / "_build" / "html"
    (stale / "_downloads" / "0").mkdir(parents=True)
    (stale / "_downloads" / "0" / f"{CHAPTERS[-1]}.zip").write_bytes(b"stale")
    (stale / "chapters").mkdir()
    (stale / "chapters" / f"{CHAPTERS[-1]}.html").write_text("stale")
    target, variable = TARGETS[language]
    done = subprocess.run(["make", target, f"{variable}={out}"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return out / "_build" / "html"


# What a link to a closed chapter reads (_ext/course_solutions.py: NOT_OPEN), in each language
NOT_OPEN = {"en": "(not open yet)", "zh_CN": "（尚未开放）"}
# a row of the intro's table of chapters, as its catalogue holds it: [text](NN_topic.ipynb)
CHAPTER_ROW = re.compile(r"\[(.+)\]\(0[0-9]_[a-z]+\.ipynb\)")


# Each setting is a whole `make book-class` (about 20 s of CPU): the ones where what a class
# edition holds changes in kind: nothing open, the first chapter whose zip ships earlier
# chapters' answers (5), and all but the capstone. The one in the middle is built in Chinese
# (`make book-zh-class`: the same pages, kit and checks, the Chinese zips), so that each
# language's edition is built with chapters both open and closed, at no added cost.
@pytest.mark.parametrize("language, opened", [("en", 0), ("zh_CN", 5), ("en", len(CHAPTERS) - 1)])
def test_a_class_edition_publishes_only_open_chapters(tmp_path_factory, found, language,
                                                      opened):
    """Every setting but `all` (the edition `make test` builds and test_leaks scans):
    chapters 1..opened published, nothing of the later ones, no answer of chapter
    `opened` anywhere, earlier chapters' answers only where the course gives them; the
    open chapters' zips in the edition's language, the closed chapters' links marked in
    it."""
    site = build(tmp_path_factory, opened, language)
    files = _site_files(site)
    published = {owner(name) for name, _ in files} - {0}
    assert published == set(range(1, opened + 1)), sorted(published)
    for number, chapter in enumerate(CHAPTERS, start=1):
        assert (site / "chapters" / f"{chapter}.html").is_file() == (number <= opened)
    assert leaks(files, found) == []
    open_answers = [line for line, (chapter, what, _) in found.items() if chapter == opened]
    assert not any(line in text for line in open_answers for _, text in files)
    # each open chapter's page offers its zip in the edition's language, byte for byte
    zips = REPO / "_build" / "downloads" / ("" if language == "en" else language)
    offered = {path.name: path.read_bytes() for path in (site / "_downloads").rglob("*.zip")}
    assert offered == {f"{chapter}.zip": (zips / f"{chapter}.zip").read_bytes()
                       for chapter in CHAPTERS[:opened]}
    # the intro's table: an open chapter's row links its page, a closed one's says so
    intro = (site / "chapters" / "intro.html").read_text(encoding="utf-8")
    for number, chapter in enumerate(CHAPTERS, start=1):
        assert (f'href="{chapter}.html"' in intro) == (number <= opened), chapter
    for other, marker in NOT_OPEN.items():
        assert intro.count(marker) == (len(CHAPTERS) - opened if other == language else 0)
    if language != "en":  # a closed chapter's row keeps its translated text
        rows = {m.id: m.string for m in read_catalogue(catalogue_path("chapters/intro"))
                if m.id and CHAPTER_ROW.fullmatch(m.id)}
        for chapter in CHAPTERS[opened:]:
            (row,) = [CHAPTER_ROW.fullmatch(text)[1] for english, text in rows.items()
                      if english.endswith(f"({chapter}.ipynb)")]
            if "$" not in row:  # (maths is rendered otherwise)
                assert f"{html.escape(row, quote=False)}{NOT_OPEN[language]}" in intro, row
    # the kit holds the checks of the published chapters that ship no answers, no others
    wheels = sorted((site / "kit").glob("*.whl"))
    public = [c for c in CHAPTERS[:opened] if not course.answers_shipped(c)]
    if not public:
        assert not wheels
        return
    (wheel,) = wheels
    with zipfile.ZipFile(wheel) as archive:
        shipped = {Path(n).stem for n in archive.namelist() if n.startswith("checks/")
                   and n.endswith(".py")}
        fixtures = {Path(n).stem for n in archive.namelist() if n.endswith(".npz")}
    wanted = set().union(*(course.checks_modules(c, kit_form=True) for c in public))
    assert shipped == wanted and fixtures == set(public)
