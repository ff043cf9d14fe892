"""The robustness axis end to end: seeded tool faults and tool ablations in real runs (issue 41).

Black-box runs of the plugin on the bundled sample: the oracle (which replays the reference
calls) and scripted models (``mock:``) over the recorded tools.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.dataset import bundled_sample_path
from pytest_gta.faults import parse_fault_spec
from pytest_gta.validation import load_dataset
from tests.helpers.gta_run import FAST_SIM, ORACLE, SAMPLE_DATA, XDIST, gta, untimed
from tests.helpers.judge_server import JudgeServer
from tests.helpers.optional import require
from tests.helpers.oracle_server import OracleServer
from tests.helpers.paths import HELPERS, ROOT
from tests.helpers.references import AGENT_ENV

#: A spec that faults about a third of the sample's calls, of every kind but ``slow``.
SPEC = "error=0.15,timeout=0.05,empty=0.1,corrupt=0.1,seed=7"
#: The sample's query whose first call is OCR on a receipt (subjective answer).
RECEIPTS = "9"
RECEIPT_CALL = (
    'Thought: read the first receipt\nAction: OCR\nAction Input: {"image": '
    '"{data}/image/image_0.jpg"}'
)
RIGHT_ANSWER = (
    "Final Answer: ValueGrocer is the cheaper store, 20.71 versus 21.08 at FreshMart, so do "
    "your weekly shopping there."
)


def _cases(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [untimed(case) for case in report["cases"]]


@pytest.mark.slow  # 2.6 s in a full run: slow by cost (issue 41)
def test_a_rate_of_zero_changes_no_case(pytester: pytest.Pytester) -> None:
    run = gta(pytester, ORACLE, SAMPLE_DATA, FAST_SIM)
    clean = run.report  # read now: the next run writes the same file
    zero = gta(pytester, ORACLE, SAMPLE_DATA, FAST_SIM, "--gta-tool-faults=error=0,seed=3")
    assert run.ret == zero.ret
    assert _cases(zero.report) == _cases(clean)
    assert "faults" not in json.dumps(clean["cases"])
    assert "robustness" not in clean
    assert "tool_faults" not in clean["settings"]
    assert zero.report["settings"]["tool_faults"] == "error=0,seed=3"


def test_faulted_calls_are_recorded_counted_and_in_junit(pytester: pytest.Pytester) -> None:
    run = gta(
        pytester,
        ORACLE,
        SAMPLE_DATA,
        FAST_SIM,
        f"--gta-tool-faults={SPEC}",
        "--junitxml=j.xml",
        "--gta-report-html=r.html",
        "--gta-inspect-log=logs",
    )
    report = run.report
    spec = parse_fault_spec(SPEC)
    hits = [(c["query_id"], h) for c in report["cases"] for h in c["faults"]]
    assert hits, "the spec faults some of the sample's calls"
    for qid, hit in hits:
        assert spec.draw(qid, 0, hit["call"], hit["tool"]) == hit["fault"]
    robustness = report["robustness"]
    assert robustness["spec"] == spec.text()
    assert robustness["calls_faulted"] == len(hits)
    assert sum(robustness["by_kind"].values()) == len(hits)
    faulted = [c for c in report["cases"] if c["faults"]]
    assert robustness["faulted_cases"] == len(faulted)
    recovered = [c for c in faulted if c["outcome"] == "passed"]
    assert robustness["recovered_cases"] == len(recovered)
    assert robustness["recovery"] == round(len(recovered) / len(faulted), 6)
    assert "Robustness, tool faults " + spec.text() in run.output
    # Every case of a faulted run carries its count; JUnit has it per test case.
    junit = ET.parse(pytester.path / "j.xml")
    props = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in junit.iter("testcase")
    }
    for case in report["cases"]:
        mine = props[f"test_query[{case['id']}]"]
        assert mine["gta_faults"] == str(len(case["faults"]))
        assert mine["gta_recovered"] == str(bool(case["faults"]) and case["outcome"] == "passed")
    # The drill-down lists each faulted call; the Inspect samples keep them as metadata.
    page = (pytester.path / "r.html").read_text()
    assert page.count("Tool faults injected") == len(faulted)
    # Each faulted call is found among its case's steps and marked in the transcript.
    assert all("step" in hit for _, hit in hits)
    for qid, hit in hits:
        (case,) = [c for c in report["cases"] if c["query_id"] == qid]
        call = case["steps"][hit["step"]]["tool_calls"][0]["function"]
        assert call["name"] == hit["tool"]
    assert page.count('<p class="fault-injected">tool fault injected: ') == len(hits)
    require("inspect_ai")
    from inspect_ai.log import read_eval_log

    (path,) = (pytester.path / "logs").glob("*.eval")
    samples = {s.metadata["case_id"]: s.metadata for s in read_eval_log(str(path)).samples or []}
    assert {k: v["faults"] for k, v in samples.items()} == {
        c["id"]: c["faults"] for c in report["cases"]
    }
    # The model never reads that a fault was injected.
    for case in report["cases"]:
        for step in case["steps"]:
            assert "inject" not in json.dumps(step).lower()


def test_the_same_seed_meets_the_same_faults_with_xdist_and_any_concurrency(
    pytester: pytest.Pytester,
) -> None:
    args = (ORACLE, SAMPLE_DATA, FAST_SIM, f"--gta-tool-faults={SPEC}")
    serial = gta(pytester, *args, "--gta-concurrency=1", report="serial.json").report
    wide = gta(pytester, *args, "--gta-concurrency=16", report="wide.json").report
    workers = gta(pytester, *args, *XDIST, report="workers.json").report
    assert _cases(wide) == _cases(serial)
    assert _cases(workers) == _cases(serial)
    assert workers["robustness"] == serial["robustness"]


def _seed_with_first_call_faulted(kind: str) -> int:
    """A seed whose spec faults the receipts query's first OCR call, and not its second."""
    for seed in range(10_000):
        spec = parse_fault_spec(f"OCR:{kind}=0.5,seed={seed}")
        if spec.draw(RECEIPTS, 0, 0, "OCR") == kind and spec.draw(RECEIPTS, 0, 1, "OCR") is None:
            return seed
    raise AssertionError("no such seed")


@pytest.mark.parametrize("kind", ["error", "timeout"])
def test_a_model_that_retries_recovers_and_one_that_gives_up_fails(
    pytester: pytest.Pytester, kind: str
) -> None:
    seed = _seed_with_first_call_faulted(kind)
    script = {
        "default": "Final Answer: I do not know.",
        "responses": {
            f"e2e-{RECEIPTS}": [RECEIPT_CALL, RECEIPT_CALL, RIGHT_ANSWER],
            "e2e-0": [RECEIPT_CALL, "Final Answer: the OCR tool failed, I cannot tell."],
        },
    }
    (pytester.path / "script.json").write_text(json.dumps(script))
    run = gta(
        pytester,
        "--gta-model=mock:script.json",
        SAMPLE_DATA,
        FAST_SIM,
        f"--gta-ids={RECEIPTS},0",
        f"--gta-tool-faults=OCR:{kind}=0.5,seed={seed}",
    )
    cases = {c["query_id"]: c for c in run.report["cases"]}
    retried = cases[RECEIPTS]
    assert retried["outcome"] == "passed"
    assert retried["faults"] == [
        {"call": 0, "tool": "OCR", "fault": kind, "next": "OCR", "step": 0}
    ]
    # The faulted call's record is the failure the model read: an API error of OCR.
    assert retried["steps"][0]["error"]["type"] == "API_ERROR"
    assert retried["steps"][0]["error"]["msg"].startswith("OCR failed: ")
    assert retried["properties"]["gta_recovered"] is True
    robustness = run.report["robustness"]
    assert robustness["retried_calls"] >= 1
    assert robustness["recovered_cases"] >= 1
    gave_up = cases["0"]
    assert gave_up["outcome"] == "failed"
    if gave_up["faults"]:  # the same seed decides the other query's first call
        assert gave_up["faults"][0]["next"] == "<answer>"
        assert gave_up["properties"]["gta_recovered"] is False


def test_without_tools_the_model_answers_alone(pytester: pytest.Pytester) -> None:
    run = gta(pytester, ORACLE, SAMPLE_DATA, FAST_SIM, "--gta-tools-none", "--gta-ids=0,9")
    report = run.report
    sample = json.loads((bundled_sample_path() / "dataset.json").read_text())
    named = {t["name"] for q in sample.values() for t in q["tools"]}
    assert set(report["settings"]["tools_left_out"]) >= named
    for case in report["cases"]:
        calls = [s for s in case["steps"] if s.get("tool_calls")]
        assert calls, "the oracle still replays the reference calls"
        for step in calls:
            # No tool is offered: each call is the official invalid action.
            assert step["tool_calls"][0]["function"]["name"] == "InvalidAction"
    assert "oracle: " not in " ".join(report["notes"])  # not blamed on the harness


def test_a_tool_left_out_is_neither_offered_nor_run(pytester: pytest.Pytester) -> None:
    run = gta(
        pytester, ORACLE, SAMPLE_DATA, FAST_SIM, "--gta-tools-without=OCR", f"--gta-ids={RECEIPTS}"
    )
    (case,) = run.report["cases"]
    assert run.report["settings"]["tools_left_out"] == ["OCR"]
    names = [s["tool_calls"][0]["function"]["name"] for s in case["steps"] if s.get("tool_calls")]
    assert names[:2] == ["InvalidAction", "InvalidAction"]  # the two OCR calls
    assert "Calculator" in names


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ("--gta-mode=step", "--gta-tool-faults=error=0.1"),
            "--gta-tool-faults applies to end-to-end runs only",
        ),
        (
            ("--gta-mode=step,e2e", "--gta-tools-none"),
            "--gta-tools-none applies to end-to-end runs only",
        ),
        (("--gta-tools-without=Ocr",), "--gta-tools-without: no tool named Ocr in "),
        (("--gta-tool-faults=Teleport:error=0.1",), "--gta-tool-faults: no tool named Teleport"),
        (("--gta-tools-none", "--gta-tools-without=OCR"), "drop --gta-tools-without"),
        (("--gta-tool-faults=error=2",), "a rate is a number from 0 to 1"),
        (("--gta-fail-under=recovery=50",), "recovery is measured under tool faults only"),
        (
            (
                "--gta-data=workflow-sample",
                f"--gta-model=evalpack:{ROOT / 'tests' / 'data' / 'workflow' / 'pack.json'}",
                "--gta-tools-none",
            ),
            "--gta-tools-none: an eval pack's deliverables are already made, so no tool call",
        ),
        (
            ("--gta-tool-faults=error=0.1", "--gta-fail-on-regression=recovery"),
            "recovery takes a floor",
        ),
    ],
)
def test_a_wrong_fault_or_ablation_is_a_usage_error(
    pytester: pytest.Pytester, args: tuple[str, ...], said: str
) -> None:
    run = gta(pytester, ORACLE, SAMPLE_DATA, FAST_SIM, *args)
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    assert said in run.output
    assert "Traceback" not in run.output
    assert not Path(pytester.path / "gta.json").exists()


@pytest.mark.slow  # 8 s in a full run: slow by cost (issue 41)
def test_an_agent_making_the_same_calls_meets_the_same_faults(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop's oracle and a command agent replaying the reference over MCP, one seed."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    words = [sys.executable, str(HELPERS / "gta_agent_cli.py"), "replay", "{query_file}"]
    common = (ORACLE, SAMPLE_DATA, FAST_SIM, "--gta-tools=replay", f"--gta-tool-faults={SPEC}")
    loop = gta(pytester, *common, "--gta-ids=0,3,5,9", report="loop.json").report
    agent = gta(
        pytester,
        *common,
        AGENT_ENV,
        "--gta-ids=0,3,5,9",
        "--gta-agent-command=" + shlex.join(words),
        report="agent.json",
    ).report
    assert "agent" in agent["cases"][0]
    faults = {c["id"]: c["faults"] for c in loop["cases"]}
    assert any(faults.values())
    assert {c["id"]: c["faults"] for c in agent["cases"]} == faults
    assert agent["robustness"] == loop["robustness"]


WORKFLOW_SAMPLE = ROOT / "fixtures" / "gta_workflow_sample"


@pytest.mark.parametrize(
    "option", ["--gta-tool-faults=Calculator:error=1,seed=0", "--gta-tools-without=Calculator"]
)
def test_a_workflow_task_meets_faults_and_ablations_alike(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    """GTA-Workflow's production goes through the same layer; its report says what it met."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    script = pytester.path / "script.json"
    calc = 'Thought: add\nAction: Calculator\nAction Input: {"expression": "1+1"}'
    script.write_text(
        json.dumps({"responses": {"e2e-2": [calc, "Final Answer: The clip is clip.mp3."]}})
    )
    judge = JudgeServer(replies={}, default='{"score": 8, "analysis": "ok"}').start()
    try:
        run = gta(
            pytester,
            f"--gta-data={WORKFLOW_SAMPLE}",
            f"--gta-model=mock:{script}",
            "--gta-ids=2",
            "--gta-tools=local",
            f"--gta-judge-base-url={judge.base_url}",
            option,
            "--gta-report-md=gta.md",
            "--gta-report-html=w.html",
        )
    finally:
        judge.stop()
    report = run.report
    (case,) = report["cases"]
    call = case["steps"][0]
    if "faults" in option:
        assert case["faults"] == [
            {"call": 0, "tool": "Calculator", "fault": "error", "next": "<answer>", "step": 0}
        ]
        assert call["error"]["msg"].startswith("Calculator failed: HTTPError: 503")
        assert report["robustness"]["spec"] == "Calculator:error=1,seed=0"
        assert report["robustness"]["faulted_cases"] == 1
        assert report["robustness"]["recovered_cases"] == int(case["passed"])
        assert case["properties"]["gta_faults"] == 1
        assert "Robustness, tool faults Calculator:error=1,seed=0" in run.output
        assert "## Robustness, tool faults" in (pytester.path / "gta.md").read_text()
        assert "Tool faults injected" in (pytester.path / "w.html").read_text()
    else:
        assert "faults" not in case
        assert "robustness" not in report
        assert report["tools_left_out"] == ["Calculator"]
        assert call["tool_calls"][0]["function"]["name"] == "InvalidAction"


def test_a_floor_on_recovery_decides_the_exit_status(pytester: pytest.Pytester) -> None:
    args = (ORACLE, SAMPLE_DATA, FAST_SIM, f"--gta-tool-faults={SPEC}")
    low = gta(pytester, *args, "--gta-fail-under=recovery=10", report="low.json")
    recovery = low.report["robustness"]["recovery"] * 100
    assert 10 < recovery < 100
    assert low.ret == pytest.ExitCode.OK  # failed cases, but the gate decides
    (verdict,) = low.report["gates"]["verdicts"]
    assert verdict["metric"] == "recovery"
    assert verdict["passed"] is True
    high = gta(pytester, *args, "--gta-fail-under=recovery=99.5", report="high.json")
    assert high.ret == pytest.ExitCode.TESTS_FAILED
    assert f"recovery = {recovery:.2f} < 99.5" in high.output


@pytest.mark.slow  # 4 runs of the sample: slow by cost (issue 41)
def test_a_clean_run_and_faulted_ones_compare_as_a_curve(pytester: pytest.Pytester) -> None:
    base = (ORACLE, SAMPLE_DATA, FAST_SIM)
    gta(pytester, *base, "--gta-label=clean", report="runs/clean.json")
    for rate in ("0.2", "0.5"):
        gta(
            pytester,
            *base,
            f"--gta-tool-faults=error={rate},seed=1",
            f"--gta-label=error {rate}",
            report=f"runs/error-{rate}.json",
        )
    # A faulted run against the clean one: the paired drop per metric, its interval and p.
    paired = gta(
        pytester,
        *base,
        "--gta-tool-faults=error=0.5,seed=1",
        "--gta-baseline=runs/clean.json",
        report="paired.json",
    ).report
    compared = paired["comparison"]["metrics"]["e2e"]
    assert set(compared) >= {"ans_acc", "p_f1"}
    for diff in compared.values():
        assert {"difference", "ci", "p_value", "p_drop"} <= set(diff)
    result = pytester.runpytest(
        "--gta-compare", "runs", "--gta-report-md=compare.md", "--gta-report-html=compare.html"
    )
    text = result.stdout.str()
    lines = text.splitlines()
    title = "Robustness: tool faults and ablations (end-to-end percent; difference against clean)"
    start = lines.index(title)
    table = lines[start + 2 : lines.index("", start)]
    assert len(table) == 3
    (line,) = [line for line in table if "error=0.5,seed=1" in line]
    report = json.loads((pytester.path / "runs" / "error-0.5.json").read_text())
    recovery = report["robustness"]["recovery"] * 100
    assert line.split()[-2:] == [str(report["robustness"]["calls_faulted"]), f"{recovery:.2f}"]
    (clean,) = [line for line in table if line.startswith("clean ")]
    assert clean.split()[1:3] == ["none", "none"]
    assert "error=0.2,seed=1" in (pytester.path / "compare.md").read_text()
    page = (pytester.path / "compare.html").read_text()
    assert '<section id="robustness"><h2>Robustness under tool faults</h2>' in page
    assert "error=0.5,seed=1" in page


@pytest.mark.slow  # the real release, four times: slow by cost (issue 41)
def test_the_release_meets_the_same_faults_serially_and_with_workers_at_any_concurrency(
    pytester: pytest.Pytester, release_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The oracle behind a fake OpenAI server, end to end on the 229 queries, one seed."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    pytester.makeini("[pytest]\n")
    spec = "error=0.1,timeout=0.05,empty=0.05,corrupt=0.05,seed=41"
    with OracleServer(load_dataset(release_root)) as server:
        common = (
            f"--gta-data={release_root}",
            "--gta-model=openai/oracle-http",
            f"--gta-base-url={server.url}",
            "--gta-cache=off",
            FAST_SIM,
            f"--gta-tool-faults={spec}",
        )
        serial = gta(pytester, *common, "--gta-concurrency=1", report="serial.json").report
        wide = gta(pytester, *common, "--gta-concurrency=16", *XDIST, report="workers.json").report
        # The tool-free run and the run with tools: the ΔTool table.
        served = common[:-1]
        gta(pytester, *served, *XDIST, "--gta-label=tools", report="delta/tools.json")
        gta(
            pytester,
            *served,
            *XDIST,
            "--gta-tools-none",
            "--gta-label=no tools",
            report="delta/none.json",
        )
    compared = pytester.runpytest("--gta-compare", "delta").stdout.str().splitlines()
    title = "Robustness: tool faults and ablations (end-to-end percent; difference against tools)"
    start = compared.index(title)
    header, tools, none = compared[start + 1 : start + 4]
    assert header.split()[:6] == ["run", "tool", "faults", "tools", "left", "out"]
    assert tools.split()[:3] == ["tools", "none", "none"]
    assert none.startswith("no tools")
    assert "(-" in none or "(+" in none  # each metric without tools, and its difference
    assert len(serial["cases"]) == 229
    keys = ("id", "outcome", "score", "steps", "faults", "primitives")
    per_case = [[untimed({k: c.get(k) for k in keys}) for c in r["cases"]] for r in (serial, wide)]
    assert per_case[0] == per_case[1]
    assert serial["robustness"] == wide["robustness"]
    assert serial["metrics"] == wide["metrics"]
    # About a quarter of the release's ~550 calls meet a fault.
    assert 80 < serial["robustness"]["calls_faulted"] < 220


@pytest.mark.slow  # the Workflow sample twice, once with workers: slow by cost (issue 41)
def test_the_workflow_sample_meets_the_same_faults_with_and_without_workers(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    calc = 'Thought: add\nAction: Calculator\nAction Input: {"expression": "%d+1"}'
    script = {"responses": {"*": [calc % n for n in range(3)] + ["Final Answer: done."]}}
    (pytester.path / "script.json").write_text(json.dumps(script))
    judge = JudgeServer(replies={}, default='{"score": 8, "analysis": "ok"}').start()
    try:
        common = (
            f"--gta-data={WORKFLOW_SAMPLE}",
            "--gta-model=mock:script.json",
            "--gta-tools=local",
            f"--gta-judge-base-url={judge.base_url}",
            "--gta-tool-faults=error=0.3,empty=0.2,seed=5",
        )
        serial = gta(pytester, *common, "--gta-concurrency=1", report="serial.json").report
        workers = gta(
            pytester, *common, "--gta-concurrency=8", *XDIST, report="workers.json"
        ).report
        for k in (1, 2):
            gta(pytester, *common, f"--gta-shard={k}/2", report=f"shard{k}.json")
    finally:
        judge.stop()
    merged = gta(pytester, "--gta-merge", "shard1.json", "shard2.json", report="merged.json")
    assert merged.report["robustness"] == serial["robustness"]
    faults = {c["id"]: c["faults"] for c in serial["cases"]}
    assert len(faults) == 8
    assert any(faults.values())
    assert {c["id"]: c["faults"] for c in workers["cases"]} == faults
    assert workers["robustness"] == serial["robustness"]
    spec = parse_fault_spec("error=0.3,empty=0.2,seed=5")
    for case in serial["cases"]:
        for hit in case["faults"]:
            assert spec.draw(case["task_id"], 0, hit["call"], "Calculator") == hit["fault"]


@pytest.mark.slow  # three runs of the sample and a merge: slow by cost (issue 41)
def test_the_shards_of_a_faulted_run_merge_into_the_whole(pytester: pytest.Pytester) -> None:
    args = (ORACLE, SAMPLE_DATA, FAST_SIM, f"--gta-tool-faults={SPEC}")
    whole = gta(pytester, *args, report="whole.json").report
    for k in (1, 2):
        gta(pytester, *args, f"--gta-shard={k}/2", report=f"shard{k}.json")
    merged = pytester.runpytest(
        "--gta-merge", "shard1.json", "shard2.json", "--gta-report=merged.json"
    )
    assert merged.ret == 0, merged.stdout.str()[-2000:]
    report = json.loads((pytester.path / "merged.json").read_text())
    assert report["robustness"] == whole["robustness"]
    assert [c["faults"] for c in report["cases"]] == [c["faults"] for c in whole["cases"]]
    # A shard of another spec is another run: refused, naming the setting.
    gta(
        pytester,
        ORACLE,
        SAMPLE_DATA,
        FAST_SIM,
        "--gta-tool-faults=error=0.5",
        "--gta-shard=2/2",
        report="other.json",
    )
    refused = pytester.runpytest("--gta-merge", "shard1.json", "other.json")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert "settings.tool_faults" in refused.stderr.str() + refused.stdout.str()
