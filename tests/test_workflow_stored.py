"""GTA-Workflow reports written by the main before issue 40, read by today's commands.

The files (``tests/data/reports/2026-12-07-099ba9a-workflow/``, its README says how they were
made) are real: the old code's reports of the Workflow sample, a whole run, its two shards and a
run the judge scored lower. Today's one reader reads them (by the field a Workflow report always
wrote first), ``--gta-merge`` merges the shards into the whole run, ``--gta-compare`` and
``--gta-baseline`` take them, and every command refuses to mix them with GTA-Atomic reports.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from pytest_gta.results.io import WorkflowFile, load_any_report
from pytest_gta.results.workflow import dump_workflow_report
from tests.helpers.gta_run import ORACLE, SAMPLE_DATA, gta
from tests.helpers.paths import ROOT

STORED = ROOT / "tests" / "data" / "reports" / "2026-12-07-099ba9a-workflow"
ATOMIC = ROOT / "tests" / "data" / "reports" / "2026-11-28-cfe0abc" / "oracle-both-modes.json"
SAMPLE = ROOT / "fixtures" / "gta_workflow_sample"
PACK = ROOT / "tests" / "data" / "workflow" / "pack.json"
REPORTS = ("run", "low", "shard-1-of-2", "shard-2-of-2")


def _copy(pytester: pytest.Pytester, *names: str) -> None:
    for name in names:
        shutil.copy(STORED / f"{name}.json", pytester.path / f"{name}.json")


def _stored(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((STORED / f"{name}.json").read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize("name", REPORTS)
def test_each_stored_report_reads_and_writes_back_with_its_benchmark(name: str) -> None:
    read = load_any_report(STORED / f"{name}.json", name)
    assert isinstance(read, WorkflowFile)
    written = json.loads(dump_workflow_report(read.report))
    assert written.pop("benchmark") == "gta-workflow"
    # production_errors is new in the table (0: the old code dropped such tasks).
    assert written["metrics"].pop("production_errors") == 0
    assert written == _stored(name)


def test_the_stored_shards_merge_into_the_stored_run(pytester: pytest.Pytester) -> None:
    _copy(pytester, "shard-1-of-2", "shard-2-of-2")
    run = gta(pytester, "--gta-merge", "shard-1-of-2.json", "shard-2-of-2.json")
    assert run.ret == 0, run.output
    assert "merged 2 reports: 8 tasks" in run.output
    assert "GTA-Workflow results" in run.output
    whole = _stored("run")
    assert run.report["benchmark"] == "gta-workflow"
    assert [c["id"] for c in run.report["cases"]] == [c["id"] for c in whole["cases"]]
    assert [c["root_score"] for c in run.report["cases"]] == [
        c["root_score"] for c in whole["cases"]
    ]
    merged = dict(run.report["metrics"])
    assert merged.pop("production_errors") == 0
    assert merged == whole["metrics"]


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (("run", "shard-1-of-2"), "the task workflow-1 is in run.json and in shard-1-of-2.json"),
        (("run", "low"), "low.json is not a shard of the run of run.json: its judge.model is"),
    ],
    ids=["a-task-twice", "another-judge"],
)
def test_reports_of_other_runs_do_not_merge(
    pytester: pytest.Pytester, names: tuple[str, str], expected: str
) -> None:
    _copy(pytester, *names)
    run = gta(pytester, "--gta-merge", *(f"{n}.json" for n in names), report=None)
    assert run.ret == 4
    assert expected in run.output


@pytest.mark.parametrize("command", ["--gta-merge", "--gta-compare"])
def test_workflow_and_atomic_reports_are_never_mixed(
    pytester: pytest.Pytester, command: str
) -> None:
    _copy(pytester, "run")
    shutil.copy(ATOMIC, pytester.path / "atomic.json")
    run = gta(pytester, command, "run.json", "atomic.json", report=None)
    assert run.ret == 4
    assert (
        f"{command}: run.json is a GTA-Workflow report and atomic.json a GTA-Atomic report"
        in run.output
    )


def test_the_stored_runs_compare_side_by_side(pytester: pytest.Pytester) -> None:
    _copy(pytester, "run", "low")
    run = gta(pytester, "--gta-compare", "low.json", "run.json")
    assert run.ret == 0, run.output
    assert [r["label"] for r in run.report["runs"]] == ["golden-workflow-low", "golden-workflow"]
    assert [r["metrics"]["root_score"] for r in run.report["runs"]] == [5.0, 8.0]


def test_a_directory_of_runs_compares_oldest_first(pytester: pytest.Pytester) -> None:
    # A nightly job's directory: the file names sort against the runs' dates.
    runs = pytester.path / "nightly"
    runs.mkdir()
    for name, started in (("a-late", "2026-12-07T02:00:00Z"), ("b-early", "2026-12-06T02:00:00Z")):
        data = json.loads(
            (STORED / ("run" if name == "a-late" else "low"))
            .with_suffix(".json")
            .read_text(encoding="utf-8")
        )
        data["identity"] = {
            "label": data["label"],
            "label_given": True,
            "model": data["model"],
            "protocol": "react",
            "agent": None,
            "git": None,
            "started_at": started,
            "finished_at": started,
            "dataset_sha256": "",
            "pytest_gta": None,
        }
        (runs / f"{name}.json").write_text(json.dumps(data), encoding="utf-8")
    run = gta(pytester, "--gta-compare", "nightly")
    assert run.ret == 0, run.output
    assert [r["label"] for r in run.report["runs"]] == ["golden-workflow-low", "golden-workflow"]


def test_a_stored_report_is_a_workflow_runs_baseline(pytester: pytest.Pytester) -> None:
    _copy(pytester, "low")
    judge = pytester.path / "judge.json"
    shutil.copy(STORED / "judge-8.json", judge)
    run = gta(
        pytester,
        f"--gta-data={SAMPLE}",
        f"--gta-model=evalpack:{PACK}",
        f"--gta-judge=mock:{judge}",
        "--gta-judge-api=chat",
        "--gta-cache=off",
        "--gta-baseline=low.json",
    )
    assert run.ret == 0, run.output
    comparison = run.report["comparison"]
    assert comparison["kind"] == "report"
    assert comparison["matched"] == 8
    assert comparison["mean_difference"] == pytest.approx(3.0)
    assert len(comparison["fixed"]) == 8


def test_the_tasks_that_regressed_are_rerun(pytester: pytest.Pytester) -> None:
    _copy(pytester, "run")
    judge = pytester.path / "judge.json"
    shutil.copy(STORED / "judge-5.json", judge)
    common = (
        f"--gta-data={SAMPLE}",
        f"--gta-model=evalpack:{PACK}",
        f"--gta-judge=mock:{judge}",
        "--gta-judge-api=chat",
        "--gta-cache=off",
        "--gta-baseline=run.json",
    )
    first = gta(pytester, *common, "--gta-ids=2,5")
    assert first.ret == 1, first.output
    assert [f["task_id"] for f in first.report["comparison"]["regressed"]] == ["2", "5"]
    again = gta(pytester, *common, "--gta-rerun-regressions")
    assert "rerunning the 2 case(s) that regressed" in again.output
    assert [c["task_id"] for c in again.report["cases"]] == ["2", "5"]


def test_an_atomic_report_is_no_baseline_of_a_workflow_run(pytester: pytest.Pytester) -> None:
    shutil.copy(ATOMIC, pytester.path / "atomic.json")
    judge = pytester.path / "judge.json"
    shutil.copy(STORED / "judge-8.json", judge)
    run = gta(
        pytester,
        f"--gta-data={SAMPLE}",
        f"--gta-model=evalpack:{PACK}",
        f"--gta-judge=mock:{judge}",
        "--gta-judge-api=chat",
        "--gta-baseline=atomic.json",
        report=None,
    )
    assert run.ret == 4
    assert "atomic.json is a GTA-Atomic report and this run is GTA-Workflow" in run.output


def test_a_workflow_report_is_no_baseline_of_an_atomic_run(pytester: pytest.Pytester) -> None:
    _copy(pytester, "run")
    run = gta(pytester, SAMPLE_DATA, ORACLE, "--gta-baseline=run.json", report=None)
    assert run.ret == 4
    assert "run.json is a GTA-Workflow report and this run is GTA-Atomic" in run.output
