"""The tools: which backends serve them, their cassettes, and where model-written code runs.

Its part of the settings is :class:`ToolSettings`; backend names are checked against the
registry when the tools are built (:mod:`pytest_gta.tools`), not here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaUsageError
from pytest_gta.faults import FaultSpec, parse_fault_spec
from pytest_gta.flags import (
    OPT_MODE,
    OPT_SANDBOX,
    OPT_TOOL_CASSETTES,
    OPT_TOOL_FAULTS,
    OPT_TOOL_RECORD,
    OPT_TOOLS,
    OPT_TOOLS_NONE,
    OPT_TOOLS_WITHOUT,
)
from pytest_gta.options.core import Feature, Given, OptionSpec, choice, fields
from pytest_gta.vocabulary import SANDBOX_MODES, Mode, SandboxMode

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


def parse_faults(value: str) -> FaultSpec:
    """``KIND=RATE,...`` with ``TOOL:KIND=RATE``, ``seed=`` and ``delay=`` (see faults.py)."""
    try:
        return parse_fault_spec(value)
    except GtaUsageError as exc:
        raise pytest.UsageError(str(exc)) from None


def parse_tools_without(value: str) -> tuple[str, ...]:
    """Tool names, comma-separated (checked against the dataset's tools when the run starts)."""
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    if not names:
        raise pytest.UsageError(
            f"{OPT_TOOLS_WITHOUT} is empty; name the tools to leave out, e.g. "
            f"{OPT_TOOLS_WITHOUT}=OCR,Calculator (or {OPT_TOOLS_NONE} for none at all)"
        )
    return names


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
    #: ``--gta-tool-faults``: the faults the calls meet (``None``: none).
    faults: FaultSpec | None = None
    #: ``--gta-tools-without``: tools neither offered nor executable.
    without: tuple[str, ...] = ()
    #: ``--gta-tools-none``: no tool at all (the model answers alone).
    none: bool = False

    @property
    def asked(self) -> list[str]:
        """The robustness options given (faults, ablations), as their flags name them."""
        given = (
            (OPT_TOOL_FAULTS, self.faults is not None),
            (OPT_TOOLS_WITHOUT, bool(self.without)),
            (OPT_TOOLS_NONE, self.none),
        )
        return [flag for flag, on in given if on]


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
    OptionSpec(
        OPT_TOOL_FAULTS,
        "SPEC",
        "inject seeded tool faults: KIND=RATE,... (error, timeout, empty, corrupt, slow), "
        "TOOL:KIND=RATE, seed=N, delay=SECONDS",
        parse=parse_faults,
        setting="faults",
        doc_default="none",
        doc="inject seeded tool faults into every producer's calls, e.g. "
        "`error=0.1,timeout=0.05,OCR:empty=0.3,seed=7` (see [Robustness](robustness.md))",
    ),
    OptionSpec(
        OPT_TOOLS_WITHOUT,
        "TOOLS",
        "leave these tools out: neither offered nor executable (a tool ablation)",
        parse=parse_tools_without,
        default=(),
        setting="without",
        doc_default="none",
        doc="leave these tools out, `OCR,Calculator`: neither offered nor executable (see "
        "[Robustness](robustness.md))",
    ),
    OptionSpec(
        OPT_TOOLS_NONE,
        None,
        "offer no tool at all: the model answers alone (the tool-free run of ΔTool)",
        kind="bool",
        default=False,
        setting="none",
        doc_default="off",
        doc="offer no tool at all: the model answers alone (see [Robustness](robustness.md))",
    ),
)
FEATURE = Feature("tools", ROWS, {})


def settings(given: Given, modes: tuple[Mode, ...] = ("e2e",)) -> ToolSettings:
    """The tools' part of the settings, from the rows' resolved values.

    Raises:
        pytest.UsageError: a fault or an ablation asked of a step-by-step run. Step mode
            replays the reference chain: its tools' outputs are the recorded ones, never
            called, so no fault can reach them, and the history calls the tools an ablation
            would remove. Both are refused rather than given a meaning of their own.
    """
    chosen = ToolSettings(**fields(ROWS, given))
    if "step" in modes and chosen.asked:
        raise pytest.UsageError(
            f"{chosen.asked[0]} applies to end-to-end runs only: step mode replays the reference "
            f"chain, whose tool outputs are recorded, never called; add {OPT_MODE}=e2e"
        )
    if chosen.none and chosen.without:
        raise pytest.UsageError(f"{OPT_TOOLS_NONE} leaves every tool out: drop {OPT_TOOLS_WITHOUT}")
    return chosen


def apply_to(dataset: Dataset, chosen: ToolSettings) -> Dataset:
    """``dataset`` as the run's producers see it: the ablated tools left out.

    The tool names the options give (``--gta-tools-without``, a fault spec's ``TOOL:``) are
    checked here, against the tools the data names: a typo would otherwise leave the tool in,
    or fault nothing, and the run would report a robustness it never measured.

    Raises:
        GtaUsageError: an option names a tool the data does not.
    """
    known = dataset.tool_names()
    named = [(OPT_TOOLS_WITHOUT, chosen.without)]
    if chosen.faults is not None:
        named.append((OPT_TOOL_FAULTS, chosen.faults.tools))
    for flag, names in named:
        unknown = [n for n in names if n not in known]
        if unknown:
            raise GtaUsageError(
                f"{flag}: no tool named {', '.join(unknown)} in {dataset.root} (its tools: "
                f"{', '.join(known) or 'none'}); tool names are case-sensitive"
            )
    if chosen.none:
        return dataset.without_tools(known)
    return dataset.without_tools(chosen.without) if chosen.without else dataset


def refuse_without_calls(chosen: ToolSettings, why: str) -> None:
    """Refuse a fault or an ablation in a run whose producer calls no tool (``why`` says so).

    Its report would otherwise show a robustness it never measured.

    Raises:
        GtaUsageError: naming the option and why it has nothing to act on.
    """
    if chosen.asked:
        raise GtaUsageError(f"{', '.join(chosen.asked)}: {why}, so no tool call is made to act on")
