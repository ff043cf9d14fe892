"""Episodes running ahead of pytest's loop (``--gta-concurrency``), black box and in parts.

The model is a real HTTP server on 127.0.0.1 (``tests/helpers/oracle_server.py``) answering with the
reference chain after a fixed latency, talked to by the official ``openai`` SDK; it counts the
requests it holds at once, which is how these tests see concurrency without timing anything.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.case import Case
from pytest_gta.errors import GtaBudgetExhausted
from pytest_gta.models.base import BaseModelAdapter, BaseRecordedSource
from pytest_gta.run import loops
from pytest_gta.run.ahead import upcoming
from pytest_gta.run.context import RunContext
from pytest_gta.run.pipeline import Pipeline, Stopped
from pytest_gta.session.xdist import ahead_scheduling
from pytest_gta.types import ModelOutput, ModelRequest
from tests.helpers.gta_run import FAST_SIM, NO_HYPOTHESIS, untimed
from tests.helpers.optional import require
from tests.helpers.oracle_server import OracleServer
from tests.helpers.processes import default_sigint
from tests.helpers.run_context import run_context

MODEL = "--gta-model=openai/oracle-http"


@pytest.fixture
def oracle(sample_dataset: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[OracleServer]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-pipeline-test")
    with OracleServer(sample_dataset, latency=0.05) as server:
        yield server


def _base(server: OracleServer) -> list[str]:
    """The flags of every run here: the sample against the fake model, no response cache."""
    return [
        "-p",
        "no:randomly",
        "--gta-data=sample",
        MODEL,
        f"--gta-base-url={server.url}",
        "--gta-cache=off",
    ]


def _run(pytester: pytest.Pytester, server: OracleServer, *args: str) -> dict[str, Any]:
    server.reset()
    result = pytester.runpytest_subprocess(
        *_base(server),
        FAST_SIM,
        "--gta-mode=step,e2e",
        "--gta-report=gta.json",
        *args,
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    report: dict[str, Any] = json.loads((pytester.path / "gta.json").read_text())
    return report


def _comparable(report: dict[str, Any]) -> dict[str, Any]:
    keys = ("metrics", "metrics_excluding_errors", "errors", "outcomes", "usage", "by_type")
    cases = [
        {k: case[k] for k in ("id", "outcome", "score", "steps", "replies", "properties")}
        for case in report["cases"]
    ]
    return untimed({"cases": cases, **{k: report[k] for k in keys}})


def test_results_do_not_depend_on_concurrency_or_xdist(pytester, oracle):
    """Serial, 8 at once, and two workers 4 at once: the same cases, replies and metrics.

    The runs score through the test session's similarity service; where the model loads in a
    run of its own (the controller, never a worker) is
    test_similarity_service.py::test_workers_import_no_torch_and_the_controller_loads_once.
    """
    serial = _run(pytester, oracle, "--gta-concurrency=1")
    assert oracle.peak == 1
    calls = oracle.calls
    ahead = _run(pytester, oracle, "--gta-concurrency=8")
    assert oracle.peak > 1
    assert oracle.calls == calls
    workers = _run(pytester, oracle, "-n", "2", "--gta-concurrency=4")
    assert oracle.calls == calls
    assert _comparable(ahead) == _comparable(serial)
    assert _comparable(workers) == _comparable(serial)
    assert serial["outcomes"]["passed"] == 34  # 17 sample queries x 2 modes
    assert {"gw0", "gw1"} <= set(workers["timings"])
    for worker in ("gw0", "gw1"):
        assert "similarity_load_s" not in workers["timings"][worker]
        assert workers["timings"][worker]["peak_rss_mb"] > 0


def test_the_default_for_an_http_model_runs_episodes_at_once(pytester, oracle):
    _run(pytester, oracle, "--gta-ids=0,1,2,3,4,5")
    assert oracle.peak > 1


def test_xdist_worker_queue_is_readable(pytester):
    """Pins the xdist internal the pipeline reads: a worker's queue of item indices."""
    pytester.makepyfile(
        test_queue="""
        import json, os
        import pytest
        from pytest_gta.session.xdist import xdist_queue

        @pytest.mark.parametrize("n", range(64))
        def test_peek(n, request):
            seen = xdist_queue(request.config)
            assert isinstance(seen, list) and all(isinstance(i, int) for i in seen)
            name = request.config.workerinput["workerid"] + f"-{n}.json"
            with open(os.path.join(os.environ["QUEUE_DIR"], name), "w") as fh:
                json.dump(seen, fh)
        """
    )
    out = pytester.path / "queues"
    out.mkdir()
    os.environ["QUEUE_DIR"] = str(out)
    try:
        result = pytester.runpytest_subprocess("-n", "2", "-p", "no:randomly")
    finally:
        del os.environ["QUEUE_DIR"]
    result.assert_outcomes(passed=64)
    seen = [json.loads(p.read_text()) for p in out.iterdir()]
    # while a worker ran its first tests, more of its tests were waiting in its queue
    assert any(seen)


def test_x_stops_the_episodes_running_ahead(pytester, sample_dataset, monkeypatch):
    """``-x``: the first failure stops the pool; no request goes out after the session."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-pipeline-test")
    objective = "0,1,2,3,4,5,6,10,11,12"  # no similarity model to load: the pool starts at once
    with OracleServer(sample_dataset, latency=0.3, wrong=frozenset({"0"})) as server:
        result = pytester.runpytest_subprocess(
            *_base(server),
            "--gta-mode=step",
            f"--gta-ids={objective}",
            "--gta-concurrency=2",
            "-x",
        )
        result.assert_outcomes(failed=1)
    # Read once the process has exited and the server is closed: what the run ever sent.
    made = server.calls
    prompts = sum(len(sample_dataset[q].assistant_indices) for q in objective.split(","))
    # the first case fails once its own prompts are answered; two at a time, little else ran
    assert made <= len(sample_dataset["0"].assistant_indices) + 4 < prompts


def test_a_spent_budget_stops_the_pool(pytester, oracle):
    result = pytester.runpytest_subprocess(
        *_base(oracle),
        FAST_SIM,
        "--gta-concurrency=4",
        "--gta-max-tokens-total=1",
        "--gta-report=gta.json",
    )
    report = json.loads((pytester.path / "gta.json").read_text())
    assert report["stopped"].startswith("token budget exhausted")
    assert report["outcomes"]["error"] == 0
    # the first answer spends the budget: only the calls already in flight (4) were made
    assert oracle.calls <= 4
    result.stdout.fnmatch_lines(["*budget*"])


def test_no_pool_thread_outlives_the_session(pytester, oracle):
    require("similarity")
    result = pytester.runpytest(
        *_base(oracle),
        FAST_SIM,
        "--gta-mode=step",
        "--gta-concurrency=6",
        "--maxfail=1",
    )
    assert result.ret == 0
    assert [t.name for t in threading.enumerate() if t.name.startswith("gta-episode")] == []


def test_ctrl_c_stops_the_run_and_its_requests(tmp_path, sample_dataset):
    env = dict(os.environ, OPENAI_API_KEY="sk-pipeline-test")
    env.pop("PYTEST_ADDOPTS", None)
    with OracleServer(sample_dataset, latency=0.5) as server:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                *NO_HYPOTHESIS,
                "-p",
                "no:randomly",
                "-p",
                "no:cacheprovider",
                "--gta-data=sample",
                MODEL,
                f"--gta-base-url={server.url}",
                "--gta-cache=off",
                FAST_SIM,
                "--gta-concurrency=8",
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=default_sigint,
        )
        deadline = time.monotonic() + 60
        while server.calls < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    # Read once the process has exited and the server is closed: what the run ever sent.
    made = server.calls
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output[-2000:]
    assert "KeyboardInterrupt" in output
    # the whole run would make every reference call plus one closing turn per episode (65)
    assert made < sum(len(query.calls) + 1 for query in sample_dataset)


# -- the pool on its own ------------------------------------------------------------------------


class _Counting(BaseModelAdapter):
    """A model whose answers wait on events, to see what the pool started and held at once.

    ``together``: the first that many requests wait until all of them are in flight (a
    barrier), which they reach only if the pool runs that many at once. Every request then
    waits for ``release``. ``peak`` is the most requests it held at once.
    """

    name = "counting"

    def __init__(self, together: int = 1) -> None:
        self.started: list[tuple[str, int]] = []
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.peak = 0
        self._together = threading.Barrier(together)
        self._held = 0
        self._lock = threading.Lock()

    def generate(self, request: ModelRequest) -> ModelOutput:
        with self._lock:
            self.started.append((request.case.qid, request.case.index))
            first = len(self.started) <= self._together.parties
            self._held += 1
            self.peak = max(self.peak, self._held)
        self.arrived.set()
        try:
            if first:
                self._together.wait(10)  # broken (and the test failed) if fewer run at once
            self.release.wait(10)
        finally:
            with self._lock:
                self._held -= 1
        return ModelOutput("Thought: done\nFinal Answer: 9.24")


@pytest.fixture
def context(sample_dataset: Any, tmp_path: Path) -> Callable[..., RunContext]:
    """``context(model, concurrency=1, budgeted=False)``: a run's context on the sample."""

    def make(model: BaseModelAdapter, concurrency: int = 1, budgeted: bool = False) -> RunContext:
        return run_context(
            sample_dataset, tmp_path, model, concurrency=concurrency, budgeted=budgeted
        )

    return make


def test_the_pool_runs_at_most_n_and_takes_in_any_order(context, sample_dataset):
    model = _Counting(together=3)
    model.release.set()
    pipeline = Pipeline(context(model, concurrency=3))
    cases = [Case("step", sample_dataset[q]) for q in ("0", "1", "2")]
    prompts = sum(len(loops.step_requests(sample_dataset, c.query)) for c in cases)
    assert pipeline.submit(cases) == 3
    assert pipeline.submit(cases) == 0  # never twice
    episode = loops.run_step(sample_dataset, cases[2].query, pipeline.step_model)
    assert len(episode.predictions) == len(loops.step_requests(sample_dataset, cases[2].query))
    pipeline.close()
    assert len(model.started) == prompts
    assert model.peak == 3  # N at once (the first three met), never more


def test_a_stopped_pool_drops_work_not_started(context, sample_dataset):
    model = _Counting()
    pipeline = Pipeline(context(model, concurrency=1))
    cases = [Case("step", sample_dataset[q]) for q in ("0", "1", "2", "3")]
    pipeline.submit(cases)
    assert model.arrived.wait(10)
    pipeline.stop(Stopped("-x"))
    model.release.set()
    pipeline.close()
    assert len(model.started) == 1
    with pytest.raises(Stopped):
        pipeline.check()
    assert pipeline.submit(cases[3:]) == 0


def test_a_budget_stop_is_raised_as_the_budget(context):
    pipeline = Pipeline(context(_Counting(), concurrency=2))
    pipeline.stop(GtaBudgetExhausted("the token budget (60) is spent"))
    with pytest.raises(GtaBudgetExhausted, match="60"):
        pipeline.check()
    pipeline.close()


class _Recordings(BaseRecordedSource):
    name = "recordings"

    def recorded(self, query: Any, mode: Any) -> None:
        return None


def test_recorded_predictions_have_no_pool(context):
    with pytest.raises(TypeError, match="recordings replays recorded predictions"):
        Pipeline(context(_Recordings()))


@pytest.mark.slow  # 5 s in a full run: slow by cost (issue 39)
def test_upcoming_without_xdist_is_every_item(pytester):
    items = pytester.getitems("def test_a(): pass\ndef test_b(): pass\n")
    session = items[0].session
    session.items = items
    assert list(upcoming(session.items, items[0], items[1], None)) == items
    # in an xdist worker: the item, the next one, and what is queued (the index it cannot hold
    # dropped: a queue entry is only ever an index of this session's items)
    assert list(upcoming(items, items[0], items[1], [1, 7])) == [items[0], items[1], items[1]]


def test_defaults_fit_the_model():
    from pytest_gta.models.chat import ChatAdapter
    from pytest_gta.models.llamacpp import LlamaCppChat
    from pytest_gta.models.local_engine import EngineChat

    assert BaseModelAdapter.concurrency == 1
    assert ChatAdapter.concurrency == 16
    assert LlamaCppChat.concurrency == 1
    assert EngineChat.concurrency == 1  # its batches must not depend on thread timing


def test_bad_concurrency_is_a_usage_error(pytester):
    result = pytester.runpytest("--gta-data=sample", "--gta-model=oracle", "--gta-concurrency=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gta-concurrency=0: give a positive number of episodes*"])


class _Node:
    """What xdist's load scheduling needs of a worker: a queue it sends indices to."""

    shutting_down = False

    def __init__(self, name: str) -> None:
        self.sent: list[int] = []
        self.gateway = type("Gateway", (), {"id": name})()

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def _scheduled(pytester: pytest.Pytester, make: Any) -> list[int]:
    """How many items a worker holds after finishing slow cases, under scheduling ``make``."""
    config = pytester.parseconfig("--tx", "2*popen")
    scheduling = make(config, None)
    nodes = [_Node("gw0"), _Node("gw1")]
    collection = [f"test_{i}" for i in range(400)]
    for node in nodes:
        scheduling.add_node(node)
        scheduling.add_node_collection(node, collection)
    scheduling.schedule()
    node = nodes[0]
    held = []
    for _ in range(80):  # cases that each waited 2 s for their episode
        scheduling.mark_test_complete(node, scheduling.node2pending[node][0], duration=2.0)
        held.append(len(scheduling.node2pending[node]))
    return held


def test_ahead_scheduling_hands_every_case_out_at_once(pytester):
    """xdist's own load scheduling starves a worker whose cases take long; ours cannot."""
    from xdist.scheduler import LoadScheduling

    plain = _scheduled(pytester, LoadScheduling)
    ahead = _scheduled(pytester, ahead_scheduling)
    assert min(plain) <= 2  # the internal behaviour this works around
    # every case handed out at the start, in turn: 200 each, minus the 80 finished
    assert ahead == list(range(199, 119, -1))


def _first_started(context: Callable[..., RunContext], sample_dataset: Any, budgeted: bool) -> str:
    model = _Counting()
    pipeline = Pipeline(context(model, concurrency=1, budgeted=budgeted))
    pipeline.submit([Case("e2e", sample_dataset[q]) for q in ("0", "5")])
    assert model.arrived.wait(10)
    model.release.set()
    pipeline.close()
    return model.started[0][0]


def test_the_longest_episode_starts_first(context, sample_dataset):
    assert len(sample_dataset["5"].assistant_indices) > len(sample_dataset["0"].assistant_indices)
    assert _first_started(context, sample_dataset, budgeted=False) == "5"


def test_under_a_budget_episodes_start_in_pytest_order(context, sample_dataset):
    assert _first_started(context, sample_dataset, budgeted=True) == "0"


def test_ctrl_c_during_a_load_lands_in_the_waiting_thread(tmp_path):
    """A SIGINT while the similarity model loads interrupts the wait at once, in a frame pytest
    can render (a CI run saw Ctrl-C inside a deep import crash pytest's report of it)."""
    script = tmp_path / "load.py"
    script.write_text(
        "import os, signal, sys, threading, time, traceback\n"
        "from pytest_gta.run.ahead import interruptibly\n"
        "started = threading.Event()\n"
        "def load():\n"
        "    started.set()\n"
        "    time.sleep(60)\n"
        "threading.Thread(target=lambda: (started.wait(), time.sleep(0.2),"
        " os.kill(os.getpid(), signal.SIGINT))).start()\n"
        "t = time.perf_counter()\n"
        "try:\n"
        "    interruptibly(load)\n"
        "except KeyboardInterrupt as exc:\n"
        "    frame = traceback.extract_tb(exc.__traceback__)[-1]\n"
        "    where = os.path.basename(frame.filename), frame.lineno > 0\n"
        "    print('interrupted', *where, round(time.perf_counter() - t))\n"
        "def boom():\n"
        "    raise ValueError('no weights')\n"
        "try:\n"
        "    interruptibly(boom)\n"
        "except ValueError as exc:\n"
        "    print('raised', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        preexec_fn=default_sigint,
    )
    assert done.stdout.splitlines() == ["interrupted threading.py True 0", "raised no weights"], (
        done.stderr
    )
