"""pytest-gta: the GTA tool-agent benchmark as pytest cases.

Public names are re-exported here; implementation modules are free to change. Names that pull
in NumPy are resolved on first access so that importing the package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pytest_gta.case import Case
from pytest_gta.dataset import Dataset, Query, ReferenceCall
from pytest_gta.errors import (
    DatasetError,
    DatasetProblem,
    GtaBudgetExhausted,
    GtaDataError,
    GtaError,
    GtaInfrastructureError,
    GtaToolError,
    GtaToolMiss,
    GtaUnavailableError,
    GtaUsageError,
    RetryableError,
)
from pytest_gta.types import (
    CaseContext,
    ChatMessage,
    ModelOutput,
    ModelRequest,
    ResultItem,
    ToolCall,
    ToolMeta,
    ToolParam,
    ToolResult,
    Usage,
)
from pytest_gta.validation import load_dataset
from pytest_gta.version import __version__

_LAZY = {
    "AgentTask": "pytest_gta.run.agent_under_test",
    "AgentResult": "pytest_gta.run.agent_under_test",
    "CaseRun": "pytest_gta.run.runner",
    "CaseResult": "pytest_gta.results.case",
    "RunReport": "pytest_gta.results.report",
    "ModelAdapter": "pytest_gta.models.base",
    "BaseModelAdapter": "pytest_gta.models.base",
    "RecordedSource": "pytest_gta.models.base",
    "BaseRecordedSource": "pytest_gta.models.base",
    "Recorded": "pytest_gta.models.base",
    "ToolBackend": "pytest_gta.tools",
    "BaseToolBackend": "pytest_gta.tools",
    "ToolContext": "pytest_gta.tools",
    "ToolInvocation": "pytest_gta.tools",
    "iscorrect": "pytest_gta.scoring.answer",
    "ChatAdapter": "pytest_gta.models.chat",
    "Prepared": "pytest_gta.models.chat",
    "GenerationSettings": "pytest_gta.models.generation",
}

if TYPE_CHECKING:
    from pytest_gta.models.base import (
        BaseModelAdapter,
        BaseRecordedSource,
        ModelAdapter,
        Recorded,
        RecordedSource,
    )
    from pytest_gta.models.chat import ChatAdapter, Prepared
    from pytest_gta.models.generation import GenerationSettings
    from pytest_gta.results.case import CaseResult
    from pytest_gta.results.report import RunReport
    from pytest_gta.run.agent_under_test import AgentResult, AgentTask
    from pytest_gta.run.runner import CaseRun
    from pytest_gta.scoring.answer import iscorrect
    from pytest_gta.tools import BaseToolBackend, ToolBackend, ToolContext, ToolInvocation


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_gta' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "AgentResult",
    "AgentTask",
    "BaseModelAdapter",
    "BaseRecordedSource",
    "BaseToolBackend",
    "Case",
    "CaseContext",
    "CaseResult",
    "CaseRun",
    "ChatAdapter",
    "ChatMessage",
    "Dataset",
    "DatasetError",
    "DatasetProblem",
    "GenerationSettings",
    "GtaBudgetExhausted",
    "GtaDataError",
    "GtaError",
    "GtaInfrastructureError",
    "GtaToolError",
    "GtaToolMiss",
    "GtaUnavailableError",
    "GtaUsageError",
    "ModelAdapter",
    "ModelOutput",
    "ModelRequest",
    "Prepared",
    "Query",
    "Recorded",
    "RecordedSource",
    "ReferenceCall",
    "ResultItem",
    "RetryableError",
    "RunReport",
    "ToolBackend",
    "ToolCall",
    "ToolContext",
    "ToolInvocation",
    "ToolMeta",
    "ToolParam",
    "ToolResult",
    "Usage",
    "__version__",
    "iscorrect",
    "load_dataset",
]
