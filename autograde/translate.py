"""Student notebooks in another language (issue 24): each markdown cell translated through the
catalogue the book in that language is built from, so that the notebook and the book say the
same thing.

The catalogue of a chapter, locales/<language>/LC_MESSAGES/chapters/<chapter>.po, is what
Sphinx's gettext builder extracted from the chapter: one message per block of a markdown
cell (a paragraph, a heading, a list item's paragraph, a table cell, an image's alt text, a
raw HTML block), as its MyST source with the soft line breaks joined by spaces. A cell is
parsed here with MyST's own markdown-it configuration (so `$...$` maths and `{role}` spans
tokenise as in the book), each block's content is looked up as a message id, and the
translation is written over the content in the block's source lines, keeping the markup
around it (heading hashes, list markers and indentation, blockquote markers, table pipes,
`![alt](path)` with its alt translated). Code blocks and maths blocks are not prose: they
stay as they are. A block whose content is no message stays English and is reported.
"""
import copy
import re
from dataclasses import dataclass, field
from functools import lru_cache

import yaml
from babel.messages.pofile import read_po
from markdown_it.renderer import RendererHTML
from myst_parser.config.main import MdParserConfig
from myst_parser.parsers.mdit import create_md_parser

from autograde.paths import REPO

LOCALES = REPO / "locales"
# Code blocks, maths blocks and the fences of these directives are not prose: they stay as
# they are. Any other directive's fence (```{note}, :::{admonition}) holds prose that the
# gettext extraction takes from the directive's own parse, which is not reproduced here: it
# stays English and is reported.
CODE_DIRECTIVES = {"{code}", "{code-block}", "{code-cell}", "{math}", "{literalinclude}"}
# ![alt](target "title") in an inline span's source
IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<target>[^)]*)\)")


@lru_cache(maxsize=1)
def _parser():
    """MyST's markdown-it with the book's extensions (_config.yml's parse:
    myst_enable_extensions), which decide how a cell splits into blocks and inline spans."""
    config = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    extensions = set(config.get("parse", {}).get("myst_enable_extensions", []))
    return create_md_parser(MdParserConfig(enable_extensions=extensions), RendererHTML)


def block_structure(source):
    """[(token type, tag, nesting level)] of the blocks of markdown `source`: what a
    translation of it keeps (the same headings, lists, tables, quotes, maths and code)."""
    return [(t.type, t.tag, t.level) for t in _parser().parse(source)]


def normalised(text):
    """`text` as gettext extraction writes a message: lines joined by single spaces."""
    return " ".join(text.split())


@dataclass
class Catalogue:
    """A chapter's translations: {message id: translation}, the translated ones only, also
    under their whitespace-normalised ids (a raw HTML block's id keeps its line breaks)."""
    messages: dict = field(default_factory=dict)

    @classmethod
    def read(cls, path):
        with open(path, "rb") as file:
            catalogue = read_po(file)
        messages = {}
        for message in catalogue:
            if message.id and message.string and not message.fuzzy:
                messages[message.id] = message.string
                messages.setdefault(normalised(message.id), message.string)
        return cls(messages)

    def lookup(self, text):
        """The translation of `text`, or None: exactly, then whitespace-normalised."""
        found = self.messages.get(text)
        return found if found is not None else self.messages.get(normalised(text))


def catalogue_path(chapter, language):
    """locales/zh_CN/LC_MESSAGES/chapters/01_attention.po for ('01_attention', 'zh_CN')."""
    return LOCALES / language / "LC_MESSAGES" / "chapters" / f"{chapter}.po"


def chapter_catalogue(chapter, language):
    return Catalogue.read(catalogue_path(chapter, language))


def _translate_inline(content, catalogue, unmatched):
    """(translation of an inline span's source, or None when it is no message). The span is
    looked up whole (a paragraph's message holds its images' markup); a span of images only
    whose whole is no message gets each image's alt text, a message of its own, translated."""
    def alt(match):
        text = match["alt"]
        translated = catalogue.lookup(text) if text.strip() else text
        if translated is None:
            unmatched.append(text)
            translated = text
        return f"![{translated}]({match['target']})"

    whole = catalogue.lookup(content)
    if whole is not None or IMAGE.search(content) is None:
        # (a paragraph's message holds its images, their alts translated by the translator)
        return whole
    if not IMAGE.sub("", content).strip():
        return IMAGE.sub(alt, content)
    return None


def _replace_lines(lines, start, end, content, translation):
    """Lines [start, end) of a block, whose inline source is `content` (its lines without the
    containers' markers and indentation), rewritten to `translation` on one line: the first
    line keeps what precedes the content (`## `, `- `, `> `, indentation), the others, soft
    breaks of the same paragraph, go. Returns False where the content is not found there."""
    first = content.split("\n", 1)[0]
    at = lines[start].find(first)
    if at < 0:
        return False
    last = content.rsplit("\n", 1)[-1]
    tail_line = lines[end - 1]
    tail_at = tail_line.rfind(last) if end - 1 > start else at
    if tail_at < 0:
        return False
    # what follows the content on its last line: a heading's closing hashes, a line break
    suffix = tail_line[tail_at + len(last):]
    lines[start:end] = [lines[start][:at] + translation + suffix]
    return True


def _in_cell(text):
    """`text` as a table cell's source holds it: markdown-it gives a cell's content with each
    escaped pipe `\\|` unescaped, and a bare `|` written back would split the cell in two."""
    return text.replace("|", "\\|")


def translate_markdown(source, catalogue):
    """(the markdown cell `source` translated through `catalogue`, [unmatched message]).

    Each paragraph, heading, list item's paragraph and raw HTML block whose content is a
    message of the catalogue is replaced by its translation in place; table cells are
    replaced within their row's line. What is not a message stays English and is listed, as
    its normalised text; so is a directive's fence (CODE_DIRECTIVES excepted).
    """
    tokens = _parser().parse(source)
    lines = source.splitlines(keepends=False)
    trailing_newline = source.endswith("\n")
    unmatched = []
    # the blocks as (line, column, kind, token), rewritten last first so that rewriting one
    # leaves the line numbers, and within a table row the columns, of those before it
    blocks = []
    in_cell, row_cursor = False, 0
    for token in tokens:
        if token.type == "tr_open":
            row_cursor = 0
        elif token.type in ("th_open", "td_open"):
            in_cell = True
        elif token.type in ("th_close", "td_close"):
            in_cell = False
        elif token.type == "inline" and token.map is not None and in_cell:
            # the cells of a row share its line: each found after the one before it
            row = lines[token.map[0]]
            written = _in_cell(token.content)
            column = row.find(written, row_cursor) if written else -1
            if column < 0:
                column = row_cursor
            row_cursor = column + len(written)
            blocks.append((token.map[0], column, "cell", token))
        elif token.type == "inline" and token.map is not None:
            blocks.append((token.map[0], 0, "inline", token))
        elif token.type == "html_block" and token.map is not None:
            blocks.append((token.map[0], 0, "html", token))
        elif token.type in ("fence", "colon_fence") and token.info.startswith("{") \
                and token.info.split()[0] not in CODE_DIRECTIVES and token.map is not None:
            blocks.append((token.map[0], 0, "directive", token))
    for line, column, kind, token in sorted(blocks, key=lambda b: b[:2], reverse=True):
        content = token.content
        if kind == "directive":
            unmatched.append(normalised(f"{token.info} {content}"))
            continue
        if kind == "html":
            if not content.strip():
                continue
            translated = catalogue.lookup(content.rstrip("\n"))
            if translated is None:
                unmatched.append(normalised(content))
                continue
            start, end = token.map
            # the containers' markers and indentation (`> `, a list item's), on every line
            prefix = lines[start][:max(lines[start].find(content.split("\n", 1)[0]), 0)]
            lines[start:end] = [(prefix + text) if text else prefix.rstrip()
                                for text in translated.rstrip("\n").split("\n")]
            continue
        if not content.strip():
            continue
        translated = _translate_inline(content, catalogue, unmatched)
        if translated is None:
            unmatched.append(normalised(content))
            continue
        translated = " ".join(translated.split("\n"))
        if kind == "cell":
            row, written = lines[line], _in_cell(content)
            if row[column:column + len(written)] != written:
                unmatched.append(normalised(content))
                continue
            lines[line] = row[:column] + _in_cell(translated) + row[column + len(written):]
        elif not _replace_lines(lines, token.map[0], token.map[1], content, translated):
            unmatched.append(normalised(content))
    unmatched.reverse()  # in the cell's order
    text = "\n".join(lines) + ("\n" if trailing_newline else "")
    return text, unmatched


def translate_notebook(notebook, catalogue, language):
    """(a copy of the notebook dict `notebook` with its markdown cells translated and its
    metadata["course"]["language"] set, [(cell index, unmatched message)]). Code cells, cell
    ids and every cell's metadata (nbgrader's grade ids, points, checksums) are the same
    objects' copies: only the markdown cells' source changes."""
    translated = copy.deepcopy(notebook)
    unmatched = []
    for number, cell in enumerate(translated["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        text, missing = translate_markdown(source, catalogue)
        unmatched += [(number, message) for message in missing]
        cell["source"] = text.splitlines(keepends=True) if isinstance(cell["source"], list) \
            else text
    translated["metadata"].setdefault("course", {})["language"] = language
    return translated, unmatched
