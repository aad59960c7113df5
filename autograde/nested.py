"""One walk over nested values, for the wire and both sides of the RPC.

A value is a leaf (a tensor, a number, any other object) or a container of values: a tuple
(named ones too), a list, a dict, and, where `objects` is true, a dataclass instance.
flatten() lists the leaves in one fixed order (a dict's in its insertion order, which the
wire keeps); rebuild() puts new leaves back in the same places. The student's process and
the grader walk a call's outputs with these same two functions, so the gradients of a dict
`{"y": x * 2}` find their tensors as those of a tuple do. What the wire sends of a value
(autograde.wire: tuples, lists and str-keyed dicts; anything else stays behind as a
reference) is what `objects=False` walks.
"""
import copy
import dataclasses

MAX_DEPTH = 200  # deeper containers count as leaves (a submission may nest anything)


def _is_dataclass(value):
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _children(value, objects):
    """The items of a container, in order, or None for a leaf. Without `objects`, only the
    containers the wire sends: tuples, lists (not subclasses), dicts with str keys."""
    if isinstance(value, tuple) or (isinstance(value, list) and (objects or type(value) is list)):
        return list(value)
    if isinstance(value, dict) and (objects or all(type(k) is str for k in value)):
        return list(value.values())
    if objects and _is_dataclass(value):
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


def flatten(value, objects=True):
    """[leaf] of `value`, depth first, in order."""
    found, todo = [], [(value, 0)]
    while todo:
        item, depth = todo.pop()
        children = _children(item, objects) if depth < MAX_DEPTH else None
        if children is None:
            found.append(item)
        else:
            todo.extend((child, depth + 1) for child in reversed(children))
    return found


def rebuild(value, leaves, objects=True):
    """`value` with its leaves replaced, in flatten()'s order, by those of the iterable
    `leaves` (tensors attached to a graph, say)."""
    leaves = iter(leaves)

    def walk(item, depth):
        children = _children(item, objects) if depth < MAX_DEPTH else None
        if children is None:
            return next(leaves)
        return _rebuilt(item, [walk(child, depth + 1) for child in children])
    return walk(value, 0)


def map_leaves(value, function, objects=True):
    """`value` with each leaf replaced by function(leaf)."""
    return rebuild(value, (function(leaf) for leaf in flatten(value, objects)), objects)
