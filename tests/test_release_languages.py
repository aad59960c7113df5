"""Student notebooks in Chinese (issue 24): `python -m autograde release --lang zh_CN`.

The translator (autograde.translate) on cells made here, one per kind of markdown block; then
every chapter whose catalogue is complete (locales/zh_CN/TRANSLATED): its Chinese student
notebook leaves no block in English, holds Chinese, shows the figures drawn in Chinese, and
differs from the English one in its markdown only (code cells, cell ids and nbgrader's metadata are the English bytes, so one
gradebook holds both); and every chapter's reference solution and a sample of its catalogued
bugs, handed in as Chinese notebooks and as English ones, get the same points and statuses in
every test cell through `python -m autograde grade`, and `feedback` in each notebook's
language.
"""
import csv
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from autograde import course, messages as grader, translate
from autograde.__main__ import main
from autograde.paths import release_dir
from tests.submissions import catalogue, fill_submission, sample_bugs
from tests.translations import LANGUAGE, translated_documents

CHINESE = re.compile(r"[\u4e00-\u9fff]")
CHAPTERS = [d.split("/", 1)[1] for d in translated_documents()
            if re.fullmatch(r"chapters/\d\d_[a-z_]+", d)]
GRADED = "01_attention"  # the chapter released by the command line in both languages

MESSAGES = {
    "Scaled dot-product attention": "缩放点积注意力",
    "A *query* asks a question, each *key* says how well it answers it, $L_q$ of them.":
        "*查询*提出一个问题，每个*键*表明它回答得多好，共 $L_q$ 个。",
    "First item with `code`": "第一项，含 `code`",
    "Second item, on two lines": "第二项，分两行",
    "A nested item": "一个嵌套的项",
    "Quoted words": "引用的话",
    "Where": "用在哪里",
    "Shape": "形状",
    "the course": "本课程",
    "Diagram of a mask": "掩码示意图",
    "<details>\n<summary>Answer (open it after running the next cell)</summary>\n":
        "<details>\n<summary>答案（运行下一个单元格之后再打开）</summary>\n",
    # Sphinx extracts a block of code or markup only too; its translation is the same text
    "`(B, L)`": "`(B, L)`",
    "</details>": "</details>",
}


@pytest.fixture(scope="module")
def messages():
    return translate.Catalogue({**MESSAGES, **{translate.normalised(k): v
                                               for k, v in MESSAGES.items()}})


def test_each_kind_of_block_is_translated_in_place(messages):
    source = "\n".join([
        "## Scaled dot-product attention",
        "",
        "A *query* asks a question, each *key* says how well",
        "it answers it, $L_q$ of them.",
        "",
        "- First item with `code`",
        "- Second item,",
        "  on two lines",
        "  1. A nested item",
        "",
        "> Quoted words",
        "",
        "| Where | Shape |",
        "|---|---|",
        "| the course | `(B, L)` |",
        "",
        "![Diagram of a mask](figures/mask_shapes.svg)",
        "",
        "<details>",
        "<summary>Answer (open it after running the next cell)</summary>",
        "",
        "</details>",
    ])
    text, unmatched = translate.translate_markdown(source, messages)
    assert unmatched == []
    assert translate.block_structure(text) == translate.block_structure(source)
    assert text.split("\n") == [
        "## 缩放点积注意力",
        "",
        "*查询*提出一个问题，每个*键*表明它回答得多好，共 $L_q$ 个。",
        "",
        "- 第一项，含 `code`",
        "- 第二项，分两行",
        "  1. 一个嵌套的项",
        "",
        "> 引用的话",
        "",
        "| 用在哪里 | 形状 |",
        "|---|---|",
        "| 本课程 | `(B, L)` |",
        "",
        "![掩码示意图](figures/mask_shapes.svg)",
        "",
        "<details>",
        "<summary>答案（运行下一个单元格之后再打开）</summary>",
        "",
        "</details>",
    ]


def test_a_table_cell_keeps_its_escaped_pipes():
    """markdown-it hands a cell's content over with `\\|` unescaped; written back, each pipe
    of the translation is escaped again, or it would split the cell in two."""
    messages = translate.Catalogue({"`a | b` or c": "`a | b` 或 c", "Rule": "规则",
                                    "x": "x"})
    source = "| Rule | x |\n|---|---|\n| `a \\| b` or c | x |\n"
    text, unmatched = translate.translate_markdown(source, messages)
    assert unmatched == []
    assert text == "| 规则 | x |\n|---|---|\n| `a \\| b` 或 c | x |\n"
    assert translate.block_structure(text) == translate.block_structure(source)


def test_maths_and_code_blocks_stay_as_they_are(messages):
    source = ("Scaled dot-product attention\n\n$$\nS = Q K^\\top / \\sqrt{d_k}\n$$\n\n"
              "```python\n# Where\nx = 1\n```\n\n    Shape\n")
    text, unmatched = translate.translate_markdown(source, messages)
    assert unmatched == []
    assert text == ("缩放点积注意力\n\n$$\nS = Q K^\\top / \\sqrt{d_k}\n$$\n\n"
                    "```python\n# Where\nx = 1\n```\n\n    Shape\n")


def test_a_block_that_is_no_message_stays_english_and_is_reported(messages):
    source = "## Scaled dot-product attention\n\nA paragraph nobody\ntranslated.\n\n- Where\n"
    text, unmatched = translate.translate_markdown(source, messages)
    assert text == "## 缩放点积注意力\n\nA paragraph nobody\ntranslated.\n\n- 用在哪里\n"
    assert unmatched == ["A paragraph nobody translated."]
    # an image whose alt text is no message
    text, unmatched = translate.translate_markdown("![An untold diagram](figures/x.svg)\n",
                                                   messages)
    assert text == "![An untold diagram](figures/x.svg)\n" and unmatched == ["An untold diagram"]


def test_a_raw_html_block_keeps_its_container(messages):
    source = "> <details>\n> <summary>Answer (open it after running the next cell)</summary>\n"
    text, unmatched = translate.translate_markdown(source, messages)
    assert unmatched == []
    assert text == "> <details>\n> <summary>答案（运行下一个单元格之后再打开）</summary>\n"


def test_a_directive_is_reported_not_translated(messages):
    source = "Where\n\n```{note}\nScaled dot-product attention\n```\n\n```{code-cell}\nx = 1\n```\n"
    text, unmatched = translate.translate_markdown(source, messages)
    assert text == source.replace("Where", "用在哪里", 1)
    assert unmatched == ["{note} Scaled dot-product attention"]


def test_fuzzy_and_empty_translations_are_not_used(tmp_path):
    po = tmp_path / "chapter.po"
    po.write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=utf-8\\n"\n\n'
                  '#, fuzzy\nmsgid "Where"\nmsgstr "哪里"\n\n'
                  'msgid "Shape"\nmsgstr ""\n\nmsgid "Heads"\nmsgstr "头"\n', encoding="utf-8")
    text, unmatched = translate.translate_markdown("# Where\n\nShape\n\nHeads\n",
                                                   translate.Catalogue.read(po))
    assert text == "# Where\n\nShape\n\n头\n" and unmatched == ["Where", "Shape"]


def test_the_english_notebook_is_written_back_byte_for_byte(released_zh):
    """course.notebook_json writes a notebook as nbgrader's generate_assignment does: the
    Chinese copy differs from the English student version only where it was translated."""
    course_dir, _ = released_zh
    path = release_dir(course_dir) / GRADED / f"{GRADED}.ipynb"
    assert course.notebook_json(json.loads(path.read_text())) == path.read_text()


@pytest.fixture(scope="module")
def released_zh(course_release):
    """A course directory with every chapter released in English, and the translated
    chapters in Chinese too: {chapter: [unmatched]}, and the directory."""
    course_dir = course_release()
    unmatched = {chapter: course.release_language(course_dir, chapter, LANGUAGE)[1]
                 for chapter in CHAPTERS}
    return course_dir, unmatched


def test_the_translated_chapters_are_the_course_chapters():
    assert CHAPTERS and set(CHAPTERS) <= set(course.assignments())


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chinese_student_notebook(released_zh, chapter):
    course_dir, unmatched = released_zh
    assert unmatched[chapter] == [], f"{chapter}: markdown left in English"
    name = f"{chapter}.ipynb"
    english = json.loads((release_dir(course_dir) / chapter / name).read_text())
    chinese_path = release_dir(course_dir, LANGUAGE) / chapter / name
    chinese = json.loads(chinese_path.read_text(encoding="utf-8"))
    assert chinese["metadata"] == dict(english["metadata"], course={"language": LANGUAGE})
    assert len(chinese["cells"]) == len(english["cells"])
    for number, (en, zh) in enumerate(zip(english["cells"], chinese["cells"])):
        if en["cell_type"] == "markdown":
            assert zh == dict(en, source=zh["source"]), f"cell {number}"
            assert translate.block_structure("".join(zh["source"])) == \
                translate.block_structure("".join(en["source"])), f"cell {number}"
            if CHINESE.search("".join(en["source"])) is None:
                assert CHINESE.search("".join(zh["source"])), f"cell {number} is not Chinese"
        else:  # code, ids, nbgrader's grade ids, points and checksums: the English ones
            assert zh == en, f"cell {number}"
    # everything else of the release folder (the checks, figures, data) is the English one's
    english_files = {p.relative_to(release_dir(course_dir) / chapter): p.read_bytes()
                     for p in (release_dir(course_dir) / chapter).rglob("*")
                     if p.is_file() and p.name != name and "__pycache__" not in p.parts}
    chinese_files = {p.relative_to(chinese_path.parent): p.read_bytes()
                     for p in chinese_path.parent.rglob("*")
                     if p.is_file() and p.name != name and "__pycache__" not in p.parts}
    # and the figures drawn in Chinese (figures/<name>.zh_CN.svg), which its markdown shows
    # in place of the English ones
    drawn = {name: path for name, path in chinese_files.items()
             if name.name.endswith(f".{LANGUAGE}.svg")}
    # and the marker that makes its checks speak Chinese (chapters/checks/language.py)
    marker = chinese_files.pop(Path("checks") / "LANGUAGE")
    assert marker.decode().strip() == LANGUAGE
    assert {name: data for name, data in chinese_files.items() if name not in drawn} \
        == english_files
    markdown = "".join("".join(c["source"]) for c in chinese["cells"]
                       if c["cell_type"] == "markdown")
    for name in english_files:
        chinese_figure = course.CHAPTERS / name.parent / f"{name.stem}.{LANGUAGE}{name.suffix}"
        if name.parts[0] == "figures" and chinese_figure.is_file():
            assert f"]({name.parent}/{chinese_figure.name})" in markdown
            assert f"]({name})" not in markdown
            assert drawn[name.parent / chinese_figure.name] == chinese_figure.read_bytes()


def test_a_calendar_that_opened_nothing_releases_nothing(tmp_path, monkeypatch, capsys):
    """`release --calendar` before the first chapter opens: no chapter, in no language (not
    every chapter, which is what naming none means)."""
    monkeypatch.setenv("COURSE_CLASS_CALENDAR", "0")
    assert main(["release", "--calendar", "--course-dir", str(tmp_path), "--lang", LANGUAGE,
                 "--zip", str(tmp_path / "downloads")]) == 0
    # (in Chinese: the class will be told in it, --lang counted; paths.class_language)
    assert capsys.readouterr().out == grader.text("release.nothing_opened", LANGUAGE) + "\n"
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit):
        main(["release", "--calendar", GRADED, "--course-dir", str(tmp_path)])


# About 10 s: the instructor's release while the class runs, through the command line: the
# chapters class_calendar has opened (here the first, GRADED), in both languages.
def test_release_lang_writes_the_chinese_notebook_and_its_zip(course_release, tmp_path, capsys,
                                                              monkeypatch):
    course_dir = tmp_path / "course"
    shutil.copytree(course_release(GRADED), course_dir)
    assert course.assignments()[0] == GRADED
    monkeypatch.setenv("COURSE_CLASS_CALENDAR", "1")
    assert main(["release", "--calendar", "--course-dir", str(course_dir), "--lang", LANGUAGE,
                 "--zip", str(tmp_path / "downloads")]) == 0
    out = capsys.readouterr().out
    folder = release_dir(course_dir, LANGUAGE).resolve() / GRADED
    assert grader.text("release.translated", LANGUAGE, assignment=GRADED, language=LANGUAGE,
                       folder=folder) in out.splitlines()  # (no block left in English)
    for folder in (tmp_path / "downloads", tmp_path / "downloads" / LANGUAGE):
        assert sorted(p.name for p in folder.glob("*.zip")) == [f"{GRADED}.zip"]
    with zipfile.ZipFile(tmp_path / "downloads" / LANGUAGE / f"{GRADED}.zip") as z:
        zipped = z.read(f"{GRADED}/{GRADED}.ipynb")
    name = f"{GRADED}.ipynb"
    assert zipped == (release_dir(course_dir, LANGUAGE) / GRADED / name).read_bytes()
    chinese = json.loads(zipped)
    assert chinese["metadata"]["course"] == {"language": LANGUAGE}
    # code, cell ids and nbgrader's metadata: the English release's, cell for cell
    released = [[c for c in json.loads((release_dir(course_dir, language) / GRADED / name)
                                       .read_text(encoding="utf-8"))["cells"]
                 if c["cell_type"] == "code"] for language in (None, LANGUAGE)]
    assert released[0] == released[1] and released[0]


# The submissions graded in both languages: each chapter's reference solution and, of its
# catalogued bugs, the first whose first failing test cell is each test cell (sample_bugs with
# one per cell: 3 to 7 a chapter, 42 in all), each as the Chinese and as the English student
# notebook. One `grade` of the 100 notebooks: ~35 s of CPU on the 2-core machine.
BUGS_PER_CELL = 1


def _submissions(course_dir):
    """{student id: (chapter, language, kind, notebook)} of every submission graded here,
    kind "reference" or "bug-<name>"; the student id is "<kind>_<chapter>_<language>"."""
    found = {}
    for chapter in CHAPTERS:
        name = f"{chapter}.ipynb"
        source = json.loads((course_dir / "source" / chapter / name).read_text())
        kinds = {"reference": {}} | {
            f"bug-{bug}": entry.cells for bug, entry in
            sample_bugs(catalogue(chapter).BUGS, BUGS_PER_CELL).items()}
        for language in ("en", LANGUAGE):
            folder = release_dir(course_dir, None if language == "en" else language)
            blank = json.loads((folder / chapter / name).read_text(encoding="utf-8"))
            for kind, cells in kinds.items():
                found[f"{kind}_{chapter}_{language}"] = (
                    chapter, language, kind, fill_submission(source, blank, cells))
    return found


@pytest.fixture(scope="module")
def graded_both(released_zh, tmp_path_factory):
    """Every submission of _submissions() graded in one batch, and `feedback` written: the
    course directory and {student id: {test: (status, points)}} from tests.csv."""
    course_dir = tmp_path_factory.mktemp("graded-both") / "course"
    shutil.copytree(released_zh[0], course_dir)
    submissions = _submissions(course_dir)
    for student, (chapter, _, _, notebook) in submissions.items():
        folder = course_dir / "submitted" / student / chapter
        folder.mkdir(parents=True)
        (folder / f"{chapter}.ipynb").write_text(json.dumps(notebook, ensure_ascii=False),
                                                  encoding="utf-8")
    assert main(["grade", "--course-dir", str(course_dir), "--no-progress"]) == 0
    assert main(["feedback", "--course-dir", str(course_dir)]) == 0
    with open(course_dir / "tests.csv", newline="") as handle:
        tests = {}
        for row in csv.DictReader(handle):
            tests.setdefault((row["student_id"], row["assignment"]), {})[row["test"]] = (
                row["status"], float(row["points"]), float(row["max_points"]))
    return course_dir, submissions, tests


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_submission_gets_the_same_points_in_either_language(graded_both, chapter):
    """Each test cell of each submission: the same status and points whether the notebook was
    the Chinese or the English one; the reference gets full marks, each bug loses points."""
    _, submissions, tests = graded_both
    kinds = sorted({kind for c, _, kind, _ in submissions.values() if c == chapter})
    assert "reference" in kinds and len(kinds) >= 4, kinds  # the reference and 3+ bugs
    for kind in kinds:
        english = tests[(f"{kind}_{chapter}_en", chapter)]
        chinese = tests[(f"{kind}_{chapter}_{LANGUAGE}", chapter)]
        assert english and chinese == english, kind
        lost = [test for test, (_, points, full) in english.items() if points < full]
        if kind == "reference":
            assert lost == [] and all(s == "passed" for s, _, _ in english.values())
        else:
            assert lost, f"{kind} lost no points"


def test_the_feedback_of_each_submission_is_in_its_notebooks_language(graded_both):
    course_dir, submissions, _ = graded_both
    for student, (chapter, language, kind, _) in submissions.items():
        page = (course_dir / "feedback" / student / f"{chapter}.md").read_text(
            encoding="utf-8")
        if language == LANGUAGE:
            assert page.startswith(f"# {chapter} — 给 ") and "\n## 测试\n" in page, student
            statuses = re.findall(r"`：[\d.]+ / [\d.]+，(.+)$", page, re.M)
            assert statuses and set(statuses) <= {"通过", "未通过", "超时", "崩溃"}, student
            assert (set(statuses) == {"通过"}) is (kind == "reference"), student
        else:
            assert page.startswith(f"# {chapter} — feedback for ") and "\n## Tests\n" in page
            assert CHINESE.search(page) is None, student


def test_the_checks_spoke_each_notebooks_language(graded_both):
    """The checks' messages of each bug (the grader reads the notebook's metadata): Chinese
    for the Chinese notebook, none for the English one."""
    course_dir, submissions, _ = graded_both
    for student, (chapter, language, kind, _) in submissions.items():
        if kind == "reference":
            continue
        saved = course_dir / ".autograde" / "results" / chapter / f"{student}.json"
        said = " ".join(t["message"] for t in json.loads(saved.read_text())["tests"])
        assert bool(CHINESE.search(said)) is (language == LANGUAGE), (student, said)
