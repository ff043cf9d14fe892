"""The agent is isolated on a user's install: the wheel, non-editable, from an empty directory.

Issue 38: from a wheel the bundled sample lies inside the installed package, which the sandbox
hides; hiding it inside the hidden package once made bubblewrap fail, and the agent ran
unisolated without a word. Here the wheel is installed in a fresh virtualenv
(:mod:`tests.helpers.wheel_install`; the documented user's install, the one
tests/test_doc_commands.py runs the docs in) and with ``pip install --user``, and a cheating
agent (:mod:`tests.helpers.wheel_cheat`, copied into the user's empty directory) runs as a
program and as a callable, as root and as an unprivileged user: it gets nothing (no answer, no
key, no other process, no port), leaves nothing running, and the report's isolation section
says so.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers.as_user import USER_UID, as_user
from tests.helpers.optional import require
from tests.helpers.paths import HELPERS
from tests.helpers.processes import processes_named
from tests.helpers.wheel_install import (
    DOCUMENTED_EXTRAS,
    DOCUMENTED_MODELS,
    interpreter_key,
    user_environment,
    user_site_python,
    wheel_python,
)

SECRET = "sk-wheel-isolation-5e4d3c2b1a"
#: The agent, as a user names their own file (the program by its absolute path: a relative one
#: is the user-path tests' subject).
AGENT = {
    "command": "--gta-agent-command={python} {where}/wheel_cheat.py {{query_file}}",
    "callable": "--gta-agent=wheel_cheat.py:cheat",
}


def installed(kind: str) -> tuple[Path, dict[str, str]]:
    """The interpreter that has the wheel, and its variables: a virtualenv, or ``--user``."""
    require("bubblewrap")
    if kind == "venv":
        return wheel_python(DOCUMENTED_EXTRAS, DOCUMENTED_MODELS), {}
    return user_site_python(("agents",))


def user_directory() -> Path:
    """A new directory of the user's, holding their agent file (and nothing else)."""
    where = Path(tempfile.mkdtemp(prefix="gta-wheel-user-"))
    where.chmod(0o755)
    shutil.copy(HELPERS / "wheel_cheat.py", where / "wheel_cheat.py")
    return where


def run_as(python: Path, where: Path, args: list[str], *, user: bool, env: dict[str, str]) -> int:
    """pytest from ``python``'s installation in ``where``; its exit status (output kept there)."""
    full = user_environment({**env, "HOME": str(where)})
    scripts = Path(env["PYTHONUSERBASE"]) / "bin" if "PYTHONUSERBASE" in env else python.parent
    full["PATH"] = f"{scripts}{os.pathsep}{full.get('PATH', '/usr/bin:/bin')}"
    argv = [str(python), "-m", "pytest", "-p", "no:cacheprovider", *args]
    if user:
        require("util-linux")
        for path in [where, *where.iterdir()]:
            os.chown(path, USER_UID, USER_UID)
        stash = Path(tempfile.mkdtemp(prefix="stash-"))
        argv = as_user(argv, stash)
    out = subprocess.run(argv, cwd=where, env=full, capture_output=True, text=True, timeout=600)
    (where / "output.txt").write_text(out.stdout + out.stderr)
    return out.returncode


@pytest.mark.slow
@pytest.mark.parametrize(
    ("install", "user", "kind"),
    [
        ("venv", False, "command"),
        ("venv", False, "callable"),
        ("venv", True, "command"),
        ("venv", True, "callable"),
        ("user-site", False, "command"),
        ("user-site", False, "callable"),
    ],
    ids=lambda value: {False: "root", True: "user"}.get(value, value),
)
def test_a_cheating_agent_gets_nothing_from_a_wheel_install(install, user, kind):
    if user and os.geteuid() != 0:
        pytest.skip("runs as another user from a root test run")
    python, variables = installed(install)
    marker = f"gta-wheel-cheat-{os.getpid()}-{kind}-{int(user)}"
    with socket.socket() as canary:
        canary.bind(("127.0.0.1", 0))
        canary.listen(8)
        env = {
            **variables,
            "OPENAI_API_KEY": SECRET,
            "GTA_MARKER": marker,
            "GTA_CANARY_PORTS": str(canary.getsockname()[1]),
        }
        where = user_directory()
        status = run_as(
            python,
            where,
            [
                "--gta-model=oracle",
                "--gta-data=sample",
                "--gta-ids=0,3",
                "--gta-tools=replay",
                "--gta-sim-model=all-MiniLM-L6-v2",
                "--gta-agent-env=GTA_MARKER,GTA_CANARY_PORTS",
                "--gta-require-isolation",
                AGENT[kind].format(python=python, where=where),
                "--gta-report=gta.json",
                "--junitxml=gta.xml",
            ],
            user=user,
            env=env,
        )
    output = (where / "output.txt").read_text()
    assert status == 1, output[-3000:]  # the cheater answers "{}": its cases fail, none errors
    report = json.loads((where / "gta.json").read_text())
    isolation = report["settings"]["agent"]["isolation"]
    assert isolation["isolated"] is True, output[-3000:]
    assert isolation["mechanism"] == "bubblewrap"
    assert isolation["gaps"] == []
    assert len(isolation["probe"]) >= 8
    assert all(f["held"] for f in isolation["probe"]), isolation["probe"]
    checks = [f["check"] for f in isolation["probe"]]
    assert any("site-packages/pytest_gta/_sample/dataset.json" in c for c in checks), checks
    assert "gta: agent sandbox probe: 8 of 8 attempts of a cheating agent held" in output
    # The cases were forked from the warm sandbox: the sample's directory, inside the hidden
    # package, had its mount point for the case's inputs (once a silent fallback, issue 38).
    assert "could not be forked" not in output, output[-3000:]
    answers = {case["id"]: case["agent"]["answer"] for case in report["cases"]}
    assert sorted(answers) == ["e2e-0", "e2e-3"]
    assert all(json.loads(a) == {} for a in answers.values()), answers
    assert processes_named(marker) == []
    for written in where.rglob("*"):
        if written.is_file():
            assert SECRET not in written.read_text(errors="replace"), written


def test_a_kept_install_is_reused_only_by_the_interpreter_that_made_it(tmp_path: Path) -> None:
    """The same python through a link shares the install; another python does not (a kept
    virtualenv of another checkout's python once linked a python this user could not reach)."""
    link = tmp_path / "python"
    link.symlink_to(sys.executable)
    assert interpreter_key(link) == interpreter_key(sys.executable)
    assert interpreter_key(tmp_path / "other-python") != interpreter_key(sys.executable)
