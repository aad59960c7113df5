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
from dataclasses import dataclass

from autograde import kit  # kit.parse: every parse in the grader's process under one lock

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
}
# attributes that reach them only on a particular object (torch.ops, sys.modules, ...)
REACHING_ON = {("torch", "ops"), ("torch", "library"), ("sys", "modules"), ("os", "fork"),
               ("sys", "_getframe"), ("sys", "settrace"), ("sys", "setprofile")}
# builtins that run or fetch code by name
REACHING_CALLS = {"eval", "exec", "compile", "__import__", "globals", "vars", "setattr",
                  "delattr", "breakpoint"}
TORCH_ROOTS = {"torch", "F", "nn"}  # and whatever names the submission imports torch as


@dataclass(frozen=True)
class Finding:
    where: str        # "cell stable_softmax, line 4"
    what: str         # "imports checks.attention", "uses torch.ops.aten.softmax"
    strong: bool      # could switch a check off from any cell (else: only in its own)
    patched: str = ""  # the attribute of torch it replaces: strong where a spec names it


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
        return kit.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _line(label, node, is_solution=True):
    """The step's label with the node's line in the cell ("cell x, line 3"): a solution
    step is one statement starting at the label's line (autograde.engine.statements), its
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


def _walk(tree):
    """ast.walk without recursion (a submission may nest expressions deeply)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(ast.iter_child_nodes(node))


def reaching(label, source, is_solution, aliases):
    """[Finding] for one step: what in it could switch a run-time check off. The given cells'
    `from checks import X as alias` (outside the solution cells) is the course's own."""
    tree = _parse(source)
    found = []
    for node in _walk(tree) if tree else ():
        where = _line(label, node, is_solution)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _module_reach(alias.name):
                    found.append(Finding(where, f"imports {alias.name}",
                                         not _weak_module(alias.name)))
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            names = [f"{module}.{a.name}" for a in node.names]
            if node.level:
                found.append(Finding(where, f"imports from {module}", True))
            elif _module_reach(module) or any(_module_reach(n) for n in names):
                given = not is_solution and module == "checks"
                if not given:
                    found.append(Finding(where, f"imports {module}", not _weak_module(module)))
        elif isinstance(node, ast.Attribute):
            base = node.value.id if isinstance(node.value, ast.Name) else None
            if node.attr in REACHING_ATTRIBUTES or (base, node.attr) in REACHING_ON \
                    or (base in aliases and node.attr in ("ops", "library")):
                found.append(Finding(where, f"uses {_unparse(node)}",
                                     node.attr not in WEAK_ATTRIBUTES))
            if isinstance(node.ctx, (ast.Store, ast.Del)) and _root(node) in aliases:
                found.append(Finding(where, f"replaces {_unparse(node)} (patches torch)",
                                     False, node.attr))
        elif isinstance(node, ast.Name) and node.id in REACHING_ATTRIBUTES - {"__dict__"}:
            found.append(Finding(where, f"uses {node.id}", True))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name in REACHING_CALLS:
                found.append(Finding(where, f"calls {name}()", True))
            elif name == "getattr" and len(node.args) >= 2 and not (
                    isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                found.append(Finding(where, f"calls getattr with a computed name "
                                            f"({_unparse(node)})", False))
    return found


def forbidden_names(label, source, is_solution, spec):
    """[(where, name, text)] for one step an exercise runs: the names of torch `spec` forbids,
    as attributes (torch.softmax, x.softmax), imports (from torch... import softmax) or
    constant getattr names (getattr(F, "softmax"))."""
    tree = _parse(source)
    found = []
    for node in _walk(tree) if tree else ():
        name = None
        if isinstance(node, ast.Attribute) and spec.matches(node.attr):
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


def _cell_of(label):
    """The grade id of a solution step's label ("cell stable_softmax, line 4")."""
    head = label.rpartition(", line ")[0]
    return head[len("cell "):] if head.startswith("cell ") else head


def _findings(steps, given):
    """[[Finding] of each step], the course's own steps (`given`: the steps of the source
    notebook's given cells, as autograde.engine.plan writes them) finding nothing."""
    aliases = torch_aliases(steps)
    return [reaching(label, source, is_solution, aliases)
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


def verdicts(steps, specs, given=frozenset()):
    """{test grade_id: message} of the tests that lose their points, from the submitted
    source: steps as autograde.engine.plan gives them, specs the chapter's Forbidden. What
    counts: a name the spec forbids in code the exercise runs (used_by), something that
    could hide a call in that code, or anywhere something strong (see reaching())."""
    if not specs:
        return {}
    found = _findings(steps, given)
    lost = {}
    for spec in specs:
        runs = used_by(steps, spec.exercise)
        named = [hit for i in runs if steps[i][2] or steps[i][1] not in given
                 for hit in forbidden_names(*steps[i], spec)]
        reasons = [f for i, step in enumerate(found) for f in step
                   if f.strong or i in runs or (f.patched and spec.matches(f.patched))]
        if named:
            where, name, text = named[0]
            message = f"{spec.message(name)} (in your code: {where}: {text})"
        elif reasons:
            listed = "; ".join(f"{f.where}: {f.what}" for f in reasons[:4])
            more = f" and {len(reasons) - 4} more" if len(reasons) > 4 else ""
            message = (f"{spec.exercise}'s tests need it written without "
                       f"{spec.label or 'PyTorch’s own version'}, and your code does what "
                       f"could hide such a call from the checks ({listed}{more}): no points "
                       "for them. The checks run in the grader: a solution needs none of this.")
        else:
            continue
        for test in spec.tests:
            lost.setdefault(test, message)
    return lost


def flags(steps, given=frozenset()):
    """Problems ("suspicious") for the instructor: each step with something that reaches
    what a solution never needs (see reaching()), the course's own given code left out."""
    found = {}
    for (label, _, _), step in zip(steps, _findings(steps, given)):
        found.setdefault(label, set()).update(f.what for f in step)
    return [{"cell": label, "kind": "suspicious", "message": "; ".join(sorted(reasons))
             + " (the checks run in the grader: a solution needs none of this)"}
            for label, reasons in found.items() if reasons]


def specs_of(modules, exercises):
    """The Forbidden specs (FORBIDS) of the checks `modules` whose exercise is one of
    `exercises` (the assignment's solution grade ids), in order, each once."""
    found = []
    for module in modules:
        for spec in getattr(module, "FORBIDS", ()):
            if spec.exercise in exercises and spec not in found:
                found.append(spec)
    return found

