"""``oracle``: a model that answers with the reference chain.

It writes ReAct text like a real model (thought, action, JSON input; then the final answer), so
a run with it exercises prompt rendering, parsing, argument validation, the loops, the replay
tools and the scorer end to end. On data whose reference calls are valid calls it must reach
ToolAcc = ArgAcc = 100 and AnsAcc = 100 on objective queries: the harness's self-check.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_gta.agent import protocol as p
from pytest_gta.dataset import Dataset, call_function
from pytest_gta.models.base import BaseModelAdapter, ModelContext, ModelSpec
from pytest_gta.types import ModelOutput, ModelRequest
from pytest_gta.vocabulary import ProtocolName

_MARKERS = (p.ACTION, p.ACTION_INPUT, p.FINISH, p.RESPONSE)


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

    def __init__(self, dataset: Dataset, name: str = "oracle") -> None:
        self.dataset = dataset
        self.name = name

    def generate(self, request: ModelRequest) -> ModelOutput:
        """The reference step for this call: by dialog index in step mode, by turn in e2e."""
        query = self.dataset[request.case.qid]
        dialogs = self.dataset.reference_dialogs(query)
        if request.case.mode == "step":
            message = dialogs[request.case.index]
        else:
            assistants = [dialogs[i] for i in query.assistant_indices]
            message = assistants[min(request.case.index, len(assistants) - 1)]
        return ModelOutput(render_reference(message))


def make_oracle(spec: ModelSpec, context: ModelContext) -> OracleModel:
    """Entry point for ``--gta-model=oracle``."""
    return OracleModel(context.dataset)
