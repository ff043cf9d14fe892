"""A cheating agent, as a program and as a callable, for runs from an installed wheel.

A user's agent file, copied into the user's own (empty) directory by the test: it imports
nothing of the checkout. Whatever it manages to read or reach it answers as JSON, so an
isolated run must see ``{}`` for every case. It tries the answers (the dataset beside its
input images, the bundled sample and the package wherever an installed ``pytest_gta`` could
be), other processes' environments (the harness's API key), the canary ports the test opened
on the host's loopback, and leaves a double-forked daemon named by ``$GTA_MARKER`` behind.

``python wheel_cheat.py QUERY_FILE`` (the program) or ``wheel_cheat.py:cheat`` (the callable).
"""

from __future__ import annotations

import glob
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

#: Where an installed package could lie, from every Python's point of view on this machine.
PATTERNS = (
    "/tmp/*/*/*/lib/python3*/site-packages/pytest_gta",
    "/tmp/*/*/lib/python3*/site-packages/pytest_gta",
    "/root/.pyenv/versions/*/lib/python3*/site-packages/pytest_gta",
    "/usr/lib/python3*/site-packages/pytest_gta",
    "/usr/local/lib/python3*/*-packages/pytest_gta",
)


def _read(path: Path, got: dict[str, Any]) -> None:
    try:
        got[str(path)] = path.read_bytes()[:40].decode("utf-8", "replace")
    except OSError:
        pass


def attempts(images: list[str]) -> dict[str, Any]:
    """Everything this agent should not get; what it got."""
    got: dict[str, Any] = {}
    for image in images:
        here = Path(image).parent
        for name in ("dataset.json", "../dataset.json", "end.json"):
            _read(here / name, got)
        try:
            others = sorted(set(os.listdir(here)) - {Path(i).name for i in images})
        except OSError:
            others = []
        if others:
            got[f"other inputs beside {here}"] = others[:5]
    packages = [Path(p) for pattern in PATTERNS for p in glob.glob(pattern)]
    for package in packages:
        for name in ("__init__.py", "_sample/dataset.json", "_workflow_sample/end.json"):
            _read(package / name, got)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if b"sk-" in (entry / "environ").read_bytes():
                    got[f"environ {entry.name}"] = "has a key"
            except OSError:
                pass
    for port in (int(p) for p in os.environ.get("GTA_CANARY_PORTS", "").split(",") if p):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            got[f"port {port}"] = "reached"
        except OSError:
            pass
    if "sk-" in json.dumps(dict(os.environ)):
        got["own environment"] = "has a key"
    return got


def leave(marker: str) -> None:
    """A child and a double-forked ``setsid`` grandchild, each named by ``marker``."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(1000)", marker]
    subprocess.Popen(sleeper)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, sleeper)
        os._exit(0)
    os.wait()


def cheat(task: Any) -> str:
    """The callable: the same attempts, with the task's input paths."""
    if os.environ.get("GTA_MARKER"):
        leave(f"{os.environ['GTA_MARKER']}-{task.case_id}")
    return json.dumps(attempts(list(task.image_paths)))


def main(query_file: str) -> int:
    task = json.loads(Path(query_file).read_text("utf-8"))
    if os.environ.get("GTA_MARKER"):
        leave(f"{os.environ['GTA_MARKER']}-{task['case_id']}")
    print(json.dumps(attempts(list(task["images"]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
