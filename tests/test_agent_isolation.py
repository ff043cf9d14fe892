"""The agent under test's sandbox (issue 32): a cheating agent gets nothing, and the report says so.

Hostile agents (a program and a callable) run in every sandbox mode, as root and as an
unprivileged user: they try the run's dataset, the bundled sample, other processes'
environments, a loopback port that is neither the MCP server nor the proxy, and to leave
processes behind. Black-box runs check what the header, the report and the page say, the
isolation a run cannot have (in-process, open network, no sandbox at all), and
``--gta-require-isolation``. The proxy's scrubbing of its upstream's key from 200 replies and
the services' refusal of a sandboxed case's URL outside its bridge are checked as units.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gta import peers
from pytest_gta.proxy.forward import REDACTED, Scrubber
from tests.helpers.as_user import run_json
from tests.helpers.gta_run import FAST_SIM, ORACLE, SAMPLE_DATA, gta
from tests.helpers.optional import require
from tests.helpers.paths import HELPERS
from tests.helpers.processes import processes_named
from tests.helpers.references import AGENT_ENV
from tool_backends.agent_jail import WARM
from tool_backends.sandbox_isolation import INSTALL_BUBBLEWRAP

PROBE = HELPERS / "agent_jail_probe.py"
AGENTS = HELPERS / "gta_agents.py"
RUN = (ORACLE, SAMPLE_DATA, FAST_SIM, "--gta-tools=replay", AGENT_ENV, "--gta-ids=0")
SECRET = "sk-isolation-test-9d8c7b6a5f4e3d2c"


@pytest.fixture(scope="module")
def readable_dataset():
    """A dataset directory any user can read: only the sandbox may hide it."""
    root = Path(tempfile.mkdtemp(prefix="gta-jail-data-"))
    root.chmod(0o755)
    (root / "dataset.json").write_text(json.dumps({"0": {"gt_answer": "only-in-the-data"}}))
    (root / "dataset.json").chmod(0o644)
    yield root
    shutil.rmtree(root)


def run_probe(mode: str, data: Path, *, user: bool) -> dict:
    """Run tests/helpers/agent_jail_probe.py (the key in its environment); what it printed."""
    argv = [sys.executable, str(PROBE), mode, str(data)]
    return run_json(argv, user=user, env={"OPENAI_API_KEY": SECRET})


@pytest.mark.slow
@pytest.mark.parametrize("user", [False, True], ids=["root", "user"])
@pytest.mark.parametrize("mode", ["bubblewrap", "rlimit"])
def test_cheating_agents_get_nothing(mode, user, readable_dataset):
    if mode == "bubblewrap":
        require("bubblewrap")
    result = run_probe(mode, readable_dataset, user=user)
    if result["mechanism"] == "plain":
        pytest.skip(f"this machine builds no sandbox for {mode} as this user")
    assert result["mechanism"] == ("bubblewrap" if mode == "bubblewrap" else "namespaces")
    assert result["gaps"] == []
    # Each case was forked from the run's warm sandbox, in both mechanisms and as both users.
    assert result["attempts"] == []
    assert WARM in result["guarantees"]
    findings = {f["check"]: f for f in result["findings"]}
    assert all(f["held"] for f in findings.values()), findings
    assert "leave a process running after the case" in findings
    assert any(c.startswith("read ") and c.endswith("dataset.json") for c in findings)
    # The program and the callable read nothing, reached nothing, and left nothing running.
    assert result["command_status"] == 0, result["command_stderr"]
    assert json.loads(result["command"]) == {}
    assert json.loads(result["callable"]["result"]["answer"]) == {}
    assert processes_named(result["marker"]) == []
    assert SECRET not in json.dumps(result)


@pytest.mark.slow
def test_the_report_proves_isolation(pytester):
    run = gta(pytester, *RUN, f"--gta-agent={AGENTS}:replay", "--gta-report-html=page.html")
    assert run.ret == 0, run.output[-3000:]
    isolation = run.report["settings"]["agent"]["isolation"]
    assert isolation["isolated"] is True
    assert isolation["mechanism"] in ("bubblewrap", "namespaces")
    assert isolation["network"] == "case"
    assert isolation["gaps"] == []
    assert len(isolation["probe"]) >= 7
    assert all(f["held"] for f in isolation["probe"])
    run.result.stdout.fnmatch_lines(
        [
            "gta: agent sandbox: bubblewrap*",
            "gta: agent sandbox probe: * of * attempts of a cheating agent held",
            "agent sandbox: bubblewrap, network case",
        ]
    )
    page = (pytester.path / "page.html").read_text()
    assert "agent sandbox probe" in page
    assert "NOT isolated" not in page


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "gap"),
    [
        (["--gta-agent-in-process"], "the callable runs inside pytest"),
        (["--gta-agent-network=open"], "network open to the host"),
    ],
    ids=["in-process", "open-network"],
)
def test_a_run_without_isolation_says_so_and_can_be_refused(pytester, args, gap):
    run = gta(pytester, *RUN, f"--gta-agent={AGENTS}:replay", *args)
    assert run.ret == 0, run.output[-3000:]
    isolation = run.report["settings"]["agent"]["isolation"]
    assert isolation["isolated"] is False
    assert any(g.startswith(gap) for g in isolation["gaps"])
    assert "gta: WARNING: the agent under test is NOT isolated" in run.output
    refused = gta(
        pytester,
        *RUN,
        f"--gta-agent={AGENTS}:replay",
        *args,
        "--gta-require-isolation",
        report=None,
    )
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.result.stderr.fnmatch_lines([f"*--gta-require-isolation: the agent under test*{gap}*"])


@pytest.mark.slow
def test_a_machine_without_a_sandbox_says_so(pytester, tmp_path):
    """No bubblewrap, no unshare on PATH: the agent runs plain, and the run says what is open."""
    bare = tmp_path / "bin"
    bare.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", str(bare))
        run = gta(
            pytester,
            *RUN,
            f"--gta-agent={AGENTS}:replay",
            "--gta-report-html=page.html",
            fresh_process=True,
        )
        refused = gta(
            pytester,
            *RUN,
            f"--gta-agent={AGENTS}:replay",
            "--gta-require-isolation",
            report=None,
            fresh_process=True,
        )
    assert run.ret == 0, run.output[-3000:]
    isolation = run.report["settings"]["agent"]["isolation"]
    assert isolation["mechanism"] == "plain"
    assert isolation["isolated"] is False
    assert any("files your user can read" in g for g in isolation["gaps"])
    # Why: each mechanism tried, and what it said (the header, the report, the page).
    assert isolation["attempts"] == [
        f"bubblewrap: not on PATH; {INSTALL_BUBBLEWRAP}",
        "namespaces: unshare not on PATH (util-linux)",
    ]
    assert "gta: agent sandbox not built: bubblewrap: not on PATH; install bubblewrap" in run.output
    assert "NOT isolated (tried: bubblewrap: not on PATH" in run.output
    page = (pytester.path / "page.html").read_text()
    assert "agent sandbox not built" in page
    assert "unshare not on PATH (util-linux)" in page
    failed = [f["check"] for f in isolation["probe"] if not f["held"]]
    assert any("dataset.json" in check for check in failed)
    assert "NOT isolated" in run.output
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.result.stderr.fnmatch_lines(
        ["*--gta-require-isolation: *(plain (tried: bubblewrap: not on PATH*unshare not on PATH*"]
    )


# -- units ------------------------------------------------------------------------------------


@given(st.binary(max_size=300), st.lists(st.integers(1, 40), max_size=20))
def test_the_proxy_never_passes_its_key_on_however_a_stream_is_cut(noise, cuts):
    key = b"sk-upstream-real-key-1234567890"
    body = noise + key + noise[::-1] + key
    scrubber, out, at = Scrubber((key,)), b"", 0
    for cut in [*cuts, len(body)]:
        out += scrubber.feed(body[at : at + cut])
        at += cut
    out += scrubber.flush()
    assert key not in out
    assert out.count(REDACTED) >= 2
    assert Scrubber((key,)).whole(body) == out


def test_only_a_bridge_may_use_a_bridged_url():
    mcp, proxy = ("127.0.0.1", 41000), ("127.0.0.1", 42000)
    assert not peers.trusted(("127.0.0.1", 40000), mcp)
    peers.trust(40000, 41000)
    try:
        assert peers.trusted(("127.0.0.1", 40000), mcp)
        assert not peers.trusted(("127.0.0.1", 40000), proxy)
        assert not peers.trusted(("10.0.0.1", 40000), mcp)
        assert not peers.trusted(None, mcp)
        assert not peers.trusted(("127.0.0.1", 40000), None)
    finally:
        peers.forget(40000, 41000)
    assert not peers.trusted(("127.0.0.1", 40000), mcp)


def test_two_bridges_sharing_a_local_port_stay_trusted_apart():
    """Linux gives one ephemeral port to connections to different services at once.

    The last CI on record lost two langgraph cases to a 404 mid-case: one bridge's connection
    to the MCP server closed and forgot the port that another's connection to the model proxy
    still used. Here the kernel hands out the shared port for real.
    """
    services = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    mcp, proxy = (service.getsockname() for service in services)
    clients = [socket.socket() for _ in services]
    try:
        for client in clients:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        clients[0].bind(("127.0.0.1", 0))
        shared = clients[0].getsockname()[1]
        clients[1].bind(("127.0.0.1", shared))
        for client, service in zip(clients, (mcp, proxy), strict=True):
            client.connect(service)
            peers.trust(client.getsockname()[1], service[1])
        assert clients[1].getsockname()[1] == shared
        peers.forget(shared, mcp[1])
        assert peers.trusted(("127.0.0.1", shared), proxy)
        assert not peers.trusted(("127.0.0.1", shared), mcp)
        # the same connection counted twice (closed and back before its close was reported)
        peers.trust(shared, proxy[1])
        peers.forget(shared, proxy[1])
        assert peers.trusted(("127.0.0.1", shared), proxy)
    finally:
        peers.forget(shared, proxy[1])
        for sock in [*clients, *services]:
            sock.close()
    assert not peers.trusted(("127.0.0.1", shared), proxy)
