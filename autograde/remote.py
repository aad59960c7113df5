"""The grader's side of the sandbox: start zygotes, talk to a submission's process.

The checks run here, in the grader, on inputs they generate here; what the student's
code defined is reached through RemoteRef stand-ins whose calls travel over autograd-aware
RPC (autograde.wire). Failures of the student's process (a timeout, a crash, broken
messages) raise SubmissionFault, a BaseException, so that no check's `except Exception`
can mistake them for an answer.
"""
import builtins
import contextvars
import fcntl
import os
import select
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

from autograde import messages, wire
from autograde.paths import CHECKS, SANDBOX
from autograde.protocol import ZYGOTE, request
from autograde.trees import remove_tree
from chapters.checks import language as checks_language
from chapters.checks import nested, operations

PACKAGE = Path(__file__).resolve().parent
SANDBOX_MODULES = ("__init__.py", "sandbox.py", "protocol.py", "wire.py", "trees.py")
# of the checks, the modules that judge nothing: the walk over nested values, the
# operations on the student's objects (chapters.checks.operations), at the same place as in
# the repository. No catalogue and no other module is bound: each child is sent its
# sentences' templates in its notebook's language (child_messages).
SANDBOX_CHECKS = ("nested.py", "operations.py", "repair.py")
SANDBOX_FILES = {PACKAGE / name: f"/grader/autograde/{name}" for name in SANDBOX_MODULES} | {
    CHECKS / name: f"/grader/chapters/checks/{name}" for name in SANDBOX_CHECKS}


class SubmissionFault(BaseException):
    """The student's process timed out, died or broke the protocol; `kind` says which.

    Why, as the template `key` of autograde.messages with its `fields` (then `message` is
    its English and reason(language) the student's), or as a `message` of its own (what
    broke the protocol: the grader's wire format's words, in English)."""

    def __init__(self, kind, message="", key=None, **fields):
        message = messages.text(key, **fields) if key else message
        super().__init__(message)
        self.kind, self.message, self.key, self.fields = kind, message, key, fields

    def reason(self, language=messages.ENGLISH):
        """Why, in `language`."""
        return messages.text(self.key, language, **self.fields) if self.key else self.message


def child_messages(language):
    """The templates a student's process builds its sentences from, in `language` (its
    notebook's, messages.supported): {"nested": {key: template}, "operations": {...}} of the
    two modules of the checks it runs (their MESSAGES, translated by the checks' catalogue,
    checks.po, as chapters.checks.language translates every module's), and {"sandbox":
    {"output_limit": ..., "output_dropped": ...}} of its own (autograde.messages, grader.po).
    Sent with each spawn: the student's process gets the translations of its own sentences
    and nothing else (no
    catalogue holding the other modules' sentences, no module of the checks beyond these
    two; autograde.sandbox.Child.speak)."""
    with checks_language.speaking(language):
        # (their English: checks.common makes MESSAGES a lookup in the language of now)
        templates = {module.__name__.rsplit(".", 1)[-1]: dict(checks_language.translated(
            module.__name__, getattr(module.MESSAGES, "english", module.MESSAGES)))
            for module in (nested, operations)}
    templates["sandbox"] = {key: messages.template(f"sandbox.{key}", language)
                            for key in ("output_limit", "output_dropped")}
    return templates


def bwrap_path():
    """Path of Debian's bubblewrap, or None (then student code runs without a sandbox)."""
    if os.environ.get("AUTOGRADE_NO_BWRAP"):
        return None
    return shutil.which("bwrap")


def _environment(home):
    """The sandbox's whole environment: nothing of the grader's (a database URL with its
    password, tokens) reaches the student's code."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": home,
            "PYTHONPATH": str(PACKAGE.parent), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": f"{home}/matplotlib"}


def _bwrap_command(bwrap, fd):
    """bwrap arguments: a read-only view of Python and the grader's package, nothing else.
    No course folder is mounted: each child gets its own assignment's released files from
    the grader (Zygote.spawn), so no submission sees another chapter's files."""
    binds = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    args = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session",
            "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
            "--symlink", "usr/sbin", "/sbin", "--ro-bind", "/etc", "/etc",
            "--dev", "/dev", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
            "--proc", "/proc", "--size", str(SCRATCH_BYTES), "--tmpfs", "/tmp",
            "--dir", "/grader/autograde", "--dir", "/grader/chapters/checks", "--clearenv"]
    # of the grader's package, only the modules the zygote runs (the rest, e.g. what writes
    # the students' kits, is none of the sandbox's business)
    for source, target in SANDBOX_FILES.items():
        args += ["--ro-bind", str(source), target]
    for name, value in dict(_environment("/tmp"), PYTHONPATH="/grader",
                            AUTOGRADE_PRIVATE_TMP="1").items():
        args += ["--setenv", name, value]
    if os.environ.get("AUTOGRADE_SHARED_NAMESPACES") == "1":  # (tests: the fallback)
        args += ["--setenv", "AUTOGRADE_SHARED_NAMESPACES", "1"]
    args += ["--chdir", "/tmp"]
    if os.getuid() != 0:
        # CAP_SYS_ADMIN in the sandbox's own user namespace: the zygote makes each child's
        # mount and IPC namespaces with it; each child drops it before any student code
        args[1:1] = ["--unshare-user", "--cap-add", "CAP_SYS_ADMIN"]
    made = {Path("/"), Path("/usr"), Path("/tmp")}
    for path in sorted(binds):
        if str(path).startswith("/usr/"):
            continue
        # bwrap would create the missing parents (e.g. /root) as 0700, closed to the
        # unprivileged uid that runs the student's code
        for parent in reversed(path.parents):
            if parent not in made:
                args += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        args += ["--ro-bind", str(path), str(path)]
    # where each child mounts its own scratch tmpfs (autograde.sandbox.enter_namespaces)
    args += ["--dir", "/scratch"]
    # the root itself is a tmpfs of bwrap's, writable by an unprivileged user's sandbox: a
    # file left there would reach the next submission
    args += ["--remount-ro", "/"]
    # -P: the working directory (/tmp, writable) is not put on sys.path
    args += ["--", str(_sandbox_python()), "-P", "-m", "autograde.sandbox", str(fd)]
    return args


def _sandbox_python():
    """This Python as the sandbox sees it: under the environment's resolved folder, the one
    bound, so that a virtualenv reached through a symlink (.venv -> elsewhere) still starts
    there as a virtualenv (its pyvenv.cfg found beside the executable)."""
    executable, prefix = Path(sys.executable), Path(sys.prefix)
    if executable.is_relative_to(prefix):
        return prefix.resolve() / executable.relative_to(prefix)
    return executable


# What a submission may write outside its memory limit: its scratch folder and /dev/shm
# (tmpfs: memory not counted by RLIMIT_AS), each capped. Each child has tmpfs of its own,
# of these sizes (limits "scratch_bytes", "shm_bytes"); without the namespaces for them, the
# zygote's own /tmp and /dev/shm (shared by its children, one at a time) have these sizes.
SCRATCH_BYTES = 256 * 2**20
SHM_BYTES = 64 * 2**20


def workdir_root(release_dir):
    """Where zygotes without bwrap keep their home and scratch folders: in the course's
    .autograde/ (never the system's temporary folder), one folder per grader process."""
    return Path(release_dir).resolve().parent / SANDBOX


def remove_stale_workdirs(release_dir):
    """Remove the folders of zygotes whose grader process is gone (killed, say)."""
    root = workdir_root(release_dir)
    for folder in root.glob("*-*") if root.is_dir() else []:
        pid = folder.name.split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            remove_tree(str(folder))


# what a child may be handed of its assignment's release folder
RELEASE_LIMITS = {"files": 200, "bytes": 64 * 2**20}


def released_files(release_dir, assignment):
    """{relative path: bytes} of release/<assignment>/, the notebooks and caches left out:
    what the student's code of this assignment may import (checks/, chapter 5's lab)."""
    root = Path(release_dir) / assignment
    files, total = {}, 0
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if (not path.is_file() or path.is_symlink() or path.suffix in (".ipynb", ".pyc")
                or any(part.startswith(".") or part == "__pycache__"
                       for part in relative.parts)):
            continue
        data = path.read_bytes()
        total += len(data)
        if len(files) >= RELEASE_LIMITS["files"] or total > RELEASE_LIMITS["bytes"]:
            raise RuntimeError(f"{root} holds more than {RELEASE_LIMITS['files']} files or "
                               f"{RELEASE_LIMITS['bytes']} bytes: not a chapter's release")
        files[relative.as_posix()] = data
    return files


# Where bwrap runs as root, each zygote's submissions run as a uid of their own, whose
# process limit (RLIMIT_NPROC, counted per uid across the whole machine) stops a fork bomb.
# Two graders on one machine (two courses, a test run beside a batch) must never share a
# uid, or one submission's fork bomb uses up the other grader's process limit too (and a
# test that looks for processes of the uid finds the other's): a uid is claimed with an
# exclusive lock held for the zygote's life, which the kernel lets go when the grader dies,
# however it dies.
SANDBOX_UIDS = range(61000, 62000)
UID_LOCKS = Path("/run/lock") if os.path.isdir("/run/lock") else Path("/tmp")


def claim_uid(hint=0):
    """(uid, the open lock file that holds it): the first free uid of SANDBOX_UIDS from
    `hint` on. Raises RuntimeError when every one is held."""
    for offset in range(len(SANDBOX_UIDS)):
        uid = SANDBOX_UIDS[(hint + offset) % len(SANDBOX_UIDS)]
        # O_NOFOLLOW: the folder may be world-writable, and we are root
        fd = os.open(UID_LOCKS / f"autograde-uid-{uid}.lock",
                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return uid, fd
    raise RuntimeError(f"every sandbox uid ({SANDBOX_UIDS.start}-{SANDBOX_UIDS.stop - 1}) "
                       "is held by a running grader")


class Zygote:
    """A warm process that has imported torch, forking one child per submission."""

    def __init__(self, release_dir, slot=0, sandbox=True):
        self.release_dir = Path(release_dir).resolve()
        self.slot = slot
        self.released = {}  # assignment -> its released files, read once
        ours, theirs = socket.socketpair()
        fd = theirs.fileno()
        bwrap = bwrap_path() if sandbox else None
        self.home = None  # bwrap: nothing on the grader's disk (its /tmp is a tmpfs)
        self.uid = self._uid_lock = None  # claimed once the sandbox runs (below)
        if bwrap:
            command = _bwrap_command(bwrap, fd)
            environment, cwd = _environment("/tmp"), "/"
        else:
            self.home = workdir_root(self.release_dir) / f"{os.getpid()}-{slot}"
            remove_tree(str(self.home))  # (a folder of a pid reused)
            self.home.mkdir(parents=True)
            command = [sys.executable, "-P", "-m", "autograde.sandbox", str(fd)]
            environment = dict(_environment(str(self.home)), AUTOGRADE_PARENT=str(os.getpid()))
            cwd = self.home
        self.sandbox = "bwrap" if bwrap else "none"
        self.process = subprocess.Popen(command, pass_fds=[fd], env=environment,
                                        cwd=cwd, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        theirs.close()
        self.sock = ours
        self.reader = wire.Reader(ours, 2**20)
        if not select.select([ours], [], [], 120)[0]:
            self.close()
            raise RuntimeError("the sandbox did not start within 120 s")
        try:
            ready, _ = self.reader.read()  # {"ready": true, "isolation": ..., ...}
            self.isolation = str(ready.get("isolation", "shared"))
        except EOFError:
            error = self.process.stderr.read().decode(errors="replace")[-3000:]
            self.close()
            raise RuntimeError(f"the sandbox failed to start:\n{error}") from None
        self.child = None
        if bwrap and os.geteuid() == 0:
            try:
                self.uid, self._uid_lock = claim_uid(slot)
            except RuntimeError:
                self.close()
                raise

    def spawn(self, assignment, limits, language=messages.ENGLISH):
        """A fresh child for one submission of `assignment` (a Child), in a scratch folder
        holding a read-only copy of the assignment's released files (on its sys.path),
        speaking `language` (its notebook's, messages.supported: COURSE_LANGUAGE and the
        templates of child_messages)."""
        self.kill()
        limits = dict(limits)
        # CPU time backs up the wall-clock limits the grader enforces
        limits.setdefault("cpu_seconds", int(limits.get("notebook_seconds", 300)) + 30)
        if self.uid is not None:
            limits.setdefault("uid", self.uid)
        limits.setdefault("scratch", str(self.home / "scratch") if self.home
                          else f"/tmp/autograde-{os.getpid()}-{self.slot}")
        if assignment not in self.released:
            self.released[assignment] = released_files(self.release_dir, assignment)
        files = self.released[assignment]
        names = list(files)
        self.sock.sendall(wire.pack(request("spawn", ZYGOTE, limits=limits, files=names,
                                            language=language,
                                            messages=child_messages(language)),
                                    [files[name] for name in names]))
        data, fds, _, _ = socket.recv_fds(self.sock, 4096, 1)
        if not fds:
            raise RuntimeError("the sandbox did not hand over a child")
        self.child = Child(socket.socket(fileno=fds[0]), limits, self, language)
        return self.child

    def kill(self):
        """Kill the current child and everything it started."""
        if self.child is None:
            return
        self.child.sock.close()
        self.child = None
        self.sock.sendall(wire.pack(request("kill", ZYGOTE)))
        if not select.select([self.sock], [], [], 30)[0]:
            raise RuntimeError("the sandbox did not kill a child within 30 s")
        self.reader.read()

    def close(self):
        try:
            self.sock.close()
        finally:
            self.process.kill()
            self.process.wait()
            if self._uid_lock is not None:  # (its processes died with the zygote)
                os.close(self._uid_lock)
                self._uid_lock = None
            if self.home is not None:
                remove_tree(str(self.home))
                try:
                    self.home.parent.rmdir()  # (the last one out)
                except OSError:
                    pass


_EXCEPTIONS = {}


def _builtin_exception(name):
    cls = getattr(builtins, str(name), None)
    return cls if isinstance(cls, type) and issubclass(cls, Exception) else None


def _exception(name, message, base=None):
    """An exception of the named class: the builtin one, or a look-alike for the student's,
    subclassing its nearest builtin class `base` (so that `except ValueError` catches it).
    A "CheckFailure" is a look-alike too: the student's code raised it (or the forwarded
    forbid_spec(), a teaching message), never a check of the grader's, which the engine
    tells apart by identity (engine._failure_text)."""
    cls = _builtin_exception(name)
    if cls is None:
        parent = _builtin_exception(base) or Exception
        cls = _EXCEPTIONS.setdefault((name, parent),
                                     type(str(name)[:100], (parent,), {}))
    try:
        return cls(message)
    except Exception:
        return Exception(f"{name}: {message}")


class Child:
    """One submission's process: every request waits at most its timeout."""

    def __init__(self, sock, limits, zygote, language=messages.ENGLISH):
        self.sock = sock
        self.reader = wire.Reader(sock, int(limits.get("output_bytes", 256 * 2**20)))
        self.zygote = zygote
        self.timeout = float(limits.get("call_seconds", 60))
        self.deadline = None  # the notebook's wall-clock limit, as time.monotonic()
        self.lost = None  # a fault met in the repair family's search (RemoteRuntime.lost)
        # the running test cell's (the engine sets it): all of its calls together
        self.test_deadline = None
        # what the student's code printed since the last take() (the engine takes it after
        # each test): bounded, whatever the number of calls, in the notebook's `language`
        self.stdout = wire.Printed(int(limits.get("print_chars", 20_000)),
                                   messages.template("sandbox.output_dropped", language))

    def request(self, message, buffers=(), timeout=None, grad=False):
        timeout = self.timeout if timeout is None else timeout
        # the message when no answer comes: which limit this call's time is what is left
        # of, when it is one
        no_answer = "fault.no_answer"
        for deadline, limit in ((self.test_deadline, "test"), (self.deadline, "notebook")):
            if deadline is None or deadline - time.monotonic() >= timeout:
                continue
            if deadline - time.monotonic() <= 0:
                raise SubmissionFault("timeout", key=f"fault.{limit}_time_ran_out")
            if deadline - time.monotonic() < timeout - 1:  # (not the call's own limit)
                no_answer = f"fault.no_answer_{limit}_left"
            timeout = deadline - time.monotonic()
        try:
            self.sock.sendall(wire.pack(message, buffers))
            if not select.select([self.sock], [], [], timeout)[0]:
                raise SubmissionFault("timeout", key=no_answer, seconds=f"{timeout:.0f}")
            # the whole reply within `timeout` of its first byte, not `timeout` per recv:
            # a process that trickles a byte at a time must not hold the grader forever
            reply, buffers = wire.Reader(_Until(self.sock, time.monotonic() + timeout),
                                         self.reader.max_bytes).read()
            self.sock.settimeout(timeout)  # what sending the next request may take
        except TimeoutError:
            raise SubmissionFault("timeout", key="fault.cut_short",
                                  seconds=f"{timeout:.0f}") from None
        except (EOFError, ConnectionError, OSError) as error:
            raise SubmissionFault("crash", key="fault.died", error=str(error)) from None
        except (wire.ProtocolError, RecursionError) as error:  # (JSON nested too deep)
            # the rest of a message may be left unread: the stream cannot be trusted
            raise SubmissionFault("protocol", str(error)) from None
        if reply.get("stdout"):
            self.stdout.write(str(reply["stdout"]))
        if reply.get("error"):
            error = reply["error"]
            if not isinstance(error, dict):
                raise SubmissionFault("protocol", key="fault.malformed_error")
            exception = _exception(str(error.get("error")), str(error.get("message", "")),
                                   error.get("base"))
            exception.student_traceback = str(reply.get("traceback", ""))
            # the shapes on the raising line, as that process reported them: kept only as
            # text of the size it makes (checks.operations.line_shapes reads it back; a
            # message checks each entry, checks.diagnose._line_report), never a fault: a
            # lying report changes the words of a message, never a grade
            exception.student_line_shapes = operations.bounded_line_shapes(
                reply.get("line_shapes", ""))
            raise exception
        try:
            value = wire.Decoder(buffers, self._ref)(reply.get("value"))
        except wire.ProtocolError as error:
            raise SubmissionFault("protocol", str(error)) from None
        return reply, value

    def _ref(self, header):
        if "error" in header:
            return _exception(str(header["error"]), str(header.get("message", "")),
                              header.get("base"))
        return RemoteRef(self, header)

    def send_value(self, op, fields=(), **values):
        """(the request `op` with `fields` and the wire-encoded `values`, its buffers)."""
        encoder = wire.Encoder(_local_ref)
        encoded = {key: encoder(value) for key, value in values.items()}
        return request(op, **dict(fields), **encoded), encoder.buffers

    def run(self, source, name, timeout=None, line=1):
        """Execute code in the student's namespace, its first line numbered `line` (the
        cell's line it starts at); raises what it raised."""
        self.request(request("run", source=source, name=name, line=int(line)),
                     timeout=timeout)

    def lookup(self, name):
        return self.request(request("lookup", name=name))[1]


class _Until:
    """The child's socket for reading one reply: each recv waits only for what is left of
    the time until `end` (time.monotonic())."""

    def __init__(self, sock, end):
        self.sock, self.end = sock, end

    def recv(self, size):
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        self.sock.settimeout(left)
        return self.sock.recv(size)


def _said(key, **fields):
    """The message `key` of autograde.messages in the language the checks speak now (the
    notebook's, while the engine runs its test cells: chapters.checks.language.speaking):
    what a check meets of the student's objects reaches the student."""
    return messages.text(key, messages.supported(checks_language.current()), **fields)


def _local_ref(obj):
    if isinstance(obj, RemoteRef):
        return {"ref": obj._header["ref"]}
    raise TypeError(_said("remote.cannot_send", kind=type(obj).__name__))


class _Bridge(torch.autograd.Function):
    """Joins a remote call's outputs to the grader's autograd graph; backward is remote."""

    @staticmethod
    def forward(ctx, link, *inputs):
        ctx.link = link
        return tuple(t.clone() for t in link["outputs"])

    @staticmethod
    def backward(ctx, *grads):
        link = ctx.link
        message, buffers = link["child"].send_value(
            "backward", {"call": link["call"]}, grads=list(grads))
        _, result = link["child"].request(message, buffers)
        if not isinstance(result, list) or len(result) != link["count"]:
            raise RuntimeError(_said("remote.gradient_count"))
        shaped = []
        for grad, source in zip(result, link["inputs"]):
            if grad is not None and (grad.shape != source.shape or grad.dtype != source.dtype):
                raise RuntimeError(_said("remote.gradient_malformed"))
            shaped.append(grad)
        return (None, *shaped)


def _forbidden():
    """The specs of the forbid_spec() blocks in force here, around a check's call of the
    student's function, as {pattern, what, label}: the student's process raises the same
    teaching message (checks.operations). The grader decides from the source (forbids.py)."""
    return [{"pattern": spec.pattern, "what": spec.said_what(), "label": spec.label}
            for spec in operations.active_forbids()]


def _target(ref):
    """A request's "target": the object of the student's process that `ref` stands for."""
    return {"ref": object.__getattribute__(ref, "_header")["ref"]}


class RemoteRef:
    """Stands for an object in the student's process: call it, read attributes, iterate."""

    def __init__(self, child, header):
        object.__setattr__(self, "_child", child)
        object.__setattr__(self, "_header", header)

    @property
    def remote_type(self):
        return str(self._header.get("type", "object"))

    @property
    def remote_kind(self):
        return str(self._header.get("kind", "object"))

    def __getattr__(self, name):
        if name.startswith("__") and name not in ("__name__", "__qualname__", "__doc__"):
            raise AttributeError(name)
        message = request("getattr", target=_target(self), name=name)
        try:
            return self._child.request(message)[1]
        except AttributeError as error:
            raise AttributeError(str(error)) from None

    def __setattr__(self, name, value):
        raise AttributeError(_said("remote.read_only"))

    def __iter__(self):
        message = request("list", target=_target(self))
        return iter(self._child.request(message)[1])

    def __len__(self):
        """len() of the object, taken in the student's process (the sandbox's op len)."""
        length = self._child.request(request("len", target=_target(self)))[1]
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise TypeError(_said("remote.malformed_length"))
        return length

    def __bool__(self):  # an object, true as before __len__ existed, whatever its length
        return True

    def __repr__(self):
        message = request("repr", target=_target(self))
        try:
            return str(self._child.request(message)[1])
        except Exception:
            return _said("remote.stands_for", kind=self.remote_type)

    def observe(self, args, kwargs):
        """checks.common.observe() of this function: the student's process calls it
        (checks.operations.observe, which judges nothing) and sends back by value what it
        returned or raised, its arguments afterwards and its warnings' messages, as a dict."""
        message, buffers = self._child.send_value(
            "call", {"target": _target(self), "observe": True, "forbid": _forbidden()},
            args=list(args), kwargs=kwargs)
        return self._child.request(message, buffers)[1]

    def load_weights(self, weights):
        """checks.common.load_weights() into this module: the student's process copies the
        tensors in (checks.operations.load_weights) and describes what it found, as data."""
        message, buffers = self._child.send_value("load", {"target": _target(self)},
                                                  weights=weights)
        return self._child.request(message, buffers)[1]

    def mutants(self):
        """checks.operations.mutants() of this object, made in the student's process: what
        it sent back, [[RemoteRef of a mutant, description]] (checks.common checks it)."""
        return self._child.request(request("mutants", target=_target(self)))[1]

    def __call__(self, *args, **kwargs):
        grad_inputs = [t for t in wire.tensors((list(args), kwargs)) if t.requires_grad]
        grad = bool(grad_inputs) and torch.is_grad_enabled()
        fields = {"target": _target(self), "grad": grad, "forbid": _forbidden()}
        if _TRACED.get():  # (RemoteRuntime.attempt_traced)
            fields["traced"] = True
        message, buffers = self._child.send_value("call", fields, args=list(args),
                                                  kwargs=kwargs)
        reply, value = self._child.request(message, buffers)
        if not grad or "call" not in reply:
            return value
        header_flags = wire.grad_flags(reply.get("value"))
        outputs = [t for t, flag in zip(wire.tensors(value), header_flags) if flag]
        if not outputs:
            return value
        link = {"child": self._child, "call": reply["call"], "outputs": outputs,
                "inputs": grad_inputs, "count": len(grad_inputs)}
        attached = iter(_Bridge.apply(link, *grad_inputs))
        flags = iter(header_flags)
        return nested.map_leaves(value, lambda leaf: next(attached) if isinstance(
            leaf, torch.Tensor) and next(flags) else leaf, objects=False)


# True inside RemoteRuntime.attempt_traced: each call of the student's objects asks their
# process to note the torch call that raises in it (the request's "traced")
_TRACED = contextvars.ContextVar("remote_traced", default=False)


class RemoteRuntime:
    """checks.common's runtime while the grader runs a test cell (common.use_runtime): the
    student's objects are RemoteRefs, served by the sandbox's own code in their process,
    which sends back values; anything else is the grader's own, served by `local`
    (common.LocalRuntime, which calls checks.operations here)."""

    # what the student's process raised as "CheckFailure" is theirs: its message is shown
    # as what their code raised, never as a check's verdict (common.raised)
    own_failures = False

    def __init__(self, child, local):
        self.child, self.local = child, local

    def observe(self, function, args, kwargs):
        if isinstance(function, RemoteRef):
            return function.observe(args, kwargs)
        return self.local.observe(function, args, kwargs)

    def attempt_traced(self, function, args, kwargs):
        """checks.operations.attempt_traced() of a call the grader makes itself (one whose
        result must join the grader's autograd graph: checks.common.call): attempt() here,
        with each call of the student's objects in it made "traced", so that what it raises
        carries the shapes on the raising line and the torch call that raised, as the
        student's Jupyter traces them (operations.line_shapes reads them from the proxy's
        exception). The trace itself is [] here: the call's second, observed run brings it."""
        token = _TRACED.set(True)
        try:
            result, error = operations.attempt(function, *args, **kwargs)
        finally:
            _TRACED.reset(token)
        return result, error, []

    def load_weights(self, module, weights):
        if isinstance(module, RemoteRef):
            return module.load_weights(weights)
        return self.local.load_weights(module, weights)

    def repair_seconds(self, most):
        """How long the repair family may search (checks.common._first_repair): `most`, or a
        quarter of what is left of the test cell's time, or a tenth of the notebook's, where
        less: a search that stops in time never costs a later cell its time."""
        now, limits = time.monotonic(), [most]
        if self.child.test_deadline is not None:
            limits.append((self.child.test_deadline - now) / 4)
        if self.child.deadline is not None:
            limits.append((self.child.deadline - now) / 10)
        return max(0.0, min(limits))

    def lost(self, fault):
        """The student's process failed (`fault`, a SubmissionFault) while the repair family
        ran a mutant of a check that had already failed: that check keeps its own message and
        the process is marked lost (`Child.lost`), so that the engine starts a fresh one for
        the next test cell instead of charging it this fault."""
        self.child.lost = fault

    def mutants(self, obj):
        """The repair family's variants of the student's object, made where it lives."""
        if isinstance(obj, RemoteRef):
            return obj.mutants()
        return self.local.mutants(obj)

    def kind(self, obj):
        return obj.remote_kind if isinstance(obj, RemoteRef) else self.local.kind(obj)

    def type_name(self, obj):
        return obj.remote_type if isinstance(obj, RemoteRef) else self.local.type_name(obj)

    def given(self, path, args, kwargs):
        """The course's own function or class `path` called in the student's process (the
        sandbox imports it there: torch, or the release's solutions/checks)."""
        message, buffers = self.child.send_value("given", {"path": str(path)},
                                                 args=list(args), kwargs=kwargs)
        return self.child.request(message, buffers)[1]


class RemoteNamespace(dict):
    """Locals for running a test cell in the grader: the student's names come from the child."""

    def __init__(self, child, trusted):
        super().__init__()
        self.child = child
        self.trusted = trusted

    def __getitem__(self, name):
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        if name in self.trusted or hasattr(builtins, name):
            raise KeyError(name)
        try:
            value = self.child.lookup(name)
        except NameError:
            raise KeyError(name) from None
        dict.__setitem__(self, name, value)
        return value
