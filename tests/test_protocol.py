from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gta.errors import GtaInfrastructureError, GtaToolError
from pytest_gta.protocol import react as p
from pytest_gta.types import ChatMessage, ResultItem, ToolMeta, ToolParam, ToolResult

PARAM_DESC = (
    "If you call this tool, you must pass arguments in the JSON format {key: value}, "
    "where the key is the parameter name."
)


def make_meta(name: str, *inputs: tuple[str, str, bool], description: str = "A tool.") -> ToolMeta:
    params = tuple(
        ToolParam(type=kind, name=pname, description=None, optional=optional)
        for kind, pname, optional in inputs
    )
    return ToolMeta(name, description, params, (ToolParam("text", None),))


OCR = make_meta("OCR", ("image", "image", False))
SEARCH = make_meta("GoogleSearch", ("text", "query", False), ("int", "k", True))
BBOX = make_meta(
    "TextToBbox", ("image", "image", False), ("text", "text", False), ("bool", "top1", True)
)
SCALE = make_meta("Scale", ("float", "factor", False), ("audio", "clip", True))
TOOLS = {t.name: t for t in (OCR, SEARCH, BBOX, SCALE)}


class Runner:
    def __init__(self, result: ToolResult | None = None, error: Exception | None = None) -> None:
        self.result = result if result is not None else ToolResult.text("ok")
        self.error = error
        self.calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    def __call__(
        self, meta: ToolMeta, arguments: dict[str, Any], converted: dict[str, Any]
    ) -> ToolResult:
        self.calls.append((meta.name, arguments, converted))
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture
def image(sample_root: Path) -> str:
    return str((sample_root / "image" / "image_0.jpg").absolute())


def run_reply(reply: str, runner: Runner | None = None, **kwargs: Any) -> p.ActionRecord:
    return p.execute(p.parse_reply(reply), TOOLS, runner or Runner(), **kwargs)


# --------------------------------------------------------------------------------------------
# Prompt rendering


def test_render_system_prompt_full_text_for_two_tools():
    ocr = ToolMeta(
        "OCR",
        "Reads the text in an image.",
        (ToolParam("image", "image", None),),
        (ToolParam("text", None, "The text."),),
    )
    draw = ToolMeta(
        "DrawBox",
        "Draws a box on the image's region.",
        (
            ToolParam("image", "image", None),
            ToolParam("text", "bbox", "The box as (x1, y1, x2, y2)."),
            ToolParam("text", "annotation", "A label.", optional=True),
        ),
        (ToolParam("image", None, None),),
    )
    expected = (
        "You are a assistant who can utilize external tools.\n"
        "[{'name': 'OCR', 'description': 'Reads the text in an image.', "
        "'parameters': [{'name': 'image', 'description': None, 'type': 'STRING'}], "
        "'required': ['image'], "
        "'parameter_description': 'If you call this tool, you must pass arguments in the JSON "
        "format {key: value}, where the key is the parameter name.'}, "
        "{'name': 'DrawBox', 'description': \"Draws a box on the image's region.\", "
        "'parameters': [{'name': 'image', 'description': None, 'type': 'STRING'}, "
        "{'name': 'bbox', 'description': 'The box as (x1, y1, x2, y2).', 'type': 'STRING'}, "
        "{'name': 'annotation', 'description': 'A label.', 'type': 'STRING'}], "
        "'required': ['image', 'bbox'], "
        "'parameter_description': 'If you call this tool, you must pass arguments in the JSON "
        "format {key: value}, where the key is the parameter name.'}]\n"
        "To use a tool, please use the following format:\n"
        "```\n"
        "Thought:Think what you need to solve, do you need to use tools?\n"
        "Action:the tool name, should be one of [['OCR', 'DrawBox']]\n"
        "Action Input:the input to the action\n"
        "```\n"
        "The response after utilizing tools should using the following format:\n"
        "```\n"
        "Response:the results after call the tool.\n"
        "```\n"
        "If you already know the answer, or you do not need to use tools,\n"
        "please using the following format to reply:\n"
        "```\n"
        "Thought:the thought process to get the final answer\n"
        "Final Answer:final answer\n"
        "```\n"
        "Begin!"
    )
    assert p.render_system_prompt([ocr, draw]) == expected


def test_render_system_prompt_matches_paper_figure_43_tool_list():
    def official(name: str, description: str, *inputs: tuple[str, str | None]) -> ToolMeta:
        params = tuple(ToolParam("image" if n == "image" else "text", n, d) for n, d in inputs)
        return ToolMeta(name, description, params, ())

    tools = [
        official("OCR", "This tool can recognize all text on the input image.", ("image", None)),
        official(
            "CountGivenObject",
            "The tool can count the number of a certain object in the image.",
            ("image", None),
            ("text", "The object description in English."),
        ),
        official(
            "ImageDescription",
            "A useful tool that returns a brief description of the input image.",
            ("image", None),
        ),
    ]
    figure_43_list = (
        "[{'name': 'OCR', 'description': 'This tool can recognize all text on the input image.', "
        "'parameters': [{'name': 'image', 'description': None, 'type': 'STRING'}], "
        "'required': ['image'], 'parameter_description': '" + PARAM_DESC + "'}, "
        "{'name': 'CountGivenObject', 'description': 'The tool can count the number of a certain "
        "object in the image.', 'parameters': [{'name': 'image', 'description': None, 'type': "
        "'STRING'}, {'name': 'text', 'description': 'The object description in English.', "
        "'type': 'STRING'}], 'required': ['image', 'text'], 'parameter_description': '"
        + PARAM_DESC
        + "'}, {'name': 'ImageDescription', 'description': 'A useful tool that returns a brief "
        "description of the input image.', 'parameters': [{'name': 'image', 'description': "
        "None, 'type': 'STRING'}], 'required': ['image'], 'parameter_description': '"
        + PARAM_DESC
        + "'}]"
    )
    prompt = p.render_system_prompt(tools)
    lines = prompt.split("\n")
    assert lines[0] == "You are a assistant who can utilize external tools."
    assert lines[1] == figure_43_list
    assert lines[5] == (
        "Action:the tool name, should be one of [['OCR', 'CountGivenObject', 'ImageDescription']]"
    )


def test_tool_description_key_order_and_values():
    desc = p.tool_description(SEARCH)
    assert list(desc) == ["name", "description", "parameters", "required", "parameter_description"]
    assert desc == {
        "name": "GoogleSearch",
        "description": "A tool.",
        "parameters": [
            {"name": "query", "description": None, "type": "STRING"},
            {"name": "k", "description": None, "type": "NUMBER"},
        ],
        "required": ["query"],
        "parameter_description": PARAM_DESC,
    }
    assert [list(param) for param in desc["parameters"]] == [["name", "description", "type"]] * 2


@pytest.mark.parametrize(
    ("kind", "announced"),
    [
        ("image", "STRING"),
        ("text", "STRING"),
        ("audio", "STRING"),
        ("file", "STRING"),
        ("int", "NUMBER"),
        ("float", "FLOAT"),
        ("bool", "BOOLEAN"),
    ],
    ids=["image", "text", "audio", "file", "int", "float", "bool"],
)
def test_tool_description_type_names(kind, announced):
    meta = make_meta("T", (kind, "x", False))
    assert p.tool_description(meta)["parameters"] == [
        {"name": "x", "description": None, "type": announced}
    ]


def test_tool_description_required_lists_only_non_optional_inputs():
    assert p.tool_description(BBOX)["required"] == ["image", "text"]
    assert p.tool_description(make_meta("T", ("int", "n", True)))["required"] == []


def test_parameter_description_constant():
    assert p.PARAMETER_DESCRIPTION == PARAM_DESC


def test_files_message():
    assert p.files_message(["/d/image/a.jpg", "/d/image/b.jpg"]) == (
        "The related files are at `/d/image/a.jpg`, `/d/image/b.jpg`"
    )
    assert p.files_message(["/d/x.jpg"]) == "The related files are at `/d/x.jpg`"


def test_format_reference_call_uses_json_dumps_defaults():
    assert p.format_reference_call("GoogleSearch", {"query": "café", "k": 3}) == (
        'Action:GoogleSearch\nAction Input:{"query": "caf\\u00e9", "k": 3}'
    )


@pytest.mark.parametrize(
    ("content", "shown"),
    [
        ({"type": "text", "content": "9.24"}, "9.24"),
        (
            {"type": "image", "content": "image/dummy_generated_image.jpg"},
            "[image](image/dummy_generated_image.jpg)",
        ),
        ({"type": "text", "content": 9}, "9"),
        ("plain", "plain"),
    ],
    ids=["text", "image-path-as-written", "int-content", "bare-string"],
)
def test_format_tool_content(content, shown):
    assert p.format_tool_content(content) == shown


def test_react_style_history_roles_and_texts():
    history = [
        {"role": "user", "content": "Q?"},
        {
            "role": "assistant",
            "thought": "not shown",
            "tool_calls": [
                {"type": "function", "function": {"name": "OCR", "arguments": {"image": "/a.jpg"}}}
            ],
        },
        {"role": "tool", "name": "OCR", "content": {"type": "text", "content": "HELLO"}},
        {
            "role": "assistant",
            "tool_calls": [
                {"type": "function", "function": {"name": "Plot", "arguments": {"command": "x"}}}
            ],
        },
        {"role": "tool", "name": "Plot", "content": None},
        {"role": "user", "content": p.SUMMARIZE_PROMPT},
    ]
    assert p.react_style_history(history, ["/a.jpg"]) == [
        ChatMessage("system", "The related files are at `/a.jpg`"),
        ChatMessage("user", "Q?"),
        ChatMessage("assistant", 'Action:OCR\nAction Input:{"image": "/a.jpg"}'),
        ChatMessage("system", "HELLO"),
        ChatMessage("assistant", 'Action:Plot\nAction Input:{"command": "x"}'),
        ChatMessage(
            "user",
            "Please summarize the chat history and give a final answer. Do not call any tools.",
        ),
    ]


def test_react_style_history_skips_only_missing_tool_content():
    # OpenCompass tests ``step.get('content')`` on the {type, content} dict itself, so a null
    # output is skipped while an output whose text is empty is still shown (as '').
    tool_call = {
        "role": "assistant",
        "tool_calls": [{"type": "function", "function": {"name": "T", "arguments": {}}}],
    }
    history = [
        {"role": "user", "content": "Q"},
        tool_call,
        {"role": "tool", "name": "T", "content": None},
        tool_call,
        {"role": "tool", "name": "T", "content": {"type": "text", "content": ""}},
    ]
    assert [(m.role, m.content) for m in p.react_style_history(history, [])] == [
        ("user", "Q"),
        ("assistant", "Action:T\nAction Input:{}"),
        ("assistant", "Action:T\nAction Input:{}"),
        ("system", ""),
    ]


def test_react_style_history_without_files_has_no_files_message():
    assert p.react_style_history([{"role": "user", "content": "Q"}], []) == [
        ChatMessage("user", "Q")
    ]


def test_prompt_constants():
    assert p.FORCE_STOP_PROMPT == "You should directly give results\n based on history information."
    assert p.SUMMARIZE_PROMPT == (
        "Please summarize the chat history and give a final answer. Do not call any tools."
    )
    assert (p.THOUGHT, p.ACTION, p.ACTION_INPUT, p.RESPONSE, p.FINISH) == (
        "Thought:",
        "Action:",
        "Action Input:",
        "Response:",
        "Final Answer:",
    )


# --------------------------------------------------------------------------------------------
# parse_reply


@pytest.mark.parametrize(
    ("reply", "action", "action_input"),
    [
        ("Thought:x\nFinal Answer: 42 ", "FinishAction", " 42 "),
        ("Final Answer:a\nFinal Answer:b", "FinishAction", "b"),
        (
            'Action:OCR\nAction Input:{"image": "/a.jpg"}\nFinal Answer:done',
            "FinishAction",
            "done",
        ),
        (
            "Final Answer:x\nAction:OCR\nAction Input:{}",
            "FinishAction",
            "x\nAction:OCR\nAction Input:{}",
        ),
        (
            'Thought:t\nAction: OCR \nAction Input: {"image": "/a.jpg"} ',
            "OCR",
            '{"image": "/a.jpg"}',
        ),
        ('Action:OCR\nAction Input:"{"image": "/a.jpg"}"', "OCR", '{"image": "/a.jpg"}'),
        ('Action:OCR\nAction Input: " x " ', "OCR", " x "),
        (
            "Action:A\nAction Input:{1}\nAction:B\nAction Input:{2}",
            "B",
            "{1}\nAction:B\nAction Input:{2}",
        ),
        ("Action:OCR\nAction Input:", "OCR", ""),
        ("Action:OCR\nAction Input:\n```json\n{}\n```\n", "OCR", "```json\n{}\n```"),
        ("I think the answer is 4.", "NoAction", ""),
        ("Action: OCR", "NoAction", ""),
        ("Action Input: {}\nAction: OCR", "NoAction", ""),
        ("Action: OCR\nno input here", "NoAction", ""),
        ("", "NoAction", ""),
        ("Action:\nAction Input:x", "", "x"),
        ("Action:FinishAction\nAction Input: 42", "FinishAction", "42"),
    ],
    ids=[
        "finish-raw-not-stripped",
        "finish-last-occurrence",
        "finish-wins-over-action",
        "finish-before-action",
        "action-stripped",
        "input-quotes-stripped",
        "input-strip-then-quote-strip",
        "input-from-first-action-input",
        "empty-input-is-still-an-action",
        "fenced-input-kept-raw",
        "plain-text-no-action",
        "action-without-newline",
        "action-only-after-input",
        "no-action-input",
        "empty",
        "empty-action-name",
        "explicit-finish-action",
    ],
)
def test_parse_reply(reply, action, action_input):
    parsed = p.parse_reply(reply)
    assert (parsed.action, parsed.action_input) == (action, action_input)


@pytest.mark.parametrize(
    ("reply", "thought"),
    [
        ("Thought:look first\nAction:OCR\nAction Input:{}", "look first\n"),
        ("prefix Thought:a Thought:b\nFinal Answer:c", "b\n"),
        ("no markers", "no markers"),
    ],
    ids=["before-action", "last-thought-before-finish", "plain"],
)
def test_parse_reply_thought(reply, thought):
    assert p.parse_reply(reply).thought == thought


def test_parsed_reply_is_finish():
    assert p.parse_reply("Final Answer:x").is_finish is True
    assert p.parse_reply("Action:OCR\nAction Input:{}").is_finish is False
    assert p.parse_reply("nothing").is_finish is False


_fragments = st.sampled_from(
    ["Thought:", "Action:", "Action Input:", "Final Answer:", "Response:", "\n", '"', " ", "{}"]
)
_react_text = st.lists(st.one_of(st.text(max_size=8), _fragments), max_size=12).map("".join)


@given(before=_react_text, after=_react_text)
def test_property_final_answer_anywhere_is_a_finish(before, after):
    text = before + "Final Answer:" + after
    parsed = p.parse_reply(text)
    assert parsed.action == "FinishAction"
    assert parsed.is_finish
    assert parsed.action_input == text.split("Final Answer:")[-1]


@given(text=_react_text)
def test_property_parse_reply_matches_lagent_regexes(text):
    parsed = p.parse_reply(text)
    if "Final Answer:" in text:
        assert parsed.action == "FinishAction"
        return
    actions = re.findall("Action:(.*?)\n", text)
    inputs = re.findall("Action Input:(.*)", text, re.DOTALL)
    if not actions or not inputs:
        assert (parsed.action, parsed.action_input) == ("NoAction", "")
    else:
        assert parsed.action == actions[-1].strip()
        after_first = text.split("Action Input:", 1)[1]
        assert parsed.action_input == after_first.strip().strip('"')


@given(text=_react_text)
def test_property_thought_never_contains_action_or_finish_marker(text):
    thought = p.parse_reply(text).thought
    assert "Action:" not in thought
    assert "Final Answer:" not in thought


_names = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,15}", fullmatch=True)
_json_args = st.dictionaries(
    st.text(min_size=1, max_size=6),
    st.one_of(st.integers(), st.booleans(), st.none(), st.text(max_size=10)),
    max_size=4,
)
_plain_thoughts = st.text(max_size=30).filter(
    lambda t: not any(m in t for m in ("Action", "Final Answer:", "Thought:"))
)


@given(thought=_plain_thoughts, name=_names, args=_json_args)
def test_property_well_formed_call_round_trips(thought, name, args):
    reply = f"Thought:{thought}\nAction:{name}\nAction Input:{json.dumps(args)}"
    parsed = p.parse_reply(reply)
    assert parsed.action == name
    assert parsed.action_input == json.dumps(args)
    meta = ToolMeta(name, "d", tuple(ToolParam("text", key) for key in args), ())
    assert p.parse_action_input(parsed.action_input, meta) == args


# --------------------------------------------------------------------------------------------
# parse_action_input


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"query": "x"}', {"query": "x"}),
        ('{"query": "x", "k": 3}', {"query": "x", "k": 3}),
        ('```json\n{"query": "x"}\n```', {"query": "x"}),
        ('  ```json\n{"query": "x"}\n```  \n', {"query": "x"}),
        ('{"query": "x"}\n```', {"query": "x"}),
        ('```json\n  {"query": "a\\nb"}  \n```', {"query": "a\nb"}),
    ],
    ids=[
        "plain",
        "optional-given",
        "fenced",
        "fenced-with-space",
        "closing-fence-only",
        "inner-ws",
    ],
)
def test_parse_action_input_accepts(raw, expected):
    assert p.parse_action_input(raw, SEARCH) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("not json", "invalid json format: not json"),
        ("", "invalid json format: "),
        ("```json\nnope\n```", "invalid json format: nope"),
        ('```\n{"query": "x"}\n```', 'invalid json format: ```\n{"query": "x"}'),
        ('```json\n{"query": "x"}```', 'invalid json format: ```json\n{"query": "x"}```'),
        ('{"query": "x", "n": 1}', "unknown arguments: {'n'}"),
        ('{"k": 1}', "missing required arguments: {'query'}"),
        ("{}", "missing required arguments: {'query'}"),
    ],
    ids=[
        "bad-json",
        "empty",
        "fenced-bad-json-unwrapped",
        "plain-fence-not-unwrapped",
        "fence-without-newline",
        "unknown",
        "missing",
        "empty-object",
    ],
)
def test_parse_action_input_rejects(raw, message):
    with pytest.raises(p.ArgumentError) as info:
        p.parse_action_input(raw, SEARCH)
    assert str(info.value) == message


def test_parse_action_input_unknown_checked_before_missing():
    with pytest.raises(p.ArgumentError, match=r"^unknown arguments: \{'q'\}$"):
        p.parse_action_input('{"q": "x"}', SEARCH)


# --------------------------------------------------------------------------------------------
# convert_arguments


def test_convert_arguments_converts_types(image):
    converted = p.convert_arguments(SEARCH, {"query": 12, "k": "3"})
    assert converted == {"query": "12", "k": 3}
    assert p.convert_arguments(SCALE, {"factor": "2.5"}) == {"factor": 2.5}
    assert p.convert_arguments(SCALE, {"factor": 2}) == {"factor": 2.0}
    assert p.convert_arguments(BBOX, {"image": image, "text": "x", "top1": False}) == {
        "image": image,
        "text": "x",
        "top1": False,
    }


def test_convert_arguments_relative_path_is_missing_without_base_dir(sample_root):
    with pytest.raises(FileNotFoundError) as info:
        p.convert_arguments(OCR, {"image": "image/image_0.jpg"})
    assert str(info.value) == "No such file: 'image/image_0.jpg'"
    assert p.convert_arguments(OCR, {"image": "image/image_0.jpg"}, sample_root) == {
        "image": "image/image_0.jpg"
    }


@pytest.mark.parametrize(
    ("meta", "arguments", "error"),
    [
        (OCR, {"image": "/no/such/file.jpg"}, FileNotFoundError),
        (OCR, {"image": 5}, NotImplementedError),
        (SEARCH, {"query": "q", "k": "abc"}, ValueError),
        (SEARCH, {"query": "q", "k": None}, TypeError),
        (SCALE, {"factor": "big"}, ValueError),
        (SCALE, {"factor": 1.0, "clip": "/no/clip.wav"}, FileNotFoundError),
    ],
    ids=["missing-image", "non-string-image", "bad-int", "null-int", "bad-float", "audio"],
)
def test_convert_arguments_errors(meta, arguments, error):
    with pytest.raises(error):
        p.convert_arguments(meta, arguments)


# --------------------------------------------------------------------------------------------
# execute


def test_execute_success_calls_runner_with_raw_and_converted(image):
    runner = Runner(ToolResult.text("HELLO"))
    record = run_reply(f'Thought:read it\nAction:OCR\nAction Input:{{"image": "{image}"}}', runner)
    assert record == p.ActionRecord(
        "OCR",
        {"image": image},
        "SUCCESS",
        None,
        (ResultItem("text", "HELLO"),),
        "read it\n",
    )
    assert runner.calls == [("OCR", {"image": image}, {"image": image})]


def test_execute_passes_converted_arguments_separately():
    runner = Runner()
    record = run_reply('Action:GoogleSearch\nAction Input:{"query": "q", "k": "3"}', runner)
    assert record.state == "SUCCESS"
    assert record.args == {"query": "q", "k": "3"}
    assert runner.calls == [("GoogleSearch", {"query": "q", "k": "3"}, {"query": "q", "k": 3})]


@pytest.mark.parametrize(
    ("reply", "record"),
    [
        (
            "I have no idea.",
            p.ActionRecord("NoAction", {"text": ""}, "API_ERROR", "Please follow the format"),
        ),
        (
            "Action: OCR",
            p.ActionRecord("NoAction", {"text": ""}, "API_ERROR", "Please follow the format"),
        ),
        (
            "Action:NoAction\nAction Input:oops",
            p.ActionRecord("NoAction", {"text": "oops"}, "API_ERROR", "oops"),
        ),
        (
            'Action:Calculator\nAction Input:{"expression": "1+1"}',
            p.ActionRecord(
                "InvalidAction",
                {"text": '{"expression": "1+1"}'},
                "API_ERROR",
                '{"expression": "1+1"}',
            ),
        ),
        (
            "Action:Calculator\nAction Input:",
            p.ActionRecord(
                "InvalidAction",
                {"text": ""},
                "API_ERROR",
                "The action is invalid, please check the action name.",
            ),
        ),
        (
            "Action:\nAction Input:",
            p.ActionRecord(
                "InvalidAction",
                {"text": ""},
                "API_ERROR",
                "The action is invalid, please check the action name.",
            ),
        ),
        (
            "Action:Foo.run\nAction Input:x",
            p.ActionRecord("InvalidAction", {"text": "x"}, "API_ERROR", "x"),
        ),
        (
            "Action:FinishAction.run\nAction Input:x",
            p.ActionRecord("InvalidAction", {"text": "x"}, "API_ERROR", "x"),
        ),
        (
            "Action:OCR\nAction Input:not json",
            p.ActionRecord("OCR", "not json", "ARGS_ERROR", "invalid json format: not json"),
        ),
        (
            'Action:OCR\nAction Input:{"image": "/a.jpg", "zoom": 2}',
            p.ActionRecord(
                "OCR",
                '{"image": "/a.jpg", "zoom": 2}',
                "ARGS_ERROR",
                "unknown arguments: {'zoom'}",
            ),
        ),
        (
            'Action:GoogleSearch\nAction Input:{"k": 2}',
            p.ActionRecord(
                "GoogleSearch",
                '{"k": 2}',
                "ARGS_ERROR",
                "missing required arguments: {'query'}",
            ),
        ),
        (
            'Action:OCR\nAction Input:{"image": "/no/such.jpg"}',
            p.ActionRecord(
                "OCR",
                {"image": "/no/such.jpg"},
                "API_ERROR",
                "FileNotFoundError(\"No such file: '/no/such.jpg'\")",
            ),
        ),
        (
            'Action:OCR\nAction Input:{"image": "image/image_0.jpg"}',
            p.ActionRecord(
                "OCR",
                {"image": "image/image_0.jpg"},
                "API_ERROR",
                "FileNotFoundError(\"No such file: 'image/image_0.jpg'\")",
            ),
        ),
        (
            'Action:GoogleSearch\nAction Input:{"query": "q", "k": "abc"}',
            p.ActionRecord(
                "GoogleSearch",
                {"query": "q", "k": "abc"},
                "API_ERROR",
                "ValueError(\"invalid literal for int() with base 10: 'abc'\")",
            ),
        ),
        (
            'Action:OCR\nAction Input:{"image": 7}',
            p.ActionRecord(
                "OCR",
                {"image": 7},
                "API_ERROR",
                "NotImplementedError(\"The value type `<class 'int'>` is not supported by "
                '`ImageIO`")',
            ),
        ),
        (
            'Action:OCR.other\nAction Input:{"image": "/a.jpg"}',
            p.ActionRecord("OCR", '{"image": "/a.jpg"}', "API_ERROR", "invalid API: other"),
        ),
    ],
    ids=[
        "no-action",
        "action-without-newline",
        "explicit-noaction-input-is-message",
        "tool-not-offered",
        "tool-not-offered-empty-input",
        "empty-name",
        "unknown-dotted",
        "finish-with-api-is-invalid",
        "bad-json",
        "unknown-arg",
        "missing-arg",
        "missing-image",
        "relative-image-is-missing",
        "bad-int",
        "non-string-image",
        "invalid-api",
    ],
)
def test_execute_error_records(reply, record):
    runner = Runner()
    got = run_reply(reply, runner)
    assert (got.type, got.args, got.state, got.errmsg, got.result) == (
        record.type,
        record.args,
        record.state,
        record.errmsg,
        None,
    )
    assert runner.calls == []


def test_execute_relative_image_path_resolves_against_base_dir(sample_root):
    runner = Runner()
    record = run_reply(
        'Action:OCR\nAction Input:{"image": "image/image_0.jpg"}', runner, base_dir=sample_root
    )
    assert record.state == "SUCCESS"
    assert runner.calls == [("OCR", {"image": "image/image_0.jpg"}, {"image": "image/image_0.jpg"})]


def test_execute_dotted_run_runs_the_tool(image):
    runner = Runner(ToolResult.text("T"))
    record = run_reply(f'Action:OCR.run\nAction Input:{{"image": "{image}"}}', runner)
    assert (record.type, record.args, record.state, record.errmsg) == (
        "OCR",
        {"image": image},
        "SUCCESS",
        None,
    )
    assert record.result == (ResultItem("text", "T"),)
    assert runner.calls == [("OCR", {"image": image}, {"image": image})]


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("Thought:easy\nFinal Answer: 42", " 42"),
        ("Action:FinishAction\nAction Input: 42 ", "42"),
        ('Action:OCR\nAction Input:{"image": "/a.jpg"}\nFinal Answer:7', "7"),
    ],
    ids=["final-answer", "finish-action", "finish-wins"],
)
def test_execute_finish(reply, answer):
    runner = Runner()
    record = run_reply(reply, runner)
    assert record.is_finish
    assert record.type == "FinishAction"
    assert record.state == "SUCCESS"
    assert record.errmsg is None
    assert record.args == {"text": answer}
    assert record.answer == answer
    assert record.to_step() == {"role": "assistant", "content": answer}
    assert runner.calls == []


def test_execute_tool_error_becomes_api_error(image):
    runner = Runner(error=GtaToolError("HTTP 400: bad image"))
    record = run_reply(f'Action:OCR\nAction Input:{{"image": "{image}"}}', runner)
    assert (record.type, record.args, record.state, record.errmsg, record.result) == (
        "OCR",
        {"image": image},
        "API_ERROR",
        "HTTP 400: bad image",
        None,
    )
    assert record.observation() == "Response:HTTP 400: bad image\n"


def test_execute_tool_error_with_empty_message_is_still_an_error(image):
    runner = Runner(error=GtaToolError(""))
    record = run_reply(f'Action:OCR\nAction Input:{{"image": "{image}"}}', runner)
    assert (record.state, record.errmsg) == ("API_ERROR", "")
    assert record.to_step() == {
        "role": "assistant",
        "error": {"type": "API_ERROR", "msg": ""},
        "tool_calls": [
            {"type": "function", "function": {"name": "OCR", "arguments": {"image": image}}}
        ],
    }
    assert record.observation() == "Response:\n"


@pytest.mark.parametrize(
    "error",
    [GtaInfrastructureError("tool server down"), RuntimeError("backend bug")],
    ids=["infrastructure", "other"],
)
def test_execute_other_runner_exceptions_propagate(image, error):
    runner = Runner(error=error)
    with pytest.raises(type(error), match=str(error)):
        run_reply(f'Action:OCR\nAction Input:{{"image": "{image}"}}', runner)
    assert len(runner.calls) == 1


def test_execute_fenced_json_input(image):
    runner = Runner()
    reply = f'Action:OCR\nAction Input:```json\n{{"image": "{image}"}}\n```'
    record = run_reply(reply, runner)
    assert record.state == "SUCCESS"
    assert record.args == {"image": image}


# --------------------------------------------------------------------------------------------
# ActionRecord rendering


def test_to_step_success_has_no_error_key():
    record = p.ActionRecord("OCR", {"image": "/a.jpg"}, result=(ResultItem("text", "HI"),))
    step = record.to_step()
    assert step == {
        "role": "assistant",
        "tool_calls": [
            {"type": "function", "function": {"name": "OCR", "arguments": {"image": "/a.jpg"}}}
        ],
    }
    assert list(step) == ["role", "tool_calls"]
    assert record.to_tool_return() == {
        "role": "tool",
        "content": [{"type": "text", "content": "HI"}],
    }
    assert record.observation() == "Response:HI\n"


def test_to_step_error_carries_type_and_message():
    record = p.ActionRecord("OCR", "not json", "ARGS_ERROR", "invalid json format: not json")
    step = record.to_step()
    assert step == {
        "role": "assistant",
        "error": {"type": "ARGS_ERROR", "msg": "invalid json format: not json"},
        "tool_calls": [{"type": "function", "function": {"name": "OCR", "arguments": "not json"}}],
    }
    assert list(step) == ["role", "error", "tool_calls"]
    assert record.to_tool_return() == {"role": "tool", "content": None}
    assert record.observation() == "Response:invalid json format: not json\n"


def test_no_action_record_rendering():
    record = run_reply("just chatting")
    assert record.to_step() == {
        "role": "assistant",
        "error": {"type": "API_ERROR", "msg": "Please follow the format"},
        "tool_calls": [
            {"type": "function", "function": {"name": "NoAction", "arguments": {"text": ""}}}
        ],
    }
    assert record.to_tool_return() == {"role": "tool", "content": None}
    assert record.observation() == "Response:Please follow the format\n"


def test_image_result_rendering(image):
    runner = Runner(ToolResult((ResultItem("image", "/out/box.png"),)))
    record = run_reply(f'Action:OCR\nAction Input:{{"image": "{image}"}}', runner)
    assert record.observation() == "Response:[image](/out/box.png)\n"
    assert record.to_tool_return() == {
        "role": "tool",
        "content": [{"type": "image", "content": "/out/box.png"}],
    }


def test_multiple_results_are_joined_by_newline():
    record = p.ActionRecord(
        "T",
        {},
        result=(ResultItem("text", "a"), ResultItem("image", "/b.png"), ResultItem("text", 3)),
    )
    assert record.observation() == "Response:a\n[image](/b.png)\n3\n"


def test_validate_only_answers_dummy_result():
    assert p.validate_only(OCR, {}, {}) == ToolResult((ResultItem("text", "Dummy Result"),))
