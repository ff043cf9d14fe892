"""Where a run came from: the git state of the project under test, and the run's dates.

A model team keeps its nightly reports and sets them side by side (``--gta-compare``); each
report says which commit of the project ran and when (the report's ``identity``). The commit
is read with the ``git`` program (no library: git's own answer for whatever repository layout,
worktree or submodule the project uses), in a background thread started with the session, so a
slow ``git status`` in a large checkout never holds the run up, and every failure (no git, not
a repository, a repository git refuses as another user's, a timeout) is simply "no git state".

What is recorded is the commit, its short form, whether tracked files differ from it and the
branch: never a remote URL, which can carry a token (``https://user:token@host/...``).
"""

from __future__ import annotations

import os
import subprocess
import threading
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

#: Seconds one git command may take; ``git status`` in a very large checkout is the slow one.
GIT_TIMEOUT = 10.0
#: git's environment variables that would make it read another repository or index than the
#: one around the directory (``GIT_DIR``, ``GIT_WORK_TREE``, ``GIT_INDEX_FILE``, ...): a
#: variable left by a hook or a wrapper script must not change what the report says ran.
GIT_ENV_PREFIX = "GIT_"
#: How reports write a date: ISO 8601, UTC, to the second (``2026-02-01T03:04:05Z``).
UTC_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class GitState:
    """The project's commit as the report's ``identity.git`` has it."""

    #: The full object name (40 hex digits; 64 in a SHA-256 repository).
    commit: str
    #: git's unambiguous abbreviation of it.
    short: str
    #: Whether tracked files differ from the commit (``None``: ``git status`` did not answer).
    dirty: bool | None
    #: The branch checked out (``None``: a detached HEAD, as in most CI checkouts).
    branch: str | None


def git_environment() -> dict[str, str]:
    """This process's environment without git's redirecting variables, for a git command.

    ``GIT_OPTIONAL_LOCKS=0`` keeps ``git status`` from refreshing (and locking) the index,
    which could fail a ``git commit`` the user runs at that moment; ``LC_ALL=C`` keeps
    messages unlocalised.
    """
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(GIT_ENV_PREFIX)}
    env.update({"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
    return env


def _git(directory: Path, args: list[str], env: dict[str, str], timeout: float) -> str | None:
    """``git -C directory *args``'s standard output, or ``None`` if it failed in any way."""
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None  # no git, a timeout, a directory name git cannot be given
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", "replace").strip()


def _is_object_name(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


def git_state(directory: Path, *, timeout: float = GIT_TIMEOUT) -> GitState | None:
    """The git state of the repository containing ``directory``; ``None`` if there is none.

    ``None`` also where git is missing, refuses the repository (another user's, without
    ``safe.directory``), it has no commit yet, or a command takes longer than ``timeout``.
    """
    env = git_environment()
    commit = _git(directory, ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], env, timeout)
    if commit is None or not _is_object_name(commit):
        return None
    short = _git(directory, ["rev-parse", "--short", commit], env, timeout)
    branch = _git(directory, ["symbolic-ref", "--quiet", "--short", "HEAD"], env, timeout)
    status = _git(directory, ["status", "--porcelain", "--untracked-files=no"], env, timeout)
    return GitState(
        commit=commit,
        short=short if short and commit.startswith(short) else commit[:12],
        dirty=None if status is None else bool(status),
        branch=branch or None,
    )


class GitProbe:
    """:func:`git_state` in a daemon thread, started now and asked for at the end of the run."""

    def __init__(self, directory: Path, *, timeout: float = GIT_TIMEOUT) -> None:
        self._timeout = timeout
        self._state: GitState | None = None
        self._thread = threading.Thread(
            target=self._run, args=(directory,), name="gta-git-probe", daemon=True
        )
        self._thread.start()

    def _run(self, directory: Path) -> None:
        try:
            self._state = git_state(directory, timeout=self._timeout)
        except Exception:  # a probe never fails the run: the report then says no git state
            self._state = None

    def result(self) -> GitState | None:
        """The state, waiting for the probe at most as long as its commands may take."""
        self._thread.join(self._timeout * 4)
        return None if self._thread.is_alive() else self._state


#: Characters a label may not hold besides the C0/C1 controls: line and paragraph separators
#: and the bidirectional overrides and isolates, which reorder what a terminal or a page shows
#: after them (CVE-2021-42574's "Trojan Source").
_HIDDEN = frozenset("\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def label_problem(label: str) -> str | None:
    """Why ``label`` cannot name a run (empty, a control character), or ``None`` if it can.

    A label is printed in terminal tables, markdown and HTML beside other runs' labels, so it
    must be one visible line.
    """
    if not label.strip():
        return "a label cannot be empty"
    for char in label:
        if unicodedata.category(char) == "Cc" or char in _HIDDEN:
            return f"a label cannot hold the control character U+{ord(char):04X}"
    return None


def utc_now() -> str:
    """Now, as reports write dates (:data:`UTC_FORMAT`)."""
    return datetime.now(timezone.utc).strftime(UTC_FORMAT)


def parse_utc(text: str) -> datetime | None:
    """A report's date as an aware datetime; ``None`` unless ISO 8601 with a time zone."""
    try:
        # ``Z`` is ISO 8601's UTC; Python reads it only from 3.11 on.
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except (ValueError, TypeError):
        return None
    return parsed if parsed.tzinfo is not None else None
