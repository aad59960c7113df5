"""The student's side: a warm zygote that forks one limited process per submission.

Run as `python -m autograde.sandbox FD` (inside bwrap when it exists). The zygote imports
torch once, then waits on socket FD for the grader's orders:
    {"op": "spawn", "limits": {...},  fork a child for one submission, in a scratch folder
     "files": [name, ...],            with a copy of its assignment's released files,
     "language": ..., "messages": {}} speaking its notebook's language (speak); the
     + buffers                        child's end of a new socketpair is handed to the
                                      grader (SCM_RIGHTS)
    {"op": "kill"}                    kill that child and everything it started
The child runs the submission's code and answers the grader's requests (`serve`; declared
in autograde.protocol); it only ever sends values through autograde.wire: the grader decides
every verdict itself. The operations on the student's objects are checks.operations, the
same code that serves them in the student's Jupyter; no other code of the checks runs here.

Inside bwrap, each child first enters a mount and an IPC namespace of its own
(enter_namespaces): its scratch folder and /dev/shm are fresh tmpfs with size caps, the
rest read-only, and all it leaves behind dies with it. Then its limits (enter_limits):
rlimits, its own uid where the zygote is root, no capabilities, a seccomp filter.
"""
import ast
import builtins
import ctypes
import linecache
import os
import resource
import signal
import socket
import sys
import tempfile
import time
import traceback

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ["OMP_NUM_THREADS"] = "1"

import torch  # noqa: E402  (paid once, in the zygote)

torch.set_num_threads(1)  # before any op: forking after the thread pool started would hang
torch.set_num_interop_threads(1)

import matplotlib.pyplot  # noqa: E402,F401  (so that a notebook's import costs nothing)
# what torch imports the first time an optimizer is built (chapter 8's checks hand the
# student's train_step one): 1.5 s per submission otherwise, once here (75 MB, shared)
import torch._dynamo  # noqa: E402,F401
import numpy  # noqa: E402,F401
from IPython.core.inputtransformer2 import TransformerManager  # noqa: E402

from autograde import protocol, wire  # noqa: E402
from autograde.trees import entries, remove_tree  # noqa: E402
# the checks' two modules that judge nothing (autograde/remote.py binds them in)
from chapters.checks import nested, operations  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 0x4000, 1 << 18
CAP_SYS_ADMIN = 21
SCRATCH = "/scratch"  # where each child's own tmpfs is mounted (bwrap makes the folder)


# The sentences this process builds, one template each: sent by the grader with each spawn,
# in the notebook's language (autograde.remote.child_messages; their English lives in
# autograde.messages), put in place by speak()
MESSAGES = {}


def speak(language, templates):
    """This child speaks `language` (its notebook's, as the grader checked it): in
    COURSE_LANGUAGE, for any code here that reads it (the release's own checks package,
    whose given() objects run here), and through `templates` (child_messages'), which
    replace the English of nested's and operations' MESSAGES (only keys they hold) and fill
    this module's."""
    os.environ["COURSE_LANGUAGE"] = str(language)
    templates = templates if isinstance(templates, dict) else {}
    for module in (nested, operations):
        sent = templates.get(module.__name__.rsplit(".", 1)[-1])
        if isinstance(sent, dict):
            module.MESSAGES.update({key: str(value) for key, value in sent.items()
                                    if key in module.MESSAGES})
    MESSAGES.update({key: str(value) for key, value in (templates.get("sandbox") or {}).items()})


class _IPythonStub:
    """get_ipython() for notebook code: magics such as %matplotlib inline do nothing."""

    def run_line_magic(self, *args, **kwargs):
        return None

    run_cell_magic = system = getoutput = run_line_magic

    def __getattr__(self, name):
        return self.run_line_magic


class _Sink(wire.Printed):
    """Bounded stand-in for stdout/stderr: the head and the tail of what each request's
    code prints (wire.Printed), sent with its reply."""

    def flush(self):
        pass

    def isatty(self):
        return False


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
        # it dies with the zygote (set after the uid change, which clears it)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        _drop_capabilities(libc)
        _install_seccomp(libc, deny=limits.get("deny") or ())


def _drop_capabilities(libc):
    """No capability left (an unprivileged bwrap gives the zygote CAP_SYS_ADMIN in its user
    namespace, to make each child's namespaces), and none to gain by exec."""
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: all empty
    try:
        libc.capset(header, data)
    except AttributeError:
        pass


# syscall numbers: unshare, clone, clone3, setns, memfd_create; and those that may be denied
_SYSCALLS = {"x86_64": (0xC000003E, 272, 56, 435, 308, 319),
             "aarch64": (0xC00000B7, 97, 220, 435, 268, 279)}
DENIABLE = {"x86_64": {"shmget": 29, "msgget": 68, "mq_open": 240},
            "aarch64": {"shmget": 194, "msgget": 186, "mq_open": 180}}


def seccomp_program(machine, deny=()):
    """The child's seccomp filter, as [(code, jt, jf, k)]: no new user namespace (from one,
    a process could mount a tmpfs of any size, or make an IPC namespace without our caps),
    no setns, no memfd (memory outside every limit), and the `deny` syscalls of DENIABLE
    (System V or POSIX IPC where the child has no IPC namespace of its own, or its limits
    cannot be set): EPERM. clone3 says ENOSYS, so libc falls back to clone, whose flags a
    filter can read. Other architectures' syscalls: ENOSYS."""
    arch, unshare, clone, clone3, setns, memfd = _SYSCALLS[machine]
    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    code = [("ld", 4), ("jeq", arch, "ok", "nosys"), "ok", ("ld", 0)]
    if machine == "x86_64":
        code.append(("jge", 0x40000000, "nosys", None))  # the x32 ABI
    code += [("jeq", clone3, "nosys", None), ("jeq", setns, "perm", None),
             ("jeq", memfd, "perm", None)]
    code += [("jeq", DENIABLE[machine][name], "perm", None) for name in sorted(deny)]
    code += [("jeq", unshare, "flags", None), ("jeq", clone, "flags", None),
             ("ret", allow), "flags", ("ld", 16), ("jset", CLONE_NEWUSER, "perm", None),
             ("ret", allow), "perm", ("ret", eperm), "nosys", ("ret", enosys)]
    labels, index = {}, 0
    for item in code:
        if isinstance(item, str):
            labels[item] = index
        else:
            index += 1
    program, index = [], 0
    for item in code:
        if isinstance(item, str):
            continue
        op = item[0]
        if op in ("ld", "ret"):
            program.append((LD if op == "ld" else RET, 0, 0, item[1]))
        else:
            jump = lambda label: 0 if label is None else labels[label] - index - 1  # noqa: E731
            program.append(({"jeq": JEQ, "jge": JGE, "jset": JSET}[op], jump(item[2]),
                             jump(item[3]), item[1]))
        index += 1
    return program


def _install_seccomp(libc, deny=()):
    import platform
    machine = platform.machine()
    if machine not in _SYSCALLS:
        return  # (documented: the limits that need it hold on x86_64 and aarch64 only)

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8),
                    ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    rules = seccomp_program(machine, deny)
    filters = (Filter * len(rules))(*[Filter(*rule) for rule in rules])
    program = Program(len(rules), filters)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "the sandbox could not install its seccomp filter")


def namespaces_available():
    """Whether this zygote can give each child namespaces of its own: it runs in bwrap
    (AUTOGRADE_PRIVATE_TMP) with CAP_SYS_ADMIN (root, or --cap-add in a user namespace)."""
    if os.environ.get("AUTOGRADE_PRIVATE_TMP") != "1" or not os.path.isdir(SCRATCH):
        return False
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)
    return False


def _check(result, what):
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _remount_read_only(libc, path):
    flags = os.statvfs(path).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _check(libc.mount(None, path.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags,
                      None), f"remount {path} read-only")


def enter_namespaces(limits, uid, names, buffers):
    """In a new child, before its limits: a mount and an IPC namespace of its own, so that
    all it can write is a fresh tmpfs at SCRATCH (its working folder, holding `release/`)
    and a fresh /dev/shm, each with a size and an inode cap, and every System V or POSIX
    IPC object it makes lives in its own namespace: the kernel frees all of it with the
    child's last process. Returns (scratch, release, syscalls to deny)."""
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare")
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    owner = uid if uid is not None else os.getuid()
    inodes = int(limits.get("scratch_inodes", 100_000))
    for path, size, mode in ((SCRATCH, int(limits.get("scratch_bytes", 256 * 2**20)), 0o700),
                             ("/dev/shm", int(limits.get("shm_bytes", 64 * 2**20)), 0o1777)):
        options = f"size={size},nr_inodes={inodes},mode={mode:o},uid={owner},gid={owner}"
        _check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                          options.encode()), f"mount a tmpfs on {path}")
    # nothing else it may write: the zygote's /tmp and /dev stay as they are for the next
    for path in ("/tmp", "/dev"):
        _remount_read_only(libc, path)
    # System V shared memory counted against the same cap as /dev/shm, where the IPC
    # namespace's own limits can be set (the grader runs as root); refused elsewhere
    shm = int(limits.get("shm_bytes", 64 * 2**20))
    try:
        for name, value in (("shmmax", shm), ("shmall", max(1, shm // os.sysconf("SC_PAGE_SIZE"))),
                            ("shmmni", 64), ("msgmni", 16)):
            with open(f"/proc/sys/kernel/{name}", "w") as handle:
                handle.write(str(value))
        deny = []
    except OSError:
        deny = ["shmget", "msgget"]
    release = _install(SCRATCH, names, buffers, uid, make=False)
    return SCRATCH, release, deny


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
        # [the exception, [torch function, shapes]] of the torch call that raised in the
        # request being served, where op_call noted it (the grader asked: "traced")
        self.raising = []
        self.transform = TransformerManager().transform_cell
        self.out = _Sink(int(limits.get("print_chars", 100_000)), MESSAGES["output_dropped"])

    # -- values -----------------------------------------------------------------------
    def _ref(self, obj):
        key = id(obj)
        self.refs[key] = obj
        kind = operations.kind(obj)
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
                                        MESSAGES["output_limit"].format(size=len(data))}})
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
            try:
                protocol.check_request(message)
            except wire.ProtocolError as refused:
                self.send({"error": {"error": "ProtocolError", "message": str(refused)}})
                continue
            op = message["op"]
            handler = getattr(self, "op_" + op)
            self.raising = []  # (op_call's RaisingCall, where the grader asked for it)
            try:
                reply = handler(message, decode)
            except BaseException as error:  # the student's code may raise anything
                if isinstance(error, KeyboardInterrupt):
                    raise
                reply = {"error": wire.error_value(error),
                         "traceback": _student_traceback(error)}
                shapes = self._line_shapes(op, error)
                if shapes:
                    reply["line_shapes"] = shapes
            if os.getpid() != pid:  # a copy that the student's code forked: it must not answer
                os._exit(0)
            reply.setdefault("stdout", self.out.take())
            value = reply.pop("_value", None)
            has_value = "_has_value" in reply
            reply.pop("_has_value", None)
            protocol.check_reply(op, list(reply) + ["value"] * has_value)
            try:
                self.send(reply, value, has_value)
            except Exception as error:  # an unsendable value
                self.send({"error": wire.error_value(error), "stdout": reply.get("stdout", "")})

    def _line_shapes(self, op, error):
        """The shapes on the line of the student's code that `error` came from, as
        checks.operations.attempt() reports them in the student's Jupyter (raised_line_shapes:
        JSON text, "" where there is nothing to say), with the torch call that raised it
        where op_call noted one: sent with the error reply, so that the grader's message on
        a call it made itself (autograde.remote: the proxy's exception) names the same cause
        as the kit's. Not for a cell the grader runs ("run": its failure is reported as
        it is) or the course's own code ("given": the release's copy of the checks is no
        student's code, but not this process's checks either); "" where reading it fails."""
        if op in ("run", "given"):
            return ""
        try:
            return operations.raised_line_shapes(error, self.raising)
        except Exception:  # (a report that cannot be made: the error goes without it)
            return ""

    def op_run(self, message, decode):
        source = self.transform(str(message["source"]))
        name = str(message.get("name", "<cell>"))
        # numbered from the cell's line it starts at: the grader sends it unpadded
        offset, tree = max(0, int(message.get("line", 1)) - 1), None
        if offset:
            try:
                tree = compile(source, name, "exec", ast.PyCF_ONLY_AST)
            except SyntaxError as error:
                error.lineno = (error.lineno or 1) + offset
                raise
            except (RecursionError, MemoryError):
                pass  # (compiled from the source below: Python's own message, as ever)
        code = compile(source, name, "exec") if tree is None else \
            compile(ast.increment_lineno(tree, offset), name, "exec")
        # the cell's lines, as numbered, for a traceback (checks.operations.student_line)
        linecache.cache[name] = (len(source), None, ["\n"] * offset + source.splitlines(True),
                                 name)
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

    def op_len(self, message, decode):
        return {"_value": len(self._deref(message["target"])), "_has_value": True}

    def op_repr(self, message, decode):
        return {"_value": repr(self._deref(message["target"]))[:2000], "_has_value": True}

    def op_call(self, message, decode):
        target = self._deref(message["target"])
        decode.grad = bool(message.get("grad"))
        args, kwargs = decode(message["args"]), decode(message["kwargs"])
        grad_inputs = []
        if message.get("grad"):
            args, kwargs = self._leaves((args, kwargs), grad_inputs)
        if message.get("observe"):
            with _forbidding(message.get("forbid") or []):
                return {"_value": operations.observe(target, args, kwargs, copy=_copied),
                        "_has_value": True}
        with _forbidding(message.get("forbid") or []):
            if message.get("traced"):
                # the torch call that raises in it, noted for the error reply (_line_shapes)
                with operations.RaisingCall() as noting:
                    self.raising = noting.raising
                    result = target(*args, **kwargs)
            else:
                result = target(*args, **kwargs)
        reply = {"_value": result, "_has_value": True}
        if grad_inputs:
            outputs = [t for t in wire.tensors(result) if t.requires_grad]
            key = len(self.calls)
            self.calls[key] = (grad_inputs, outputs)
            reply["call"] = key
        return reply

    def op_load(self, message, decode):
        """checks.common.load_weights(), done here (checks.operations.load_weights): what
        it found, as data."""
        target = self._deref(message["target"])
        return {"_value": operations.load_weights(target, decode(message["weights"])),
                "_has_value": True}

    def op_given(self, message, decode):
        """checks.common.given(): the course's own function or class, imported here (under
        "checks", the release's copy), called on the grader's arguments."""
        target = operations.resolve_given(str(message["path"]), checks="checks")
        return {"_value": target(*decode(message["args"]), **decode(message["kwargs"])),
                "_has_value": True}

    def op_mutants(self, message, decode):
        """checks.operations.mutants() of an object: its one-edit variants, made here where
        its source is, sent back as new objects with their descriptions (data the grader
        bounds and only words a message with: checks.common.repair_descriptions)."""
        target = self._deref(message["target"])
        return {"_value": operations.mutants(target), "_has_value": True}

    def op_backward(self, message, decode):
        inputs, outputs = self.calls[int(message["call"])]
        grads = decode(message["grads"])
        pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None]
        result = torch.autograd.grad([o for o, _ in pairs], inputs, [g for _, g in pairs],
                                     allow_unused=True) if pairs else [None] * len(inputs)
        return {"_value": list(result), "_has_value": True}

    def _leaves(self, value, leaves):
        """`value` with each tensor that requires grad replaced by a new leaf of the graph,
        appended to `leaves` (the inputs whose gradients op_backward computes)."""
        def leaf(item):
            if isinstance(item, torch.Tensor) and item.requires_grad:
                leaves.append(item.detach().requires_grad_())
                return leaves[-1]
            return item
        return nested.map_leaves(value, leaf, objects=False)


def _copied(value):
    """`value` with its tensors detached copies (plain tensors)."""
    return nested.map_leaves(value, lambda item: item.detach().clone().as_subclass(torch.Tensor)
                             if isinstance(item, torch.Tensor) else item, objects=False)


_GRADERS = (os.path.dirname(__file__) + os.sep, os.path.dirname(operations.__file__) + os.sep)


def _student_traceback(error):
    """The traceback lines inside the student's code (cells), not the grader's frames (its
    package's, and those of the checks' modules bound in: checks.operations, nested)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith(_GRADERS)]
    lines = traceback.format_list(frames[-6:])
    return "".join(lines)[-4000:]


class _forbidding:
    """The forbid_spec() blocks in force in the grader around this call (their specs, sent
    as {pattern, what, label}): calling a torch function they name raises the checks'
    teaching message (checks.operations). Only a message: the grader decides what was used
    from the submitted source."""

    def __init__(self, forbidden):
        specs = [operations.Forbidden("", (), **{k: str(entry.get(k, ""))
                                                 for k in ("pattern", "what", "label")})
                 for entry in forbidden if isinstance(entry, dict)]
        self.mode = operations.forbid_spec(*specs) if specs else None

    def __enter__(self):
        if self.mode is not None:
            self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        if self.mode is not None:
            self.mode.__exit__(*exc)


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


_remove_tree = remove_tree  # iterative: a tree of any depth (autograde.trees)


def _install(scratch, names, buffers, uid, make=True):
    """The child's scratch folder, its own (uid) and new, holding `release/`: a read-only
    copy of the assignment's released files, written before the uid drops."""
    if make:
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
    """{path: mode} of everything under /tmp and /dev/shm, not descending into other
    mounts: bwrap's read-only binds of Python sit under /tmp when the grader's venv does."""
    found = {}
    for root in _SHARED_ROOTS:
        if os.path.isdir(root):
            found.update(entries(root))
    return found


_SHARED_ROOTS = ("/tmp", "/dev/shm")


def _clear_tmp(baseline):
    """Without namespaces of its own per child: put /tmp and /dev/shm (the sandbox's own
    tmpfs) back as they were at start (`baseline`, from _tmp_entries), and remove every
    System V IPC object (the zygote's IPC namespace is bwrap's, holding only what children
    made): what one submission left, or made unreadable, must not reach the next one."""
    _remove_sysv_ipc()
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


def _remove_sysv_ipc():
    libc = _libc()
    if libc is None:
        return
    for kind, remove in (("shm", "shmctl"), ("sem", "semctl"), ("msg", "msgctl")):
        try:
            with open(f"/proc/sysvipc/{kind}") as table:
                ids = [int(line.split()[1]) for line in list(table)[1:] if line.split()]
        except (OSError, ValueError, IndexError):
            continue
        for ident in ids:
            if kind == "sem":
                getattr(libc, remove)(ident, 0, 0)  # IPC_RMID
            else:
                getattr(libc, remove)(ident, 0, None)


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
    private = namespaces_available() and os.environ.get("AUTOGRADE_SHARED_NAMESPACES") != "1"
    private_tmp = os.environ.pop("AUTOGRADE_PRIVATE_TMP", None) == "1"
    tmp_baseline = _tmp_entries() if private_tmp and not private else None
    if not private_tmp and libc is not None:
        # without bwrap (whose --die-with-parent does it), die with the grader's worker
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != int(os.environ.get("AUTOGRADE_PARENT", os.getppid())):
            os._exit(1)
    control.sendall(wire.pack({"ready": True, "pid": os.getpid(), "uid": os.getuid(),
                               "isolation": "namespaces" if private else "shared"}))
    reader = wire.Reader(control, 2**28)
    child, uid, scratch, spawned = None, None, None, 0
    while True:
        try:
            message, buffers = reader.read()
        except (EOFError, OSError):
            break
        try:
            protocol.check_request(message, protocol.ZYGOTE)
        except wire.ProtocolError:
            break  # (only the grader talks to the zygote)
        if message.get("op") == "spawn":
            limits = message.get("limits") or {}
            uid = limits.get("uid") if os.getuid() == 0 else None
            names = message.get("files") or []
            spawned += 1
            if private:
                scratch = None  # the child mounts its own
            else:
                # a new folder each time: whatever one child left cannot be in the next's way
                scratch = f"{limits.get('scratch', '/tmp/autograde-scratch')}-{spawned}"
                release = _install(scratch, names, buffers, uid)
                # no IPC namespace of its own: no System V or POSIX IPC at all (it would
                # outlive the child, with no size cap)
                limits = dict(limits, deny=["shmget", "msgget", "mq_open"])
            ours, theirs = socket.socketpair()
            pid = os.fork()
            if pid == 0:
                control.close()
                ours.close()
                try:
                    if private:
                        scratch, release, deny = enter_namespaces(limits, uid, names, buffers)
                        limits = dict(limits, deny=deny)
                        for name in ("HOME", "TMPDIR"):
                            os.environ[name] = scratch
                        os.environ["MPLCONFIGDIR"] = os.path.join(scratch, ".matplotlib")
                        tempfile.tempdir = None
                    os.chdir(scratch)
                    sys.path.insert(0, release)
                    null = os.open(os.devnull, os.O_RDWR)
                    for target in (0, 1, 2):
                        os.dup2(null, target)
                    speak(message.get("language"), message.get("messages"))
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
            if private_tmp and not private:
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
