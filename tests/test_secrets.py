"""No secret reaches model-written code or any artifact of a run, whatever path it takes.

A real run (a separate pytest process, from a virtualenv under /tmp) against a real HTTP server
speaking the OpenAI API, with the real ``local`` tools: the model first gets a retryable error
whose body echoes the API key, then writes Solver code that reads ``os.environ``, then answers
with the key itself (as a model that saw it somewhere would). Afterwards every file the run
wrote (JUnit XML, the JSON, markdown and HTML reports, pytest-html's page, the response cache,
recorded cassettes, the tools' output files, pytest's cache) and its terminal output are
searched for the key. Each
sandbox mode runs it: bubblewrap, the rlimit fallback, and ``auto`` with a bubblewrap that is
installed but broken.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import FAST_SIM
from tests.scripted_server import ScriptedServer, Step, chat_completion
from tests.test_sandbox import _bubblewrap_or_skip, tmp_venv

pytestmark = pytest.mark.slow

SECRETS = {
    "OPENAI_API_KEY": "sk-leak-test-7c1e9a4b2d8f",
    "HF_TOKEN": "hf_leaktest_5a6b7c8d9e0f",
    "SERPER_API_KEY": "serper-leak-3141592653",
}
LEAK_CODE = (
    "import os\\ndef solution():\\n"
    "    return os.environ.get('OPENAI_API_KEY', 'absent') + ' ' + ' '.join(sorted(os.environ))"
)


def script(server: ScriptedServer) -> None:
    key = SECRETS["OPENAI_API_KEY"]
    server.then(
        Step({"error": {"message": f"upstream echoed your key {key}"}}, status=503),
        Step(
            chat_completion(
                'Thought: read the environment\nAction: Solver\nAction Input: {"command": "'
                + LEAK_CODE
                + '"}'
            )
        ),
        Step(chat_completion(f"Thought: done\nFinal Answer: the key is {key}")),
    )


def files_holding(root: Path, skip: Path, values: list[str]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if not path.is_file() or skip in path.parents:
            continue
        data = path.read_bytes()
        found += [f"{path.relative_to(root)}: {v[:6]}..." for v in values if v.encode() in data]
    return found


@pytest.mark.parametrize("mode", ["bubblewrap", "rlimit", "auto-broken-bwrap"])
def test_no_secret_in_any_artifact(pytester, monkeypatch, tmp_path_factory, mode):
    if mode == "bubblewrap":
        _bubblewrap_or_skip()
    venv = tmp_venv(tmp_path_factory.mktemp("venv-under-tmp"))
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    sandbox_option = mode
    if mode == "auto-broken-bwrap":
        shims = pytester.mkdir("shims")
        (shims / "bwrap").write_text("#!/bin/sh\nexit 1\n")
        (shims / "bwrap").chmod(0o755)
        monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
        sandbox_option = "auto"
    with ScriptedServer(models=["scripted"]) as server:
        script(server)
        result = pytester.run(
            str(venv),
            "-m",
            "pytest",
            "--gta-model=openai/scripted",
            f"--gta-base-url={server.url}",
            "--gta-data=sample",
            FAST_SIM,
            "--gta-mode=e2e",
            "--gta-ids=1",
            "--gta-tools=local,replay",
            f"--gta-sandbox={sandbox_option}",
            "--gta-cache-dir=cache",
            "--gta-tool-cassettes=cassettes",
            "--gta-tool-record=new",
            "--gta-retries=2",
            "--junitxml=gta.xml",
            "--gta-report=gta.json",
            "--gta-report-md=gta.md",
            "--gta-report-html=gta.html",
            "--html=pytest-html.html",
            "--self-contained-html",
            "--basetemp=basetemp",
            "-rA",
            "-o",
            "log_level=INFO",
            timeout=300,
        )
        posted = server.posted()
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output[-3000:]
    report = json.loads((pytester.path / "gta.json").read_text())
    assert report["outcomes"]["failed"] == 1
    # The sandbox never saw the key: the observation sent back to the model says so.
    observation = posted[-1]["messages"][-1]["content"]
    assert observation.startswith("Response:absent HOME LANG MPLCONFIGDIR PATH"), observation
    expected = "rlimit" if mode != "bubblewrap" else "bubblewrap"
    assert f"model-written code (local) runs in {expected}" in output
    assert report["settings"]["tool_backends"]["local"]["sandbox"] == expected
    # The key the model wrote is redacted everywhere it went.
    assert "[redacted $OPENAI_API_KEY]" in json.dumps(report["cases"][0]["replies"])
    assert "[redacted $OPENAI_API_KEY]" in output
    assert list((pytester.path / "cache").rglob("*.json")), "the cache was written"
    # Both HTML reports show the case, its reply redacted (the drill-down and pytest-html's extra).
    for page in ("gta.html", "pytest-html.html"):
        assert "[redacted $OPENAI_API_KEY]" in (pytester.path / page).read_text(), page
    assert list((pytester.path / "cassettes").rglob("*.json")), "the cassette was recorded"
    values = list(SECRETS.values())
    assert not [v for v in values if v in output], "a secret reached the terminal"
    leaks = files_holding(pytester.path, venv.parent.parent, values)
    assert not leaks, f"secrets in files the run wrote: {leaks}"
