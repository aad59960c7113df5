"""Writes the course's diagrams beside this file, as SVG drawn for the book's column and a
phone's screen (380 units wide, no text under 13 units):

- attention_shapes.svg (chapter 1): scaled dot-product attention, step by step;
- split_shapes.svg (chapter 2): the path of the features through split_heads and back;
- mha_shapes.svg (chapter 3): multi-head attention with the shape of every tensor;
- mask_shapes.svg (chapter 4): how a padding mask and a causal mask broadcast to the scores;
- tiny_model.svg (chapter 5): the path of the tokens through chapter 5's model.

Generated files; edit this script and run it (python chapters/figures/make_diagrams.py).
"""
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
