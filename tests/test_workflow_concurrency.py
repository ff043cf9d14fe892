"""GTA-Workflow tasks produced and judged ahead of their tests (``--gta-concurrency``).

The pool (:class:`pytest_gta.run.ahead_pool.AheadPool`) in parts, with work that waits on
barriers and events; then black box: the scripted judge (``tests/helpers/judge_server.py``'s
:class:`CountingJudge`) holds its first requests until two are in flight, which a run that
overlaps tasks reaches at once and a serial one never does, so nothing here is timed.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks.official_workflow_judge import recorded_requests
from pytest_gta.errors import GtaBudgetExhausted, GtaUnavailableError
from pytest_gta.run.ahead_pool import AheadPool, Check
from pytest_gta.run.pipeline import Stopped
from tests.helpers.gta_run import gta, untimed
from tests.helpers.judge_server import (
    WORKFLOW_DATA,
    WORKFLOW_SAMPLE,
    CountingJudge,
    judged_run,
)

#: A bound on every wait of the pool's tests: catches a hang, never reached when all is well.
BOUND_S = 10.0
SCRIPT = WORKFLOW_DATA / "judge_script.json"


def _jobs(n: int) -> list[tuple[str, int]]:
    return [(f"case-{i}", i) for i in range(n)]


def _no_param(item: pytest.Item) -> int | None:
    return None


class Recorder:
    """Work that records where it ran and what it saw, optionally held at a barrier or event."""

    def __init__(self, meet: threading.Barrier | None = None) -> None:
        self.meet = meet
        self.release = threading.Event()
        self.hold = False
        self.ran: dict[int, str] = {}
        self.now = self.peak = 0
        self._lock = threading.Lock()

    def __call__(self, key: str, param: int, check: Check) -> str:
        with self._lock:
            self.ran[param] = threading.current_thread().name
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            if self.meet is not None:
                self.meet.wait(BOUND_S)
            if self.hold:
                assert self.release.wait(BOUND_S)
            check()
            return f"done {key}"
        finally:
            with self._lock:
                self.now -= 1


def test_the_pool_runs_n_at_once_and_each_case_takes_its_own_result() -> None:
    work = Recorder(threading.Barrier(3))
    pool: AheadPool[int, str] = AheadPool(work, 3, _no_param)
    assert pool.submit(_jobs(6)) == 6
    assert pool.submit(_jobs(6)) == 0  # fed again as pytest moves on: nothing new
    # Taken in another order than started: each case gets its own.
    assert [pool.take(key, p) for key, p in reversed(_jobs(6))] == [
        f"done case-{i}" for i in reversed(range(6))
    ]
    pool.close()
    # Three met at the barrier each time (a smaller pool never would), never more at once.
    assert work.peak == 3
    assert all(name.startswith("gta-ahead") for name in work.ran.values())
    assert [t for t in threading.enumerate() if t.name.startswith("gta-ahead")] == []


def test_what_the_work_raises_is_raised_in_the_case_as_if_it_ran_there() -> None:
    raised: dict[int, BaseException] = {}

    def work(key: str, param: int, check: Check) -> str:
        try:
            if param == 0:
                raise GtaUnavailableError("the tool server is down")
            if param == 1:
                pytest.skip("the eval pack has no task 1")
            if param == 2:
                raise ValueError("a bug")
        except BaseException as exc:
            raised[param] = exc
            raise
        return "judged"

    pool: AheadPool[int, str] = AheadPool(work, 4, _no_param)
    pool.submit(_jobs(4))
    kinds = (GtaUnavailableError, pytest.skip.Exception, ValueError)
    for (key, param), kind in zip(_jobs(3), kinds, strict=True):
        with pytest.raises(kind) as caught:
            pool.take(key, param)
        assert caught.value is raised[param]  # the very exception, not a wrapper
    assert pool.take("case-3", 3) == "judged"
    pool.close()


def test_a_stopped_session_drops_work_not_started_and_ends_work_in_flight() -> None:
    """``-x``: the two tasks in flight end at their next check, the three waiting never start."""
    arrived = threading.Barrier(3)  # the two tasks in flight, and this test
    work = Recorder(arrived)
    work.hold = True
    pool: AheadPool[int, str] = AheadPool(work, 2, _no_param)
    pool.submit(_jobs(5))
    arrived.wait(BOUND_S)
    pool.after(SimpleNamespace(shouldstop=False, shouldfail="stopping after 1"))  # type: ignore[arg-type]
    work.release.set()
    for key, param in _jobs(2):
        with pytest.raises(Stopped, match="stopping after 1"):
            pool.take(key, param)
    pool.close()
    assert sorted(work.ran) == [0, 1]
    # A dropped case that pytest runs anyway runs its own work, in its own thread.
    work.meet, work.hold = None, False
    assert pool.take("case-2", 2) == "done case-2"
    assert work.ran[2] == threading.current_thread().name


def test_a_spent_budget_in_one_task_stops_the_others() -> None:
    started = threading.Barrier(2)
    release = threading.Event()
    ran: list[int] = []

    def work(key: str, param: int, check: Check) -> str:
        ran.append(param)
        started.wait(BOUND_S)
        if param == 0:
            raise GtaBudgetExhausted("token budget exhausted: 120 of 1")
        assert release.wait(BOUND_S)
        check()  # the next paid call of the task in flight
        return "judged"

    pool: AheadPool[int, str] = AheadPool(work, 2, _no_param)
    pool.submit(_jobs(4))
    with pytest.raises(GtaBudgetExhausted):
        pool.take("case-0", 0)
    release.set()
    with pytest.raises(GtaBudgetExhausted, match="token budget exhausted"):
        pool.take("case-1", 1)
    pool.close()
    assert sorted(ran) == [0, 1]


def test_at_concurrency_one_every_case_runs_its_own_work() -> None:
    work = Recorder()
    pool: AheadPool[int, str] = AheadPool(work, 1, _no_param)
    assert pool.submit(_jobs(3)) == 0
    assert pool.take("case-0", 0) == "done case-0"
    pool.close()
    assert work.ran == {0: threading.current_thread().name}


# -- black box -----------------------------------------------------------------------------------
def _cases(report: dict[str, Any]) -> list[Any]:
    return [untimed(case) for case in report["cases"]]


def _multiset(requests: list[dict[str, Any]]) -> Counter[str]:
    return Counter(json.dumps(r, sort_keys=True) for r in requests)


def test_tasks_judged_at_once_give_the_serial_runs_cases_and_requests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    official = json.loads((WORKFLOW_DATA / "official_scores.json").read_text(encoding="utf-8"))
    unconverted = {r["sha256"] for r in official["requests"] if r.get("sha256")}
    serial, serial_judge, _ = judged_run(pytester)
    judge = CountingJudge.from_script(SCRIPT)
    judge.meet = 2
    ahead, _, _ = judged_run(pytester, "--gta-concurrency=8", judge=judge)
    assert 2 <= judge.peak <= 8, ahead.output
    # The same cases (the failed judge call of task 8 errors that task alone), in pytest's order.
    assert _cases(ahead.report) == _cases(serial.report)
    assert [c["outcome"] for c in ahead.report["cases"]].count("error") == 1
    assert untimed(ahead.report["metrics"]) == untimed(serial.report["metrics"])
    # Each task's calls in the official order; all tasks' calls the official ones, in any order.
    in_order = recorded_requests(serial_judge, unconverted)
    assert in_order == official["requests"]
    assert _multiset(recorded_requests(judge, unconverted)) == _multiset(in_order)
    assert [t for t in threading.enumerate() if t.name.startswith("gta-task")] == []


#: A model in pytest's process that says it is not written for threads (concurrency 1): it
#: waits a moment for company in each call, and writes the most calls it ever held at once.
COUNTING_MODEL = """
import json, pathlib, threading
from pytest_gta.models.mock import MockModel

FLIGHT = threading.Condition()
STATE = {"now": 0, "peak": 0}

class Counting(MockModel):
    def generate(self, request):
        with FLIGHT:
            STATE["now"] += 1
            STATE["peak"] = max(STATE["peak"], STATE["now"])
            FLIGHT.notify_all()
            FLIGHT.wait_for(lambda: STATE["now"] > 1, timeout=0.2)
        try:
            return super().generate(request)
        finally:
            with FLIGHT:
                STATE["now"] -= 1
                pathlib.Path("model-peak").write_text(json.dumps(STATE["peak"]))

def pytest_gta_make_model(config, spec, context):
    if spec == "counting":
        return Counting(pathlib.Path(config.rootpath, "script.json"), context.dataset)
"""


def test_a_producer_not_written_for_threads_produces_one_task_at_a_time(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The project's loop on such a model runs alone; the tasks' judging overlaps, and the
    task whose producer fails is the only error."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    pytester.makeconftest(COUNTING_MODEL)
    answer = "Thought: done\nFinal Answer: The deliverable is ready."
    script = {"1": [answer], "2": [{"error": "the model is down"}], "3": [answer]}
    (pytester.path / "script.json").write_text(
        json.dumps({"responses": {f"e2e-{tid}": r for tid, r in script.items()}}),
        encoding="utf-8",
    )
    judge = CountingJudge(default='{"score": 8, "analysis": "fine"}', meet=2).start()
    try:
        run = gta(
            pytester,
            f"--gta-data={WORKFLOW_SAMPLE}",
            "--gta-model=counting",
            "--gta-ids=1,2,3",
            "--gta-tools=local",
            f"--gta-judge-base-url={judge.base_url}",
            "--gta-concurrency=4",
        )
    finally:
        judge.stop()
    assert json.loads(Path(pytester.path, "model-peak").read_text()) == 1
    assert judge.peak >= 2, run.output
    outcomes = {c["task_id"]: c["outcome"] for c in run.report["cases"]}
    assert outcomes == {"1": "passed", "2": "error", "3": "passed"}, run.output
    run.result.assert_outcomes(passed=2, errors=1)  # type: ignore[union-attr]
    assert "workflow-2: infrastructure error: mock endpoint error: the model is down" in run.output


def test_a_spent_budget_stops_the_tasks_not_started(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first answer spends the budget: only the calls already sent (one per task in
    flight) reach the judge, and the session stops as a serial run does."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    run, judge, _ = judged_run(pytester, "--gta-concurrency=2", "--gta-max-tokens-total=1")
    assert 1 <= len(judge.response_calls()) <= 2
    run.result.assert_outcomes(skipped=1)  # type: ignore[union-attr]
    assert "token budget exhausted" in run.output
