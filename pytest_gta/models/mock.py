r"""``mock:<file>``: scripted replies from a JSON file, for tests and demos.

The script maps case ids to the replies of successive calls (step mode: one per reference step;
end-to-end: one per turn)::

    {
      "default": "Final Answer: I do not know.",
      "responses": {
        "e2e-0": [
          "Thought: read it\nAction: OCR\nAction Input: {\"image\": \"{data}/image/image_0.jpg\"}",
          "Final Answer: 42"
        ],
        "step-0": ["Action: OCR\nAction Input: {}", "Final Answer: 42"],
        "*": ["Final Answer: used for any case without its own list"]
      }
    }

``{data}`` in a reply becomes the dataset's absolute root, so scripts are portable. A reply may
also be ``{"error": "message"}``: the call then fails like an unreachable endpoint (the case
ends as an error), which is how tests exercise the error outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_gta import jsonsafe
from pytest_gta.case import Case
from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaInfrastructureError, GtaUsageError
from pytest_gta.flags import OPT_MODEL
from pytest_gta.models.base import BaseModelAdapter, ModelContext, ModelSpec
from pytest_gta.types import ModelOutput, ModelRequest
from pytest_gta.vocabulary import ProtocolName


def _check_reply(where: str, reply: Any) -> None:
    if isinstance(reply, str):
        return
    if isinstance(reply, Mapping) and isinstance(reply.get("error"), str) and len(reply) == 1:
        return
    raise GtaUsageError(f'{where}: a reply must be a string or {{"error": "message"}}')


def load_script(path: Path) -> tuple[dict[str, list[Any]], str | None]:
    """Read and validate a mock script.

    Raises:
        GtaUsageError: naming the file and the bad entry.
    """
    try:
        raw = jsonsafe.read_json(path)
    except FileNotFoundError:
        raise GtaUsageError(f"{OPT_MODEL}=mock:{path}: file not found") from None
    except jsonsafe.JsonInputError as exc:
        raise GtaUsageError(
            f"{OPT_MODEL}=mock:{path}: {exc}; a mock script is a UTF-8 JSON object "
            '{"responses": {case id: [reply, ...]}, "default": reply}'
        ) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("responses", {}), dict):
        raise GtaUsageError(
            f"{path}: a mock script is an object with 'responses' (case id -> list of replies) "
            "and an optional 'default' reply"
        )
    default = raw.get("default")
    if default is not None and not isinstance(default, str):
        raise GtaUsageError(f"{path}: 'default' must be a string")
    unknown = set(raw) - {"responses", "default"}
    if unknown:
        raise GtaUsageError(f"{path}: unknown keys {sorted(unknown)}")
    responses: dict[str, list[Any]] = {}
    for case_id, replies in raw.get("responses", {}).items():
        if isinstance(replies, str):
            replies = [replies]
        if not isinstance(replies, list):
            raise GtaUsageError(f"{path}: responses[{case_id!r}] must be a list of replies")
        for i, reply in enumerate(replies):
            _check_reply(f"{path}: responses[{case_id!r}][{i}]", reply)
        responses[case_id] = replies
    return responses, default


class MockModel(BaseModelAdapter):
    """Answers each call with the next scripted reply of its case."""

    protocol: ProtocolName = "react"

    def __init__(self, path: Path, dataset: Dataset) -> None:
        self.path = path
        self.dataset = dataset
        self.name = f"mock:{path.name}"
        self.responses, self.default = load_script(path)

    def _ordinal(self, request: ModelRequest) -> int:
        if request.case.mode == "step":
            query = self.dataset[request.case.qid]
            return query.assistant_indices.index(request.case.index)
        return request.case.index

    def generate(self, request: ModelRequest) -> ModelOutput:
        """The scripted reply for this case and call number."""
        case_id = Case.format_id(request.case.mode, request.case.qid)
        replies = self.responses.get(case_id, self.responses.get("*", []))
        n = self._ordinal(request)
        if n < len(replies):
            reply = replies[n]
        elif self.default is not None:
            reply = self.default
        else:
            raise GtaInfrastructureError(
                f"mock script {self.path} has no reply #{n + 1} for {case_id} and no default"
            )
        if isinstance(reply, Mapping):
            raise GtaInfrastructureError(f"mock endpoint error: {reply['error']}")
        return ModelOutput(reply.replace("{data}", self.dataset.root_str))


def make_mock(spec: ModelSpec, context: ModelContext) -> MockModel:
    """Entry point for ``--gta-model=mock:<path>``."""
    if not spec.name:
        raise GtaUsageError(
            f"{OPT_MODEL}=mock needs a script: {OPT_MODEL}=mock:path/to/script.json"
        )
    path = Path(spec.name).expanduser()
    if not path.is_absolute():
        path = context.invocation_dir / path
    return MockModel(path, context.dataset)
