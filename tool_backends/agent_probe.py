"""The start-up probe: what a cheating agent would try, run as one in the agents' sandbox.

:mod:`tool_backends.agent_launcher` runs :func:`probe` in place of a callable: it reads the
run's dataset and the bundled sample, searches the file system for ``dataset.json``, reads
other processes' environments, signals pytest, connects to a loopback port that is neither the
MCP server nor the proxy, and leaves a double-forked process behind (the host checks that one).
Standard library only, like the launcher: it runs where no package of this project is shown.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Mapping
from typing import Any

#: Entries the probe's search of the file system looks at, at most, and for how long.
PROBE_WALK_ENTRIES = 200_000
PROBE_WALK_S = 10.0


def _read(path: str) -> str | None:
    """The first bytes of ``path`` if this process can read them (``None``: refused)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(64).decode("utf-8", "replace")
    except OSError:
        return None


def _search(root: str) -> list[str]:
    """``dataset.json`` files found under ``root`` within the probe's bounds."""
    found, seen, deadline = [], 0, time.monotonic() + PROBE_WALK_S
    for here, directories, files in os.walk(root):
        directories[:] = [d for d in directories if os.path.join(here, d) not in ("/proc", "/sys")]
        seen += len(directories) + len(files)
        if "dataset.json" in files:
            found.append(os.path.join(here, "dataset.json"))
        if seen > PROBE_WALK_ENTRIES or time.monotonic() > deadline:
            break
    return found


def _environments() -> list[str]:
    """Processes other than this one whose environment this process can read."""
    readable = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    if handle.read(1):
                        readable.append(entry)
            except OSError:
                pass
    return readable


def _connects(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def _leave_behind(marker: str) -> None:
    """A double-forked, ``setsid`` process that tries to outlive the case."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                os.execv(
                    sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", marker]
                )
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def probe(targets: Mapping[str, Any]) -> str:
    """Try what a cheating agent would; what held (``True``) and what the probe got.

    The host checks the last try itself (whether the process left behind is gone).
    """
    findings: list[dict[str, Any]] = []

    def note(check: str, held: bool, detail: str) -> None:
        findings.append({"check": check, "held": held, "detail": detail})

    for path in targets.get("files", []):
        got = _read(path)
        note(f"read {path}", got is None, "refused" if got is None else "readable")
    found = _search("/")
    note(
        "search the file system for dataset.json",
        not found,
        "none found" if not found else f"found {', '.join(found[:5])}",
    )
    readable = _environments()
    note(
        "read another process's environment",
        not readable,
        "none readable" if not readable else f"readable: PIDs {', '.join(readable[:10])}",
    )
    harness = int(targets.get("harness_pid", 0))
    try:
        os.kill(harness, 0)
        signalled = True
    except OSError:
        signalled = False
    note(
        "signal the harness (pytest)",
        not signalled,
        "no such process in the sandbox" if not signalled else f"PID {harness} can be signalled",
    )
    canary = int(targets.get("canary_port", 0))
    reached = bool(canary) and _connects(canary)
    note(
        "connect to 127.0.0.1 outside the case's MCP server and proxy",
        not reached,
        f"port {canary} refused" if not reached else f"port {canary} reached",
    )
    for name, port in targets.get("services", {}).items():
        up = _connects(int(port))
        note(f"reach the case's {name}", up, f"port {port} " + ("reached" if up else "refused"))
    _leave_behind(str(targets.get("marker", "gta-probe")))
    return json.dumps(findings)
