"""autograde.wire: values survive the trip; malformed or oversized messages are refused."""
import json
import socket
import struct

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from autograde import messages, wire


def roundtrip(value, max_bytes=2**30):
    encoder = wire.Encoder(lambda obj: {"ref": 1, "type": type(obj).__name__})
    header = encoder(value)
    frame = wire.pack({"value": header}, encoder.buffers)
    left, right = socket.socketpair()
    with left, right:
        left.sendall(frame)
        message, buffers = wire.Reader(right, max_bytes).read()
    return wire.Decoder(buffers, lambda h: ("ref", h.get("type")))(message["value"])


@pytest.mark.parametrize("dtype", list(wire.DTYPES.values()))
def test_tensors_of_every_dtype(dtype):
    t = (torch.randn(3, 4, dtype=torch.float64) * 10).to(dtype)
    back = roundtrip(t)
    assert back.dtype == dtype and back.shape == t.shape and torch.equal(back, t)


def test_views_empty_and_scalar_tensors():
    base = torch.arange(24.0).reshape(2, 3, 4)
    for t in (base.transpose(0, 2), base[:, 1], torch.empty(0, 5), torch.tensor(3.5)):
        back = roundtrip(t)
        assert back.shape == t.shape and torch.equal(back, t)


def test_containers_and_specials():
    value = {"a": (1, -2.5, float("nan"), float("inf"), None, True, "s"),
             "b": [torch.float16, torch.device("cpu"), torch.Size([2, 3]), 2**70]}
    back = roundtrip(value)
    assert back["a"][:2] == (1, -2.5) and back["a"][2] != back["a"][2]
    assert back["a"][3:] == (float("inf"), None, True, "s")
    assert back["b"] == [torch.float16, torch.device("cpu"), (2, 3), 2**70]


NUMPY_NUMBERS = ["float16", "float32", "float64", "longdouble", "int8", "int16", "int32",
                 "int64", "uint8", "uint16", "uint32", "uint64", "bool_"]


@pytest.mark.parametrize("kind", NUMPY_NUMBERS)
@pytest.mark.parametrize("zero_d", [False, True], ids=["scalar", "0-d array"])
def test_numpy_numbers_arrive_as_their_value(kind, zero_d):
    """An honest numpy number (numpy 2's repr of a float64 is "np.float64(x)") arrives as
    the Python bool, int or float it holds, in a container too, never as a reference."""
    numpy = pytest.importorskip("numpy")
    dtype = getattr(numpy, kind)
    raw = True if kind == "bool_" else (-3 if kind.startswith("int") else
                                        7 if kind.startswith("uint") else 0.1875)
    value = numpy.array(raw, dtype=dtype) if zero_d else dtype(raw)
    expected = type(raw)(raw)
    back = roundtrip({"answer": [value]})["answer"][0]
    assert type(back) is type(expected) and back == expected
    if kind == "float64":  # numpy.float64 is a float: numpy's repr must not reach the wire
        header = wire.Encoder(None)(numpy.float64(1.19e-07))
        assert header == {"float": "1.19e-07"} and roundtrip(numpy.float64(1.19e-07)) == 1.19e-07


def test_numpy_values_that_are_not_one_number_stay_behind():
    numpy = pytest.importorskip("numpy")
    for value in (numpy.array([1.0, 2.0]), numpy.complex128(1j)):
        assert roundtrip(value) == ("ref", type(value).__name__)


def test_other_objects_stay_behind_as_references():
    assert roundtrip(object()) == ("ref", "object")


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=10))
def test_plain_data_roundtrips(value):
    assert roundtrip(value) == value


def raw_frame(header, buffers=()):
    data = json.dumps(header).encode()
    parts = [struct.pack(">I", len(data)), data, struct.pack(">I", len(buffers))]
    for b in buffers:
        parts += [struct.pack(">Q", len(b)), b]
    return b"".join(parts)


def read(frame, max_bytes=2**20):
    left, right = socket.socketpair()
    with left, right:
        left.sendall(frame)
        left.shutdown(socket.SHUT_WR)
        message, buffers = wire.Reader(right, max_bytes).read()
        return wire.Decoder(buffers, lambda h: h)(message.get("value"))


@pytest.mark.parametrize("header, buffers, pattern", [
    ({"value": {"tensor": 0, "dtype": "float32", "shape": [4]}}, [b"\0" * 15], "needs 16 bytes"),
    ({"value": {"tensor": 1, "dtype": "float32", "shape": [1]}}, [b"\0" * 4], "missing buffer"),
    ({"value": {"tensor": 0, "dtype": "object", "shape": [1]}}, [b"\0" * 8], "bad tensor"),
    ({"value": {"tensor": 0, "dtype": "float32", "shape": [-1]}}, [b""], "bad tensor"),
    ({"value": {"dtype": "pickle"}}, [], "unknown dtype"),
    ({"value": {"__reduce__": "os.system"}}, [], "unknown value kind"),
    ({"value": {"tuple": "abc"}}, [], "expected a list"),
    ({"value": {"float": "one"}}, [], "bad number"),
    ({"value": {"bigint": "9" * 5000}}, [], "bad number"),
])
def test_malformed_values_are_refused(header, buffers, pattern):
    with pytest.raises(wire.ProtocolError, match=pattern):
        read(raw_frame(header, buffers))


def test_oversized_and_broken_frames_are_refused():
    with pytest.raises(wire.ProtocolError, match="output limit"):
        read(raw_frame({"value": None}, [b"\0" * 4096]), max_bytes=1024)
    with pytest.raises(wire.ProtocolError, match="header of"):
        read(struct.pack(">I", wire.MAX_HEADER + 1))
    with pytest.raises(wire.ProtocolError, match="not JSON"):
        read(struct.pack(">I", 3) + b"{{{")
    with pytest.raises(EOFError):
        read(struct.pack(">I", 100) + b"{}")


def test_printed_output_keeps_a_head_and_a_tail():
    """wire.Printed: whatever is printed, at most `limit` characters are kept (the first and
    the last half), with the count of those dropped; take() empties it."""
    printed = wire.Printed(20, messages.template("sandbox.output_dropped"))
    for i in range(20_000):
        printed.write(f"line {i}\n")
    text = printed.take()
    dropped = sum(len(f"line {i}\n") for i in range(20_000)) - 20
    assert text == f"line 0\nlin\n[... {dropped} characters dropped by the output limit ...]" \
                   "\nine 19999\n"
    assert printed.take() == ""
    assert printed.write("x" * 10**6) == 10**6
    assert printed.take() == "x" * 10 + f"\n[... {10**6 - 20} characters dropped by the output " \
                                        "limit ...]\n" + "x" * 10
    printed.write("short")
    assert printed.take() == "short"
