"""The recording model proxy, driven by the official ``openai`` and ``anthropic`` SDKs.

The upstream is a scripted server on 127.0.0.1 (:mod:`tests.helpers.scripted_server`); the agents
are the SDK clients pointed at a case's proxy URL, as an agent under test would be.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anthropic
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gta.models.base import BaseRecordedSource, ModelContext, make_model
from pytest_gta.models.cache import ResponseCache
from pytest_gta.models.chat import MalformedReply
from pytest_gta.models.generation import GenerationSettings
from pytest_gta.models.usage import Budget, Prices, UsageLedger
from pytest_gta.proxy import ModelProxy, ProxyCase, Upstream, no_upstream_reason, upstream_of
from pytest_gta.proxy.upstream import LocalModel
from pytest_gta.proxy.wire import (
    BadRequest,
    SseReader,
    StreamReading,
    elide_images,
    reply_of,
    request_body,
)
from pytest_gta.types import Usage
from tests.helpers.scripted_server import ScriptedServer, Step, anthropic_message, chat_completion

#: The real key: distinctive, so that finding it anywhere is a leak.
REAL_KEY = "sk-real-UPSTREAM-4f9c1e7a2b5d8e03"
AGENT_KEY = "sk-agent-OWN-KEY-9d2b7c4e1f6a"
MODEL = "run-model"
MESSAGES = [{"role": "user", "content": "What is 2+2?"}]
APIS = ["chat.completions", "responses", "messages"]


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


def upstream(server: ScriptedServer, kind: str = "openai", **fields: Any) -> Upstream:
    base = server.url if kind == "openai" else server.base
    return Upstream(kind, base, MODEL, REAL_KEY, endpoint=base, **fields)  # type: ignore[arg-type]


@pytest.fixture
def proxy(server: ScriptedServer) -> Iterator[ModelProxy]:
    with ModelProxy(upstream(server), prices=Prices(1.0, 2.0)) as started:
        yield started


def oa(case: ProxyCase) -> openai.OpenAI:
    return openai.OpenAI(base_url=case.openai_base_url, api_key=AGENT_KEY, max_retries=0)


def an(case: ProxyCase) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=case.anthropic_base_url, api_key=AGENT_KEY, max_retries=0)


def sse(*events: Any, done: bool = False) -> list[bytes]:
    """Server-sent events, one chunk each (a dict is ``data:`` JSON; a pair is named)."""
    out = []
    for event in events:
        if isinstance(event, tuple):
            out.append(f"event: {event[0]}\ndata: {json.dumps(event[1])}\n\n".encode())
        else:
            out.append(f"data: {json.dumps(event)}\n\n".encode())
    if done:
        out.append(b"data: [DONE]\n\n")
    return out


def chat_chunk(delta: dict[str, Any], usage: dict[str, int] | None = None) -> dict[str, Any]:
    choices = [] if usage else [{"index": 0, "delta": delta, "finish_reason": None}]
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": choices,
        "usage": usage,
    }


def response_body(text: str, input_tokens: int = 21, output_tokens: int = 4) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": MODEL,
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "Calculator",
                "arguments": '{"expression": "2+2"}',
                "status": "completed",
            },
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def raw_post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """A POST with exactly these bytes (what no SDK would send)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request("POST", parts.path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


# -- the three APIs ------------------------------------------------------------------------------


def test_chat_completion_is_forwarded_with_the_real_key_and_model_and_recorded(server, proxy):
    tool_call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "OCR", "arguments": '{"image": "a.png"}'},
    }
    server.then(Step(chat_completion("Let me look.", tool_calls=[tool_call])))
    case = proxy.open("case-1")
    reply = oa(case).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert reply.choices[0].message.tool_calls[0].function.name == "OCR"
    sent = server.requests[-1]
    headers = {k.lower(): v for k, v in sent.headers.items()}
    assert headers["authorization"] == f"Bearer {REAL_KEY}"
    assert AGENT_KEY not in json.dumps(headers)
    assert sent.json["model"] == MODEL
    (exchange,) = case.exchanges()
    assert exchange.api == "chat.completions"
    assert exchange.requested_model == "gpt-4o"
    assert exchange.request["model"] == MODEL
    assert exchange.request["messages"] == MESSAGES
    assert exchange.reply == 'Let me look.\n[tool call] OCR {"image": "a.png"}'
    assert exchange.usage == Usage(11, 7, calls=1)
    assert (exchange.status, exchange.cached, exchange.retries, exchange.streamed) == (
        200,
        False,
        0,
        False,
    )
    assert case.usage() == Usage(11, 7, calls=1)
    assert case.cost() == pytest.approx((11 * 1.0 + 7 * 2.0) / 1e6)
    assert oa(case).models.list().data[0].id == MODEL


def test_chat_stream_passes_chunk_by_chunk_and_asks_for_usage(server, proxy):
    chunks = sse(
        chat_chunk({"role": "assistant", "content": "Thought: "}),
        chat_chunk({"content": "add."}),
        chat_chunk(
            {"tool_calls": [{"index": 0, "id": "t", "function": {"name": "Calc", "arguments": ""}}]}
        ),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x": '}}]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        chat_chunk({}, usage={"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}),
        done=True,
    )
    step = Step(chunks=chunks, hold=threading.Event(), content_type="text/event-stream")
    server.then(step)
    case = proxy.open("stream")
    stream = oa(case).chat.completions.create(model="x", messages=MESSAGES, stream=True)
    first = next(iter(stream))
    assert step.hold is not None
    step.hold.set()
    rest = list(stream)
    # The first chunk reached the client while the upstream still held back the rest.
    assert first.choices[0].delta.content == "Thought: "
    assert not step.held_out, "the proxy waited for the whole upstream body"
    assert rest[-1].usage.prompt_tokens == 30
    assert server.requests[-1].json["stream_options"] == {"include_usage": True}
    assert case.wait()  # the SDK stopped at [DONE]; the proxy records at the stream's end
    (exchange,) = case.exchanges()
    assert exchange.streamed
    assert exchange.status == 200
    assert exchange.error is None
    assert exchange.reply == 'Thought: add.\n[tool call] Calc {"x": 1}'
    assert exchange.usage == Usage(30, 9, calls=1)


def test_responses_api_whole_and_streamed(server, proxy):
    case = proxy.open("responses")
    server.then(Step(response_body("Four.")))
    whole = oa(case).responses.create(model="any", input="2+2?")
    assert whole.output_text == "Four."
    assert server.requests[-1].path.endswith("/v1/responses")
    completed = {"type": "response.completed", "response": response_body("Four!", 5, 2)}
    chunks = sse(
        ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "Fo"}),
        ("response.completed", completed),
    )
    server.then(Step(chunks=chunks, content_type="text/event-stream"))
    events = list(oa(case).responses.create(model="any", input="2+2?", stream=True))
    assert events[-1].type == "response.completed"
    case.close()
    first, second = case.exchanges()
    assert first.api == second.api == "responses"
    assert first.reply == 'Four.\n[tool call] Calculator {"expression": "2+2"}'
    assert first.usage == Usage(21, 4, calls=1)
    assert second.streamed
    assert second.usage == Usage(5, 2, calls=1)
    assert second.reply.startswith("Four!")
    assert case.usage() == Usage(26, 6, calls=2)


def test_anthropic_messages_whole_and_streamed(server):
    blocks = [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "tu", "name": "OCR", "input": {"image": "x.png"}},
    ]
    server.then(Step(anthropic_message(blocks, input_tokens=40, output_tokens=6)))
    events = sse(
        ("message_start", {"type": "message_start", "message": {
            **anthropic_message([], input_tokens=17, output_tokens=1), "content": []}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "Hel"}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "lo"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                           "usage": {"output_tokens": 8}}),
        ("message_stop", {"type": "message_stop"}),
    )  # fmt: skip
    server.then(Step(chunks=events, content_type="text/event-stream"))
    with ModelProxy(upstream(server, "anthropic")) as proxy:
        case = proxy.open("claude")
        client = an(case)
        message = client.messages.create(model="claude-x", max_tokens=50, messages=MESSAGES)
        assert message.content[1].name == "OCR"
        headers = {k.lower(): v for k, v in server.requests[-1].headers.items()}
        assert headers["x-api-key"] == REAL_KEY
        assert "authorization" not in headers
        assert headers["anthropic-version"]
        with client.messages.stream(model="c", max_tokens=50, messages=MESSAGES) as stream:
            assert stream.get_final_text() == "Hello"
        # An Anthropic upstream serves no OpenAI route: the agent is told which URL to use.
        with pytest.raises(openai.BadRequestError, match=r"anthropic_base_url|openai_base_url"):
            oa(case).chat.completions.create(model="x", messages=MESSAGES)
    whole, streamed, refused = case.exchanges()
    assert whole.reply == 'Checking.\n[tool call] OCR {"image": "x.png"}'
    assert whole.usage == Usage(40, 6, calls=1)
    assert streamed.streamed
    assert streamed.reply == "Hello"
    assert streamed.usage == Usage(17, 8, calls=1)
    assert refused.status == 400
    assert refused.api == "chat.completions"


# -- budget, cache, retries, failures ---------------------------------------------------------


def test_budget_exhaustion_is_an_error_the_agent_sees_and_the_case_keeps(server, tmp_path):
    budget = Budget(UsageLedger(tmp_path / "ledger"), max_tokens=15)
    with ModelProxy(upstream(server), budget=budget) as proxy:
        case = proxy.open("budgeted")
        client = oa(case)
        client.chat.completions.create(model="x", messages=MESSAGES)  # 18 tokens: over
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(model="x", messages=MESSAGES)
    assert refused.value.status_code == 402
    assert "token budget exhausted: 18 of --gta-max-tokens-total=15" in str(refused.value)
    assert len(server.requests) == 1
    assert budget.ledger.totals() == (11, 7)
    assert case.exhausted is not None
    assert "token budget" in str(case.exhausted)
    assert [e.status for e in case.exchanges()] == [200, 402]


def test_a_rerun_replays_from_the_cache_streams_too_without_asking_upstream(server, tmp_path):
    usage = {"prompt_tokens": 3, "completion_tokens": 2}
    parts = [chat_chunk({"content": "cached "}), chat_chunk({"content": "words"})]
    stream = sse(*parts, chat_chunk({}, usage=usage), done=True)
    server.then(Step(chat_completion("Four.")), Step(chunks=stream))

    def run() -> ProxyCase:
        cache = ResponseCache(tmp_path / "cache")
        with ModelProxy(upstream(server), cache=cache) as proxy:
            case = proxy.open("rerun")
            client = oa(case)
            whole = client.chat.completions.create(model="x", messages=MESSAGES)
            assert whole.choices[0].message.content == "Four."
            parts = client.chat.completions.create(model="x", messages=MESSAGES, stream=True)
            assert "".join(c.choices[0].delta.content for c in parts if c.choices) == (
                "cached words"
            )
            case.close()
        return case

    first = run()
    server.close()  # the rerun must not need it
    second = run()
    assert len(server.requests) == 2
    assert [e.cached for e in first.exchanges()] == [False, False]
    assert [e.cached for e in second.exchanges()] == [True, True]
    assert first.usage() == Usage(14, 9, calls=2)
    assert second.usage() == Usage(14, 9, calls=0, cached_calls=2)
    assert [e.reply for e in second.exchanges()] == ["Four.", "cached words"]
    assert second.exchanges()[1].streamed


def test_retries_are_counted_per_exchange(server, proxy):
    server.then(Step({"error": {"message": "busy"}}, status=503), Step(chat_completion("ok")))
    case = proxy.open("retry")
    assert oa(case).chat.completions.create(model="x", messages=MESSAGES).choices
    (exchange,) = case.exchanges()
    assert (exchange.status, exchange.retries, case.retries) == (200, 1, 1)
    assert len(server.requests) == 2


def test_upstream_down_is_an_error_the_agent_sees_and_a_recorded_exchange(server):
    down = upstream(server, retries=0)
    server.close()
    with ModelProxy(down) as proxy:
        case = proxy.open("down")
        # max_retries=2: the proxy's x-should-retry: false keeps the SDK from retrying.
        client = openai.OpenAI(base_url=case.openai_base_url, api_key="k", max_retries=2)
        with pytest.raises(openai.InternalServerError, match="could not be reached"):
            client.chat.completions.create(model="x", messages=MESSAGES)
    (exchange,) = case.exchanges()
    assert exchange.status == 502
    assert "could not be reached" in (exchange.error or "")
    assert exchange.usage is None


def test_an_upstream_refusal_reaches_the_agent_with_its_status_key_redacted(server, proxy):
    echo = {"error": {"message": f"bad key {REAL_KEY}", "type": "invalid_request_error"}}
    server.then(Step(echo, status=401))
    case = proxy.open("refused")
    with pytest.raises(openai.AuthenticationError) as error:
        oa(case).chat.completions.create(model="x", messages=MESSAGES)
    assert REAL_KEY not in str(error.value.body)
    assert "[redacted" in str(error.value.body)
    assert case.exchanges()[0].status == 401


def test_two_cases_at_once_never_mix(server, proxy):
    server.default = lambda record: Step(
        chat_completion(f"echo {record.json['messages'][0]['content']}")
    )  # type: ignore[assignment]
    cases = [proxy.open(f"case-{n}") for n in range(2)]

    def agent(case: ProxyCase, n: int) -> None:
        client = oa(case)
        for turn in range(5):
            client.chat.completions.create(
                model="x", messages=[{"role": "user", "content": f"{n}:{turn}"}]
            )

    threads = [threading.Thread(target=agent, args=(c, n)) for n, c in enumerate(cases)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for n, case in enumerate(cases):
        assert [e.reply for e in case.exchanges()] == [f"echo {n}:{t}" for t in range(5)]
        assert case.usage().calls == 5


def test_cases_opened_from_many_threads_at_once_share_one_server(server):
    """The pool's threads open their cases together; one of them starts the only server."""
    proxy = ModelProxy(upstream(server))
    try:
        gate = threading.Barrier(8)
        urls: list[str] = []

        def open_one(n: int) -> None:
            gate.wait()
            urls.append(proxy.open(f"e2e-{n}").openai_base_url)

        threads = [threading.Thread(target=open_one, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert len(urls) == 8
        assert {urlsplit(url).netloc for url in urls} == {urlsplit(proxy.url).netloc}
        assert len(set(urls)) == 8
        assert [t.name for t in threading.enumerate()].count("pytest-gta-model-proxy") == 1
    finally:
        proxy.close()


def test_unknown_and_closed_secrets_are_refused(server, proxy):
    case = proxy.open("closing")
    guessed = case.openai_base_url.replace(case.root.rsplit("/", 1)[1], "guessed-secret")
    status, body = raw_post(f"{guessed}/chat/completions", b"{}")
    assert status == 404
    assert b"no such case" in body
    assert raw_post(f"{proxy.url}/v1/chat/completions", b"{}")[0] == 404
    case.close()
    with pytest.raises(openai.NotFoundError):
        oa(case).chat.completions.create(model="x", messages=MESSAGES)
    assert server.requests == []
    assert case.exchanges() == []


def test_the_real_key_is_in_no_record_log_or_file(server, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    server.then(Step({"error": {"message": "busy"}}, status=503))
    server.then(Step(chat_completion(f"the key is {REAL_KEY}")))
    cache_dir = tmp_path / "cache"
    budget = Budget(UsageLedger(tmp_path / "ledger"), max_tokens=10**6)
    with ModelProxy(upstream(server), cache=ResponseCache(cache_dir), budget=budget) as proxy:
        case = proxy.open("secret")
        client = oa(case)
        client.chat.completions.create(
            model="x", messages=[{"role": "user", "content": f"echo {REAL_KEY}"}]
        )
    written = json.dumps([e.to_json() for e in case.exchanges()])
    files = [p.read_text() for p in tmp_path.rglob("*") if p.is_file()]
    assert files, "the cache and the ledger were written"
    for text in [written, caplog.text, repr(proxy.upstream), *files]:
        assert REAL_KEY not in text
    assert all(AGENT_KEY not in json.dumps(r.headers) for r in server.requests)


# -- hostile bodies ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b"not json at all", 400, "not JSON"),
        (b"[1, 2]", 400, "not a JSON object"),
        (b"[" * 5000 + b"]" * 5000, 400, "nested too deeply"),
        (b"\xff\xfe{", 400, "not UTF-8"),
        (b'{"messages": [{"role": "user", "content": "x"}], "n": ' + b"9" * 5000 + b"}", 400,
         "digits"),
        (b"x" * 30000, 413, "larger than 20,000 bytes"),
    ],
)  # fmt: skip
def test_hostile_agent_bodies_end_in_an_http_error_and_an_exchange(server, body, status, says):
    with ModelProxy(upstream(server), max_request_bytes=20000) as proxy:
        case = proxy.open("hostile")
        got, answer = raw_post(f"{case.openai_base_url}/chat/completions", body)
    assert got == status
    assert says in json.loads(answer)["error"]["message"]
    (exchange,) = case.exchanges()
    assert exchange.status == status
    assert says in (exchange.error or "")
    assert server.requests == []
    json.dumps(exchange.to_json(), allow_nan=False).encode("utf-8")


def test_lone_surrogates_are_forwarded_and_recorded_cleanly(server, proxy):
    server.then(Step(raw=b'{"choices": [{"message": {"content": "\\ud800!"}}]}'))
    case = proxy.open("surrogates")
    body = b'{"messages": [{"role": "user", "content": "\\udfff"}], "model": "\\ud800"}'
    status, _ = raw_post(f"{case.openai_base_url}/chat/completions", body)
    assert status == 200
    assert server.requests[-1].json["messages"][0]["content"] == "\udfff"
    record = case.exchanges()[0].to_json()
    assert record["reply"] == "\ufffd!"
    assert record["requested_model"] == "\ufffd"
    json.dumps(record).encode("utf-8")


@pytest.mark.parametrize(
    ("step", "status", "says"),
    [
        (Step(raw=b"<html>login</html>", content_type="text/html"), 502, "text/html"),
        (Step({"choices": "no"}), 502, "not a chat completion"),
        (Step(chat_completion("x", prompt_tokens=-5)), 502, "negative"),
        (Step(raw=b"x" * 5000), 502, "larger than"),
    ],
)
def test_hostile_upstream_bodies_end_in_an_http_error_and_an_exchange(server, step, status, says):
    server.then(step)
    with ModelProxy(upstream(server, retries=0, max_reply_bytes=4096)) as proxy:
        case = proxy.open("hostile-upstream")
        got, answer = raw_post(f"{case.openai_base_url}/chat/completions", b'{"messages": []}')
    assert got == status
    assert says in json.loads(answer)["error"]["message"]
    assert says in (case.exchanges()[0].error or "")


def test_a_garbled_stream_passes_through_and_is_recorded(server, proxy):
    chunks = [b"data: {not json\n\n", b"\xff\xfe garbage\r\n", b"data: [1]\n\n",
              *sse(chat_chunk({"content": "kept"}), done=True)]  # fmt: skip
    server.then(Step(chunks=chunks))
    case = proxy.open("garbled")
    status, answer = raw_post(
        f"{case.openai_base_url}/chat/completions", b'{"messages": [], "stream": true}'
    )
    assert status == 200
    assert answer == b"".join(chunks)
    (exchange,) = case.exchanges()
    assert exchange.reply == "kept"
    assert exchange.usage == Usage(calls=1)


# -- which models have an upstream ---------------------------------------------------------------


def test_upstream_of_the_http_adapters_the_model_itself_for_the_rest(sample_dataset, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", REAL_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", REAL_KEY)

    def model(raw: str, **generation: Any) -> Any:
        context = ModelContext(sample_dataset, ("e2e",), Path.cwd(),
                               generation=GenerationSettings(**generation))  # fmt: skip
        return make_model(raw, context)

    found = upstream_of(model("openai/gpt-4o", timeout=9.0, retries=1))
    assert found is not None
    assert found.kind == "openai"
    assert found.model == "gpt-4o"
    assert found.url("/v1/chat/completions") == "https://api.openai.com/v1/chat/completions"
    assert found.api_key == REAL_KEY
    assert REAL_KEY not in repr(found)
    assert (found.timeout, found.retries) == (9.0, 1)
    served = upstream_of(model("openai/local", base_url="http://127.0.0.1:9/v1"))
    assert served is not None
    assert served.url("/v1/responses") == "http://127.0.0.1:9/v1/responses"
    claude = upstream_of(model("anthropic/claude-sonnet-4-5"))
    assert claude is not None
    assert claude.kind == "anthropic"
    assert claude.url("/v1/messages") == "https://api.anthropic.com/v1/messages"
    oracle = upstream_of(model("oracle"))
    assert isinstance(oracle, LocalModel)
    assert (oracle.kind, oracle.model, oracle.concurrency) == ("local", "oracle", 1)

    class Recorded(BaseRecordedSource):
        name = "recorded"

        def recorded(self, query: Any, mode: Any) -> None:
            return None

    assert upstream_of(Recorded()) is None
    assert "replays recorded predictions" in no_upstream_reason(Recorded())


# -- the parsers, on anything ------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=400), cuts=st.lists(st.integers(0, 400), max_size=6))
def test_sse_reading_never_raises_and_chunking_does_not_matter(data, cuts):
    pieces = [
        data[a:b] for a, b in zip([0, *sorted(cuts)], [*sorted(cuts), len(data)], strict=False)
    ]
    whole, split = SseReader(), SseReader()
    assert (
        whole.feed(data) + whole.close()
        == [e for piece in pieces for e in split.feed(piece)] + split.close()
    )
    for api in ("chat.completions", "responses", "messages"):
        reading = StreamReading(api)
        for piece in pieces:
            reading.feed(piece)
        result = reading.finish()
        assert isinstance(result.text, str)


@settings(max_examples=200, deadline=None)
@given(events=st.lists(json_values, max_size=6), api=st.sampled_from(APIS))
def test_stream_usage_is_read_only_from_sane_counts(events, api):
    reading = StreamReading(api)
    for event in events:
        reading.feed(f"data: {json.dumps(event)}\n\n".encode())
    usage = reading.finish().usage
    if usage is not None:
        assert 0 <= usage.input_tokens <= 10**9
        assert 0 <= usage.output_tokens <= 10**9


@settings(max_examples=200, deadline=None)
@given(value=json_values, api=st.sampled_from(APIS))
def test_reply_of_reads_or_says_malformed(value, api):
    try:
        reading = reply_of(api, value)
    except MalformedReply:
        return
    assert isinstance(reading.text, str)
    elide_images(value)


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_request_body_is_an_object_or_a_bad_request(raw):
    problem = body = None
    try:
        body = request_body(raw)
    except BadRequest as exc:
        problem = str(exc)
    if body is None:
        assert problem is not None
        assert problem.startswith("the request body is not")
    else:
        assert isinstance(body, dict)
        json.dumps(elide_images(body))


def test_a_stream_over_the_reply_limit_is_cut_off_and_recorded(server):
    chunks = sse(*[chat_chunk({"content": "x" * 400}) for _ in range(20)], done=True)
    server.then(Step(chunks=chunks))
    with ModelProxy(upstream(server, max_reply_bytes=2048)) as proxy:
        case = proxy.open("long")
        stream = oa(case).chat.completions.create(model="x", messages=MESSAGES, stream=True)
        with pytest.raises(openai.APIError):
            list(stream)
        case.close()
    (exchange,) = case.exchanges()
    assert exchange.streamed
    assert "the stream broke off" in (exchange.error or "")
    assert "larger than 2 KiB" in (exchange.error or "")
    assert exchange.usage == Usage(calls=1)
    assert exchange.reply.startswith("x" * 400)


def test_an_agent_leaving_mid_stream_ends_the_upstream_request_and_nothing_runs_on(server):
    chunks = sse(*[chat_chunk({"content": f"{n} "}) for n in range(8)], done=True)
    server.then(Step(chunks=chunks, chunk_delay=0.1))
    with ModelProxy(upstream(server)) as proxy:
        case = proxy.open("leaving")
        parts = urlsplit(case.openai_base_url)
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
        body = json.dumps({"messages": MESSAGES, "stream": True})
        connection.request("POST", f"{parts.path}/chat/completions", body=body)
        response = connection.getresponse()
        assert response.status == 200
        assert response.read1(64).startswith(b"data: ")
        connection.sock.shutdown(2)
        connection.close()
        assert case.wait()
    (exchange,) = case.exchanges()
    assert exchange.error == "the agent closed the connection before the stream ended"
    assert exchange.usage is not None
    assert exchange.usage.calls == 1
    left = [t.name for t in threading.enumerate() if t.name.startswith("pytest-gta-model-proxy")]
    assert left == []
