"""An agent under test run in its sandbox, one per case: a program, or a callable in a worker.

The template (``--gta-agent-command``) is split like a shell would (``shlex``) but run without
one, each placeholder (:data:`~pytest_gta.vocabulary.AGENT_PLACEHOLDERS`) filled in one word, so a
query text or a URL never becomes syntax; the sandbox's launcher fills them, since only it knows
where the case's query and answer files are. A callable (``--gta-agent``) runs alike, in a
worker process of the sandbox that imports it and calls it with the same :class:`AgentTask`
(its tool calls relayed to the case's tools). The sandbox (:mod:`pytest_gta.jail`) shows the
agent its own files, its case's inputs and nothing of the harness, and takes down every process
of the case when it ends, however it ends (an answer, a crash, the timeout, Ctrl-C or SIGTERM of
pytest: :func:`stop_all` runs from the interrupt handler); if pytest itself is killed, the guard
in front of the sandbox sees its parent gone and stops it.

The agent's environment is an allow-list, as model-written code's is: the locale, ``PATH``, a
scratch ``HOME`` and ``TMPDIR``, the names ``--gta-agent-env`` passes on, and what the harness
hands it: ``GTA_MCP_URL``, ``GTA_QUERY_FILE``, ``GTA_ANSWER_FILE``, ``GTA_CASE_ID``, ``GTA_MODEL``
and, when the model has a proxy, ``OPENAI_BASE_URL``/``ANTHROPIC_BASE_URL`` with a placeholder
key (the proxy adds the real one), so SDKs that read those variables go through the proxy
untouched. No API key of the user's environment reaches the agent unless ``--gta-agent-env``
names it.
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import os
import shlex
import string
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_gta import jail, outward
from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_AGENT, OPT_AGENT_TIMEOUT
from pytest_gta.jail import Jail, Job, JobOutcome
from pytest_gta.run.agent_under_test import AgentFailed, AgentOutcome, AgentTask, tail
from pytest_gta.types import Usage

#: Variables of the user's environment every agent program gets: none holds a credential.
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME")
#: The API key an agent's SDK is given for the proxy, which ignores it and adds the real one.
PROXY_KEY = "gta-proxy"


def template_placeholders(template: str) -> set[str]:
    """The placeholders ``template`` names (it was checked when the option was read)."""
    names = set()
    for word in shlex.split(template):
        for _, name, _, _ in string.Formatter().parse(word):
            if name is not None:
                names.add(name)
    return names


def stop_all() -> None:
    """Kill every running agent's sandbox (pytest is interrupted or ending); lock-free."""
    jail.stop_all()


def agent_environment(
    task: AgentTask, passed: tuple[str, ...], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of one agent run but its paths (``HOME``, ``TMPDIR``, ``GTA_*_FILE``).

    Those the launcher adds: only it knows where the scratch directory is.
    """
    source = os.environ if environ is None else environ
    env = {name: source[name] for name in PASSED_ENV if name in source}
    env["GTA_CASE_ID"] = task.case_id
    env["GTA_MODEL"] = task.model
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


def services(task: AgentTask) -> dict[str, str]:
    """The URLs the case's sandbox reaches: its MCP server and its proxy."""
    found = {"MCP server": task.mcp_url, "model proxy": task.model_url}
    return {name: url for name, url in found.items() if url}


class CommandAgent:
    """An agent program: one sandbox per case, answer from ``{answer_file}`` or stdout."""

    command = True

    def __init__(self, template: str, jail: Jail, passed_env: tuple[str, ...] = ()) -> None:
        self.name = template
        self._words = shlex.split(template)
        self._passed = passed_env
        self._jail = jail
        self.bridged = jail.bridged

    def run(self, task: AgentTask, timeout: float) -> AgentOutcome:
        """Run the program for ``task``; its answer, or :class:`AgentFailed`.

        The answer is ``{answer_file}`` when the program wrote it (a regular file: a link is
        not followed), else its whole stdout, stripped; a non-zero exit status, or no answer
        within ``timeout``, fails the case with the status and the end of its stderr.
        """
        values = {
            "mcp_url": task.mcp_url,
            "model_url": task.model_url,
            "anthropic_url": task.anthropic_url,
            "model": task.model,
            "case_id": task.case_id,
        }
        missing = sorted(
            name
            for name in template_placeholders(self.name)
            if name in values and values[name] is None
        )
        if missing:
            raise AgentFailed(
                f"agent command names {', '.join('{' + m + '}' for m in missing)}, which this "
                "run has no value for (the model replays recorded predictions: nothing to ask)"
            )
        job = Job(
            "command",
            task.to_json(),
            agent_environment(task, self._passed),
            timeout,
            argv=tuple(self._words),
            values={k: v for k, v in values.items() if v is not None},
            show=task.image_paths,
            services=services(task),
        )
        ran = self._jail.run(job)
        save_deliverables(task.deliverables_dir, ran.deliverables)
        outcome = outcome_of(self.name, ran)
        check_exit(outcome, timeout)
        answer = ran.answer_file if ran.answer_file is not None else ran.stdout
        outcome.answer = answer.strip()
        return outcome


def save_deliverables(directory: Path | None, files: list[tuple[str, bytes]]) -> list[Path]:
    """Write what the agent left in ``{deliverables_dir}`` into the case's own directory.

    A name that is absolute, empty or climbs out (``..``) is left out, and nothing is written
    through a link: the directory is the harness's, the names are the agent's.
    """
    if directory is None:
        return []
    written: list[Path] = []
    root = Path(directory)
    for name, data in files:
        parts = Path(name).parts
        if not parts or Path(name).is_absolute() or any(p in ("..", ".", "") for p in parts):
            continue
        target = root.joinpath(*parts)
        try:
            for parent in reversed(target.relative_to(root).parents):
                folder = root / parent
                if folder.is_symlink():
                    raise OSError(f"{folder} is a link")
                folder.mkdir(exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(target, flags, 0o644)
        except OSError:
            continue
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        written.append(target)
    return written


def outcome_of(name: str, ran: JobOutcome) -> AgentOutcome:
    """What the report keeps of a run in the sandbox (the answer is the caller's to add)."""
    return AgentOutcome(
        name,
        exit_status=None if ran.timed_out else ran.exit_status,
        stderr_tail=tail(ran.stderr_tail),
        timed_out=ran.timed_out,
        duration=ran.duration,
    )


def check_exit(outcome: AgentOutcome, timeout: float) -> None:
    """Fail the case of an agent that ran out of time or exited with a non-zero status.

    Raises:
        AgentFailed: saying which, with the end of its stderr.
    """
    if outcome.timed_out:
        raise AgentFailed(
            f"agent gave no answer within {timeout:g} s ({OPT_AGENT_TIMEOUT}); its sandbox "
            f"was stopped{_last_line(outcome)}",
            outcome,
            outcome.stderr_tail,
        )
    if outcome.exit_status not in (0, None):
        raise AgentFailed(
            f"agent exited with status {outcome.exit_status}{_last_line(outcome)}",
            outcome,
            outcome.stderr_tail,
        )


class SandboxedPythonAgent:
    """A sync or async callable, imported and called in a worker process of its sandbox.

    ``spec`` is what the worker imports (:func:`callable_spec`); the task it gets has the
    fields and methods of :class:`AgentTask`, its ``tools`` relayed to the case's tools.
    """

    command = False

    def __init__(
        self, name: str, spec: Mapping[str, Any], jail: Jail, passed_env: tuple[str, ...] = ()
    ) -> None:
        self.name = name
        self._spec = dict(spec)
        self._jail = jail
        self._passed = passed_env
        self.bridged = jail.bridged

    def run(self, task: AgentTask, timeout: float) -> AgentOutcome:
        """Call the agent in its sandbox; its answer, or :class:`AgentFailed`."""
        job = Job(
            "callable",
            task.to_json(),
            agent_environment(task, self._passed),
            timeout,
            spec=self._spec,
            show=task.image_paths,
            services=services(task),
            on_call=task.tools.call_json,
        )
        ran = self._jail.run(job)
        save_deliverables(task.deliverables_dir, ran.deliverables)
        outcome = outcome_of(self.name, ran)
        if ran.timed_out:
            task.tools.close()
            raise AgentFailed(
                f"agent {self.name} gave no answer within {timeout:g} s ({OPT_AGENT_TIMEOUT})",
                outcome,
            )
        error = ran.result.get("error")
        if isinstance(error, dict):
            outcome.stderr_tail = tail(str(error.get("traceback", "")))
            said = outward.clip(" ".join(str(error.get("message", "")).split()), 300)
            raise AgentFailed(
                f"agent {self.name} raised {error.get('type', 'an exception')}: {said}",
                outcome,
                outcome.stderr_tail,
            )
        result = ran.result.get("result")
        if not isinstance(result, dict):
            check_exit(outcome, timeout)
            raise AgentFailed(
                f"agent {self.name}'s worker ended without a result{_last_line(outcome)}",
                outcome,
                outcome.stderr_tail,
            )
        answer = result.get("answer")
        if not isinstance(answer, str):
            kind = result.get("answer_type", "NoneType")
            raise AgentFailed(
                f"agent {self.name} returned {kind}; return the final answer text or an "
                "AgentResult(answer, images, usage)",
                outcome,
            )
        outcome.answer = answer
        outcome.images = tuple(str(p) for p in result.get("images") or ())
        usage = result.get("usage")
        if isinstance(usage, dict):
            outcome.usage = Usage(**{k: int(v) for k, v in usage.items() if k in USAGE_FIELDS})
        return outcome


USAGE_FIELDS = ("input_tokens", "output_tokens", "calls", "cached_calls")
#: The task's fields, for the worker's stand-in of :class:`AgentTask` (the same, always).
TASK = {"task_fields": [f.name for f in dataclasses.fields(AgentTask)]}


def callable_spec(spec: str, base: Path) -> dict[str, Any]:
    """What the sandbox's worker imports for ``MODULE:CALLABLE`` or ``path/file.py:CALLABLE``.

    Found without importing anything here (the module is the agent's code, and runs only in
    its sandbox): a file relative to ``base``, or a top-level module on ``base`` and
    ``sys.path``. ``show`` is what the sandbox must show of it.

    Raises:
        GtaUsageError: no such file or module.
    """
    target, _, attr = spec.rpartition(":")
    flag = f"{OPT_AGENT}={spec}"
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = (base / Path(target).expanduser()).resolve()
        if not path.is_file():
            raise GtaUsageError(f"{flag}: no file {path}")
        return {"file": str(path), "attr": attr, "path": [], "show": [str(path)], **TASK}
    top = target.split(".")[0]
    found = importlib.machinery.PathFinder.find_spec(top, [str(base), *sys.path])
    if found is None or (found.origin is None and not found.submodule_search_locations):
        raise GtaUsageError(
            f"{flag}: cannot import {target}: ModuleNotFoundError: No module named {top!r}"
        )
    locations = list(found.submodule_search_locations or [])
    shown = locations or [str(found.origin)]
    parents = sorted({str(Path(p).parent) for p in shown})
    return {"module": target, "attr": attr, "path": parents, "show": shown, **TASK}


def _last_line(outcome: AgentOutcome) -> str:
    """``; its stderr ends: LINE`` (a traceback's last line is its message), or nothing."""
    lines = outcome.stderr_tail.strip().splitlines()
    return f"; its stderr ends: {lines[-1][:300]}" if lines else ""
