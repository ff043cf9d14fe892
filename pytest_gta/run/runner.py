"""Running and scoring one case: a (query, mode) pair.

This is the seam between the pytest machinery and the pure parts: it runs the right loop (or
fetches recorded predictions), scores the result with the official primitives, decides the
outcome, and packs everything into builtins that travel on the test report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import pytest

from pytest_gta import outward
from pytest_gta.case import Case
from pytest_gta.dataset import Query
from pytest_gta.errors import GtaUnavailableError
from pytest_gta.models import base
from pytest_gta.models.base import BaseModelAdapter
from pytest_gta.outward import Cleaner
from pytest_gta.results.case import CaseResult, Verdict
from pytest_gta.run import loops
from pytest_gta.run.ahead import AheadWork
from pytest_gta.run.context import RunContext, needs_similarity
from pytest_gta.run.episode import AgentRun, Ahead, Played, play
from pytest_gta.scoring.metrics import E2ECaseScore, StepCaseScore, score_e2e_case, score_step_case
from pytest_gta.scoring.similarity import Similarity
from pytest_gta.scoring.verdict import judge_e2e, judge_step
from pytest_gta.types import Usage
from pytest_gta.vocabulary import Mode

#: Characters of a model's reply shown in a failed case's message.
REPLY_SHOWN = 300


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying so (secrets redacted before the cut)."""
    return outward.clip(text, limit)


class Scorer:
    """Scores episodes; the similarity model loads on first need."""

    def __init__(self, similarity: Callable[[], Similarity], threshold: float) -> None:
        self._factory = similarity
        self._similarity: Similarity | None = None
        self._lock = threading.Lock()
        self.threshold = threshold

    def similarity(self) -> Similarity:
        """The similarity model, made once (episodes are scored in pool threads too)."""
        with self._lock:
            if self._similarity is None:
                self._similarity = self._factory()
            return self._similarity

    def score(
        self,
        mode: Mode,
        query: Query,
        predictions: list[dict[str, Any]],
        gold: list[dict[str, Any]],
    ) -> tuple[StepCaseScore | E2ECaseScore, Verdict]:
        """The case's metric primitives and its verdict."""
        ref = query.gt_answer
        similarity = self.similarity() if needs_similarity(query, mode) else None
        if mode == "step":
            step = score_step_case(predictions, gold, ref, similarity)
            return step, judge_step(predictions, gold, ref, step, self.threshold)
        e2e = score_e2e_case(predictions, gold, ref, similarity)
        return e2e, judge_e2e(predictions, gold, ref, e2e, self.threshold)


@dataclass
class CaseRun:
    """A case that ran: its result, and the live objects the test that asked for it may read.

    ``gta_result`` gives a test this object. :attr:`result` is the case as every output has
    it (:class:`pytest_gta.results.case.CaseResult`: built here, once, from cleaned values; it
    travels to the controller as its JSON); the rest is what only the running test needs.
    """

    case: Case
    #: The name of the model that answered (or whose recorded predictions were read).
    model: str
    result: CaseResult
    #: The predicted steps as the model's loop (or the prediction file) produced them.
    predictions: list[dict[str, Any]]
    #: The reference steps they were scored against.
    gold: list[dict[str, Any]]
    #: The metric primitives as the official formulas hold them.
    score: StepCaseScore | E2ECaseScore
    #: Non-finite numbers the result's cleaning replaced (the report's notes count them).
    nonfinite: int = 0

    @property
    def verdict(self) -> Verdict:
        """The scorer's verdict (a case that ran was scored)."""
        verdict = self.result.verdict
        if verdict is None:
            raise RuntimeError(f"{self.case.id} has no verdict")
        return verdict

    @property
    def passed(self) -> bool:
        """Whether the query was solved."""
        return self.verdict.passed

    @property
    def replies(self) -> list[str]:
        """The model's raw reply of each turn."""
        return self.result.replies

    def check(self) -> None:
        """Fail the current test with the verdict's explanation unless the case passed.

        The explanation says what diverged in the record's terms (``call NoAction ...``); the
        model's own words for that turn follow, so a failure can be read without the report,
        then the faults the erratum names for the query.
        """
        if self.passed:
            return
        message = f"{self.case.id}: {self.verdict.message}"
        wrote = self.reply_of_verdict()
        if wrote is not None:
            message += f"\nthe model wrote: {clip(repr(wrote), REPLY_SHOWN)}"
        # A query the erratum names may fail for the data's fault: the reader should know.
        for note in self.result.erratum:
            message += f"\nerratum ({note.kind}): {note.evidence}"
        pytest.fail(message, pytrace=False)

    def reply_of_verdict(self) -> str | None:
        """The model's reply in the turn the verdict points at, if there is one."""
        turn = self.verdict.turn
        replies = self.replies
        if turn is None or not replies or not -len(replies) <= turn < len(replies):
            return None
        return replies[turn]


def case_result(
    case: Case,
    *,
    predictions: list[dict[str, Any]],
    score: StepCaseScore | E2ECaseScore,
    verdict: Verdict,
    replies: list[str],
    usage: Usage,
    duration: float,
    backends: dict[str, str],
    agent: AgentRun | None,
    model_s: float | None,
    faults: list[dict[str, Any]] | None = None,
) -> tuple[CaseResult, int]:
    """The case's result (and how many non-finite numbers its cleaning replaced).

    Recorded steps may hold tuples, NaN, lone surrogates, huge numbers or secrets (they come
    from a model or a prediction file): the values are cleaned (:mod:`pytest_gta.outward`)
    before the result is made of them, so any writer and execnet accept it.
    """
    used = usage.calls or usage.cached_calls or usage.input_tokens or usage.output_tokens
    payload: dict[str, Any] = {
        "id": case.id,
        "query_id": case.query.qid,
        "mode": case.mode,
        "epoch": case.epoch if case.repeated else None,
        "type": case.query.type,
        "outcome": "passed" if verdict.passed else "failed",
        "score": verdict.score,
        "message": verdict.message,
        "nodeid": "",
        "steps": predictions,
        "replies": replies,
        "backends": backends,
        "duration": round(duration, 3),
        "properties": {},
        "primitives": score.to_json(),
        "images": {},
        "verdict": verdict.to_json_value(),
        "usage": (
            {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "calls": usage.calls,
                "cached_calls": usage.cached_calls,
            }
            if used
            else None
        ),
        "model_s": None if model_s is None else round(float(model_s), 6),
    }
    if faults is not None:
        payload["faults"] = faults
    if agent is not None:
        payload["agent"] = agent.outcome.to_json()
        payload["tool_log"] = agent.tool_log
        payload["exchanges"] = agent.exchanges
    cleaner = Cleaner()
    return CaseResult.model_validate(cleaner.value(payload)), cleaner.nonfinite


def run_case(case: Case, ctx: RunContext, work: AheadWork | None = None) -> CaseRun:
    """Run (or fetch) one case and score it.

    Which model answers the case is decided here: recorded predictions are looked up; a step
    prompt goes to the answers generated ahead (``work.step_model``, a batch or the pool's),
    else to the model; an end-to-end episode generated ahead (``work.take``) is taken, its
    failure raised here, in the case, else the episode is played now (:func:`play`).

    Raises:
        GtaUnavailableError: nothing to evaluate here (no record, no backend for a tool).
        GtaInfrastructureError: the model or a tool backend broke.
    """
    # Taken before the clock starts: waiting for the pool is not the case's time.
    ahead = work.take(case) if work is not None and case.mode == "e2e" else None
    start = time.perf_counter()
    query = case.query
    model = ctx.model
    replies: list[str] = []
    usage = Usage()
    backends: dict[str, str] = {}
    scored = None
    agent = None
    model_s = None
    faults = None
    if base.replays(model) and ctx.agent is None:
        recorded = model.recorded(query, case.mode)
        if recorded is None:
            raise GtaUnavailableError(
                f"{model.name} has no recorded {case.mode} prediction for query {query.qid}"
            )
        predictions, gold = recorded.predictions, recorded.gold
    else:
        step_model = work.step_model if work is not None else None
        played, scored = _generated(case, ctx, step_model, ahead)
        episode, backends, agent = played.episode, played.backends, played.agent
        predictions, gold = episode.predictions, episode.gold
        replies, usage = [t.reply for t in episode.turns], played.usage
        model_s = played.model_s
        faults = played.fault_entries()
    if scored is None:
        scored = ctx.scorer.score(case.mode, query, predictions, gold)
    score, verdict = scored
    ahead_s = ahead.seconds if ahead is not None else None
    result, nonfinite = case_result(
        case,
        predictions=predictions,
        score=score,
        verdict=verdict,
        replies=replies,
        usage=usage,
        # An episode played ahead took its time in the pool, before the case began.
        duration=time.perf_counter() - start + (ahead_s or 0.0),
        backends=backends,
        agent=agent,
        model_s=model_s,
        faults=faults,
    )
    return CaseRun(case, model.name, result, predictions, gold, score, nonfinite)


def _generated(
    case: Case, ctx: RunContext, step_model: BaseModelAdapter | None, ahead: Ahead | None
) -> tuple[Played, tuple[Any, Any] | None]:
    """The model's (or the agent's) episode of ``case``, and (score, verdict) if scored."""
    model = ctx.model
    if case.mode == "e2e" and ctx.agent is not None and ahead is None:
        return play(case, ctx, cast(BaseModelAdapter, model)), None
    if not base.generates(model):
        raise TypeError(f"{model.name} neither generates nor replays predictions")
    if case.mode == "step":
        episode = loops.run_step(ctx.dataset, case.query, step_model or model, epoch=case.epoch)
        return Played(episode), None
    if ahead is None:
        return play(case, ctx, model), None
    if isinstance(ahead.outcome, BaseException):
        raise ahead.outcome
    return ahead.outcome, ahead.scored
