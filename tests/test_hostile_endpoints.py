"""Whatever a model endpoint answers, a case ends as a scored reply or an infrastructure error.

The OpenAI and Anthropic adapters talk through their real SDKs to a real server on 127.0.0.1
(tests/helpers/scripted_server.py) that answers 200 with what a chat server should never send: an
HTML page, JSON of the wrong shape, truncated or non-UTF-8 JSON, absurd usage numbers. Unit tests
pin each class's outcome, message and retry decision; a Hypothesis test throws random bodies and
statuses at both adapters; a black-box run checks that such cases end as pytest *errors* with the
GTA tables printed and no traceback.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.errors import GtaInfrastructureError, GtaUsageError
from pytest_gta.models import chat
from pytest_gta.models.base import ModelContext, make_model
from pytest_gta.models.generation import GenerationSettings
from pytest_gta.types import CaseContext, ChatMessage, ModelOutput, ModelRequest, ToolCall
from tests.helpers.gta_run import FAST_SIM, SAMPLE_DATA
from tests.helpers.scripted_server import (
    Recorded,
    ScriptedServer,
    Step,
    anthropic_message,
    chat_completion,
)

SECRET = "sk-hostile-secret-0123456789"
REQUEST = ModelRequest((ChatMessage("user", "hi"),), (), CaseContext("0", "e2e", 0))
NGINX_502 = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
    b"</body>\r\n</html>\r\n"
)
#: How NGINX_502 reads in a message: on one line, cut at chat.BODY_CLIP characters.
NGINX_502_QUOTED = (
    "'<html> <head><title>502 Bad Gateway</title></head> <body> "
    "<center><h1>502 Bad Gateway</h1></center> ...'"
)


@dataclass(frozen=True)
class Provider:
    """One adapter under test: how to build it and what a good answer of its API looks like."""

    name: str
    model: str
    expected: str
    #: A well-formed reply whose text is the argument.
    reply: Callable[[str], dict[str, Any]]
    #: Input and output token counts in its ``usage``.
    usage_keys: tuple[str, str]

    def adapter(self, dataset, server: ScriptedServer, **settings: Any) -> chat.ChatAdapter:
        base_url = server.url if self.name == "openai" else server.base
        generation = GenerationSettings(base_url=base_url, **settings)
        context = ModelContext(dataset, ("step", "e2e"), Path.cwd(), generation=generation)
        model = make_model(self.model, context)
        assert isinstance(model, chat.ChatAdapter)
        return model


OPENAI = Provider(
    "openai",
    "openai/x",
    "a chat completion",
    chat_completion,
    ("prompt_tokens", "completion_tokens"),
)
ANTHROPIC = Provider(
    "anthropic",
    "anthropic/claude-pytest-gta-test",  # not in the SDK's deprecated-models table
    "a Messages API reply",
    lambda text: anthropic_message([{"type": "text", "text": text}]),
    ("input_tokens", "output_tokens"),
)
PROVIDERS = [pytest.param(OPENAI, id="openai"), pytest.param(ANTHROPIC, id="anthropic")]


@pytest.fixture(autouse=True)
def _environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(chat, "BACKOFF_BASE", 0.001)


@pytest.fixture(scope="module")
def shared_server() -> Iterator[ScriptedServer]:
    with ScriptedServer(models=["x"]) as scripted:
        yield scripted


def reset(server: ScriptedServer, default: Step) -> ScriptedServer:
    with server._lock:
        server.script.clear()
        server.requests.clear()
        server.default = default
        server.models_answer = None
    return server


@pytest.fixture
def server(shared_server) -> ScriptedServer:
    return reset(shared_server, Step(chat_completion("Final Answer: ok")))


def raw(data: bytes | str, content_type: str | None = "application/json", **kw: Any) -> Step:
    body = data.encode() if isinstance(data, str) else data
    return Step(raw=body, content_type=content_type, **kw)


def ok(provider: Provider) -> Step:
    return Step(provider.reply("Final Answer: ok"))


def error_of(model: chat.ChatAdapter) -> str:
    with pytest.raises(GtaInfrastructureError) as info:
        model.generate(REQUEST)
    message = str(info.value)
    assert SECRET not in message
    assert "\n" not in message
    return message


# -- not JSON: a page of another type is not retried ---------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_html_page_is_an_error_quoting_it_not_retried(provider, sample_dataset, server):
    server.default = raw(NGINX_502, "text/html; charset=utf-8")
    model = provider.adapter(sample_dataset, server, retries=3)
    assert error_of(model) == (
        f"{model.endpoint} answered HTTP 200 with a text/html body, not {provider.expected}: "
        f"{NGINX_502_QUOTED}"
    )
    assert len(server.requests) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_plain_text_is_an_error_not_retried(provider, sample_dataset, server):
    server.default = raw("It works!", "text/plain")
    model = provider.adapter(sample_dataset, server, retries=3)
    assert error_of(model).endswith(f"with a text/plain body, not {provider.expected}: 'It works!'")
    assert len(server.requests) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_valid_reply_under_another_content_type_is_read(provider, sample_dataset, server):
    body = json.dumps(provider.reply("Final Answer: 4"))
    server.default = raw(body, "text/plain; charset=utf-8")
    model = provider.adapter(sample_dataset, server)
    assert model.generate(REQUEST).text == "Final Answer: 4"


# -- unreadable JSON, empty bodies: transient, retried --------------------------------------------


def truncated(provider: Provider) -> bytes:
    return json.dumps(provider.reply("Final Answer: a long answer")).encode()[:40]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("make", "problem"),
    [
        pytest.param(
            truncated, "that cannot be read as JSON (invalid JSON at line 1 column", id="truncated"
        ),
        pytest.param(
            lambda _: b'{"content": "\xff\xfe"}',
            "that cannot be read as JSON (not UTF-8 text (byte 13: invalid start byte)): "
            '\'{"content": "\ufffd\ufffd"}\'',
            id="not-utf8",
        ),
        pytest.param(lambda _: b"", "with an empty body, not ", id="empty"),
        pytest.param(lambda _: b"  \r\n", "with an empty body, not ", id="blank"),
    ],
)
def test_unreadable_json_is_retried_then_an_error(provider, make, problem, sample_dataset, server):
    server.default = ok(provider)

    server.then(raw(make(provider)))
    model = provider.adapter(sample_dataset, server, retries=1)
    assert model.generate(REQUEST).text == "Final Answer: ok"
    assert len(server.requests) == 2

    reset(server, raw(make(provider)))
    message = error_of(model)
    assert message.startswith(f"{provider.model} at {model.endpoint}: giving up after 2 attempts: ")
    assert f"{model.endpoint} answered HTTP 200 " in message
    assert problem in message
    assert len(server.requests) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_untyped_body_is_taken_for_json(provider, sample_dataset, server):
    server.default = raw("<html>oops</html>", content_type=None)
    model = provider.adapter(sample_dataset, server, retries=0)
    assert error_of(model).endswith(
        "with a body without a content type that cannot be read as JSON (invalid JSON at line 1 "
        "column 1: Expecting value): '<html>oops</html>'"
    )
    server.default = raw(json.dumps(provider.reply("Final Answer: 4")), content_type=None)
    assert model.generate(REQUEST).text == "Final Answer: 4"


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("data", "problem"),
    [
        pytest.param(b"[" * 50_000 + b"]" * 50_000, "nested too deeply", id="deep"),
        pytest.param(
            b'{"usage": {"prompt_tokens": 1' + b"0" * 5000 + b"}}",
            "a number has more than 4300 digits",
            id="5000-digit-number",
        ),
    ],
)
def test_json_python_cannot_load_is_an_error(provider, data, problem, sample_dataset, server):
    server.default = raw(data)
    model = provider.adapter(sample_dataset, server, retries=0)
    message = error_of(model)
    assert problem in message
    assert len(message) < 600  # the body is clipped, not echoed


# -- JSON of the wrong shape: not retried ----------------------------------------------------------


def usage_body(provider: Provider, **usage: Any) -> dict[str, Any]:
    body = provider.reply("Final Answer: 4")
    body["usage"] = usage
    return body


def openai_reply(message: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": message}]}


def tool_call(**function: Any) -> dict[str, Any]:
    return {"id": "c1", "type": "function", "function": function}


WRONG_SHAPES = [
    pytest.param(OPENAI, {}, "choices is missing", id="openai-empty-object"),
    pytest.param(
        OPENAI, {"choices": None}, "choices is null, not a list", id="openai-null-choices"
    ),
    pytest.param(OPENAI, {"choices": {}}, "choices is an object, not a list", id="openai-dict"),
    pytest.param(OPENAI, [], "the body is a list, not an object", id="openai-array"),
    pytest.param(OPENAI, "<html>", "the body is a string, not an object", id="openai-json-str"),
    pytest.param(OPENAI, None, "the body is null, not an object", id="openai-null"),
    pytest.param(OPENAI, 7, "the body is an integer, not an object", id="openai-number"),
    pytest.param(OPENAI, {"choices": [5]}, "choices[0] is an integer, not an object", id="choice"),
    pytest.param(
        OPENAI,
        {"choices": [{"message": 5}]},
        "choices[0].message is an integer, not an object",
        id="openai-message-number",
    ),
    pytest.param(
        OPENAI, {"choices": [{}]}, "choices[0].message is missing", id="openai-no-message"
    ),
    pytest.param(
        OPENAI,
        openai_reply({"content": 5}),
        "choices[0].message.content is an integer, not a string or null",
        id="openai-content-number",
    ),
    pytest.param(
        OPENAI,
        openai_reply({"content": [{"type": "text", "text": "4"}]}),
        "choices[0].message.content is a list, not a string or null",
        id="openai-content-parts",
    ),
    pytest.param(
        OPENAI,
        openai_reply({"content": None, "tool_calls": {"id": "c1"}}),
        "choices[0].message.tool_calls is an object, not a list or null",
        id="openai-tool-calls-object",
    ),
    pytest.param(
        OPENAI,
        openai_reply({"tool_calls": [tool_call(arguments="{}")]}),
        "choices[0].message.tool_calls[0].function.name is missing",
        id="openai-no-tool-name",
    ),
    pytest.param(
        OPENAI,
        openai_reply({"tool_calls": [tool_call(name="OCR", arguments={"image": "a.jpg"})]}),
        "choices[0].message.tool_calls[0].function.arguments is an object, not a string or null",
        id="openai-arguments-object",
    ),
    pytest.param(
        OPENAI,
        usage_body(OPENAI, prompt_tokens="12", completion_tokens=3),
        "usage.prompt_tokens is a string, not an integer or null",
        id="openai-usage-string",
    ),
    pytest.param(
        OPENAI,
        usage_body(OPENAI, prompt_tokens=12, completion_tokens=-3),
        "usage.completion_tokens is negative, not a token count",
        id="openai-usage-negative",
    ),
    pytest.param(
        OPENAI,
        usage_body(OPENAI, prompt_tokens=10**40, completion_tokens=3),
        "usage.prompt_tokens is more than 1,000,000,000, not a token count",
        id="openai-usage-huge",
    ),
    pytest.param(
        OPENAI,
        usage_body(OPENAI, prompt_tokens=True, completion_tokens=3),
        "usage.prompt_tokens is a boolean, not an integer or null",
        id="openai-usage-bool",
    ),
    pytest.param(
        OPENAI,
        usage_body(OPENAI, prompt_tokens=12.5, completion_tokens=3),
        "usage.prompt_tokens is a number, not an integer or null",
        id="openai-usage-float",
    ),
    pytest.param(
        OPENAI,
        {"choices": [], "usage": [1, 2]},
        "usage is a list, not an object or null",
        id="openai-usage-list",
    ),
    pytest.param(ANTHROPIC, {}, "content is missing", id="anthropic-empty-object"),
    pytest.param(
        ANTHROPIC, {"content": None}, "content is null, not a list", id="anthropic-null-content"
    ),
    pytest.param(
        ANTHROPIC, {"content": "4"}, "content is a string, not a list", id="anthropic-str-content"
    ),
    pytest.param(ANTHROPIC, [1], "the body is a list, not an object", id="anthropic-array"),
    pytest.param(
        ANTHROPIC, {"content": [5]}, "content[0] is an integer, not an object", id="block"
    ),
    pytest.param(
        ANTHROPIC, {"content": [{"text": "4"}]}, "content[0].type is missing", id="untyped-block"
    ),
    pytest.param(
        ANTHROPIC,
        {"content": [{"type": "text", "text": 4}]},
        "content[0].text is an integer, not a string",
        id="anthropic-text-number",
    ),
    pytest.param(
        ANTHROPIC,
        {"content": [{"type": "tool_use", "id": "t1", "name": "OCR"}]},
        "content[0].input is missing",
        id="anthropic-no-input",
    ),
    pytest.param(
        ANTHROPIC,
        {"content": [{"type": "tool_use", "id": "t1", "name": None, "input": {}}]},
        "content[0].name is null, not a string",
        id="anthropic-null-name",
    ),
    pytest.param(
        ANTHROPIC,
        usage_body(ANTHROPIC, input_tokens="12", output_tokens=3),
        "usage.input_tokens is a string, not an integer or null",
        id="anthropic-usage-string",
    ),
    pytest.param(
        ANTHROPIC,
        usage_body(ANTHROPIC, input_tokens=-1, output_tokens=3),
        "usage.input_tokens is negative, not a token count",
        id="anthropic-usage-negative",
    ),
    pytest.param(
        ANTHROPIC,
        usage_body(ANTHROPIC, input_tokens=1, output_tokens=2**64),
        "usage.output_tokens is more than 1,000,000,000, not a token count",
        id="anthropic-usage-huge",
    ),
]


@pytest.mark.parametrize(("provider", "body", "problem"), WRONG_SHAPES)
def test_json_of_the_wrong_shape_is_an_error_not_retried(
    provider, body, problem, sample_dataset, server
):
    data = json.dumps(body)
    server.default = raw(data)
    model = provider.adapter(sample_dataset, server, retries=3)
    assert error_of(model) == (
        f"{model.endpoint} answered HTTP 200 with JSON that is not {provider.expected} "
        f"({problem}): {chat.clip(data)}"
    )
    assert len(server.requests) == 1


# -- an error object in a 200 body ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "body"),
    [
        pytest.param(
            OPENAI, {"error": {"message": "upstream timed out", "code": 504}}, id="openai-code"
        ),
        pytest.param(
            OPENAI,
            {"error": {"message": "upstream timed out", "type": "server_error", "code": None}},
            id="openai-type",
        ),
        pytest.param(
            ANTHROPIC,
            {
                "type": "error",
                "error": {"type": "overloaded_error", "message": "upstream timed out"},
            },
            id="anthropic-overloaded",
        ),
    ],
)
def test_a_transient_error_in_a_200_body_is_retried(provider, body, sample_dataset, server):
    server.default = ok(provider)

    server.then(Step(body))
    model = provider.adapter(sample_dataset, server, retries=1)
    assert model.generate(REQUEST).text == "Final Answer: ok"
    assert len(server.requests) == 2

    reset(server, Step(body))
    assert error_of(model).endswith(
        f"giving up after 2 attempts: {model.endpoint} answered HTTP 200 with an error instead "
        f"of {provider.expected}: 'upstream timed out'"
    )


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_permanent_error_in_a_200_body_is_not_retried(provider, sample_dataset, server):
    body = {"error": {"message": "model 'x' not found", "type": "invalid_request_error"}}
    server.default = Step(body)
    model = provider.adapter(sample_dataset, server, retries=3)
    assert error_of(model) == (
        f"{model.endpoint} answered HTTP 200 with an error instead of {provider.expected}: "
        "\"model 'x' not found\""
    )
    assert len(server.requests) == 1


def test_an_error_string_in_a_200_body_is_its_message(sample_dataset, server):
    server.default = Step({"error": "no such route"})
    model = OPENAI.adapter(sample_dataset, server)
    assert error_of(model).endswith("with an error instead of a chat completion: 'no such route'")


# -- well-formed, even if odd: a reply the harness scores -----------------------------------------


@pytest.mark.parametrize(
    ("provider", "body", "text"),
    [
        pytest.param(OPENAI, {"choices": []}, "", id="openai-no-choices"),
        pytest.param(OPENAI, openai_reply({"content": None}), "", id="openai-null-content"),
        pytest.param(OPENAI, openai_reply({"content": ""}), "", id="openai-empty-content"),
        pytest.param(OPENAI, openai_reply({}), "", id="openai-no-content"),
        pytest.param(
            OPENAI,
            {**openai_reply({"content": " 4 "}), "usage": None, "object": 5, "extra": [[{}]]},
            "4",
            id="openai-odd-extras",
        ),
        pytest.param(ANTHROPIC, {"content": []}, "", id="anthropic-no-content"),
        pytest.param(
            ANTHROPIC,
            {"content": [{"type": "thinking", "thinking": 5}, {"type": "text", "text": "4"}]},
            "4",
            id="anthropic-unknown-block",
        ),
    ],
)
def test_well_formed_odd_replies_are_scored(provider, body, text, sample_dataset, server):
    server.default = Step(body)
    output = provider.adapter(sample_dataset, server).generate(REQUEST)
    assert output.text == text
    assert output.usage is not None
    assert (output.usage.input_tokens, output.usage.output_tokens) == (0, 0)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_usage_is_read_and_booked(provider, sample_dataset, server):
    body = provider.reply("Final Answer: 4")
    body["usage"] = {provider.usage_keys[0]: 10**9, provider.usage_keys[1]: None}
    server.default = Step(body)
    usage = provider.adapter(sample_dataset, server).generate(REQUEST).usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.calls) == (10**9, 0, 1)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_lone_surrogate_in_the_reply_reaches_the_harness(provider, sample_dataset, server):
    body = json.dumps(provider.reply("Final Answer: \ud83d"))
    assert "\\ud83d" in body  # sent as a JSON escape, as a server writing ASCII JSON would
    server.default = raw(body)
    output = provider.adapter(sample_dataset, server).generate(REQUEST)
    assert output.text == "Final Answer: \ud83d"


def test_openai_tool_calls_are_read(sample_dataset, server):
    calls = [
        tool_call(name="OCR", arguments='{"image": "a.jpg"}'),
        {"id": "c2", "type": "custom", "custom": {"name": "x", "input": "y"}},
        {"type": "function", "function": {"name": "Calculator", "arguments": None}},
    ]
    server.default = Step(openai_reply({"content": None, "tool_calls": calls}))
    output = OPENAI.adapter(sample_dataset, server).generate(REQUEST)
    assert output.tool_calls == (
        ToolCall("OCR", {"image": "a.jpg"}, "c1"),
        ToolCall("Calculator", {}, ""),
    )


# -- the served-model lookup at startup reads its answer the same way ---------------------------


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        pytest.param(
            raw(NGINX_502, "text/html"),
            f"with a text/html body, not a model list: {NGINX_502_QUOTED}",
            id="html",
        ),
        pytest.param(
            Step({"data": [{"name": "x"}]}),
            "with JSON that is not a model list (data[0].id is missing): "
            """'{"data": [{"name": "x"}]}'""",
            id="wrong-shape",
        ),
        pytest.param(
            raw(b'{"data": ['),
            "that cannot be read as JSON (invalid JSON at line 1 column 11: Expecting value)",
            id="truncated",
        ),
    ],
)
def test_a_broken_models_listing_is_a_usage_error_naming_it(
    answer, problem, sample_dataset, server
):
    server.models_answer = answer
    generation = GenerationSettings(base_url=server.url)
    context = ModelContext(sample_dataset, ("step",), Path.cwd(), generation=generation)
    with pytest.raises(GtaUsageError) as info:
        make_model("qwen1.5-7b", context)  # a catalog name: the served name is looked up
    message = str(info.value)
    assert message.startswith(
        f"cannot list the models served at {server.url}: {server.url} answered HTTP 200 "
    )
    assert problem in message
    assert message.endswith(
        ". Start the server, fix --gta-base-url, or pass --gta-served-model=NAME."
    )


# -- the key never leaves -------------------------------------------------------------------------


def echo_authorization(record: Recorded) -> Step:
    headers = {k.lower(): v for k, v in record.headers.items()}
    return raw(f"<pre>you sent {headers.get('authorization')}</pre>", "text/html")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_body_echoing_the_key_is_redacted(provider, sample_dataset, server):
    server.default = echo_authorization
    model = provider.adapter(sample_dataset, server)
    assert error_of(model).endswith("'<pre>you sent Bearer [redacted]</pre>'")


# -- anything at all: a reply or an infrastructure error, nothing else ----------------------------

#: Stand-ins replaced in the serialised JSON by text ``json.dumps`` cannot or will not write.
_SPECIAL = re.compile(r'"@@(huge|deep|nan)(\d+)@@"')


def _special(match: re.Match[str]) -> str:
    kind, size = match.group(1), int(match.group(2))
    if kind == "huge":
        return "1" + "0" * size
    if kind == "deep":
        return "[" * size + "]" * size
    return "NaN"


surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
texts = st.text(alphabet=st.characters() | surrogates, max_size=12)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | texts
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=10,
)
specials = st.builds(
    "@@{}{}@@".format,
    st.sampled_from(["huge", "deep", "nan"]),
    st.sampled_from([3, 40, 400, 5000]),
)
replacements = json_values | specials | st.sampled_from([-1, 10**12, True, "", [], {}, None])


def _slots(value: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in ``value``, for a mutation to pick from."""
    found: list[tuple[Any, Any]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        pairs = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in pairs:
            found.append((item, key))
            if isinstance(child, dict | list):
                stack.append(child)
    return found


@st.composite
def mutated_reply(draw: st.DrawFn, provider: Provider) -> str:
    """A valid reply with a few subtrees deleted or replaced by wrong types or worse."""
    tool = {"type": "tool_use", "id": "t1", "name": "OCR", "input": {"image": "a.jpg"}}
    body = (
        chat_completion("Final Answer: 4", tool_calls=[tool_call(name="OCR", arguments="{}")])
        if provider is OPENAI
        else anthropic_message([{"type": "text", "text": "Final Answer: 4"}, tool])
    )
    body = copy.deepcopy(body)
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        slots = _slots(body)
        if not slots:
            break
        container, key = draw(st.sampled_from(slots))
        if draw(st.booleans()):
            del container[key]
        else:
            container[key] = draw(replacements)
    return _SPECIAL.sub(_special, json.dumps(body))


def bodies(provider: Provider) -> st.SearchStrategy[bytes]:
    # json.dumps escapes every non-ASCII character, lone surrogates included.
    encoded = (json_values.map(json.dumps) | mutated_reply(provider)).map(str.encode)
    whole = st.binary(max_size=200) | encoded
    cut = st.tuples(encoded, st.integers(min_value=0, max_value=400)).map(lambda t: t[0][: t[1]])
    return whole | cut


answers = st.tuples(
    st.sampled_from([200] * 8 + [201, 203, 400, 404, 418, 429, 500, 502, 503]),
    st.sampled_from(
        ["application/json", "application/json; charset=utf-8", "text/html", "text/plain", None]
    ),
)


@pytest.fixture(scope="module")
def hostile_models(shared_server, sample_dataset) -> dict[str, chat.ChatAdapter]:
    # Module scope for Hypothesis (one server and adapter for all examples): set the key here,
    # as the function-scoped autouse fixture has not run yet.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", SECRET)
        patch.setenv("ANTHROPIC_API_KEY", SECRET)
        return {
            p.name: p.adapter(sample_dataset, shared_server, retries=0, timeout=10)
            for p in (OPENAI, ANTHROPIC)
        }


def _check_any_answer(model: chat.ChatAdapter, server: ScriptedServer, answer: Step) -> None:
    reset(server, answer)
    try:
        output = model.generate(REQUEST)
    except GtaInfrastructureError as exc:
        message = str(exc)
        assert model.endpoint in message
        assert "could not be read" not in message, "the last-resort guard caught it"
        assert SECRET not in message
        return
    assert isinstance(output, ModelOutput)
    assert isinstance(output.text, str)
    assert output.usage is not None
    assert 0 <= output.usage.input_tokens <= chat.MAX_TOKEN_COUNT
    assert 0 <= output.usage.output_tokens <= chat.MAX_TOKEN_COUNT
    for call in output.tool_calls:
        assert isinstance(call.name, str)
        assert isinstance(call.arguments, dict)


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_any_answer_is_a_reply_or_an_infrastructure_error(provider, hostile_models, shared_server):
    model = hostile_models[provider.name]

    @settings(
        max_examples=120,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(body=bodies(provider), answer=answers)
    def check(body: bytes, answer: tuple[int, str | None]) -> None:
        status, content_type = answer
        step = Step(raw=body, status=status, content_type=content_type)
        _check_any_answer(model, shared_server, step)

    check()


# -- black box -------------------------------------------------------------------------------------


def test_an_html_endpoint_gives_errors_tables_and_no_traceback(pytester, server):
    server.default = raw(NGINX_502, "text/html")
    result = pytester.runpytest(
        SAMPLE_DATA,
        FAST_SIM,
        "--gta-model=openai/x",
        f"--gta-base-url={server.url}",
        "--gta-mode=step,e2e",
        "--gta-ids=0,1",
        "--gta-retries=2",
        "--gta-report=r.json",
    )
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(
        [
            f"*step-0: infrastructure error: {server.url} answered HTTP 200 with a text/html body,"
            " not a chat completion: '<html> <head><title>502 Bad Gateway</title>*",
            "*GTA results*",
            "Table 4, step-by-step mode (percent)",
            "Table 4, end-to-end mode (percent)",
            "Outcomes",
            "mode*passed*failed*error*skipped*pass rate",
            "step*0*0*2*0",
            "e2e*0*0*2*0",
        ]
    )
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output
    assert "INTERNALERROR" not in output
    assert "AttributeError" not in output
    assert SECRET not in output
    # not retried (the same page every time): each request went out once; running ahead
    # (--gta-concurrency) sends a step case's later prompts before its first one failed
    posted = [json.dumps(body, sort_keys=True) for body in server.posted()]
    assert len(posted) == len(set(posted))
    assert 4 <= len(posted) <= 8
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["outcomes"] == {"passed": 0, "failed": 0, "error": 4, "skipped": 0}
    assert all("with a text/html body" in case["message"] for case in report["cases"])
