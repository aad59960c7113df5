"""The plots of an edition in another language, drawn in the kernel that executes its
notebooks (issue 24): the notebooks' code is the same in every edition (the pages show it),
so their matplotlib labels are translated while they are drawn. The catalogue is
locales/<language>/LC_MESSAGES/plots.po, whose messages _ext/plot_labels.py extracts from
the notebooks' code (an f-string's flagged `python-brace-format`: a pattern, its fields
written as in the code, `layer {n}, head {i}`).

The edition's execution (`_ext/execute_chapters.py --language zh_CN`) starts each kernel
with IPYTHONDIR=ipython_dir(language): its startup file calls `install(language)`, which
makes every matplotlib Text translate its string through the catalogue when it is set
(before any layout is measured), adds the CJK font that .ci/run installs (Debian's
fonts-noto-cjk, version pinned there, loaded by its path: FONT_FILE) after DejaVu Sans,
turns a missing glyph into the cell's error, and writes each figure's labels, English and
shown, into its output's metadata (METADATA_KEY), where tests/test_plot_labels.py reads
them. A string is looked up whitespace-insensitively (a notebook may break a label into
lines after the fact: title.replace(", ", ",\\n")); a pattern matches any string that its
fields could fill, and each field's value is itself translated when the catalogue has it
(whole, or item by item when it is a list joined with ", ").

What draws the plots is this module and the catalogue: execute_chapters.py empties the
edition's cache when either changes.
"""
import functools
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOCALES = REPO / "locales"
CATALOGUE = "plots"  # locales/<language>/LC_MESSAGES/plots.po
BRACE_FORMAT = "python-brace-format"
# Debian's fonts-noto-cjk (version pinned in .ci/run): its Simplified Chinese face
FONT_FILE = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")
CJK_FAMILY = "Noto Sans CJK SC"
LATIN_FAMILY = "DejaVu Sans"  # matplotlib's own, the English figures' font
# where a figure's labels are recorded: its display output's metadata
METADATA_KEY = "course_plot_labels"
# an English word of a label: letters, not part of an identifier (head_dim, W_O, RMSNorm, kv0)
# and not all capitals (MFLOP, MATH)
ENGLISH_WORD = re.compile(r"(?<![\w.])[A-Za-z][a-z]+(?:'[a-z]+)?(?![\w(])")
MATHS = re.compile(r"\$[^$]*\$")
FIELD = re.compile(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}")


def _spaced(text):
    return " ".join(text.split())


class Labels:
    """A language's plot labels: {English: translation} from its catalogue, the f-string
    messages as patterns."""

    def __init__(self, entries):
        """entries: [(English message, translation, is an f-string's)]."""
        self.exact, self.patterns = {}, []
        for english, translated, formatted in entries:
            if not translated:
                continue
            if formatted:
                fields = FIELD.findall(english)
                pieces = FIELD.split(english)
                pattern = "(.*?)".join(
                    re.escape(re.sub(r"\s+", " ", piece.replace("{{", "{").replace("}}", "}")))
                    .replace(r"\ ", r"\s+") for piece in pieces)
                self.patterns.append((re.compile(pattern, re.S), fields, translated))
            else:
                self.exact[_spaced(english)] = translated

    @classmethod
    def read(cls, language):
        from babel.messages.pofile import read_po
        path = LOCALES / language / "LC_MESSAGES" / f"{CATALOGUE}.po"
        with open(path, "rb") as file:
            catalogue = read_po(file)
        return cls([(m.id, m.string, BRACE_FORMAT in m.flags) for m in catalogue
                    if m.id and not m.fuzzy])

    @functools.lru_cache(maxsize=4096)
    def translate(self, text):
        """`text` in the catalogue's language, or None when the catalogue does not hold it."""
        if not ENGLISH_WORD.search(text):
            return None
        spaced = _spaced(text)
        if spaced in self.exact:
            return self.exact[spaced]
        for pattern, fields, translated in self.patterns:
            match = pattern.fullmatch(spaced)
            if match:
                for field, value in zip(fields, match.groups()):
                    translated = translated.replace(field, self.translate_value(value))
                return translated
        return None

    def translate_value(self, value):
        """A field's value, translated whole, or item by item (a list joined with ", ")."""
        whole = self.translate(value)
        if whole is not None:
            return whole
        items = value.split(", ")
        if len(items) > 1:
            return "、".join(self.translate(item) or item for item in items)
        return value


CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")


def install(language, labels=None):
    """Plots drawn in `language` from now on, in this process (a kernel's startup file calls
    it): every Text's string translated when it is set, the CJK font after DejaVu Sans,
    a missing glyph an error, each shown figure's labels in its output metadata."""
    import logging
    import warnings

    import matplotlib
    from matplotlib import font_manager
    from matplotlib.text import Text

    labels = labels or Labels.read(language)
    if not FONT_FILE.exists():
        raise FileNotFoundError(f"{FONT_FILE}: install Debian's fonts-noto-cjk (.ci/run does)")
    font_manager.fontManager.addfont(str(FONT_FILE))   # by its path: no font search
    matplotlib.rcParams["font.family"] = [LATIN_FAMILY, CJK_FAMILY]
    set_text, init = Text.set_text, Text.__init__

    def cjk_first(text):
        # mathtext draws the text around the maths in the first font of the family list,
        # with no fallback: there, the CJK face first (it has Latin letters too)
        shown = text.get_text()
        if MATHS.search(shown) and CJK.search(shown):
            text.set_fontfamily([CJK_FAMILY, LATIN_FAMILY])

    def translated_set_text(self, text):
        set_text(self, text)
        english = self.get_text()
        shown = labels.translate(english)
        self._course_english = english
        if shown is not None:
            set_text(self, shown)
        if hasattr(self, "_fontproperties"):  # (Text.__init__ sets the text first)
            cjk_first(self)

    def init_then_font(self, *args, **kwargs):
        init(self, *args, **kwargs)
        cjk_first(self)
    Text.set_text, Text.__init__ = translated_set_text, init_then_font

    class MissingGlyph(logging.Filter):
        def filter(self, record):
            if "does not have a glyph" in record.getMessage():
                raise ValueError(f"a plot label has a character no font draws: {record.getMessage()}")
            return True
    logging.getLogger("matplotlib.mathtext").addFilter(MissingGlyph())
    warnings.filterwarnings("error", message=r"Glyph \d+ .*missing from font")
    _drawn_before_shown()
    _record_labels()


def _drawn_before_shown():
    """plt.show() draws each figure first, so that a missing glyph is the cell's error (the
    inline display's own drawing would print the error and go on)."""
    from matplotlib import pyplot
    from matplotlib._pylab_helpers import Gcf
    show = pyplot.show

    def drawn_then_shown(*args, **kwargs):
        for manager in Gcf.get_all_fig_managers():
            manager.canvas.draw()
        return show(*args, **kwargs)
    pyplot.show = drawn_then_shown


def shown_labels(figure):
    """[[English, shown]] of every visible, non-empty text of `figure`."""
    from matplotlib.text import Text
    return [[getattr(t, "_course_english", t.get_text()), t.get_text()]
            for t in figure.findobj(Text) if t.get_visible() and t.get_text().strip()]


def _record_labels():
    """Each figure shown inline carries its labels in its output's metadata."""
    try:
        from matplotlib_inline import backend_inline
    except ImportError:
        return
    fetch = backend_inline._fetch_figure_metadata

    def with_labels(figure):
        metadata = dict(fetch(figure) or {})
        metadata[METADATA_KEY] = shown_labels(figure)
        return metadata
    backend_inline._fetch_figure_metadata = with_labels


STARTUP = """\
# written by _ext/plot_language.py: the plots and the printed output of this kernel in {language}
import sys
sys.path.insert(0, {folder!r})
import plot_language
import print_language
plot_language.install({language!r})
print_language.install({language!r})
"""


def ipython_dir(language, folder):
    """An IPython directory whose kernels start with install(language) and
    print_language.install(language) (_ext/print_language.py: what the code prints):
    `folder`, written."""
    startup = Path(folder) / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-plot-labels.py").write_text(
        STARTUP.format(language=language, folder=str(Path(__file__).resolve().parent)),
        encoding="utf-8")
    return Path(folder)
