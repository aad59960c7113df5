"""Writes the course's diagrams beside this file, as SVG drawn for the book's column and a
phone's screen (380 units wide, no text under 13 units):

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

Generated files; edit this script and run it (python chapters/figures/make_diagrams.py).
"""
import math
from pathlib import Path
from xml.sax.saxutils import escape

W = 380
SANS = "font-family: 'DejaVu Sans', Verdana, Arial, sans-serif"
MONO = "font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace"


class Diagram:
    """Boxes across the width, joined by downward arrows with the operation beside them."""

    def __init__(self):
        self.parts, self.y = [], 8

    def box(self, lines, fill):
        """lines: (text, kind), kind 'title' (bold) or 'shape' (monospace)."""
        height = 14 + 19 * len(lines)
        self.parts.append(f'<rect x="10" y="{self.y}" width="{W - 20}" height="{height}" rx="8" '
                          f'fill="{fill}" stroke="#4a5568" stroke-width="1.2"/>')
        for n, (text, kind) in enumerate(lines):
            style = (f"{SANS}; font-size: 14px; font-weight: bold" if kind == "title"
                     else f"{MONO}; font-size: 13px")
            self.parts.append(f'<text x="{W / 2}" y="{self.y + 24 + 19 * n}" text-anchor="middle" '
                              f'style="{style}; fill: #1a202c">{escape(text)}</text>')
        self.y += height

    def arrow(self, lines):
        height = 12 + 18 * len(lines)
        self.parts.append(f'<line x1="40" y1="{self.y + 2}" x2="40" y2="{self.y + height - 4}" '
                          f'stroke="#2b6cb0" stroke-width="2.2" marker-end="url(#head)"/>')
        for n, text in enumerate(lines):
            self.parts.append(f'<text x="58" y="{self.y + 20 + 18 * n}" style="{SANS}; '
                              f'font-size: 13px; fill: #2b6cb0">{escape(text)}</text>')
        self.y += height + 4

    def strip(self, labels, fills):
        """A row of equal segments across the width: how one token's features are cut."""
        width = (W - 20) / len(labels)
        for n, (text, fill) in enumerate(zip(labels, fills)):
            self.parts.append(f'<rect x="{10 + n * width:.1f}" y="{self.y + 4}" width="{width:.1f}" '
                              f'height="26" fill="{fill}" stroke="#4a5568" stroke-width="1"/>')
            self.parts.append(f'<text x="{10 + (n + 0.5) * width:.1f}" y="{self.y + 22}" '
                              f'text-anchor="middle" style="{MONO}; font-size: 13px; '
                              f'fill: #1a202c">{escape(text)}</text>')
        self.y += 34

    def note(self, lines):
        """A dashed box in red: a trap beside the right path."""
        height = 12 + 18 * len(lines)
        self.y += 6
        self.parts.append(f'<rect x="10" y="{self.y}" width="{W - 20}" height="{height}" rx="8" '
                          'fill="#fff5f5" stroke="#c53030" stroke-width="1.2" '
                          'stroke-dasharray="5 3"/>')
        for n, text in enumerate(lines):
            self.parts.append(f'<text x="22" y="{self.y + 21 + 18 * n}" style="{SANS}; '
                              f'font-size: 13px; fill: #9b2c2c">{escape(text)}</text>')
        self.y += height

    def _table(self, rows, columns, largest, row_labels, column_labels, caption, draw):
        """A table of rows x columns square cells of at most `largest` units: the columns
        named above, each row named at its left, draw(row, column, x, y, size) drawing the
        cell whose top-left corner is (x, y), then `caption` (lines) under it."""
        cell = min(largest, (W - 110) / columns)
        left = W - 20 - cell * columns
        for column in range(columns):
            self.parts.append(f'<text x="{left + (column + 0.5) * cell:.1f}" y="{self.y + 16}" '
                              f'text-anchor="middle" style="{MONO}; font-size: 13px; '
                              f'fill: #4a5568">{escape(str(column_labels[column]))}</text>')
        top = self.y + 24
        for row in range(rows):
            y = top + row * cell
            self.parts.append(f'<text x="{left - 8:.1f}" y="{y + cell / 2 + 5:.1f}" '
                              f'text-anchor="end" style="{MONO}; font-size: 13px; '
                              f'fill: #1a202c">{escape(row_labels[row])}</text>')
            for column in range(columns):
                draw(row, column, left + column * cell, y, cell)
        self.y = top + rows * cell + 4
        for n, text in enumerate(caption):
            self.parts.append(f'<text x="{W / 2}" y="{self.y + 16 + 18 * n}" text-anchor="middle" '
                              f'style="{SANS}; font-size: 13px; fill: #1a202c">{escape(text)}</text>')
        self.y += 6 + 18 * len(caption)

    def grid(self, rows, columns, allowed, row_labels, caption):
        """A mask as a grid of cells, one row per query and one column per key: green where
        allowed(row, column), grey where not; each row named at its left, the keys numbered
        above, `caption` (lines) under it."""
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
        (lines) under it."""
        def dial(row, column, x, y, size):
            cx, cy, radius, turn = x + size / 2, y + size / 2, size * 0.38, angle(row, column)
            hand_x, hand_y = cx + radius * math.cos(turn), cy - radius * math.sin(turn)
            self.parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{radius:.1f}" '
                              f'fill="{fills[row]}" stroke="#4a5568" stroke-width="1"/>')
            self.parts.append(f'<line x1="{cx:.1f}" y1="{cy:.1f}" x2="{hand_x:.1f}" '
                              f'y2="{hand_y:.1f}" stroke="#2b6cb0" stroke-width="2.2"/>')
        self._table(rows, columns, 48, row_labels, column_labels, caption, dial)

    def write(self, name):
        h = self.y + 8
        svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" '
               f'viewBox="0 0 {W} {h}" role="img">\n'
               '<defs><marker id="head" markerWidth="10" markerHeight="10" refX="8" refY="5" '
               'orient="auto" markerUnits="userSpaceOnUse"><path d="M0,0 L10,5 L0,10 z" '
               'fill="#2b6cb0"/></marker></defs>\n'
               '<rect width="100%" height="100%" fill="#ffffff"/>\n'
               + "\n".join(self.parts) + "\n</svg>\n")
        Path(__file__).with_name(name).write_text(svg, encoding="utf-8")


d = Diagram()
d.box([("inputs", "title"), ("query  (B, Lq, query_size)", "shape"),
       ("key    (B, Lk, key_size)", "shape"), ("value  (B, Lk, value_size)", "shape")], "#edf2f7")
d.arrow(["q_proj, k_proj, v_proj: W_Q, W_K, W_V", "(one nn.Linear each)"])
d.box([("projected", "title"), ("Q  (B, Lq, d_model)", "shape"),
       ("K, V  (B, Lk, d_model)", "shape")], "#ebf8ff")
d.arrow(["split_heads: view to (B, L, h, head_dim),", "then transpose(1, 2)"])
d.box([("h heads, head i = features", "title"), ("[i·head_dim, (i+1)·head_dim)", "shape"),
       ("Q  (B, h, Lq, head_dim)", "shape"), ("K, V  (B, h, Lk, head_dim)", "shape")], "#fefcbf")
d.arrow(["scores Q Kᵀ / √head_dim: (B, h, Lq, Lk)", "softmax over the keys (dropout: training)",
         "each head on its own, batched"])
d.box([("weights and head outputs", "title"), ("weights  (B, h, Lq, Lk)", "shape"),
       ("weights @ V  (B, h, Lq, head_dim)", "shape")], "#fefcbf")
d.arrow(["merge_heads: transpose(1, 2), reshape", "= Concat(head_0, …, head_h−1)"])
d.box([("concatenated", "title"), ("(B, Lq, h · head_dim) = (B, Lq, d_model)", "shape")],
      "#ebf8ff")
d.arrow(["out_proj: W_O, where the heads mix"])
d.box([("output", "title"), ("(B, Lq, d_model)", "shape")], "#e6fffa")
d.write("mha_shapes.svg")

d = Diagram()
d.box([("padding mask, True = may attend", "title"), ("(B, 1, 1, Lk)", "shape"),
       ("one row of keys per sequence", "title")], "#ebf8ff")
d.arrow(["& causal_mask(Lq, Lk), read as (1, 1, Lq, Lk):", "broadcasting aligns from the right"])
d.box([("combined mask", "title"), ("(B, 1, Lq, Lk)", "shape")], "#ebf8ff")
d.arrow(["broadcasts over the heads"])
d.box([("scores, masked", "title"), ("(B, h, Lq, Lk)", "shape"),
       ("masked_fill(~mask, -inf)", "shape")], "#fefcbf")
d.arrow(["softmax over Lk: a masked key gets 0;", "a row with no key allowed: zeros, no NaN"])
d.box([("weights", "title"), ("(B, h, Lq, Lk)", "shape")], "#e6fffa")
d.note(["The trap: a (B, Lk) mask is read as (1, 1, B, Lk).",
        "When Lq == B it runs without an error, and row b",
        "masks query b of every sequence instead of all",
        "the queries of sequence b."])
d.write("mask_shapes.svg")

d = Diagram()
d.box([("source tokens (encoder input)", "title"), ("(B, Ls, d_model)", "shape")], "#edf2f7")
d.arrow(["encoder self-attention: Q, K, V from the source", "mask: source padding (B, 1, 1, Ls)"])
d.box([("memory = encoder output", "title"), ("(B, Ls, d_model)", "shape")], "#ebf8ff")
d.y += 14                                         # two inputs: the memory waits for the decoder
d.box([("target tokens so far (decoder input)", "title"), ("(B, Lt, d_model)", "shape")],
      "#edf2f7")
d.arrow(["decoder masked self-attention: Q, K, V from", "the target; mask: target padding",
         "& causal (Lt, Lt) → (B, 1, Lt, Lt)"])
d.box([("decoder states", "title"), ("(B, Lt, d_model)", "shape")], "#fefcbf")
d.arrow(["decoder cross-attention: Q from the decoder,", "K and V from the memory;",
         "mask: source padding (B, 1, 1, Ls), no causal"])
d.box([("scores (B, h, Lt, Ls); output", "title"), ("(B, Lt, d_model)", "shape")], "#e6fffa")
d.note(["Cross-attention needs no causal mask: the source",
        "is known whole. A decoder-only model (GPT,",
        "chapter 8) keeps only the masked self-attention."])
d.write("encoder_decoder.svg")

HEAD_COLOURS = ["#8ecae6", "#ffb703", "#ffffff", "#b5e48c"]  # chapter 2's grid: heads 0, 1, 2

d = Diagram()
d.box([("tokens x", "title"), ("(B, L, d_model)", "shape"),
       ("one token's d_model features:", "title")], "#edf2f7")
d.strip(["head 0", "head 1", "…", "head h−1"], HEAD_COLOURS)
d.arrow(["view: split the last axis in two;", "no number moves"])
d.box([("each token's features in groups", "title"), ("(B, L, num_heads, head_dim)", "shape")],
      "#ebf8ff")
d.arrow(["transpose(1, 2): the head axis", "goes in front of the positions"])
d.box([("one sequence per head", "title"), ("(B, num_heads, L, head_dim)", "shape"),
       ("head i holds features", "title"), ("[i·head_dim, (i+1)·head_dim)", "shape")],
      "#fefcbf")
d.arrow(["chapter 1's attention in every head,", "(B, num_heads) as batch axes"])
d.box([("the heads' outputs", "title"), ("(B, num_heads, L, head_dim)", "shape")], "#fefcbf")
d.arrow(["merge_heads (exercise 2): back to tokens,", "the heads' features side by side"])
d.box([("tokens again", "title"), ("(B, L, num_heads · head_dim)", "shape"),
       ("= (B, L, d_model)", "shape")], "#e6fffa")
d.note(["The trap: reshape(B, num_heads, L, head_dim)",
        "straight from (B, L, d_model) gives the same",
        "shape, no error, and heads made of pieces",
        "of several tokens."])
d.write("split_shapes.svg")

d = Diagram()
d.box([("query Q and key K", "title"), ("Q  (..., Lq, d_k)", "shape"),
       ("K  (..., Lk, d_k)", "shape")], "#ebf8ff")
d.arrow(["Q Kᵀ / √d_k: one score", "for each query and each key"])
d.box([("scores S", "title"), ("(..., Lq, Lk)", "shape")], "#fefcbf")
d.arrow(["softmax over the keys (the last axis):", "each row now sums to 1"])
d.box([("weights A", "title"), ("(..., Lq, Lk)", "shape")], "#fefcbf")
d.arrow(["A V, with the values V  (..., Lk, d_v):", "each row a weighted average of value rows"])
d.box([("output", "title"), ("(..., Lq, d_v)", "shape")], "#e6fffa")
d.write("attention_shapes.svg")

d = Diagram()
d.box([("tokens", "title"), ("(N, L) integers < vocab_size", "shape")], "#edf2f7")
d.arrow(["token embedding + position embedding"])
d.box([("x", "title"), ("(N, L, d_model)", "shape")], "#ebf8ff")
d.arrow(["causal MultiHeadAttention, h heads,", "head_mask gates each head before W_O"])
d.box([("attention output", "title"), ("(N, L, d_model)", "shape"),
       ("and the weights (N, h, L, L)", "title")], "#fefcbf")
d.arrow(["two linear readouts, no residual, no MLP:", "all they know of other positions", "came through the heads"])
d.box([("logits of both relations", "title"), ("previous  (N, L, vocab_size)", "shape"),
       ("first     (N, L, vocab_size)", "shape")], "#e6fffa")
d.write("tiny_model.svg")

QUERY_COLOURS = ["#8ecae6"] * 4 + ["#ffb703"] * 4  # query heads by the key/value head they read

d = Diagram()
d.box([("queries: num_heads = 8 heads", "title"), ("Q  (B, 8, L, head_dim)", "shape")], "#ebf8ff")
d.strip([f"q{i}" for i in range(8)], QUERY_COLOURS)
d.box([("keys and values: num_kv_heads = 2", "title"),
       ("K, V  (B, 2, L, head_dim)", "shape")], "#fefcbf")
d.strip(["kv0", "kv1"], ["#8ecae6", "#ffb703"])
d.arrow(["repeat_kv: repeat_interleave(G, dim=1),", "G = num_heads // num_kv_heads = 4"])
d.box([("K, V for every query head", "title"), ("(B, 8, L, head_dim)", "shape")], "#fefcbf")
d.strip(["kv0"] * 4 + ["kv1"] * 4, QUERY_COLOURS)
d.arrow(["query head i reads key/value head i // G:", "G consecutive query heads share one"])
d.box([("then chapter 3's attention, per head", "title"),
       ("output  (B, L, d_model)", "shape")], "#e6fffa")
d.note(["The trap: repeat(1, 4, 1, 1) tiles instead:",
        "kv0 kv1 kv0 kv1 ..., so query head 1 reads kv1.",
        "Same shape, no error, other weights' heads."])
d.write("grouped_heads.svg")

d = Diagram()
d.box([("the cache holds 4 earlier positions", "title"),
       ("keys, values  (B, num_kv_heads, 4, head_dim)", "shape")], "#edf2f7")
d.arrow(["L_new = 3 new positions: project them,", "cache.append: torch.cat along dim=2"])
d.box([("keys, values of all T = 7 positions", "title"),
       ("(B, num_kv_heads, 7, head_dim)", "shape"),
       ("queries of the 3 new positions only", "title"),
       ("(B, num_heads, 3, head_dim)", "shape")], "#fefcbf")
d.arrow(["scores (B, num_heads, 3, 7): which keys", "may new query i read?"])
d.grid(3, 7, lambda row, column: column <= 4 + row, ["pos 4", "pos 5", "pos 6"],
       ["keys 0..6; new query i sits at position 4 + i", "and reads keys 0..4 + i: the lower",
        "triangle aligned at the bottom-right corner:",
        "its diagonal moved T − L_new = 4 to the right"])
d.arrow(["softmax, weights @ values, W_O"])
d.box([("output of the new positions", "title"), ("(B, 3, d_model)", "shape")], "#e6fffa")
d.note(["The trap: chapter 4's causal_mask(3, 7) is aligned",
        "top-left: new query 0 would read key 0 only.",
        "One new token (L_new = 1) reads every cached key:",
        "it needs no mask at all."])
d.write("kv_cache.svg")

PAIR_COLOURS = ["#8ecae6", "#ffb703", "#b5e48c", "#f4acb7"]  # pair i: features i and i + 4

d = Diagram()
d.box([("one head's query or key at position p", "title"),
       ("(..., head_dim = 8)", "shape")], "#ebf8ff")
d.strip([f"x{i}" for i in range(8)], PAIR_COLOURS * 2)
d.arrow(["pair i = (x_i, x_i+4): feature i with", "feature i + head_dim / 2 (rotate_half's)"])
d.dials(4, 4, lambda row, column: column * 10000.0 ** (-2 * row / 8),
        [f"pair {i}" for i in range(4)], [f"p={p}" for p in range(4)], PAIR_COLOURS,
        ["each pair, a point on its circle, turns by", "p · θ_i, θ_i = base^(−2i / head_dim):",
         "pair 0 one radian a position, pair 3 barely"])
d.arrow(["queries and keys turned, values not:", "q_m · k_n depends on m − n only"])
d.box([("rotated queries and keys", "title"), ("same shape, same norms", "shape")], "#e6fffa")
d.note(["The trap in decoding: the new tokens sit at",
        "positions len(cache) .., not 0 ..; each key is",
        "rotated once, before it goes into the cache."])
d.write("rotary.svg")

d = Diagram()
d.box([("x, the residual stream", "title"), ("(B, L, d_model)", "shape")], "#edf2f7")
d.arrow(["norm1: RMSNorm(d_model), on a copy;", "x itself goes round, untouched"])
d.box([("h = norm1(x)", "title"), ("(B, L, d_model)", "shape")], "#ebf8ff")
d.arrow(["grouped-query attention: rotary on queries", "and keys at len(cache) + 0, 1, ...;",
         "causal; then dropout"])
d.box([("x = x + dropout(attn(h))", "title"), ("(B, L, d_model)", "shape")], "#fefcbf")
d.arrow(["h = norm2(x), then SwiGLU:", "down_proj(silu(gate_proj(h)) * up_proj(h)),",
         "then dropout"])
d.box([("x + dropout(ffn(norm2(x)))", "title"), ("(B, L, d_model)", "shape")], "#e6fffa")
d.note(["Pre-norm normalises what enters each sublayer and",
        "adds the sublayer's output to the raw x. Post-norm",
        "(the 2017 paper) normalises after the addition:",
        "norm(x + attn(x)). Dropout goes on the",
        "sublayer's output, never on x + sublayer(x)."])
d.write("pre_ln_block.svg")
