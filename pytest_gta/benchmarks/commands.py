"""``--gta-merge`` and ``--gta-compare``: the commands that read reports instead of running tests.

Each report is read once, by the reports' one reader
(:func:`~pytest_gta.results.io.load_any_report`), which tells its benchmark by its
``benchmark`` field; the command then goes to that benchmark's merge or comparison, and reports
of two benchmarks given together are a usage error naming one file of each. The plugin imports
this module only when one of the two is given: it needs the report model, the merges, the
comparisons and their pages, not the session layer of a run (model adapters, runners, servers,
the similarity model's client): ``--gta-compare`` of 20 release reports starts 0.4 s sooner for
it (docs/benchmarks.md, "Comparing runs").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gta.benchmarks.gta_workflow.compare import workflow_compare_command
from pytest_gta.benchmarks.gta_workflow.merge import workflow_merge_command
from pytest_gta.benchmarks.scored_commands import scored_compare_command, scored_merge_command
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
from pytest_gta.session.finish import merge_command


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
            workflow = [r for r in reports if isinstance(r, WorkflowFile)]
            scored = [r for r in reports if isinstance(r, ScoredFile)]
            if workflow:
                return workflow_merge_command(config, workflow)
            if scored:
                return scored_merge_command(config, scored)
            return merge_command(config, [r for r in reports if isinstance(r, ReportFile)])
        if config.getoption("gta_compare"):
            found = named_reports(config)
            workflow = [r for r in found.others if isinstance(r, WorkflowFile)]
            scored = [r for r in found.others if isinstance(r, ScoredFile)]
            if workflow:
                return workflow_compare_command(config, workflow)
            if scored:
                return scored_compare_command(config, scored)
            return compare_command(config, found)
    except GtaUsageError as exc:
        raise pytest.UsageError(f"pytest-gta: {terminal_text(str(exc))}") from None
    return None
