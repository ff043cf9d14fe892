"""SIGTERM and SIGINT end a run cleanly, with and without xdist (issue 23, items 16 and 17).

Each black-box test runs pytest in a real subprocess against a real model server on 127.0.0.1
that answers slowly, signals it once the server has seen enough requests (an event, not a
sleep), and reads the exit status, the JSON report, the terminal and the server's request log:
no request may reach the server later than :data:`GRACE_S` after the signal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.signals import REPEAT_S, Interrupts, Terminated
from tests.helpers.gta_run import FAST_SIM, NO_HYPOTHESIS, SAMPLE_DATA
from tests.helpers.processes import default_sigint
from tests.helpers.scripted_server import Recorded, ScriptedServer, Step, chat_completion

#: Each answer takes this long, so a request sent after the signal would be a new turn.
ANSWER_S = 1.0
#: A request this long after the signal was made after it (the slack is for a loaded machine).
GRACE_S = 0.5


class SlowServer(ScriptedServer):
    """A model server that logs when each request came and wakes the test at the n-th."""

    def __init__(self, wake_at: int) -> None:
        super().__init__(models=["m"], default=self._answer)
        self.times: list[float] = []
        self.wake_at = wake_at
        self.woken = threading.Event()

    def _answer(self, record: Recorded) -> Step:
        self.times.append(time.monotonic())
        if len(self.times) >= self.wake_at:
            self.woken.set()
        return Step(chat_completion("Final Answer: ok"), delay=ANSWER_S)


def start(tmp_path: Path, server: SlowServer, *args: str, group: bool = False) -> Any:
    env = {**os.environ}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            *NO_HYPOTHESIS,
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            SAMPLE_DATA,
            FAST_SIM,
            "--gta-model=openai/m",
            f"--gta-base-url={server.url}",
            "--gta-cache=off",
            "--gta-report=gta.json",
            # At most 4 connections at once: the server's listen backlog is 5, and a connection
            # beyond it is retried by the kernel a second later, as if sent after the signal.
            "--gta-concurrency=2",
            *args,
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_sigint,
        start_new_session=group,
    )


def interrupt(process: Any, server: SlowServer, number: int, *, group: bool = False) -> str:
    """Send the signal once the server woke; the run's output (the run must end in 120 s)."""
    assert server.woken.wait(120), "the run made too few requests"
    assert process.poll() is None, process.communicate()[0]
    sent = time.monotonic()
    if group:
        os.killpg(process.pid, number)
    else:
        process.send_signal(number)
    try:
        output: str = process.communicate(timeout=120)[0]
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    late = [round(t - sent, 2) for t in server.times if t > sent + GRACE_S]
    assert not late, f"requests {late} s after the signal\n{output[-3000:]}"
    return output


def interrupted_report(tmp_path: Path, output: str, cause: str) -> dict[str, Any]:
    assert "Traceback" not in output, output[-3000:]
    assert "INTERNALERROR" not in output, output[-3000:]
    report: dict[str, Any] = json.loads((tmp_path / "gta.json").read_text())
    assert report["interrupted"] is True
    assert report["interrupted_by"] == cause
    assert (
        f"the run was interrupted ({cause}): the metrics cover only the cases that finished"
        in (report["notes"])
    )
    finished = len(report["cases"])
    assert f"INTERRUPTED ({cause}): these tables cover the {finished} case(s)" in output
    return report


@pytest.mark.parametrize(
    "how",
    [
        pytest.param(([], False), id="no-xdist"),
        pytest.param((["-n", "2"], False), id="xdist-controller-pid"),
        pytest.param((["-n", "2"], True), id="xdist-process-group"),
    ],
)
def test_sigterm_ends_the_run_as_ctrl_c_does(tmp_path, how):
    """Mid-run: cases have finished, episodes are in flight, more are queued."""
    args, group = how
    with SlowServer(wake_at=5) as server:
        process = start(tmp_path, server, *args, group=group)
        output = interrupt(process, server, signal.SIGTERM, group=group)
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]
    report = interrupted_report(tmp_path, output, "SIGTERM")
    assert "received SIGTERM: the run stops as on Ctrl-C" in output
    # What finished is reported, and nothing else: 17 cases, one request each, never reached.
    # A finished case passed or failed on its answer ("ok" mentions no reference answer of most
    # queries); one the signal cut off is left out, never reported as an error.
    cases = [(c["id"], c["outcome"], c.get("message")) for c in report["cases"]]
    assert len(cases) < 17, cases
    assert {outcome for _, outcome, _ in cases} <= {"passed", "failed"}, cases
    outcomes = report["outcomes"]
    assert outcomes["passed"] + outcomes["failed"] == len(cases), (outcomes, cases)
    assert outcomes["error"] == 0, cases


@pytest.mark.parametrize("args", [[], ["-n", "2"]], ids=["no-xdist", "xdist"])
def test_ctrl_c_before_any_case_finished_leaves_an_empty_report(tmp_path, args):
    with SlowServer(wake_at=1) as server:
        process = start(tmp_path, server, *args)
        output = interrupt(process, server, signal.SIGINT)
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]
    report = interrupted_report(tmp_path, output, "Ctrl-C")
    assert report["cases"] == []


# -- the handlers on their own ---------------------------------------------------------------


@pytest.fixture
def handlers():
    """Interrupts installed in this (main) thread, with what their ``halt`` was told."""
    halted: list[str] = []
    made: list[Interrupts] = []

    def make(*, worker: bool = False) -> tuple[Interrupts, list[str]]:
        interrupts = Interrupts(halted.append, worker=worker)
        interrupts.install()
        made.append(interrupts)
        return interrupts, halted

    previous = {n: signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)}
    yield make
    for interrupts in made:
        interrupts.restore()
    assert {n: signal.getsignal(n) for n in previous} == previous


def signal_self(number: int) -> None:
    os.kill(os.getpid(), number)
    time.sleep(5)  # the handler raises at the next bytecode


def test_sigterm_raises_once_per_request(handlers):
    interrupts, halted = handlers()
    with pytest.raises(Terminated):
        signal_self(signal.SIGTERM)
    assert isinstance(Terminated(), KeyboardInterrupt)  # pytest's and xdist's Ctrl-C path
    os.kill(os.getpid(), signal.SIGTERM)  # timeout(1) signals the child and its group
    assert halted == ["SIGTERM"]
    interrupts.first = time.monotonic() - REPEAT_S - 1  # a later SIGTERM insists
    with pytest.raises(Terminated):
        signal_self(signal.SIGTERM)
    assert halted == ["SIGTERM", "SIGTERM"]
    assert interrupts.cause == "SIGTERM"


def test_a_worker_takes_one_sigterm(handlers):
    interrupts, halted = handlers(worker=True)
    with pytest.raises(KeyboardInterrupt):
        signal_self(signal.SIGINT)
    interrupts.first = time.monotonic() - REPEAT_S - 1
    os.kill(os.getpid(), signal.SIGTERM)  # the controller's, after the group's Ctrl-C
    assert halted == ["Ctrl-C"]


def test_interrupts_during_teardown_are_held(handlers):
    """What ``pytest_unconfigure`` does while the similarity service and model server stop."""
    interrupts, halted = handlers()
    with interrupts.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
    assert sorted(interrupts.held) == ["Ctrl-C", "SIGTERM"]
    assert halted == []
    assert signal.getsignal(signal.SIGTERM) == interrupts._handle
