"""A GTA-Workflow run's session: tasks as cases, each produced, judged and reported.

:func:`make_session` gives the plugin a :class:`WorkflowSession` when ``--gta-data`` is a
GTA-Workflow dataset (``end.json``), else the atomic :class:`GtaSession`. The Workflow session
keeps the atomic one's services (the model, the cache, the agent's sandbox, signals) and
replaces what is about atomic queries: the cases (``gta::test_workflow[workflow-3]``), how one
runs (:mod:`pytest_gta.run.workflow`) and the controller's report
(:class:`~pytest_gta.session.workflow_collector.WorkflowCollector`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_gta import signals
from pytest_gta.case import EPOCH_TAG, MarkRegistry, mark_name
from pytest_gta.errors import GtaUsageError
from pytest_gta.evalpack import PREFIX as EVALPACK
from pytest_gta.evalpack import PackTask, pack_path, read_pack
from pytest_gta.flags import OPT_DATA, OPT_JUDGE, OPT_JUDGE_API, OPT_JUDGE_BASE_URL
from pytest_gta.judge.client import (
    BaseJudge,
    ChatJudge,
    ResponsesJudge,
    judge_base_url,
    judge_key,
    judge_served,
    missing_access,
)
from pytest_gta.models.base import ModelContext, adopt
from pytest_gta.options import GtaSettings
from pytest_gta.outward import (
    install_log_filter,
    mask_url,
    register_run_secrets,
    register_secret,
)
from pytest_gta.proxy import ModelProxy, no_upstream_reason, upstream_of
from pytest_gta.report.workflow import judge_where
from pytest_gta.results.workflow import JudgeInfo, WorkflowCase
from pytest_gta.run.workflow import Deliverable, judged_case
from pytest_gta.session import xdist
from pytest_gta.session.gta_session import (
    GtaSession,
    guarded,
    make_model_builtin,
    make_tool_builtin,
)
from pytest_gta.session.keys import DETAIL_KEY, report_only
from pytest_gta.session.workflow_agents import WorkflowProducers, as_dataset
from pytest_gta.session.workflow_collector import CASE_PREFIX, WorkflowCollector
from pytest_gta.workflow_data import WorkflowDataset, WorkflowTask, is_workflow_dir, load_workflow

__all__ = [
    "GtaSession",
    "WorkflowSession",
    "make_model_builtin",
    "make_session",
    "make_tool_builtin",
]

SUITE = Path(__file__).resolve().parent.parent / "suite_workflow.py"
COLLECTOR = "gta-workflow-collector"
#: The controller's check of the workers' collections (under xdist).
CHECK = "gta-workflow-collection-check"
#: The plugin name the Workflow session is registered under, for the bundled Workflow suite
#: (a test module, found again by name: pytester's in-process runs re-import this module).
CURRENT = "gta-workflow-session"


def current(config: pytest.Config) -> WorkflowSession:
    """The Workflow session of ``config``.

    Raises:
        pytest.UsageError: the run is not on a GTA-Workflow dataset.
    """
    session = config.pluginmanager.get_plugin(CURRENT)
    # Not isinstance: pytester's in-process runs import this module anew for each run.
    if not hasattr(session, "workflow_params"):
        raise pytest.UsageError(
            f"gta_task is parametrized by pytest-gta on a GTA-Workflow dataset ({OPT_DATA} "
            "naming a directory with end.json); it cannot be used otherwise"
        )
    return cast("WorkflowSession", session)


def make_session(config: pytest.Config, settings: GtaSettings, marks: MarkRegistry) -> GtaSession:
    """The run's session: a Workflow one on a GTA-Workflow dataset, else the atomic one."""
    path = settings.data.path
    if path is not None and is_workflow_dir(path):
        return WorkflowSession(config, settings, marks)
    return GtaSession(config, settings, marks)


@dataclass(frozen=True)
class WorkflowCaseParam:
    """One pytest case of a Workflow run: a task, in one epoch."""

    task: WorkflowTask
    epoch: int = 0
    repeated: bool = False

    @property
    def id(self) -> str:
        """``workflow-<task id>``, with ``@epochN`` when the run repeats cases."""
        base = f"{CASE_PREFIX}{self.task.task_id}"
        return f"{base}{EPOCH_TAG}{self.epoch}" if self.repeated else base


class WorkflowSession(GtaSession):
    """The session of a run on a GTA-Workflow dataset."""

    suite = SUITE
    fixture = "gta_task"

    def __init__(self, config: pytest.Config, settings: GtaSettings, marks: MarkRegistry) -> None:
        super().__init__(config, settings, marks)
        self.workflow_collector: WorkflowCollector | None = None
        self._dataset: WorkflowDataset | None = None
        self._pack: dict[str, PackTask] | None = None
        self.producers = WorkflowProducers(self.state)
        self._judge_proxy: ModelProxy | None = None
        self._judge_door = ""
        if not config.pluginmanager.has_plugin(CURRENT):
            config.pluginmanager.register(self, CURRENT)

    # -- start and stop ------------------------------------------------------------------------
    def dataset(self) -> WorkflowDataset:
        """The Workflow dataset, loaded once (a usage error names the file and the task)."""
        if self._dataset is None:
            path = self.state.settings.data.path
            assert path is not None  # make_session chose this class for a dataset path
            try:
                self._dataset = load_workflow(path)
            except GtaUsageError as exc:
                raise pytest.UsageError(str(exc)) from None
        return self._dataset

    def pack(self) -> dict[str, PackTask] | None:
        """The eval pack of ``--gta-model=evalpack:PACK.json``, or ``None`` for other models."""
        name = self.state.settings.model.name or ""
        if not name.startswith(EVALPACK):
            return None
        if self._pack is None:
            try:
                settings = self.state.settings
                path = pack_path(name, settings.invocation_dir)
                self._pack = read_pack(path, settings.workflow.evalpack_roots)
            except GtaUsageError as exc:
                raise pytest.UsageError(str(exc)) from None
        return self._pack

    def start(self) -> None:
        """Validate the data, the pack and the judge; register the controller's collector."""
        config = self.config
        install_log_filter()
        xdist.announce_worker(config)
        signals.install(config, self.halt, worker=xdist.is_worker(config))
        self.state.ledger_path = xdist.ledger_from_controller(config)
        register_run_secrets([self.state.settings.workflow.base_url or ""])
        if judge_key():
            register_secret(judge_key(), "the judge's key")
        dataset = self.dataset()
        self.check_judge()
        if self.pack() is None:
            self.producers.check()
            self.producers.prepare(dataset)
        if xdist.is_worker(config):
            return
        self.workflow_collector = WorkflowCollector(
            config, self.state.settings, str(dataset.root), self.judge_info()
        )
        config.pluginmanager.register(self.workflow_collector, COLLECTOR)
        if config.pluginmanager.hasplugin("xdist"):
            # Only workers collect under xdist: the controller checks their selections.
            config.pluginmanager.register(xdist.CollectionCheck(self.check_access), CHECK)

    def unconfigure(self) -> None:
        """Unregister the collector, then what the atomic session stops."""
        check = self.config.pluginmanager.get_plugin(CHECK)
        for plugin in (self.workflow_collector, check, self):
            if plugin is not None and self.config.pluginmanager.is_registered(plugin):
                self.config.pluginmanager.unregister(plugin)
        super().unconfigure()

    # -- the terminal --------------------------------------------------------------------------
    def header(self) -> list[str]:
        """The dataset, where deliverables come from, and the judge."""
        settings = self.state.settings
        flow = settings.workflow
        dataset = self.dataset()
        official = "official" if flow.api == "responses" else "chat: NOT the official"
        timeout = flow.judge_timeout(settings.model.generation.timeout)
        lines = [
            f"gta: GTA-Workflow: model {settings.model.name}, dataset {dataset.root} "
            f"({len(dataset)} tasks, {settings.data.source})",
            f"gta: judge {flow.judge_model} ({official} protocol) "
            f"{judge_where(self.judge_info())}; {timeout:g} s per checkpoint call; "
            f"SR threshold {flow.threshold:g}",
        ]
        lines += self.producers.header_lines(self.pack() is not None)
        return lines

    def judge_info(self) -> JudgeInfo:
        """Who judges, by which protocol, where it is reached (credentials masked)."""
        flow = self.state.settings.workflow
        url = judge_base_url(flow.base_url)
        return JudgeInfo(
            model=flow.judge_model,
            api=flow.api,
            official=flow.api == "responses",
            base_url=mask_url(url) if url else None,
            served=judge_served(flow.judge, url),
            threshold=flow.threshold,
        )

    # -- collection ----------------------------------------------------------------------------
    def params(self) -> list[Any]:
        """No atomic case in a Workflow run."""
        return []

    def workflow_params(self) -> list[Any]:
        """``gta_task``'s parameters: the selected tasks (times the epochs), with their marks."""
        cases = self.state.settings.cases
        tasks = self.dataset().select(cases.ids, cases.limit)
        repeated = cases.epochs > 1
        params = []
        for task in tasks:
            for epoch in range(cases.epochs):
                param = WorkflowCaseParam(task, epoch, repeated)
                marks = ["gta", "gta_workflow", *(f"gta_category_{c}" for c in task.categories)]
                marks += [mark_name("gta_tool", t) for t in task.reference_tools]
                for mark in marks:
                    self.state.register_mark(mark)
                params.append(
                    pytest.param(param, id=param.id, marks=[getattr(pytest.mark, m) for m in marks])
                )
        return params

    def rerun_regressions(self, items: list[pytest.Item]) -> None:
        """Workflow runs have no baseline comparison yet: every selected case runs."""

    def collection_finish(self, session: pytest.Session) -> None:
        """The selection is final: keep this shard's share, then check the judge's access.

        Under xdist the controller checks each worker's collection instead
        (:class:`~pytest_gta.session.xdist.CollectionCheck`): a worker may not refuse a run.
        """
        super().collection_finish(session)
        if not xdist.is_worker(self.config):
            self.check_access([item.nodeid for item in session.items])

    def check_access(self, nodeids: list[str]) -> None:
        """A run that judges a task needs a judge it can reach (a usage error, before any task).

        A run that judges nothing (``--collect-only``, every task deselected) needs no key.

        Raises:
            pytest.UsageError: an ``openai/...`` judge with neither a key nor an endpoint.
        """
        tasks = sum(1 for nodeid in nodeids if f"[{CASE_PREFIX}" in nodeid)
        if not tasks or self.config.option.collectonly:
            return
        flow = self.state.settings.workflow
        problem = missing_access(flow.judge, judge_base_url(flow.base_url))
        if problem is not None:
            raise pytest.UsageError(
                f"pytest-gta: {problem}; nothing was run ({tasks} selected task(s) would be judged)"
            )

    def keep_shard(self, session: pytest.Session) -> None:
        """``--gta-shard=K/N``: every N-th task, from the K-th (tasks are alike in size)."""
        shard = self.state.settings.cases.shard
        if shard is None:
            return
        ids = sorted({_task_of(item) for item in session.items} - {None}, key=str)
        mine = {tid for i, tid in enumerate(ids) if i % shard.total == shard.index - 1}
        kept = [i for i in session.items if _task_of(i) in mine]
        dropped = [i for i in session.items if i not in kept]
        if dropped:
            session.items[:] = kept
            session.config.hook.pytest_deselected(items=dropped)

    # -- running -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def running_ahead(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        """Workflow cases run one at a time per process."""
        yield

    def make_judge(self) -> BaseJudge:
        """A judge client for one case (its own call log), sharing the response cache."""
        flow = self.state.settings.workflow
        kind = ResponsesJudge if flow.api == "responses" else ChatJudge
        url = self.judge_url()
        local = self._judge_proxy is not None
        generation = self.state.settings.model.generation
        return kind(
            flow.judge_model,
            url,
            "local" if local else judge_key(),
            None if local else self.state.response_cache(),
            # A judge served here is booked by its proxy; a remote one here.
            None if local else self.state.budget(),
            timeout=flow.judge_timeout(generation.timeout),
            max_reply_bytes=generation.max_reply_bytes,
        )

    def judge_url(self) -> str | None:
        """The judge's base URL: given, from the environment, or a proxy for a model run here.

        A judge that is not ``openai/...`` and has no endpoint (``smollm2``, ``transformers/...``,
        ``anthropic/...``) is built like a model under test and answered by a recording proxy
        of its own (chat completions only): its calls are cached, budgeted and counted there.
        """
        flow = self.state.settings.workflow
        url = judge_base_url(flow.base_url)
        if url is not None or flow.judge.startswith("openai/"):
            return url
        if self._judge_proxy is None:
            self._judge_proxy, self._judge_door = self._serve_judge(flow.judge)
        return str(self._judge_door)

    def check_judge(self) -> None:
        """At start-up: a judge served here must use the chat variant (a usage error)."""
        flow = self.state.settings.workflow
        served = judge_base_url(flow.base_url) is None and not flow.judge.startswith("openai/")
        if served and flow.api != "chat":
            raise pytest.UsageError(
                f"{OPT_JUDGE}={flow.judge}: a judge served here speaks chat completions "
                f"only; add {OPT_JUDGE_API}=chat (not the official protocol), or give its "
                f"endpoint with {OPT_JUDGE_BASE_URL}"
            )

    def _serve_judge(self, spec: str) -> tuple[ModelProxy, str]:
        state, config = self.state, self.config
        settings = state.settings
        context = ModelContext(
            dataset=as_dataset(self.dataset(), None),
            modes=("e2e",),
            invocation_dir=settings.invocation_dir,
            generation=settings.model.generation,
            cache=state.response_cache(),
            budget=state.budget(),
        )
        built = config.hook.pytest_gta_make_model(config=config, spec=spec, context=context)
        model = adopt(built) if built is not None else None
        upstream = upstream_of(model) if model is not None else None
        if model is None or upstream is None:
            raise pytest.UsageError(f"{OPT_JUDGE}={spec}: {no_upstream_reason(model)}")
        proxy = ModelProxy(
            upstream,
            cache=state.response_cache(),
            budget=state.budget(),
            prices=state.prices(model),
        )
        return proxy, proxy.open("judge").openai_base_url

    def produce(self, param: WorkflowCaseParam, workdir: Path) -> Deliverable:
        """The deliverable of a task: from the pack, the agent, or the project's loop."""
        task = param.task
        pack = self.pack()
        if pack is not None:
            entry = pack.get(task.task_id)
            if entry is None:
                pytest.skip(f"{param.id}: the eval pack has no task {task.task_id}")
            return Deliverable(
                origin_prompt=entry.origin_prompt,
                trace=entry.trace,
                files=entry.files,
                tree=entry.tree,
                producer="evalpack",
            )
        return self.producers.produce(task, param.epoch, workdir, self.dataset())

    def run_task(self, request: pytest.FixtureRequest, param: WorkflowCaseParam) -> WorkflowCase:
        """``gta_workflow_result``: produce, judge, put the case on its report."""
        started = time.perf_counter()
        workdir = Path(self.state.output_dir()) / param.id
        workdir.mkdir(parents=True, exist_ok=True)
        identity: list[tuple[str, Any]] = [
            ("gta_task_id", param.task.task_id),
            ("gta_model", self.state.settings.model.name),
        ]
        request.node.user_properties.extend(identity)
        deliverable = guarded(request, param.id, lambda: self.produce(param, workdir))
        case = guarded(
            request, param.id, lambda: self._judged(request, param, deliverable, started)
        )
        return self._reported(request, case, identity)

    def _judged(
        self,
        request: pytest.FixtureRequest,
        param: WorkflowCaseParam,
        deliverable: Deliverable,
        started: float,
    ) -> WorkflowCase:
        epoch = param.epoch if param.repeated else None
        return judged_case(
            case_id=param.id,
            task_id=param.task.task_id,
            nodeid=request.node.nodeid,
            epoch=epoch,
            task=param.task,
            deliverable=deliverable,
            make_judge=self.make_judge,
            threshold=self.state.settings.workflow.threshold,
            started=started,
        )

    def _reported(
        self,
        request: pytest.FixtureRequest,
        case: WorkflowCase,
        identity: list[tuple[str, Any]],
    ) -> WorkflowCase:
        """The case's properties on the item and its JSON on the setup report."""
        props: list[tuple[str, Any]] = [
            *([("gta_root_score", case.root_score)] if case.root_score is not None else []),
            ("gta_passed", case.passed),
            # Whatever the judge gave: the deliverable had no file and an empty answer.
            ("gta_empty_deliverable", case.empty_deliverable),
            ("gta_producer", case.producer),
            ("gta_judge_calls", len(case.judge_calls)),
        ]
        if case.judge_error:
            props.append(("gta_judge_error", case.judge_error))
        props += [
            (f"gta_checkpoint_{c.path.replace('.', '_') or 'root'}", c.score)
            for c in case.checkpoints
        ]
        request.node.user_properties.extend(props)
        case.properties = {k: v for k, v in [*identity, *props] if _scalar(v)}
        report_only(request.node).append((DETAIL_KEY, case.model_dump_json()))
        return case

    # -- the end -------------------------------------------------------------------------------
    def finish(self, session: pytest.Session) -> None:
        """Close the agent's services; on the controller, build and write the report."""
        self.state.close_agent_services()
        if self._judge_proxy is not None:
            self._judge_proxy.close()
            self._judge_proxy = None
        if self.workflow_collector is not None:
            self.workflow_collector.finish(session)

    def unwritable(self, session: pytest.Session, exc: OSError) -> bool:
        """Another plugin's file could not be written: an error after the table."""
        if self.workflow_collector is None:
            return False
        self.workflow_collector.write_errors.append(f"{exc.filename}: {exc.strerror or exc}")
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return True


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, bool, int, float))


def _task_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("gta_task") if callspec is not None else None
    return param.task.task_id if isinstance(param, WorkflowCaseParam) else None
