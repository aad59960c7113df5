"""Forbidden shortcuts, decided from the submitted source (no student code runs here).

Whether an exercise delegated its work to PyTorch (torch.softmax in a softmax written by
hand, F.scaled_dot_product_attention in an attention) is a fact about the student's code.
A check inside the student's process could only *report* it, and that process runs code
that can switch any check off (a thread escapes a TorchFunctionMode, DisableTorchFunction
disables it, torch.ops.aten calls below it, a patched checks module reports what it likes).
So the grader reads it from the source, with `ast`:

- a name a spec forbids (checks.common.Forbidden: `torch.softmax`, `x.softmax`, an import of
  it, getattr(F, "softmax")) in the exercise's own cell loses the spec's tests;
- code anywhere in the submission that reaches what could switch a run-time check off (the
  checks, the grader, torch's dispatch internals or torch.ops, threads, eval/exec/compile,
  dynamic imports) loses the tests of every spec of the chapter: the submission runs in
  one process, so a patch in one cell reaches every exercise; replacing the function a
  spec forbids (F.scaled_dot_product_attention = ...) loses that spec's tests; a getattr
  with a computed name, or another patch of torch, loses them in the exercise's own cell;
- everything found is also flagged for the instructor ("suspicious" problems), in every
  chapter, forbids or not.
Each verdict is a plain message that names what was found and where.
"""
import ast
import builtins
import functools
import re
from dataclasses import dataclass

import torch

from autograde import messages
from chapters.checks import language as checks_language
from autograde import notebook  # notebook.parse: every parse in the grader's process, one lock

# what may call a forbidden function out of a check's sight, but only from code the exercise
# runs (its own cell, and the functions, classes and names of other cells it uses): weak
WEAK_MODULES = {"threading", "_thread", "concurrent", "multiprocessing", "ctypes", "gc",
                "inspect", "torch.multiprocessing"}
WEAK_ATTRIBUTES = {"__torch_function__", "__torch_dispatch__", "fork"}
# modules a solution never imports, and what importing one could do
REACHING_MODULES = {
    "checks": "the checks that judge it", "autograde": "the grader's runtime",
    "importlib": "dynamic imports", "threading": "threads", "_thread": "threads",
    "concurrent": "threads", "multiprocessing": "other processes", "ctypes": "raw memory",
    "gc": "every live object", "inspect": "other code's frames", "builtins": "builtins",
    "torch._C": "torch's dispatch internals", "torch.ops": "torch's operators below the "
    "dispatcher", "torch._ops": "torch's operators below the dispatcher",
    "torch.overrides": "torch's function modes", "torch.library": "torch's operator registry",
    "torch.utils._python_dispatch": "torch's dispatch modes",
    "torch.multiprocessing": "other processes",
}
# attributes that reach the same places, wherever they hang
REACHING_ATTRIBUTES = {
    "_C", "_ops", "overrides", "__torch_function__", "__torch_dispatch__",
    "TorchFunctionMode", "TorchDispatchMode", "DisableTorchFunction",
    "DisableTorchFunctionSubclass", "_DisableTorchFunction", "_pop_mode", "_push_mode",
    "_pop_mode_temporarily", "_get_current_function_mode_stack", "_python_dispatch",
    "__code__", "__globals__", "__builtins__", "__dict__", "__subclasses__", "__closure__",
    "__import__", "__getattribute__",
    # a builtin function's module (print.__self__ is builtins), classes' ancestors, frames
    "__self__", "__mro__", "__bases__", "__base__", "f_globals", "f_locals", "f_builtins",
    "f_back", "gi_frame", "tb_frame",
}
# attributes that reach them only on a particular object (torch.ops, sys.modules, ...)
REACHING_ON = {("torch", "ops"), ("torch", "library"), ("sys", "modules"), ("os", "fork"),
               ("sys", "_getframe"), ("sys", "settrace"), ("sys", "setprofile")}
# builtins that run or fetch code by name
REACHING_CALLS = {"eval", "exec", "compile", "__import__", "globals", "vars", "setattr",
                  "delattr", "breakpoint"}
TORCH_ROOTS = {"torch", "F", "nn"}  # and whatever names the submission imports torch as
# What reaches attributes or modules by a name computed at run time: followed through
# aliases (fetch = getattr, import sys as system, from operator import attrgetter as a),
# star imports and attribute chains (autograde.forbids.bindings), never by spelling.
REFLECTING = {"builtins.getattr", "builtins.setattr", "builtins.delattr", "builtins.vars",
              "builtins.globals", "builtins.locals", "builtins.__import__", "builtins.eval",
              "builtins.exec", "builtins.compile", "builtins.breakpoint",
              "operator.attrgetter", "operator.methodcaller", "builtins.object.__getattribute__",
              "builtins.type.__getattribute__"}
# modules whose objects reach the rest: used only as `module.attribute`, or aliased
REFLECTING_MODULES = {"sys", "builtins", "operator", "importlib", "inspect", "gc", "ctypes",
                      "types", "os"}
# star imports whose names are known to hold nothing of the above (the rest: unresolved)
STAR_SAFE = {"math", "torch", "torch.nn", "torch.nn.functional", "numpy", "typing",
             "dataclasses", "collections", "itertools", "functools", "random", "statistics"}
_REFLECTING_BUILTINS = {p.split(".")[1] for p in REFLECTING if p.startswith("builtins.")}
# torch's namespaces, whose names a computed getattr could be after (see _bounded_name)
TORCH_NAMESPACES = (torch, torch.nn, torch.nn.functional, torch.Tensor, torch.nn.Module,
                    torch.linalg, torch.special, torch.fft, torch.nn.init, torch.autograd)
_IDENTIFIER_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class Finding:
    where: str        # "cell stable_softmax, line 4" (the step's label, autograde.notebook)
    key: str          # what it does, as the template finding.<key> of autograde.messages:
    fields: tuple     # its ((name, value), ...): "imports", (("module", "checks"),)
    strong: bool      # could switch a check off from any cell (else: only in its own)
    patched: str = ""  # the attribute of torch it replaces: strong where a spec names it

    def what(self, language=messages.ENGLISH):
        """What it does, in `language`: "imports checks.attention", "uses torch.ops..."."""
        return messages.text(f"finding.{self.key}", language, **dict(self.fields))


def _found(where, key, strong, patched="", **fields):
    """Finding(where, key, fields, strong, patched), its fields given by name."""
    return Finding(where, key, tuple(fields.items()), strong, patched)


def _unparse(node, limit=60):
    try:
        text = ast.unparse(node)
    except (RecursionError, MemoryError, ValueError):
        text = f"....{getattr(node, 'attr', '')}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _root(node):
    """The name an attribute chain starts from (`torch` of torch.nn.functional.softmax)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _parse(source):
    try:
        return notebook.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _line(label, node, is_solution=True):
    """The step's label with the node's line in the cell ("cell x, line 3"): a solution
    step is one statement starting at the label's line (autograde.notebook.statements), its
    node's line counted from there; another step is one definition written back, whose
    label already names its line."""
    head, _, first = label.rpartition(", line ")
    if is_solution and head and first.isdigit() and hasattr(node, "lineno"):
        return f"{head}, line {int(first) + node.lineno - 1}"
    return label


def _module_reach(name):
    """What importing module `name` reaches, or None."""
    for prefix, what in REACHING_MODULES.items():
        if name == prefix or name.startswith(prefix + "."):
            return what
    return None


def _weak_module(name):
    return any(name == m or name.startswith(m + ".") for m in WEAK_MODULES)


def torch_aliases(steps):
    """The names the submission binds to torch or its submodules (import torch as t, ...)."""
    names = set(TORCH_ROOTS)
    for _, source, _ in steps:
        tree = _parse(source)
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Import):
                names |= {a.asname or a.name.split(".")[0] for a in node.names
                          if a.name.split(".")[0] == "torch"}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
                names |= {a.asname or a.name for a in node.names}
    return names


def bindings(steps):
    """{name: the dotted path it is bound to} over the whole submission (every step: a
    name bound in one cell reaches the others): imports (`import sys as system` -> sys,
    `from operator import attrgetter as a` -> operator.attrgetter) and assignments of a
    name, attribute or constant subscript (`fetch = getattr` -> builtins.getattr, `m =
    sys.modules` -> sys.modules), followed to a fixed point. Flat, without scopes: a name
    bound anywhere to one of these counts everywhere (conservative)."""
    bound, assigned = {}, []
    for _, source, _ in steps:
        tree = _parse(source)
        for node in _walk(tree) if tree else ():
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:  # (import sys: the name sys is the module, not a variable)
                        bound.setdefault(alias.name.split(".")[0], alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                for alias in node.names:
                    if alias.name != "*":
                        bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) \
                    and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                assigned += [(t.id, node.value) for t in targets if isinstance(t, ast.Name)]
    for _ in range(8):  # chains of aliases (a = getattr; b = a), a few deep
        changed = False
        for name, value in assigned:
            path = _path(value, bound)
            if path and path != name and bound.get(name) != path and path.split(".")[0] != name:
                bound[name], changed = path, True
        if not changed:
            break
    return bound


def _path(node, bound):
    """The dotted path `node` (a name, attribute chain or constant subscript) stands for,
    with names resolved through `bound` and builtins (getattr -> builtins.getattr); None
    for anything else."""
    parts = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, str):
            parts.append(f"[{node.slice.value}]")
            node = node.value
        else:
            break
    if not isinstance(node, ast.Name):
        return None
    root = bound.get(node.id) or (f"builtins.{node.id}" if node.id in _REFLECTING_BUILTINS
                                  else node.id)
    return ".".join([root] + parts[::-1])


def _path_reach(path):
    """What a resolved dotted path reaches, or None: a reaching module (torch._C..., and
    sys.modules-like pairs anywhere along it: os.sys.modules), a reaching attribute."""
    names = [p.strip("[]") for p in path.split(".")]
    if any(pair in REACHING_ON for pair in zip(names, names[1:])) \
            or any(n in REACHING_ATTRIBUTES for n in names[1:]):
        return "what a solution never reaches"
    return None


def _walk(tree):
    """ast.walk without recursion (a submission may nest expressions deeply)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(ast.iter_child_nodes(node))


@functools.lru_cache(maxsize=None)
def _watched_names():
    """Every attribute name the grader watches: torch's (any of them may be what a forbid
    names), the reaching attributes and the reflecting builtins, and a private one."""
    names = {n for space in TORCH_NAMESPACES for n in dir(space)}
    names |= REACHING_ATTRIBUTES | {attribute for _, attribute in REACHING_ON}
    names |= {p.rpartition(".")[2] for p in REFLECTING} | REACHING_CALLS
    return frozenset(names)


def _constant_ends(expression):
    """(prefix, suffix): the constant text that `expression`, a computed attribute name,
    surely starts and ends with: f"w_{i}" -> ("w_", ""), name + "_proj" -> ("", "_proj")."""
    if isinstance(expression, ast.JoinedStr):
        parts = expression.values
    elif isinstance(expression, ast.BinOp) and isinstance(expression.op, ast.Add):
        parts, todo = [], [expression]
        while todo:  # a + b + c is ((a + b) + c): flatten, left to right
            node = todo.pop()
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
                todo += [node.right, node.left]
            else:
                parts.append(node)
    else:
        return "", ""

    def text(node):
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) \
            else None
    prefix = text(parts[0]) if parts else None
    suffix = text(parts[-1]) if len(parts) > 1 else None
    return prefix or "", suffix or ""


def _bounded_name(expression):
    """True when the computed attribute name `expression` cannot be any name the grader
    watches (_watched_names), whatever its variable part: a constant prefix that no watched
    name starts with and that is not private (getattr(self, f"w_{i}"), one of an honest
    student's per-head weights), or a constant suffix that no watched name ends with and
    that cannot end a dunder (getattr(self, name + "_proj"))."""
    prefix, suffix = _constant_ends(expression)
    watched = _watched_names()
    if prefix and not prefix.startswith("_") \
            and not any(name.startswith(prefix) for name in watched):
        return True
    return bool(suffix) and not suffix.endswith("_") \
        and not any(name.endswith(suffix) for name in watched)



def _harmless_constant(value):
    """A constant attribute name that is neither watched nor private."""
    return isinstance(value, str) and not value.startswith("_") and value not in _watched_names()


def _loop_constants(name, node, parents, tree):
    """The string constants that a `for name in ("q_proj", "k_proj"):` loop binds `name` to,
    when `node` runs in that loop's body and nothing can bind the name otherwise there (no
    store in the body, no `global`/`nonlocal` of it anywhere, no function between the loop
    and `node`); else None."""
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return None
        if isinstance(parent, ast.For) and child in parent.body \
                and isinstance(parent.target, ast.Name) and parent.target.id == name:
            items = parent.iter.elts if isinstance(parent.iter, (ast.Tuple, ast.List)) else None
            if not items or not all(isinstance(e, ast.Constant) for e in items):
                return None
            stored = any(isinstance(n, ast.Name) and n.id == name
                         and isinstance(n.ctx, (ast.Store, ast.Del))
                         for statement in parent.body for n in ast.walk(statement))
            declared = any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names
                           for n in ast.walk(tree))
            return None if stored or declared else [e.value for e in items]
        child, parent = parent, parents.get(parent)
    return None


def _harmless_setattr(call, parents, tree):
    """setattr(obj, name, value) whose name is no name the grader watches: a constant that is
    neither watched nor private, a loop variable over such constants
    (`for name in ("q_proj", "k_proj", "v_proj"): setattr(self, name, nn.Linear(...))`), or
    a bounded computed one (setattr(self, f"w_{i}", ...), an honest student's per-head
    weights). Patching torch needs a name torch has."""
    if len(call.args) < 2:
        return False
    name = call.args[1]
    if isinstance(name, ast.Constant):
        return _harmless_constant(name.value)
    if isinstance(name, ast.Name):
        values = _loop_constants(name.id, call, parents, tree)
        if values is not None:
            return all(_harmless_constant(v) for v in values)
    return _bounded_name(name)


def _reflection(node, where, bound, parents):
    """[Finding] for one node: reflection followed through names (see REFLECTING)."""
    found = []
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        if any(a.name == "*" for a in node.names):
            if node.module in REFLECTING_MODULES or _module_reach(node.module):
                found.append(_found(where, "star_import", True, module=node.module))
            elif node.module not in STAR_SAFE:
                found.append(_found(where, "star_import", False, module=node.module))
        for alias in node.names:
            if (node.module, alias.name) in REACHING_ON or alias.name in REACHING_ATTRIBUTES \
                    or f"{node.module}.{alias.name}" in REFLECTING:
                found.append(_found(where, "imports_name", True, name=alias.name, module=node.module))
        return found
    if isinstance(node, ast.Constant) and isinstance(node.value, str) \
            and _IDENTIFIER_PATH.fullmatch(node.value):
        names = node.value.split(".")
        # torch's internals by name (a module's name alone, "checks", is a folder's too)
        if any(n in REACHING_ATTRIBUTES for n in names) or (
                names[0] == "torch" and _module_reach(node.value)):
            found.append(_found(where, "names_in_string", True, text=repr(node.value)))
        return found
    if not isinstance(node, (ast.Name, ast.Attribute)) or not isinstance(node.ctx, ast.Load):
        return found
    parent = parents.get(node)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        return found  # (the whole chain is looked at once, from its outermost attribute)
    path = _path(node, bound)
    if path is None:
        return found
    spelled = _unparse(node)
    called = isinstance(parent, ast.Call) and parent.func is node
    aliased = isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) \
        and parent.value is node
    if path in REFLECTING:
        name = path.rpartition(".")[2]
        if not called and not aliased:
            found.append(_found(where, "uses_as_value", True, name=name, code=spelled))
        elif spelled != name and spelled != path and not aliased:
            found.append(_found(where, "calls_renamed", True, name=name, code=spelled))
        elif called and path in ("operator.attrgetter", "operator.methodcaller",
                                 "builtins.getattr") and spelled != "getattr":
            if not all(isinstance(a, ast.Constant) for a in parent.args[:2]):
                found.append(_found(where, "calls_computed", True, name=name,
                                           code=_unparse(parent)))
        elif called and path == "builtins.getattr" and len(parent.args) >= 2 \
                and not isinstance(parent.args[1], ast.Constant) \
                and not _bounded_name(parent.args[1]):
            found.append(_found(where, "calls_computed", True, name="getattr",
                                       code=_unparse(parent)))
        return found
    root = path.split(".")[0]
    # (a module, only where an import bound the name: `types` is also torch_function's
    # argument, and `os` a variable's name)
    if root in REFLECTING_MODULES and path == root and not aliased \
            and isinstance(node, ast.Name) and bound.get(node.id) == root:
        found.append(_found(where, "module_as_value", True, module=root, code=spelled))
        return found
    # what reaching() finds by spelling (x._C, sys.modules, an import) is left to it
    spelled_too = isinstance(node, ast.Attribute) and (node.attr in REACHING_ATTRIBUTES or (
        isinstance(node.value, ast.Name) and (node.value.id, node.attr) in REACHING_ON))
    if _path_reach(path) and not spelled_too:
        found.append(_found(where, "uses_which_is", True, code=spelled, path=path))
    elif root != spelled.split(".")[0] and root != "builtins" and _module_reach(path):
        # a reaching module under another name (from torch import _C as c; c.x)
        found.append(_found(where, "uses_which_is", not _weak_module(path), code=spelled,
                             path=path))
    return found


def reaching(label, source, is_solution, aliases, bound=None):
    """[Finding] for one step: what in it could switch a run-time check off. The given cells'
    `from checks import X as alias` (outside the solution cells) is the course's own.
    `bound`: the submission's bindings() (names followed to what they are bound to)."""
    tree = _parse(source)
    found = []
    bound = {} if bound is None else bound
    parents = {child: node for node in (_walk(tree) if tree else ())
               for child in ast.iter_child_nodes(node)}
    for node in _walk(tree) if tree else ():
        where = _line(label, node, is_solution)
        found += _reflection(node, where, bound, parents)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _module_reach(alias.name):
                    found.append(_found(where, "imports", not _weak_module(alias.name),
                                        module=alias.name))
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            names = [f"{module}.{a.name}" for a in node.names]
            if node.level:
                found.append(_found(where, "imports_from", True, module=module))
            elif _module_reach(module) or any(_module_reach(n) for n in names):
                given = not is_solution and module == "checks"
                if not given:
                    found.append(_found(where, "imports", not _weak_module(module), module=module))
        elif isinstance(node, ast.Attribute):
            base = node.value.id if isinstance(node.value, ast.Name) else None
            if node.attr in REACHING_ATTRIBUTES or (base, node.attr) in REACHING_ON \
                    or (base in aliases and node.attr in ("ops", "library")):
                found.append(_found(where, "uses", node.attr not in WEAK_ATTRIBUTES,
                                    code=_unparse(node)))
            if isinstance(node.ctx, (ast.Store, ast.Del)) and _root(node) in aliases:
                found.append(_found(where, "replaces", False, node.attr, code=_unparse(node)))
        elif isinstance(node, ast.Name) and node.id in REACHING_ATTRIBUTES - {"__dict__"}:
            found.append(_found(where, "uses", True, code=node.id))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name in REACHING_CALLS and not (name == "setattr"
                                               and _harmless_setattr(node, parents, tree)):
                found.append(_found(where, "calls", True, name=name))

    return found


def forbidden_names(label, source, is_solution, spec, names=None):
    """[(where, name, text)] for one step an exercise runs: the names of torch `spec` forbids,
    as attributes (torch.softmax, x.softmax), imports (from torch... import softmax),
    constant getattr names (getattr(F, "softmax")) or plain names that torch may have bound
    (`names`: star_names(steps), after `from torch.nn.functional import *`)."""
    tree = _parse(source)
    found = []
    for node in _walk(tree) if tree else ():
        name = None
        if names and isinstance(node, ast.Name) and node.id in names and spec.matches(node.id):
            name, text = node.id, f"{node.id} (bound by a star import of torch)"
        elif isinstance(node, ast.Attribute) and spec.matches(node.attr):
            name, text = node.attr, _unparse(node)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            hit = [a.name for a in node.names if spec.matches(a.name)]
            if hit:
                name, text = hit[0], f"from {node.module} import {hit[0]}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "setattr") and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str) and spec.matches(node.args[1].value):
            name, text = node.args[1].value, _unparse(node)
        if name:
            found.append((_line(label, node, is_solution), name, text))
    return found


def star_names(steps):
    """Names a star import of a torch module may bind in the submission: every name used
    that no def, class, assignment or import of the submission binds (a star import's
    names cannot be listed from the source); empty without such an import."""
    trees = [_parse(source) for _, source, _ in steps]
    star = any(isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch"
               and any(a.name == "*" for a in node.names)
               for tree in trees for node in (_walk(tree) if tree else ()))
    if not star:
        return set()
    own, used = set(), set()
    for tree in trees:
        for node in _walk(tree) if tree else ():
            if isinstance(node, ast.Name):
                (own if isinstance(node.ctx, (ast.Store, ast.Del)) else used).add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                own |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
    return used - own - set(dir(builtins))


def _cell_of(label):
    """The grade id of a solution step's label ("cell stable_softmax, line 4")."""
    head = label.rpartition(", line ")[0]
    return head[len("cell "):] if head.startswith("cell ") else head


def _findings(steps, given):
    """[[Finding] of each step], the course's own steps (`given`: the steps of the source
    notebook's given cells, as autograde.notebook.plan writes them) finding nothing."""
    aliases, bound = torch_aliases(steps), bindings(steps)
    return [reaching(label, source, is_solution, aliases, bound)
            if is_solution or source not in given else [] for label, source, is_solution in steps]


def _bound(tree):
    """Names a step binds at its top level (def, class, import, assignment)."""
    names = set()
    for node in tree.body if tree else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            todo = list(node.targets if isinstance(node, ast.Assign) else [node.target])
            while todo:  # x = ..., a, (b, *c) = ...; not the base of torch.x = ...
                target = todo.pop()
                if isinstance(target, ast.Name):
                    names.add(target.id)
                elif isinstance(target, (ast.Tuple, ast.List)):
                    todo += target.elts
                elif isinstance(target, ast.Starred):
                    todo.append(target.value)
    return names


def used_by(steps, exercise):
    """Indices of the steps an exercise runs: its own cell's, and, transitively, those that
    bind a name they use (a helper of another cell, `_fast = F.scaled_...` above it)."""
    trees = [_parse(source) for _, source, _ in steps]
    binds = {}
    for index, tree in enumerate(trees):
        for name in _bound(tree):
            binds.setdefault(name, []).append(index)
    todo = [i for i, (label, _, is_solution) in enumerate(steps)
            if is_solution and _cell_of(label) == exercise]
    seen = set(todo)
    while todo:
        tree = trees[todo.pop()]
        for node in _walk(tree) if tree else ():
            if isinstance(node, ast.Name):
                for index in binds.get(node.id, ()):
                    if index not in seen:
                        seen.add(index)
                        todo.append(index)
    return sorted(seen)


def verdicts(steps, specs, given=frozenset(), language=messages.ENGLISH):
    """{test grade_id: message} of the tests that lose their points, from the submitted
    source: steps as autograde.notebook.plan gives them, specs the chapter's Forbidden. What
    counts: a name the spec forbids in code the exercise runs (used_by), something that
    could hide a call in that code, or anywhere something strong (see reaching()). The
    grader's sentences in `language` (the spec's own message is the checks')."""
    if not specs:
        return {}
    found = _findings(steps, given)
    starred = star_names(steps)
    lost = {}
    for spec in specs:
        runs = used_by(steps, spec.exercise)
        named = [hit for i in runs if steps[i][2] or steps[i][1] not in given
                 for hit in forbidden_names(*steps[i], spec, starred)]
        reasons = [f for i, step in enumerate(found) for f in step
                   if f.strong or i in runs or (f.patched and spec.matches(f.patched))]
        if named:
            where, name, text = named[0]
            with checks_language.speaking(language):   # the spec's own words are the checks'
                taught = spec.message(name)
            message = messages.text("forbid.named", language, message=taught,
                                    where=messages.where(where, language), code=text)
        elif reasons:
            listed = messages.text("forbid.separator", language).join(
                messages.text("forbid.listed", language, where=messages.where(f.where, language),
                              what=f.what(language)) for f in reasons[:4])
            more = messages.text("forbid.more", language, count=len(reasons) - 4) \
                if len(reasons) > 4 else ""
            message = messages.text(
                "forbid.could_hide", language, exercise=spec.exercise, listed=listed,
                more=more, label=spec.label or messages.text("forbid.own_version", language))
        else:
            continue
        for test in spec.tests:
            lost.setdefault(test, message)
    return lost


def flags(steps, given=frozenset()):
    """Problems ("suspicious") for the instructor: each step with something that reaches
    what a solution never needs (see reaching()), the course's own given code left out.
    Each says it in English ("message": the logs') and keeps its findings' templates
    ("findings": [{"key", "fields"}], by their English), to be said in the language of
    whoever reads it (messages.problem_message)."""
    found = {}
    for (label, _, _), step in zip(steps, _findings(steps, given)):
        found.setdefault(label, {}).update((f.what(), f) for f in step)
    problems = []
    for label, reasons in found.items():
        if reasons:
            problem = {"cell": label, "kind": "suspicious", "findings": [
                {"key": reasons[english].key, "fields": dict(reasons[english].fields)}
                for english in sorted(reasons)]}
            problems.append(dict(problem, message=messages.problem_message(problem)))
    return problems


def specs_of(modules, exercises):
    """The Forbidden specs (FORBIDS) of the checks `modules` whose exercise is one of
    `exercises` (the assignment's solution grade ids), in order, each once."""
    found = []
    for module in modules:
        for spec in getattr(module, "FORBIDS", ()):
            if spec.exercise in exercises and spec not in found:
                found.append(spec)
    return found

