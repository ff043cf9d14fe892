"""``pytest --gta-compare``: runs side by side, from their reports (issue 26, items 1 and 2).

The reports are real: the oracle, two mock models, an OpenCompass prediction file and the two
shards of one mock run, each a pytest run on the bundled sample made once for the module. The
command is then run black-box, as a user runs it, and its JSON, read back by the comparison's
reader and checked against the published schema, against each run's own report: the numbers of
a run in the comparison are the numbers its report has.
"""

from __future__ import annotations

import json
import shutil
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gta.errors import GtaUsageError
from pytest_gta.report.runs_html import render_comparison_html
from pytest_gta.report.runs_text import render_markdown, render_text
from pytest_gta.report.table import markdown_text
from pytest_gta.results.comparison import Comparison
from pytest_gta.results.io import dump_comparison, load_report, parse_comparison
from pytest_gta.results.report import RunReport
from pytest_gta.session.compare_command import (
    CompareSettings,
    cleaned,
    comparison_of,
    find_reports,
)
from tests.helpers.gta_run import (
    BOTH_MODES,
    FAST_SIM,
    ORACLE,
    SAMPLE_DATA,
    GtaRun,
    gta,
    gta_process,
    read_report,
)
from tests.test_hostile_files import EDITS, _edited, assert_clean, output_text
from tests.test_opencompass import e2e_records
from tests.test_results_schema import assert_valid_comparison, assert_valid_report
from tests.test_shard import SCRIPT

#: A model that answers nothing: every case fails.
SCRIPT_B = {"default": "Final Answer: I do not know"}
#: The reports the module makes, by file name: (the run's arguments, its report's name).
RUNS = {
    "oracle": (ORACLE, BOTH_MODES, "--gta-report-html=oracle.html"),
    "mock_a": ("--gta-model=mock:script_a.json", BOTH_MODES),
    "mock_b": ("--gta-model=mock:script_b.json", BOTH_MODES, "--gta-max-turns=5"),
    "opencompass": ("--gta-model=opencompass:oc", "--gta-mode=e2e"),
    "shard_1": ("--gta-model=mock:script_a.json", BOTH_MODES, "--gta-shard=1/2"),
    "shard_2": ("--gta-model=mock:script_a.json", BOTH_MODES, "--gta-shard=2/2"),
}
#: What a run's entry copies from its report, number for number.
COPIED = ("metrics", "metrics_ci", "pass_rate", "errors", "tool_calls", "outcomes")


@pytest.fixture(scope="module")
def made(tmp_path_factory, sample_dataset) -> Path:
    """A directory with each run's ``NAME.json`` report (and the oracle's HTML page)."""
    where = tmp_path_factory.mktemp("runs")
    (where / "script_a.json").write_text(json.dumps(SCRIPT))
    (where / "script_b.json").write_text(json.dumps(SCRIPT_B))
    (where / "oc").mkdir()
    records = e2e_records(sample_dataset)
    (where / "oc" / "gta_bench.json").write_text(
        json.dumps({str(i): record for i, record in enumerate(records)})
    )

    def make(name: str) -> GtaRun:
        args = RUNS[name]
        return gta_process(where, FAST_SIM, SAMPLE_DATA, *args, report=f"{name}.json", check=False)

    # Side by side: each run is mostly its interpreter's start and the similarity model's load.
    with ThreadPoolExecutor(max_workers=3) as pool:
        for run in pool.map(make, RUNS):
            # The models fail some cases (exit status 1); the report is what counts.
            assert run.ret in (0, 1), run.output[-3000:]
            assert run.report_path.is_file(), run.output[-3000:]
            assert_valid_report(run.report)
    return where


def place(pytester: pytest.Pytester, made: Path, *names: str) -> list[str]:
    """Copy reports (and the oracle's page) into the test's directory; their file names."""
    for name in names:
        shutil.copy(made / f"{name}.json", pytester.path / f"{name}.json")
    shutil.copy(made / "oracle.html", pytester.path / "oracle.html")
    return [f"{name}.json" for name in names]


def typed(path: Path) -> RunReport:
    """A run's report as the report's reader reads it."""
    return load_report(path, path.name).report


def compare(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, Comparison]:
    """``pytest --gta-compare ARGS --gta-report=cmp.json``; the result and the comparison."""
    run = gta(pytester, "--gta-compare", *args, report="cmp.json")
    assert run.ret == 0, run.output[-3000:]
    assert_clean(run.result)  # type: ignore[arg-type]
    assert_valid_comparison(run.report)
    comparison = parse_comparison("cmp.json", run.report)
    assert dump_comparison(comparison) == run.report_path.read_text(encoding="utf-8")
    return run.result, comparison  # type: ignore[return-value]


def refused(pytester: pytest.Pytester, *args: str) -> str:
    """``pytest --gta-compare ARGS``, which must be a usage error; its message."""
    result = pytester.runpytest("--gta-compare", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output_text(result)
    assert_clean(result)
    return result.stderr.str()


def test_one_row_per_run_with_each_reports_numbers_and_leaderboard_rows(pytester, made):
    names = place(pytester, made, "oracle", "mock_a", "mock_b", "opencompass")
    result, comparison = compare(
        pytester,
        *names,
        "--gta-leaderboard-rows=2026-02",
        "--gta-report-md=cmp.md",
        "--gta-report-html=cmp.html",
    )
    labels = [
        "oracle [react]",
        "mock:script_a.json [react]",
        "mock:script_b.json [react]",
        "opencompass:oc [react]",
    ]
    assert [run.label for run in comparison.runs] == labels
    assert comparison.schema_ == "pytest-gta-comparison/1"
    assert comparison.reference == "oracle [react]"
    for run, name in zip(comparison.runs, names, strict=True):
        report = typed(pytester.path / name)
        assert run.sources == [name]
        for key in COPIED:
            assert getattr(run, key) == getattr(report, key), (name, key)
    # the runs' rows, then the board's, in both of the paper's modes (opencompass: e2e only)
    board = comparison.leaderboard
    assert len(board) > 5
    assert {row.board for row in board} == {"2026-02"}
    e2e, step = comparison.tables.table4.e2e, comparison.tables.table4.step
    assert e2e is not None
    assert step is not None
    assert [r.label for r in e2e.rows if r.kind == "run"] == labels
    assert len([r for r in e2e.rows if r.kind == "leaderboard"]) == len(board)
    assert [r.label for r in step.rows if r.kind == "run"] == labels[:3]
    # the differing turn limit is noted, naming the runs
    assert (
        "the runs differ in settings.max_turns: 10 (oracle [react], mock:script_a.json [react], "
        "opencompass:oc [react]); 5 (mock:script_b.json [react])"
    ) in comparison.notes
    text = result.stdout.str()
    assert " GTA comparison " in text
    for label in [*labels, board[0].model]:
        assert label in text
    markdown = (pytester.path / "cmp.md").read_text()
    for label in labels:
        assert markdown_text(label) in markdown  # "oracle \\[react\\]": shown literally
    assert f"written to {pytester.path / 'cmp.md'}" in text
    page = (pytester.path / "cmp.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    for label in labels:
        assert label in page
    assert 'href="oracle.html"' in page  # the oracle's own page, beside its report


def test_a_directory_is_ordered_by_the_runs_dates_and_skips_other_json(pytester, made):
    history = pytester.mkdir("history")
    dates = {"mock_b": "2026-03-01T02:00:00Z", "oracle": "2026-03-02T02:00:00+00:00"}
    for n, (name, date) in enumerate(dates.items()):
        report = read_report(made / f"{name}.json")
        report["label"] = f"nightly-{date[:10]}"
        report["identity"] = {
            "label": report["label"],
            "label_given": True,
            "model": report["model"],
            "protocol": report["protocol"],
            "agent": None,
            "git": None,
            "started_at": date,
            "finished_at": date,
            "dataset_sha256": report["dataset"]["sha256"],
            "pytest_gta": report["settings"]["pytest_gta"],
        }
        # file names in the other order: the dates decide
        (history / f"{'zyx'[n]}.json").write_text(json.dumps(report))
    undated = read_report(made / "mock_a.json")
    del undated["label"], undated["identity"]  # a report from before identities: first
    (history / "undated.json").write_text(json.dumps(undated))
    shutil.copy(made / "oracle.html", history / "y.html")  # the oracle's page, beside y.json
    (history / "cmp.json").write_text(json.dumps({"schema": "pytest-gta-comparison/1"}))
    (history / "notes.json").write_text("not json")
    (history / "readme.txt").write_text("not a report")
    _, comparison = compare(pytester, "history")
    assert [run.label for run in comparison.runs] == [
        "mock:script_a.json [react]",
        "nightly-2026-03-01",
        "nightly-2026-03-02",
    ]
    assert [run.sources for run in comparison.runs] == [
        ["history/undated.json"],
        ["history/z.json"],
        ["history/y.json"],
    ]
    assert [run.html for run in comparison.runs] == [None, None, str(history / "y.html")]
    notes = comparison.notes
    assert (
        "history/cmp.json: skipped, not a pytest-gta report (schema pytest-gta-comparison/1)"
        in (notes)
    )
    assert any(n.startswith("history/notes.json: skipped, not readable as JSON") for n in notes)
    assert not any("readme" in n for n in notes)


def test_shards_of_one_run_are_merged_into_the_unsharded_runs_numbers(pytester, made):
    names = place(pytester, made, "shard_1", "shard_2", "mock_a")
    _, comparison = compare(pytester, *names)
    merged, whole = comparison.runs
    assert merged.sources == ["shard_1.json", "shard_2.json"]
    assert (merged.label, whole.label) == (
        "mock:script_a.json [react]",
        "mock:script_a.json [react] #2",
    )
    for key in COPIED:
        assert getattr(merged, key) == getattr(whole, key), key
    assert merged.metrics == typed(pytester.path / "mock_a.json").metrics
    assert merged.metrics.e2e is not None
    assert merged.metrics.e2e.ans_acc is not None
    assert 0 < merged.metrics.e2e.ans_acc < 100
    assert not [n for n in comparison.notes if "shard" in n]


def test_an_incomplete_set_of_shards_is_a_note(pytester, made):
    names = place(pytester, made, "shard_2", "oracle")
    _, comparison = compare(pytester, *names)
    assert comparison.runs[0].sources == ["shard_2.json"]
    assert any(
        n.startswith("shard(s) 1/2 not given to --gta-compare: the merged report covers only")
        for n in comparison.notes
    )


def test_a_report_on_another_dataset_is_a_usage_error_naming_file_and_field(pytester, made):
    place(pytester, made, "oracle")
    other = read_report(made / "mock_a.json")
    other["dataset"]["sha256"] = "f" * 64
    (pytester.path / "other.json").write_text(json.dumps(other))
    message = refused(pytester, "oracle.json", "other.json")
    assert f"pytest-gta: other.json: dataset.sha256 is {'f' * 64}, oracle.json has " in message
    assert "runs on different datasets cannot be compared" in message


def test_an_unknown_reference_lists_the_labels(pytester, made):
    names = place(pytester, made, "oracle", "mock_b")
    message = refused(pytester, *names, "--gta-compare-ref=orcale [react]")
    assert "--gta-compare-ref=orcale [react]: no run has that label" in message
    assert "oracle [react], mock:script_b.json [react]" in message
    _, comparison = compare(pytester, *names, "--gta-compare-ref=mock:script_b.json [react]")
    assert comparison.reference == "mock:script_b.json [react]"
    assert list(comparison.paired.runs) == ["oracle [react]"]


def test_the_tables_are_appended_to_the_github_job_summary(pytester, made, monkeypatch):
    summary = pytester.path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    names = place(pytester, made, "oracle", "mock_b")
    compare(pytester, *names)
    text = summary.read_text()
    assert text.startswith("earlier step\n")
    assert markdown_text("oracle [react]") in text
    assert markdown_text("mock:script_b.json [react]") in text


def test_an_unknown_leaderboard_name_is_a_usage_error(pytester, made):
    names = place(pytester, made, "oracle")
    message = refused(pytester, *names, "--gta-leaderboard-rows=2026-02,gtp-4o")
    assert "gtp-4o" in message
    assert "--gta-leaderboard-rows" in message


def test_a_run_html_report_beside_its_json_is_linked(pytester, made):
    names = place(pytester, made, "oracle", "mock_a")
    _, comparison = compare(pytester, *names)
    assert [run.html for run in comparison.runs] == [str(pytester.path / "oracle.html"), None]
    # from the comparison's page: relative to where it is written
    _, comparison = compare(pytester, *names, "--gta-report-html=pages/cmp.html")
    assert [run.html for run in comparison.runs] == ["../oracle.html", None]
    assert 'href="../oracle.html"' in (pytester.path / "pages" / "cmp.html").read_text()


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"a.json": "[]"}, "a.json: not a pytest-gta report"),
        ({"a.json": "{"}, "a.json: invalid JSON"),
        ({"dir/x.txt": "x"}, "dir: no pytest-gta reports in this directory"),
    ],
)
def test_what_is_not_a_report_is_a_usage_error(pytester, files, message):
    for name, text in files.items():
        path = pytester.path / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    given = next(iter(files)).split("/")[0]
    assert f"pytest-gta: {message}" in refused(pytester, given, "nothere.json")


def test_missing_file_is_a_usage_error(pytester):
    assert "nothere.json: no such file; --gta-compare reads" in refused(pytester, "nothere.json")


def test_runs_with_xdist_on_the_command_line(pytester, made):
    names = place(pytester, made, "oracle", "mock_a")
    run = gta(pytester, "-p", "xdist", "-n", "2", "--gta-compare", *names, report="cmp.json")
    assert run.ret == 0, run.output[-3000:]
    assert [r["label"] for r in run.report["runs"]] == [
        "oracle [react]",
        "mock:script_a.json [react]",
    ]
    # No session, no workers (the test's own path may hold "gw0" under xdist).
    assert "bringing up nodes" not in run.output
    assert "workers" not in run.output


# ---------------------------------------------------------------------------------------------
# Anything in place of a report: compared, or a usage error naming the file (never a traceback)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


def _compare_in_process(paths: list[Path], labels: list[str], dataset: Any) -> Comparison:
    """What the command does between reading the paths and printing (no pytest config).

    The comparison is cleaned as the command cleans it before it shows and writes it.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a NumPy overflow is a defect too
        found = find_reports(paths, labels)
        return cleaned(comparison_of(found, dataset, CompareSettings(samples=20)))


@settings(max_examples=60, deadline=None)
@given(values=st.lists(JSON, min_size=1, max_size=3), as_directory=st.booleans())
def test_property_any_json_is_compared_or_a_usage_error(
    tmp_path_factory, sample_dataset, values, as_directory
):
    where = tmp_path_factory.mktemp("any")
    paths = []
    for n, value in enumerate(values):
        path = where / f"r{n}.json"
        path.write_text(json.dumps(value))
        paths.append(path)
    if as_directory:
        paths = [where]
    with pytest.raises(GtaUsageError) as refusal:
        _compare_in_process(paths, [str(p) for p in paths], sample_dataset)
    assert str(refusal.value).startswith(str(where))  # names the file or the directory


@settings(max_examples=60, deadline=None)
@given(edits=EDITS, first=st.booleans())
def test_property_a_mutated_report_is_compared_or_a_usage_error(
    made, tmp_path_factory, sample_dataset, edits, first
):
    where = tmp_path_factory.mktemp("mutated")
    good = made / "mock_a.json"
    bad = where / "bad.json"
    bad.write_text(json.dumps(_edited(read_report(good), edits)))
    paths = [bad, good] if first else [good, bad]
    try:
        comparison = _compare_in_process(paths, [str(p) for p in paths], sample_dataset)
    except GtaUsageError as exc:
        message = str(exc)
    else:
        # what the command writes and shows: strict JSON, and every renderer's page
        dump_comparison(comparison)
        render_text(comparison)
        render_markdown(comparison)
        render_comparison_html(comparison)
        return
    # names the file (a dataset that differs: both files), or the option
    assert str(bad) in message or message.startswith("--gta-compare"), message
