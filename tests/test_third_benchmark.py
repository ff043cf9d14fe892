"""The seam is real: a third benchmark, registered by entry point, gets every output and command.

``tests/helpers/arith_benchmark.py`` (a few dozen lines of arithmetic, against the public seam
only) is registered under the ``pytest_gta.benchmarks`` entry-point group by a dist-info
directory on the path, as an installed package registers it. On its data, pytest-gta collects
its cases and runs them with xdist, writes JUnit XML, the JSON report, markdown, HTML and an
Inspect log, merges its shards, compares its runs, takes one as the other's baseline and gates
on its metrics; and refuses to mix its reports with GTA-Workflow ones.
"""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from tests.helpers.gta_run import XDIST, GtaRun, gta
from tests.helpers.optional import require
from tests.helpers.paths import HELPERS, ROOT

DATA = ROOT / "tests" / "data" / "arith"
WORKFLOW_REPORT = ROOT / "tests" / "data" / "reports" / "2026-12-07-099ba9a-workflow" / "run.json"
ENTRY_POINTS = "[pytest_gta.benchmarks]\narith = arith_benchmark:make\n"


@pytest.fixture
def arith(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A directory where the arith benchmark is installed (its module and its dist-info).

    On this process's path (an in-process run) and on ``PYTHONPATH`` (its xdist workers).
    """
    site = pytester.path / "site"
    info = site / "arith_benchmark-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: arith-benchmark\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    shutil.copy(HELPERS / "arith_benchmark.py", site / "arith_benchmark.py")
    pytester.syspathinsert(site)
    monkeypatch.setenv("PYTHONPATH", str(site))
    return pytester


def _run(pytester: pytest.Pytester, model: str, *extra: str, **kwargs: Any) -> GtaRun:
    return gta(pytester, f"--gta-data={DATA}", f"--gta-model={model}", *extra, **kwargs)


def test_its_cases_run_with_xdist_into_every_output(arith: pytest.Pytester) -> None:
    require("inspect_ai")
    run = _run(
        arith,
        "sloppy",
        *XDIST,
        "--junitxml=junit.xml",
        "--gta-report-md=report.md",
        "--gta-report-html=report.html",
        "--gta-inspect-log=logs",
        fresh_process=True,  # xdist's workers take the path from the environment
    )
    assert run.ret == 1, run.output  # the odd ids fail
    run.result.assert_outcomes(passed=3, failed=3)
    assert "gta: arith: model sloppy" in run.output
    assert "arith results" in run.output
    report = run.report
    assert report["kind"] == "gta-scored-report"
    assert report["benchmark"] == "arith"
    assert report["metrics"] == {"close": 100.0, "exact": 50.0, "pass_rate": 50.0}
    assert report["identity"]["label"] == "sloppy"
    assert report["identity"]["started_at"] <= report["identity"]["finished_at"]
    assert [c["id"] for c in report["cases"]] == ["1", "2", "3", "4", "5", "6"]
    failed = {c["id"]: c["message"] for c in report["cases"] if not c["passed"]}
    assert failed == {
        "1": "2 add 3 = 6, not 5",
        "3": "6 mul 7 = 43, not 42",
        "5": "-4 add 4 = 1, not 0",
    }
    suite = ET.parse(arith.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    suite_props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert suite_props["gta_arith_exact"] == "50.0"
    case = next(c for c in suite.iter("testcase") if c.get("name") == "test_case[2]")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["gta_score_exact"] == "1.0"
    assert "| 3 | failed |" in (arith.path / "report.md").read_text()
    assert "6 mul 7 = 43, not 42" in (arith.path / "report.html").read_text()
    logs = list((arith.path / "logs").iterdir())
    assert len(logs) == 1
    assert logs[0].suffix == ".eval"


def test_marks_and_ids_select_its_cases(arith: pytest.Pytester) -> None:
    run = _run(arith, "exact", "-m", "gta_arith_mul", "--gta-ids=1,3,4")
    assert run.ret == 0, run.output
    assert [c["id"] for c in run.report["cases"]] == ["3", "4"]


def test_an_errored_case_counts_zero_in_every_metric(arith: pytest.Pytester) -> None:
    run = _run(arith, "crash")
    assert run.ret == 1, run.output
    run.result.assert_outcomes(passed=5, errors=1)
    report = run.report
    errored = next(c for c in report["cases"] if c["id"] == "3")
    assert errored["outcome"] == "error"
    assert "the solver's endpoint is down" in errored["message"]
    assert report["errors"] == 1
    assert report["metrics"]["exact"] == pytest.approx(500 / 6)


def test_its_shards_merge_into_the_whole_run(arith: pytest.Pytester) -> None:
    whole = _run(arith, "sloppy", report="whole.json")
    for k in (1, 2):
        _run(arith, "sloppy", f"--gta-shard={k}/2", report=f"shard{k}.json")
    merged = gta(arith, "--gta-merge", "shard1.json", "shard2.json")
    assert merged.ret == 0, merged.output
    assert merged.report["metrics"] == whole.report["metrics"]
    assert sorted(c["id"] for c in merged.report["cases"]) == ["1", "2", "3", "4", "5", "6"]
    assert merged.report["merged_from"] == ["shard1.json", "shard2.json"]


def test_a_baseline_compares_and_the_gates_judge(arith: pytest.Pytester) -> None:
    _run(arith, "exact", report="exact.json")
    run = _run(
        arith,
        "sloppy",
        "--gta-baseline=exact.json",
        "--gta-fail-under=scored.close=90",
        "--gta-fail-on-regression=scored.exact",
        "--gta-bootstrap-samples=200",
    )
    comparison = run.report["comparison"]
    assert comparison["matched"] == 6
    assert comparison["regressed"] == ["1", "3", "5"]
    assert comparison["metrics"]["exact"]["difference"] == pytest.approx(-50.0)
    verdicts = {v["metric"]: v["passed"] for v in run.report["gates"]["verdicts"]}
    # 3 flips of 6 are not significant at 0.05: the regression gate holds.
    assert verdicts == {"scored.close": True, "scored.exact": True}
    assert run.ret == 0, run.output  # the gates, not the failed cases, decide
    again = _run(arith, "sloppy", "--gta-baseline=exact.json", "--gta-rerun-regressions")
    assert [c["id"] for c in again.report["cases"]] == ["1", "3", "5"]


def test_its_runs_compare_side_by_side(arith: pytest.Pytester) -> None:
    _run(arith, "exact", "--gta-label=exact", report="a.json")
    _run(arith, "sloppy", "--gta-label=sloppy", report="b.json")
    run = gta(arith, "--gta-compare", "a.json", "b.json")
    assert run.ret == 0, run.output
    assert [(r["label"], r["metrics"]["exact"]) for r in run.report["runs"]] == [
        ("exact", 100.0),
        ("sloppy", 50.0),
    ]


def test_gta_metrics_and_other_benchmarks_reports_are_refused(arith: pytest.Pytester) -> None:
    gate = _run(arith, "exact", "--gta-fail-under=ans_acc=10", report=None)
    assert gate.ret == 4
    assert "a gate names e2e.ans_acc, a GTA metric, but this is a run of the arith" in gate.output
    _run(arith, "exact", report="a.json")
    shutil.copy(WORKFLOW_REPORT, arith.path / "wf.json")
    mixed = gta(arith, "--gta-compare", "a.json", "wf.json", report=None)
    assert mixed.ret == 4
    assert "a.json is a arith report and wf.json a GTA-Workflow report" in mixed.output
