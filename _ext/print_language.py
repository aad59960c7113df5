"""What the chapter notebooks' own code prints, in an edition in another language (issue 24,
item 4): the code is the same in every edition (the pages show it), so each `print` of a
code cell is translated while it runs, in the kernel that executes the edition's notebooks.
The catalogue is locales/<language>/LC_MESSAGES/prints.po, whose messages
_ext/print_messages.py extracts from the notebooks' code.

A print call is one message, its template: its arguments joined by its separator, a string
literal as its text, an f-string as its text with each field written as in the code
(`{name}`, its conversion and format spec left out: the code formats the value, the
translation places it), any other argument a field of its own (`{output.shape}`), a `+` of
strings the two templates one after the other. `template(call)` computes it, here and in the
extraction, so that both read the same message from the same code.

`install(language)` (the startup file of the edition's kernels, _ext/plot_language.py's
ipython_dir) adds an IPython AST transformer (IPython's documented `ast_transformers`) that
rewrites each such call of a cell before it runs: `print(a, f"b {x:>8}")` prints
`printed(template, [str(a), (f"{x:>8}", ">8")])`, the translation of the template with each
field's formatted value put in its place. A value is itself translated when the catalogue
holds it (a role's name, a table's column title, a line of a report built by a function of
solutions/), whole, line by line or item by item, and keeps the width its format spec gave
it, counted in columns (a Chinese character takes two, unicodedata.east_asian_width), on the
side the spec aligns it, so that printed tables stay aligned; a translation wider than that
width (a column title) takes the spaces beside it on the side its column is aligned (before
it when aligned right, after it when aligned left, one kept), so that it stays above its
column's values and the columns after it keep their places. Where that side has no spaces to
give (the title of a right-aligned column right after another column's), its column widens
instead: the line's columns after it move right, and so do those of the table's rows that
follow (the prints of the same cell as wide in English as the title's line): each row's
value in that column is padded as wide, so that every title still stands above its values.
A template the catalogue lacks (no English word) is
printed as in English, its values translated. The cell's source is not changed (the page
shows the English code); the English edition and the students' notebooks never load this
module.

What prints the outputs is this module and the catalogue: _ext/execute_chapters.py empties
the edition's cache when either changes.
"""
import ast
import functools
import re
import unicodedata

from plot_language import ENGLISH_WORD, FIELD, LOCALES, Labels  # (this folder)

CATALOGUE = "prints"  # locales/<language>/LC_MESSAGES/prints.po
# the escaped braces of a template's text, kept apart while its fields are found
_OPEN, _CLOSE = "\ue000", "\ue001"


# --------------------------------------------------------------------------- templates
def _escaped(text):
    return text.replace("{", "{{").replace("}", "}}")


def _is_text(node):
    """Whether `node` is a string literal, an f-string, or a `+` of which one side is."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
            and (_is_text(node.left) or _is_text(node.right)))


def text_template(node):
    """(template, [field]) of a string expression: a literal, an f-string, a `+` of strings
    (each field an ast node: a FormattedValue of an f-string, or an operand of a `+` that
    is not itself a string's text), or None when `node` is no such expression."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _escaped(node.value), []
    if isinstance(node, ast.JoinedStr):
        text, fields = [], []
        for value in node.values:
            if isinstance(value, ast.Constant):
                text.append(_escaped(value.value))
            else:
                text.append("{" + ast.unparse(value.value) + "}")
                fields.append(value)
        return "".join(text), fields
    if _is_text(node):
        text, fields = [], []
        for side in (node.left, node.right):
            inner = text_template(side)
            if inner is None:
                text.append("{" + ast.unparse(side) + "}")
                fields.append(side)
            else:
                text.append(inner[0])
                fields += inner[1]
        return "".join(text), fields
    return None


def template(call):
    """(the message of a print call, [its fields' nodes, in order]), or None for a call that
    is not a plain print (a starred argument, a separator that is not a literal)."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id == "print" and call.args):
        return None
    sep = " "
    for keyword in call.keywords:
        if keyword.arg is None:
            return None
        if keyword.arg == "sep":
            if not (isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str)):
                return None
            sep = keyword.value.value
    parts, fields = [], []
    for argument in call.args:
        if isinstance(argument, ast.Starred):
            return None
        inner = text_template(argument)
        if inner is None:
            parts.append("{" + ast.unparse(argument) + "}")
            fields.append(argument)
        else:
            parts.append(inner[0])
            fields += inner[1]
    return _escaped(sep).join(parts), fields


def pieces(text):
    """A template as [(is a field, its text)]: the text with its escaped braces undone, a
    field as written (`{name}`)."""
    hidden = text.replace("{{", _OPEN).replace("}}", _CLOSE)
    found, at = [], 0
    for match in FIELD.finditer(hidden):
        if match.start() > at:
            found.append((False, hidden[at:match.start()]))
        found.append((True, match.group()))
        at = match.end()
    if at < len(hidden):
        found.append((False, hidden[at:]))
    return [(field, part if field else part.replace(_OPEN, "{").replace(_CLOSE, "}"))
            for field, part in found]


def has_fields(text):
    """Whether a template has a field."""
    return any(field for field, _ in pieces(text))


# --------------------------------------------------------------------------- translation
def alignment(spec):
    """The side a format spec aligns a value on: "<", ">" or "^"; "<" for a width without
    an alignment (a string's default); None without a width."""
    align = re.match(r"(?:.?([<>^]))?", spec).group(1)
    if align is None and re.match(r".?[<>^=]?[+\- ]?#?0?\d", spec):
        align = "<"
    return align


def _make_room(text, start, end, surplus, side):
    """`text` whose value text[start:end] is `surplus` columns wider than the English it
    translates (a column title), and the columns it could not find: the spaces on the side
    its column is aligned give way, before it when aligned right or centred (its right edge
    stays above the column's values), after it when aligned left (its left edge does), as
    many as there are but one between it and its neighbour. The spaces of its other side
    stay: taking them would move the title off its column's values. The columns it could
    not find widen its column (Printed.text: the table's rows follow)."""
    if side in ">^":
        spaces = len(text[:start]) - len(text[:start].rstrip(" "))
        if not (start - spaces == 0 or text[start - spaces - 1] == "\n"):
            spaces -= 1                          # (one space left before it)
        taken = min(surplus, max(spaces, 0))
        return text[:start - taken] + text[start:], surplus - taken
    spaces = len(text[end:]) - len(text[end:].lstrip(" "))
    if not (end + spaces == len(text) or text[end + spaces] == "\n"):
        spaces -= 1                              # (one space left after it)
    taken = min(surplus, max(spaces, 0))
    return text[:end] + text[end + taken:], surplus - taken


def _widened(value, extra, side):
    """A row's formatted `value` in a column that its table's title widened by `extra`
    columns: padded on the side the title's column is aligned ("<": after it; else before
    it), as the title took its columns."""
    return value + " " * extra if side == "<" else " " * extra + value


def columns(text):
    """The columns `text` takes in a monospaced font: two for a wide (East Asian) character."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


class Printed:
    """A language's printed messages: {template: translation}, and the values' messages
    (exact, or an f-string's as a pattern, as plot labels are looked up)."""

    def __init__(self, entries):
        """entries: [(English message, translation, is an f-string's)]."""
        self.templates = {english: translated for english, translated, _ in entries if translated}
        # a value is looked up without the indentation of its line, which value() keeps
        self.values = Labels([(english.strip(), translated.strip(), formatted)
                              for english, translated, formatted in entries])
        # the table being printed, whose titles widened columns (text()): the columns its
        # English lines take, and {the English column where a widened column starts: (by how
        # many columns, the side its title is aligned on)}; None between tables
        self.table = None

    def end_table(self):
        """A new cell runs: no print after it is a row of a table printed before it."""
        self.table = None

    @classmethod
    def read(cls, language):
        from babel.messages.pofile import read_po
        with open(LOCALES / language / "LC_MESSAGES" / f"{CATALOGUE}.po", "rb") as file:
            catalogue = read_po(file)
        # a message with a field is a pattern (Babel flags it python-brace-format only when
        # str.format can parse it, which an f-string's field of nested f-strings defeats)
        return cls([(m.id, m.string, has_fields(m.id)) for m in catalogue
                    if m.id and not m.fuzzy])

    def translate(self, text):
        """A value (its indentation stripped) in the catalogue's language: its message's
        translation (whitespace aside), or a pattern's with each field's value, as printed
        (its padding kept), translated in turn; None when the catalogue holds neither."""
        if not ENGLISH_WORD.search(text):
            return None
        exact = self.values.exact.get(" ".join(text.split()))
        if exact is not None:
            return exact
        for pattern, fields, translated in self.values.patterns:
            match = pattern.fullmatch(text)
            if match:
                for field, value in zip(fields, match.groups()):
                    translated = translated.replace(field, self.value(value))
                return translated
        return None

    @functools.lru_cache(maxsize=4096)
    def value(self, text, spec=""):
        """A field's formatted value in the catalogue's language: translated whole, else line
        by line (a report a function built), else item by item (a list joined with ", ", when
        the catalogue has each item that has a word),
        unchanged when the catalogue has none. A translation takes the columns the English
        took, aligned as the field's format spec `spec` aligns it (its padding's side
        without one), so that a printed table stays aligned."""
        if not text.strip():
            return text
        core = text.strip(" ")
        translated = self.translate(core) if "\n" not in core else None
        if translated is None and "\n" in text:
            return "\n".join(self.value(line) for line in text.split("\n"))
        if translated is None and ", " in core:   # every item that has words translated
            items = core.split(", ")
            found = [self.translate(item) for item in items]
            if any(found) and all(t or not ENGLISH_WORD.search(i) for t, i in zip(found, items)):
                translated = "、".join(t or i for t, i in zip(found, items))
        if translated is None:
            return text
        room = max(columns(text) - columns(translated), 0)
        align = alignment(spec)
        if align == ">":
            return " " * room + translated
        if align == "^":
            return " " * (room // 2) + translated + " " * (room - room // 2)
        if align == "<":
            return translated + " " * room
        # no format spec (str() of a value, a line of a report): its indentation kept, and
        # its padding after it when it had some
        indent = text[:len(text) - len(text.lstrip(" "))]
        if text.endswith(" "):
            return indent + translated + " " * max(room - len(indent), 0)
        return indent + translated

    def text(self, message, values):
        """The printed text of the print call whose template is `message`, its fields'
        formatted values `values` (in the English template's order), each a string or a
        (string, the format spec that made it). A line as wide in English as the title
        line of the table being printed (self.table) is one of its rows: its values in the
        columns the titles widened are padded as wide."""
        english = pieces(message)
        by_field, starts, english_line = {}, {}, ""
        for is_field, part in english:   # (each field's column in the English line)
            if not is_field:
                english_line += part
                continue
            value = values[len(starts)]
            value = value if isinstance(value, tuple) else (value, "")
            by_field.setdefault(part, []).append(value)
            starts[(part, len(by_field[part]) - 1)] = columns(english_line)
            english_line += value[0]
        one_line = "\n" not in english_line
        if self.table is not None and (not one_line or columns(english_line) != self.table[0]):
            self.table = None                    # (a line of another width: the table ended)
        row = self.table[1] if self.table is not None else {}
        used = {field: 0 for field in by_field}
        shown, wider = "", []
        for is_field, part in pieces(self.templates.get(message, message)):
            if not is_field:
                shown += part
                continue
            filled = by_field.get(part)
            if not filled:           # (a translation keeps its template's fields: tested)
                shown += part
                continue
            nth = used[part] % len(filled)
            english, spec = filled[nth]
            value = self.value(english, spec)
            used[part] += 1
            surplus = columns(value) - columns(english)
            side = alignment(spec) or ("<" if english.endswith(" ") else None)
            if surplus > 0 and side is not None:
                wider.append((len(shown), len(shown) + len(value), surplus, side,
                              starts[(part, nth)]))
            elif starts[(part, nth)] in row:
                value = _widened(value, *row[starts[(part, nth)]])
            shown += value
        widened = {}
        for start, end, surplus, side, column in reversed(wider):
            shown, left = _make_room(shown, start, end, surplus, side)
            if left:
                widened[column] = (left, side)
        if widened and one_line:
            self.table = (columns(english_line), {**row, **widened})
        return shown


# --------------------------------------------------------------------------- the kernel
class TranslatePrints(ast.NodeTransformer):
    """Each print call of a cell rewritten to print its translation: `print(a, b, end=e)`
    becomes `print(print_language.printed(template, [value of each field]), end=e)`, the
    fields evaluated in the order print evaluates its arguments, each formatted as in the
    code (an f-string's field with its conversion and format spec; an argument as print
    writes it, str())."""

    def visit_Call(self, node):
        self.generic_visit(node)
        found = template(node)
        if found is None:
            return node
        message, fields = found
        values = []
        for field in fields:
            if isinstance(field, ast.FormattedValue):
                spec = field.format_spec
                spec = ("".join(v.value for v in spec.values) if spec is not None and all(
                    isinstance(v, ast.Constant) for v in spec.values) else "")
                values.append(ast.Tuple(elts=[ast.JoinedStr(values=[field]), ast.Constant(spec)],
                                        ctx=ast.Load()))
            else:
                values.append(ast.Call(func=ast.Attribute(
                    value=_module("builtins"), attr="str", ctx=ast.Load()), args=[field], keywords=[]))
        text = ast.Call(func=ast.Attribute(value=_module(__name__), attr="printed", ctx=ast.Load()),
                        args=[ast.Constant(message), ast.List(elts=values, ctx=ast.Load())],
                        keywords=[])
        keywords = [k for k in node.keywords if k.arg != "sep"]
        return ast.copy_location(ast.Call(func=node.func, args=[text], keywords=keywords), node)


def _module(name):
    """`__import__(name)`: the module, whatever the cell's namespace holds."""
    return ast.Call(func=ast.Name(id="__import__", ctx=ast.Load()), args=[ast.Constant(name)],
                    keywords=[])


_installed = None


def printed(message, values):
    """The text a translated print call prints (TranslatePrints' calls)."""
    return _installed.text(message, values)


def install(language, catalogue=None):
    """Prints in `language` from now on, in this IPython kernel (its startup file calls it)."""
    global _installed
    _installed = catalogue or Printed.read(language)
    from IPython import get_ipython
    shell = get_ipython()
    if shell is not None:
        shell.ast_transformers.append(TranslatePrints())
        # (a table's rows are printed by the cell that printed its titles)
        shell.events.register("pre_run_cell", lambda *info: _installed.end_table())
