"""The requests between the grader (autograde/remote.py) and the sandbox (autograde/sandbox.py),
declared once and checked on both sides: the grader builds every request with request(),
the sandbox takes none that check_request() refuses, and answers each with a reply that
check_reply() accepts.

A message is a JSON header (autograde.wire) with raw tensor bytes beside it; the fields a
request marks as values ("args", "kwargs", "weights", "grads") and a reply's "value" are
wire-encoded values, "target" is {"ref": id} of an object of the student's process.

To the zygote, the warm process that forks one child per submission (the child's socket
comes with the reply to spawn, SCM_RIGHTS; one buffer per file beside the request):
{zygote}
To a child, the process that runs one submission (every reply also holds "stdout", what
the student's code printed meanwhile, or, where it raised, "error" and "traceback", and,
where the error came from a line of the student's code that holds tensors, "line_shapes":
checks.operations.raised_line_shapes' JSON text, the shapes on that line and the torch call
that raised, as the student's Jupyter reports them; the grader keeps it only where it is
text of at most checks.operations.LINE_TEXT characters and reads it only for the words of
a message, never for a grade):
"""
import textwrap
from typing import NamedTuple

from autograde.wire import ProtocolError

class Operation(NamedTuple):
    fields: tuple         # what the request must hold besides "op"
    optional: tuple       # what it may hold
    reply: tuple          # what a reply may hold besides "stdout" (never an error reply)
    does: str


ZYGOTE = {
    "spawn": Operation(("limits", "files", "language", "messages"), (), ("spawned",),
                       "fork a child for one submission, in a scratch folder holding its "
                       "release's files, speaking its notebook's language (COURSE_LANGUAGE; "
                       "messages: the templates of its sentences in it, "
                       "autograde.remote.child_messages)"),
    "kill": Operation((), (), ("killed",), "kill the child and everything it started"),
}
CHILD = {
    "run": Operation(("source", "name"), ("line",), ("ok",),
                     "run code (a step of the plan) in the student's namespace; line: the "
                     "cell's line its first line is (the source is sent unpadded)"),
    "lookup": Operation(("name",), (), ("value",), "what a name of the student's is bound to"),
    "getattr": Operation(("target", "name"), (), ("value",), "an attribute of an object"),
    "list": Operation(("target",), (), ("value",), "list(object)"),
    "len": Operation(("target",), (), ("value",), "len(object)"),
    "repr": Operation(("target",), (), ("value",), "repr(object), 2000 characters at most"),
    "call": Operation(("target", "args", "kwargs"), ("grad", "observe", "forbid", "traced"),
                      ("value", "call"), "call an object; grad: its outputs join the "
                      "grader's autograd graph (the reply's \"call\" names them for backward); "
                      "observe: checks.operations.observe() of the call; forbid: the "
                      "forbid_spec() specs in force around it; traced: the torch call that "
                      "raises in it is noted (checks.operations.RaisingCall) for the error "
                      "reply's \"line_shapes\", as the check's traced call notes it in the "
                      "student's Jupyter"),
    "load": Operation(("target", "weights"), (), ("value",),
                      "checks.operations.load_weights() into a module"),
    "given": Operation(("path", "args", "kwargs"), (), ("value",),
                       "the course's own function or class (checks.operations."
                       "resolve_given), called on the grader's arguments"),
    "mutants": Operation(("target",), (), ("value",),
                         "the repair family's one-edit variants of a function, class or module "
                         "of the student's (checks.operations.mutants): [[mutant, "
                         "description]], the mutants as new objects of this process"),
    "backward": Operation(("call", "grads"), (), ("value",),
                          "the gradients of a grad call's inputs, given those of its "
                          "outputs"),
}
ERROR_REPLY = ("error", "traceback", "stdout", "line_shapes")



def _described(table):
    """The table as the lines of this docstring: each op, its fields ([optional]), what its
    reply holds, and what it does."""
    lines = []
    for name, op in table.items():
        fields = ", ".join(op.fields + tuple(f"[{o}]" for o in op.optional)) or "(nothing)"
        lines.append(f"    {name:<9}{fields}  ->  {', '.join(op.reply)}")
        lines.append(textwrap.fill(op.does, 88, initial_indent=" " * 13,
                                   subsequent_indent=" " * 13))
    return "\n".join(lines) + "\n"


__doc__ = __doc__.replace("{zygote}\n", _described(ZYGOTE)) + _described(CHILD)


def _checked(table, message):
    if not isinstance(message, dict):
        raise ProtocolError("a request is not an object")
    name = message.get("op")
    operation = table.get(name) if isinstance(name, str) else None
    if operation is None:
        raise ProtocolError(f"unknown op {name!r}")
    missing = [f for f in operation.fields if f not in message]
    unknown = sorted(set(message) - {"op"} - set(operation.fields) - set(operation.optional))
    if missing or unknown:
        raise ProtocolError(f"op {name!r}: " + "; ".join(
            part for part in (missing and f"missing {', '.join(missing)}",
                              unknown and f"unexpected {', '.join(unknown)}") if part))
    return operation


def request(name, table=CHILD, /, **fields):
    """The request {"op": name, **fields}, checked against its declaration."""
    message = {"op": name, **fields}
    _checked(table, message)
    return message


def check_request(message, table=CHILD):
    """The declared Operation of a request that holds what it declares, else ProtocolError."""
    return _checked(table, message)


def check_reply(name, keys, table=CHILD):
    """ProtocolError unless a reply to op `name` that holds `keys` holds only what such a
    reply may hold."""
    allowed = ERROR_REPLY if "error" in keys else table[name].reply + ("stdout",)
    unknown = sorted(set(keys) - set(allowed))
    if unknown:
        raise ProtocolError(f"a reply to {name!r} holds {', '.join(unknown)}")
