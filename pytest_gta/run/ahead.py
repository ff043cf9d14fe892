"""Work done before pytest's loop reaches the first case.

Two kinds of work belong here rather than inside a case:

* **Loading.** An in-process model's weights and the similarity model take seconds to minutes
  to load. Loaded inside the first case that needs them, that case's JUnit time would be
  mostly loading and the terminal would say nothing meanwhile; loaded here, each load is a
  progress line and a number in the report's ``timings``.
* **Batching ahead.** A batch engine in this process (``prefetch_steps``: vLLM, transformers)
  answers many conversations in one batch for little more than the price of one. Without xdist
  the process knows every case it will run, so it generates them all here: every step-mode
  prompt in one batch, and the end-to-end episodes in lockstep (each round, every live
  episode's next turn in one batch; see :func:`pytest_gta.run.loops.run_lockstep`). The
  cases then score what was generated, in pytest's order, so ``-k``, ``--lf``, JUnit and the
  report behave as usual. Under xdist a worker does not know which cases it will get, so
  each case batches only its own steps.
* **Running ahead.** Any other model that serves many requests at once (an HTTP endpoint)
  gets a pool of ``--gta-concurrency`` threads running this process's episodes ahead, in every
  process, xdist workers included (:mod:`pytest_gta.run.pipeline`); the similarity model then loads
  while the first requests are in flight.

A failure here never stops the session: a model that does not load, or an episode whose tool
server is down, makes the affected cases errors when pytest reaches them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import pytest

from pytest_gta.case import Case
from pytest_gta.errors import GtaInfrastructureError, GtaUnavailableError
from pytest_gta.flags import OPT_CONCURRENCY
from pytest_gta.models import base
from pytest_gta.models.base import BaseModelAdapter, BaseRecordedSource
from pytest_gta.progress import phase, say
from pytest_gta.run import loops
from pytest_gta.run.agent_command import stop_all as stop_all_agents
from pytest_gta.run.context import RunContext, needs_similarity
from pytest_gta.run.episode import Ahead, Opened, Played, open_episode
from pytest_gta.run.pipeline import Pipeline

#: How a process generates its cases' replies: ``batch`` (every step prompt in one batch and
#: the episodes in lockstep, before the loop), ``pool`` (``--gta-concurrency`` threads running
#: the cases ahead), ``serial`` (each case in its turn, as pytest reaches it).
Strategy = Literal["batch", "pool", "serial"]


def strategy(
    model: BaseModelAdapter | BaseRecordedSource,
    concurrency: int,
    worker: bool,
    *,
    agent: bool = False,
) -> Strategy:
    """How a process generates its cases' replies: the one place that decides.

    Only a process that knows all its cases batches them (not an xdist ``worker``); a model
    with recorded predictions has nothing to generate. An ``agent`` under test runs its own
    loop, which no batch engine can drive in lockstep: its episodes run in the pool or serially.
    """
    if agent:
        return "pool" if concurrency > 1 else "serial"
    if base.can_prefetch_steps(model) and not worker:
        return "batch"
    if base.generates(model) and concurrency > 1:
        return "pool"
    return "serial"


def cases_of(items: list[pytest.Item]) -> list[Case]:
    """The GTA-Atomic cases among the collected items, in pytest's order."""
    out = []
    for item in items:
        case = getattr(getattr(item, "callspec", None), "params", {}).get("gta_case")
        if isinstance(case, Case):  # not another benchmark's case
            out.append(case)
    return out


def upcoming(
    items: Sequence[pytest.Item],
    item: pytest.Item,
    nextitem: pytest.Item | None,
    queued: Sequence[int] | None,
) -> Sequence[pytest.Item]:
    """The items a process runs from ``item`` on, as far as it knows them.

    ``queued``: in an xdist worker, the indices of the items queued for it so far (``None``
    elsewhere: the process runs every item).
    """
    if queued is None:
        return items
    ahead = [item] if nextitem is None else [item, nextitem]
    return ahead + [items[i] for i in queued if 0 <= i < len(items)]


def runs_cases(config: pytest.Config) -> bool:
    """Whether this process runs test items (an xdist controller only hands them out)."""
    if config.option.collectonly or getattr(config.option, "setupplan", False):
        return False
    return not config.pluginmanager.has_plugin("dsession")


class AheadWork:
    """What was loaded and generated before the loop, for the cases to take.

    ``context`` gives the run's :class:`RunContext` when the work starts: the session builds it
    then, once the model and the tools are validated. ``model`` gives the model alone: its
    weights load before the context is asked for, since the context waits for what is built
    beside the load (the agent's sandbox and its probe).
    """

    def __init__(
        self,
        context: Callable[[], RunContext],
        model: Callable[[], BaseModelAdapter | BaseRecordedSource],
    ) -> None:
        self._context = context
        self._model = model
        #: Seconds spent loading and generating, for the report (``timings``).
        self.timings: dict[str, float] = {}
        #: Step-mode answers generated ahead (a batch, or the pool's futures).
        self.step_model: BaseModelAdapter | None = None
        self._episodes: dict[str, Ahead] = {}
        #: The pool running this process's episodes ahead (``--gta-concurrency`` > 1).
        self.pipeline: Pipeline | None = None

    def take(self, case: Case) -> Ahead | None:
        """The case's pre-generated episode, once (``None``: run it as usual)."""
        found = self._episodes.pop(case.id, None)
        if found is None and self.pipeline is not None:
            return self.pipeline.take(case)
        return found

    def run(self, session: pytest.Session) -> None:
        """Load what the cases of this process need, and start or batch their generation."""
        config = session.config
        cases = cases_of(session.items)
        if not cases or not runs_cases(config):
            return
        model = self._model()
        warm_up = base.warm_up_of(model)
        if warm_up is not None:
            self._load(
                config, "model_load_s", f"loading {model.name}", f"{model.name} loaded", warm_up
            )
        ctx = self._context()
        plan = strategy(model, ctx.concurrency, ctx.worker, agent=ctx.agent is not None)
        if plan == "pool":
            # Started before the similarity model loads, so the load overlaps the requests.
            self._start_pipeline(config, ctx, [] if ctx.worker else cases)
        self._load_similarity(config, ctx, cases)
        if plan != "batch" or not base.generates(model):
            return
        steps = [c for c in cases if c.mode == "step"]
        if steps:
            self._steps(config, ctx, model, steps)
        episodes = [c for c in cases if c.mode == "e2e"]
        if episodes and base.can_prefetch_episodes(model) and ctx.tools is not None:
            self._episodes_ahead(config, ctx, model, episodes)
        line = model.work_summary()
        if line:
            say(config, line)

    def _start_pipeline(self, config: pytest.Config, ctx: RunContext, cases: list[Case]) -> None:
        self.pipeline = pipeline = Pipeline(ctx)
        self.step_model = pipeline.step_model
        if cases:
            pipeline.submit(cases)
            say(
                config,
                f"running up to {ctx.concurrency} episodes at once ahead of the {len(cases)} cases "
                f"({OPT_CONCURRENCY})",
            )

    def feed(
        self, session: pytest.Session, item: pytest.Item, nextitem: pytest.Item | None
    ) -> None:
        """In an xdist worker: start the cases queued for this worker so far."""
        pipeline = self.pipeline
        if pipeline is None or pipeline.ctx.queued is None:
            return
        queued = pipeline.ctx.queued()
        pipeline.submit(cases_of(list(upcoming(session.items, item, nextitem, queued))))

    def after(self, session: pytest.Session) -> None:
        """Stop running ahead once the session stops (``-x``, ``--maxfail``, a spent budget)."""
        if self.pipeline is not None:
            self.pipeline.after(session)

    def halt(self, cause: str) -> None:
        """No new model request from the pool: the run was interrupted (a signal handler).

        Agent programs running in the pool's threads are killed now (lock-free), so the pool's
        threads end instead of waiting for the agents' timeout.
        """
        if self.pipeline is not None:
            self.pipeline.halt(cause)
        stop_all_agents()

    def close(self) -> None:
        """Stop the pool and wait for its requests in flight (session end, Ctrl-C).

        Agents the pool started for cases that will not run (``-x``, a budget stop) are killed.
        """
        stop_all_agents()
        if self.pipeline is not None:
            self.pipeline.close()

    def _load_similarity(self, config: pytest.Config, ctx: RunContext, cases: list[Case]) -> None:
        if not any(needs_similarity(c.query, c.mode) for c in cases):
            return
        similarity = ctx.scorer.similarity()
        load = getattr(similarity, "load", None)
        if callable(load):  # an xdist worker's is the controller's: nothing to load here
            name = ctx.sim_model
            self._load(
                config,
                "similarity_load_s",
                f"loading the similarity model {name}",
                f"similarity model {name} loaded",
                lambda: interruptibly(load),
            )

    def _load(self, config: pytest.Config, key: str, doing: str, done: str, load: Any) -> None:
        start = time.perf_counter()
        try:
            with phase(config, doing, done):
                load()
        except Exception as exc:  # the cases that need it will fail with the same message
            say(config, f"{doing} failed: {exc}; the cases that need it will be errors")
        self.timings[key] = round(time.perf_counter() - start, 3)

    def _steps(
        self, config: pytest.Config, ctx: RunContext, model: BaseModelAdapter, cases: list[Case]
    ) -> None:
        protocol = model.protocol
        requests = [
            request
            for case in cases
            for request, _ in loops.step_requests(
                ctx.dataset, case.query, protocol, epoch=case.epoch
            )
        ]
        start = time.perf_counter()
        try:
            with phase(
                config,
                f"step-by-step: generating {len(requests)} replies for {len(cases)} queries in "
                "batches",
                f"step-by-step: {len(requests)} replies generated",
            ):
                self.step_model = loops.Prefetched.run(model, requests)
        except GtaInfrastructureError as exc:
            say(config, f"step-by-step batch failed ({exc}); each case will generate its own")
        self.timings["step_ahead_s"] = round(time.perf_counter() - start, 3)

    def _episodes_ahead(
        self, config: pytest.Config, ctx: RunContext, model: BaseModelAdapter, cases: list[Case]
    ) -> None:
        max_turns = ctx.max_turns
        running: list[tuple[Case, Opened]] = []
        steps = []
        for case in cases:
            try:
                opened = open_episode(case, ctx, model.protocol)
            except GtaUnavailableError as exc:
                self._episodes[case.id] = Ahead(exc)
                continue
            steps.append(opened.steps)
            running.append((case, opened))
        if not steps:
            return
        start = time.perf_counter()

        def progress(turn: int, live: int) -> None:
            elapsed = time.perf_counter() - start
            say(
                config,
                f"end-to-end: turn {turn} of at most {max_turns}, {live} of {len(steps)} "
                f"episodes running ({elapsed:.0f} s)",
            )

        say(config, f"end-to-end: running {len(steps)} episodes in lockstep batches")
        outcomes = loops.run_lockstep(model, steps, progress)
        for (case, opened), outcome in zip(running, outcomes, strict=True):
            played = (
                outcome
                if isinstance(outcome, BaseException)
                else Played(outcome, opened.backends, faults=opened.faults)
            )
            self._episodes[case.id] = Ahead(played)
        seconds = time.perf_counter() - start
        self.timings["e2e_ahead_s"] = round(seconds, 3)
        say(config, f"end-to-end: {len(steps)} episodes generated in {seconds:.1f} s")


def interruptibly(load: Any) -> None:
    """Run ``load`` on a daemon thread while this one waits, so Ctrl-C lands in the wait.

    A KeyboardInterrupt raised inside a deep import (sentence-transformers pulls in torch and
    transformers for seconds) can land in a frame with no line number, and pytest then fails
    while rendering it (a CI run saw exit 1 and an internal traceback for a plain Ctrl-C). The
    thread is a daemon, so an interrupted session does not wait for the load to finish.
    Only for loads that need no main thread: an engine's ``warm_up`` may install signal
    handlers, so it stays where it is.
    """
    failure: list[BaseException] = []

    def target() -> None:
        try:
            load()
        except BaseException as exc:  # handed to the waiting thread
            failure.append(exc)

    thread = threading.Thread(target=target, name="gta-load", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
    if failure:
        raise failure[0]
