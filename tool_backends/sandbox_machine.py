"""What this machine offers the sandbox: its programs, its uid, its kernel's Landlock, its probes.

The isolation a run gets depends on the machine (:mod:`tool_backends.sandbox_isolation`). Every
question the sandbox asks the machine goes through one :class:`Machine`, so that a test can
describe another machine (no bubblewrap, no ``unshare``, no Landlock, not root) by constructing
one, without patching the modules that ask.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from tool_backends import sandbox_worker
from tool_backends.sandbox_tree import sandbox_environment


def _which(name: str) -> str | None:
    return shutil.which(name)


def runs_cleanly(command: list[str]) -> bool:
    """Whether ``command`` runs and exits 0 within 10 s, in the sandbox's environment."""
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
class Machine:
    """The machine's answers to the sandbox's questions; the defaults ask the real one."""

    #: A program's path on the user's PATH, or ``None`` (``shutil.which``).
    which: Callable[[str], str | None] = _which
    #: The effective uid of this process (``os.geteuid``).
    euid: Callable[[], int] = os.geteuid
    #: The kernel's Landlock ABI version, ``0`` without Landlock.
    landlock_abi: Callable[[], int] = sandbox_worker.landlock_abi
    #: Whether a command (a probe: ``bwrap ... true``) runs and exits 0 (:func:`runs_cleanly`).
    runs: Callable[[list[str]], bool] = runs_cleanly

    def program(self, name: str) -> str:
        """``name`` as found on the user's PATH (the sandbox's own PATH is the system's).

        Resolved here so that the program probed is the program run, and a user can put the
        bubblewrap of their choice first on PATH.
        """
        return self.which(name) or name

    def system_program(self, name: str) -> str:
        """``name`` on the user's PATH, else in the system's ``sbin`` (not on a user's PATH)."""
        for candidate in (self.which(name), f"/usr/sbin/{name}", f"/sbin/{name}"):
            if candidate and os.access(candidate, os.X_OK):
                return candidate
        return name
