"""``--gta-merge`` and ``--gta-compare``: the commands that read reports instead of running tests.

Each report is read once, by the reports' one reader
(:func:`~pytest_gta.results.io.load_any_report`), which tells its benchmark by its ``benchmark``
field; GTA-Atomic's reports go to its merge or comparison, any other kind's to the one merge and
comparison of :mod:`pytest_gta.session.kinds` with that kind's own ways, and reports of two
benchmarks given together are a usage error naming one file of each. The plugin imports this module
only when one of the two is given: it needs the report model, the merges, the comparisons and their
pages, not the session layer of a run (model adapters, runners, servers, the similarity model's
client): ``--gta-compare`` of 20 release reports starts 0.4 s sooner for it (docs/benchmarks.md,
"Comparing runs").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_gta.benchmarks.gta_atomic.kind import atomic_merge_command
from pytest_gta.benchmarks.gta_workflow.kind import WORKFLOW_KIND
from pytest_gta.benchmarks.scored_kind import ScoredKind
from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_MERGE
from pytest_gta.options import resolve_option
from pytest_gta.outward import terminal_text
from pytest_gta.results.io import (
    ReportFile,
    ScoredFile,
    WorkflowFile,
    one_benchmark,
    parse_any_report,
    read_report_data,
)
from pytest_gta.session.compare_command import compare_command, named_reports
from pytest_gta.session.kinds import CommandKind, kind_compare_command, kind_merge_command


def _kind(reports: list[WorkflowFile | ScoredFile]) -> tuple[CommandKind[Any], list[Any]]:
    """The kind of the reports (one benchmark's: the reader refused a mix), labeled."""
    labeled = [(r.label, r.report) for r in reports]
    first = reports[0]
    if isinstance(first, WorkflowFile):
        return WORKFLOW_KIND, labeled
    return ScoredKind(first.report.benchmark), labeled


def run(config: pytest.Config) -> int | None:
    """Run the report command ``config`` names; ``None`` when it names neither."""
    try:
        if config.getoption("gta_merge"):
            given: list[str] = config.getoption("gta_merge")
            paths: list[Path] = resolve_option(config, "gta_merge").value
            loaded = [
                (label, read_report_data(p, label)) for p, label in zip(paths, given, strict=True)
            ]
            one_benchmark(loaded, OPT_MERGE)
            reports = [parse_any_report(label, data) for label, data in loaded]
            del loaded
            others = [r for r in reports if not isinstance(r, ReportFile)]
            if others:
                return kind_merge_command(config, *_kind(others))
            return atomic_merge_command(config, [r for r in reports if isinstance(r, ReportFile)])
        if config.getoption("gta_compare"):
            found = named_reports(config)
            if found.others:
                return kind_compare_command(config, *_kind(found.others))
            return compare_command(config, found)
    except GtaUsageError as exc:
        raise pytest.UsageError(f"pytest-gta: {terminal_text(str(exc))}") from None
    return None
