"""GTA-Workflow runs against the published board, a baseline run, gates, and ``--gta-compare``.

Black-box through pytest, with the scripted judge (``tests/helpers/judge_server.py``) scoring the
bundled sample's eval pack (``tests/data/workflow/pack.json``): the sample script gives the
tasks the official scorer's root scores (``official_scores.json``: 1-7 scored below the
threshold 7, 8 a judge error); a script that answers 10 to every checkpoint makes every task
pass with root score 10.
"""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.errors import GtaUsageError
from pytest_gta.results.workflow_board import HARNESS_CSV, WORKFLOW_CSV, read_boards
from tests.helpers.gta_run import GtaRun, gta
from tests.helpers.judge_server import judged_run
from tests.helpers.paths import ROOT

DATA = ROOT / "tests" / "data" / "workflow"
SAMPLE = ROOT / "fixtures" / "gta_workflow_sample"
ATOMIC_REPORT = ROOT / "tests" / "data" / "reports" / "2026-11-22-341bfe1" / "run.json"
OFFICIAL: dict[str, Any] = json.loads((DATA / "official_scores.json").read_text("utf-8"))
SCORES = {t: v["score"] for t, v in OFFICIAL["tasks"].items()}
MEAN = OFFICIAL["summary"]["mean_ok_score"]
#: Without task 8 (the judge's error), so that no case errors and the gates alone decide.
NO_ERROR = ("-k", "not workflow-8")


@pytest.fixture(autouse=True)
def _judge_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def _all_tens(tmp: Path) -> Path:
    script = tmp / "judge_tens.json"
    script.write_text(json.dumps({"default": '{"score": 10, "analysis": "all met"}'}), "utf-8")
    return script


def _run(
    pytester: pytest.Pytester, *extra: str, script: Path = DATA / "judge_script.json"
) -> tuple[GtaRun, Path]:
    run, _, junit = judged_run(pytester, *extra, script=script)
    return run, junit


def _suite_properties(junit: Path) -> dict[str, str]:
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    return {p.get("name", ""): p.get("value", "") for p in suite.iter("property")}


def _shipped_row(model: str) -> dict[str, str]:
    with WORKFLOW_CSV.open(encoding="utf-8", newline="") as fh:
        return next(r for r in csv.DictReader(fh) if r["model"] == model)


def test_leaderboard_rows_appear_under_the_run(pytester: pytest.Pytester) -> None:
    run, _ = _run(pytester, "--gta-leaderboard-rows=gemini-2.5-pro,openclaw")
    published = _shipped_row("gemini-2.5-pro")
    columns = ("tool_sr", "p_sr", "o_sr", "l_sr", "c_sr", "root_score", "leaf_sr", "root_sr")
    line = next(x for x in run.output.splitlines() if x.startswith("gemini-2.5-pro@2026-04"))
    assert line.split()[1:] == [f"{float(published[c]):.2f}" for c in columns]
    harness = next(x for x in run.output.splitlines() if x.startswith("openclaw/claude"))
    assert harness.split()[1:] == ["-"] * 5 + ["6.82", "73.55", "50.00"]
    assert run.output.index("this run") < run.output.index("gemini-2.5-pro@2026-04")
    rows = run.report["leaderboard"]
    assert [r["model"] for r in rows] == ["gemini-2.5-pro", "claude-sonnet-4.5"]
    assert rows[0]["root_score"] == float(published["root_score"])
    assert rows[1]["harness"] == "openclaw"
    assert rows[1]["tasks"] == 30
    # A whole board: every row of its Workflow table, in the board's order.
    run, _ = _run(pytester, "--gta-leaderboard-rows=2026-04")
    with WORKFLOW_CSV.open(encoding="utf-8", newline="") as fh:
        models = [r["model"] for r in csv.DictReader(fh)]
    assert [r["model"] for r in run.report["leaderboard"]] == models


def test_a_run_without_rows_has_no_leaderboard_field(pytester: pytest.Pytester) -> None:
    run, _ = _run(pytester)
    assert "leaderboard" not in run.report
    assert "comparison" not in run.report
    assert "gates" not in run.report


def test_baseline_report_gives_paired_differences_and_flipped_tasks(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    base, _ = _run(pytester, script=_all_tens(tmp_path))
    assert base.ret == 0, base.output
    assert {c["task_id"]: c["root_score"] for c in base.report["cases"]} == dict.fromkeys(
        SCORES, 10.0
    )
    baseline = tmp_path / "base.json"
    baseline.write_bytes(base.report_path.read_bytes())
    run, junit = _run(pytester, f"--gta-baseline={baseline}", "--gta-fail-on-regression")
    comparison = run.report["comparison"]
    scored = [s for s in SCORES.values() if s is not None]
    assert comparison["kind"] == "report"
    assert comparison["paired"] is True
    assert comparison["matched"] == len(scored)
    assert comparison["mean_difference"] == pytest.approx(MEAN - 10.0, abs=1e-9)
    # Every task passed in the baseline (10 >= 7) and fails now: all of them regressed.
    assert [f["task_id"] for f in comparison["regressed"]] == list(SCORES)
    assert comparison["fixed"] == []
    root = comparison["metrics"]["root_score"]
    # Seven tasks, every difference negative: the exact permutation test's smallest p(drop).
    assert root["p_drop"] == pytest.approx(1 / 2**7)
    assert comparison["metrics"]["root_sr"]["difference"] == pytest.approx(-100.0)
    assert f"mean root-score difference {MEAN - 10.0:+.2f}" in run.output
    assert "regressed (passed then): 1 (10.00 -> 6.23)" in run.output
    # The regression gate fails the run, in the report, JUnit and the exit status.
    assert run.ret == 1
    gates = run.report["gates"]
    assert gates["passed"] is False
    assert {v["metric"]: v["passed"] for v in gates["verdicts"]} == {
        "root_score": False,
        "root_sr": False,
    }
    assert _suite_properties(junit)["gta_gates_passed"] == "false"
    # The other way round: the fixes, and a gate that holds.
    later = tmp_path / "later.json"
    later.write_bytes(run.report_path.read_bytes())
    again, junit = _run(
        pytester,
        f"--gta-baseline={later}",
        "--gta-fail-on-regression",
        *NO_ERROR,
        script=_all_tens(tmp_path),
    )
    comparison = again.report["comparison"]
    assert comparison["mean_difference"] == pytest.approx(10.0 - MEAN, abs=1e-9)
    assert [f["task_id"] for f in comparison["fixed"]] == [t for t in SCORES if t != "8"]
    assert comparison["only_baseline"] == 1
    assert again.ret == 0, again.output
    assert _suite_properties(junit)["gta_gates_passed"] == "true"


def test_leaderboard_baseline_is_unpaired(pytester: pytest.Pytester) -> None:
    run, _ = _run(pytester, "--gta-baseline=leaderboard:gpt-5@2026-04")
    comparison = run.report["comparison"]
    published = _shipped_row("gpt-5")
    assert comparison["kind"] == "leaderboard"
    assert comparison["paired"] is False
    assert comparison["board"] == "2026-04"
    assert comparison["mean_difference"] == pytest.approx(MEAN - float(published["root_score"]))
    leaf = comparison["metrics"]["leaf_sr"]
    assert leaf["baseline"] == float(published["leaf_sr"])
    assert leaf["difference"] == pytest.approx(run.report["metrics"]["leaf_sr"] - leaf["baseline"])
    assert "baseline leaderboard:gpt-5@2026-04" in run.output


def test_fail_under_holds_and_fails(pytester: pytest.Pytester) -> None:
    mean = sum(s for t, s in SCORES.items() if s is not None) / 7
    held, junit = _run(pytester, "--gta-fail-under=root_score=4.0,root_sr=0", *NO_ERROR)
    # Every case failed its threshold (pytest alone would say 1); the gates say 0.
    assert held.ret == 0, held.output
    assert held.report["gates"]["passed"] is True
    assert f"gate PASS: root_score = {mean:.2f} >= 4" in held.output
    assert _suite_properties(junit)["gta_gates_passed"] == "true"
    failed, junit = _run(pytester, "--gta-fail-under=root_score=6,root_sr=10", *NO_ERROR)
    assert failed.ret == 1
    verdicts = {v["metric"]: v for v in failed.report["gates"]["verdicts"]}
    assert verdicts["root_score"]["passed"] is False
    assert verdicts["root_score"]["value"] == pytest.approx(mean)
    assert verdicts["root_sr"]["passed"] is False
    assert f"gate FAIL: root_score = {mean:.2f} < 6" in failed.output
    assert _suite_properties(junit)["gta_gates_passed"] == "false"
    # Gates that hold, but a task errored (the judge's 500 on task 8): exit status 1.
    errored, _ = _run(pytester, "--gta-fail-under=root_score=4.0")
    assert errored.ret == 1
    assert "gates: all held, but 1 task(s) errored" in errored.output


def test_compare_of_two_workflow_reports(pytester: pytest.Pytester, tmp_path: Path) -> None:
    first, _ = _run(pytester, "--gta-label=sample-script")
    a = tmp_path / "a.json"
    a.write_bytes(first.report_path.read_bytes())
    second, _ = _run(pytester, "--gta-label=all-tens", script=_all_tens(tmp_path))
    b = tmp_path / "b.json"
    b.write_bytes(second.report_path.read_bytes())
    out = tmp_path / "cmp.json"
    md = tmp_path / "cmp.md"
    result = pytester.runpytest(
        "--gta-compare",
        str(a),
        str(b),
        "--gta-leaderboard-rows=gpt-5",
        f"--gta-report={out}",
        f"--gta-report-md={md}",
    )
    text = result.stdout.str()
    assert result.ret == 0, text
    lines = text.splitlines()
    row_a = next(x for x in lines if x.startswith("sample-script "))
    row_b = next(x for x in lines if x.startswith("all-tens "))
    assert row_a.split()[6] == f"{MEAN:.2f}"
    assert row_b.split()[6] == "10.00"
    assert next(x for x in lines if x.startswith("gpt-5@2026-04")).split()[6] == "3.66"
    written = json.loads(out.read_text("utf-8"))
    assert written["kind"] == "gta-workflow-comparison"
    assert [r["label"] for r in written["runs"]] == ["sample-script", "all-tens"]
    assert "| all-tens |" in md.read_text("utf-8")


def test_compare_refuses_atomic_and_workflow_together(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    run, _ = _run(pytester)
    wf = tmp_path / "wf.json"
    wf.write_bytes(run.report_path.read_bytes())
    result = pytester.runpytest("--gta-compare", str(ATOMIC_REPORT), str(wf))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert f"{ATOMIC_REPORT} is a GTA-Atomic report and {wf} a GTA-Workflow report" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gta-fail-under=root_scor=4"], "unknown metric 'root_scor'"),
        (["--gta-fail-under=ans_acc=40"], "a gate names e2e.ans_acc, a GTA-Atomic metric"),
        (["--gta-fail-under=root_score=40"], "root_score is 0-10"),
        (["--gta-fail-on-regression"], "--gta-fail-on-regression needs a run to compare with"),
        (["--gta-leaderboard-rows=gpt-6"], "'gpt-6' is neither a GTA-Workflow board"),
        ([f"--gta-baseline={ATOMIC_REPORT}"], "a GTA-Atomic report and this run is GTA-Workflow"),
        (["--gta-baseline=leaderboard:gpt-5@2024-07"], "gpt-5 is not on a '2024-07'"),
    ],
)
def test_bad_input_is_a_usage_error(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    run, _ = _run(pytester, *args)
    assert run.ret == pytest.ExitCode.USAGE_ERROR, run.output
    assert message in run.output


def test_a_workflow_gate_on_an_atomic_run_is_a_usage_error(pytester: pytest.Pytester) -> None:
    run = gta(pytester, "--gta-data=sample", "--gta-model=oracle", "--gta-fail-under=root_sr=10")
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    assert "a gate names root_sr, a GTA-Workflow metric, but this is a GTA-Atomic run" in (
        run.output
    )


def test_shipped_boards_match_the_reference() -> None:
    boards = read_boards()
    assert len(boards.models) == 13
    assert len(boards.harnesses) == 4
    reference = ROOT.parent / "shared" / "reference"
    for shipped in (WORKFLOW_CSV, HARNESS_CSV):
        if (reference / shipped.name).is_file():
            assert shipped.read_bytes() == (reference / shipped.name).read_bytes()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace("tool_sr,", "tools,", 1), ":1: the header must be"),
        (lambda t: t.replace(",3.64,", ",n/a,", 1), ":2: column root_score is 'n/a'"),
        (lambda t: t.replace(",14.39\n", "\n", 1), ":2: 11 values for the header's 12"),
        (lambda t: t + t.splitlines()[1] + "\n", "gemini-2.5-pro is on 2026-04 twice"),
    ],
)
def test_a_malformed_board_is_refused(tmp_path: Path, edit: Any, message: str) -> None:
    bad = tmp_path / "leaderboard_workflow.csv"
    bad.write_text(edit(WORKFLOW_CSV.read_text("utf-8")), "utf-8")
    with pytest.raises(GtaUsageError, match=r"leaderboard_workflow\.csv") as info:
        read_boards(bad, HARNESS_CSV)
    assert message in str(info.value)


def test_compare_shows_no_rate_over_tasks_none_of_which_was_scored(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """A report of an earlier version wrote 0.00 over zero scored tasks; the comparison shows -."""
    run, _ = _run(pytester, "-k", "workflow-8", "--gta-label=judge-down")  # the judge's error
    report = json.loads(run.report_path.read_text("utf-8"))
    metrics = report["metrics"]
    assert (metrics["scored"], metrics["root_sr"]) == (0, None)
    assert ["-"] * 8 in [line.split() for line in run.output.splitlines()]
    # What the earlier version wrote for a task of the perception category: a rate over each
    # task, scored or not.
    (case,) = report["cases"]
    case["categories"] = ["perception"]
    metrics["category_tasks"]["perception"] = 1
    metrics["root_sr"] = metrics["p_sr"] = 0.0
    old = tmp_path / "old.json"
    old.write_text(json.dumps(report), encoding="utf-8")
    result = pytester.runpytest("--gta-compare", str(old), f"--gta-report={tmp_path / 'cmp.json'}")
    assert result.ret == 0, result.stdout.str()
    row = next(x for x in result.stdout.lines if x.startswith("judge-down "))
    assert row.split()[1:] == ["-"] * 8
    written = json.loads((tmp_path / "cmp.json").read_text("utf-8"))
    assert written["runs"][0]["metrics"]["root_sr"] is None
