"""The tools: which backends serve them, their cassettes, and where model-written code runs.

Its part of the settings is :class:`ToolSettings`; backend names are checked against the
registry when the tools are built (:mod:`pytest_gta.tools`), not here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_gta.flags import OPT_SANDBOX, OPT_TOOL_CASSETTES, OPT_TOOL_RECORD, OPT_TOOLS
from pytest_gta.options.core import Feature, Given, OptionSpec, choice, fields
from pytest_gta.vocabulary import SANDBOX_MODES, SandboxMode

DEFAULT_TOOLS = "replay"
TOOL_RECORD_MODES = ("none", "new", "all")


def parse_tools(value: str) -> str:
    """Backend list ``name[=arg],...``; names are checked against the registry later."""
    if not [v for v in value.split(",") if v.strip()]:
        raise pytest.UsageError(f"{OPT_TOOLS} is empty; pass e.g. {OPT_TOOLS}={DEFAULT_TOOLS}")
    return value


def parse_tool_record(value: str) -> str:
    """``none``, ``new`` (record calls not yet in the cassettes) or ``all`` (re-record)."""
    return choice(
        value,
        TOOL_RECORD_MODES,
        OPT_TOOL_RECORD,
        "none, new (record calls the cassettes lack) or all (re-record every call)",
    )


def parse_sandbox(value: str) -> SandboxMode:
    """``auto``, ``bubblewrap`` (required: refuse to run model code without it) or ``rlimit``."""
    return choice(
        value,
        SANDBOX_MODES,
        OPT_SANDBOX,
        "auto (bubblewrap when it works here, else the rlimit fallback), bubblewrap (required) "
        "or rlimit",
    )


@dataclass(frozen=True)
class ToolSettings:
    """The tool backends and what they record."""

    #: ``--gta-tools``: the backends in priority order, ``name[=arg],...``, as given.
    backends: str = DEFAULT_TOOLS
    #: ``--gta-tool-cassettes``: the cassette directory.
    cassettes: Path | None = None
    #: ``--gta-tool-record``: none, new or all.
    record: str = "none"
    #: ``--gta-sandbox``: auto, bubblewrap or rlimit.
    sandbox: SandboxMode = "auto"


ROWS: tuple[OptionSpec, ...] = (
    OptionSpec(
        OPT_TOOLS,
        "BACKENDS",
        f"tool backends in priority order, name[=arg],... (default: {DEFAULT_TOOLS})",
        parse=parse_tools,
        default=DEFAULT_TOOLS,
        setting="backends",
        doc_default="`replay`",
        doc="tool backends in priority order, `name[=arg],...`; each tool goes to the first "
        "backend that offers it",
    ),
    OptionSpec(
        OPT_TOOL_CASSETTES,
        "DIR",
        f"tool cassette directory: replay/strict-replay read it, {OPT_TOOL_RECORD} writes it",
        kind="path",
        setting="cassettes",
        doc_default="none",
        doc=f"tool cassette directory: `replay`/`strict-replay` read it, `{OPT_TOOL_RECORD}` "
        "writes it",
    ),
    OptionSpec(
        OPT_TOOL_RECORD,
        "MODE",
        f"record live tool answers into {OPT_TOOL_CASSETTES}: none (default), new or all",
        parse=parse_tool_record,
        default="none",
        setting="record",
        doc_default="`none`",
        doc="record live tool backends' answers into the cassettes: `none`, `new` (calls not "
        "yet recorded) or `all`",
    ),
    OptionSpec(
        OPT_SANDBOX,
        "KIND",
        "where model-written code (Calculator, Solver, Plot) runs: auto (default), bubblewrap "
        "(required) or rlimit",
        parse=parse_sandbox,
        default="auto",
        setting="sandbox",
        doc_default="`auto`",
        doc="where model-written code (Calculator, Solver, Plot) runs: `auto` (bubblewrap when "
        "it works here, else the fallback), `bubblewrap` (required: a usage error without it) "
        "or `rlimit` (see [Tools](tools.md))",
    ),
)
FEATURE = Feature("tools", ROWS, {})


def settings(given: Given) -> ToolSettings:
    """The tools' part of the settings, from the rows' resolved values."""
    return ToolSettings(**fields(ROWS, given))
