"""The GTA-Workflow judge checked at start-up, and bounded in time whatever its server does.

A run whose judge cannot be reached at all (the default ``openai/gpt-5.2`` with neither a key
nor an endpoint) stops with a usage error naming the variables and the option, before any task
is produced; a run that judges nothing needs no key. A judge that hangs, trickles its reply or
asks to retry past the deadline ends as the task's error within ``--gta-judge-timeout``
(default ``--gta-timeout``), over the Responses API and over chat completions alike, while a
judge that answers still sees the official client's retries. Real servers on 127.0.0.1: the
scripted ones for judges that answer, ``tests/helpers/hostile_server.py`` for the others.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.judge.client import NO_KEY, ChatJudge, ResponsesJudge, missing_access
from pytest_gta.judge.deadline import JudgeTimeout
from tests.helpers.gta_run import XDIST, GtaRun, gta, gta_process
from tests.helpers.hostile_server import HostileServer, hang, status, trickle
from tests.helpers.paths import ROOT
from tests.helpers.scripted_server import Recorded, ScriptedServer, Step, chat_completion

DATA = ROOT / "tests" / "data" / "workflow"
SAMPLE = ROOT / "fixtures" / "gta_workflow_sample"
PACK = DATA / "pack.json"
#: Task 1's deliverables include this PNG (uploaded first by the official protocol).
PNG = DATA / "deliverables" / "1" / "units_chart.png"
JUDGE_VARIABLES = (
    "OPENAI_API_KEY",
    "EVAL_OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "EVAL_OPENAI_BASE_URL",
)
REFUSED = "--gta-judge=openai/gpt-5.2 is judged over the OpenAI API, but no key is set"
BUSY = b'{"error": {"message": "busy", "type": "server_error", "param": null, "code": null}}'
JUDGES = [ResponsesJudge, ChatJudge]


@pytest.fixture
def no_judge_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither a judge key nor a judge endpoint in the environment."""
    for name in JUDGE_VARIABLES:
        monkeypatch.delenv(name, raising=False)


# -- the start-up check --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("judge", "env", "url", "refused"),
    [
        ("openai/gpt-5.2", {}, None, True),
        ("openai/gpt-5.2", {"OPENAI_API_KEY": ""}, None, True),  # set but empty: no key
        ("openai/gpt-5.2", {"OPENAI_API_KEY": "sk-a"}, None, False),
        ("openai/gpt-5.2", {"EVAL_OPENAI_API_KEY": "sk-b"}, None, False),
        ("openai/gpt-5.2", {}, "http://127.0.0.1:9/v1", False),  # an endpoint needs no key
        ("local-judge", {}, "http://127.0.0.1:9/v1", False),
        ("smollm2", {}, None, False),  # served in pytest's process
    ],
)
def test_only_a_judge_over_the_openai_api_needs_a_key(
    no_judge_env: None,
    monkeypatch: pytest.MonkeyPatch,
    judge: str,
    env: dict[str, str],
    url: str | None,
    refused: bool,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    problem = missing_access(judge, url)
    assert (problem is not None) is refused
    if problem is not None:
        assert problem.startswith(REFUSED)
        for named in (
            "set OPENAI_API_KEY or EVAL_OPENAI_API_KEY",
            "--gta-judge-base-url=URL (or OPENAI_BASE_URL, EVAL_OPENAI_BASE_URL)",
            "--gta-judge=MODEL --gta-judge-api=chat",
        ):
            assert named in problem


def _model_server() -> ScriptedServer:
    return ScriptedServer(default=Step(chat_completion("Thought: done\nFinal Answer: done")))


def test_no_key_and_no_endpoint_stop_the_run_before_any_task(
    pytester: pytest.Pytester, no_judge_env: None
) -> None:
    """The model under test is never asked and no report is written: nothing ran."""
    with _model_server() as model:
        run = gta(
            pytester,
            f"--gta-data={SAMPLE}",
            "--gta-model=openai/scripted-model",
            f"--gta-base-url={model.url}",
            "--gta-tools=local",
            "--gta-ids=2,4",
        )
        asked = model.posted()
    assert run.ret == pytest.ExitCode.USAGE_ERROR, run.output[-2000:]
    assert f"ERROR: pytest-gta: {REFUSED}" in run.output
    assert "nothing was run (2 selected task(s) would be judged)" in run.output
    assert asked == []
    assert not run.report_path.exists()


def test_under_xdist_the_controller_refuses_the_run(
    pytester: pytest.Pytester, no_judge_env: None
) -> None:
    """Workers collect; a worker may not refuse a run (xdist would crash): the controller does."""
    run = gta(pytester, f"--gta-data={SAMPLE}", f"--gta-model=evalpack:{PACK}", *XDIST)
    assert run.ret == pytest.ExitCode.USAGE_ERROR, run.output[-2000:]
    assert REFUSED in run.output
    assert "INTERNALERROR" not in run.output
    assert not run.report_path.exists()


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (("-k", "no_such_task"), pytest.ExitCode.NO_TESTS_COLLECTED),
        (("--collect-only",), pytest.ExitCode.OK),
    ],
)
def test_a_run_that_judges_nothing_needs_no_key(
    pytester: pytest.Pytester, no_judge_env: None, args: tuple[str, ...], status: int
) -> None:
    run = gta(pytester, f"--gta-data={SAMPLE}", f"--gta-model=evalpack:{PACK}", *args)
    assert run.ret == status, run.output[-2000:]
    assert "no key is set" not in run.output


def _chat_judge() -> ScriptedServer:
    """A local chat-completions judge that gives every checkpoint 8."""
    return ScriptedServer(default=Step(chat_completion('{"score": 8, "analysis": "ok"}')))


def _chat_judged(pytester: pytest.Pytester, *args: str) -> GtaRun:
    """Task 1 of the pack judged by ``local-judge`` over chat (``args``: where it is, outputs)."""
    return gta(
        pytester,
        f"--gta-data={SAMPLE}",
        f"--gta-model=evalpack:{PACK}",
        "--gta-ids=1",
        "--gta-judge=local-judge",
        "--gta-judge-api=chat",
        *args,
    )


def test_an_endpoint_without_a_key_is_sent_the_placeholder(
    pytester: pytest.Pytester, no_judge_env: None
) -> None:
    """A local OpenAI-compatible judge needs no key: it gets ``EMPTY``, and the task is judged."""
    judge = _chat_judge()
    with judge:
        run = _chat_judged(pytester, f"--gta-judge-base-url={judge.url}")
        asked: list[Recorded] = list(judge.requests)
    (case,) = run.report["cases"]
    assert case["root_score"] == 8.0
    assert asked
    sent = {v for r in asked for k, v in r.headers.items() if k.lower() == "authorization"}
    assert sent == {f"Bearer {NO_KEY}"}
    assert run.report["judge"]["served"] == "endpoint"


# -- the deadline, one checkpoint call at a time -------------------------------------------------


@pytest.mark.parametrize("kind", JUDGES)
@pytest.mark.parametrize(
    "answer",
    [hang, trickle(json.dumps({"id": "x", "output": []}).encode() * 4, 0.25)],
    ids=["hangs", "trickles"],
)
def test_a_judge_that_does_not_answer_in_time_ends_the_call_at_its_limit(
    kind: type[ResponsesJudge], answer: Any
) -> None:
    with HostileServer(answer) as server:
        judge = kind("m", server.url, "sk-test", None, timeout=1.0)
        started = time.monotonic()
        with pytest.raises(JudgeTimeout, match=r"within 1 s: .* bounded by --gta-judge-timeout"):
            judge("the prompt", [str(PNG)])
        took = time.monotonic() - started
    # The SDK's own default waited 600 s per attempt, three attempts per checkpoint.
    assert took < 30  # bound: catches a hang
    (log,) = judge.logs
    assert log.error is not None
    assert log.error.startswith("JudgeTimeout: the judge did not answer within 1 s")


@pytest.mark.parametrize("kind", JUDGES)
def test_a_retry_asked_for_past_the_deadline_is_not_waited_for(
    kind: type[ResponsesJudge],
) -> None:
    with HostileServer(status("503 Service Unavailable", BUSY, retry_after=100)) as server:
        judge = kind("m", server.url, "sk-test", None, timeout=5.0)
        with pytest.raises(JudgeTimeout, match=r"it asked to retry after 100 s, past that"):
            judge("the prompt", [])
        assert server.requests == 1


@pytest.mark.parametrize("kind", JUDGES)
def test_retries_within_the_deadline_are_the_official_clients(kind: type[ResponsesJudge]) -> None:
    """Two retries after a 503 (the SDK's), then the server's own error, not a timeout."""
    with HostileServer(status("503 Service Unavailable", BUSY, retry_after_ms=20)) as server:
        judge = kind("m", server.url, "sk-test", None, timeout=60.0)
        with pytest.raises(Exception, match="Error code: 503") as raised:
            judge("the prompt", [])
        assert server.requests == 3
    assert not isinstance(raised.value, JudgeTimeout)


# -- a whole run with a judge that hangs ---------------------------------------------------------


def _hanging_run(tmp_path: Path, url: str, *args: str) -> tuple[GtaRun, float]:
    started = time.monotonic()
    run = gta_process(
        tmp_path,
        f"--gta-data={SAMPLE}",
        f"--gta-model=evalpack:{PACK}",
        "--gta-ids=1",
        f"--gta-judge-base-url={url}",
        "--gta-cache=off",
        "-v",  # with the header (gta_process runs -q)
        *args,
        # Fails the test, rather than hanging it, where the judge is not bounded.
        timeout=240,
        check=False,
    )
    return run, time.monotonic() - started


@pytest.mark.parametrize(
    ("api", "args", "limit"),
    [
        ("responses", ("--gta-timeout=2",), "2 s"),  # the judge's default: --gta-timeout
        (
            "chat",
            (
                "--gta-judge=local-judge",
                "--gta-judge-api=chat",
                "--gta-timeout=600",
                "--gta-judge-timeout=1.5",
            ),
            "1.5 s",
        ),
    ],
)
def test_a_hanging_judge_ends_the_task_as_an_error_within_the_limit(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    api: str,
    args: tuple[str, ...],
    limit: str,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with HostileServer(hang) as server:
        run, took = _hanging_run(tmp_path, server.url, *args)
    assert took < 180  # bound: catches a hang
    assert run.ret == 1, run.output[-3000:]
    assert f"{limit} per checkpoint call" in run.output
    report = run.report
    assert report["judge"]["api"] == api
    (case,) = report["cases"]
    assert case["outcome"] == "error"
    assert case["root_score"] is None
    assert case["judge_error"].startswith(f"JudgeTimeout: the judge did not answer within {limit}")
    assert "--gta-judge-timeout" in case["judge_error"]
    assert "1 error" in run.output
    # No task scored: no rate is shown as if measured.
    metrics = report["metrics"]
    assert (metrics["scored"], metrics["root_sr"], metrics["p_sr"]) == (0, None, None)
    row = next(line for line in run.output.splitlines() if line.strip().startswith("-"))
    assert row.split() == ["-"] * 8


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "86401"])
def test_a_bad_judge_timeout_is_a_usage_error_naming_the_option(
    pytester: pytest.Pytester, value: str
) -> None:
    result = pytester.runpytest(
        f"--gta-data={SAMPLE}", f"--gta-model=evalpack:{PACK}", f"--gta-judge-timeout={value}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--gta-judge-timeout={value}" in result.stderr.str()


@pytest.mark.parametrize(
    ("ini", "args", "said"),
    [
        ("", (), "120 s per checkpoint call"),  # --gta-timeout's default
        ("", ("--gta-timeout=7",), "7 s per checkpoint call"),
        ("gta_judge_timeout = 3\n", ("--gta-timeout=7",), "3 s per checkpoint call"),
        ("gta_judge_timeout = 3\n", ("--gta-judge-timeout=4",), "4 s per checkpoint call"),
    ],
)
def test_the_judge_timeout_follows_gta_timeout_unless_given(
    pytester: pytest.Pytester, ini: str, args: tuple[str, ...], said: str
) -> None:
    pytester.makeini(f"[pytest]\n{ini}")
    result = pytester.runpytest(
        "--collect-only", f"--gta-data={SAMPLE}", f"--gta-model=evalpack:{PACK}", *args
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert said in result.stdout.str()


def test_the_endpoint_from_the_environment_is_named_without_its_password(
    pytester: pytest.Pytester, no_judge_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page and report name the endpoint the run used (a variable's too), password masked."""
    judge = _chat_judge()
    with judge:
        url = judge.url.replace("http://", "http://judge:sekrit-0123456789@")
        monkeypatch.setenv("EVAL_OPENAI_BASE_URL", url)
        run = _chat_judged(pytester, "--gta-report-html=page.html", "--gta-report-md=page.md")
    masked = judge.url.replace("http://", "http://judge:***@")
    assert run.report["judge"]["served"] == "endpoint"
    assert run.report["judge"]["base_url"] == masked
    assert f"at {masked}" in run.output
    page = (pytester.path / "page.html").read_text(encoding="utf-8")
    assert f"<dt>judge reached</dt><dd>at {masked}</dd>" in page
    assert "sekrit-0123456789" not in run.output
    for path in pytester.path.rglob("*"):
        if path.is_file():
            assert b"sekrit-0123456789" not in path.read_bytes(), path
