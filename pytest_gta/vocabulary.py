"""The words of the benchmark: modes, query types, tool categories, error records, outcomes.

Every layer speaks them (the dataset, the neutral types, the agent loops, scoring, the plugin
and the reports), so they live here, below all of them, with nothing but the standard library:
the entry module reads them to register markers in every pytest session, GTA or not.
"""

from __future__ import annotations

from typing import Literal

Mode = Literal["step", "e2e"]
#: The two evaluation modes, in the order reports list them.
MODES: tuple[Mode, ...] = ("step", "e2e")

QueryType = Literal["objective", "subjective", "image"]
#: ``objective`` (whitelist/blacklist), ``subjective`` (reference texts), ``image`` (none).
QUERY_TYPES: tuple[QueryType, ...] = ("objective", "subjective", "image")

ProtocolName = Literal["react", "native"]
#: ``react``: the official ReAct text protocol; ``native``: the provider's function calling.
PROTOCOLS: tuple[ProtocolName, ...] = ("react", "native")

SandboxMode = Literal["auto", "bubblewrap", "rlimit"]
#: ``--gta-sandbox``: the best isolation available here, or insist on one.
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "bubblewrap", "rlimit")

#: Tool categories as the official evaluator's ``gettype`` defines them.
CATEGORIES: dict[str, tuple[str, ...]] = {
    "perception": ("OCR", "ImageDescription", "RegionAttributeDescription", "TextToBbox"),
    "operation": ("DrawBox", "AddText", "GoogleSearch"),
    "logic": ("Calculator", "Solver", "Plot", "MathOCR", "CountGivenObject"),
    "creativity": ("TextToImage", "ImageStylization"),
}
CATEGORY_NAMES: tuple[str, ...] = tuple(CATEGORIES)

#: Tools whose calls make up the image-generation score (Ans+I) of the official evaluator.
IMAGEGEN_TOOLS: tuple[str, ...] = ("DrawBox", "AddText", "Plot", "TextToImage", "ImageStylization")

#: The tool name Lagent records for a reply with no parseable action (a format error).
NO_ACTION = "NoAction"
#: The tool name Lagent records for a call to a tool not offered for the query.
INVALID_ACTION = "InvalidAction"
#: Lagent's ``ActionStatusCode`` names, as the official records spell them.
State = Literal["SUCCESS", "ARGS_ERROR", "API_ERROR"]

ErrorKind = Literal["format", "args", "other"]
#: Table 5's classes of an errored call: format (NoAction, InvalidAction), argument format
#: (ARGS_ERROR), other (N/A: any other API error). The mapping is ours, not the official code's.
ERROR_KINDS: tuple[ErrorKind, ...] = ("format", "args", "other")

Outcome = Literal["passed", "failed", "error", "skipped"]
#: How a case can end (SPEC section 6), in the order reports list them.
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "error", "skipped")

#: The per-case property with the seconds a case waited on the model (the report's
#: ``usage.model_s`` sums it); absent where no model was called (replayed predictions).
MODEL_S_PROPERTY = "gta_model_s"


def tool_category(name: str) -> str:
    """Return the tool's category, or ``"none"`` for tools outside the 14 (official ``gettype``)."""
    for category, names in CATEGORIES.items():
        if name in names:
            return category
    return "none"


#: What a ``--gta-agent-command`` template may name (docs/options.md lists them): the case's MCP
#: URL, the query file, the recording proxy's OpenAI and Anthropic base URLs, the model id, the
#: file an answer may be written to (``output_file`` is another name of it), the case's id, and
#: the directory whose files are the case's deliverables (GTA-Workflow).
AGENT_PLACEHOLDERS = (
    "mcp_url",
    "query_file",
    "model_url",
    "anthropic_url",
    "model",
    "answer_file",
    "output_file",
    "case_id",
    "deliverables_dir",
)
#: Seconds one case's agent may run before its process group is stopped (``--gta-agent-timeout``).
DEFAULT_AGENT_TIMEOUT = 600.0
