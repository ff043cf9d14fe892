"""Work run ahead of pytest's loop, N at a time, each piece taken back by its own case.

pytest runs one test after another, so a case whose work waits on a remote service (a judge, a
model endpoint) waits alone. :class:`AheadPool` starts the work of the cases this process will
run before pytest reaches them, in pytest's order, in a pool of N threads
(``--gta-concurrency``), keyed by the item's node id; the test of a case then takes its own
result (:meth:`AheadPool.take`). It comes back as if the work had run in the case: what the
work raised (a spent budget, a service that is down, ``pytest.skip``'s exception) is raised in
the test's thread, and a case whose work was never submitted, or was dropped, runs it there. So
pytest's order, its reports, ``-x``, ``--lf`` and ``-k`` behave as in a serial run. With N = 1
nothing runs ahead: every case runs its own work, exactly as without a pool.

Which cases the process will run is what :func:`pytest_gta.run.ahead.upcoming` says: every item
without xdist, the items queued for it so far in an xdist worker.

Stopping is the role the episodes' pool shares (:class:`pytest_gta.run.pipeline.Stoppable`): a
spent budget, ``-x``/``--maxfail`` and Ctrl-C drop the work not yet started; work in flight
sees the stop at its next :data:`Check` (made before each paid call) and :meth:`AheadPool.close`
waits for it, so no pool thread outlives the session.

GTA-Workflow's tasks are produced and judged this way (:mod:`pytest_gta.benchmarks.gta_workflow`):
a task's own judge calls stay sequential, in the official order; different tasks overlap.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import Generic, TypeVar

import pytest

from pytest_gta.errors import GtaBudgetExhausted
from pytest_gta.run.ahead import runs_cases, upcoming
from pytest_gta.run.pipeline import Stoppable, Stopped

P = TypeVar("P")
R = TypeVar("R")

#: Raises the reason the pool stopped, if it did: what work calls before each paid call.
Check = Callable[[], None]
#: The work of one case: ``(node id, parameter, check) -> result``; it may raise.
Work = Callable[[str, P, Check], R]


def unchecked() -> None:
    """The :data:`Check` of work run in its own case: nothing stops it but its own failure."""


class AheadPool(Stoppable, Generic[P, R]):
    """Up to ``concurrency`` cases' work run ahead in threads, taken back case by case.

    Args:
        work: one case's work, ``(node id, parameter, check) -> result``; it calls ``check``
            before each paid call, so work in flight ends once the pool stops.
        concurrency: how many run at once; 1: nothing runs ahead (each case runs its own).
        param_of: an item's parameter, or ``None`` for items whose work is not this pool's.
        queued: in an xdist worker, the indices of the session's items queued for it so far
            (:func:`pytest_gta.session.xdist.xdist_queue`); ``None`` in a process that runs
            every item.
    """

    def __init__(
        self,
        work: Work[P, R],
        concurrency: int,
        param_of: Callable[[pytest.Item], P | None],
        *,
        queued: Callable[[], Sequence[int]] | None = None,
        name: str = "gta-ahead",
    ) -> None:
        super().__init__()
        self._work = work
        self.concurrency = concurrency
        self._param_of = param_of
        self._queued = queued
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._futures: dict[str, Future[R]] = {}
        self._submitted: set[str] = set()

    # -- submitting --------------------------------------------------------------------------
    def submit(self, jobs: Iterable[tuple[str, P]]) -> int:
        """Start the work of ``(node id, parameter)`` pairs not started yet; how many were new.

        In the order given (pytest's): under a budget, the calls it paid for then belong to the
        cases reported before the session stops.
        """
        if self.concurrency <= 1:
            return 0
        new = 0
        with self._lock:
            for key, param in jobs:
                if self._reason is not None or self._halted is not None:
                    break
                if key in self._submitted:
                    continue
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix=self._name)
                self._submitted.add(key)
                self._futures[key] = self._pool.submit(self._run, key, param)
                new += 1
        return new

    def feed(self, items: Sequence[pytest.Item]) -> int:
        """Start the work of ``items`` (this pool's among them) not started yet."""
        jobs = []
        for item in items:
            param = self._param_of(item)
            if param is not None:
                jobs.append((item.nodeid, param))
        return self.submit(jobs)

    @contextlib.contextmanager
    def running(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        """Around a test: start what this process runs from ``item`` on; stop if the session does.

        Nothing runs ahead in a process that runs no test (``--collect-only``, an xdist
        controller, ``--setup-plan``).
        """
        session = item.session
        if self.concurrency <= 1 or not runs_cases(session.config):
            yield
            return
        queued = None if self._queued is None else self._queued()
        self.feed(upcoming(session.items, item, nextitem, queued))
        try:
            yield
        finally:
            self.after(session)

    def _run(self, key: str, param: P) -> R:
        """One case's work, in a pool thread; what it raises is kept for its case."""
        self.check()  # halted while it waited: its case will not run
        try:
            return self._work(key, param, self.check)
        except GtaBudgetExhausted as exc:
            self.stop(exc)
            raise

    # -- taking ------------------------------------------------------------------------------
    def take(self, key: str, param: P) -> R:
        """The work of the case ``key``: waited for, or run here if it never started.

        What the work raised is raised here, in the case's thread, as if it had run here.
        """
        future = self._futures.pop(key, None)
        if future is not None:
            try:
                return future.result()
            except CancelledError:  # dropped when the pool stopped: the case runs it itself
                pass
        return self._work(key, param, unchecked)

    # -- stopping ----------------------------------------------------------------------------
    def _drop(self) -> None:
        for future in list(self._futures.values()):
            future.cancel()

    def close(self) -> None:
        """Stop and wait for the work in flight; no pool thread outlives this call."""
        self.stop(Stopped("the session ended"))
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
