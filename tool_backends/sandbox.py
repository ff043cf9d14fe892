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

Importing SymPy and Matplotlib takes over a second, so the worker
(:mod:`tool_backends.sandbox_worker`) imports them once and forks a child per call (a "zygote");
a call then costs a fork and the user code. A process keeps a small pool of such workers
(:class:`SandboxPool`, :func:`worker`): up to :func:`pool_size` of them (the usable cores, at
most :data:`MAX_WORKERS`; ``PYTEST_GTA_SANDBOX_WORKERS`` overrides it), so that episodes run in
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
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pytest_gta.errors import GtaInfrastructureError, GtaToolError, GtaUsageError
from pytest_gta.vocabulary import SANDBOX_MODES, SandboxMode
from tool_backends import sandbox_worker

SandboxKind = Literal["bubblewrap", "rlimit"]
#: What the host reads from a worker whose pipe carried something that is no frame of its own
#: (no reply the worker sends looks like it, so the call stops that worker too).
MALFORMED = {"error": sandbox_worker.FORGED, "on_the_workers_pipe": True}
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
#: Most warm workers a process keeps. Each holds SymPy and Matplotlib (about 100 MB), and
#: xdist multiplies them by its worker count, while model-written code is rarely the slow part
#: of an episode: a few workers take the overlap of concurrent episodes' calls.
MAX_WORKERS = 4
#: Environment variable that sets the pool's size instead (a whole number, 1 or more).
WORKERS_ENV = "PYTEST_GTA_SANDBOX_WORKERS"

SCRATCH_IN_SANDBOX = "/scratch"
#: Bytes of scratch space one worker's calls may fill: the size of its scratch tmpfs (where
#: there is no tmpfs, the most a call's directory may hold before the call is stopped). It is
#: memory on the host, so it is kept well inside a call's memory limit, and each call's
#: directory is removed when the call ends.
SCRATCH_BYTES = 64 << 20
#: Size of the other tmpfs mounts (read-only, empty), which need none.
SMALL_TMPFS_BYTES = 64 << 10
#: PATH inside the sandbox: the system's, never the user's (which may name their own tools).
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


@functools.cache
def worker_source() -> str:
    """The text of :mod:`tool_backends.sandbox_worker`, which the worker runs as ``python -I -c``.

    Its text, not ``-m``: the sandbox shows only the system and Python paths, which need not
    hold this package (an editable install lives in a checkout the sandbox does not mount), so
    the worker must need nothing but the standard library and the file's own text.
    """
    return Path(sandbox_worker.__file__).read_text(encoding="utf-8")


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
    """What the worker's interpreter needs, and nothing more: the files and directories shown.

    The interpreter's own directory, ``pyvenv.cfg`` (without it a virtualenv's Python forgets
    its packages), the shared ``libpython`` it links, and the import path of ``python -I``
    itself (the standard library, ``lib-dynload``, site-packages; a virtualenv anywhere,
    ``/tmp`` included, and paths its ``.pth`` files add under a prefix or a ``site-packages``).
    Not the whole prefix and not a checkout on ``sys.path`` (an editable install): the worker
    imports nothing from it, and model code has no business reading it.
    """
    executable = os.path.abspath(sys.executable)
    wanted = [os.path.dirname(os.path.realpath(executable)), os.path.dirname(executable)]
    for home in (sys.prefix, os.path.dirname(os.path.dirname(executable))):
        wanted.append(os.path.join(home, "pyvenv.cfg"))
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir and sysconfig.get_config_var("Py_ENABLE_SHARED"):
        for name in ("LDLIBRARY", "INSTSONAME"):
            library = sysconfig.get_config_var(name)
            if library:
                wanted.append(os.path.join(libdir, library))
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
    found: list[str] = []
    for path in wanted:
        for candidate in dict.fromkeys((os.path.realpath(path), os.path.abspath(path))):
            if os.path.exists(candidate) and candidate not in found:
                found.append(candidate)
    return tuple(found)


#: The system's directories every program needs (linked as they are on the host when links).
SYSTEM_DIRECTORIES = ("/usr", "/etc")
SYSTEM_LINKS = ("/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32")
#: Top-level names of this project's own packages: an installed copy holds the bundled sample
#: (``pytest_gta/_sample``, reference answers included) and nothing a call needs.
OWN_PACKAGES = ("pytest_gta", "tool_backends")
#: Device nodes shown to a call (the namespace fallback; bubblewrap's ``--dev`` has the same).
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
#: Paths hidden besides those found (``--gta-data``'s dataset, the checkout): see :func:`hide`.
_HIDDEN_EXTRA: list[str] = []


def hide(*paths: str | os.PathLike[str]) -> None:
    """Hide ``paths`` from model-written code too, wherever the sandbox's view would show them.

    The local backend hides the run's dataset this way: the view shows only the system and
    Python paths, so this matters where the dataset lives inside one of them.
    """
    for path in paths:
        real = os.path.realpath(path)
        if real not in _HIDDEN_EXTRA:
            _HIDDEN_EXTRA.append(real)
    _tree.cache_clear()


def _checkout() -> str | None:
    """This project's checkout, when it runs from one (an editable install)."""
    root = Path(__file__).resolve().parents[1]
    return str(root) if (root / "pyproject.toml").is_file() else None


def _datasets_under(directory: str) -> list[str]:
    """Every directory under ``directory`` that holds a GTA ``dataset.json`` (and the project).

    Walked once per process (site-packages: about 0.2 s for 100,000 files).
    """
    found = []
    for here, subdirectories, files in os.walk(directory):
        if "dataset.json" in files:
            found.append(here)
            subdirectories[:] = []
            continue
        if here == directory or here.endswith(("site-packages", "dist-packages")):
            found += [os.path.join(here, n) for n in subdirectories if n in OWN_PACKAGES]
            subdirectories[:] = [n for n in subdirectories if n not in OWN_PACKAGES]
    return found


@dataclass(frozen=True)
class Tree:
    """The filesystem model-written code sees, in every sandbox that can build one.

    Only the system directories and what the interpreter needs, read-only; no dataset (the
    run's, the bundled sample's installed copy, any other under those paths), no checkout, no
    home directory. Each directory on the way to a bound path is made ``0755``, so ``nobody``
    reaches a Python that lives under a ``0700`` home.
    """

    #: ``(path on the host, path inside)``, parents before children; directories and files.
    binds: tuple[tuple[str, str], ...]
    #: ``(link text, path inside)``: ``/bin`` and friends where the host links them.
    links: tuple[tuple[str, str], ...]
    #: Directories made on the way to the binds, parents first.
    directories: tuple[str, ...]
    #: Paths inside the binds covered with an empty read-only tmpfs.
    hidden: tuple[str, ...]


@functools.cache
def _tree() -> Tree:
    links = []
    wanted = list(SYSTEM_DIRECTORIES)
    for name in SYSTEM_LINKS:
        if os.path.islink(name):
            links.append((os.readlink(name), name))
        elif os.path.isdir(name):
            wanted.append(name)
    python = python_paths()
    binds: list[tuple[str, str]] = []
    for path in [*wanted, *python]:
        real = os.path.realpath(path)
        if not os.path.exists(real):
            continue
        for target in dict.fromkeys((real, os.path.abspath(path))):
            if target not in (b[1] for b in binds):
                binds.append((real, target))
    parents: list[str] = []
    for _, target in binds:
        for parent in reversed(Path(target).parents):
            name = str(parent)
            if name != "/" and name not in parents:
                parents.append(name)
    bound = [t for _, t in binds]
    candidates = [h for p in python if os.path.isdir(p) for h in _datasets_under(p)]
    checkout = _checkout()
    candidates += [*_HIDDEN_EXTRA, *([checkout] if checkout else [])]
    hidden = []
    for path in dict.fromkeys(candidates):
        inside = any(path.startswith(t.rstrip("/") + "/") for t in bound)
        # A bound path inside it (a virtualenv in the checkout) is shown alone anyway.
        holds = any(t == path or t.startswith(path.rstrip("/") + "/") for t in bound)
        if inside and not holds and os.path.isdir(path):
            hidden.append(path)
    return Tree(
        tuple(sorted(binds, key=lambda b: b[1].count("/"))),
        tuple(links),
        tuple(sorted((p for p in parents if p not in bound), key=lambda p: p.count("/"))),
        tuple(sorted(hidden)),
    )


def _bwrap_command(scratch: str) -> list[str]:
    """The bubblewrap prefix: the :class:`Tree` read-only, a bounded tmpfs scratch, no network.

    ``/tmp`` and ``/dev/shm`` are empty and read-only; the scratch directory, a tmpfs of
    :data:`SCRATCH_BYTES`, is the only writable place. Mount points are created parents
    first, each ``0755`` so the dropped uid can traverse them (bubblewrap would create them
    ``0700``).
    """
    tree = _tree()
    command = [
        _program("bwrap"),
        "--unshare-net",
        "--unshare-pid",
        # The worker is PID 1 of its namespace, which no process inside may kill: a call that
        # runs as the worker's uid (an unprivileged user) cannot end it and blame the harness.
        "--as-pid-1",
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
        "--size",
        str(SMALL_TMPFS_BYTES),
        "--tmpfs",
        "/dev/shm",
        "--perms",
        "0755",
        "--size",
        str(SMALL_TMPFS_BYTES),
        "--tmpfs",
        "/tmp",
        "--perms",
        "0755",
        "--size",
        str(SCRATCH_BYTES),
        "--tmpfs",
        scratch,
    ]
    for name, value in sandbox_environment(scratch).items():
        command += ["--setenv", name, value]
    for text, name in tree.links:
        command += ["--symlink", text, name]
    for directory in tree.directories:
        if directory not in ("/tmp", "/dev", "/dev/shm"):
            command += ["--perms", "0755", "--dir", directory]
    for real, target in tree.binds:
        command += ["--ro-bind", real, target]
    for path in tree.hidden:
        command += ["--perms", "0000", "--size", str(SMALL_TMPFS_BYTES), "--tmpfs", path]
        command += ["--remount-ro", path]
    # bubblewrap's own root is a tmpfs of no size, writable where the worker is not root.
    command += ["--remount-ro", "/tmp", "--remount-ro", "/dev/shm", "--remount-ro", "/"]
    return command


def _system_program(name: str) -> str:
    """``name`` on the user's PATH, else in the system's ``sbin`` (not on a user's PATH)."""
    for candidate in (shutil.which(name), f"/usr/sbin/{name}", f"/sbin/{name}"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return name


def _namespace_script() -> str:
    """The shell that builds the :class:`Tree` in a fresh tmpfs and pivots into it.

    ``$1`` is an empty directory on the host, the new root's mount point; the rest is the
    command to run in it. Every bind is remounted read-only (the script stops if one cannot
    be: in a user namespace the files of the user appear as root's, and a call must not write
    to them); the old root is detached, so nothing outside the tree can be reached again.
    """
    tree = _tree()
    q = shlex.quote
    small = f"size={SMALL_TMPFS_BYTES},nosuid,nodev"
    lines = [
        'R="$1"; shift',
        f'mount -t tmpfs -o mode=0755,{small} gta-root "$R" || exit 90',
        'mkdir -m 0755 "$R/proc" "$R/dev" "$R/dev/shm" "$R/tmp" "$R/scratch" || exit 91',
    ]
    for directory in tree.directories:
        lines.append(f'[ -e "$R"{q(directory)} ] || mkdir -m 0755 "$R"{q(directory)} || exit 91')
    for text, name in tree.links:
        lines.append(f'ln -s {q(text)} "$R"{q(name)} || exit 91')
    for real, target in tree.binds:
        inside = f'"$R"{q(target)}'
        make = f"mkdir -m 0755 -p {inside}" if os.path.isdir(real) else f"touch {inside}"
        lines.append(f"[ -e {inside} ] || {make} || exit 92")
        lines.append(f"mount --rbind {q(real)} {inside} || exit 92")
        lines.append(
            f"mount -o remount,bind,ro,nosuid,nodev {inside} || "
            f"mount -o remount,bind,ro,nosuid,nodev,noexec {inside} || exit 93"
        )
    for path in tree.hidden:
        lines.append(f'mount -t tmpfs -o ro,mode=0000,{small} gta-hidden "$R"{q(path)} || exit 94')
    for name in DEVICES:
        lines.append(
            f'if [ -e /dev/{name} ]; then touch "$R/dev/{name}" && '
            f'mount --bind /dev/{name} "$R/dev/{name}" || exit 95; fi'
        )
    for name, text in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0")):
        lines.append(f'ln -s {text} "$R/dev/{name}"')
    lines += [
        'ln -s /proc/self/fd/1 "$R/dev/stdout"; ln -s /proc/self/fd/2 "$R/dev/stderr"',
        'mount --rbind /proc "$R/proc" || exit 96',
        f"mount -t tmpfs -o mode=0755,size={SCRATCH_BYTES},nosuid,nodev gta-scratch "
        '"$R/scratch" || exit 97',
        f'cd "$R" && mkdir .host && {q(_system_program("pivot_root"))} . .host || exit 98',
        "cd / && umount -l /.host && rmdir /.host || exit 98",
        "mount -o remount,ro,bind / || exit 99",
        'unset OLDPWD; exec "$@"',
    ]
    return "\n".join(lines)


def _namespace_command(host_directory: str) -> list[str]:
    """``unshare`` into private mount, PID and network namespaces, pivoted into the tree.

    As root, the namespaces need no more; as anyone else, a user namespace where the worker
    is root (and its calls give up every capability). The worker becomes PID 1's child in its
    own PID namespace, so every process a call leaves behind dies with the namespace or is
    killed after the call.
    """
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [
        _program("unshare"),
        *user,
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--net",
        "--ipc",
        "--uts",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        _namespace_script(),
        "sh",
        host_directory,
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
    #: Command prefix the worker starts under, given a directory on the host: the scratch
    #: directory when :attr:`scratch` is ``None``, else an empty directory the prefix may use
    #: (the namespace fallback's mount point for its new root).
    prefix: Callable[[str], list[str]]
    #: Scratch directory as the worker sees it (``None``: a temporary directory on the host).
    scratch: str | None
    #: Whether the worker has its own PID namespace (leftover processes can be killed).
    pid_namespace: bool
    guarantees: tuple[str, ...]
    gaps: tuple[str, ...] = ()
    #: How the sandbox was built, for the report: ``bubblewrap``, ``namespaces`` (the fallback
    #: pivoted into the same tree), ``network-namespace`` or ``plain``.
    mechanism: str = ""
    #: Whether each call confines itself with Landlock (the fallbacks without a tree).
    landlock: bool = False

    @property
    def isolated(self) -> bool:
        """Whether model code sees nothing but its tree: no dataset, no checkout, no secret.

        False where a gap says files stay readable or processes of the user are reachable:
        results of such a run may have been computed by code that read the answers.
        """
        return not any(gap in UNISOLATING for gap in self.gaps)

    def summary(self) -> str:
        """One line for the terminal header and the report."""
        text = f"{self.kind} ({', '.join(self.guarantees)})"
        if self.gaps:
            text += f"; NOT isolated: {', '.join(self.gaps)}"
        return text

    def describe(self) -> dict[str, Any]:
        """For the report (``settings.sandbox`` and the local backend's ``isolation``)."""
        return {
            "kind": self.kind,
            "mode": self.mechanism or self.kind,
            "isolated": self.isolated,
            "not_isolated": list(self.gaps),
            "guarantees": list(self.guarantees),
            "gaps": list(self.gaps),
            "summary": self.summary(),
        }


_COMMON = ("minimal environment", "time, CPU, memory, file-size and process limits")
#: What every mode that builds the :class:`Tree` guarantees on top of :data:`_COMMON`.
_TREE = (
    "no network",
    "read-only view of the system and Python paths only (no dataset, checkout or home)",
    f"scratch tmpfs of {SCRATCH_BYTES >> 20} MiB removed call by call",
    "PID namespace",
)
#: The gaps of the fallbacks that cannot build the tree.
FILES_READABLE = "files your user can read stay readable (the dataset's answers included)"
PROCESSES_REACHABLE = (
    "your user's other processes can be signalled and, but for pytest's and the worker's, "
    "have their environment read"
)
LEFTOVERS = "processes that leave the call's process group outlive it"
NETWORK = "network"
NETWORK_UDP = "network other than TCP (UDP; Landlock refuses TCP)"
UNREACHABLE_PYTHON = (
    "calls run as nobody, who cannot enter the directories Python lives in (a 0700 home), so "
    "they fail where the other modes succeed"
)
#: Gaps that make a run's results not isolated (:attr:`Isolation.isolated`).
UNISOLATING = frozenset({FILES_READABLE, PROCESSES_REACHABLE, NETWORK, NETWORK_UDP})


def _bubblewrap() -> Isolation | None:
    if shutil.which("bwrap") is None or not _probe([*_bwrap_command(SCRATCH_IN_SANDBOX), "true"]):
        return None
    return Isolation(
        "bubblewrap",
        lambda host: _bwrap_command(SCRATCH_IN_SANDBOX),
        SCRATCH_IN_SANDBOX,
        True,
        (*_COMMON, *_TREE),
        mechanism="bubblewrap",
    )


def _namespace_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    with tempfile.TemporaryDirectory(prefix="gta-sandbox-probe-") as scratch:
        return _probe([*_namespace_command(scratch), "true"])


def _reachable_by_others(paths: tuple[str, ...]) -> bool:
    """Whether a user who owns none of ``paths`` (``nobody``) can reach each of them."""
    for path in paths:
        try:
            if not os.stat(path).st_mode & 0o004:
                return False
            for parent in Path(path).parents:
                if not os.stat(parent).st_mode & 0o001:
                    return False
        except OSError:
            return False
    return True


def _readable() -> tuple[str, ...]:
    """The :class:`Tree`'s paths on the host, split around what it hides (for Landlock).

    Landlock allows whole hierarchies and cannot take one back, so a bound directory that
    holds a hidden one is allowed entry by entry, down to the hidden one, which is left out.
    """
    tree = _tree()
    hidden = {os.path.realpath(h) for h in tree.hidden}
    found: list[str] = []

    def allow(path: str) -> None:
        if path in hidden or path in found:
            return
        inside = [h for h in hidden if h.startswith(path.rstrip("/") + "/")]
        if not inside or not os.path.isdir(path) or os.path.islink(path):
            found.append(path)
            return
        for entry in sorted(os.listdir(path)):
            allow(os.path.join(path, entry))

    for real, _ in tree.binds:
        allow(real)
    return tuple(found)


def _rlimit() -> Isolation:
    """The fallback without bubblewrap: the same tree through ``unshare`` where it can.

    As root, or as a user where user namespaces work, ``unshare`` builds the very tree
    bubblewrap shows and pivots into it: the same files, so the same scores. Where it cannot,
    the worker runs as a plain subprocess, pytest and the worker are made non-dumpable (code of
    the same uid cannot read their ``/proc/<pid>/environ`` or open their pipes), each call is
    confined with Landlock where the kernel has it (it reads only the tree's paths, writes only
    its directory and, from ABI 6, signals nothing outside itself), and the gaps say what stays
    open.
    """
    if _namespace_works():
        return Isolation(
            "rlimit",
            _namespace_command,
            SCRATCH_IN_SANDBOX,
            True,
            (*_COMMON, *_TREE),
            mechanism="namespaces",
        )
    flags = "-n" if os.geteuid() == 0 else "-rn"
    network = [_program("unshare"), flags]
    guarantees: tuple[str, ...] = (
        *_COMMON,
        f"scratch directory watched at {SCRATCH_BYTES >> 20} MiB",
    )
    abi = sandbox_worker.landlock_abi()
    open_gaps: tuple[str, ...] = ()
    if abi >= 1:
        guarantees += (
            f"Landlock ABI {abi}: reads only the system and Python paths (no dataset, checkout "
            "or home), writes only its own directory",
        )
    else:
        open_gaps += (FILES_READABLE, "world-writable directories stay writable")
    if abi >= sandbox_worker.LANDLOCK_SIGNAL_ABI:
        guarantees += ("no signal to any process outside the call",)
    else:
        open_gaps += (PROCESSES_REACHABLE,)
    open_gaps += (LEFTOVERS,)
    if os.geteuid() == 0 and not _reachable_by_others(python_paths()):
        open_gaps += (UNREACHABLE_PYTHON,)
    if shutil.which("unshare") and _probe([*network, "true"]):
        return Isolation(
            "rlimit",
            lambda scratch: list(network),
            None,
            False,
            (*guarantees, "no network"),
            open_gaps,
            mechanism="network-namespace",
            landlock=abi >= 1,
        )
    return Isolation(
        "rlimit",
        lambda scratch: [],
        None,
        False,
        guarantees,
        (NETWORK_UDP if abi >= 4 else NETWORK, *open_gaps),
        mechanism="plain",
        landlock=abi >= 1,
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
    pool_size()  # a bad PYTEST_GTA_SANDBOX_WORKERS is a usage error now, not in a case
    _MODE = mode
    chosen = isolation(mode)
    if not chosen.pid_namespace:
        # Model code runs as this process's uid and sees its pid: at least its environment
        # (the user's API keys) and its pipes stay closed to it.
        sandbox_worker.undumpable()
    return chosen


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


_LAUNCHER: ThreadPoolExecutor | None = None
_LAUNCHER_LOCK = threading.Lock()


def _launch(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start a worker process from a thread that lives as long as this process.

    bubblewrap's ``--die-with-parent`` is ``PR_SET_PDEATHSIG``, which fires when the *thread*
    that started it ends, not the process: a worker started from an episode's thread
    (``--gta-concurrency``) or any short-lived executor would be killed with that thread.

    Raises:
        OSError: the program could not be run.
    """
    global _LAUNCHER
    with _LAUNCHER_LOCK:
        if _LAUNCHER is None:
            _LAUNCHER = ThreadPoolExecutor(1, thread_name_prefix="pytest-gta-sandbox-launcher")
        launcher = _LAUNCHER
    started = launcher.submit(
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


@dataclass(frozen=True)
class SandboxResult:
    """What a call produced: text, or PNG bytes for Plot."""

    text: str | None = None
    png: bytes | None = None


class SandboxWorker:
    """One warm worker process and the host side of its pipe protocol; one call at a time.

    :class:`SandboxPool` runs several of them; tests use one directly.
    """

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
        self._scratch = tempfile.TemporaryDirectory(prefix="gta-sandbox-")
        os.chmod(self._scratch.name, 0o755)
        scratch = chosen.scratch or self._scratch.name
        settings = sandbox_worker.Settings(
            scratch,
            MAX_TEXT_CHARS,
            MAX_REPLY_BYTES,
            FILE_SIZE_BYTES,
            EXTRA_PROCESSES,
            chosen.pid_namespace,
            # A host directory has no size of its own: the worker watches each call's.
            SCRATCH_BYTES if chosen.scratch is None else 0,
            _readable() if chosen.landlock else (),
        )
        command = [*chosen.prefix(self._scratch.name), sys.executable, "-I", "-c", worker_source()]
        command += settings.to_argv()
        try:
            process = _launch(command, sandbox_environment(scratch))
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

    @staticmethod
    def _receive(process: subprocess.Popen[bytes], timeout: float) -> dict[str, Any] | None:
        """Read one message, or None when the worker died, hung or sent too much.

        A frame that is not a JSON object can only come from model code that reached the
        worker's pipe; it reads as :data:`MALFORMED`, which the call reports as the model's.
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
                if expected is not None and expected > 2 * MAX_REPLY_BYTES:
                    return None
        try:
            message = json.loads(data[header : header + expected])
        except (ValueError, RecursionError):
            return dict(MALFORMED)
        if len(data) != header + expected or not isinstance(message, dict):
            return dict(MALFORMED)
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
        with self._lock:
            process = self._running()
            assert process.stdin is not None
            try:
                process.stdin.write(sandbox_worker.encode(request))
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
            if "broken" in reply:
                self._stop()
                raise GtaInfrastructureError(f"the code sandbox failed: {reply['broken']}")
            checked = sandbox_worker.checked_reply(json.dumps(reply).encode(), MAX_TEXT_CHARS)
            if checked != reply:
                self._stop()  # what reached the worker's pipe may reach it again
        if "error" in checked:
            raise GtaToolError(str(checked["error"]))
        if "limit" in checked:
            raise GtaToolError(str(checked["limit"]))
        if "png" in checked:
            return SandboxResult(png=base64.b64decode(checked["png"]))
        return SandboxResult(text=str(checked["text"]))


class SandboxPool:
    """Up to ``size`` warm workers of one process, each serving one call at a time.

    A call takes an idle worker; when every worker is busy it starts another, up to ``size``,
    and past that waits for one to come free. Workers start lazily (a process whose calls never
    overlap runs one) and are kept until :meth:`close`. Safe to call from any number of
    threads; the calls of one worker never mix, since each worker is taken by one call at a time.
    """

    def __init__(self, size: int | None = None) -> None:
        """A pool of ``size`` workers at most (default: :func:`pool_size`).

        Raises:
            GtaUsageError: ``size`` is below 1, or ``PYTEST_GTA_SANDBOX_WORKERS`` is unusable.
        """
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
            fresh = SandboxWorker()
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
        kind: Literal["calculator", "solver", "plot"],
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
                fresh = SandboxWorker()
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


_POOL: SandboxPool | None = None
_POOL_LOCK = threading.Lock()


def worker() -> SandboxPool:
    """The process-wide pool, created on first use and stopped when the process exits.

    Raises:
        GtaUsageError: ``PYTEST_GTA_SANDBOX_WORKERS`` is unusable.
    """
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = SandboxPool()
            atexit.register(_POOL.close)
        return _POOL
