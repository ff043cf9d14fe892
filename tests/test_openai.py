"""The OpenAI adapter against a real HTTP server on 127.0.0.1, through the official SDK.

The server (tests/helpers/scripted_server.py) answers from a script and records every request, so
these tests check the exact requests we send (ReAct and native, images, stop words), the retry
policy (429 with Retry-After, 5xx, timeouts, a server dying mid-run), the response cache, usage
accounting and the budget, end to end through pytest.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from pytest_gta.errors import GtaInfrastructureError, GtaUsageError
from pytest_gta.models import chat
from pytest_gta.models.base import ModelContext, make_model
from pytest_gta.models.generation import GenerationSettings, official_body, react_max_tokens
from pytest_gta.run import loops
from pytest_gta.types import CaseContext, ChatMessage, ModelRequest
from tests.helpers.gta_run import BOTH_MODES, FAST_SIM, SAMPLE_DATA, gta
from tests.helpers.retries import record_waits
from tests.helpers.run_context import play_e2e
from tests.helpers.scripted_server import ScriptedServer, Step, chat_completion

SECRET = "sk-test-secret-0123456789"
QWEN_HF = "Qwen/Qwen1.5-7B-Chat"


@pytest.fixture
def server():
    with ScriptedServer(models=[QWEN_HF, "some-other-model"]) as running:
        yield running


@pytest.fixture(autouse=True)
def _fast_backoff(monkeypatch):
    monkeypatch.setattr(chat, "BACKOFF_BASE", 0.01)


def adapter(sample_dataset, raw: str = "qwen1.5-7b", **settings):
    context = ModelContext(
        dataset=sample_dataset,
        modes=("step", "e2e"),
        invocation_dir=Path.cwd(),
        generation=GenerationSettings(**settings),
    )
    return make_model(raw, context)


def one_request(text: str) -> ModelRequest:
    return ModelRequest((ChatMessage("user", text),), (), CaseContext("0", "e2e", 0))


# -- exact requests --------------------------------------------------------------------------


def test_react_step_requests_are_the_official_ones(server, sample_dataset, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = adapter(sample_dataset, base_url=server.url)
    assert model.served == QWEN_HF  # detected from /v1/models among two served models
    query = sample_dataset["0"]
    loops.run_step(sample_dataset, query, model)
    expected = [
        official_body(
            QWEN_HF,
            request.messages,
            react_max_tokens(QWEN_HF, request.messages, 512),
            0.0,
            "<|im_end|>",
        )
        for request, _ in loops.step_requests(sample_dataset, query)
    ]
    assert server.posted() == expected
    # Byte for byte what OpenCompass posts: requests.post(url, data=json.dumps(data)).
    assert [r.raw for r in server.requests] == [json.dumps(b).encode() for b in expected]
    assert server.requests[0].raw.startswith(
        b'{"model": "Qwen/Qwen1.5-7B-Chat", "messages": [{"content": "You are a'
    )
    assert server.requests[0].headers["content-type"] == "application/json"
    assert server.requests[0].headers["authorization"] == "Bearer EMPTY"
    assert [m["role"] for m in expected[0]["messages"]] == ["system", "system", "user"]


def test_prompt_that_fills_the_window_sends_nothing(server, sample_dataset):
    model = adapter(sample_dataset, base_url=server.url)
    output = model.generate(one_request(" a" * 4000))
    assert output.text == ""
    assert server.posted() == []


def test_stop_words_temperature_seed_and_extra_args(server, sample_dataset):
    model = adapter(
        sample_dataset,
        "openai/my-finetune",
        base_url=server.url,
        temperature=0.7,
        seed=11,
        model_args={"stop": ["</s>", "Observation:"], "top_p": 0.9},
    )
    model.generate(one_request("hi"))
    body = server.posted()[0]
    assert body["model"] == "my-finetune"  # an explicit name is sent as is, no detection
    assert body["stop"] == ["</s>", "Observation:"]
    assert body["temperature"] == 0.7
    assert body["seed"] == 11
    assert body["top_p"] == 0.9
    plain = adapter(sample_dataset, "openai/my-finetune", base_url=server.url)
    plain.generate(one_request("hi"))
    assert server.posted()[1]["stop"] is None


def test_native_protocol_sends_tools_and_images(server, sample_dataset, sample_root):
    image = f"{sample_root}/image/image_0.jpg"
    call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "OCR", "arguments": json.dumps({"image": image})},
    }
    server.then(Step(chat_completion("", tool_calls=[call])), Step(chat_completion("9.24")))
    model = adapter(
        sample_dataset,
        base_url=server.url,
        protocol="native",
        model_args={"vision": True},
    )
    query = sample_dataset["0"]

    def run_tool(meta, arguments, converted):
        from pytest_gta.types import ToolResult

        return ToolResult.text("(10, 10, 50, 20) TOTAL 9.24")

    episode = play_e2e(sample_dataset, query, model, run_tool)
    first, second = server.posted()
    assert [t["function"]["name"] for t in first["tools"]] == [
        t.name for t in sample_dataset.tool_metas(query)
    ]
    assert first["tool_choice"] == "auto"
    assert first["tools"][0]["function"]["parameters"]["required"] == ["image"]
    files_message = first["messages"][1]
    parts = files_message["content"]
    assert parts[0]["type"] == "text"
    encoded = base64.b64encode(Path(image).read_bytes()).decode()
    assert parts[1]["image_url"]["url"] == f"data:image/jpeg;base64,{encoded}"
    assistant, tool = second["messages"][-2:]
    assert assistant["tool_calls"][0]["id"] == "call_abc"
    assert tool == {
        "role": "tool",
        "tool_call_id": "call_abc",
        "content": "(10, 10, 50, 20) TOTAL 9.24",
    }
    assert episode.predictions[0]["tool_calls"][0]["function"] == {
        "name": "OCR",
        "arguments": {"image": image},
    }
    assert episode.predictions[-1] == {"role": "assistant", "content": "9.24"}


def test_native_bad_json_arguments_are_an_argument_error(server, sample_dataset):
    bad = {"id": "c", "type": "function", "function": {"name": "OCR", "arguments": "{oops"}}
    server.then(Step(chat_completion("", tool_calls=[bad])), Step(chat_completion("done")))
    model = adapter(sample_dataset, base_url=server.url, protocol="native")
    episode = play_e2e(sample_dataset, sample_dataset["0"], model, lambda *a: None)
    assert episode.predictions[0]["error"]["type"] == "ARGS_ERROR"
    assert episode.predictions[0]["tool_calls"][0]["function"]["arguments"] == "{oops"


# -- robustness ------------------------------------------------------------------------------


@pytest.mark.slow  # 2 s in a full run: slow by cost (issue 39)
def test_429_honours_retry_after(server, sample_dataset, monkeypatch):
    server.then(Step({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "1"}))
    waits = record_waits(monkeypatch)
    model = adapter(sample_dataset, base_url=server.url)
    assert model.generate(one_request("hi")).text == "Final Answer: ok"
    assert waits == [1.0]  # the server's Retry-After, not the (shorter) backoff
    assert len(server.posted()) == 2


def test_5xx_are_retried_then_succeed(server, sample_dataset):
    server.then(Step({"error": {"message": "x"}}, status=500), Step({}, status=502))
    model = adapter(sample_dataset, base_url=server.url)
    assert model.generate(one_request("hi")).text == "Final Answer: ok"
    assert len(server.posted()) == 3


def test_persistent_5xx_is_an_infrastructure_error(server, sample_dataset):
    server.default = Step({"error": {"message": "overloaded"}}, status=503)
    model = adapter(sample_dataset, base_url=server.url, retries=2)
    with pytest.raises(GtaInfrastructureError, match=r"giving up after 3 attempts.*HTTP 503"):
        model.generate(one_request("hi"))
    assert len(server.posted()) == 3


def test_client_errors_are_not_retried(server, sample_dataset):
    server.default = Step({"error": {"message": "bad request: context too long"}}, status=400)
    model = adapter(sample_dataset, base_url=server.url)
    with pytest.raises(GtaInfrastructureError, match="HTTP 400: bad request: context too long"):
        model.generate(one_request("hi"))
    assert len(server.posted()) == 1


@pytest.mark.slow  # 3 s in a full run: slow by cost (issue 39)
def test_timeouts_are_retried_then_reported(server, sample_dataset):
    server.default = Step(chat_completion("late"), delay=1.5)
    model = adapter(sample_dataset, base_url=server.url, timeout=0.3, retries=1)
    with pytest.raises(GtaInfrastructureError, match="timed out"):
        model.generate(one_request("hi"))
    assert server.requests_seen(2) == 2  # the retry was sent
    assert len(server.posted()) == 2


def test_a_dropped_connection_is_retried(server, sample_dataset):
    server.then(Step(drop=True))
    model = adapter(sample_dataset, base_url=server.url)
    assert model.generate(one_request("hi")).text == "Final Answer: ok"
    assert len(server.posted()) == 2


def test_a_server_that_died_is_an_error(sample_dataset):
    with ScriptedServer(models=["m"]) as server:
        model = adapter(sample_dataset, base_url=server.url, retries=1)
    with pytest.raises(GtaInfrastructureError, match="could not be reached"):
        model.generate(one_request("hi"))


def test_missing_key_for_a_hosted_api_is_a_usage_error(sample_dataset, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(GtaUsageError, match="set OPENAI_API_KEY"):
        adapter(sample_dataset, "gpt-4o")
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    with pytest.raises(GtaUsageError, match="set MISTRAL_API_KEY"):
        adapter(sample_dataset, "mistral-large")


def test_unreachable_server_at_startup_says_what_to_do(sample_dataset):
    with ScriptedServer() as server:
        url = server.url
    with pytest.raises(GtaUsageError, match=r"cannot list the models served at .*--gta-served"):
        adapter(sample_dataset, base_url=url)


def test_ambiguous_served_models_ask_for_a_name(sample_dataset):
    with ScriptedServer(models=["a", "b"]) as server:
        with pytest.raises(GtaUsageError, match=r"lists a, b; .*--gta-served-model"):
            adapter(sample_dataset, base_url=server.url)
        chosen = adapter(sample_dataset, base_url=server.url, served_model="b")
        assert chosen.served == "b"


# -- end to end through pytest ----------------------------------------------------------------


def answer_everything(record):
    """Final answers right for the sample's objective queries 0 and 1."""
    body = json.loads(record.raw)
    query = body["messages"][-1]["content"]
    answer = "9.24" if "receipt" in json.dumps(body["messages"]) else "4"
    del query
    return Step(chat_completion(f"Thought: done\nFinal Answer: {answer}", prompt_tokens=100))


def run_gta(pytester, *args):
    return gta(
        pytester, SAMPLE_DATA, FAST_SIM, BOTH_MODES, "--gta-ids=0,1", *args, report="r.json"
    ).result


def test_catalog_name_against_a_compatible_server(pytester, server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    server.default = answer_everything
    args = ["--gta-model=qwen1.5-7b", f"--gta-base-url={server.url}", "--junitxml=gta.xml"]
    result = run_gta(pytester, *args)
    assert result.ret in (0, 1)
    outcomes = result.parseoutcomes()
    assert outcomes.get("error", 0) == 0
    report = json.loads((pytester.path / "r.json").read_text())
    paid = len(server.posted())
    assert paid > 0
    assert report["usage"]["calls"] == paid
    assert report["usage"]["cached_calls"] == 0
    assert report["usage"]["input_tokens"] == 100 * paid
    assert report["model"] == "qwen1.5-7b-chat"
    assert report["leaderboard"]["model"] == "qwen1.5-7b-chat"
    generation = report["settings"]["generation"]
    assert generation["served_model"] == QWEN_HF
    assert generation["endpoint"] == server.url
    assert generation["temperature"] == 0.0
    assert generation["stop"] == ["<|im_end|>"]
    xml = (pytester.path / "gta.xml").read_text()
    assert 'name="gta_tokens_in" value="' in xml
    assert 'name="gta_model_calls"' in xml
    text = result.stdout.str()
    assert "leaderboard 2024-07: qwen1.5-7b-chat [react]" in text
    assert f"usage: {paid} model calls (0 more from the cache)" in text
    for output in (text, xml, (pytester.path / "r.json").read_text()):
        assert SECRET not in output

    # The same run again: every answer comes from the cache, nothing is paid twice.
    again = run_gta(pytester, *args)
    assert again.ret == result.ret
    assert len(server.posted()) == paid
    second = json.loads((pytester.path / "r.json").read_text())
    assert second["usage"]["calls"] == 0
    assert second["usage"]["cached_calls"] == paid
    assert second["metrics"] == report["metrics"]


def test_cache_off_pays_again(pytester, server, monkeypatch):
    server.default = answer_everything
    args = ["--gta-model=openai/m", f"--gta-base-url={server.url}", "--gta-cache=off"]
    run_gta(pytester, *args)
    first = len(server.posted())
    run_gta(pytester, *args)
    assert len(server.posted()) == 2 * first


def test_endpoint_down_mid_run_gives_errors_not_failures(pytester, server):
    server.default = Step({"error": {"message": "upstream died"}}, status=500)
    result = run_gta(
        pytester,
        "--gta-model=openai/m",
        f"--gta-base-url={server.url}",
        "--gta-retries=1",
        "--gta-cache=off",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors", outcomes.get("error")) == 4
    assert "failed" not in outcomes
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["outcomes"]["error"] == 4
    assert "HTTP 500: upstream died" in report["cases"][0]["message"]


def test_token_budget_stops_the_session_with_a_partial_report(pytester, server, dist_args):
    server.default = answer_everything  # 107 tokens per call
    result = pytester.runpytest(
        SAMPLE_DATA,
        FAST_SIM,
        "--gta-model=openai/m",
        f"--gta-base-url={server.url}",
        "--gta-mode=e2e",
        "--gta-report=r.json",
        "--gta-max-tokens-total=150",
        "--junitxml=gta.xml",
        "--gta-concurrency=2",
        *dist_args,
    )
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["stopped"].startswith("token budget exhausted")
    # The stop rides on the report of the case that hit it, never into JUnit's properties.
    junit = (pytester.path / "gta.xml").read_text()
    assert "gta_stopped" not in junit
    assert "gta_model_calls" in junit
    assert "the session stopped early" in " ".join(report["notes"])
    assert report["outcomes"]["skipped"] >= 1
    # Two calls spend the budget; no call starts after that, and at most the calls already
    # in flight (two per process running episodes ahead) are answered and counted.
    processes = 2 if dist_args else 1
    assert len(server.posted()) <= 2 * processes + 1
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "token budget exhausted" in result.stdout.str()


def test_cost_budget_needs_prices(pytester, server):
    result = pytester.runpytest(
        SAMPLE_DATA,
        "--gta-model=openai/m",
        f"--gta-base-url={server.url}",
        "--gta-max-cost=1",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--gta-price=IN,OUT" in result.stderr.str()


def test_bad_generation_options_are_usage_errors(pytester):
    for option, message in [
        ("--gta-temperature=3", "between 0 and 2"),
        ("--gta-protocol=json", "choose react"),
        ("--gta-cache=sometimes", "choose off, read, write or readwrite"),
        ("--gta-model-args=tensor_parallel_size", "is not key=value"),
        ("--gta-price=1", "input,output prices"),
        ("--gta-base-url=gpu:8000", "http(s) URL"),
    ]:
        result = pytester.runpytest(SAMPLE_DATA, "--gta-model=oracle", option)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, option
        assert message in result.stderr.str(), option


def test_react_e2e_conversation_grows_like_lagent(pytester, server, sample_root):
    image = f"{sample_root}/image/image_0.jpg"
    server.then(
        Step(
            chat_completion(f'Thought: read it\nAction: OCR\nAction Input: {{"image": "{image}"}}')
        ),
        Step(chat_completion("Thought: got it\nFinal Answer: 9.24")),
    )
    result = pytester.runpytest(
        SAMPLE_DATA,
        FAST_SIM,
        "--gta-model=openai/m",
        f"--gta-base-url={server.url}",
        "--gta-ids=0",
        "--gta-tools=replay",
        "--gta-cache=off",
    )
    result.assert_outcomes(passed=1)
    first, second = server.posted()
    assert [m["role"] for m in first["messages"]] == ["system", "user", "user"]
    assert first["messages"][1]["content"] == f"The related files are at `{image}`"
    assert [m["role"] for m in second["messages"]] == [
        "system",
        "user",
        "user",
        "assistant",
        "system",
    ]
    assert second["messages"][:3] == first["messages"]
    assert second["messages"][3]["content"].startswith("Thought: read it\nAction: OCR")
    observation = second["messages"][4]["content"]
    assert observation.startswith("Response:")
    assert observation.endswith("\n")
    assert "FRESHMART" in observation  # the recorded OCR output of the receipt
