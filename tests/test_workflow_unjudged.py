"""A GTA-Workflow task whose producer failed is in the report and counts as the model's failure.

Issue 40's drifts of the Workflow copy, each black-box on the bundled sample: the project's loop
produces tasks 1 and 4 with a scripted model whose endpoint fails on one of them (or on both),
and a scripted judge served in pytest's process gives every checkpoint 10. A task that produced
nothing used to vanish from the report and from Root SR's denominator (an agent that crashed on
its hard tasks scored better), and a run whose every task errored wrote no report at all. The
report now goes through the one writer (through a symlink, the job summary appended to), the
``pytest_gta_update_report`` hook and the secret cleaner, as an atomic run's does.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tests.helpers.gta_run import GtaRun, gta
from tests.helpers.paths import ROOT

SAMPLE = ROOT / "fixtures" / "gta_workflow_sample"
ANSWER = "Thought: done\nFinal Answer: The deck has three slides."
BROKEN = {"error": "the endpoint is down"}
SECRET = "sk-drift-0123456789abcdef"
HOOK = """
import os

def pytest_gta_update_report(config, report):
    report.notes.append("checked with " + os.environ["OPENAI_API_KEY"])
    report.hook_fields["checkpoint"] = {"name": "nightly", "step": 12000}
"""


def _run(
    pytester: pytest.Pytester,
    replies: dict[str, list[Any]],
    *extra: str,
    report: str | None = "gta.json",
) -> GtaRun:
    model = pytester.path / "model.json"
    model.write_text(json.dumps({"responses": replies}), encoding="utf-8")
    judge = pytester.path / "judge.json"
    judge.write_text(json.dumps({"default": "Your answer is 100% correct."}), encoding="utf-8")
    return gta(
        pytester,
        f"--gta-data={SAMPLE}",
        f"--gta-model=mock:{model}",
        "--gta-ids=1,4",
        "--gta-tools=local",
        f"--gta-judge=mock:{judge}",
        "--gta-judge-api=chat",
        "--gta-cache=off",
        "--gta-report-md=report.md",
        "--gta-report-html=report.html",
        *extra,
        report=report,
    )


def test_a_task_that_produced_nothing_is_an_error_counted_in_every_number(
    pytester: pytest.Pytester,
) -> None:
    run = _run(pytester, {"e2e-1": [BROKEN], "e2e-4": [ANSWER]})
    assert run.ret == 1, run.output[-3000:]
    run.result.assert_outcomes(passed=1, errors=1)
    cases = {c["id"]: c for c in run.report["cases"]}
    assert sorted(cases) == ["workflow-1", "workflow-4"]
    broken = cases["workflow-1"]
    assert broken["outcome"] == "error"
    assert broken["root_score"] is None
    assert broken["passed"] is False
    assert "the endpoint is down" in broken["production_error"]
    assert broken["categories"] == ["perception"]  # its reference calls', for P-SR
    metrics = run.report["metrics"]
    assert metrics["tasks"] == 2
    assert metrics["scored"] == 1
    assert metrics["production_errors"] == 1
    assert metrics["judge_errors"] == 0
    # Task 4 scored 10, task 2 produced nothing: 0 in the mean, a failure in the rates.
    assert metrics["root_score"] == pytest.approx(5.0)
    assert metrics["root_sr"] == pytest.approx(50.0)
    assert metrics["p_sr"] == 0.0  # task 1 is the sample's perception task: a measured failure
    assert "workflow-1" in (pytester.path / "report.md").read_text(encoding="utf-8")
    assert "1 produced nothing (counted 0)" in run.output
    # The identity an atomic report has: the data's version, the dates, the label made up.
    identity = run.report["identity"]
    assert (
        identity["dataset_sha256"] == hashlib.sha256((SAMPLE / "end.json").read_bytes()).hexdigest()
    )
    assert identity["label"] == identity["model"] + " [react]"
    assert identity["label_given"] is False
    assert identity["started_at"] <= identity["finished_at"]


def test_a_run_whose_every_task_errored_writes_every_output(pytester: pytest.Pytester) -> None:
    summary = pytester.path / "summary.md"
    summary.write_text("# an earlier step's summary\n", encoding="utf-8")
    target = pytester.path / "kept" / "gta.json"
    target.parent.mkdir()
    target.write_text("", encoding="utf-8")
    link = pytester.path / "link.json"
    link.symlink_to(target)
    pytester.makeconftest(HOOK)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GITHUB_STEP_SUMMARY", str(summary))
        patch.setenv("OPENAI_API_KEY", SECRET)
        run = _run(
            pytester,
            {"e2e-1": [BROKEN], "e2e-4": [BROKEN]},
            f"--gta-report={link}",
            report=None,
        )
    assert run.ret == 1, run.output[-3000:]
    run.result.assert_outcomes(errors=2)
    # Written through the symlink (as a shell's redirection writes), which stays a link.
    assert link.is_symlink()
    report = json.loads(target.read_text(encoding="utf-8"))
    assert [c["outcome"] for c in report["cases"]] == ["error", "error"]
    assert report["metrics"]["root_score"] == 0.0
    assert report["metrics"]["root_sr"] == 0.0
    # The hook ran on the Workflow report, and the cleaner masked the key it wrote there.
    assert any(note.startswith("checked with ") for note in report["notes"])
    # A field of the hook's own, written after the report's (as on an atomic report).
    assert list(report)[-1] == "checkpoint"
    assert report["checkpoint"] == {"name": "nightly", "step": 12000}
    for path in (target, pytester.path / "report.md", pytester.path / "report.html", summary):
        assert SECRET not in path.read_text(encoding="utf-8"), path
    # The job summary keeps what the job's earlier steps wrote, the run's table after it.
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("# an earlier step's summary\n")
    assert "GTA-Workflow" in text
    assert "workflow-4" in text
    assert "GTA-Workflow results" in run.output
