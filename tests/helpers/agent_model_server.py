"""A perfect model that speaks function calls, behind a real OpenAI-compatible server.

The agent examples (``examples/``) run their own loops, with their own prompts, over GTA's tools
served by MCP; to show that the whole tool path works, each is driven by a model that makes the
reference calls and gives the reference answer, so a run must score exactly what the ``oracle``
model scores end to end. :class:`FunctionCallingModel` is that model, the ``default`` answer of a
:class:`~tests.helpers.scripted_server.ScriptedServer` (:class:`AgentModelServer`):

* it serves chat completions and the Responses API (which the OpenAI Agents SDK uses by
  default), each streamed or not;
* it finds the query in the user's text (the examples put the query and the absolute paths of
  its images there: several release queries share a text and differ only by their image) and
  the turn by the tool results so far (``tool`` messages, ``function_call_output`` items, or
  smolagents' ``Observation:`` messages, since its ToolCallingAgent sends results as user text);
* it answers the turn's reference call as a function call whose arguments are the reference
  arguments with dataset files made absolute (``Dataset.reference_dialogs``, as the ``oracle``
  replays them), or the final answer as plain text; the turn and the answer after a chain that
  ends on a call come from the ``oracle``'s own rule (``end_to_end_turn``), so both models make
  the same calls. When the request offers a ``final_answer`` tool (smolagents ends that way) the
  answer is a call to it.

It counts requests, the most it held at once and its usage tokens as
:class:`~tests.helpers.oracle_server.PerfectModel` does, whose latency and counters it shares.

:class:`InProcessModel` is the same model with no server: an adapter in the run's process
(``--gta-model=scripted-fc``, made by the ``pytest_gta_make_model`` hook of
:data:`SCRIPTED_CONFTEST`), which the recording proxy answers for, so a run shows that an
agent's requests to a model without an HTTP endpoint reach it whole (messages, tool results,
offered tools) in each API and come back as each framework expects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pytest_gta.dataset import Dataset, call_function
from pytest_gta.models.base import BaseModelAdapter
from pytest_gta.models.oracle import end_to_end_turn
from pytest_gta.types import CaseContext, ModelOutput, ModelRequest, ToolCall, Usage
from pytest_gta.vocabulary import ProtocolName
from tests.helpers.oracle_server import PerfectModel
from tests.helpers.scripted_server import Recorded, ScriptedServer, Step, chat_completion

#: The tool smolagents' ToolCallingAgent ends its run with (``final_answer(answer=...)``).
FINAL_ANSWER_TOOL = "final_answer"
#: How smolagents hands a tool's result back: a user message, not a ``tool`` message.
_SMOLAGENTS_RESULT = re.compile(r"^\s*(Call id: \S+\s*)?(Observation|Error):")


def text_of(content: Any) -> str:
    """A message's text whether it is a string or a list of parts (any API's part types)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text_of(part) for part in content)
    if isinstance(content, dict):
        return str(content.get("text") or "")
    return ""


@dataclass(frozen=True)
class Conversation:
    """What the model needs from one request, whichever API and framework sent it."""

    #: The text of every user message, in order.
    user: tuple[str, ...]
    #: How many tool results the conversation holds: the turn the model is at.
    results: int
    #: The names of the tools the request offers.
    offered: tuple[str, ...]
    stream: bool

    @classmethod
    def of_chat(cls, body: dict[str, Any]) -> Conversation:
        """A chat-completions request."""
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        user = tuple(text_of(m.get("content")) for m in messages if m.get("role") == "user")
        results = sum(1 for m in messages if m.get("role") == "tool")
        results += sum(1 for text in user if _SMOLAGENTS_RESULT.match(text))
        offered = tuple(
            str((t.get("function") or {}).get("name"))
            for t in body.get("tools") or []
            if isinstance(t, dict)
        )
        return cls(user, results, offered, bool(body.get("stream")))

    @classmethod
    def of_request(cls, request: ModelRequest) -> Conversation:
        """A request the recording proxy made of an agent's, for a model in its process."""
        user = tuple(m.content for m in request.messages if m.role == "user")
        results = sum(1 for m in request.messages if m.role == "tool")
        results += sum(1 for text in user if _SMOLAGENTS_RESULT.match(text))
        return cls(user, results, tuple(t.name for t in request.tools), False)

    @classmethod
    def of_responses(cls, body: dict[str, Any]) -> Conversation:
        """A Responses API request (``input``: a string or a list of items)."""
        items = body.get("input")
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        items = [i for i in items or [] if isinstance(i, dict)]
        user = tuple(text_of(i.get("content")) for i in items if i.get("role") == "user")
        results = sum(1 for i in items if i.get("type") == "function_call_output")
        offered = tuple(str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict))
        return cls(user, results, offered, bool(body.get("stream")))


@dataclass(frozen=True)
class Move:
    """The model's turn: a call (``name``, JSON ``arguments``) or a final ``answer``."""

    name: str | None = None
    arguments: str = "{}"
    answer: str = ""
    call_id: str = "call_0"


def _adapt(name: str, offered: tuple[str, ...]) -> str:
    """The offered tool a reference call names, under whatever name a framework gave it."""
    if not offered or name in offered:
        return name

    def key(text: str) -> str:
        return re.sub(r"[^a-z0-9]", "", text.lower())

    return next((o for o in offered if key(o).endswith(key(name))), name)


class FunctionCallingModel(PerfectModel):
    """Answers chat completions and responses with the reference call or answer they ask for."""

    def __init__(self, dataset: Dataset, latency: float = 0.0, served: str = "agent-fc") -> None:
        super().__init__(dataset, latency, served)
        #: Query text, then the absolute paths of its files, to the query's id.
        self.by_query: dict[str, list[tuple[tuple[str, ...], str]]] = {}
        for query in dataset:
            files = tuple(dataset.abs_files(query))
            self.by_query.setdefault(query.text, []).append((files, query.qid))
        #: The longest texts first: a query's text can hold a shorter one's.
        self._texts = sorted(self.by_query, key=len, reverse=True)

    def locate(self, user: tuple[str, ...]) -> str | None:
        """The query the user's text is about: its text, then the most of its files named."""
        said = "\n".join(user)
        text = next((t for t in self._texts if t and t in said), None)
        if text is None:
            return None
        named = [
            (sum(f in said for f in files), -len(files), qid)
            for files, qid in self.by_query[text]
            if all(f in said for f in files)
        ]
        return max(named)[2] if named else None

    def move(self, conversation: Conversation) -> Move | None:
        """The perfect turn for this conversation; ``None`` for a query it does not know."""
        qid = self.locate(conversation.user)
        if qid is None:
            return None
        query = self.dataset[qid]
        dialogs = self.dataset.reference_dialogs(query)
        turn = conversation.results
        request = ModelRequest((), (), CaseContext(qid, "e2e", turn))
        message = end_to_end_turn([dialogs[i] for i in query.assistant_indices], request)
        call_id = f"call_{turn}"
        if message.get("tool_calls"):
            function = call_function(message)
            name = _adapt(str(function["name"]), conversation.offered)
            return Move(name, json.dumps(function["arguments"]), call_id=call_id)
        answer = str(message.get("content") or "")
        if FINAL_ANSWER_TOOL in conversation.offered:
            return Move(FINAL_ANSWER_TOOL, json.dumps({"answer": answer}), call_id=call_id)
        return Move(answer=answer)

    def __call__(self, record: Recorded) -> Step:
        try:
            body = record.json
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return Step({"error": {"message": "the body is not a JSON object"}}, status=400)
        responses = record.path.rstrip("/").endswith("/responses")
        conversation = (Conversation.of_responses if responses else Conversation.of_chat)(body)
        with self.answering():
            move = self.move(conversation)
        if move is None:
            with self._lock:
                self.unknown += 1
            move = Move(answer="I do not know this query.")
        tokens = self.count_tokens(len(json.dumps(body)), len(move.arguments) + len(move.answer))
        if responses:
            reply = responses_body(move, self.served, tokens)
            if conversation.stream:
                return _sse(responses_events(reply), done=False)
            return Step(reply)
        reply = chat_body(move, self.served, tokens)
        if conversation.stream:
            return _sse(chat_chunks(reply, body), done=True)
        return Step(reply)


# --------------------------------------------------------------------------------------------
# The wire: chat completions and responses, whole or as server-sent events


def _sse(events: Iterator[dict[str, Any]], *, done: bool) -> Step:
    """Server-sent events, each ``event:`` named by its ``type`` (the Responses API's form)."""
    lines = []
    for event in events:
        if "type" in event:
            lines.append(f"event: {event['type']}\n")
        lines.append(f"data: {json.dumps(event)}\n\n")
    if done:
        lines.append("data: [DONE]\n\n")
    return Step(raw="".join(lines).encode(), content_type="text/event-stream")


def chat_body(move: Move, served: str, tokens: tuple[int, int]) -> dict[str, Any]:
    """A chat completion: the call as ``tool_calls`` (no text), or the answer."""
    calls = None
    if move.name is not None:
        function = {"name": move.name, "arguments": move.arguments}
        calls = [{"id": move.call_id, "type": "function", "function": function}]
    body = chat_completion(
        move.answer, tool_calls=calls, prompt_tokens=tokens[0], completion_tokens=tokens[1]
    )
    if calls:
        body["choices"][0]["message"]["content"] = None
    body["model"] = served
    return body


def chat_chunks(body: dict[str, Any], request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``body`` as ``chat.completion.chunk`` events: the role, the delta, the finish, the usage."""
    choice = body["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": body["id"],
            "object": "chat.completion.chunk",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    yield chunk({"role": "assistant", "content": ""})
    if message.get("tool_calls"):
        calls = [{"index": 0, **call} for call in message["tool_calls"]]
        yield chunk({"tool_calls": calls})
    else:
        yield chunk({"content": message["content"]})
    yield chunk({}, choice["finish_reason"])
    if (request.get("stream_options") or {}).get("include_usage"):
        yield {**chunk({}), "choices": [], "usage": body["usage"]}


def responses_body(move: Move, served: str, tokens: tuple[int, int]) -> dict[str, Any]:
    """A Responses API response: a ``function_call`` item, or an assistant ``message``."""
    item: dict[str, Any]
    if move.name is not None:
        item = {
            "type": "function_call",
            "id": f"fc_{move.call_id}",
            "call_id": move.call_id,
            "name": move.name,
            "arguments": move.arguments,
            "status": "completed",
        }
    else:
        text = {"type": "output_text", "text": move.answer, "annotations": []}
        item = {
            "type": "message",
            "id": "msg_0",
            "role": "assistant",
            "status": "completed",
            "content": [text],
        }
    return {
        "id": "resp_0",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": served,
        "output": [item],
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": tokens[0],
            "output_tokens": tokens[1],
            "total_tokens": sum(tokens),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def responses_events(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``body`` as Responses API stream events, from ``response.created`` to ``completed``."""
    item = body["output"][0]
    pending = {**body, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": pending},
        {"type": "response.in_progress", "response": pending},
    ]
    if item["type"] == "function_call":
        events += [
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {
                "type": "response.function_call_arguments.delta",
                "item_id": item["id"],
                "output_index": 0,
                "delta": item["arguments"],
            },
            {
                "type": "response.function_call_arguments.done",
                "item_id": item["id"],
                "output_index": 0,
                "arguments": item["arguments"],
            },
        ]
    else:
        part = item["content"][0]
        where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        events += [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "content": []},
            },
            {"type": "response.content_part.added", **where, "part": {**part, "text": ""}},
            {"type": "response.output_text.delta", **where, "delta": part["text"], "logprobs": []},
            {"type": "response.output_text.done", **where, "text": part["text"], "logprobs": []},
            {"type": "response.content_part.done", **where, "part": part},
        ]
    events += [
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": body},
    ]
    for number, event in enumerate(events):
        yield {**event, "sequence_number": number}


class AgentModelServer(ScriptedServer):
    """``with AgentModelServer(dataset) as server``: :class:`FunctionCallingModel` on 127.0.0.1."""

    def __init__(self, dataset: Dataset, latency: float = 0.0, served: str = "agent-fc") -> None:
        self.model = FunctionCallingModel(dataset, latency, served)
        super().__init__(models=[served], default=self.model)


class InProcessModel(BaseModelAdapter):
    """:class:`FunctionCallingModel` as an adapter in the run's process (no HTTP endpoint).

    Its tool calls are structured (``ModelOutput.tool_calls``), as an adapter that parses them
    returns them; ``unknown`` counts the requests whose query it could not find.
    """

    protocol: ProtocolName = "native"

    def __init__(self, dataset: Dataset, name: str = "scripted-fc") -> None:
        self.name = name
        self.model = FunctionCallingModel(dataset, served=name)

    def generate(self, request: ModelRequest) -> ModelOutput:
        """The perfect turn for the agent's conversation so far."""
        conversation = Conversation.of_request(request)
        with self.model.answering():
            move = self.model.move(conversation)
        if move is None:
            move = Move(answer="I do not know this query.")
        prompt = sum(len(m.content) for m in request.messages)
        usage = Usage(*self.model.count_tokens(prompt, len(move.arguments) + len(move.answer)))
        if move.name is None:
            return ModelOutput(move.answer, usage)
        call = ToolCall(move.name, json.loads(move.arguments), move.call_id)
        return ModelOutput("", usage, (call,))


#: A ``conftest.py`` that makes ``--gta-model=scripted-fc`` the :class:`InProcessModel` (the
#: run needs this checkout on its ``PYTHONPATH``).
SCRIPTED_CONFTEST = """
from tests.helpers.agent_model_server import InProcessModel

def pytest_gta_make_model(config, spec, context):
    if spec == "scripted-fc":
        return InProcessModel(context.dataset)
"""
