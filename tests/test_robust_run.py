"""A run ends cleanly whatever its inputs hold and whatever happens to its outputs.

Each test reproduces a way a run used to crash or lie: a lone surrogate in a model's reply
(execnet refused it under xdist, the cache write raised without), NaN in prediction files
(bare ``NaN`` in the JSON report), a full disk under the report (a traceback, no tables), a
Ctrl-C (a partial report that did not say so), reports written 0600, and a similarity score
of ``1.0000003``.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.models.base import BaseModelAdapter
from pytest_gta.outward import Cleaner
from tests.helpers.gta_run import FAST_SIM, SAMPLE_DATA
from tests.helpers.optional import require
from tests.helpers.run_context import play_e2e, result_of
from tests.helpers.scripted_server import ScriptedServer, Step, chat_completion

SURROGATE = "\ud83d"


def strict_json(text):
    def refuse(constant):
        raise AssertionError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def test_lone_surrogate_in_replies(pytester, dist_args):
    script = {"default": f"Final Answer: {SURROGATE} the answer is {SURROGATE}"}
    # json.dumps writes the surrogate as the \ud83d escape a model's JSON answer would carry
    pytester.path.joinpath("script.json").write_text(json.dumps(script))
    result = pytester.runpytest(
        SAMPLE_DATA,
        FAST_SIM,
        "--gta-model=mock:script.json",
        "--gta-mode=step,e2e",
        "--gta-ids=0,7",
        "--junitxml=gta.xml",
        "--gta-report=gta.json",
        "--gta-report-md=gta.md",
        *dist_args,
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=4)
    report = strict_json(pytester.path.joinpath("gta.json").read_text())
    replies = [r for case in report["cases"] for r in case["replies"]]
    assert replies
    assert all("\ufffd the answer is \ufffd" in r for r in replies)
    assert "INTERNALERROR" not in result.stdout.str()
    pytester.path.joinpath("gta.md").read_text(encoding="utf-8")
    assert "<testcase" in pytester.path.joinpath("gta.xml").read_text()


def test_lone_surrogate_reply_is_cached_and_read_back(pytester):
    with ScriptedServer(models=["m"]) as server:
        server.default = Step(chat_completion(f"Final Answer: 9.24 {SURROGATE}"))
        for _ in range(2):
            result = pytester.runpytest(
                SAMPLE_DATA,
                FAST_SIM,
                "--gta-model=openai/m",
                f"--gta-base-url={server.url}",
                "--gta-ids=0",
                "--gta-cache-dir=cache",
                "--gta-report=gta.json",
            )
            result.assert_outcomes(passed=1)
        assert len(server.posted()) == 1  # the second run was answered from the cache
    report = strict_json(pytester.path.joinpath("gta.json").read_text())
    assert report["usage"]["cached_calls"] == 1
    (entry,) = pytester.path.joinpath("cache").rglob("*.json")
    assert "\\ud83d" in entry.read_text()  # stored exactly, as an escape


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
def test_nan_in_prediction_files_gives_strict_json(pytester, sample_dataset, tmp_path):
    from tests.test_opencompass import e2e_records

    records = e2e_records(sample_dataset)
    first_call = next(s for s in records[0]["prediction"][0] if "tool_calls" in s)
    first_call["tool_calls"][0]["function"]["arguments"]["weight"] = float("nan")
    records[1]["prediction"][0].insert(0, {"role": "assistant", "content": float("inf")})
    path = tmp_path / "gta_bench.json"
    path.write_text(json.dumps({str(i): r for i, r in enumerate(records)}))  # writes NaN
    result = pytester.runpytest(
        SAMPLE_DATA,
        FAST_SIM,
        f"--gta-model=opencompass:{path}",
        "--gta-mode=e2e",
        "--gta-report=gta.json",
        "--gta-report-md=gta.md",
    )
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    report = strict_json(pytester.path.joinpath("gta.json").read_text())
    assert any("not finite numbers" in note for note in report["notes"])
    result.stdout.fnmatch_lines(["*value(s) were not finite numbers*"])


def test_cleaner_keeps_what_writers_accept():
    cleaner = Cleaner()
    value = cleaner.value(
        {"a": (1, float("nan")), 3: {"deep": [[[float("-inf")]]]}, "big": 10**6000, "s": "x"}
    )
    assert value == {
        "a": [1, None],
        "3": {"deep": [[[None]]]},
        "big": "<integer of about 6000 digits>",
        "s": "x",
    }
    assert cleaner.nonfinite == 2
    assert cleaner.truncated == 1
    nested: list = []
    inner = nested
    for _ in range(500):
        inner.append([])
        inner = inner[0]
    json.dumps(Cleaner().value(nested))  # bounded: no RecursionError


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_a_full_disk_still_prints_the_tables(pytester):
    """The report's directory is a 16 KiB tmpfs in a private mount namespace: a real ENOSPC."""
    require("util-linux")  # unshare
    out = pytester.mkdir("full")
    command = (
        f"mount -t tmpfs -o size=16k tmpfs {out} && "
        f"{sys.executable} -m pytest -p no:cacheprovider --gta-data=sample {FAST_SIM} "
        f"--gta-model=oracle --gta-mode=step,e2e --gta-report={out}/gta.json "
        f"--gta-report-md={out}/gta.md"
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", command],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, output[-3000:]
    assert "34 passed" in output  # 17 sample queries x 2 modes
    assert "Traceback" not in output
    assert "INTERNALERROR" not in output
    tables = output.index("Table 4, step-by-step mode")
    error = output.index(
        f"pytest-gta: could not write {out}/gta.json (--gta-report): No space left on device"
    )
    assert tables < error
    assert f"report written to {out}/gta.json" not in output


def test_ctrl_c_leaves_a_report_that_says_so(pytester):
    # A plugin, not a conftest: conftest hooks only see items under their directory, and the
    # GTA cases come from the installed package.
    pytester.makepyfile(
        interrupter="""
        def pytest_runtest_setup(item):
            if item.name.endswith("[e2e-2]"):
                raise KeyboardInterrupt
        """
    )
    result = pytester.runpytest_subprocess(  # in process, the interrupt would stop this run too
        "-p",
        "interrupter",
        SAMPLE_DATA,
        FAST_SIM,
        "--gta-model=oracle",
        "--gta-report=gta.json",
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    report = json.loads(pytester.path.joinpath("gta.json").read_text())
    assert report["interrupted"] is True
    assert report["outcomes"]["passed"] == 2
    assert any("interrupted (Ctrl-C)" in note for note in report["notes"])
    result.stdout.fnmatch_lines(
        ["*GTA results*", "INTERRUPTED (Ctrl-C): these tables cover the 2 case(s) that finished"]
    )


def test_an_uninterrupted_report_says_so_too(pytester):
    pytester.runpytest(
        SAMPLE_DATA, FAST_SIM, "--gta-model=oracle", "--gta-ids=0", "--gta-report=r.json"
    )
    assert json.loads(pytester.path.joinpath("r.json").read_text())["interrupted"] is False


def test_reports_follow_the_umask(pytester):
    old = os.umask(0o022)
    try:
        pytester.runpytest(
            SAMPLE_DATA,
            FAST_SIM,
            "--gta-model=oracle",
            "--gta-ids=0",
            "--junitxml=gta.xml",
            "--gta-report=gta.json",
            "--gta-report-md=gta.md",
        )
    finally:
        os.umask(old)
    modes = {
        name: stat.S_IMODE(pytester.path.joinpath(name).stat().st_mode)
        for name in ("gta.xml", "gta.json", "gta.md")
    }
    assert modes == {"gta.xml": 0o644, "gta.json": 0o644, "gta.md": 0o644}


def test_reported_score_is_clamped_but_metrics_are_exact(sample_dataset):
    from pytest_gta.case import Case
    from pytest_gta.results.case import Verdict, case_properties
    from pytest_gta.scoring.metrics import E2ECaseScore, Score

    score = E2ECaseScore(True, answer=Score("f32", 1.0000003576278687))
    verdict = Verdict.of(True, 1.0000003576278687)
    result = result_of(Case("e2e", sample_dataset["7"]), [], score, verdict)
    properties = dict(case_properties(result, model="m"))
    assert properties["gta_score"] == 1.0
    assert properties["gta_answer_score"] == 1.0000003576278687
    assert result.score == verdict.score == 1.0


# -- any model reply ends as a scored case ---------------------------------------------------

ANY_CHAR = st.characters(codec=None, exclude_categories=())  # lone surrogates included
FRAGMENTS = st.sampled_from(
    [
        "Thought: ",
        "Action:",
        "Action: OCR\n",
        "Action:Calculator\n",
        "Action Input:",
        'Action Input: {"image": "',
        '{"expression": "1+1"}',
        "```json\n",
        "\n```",
        "Final Answer:",
        "[" * 200,
        "9" * 5000,
        '{"a": ' * 70,
        "\ud83d",
        "Response:",
        "\n",
    ]
)
REPLIES = st.lists(st.one_of(st.text(ANY_CHAR, max_size=40), FRAGMENTS), max_size=8).map("".join)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies=st.lists(REPLIES, min_size=1, max_size=4), qid=st.sampled_from(["0", "1", "3"]))
def test_any_reply_is_scored_as_the_models_answer(sample_dataset, tmp_path_factory, replies, qid):
    """Whatever a model writes, the case is scored, and its payload is writable and sendable."""
    from pytest_gta.case import Case
    from pytest_gta.results.io import CaseWire, case_to_wire
    from pytest_gta.run import loops
    from pytest_gta.run.runner import Scorer
    from pytest_gta.tools import ToolContext, ToolSet
    from pytest_gta.types import ModelOutput
    from tool_backends.replay import ReplayBackend

    class Replies(BaseModelAdapter):
        def __init__(self):
            self.n = 0

        def generate(self, request):
            self.n += 1
            return ModelOutput(replies[min(self.n - 1, len(replies) - 1)])

    query = sample_dataset[qid]
    tools = ToolSet([ReplayBackend()])
    output = tmp_path_factory.mktemp("out")
    runner = tools.runner(tools.route(query), ToolContext(sample_dataset, query, output))
    scorer = Scorer(lambda: None, 0.5)  # objective queries: no similarity needed
    for mode in ("step", "e2e"):
        if mode == "step":
            episode = loops.run_step(sample_dataset, query, Replies())
        else:
            episode = play_e2e(sample_dataset, query, Replies(), runner, max_turns=3)
        score, verdict = scorer.score(mode, query, episode.predictions, episode.gold)
        replies = [t.reply for t in episode.turns]
        result = result_of(Case(mode, query), episode.predictions, score, verdict, replies)
        text = case_to_wire(CaseWire(result))
        text.encode("utf-8")  # what execnet, JUnit and the reports need
        json.loads(text)
        assert 0.0 <= result.score <= 1.0


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_junitxml_that_cannot_be_written_still_prints_the_tables(pytester):
    """pytest's own JUnit writer on a full disk (``/dev/full``: every write is ENOSPC)."""
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        SAMPLE_DATA,
        FAST_SIM,
        "--gta-model=oracle",
        "--gta-ids=0,1",
        "--junitxml=/dev/full",
        "--gta-report=gta.json",
    )
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output[-3000:]
    assert "Traceback" not in output
    assert "INTERNALERROR" not in output
    tables = output.index("GTA results")
    error = output.index(
        "pytest-gta: could not write a file written at the session's end "
        "(--junitxml=/dev/full or another plugin's): No space left on device"
    )
    assert tables < error
    assert "2 passed" in output
    assert json.loads(pytester.path.joinpath("gta.json").read_text())["outcomes"]["passed"] == 2
