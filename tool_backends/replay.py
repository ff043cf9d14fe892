"""``replay`` and ``strict-replay``: serve recorded tool outputs instead of running tools.

Two recordings are consulted, in order: the tool cassettes (``--gta-tool-cassettes``: what live
backends answered, see :mod:`tool_backends.cassettes`), then the reference chain of the query
(a call matching a reference call, file paths normalised to dataset-relative form, gets that
reference call's output). This needs no tool installs at all, which is what makes the oracle
self-check and CI runs possible everywhere.

On a miss, ``replay`` passes the call to the next backend in ``--gta-tools`` that offers the
tool (:class:`~pytest_gta.errors.GtaToolMiss`); with none left, or with ``strict-replay``, the
call is a tool error that names it and the recorded calls to that tool, so a model that strays
from the recording sees why.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaToolError, GtaToolMiss
from pytest_gta.protocol.react import DUMMY_RESULT
from pytest_gta.quirks import GENERATED_IMAGE, dataset_file
from pytest_gta.tools import (
    BaseToolBackend,
    ToolBackendContext,
    ToolContext,
    ToolInvocation,
    ToolSpec,
)
from pytest_gta.types import ResultItem, ToolResult
from tool_backends.cassettes import Cassettes, normalise_argument


def normalise_arguments(arguments: Mapping[str, Any], dataset: Dataset) -> dict[str, Any]:
    """All arguments of a call in comparable form."""
    return {key: normalise_argument(value, dataset) for key, value in arguments.items()}


class ReplayBackend(BaseToolBackend):
    """Answers calls from the cassettes, then from the reference chain's outputs."""

    name = "replay"
    #: Replayed answers are never recorded again into cassettes.
    live = False

    def __init__(self, cassettes: Cassettes | None = None, *, strict: bool = False) -> None:
        self.cassettes = cassettes
        self.strict = strict
        if strict:
            self.name = "strict-replay"

    def offers(self, tool: str) -> bool:
        """Any tool: whether a call matches is decided per call."""
        return True

    def call(self, invocation: ToolInvocation, context: ToolContext) -> ToolResult:
        """The recorded output of this call (cassette first, then the reference chain)."""
        if self.cassettes is not None:
            hit = self.cassettes.lookup(
                invocation.name, invocation.arguments, context.dataset, context.output_dir
            )
            if hit is not None:
                return hit
        dataset, query = context.dataset, context.query
        wanted = normalise_arguments(invocation.arguments, dataset)
        dialogs = query.dialogs
        recorded = []
        for call in query.calls:
            if call.name != invocation.name:
                continue
            arguments = call.arguments
            reference = (
                normalise_arguments(arguments, dataset)
                if isinstance(arguments, Mapping)
                else {"": arguments}  # raw-string arguments: the parser rejects them first
            )
            recorded.append(reference)
            if reference == wanted:
                answered = (
                    call.index + 1 < len(dialogs) and dialogs[call.index + 1].get("role") == "tool"
                )
                if answered:
                    return self._output(dialogs[call.index + 1].get("content"), dataset)
                return self._unrecorded(invocation, dataset)
        shown = "; ".join(json.dumps(r, ensure_ascii=False) for r in recorded) or "none"
        error = GtaToolError if self.strict else GtaToolMiss
        raise error(
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
        if kind != "text" and isinstance(value, str):
            if not dataset_file(dataset, value) and dataset_file(dataset, GENERATED_IMAGE):
                # A path from the authors' machine (query 118's C:\Users\...): handing it on
                # would send the model and the next tool to a file that is not there; the
                # release ships this placeholder for generated images (a quirk, named as such).
                value = GENERATED_IMAGE
            if not os.path.isabs(value):
                # Image outputs are shown to the model as absolute paths it can pass on.
                value = os.path.join(dataset.root_str, value)
        return ToolResult((ResultItem(kind, value),))

    @staticmethod
    def _unrecorded(invocation: ToolInvocation, dataset: Dataset) -> ToolResult:
        """A reference call the chain left unanswered: what the official dummy tools answer.

        The official harness (OpenCompass ``DummyTool``, used when no tool server is set)
        answers every valid call; the chain's generated images are the release's placeholder.
        """
        outputs = invocation.tool.outputs
        if outputs and outputs[0].type == "image" and dataset_file(dataset, GENERATED_IMAGE):
            path = os.path.join(dataset.root_str, GENERATED_IMAGE)
            return ToolResult((ResultItem("image", path),))
        return ToolResult.text(DUMMY_RESULT)


def _cassettes(context: ToolBackendContext) -> Cassettes | None:
    return None if context.cassettes is None else Cassettes(context.cassettes)


def make_replay(spec: ToolSpec, context: ToolBackendContext) -> ReplayBackend:
    """Entry point for ``--gta-tools=replay`` (a miss falls through to the next backend)."""
    return ReplayBackend(_cassettes(context))


def make_strict_replay(spec: ToolSpec, context: ToolBackendContext) -> ReplayBackend:
    """Entry point for ``--gta-tools=strict-replay`` (a miss is a tool error naming the call)."""
    return ReplayBackend(_cassettes(context), strict=True)
