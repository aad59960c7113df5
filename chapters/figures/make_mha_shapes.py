"""Writes mha_shapes.svg beside this file: multi-head attention with the shape of every
tensor, drawn for the book's column and a phone's screen (380 units wide, text 13 units).

Generated file; edit this script and run it (python chapters/figures/make_mha_shapes.py).
"""
from pathlib import Path
from xml.sax.saxutils import escape

W = 380
SANS = "font-family: 'DejaVu Sans', Verdana, Arial, sans-serif"
MONO = "font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace"
parts, y = [], 8


def box(lines, fill):
    """A box across the width; lines are (text, style) with style 'title' or 'shape'."""
    global y
    height = 14 + 19 * len(lines)
    parts.append(f'<rect x="10" y="{y}" width="{W - 20}" height="{height}" rx="8" '
                 f'fill="{fill}" stroke="#4a5568" stroke-width="1.2"/>')
    for n, (text, kind) in enumerate(lines):
        style = (f"{SANS}; font-size: 14px; font-weight: bold" if kind == "title"
                 else f"{MONO}; font-size: 13px")
        parts.append(f'<text x="{W / 2}" y="{y + 24 + 19 * n}" text-anchor="middle" '
                     f'style="{style}; fill: #1a202c">{escape(text)}</text>')
    y += height


def arrow(lines):
    """A downward arrow with the operation written beside it."""
    global y
    height = 12 + 18 * len(lines)
    parts.append(f'<line x1="40" y1="{y + 2}" x2="40" y2="{y + height - 4}" stroke="#2b6cb0" '
                 f'stroke-width="2.2" marker-end="url(#head)"/>')
    for n, text in enumerate(lines):
        parts.append(f'<text x="58" y="{y + 20 + 18 * n}" style="{SANS}; font-size: 13px; '
                     f'fill: #2b6cb0">{escape(text)}</text>')
    y += height + 4


box([("inputs", "title"), ("query  (B, Lq, query_size)", "shape"),
     ("key    (B, Lk, key_size)", "shape"), ("value  (B, Lk, value_size)", "shape")], "#edf2f7")
arrow(["q_proj, k_proj, v_proj: W_Q, W_K, W_V", "(one nn.Linear each)"])
box([("projected", "title"), ("Q  (B, Lq, d_model)", "shape"),
     ("K, V  (B, Lk, d_model)", "shape")], "#ebf8ff")
arrow(["split_heads: view to (B, L, h, head_dim),", "then transpose(1, 2)"])
box([("h heads, head i = features", "title"), ("[i·head_dim, (i+1)·head_dim)", "shape"),
     ("Q  (B, h, Lq, head_dim)", "shape"), ("K, V  (B, h, Lk, head_dim)", "shape")], "#fefcbf")
arrow(["scores Q Kᵀ / √head_dim: (B, h, Lq, Lk)", "softmax over the keys (dropout: training)",
       "each head on its own, batched"])
box([("weights and head outputs", "title"), ("weights  (B, h, Lq, Lk)", "shape"),
     ("weights @ V  (B, h, Lq, head_dim)", "shape")], "#fefcbf")
arrow(["merge_heads: transpose(1, 2), reshape", "= Concat(head_0, …, head_h−1)"])
box([("concatenated", "title"), ("(B, Lq, h · head_dim) = (B, Lq, d_model)", "shape")], "#ebf8ff")
arrow(["out_proj: W_O, where the heads mix"])
box([("output", "title"), ("(B, Lq, d_model)", "shape")], "#e6fffa")

svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{y + 8}" '
       f'viewBox="0 0 {W} {y + 8}" role="img">\n'
       '<defs><marker id="head" markerWidth="10" markerHeight="10" refX="8" refY="5" '
       'orient="auto" markerUnits="userSpaceOnUse"><path d="M0,0 L10,5 L0,10 z" '
       'fill="#2b6cb0"/></marker></defs>\n'
       '<rect width="100%" height="100%" fill="#ffffff"/>\n' + "\n".join(parts) + "\n</svg>\n")
Path(__file__).with_name("mha_shapes.svg").write_text(svg, encoding="utf-8")
