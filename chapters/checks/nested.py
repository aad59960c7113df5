"""One walk over nested values: the checks, the wire and both sides of the grader's RPC.

A value is a leaf (a tensor, a number, any other object) or a container of values: a tuple
(named ones too), a list, a dict, and, where `objects` is true, a dataclass instance.
flatten() lists the leaves in one fixed order (a dict's in its insertion order, which the
wire keeps); rebuild() puts new leaves back in the same places; fold() builds anything
else from the leaves up (a signature, say). What the wire sends of a value (tuples, lists
and str-keyed dicts; anything else stays behind as a reference) is what `objects=False`
walks, and encode()/decode() write and read that walk as JSON: {"tuple": [...]},
{"list": [...]}, {"dict": {...}} around whatever the caller makes of each leaf.

This one file serves everyone: the checks import it (the student's kit ships it as
checks/nested.py and needs nothing else), the grader loads it as autograde.nested
(autograde/__init__.py) and the sandbox gets the same file bound in (autograde/remote.py).
It uses no torch: a leaf is whatever is not a container.
"""
import copy
import dataclasses

MAX_DEPTH = 200  # containers deeper than this count as leaves (flatten) or are refused (encode)

# Every sentence this walk can raise (a value too deep to send, data that is not what encode()
# writes), one template each with named fields (a second language translates them here).
# (A plain dict: this module runs in the student's sandboxed process too, which holds no
# other module of the checks and no catalogue; there the grader sends these templates in the
# notebook's language with each spawn, autograde.remote.child_messages, and
# autograde.sandbox.speak puts them here. They are translated in checks.po; where the
# catalogue is at hand, the grader and the student's Jupyter, checks.common makes this dict
# a lookup in the language of now, language.translated.)
MESSAGES = {
    "too_deep": "maximum recursion depth exceeded: a value nested more than {depth} deep "
                "cannot be sent or stored",
    "data_too_deep": "data nested more than {depth} deep",
    "dict_payload": "dict payload is not an object",
    "list_payload": "expected a list (a {kind} payload)",
    "pairs_payload": "a pairs payload is not a list of [key, value]",
    "pairs_key": "a pairs payload has a key that cannot be a dict's key",
}


def is_dataclass_instance(value):
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _children(value, objects):
    """The items of a container, in order, or None for a leaf. Without `objects`, only the
    containers the wire sends: tuples, lists (not subclasses), dicts with str keys."""
    if isinstance(value, tuple) or (isinstance(value, list) and (objects or type(value) is list)):
        return list(value)
    if isinstance(value, dict) and (objects or all(type(k) is str for k in value)):
        return list(value.values())
    if objects and is_dataclass_instance(value):
        return [getattr(value, f.name) for f in dataclasses.fields(value)]
    return None


def _rebuilt(value, items):
    """A container like `value` holding `items` (in _children's order)."""
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):  # a named tuple
        return type(value)(*items)
    if isinstance(value, tuple):
        return tuple(items)
    if isinstance(value, list):
        return list(items)
    if isinstance(value, dict):
        return dict(zip(value.keys(), items))
    new = copy.copy(value)  # a dataclass; object.__setattr__ also fills frozen ones
    for f, item in zip(dataclasses.fields(value), items):
        object.__setattr__(new, f.name, item)
    return new


def _walk(value, children, leaf, build, depth=MAX_DEPTH, too_deep=None):
    """build(container, [what its items gave]) for each container, leaf(x) for each leaf,
    from the leaves up, depth first and in order; no recursion, so any depth is safe.
    `children(x)` gives a container's items or None. A container below `depth` levels is a
    leaf, unless `too_deep` (a message) is given: then RecursionError(too_deep) is raised."""
    items = children(value)
    if items is None:
        return leaf(value)
    stack = [(value, items, [])]  # (container, its items, what those gave so far)
    while True:
        container, items, done = stack[-1]
        if len(done) < len(items):
            item = items[len(done)]
            inner = children(item) if len(stack) < depth or too_deep else None
            if inner is None:
                done.append(leaf(item))
            elif len(stack) >= depth:
                raise RecursionError(too_deep)
            else:
                stack.append((item, inner, []))
            continue
        stack.pop()
        built = build(container, done)
        if not stack:
            return built
        stack[-1][2].append(built)


def _selector(objects, is_leaf):
    if is_leaf is None:
        return lambda item: _children(item, objects)
    return lambda item: None if is_leaf(item) else _children(item, objects)


def fold(value, leaf, build, objects=True, depth=MAX_DEPTH, is_leaf=None):
    """leaf(x) of each leaf, combined by build(container, [results of its items]) for each
    container (e.g. a text that describes the value). `is_leaf(x)` true: x is a leaf even
    if it is a container; containers `depth` levels down are leaves."""
    return _walk(value, _selector(objects, is_leaf), leaf, build, depth)


def flatten(value, objects=True, depth=MAX_DEPTH, is_leaf=None):
    """[leaf] of `value`, depth first, in order."""
    found = []
    _walk(value, _selector(objects, is_leaf), found.append, lambda *_: None, depth)
    return found


def rebuild(value, leaves, objects=True, depth=MAX_DEPTH, is_leaf=None):
    """`value` with its leaves replaced, in flatten()'s order, by those of the iterable
    `leaves` (tensors attached to a graph, say)."""
    leaves = iter(leaves)
    return _walk(value, _selector(objects, is_leaf), lambda _: next(leaves), _rebuilt, depth)


def map_leaves(value, function, objects=True, depth=MAX_DEPTH, is_leaf=None):
    """`value` with each leaf replaced by function(leaf)."""
    return _walk(value, _selector(objects, is_leaf), function, _rebuilt, depth)


# -- as JSON ------------------------------------------------------------------------------
# The containers the wire sends, written around what leaf() makes of each leaf (a JSON
# object that holds none of the keys below). A dict whose keys are not all strings is a
# leaf for the wire. Where `pairs` (stored fixtures), every dict is written {"pairs": [[key,
# value], ...]}, each key through leaf() too: any keys, in their order even where the JSON
# is written with sorted keys.

CONTAINERS = ("tuple", "list", "dict", "pairs")


def _wire_children(pairs):
    def children(item):
        if pairs and isinstance(item, dict):
            return list(item.values())
        return _children(item, objects=False)
    return children


def encode(value, leaf, pairs=False):
    """`value` as JSON-ready data (see above); leaf(x) writes each leaf. A value nested more
    than MAX_DEPTH deep raises RecursionError with a message that says so."""
    def build(container, items):
        if isinstance(container, tuple):  # named tuples and torch.Size too: plain tuples
            return {"tuple": items}
        if isinstance(container, list):
            return {"list": items}
        if not pairs:  # (str keys: the others are leaves)
            return {"dict": dict(zip(container.keys(), items))}
        return {"pairs": [[leaf(k), item] for k, item in zip(container.keys(), items)]}
    return _walk(value, _wire_children(pairs), leaf, build,
                 too_deep=MESSAGES["too_deep"].format(depth=MAX_DEPTH))


def _kind(data):
    """Which container an encoded JSON object is ("tuple", "list", ...), or None: a leaf."""
    return next((k for k in CONTAINERS if k in data), None)


def _payload(data, error):
    """The items of an encoded container, or None for an encoded leaf; `error` for a
    container whose payload is malformed."""
    if isinstance(data, list):  # a bare JSON list reads as a list
        return data
    if not isinstance(data, dict):
        return None
    kind = _kind(data)
    if kind is None:
        return None
    items = data[kind]
    if kind == "dict":
        if not isinstance(items, dict):
            raise error(MESSAGES["dict_payload"])
        return list(items.values())
    if not isinstance(items, list):
        raise error(MESSAGES["list_payload"].format(kind=kind))
    if kind == "pairs":
        if not all(isinstance(p, list) and len(p) == 2 for p in items):
            raise error(MESSAGES["pairs_payload"])
        return [p[1] for p in items]
    return items


def decode(data, leaf, error=ValueError):
    """The value encode() wrote: leaf(x) reads each leaf. Malformed containers, and data
    nested more than MAX_DEPTH deep, raise `error`."""
    def build(container, items):
        kind = "list" if isinstance(container, list) else _kind(container)
        if kind == "list":
            return items
        if kind == "tuple":
            return tuple(items)
        if kind == "dict":
            return {str(k): item for k, item in zip(container["dict"].keys(), items)}
        keys = [leaf(p[0]) for p in container["pairs"]]
        try:
            return dict(zip(keys, items))
        except TypeError:
            raise error(MESSAGES["pairs_key"]) from None
    try:
        return _walk(data, lambda item: _payload(item, error), leaf, build,
                     too_deep=MESSAGES["data_too_deep"].format(depth=MAX_DEPTH))
    except RecursionError as deep:
        raise error(str(deep)) from None


def encoded_leaves(data):
    """[leaf] of encoded data, in the order decode() reads them (and flatten() lists the
    leaves of what it decodes to)."""
    found = []
    _walk(data, lambda item: _payload(item, ValueError), found.append, lambda *_: None)
    return found
