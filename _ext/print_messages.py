"""What the chapter notebooks' code prints, as gettext messages for the editions in other
languages (issue 24, item 4; _ext/print_language.py prints them translated).

`extract` (`make gettext`) reads the code cells of every chapter notebook and makes a message
of each print call: its template (print_language.template: the arguments joined by the
separator, an f-string's fields written as in the code, `{name}`, any other argument a field,
`{tuple(output.shape)}`), flagged `python-brace-format` when it has fields. Then the strings
that can fill those fields, found as _ext/plot_labels.py finds a plot's labels (through
names, containers, loops, the notebook's functions and the functions of solutions/ that it
calls: a role's name, a table's column title, a line of a report), each a message too, an
f-string's or a `+` of strings' as a pattern; and the recorded data a print shows
(recorded_values: a field `recorded['cache']` takes the strings that chapters/data/*.json
holds under the key "cache", a machine's description, a call's shapes). Messages with no
English word (code, shapes, maths, numbers, a file's path) are left out. `make locales` merges the template into
locales/<language>/LC_MESSAGES/prints.po, which translators fill in
(tests/test_print_messages.py holds it complete and current).

    python _ext/print_messages.py extract OUT.pot     (`make gettext`)
"""
import argparse
import ast
import functools
import json
import sys
from pathlib import Path

import plot_labels  # (this folder)
from plot_language import REPO
from print_language import _is_text, template, text_template


class PrintFlow(plot_labels.Flow):
    """plot_labels.Flow with print's arguments as the sinks, and a `+` of strings as a
    string of its own (a report's line: "  runs: " + ", ".join(ran))."""

    def strings(self, node, path=(), seen=None):
        if isinstance(node, ast.BinOp) and _is_text(node):
            if not path:
                yield node
            return
        yield from super().strings(node, path, seen)

    def _call_strings(self, node, path, found):
        if isinstance(node.func, ast.Name) and node.func.id in self.imported:
            self._bind_imported_arguments(node)
        yield from super()._call_strings(node, path, found)

    def _bind_imported_arguments(self, call):
        """A function of solutions/ called with what another function of the same module
        returns (report_probe(probe(DEVICE))): its parameter holds that return in the
        module's own Flow, so that the strings it prints are followed there."""
        module, function = self.imported[call.func.id]
        flow = _module_flow(module)
        if function not in flow.functions:
            return
        for parameter, argument in zip(flow.parameters[function], call.args):
            if (isinstance(argument, ast.Call) and isinstance(argument.func, ast.Name)
                    and self.imported.get(argument.func.id, (None,))[0] == module):
                inner = self.imported[argument.func.id][1]
                key = f"{function}.{parameter}"
                if not any(getattr(v.func, "id", None) == inner for v, *_ in flow.bindings[key]
                           if isinstance(v, ast.Call)):
                    flow.bindings[key].append(
                        (ast.Call(func=ast.Name(id=inner, ctx=ast.Load()), args=[], keywords=[]),
                         (), (), None))

    def imported_returns(self, name, path):
        module, function = self.imported[name]
        flow = _module_flow(module)
        if function in flow.functions:
            for statement in ast.walk(flow.functions[function]):
                if isinstance(statement, ast.Return) and statement.value is not None:
                    for string in flow.strings(statement.value, path):
                        self.sources[id(string)] = flow.sources.get(id(string)) or (
                            plot_labels._repository_module(module), flow)
                        yield string

    def print_calls(self):
        """[(cell index, the call, its template, its fields)] of every print call."""
        found = []
        for index, tree in self.trees:
            for node in ast.walk(tree):
                made = template(node)
                if made is not None:
                    found.append((index, node, *made))
        return found

    def text_arguments(self):
        return [field.value if isinstance(field, ast.FormattedValue) else field
                for _, _, _, fields in self.print_calls() for field in fields]

    def labels(self):
        """The string nodes that can fill a print's fields, and the strings that fill theirs."""
        found, queue, seen = [], [(self, e) for e in self.text_arguments()], set()
        while queue:
            flow, expression = queue.pop()
            for string in flow.strings(expression):
                if id(string) in seen:
                    continue
                seen.add(id(string))
                found.append(string)
                owner = self.sources.get(id(string), (None, flow))[1]
                queue += [(owner, f.value if isinstance(f, ast.FormattedValue) else f)
                          for f in text_template(string)[1]]
        return found


# The recorded measurements the chapters print (their provenance, a table's values): the
# notebooks read them at run time, so their strings are found by the keys the prints show.
DATA = REPO / "chapters" / "data"


def _data_strings(value, key=None):
    """[(key, string)] of every string of the JSON value `value`, with the key of the dict
    that holds it (a list's items take the key of the list)."""
    if isinstance(value, str):
        return [(key, value)] if key is not None else []
    if isinstance(value, dict):
        return [found for name, item in value.items() for found in _data_strings(item, name)]
    if isinstance(value, list):
        return [found for item in value for found in _data_strings(item, key)]
    return []


def recorded_values(fields, data=DATA):
    """{string: data file name} of the recorded data (data/*.json) that the print fields
    `fields` show as they are: each field `x['key']` (an f-string's or an argument) takes
    every string that the files hold under "key" (what a function makes of them, a
    textwrap.fill of PyTorch's words, is not shown as recorded). A string with no space
    that is not a word (a path, a version: "2.13.0+cpu") is code."""
    keys = {field.slice.value for field in fields if isinstance(field, ast.Subscript)
            and isinstance(field.slice, ast.Constant) and isinstance(field.slice.value, str)}
    found = {}
    for path in sorted(Path(data).glob("*.json")):
        for key, string in _data_strings(json.loads(path.read_text(encoding="utf-8"))):
            if key in keys and (" " in string or string.isalpha()):
                found.setdefault(string, path)
    return found


@functools.lru_cache(maxsize=None)
def _module_flow(module):
    return PrintFlow([(0, plot_labels._repository_module(module).read_text(encoding="utf-8"))])


def extract(notebooks=None):
    """{message: (has fields, [(notebook or module relative path, cell index or None)])} of
    every print template and printed value of the chapter notebooks."""
    messages = {}

    def add(text, formatted, place):
        if not plot_labels.is_prose(text):
            return
        _, places = messages.setdefault(text, (formatted, []))
        if place not in places:
            places.append(place)

    for path in notebooks or plot_labels.chapter_notebooks():
        flow = PrintFlow(plot_labels.code_cells(path))
        where = {id(node): index for index, tree in flow.trees for node in ast.walk(tree)}
        name = str(path.relative_to(REPO))
        for index, _, text, fields in flow.print_calls():
            add(text, bool(fields), (name, index))
        for node in flow.labels():
            text, fields = text_template(node)
            module = flow.sources.get(id(node), (None, None))[0]
            add(text, bool(fields),
                (str(module.relative_to(REPO)), None) if module else (name, where.get(id(node))))
        for text, data in recorded_values(flow.text_arguments()).items():
            add(text, False, (str(data.relative_to(REPO)), None))
    return messages


def write_template(path, notebooks=None):
    """The messages of extract() as a gettext template (for sphinx-intl, like the pages')."""
    return plot_labels.write_messages(path, extract(notebooks), "prints")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    extraction = sub.add_parser("extract", help="write the printed messages' gettext template")
    extraction.add_argument("output", type=Path)
    args = parser.parse_args(argv)
    catalogue = write_template(args.output)
    print(f"print_messages: {len(catalogue)} messages into {args.output}")


if __name__ == "__main__":
    sys.exit(main())
