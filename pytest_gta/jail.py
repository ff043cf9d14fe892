"""Where the agent under test runs: a sandbox per case, found through the registry.

An agent is the most capable cheater a benchmark meets: it reads files, runs programs, opens
sockets. So each case's agent, a program (``--gta-agent-command``) or a callable (``--gta-agent``),
runs in a sandbox of its own that shows it the case's inputs and nothing of the harness: no
dataset, no package of this project, no report, no other case, no process outside, no network
but the case's MCP server and model proxy (docs/agents.md, "Isolation").

The sandbox is built by a :class:`Jail`, loaded from the :data:`ENTRY_POINT_GROUP` entry point
(the built-in one, ``tool_backends.agent_jail``, builds it with bubblewrap or ``unshare`` as
model-written code's sandbox does), so the core never imports the backends. The jail says what
it could not isolate on this machine (:attr:`Isolation.gaps`); the run reports it, and
``--gta-require-isolation`` refuses to start with any.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pytest_gta.entry_points import load_registered
from pytest_gta.flags import OPT_AGENT

#: The entry-point group a jail is registered under, and the built-in one's name.
ENTRY_POINT_GROUP = "pytest_gta.agent_jails"
BUILT_IN = "sandbox"

JobKind = Literal["command", "callable", "probe"]

#: Process groups of the sandboxes running now, for :func:`stop_all` (insertion-ordered).
_live: dict[int, None] = {}


def started(group: int) -> None:
    """A sandbox's process group is running (a jail calls this)."""
    _live[group] = None


def ended(group: int) -> None:
    """A sandbox's process group is gone."""
    _live.pop(group, None)


def stop_all() -> None:
    """SIGKILL every running sandbox's process group (pytest is interrupted or ending).

    Lock-free, as a signal handler must be: it only reads a snapshot of the live groups.
    """
    for group in list(_live):
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass(frozen=True)
class Isolation:
    """How agents are isolated on this machine: what holds and what does not (the gaps)."""

    #: ``bubblewrap``, ``namespaces`` (``unshare``), ``plain`` (none) or ``in-process``.
    mechanism: str
    guarantees: tuple[str, ...]
    gaps: tuple[str, ...]
    #: ``--gta-agent-network``: ``case`` (the case's MCP server and proxy only) or ``open``.
    network: str = "case"
    #: What was tried and not used, and why (``bubblewrap: <its error>``): where a run is not
    #: isolated, the reason; where it is, a slower way it took (a sandbox per case).
    attempts: tuple[str, ...] = ()

    @property
    def isolated(self) -> bool:
        """Whether nothing on the gaps' list could let an agent read the answers or the keys."""
        return not self.gaps

    def summary(self) -> str:
        """One line for the terminal header."""
        text = f"{self.mechanism} ({', '.join(self.guarantees)})" if self.guarantees else ""
        text = text or self.mechanism
        if not self.gaps:
            return text
        tried = f" (tried: {'; '.join(self.attempts)})" if self.attempts else ""
        return f"{text}; NOT isolated{tried}: {', '.join(self.gaps)}"


@dataclass(frozen=True)
class Job:
    """One run in the sandbox: a case's agent, or the start-up probe.

    ``query`` is the query file's content (:meth:`AgentTask.to_json`); ``show`` lists the
    host files the sandbox shows read-only at their own paths besides the agent's own (the
    input images: the jail finds the program's files from ``argv``, or in ``spec["show"]``);
    ``services`` the URLs the sandbox reaches (the case's MCP server and
    proxy): only their ports, bridged in.
    """

    kind: JobKind
    query: Mapping[str, Any]
    env: Mapping[str, str]
    timeout: float
    #: The command's words (``command``), placeholders still in: the launcher fills them, since
    #: only it knows where the query and answer files are (``{query_file}``, ``{answer_file}``).
    argv: tuple[str, ...] = ()
    #: The placeholders' other values (``{mcp_url}``, ``{model}``...).
    values: Mapping[str, str] = field(default_factory=dict)
    #: The callable (``file`` or ``module``, ``attr``, import ``path``), or the probe's targets.
    spec: Mapping[str, Any] = field(default_factory=dict)
    show: tuple[str, ...] = ()
    services: Mapping[str, str] = field(default_factory=dict)
    #: Answers a callable's tool call (its name and arguments) with the tool's text.
    on_call: Callable[[str, Any], str] | None = None
    #: The name of the answer file in the scratch directory (``command``).
    answer_name: str = "answer.txt"
    #: A probe's agent: its ``argv`` (a command) or ``spec`` (a callable), so that the probe runs
    #: in the very sandbox the agent gets (its files shown, its module imported).
    agent: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class JobOutcome:
    """What came back: the exit status, output, the answer file or the callable's frame."""

    exit_status: int | None
    duration: float
    stdout: str = ""
    stderr_tail: str = ""
    answer_file: str | None = None
    result: dict[str, Any] = field(default_factory=dict)
    timed_out: bool = False
    #: The scratch directory as the agent saw it (``{answer_file}``'s directory).
    workdir: str = ""
    #: The files the agent left in ``{deliverables_dir}``: ``(relative path, bytes)``.
    deliverables: list[tuple[str, bytes]] = field(default_factory=list)


class Jail(Protocol):
    """Runs jobs in per-case sandboxes (the registered implementation)."""

    @property
    def isolation(self) -> Isolation:
        """What this machine's sandbox holds, probed once."""
        ...

    @property
    def bridged(self) -> bool:
        """Whether sandboxes reach the services only through a socket bound into them.

        Then the MCP server and the proxy accept a sandboxed case's secret URL only from that
        socket, so a URL read from a command line is of no use to anyone else.
        """
        ...

    def run(self, job: Job) -> JobOutcome:
        """Run ``job`` to its end (or its timeout) and clean up everything it started.

        Raises:
            GtaInfrastructureError: the sandbox itself failed (not the agent).
        """
        ...

    def close(self) -> None:
        """Stop what the jail keeps for the session (its bridges)."""
        ...


class JailFactory(Protocol):
    """What the entry point loads."""

    def __call__(self, *, hidden: tuple[str, ...], network: str, mode: str) -> Jail:
        """A jail hiding ``hidden`` (the dataset, the reports, the caches) besides its own list."""
        ...


def make_jail(*, hidden: tuple[str, ...], network: str, mode: str) -> Jail:
    """The registered jail (:data:`BUILT_IN`), ``mode`` being ``--gta-sandbox``'s.

    Raises:
        GtaUsageError: none is registered (an install without the built-in backends' metadata).
    """
    factory: JailFactory = load_registered(ENTRY_POINT_GROUP, BUILT_IN, OPT_AGENT, "agent sandbox")
    return factory(hidden=hidden, network=network, mode=mode)
