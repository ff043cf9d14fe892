"""GTA-Workflow as a benchmark: tasks as cases, each produced, judged and reported.

Chosen (the ``gta-workflow`` entry point) when ``--gta-data`` is a GTA-Workflow dataset
(``end.json``). It uses the session's services (the model, the cache, the budget, the agent's
sandbox) and defines what is about tasks: the cases (``gta::test_workflow[workflow-3]``), how
one is produced (:mod:`.producers`, an eval pack) and judged (:mod:`pytest_gta.run.workflow`),
and the run's report (:class:`~.reporting.WorkflowReporting`, for the session's collector).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.benchmarks.gta_workflow.kind import CASE_PREFIX
from pytest_gta.benchmarks.gta_workflow.producers import WorkflowProducers, as_dataset
from pytest_gta.benchmarks.gta_workflow.reporting import WorkflowReporting
from pytest_gta.case import EPOCH_TAG, mark_name
from pytest_gta.errors import GtaUsageError
from pytest_gta.evalpack import PREFIX as EVALPACK
from pytest_gta.evalpack import PackTask, pack_path, read_pack
from pytest_gta.flags import OPT_JUDGE, OPT_JUDGE_API, OPT_JUDGE_BASE_URL
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
from pytest_gta.options.tools import refuse_without_calls
from pytest_gta.outward import mask_url, register_run_secrets, register_secret
from pytest_gta.proxy import ModelProxy, no_upstream_reason, upstream_of
from pytest_gta.report.workflow import judge_where
from pytest_gta.results.case import fault_properties
from pytest_gta.results.workflow import JudgeInfo, WorkflowCase
from pytest_gta.run.ahead_pool import AheadPool, Check
from pytest_gta.run.benchmark import Benchmark, BenchmarkContext, QueryView
from pytest_gta.run.workflow import (
    Deliverable,
    categories,
    judged_case,
    produces_alone,
    tasks_at_once,
)
from pytest_gta.session import xdist
from pytest_gta.session.gta_session import guarded
from pytest_gta.session.keys import DETAIL_KEY, report_only
from pytest_gta.session.state import GtaState
from pytest_gta.workflow_data import WorkflowDataset, WorkflowTask, is_workflow_dir, load_workflow

SUITE = Path(__file__).resolve().parent.parent.parent / "suite_workflow.py"


def make(context: BenchmarkContext) -> Benchmark | None:
    """The ``gta-workflow`` entry point: a directory with ``end.json``, else ``None``."""
    if context.data is None or not is_workflow_dir(context.data):
        return None
    return WorkflowBenchmark(context.config, context.services)


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


class WorkflowBenchmark:
    """A run on a GTA-Workflow dataset."""

    name = "gta-workflow"
    suite = SUITE

    def __init__(self, config: pytest.Config, state: GtaState) -> None:
        self.config = config
        self.state = state
        self._dataset: WorkflowDataset | None = None
        self._pack: dict[str, PackTask] | None = None
        self.producers = WorkflowProducers(self.state)
        self._judge_proxy: ModelProxy | None = None
        self._judge_door = ""
        #: Tasks' threads may be the first to ask for the judge served here.
        self._judge_lock = threading.Lock()
        #: The tasks produced and judged ahead of their tests (:meth:`tasks_ahead`), and what a
        #: producer that cannot run concurrently produces under.
        self._ahead: AheadPool[WorkflowCaseParam, WorkflowCase] | None = None
        self._producing: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()

    # -- start and stop ------------------------------------------------------------------------
    def dataset(self) -> WorkflowDataset:
        """The Workflow dataset, loaded once (a usage error names the file and the task)."""
        if self._dataset is None:
            path = self.state.settings.data.path
            assert path is not None  # make() chose this benchmark for a dataset path
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
        """Validate the data, the pack and the judge, before any task."""
        register_run_secrets([self.state.settings.workflow.base_url or ""])
        if judge_key():
            register_secret(judge_key(), "the judge's key")
        self.dataset()
        self.check_judge()
        pack = self.pack()
        if pack is not None:
            try:
                refuse_without_calls(
                    self.state.settings.tools, "an eval pack's deliverables are already made"
                )
            except GtaUsageError as exc:
                raise pytest.UsageError(str(exc)) from None
        if pack is None:
            self.producers.check()
            # The tasks as queries, the tools offered to the model with them, shown now.
            self.state.dataset()

    def queries(self) -> QueryView | None:
        """The tasks as queries, for the project's loop and the agent (an eval pack runs none)."""
        return None if self.pack() is not None else self.producers.view(self.dataset())

    def reporting(self) -> WorkflowReporting:
        """The report's side: the judged tasks' table (an unjudged task counted as failed)."""
        return WorkflowReporting(
            self.config,
            self.state.settings,
            str(self.dataset().root),
            self.judge_info(),
            self._categories,
            self.producers.producer(self.pack() is not None),
            () if self.pack() is not None else self.state.dataset().left_out,
        )

    def runs_ahead(self) -> bool:
        """Whether tasks run ahead in the xdist workers (more than one at a time)."""
        return self._at_once() > 1

    def _at_once(self) -> int:
        """Tasks produced and judged at once in a process (``--gta-concurrency``, else fits)."""
        state = self.state
        flow = state.settings.workflow
        producer = None if self.pack() is not None else state.model()
        here = judge_served(flow.judge, judge_base_url(flow.base_url)) == "process"
        return tasks_at_once(state.settings.cases.concurrency, producer=producer, judge_here=here)

    def for_workers(self) -> dict[str, Any]:
        """Nothing of its own: a worker reads the dataset and the pack itself."""
        return {}

    def _categories(self, task_id: str) -> list[str]:
        task = next((t for t in self.dataset() if t.task_id == task_id), None)
        return categories(task, [])

    def halt(self, cause: str) -> None:
        """Interrupted (a signal handler): no task starts, none in flight calls the judge again."""
        if self._ahead is not None:
            self._ahead.halt(cause)

    def close(self) -> None:
        """Stop the judge's proxy (where the session never finished)."""
        if self._judge_proxy is not None:
            self._judge_proxy.close()
            self._judge_proxy = None

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
        """``gta_case``'s parameters: the selected tasks (times the epochs), with their marks."""
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

    def check_selection(self, nodeids: list[str]) -> None:
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
    def running_ahead(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> contextlib.AbstractContextManager[None]:
        """Keep the tasks queued for this process produced and judged ahead of their tests."""
        return self.tasks_ahead().running(item, nextitem)

    def tasks_ahead(self) -> AheadPool[WorkflowCaseParam, WorkflowCase]:
        """The pool running tasks ahead (``--gta-concurrency``), made once the run is set up.

        A producer that cannot run concurrently (:func:`~pytest_gta.run.workflow.produces_alone`)
        produces one task at a time; the tasks' judging overlaps.
        """
        if self._ahead is None:
            state, config = self.state, self.config
            producer = None if self.pack() is not None else state.model()
            at_once = self._at_once()
            if produces_alone(producer, agent=state.settings.agent.spec is not None):
                self._producing = threading.Lock()
            # One ledger for the budget and one output directory, made before any thread.
            state.budget()
            state.output_dir()
            queued = None
            if xdist.is_worker(config):
                queued = lambda: xdist.xdist_queue(config) or []  # noqa: E731
            self._ahead = AheadPool(self._task, at_once, _param_of, queued=queued, name="gta-task")
        return self._ahead

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
        with self._judge_lock:
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

    def result(self, request: pytest.FixtureRequest, param: WorkflowCaseParam) -> WorkflowCase:
        """``gta_result``: produce, judge, put the case on its report.

        A judge that failed is pytest's *error* (after the case went on its report).
        """
        case = self.run_task(request, param)
        if case.judge_error is not None:
            pytest.fail(f"{case.id}: {case.message}", pytrace=False)
        return case

    def run_task(self, request: pytest.FixtureRequest, param: WorkflowCaseParam) -> WorkflowCase:
        """The task produced and judged (ahead of its test, or here), put on its report."""
        identity: list[tuple[str, Any]] = [
            ("gta_task_id", param.task.task_id),
            ("gta_model", self.state.settings.model.name),
        ]
        request.node.user_properties.extend(identity)
        nodeid = request.node.nodeid
        case = guarded(request, param.id, lambda: self.tasks_ahead().take(nodeid, param))
        return self._reported(request, case, identity)

    def _task(self, nodeid: str, param: WorkflowCaseParam, check: Check) -> WorkflowCase:
        """Produce and judge one task: a function of the task and its directory alone.

        In a pool thread ahead of the test, or in the test; what touches the test's request
        (its properties, its report) happens in the test, in :meth:`_reported`.
        """
        started = time.perf_counter()
        workdir = Path(self.state.output_dir()) / param.id
        workdir.mkdir(parents=True, exist_ok=True)
        with self._producing:
            deliverable = self.produce(param, workdir)
        return judged_case(
            case_id=param.id,
            task_id=param.task.task_id,
            nodeid=nodeid,
            epoch=param.epoch if param.repeated else None,
            task=param.task,
            deliverable=deliverable,
            make_judge=self.make_judge,
            threshold=self.state.settings.workflow.threshold,
            started=started,
            check=check,
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
        if case.faults is not None:
            props += fault_properties(len(case.faults), case.passed)
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
    def finish(self, session: pytest.Session) -> dict[str, float]:
        """Stop running ahead and the judge's proxy; no timings of its own yet."""
        if self._ahead is not None:
            self._ahead.close()
        if self._judge_proxy is not None:
            self._judge_proxy.close()
            self._judge_proxy = None
        return {}


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, bool, int, float))


def _param_of(item: pytest.Item) -> WorkflowCaseParam | None:
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("gta_case") if callspec is not None else None
    return param if isinstance(param, WorkflowCaseParam) else None


def _task_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("gta_case") if callspec is not None else None
    return param.task.task_id if isinstance(param, WorkflowCaseParam) else None
