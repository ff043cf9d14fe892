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

from tests.helpers.gta_run import FAST_SIM, NO_HYPOTHESIS, SAMPLE_DATA
from tests.helpers.optional import require
from tests.helpers.scripted_server import ScriptedServer, Step, chat_completion
from tests.test_sandbox import tmp_venv

pytestmark = pytest.mark.slow

SECRETS = {
    "OPENAI_API_KEY": "sk-leak-test-7c1e9a4b2d8f",
    "HF_TOKEN": "hf_leaktest_5a6b7c8d9e0f",
    "SERPER_API_KEY": "serper-leak-3141592653",
}
#: Options that make a run write every artifact it can: the cache, cassettes, each report, logs.
EVERY_ARTIFACT = (
    "--gta-cache-dir=cache",
    "--gta-tool-cassettes=cassettes",
    "--gta-tool-record=new",
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
)
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
        require("bubblewrap")
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
            *NO_HYPOTHESIS,
            "--gta-model=openai/scripted",
            f"--gta-base-url={server.url}",
            SAMPLE_DATA,
            FAST_SIM,
            "--gta-mode=e2e",
            "--gta-ids=1",
            "--gta-tools=local,replay",
            f"--gta-sandbox={sandbox_option}",
            "--gta-retries=2",
            *EVERY_ARTIFACT,
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


# -- credentials given outside the known variables ---------------------------------------------

#: Each credential a run can be handed besides the known variables, with a distinct value.
GIVEN = {
    "url_password": "urlpw-5e1f9a7c3b",  # in --gta-base-url, http://gta:PASS@127.0.0.1/v1
    "header": "hdr-key-8d2c6b4a1e",  # --gta-model-args headers, X-Api-Key
    "gateway_key": "gw-key-2f7e9c1a5d",  # in GATEWAY_ACCESS, named by api_key_env
    "aws": "aws-secret-0b9d8c7e6f",  # AWS_SECRET_ACCESS_KEY: a name no list holds
    "service": "svc-key-4a3b2c1d0e",  # MY_SERVICE_KEY
    "passwd": "db-passwd-9f8e7d6c5b",  # DB_PASSWD
}


def echoing_server() -> ScriptedServer:
    """A model endpoint that quotes back every credential it can see or was sent.

    The first request gets a 401 whose body echoes the request's headers (as some gateways'
    error pages do); later ones call the Calculator with the unknown-named variables' values,
    then answer with every credential, as a model that saw them would.
    """
    import json as json_

    state = {"posted": 0}

    def answer(record) -> Step:
        state["posted"] += 1
        if state["posted"] == 1:
            wanted = ("authorization", "x-api-key")
            sent = json_.dumps({k: v for k, v in record.headers.items() if k.lower() in wanted})
            return Step({"error": {"message": f"invalid credentials: you sent {sent}"}}, 401)
        messages = record.json["messages"]
        if messages[-1]["role"] == "user":
            expression = f"'{GIVEN['aws']}' + ' ' + '{GIVEN['service']}'"
            call = json_.dumps({"expression": expression})
            return Step(chat_completion(f"Thought: t\nAction: Calculator\nAction Input: {call}"))
        return Step(chat_completion("Thought: done\nFinal Answer: " + " ".join(GIVEN.values())))

    return ScriptedServer(models=["scripted"], default=answer)


def test_credentials_from_options_reach_no_artifact(pytester, monkeypatch, tmp_path_factory):
    venv = tmp_venv(tmp_path_factory.mktemp("venv-under-tmp"))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GATEWAY_ACCESS", GIVEN["gateway_key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", GIVEN["aws"])
    monkeypatch.setenv("MY_SERVICE_KEY", GIVEN["service"])
    monkeypatch.setenv("DB_PASSWD", GIVEN["passwd"])
    model_args = json.dumps(
        {"api_key_env": "GATEWAY_ACCESS", "headers": {"X-Api-Key": GIVEN["header"]}}
    )
    with echoing_server() as server:
        url = server.url.replace("http://", f"http://gta:{GIVEN['url_password']}@")
        result = pytester.run(
            str(venv),
            "-m",
            "pytest",
            *NO_HYPOTHESIS,
            "--gta-model=openai/scripted",
            f"--gta-base-url={url}",
            f"--gta-model-args={model_args}",
            SAMPLE_DATA,
            FAST_SIM,
            "--gta-mode=e2e",
            "--gta-ids=0,9",
            "--gta-concurrency=1",
            "--gta-tools=local,replay",
            *EVERY_ARTIFACT,
            timeout=300,
        )
        received = list(server.requests)
    output = result.stdout.str() + result.stderr.str()
    # What the endpoint was sent, so the echoes below are real: the header, and the URL's
    # credentials as Basic auth (httpx puts them in place of the SDK's Bearer key).
    sent = json.dumps([r.headers for r in received])
    assert GIVEN["header"] in sent, sent[:2000]
    assert "Basic " in sent, sent[:2000]
    report = json.loads((pytester.path / "gta.json").read_text())
    assert report["outcomes"]["error"] == 1, output[-3000:]
    assert report["outcomes"]["failed"] == 1, output[-3000:]
    generation = report["settings"]["generation"]
    masked = url.replace(GIVEN["url_password"], "***")
    assert generation["base_url"] == masked
    assert generation["model_args"]["headers"] == {"X-Api-Key": "***"}
    assert f"endpoint {masked}" in output
    errored = next(c for c in report["cases"] if c["outcome"] == "error")
    assert "HTTP 401" in errored["message"]
    assert "[redacted URL password]" in errored["message"], errored["message"]
    assert "[redacted header X-Api-Key]" in errored["message"], errored["message"]
    answered = json.dumps(next(c for c in report["cases"] if c["outcome"] == "failed"))
    labels = ("$GATEWAY_ACCESS", "$AWS_SECRET_ACCESS_KEY", "$MY_SERVICE_KEY", "$DB_PASSWD")
    for label in (*labels, "URL password", "header X-Api-Key"):
        assert f"[redacted {label}]" in answered, label
    assert list((pytester.path / "cache").rglob("*.json")), "the cache was written"
    assert list((pytester.path / "cassettes").rglob("*.json")), "the cassette was recorded"
    values = list(GIVEN.values())
    assert not [v[:8] for v in values if v in output], "a credential reached the terminal"
    leaks = files_holding(pytester.path, venv.parent.parent, values)
    assert not leaks, f"credentials in files the run wrote: {leaks}"
