"""The baseline a run is compared with case by case, and rerunning what regressed against it.

Its part of the settings is :class:`BaselineSettings`; the comparison itself is
:mod:`pytest_gta.report.baseline`'s, the gates that judge it :mod:`pytest_gta.options.gates`'.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_gta.flags import OPT_BASELINE, OPT_BASELINE_LENIENT, OPT_REPORT, OPT_RERUN_REGRESSIONS
from pytest_gta.models.catalog import LEADERBOARD_PREFIX
from pytest_gta.options.core import Feature, Given, OptionSpec, fields, resolve_path


def parse_baseline(value: str) -> str:
    """A previous ``--gta-report`` file, or ``leaderboard:NAME[@BOARD]`` (checked when read)."""
    text = value.strip()
    if not text or text == LEADERBOARD_PREFIX:
        raise pytest.UsageError(
            f"{OPT_BASELINE}={value!r}: give a previous {OPT_REPORT} JSON file, or "
            f"{LEADERBOARD_PREFIX}NAME for an official leaderboard row (e.g. "
            f"{LEADERBOARD_PREFIX}gpt-4o, the newest board that has it, or "
            f"{LEADERBOARD_PREFIX}gpt-4o@2024-07 for a given board)"
        )
    return text


@dataclass(frozen=True)
class BaselineSettings:
    """The run to compare with, and how."""

    #: ``--gta-baseline``: an absolute report path, ``leaderboard:NAME``, or ``None``.
    report: str | None = None
    #: ``--gta-baseline-lenient``: compare even when the settings differ.
    lenient: bool = False
    #: ``--gta-rerun-regressions``: run only the cases that regressed last time.
    rerun_regressions: bool = False


BASELINE = OptionSpec(
    OPT_BASELINE,
    "REPORT",
    f"compare with a previous {OPT_REPORT} JSON case by case (paired differences, p-values, "
    f"flipped cases), or with {LEADERBOARD_PREFIX}NAME[@BOARD], an official leaderboard row "
    "(the newest board that has NAME, or BOARD, e.g. 2025-03)",
    parse=parse_baseline,
    setting="report",
    doc_default="none",
    doc=f"compare with a previous `{OPT_REPORT}` case by case (paired differences with "
    "intervals, p-values, flipped cases), or with `leaderboard:NAME[@BOARD]`, an official "
    "leaderboard row (unpaired; the newest board that has NAME, or BOARD such as `2025-03`); "
    "on a GTA-Workflow run a previous Workflow report (paired by task) or a GTA-2 board row; "
    "see [Gates](gates.md)",
)
ROWS: tuple[OptionSpec, ...] = (
    BASELINE,
    OptionSpec(
        OPT_BASELINE_LENIENT,
        None,
        "compare with a baseline whose dataset, modes, protocol or scoring settings differ "
        "(noted in the report) instead of refusing",
        kind="bool",
        default=False,
        setting="lenient",
        doc_default="off",
        doc="compare with a baseline whose dataset, modes, protocol or scoring settings differ "
        "(the report notes the differences) instead of a usage error",
    ),
    OptionSpec(
        OPT_RERUN_REGRESSIONS,
        None,
        "run only the cases that regressed against the baseline in the last run (like --lf)",
        kind="flag",
        default=False,
        setting="rerun_regressions",
        doc="run only the cases the last comparison found regressed (like `--lf`; all of them "
        "when none was recorded)",
    ),
)
FEATURE = Feature("baseline", ROWS, {})


def settings(config: pytest.Config, given: Given) -> BaselineSettings:
    """The baseline's part of the settings: a report's path made absolute where it was given."""
    found = fields(ROWS, given)
    baseline = given[BASELINE.dest]
    if baseline.value is not None and not baseline.value.startswith(LEADERBOARD_PREFIX):
        found["report"] = str(resolve_path(config, baseline.value, baseline.source))
    return BaselineSettings(**found)
