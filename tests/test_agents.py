"""The agent under test (issue 25): scored like official end-to-end mode, hostile ones contained.

Black-box runs on the bundled sample with the replay tools: a perfect agent (the reference calls
through ``task.tools``, or over MCP with the SDK's ``mcp.Client`` from a separate program)
must give the oracle's end-to-end numbers, case for case; the hostile agents of
``tests/helpers/gta_agents.py`` and ``tests/helpers/gta_agent_cli.py`` must each end as a scored
mistake or a per-case error, with nothing left running and no secret of the environment written
anywhere.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gta.options.agents import agent_words, parse_agent_env
from pytest_gta.run.agent_command import PROXY_KEY, agent_environment
from pytest_gta.run.agent_under_test import AgentTask, ToolClient
from pytest_gta.vocabulary import AGENT_PLACEHOLDERS
from tests.helpers.gta_run import (
    FAST_SIM,
    NO_HYPOTHESIS,
    ORACLE,
    SAMPLE_DATA,
    XDIST,
    GtaRun,
    gta,
    gta_process,
)
from tests.helpers.oracle_server import OracleServer
from tests.helpers.paths import HELPERS, ROOT
from tests.helpers.processes import default_sigint, processes_named
from tests.helpers.references import AGENT_ENV
from tool_backends.agent_launcher import text as decode_output

AGENTS = HELPERS / "gta_agents.py"
CLI = HELPERS / "gta_agent_cli.py"
REPLAY_TOOLS = "--gta-tools=replay"
#: What every run here passes: the oracle model (in this process: the proxy answers for it), the
#: sample, the replay tools; the test agents get the references on purpose (their sandbox shows
#: them no dataset).
RUN = (ORACLE, SAMPLE_DATA, FAST_SIM, REPLAY_TOOLS, AGENT_ENV)
#: Distinctive enough that finding it anywhere is a leak.
SECRET = "sk-distinctive-3f9c1e7a5b2d4c6e8f0a"


def command(mode: str, *extra: str) -> str:
    """``--gta-agent-command`` running ``tests/helpers/gta_agent_cli.py MODE {query_file} ...``."""
    words = [sys.executable, str(CLI), mode, "{query_file}", *extra]
    return "--gta-agent-command=" + shlex.join(words)


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {case["id"]: case for case in report["cases"]}


@pytest.fixture(scope="module")
def oracle_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The oracle's end-to-end run on the sample: what a perfect agent must reproduce."""
    cwd = tmp_path_factory.mktemp("oracle")
    return gta_process(cwd, *RUN).report


@pytest.fixture
def agent_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command agents import ``tests.helpers.gta_agents``: the checkout on their path."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


def calls_of(case: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in case["steps"] if s["role"] == "tool" or "tool_calls" in s]


def assert_oracle_numbers(run: GtaRun, oracle: dict[str, Any]) -> None:
    assert run.ret == 0, run.output[-3000:]
    report = run.report
    assert report["metrics"] == oracle["metrics"]
    cases, expected = by_id(report), by_id(oracle)
    assert sorted(cases) == sorted(expected)
    for case_id, case in cases.items():
        assert case["score"] == expected[case_id]["score"], case_id
        # The calls are the oracle's, step for step; the answer too, but for the space the
        # official ReAct parser leaves after "Final Answer:" (the oracle's text keeps it).
        assert calls_of(case) == calls_of(expected[case_id]), case_id
        assert len(case["tool_log"]) == sum(1 for s in case["steps"] if s["role"] == "tool")


def test_python_agent_gets_the_oracle_numbers(pytester, oracle_report):
    run = gta(pytester, *RUN, f"--gta-agent={AGENTS}:replay")
    assert_oracle_numbers(run, oracle_report)
    report = run.report
    assert report["settings"]["agent"]["name"] == f"{AGENTS}:replay"
    assert report["settings"]["agent"]["kind"] == "python"
    case = report["cases"][0]
    assert case["agent"]["answer"] == case["steps"][-1]["content"]
    assert case["properties"]["gta_agent"] == f"{AGENTS}:replay"
    assert case["exchanges"] == []  # this agent asks no model
    run.result.stdout.fnmatch_lines(
        [
            f"gta: agent under test (callable): {AGENTS}:replay*",
            f"agent under test: {AGENTS}:replay (python)",
        ]
    )


def test_agent_file_in_the_ini_is_relative_to_it(pytester):
    (pytester.path / "agents").mkdir()
    (pytester.path / "agents" / "mine.py").write_text(AGENTS.read_text())
    pytester.makefile(".ini", pytest="[pytest]\ngta_agent = agents/mine.py:replay\n")
    sub = pytester.mkdir("sub")
    sub.joinpath("test_nothing.py").write_text("")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(sub)
        run = gta(
            pytester, *RUN, "--gta-ids=0", f"--rootdir={pytester.path}", "-c", "../pytest.ini"
        )
    assert run.ret == 0, run.output[-3000:]
    # Named as given (a label that reads the same on every machine); run from the ini's directory.
    assert run.report["settings"]["agent"]["name"] == "agents/mine.py:replay"
    run.result.stdout.fnmatch_lines([f"gta: agent runs as: {pytester.path}/agents/mine.py:replay"])


def test_async_agent_in_the_pool(pytester, oracle_report):
    run = gta(
        pytester,
        *RUN,
        "--gta-concurrency=4",
        f"--gta-agent={AGENTS}:replay_async",
    )
    assert_oracle_numbers(run, oracle_report)


def test_command_agent_over_mcp_with_xdist(pytester, oracle_report, agent_env):
    run = gta(
        pytester,
        *RUN,
        command("replay"),
        *XDIST,
    )
    assert_oracle_numbers(run, oracle_report)
    assert run.report["cases"][0]["agent"]["exit_status"] == 0


def test_model_traffic_goes_through_the_proxy(pytester, sample_dataset):
    with OracleServer(sample_dataset) as server:
        run = gta(
            pytester,
            SAMPLE_DATA,
            "--gta-model=openai/oracle-http",
            f"--gta-base-url={server.url}",
            "--gta-cache=off",
            "--gta-ids=0,1",
            FAST_SIM,
            REPLAY_TOOLS,
            AGENT_ENV,
            f"--gta-agent={AGENTS}:ask_model",
            # In process, pytester's module snapshots can leave the proxy's upstream_of holding
            # an older import of the adapter's class than the run builds: a fresh interpreter.
            fresh_process=True,
        )
        assert server.calls == 2
    assert run.ret == 0, run.output[-3000:]
    for case in run.report["cases"]:
        (exchange,) = case["exchanges"]
        assert exchange["api"] == "chat.completions"
        assert exchange["status"] == 200
        assert "Thought" in exchange["reply"]
        assert case["properties"]["gta_model_calls"] == 1
        assert case["properties"]["gta_tokens_in"] > 0
        # The agent's model time is its requests' through the proxy.
        assert case["properties"]["gta_model_s"] == pytest.approx(exchange["duration"], abs=1e-6)


def test_a_model_in_this_process_answers_through_the_proxy(pytester, agent_env):
    """The oracle has no HTTP endpoint: the proxy answers for it, by the case and its turn, and
    records the exchange as it records a forwarded one; a command's {model_url} is its URL."""
    run = gta(
        pytester,
        *RUN,
        "--gta-ids=0,1",
        command("ask-model", "{model_url}"),
    )
    assert run.ret == 0, run.output[-3000:]
    for case in run.report["cases"]:
        (exchange,) = case["exchanges"]
        assert exchange["api"] == "chat.completions"
        assert exchange["status"] == 200
        assert exchange["request"]["model"] == "oracle"
        # The oracle's first end-to-end turn: the reference's first call, as ReAct text.
        assert "Action:" in exchange["reply"]
        assert exchange["usage"]["calls"] == 1
        assert case["properties"]["gta_model_calls"] == 1


def test_command_agent_answer_file(pytester, agent_env):
    run = gta(
        pytester,
        *RUN,
        "--gta-ids=0,1",
        command("answer-file"),
        "--gta-report-html=report.html",
    )
    assert run.ret == 0, run.output[-3000:]
    for case in run.report["cases"]:
        assert "chatter" not in case["agent"]["answer"]
        assert case["agent"]["answer"] == case["steps"][-1]["content"]
        assert case["agent"]["exit_status"] == 0
    page = (pytester.path / "report.html").read_text()
    assert "The agent's turns beside the reference chain" in page
    assert "2 tool call(s) logged by the server" in page


def test_hostile_python_agents(pytester):
    """Serial only: hostile agents across xdist workers are test_hostile_command_agents[xdist]."""
    started = time.monotonic()
    run = gta(
        pytester,
        *RUN,
        "--gta-ids=0,1,2,3,4,5,6",
        "--gta-max-turns=5",
        "--gta-agent-timeout=8",
        f"--gta-agent={AGENTS}:hostile",
    )
    assert time.monotonic() - started < 120  # bound: catches a hang (agent timeouts)
    cases = by_id(run.report)
    assert cases["e2e-0"]["outcome"] == "passed"
    # An unknown tool is the agent's mistake, logged and scored; the reference calls still count.
    unknown = cases["e2e-1"]["tool_log"][0]
    assert unknown["name"] == "DeleteEverything"
    assert unknown["error"] is not None
    assert cases["e2e-1"]["outcome"] in ("passed", "failed")
    # Malformed and huge arguments: argument errors, kept short in the log.
    malformed = cases["e2e-2"]["tool_log"]
    assert malformed
    assert all(call["error"]["type"] == "ARGS_ERROR" for call in malformed)
    assert all(len(str(call["arguments"])) < 100_000 for call in malformed)
    # A flood stops at --gta-max-turns calls; the agent is told so and the case is scored.
    assert len(cases["e2e-3"]["tool_log"]) == 5
    assert "limit of 5 tool calls" in cases["e2e-3"]["agent"]["answer"]
    assert cases["e2e-3"]["outcome"] == "failed"
    # A crash: the case errors with the agent's traceback, redacted.
    assert cases["e2e-4"]["outcome"] == "error"
    assert "agent error" in cases["e2e-4"]["message"]
    assert "raised RuntimeError: agent broke" in cases["e2e-4"]["message"]
    # No answer in time: the case errors, the run goes on.
    assert cases["e2e-5"]["outcome"] == "error"
    assert "no answer within 8 s" in cases["e2e-5"]["message"]
    # No text at all.
    assert cases["e2e-6"]["outcome"] == "error"
    assert "returned NoneType" in cases["e2e-6"]["message"]


@pytest.mark.parametrize("xdist", [(), XDIST], ids=["serial", "xdist"])
def test_hostile_command_agents(pytester, agent_env, monkeypatch, xdist):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    marker = f"gta-test-hostile-{os.getpid()}-{len(xdist)}"
    started = time.monotonic()
    run = gta(
        pytester,
        *RUN,
        # Query 5 hangs: test_hanging_command_agent_is_stopped, with a short timeout of its own.
        "--gta-ids=0,1,2,3,4,6,7,8,9",
        "--gta-max-turns=5",
        # Generous: under CI load (two busy cores) starting Python and importing the MCP SDK
        # has taken over 20 s, and the thief waits for its victim (maybe on the other worker).
        # No agent here hangs, so the limit costs nothing when the machine is idle.
        "--gta-agent-timeout=120",
        command("hostile", marker),
        "--junitxml=junit.xml",
        *xdist,
        fresh_process=True,
    )
    assert time.monotonic() - started < 400  # bound: catches a hang (agent timeouts)
    cases = by_id(run.report)
    assert len(cases["e2e-0"]["tool_log"]) == 2
    # The cheat read no answer, no environment with a key, reached no other port.
    assert cases["e2e-9"]["agent"]["answer"] == "{}"
    assert cases["e2e-9"]["tool_log"] == []
    assert cases["e2e-1"]["tool_log"][0]["name"] == "DeleteEverything"
    assert cases["e2e-1"]["tool_log"][0]["error"] is not None
    assert all(c["error"]["type"] == "ARGS_ERROR" for c in cases["e2e-2"]["tool_log"])
    assert len(cases["e2e-3"]["tool_log"]) == 5
    assert cases["e2e-3"]["outcome"] == "failed"
    assert cases["e2e-4"]["outcome"] == "error"
    assert "exited with status 3" in cases["e2e-4"]["message"]
    assert "its stderr ends: ValueError: the agent broke" in cases["e2e-4"]["message"]
    # Binary output is an answer of replacement characters: a scored mistake.
    assert cases["e2e-6"]["outcome"] == "failed"
    assert "\ufffd" in cases["e2e-6"]["agent"]["answer"]
    # The child and the double-forked grandchild left behind are gone with the case's sandbox.
    assert processes_named(f"{marker}-e2e-7") == []
    # The environment: an allow-list, no key of ours (the SDKs' key is the proxy's placeholder).
    environment = cases["e2e-8"]["agent"]["answer"]
    assert SECRET not in environment
    assert f'"OPENAI_API_KEY": "{PROXY_KEY}"' in environment
    assert '"HOME"' in environment
    assert "GTA_MCP_URL" in environment
    leaks = [
        str(path)
        for path in pytester.path.rglob("*")
        if path.is_file() and SECRET.encode() in path.read_bytes()
    ]
    assert leaks == []
    assert 'name="gta_agent"' in (pytester.path / "junit.xml").read_text()


def test_hanging_command_agent_is_stopped(pytester, agent_env):
    """No answer in time: the case errors, and the agent's whole sandbox is stopped."""
    marker = f"gta-test-hang-{os.getpid()}"
    run = gta(
        pytester,
        *RUN,
        "--gta-ids=5",
        "--gta-agent-timeout=3",
        command("hostile", marker),
        fresh_process=True,
    )
    (case,) = run.report["cases"]
    assert case["outcome"] == "error"
    assert "no answer within 3 s" in case["message"]
    assert "its sandbox was stopped" in case["message"]
    assert processes_named(marker) == []


@pytest.mark.parametrize("in_process", [False, True], ids=["sandboxed", "in-process"])
def test_secret_of_a_crashing_python_agent_is_redacted(pytester, monkeypatch, in_process):
    """Sandboxed, the agent never gets the key; in-process it can, and its message is redacted."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    run = gta(
        pytester,
        *RUN,
        "--gta-ids=0",
        f"--gta-agent={AGENTS}:crash",
        "--junitxml=junit.xml",
        *(["--gta-agent-in-process"] if in_process else []),
    )
    case = run.report["cases"][0]
    assert case["outcome"] == "error"
    if in_process:
        assert "[redacted $OPENAI_API_KEY]" in case["message"]
    else:
        assert "raised RuntimeError: agent broke; key" in case["message"]
        assert "redacted" not in case["message"]
    for path in pytester.path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in run.output


# -- usage errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            [f"--gta-agent={AGENTS}:replay", "--gta-mode=step"],
            "*--gta-agent runs in end-to-end mode only: step mode replays the reference prefix*"
            "--gta-mode=e2e*",
        ),
        (
            [command("replay"), "--gta-mode=step,e2e"],
            "*--gta-agent-command runs in end-to-end mode only*",
        ),
        (
            [f"--gta-agent={AGENTS}:replay", command("replay")],
            "*--gta-agent and --gta-agent-command both name the agent under test; give one*",
        ),
        (["--gta-agent=nope"], "*--gta-agent=nope: give MODULE:CALLABLE*"),
        (
            ["--gta-agent=no_such_module_xyz:run"],
            "*--gta-agent=no_such_module_xyz:run: cannot import no_such_module_xyz: "
            "ModuleNotFoundError: No module named 'no_such_module_xyz'*",
        ),
        ([f"--gta-agent={AGENTS}:missing"], "*has no attribute 'missing'*"),
        ([f"--gta-agent={AGENTS}:NOT_CALLABLE"], "*is a str, not callable*"),
        (
            ["--gta-agent-command=run {query}"],
            "*unknown placeholder {query}*the template may use {mcp_url}*",
        ),
        (["--gta-agent-env=A,B-C"], "*--gta-agent-env=A,B-C: give environment variable names*"),
        (["--gta-agent-timeout=0"], "*--gta-agent-timeout*"),
    ],
)
def test_usage_errors(pytester, args, expected):
    run = gta(pytester, *RUN, *args, report=None)
    assert run.ret == pytest.ExitCode.USAGE_ERROR, run.output[-2000:]
    run.result.stderr.fnmatch_lines([expected])


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        ([f"--gta-agent={AGENTS}:replay"], "--gta-agent"),
        ([command("replay")], "--gta-agent-command"),
    ],
)
def test_an_agent_without_a_model_is_a_usage_error_saying_what_to_give(pytester, args, flag):
    run = gta(pytester, "--gta-data=sample", *args, report=None)
    assert run.ret == pytest.ExitCode.USAGE_ERROR, run.output[-2000:]  # was: 5, no tests
    run.result.stderr.fnmatch_lines([f"*{flag} needs --gta-model: the model that selects*"])


def test_an_agent_in_the_ini_file_alone_leaves_other_test_runs_alone(pytester):
    """A project's default agent (ini) is for the runs that name a model; others run as ever."""
    pytester.makeini(f"[pytest]\ngta_agent = {AGENTS}:replay\n")
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)


# -- units ------------------------------------------------------------------------------------


class _NoTools:
    def schemas(self) -> list[dict[str, Any]]:
        return []


def test_agent_environment_is_an_allow_list(tmp_path):
    task = AgentTask(
        case_id="e2e-0",
        query_id="0",
        text="q",
        image_paths=(),
        tool_schemas=(),
        mcp_url="http://127.0.0.1:1/s/mcp",
        tools=ToolClient(_NoTools()),  # type: ignore[arg-type]
        model="m",
        model_url="http://127.0.0.1:2/s/v1",
    )
    environ = {
        "PATH": "/bin",
        "OPENAI_API_KEY": SECRET,
        "AWS_SECRET_ACCESS_KEY": "x" * 20,
        "LANG": "C",
        "MINE": "1",
    }
    env = agent_environment(task, ("MINE",), environ)
    assert env["OPENAI_API_KEY"] == "gta-proxy"
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:2/s/v1"
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert env["MINE"] == "1"
    assert "HOME" not in env  # the launcher's: the sandbox's scratch directory
    assert env["GTA_MCP_URL"] == task.mcp_url
    assert "ANTHROPIC_BASE_URL" not in env


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_no_agent_outlives_pytest(tmp_path, signum):
    """Stopping pytest (SIGTERM, Ctrl-C, or a kill it cannot handle) stops the agent's sandbox."""
    marker = f"gta-test-outlive-{os.getpid()}-{signum}"
    args = [*RUN, "--gta-ids=0"]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            *NO_HYPOTHESIS,
            "-p",
            "no:cacheprovider",
            *args,
            command("hang", marker),
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=default_sigint,  # a Ctrl-C test, even where this run ignores SIGINT
    )
    try:
        deadline = time.monotonic() + 60
        while len(processes_named(marker)) < 2:
            assert time.monotonic() < deadline, "the agent never started"  # bound: catches a hang
            time.sleep(0.1)
        process.send_signal(signum)
        process.wait(30)
    finally:
        process.kill()
    deadline = time.monotonic() + 10
    while processes_named(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_named(marker) == []


@given(st.binary(max_size=4096))
def test_any_output_decodes_to_writable_text(data):
    text = decode_output(data)
    assert "\x00" not in text
    text.encode("utf-8")  # no lone surrogate: every writer accepts it
    if b"\x00" not in data:
        assert text == data.decode("utf-8", errors="replace")


@given(st.lists(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True), min_size=1))
def test_agent_env_names_round_trip(names):
    assert parse_agent_env(" , ".join(names)) == tuple(dict.fromkeys(names))


@given(st.text(max_size=60))
def test_agent_templates_are_checked_or_refused(template):
    refused: list[str] = []
    try:
        words = agent_words(template)
    except pytest.UsageError as exc:
        refused.append(str(exc))
    if refused:
        assert refused[0].startswith("pytest-gta: --gta-agent-command=")
    else:
        values = dict.fromkeys(AGENT_PLACEHOLDERS, "x")
        assert [w.format(**values) for w in words]  # what the runner does cannot fail
