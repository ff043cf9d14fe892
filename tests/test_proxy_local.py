"""The recording proxy answering for a model in this process, driven by the official SDKs.

The model is an adapter (:class:`Scripted`, a ``ChatAdapter`` with a response cache and a budget,
the ``mock:`` provider) with no HTTP endpoint; the agents are the ``openai`` and ``anthropic``
SDK clients pointed at a case's proxy URL, as an agent under test would be.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.models.base import BaseModelAdapter
from pytest_gta.models.cache import ResponseCache
from pytest_gta.models.chat import ChatAdapter, Prepared
from pytest_gta.models.generation import GenerationSettings
from pytest_gta.models.mock import MockModel
from pytest_gta.models.usage import Budget, UsageLedger
from pytest_gta.proxy import ModelProxy, ProxyCase, upstream_of
from pytest_gta.proxy.local_replies import said
from pytest_gta.proxy.local_requests import IMAGE_NOTE, read_request
from pytest_gta.proxy.upstream import LocalModel
from pytest_gta.proxy.wire import BadRequest
from pytest_gta.types import ModelOutput, ModelRequest, ToolCall, Usage
from pytest_gta.vocabulary import ProtocolName
from tests.test_proxy import json_values, raw_post

MESSAGES = [{"role": "user", "content": "What is 2+2?"}]
#: Each API asked for a whole answer and for a stream.
STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
CALC = {"expression": "2+2"}
CHAT_TOOL = {
    "type": "function",
    "function": {
        "name": "Calculator",
        "description": "Evaluates one Python expression.",
        "parameters": {
            "type": "object",
            "properties": {
                "expression": {"type": "string", "description": "the expression"},
                "digits": {"type": "integer"},
            },
            "required": ["expression"],
        },
    },
}
RESPONSES_TOOL = {"type": "function", **CHAT_TOOL["function"]}  # type: ignore[dict-item]
ANTHROPIC_TOOL = {
    "name": "Calculator",
    "description": "Evaluates one Python expression.",
    "input_schema": CHAT_TOOL["function"]["parameters"],  # type: ignore[index]
}


class Scripted(BaseModelAdapter):
    """Answers with its outputs in turn (the last one again), keeping every request."""

    protocol: ProtocolName = "react"

    def __init__(self, *outputs: ModelOutput | BaseException, concurrency: int = 1) -> None:
        self.name = "scripted"
        self.outputs = list(outputs) or [ModelOutput("four", Usage(7, 1))]
        self.concurrency = concurrency
        self.requests: list[ModelRequest] = []
        self.inside = 0
        self.most_inside = 0
        self._lock = threading.Lock()

    def generate(self, request: ModelRequest) -> ModelOutput:
        """The next output (an exception is raised); counts the requests inside at once."""
        with self._lock:
            self.requests.append(request)
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            output = self.outputs[min(len(self.requests), len(self.outputs)) - 1]
        try:
            time.sleep(0.01)  # room for another request to come in meanwhile, if it may
            if isinstance(output, BaseException):
                raise output
            return output
        finally:
            with self._lock:
                self.inside -= 1


def calling(*calls: ToolCall, text: str = "") -> ModelOutput:
    return ModelOutput(text, Usage(5, 3), calls)


@contextlib.contextmanager
def serving(model: Scripted, label: str = "e2e-3", query: str = "3") -> Iterator[ProxyCase]:
    """A proxy answering for ``model``, and one case of it, open until the block ends."""
    with ModelProxy(LocalModel(model)) as proxy:
        yield proxy.open(label, query=query)


@pytest.fixture
def model() -> Scripted:
    return Scripted()


@pytest.fixture
def proxy(model: Scripted) -> Iterator[ModelProxy]:
    with ModelProxy(LocalModel(model)) as started:
        yield started


#: The SDK clients a test made, closed when it ends (an unclosed one's socket would be
#: finalised during a later test, which ``filterwarnings = error`` fails).
CLIENTS: list[openai.OpenAI | anthropic.Anthropic] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while CLIENTS:
        CLIENTS.pop().close()


def oa(case: ProxyCase) -> openai.OpenAI:
    client = openai.OpenAI(base_url=case.openai_base_url, api_key="any", max_retries=0)
    CLIENTS.append(client)
    return client


def an(case: ProxyCase) -> anthropic.Anthropic:
    client = anthropic.Anthropic(base_url=case.anthropic_base_url, api_key="any", max_retries=0)
    CLIENTS.append(client)
    return client


# -- the three APIs, whole and streamed ----------------------------------------------------------


def ask_text(case: ProxyCase, api: str, stream: bool) -> str:
    """The model's text as the API's SDK reads it, the request streamed or not."""
    if api == "chat.completions":
        if stream:
            chunks = oa(case).chat.completions.create(model="x", messages=MESSAGES, stream=True)
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        reply = oa(case).chat.completions.create(model="gpt-4o", messages=MESSAGES)
        return reply.choices[0].message.content or ""
    if api == "responses":
        if stream:
            with oa(case).responses.stream(model="gpt-4o", input="What is 2+2?") as events:
                return events.get_final_response().output_text
        return oa(case).responses.create(model="gpt-4o", input="What is 2+2?").output_text
    arguments: dict[str, Any] = {"model": "claude", "max_tokens": 9, "messages": MESSAGES}
    if stream:
        with an(case).messages.stream(**arguments) as events:
            message = events.get_final_message()
    else:
        message = an(case).messages.create(**arguments)
    return "".join(b.text for b in message.content if b.type == "text")


@STREAMED
@pytest.mark.parametrize("api", ["chat.completions", "responses", "messages"])
def test_each_api_answers_with_the_models_text_and_records_it(proxy, model, api, stream):
    case = proxy.open("e2e-0", query="0", epoch=2)
    assert ask_text(case, api, stream) == "four"
    case.close()
    (exchange,) = case.exchanges()
    assert (exchange.api, exchange.status, exchange.streamed) == (api, 200, stream)
    assert exchange.reply == "four"
    assert exchange.usage == Usage(7, 1, calls=1)
    assert exchange.requested_model in ("x", "gpt-4o", "claude")
    assert exchange.request["model"] == "scripted"  # the run's model, whatever was asked
    assert exchange.error is None
    (request,) = model.requests
    assert (request.case.qid, request.case.mode, request.case.index) == ("0", "e2e", 0)
    assert request.case.epoch == 2
    assert request.protocol == "native"
    assert [(m.role, m.content) for m in request.messages] == [("user", "What is 2+2?")]


def test_the_models_list_names_the_run_model(proxy):
    case = proxy.open("e2e-0")
    with urllib.request.urlopen(f"{case.openai_base_url}/models", timeout=10) as listing:
        assert [m["id"] for m in json.loads(listing.read())["data"]] == ["scripted"]


@STREAMED
def test_chat_tool_calls_go_out_and_their_results_come_back(stream):
    model = Scripted(calling(ToolCall("Calculator", CALC)), ModelOutput("It is 4."))
    with serving(model) as case:
        client = oa(case)
        messages: list[Any] = [{"role": "system", "content": "Be brief."}, *MESSAGES]
        if stream:
            chunks = list(
                client.chat.completions.create(
                    model="x", messages=messages, tools=[CHAT_TOOL], stream=True,
                    stream_options={"include_usage": True},
                )
            )  # fmt: skip
            (call,) = [c for k in chunks if k.choices for c in k.choices[0].delta.tool_calls or ()]
            assert chunks[-1].usage is not None
            assert chunks[-1].usage.prompt_tokens == 5
            call_id, name, arguments = call.id, call.function.name, call.function.arguments
        else:
            reply = client.chat.completions.create(model="x", messages=messages, tools=[CHAT_TOOL])
            assert reply.choices[0].finish_reason == "tool_calls"
            (made,) = reply.choices[0].message.tool_calls
            call_id, name, arguments = made.id, made.function.name, made.function.arguments
        assert (name, json.loads(arguments)) == ("Calculator", CALC)
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": call_id, "content": "4"},
        ]  # fmt: skip
        final = client.chat.completions.create(model="x", messages=messages, tools=[CHAT_TOOL])
        assert final.choices[0].message.content == "It is 4."
        case.close()
    first, second = model.requests
    (tool,) = first.tools
    assert (tool.name, tool.description) == ("Calculator", "Evaluates one Python expression.")
    assert [(p.name, p.type, p.optional) for p in tool.inputs] == [
        ("expression", "text", False),
        ("digits", "int", True),
    ]
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "tool"]
    assert second.messages[2].tool_calls == (ToolCall("Calculator", CALC, call_id),)
    assert (second.messages[3].content, second.messages[3].tool_call_id) == ("4", call_id)
    assert [r.case.index for r in model.requests] == [0, 1]
    assert [e.reply for e in case.exchanges()] == [
        '[tool call] Calculator {"expression": "2+2"}',
        "It is 4.",
    ]


@STREAMED
def test_responses_function_calls_go_out_and_their_outputs_come_back(stream):
    model = Scripted(calling(ToolCall("Calculator", CALC), text="Let me see."), ModelOutput("4"))
    with serving(model) as case:
        client = oa(case)
        if stream:
            with client.responses.stream(
                model="x", input="2+2?", tools=[RESPONSES_TOOL], instructions="Be brief."
            ) as events:
                response = events.get_final_response()
        else:
            response = client.responses.create(
                model="x", input="2+2?", tools=[RESPONSES_TOOL], instructions="Be brief."
            )  # type: ignore[call-overload]
        message, call = response.output
        assert message.type == "message"
        assert response.output_text == "Let me see."
        assert call.type == "function_call"
        assert (call.name, json.loads(call.arguments)) == ("Calculator", CALC)
        items: list[Any] = [
            {"role": "user", "content": "2+2?"},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Let me see."}]},
            {"type": "function_call", "call_id": call.call_id, "name": call.name,
             "arguments": call.arguments},
            {"type": "reasoning", "summary": []},
            {"type": "function_call_output", "call_id": call.call_id, "output": "4"},
        ]  # fmt: skip
        assert client.responses.create(model="x", input=items).output_text == "4"
    first, second = model.requests
    assert [(m.role, m.content) for m in first.messages] == [
        ("system", "Be brief."),
        ("user", "2+2?"),
    ]
    assert [m.role for m in second.messages] == ["user", "assistant", "tool"]
    assert second.messages[1].content == "Let me see."
    assert second.messages[1].tool_calls == (ToolCall("Calculator", CALC, call.call_id),)
    assert second.messages[2].tool_call_id == call.call_id


@STREAMED
def test_anthropic_tool_use_goes_out_and_its_result_comes_back(stream):
    model = Scripted(calling(ToolCall("Calculator", CALC)), ModelOutput("4"))
    with serving(model) as case:
        client = an(case)
        arguments: dict[str, Any] = {
            "model": "claude", "max_tokens": 50, "messages": MESSAGES, "tools": [ANTHROPIC_TOOL],
            "system": [{"type": "text", "text": "Be brief."}],
        }  # fmt: skip
        if stream:
            with client.messages.stream(**arguments) as events:
                message = events.get_final_message()
        else:
            message = client.messages.create(**arguments)
        assert message.stop_reason == "tool_use"
        (use,) = [b for b in message.content if b.type == "tool_use"]
        assert (use.name, use.input) == ("Calculator", CALC)
        conversation = [
            *MESSAGES,
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": [
                    {"type": "text", "text": "4"}]},
                {"type": "text", "text": "So?"}]},
        ]  # fmt: skip
        final = client.messages.create(model="claude", max_tokens=50, messages=conversation)
        assert final.content[0].type == "text"
        assert final.content[0].text == "4"
    first, second = model.requests
    assert first.messages[0].role == "system"
    assert [(m.role, m.content) for m in second.messages] == [
        ("user", "What is 2+2?"),
        ("assistant", ""),
        ("tool", "4"),
        ("user", "So?"),
    ]
    assert second.messages[1].tool_calls == (ToolCall("Calculator", CALC, use.id),)
    assert second.messages[2].tool_call_id == use.id


def test_images_reach_the_model_as_a_note(proxy, model):
    case = proxy.open("e2e-0")
    image = "data:image/png;base64," + "A" * 5000
    content = [{"type": "text", "text": "What is this?"},
               {"type": "image_url", "image_url": {"url": image}}]  # fmt: skip
    oa(case).chat.completions.create(model="x", messages=[{"role": "user", "content": content}])
    case.close()
    assert model.requests[0].messages[0].content == f"What is this?\n{IMAGE_NOTE}"
    assert "A" * 300 not in json.dumps(case.exchanges()[0].request)


# -- which calls are sent as calls ----------------------------------------------------------------


def test_calls_written_as_text_are_read_and_only_offered_well_formed_ones_sent():
    written = '<tool_call>{"name": "Calculator", "arguments": {"expression": "1+1"}}</tool_call>'
    answer = said(ModelOutput(f"Sure. {written}"), ["Calculator"], "m", turn=4)
    assert answer.text == "Sure."
    assert answer.calls == (ToolCall("Calculator", {"expression": "1+1"}, "call_0"),)
    assert answer.call_id(0) == "call_4_0"
    # Not offered, or arguments that are not a JSON object: kept as text, as a server's
    # tool-call parser keeps them, so that the agent's SDK does not fail on them.
    unoffered = said(ModelOutput(written), ["OCR"], "m")
    assert unoffered.calls == ()
    assert "Calculator" in unoffered.text
    broken = '<tool_call>{"name": "Calculator", "arguments": {"expression": </tool_call>'
    garbled = said(ModelOutput(broken), ["Calculator"], "m")
    assert garbled.calls == ()
    assert '"name": "Calculator"' in garbled.text
    # Nothing offered: the text stays the text, however it reads.
    assert said(ModelOutput(written), [], "m").text == written


def test_a_mock_script_answers_an_agent_turn_by_turn(tmp_path, sample_dataset):
    script = tmp_path / "script.json"
    written = '<tool_call>{"name": "Calculator", "arguments": {"expression": "1+1"}}</tool_call>'
    script.write_text(json.dumps({"responses": {"e2e-0": [written, "Final: 2"]}, "default": "?"}))
    with ModelProxy(LocalModel(MockModel(script, sample_dataset))) as proxy:
        case = proxy.open("e2e-0", query="0")
        client = oa(case)
        first = client.chat.completions.create(model="x", messages=MESSAGES, tools=[CHAT_TOOL])
        (call,) = first.choices[0].message.tool_calls
        assert call.function.name == "Calculator"
        second = client.chat.completions.create(model="x", messages=MESSAGES, tools=[CHAT_TOOL])
        assert second.choices[0].message.content == "Final: 2"
        other = proxy.open("e2e-1", query="1")
        reply = oa(other).chat.completions.create(model="x", messages=MESSAGES)
        assert reply.choices[0].message.content == "?"
    assert upstream_of(MockModel(script, sample_dataset)) is not None


# -- cache, budget, failures, threads ------------------------------------------------------------


class Counting(ChatAdapter):
    """A chat adapter in this process: its cache and budget are the ones the proxy goes through."""

    provider = "counting"

    def __init__(self, cache: ResponseCache | None = None, budget: Budget | None = None) -> None:
        super().__init__(GenerationSettings(), cache, budget)
        self.name = self.served = "counting"
        self.endpoint = "counting:in-process"
        self.sent = 0

    def prepare(self, request: ModelRequest) -> Prepared:
        """The messages and tools (the cache's key)."""
        messages = [[m.role, m.content] for m in request.messages]
        return Prepared({"messages": messages, "tools": [t.name for t in request.tools]})

    def send(self, prepared: Prepared) -> ModelOutput:
        """Always the same answer."""
        self.sent += 1
        return ModelOutput("answer", Usage(10, 2))


def test_a_rerun_replays_from_the_adapters_cache(tmp_path):
    def run() -> tuple[ProxyCase, int]:
        adapter = Counting(ResponseCache(tmp_path / "cache"))
        with ModelProxy(LocalModel(adapter)) as proxy:
            case = proxy.open("e2e-0", query="0")
            assert ask_text(case, "chat.completions", stream=False) == "answer"
            assert ask_text(case, "chat.completions", stream=True) == "answer"
            case.close()
        return case, adapter.sent

    first, sent = run()
    assert sent == 1  # the second request of the run was already a replay
    assert [(e.cached, e.usage) for e in first.exchanges()] == [
        (False, Usage(10, 2, calls=1)),
        (True, Usage(10, 2, cached_calls=1)),
    ]
    second, sent = run()
    assert sent == 0
    assert all(e.cached for e in second.exchanges())
    assert second.usage() == Usage(20, 4, cached_calls=2)


def test_budget_exhaustion_is_an_error_the_agent_sees_and_the_case_keeps(tmp_path):
    budget = Budget(UsageLedger(tmp_path / "ledger"), max_tokens=10)
    with ModelProxy(LocalModel(Counting(budget=budget)), budget=budget) as proxy:
        case = proxy.open("e2e-0", query="0")
        oa(case).chat.completions.create(model="x", messages=MESSAGES)  # 12 tokens: over
        with pytest.raises(openai.APIStatusError) as refused:
            oa(case).chat.completions.create(model="x", messages=MESSAGES)
    assert refused.value.status_code == 402
    assert "token budget exhausted: 12 of --gta-max-tokens-total=10" in str(refused.value)
    assert budget.ledger.totals() == (10, 2)
    assert case.exhausted is not None
    assert [e.status for e in case.exchanges()] == [200, 402]


def test_a_model_failure_is_a_502_the_agent_sees_and_the_case_records():
    model = Scripted(RuntimeError("the engine ran out of memory"))
    with serving(model, "e2e-0") as case:
        with pytest.raises(openai.InternalServerError) as failed:
            oa(case).chat.completions.create(model="x", messages=MESSAGES)
        case.close()
    assert failed.value.status_code == 502
    assert "scripted: RuntimeError: the engine ran out of memory" in str(failed.value)
    assert failed.value.response.headers["x-should-retry"] == "false"
    (exchange,) = case.exchanges()
    assert (exchange.status, exchange.usage) == (502, None)
    assert "ran out of memory" in (exchange.error or "")


@pytest.mark.parametrize(("concurrency", "most"), [(1, 1), (4, 4)])
def test_a_model_not_written_for_threads_gets_one_request_at_a_time(concurrency, most):
    model = Scripted(concurrency=concurrency)
    start = threading.Barrier(8)
    with serving(model, "e2e-0") as case:

        def ask() -> None:
            start.wait(timeout=30)
            oa(case).chat.completions.create(model="x", messages=MESSAGES)

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        case.close()
    assert len(case.exchanges()) == 8
    assert model.most_inside <= most
    if most == 1:
        assert model.most_inside == 1


# -- what an agent may send -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api", "body", "says"),
    [
        ("chat/completions", {}, "messages is a null, not a list"),
        ("chat/completions", {"messages": []}, "messages is empty"),
        ("chat/completions", {"messages": [{"role": "robot"}]}, "messages[0].role is 'robot'"),
        ("chat/completions", {"messages": ["hi"]}, "messages[0] is a str, not an object"),
        ("chat/completions", {"messages": MESSAGES, "tools": {}}, "tools is a dict, not a list"),
        ("chat/completions", {"messages": MESSAGES, "tools": [{"type": "function"}]},
         "tools[0].function is a null"),
        ("chat/completions", {"messages": [{"role": "user", "content": 7}]},
         "messages[0].content is a int"),
        ("chat/completions", {"messages": [{"role": "assistant", "tool_calls": [
            {"function": {"arguments": "{}"}}]}]}, "tool_calls[0].function.name is a null"),
        ("responses", {"input": []}, "input is empty"),
        ("responses", {"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id"),
        ("responses", {"input": [{"type": "function_call"}]}, "input[0].name is a null"),
        ("messages", {"messages": [{"role": "system", "content": "x"}]},
         "messages[0].role is 'system', not one of user, assistant"),
        ("messages", {"messages": MESSAGES, "system": 5}, "system is a int"),
    ],
)  # fmt: skip
def test_requests_it_cannot_answer_are_a_400_saying_where(proxy, model, api, body, says):
    case = proxy.open("e2e-0")
    status, answer = raw_post(f"{case.root}/v1/{api}", json.dumps(body).encode())
    assert status == 400
    error = json.loads(answer)["error"]
    assert says in error["message"], error
    assert error["type"] == "invalid_request_error"
    case.close()
    (exchange,) = case.exchanges()
    assert exchange.status == 400
    assert says in (exchange.error or "")
    assert model.requests == []


ROUTES = ["chat/completions", "responses", "messages"]
hostile_bodies = st.dictionaries(
    st.sampled_from(["messages", "input", "instructions", "system", "tools", "stream",
                     "stream_options", "previous_response_id", "model"]),
    json_values,
    max_size=5,
)  # fmt: skip
hostile_messages = st.lists(
    st.dictionaries(
        st.sampled_from(["role", "content", "tool_calls", "tool_call_id", "type", "name",
                         "arguments", "call_id", "output", "id", "input", "tool_use_id"]),
        json_values | st.sampled_from(["user", "assistant", "tool", "system", "function_call",
                                       "function_call_output", "tool_use", "tool_result"]),
        max_size=5,
    ),
    max_size=4,
)  # fmt: skip


@pytest.mark.slow  # 4 s in a full run: slow by cost (issue 39)
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=hostile_bodies, messages=hostile_messages, api=st.sampled_from(list(ROUTES)))
def test_reading_any_body_answers_or_says_bad_request(body, messages, api):
    body = {**body, "messages" if api != "responses" else "input": messages}
    name = {"chat/completions": "chat.completions"}.get(api, api)
    try:
        asked = read_request(name, body)
    except BadRequest as exc:
        problem = str(exc)
        assert problem
        return
    for message in asked.messages:
        assert isinstance(message.content, str)


@pytest.mark.slow  # 4 s in a full run: slow by cost (issue 39)
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    body=hostile_bodies | st.builds(lambda m: {"messages": m, "input": m}, hostile_messages),
    api=st.sampled_from(ROUTES),
    stream=st.booleans(),
)
def test_hostile_bodies_get_an_answer_or_a_clear_4xx_never_a_500(body, api, stream):
    model = Scripted(calling(ToolCall("Calculator", CALC), text="x"))
    with serving(model, "e2e-0") as case:
        status, answer = raw_post(
            f"{case.root}/v1/{api}", json.dumps({**body, "stream": stream}).encode()
        )
        case.close()
    assert status in (200, 400), answer[:500]
    if status == 400:
        message = json.loads(answer)["error"]["message"]
        assert "Traceback" not in message
    (exchange,) = case.exchanges()
    json.dumps(exchange.to_json(), allow_nan=False)


def test_only_function_tools_are_offered() -> None:
    """Tools of other kinds (a provider's web search) are nothing a model here can call."""
    samples: Sequence[tuple[str, dict[str, Any]]] = [
        ("chat.completions", {"messages": MESSAGES, "tools": [CHAT_TOOL]}),
        ("responses", {"input": "hi", "tools": [RESPONSES_TOOL, {"type": "web_search"}]}),
        ("messages", {"messages": MESSAGES, "tools": [ANTHROPIC_TOOL,
                      {"type": "web_search_20250305", "name": "web_search"}]}),
    ]  # fmt: skip
    for api, body in samples:
        asked = read_request(api, body)
        assert [t.name for t in asked.tools] == ["Calculator"]
        assert asked.messages[-1].role == "user"
