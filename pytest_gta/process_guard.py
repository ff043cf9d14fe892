"""Runs a model server and takes it down when the pytest process that started it is gone.

``python -m pytest_gta.process_guard PARENT_PID GRACE -- COMMAND...``: pytest starts it as the
leader of a new process group; the guard starts the server in that group and watches. pytest
stops the server by signalling the group, and the guard passes the exit on. If pytest itself
dies without stopping it (``kill -9``, an out-of-memory kill, a crashed CI runner), the guard is
reparented and stops the group itself, so no server is left holding the GPU. Polling
``getppid`` is portable across POSIX systems, unlike Linux's ``PR_SET_PDEATHSIG``, which fires
when the parent *thread* exits.

Exit status: the server's own when it exits by itself (so pytest can report it), 127 when the
command cannot be started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType

#: How often the guard looks at its parent and the server.
POLL_S = 0.2


def stop_group(child: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the group (the server and its workers), then SIGKILL once ``grace`` is over."""
    group = os.getpgrp()
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        child.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    # Whatever is left of the group (the guard included: it has nothing more to do).
    os.killpg(group, signal.SIGKILL)


def main(argv: list[str]) -> int:
    """Start ``COMMAND`` and watch it and the parent; see the module docstring."""
    parent, grace, sep, *command = argv
    if sep != "--" or not command:
        sys.stderr.write(
            "usage: python -m pytest_gta.process_guard PARENT_PID GRACE -- COMMAND...\n"
        )
        return 2
    stopping: list[int] = []

    def on_term(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)

    # pytest stops the server by signalling the whole group; the guard hears it as a request.
    signal.signal(signal.SIGTERM, on_term)
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        sys.stderr.write(f"pytest-gta: cannot start {command[0]!r}: {exc}\n")
        return 127
    while True:
        try:
            # Returns as soon as the command exits (an agent run per case waits on the guard).
            return child.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            pass
        if stopping or os.getppid() != int(parent):
            stop_group(child, float(grace))
            return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
