"""Reports written by earlier versions, given to today's commands as a user would give them.

A team keeps its reports: the nightly run's JSON is tomorrow's ``--gta-baseline``, last week's
shards are merged again, a quarter of reports are set side by side. tests/data/reports/ holds
real reports of earlier versions (its README says which run wrote each); here ``--gta-merge``,
``--gta-baseline`` and ``--gta-compare`` read them and must give what those versions gave.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from tests.helpers.gta_run import FAST_SIM, ORACLE, SAMPLE_DATA, gta
from tests.helpers.report_builders import TODAY

#: What a later version adds to each case: the whole verdict, the usage and model time.
NEW_CASE_KEYS = ("verdict", "usage", "model_s")
#: What the erratum (issue 32) adds: a report's, and a compared run's, sound-reference metrics.
NEW_REPORT_KEYS = ("metrics_sound", "denominators_sound")
NEW_RUN_KEYS = ("metrics_sound", "denominators", "denominators_sound")


def stored(pytester: pytest.Pytester, *names: str) -> None:
    """Copy stored reports into the test's directory (``name`` or ``name=as-name``)."""
    for name in names:
        source, _, target = name.partition("=")
        shutil.copy(TODAY / f"{source}.json", pytester.path / f"{target or source}.json")


def as_written_then(report: dict[str, Any], dataset_root: str) -> dict[str, Any]:
    """``report`` without what today adds, its dataset where the stored run had it.

    The sample's queries are none of the release's, so the erratum names none of them and
    the sound-reference metrics today adds are the official ones, checked here as they go.
    """
    text = json.dumps(report).replace(dataset_root, "/work/golden/base/fixtures/gta_sample")
    data: dict[str, Any] = json.loads(text)
    for case in data.get("cases", []):
        for key in NEW_CASE_KEYS:
            case.pop(key, None)
    if "metrics_sound" in data:
        assert data["metrics_sound"] == data["metrics"]
        assert data["dataset"].pop("erratum")["queries"] == {}
    for key in NEW_REPORT_KEYS:
        data.pop(key, None)
    if "schema" in data and "cases" in data:  # a report: its benchmark, said since issue 40
        assert data.pop("benchmark") == "gta-atomic"
    for run in data.get("runs", []):
        assert run.get("metrics_sound") == run["metrics"]
        assert run.get("denominators_sound") == run.get("denominators")
        for key in NEW_RUN_KEYS:
            run.pop(key, None)
    tables = data.get("tables", {})
    if "table4_sound" in tables:
        sound = tables.pop("table4_sound")
        for mode, table in sound.items():
            runs = [row for row in tables["table4"][mode]["rows"] if row["kind"] == "run"]
            assert [r["values"] for r in table["rows"]] == [r["values"] for r in runs]
    return data


@pytest.mark.slow
def test_merge_of_stored_shards_is_the_stored_merged_report(pytester, sample_dataset):
    stored(pytester, "shard-1-of-2=shard1", "shard-2-of-2=shard2")
    run = gta(pytester, "--gta-merge", "shard1.json", "shard2.json", SAMPLE_DATA)
    assert run.ret == 0, run.output
    expected = json.loads((TODAY / "merged.json").read_text())
    assert as_written_then(run.report, sample_dataset.root_str) == expected
    assert all(c["verdict"] is not None for c in run.report["cases"])  # judged again


@pytest.mark.slow
def test_a_stored_report_is_a_baseline(pytester):
    stored(pytester, "oracle-both-modes")
    run = gta(
        pytester,
        ORACLE,
        SAMPLE_DATA,
        FAST_SIM,
        "--gta-mode=step,e2e",
        "--gta-baseline=oracle-both-modes.json",
        "--gta-fail-on-regression",
    )
    assert run.ret == 0, run.output
    comparison = run.report["comparison"]
    assert comparison["baseline_model"] == "oracle"
    for mode in ("step", "e2e"):
        assert comparison["cases"][mode] == {"matched": 17, "only_this_run": 0, "only_baseline": 0}
        assert comparison["metrics"][mode]["pass_rate"]["difference"] == 0.0
    assert comparison["flipped"] == {"regressed": [], "fixed": []}
    assert run.report["gates"]["passed"] is True


@pytest.mark.slow
def test_compare_of_stored_reports_is_the_stored_comparison(pytester, sample_dataset):
    stored(pytester, "oracle-both-modes=sample-n0", "wrong", "wrong-with-baseline=baseline")
    stored(pytester, "epochs")
    names = ("sample-n0.json", "wrong.json", "baseline.json", "epochs.json")
    run = gta(
        pytester,
        "--gta-compare",
        *names,
        "--gta-leaderboard-rows=2026-02",
        SAMPLE_DATA,
        report="cmp.json",
    )
    assert run.ret == 0, run.output
    expected = json.loads((TODAY / "comparison.json").read_text())
    got = as_written_then(run.report, sample_dataset.root_str)
    for data in (got, expected):
        for key in ("created_at", "pytest_gta"):
            data.pop(key)
        for entry in data["runs"]:
            entry.pop("html")  # the stored runs' pages were beside them; these have none
    assert got == expected


@pytest.mark.slow
def test_a_stored_report_that_a_version_cannot_read_says_which_field(pytester):
    report = json.loads((TODAY / "wrong.json").read_text())
    report["cases"][0]["primitives"]["steps"] = "none"
    (pytester.path / "bad.json").write_text(json.dumps(report))
    run = gta(pytester, "--gta-merge", "bad.json", SAMPLE_DATA, report=None)
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    assert "bad.json: cases[0].primitives.steps is 'none': Input should be a valid list" in (
        run.output
    )
    assert "Traceback" not in run.output
