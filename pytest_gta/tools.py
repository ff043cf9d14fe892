"""The tool backend interface, its registry, and routing of a query's tools to backends.

``--gta-tools`` lists backends in priority order (``local,agentlego=http://gpu:16181,replay``);
each tool of a query is served by the first backend that offers it. Backends are found through
the ``pytest_gta.tools`` entry-point group, built-ins included, so a remote tool server, local
CPU tools and recorded outputs all fit the same small protocol.

A backend raises :class:`~pytest_gta.errors.GtaToolError` for a failed call (the model sees the
message, the call is recorded as ``API_ERROR``) and
:class:`~pytest_gta.errors.GtaInfrastructureError` when it is down (the case ends as an error).
"""

from __future__ import annotations

import difflib
import importlib.metadata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pytest_gta.dataset import Dataset, Query, ToolMeta
from pytest_gta.errors import GtaToolError, GtaToolMiss, GtaUnavailableError, GtaUsageError
from pytest_gta.outward import redact
from pytest_gta.types import ResultItem, ToolResult

ENTRY_POINT_GROUP = "pytest_gta.tools"


@dataclass(frozen=True)
class ToolInvocation:
    """A validated call: the model's JSON arguments and their type-converted form."""

    tool: ToolMeta
    arguments: Mapping[str, Any]
    converted: Mapping[str, Any]

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.tool.name


@dataclass(frozen=True)
class ToolContext:
    """Where a call happens: the dataset, the query, and a directory for produced files."""

    dataset: Dataset
    query: Query
    output_dir: Path


@runtime_checkable
class ToolBackend(Protocol):
    """Something that can execute GTA tools. ``call`` must be safe to call from threads."""

    #: Shown in the terminal header and the report ("which backend served each tool").
    name: str

    def offers(self, tool: str) -> bool:
        """Whether this backend can serve ``tool``."""
        ...

    def call(self, invocation: ToolInvocation, context: ToolContext) -> ToolResult:
        """Run one call and return its outputs."""
        ...


@dataclass(frozen=True)
class ToolSpec:
    """A parsed entry of ``--gta-tools``: ``name`` or ``name=argument``."""

    raw: str
    name: str
    argument: str = ""


@dataclass
class ToolBackendContext:
    """What a backend factory may use."""

    dataset: Dataset
    invocation_dir: Path
    options: Mapping[str, Any]


ToolFactory = Callable[[ToolSpec, ToolBackendContext], ToolBackend]


def tool_entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """Registered backends by name (nothing is imported)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def parse_tool_specs(raw: str) -> tuple[ToolSpec, ...]:
    """Split ``--gta-tools`` on commas into backend specs (``name`` or ``name=argument``)."""
    specs = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, argument = item.partition("=")
        specs.append(ToolSpec(item, name.strip(), argument.strip()))
    if not specs:
        raise GtaUsageError("--gta-tools is empty; pass e.g. --gta-tools=replay")
    return tuple(specs)


def check_backend_names(specs: Sequence[ToolSpec], known: Sequence[str]) -> None:
    """Reject unknown backend names, listing the known ones and close matches."""
    for spec in specs:
        if spec.name not in known:
            close = difflib.get_close_matches(spec.name, list(known), n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise GtaUsageError(
                f"--gta-tools={spec.raw}: unknown tool backend {spec.name!r}.{hint} Known "
                f"backends: {', '.join(sorted(known))} (register more under the "
                f"{ENTRY_POINT_GROUP!r} entry-point group)."
            )


def make_backend(spec: ToolSpec, context: ToolBackendContext) -> ToolBackend:
    """Build one backend from the registry."""
    entry_points = tool_entry_points()
    check_backend_names([spec], list(entry_points))
    factory: ToolFactory = entry_points[spec.name].load()
    return factory(spec, context)


def _redacted(result: ToolResult) -> ToolResult:
    """A tool's text outputs without secrets: they are shown to the model and reported."""
    items = tuple(
        ResultItem(i.type, redact(i.content))
        if isinstance(i.content, str) and i.type == "text"
        else i
        for i in result.items
    )
    return result if items == result.items else ToolResult(items)


class Recorder(Protocol):
    """Where live backends' answers are recorded (``--gta-tool-record``)."""

    def __call__(
        self, invocation: ToolInvocation, context: ToolContext, result: ToolResult
    ) -> None:
        """Record one successful call."""
        ...


class ToolSet:
    """The configured backends in priority order, and an optional recorder of live answers."""

    def __init__(self, backends: Sequence[ToolBackend], recorder: Recorder | None = None) -> None:
        self.backends = list(backends)
        self.recorder = recorder

    def chain(self, tool: str) -> list[ToolBackend]:
        """Every backend that offers ``tool``, in priority order (misses fall through)."""
        return [b for b in self.backends if b.offers(tool)]

    def describe_routes(self, tools: Sequence[str]) -> dict[str, str]:
        """Which backend serves each tool (``-`` when none does), for headers and reports."""
        out = {}
        for tool in tools:
            chain = self.chain(tool)
            out[tool] = " > ".join(b.name for b in chain) if chain else "-"
        return out

    def route(self, query: Query) -> dict[str, ToolBackend]:
        """Which backend serves each of the query's tools.

        Raises:
            GtaUnavailableError: naming the tools no backend offers (the case is skipped).
        """
        routes: dict[str, ToolBackend] = {}
        missing = []
        for tool in query.tool_names:
            backend = next((b for b in self.backends if b.offers(tool)), None)
            if backend is None:
                missing.append(tool)
            else:
                routes[tool] = backend
        if missing:
            configured = ", ".join(b.name for b in self.backends) or "none"
            reasons = []
            for backend in self.backends:
                explain: Callable[[str], str | None] | None = getattr(
                    backend, "unavailable_reason", None
                )
                if explain is None:
                    continue
                reasons += [str(r) for r in map(explain, missing) if r]
            why = f" ({'; '.join(reasons)})" if reasons else ""
            raise GtaUnavailableError(
                f"no tool backend offers {', '.join(missing)} (configured: {configured}){why}; "
                "add a backend that serves it to --gta-tools, e.g. --gta-tools=...,replay to use "
                "the recorded reference outputs"
            )
        return routes

    def runner(
        self, routes: Mapping[str, ToolBackend], context: ToolContext
    ) -> Callable[[ToolMeta, dict[str, Any], dict[str, Any]], ToolResult]:
        """A protocol ``ToolRunner`` that sends each call along ``routes`` (see :meth:`route`).

        A :class:`~pytest_gta.errors.GtaToolMiss` (a replay backend without a recording of the
        call) passes the call to the next backend that offers the tool; answers of live
        backends are handed to the recorder.
        """

        def run(meta: ToolMeta, arguments: dict[str, Any], converted: dict[str, Any]) -> ToolResult:
            invocation = ToolInvocation(meta, arguments, converted)
            first = routes[meta.name]
            chain = [first, *(b for b in self.chain(meta.name) if b is not first)]
            miss: GtaToolMiss | None = None
            for backend in chain:
                try:
                    result = backend.call(invocation, context)
                except GtaToolMiss as exc:
                    miss = miss or exc
                    continue
                except GtaToolError as exc:
                    # The message becomes the model's observation and lands in every report.
                    raise GtaToolError(redact(str(exc))) from None
                if self.recorder is not None and getattr(backend, "live", True):
                    self.recorder(invocation, context, result)
                return _redacted(result)
            assert miss is not None
            raise miss

        return run
