"""The tool backend interface, every hook point a backend may offer, its registry, and routing.

A backend author finds everything here: :class:`ToolBackend` (the members every backend needs),
:class:`BaseToolBackend` (subclass it: the optional capabilities with their defaults),
:class:`ToolBackendContext` (what a factory is given), and the :class:`ToolInvocation` and
:class:`ToolContext` of each call.

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
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pytest_gta.dataset import Dataset, Query
from pytest_gta.entry_points import load_registered
from pytest_gta.errors import GtaToolError, GtaToolMiss, GtaUnavailableError, GtaUsageError
from pytest_gta.faults import FaultLog, FaultSpec, corrupted, failure, point
from pytest_gta.flags import OPT_AGENT_TIMEOUT, OPT_TOOL_RECORD, OPT_TOOLS
from pytest_gta.models.generation import DEFAULT_MAX_REPLY_BYTES
from pytest_gta.outward import redact
from pytest_gta.reach import Reach, case_reach
from pytest_gta.types import ResultItem, ToolMeta, ToolResult
from pytest_gta.vocabulary import SandboxMode

ENTRY_POINT_GROUP = "pytest_gta.tools"
#: Where ``--gta-tool-record`` finds what records live answers (:func:`make_recorder`).
RECORDER_GROUP = "pytest_gta.tool_recorders"
#: The recorder of ``--gta-tool-record``: cassettes, which the ``replay`` backend reads back.
CASSETTE_RECORDER = "cassettes"
#: A protocol ``ToolRunner``: ``(meta, raw_arguments, converted_arguments) -> ToolResult``.
_Runner = Callable[[ToolMeta, dict[str, Any], dict[str, Any]], ToolResult]
#: What a call made after its case's deadline is told (it does not run).
DEADLINE_PASSED = (
    f"the task's time ({OPT_AGENT_TIMEOUT}) is up: this call was not run; give the final answer"
)


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
    #: ``time.monotonic()`` by which the case ends (an agent's ``--gta-agent-timeout``): a call
    #: started near it gets the time left (:meth:`time_left`), never more. ``None``: no deadline.
    deadline: float | None = None
    #: The case's sampling epoch: with :attr:`ToolSet.faults`, part of what draws a call's fault.
    epoch: int = 0
    #: The case's calls as the fault layer counts them, and the faults they met.
    faults: FaultLog = field(default_factory=FaultLog, compare=False)

    @cached_property
    def reach(self) -> Reach:
        """The files this case's calls may name: the one rule every backend and producer follows.

        The case's own input files, whatever its tools wrote in its output directory, for
        GTA-Atomic the dataset's data directories, and never the benchmark's own files
        (``dataset.json``, ``end.json``, ``toolmeta.json``); see :mod:`pytest_gta.reach`.
        """
        return case_reach(self.dataset, self.query, (self.output_dir,))

    def time_left(self, limit: float) -> float:
        """Seconds a call may run: ``limit``, or what is left before the case's deadline.

        Raises:
            GtaToolError: the deadline has passed; the call does not start.
        """
        if self.deadline is None:
            return limit
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise GtaToolError(DEADLINE_PASSED)
        return min(limit, left)


@runtime_checkable
class ToolBackend(Protocol):
    """Something that can execute GTA tools: a name, ``offers`` and ``call``.

    Any object with these members works; subclass :class:`BaseToolBackend` to declare the
    optional capabilities too (the plugin gives other objects the defaults, :func:`adopt_backend`).
    """

    #: Shown in the terminal header and the report ("which backend served each tool").
    name: str

    def offers(self, tool: str) -> bool:
        """Whether this backend can serve ``tool``."""
        ...

    def call(self, invocation: ToolInvocation, context: ToolContext) -> ToolResult:
        """Run one call and return its outputs; it must be safe to call from several threads."""
        ...


class BaseToolBackend(ABC):
    """Base class of tool backends: :class:`ToolBackend` plus every optional capability."""

    name: str
    #: Whether answers come from a live tool (recorded into cassettes by
    #: ``--gta-tool-record``) rather than from a recording (``replay``: never re-recorded).
    live: bool = True

    @abstractmethod
    def offers(self, tool: str) -> bool:
        """Whether this backend can serve ``tool``."""

    @abstractmethod
    def call(self, invocation: ToolInvocation, context: ToolContext) -> ToolResult:
        """Run one call (see :meth:`ToolBackend.call`)."""

    def unavailable_reason(self, tool: str) -> str | None:
        """Why this backend does not offer ``tool`` here (a missing API key...), for the skip.

        ``None`` (the default): nothing to say. The reasons of every backend are joined into
        the message of a case skipped because no backend offers one of its tools.
        """
        return None

    def describe(self) -> dict[str, Any]:
        """What the backend says about itself in the report's ``settings.tool_backends``.

        An ``isolation`` entry with a ``summary`` is also printed in the run's header (the
        ``local`` backend says which sandbox runs model-written code). Never a secret.
        """
        return {}


class _AdoptedBackend(BaseToolBackend):
    """A plain :class:`ToolBackend` seen through :class:`BaseToolBackend`'s interface."""

    def __init__(self, inner: ToolBackend) -> None:
        self.inner = inner
        self.name = inner.name
        for member in ("live", "unavailable_reason", "describe"):
            if hasattr(inner, member):
                setattr(self, member, getattr(inner, member))

    def offers(self, tool: str) -> bool:
        """The wrapped object's answer."""
        return self.inner.offers(tool)

    def call(self, invocation: ToolInvocation, context: ToolContext) -> ToolResult:
        """The wrapped object's call."""
        return self.inner.call(invocation, context)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def adopt_backend(backend: ToolBackend) -> BaseToolBackend:
    """``backend`` with every capability of :class:`BaseToolBackend` (wrapped if it lacks them).

    Raises:
        GtaUsageError: for an object that is not a tool backend at all.
    """
    if isinstance(backend, BaseToolBackend):
        return backend
    if isinstance(backend, ToolBackend):
        return _AdoptedBackend(backend)
    raise GtaUsageError(
        f"a tool backend built for {OPT_TOOLS} is a {type(backend).__name__}, which lacks name, "
        "offers(tool) and call(invocation, context) (pytest_gta.tools.ToolBackend)"
    )


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
    #: ``--gta-tool-cassettes``: recorded tool answers to read (``replay``) or write.
    cassettes: Path | None = None
    #: ``--gta-sandbox``: where model-written code runs (the ``local`` backend).
    sandbox: SandboxMode = "auto"
    #: ``--gta-max-reply-bytes``: bytes an HTTP backend reads of one answer at most.
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES


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
        raise GtaUsageError(f"{OPT_TOOLS} is empty; pass e.g. {OPT_TOOLS}=replay")
    return tuple(specs)


def check_backend_names(specs: Sequence[ToolSpec], known: Sequence[str]) -> None:
    """Reject unknown backend names, listing the known ones and close matches."""
    for spec in specs:
        if spec.name not in known:
            close = difflib.get_close_matches(spec.name, list(known), n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise GtaUsageError(
                f"{OPT_TOOLS}={spec.raw}: unknown tool backend {spec.name!r}.{hint} Known "
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


class RecorderFactory(Protocol):
    """What a :data:`RECORDER_GROUP` entry point loads: a recorder writing into ``directory``."""

    def __call__(self, directory: Path, *, overwrite: bool) -> Recorder:
        """A recorder into ``directory``; ``overwrite``: a new answer replaces a recorded one."""
        ...


def make_recorder(directory: Path, *, overwrite: bool) -> Recorder:
    """The :data:`CASSETTE_RECORDER` from the registry, writing into ``directory``.

    Found by entry point, as the backends are, so the core never imports ``tool_backends``:
    the recorder writes the cassettes that the ``replay`` backend reads, and both live there.

    Raises:
        GtaUsageError: no recorder is registered under that name (an install without the
            built-in backends' metadata).
    """
    factory: RecorderFactory = load_registered(
        RECORDER_GROUP, CASSETTE_RECORDER, OPT_TOOL_RECORD, "recorder"
    )
    return factory(directory, overwrite=overwrite)


class ToolSet:
    """The configured backends in priority order, and an optional recorder of live answers."""

    def __init__(
        self,
        backends: Sequence[ToolBackend],
        recorder: Recorder | None = None,
        faults: FaultSpec | None = None,
    ) -> None:
        self.backends = [adopt_backend(b) for b in backends]
        self.recorder = recorder
        #: ``--gta-tool-faults``: the faults the calls meet (``None``: none).
        self.faults = faults if faults is not None and faults.active else None

    def fault_log(self, context: ToolContext) -> FaultLog | None:
        """The log of the faults ``context``'s calls meet (``None``: this set injects none)."""
        return context.faults if self.faults is not None else None

    def chain(self, tool: str) -> list[BaseToolBackend]:
        """Every backend that offers ``tool``, in priority order (misses fall through)."""
        return [b for b in self.backends if b.offers(tool)]

    def describe_routes(self, tools: Sequence[str]) -> dict[str, str]:
        """Which backend serves each tool (``-`` when none does), for headers and reports."""
        out = {}
        for tool in tools:
            chain = self.chain(tool)
            out[tool] = " > ".join(b.name for b in chain) if chain else "-"
        return out

    def route(self, query: Query) -> dict[str, BaseToolBackend]:
        """Which backend serves each of the query's tools.

        Raises:
            GtaUnavailableError: naming the tools no backend offers (the case is skipped).
        """
        routes: dict[str, BaseToolBackend] = {}
        missing = []
        for tool in query.tool_names:
            backend = next((b for b in self.backends if b.offers(tool)), None)
            if backend is None:
                missing.append(tool)
            else:
                routes[tool] = backend
        if missing:
            configured = ", ".join(b.name for b in self.backends) or "none"
            reasons = [
                str(reason)
                for backend in self.backends
                for reason in map(backend.unavailable_reason, missing)
                if reason
            ]
            why = f" ({'; '.join(reasons)})" if reasons else ""
            raise GtaUnavailableError(
                f"no tool backend offers {', '.join(missing)} (configured: {configured}){why}; "
                f"add a backend that serves it to {OPT_TOOLS}, e.g. {OPT_TOOLS}=...,replay to use "
                "the recorded reference outputs"
            )
        return routes

    def runner(
        self, routes: Mapping[str, BaseToolBackend], context: ToolContext
    ) -> Callable[[ToolMeta, dict[str, Any], dict[str, Any]], ToolResult]:
        """A protocol ``ToolRunner`` that sends each call along ``routes`` (see :meth:`route`).

        A :class:`~pytest_gta.errors.GtaToolMiss` (a replay backend without a recording of the
        call) passes the call to the next backend that offers the tool; answers of live
        backends are handed to the recorder. A call that arrives after the case's deadline
        does not run (a tool error the model sees).
        """

        def run(meta: ToolMeta, arguments: dict[str, Any], converted: dict[str, Any]) -> ToolResult:
            context.time_left(0.0)  # raises once the case's deadline has passed
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
                if self.recorder is not None and backend.live:
                    self.recorder(invocation, context, result)
                return _redacted(result)
            assert miss is not None
            raise miss

        if self.faults is None:
            return run
        return _faulty(run, self.faults, context)


def _faulty(run: _Runner, spec: FaultSpec, context: ToolContext) -> _Runner:
    """``run`` behind the fault layer: the one place every producer's calls pass.

    The project's loop, an agent's calls over MCP and a Workflow task's production all run
    their calls through :meth:`ToolSet.runner`, so a fault drawn here is drawn alike for each
    (:mod:`pytest_gta.faults`). A call that meets ``error``, ``timeout`` or ``empty`` never
    reaches a backend (nothing is recorded into cassettes); ``corrupt`` damages a real answer;
    ``slow`` holds the call back (never past the case's deadline), then runs it.
    """
    log, query, epoch = context.faults, context.query.qid, context.epoch

    def faulty(meta: ToolMeta, arguments: dict[str, Any], converted: dict[str, Any]) -> ToolResult:
        context.time_left(0.0)  # a call after the deadline is not counted: it does not run
        index = log.start(meta.name)
        fault = spec.draw(query, epoch, index, meta.name)
        if fault is None:
            return run(meta, arguments, converted)
        log.hit(index, meta.name, fault, arguments)
        if fault in ("error", "timeout"):
            raise failure(fault, meta.name)
        if fault == "empty":
            return ToolResult(())
        if fault == "slow":
            time.sleep(context.time_left(spec.delay))
            return run(meta, arguments, converted)
        return corrupted(
            run(meta, arguments, converted), point(spec, query, epoch, index, meta.name)
        )

    return faulty
