"""pytest-gta's entry module (``pytest11: gta``).

It must cost nothing in a project that does not use GTA: it imports only pytest and small
stdlib-only modules, registers options, markers and fixtures, and returns early from every hook
when no ``--gta-*`` option is in use. Datasets, models, NumPy and the similarity model are
loaded only when a GTA case needs them.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gta.dataset import CATEGORIES, QUERY_TYPES
from pytest_gta.options import SAMPLE_FALLBACK, GtaSettings, resolve_settings
from pytest_gta.options import pytest_addoption as _addoption
from pytest_gta.types import MODES

if TYPE_CHECKING:
    from pytest_gta.dataset import Dataset
    from pytest_gta.models.base import ModelAdapter, ModelContext, RecordedSource
    from pytest_gta.models.cache import ResponseCache
    from pytest_gta.models.usage import Budget, Prices
    from pytest_gta.report.collector import RunInfo
    from pytest_gta.runner import Case, CaseResult, Scorer
    from pytest_gta.tools import (
        Recorder,
        ToolBackend,
        ToolBackendContext,
        ToolContext,
        ToolInvocation,
        ToolSet,
        ToolSpec,
    )
    from pytest_gta.types import ToolResult

SUITE = Path(__file__).with_name("suite.py")
SUITE_NODEID = "gta"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register ``pytest_gta_*`` hook specifications."""
    from pytest_gta import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--gta-*`` options and ini keys."""
    _addoption(parser)


class GtaState:
    """Per-process state of a session; everything heavy is built on first use."""

    def __init__(self, config: pytest.Config, settings: GtaSettings) -> None:
        self.config = config
        self.settings = settings
        self._dataset: Dataset | None = None
        self._model: ModelAdapter | RecordedSource | None = None
        self._tools: ToolSet | None = None
        self._scorer: Scorer | None = None
        self._sim_path: Path | None = None
        self._cases: list[Case] | None = None
        self._registered_marks: set[str] = set()
        #: The usage ledger shared by the session's processes (set in ``pytest_configure``).
        self.ledger_path: Path | None = None
        self._output_dir: Path | None = None
        from pytest_gta.ahead import AheadWork

        #: Models loaded and replies generated before the first case (:mod:`pytest_gta.ahead`).
        self.ahead = AheadWork(self)

    # -- data ------------------------------------------------------------------------------
    def dataset(self) -> Dataset:
        """The dataset, loaded and validated once (a bad one is a usage error)."""
        if self._dataset is None:
            from pytest_gta.dataset import DatasetError, load_dataset

            if self.settings.data is None:
                from pytest_gta.install.installer import how_to_get
                from pytest_gta.options import DATASET_NAME

                raise pytest.UsageError(
                    f"pytest-gta: no GTA dataset to run --gta-model={self.settings.model} on: "
                    f"{self.settings.data_source}.\n"
                    + how_to_get(self.settings.data_dir / DATASET_NAME)
                    + "\nTo try the plugin on the bundled 13-query sample instead, add "
                    "--gta-data=sample."
                )
            try:
                self._dataset = load_dataset(self.settings.data)
            except DatasetError as exc:
                raise pytest.UsageError(
                    f"{exc}\n(dataset from {self.settings.data_source})"
                ) from None
            if self.settings.ids is not None:
                unknown = [i for i in self.settings.ids if i not in self._dataset.queries]
                if unknown:
                    ids = list(self._dataset.queries)
                    shown = ", ".join(ids[:12]) + (" ..." if len(ids) > 12 else "")
                    raise pytest.UsageError(
                        f"--gta-ids: unknown query id(s) {', '.join(unknown)} in "
                        f"{self._dataset.root} (ids are the keys of dataset.json: {shown})"
                    )
        return self._dataset

    def cases(self) -> list[Case]:
        """The selected (query, mode) cases in collection order: mode-major, dataset order."""
        if self._cases is None:
            from pytest_gta.runner import Case

            queries = self.dataset().select(self.settings.ids, self.settings.limit)
            self._cases = [Case(mode, q) for mode in self.settings.modes for q in queries]
            for case in self._cases:
                for name in case.marks():
                    self.register_mark(name)
        return self._cases

    def register_mark(self, name: str) -> None:
        """Declare a marker so ``--strict-markers`` accepts data-derived marks."""
        from pytest_gta.marks import describe_mark

        if name not in self._registered_marks:
            self._registered_marks.add(name)
            self.config.addinivalue_line("markers", f"{name}: {describe_mark(name)}")

    @property
    def marks(self) -> list[str]:
        """Every GTA marker known in this session (static and data-derived)."""
        return sorted(self._registered_marks)

    # -- model, tools, scorer ------------------------------------------------------------------
    def model(self) -> ModelAdapter | RecordedSource:
        """The model under evaluation, built once through ``pytest_gta_make_model``."""
        if self._model is None:
            from pytest_gta.errors import GtaUsageError
            from pytest_gta.models.base import ModelContext

            if self.settings.model is None:
                pytest.skip("no model to evaluate: pass --gta-model (e.g. --gta-model=oracle)")
            budget = self.budget()
            context = ModelContext(
                dataset=self.dataset(),
                modes=self.settings.modes,
                invocation_dir=self.settings.invocation_dir,
                options={"recorded_root": self.settings.recorded_root},
                generation=self.settings.generation,
                cache=self.response_cache(),
                budget=budget,
            )
            try:
                model = self.config.hook.pytest_gta_make_model(
                    config=self.config, spec=self.settings.model, context=context
                )
            except GtaUsageError as exc:
                raise pytest.UsageError(str(exc)) from None
            if model is None:
                raise pytest.UsageError(f"--gta-model={self.settings.model}: no plugin built it")
            if budget is not None:
                budget.prices = self.prices(model)
                if budget.max_cost is not None and budget.prices is None:
                    raise pytest.UsageError(
                        f"--gta-max-cost: no prices known for {model.name}; pass "
                        "--gta-price=IN,OUT (USD per million input and output tokens)"
                    )
            self._model = model
        return self._model

    def prices(self, model: object) -> Prices | None:
        """``--gta-price``, else the catalog's list prices of the model."""
        from pytest_gta.models.usage import Prices

        if self.settings.price is not None:
            return Prices(*self.settings.price)
        entry = getattr(model, "catalog_entry", None)
        known = getattr(entry, "prices", None)
        return None if known is None else Prices(*known)

    def response_cache(self) -> ResponseCache | None:
        """The response cache (``None`` with ``--gta-cache=off``)."""
        from pytest_gta.models.cache import ResponseCache

        generation = self.settings.generation
        if generation.cache == "off":
            return None
        root = self.settings.cache_dir
        if root is None:
            cache = getattr(self.config, "cache", None)
            if cache is None:
                return None
            root = Path(cache.mkdir("gta-responses"))
        return ResponseCache(root, generation.cache)

    def budget(self) -> Budget | None:
        """The session's token/cost budget, if one was set."""
        from pytest_gta.models.usage import Budget, UsageLedger

        settings = self.settings
        if settings.max_tokens_total is None and settings.max_cost is None:
            return None
        if self.ledger_path is None:
            self.ledger_path = Path(tempfile.mkdtemp(prefix="pytest-gta-")) / "usage.ledger"
        return Budget(UsageLedger(self.ledger_path), settings.max_tokens_total, settings.max_cost)

    def toolset(self) -> ToolSet:
        """The ``--gta-tools`` backends in priority order."""
        if self._tools is None:
            from pytest_gta.errors import GtaUsageError
            from pytest_gta.tools import ToolBackendContext, ToolSet, parse_tool_specs

            settings = self.settings
            context = ToolBackendContext(
                dataset=self.dataset(),
                invocation_dir=settings.invocation_dir,
                options={"cassettes": settings.tool_cassettes, "sandbox": settings.sandbox},
            )
            backends = []
            try:
                for spec in parse_tool_specs(self.settings.tools):
                    backend = self.config.hook.pytest_gta_make_tool(
                        config=self.config, spec=spec, context=context
                    )
                    if backend is None:
                        raise GtaUsageError(f"--gta-tools={spec.raw}: no plugin built it")
                    backends.append(backend)
            except GtaUsageError as exc:
                raise pytest.UsageError(str(exc)) from None
            self._tools = ToolSet(backends, self._recorder())
        return self._tools

    def _recorder(self) -> Recorder | None:
        """Records live backends' answers when ``--gta-tool-record`` asks for it."""
        settings = self.settings
        if settings.tool_record == "none":
            return None
        if settings.tool_cassettes is None:
            raise pytest.UsageError(
                "--gta-tool-record needs --gta-tool-cassettes=DIR: where to write the cassettes"
            )
        from tool_backends.cassettes import Cassettes

        cassettes = Cassettes(settings.tool_cassettes)
        overwrite = settings.tool_record == "all"

        def record(invocation: ToolInvocation, context: ToolContext, result: ToolResult) -> None:
            cassettes.record(
                invocation.name,
                invocation.arguments,
                result,
                context.dataset,
                context.output_dir,
                overwrite=overwrite,
            )

        return record

    def tool_routes(self) -> dict[str, str]:
        """Which backend serves each tool of the selected queries (header and report)."""
        tools = dict.fromkeys(t for case in self.cases() for t in case.query.tool_names)
        return self.toolset().describe_routes(list(tools))

    def needs_similarity(self) -> bool:
        """Whether any selected case is scored by similarity (subjective, or e2e image)."""
        from pytest_gta.runner import needs_similarity

        return any(needs_similarity(case.query, case.mode) for case in self.cases())

    def sim_path(self) -> Path:
        """The similarity model's directory (assembled from PyPI parts on first use)."""
        if self._sim_path is None:
            from pytest_gta.errors import GtaUsageError
            from pytest_gta.scoring.similarity import resolve_sim_model

            try:
                self._sim_path = resolve_sim_model(self.settings.sim_model)
            except GtaUsageError as exc:
                raise pytest.UsageError(str(exc)) from None
        return self._sim_path

    def scorer(self) -> Scorer:
        """The scorer; the similarity model itself loads on first similarity."""
        if self._scorer is None:
            from pytest_gta.runner import Scorer
            from pytest_gta.scoring.similarity import SentenceSimilarity

            self._scorer = Scorer(
                lambda: SentenceSimilarity(self.sim_path()), self.settings.sim_threshold
            )
        return self._scorer

    def output_dir(self, factory: pytest.TempPathFactory | None = None) -> Path:
        """Where tools write the files they produce during this session (one per process)."""
        if self._output_dir is None:
            if factory is None:
                # pytest's own factory (the object the tmp_path_factory fixture returns), so the
                # files land under the session's basetemp and are cleaned up like tmp_path's.
                factory = getattr(self.config, "_tmp_path_factory", None)
            if factory is not None:
                self._output_dir = factory.mktemp("gta-output")
            else:
                self._output_dir = Path(tempfile.mkdtemp(prefix="gta-output-"))
        return self._output_dir

    def uses_tools(self) -> bool:
        """Whether tool backends take part: end-to-end mode with a model that calls tools."""
        from pytest_gta.models.base import RecordedSource

        return "e2e" in self.settings.modes and not isinstance(self.model(), RecordedSource)

    def run_info(self) -> RunInfo:
        """What the report says about the run besides the cases."""
        from pytest_gta.models.catalog import leaderboard_row
        from pytest_gta.report.collector import RunInfo

        model = self.model()
        warnings = [str(w) for w in getattr(model, "warnings", [])]
        warnings += [str(w) for w in self.dataset().warnings]
        tools = self.settings.tools if self.uses_tools() else None
        describe = getattr(model, "describe", None)
        prices = self.prices(model)
        return RunInfo(
            model.name,
            model.protocol,
            warnings,
            tools,
            generation=describe() if callable(describe) else None,
            leaderboard=leaderboard_row(getattr(model, "catalog_entry", None)),
            prices=None if prices is None else (prices.input, prices.output),
            tool_routes=self.tool_routes() if tools is not None else None,
            tool_backends=self.tool_backend_details() if tools is not None else None,
        )

    def tool_backend_details(self) -> dict[str, Any]:
        """Each backend's ``describe()`` (what it serves, how), for the report."""
        details: dict[str, Any] = {}
        for backend in self.toolset().backends:
            describe = getattr(backend, "describe", None)
            details[backend.name] = describe() if callable(describe) else {}
        return details

    def validate(self) -> None:
        """Fail at startup, not mid-run: data, ids, model, tools and similarity model."""
        self.cases()
        self.model()
        if self.uses_tools():
            self.toolset()
        if self.needs_similarity():
            self.sim_path()


STATE = pytest.StashKey[GtaState]()


def state_of(config: pytest.Config) -> GtaState:
    """The session's :class:`GtaState`."""
    return config.stash[STATE]


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``--gta-download`` and ``--gta-data-info`` run instead of a test session."""
    if not (
        config.getoption("gta_download")
        or config.getoption("gta_data_info")
        or config.getoption("gta_record_manifest")
    ):
        return None
    from pytest_gta.install.cli import run

    return run(config)


def pytest_configure(config: pytest.Config) -> None:
    """Resolve settings; when a model is given, validate everything and start the collector."""
    static = ["gta", *(f"gta_mode_{m}" for m in MODES), *(f"gta_type_{t}" for t in QUERY_TYPES)]
    static += [f"gta_category_{c}" for c in CATEGORIES]
    static += [f"gta_tool_{t}" for tools in CATEGORIES.values() for t in tools]
    settings = resolve_settings(config)
    state = GtaState(config, settings)
    config.stash[STATE] = state
    for name in static:
        state.register_mark(name)
    if not settings.active:
        return
    from pytest_gta.outward import install_log_filter

    install_log_filter()
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and workerinput.get("gta_ledger"):
        state.ledger_path = Path(workerinput["gta_ledger"])
    state.validate()
    if workerinput is None:
        from pytest_gta.report.collector import GtaCollector

        config.pluginmanager.register(
            GtaCollector(config, settings, state.dataset, state.run_info), "gta-collector"
        )
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(_XdistBridge(state), "gta-xdist")


class _XdistBridge:
    """Hands the controller's usage ledger to each xdist worker (one budget per session)."""

    def __init__(self, state: GtaState) -> None:
        self.state = state

    def pytest_configure_node(self, node: object) -> None:
        """Tell a starting worker where the session's ledger is."""
        if self.state.ledger_path is not None:
            node.workerinput["gta_ledger"] = str(self.state.ledger_path)  # type: ignore[attr-defined]

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """Collect a finished worker's loading and generation times for the report."""
        collector = self.state.config.pluginmanager.get_plugin("gta-collector")
        timings = getattr(node, "workeroutput", {}).get("gta_timings")
        if collector is not None and isinstance(timings, dict):
            collector.add_timings(str(node.workerinput.get("workerid", "worker")), timings)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """When a ``-m`` expression naming GTA marks selected nothing, say which marks exist."""
    markexpr = str(config.getoption("markexpr", "") or "")
    state = config.stash.get(STATE, None)
    if exitstatus != pytest.ExitCode.NO_TESTS_COLLECTED or "gta" not in markexpr or state is None:
        return
    for line in mark_hint(markexpr, state.marks, state.settings.active):
        terminalreporter.write_line(line, yellow=True)


def mark_hint(markexpr: str, marks: list[str], active: bool) -> list[str]:
    """Why ``-m markexpr`` selected no GTA case: no model, or marks that do not exist."""
    import difflib
    import re

    if not active:
        return [
            f"pytest-gta: -m {markexpr!r} selected nothing: GTA cases (and their gta_* marks) are "
            "collected only with --gta-model, e.g. --gta-model=oracle --gta-data=sample"
        ]
    lines = []
    lowered = {m.lower(): m for m in marks}
    for word in dict.fromkeys(re.findall(r"\bgta\w*", markexpr)):
        if word in marks:
            continue
        close = difflib.get_close_matches(word.lower(), list(lowered), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(lowered[c] for c in close)}?" if close else ""
        lines.append(
            f"pytest-gta: no GTA case has the mark {word!r} (marks are case-sensitive){hint}"
        )
    shown = ", ".join(marks)
    lines.append(
        f"pytest-gta: the GTA marks of this run: {shown} (pytest --markers describes each)"
    )
    return lines


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Hand this process's loading times to the report (through xdist from a worker)."""
    config = session.config
    state = config.stash.get(STATE, None)
    if state is None or not state.settings.active or not state.ahead.timings:
        return
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["gta_timings"] = dict(state.ahead.timings)
        return
    collector = config.pluginmanager.get_plugin("gta-collector")
    if collector is not None:
        collector.add_timings("main", state.ahead.timings)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the controller's ledger directory."""
    state = config.stash.get(STATE, None)
    if state is None or state.ledger_path is None or hasattr(config, "workerinput"):
        return
    import shutil

    shutil.rmtree(state.ledger_path.parent, ignore_errors=True)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """One line saying what is evaluated, on what data, with which tools."""
    state = config.stash.get(STATE, None)
    if state is None or not state.settings.active:
        return None
    settings = state.settings
    dataset = state.dataset()
    line = (
        f"gta: model {settings.model}, modes {','.join(settings.modes)}, dataset {dataset.root} "
        f"({len(dataset)} queries, {settings.data_source})"
    )
    lines = [line]
    if settings.data_source.startswith(SAMPLE_FALLBACK):
        lines.append(
            f"gta: {settings.model} runs on the bundled sample because no dataset is installed; "
            "get the real one with pytest --gta-download"
        )
    if state.uses_tools():
        lines.append("gta: tool backends " + ", ".join(b.name for b in state.toolset().backends))
        routes = state.tool_routes()
        lines.append("gta: tools " + ", ".join(f"{t}: {b}" for t, b in routes.items()))
        for name, details in state.tool_backend_details().items():
            isolation = details.get("isolation") if isinstance(details, dict) else None
            if isinstance(isolation, dict) and isolation.get("summary"):
                lines.append(f"gta: model-written code ({name}) runs in {isolation['summary']}")
    return lines


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize every test that asks for ``gta_case`` with the selected cases."""
    if "gta_case" not in metafunc.fixturenames:
        return
    state = state_of(metafunc.config)
    params = [
        pytest.param(case, id=case.id, marks=[getattr(pytest.mark, m) for m in case.marks()])
        for case in state.cases()
    ]
    metafunc.parametrize("gta_case", params)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """With ``--gta-model`` and no GTA test of the user's own, collect the bundled suite.

    Runs first so that ``-k``, ``-m``, ``--lf`` and xdist see the GTA items like any other.
    """
    state = config.stash.get(STATE, None)
    if state is None or not state.settings.active:
        return
    if any("gta_case" in getattr(item, "fixturenames", ()) for item in items):
        return
    module = pytest.Module.from_parent(session, path=SUITE, nodeid=SUITE_NODEID)
    items.extend(session.genitems(module))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Clean every test report before it is shown, sent to the controller or written.

    Whatever path a secret or an unwritable value took (a model's reply, a tool's output, a
    failure message, captured output), it is caught here, in the process that ran the test:
    before xdist's transport (which refuses lone surrogates), the terminal and JUnit XML.
    """
    report: pytest.TestReport = yield
    state = item.config.stash.get(STATE, None)
    if state is not None and state.settings.active:
        from pytest_gta.outward import clean_report

        clean_report(report)
    return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Any:
    """Load models and batch generation before the first case (:mod:`pytest_gta.ahead`)."""
    state = session.config.stash.get(STATE, None)
    if state is not None and state.settings.active and not session.shouldstop:
        state.ahead.run(session)
    return (yield)


@pytest.hookimpl(trylast=True)
def pytest_gta_make_model(
    config: pytest.Config, spec: str, context: ModelContext
) -> ModelAdapter | RecordedSource:
    """Built-in: look the provider up in the ``pytest_gta.models`` registry."""
    from pytest_gta.models.base import make_model

    return make_model(spec, context)


@pytest.hookimpl(trylast=True)
def pytest_gta_make_tool(
    config: pytest.Config, spec: ToolSpec, context: ToolBackendContext
) -> ToolBackend:
    """Built-in: look the backend up in the ``pytest_gta.tools`` registry."""
    from pytest_gta.tools import make_backend

    return make_backend(spec, context)


# ------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="session")
def gta_settings(pytestconfig: pytest.Config) -> GtaSettings:
    """The resolved ``--gta-*`` settings."""
    return state_of(pytestconfig).settings


@pytest.fixture(scope="session")
def gta_dataset(pytestconfig: pytest.Config) -> Dataset:
    """The loaded dataset (``--gta-data``)."""
    return state_of(pytestconfig).dataset()


@pytest.fixture(scope="session")
def gta_model(pytestconfig: pytest.Config) -> ModelAdapter | RecordedSource:
    """The model under evaluation (``--gta-model``); skips when none is given."""
    return state_of(pytestconfig).model()


@pytest.fixture(scope="session")
def gta_tools(pytestconfig: pytest.Config) -> ToolSet:
    """The tool backends (``--gta-tools``), in priority order."""
    return state_of(pytestconfig).toolset()


@pytest.fixture(scope="session")
def gta_scorer(pytestconfig: pytest.Config) -> Scorer:
    """Scores episodes with the official formulas."""
    return state_of(pytestconfig).scorer()


@pytest.fixture(scope="session")
def gta_output_dir(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where tools write the files they produce during this session."""
    return state_of(pytestconfig).output_dir(tmp_path_factory)


@pytest.fixture
def gta_case() -> Case:
    """One (query, mode) case; pytest-gta parametrizes every test that requests it."""
    raise pytest.UsageError("gta_case is parametrized by pytest-gta; it cannot be used directly")


@pytest.fixture
def gta_run(
    request: pytest.FixtureRequest,
    pytestconfig: pytest.Config,
    gta_dataset: Dataset,
    gta_model: ModelAdapter | RecordedSource,
    gta_scorer: Scorer,
    gta_output_dir: Path,
) -> Callable[[Case], CaseResult]:
    """A function that runs and scores a case.

    Model or tool infrastructure failures fail the calling phase with a clean message; call it
    from a fixture (as ``gta_result`` does) to get pytest's *error* outcome for them.
    """
    from pytest_gta.errors import GtaInfrastructureError, GtaUnavailableError
    from pytest_gta.models.base import RecordedSource
    from pytest_gta.models.usage import GtaBudgetExhausted
    from pytest_gta.runner import STOPPED_KEY, run_case

    state = state_of(pytestconfig)

    def run(case: Case) -> CaseResult:
        tools = None
        model: Any = gta_model
        if case.mode == "e2e" and not isinstance(gta_model, RecordedSource):
            tools = state.toolset()
        elif case.mode == "step" and not isinstance(gta_model, RecordedSource):
            model = state.ahead.step_model or gta_model
        try:
            return run_case(
                case,
                gta_dataset,
                model,
                tools,
                gta_scorer,
                gta_output_dir,
                max_turns=state.settings.max_turns,
                ahead=state.ahead.take(case) if case.mode == "e2e" else None,
            )
        except GtaBudgetExhausted as exc:
            # Stop handing out cases; with xdist the controller stops once workers report it.
            request.session.shouldstop = f"pytest-gta: {exc}"
            request.node.user_properties.append((STOPPED_KEY, str(exc)))
            skip, message = True, f"{case.id}: {exc}"
        except GtaUnavailableError as exc:
            skip, message = True, str(exc)
        except GtaInfrastructureError as exc:
            skip, message = False, f"{case.id}: infrastructure error: {exc}"
        # Outside the except blocks, so the report shows the message, not a chained traceback.
        if skip:
            pytest.skip(message)
        pytest.fail(message, pytrace=False)

    return run


@pytest.fixture
def gta_result(
    request: pytest.FixtureRequest,
    gta_case: Case,
    gta_model: ModelAdapter | RecordedSource,
    gta_run: Callable[[Case], CaseResult],
) -> CaseResult:
    """The scored result of this test's case, produced during setup.

    Running in setup is what turns infrastructure failures into pytest errors rather than
    failures; the per-case properties land on the report for JUnit XML and the summary.
    """
    from pytest_gta.runner import DETAIL_KEY, identity_properties

    request.node.user_properties.extend(identity_properties(gta_case, gta_model.name))
    result = gta_run(gta_case)
    request.node.user_properties.extend(result.properties())
    request.node.user_properties.append((DETAIL_KEY, result.detail()))
    return result
