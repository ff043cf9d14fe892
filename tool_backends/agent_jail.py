"""The agent under test's sandbox: one per case, built like model-written code's.

Registered under ``pytest_gta.agent_jails`` (:mod:`pytest_gta.jail` says what it must do).
Each case's agent runs under :mod:`tool_backends.agent_launcher` in a sandbox that shows the
same minimal read-only system as model-written code's (:func:`build_tree`: the system and the
interpreter's paths, no dataset, no package of this project, no checkout) plus the case's input
images and the agent's own files at their paths, a bounded scratch tmpfs, and a network of its
own whose only reachable ports are the case's MCP server and model proxy, bridged in through
Unix sockets (:class:`Bridges`). As the sandbox's PID 1 the launcher takes every process of the
case down with it. bubblewrap builds it where it works, else ``unshare`` (as root, or where
user namespaces work); where neither does, the agent runs as a plain process and
:attr:`AgentJail.isolation` lists what is not isolated.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import IO, Any
from urllib.parse import urlsplit

from pytest_gta import jail as registry
from pytest_gta import peers, process_guard
from pytest_gta.errors import GtaInfrastructureError, GtaUsageError
from pytest_gta.flags import OPT_AGENT_NETWORK, OPT_SANDBOX
from pytest_gta.jail import Isolation, Job, JobOutcome
from pytest_gta.vocabulary import SandboxMode
from tool_backends import agent_callable, agent_cases, agent_launcher, agent_probe, sandbox_worker
from tool_backends.agent_warm import CallableFailed, CaseInputs, WarmSandbox, WarmUnavailable
from tool_backends.sandbox_isolation import INSTALL_BUBBLEWRAP
from tool_backends.sandbox_machine import Machine, why_not
from tool_backends.sandbox_mounts import SCRATCH_IN_SANDBOX, bwrap_command, namespace_command
from tool_backends.sandbox_tree import Tree, build_tree, checkout, python_paths

#: Where the launcher, its sibling and the bridges' sockets appear inside the sandbox.
INSIDE = "/gta"
#: Bytes the agent's scratch directory may hold (a tmpfs: memory on the host).
SCRATCH_BYTES = 256 << 20
#: The agent's limits (``resource`` names): address space, processes, file size, open files.
LIMITS = {
    "RLIMIT_AS": 16 << 30,
    "RLIMIT_NPROC": 1024,
    "RLIMIT_FSIZE": SCRATCH_BYTES,
    "RLIMIT_NOFILE": 4096,
    "RLIMIT_CORE": 0,
}
#: Seconds between the launcher's SIGTERM and SIGKILL when the case's time is up.
GRACE_S = 2.0
#: Bytes of the launcher's stderr kept (where a broken sandbox says why).
STDERR_KEPT = 8 << 10

NETWORK_OPEN = f"network open to the host and beyond ({OPT_AGENT_NETWORK}=open)"
WARM = (
    "each case forked from the run's warm sandbox into user, mount, PID, network, IPC and UTS "
    "namespaces of its own"
)
FILES = "files your user can read stay readable (the dataset's answers included)"
PROCESSES = "your user's other processes (pytest's included) can be read and signalled"
LEFTOVERS = "processes that leave the agent's process group outlive the case"
NETWORK = "network (every port of the host and beyond)"
URLS = "the case's MCP and proxy URLs work for any local user who reads them"


def _view_guarantees(network: str) -> tuple[str, ...]:
    shown = (
        "read-only view of the system and Python only: no dataset, no pytest-gta package, no "
        "checkout, report, cache or other case",
        "the case's inputs at their own paths",
        f"scratch tmpfs of {SCRATCH_BYTES >> 20} MiB",
        "own PID namespace: nothing outlives the case, the harness cannot be signalled",
        "no environment but the case's",
        "bounded memory, processes, file size, output and time",
    )
    if network == "case":
        return (
            *shown,
            "network: the case's MCP server and model proxy only, through a socket bound in",
        )
    return shown


class Bridges:
    """Unix sockets in a private directory, each forwarding to one loopback port of the host.

    Each connection's loopback end is registered with :mod:`pytest_gta.peers` before it sends
    a byte, so the services can tell a sandbox's request from anyone else's.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._listeners: dict[int, socket.socket] = {}

    def socket_for(self, port: int) -> str:
        """The host path of the Unix socket that reaches ``port`` (listening from now on)."""
        with self._lock:
            if port not in self._listeners:
                path = self.directory / f"p{port}.sock"
                listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                listener.bind(str(path))
                # A case of the warm sandbox connects as itself (nobody, where pytest is root);
                # on the host the jail's private directory keeps everyone else out.
                os.chmod(path, 0o666)
                listener.listen(64)
                self._listeners[port] = listener
                threading.Thread(
                    target=self._accept, args=(listener, port), daemon=True, name="gta-bridge"
                ).start()
        return f"p{port}.sock"

    def _accept(self, listener: socket.socket, port: int) -> None:
        while True:
            try:
                inside, _ = listener.accept()
            except OSError:
                return
            try:
                outside = socket.create_connection(("127.0.0.1", port), timeout=10)
            except OSError:
                inside.close()
                continue
            outside.settimeout(None)
            local = outside.getsockname()[1]
            peers.trust(local, port)

            def done(local: int = local, port: int = port) -> None:
                peers.forget(local, port)

            agent_launcher.pair(inside, outside, done)

    def close(self) -> None:
        """Stop listening (open connections end with their sandboxes)."""
        with self._lock:
            for listener in self._listeners.values():
                listener.close()
            self._listeners.clear()


def shown_files(paths: Iterable[str], base: Tree) -> tuple[tuple[str, str], ...]:
    """Binds of ``paths`` at their own paths, but those the base tree already shows."""
    bound = [target for _, target in base.binds]
    out: list[tuple[str, str]] = []
    for path in paths:
        for target in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
            inside = any(target == b or target.startswith(b.rstrip("/") + "/") for b in bound)
            if not inside and os.path.exists(target) and target not in (o[1] for o in out):
                out.append((os.path.realpath(path), target))
    return tuple(out)


def _deliverables(frames: Any) -> list[tuple[str, bytes]]:
    """The launcher's ``deliverables`` frame decoded; anything malformed is left out."""
    out: list[tuple[str, bytes]] = []
    for item in frames if isinstance(frames, list) else ():
        path = item.get("path") if isinstance(item, dict) else None
        data = item.get("data") if isinstance(item, dict) else None
        if isinstance(path, str) and isinstance(data, str):
            try:
                out.append((path, base64.b64decode(data, validate=True)))
            except ValueError:
                continue
    return out


def with_binds(base: Tree, extra: Iterable[tuple[str, str]]) -> Tree:
    """``base`` and ``extra`` binds, the directories on their way made, parents first."""
    binds = [*base.binds, *extra]
    bound = {target for _, target in binds}
    directories = list(base.directories)
    for _, target in extra:
        for parent in reversed(Path(target).parents):
            name = str(parent)
            beneath = any(name.startswith(b.rstrip("/") + "/") for b in bound)
            if name != "/" and name not in directories and name not in bound and not beneath:
                directories.append(name)
    return replace(
        base,
        binds=tuple(sorted(binds, key=lambda b: b[1].count("/"))),
        directories=tuple(sorted(directories, key=lambda p: p.count("/"))),
    )


def with_directories(base: Tree, paths: Iterable[str]) -> Tree:
    """``base`` with ``paths`` present as directories (mount points for a case's inputs).

    A path the view shows already (inside a bound directory) is left as it is; one inside a
    hidden path is made in its tmpfs (``sandbox_mounts.made_in_hidden``); any other is made,
    with the directories on its way, on the sandbox's root.
    """
    bound = [target for _, target in base.binds]
    directories = list(base.directories)
    for path in paths:
        if any(path == h or path.startswith(h.rstrip("/") + "/") for h in base.hidden):
            if path not in directories and path not in base.hidden:
                directories.append(path)
            continue
        if any(path == b or path.startswith(b.rstrip("/") + "/") for b in bound):
            continue
        for name in [*(str(p) for p in reversed(Path(path).parents)), path]:
            if name != "/" and name not in directories and name not in bound:
                directories.append(name)
    return replace(base, directories=tuple(sorted(directories, key=lambda p: p.count("/"))))


def inside_path(module: ModuleType) -> str:
    """Where a program file of this package appears inside the agent's sandbox."""
    return f"{INSIDE}/{os.path.basename(module.__file__ or '')}"


def _callable(spec: Any) -> dict[str, Any]:
    """What a warm sandbox imports of a callable's spec (nothing for a command's)."""
    if not isinstance(spec, dict) or not (spec.get("file") or spec.get("module")):
        return {}
    keys = ("file", "module", "attr", "path", "task_fields", "show")
    return {key: spec[key] for key in keys if key in spec}


def program_files(argv: Iterable[str]) -> list[str]:
    """The agent's own files: words that name a file, and the virtualenv its program lives in.

    A virtualenv's ``bin/python`` is a link out of it, to the interpreter it was made from: the
    virtualenv is found from the link's own place (``pyvenv.cfg`` one level above ``bin``).
    """
    files: list[str] = []
    for index, word in enumerate(argv):
        candidate = shutil.which(word) if index == 0 and os.sep not in word else word
        if not candidate or not os.path.isfile(candidate):
            continue
        here = Path(os.path.abspath(candidate))
        venv = here.parent.parent
        if index == 0 and (venv / "pyvenv.cfg").is_file():
            files.append(str(venv))
            files += _base_prefix(venv / "pyvenv.cfg")
        else:
            files.append(str(here))
    return files


def _beneath_any(path: str, roots: Iterable[str]) -> bool:
    """Whether ``path`` is one of ``roots`` or lies under one (links resolved on both sides)."""
    real = os.path.realpath(path)
    for root in roots:
        top = os.path.realpath(root)
        if real == top or real.startswith(top.rstrip("/") + "/"):
            return True
    return False


def _base_prefix(config: Path) -> list[str]:
    """The prefix of the interpreter a virtualenv was made from (``home``'s parent)."""
    for line in config.read_text(errors="replace").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and os.path.isdir(value.strip()):
            return [str(Path(value.strip()).parent)]
    return []


class AgentJail:
    """Per-case sandboxes for the agent under test (see the module docstring)."""

    def __init__(
        self,
        *,
        hidden: tuple[str, ...] = (),
        network: str = "case",
        mode: SandboxMode = "auto",
        machine: Machine | None = None,
        warm: bool = True,
    ) -> None:
        self._machine = machine or Machine()
        self._network = network
        self._hidden = tuple(hidden)
        self._private = Path(tempfile.mkdtemp(prefix="gta-agent-jail-"))
        sockets = self._private / "sockets"
        sockets.mkdir()
        sockets.chmod(0o755)  # the sandbox shows this directory alone, to cases as nobody
        self._bridges = Bridges(sockets)
        self._trees: dict[tuple[str, ...], Tree] = {}
        #: What was tried and not used, and why (:attr:`Isolation.attempts`).
        self._attempts: list[str] = []
        self._warm: dict[str, WarmSandbox] = {}
        self._warm_lock = threading.Lock()
        #: Why cases get a sandbox of their own each (no warm sandbox), once known; ``warm``
        #: false (a benchmark's baseline) asks for that from the start.
        self._cold_why: str | None = None if warm else "not asked for"
        self._mechanism = self._choose(mode)
        if self._mechanism == "plain":
            # Code of pytest's own uid cannot then read pytest's environment or open its pipes.
            sandbox_worker.undumpable()

    # -- what this machine offers ------------------------------------------------------------
    def _base_tree(self, program: tuple[str, ...] = ()) -> Tree:
        """The view of the system, Python and the agent's ``program`` files, built once each.

        The program's directories (a virtualenv, the interpreter it was made from) are walked
        for datasets and this project's packages as Python's are, and those are hidden.
        """
        if program not in self._trees:
            python = python_paths()
            tree = build_tree((*python, *program), self._hidden, checkout())
            modules = (agent_launcher, agent_callable, sandbox_worker, agent_probe, agent_cases)
            own = (
                *((os.path.abspath(m.__file__ or ""), inside_path(m)) for m in modules),
                (str(self._bridges.directory), f"{INSIDE}/sockets"),
            )
            self._trees[program] = with_binds(tree, own)
        return self._trees[program]

    def _prefix(self, mechanism: str, tree: Tree, host: str, *, warm: bool = False) -> list[str]:
        """The sandbox's command line up to its program (``warm``: the run's warm sandbox)."""
        if mechanism == "bubblewrap":
            words = bwrap_command(tree, SCRATCH_IN_SANDBOX, self._machine, SCRATCH_BYTES)
            if warm:
                # Its template gives them up itself, after unmounting /proc's covers; where
                # pytest is not root, bubblewrap keeps them only in a user namespace.
                user = [] if self._machine.euid() == 0 else ["--unshare-user"]
                words[1:1] = [*user, "--cap-add", "ALL"]
            return [w for w in words if not (self._network == "open" and w == "--unshare-net")]
        if mechanism == "namespaces":
            words = namespace_command(tree, host, self._machine, SCRATCH_BYTES)
            return [w for w in words if not (self._network == "open" and w == "--net")]
        return []

    def _choose(self, mode: SandboxMode) -> str:
        """The first mechanism that runs Python in the agents' view; why each other failed."""
        tree = self._base_tree()
        python = sys.executable
        if mode != "rlimit":
            if self._machine.which("bwrap") is None:
                self._attempts.append(f"bubblewrap: not on PATH; {INSTALL_BUBBLEWRAP}")
            else:
                ran = self._machine.runs([*self._prefix("bubblewrap", tree, ""), python, "-c", ""])
                if ran:
                    return "bubblewrap"
                self._attempts.append(f"bubblewrap: {why_not(ran)}")
        if mode == "bubblewrap":
            raise GtaUsageError(
                f"{OPT_SANDBOX}=bubblewrap: bubblewrap cannot run the agent's sandbox here "
                f"({'; '.join(self._attempts)}); {INSTALL_BUBBLEWRAP}, or pass "
                f"{OPT_SANDBOX}=rlimit to accept the fallback"
            )
        if self._machine.which("unshare") is None:
            self._attempts.append("namespaces: unshare not on PATH (util-linux)")
            return "plain"
        with tempfile.TemporaryDirectory(prefix="gta-agent-probe-") as host:
            command = [*self._prefix("namespaces", tree, host), python, "-c", ""]
            ran = self._machine.runs(command)
        if ran:
            return "namespaces"
        self._attempts.append(f"namespaces (unshare): {why_not(ran)}")
        return "plain"

    @property
    def isolation(self) -> Isolation:
        """What holds on this machine, and what does not."""
        attempts = tuple(self._attempts)
        if self._mechanism == "plain":
            gaps: tuple[str, ...] = (FILES, PROCESSES, LEFTOVERS, NETWORK, URLS)
            shown = ("no environment but the case's",)
            return Isolation("plain", shown, gaps, self._network, attempts)
        gaps = (NETWORK_OPEN,) if self._network == "open" else ()
        guarantees = _view_guarantees(self._network)
        if self._warm and self._cold_why is None:
            guarantees = (*guarantees, WARM)
        return Isolation(self._mechanism, guarantees, gaps, self._network, attempts)

    @property
    def bridged(self) -> bool:
        """Whether the services are reached through the sandbox's sockets only."""
        return self._mechanism != "plain" and self._network == "case"

    # -- one job -------------------------------------------------------------------------------
    def _config(self, job: Job, workdir: str) -> dict[str, Any]:
        sandboxed = self._mechanism != "plain"
        bridges: list[dict[str, Any]] = []
        if self.bridged:
            for url in job.services.values():
                port = urlsplit(url).port
                if port is not None and port not in (b["port"] for b in bridges):
                    name = self._bridges.socket_for(port)
                    bridges.append({"port": port, "socket": f"{INSIDE}/sockets/{name}"})
        spec = dict(job.spec)
        if job.kind == "probe":
            spec = {"probe": spec, **_callable(job.agent.get("spec"))}
        return {
            "mode": job.kind if job.kind == "command" else "callable",
            "argv": list(job.argv),
            "spec": spec,
            "values": dict(job.values),
            "env": dict(job.env),
            "query": dict(job.query),
            "workdir": workdir,
            "answer_name": job.answer_name,
            "bridges": bridges,
            "limits": LIMITS,
            "confine": sandboxed,
            "pid_namespace": sandboxed,
        }

    def _program(self, job: Job) -> tuple[str, ...]:
        """The agent's own files: the command's, the callable's (a probe's: its agent's)."""
        argv = job.agent.get("argv", ()) if job.kind == "probe" else job.argv
        spec = job.agent.get("spec") if job.kind == "probe" else job.spec
        if argv:
            program = program_files(argv)
        else:
            program = list((spec or {}).get("show", ()))
        # A word of the command naming a hidden file (the dataset's answers, a report) is not
        # the agent's own file: it stays hidden (the case's inputs come through ``job.show``).
        return tuple(p for p in program if not _beneath_any(p, self._hidden))

    def run(self, job: Job) -> JobOutcome:
        """Run ``job`` in a sandbox of its own; everything it started is gone when this returns.

        A fork of the run's warm sandbox where this machine allows it (and the case's inputs
        lie where it can lay them out), else a sandbox started for the case alone.
        """
        if self._mechanism != "plain":
            spec = job.agent.get("spec") if job.kind == "probe" else job.spec
            try:
                warm = self._warm_for(self._program(job), _callable(spec) or None)
            except CallableFailed as exc:  # the agent's module does not import: its error
                return JobOutcome(None, 0.0, result={"error": exc.record})
            inputs = None if warm is None else CaseInputs.place(job.show, self._input_roots())
            if warm is not None and inputs is not None:
                try:
                    return self._run_warm(warm, job, inputs)
                except WarmUnavailable as exc:
                    self._go_cold(f"a case could not be forked: {exc}")
        host = Path(tempfile.mkdtemp(prefix="gta-agent-case-", dir=self._private))
        try:
            return self._run(job, host)
        finally:
            sandbox_worker.remove_tree(str(host))

    # -- the warm sandbox: one per run, a fork per case ------------------------------------------
    def _input_roots(self) -> tuple[str, ...]:
        """Where a case's inputs may lie: the hidden datasets, laid over by the case's tmpfs.

        Not one that holds a path the view shows (a virtualenv inside the dataset's directory):
        the case's tmpfs over it would hide that too.
        """
        bound = [target for _, target in self._base_tree().binds]
        roots = [os.path.abspath(h) for h in self._hidden if os.path.isdir(h)]
        return tuple(r for r in roots if not any(t.startswith(r.rstrip("/") + "/") for t in bound))

    def _warm_for(
        self, program: tuple[str, ...], spec: dict[str, Any] | None
    ) -> WarmSandbox | None:
        """The run's warm sandbox for this agent, started on first need (``None``: none here).

        Raises:
            CallableFailed: the agent's callable does not import.
        """
        key = json.dumps([program, spec], sort_keys=True)
        with self._warm_lock:
            found = self._warm.get(key)
            if found is not None and found.alive:
                return found
            if self._cold_why is not None:
                return None
            tree = self._base_tree(program)
            tree = with_directories(tree, self._input_roots())
            with tempfile.TemporaryDirectory(prefix="gta-agent-warm-", dir=self._private) as host:
                command = [
                    *self._prefix(self._mechanism, tree, host, warm=True),
                    sys.executable,
                    "-I",
                    inside_path(agent_cases),
                ]
                try:
                    started = WarmSandbox(
                        command,
                        spec=spec,
                        scratch=SCRATCH_IN_SANDBOX,
                        scratch_bytes=SCRATCH_BYTES,
                        network=self._network == "case",
                        grace_s=GRACE_S,
                    )
                except WarmUnavailable as exc:
                    self._go_cold(str(exc))
                    return None
            if found is not None:
                found.close()
            if spec and not started.preloaded:
                self._attempts.append(f"warm sandbox: {started.note}")
            self._warm[key] = started
            return started

    def _go_cold(self, why: str) -> None:
        """From now on each case gets a sandbox of its own (slower, as isolated); say why."""
        if self._cold_why is None:
            self._cold_why = why
            self._attempts.append(f"warm sandbox: {why}; each case gets a sandbox of its own")

    def _run_warm(self, warm: WarmSandbox, job: Job, inputs: CaseInputs) -> JobOutcome:
        config = self._config(job, SCRATCH_IN_SANDBOX)
        started = time.monotonic()
        done, timed_out = warm.run(
            config, inputs, job.timeout, lambda into, out: self._converse(into, out, job)
        )
        return self._outcome(done, time.monotonic() - started, timed_out, SCRATCH_IN_SANDBOX, "")

    # -- a sandbox per case -----------------------------------------------------------------------
    def _run(self, job: Job, host: Path) -> JobOutcome:
        sandboxed = self._mechanism != "plain"
        workdir = SCRATCH_IN_SANDBOX if sandboxed else str(host / "work")
        if not sandboxed:
            (host / "work").mkdir()
        launcher = inside_path(agent_launcher) if sandboxed else agent_launcher.__file__
        config = self._config(job, workdir)
        base = self._base_tree(self._program(job)) if sandboxed else self._base_tree()
        tree = with_binds(base, shown_files(job.show, base)) if sandboxed else base
        mount_point = host / "root"
        mount_point.mkdir()
        guard = [sys.executable, "-I", process_guard.__file__, str(os.getpid()), str(GRACE_S)]
        command = [
            *guard,
            "--",
            *self._prefix(self._mechanism, tree, str(mount_point)),
            sys.executable,
            "-I",
            launcher,
        ]
        started = time.monotonic()
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
        )
        registry.started(process.pid)
        timed_out = threading.Event()

        def expire() -> None:
            timed_out.set()
            _kill(process.pid, signal.SIGTERM)
            time.sleep(GRACE_S)
            _kill(process.pid, signal.SIGKILL)

        timer = threading.Timer(job.timeout, expire)
        timer.daemon = True
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        err = agent_launcher.Drain(process.stderr, keep=STDERR_KEPT)
        err.start()
        done: dict[str, Any] | None = None
        timer.start()
        try:
            sandbox_worker.send(process.stdin, config)
            done = self._converse(process.stdout, process.stdin, job)
        except (OSError, ValueError):
            done = None
        finally:
            timer.cancel()
            _kill(process.pid, signal.SIGKILL)
            process.wait()
            registry.ended(process.pid)
            err.join(agent_launcher.READER_JOIN_S)
            for pipe in (process.stdin, process.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
        duration = time.monotonic() - started
        said = agent_launcher.text(err.data).strip()[-500:]
        return self._outcome(done, duration, timed_out.is_set(), workdir, said)

    def _outcome(
        self, done: dict[str, Any] | None, duration: float, timed_out: bool, workdir: str, said: str
    ) -> JobOutcome:
        """What the host reads of a case's ``done`` frame.

        Raises:
            GtaInfrastructureError: the sandbox broke (not the agent): ``said``, its stderr.
        """
        if timed_out:
            return JobOutcome(None, duration, timed_out=True, workdir=workdir)
        if done is None or "broken" in done:
            why = (done or {}).get("broken") or said
            raise GtaInfrastructureError(
                f"the agent's sandbox ({self._mechanism}) failed: {why or 'it exited early'}"
            )
        return JobOutcome(
            exit_status=done.get("exit_status"),
            duration=float(done.get("duration") or duration),
            stdout=str(done.get("stdout") or ""),
            stderr_tail=str(done.get("stderr_tail") or ""),
            answer_file=done.get("answer_file"),
            result=done.get("result") or {},
            workdir=workdir,
            deliverables=_deliverables(done.get("deliverables")),
        )

    def _converse(self, host_in: IO[bytes], host_out: IO[bytes], job: Job) -> dict[str, Any] | None:
        """Answer the case's tool calls until it is done; its ``done`` frame."""
        while True:
            message = sandbox_worker.receive(host_in)
            if not isinstance(message, dict):
                return None
            if "done" in message:
                done = message["done"]
                return done if isinstance(done, dict) else None
            call = message.get("call")
            reply = "no tools in this run"
            if isinstance(call, dict) and job.on_call is not None:
                reply = job.on_call(str(call.get("name")), call.get("arguments"))
            sandbox_worker.send(host_out, {"reply": reply})

    def close(self) -> None:
        """Stop the warm sandboxes and the bridges, and remove the private directory."""
        with self._warm_lock:
            for warm in self._warm.values():
                warm.close()
            self._warm.clear()
        self._bridges.close()
        shutil.rmtree(self._private, ignore_errors=True)


def _kill(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass


def make_jail(*, hidden: tuple[str, ...], network: str, mode: SandboxMode = "auto") -> AgentJail:
    """The ``sandbox`` entry point (:data:`pytest_gta.jail.ENTRY_POINT_GROUP`)."""
    return AgentJail(hidden=hidden, network=network, mode=mode)
