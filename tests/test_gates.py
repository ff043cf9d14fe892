"""Model-CI gates, black box: intervals, epochs, baselines, gates and the exit status (issue 13).

Two "models" re-scored from OpenCompass prediction files on the bundled sample: ``good`` gives
the reference chain and answer for every query, ``bad`` answers every query at once with a
wrong answer and no tool call. The gate must fail for ``bad`` against ``good`` as baseline and
hold for a run against itself, whatever its cases' outcomes. Epochs use a real OpenAI-compatible
server on 127.0.0.1 whose "samples" are wrong for some (query, seed) pairs.
"""

from __future__ import annotations

import json
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.errors import GtaUsageError
from pytest_gta.gates import Floor, GateSettings, MetricRef
from pytest_gta.options.gates import (
    parse_alpha,
    parse_fail_on_regression,
    parse_fail_under,
    parse_min_drop,
)
from pytest_gta.report.baseline import load_baseline
from pytest_gta.report.gate_verdicts import exit_status, judge
from pytest_gta.results.base import PerMode
from pytest_gta.results.report import GatesVerdict
from tests.helpers.gta_run import FAST_SIM, SAMPLE_DATA, gta, read_report
from tests.helpers.oracle_server import OracleServer
from tests.helpers.report_builders import stored_report
from tests.test_opencompass import answer, foreign_dialogs, perfect_episode


def write_predictions(directory: Path, dataset: Any, bad: bool) -> Path:
    """One OpenCompass e2e prediction file for the sample: perfect, or wrong at once."""
    directory.mkdir(parents=True, exist_ok=True)
    records = {}
    for n, query in enumerate(dataset):
        gold = foreign_dialogs(dataset, query)[1:]
        steps = [answer(" I do not know")] if bad else perfect_episode(gold)
        records[str(n)] = {"gold": [gold], "prediction": [steps], "origin_prompt": [query.text]}
    (directory / "gta_bench.json").write_text(json.dumps(records))
    return directory


@pytest.fixture
def models(tmp_path: Path, sample_dataset: Any) -> dict[str, Path]:
    return {
        "good": write_predictions(tmp_path / "good", sample_dataset, bad=False),
        "bad": write_predictions(tmp_path / "bad", sample_dataset, bad=True),
    }


def run(pytester: pytest.Pytester, predictions: Path, name: str, *extra: str) -> Any:
    """Re-score ``predictions``; the report goes to ``name.json``."""
    return gta(
        pytester,
        SAMPLE_DATA,
        f"--gta-model=opencompass:{predictions}",
        FAST_SIM,
        *extra,
        report=f"{name}.json",
    ).result


def report_of(pytester: pytest.Pytester, name: str) -> dict[str, Any]:
    return read_report(pytester.path / f"{name}.json")


@pytest.fixture
def good_report(pytester: pytest.Pytester, models: dict[str, Path]) -> Path:
    result = run(pytester, models["good"], "good")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    return pytester.path / "good.json"


def test_every_run_has_intervals(pytester, models):
    result = run(pytester, models["good"], "good")
    report = report_of(pytester, "good")
    ci = report["metrics_ci"]["e2e"]
    for metric in ("ans_acc", "ans_acc_img", "p_f1", "o_f1", "l_f1", "c_f1", "pass_rate"):
        interval = ci[metric]
        assert interval["level"] == 0.95
        assert "bootstrap" in interval["method"]
        # (an F1 resample of a perfect run may sit 1e-5 points off: the official 1e-5 terms)
        point = report["metrics"]["e2e"].get(metric, report["pass_rate"]["e2e"])
        assert interval["low"] - 1e-3 <= point <= interval["high"] + 1e-3
    # The run is perfect: every resample is perfect too.
    assert ci["o_f1"]["low"] == pytest.approx(ci["o_f1"]["high"], abs=1e-3)
    assert report["pass_rate"]["e2e"] == 100.0
    assert "95% CI" in result.stdout.str()
    # Same run, same interval (the bootstrap is seeded).
    run(pytester, models["good"], "again")
    again = report_of(pytester, "again")
    outcomes = {c["id"]: (c["outcome"], c["message"]) for c in again["cases"]}
    assert outcomes == {c["id"]: (c["outcome"], c["message"]) for c in report["cases"]}
    assert again["metrics_ci"] == report["metrics_ci"]


def test_the_gate_fails_a_regression_and_names_it(pytester, models, good_report):
    result = run(
        pytester,
        models["bad"],
        "bad",
        f"--gta-baseline={good_report}",
        "--gta-fail-on-regression",
        "--junitxml=bad.xml",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    report = report_of(pytester, "bad")
    row = report["comparison"]["metrics"]["e2e"]["ans_acc"]
    # "I do not know" is a little similar to some subjective references
    assert row["baseline"] > 90 > 5 > row["this"]
    assert row["difference"] == pytest.approx(row["this"] - row["baseline"])
    assert row["p_drop"] < 0.05
    assert row["ci"]["high"] < 0
    pass_rate = report["comparison"]["metrics"]["e2e"]["pass_rate"]
    assert pass_rate["test"] == "exact McNemar"
    assert pass_rate["p_drop"] == pytest.approx(0.5**17)  # 17 passed -> failed, none back
    regressed = report["comparison"]["flipped"]["regressed"]
    assert [e["query_id"] for e in regressed] == [str(i) for i in range(17)]
    assert all(e["nodeids"][0].endswith(f"[e2e-{e['query_id']}]") for e in regressed)
    assert report["gates"]["passed"] is False
    text = result.stdout.str()
    assert "gate FAIL: e2e.ans_acc" in text
    assert "a significant regression" in text
    assert "Regressed cases (17" in text
    suite = ET.parse(pytester.path / "bad.xml").getroot().find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["gta_gates_passed"] == "false"
    assert float(props["gta_e2e_ans_acc_ci_high"]) >= float(props["gta_e2e_ans_acc"])


def test_a_run_against_itself_passes_though_its_cases_fail(pytester, models):
    run(pytester, models["bad"], "base")
    result = run(
        pytester,
        models["bad"],
        "bad",
        f"--gta-baseline={pytester.path / 'base.json'}",
        "--gta-fail-on-regression",
    )
    result.assert_outcomes(failed=17)
    assert result.ret == pytest.ExitCode.OK
    report = report_of(pytester, "bad")
    assert report["comparison"]["metrics"]["e2e"]["ans_acc"]["difference"] == 0
    assert report["comparison"]["flipped"] == {"regressed": [], "fixed": []}
    assert "gates: all held: the run passes (exit status 0); 17 query case(s) failed" in (
        result.stdout.str()
    )


def test_fail_under_decides_the_exit_status(pytester, models):
    result = run(pytester, models["good"], "good", "--gta-fail-under=ans_acc=45,e2e.pass_rate=90")
    assert result.ret == pytest.ExitCode.OK
    result = run(pytester, models["bad"], "bad", "--gta-fail-under=ans_acc=45")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    verdict = report_of(pytester, "bad")["gates"]["verdicts"][0]
    value = report_of(pytester, "bad")["metrics"]["e2e"]["ans_acc"]
    assert value < 5
    assert verdict == {
        "gate": "fail_under",
        "metric": "e2e.ans_acc",
        "floor": 45.0,
        "value": value,
        "passed": False,
        "reason": f"e2e.ans_acc = {value:.2f} < 45",
    }
    result.stdout.fnmatch_lines([f"gate FAIL: e2e.ans_acc = {value:.2f} < 45", "*exit status 1*"])


def test_without_gates_the_exit_status_is_pytests(pytester, models, good_report):
    result = run(pytester, models["bad"], "bad", f"--gta-baseline={good_report}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # failed cases, as without the plugin
    assert "gates" not in report_of(pytester, "bad")
    assert "comparison" in report_of(pytester, "bad")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gta-fail-under=inst_acc=50"], "a gate names step.inst_acc, but this run's modes"),
        (["--gta-fail-under=ans_acc"], "is not METRIC=VALUE"),
        (["--gta-fail-under=ans_acc=150"], "a percentage from 0 to 100"),
        (["--gta-fail-under=pass_rate=50"], "pass_rate needs its mode"),
        (["--gta-fail-under=answer=50"], "unknown metric 'answer'"),
        (["--gta-fail-on-regression"], "needs a run to compare with"),
        (["--gta-alpha=0.7"], "between 0 and 0.5"),
        (["--gta-epochs=0"], "--gta-epochs=0"),
        (["--gta-baseline=nowhere.json"], "nowhere.json: no such file"),
        (["--gta-baseline=leaderboard:gpt-4"], "did you mean"),
    ],
)
def test_bad_gate_options_are_usage_errors(pytester, models, args, message):
    result = run(pytester, models["good"], "x", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_a_baseline_of_another_dataset_is_refused_unless_lenient(pytester, models, good_report):
    data = json.loads(good_report.read_text())
    data["dataset"]["sha256"] = "0" * 64
    data["settings"]["sim_threshold"] = 0.7
    other = pytester.path / "other.json"
    other.write_text(json.dumps(data))
    result = run(pytester, models["good"], "x", f"--gta-baseline={other}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "not comparable with this run: dataset sha256 0000000000000000..." in err
    assert "sim_threshold 0.7 vs this run's 0.5" in err
    assert "--gta-baseline-lenient" in err
    result = run(pytester, models["good"], "x", f"--gta-baseline={other}", "--gta-baseline-lenient")
    assert result.ret == pytest.ExitCode.OK
    report = report_of(pytester, "x")
    assert any("compared anyway (--gta-baseline-lenient)" in n for n in report["notes"])


def test_a_hostile_baseline_file_is_a_usage_error(pytester, models, good_report):
    data = json.loads(good_report.read_text())
    data["cases"][3]["primitives"] = {"has_answer_ref": True, "predicted": 1e400}
    hostile = pytester.path / "hostile.json"
    hostile.write_text(json.dumps(data).replace("Infinity", "1e400"))
    result = run(pytester, models["good"], "x", f"--gta-baseline={hostile}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--gta-baseline" in result.stderr.str()
    assert "cases[3].primitives" in result.stderr.str()


def test_rerun_regressions_selects_the_regressed_cases(pytester, models, sample_dataset):
    half = write_predictions(pytester.path / "half", sample_dataset, bad=False)
    records = json.loads((half / "gta_bench.json").read_text())
    for key in ("2", "5"):
        records[key]["prediction"] = [[answer(" I do not know")]]
    (half / "gta_bench.json").write_text(json.dumps(records))
    run(pytester, models["good"], "good")
    run(pytester, half, "half", f"--gta-baseline={pytester.path / 'good.json'}")
    regressed = report_of(pytester, "half")["comparison"]["flipped"]["regressed"]
    assert [e["query_id"] for e in regressed] == ["2", "5"]
    result = run(
        pytester,
        half,
        "rerun",
        f"--gta-baseline={pytester.path / 'good.json'}",
        "--gta-rerun-regressions",
    )
    result.assert_outcomes(failed=2)
    assert "rerunning the 2 case(s) that regressed" in result.stdout.str()


def test_a_leaderboard_baseline_is_unpaired(pytester, models):
    result = run(pytester, models["bad"], "bad", "--gta-baseline=leaderboard:gpt-4o")
    report = report_of(pytester, "bad")
    comparison = report["comparison"]
    assert comparison["kind"] == "leaderboard"
    assert comparison["paired"] is False
    row = comparison["metrics"]["e2e"]["ans_acc"]
    assert row["baseline"] == 41.52
    assert row["this"] < 5
    assert row["p_drop"] < 0.05
    assert any("not directly comparable" in d for d in comparison["differences"])
    assert "Comparison with leaderboard:gpt-4o" in result.stdout.str()


def test_shards_merge_into_the_same_comparison(pytester, models, good_report):
    baseline = f"--gta-baseline={good_report}"
    run(pytester, models["bad"], "single", baseline, "--gta-fail-on-regression")
    for k in (1, 2):
        run(pytester, models["bad"], f"part{k}", f"--gta-shard={k}/2")
    result = pytester.runpytest(
        "--gta-merge",
        "part1.json",
        "part2.json",
        f"--gta-report={pytester.path / 'merged.json'}",
        baseline,
        "--gta-fail-on-regression",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    merged, single = report_of(pytester, "merged"), report_of(pytester, "single")
    assert merged["comparison"]["metrics"] == single["comparison"]["metrics"]
    assert merged["metrics_ci"] == single["metrics_ci"]
    assert merged["gates"] == single["gates"]


def test_github_step_summary_gets_the_markdown(pytester, models, good_report, monkeypatch):
    summary = pytester.path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run(
        pytester,
        models["bad"],
        "bad",
        f"--gta-baseline={good_report}",
        "--gta-fail-on-regression=ans_acc",
        f"--gta-report-md={pytester.path / 'bad.md'}",
    )
    text = summary.read_text()
    assert text.startswith("earlier step\n# GTA results")
    assert "## Comparison with" in text
    assert "## Gates" in text
    assert "- gate FAIL: e2e.ans_acc" in text
    assert (pytester.path / "bad.md").read_text() in text


# -- epochs ----------------------------------------------------------------------------------


def sampled_wrong(qid: str, seed: Any) -> bool:
    """Wrong for query 1 at odd seeds and query 4 at seed 8: a spread, deterministically."""
    return (qid == "1" and seed % 2 == 1) or (qid == "4" and seed == 8)


def sampling(url: str) -> tuple[str, ...]:
    """A sampling model over three epochs: the :class:`OracleServer` at ``url``, uncached."""
    return (
        "--gta-model=openai/oracle-http",
        f"--gta-base-url={url}",
        "--gta-cache=off",
        "--gta-temperature=0.7",
        "--gta-seed=6",
        "--gta-epochs=3",
    )


def test_epochs_give_the_spread_and_pass_rates(pytester, sample_dataset, monkeypatch, dist_args):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-epochs-test")
    with OracleServer(sample_dataset, sampled=sampled_wrong) as server:
        result = pytester.runpytest(
            SAMPLE_DATA,
            *sampling(server.url),
            "--gta-ids=0,1,4",
            FAST_SIM,
            f"--gta-report={pytester.path / 'epochs.json'}",
            "--junitxml=epochs.xml",
            *dist_args,
        )
    # seeds 6, 7, 8: query 1 is wrong at 7, query 4 at 8
    result.assert_outcomes(passed=7, failed=2)
    report = report_of(pytester, "epochs")
    assert report["epochs"] == 3
    assert report["query_pass_rates"]["e2e"] == {
        "0": 1.0,
        "1": pytest.approx(2 / 3),
        "4": pytest.approx(2 / 3),
    }
    per_epoch = report["metrics_by_epoch"]["e2e"]
    assert list(per_epoch) == ["0", "1", "2"]
    answers = [per_epoch[e]["ans_acc"] for e in per_epoch]
    assert report["metrics"]["e2e"]["ans_acc"] == pytest.approx(sum(answers) / 3)
    spread = report["metrics_spread"]["e2e"]["ans_acc"]
    assert spread["epochs"] == 3
    assert spread["std"] > 0
    assert spread["min"] == min(answers)
    assert spread["max"] == max(answers)
    ids = sorted(case["id"] for case in report["cases"])
    assert ids[:3] == ["e2e-0@epoch0", "e2e-0@epoch1", "e2e-0@epoch2"]
    assert "sd over 3 epochs" in result.stdout.str()
    names = [
        t.get("name") for t in ET.parse(pytester.path / "epochs.xml").getroot().iter("testcase")
    ]
    assert "test_query[e2e-1@epoch1]" in names


# -- parsers of outside data and options -------------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=JSON, surrogate=st.booleans(), cut=st.integers(min_value=0, max_value=400))
def test_a_hostile_baseline_is_a_usage_error_never_a_traceback(data, surrogate, cut):
    text = json.dumps({"schema": "pytest-gta-report/1", "cases": [data], "x": data})
    if surrogate:
        text = text.replace('"x"', '"\\ud800"')
    if cut:
        text = text[: len(text) * cut // 400]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "base.json"
        path.write_text(text)
        with pytest.raises(GtaUsageError, match="--gta-baseline"):
            load_baseline(str(path), "base.json")


@given(st.text(max_size=40))
def test_gate_options_parse_or_say_what_is_allowed(text):
    for parse in (parse_fail_under, parse_fail_on_regression, parse_alpha, parse_min_drop):
        message = ""
        try:
            parse(text)
        except pytest.UsageError as exc:
            message = str(exc)
        assert not message or message.startswith("--gta-")


def test_gate_option_values():
    assert parse_fail_under("ans_acc=45, step.tool_acc=60,e2e.pass_rate=30") == (
        Floor(MetricRef("e2e", "ans_acc"), 45.0),
        Floor(MetricRef("step", "tool_acc"), 60.0),
        Floor(MetricRef("e2e", "pass_rate"), 30.0),
    )
    assert parse_fail_on_regression("all") == "all"
    assert parse_fail_on_regression("ans_acc,ans_acc,p_f1") == (
        MetricRef("e2e", "ans_acc"),
        MetricRef("e2e", "p_f1"),
    )
    with pytest.raises(pytest.UsageError, match="e2e-mode metric"):
        parse_fail_under("step.ans_acc=3")
    with pytest.raises(pytest.UsageError, match="given twice"):
        parse_fail_under("ans_acc=3,e2e.ans_acc=4")


@pytest.mark.parametrize(
    ("passed", "errored", "current", "expected"),
    [
        (True, 0, pytest.ExitCode.TESTS_FAILED, 0),  # failing queries do not fail the run
        (True, 1, pytest.ExitCode.TESTS_FAILED, 1),  # an errored case does
        (False, 0, pytest.ExitCode.OK, 1),
        (True, 0, pytest.ExitCode.INTERRUPTED, 2),
        (True, 0, pytest.ExitCode.USAGE_ERROR, 4),
        (True, 0, pytest.ExitCode.NO_TESTS_COLLECTED, 5),
    ],
)
def test_exit_status_with_gates(passed, errored, current, expected):
    gates = GatesVerdict(passed=passed, alpha=0.05, min_drop=0.0, verdicts=[])
    assert exit_status(gates, errored, int(current)) == expected


def test_a_gate_on_an_unmeasured_metric_fails():
    unmeasured = stored_report("oracle-both-modes").model_copy(
        update={"metrics": PerMode(), "pass_rate": PerMode()}
    )
    gates = GateSettings(floors=(Floor(MetricRef("e2e", "ans_acc"), 10.0),))
    verdict = judge(unmeasured, gates)
    assert verdict.passed is False
    assert "was not measured" in verdict.verdicts[0].reason
    gates = GateSettings(regression=(MetricRef("e2e", "ans_acc"),))
    assert judge(unmeasured, gates).verdicts[0].passed is False
