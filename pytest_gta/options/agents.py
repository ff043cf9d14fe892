"""The agent under test: a Python callable (``--gta-agent``) or a program (``--gta-agent-command``).

Its part of the settings is :class:`AgentSettings`; :func:`settings` refuses agent settings
that cannot work together (both agent options, step mode) when the session starts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from pytest_gta.flags import (
    OPT_AGENT,
    OPT_AGENT_COMMAND,
    OPT_AGENT_ENV,
    OPT_AGENT_IN_PROCESS,
    OPT_AGENT_NETWORK,
    OPT_AGENT_TIMEOUT,
    OPT_BASE_URL,
    OPT_MODE,
    OPT_MODEL,
    OPT_REQUIRE_ISOLATION,
)
from pytest_gta.options.core import (
    Feature,
    Given,
    OptionSpec,
    fields,
    number,
    resolve_path,
    shown,
    usage_error,
)
from pytest_gta.options.serving import template_words
from pytest_gta.vocabulary import AGENT_PLACEHOLDERS, DEFAULT_AGENT_TIMEOUT

RANGES: dict[str, tuple[float, float]] = {OPT_AGENT_TIMEOUT: (0.1, 86_400.0)}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_agent(value: str) -> str:
    """``MODULE:CALLABLE`` or ``path/to/file.py:CALLABLE``; imported when the session starts."""
    text = value.strip()
    module, colon, name = text.rpartition(":")
    if not colon or not module.strip() or not name.strip().isidentifier():
        raise usage_error(
            f"{OPT_AGENT}={shown(value)}: give MODULE:CALLABLE (e.g. my_agent:solve) or "
            "path/to/agent.py:CALLABLE"
        )
    return f"{module.strip()}:{name.strip()}"


def agent_words(template: str) -> list[str]:
    """The words of a ``--gta-agent-command`` template, checked (see :func:`template_words`)."""
    return template_words(
        template,
        flag=OPT_AGENT_COMMAND,
        placeholders=AGENT_PLACEHOLDERS,
        required=None,
        what="agent",
        example="'python my_agent.py --mcp {mcp_url} --query {query_file}'",
    )


def parse_agent_command(value: str) -> str:
    """An option parser: the agent's command template, checked by :func:`agent_words`."""
    agent_words(value)
    return value.strip()


def parse_agent_env(value: str) -> tuple[str, ...]:
    """``NAME,...``: environment variables passed on to a ``--gta-agent-command`` agent."""
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    bad = [n for n in names if not _ENV_NAME.fullmatch(n)]
    if not names or bad:
        raise usage_error(
            f"{OPT_AGENT_ENV}={shown(value)}: give environment variable names separated by "
            "commas, e.g. HF_HOME,MY_AGENT_CONFIG"
        )
    return names


def parse_agent_timeout(value: str) -> float:
    """Seconds one case's agent may run."""
    low, high = RANGES[OPT_AGENT_TIMEOUT]
    hint = f"give seconds one case's agent may run (default: {DEFAULT_AGENT_TIMEOUT:g})"
    return number(value, OPT_AGENT_TIMEOUT, hint, minimum=low, maximum=high)


def parse_agent_network(value: str) -> str:
    """``case`` (the case's MCP server and proxy only) or ``open``."""
    text = value.strip().lower()
    if text not in ("case", "open"):
        raise usage_error(
            f"{OPT_AGENT_NETWORK}={shown(value)}: give case (the agent reaches its case's MCP "
            "server and model proxy, nothing else) or open (any network; recorded in the report)"
        )
    return text


@dataclass(frozen=True)
class AgentSettings:
    """The agent under test; at most one of :attr:`callable` and :attr:`command` is set.

    ``None`` and ``None``: the project's own loop.
    """

    #: ``--gta-agent``: ``MODULE:CALLABLE`` (a file named in the ini file made absolute).
    callable: str | None = None
    #: ``--gta-agent-command``: a checked template.
    command: str | None = None
    #: ``--gta-agent-env``: variables a command agent is given besides the allow-list.
    env: tuple[str, ...] = ()
    #: ``--gta-agent-timeout``: seconds one case's agent may run.
    timeout: float = DEFAULT_AGENT_TIMEOUT
    #: ``--gta-agent-network``: ``case`` or ``open``.
    network: str = "case"
    #: ``--gta-agent-in-process``: the callable runs inside pytest, not isolated.
    in_process: bool = False
    #: ``--gta-require-isolation``: a run whose agent would not be isolated does not start.
    require_isolation: bool = False

    @property
    def spec(self) -> str | None:
        """The agent under test as the report and header name it (``None``: no agent)."""
        return self.callable or self.command


AGENT = OptionSpec(
    OPT_AGENT,
    "MODULE:CALLABLE",
    "evaluate your own agent: a (sync or async) callable given each case's task (query, "
    "images, MCP URL, tools, model URL); end-to-end mode only",
    parse=parse_agent,
    setting="callable",
    doc_default="none",
    doc="evaluate your own agent: a sync or async callable (`my_agent:solve` or "
    "`path/to/agent.py:solve`) given each case's task (query, images, the case's MCP URL and "
    "tools, the model URL); end-to-end mode only",
)
ROWS: tuple[OptionSpec, ...] = (
    AGENT,
    OptionSpec(
        OPT_AGENT_COMMAND,
        "TEMPLATE",
        "evaluate an agent program, run per case without a shell, its answer read from stdout "
        "or {answer_file}; placeholders {mcp_url} {query_file} {model_url} {anthropic_url} "
        "{model} {answer_file} {case_id} {deliverables_dir}",
        parse=parse_agent_command,
        setting="command",
        doc_default="none",
        doc="evaluate an agent program, run once per case in its own process group without a "
        "shell; placeholders `{mcp_url}`, `{query_file}`, `{model_url}`, `{anthropic_url}`, "
        "`{model}`, `{answer_file}`, `{case_id}`, `{deliverables_dir}` (GTA-Workflow); the answer "
        "is `{answer_file}` if written, else stdout",
    ),
    OptionSpec(
        OPT_AGENT_ENV,
        "NAME,...",
        f"environment variables passed on to {OPT_AGENT_COMMAND} (it gets only PATH, HOME, the "
        "locale and the proxy's URLs otherwise)",
        parse=parse_agent_env,
        default=(),
        setting="env",
        doc_default="none",
        doc=f"environment variables passed on to `{OPT_AGENT_COMMAND}` (it gets only the "
        "locale, `PATH`, a scratch `HOME` and the harness's variables otherwise)",
    ),
    OptionSpec(
        OPT_AGENT_TIMEOUT,
        "SECONDS",
        f"how long one case's agent may run; then it is stopped and the case errors (default: "
        f"{DEFAULT_AGENT_TIMEOUT:g})",
        parse=parse_agent_timeout,
        default=DEFAULT_AGENT_TIMEOUT,
        setting="timeout",
        doc_default="`600`",
        doc="how long one case's agent may run; then its process group is stopped and the case "
        "errors",
        doc_range="{low} to {high} seconds",
    ),
    OptionSpec(
        OPT_AGENT_NETWORK,
        "case|open",
        "what network the agent's sandbox reaches: case (its MCP server and model proxy only, "
        "the default) or open (any; recorded in the report as not isolated)",
        parse=parse_agent_network,
        default="case",
        setting="network",
        doc_default="`case`",
        doc="what network the agent's sandbox reaches: `case` (the case's MCP server and model "
        "proxy only) or `open` (anything the host reaches; the report says the run is not "
        "isolated)",
    ),
    OptionSpec(
        OPT_AGENT_IN_PROCESS,
        None,
        f"run the {OPT_AGENT} callable inside pytest rather than in its sandbox (it can read "
        "the answers: the report marks the run not isolated)",
        kind="bool",
        default=False,
        setting="in_process",
        doc_default="off",
        doc=f"run the `{OPT_AGENT}` callable inside the pytest process rather than in a "
        "sandboxed worker (for debugging: it can read the answers, and the report marks the "
        "run not isolated)",
    ),
    OptionSpec(
        OPT_REQUIRE_ISOLATION,
        None,
        "refuse to start an agent run whose agent would not be isolated from the answers",
        kind="bool",
        default=False,
        setting="require_isolation",
        doc_default="off",
        doc="refuse to start (usage error) an agent run whose agent this machine cannot "
        f"isolate (no bubblewrap and no namespaces, `{OPT_AGENT_IN_PROCESS}`, "
        f"`{OPT_AGENT_NETWORK}=open`), for leaderboards that accept isolated results only",
    ),
)
FEATURE = Feature("agent", ROWS, RANGES)


def check_agent(agent: AgentSettings, modes: Sequence[str]) -> None:
    """Refuse agent settings that cannot work together (both agent options, step mode).

    Raises:
        pytest.UsageError: naming the options and what to do instead.
    """
    if agent.callable and agent.command:
        raise usage_error(
            f"{OPT_AGENT} and {OPT_AGENT_COMMAND} both name the agent under test; give one"
        )
    if agent.spec and "step" in modes:
        flag = OPT_AGENT if agent.callable else OPT_AGENT_COMMAND
        raise usage_error(
            f"{flag} runs in end-to-end mode only: step mode replays the reference prefix into a "
            f"model's prompt one step at a time, and an agent runs its own loop from the query "
            f"to the answer; use {OPT_MODE}=e2e (the default)"
        )


def check_model_given(given: Given, model: str | None) -> None:
    """Refuse an agent named for this run (command line or environment) without a model.

    The model is what collects the cases and what the agent's model requests go to, through
    the proxy; without one nothing would run (pytest's exit status 5, "no tests"). An agent
    set in the ini file alone is the project's default, for the runs that name a model.

    Raises:
        pytest.UsageError: naming the agent's option and what to add.
    """
    if model is not None:
        return
    for row in ROWS:
        named = given[row.dest]
        if row.setting in ("callable", "command") and named.value and named.source != "ini":
            raise usage_error(
                f"{named.origin} needs {OPT_MODEL}: the model that selects the cases and that "
                f"the agent's model requests go to (through the run's proxy), e.g. "
                f"{OPT_MODEL}=gpt-4o, or {OPT_MODEL}=openai/NAME {OPT_BASE_URL}=URL for your "
                "own endpoint"
            )


def settings(
    config: pytest.Config, given: Given, modes: Sequence[str], model: str | None = None
) -> AgentSettings:
    """The agent's part of the settings, checked against the run's ``modes`` and model."""
    check_model_given(given, model)
    found = fields(ROWS, given)
    agent = given[AGENT.dest]
    target, _, name = (agent.value or "").rpartition(":")
    if agent.source == "ini" and (target.endswith(".py") or "/" in target):
        # A file named in the ini file is the project's: relative to the ini file, as paths are.
        found["callable"] = f"{resolve_path(config, target, agent.source)}:{name}"
    part = AgentSettings(**found)
    check_agent(part, modes)
    return part
