"""Choosing how model-written code is isolated on this machine, and saying what is not isolated.

``--gta-sandbox`` asks for ``bubblewrap``, ``rlimit`` or ``auto``; :func:`choose` probes the
machine (:class:`Machine`) for what the mode can have and returns an :class:`Isolation`: the
command prefix the worker starts under, what it guarantees, and the gaps the report and the
terminal header name.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_SANDBOX
from pytest_gta.vocabulary import SandboxMode
from tool_backends import sandbox_worker
from tool_backends.sandbox_machine import Machine
from tool_backends.sandbox_mounts import (
    SCRATCH_BYTES,
    SCRATCH_IN_SANDBOX,
    bwrap_command,
    namespace_command,
)
from tool_backends.sandbox_tree import Tree

SandboxKind = Literal["bubblewrap", "rlimit"]
INSTALL_BUBBLEWRAP = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
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
    "calls run as a uid of their own, which cannot enter the directories Python lives in "
    "(a 0700 home), so they fail where the other modes succeed"
)
#: Gaps that make a run's results not isolated (:attr:`Isolation.isolated`).
UNISOLATING = frozenset({FILES_READABLE, PROCESSES_REACHABLE, NETWORK, NETWORK_UDP})


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


COMMON = ("minimal environment", "time, CPU, memory, file-size and process limits")


def _tree_guarantees(scratch_bytes: int) -> tuple[str, ...]:
    """What every mode that builds the :class:`Tree` guarantees on top of :data:`COMMON`."""
    return (
        "no network",
        "read-only view of the system and Python paths only (no dataset, checkout or home)",
        f"scratch tmpfs of {scratch_bytes >> 20} MiB removed call by call",
        "PID namespace",
    )


def _bubblewrap(machine: Machine, tree: Callable[[], Tree], scratch_bytes: int) -> Isolation | None:
    def prefix(host: str) -> list[str]:
        return bwrap_command(tree(), SCRATCH_IN_SANDBOX, machine, scratch_bytes)

    if machine.which("bwrap") is None or not machine.runs([*prefix(""), "true"]):
        return None
    return Isolation(
        "bubblewrap",
        prefix,
        SCRATCH_IN_SANDBOX,
        True,
        (*COMMON, *_tree_guarantees(scratch_bytes)),
        mechanism="bubblewrap",
    )


def _reachable_by_others(paths: tuple[str, ...]) -> bool:
    """Whether a user who owns none of ``paths`` (a call's uid) can reach each of them."""
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


def _rlimit(
    machine: Machine, tree: Callable[[], Tree], python: tuple[str, ...], scratch_bytes: int
) -> Isolation:
    """The fallback without bubblewrap: the same tree through ``unshare`` where it can.

    As root, or as a user where user namespaces work, ``unshare`` builds the very tree
    bubblewrap shows and pivots into it: the same files, so the same scores. Where it cannot,
    the worker runs as a plain subprocess, pytest and the worker are made non-dumpable (code of
    the same uid cannot read their ``/proc/<pid>/environ`` or open their pipes), each call is
    confined with Landlock where the kernel has it (it reads only the tree's paths, writes only
    its directory and, from ABI 6, signals nothing outside itself), and the gaps say what stays
    open.
    """

    def pivoted(host: str) -> list[str]:
        return namespace_command(tree(), host, machine, scratch_bytes)

    if machine.which("unshare") is not None:
        with tempfile.TemporaryDirectory(prefix="gta-sandbox-probe-") as scratch:
            namespaces = machine.runs([*pivoted(scratch), "true"])
        if namespaces:
            return Isolation(
                "rlimit",
                pivoted,
                SCRATCH_IN_SANDBOX,
                True,
                (*COMMON, *_tree_guarantees(scratch_bytes)),
                mechanism="namespaces",
            )
    flags = "-n" if machine.euid() == 0 else "-rn"
    network = [machine.program("unshare"), flags]
    guarantees: tuple[str, ...] = (
        *COMMON,
        f"scratch directory watched at {scratch_bytes >> 20} MiB",
    )
    abi = machine.landlock_abi()
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
    if machine.euid() == 0 and not _reachable_by_others(python):
        open_gaps += (UNREACHABLE_PYTHON,)
    if machine.which("unshare") and machine.runs([*network, "true"]):
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


def choose(
    mode: SandboxMode,
    machine: Machine,
    tree: Callable[[], Tree],
    python: tuple[str, ...],
    scratch_bytes: int = SCRATCH_BYTES,
) -> Isolation:
    """The isolation ``mode`` gets on ``machine`` (probed anew: the caller keeps it).

    Args:
        mode: ``--gta-sandbox``: ``auto`` takes bubblewrap where it works, else the fallback.
        machine: Where to probe.
        tree: The tree to show, asked again each time a worker starts (paths hidden after the
            probe are hidden from that worker on).
        python: The interpreter's paths (whether a call's uid can reach them).
        scratch_bytes: The size of a worker's scratch space.

    Raises:
        GtaUsageError: ``bubblewrap`` was asked for and cannot run here.
    """
    found = None if mode == "rlimit" else _bubblewrap(machine, tree, scratch_bytes)
    if found is None and mode == "bubblewrap":
        why = (
            "bwrap is not installed"
            if machine.which("bwrap") is None
            else "bwrap is installed but cannot create its namespaces here (user "
            "namespaces disabled, or a container that forbids mounts)"
        )
        raise GtaUsageError(
            f"{OPT_SANDBOX}=bubblewrap: {why}; {INSTALL_BUBBLEWRAP}, or pass "
            f"{OPT_SANDBOX}=rlimit to accept the weaker fallback"
        )
    return found if found is not None else _rlimit(machine, tree, python, scratch_bytes)
