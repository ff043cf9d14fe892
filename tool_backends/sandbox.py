"""A sandbox for model-written code: a warm worker process that forks one child per call.

Solver and Plot run Python the model wrote, and the Calculator evaluates an expression the model
wrote; none of it may run in the pytest process, where a ``while True`` would hang the run and a
``'a' * 10**10`` would take the machine down. Each call therefore runs in a child process with:

* a wall-clock deadline, after which the child's whole process group is killed (and, inside
  bubblewrap's PID namespace, every process the call left behind);
* ``RLIMIT_CPU``, ``RLIMIT_AS`` (memory on top of what the warm worker already holds),
  ``RLIMIT_FSIZE`` and ``RLIMIT_NPROC`` (so a fork bomb stops at a handful of processes);
* a non-root uid when the worker runs as root (``nobody``), since the kernel never applies
  ``RLIMIT_NPROC`` to root;
* with bubblewrap (:func:`sandbox_kind` says ``"bubblewrap"``): no network (``--unshare-net``),
  its own PID/IPC/UTS namespaces, and a filesystem that shows only the system and Python paths,
  read-only, plus a tmpfs scratch directory as the only writable place. Without bubblewrap
  (``"rlimit"``) the same worker runs as a plain subprocess with the limits above, under
  ``unshare -n`` when that works (no network) and in a private scratch directory, but the rest of
  the filesystem stays visible: that fallback is best effort.

Importing SymPy and Matplotlib takes over a second, so the worker imports them once and forks a
child per call (a "zygote"); a call then costs a fork and the user code. One worker serves the
whole pytest process (calls are serialised by a lock), is started on first use and restarted if
it dies.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import select
import shutil
import signal
import site
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pytest_gta.errors import GtaToolError

SandboxKind = Literal["bubblewrap", "rlimit"]

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

# The worker program. It runs with ``python -I -c`` so that it needs nothing from this checkout
# (the bubblewrap sandbox does not show it). Messages are a 4-byte big-endian length and JSON.
_WORKER_SOURCE = r"""
import base64, io, json, os, resource, select, signal, struct, sys, time

SCRATCH = sys.argv[1]
MAX_TEXT, MAX_REPLY, FSIZE, EXTRA = (int(a) for a in sys.argv[2:6])
PID_NAMESPACE = sys.argv[6] == "1"
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
    if PID_NAMESPACE:  # everything in this namespace but bwrap's init and us is a call's leftover
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in (1, os.getpid()):
                try:
                    os.kill(int(entry), signal.SIGKILL)
                except OSError:
                    pass
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                break
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


def _bwrap_command(scratch: str) -> list[str]:
    """The bubblewrap prefix: system and Python paths read-only, a tmpfs scratch, no network."""
    command = [
        "bwrap",
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "0755",
        "--tmpfs",
        "/dev/shm",
        "--tmpfs",
        scratch,
        # Only the per-call directory in the scratch tmpfs is writable by the call's uid.
        "--symlink",
        scratch,
        "/tmp",
    ]
    bound: set[str] = set()
    wanted = ["/usr", "/etc", sys.prefix, sys.base_prefix, *site.getsitepackages()]
    wanted.append(os.path.dirname(os.path.realpath(sys.executable)))
    for name in ("/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32"):
        if os.path.islink(name):
            command += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            wanted.append(name)
    parents: list[str] = []
    binds: list[str] = []
    for path in wanted:
        real = os.path.realpath(path)
        if not os.path.isdir(real):
            continue
        for target in dict.fromkeys((real, os.path.abspath(path))):
            if target in bound:
                continue
            bound.add(target)
            binds += ["--ro-bind", real, target]
            # bubblewrap creates missing parents as 0700; the dropped uid must traverse them.
            for parent in reversed(Path(target).parents):
                if str(parent) != "/" and str(parent) not in parents:
                    parents.append(str(parent))
    for directory in parents:
        command += ["--perms", "0755", "--dir", directory]
    return command + binds


_KIND: SandboxKind | None = None
_NET_PREFIX: list[str] | None = None


def _probe(command: list[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def sandbox_kind() -> SandboxKind:
    """Which sandbox runs model code here: ``"bubblewrap"`` if ``bwrap`` works, else ``"rlimit"``.

    Probed once per process, since bubblewrap may be installed yet refused (no user namespaces,
    a container that forbids mounts).
    """
    global _KIND
    if _KIND is None:
        works = shutil.which("bwrap") is not None and _probe(
            [*_bwrap_command(SCRATCH_IN_SANDBOX), "true"]
        )
        _KIND = "bubblewrap" if works else "rlimit"
    return _KIND


def _network_prefix() -> list[str]:
    """``unshare -n`` (or ``-rn`` when not root) if it works here, so rlimit mode has no network."""
    global _NET_PREFIX
    if _NET_PREFIX is None:
        flags = "-n" if os.geteuid() == 0 else "-rn"
        candidate = ["unshare", flags]
        works = shutil.which("unshare") is not None and _probe([*candidate, "true"])
        _NET_PREFIX = candidate if works else []
    return _NET_PREFIX


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
        kind = sandbox_kind()
        if kind == "bubblewrap":
            scratch = SCRATCH_IN_SANDBOX
            prefix = _bwrap_command(scratch)
        else:
            self._scratch = tempfile.TemporaryDirectory(prefix="gta-sandbox-")
            os.chmod(self._scratch.name, 0o755)
            scratch = self._scratch.name
            prefix = _network_prefix()
        arguments = [scratch, MAX_TEXT_CHARS, MAX_REPLY_BYTES, FILE_SIZE_BYTES, EXTRA_PROCESSES]
        command = [*prefix, sys.executable, "-I", "-c", _WORKER_SOURCE]
        command += [str(a) for a in arguments] + ["1" if kind == "bubblewrap" else "0"]
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._process = process
        if self._receive(process, START_TIMEOUT_S) is None:
            self._stop()
            raise GtaToolError("the code sandbox did not start")
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
                self._stop()
                raise GtaToolError("the code sandbox stopped answering; it will be restarted")
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
