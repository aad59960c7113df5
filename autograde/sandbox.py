"""The student's side: a warm zygote that forks one limited process per submission.

Run as `python -m autograde.sandbox FD` (inside bwrap when it exists). The zygote imports
torch once, then waits on socket FD for the grader's orders:
    {"op": "spawn", "limits": {...},  fork a child for one submission, in a scratch folder
     "files": [name, ...]} + buffers  with a copy of its assignment's released files; the
                                      child's end of a new socketpair is handed to the
                                      grader (SCM_RIGHTS)
    {"op": "kill"}                    kill that child and everything it started
The child runs the submission's code and answers the grader's requests (`serve`); it only
ever sends values through autograde.wire: the grader decides every verdict itself.
"""
import builtins
import ctypes
import importlib
import os
import resource
import shutil
import signal
import socket
import sys
import time
import traceback

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ["OMP_NUM_THREADS"] = "1"

import torch  # noqa: E402  (paid once, in the zygote)

torch.set_num_threads(1)  # before any op: forking after the thread pool started would hang
torch.set_num_interop_threads(1)

import matplotlib.pyplot  # noqa: E402,F401  (so that a notebook's import costs nothing)
import numpy  # noqa: E402,F401
from IPython.core.inputtransformer2 import TransformerManager  # noqa: E402

from autograde import wire  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4


class _IPythonStub:
    """get_ipython() for notebook code: magics such as %matplotlib inline do nothing."""

    def run_line_magic(self, *args, **kwargs):
        return None

    run_cell_magic = system = getoutput = run_line_magic

    def __getattr__(self, name):
        return self.run_line_magic


class _Sink:
    """Bounded stand-in for stdout/stderr: keeps the first `limit` characters."""

    def __init__(self, limit):
        self.limit, self.parts, self.size = limit, [], 0

    def write(self, text):
        text = str(text)
        if self.size < self.limit:
            self.parts.append(text[: self.limit - self.size])
        self.size += len(text)
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return False

    def take(self):
        text = "".join(self.parts)
        if self.size > self.limit:
            text += f"\n[... {self.size - self.limit} more characters cut by the output limit]"
        self.parts, self.size = [], 0
        return text


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _limit(which, value):
    try:
        resource.setrlimit(which, (value, value))
    except (ValueError, OSError):
        pass


def _vm_size():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def enter_limits(limits):
    """Apply the child's limits; drop to an unprivileged uid where we can."""
    os.setsid()
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_FSIZE, int(limits.get("file_bytes", 64 * 2**20)))
    _limit(resource.RLIMIT_NOFILE, 256)
    cpu = int(limits.get("cpu_seconds", 600))
    _limit(resource.RLIMIT_CPU, cpu)
    memory = int(limits.get("memory_bytes", 2 * 2**30))
    _limit(resource.RLIMIT_AS, _vm_size() + memory)
    uid = limits.get("uid")
    if uid is not None and os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # from here on: no capabilities, and RLIMIT_NPROC binds
        _limit(resource.RLIMIT_NPROC, int(limits.get("processes", 64)))
    libc = _libc()
    if libc is not None:
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # its memory cannot be read through /proc


class Child:
    """Runs one submission: its code, then the grader's calls on the objects it defined."""

    def __init__(self, sock, limits):
        self.sock = sock
        self.reader = wire.Reader(sock, int(limits.get("request_bytes", 2**30)))
        self.reply_limit = int(limits.get("output_bytes", 256 * 2**20))
        self.namespace = {"__name__": "__main__", "__builtins__": builtins,
                          "get_ipython": _IPythonStub}
        self.refs = {}
        self.calls = {}
        self.transform = TransformerManager().transform_cell
        self.out = _Sink(int(limits.get("print_chars", 100_000)))

    # -- values -----------------------------------------------------------------------
    def _ref(self, obj):
        key = id(obj)
        self.refs[key] = obj
        kind = ("class" if isinstance(obj, type) else
                "module" if isinstance(obj, torch.nn.Module) else
                "callable" if callable(obj) else "object")
        return {"ref": key, "type": type(obj).__name__ if kind != "class" else obj.__name__,
                "kind": kind}

    def _deref(self, header):
        if "ref" in header:
            if header["ref"] not in self.refs:
                raise wire.ProtocolError("unknown reference")
            return self.refs[header["ref"]]
        raise wire.ProtocolError("the grader sent an error value")

    def send(self, message, value=None, has_value=False):
        encoder = wire.Encoder(self._ref)
        if has_value:
            message["value"] = encoder(value)
        data = wire.pack(message, encoder.buffers)
        if len(data) > self.reply_limit:
            data = wire.pack({"error": {"error": "OutputLimit", "message":
                                        f"a result of {len(data)} bytes is over the output limit"}})
        self.sock.sendall(data)

    # -- requests ---------------------------------------------------------------------
    def serve(self):
        sys.stdout = sys.stderr = self.out
        pid = os.getpid()
        while True:
            try:
                message, buffers = self.reader.read()
            except (EOFError, OSError):
                return
            decode = wire.Decoder(buffers, self._deref)
            op = message.get("op")
            try:
                handler = getattr(self, "op_" + str(op))
            except AttributeError:
                self.send({"error": {"error": "ProtocolError", "message": f"unknown op {op!r}"}})
                continue
            try:
                reply = handler(message, decode)
            except BaseException as error:  # the student's code may raise anything
                if isinstance(error, KeyboardInterrupt):
                    raise
                reply = {"error": wire.error_value(error),
                         "traceback": _student_traceback(error)}
            if os.getpid() != pid:  # a copy that the student's code forked: it must not answer
                os._exit(0)
            reply.setdefault("stdout", self.out.take())
            value = reply.pop("_value", None)
            has_value = "_has_value" in reply
            reply.pop("_has_value", None)
            try:
                self.send(reply, value, has_value)
            except Exception as error:  # an unsendable value
                self.send({"error": wire.error_value(error), "stdout": reply.get("stdout", "")})

    def op_run(self, message, decode):
        source = self.transform(str(message["source"]))
        code = compile(source, str(message.get("name", "<cell>")), "exec")
        exec(code, self.namespace)
        return {"ok": True}

    def op_lookup(self, message, decode):
        name = str(message["name"])
        if name not in self.namespace:
            raise NameError(f"name {name!r} is not defined")
        return {"_value": self.namespace[name], "_has_value": True}

    def op_getattr(self, message, decode):
        obj = self._deref(message["target"])
        return {"_value": getattr(obj, str(message["name"])), "_has_value": True}

    def op_list(self, message, decode):
        return {"_value": list(self._deref(message["target"])), "_has_value": True}

    def op_repr(self, message, decode):
        return {"_value": repr(self._deref(message["target"]))[:2000], "_has_value": True}

    def op_call(self, message, decode):
        target = self._deref(message["target"])
        decode.grad = bool(message.get("grad"))
        args, kwargs = decode(message["args"]), decode(message["kwargs"])
        grad_inputs = []
        if message.get("grad"):
            args, kwargs = self._leaves((args, kwargs), grad_inputs)
        with _forbidding(message.get("forbid") or []):
            result = target(*args, **kwargs)
        reply = {"_value": result, "_has_value": True}
        if grad_inputs:
            outputs = [t for t in _tensors(result) if t.requires_grad]
            key = len(self.calls)
            self.calls[key] = (grad_inputs, outputs)
            reply["call"] = key
        return reply

    def op_backward(self, message, decode):
        inputs, outputs = self.calls[int(message["call"])]
        grads = decode(message["grads"])
        pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None]
        result = torch.autograd.grad([o for o, _ in pairs], inputs, [g for _, g in pairs],
                                     allow_unused=True) if pairs else [None] * len(inputs)
        return {"_value": list(result), "_has_value": True}

    def op_probe(self, message, decode):
        module, _, name = str(message["function"]).partition(":")
        if not module.startswith("checks.") or name.startswith("__"):
            raise PermissionError(f"not a probe: {module}:{name}")
        function = getattr(importlib.import_module(module), name)
        with _forbidding(message.get("forbid") or []):  # the forbid() around the probe
            result = function(*decode(message["args"]), **decode(message["kwargs"]))
        return {"_value": result, "_has_value": True}

    def _leaves(self, value, leaves):
        if isinstance(value, torch.Tensor) and value.requires_grad:
            leaf = value.detach().requires_grad_()
            leaves.append(leaf)
            return leaf
        if isinstance(value, (tuple, list)):
            return type(value)(self._leaves(v, leaves) for v in value)
        if isinstance(value, dict):
            return {k: self._leaves(v, leaves) for k, v in value.items()}
        return value


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)


def _student_traceback(error):
    """The traceback lines inside the student's code (cells), not the grader's frames."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith(os.path.dirname(__file__))]
    lines = traceback.format_list(frames[-6:])
    return "".join(lines)[-4000:]


class _forbidding:
    """The checks' forbid(): calling one of the named torch functions raises."""

    def __init__(self, forbidden):
        self.forbidden = {}
        for qualname, label in forbidden:
            obj = _resolve_torch(str(qualname))
            if obj is not None:
                self.forbidden[obj] = str(label)

    def __enter__(self):
        if self.forbidden:
            from checks.common import forbid
            self.mode = forbid(**{label: f for f, label in self.forbidden.items()})
            self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        if self.forbidden:
            self.mode.__exit__(*exc)


def _resolve_torch(qualname):
    if not qualname.startswith("torch."):
        return None
    obj = torch
    for part in qualname.split(".")[1:]:
        obj = getattr(obj, part, None)
    return obj


def _sweep(uid, keep):
    """Kill every process of `uid` (or, without one, every descendant of this zygote)."""
    me = os.getpid()
    deadline = time.monotonic() + 10
    while True:
        victims = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in keep or int(entry) == me:
                continue
            try:
                with open(f"/proc/{entry}/status") as status:
                    fields = dict(line.split(":", 1) for line in status if ":" in line)
            except OSError:
                continue
            owner = int(fields.get("Uid", "-1").split()[0])
            parent = int(fields.get("PPid", "0").strip())
            if (uid is not None and owner == uid) or (uid is None and parent == me):
                victims.append(int(entry))
        if not victims:
            break
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap()
        if time.monotonic() > deadline:
            break
        time.sleep(0.005)  # a killed process lingers until its (dying) parent lets go of it


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _remove_tree(path):
    """rmtree that also removes what the student's code made read-only or unreadable (when
    it runs as our own uid it may chmod its scratch folder to keep it)."""
    def unlock(folder):
        try:
            os.chmod(folder, 0o700)
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                unlock(entry.path)
    if os.path.isdir(path) and not os.path.islink(path):
        unlock(path)
    shutil.rmtree(path, ignore_errors=True)


def _install(scratch, names, buffers, uid):
    """The child's scratch folder, its own (uid) and new, holding `release/`: a read-only
    copy of the assignment's released files, written before the uid drops."""
    os.makedirs(scratch, mode=0o700)
    release = os.path.join(scratch, "release")
    for name, data in zip(names, buffers):
        path = os.path.normpath(os.path.join(release, str(name)))
        if not path.startswith(release + os.sep):
            raise wire.ProtocolError(f"a released file outside the release: {name!r}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as file:
            file.write(data)
        os.chmod(path, 0o444)
    os.makedirs(release, exist_ok=True)
    for folder, _, _ in os.walk(release):
        os.chmod(folder, 0o555)
    if uid is not None:
        os.chown(scratch, uid, uid)
    return release


def _tmp_entries():
    """{path: mode} of everything under /tmp, not descending into other mounts: bwrap's
    read-only binds of Python sit under /tmp when the grader's venv does."""
    device = os.lstat("/tmp").st_dev
    found = {}
    for folder, dirs, files in os.walk("/tmp"):
        for name in files:
            path = os.path.join(folder, name)
            found[path] = os.lstat(path).st_mode
        inside = []
        for name in dirs:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            found[path] = info.st_mode
            if info.st_dev == device and not os.path.islink(path):
                inside.append(name)
        dirs[:] = inside
    return found


def _clear_tmp(baseline):
    """Put /tmp (the sandbox's own tmpfs) back as it was at start (`baseline`, from
    _tmp_entries): what one submission left there, or made unreadable, must not reach the
    next one."""
    for path, mode in sorted(baseline.items()):
        try:
            if os.lstat(path).st_mode != mode and not os.path.islink(path):
                os.chmod(path, mode & 0o7777)
        except OSError:
            pass
    for path in sorted(set(_tmp_entries()) - set(baseline), key=len):
        if not os.path.lexists(path):
            continue  # in a folder removed already
        if os.path.isdir(path) and not os.path.islink(path):
            _remove_tree(path)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


def zygote(fd):
    control = socket.socket(fileno=fd)
    libc = _libc()
    if libc is not None:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans come back to us
        # a child running as our own uid (no bwrap, or bwrap without root) cannot ptrace us
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    # nothing importable but Python's own and the scratch copy of the release: not the
    # folder holding the grader's package (without bwrap: the repository, solutions/ too)
    grader = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != grader]
    private_tmp = os.environ.pop("AUTOGRADE_PRIVATE_TMP", None) == "1"
    tmp_baseline = _tmp_entries() if private_tmp else None
    control.sendall(wire.pack({"ready": True, "pid": os.getpid(), "uid": os.getuid()}))
    reader = wire.Reader(control, 2**28)
    child, uid, scratch, spawned = None, None, None, 0
    while True:
        try:
            message, buffers = reader.read()
        except (EOFError, OSError):
            break
        if message.get("op") == "spawn":
            limits = message.get("limits") or {}
            uid = limits.get("uid") if os.getuid() == 0 else None
            # a new folder each time: whatever one child left cannot be in the next one's way
            spawned += 1
            scratch = f"{limits.get('scratch', '/tmp/autograde-scratch')}-{spawned}"
            release = _install(scratch, message.get("files") or [], buffers, uid)
            ours, theirs = socket.socketpair()
            pid = os.fork()
            if pid == 0:
                control.close()
                ours.close()
                try:
                    os.chdir(scratch)
                    sys.path.insert(0, release)
                    null = os.open(os.devnull, os.O_RDWR)
                    for target in (0, 1, 2):
                        os.dup2(null, target)
                    enter_limits(limits)
                    Child(theirs, limits).serve()
                finally:
                    os._exit(0)
            socket.send_fds(control, [wire.pack({"spawned": pid})], [ours.fileno()])
            theirs.close()
            ours.close()  # the grader holds the only other end now
            child = pid
        elif message.get("op") == "kill":
            if child is not None:
                try:
                    os.kill(child, signal.SIGKILL)
                except OSError:
                    pass
            _sweep(uid, keep={os.getpid(), os.getppid()})
            if scratch:
                _remove_tree(scratch)
            if private_tmp:
                _clear_tmp(tmp_baseline)
            status = None
            if child is not None:
                try:
                    _, status = os.waitpid(child, 0)
                except ChildProcessError:
                    pass
            _reap()
            child = None
            control.sendall(wire.pack({"killed": status}))
        else:
            break


if __name__ == "__main__":
    zygote(int(sys.argv[1]))
