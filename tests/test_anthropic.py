"""The ``anthropic`` adapter against a real HTTP server, through the real ``anthropic`` SDK.

Requests are built by the real loops from the sample dataset and checked on the wire: system
placement, role conversion and merging, sampling parameters, headers, tool and image blocks.
Retries, timeouts and fatal errors go through real sockets; the black-box runs go through
pytester with and without xdist.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from anthropic.resources.messages.messages import DEPRECATED_MODELS

from pytest_gta.errors import GtaInfrastructureError, GtaUsageError
from pytest_gta.models import chat
from pytest_gta.models.anthropic_chat import (
    AnthropicChat,
    gateway_root,
    make_anthropic,
    merge_turns,
    messages_api,
)
from pytest_gta.models.base import BaseModelAdapter, ModelContext, resolve_spec
from pytest_gta.models.cache import ResponseCache
from pytest_gta.models.generation import GenerationSettings, react_max_tokens
from pytest_gta.protocol import react as p
from pytest_gta.protocol.native import NATIVE_SYSTEM_PROMPT, json_schema
from pytest_gta.run import loops
from pytest_gta.types import (
    CaseContext,
    ChatMessage,
    ModelOutput,
    ModelRequest,
    ResultItem,
    ToolCall,
    ToolResult,
    Usage,
)
from tests.helpers.gta_run import FAST_SIM, SAMPLE_DATA
from tests.helpers.paths import SAMPLE
from tests.helpers.retries import record_waits
from tests.helpers.run_context import play_e2e
from tests.helpers.scripted_server import ScriptedServer, Step, anthropic_message

KEY = "sk-ant-test-secret-0123456789"
#: A served name no SDK release lists as deprecated: the SDK warns on every call to a listed
#: model, and its table changes from release to release (claude-opus-4-5 joined it in 2.13).
MODEL = "claude-pytest-gta-test"
#: A model the installed SDK lists as deprecated, whatever its release (the table is never empty).
DEPRECATED = next(iter(DEPRECATED_MODELS))
PROVIDERS = ["anthropic"]
FINAL = "Final Answer: 9.24"
#: Every query of the sample, the release's irregular chain shapes (13-16) included.
SAMPLE_IDS = list(json.loads((SAMPLE / "dataset.json").read_text()))
FORCE_STOP = p.FORCE_STOP_PROMPT


def text_reply(text: str = FINAL, **usage: int) -> Step:
    return Step(anthropic_message([{"type": "text", "text": text}], **usage))


def tool_reply(name: str, arguments: dict[str, Any], call_id: str) -> Step:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
    return Step(anthropic_message([{"type": "text", "text": "Let me look."}, block]))


def error_reply(status: int, **headers: str) -> Step:
    body = {"type": "error", "error": {"type": "api_error", "message": f"scripted {status}"}}
    return Step(body, status=status, headers=headers)


@pytest.fixture(autouse=True)
def _environment(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    for name in ("ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(chat, "BACKOFF_BASE", 0.01)


@pytest.fixture(scope="module")
def _shared_server() -> Iterator[ScriptedServer]:
    # One server per module: stopping one waits for its 0.5 s poll, which adds up.
    with ScriptedServer() as scripted:
        yield scripted


@pytest.fixture
def server(_shared_server) -> ScriptedServer:
    """The shared server with an empty script and record, answering ``FINAL`` by default."""
    with _shared_server._lock:
        _shared_server.script.clear()
        _shared_server.requests.clear()
        _shared_server.default = text_reply()
    return _shared_server


def adapter(dataset, base_url: str | None, model: str = MODEL, **settings: Any) -> AnthropicChat:
    generation = GenerationSettings(base_url=base_url, **settings)
    spec = resolve_spec(f"anthropic/{model}", PROVIDERS, generation)
    return make_anthropic(
        spec, ModelContext(dataset, ["step", "e2e"], Path(), generation=generation)
    )


def roles(messages: Sequence[Any]) -> list[str]:
    return [m.role if isinstance(m, ChatMessage) else m["role"] for m in messages]


def b64(path: str | Path) -> str:
    return base64.b64encode(Path(path).read_bytes()).decode("ascii")


class Recorder(BaseModelAdapter):
    """A fake ReAct model for building real e2e requests without a server."""

    protocol = "react"

    def __init__(self, replies: Sequence[str]) -> None:
        self.replies = list(replies)
        self.requests: list[ModelRequest] = []

    def generate(self, request: ModelRequest) -> ModelOutput:
        self.requests.append(request)
        return ModelOutput(self.replies[min(len(self.requests), len(self.replies)) - 1], Usage())


def ocr_runner(text: str = "(1, 2, 3, 4) 9.24"):
    def run(meta, arguments, context) -> ToolResult:
        return ToolResult.text(text)

    return run


def ocr_call(dataset, query) -> str:
    image = dataset.abs_files(query)[0]
    return f'Thought: read it\nAction: OCR\nAction Input: {{"image": "{image}"}}'


# -- the pure converter -----------------------------------------------------------------------


@pytest.mark.parametrize("qid", SAMPLE_IDS)
def test_step_pattern_two_system_messages_then_alternating_turns(sample_dataset, qid):
    """step: system, system, user, (assistant, system)*, [user]."""
    for request, _ in loops.step_requests(sample_dataset, sample_dataset[qid]):
        m = request.messages
        n = (len(m) - 3) // 2
        summarize = len(m) % 2 == 0
        assert roles(m) == ["system", "system", "user", *["assistant", "system"] * n] + (
            ["user"] if summarize else []
        )
        system, turns = messages_api(m)
        assert system == f"{m[0].content}\n{m[1].content}"
        files = p.files_message(sample_dataset.abs_files(sample_dataset[qid]))
        assert system.endswith(f"\n{files}")
        expected = [{"role": "user", "content": m[2].content}]
        for k in range(n):
            expected.append({"role": "assistant", "content": m[3 + 2 * k].content})
            expected.append({"role": "user", "content": m[4 + 2 * k].content})
        if summarize:
            if n:
                observation = m[-2].content
                expected[-1] = {"role": "user", "content": f"{observation}\n{p.SUMMARIZE_PROMPT}"}
            else:
                expected[-1] = {"role": "user", "content": f"{m[2].content}\n{p.SUMMARIZE_PROMPT}"}
        assert turns == expected


@pytest.mark.parametrize("max_turns", [1, 3])
def test_e2e_pattern_files_and_query_merged_observations_as_user(sample_dataset, max_turns):
    """e2e: system, user, user, (assistant, system)*, and the force-stop system last."""
    query = sample_dataset["0"]
    model = Recorder([ocr_call(sample_dataset, query)])
    play_e2e(sample_dataset, query, model, ocr_runner(), max_turns=max_turns)
    files = p.files_message(sample_dataset.abs_files(query))
    for n, request in enumerate(model.requests):
        m = request.messages
        pattern = ["system", "user", "user", *["assistant", "system"] * n]
        last = n == max_turns - 1
        assert roles(m) == ([*pattern, "system"] if last else pattern)
        system, turns = messages_api(m)
        assert system == m[0].content
        assert roles(turns) == ["user", *["assistant", "user"] * n]
        opening = f"{files}\n{query.text}"
        assert turns[0]["content"] == (f"{opening}\n{FORCE_STOP}" if last and not n else opening)
        for k in range(n):
            assert turns[1 + 2 * k]["content"] == m[3 + 2 * k].content
            observation = m[4 + 2 * k].content
            assert observation.startswith("Response:(1, 2, 3, 4) 9.24")
            stop = last and k == n - 1
            assert turns[2 + 2 * k]["content"] == (
                f"{observation}\n{FORCE_STOP}" if stop else observation
            )
        assert any(FORCE_STOP in t["content"] for t in turns) == last


def test_merge_drops_empty_turns_and_concatenates_blocks():
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}
    turns = [
        ("user", "a"),
        ("assistant", "  "),  # an empty reply: the API rejects empty turns
        ("user", "b"),
        ("assistant", "c"),
        ("user", [result]),
        ("user", "d"),
    ]
    assert merge_turns(turns) == [
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "c"},
        {"role": "user", "content": [result, {"type": "text", "text": "d"}]},
    ]


def test_no_system_message_no_system_parameter():
    system, turns = messages_api([ChatMessage("user", "hi")])
    assert system is None
    assert turns == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("given", "root"),
    [
        ("http://127.0.0.1:4000", "http://127.0.0.1:4000"),
        ("http://127.0.0.1:4000/v1", "http://127.0.0.1:4000"),
        ("http://gw/anthropic/", "http://gw/anthropic"),
    ],
)
def test_gateway_root(given, root):
    assert gateway_root(given) == root


# -- requests on the wire ---------------------------------------------------------------------


def test_react_step_request_on_the_wire(sample_dataset, server):
    model = adapter(
        sample_dataset,
        server.base,
        temperature=0.7,
        max_tokens=300,
        model_args={"stop": ["\nObservation:"], "top_k": 5},
    )
    request = loops.step_requests(sample_dataset, sample_dataset["3"])[-1][0]
    output = model.generate(request)
    assert output == ModelOutput(FINAL, Usage(13, 5, calls=1))
    (sent,) = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    system, messages = messages_api(request.messages)
    assert sent.json == {
        "model": MODEL,
        "max_tokens": react_max_tokens(MODEL, request.messages, 300),
        "system": system,
        "messages": messages,
        "temperature": 0.7,
        "stop_sequences": ["\nObservation:"],
        "top_k": 5,
    }
    assert 0 < sent.json["max_tokens"] <= 300
    headers = {k.lower(): v for k, v in sent.headers.items()}
    assert headers["x-api-key"] == KEY
    assert headers["authorization"] == f"Bearer {KEY}"
    assert headers["anthropic-version"]
    assert KEY not in json.dumps(model.describe())
    assert model.describe()["served_model"] == MODEL
    assert model.describe()["endpoint"] == server.base


def test_e2e_requests_on_the_wire(sample_dataset, server):
    query = sample_dataset["0"]
    server.then(text_reply(ocr_call(sample_dataset, query)))
    model = adapter(sample_dataset, server.url)  # an OpenAI-style /v1 base URL works too
    episode = play_e2e(sample_dataset, query, model, ocr_runner())
    assert [t.reply for t in episode.turns] == [ocr_call(sample_dataset, query), FINAL]
    first, second = server.posted()
    assert [s.path for s in server.requests] == ["/v1/messages"] * 2
    assert roles(first["messages"]) == ["user"]
    assert roles(second["messages"]) == ["user", "assistant", "user"]
    assert second["messages"][1]["content"] == ocr_call(sample_dataset, query)
    assert second["messages"][2]["content"].startswith("Response:(1, 2, 3, 4) 9.24")
    assert second["system"] == episode.turns[1].messages[0].content
    assert "stop_sequences" not in second  # the catalog has no stop words for Claude


def test_catalog_name_settings_and_warnings(sample_dataset, server):
    model = adapter(sample_dataset, server.base, model="claude-3-opus-20240229", seed=7)
    assert model.catalog_entry is not None
    assert model.catalog_entry.name == "claude3-opus"
    assert model.vision  # from the catalog
    assert model.name == "anthropic/claude-3-opus-20240229"
    assert any("no seed" in w for w in model.warnings)


def test_a_model_the_sdk_lists_as_deprecated_is_noted_once(sample_dataset, server):
    noted = adapter(sample_dataset, server.base, model=DEPRECATED).warnings
    assert [w for w in noted if "deprecated" in w] == [
        f"{DEPRECATED}: the anthropic SDK lists this model as deprecated (end of life "
        f"{DEPRECATED_MODELS[DEPRECATED]})"
    ]
    assert not any("deprecated" in w for w in adapter(sample_dataset, server.base).warnings)


def test_seed_is_not_sent(sample_dataset, server):
    model = adapter(sample_dataset, server.base, seed=7)
    model.generate(loops.step_requests(sample_dataset, sample_dataset["0"])[0][0])
    assert "seed" not in server.posted()[0]


def test_prompt_that_fills_the_window_sends_nothing(sample_dataset, server):
    model = adapter(sample_dataset, server.base)
    huge = ChatMessage("user", "word " * 5000)
    request = ModelRequest((huge,), (), CaseContext("0", "step", 1))
    assert model.generate(request) == ModelOutput("", Usage())
    assert server.requests == []


def test_second_identical_request_comes_from_the_cache(sample_dataset, server, tmp_path):
    generation = GenerationSettings(base_url=server.base, protocol="native")
    spec = resolve_spec(f"anthropic/{MODEL}", PROVIDERS, generation)
    cache = ResponseCache(tmp_path / "cache")
    context = ModelContext(sample_dataset, ["step"], Path(), generation=generation, cache=cache)
    request = loops.step_requests(sample_dataset, sample_dataset["10"], "native")[-1][0]
    first = make_anthropic(spec, context).generate(request)
    again = make_anthropic(spec, context).generate(request)
    assert (first.text, again.text) == (FINAL, FINAL)
    assert again.usage == Usage(13, 5, calls=0, cached_calls=1)
    assert len(server.requests) == 1


def test_missing_key_names_the_variable(sample_dataset, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(GtaUsageError, match="ANTHROPIC_API_KEY") as info:
        adapter(sample_dataset, None)
    assert KEY not in str(info.value)


def test_gateway_needs_no_key(sample_dataset, server, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    model = adapter(sample_dataset, server.base)
    assert model.generate(loops.step_requests(sample_dataset, sample_dataset["0"])[0][0]).text


def test_bare_provider_needs_a_model(sample_dataset):
    spec = resolve_spec("anthropic", PROVIDERS, GenerationSettings())
    with pytest.raises(GtaUsageError, match="needs a model"):
        make_anthropic(spec, ModelContext(sample_dataset, ["step"], Path()))


# -- native protocol --------------------------------------------------------------------------


def test_native_tools_tool_use_and_tool_result_round_trip(sample_dataset, server):
    query = sample_dataset["10"]
    chart = sample_dataset.root / "image" / "dummy_generated_image.jpg"
    server.then(
        tool_reply("OCR", {"image": sample_dataset.abs_files(query)[0]}, "toolu_1"),
        tool_reply("Plot", {"command": "def solution(): ..."}, "toolu_2"),
    )

    def run(meta, arguments, context) -> ToolResult:
        if meta.name == "OCR":
            return ToolResult.text("(1, 2, 3, 4) June 118")
        return ToolResult((ResultItem("image", str(chart)),))

    model = adapter(sample_dataset, server.base, protocol="native", model_args={"vision": True})
    episode = play_e2e(sample_dataset, query, model, run)
    assert len(episode.turns) == 3
    first, second, third = server.posted()
    metas = sample_dataset.tool_metas(query)
    expected_tools = [
        {"name": t.name, "description": t.description, "input_schema": json_schema(t)}
        for t in metas
    ]
    assert first["tools"] == expected_tools
    assert first["system"] == NATIVE_SYSTEM_PROMPT
    assert "stop_sequences" not in first
    image = sample_dataset.abs_files(query)[0]
    assert first["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": p.files_message([image])},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/jpeg", "data": b64(image)},
                },
                {"type": "text", "text": query.text},
            ],
        }
    ]
    assert second["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "OCR", "input": {"image": image}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "(1, 2, 3, 4) June 118",
                }
            ],
        },
    ]
    result = third["messages"][-1]["content"][0]
    assert result["type"] == "tool_result"
    assert result["tool_use_id"] == "toolu_2"
    text, picture = result["content"]
    assert text == {"type": "text", "text": f"[image]({chart})"}
    assert picture["source"] == {"type": "base64", "media_type": "image/jpeg", "data": b64(chart)}
    assert episode.turns[0].reply.startswith("Let me look.\n[tool call] OCR")


def test_native_reply_is_parsed_into_tool_calls(sample_dataset, server):
    server.then(tool_reply("Calculator", {"expression": "1+2"}, "toolu_9"))
    model = adapter(sample_dataset, server.base, protocol="native")
    request = loops.step_requests(sample_dataset, sample_dataset["0"], "native")[0][0]
    output = model.generate(request)
    assert output.text == "Let me look."
    assert output.tool_calls == (ToolCall("Calculator", {"expression": "1+2"}, "toolu_9"),)
    assert output.usage == Usage(13, 5, calls=1)


@pytest.mark.parametrize("vision", [True, False])
def test_native_step_images_only_with_vision(sample_dataset, server, vision):
    query = sample_dataset["3"]
    request = loops.step_requests(sample_dataset, query, "native")[0][0]
    model = adapter(sample_dataset, server.base, protocol="native", model_args={"vision": vision})
    model.generate(request)
    body = server.posted()[0]
    assert body["max_tokens"] == 512
    files = sample_dataset.abs_files(query)
    blocks = body["messages"][0]["content"]
    pictures = [b for b in blocks if b["type"] == "image"] if isinstance(blocks, list) else []
    expected = [b64(f) for f in files if f.endswith((".jpg", ".png"))] if vision else []
    assert [b["source"]["data"] for b in pictures] == expected
    assert len(expected) == (2 if vision else 0)


# -- errors and retries -----------------------------------------------------------------------


def one_request(dataset) -> ModelRequest:
    return loops.step_requests(dataset, dataset["0"])[0][0]


def test_429_honours_retry_after(sample_dataset, server, monkeypatch):
    server.then(error_reply(429, **{"Retry-After": "1"}))
    waits = record_waits(monkeypatch)
    model = adapter(sample_dataset, server.base, retries=2)
    assert model.generate(one_request(sample_dataset)).text == FINAL
    assert waits == [1.0]  # the server's Retry-After, not the (shorter) backoff
    assert len(server.requests) == 2


@pytest.mark.parametrize("status", [500, 503, 529])
def test_server_errors_are_retried(sample_dataset, server, status):
    server.then(error_reply(status))
    model = adapter(sample_dataset, server.base, retries=1)
    assert model.generate(one_request(sample_dataset)).text == FINAL
    assert len(server.requests) == 2


def test_dropped_connection_is_retried(sample_dataset, server):
    server.then(Step(drop=True))
    model = adapter(sample_dataset, server.base, retries=1)
    assert model.generate(one_request(sample_dataset)).text == FINAL
    assert len(server.requests) == 2


def test_persistent_500_gives_up_after_the_retries(sample_dataset, server):
    server.default = error_reply(500)
    model = adapter(sample_dataset, server.base, retries=1)
    with pytest.raises(GtaInfrastructureError, match=r"giving up after 2 attempts.*HTTP 500"):
        model.generate(one_request(sample_dataset))
    assert len(server.requests) == 2


def test_timeout_is_an_infrastructure_error(sample_dataset, server):
    server.default = Step(anthropic_message([{"type": "text", "text": FINAL}]), delay=1.0)
    model = adapter(sample_dataset, server.base, retries=1, timeout=0.2)
    with pytest.raises(GtaInfrastructureError, match="timed out"):
        model.generate(one_request(sample_dataset))
    assert server.requests_seen(2) == 2  # the retry was sent


@pytest.mark.parametrize("status", [400, 401, 404])
def test_client_errors_are_fatal_at_once(sample_dataset, server, status):
    server.default = error_reply(status)
    model = adapter(sample_dataset, server.base, retries=3)
    with pytest.raises(GtaInfrastructureError, match=f"HTTP {status}: scripted {status}") as info:
        model.generate(one_request(sample_dataset))
    assert len(server.requests) == 1
    assert KEY not in str(info.value)


# -- black box ----------------------------------------------------------------------------------


def test_plugin_run_against_the_server(pytester, server):
    result = pytester.runpytest(
        SAMPLE_DATA,
        f"--gta-model=anthropic/{DEPRECATED}",
        f"--gta-base-url={server.base}",
        "--gta-mode=step",
        "--gta-ids=0,1",
        "--gta-temperature=0.5",
        FAST_SIM,
        "--gta-report=r.json",
    )
    result.assert_outcomes(failed=2)  # "Final Answer" where the reference calls a tool
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["outcomes"] == {"passed": 0, "failed": 2, "error": 0, "skipped": 0}
    generation = report["settings"]["generation"]
    assert generation["provider"] == "anthropic"
    assert generation["served_model"] == DEPRECATED
    assert generation["temperature"] == 0.5
    assert generation["endpoint"] == server.base
    assert any("deprecated" in note for note in report["notes"])
    text = (pytester.path / "r.json").read_text()
    assert KEY not in text
    assert KEY not in result.stdout.str()
    bodies = server.posted()
    assert len(bodies) == 6  # three reference assistant turns per query
    assert {b["model"] for b in bodies} == {DEPRECATED}
    assert {b["temperature"] for b in bodies} == {0.5}


def test_plugin_run_with_a_failing_server_errors(pytester, server):
    server.default = error_reply(500)
    result = pytester.runpytest(
        SAMPLE_DATA,
        f"--gta-model=anthropic/{MODEL}",
        f"--gta-base-url={server.base}",
        "--gta-mode=step",
        "--gta-ids=0,1",
        "--gta-retries=0",
        FAST_SIM,
        "--gta-report=r.json",
        "-rA",
    )
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*step-0: infrastructure error: *answered HTTP 500: scripted 500*",
            "Outcomes",
            "mode*passed*failed*error*skipped*pass rate",
            "step*0*0*2*0",
        ]
    )
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["outcomes"] == {"passed": 0, "failed": 0, "error": 2, "skipped": 0}
    assert {c["outcome"] for c in report["cases"]} == {"error"}
    assert all("HTTP 500" in c["message"] for c in report["cases"])
    assert KEY not in (pytester.path / "r.json").read_text()
