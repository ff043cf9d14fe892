"""The model adapter interface, every hook point an adapter may offer, and the registry.

An adapter author finds everything here: :class:`ModelAdapter` (the three members every model
needs), :class:`BaseModelAdapter` (subclass it: the optional capabilities, each with its
default and what the plugin does with it), :class:`RecordedSource` and
:class:`BaseRecordedSource` for replayed predictions, and :class:`ModelContext` (what a factory
is given). :class:`pytest_gta.models.chat.ChatAdapter` adds the response cache, budget,
concurrency limit and retries on top of :class:`BaseModelAdapter`.

A model is addressed as ``provider/model`` (``openai/gpt-4o``), ``provider:argument``
(``opencompass:outputs/predictions``, ``mock:script.json``) or a bare provider (``oracle``).
Providers are found through the ``pytest_gta.models`` entry-point group and loaded only when
named, so an SDK that is not installed costs nothing until it is asked for. The built-in
providers register through the same entry points as third-party ones.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, runtime_checkable

from pytest_gta.dataset import Dataset, Query
from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_MODEL
from pytest_gta.models import catalog
from pytest_gta.models.generation import GenerationSettings
from pytest_gta.types import ModelOutput, ModelRequest
from pytest_gta.vocabulary import Mode, ProtocolName

if TYPE_CHECKING:
    from pytest_gta.models.cache import ResponseCache
    from pytest_gta.models.catalog import CatalogEntry
    from pytest_gta.models.usage import Budget

ENTRY_POINT_GROUP = "pytest_gta.models"


@runtime_checkable
class ModelAdapter(Protocol):
    """The least a model must offer: a name, a protocol, and ``generate``.

    Any object with these members works (the hook and entry-point examples are plain classes).
    Subclass :class:`BaseModelAdapter` instead to declare the optional capabilities below with
    mypy checking them; the plugin gives an object that does not subclass it the defaults
    (:func:`adopt`).
    """

    #: Name shown in reports and used as the JUnit ``gta_model`` property.
    name: str
    #: ``react`` (text in, text out) or ``native`` (provider function calling).
    protocol: ProtocolName

    def generate(self, request: ModelRequest) -> ModelOutput:
        """Answer one request; it must be safe to call from several threads at once.

        Raise :class:`~pytest_gta.errors.GtaInfrastructureError` when the endpoint fails for good
        (after retries); the case then ends as an error.
        """
        ...


@dataclass(frozen=True)
class Recorded:
    """Predictions recorded by another harness for one query, in the official record format."""

    predictions: list[dict[str, Any]]
    gold: list[dict[str, Any]]


@runtime_checkable
class RecordedSource(Protocol):
    """A "model" that replays recorded predictions instead of generating them."""

    name: str
    protocol: ProtocolName

    def recorded(self, query: Query, mode: Mode) -> Recorded | None:
        """The recorded predictions for ``query`` in ``mode``, or ``None`` if there are none."""
        ...


class ModelInfo:
    """What the run's header and report say about a model; every member has a default."""

    name: str
    protocol: ProtocolName = "react"
    #: The catalog entry a leaderboard name resolved to: its list prices (``--gta-max-cost``)
    #: and the leaderboard row printed beside the run. ``None``: not a catalog model.
    catalog_entry: CatalogEntry | None = None
    #: Notes for the report (a setting the endpoint ignores, a deprecated model...).
    warnings: Sequence[str] = ()

    def describe(self) -> dict[str, Any] | None:
        """The report's ``settings.generation``: how requests are made and where they go.

        Never a secret. ``None`` (the default): the report has no generation section.
        """
        return None

    def close(self) -> None:
        """Release what the model holds open (its HTTP connections) at the session's end.

        Where pytest runs on in the same process (pytester, an IDE), connections left to the
        garbage collector each surface later as a ``ResourceWarning`` in whatever runs then.
        """


class BaseModelAdapter(ModelInfo, ABC):
    """Base class of model adapters: :class:`ModelAdapter` plus every optional capability.

    Only :meth:`generate` must be implemented; the rest has defaults that suit a remote
    endpoint answering one request at a time. In-process engines override what lets the
    plugin batch their work (:mod:`pytest_gta.run.ahead`).
    """

    #: Ask the plugin to generate every step-mode reply of this process in one
    #: :meth:`generate_batch` before pytest's loop starts (only without xdist).
    prefetch_steps: bool = False
    #: With :attr:`prefetch_steps`, also run the end-to-end episodes in lockstep rounds of
    #: :meth:`generate_each` before the loop.
    prefetch_episodes: bool = False
    #: A method that loads weights or connects, for adapters with something slow to do before
    #: the first case (define ``def warm_up(self) -> None``). The plugin calls it once per
    #: process that runs cases, with a progress line, and records its time in the report's
    #: ``timings``; if it fails, the cases that need the model are errors. ``None`` (the
    #: default): nothing to load, no line.
    warm_up: Callable[[], None] | None = None
    #: How many episodes a process runs at once by default (``--gta-concurrency`` overrides):
    #: a pool of this many threads calls :meth:`generate` concurrently
    #: (:mod:`pytest_gta.run.pipeline`). 1 (the default): one at a time, for an adapter that was
    #: not written for threads; an endpoint that serves many requests at once sets more.
    concurrency: int = 1

    @abstractmethod
    def generate(self, request: ModelRequest) -> ModelOutput:
        """Answer one request (see :meth:`ModelAdapter.generate`)."""

    def generate_batch(self, requests: Sequence[ModelRequest]) -> list[ModelOutput]:
        """Answer independent requests, one output each, in order; the first failure raises.

        The default answers them one by one; a batch engine answers them together.
        """
        return [self.generate(request) for request in requests]

    def generate_each(self, requests: Sequence[ModelRequest]) -> list[ModelOutput | BaseException]:
        """Answer independent requests; a failed one gets its exception in its slot.

        The lockstep rounds of :func:`pytest_gta.run.loops.run_lockstep` use it, so that one
        episode's failure does not fail the others.
        """
        out: list[ModelOutput | BaseException] = []
        for request in requests:
            try:
                out.append(self.generate(request))
            except Exception as exc:
                out.append(exc)
        return out

    def work_summary(self) -> str | None:
        """One line on what the adapter did so far, printed after batched generation."""
        return None


class BaseRecordedSource(ModelInfo, ABC):
    """Base class of recorded-prediction sources: :class:`RecordedSource` plus the defaults."""

    @abstractmethod
    def recorded(self, query: Query, mode: Mode) -> Recorded | None:
        """The recorded predictions for ``query`` in ``mode`` (see :class:`RecordedSource`)."""


def generates(model: object) -> TypeGuard[BaseModelAdapter]:
    """Whether ``model`` generates replies (an adapter), so loops and tools run for it."""
    return isinstance(model, BaseModelAdapter)


def replays(model: object) -> TypeGuard[BaseRecordedSource]:
    """Whether ``model`` replays recorded predictions: no loop runs, no tool is called."""
    return isinstance(model, BaseRecordedSource)


def warm_up_of(model: object) -> Callable[[], None] | None:
    """What loads ``model`` before the first case (:attr:`BaseModelAdapter.warm_up`), if any."""
    return model.warm_up if generates(model) else None


def default_concurrency(model: object) -> int:
    """Episodes ``model`` runs at once unless told (:attr:`BaseModelAdapter.concurrency`)."""
    return max(1, int(model.concurrency)) if generates(model) else 1


def can_prefetch_steps(model: object) -> bool:
    """Whether ``model`` asks for every step-mode reply in one batch before the loop."""
    return generates(model) and model.prefetch_steps


def can_prefetch_episodes(model: object) -> bool:
    """Whether ``model`` also asks for its end-to-end episodes in lockstep batches."""
    return can_prefetch_steps(model) and generates(model) and model.prefetch_episodes


#: The optional members an object that does not subclass the base classes may still define;
#: :func:`adopt` keeps them rather than the defaults.
OPTIONAL_MEMBERS = (
    "catalog_entry",
    "warnings",
    "describe",
    "prefetch_steps",
    "prefetch_episodes",
    "generate_batch",
    "generate_each",
    "warm_up",
    "concurrency",
    "work_summary",
    "close",
)


class _Adopted:
    """What both wrappers of :func:`adopt` share: the user's object behind the interface."""

    inner: Any

    def _take_over(self, inner: ModelAdapter | RecordedSource) -> None:
        """Wrap ``inner``: its name, protocol and whichever optional members it defines."""
        self.inner = inner
        self.name = inner.name
        self.protocol = inner.protocol
        for member in OPTIONAL_MEMBERS:
            if hasattr(inner, member) and hasattr(self, member):
                setattr(self, member, getattr(inner, member))

    def __getattr__(self, name: str) -> Any:
        # Whatever else the user's object has stays reachable through the gta_model fixture.
        if name == "inner":  # not wrapped yet (a copy in progress): no endless recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


class _AdoptedModel(_Adopted, BaseModelAdapter):
    """A plain :class:`ModelAdapter` seen through :class:`BaseModelAdapter`'s interface."""

    def __init__(self, inner: ModelAdapter) -> None:
        self._take_over(inner)

    def generate(self, request: ModelRequest) -> ModelOutput:
        """The wrapped object's answer."""
        output: ModelOutput = self.inner.generate(request)
        return output


class _AdoptedSource(_Adopted, BaseRecordedSource):
    """A plain :class:`RecordedSource` seen through :class:`BaseRecordedSource`'s interface."""

    def __init__(self, inner: RecordedSource) -> None:
        self._take_over(inner)

    def recorded(self, query: Query, mode: Mode) -> Recorded | None:
        """The wrapped object's records."""
        records: Recorded | None = self.inner.recorded(query, mode)
        return records


def adopt(model: ModelAdapter | RecordedSource) -> BaseModelAdapter | BaseRecordedSource:
    """What a ``pytest_gta_make_model`` hook returned, as one of the two base classes.

    Raises:
        GtaUsageError: for an object that is neither a model nor a recorded source.
    """
    if isinstance(model, BaseModelAdapter | BaseRecordedSource):
        return model
    if isinstance(model, RecordedSource):
        return _AdoptedSource(model)
    if isinstance(model, ModelAdapter):
        return _AdoptedModel(model)
    raise GtaUsageError(
        f"the model built for {OPT_MODEL} is a {type(model).__name__}, which has neither "
        "name, protocol and generate(request) (pytest_gta.models.base.ModelAdapter) nor name, "
        "protocol and recorded(query, mode) (RecordedSource)"
    )


@dataclass(frozen=True)
class ModelSpec:
    """A parsed ``--gta-model`` value."""

    raw: str
    provider: str
    #: The part after ``provider/`` or ``provider:`` (empty for a bare provider).
    name: str = ""
    #: The catalog entry a leaderboard name resolved to (stop words, window, leaderboard row).
    entry: CatalogEntry | None = None


def display_name(spec: ModelSpec) -> str:
    """The leaderboard name for a catalog name, else what the user typed."""
    explicit = "/" in spec.raw or ":" in spec.raw
    return spec.entry.name if spec.entry is not None and not explicit else spec.raw


@dataclass
class ModelContext:
    """What a model factory may use.

    Besides the dataset, the selected modes and the invocation dir, real adapters get the
    session's generation settings, its response cache (``None``: ``--gta-cache=off``) and its
    token/cost budget; recorded sources get ``--gta-recorded-root``.
    """

    dataset: Dataset
    modes: Sequence[Mode]
    invocation_dir: Path
    #: ``--gta-recorded-root``: the dataset root written in recorded prediction files
    #: (``None``: detected from their paths).
    recorded_root: str | None = None
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    cache: ResponseCache | None = None
    budget: Budget | None = None


ModelFactory = Callable[[ModelSpec, ModelContext], "ModelAdapter | RecordedSource"]


def model_entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """Registered providers by name (nothing is imported)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def parse_model_spec(raw: str, providers: Sequence[str]) -> ModelSpec:
    """Split ``--gta-model`` into provider and name.

    Raises:
        GtaUsageError: for an unknown provider, listing the known ones and close matches.
    """
    value = raw.strip()
    if not value:
        raise GtaUsageError(f"{OPT_MODEL} is empty; pass e.g. {OPT_MODEL}=oracle")
    for sep in (":", "/"):
        head, found, tail = value.partition(sep)
        if found and head in providers:
            return ModelSpec(value, head, tail)
    if value in providers:
        return ModelSpec(value, value, "")
    head = value.split(":", 1)[0].split("/", 1)[0]
    close = difflib.get_close_matches(head, list(providers), n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise GtaUsageError(
        f"{OPT_MODEL}={raw}: unknown model provider {head!r}.{hint}\nKnown providers: "
        f"{', '.join(sorted(providers))} (more can be registered under the "
        f"{ENTRY_POINT_GROUP!r} entry-point group); write provider/model, provider:argument, or "
        "a bare provider name."
    )


def catalog_spec(raw: str, entry: CatalogEntry, generation: GenerationSettings) -> ModelSpec:
    """Where a leaderboard name goes: a compatible server, vLLM/llama.cpp, or its API.

    With ``--gta-base-url`` (or ``OPENAI_BASE_URL``) the ``openai`` adapter asks the server
    which name to send.
    """
    if generation.base_url is not None or os.environ.get("OPENAI_BASE_URL", "").strip():
        return ModelSpec(raw, "openai", generation.served_model or "", entry)
    if entry.runtime == "vllm" and entry.hf_id:
        return ModelSpec(raw, "vllm", entry.hf_id, entry)
    if entry.runtime in ("llamacpp", "transformers"):
        return ModelSpec(raw, entry.runtime, "", entry)
    return ModelSpec(raw, entry.api_provider or "openai", entry.api_model or entry.name, entry)


def resolve_spec(raw: str, providers: Sequence[str], generation: GenerationSettings) -> ModelSpec:
    """``provider/...``, ``provider:...``, a bare provider, or a catalog (leaderboard) name."""
    try:
        spec = parse_model_spec(raw, providers)
    except GtaUsageError as provider_error:
        if "/" in raw or ":" in raw:
            raise
        entry = catalog.find(raw)
        if entry is None:
            # A bare word is a catalog name or a provider: lead with whichever it resembles.
            head = raw.strip()
            close = difflib.get_close_matches(head, list(providers), n=2, cutoff=0.75)
            if close and not catalog.close_names(head):
                raise provider_error from None
            catalog.lookup(raw)
            raise
        return catalog_spec(raw, entry, generation)
    if spec.provider == "vllm" and spec.name and generation.base_url is not None:
        # The weights are served (--gta-base-url or a managed server): reach them over HTTP.
        name = generation.served_model or spec.name
        return ModelSpec(spec.raw, "openai", name, catalog.find(spec.name))
    if spec.entry is None and spec.name:
        return ModelSpec(spec.raw, spec.provider, spec.name, catalog.find(spec.name))
    return spec


def make_model(raw: str, context: ModelContext) -> ModelAdapter | RecordedSource:
    """Build the model named by ``--gta-model`` from the registry (or the catalog)."""
    entry_points = model_entry_points()
    spec = resolve_spec(raw, list(entry_points), context.generation)
    if spec.provider not in entry_points:
        raise GtaUsageError(
            f"{OPT_MODEL}={raw}: resolves to the {spec.provider!r} provider, which is not "
            f"registered (is pytest-gta installed with its entry points?)"
        )
    factory: ModelFactory = entry_points[spec.provider].load()
    return factory(spec, context)
