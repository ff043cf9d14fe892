"""The pure report renderers and the report builder."""

from __future__ import annotations

from pytest_gta.quirks import summary_lines
from pytest_gta.report.build import build_report
from pytest_gta.report.table import MAX_NOTES, quirk_lines, render_markdown, render_text
from pytest_gta.results.case import CaseResult
from pytest_gta.results.report import Quirk, RunReport
from tests.helpers.report_builders import run_settings
from tests.helpers.report_models import run_report


def minimal_report(**overrides) -> RunReport:
    sections = {
        "settings": {"modes": ["e2e"], "sim_model": "s", "sim_threshold": 0.5},
        "metrics": {
            "e2e": {
                "ans_acc": 50.0,
                "ans_acc_img": None,
                "p_f1": 1.0,
                "o_f1": 0.0,
                "l_f1": 0.0,
                "c_f1": 0.0,
                "tool_call": 3,
                "tool_call_error": 1,
            }
        },
        "errors": {"e2e": {"format": 1, "args": 0, "other": 0}},
        "tool_calls": {"e2e": {"successful": 2, "failed": 1}},
        "outcomes": {"passed": 1, "failed": 1, "error": 0, "skipped": 0},
        "outcomes_by_mode": {"e2e": {"passed": 1, "failed": 1, "error": 0, "skipped": 0}},
    }
    sections.update(overrides)
    return run_report(**sections)


def test_text_tables():
    lines = render_text(minimal_report())
    assert lines[0] == "model: m  protocol: react  modes: e2e"
    assert "Table 4, end-to-end mode (percent)" in lines
    row = lines[lines.index("Table 4, end-to-end mode (percent)") + 2].split()
    assert row == ["m", "[react]", "1.00", "0.00", "0.00", "0.00", "50.00", "n/a", "3", "1"]
    table5 = lines[lines.index("Table 5, error types (percent of errored tool calls)") + 2]
    assert table5.split() == ["e2e", "1", "100.00", "0.00", "0.00"]
    assert not any(line.startswith("tools:") for line in lines)  # no backends took part


def test_notes_are_capped_in_the_terminal_but_kept():
    notes = [f"n{i}" for i in range(MAX_NOTES + 5)]
    lines = render_text(minimal_report(notes=notes))
    assert f"note: n{MAX_NOTES - 1}" in lines
    assert f"note: n{MAX_NOTES}" not in lines
    assert lines[-1] == "note: ... and 5 more notes in the JSON report"
    assert "- n14" in render_markdown(minimal_report(notes=notes))


def test_markdown_tables():
    text = render_markdown(minimal_report())
    assert "| model | P F1 | O F1 | L F1 | C F1 | AnsAcc | Ans+I | Calls | Call errors |" in text
    assert "| m \\[react\\] | 1.00 | 0.00 | 0.00 | 0.00 | 50.00 | n/a | 3 | 1 |" in text


def test_quirk_lines_are_the_data_info_lines():
    quirks = [
        Quirk(
            kind=f"k{n}",
            title=f"title {n}",
            scoring="s",
            queries=[str(q) for q in range(n)],
            details=[],
            replay_fails={},
        )
        for n in (1, 3, 15)
    ]
    entries = [q.to_json_value() for q in quirks]
    assert quirk_lines(quirks, shown=12) == summary_lines(entries, shown=12)
    assert quirk_lines(quirks, shown=12)[0] == "title 1: 1 query (0)"
    assert quirk_lines(quirks, shown=12)[2].endswith("10, 11, ... (3 more))")
    lines = render_text(minimal_report(dataset={"quirks": entries}))
    assert "dataset quirk: title 3: 3 queries (0, 1, 2)" in lines


def test_build_report_counts_errors_as_wrong_and_excludes_skips(sample_dataset):
    cases = [
        CaseResult.unscored("e2e", "1", outcome="error", message="endpoint down", nodeid="n1"),
        CaseResult.unscored("e2e", "0", outcome="skipped", message="no backend", nodeid="n0"),
    ]
    report = build_report(
        model="m",
        protocol="react",
        dataset=sample_dataset,
        data_source="x",
        settings=run_settings(modes=["e2e"]),
        cases=cases,
    )
    assert report.outcomes.model_dump() == {"passed": 0, "failed": 0, "error": 1, "skipped": 1}
    assert report.metrics.e2e is not None
    assert report.metrics.e2e.ans_acc == 0.0  # the errored query counts as wrong
    assert report.metrics_excluding_errors.to_json_value() == {"e2e": {}}
    assert report.denominators.e2e is not None
    assert report.denominators.e2e.queries == 1  # the skipped one is not counted
    assert [c.id for c in report.cases] == ["e2e-0", "e2e-1"]  # dataset order
    assert report.cases[1].message == "endpoint down"
