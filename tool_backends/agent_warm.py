"""The agent's warm sandbox, on the host: started once per run, asked for a case per request.

:mod:`tool_backends.agent_cases` says what runs inside and why. Here the jail's side: start it
behind one guard (:mod:`pytest_gta.process_guard`: if pytest dies, the sandbox goes with it),
read its first message (ready, the callable's import error, or why no case can be built), then
for each case hand over a socket of the case's own and its input files' descriptors, and speak
the launcher's frames on that socket until the case's ``done``.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from pytest_gta import jail as registry
from pytest_gta import process_guard
from tool_backends import agent_launcher, sandbox_worker

#: Seconds the warm sandbox may take to start (importing the agent's module included).
START_S = 120.0
#: Seconds a case may take to enter its namespaces and say it is ready.
READY_S = 30.0
#: Bytes of the warm sandbox's stderr kept, where a start that failed says why.
STDERR_KEPT = 8 << 10
#: The most input files a case hands over this way (one descriptor each, in one message).
MAX_INPUTS = 240
#: The most input bytes a case copies into its own tmpfs (memory of the host).
MAX_INPUT_BYTES = 1 << 30


class WarmUnavailable(Exception):
    """No case can be built this way here; the message says why (the jail falls back)."""


class CallableFailed(Exception):
    """The agent's callable did not import in the warm sandbox: its error record."""

    def __init__(self, record: Mapping[str, Any]) -> None:
        super().__init__(str(record.get("message", "")))
        self.record = dict(record)


@dataclass(frozen=True)
class CaseInputs:
    """A case's input files as the warm sandbox lays them out: directory, relative path, file."""

    entries: tuple[tuple[str, str, str], ...]

    @classmethod
    def place(cls, paths: Sequence[str], roots: Sequence[str]) -> CaseInputs | None:
        """Each path under the first of ``roots`` that holds it; ``None`` if one lies elsewhere.

        A path is placed by where the agent is told it is (its absolute path) and read from
        where it leads (its real path), which must be a regular file.
        """
        entries = []
        for path in dict.fromkeys(paths):
            shown = os.path.abspath(path)
            root = next((r for r in roots if shown.startswith(r.rstrip("/") + "/")), None)
            real = os.path.realpath(path)
            if root is None or not os.path.isfile(real):
                return None
            entries.append((root, os.path.relpath(shown, root), real))
        if len(entries) > MAX_INPUTS:
            return None
        if sum(os.path.getsize(real) for _, _, real in entries) > MAX_INPUT_BYTES:
            return None
        return cls(tuple(entries))


class WarmSandbox:
    """One run's warm sandbox: its process, its control socket, its cases.

    Args:
        command: The sandbox's command line up to the program it runs (bubblewrap's or
            ``unshare``'s words, then the Python inside).
        spec: The callable to import once (``None`` for a command agent).
        scratch: Where each case's scratch tmpfs is, inside.
        scratch_bytes: Its size.
        network: Whether each case gets a network namespace of its own.
    """

    def __init__(
        self,
        command: list[str],
        *,
        spec: Mapping[str, Any] | None,
        scratch: str,
        scratch_bytes: int,
        network: bool,
        grace_s: float,
    ) -> None:
        self._scratch, self._scratch_bytes = scratch, scratch_bytes
        self._grace_s = grace_s
        self._lock = threading.Lock()
        self._keys = itertools.count(1)
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        guard = [sys.executable, "-I", process_guard.__file__, str(os.getpid()), str(grace_s)]
        argv = [*command, json.dumps(spec), scratch, "case" if network else "open"]
        started = time.monotonic()
        with theirs:
            self._process = subprocess.Popen(
                [*guard, "--", *argv],
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
            )
        registry.started(self._process.pid)
        assert self._process.stderr is not None
        self._stderr = agent_launcher.Drain(self._process.stderr, keep=STDERR_KEPT)
        self._stderr.start()
        first = self._first_message()
        self.start_s = time.monotonic() - started
        if "error" in first:
            self.close()
            raise CallableFailed(first["error"] if isinstance(first["error"], dict) else {})
        if first.get("ready") is not True:
            self.close()  # its stderr read to the end: where a sandbox program says why
            said = first.get("broken") or agent_launcher.text(self._stderr.data).strip()[-500:]
            raise WarmUnavailable(str(said or "the warm sandbox exited before it was ready"))
        #: Whether the callable was imported once for every case (else each case imports it).
        self.preloaded = bool(first.get("preloaded"))
        #: What the template said of itself (who it runs as, how the callable was imported).
        self.note = str(first.get("note") or "")

    def _first_message(self) -> dict[str, Any]:
        ready, _, _ = select.select([self._control], [], [], START_S)
        if not ready:
            return {"broken": f"the warm sandbox did not start within {START_S:g} s"}
        try:
            data = self._control.recv(1 << 20)
            message = json.loads(data) if data else {}
        except (OSError, ValueError):
            message = {}
        return message if isinstance(message, dict) else {}

    @property
    def alive(self) -> bool:
        """Whether the sandbox still runs (a killed one is started again by the jail)."""
        return self._process.poll() is None

    def run(
        self,
        config: Mapping[str, Any],
        inputs: CaseInputs,
        timeout: float,
        on_message: Callable[[IO[bytes], IO[bytes]], dict[str, Any] | None],
    ) -> tuple[dict[str, Any] | None, bool]:
        """Run one case: its ``done`` frame's content (``None``: it broke) and whether it timed out.

        ``on_message`` speaks the case's frames after the config (the jail's conversation).

        Raises:
            WarmUnavailable: the case could not enter its namespaces (the message says why).
        """
        key = next(self._keys)
        ours, theirs = socket.socketpair()
        files = [_open_input(real) for _, _, real in inputs.entries]
        request = {
            "case": key,
            "inputs": [[root, rel, i] for i, (root, rel, _) in enumerate(inputs.entries)],
            "scratch": self._scratch,
            "scratch_bytes": self._scratch_bytes,
        }
        try:
            with self._lock:
                message = [json.dumps(request).encode()]
                socket.send_fds(self._control, message, [theirs.fileno(), *files])
        except OSError as exc:
            ours.close()
            raise WarmUnavailable(f"the warm sandbox is gone: {exc}") from None
        finally:
            theirs.close()
            for fd in files:
                os.close(fd)
        timed_out = threading.Event()

        def give_up() -> None:  # the case did not end when asked: kill it, stop waiting
            self.kill(key, now=True)
            try:
                ours.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        def expire() -> None:
            # The case's first process ends its namespace, waits for every process of it to
            # be gone, then closes the case's socket: the conversation below ends then.
            timed_out.set()
            self.kill(key)
            later = threading.Timer(self._grace_s, give_up)
            later.daemon = True
            later.start()

        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
        host_in, host_out = ours.makefile("rb"), ours.makefile("wb")
        try:
            ready = _receive(host_in)
            if ready is None and not timed_out.is_set():
                raise WarmUnavailable("the case's process ended before it was ready")
            if ready is not None and ready.get("ready") is not True:
                raise WarmUnavailable(str(ready.get("broken") or "the case broke"))
            if ready is None:
                return None, True
            sandbox_worker.send(host_out, config)
            done = on_message(host_in, host_out)
        except (OSError, ValueError):
            done = None
        finally:
            timer.cancel()
            self.kill(key)
            for stream in (host_in, host_out, ours):
                try:
                    stream.close()
                except OSError:
                    pass
        return done, timed_out.is_set()

    def kill(self, key: int, *, now: bool = False) -> None:
        """Ask the template to end case ``key`` (everything of it dies with its namespace)."""
        try:
            with self._lock:
                self._control.send(json.dumps({"kill": key, "now": now}).encode())
        except OSError:
            pass

    def close(self) -> None:
        """Stop the sandbox and every case still in it."""
        try:
            self._control.close()
        except OSError:
            pass
        try:
            os.killpg(self._process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._process.wait()
        registry.ended(self._process.pid)
        self._stderr.join(agent_launcher.READER_JOIN_S)


def _open_input(path: str) -> int:
    """A read-only descriptor of a case's input, refused unless a regular file (no FIFO waits)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return fd


def _receive(stream: IO[bytes]) -> dict[str, Any] | None:
    message = sandbox_worker.receive(stream)
    return message if isinstance(message, dict) else None
