"""The command lines that show model-written code a :class:`Tree`: bubblewrap's, and ``unshare``'s.

Both build the same view: the tree read-only, an empty read-only ``/tmp`` and ``/dev/shm``, a
bounded tmpfs scratch directory as the only writable place, no network, and PID, IPC and UTS
namespaces of their own. bubblewrap builds it from its arguments; the fallback runs ``unshare``
and a shell script that mounts the tree in a fresh tmpfs and pivots into it.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from tool_backends.sandbox_machine import Machine
from tool_backends.sandbox_tree import Tree, sandbox_environment

#: Where the scratch directory appears inside a sandbox that has a tree.
SCRATCH_IN_SANDBOX = "/scratch"
#: Bytes of scratch space one worker's calls may fill: the size of its scratch tmpfs (where
#: there is no tmpfs, the most a call's directory may hold before the call is stopped). It is
#: memory on the host, so it is kept well inside a call's memory limit, and each call's
#: directory is removed when the call ends.
SCRATCH_BYTES = 64 << 20
#: Size of the other tmpfs mounts (read-only, empty), which need none.
SMALL_TMPFS_BYTES = 64 << 10
#: Device nodes shown to a call (the namespace fallback; bubblewrap's ``--dev`` has the same).
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def bwrap_command(
    tree: Tree, scratch: str, machine: Machine, scratch_bytes: int = SCRATCH_BYTES
) -> list[str]:
    """The bubblewrap prefix: ``tree`` read-only, a bounded tmpfs scratch, no network.

    ``/tmp`` and ``/dev/shm`` are empty and read-only; the scratch directory, a tmpfs of
    ``scratch_bytes``, is the only writable place. Mount points are created parents first,
    each ``0755`` so the dropped uid can traverse them (bubblewrap would create them ``0700``).
    """
    command = [
        machine.program("bwrap"),
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
        str(scratch_bytes),
        "--tmpfs",
        scratch,
    ]
    for name, value in sandbox_environment(scratch).items():
        command += ["--setenv", name, value]
    for text, name in tree.links:
        command += ["--symlink", text, name]
    outside, inside = split_by_hidden(tree)
    within = made_in_hidden(tree)
    for directory in outside_directories(tree):
        if directory not in ("/tmp", "/dev", "/dev/shm"):
            command += ["--perms", "0755", "--dir", directory]
    for real, target in outside:
        command += ["--ro-bind", real, target]
    for path in tree.hidden:
        # Empty and closed, unless something shows inside (a case's input in the bundled
        # sample of an installed package, a shipped example agent): then only that is made or
        # bound in it, before it turns read-only.
        holds = any(_beneath(name, path) for name in within)
        command += ["--perms", "0755" if holds else "0000"]
        command += ["--size", str(SMALL_TMPFS_BYTES), "--tmpfs", path]
    for directory in within:
        command += ["--perms", "0755", "--dir", directory]
    for real, target in inside:
        command += ["--ro-bind", real, target]
    for path in tree.hidden:
        command += ["--remount-ro", path]
    # bubblewrap's own root is a tmpfs of no size, writable where the worker is not root.
    command += ["--remount-ro", "/tmp", "--remount-ro", "/dev/shm", "--remount-ro", "/"]
    return command


def _beneath(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip("/") + "/")


def split_by_hidden(tree: Tree) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The tree's binds outside what it hides, and those inside (shown within a hidden tmpfs).

    A bind inside a hidden path (a case's input in the bundled sample, or a shipped example
    agent, which lie in a package the tree hides) must follow that path's tmpfs, or the tmpfs
    would cover it.
    """
    outside: list[tuple[str, str]] = []
    inside: list[tuple[str, str]] = []
    for bind in tree.binds:
        (inside if _hidden_by(tree, bind[1]) else outside).append(bind)
    return outside, inside


def _hidden_by(tree: Tree, path: str) -> str | None:
    """The hidden path that ``path`` lies in, if any."""
    return next((h for h in tree.hidden if _beneath(path, h)), None)


def made_in_hidden(tree: Tree) -> list[str]:
    """Directories to make inside the hidden tmpfs mounts, parents first, each ``0755``.

    The way to a bind inside a hidden path, and the tree's directories there (mount points for
    a case's inputs in the bundled sample): made in the tmpfs before it turns read-only, and
    traversable by the dropped uid (bubblewrap would make a bind's missing parents ``0700``).
    """
    wanted: list[str] = []
    targets = [(target, False) for _, target in split_by_hidden(tree)[1]]
    targets += [(d, True) for d in tree.directories if _hidden_by(tree, d)]
    for target, itself in targets:
        top = _hidden_by(tree, target) or "/"
        way = [str(p) for p in reversed(Path(target).parents) if _beneath(str(p), top)]
        for name in [*way, *([target] if itself else [])]:
            if name not in wanted:
                wanted.append(name)
    return sorted(wanted, key=lambda p: p.count("/"))


def outside_directories(tree: Tree) -> list[str]:
    """The tree's directories made on its root, before any bind (not those inside a hidden path)."""
    return [d for d in tree.directories if not _hidden_by(tree, d)]


def namespace_script(tree: Tree, machine: Machine, scratch_bytes: int = SCRATCH_BYTES) -> str:
    """The shell that builds ``tree`` in a fresh tmpfs and pivots into it.

    ``$1`` is an empty directory on the host, the new root's mount point; the rest is the
    command to run in it. Every bind is remounted read-only (the script stops if one cannot
    be: in a user namespace the files of the user appear as root's, and a call must not write
    to them); the old root is detached, so nothing outside the tree can be reached again.
    """
    q = shlex.quote
    small = f"size={SMALL_TMPFS_BYTES},nosuid,nodev"
    lines = [
        'R="$1"; shift',
        "umask 022",  # mount points made here (inside a hidden tmpfs too) are traversable
        f'mount -t tmpfs -o mode=0755,{small} gta-root "$R" || exit 90',
        'mkdir -m 0755 "$R/proc" "$R/dev" "$R/dev/shm" "$R/tmp" "$R/scratch" || exit 91',
    ]
    for directory in outside_directories(tree):
        lines.append(f'[ -e "$R"{q(directory)} ] || mkdir -m 0755 "$R"{q(directory)} || exit 91')
    for text, name in tree.links:
        lines.append(f'ln -s {q(text)} "$R"{q(name)} || exit 91')
    outside, inside = split_by_hidden(tree)

    def bind(real: str, target: str) -> None:
        there = f'"$R"{q(target)}'
        parent = f'"$R"{q(os.path.dirname(target))}'
        make = (
            f"mkdir -p {there}"
            if os.path.isdir(real)
            else f"{{ mkdir -p {parent} && touch {there}; }}"
        )
        lines.append(f"[ -e {there} ] || {make} || exit 92")
        lines.append(f"mount --rbind {q(real)} {there} || exit 92")
        lines.append(
            f"mount -o remount,bind,ro,nosuid,nodev {there} || "
            f"mount -o remount,bind,ro,nosuid,nodev,noexec {there} || exit 93"
        )

    for real, target in outside:
        bind(real, target)
    within = made_in_hidden(tree)
    for path in tree.hidden:
        holds = any(_beneath(name, path) for name in within)
        mode = "0755" if holds else "0000"
        lines.append(f'mount -t tmpfs -o mode={mode},{small} gta-hidden "$R"{q(path)} || exit 94')
    for directory in within:
        lines.append(f'mkdir -m 0755 -p "$R"{q(directory)} || exit 94')
    for real, target in inside:
        bind(real, target)
    for path in tree.hidden:
        lines.append(f'mount -o remount,bind,ro,nosuid,nodev "$R"{q(path)} || exit 94')
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
        f"mount -t tmpfs -o mode=0755,size={scratch_bytes},nosuid,nodev gta-scratch "
        '"$R/scratch" || exit 97',
        f'cd "$R" && mkdir .host && {q(machine.system_program("pivot_root"))} . .host || exit 98',
        "cd / && umount -l /.host && rmdir /.host || exit 98",
        "mount -o remount,ro,bind / || exit 99",
        'unset OLDPWD; exec "$@"',
    ]
    return "\n".join(lines)


def namespace_command(
    tree: Tree, host_directory: str, machine: Machine, scratch_bytes: int = SCRATCH_BYTES
) -> list[str]:
    """``unshare`` into private mount, PID and network namespaces, pivoted into ``tree``.

    As root, the namespaces need no more; as anyone else, a user namespace where the worker
    is root (and its calls give up every capability). The worker becomes PID 1's child in its
    own PID namespace, so every process a call leaves behind dies with the namespace or is
    killed after the call.
    """
    user = [] if machine.euid() == 0 else ["--user", "--map-root-user"]
    return [
        machine.program("unshare"),
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
        namespace_script(tree, machine, scratch_bytes),
        "sh",
        host_directory,
    ]
