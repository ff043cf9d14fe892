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

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gta.errors import GtaUnavailableError
from pytest_gta.progress import phase, say

if TYPE_CHECKING:
    from pytest_gta.case import Case
    from pytest_gta.models.base import BaseModelAdapter
    from pytest_gta.run.loops import Episode
    from pytest_gta.run.pipeline import Pipeline
    from pytest_gta.session.state import GtaState


@dataclass
class Ahead:
    """A case's end-to-end episode, generated before pytest reached the case."""

    outcome: Episode | BaseException
    #: Which backend served each of the query's tools.
    backends: dict[str, str] = field(default_factory=dict)
    #: The case's (score, verdict) when the episode was scored where it ended, in a pool
    #: thread (:mod:`pytest_gta.run.pipeline`); ``None``: the case scores it.
    scored: tuple[Any, Any] | None = None


def cases_of(items: list[pytest.Item]) -> list[Case]:
    """The GTA cases among the collected items, in pytest's order."""
    out = []
    for item in items:
        case = getattr(getattr(item, "callspec", None), "params", {}).get("gta_case")
        if case is not None:
            out.append(case)
    return out


def runs_cases(config: pytest.Config) -> bool:
    """Whether this process runs test items (an xdist controller only hands them out)."""
    if config.option.collectonly or getattr(config.option, "setupplan", False):
        return False
    return not config.pluginmanager.has_plugin("dsession")


class AheadWork:
    """What was loaded and generated before the loop, for the cases to take."""

    def __init__(self, state: GtaState) -> None:
        self.state = state
        #: Seconds spent loading and generating, for the report (``timings``).
        self.timings: dict[str, float] = {}
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
        state = self.state
        model = state.model()
        from pytest_gta.models.base import BaseModelAdapter

        if isinstance(model, BaseModelAdapter) and model.warm_up is not None:
            self._load(
                config,
                "model_load_s",
                f"loading {model.name}",
                f"{model.name} loaded",
                model.warm_up,
            )
        worker = hasattr(config, "workerinput")
        batches = isinstance(model, BaseModelAdapter) and model.prefetch_steps and not worker
        if isinstance(model, BaseModelAdapter) and not batches:
            concurrency = state.concurrency(model)
            if concurrency > 1:
                # Started before the similarity model loads, so the load overlaps the requests.
                self._start_pipeline(config, model, concurrency, [] if worker else cases)
        self._load_similarity(config, cases)
        if not batches or not isinstance(model, BaseModelAdapter):
            return
        steps = [c for c in cases if c.mode == "step"]
        if steps:
            self._steps(config, model, steps)
        episodes = [c for c in cases if c.mode == "e2e"]
        if episodes and model.prefetch_episodes and state.uses_tools():
            self._episodes_ahead(config, model, episodes)
        line = model.work_summary()
        if line:
            say(config, line)

    def _start_pipeline(
        self, config: pytest.Config, model: BaseModelAdapter, concurrency: int, cases: list[Case]
    ) -> None:
        from pytest_gta.run.pipeline import Pipeline

        self.pipeline = pipeline = Pipeline(self.state, model, concurrency)
        self.step_model = pipeline.step_model
        if cases:
            pipeline.submit(cases)
            say(
                config,
                f"running up to {concurrency} episodes at once ahead of the {len(cases)} cases "
                "(--gta-concurrency)",
            )

    def feed(
        self, session: pytest.Session, item: pytest.Item, nextitem: pytest.Item | None
    ) -> None:
        """In an xdist worker: start the cases queued for this worker so far."""
        if self.pipeline is None or not hasattr(session.config, "workerinput"):
            return
        from pytest_gta.run.pipeline import upcoming

        self.pipeline.submit(cases_of(list(upcoming(session, item, nextitem))))

    def after(self, session: pytest.Session) -> None:
        """Stop running ahead once the session stops (``-x``, ``--maxfail``, a spent budget)."""
        if self.pipeline is not None and (session.shouldstop or session.shouldfail):
            from pytest_gta.run.pipeline import Stopped

            self.pipeline.stop(Stopped(str(session.shouldstop or session.shouldfail)))

    def halt(self, cause: str) -> None:
        """No new model request from the pool: the run was interrupted (a signal handler)."""
        if self.pipeline is not None:
            self.pipeline.halt(cause)

    def close(self) -> None:
        """Stop the pool and wait for its requests in flight (session end, Ctrl-C)."""
        if self.pipeline is not None:
            self.pipeline.close()

    def _load_similarity(self, config: pytest.Config, cases: list[Case]) -> None:
        from pytest_gta.run.runner import needs_similarity

        if not any(needs_similarity(c.query, c.mode) for c in cases):
            return
        similarity = self.state.scorer().similarity()
        load = getattr(similarity, "load", None)
        if callable(load):  # an xdist worker's is the controller's: nothing to load here
            name = self.state.settings.sim_model
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

    def _steps(self, config: pytest.Config, model: BaseModelAdapter, cases: list[Case]) -> None:
        from pytest_gta.errors import GtaInfrastructureError
        from pytest_gta.run import loops

        dataset = self.state.dataset()
        protocol = model.protocol
        requests = [
            request
            for case in cases
            for request, _ in loops.step_requests(dataset, case.query, protocol, epoch=case.epoch)
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
        self, config: pytest.Config, model: BaseModelAdapter, cases: list[Case]
    ) -> None:
        from pytest_gta.run import loops
        from pytest_gta.tools import ToolContext

        state = self.state
        dataset = state.dataset()
        tools = state.toolset()
        protocol = model.protocol
        max_turns = state.settings.max_turns
        running: list[tuple[Case, dict[str, str]]] = []
        steps = []
        for case in cases:
            try:
                routes = tools.route(case.query)
            except GtaUnavailableError as exc:
                self._episodes[case.id] = Ahead(exc)
                continue
            context = ToolContext(dataset, case.query, state.output_dir())
            runner = tools.runner(routes, context)
            steps.append(
                loops.e2e_episode(
                    dataset,
                    case.query,
                    protocol,
                    runner,
                    max_turns=max_turns,
                    epoch=case.epoch,
                    visible=context.visible_roots(),
                )
            )
            running.append((case, {name: b.name for name, b in routes.items()}))
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
        for (case, backends), outcome in zip(running, outcomes, strict=True):
            self._episodes[case.id] = Ahead(outcome, backends)
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
    import threading

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
