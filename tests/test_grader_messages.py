"""The grader's sentences in the student's language (issue 24 item 3): the catalogue
locales/zh_CN/LC_MESSAGES/grader.po complete and current, its placeholders and glossary terms
kept; feedback of a Chinese submission in Chinese and of an English one in English; the
report's sentences in the language asked for, quoting each student in theirs; the grader's
verdicts on the student's process (timeouts, crashes) in the notebook's language.
No grading here (hand-made results, ~1 s): tests/test_release_languages.py grades both
languages."""
import os
import re
import string
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_file

from autograde import engine, messages
from autograde.feedback import render_html, render_markdown, status_label, write_feedback
from autograde.notebook import language
from autograde.remote import SubmissionFault
from autograde.report import render_markdown as report_markdown, render_png, summarise
from autograde.results import NotebookResult
from autograde.results import TestResult as Verdict  # (not a pytest class)
from tests.test_glossary import exemptions, missing_terms
from tests.test_translations import stale, untranslated
from tests.translations import GRADER_CATALOGUE, LANGUAGE, MESSAGES, read_catalogue

HAN = re.compile(r"[\u4e00-\u9fff]")
# a translation is Chinese when it holds Chinese characters or Chinese punctuation (a line
# of fields only: "{test}：{points} / {max_points}，{status}")
CHINESE = re.compile(r"[\u4e00-\u9fff\u3000-\u303f\uff00-\uffef]")
CATALOGUE = MESSAGES / f"{GRADER_CATALOGUE}.po"


@pytest.fixture(scope="module")
def catalogue():
    return read_catalogue(CATALOGUE)


def fields(template):
    """The names of a template's {fields}, sorted, with repeats."""
    return sorted(name for _, name, _, _ in string.Formatter().parse(template) if name)


def test_every_template_is_marked_for_extraction():
    """Each value of MESSAGES is a literal inside _(): what pybabel extract (`make locales`)
    finds is exactly the set of templates."""
    marked = {message for _, message, _, _ in extract_from_file(
        "python", messages.__file__, keywords={"_": None, "_p": ((1, "c"), 2)})}
    marked = {message[1] if isinstance(message, tuple) else message for message in marked}
    assert marked == set(messages.MESSAGES.values())


def test_the_catalogue_is_current(catalogue):
    """grader.po holds exactly the templates of autograde/messages.py: a template added or
    changed fails until `make locales` merges it (and it is translated)."""
    assert stale(catalogue, set(messages.MESSAGES.values())) == ([], []), \
        "run `make locales`, then translate locales/zh_CN/LC_MESSAGES/grader.po"


def test_the_catalogue_is_wholly_translated(catalogue):
    assert len([m for m in catalogue if m.id]) > 50
    assert untranslated(catalogue) == []
    for message in catalogue:
        if message.id:
            assert CHINESE.search(message.string), message.id


def test_translations_keep_every_placeholder(catalogue):
    for message in catalogue:
        if message.id:
            assert fields(message.string) == fields(message.id), message.id


def test_translations_use_the_glossarys_terms(catalogue):
    unnamed = lambda text: re.sub(r"\{\w+\}", " ", text)  # noqa: E731 (fields are code)
    report = [f"{english!r} without {chinese!r} in {m.string!r}"
              for m in catalogue if m.id
              for english, chinese in missing_terms(unnamed(m.id), m.string, exemptions(m))]
    assert report == []


def test_the_catalogue_checks_catch_what_they_look_for():
    assert fields("{count}x, {students}: {pattern}") == ["count", "pattern", "students"]
    assert fields("{count} 次：{pattern}") != fields("{count}x, {students}: {pattern}")
    from babel.messages.catalog import Catalog
    stale_catalogue = Catalog(locale=LANGUAGE)
    stale_catalogue.add("Tests", "测试")
    stale_catalogue.add("a sentence no longer in messages.py", "")
    stale_catalogue.add("Details", "详情", flags=["fuzzy"])
    assert stale(stale_catalogue, {"Tests", "Status"}) == (
        ["Status"], ["Details", "a sentence no longer in messages.py"])
    assert {why for why, _ in untranslated(stale_catalogue)} == {"empty", "fuzzy"}


def test_every_template_formats_in_every_language():
    for key, english in messages.MESSAGES.items():
        values = {name: f"<{name}>" for name in fields(english)}
        assert messages.text(key, **values) == english.format(**values)
        chinese = messages.text(key, LANGUAGE, **values)
        assert CHINESE.search(chinese) and all(v in chinese for v in values.values()), key


def test_a_fuzzy_or_missing_translation_falls_back_to_the_english(tmp_path, monkeypatch):
    folder = tmp_path / "xx" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    (folder / "grader.po").write_text(
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=utf-8\\n"\n\n'
        '#, fuzzy\nmsgid "Tests"\nmsgstr "Prüfungen"\n\n'
        'msgid "Details"\nmsgstr "Einzelheiten"\n', encoding="utf-8")
    monkeypatch.setattr(messages, "LOCALES", tmp_path)
    messages.translations.cache_clear()
    try:
        assert messages.supported("xx") == "xx"
        assert messages.text("feedback.column.details", "xx") == "Einzelheiten"
        assert messages.text("feedback.tests", "xx") == "Tests"  # fuzzy: not used
        assert messages.text("feedback.errors", "xx") == "Errors in your code"  # none
    finally:
        messages.translations.cache_clear()


def test_a_notebooks_language_is_its_metadata_and_only_a_catalogued_one():
    assert language({"metadata": {"course": {"language": LANGUAGE}}}) == LANGUAGE
    assert language({"metadata": {}}) == "en"
    assert messages.supported(LANGUAGE) == LANGUAGE
    # the metadata is the student's to write: anything but a language with a catalogue is
    # English, never a path
    for value in ("en", "fr", "../../zh_CN", "zh_CN/../zh_CN", 3, None, ["zh_CN"]):
        assert messages.supported(value) == "en", value


# -- feedback and report in the student's language ---------------------------------------
A1 = "01_attention"
DIAGNOSIS = {"en": "attention_scores is wrong (largest error 0.31).",
             LANGUAGE: "attention_scores 是错的（最大误差 0.31）。"}


def result(student, notebook_language, status="graded"):
    tests = [Verdict("test_scores", 0.0, 2.0, "failed", DIAGNOSIS[notebook_language]),
             Verdict("test_sdpa", 3.0, 3.0, "passed", "", "\u2714 sdpa\n"),
             Verdict("test_hidden", 0.0, 1.0, "timeout",
                        engine._fault_text(SubmissionFault("timeout", key="fault.no_answer",
                                                           seconds="60"),
                                           engine.LIMITS, notebook_language))]
    problems = [{"cell": "cell scores, line 3", "kind": "error",
                 "message": "NameError: name 'q' is not defined"}]
    return NotebookResult(student, A1, A1, status, tests=tests, problems=problems,
                          language=notebook_language)


def english_sentences(language_of_page):
    """The constant words of every feedback template, in `language_of_page`."""
    keys = [k for k in messages.MESSAGES if k.startswith(("feedback.", "status.", "fault."))]
    words = set()
    for key in keys:
        for literal, *_ in string.Formatter().parse(
                messages.template(key, language_of_page)):
            words |= set(re.findall(r"[A-Za-z]{4,}", literal))
    return words


def test_feedback_of_a_chinese_submission_is_chinese():
    chinese = result("li", LANGUAGE)
    page = render_markdown(chinese)
    assert page.startswith(f"# {A1} — 给 li 的反馈\n")
    assert "分数：**3 / 6**" in page
    assert "## 测试" in page and "## 你的代码中的错误" in page
    assert "- `test_scores`：0 / 2，未通过" in page and "- `test_sdpa`：3 / 3，通过" in page
    assert "- `test_hidden`：0 / 1，超时" in page
    assert "超时：60 秒内没有应答（死循环，或者太慢）。每个测试最多可用 60 秒" in page
    assert DIAGNOSIS[LANGUAGE] in page  # the checks' diagnosis, as the grader recorded it
    # no sentence of the grader's left in English (the English words that remain are the
    # names and the student's own code)
    english = english_sentences("en")
    left = set(re.findall(r"[A-Za-z]{4,}", page)) & english
    assert left <= {"test", "scores", "sdpa", "hidden", "attention", "name", "defined",
                    "line", "cell", "notebook"}, left  # (notebook: the glossary keeps it)
    html = render_html(chinese)
    assert '<html lang="zh-CN">' in html
    assert "<p>给 <strong>li</strong> 的反馈</p>" in html
    assert '<p class="score">分数：<strong>3</strong> / 6</p>' in html
    assert "<th>测试</th><th>得分</th><th>状态</th><th>详情</th>" in html
    assert '<td class="timeout">超时</td>' in html
    for english_word in ("Feedback for", "Score:", "Errors in your code", "Timed out"):
        assert english_word not in html and english_word not in page


def test_feedback_of_an_english_submission_is_english():
    page = render_markdown(result("ann", "en"))
    assert page.startswith(f"# {A1} — feedback for ann\n")
    assert "Score: **3 / 6**" in page and "- `test_scores`: 0 / 2, failed" in page
    assert "Timed out: no answer within 60 s (an infinite loop, or far too slow). Each " \
           "test may take 60 s and the notebook 300 s." in page
    assert not HAN.search(page)
    html = render_html(result("ann", "en"))
    assert '<html lang="en">' in html and not HAN.search(html)


def test_a_result_saved_before_languages_is_english():
    saved = result("old", "en").to_json()
    del saved["language"]
    assert NotebookResult.from_json(saved).language == "en"


def test_feedback_files_follow_each_notebooks_language(tmp_path):
    results = {("li", A1): result("li", LANGUAGE), ("ann", A1): result("ann", "en")}
    write_feedback(tmp_path, results)
    for student, chinese in (("li", True), ("ann", False)):
        for suffix in ("html", "md"):
            page = (tmp_path / "feedback" / student / f"{A1}.{suffix}").read_text("utf-8")
            assert bool(HAN.search(page)) is chinese, (student, suffix)
    ungradable = NotebookResult("wu", A1, A1, "error", "no notebook named 01_attention.ipynb",
                                tests=[Verdict("test_scores", 0.0, 2.0, "error", "x")],
                                language=LANGUAGE)
    assert "## 你的提交无法评分" in render_markdown(ungradable)
    assert status_label("error", LANGUAGE) == "未评分" and status_label("odd") == "odd"


def test_the_report_speaks_its_language_and_quotes_each_student_in_theirs(tmp_path):
    results = {(s, A1): result(s, lang) for s, lang in
               (("ann", "en"), ("bob", "en"), ("li", LANGUAGE))}
    summaries = summarise(results)
    english = report_markdown(summaries)
    # the same mistake in two languages: two groups, each marked with its language
    assert "2x, 2 students (en): attention_scores is wrong (largest error #)." in english
    assert "1x, 1 student (zh_CN): attention_scores 是错的（最大误差 #）。" in english
    # the timeouts need the instructor's attention, whoever's language; errors of the
    # students' own code do not
    assert "Needs attention (3): not graded" in english
    assert "li: test_hidden: timed out" in english  # (the status as feedback says it)
    assert "NameError" not in english
    chinese = report_markdown(summaries, language=LANGUAGE)
    assert chinese.startswith("# 评分报告\n\n1 个作业，共 3 份提交。\n")
    assert "2 次，2 名学生（en）：attention_scores is wrong (largest error #)." in chinese
    assert "每个测试单元格的通过率（已评分的提交）：" in chinese
    assert "| 平均" in chinese and "| 测试" in chinese
    assert "需要处理（3）：未评分的提交" in chinese
    assert "li：test_hidden：超时" in chinese and "ann：test_hidden：超时" in chinese
    assert "timed out" not in chinese and ": timeout" not in chinese
    # one language in the class: no language marked
    alone = report_markdown(summarise({("li", A1): result("li", LANGUAGE)}), language=LANGUAGE)
    assert "1 次，1 名学生：attention_scores 是错的（最大误差 #）。" in alone
    assert render_png(summaries, tmp_path / "report.png", LANGUAGE).stat().st_size > 10_000


def test_the_graders_verdicts_on_the_students_process_are_translated():
    for key, fields_, chinese in (
            ("fault.test_time_ran_out", {}, "测试单元格的时间限制已用完"),
            ("fault.died", {"error": "EOF"}, "学生代码的进程终止了"),
            ("fault.malformed_error", {}, "格式错误的异常信息")):
        fault = SubmissionFault("crash", key=key, **fields_)
        assert fault.message == messages.text(key, **fields_)  # English: logs, the instructor
        assert chinese in fault.reason(LANGUAGE)
        assert chinese in engine._fault_text(fault, engine.LIMITS, LANGUAGE)
    raw = SubmissionFault("protocol", "unknown reference")  # the wire format's own words
    assert raw.reason(LANGUAGE) == "unknown reference"
    assert engine._fault_text(raw, engine.LIMITS, LANGUAGE) == \
        "你的代码破坏了评分器的通信协议：unknown reference。"


def test_why_a_notebook_cannot_be_graded_is_said_in_its_language(tmp_path):
    import json
    import pickle
    from types import SimpleNamespace

    from autograde.notebook import SubmissionError, read_submission
    assignment = SimpleNamespace(name=A1, solution_ids=["scores", "attention"])
    path = tmp_path / f"{A1}.ipynb"
    notebook = {"cells": [], "metadata": {"course": {"language": LANGUAGE}}, "nbformat": 4,
                "nbformat_minor": 5}
    path.write_text(json.dumps(notebook), encoding="utf-8")
    with pytest.raises(SubmissionError) as refused:
        read_submission(path, assignment)
    error = refused.value
    assert str(error) == (f"{A1}.ipynb holds 0 of {A1}'s 2 exercises (the wrong notebook, "
                          "or submitted under the wrong chapter?)")  # English: the logs
    assert error.language == LANGUAGE
    assert error.text() == (f"{A1}.ipynb 含有 {A1} 的 2 个练习中的 0 个（是不是交错了 "
                            "notebook，或者交到了别的章节下？）")
    again = pickle.loads(pickle.dumps(error))  # (a Submission travels to a worker with it)
    assert (str(again), again.text()) == (str(error), error.text())
    # before the JSON is read, no language is known: English
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(SubmissionError) as refused:
        read_submission(path, assignment)
    assert refused.value.language == "en" and refused.value.text().startswith(
        f"{A1}.ipynb is not a notebook (not valid JSON: ")
    # a notebook whose metadata.course is no object: English, not a crash
    path.write_text(json.dumps(dict(notebook, metadata={"course": "zh_CN"})), encoding="utf-8")
    with pytest.raises(SubmissionError) as refused:
        read_submission(path, assignment)
    assert refused.value.language == "en"


def test_gradescopes_results_json_speaks_the_notebooks_language():
    from autograde import gradescope
    cells = [("test_scores", 2.0, False), ("test_sdpa", 3.0, False), ("test_hidden", 1.0, True)]
    chinese = gradescope.results_json(result("li", LANGUAGE), cells)
    assert chinese["output"].startswith(
        "3 个测试单元格中有 1 个含有隐藏测试：它们的结果在教师公布评分结果后显示。")
    assert [t["output"] for t in chinese["tests"]][:2] == [DIAGNOSIS[LANGUAGE], "\u2714 sdpa\n"]
    english = gradescope.results_json(result("ann", "en"), cells)
    assert english["output"].startswith("1 of 3 test cells hold hidden tests")
    assert [t["status"] for t in chinese["tests"]] == [t["status"] for t in english["tests"]]
    # the autograder.zip carries the grader's catalogues (and Babel, which reads them)
    shipped = sorted(messages.LOCALES.glob(gradescope.SHIPPED_CATALOGUES))
    assert CATALOGUE in shipped and "babel" in gradescope.GRADER_PACKAGES
    assert any(line.startswith("babel==") for line in gradescope.grader_requirements())


def test_an_exercise_written_with_what_it_forbids_is_told_in_the_notebooks_language():
    from autograde import forbids
    from chapters.checks.mha import FORBIDS
    hidden = "import torch\n\n\ndef helper(x, i):\n    return getattr(torch.nn.functional, x)\n"
    named = ("import torch\n\n\ndef helper(x):\n"
             "    return torch.nn.functional.multi_head_attention_forward(x)\n")
    for code, english, chinese in (
            (hidden, "'s tests need it written without ", " 的测试要求不用 "),
            (named, " (in your code: cell MultiHeadAttention, line 5: ",
             "（在你的代码中：单元格 MultiHeadAttention，第 5 行：")):
        steps = [("cell MultiHeadAttention, line 1", code, True)]
        lost_en = forbids.verdicts(steps, FORBIDS)
        lost_zh = forbids.verdicts(steps, FORBIDS, language=LANGUAGE)
        assert set(lost_en) == set(lost_zh) == {"test_mha_forward"}
        assert english in lost_en["test_mha_forward"], lost_en
        assert chinese in lost_zh["test_mha_forward"], lost_zh


def test_the_forbidden_calls_teaching_message_is_in_the_notebooks_language():
    """The spec's own sentence (checks.operations' "forbidden" and the chapter's words for
    what the shortcut does) follows the notebook's language too, though it is built by a
    module that binds no catalogue (operations runs in the student's process)."""
    from autograde import forbids
    from chapters.checks.attention import FORBIDS
    code = ("import torch\n\n\ndef stable_softmax(scores, dim=-1):\n"
            "    return torch.softmax(scores, dim=dim)\n")
    steps = [("cell stable_softmax, line 1", code, True)]
    lost_en = forbids.verdicts(steps, FORBIDS)["test_stable_softmax"]
    lost_zh = forbids.verdicts(steps, FORBIDS, language=LANGUAGE)["test_stable_softmax"]
    assert "a softmax that PyTorch computes for you" in lost_en, lost_en
    assert "你调用了 softmax，这是 PyTorch 替你算好的 softmax" in lost_zh, lost_zh
    assert "computes for you" not in lost_zh, lost_zh


def test_results_rebuilt_from_nbgraders_gradebook_keep_the_notebooks_language(tmp_path):
    import json

    from autograde import exports
    path = tmp_path / f"{A1}.ipynb"
    path.write_text(json.dumps({"cells": [], "metadata": {"course": {"language": LANGUAGE}}}),
                    encoding="utf-8")
    assert exports.notebook_language(exports._read(path)) == LANGUAGE
    assert exports.notebook_language(exports._read(tmp_path / "missing.ipynb")) == "en"


# -- where in a notebook, a notebook's problems, the grader's notes (issue 24 item 3) -----
def test_the_graders_labels_of_cells_and_lines_are_said_in_the_language():
    """A step's label stays an identifier ("cell scores, line 3": the student's process
    compiles the step under it); where a person reads it, it is put into words."""
    assert messages.where("cell scores, line 3") == "cell scores, line 3"
    assert messages.where("cell scores, line 3", LANGUAGE) == "单元格 scores，第 3 行"
    assert messages.where("cell 7", LANGUAGE) == "单元格 7"
    assert messages.where("<cell>", LANGUAGE) == "<cell>"  # not a label: as it is
    page = render_markdown(result("li", LANGUAGE))
    assert "- 单元格 scores，第 3 行" in page and "cell scores" not in page
    assert "<strong>单元格 scores，第 3 行</strong>" in render_html(result("li", LANGUAGE))
    assert "- cell scores, line 3" in render_markdown(result("ann", "en"))


def _notebook(language_of_notebook, cells):
    return {"cells": cells, "metadata": {"course": {"language": language_of_notebook}},
            "nbformat": 4, "nbformat_minor": 5}


def _solution(grade_id, source):
    return {"cell_type": "code", "source": source, "metadata": {
        "nbgrader": {"solution": True, "grade": False, "grade_id": grade_id}}}


def test_a_notebooks_problems_are_said_in_its_language():
    from types import SimpleNamespace

    from autograde.notebook import duplicates, plan
    cells = [_solution("scores", "x = 1\n"), _solution("scores", "x = 2\n"),
             _solution("attention", "y = 1\n" * 30)]
    assignment = SimpleNamespace(solution_ids=["scores", "attention"])
    limits = {"cell_statements": 10, "notebook_statements": 1000}
    for notebook_language, duplicate, limit in (
            ("en", "the exercise 'scores' is in 2 cells (1, 2): graded from the last",
             "more than 10 statements (lines and semicolons) in one cell"),
            (LANGUAGE, "练习 'scores' 出现在 2 个单元格中（1, 2）：与 nbgrader 一样，按最后一个评分",
             "一个单元格中超过 10 条语句（按行和分号计），超出了评分器的限制")):
        nb = _notebook(notebook_language, cells)
        [found] = duplicates(nb)
        assert found["message"].startswith(duplicate), found
        problems = []
        plan(nb, assignment, lambda source: source, limits, problems)
        assert [p["kind"] for p in problems] == ["limit"]
        assert problems[0]["message"].startswith(limit), problems


def test_a_missing_notebook_is_told_in_the_chapters_release_language(tmp_path):
    """No notebook, no metadata: the note takes the language the class was given the chapter
    in (paths.released_language: release-<language>/<assignment>/), else English."""
    from autograde import batch
    from autograde.paths import released_language
    for student, files in (("ann", []), ("bob", ["attention.ipynb"])):
        folder = tmp_path / "submitted" / student / A1
        folder.mkdir(parents=True)
        for name in files:
            (folder / name).write_text("{}")
    english = {job.student: job for job in batch.find_jobs(tmp_path, [A1])}
    assert released_language(tmp_path, A1) == "en"
    assert english["ann"].problem == f"no notebook named {A1}.ipynb was submitted"
    assert english["bob"].problem == (f"no notebook named {A1}.ipynb; found attention.ipynb "
                                      f"(rename it to {A1}.ipynb)")
    assert english["ann"].language == "en"
    (tmp_path / f"release-{LANGUAGE}" / A1).mkdir(parents=True)
    (tmp_path / f"release-{LANGUAGE}" / "02_heads").mkdir(parents=True)
    assert released_language(tmp_path, A1) == LANGUAGE
    assert released_language(tmp_path, "03_mha") == "en"
    chinese = {job.student: job for job in batch.find_jobs(tmp_path, [A1])}
    assert chinese["ann"].problem == f"没有提交名为 {A1}.ipynb 的 notebook"
    assert chinese["ann"].language == LANGUAGE
    assert chinese["bob"].problem == (f"没有名为 {A1}.ipynb 的 notebook；找到的是 "
                                      f"attention.ipynb（请把它重命名为 {A1}.ipynb）")
    from types import SimpleNamespace
    spec = SimpleNamespace(name=A1, notebook=f"{A1}.ipynb",
                           tests=[SimpleNamespace(grade_id="test_scores", points=2.0)])
    failed = batch._error_result(spec, "bob", chinese["bob"].problem,
                                 language=chinese["bob"].language)
    assert failed.language == LANGUAGE
    assert "## 你的提交无法评分" in render_markdown(failed)


def test_gradescopes_notes_on_the_notebook_chosen_follow_the_language(tmp_path):
    from autograde import gradescope
    cells = [("test_scores", 2.0, False)]
    upload = tmp_path / "submission"
    upload.mkdir()
    path, note = gradescope._choose_notebook(upload, A1)
    assert path is None
    assert gradescope._said(note, "en") == f"Your submission holds no notebook: upload {A1}.ipynb."
    assert gradescope._said(note, LANGUAGE) == f"你的提交中没有 notebook：请上传 {A1}.ipynb。"
    (upload / "mine.ipynb").write_text("{}")
    path, note = gradescope._choose_notebook(upload, A1)
    assert path.name == "mine.ipynb"
    graded = gradescope.results_json(result("li", LANGUAGE), cells, note)
    assert graded["output"].startswith(f"已把 mine.ipynb（提交的唯一一个 notebook）当作 "
                                       f"{A1}.ipynb 评分。\n")
    assert "单元格 scores，第 3 行：NameError" in graded["output"]
    assert gradescope.results_json(result("ann", "en"), cells, note)["output"].startswith(
        f"Graded mine.ipynb (the only notebook submitted) as {A1}.ipynb.\n")
    (upload / "yours.ipynb").write_text("{}")
    path, note = gradescope._choose_notebook(upload, A1)
    assert path is None
    assert gradescope._said(note, LANGUAGE) == (
        f"你的提交中有 2 个 notebook（mine.ipynb, yours.ipynb），但没有一个名为 {A1}.ipynb："
        f"请只提交 {A1}.ipynb。")
    refused = gradescope._not_graded(cells, gradescope._said(note, LANGUAGE), LANGUAGE)
    assert refused["tests"][0]["output"] == "未评分：见上文"
    assert gradescope._not_graded(cells, "x")["tests"][0]["output"] == "not graded: see above"


def test_what_could_hide_a_forbidden_call_is_described_in_the_language():
    from autograde import forbids
    code = ("import sys as system\nimport torch\n\n\ndef helper(x, name):\n"
            "    return getattr(torch.nn.functional, name)(x)\n")
    steps = [("cell MultiHeadAttention, line 1", code, True)]
    [found] = forbids._findings(steps, frozenset())
    described = {f.what(): f.what(LANGUAGE) for f in found}
    assert described["calls getattr with a computed name (getattr(torch.nn.functional, "
                     "name))"] == "用运行时算出的名字调用 getattr（getattr(torch.nn.functional, name)）"
    # every kind of finding has its template, with the fields it is given
    for finding in found:
        assert CHINESE.search(finding.what(LANGUAGE)), finding
    # the instructor's flags stay English (the report's "suspicious code")
    [flag] = forbids.flags(steps)
    assert "calls getattr with a computed name" in flag["message"] and not HAN.search(
        flag["message"])
    from chapters.checks.mha import FORBIDS
    lost = forbids.verdicts(steps, FORBIDS, language=LANGUAGE)["test_mha_forward"]
    assert "单元格 MultiHeadAttention，第 6 行：用运行时算出的名字调用 getattr" in lost, lost


def test_the_students_process_speaks_its_notebooks_language(tmp_path):
    """The sandbox child gets the notebook's language (COURSE_LANGUAGE) and the templates of
    the sentences it builds (remote.child_messages): the two modules of the checks it runs,
    nested and operations, and its own output limit; one zygote serves both languages.
    It is sent those templates only: no catalogue, no other module of the checks."""
    from autograde import remote
    templates = remote.child_messages(LANGUAGE)
    assert set(templates) == {"nested", "operations", "sandbox"}
    assert set(templates["sandbox"]) == {"output_limit", "output_dropped"}
    from chapters.checks import nested, operations
    assert set(templates["operations"]) == set(operations.MESSAGES)
    assert set(templates["nested"]) == set(nested.MESSAGES)
    assert templates["operations"]["student_line"] == "{cell} 第 {line} 行"
    assert remote.child_messages("en")["operations"] == operations.MESSAGES
    (tmp_path / A1).mkdir()
    zygote = remote.Zygote(tmp_path, slot=7)
    probe = ("import os, sys\n"
             "spoken = os.environ.get('COURSE_LANGUAGE')\n"
             "operations = sys.modules['chapters.checks.operations']\n"
             "try:\n"
             "    raise ValueError(1)\n"
             "except ValueError as error:\n"
             "    where = operations.student_line(error)\n"
             "big = 'x' * 5000\n"
             "print('y' * 500)\n")
    try:
        for language_of_child, where, limit, dropped in (
                (LANGUAGE, "单元格 probe 第 5 行：raise ValueError(1)", "字节的结果超出了输出限制", "受输出限制，省略了"),
                ("en", "line 5 of cell probe: raise ValueError(1)", "bytes is over the output limit",
                 "characters dropped by the output limit"),
                (LANGUAGE, "单元格 probe 第 5 行：raise ValueError(1)", "字节的结果超出了输出限制", "受输出限制，省略了")):
            child = zygote.spawn(A1, {"call_seconds": 30, "output_bytes": 2000,
                                      "print_chars": 100}, language_of_child)
            child.run(probe, "cell probe, line 1")
            # what it printed, cut short by its own limit and the grader's: in its language
            printed = child.stdout.take()
            assert printed.startswith("y" * 50) and dropped in printed, printed
            assert child.lookup("spoken") == language_of_child
            assert child.lookup("where") == where
            with pytest.raises(Exception, match=limit) as refused:
                child.lookup("big")
            assert type(refused.value).__name__ == "OutputLimit"
    finally:
        zygote.kill()
        zygote.close()


# -- the grader's own failures, printed output cut short, the report's details ------------
def _notebook_file(folder, notebook_language):
    import json
    path = folder / f"{A1}.ipynb"
    path.write_text(json.dumps(_notebook(notebook_language, [])), encoding="utf-8")
    return path


def test_the_graders_own_failure_on_a_notebook_is_said_in_its_language(tmp_path):
    """batch: a notebook the grader itself failed on (its sandbox did not start, a bug of
    its own) is told so in the notebook's language; where the file tells none (not JSON),
    in the language the class was given the chapter in (Job.language, the release's)."""
    from types import SimpleNamespace

    from autograde import batch
    from autograde.notebook import Submission
    spec = SimpleNamespace(name=A1, notebook=f"{A1}.ipynb",
                           tests=[SimpleNamespace(grade_id="test_scores", points=2.0)])
    error = RuntimeError("the sandbox failed to start")
    said = {}
    for notebook_language in ("en", LANGUAGE):
        folder = tmp_path / notebook_language
        folder.mkdir()
        path = _notebook_file(folder, notebook_language)
        job = batch.Job("li", A1, folder, path)  # (an English release: Job.language "en")
        failed = batch._grader_failed(spec, job, error, Submission.read(path))
        assert failed.language == notebook_language
        assert [(t.status, t.message) for t in failed.tests] == [("crash", failed.error)]
        said[notebook_language] = failed.error
    assert said["en"] == ("the grader failed on this notebook: RuntimeError: the sandbox "
                          "failed to start")
    assert said[LANGUAGE] == ("评分器在处理这个 notebook 时出错了：RuntimeError: the sandbox "
                              "failed to start")  # (the error itself: the grader's, English)
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    job = batch.Job("li", A1, tmp_path, broken, language=LANGUAGE)
    assert batch._grader_failed(spec, job, error, Submission.read(broken)).error == \
        said[LANGUAGE]
    assert batch._grader_failed(spec, job, error).language == LANGUAGE  # (never read)
    # a found notebook's job carries the release's language too, for these
    (tmp_path / "submitted" / "li" / A1).mkdir(parents=True)
    _notebook_file(tmp_path / "submitted" / "li" / A1, "en")
    assert [j.language for j in batch.find_jobs(tmp_path, [A1])] == ["en"]
    (tmp_path / f"release-{LANGUAGE}" / A1).mkdir(parents=True)
    [job] = batch.find_jobs(tmp_path, [A1])
    assert (job.problem, job.language) == ("", LANGUAGE)
    assert messages.text("batch.worker_died", LANGUAGE) == \
        "评分这个 notebook 时，评分器的工作进程两次意外终止"


def test_gradescopes_own_failure_is_said_in_the_notebooks_language(tmp_path, monkeypatch):
    """Gradescope: the grader failing on an upload (run) is said in its notebook's language;
    the grader that cannot even start (run_autograder's fallback, a shell line written at
    build) in the class's, build's `language`."""
    import json
    import subprocess

    from autograde import gradescope

    def fails(assignment, root):
        raise MemoryError
    monkeypatch.setattr(gradescope, "grade_submission", fails)
    (tmp_path / "submission").mkdir()
    for notebook_language, said in (
            (LANGUAGE, "自动评分器在处理这份提交时出错了（MemoryError）；教师可以在自动评分器的"
                       "输出中看到原因。请告诉教师。"),
            ("en", "The autograder failed on this submission (MemoryError); your instructor "
                   "can see why in the autograder output. Please tell them.")):
        _notebook_file(tmp_path / "submission", notebook_language)
        assert gradescope.run(A1, tmp_path) == 0
        results = json.loads((tmp_path / "results" / "results.json").read_text())
        assert results["output"] == said and results["score"] == 0
    # no notebook to read: the release's language (none here: English)
    (tmp_path / "submission" / f"{A1}.ipynb").unlink()
    assert gradescope._language(A1, tmp_path) == "en"
    (tmp_path / "source" / "course" / f"release-{LANGUAGE}" / A1).mkdir(parents=True)
    assert gradescope._language(A1, tmp_path) == LANGUAGE
    for language_of_class, start in ((LANGUAGE, "自动评分器还没来得及为这份提交评分就出错了。"),
                                     (None, "The autograder failed before it could grade")):
        script = gradescope.run_autograder(A1, language_of_class)
        [line] = [line for line in script.splitlines() if line.strip().startswith("printf")]
        printed = subprocess.run(["bash", "-c", line.replace('> "$results"', "")],
                                 capture_output=True, text=True, check=True).stdout
        written = json.loads(printed)
        assert written["output"].startswith(start) and written["score"] == 0, written


def test_what_the_output_limit_drops_is_said_in_the_notebooks_language():
    from autograde import wire
    for language_of_page, dropped in (
            (LANGUAGE, "\n[……受输出限制，省略了 80 个字符……]\n"),
            ("en", "\n[... 80 characters dropped by the output limit ...]\n")):
        printed = wire.Printed(20, messages.template("sandbox.output_dropped", language_of_page))
        printed.write("x" * 100)
        assert printed.take() == "x" * 10 + dropped + "x" * 10
        printed.write("x" * 100)  # (take() empties it, and keeps its language)
        assert dropped in printed.take()


def test_the_reports_needs_attention_details_are_said_in_its_language():
    """Who needs attention and why: a test's status as feedback says it, where in the
    notebook, and the instructor's flag (forbids.flags) from its findings' templates, in
    the report's language, after the result was saved and read back; what the student
    read is quoted as they read it."""
    from autograde import forbids
    code = ("import sys as system\nimport torch\n\n\ndef helper(x, name):\n"
            "    return getattr(torch.nn.functional, name)(x)\n")
    flagged = forbids.flags([("cell MultiHeadAttention, line 1", code, True)])
    assert [f["message"] for f in flagged] == [
        "calls getattr with a computed name (getattr(torch.nn.functional, name)) (the checks "
        "run in the grader: a solution needs none of this)"]  # English: the logs'
    li = result("li", LANGUAGE)
    li.problems += flagged
    saved = NotebookResult.from_json(engine._cleaned(li).to_json())
    summaries = summarise({("li", A1): saved})
    chinese = report_markdown(summaries, language=LANGUAGE)
    section = chinese[chinese.index("需要处理（2）"):]
    assert "li：可疑代码\n        单元格 MultiHeadAttention，第 1 行：用运行时算出的名字调用 " \
           "getattr（getattr(torch.nn.functional, name)）（检查在评分器中运行：答案不需要这些）" \
           in section, section
    assert "li：test_hidden：超时\n        超时：60 秒内没有应答" in section, section
    assert not re.search(r"[A-Za-z]{4,}", re.sub(
        r"getattr\(torch\.nn\.functional, name\)|getattr|MultiHeadAttention|test_hidden|"
        r"notebook", "", section)), section
    english = report_markdown(summaries)
    assert "li: suspicious code\n        cell MultiHeadAttention, line 1: calls getattr with " \
           "a computed name" in english
    assert "li: test_hidden: timed out\n        超时：" in english  # (li read it in Chinese)
    # Gradescope shows the flag to the student, in their notebook's language
    from autograde import gradescope
    output = gradescope.results_json(saved, [("test_scores", 2.0, False)])["output"]
    assert "单元格 MultiHeadAttention，第 1 行：用运行时算出的名字调用 getattr" in output
    # a flag saved before flags kept their findings: its message as it was written
    old = {"cell": "cell x", "kind": "suspicious", "message": "imports checks"}
    assert messages.problem_message(old, LANGUAGE) == "imports checks"
    assert messages.problem_message(dict(old, findings=[{"key": "nope"}]), LANGUAGE) == \
        "imports checks"


def test_nested_speaks_the_language_of_now_outside_the_sandbox():
    """In the student's Jupyter and in the grader, where the checks' catalogue is at hand
    (checks.common), nested's sentences follow the language of now (the notebook's,
    COURSE_LANGUAGE, the release's marker), as every module's MESSAGES; the student's
    process is still sent their templates from the English as written."""
    import chapters.checks.common  # noqa: F401  (what makes them follow it)
    from autograde import remote
    from chapters.checks import language as checks_language
    from chapters.checks import nested
    deep = []
    for _ in range(nested.MAX_DEPTH + 5):
        deep = [deep]
    said = {}
    for spoken in ("en", LANGUAGE):
        with checks_language.speaking(spoken):
            with pytest.raises(RecursionError) as too_deep:
                nested.encode(deep, lambda leaf: leaf)
            with pytest.raises(ValueError) as malformed:
                nested.decode({"list": 1}, None)
            said[spoken] = (str(too_deep.value), str(malformed.value))
    assert said["en"] == ("maximum recursion depth exceeded: a value nested more than 200 "
                          "deep cannot be sent or stored", "expected a list (a list payload)")
    assert said[LANGUAGE] == ("超出最大递归深度：嵌套深度超过 200 层的值无法发送或保存",
                              "期望一个列表（list 载荷）")
    with checks_language.speaking(LANGUAGE):  # (whatever the language of now)
        assert remote.child_messages("en")["nested"] == dict(nested.MESSAGES.english)
        assert remote.child_messages(LANGUAGE)["nested"]["too_deep"] == \
            "超出最大递归深度：嵌套深度超过 {depth} 层的值无法发送或保存"


def test_the_kits_nested_speaks_the_chinese_release(tmp_path):
    """The student's kit unzipped from the Chinese release (its checks/LANGUAGE marker, its
    compiled catalogue; no Babel needed): nested's sentences in Chinese."""
    import os
    import subprocess
    import sys

    from autograde import kit
    checks = kit.write_checks(tmp_path / "checks", ["__init__", "language", "diagnose", "nested",
                                                    "operations", "repair", "common"], [])
    (checks / "LANGUAGE").write_text(f"{LANGUAGE}\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "from checks import common, nested\n"
            "try:\n    nested.decode({'list': 1}, None)\n"
            "except Exception as error:\n    print(error)\n")
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "COURSE_LANGUAGE")}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, env=environment, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "期望一个列表（list 载荷）", done.stdout


def test_a_notebook_the_grader_cannot_read_is_told_so_in_its_language(tmp_path, monkeypatch):
    """A notebook no check foresaw (reading or planning it raised OSError, RecursionError
    or MemoryError): the result says so in the language its bytes tell, and is in it."""
    from types import SimpleNamespace

    from autograde.notebook import Submission

    def too_deep(self, assignment):
        raise RecursionError("maximum recursion depth exceeded")
    monkeypatch.setattr(Submission, "notebook", too_deep)
    grader = engine.Grader(SimpleNamespace(sandbox="none"), {})
    spec = SimpleNamespace(name=A1, notebook=f"{A1}.ipynb", fingerprint="x",
                           tests=[SimpleNamespace(grade_id="test_scores", points=2.0)])
    for notebook_language, said in (
            (LANGUAGE, f"无法读取 {A1}.ipynb：RecursionError: maximum recursion depth exceeded"),
            ("en", f"{A1}.ipynb could not be read: RecursionError: maximum recursion depth "
                   "exceeded")):
        folder = tmp_path / notebook_language
        folder.mkdir()
        graded = grader.grade(spec, Submission.read(_notebook_file(folder, notebook_language)))
        assert (graded.status, graded.error, graded.language) == \
            ("error", said, notebook_language)
        assert "## " + messages.text("feedback.ungradable", notebook_language) in \
            render_markdown(graded)


def test_what_a_check_meets_of_the_students_objects_is_said_in_the_notebooks_language():
    """autograde.remote's own errors around the student's objects (raised in the grader
    while a test cell runs, under the notebook's language) reach the student's feedback."""
    from autograde import remote
    from chapters.checks import language as checks_language
    stand_in = remote.RemoteRef(None, {"ref": 1, "type": "Linear"})
    for spoken, read_only, cannot_send in (
            (LANGUAGE, "学生代码的进程中的对象在这里是只读的", "无法把 object 类型的对象发送给学生代码的进程"),
            ("en", "objects of the student's process are read-only here",
             "cannot send an object of type object to the student's process")):
        with checks_language.speaking(spoken):
            with pytest.raises(AttributeError, match=read_only):
                stand_in.weight = 1
            with pytest.raises(TypeError, match=cannot_send):
                remote._local_ref(object())


def test_one_english_said_two_ways_has_a_context_of_its_own(catalogue):
    """A test's status "passed" and the report's column of counts "passed": one English, two
    translations, the column's under its gettext context (messages._p)."""
    column = messages.MESSAGES["report.column.passed"]
    assert column == messages.MESSAGES["status.passed"] and column.context == "report.column"
    held = {(m.context, m.id): m.string for m in catalogue if m.id}
    assert held[(None, "passed")] != held[("report.column", "passed")]
    assert messages.text("status.passed", LANGUAGE) == held[(None, "passed")]
    assert messages.text("report.column.passed", LANGUAGE) == held[("report.column", "passed")]
    assert messages.text("report.column.passed") == "passed"


def test_the_instructors_commands_speak_the_classs_language(tmp_path):
    """Busy, StaleRelease and the export's refusals and notes: in the language the class was
    given its chapters in (paths.class_language: a translated release), else English."""
    from autograde import batch, lms_export
    from autograde.paths import class_language
    assert class_language(tmp_path) == "en"
    stale = {A1: ["checks/nested.py"], "02_heads": []}
    english = str(batch.StaleRelease(stale, tmp_path))
    assert english.startswith(f"the course's checks changed since these chapters were released "
                              f"({A1}: checks/nested.py)")
    assert english.endswith(f"python -m autograde release {A1} --course-dir {tmp_path}")
    with pytest.raises(lms_export.ExportError, match="no assignment of the gradebook"):
        lms_export.export(tmp_path, "csv", tmp_path / "out.csv", None, [A1],
                          db_url=f"sqlite:///{tmp_path / 'gradebook.db'}")
    (tmp_path / f"release-{LANGUAGE}" / A1).mkdir(parents=True)
    assert class_language(tmp_path) == LANGUAGE == class_language(tmp_path, [A1])
    assert class_language(tmp_path, ["03_mha"]) == "en"
    chinese = str(batch.StaleRelease(stale, tmp_path))
    assert HAN.search(chinese) and f"{A1}：checks/nested.py" in chinese
    assert chinese.endswith(f"python -m autograde release {A1} --course-dir {tmp_path}")
    with pytest.raises(lms_export.ExportError) as refused:
        lms_export.export(tmp_path, "csv", tmp_path / "out.csv", None, [A1],
                          db_url=f"sqlite:///{tmp_path / 'gradebook.db'}")
    assert str(refused.value) == messages.text("export.nothing", LANGUAGE)
    with batch.course_lock(tmp_path):
        import multiprocessing
        context = multiprocessing.get_context("spawn")
        with context.Pool(1) as pool:
            said = pool.apply(_lock_refusal, (str(tmp_path),))
    assert said.startswith("另一个 `grade` 正在") and str(os.getpid()) in said, said


def _lock_refusal(course_dir):
    """What a second process's `grade` is told while the course's lock is held."""
    from autograde import batch
    try:
        with batch.course_lock(course_dir):
            return "not refused"
    except batch.Busy as busy:
        return str(busy)


def test_collect_roster_and_the_commands_summaries_speak_the_classs_language(tmp_path, capsys,
                                                                             monkeypatch):
    """A refused download (collect.DownloadError), a roster that cannot be used
    (roster.RosterError), what `collect` says of a download's files, `feedback`/`report`
    with nothing graded and `grade`'s closing line: English, as they always were, until the
    class is given a chapter in Chinese (paths.class_language), then Chinese with the same
    values."""
    import zipfile
    from autograde import __main__ as cli, batch, exports
    from autograde.collect import DownloadError, collect
    from autograde.roster import RosterError
    course_dir = tmp_path / "course"
    course_dir.mkdir()
    not_zip = tmp_path / "download.zip"
    not_zip.write_text("not a zip")
    roster = tmp_path / "roster.csv"
    roster.write_text("name\nAda Lovelace\n")
    outside = tmp_path / "outside.zip"
    with zipfile.ZipFile(outside, "w") as archive:
        archive.writestr(f"../{A1}.ipynb", "{}")
    canvas = tmp_path / "canvas.zip"
    with zipfile.ZipFile(canvas, "w") as archive:
        archive.writestr(f"ada_101_9001_{A1}.ipynb", "{}")
        archive.writestr("bob_102_9002_notes.txt", "")
    twice = tmp_path / "twice.csv"
    twice.write_text("student_id\nada\nada\n")
    graded = {(student, A1): NotebookResult(student, A1, f"{A1}.ipynb", status)
              for student, status in (("ada", "graded"), ("bob", "error"))}
    monkeypatch.setattr(batch, "grade_with_nbgrader", lambda *args: graded)
    monkeypatch.setattr(batch, "save_results", lambda *args: None)
    monkeypatch.setattr(exports, "export_grades", lambda *args: course_dir / "grades.csv")
    monkeypatch.setattr(exports, "export_tests", lambda *args: course_dir / "tests.csv")

    def said():
        """What the commands say in the course as it is now: each refusal's message, then
        what `collect` of a Canvas download says, then what `report` and `grade --engine
        nbgrader` print (stderr, stdout)."""
        refusals = []
        for download, roster_path in ((not_zip, None), (outside, None), (not_zip, roster),
                                      (not_zip, twice)):
            with pytest.raises((DownloadError, RosterError)) as refused:
                collect(download, A1, "canvas", course_dir, roster_path)
            refusals.append(str(refused.value))
        refusals += collect(canvas, A1, "canvas", course_dir).lines()
        assert cli.main(["report", "--course-dir", str(course_dir)]) == 1
        no_results = capsys.readouterr().err.strip()
        assert cli.main(["grade", "--engine", "nbgrader", "--course-dir", str(course_dir)]) == 0
        summary = capsys.readouterr().out.strip()
        return refusals, no_results, summary

    refusals, no_results, summary = said()
    assert refusals[0].startswith(f"{not_zip} is not a zip file: ")
    assert refusals[1] == (f"{outside}: refusing member '../{A1}.ipynb' (outside the "
                           "download's folder)")
    assert refusals[2] == f"{roster}: no column named student_id (the header has name)"
    assert refusals[3] == f"{twice}, row 3: student_id 'ada' appears twice"
    assert refusals[4:] == [
        "PROBLEM not-notebook: canvas/bob_102_9002_notes.txt: bob handed in 'notes.txt', "
        f"which is not a notebook ({A1}.ipynb expected) (left in collect-problems/{A1}/)",
        f"{A1}: 1 added, 0 updated, 0 unchanged; 1 problems"]
    assert no_results == "no results: run `python -m autograde grade` first"
    assert summary == (f"2 notebooks; 1 could not be graded. Wrote {course_dir / 'grades.csv'}"
                       f" and {course_dir / 'tests.csv'}.")

    (course_dir / f"release-{LANGUAGE}" / A1).mkdir(parents=True)
    chinese, no_results, summary = said()
    for message in chinese + [no_results, summary]:
        assert HAN.search(message), message
    assert chinese[0].startswith(f"{not_zip} 不是 zip 文件：")
    assert chinese[1] == messages.text("collect.outside", LANGUAGE, path=outside,
                                       member=repr(f"../{A1}.ipynb"))
    assert f"'../{A1}.ipynb'" in chinese[1]
    assert chinese[2] == messages.text("roster.no_student_id", LANGUAGE, path=roster,
                                       header="name")
    assert str(twice) in chinese[3] and "'ada'" in chinese[3] and "3" in chinese[3]
    assert chinese[4].startswith("PROBLEM not-notebook：canvas/bob_102_9002_notes.txt：bob "
                                 "提交了 'notes.txt'") and f"collect-problems/{A1}/" in chinese[4]
    assert chinese[5] == messages.text("collect.summary", LANGUAGE, assignment=A1, added=0,
                                       updated=0, unchanged=1, late="", problems=1)
    assert no_results == messages.text("cli.no_results", LANGUAGE)
    assert "python -m autograde grade" in no_results
    assert summary.startswith("2 个 notebook；1 个") and str(course_dir / "tests.csv") in summary


def test_release_and_gradescope_speak_the_language_the_class_will_be_told_in(tmp_path, capsys,
                                                                            monkeypatch):
    """What `release` and `gradescope` print of what they wrote: the lines English always had,
    byte for byte, for an English class; in Chinese, with the same values, where the class
    was given its chapters in Chinese before or `--lang zh_CN` gives them now
    (paths.class_language counting --lang), from a release's first line to its last. (The
    commands' work is stood in for here: tests/test_release_languages.py and
    tests/test_gradescope.py run it.)"""
    from autograde import __main__ as cli, course, gradescope
    course_dir = tmp_path / "course"
    course_dir.mkdir()
    second = course.assignments()[1]
    monkeypatch.setattr(course, "release", lambda course_dir, only, db: {
        chapter: course_dir.resolve() / "release" / chapter for chapter in only})
    monkeypatch.setattr(course, "answers_shipped", lambda chapter: [A1] if chapter == second else [])
    monkeypatch.setattr(course, "write_zip",
                        lambda folder, zip_dir: Path(zip_dir) / f"{Path(folder).name}.zip")
    monkeypatch.setattr(course, "release_language", lambda course_dir, chapter, language: (
        course_dir.resolve() / f"release-{language}" / chapter,
        [(3, "an untranslated paragraph")] if chapter == second else []))
    monkeypatch.setattr(gradescope, "build", lambda chapter, output, language: output)
    downloads = tmp_path / "downloads"

    def release(*options):
        """The lines `release A1 second --zip downloads <options>` prints."""
        assert cli.main(["release", A1, second, "--course-dir", str(course_dir), "--zip",
                         str(downloads), *options]) == 0
        return capsys.readouterr().out.splitlines()

    def upload_hint(*options):
        """`gradescope A1 <options>`'s line, then its refusal of a chapter that is none."""
        assert cli.main(["gradescope", A1, "--course-dir", str(course_dir), *options]) == 0
        said = capsys.readouterr().out.strip()
        assert cli.main(["gradescope", "09_none", "--course-dir", str(course_dir),
                         *options]) == 2
        return said, capsys.readouterr().err.strip()

    released = course_dir.resolve() / "release"
    kit = course_dir.resolve() / "kit"
    assert release() == [f"{A1}: {released / A1} (holds no answers)",
                         f"{A1}: {downloads / A1}.zip",
                         f"{second}: {released / second} (holds the answers of {A1} for its lab code)",
                         f"{second}: {downloads / second}.zip",
                         f"kit: {kit} (the package of the checks, no answers)"]
    zip_path = course_dir / "gradescope" / A1 / "autograder.zip"
    chapters = ", ".join(course.assignments())
    assert upload_hint() == (
        f"{A1}: {zip_path} (upload it as the assignment's autograder; base image Ubuntu 22.04)",
        f"ERROR: no chapter named '09_none': one of {chapters}")

    translated = course_dir.resolve() / f"release-{LANGUAGE}"
    expected = [
        messages.text("release.no_answers", LANGUAGE, assignment=A1, folder=released / A1),
        messages.text("release.zip", LANGUAGE, assignment=A1, path=downloads / f"{A1}.zip"),
        messages.text("release.answers", LANGUAGE, assignment=second, folder=released / second,
                      chapters=A1),
        messages.text("release.zip", LANGUAGE, assignment=second, path=downloads / f"{second}.zip"),
        messages.text("release.translated", LANGUAGE, assignment=A1, language=LANGUAGE,
                      folder=translated / A1),
        messages.text("release.translated_zip", LANGUAGE, assignment=A1, language=LANGUAGE,
                      path=downloads / LANGUAGE / f"{A1}.zip"),
        messages.text("release.left_in_english", LANGUAGE, assignment=second, language=LANGUAGE,
                      folder=translated / second, count=1),
        "  " + messages.text("where.problem", LANGUAGE, where=messages.where("cell 3", LANGUAGE),
                             message="an untranslated paragraph"),
        messages.text("release.translated_zip", LANGUAGE, assignment=second, language=LANGUAGE,
                      path=downloads / LANGUAGE / f"{second}.zip"),
        messages.text("release.kit", LANGUAGE, path=kit)]
    # --lang zh_CN in a class that had only English: Chinese from the first line
    chinese = release("--lang", LANGUAGE)
    assert chinese == expected
    for said in (0, 2, 6, 7, 9):  # (the others hold names and paths only)
        assert HAN.search(chinese[said]), chinese[said]
    assert chinese[7].startswith("  单元格 3")
    chinese_hint = upload_hint("--lang", LANGUAGE)
    assert chinese_hint == (
        messages.text("gradescope.built", LANGUAGE, assignment=A1, path=zip_path),
        "ERROR: " + messages.text("gradescope.no_chapter", LANGUAGE, name="'09_none'",
                                  chapters=chapters))
    assert all(HAN.search(line) for line in chinese_hint), chinese_hint
    # a class given its chapters in Chinese before: a plain `release` and `gradescope` too
    (course_dir / f"release-{LANGUAGE}" / A1).mkdir(parents=True)
    assert release() == expected[:4] + expected[-1:]
    assert upload_hint() == chinese_hint
