"""A pytest session's GTA services: data, model, tools, scorer, and what the report says of them.

:mod:`pytest_gta.plugin` holds the hooks and fixtures; they ask the :class:`GtaState` kept in
``config.stash`` for what they need, and everything is built on first use, once per process. A
bad value (a dataset with problems, a misspelt model or backend, a missing similarity model)
is a :class:`~pytest_gta.errors.GtaUsageError` wherever it is found, and becomes pytest's
usage error in one place (:meth:`pytest_gta.session.lazy.Lazy.get`), so the session stops
before any case runs with the message and exit status 4.
"""

from __future__ import annotations

import importlib.util
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from pytest_gta.case import Case, MarkRegistry
from pytest_gta.errors import DatasetError, GtaUsageError
from pytest_gta.flags import (
    OPT_AGENT,
    OPT_AGENT_COMMAND,
    OPT_DATA,
    OPT_IDS,
    OPT_MAX_COST,
    OPT_MODEL,
    OPT_PRICE,
    OPT_TOOL_CASSETTES,
    OPT_TOOL_RECORD,
    OPT_TOOLS,
)
from pytest_gta.install.installer import how_to_get
from pytest_gta.mcp.gateway import McpGateway
from pytest_gta.models import base
from pytest_gta.models.base import ModelContext, adopt
from pytest_gta.models.cache import ResponseCache
from pytest_gta.models.usage import Budget, Prices, UsageLedger
from pytest_gta.options import GtaSettings
from pytest_gta.options.data import DATASET_NAME
from pytest_gta.options.tools import apply_to as tools_applied_to
from pytest_gta.options.tools import refuse_without_calls
from pytest_gta.proxy import ModelProxy, no_upstream_reason, upstream_of
from pytest_gta.report.baseline import comparable_run, read_baseline
from pytest_gta.report.images import ImageStore
from pytest_gta.run.agent_command import template_placeholders
from pytest_gta.run.agent_under_test import Agent
from pytest_gta.run.ahead import AheadWork, strategy
from pytest_gta.run.benchmark import QueryView
from pytest_gta.run.context import RunContext, needs_similarity
from pytest_gta.run.runner import Scorer
from pytest_gta.scoring.service import RemoteSimilarity, SimilarityService, shared_service
from pytest_gta.scoring.similarity import SentenceSimilarity, resolve_sim_model
from pytest_gta.session import xdist
from pytest_gta.session.agent_setup import AgentSetup, AgentStart
from pytest_gta.session.lazy import Lazy
from pytest_gta.tools import ToolBackendContext, ToolSet, make_recorder, parse_tool_specs
from pytest_gta.validation import load_dataset

#: What an agent run imports (the ``agents`` extra): the MCP SDK and the server under it.
AGENT_EXTRA = ("mcp", "uvicorn", "starlette")

if TYPE_CHECKING:
    from pytest_gta.case import Case
    from pytest_gta.dataset import Dataset
    from pytest_gta.models.base import BaseModelAdapter, BaseRecordedSource, ModelInfo
    from pytest_gta.models.cache import ResponseCache
    from pytest_gta.models.usage import Budget, Prices
    from pytest_gta.report.baseline import Baseline, ComparableRun
    from pytest_gta.report.images import ImageStore
    from pytest_gta.run.runner import Scorer
    from pytest_gta.scoring.service import SimilarityService
    from pytest_gta.scoring.similarity import Similarity
    from pytest_gta.shard import ShardSelection
    from pytest_gta.tools import Recorder, ToolSet

T = TypeVar("T")


class GtaState:
    """Per-process state of a session; everything heavy is built on first use."""

    def __init__(
        self,
        config: pytest.Config,
        settings: GtaSettings,
        marks: MarkRegistry | None = None,
        view: Callable[[], QueryView | None] = lambda: None,
    ) -> None:
        self.config = config
        self.settings = settings
        #: The benchmark's tasks as queries (``None``: the GTA dataset is loaded), asked once.
        self._view_of = view
        #: Reentrant: a service's build asks for others (the scorer for the similarity path).
        self._building = threading.RLock()
        # Each service, built on first use (typed: no service is looked up by a name).
        self._dataset: Lazy[Dataset] = Lazy(self._building)
        self._view: Lazy[QueryView | None] = Lazy(self._building)
        self._cases: Lazy[list[Case]] = Lazy(self._building)
        self._model: Lazy[BaseModelAdapter | BaseRecordedSource] = Lazy(self._building)
        self._toolset: Lazy[ToolSet] = Lazy(self._building)
        self._run_context: Lazy[RunContext] = Lazy(self._building)
        self._mcp_gateway: Lazy[McpGateway] = Lazy(self._building)
        self._model_proxy: Lazy[ModelProxy | None] = Lazy(self._building)
        self._sim_path: Lazy[Path] = Lazy(self._building)
        self._scorer: Lazy[Scorer] = Lazy(self._building)
        self._similarity_service: Lazy[SimilarityService] = Lazy(self._building)
        self._output_dir: Lazy[Path] = Lazy(self._building)
        self._image_store: Lazy[ImageStore] = Lazy(self._building)
        self._baseline: Lazy[Baseline] = Lazy(self._building)
        #: The session's GTA markers (the entry module declares the static ones).
        self.mark_registry = marks or MarkRegistry(
            lambda line: config.addinivalue_line("markers", line)
        )
        #: The usage ledger shared by the session's processes (set in ``pytest_configure``).
        self.ledger_path: Path | None = None
        #: Models loaded and replies generated before the first case (:mod:`pytest_gta.run.ahead`).
        self.ahead = AheadWork(self.run_context, self.model)
        #: What ``--gta-shard`` kept, in the process that collected (:mod:`pytest_gta.shard`).
        self.shard: ShardSelection | None = None
        #: How the baseline's run differs, when ``--gta-baseline-lenient`` let it through.
        self.baseline_differences: list[str] = []
        #: Lines for the collection summary about how cases were selected.
        self.selection_notes: list[str] = []
        #: The agent's sandbox, built and probed in the background (:meth:`start_agent`).
        self._agent_start: AgentStart | None = None

    def built_model(self) -> BaseModelAdapter | BaseRecordedSource | None:
        """The model, if anything asked for it (what the session closes at its end)."""
        return self._model.built

    def built_similarity_service(self) -> SimilarityService | None:
        """The similarity service, if anything started it (its load time, its close)."""
        return self._similarity_service.built

    # -- data ------------------------------------------------------------------------------
    def dataset(self) -> Dataset:
        """The dataset, loaded and validated once (a bad one is a usage error)."""
        return self._dataset.get(self._load_dataset)

    def view(self) -> QueryView | None:
        """The benchmark's tasks as queries, or ``None`` (a GTA-Atomic run's dataset)."""
        return self._view.get(self._view_of)

    def _built_on(self) -> Dataset:
        """What the model and the tool backends are built on (the dataset, or every tool named).

        A benchmark's view offers the model only the tools a backend offers, which are known
        once the backends are built: both are built on the view with every tool.
        """
        view = self.view()
        return self.dataset() if view is None else view.every

    def _load_dataset(self) -> Dataset:
        """The benchmark's tasks, or the GTA dataset, with the ablated tools left out."""
        return tools_applied_to(self._loaded(), self.settings.tools)

    def _loaded(self) -> Dataset:
        view = self.view()
        if view is not None:
            return view.offered(self.toolset() if self.uses_tools() else None)

        settings = self.settings
        data = settings.data
        if data.path is None:
            raise GtaUsageError(
                f"pytest-gta: no GTA dataset to run {OPT_MODEL}={settings.model.name} on: "
                f"{data.source}.\n"
                + how_to_get(data.dir / DATASET_NAME)
                + "\nTo try the plugin on the bundled 17-query sample instead, add "
                f"{OPT_DATA}=sample."
            )
        try:
            dataset = load_dataset(data.path)
        except DatasetError as exc:
            raise GtaUsageError(f"{exc}\n(dataset from {data.source})") from None
        ids = settings.cases.ids
        if ids is not None:
            unknown = [i for i in ids if i not in dataset.queries]
            if unknown:
                known = list(dataset.queries)
                shown = ", ".join(known[:12]) + (" ..." if len(known) > 12 else "")
                raise GtaUsageError(
                    f"{OPT_IDS}: unknown query id(s) {', '.join(unknown)} in "
                    f"{dataset.root} (ids are the keys of dataset.json: {shown})"
                )
        return dataset

    def cases(self) -> list[Case]:
        """The selected (query, mode) cases in collection order: mode-major, dataset order."""
        return self._cases.get(self._select_cases)

    def _select_cases(self) -> list[Case]:

        selected = self.settings.cases
        queries = self.dataset().select(selected.ids, selected.limit)
        first, epochs = self.settings.model.generation.epoch, selected.epochs
        # Epoch-major within a mode: a run stopped early (a budget, Ctrl-C) has whole epochs.
        cases = [
            Case(mode, q, epoch, repeated=epochs > 1)
            for mode in selected.modes
            for epoch in range(first, first + epochs)
            for q in queries
        ]
        for case in cases:
            for name in case.marks():
                self.register_mark(name)
        return cases

    def register_mark(self, name: str) -> None:
        """Declare a marker so ``--strict-markers`` accepts data-derived marks."""
        self.mark_registry.register(name)

    @property
    def marks(self) -> list[str]:
        """Every GTA marker known in this session (static and data-derived)."""
        return self.mark_registry.names

    # -- model, tools, scorer ------------------------------------------------------------------
    def model(self) -> BaseModelAdapter | BaseRecordedSource:
        """The model under evaluation, built once through ``pytest_gta_make_model``.

        Whatever a hook returns is seen through the declared interface
        (:func:`pytest_gta.models.base.adopt`), so every optional capability has its default.
        """
        if self.settings.model.name is None:
            pytest.skip(f"no model to evaluate: pass {OPT_MODEL} (e.g. {OPT_MODEL}=oracle)")
        return self._model.get(self._make_model)

    def _make_model(self) -> BaseModelAdapter | BaseRecordedSource:

        budget = self.budget()
        settings = self.settings
        context = ModelContext(
            dataset=self._built_on(),
            modes=settings.cases.modes,
            invocation_dir=settings.invocation_dir,
            recorded_root=settings.model.recorded_root,
            generation=settings.model.generation,
            cache=self.response_cache(),
            budget=budget,
        )
        built = self.config.hook.pytest_gta_make_model(
            config=self.config, spec=settings.model.name, context=context
        )
        if built is None:
            raise GtaUsageError(f"{OPT_MODEL}={settings.model.name}: no plugin built it")
        model = adopt(built)
        if budget is not None:
            budget.prices = self.prices(model)
            if budget.max_cost is not None and budget.prices is None:
                raise GtaUsageError(
                    f"{OPT_MAX_COST}: no prices known for {model.name}; pass "
                    f"{OPT_PRICE}=IN,OUT (USD per million input and output tokens)"
                )
        return model

    def prices(self, model: ModelInfo) -> Prices | None:
        """``--gta-price``, else the catalog's list prices of the model."""
        price = self.settings.budget.price
        if price is not None:
            return Prices(*price)
        entry = model.catalog_entry
        return None if entry is None or entry.prices is None else Prices(*entry.prices)

    def response_cache(self) -> ResponseCache | None:
        """The response cache (``None`` with ``--gta-cache=off``)."""
        generation = self.settings.model.generation
        if generation.cache == "off":
            return None
        root = self.settings.model.cache_dir
        if root is None:
            cache = getattr(self.config, "cache", None)  # absent with -p no:cacheprovider
            if cache is None:
                return None
            root = Path(cache.mkdir("gta-responses"))
        return ResponseCache(root, generation.cache)

    def budget(self) -> Budget | None:
        """The session's token/cost budget, if one was set."""
        limits = self.settings.budget
        if not limits.limited:
            return None
        if self.ledger_path is None:
            self.ledger_path = Path(tempfile.mkdtemp(prefix="pytest-gta-")) / "usage.ledger"
        return Budget(UsageLedger(self.ledger_path), limits.max_tokens_total, limits.max_cost)

    def toolset(self) -> ToolSet:
        """The ``--gta-tools`` backends in priority order."""
        return self._toolset.get(self._make_toolset)

    def _make_toolset(self) -> ToolSet:

        settings = self.settings
        context = ToolBackendContext(
            dataset=self._built_on(),
            invocation_dir=settings.invocation_dir,
            cassettes=settings.tools.cassettes,
            sandbox=settings.tools.sandbox,
            max_reply_bytes=settings.model.generation.max_reply_bytes,
        )
        backends = []
        for spec in parse_tool_specs(settings.tools.backends):
            backend = self.config.hook.pytest_gta_make_tool(
                config=self.config, spec=spec, context=context
            )
            if backend is None:
                raise GtaUsageError(f"{OPT_TOOLS}={spec.raw}: no plugin built it")
            backends.append(backend)
        return ToolSet(backends, self._recorder(), settings.tools.faults)

    def _recorder(self) -> Recorder | None:
        """Records live backends' answers when ``--gta-tool-record`` asks for it."""
        tools = self.settings.tools
        if tools.record == "none":
            return None
        if tools.cassettes is None:
            raise GtaUsageError(
                f"{OPT_TOOL_RECORD} needs {OPT_TOOL_CASSETTES}=DIR: where to write the cassettes"
            )
        return make_recorder(tools.cassettes, overwrite=tools.record == "all")

    def tool_routes(self) -> dict[str, str]:
        """Which backend serves each tool of the selected queries (header and report)."""
        tools = dict.fromkeys(t for case in self.cases() for t in case.query.tool_names)
        return self.toolset().describe_routes(list(tools))

    def concurrency(self, model: BaseModelAdapter | BaseRecordedSource) -> int:
        """``--gta-concurrency``, else what suits the model (its ``concurrency``)."""
        chosen = self.settings.cases.concurrency
        return chosen if chosen is not None else base.default_concurrency(model)

    def runs_ahead(self) -> bool:
        """Whether the xdist workers, which run the cases, run their episodes ahead."""
        model = self.model()
        agent = self.settings.agent.spec is not None
        return strategy(model, self.concurrency(model), worker=True, agent=agent) == "pool"

    def needs_similarity(self) -> bool:
        """Whether any selected case is scored by similarity (subjective, or e2e image)."""
        return any(needs_similarity(case.query, case.mode) for case in self.cases())

    def run_context(self) -> RunContext:
        """What the run layer needs to run this process's cases, built once they are valid."""
        return self._run_context.get(self._make_run_context)

    def _make_run_context(self) -> RunContext:
        settings = self.settings
        model = self.model()
        return RunContext(
            dataset=self.dataset(),
            model=model,
            scorer=self.scorer(),
            tools=self.toolset() if self.uses_tools() else None,
            output_dir=self.output_dir(),
            max_turns=settings.cases.max_turns,
            concurrency=self.concurrency(model),
            budgeted=settings.budget.limited,
            sim_model=settings.scoring.sim_model,
            queued=self._queued if xdist.is_worker(self.config) else None,
            agent=self.agent(),
            agent_timeout=settings.agent.timeout,
            gateway=self.mcp_gateway,
            proxy=self.model_proxy,
            generation=settings.model.generation,
        )

    def _queued(self) -> list[int]:
        """The indices of the items xdist queued for this worker so far (see ``xdist_queue``)."""
        return xdist.xdist_queue(self.config) or []

    # -- the agent under test ------------------------------------------------------------------
    def agent(self) -> Agent | None:
        """The agent under test (``--gta-agent``, ``--gta-agent-command``), built once; or ``None``.

        A callable is imported in its sandbox before any case, so a typo is a usage error then.
        """
        setup = self.agent_setup()
        return None if setup is None else setup.agent

    def start_agent(self) -> None:
        """Check the agent's settings now; build its sandbox and probe it in the background.

        The sandbox's self-test, its warm start (the callable's import) and the cheating probe
        take seconds: they overlap collection and the model's loading (:class:`AgentStart`),
        and the first thing that needs the agent waits for them (:meth:`agent_setup`).
        """
        if self.settings.agent.spec is None or self._agent_start is not None:
            return
        self._check_agent()
        settings = self.settings
        self._agent_start = AgentStart(
            self.config,
            settings.agent,
            invocation_dir=settings.invocation_dir,
            sandbox_mode=settings.tools.sandbox,
            probe=not xdist.is_worker(self.config),
        )
        # Read here: the build's thread must not wait for the build lock, which a caller
        # waiting for the build may hold (the run context asks for the agent).
        self._agent_start.begin(self.dataset().root)

    def agent_setup(self) -> AgentSetup | None:
        """The agent with its sandbox and what the start-up probe found (``None``: no agent)."""
        if self.settings.agent.spec is None:
            return None
        self.start_agent()
        assert self._agent_start is not None
        return self._agent_start.setup()

    def agent_header(self) -> list[str]:
        """The sandbox's lines for the header if it is ready by then; else that they follow."""
        return [] if self._agent_start is None else self._agent_start.header()

    def _check_agent(self) -> None:
        """What can be checked of the agent at once: its model, the extra, its placeholders.

        Raises:
            pytest.UsageError: the agent cannot run in this configuration.
        """
        try:
            self._agent_usage()
        except GtaUsageError as exc:
            raise pytest.UsageError(str(exc)) from None

    def _agent_usage(self) -> None:
        settings = self.settings
        agent = settings.agent
        model = self.model()
        if base.replays(model):
            raise GtaUsageError(
                f"{OPT_MODEL}={settings.model.name} replays recorded predictions: there is no "
                "model for an agent to call; give an agent a model that generates (e.g. "
                "openai/...)"
            )
        missing = [name for name in AGENT_EXTRA if importlib.util.find_spec(name) is None]
        if missing:
            raise GtaUsageError(
                f"{OPT_AGENT if agent.callable else OPT_AGENT_COMMAND} serves the tools "
                f"over MCP, which needs the agents extra: pip install 'pytest-gta[agents]' "
                f"(missing: {', '.join(missing)})"
            )
        if agent.command is not None:
            wanted = template_placeholders(agent.command) & {"model_url", "anthropic_url"}
            if wanted and upstream_of(model) is None:
                names = ", ".join("{" + w + "}" for w in sorted(wanted))
                raise GtaUsageError(
                    f"{OPT_AGENT_COMMAND} names {names}, but {no_upstream_reason(model)}"
                )

    def mcp_gateway(self) -> McpGateway:
        """This process's MCP server (each xdist worker has its own), started on first case."""
        return self._mcp_gateway.get(self._start_gateway)

    def _start_gateway(self) -> McpGateway:
        # Started here, under the build lock: episodes in the pool's threads open their cases
        # at once, and each must find the server listening.
        gateway = McpGateway()
        gateway.start()
        return gateway

    def model_proxy(self) -> ModelProxy | None:
        """This process's recording proxy in front of the model, its endpoint or itself.

        ``None``: recorded predictions, which have no model to ask.
        """
        return self._model_proxy.get(self._make_proxy)

    def _make_proxy(self) -> ModelProxy | None:
        model = self.model()
        upstream = upstream_of(model)
        if upstream is None:
            return None
        return ModelProxy(
            upstream,
            cache=self.response_cache(),
            budget=self.budget(),
            prices=self.prices(model),
        )

    def close_agent_services(self) -> None:
        """Stop the MCP server, the model proxy and the agents' sandbox this process started."""
        for service in (self._mcp_gateway.take(), self._model_proxy.take()):
            if service is not None:
                service.close()
        if self._agent_start is not None:  # kept: the report describes it afterwards
            self._agent_start.close()

    def sim_path(self) -> Path:
        """The similarity model's directory (assembled from PyPI parts on first use)."""
        return self._sim_path.get(lambda: resolve_sim_model(self.settings.scoring.sim_model))

    def scorer(self) -> Scorer:
        """The scorer; the similarity model itself loads on first similarity.

        In an xdist worker the similarity is the controller's (:mod:`pytest_gta.scoring.service`),
        so the run loads the model once and a worker stays small.
        """
        # Deferred: the scorer's formulas import NumPy, kept off the plugin's import path.

        served = (xdist.worker_input(self.config) or {}).get(xdist.SIMILARITY_INPUT)
        served = served or self.shared_similarity()

        def similarity() -> Similarity:
            if served:
                # Deferred: the similarity client imports NumPy (see above).

                return RemoteSimilarity(str(served[0]), str(served[1]))
            return self.local_similarity()

        return self._scorer.get(lambda: Scorer(similarity, self.settings.scoring.sim_threshold))

    def shared_similarity(self) -> tuple[str, str] | None:
        """The test session's similarity service for this run's model (tests only), if any."""
        return shared_service(self.settings.scoring.sim_model)

    def local_similarity(self) -> Similarity:
        """The similarity model in this process (loaded on first use)."""
        return SentenceSimilarity(self.sim_path())

    def similarity_service(self) -> SimilarityService:
        """The controller's similarity service for the xdist workers, started (and loading) once."""
        return self._similarity_service.get(lambda: SimilarityService(self.local_similarity))

    def output_dir(self, factory: pytest.TempPathFactory | None = None) -> Path:
        """Where tools write the files they produce during this session (one per process)."""

        def make() -> Path:
            chosen = factory
            if chosen is None:
                # pytest's own factory (the object the tmp_path_factory fixture returns), so the
                # files land under the session's basetemp and are cleaned up like tmp_path's.
                chosen = getattr(self.config, "_tmp_path_factory", None)
            if chosen is not None:
                return chosen.mktemp("gta-output")
            return Path(tempfile.mkdtemp(prefix="gta-output-"))

        return self._output_dir.get(make)

    def wants_images(self) -> bool:
        """Whether an HTML report will show the cases' images (ours or pytest-html's)."""
        workerinput = xdist.worker_input(self.config)
        if workerinput is not None:
            return bool(workerinput.get(xdist.IMAGES_INPUT))
        return self.settings.report.html is not None or bool(
            self.config.getoption("htmlpath", None)
        )

    def image_store(self) -> ImageStore | None:
        """The session's shared image store (:mod:`pytest_gta.report.images`), if wanted.

        The controller makes it under pytest's basetemp and hands its path to the xdist
        workers, so every process's cases add to the one directory the controller renders from.
        """
        if not self.wants_images():
            return None

        def make() -> ImageStore:

            workerinput = xdist.worker_input(self.config)
            if workerinput is not None:
                return ImageStore(Path(workerinput[xdist.IMAGES_INPUT]))
            factory = getattr(self.config, "_tmp_path_factory", None)
            root = (
                factory.mktemp("gta-images")
                if factory is not None
                else Path(tempfile.mkdtemp(prefix="gta-images-"))
            )
            return ImageStore(root)

        return self._image_store.get(make)

    def uses_tools(self) -> bool:
        """Whether tool backends take part: end-to-end mode with a model that calls tools."""
        return "e2e" in self.settings.cases.modes and not base.replays(self.model())

    # -- what the header and report say --------------------------------------------------------
    def tool_backend_details(self) -> dict[str, Any]:
        """Each backend's ``describe()`` (what it serves, how), for the report."""
        return {backend.name: backend.describe() for backend in self.toolset().backends}

    def validate(self) -> None:
        """Fail at startup, not mid-run: data, ids, model, agent, tools, similarity, baseline."""
        self.cases()
        self.model()
        self.start_agent()
        if self.uses_tools():
            self.toolset()
        elif self.view() is None:
            refuse_without_calls(
                self.settings.tools, f"{self.model().name} replays recorded predictions"
            )
        if self.needs_similarity():
            self.sim_path()
        if not xdist.is_worker(self.config):  # the controller compares and judges
            settings = self.settings
            settings.gates.check_modes(settings.cases.modes, settings.baseline.report is not None)
            self.baseline()

    # -- baseline --------------------------------------------------------------------------
    def baseline(self) -> Baseline | None:
        """``--gta-baseline``, read and checked against this run once (``None``: not given)."""
        if self.settings.baseline.report is None:
            return None
        return self._baseline.get(self._load_baseline)

    def _load_baseline(self) -> Baseline:

        settings = self.settings.baseline
        spec = str(settings.report)
        given = self.config.getoption("gta_baseline") or spec
        baseline, self.baseline_differences = read_baseline(
            spec, str(given), self.comparable(), settings.lenient
        )
        return baseline

    def comparable(self) -> ComparableRun:
        """What a baseline must share with this run (see ``compare.mismatches``)."""
        return comparable_run(
            self.dataset().sha256,
            self.settings.cases.modes,
            self.model().protocol,
            sim_model=self.settings.scoring.sim_model,
            sim_threshold=self.settings.scoring.sim_threshold,
        )
