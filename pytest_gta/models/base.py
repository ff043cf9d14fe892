"""The model adapter interface and its registry.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pytest_gta.dataset import Dataset, Query
from pytest_gta.errors import GtaUsageError
from pytest_gta.models.generation import GenerationSettings
from pytest_gta.types import Mode, ModelOutput, ModelRequest

if TYPE_CHECKING:
    from pytest_gta.models.cache import ResponseCache
    from pytest_gta.models.catalog import CatalogEntry
    from pytest_gta.models.usage import Budget

ENTRY_POINT_GROUP = "pytest_gta.models"


@runtime_checkable
class ModelAdapter(Protocol):
    """A chat model. ``generate`` must be safe to call from several threads at once."""

    #: Name shown in reports and used as the JUnit ``gta_model`` property.
    name: str
    #: ``react`` (text in, text out) or ``native`` (provider function calling).
    protocol: str

    def generate(self, request: ModelRequest) -> ModelOutput:
        """Answer one request.

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
    protocol: str

    def recorded(self, query: Query, mode: Mode) -> Recorded | None:
        """The recorded predictions for ``query`` in ``mode``, or ``None`` if there are none."""
        ...


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
    token/cost budget.
    """

    dataset: Dataset
    modes: Sequence[Mode]
    invocation_dir: Path
    options: Mapping[str, Any] = field(default_factory=dict)
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
        raise GtaUsageError("--gta-model is empty; pass e.g. --gta-model=oracle")
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
        f"--gta-model={raw}: unknown model provider {head!r}.{hint}\nKnown providers: "
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
    from pytest_gta.models import catalog

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
    if spec.entry is None and spec.name:
        return ModelSpec(spec.raw, spec.provider, spec.name, catalog.find(spec.name))
    return spec


def make_model(raw: str, context: ModelContext) -> ModelAdapter | RecordedSource:
    """Build the model named by ``--gta-model`` from the registry (or the catalog)."""
    entry_points = model_entry_points()
    spec = resolve_spec(raw, list(entry_points), context.generation)
    if spec.provider not in entry_points:
        raise GtaUsageError(
            f"--gta-model={raw}: resolves to the {spec.provider!r} provider, which is not "
            f"registered (is pytest-gta installed with its entry points?)"
        )
    factory: ModelFactory = entry_points[spec.provider].load()
    return factory(spec, context)
