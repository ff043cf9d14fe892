"""SIGTERM ends a GTA run as Ctrl-C does; an interrupt during teardown waits for it.

Python's default SIGTERM disposition kills the process on the spot: no report, no JUnit XML,
and xdist workers (started by the controller, which no longer tells them anything) go on
calling the model until execnet notices the lost controller. CI runners, ``timeout(1)``,
``docker stop`` and batch schedulers all stop a job with SIGTERM, so a GTA run turns it into
a :class:`Terminated` raised in the main thread. It is a ``KeyboardInterrupt``, so pytest,
xdist and every ``except Exception`` between them treat it exactly as Ctrl-C: the session
ends with pytest's interrupted status (2), the cases that finished are reported with
``"interrupted": true``, and xdist sees a worker's interruption as its own.

The handlers also stop this process's work at once, before the exception unwinds anything:
the pool running episodes ahead refuses new model requests (:meth:`Pipeline.halt
<pytest_gta.run.pipeline.Pipeline.halt>`, lock-free, as a signal handler must be), and the xdist
controller passes SIGTERM on to its workers, which a signal sent to the controller's pid alone
never reaches.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that pytest ends the session as on Ctrl-C."""


#: A SIGTERM this soon after the run's first interrupt is the same request, not an insistence:
#: ``timeout(1)`` signals both its child and the child's process group, and an xdist worker
#: gets the group's SIGTERM and then the controller's.
REPEAT_S = 1.0

#: The signals a run turns into an interruption, with the name the report gives each.
HANDLED = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


class Interrupts:
    """The session's SIGINT and SIGTERM handlers (main thread only), and what they saw.

    Args:
        halt: called first in the handler, in the main thread between two bytecodes: it must
            take no lock the interrupted code may hold (set flags, send signals).
        worker: an xdist worker, whose controller ends it: a SIGTERM after its first
            interrupt is ignored, so the worker's own report and shutdown are never cut short.
    """

    def __init__(self, halt: Callable[[str], None], *, worker: bool = False) -> None:
        self._halt = halt
        self._worker = worker
        self._previous: dict[int, Any] = {}
        #: ``time.monotonic()`` of the first interrupt, and its cause (``Ctrl-C``, ``SIGTERM``).
        self.first: float | None = None
        self.cause: str | None = None
        #: Signals that arrived while :meth:`deferred` held them back.
        self.held: list[str] = []

    def install(self) -> None:
        """Take over SIGTERM, and SIGINT where Python's own Ctrl-C handler has it.

        A SIGINT that a user or a plugin set up otherwise (ignored by a shell's background
        job, or handled) is left alone, as is every signal outside the main thread, where
        ``signal.signal`` cannot be called.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        for number in HANDLED:
            current = signal.getsignal(number)
            if number == signal.SIGINT and current is not signal.default_int_handler:
                continue
            if number == signal.SIGTERM and current not in (signal.SIG_DFL, None):
                continue
            self._previous[number] = current
            signal.signal(number, self._handle)

    def restore(self) -> None:
        """Give the signals back their handlers from before :meth:`install`."""
        if threading.current_thread() is not threading.main_thread():
            return
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous.clear()

    def interrupted(self, cause: str) -> None:
        """Stop the work in flight (also for an interrupt raised by code, not by a signal)."""
        if self.first is None:
            self.first, self.cause = time.monotonic(), cause
        self._halt(cause)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """An interrupt raised by code, not by a signal: stop the work still running too.

        A plugin's ``KeyboardInterrupt``, or xdist's ``Interrupted`` on the controller when a
        worker was interrupted (by a signal sent to it alone): the other workers then stop at
        once rather than when execnet gives up on them.
        """
        self.interrupted(cause_of(excinfo, self))

    def _handle(self, number: int, frame: FrameType | None) -> None:
        cause = HANDLED[signal.Signals(number)]
        if number == signal.SIGTERM and self.first is not None:
            if self._worker or time.monotonic() - self.first < REPEAT_S:
                return
        self.interrupted(cause)
        if number == signal.SIGTERM:
            raise Terminated("received SIGTERM: the run stops as on Ctrl-C")
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold SIGINT and SIGTERM back while the session's services shut down.

        Teardown is short and bounded (a model server gets a grace period, then SIGKILL); an
        interrupt arriving in it asks for what is already happening, and raised there it would
        only leave a traceback and a half-stopped service. It is noted in :attr:`held`.
        """
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {number: signal.getsignal(number) for number in HANDLED}

        def hold(number: int, frame: FrameType | None) -> None:
            self.held.append(HANDLED[signal.Signals(number)])

        for number, handler in previous.items():
            if handler is not signal.SIG_IGN:
                signal.signal(number, hold)
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)


#: The session's :class:`Interrupts`, where :func:`install` put them.
INTERRUPTS = pytest.StashKey[Interrupts]()
#: Their name as a plugin (for ``pytest_keyboard_interrupt``).
INTERRUPTS_PLUGIN = "gta-interrupts"


def install(config: pytest.Config, halt: Callable[[str], None], *, worker: bool) -> Interrupts:
    """Install the session's handlers; keep them in ``config.stash`` and as a plugin.

    ``worker``: this process is an xdist worker (its controller reports the interruption).
    """
    interrupts = Interrupts(halt, worker=worker)
    interrupts.install()
    config.stash[INTERRUPTS] = interrupts
    config.pluginmanager.register(interrupts, INTERRUPTS_PLUGIN)
    return interrupts


def cause_of(excinfo: pytest.ExceptionInfo[BaseException], interrupts: Interrupts | None) -> str:
    """What interrupted the session, as the report says it (``SIGTERM``, ``Ctrl-C``, ...).

    An xdist controller ends with xdist's own ``Interrupted`` when a worker was interrupted
    (by a signal sent to it alone, say); that is neither the user's Ctrl-C nor our SIGTERM.
    """
    if interrupts is not None and interrupts.cause is not None:
        return interrupts.cause
    if isinstance(excinfo.value, Terminated):
        return "SIGTERM"
    if type(excinfo.value) is KeyboardInterrupt:
        return "Ctrl-C"
    return "an interrupted worker"
