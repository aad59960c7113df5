"""The diagrams are generated files: chapters/figures/make_diagrams.py, run again, writes
exactly the SVG files committed beside it, in English and in Chinese (its labels from
locales/zh_CN/LC_MESSAGES/figures.po), and every English one is shown by a chapter (the
Chinese edition shows the .zh_CN.svg in its place: Sphinx's figure_language_filename).
The Chinese diagrams are wholly translated, in the glossary's terms, with a CJK font, and
every line fits the width."""
import json
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.test_glossary import glossary, missing_terms
from tests.translations import FIGURES_CATALOGUE, MESSAGES, read_catalogue

FIGURES = Path(__file__).resolve().parent.parent / "chapters" / "figures"
sys.path.insert(0, str(FIGURES))
import make_diagrams  # noqa: E402  (chapters/figures/ is no package)

LANGUAGE = "zh_CN"
SVG = "{http://www.w3.org/2000/svg}"


def english_diagrams():
    return sorted(p for p in FIGURES.glob("*.svg") if p.suffixes == [".svg"])


def translated_diagrams():
    return sorted(FIGURES.glob(f"*.{LANGUAGE}.svg"))


def test_the_committed_diagrams_are_what_the_script_draws(tmp_path):
    subprocess.run([sys.executable, str(FIGURES / "make_diagrams.py"), str(tmp_path)], check=True)
    drawn = {p.name: p.read_text() for p in tmp_path.glob("*.svg")}
    committed = {p.name: p.read_text() for p in FIGURES.glob("*.svg")}
    assert sorted(drawn) == sorted(committed)
    assert len(translated_diagrams()) == len(english_diagrams()) == len(make_diagrams.DIAGRAMS)
    stale = [name for name in drawn if drawn[name] != committed[name]]
    assert not stale, f"run python chapters/figures/make_diagrams.py: {stale} differ"


def test_every_diagram_is_shown_by_a_chapter_with_a_description():
    shown = {}
    for notebook in sorted(FIGURES.parent.glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            text = "".join(cell["source"]) if cell["cell_type"] == "markdown" else ""
            for svg in english_diagrams():
                marker = f"](figures/{svg.name})"
                if marker in text:
                    alt = text.split(marker)[0].rpartition("![")[2]
                    shown[svg.name] = len(alt.split())
    assert sorted(shown) == sorted(p.name for p in english_diagrams())
    assert all(words >= 30 for words in shown.values()), shown  # a description, not a title


def texts(svg):
    """[(text, x, anchor, font-size, style)] of each <text> of the SVG file `svg`."""
    found = []
    for element in ElementTree.parse(svg).getroot().iter(f"{SVG}text"):
        style = element.get("style")
        size = float(re.search(r"font-size: ([\d.]+)px", style).group(1))
        found.append((element.text, float(element.get("x")), element.get("text-anchor", "start"),
                      size, style))
    return found


def figure_messages():
    return [m for m in read_catalogue(MESSAGES / f"{FIGURES_CATALOGUE}.po") if m.id]


# What a Chinese label may keep in Latin letters: code and shapes (an identifier with an
# underscore, a digit or a capital, a call, an attribute, a keyword argument, a negation, a
# single letter: q_proj, kv0, RMSNorm, view(...), cache.append, dim=2, ~mask, (B, h, L, hd)),
# the terms the glossary keeps in English (softmax, dropout, logits), and the few bare code
# words the labels name as code: PyTorch's view and reshape, -inf, rotary's base, the cache
# of len(cache).
CODE_WORDS = {"view", "reshape", "inf", "base", "cache"}
LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z_0-9]*")


def english_words(label, kept):
    """The words of `label` that are English prose: neither code nor a term kept in English."""
    words = []
    for match in LATIN_WORD.finditer(label):
        word = match.group()
        code = (len(word) == 1 or "_" in word or any(c.isdigit() or c.isupper() for c in word)
                or label[match.end():match.end() + 1] in ("(", ".", "=")
                or label[match.start() - 1:match.start()] in ("~", ".")
                or word.lower() in kept or word in CODE_WORDS)
        if not code:
            words.append(word)
    return words


def kept_in_english():
    return {english.lower() for english, _, note in glossary() if "kept in English" in note}


def test_english_words_are_found_and_code_is_not():
    kept = kept_in_english()
    assert {"softmax", "dropout", "logits"} <= kept
    assert english_words("split_heads：先 view 成 (B, L, h, head_dim)", kept) == []
    assert english_words("softmax, RMSNorm(d_model), kv0, x_i, norm1(x)", kept) == []
    assert english_words("the heads' outputs", kept) == ["the", "heads", "outputs"]
    assert english_words("输出 of 头", kept) == ["of"]


def test_every_chinese_label_is_translated():
    """No English prose in a Chinese diagram: each catalogue message translated (not empty,
    fuzzy or obsolete), and no text of a .zh_CN.svg holds an English word."""
    from tests.test_translations import untranslated
    catalogue = read_catalogue(MESSAGES / f"{FIGURES_CATALOGUE}.po")
    assert untranslated(catalogue) == []
    kept = kept_in_english()
    english = [(svg.name, text) for svg in translated_diagrams()
               for text, *_ in texts(svg) if english_words(text, kept)]
    assert english == [], "labels left in English: mark them _(\"...\") and translate them"


def test_the_figure_catalogue_is_current():
    """figures.po holds exactly the messages make_diagrams.py marks, as Babel's Python
    extractor (`make locales`) finds them: a changed English label fails until it is merged
    and translated again."""
    from babel.messages.extract import extract_from_file

    from tests.test_translations import stale
    marked = {message for _, message, _, _ in
              extract_from_file("python", FIGURES / "make_diagrams.py", keywords={"_": None})}
    assert len(marked) > 80
    catalogue = read_catalogue(MESSAGES / f"{FIGURES_CATALOGUE}.po")
    assert stale(catalogue, marked) == ([], []), "run `make locales`, then translate"


def test_the_figure_labels_use_the_glossarys_terms():
    report = [f"{english!r} without {chinese!r} in {m.string!r}" for m in figure_messages()
              for english, chinese in missing_terms(m.id, m.string)]
    assert report == []


def test_the_chinese_labels_keep_code_and_shapes():
    """Each parenthesised shape and each identifier of an English label is in its
    translation as it is."""
    code = re.compile(r"\([^()（）\s]*(?:, [^()（）\s]*)+\)|[A-Za-z_]*_[A-Za-z_0-9]*")
    changed = [(m.id, sorted(set(code.findall(m.id)) - set(code.findall(m.string))))
               for m in figure_messages()]
    assert [c for c in changed if c[1]] == []


@pytest.mark.parametrize("svg", [p.name for p in english_diagrams() + translated_diagrams()])
def test_every_line_fits_the_width_and_is_large_enough(svg):
    """Each text inside the width (less 12 units each side), by the script's own measure: DejaVu's
    advances for Latin characters, one em for each CJK one; none under 13 units; a Chinese
    diagram's fonts end with the CJK family that .ci/run installs, so no label is tofu."""
    outside, small = [], []
    for text, x, anchor, size, style in texts(FIGURES / svg):
        width = make_diagrams.text_width(text, size, "Mono" in style, "bold" in style)
        left, right = make_diagrams.extent(x, anchor, width)
        if left < make_diagrams.MARGIN - 0.5 or right > make_diagrams.W - make_diagrams.MARGIN + 0.5:
            outside.append(f"{text!r}: {left:.0f}..{right:.0f}")
        if size < 13:
            small.append(text)
        if LANGUAGE in svg:
            assert re.search(r"font-family: [^;]*'DejaVu Sans[^;]*'Noto Sans CJK SC'", style), style
    assert outside == [] and small == []


def test_the_width_measure_counts_chinese_as_wide():
    latin, chinese = make_diagrams.text_width("mask", 13), make_diagrams.text_width("掩码", 13)
    assert chinese == 26 and 25 < latin < 36       # DejaVu Sans: m a s k, about 0.66 em each
    assert make_diagrams.text_width("(B, h)", 13, mono=True) == pytest.approx(6 * 13 * 0.602, 0.01)
    with pytest.raises(ValueError, match="break it into lines"):
        make_diagrams.Diagram(cjk=True).arrow("因果掩码" * 7)


NOTO_CJK = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")  # fonts-noto-cjk, .ci/run


def test_every_character_has_a_glyph_of_the_width_measured():
    """No tofu: each character of an English diagram is in its DejaVu face; each of a Chinese
    one is there or in Noto Sans CJK, whose glyphs for them are one em wide, as text_width
    counts them."""
    if not NOTO_CJK.exists():
        pytest.skip(f"no {NOTO_CJK}: install Debian's fonts-noto-cjk (.ci/run does)")
    from matplotlib.ft2font import FT2Font, LoadFlags
    cjk = FT2Font(str(NOTO_CJK))
    cjk_glyphs = cjk.get_charmap()
    missing, not_one_em = [], set()
    for svg in english_diagrams() + translated_diagrams():
        for text, _, _, _, style in texts(svg):
            _, glyphs = make_diagrams._face("Mono" in style, "bold" in style)
            for character in {c for c in text if ord(c) not in glyphs}:
                if LANGUAGE not in svg.name or ord(character) not in cjk_glyphs:
                    missing.append((svg.name, character, text))
                elif make_diagrams._advance(character, False, False) * cjk.units_per_EM != (
                        cjk.load_glyph(cjk_glyphs[ord(character)], flags=LoadFlags.NO_SCALE).horiAdvance):
                    not_one_em.add(character)
    assert missing == [] and not_one_em == set()
