"""The agent under test: a Python callable (``--gta-agent``) or a program (``--gta-agent-command``).

Its part of the settings is :class:`AgentSettings`; :func:`settings` refuses agent settings
that cannot work together (both agent options, step mode) when the session starts.

The agent's own files are found here, when the options are read, as a shell user expects:
a relative path in the command or the callable's file is relative to the directory pytest was
started in (an ini file's, to the ini file's directory), and is rewritten to an absolute path,
since the agent runs in its case's scratch directory and its sandbox shows the files its
command names. A file that is not there, or a program not on ``PATH``, is a usage error
before any model loads. ``example:NAME`` names a shipped example (:mod:`pytest_gta.examples`).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_gta import examples
from pytest_gta.examples import EXAMPLE_PREFIX, UnknownExample
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
    Resolved,
    Source,
    fields,
    number,
    option_base,
    shown,
    usage_error,
)
from pytest_gta.options.serving import template_words
from pytest_gta.vocabulary import AGENT_PLACEHOLDERS, DEFAULT_AGENT_TIMEOUT

RANGES: dict[str, tuple[float, float]] = {OPT_AGENT_TIMEOUT: (0.1, 86_400.0)}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Suffixes of a word that names a script: one missing is a usage error, not an argument.
SCRIPT_SUFFIXES = frozenset(
    (".py", ".pyz", ".sh", ".bash", ".js", ".mjs", ".cjs", ".ts", ".rb", ".pl", ".php", ".jl")
)


def example_of(value: str, flag: str) -> examples.Example | None:
    """The shipped example ``example:NAME`` names (``None`` for anything else).

    Raises:
        pytest.UsageError: no example has that name (listing the names).
    """
    if not value.startswith(EXAMPLE_PREFIX):
        return None
    try:
        return examples.find(value)
    except UnknownExample as exc:
        raise usage_error(
            f"{flag}={shown(value)}: {exc}; python -m pytest_gta.examples lists them with their "
            "paths (a module of yours named example: write ./example.py:NAME)"
        ) from None


def parse_agent(value: str) -> str:
    """``MODULE:CALLABLE``, ``path/to/file.py:CALLABLE`` or ``example:NAME`` (a shipped one).

    Imported when the session starts; a file's existence is checked by :func:`settings`.
    """
    text = value.strip()
    example = example_of(text, OPT_AGENT)
    if example is not None:
        if example.kind != "callable":
            raise usage_error(
                f"{OPT_AGENT}={shown(value)}: {text} is an agent program, not a callable; run it "
                f"with {OPT_AGENT_COMMAND}={text}"
            )
        return text
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
    """An option parser: the agent's command template, checked by :func:`agent_words`.

    A word ``example:NAME`` must name a shipped example program; the template ``example:NAME``
    alone is that example's whole command (see :func:`expand_example`).
    """
    words = agent_words(value)
    for word in words:
        example = example_of(word, OPT_AGENT_COMMAND)
        if example is not None and example.kind == "callable":
            raise usage_error(
                f"{OPT_AGENT_COMMAND}={shown(value)}: {word} is a callable, not a program; run "
                f"it with {OPT_AGENT}={word}"
            )
    if len(words) == 1 and example_of(words[0], OPT_AGENT_COMMAND) is not None:
        expand_example(words[0])
    return value.strip()


def expand_example(word: str) -> str:
    """``example:NAME`` alone: the example's command, run by the Python that runs pytest.

    Raises:
        pytest.UsageError: the example needs a virtualenv of its own (its framework's MCP
            adapter needs mcp<2): the message shows the template to write instead.
    """
    example = examples.find(word)
    if example.venv:
        template = " ".join([f"{example.venv}/bin/python", word, *examples.EXAMPLE_ARGS])
        raise usage_error(
            f"{OPT_AGENT_COMMAND}={word}: {word} runs with the python of a virtualenv of its own "
            f"({example.install}); give that python: {OPT_AGENT_COMMAND}='{template}'"
        )
    return examples.command(example)


def _relative_to(source: Source) -> str:
    if source == "ini":
        return "relative to the ini file's directory"
    return "relative to the directory pytest was started in"


def resolve_word(
    word: str, index: int, base: Path, where: str, origin: str = OPT_AGENT_COMMAND
) -> str:
    """One word of the agent's command as it must reach the sandbox (see the module docstring).

    ``example:NAME`` becomes the shipped file; a relative word that names a file of ``base``
    becomes its absolute path (links kept: a virtualenv's ``bin/python`` is found from its own
    place); placeholders and options stay as they are, and so does any other word (a model name
    such as ``openai/gpt-4o`` is not a path). ``where`` says what ``base`` is and ``origin``
    where the command was given (the option, the variable or the ini key), for the messages.

    Raises:
        pytest.UsageError: the program, or a word that names a script, is not there; the
            program is not on ``PATH``.
    """
    example = example_of(word, OPT_AGENT_COMMAND)
    if example is not None:
        return str(examples.path_of(example))
    if "{" in word or word.startswith("-"):
        return word
    if index == 0 and os.sep not in word and not word.startswith("~"):
        if shutil.which(word) is None:
            raise usage_error(
                f"{origin}: the program {word!r} is not on PATH; give its path "
                "(e.g. .venv/bin/python) or install it"
            )
        return word
    path = Path(os.path.expanduser(word))
    full = path if path.is_absolute() else base / path
    if full.is_file():
        return os.path.normpath(full)
    if index == 0 or path.suffix in SCRIPT_SUFFIXES:
        what = "the program" if index == 0 else "the file"
        raise usage_error(
            f"{origin}: {what} {word!r} does not exist: looked for {full} ({where}); "
            "run pytest where it is, or give its absolute path"
        )
    return word


def resolve_command(named: Resolved, base: Path) -> str:
    """The command of ``named`` with ``example:`` expanded and its files made absolute."""
    template = str(named.value)
    words = agent_words(template)
    if len(words) == 1 and words[0].startswith(EXAMPLE_PREFIX):
        words = agent_words(expand_example(words[0]))
    where = f"{_relative_to(named.source)}, {base}"
    return shlex.join(
        resolve_word(word, i, base, where, named.origin) for i, word in enumerate(words)
    )


def resolve_callable(named: Resolved, base: Path) -> str:
    """The callable of ``named``: an example's file, or a file made absolute and checked.

    Raises:
        pytest.UsageError: the file named is not there (saying where it was looked for).
    """
    spec = str(named.value)
    example = example_of(spec, OPT_AGENT)
    if example is not None:
        return f"{examples.path_of(example)}:{example.attr}"
    target, _, name = spec.rpartition(":")
    if not (target.endswith(".py") or "/" in target or "\\" in target):
        return spec  # a module: found (in its sandbox) when the agent is built
    path = Path(os.path.expanduser(target))
    full = path if path.is_absolute() else base / path
    if not full.is_file():
        raise usage_error(
            f"{named.origin}={shown(spec)}: no file {full} ({_relative_to(named.source)}, "
            f"{base}); run pytest where it is, or give its absolute path"
        )
    return f"{os.path.normpath(full)}:{name}"


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

    #: ``--gta-agent``: ``MODULE:CALLABLE`` (a file made absolute, ``example:`` resolved).
    callable: str | None = None
    #: ``--gta-agent-command``: a checked template (its files absolute, ``example:`` resolved).
    command: str | None = None
    #: The agent as the user named it (``example:cli``, a relative path): what reports show.
    given: str | None = None
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
        return self.given or self.callable or self.command


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
    agent, command = given[AGENT.dest], given[ROWS[1].dest]
    if agent.value:
        found["callable"] = resolve_callable(agent, option_base(config, agent.source))
        found["given"] = agent.value
    if command.value and not agent.value:
        found["command"] = resolve_command(command, option_base(config, command.source))
        found["given"] = command.value
    part = AgentSettings(**found)
    check_agent(part, modes)
    return part
