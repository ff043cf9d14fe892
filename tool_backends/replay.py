"""``replay``: serve the reference chain's recorded tool outputs.

A call that matches a reference call of the same query (same tool, same arguments once file
paths are normalised to dataset-relative form) gets that reference call's output; anything else
is a tool error that names the call and the recorded calls to that tool, so a model that strays
from the reference sees why. This needs no tool installs at all, which is what makes the oracle
self-check and CI runs possible everywhere.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaToolError
from pytest_gta.tools import ToolBackendContext, ToolContext, ToolInvocation, ToolSpec
from pytest_gta.types import ResultItem, ToolResult


def normalise_argument(value: Any, dataset: Dataset) -> Any:
    """A file argument as its dataset-relative path; anything else unchanged."""
    if not isinstance(value, str):
        return value
    root = dataset.root_str
    candidate = value if os.path.isabs(value) else os.path.join(root, value)
    candidate = os.path.normpath(candidate)
    if candidate.startswith(root + os.sep) and os.path.exists(candidate):
        return os.path.relpath(candidate, root).replace(os.sep, "/")
    return value


def normalise_arguments(arguments: Mapping[str, Any], dataset: Dataset) -> dict[str, Any]:
    """All arguments of a call in comparable form."""
    return {key: normalise_argument(value, dataset) for key, value in arguments.items()}


class ReplayBackend:
    """Answers calls that match the reference chain with the reference outputs."""

    name = "replay"

    def offers(self, tool: str) -> bool:
        """Any tool: whether a call matches is decided per call."""
        return True

    def call(self, invocation: ToolInvocation, context: ToolContext) -> ToolResult:
        """The output recorded for the first matching reference call."""
        dataset, query = context.dataset, context.query
        wanted = normalise_arguments(invocation.arguments, dataset)
        dialogs = query.dialogs
        recorded = []
        for i, message in enumerate(dialogs):
            if message.get("role") != "assistant" or not message.get("tool_calls"):
                continue
            function = message["tool_calls"][0]["function"]
            if function["name"] != invocation.name:
                continue
            reference = normalise_arguments(function["arguments"], dataset)
            recorded.append(reference)
            if reference == wanted and i + 1 < len(dialogs):
                return self._output(dialogs[i + 1].get("content"), dataset)
        shown = "; ".join(json.dumps(r, ensure_ascii=False) for r in recorded) or "none"
        raise GtaToolError(
            f"replay has no recorded output for {invocation.name} with arguments "
            f"{json.dumps(dict(invocation.arguments), ensure_ascii=False)} "
            f"(recorded calls to {invocation.name}: {shown})"
        )

    @staticmethod
    def _output(content: Any, dataset: Dataset) -> ToolResult:
        if not isinstance(content, Mapping):
            return ToolResult(())
        kind = str(content.get("type", "text"))
        value = content.get("content")
        if kind != "text" and isinstance(value, str) and not os.path.isabs(value):
            # Image outputs are shown to the model as absolute paths it can pass on.
            value = os.path.join(dataset.root_str, value)
        return ToolResult((ResultItem(kind, value),))


def make_replay(spec: ToolSpec, context: ToolBackendContext) -> ReplayBackend:
    """Entry point for ``--gta-tools=replay``."""
    return ReplayBackend()
