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


@dataclass(frozen=True)
class Ran:
    """A probe's outcome: true when it ran cleanly, else false with why (its error's end)."""

    ok: bool
    why: str = ""

    def __bool__(self) -> bool:
        return self.ok


def why_not(ran: bool | Ran) -> str:
    """What a failed probe said (a :class:`Machine` of a test may answer a plain ``False``)."""
    return ran.why if isinstance(ran, Ran) and ran.why else "it did not run"


def runs_cleanly(command: list[str]) -> Ran:
    """Whether ``command`` runs and exits 0 within 10 s, in the sandbox's environment."""
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            timeout=10,
            check=False,
            env=sandbox_environment(tempfile.gettempdir()),
        )
    except subprocess.TimeoutExpired:
        return Ran(False, "it did not finish within 10 s")
    except (OSError, subprocess.SubprocessError) as exc:
        return Ran(False, f"it cannot start: {exc}")
    if result.returncode == 0:
        return Ran(True)
    said = result.stderr.decode(errors="replace").strip().splitlines()
    last = said[-1][:300] if said else "no message"
    return Ran(False, f"exit status {result.returncode}: {last}")


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
    runs: Callable[[list[str]], bool | Ran] = runs_cleanly

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
