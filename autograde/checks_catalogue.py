"""The checks' messages as a gettext catalogue (issue 24): chapters/checks/*.py -> checks.pot
-> locales/<language>/LC_MESSAGES/checks.po (translated by hand) -> checks.mo in the kit.

Each checks module holds its English templates in one dict at its top,
`MESSAGES = translated(__name__) | {"key": "template", ...}` (chapters/checks/language.py);
extract_messages() is a Babel extraction method that reads them from the module's source
(no import: nothing runs) as pgettext messages whose context is "<module>.<key>", the
context the checks look them up with. `make gettext` runs it through pybabel (its mapping:
chapters/checks/babel.cfg) into _build/gettext/checks.pot, which `make locales` merges into
each language's checks.po as it merges the pages' templates. write_compiled() compiles a
catalogue into the .mo that the student's kit reads with the standard library's gettext.
"""
import ast
from pathlib import Path

from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

from autograde.paths import CHECKS, REPO

DOMAIN = "checks"
LOCALES = REPO / "locales"
# The keyword the extracted messages are given, for pybabel's -k option ("pgettext:1c,2"):
# argument 1 is the context, argument 2 the message.
KEYWORD = "pgettext"


def languages():
    """The languages that have a catalogue of the checks' messages, e.g. ["zh_CN"]."""
    return sorted(p.parent.parent.name for p in LOCALES.glob(f"*/LC_MESSAGES/{DOMAIN}.po"))


def catalogue_path(language):
    return LOCALES / language / "LC_MESSAGES" / f"{DOMAIN}.po"


def _constants(tree):
    """{name: str} of the module-level names bound to a string (MESSAGES may add them to a
    template: mha.py's INTERFACE)."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            try:
                value = _text(node.value, found)
            except ValueError:
                continue
            found[node.targets[0].id] = value
    return found


def _text(node, constants):
    """The string the expression `node` denotes: a literal, a module constant, or a sum of
    them. Raises ValueError for anything else (a template must be known without running)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left, constants) + _text(node.right, constants)
    raise ValueError(f"line {node.lineno}: not a constant string: {ast.unparse(node)[:80]}")


def _templates(node, constants, context):
    """[(line, context, English)] of the dict literal `node`, nested dicts flattened."""
    found = []
    for key, value in zip(node.keys, node.values):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            raise ValueError(f"line {node.lineno}: a MESSAGES key is not a string literal")
        where = f"{context}.{key.value}"
        if isinstance(value, ast.Dict):
            found += _templates(value, constants, where)
        else:
            found.append((value.lineno, where, _text(value, constants)))
    return found


def module_messages(source, module):
    """[(line, context, English)] of every template of the MESSAGES of the checks module
    `module` (e.g. "attention"), whose source is `source`; [] if it has none."""
    tree = ast.parse(source)
    constants = _constants(tree)
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] \
                == ["MESSAGES"]:
            value = node.value
            # translated(__name__) | {...}: the dict is the right operand
            if isinstance(value, ast.BinOp) and isinstance(value.op, ast.BitOr):
                value = value.right
            if not isinstance(value, ast.Dict):
                raise ValueError(f"{module}.py line {node.lineno}: MESSAGES is not a dict "
                                 "literal")
            return _templates(value, constants, module)
    return []


def extract_messages(fileobj, keywords, comment_tags, options):
    """Babel's extraction method for a checks module (see the module's doc): yields
    (line, KEYWORD, (context, English), comments)."""
    name = Path(getattr(fileobj, "name", "module.py")).stem
    source = fileobj.read().decode(options.get("encoding", "utf-8"))
    for line, context, english in module_messages(source, name):
        yield line, KEYWORD, (context, english), []


def all_messages(checks=CHECKS):
    """{context: English} of every checks module's MESSAGES, as extraction finds them."""
    found = {}
    for path in sorted(Path(checks).glob("*.py")):
        for _, context, english in module_messages(path.read_text(encoding="utf-8"), path.stem):
            found[context] = english
    return found


def read_catalogue(language):
    with open(catalogue_path(language), "rb") as file:
        return read_po(file, locale=language)


def write_compiled(locale_dir, modules):
    """<locale_dir>/<language>/LC_MESSAGES/checks.mo for every language with a catalogue,
    holding the messages of the checks `modules` only (a kit's: the grader-only modules'
    sentences stay with the grader), fuzzy translations left out as msgfmt does; returns
    their paths."""
    written = []
    for language in languages():
        catalogue = read_catalogue(language)
        for message in list(catalogue):
            if message.id and message.context.split(".", 1)[0] not in modules:
                catalogue.delete(message.id, context=message.context)
        target = Path(locale_dir) / language / "LC_MESSAGES" / f"{DOMAIN}.mo"
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as file:
            write_mo(file, catalogue)
        written.append(target)
    return written
