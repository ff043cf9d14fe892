"""Running a test's program as an unprivileged user of its own, from a root test run.

As root, the unprivileged halves of the sandbox tests run a program as :data:`USER_UID` (no
account needed) through ``setpriv``, in a private mount namespace where any directory above
Python or this checkout that others cannot enter (a ``0700`` home) is opened to it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers.optional import require
from tests.helpers.paths import ROOT
from tool_backends.sandbox_tree import python_paths

#: A uid no account uses: an unprivileged user of its own, so that its process count (which
#: ``RLIMIT_NPROC`` limits) is this test's alone.
USER_UID = 64_123


def blocked_directories(paths: list[str]) -> list[str]:
    """The top-most directories on the way to ``paths`` that others cannot enter."""
    found: list[str] = []
    for path in paths:
        for parent in reversed(Path(path).parents):
            name = str(parent)
            if name != "/" and not os.stat(name).st_mode & 0o001:
                if not any(name == f or name.startswith(f + "/") for f in found):
                    found.append(name)
                break
    return found


def as_user(argv: list[str], stash_root: Path) -> list[str]:
    """``argv`` as :data:`USER_UID`, with the directories it must reach opened to it.

    Each blocked directory is bound to a mount point under ``stash_root`` first (an empty
    directory on the host: the mounts live in the private namespace only).
    """
    needed = [
        os.path.realpath(p)
        for p in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)))
    ] + [str(ROOT), *python_paths()]
    steps = ["set -e"]
    for number, blocked in enumerate(blocked_directories(needed)):
        stash = str(stash_root / str(number))
        os.mkdir(stash)
        steps += [
            f"mount --bind {shlex.quote(blocked)} {stash}",
            f"mount -t tmpfs -o mode=0755 gta-open {shlex.quote(blocked)}",
        ]
        for path in needed:
            if path.startswith(blocked + "/"):
                inside = shlex.quote(path)
                source = shlex.quote(stash + path[len(blocked) :])
                make = f"mkdir -p {inside}" if os.path.isdir(path) else f"touch {inside}"
                steps.append(f"[ -e {inside} ] || {make}; mount --bind {source} {inside}")
    uid = str(USER_UID)
    steps.append(f'exec setpriv --reuid {uid} --regid {uid} --clear-groups -- "$@"')
    script = "\n".join(steps)
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", *argv]


def run_json(argv: list[str], *, user: bool, env: dict[str, str]) -> dict:
    """Run ``argv`` (as :data:`USER_UID` when ``user``, else as root) and read its last line.

    The program gets ``env`` besides ``PATH``, the checkout on ``PYTHONPATH`` and a ``HOME``
    of its own; it must exit 0 and print one JSON object last.
    """
    home = Path(tempfile.mkdtemp(prefix="gta-user-home-"))
    if user and os.geteuid() == 0:
        require("util-linux")  # setpriv and unshare, to run as another user
        if subprocess.run(["unshare", "--mount", "true"], check=False).returncode != 0:
            pytest.skip("running as another user needs a mount namespace (unshare --mount)")
        os.chown(home, USER_UID, USER_UID)
        argv = as_user(argv, Path(tempfile.mkdtemp(prefix="stash-", dir=home)))
    elif not user and os.geteuid() != 0:
        pytest.skip("the root half of this test needs root")
    full = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "HOME": str(home),
        **env,
    }
    try:
        out = subprocess.run(argv, env=full, capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-4000:]
    result: dict = json.loads(out.stdout.splitlines()[-1])
    return result
