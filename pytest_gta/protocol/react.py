"""The Lagent 0.2 ReAct protocol exactly as the GTA leaderboard runs used it.

Everything here is a pure function of its inputs so that prompt rendering, reply parsing and the
error records can be unit-tested against the rules in SPEC section 3 and the paper's Figures 42-43,
independently of any model or tool. The behaviour mirrors, quirk for quirk:

- ``lagent.agents.react.ReActProtocol`` (template, ``parse``, ``format_response``),
- ``lagent.actions.ActionExecutor.__call__`` and the built-in ``NoAction``/``InvalidAction``/
  ``FinishAction``,
- ``lagent.actions.BaseAction.__call__`` with the ``JsonParser`` (argument errors),
- ``agentlego``'s ``LagentTool`` and ``DefaultParser`` (tool errors are ``repr(exception)``),
- OpenCompass ``LagentAgent.next_step``/``chat`` (how a step is recorded).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gta import jsonsafe
from pytest_gta.dataset import call_function
from pytest_gta.errors import GtaToolError
from pytest_gta.reach import Reach, withheld_message
from pytest_gta.types import ChatMessage, ResultItem, ToolMeta, ToolResult
from pytest_gta.vocabulary import INVALID_ACTION, NO_ACTION, State

THOUGHT = "Thought:"
ACTION = "Action:"
ACTION_INPUT = "Action Input:"
RESPONSE = "Response:"
FINISH = "Final Answer:"
RESPONSE_END = "\n"

#: Lagent 0.2 ``CALL_PROTOCOL_EN`` (paper Figure 42).
CALL_PROTOCOL_EN = """You are a assistant who can utilize external tools.
{tool_description}
To use a tool, please use the following format:
```
{thought}Think what you need to solve, do you need to use tools?
{action}the tool name, should be one of [{action_names}]
{action_input}the input to the action
```
The response after utilizing tools should using the following format:
```
{response}the results after call the tool.
```
If you already know the answer, or you do not need to use tools,
please using the following format to reply:
```
{thought}the thought process to get the final answer
{finish}final answer
```
Begin!"""

#: Lagent 0.2 ``FORCE_STOP_PROMPT_EN``, appended on the last allowed turn.
FORCE_STOP_PROMPT = "You should directly give results\n based on history information."

#: What OpenCompass appends before the last step-mode call.
SUMMARIZE_PROMPT = (
    "Please summarize the chat history and give a final answer. Do not call any tools."
)

#: ``JsonParser.PARAMETER_DESCRIPTION``, added to every tool description.
PARAMETER_DESCRIPTION = (
    "If you call this tool, you must pass arguments in the JSON format {key: value}, "
    "where the key is the parameter name."
)

FINISH_ACTION = "FinishAction"
NO_ACTION_MESSAGE = "Please follow the format"
INVALID_ACTION_MESSAGE = "The action is invalid, please check the action name."
DEFAULT_RESPONSE = "Sorry that I cannot answer your question."
#: What the official ``DummyTool`` (OpenCompass ``LagentAgent``) answers to every valid call.
DUMMY_RESULT = "Dummy Result"

#: agentlego's ``convert_type``: how input types are announced to the model.
TYPE_NAMES = {
    "image": "STRING",
    "text": "STRING",
    "audio": "STRING",
    "file": "STRING",
    "int": "NUMBER",
    "float": "FLOAT",
    "bool": "BOOLEAN",
}
_IO_CLASS = {"image": "ImageIO", "audio": "AudioIO", "file": "File"}


# --------------------------------------------------------------------------------------------
# Prompt rendering


def tool_description(meta: ToolMeta) -> dict[str, Any]:
    """The dict Lagent shows the model for one tool (key order matters: it is ``repr``-ed)."""
    return {
        "name": meta.name,
        "description": meta.description,
        "parameters": [
            {"name": p.name, "description": p.description, "type": TYPE_NAMES.get(p.type, "STRING")}
            for p in meta.inputs
        ],
        "required": list(meta.required),
        "parameter_description": PARAMETER_DESCRIPTION,
    }


def render_system_prompt(tools: Sequence[ToolMeta]) -> str:
    """The protocol system message for the offered tools (paper Figure 43).

    ``str.format`` renders both lists with ``repr``; ``action_names`` lands inside the template's
    own brackets, hence ``[['OCR', 'DrawBox']]``.
    """
    return CALL_PROTOCOL_EN.format(
        tool_description=[tool_description(t) for t in tools],
        action_names=[t.name for t in tools],
        thought=THOUGHT,
        action=ACTION,
        action_input=ACTION_INPUT,
        response=RESPONSE,
        finish=FINISH,
    )


def files_message(paths: Sequence[str]) -> str:
    """The message that tells the agent where the query's files are."""
    return "The related files are at " + ", ".join(f"`{p}`" for p in paths)


def format_reference_call(name: str, arguments: Mapping[str, Any]) -> str:
    """A reference tool call as OpenCompass replays it in step mode (no thought)."""
    return f"{ACTION}{name}\n{ACTION_INPUT}{json.dumps(arguments)}"


def format_tool_content(content: Any) -> str:
    """A reference tool output as OpenCompass shows it in step mode (no ``Response:`` prefix)."""
    if isinstance(content, Mapping):
        item = ResultItem(str(content.get("type", "text")), content.get("content"))
        return ToolResult((item,)).format()
    return str(content)


def react_style_history(
    history: Sequence[Mapping[str, Any]], files: Sequence[str]
) -> list[ChatMessage]:
    """Render a reference prefix ``dialogs[:i]`` as OpenCompass ``react_style_history`` does.

    The files message is a *system* message here (it is a user message in end-to-end mode), tool
    calls become ``Action:``/``Action Input:`` text, and empty tool outputs are dropped.
    """
    out: list[ChatMessage] = []
    if files:
        out.append(ChatMessage("system", files_message(files)))
    for step in history:
        role = step.get("role")
        if role == "user":
            out.append(ChatMessage("user", str(step.get("content"))))
        elif role == "assistant" and step.get("tool_calls"):
            function = call_function(step)
            out.append(
                ChatMessage(
                    "assistant", format_reference_call(function["name"], function["arguments"])
                )
            )
        elif role == "tool" and step.get("content"):
            out.append(ChatMessage("system", format_tool_content(step["content"])))
        elif role == "assistant" and step.get("content"):
            out.append(ChatMessage("assistant", str(step["content"])))
    return out


# --------------------------------------------------------------------------------------------
# Parsing a model turn


@dataclass(frozen=True)
class ParsedReply:
    """What ``ReActProtocol.parse`` extracts from one model turn."""

    thought: str
    action: str
    action_input: str

    @property
    def is_finish(self) -> bool:
        """Whether the turn ends the episode (a ``Final Answer:`` anywhere wins)."""
        return self.action == FINISH_ACTION


def parse_reply(message: str) -> ParsedReply:
    r"""Parse a (stripped) model turn exactly as Lagent 0.2 does.

    A ``Final Answer:`` anywhere makes the turn a finish whose answer is the raw text after its
    last occurrence. Otherwise the action is the last ``Action:(.*?)\n`` match and the input is
    ``Action Input:(.*)`` with DOTALL, whose only match runs from the first occurrence to the end.
    """
    thought = message.split(ACTION)[0]
    thought = thought.split(THOUGHT)[-1]
    thought = thought.split(FINISH)[0]
    if FINISH in message:
        return ParsedReply(thought, FINISH_ACTION, message.split(FINISH)[-1])
    action_match = re.findall(f"{ACTION}(.*?)\n", message)
    if not action_match:
        return ParsedReply(thought, NO_ACTION, "")
    action = action_match[-1]
    arg_match = re.findall(f"{ACTION_INPUT}(.*)", message, re.DOTALL)
    if not arg_match:
        return ParsedReply(thought, NO_ACTION, "")
    return ParsedReply(thought, action.strip(), arg_match[-1].strip().strip('"'))


class ArgumentError(Exception):
    """Lagent's ``ParseError``: the input is not acceptable JSON for this tool."""


_FENCE = re.compile(r"^\s*(```json\n)?(.*)\n```\s*$", re.S)


def parse_action_input(raw: str, meta: ToolMeta) -> dict[str, Any]:
    """``JsonParser.parse_inputs``: unwrap one fenced JSON block, then check the keys.

    Raises:
        ArgumentError: with Lagent's message (invalid JSON, unknown or missing arguments).
    """
    text = raw
    match = _FENCE.search(text)
    if match:
        text = match.group(2).strip()
    try:
        # Lagent catches only JSONDecodeError; text nested past the parser's limit or holding a
        # number of more than 4,300 digits is just as much the model's malformed input. The
        # MAX_DEPTH bound is deliberate and ours: every GTA tool input is a scalar, so no real
        # call is refused, and deeper values would break later recursive walks of the record.
        value = jsonsafe.loads(text)
    except jsonsafe.JsonInputError as exc:
        raise ArgumentError(f"invalid json format: {text}") from exc
    if not isinstance(value, dict):
        # Lagent would crash or misbehave on non-object JSON; record it as an argument error.
        raise ArgumentError(f"invalid json format: {text}")
    keys = set(value)
    known = {p.name for p in meta.inputs}
    if not keys.issubset(known):
        raise ArgumentError(f"unknown arguments: {keys - known}")
    required = set(meta.required)
    if not keys.issuperset(required):
        raise ArgumentError(f"missing required arguments: {required - keys}")
    return value


#: Which files exist for a model: a case's :class:`~pytest_gta.reach.Reach`, or the real paths
#: of directories whose every file does (step mode: the dataset's).
Visible = Reach | Sequence[str]


def _check_file(path: str, base_dir: Path | None, visible: Visible | None) -> None:
    """Raise what the official ``ImageIO(path)`` raises for a file the model may not use.

    Raises:
        FileNotFoundError: no such file, or one outside ``visible`` (the official answer on a
            machine without it).
        PermissionError: one of the benchmark's own files (:mod:`pytest_gta.reach`).
    """
    reach = Reach.of_directories(visible) if isinstance(visible, Sequence) else visible
    if os.path.isabs(path):
        candidate = path
    elif base_dir is not None:
        candidate = os.path.join(base_dir, path)
    else:
        # The official harness resolves relative paths against its working directory, which
        # never holds the dataset; treating them as missing keeps results independent of where
        # pytest runs. One that names a benchmark file where the tools would look is refused
        # as such, so the message says why.
        if reach is not None and reach.base and reach.judge_path(path) == "withheld":
            raise PermissionError(withheld_message(path))
        raise FileNotFoundError(f"No such file: '{path}'")
    if reach is None:
        if not os.path.exists(candidate):
            raise FileNotFoundError(f"No such file: '{path}'")
        return
    verdict = reach.judge_path(candidate)
    if verdict == "withheld":
        raise PermissionError(withheld_message(path))
    if verdict == "outside" or not os.path.exists(os.path.realpath(candidate)):
        raise FileNotFoundError(f"No such file: '{path}'")


def convert_arguments(
    meta: ToolMeta,
    arguments: Mapping[str, Any],
    base_dir: Path | None = None,
    visible: Visible | None = None,
) -> dict[str, Any]:
    """Type-convert arguments as agentlego's ``DefaultParser`` does before a tool runs.

    File inputs must be existing paths (``ImageIO(path)``), numbers go through ``int()`` or
    ``float()``. Any exception here is a tool error (``API_ERROR``) in the official harness.

    ``visible`` (a case's :class:`~pytest_gta.reach.Reach`, or real directory paths) confines
    which files exist for a model: the official parser checks the whole file system, so a
    model could tell ``/root/.ssh/id_rsa`` (passed on, then refused by the tool) from a file
    that is not there (``No such file``) and map the machine. With ``visible``, a file outside
    it is "No such file" whether or not it exists, the answer the official harness gives on a
    machine without it; one of the benchmark's own files (``end.json``, ``dataset.json``) is a
    ``PermissionError`` saying so, since no tool serves the benchmark. ``None`` keeps the
    official whole-machine check (reading the dataset's own reference calls).
    """
    converted: dict[str, Any] = {}
    for key, value in arguments.items():
        param = meta.input(key)
        if param is None:  # pragma: no cover - parse_action_input rejected unknown keys already
            raise TypeError(f'Got unexcepted keyword argument "{key}".')
        if param.type in _IO_CLASS:
            if not isinstance(value, str):
                raise NotImplementedError(
                    f"The value type `{type(value)}` is not supported by `{_IO_CLASS[param.type]}`"
                )
            _check_file(value, base_dir, visible)
            converted[key] = value
        elif param.type == "int":
            converted[key] = value if isinstance(value, int) else int(value)
        elif param.type == "float":
            converted[key] = value if isinstance(value, float) else float(value)
        elif param.type == "bool":
            converted[key] = value if isinstance(value, bool) else bool(value)
        else:
            converted[key] = value if isinstance(value, str) else str(value)
    return converted


# --------------------------------------------------------------------------------------------
# Executing an action and recording it


@dataclass(frozen=True)
class ActionRecord:
    """The outcome of one parsed turn: Lagent's ``ActionReturn`` reduced to what is recorded."""

    type: str
    args: Any
    state: State = "SUCCESS"
    errmsg: str | None = None
    result: tuple[ResultItem, ...] | None = None
    thought: str = ""

    @property
    def is_finish(self) -> bool:
        """Whether this record ends the episode with an answer."""
        return self.type == FINISH_ACTION

    @property
    def answer(self) -> str:
        """The final answer text (raw text after the last ``Final Answer:``)."""
        return ToolResult(self.result or ()).format()

    def observation(self) -> str:
        """The system message shown to the model after a non-finish turn."""
        body = ToolResult(self.result or ()).format() if self.state == "SUCCESS" else self.errmsg
        return RESPONSE + (body or "") + RESPONSE_END

    def to_step(self) -> dict[str, Any]:
        """The prediction step in the official (OpenCompass) record format."""
        if self.is_finish:
            return {"role": "assistant", "content": self.answer}
        step: dict[str, Any] = {"role": "assistant"}
        if self.errmsg is not None:
            step["error"] = {"type": self.state, "msg": self.errmsg}
        step["tool_calls"] = [
            {"type": "function", "function": {"name": self.type, "arguments": self.args}}
        ]
        return step

    def to_tool_return(self) -> dict[str, Any]:
        """The tool-return step that follows a call in end-to-end records."""
        content = None if self.result is None else [item.as_dict() for item in self.result]
        return {"role": "tool", "content": content}


#: Runs a validated call: ``(meta, raw_arguments, converted_arguments) -> ToolResult``.
ToolRunner = Callable[[ToolMeta, dict[str, Any], dict[str, Any]], ToolResult]


def _builtin(name: str, command: str, thought: str) -> ActionRecord:
    if name == FINISH_ACTION:
        return ActionRecord(
            FINISH_ACTION,
            {"text": command},
            result=(ResultItem("text", command),),
            thought=thought,
        )
    default = NO_ACTION_MESSAGE if name == NO_ACTION else INVALID_ACTION_MESSAGE
    kind = NO_ACTION if name == NO_ACTION else INVALID_ACTION
    # Lagent passes the raw input as the built-in action's ``err_msg``: a non-empty input *is*
    # the error message the model sees.
    return ActionRecord(kind, {"text": command}, "API_ERROR", command or default, thought=thought)


def execute(
    parsed: ParsedReply,
    tools: Mapping[str, ToolMeta],
    run: ToolRunner,
    base_dir: Path | None = None,
    visible: Visible | None = None,
) -> ActionRecord:
    """Turn a parsed reply into an :class:`ActionRecord`, calling ``run`` for valid tool calls.

    Infrastructure exceptions from ``run`` propagate; :class:`GtaToolError` and any other
    exception of the tool become ``API_ERROR`` records, as agentlego's wrapper catches them.
    ``visible``: the files that exist for the model (see :func:`convert_arguments`).
    """
    name, command = parsed.action, parsed.action_input
    api = "run"
    tool_name = name
    if name not in tools and "." in name:
        # ActionExecutor splits "Tool.api"; only the ``run`` API exists on GTA tools.
        tool_name, api = name.rsplit(".", 1)
    meta = tools.get(tool_name)
    if meta is None:
        return _builtin(name, command, parsed.thought)
    if api != "run":
        return ActionRecord(
            meta.name, command, "API_ERROR", f"invalid API: {api}", thought=parsed.thought
        )
    try:
        arguments = parse_action_input(command, meta)
    except ArgumentError as exc:
        return ActionRecord(meta.name, command, "ARGS_ERROR", str(exc), thought=parsed.thought)
    try:
        converted = convert_arguments(meta, arguments, base_dir, visible)
    except (OSError, ValueError, TypeError, NotImplementedError, OverflowError) as exc:
        return ActionRecord(meta.name, arguments, "API_ERROR", repr(exc), thought=parsed.thought)
    try:
        result = run(meta, arguments, converted)
    except GtaToolError as exc:
        return ActionRecord(meta.name, arguments, "API_ERROR", str(exc), thought=parsed.thought)
    # Anything else a backend raises (GtaInfrastructureError, or a bug) is not the model's doing
    # and propagates, so the case ends as an error instead of a silently wrong answer.
    return ActionRecord(meta.name, arguments, result=result.items, thought=parsed.thought)


def validate_only(
    meta: ToolMeta, arguments: dict[str, Any], converted: dict[str, Any]
) -> ToolResult:
    """Step-mode runner: the official DummyTool validates the call and answers a fixed text."""
    return ToolResult.text(DUMMY_RESULT)
