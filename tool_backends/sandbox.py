"""A sandbox for model-written code: a warm worker process that forks one child per call.

Solver and Plot run Python the model wrote, and the Calculator evaluates an expression the model
wrote; none of it may run in the pytest process, where a ``while True`` would hang the run, a
``'a' * 10**10`` would take the machine down and ``os.environ`` holds the user's API keys. Each
call therefore runs in a child process with:

* an environment that holds nothing but ``PATH``, ``LANG``, ``HOME`` (the scratch directory) and
  ``MPLCONFIGDIR`` (:func:`~tool_backends.sandbox_tree.sandbox_environment`), whichever sandbox
  runs it;
* a wall-clock deadline, after which the child's whole process group is killed and, inside a
  PID namespace, every process the call left behind (a double fork with ``setsid`` included);
* ``RLIMIT_CPU``, ``RLIMIT_AS`` (memory on top of what the warm worker already holds),
  ``RLIMIT_FSIZE`` and ``RLIMIT_NPROC`` (so a fork bomb stops at a handful of processes);
* a non-root uid of the calls' own when the worker runs as root
  (``sandbox_worker.CALL_UID``), since the kernel never applies ``RLIMIT_NPROC`` to root.

What else isolates it depends on the machine (:meth:`Sandbox.isolation`, ``--gta-sandbox``):

* ``bubblewrap`` (Debian's ``bwrap``): no network, its own PID/IPC/UTS namespaces, and a
  filesystem that shows only the system and Python paths, read-only, plus a tmpfs scratch
  directory as the only writable place. Python may live anywhere, ``/tmp`` included.
* ``rlimit`` as root without bubblewrap: the worker starts under ``unshare`` in private mount,
  PID and network namespaces, with fresh tmpfs over every world-writable directory (``/tmp``,
  ``/var/tmp``, ``/run/lock``, ``/dev/shm``) and the root filesystem remounted read-only; the
  rest of the filesystem stays readable (but not writable by the calls' uid).
* ``rlimit`` otherwise: a plain subprocess with the limits above, in a private scratch
  directory, with no network when ``unshare -rn`` works. Files stay readable and world-writable
  directories writable, and a process that escapes the call's process group survives the call:
  :attr:`Isolation.gaps` says so, and the terminal header shows it.

Importing SymPy and Matplotlib takes over a second, so the worker
(:mod:`tool_backends.sandbox_worker`) imports them once and forks a child per call (a "zygote");
a call then costs a fork and the user code. A process keeps a small pool of such workers
(:class:`SandboxPool`, :meth:`Sandbox.pool`): up to ``pool_size()`` of them (the usable cores,
at most ``MAX_WORKERS``; ``PYTEST_GTA_SANDBOX_WORKERS`` overrides it), so that episodes run in
threads (``--gta-concurrency``) compute at once instead of queueing behind one worker. The first
call starts one worker; another starts only when a call finds every worker busy. Each worker
serves one call at a time, is restarted if it dies, and a call whose worker stops answering
stops that worker only. A worker that does not start is an infrastructure failure (the case is
an *error*), never the model's mistake.

Calls running at once are as isolated from each other as from the host: each has its own
child, scratch directory and limits, and every worker its own namespaces. One limit is shared:
the kernel counts ``RLIMIT_NPROC`` per user, so calls that run at the same moment (in this
process's workers or in other xdist workers) as the same uid share its process allowance, and
a fork bomb in one can make a concurrent call's own ``fork`` fail (an error that call's model
sees); it never hangs or kills the other call.

This module is the public side: :class:`Sandbox` holds all a process keeps about its sandbox
(the mode, the probes, the tree, the pool), :func:`default_sandbox` is the process's own. The
parts, one job each: :mod:`~tool_backends.sandbox_tree` (what code sees: its environment and
the minimal read-only tree, and the paths Landlock allows), :mod:`~tool_backends.sandbox_mounts`
(the bubblewrap and ``unshare`` command lines that show the tree),
:mod:`~tool_backends.sandbox_machine` (the questions asked of the machine),
:mod:`~tool_backends.sandbox_isolation` (choosing the isolation, its guarantees and gaps) and
:mod:`~tool_backends.sandbox_pool` (starting the workers, their pipe protocol, the pool).
"""

from __future__ import annotations

import atexit
import os
import subprocess
import threading
from collections.abc import Iterable
from pathlib import Path

from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_SANDBOX
from pytest_gta.vocabulary import SANDBOX_MODES, SandboxMode
from tool_backends import sandbox_worker
from tool_backends.sandbox_isolation import Isolation, SandboxKind, choose
from tool_backends.sandbox_machine import Machine
from tool_backends.sandbox_pool import (
    DEFAULT_MEMORY_BYTES,
    DEFAULT_TIMEOUT_S,
    CallKind,
    Launcher,
    Limits,
    SandboxPool,
    SandboxResult,
    SandboxWorker,
    pool_size,
)
from tool_backends.sandbox_tree import Tree, build_tree, checkout, landlock_paths, python_paths

__all__ = [
    "Isolation",
    "Limits",
    "Machine",
    "Sandbox",
    "SandboxPool",
    "SandboxResult",
    "SandboxWorker",
    "default_sandbox",
    "use_sandbox",
]


class Sandbox:
    """Everything one process keeps about its sandbox: the mode, the tree, the probes, the pool.

    Production code uses the one :func:`default_sandbox`, which the local backend configures
    from ``--gta-sandbox``; tests construct their own, with the mode, the machine
    (:class:`Machine`: what it has and answers), the limits or the Python paths they want.
    What is probed is probed once per instance: the Python paths and the :class:`Tree` (again
    after :meth:`hide`), and the isolation of each mode.
    """

    def __init__(
        self,
        mode: SandboxMode = "auto",
        *,
        hidden: tuple[str | os.PathLike[str], ...] = (),
        max_workers: int | None = None,
        limits: Limits | None = None,
        machine: Machine | None = None,
        python: tuple[str, ...] | None = None,
    ) -> None:
        """A sandbox that starts nothing until it is asked to.

        Args:
            mode: ``--gta-sandbox``: ``auto``, ``bubblewrap`` or ``rlimit``.
            hidden: Paths to hide from model code too (see :meth:`hide`).
            max_workers: The most warm workers its pool keeps (default: :func:`pool_size`).
            limits: The limits of every call.
            machine: The machine to probe and run on (default: this one).
            python: The interpreter's paths to show (default: probed, see
                :func:`~tool_backends.sandbox_tree.python_paths`).

        Raises:
            GtaUsageError: ``mode`` is none of the three.
        """
        self._mode = _checked(mode)
        self.limits = limits or Limits()
        self.machine = machine or Machine()
        self.max_workers = max_workers
        self._python = python
        self._hidden: list[str] = []
        self._tree: Tree | None = None
        self._tree_lock = threading.Lock()
        self._isolations: dict[str, Isolation] = {}
        self._isolation_lock = threading.Lock()
        self._pool: SandboxPool | None = None
        self._pool_lock = threading.Lock()
        self._launcher = Launcher()
        self.hide(*hidden)

    @property
    def mode(self) -> SandboxMode:
        """The ``--gta-sandbox`` choice (set by :meth:`configure`)."""
        return self._mode

    def hide(self, *paths: str | os.PathLike[str]) -> None:
        """Hide ``paths`` from model-written code too, wherever the sandbox's view would show them.

        The local backend hides the run's dataset this way: the view shows only the system and
        Python paths, so this matters where the dataset lives inside one of them. Workers that
        start from now on see the new view.
        """
        with self._tree_lock:
            for path in paths:
                real = os.path.realpath(path)
                if real not in self._hidden:
                    self._hidden.append(real)
            self._tree = None

    def python_paths(self) -> tuple[str, ...]:
        """The interpreter's paths the view shows (probed on first use)."""
        with self._tree_lock:
            if self._python is None:
                self._python = python_paths()
            return self._python

    def tree(self) -> Tree:
        """The view of the filesystem model code gets (built on first use, and after a hide)."""
        python = self.python_paths()
        with self._tree_lock:
            if self._tree is None:
                self._tree = build_tree(python, self._hidden, checkout())
            return self._tree

    def landlock_paths(self) -> tuple[str, ...]:
        """The tree's paths on the host, for calls confined with Landlock."""
        return landlock_paths(self.tree())

    def isolation(self, mode: SandboxMode | None = None) -> Isolation:
        """The isolation model-written code gets here in ``mode`` (default: :attr:`mode`).

        Probed once per mode.

        Raises:
            GtaUsageError: ``bubblewrap`` was asked for and cannot run here.
        """
        mode = mode or self._mode
        with self._isolation_lock:
            found = self._isolations.get(mode)
            if found is None:
                found = choose(
                    mode, self.machine, self.tree, self.python_paths(), self.limits.scratch_bytes
                )
                self._isolations[mode] = found
            return found

    def kind(self) -> SandboxKind:
        """Which sandbox runs model code here: ``"bubblewrap"`` or ``"rlimit"``."""
        return self.isolation().kind

    def configure(self, mode: SandboxMode) -> Isolation:
        """Choose the sandbox's mode (``--gta-sandbox``) and check it can run.

        Raises:
            GtaUsageError: ``bubblewrap`` was asked for and cannot run here, saying how to get
                it, or ``PYTEST_GTA_SANDBOX_WORKERS`` is unusable.
        """
        mode = _checked(mode)
        if self.max_workers is None:
            pool_size()  # a bad PYTEST_GTA_SANDBOX_WORKERS is a usage error now, not in a case
        self._mode = mode
        chosen = self.isolation(mode)
        if not chosen.pid_namespace:
            # Model code runs as this process's uid and sees its pid: at least its environment
            # (the user's API keys) and its pipes stay closed to it.
            sandbox_worker.undumpable()
        return chosen

    def launch(self, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start a worker process (from a thread that outlives its caller's: :class:`Launcher`).

        Raises:
            OSError: the program could not be run.
        """
        return self._launcher.launch(command, env)

    def pool(self) -> SandboxPool:
        """This sandbox's pool of warm workers, created on first use.

        Raises:
            GtaUsageError: ``PYTEST_GTA_SANDBOX_WORKERS`` is unusable.
        """
        with self._pool_lock:
            if self._pool is None:
                self._pool = SandboxPool(self, self.max_workers)
            return self._pool

    def run(
        self,
        kind: CallKind,
        code: str,
        timeout: float = DEFAULT_TIMEOUT_S,
        memory: int = DEFAULT_MEMORY_BYTES,
    ) -> SandboxResult:
        """Run one call on the pool (see :meth:`SandboxWorker.run`).

        Raises:
            GtaToolError: the code raised or hit a limit.
            GtaInfrastructureError: its worker did not start or stopped answering.
        """
        return self.pool().run(kind, code, timeout, memory)

    def close(self) -> None:
        """Stop every worker of the pool (later calls start new ones)."""
        with self._pool_lock:
            pool = self._pool
        if pool is not None:
            pool.close()
        self._launcher.close()


def _checked(mode: str) -> SandboxMode:
    for known in SANDBOX_MODES:
        if mode == known:
            return known
    raise GtaUsageError(f"{OPT_SANDBOX}={mode}: choose auto, bubblewrap or rlimit")


_DEFAULT: Sandbox | None = None
_DEFAULT_LOCK = threading.Lock()


def default_sandbox() -> Sandbox:
    """The process's sandbox, which the code tools run in: created on first use (``auto``).

    Its workers are stopped when the process exits.
    """
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = Sandbox()
            atexit.register(_DEFAULT.close)
        return _DEFAULT


def use_sandbox(sandbox: Sandbox) -> None:
    """Make ``sandbox`` the process's sandbox from now on (the one it replaces is closed).

    For a conftest that describes another machine (``Sandbox(machine=Machine(...))``) before
    the run configures the sandbox.
    """
    global _DEFAULT
    with _DEFAULT_LOCK:
        previous, _DEFAULT = _DEFAULT, sandbox
    atexit.register(sandbox.close)
    if previous is not None and previous is not sandbox:
        previous.close()


def configured_sandbox(mode: SandboxMode, hidden: tuple[Path, ...]) -> Isolation:
    """The process's sandbox set up for a backend: ``hidden`` kept out, ``mode`` probed now.

    The run's dataset stays out of the sandbox's view even where it lies under a path the view
    shows (a dataset installed inside the Python prefix). Probed at start-up, so
    ``--gta-sandbox=bubblewrap`` without bubblewrap stops the session before any call fails.
    """
    code_sandbox = default_sandbox()
    code_sandbox.hide(*hidden)
    return code_sandbox.configure(mode)


def describe_backend(tools: Iterable[str], isolation: Isolation | None) -> dict[str, object]:
    """For the report: the tools a backend serves and how what it runs is isolated."""
    info: dict[str, object] = {"tools": sorted(tools)}
    if isolation is not None:
        info["sandbox"] = isolation.kind
        info["isolation"] = isolation.describe()
    return info
