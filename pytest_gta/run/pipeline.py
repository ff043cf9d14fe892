"""Episodes run ahead of pytest's loop, N at a time, in every process (``--gta-concurrency``).

pytest runs one test after another, so a case that waits on a model waits alone: against an
endpoint that takes dozens of requests at once, a run's wall time is the sum of its latencies.
Here the cases this process will run start before pytest reaches them, in a pool of N threads:
each step-mode prompt is one task, each end-to-end episode another (its turns and tool calls in
order). The test of a case then waits for its own work, scores it and reports in pytest's
order, so the terminal, JUnit XML, ``--lf``, ``-k`` and ``--gta-limit`` behave as in a serial
run, and each case's replies are the same (every episode is independent of the others).

Which cases will this process run?

* Without xdist, every GTA item of the session, in order, known when the loop starts.
* In an xdist worker, the items the controller has sent so far. xdist keeps them in a queue
  that it does not publish; :func:`pytest_gta.session.xdist.xdist_queue` reads it (pinned by
  ``tests/test_pipeline.py::test_xdist_worker_queue_is_readable``) and, should a future xdist
  hide it, the worker runs ahead only the case it is running and the next one. xdist's load
  scheduling hands out a quarter of the run, then refills slowly once tests take 0.1 s or
  more; a case that waits for its own episode looks like such a test, so the controller uses
  :func:`pytest_gta.session.xdist.ahead_scheduling`, which hands every case out at the start.

A spent budget, ``-x``/``--maxfail`` and Ctrl-C stop the pool: work not yet started is dropped,
an episode in flight ends at its next model call, and :meth:`Pipeline.close` waits for the
requests already sent (bounded by ``--gta-timeout``) so no thread outlives the session.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import Any

import pytest

from pytest_gta.case import Case
from pytest_gta.errors import GtaBudgetExhausted, GtaInfrastructureError
from pytest_gta.models import base
from pytest_gta.models.base import BaseModelAdapter
from pytest_gta.run import loops
from pytest_gta.run.context import RunContext
from pytest_gta.run.episode import Ahead, play
from pytest_gta.shard import case_weight
from pytest_gta.types import CaseContext, ModelOutput, ModelRequest


class Stopped(GtaInfrastructureError):
    """The pool was stopped (``-x``, Ctrl-C) before this work ran; no case reports it."""


class Stoppable:
    """Why a pool running work ahead stopped: this pipeline's, and GTA-Workflow's tasks'.

    The stop role every pool shares (:class:`Pipeline`, and
    :class:`pytest_gta.run.ahead_pool.AheadPool`): the first reason kept, the work not started
    dropped (:meth:`_drop`, each pool's own), and :meth:`check`, which work in flight makes
    before each paid call.
    """

    def __init__(self) -> None:
        self._reason: BaseException | None = None
        #: Set by :meth:`halt` from a signal handler, which must not take ``_lock``.
        self._halted: BaseException | None = None
        self._lock = threading.Lock()

    def check(self) -> None:
        """Raise the reason the pipeline stopped, if it did."""
        reason = self._reason or self._halted
        if reason is None:
            return
        if isinstance(reason, GtaBudgetExhausted):
            raise GtaBudgetExhausted(str(reason))
        raise Stopped(str(reason))

    def stop(self, reason: BaseException) -> None:
        """Drop the work not started; work in flight ends at its next check."""
        with self._lock:
            if self._reason is None:
                self._reason = reason
        self._drop()

    def _drop(self) -> None:
        """Cancel the work not started yet."""

    def halt(self, cause: str) -> None:
        """Refuse every model request from now on: the run was interrupted (``cause``).

        Lock-free (one assignment) because it runs inside a signal handler, in the main thread
        between two bytecodes, possibly while that thread holds ``_lock`` in ``submit``.
        The work not started is dropped when the session ends, in ``close``.
        """
        self._halted = Stopped(f"the run was interrupted ({cause})")

    def after(self, session: pytest.Session) -> None:
        """Stop running ahead once the session stops (``-x``, ``--maxfail``, a spent budget)."""
        if session.shouldstop or session.shouldfail:
            self.stop(Stopped(str(session.shouldstop or session.shouldfail)))


class _Guarded(BaseModelAdapter):
    """The model, refusing new requests once the pipeline stops."""

    def __init__(self, model: BaseModelAdapter, pipeline: Pipeline) -> None:
        self.model = model
        self.name = model.name
        self.protocol = model.protocol
        self._pipeline = pipeline

    def generate(self, request: ModelRequest) -> ModelOutput:
        """The model's answer, unless the pipeline stopped (then its reason is raised)."""
        self._pipeline.check()
        try:
            return self.model.generate(request)
        except GtaBudgetExhausted as exc:
            self._pipeline.stop(exc)
            raise


class Pipeline(Stoppable):
    """A pool of N threads running this process's episodes ahead of pytest's loop."""

    def __init__(self, ctx: RunContext) -> None:
        model = ctx.model
        if not base.generates(model):
            raise TypeError(f"{model.name} replays recorded predictions: nothing to run ahead")
        super().__init__()
        self.ctx = ctx
        self.concurrency = ctx.concurrency
        self._model = _Guarded(model, self)
        self._pool = ThreadPoolExecutor(ctx.concurrency, thread_name_prefix="gta-episode")
        self._episodes: dict[str, Future[Ahead]] = {}
        self._submitted: set[str] = set()
        self._answers: dict[CaseContext, tuple[Any, ModelOutput | Future[ModelOutput]]] = {}
        #: Step-mode cases take their answers here (a request whose messages differ, or that
        #: was not submitted, goes to the model as usual).
        self.step_model = loops.Prefetched(model, self._answers)

    # -- submitting --------------------------------------------------------------------------
    def submit(self, cases: Sequence[Case]) -> int:
        """Start the work of ``cases`` not started yet; how many were new.

        The longest end-to-end episodes start first and the single-call step prompts last, so
        that the pool's last wave is short (longest-first list scheduling): an episode's turns
        are sequential, and one long episode started late would end the run alone. Not under a
        budget: there the cases run in pytest's order, so the calls the budget paid for belong
        to the cases reported before the session stops.
        """
        ctx = self.ctx
        if not ctx.budgeted:
            cases = sorted(cases, key=lambda c: -case_weight(c) if c.mode == "e2e" else 0)
        dataset = ctx.dataset
        protocol = self._model.protocol
        new = 0
        with self._lock:
            for case in cases:
                if self._reason is not None or self._halted is not None:
                    break
                if case.id in self._submitted:
                    continue
                self._submitted.add(case.id)
                new += 1
                if case.mode == "step":
                    requests = loops.step_requests(dataset, case.query, protocol, epoch=case.epoch)
                    for request, _ in requests:
                        # Stamped with its own call's time: the case only waits for it.
                        future = self._pool.submit(loops.timed_generate, self._model, request)
                        self._answers[request.case] = (request.messages, future)
                else:
                    self._episodes[case.id] = self._pool.submit(self._episode, case)
        return new

    def _episode(self, case: Case) -> Ahead:
        """One end-to-end episode, in a pool thread; its failure is kept for its case."""
        start = time.perf_counter()
        try:
            self.check()
            played = play(case, self.ctx, self._model)
        except Exception as exc:  # a tool server down, no backend for a tool, the model
            return Ahead(exc, seconds=time.perf_counter() - start)
        # Scored here, as the episode ends: the similarity model's encodings (Ans+I, subjective
        # answers) then overlap the other episodes' model calls instead of all queueing behind
        # the last one in pytest's loop (measured on the release: a 10 s tail after the calls).
        # Embeddings are of one text at a time, so the numbers do not depend on the order.
        try:
            episode = played.episode
            scored = self.ctx.scorer.score("e2e", case.query, episode.predictions, episode.gold)
        except Exception:  # scored again in the case, which reports the failure
            return Ahead(played, seconds=time.perf_counter() - start)
        return Ahead(played, scored, seconds=time.perf_counter() - start)

    # -- taking ------------------------------------------------------------------------------
    def take(self, case: Case) -> Ahead | None:
        """The case's end-to-end episode, waiting for it; ``None``: the case runs its own.

        ``None`` when the episode was never submitted or was dropped when the pool stopped;
        the case then runs it in pytest's thread, where a spent budget refuses it as usual.
        """
        future = self._episodes.pop(case.id, None)
        if future is None:
            return None
        try:
            return future.result()
        except CancelledError:  # dropped when the pool stopped: the case runs it itself
            return None

    # -- stopping ----------------------------------------------------------------------------
    def _drop(self) -> None:
        """Drop the step answers and episodes not started (in flight: until the next call)."""
        for _, answer in list(self._answers.values()):
            if isinstance(answer, Future):
                answer.cancel()
        for episode in list(self._episodes.values()):
            episode.cancel()

    def close(self) -> None:
        """Stop and wait for the requests in flight; no pool thread outlives this call."""
        self.stop(Stopped("the session ended"))
        self._pool.shutdown(wait=True, cancel_futures=True)
