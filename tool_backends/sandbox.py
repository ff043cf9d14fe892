"""A sandbox for model-written code: a warm worker process that forks one child per call.

Solver and Plot run Python the model wrote, and the Calculator evaluates an expression the model
wrote; none of it may run in the pytest process, where a ``while True`` would hang the run, a
``'a' * 10**10`` would take the machine down and ``os.environ`` holds the user's API keys. Each
call therefore runs in a child process with:

* an environment that holds nothing but ``PATH``, ``LANG``, ``HOME`` (the scratch directory) and
  ``MPLCONFIGDIR`` (:func:`sandbox_environment`), whichever sandbox runs it;
* a wall-clock deadline, after which the child's whole process group is killed and, inside a
  PID namespace, every process the call left behind (a double fork with ``setsid`` included);
* ``RLIMIT_CPU``, ``RLIMIT_AS`` (memory on top of what the warm worker already holds),
  ``RLIMIT_FSIZE`` and ``RLIMIT_NPROC`` (so a fork bomb stops at a handful of processes);
* a non-root uid when the worker runs as root (``nobody``), since the kernel never applies
  ``RLIMIT_NPROC`` to root.

What else isolates it depends on the machine (:func:`isolation`, ``--gta-sandbox``):

* ``bubblewrap`` (Debian's ``bwrap``): no network, its own PID/IPC/UTS namespaces, and a
  filesystem that shows only the system and Python paths, read-only, plus a tmpfs scratch
  directory as the only writable place. Python may live anywhere, ``/tmp`` included.
* ``rlimit`` as root without bubblewrap: the worker starts under ``unshare`` in private mount,
  PID and network namespaces, with fresh tmpfs over every world-writable directory (``/tmp``,
  ``/var/tmp``, ``/run/lock``, ``/dev/shm``) and the root filesystem remounted read-only; the
  rest of the filesystem stays readable (but not writable by ``nobody``).
* ``rlimit`` otherwise: a plain subprocess with the limits above, in a private scratch
  directory, with no network when ``unshare -rn`` works. Files stay readable and world-writable
  directories writable, and a process that escapes the call's process group survives the call:
  :attr:`Isolation.gaps` says so, and the terminal header shows it.

Importing SymPy and Matplotlib takes over a second, so the worker imports them once and forks a
child per call (a "zygote"); a call then costs a fork and the user code. One worker serves the
whole pytest process (calls are serialised by a lock), is started on first use and restarted if
it dies. A worker that does not start is an infrastructure failure (the case is an *error*),
never the model's mistake.
"""

from __future__ import annotations

import atexit
import base64
import functools
import json
import os
import select
import shlex
import shutil
import signal
import site
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pytest_gta.errors import GtaInfrastructureError, GtaToolError, GtaUsageError

SandboxKind = Literal["bubblewrap", "rlimit"]
SandboxMode = Literal["auto", "bubblewrap", "rlimit"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "bubblewrap", "rlimit")
INSTALL_BUBBLEWRAP = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
)

#: Defaults of one call; callers may pass their own.
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MEMORY_BYTES = 1 << 30
#: Largest file a call may write (in its scratch directory).
FILE_SIZE_BYTES = 16 << 20
#: Processes a call may add (its own threads and children); stops fork bombs early.
EXTRA_PROCESSES = 8
#: Text returned to the model is cut here, as a runaway ``str()`` is not an answer.
MAX_TEXT_CHARS = 10_000
#: The most a call's reply may weigh on the pipe (a PNG in base64 included).
MAX_REPLY_BYTES = 32 << 20
#: Time the worker gets to import SymPy and Matplotlib on start.
START_TIMEOUT_S = 60.0
#: Slack on top of a call's timeout before the host gives up on the worker itself.
HOST_SLACK_S = 10.0

SCRATCH_IN_SANDBOX = "/scratch"
#: Directories anyone may write to on a usual Linux; the namespace fallback hides each behind
#: a fresh tmpfs.
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/run/lock", "/dev/shm")
#: PATH inside the sandbox: the system's, never the user's (which may name their own tools).
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"

# The worker program. It runs with ``python -I -c`` so that it needs nothing from this checkout
# (the bubblewrap sandbox does not show it). Messages are a 4-byte big-endian length and JSON.
_WORKER_SOURCE = r"""
import base64, io, json, os, resource, select, signal, struct, sys, time

SCRATCH = sys.argv[1]
MAX_TEXT, MAX_REPLY, FSIZE, EXTRA = (int(a) for a in sys.argv[2:6])
PID_NAMESPACE = sys.argv[6] == "1"
os.makedirs(SCRATCH, exist_ok=True)
os.chmod(SCRATCH, 0o755)
os.environ["MPLCONFIGDIR"] = os.path.join(SCRATCH, ".mpl")
os.environ["HOME"] = SCRATCH
os.makedirs(os.environ["MPLCONFIGDIR"], exist_ok=True)
PROTOCOL_IN = sys.stdin.buffer
PROTOCOL_OUT = os.fdopen(os.dup(1), "wb")
DEVNULL = os.open(os.devnull, os.O_RDWR)
os.dup2(DEVNULL, 1)
try:
    import math
    import sympy
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot
    import matplotlib.figure
except ImportError:
    pass
try:
    import simpleeval
except ImportError:
    simpleeval = None


def send(stream, message):
    data = json.dumps(message).encode()
    stream.write(struct.pack(">I", len(data)) + data)
    stream.flush()


def receive():
    head = PROTOCOL_IN.read(4)
    if len(head) < 4:
        return None
    return json.loads(PROTOCOL_IN.read(struct.unpack(">I", head)[0]))


def error_text(error):
    if isinstance(error, MemoryError):
        return "MemoryError: the memory limit was exceeded"
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return text[:MAX_TEXT]


def calculate(expression):
    names = {k: v for k, v in vars(math).items() if not k.startswith("_")}
    functions = {k: v for k, v in names.items() if callable(v)}
    functions.update(abs=abs, min=min, max=max, round=round, int=int, float=float, pow=pow)
    constants = {k: v for k, v in names.items() if not callable(v)}
    evaluator = simpleeval.SimpleEval(functions=functions, names=constants)
    return str(evaluator.eval(expression))


def run_code(kind, code):
    namespace = {"__name__": "__sandbox__"}
    exec(compile(code, "<command>", "exec"), namespace)
    solution = namespace.get("solution")
    if not callable(solution):
        raise NameError("the command must define a function solution()")
    result = solution()
    if kind == "solver":
        return {"text": str(result)[:MAX_TEXT]}
    if not isinstance(result, matplotlib.figure.Figure):
        raise TypeError(f"solution() must return a matplotlib Figure, not {type(result).__name__}")
    buffer = io.BytesIO()
    result.savefig(buffer, format="png")
    matplotlib.pyplot.close("all")
    return {"png": base64.b64encode(buffer.getvalue()).decode()}


def child(request, writer):
    calldir = os.path.join(SCRATCH, f"call-{os.getpid()}")
    os.makedirs(calldir)
    os.setsid()
    PROTOCOL_OUT.close()
    os.dup2(DEVNULL, 0)
    os.dup2(DEVNULL, 2)
    if os.geteuid() == 0:
        os.chown(calldir, 65534, 65534)
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        processes = 0
    else:
        uid = os.getuid()
        processes = 0
        for entry in os.listdir("/proc"):
            try:
                if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                    processes += 1
            except OSError:
                pass
    cpu = int(request["timeout"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    with open("/proc/self/statm") as statm:
        held = int(statm.read().split()[0]) * resource.getpagesize()
    memory = held + int(request["memory"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE, FSIZE))
    resource.setrlimit(resource.RLIMIT_NPROC, (processes + EXTRA, processes + EXTRA))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    os.chdir(calldir)
    os.environ["TMPDIR"] = calldir
    try:
        if request["kind"] == "calculator":
            if simpleeval is None:
                raise ImportError("simpleeval is not installed")
            reply = {"text": calculate(request["code"])[:MAX_TEXT]}
        else:
            reply = run_code(request["kind"], request["code"])
    except BaseException as error:  # the model's code may raise anything, SystemExit included
        try:
            reply = {"error": error_text(error)}
        except BaseException:
            reply = {"error": type(error).__name__}
    try:
        send(writer, reply)
    except BaseException:
        os._exit(3)
    os._exit(0)


def kill_leftovers(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if PID_NAMESPACE:  # everything in this namespace but its init and us is a call's leftover
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in (1, os.getpid()):
                try:
                    os.kill(int(entry), signal.SIGKILL)
                except OSError:
                    pass
    # Reap until no child is left (when this worker is the namespace's init, orphans are ours
    # too), so nothing of the call remains, not even a zombie; give up after a few seconds
    # rather than hang on a process stuck in the kernel.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                time.sleep(0.005)
        except ChildProcessError:
            break


def serve(request):
    reader, writer_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        try:
            child(request, os.fdopen(writer_fd, "wb"))
        finally:
            os._exit(4)
    os.close(writer_fd)
    deadline = time.monotonic() + float(request["timeout"])
    data = bytearray()
    outcome = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            outcome = {"limit": f"time limit exceeded ({request['timeout']:g} s wall clock)"}
            break
        ready, _, _ = select.select([reader], [], [], left)
        if not ready:
            continue
        chunk = os.read(reader, 1 << 16)
        if not chunk:
            break
        data += chunk
        if len(data) >= 4 and len(data) >= 4 + struct.unpack(">I", bytes(data[:4]))[0]:
            break  # complete, even if a leftover process still holds the pipe open
        if len(data) > MAX_REPLY:
            outcome = {"limit": f"output limit exceeded ({MAX_REPLY} bytes)"}
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
    kill_leftovers(pid)
    if outcome is not None:
        return outcome
    if len(data) >= 4 and len(data) - 4 == struct.unpack(">I", bytes(data[:4]))[0]:
        return json.loads(bytes(data[4:]))
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number in (signal.SIGXCPU, signal.SIGKILL):
            return {"limit": "CPU time limit exceeded"}
        return {"limit": f"the code was killed by signal {signal.Signals(number).name}"}
    return {"limit": "the code ended without a result (memory limit exceeded?)"}


send(PROTOCOL_OUT, {"ready": True})
while True:
    request = receive()
    if request is None:
        break
    send(PROTOCOL_OUT, serve(request))
"""


def _program(name: str) -> str:
    """``name`` as found on the user's PATH (the sandbox's own PATH is the system's).

    Resolved here so that the program probed is the program run, and a user can put the
    bubblewrap of their choice first on PATH.
    """
    return shutil.which(name) or name


def sandbox_environment(scratch: str) -> dict[str, str]:
    """The whole environment of model-written code: nothing the user's shell holds.

    API keys, tokens, proxies with credentials and the user's PATH never reach a call.
    """
    return {
        "PATH": SANDBOX_PATH,
        "LANG": "C.UTF-8",
        "HOME": scratch,
        "MPLCONFIGDIR": os.path.join(scratch, ".mpl"),
    }


@functools.cache
def python_paths() -> tuple[str, ...]:
    """Directories the worker's interpreter imports from, with the interpreter itself.

    Read from ``python -I`` itself, so a virtualenv anywhere (``/tmp`` included) and paths its
    ``.pth`` files add are covered; a checkout on ``sys.path`` is not, since the worker imports
    nothing from it and model code has no business reading it.
    """
    wanted = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    wanted.append(os.path.dirname(os.path.abspath(sys.executable)))
    try:
        out = subprocess.run(
            [sys.executable, "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
            capture_output=True,
            timeout=30,
            check=True,
            env=sandbox_environment(tempfile.gettempdir()),
        ).stdout
        entries = [p for p in json.loads(out) if isinstance(p, str) and p]
    except (OSError, ValueError, subprocess.SubprocessError):
        entries = list(site.getsitepackages())
    prefixes = tuple(os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix) if p)
    for entry in entries:
        real = os.path.realpath(entry)
        inside = (real + os.sep).startswith(prefixes)
        if inside or "site-packages" in real or "dist-packages" in real:
            wanted.append(entry)
    found = []
    for path in wanted:
        for candidate in dict.fromkeys((os.path.realpath(path), os.path.abspath(path))):
            if os.path.isdir(candidate) and candidate not in found:
                found.append(candidate)
    return tuple(found)


def _bwrap_command(scratch: str) -> list[str]:
    """The bubblewrap prefix: system and Python paths read-only, a tmpfs scratch, no network.

    ``/tmp`` is an empty tmpfs, not writable by the call; Python paths under it are mounted
    into it. Mount points are created parents first, each ``0755`` so the dropped uid can
    traverse them (bubblewrap would create them ``0700``).
    """
    command = [
        _program("bwrap"),
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "0755",
        "--tmpfs",
        "/dev/shm",
        "--perms",
        "0755",
        "--tmpfs",
        "/tmp",
        "--perms",
        "0755",
        "--tmpfs",
        scratch,
    ]
    for name, value in sandbox_environment(scratch).items():
        command += ["--setenv", name, value]
    wanted = ["/usr", "/etc", *python_paths()]
    for name in ("/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32"):
        if os.path.islink(name):
            command += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            wanted.append(name)
    binds: list[tuple[str, str]] = []
    for path in wanted:
        real = os.path.realpath(path)
        if not os.path.isdir(real):
            continue
        for target in dict.fromkeys((real, os.path.abspath(path))):
            if target not in (b[1] for b in binds):
                binds.append((real, target))
    parents: list[str] = []
    for _, target in binds:
        for parent in reversed(Path(target).parents):
            name = str(parent)
            if name not in ("/", "/tmp") and name not in parents:
                parents.append(name)
    for directory in sorted(parents, key=lambda p: p.count("/")):
        command += ["--perms", "0755", "--dir", directory]
    for real, target in sorted(binds, key=lambda b: b[1].count("/")):
        command += ["--ro-bind", real, target]
    return command


def _namespace_plan() -> tuple[str, tuple[str, ...]]:
    """The shell that sets up the namespace fallback's mounts, and what stays visible.

    Every world-writable directory gets a fresh private tmpfs, unless Python lives under it (a
    virtualenv in /tmp): hiding it would hide the interpreter, so it is made read-only instead,
    and the gap is said. The scratch directory (``$1``, created empty by the host) then gets a
    private tmpfs of its own, the only writable place; mounting onto a read-only directory is
    allowed, writing into it is not.
    """
    paths = python_paths()
    tmpfs = "mount -t tmpfs -o mode=0755,size=256m,nosuid,nodev tmpfs"
    steps = []
    gaps = []
    for directory in WORLD_WRITABLE:
        quoted = shlex.quote(directory)
        if any(p == directory or p.startswith(directory + os.sep) for p in paths):
            steps.append(
                f"if [ -d {quoted} ]; then mount --rbind {quoted} {quoted} && "
                f"mount -o remount,bind,ro {quoted} || exit 97; fi"
            )
            gaps.append(f"{directory} stays readable (Python lives there)")
        else:
            steps.append(f"if [ -d {quoted} ]; then {tmpfs} {quoted} || exit 97; fi")
    steps.append(f'mkdir -p "$1" && {tmpfs} "$1" || exit 98')
    steps.append("mount -o remount,bind,ro / 2>/dev/null")
    steps.append('shift; exec "$@"')
    return "; ".join(steps), tuple(gaps)


def _namespace_command(scratch: str) -> list[str]:
    """``unshare`` into private mount, PID and network namespaces, with world-writable dirs hidden.

    Only root can do this without a user namespace; the worker becomes PID 1 of its namespace,
    so every process a call leaves behind dies with the namespace or is killed after the call.
    """
    setup, _ = _namespace_plan()
    return [
        _program("unshare"),
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--net",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        setup,
        "sh",
        scratch,
    ]


def _probe(command: list[str]) -> bool:
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            timeout=10,
            check=False,
            env=sandbox_environment(tempfile.gettempdir()),
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0


@dataclass(frozen=True)
class Isolation:
    """How model-written code is isolated on this machine, and what is not isolated."""

    kind: SandboxKind
    #: Command prefix the worker starts under, for a scratch directory on the host (ignored
    #: when :attr:`scratch` is set).
    prefix: Callable[[str], list[str]]
    #: Scratch directory as the worker sees it (``None``: a temporary directory on the host).
    scratch: str | None
    #: Whether the worker has its own PID namespace (leftover processes can be killed).
    pid_namespace: bool
    guarantees: tuple[str, ...]
    gaps: tuple[str, ...] = ()

    def summary(self) -> str:
        """One line for the terminal header and the report."""
        text = f"{self.kind} ({', '.join(self.guarantees)})"
        if self.gaps:
            text += f"; NOT isolated: {', '.join(self.gaps)}"
        return text

    def describe(self) -> dict[str, Any]:
        """For the report."""
        return {
            "kind": self.kind,
            "guarantees": list(self.guarantees),
            "gaps": list(self.gaps),
            "summary": self.summary(),
        }


_COMMON = ("minimal environment", "time, CPU, memory, file-size and process limits")


def _bubblewrap() -> Isolation | None:
    if shutil.which("bwrap") is None or not _probe([*_bwrap_command(SCRATCH_IN_SANDBOX), "true"]):
        return None
    return Isolation(
        "bubblewrap",
        _bwrap_command,
        SCRATCH_IN_SANDBOX,
        True,
        (*_COMMON, "no network", "read-only filesystem view", "private /tmp", "PID namespace"),
    )


def _namespace_works() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    with tempfile.TemporaryDirectory(prefix="gta-sandbox-probe-") as scratch:
        return _probe([*_namespace_command(scratch), "true"])


def _rlimit() -> Isolation:
    if _namespace_works():
        _, kept = _namespace_plan()
        hidden = [d for d in WORLD_WRITABLE if not any(k.startswith(d + " ") for k in kept)]
        return Isolation(
            "rlimit",
            _namespace_command,
            None,
            True,
            (
                *_COMMON,
                "no network",
                "read-only root filesystem",
                f"private {', '.join(hidden)}",
                "PID namespace",
            ),
            ("other files stay readable", *kept),
        )
    flags = "-n" if os.geteuid() == 0 else "-rn"
    network = [_program("unshare"), flags]
    if shutil.which("unshare") and _probe([*network, "true"]):
        return Isolation(
            "rlimit",
            lambda scratch: list(network),
            None,
            False,
            (*_COMMON, "no network"),
            (
                "files stay readable",
                "world-writable directories stay writable",
                "processes that leave the call's process group outlive it",
            ),
        )
    return Isolation(
        "rlimit",
        lambda scratch: [],
        None,
        False,
        _COMMON,
        (
            "network",
            "files stay readable",
            "world-writable directories stay writable",
            "processes that leave the call's process group outlive it",
        ),
    )


_ISOLATION: dict[str, Isolation] = {}
_ISOLATION_LOCK = threading.Lock()
#: The ``--gta-sandbox`` choice of this process (set by the local backend).
_MODE: SandboxMode = "auto"


def configure(mode: SandboxMode) -> Isolation:
    """Choose the sandbox for this process (``--gta-sandbox``) and check it can run.

    Raises:
        GtaUsageError: ``bubblewrap`` was asked for and cannot run here, saying how to get it.
    """
    global _MODE
    if mode not in SANDBOX_MODES:
        raise GtaUsageError(f"--gta-sandbox={mode}: choose auto, bubblewrap or rlimit")
    _MODE = mode
    return isolation(mode)


def isolation(mode: SandboxMode | None = None) -> Isolation:
    """The isolation model-written code gets here (probed once per process and mode).

    Raises:
        GtaUsageError: ``bubblewrap`` was asked for and cannot run here.
    """
    mode = mode or _MODE
    with _ISOLATION_LOCK:
        found = _ISOLATION.get(mode)
        if found is None:
            found = None if mode == "rlimit" else _bubblewrap()
            if found is None and mode == "bubblewrap":
                why = (
                    "bwrap is not installed"
                    if shutil.which("bwrap") is None
                    else "bwrap is installed but cannot create its namespaces here (user "
                    "namespaces disabled, or a container that forbids mounts)"
                )
                raise GtaUsageError(
                    f"--gta-sandbox=bubblewrap: {why}; {INSTALL_BUBBLEWRAP}, or pass "
                    "--gta-sandbox=rlimit to accept the weaker fallback"
                )
            if found is None:
                found = _rlimit()
            _ISOLATION[mode] = found
        return found


def sandbox_kind() -> SandboxKind:
    """Which sandbox runs model code here: ``"bubblewrap"`` or ``"rlimit"``."""
    return isolation().kind


@dataclass(frozen=True)
class SandboxResult:
    """What a call produced: text, or PNG bytes for Plot."""

    text: str | None = None
    png: bytes | None = None


class SandboxWorker:
    """The warm worker process and the host side of its pipe protocol."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._scratch: tempfile.TemporaryDirectory[str] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        """Start the worker under this machine's isolation.

        Raises:
            GtaInfrastructureError: it did not start; the harness is broken, not the model.
        """
        chosen = isolation()
        scratch = chosen.scratch
        if scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="gta-sandbox-")
            os.chmod(self._scratch.name, 0o755)
            scratch = self._scratch.name
        arguments = [scratch, MAX_TEXT_CHARS, MAX_REPLY_BYTES, FILE_SIZE_BYTES, EXTRA_PROCESSES]
        command = [*chosen.prefix(scratch), sys.executable, "-I", "-c", _WORKER_SOURCE]
        command += [str(a) for a in arguments] + ["1" if chosen.pid_namespace else "0"]
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                env=sandbox_environment(scratch),
            )
        except OSError as exc:
            raise GtaInfrastructureError(
                f"the code sandbox ({chosen.kind}) could not be started: {exc}"
            ) from None
        self._process = process
        if self._receive(process, START_TIMEOUT_S) is None:
            self._stop()
            raise GtaInfrastructureError(
                f"the code sandbox ({chosen.kind}) did not start within {START_TIMEOUT_S:g} s"
            )
        return process

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass
            process.wait()
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None

    def close(self) -> None:
        """Stop the worker (a later call starts a new one)."""
        with self._lock:
            self._stop()

    @staticmethod
    def _receive(process: subprocess.Popen[bytes], timeout: float) -> dict[str, Any] | None:
        """Read one message, or None when the worker died, hung or sent too much."""
        assert process.stdout is not None
        fd = process.stdout.fileno()
        deadline = time.monotonic() + timeout
        data = b""
        expected: int | None = None
        while expected is None or len(data) < expected + 4:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            data += chunk
            if expected is None and len(data) >= 4:
                expected = struct.unpack(">I", data[:4])[0]
                if expected > 2 * MAX_REPLY_BYTES:
                    return None
        message: dict[str, Any] = json.loads(data[4 : expected + 4])
        return message

    def run(
        self,
        kind: Literal["calculator", "solver", "plot"],
        code: str,
        timeout: float = DEFAULT_TIMEOUT_S,
        memory: int = DEFAULT_MEMORY_BYTES,
    ) -> SandboxResult:
        """Run one call in a fresh child of the worker.

        Raises:
            GtaToolError: the code raised (``"NameError: ..."``) or hit a limit (which one).
        """
        request = {"kind": kind, "code": code, "timeout": timeout, "memory": memory}
        data = json.dumps(request).encode()
        with self._lock:
            process = self._process
            if process is None or process.poll() is not None:
                self._stop()
                process = self._start()
            assert process.stdin is not None
            try:
                process.stdin.write(struct.pack(">I", len(data)) + data)
                process.stdin.flush()
            except OSError:
                reply = None
            else:
                reply = self._receive(process, timeout + HOST_SLACK_S)
            if reply is None:
                # The worker enforces every limit of a call itself; one that stops answering
                # broke (killed from outside, out of memory), which is not the model's doing.
                self._stop()
                raise GtaInfrastructureError(
                    "the code sandbox stopped answering; it will be restarted for the next call"
                )
        if "error" in reply:
            raise GtaToolError(str(reply["error"]))
        if "limit" in reply:
            raise GtaToolError(str(reply["limit"]))
        if "png" in reply:
            return SandboxResult(png=base64.b64decode(reply["png"]))
        return SandboxResult(text=str(reply.get("text", "")))


_WORKER: SandboxWorker | None = None
_WORKER_LOCK = threading.Lock()


def worker() -> SandboxWorker:
    """The process-wide worker, created on first use and stopped when the process exits."""
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is None:
            _WORKER = SandboxWorker()
            atexit.register(_WORKER.close)
        return _WORKER
