"""GTA-Workflow judged as the official scorer judges it: same scores, same requests, same order.

``tests/data/workflow/official_scores*.json`` hold what ``agent_app_eval/score_with_gpt52.py``
(open-compass/GTA at 37c2b60) produced for the two eval packs against the scripted judge
(``benchmarks/official_workflow_judge.py`` wrote them). Here the plugin scores the same packs
against the same scripted server, black-box through pytest, and must give every task the same
root score (or the same failure) and send the same uploads and Responses calls in order.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from benchmarks.official_workflow_judge import recorded_requests
from tests.helpers.gta_run import XDIST
from tests.helpers.judge_server import judged_run
from tests.helpers.optional import require
from tests.helpers.paths import ROOT

DATA = ROOT / "tests" / "data" / "workflow"
SAMPLE = ROOT / "fixtures" / "gta_workflow_sample"
PACKS = {"pack.json": "official_scores.json", "pack_edge.json": "official_scores_edge.json"}


def _official(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / PACKS[name]).read_text(encoding="utf-8"))
    return loaded


@pytest.mark.parametrize("pack", sorted(PACKS))
def test_root_scores_and_requests_match_the_official_scorer(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, pack: str
) -> None:
    monkeypatch.setenv("EVAL_OPENAI_API_KEY", "sk-test-judge-key-0123456789")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    official = _official(pack)
    run, server, junit = judged_run(pytester, pack=pack)
    report = json.loads(run.report_path.read_text(encoding="utf-8"))
    cases = {c["task_id"]: c for c in report["cases"]}
    for tid, expected in official["tasks"].items():
        case = cases[tid]
        if expected["status"] == "ok":
            assert case["root_score"] is not None, tid
            assert math.isclose(case["root_score"], expected["score"], abs_tol=1e-12), tid
            leaves = [(c["score"], c["analysis"]) for c in case["checkpoints"] if c["leaf"]]
            assert leaves == [(n["score"], f"{n['analysis']}") for n in expected["nodes"]], tid
        else:
            assert case["root_score"] is None, tid
            assert case["outcome"] == "error", tid
            assert case["judge_error"] == expected["error"], tid
    mean = official["summary"]["mean_ok_score"]
    got = report["metrics"]["root_score"]
    assert (mean is None and got is None) or math.isclose(got, mean, abs_tol=1e-12)
    unconverted = {r["sha256"] for r in official["requests"] if r.get("sha256")}
    assert recorded_requests(server, unconverted) == official["requests"]
    # JUnit: each case's root score as the contract's property, the mean on the suite.
    tree = ET.parse(junit)
    props = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in tree.iter("testcase")
    }
    for tid, expected in official["tasks"].items():
        mine = props[f"test_workflow[workflow-{tid}]"]
        if expected["status"] == "ok":
            assert math.isclose(float(str(mine["gta_root_score"])), expected["score"], abs_tol=1e-9)
        else:  # a task the judge failed on has no score, and says why
            assert "gta_root_score" not in mine
            assert mine["gta_judge_error"] == expected["error"]
    # The judge's key reaches no file the run wrote.
    for path in pytester.path.rglob("*"):
        if path.is_file():
            assert b"sk-test-judge-key-0123456789" not in path.read_bytes(), path


def test_xdist_gives_the_same_scores(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    official = _official("pack.json")
    run, _, _ = judged_run(pytester, *XDIST)
    report = json.loads(run.report_path.read_text(encoding="utf-8"))
    scores = {c["task_id"]: c["root_score"] for c in report["cases"]}
    for tid, expected in official["tasks"].items():
        assert scores[tid] == expected["score"], tid


def test_an_inspect_log_holds_every_task_and_the_table(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--gta-inspect-log``: one log, a sample per task scored with its root score."""
    require("inspect_ai")
    from inspect_ai.log import read_eval_log  # an optional dependency of the tests

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    official = _official("pack.json")
    run, _, _ = judged_run(pytester, f"--gta-inspect-log={pytester.path / 'logs'}")
    report = json.loads(run.report_path.read_text(encoding="utf-8"))
    (path,) = (pytester.path / "logs").glob("*.eval")
    assert "_gta-workflow_" in path.name
    log = read_eval_log(str(path))
    assert log.samples is not None
    scores = {str(s.id): (s.scores or {})["gta_workflow_judge"].value for s in log.samples}
    for tid, expected in official["tasks"].items():
        if expected["status"] == "ok":
            assert scores[tid] == expected["score"]
    assert log.results is not None
    metrics = log.results.scores[0].metrics
    assert metrics["root_score"].value == report["metrics"]["root_score"]
    assert "Inspect log written to" in run.output
