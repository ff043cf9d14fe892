"""Runs side by side (issue 26): the comparison dict and its text and markdown renderings.

Real runs on the bundled sample, in process: the ``oracle``, two ``mock:`` models that pass,
fail and error different cases, and an ``opencompass:`` prediction file (end to end only); and
a served model whose sampled answers differ from epoch to epoch for pass^k. Each comparison is
built from the typed reports as ``results.io.load_report`` reads them back, and every number a
run's report already has must come out unchanged; every comparison is what its published JSON
Schema says. The pure parts (pass^k, pass@k, the fronts, best marking,
the names) are also checked on constructed values, pass^k and pass@k against their definition
over every k-subset of epochs.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import MISSING

from pytest_gta.errors import GtaUsageError
from pytest_gta.models.catalog import LEADERBOARD_METRICS, leaderboard_boards, leaderboard_rows
from pytest_gta.report.baseline import compare, load_baseline
from pytest_gta.report.build import ordered
from pytest_gta.report.runs import RunInput, build_comparison, leaderboard_selection
from pytest_gta.report.runs_stats import (
    Candidate,
    front,
    pareto,
    pass_at_k,
    pass_hat_k,
    reliability_of,
)
from pytest_gta.report.runs_tables import best_of
from pytest_gta.report.runs_text import render_markdown, render_text
from pytest_gta.results.case import CaseResult
from pytest_gta.results.comparison import (
    COMPARISON_SCHEMA,
    Comparison,
    RunCost,
    Table4Row,
    interval_value,
    metric_value,
)
from pytest_gta.results.io import dump_comparison, load_report, parse_comparison
from tests.helpers.gta_run import BOTH_MODES, FAST_SIM, ORACLE, SAMPLE_DATA, XDIST, GtaRun
from tests.helpers.oracle_server import OracleServer
from tests.helpers.report_models import case_result
from tests.test_gates import sampled_wrong, sampling, write_predictions
from tests.test_results_schema import assert_valid_comparison, assert_valid_report
from tests.test_shard import SCRIPT as MIXED_SCRIPT

#: A second scripted model: right on the first query step by step only, a wrong reading end to
#: end, a call to a file the dataset lacks; no endpoint errors. It flips against the first.
TERSE_SCRIPT = {
    "default": "Final Answer: I do not know",
    "responses": {
        "e2e-0": [
            'Thought: read it\nAction: OCR\nAction Input: {"image": "{data}/image/image_0.jpg"}',
            "Final Answer: 7.00",
        ],
        "e2e-1": [
            'Thought: read it\nAction: OCR\nAction Input: {"image": "{data}/image/nothere.jpg"}',
            "Final Answer: 9.24",
        ],
        "step-0": [
            'Action: OCR\nAction Input: {"image": "{data}/image/image_0.jpg"}',
            'Action: Calculator\nAction Input: {"expression": "1.29+3.45+4.50"}',
            "Final Answer: 9.24",
        ],
    },
}
LABELS = ("oracle", "mixed", "terse", "predictions")
SAMPLES = 200


def run_in_process(pytester: pytest.Pytester, *args: str, report: str) -> GtaRun:
    """One run in this process (``gta_run.gta`` also knows subprocesses, which are slow)."""
    path = pytester.path / report
    return GtaRun(pytester.runpytest(*args, f"--gta-report={path}"), path)


def _load(path: Path, label: str) -> RunInput:
    return RunInput(label, (str(path),), load_report(path, label).report)


def _written(comparison: Comparison) -> Comparison:
    """The comparison as its ``--gta-report`` file has it, checked against the schema."""
    data = json.loads(dump_comparison(comparison))  # strict JSON, as --gta-report writes it
    assert_valid_comparison(data)
    again = parse_comparison("cmp.json", data)
    assert dump_comparison(again) == dump_comparison(comparison)
    return again


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the sample runs' reports are kept for every test of the module."""
    return tmp_path_factory.mktemp("runs")


@pytest.fixture
def sample_runs(pytester: pytest.Pytester, sample_dataset: Any, report_dir: Path) -> list[RunInput]:
    """The four sample runs, made in process by the first test that asks, then read back."""
    if not all((report_dir / f"{label}.json").is_file() for label in LABELS):
        for name, script in (("mixed", MIXED_SCRIPT), ("terse", TERSE_SCRIPT)):
            (pytester.path / f"{name}.json").write_text(json.dumps(script))
        predictions = write_predictions(pytester.path / "predictions", sample_dataset, bad=False)
        argv = {
            "oracle": (ORACLE, BOTH_MODES),
            "mixed": (f"--gta-model=mock:{pytester.path / 'mixed.json'}", BOTH_MODES),
            "terse": (f"--gta-model=mock:{pytester.path / 'terse.json'}", BOTH_MODES),
            "predictions": (f"--gta-model=opencompass:{predictions}", "--gta-mode=e2e"),
        }
        for label in LABELS:
            run = run_in_process(
                pytester, SAMPLE_DATA, FAST_SIM, *argv[label], report=f"{label}.json"
            )
            assert run.report["cases"], run.output[-2000:]
            assert_valid_report(run.report)
            shutil.copy(run.report_path, report_dir / f"{label}.json")
    return [_load(report_dir / f"{label}.json", label) for label in LABELS]


def _passed(cases: list[CaseResult], mode: str, qid: str) -> list[bool]:
    return [c.outcome == "passed" for c in cases if c.mode == mode and c.query_id == qid]


# -- the sample runs side by side --------------------------------------------------------------


@pytest.mark.slow  # 2 s in a full run: slow by cost (issue 39)
def test_every_run_shows_its_own_reports_numbers(sample_runs, sample_dataset):
    given = "settings.max_turns differs: 10 (oracle) vs 5 (mixed)"
    comparison = build_comparison(sample_runs, sample_dataset, samples=SAMPLES, notes=[given])
    assert comparison.schema_ == COMPARISON_SCHEMA
    assert comparison.notes[0] == given
    assert f"note: {given}" in render_text(comparison)
    assert comparison.reference == "oracle"
    assert [r.label for r in comparison.runs] == list(LABELS)
    for run, entry in zip(sample_runs, comparison.runs, strict=True):
        report = run.report
        assert entry.metrics == report.metrics
        assert entry.metrics_ci == report.metrics_ci
        assert entry.pass_rate == report.pass_rate
        assert entry.errors == report.errors
        assert entry.tool_calls == report.tool_calls
        assert entry.outcomes == report.outcomes
        assert entry.cases == len(report.cases)
        assert entry.modes == report.metrics.modes()
        assert entry.identity == report.identity
        assert entry.model == report.model
        for mode, table in comparison.tables.table4.items():
            rows = [row for row in table.rows if row.label == run.label]
            if mode not in report.metrics:
                assert rows == []
                continue
            (row,) = rows
            assert row.kind == "run"
            for metric, value in row.values.items():
                assert value == metric_value(report.metrics.get(mode), metric)
                ci = interval_value(report.metrics_ci.get(mode), metric)
                assert ci is not None
                assert row.ci[metric] == (ci.low, ci.high)
        for row5 in comparison.tables.table5.rows:
            if row5.label == run.label:
                counts = report.errors.get(row5.mode)
                assert counts is not None
                assert row5.errored_calls == counts.format + counts.args + counts.other
    mixed = comparison.runs[1]
    assert mixed.outcomes.error > 0  # the script's unreachable endpoint
    assert comparison.runs[3].modes == ["e2e"]
    assert any("predictions did not run the step mode" in n for n in comparison.notes)
    step = comparison.tables.table4.step
    assert step is not None
    assert [r.label for r in step.rows] == ["oracle", "mixed", "terse"]
    assert _written(comparison) == comparison


def test_the_best_value_per_column_is_marked_ties_included(sample_runs, sample_dataset):
    comparison = build_comparison(sample_runs, sample_dataset, samples=SAMPLES)
    e2e = comparison.tables.table4.e2e
    assert e2e is not None
    for column in e2e.columns:
        shown = {r.label: round(r.values[column] or 0.0, 2) for r in e2e.rows}
        top = max(shown.values())
        assert e2e.best[column] == [label for label, v in shown.items() if v == top]
    # The oracle and the perfect prediction file tie on the tool-call F1s: both marked.
    assert e2e.best["p_f1"] == ["oracle", "predictions"]
    text = "\n".join(render_text(comparison))
    oracle_line = next(line for line in text.splitlines() if line.startswith("oracle "))
    assert "100.00*" in oracle_line
    mixed_line = next(line for line in text.splitlines() if line.startswith("mixed "))
    assert "*" not in mixed_line
    markdown = render_markdown(comparison)
    assert "| oracle | **100.00** |" in markdown


def _row(label: str, values: dict[str, float | None]) -> Table4Row:
    return Table4Row(label=label, kind="run", board=None, model="m", values=values, ci={})


def test_best_of_marks_ties_at_the_shown_precision():
    rows = [
        _row("a", {"x": 50.004, "y": None}),
        _row("b", {"x": 49.996, "y": 3.0}),
        _row("c", {"x": 12.0, "y": 2.0}),
    ]
    assert best_of(rows, ["x", "y"]) == {"x": ["a", "b"], "y": ["b"]}
    assert best_of([_row("a", {"x": None})], ["x"]) == {"x": []}


def test_leaderboard_rows_of_a_board_and_of_a_model(sample_runs, sample_dataset):
    comparison = build_comparison(
        sample_runs, sample_dataset, leaderboard=["2026-02", "gpt-4o"], samples=SAMPLES
    )
    board = leaderboard_boards()["2026-02"]
    gpt4o = leaderboard_rows()["gpt-4o"]
    expected = [(m, "2026-02") for m in board] + [("gpt-4o", gpt4o["board"])]
    assert [(r.model, r.board) for r in comparison.leaderboard] == expected
    assert gpt4o["board"] == "2025-03"  # the newest board that has it
    for mode, table in comparison.tables.table4.items():
        published = [r for r in table.rows if r.kind == "leaderboard"]
        assert [(r.model, r.board) for r in published] == expected
        assert table.rows[: -len(published)] == [r for r in table.rows if r.kind == "run"]
        for row in published:
            source = board[row.model] if row.board == "2026-02" else gpt4o
            assert row.ci == {}
            for column in table.columns:
                assert row.values[column] == float(source[column])
        assert mode in ("step", "e2e")
    # Over runs and published rows: the perfect runs on the sample beat every published AnsAcc.
    e2e = comparison.tables.table4.e2e
    assert e2e is not None
    assert e2e.best["ans_acc"] == ["oracle", "predictions"]
    text = render_text(comparison)
    assert any(line.startswith("gpt-4o (published 2025-03) ") for line in text)
    assert any("published rows are over all 229 GTA queries" in n for n in comparison.notes)
    _written(comparison)


def test_leaderboard_names_mix_and_repeat():
    rows = leaderboard_selection(["gpt-4o", " GPT-4O ", "2025-03"])
    assert rows[0].model == "gpt-4o"
    assert [(r.model, r.board) for r in rows].count(("gpt-4o", "2025-03")) == 1
    assert len(rows) == len(leaderboard_boards()["2025-03"])
    assert tuple(rows[0].values) == LEADERBOARD_METRICS


def test_an_unknown_leaderboard_name_lists_the_boards_and_close_models():
    with pytest.raises(GtaUsageError) as info:
        leaderboard_selection(["2026-02", "gpt-4x"])
    message = str(info.value)
    assert message.startswith("--gta-leaderboard-rows=gpt-4x: ")
    assert "did you mean gpt-4o" in message
    for board in leaderboard_boards():
        assert board in message


def test_paired_tests_are_compares_own(sample_runs, sample_dataset):
    comparison = build_comparison(
        sample_runs, sample_dataset, reference="terse", samples=SAMPLES, level=0.9
    )
    paired = comparison.paired
    assert paired.reference == comparison.reference == "terse"
    assert list(paired.runs) == ["oracle", "mixed", "predictions"]
    # The paired tests equal --gta-baseline's, on the reports as its reader reads them.
    terse = load_baseline(sample_runs[2].sources[0], "terse")
    for run in sample_runs:
        if run.label == "terse":
            continue
        cases = load_report(Path(run.sources[0]), run.label).cases
        direct = compare(
            ordered(cases, sample_dataset), terse, sample_dataset, level=0.9, samples=200
        )
        assert paired.runs[run.label] == direct
    # The step-less prediction file is compared on the mode both runs have.
    assert paired.runs["predictions"].metrics.modes() == ["e2e"]
    e2e = paired.runs["oracle"].metrics.e2e
    assert e2e is not None
    difference = e2e["ans_acc"].difference
    assert difference is not None
    assert difference > 0
    text = "\n".join(render_text(comparison))
    assert "Paired tests against terse, end-to-end mode" in text


def test_an_unknown_reference_names_the_option_and_the_labels(sample_runs, sample_dataset):
    with pytest.raises(GtaUsageError) as info:
        build_comparison(sample_runs, sample_dataset, reference="orcale")
    message = str(info.value)
    assert message.startswith("--gta-compare-ref=orcale: no run has that label")
    assert "did you mean oracle" in message
    assert "oracle, mixed, terse, predictions" in message


def test_the_matrix_flips_exactly_where_outcomes_differ(sample_runs, sample_dataset):
    comparison = build_comparison(sample_runs, sample_dataset, samples=SAMPLES)
    matrix = comparison.matrix
    assert matrix.runs == list(LABELS)
    cases = {run.label: run.report.cases for run in sample_runs}
    keys = [(q.mode, q.query_id) for q in matrix.queries]
    expected_keys = [(m, q.qid) for m in ("step", "e2e") for q in sample_dataset]
    assert keys == expected_keys
    flips = 0
    for query in matrix.queries:
        mode, qid = query.mode, query.query_id
        outcomes = {label: _passed(cases[label], mode, qid) for label in LABELS}
        having = {label: o for label, o in outcomes.items() if o}
        assert query.flip == (len({tuple(o) for o in having.values()}) > 1)
        flips += query.flip
        assert query.type == sample_dataset[qid].type
        assert set(query.categories) == set(sample_dataset[qid].categories)
        for label in LABELS:
            cell = query.cells[label]
            assert cell.passed == sum(outcomes[label])
            assert cell.epochs == len(outcomes[label])
            if not outcomes[label]:
                assert cell.outcome is None
        for label, verdict in query.versus_reference.items():
            now, before = outcomes[label][0], outcomes["oracle"][0]
            assert verdict == ("same" if now == before else "fixed" if now else "regressed")
        assert "predictions" not in query.versus_reference or mode == "e2e"
    # The two scripted models differ on the first query end to end (one answers it right).
    first = next(q for q in matrix.queries if (q.mode, q.query_id) == ("e2e", "0"))
    assert first.cells["mixed"].outcome == "passed"
    assert first.cells["terse"].outcome == "failed"
    assert first.flip
    assert flips > 1
    for group in matrix.groups:
        members = [
            q
            for q in matrix.queries
            if q.mode == group.mode
            and (q.type == group.name if group.by == "type" else group.name in q.categories)
        ]
        assert group.queries == len(members)
        for label in LABELS:
            assert group.passed[label] == sum(q.cells[label].passed for q in members)
    markdown = render_markdown(comparison)
    assert "### end-to-end mode, objective queries" in markdown
    flipped = next(q for q in matrix.queries if q.flip)
    assert f"| **{flipped.query_id}** |" in markdown
    assert render_markdown(_written(comparison)) == markdown


def test_reliability_of_single_epoch_runs_is_the_pass_rate(sample_runs, sample_dataset):
    comparison = build_comparison(sample_runs, sample_dataset, samples=SAMPLES)
    for run, entry in zip(sample_runs, comparison.runs, strict=True):
        for mode, values in entry.reliability.items():
            assert values.k == [1]
            assert values.pass_hat_k["1"] == pytest.approx(run.report.pass_rate.get(mode))
            assert values.pass_at_k["1"] == pytest.approx(run.report.pass_rate.get(mode))
            assert values.flaky == []


@pytest.mark.slow  # 2 s in a full run: slow by cost (issue 39)
def test_reliability_over_epochs_of_a_sampling_model(
    pytester, sample_runs, sample_dataset, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-compare-test")
    with OracleServer(sample_dataset, sampled=sampled_wrong) as server:
        run = run_in_process(
            pytester,
            SAMPLE_DATA,
            *sampling(server.url),
            "--gta-ids=0,1,4,7",
            "--gta-price=1,2",
            FAST_SIM,
            report="epochs.json",
        )
    assert_valid_report(run.report)
    sampled = _load(run.report_path, "sampled")
    comparison = build_comparison([sample_runs[0], sampled], sample_dataset, samples=SAMPLES)
    entry = comparison.runs[1]
    values = entry.reliability.e2e
    assert values is not None
    assert entry.epochs == values.epochs == 3
    assert values.k == [1, 2, 3]
    tables = {qid: _passed(sampled.report.cases, "e2e", qid) for qid in ("0", "1", "4", "7")}
    # seeds 6, 7, 8: query 1 is wrong at 7, query 4 at 8
    assert values.flaky == ["1", "4"]
    for k in (1, 2, 3):
        assert values.pass_hat_k[str(k)] == pytest.approx(_by_subsets(tables, k, all))
        assert values.pass_at_k[str(k)] == pytest.approx(_by_subsets(tables, k, any))
    assert values.pass_hat_k["1"] == pytest.approx(sampled.report.pass_rate.e2e)
    # The run scored 4 of the oracle's 17 queries: the paired test is over those 4.
    matched = comparison.paired.runs["sampled"].cases.e2e
    assert matched is not None
    assert matched.matched == 4
    assert any("scored different e2e queries" in n for n in comparison.notes)
    # A served model with prices has a cost; the oracle has none and is left off that front.
    cost = entry.cost
    usage = sampled.report.usage
    assert usage.cost_usd is not None
    assert cost.cost_usd == usage.cost_usd > 0
    assert cost.input_tokens == usage.input_tokens
    assert cost.cost_per_case == pytest.approx(usage.cost_usd / 12)
    assert comparison.front.cost.front == ["sampled"]
    assert "oracle" in comparison.front.cost.left_out
    _written(comparison)
    text = "\n".join(render_text(comparison))
    assert "pass^3" in text
    assert "flaky (sampled, e2e): 1, 4" in text


def _by_subsets(tables: dict[str, list[bool]], k: int, combine: Any) -> float:
    """pass^k (``all``) or pass@k (``any``) by definition: over every k of a query's epochs."""
    shares = []
    for outcomes in tables.values():
        subsets = list(itertools.combinations(outcomes, k))
        shares.append(sum(combine(s) for s in subsets) / len(subsets))
    return sum(shares) / len(shares) * 100


OUTCOME_TABLES = st.lists(
    st.lists(st.sampled_from(["passed", "failed", "error", "skipped"]), min_size=1, max_size=6),
    min_size=1,
    max_size=8,
)


def _case(qid: str, epoch: int, outcome: str, mode: str = "e2e") -> CaseResult:
    """A case as a report holds it, with what reliability reads: mode, query, outcome."""
    return case_result(
        id=f"{mode}-{qid}@epoch{epoch}",
        query_id=qid,
        mode=mode,
        epoch=epoch,
        outcome=outcome,
        nodeid=f"test[{qid}@{epoch}]",
    )


@given(OUTCOME_TABLES, st.booleans())
def test_pass_hat_k_and_pass_at_k_equal_their_definition(table, ragged):
    epochs = max(len(row) for row in table)
    cases = [
        _case(str(q), e, outcome)
        for q, row in enumerate(table)
        for e, outcome in enumerate(row if ragged else (row * epochs)[:epochs])
    ]
    notes: list[str] = []
    values = reliability_of("run", cases, ["e2e"], epochs, notes).e2e
    assert values is not None
    passed = {
        str(q): [o == "passed" for o in (row if ragged else (row * epochs)[:epochs])]
        for q, row in enumerate(table)
    }
    assert values.k == list(range(1, epochs + 1))
    for k in values.k:
        having = {q: o for q, o in passed.items() if len(o) >= k}
        for chances, combine in ((values.pass_hat_k, all), (values.pass_at_k, any)):
            expected = _by_subsets(having, k, combine) if having else None
            assert chances[str(k)] == pytest.approx(expected)
    assert values.flaky == [q for q, o in passed.items() if any(o) and not all(o)]
    short = ragged and any(len(row) < epochs for row in table)
    assert bool(notes) == short
    # The formulas are the ones tau-bench and Codex write.
    pairs = [(len(o), sum(o)) for o in passed.values()]
    assert pass_hat_k(pairs, 1) == pytest.approx(pass_at_k(pairs, 1))


# -- fronts ---------------------------------------------------------------------------------


def test_pareto_keeps_the_points_nothing_beats():
    points = [
        ("cheap", 1.0, 40.0),
        ("dear", 5.0, 60.0),
        ("worse", 5.0, 50.0),  # as dear as dear, less accurate
        ("twin", 1.0, 40.0),  # equal to cheap: both stay
        ("middle", 3.0, 55.0),
        ("dominated", 3.0, 39.0),
    ]
    assert pareto(points) == ["cheap", "dear", "twin", "middle"]
    assert pareto([]) == []


def _candidate(label: str, modes: list[str], per_case: float | None, ans: float | None):
    cost = RunCost(
        cases=1,
        input_tokens=0,
        output_tokens=0,
        tokens_per_case=0.0,
        cost_usd=per_case,
        cost_per_case=per_case,
        wall_s=None,
        wall_per_case_s=None,
        model_s=None,
        model_per_case_s=None,
    )
    return Candidate(label, modes, cost, ans if "e2e" in modes else None)


def test_fronts_leave_out_runs_without_the_numbers_and_say_why():
    candidates = [
        _candidate("a", ["e2e"], 0.01, 30.0),
        _candidate("b", ["e2e"], 0.02, 50.0),
        _candidate("c", ["e2e"], 0.03, 45.0),
        _candidate("no-price", ["e2e"], None, 99.0),
        _candidate("step-only", ["step"], 0.0, None),
    ]
    result = front(candidates, "cost_per_case")
    assert result.x == "cost_per_case"
    assert [p.label for p in result.points] == ["a", "b", "c"]
    assert result.front == ["a", "b"]
    assert "--gta-price" in result.left_out["no-price"]
    assert "end-to-end" in result.left_out["step-only"]
    assert "no case durations" in front(candidates, "wall_per_case_s").left_out["a"]


def test_cost_and_time_come_from_the_report(sample_runs, sample_dataset):
    comparison = build_comparison(sample_runs, sample_dataset, samples=SAMPLES)
    for run, entry in zip(sample_runs, comparison.runs, strict=True):
        cost = entry.cost
        ran = [c for c in run.report.cases if c.outcome != "skipped"]
        duration = run.report.duration_s
        assert duration is not None
        assert cost.cases == len(ran)
        assert cost.wall_s == duration
        assert cost.wall_per_case_s == pytest.approx(duration / len(ran))
        assert cost.cost_usd is None  # no prices for these models
    time_front = comparison.front.time
    assert set(time_front.front) <= {"oracle", "mixed", "terse", "predictions"}
    assert time_front.front
    best = max(time_front.points, key=lambda p: (p.ans_acc, -p.x))
    assert best.label in time_front.front


def test_model_time_is_the_reports_or_the_cases_sum(sample_runs, sample_dataset):
    oracle = sample_runs[0].report
    older = oracle.usage.model_copy(update={"model_s": MISSING})  # from before usage.model_s
    timed = [c.model_copy(update={"model_s": 0.5}) for c in oracle.cases]
    untimed = [c.model_copy(update={"model_s": None}) for c in oracle.cases]
    given = oracle.usage.model_copy(update={"model_s": 3.0})
    runs = [
        RunInput("timed", (), oracle.model_copy(update={"usage": older, "cases": timed})),
        RunInput("untimed", (), oracle.model_copy(update={"usage": older, "cases": untimed})),
        RunInput("given", (), oracle.model_copy(update={"usage": given, "cases": timed})),
    ]
    entries = build_comparison(runs, sample_dataset, samples=SAMPLES).runs
    assert entries[0].cost.model_s == pytest.approx(0.5 * len(timed))
    assert entries[0].cost.model_per_case_s == pytest.approx(0.5)
    assert entries[1].cost.model_s is None
    assert entries[1].cost.model_per_case_s is None
    assert entries[2].cost.model_s == 3.0
    assert entries[2].cost.model_per_case_s == pytest.approx(3.0 / len(timed))


def test_labels_must_be_unique(sample_runs, sample_dataset):
    with pytest.raises(GtaUsageError, match="oracle name several runs"):
        build_comparison([sample_runs[0], sample_runs[0]], sample_dataset)


# -- the real release --------------------------------------------------------------------------


# (slow: two xdist workers; the 458 cases take most of a minute)
def test_the_oracle_on_the_release_against_itself_in_both_modes(
    pytester, release_root, release_dataset
):
    dataset = release_dataset
    run = run_in_process(
        pytester,
        ORACLE,
        f"--gta-data={release_root}",
        BOTH_MODES,
        FAST_SIM,
        *XDIST,
        report="gta.json",
    )
    assert_valid_report(run.report)
    first = _load(run.report_path, "first")
    second = RunInput("second", first.sources, first.report)
    comparison = build_comparison([first, second], dataset, leaderboard=["2026-02"], samples=200)
    assert len(first.report.cases) == 458
    for entry in comparison.runs:
        assert entry.metrics == first.report.metrics
    assert not any(q.flip for q in comparison.matrix.queries)
    for mode in ("step", "e2e"):
        matched = comparison.paired.runs["second"].cases.get(mode)
        assert matched is not None
        assert matched.matched == 229
    assert not any("published rows" in n for n in comparison.notes)
    _written(comparison)


def test_a_merged_run_times_its_cases_by_their_own_durations(sample_runs, sample_dataset):
    """A merged report has no session wall time: its cases' own durations stand in."""
    run = sample_runs[0]
    merged = run.report.model_copy(update={"duration_s": None})
    single = RunInput("merged", run.sources, merged)
    cost = build_comparison([single], sample_dataset, samples=SAMPLES).runs[0].cost
    durations = [
        c.duration for c in run.report.cases if c.outcome != "skipped" and c.duration is not None
    ]
    assert cost.wall_s is None
    assert cost.wall_per_case_s == pytest.approx(sum(durations) / len(durations))
