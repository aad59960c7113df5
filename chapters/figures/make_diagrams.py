"""Writes the course's diagrams beside this file, as SVG drawn for the book's column and a
phone's screen (380 units wide, no text under 13 units), each in English (<name>.svg) and in
every language of LANGUAGES (<name>.zh_CN.svg: Sphinx's figure_language_filename shows it on
that edition's pages in place of the English one):

- attention_shapes.svg (chapter 1): scaled dot-product attention, step by step;
- split_shapes.svg (chapter 2): the path of the features through split_heads and back;
- mha_shapes.svg (chapter 3): multi-head attention with the shape of every tensor;
- mask_shapes.svg (chapter 4): how a padding mask and a causal mask broadcast to the scores;
- encoder_decoder.svg (chapter 4): where self-, masked and cross-attention sit, with their masks;
- tiny_model.svg (chapter 5): the path of the tokens through chapter 5's model;
- grouped_heads.svg (chapter 6): which key/value head each query head reads, and repeat_kv;
- kv_cache.svg (chapter 6): one decoding step with a cache, and its bottom-right mask;
- rotary.svg (chapter 7): how rotary position embedding turns each pair of a head's features;
- pre_ln_block.svg (chapter 8): the pre-norm decoder block (RMSNorm, rotary GQA, SwiGLU).

Every label is a gettext message, marked `_("...")` (a label of several lines is one message,
its lines separated by "\n", so that a translation breaks its lines where its own language
does); shapes and code are not marked and stay as they are. `make locales` extracts the
messages (pybabel extract) and merges them into locales/<language>/LC_MESSAGES/figures.po,
which this script reads (babel's read_po: no compiled catalogue).

Generated files; edit this script (or the catalogue) and run it:
    python chapters/figures/make_diagrams.py [OUT_DIR]      (OUT_DIR: this folder by default)
"""
import math
import sys
import unicodedata
from functools import lru_cache
from pathlib import Path
from xml.sax.saxutils import escape

import matplotlib
from babel.messages.pofile import read_po
from matplotlib.ft2font import FT2Font, LoadFlags

HERE = Path(__file__).resolve().parent
LOCALES = HERE.parent.parent / "locales"
LANGUAGES = ["zh_CN"]
W = 380
MARGIN = 12                                       # the least room between a text and the edge
LATIN_SANS = "'DejaVu Sans', Verdana, Arial"
LATIN_MONO = "'DejaVu Sans Mono', Menlo, Consolas"
# the font .ci/run installs (fonts-noto-cjk), after the Latin ones: Chinese glyphs come from it
CJK = "'Noto Sans CJK SC'"


def translations(language):
    """gettext for `language`: each label's translation from figures.po, the English where
    the catalogue has none (or only a fuzzy one), as gettext itself falls back."""
    path = LOCALES / language / "LC_MESSAGES" / "figures.po"
    with open(path, "rb") as file:
        catalogue = read_po(file)
    translated = {m.id: m.string for m in catalogue if m.id and m.string and not m.fuzzy}
    return lambda message: translated.get(message, message)


@lru_cache(maxsize=None)
def _face(mono, bold):
    """The DejaVu face the SVG names first (matplotlib ships it) and its {code point: glyph}."""
    name = "DejaVuSansMono" if mono else "DejaVuSans-Bold" if bold else "DejaVuSans"
    font = FT2Font(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / f"{name}.ttf"))
    return font, font.get_charmap()


@lru_cache(maxsize=None)
def _advance(character, mono, bold):
    """The advance of `character` in em: one em for a wide (CJK) character (Noto Sans CJK's
    ideographs and full-width punctuation are one em wide; DejaVu has none of them), else
    its advance in the DejaVu face (one em where the face lacks it)."""
    if unicodedata.east_asian_width(character) in "WF":
        return 1.0
    font, glyphs = _face(mono, bold)
    if ord(character) not in glyphs:
        return 1.0
    return font.load_glyph(glyphs[ord(character)], flags=LoadFlags.NO_SCALE).horiAdvance / font.units_per_EM


def text_width(text, size, mono=False, bold=False):
    """The width of `text` drawn at font-size `size`, character by character (no kerning)."""
    return size * sum(_advance(c, mono, bold) for c in text)


def extent(x, anchor, width):
    """(left, right) of a text of `width` placed at `x` with text-anchor `anchor`."""
    left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    return left, left + width


class Diagram:
    """Boxes across the width, joined by downward arrows with the operation beside them.
    `cjk`: the font lists end with a CJK family (the translated diagrams)."""

    def __init__(self, cjk=False):
        self.parts, self.y = [], 8
        extra = f", {CJK}" if cjk else ""
        self.sans = f"font-family: {LATIN_SANS}{extra}, sans-serif"
        self.mono = f"font-family: {LATIN_MONO}{extra}, monospace"

    @staticmethod
    def _fits(text, x, anchor, size, mono=False, bold=False, within=(MARGIN, W - MARGIN)):
        """Raises if `text` would reach outside `within` (the width less the margins, or its
        own cell): a translation too long for a line is broken into more lines in the
        catalogue, never drawn off the edge."""
        left, right = extent(float(x), anchor, text_width(text, size, mono, bold))
        if left < within[0] - 0.5 or right > within[1] + 0.5:
            raise ValueError(f"{text!r} spans {left:.0f}..{right:.0f}, outside "
                             f"{within[0]:.0f}..{within[1]:.0f}: break it into lines")

    def box(self, lines, fill):
        """lines: (text, kind), kind 'title' (bold) or 'shape' (monospace)."""
        height = 14 + 19 * len(lines)
        self.parts.append(f'<rect x="10" y="{self.y}" width="{W - 20}" height="{height}" rx="8" '
                          f'fill="{fill}" stroke="#4a5568" stroke-width="1.2"/>')
        for n, (text, kind) in enumerate(lines):
            title = kind == "title"
            self._fits(text, W / 2, "middle", 14 if title else 13, mono=not title, bold=title)
            style = (f"{self.sans}; font-size: 14px; font-weight: bold" if title
                     else f"{self.mono}; font-size: 13px")
            self.parts.append(f'<text x="{W / 2}" y="{self.y + 24 + 19 * n}" text-anchor="middle" '
                              f'style="{style}; fill: #1a202c">{escape(text)}</text>')
        self.y += height

    def arrow(self, text):
        """text: the operation, its lines separated by newlines."""
        lines = text.split("\n")
        height = 12 + 18 * len(lines)
        self.parts.append(f'<line x1="40" y1="{self.y + 2}" x2="40" y2="{self.y + height - 4}" '
                          f'stroke="#2b6cb0" stroke-width="2.2" marker-end="url(#head)"/>')
        for n, line in enumerate(lines):
            self._fits(line, 58, "start", 13)
            self.parts.append(f'<text x="58" y="{self.y + 20 + 18 * n}" style="{self.sans}; '
                              f'font-size: 13px; fill: #2b6cb0">{escape(line)}</text>')
        self.y += height + 4

    def strip(self, labels, fills):
        """A row of equal segments across the width: how one token's features are cut."""
        width = (W - 20) / len(labels)
        for n, (text, fill) in enumerate(zip(labels, fills)):
            self._fits(text, 10 + (n + 0.5) * width, "middle", 13, mono=True,
                       within=(12 + n * width, 8 + (n + 1) * width))
            self.parts.append(f'<rect x="{10 + n * width:.1f}" y="{self.y + 4}" width="{width:.1f}" '
                              f'height="26" fill="{fill}" stroke="#4a5568" stroke-width="1"/>')
            self.parts.append(f'<text x="{10 + (n + 0.5) * width:.1f}" y="{self.y + 22}" '
                              f'text-anchor="middle" style="{self.mono}; font-size: 13px; '
                              f'fill: #1a202c">{escape(text)}</text>')
        self.y += 34

    def note(self, text):
        """A dashed box in red: a trap beside the right path. text: its lines separated by
        newlines."""
        lines = text.split("\n")
        height = 12 + 18 * len(lines)
        self.y += 6
        self.parts.append(f'<rect x="10" y="{self.y}" width="{W - 20}" height="{height}" rx="8" '
                          'fill="#fff5f5" stroke="#c53030" stroke-width="1.2" '
                          'stroke-dasharray="5 3"/>')
        for n, line in enumerate(lines):
            self._fits(line, 22, "start", 13, within=(22, W - MARGIN))
            self.parts.append(f'<text x="22" y="{self.y + 21 + 18 * n}" style="{self.sans}; '
                              f'font-size: 13px; fill: #9b2c2c">{escape(line)}</text>')
        self.y += height

    def _table(self, rows, columns, largest, row_labels, column_labels, caption, draw):
        """A table of rows x columns square cells of at most `largest` units: the columns
        named above, each row named at its left, draw(row, column, x, y, size) drawing the
        cell whose top-left corner is (x, y), then `caption` (its lines separated by
        newlines) under it."""
        cell = min(largest, (W - 110) / columns)
        left = W - 20 - cell * columns
        for column in range(columns):
            label = str(column_labels[column])
            self._fits(label, left + (column + 0.5) * cell, "middle", 13, mono=True,
                       within=(left + column * cell, left + (column + 1) * cell))
            self.parts.append(f'<text x="{left + (column + 0.5) * cell:.1f}" y="{self.y + 16}" '
                              f'text-anchor="middle" style="{self.mono}; font-size: 13px; '
                              f'fill: #4a5568">{escape(label)}</text>')
        top = self.y + 24
        for row in range(rows):
            y = top + row * cell
            self._fits(row_labels[row], left - 8, "end", 13, mono=True)
            self.parts.append(f'<text x="{left - 8:.1f}" y="{y + cell / 2 + 5:.1f}" '
                              f'text-anchor="end" style="{self.mono}; font-size: 13px; '
                              f'fill: #1a202c">{escape(row_labels[row])}</text>')
            for column in range(columns):
                draw(row, column, left + column * cell, y, cell)
        self.y = top + rows * cell + 4
        lines = caption.split("\n")
        for n, line in enumerate(lines):
            self._fits(line, W / 2, "middle", 13)
            self.parts.append(f'<text x="{W / 2}" y="{self.y + 16 + 18 * n}" text-anchor="middle" '
                              f'style="{self.sans}; font-size: 13px; fill: #1a202c">{escape(line)}</text>')
        self.y += 6 + 18 * len(lines)

    def grid(self, rows, columns, allowed, row_labels, caption):
        """A mask as a grid of cells, one row per query and one column per key: green where
        allowed(row, column), grey where not; each row named at its left, the keys numbered
        above, `caption` (its lines separated by newlines) under it."""
        def square(row, column, x, y, size):
            fill = "#b5e48c" if allowed(row, column) else "#edf2f7"
            self.parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{size:.1f}" '
                              f'height="{size:.1f}" fill="{fill}" stroke="#4a5568" '
                              'stroke-width="1"/>')
        self._table(rows, columns, 26, row_labels, range(columns), caption, square)

    def dials(self, rows, columns, angle, row_labels, column_labels, fills, caption):
        """A grid of dials, one row per feature pair and one column per position: each a
        circle (of its row's colour, fills) with a hand turned counter-clockwise from 3
        o'clock by angle(row, column) radians (the pair's point on its circle); `caption`
        (its lines separated by newlines) under it."""
        def dial(row, column, x, y, size):
            cx, cy, radius, turn = x + size / 2, y + size / 2, size * 0.38, angle(row, column)
            hand_x, hand_y = cx + radius * math.cos(turn), cy - radius * math.sin(turn)
            self.parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{radius:.1f}" '
                              f'fill="{fills[row]}" stroke="#4a5568" stroke-width="1"/>')
            self.parts.append(f'<line x1="{cx:.1f}" y1="{cy:.1f}" x2="{hand_x:.1f}" '
                              f'y2="{hand_y:.1f}" stroke="#2b6cb0" stroke-width="2.2"/>')
        self._table(rows, columns, 48, row_labels, column_labels, caption, dial)

    def write(self, path):
        h = self.y + 8
        svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" '
               f'viewBox="0 0 {W} {h}" role="img">\n'
               '<defs><marker id="head" markerWidth="10" markerHeight="10" refX="8" refY="5" '
               'orient="auto" markerUnits="userSpaceOnUse"><path d="M0,0 L10,5 L0,10 z" '
               'fill="#2b6cb0"/></marker></defs>\n'
               '<rect width="100%" height="100%" fill="#ffffff"/>\n'
               + "\n".join(self.parts) + "\n</svg>\n")
        path.write_text(svg, encoding="utf-8")


# Each diagram: a function that draws it on the Diagram `d`, its labels through `_`, the
# gettext of one language (the identity for English).

def mha_shapes(d, _):
    d.box([(_("inputs"), "title"), (_("query  (B, Lq, query_size)"), "shape"),
           (_("key    (B, Lk, key_size)"), "shape"), (_("value  (B, Lk, value_size)"), "shape")],
          "#edf2f7")
    d.arrow(_("q_proj, k_proj, v_proj: W_Q, W_K, W_V\n(one nn.Linear each)"))
    d.box([(_("projected"), "title"), ("Q  (B, Lq, d_model)", "shape"),
           ("K, V  (B, Lk, d_model)", "shape")], "#ebf8ff")
    d.arrow(_("split_heads: view to (B, L, h, head_dim),\nthen transpose(1, 2)"))
    d.box([(_("h heads, head i = features"), "title"), ("[i·head_dim, (i+1)·head_dim)", "shape"),
           ("Q  (B, h, Lq, head_dim)", "shape"), ("K, V  (B, h, Lk, head_dim)", "shape")],
          "#fefcbf")
    d.arrow(_("scores Q Kᵀ / √head_dim: (B, h, Lq, Lk)\nsoftmax over the keys (dropout: training)\n"
              "each head on its own, batched"))
    d.box([(_("weights and head outputs"), "title"), (_("weights  (B, h, Lq, Lk)"), "shape"),
           (_("weights @ V  (B, h, Lq, head_dim)"), "shape")], "#fefcbf")
    d.arrow("merge_heads: transpose(1, 2), reshape\n= Concat(head_0, …, head_h−1)")
    d.box([(_("concatenated"), "title"), ("(B, Lq, h · head_dim) = (B, Lq, d_model)", "shape")],
          "#ebf8ff")
    d.arrow(_("out_proj: W_O, where the heads mix"))
    d.box([(_("output"), "title"), ("(B, Lq, d_model)", "shape")], "#e6fffa")


def mask_shapes(d, _):
    d.box([(_("padding mask, True = may attend"), "title"), ("(B, 1, 1, Lk)", "shape"),
           (_("one row of keys per sequence"), "title")], "#ebf8ff")
    d.arrow(_("& causal_mask(Lq, Lk), read as (1, 1, Lq, Lk):\nbroadcasting aligns from the right"))
    d.box([(_("combined mask"), "title"), ("(B, 1, Lq, Lk)", "shape")], "#ebf8ff")
    d.arrow(_("broadcasts over the heads"))
    d.box([(_("scores, masked"), "title"), ("(B, h, Lq, Lk)", "shape"),
           ("masked_fill(~mask, -inf)", "shape")], "#fefcbf")
    d.arrow(_("softmax over Lk: a masked key gets 0;\na row with no key allowed: zeros, no NaN"))
    d.box([(_("weights"), "title"), ("(B, h, Lq, Lk)", "shape")], "#e6fffa")
    d.note(_("The trap: a (B, Lk) mask is read as (1, 1, B, Lk).\n"
             "When Lq == B it runs without an error, and row b\n"
             "masks query b of every sequence instead of all\n"
             "the queries of sequence b."))


def encoder_decoder(d, _):
    d.box([(_("source tokens (encoder input)"), "title"), ("(B, Ls, d_model)", "shape")],
          "#edf2f7")
    d.arrow(_("encoder self-attention: Q, K, V from the source\n"
              "mask: source padding (B, 1, 1, Ls)"))
    d.box([(_("memory = encoder output"), "title"), ("(B, Ls, d_model)", "shape")], "#ebf8ff")
    d.y += 14                                     # two inputs: the memory waits for the decoder
    d.box([(_("target tokens so far (decoder input)"), "title"), ("(B, Lt, d_model)", "shape")],
          "#edf2f7")
    d.arrow(_("decoder masked self-attention: Q, K, V from\nthe target; mask: target padding\n"
              "& causal (Lt, Lt) → (B, 1, Lt, Lt)"))
    d.box([(_("decoder states"), "title"), ("(B, Lt, d_model)", "shape")], "#fefcbf")
    d.arrow(_("decoder cross-attention: Q from the decoder,\nK and V from the memory;\n"
              "mask: source padding (B, 1, 1, Ls), no causal"))
    d.box([(_("scores (B, h, Lt, Ls); output"), "title"), ("(B, Lt, d_model)", "shape")],
          "#e6fffa")
    d.note(_("Cross-attention needs no causal mask: the source\n"
             "is known whole. A decoder-only model (GPT,\n"
             "chapter 8) keeps only the masked self-attention."))


HEAD_COLOURS = ["#8ecae6", "#ffb703", "#ffffff", "#b5e48c"]  # chapter 2's grid: heads 0, 1, 2


def split_shapes(d, _):
    d.box([(_("tokens x"), "title"), ("(B, L, d_model)", "shape"),
           (_("one token's d_model features:"), "title")], "#edf2f7")
    d.strip([_("head {i}").format(i=i) for i in ("0", "1")] + ["…", _("head {i}").format(i="h−1")],
            HEAD_COLOURS)
    d.arrow(_("view: split the last axis in two;\nno number moves"))
    d.box([(_("each token's features in groups"), "title"),
           ("(B, L, num_heads, head_dim)", "shape")], "#ebf8ff")
    d.arrow(_("transpose(1, 2): the head axis\ngoes in front of the positions"))
    d.box([(_("one sequence per head"), "title"), ("(B, num_heads, L, head_dim)", "shape"),
           (_("head i holds features"), "title"), ("[i·head_dim, (i+1)·head_dim)", "shape")],
          "#fefcbf")
    d.arrow(_("chapter 1's attention in every head,\n(B, num_heads) as batch axes"))
    d.box([(_("the heads' outputs"), "title"), ("(B, num_heads, L, head_dim)", "shape")],
          "#fefcbf")
    d.arrow(_("merge_heads (exercise 2): back to tokens,\nthe heads' features side by side"))
    d.box([(_("tokens again"), "title"), ("(B, L, num_heads · head_dim)", "shape"),
           ("= (B, L, d_model)", "shape")], "#e6fffa")
    d.note(_("The trap: reshape(B, num_heads, L, head_dim)\n"
             "straight from (B, L, d_model) gives the same\n"
             "shape, no error, and heads made of pieces\n"
             "of several tokens."))


def attention_shapes(d, _):
    d.box([(_("query Q and key K"), "title"), ("Q  (..., Lq, d_k)", "shape"),
           ("K  (..., Lk, d_k)", "shape")], "#ebf8ff")
    d.arrow(_("Q Kᵀ / √d_k: one score\nfor each query and each key"))
    d.box([(_("scores S"), "title"), ("(..., Lq, Lk)", "shape")], "#fefcbf")
    d.arrow(_("softmax over the keys (the last axis):\neach row now sums to 1"))
    d.box([(_("weights A"), "title"), ("(..., Lq, Lk)", "shape")], "#fefcbf")
    d.arrow(_("A V, with the values V  (..., Lk, d_v):\neach row a weighted average of value rows"))
    d.box([(_("output"), "title"), ("(..., Lq, d_v)", "shape")], "#e6fffa")


def tiny_model(d, _):
    d.box([(_("tokens"), "title"), (_("(N, L) integers < vocab_size"), "shape")], "#edf2f7")
    d.arrow(_("token embedding + position embedding"))
    d.box([("x", "title"), ("(N, L, d_model)", "shape")], "#ebf8ff")
    d.arrow(_("causal MultiHeadAttention, h heads,\nhead_mask gates each head before W_O"))
    d.box([(_("attention output"), "title"), ("(N, L, d_model)", "shape"),
           (_("and the weights (N, h, L, L)"), "title")], "#fefcbf")
    d.arrow(_("two linear readouts, no residual, no MLP:\nall they know of other positions\n"
              "came through the heads"))
    d.box([(_("logits of both relations"), "title"),
           (_("previous  (N, L, vocab_size)"), "shape"),
           (_("first     (N, L, vocab_size)"), "shape")], "#e6fffa")


QUERY_COLOURS = ["#8ecae6"] * 4 + ["#ffb703"] * 4  # query heads by the key/value head they read


def grouped_heads(d, _):
    d.box([(_("queries: num_heads = 8 heads"), "title"), ("Q  (B, 8, L, head_dim)", "shape")],
          "#ebf8ff")
    d.strip([f"q{i}" for i in range(8)], QUERY_COLOURS)
    d.box([(_("keys and values: num_kv_heads = 2"), "title"),
           ("K, V  (B, 2, L, head_dim)", "shape")], "#fefcbf")
    d.strip(["kv0", "kv1"], ["#8ecae6", "#ffb703"])
    d.arrow("repeat_kv: repeat_interleave(G, dim=1),\nG = num_heads // num_kv_heads = 4")
    d.box([(_("K, V for every query head"), "title"), ("(B, 8, L, head_dim)", "shape")],
          "#fefcbf")
    d.strip(["kv0"] * 4 + ["kv1"] * 4, QUERY_COLOURS)
    d.arrow(_("query head i reads key/value head i // G:\nG consecutive query heads share one"))
    d.box([(_("then chapter 3's attention, per head"), "title"),
           (_("output  (B, L, d_model)"), "shape")], "#e6fffa")
    d.note(_("The trap: repeat(1, 4, 1, 1) tiles instead:\n"
             "kv0 kv1 kv0 kv1 ..., so query head 1 reads kv1.\n"
             "Same shape, no error, other weights' heads."))


def kv_cache(d, _):
    d.box([(_("the cache holds 4 earlier positions"), "title"),
           (_("keys, values  (B, num_kv_heads, 4, head_dim)"), "shape")], "#edf2f7")
    d.arrow(_("L_new = 3 new positions: project them,\ncache.append: torch.cat along dim=2"))
    d.box([(_("keys, values of all T = 7 positions"), "title"),
           ("(B, num_kv_heads, 7, head_dim)", "shape"),
           (_("queries of the 3 new positions only"), "title"),
           ("(B, num_heads, 3, head_dim)", "shape")], "#fefcbf")
    d.arrow(_("scores (B, num_heads, 3, 7): which keys\nmay new query i read?"))
    d.grid(3, 7, lambda row, column: column <= 4 + row,
           [_("pos {p}").format(p=p) for p in (4, 5, 6)],
           _("keys 0..6; new query i sits at position 4 + i\nand reads keys 0..4 + i: the lower\n"
             "triangle aligned at the bottom-right corner:\n"
             "its diagonal moved T − L_new = 4 to the right"))
    d.arrow(_("softmax, weights @ values, W_O"))
    d.box([(_("output of the new positions"), "title"), ("(B, 3, d_model)", "shape")], "#e6fffa")
    d.note(_("The trap: chapter 4's causal_mask(3, 7) is aligned\n"
             "top-left: new query 0 would read key 0 only.\n"
             "One new token (L_new = 1) reads every cached key:\n"
             "it needs no mask at all."))


PAIR_COLOURS = ["#8ecae6", "#ffb703", "#b5e48c", "#f4acb7"]  # pair i: features i and i + 4


def rotary(d, _):
    d.box([(_("one head's query or key at position p"), "title"),
           ("(..., head_dim = 8)", "shape")], "#ebf8ff")
    d.strip([f"x{i}" for i in range(8)], PAIR_COLOURS * 2)
    d.arrow(_("pair i = (x_i, x_i+4): feature i with\nfeature i + head_dim / 2 (rotate_half's)"))
    d.dials(4, 4, lambda row, column: column * 10000.0 ** (-2 * row / 8),
            [_("pair {i}").format(i=i) for i in range(4)], [f"p={p}" for p in range(4)],
            PAIR_COLOURS,
            _("each pair, a point on its circle, turns by\np · θ_i, θ_i = base^(−2i / head_dim):\n"
              "pair 0 one radian a position, pair 3 barely"))
    d.arrow(_("queries and keys turned, values not:\nq_m · k_n depends on m − n only"))
    d.box([(_("rotated queries and keys"), "title"), (_("same shape, same norms"), "shape")],
          "#e6fffa")
    d.note(_("The trap in decoding: the new tokens sit at\n"
             "positions len(cache) .., not 0 ..; each key is\n"
             "rotated once, before it goes into the cache."))


def pre_ln_block(d, _):
    d.box([(_("x, the residual stream"), "title"), ("(B, L, d_model)", "shape")], "#edf2f7")
    d.arrow(_("norm1: RMSNorm(d_model), on a copy;\nx itself goes round, untouched"))
    d.box([("h = norm1(x)", "title"), ("(B, L, d_model)", "shape")], "#ebf8ff")
    d.arrow(_("grouped-query attention: rotary on queries\nand keys at len(cache) + 0, 1, ...;\n"
              "causal; then dropout"))
    d.box([("x = x + dropout(attn(h))", "title"), ("(B, L, d_model)", "shape")], "#fefcbf")
    d.arrow(_("h = norm2(x), then SwiGLU:\ndown_proj(silu(gate_proj(h)) * up_proj(h)),\n"
              "then dropout"))
    d.box([("x + dropout(ffn(norm2(x)))", "title"), ("(B, L, d_model)", "shape")], "#e6fffa")
    d.note(_("Pre-norm normalises what enters each sublayer and\n"
             "adds the sublayer's output to the raw x. Post-norm\n"
             "(the 2017 paper) normalises after the addition:\n"
             "norm(x + attn(x)). Dropout goes on the\n"
             "sublayer's output, never on x + sublayer(x)."))


DIAGRAMS = [mha_shapes, mask_shapes, encoder_decoder, split_shapes, attention_shapes,
            tiny_model, grouped_heads, kv_cache, rotary, pre_ln_block]


def draw_all(out=HERE):
    """Each diagram into `out`, in English and in each language of LANGUAGES (its labels
    translated, its fonts ending with the CJK family)."""
    for language in [None] + LANGUAGES:
        gettext = translations(language) if language else (lambda message: message)
        suffix = f".{language}.svg" if language else ".svg"
        for draw in DIAGRAMS:
            diagram = Diagram(cjk=language is not None)
            draw(diagram, gettext)
            diagram.write(Path(out) / f"{draw.__name__}{suffix}")


if __name__ == "__main__":
    draw_all(*sys.argv[1:])
