"""``oracle``: a model that answers with the reference chain.

It writes ReAct text like a real model (thought, action, JSON input; then the final answer), so
a run with it exercises prompt rendering, parsing, argument validation, the loops, the replay
tools and the scorer end to end. On data whose reference calls are valid calls it must reach
ToolAcc = ArgAcc = 100 and AnsAcc = 100 on objective queries: the harness's self-check.

On the real release it gets what a perfect replay gets through the official pipeline, case by
case, quirks included (:mod:`pytest_gta.quirks` names the cases no replay can pass). A chain
that ends without a final answer (image generation, mostly) is replayed call by call and then
closed with a short final answer, as a model that did the job would; the official loop would
otherwise go on until its tenth turn.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_gta.dataset import Dataset, call_function
from pytest_gta.models.base import BaseModelAdapter, ModelContext, ModelSpec
from pytest_gta.protocol import react as p
from pytest_gta.types import ModelOutput, ModelRequest
from pytest_gta.vocabulary import ProtocolName

_MARKERS = (p.ACTION, p.ACTION_INPUT, p.FINISH, p.RESPONSE)
#: The model's name: reports explain its failed cases by the data's quirks.
ORACLE = "oracle"
#: The closing answer of an end-to-end replay whose chain has no final answer of its own.
CLOSING_ANSWER = "Done."


def render_reference(message: dict[str, Any]) -> str:
    """A reference assistant message as the ReAct text a perfect model would write."""
    thought = str(message.get("thought") or "").strip()
    # A thought that quotes a protocol marker would change how the turn parses.
    prefix = (
        f"{p.THOUGHT}{thought}\n" if thought and not any(m in thought for m in _MARKERS) else ""
    )
    if message.get("tool_calls"):
        function = call_function(message)
        arguments = json.dumps(function["arguments"])
        return f"{prefix}{p.ACTION}{function['name']}\n{p.ACTION_INPUT}{arguments}"
    return f"{prefix}{p.FINISH} {message.get('content', '')}"


class OracleModel(BaseModelAdapter):
    """Replays the reference chain of the case it is asked about."""

    protocol: ProtocolName = "react"

    def __init__(self, dataset: Dataset, name: str = ORACLE) -> None:
        self.dataset = dataset
        self.name = name

    def generate(self, request: ModelRequest) -> ModelOutput:
        """The reference step for this call: by dialog index in step mode, by turn in e2e."""
        query = self.dataset[request.case.qid]
        dialogs = self.dataset.reference_dialogs(query)
        if request.case.mode == "step":
            message = dialogs[request.case.index]
        else:
            message = end_to_end_turn([dialogs[i] for i in query.assistant_indices], request)
        return ModelOutput(render_reference(message))


def end_to_end_turn(assistants: list[dict[str, Any]], request: ModelRequest) -> dict[str, Any]:
    """The reference message for an end-to-end turn, or the closing answer after the chain.

    A chain without a final answer ends on a call; after it the replay answers (with the text
    that call carries, if any, as 34/35's do) instead of repeating the call until the turns run
    out. A turn past a chain that has its answer repeats that answer (the episode has ended).
    """
    turn = request.case.index
    if turn < len(assistants):
        return assistants[turn]
    last = assistants[-1]
    if "tool_calls" not in last:
        return last
    text = last.get("content")
    return {
        "role": "assistant",
        "content": text if isinstance(text, str) and text else CLOSING_ANSWER,
    }


def make_oracle(spec: ModelSpec, context: ModelContext) -> OracleModel:
    """Entry point for ``--gta-model=oracle``."""
    return OracleModel(context.dataset)
