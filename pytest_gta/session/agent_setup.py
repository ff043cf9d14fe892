"""The agent under test, built for the session: its sandbox, its start-up probe, its description.

Every agent runs in a sandbox of its own per case (:mod:`pytest_gta.jail`) unless the user
asks for the callable in-process (``--gta-agent-in-process``), which the report marks not
isolated. Before the first case, :func:`probe` runs inside the very sandbox the agents get and
tries what a cheating agent would (read the run's dataset and the bundled sample, search the
file system for ``dataset.json``, read another process's environment, signal pytest, connect to
a loopback port that is neither service, leave a process behind); its findings go into the
report (``settings.agent.isolation.probe``). ``--gta-require-isolation`` refuses to start when
the sandbox has gaps or an attempt succeeded.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import signal
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import pytest_gta
from pytest_gta.dataset import bundled_sample_path
from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import (
    OPT_AGENT,
    OPT_AGENT_IN_PROCESS,
    OPT_AGENT_NETWORK,
    OPT_REQUIRE_ISOLATION,
)
from pytest_gta.jail import Isolation, Jail, Job, make_jail
from pytest_gta.options.agents import AgentSettings
from pytest_gta.options.data import DATASET_NAME
from pytest_gta.progress import say
from pytest_gta.report.table import isolation_lines
from pytest_gta.results.report import AgentIsolation
from pytest_gta.run.agent_command import CommandAgent, SandboxedPythonAgent, callable_spec
from pytest_gta.run.agent_under_test import Agent, PythonAgent, load_callable
from pytest_gta.workflow_data import END_FILE as WORKFLOW_END_FILE

#: Seconds the probe may take (its file-system search stops itself sooner).
PROBE_TIMEOUT = 60.0
IN_PROCESS = (
    f"the callable runs inside pytest ({OPT_AGENT_IN_PROCESS}): it can read the answers, "
    "the harness's keys and every other case"
)
OPEN_NETWORK = f"network open to the host and beyond ({OPT_AGENT_NETWORK}=open)"


@dataclass
class AgentSetup:
    """The session's agent, its jail (``None``: in-process) and what the probe found."""

    agent: Agent
    jail: Jail | None
    isolation: Isolation
    findings: list[dict[str, Any]] = field(default_factory=list)
    #: What the probe is given of the agent (``argv`` or ``spec``): it runs in the same sandbox.
    program: dict[str, Any] = field(default_factory=dict)

    def current(self) -> Isolation:
        """What holds now: the jail learns more as it runs (a warm sandbox, or why none)."""
        return self.jail.isolation if self.jail is not None else self.isolation

    def describe(self) -> dict[str, Any]:
        """The report's ``settings.agent.isolation``."""
        isolation = self.current()
        held = all(f["held"] for f in self.findings)
        return {
            "mechanism": isolation.mechanism,
            "isolated": isolation.isolated and held,
            "network": isolation.network,
            "guarantees": list(isolation.guarantees),
            "gaps": list(isolation.gaps),
            "attempts": list(isolation.attempts),
            "probe": self.findings,
        }

    def close(self) -> None:
        """Stop the jail's bridges."""
        if self.jail is not None:
            self.jail.close()


def build(
    settings: AgentSettings, *, invocation_dir: Path, dataset_root: Path, sandbox_mode: str
) -> AgentSetup:
    """The agent of ``settings`` and the sandbox it runs in.

    Raises:
        GtaUsageError: the callable's file or module cannot be found, or fails to import (in
            its sandbox), or isolation is required and cannot be had.
    """
    if settings.callable is not None and settings.in_process:
        function = load_callable(settings.callable, invocation_dir)
        gaps = (IN_PROCESS, *((OPEN_NETWORK,) if settings.network == "open" else ()))
        isolation = Isolation("in-process", (), gaps, settings.network)
        require(settings, isolation)
        return AgentSetup(PythonAgent(settings.callable, function), None, isolation)
    hidden = tuple(str(p) for p in (dataset_root, bundled_sample_path()))
    jail = make_jail(hidden=hidden, network=settings.network, mode=sandbox_mode)
    try:
        require(settings, jail.isolation)
        agent: Agent
        if settings.callable is not None:
            spec = callable_spec(settings.callable, invocation_dir)
            check(jail, settings.callable, spec)
            agent = SandboxedPythonAgent(settings.callable, spec, jail, settings.env)
            program: dict[str, Any] = {"spec": spec}
        else:
            assert settings.command is not None
            agent = CommandAgent(settings.command, jail, settings.env)
            program = {"argv": tuple(shlex.split(settings.command))}
    except BaseException:
        jail.close()
        raise
    return AgentSetup(agent, jail, jail.isolation, program=program)


def agent_lines(setup: AgentSetup) -> list[str]:
    """What the terminal says of the agent's sandbox: its summary, the probe, a warning."""
    isolation = AgentIsolation.model_validate(setup.describe())
    lines = [f"agent sandbox: {setup.current().summary()}"]
    lines += isolation_lines(isolation)[1:]
    if not isolation.isolated:
        lines.append(
            "WARNING: the agent under test is NOT isolated: it can read the dataset's answers "
            "or the harness; results are marked not isolated in the report"
        )
    return lines


def require(settings: AgentSettings, isolation: Isolation) -> None:
    """``--gta-require-isolation``: refuse a run whose agent would not be isolated.

    Raises:
        GtaUsageError: naming what is not isolated and what to do.
    """
    if settings.require_isolation and not isolation.isolated:
        tried = f" (tried: {'; '.join(isolation.attempts)})" if isolation.attempts else ""
        raise GtaUsageError(
            f"{OPT_REQUIRE_ISOLATION}: the agent under test would not be isolated here "
            f"({isolation.mechanism}{tried}): {'; '.join(isolation.gaps)}. Install bubblewrap "
            "(apt-get install bubblewrap) or allow user namespaces, and drop "
            f"{OPT_AGENT_IN_PROCESS} and {OPT_AGENT_NETWORK}=open"
        )


def check(jail: Jail, name: str, spec: dict[str, Any]) -> None:
    """Import the callable in its sandbox once, so a typo is a usage error before any case.

    Raises:
        GtaUsageError: the import failed or the name is missing (the sandbox's message).
    """
    spec = {**spec, "check": True}
    ran = jail.run(Job("callable", _empty_query(), {}, PROBE_TIMEOUT, spec=spec))
    error = ran.result.get("error")
    if isinstance(error, dict):
        said = " ".join(str(error.get("message", "")).split())[:500]
        raise GtaUsageError(f"{OPT_AGENT}={name}: cannot import it: {error.get('type')}: {said}")
    if not isinstance(ran.result.get("result"), dict):
        raise GtaUsageError(
            f"{OPT_AGENT}={name}: its sandbox could not load it: {ran.stderr_tail[-500:]}"
        )


def _empty_query() -> dict[str, Any]:
    return {"case_id": "", "query_id": "", "query": "", "images": [], "tools": [], "model": ""}


def probe(setup: AgentSetup, dataset_file: Path) -> list[dict[str, Any]]:
    """Run the cheating probe in the agents' sandbox; its findings (also kept on ``setup``)."""
    jail = setup.jail
    if jail is None:
        return []
    marker = f"gta-probe-{secrets.token_hex(8)}"
    with socket.socket() as canary:
        canary.bind(("127.0.0.1", 0))
        canary.listen(1)
        targets = {
            "files": [
                str(dataset_file),
                str(bundled_sample_path() / "dataset.json"),
                str(Path(pytest_gta.__file__).resolve()),
            ],
            "harness_pid": os.getpid(),
            "canary_port": canary.getsockname()[1],
            "marker": marker,
        }
        job = Job("probe", _empty_query(), {}, PROBE_TIMEOUT, spec=targets, agent=setup.program)
        ran = jail.run(job)
    try:
        findings = json.loads(str((ran.result.get("result") or {}).get("answer")))
    except ValueError:
        findings = []
    if not isinstance(findings, list):
        findings = []
    left = _left_behind(marker)
    findings.append(
        {
            "check": "leave a process running after the case",
            "held": not left,
            "detail": "none left" if not left else f"PIDs {', '.join(map(str, left))} (killed)",
        }
    )
    setup.findings = [f for f in findings if isinstance(f, dict)]
    return setup.findings


def _left_behind(marker: str) -> list[int]:
    """Processes whose command line holds ``marker``, killed (after a moment to settle)."""
    time.sleep(0.2)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(int(entry))
        except OSError:
            continue
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return found


class AgentStart:
    """The agent's sandbox, built and probed in a thread of its own from start-up.

    Building the jail (its self-test), its warm start (a callable's import) and the cheating
    probe take seconds; begun at ``pytest_configure`` they overlap collection and the model's
    loading. What needs the agent waits for them (:meth:`setup`); a usage error found there
    (a callable that does not import, ``--gta-require-isolation`` refused) is raised then,
    still before any case.
    """

    def __init__(
        self,
        config: pytest.Config,
        settings: AgentSettings,
        *,
        invocation_dir: Path,
        sandbox_mode: str,
        probe: bool,
    ) -> None:
        self._config = config
        self._settings = settings
        self._invocation_dir = invocation_dir
        self._sandbox_mode = sandbox_mode
        self._probe = probe
        self._future: Future[AgentSetup] = Future()
        self._said = False
        self._closed = False

    def begin(self, dataset_root: Path) -> None:
        """Start building (once): the jail for ``dataset_root``'s run, then its probe."""

        def run() -> None:
            try:
                setup = build(
                    self._settings,
                    invocation_dir=self._invocation_dir,
                    dataset_root=dataset_root,
                    sandbox_mode=self._sandbox_mode,
                )
                if self._probe:
                    probe_and_require(setup, self._settings, dataset_root)
                self._future.set_result(setup)
            except BaseException as exc:  # handed over: raised where the agent is asked for
                self._future.set_exception(exc)

        threading.Thread(target=run, name="gta-agent-sandbox", daemon=True).start()

    def setup(self) -> AgentSetup:
        """The built agent, waited for; the first time, the terminal says what its sandbox holds.

        Raises:
            pytest.UsageError: the agent cannot run (its message).
        """
        try:
            setup = self._future.result()
        except GtaUsageError as exc:
            raise pytest.UsageError(str(exc)) from None
        if not self._said:
            self._said = True
            for line in agent_lines(setup):
                say(self._config, line)
        return setup

    def header(self) -> list[str]:
        """The sandbox's lines for the header if ready by then (said once), else a promise."""
        if not self._future.done():
            return [
                "agent sandbox: being built and probed beside collection and model loading "
                "(its lines follow before the first case)"
            ]
        self._said = True
        return agent_lines(self.setup())

    def close(self) -> None:
        """Stop the sandbox, once it has started (its failure was reported where asked for).

        What it found stays: the report describes the sandbox after the session closed it.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self._future.result().close()
        except BaseException:
            pass


def probe_and_require(setup: AgentSetup, settings: AgentSettings, root: Path) -> None:
    """Run the cheating probe in the agents' sandbox, against the run's answers file.

    Raises:
        GtaUsageError: ``--gta-require-isolation`` and an attempt of the probe succeeded.
    """
    answers = root / DATASET_NAME
    if not answers.is_file() and (root / WORKFLOW_END_FILE).is_file():
        answers = root / WORKFLOW_END_FILE  # a GTA-Workflow dataset: the checkpoints
    findings = probe(setup, answers)
    failed = [f["check"] for f in findings if not f["held"]]
    if failed and settings.require_isolation:
        raise GtaUsageError(
            f"{OPT_REQUIRE_ISOLATION}: the probe in the agents' sandbox could {'; '.join(failed)}"
        )
