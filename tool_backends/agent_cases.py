"""The agent's warm sandbox, inside: one per run, and a fork per case into namespaces of its own.

Starting a sandbox per case costs a sandbox program, a Python and its imports (and for a
callable the import of the agent's module) every time: most of a case's overhead when the
agent is quick. So the jail (:mod:`tool_backends.agent_warm` on the host) starts one sandbox per
run, showing what every case shares (the system, Python, the agent's own files, nothing of the
harness), and runs :func:`serve` in it as its PID 1. That process, the *template*:

1. while it still holds the capabilities of the sandbox, unmounts what bubblewrap mounts over
   parts of ``/proc``, so that each case may mount a ``/proc`` of its own (the kernel lets a
   user namespace mount ``proc`` only where one is fully visible);
2. gives them up for good: ``nobody`` where it is real root, else no capabilities, and
   ``no_new_privs``; only then does it import the agent's callable (code of the agent), once;
3. forks a child per case (:func:`case_child`) that enters a user namespace of its own (mapping
   only its uid), and in it fresh mount, PID, network, IPC and UTS namespaces: the case's input
   files are copied from descriptors the host opened into a tmpfs laid over their directory
   (so the case sees its own inputs at their own paths and nothing else there), a tmpfs is its
   scratch directory, the loopback comes up, and the case's own init (PID 1 of its namespace,
   with ``/proc`` of its own) runs the case as :mod:`tool_backends.agent_launcher` does for a
   sandbox of its own. When that init ends, or the host asks the template to kill the case,
   every process of the case dies with its PID namespace.

The mounts a case inherits from the template's namespace are locked by the kernel (the case's
user namespace is less privileged), so nothing in a case can unmount what hides the harness;
the agent's process gives up the case's capabilities before it runs. Code the agent's module
runs at import runs in the template: it sees what the sandbox shows every case, never a case's
inputs, answers or network. A module that leaves threads running at import is not forked from
(forking a threaded process is unsafe); its cases import it themselves.

The protocol: the template's stdin is a ``SOCK_SEQPACKET`` socket to the host. It first sends
one message, ``{"ready": true, "preloaded": bool, "note": str}`` or ``{"error": {...}}`` (the
callable would not import) or ``{"broken": why}``; then it reads requests, one per message:
``{"case": KEY, "inputs": [[directory, relative path, index], ...], "scratch": PATH,
"scratch_bytes": N}`` with the case's socket and its inputs' descriptors attached
(``SCM_RIGHTS``; ``index`` counts from the first input; each directory gets a tmpfs of its own
laid over it, holding its files), and ``{"kill": KEY}``. On the case's socket the case sends
``{"ready": true}`` (or ``{"broken"}``), then speaks the launcher's frames: the host's config
in, tool calls out, ``{"done"}`` last.

Standard library only, like the launcher: the sandbox shows no package of this project.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import select
import signal
import socket
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

try:
    from tool_backends import agent_callable as called
    from tool_backends import agent_launcher as launcher
    from tool_backends import sandbox_worker as worker
except ImportError:  # in the sandbox: the sibling files, bound beside this one
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import agent_callable as called  # type: ignore[import-not-found,no-redef]
    import agent_launcher as launcher  # type: ignore[import-not-found,no-redef]
    import sandbox_worker as worker  # type: ignore[import-not-found,no-redef]

#: ``clone(2)`` flags (``linux/sched.h``) and ``mount(2)`` flags (``linux/mount.h``).
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1
CAP_SETFCAP = 31
#: The most descriptors one request carries (the kernel's ``SCM_MAX_FD`` is 253).
MAX_FDS = 250
#: The largest request message (its JSON; inputs are descriptors, not bytes).
MAX_REQUEST = 1 << 20
#: Bytes of the tmpfs each input directory gets beyond its files' own size.
INPUT_SLACK = 1 << 20
#: Seconds the template waits for a message before it reaps its children again.
REAP_S = 1.0
#: What a case's tmpfs mounts are: not a place to run set-uid programs or devices from.
SAFE = MS_NOSUID | MS_NODEV

_libc = ctypes.CDLL(None, use_errno=True)


def _checked(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def unshare(flags: int) -> None:
    """``unshare(2)`` (``os.unshare`` exists from Python 3.12 only)."""
    _checked(_libc.unshare(ctypes.c_int(flags)), f"unshare({flags:#x})")


def mount(source: str | None, target: str, kind: str | None, flags: int, data: str = "") -> None:
    """``mount(2)``."""
    encoded = [None if v is None else v.encode() for v in (source, target, kind)]
    options = data.encode() if data else None
    result = _libc.mount(encoded[0], encoded[1], encoded[2], ctypes.c_ulong(flags), options)
    _checked(result, f"mount {kind or 'bind'} on {target}")


def unmount(target: str) -> None:
    """``umount2(2)`` with ``MNT_DETACH``."""
    _checked(_libc.umount2(target.encode(), ctypes.c_int(MNT_DETACH)), f"umount {target}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


# -- the template ----------------------------------------------------------------------------


def unmount_proc_covers() -> None:
    """Unmount what is mounted inside ``/proc``, deepest first (bubblewrap's read-only covers).

    A user namespace may mount ``proc`` only where a ``proc`` without anything mounted over
    its parts is already visible: without this, no case could have a ``/proc`` of its own.
    What those covers protect (``/proc/sys``, ``/proc/bus``...) needs capabilities of the
    machine's own user namespace to change, which nothing in the sandbox holds after
    :func:`give_up_privileges`.
    """
    try:
        with open("/proc/self/mountinfo") as table:
            points = [line.split()[4] for line in table if len(line.split()) > 4]
    except OSError:
        return
    for point in sorted({p for p in points if p.startswith("/proc/")}, key=len, reverse=True):
        unmount(point)


def give_up_privileges() -> str:
    """Become ``nobody`` (real root) or drop every capability; ``no_new_privs`` either way.

    Returns what the template became, for its ``ready`` message.
    """
    if os.geteuid() == 0 and worker.mapped(worker.NOBODY) and _real_root():
        os.setgroups([])
        os.setresgid(worker.NOBODY, worker.NOBODY, worker.NOBODY)
        os.setresuid(worker.NOBODY, worker.NOBODY, worker.NOBODY)
        worker._prctl(worker.PR_SET_NO_NEW_PRIVS, 1)
        became = "nobody"
    else:
        # Root of a user namespace keeps CAP_SETFCAP alone: the kernel lets a user namespace
        # map its creator's root only if the creator held it. Under no_new_privs it gives no
        # file capability to anything executed.
        worker.drop_capabilities(keep=(CAP_SETFCAP,) if os.geteuid() == 0 else ())
        became = f"uid {os.geteuid()} without capabilities"
    worker.undumpable()
    return became


def _real_root() -> bool:
    """Whether this is root of the machine's own user namespace (uid 0 maps to 0, all of it)."""
    try:
        with open("/proc/self/uid_map") as table:
            return table.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return False


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def preload(spec: Mapping[str, Any]) -> tuple[Callable[..., Any] | None, str]:
    """Import the agent's callable once, for every case to fork from; and a note on it.

    Raises:
        BaseException: whatever the import raised (the host reports it as a usage error).
    """
    called.TASK_CLASS.append(called.task_class(list(spec.get("task_fields", []))))
    function = called.load(spec)
    threads = _threads()
    if threads > 1:
        note = (
            f"the agent's module left {threads - 1} thread(s) running at import: each case "
            "imports it again (a threaded process is not forked from)"
        )
        return None, note
    return function, "imported once per run"


def serve(spec: Mapping[str, Any] | None, scratch: str, network: bool) -> None:
    """The template's life: set up, say ready, fork a case per request until the host goes."""
    control = socket.socket(fileno=os.dup(0))
    os.close(0)
    os.open(os.devnull, os.O_RDONLY)  # fd 0 again, so nothing reads the control socket by it
    try:
        unmount_proc_covers()
        became = give_up_privileges()
    except OSError as exc:
        _say(control, {"broken": f"cannot confine the sandbox's template: {exc}"})
        return
    function: Callable[..., Any] | None = None
    note = ""
    if spec is not None:
        try:
            function, note = preload(spec)
        except BaseException as exc:  # the agent's import failed: a usage error on the host
            _say(control, {"error": called.error_record(exc)})
            return
    why = self_test(scratch, network)
    if why is not None:
        _say(control, {"broken": why})
        return
    _say(control, {"ready": True, "preloaded": function is not None, "note": note, "as": became})
    cases: dict[str, int] = {}
    while True:
        _reap(cases)
        readable, _, _ = select.select([control], [], [], REAP_S)
        if not readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(control, MAX_REQUEST, MAX_FDS)
        except OSError:
            data, fds = b"", []
        if not data:  # the host is gone: so is every case (they die with this PID namespace)
            return
        try:
            request = json.loads(data)
        except ValueError:
            request = {}
        if "kill" in request:
            how = signal.SIGKILL if request.get("now") else signal.SIGTERM
            _kill(cases.get(str(request["kill"])), how)
        elif "case" in request and fds:
            pid = os.fork()
            if pid == 0:
                control.close()
                os._exit(case_child(request, fds, function, network))
            cases[str(request["case"])] = pid
        for fd in fds:
            os.close(fd)


def _say(control: socket.socket, message: Mapping[str, Any]) -> None:
    try:
        control.send(json.dumps(message).encode())
    except OSError:
        pass


def _kill(pid: int | None, how: int) -> None:
    """Signal a case's first process: SIGTERM ends its namespace and waits for it, SIGKILL not."""
    if pid is not None:
        try:
            os.kill(pid, how)
        except OSError:
            pass


def _reap(cases: dict[str, int]) -> None:
    """Collect ended children (cases, and what their namespaces' ends leave to PID 1)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        for key, value in list(cases.items()):
            if value == pid:
                del cases[key]


def self_test(scratch: str, network: bool) -> str | None:
    """Whether a case can be built here (a user namespace, mounts, ``/proc``): why not, or None."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        try:
            enter({"scratch": scratch}, [], network)
            init = os.fork()
            if init == 0:
                mount("proc", "/proc", "proc", SAFE | MS_NOEXEC)
                os._exit(0)
            _, status = os.waitpid(init, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                raise OSError(errno.EPERM, "mount proc in the case's PID namespace")
        except OSError as exc:
            os.write(writer, str(exc).encode()[:2000])
            os._exit(1)
        os._exit(0)
    os.close(writer)
    said = b""
    while chunk := os.read(reader, 4096):
        said += chunk
    os.close(reader)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 0:
        return None
    return f"a case cannot enter namespaces of its own: {said.decode(errors='replace')}"


# -- one case ----------------------------------------------------------------------------------


def enter(request: Mapping[str, Any], fds: Sequence[int], network: bool) -> None:
    """Enter the case's own namespaces and lay out its view: its inputs, a scratch tmpfs.

    ``request["inputs"]``: each input's directory (a tmpfs is laid over it), its path there,
    and the index of its descriptor in ``fds``. The case's user namespace maps only this
    process's uid and gid, to themselves.
    """
    uid, gid = os.getuid(), os.getgid()
    worker._prctl(worker.PR_SET_DUMPABLE, 1)  # its own uid_map is written through /proc/self
    unshare(CLONE_NEWUSER)
    # The same ids inside, but for 0: mapping root needs CAP_SETFCAP, given up already; the
    # case is ``nobody`` inside then (root of a user namespace of the user's, outside).
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid or worker.NOBODY} {uid} 1")
    _write("/proc/self/gid_map", f"{gid or worker.NOBODY} {gid} 1")
    worker.undumpable()
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    unshare(flags | (CLONE_NEWNET if network else 0))
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    for directory, files in _by_directory(request.get("inputs", []), len(fds)).items():
        size = sum(os.fstat(fds[index]).st_size for _, index in files) + INPUT_SLACK
        mount("gta-inputs", directory, "tmpfs", SAFE, f"mode=0755,size={size}")
        for relative, index in files:
            _copy(fds[index], directory, relative)
        mount(None, directory, None, MS_REMOUNT | MS_BIND | MS_RDONLY | SAFE)
    scratch = f"mode=0700,size={int(request.get('scratch_bytes', 0)) or 1 << 20}"
    mount("gta-scratch", str(request["scratch"]), "tmpfs", SAFE, scratch)
    if network:
        launcher.loopback_up()


def _by_directory(inputs: Any, count: int) -> dict[str, list[tuple[str, int]]]:
    """The inputs grouped by the directory whose tmpfs holds them; a bad entry is refused.

    Descriptor 0 is the case's socket: inputs count from 1.
    """
    grouped: dict[str, list[tuple[str, int]]] = {}
    for directory, relative, index in inputs:
        norm = os.path.normpath(str(relative)) if relative else "."
        outside = norm == "." or norm == ".." or norm.startswith(("../", "/"))
        if not os.path.isabs(str(directory)) or outside:
            raise ValueError(f"an input outside its directory: {directory!r}, {relative!r}")
        if not 0 < int(index) + 1 < count:
            raise ValueError(f"no descriptor for input {relative!r}")
        grouped.setdefault(str(directory), []).append((norm, int(index) + 1))
    return grouped


def _copy(fd: int, directory: str, relative: str) -> None:
    """The input's bytes from the host's descriptor into a read-only file in ``directory``."""
    path = os.path.join(directory, relative)
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    try:
        offset = 0
        while sent := os.sendfile(out, fd, offset, 1 << 24):
            offset += sent
    finally:
        os.close(out)


def case_child(
    request: Mapping[str, Any],
    fds: Sequence[int],
    function: Callable[..., Any] | None,
    network: bool,
) -> int:
    """The case: its namespaces, then its init, whose exit status this returns."""
    channel = socket.socket(fileno=os.dup(fds[0]))
    try:
        enter(request, fds, network)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        worker.send(channel.makefile("wb"), {"broken": f"the case's namespaces: {exc}"})
        return 1
    for fd in fds:
        os.close(fd)
    parent_gone, alive = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(alive)
        worker._prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if select.select([parent_gone], [], [], 0)[0]:  # the case ended before this line
            os._exit(1)
        os.close(parent_gone)
        try:
            mount("proc", "/proc", "proc", SAFE | MS_NOEXEC)
        except OSError as exc:
            worker.send(channel.makefile("wb"), {"broken": f"the case's /proc: {exc}"})
            os._exit(1)
        os._exit(run(channel, function))
    os.close(parent_gone)

    def end(signum: int, frame: Any) -> None:
        os.kill(init, signal.SIGKILL)

    # Asked to end (the case's time is up): kill its init, whose namespace goes with it; the
    # kernel reaps every process of it before the init is reaped here. Only then does the
    # case's socket close (this process holds it), so the host knows nothing of it is left.
    signal.signal(signal.SIGTERM, end)
    _, status = os.waitpid(init, 0)
    channel.close()
    return os.waitstatus_to_exitcode(status) & 0xFF


def run(channel: socket.socket, function: Callable[..., Any] | None) -> int:
    """The case's init: say ready, take the host's config, run the case as the launcher does."""
    host_in = channel.makefile("rb")
    host_out = channel.makefile("wb")
    worker.send(host_out, {"ready": True})
    config = worker.receive(host_in)
    if config is None:
        return 1
    config["identity"] = "capabilities"  # already nobody where the host is root
    config["warm"] = True
    launcher.serve_case(config, host_in, host_out, function)
    return 0


if __name__ == "__main__":  # python -I agent_cases.py SPEC_JSON SCRATCH NETWORK
    serve(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3] == "case")
