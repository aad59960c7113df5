"""The labels of the plots the chapter notebooks draw, in the Chinese edition (issue 24, item
4; _ext/plot_labels.py, _ext/plot_language.py): the catalogue locales/zh_CN/LC_MESSAGES/plots.po holds exactly the
labels the extraction finds in the notebooks' code (current, like the pages' catalogues),
each translated in the glossary's terms, keeping its code and its f-string fields; the
kernel hook translates a label, whole or by pattern, and makes a missing glyph an error;
the CJK font is the pinned one; and every plot of the Chinese edition's executed notebooks
(its own jupyter-cache, `make book-zh`) shows its catalogued labels in Chinese, with a glyph
for every character, as the Chinese pages show them."""
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_diagrams import english_words, kept_in_english
from tests.test_glossary import missing_terms
from tests.test_translations import stale, untranslated
from tests.translations import LANGUAGE, MESSAGES, REPO, read_catalogue

sys.path.insert(0, str(REPO / "_ext"))
import plot_labels  # noqa: E402  (_ext/ is no package)
import plot_language  # noqa: E402

CATALOGUE = MESSAGES / f"{plot_language.CATALOGUE}.po"
HAN = re.compile(r"[\u4e00-\u9fff]")


def plot_messages():
    return [m for m in read_catalogue(CATALOGUE) if m.id]


# --------------------------------------------------------------------------- the catalogue
def test_the_plot_catalogue_is_current():
    """plots.po holds exactly the labels the extraction finds now (`make locales` merges
    them), an f-string's flagged as a pattern: a changed English label fails until it is
    merged and translated again."""
    extracted = plot_labels.extract()
    assert len(extracted) > 100
    catalogue = read_catalogue(CATALOGUE)
    assert stale(catalogue, set(extracted)) == ([], []), "run `make locales`, then translate"
    flagged = {m.id for m in catalogue if m.id and plot_language.BRACE_FORMAT in m.flags}
    assert flagged == {text for text, (formatted, _) in extracted.items() if formatted}


def test_every_plot_label_is_translated_keeping_its_fields_and_code():
    catalogue = read_catalogue(CATALOGUE)
    assert untranslated(catalogue) == []
    code = re.compile(r"\([^()（）\s]*(?:, [^()（）\s]*)+\)|[A-Za-z_]*_[A-Za-z_0-9]*|\$[^$]*\$")
    changed = []
    for m in plot_messages():
        fields = set(plot_language.FIELD.findall(m.string)) - set(plot_language.FIELD.findall(m.id))
        lost = set(code.findall(m.id)) - set(code.findall(m.string))
        if fields or lost:
            changed.append((m.id, sorted(fields), sorted(lost)))
    assert changed == []


def test_the_plot_labels_are_chinese_in_the_glossarys_terms():
    """Each translation is Chinese (or the label is data kept as it is: the example
    sentence's tokens, the device's name), and uses the glossary's term for each English
    term of its label."""
    kept = kept_in_english()
    english_left = [m.id for m in plot_messages() if not HAN.search(m.string)
                    and (m.string != m.id or len(english_words(m.id, kept)) != 1)]
    assert english_left == [], "a label left in English (a one-word datum may stay)"
    code = re.compile(r"\w+\([^()]*\)|\w+ ?[=!<>]= ?\w+")  # transpose(1, 2), mask == 0
    report = [f"{english!r} without {chinese!r} in {m.string!r}" for m in plot_messages()
              for english, chinese in missing_terms(code.sub(" ", m.id), m.string)]
    assert report == []


# --------------------------------------------------------------------------- extraction
def _flow_labels(*cells):
    flow = plot_labels.Flow(list(enumerate(cells)))
    return sorted(plot_labels.message(node) for node in flow.labels())


def test_the_extraction_follows_a_label_to_matplotlib_and_nothing_else():
    labels = _flow_labels(
        'names = {"no scaling": 1, "scaled": 2}\n'
        'for name in names:\n'
        '    ax.plot([1], label=name)\n'
        'titles = {False: "without W_O", True: "with W_O"}\n'
        'ax.set(title=titles[True], xlabel="key position", color="tab:blue")\n'
        'print("printed, not drawn")\n'
        'for name, row in [("row one", 1)]:\n'
        '    print(f"{name}: {row}")\n',
        'panels = [(w, f"head {i}") for i in range(2)]\n'
        'panels.append((w, "mean over heads"))\n'
        'for ax, (weights, title) in zip(axes, panels):\n'
        '    ax.set_title(title.replace(", ", ",\\n"))\n'
        'def draw(ax, caption, colour):\n'
        '    ax.set_title(caption)\n'
        '    ax.plot([0], color=colour)\n'
        'draw(ax, "drawn by a function", "tab:red")\n'
        'def role(p):\n'
        '    return "previous" if p else f"mixed {p:.2f}"\n'
        'roles = [role(p) for p in ps]\n'
        'fig.suptitle(f"Seed {seed}: {\', \'.join(roles)}")\n'
        'fig.colorbar(image, label="weight", location="bottom")\n')
    assert labels == ["Seed {seed}: {', '.join(roles)}", "drawn by a function", "head {i}",
                      "key position", "mean over heads", "mixed {p}", "no scaling",
                      "previous", "scaled", "weight", "with W_O"]   # titles[True] only


def test_labels_without_english_words_are_not_messages():
    assert not plot_labels.is_prose("(B, num_heads, L, head_dim)")
    assert not plot_labels.is_prose("$d_k$") and not plot_labels.is_prose("MFLOP")
    assert not plot_labels.is_prose("t{t} f{f}") and not plot_labels.is_prose("loss_prev + loss_first")
    assert plot_labels.is_prose("head {i}") and plot_labels.is_prose("the line $d_k$")


# --------------------------------------------------------------------------- translation
def test_a_label_is_translated_whole_by_pattern_or_item_by_item():
    labels = plot_language.Labels([
        ("key position", "键的位置", False),
        ("layer {n}, head {i}", "第 {n} 层，第 {i} 个头", True),
        ("Seed {seed}, heads:\n{', '.join(roles)}", "随机种子 {seed}，各个头：\n{', '.join(roles)}", True),
        ("previous", "前一个", False),
        ("mixed {p}/{f}", "混合 {p}/{f}", True),
        ("{h} head{'s' if h > 1 else ''}", "{h} 个头", True),
        ("untranslated", "", False)])
    assert labels.translate("key\nposition") == "键的位置"     # broken into lines after the fact
    assert labels.translate("layer 1, head 3") == "第 1 层，第 3 个头"
    assert labels.translate("Seed 0, heads:\nprevious, mixed 0.52/0.47, other") == \
        "随机种子 0，各个头：\n前一个、混合 0.52/0.47、other"
    assert labels.translate("2 heads") == "2 个头" and labels.translate("1 head") == "1 个头"
    assert labels.translate("untranslated") is None and labels.translate("0.25") is None
    assert labels.translate("layer 1") is None


NOTO_CJK = plot_language.FONT_FILE


@pytest.mark.skipif(not NOTO_CJK.exists(), reason=f"no {NOTO_CJK}: .ci/run installs fonts-noto-cjk")
def test_a_kernel_with_the_hook_draws_chinese_and_refuses_a_missing_glyph(tmp_path):
    """What a Chinese kernel's startup does (IPython directory of ipython_dir), in a fresh
    interpreter: the labels translated as they are set, the CJK face first where mathtext
    draws Chinese, each shown figure's labels recorded, and a character that no font draws
    the error of plt.show()."""
    folder = plot_language.ipython_dir(LANGUAGE, tmp_path / "ipython")
    startup = (folder / "profile_default" / "startup" / "00-plot-labels.py").read_text()
    script = startup + """
import matplotlib
matplotlib.use("agg")
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([0, 1], label="$q \\\\cdot k$, measured")
ax.set(title="layer 1, head 3", xlabel="key position")
legend = ax.legend()
shown = plt.show()
labels = plot_language.shown_labels(fig)
print(repr(sorted(l for l in labels if plot_language.ENGLISH_WORD.search(l[0]))))
print(repr(legend.get_texts()[0].get_fontfamily()))
ax.set_title("\\u0e01 no font draws this")
try:
    plt.show()
except Exception as error:
    print("refused:", type(error).__name__)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert ast.literal_eval(lines[0]) == [["$q \\cdot k$, measured", "$q \\cdot k$，实测"],
                                          ["key position", "键的位置"],
                                          ["layer 1, head 3", "第 1 层，第 3 个头"]]
    assert ast.literal_eval(lines[1])[0] == plot_language.CJK_FAMILY
    assert lines[2] == "refused: UserWarning"


def test_the_cjk_font_is_the_pinned_debian_package():
    """.ci/run installs fonts-noto-cjk at one version; the Chinese plots were laid out with it."""
    pin = re.search(r"^NOTO_CJK=fonts-noto-cjk=(\S+)$", (REPO / ".ci" / "run").read_text(), re.M)
    assert pin, ".ci/run pins no version of fonts-noto-cjk"
    installed = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "fonts-noto-cjk"],
                               capture_output=True, text=True)
    if installed.returncode != 0:
        pytest.skip("fonts-noto-cjk is not installed here (.ci/run installs it)")
    assert installed.stdout == pin.group(1)


# --------------------------------------------------------------------------- the built edition
def _executed(cache_path, edition="self-study"):
    """{chapter: the notebook as `cache_path` holds it executed} (the edition's keys)."""
    from jupyter_cache import get_cache

    import execute_chapters
    import yaml
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    cache = get_cache(str(REPO / cache_path))
    found = {}
    for path in execute_chapters.book_notebooks():
        if not path.stem[:2].isdigit():
            continue
        notebook = execute_chapters.editions_of(path, config["html"]["baseurl"])[edition]
        try:
            record = cache.match_cache_notebook(notebook)
        except KeyError:
            continue
        found[path.stem] = cache.get_cache_bundle(record.pk).nb
    return found


def _figures(notebook):
    """[the image output of each plot]: [(cell index, output)]."""
    return [(i, output) for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"
            for output in cell.get("outputs", [])
            if output.get("output_type") == "display_data" and "image/svg+xml" in output.get("data", {})]


@pytest.fixture(scope="module")
def chinese_plots():
    import yaml
    from course_language import language_cache
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    english = _executed(config["execute"]["cache"])
    chinese = _executed(language_cache(config, LANGUAGE))
    if not english or len(chinese) < len(english):
        pytest.skip("the Chinese notebooks are not executed: `make book-zh` executes them")
    return english, chinese


def test_every_chinese_plot_shows_its_catalogued_labels_in_chinese(chinese_plots):
    """The Chinese edition's cache has every plot the English one has, each with its labels
    recorded; every label the catalogue holds is shown as its translation; no plot is left
    without Chinese; and every character of a shown label has a glyph in the two fonts its
    family names (the maths aside, which mathtext draws in its own fonts)."""
    from matplotlib.ft2font import FT2Font
    english, chinese = chinese_plots
    labels = plot_language.Labels.read(LANGUAGE)
    charmaps = [FT2Font(str(NOTO_CJK)).get_charmap() if NOTO_CJK.exists() else {},
                FT2Font(str(Path(__import__("matplotlib").get_data_path()) / "fonts" / "ttf"
                            / "DejaVuSans.ttf")).get_charmap()]
    wrong, no_chinese, no_glyph, translated = [], [], [], 0
    for chapter, notebook in chinese.items():
        figures = _figures(notebook)
        assert len(figures) == len(_figures(english[chapter])), chapter
        for cell, output in figures:
            shown_labels = output["metadata"].get(plot_language.METADATA_KEY)
            assert shown_labels, f"{chapter} cell {cell}: a plot without its labels recorded"
            for original, shown in shown_labels:
                expected = labels.translate(original)
                if expected is not None:
                    translated += 1
                    if shown != expected:
                        wrong.append((chapter, cell, original, shown))
                for character in set(plot_language.MATHS.sub("", shown)) - set(" \n"):
                    if not any(ord(character) in charmap for charmap in charmaps):
                        no_glyph.append((chapter, cell, character, shown))
            if not any(HAN.search(shown) for _, shown in shown_labels):
                no_chinese.append((chapter, cell))
    assert translated > 100
    assert wrong == [] and no_chinese == [] and no_glyph == []


def test_the_chinese_pages_show_the_chinese_plots(chinese_plots):
    """Each Chinese chapter page's plot images are the Chinese cache's: Chinese text in SVG."""
    site = REPO / "_build" / "zh_CN" / "_build" / "html"
    if not (site / "index.html").exists():
        pytest.skip("the Chinese edition is not built: `make book-zh`")
    _, chinese = chinese_plots
    for chapter, notebook in chinese.items():
        page = (site / "chapters" / f"{chapter}.html").read_text(encoding="utf-8")
        images = [site / "chapters" / src for src in re.findall(r'<img [^>]*src="([^"]+\.svg)"', page)
                  if "_images/" in src]
        plotted = [p for p in images if "<text" in p.read_text(encoding="utf-8")
                   and 'id="figure_1"' in p.read_text(encoding="utf-8")]
        assert len(plotted) == len(_figures(notebook)), chapter
        assert all(HAN.search(p.read_text(encoding="utf-8")) for p in plotted), chapter
