"""What the chapter notebooks' own code prints, in the Chinese edition (issue 24, item 4;
_ext/print_messages.py, _ext/print_language.py): the catalogue
locales/zh_CN/LC_MESSAGES/prints.po holds exactly the print templates and printed strings that
the extraction finds in the notebooks' code (current: a changed English template fails),
each translated in the glossary's terms, keeping its fields and its code; the kernel hook
prints the translation with the values in place and tables aligned; and in the Chinese
edition's executed notebooks (its own jupyter-cache, `make book-zh`) no line printed by the
code is left in English, save code, data and the messages PyTorch itself wrote, while the
English edition's outputs hold no Chinese."""
import ast
import json
import re
import subprocess
import sys

import pytest

from tests.test_diagrams import english_words, kept_in_english
from tests.test_glossary import missing_terms
from tests.test_plot_labels import _executed
from tests.test_translations import stale, untranslated
from tests.translations import LANGUAGE, MESSAGES, REPO, read_catalogue

sys.path.insert(0, str(REPO / "_ext"))
import plot_language  # noqa: E402  (_ext/ is no package)
import print_language  # noqa: E402
import print_messages  # noqa: E402

CATALOGUE = MESSAGES / f"{print_language.CATALOGUE}.po"
HAN = re.compile(r"[\u4e00-\u9fff]")
# bare words of printed code and data that are the same in every language: the library and
# devices (torch 2.13.0+cpu), tensors' reprs (nan, -inf), JSON's true, a variable's name,
# functions named in a formula (allclose, tanh, log V, max |x|), a dtype, a zip file
CODE_WORDS = {"torch", "cpu", "cuda", "nan", "inf", "true", "false", "concat", "tensor",
              "allclose", "tanh", "log", "max", "dtype", "zip"}


def print_messages_of_catalogue():
    return [m for m in read_catalogue(CATALOGUE) if m.id]


def prose_words(text, kept):
    """The English prose words of a printed text: code (identifiers, calls, paths, dotted
    names, versions), the glossary's English terms and CODE_WORDS aside."""
    text = re.sub(r"\S*(?:/|\w\.\w)\S*", " ", text)   # paths, repositories, torch.float32
    text = re.sub(r"'[^'\n]*'|\"[^\"\n]*\"|“[^”]*”", " ", text)  # quoted: a token, a sample
    text = re.sub(r"\w+\([^()]*\)|\|[^|\n]*\||\bis None\b|\b[A-Z][A-Z0-9]*-\w+", " ", text)
    return [w for w in english_words(text, kept) if w.lower() not in CODE_WORDS]


# --------------------------------------------------------------------------- the catalogue
def test_the_print_catalogue_is_current():
    """prints.po holds exactly the messages the extraction finds now (`make locales` merges
    them): a changed English print fails until it is merged and translated again. A
    message with fields is a pattern (flagged python-brace-format where str.format can
    parse it: Babel drops the flag of the one whose field holds an f-string)."""
    extracted = print_messages.extract()
    assert len(extracted) > 250
    catalogue = read_catalogue(CATALOGUE)
    assert stale(catalogue, set(extracted)) == ([], []), "run `make locales`, then translate"
    formatted = {text for text, (fields, _) in extracted.items() if fields}
    assert {m.id for m in catalogue if m.id and print_language.has_fields(m.id)} == formatted
    flagged = {m.id for m in catalogue if m.id and plot_language.BRACE_FORMAT in m.flags}
    assert flagged <= formatted and len(formatted - flagged) <= 1


def test_every_printed_message_is_translated_keeping_its_fields_and_code():
    catalogue = read_catalogue(CATALOGUE)
    assert untranslated(catalogue) == []
    code = re.compile(r"[A-Za-z_]*_[A-Za-z_0-9]*|\$[^$]*\$|\w+\.[A-Za-z_]\w+")
    changed = []
    for m in print_messages_of_catalogue():
        fields = plot_language.FIELD.findall
        if sorted(fields(m.string)) != sorted(fields(m.id)):
            changed.append((m.id, "fields", sorted(fields(m.string))))
        lost = set(code.findall(plot_language.FIELD.sub(" ", m.id))) - set(code.findall(m.string))
        if lost:
            changed.append((m.id, "code", sorted(lost)))
    assert changed == []


def test_the_printed_messages_are_chinese_in_the_glossarys_terms():
    """Each translation has no English prose left outside its fields (the names of models
    and repositories, shapes and code may stay), and uses the glossary's term for each
    English term of its message."""
    kept = kept_in_english()
    english_left = [(m.id, words) for m in print_messages_of_catalogue()
                    if (words := prose_words(plot_language.FIELD.sub(" ", m.string), kept))]
    assert english_left == []
    call = re.compile(r"\w+\([^()]*\)|\w+ ?[=!<>]= ?\w+|\S*_\S*")
    report = [f"{english!r} without {chinese!r} in {m.string!r}" for m in print_messages_of_catalogue()
              for english, chinese in missing_terms(call.sub(" ", plot_language.FIELD.sub(" ", m.id)),
                                                    m.string)]
    assert report == []


# --------------------------------------------------------------------------- extraction
def _templates(source):
    return [print_language.template(node)[0] for node in ast.walk(ast.parse(source))
            if print_language.template(node) is not None]


def test_a_print_call_is_one_template_with_its_fields():
    assert _templates(
        "print('row sums:', w.sum(-1), f'of {n:,} rows', sep=' ')\n"
        "print(f\"{'heads':>5} {h:5}\" + ('' if m is None else f'{m:6.0f} MiB'))\n"
        "print('a {brace}', *rest)\n"
        "print(x, sep=separator)\n") == [
        "row sums: {w.sum(-1)} of {n} rows",
        "{'heads'} {h}{'' if m is None else f'{m:6.0f} MiB'}"]
    assert print_language.pieces("a {{b}} {c} d") == [(False, "a {b} "), (True, "{c}"), (False, " d")]


def test_the_extraction_follows_printed_values_into_solutions():
    """A report that a function of solutions/ builds (sdpa_backends.report_probe, fed by
    probe) has its lines and its conditions' names in the catalogue."""
    extracted = print_messages.extract([REPO / "chapters" / "07_positions.ipynb"])
    assert {"  runs: {', '.join(ran) or 'none'}", "PyTorch's reasons:",
            "{name}, boolean attn_mask"} <= set(extracted)
    assert "PyTorch's reasons:" in extracted and "none" in extracted


def test_the_extraction_takes_the_recorded_data_a_print_shows():
    """A print's field `recorded['machine']` shows a string of chapters/data/*.json: the
    strings under that key are messages (a version or a path is code; PyTorch's reasons,
    which a cell wraps with textwrap.fill, stay its words)."""
    capstone = print_messages.extract([REPO / "chapters" / "08_capstone.ipynb"])
    assert {"x86_64, 2 CPUs (Linux)", "one sequence of 64 positions, float32", "rotary",
            "learned"} <= set(capstone)
    assert capstone["rotary"][1] == [("chapters/data/capstone_ablation.json", None)]
    assert not {"2.13.0+cpu", "bench/capstone_ablation.py"} & set(capstone)
    positions = print_messages.extract([REPO / "chapters" / "07_positions.ipynb"])
    assert "q (1, 8, L, 64); k and v (1, 2, L, 64) when gqa, else (1, 8, L, 64)" in positions
    assert not any(text.startswith("Expected query, key and value") for text in positions)


# --------------------------------------------------------------------------- translation
def test_a_print_is_translated_with_its_values_in_place_and_columns_kept():
    printed = print_language.Printed([
        ("{name}: {n} layers", "{name}：{n} 层", True),
        ("heads", "头数", False), ("first", "第一个", False), ("previous", "前一个", False),
        ("mixed {p}/{f}", "混合 {p}/{f}", True), ("role", "角色", False)])
    assert printed.text("{name}: {n} layers", ["Llama", "32"]) == "Llama：32 层"
    # a column title keeps its column, on the side its format spec aligns it
    assert printed.text("{'heads'} {'role'}", [("heads", ">5"), ("role      ", "10")]) == " 头数 角色      "
    assert printed.text("{r}|", [("mixed 0.37/0.40 ", "16")]) == "混合 0.37/0.40  |"
    assert printed.text("{roles}", ["first, previous, 1"]) == "第一个、前一个、1"
    assert printed.text("{roles}", ["first, other"]) == "first, other"   # not word by word
    assert printed.text("{ids}", ["[5505024, 344064]"]) == "[5505024, 344064]"
    assert printed.text("{report}", ["heads\n  first"]) == "头数\n  第一个"
    assert printed.text("not in the catalogue {x}", ["first"]) == "not in the catalogue 第一个"
    assert print_language.columns("头数 ab") == 7


def test_a_title_wider_than_its_column_takes_the_spaces_beside_it():
    """A translated column title wider than its format width (counted in columns: a Chinese
    character takes two) takes the spaces before it when right-aligned, after it when
    left-aligned, one kept, so that it and the columns after it stay above their values."""
    printed = print_language.Printed([("acc prev", "前一个准确率", False), ("role", "角色", False),
                                      ("kv", "键值头数", False), ("n", "n", False)])
    header = "{'role'} {'acc prev'} {'n'}"
    english = [(f"{'role':10}", "10"), (f"{'acc prev':>8}", ">8"), (f"{'n':>3}", ">3")]
    assert printed.text(header, english) == "角色   前一个准确率   n"
    assert print_language.columns("角色   前一个准确率") == len(f"{'role':10} {'acc prev':>8}")
    # left-aligned: the spaces after it give way, the next right-aligned title keeps its edge
    assert printed.text("{'kv'} {'n'}|", [(f"{'kv':4}", "4"), (f"{'n':>4}", ">4")]) == \
        "键值头数 n|" == "键值头数" + " " + "n|"
    assert printed.text("{'kv'}|{'n'}", [(f"{'kv':4}", "4"), (f"{'n':>4}", ">4")]) == "键值头数|   n"
    # no room on its side: the other side keeps its spaces (taking them would move the title
    # off its values); its column widens (the next test)
    assert printed.text("{'n'} {'acc prev'}  x", [("n", ""), (f"{'acc prev':>8}", ">8")]) == \
        "n 前一个准确率  x"


def _line(printed, template, values):
    """What `printed` prints of an f-string print call `template` (its fields' code, e.g.
    "{'acc first':>9}") whose fields' values are `values` ({code: value}; a literal's is
    itself): the Chinese line, and the English one print itself prints."""
    call = ast.parse(f"print(f{template!r})").body[0].value
    message, fields = print_language.template(call)
    formatted = []
    for field in fields:
        code = ast.unparse(field.value)
        spec = "".join(v.value for v in field.format_spec.values) if field.format_spec else ""
        value = values[code] if code in values else ast.literal_eval(code)
        formatted.append((format(value, spec), spec))
    english = iter(value for value, _ in formatted)
    return printed.text(message, formatted), "".join(
        next(english) if is_field else text for is_field, text in print_language.pieces(message))


def _right_edges(line):
    """The columns where the words of a printed line end (a Chinese character takes two)."""
    return {print_language.columns(line[:word.end()]) for word in re.finditer(r"\S+", line)}


def test_chapter_5s_and_8s_tables_stand_each_title_above_its_values():
    """Chapter 5's tables (chapters/05_diversity.ipynb, cells 8, 11 and 50) and chapter 8's
    (08_capstone.ipynb, cell 35, likewise "第一个" after "前一个") in Chinese, their
    titles and rows printed through the kernel hook from the catalogue: "首个准确率" (acc
    first) is ten columns wide over a nine-column right-aligned column right after "前一个准确率"
    (acc previous, twelve columns over twelve), so no space before it can give way. Its
    column widens, in the title line and in the rows printed after it in the same cell, so
    that every right-aligned title's right edge is its values' (counted in columns:
    unicodedata.east_asian_width) and the columns after it move with it; a line of another
    width ends the table, as does the next cell (Printed.end_table)."""
    printed = print_language.Printed.read(LANGUAGE)
    accuracy = {"acc['acc_prev']": 0.5, "acc['acc_first']": 0.25}
    tables = [  # (title line, row line, its values) as the chapter prints them
        ("{'heads':>5} {'head_dim':>8} {'parameters':>10} {'acc previous':>12} "
         "{'acc first':>9} {'seconds':>7}",
         "{h:5} {D_MODEL // h:8} {parameter_count(run['model']):10,} {acc['acc_prev']:12.1%} "
         "{acc['acc_first']:9.1%} {run['history']['seconds']:7.2f}",
         {"h": 2, "D_MODEL // h": 8, "parameter_count(run['model'])": 1234,
          "run['history']['seconds']": 1.5, **accuracy}),
        ("{'seed':>4} {'heads':>5} {'acc previous':>12} {'acc first':>9}",
         "{seed:4} {h:5} {acc['acc_prev']:12.1%} {acc['acc_first']:9.1%}",
         {"seed": 1, "h": 2, **accuracy}),
        ("{'seed':>4} {'head':>4} {'role':22} {'acc prev':>8} {'acc first':>9}   "
         "{'after 50 more steps':>19}",
         "{seed:4} {head:4} {run['roles'][head]:22} {acc['acc_prev']:8.1%} "
         "{acc['acc_first']:9.1%}   {again:>19}",
         {"seed": 1, "head": 0, "run['roles'][head]": "previous", "again": "50.0% / 25.0%",
          **accuracy}),
        # chapter 8's (cell 35): "第一个" (first), six columns over five after "前一个"
        ("{'layer':>5} {'head':>4} {'entropy':>7} {'previous':>8} {'first':>5}",
         "{n:5} {i:4} {entropy[i]:7.2f} {prev[i]:8.2f} {first[i]:5.2f}",
         {"n": 0, "i": 1, "entropy[i]": 1.25, "prev[i]": 0.5, "first[i]": 0.25})]
    for titles, row, values in tables:
        printed.end_table()
        title_line, english_titles = _line(printed, titles, {})
        rows = [_line(printed, row, values) for _ in range(2)]
        right_aligned = [printed.translate(title) or title
                         for title in re.findall(r"\{'([^']+)':>\d+\}", titles)]
        assert HAN.search(title_line) and ("首个准确率" in right_aligned or "第一个" in right_aligned)
        for line, english in rows:
            # each right-aligned title ends where its values end
            for title in right_aligned:
                end = print_language.columns(title_line[:title_line.index(title) + len(title)])
                assert end in _right_edges(line), (title, title_line, line)
            # the widened column: one column wider than the English, in every line
            assert print_language.columns(line) == print_language.columns(title_line) == \
                len(english) + 1 == len(english_titles) + 1
    # a line of another width after the table is no row of it, nor is a row of a new cell
    assert printed.text("{x}", [("    25.0%", "9.1%")]) == "    25.0%" and printed.table is None
    _line(printed, tables[1][0], {})
    printed.end_table()
    assert _line(printed, tables[1][1], tables[1][2])[0] == _line(
        print_language.Printed([]), tables[1][1], tables[1][2])[1]


def test_a_chinese_kernel_rewrites_its_prints_and_leaves_the_cell_alone(tmp_path):
    """The startup file of the Chinese kernels (plot_language.ipython_dir), in a fresh
    IPython: print calls print their translation, evaluated once, in order, with print's
    own keywords; everything else of the cell runs as written."""
    folder = plot_language.ipython_dir(LANGUAGE, tmp_path / "ipython")
    startup = (folder / "profile_default" / "startup" / "00-plot-labels.py").read_text()
    cell = ("calls = []\n"
            "class Recorded(int):\n"
            "    def __format__(self, spec):\n"
            "        calls.append(int(self))\n"
            "        return format(int(self), spec)\n"
            "t, without, with_cache = 15, Recorded(5505024), Recorded(344064)\n"
            "print(f'position {t:3d}: {without:>11,} FLOPs without the cache, {with_cache:>7,} "
            "with it ({without / with_cache:.0f}x)', end='|\\n')\n"
            "print('untouched', calls)\n")
    script = ("from IPython.testing.globalipapp import start_ipython\n"
              "shell = start_ipython()\n" + startup
              + f"shell.run_cell({cell!r})\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines() == [
        "位置  15：浮点运算次数不用缓存   5,505,024，用缓存 344,064（16x）|",
        "untouched [5505024, 344064]"]


# --------------------------------------------------------------------------- the built edition
# What a Chinese page may print in English, as data the code prints and does not write: the
# messages PyTorch wrote (an error's text, a backend's reason for refusing, which the pages
# quote as PyTorch's, 原文), chapter 8's corpus (Genesis) and what its model generates, and
# the strings of the recorded tables of chapters/data/ that the catalogue does not hold
# (names, versions, PyTorch's recorded reasons: print_messages.recorded_values takes the rest).
PYTORCH_MESSAGES = [
    r"shape '\[[\d, ]+\]' is invalid for input of size \d+",
    r"view size is not compatible with input tensor's size and stride \(at\s+least one "
    r"dimension spans across two contiguous subspaces\)\. Use\s+\.reshape\(\.\.\.\) instead\.",
    r"value cannot be converted to type c10::Half without overflow",
    r"index out of range in self",
    r"No viable backend for scaled_dot_product_attention was found\. This\s+is likely due "
    r"to turning off both the math kernel and the fused\s+kernels\.",
    r"Both fused kernels do not support non-zero dropout\.",
]


def _recorded_strings():
    """The string values of the recorded tables (chapters/data/*.json) that the catalogue
    does not translate (a value it holds, 'default', must be shown translated), longest
    first."""
    found = set()

    def walk(value):
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
    for path in (REPO / "chapters" / "data").glob("*.json"):
        walk(json.loads(path.read_text(encoding="utf-8")))
    catalogued = {m.id.strip() for m in print_messages_of_catalogue()}
    return sorted((s for s in found if len(s.strip()) > 2 and s.strip() not in catalogued),
                  key=len, reverse=True)


def _printed(notebook):
    """The text each code cell printed: [(cell index, text)]."""
    return [(i, "".join(o["text"] for o in cell.get("outputs", [])
                        if o.get("output_type") == "stream"))
            for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"]


def english_left(text, kept, corpus, recorded):
    """The English prose words of a printed text that are neither code nor data. The checks'
    own lines (✔ ..., chapters/checks: checks.po, tests/test_check_messages_zh.py) are not
    the notebooks' prints."""
    spaced = [r"\s+".join(map(re.escape, value.split())) for value in recorded]
    for message in PYTORCH_MESSAGES + spaced:   # (wrapped over lines: textwrap.fill)
        text = re.sub(message, " ", text)
    left = []
    for line in text.split("\n"):
        if line.lstrip().startswith("✔") or (line.strip() and " ".join(line.split()) in corpus):
            continue                                        # a check's line, a verse of the corpus
        line = re.sub(r"^\s*\(\w+\): ", " ", line)        # a submodule's name in a module's repr
        left += prose_words(line, kept)
    return left


@pytest.fixture(scope="module")
def executed_editions():
    import yaml
    from course_language import language_cache
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    english = _executed(config["execute"]["cache"])
    chinese = _executed(language_cache(config, LANGUAGE))
    if not english or len(chinese) < len(english):
        pytest.skip("the Chinese notebooks are not executed: `make book-zh` executes them")
    return english, chinese


def test_nothing_the_chinese_pages_print_is_left_in_english(executed_editions):
    english, chinese = executed_editions
    kept = kept_in_english()
    corpus = " ".join((REPO / "chapters" / "data" / "genesis_kjv.txt").read_text(encoding="utf-8").split())
    recorded = _recorded_strings()
    left, chinese_lines = [], 0
    for chapter, notebook in chinese.items():
        for cell, text in _printed(notebook):
            chinese_lines += sum(1 for line in text.split("\n") if HAN.search(line))
            words = english_left(text, kept, corpus, recorded)
            if words:
                left.append((chapter, cell, words, text[:300]))
    assert chinese_lines > 400
    assert left == []


def test_the_english_pages_print_no_chinese(executed_editions):
    english, _ = executed_editions
    chinese = [(chapter, cell, text[:200]) for chapter, notebook in english.items()
               for cell, text in _printed(notebook) if HAN.search(text)]
    assert chinese == []
