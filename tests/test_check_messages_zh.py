"""The checks speak Chinese (issue 24, item 3): every template of every checks module's
MESSAGES (chapters/checks/language.py) has its translation in
locales/zh_CN/LC_MESSAGES/checks.po, current (the English it translates is the English of
now: a changed template fails here until `make locales` has merged it and a translator has
translated it again), keeping the template's fields and the glossary's terms; the language is
the notebook's (the grader: autograde.notebook.language), COURSE_LANGUAGE's, or the Chinese
kit's marker; and each catalogued bug gets, in Chinese, the Chinese rendering of the message
it gets in English."""
import os
import re
import string
import subprocess
import sys
import zipfile
from collections import Counter

import pytest
import torch

import solutions
from autograde import checks_catalogue, course, engine, kit
from autograde.notebook import language as notebook_language
from tests.chapter import Chapter, checks_module
from tests.submissions import CHAPTERS, catalogue, sample_bugs
from tests.test_glossary import exemptions, missing_terms, term_pairs
from tests.translations import LANGUAGE

CHINESE = re.compile(r"[\u4e00-\u9fff]{2,}")
HAN = re.compile(r"[\u4e00-\u9fff]")
# The templates with no prose to translate (code, a kept English term, fields joined by
# punctuation): their translation holds no Chinese character.
CODE_ONLY = {"capstone.generate_call", "capstone.tokens", "capstone.logits",
             "diversity.dropout_words.state", "masks.nonfinite", "masks.raised_hint", "mha.kind",
             "capstone.default_call", "common.passed", "common.tensor_shape_named",
             "common.nonfinite", "common.kind", "diversity.labelled", "diversity.joined",
             "diversity.joined_below", "heads.labelled", "heads.joined", "heads.joined_below",
             "mha.load_raised", "mha.kind_alone", "mha.count_reason", "positions.sentence",
             "common.other_weights_reason", "diagnose.trace_code", "mha.cases_joiner",
             "diagnose.shape_of", "common.repaired", "common.repaired_lead"}
# Fields that fill in English grammar (a plural "s", an article "a"/"an"): a translation may
# drop one by writing it with the format spec ".0", which prints nothing of a string.
DROPPED = {"s", "got_article", "want_article"}
# Code in a template, which the glossary's terms are not looked for in: identifiers with a
# dot, a bracket, a parenthesis or "=", fields, and one-letter names (B, L, Q, K, V).
CODE = re.compile(r"[\w.]*[A-Za-z_]\w*[._(\[=][^\s,;:]*|\{[^}]*\}|\b[A-Z]\b")


@pytest.fixture(scope="module")
def zh():
    return checks_catalogue.read_catalogue(LANGUAGE)


def fields(template, translation=False):
    """Counter of the (name, format spec, conversion) of `template`'s fields; a translation's
    {s:.0} counts as the template's {s} (DROPPED)."""
    return Counter((name, "" if translation and name in DROPPED and spec == ".0" else spec,
                    conversion)
                   for _, name, spec, conversion in string.Formatter().parse(template)
                   if name is not None)


def test_the_catalogue_holds_every_template_of_the_checks_translated(zh):
    english = checks_catalogue.all_messages()
    assert len(english) > 300 and "attention.scores_passed" in english
    assert "diversity.mode_words.state" in english  # (a nested dict's templates too)
    held = {m.context: m for m in zh if m.id}
    missing = sorted(set(english) - set(held))
    gone = sorted(set(held) - set(english))
    changed = sorted(c for c in set(english) & set(held) if held[c].id != english[c])
    assert not (missing or gone or changed), (
        "checks.po is behind the checks' MESSAGES: run `make locales`, then translate: "
        f"new {missing[:20]}, removed {gone[:20]}, changed {changed[:20]}")
    untranslated = [m.context for m in zh if m.id and (not m.string or m.fuzzy)]
    assert untranslated == [] and not zh.obsolete, untranslated[:20]


def test_each_translation_keeps_its_templates_fields_and_is_chinese(zh):
    for message in zh:
        if message.id:
            assert fields(message.string, translation=True) == fields(message.id), message.context
            assert HAN.search(message.string) or message.context in CODE_ONLY, message.context


def test_each_translation_uses_the_glossarys_terms(zh):
    pairs, report = term_pairs(), []
    for message in zh:
        if message.id:
            for english, chinese in missing_terms(CODE.sub(" ", message.id), message.string,
                                                  exemptions(message), pairs):
                report.append(f"{message.context}: {english!r} without {chinese!r}")
    assert report == []


def test_the_extraction_reads_what_the_checks_look_up():
    """module_messages reads a module's dict without running it, as Translated looks it up:
    contexts <module>.<key>, nested dicts flattened, constants added as the module adds them."""
    source = ('TAIL = " Read the docs."\nMESSAGES = translated(__name__) | {\n'
              '    "plain": "a {x}",\n    "joined": "b " + TAIL,\n'
              '    "words": {"on": "on, p = {p}"},\n}\n')
    assert checks_catalogue.module_messages(source, "demo") == [
        (3, "demo.plain", "a {x}"), (4, "demo.joined", "b  Read the docs."),
        (5, "demo.words.on", "on, p = {p}")]
    with pytest.raises(ValueError, match="not a constant string"):
        checks_catalogue.module_messages('MESSAGES = {"k": f"{1}"}\n', "demo")
    language = checks_module("language")
    messages = language.translated("checks.demo") | {"plain": "a {x}", "words": {"on": "on"}}
    assert messages.context == "demo" and messages["words"].context == "demo.words"
    assert dict(messages)["plain"] == "a {x}" and len(messages) == 2


def test_a_check_speaks_chinese_when_asked_and_english_otherwise(capsys):
    language = checks_module("language")
    check = Chapter("01_attention").check

    def unscaled(query, key):
        return query @ key.transpose(-2, -1)

    for spoken, passed, failed in ((LANGUAGE, "形状", "分数没有缩放"),
                                   (None, "shape", "the scores are not scaled")):
        with language.speaking(spoken):
            check.attention_scores(solutions.attention_scores)
            assert passed in capsys.readouterr().out
            with pytest.raises(Exception, match=failed):
                check.attention_scores(unscaled)


def test_a_raised_error_is_read_from_the_students_line_in_chinese_too():
    """In the student's Jupyter the place of a raised error is said in their language
    ("<cell> 第 N 行：code"), and the likely cause read from that line is said as in English
    (diagnose.restate_error reads the line in either language)."""
    language = checks_module("language")
    check = Chapter("01_attention").check

    def untransposed(query, key):
        return query @ key / key.shape[-1] ** 0.5

    said = {}
    for spoken in (LANGUAGE, None):
        with language.speaking(spoken), pytest.raises(Exception) as raised:
            check.attention_scores(untransposed)
        said[spoken] = str(raised.value)
    assert "enters the product untransposed" in said[None]
    assert re.search(r"第 \d+ 行：return query @ key", said[LANGUAGE]), said[LANGUAGE]
    assert "`key` 未经转置就进入了乘积" in said[LANGUAGE], said[LANGUAGE]


def test_a_course_functions_refusal_is_quoted_as_the_student_s_traceback_says_it():
    """From chapter 5 on, the student's code calls the course's own package (`from solutions
    import ...`: attention, masks, heads, the KV cache, the labs), and its input checks
    (solutions/_checks.py) can refuse what the student passes. The checks never call
    solutions themselves (their answers are their own, or the kit's fixtures), so such a
    refusal reaches a message only as the exception of the student's call, which the check
    quotes as it quotes PyTorch's (diagnose.restate_error, `raised_plain`): in its Chinese
    sentence, the error's words as the student's own traceback shows them, in English."""
    language = checks_module("language")
    check = Chapter("06_kv").check

    def transposed_mask(attn, q, k, v, mask=None):
        """Chapter 6's attend_heads, with chapter 4's function (shipped with chapter 6) given
        the mask (T, L) where (L, T) is meant."""
        repeats = attn.num_heads // k.shape[1]
        k, v = k.repeat_interleave(repeats, 1), v.repeat_interleave(repeats, 1)
        mask = None if mask is None else mask.transpose(-2, -1)
        heads, _ = solutions.scaled_dot_product_attention(q, k, v, mask)   # (B, h, L, hd)
        return attn.out_proj(solutions.merge_heads(heads))

    with pytest.raises(ValueError) as refused:  # what the student's traceback says
        q, k = torch.zeros(2, 4, 3, 4), torch.zeros(2, 4, 5, 4)
        solutions.scaled_dot_product_attention(q, k, k, torch.ones(5, 3, dtype=torch.bool))
    words = str(refused.value)
    assert words.startswith("mask of shape (5, 3) cannot broadcast")
    said = {}
    for spoken in (LANGUAGE, None):
        with language.speaking(spoken), pytest.raises(Exception) as raised:
            check.attend_heads(transposed_mask)
        said[spoken] = str(raised.value)
    assert words in said[None] and "raised ValueError" in said[None], said[None]
    assert words in said[LANGUAGE] and HAN.search(said[LANGUAGE].replace(words, "")), \
        said[LANGUAGE]
    assert "raised" not in said[LANGUAGE].replace(words, ""), said[LANGUAGE]


def test_the_checks_and_the_grader_never_call_the_course_package():
    """What the checks and the grader say comes from their catalogues; the English of
    solutions/ reaches them only as the exception of a call in the student's process (the
    student's own, or of a class the student passed), quoted (the test above): neither
    imports solutions (a check's answers are its own, or the kit's fixtures)."""
    import ast
    from tests.translations import REPO
    for path in sorted([*(REPO / "chapters" / "checks").glob("*.py"),
                        *(REPO / "autograde").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(name.split(".")[0] == "solutions" for name in names), path


def test_the_grader_speaks_the_notebooks_language():
    assert notebook_language({"metadata": {"course": {"language": LANGUAGE}}}) == LANGUAGE
    assert notebook_language({"metadata": {}}) == "en" and notebook_language({}) == "en"
    assert engine._spoken({"metadata": {"course": {"language": LANGUAGE}}}) == LANGUAGE
    # the student writes the metadata: only a language the checks have reaches them
    for metadata in ({}, {"course": {"language": "../../etc"}}, {"course": "zh_CN"},
                     {"course": {"language": ["zh_CN"]}}):
        assert engine._spoken({"metadata": metadata}) == "en", metadata


def _kit_language(folder, environment):
    """(language, one message) as the kit's checks/language.py in `folder` gives them, in a
    Python without site-packages (the kit's catalogue needs the standard library only)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from checks import language; "
            "m = language.translated('checks.attention') | {'warning': 'Note: {name}'}; "
            "print(language.current(), m['warning'])")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(folder)],
                          capture_output=True, text=True, env=environment, check=True)
    return done.stdout.strip()


def test_the_kit_carries_the_catalogue_and_the_chinese_kit_its_marker(tmp_path):
    checks = kit.write_checks(tmp_path / "checks", ["__init__", "language", "attention"], [])
    compiled = (checks / "locale" / LANGUAGE / "LC_MESSAGES" / "checks.mo").read_bytes()
    # the messages of the modules it ships, and no other's (diagnose is not among them here)
    assert "attention.warning".encode() in compiled and b"diagnose." not in compiled
    translated = checks_catalogue.read_catalogue(LANGUAGE).get(
        "Note: {name} emitted a warning: {text}", context="attention.warning").string
    assert _kit_language(tmp_path, {}) == "en Note: {name}"  # (not in the catalogue: English)
    (checks / "LANGUAGE").write_text(f"{LANGUAGE}\n")
    assert _kit_language(tmp_path, {}).startswith(f"{LANGUAGE} Note")
    assert _kit_language(tmp_path, {"COURSE_LANGUAGE": "en"}).startswith("en ")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from checks import language; "
            "print(language.catalogue(language.current()).pgettext('attention.warning', "
            "'Note: {name} emitted a warning: {text}'))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(tmp_path)],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == translated and CHINESE.search(translated)


def test_the_chinese_zip_holds_the_marker_and_the_catalogue(course_release, tmp_path):
    course_dir = course_release("01_attention")
    folder, _ = course.release_language(course_dir, "01_attention", LANGUAGE)
    with zipfile.ZipFile(course.write_zip(folder, tmp_path)) as archive:
        names = set(archive.namelist())
        assert archive.read("01_attention/checks/LANGUAGE").decode().strip() == LANGUAGE
        archive.extractall(tmp_path / "unzipped")
    assert f"01_attention/checks/locale/{LANGUAGE}/LC_MESSAGES/checks.mo" in names
    assert "01_attention/checks/language.py" in names
    # unzipped, its checks speak Chinese with nothing set, the catalogued bugs' messages too
    # (the kit replays them from its fixtures, recorded in each language: checks.common)
    # (and a mistake that only the formula's steps name: formulas.py's sentence, its step's
    # label and diagnose's frame, each in Chinese; and a family's word pieces)
    code = ("import sys, torch; sys.path.insert(0, '.'); from checks import attention as check\n"
            "for call in (lambda: check.attention_scores(lambda q, k: q @ k.mT / q.shape[-1]),\n"
            "             lambda: check.attention_entropy(\n"
            "                 lambda w: (-torch.special.xlogy(w, w).sum(-1)).exp()),\n"
            "             lambda: check.attention_entropy(\n"
            "                 lambda w: -torch.special.xlogy(w, w).sum(-1).mean(-1))):\n"
            "    try:\n        call()\n"
            "    except Exception as error:\n        print(error)")
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "COURSE_LANGUAGE")}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / "unzipped" / "01_attention",
                          capture_output=True, text=True, env=environment, check=True)
    assert "“缩放”步骤除以 d_k，而不是 sqrt(d_k) = sqrt(4)" in done.stdout, done.stdout + done.stderr
    assert "“结果”步骤是 exp(熵)，即困惑度" in done.stdout, done.stdout
    assert "它是正确答案沿 Lq 轴取平均的结果" in done.stdout, done.stdout
    assert " step " not in done.stdout and " axis" not in done.stdout, done.stdout


def test_the_formulas_steps_are_worded_in_the_language_of_now():
    """formulas.py's sentences (a step's description and label, diagnose.Formula's frame) are
    made when the check asks, in its language: as many in Chinese as in English, none the
    same, none left with English words."""
    language, formulas = checks_module("language"), checks_module("formulas")
    dims = {"batch": 2, "Lq": 3, "Lk": 5, "d_k": 6}
    said = {}
    for spoken in ("en", LANGUAGE):
        with language.speaking(spoken):
            formula = formulas.FORMULAS["attention"](dims, d_k=6)
            said[spoken] = ([sentence for sentence, _, _ in formula.changes()]
                            + list(formula.together) + [s for s, _ in formula.pairs()])
    english, chinese = said["en"], said[LANGUAGE]
    assert "the scale step is left out: the scores are not scaled, divide Q K^T by sqrt(d_k)" \
        in english
    assert "“缩放”步骤被省略了：分数没有缩放，应把 Q K^T 除以 sqrt(d_k)" in chinese
    assert len(chinese) == len(set(chinese)) == len(english) > 40
    assert not [s for s in chinese if re.search(r"\b(?:the|step|instead|and)\b", s)]


# ------------------------------------------------------- each catalogued bug, in Chinese
def _bugs():
    for assignment in CHAPTERS:
        entries = catalogue(assignment)
        for name in sample_bugs(entries.BUGS if entries else {}):
            yield pytest.param(assignment, name, id=f"{assignment}-{name}")


@pytest.fixture(scope="module")
def chapters():
    return {}


def _signature(template):
    """The longest fixed text of a template, which every message made from it holds."""
    return max((literal.strip() for literal, *_ in string.Formatter().parse(template)),
               key=len, default="")


@pytest.fixture(scope="module")
def templates(zh):
    """{context: (English template, Chinese template)} of every checks message."""
    return {m.context: (m.id, m.string) for m in zh if m.id}


@pytest.mark.parametrize("assignment, name", list(_bugs()))
def test_each_catalogued_bug_gets_its_named_message_in_chinese(chapters, templates, assignment,
                                                               name, monkeypatch):
    """The bug's first failing cell, run in English and in Chinese: the same templates looked
    up in the same order (the same verdict, the same mistake named: no check decides on the
    words of a message), and each template whose words the English message shows shows in
    its Chinese words in the Chinese message. About 15 s of CPU for the sample of bugs."""
    chapter = chapters.setdefault(assignment, Chapter(assignment))
    bug = catalogue(assignment).BUGS[name]
    first = next(t for t in chapter.tests if t in bug.fails)
    language = checks_module("language")
    looked_up = []
    lookup = language.Translated.__getitem__

    def recorded(self, key):
        looked_up.append(f"{self.context}.{key}")
        return lookup(self, key)

    monkeypatch.setattr(language.Translated, "__getitem__", recorded)
    runs = {}
    for spoken in ("en", LANGUAGE):
        # a namespace of its own per run: a bug may keep state between calls (on its class)
        namespace = chapter.namespace(bug.cells)
        looked_up.clear()
        torch.manual_seed(0)
        with language.speaking(spoken):
            runs[spoken] = (chapter.run(first, namespace), list(looked_up))
    (english, english_keys), (chinese, chinese_keys) = runs["en"], runs[LANGUAGE]
    assert english is not None and chinese is not None, (english, chinese)
    assert chinese_keys == english_keys, (english, chinese)
    shown = [context for context in dict.fromkeys(english_keys) if context in templates
             and len(_signature(templates[context][0])) >= 8
             and _signature(templates[context][0]) in english]
    # (a template whose words lie inside another shown template's is shown by that one:
    # "{where}(x) in training mode" inside "{where}(x) in training mode, built without ...")
    shown = [c for c in shown if not any(
        o != c and _signature(templates[c][0]) in templates[o][0] for o in shown)]
    # (the same English words may come from a module whose messages are not translated yet:
    # then the Chinese run prints them as they are)
    translated = [c for c in shown if _signature(templates[c][0]) not in chinese]
    axis_name = checks_module("diagnose")._ORDINAL_SLOT
    for context in translated:
        # (or as an axis's name, its index dropped: "剪枝后模块的第 {} 个头" names the axis
        # "剪枝后模块的头", diagnose.axis_names)
        assert any(form in chinese for form in (
            _signature(templates[context][1]),
            " ".join(axis_name.sub("", templates[context][1]).split()))), (context, chinese)
    if translated:
        assert CHINESE.search(chinese), chinese
