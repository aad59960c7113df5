"""A class edition that follows the course's calendar: _config.yml's class_calendar
decides which chapters `make book-class` and its kit publish; built here for every
setting, no published byte holds an answer of an open chapter."""
import datetime
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from filelock import FileLock

from autograde import class_calendar, course
from tests.test_leaks import _site_files, leaks, needles, owner

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


def build(tmp_path_factory, opened):
    """`make book-class` for the setting `opened` chapters, into a folder of its own."""
    out = tmp_path_factory.mktemp(f"class-{opened}")
    env = dict(os.environ, COURSE_CLASS_CALENDAR=str(opened))
    # the prerequisites every setting shares (the release, its zips and the kit's wheel),
    # brought up to date by one worker at a time: two makes rebuilding the wheel at once
    # let one zip it while the other rewrites it
    with FileLock(REPO / "_build" / "class-prerequisites.lock"):
        done = subprocess.run(["make", "_build/downloads/.stamp"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    done = subprocess.run(["make", "book-class", f"CLASS_OUT={out}"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return out / "_build" / "html"


# Each setting is a whole `make book-class` (about 20 s of CPU): the ones where what a class
# edition holds changes in kind: nothing open, the first chapter whose zip ships earlier
# chapters' answers (5), and all but the capstone.
@pytest.mark.parametrize("opened", [0, 5, len(CHAPTERS) - 1])
def test_a_class_edition_publishes_only_open_chapters(tmp_path_factory, found, opened):
    """Every setting but `all` (the edition `make test` builds and test_leaks scans):
    chapters 1..opened published, nothing of the later ones, no answer of chapter
    `opened` anywhere, earlier chapters' answers only where the course gives them."""
    site = build(tmp_path_factory, opened)
    files = _site_files(site)
    published = {owner(name) for name, _ in files} - {0}
    assert published == set(range(1, opened + 1)), sorted(published)
    for number, chapter in enumerate(CHAPTERS, start=1):
        assert (site / "chapters" / f"{chapter}.html").is_file() == (number <= opened)
    assert leaks(files, found) == []
    open_answers = [line for line, (chapter, what, _) in found.items() if chapter == opened]
    assert not any(line in text for line in open_answers for _, text in files)
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
