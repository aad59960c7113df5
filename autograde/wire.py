"""The message format between the grader and a student's process: JSON plus raw bytes.

Nothing that crosses from the student's process is unpickled: a message is one JSON
header followed by the raw bytes of the tensors it names, each checked against its
declared dtype and shape. A student who controls their process can send wrong numbers,
never code.

Frame: 4-byte big-endian header length, the JSON header, then for each buffer an 8-byte
length and the bytes. Values inside the header:
    null, bools, ints, strings, lists     themselves
    float                                 {"float": "nan" | "inf" | "-inf" | repr}
    numpy scalar or 0-d array             the Python bool, int or float it holds
    tuple / list / dict (str keys)        {"tuple": [...]} / {"list": [...]} / {"dict": {...}}
                                          (autograde.nested's encode(): at most 200 deep)
    torch.Tensor                          {"tensor": i, "dtype": "float32", "shape": [...],
                                           "requires_grad": bool, "storage": int}
    torch.dtype / torch.device            {"dtype": "float64"} / {"device": "cpu"}
    an object left on the other side      {"ref": id, "type": "ClassName", "kind": ...}
    an exception                          {"error": "ValueError", "message": "...", "base": ...}
"""
import collections
import json
import math
import struct
import sys

import torch

from chapters.checks import nested

DTYPES = {name: getattr(torch, name) for name in (
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8",
    "uint8", "bool", "complex64", "complex128")}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}

MAX_HEADER = 16 * 2**20


class ProtocolError(Exception):
    """A malformed message: the other side broke the format (or is lying about it)."""


def _float(x):
    if math.isnan(x):
        return {"float": "nan"}
    if math.isinf(x):
        return {"float": "inf" if x > 0 else "-inf"}
    # float's own repr: a subclass (numpy.float64, whose numpy 2 repr is "np.float64(0.5)")
    # is sent as the number it holds
    return {"float": float.__repr__(x)}


def _numpy_number(value):
    """A numpy scalar (numpy.float32, int64, uint8, bool_, ...) or 0-d array as the Python
    bool, int or float it holds; anything else (numpy not imported, a longdouble or complex
    that no Python number holds) unchanged. numpy is only looked up, never imported: where
    no code imported it, no value can be one of its scalars."""
    numpy = sys.modules.get("numpy")
    if numpy is None or not (isinstance(value, numpy.generic) or (
            isinstance(value, numpy.ndarray) and value.ndim == 0)):
        return value
    try:
        item = numpy.ndarray.item(value) if isinstance(value, numpy.ndarray) \
            else numpy.generic.item(value)
    except Exception:  # (a subclass that breaks item(): left to the reference)
        return value
    if isinstance(item, numpy.floating):  # a longdouble: the nearest float
        item = float(item)
    return item if type(item) in (bool, int, float) else value


class Encoder:
    """Turns a value into (header, buffers); `ref` decides what to do with other objects.
    The containers are autograde.nested's walk (its encode()); this writes the leaves."""

    def __init__(self, ref):
        self.ref = ref
        self.buffers = []

    def __call__(self, value):
        return nested.encode(value, self.leaf)

    def leaf(self, value):
        value = _numpy_number(value)
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return value if abs(value) < 2**62 else {"bigint": str(value)}
        if isinstance(value, float):
            return _float(value)
        if isinstance(value, torch.Tensor):
            return self.tensor(value)
        if isinstance(value, torch.dtype):
            return {"dtype": DTYPE_NAMES.get(value, str(value))}
        if isinstance(value, torch.device):
            return {"device": str(value)}
        if isinstance(value, BaseException):
            return error_value(value)
        return self.ref(value)

    def tensor(self, t):
        requires_grad = bool(t.requires_grad)
        t = t.detach()
        if t.dtype not in DTYPE_NAMES:
            raise TypeError(f"cannot send a tensor of dtype {t.dtype}")
        if t.device.type != "cpu":
            t = t.cpu()
        flat = t.contiguous().reshape(-1)
        data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
        self.buffers.append(data)
        try:
            storage = t.untyped_storage().data_ptr()
        except Exception:
            storage = 0
        return {"tensor": len(self.buffers) - 1, "dtype": DTYPE_NAMES[t.dtype],
                "shape": list(t.shape), "requires_grad": requires_grad,
                "storage": storage}


def tensors(value):
    """The tensors of a value, in the order the wire sends them (on either side)."""
    return [t for t in nested.flatten(value, objects=False) if isinstance(t, torch.Tensor)]


def grad_flags(header):
    """The "requires_grad" flags of the tensors in an encoded value, in the order tensors()
    lists those of the value it decodes to (the same walk: autograde.nested)."""
    return [bool(leaf.get("requires_grad")) for leaf in nested.encoded_leaves(header)
            if isinstance(leaf, dict) and "tensor" in leaf]


def error_value(error):
    """An exception as data: its class name, message, and its nearest builtin class (a
    student's `class ShapeError(ValueError)` is still caught by `except ValueError`)."""
    builtin = next((c.__name__ for c in type(error).__mro__
                    if c.__module__ == "builtins"), "Exception")
    return {"error": type(error).__name__, "message": str(error)[:20000], "base": builtin}


class Decoder:
    """Turns a header back into values; `ref(header)` makes the stand-in for a remote object.
    The containers are autograde.nested's walk (its decode()); this reads the leaves."""

    def __init__(self, buffers, ref, grad=False):
        self.buffers = buffers
        self.ref = ref
        self.grad = grad  # honour "requires_grad" (the student's side, for autograd calls)

    def __call__(self, value):
        return nested.decode(value, self.leaf, ProtocolError)

    def leaf(self, value):
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return value
        if not isinstance(value, dict) or len(value) == 0:
            raise ProtocolError(f"unexpected value {str(value)[:80]!r}")
        if "float" in value or "bigint" in value:
            try:
                return float(value["float"]) if "float" in value else int(value["bigint"])
            except (TypeError, ValueError):
                raise ProtocolError(f"bad number {str(value)[:80]}") from None
        if "tensor" in value:
            return self.tensor(value)
        if "dtype" in value:
            if value["dtype"] not in DTYPES:
                raise ProtocolError(f"unknown dtype {value['dtype']!r}")
            return DTYPES[value["dtype"]]
        if "device" in value:
            return torch.device(str(value["device"]))
        if "ref" in value or "error" in value:
            return self.ref(value)
        raise ProtocolError(f"unknown value kind {sorted(value)[:3]}")

    def tensor(self, value):
        index, name, shape = value.get("tensor"), value.get("dtype"), value.get("shape")
        if not isinstance(index, int) or not 0 <= index < len(self.buffers):
            raise ProtocolError("tensor names a missing buffer")
        if name not in DTYPES or not isinstance(shape, list) or not all(
                isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**40 for n in shape):
            raise ProtocolError(f"bad tensor header {str(value)[:120]}")
        dtype = DTYPES[name]
        data = self.buffers[index]
        numel = math.prod(shape)
        itemsize = torch.empty((), dtype=dtype).element_size()
        if len(data) != numel * itemsize:
            raise ProtocolError(f"tensor of shape {shape} and dtype {name} needs "
                                f"{numel * itemsize} bytes, got {len(data)}")
        if numel == 0:
            tensor = torch.empty(shape, dtype=dtype)
        else:
            tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)
        if self.grad and value.get("requires_grad") is True and tensor.is_floating_point():
            tensor.requires_grad_()
        return tensor


class Printed:
    """What student code prints, bounded: the first and the last `limit` // 2 characters,
    and the count of those dropped between them (a loop of prints costs no memory here),
    said by the template `dropped` (its field {count}; autograde.messages'
    sandbox.output_dropped in the notebook's language: this module binds no catalogue).
    The student's side keeps each reply's "stdout" with one; the grader, the test's."""

    def __init__(self, limit, dropped):
        self.dropped = dropped
        self.half = max(1, int(limit) // 2)
        self.head, self.head_size = [], 0
        self.tail, self.tail_size = collections.deque(), 0
        self.size = 0

    def write(self, text):
        text = str(text)
        written = len(text)
        self.size += written
        room = self.half - self.head_size
        if room > 0:
            self.head.append(text[:room])
            self.head_size += len(self.head[-1])
            text = text[room:]
        if text:
            self.tail.append(text)
            self.tail_size += len(text)
            while self.tail_size - len(self.tail[0]) >= self.half:
                self.tail_size -= len(self.tail.popleft())
            if self.tail_size > self.half:  # one long write: its end only
                self.tail[0] = self.tail[0][self.tail_size - self.half:]
                self.tail_size = self.half
        return written

    append = write

    def take(self):
        """The text kept (with a line saying how much was dropped), then empty again."""
        dropped = self.size - self.head_size - self.tail_size
        said = "\n" + self.dropped.format(count=dropped) + "\n" if dropped else ""
        text = "".join(self.head) + said + "".join(self.tail)
        self.__init__(2 * self.half, self.dropped)
        return text


def pack(message, buffers=()):
    """Bytes of one frame: the JSON header `message` and its `buffers`."""
    header = json.dumps(message, allow_nan=False).encode()
    parts = [struct.pack(">I", len(header)), header, struct.pack(">I", len(buffers))]
    for data in buffers:
        parts += [struct.pack(">Q", len(data)), data]
    return b"".join(parts)


class Reader:
    """Reads frames from a blocking socket, refusing anything above `max_bytes` in all."""

    def __init__(self, sock, max_bytes):
        self.sock = sock
        self.max_bytes = max_bytes

    def exact(self, n):
        chunks, left = [], n
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise EOFError("the student's process closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def read(self):
        (size,) = struct.unpack(">I", self.exact(4))
        if size > MAX_HEADER:
            raise ProtocolError(f"message header of {size} bytes")
        try:
            message = json.loads(self.exact(size))
        except ValueError as error:
            raise ProtocolError(f"message header is not JSON: {error}") from None
        (count,) = struct.unpack(">I", self.exact(4))
        if count > 100_000:
            raise ProtocolError(f"{count} buffers")
        buffers, total = [], size
        for _ in range(count):
            (n,) = struct.unpack(">Q", self.exact(8))
            total += n
            if total > self.max_bytes:
                raise ProtocolError(f"a reply of more than {self.max_bytes} bytes (output limit)")
            buffers.append(self.exact(n))
        if not isinstance(message, dict):
            raise ProtocolError("message is not an object")
        return message, buffers
