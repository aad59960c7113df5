"""The repair family's edits: the one small change to the student's code that a teacher tries.

A teacher who reads a wrong function looks for the one edit that makes it right: another
axis, a transpose too many or missing, the operands the other way round, `k` read where `v`
should be, a line too many. This module makes those edits ("mutants") from the source of a
function, as generic mutation-testing operators plus a few of tensor code (no catalogue of
known bugs); checks.common reruns a failed check with each mutant in place of the student's
object, and the first one with which the check passes names the mistake (the sentences:
checks.diagnose.MESSAGES' "repair*").

Pure: it reads and writes Python code with `ast`, imports nothing of torch or of the course,
and runs where the student's objects live (checks.operations.mutants: in the student's
Jupyter and the kit in-process, under the autograder in the student's sandboxed process,
which is why it holds no message). Deterministic: the same source gives the same mutants in
the same order on every side, so that the kit and the grader say the same.

A mutant is (code, description): code, the whole function's definition with the edit (a
string); description, {"line": the edited line's number within the function (its `def`
line is 1), "code": that line as written, "edited": the line with the edit ("" where the
line goes), "kind": the operator (KINDS), "before": the text replaced, "after": its
replacement, "step": the call an "unwrap" removes ("transpose"; "" for the others),
"function": the function's name}.
"""
import ast
import copy
import textwrap

# the operators, most likely first (mutants() yields them in this order, lines in order
# within one)
KINDS = ("axis", "number", "unwrap", "transpose", "swap", "operator", "unary", "confusable",
         "name", "keyword", "delete")

# most mutants kept per function (the first ones, in KINDS' order)
MOST = 120

# calls whose integer arguments (positional or dim=/axis=) are axes; those whose first
# positional argument is the tensor (torch.softmax(x, 1)) have it skipped
AXIS_CALLS = {"transpose", "permute", "softmax", "log_softmax", "sum", "mean", "cat", "stack",
              "flatten", "unflatten", "split", "chunk", "diagonal", "size", "unsqueeze",
              "squeeze", "amax", "amin", "max", "min", "argmax", "argmin", "cumsum", "movedim",
              "swapaxes", "swapdims", "norm", "var", "std", "logsumexp", "prod", "flip",
              "roll", "expand_dims", "narrow", "select", "repeat_interleave", "all", "any",
              "concat", "concatenate", "count_nonzero", "topk", "sort", "argsort", "gather",
              "index_select", "cumprod", "tensor_split", "split_with_sizes"}
AXIS_KEYWORDS = {"dim", "axis", "dim0", "dim1", "dims", "start_dim", "end_dim", "source",
                 "destination"}
AXES = (-1, -2, -3, -4, 0, 1, 2, 3)
# of the calls of AXIS_CALLS, those whose first positional argument is the tensor when they
# are called as a module's function (torch.transpose(x, 1, 2), F.softmax(x, -1))
MODULE_NAMES = {"torch", "F", "nn", "math", "np", "numpy", "functional"}
# calls whose every positional int is not an axis though AXIS_CALLS holds their name
NOT_AXIS_POSITIONS = {"split": (0,), "chunk": (0,), "narrow": (1, 2), "select": (1,),
                      "roll": (0,), "topk": (0,), "repeat_interleave": (0,),
                      "unflatten": (1,), "tensor_split": (0,)}

# what a name is confused with (generic pairs, both ways)
CONFUSABLE = dict(pair for a, b in (
    ("sum", "mean"), ("max", "min"), ("amax", "amin"), ("argmax", "argmin"), ("tril", "triu"),
    ("softmax", "log_softmax"), ("cos", "sin"), ("exp", "log"), ("ones", "zeros"),
    ("ones_like", "zeros_like"), ("floor", "ceil"), ("any", "all"), ("sqrt", "rsqrt"),
    ("logical_and", "logical_or"), ("cumsum", "cumprod"), ("float", "double"))
    for pair in ((a, b), (b, a))) | {"view": "reshape", "bmm": "matmul", "mm": "matmul"}

# the binary operators replaced, and those whose operands are swapped
OTHER_OPERATOR = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
                  ast.FloorDiv: ast.Div, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd}
OTHER_COMPARISON = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
                    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot,
                    ast.IsNot: ast.Is}
SWAPPED = (ast.MatMult, ast.Sub, ast.Div, ast.Pow)
TWO_TENSOR_CALLS = {"matmul", "bmm", "mm", "cat", "stack"}
# method calls that are a step on their value, removed whole (x.transpose(1, 2) -> x)
KEEP_CALLS = {"item", "size", "dim", "numel", "parameters", "named_parameters", "children",
              "modules", "items", "keys", "values", "append", "extend", "format", "join",
              "split", "chunk", "unbind", "register_buffer", "register_parameter",
              "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor"}
# one-argument functions that are no step of a formula (int(x) is not "the wrong step")
PLAIN_FUNCTIONS = {"len", "range", "print", "isinstance", "super", "iter", "list", "tuple",
                   "enumerate", "zip", "type", "str", "repr", "dict", "set", "id", "hasattr",
                   "getattr", "sorted", "reversed", "next", "bool", "float", "int"}
# reductions that may lack keepdim=True
KEEPDIM_CALLS = {"sum", "mean", "amax", "amin", "max", "min", "logsumexp", "norm", "std",
                 "var", "prod"}
# names that are never read in place of another (a module, the instance)
NOT_SWAPPED = {"self", "cls", "torch", "F", "nn", "math", "np", "numpy", "True", "False",
               "None"}


def _called_name(call):
    """The name a Call calls: "softmax" of x.softmax(...), torch.softmax(...), softmax(...)."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _is_module_call(call):
    """True for torch.f(...), F.f(...), math.f(...): the tensor is the first argument."""
    func = call.func
    while isinstance(func, ast.Attribute):
        func = func.value
        if isinstance(func, ast.Name):
            return func.id in MODULE_NAMES
    return isinstance(call.func, ast.Name)


def _int(node):
    """The int a node is (3, -2), or None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) is int):
        return -node.operand.value
    return None


def _constant(value):
    return ast.Constant(value) if value >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-value))


def _parents(tree):
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return parents


class _Sites:
    """The edits of one function: [(kind, node index, replacement maker, before, after)],
    found on its tree; each is applied to a fresh copy (the node found by its index in
    ast.walk's order, the same on every copy)."""

    def __init__(self, tree, names, attributes):
        self.tree, self.attributes = tree, attributes
        self.names = dict(names)   # {name: the line it is first bound on}
        self.nodes = list(ast.walk(tree))
        self.index = {id(node): i for i, node in enumerate(self.nodes)}
        self.parents = _parents(tree)
        self.found = {kind: [] for kind in KINDS}
        # what a `while` loop holds is not edited: an edit there may never end
        self.looped = {id(inner) for node in self.nodes if isinstance(node, ast.While)
                       for inner in ast.walk(node)}

    def add(self, kind, node, make):
        """An edit of `kind` that replaces `node` by make(a copy of node) (None: remove the
        statement)."""
        if id(node) in self.looped:
            return
        self.found[kind].append(((node.lineno, node.col_offset, len(self.found[kind])),
                                 self.index[id(node)], make))

    def axis_ints(self):
        """[(node, is an axis)] of the int literals of the function."""
        found, seen = [], set()
        for node in self.nodes:
            if isinstance(node, ast.Call):
                name = _called_name(node)
                if name in AXIS_CALLS:
                    skip = NOT_AXIS_POSITIONS.get(name, ())
                    args = node.args[1:] if _is_module_call(node) else node.args
                    for position, arg in enumerate(args):
                        items = arg.elts if isinstance(arg, (ast.Tuple, ast.List)) else [arg]
                        for item in items:
                            if _int(item) is not None and position not in skip:
                                found.append((item, True))
                                seen.add(id(item))
                for keyword in node.keywords:
                    items = (keyword.value.elts if isinstance(keyword.value, (ast.Tuple, ast.List))
                             else [keyword.value])
                    for item in items:
                        if _int(item) is not None and id(item) not in seen:
                            found.append((item, keyword.arg in AXIS_KEYWORDS))
                            seen.add(id(item))
            elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
                  and node.value.attr == "shape" and _int(node.slice) is not None):
                found.append((node.slice, True))
                seen.add(id(node.slice))
        for node in self.nodes:
            if _int(node) is not None and id(node) not in seen and not (
                    isinstance(node, ast.Constant)
                    and isinstance(self.parents.get(node), ast.UnaryOp)):
                found.append((node, False))
                seen.add(id(node))
        return sorted(found, key=lambda pair: (pair[0].lineno, pair[0].col_offset))

    def collect(self):
        for node, is_axis in self.axis_ints():
            value = _int(node)
            if is_axis:
                for other in AXES:
                    if other != value:
                        self.add("axis", node, lambda old, v=other: _constant(v))
            else:
                for other in dict.fromkeys((value + 1, value - 1, -value)):
                    if other != value:
                        self.add("number", node, lambda old, v=other: _constant(v))
        for node in self.nodes:
            self.unwrap(node)
            self.transpose(node)
            self.swap(node)
            self.operator(node)
            self.confusable(node)
            self.keyword(node)
        for node in self.nodes:
            self.name(node)
        for node in self.nodes:
            if (isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr))
                    and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))):
                self.add("delete", node, None)

    def unwrap(self, node):
        if isinstance(node, ast.Attribute) and node.attr in ("T", "mT") and isinstance(
                node.ctx, ast.Load):
            self.add("unwrap", node, lambda old: old.value)
        if not isinstance(node, ast.Call):
            return
        name, func = _called_name(node), node.func
        if (isinstance(func, ast.Attribute) and not _is_module_call(node)
                and name not in KEEP_CALLS and not name.endswith("_")
                and not (isinstance(func.value, ast.Name) and func.value.id == "self")):
            self.add("unwrap", node, lambda old: old.func.value)
        elif (_is_module_call(node) and node.args and name not in PLAIN_FUNCTIONS
              and (len(node.args) == 1 or name in AXIS_CALLS) and not node.keywords
              or _is_module_call(node) and name in ("softmax", "log_softmax", "transpose",
                                                    "sqrt", "exp") and node.args):
            if not isinstance(node.args[0], ast.Starred):
                self.add("unwrap", node, lambda old: old.args[0])

    def transpose(self, node):
        def transposed(old):
            return ast.Call(ast.Attribute(old, "transpose", ast.Load()),
                            [_constant(-2), _constant(-1)], [])
        if isinstance(node, ast.Call) and _called_name(node) in ("view", "reshape") and \
                isinstance(node.func, ast.Attribute) and not _is_module_call(node):
            self.add("transpose", node, lambda old: ast.Call(
                ast.Attribute(old, "transpose", ast.Load()), [_constant(1), _constant(2)], []))
        operands = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            operands = [node.right, node.left]
        elif isinstance(node, ast.Call) and _called_name(node) in ("matmul", "bmm", "mm") \
                and len(node.args) == 2:
            operands = [node.args[1], node.args[0]]
        for operand in operands:
            self.add("transpose", operand, transposed)

    def swap(self, node):
        if isinstance(node, ast.BinOp) and isinstance(node.op, SWAPPED):
            self.add("swap", node, lambda old: ast.BinOp(old.right, old.op, old.left))
        elif (isinstance(node, ast.Call) and _called_name(node) in TWO_TENSOR_CALLS
              and len(node.args) == 2 and not node.keywords):
            self.add("swap", node, lambda old: ast.Call(old.func, old.args[::-1], old.keywords))
        elif (isinstance(node, ast.Call) and _called_name(node) in ("cat", "stack")
              and node.args and isinstance(node.args[0], (ast.List, ast.Tuple))
              and len(node.args[0].elts) == 2):
            def swapped(old):
                items = type(old.args[0])(old.args[0].elts[::-1], ast.Load())
                return ast.Call(old.func, [items, *old.args[1:]], old.keywords)
            self.add("swap", node, swapped)

    def operator(self, node):
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in OTHER_OPERATOR:
            if isinstance(node, ast.BinOp):
                self.add("operator", node, lambda old: ast.BinOp(
                    old.left, OTHER_OPERATOR[type(old.op)](), old.right))
            else:
                self.add("operator", node, lambda old: ast.AugAssign(
                    old.target, OTHER_OPERATOR[type(old.op)](), old.value))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and \
                type(node.ops[0]) in OTHER_COMPARISON:
            self.add("operator", node, lambda old: ast.Compare(
                old.left, [OTHER_COMPARISON[type(old.ops[0])]()], old.comparators))
        elif isinstance(node, ast.BoolOp):
            self.add("operator", node, lambda old: ast.BoolOp(
                ast.Or() if isinstance(old.op, ast.And) else ast.And(), old.values))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.USub, ast.Not)) \
                and not isinstance(node.operand, ast.Constant):
            self.add("unary", node, lambda old: old.operand)
        if isinstance(node, ast.Call) and _called_name(node) in ("masked_fill", "where") \
                and node.args:
            first = node.args[1] if (_called_name(node) == "masked_fill"
                                     and _is_module_call(node)) else node.args[0]
            if not isinstance(first, ast.Starred):
                self.add("unary", first, lambda old: old.operand if isinstance(
                    old, ast.UnaryOp) and isinstance(old.op, ast.Invert)
                    else ast.UnaryOp(ast.Invert(), old))

    def confusable(self, node):
        if isinstance(node, ast.Attribute) and node.attr in CONFUSABLE:
            self.add("confusable", node, lambda old: ast.Attribute(
                old.value, CONFUSABLE[old.attr], old.ctx))
        elif (isinstance(node, ast.Name) and node.id in CONFUSABLE and node.id not in self.names
              and node.id not in PLAIN_FUNCTIONS):
            self.add("confusable", node, lambda old: ast.Name(CONFUSABLE[old.id], old.ctx))

    def keyword(self, node):
        if not isinstance(node, ast.Call):
            return
        name = _called_name(node)
        if name in KEEPDIM_CALLS and not any(k.arg == "keepdim" for k in node.keywords) and (
                node.args or node.keywords):
            self.add("keyword", node, lambda old: ast.Call(
                old.func, old.args, [*old.keywords, ast.keyword("keepdim", ast.Constant(True))]))
        for position, keyword in enumerate(node.keywords):
            if keyword.arg is not None:
                self.add("keyword", node, lambda old, p=position: ast.Call(
                    old.func, old.args, old.keywords[:p] + old.keywords[p + 1:]))

    def name(self, node):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and \
                node.id in self.names and node.id not in NOT_SWAPPED:
            parent = self.parents.get(node)
            if isinstance(parent, ast.Call) and parent.func is node:
                return
            for other, bound in self.names.items():
                # (a name bound only later is not what this line meant to read)
                if other != node.id and other not in NOT_SWAPPED and bound < node.lineno:
                    self.add("name", node, lambda old, o=other: ast.Name(o, ast.Load()))
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
              and isinstance(node.value, ast.Name) and node.value.id == "self"
              and node.attr in self.attributes):
            for other in self.attributes:
                if other != node.attr:
                    self.add("name", node, lambda old, o=other: ast.Attribute(
                        old.value, o, ast.Load()))


def _local_names(function):
    """[(name, the line it is first bound on)] of the function's parameters (its `def`
    line) and the names it assigns, in the order they appear."""
    arguments = function.args
    names = [(a.arg, function.lineno) for a in (*arguments.posonlyargs, *arguments.args,
                                               *arguments.kwonlyargs)]
    names += [(a.arg, function.lineno) for a in (arguments.vararg, arguments.kwarg)
              if a is not None]
    stored = sorted((node.lineno, node.col_offset, node.id) for node in ast.walk(function)
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store))
    names += [(name, line) for line, _, name in stored]
    first = {}
    for name, line in names:
        first.setdefault(name, line)
    return list(first.items())


def _self_attributes(trees):
    """The attributes self.<name> read in `trees` (the methods of a class), in order: the
    attributes that are read in place of one another ("self.k_proj where self.v_proj")."""
    names = []
    for tree in trees:
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "self" and isinstance(node.ctx, ast.Load)):
                names.append(node.attr)
    return list(dict.fromkeys(names))


def _line_edit(lines, node, before, after, kind):
    """The edited line's text, stripped: `lines` (the function's) with node's text
    replaced by `after` where node is on one line, else the statement's unparsed text."""
    line = lines[node.lineno - 1]
    if kind == "delete":
        return ""
    if node.lineno == node.end_lineno:
        data = line.encode()
        return (data[:node.col_offset].decode(errors="replace") + after
                + data[node.end_col_offset:].decode(errors="replace")).strip()
    return after.strip()


def parse_function(source):
    """The FunctionDef of `source` (a function's or method's text, maybe indented), or None."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError, RecursionError):
        return None
    found = tree.body[0] if tree.body else None
    return found if isinstance(found, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def mutants(source, attributes=(), most=MOST):
    """[(code, description)] of the one-edit variants of the function whose definition is
    `source` (see the module's doc), most likely first, at most `most`, each code distinct
    and not the function's own. attributes: the self.<name> attributes that may be read in
    place of one another (a method: those of its whole class; default: its own)."""
    function = parse_function(source)
    if function is None:
        return []
    lines = textwrap.dedent(source).splitlines()
    own = ast.unparse(function)
    sites = _Sites(function, _local_names(function),
                   list(attributes) or _self_attributes([function]))
    try:
        sites.collect()
    except (RecursionError, ValueError):
        return []
    kept, seen = [], {own}
    for kind in KINDS:
        for _, index, make in sorted(sites.found[kind], key=lambda site: site[0]):
            if len(kept) >= most:
                return kept
            made = _made(function, index, make, lines, kind)
            if made is not None and made[0] not in seen:
                seen.add(made[0])
                kept.append(made)
    return kept


def _made(function, index, make, lines, kind):
    """(code, description) of one edit, or None where it makes no valid code."""
    tree = copy.deepcopy(function)
    nodes = list(ast.walk(tree))
    node = nodes[index]
    parents = _parents(tree)
    parent = parents.get(node)
    before = ast.unparse(node) if kind != "delete" else lines[node.lineno - 1].strip()
    try:
        if make is None:
            block = next(getattr(parent, field) for field in ("body", "orelse", "finalbody")
                         if any(item is node for item in getattr(parent, field, [])))
            block.remove(node)
            if not block:
                block.append(ast.Pass())
            after = ""
        else:
            new = make(copy.deepcopy(node))
            ast.copy_location(new, node)
            if not _replace(parent, node, new):
                return None
            after = ast.unparse(new)
        ast.fix_missing_locations(tree)
        code = ast.unparse(tree)
        compile(code, "<mutant>", "exec")
    except (StopIteration, ValueError, SyntaxError, TypeError, AttributeError, RecursionError):
        return None
    step = (_called_name(node) if isinstance(node, ast.Call) else
            node.attr if isinstance(node, ast.Attribute) else "") if kind == "unwrap" else ""
    return code, {"line": node.lineno, "code": lines[node.lineno - 1].strip(), "step": step,
                  "edited": _line_edit(lines, node, before, after, kind), "kind": kind,
                  "before": before, "after": after, "function": function.name}


def _replace(parent, old, new):
    """Put `new` where `old` is among parent's fields; False where it is not found."""
    for field, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, field, new)
            return True
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i] = new
                    return True
    return False
