"""``--gta-merge`` and ``--gta-compare`` on a scored benchmark's reports (a third party's).

The reports' one reader read them (:mod:`pytest_gta.benchmarks.commands` chose this module by
their kind); the merge and the comparison are :mod:`pytest_gta.report.scored_runs`'s, the
merged run is concluded (baseline, gates, hook, cleaner) and written as a session's would be.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_gta.benchmarks.scored import conclude, scored_outputs, scored_status
from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_BASELINE, OPT_REPORT, OPT_REPORT_MD
from pytest_gta.options import resolve_settings
from pytest_gta.outward import terminal_text
from pytest_gta.report import scored as render
from pytest_gta.report import scored_runs
from pytest_gta.results.io import ScoredFile, expect_benchmark, read_report_data
from pytest_gta.results.scored import ScoredReport, dump_scored, parse_scored
from pytest_gta.session.finish import Output, failed, print_tables, say_line, write_said


def scored_merge_command(config: pytest.Config, files: Sequence[ScoredFile]) -> int:
    """Merge, print, write; 0 when merged (the gates decide with gates).

    Raises:
        pytest.UsageError: reports that are not shards of one run (exit status 4).
    """
    settings = resolve_settings(config)
    name = files[0].report.benchmark
    try:
        baseline: ScoredReport | None = None
        if settings.baseline.report is not None:
            label = f"{OPT_BASELINE} {settings.baseline.report}"
            data = read_report_data(Path(settings.baseline.report), label, OPT_REPORT)
            expect_benchmark(data, label, name, "this run")
            baseline = parse_scored(label, data)
        merged = scored_runs.merge([(f.label, f.report) for f in files])
        report = conclude(config, settings, merged, baseline)
    except GtaUsageError as exc:
        raise pytest.UsageError(f"pytest-gta: {terminal_text(str(exc))}") from None
    say_line(f"merged {len(files)} reports: {len(report.cases)} cases of {name}")
    print_tables(f"{name} results", render.table_lines(report))
    results = write_said(scored_outputs(report, settings))
    return scored_status(report, int(pytest.ExitCode.OK), failed(results))


def scored_compare_command(config: pytest.Config, files: Sequence[ScoredFile]) -> int:
    """The runs' metrics side by side; ``--gta-report`` and ``--gta-report-md`` written."""
    settings = resolve_settings(config)
    runs = scored_runs.runs([(f.label, f.report) for f in files])
    say_line(f"compared {len(runs.runs)} {runs.benchmark} runs")
    print_tables(f"{runs.benchmark} comparison", render.runs_lines(runs))
    outputs = []
    if settings.report.json is not None:
        outputs.append(Output(settings.report.json, lambda: dump_scored(runs), option=OPT_REPORT))
    if settings.report.md is not None:
        outputs.append(
            Output(settings.report.md, lambda: render.runs_markdown(runs), option=OPT_REPORT_MD)
        )
    results = write_said(outputs)
    return int(pytest.ExitCode.TESTS_FAILED if failed(results) else pytest.ExitCode.OK)
