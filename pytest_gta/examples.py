"""What the package ships for users to run as they are: the example agents and a sample eval pack.

docs/agents.md and docs/workflow.md show commands a user types from an empty directory after
``pip install pytest-gta``, where no checkout (and so no ``examples/`` or ``tests/``) exists.
So the wheel carries the four example agents (``pytest_gta/_examples/``) and the bundled
Workflow sample's eval pack with its deliverables (``pytest_gta/_workflow_pack/``), and they
have names a user can type:

- ``--gta-agent-command=example:cli`` is the shipped agent CLI's whole command, run by the
  Python that runs pytest, with its placeholders; inside a longer template the word
  ``example:NAME`` stands for the shipped file (``'.venv-langgraph/bin/python
  example:langgraph {mcp_url} ...'``, for the examples that need a virtualenv of their own);
- ``--gta-agent=example:openai_agents`` is the shipped callable;
- ``--gta-model=evalpack:sample`` is the sample's eval pack (:mod:`pytest_gta.evalpack`);
- ``python -m pytest_gta.examples`` lists them with their paths, and ``python -m
  pytest_gta.examples NAME`` prints one path, for a user who copies one to edit it.

An editable install or a checkout finds the same names in ``examples/`` and
``tests/data/workflow/`` beside the package (pyproject.toml's ``force-include`` maps one onto
the other), so both installs resolve every name alike.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pytest_gta.flags import OPT_AGENT, OPT_AGENT_COMMAND, OPT_DATA, OPT_MODEL

#: The prefix of a shipped example's name in ``--gta-agent`` and ``--gta-agent-command``.
EXAMPLE_PREFIX = "example:"
#: The placeholders every example agent program takes, in its order.
EXAMPLE_ARGS = ("{mcp_url}", "{query_file}", "{model_url}", "{model}")
#: The eval pack of the bundled Workflow sample, as the wheel and a checkout hold it.
SAMPLE_PACK = ("_workflow_pack", "tests/data/workflow")
SAMPLE_PACK_FILE = "pack.json"


@dataclass(frozen=True)
class Example:
    """One shipped example agent."""

    #: What follows ``example:``.
    name: str
    #: Its file name under ``examples/`` (``pytest_gta/_examples/`` in a wheel).
    file: str
    #: ``command``: a program for ``--gta-agent-command``; ``callable``: for ``--gta-agent``.
    kind: Literal["command", "callable"]
    #: What it is, in a line.
    summary: str
    #: What a user installs before running it.
    install: str
    #: The callable's name in its file (callables only).
    attr: str = ""
    #: The virtualenv of its own it runs from (mcp<2 frameworks), as docs/agents.md names it.
    venv: str = ""


EXAMPLES = (
    Example(
        "cli",
        "cli_agent.py",
        "command",
        "an agent CLI in plain Python: mcp.Client and the openai SDK's function calling",
        'pip install "pytest-gta[agents]"',
    ),
    Example(
        "openai_agents",
        "openai_agents_agent.py",
        "callable",
        "an OpenAI Agents SDK agent, an async callable run in its sandbox",
        'pip install "pytest-gta[examples]"',
        attr="agent",
    ),
    Example(
        "langgraph",
        "langgraph_agent.py",
        "command",
        "LangGraph's create_react_agent over langchain-mcp-adapters (mcp 1.x)",
        '.venv-langgraph/bin/pip install langgraph langchain-mcp-adapters langchain-openai "mcp<2"',
        venv=".venv-langgraph",
    ),
    Example(
        "smolagents",
        "smolagents_agent.py",
        "command",
        "a smolagents ToolCallingAgent over its MCPClient (mcp 1.x)",
        '.venv-smolagents/bin/pip install "smolagents[mcp,openai]" "mcp<2"',
        venv=".venv-smolagents",
    ),
)
BY_NAME = {example.name: example for example in EXAMPLES}


class UnknownExample(ValueError):
    """A name after ``example:`` that no shipped example has; the message lists the names."""


def shipped(inside: str, checkout: str) -> Path:
    """A directory the wheel carries as ``pytest_gta/<inside>``, else ``<checkout>`` beside it.

    The wheel's copy wins where it exists; an editable install or a checkout has only the
    repository's (``checkout`` is relative to the repository root).
    """
    here = Path(__file__).resolve().parent
    packaged = here / inside
    return packaged if packaged.is_dir() else here.parent / checkout


def examples_dir() -> Path:
    """Where the example agents are: ``pytest_gta/_examples`` in a wheel, else ``examples/``."""
    return shipped("_examples", "examples")


def sample_pack() -> Path:
    """The bundled Workflow sample's eval pack (``evalpack:sample``)."""
    return shipped(*SAMPLE_PACK) / SAMPLE_PACK_FILE


def names() -> str:
    """The examples' names as a message lists them."""
    return ", ".join(f"{EXAMPLE_PREFIX}{example.name}" for example in EXAMPLES)


def find(word: str) -> Example:
    """The example ``word`` (``example:NAME``) names.

    Raises:
        UnknownExample: no example has that name (the message lists the names).
    """
    name = word.removeprefix(EXAMPLE_PREFIX)
    if name not in BY_NAME:
        raise UnknownExample(f"no shipped example is called {name!r}; the examples are {names()}")
    return BY_NAME[name]


def path_of(example: Example) -> Path:
    """The example's file."""
    return examples_dir() / example.file


def command(example: Example, python: str = sys.executable) -> str:
    """The example program's whole command: ``python`` runs it with its placeholders."""
    return shlex.join([python, str(path_of(example))]) + " " + " ".join(EXAMPLE_ARGS)


def listing() -> list[str]:
    """What ``python -m pytest_gta.examples`` prints: each example, its path and its option."""
    lines = []
    for example in EXAMPLES:
        if example.kind == "callable":
            option = f"{OPT_AGENT}={EXAMPLE_PREFIX}{example.name}"
        elif example.venv:
            words = [f"{example.venv}/bin/python", f"{EXAMPLE_PREFIX}{example.name}"]
            option = f"{OPT_AGENT_COMMAND}='{' '.join([*words, *EXAMPLE_ARGS])}'"
        else:
            option = f"{OPT_AGENT_COMMAND}={EXAMPLE_PREFIX}{example.name}"
        lines += [
            f"{EXAMPLE_PREFIX}{example.name}: {example.summary}",
            f"    file:    {path_of(example)}",
            f"    run:     pytest {option}",
            f"    install: {example.install}",
        ]
    lines += [
        "evalpack:sample: the eval pack of the bundled GTA-Workflow sample (deliverables of "
        "8 tasks, for the judge)",
        f"    file:    {sample_pack()}",
        f"    run:     pytest {OPT_DATA}=workflow-sample {OPT_MODEL}=evalpack:sample",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    """List the shipped examples, or print one's path (exit status 2 for an unknown name)."""
    parser = argparse.ArgumentParser(
        prog="python -m pytest_gta.examples",
        description="The example agents and the sample eval pack pytest-gta ships: with no "
        "argument, each with its path and how to run it; with a NAME, that file's path (to "
        'copy and edit: cp "$(python -m pytest_gta.examples cli)" my_agent.py).',
    )
    parser.add_argument("name", nargs="?", help="an example (cli, openai_agents, ...) or sample")
    args = parser.parse_args(argv)
    if args.name is None:
        print("\n".join(listing()))
        return 0
    if args.name.removeprefix("evalpack:") == "sample":
        print(sample_pack())
        return 0
    try:
        print(path_of(find(args.name)))
    except UnknownExample as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
