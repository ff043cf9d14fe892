"""The pure OpenAI chat-completions converters, without a server or a client.

What the ``openai`` adapter sends and reads end to end is tested against a scripted server in
``test_openai.py``; hostile tool-call arguments in ``test_hostile_inputs.py``.
"""

from __future__ import annotations

import base64
import json
import re

import pytest

from pytest_gta.models.chat import MalformedReply
from pytest_gta.models.generation import GenerationSettings, official_body
from pytest_gta.models.openai_convert import (
    TOOL_IMAGE_NOTE,
    completion_output,
    image_data_url,
    model_ids,
    native_messages,
    native_tools,
    parse_arguments,
    request_body,
)
from pytest_gta.protocol.native import INVALID_JSON
from pytest_gta.types import (
    CaseContext,
    ChatMessage,
    ModelOutput,
    ModelRequest,
    ToolCall,
    ToolMeta,
    ToolParam,
    Usage,
)
from tests.helpers.paths import SAMPLE

IMAGE = str(SAMPLE / "image" / "image_0.jpg")
OCR = ToolMeta(
    "OCR",
    "Reads the text in an image.",
    inputs=(
        ToolParam("image", "image", "The picture"),
        ToolParam("text", "bbox", optional=True),
        ToolParam("text", None),  # unnamed inputs are not parameters
    ),
    outputs=(ToolParam("text", "lines"),),
)


def _request(*messages: ChatMessage, protocol: str = "native", tools=(OCR,)) -> ModelRequest:
    return ModelRequest(tuple(messages), tuple(tools), CaseContext("1", "step", 0), protocol)


def _image_part() -> dict:
    encoded = base64.b64encode((SAMPLE / "image" / "image_0.jpg").read_bytes()).decode()
    return {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{encoded}"}}


# -- requests -------------------------------------------------------------------------------------


def test_image_data_url_is_the_file_base64_encoded_with_its_type(tmp_path):
    assert image_data_url(IMAGE) == _image_part()["image_url"]["url"]
    unknown = tmp_path / "picture.unknownext"
    unknown.write_bytes(b"\x89PNG")
    assert image_data_url(str(unknown)) == "data:image/jpeg;base64,iVBORw=="


def test_native_messages_for_each_role():
    messages = [
        ChatMessage("system", "Use tools."),
        ChatMessage("user", "What does it say?", images=(IMAGE,)),
        ChatMessage(
            "assistant",
            "",
            tool_calls=(
                ToolCall("OCR", {"image": IMAGE}, "call_abc"),
                ToolCall("Calculator", {"expression": "1+1 ≠ 3"}),
            ),
        ),
        ChatMessage("tool", "TOTAL 9.24", tool_call_id="call_abc"),
        ChatMessage("tool", "2"),
        ChatMessage("assistant", "9.24"),
    ]
    assert native_messages(messages, vision=False) == [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "What does it say?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "OCR", "arguments": json.dumps({"image": IMAGE})},
                },
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "Calculator",
                        "arguments": '{"expression": "1+1 ≠ 3"}',
                    },
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc", "content": "TOTAL 9.24"},
        {"role": "tool", "tool_call_id": "call_0", "content": "2"},
        {"role": "assistant", "content": "9.24"},
    ]


def test_native_messages_show_images_to_vision_models_only():
    messages = [
        ChatMessage("user", "What does it say?", images=(IMAGE,)),
        ChatMessage("tool", "an image", tool_call_id="c", images=(IMAGE,)),
    ]
    user = {
        "role": "user",
        "content": [{"type": "text", "text": "What does it say?"}, _image_part()],
    }
    tool = {"role": "tool", "tool_call_id": "c", "content": "an image"}
    picture = {
        "role": "user",
        "content": [{"type": "text", "text": TOOL_IMAGE_NOTE}, _image_part()],
    }
    assert native_messages(messages, vision=True) == [user, tool, picture]
    assert native_messages(messages, vision=False) == [
        {"role": "user", "content": "What does it say?"},
        tool,
    ]


def test_native_tools_are_function_tools_from_the_tool_meta():
    assert native_tools(_request()) == [
        {
            "type": "function",
            "function": {
                "name": "OCR",
                "description": "Reads the text in an image.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "image": {
                            "type": "string",
                            "description": "The picture (absolute path of the image file)",
                        },
                        "bbox": {"type": "string", "description": ""},
                    },
                    "required": ["image"],
                },
            },
        }
    ]
    assert native_tools(_request(tools=())) == []


def test_react_body_is_the_official_one_with_seed_and_extra_last():
    messages = (ChatMessage("system", "prompt"), ChatMessage("user", "question"))
    request = _request(*messages, protocol="react")
    settings = GenerationSettings(max_tokens=64, temperature=0.7, seed=3)
    body = request_body(request, "gpt-4", settings, ["Observation:"], extra={"top_p": 0.5})
    official = official_body("gpt-4", messages, 64, 0.7, ["Observation:"])
    assert body == {**official, "seed": 3, "top_p": 0.5}
    assert list(body) == [*official, "seed", "top_p"]  # the bytes sent follow this order


def test_react_body_is_none_when_the_prompt_fills_the_window():
    request = _request(ChatMessage("user", "word " * 9000), protocol="react")
    assert request_body(request, "gpt-4", GenerationSettings()) is None


def test_native_body_carries_tools_and_images():
    request = _request(ChatMessage("user", "Read it", images=(IMAGE,)))
    settings = GenerationSettings(max_tokens=100, temperature=0.0)
    body = request_body(request, "gpt-4o", settings, "ignored", vision=True, extra={"n": 2})
    assert body == {
        "model": "gpt-4o",
        "messages": native_messages(request.messages, vision=True),
        "max_tokens": 100,
        "n": 2,
        "temperature": 0.0,
        "tools": native_tools(request),
        "tool_choice": "auto",
    }
    bare = request_body(_request(ChatMessage("user", "hi"), tools=()), "m", settings)
    assert bare is not None
    assert "tools" not in bare
    assert "tool_choice" not in bare


# -- replies --------------------------------------------------------------------------------------


def test_completion_output_reads_text_tool_calls_and_usage():
    body = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": "  Looking.\n",
                    "tool_calls": [
                        {
                            "id": "call_abc",
                            "type": "function",
                            "function": {"name": "OCR", "arguments": '{"image": "a.jpg"}'},
                        },
                        {"id": "custom_1", "type": "custom", "custom": {"name": "x"}},
                        {"type": "function", "function": {"name": "OCR", "arguments": "{oops"}},
                    ],
                }
            },
            {"message": {"content": "second choice, never read"}},
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5},
    }
    assert completion_output(body) == ModelOutput(
        "Looking.",
        Usage(12, 5),
        (
            ToolCall("OCR", {"image": "a.jpg"}, "call_abc"),
            ToolCall("OCR", {INVALID_JSON: "{oops"}, ""),
        ),
    )


def test_completion_output_tolerates_what_it_does_not_read():
    assert completion_output({"choices": []}) == ModelOutput("", Usage())
    reply = {"choices": [{"message": {"content": None}}], "usage": None}
    assert completion_output(reply) == ModelOutput("", Usage())


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("<html>", "the body is a string, not an object"),
        ({}, "choices is missing"),
        ({"choices": {}}, "choices is an object, not a list"),
        ({"choices": [1]}, "choices[0] is an integer, not an object"),
        ({"choices": [{}]}, "choices[0].message is missing"),
        ({"choices": [{"message": {"content": 1}}]}, "choices[0].message.content is an integer"),
        (
            {"choices": [{"message": {"tool_calls": [{"function": {"arguments": "{}"}}]}}]},
            "choices[0].message.tool_calls[0].function.name is missing",
        ),
        ({"choices": [], "usage": {"prompt_tokens": -1}}, "usage.prompt_tokens is negative"),
    ],
    ids=[
        "text",
        "no-choices",
        "choices-object",
        "choice-int",
        "no-message",
        "content-int",
        "call-no-name",
        "negative-usage",
    ],
)
def test_completion_output_names_what_is_malformed(body, message):
    with pytest.raises(MalformedReply, match=re.escape(message)):
        completion_output(body)


def test_model_ids_of_a_models_listing():
    listing = {"object": "list", "data": [{"id": "qwen", "object": "model"}, {"id": "llama"}]}
    assert model_ids(listing) == ["qwen", "llama"]
    assert model_ids({"data": []}) == []
    for body, message in [
        ([], "the body is a list, not an object"),
        ({"models": []}, "data is missing"),
        ({"data": [{"name": "qwen"}]}, "data[0].id is missing"),
        ({"data": [{"id": 7}]}, "data[0].id is an integer, not a string"),
    ]:
        with pytest.raises(MalformedReply, match=re.escape(message)):
            model_ids(body)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"image": "a.jpg", "top": 3}', {"image": "a.jpg", "top": 3}),
        ("{}", {}),
        ("", {}),
        (None, {}),
        ("image=a.jpg", {INVALID_JSON: "image=a.jpg"}),
        ('"a.jpg"', {INVALID_JSON: '"a.jpg"'}),
    ],
    ids=["object", "empty-object", "empty", "none", "not-json", "not-an-object"],
)
def test_parse_arguments_keeps_anything_but_a_json_object_raw(raw, expected):
    assert parse_arguments(raw) == expected
