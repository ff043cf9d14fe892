"""The host side of the sandbox's warm workers: starting them, talking to them, pooling them.

A :class:`SandboxWorker` is one warm worker process (:mod:`tool_backends.sandbox_worker`, run
from its text under the chosen isolation) and the host side of its pipe protocol; a
:class:`SandboxPool` keeps up to a few of them, so that calls from concurrent episodes compute at
once. What a worker starts under (its isolation, the paths Landlock allows, its limits) comes
from its :class:`WorkerHost`, :class:`tool_backends.sandbox.Sandbox`, asked at each (re)start.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pytest_gta.errors import GtaInfrastructureError, GtaToolError, GtaUsageError
from tool_backends import sandbox_worker
from tool_backends.sandbox_isolation import Isolation
from tool_backends.sandbox_mounts import SCRATCH_BYTES
from tool_backends.sandbox_tree import sandbox_environment

CallKind = Literal["calculator", "solver", "plot", "reader", "generator"]
#: What the host reads from a worker whose pipe carried something that is no frame of its own
#: (no reply the worker sends looks like it, so the call stops that worker too).
MALFORMED = {"error": sandbox_worker.FORGED, "on_the_workers_pipe": True}

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
#: Most warm workers a process keeps. Each holds SymPy and Matplotlib (about 100 MB), and
#: xdist multiplies them by its worker count, while model-written code is rarely the slow part
#: of an episode: a few workers take the overlap of concurrent episodes' calls.
MAX_WORKERS = 4
#: Environment variable that sets the pool's size instead (a whole number, 1 or more).
WORKERS_ENV = "PYTEST_GTA_SANDBOX_WORKERS"


@dataclass(frozen=True)
class Limits:
    """The limits every call of one sandbox runs under (each call also has its own time limit)."""

    #: Text returned to the model is cut here.
    max_text_chars: int = MAX_TEXT_CHARS
    #: The most a call's reply may weigh on the pipe.
    max_reply_bytes: int = MAX_REPLY_BYTES
    #: Largest file a call may write.
    file_size_bytes: int = FILE_SIZE_BYTES
    #: Processes a call may add.
    extra_processes: int = EXTRA_PROCESSES
    #: Scratch space of one worker's calls (see ``sandbox_mounts.SCRATCH_BYTES``).
    scratch_bytes: int = SCRATCH_BYTES
    #: Time a worker gets to start.
    start_timeout_s: float = START_TIMEOUT_S
    #: Slack on top of a call's timeout before the host gives up on its worker.
    host_slack_s: float = HOST_SLACK_S


@functools.cache
def worker_source() -> str:
    """The text of :mod:`tool_backends.sandbox_worker`, which the worker runs as ``python -I -c``.

    Its text, not ``-m``: the sandbox shows only the system and Python paths, which need not
    hold this package (an editable install lives in a checkout the sandbox does not mount), so
    the worker must need nothing but the standard library and the file's own text.
    """
    return Path(sandbox_worker.__file__).read_text(encoding="utf-8")


def pool_size() -> int:
    """How many warm workers a process may keep: ``PYTEST_GTA_SANDBOX_WORKERS``, else the cores.

    The cores are those this process may run on (a container's CPU set, ``taskset``), at most
    :data:`MAX_WORKERS`: more workers than cores would only time-slice the same calls.

    Raises:
        GtaUsageError: the variable is set to anything but a whole number of 1 or more.
    """
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if raw:
        try:
            size = int(raw)
        except ValueError:
            size = 0
        if size < 1:
            raise GtaUsageError(
                f"{WORKERS_ENV}={raw[:40]!r}: set it to the number of sandbox workers a process "
                f"may run at once (1 or more), or unset it for the default (the cores, at most "
                f"{MAX_WORKERS})"
            )
        return size
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


class Launcher:
    """Starts worker processes from one thread that lives until :meth:`close`.

    bubblewrap's ``--die-with-parent`` is ``PR_SET_PDEATHSIG``, which fires when the *thread*
    that started it ends, not the process: a worker started from an episode's thread
    (``--gta-concurrency``) or any short-lived executor would be killed with that thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: ThreadPoolExecutor | None = None

    def launch(self, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start ``command`` (stdin and stdout piped, a session of its own) from the thread.

        Raises:
            OSError: the program could not be run.
        """
        with self._lock:
            if self._thread is None:
                self._thread = ThreadPoolExecutor(
                    1, thread_name_prefix="pytest-gta-sandbox-launcher"
                )
            thread = self._thread
        started = thread.submit(
            subprocess.Popen,
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
        process: subprocess.Popen[bytes] = started.result()
        return process

    def close(self) -> None:
        """End the thread (stop the workers it started first); a later launch starts another."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.shutdown()


class WorkerHost(Protocol):
    """What a worker asks of its sandbox each time it (re)starts."""

    @property
    def limits(self) -> Limits:
        """The limits of every call."""

    def isolation(self) -> Isolation:
        """The isolation to start under."""

    def landlock_paths(self) -> tuple[str, ...]:
        """The paths a call may read, where the isolation confines calls with Landlock."""

    def launch(self, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start the worker's process (see :class:`Launcher`)."""


@dataclass(frozen=True)
class SandboxResult:
    """What a call produced: text, PNG bytes for Plot, a file's bytes for a generator."""

    text: str | None = None
    png: bytes | None = None
    data: bytes | None = None


def receive(
    process: subprocess.Popen[bytes], timeout: float, max_reply: int = MAX_REPLY_BYTES
) -> dict[str, Any] | None:
    """Read one message from a worker, or None when it died, hung or sent too much.

    A frame that is not a JSON object can only come from model code that reached the worker's
    pipe; it reads as :data:`MALFORMED`, which the call reports as the model's.
    """
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + timeout
    data = b""
    header = sandbox_worker.HEADER.size
    expected: int | None = None
    while expected is None or len(data) < header + expected:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        data += chunk
        if expected is None:
            expected = sandbox_worker.announced(data)
            if expected is not None and expected > 2 * max_reply:
                return None
    try:
        message = json.loads(data[header : header + expected])
    except (ValueError, RecursionError):
        return dict(MALFORMED)
    if len(data) != header + expected or not isinstance(message, dict):
        return dict(MALFORMED)
    return message


class SandboxWorker:
    """One warm worker process and the host side of its pipe protocol; one call at a time.

    :class:`SandboxPool` runs several of them; tests use one directly.
    """

    def __init__(self, host: WorkerHost) -> None:
        """A worker of ``host``'s sandbox, started by its first call (or :meth:`start`)."""
        #: The sandbox it starts under; asked again at each (re)start.
        self.host = host
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._scratch: tempfile.TemporaryDirectory[str] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        """Start the worker under its host's isolation.

        Raises:
            GtaInfrastructureError: it did not start; the harness is broken, not the model.
        """
        chosen = self.host.isolation()
        limits = self.host.limits
        self._scratch = tempfile.TemporaryDirectory(prefix="gta-sandbox-")
        os.chmod(self._scratch.name, 0o755)
        scratch = chosen.scratch or self._scratch.name
        settings = sandbox_worker.Settings(
            scratch,
            limits.max_text_chars,
            limits.max_reply_bytes,
            limits.file_size_bytes,
            limits.extra_processes,
            chosen.pid_namespace,
            # A host directory has no size of its own: the worker watches each call's.
            limits.scratch_bytes if chosen.scratch is None else 0,
            self.host.landlock_paths() if chosen.landlock else (),
        )
        command = [*chosen.prefix(self._scratch.name), sys.executable, "-I", "-c", worker_source()]
        command += settings.to_argv()
        try:
            process = self.host.launch(command, sandbox_environment(scratch))
        except OSError as exc:
            raise GtaInfrastructureError(
                f"the code sandbox ({chosen.kind}) could not be started: {exc}"
            ) from None
        self._process = process
        if receive(process, limits.start_timeout_s, limits.max_reply_bytes) is None:
            self._stop()
            raise GtaInfrastructureError(
                f"the code sandbox ({chosen.kind}) did not start within "
                f"{limits.start_timeout_s:g} s"
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
            # Whatever a call left in it (its code may have made it unreadable) goes too.
            sandbox_worker.remove_tree(self._scratch.name)
            self._scratch.cleanup()
            self._scratch = None

    def close(self) -> None:
        """Stop the worker (a later call starts a new one)."""
        with self._lock:
            self._stop()

    def start(self) -> None:
        """Start the worker now unless it runs (a call starts it anyway; this warms it first).

        Raises:
            GtaInfrastructureError: it did not start.
        """
        with self._lock:
            self._running()

    def _running(self) -> subprocess.Popen[bytes]:
        """The live worker process, (re)started if there is none; call under the lock."""
        process = self._process
        if process is None or process.poll() is not None:
            self._stop()
            process = self._start()
        return process

    def run(
        self,
        kind: CallKind,
        code: str,
        timeout: float = DEFAULT_TIMEOUT_S,
        memory: int = DEFAULT_MEMORY_BYTES,
    ) -> SandboxResult:
        """Run one call in a fresh child of the worker.

        Raises:
            GtaToolError: the code raised (``"NameError: ..."``) or hit a limit (which one).
        """
        limits = self.host.limits
        request = {"kind": kind, "code": code, "timeout": timeout, "memory": memory}
        with self._lock:
            process = self._running()
            assert process.stdin is not None
            try:
                process.stdin.write(sandbox_worker.encode(request))
                process.stdin.flush()
            except OSError:
                reply = None
            else:
                reply = receive(process, timeout + limits.host_slack_s, limits.max_reply_bytes)
            if reply is None:
                # The worker enforces every limit of a call itself; one that stops answering
                # broke (killed from outside, out of memory), which is not the model's doing.
                self._stop()
                raise GtaInfrastructureError(
                    "the code sandbox stopped answering; it will be restarted for the next call"
                )
            if "broken" in reply:
                self._stop()
                raise GtaInfrastructureError(f"the code sandbox failed: {reply['broken']}")
            checked = sandbox_worker.checked_reply(
                json.dumps(reply).encode(), limits.max_text_chars
            )
            if checked != reply:
                self._stop()  # what reached the worker's pipe may reach it again
        if "error" in checked:
            raise GtaToolError(str(checked["error"]))
        if "limit" in checked:
            raise GtaToolError(str(checked["limit"]))
        if "png" in checked:
            return SandboxResult(png=base64.b64decode(checked["png"]))
        if "file" in checked:
            if kind != "generator":  # only a generator's program returns a file
                raise GtaToolError(sandbox_worker.FORGED)
            return SandboxResult(data=base64.b64decode(checked["file"]))
        return SandboxResult(text=str(checked["text"]))


class SandboxPool:
    """Up to ``size`` warm workers of one sandbox, each serving one call at a time.

    A call takes an idle worker; when every worker is busy it starts another, up to ``size``,
    and past that waits for one to come free. Workers start lazily (a process whose calls never
    overlap runs one) and are kept until :meth:`close`. Safe to call from any number of
    threads; the calls of one worker never mix, since each worker is taken by one call at a time.
    """

    def __init__(self, host: WorkerHost, size: int | None = None) -> None:
        """A pool of ``size`` workers of ``host``'s sandbox at most (default: :func:`pool_size`).

        Raises:
            GtaUsageError: ``size`` is below 1, or ``PYTEST_GTA_SANDBOX_WORKERS`` is unusable.
        """
        self._host = host
        self.size = pool_size() if size is None else size
        if self.size < 1:
            raise GtaUsageError(f"a sandbox pool needs at least one worker, not {self.size}")
        self._available = threading.Condition()
        self._workers: list[SandboxWorker] = []
        self._idle: list[SandboxWorker] = []

    def workers(self) -> tuple[SandboxWorker, ...]:
        """The workers created so far, busy or idle (for tests and diagnostics)."""
        with self._available:
            return tuple(self._workers)

    def _take(self) -> SandboxWorker:
        with self._available:
            while not self._idle and len(self._workers) >= self.size:
                self._available.wait()
            if self._idle:
                return self._idle.pop()
            # Started by its first call, outside this lock: a slow start holds up no other call.
            fresh = SandboxWorker(self._host)
            self._workers.append(fresh)
            return fresh

    def _give_back(self, taken: SandboxWorker) -> None:
        with self._available:
            kept = any(taken is worker for worker in self._workers)
            if kept:
                self._idle.append(taken)
            self._available.notify()
        if not kept:
            # close() dropped it while it served this call, which may have (re)started it.
            taken.close()

    def run(
        self,
        kind: CallKind,
        code: str,
        timeout: float = DEFAULT_TIMEOUT_S,
        memory: int = DEFAULT_MEMORY_BYTES,
    ) -> SandboxResult:
        """Run one call on an idle worker (see :meth:`SandboxWorker.run`).

        Raises:
            GtaToolError: the code raised or hit a limit.
            GtaInfrastructureError: its worker did not start or stopped answering (that
                worker alone is stopped, and restarted by its next call).
        """
        taken = self._take()
        try:
            return taken.run(kind, code, timeout, memory)
        finally:
            self._give_back(taken)

    def warm(self, count: int | None = None) -> None:
        """Start ``count`` workers now (default: all ``size``), before the calls that need them.

        Raises:
            GtaInfrastructureError: a worker did not start.
        """
        wanted = self.size if count is None else min(count, self.size)
        with self._available:
            while len(self._workers) < wanted:
                fresh = SandboxWorker(self._host)
                self._workers.append(fresh)
                self._idle.append(fresh)
            workers = list(self._workers[:wanted])
        for each in workers:
            each.start()
            with self._available:
                dropped = not any(each is worker for worker in self._workers)
            if dropped:  # close() ran meanwhile
                each.close()

    def close(self) -> None:
        """Stop every worker; a call in flight finishes first. Later calls start new ones."""
        with self._available:
            workers, self._workers, self._idle = self._workers, [], []
            self._available.notify_all()
        for each in workers:
            each.close()
