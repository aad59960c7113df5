"""The labels of the figures the chapter notebooks plot (matplotlib), as gettext messages
for the editions in other languages (issue 24; _ext/plot_language.py draws them translated).

`extract` (`make gettext`) reads the code cells of every chapter notebook and finds each
string that reaches a matplotlib text (a title, an axis label, a legend entry, a tick label,
a colour bar's label, a text drawn in the axes): written there, or through the names,
containers, loops and functions it passes on the way (Flow). Each becomes a message of
_build/gettext/plots.pot; an f-string becomes one message with its fields kept as they are
written (`layer {n}, head {i}`), flagged `python-brace-format`, whose translation places (or
leaves out) the same fields. Labels with no English word (code, shapes, maths, numbers) are
not messages. `make locales` merges the template into locales/<language>/LC_MESSAGES/plots.po,
which translators fill in (tests/test_plot_labels.py holds it complete and current).

    python _ext/plot_labels.py extract OUT.pot     (`make gettext`)
"""
import argparse
import ast
import functools
import json
import sys
from collections import defaultdict
from pathlib import Path

from plot_language import BRACE_FORMAT, ENGLISH_WORD, FIELD, MATHS, REPO  # (this folder)

# matplotlib's calls that make a text, and the position of the text among their arguments
TEXT_ARGUMENT = {"set_title": 0, "set_xlabel": 0, "set_ylabel": 0, "suptitle": 0,
                 "supxlabel": 0, "supylabel": 0, "set_label": 0, "title": 0, "xlabel": 0,
                 "ylabel": 0, "text": 2, "figtext": 2, "annotate": 0, "set_xticks": 1,
                 "set_yticks": 1, "set_xticklabels": 0, "set_yticklabels": 0, "legend": 1}
# keyword arguments that are texts, in any call (ax.set(title=...), plot(label=...), colorbar)
TEXT_KEYWORDS = {"label", "title", "xlabel", "ylabel"}
# str methods whose result is their string changed (a label broken into lines, say), and
# textwrap's functions of a string (their first argument)
STRING_METHODS = {"replace", "strip", "rstrip", "lstrip", "capitalize", "title", "lower",
                  "upper", "format", "removeprefix", "removesuffix"}
TEXTWRAP = {"fill", "wrap", "shorten", "dedent", "indent"}



def code_cells(notebook_path):
    """[(cell index, Python source)] of a notebook's code cells, IPython's magics turned into
    the calls they stand for (`%pip` becomes get_ipython().run_line_magic(...))."""
    from IPython.core.inputtransformer2 import TransformerManager
    transform = TransformerManager().transform_cell
    cells = json.loads(Path(notebook_path).read_text(encoding="utf-8"))["cells"]
    return [(i, transform("".join(c["source"]) if isinstance(c["source"], list) else c["source"]))
            for i, c in enumerate(cells) if c["cell_type"] == "code"]


def _path_matches(prefix, path):
    """Whether a binding that holds its value at `prefix` (("value", key) for X[key] = v,
    ("elem",) for X.append(v)) answers a look-up along `path`."""
    if len(prefix) > len(path):
        return False
    for want, have in zip(prefix, path):
        if want == ("key",) and have == ("elem",):  # iterating a dict gives its keys
            continue
        if want[0] == "value" and have[0] == "value":
            if want[1] is not None and have[1] is not None and want[1] != have[1]:
                return False
            continue
        if want != have:
            return False
    return True


class Flow:
    """Where the strings of one notebook (or module) go: which string literals and f-strings
    reach a matplotlib text. Values are followed through names (_reaching: the bindings a
    use can see), tuple unpacking, for loops and comprehensions, containers (displays,
    X[k] = v, X.append, X.setdefault, X += [...], dict(...)), dict.items/keys/values,
    enumerate, zip, str methods, textwrap and ", ".join, the notebook's own functions (their
    parameters, locals and returns) and the functions it imports from the repository's
    solutions/ (their returns). A value is looked up along a path: ("item", i) its i-th
    item, ("elem",) any element of it, ("key",) a key, ("value", key or None) a value of a
    mapping."""

    def __init__(self, cells):
        # name: [(expression, where the name holds it, the path of the name in it,
        #         (cell, line) of the binding or None for a parameter's)]
        self.bindings = defaultdict(list)
        self.functions, self.parameters = {}, {}   # name: ast.FunctionDef, [its parameters]
        self.locals = {}                           # name: {its parameters and local names}
        self.scope = {}                            # id(node): the function it is in
        self.sources = {}             # id(string node): (its module's file, that module's Flow)
        self.trees = []
        for index, source in cells:
            tree = ast.parse(source)
            self.trees.append((index, tree))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef):
                    self.functions[node.name] = node
                    self.parameters[node.name] = [
                        a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
                    self.locals[node.name] = set(self.parameters[node.name]) | {
                        n.id for n in ast.walk(node)
                        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
                    for inner in ast.walk(node):   # (an outer function's, for a nested one)
                        if inner is not node:
                            self.scope.setdefault(id(inner), node.name)
        # name: (the repository's module it is imported from, its name there)
        self.imported = {alias.asname or alias.name: (node.module, alias.name)
                         for _, tree in self.trees for node in ast.walk(tree)
                         if isinstance(node, ast.ImportFrom) and node.module
                         and _repository_module(node.module) for alias in node.names}
        self.cell = {}                             # id(node): its cell's index
        self.extending = set()                     # id(value) of each X += value
        for index, tree in self.trees:
            for node in ast.walk(tree):
                self.cell[id(node)] = index
        for index, tree in self.trees:
            for node in ast.walk(tree):
                self._where = (index, getattr(node, "lineno", 0))
                self._bind(node, self.scope.get(id(node)))

    # ---- bindings
    def _bind_target(self, target, value, path, scope=None):
        """`target` = `value` projected along `path` (an assignment, a loop, unpacking)."""
        if isinstance(target, ast.Name):
            self.bindings[self._scoped(target.id, scope)].append((value, (), path, self._where))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for i, element in enumerate(target.elts):
                self._bind_target(element, value, path + (("item", i),), scope)
        elif (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
              and not path):                    # X[key] = value: X holds it
            key = target.slice.value if isinstance(target.slice, ast.Constant) else None
            name = self._scoped(target.value.id, scope)
            self.bindings[name].append((value, (("value", key),), (), self._where))
            self.bindings[name].append((target.slice, (("key",),), (), self._where))

    def _scoped(self, name, scope):
        """A function's parameter or local name is its own (function.name): the cells' names
        are one namespace, a function's locals are not in it."""
        return f"{scope}.{name}" if scope and name in self.locals[scope] else name

    def _bind(self, node, scope):
        """The bindings that the statement or call `node` (in function `scope`) makes."""
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self._bind_target(target, node.value, (), scope)
        elif isinstance(node, ast.AugAssign):      # X += [...]: X holds those too
            self.extending.add(id(node.value))
            self._bind_target(node.target, node.value, (), scope)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self._bind_target(node.target, node.value, (), scope)
        elif isinstance(node, (ast.For, ast.comprehension)):
            self._bind_target(node.target, node.iter, (("elem",),), scope)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("append", "add") and isinstance(node.func.value, ast.Name)
              and node.args):                   # X.append(value): X holds it
            name = self._scoped(node.func.value.id, scope)
            self.bindings[name].append((node.args[0], (("elem",),), (), self._where))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "setdefault" and isinstance(node.func.value, ast.Name)
              and node.args):                   # X.setdefault(key, value): X holds both
            name = self._scoped(node.func.value.id, scope)
            self.bindings[name].append((node.args[0], (("key",),), (), self._where))
            if len(node.args) > 1:
                self.bindings[name].append((node.args[1], (("value", None),), (), self._where))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in self.functions):
            function = node.func.id
            for parameter, argument in zip(self.parameters[function], node.args):
                if not isinstance(argument, ast.Starred):
                    self.bindings[f"{function}.{parameter}"].append((argument, (), (), None))
            for keyword in node.keywords:
                if keyword.arg in self.parameters[function]:
                    self.bindings[f"{function}.{keyword.arg}"].append((keyword.value, (), (), None))
        elif isinstance(node, ast.FunctionDef):
            arguments = node.args.posonlyargs + node.args.args
            for parameter, default in zip(reversed(arguments), reversed(node.args.defaults)):
                self.bindings[f"{node.name}.{parameter.arg}"].append((default, (), (), None))

    # ---- look-ups
    def _reaching(self, name_node):
        """The bindings of a name that its use `name_node` can see: in a function, all of
        them (a function runs when it is called); in a cell, the ones before it, back to the
        latest cell that binds the name anew (a later X[k] = v or X.append(v) only adds to
        X), so that a loop variable reused from cell to cell (label, name) is not every
        string it was ever given."""
        scope = self.scope.get(id(name_node))
        entries = self.bindings.get(self._scoped(name_node.id, scope), [])
        if scope is not None:
            return [entry[:3] for entry in entries]
        here = (self.cell[id(name_node)], name_node.lineno)
        before = sorted((e for e in entries if e[3] is not None and e[3] <= here),
                        key=lambda e: e[3], reverse=True)
        reaching, last_cell = [], None
        for entry in before:
            if last_cell is not None and entry[3][0] != last_cell:
                break
            reaching.append(entry[:3])
            if entry[1] == () and id(entry[0]) not in self.extending:  # bound anew
                last_cell = entry[3][0]
        return reaching or [entry[:3] for entry in entries]

    def strings(self, node, path=(), seen=None):
        """The string literals and f-strings (ast nodes) that `node` can be, along `path`."""
        seen = set() if seen is None else seen
        if (id(node), path) in seen:
            return
        seen.add((id(node), path))
        found = functools.partial(self.strings, seen=seen)
        head, rest = (path[0], path[1:]) if path else (None, ())
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str) and not path:
                yield node
        elif isinstance(node, ast.JoinedStr):
            if not path:
                yield node
        elif isinstance(node, ast.Name):
            for value, prefix, projection in self._reaching(node):
                if _path_matches(prefix, path):
                    yield from found(value, projection + path[len(prefix):])
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            if head is not None and head[0] == "item" and isinstance(node, ast.Tuple):
                if head[1] < len(node.elts):
                    yield from found(node.elts[head[1]], rest)
            elif head in (None, ("elem",)):       # a list of labels, or any element of it
                for element in node.elts:
                    yield from found(element, rest)
        elif isinstance(node, ast.Dict):
            if head in (("elem",), ("key",)):
                for key in node.keys:
                    if key is not None:
                        yield from found(key, rest)
            elif head is not None and head[0] == "value":
                for key, value in zip(node.keys, node.values):
                    if head[1] is None or not isinstance(key, ast.Constant) or key.value == head[1]:
                        yield from found(value, rest)
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            if head in (None, ("elem",)):
                yield from found(node.elt, rest)
        elif isinstance(node, ast.DictComp):
            if head in (("elem",), ("key",)):
                yield from found(node.key, rest)
            elif head is not None and head[0] == "value":
                yield from found(node.value, rest)
        elif isinstance(node, ast.Subscript):
            key = node.slice.value if isinstance(node.slice, ast.Constant) else None
            yield from found(node.value, (("value", key),) + path)
        elif isinstance(node, ast.IfExp):
            yield from found(node.body, path)
            yield from found(node.orelse, path)
        elif isinstance(node, ast.BoolOp):
            for value in node.values:
                yield from found(value, path)
        elif isinstance(node, ast.Starred):
            yield from found(node.value, path)
        elif isinstance(node, ast.Call):
            yield from self._call_strings(node, path, found)

    def _call_strings(self, node, path, found):
        head, rest = (path[0], path[1:]) if path else (None, ())
        function = node.func
        if isinstance(function, ast.Attribute):
            method, owner = function.attr, function.value
            if method == "items" and head == ("elem",) and rest:
                item, after = rest[0], rest[1:]
                if item == ("item", 0):
                    yield from found(owner, (("key",),) + after)
                elif item == ("item", 1):
                    yield from found(owner, (("value", None),) + after)
            elif method == "keys" and head == ("elem",):
                yield from found(owner, (("key",),) + rest)
            elif method == "values" and head == ("elem",):
                yield from found(owner, (("value", None),) + rest)
            elif method in STRING_METHODS:
                yield from found(owner, path)
            elif method in ("split", "splitlines") and head == ("elem",):
                yield from found(owner, rest)       # a line of the label: the label's message
            elif (method in TEXTWRAP and isinstance(owner, ast.Name) and owner.id == "textwrap"
                  and node.args):
                yield from found(node.args[0], path if method != "wrap" else rest)
            elif method == "join" and node.args:
                yield from found(node.args[0], (("elem",),) + path)
        elif isinstance(function, ast.Name):
            name = function.id
            if name == "enumerate" and head == ("elem",) and rest and rest[0] == ("item", 1):
                yield from found(node.args[0], (("elem",),) + rest[1:])
            elif name == "zip" and head == ("elem",) and rest and rest[0][0] == "item":
                if rest[0][1] < len(node.args):
                    yield from found(node.args[rest[0][1]], (("elem",),) + rest[1:])
            elif name in ("list", "tuple", "sorted", "reversed", "str") and node.args:
                yield from found(node.args[0], path)
            elif name == "dict" and head is not None and head[0] == "value":
                for keyword in node.keywords:
                    if keyword.arg is None or head[1] is None or keyword.arg == head[1]:
                        yield from found(keyword.value, rest)
                for argument in node.args:   # dict(other, key=value): other's values too
                    yield from found(argument, path)
            elif name in self.functions:
                for statement in ast.walk(self.functions[name]):
                    if isinstance(statement, ast.Return) and statement.value is not None:
                        yield from found(statement.value, path)
            elif name in self.imported:
                yield from self.imported_returns(name, path)

    def imported_returns(self, name, path):
        """What the function `name`, imported from a module of the repository (solutions/),
        returns along `path`, found by that module's own Flow."""
        module, function = self.imported[name]
        flow = _module_flow(module)
        if function in flow.functions:
            for statement in ast.walk(flow.functions[function]):
                if isinstance(statement, ast.Return) and statement.value is not None:
                    for string in flow.strings(statement.value, path):
                        self.sources[id(string)] = flow.sources.get(id(string)) or (
                            _repository_module(module), flow)
                        yield string

    def text_arguments(self):
        """The expressions that matplotlib draws as text: the arguments of TEXT_ARGUMENT's
        calls at their position, TEXT_KEYWORDS' values, and the arguments of the notebook's
        functions that pass a parameter on to one of them."""
        sinks, parameters = [], set()
        for _, tree in self.trees:
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                sinks += [k.value for k in node.keywords if k.arg in TEXT_KEYWORDS]
                position = (TEXT_ARGUMENT.get(node.func.attr)
                            if isinstance(node.func, ast.Attribute) else None)
                if position is None:
                    continue
                if node.args and isinstance(node.args[0], ast.Starred):  # f(*(ticks, labels))
                    sinks.append(_Item(node.args[0].value, position))
                elif position < len(node.args):
                    sinks.append(node.args[position])
        return sinks

    def labels(self):
        """The string nodes that reach a matplotlib text, with the strings that fill their
        fields when they are f-strings (each field's expression followed in turn, by the
        Flow of the module the f-string is in)."""
        found, queue = [], [(self, expression) for expression in self.text_arguments()]
        seen = set()
        while queue:
            flow, expression = queue.pop()
            strings = (flow.strings(expression.node, (("item", expression.index),))
                       if isinstance(expression, _Item) else flow.strings(expression))
            for string in strings:
                if id(string) in seen:
                    continue
                seen.add(id(string))
                found.append(string)
                if isinstance(string, ast.JoinedStr):
                    owner = self.sources.get(id(string), (None, flow))[1]
                    queue += [(owner, v.value) for v in string.values
                              if isinstance(v, ast.FormattedValue)]
        return found


def _repository_module(module):
    """The file of `module` when it is one of the repository's own (solutions.sdpa_backends:
    solutions/sdpa_backends.py), else None."""
    path = REPO.joinpath(*module.split(".")).with_suffix(".py")
    return path if path.is_file() and module.split(".")[0] in ("solutions",) else None


@functools.lru_cache(maxsize=None)
def _module_flow(module):
    return Flow([(0, _repository_module(module).read_text(encoding="utf-8"))])


class _Item:
    """The `index`-th item of the expression `node` (a starred argument's)."""

    def __init__(self, node, index):
        self.node, self.index = node, index


def message(node):
    """The catalogue's message of a string node: the string itself, or an f-string with each
    field written as in the source, `{expression}` (its format spec and conversion left
    out: a translation places the value, the code formats it)."""
    if isinstance(node, ast.Constant):
        return node.value
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(value.value.replace("{", "{{").replace("}", "}}"))
        else:
            parts.append("{" + ast.unparse(value.value) + "}")
    return "".join(parts)


def is_prose(text):
    """Whether a label has an English word outside its fields and maths (else it is code,
    a shape, maths or a number, the same in every language)."""
    return bool(ENGLISH_WORD.search(MATHS.sub(" ", FIELD.sub(" ", text))))


def chapter_notebooks():
    """The chapter notebooks, chapters/NN_*.ipynb, in order."""
    return sorted((REPO / "chapters").glob("[0-9][0-9]_*.ipynb"))


def extract(notebooks=None):
    """{message: (is an f-string's, [(notebook relative path, cell index)])} of every plot
    label of the chapter notebooks."""
    messages = {}
    for path in notebooks or chapter_notebooks():
        cells = code_cells(path)
        flow = Flow(cells)
        where = {}
        for index, tree in flow.trees:
            for node in ast.walk(tree):
                where[id(node)] = index
        for node in flow.labels():
            text = message(node)
            if not is_prose(text):
                continue
            formatted = isinstance(node, ast.JoinedStr)
            _, places = messages.setdefault(text, (formatted, []))
            module = flow.sources.get(id(node), (None, None))[0]
            place = ((str(module.relative_to(REPO)), None) if module
                     else (str(path.relative_to(REPO)), where.get(id(node))))
            if place not in places:
                places.append(place)
    return messages


def write_template(path, notebooks=None):
    """The messages of extract() as a gettext template (for sphinx-intl, like the pages')."""
    return write_messages(path, extract(notebooks), "plots")


def write_messages(path, messages, project):
    """{text: (formatted, [(file, cell or None)])} as the gettext template `path` of
    `project`, each message with the places it comes from (also print_messages')."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import write_po
    catalogue = Catalog(project=project, fuzzy=False)
    for text, (formatted, places) in sorted(messages.items()):
        catalogue.add(text, flags=[BRACE_FORMAT] if formatted else [],
                      auto_comments=[", ".join(name if cell is None else f"{name} cell {cell}"
                                               for name, cell in places)])
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as file:
        write_po(file, catalogue, width=0, omit_header=False)
    return catalogue


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    template = sub.add_parser("extract", help="write the plot labels' gettext template")
    template.add_argument("output", type=Path)
    args = parser.parse_args(argv)
    catalogue = write_template(args.output)
    print(f"plot_labels: {len(catalogue)} messages into {args.output}")


if __name__ == "__main__":
    sys.exit(main())
