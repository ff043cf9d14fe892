"""Runs one case's agent inside its sandbox, and reports what it answered.

The jail (:mod:`tool_backends.agent_jail`) starts ``python -I agent_launcher.py`` as the only
process of a fresh sandbox (PID 1 of its namespace where there is one) and sends it the case on
stdin, one frame (:func:`sandbox_worker.send`): the agent's command or callable, its
environment, its query, its limits. Like :mod:`tool_backends.sandbox_worker`, whose confinement
functions it reuses, this file is a program of the standard library alone: the sandbox shows no
package of this project, and ``-I`` keeps the user's environment off ``sys.path``.

The launcher, as the sandbox's own init:

1. brings up the namespace's loopback and listens on the ports of the case's MCP server and
   model proxy, forwarding each connection to the host's Unix socket bound into the sandbox
   (so the agent's URLs are the usual ``http://127.0.0.1:PORT/...`` and nothing else is
   reachable);
2. writes the query file into the scratch directory and starts the agent as a child: the
   command, or this file again in ``child`` mode to import and call the callable, with the
   case's tool calls relayed to the host as frames; as root the child runs as ``nobody``,
   elsewhere it gives up every capability; either way with bounded memory, processes and files;
3. when the agent exits (or the host's time is up and the host kills the sandbox), kills every
   process left in the namespace, reads the answer file without following links, and sends
   ``{"done": {...}}``.

``probe`` mode runs :func:`probe` as the agent: it tries what a cheating agent would and reports
what it got, for the report's ``settings.agent.probe``.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import json
import os
import resource
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import IO, Any

try:
    from tool_backends import agent_callable as called
    from tool_backends import sandbox_worker as worker
except ImportError:  # in the sandbox, which shows no package: the sibling files, bound beside
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import agent_callable as called  # type: ignore[import-not-found,no-redef]
    import sandbox_worker as worker  # type: ignore[import-not-found,no-redef]

#: Bytes of the agent's stdout kept as its answer (its beginning), and of stderr (its end).
MAX_ANSWER_BYTES = 1 << 20
#: The files and bytes of ``{deliverables_dir}`` brought back to the host (GTA-Workflow).
MAX_DELIVERABLES = 256
MAX_DELIVERABLE_BYTES = 32 << 20
#: The deliverables directory's name in the agent's scratch directory.
DELIVERABLES = called.DELIVERABLES
STDERR_KEPT = 16 << 10
#: Seconds the readers of the agent's output may take once every process has been killed.
READER_JOIN_S = 5.0
#: ``ioctl`` numbers and flags to bring the loopback interface up (``linux/sockios.h``).
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP, IFF_RUNNING = 0x8913, 0x8914, 0x1, 0x40

Message = dict[str, Any]


# -- the network: the case's two services, nothing else ------------------------------------


def loopback_up() -> None:
    """Bring ``lo`` up in a fresh network namespace (bubblewrap does; ``unshare`` does not)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        if not flags & IFF_UP:
            up = struct.pack("16sH14x", b"lo", flags | IFF_UP | IFF_RUNNING)
            fcntl.ioctl(sock, SIOCSIFFLAGS, up)


def pair(a: socket.socket, b: socket.socket, done: Callable[[], None] = lambda: None) -> None:
    """Pump bytes both ways between ``a`` and ``b``; close both and call ``done`` at the end.

    Each direction half-closes the other side when its source ends (an HTTP client that shuts
    its writing side still gets its answer); the sockets close once both directions are over.
    """
    left = [2]
    lock = threading.Lock()

    def finished() -> None:
        with lock:
            left[0] -= 1
            if left[0] == 0:
                a.close()
                b.close()
                done()

    for source, target in ((a, b), (b, a)):
        threading.Thread(target=_pump, args=(source, target, finished), daemon=True).start()


def _pump(source: socket.socket, target: socket.socket, finished: Callable[[], None]) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finished()


def _serve_bridge(listener: socket.socket, path: str) -> None:
    """Forward each connection to ``listener`` to the Unix socket ``path`` (the host's)."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue
        pair(client, upstream)


def open_bridges(bridges: list[Mapping[str, Any]]) -> list[tuple[socket.socket, str]]:
    """Listen on each bridge's port on 127.0.0.1 (before the agent starts: no race)."""
    listening = []
    for bridge in bridges:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(bridge["port"])))
        listener.listen(64)
        listening.append((listener, str(bridge["socket"])))
    return listening


# -- the agent's process -----------------------------------------------------------------------


def identity(config: Mapping[str, Any]) -> str:
    """Who the agent runs as: ``nobody``, root without capabilities, or the launcher's user.

    ``nobody`` where the sandbox's launcher is real root; root of a user namespace that maps
    no ``nobody`` gives up its capabilities; elsewhere the agent keeps the launcher's (``same``).
    """
    if not config.get("confine"):
        return "same"
    if os.geteuid() == 0 and worker.mapped(worker.NOBODY):
        return "nobody"
    return "capabilities" if os.geteuid() == 0 else "same"


def confine(config: Mapping[str, Any]) -> None:
    """In the agent's process, before it runs: its limits, its uid, its capabilities.

    Runs in the forked child (``preexec_fn``). ``RLIMIT_NPROC`` counts every process of the
    uid, so it is set only for ``nobody``, whom nothing else of the harness runs as.
    """
    who = config["identity"]
    # A case forked from a warm sandbox already runs as nobody (its user namespace maps it).
    counted = who == "nobody" or (config.get("warm") and os.getuid() == worker.NOBODY)
    for name, value in config.get("limits", {}).items():
        if name == "RLIMIT_NPROC" and not counted:
            continue
        number = getattr(resource, name, None)
        if number is not None and value:
            resource.setrlimit(number, (int(value), int(value)))
    os.umask(0o077)
    if who == "nobody":
        os.setgroups([])
        os.setresgid(worker.NOBODY, worker.NOBODY, worker.NOBODY)
        os.setresuid(worker.NOBODY, worker.NOBODY, worker.NOBODY)
        worker._prctl(worker.PR_SET_NO_NEW_PRIVS, 1)
    elif who == "capabilities":
        worker.drop_capabilities()
    worker.undumpable()


class Drain(threading.Thread):
    """Reads one pipe to its end: keeps its first ``head`` bytes, or its last ``keep`` bytes."""

    def __init__(self, pipe: IO[bytes], *, head: int = 0, keep: int = 0) -> None:
        super().__init__(daemon=True)
        self.pipe, self.head, self.keep = pipe, head, keep
        self.data = bytearray()

    def run(self) -> None:
        """Read to the end of the pipe (or until it breaks)."""
        read = getattr(self.pipe, "read1", self.pipe.read)
        try:
            while chunk := read(65536):
                if self.head:
                    self.data += chunk[: max(0, self.head - len(self.data))]
                else:
                    self.data += chunk
                    del self.data[: max(0, len(self.data) - self.keep)]
        except (OSError, ValueError):
            pass
        finally:
            self.pipe.close()


def text(data: bytes | bytearray) -> str:
    """Output as text: undecodable bytes become U+FFFD, NULs are dropped."""
    return bytes(data).decode("utf-8", errors="replace").replace("\x00", "")


def read_answer(path: str) -> str | None:
    """The answer file's text: a regular file, opened without following a link; else ``None``."""
    data = _regular_bytes(path, MAX_ANSWER_BYTES)
    return None if data is None else text(data)


def _regular_bytes(path: str, limit: int) -> bytes | None:
    """A regular file's first ``limit`` bytes, opened without following a link; else ``None``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], limit
        while left > 0 and (chunk := os.read(fd, min(left, 65536))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_deliverables(directory: str) -> list[dict[str, str]]:
    """The files the agent left in ``{deliverables_dir}``: relative path and base64 bytes.

    Regular files only (links and devices are not followed), at most
    :data:`MAX_DELIVERABLES` of them and :data:`MAX_DELIVERABLE_BYTES` in all; what is over
    is left out (the host sees only what came back).
    """
    found: list[dict[str, str]] = []
    left = MAX_DELIVERABLE_BYTES
    for here, directories, files in os.walk(directory, followlinks=False):
        directories.sort()
        for name in sorted(files):
            if len(found) >= MAX_DELIVERABLES or left <= 0:
                return found
            path = os.path.join(here, name)
            data = _regular_bytes(path, left + 1)
            if data is None or len(data) > left:
                continue
            left -= len(data)
            relative = os.path.relpath(path, directory)
            found.append({"path": relative, "data": base64.b64encode(data).decode("ascii")})
    return found


def kill_the_rest(group: int, namespace: bool) -> None:
    """Kill what the agent left: every other process of the namespace, else its group."""
    try:
        if namespace:
            os.kill(-1, signal.SIGKILL)  # PID 1: every process of the namespace but this one
        else:
            os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
    if namespace:
        while True:  # reap them, so that none holds a pipe open
            try:
                if os.waitpid(-1, 0)[0] == 0:
                    break
            except ChildProcessError:
                break


def prepare(config: Mapping[str, Any]) -> None:
    """The scratch directory: ``tmp`` inside, the query file, owned by whom the agent runs as."""
    workdir = config["workdir"]
    os.makedirs(os.path.join(workdir, "tmp"), exist_ok=True)
    os.makedirs(os.path.join(workdir, DELIVERABLES), exist_ok=True)
    with open(os.path.join(workdir, "query.json"), "w", encoding="utf-8") as handle:
        json.dump(config["query"], handle, ensure_ascii=False, indent=1)
    if config["identity"] == "nobody":
        for here, directories, files in os.walk(workdir):
            for name in [here, *(os.path.join(here, n) for n in directories + files)]:
                os.chown(name, worker.NOBODY, worker.NOBODY)


def case_files(config: Mapping[str, Any]) -> dict[str, str]:
    """The query and answer files' paths, as the agent sees them."""
    workdir = config["workdir"]
    answer = os.path.join(workdir, config["answer_name"])
    return {
        "query_file": os.path.join(workdir, "query.json"),
        "answer_file": answer,
        "output_file": answer,
        "deliverables_dir": os.path.join(workdir, DELIVERABLES),
    }


def agent_argv(config: Mapping[str, Any], fds: tuple[int, ...] = ()) -> list[str]:
    """The child's command line: the agent's own, placeholders filled, or this file as child."""
    if config["mode"] == "command":
        values = {**config.get("values", {}), **case_files(config)}
        return [word.format(**values) for word in config["argv"]]
    return [sys.executable, "-I", os.path.abspath(__file__), "child", *map(str, fds)]


def agent_env(config: Mapping[str, Any]) -> dict[str, str]:
    """The agent's whole environment: the host's allow-list, and the case's own paths."""
    files = case_files(config)
    return {
        **config["env"],
        "HOME": config["workdir"],
        "TMPDIR": os.path.join(config["workdir"], "tmp"),
        "GTA_QUERY_FILE": files["query_file"],
        "GTA_ANSWER_FILE": files["answer_file"],
        "GTA_DELIVERABLES_DIR": files["deliverables_dir"],
    }


def relay(
    child_out: IO[bytes], child_in: IO[bytes], host: tuple[IO[bytes], IO[bytes]], lock: Any
) -> Message:
    """Pass a callable child's tool calls to the host (``host``: its in and out), and back.

    Returns the child's final ``{"result"}`` (or ``{"error"}``) frame, or ``{}`` if it sent none.
    """
    while True:
        try:
            message = worker.receive(child_out)
        except (ValueError, OSError, RecursionError):
            return {"error": "the agent's process wrote a malformed frame"}
        if message is None or not isinstance(message, dict):
            return {}
        if "call" in message:
            with lock:
                worker.send(host[1], {"call": message["call"]})
                reply = worker.receive(host[0])
            try:
                worker.send(child_in, reply or {"reply": "the harness is gone"})
            except OSError:
                return {}
        else:
            return message


class Forked:
    """A callable's process forked from this one (a warm sandbox's, where it is imported).

    What :func:`run_agent` uses of :class:`subprocess.Popen`: ``pid``, ``stdout``, ``stderr``
    and :meth:`wait`. The child confines itself as a command's ``preexec_fn`` does, gets the
    case's environment and scratch directory, and calls the already imported ``function``.
    """

    def __init__(
        self, config: Mapping[str, Any], function: Callable[..., Any], fds: tuple[int, ...]
    ) -> None:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child's side ends in os._exit
            os._exit(self._child(config, function, fds, out_w, err_w))
        os.close(out_w)
        os.close(err_w)
        self.pid = pid
        self.stdout: IO[bytes] = os.fdopen(out_r, "rb")
        self.stderr: IO[bytes] = os.fdopen(err_r, "rb")

    @staticmethod
    def _child(
        config: Mapping[str, Any],
        function: Callable[..., Any],
        fds: tuple[int, ...],
        out: int,
        err: int,
    ) -> int:
        """In the fork: stdio to the pipes, nothing else open but ``fds``, confined, called."""
        try:
            os.setsid()
            null = os.open(os.devnull, os.O_RDONLY)
            for source, target in ((null, 0), (out, 1), (err, 2)):
                os.dup2(source, target)
            low = 3
            for fd in sorted(set(fds)):
                os.closerange(low, fd)
                low = fd + 1
            os.closerange(low, os.sysconf("SC_OPEN_MAX"))
            confine(config)
            os.chdir(config["workdir"])
            os.environ.clear()
            os.environ.update(agent_env(config))
            called.child([str(fd) for fd in fds], function)
            return 0
        except BaseException:
            traceback.print_exc()
            return 1
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass

    def wait(self) -> int:
        """The callable's exit status (as ``subprocess`` reports one: ``-N`` for a signal)."""
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)


def run_agent(
    config: Mapping[str, Any],
    host: tuple[IO[bytes], IO[bytes]],
    listening: list[tuple[socket.socket, str]],
    function: Callable[..., Any] | None = None,
) -> Message:
    """Start the agent, wait for it, collect its answer: the ``done`` frame's content.

    The bridges' threads start once the agent's process is forked (``preexec_fn`` runs in the
    fork, where another thread may have held a lock); their sockets already listen. A callable
    already imported here (``function``, a warm sandbox's) is called in a fork of this process.
    """
    namespace = bool(config.get("pid_namespace"))
    prepare(config)
    callable_mode = config["mode"] != "command"
    pass_fds: tuple[int, ...] = ()
    if callable_mode:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        pass_fds = (to_child_r, from_child_w)
    started = time.monotonic()
    process: subprocess.Popen[bytes] | Forked
    if callable_mode and function is not None:
        process = Forked(config, function, pass_fds)
    else:
        process = subprocess.Popen(
            agent_argv(config, pass_fds),
            cwd=config["workdir"],
            env=agent_env(config),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=pass_fds,
            preexec_fn=lambda: confine(config),
        )
    for listener, path in listening:
        threading.Thread(target=_serve_bridge, args=(listener, path), daemon=True).start()
    final: Message = {}
    if callable_mode:
        for fd in pass_fds:
            os.close(fd)
        child_in = os.fdopen(to_child_w, "wb")
        child_out = os.fdopen(from_child_r, "rb")
        worker.send(child_in, {"spec": config["spec"], "query": config["query"]})
    assert process.stdout is not None
    assert process.stderr is not None
    out = Drain(process.stdout, head=MAX_ANSWER_BYTES)
    err = Drain(process.stderr, keep=STDERR_KEPT)
    out.start()
    err.start()
    if callable_mode:
        final = relay(child_out, child_in, host, threading.Lock())
    status = process.wait()
    duration = time.monotonic() - started
    kill_the_rest(process.pid, namespace)
    out.join(READER_JOIN_S)
    err.join(READER_JOIN_S)
    done: Message = {
        "exit_status": status,
        "duration": duration,
        "stdout": text(out.data),
        "stderr_tail": text(err.data),
    }
    if callable_mode:
        done["result"] = final
    else:
        done["answer_file"] = read_answer(os.path.join(config["workdir"], config["answer_name"]))
    done["deliverables"] = read_deliverables(os.path.join(config["workdir"], DELIVERABLES))
    return done


# -- the launcher ------------------------------------------------------------------------------


def serve_case(
    config: dict[str, Any],
    host_in: IO[bytes],
    host_out: IO[bytes],
    function: Callable[..., Any] | None = None,
) -> None:
    """Run one case as its sandbox's init and send the host its ``done`` frame.

    ``function``: the callable, where a warm sandbox imported it already.
    """
    worker.undumpable()
    if os.getpid() == 1:
        # As its namespace's init this process gets only the signals it handles: with none
        # handled (Python's own SIGINT handler removed), the agent cannot end it to turn its
        # case into the harness's error.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    config.setdefault("identity", identity(config))
    listening = []
    if config.get("bridges"):
        try:
            loopback_up()
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EEXIST):
                raise
        listening = open_bridges(config["bridges"])
    try:
        done = run_agent(config, (host_in, host_out), listening, function)
    except Exception as exc:  # the sandbox could not run the agent: the harness's failure
        done = {"broken": f"{type(exc).__name__}: {exc}"}
    worker.send(host_out, {"done": done})


def main(argv: list[str]) -> None:
    """``child`` mode, or the launcher: one case in, one ``done`` frame out."""
    if argv[1:2] == ["child"]:
        called.child(argv[2:])
        return
    config = worker.receive(sys.stdin.buffer)
    if config is not None:
        serve_case(config, sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main(sys.argv)
