"""An agent program run once per case (``--gta-agent-command``), and nothing of it left behind.

The template is split like a shell would (``shlex``) but run without one, each placeholder
(:data:`~pytest_gta.vocabulary.AGENT_PLACEHOLDERS`) filled in one word, so a query text or a
URL never becomes syntax. The program starts under :mod:`pytest_gta.process_guard` as the
leader of a new process group: the whole group (the agent and every process it started, a
``sleep 1000 &`` included) is stopped with SIGTERM then SIGKILL on timeout, and SIGKILLed
whenever the case ends, however it ends (an answer, a crash, Ctrl-C or SIGTERM of pytest:
:func:`stop_all` runs from the interrupt handler for agents in the pool's threads); if pytest
itself is killed, the guard sees its parent gone and stops the group.

The program's environment is an allow-list, as the sandbox's is (tool_backends/sandbox_tree.py):
the locale, ``PATH`` (an agent is a program found on it), a scratch ``HOME`` and ``TMPDIR``,
the names ``--gta-agent-env`` passes on, and what the harness hands it: ``GTA_MCP_URL``,
``GTA_QUERY_FILE``, ``GTA_ANSWER_FILE``, ``GTA_CASE_ID``, ``GTA_MODEL`` and, when the model has a
proxy, ``OPENAI_BASE_URL``/``ANTHROPIC_BASE_URL`` with a placeholder key (the proxy adds the
real one), so SDKs that read those variables go through the proxy untouched. No API key of
the user's environment reaches the program unless ``--gta-agent-env`` names it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from io import BufferedReader
from pathlib import Path
from typing import cast

from pytest_gta import process_guard
from pytest_gta.flags import OPT_AGENT_TIMEOUT
from pytest_gta.run.agent_under_test import AgentFailed, AgentOutcome, AgentTask, tail

#: Variables of the user's environment every agent program gets: none holds a credential.
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME")
#: The API key an agent's SDK is given for the proxy, which ignores it and adds the real one.
PROXY_KEY = "gta-proxy"
#: Seconds between SIGTERM and SIGKILL of a timed-out agent's process group.
GRACE_S = 2.0
#: Bytes of stdout (or of the answer file) read as the answer; an answer is a few sentences.
MAX_ANSWER_BYTES = 1 << 20
#: Bytes of stderr kept (its end: where a traceback's message is).
STDERR_KEPT = 16 << 10
#: How long the output readers may take to finish once the group is dead.
READER_JOIN_S = 5.0

#: Process groups of agents running now, for :func:`stop_all` (a dict: insertion-ordered).
_live: dict[int, None] = {}


def template_placeholders(template: str) -> set[str]:
    """The placeholders ``template`` names (it was checked when the option was read)."""
    names = set()
    for word in shlex.split(template):
        for _, name, _, _ in string.Formatter().parse(word):
            if name is not None:
                names.add(name)
    return names


def stop_all() -> None:
    """SIGKILL every running agent's process group (pytest is interrupted or ending).

    Lock-free, as a signal handler must be: it only reads a snapshot of the live groups.
    """
    for group in list(_live):
        _kill(group, signal.SIGKILL)


def _kill(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass


def agent_environment(
    task: AgentTask,
    workdir: Path,
    files: Mapping[str, Path],
    passed: tuple[str, ...],
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of one agent run (see the module docstring)."""
    source = os.environ if environ is None else environ
    env = {name: source[name] for name in PASSED_ENV if name in source}
    env["HOME"] = str(workdir)
    env["TMPDIR"] = str(workdir / "tmp")
    env["GTA_CASE_ID"] = task.case_id
    env["GTA_MODEL"] = task.model
    env["GTA_QUERY_FILE"] = str(files["query_file"])
    env["GTA_ANSWER_FILE"] = str(files["answer_file"])
    if task.mcp_url is not None:
        env["GTA_MCP_URL"] = task.mcp_url
    if task.model_url is not None:
        env["OPENAI_BASE_URL"] = task.model_url
        env["OPENAI_API_KEY"] = PROXY_KEY
    if task.anthropic_url is not None:
        env["ANTHROPIC_BASE_URL"] = task.anthropic_url
        env["ANTHROPIC_API_KEY"] = PROXY_KEY
    # Named on purpose by the user: they win over every default above.
    env.update({name: source[name] for name in passed if name in source})
    return env


class _Reader(threading.Thread):
    """Drains one pipe: keeps its first ``head`` bytes or its last ``keep`` bytes."""

    def __init__(self, pipe: BufferedReader, *, head: int = 0, keep: int = 0) -> None:
        super().__init__(daemon=True, name="gta-agent-output")
        self._pipe = pipe
        self._head = head
        self._keep = keep
        self.data = bytearray()
        self.total = 0

    def run(self) -> None:
        try:
            while chunk := self._pipe.read1(65536):
                self.total += len(chunk)
                if self._head:
                    room = self._head - len(self.data)
                    if room > 0:
                        self.data += chunk[:room]
                else:
                    self.data += chunk
                    if len(self.data) > self._keep:
                        del self.data[: len(self.data) - self._keep]
        except (OSError, ValueError):
            pass
        finally:
            self._pipe.close()


def decode_output(data: bytes) -> str:
    """Output as text: undecodable bytes (a binary dump) become U+FFFD, NULs dropped."""
    return data.decode("utf-8", errors="replace").replace("\x00", "")


class CommandAgent:
    """An agent program: one process group per case, answer from stdout or ``{answer_file}``."""

    command = True

    def __init__(self, template: str, passed_env: tuple[str, ...] = ()) -> None:
        self.name = template
        self._words = shlex.split(template)
        self._passed = passed_env

    def run(self, task: AgentTask, timeout: float) -> AgentOutcome:
        """Run the program for ``task``; its answer, or :class:`AgentFailed`.

        The answer is ``{answer_file}`` when the program wrote it, else its whole stdout,
        stripped; a non-zero exit status, or no answer within ``timeout``, fails the case with
        the status and the end of its stderr.
        """
        workdir = Path(tempfile.mkdtemp(prefix=f"gta-agent-{_safe(task.case_id)}-"))
        try:
            return self._run(task, timeout, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _run(self, task: AgentTask, timeout: float, workdir: Path) -> AgentOutcome:
        (workdir / "tmp").mkdir()
        files = {"query_file": workdir / "query.json", "answer_file": workdir / "answer.txt"}
        task.write_query_file(files["query_file"])
        values = {
            "mcp_url": task.mcp_url,
            "query_file": str(files["query_file"]),
            "model_url": task.model_url,
            "anthropic_url": task.anthropic_url,
            "model": task.model,
            "answer_file": str(files["answer_file"]),
            "output_file": str(files["answer_file"]),
            "case_id": task.case_id,
        }
        missing = sorted(
            name for name in template_placeholders(self.name) if values.get(name) is None
        )
        if missing:
            raise AgentFailed(
                f"agent command names {', '.join('{' + m + '}' for m in missing)}, which this "
                "run has no value for (the model replays recorded predictions: nothing to ask)"
            )
        words = [word.format(**values) for word in self._words]
        env = agent_environment(task, workdir, files, self._passed)
        guard = [sys.executable, "-I", process_guard.__file__, str(os.getpid()), str(GRACE_S)]
        started = time.monotonic()
        process = subprocess.Popen(
            [*guard, "--", *words],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        group = process.pid
        _live[group] = None
        assert process.stdout is not None
        assert process.stderr is not None
        out = _Reader(cast(BufferedReader, process.stdout), head=MAX_ANSWER_BYTES)
        err = _Reader(cast(BufferedReader, process.stderr), keep=STDERR_KEPT)
        out.start()
        err.start()
        timed_out = False
        try:
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill(group, signal.SIGTERM)
                try:
                    process.wait(GRACE_S + 1)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            # Always, however the case ends: whatever the agent left running in its group.
            _kill(group, signal.SIGKILL)
            process.wait()
            _live.pop(group, None)
            out.join(READER_JOIN_S)
            err.join(READER_JOIN_S)
        duration = time.monotonic() - started
        status = process.returncode
        outcome = AgentOutcome(
            self.name,
            exit_status=None if timed_out else status,
            stderr_tail=tail(decode_output(bytes(err.data))),
            timed_out=timed_out,
            duration=duration,
        )
        if timed_out:
            raise AgentFailed(
                f"agent gave no answer within {timeout:g} s ({OPT_AGENT_TIMEOUT}); its process "
                f"group was stopped{_last_line(outcome)}",
                outcome,
                outcome.stderr_tail,
            )
        if status != 0:
            raise AgentFailed(
                f"agent exited with status {status}{_last_line(outcome)}",
                outcome,
                outcome.stderr_tail,
            )
        answer_file = files["answer_file"]
        if answer_file.is_file():
            with open(answer_file, "rb") as handle:
                outcome.answer = decode_output(handle.read(MAX_ANSWER_BYTES)).strip()
        else:
            outcome.answer = decode_output(bytes(out.data)).strip()
        return outcome


def _last_line(outcome: AgentOutcome) -> str:
    """``; its stderr ends: LINE`` (a traceback's last line is its message), or nothing."""
    lines = outcome.stderr_tail.strip().splitlines()
    return f"; its stderr ends: {lines[-1][:300]}" if lines else ""


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)[:40]
