"""pytest-xdist's wire protocol for a GTA session, in one place.

With ``-n N`` the controller process collects, schedules and reports while N worker processes
run the cases. The two talk only through xdist's ``workerinput`` (what the controller sends a
starting worker: :class:`WorkerInput`'s keys) and ``workeroutput`` (what a finished worker sends
back: :data:`TIMINGS_OUTPUT`, :data:`SHARD_OUTPUT`). Every key, and every question "am I a
worker?", lives here, so a new value travelling between the processes is one edit in this
module, and the rest of the code asks :func:`worker_input` instead of poking ``config``.

:class:`XdistBridge` is the controller's side: a plugin registered only when xdist is active,
built with what it hands out (the session's state and collector) rather than looking them up.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gta.progress import WORKER_LABEL

if TYPE_CHECKING:
    from pytest_gta.session.collector import Collector

#: ``workerinput``: the usage ledger's path (one budget for the whole session).
LEDGER_INPUT = "gta_ledger"
#: ``workerinput``: the image store's directory (:meth:`GtaState.image_store`).
IMAGES_INPUT = "gta_images"
#: ``workerinput``: the controller's similarity service, ``[url, token]``.
SIMILARITY_INPUT = "gta_similarity"
#: ``workerinput``: the managed model server
#: (:class:`pytest_gta.session.model_server.Served` fields).
SERVED_INPUT = "gta_serve"
#: ``workeroutput``: the worker's loading and generation times (``{name: seconds}``).
TIMINGS_OUTPUT = "gta_timings"
#: ``workeroutput``: ``--gta-shard``'s selection as the worker computed it.
SHARD_OUTPUT = "gta_shard"
#: ``workeroutput``: what the worker collected besides GTA cases (a project's tests), as notes.
PROJECT_OUTPUT = "gta_project_tests"


def worker_input(config: pytest.Config) -> Mapping[str, Any] | None:
    """What the controller sent this process, or ``None`` when it is not an xdist worker."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput if isinstance(workerinput, Mapping) else None


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is an xdist worker (the controller compares, judges and writes)."""
    return worker_input(config) is not None


def worker_id(config: pytest.Config) -> str | None:
    """This worker's id (``gw0``), or ``None`` in the controller or without xdist."""
    workerinput = worker_input(config)
    return None if workerinput is None else str(workerinput.get("workerid", "worker"))


def send_to_controller(config: pytest.Config, key: str, value: Any) -> bool:
    """Put ``value`` in this worker's ``workeroutput``; ``False`` where this is no worker."""
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is None:
        return False
    workeroutput[key] = value
    return True


def announce_worker(config: pytest.Config) -> None:
    """Let :func:`pytest_gta.progress.say` prefix this worker's lines with its id."""
    worker = worker_id(config)
    if worker is not None:
        config.stash[WORKER_LABEL] = worker


class XdistBridge:
    """The controller's side: hands each worker the session's shared services, takes results.

    Shared with the workers (``send``, asked once per starting worker): the usage ledger (one
    budget per session), the image store, the similarity service (the model loads once, here)
    and the managed model server. Taken back: each worker's timings and ``--gta-shard``'s
    selection, handed to the collector.
    """

    def __init__(
        self,
        collector: Collector,
        send: Callable[[], dict[str, Any]],
        runs_ahead: Callable[[], bool],
    ) -> None:
        self.collector = collector
        self.send = send
        self.runs_ahead = runs_ahead
        #: The local workers' processes still running, by gateway id (SIGTERM reaches them).
        self.workers: dict[str, Any] = {}

    def pytest_xdist_newgateway(self, gateway: Any) -> None:
        """Remember a local worker's process, so that an interrupt can be passed on to it."""
        popen = getattr(getattr(gateway, "_io", None), "popen", None)  # execnet's Popen2IOMaster
        if isinstance(popen, subprocess.Popen):
            self.workers[str(gateway.id)] = popen

    def terminate_workers(self) -> None:
        """SIGTERM each worker still running: it stops as on Ctrl-C and reports what finished.

        A SIGTERM or SIGINT sent to the controller's pid alone never reaches the workers, which
        would keep calling the model until execnet gives up on them (5 s, then SIGINT). In a
        signal handler: ``send_signal`` does nothing for a process already reaped.
        """
        for popen in list(self.workers.values()):
            with contextlib.suppress(OSError):
                popen.send_signal(signal.SIGTERM)

    def pytest_configure_node(self, node: Any) -> None:
        """Tell a starting worker where the session's ledger, model server and similarity are."""
        node.workerinput.update(self.send())

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """With ``--dist load`` and episodes running ahead, keep every worker's queue full."""
        if config.getvalue("dist") != "load" or not self.runs_ahead():
            return None
        return ahead_scheduling(config, log)

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """Collect a finished worker's loading and generation times for the report."""
        self.workers.pop(str(getattr(node.gateway, "id", "")), None)
        workeroutput = getattr(node, "workeroutput", {})
        timings = workeroutput.get(TIMINGS_OUTPUT)
        if isinstance(timings, dict):
            self.collector.add_timings(str(node.workerinput.get("workerid", "worker")), timings)
        # Every worker computed the same split; the first one to finish tells the controller.
        shard = workeroutput.get(SHARD_OUTPUT)
        if isinstance(shard, dict):
            self.collector.set_shard(shard, first=True)
        self.collector.add_notes(workeroutput.get(PROJECT_OUTPUT))


class CollectionCheck:
    """The controller's look at each worker's collection, before any case is sent to it.

    Under xdist only the workers collect, and a worker that raises a usage error from its
    collection crashes xdist (an INTERNALERROR); the controller hears of each worker's
    collected node ids here, with the selection final, and may refuse the run from this hook
    (pytest's usage error, exit status 4), before the scheduler hands out a case.
    """

    def __init__(self, check: Callable[[list[str]], None]) -> None:
        self.check = check

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """Hand the worker's collected node ids to the check (which may raise a usage error)."""
        self.check(list(ids))


def ledger_from_controller(config: pytest.Config) -> Path | None:
    """The usage ledger the controller shares, in a worker (``None`` elsewhere)."""
    workerinput = worker_input(config)
    sent = None if workerinput is None else workerinput.get(LEDGER_INPUT)
    return Path(sent) if sent else None


def xdist_queue(config: pytest.Config) -> list[int] | None:
    """Indices of the items queued for this xdist worker, or ``None`` where it cannot tell.

    xdist 3.x keeps them in ``WorkerInteractor.torun``, a queue with a ``lock()`` context that
    yields its deque of item indices (and a shutdown marker).
    """
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ != "WorkerInteractor":
            continue
        torun = getattr(plugin, "torun", None)
        lock = getattr(torun, "lock", None)
        if not callable(lock):
            return None
        try:
            with lock() as queued:
                return [i for i in list(queued) if isinstance(i, int)]
        except Exception:  # a changed internal: run ahead what the hook arguments show
            return None
    return None


def ahead_scheduling(config: pytest.Config, log: Any) -> Any:
    """The ``load`` scheduling of xdist, with every case handed out at the start.

    xdist sends a worker a quarter of the run in turn, then refills its queue as tests finish,
    holding back while the worker's last test took 0.1 s or more and it still has two queued
    (``LoadScheduling.check_schedule(node, duration)``): right for slow tests, wrong here,
    where a case's time is spent waiting for work that runs ahead and the cases a worker knows
    of are what it can run ahead. So every case is handed out at once, in turn (the run's
    order is mixed enough for that to balance, and each worker runs many at once), and a
    crashed worker's cases are refilled regardless of duration. Pinned by
    ``tests/test_pipeline.py::test_ahead_scheduling_*``.
    """
    # xdist is an optional third-party plugin: imported only where it is running.
    from xdist.scheduler import LoadScheduling

    class AheadScheduling(LoadScheduling):  # type: ignore[misc]
        def schedule(self) -> None:
            super().schedule()
            # Hand out the rest now, in turn, so every worker knows its whole share and runs
            # it ahead; a crashed worker's share goes back to the others as usual.
            nodes = [node for node in self.nodes if not node.shutting_down]
            if self.collection is None or not self.pending or not nodes:
                return
            while self.pending:
                for node in nodes:
                    self._send_tests(node, 1)
            for node in nodes:
                node.shutdown()

        def check_schedule(self, node: Any, duration: float = 0) -> None:
            super().check_schedule(node, 0)

    return AheadScheduling(config, log)
