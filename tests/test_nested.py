"""checks.nested: one flatten/rebuild of nested values, for the wire and both RPC sides;
a student's function returning a dict keeps the gradients a tuple keeps."""
import collections
import dataclasses
import json
import shutil

import pytest
import torch
from hypothesis import given, settings, strategies as st

from autograde.remote import Zygote
from chapters.checks import nested

Pair = collections.namedtuple("Pair", "first second")


@dataclasses.dataclass
class Box:
    inside: object
    label: str = "box"


@dataclasses.dataclass(frozen=True)
class Frozen:
    inside: object


leaves = st.one_of(st.none(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5),
                   st.builds(lambda n: torch.arange(float(n)), st.integers(0, 4)))
values = st.recursive(leaves, lambda inner: st.one_of(
    st.tuples(inner, inner), st.lists(inner, max_size=3),
    st.dictionaries(st.text(max_size=3), inner, max_size=3),
    st.builds(Pair, inner, inner), st.builds(Box, inner), st.builds(Frozen, inner)),
    max_leaves=12)


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return a == b


@settings(max_examples=200, deadline=None)
@given(values)
def test_flatten_then_rebuild_is_the_value(value):
    assert _same(nested.rebuild(value, nested.flatten(value)), value)
    # and each leaf lands where it came from
    marked = nested.rebuild(value, range(len(nested.flatten(value))))
    assert nested.flatten(marked) == list(range(len(nested.flatten(value))))


@settings(max_examples=100, deadline=None)
@given(values)
def test_the_wires_walk_leaves_objects_whole(value):
    found = nested.flatten(value, objects=False)
    assert _same(nested.rebuild(value, found, objects=False), value)
    assert not any(isinstance(leaf, tuple) or type(leaf) is list or (
        isinstance(leaf, dict) and all(type(k) is str for k in leaf)) for leaf in found)


def test_deep_nesting_is_a_leaf_not_a_crash():
    value = []
    for _ in range(5000):
        value = [value]
    assert len(nested.flatten(value)) == 1


def _as_json(value):
    """A leaf as encode()'s callers write one: a tensor by its values, the rest as itself."""
    return {"t": value.tolist()} if isinstance(value, torch.Tensor) else value


def _from_json(data):
    return torch.tensor(data["t"]) if isinstance(data, dict) else data


# what the wire walks: tuples (named ones too), lists, dicts with str keys
wire_values = st.recursive(leaves, lambda inner: st.one_of(
    st.tuples(inner, inner), st.lists(inner, max_size=3),
    st.dictionaries(st.text(max_size=3), inner, max_size=3), st.builds(Pair, inner, inner)),
    max_leaves=12)


def _plain(value):
    """`value` as it reads back from JSON: named tuples as plain tuples."""
    return nested.fold(value, lambda leaf: leaf, lambda container, items: (
        tuple(items) if isinstance(container, tuple) else list(items)
        if isinstance(container, list) else dict(zip(container, items))))


@settings(max_examples=100, deadline=None)
@given(wire_values, st.booleans())
def test_encode_then_decode_gives_the_value_back(value, pairs):
    """The JSON form (the wire's; with pairs, the kit's fixtures', written with sorted keys)
    reads back as the value, and lists its leaves in flatten()'s order."""
    data = json.loads(json.dumps(nested.encode(value, _as_json, pairs=pairs), sort_keys=pairs))
    assert _same(nested.decode(data, _from_json), _plain(value))
    assert nested.encoded_leaves(data) == [_as_json(leaf) for leaf in nested.flatten(value)]


def test_a_value_nested_too_deep_is_a_clear_error_both_ways():
    value = []
    for _ in range(10_000):
        value = [value]
    with pytest.raises(RecursionError, match=r"^maximum recursion depth exceeded: a value "
                                             r"nested more than 200 deep cannot be sent"):
        nested.encode(value, _as_json)
    data = "leaf"
    for _ in range(10_000):
        data = {"list": [data]}
    with pytest.raises(ValueError, match="data nested more than 200 deep"):
        nested.decode(data, _from_json)
    assert len(nested.encoded_leaves({"list": [1, {"tuple": [2, {"t": [3]}]}]})) == 3


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    release = tmp_path_factory.mktemp("release")
    (release / "empty").mkdir()
    zygote = Zygote(release, slot=7)
    child = zygote.spawn("empty", {"call_seconds": 30})
    child.run("def as_dict(x):\n    return {'y': x * 2, 'label': 'twice'}\n\n"
              "def as_tuple(x):\n    return x * 2, 'twice'\n\n"
              "def nested_out(x):\n    return [{'a': (x * 3,)}, x * 4]\n", "cell")
    yield child
    zygote.kill()
    zygote.close()
    shutil.rmtree(release, ignore_errors=True)


@pytest.mark.parametrize("name, expected", [("as_dict", 2.0), ("as_tuple", 2.0),
                                            ("nested_out", 7.0)])
def test_remote_outputs_keep_the_graph_whatever_their_container(child, name, expected):
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    out = child.lookup(name)(x)
    total = sum(t.sum() for t in nested.flatten(out) if isinstance(t, torch.Tensor))
    total.backward()
    assert x.grad is not None and torch.equal(x.grad, torch.full((3,), expected,
                                                                 dtype=torch.float64))
    assert type(out) is {"as_dict": dict, "as_tuple": tuple, "nested_out": list}[name]
