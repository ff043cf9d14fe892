"""One end-to-end episode, however it is scheduled (``pytest_gta.run.episode``).

A case's episode runs in pytest's thread (``play``), in a pool thread (``Pipeline``) or in
lockstep with the others (``open_episode`` driven by ``run_lockstep``); each way must give the
same steps and the same backends, since a report must not depend on scheduling. The model is
the oracle (the reference chain) and the tools the replay backend, both real.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gta.case import Case
from pytest_gta.errors import GtaUnavailableError
from pytest_gta.models import base
from pytest_gta.models.base import BaseModelAdapter, BaseRecordedSource, Recorded
from pytest_gta.models.oracle import OracleModel
from pytest_gta.run import loops
from pytest_gta.run.ahead import AheadWork, strategy
from pytest_gta.run.context import RunContext
from pytest_gta.run.episode import open_episode, play
from pytest_gta.run.pipeline import Pipeline
from pytest_gta.run.runner import run_case
from pytest_gta.tools import ToolSet
from pytest_gta.types import ModelOutput, ModelRequest
from tests.helpers.run_context import run_context

#: Sample queries whose chains call tools (0: one call; 5: the longest chain).
QUERIES = ("0", "5")


def test_an_episode_is_the_same_in_the_loop_the_pool_and_lockstep(sample_dataset, tmp_path):
    model = OracleModel(sample_dataset)
    ctx = run_context(sample_dataset, tmp_path, model, concurrency=2)
    cases = [Case("e2e", sample_dataset[q]) for q in QUERIES]
    played = [play(case, ctx, model) for case in cases]
    assert [len(p.episode.turns) for p in played] == [
        len(sample_dataset[q].assistant_indices) for q in QUERIES
    ]
    for case, one in zip(cases, played, strict=True):
        assert set(one.backends) == set(case.query.tool_names)
        assert set(one.backends.values()) == {"replay"}

    opened = [open_episode(case, ctx, model.protocol) for case in cases]
    lockstep = loops.run_lockstep(model, [o.steps for o in opened])

    pipeline = Pipeline(ctx)
    pipeline.submit(cases)
    pooled = [pipeline.take(case) for case in cases]
    pipeline.close()

    for one, other, opening, ahead in zip(played, lockstep, opened, pooled, strict=True):
        assert isinstance(other, loops.Episode)
        assert other.predictions == one.episode.predictions
        assert opening.backends == one.backends
        assert ahead is not None
        assert not isinstance(ahead.outcome, BaseException)
        assert ahead.outcome.episode.predictions == one.episode.predictions
        assert ahead.outcome.backends == one.backends
        assert ahead.scored is not None
        assert ahead.scored[1].passed


def test_no_tool_backends_is_unavailable_before_any_request(sample_dataset, tmp_path):
    model = OracleModel(sample_dataset)
    ctx = run_context(sample_dataset, tmp_path, model)
    bare = RunContext(ctx.dataset, model, ctx.scorer, None, tmp_path)
    with pytest.raises(GtaUnavailableError, match=r"end-to-end mode needs tool backends"):
        play(Case("e2e", sample_dataset["0"]), bare, model)
    empty = RunContext(ctx.dataset, model, ctx.scorer, ToolSet([]), tmp_path)
    with pytest.raises(GtaUnavailableError, match=r"no tool backend offers .*configured: none"):
        open_episode(Case("e2e", sample_dataset["0"]), empty, model.protocol)


class _Batching(OracleModel):
    prefetch_steps = True


class _Recordings(BaseRecordedSource):
    name = "recordings"

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def recorded(self, query: Any, mode: Any) -> Recorded | None:
        if query.qid != "0":
            return None
        gold = [self.dataset.reference_dialogs(query)[i] for i in query.assistant_indices]
        return Recorded(gold, gold)


def test_one_place_decides_how_a_process_generates(sample_dataset):
    oracle, batching, recordings = (
        OracleModel(sample_dataset),
        _Batching(sample_dataset),
        _Recordings(sample_dataset),
    )
    assert strategy(oracle, 1, worker=False) == "serial"
    assert strategy(oracle, 4, worker=False) == "pool"
    assert strategy(batching, 4, worker=False) == "batch"
    assert strategy(batching, 4, worker=True) == "pool"  # a worker does not know its cases
    assert strategy(batching, 1, worker=True) == "serial"
    assert strategy(recordings, 4, worker=False) == "serial"
    assert base.can_prefetch_steps(batching)
    assert not base.can_prefetch_episodes(batching)
    assert base.replays(recordings)
    assert not base.generates(recordings)
    assert base.default_concurrency(recordings) == 1
    assert base.warm_up_of(recordings) is None


class _Refusing(BaseModelAdapter):
    name = "refusing"

    def generate(self, request: ModelRequest) -> ModelOutput:
        raise AssertionError(f"asked {request.case}: the answer was generated ahead")


def test_a_step_case_takes_the_answers_generated_ahead(sample_dataset, tmp_path):
    """run_case decides which model answers: here the step answers batched before the loop."""
    case = Case("step", sample_dataset["0"])
    ctx = run_context(sample_dataset, tmp_path, _Refusing())
    work = AheadWork(lambda: ctx, lambda: ctx.model)
    requests = [r for r, _ in loops.step_requests(sample_dataset, case.query)]
    work.step_model = loops.Prefetched.run(OracleModel(sample_dataset), requests)
    result = run_case(case, ctx, work)
    assert result.passed
    assert result.model == "refusing"
    assert len(result.replies) == len(requests)


def test_recorded_predictions_are_looked_up_not_generated(sample_dataset, tmp_path):
    ctx = run_context(sample_dataset, tmp_path, _Recordings(sample_dataset))
    result = run_case(Case("step", sample_dataset["0"]), ctx)
    assert result.passed
    assert result.replies == []
    assert result.result.backends == {}
    with pytest.raises(GtaUnavailableError, match="recordings has no recorded e2e prediction"):
        run_case(Case("e2e", sample_dataset["1"]), ctx, AheadWork(lambda: ctx, lambda: ctx.model))
