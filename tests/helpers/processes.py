"""What the tests need for child processes they start and interrupt."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def default_sigint() -> None:
    """``preexec_fn`` of a child a test interrupts: SIGINT back to its default disposition.

    A shell starts background jobs with SIGINT ignored, children inherit that, and Python
    then installs no KeyboardInterrupt handler, so a Ctrl-C test would see its signal ignored.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def processes_named(marker: str) -> list[int]:
    """The host's processes whose command line holds ``marker`` (zombies left out).

    A sandboxed agent's PIDs are its namespace's, not the host's: the tests name what an agent
    starts and look for the name here instead.
    """
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() not in (entry / "cmdline").read_bytes():
                continue
            if (entry / "stat").read_text().split(") ")[-1].startswith("Z"):
                continue
        except OSError:
            continue
        found.append(int(entry.name))
    return found
