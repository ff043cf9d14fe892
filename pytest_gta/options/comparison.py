"""Runs read back from their reports: ``--gta-merge`` (shards) and ``--gta-compare`` (runs).

Both are commands that run instead of a session (:mod:`pytest_gta.session.finish`,
:mod:`pytest_gta.session.compare_command`); the comparison's part of the settings is
:class:`ComparisonSettings`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_gta.flags import (
    OPT_COMPARE,
    OPT_COMPARE_REF,
    OPT_LEADERBOARD_ROWS,
    OPT_MERGE,
    OPT_REPORT,
    OPT_REPORT_HTML,
    OPT_REPORT_MD,
)
from pytest_gta.options.core import Feature, Given, OptionSpec, fields, shown, usage_error


def parse_leaderboard_rows(value: str) -> tuple[str, ...]:
    """``BOARD|NAME[,...]``: the leaderboard rows set below ``--gta-compare``'s runs.

    Only split here: whether a name is a board or a model is the leaderboard's to say, and
    the comparison names the boards and close model names when one is neither.
    """
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    if not names:
        raise usage_error(
            f"{OPT_LEADERBOARD_ROWS}={shown(value)}: give leaderboard boards (every row of "
            "one, e.g. 2026-02) or model names, separated by commas"
        )
    return names


@dataclass(frozen=True)
class ComparisonSettings:
    """What ``--gta-compare`` takes besides the reports."""

    #: ``--gta-compare-ref``: the reference run's label (``None``: the first run).
    ref: str | None = None
    #: ``--gta-leaderboard-rows``: boards and model names, as given.
    leaderboard_rows: tuple[str, ...] = ()


ROWS: tuple[OptionSpec, ...] = (
    OptionSpec(
        OPT_MERGE,
        "REPORT",
        f"rebuild one run's tables and report ({OPT_REPORT}, {OPT_REPORT_MD}, --junitxml) from "
        f"the {OPT_REPORT} files of its shards, then exit",
        kind="paths",
        doc=f"`REPORT...`: rebuild one run's tables, `{OPT_REPORT}`, `{OPT_REPORT_MD}` and "
        f"`--junitxml` from its shards' `{OPT_REPORT}` files, then exit (0 when merged, 4 when "
        "the reports are not parts of one run)",
    ),
    OptionSpec(
        OPT_COMPARE,
        "REPORT",
        f"set runs side by side from their {OPT_REPORT} files or directories of them (the "
        "paper's tables with one row per run, paired tests, the per-query matrix, "
        f"reliability, cost and time; {OPT_REPORT}, {OPT_REPORT_MD}, {OPT_REPORT_HTML}), then "
        "exit",
        kind="paths",
        doc=f"`REPORT_OR_DIR...`: set runs side by side from their `{OPT_REPORT}` files (a "
        "directory: its reports, oldest first), shards of one run merged first: the paper's "
        "tables with one row per run, paired tests against a reference, the per-query matrix, "
        f"reliability, cost and time; `{OPT_REPORT}` writes the comparison JSON, "
        f"`{OPT_REPORT_MD}` and `{OPT_REPORT_HTML}` its pages; then exit (0 when compared, 4 "
        "when the reports cannot be compared); see [Comparing runs](compare.md)",
    ),
    OptionSpec(
        OPT_COMPARE_REF,
        "LABEL",
        f"the run of {OPT_COMPARE} that the others are tested against, by label (default: the "
        "first)",
        setting="ref",
        doc_default="the first run",
        doc=f"with `{OPT_COMPARE}`: the run the others are tested against, by its label",
    ),
    OptionSpec(
        OPT_LEADERBOARD_ROWS,
        "BOARD|NAME,...",
        f"published leaderboard rows below {OPT_COMPARE}'s runs or a GTA-Workflow run's table: "
        "a board (e.g. 2026-02, every row) or model names (each one's newest row)",
        parse=parse_leaderboard_rows,
        default=(),
        setting="leaderboard_rows",
        doc_default="none",
        doc=f"with `{OPT_COMPARE}`: published leaderboard rows below the runs, a board "
        "(`2026-02`: every row of it) or model names (each one's newest row); on a GTA-Workflow "
        "run or comparison, rows of the GTA-2 board (`2026-04`, `gemini-2.5-pro`, a harness "
        "such as `openclaw`, or `harness`); see [GTA-Workflow](workflow.md)",
    ),
)
FEATURE = Feature("comparison", ROWS, {})


def settings(given: Given) -> ComparisonSettings:
    """The comparison's part of the settings, from the rows' resolved values."""
    return ComparisonSettings(**fields(ROWS, given))
