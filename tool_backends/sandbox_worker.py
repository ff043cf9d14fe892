"""The sandbox's warm worker: imports SymPy and Matplotlib once, then forks a child per call.

:mod:`tool_backends.sandbox_pool` does not import this module to run it: it reads this file's text
and starts ``python -I -c <text> ARGS`` inside the sandbox, because the bubblewrap sandbox shows
only the system and Python paths, which need not hold this package (an editable install lives
in a checkout the sandbox does not mount), and ``-I`` keeps the user's environment and the
current directory off ``sys.path``. So everything at module level is the standard library only;
SymPy, Matplotlib and Pillow are imported inside the functions that use them (and may be
missing), and nothing runs on import: the host imports this module for the wire protocol, and
the tests import it to exercise the parts that need no sandbox.

Why this module is long (over the project's 700 lines): it is one program, run from its own
text, so it cannot import a sibling module; the protocol, the call's confinement (limits, uid,
capabilities, Landlock) and the fork-per-call loop must all live in this one file.

The protocol on the worker's stdin and stdout is one message per frame, a 4-byte big-endian
length and that many bytes of JSON: the worker sends ``{"ready": true}`` once its imports are
done, then answers each request (``{"kind", "code", "timeout", "memory"}``) with one of
``{"text"}``, ``{"png"}`` (base64), ``{"file"}`` (base64 bytes of a file a ``generator`` call
built), ``{"error"}`` (the code raised), ``{"limit"}`` (the code hit a limit) or
``{"broken"}`` (the sandbox could not confine the call: the harness's failure, never the
model's). A child writes its reply into a pipe of its own, so whatever the model's code
does to its stdout never reaches the protocol; that pipe is the model code's to write to as well,
so the worker reads what comes out of it as the model's (:func:`checked_reply`), and only the
worker writes frames to the host.
"""

from __future__ import annotations

import base64
import binascii
import ctypes
import importlib
import io
import json
import math
import os
import resource
import select
import shutil
import signal
import struct
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

#: The frame header: the length of the JSON that follows.
HEADER = struct.Struct(">I")
#: ``nobody``: the uid and gid the sandboxed agents run as where their launcher is root
#: (``tool_backends.agent_launcher``).
NOBODY = 65534
#: The uid and gid of a code call when the worker is root: not root (``RLIMIT_NPROC`` never
#: applies to it), not ``nobody`` (the limit counts every thread of the uid on the machine, an
#: agent's included), but one from the range no distribution or systemd gives out.
CALL_UID = 0x7FFE0000
#: Seconds :meth:`Zygote.kill_leftovers` waits for a call's processes to be reaped before giving up,
#: so a process stuck in the kernel cannot hang the worker.
REAP_S = 5.0
#: The keys a call's reply may have (one of them, with a string).
REPLY_KEYS = frozenset({"text", "png", "file", "error", "limit"})
#: The replies that carry bytes (base64), never cut to the text limit.
BINARY_KEYS = frozenset({"png", "file"})
#: What the model sees when its code wrote something of its own into the reply pipe.
FORGED = "the code wrote a malformed reply of its own into the sandbox's reply pipe"
#: Seconds between two looks at a call's directory when its size is watched.
WATCH_S = 0.05

Message = dict[str, Any]


@dataclass(frozen=True)
class Settings:
    """The limits the host sets for every call, passed on the worker's command line."""

    #: Scratch directory as the worker sees it; each call gets a directory inside it.
    scratch: str
    #: Text returned to the model is cut here.
    max_text: int
    #: The most a call's reply may weigh on the pipe.
    max_reply: int
    #: ``RLIMIT_FSIZE`` of a call.
    file_size: int
    #: Processes a call may add to those its uid already runs (``RLIMIT_NPROC``).
    extra_processes: int
    #: Whether the worker has a PID namespace of its own, where every process but its init
    #: and the worker itself is a call's leftover.
    pid_namespace: bool
    #: Bytes a call's directory may hold, enforced by watching it (``0``: not watched, since
    #: the scratch directory is a tmpfs of a bounded size).
    scratch_limit: int = 0
    #: Where there is no mount namespace to show a tree: the paths a call may read (the
    #: tree's, split around what it hides), enforced with Landlock (:func:`landlock`); empty:
    #: not confined so.
    readable: tuple[str, ...] = ()

    def to_argv(self) -> list[str]:
        """The command-line arguments that :meth:`from_argv` reads back."""
        numbers = (self.max_text, self.max_reply, self.file_size, self.extra_processes)
        flag = "1" if self.pid_namespace else "0"
        readable = json.dumps(list(self.readable))
        return [self.scratch, *(str(n) for n in numbers), flag, str(self.scratch_limit), readable]

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> Settings:
        """Read the arguments that follow ``-c <program>`` (``sys.argv[1:]``)."""
        max_text, max_reply, file_size, extra = (int(a) for a in argv[1:5])
        limit = int(argv[6]) if len(argv) > 6 else 0
        readable = tuple(json.loads(argv[7])) if len(argv) > 7 else ()
        pid_namespace = argv[5] == "1"
        return cls(argv[0], max_text, max_reply, file_size, extra, pid_namespace, limit, readable)


def encode(message: Mapping[str, Any]) -> bytes:
    """One frame: the length, then the JSON."""
    data = json.dumps(message).encode()
    return HEADER.pack(len(data)) + data


def send(stream: IO[bytes], message: Mapping[str, Any]) -> None:
    """Write one frame and flush it, since the other side waits for the whole frame."""
    stream.write(encode(message))
    stream.flush()


def receive(stream: IO[bytes]) -> Message | None:
    """Read one frame, blocking; ``None`` when the host closed the pipe (time to exit)."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (length,) = HEADER.unpack(head)
    message: Message = json.loads(stream.read(length))
    return message


def announced(data: bytes | bytearray) -> int | None:
    """The length a frame's header announces, or ``None`` while the header is incomplete."""
    if len(data) < HEADER.size:
        return None
    length: int = HEADER.unpack_from(data)[0]
    return length


def checked_reply(payload: bytes | bytearray, max_text: int) -> Message:
    """A call's reply as the host may trust it: one known key with a string, else an error.

    The child runs the model's code, which holds the child's end of the reply pipe as it holds
    any other file descriptor and may write a frame of its own. A well-formed frame says no more
    than the code could have returned (a text, a PNG, an error); anything else (``[1]``, invalid
    JSON, an unknown key, a PNG that is not one) is the model's doing and the model is told so,
    as an error of its call: never a crash of the worker, never the harness's error.
    """
    try:
        reply = json.loads(bytes(payload))
    except (ValueError, RecursionError):
        return {"error": FORGED}
    if not isinstance(reply, dict) or len(reply) != 1:
        return {"error": FORGED}
    ((key, value),) = reply.items()
    if key not in REPLY_KEYS or not isinstance(value, str):
        return {"error": FORGED}
    if key not in BINARY_KEYS:
        return {key: value[:max_text]}
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return {"error": FORGED}
    if key == "png" and not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return {"error": FORGED}
    return {key: value}


def error_text(error: BaseException, max_text: int) -> str:
    """What the model sees when its code raised: ``repr(error)``, cut to ``max_text``.

    ``repr`` because that is the official text: AgentLego's ``LagentTool`` wrapper records a
    failed call as ``errmsg=repr(e)`` (``agentlego/tools/wrappers/lagent.py``), and its tool
    server answers ``400 {"detail": repr(e)}``. A ``MemoryError`` says which limit was hit,
    since the limit is this sandbox's own and its own message is usually empty.
    """
    if isinstance(error, MemoryError):
        return "MemoryError('the memory limit was exceeded')"
    return repr(error)[:max_text]


class Dict(dict[str, Any]):
    """The ``math`` name of the Calculator: the math functions, read as keys or attributes.

    The official Calculator wraps them in ``addict.Addict`` (whose class is ``addict.Dict``),
    where a missing key reads as a fresh empty mapping: ``math.nope`` is ``{}`` and
    ``math.nope(1)`` fails with ``TypeError("'Dict' object is not callable")``. This
    reproduces that reading side, class name included, without the dependency.
    """

    def __getattr__(self, name: str) -> Any:
        return self[name]

    def __missing__(self, name: str) -> Dict:
        return Dict()


def calculator_namespace() -> dict[str, Any]:
    """The globals the official Calculator evaluates in (``python_calculator.safe_eval``).

    Every public name of :mod:`math`, ``math`` itself (see :class:`Dict`), ``max``,
    ``min``, ``round`` and ``sum``, and no other builtins (``__builtins__`` is ``None``).
    """
    functions = {name: value for name, value in vars(math).items() if not name.startswith("_")}
    names: dict[str, Any] = {"math": Dict(functions), "max": max, "min": min}
    names.update(round=round, sum=sum, **functions)
    names["__builtins__"] = None
    return names


def calculate(expression: str) -> str:
    """``str()`` of the expression's value, evaluated as the official Calculator does.

    A real ``eval``, so that the model's expression means here what it means in the official
    tool: ``29,000 + 32,900`` is the tuple ``(29, 32, 900)``, and ``abs(-2)`` fails with
    ``TypeError("'NoneType' object is not subscriptable")`` (a name outside the namespace is
    looked up in ``__builtins__``, which is ``None``). That keeps nothing out
    (``().__class__`` reaches every class); what makes it safe is where it runs, a call of
    this sandbox's worker.
    """
    namespace = calculator_namespace()
    return str(eval(expression, namespace, namespace))


#: Code each tool's runtime runs before the model's (``GenericRuntime(headers=...)`` in the
#: official ``solver.py`` and ``plot.py``).
HEADERS = {
    "solver": "from sympy import symbols, Eq, solve",
    "plot": "import matplotlib.pyplot as plt",
    # The GTA-Workflow readers and Prover (tool_backends.workflow_readers): the host's own
    # parsing program, run here because what it parses is the model's.
    "reader": "",
    # The GTA-Workflow file generators (tool_backends.workflow_files): the host's own building
    # program, run here because what it builds from (slides, text, images) is the model's.
    "generator": "",
}


def extract_code(command: str) -> str:
    """The program inside a Markdown command, as the official Solver and Plot take it.

    The first ```` ```python ```` fence wins, else the first bare fence; text without fences is
    the program itself. An unclosed fence runs to the end.
    """
    for opening in ("```python", "```"):
        if opening in command:
            return command.split(opening)[1].split("```")[0]
    return command


def run_code(kind: str, command: str, max_text: int) -> Message:
    """Run a Solver or Plot command the way the official tools do.

    The official runtime (``python_interpreter.GenericRuntime``): the program is taken out of
    its Markdown fence, one namespace dict serves as globals and locals, the tool's header runs
    first, then ``exec`` of the program (a string, so errors name the file ``<string>``), then
    ``eval("solution()")``. The Solver answers ``str()`` of what it returns; Plot requires a
    Matplotlib Figure, saves it with ``savefig`` at its defaults and hands the picture on through
    Pillow as a PNG, as AgentLego's ``ImageIO`` does.

    Raises:
        NameError: the program defines no ``solution``.
        TypeError: a Plot program's ``solution()`` returned no Figure (the official message).
    """
    namespace: dict[str, Any] = {}
    exec(HEADERS[kind], namespace, namespace)
    exec(extract_code(command), namespace, namespace)
    result = eval("solution()", namespace, namespace)
    if kind in ("solver", "reader"):
        return {"text": str(result)[:max_text]}
    if kind == "generator":
        # The file's bytes, or the official text of a generator that failed to build it.
        if isinstance(result, str):
            return {"error": result[:max_text]}
        if not isinstance(result, bytes):
            raise TypeError(f"a generator's solution() returns bytes, not {type(result).__name__}")
        return {"file": base64.b64encode(result).decode()}
    import matplotlib.figure
    import matplotlib.pyplot
    from PIL import Image

    if not isinstance(result, matplotlib.figure.Figure):
        raise TypeError("The `solution` function must return the matplotlib figure.")
    drawn = io.BytesIO()
    result.savefig(drawn)
    drawn.seek(0)
    png = io.BytesIO()
    with Image.open(drawn) as picture:
        picture.save(png, format="PNG")
    matplotlib.pyplot.close("all")
    return {"png": base64.b64encode(png.getvalue()).decode()}


def answer(request: Mapping[str, Any], max_text: int) -> Message:
    """The reply to one request: the result, or the error the model's code raised.

    Anything the code raises is the model's doing (``SystemExit`` and ``KeyboardInterrupt``
    included), so it becomes an ``error`` reply; an exception whose ``repr()`` itself raises
    is named by its type.
    """
    try:
        if request["kind"] == "calculator":
            return {"text": calculate(request["code"])[:max_text]}
        return run_code(request["kind"], request["code"], max_text)
    except BaseException as error:
        try:
            return {"error": error_text(error, max_text)}
        except BaseException:
            return {"error": type(error).__name__}


def no_reply(status: int) -> Message:
    """The ``limit`` reply for a child that ended (wait status ``status``) without a reply."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number in (signal.SIGXCPU, signal.SIGKILL):
            return {"limit": "CPU time limit exceeded"}
        return {"limit": f"the code was killed by signal {signal.Signals(number).name}"}
    # The code ended the process itself (os._exit), or sending the reply failed (exit status 3,
    # most often out of memory while encoding it).
    return {"limit": "the code ended without a result (memory limit exceeded?)"}


def mapped(uid: int) -> bool:
    """Whether ``uid`` exists in this process's user namespace.

    Root in a user namespace that maps nothing but itself (``unshare -r``, an unprivileged
    worker) cannot become ``nobody``; it gives up its capabilities instead
    (:func:`drop_capabilities`).
    """
    try:
        with open("/proc/self/uid_map") as table:
            for line in table:
                inside, _, count = (int(part) for part in line.split())
                if inside <= uid < inside + count:
                    return True
    except (OSError, ValueError):
        return True  # no /proc to ask: try setuid, whose failure then says why
    return False


#: ``prctl(2)`` and ``capset(2)`` numbers (``linux/prctl.h``, ``linux/capability.h``).
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
#: Every ``SECBIT_*`` (``linux/securebits.h``) but ``KEEP_CAPS``, locked: uid 0 gets no
#: capability back from ``execve`` or ``setuid``, nor can it raise an ambient one.
SECUREBITS_NO_ROOT = 0xEF
CAPABILITY_VERSION_3 = 0x20080522


def _prctl(*arguments: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    values = [ctypes.c_ulong(a) for a in (*arguments, 0, 0, 0, 0)[:5]]
    result: int = libc.prctl(*values)
    return result


def drop_capabilities(keep: Sequence[int] = ()) -> None:
    """Give up every capability for good, as bubblewrap does for an unprivileged sandbox.

    Root in a user namespace holds every capability over the sandbox's own mounts: with them
    model code could remount the read-only view writable, or trace the worker. Without them,
    uid 0 there is an ordinary user. ``execve`` gives nothing back (the bounding set is empty,
    the securebits locked) and ``no_new_privs`` keeps set-uid programs from raising it again.

    Args:
        keep: Capabilities kept (the agent's warm sandbox keeps ``CAP_SETFCAP``: without it,
            root of a user namespace cannot map itself into a case's user namespace).

    Raises:
        OSError: the kernel refused a step; the call must not run.
    """
    try:
        with open("/proc/sys/kernel/cap_last_cap") as last:
            highest = int(last.read())
    except (OSError, ValueError):
        highest = 63
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(highest + 1):
        if cap in keep:
            continue
        if _prctl(PR_CAPBSET_DROP, cap) != 0 and ctypes.get_errno() != 22:  # EINVAL: unknown
            raise OSError(ctypes.get_errno(), f"PR_CAPBSET_DROP {cap}")
    if _prctl(PR_SET_SECUREBITS, SECUREBITS_NO_ROOT) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_SECUREBITS")
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)  # EINVAL on kernels without ambient caps
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    nothing = (ctypes.c_uint32 * 6)()  # (effective, permitted, inheritable) x 2 words
    for cap in keep:
        nothing[(cap // 32) * 3] |= 1 << (cap % 32)
        nothing[(cap // 32) * 3 + 1] |= 1 << (cap % 32)
    if libc.capset(header, nothing) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    if _prctl(PR_SET_NO_NEW_PRIVS, 1) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")


def undumpable() -> None:
    """Keep processes of this uid out of this one's memory, environment and pipes.

    A non-dumpable process's ``/proc/<pid>/environ``, ``mem`` and ``fd`` need more than the
    same uid (``ptrace_may_access``). Where model code runs as the uid of the worker or of
    pytest (no user to switch to), this keeps it from reading their environment and writing
    to their pipes. Best effort: nothing changes on a kernel without ``prctl``.
    """
    try:
        _prctl(PR_SET_DUMPABLE, 0)
    except (OSError, AttributeError):
        pass


#: Landlock (``linux/landlock.h``): its system calls (numbered alike on every architecture) and
#: access rights, by the ABI version that brought them.
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1, 2, 4, 8
FS_V1 = (1 << 13) - 1
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2
#: The ABI that scopes signals: with it a call cannot signal pytest or any process outside.
LANDLOCK_SIGNAL_ABI = 6


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers (0: none, or disabled)."""
    libc = ctypes.CDLL(None, use_errno=True)
    version: int = libc.syscall(
        LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION
    )
    return max(version, 0)


def landlock(readable: Sequence[str], writable: Sequence[str], devices: Sequence[str]) -> int:
    """Confine this process to reading ``readable``, writing ``writable``, nothing else.

    For the fallback without namespaces, which runs calls as the user's own uid: the kernel
    then refuses every other path (the dataset, the checkout, ``/proc`` with the environment
    of the user's processes), TCP, and from ABI 6 signals to any process outside the call and
    abstract Unix sockets. Rights a kernel does not know are left out, as the kernel
    documentation says (``Documentation/userspace-api/landlock.rst``).

    Returns:
        The ABI version used (0: Landlock is not available, nothing was done).

    Raises:
        OSError: Landlock is available and refused the rules; the call must not run.
    """
    abi = landlock_abi()
    if abi < 1:
        return 0
    fs = FS_V1 | (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0)
    fs |= FS_IOCTL_DEV if abi >= 5 else 0
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= LANDLOCK_SIGNAL_ABI else 0
    size = 24 if abi >= LANDLOCK_SIGNAL_ABI else 16 if abi >= 4 else 8
    attributes = struct.pack("=QQQ", fs, net, scoped)[:size]
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(attributes, size)
    ruleset: int = libc.syscall(LANDLOCK_CREATE_RULESET, buffer, ctypes.c_size_t(size), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        read = FS_EXECUTE | FS_READ_FILE
        device = FS_READ_FILE | FS_WRITE_FILE | (fs & (FS_TRUNCATE | FS_IOCTL_DEV))
        for paths, rights in ((readable, read), (writable, fs), (devices, device)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # gone since the host listed it: nothing to allow
                try:
                    if os.path.isdir(path):
                        allowed = rights | (FS_READ_DIR if rights == read else 0)
                    else:  # only rights on files apply to a file
                        allowed = rights & (FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE)
                        allowed |= rights & (FS_TRUNCATE | FS_IOCTL_DEV)
                    rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, fd), 12)
                    if (
                        libc.syscall(
                            LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, rule, 0
                        )
                        != 0
                    ):
                        raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
                finally:
                    os.close(fd)
        if _prctl(PR_SET_NO_NEW_PRIVS, 1) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
        if libc.syscall(LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def usage(path: str) -> int:
    """Bytes the files under ``path`` take (allocated blocks; a sparse file counts as written)."""
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
            except OSError:
                pass
    return total


def remove_tree(path: str) -> None:
    """Remove a call's directory, whatever modes its code left on what it made inside.

    Best effort: what cannot be removed stays until the worker's scratch directory goes.
    """
    if not os.path.lexists(path):
        return
    try:
        os.chmod(path, 0o700)
    except OSError:
        pass
    # Top-down, each directory is opened up before the walk lists it.
    for directory, subdirectories, _ in os.walk(path):
        for name in subdirectories:
            try:
                os.chmod(os.path.join(directory, name), 0o700, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass
    shutil.rmtree(path, ignore_errors=True)


def processes_of(uid: int) -> int:
    """How many processes ``uid`` runs now (``RLIMIT_NPROC`` counts them all, not the call's)."""
    count = 0
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                count += 1
        except OSError:  # the process ended while we looked
            pass
    return count


def preload() -> None:
    """Import what calls use, once, so that each forked child starts with it loaded.

    A missing package is not an error here: the call that needs it reports it to the model.
    """
    try:
        importlib.import_module("sympy")
        import matplotlib

        # Before pyplot is imported: the sandbox has no display.
        matplotlib.use("Agg")
        import matplotlib.figure
        import matplotlib.pyplot
        from PIL import Image  # noqa: F401 - Plot's PNG goes through Pillow
    except ImportError:
        pass


@dataclass
class Zygote:
    """The warm worker: forks a child per request and gets a reply, or a limit, out of it."""

    settings: Settings
    #: The protocol's end towards the host (a duplicate of stdout, which points to devnull).
    protocol_out: IO[bytes]
    #: An open ``/dev/null``, for the standard streams of each child.
    devnull: int
    #: Calls served so far (each call's directory is named after its number).
    calls: int = 0

    def serve(self, request: Mapping[str, Any]) -> Message:
        """Run one request in a fresh child and return its reply, or the limit it hit.

        The call's directory is made here and removed when the call ends, whatever it held.
        """
        self.calls += 1
        calldir = os.path.join(self.settings.scratch, f"call-{os.getpid()}-{self.calls}")
        os.mkdir(calldir, 0o700)
        try:
            return self.supervise(request, calldir)
        finally:
            remove_tree(calldir)

    def supervise(self, request: Mapping[str, Any], calldir: str) -> Message:
        """Fork the call's child, wait for its reply within the limits, and clean up after it."""
        reader, writer_fd = os.pipe()
        # The child says on this pipe that it is confined, and closes it before the model's code
        # runs: a call that never said so failed in the harness, whatever the code did later.
        confined_reader, confined_writer = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(reader)
            os.close(confined_reader)
            try:
                self.child(request, os.fdopen(writer_fd, "wb"), calldir, confined_writer)
            finally:
                os._exit(4)
        os.close(writer_fd)
        os.close(confined_writer)
        deadline = time.monotonic() + float(request["timeout"])
        watched = self.settings.scratch_limit
        data = bytearray()
        outcome: Message | None = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                outcome = {"limit": f"time limit exceeded ({request['timeout']:g} s wall clock)"}
                break
            ready, _, _ = select.select([reader], [], [], min(left, WATCH_S) if watched else left)
            if watched and usage(calldir) > watched:
                outcome = {"limit": f"scratch space limit exceeded ({watched} bytes)"}
                break
            if not ready:
                continue
            chunk = os.read(reader, 1 << 16)
            if not chunk:
                break
            data += chunk
            length = announced(data)
            if length is not None and len(data) >= HEADER.size + length:
                break  # complete, even if a leftover process still holds the pipe open
            if len(data) > self.settings.max_reply:
                outcome = {"limit": f"output limit exceeded ({self.settings.max_reply} bytes)"}
                break
        os.close(reader)
        if outcome is not None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            status = 0
        self.kill_leftovers(pid)
        try:
            confined = os.read(confined_reader, 1) == b"1"
        finally:
            os.close(confined_reader)
        if not confined:
            return {"broken": "the sandbox could not confine the call (see the worker's setup)"}
        if outcome is not None:
            return outcome
        length = announced(data)
        if length is not None and len(data) - HEADER.size == length:
            return checked_reply(data[HEADER.size :], self.settings.max_text)
        if length is not None and len(data) > HEADER.size + length:
            return {"error": FORGED}
        return no_reply(status)

    def child(
        self, request: Mapping[str, Any], writer: IO[bytes], calldir: str, confined: int
    ) -> None:
        """In the forked child: confine this process, run the request, write the reply, exit.

        The child leads a session of its own so that :meth:`kill_leftovers` can kill its whole
        process group, and works in its own directory. When the worker is root it becomes
        :data:`CALL_UID`; when it is root of a user namespace that maps no such uid it gives up
        every capability instead (:func:`drop_capabilities`).
        """
        settings = self.settings
        os.setsid()
        self.protocol_out.close()
        os.dup2(self.devnull, 0)
        os.dup2(self.devnull, 2)
        if os.geteuid() == 0 and mapped(CALL_UID):
            os.chown(calldir, CALL_UID, CALL_UID)
            os.setgroups([])
            os.setgid(CALL_UID)
            os.setuid(CALL_UID)
            processes = 0
        else:
            if os.geteuid() == 0:
                drop_capabilities()
            processes = processes_of(os.getuid())
        cpu = int(request["timeout"]) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        # RLIMIT_AS counts the address space the warm worker already holds (SymPy, Matplotlib),
        # so the call's memory allowance comes on top of it.
        with open("/proc/self/statm") as statm:
            held = int(statm.read().split()[0]) * resource.getpagesize()
        memory = held + int(request["memory"])
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (settings.file_size, settings.file_size))
        nproc = processes + settings.extra_processes
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        # A write past RLIMIT_FSIZE then fails with an OSError the model sees, instead of a
        # signal that kills the call without a word.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        os.chdir(calldir)
        os.environ["TMPDIR"] = calldir
        if settings.readable:
            mpl = os.environ.get("MPLCONFIGDIR", "")
            landlock(
                [*settings.readable, mpl], [calldir], [os.devnull, "/dev/zero", "/dev/urandom"]
            )
        os.write(confined, b"1")
        os.close(confined)
        reply = answer(request, settings.max_text)
        try:
            send(writer, reply)
        except BaseException:
            os._exit(3)
        os._exit(0)

    def kill_leftovers(self, pid: int) -> None:
        """Kill and reap every process the call with child ``pid`` left behind."""
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        if self.settings.pid_namespace:  # all but the namespace's init and us is a leftover
            for entry in os.listdir("/proc"):
                if entry.isdigit() and int(entry) not in (1, os.getpid()):
                    try:
                        os.kill(int(entry), signal.SIGKILL)
                    except OSError:
                        pass
        # Reap until no child is left (when this worker is the namespace's init, orphans are ours
        # too), so nothing of the call remains, not even a zombie.
        deadline = time.monotonic() + REAP_S
        while time.monotonic() < deadline:
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    time.sleep(0.005)
            except ChildProcessError:
                break


def main(argv: Sequence[str]) -> None:
    """Set up the scratch directory and the protocol's pipes, preload, then serve until EOF.

    The protocol gets a duplicate of stdout and stdout itself goes to ``/dev/null``, so that
    nothing printed while importing (or by anything else in this process) corrupts a frame.
    """
    settings = Settings.from_argv(argv)
    undumpable()
    os.makedirs(settings.scratch, exist_ok=True)
    os.chmod(settings.scratch, 0o755)
    # Matplotlib reads MPLCONFIGDIR on import and writes its font cache there.
    os.environ["MPLCONFIGDIR"] = os.path.join(settings.scratch, ".mpl")
    os.environ["HOME"] = settings.scratch
    os.makedirs(os.environ["MPLCONFIGDIR"], exist_ok=True)
    protocol_in = sys.stdin.buffer
    protocol_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    preload()
    zygote = Zygote(settings, protocol_out, devnull)
    send(protocol_out, {"ready": True})
    while True:
        request = receive(protocol_in)
        if request is None:
            break
        send(protocol_out, zygote.serve(request))


if __name__ == "__main__":
    main(sys.argv[1:])
